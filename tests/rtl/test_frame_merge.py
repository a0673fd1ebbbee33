# amaranth: UnusedElaboratable=no
"""FrameMerge: header + realigned payload + pad + ICRC, byte exact against Scapy, on its plane.

cocotb testbench (coroutines ``run_*``) + pytest wrapper (``test_*``).  Reference
frames come from ``mrcnic.wire.build_data_frame`` (SRV6 with 1..3 uSID carriers,
STEV, UDP; with and without ImmDt); the header, its ICRC view and the payload are
fed separately and each output frame must equal the Scapy frame byte for byte.
"""

import random
from dataclasses import dataclass

import cocotb
import pytest
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from scapy.contrib.roce import BTH
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from mrcnic import wire
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import start

BLOCK = 0xFC000000
MACS = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="fc00:1::1")


@dataclass
class Case:
    frame: bytes        # the Scapy reference frame (ICRC of its arrival form)
    header: bytes
    view: bytes         # ICRC view of the header bytes
    payload: bytes
    port: int
    block: int | None   # uSID block for check_icrc (None: ordinary address)


def make_case(rng, length, *, mode="SRV6", n_carriers=1, imm=False, port=0) -> Case:
    """One reference frame of ``length`` payload bytes, split the way HeaderGen delivers it."""
    ev = rng.getrandbits(32)
    if mode == "SRV6":
        n_usids = rng.randint(6 * n_carriers - 5, 6 * n_carriers)
        path = wire.PathEncap(ev=ev, port=port, block=BLOCK,
                              usids=[rng.randint(1, 0xFFFF) for _ in range(n_usids)])
        block = BLOCK
    else:
        path = wire.PathEncap(ev=ev, port=port, mode=mode, dst_ip="fc00:2::2")
        block, n_carriers = None, 1
    payload = rng.randbytes(length)
    frame = wire.build_data_frame(**MACS, path=path, qpn=rng.getrandbits(24),
                                  psn=rng.getrandbits(24), va=rng.getrandbits(64),
                                  rkey=rng.getrandbits(32), payload=payload,
                                  imm=rng.getrandbits(32) if imm else None,
                                  last=rng.random() < 0.5)
    hlen = wire.header_length(n_carriers, imm)
    assert len(frame) == hlen + length + wire.roce_pad(length) + 4
    view = wire.icrc_view(wire.arrival_form(frame, block))
    return Case(frame, frame[:hlen], view[:hlen], payload, port, block)


def random_case(rng, length, port):
    mode = rng.choice(["SRV6", "SRV6", "SRV6", "STEV", "UDP"])
    return make_case(rng, length, mode=mode, n_carriers=rng.randint(1, 3),
                     imm=rng.random() < 0.5, port=port)


def pauses(rng, p):
    """Endless pause pattern: True (pause this cycle) with probability ``p``."""
    return iter(lambda: rng.random() < p, None)


class TB:
    """Owns the DUT's clock, the header/payload sources and one sink per plane."""

    def __init__(self, dut, ports):
        self.dut, self.ports = dut, ports

        def bus(name):
            return AxiStreamBus.from_prefix(dut, name, bus_separator="__")

        self.hdr = AxiStreamSource(bus("s_hdr"), dut.clk, dut.rst)
        self.pay = AxiStreamSource(bus("s_payload"), dut.clk, dut.rst)
        self.sinks = [AxiStreamSink(bus(f"m_axis_p{p}"), dut.clk, dut.rst) for p in range(ports)]
        self.expect = [[] for _ in range(ports)]
        self.dropped = 0

    def set_backpressure(self, rng, p):
        for stream in [self.hdr, self.pay, *self.sinks]:
            stream.set_pause_generator(pauses(rng, p))

    def send(self, case: Case):
        """Queue the case's header (tuser = ICRC view word | port << 64 per beat) and payload."""
        tuser = []
        for i in range(len(case.header)):
            word = case.view[i & ~7:(i & ~7) + 8].ljust(8, b"\0")
            tuser.append(int.from_bytes(word, "little") | case.port << 64)
        self.hdr.send_nowait(AxiStreamFrame(case.header, tuser=tuser))
        self.pay.send_nowait(AxiStreamFrame(case.payload))
        if case.port < self.ports:
            self.expect[case.port].append(case)
        else:
            self.dropped += 1

    async def check_all(self, timeout_us=2000):
        """Receive every expected frame on its plane, compare with Scapy, check nothing else came."""
        for port, cases in enumerate(self.expect):
            for n, case in enumerate(cases):
                frame = await with_timeout(self.sinks[port].recv(), timeout_us, "us")
                got = bytes(frame.tdata)
                assert got == case.frame, (
                    f"port {port} frame {n} ({len(case.payload)} B payload) differs:\n"
                    f"got {got.hex()}\nexp {case.frame.hex()}")
                check_dissect(got, case)
        await ClockCycles(self.dut.clk, 20)
        for port, sink in enumerate(self.sinks):
            assert sink.empty(), f"unexpected extra frame on port {port}"
        assert int(self.dut.drop_count.value) == self.dropped


