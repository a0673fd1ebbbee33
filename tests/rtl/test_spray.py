# amaranth: UnusedElaboratable=no
"""SprayScheduler + PathTable: weighted round robin, one decision per clock, live changes.

cocotb testbench (``run_*`` coroutines) and its pytest wrapper.  The scheduler
is checked against a cycle-free Python model of its discipline (per-QP position,
``weight`` consecutive decisions per entry per round) and against the
properties the design promises: per complete round every GOOD entry gets
exactly ``weight`` decisions, ASSUMED_BAD / DENIED / weight-0 / avoided
entries none, one decision per clock, changes obeyed ``SETTLE_CYCLES`` after
the write strobe (an entry made ineligible: no decision rising ``DROP_CYCLES``
after it, a pick already scheduled for it is replaced), no decision and
``no_path`` raised when nothing is eligible.
"""

import random

import cocotb
import pytest
from amaranth.lib import data
from cocotb.triggers import FallingEdge, ReadOnly

from mrcnic.rtl.layouts import Decision, EvState, PathEntry, SprayReq
from mrcnic.rtl.path_table import READ_LATENCY
from mrcnic.rtl.spray import DROP_CYCLES, LATENCY, SETTLE_CYCLES, SprayScheduler
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import start

INPUTS = ["req__valid", "req__payload", "decision__ready", "avoid", "w_en", "w_addr", "w_data",
          "st_en", "st_addr", "st_state"]
GOOD, BAD, DENIED = EvState.GOOD.value, EvState.ASSUMED_BAD.value, EvState.DENIED.value

_DEC = data.Layout.cast(Decision)
_ENT = data.Layout.cast(PathEntry)
_ENT_OFF = _DEC["entry"].offset


def _field(value, layout, name, base=0):
    f = layout[name]
    return (value >> (base + f.offset)) & ((1 << f.width) - 1)


def req_bits(qp, base, count):
    return SprayReq.const({"qp": qp, "base": base, "count": count}).as_value().value


class Model:
    """Reference model of the scheduling discipline over a static table."""

    def __init__(self, table, depth):
        self.table, self.depth = table, depth
        self.pos = {}           # qp -> [cur, served, weight snapshot]

    def eligible(self, i, avoid=0):
        e = self.table[i]
        return e["state"] == GOOD and e["weight"] > 0 and not (avoid >> i) & 1

    def pick(self, qp, base, count):
        cand = [i for i in range(base, min(base + count, self.depth)) if self.eligible(i)]
        assert cand, "model asked for a decision with no eligible entry"
        cur, served, w = self.pos.get(qp, (None, 0, 0))
        if cur is not None and cur in cand and served < w:
            self.pos[qp] = [cur, served + 1, w]
            return cur
        above = [i for i in cand if cur is not None and i > cur]
        nxt = above[0] if above else cand[0]
        self.pos[qp] = [nxt, 1, self.table[nxt]["weight"]]
        return nxt


