"""Board tops: elaboration for both boards, board names, and the board glue in simulation.

* ``test_board_elaborates``: the Colorlight and Versa tops elaborate into a build plan
  (no synthesis): the NIC core with two RGMII ports, the PLL, the pins and the 125 MHz
  constraints of the RGMII receive clocks are in it.
* ``test_hostmem_*`` / ``test_board_regs``: the block-RAM host memory (AXI4 bursts with
  backpressure, out-of-range SLVERR, the UART word window) and the board registers
  (work-request post, completion pop) in the Amaranth simulator.

* ``test_build_*``: the build driver with stand-in tools: a design packed above 85 % of
  the device stops before placement (no bitstream, the reason and the packed numbers in
  the summary); below it, place and route, report parsing and the bitstream.

No test builds a real bitstream yet: the Colorlight NIC packs to 88 % of the LFE5U-25F,
where nextpnr does not place it, and does not meet 125 MHz at speed 6 (docs/boards.md
has the measured numbers); ``mrcnic build`` runs a build by hand.
"""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In
from amaranth.sim import Simulator

from mrcnic.boards.build import (build_board, make_top, parse_pnr_utilisation, parse_report,
                                 parse_yosys_stat, resolve_board)
from mrcnic.boards.common import AxilSplit, BoardRegs, HostMemory
from mrcnic.rtl.port_admin import PortAdminGate
from mrcnic.rtl.layouts import Completion, WorkRequest


# ---------------------------------------------------------------------------------------------
# the build driver, with stand-in tools (the real ones take minutes to hours)
# ---------------------------------------------------------------------------------------------
FAKE_TOOL = r"""#!{python}
import json, sys
args = sys.argv[1:]
tool = {tool!r}
if tool == "yosys":                      # the netlist nextpnr would read, and the cell counts
    open("top.json", "w").write(json.dumps({{"modules": {{"top": {{"cells": {{}}, "ports": {{}},
                                                                  "netnames": {{}}}}}}}}))
    open("top.stat", "w").write("   100 cells\n      80   LUT4\n      20   TRELLIS_FF\n")
elif tool == "nextpnr":
    log = args[args.index("--log") + 1]
    comb = {comb}
    if "--pack-only" in args and {pack_fails!r}:
        print("boom")
        sys.exit(1)
    text = ("Info: Device utilisation:\n"
            f"Info: \t        TRELLIS_COMB:   {{comb}}/  24288    {{100 * comb // 24288}}%\n"
            "Info: \t          TRELLIS_FF:   17603/  24288    72%\n")
    open(log, "w").write(text)
    open("calls", "a").write(" ".join(args) + "\n")
    if "--pack-only" not in args:
        rep = {{"fmax": {{"$glbnet$clk": {{"achieved": 131.5, "constraint": 125.0}}}},
               "utilization": {{"TRELLIS_COMB": {{"used": comb, "available": 24288}}}}}}
        open("top.report.json", "w").write(json.dumps(rep))
        open("top.config", "w").write("")
else:
    open("top.bit", "wb").write(b"bit")
"""


def fake_tools(tmp_path, monkeypatch, comb, pack_fails=False):
    import sys
    for tool, var in (("yosys", "YOSYS"), ("nextpnr", "NEXTPNR_ECP5"), ("ecppack", "ECPPACK")):
        path = tmp_path / f"fake-{tool}"
        path.write_text(FAKE_TOOL.format(python=sys.executable, tool=tool, comb=comb,
                                         pack_fails=pack_fails))
        path.chmod(0o755)
        monkeypatch.setenv(var, str(path))


def test_build_stops_before_placement_when_packed_too_full(tmp_path, monkeypatch):
    # packed at 88 % of the 25F: no placement is run, no bitstream, the reason is reported
    fake_tools(tmp_path, monkeypatch, comb=21553)
    steps = []
    s = build_board("colorlight", tmp_path / "b", progress=lambda *a: steps.append(a[:2]))
    root = tmp_path / "b" / "colorlight-5a75b"
    calls = (root / "calls").read_text().splitlines()
    assert len(calls) == 1 and "--pack-only" in calls[0] and "--25k" in calls[0]
    assert ("pnr", "failed") in steps and ("pack", "start") not in steps
    assert not s["fits"] and s["bitstream"] is None and not s["timing_met"]
    assert s["luts"] == 21553 and s["utilisation"]["TRELLIS_COMB"]["available"] == 24288
    assert "88.7 %" in s["error"] and "85 %" in s["error"]
    assert not (root / "top.bit").exists()


