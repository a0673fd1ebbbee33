# amaranth: UnusedElaboratable=no
"""EthMac: 64-bit AXI-Stream <-> RGMII at 1000 Mb/s, through cocotbext-eth's RgmiiPhy.

cocotb testbench (coroutines ``run_*``) + pytest wrappers (``test_*``).  The DUT is
:class:`SimTop`: the MAC plus a simulation model of the RGMII DDR registers (the ECP5
``IDDRX1F``/``ODDRX1F`` cannot run in Icarus): TX halves are registered on the TX clock
and put on the pins by a clock-selected mux; TXC is a 90-degree-shifted copy of the TX
clock (what a PLL phase tap gives a PHY without TX delay), so the PHY model samples in the
middle of each half; RX is sampled on both RXC edges and both halves are presented
together on the next rising edge (IDDRX1F behaviour).  The NIC clock (``clk``) runs at a
different frequency from the 125 MHz RGMII clocks, so both AsyncFIFOs really cross; with
``tx_same_clock=True`` the TX clock is the NIC clock itself (as on the boards) and only its
reset is separate.

Reference frames are Scapy ``Ether`` packets; FCS is checked against ``zlib.crc32``.
A separate plain pytest checks that the ECP5 platform wrapper elaborates to
``ODDRX1F``/``IDDRX1F`` for the Colorlight 5A-75B.
"""

import itertools
import logging
import random
import struct
import zlib

import cocotb
import pytest
from amaranth.hdl import Cat, ClockDomain, ClockSignal, Module, Mux, ResetSignal, Signal
from amaranth.lib import io, wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, Timer, with_timeout
from cocotb.utils import get_sim_steps
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from cocotbext.eth import GmiiFrame, RgmiiPhy
from scapy.layers.inet6 import IPv6
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from mrcnic.rtl.axis import AxiStreamSignature
from mrcnic.rtl.eth_mac import EthMac
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import start

COUNTERS = ("tx_frames", "tx_oversize", "rx_frames", "rx_bad_fcs", "rx_runt", "rx_giant",
            "rx_fifo_overflow")
RGMII_NS = 8                       # 125 MHz
PREAMBLE = b"\x55" * 7 + b"\xd5"