class TB:
    """Owns the DUT: table writes, a cycle-accurate request/decision driver, bookkeeping."""

    def __init__(self, dut):
        self.dut = dut
        self.depth = tb_param("depth")
        self.table = {}
        self.cycle = 0

    async def reset(self):
        await start(self.dut, INPUTS)
        await FallingEdge(self.dut.clk)

    async def write(self, idx, **fields):
        """Write a whole entry (one cycle, at the current falling edge)."""
        e = {"ev": 0x1000 + idx, "port": idx % 4, "state": GOOD, "weight": 1, "n_carriers": 1,
             "seg_base": idx & 0xFF, "da": (0xFC00 << 112) | (idx << 64) | idx}
        e.update(fields)
        self.table[idx] = e
        c = dict(e, state=EvState(e["state"]))
        self.dut.w_data.value = PathEntry.const(c).as_value().value
        self.dut.w_addr.value = idx
        self.dut.w_en.value = 1
        await FallingEdge(self.dut.clk)
        self.dut.w_en.value = 0
        self.cycle += 1

    async def fill(self, entries):
        for idx, fields in entries.items():
            await self.write(idx, **fields)

    async def run(self, n_cycles, requests, ready=lambda c: True, events=None, offer=None):
        """Drive ``requests`` (an iterator of (qp, base, count)) for ``n_cycles``.

        ``ready(cycle)`` gives decision.ready, ``offer(cycle)`` whether a request is
        offered (default: always), ``events[cycle]`` is a list of callables run at
        the start of that cycle (they drive write strobes for one cycle).
        Returns the list of decisions as dicts {cycle, index, ev, port, state, weight}
        and the list of cycles in which ``no_path`` was high.
        """
        dut = self.dut
        decisions, no_path = [], []
        pending = next(requests, None)
        events = events or {}
        offer = offer or (lambda c: True)
        for _ in range(n_cycles):
            c = self.cycle
            dut.st_en.value = 0
            dut.w_en.value = 0
            for ev in events.get(c, []):
                ev()
            valid = pending is not None and (offer(c) or dut.req__valid.value == 1)
            if valid:   # once offered, a request stays valid until taken (stream rule)
                dut.req__payload.value = req_bits(*pending)
            dut.req__valid.value = int(valid)
            rdy = ready(c)
            dut.decision__ready.value = int(rdy)
            await ReadOnly()
            if dut.no_path.value == 1:
                no_path.append(c)
            if rdy and dut.decision__valid.value == 1:
                v = int(dut.decision__payload.value)
                ent = v >> _ENT_OFF
                decisions.append({"cycle": c, "index": v & 0xFF,
                                  **{k: _field(ent, _ENT, k) for k in ("ev", "port", "state", "weight",
                                                                       "seg_base", "da")}})
            if valid and dut.req__ready.value == 1:
                pending = next(requests, None)
            await FallingEdge(dut.clk)
            self.cycle += 1
        dut.req__valid.value = 0
        dut.decision__ready.value = 0
        return decisions, no_path

    def state_event(self, idx, state):
        def ev():
            self.dut.st_en.value = 1
            self.dut.st_addr.value = idx
            self.dut.st_state.value = state
            self.table[idx]["state"] = state
        return ev

    def weight_event(self, idx, weight):
        def ev():
            e = dict(self.table[idx], weight=weight)
            self.table[idx] = e
            self.dut.w_data.value = PathEntry.const(dict(e, state=EvState(e["state"]))).as_value().value
            self.dut.w_addr.value = idx
            self.dut.w_en.value = 1
        return ev

    def check_entries(self, decisions, table=None):
        """Every decision carries the record written at its index, and only GOOD ones."""
        table = table or self.table
        for d in decisions:
            e = table[d["index"]]
            assert (d["ev"], d["port"], d["seg_base"], d["da"]) == \
                (e["ev"], e["port"], e["seg_base"], e["da"]), d
            assert d["state"] == GOOD, d


def rounds(indices):
    """Split a decision sequence of one QP into rounds (a round ends where the index wraps)."""
    out, cur = [], []
    for prev, i in zip([None] + indices[:-1], indices):
        if prev is not None and i < prev:
            out.append(cur)
            cur = []
        cur.append(i)
    out.append(cur)
    return out


def check_rounds(indices, weights, first_complete=1):
    """Each complete round gives every eligible entry exactly its weight (deviation 0 <= 1)."""
    rs = rounds(indices)
    complete = rs[first_complete:-1]
    assert complete, "no complete round"
    for r in complete:
        counts = {}
        for i in r:
            counts[i] = counts.get(i, 0) + 1
        for i, w in weights.items():
            assert abs(counts.get(i, 0) - w) <= 1, (i, counts.get(i, 0), w)
            assert counts.get(i, 0) == w, (i, counts.get(i, 0), w)
        assert set(counts) <= set(weights), set(counts) - set(weights)
    return len(complete)


def mixed_profile(rng, n, base=0, bad=10, denied=6, zero=2):
    """n entries over 4 planes with weights 1..4, some ASSUMED_BAD, DENIED and weight 0."""
    entries = {base + i: {"ev": rng.getrandbits(32), "port": i % 4, "weight": rng.randint(1, 4)}
               for i in range(n)}
    idx = rng.sample(sorted(entries), bad + denied + zero)
    for i in idx[:bad]:
        entries[i]["state"] = BAD
    for i in idx[bad:bad + denied]:
        entries[i]["state"] = DENIED
    for i in idx[bad + denied:]:
        entries[i]["weight"] = 0
    return entries


