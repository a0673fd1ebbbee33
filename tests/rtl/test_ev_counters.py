# amaranth: UnusedElaboratable=no
"""EvCounterBank: random traffic against a Python model, queue overflow accounting,
out-of-range indices ignored, CSR read latency (worst case under a saturating load) /
hold / restart, and event-to-read latency."""

import random

import cocotb
import pytest
from cocotb.triggers import FallingEdge
from mrcnic.rtl.ev_counters import READ_LATENCY, EvCounterBank
from mrcnic.rtl.layouts import EvCounterKind, EvCounters
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import start, unpack

INPUTS = ["sent_en", "sent_index", "stat_en", "stat_index", "stat_kind",
          "probe_en", "probe_index", "rd_en", "rd_addr"]
FIELDS = [name for name, _ in EvCounters.as_shape()]
K = EvCounterKind
OUTCOMES = [K.CLEAN_ACK, K.ECN_ECHO, K.TRIM, K.TIMEOUT]
MASK32 = (1 << 32) - 1
#: cycles from an event strobe to the first CSR read (rd_en cycle) that returns it, engine idle
#: (at most: the words of later kinds are read later, so some kinds show up sooner)
EVENT_TO_READ = 5


def rec_tuple(value) -> tuple:
    d = unpack(EvCounters, value)
    return tuple(int(d[f]) for f in FIELDS)


class TB:
    """Drives the bank at falling edges (one call of :meth:`cycle` = one clock)."""

    def __init__(self, dut):
        self.dut = dut
        self.paths = tb_param("paths")
        self.t = 0

    async def cycle(self, sent=None, stat=None, probe=None, rd=None):
        """One clock: optional sent index, stat (index, kind), probe index, CSR read address
        (``rd``: ``rd_en`` high in this cycle; the record is on ``rd_data``
        :data:`READ_LATENCY` cycles later, see :meth:`read`)."""
        dut = self.dut
        dut.sent_en.value = int(sent is not None)
        dut.stat_en.value = int(stat is not None)
        dut.probe_en.value = int(probe is not None)
        dut.rd_en.value = int(rd is not None)
        if sent is not None:
            dut.sent_index.value = sent
        if stat is not None:
            dut.stat_index.value = stat[0]
            dut.stat_kind.value = stat[1] if isinstance(stat[1], int) else stat[1].value
        if probe is not None:
            dut.probe_index.value = probe
        if rd is not None:
            dut.rd_addr.value = rd
        await FallingEdge(dut.clk)
        self.t += 1
        dut.sent_en.value = dut.stat_en.value = dut.probe_en.value = dut.rd_en.value = 0

    def record(self):
        return rec_tuple(self.dut.rd_data.value)

    async def read(self, index, **events):
        """Read entry ``index`` (``rd_en`` cycle + :data:`READ_LATENCY` idle cycles); the record."""
        await self.cycle(rd=index, **events)
        await self.idle(READ_LATENCY - 1)
        return self.record()

    async def idle(self, n):
        for _ in range(n):
            await self.cycle()

    async def snapshot(self, count=None):
        """Every entry's record through rd_* (one read after the other)."""
        return [await self.read(i) for i in range(count or self.paths)]

    def dropped(self):
        return int(self.dut.dropped.value)


async def setup(dut):
    await start(dut, INPUTS)
    await FallingEdge(dut.clk)
    return TB(dut)


def gaps(rng, n_cycles, lo, hi, burst_p=0.0):
    """Cycles of strobes: random gaps in [lo, hi]; with ``burst_p`` a 2-3 strobe burst."""
    out, t = [], rng.randint(0, hi)
    while t < n_cycles:
        out.append(t)
        if rng.random() < burst_p:
            out += [t + 1, t + 2][:rng.randint(1, 2)]
            t += 2
        t += rng.randint(lo, hi)
    return sorted(c for c in set(out) if c < n_cycles)