def test_build_over_the_device_does_not_fit(tmp_path, monkeypatch):
    fake_tools(tmp_path, monkeypatch, comb=30000)
    s = build_board("colorlight", tmp_path / "b")
    assert not s["fits"] and s["bitstream"] is None
    assert s["error"] == "the design does not fit LFE5U-25F: TRELLIS_COMB 30000 / 24288"


def test_build_failed_pack_check_leaves_the_verdict_to_pnr(tmp_path, monkeypatch):
    # a first build leaves pack_check.log at 88 %; a pack-only run that fails is no verdict
    fake_tools(tmp_path, monkeypatch, comb=21553)
    build_board("colorlight", tmp_path / "b")
    fake_tools(tmp_path, monkeypatch, comb=20000, pack_fails=True)
    s = build_board("colorlight", tmp_path / "b")
    assert s["fits"] and s["error"] is None and s["bitstream"].endswith("top.bit")


def test_build_places_when_packed_below_limit(tmp_path, monkeypatch):
    fake_tools(tmp_path, monkeypatch, comb=20000)
    s = build_board("colorlight", tmp_path / "b")
    calls = (tmp_path / "b" / "colorlight-5a75b" / "calls").read_text().splitlines()
    assert len(calls) == 2 and "--pack-only" in calls[0] and "--pack-only" not in calls[1]
    assert s["fits"] and s["error"] is None and s["bitstream"].endswith("top.bit")
    assert s["timing_met"] and s["fmax_mhz"] == 131.5 and s["luts"] == 20000


# ---------------------------------------------------------------------------------------------
# elaboration
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("board,pins", [
    ("colorlight-5a75b", ["M2", "M1", "M12", "M16", "P11", "M13", "P6"]),
    ("versa", ["P19", "L20", "C20", "J19", "A11", "C11"]),
])
def test_board_elaborates(board, pins):
    platform, top = make_top(board)
    plan = platform.prepare(top, name="top")
    lpf = plan.files["top.lpf"]
    for pin in pins:
        assert f'SITE "{pin}"' in lpf, pin
    assert 'FREQUENCY NET "eth0_rxc" 125000000.0 HZ' in lpf
    assert 'FREQUENCY NET "eth1_rxc" 125000000.0 HZ' in lpf
    il = plan.files["top.il"]
    assert "EHXPLLL" in il and "ODDRX1F" in il and "IDDRX1F" in il
    for name in ("nic", "nic.csr", "nic.nic", "mac0", "mac1", "hostmem", "uart", "board_regs"):
        assert f"top.{name}" in il, name
    assert ("--25k" if board.startswith("colorlight") else "--um-45k") in plan.files["build_top.sh"]


def test_board_names():
    assert resolve_board("colorlight") == "colorlight-5a75b"
    assert resolve_board("versa-ecp5") == "versa-ecp5"
    with pytest.raises(ValueError, match="unknown board 'arty'.*colorlight-5a75b"):
        resolve_board("arty")


def test_report_parsing():
    report = {"fmax": {"clk125": {"achieved": 131.2, "constraint": 125.0},
                       "eth0_rxc": {"achieved": 190.0, "constraint": 125.0},
                       "clk25": {"achieved": 300.0, "constraint": 25.0}},
              "utilization": {"DP16KD": {"used": 30, "available": 56}}}
    r = parse_report(report)
    assert r["fmax_mhz"] == 131.2 and r["timing_met"]
    report["fmax"]["eth0_rxc"]["achieved"] = 120.0
    r = parse_report(report)
    assert r["fmax_mhz"] == 120.0 and not r["timing_met"]
    log = "=== top ===\n\n   Number of cells:   10\n     DP16KD    3\n     LUT4    7\n\n"
    assert parse_yosys_stat(log) == {"DP16KD": 3, "LUT4": 7}
    pnr = ("Info: Device utilisation:\nInfo: \t          TRELLIS_IO:    31/  197    15%\n"
           "Info: \t        TRELLIS_COMB: 30000/24288   123%\n")
    assert parse_pnr_utilisation(pnr) == {"TRELLIS_IO": {"used": 31, "available": 197},
                                          "TRELLIS_COMB": {"used": 30000, "available": 24288}}