def good_weights(tb, lo, hi, avoid=0):
    return {i: tb.table[i]["weight"] for i in range(lo, hi)
            if tb.table[i]["state"] == GOOD and tb.table[i]["weight"] and not (avoid >> i) & 1}


def repeat_req(qp, base, count):
    while True:
        yield (qp, base, count)


def assert_full_rate(decisions):
    cycles = [d["cycle"] for d in decisions]
    span = cycles[-1] - cycles[0] + 1
    assert len(cycles) == span, f"{len(cycles)} decisions in {span} cycles"


@cocotb.test()
async def run_wrr_128(dut):
    """128 EVs / 4 planes, mixed weights, bad + denied: exact WRR and 1 decision per clock."""
    tb = TB(dut)
    await tb.reset()
    rng = random.Random(1)
    await tb.fill(mixed_profile(rng, 128))
    n, s = 10_400, tb.cycle
    decs, no_path = await tb.run(n, repeat_req(0, 0, 128))
    assert not no_path
    assert len(decs) >= 10_000
    # throughput: decisions / cycles == 1.0 once the pipeline is full (LATENCY cycles)
    assert decs[0]["cycle"] == s + LATENCY
    assert_full_rate(decs)
    assert len(decs) == n - LATENCY
    tb.check_entries(decs)
    idx = [d["index"] for d in decs]
    weights = good_weights(tb, 0, 128)
    nr = check_rounds(idx, weights, first_complete=0)
    assert nr >= 30
    for i in range(128):
        if i not in weights:
            assert i not in idx
    model = Model(tb.table, tb.depth)
    assert idx == [model.pick(0, 0, 128) for _ in idx]
    # planes: every plane carries its share of the weights
    for p in range(4):
        share = sum(1 for d in decs if d["port"] == p) / len(decs)
        want = sum(w for i, w in weights.items() if i % 4 == p) / sum(weights.values())
        assert abs(share - want) < 0.01, (p, share, want)


@cocotb.test()
async def run_backpressure(dut):
    """Random request gaps and decision backpressure: nothing lost, duplicated or reordered."""
    tb = TB(dut)
    await tb.reset()
    rng = random.Random(2)
    await tb.fill(mixed_profile(rng, 64, base=32, bad=5, denied=3, zero=1))
    model = Model(tb.table, tb.depth)
    reqs = [(rng.choice([0, 3]), 32, rng.choice([64, 40])) for _ in range(1200)]
    decs, _ = await tb.run(3000, iter(reqs), ready=lambda c: rng.random() < 0.6,
                           offer=lambda c: rng.random() < 0.8)
    assert len(decs) == len(reqs)
    tb.check_entries(decs)
    assert [d["index"] for d in decs] == [model.pick(*r) for r in reqs]