def check_dissect(got: bytes, case: Case):
    """The output frame dissects as the frame it should be, and its ICRC verifies."""
    pkt = Ether(got)
    pad = wire.roce_pad(len(case.payload))
    assert pkt[BTH].padcount == pad
    assert pkt[wire.RETH].dmalen == len(case.payload)
    tail = case.payload + b"\0" * pad
    assert bytes(pkt[Raw].load)[:len(tail)] == tail
    assert wire.check_icrc(got, case.block)


INPUTS = ["s_hdr__tvalid", "s_hdr__tdata", "s_hdr__tkeep", "s_hdr__tlast", "s_hdr__tuser",
          "s_payload__tvalid", "s_payload__tdata", "s_payload__tkeep", "s_payload__tlast"]


async def setup(dut):
    ports = tb_param("ports")
    await start(dut, INPUTS + [f"m_axis_p{p}__tready" for p in range(ports)])
    return TB(dut, ports)


@cocotb.test()
async def run_frames(dut):
    """All modes, 1..3 carriers, +-ImmDt, payload 1..127/60/64/256/1024/4096, random
    planes, random idle and backpressure; one frame to a nonexistent plane is dropped."""
    tb = await setup(dut)
    rng = random.Random(tb_param("seed", 1))
    tb.set_backpressure(rng, 0.3)
    lengths = list(range(1, 17)) + [rng.randint(1, 127) for _ in range(8)] + [60, 64, 256]
    rng.shuffle(lengths)
    lengths += [1024, 4096]
    cases = [random_case(rng, n, rng.randrange(tb.ports)) for n in lengths]
    if tb.ports < 8:
        cases.insert(len(cases) // 2, random_case(rng, 37, 7))   # bad port: dropped, counted
    for case in cases:
        tb.send(case)
    await tb.check_all()


@cocotb.test()
async def run_output_stalls(dut):
    """Outputs stalled most cycles (the output skid register fills and drains every few
    beats, the stages stop on it) while the inputs run almost freely and also pause
    inside headers (CRC chunks formed across input gaps): frames stay exact and in order."""
    tb = await setup(dut)
    rng = random.Random(tb_param("seed", 1) + 7)
    for stream in (tb.hdr, tb.pay):
        stream.set_pause_generator(pauses(rng, 0.15))
    for sink in tb.sinks:
        sink.set_pause_generator(pauses(rng, 0.8))
    for length in [1, 2, 5, 6, 8, 13, 60, 200]:
        tb.send(random_case(rng, length, rng.randrange(tb.ports)))
    await tb.check_all()


@cocotb.test()
async def run_throughput(dut):
    """Back-to-back frames, both header lengths (2 and 6 mod 8) x every payload length
    mod 8, inputs always valid and sinks always ready: one beat per clock, no idle
    cycle between frames (output beats == cycles from first to last output beat)."""
    tb = await setup(dut)
    rng = random.Random(2)
    cases = []
    for length in list(range(1, 17)) + [60, 64, 256]:
        for imm in (False, True):
            mode = rng.choice(["SRV6", "STEV", "UDP"])
            cases.append(make_case(rng, length, mode=mode, imm=imm, port=rng.randrange(tb.ports),
                                   n_carriers=rng.randint(1, 3)))
    rng.shuffle(cases)
    stats = {"beats": 0, "first": None, "last": None}

    async def count():
        cycle = 0
        while True:
            await RisingEdge(dut.clk)
            cycle += 1
            for p in range(tb.ports):
                out = f"m_axis_p{p}__"
                if int(getattr(dut, out + "tvalid").value) and int(getattr(dut, out + "tready").value):
                    stats["beats"] += 1
                    stats["first"] = cycle if stats["first"] is None else stats["first"]
                    stats["last"] = cycle

    counter = cocotb.start_soon(count())
    for case in cases:
        tb.send(case)
    await tb.check_all()
    counter.cancel()
    expect_beats = sum((len(c.frame) + 7) // 8 for c in cases)
    cycles = stats["last"] - stats["first"] + 1
    dut._log.info("throughput: %d beats in %d cycles", stats["beats"], cycles)
    assert stats["beats"] == expect_beats
    assert stats["beats"] == cycles, f"{cycles - stats['beats']} idle cycles between frames"


@pytest.mark.parametrize("ports", [4])
def test_frame_merge(tmp_path, ports):
    from mrcnic.rtl.frame_merge import FrameMerge
    run_rtl(FrameMerge(ports), toplevel="frame_merge", test_module="tests.rtl.test_frame_merge",
            build_dir=tmp_path / f"p{ports}", env={"ports": ports}, quiet=True)


@pytest.mark.parametrize("ports", [0, 9, "4"])
def test_frame_merge_rejects_bad_ports(ports):
    from mrcnic.rtl.frame_merge import FrameMerge
    with pytest.raises(ValueError):
        FrameMerge(ports)


def test_crc32_update_shared_network_matches_zlib():
    """The CRC helper FrameMerge (and the ICRC / FCS blocks) use: its shared XOR network,
    with constant bits of either argument folded, computes zlib's CRC-32 for every
    argument shape the design passes (word, constant state, zero-padded halves, one
    byte with state bits moved into the data)."""
    import zlib

    from amaranth.hdl import Cat, Const, Module, Signal
    from amaranth.sim import Simulator

    from mrcnic.rtl.crc import CRC32_INIT, crc32_final, crc32_update

    def reg(value):             # zlib CRC value -> the register crc32_update keeps
        return int(f"{value ^ 0xFFFFFFFF:032b}"[::-1], 2)

    rng = random.Random(11)
    m = Module()
    s, d8, d1 = Signal(32), Signal(64), Signal(8)
    outs = {
        "word": crc32_final(crc32_update(s, d8, 8)),
        "init": crc32_final(crc32_update(Const(CRC32_INIT, 32), d8, 8)),
        "split": crc32_final(crc32_update(s, Const(0, 64), 8)
                             ^ crc32_update(Const(0, 32), Cat(d8[0:32], Const(0, 32)), 8)
                             ^ crc32_update(Const(0, 32), Cat(Const(0, 32), d8[32:64]), 8)),
        "byte": crc32_final(crc32_update(s, d1, 1)),
        "byte_moved": crc32_final(crc32_update(Cat(s[:24], Const(0, 8)),
                                               d1 ^ s[24:][::-1], 1)),
    }
    sigs = {k: Signal(32, name=k) for k in outs}
    m.d.comb += [sigs[k].eq(v) for k, v in outs.items()]

    async def bench(ctx):
        for _ in range(40):
            prefix = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 9)))
            word = bytes(rng.getrandbits(8) for _ in range(8))
            ctx.set(s, reg(zlib.crc32(prefix)))
            ctx.set(d8, int.from_bytes(word, "little"))
            ctx.set(d1, word[0])
            assert ctx.get(sigs["word"]) == zlib.crc32(prefix + word)
            assert ctx.get(sigs["split"]) == zlib.crc32(prefix + word)
            assert ctx.get(sigs["init"]) == zlib.crc32(word)
            assert ctx.get(sigs["byte"]) == zlib.crc32(prefix + word[:1])
            assert ctx.get(sigs["byte_moved"]) == zlib.crc32(prefix + word[:1])

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