# ---------------------------------------------------------------------------------------------
# board glue in the Amaranth simulator
# ---------------------------------------------------------------------------------------------
def _sim(dut, bench, *, deadline=20_000):
    sim = Simulator(dut)
    sim.add_clock(8e-9)
    sim.add_testbench(bench)
    sim.run_until(deadline * 8e-9)


async def _axi_write(ctx, a, addr, words, strb=0xFF):
    ctx.set(a.awaddr, addr)
    ctx.set(a.awlen, len(words) - 1)
    ctx.set(a.awid, 3)
    ctx.set(a.awvalid, 1)
    await ctx.tick().until(a.awready)
    ctx.set(a.awvalid, 0)
    for i, w in enumerate(words):
        ctx.set(a.wdata, w)
        ctx.set(a.wstrb, strb)
        ctx.set(a.wlast, i == len(words) - 1)
        ctx.set(a.wvalid, 1)
        await ctx.tick().until(a.wready)
    ctx.set(a.wvalid, 0)
    ctx.set(a.bready, 1)
    bresp, bid = await ctx.tick().sample(a.bresp, a.bid).until(a.bvalid)
    ctx.set(a.bready, 0)
    assert bid == 3
    return bresp


async def _axi_read(ctx, a, addr, beats, rng=None):
    ctx.set(a.araddr, addr)
    ctx.set(a.arlen, beats - 1)
    ctx.set(a.arid, 5)
    ctx.set(a.arvalid, 1)
    await ctx.tick().until(a.arready)
    ctx.set(a.arvalid, 0)
    got = []
    while True:
        ready = 1 if rng is None else rng.random() < 0.6
        ctx.set(a.rready, ready)
        _, _, valid, *beat = await ctx.tick().sample(a.rvalid, a.rdata, a.rresp, a.rlast, a.rid)
        if ready and valid:                  # the beat taken at this edge
            got.append(tuple(beat))
            if beat[2]:
                break
    ctx.set(a.rready, 0)
    return got


def test_hostmem_axi_bursts():
    dut = HostMemory(2048)
    a = dut.s_axi
    rng = random.Random(7)
    words = [rng.getrandbits(64) for _ in range(16)]

    async def bench(ctx):
        await ctx.tick()
        assert await _axi_write(ctx, a, 0x100, words) == 0
        # a partial write: only bytes 0..1 of the first beat
        assert await _axi_write(ctx, a, 0x100, [0xFFFF_FFFF_FFFF_FFFF], strb=0b11) == 0
        # out of range: the burst crosses the end -> SLVERR, nothing in range overwritten
        assert await _axi_write(ctx, a, 2048 - 8, [1, 2]) == 2
        got = await _axi_read(ctx, a, 0x100, 16, rng)
        expect = [(words[0] & ~0xFFFF) | 0xFFFF] + words[1:]
        assert [g[0] for g in got] == expect
        assert all(g[1] == 0 and g[3] == 5 for g in got)
        assert [g[2] for g in got] == [0] * 15 + [1]
        got = await _axi_read(ctx, a, 2048 - 8, 2)
        assert got[0][0] == 1 and got[0][1] == 0
        assert got[1][0] == 0 and got[1][1] == 2
    _sim(dut, bench)


def test_hostmem_window():
    dut = HostMemory(2048)
    a = dut.s_axi

    async def bench(ctx):
        await ctx.tick()
        assert await _axi_write(ctx, a, 0x40, [0x1111_2222_3333_4444]) == 0
        for addr, we, data in ((0x10, 0, None), (0x11, 1, 0xDEADBEEF), (0x11, 0, None)):
            ctx.set(dut.win_addr, addr)
            ctx.set(dut.win_we, we)
            ctx.set(dut.win_re, not we)
            ctx.set(dut.win_wdata, data or 0)
            rdata, = await ctx.tick().sample(dut.win_rdata).until(dut.win_done)
            ctx.set(dut.win_we, 0)
            ctx.set(dut.win_re, 0)
            await ctx.tick()
            if addr == 0x10:
                assert rdata == 0x3333_4444
            elif not we:
                assert rdata == 0xDEADBEEF
        got = await _axi_read(ctx, a, 0x40, 1)
        assert got[0][0] == 0xDEAD_BEEF_3333_4444
    _sim(dut, bench)