@cocotb.test()
async def run_live_changes(dut):
    """Weight, state and avoid changes mid-run, without stopping traffic."""
    tb = TB(dut)
    await tb.reset()
    rng = random.Random(3)
    prof = mixed_profile(rng, 128)
    await tb.fill(prof)
    good = sorted(good_weights(tb, 0, 128))
    a, b, d = good[10], good[40], good[70]           # weight change, -> ASSUMED_BAD, weight 0
    c = next(i for i in range(128) if prof[i].get("state") == BAD)   # ASSUMED_BAD -> GOOD
    x = next(i for i in range(128) if prof[i].get("state") == DENIED)  # stays DENIED
    new_w = 4 if tb.table[a]["weight"] != 4 else 1
    t0 = tb.cycle + 3000
    events = {t0: [tb.weight_event(a, new_w), tb.state_event(b, BAD)],
              t0 + 1: [tb.state_event(c, GOOD)],
              t0 + 2: [tb.weight_event(d, 0)]}
    old_w = good_weights(tb, 0, 128)
    # one QP, always ready: the first 3000 cycles use the old table
    decs, _ = await tb.run(6000, repeat_req(2, 0, 128), events=events)
    assert_full_rate(decs)
    before = [d for d in decs if d["cycle"] < t0]
    after = [d for d in decs if d["cycle"] >= t0 + 2 + SETTLE_CYCLES]
    check_rounds([d["index"] for d in before], old_w, first_complete=0)
    assert all(dd["index"] not in (c, x) for dd in before)
    # settled: b (ASSUMED_BAD, from the cycle after its strobe) and d (weight 0) never chosen
    assert all(dd["index"] != b for dd in decs if dd["cycle"] >= t0 + DROP_CYCLES)
    assert all(dd["index"] != d for dd in after)
    assert all(dd["index"] != x for dd in decs)
    new_weights = good_weights(tb, 0, 128)
    assert new_weights[a] == new_w and c in new_weights and b not in new_weights
    rs = rounds([dd["index"] for dd in after])
    for r in rs[1:-1]:                      # every complete round after the change
        counts = {i: r.count(i) for i in set(r)}
        assert counts == new_weights, {i: (counts.get(i), new_weights.get(i))
                                       for i in set(counts) | set(new_weights)
                                       if counts.get(i) != new_weights.get(i)}
    assert len(rs) >= 8
    tb.check_entries(decs)

    # avoid hook (ECN steering): masked entries skipped after SETTLE_CYCLES, back when cleared
    mask = 0
    for i in good[:64:2]:
        mask |= 1 << i
    t1 = tb.cycle + 200
    t2 = t1 + 1500

    def set_avoid(v):
        def ev():
            dut.avoid.value = v
        return ev
    decs, _ = await tb.run(2500, repeat_req(2, 0, 128), events={t1: [set_avoid(mask)],
                                                                t2: [set_avoid(0)]})
    assert_full_rate(decs)
    mid = [dd["index"] for dd in decs if t1 + SETTLE_CYCLES <= dd["cycle"] < t2]
    assert not any((mask >> i) & 1 for i in mid)
    check_rounds(mid, good_weights(tb, 0, 128, avoid=mask))
    late = [dd["index"] for dd in decs if dd["cycle"] >= t2 + SETTLE_CYCLES]
    check_rounds(late, good_weights(tb, 0, 128))


@cocotb.test()
async def run_stall(dut):
    """Long decision stalls: the skid FIFO and its credit lose, duplicate and reorder nothing, and
    decisions flow again at one per clock from the first cycle ``ready`` returns."""
    tb = TB(dut)
    await tb.reset()
    rng = random.Random(6)
    await tb.fill(mixed_profile(rng, 48, base=16, bad=4, denied=3, zero=2))
    model = Model(tb.table, tb.depth)
    s = tb.cycle
    stalls = [(s + 20, s + 60), (s + 61, s + 63), (s + 100, s + 101), (s + 150, s + 230)]
    stalled = lambda c: any(a <= c < b for a, b in stalls)     # noqa: E731
    reqs = [(6, 16, 48)] * 400
    decs, _ = await tb.run(300, iter(reqs), ready=lambda c: not stalled(c))
    want = [c for c in range(s + LATENCY, s + 300) if not stalled(c)]
    assert [d["cycle"] for d in decs] == want
    assert [d["index"] for d in decs] == [model.pick(*r) for r in reqs[:len(decs)]]
    tb.check_entries(decs)


@cocotb.test()
async def run_profile_256(dut):
    """A 256-entry profile, sparse eligibility (long runs of skipped entries): full rate."""
    tb = TB(dut)
    await tb.reset()
    rng = random.Random(4)
    entries = {}
    for i in range(256):
        st = GOOD if (rng.random() < 0.15 or i in (0, 255)) else rng.choice([BAD, DENIED])
        entries[i] = {"ev": rng.getrandbits(32), "port": i % 4, "weight": rng.randint(1, 4),
                      "state": st}
    for i in range(100, 180):               # a gap of 80 entries in a row
        entries[i]["state"] = DENIED
    await tb.fill(entries)
    decs, _ = await tb.run(4000, repeat_req(7, 0, 256))
    assert_full_rate(decs)
    tb.check_entries(decs)
    idx = [d["index"] for d in decs]
    check_rounds(idx, good_weights(tb, 0, 256), first_complete=0)
    model = Model(tb.table, tb.depth)
    assert idx == [model.pick(7, 0, 256) for _ in idx]


