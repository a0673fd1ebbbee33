# amaranth: UnusedElaboratable=no
"""StatCounters: random events at any rate (every source may strobe every cycle, all at
once), events in the cycles right after a reset, the count ports and the RAM read port
(also read while events keep coming) against a Python model."""

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

    def count(self, k):
        return (int(self.dut.count.value) >> (32 * k)) & MASK32

    async def cycle(self, events=()):
        """One clock with strobes on ``events`` (driven at falling edges)."""
        ev = 0
        for k in events:
            self.model[k] = (self.model[k] + 1) & MASK32
            ev |= 1 << k
        self.dut.ev.value = ev
        await FallingEdge(self.dut.clk)
        self.dut.ev.value = 0

    async def settle(self):
        for _ in range(self.n + 2):
            await self.cycle()

    async def read(self, k, events=lambda: ()):
        """Counter k through the read port (rd_addr held until rd_fresh); ``events()`` gives
        the strobes of each cycle meanwhile.  Returns (value, model value at the read)."""
        dut = self.dut
        dut.rd_addr.value = k
        await self.cycle(events())
        while True:
            before = list(self.model)
            await self.cycle(events())
            await Timer(1, "ps")
            if dut.rd_fresh.value:
                break
        return int(dut.rd_data.value), before

    async def check(self):
        await self.settle()
        for k in range(self.n):
            assert self.count(k) == self.model[k], (k, self.count(k), self.model[k])
            got, _ = await self.read(k)
            assert got == self.model[k], (k, got, self.model[k])


@cocotb.test()
async def stat_counters(dut):
    tb = TB(dut)
    rng = random.Random(tb_param("seed"))
    n = tb.n
    dut.ev.value = 0
    dut.rd_addr.value = 0
    await start(dut)
    await FallingEdge(dut.clk)
    # every source in the very first cycles after the reset: counted, reads 0 before
    await tb.cycle(range(n))
    await tb.cycle(range(n))
    await tb.check()
    # random traffic at any rate: each source strobes with its own probability, up to
    # every cycle
    probs = [rng.choice([1.0, 0.9, 0.5, 0.1]) for _ in range(n)]
    for _ in range(3000):
        await tb.cycle([k for k in range(n) if rng.random() < probs[k]])
    await tb.check()
    # reads while the sources keep strobing: a read shows the count of its load cycle
    # (between the model before and after that cycle)
    for _ in range(40):
        k = rng.randrange(n)
        got, before = await tb.read(k, lambda: [j for j in range(n) if rng.random() < 0.3])
        assert before[k] - (n + 1) <= got <= tb.model[k], (k, got, before[k], tb.model[k])
    await tb.check()
    # a reset in the middle of traffic clears every counter; events right after it count
    for _ in range(5):
        await tb.cycle(range(n))
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    tb.model = [0] * n
    got, _ = await tb.read(n - 1)
    assert got == 0
    await tb.cycle({0, n - 1})
    await tb.cycle([0])
    await tb.check()


@pytest.mark.parametrize("counters", [7, 3, 1])
def test_stat_counters(tmp_path, counters):
    run_rtl(StatCounters(counters), toplevel="stat_counters",
            test_module="tests.rtl.test_stat_counters", build_dir=tmp_path / f"sc{counters}",
            env={"counters": counters, "seed": 7}, quiet=True)


@pytest.mark.parametrize("counters", [0, 16])
def test_bad_counters(counters):
    with pytest.raises(ValueError):
        StatCounters(counters)
