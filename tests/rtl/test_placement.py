"""Placement: payload lands at its host address, byte exact, and nowhere else.

cocotb testbench (coroutines ``run_*``) + pytest wrapper (``test_*``).
"""

import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiRamWrite, AxiStreamBus, AxiStreamSource, AxiWriteBus

from mrcnic.rtl.layouts import Completion, PlaceCmd
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import StreamSink, StreamSource, pack, start, unpack

MEM = 1 << 16
FILL = 0xA5


class TB:
    """Owns the DUT's clock, the AXI RAM (write side), payload source and cmd/cpl drivers."""

    def __init__(self, dut, backpressure=False):
        self.dut = dut
        self.ram = AxiRamWrite(AxiWriteBus.from_prefix(dut, "m_axi", bus_separator="__"),
                               dut.clk, dut.rst, size=MEM)
        self.ram.write(0, bytes([FILL]) * MEM)
        self.payload = AxiStreamSource(AxiStreamBus.from_prefix(dut, "payload", bus_separator="__"),
                                       dut.clk, dut.rst)
        rng = random.Random(7)
        pause = (lambda: rng.random() < 0.3) if backpressure else None
        if backpressure:
            self.payload.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
            self.ram.w_channel.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
            self.ram.aw_channel.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
        self.cmd = StreamSource(dut, "cmd", dut.clk)
        self.cpl_in = StreamSource(dut, "cpl_in", dut.clk)
        self.cpl = StreamSink(dut, "cpl", dut.clk, pause=pause)

    async def place(self, addr, data, place=True, frame=None):
        self.cmd.send(pack(PlaceCmd, {"place": int(place), "addr": addr, "length": len(data)}))
        await self.payload.send(frame if frame is not None else data)

    async def idle(self, limit=20000):
        for _ in range(limit):
            await RisingEdge(self.dut.clk)
            if (self.cmd.empty() and self.payload.empty() and self.cpl_in.empty()
                    and not int(self.dut.payload__tvalid.value)):
                break
        await ClockCycles(self.dut.clk, 40)


INPUTS = ["cmd__valid", "cmd__payload", "cpl_in__valid", "cpl_in__payload", "cpl__ready",
          "payload__tvalid", "payload__tdata", "payload__tkeep", "payload__tlast"]


@cocotb.test()
async def run_random_placement(dut):
    """Random addresses/lengths (all alignments, 2 KiB and 4 KiB crossings), some discarded."""
    await start(dut, INPUTS)
    tb = TB(dut, backpressure=tb_param("backpressure", False))
    rng = random.Random(1)
    expect = bytearray([FILL]) * MEM
    placed = 0
    for i in range(60):
        length = rng.choice([1, 2, 3, 7, 8, 9, 63, 64, 65, rng.randrange(1, 4097)])
        addr = rng.randrange(0, MEM - length)
        if i % 10 == 3:
            addr = 4096 - rng.randrange(1, 16)            # straddles a 4 KiB boundary
        data = rng.randbytes(length)
        keep = rng.random() > 0.2
        await tb.place(addr, data, place=keep)
        if keep:
            expect[addr:addr + length] = data
            placed += length
    await tb.idle()
    got = tb.ram.read(0, MEM)
    assert got == bytes(expect), "memory differs from the expected placement"
    assert int(dut.short_frames.value) == 0 and int(dut.write_errors.value) == 0
    assert int(dut.bytes_written.value) == placed


@cocotb.test()
async def run_frame_length_mismatch(dut):
    """A payload frame longer than its command is cut; a shorter one never writes past it."""
    await start(dut, INPUTS)
    tb = TB(dut)
    await tb.place(100, b"A" * 10, frame=b"A" * 10 + b"X" * 20)      # longer: X never lands
    await tb.place(300, b"B" * 40, frame=b"B" * 12)                   # shorter: counted
    await tb.place(500, b"C" * 5)
    await tb.idle()
    mem = tb.ram.read(0, 1024)
    assert mem[100:110] == b"A" * 10 and mem[110] == FILL
    assert mem[300:312] == b"B" * 12 and mem[312:340] == bytes([FILL]) * 28
    assert mem[500:505] == b"C" * 5 and mem[505] == FILL
    assert int(dut.short_frames.value) == 1
    assert int(dut.bytes_written.value) == 10 + 12 + 5          # the bytes with strobes set


