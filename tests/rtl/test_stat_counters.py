# amaranth: UnusedElaboratable=no
"""StatCounters: random events at the documented rate (each source at most once per
``counters`` cycles), all sources at once, events during the clearing after a reset, the
count ports and the RAM read port against a Python model."""

import random

import cocotb
import pytest
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge, Timer
from mrcnic.rtl.stat_counters import StatCounters
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import start

MASK32 = (1 << 32) - 1


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.n = tb_param("counters")
        self.model = [0] * self.n
        self.last = [-10 ** 9] * self.n      # cycle of each source's last event
        self.t = 0

    def count(self, k):
        return (int(self.dut.count.value) >> (32 * k)) & MASK32

    async def cycle(self, events=()):
        """One clock with strobes on ``events`` (at falling edges)."""
        ev = 0
        for k in events:
            assert self.t - self.last[k] >= self.n, "test drives faster than documented"
            self.last[k] = self.t
            self.model[k] = (self.model[k] + 1) & MASK32
            ev |= 1 << k
        self.dut.ev.value = ev
        await FallingEdge(self.dut.clk)
        self.dut.ev.value = 0
        self.t += 1

    async def settle(self):
        for _ in range(self.n + 1):
            await self.cycle()

    async def read(self, k):
        """Counter k through the read port (rd_addr held until rd_fresh)."""
        dut = self.dut
        dut.rd_addr.value = k
        await RisingEdge(dut.clk)
        while True:
            await RisingEdge(dut.clk)
            await Timer(1, "ps")
            if dut.rd_fresh.value:
                break
        value = int(dut.rd_data.value)
        await FallingEdge(dut.clk)
        self.t += 2
        return value

    async def check(self):
        await self.settle()
        for k in range(self.n):
            assert self.count(k) == self.model[k], (k, self.count(k), self.model[k])
            assert await self.read(k) == self.model[k], k


@cocotb.test()
async def stat_counters(dut):
    tb = TB(dut)
    rng = random.Random(tb_param("seed"))
    n = tb.n
    dut.ev.value = 0
    dut.rd_addr.value = 0
    await start(dut)
    await FallingEdge(dut.clk)
    # events in the clearing cycles right after the reset stay pending and are counted
    await tb.cycle(range(n))
    await tb.check()
    # random traffic at the documented limit: each source at most once per n cycles
    for _ in range(3000):
        ready = [k for k in range(n) if tb.t - tb.last[k] >= n]
        await tb.cycle([k for k in ready if rng.random() < 0.6])
    await tb.check()
    # every source on the same cycle, repeatedly at the limit
    for _ in range(20):
        await tb.cycle(range(n))
        for _ in range(n - 1):
            await tb.cycle()
    await tb.check()
    # a reset clears them all; events right after it still count
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    tb.model = [0] * n
    tb.last = [-10 ** 9] * n
    await tb.cycle([0, n - 1])
    await tb.check()


@pytest.mark.parametrize("counters", [7, 3])
def test_stat_counters(tmp_path, counters):
    run_rtl(StatCounters(counters), toplevel="stat_counters",
            test_module="tests.rtl.test_stat_counters", build_dir=tmp_path / f"sc{counters}",
            env={"counters": counters, "seed": 7}, quiet=True)


@pytest.mark.parametrize("counters", [0, 16])
def test_bad_counters(counters):
    with pytest.raises(ValueError):
        StatCounters(counters)