class SimTop(wiring.Component):
    """EthMac + simulation models of the RGMII DDR registers (RGMII pins as ports).

    Domains: ``sync`` (NIC, ``clk``/``rst``), ``rgmii_tx`` (125 MHz), ``rgmii_tx90`` (the same
    clock 2 ns later; forwarded as ``txc``), ``rgmii_rx`` (RXC from the PHY model).
    """

    def __init__(self, **kwargs):
        self._mac = EthMac(**kwargs)
        self._same = kwargs.get("tx_same_clock", False)
        super().__init__({
            # tx_same_clock: the rgmii_tx domain is clocked by ``clk``, reset by this port
            **({"rgmii_tx_rst": In(1)} if self._same else {}),
            "s_axis": In(AxiStreamSignature(64)),
            "m_axis": Out(AxiStreamSignature(64)),
            "txc": Out(1), "txd": Out(4), "tx_ctl": Out(1),
            "rxd": In(4), "rx_ctl": In(1),
            **{name: Out(32) for name in COUNTERS},
            "rx_cnt_addr": In(3), "rx_cnt_data": Out(32), "rx_cnt_fresh": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mac = mac = self._mac
        if self._same:
            m.domains.rgmii_tx = cd = ClockDomain("rgmii_tx")
            m.d.comb += [cd.clk.eq(ClockSignal("sync")), cd.rst.eq(self.rgmii_tx_rst)]
        wiring.connect(m, wiring.flipped(self.s_axis), mac.s_axis)
        wiring.connect(m, mac.m_axis, wiring.flipped(self.m_axis))
        for name in COUNTERS:
            m.d.comb += getattr(self, name).eq(getattr(mac, name))
        m.d.comb += [mac.rx_cnt_addr.eq(self.rx_cnt_addr), self.rx_cnt_data.eq(mac.rx_cnt_data),
                     self.rx_cnt_fresh.eq(mac.rx_cnt_fresh)]
        r = mac.rgmii
        # ODDRX1F model: both halves registered on the rising edge, rising half driven
        # while the clock is high, falling half while it is low.
        t_r, t_f = Signal(5), Signal(5)
        m.d.rgmii_tx += [t_r.eq(Cat(r.txd[0], r.tx_ctl[0])), t_f.eq(Cat(r.txd[1], r.tx_ctl[1]))]
        pins = Mux(ClockSignal("rgmii_tx"), t_r, t_f)
        m.d.comb += [self.txd.eq(pins[:4]), self.tx_ctl.eq(pins[4]),
                     self.txc.eq(ClockSignal("rgmii_tx90"))]
        # IDDRX1F model: capture on both edges, present the pair on the next rising edge.
        m.domains.rx_neg = neg = ClockDomain("rx_neg", clk_edge="neg", local=True,
                                             reset_less=True)
        m.d.comb += neg.clk.eq(ClockSignal("rgmii_rx"))
        q_r, q_f, i_r, i_f = Signal(5), Signal(5), Signal(5), Signal(5)
        m.d.rgmii_rx += [q_r.eq(Cat(self.rxd, self.rx_ctl)), i_r.eq(q_r), i_f.eq(q_f)]
        m.d.rx_neg += q_f.eq(Cat(self.rxd, self.rx_ctl))
        m.d.comb += [r.rxd[0].eq(i_r[:4]), r.rx_ctl[0].eq(i_r[4]),
                     r.rxd[1].eq(i_f[:4]), r.rx_ctl[1].eq(i_f[4])]
        return m


# ------------------------------------------------------------------------------ helpers

def scapy_frame(rng, length: int) -> bytes:
    """A Scapy Ethernet frame of exactly ``length`` bytes (no FCS), random payload."""
    pkt = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    if length >= 62:
        pkt = pkt / IPv6(src="fc00:1::1", dst="fc00:2::2") / UDP(sport=49152, dport=4791)
    hdr = len(pkt)
    raw = bytes(pkt / Raw(rng.randbytes(max(0, length - hdr))))[:length]
    return raw


def wire_image(frame: bytes) -> bytes:
    """What 802.3 puts on the wire for ``frame``: preamble, SFD, padded frame, FCS."""
    padded = frame + bytes(max(0, 60 - len(frame)))
    return PREAMBLE + padded + struct.pack("<I", zlib.crc32(padded))


class TB:
    def __init__(self, dut, nic_ns):
        self.dut, self.nic_ns = dut, nic_ns
        self.same_clock = bool(tb_param("same_clock", 0))
        self.phy = RgmiiPhy(dut.txd, dut.tx_ctl, dut.txc, dut.rxd, dut.rx_ctl, dut.rgmii_rx_clk,
                            speed=1000e6)
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"),
                                      dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__"),
                                  dut.clk, dut.rst)
        for log in (self.phy.tx.log, self.phy.rx.log, self.source.log, self.sink.log):
            log.setLevel(logging.WARNING)

    async def start(self, tx_reset_cycles=0):
        """Clocks and resets; the TX domain's reset is released ``tx_reset_cycles`` NIC
        clock cycles after the others (the boards reset ``sync`` and ``eth_tx`` apart)."""
        dut = self.dut
        for name in ("rgmii_tx_rst", "rgmii_tx90_rst", "rgmii_rx_rst"):
            getattr(dut, name).value = 1
        if self.same_clock:
            assert self.nic_ns == RGMII_NS
            tx_clk = dut.clk                  # rgmii_tx is clocked by clk inside SimTop
        else:
            tx_clk = dut.rgmii_tx_clk
            cocotb.start_soon(Clock(tx_clk, RGMII_NS, unit="ns").start())

        async def tx90():
            await RisingEdge(tx_clk)
            await Timer(RGMII_NS // 4, unit="ns")
            await Clock(dut.rgmii_tx90_clk, RGMII_NS, unit="ns").start()
        cocotb.start_soon(tx90())
        await start(dut, ["s_axis__tvalid", "m_axis__tready"], period_ns=self.nic_ns,
                    reset_cycles=8)
        for name in ("rgmii_tx90_rst", "rgmii_rx_rst"):
            getattr(dut, name).value = 0

        async def release_tx():
            await ClockCycles(dut.clk, tx_reset_cycles)
            dut.rgmii_tx_rst.value = 0
        if tx_reset_cycles:
            cocotb.start_soon(release_tx())
        else:
            dut.rgmii_tx_rst.value = 0
        await ClockCycles(dut.clk, 8)

    def counters(self):
        return {name: int(getattr(self.dut, name).value) for name in COUNTERS}

    async def port_counters(self):
        """The five RX counters read through the counter RAM's read port (rx_cnt_*)."""
        dut, out = self.dut, {}
        for k, name in enumerate(COUNTERS[2:]):
            dut.rx_cnt_addr.value = k
            await RisingEdge(dut.clk)
            while True:
                await RisingEdge(dut.clk)
                await Timer(1, "ps")
                if dut.rx_cnt_fresh.value:
                    break
            out[name] = int(dut.rx_cnt_data.value)
        return out

    def pause(self, rng, p):
        return iter(lambda: rng.random() < p, None)


def payload_lengths(rng):
    """Frame lengths without FCS: the 60..1514 extremes plus random ones."""
    return [60, 61, 67, 68, 1514, 1513, 64] + [rng.randint(60, 1514) for _ in range(5)]


# ------------------------------------------------------------------------------ cocotb

async def recv_exact(tb, frames):
    """One wire frame per entry of ``frames``, in order: byte-exact wire image (preamble,
    padding, FCS), good FCS, no error symbol.  Returns the cocotbext-eth GmiiFrames."""
    got = []
    for f in frames:
        rx = await with_timeout(tb.phy.tx.recv(), 200, "us")
        assert bytes(rx.data) == wire_image(f), f"frame of {len(f)} bytes differs"
        assert rx.check_fcs() and not any(rx.error or [])
        got.append(rx)
    return got


@cocotb.test()
async def run_tx(dut):
    """NIC -> wire: 60..1514-byte frames and short frames (padded), back to back, stalls."""
    rng = random.Random(tb_param("seed", 1))
    tb = TB(dut, tb_param("nic_ns"))
    await tb.start()
    tb.source.set_pause_generator(tb.pause(rng, 0.2))
    frames = [scapy_frame(rng, n) for n in payload_lengths(rng) + [1, 14, 42, 59]]
    rng.shuffle(frames)
    for f in frames:
        await tb.source.send(AxiStreamFrame(f))
    got = await recv_exact(tb, frames)
    for f, rx in zip(frames, got):
        payload = bytes(rx.get_payload())
        assert bytes(Ether(payload))[:len(f)] == f            # Scapy parses it back
    # interframe gap: at least 12 idle byte times between consecutive frames
    gaps = [b.sim_time_start - a.sim_time_end for a, b in zip(got, got[1:])]
    assert min(gaps) >= get_sim_steps(12 * RGMII_NS, "ns"), gaps
    # the stalled source still gave back-to-back frames at least once (line rate)
    assert min(gaps) <= get_sim_steps(13 * RGMII_NS, "ns"), gaps
    # an oversize frame (1515 bytes > 1518 - 4) goes out with a bad FCS and is counted
    big = scapy_frame(rng, 1515 + 8)
    await tb.source.send(AxiStreamFrame(big))
    rx = await with_timeout(tb.phy.tx.recv(), 100, "us")
    assert not rx.check_fcs()
    assert bytes(rx.get_payload()) == big[:190 * 8]      # truncated at the beat limit
    after = scapy_frame(rng, 100)
    await tb.source.send(AxiStreamFrame(after))
    rx = await with_timeout(tb.phy.tx.recv(), 100, "us")
    assert bytes(rx.data) == wire_image(after)
    await ClockCycles(dut.clk, 4)
    c = tb.counters()
    assert c["tx_frames"] == len(frames) + 2 and c["tx_oversize"] == 1, c


@cocotb.test()
async def run_tx_line_rate(dut):
    """NIC -> wire with an unstalled source: 64..1518-byte frames go out back to back with
    exactly the 12-byte interframe gap (the store-and-forward buffer never starves the wire)."""
    rng = random.Random(tb_param("seed", 1) + 4)
    tb = TB(dut, tb_param("nic_ns"))
    await tb.start()
    # a frame starts once it is all stored: the first one is the longest, so every later
    # one is stored while an earlier one is still on the wire
    lengths = [1514, 1514, 60, 60, 61, 1514, 67, 68, 1513, 60] + [rng.randint(60, 1514)
                                                                 for _ in range(3)]
    frames = [scapy_frame(rng, n) for n in lengths]
    for f in frames:
        await tb.source.send(AxiStreamFrame(f))
    got = await recv_exact(tb, frames)
    gaps = [b.sim_time_start - a.sim_time_end for a, b in itertools.pairwise(got)]
    assert all(get_sim_steps(12 * RGMII_NS, "ns") <= g <= get_sim_steps(13 * RGMII_NS, "ns")
               for g in gaps), gaps
    await ClockCycles(dut.clk, 4)
    c = tb.counters()
    assert c["tx_frames"] == len(frames) and c["tx_oversize"] == 0, c


@cocotb.test()
async def run_tx_reset_skew(dut):
    """The TX domain leaves reset 300 NIC cycles after ``sync``: frames sent meanwhile are
    stored and then go out whole and exact, in order, with good FCS."""
    rng = random.Random(tb_param("seed", 1) + 5)
    tb = TB(dut, tb_param("nic_ns"))
    await tb.start(tx_reset_cycles=300)
    frames = [scapy_frame(rng, n) for n in (60, 1514, 61, 200)]
    for f in frames[:2]:
        await tb.source.send(AxiStreamFrame(f))
    await ClockCycles(dut.clk, 250)
    assert int(dut.tx_ctl.value) == 0                 # nothing on the wire during the reset
    for f in frames[2:]:
        await tb.source.send(AxiStreamFrame(f))
    await recv_exact(tb, frames)
    await ClockCycles(dut.clk, 4)
    assert tb.counters()["tx_frames"] == len(frames)


@cocotb.test()
async def run_rx(dut):
    """Wire -> NIC: 64..1518-byte frames (with FCS) back to back; FCS stripped, bytes exact."""
    rng = random.Random(tb_param("seed", 1) + 1)
    tb = TB(dut, tb_param("nic_ns"))
    await tb.start()
    tb.sink.set_pause_generator(tb.pause(rng, 0.3))
    frames = [scapy_frame(rng, n) for n in payload_lengths(rng)]
    for f in frames:
        await tb.phy.rx.send(GmiiFrame.from_payload(f))
    for f in frames:
        out = await with_timeout(tb.sink.recv(), 200, "us")
        assert bytes(out.tdata) == f, f"frame of {len(f)} bytes differs"
        assert Ether(bytes(out.tdata)) == Ether(f)
    await ClockCycles(dut.clk, 4)
    c = tb.counters()
    assert c["rx_frames"] == len(frames), c
    assert c["rx_bad_fcs"] == c["rx_runt"] == c["rx_giant"] == c["rx_fifo_overflow"] == 0, c
    assert tb.sink.empty()


@cocotb.test()
async def run_rx_errors(dut):
    """Bad FCS, RX_ER, runts, giants, junk before the SFD: dropped, counted; good ones pass."""
    rng = random.Random(tb_param("seed", 1) + 2)
    max_frame = tb_param("max_frame", 1518)
    tb = TB(dut, tb_param("nic_ns"))
    await tb.start()

    def good(n):
        f = scapy_frame(rng, n)
        return f, GmiiFrame.from_payload(f)

    def bad_fcs(n):
        g = GmiiFrame.from_payload(scapy_frame(rng, n))
        g.data[-1] ^= 0x01
        return g

    def rx_er(n):
        g = GmiiFrame.from_payload(scapy_frame(rng, n))
        g.normalize()
        g.error[len(g.data) // 2] = 1
        return g

    def raw(payload_with_fcs):
        return GmiiFrame.from_raw_payload(payload_with_fcs)

    def with_fcs(b):
        return b + struct.pack("<I", zlib.crc32(b))

    bad = [
        ("rx_bad_fcs", bad_fcs(60)),
        ("rx_bad_fcs", bad_fcs(1514)),
        ("rx_bad_fcs", rx_er(200)),
        ("rx_runt", raw(with_fcs(scapy_frame(rng, 59)))),         # 63 bytes, good FCS
        ("rx_runt", raw(with_fcs(scapy_frame(rng, 14)))),
        ("rx_runt", raw(b"\x01\x02\x03")),
        ("rx_giant", raw(with_fcs(scapy_frame(rng, max_frame - 3)))),  # max_frame + 1
        ("rx_giant", raw(with_fcs(scapy_frame(rng, max_frame + 40)))),
        (None, GmiiFrame(bytearray(b"\x55\x55\x12" + bytes(70)))),   # no SFD: ignored
    ]
    expect, sent = [], {name: 0 for name in COUNTERS}
    f, g = good(max_frame - 4)                     # largest good frame
    await tb.phy.rx.send(g)
    expect.append(f)
    for name, frame in bad:
        await tb.phy.rx.send(frame)
        if name:
            sent[name] += 1
        f, g = good(rng.randint(60, 300))
        await tb.phy.rx.send(g)
        expect.append(f)
    for f in expect:
        out = await with_timeout(tb.sink.recv(), 300, "us")
        assert bytes(out.tdata) == f
    await ClockCycles(dut.clk, 50)
    assert tb.sink.empty()
    c = tb.counters()
    assert c["rx_frames"] == len(expect), c
    for name in ("rx_bad_fcs", "rx_runt", "rx_giant"):
        assert c[name] == sent[name], (name, c)
    assert c["rx_fifo_overflow"] == 0


@cocotb.test()
async def run_rx_counters_reset(dut):
    """The RX counters count exactly, restart from 0 after a reset (their RAM copy is
    cleared) and count exactly again, one frame of each kind right after another."""
    rng = random.Random(tb_param("seed", 1) + 6)
    tb = TB(dut, tb_param("nic_ns"))

    def bad_fcs(n):
        g = GmiiFrame.from_payload(scapy_frame(rng, n))
        g.data[-1] ^= 0x80
        return g

    async def burst(n_good, n_bad, n_runt, n_giant):
        kinds = ["g"] * n_good + ["f"] * n_bad + ["r"] * n_runt + ["x"] * n_giant
        rng.shuffle(kinds)
        good = []
        for k in kinds:
            if k == "g":
                f = scapy_frame(rng, rng.randint(60, 120))
                good.append(f)
                await tb.phy.rx.send(GmiiFrame.from_payload(f))
            elif k == "f":
                await tb.phy.rx.send(bad_fcs(rng.randint(60, 120)))
            elif k == "r":
                await tb.phy.rx.send(GmiiFrame.from_raw_payload(bytes(rng.randint(1, 63))))
            else:
                await tb.phy.rx.send(GmiiFrame.from_payload(scapy_frame(rng, 1515)))
        for f in good:
            out = await with_timeout(tb.sink.recv(), 200, "us")
            assert bytes(out.tdata) == f
        await with_timeout(tb.phy.rx.wait(), 200, "us")
        await ClockCycles(dut.clk, 60)
        c = tb.counters()
        assert (c["rx_frames"], c["rx_bad_fcs"], c["rx_runt"], c["rx_giant"],
                c["rx_fifo_overflow"]) == (n_good, n_bad, n_runt, n_giant, 0), c
        assert await tb.port_counters() == {k: c[k] for k in COUNTERS[2:]}

    await tb.start()
    await burst(4, 3, 2, 1)
    for name in ("rst", "rgmii_rx_rst", "rgmii_tx_rst"):
        getattr(dut, name).value = 1
    await ClockCycles(dut.clk, 4)
    assert all(v == 0 for v in tb.counters().values())
    for name in ("rst", "rgmii_rx_rst", "rgmii_tx_rst"):
        getattr(dut, name).value = 0
    await burst(2, 1, 3, 2)


@cocotb.test()
async def run_rx_overflow(dut):
    """A stalled NIC sink: frames that find the buffer full are dropped whole and counted."""
    rng = random.Random(tb_param("seed", 1) + 3)
    tb = TB(dut, tb_param("nic_ns"))
    await tb.start()
    tb.sink.pause = True
    frames = [scapy_frame(rng, n) for n in (1000, 600, 500, 1200, 300)]
    for f in frames:
        await tb.phy.rx.send(GmiiFrame.from_payload(f))
    await with_timeout(tb.phy.rx.wait(), 200, "us")
    await ClockCycles(dut.clk, 50)
    c = tb.counters()
    # 256 beats of buffer (+1 in the output register): 1000 (125 beats) + 600 (75) fit,
    # 500 (63) and 1200 (150) do not, 300 (38) fits
    assert c["rx_frames"] == 3 and c["rx_fifo_overflow"] == 2, c
    tb.sink.pause = False
    for f in (frames[0], frames[1], frames[4]):
        out = await with_timeout(tb.sink.recv(), 100, "us")
        assert bytes(out.tdata) == f
    f = scapy_frame(rng, 1514)          # room again
    await tb.phy.rx.send(GmiiFrame.from_payload(f))
    out = await with_timeout(tb.sink.recv(), 100, "us")
    assert bytes(out.tdata) == f
    assert tb.sink.empty()


# ------------------------------------------------------------------------------ pytest

@pytest.mark.parametrize("nic_ns", [10.0, 6.4])
def test_eth_mac(tmp_path, nic_ns):
    """NIC clock 100 MHz (slower than RGMII) and 156.25 MHz (faster)."""
    run_rtl(SimTop(), toplevel="eth_mac", test_module="tests.rtl.test_eth_mac",
            build_dir=tmp_path / "b", env={"nic_ns": nic_ns, "seed": int(nic_ns * 10)},
            quiet=True)


@pytest.mark.parametrize("nic_ns", [8.0, 25.0])
def test_eth_mac_tx_clocks(tmp_path, nic_ns):
    """TX at line rate with the NIC clock equal to the RGMII TX clock's period (the boards
    share one 125 MHz PLL output) and at 40 MHz (above the documented quarter of it)."""
    for case in ("run_tx", "run_tx_line_rate") if nic_ns == 8.0 else ("run_tx_line_rate",):
        run_rtl(SimTop(), toplevel="eth_mac", test_module="tests.rtl.test_eth_mac",
                build_dir=tmp_path / case, env={"nic_ns": nic_ns, "seed": int(nic_ns * 10)},
                testcase=case, quiet=True)


def test_eth_mac_tx_same_clock(tmp_path):
    """``tx_same_clock``: the RGMII TX domain runs on the NIC clock itself (the boards: one
    125 MHz PLL output), beats handed over by a register instead of the AsyncFIFO; frames
    exact, line rate with the 12-byte gap, oversize truncation, and a late TX reset."""
    for case in ("run_tx", "run_tx_line_rate", "run_tx_reset_skew"):
        run_rtl(SimTop(tx_same_clock=True), toplevel="eth_mac",
                test_module="tests.rtl.test_eth_mac", build_dir=tmp_path / case,
                env={"nic_ns": 8.0, "same_clock": 1, "seed": 81}, testcase=case, quiet=True)


def test_eth_mac_rx_slow_nic(tmp_path):
    """RX with the NIC clock at 40 MHz, above the documented quarter of the RX clock: the
    32-bit crossing words are drained fast enough for back-to-back frames (nothing lost)."""
    run_rtl(SimTop(), toplevel="eth_mac", test_module="tests.rtl.test_eth_mac",
            build_dir=tmp_path / "b", env={"nic_ns": 25.0, "seed": 250},
            testcase="run_rx", quiet=True)


def test_eth_mac_jumbo_giant(tmp_path):
    """max_frame parameter (here 2000): frames up to it pass, longer ones are giants."""
    run_rtl(SimTop(max_frame=2000), toplevel="eth_mac", test_module="tests.rtl.test_eth_mac",
            build_dir=tmp_path / "b", env={"nic_ns": 10.0, "max_frame": 2000, "seed": 7},
            testcase="run_rx_errors", quiet=True)


def test_eth_mac_params():
    from mrcnic.rtl.eth_mac_rx import EthMacRx
    from mrcnic.rtl.eth_mac_tx import EthMacTx

    assert EthMacTx().fifo_depth == 256 and EthMacRx().buffer_depth == 256
    assert EthMacTx(max_frame=9022).fifo_depth == 2048            # jumbo
    assert EthMacRx(max_frame=9022, buffer_frames=2).buffer_depth == 4096
    with pytest.raises(ValueError):
        EthMac(max_frame=63)
    with pytest.raises(ValueError):
        EthMac(rx_buffer_frames=0)
    with pytest.raises(ValueError):
        EthMac(tx_domain="sync")
    with pytest.raises(ValueError):
        EthMac(tx_domain="a", rx_domain="a")
    with pytest.raises(ValueError):
        EthMac(tx_same_clock=1)
    assert EthMac(tx_same_clock=True).tx_same_clock


def test_rgmii_ecp5_elaborates():
    """The platform wrapper maps to ECP5 ODDRX1F / IDDRX1F on the Colorlight 5A-75B."""
    from amaranth_boards.colorlight_5a75b_r7_0 import Colorlight_5A75B_R70Platform

    from mrcnic.rtl.rgmii import RgmiiDdrIo

    class Top(wiring.Component):
        def __init__(self):
            super().__init__({})

        def elaborate(self, platform):
            m = Module()
            m.domains.sync = ClockDomain()
            m.domains.rgmii_tx = ClockDomain()
            m.domains.rgmii_rx = ClockDomain()
            clk = platform.request(platform.default_clk, dir="-")
            m.submodules.clk_buf = clk_buf = io.Buffer("i", clk)
            m.d.comb += [ClockSignal("sync").eq(clk_buf.i), ClockSignal("rgmii_tx").eq(clk_buf.i)]
            m.submodules.mac = mac = EthMac()
            m.submodules.io = pio = RgmiiDdrIo(platform.request("eth_rgmii", 0, dir="-"))
            wiring.connect(m, mac.rgmii, pio.rgmii)
            m.d.comb += ClockSignal("rgmii_rx").eq(pio.rxc)
            m.submodules.rx_rst = ResetSynchronizer(ResetSignal("sync"), domain="rgmii_rx")
            return m

    plan = Colorlight_5A75B_R70Platform().prepare(Top())
    rtlil = plan.files["top.il"]
    assert rtlil.count("IDDRX1F") >= 5 and rtlil.count("ODDRX1F") >= 6