@cocotb.test()
async def run_random_traffic(dut):
    """Seeded realistic traffic on all three sources; counters equal the model, no drops."""
    tb = await setup(dut)
    rng = random.Random(tb_param("seed"))
    paths = tb.paths
    base = await tb.snapshot()
    assert base == [(0,) * 6] * paths, "counters must start at zero"

    n = 12000
    sent_at = set(gaps(rng, n, 4, 12, burst_p=0.1))     # ~1/8, short bursts
    stat_at = set(gaps(rng, n, 2, 10))                   # ~1/6
    probe_at = set(gaps(rng, n, 20, 80))                 # rare
    both = len(sent_at & stat_at) + len(sent_at & probe_at) + len(stat_at & probe_at)
    assert both >= 20, "stimulus must include simultaneous strobes"

    model = [[0] * 6 for _ in range(paths)]
    issued = {}                     # (entry, field) -> cycle of every strobe, in order
    reads = 0
    pending = None                  # (rd_en cycle, entry) of the read in flight
    for c in range(n):
        sent = rng.randrange(paths) if c in sent_at else None
        stat = None
        if c in stat_at:
            kind = rng.choice(OUTCOMES) if rng.random() < 0.9 else rng.choice(list(K))
            stat = (rng.randrange(paths), kind)
        probe = rng.randrange(paths) if c in probe_at else None
        rd = rng.randrange(paths) if pending is None and rng.random() < 0.1 else None
        for ev in ((sent, K.PACKET), stat, (probe, K.PROBE)):
            if ev is not None and ev[0] is not None:
                model[ev[0]][ev[1].value] += 1
                issued.setdefault((ev[0], ev[1].value), []).append(c)
        await tb.cycle(sent=sent, stat=stat, probe=probe, rd=rd)
        if rd is not None:
            pending = (c, rd)
        elif pending is not None and c == pending[0] + READ_LATENCY - 1:
            # A read during traffic (the record after the edge ending cycle c): never more
            # than was issued up to then, and at least everything issued 40 cycles before
            # the rd_en cycle (queues never hold events longer).
            c0, e = pending
            got = tb.record()
            pending = None
            reads += 1
            for f in range(6):
                times = issued.get((e, f), [])
                hi = sum(1 for x in times if x <= c)
                lo = sum(1 for x in times if x <= c0 - 40)
                assert lo <= got[f] <= hi, (c, e, FIELDS[f], lo, got[f], hi)
    await tb.idle(40)
    final = await tb.snapshot()
    assert tb.dropped() == 0
    for i in range(paths):
        assert final[i] == tuple(model[i]), (i, final[i], model[i])
    assert sum(map(sum, model)) == len(sent_at) + len(stat_at) + len(probe_at)
    assert all(model[i][K.PACKET.value] for i in range(paths)), "every entry saw traffic"
    dut._log.info("random traffic: %d events (%d simultaneous pairs), %d reads during traffic",
                  sum(map(sum, model)), both, reads)


@cocotb.test()
async def run_overflow(dut):
    """Back-to-back strobes overflow the queues: counted + dropped == issued, per-counter bound."""
    tb = await setup(dut)
    rng = random.Random(tb_param("seed") + 1)
    paths = tb.paths
    assert tb.dropped() == 0
    base = await tb.snapshot()
    issued = {}
    pulses = 0
    for c in range(40):
        sent = rng.randrange(paths)
        stat = (rng.randrange(paths), rng.choice(OUTCOMES))    # fields of its own: per-source
        probe = rng.randrange(paths) if c < 10 else None
        for ev in ((sent, K.PACKET), stat, (probe, K.PROBE)):
            if ev[0] is not None:
                key = (ev[0], ev[1].value)
                issued[key] = issued.get(key, 0) + 1
                pulses += 1
        await tb.cycle(sent=sent, stat=stat, probe=probe)
    await tb.idle(60)
    final = await tb.snapshot()
    counted = 0
    per_field = [0] * 6
    for i in range(paths):
        for f in range(6):
            delta = final[i][f] - base[i][f]
            assert 0 <= delta <= issued.get((i, f), 0), (i, FIELDS[f], delta)
            counted += delta
            per_field[f] += delta
    per_source = (per_field[K.PACKET.value], sum(per_field[K.CLEAN_ACK.value:K.PROBE.value]),
                  per_field[K.PROBE.value])
    dropped = tb.dropped()
    assert counted + dropped == pulses, (counted, dropped, pulses)
    # The engine ran at its full rate: one increment per 2 cycles from the first pop
    # (cycle 3: queued in cycle 2, chosen then, popped the cycle after) to the end of the
    # burst, then it drained the two full 4-deep queues.
    assert counted >= (40 - 3) // 2 + 2 * 4, counted
    assert dropped > 0
    # Round robin: no source starves (fixed priority would leave stat with its last 4 only).
    assert min(per_source[:2]) >= 10 and per_source[2] >= 4, per_source
    dut._log.info("overflow: %d strobes, %d counted %s, %d dropped",
                  pulses, counted, per_source, dropped)