@cocotb.test()
async def run_two_qps(dut):
    """Two QPs with different profiles, randomly interleaved: each keeps its own fairness."""
    tb = TB(dut)
    await tb.reset()
    rng = random.Random(5)
    await tb.fill(mixed_profile(rng, 128, base=0))
    await tb.fill(mixed_profile(rng, 100, base=150, bad=8, denied=4, zero=3))
    profiles = {1: (0, 128), 5: (150, 100)}
    reqs = [(q, *profiles[q]) for q in (rng.choice([1, 5]) for _ in range(4000))]
    decs, _ = await tb.run(len(reqs) + LATENCY + 1, iter(reqs))
    assert len(decs) == len(reqs)
    assert_full_rate(decs)
    tb.check_entries(decs)
    model = Model(tb.table, tb.depth)
    assert [d["index"] for d in decs] == [model.pick(*r) for r in reqs]
    for q, (base, count) in profiles.items():
        idx = [d["index"] for d, r in zip(decs, reqs) if r[0] == q]
        assert all(base <= i < base + count for i in idx)
        check_rounds(idx, good_weights(tb, base, base + count), first_complete=0)


@cocotb.test()
async def run_no_path(dut):
    """No eligible entry: no decision, no_path high, no hang; recovers when an entry is GOOD."""
    tb = TB(dut)
    await tb.reset()
    await tb.fill({200 + i: {"state": BAD if i % 2 else DENIED, "weight": 2} for i in range(8)})
    await tb.fill({208: {"weight": 3}, 199: {"weight": 3}})   # GOOD neighbours outside the profile
    await tb.fill({203: {"state": GOOD, "weight": 0}})      # GOOD but weight 0
    s = tb.cycle
    t_good = s + 60
    decs, no_path = await tb.run(120, repeat_req(4, 200, 8),
                                 events={t_good: [tb.state_event(205, GOOD)]})
    # the request is taken at s and waits in stage A (reached LATENCY - SETTLE_CYCLES + 2 cycles
    # later) with no_path high until 205 turns GOOD; no_path follows the eligible bitmap 2 cycles
    # late (the bitmap register, then the registered candidates)
    to_a, lag = LATENCY - SETTLE_CYCLES + 2, 2
    assert no_path == list(range(s + to_a, t_good + lag))
    assert decs and all(d["index"] == 205 for d in decs)
    assert decs[0]["cycle"] == t_good + SETTLE_CYCLES
    assert_full_rate(decs)
    assert decs[-1]["cycle"] == tb.cycle - 1
    tb.check_entries(decs)
    # and back to nothing when the only eligible entry is marked ASSUMED_BAD again
    t_bad = tb.cycle + 10
    decs, no_path = await tb.run(60, repeat_req(4, 200, 8),
                                 events={t_bad: [tb.state_event(205, BAD)]})
    # picks already scheduled for 205 are not used once it is ASSUMED_BAD (DROP_CYCLES after
    # the strobe): they wait at the output for a replacement, and there is none
    assert decs and decs[-1]["cycle"] == t_bad + DROP_CYCLES - 1
    assert no_path == list(range(t_bad + lag, tb.cycle))


@cocotb.test()
async def run_write_clash(dut):
    """Wide writes (a new EV) to the entries being sprayed, many in the cycle of their table read:
    every decision carries the record as of the cycle its read was issued (READ_LATENCY cycles
    before ``valid``; a read that clashed with a same-cycle write was redone), nothing is lost."""
    tb = TB(dut)
    await tb.reset()
    rng = random.Random(7)
    idxs = list(range(40, 44))
    await tb.fill({i: {"weight": 1} for i in idxs})
    hist = {i: [(-1, tb.table[i]["ev"])] for i in idxs}     # (cycle written, ev)

    def ev_write(i, ev, c):
        def f():
            e = dict(tb.table[i], ev=ev)
            tb.table[i] = e
            dut.w_data.value = PathEntry.const(dict(e, state=EvState(e["state"]))).as_value().value
            dut.w_addr.value = i
            dut.w_en.value = 1
            hist[i].append((c, ev))
        return f
    s = tb.cycle
    events = {c: [ev_write(rng.choice(idxs), 0x5000_0000 + c, c)]
              for c in range(s + 5, s + 600) if rng.random() < 0.7}
    reqs = [(3, 40, 4)] * 500
    decs, _ = await tb.run(700, iter(reqs), events=events)
    assert len(decs) == len(reqs)
    model = Model(tb.table, tb.depth)
    assert [d["index"] for d in decs] == [model.pick(*r) for r in reqs]
    fresh = 0
    for d in decs:
        read = d["cycle"] - READ_LATENCY
        when, ev = [h for h in hist[d["index"]] if h[0] <= read][-1]
        assert d["ev"] == ev, (d, read, hist[d["index"]][-3:])
        fresh += when == read - 1               # written in the cycle before the read
    assert fresh > 20                           # writes land right up to the read