@cocotb.test()
async def run_completion_fence(dut):
    """A completion is released only after the writes before it are acknowledged."""
    await start(dut, INPUTS)
    tb = TB(dut)
    tb.ram.b_channel.set_pause_generator(iter(lambda: True, None))    # hold every B response
    await tb.place(0, bytes(range(256)) * 8)
    tb.cpl_in.send(pack(Completion, {"qp": 1, "psn": 42, "has_imm": 1, "imm": 0xABCD}))
    await ClockCycles(dut.clk, 300)
    assert tb.cpl.items == [], "completion overtook its data"
    tb.ram.b_channel.clear_pause_generator()
    tb.ram.b_channel.pause = False
    await tb.idle()
    assert len(tb.cpl.items) == 1
    c = unpack(Completion, tb.cpl.items[0])
    assert (c["qp"], c["psn"], c["has_imm"], c["imm"]) == (1, 42, 1, 0xABCD)
    assert tb.ram.read(0, 2048) == bytes(range(256)) * 8


@cocotb.test()
async def run_completion_interleaved(dut):
    """Completions between packets, W / AW / B / cpl backpressure: each leaves only once every
    byte placed before it is in memory (the W output register may still hold a beat when
    the command is done)."""
    await start(dut, INPUTS)
    tb = TB(dut, backpressure=True)
    rng = random.Random(5)
    tb.ram.b_channel.set_pause_generator(iter(lambda: rng.random() < 0.5, None))
    placed = []                          # (addr, data) of packet i, disjoint 4 KiB regions
    for i in range(12):
        length = rng.choice([1, 9, 64, 300, 2100])
        addr = i * 4096 + rng.randrange(0, 4096 - length)
        data = rng.randbytes(length)
        tb.cmd.send(pack(PlaceCmd, {"place": 1, "addr": addr, "length": length}))
        await tb.payload.send(data)
        tb.cpl_in.send(pack(Completion, {"qp": 0, "psn": i, "has_imm": 0, "imm": 0}))
        placed.append((addr, data))
    bad = []
    seen = 0
    for _ in range(40000):
        await RisingEdge(dut.clk)
        while seen < len(tb.cpl.items):
            psn = unpack(Completion, tb.cpl.items[seen])["psn"]
            if any(tb.ram.read(a, len(d)) != d for a, d in placed[:psn + 1]):
                bad.append(psn)
            seen += 1
        if seen == len(placed):
            break
    assert seen == len(placed), f"{seen} completions of {len(placed)}"
    assert [unpack(Completion, x)["psn"] for x in tb.cpl.items] == list(range(len(placed)))
    assert bad == [], f"completions {bad} left before their data was in memory"


@cocotb.test()
async def run_throughput(dut):
    """Aligned back-to-back 1 KiB packets: W beats per cycle over the run."""
    await start(dut, INPUTS)
    tb = TB(dut)
    n, size = 16, 1024
    for i in range(n):
        await tb.place(i * size, bytes([i]) * size)
    beats = cycles = 0
    started = False
    while beats < n * size // 8:
        await RisingEdge(dut.clk)
        fire = int(dut.m_axi__wvalid.value) and int(dut.m_axi__wready.value)
        started = started or fire
        cycles += started
        beats += fire
    ratio = beats / cycles
    dut._log.info("placement: %d W beats in %d cycles (%.3f)", beats, cycles, ratio)
    assert ratio > 0.95


def test_placement(tmp_path):
    from mrcnic.rtl.placement import Placement
    run_rtl(Placement(), toplevel="placement", test_module="tests.rtl.test_placement",
            build_dir=tmp_path / "b", quiet=True)


def test_placement_backpressure(tmp_path):
    from mrcnic.rtl.placement import Placement
    run_rtl(Placement(), toplevel="placement", test_module="tests.rtl.test_placement",
            build_dir=tmp_path / "b", env={"backpressure": True},
            testcase="run_random_placement", quiet=True)