class _RegsHarness(wiring.Component):
    def __init__(self):
        self.regs = BoardRegs(512)
        self.split = AxilSplit()
        self.mem = HostMemory(2048)
        super().__init__({"rx_counters": In(data.ArrayLayout(32, 10)), "rx_free": In(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs, m.submodules.split, m.submodules.mem = self.regs, self.split, self.mem
        wiring.connect(m, self.split.m1_axil, self.regs.s_axil)
        r, h = self.regs, self.mem
        m.d.comb += [h.win_addr.eq(r.win_addr), h.win_we.eq(r.win_we), h.win_re.eq(r.win_re),
                     h.win_wdata.eq(r.win_wdata), r.win_rdata.eq(h.win_rdata),
                     r.win_done.eq(h.win_done)]
        # the MACs' RX counter read ports (EthMacRx cnt_*): the word at mac_rd_addr,
        # registered, loaded only while ``rx_free`` (the counter RAM is not busy)
        for p in range(2):
            with m.If(self.rx_free):
                m.d.sync += r.mac_rd_data[p].eq(
                    self.rx_counters.as_value().word_select(5 * p + r.mac_rd_addr, 32))
            m.d.sync += r.mac_rd_fresh[p].eq(self.rx_free)
        return m


async def _lite_write(ctx, s, addr, value):
    ctx.set(s.awaddr, addr)
    ctx.set(s.wdata, value)
    ctx.set(s.wstrb, 0xF)
    ctx.set(s.awvalid, 1)
    ctx.set(s.wvalid, 1)
    ctx.set(s.bready, 1)
    aw = w = False
    while True:
        _, _, awready, wready, bvalid, resp = await ctx.tick().sample(s.awready, s.wready, s.bvalid,
                                                                s.bresp)
        aw = aw or (awready and not aw)
        w = w or (wready and not w)
        ctx.set(s.awvalid, not aw)
        ctx.set(s.wvalid, not w)
        if bvalid:
            break
    ctx.set(s.bready, 0)
    return resp


async def _lite_read(ctx, s, addr):
    ctx.set(s.araddr, addr)
    ctx.set(s.arvalid, 1)
    await ctx.tick().until(s.arready)
    ctx.set(s.arvalid, 0)
    ctx.set(s.rready, 1)
    data, resp = await ctx.tick().sample(s.rdata, s.rresp).until(s.rvalid)
    ctx.set(s.rready, 0)
    return data, resp


class _SplitHarness(wiring.Component):
    """AxilSplit with the CSR bank (register map defaults) on m0 and BoardRegs on m1."""

    def __init__(self):
        from mrcnic.rtl.csr import CsrBank
        self.split, self.csr, self.regs = AxilSplit(), CsrBank(), BoardRegs(512)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.split, m.submodules.csr, m.submodules.regs = self.split, self.csr, self.regs
        wiring.connect(m, self.split.m0_axil, self.csr.s_axil)
        wiring.connect(m, self.split.m1_axil, self.regs.s_axil)
        m.d.comb += [self.regs.win_done.eq(self.regs.win_we | self.regs.win_re),
                     self.regs.mac_rd_fresh.eq(0b11)]      # MAC counter RAMs never busy
        return m


async def _split_write(ctx, s, addr, value, order):
    """AW and W in ``order`` ("aw" first, "w" first or "both"); checks the AXI4-Lite rules:
    each ready only while the split holds nothing of that channel, B held until bready."""
    chans = {"aw": ((s.awaddr, addr), s.awvalid, s.awready),
             "w": ((s.wdata, value), s.wvalid, s.wready)}
    ctx.set(s.wstrb, 0xF)
    firsts = ["aw", "w"] if order == "both" else [order]
    for group in (firsts, [c for c in ("aw", "w") if c not in firsts]):
        for c in group:
            (sig, v), valid, _ = chans[c]
            ctx.set(sig, v)
            ctx.set(valid, 1)
        pending = set(group)
        while pending:
            _, _, awready, wready = await ctx.tick().sample(s.awready, s.wready)
            for c, ready in (("aw", awready), ("w", wready)):
                if c in pending and ready:          # taken at this edge
                    ctx.set(chans[c][1], 0)
                    pending.discard(c)
        assert not ctx.get(s.awready if "aw" in group else s.wready)    # held: not ready
    await ctx.tick().until(s.bvalid)
    await ctx.tick().repeat(2)                  # B waits for bready
    assert ctx.get(s.bvalid) and not ctx.get(s.awready) and not ctx.get(s.wready)
    ctx.set(s.bready, 1)
    await ctx.tick()
    resp = ctx.get(s.bresp)
    ctx.set(s.bready, 0)
    assert not ctx.get(s.bvalid) and ctx.get(s.awready) and ctx.get(s.wready)
    return resp


def test_axil_split():
    dut = _SplitHarness()
    s = dut.split.s_axil

    async def bench(ctx):
        await ctx.tick().repeat(80)             # the CSR bank's readback copy initialises
        assert await _lite_read(ctx, s, 0x000) == (0x4D52434E, 0)          # ID_MAGIC (m0)
        assert await _lite_read(ctx, s, 0x800) == (0x42524431, 0)          # BOARD_MAGIC (m1)
        assert (await _lite_read(ctx, s, 0x7FC))[1] == 2                    # m0 unmapped
        for i, order in enumerate(("aw", "w", "both")):
            assert await _split_write(ctx, s, 0x100, 0x1000 + i, order) == 0       # m0
            assert await _split_write(ctx, s, 0x810, 0x2000 + i, order) == 0       # m1
            assert await _lite_read(ctx, s, 0x100) == (0x1000 + i, 0)
            assert await _lite_read(ctx, s, 0x810) == (0x2000 + i, 0)
            assert ctx.get(dut.csr.nic_src_mac_lo) == 0x1000 + i
        assert await _split_write(ctx, s, 0x7FC, 1, "both") == 2            # m0 SLVERR
        # R held until rready, the next AR only after the R handshake
        ctx.set(s.araddr, 0x800)
        ctx.set(s.arvalid, 1)
        await ctx.tick().until(s.arready)
        ctx.set(s.arvalid, 0)
        await ctx.tick().until(s.rvalid)
        for _ in range(3):
            await ctx.tick()
            assert ctx.get(s.rvalid) and ctx.get(s.rdata) == 0x42524431
            assert not ctx.get(s.arready)
        ctx.set(s.rready, 1)
        await ctx.tick()
        ctx.set(s.rready, 0)
        assert not ctx.get(s.rvalid) and ctx.get(s.arready)
        done.append(1)
    done = []
    _sim(dut, bench, deadline=20_000)
    assert done                                 # the bench ran to its end


def test_board_regs():
    dut = _RegsHarness()
    s = dut.split.s_axil
    wr = WorkRequest.const({"qp": 1, "opcode": 1, "wr_id": 0xBEEF, "local_addr": 0x100,
                            "remote_va": 0x1_2345_6780, "rkey": 0xA5A5A5A5, "length": 4096,
                            "imm": 0x77}).as_value().value
    cpl = Completion.const({"qp": 1, "psn": 0x123456, "has_imm": 1, "imm": 0x77}).as_value().value

    async def bench(ctx):
        regs = dut.regs
        ctx.set(dut.rx_free, 1)
        await ctx.tick()
        assert await _lite_read(ctx, s, 0x800) == (0x42524431, 0)
        assert (await _lite_read(ctx, s, 0x80C))[0] == 512
        assert (await _lite_read(ctx, s, 0x8FC))[1] == 2           # unknown: SLVERR
        assert await _lite_write(ctx, s, 0x8FC, 1) == 2
        # host memory window
        assert await _lite_write(ctx, s, 0x8000 + 4 * 9, 0xCAFEF00D) == 0
        assert await _lite_read(ctx, s, 0x8000 + 4 * 9) == (0xCAFEF00D, 0)
        assert (await _lite_read(ctx, s, 0x8000 + 4 * 512))[1] == 2  # beyond the memory
        # work request post: held until taken, a second post while pending is refused
        for i in range(7):
            assert await _lite_write(ctx, s, 0x810 + 4 * i, (wr >> (32 * i)) & 0xFFFF_FFFF) == 0
        for i in range(7):                                          # WR_DATA reads back
            assert await _lite_read(ctx, s, 0x810 + 4 * i) == ((wr >> (32 * i)) & 0xFFFF_FFFF, 0)
        assert await _lite_read(ctx, s, 0x808) == (0, 2)            # WR_POST: write-only
        # MAC / NIC counters: each register reads its own input
        for i in range(14):
            value = 0x1000_0000 * (i % 8) + 0x100 * i + 1
            if i % 7 < 2:
                ctx.set(regs.tx_counters[2 * (i // 7) + i % 7], value)
            else:
                ctx.set(dut.rx_counters[5 * (i // 7) + i % 7 - 2], value)
        for i in range(5):
            ctx.set(regs.nic_stats[i], 0xABC0_0000 + i)
        for busy in (0, 1):
            # a busy counter RAM (rx_free low) holds the read until it is free again
            ctx.set(dut.rx_free, not busy)
            for i in range(14):
                off = 0x840 + 0x20 * (i // 7) + 4 * (i % 7)
                if busy:
                    ctx.set(dut.rx_free, 0)
                    ctx.set(s.araddr, off)
                    ctx.set(s.arvalid, 1)
                    await ctx.tick().until(s.arready)
                    ctx.set(s.arvalid, 0)
                    for _ in range(8):
                        await ctx.tick()
                        assert not ctx.get(s.rvalid)        # waits for the RAM
                    ctx.set(dut.rx_free, 1)
                    ctx.set(s.rready, 1)
                    got = await ctx.tick().sample(s.rdata, s.rresp).until(s.rvalid)
                    ctx.set(s.rready, 0)
                else:
                    got = await _lite_read(ctx, s, off)
                assert got == (0x1000_0000 * (i % 8) + 0x100 * i + 1, 0), (hex(off), got)
        for i in range(5):
            assert await _lite_read(ctx, s, 0x880 + 4 * i) == (0xABC0_0000 + i, 0)
        assert await _lite_write(ctx, s, 0x808, 1) == 0
        assert ctx.get(regs.m_wr.valid) and ctx.get(regs.m_wr.payload.as_value()) == wr
        assert (await _lite_read(ctx, s, 0x804))[0] & 0x100
        assert await _lite_write(ctx, s, 0x808, 1) == 2
        ctx.set(regs.m_wr.ready, 1)
        await ctx.tick()
        ctx.set(regs.m_wr.ready, 0)
        assert not ctx.get(regs.m_wr.valid)
        # completion: pushed by the NIC, read in two words, the second pops it
        assert await _lite_read(ctx, s, 0x834) == (0, 0)
        ctx.set(regs.s_cpl.payload.as_value(), cpl)
        ctx.set(regs.s_cpl.valid, 1)
        await ctx.tick()
        ctx.set(regs.s_cpl.valid, 0)
        for _ in range(3):
            await ctx.tick()
        assert (await _lite_read(ctx, s, 0x804))[0] >> 16 == 1
        lo = (await _lite_read(ctx, s, 0x830))[0]
        hi = (await _lite_read(ctx, s, 0x834))[0]
        assert hi >> 31 == 1
        assert lo | ((hi & 0x7FFF_FFFF) << 32) == cpl
        assert (await _lite_read(ctx, s, 0x834))[0] == 0
        done.append(1)
    done = []
    _sim(dut, bench, deadline=40_000)
    assert done                                 # the bench ran to its end


def test_port_admin_gate():
    dut = PortAdminGate()
    s, o = dut.s_axis, dut.m_axis

    async def bench(ctx):
        ctx.set(o.tready, 1)
        seen = []
        ups = (1, 0, 1)
        ctx.set(dut.up, ups[0])
        await ctx.tick()                        # an idle cycle samples up for frame 1
        for n, frame in enumerate((1, 2, 3)):
            nxt = ups[n + 1] if n + 1 < len(ups) else 0
            for beat in range(3):
                ctx.set(s.tdata, frame * 16 + beat)
                ctx.set(s.tlast, beat == 2)
                ctx.set(s.tvalid, 1)
                # up changes in the middle of frames 1 and 2: only the value sampled
                # between frames (here on the last beat) decides the next frame
                ctx.set(dut.up, nxt if beat == 2 else 1 - nxt)
                _, _, valid, data, ready = await ctx.tick().sample(o.tvalid, o.tdata, s.tready)
                if valid:
                    seen.append(data)
                assert ready
        assert seen == [16, 17, 18, 48, 49, 50]
    _sim(dut, bench, deadline=100)