@cocotb.test()
async def run_stale_repick(dut):
    """Entries made DENIED / ASSUMED_BAD / weight 0 / avoided while their picks are in flight,
    under random backpressure: every decision that rises names an entry of its request's range
    that was eligible after the writes of ``DROP_CYCLES`` clocks before and not avoided then;
    stale picks are replaced (nothing lost: one decision per request)."""
    tb = TB(dut)
    await tb.reset()
    rng = random.Random(11)
    n = 24
    await tb.fill({i: {"weight": rng.randint(1, 3)} for i in range(n)})
    states = {i: GOOD for i in range(n)}
    weights = {i: tb.table[i]["weight"] for i in range(n)}
    avoid = 0
    hist = {}                            # clock -> (eligible set after its writes, avoid during it)
    dut.avoid.value = 0
    requests, taken, decs, rises = 0, 0, [], []
    prev_hold = False
    cycles = 4000
    for c in range(cycles + 300):
        dut.st_en.value = 0
        dut.w_en.value = 0
        live = c < cycles
        if live and rng.random() < 0.3:
            i = rng.randrange(n)
            if rng.random() < 0.6:       # state port: any state
                st = rng.choice([GOOD, GOOD, BAD, DENIED])
                tb.state_event(i, st)()
                states[i] = st
            else:                        # wide write: weight (0 = ineligible) and state
                w, st = rng.choice([0, 1, 2, 3]), rng.choice([GOOD, GOOD, DENIED])
                e = dict(tb.table[i], weight=w, state=st)
                tb.table[i] = e
                dut.w_data.value = PathEntry.const(dict(e, state=EvState(st))).as_value().value
                dut.w_addr.value, dut.w_en.value = i, 1
                states[i], weights[i] = st, w
        if live and rng.random() < 0.05:
            avoid ^= 1 << rng.randrange(n)
        if not live:                     # drain: every entry made eligible, nothing avoided
            avoid = 0
            if c - cycles < n:
                i = c - cycles
                e = dict(tb.table[i], weight=1, state=GOOD)
                tb.table[i] = e
                dut.w_data.value = PathEntry.const(dict(e, state=EvState(GOOD))).as_value().value
                dut.w_addr.value, dut.w_en.value = i, 1
                states[i], weights[i] = GOOD, 1
        dut.avoid.value = avoid
        hist[c] = ({i for i in range(n) if states[i] == GOOD and weights[i] > 0}, avoid)
        offer = live and requests < 3000
        dut.req__valid.value = int(offer)
        dut.req__payload.value = req_bits(2, 0, n)
        rdy = rng.random() < 0.7 or not live
        dut.decision__ready.value = int(rdy)
        await ReadOnly()
        valid = dut.decision__valid.value == 1
        if valid and not prev_hold:
            rises.append((c, int(dut.decision__payload.value) & 0xFF))
        if valid and rdy:
            decs.append(c)
        prev_hold = valid and not rdy
        if offer and dut.req__ready.value == 1:
            requests += 1
        await FallingEdge(dut.clk)
    dut.req__valid.value = 0
    assert requests > 1500 and len(decs) == requests, (requests, len(decs))
    bad = [(t, i) for t, i in rises
           if t - DROP_CYCLES in hist and (i not in hist[t - DROP_CYCLES][0]
                                           or (hist[t - DROP_CYCLES][1] >> i) & 1)]
    assert not bad, bad[:5]
    assert all(i < n for _, i in rises)


@pytest.mark.parametrize("depth", [256])
def test_spray(tmp_path, depth):
    run_rtl(SprayScheduler(depth), toplevel="spray", test_module="tests.rtl.test_spray",
            build_dir=tmp_path / f"spray{depth}", env={"depth": depth}, quiet=True)


@pytest.mark.parametrize("depth", [0, 8, 100, 512])
def test_bad_depth(depth):
    with pytest.raises(ValueError):
        SprayScheduler(depth)