@cocotb.test()
async def run_out_of_range(dut):
    """Indices >= paths (and stat kinds 6, 7) are ignored: not counted, not dropped."""
    tb = await setup(dut)
    paths = tb.paths
    rng = random.Random(tb_param("seed") + 2)
    base = await tb.snapshot()
    # Every cycle on all sources for 30 cycles: if any were queued, the queues would overflow.
    for _ in range(30):
        await tb.cycle(sent=rng.randrange(paths, 256), stat=(rng.randrange(paths, 256),
                       rng.choice(list(K))), probe=rng.randrange(paths, 256))
    for kind in (6, 7):
        for i in range(8):
            await tb.cycle(stat=(i, kind))
    # One in-range event among out-of-range ones still counts.
    await tb.cycle(sent=3, stat=(paths + 3, K.TRIM), probe=255)
    await tb.idle(20)
    final = await tb.snapshot()
    assert tb.dropped() == 0
    want = [list(r) for r in base]
    want[3][K.PACKET.value] += 1
    assert final == [tuple(r) for r in want]
    # Reads at indices >= paths return zero even where entry (index mod paths) is non-zero.
    for i in range(paths):
        assert any(final[i])
        assert await tb.read(paths + i) == (0,) * 6
    assert await tb.read(255) == (0,) * 6


@cocotb.test()
async def run_read_port(dut):
    """rd_data: the record READ_LATENCY cycles after rd_en even with the engine saturated,
    held until the next rd_en, a new rd_en restarts a read; event-to-read latency."""
    tb = await setup(dut)
    dut = tb.dut
    recs = await tb.snapshot()
    a, b = max(range(tb.paths), key=lambda i: recs[i]), min(range(tb.paths), key=lambda i: recs[i])
    assert recs[a] != recs[b]
    assert await tb.read(b) == recs[b]
    # Worst case: every source strobes every cycle (the engine reads every other cycle, so
    # the CSR words only get the other cycles); the events go to entry b, we read entry a.
    await tb.cycle(rd=a, sent=b, stat=(b, K.CLEAN_ACK), probe=b)
    for _ in range(READ_LATENCY - 1):
        await tb.cycle(sent=b, stat=(b, K.CLEAN_ACK), probe=b)
    assert tb.record() == recs[a]
    await tb.idle(40)                       # drain the queues
    # Hold: rd_en low, address changing, entry a being incremented meanwhile.
    for i in range(10):
        await tb.cycle(sent=a if i < 3 else None, stat=(a, K.TIMEOUT) if i < 2 else None)
        dut.rd_addr.value = (b + i) % 256
        assert tb.record() == recs[a], i
    new_a = list(recs[a])
    new_a[K.PACKET.value] += 3
    new_a[K.TIMEOUT.value] += 2
    await tb.idle(10)                       # 5 increments take 10 cycles of the engine
    assert await tb.read(a) == tuple(new_a)
    # Back-to-back increments of one counter (each read meets the previous write: forwarded).
    for _ in range(4):
        await tb.cycle(sent=a)
    await tb.idle(12)
    new_a[K.PACKET.value] += 4
    assert await tb.read(a) == tuple(new_a)
    # A rd_en during a read restarts it: the later address wins.
    b_now = await tb.read(b)
    await tb.cycle(rd=b)
    await tb.idle(3)
    assert await tb.read(a) == tuple(new_a)
    assert await tb.read(b) == b_now
    # Event strobed in cycle 0 (engine idle): a read whose rd_en cycle is EVENT_TO_READ
    # returns it, whatever the counter's word position in the record.
    for kind, e in ((K.PACKET, b), (K.PROBE, b), (K.ECN_ECHO, a), (K.CLEAN_ACK, a)):
        before = await tb.read(e)
        await tb.idle(4)
        await tb.cycle(stat=(e, kind))                  # cycle 0
        await tb.idle(EVENT_TO_READ - 1)
        got = list(await tb.read(e))                    # rd_en in cycle EVENT_TO_READ
        want = list(before)
        want[kind.value] = (want[kind.value] + 1) & MASK32
        assert got == want, (kind, got, want)


@pytest.mark.parametrize("paths", [32])
def test_ev_counters(tmp_path, paths):
    run_rtl(EvCounterBank(paths), toplevel="ev_counters", test_module="tests.rtl.test_ev_counters",
            build_dir=tmp_path / f"evc{paths}", env={"paths": paths, "seed": 2024}, quiet=True)


@pytest.mark.parametrize("paths", [0, 8, 100, 512])
def test_bad_paths(paths):
    with pytest.raises(ValueError):
        EvCounterBank(paths)


@pytest.mark.parametrize("paths", [16, 256])
def test_elaborates(paths):
    """The other sizes convert (paths=256 has no range comparator)."""
    from amaranth.back import rtlil
    rtlil.convert(EvCounterBank(paths), name="ev_counters")
