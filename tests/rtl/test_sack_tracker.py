"""SackTracker: PSN window, duplicates, completions, ACK/NACK/probe-reply requests.

cocotb testbench (``run_*`` coroutines) and its pytest wrappers.  RxPacket
records are driven straight into the tracker.  A Python model of the
tracker's documented behaviour (window classification, sliding ePSN,
completion per last PSN, coalescing by count, immediate ACK on completion /
duplicate / CE, trim NACK, probe reply) predicts, packet by packet, the
PlaceCmds, Completions and AckRequests; in lock-step runs every output is
compared after each packet, in the streaming run (back-to-back packets,
random backpressure on all outputs) the totals and the final state are.
"""

import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from mrcnic import wire
from mrcnic.rtl.layouts import AckRequest, Completion, PlaceCmd, RxKind, RxPacket, RxQpContext
from mrcnic.rtl.sack_tracker import SackTracker
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import start

M24 = (1 << 24) - 1
INPUTS = ["pkt__valid", "pkt__payload", "place__ready", "ack__ready", "cpl__ready",
          "qp_w_en", "qp_w_addr", "qp_w_data", "ack_every", "ack_timeout"]
ACK_FIELDS = ("qp", "port", "ev", "cum_psn", "syndrome", "msn", "flags", "base_psn", "bitmap", "ts")


def rx(psn, *, qp=0, kind=RxKind.DATA, last=0, imm=None, ev=0, port=0, ce=0, trimmed=0, ts=0):
    """One RxPacket as a dict (addr/length derived from the PSN so PlaceCmds are checkable)."""
    return {"kind": kind, "qp": qp, "psn": psn & M24, "last": last, "has_imm": int(imm is not None),
            "imm": imm or 0, "addr": (0x10000 + 64 * (psn & 0xFFFF)) & 0xFFFFFFFF,
            "length": 1 + (psn % 1000), "ev": ev, "port": port, "ecn_ce": ce, "trimmed": trimmed,
            "ts": ts, "opcode": wire.OP_WRITE_ONLY_IMM if imm is not None else wire.OP_WRITE_ONLY}


class QpModel:
    """Reference model of one QP of the tracker (see the SackTracker docstring)."""

    def __init__(self, qp, start_psn, window, ack_every):
        self.qp, self.e, self.window, self.every = qp, start_psn, window, ack_every
        self.got, self.flags, self.msn, self.unacked = set(), {}, 0, 0
        self.counts = dict(accepted=0, duplicates=0, out_of_window=0, completions=0,
                           acks=0, nacks=0)

    def bitmap(self):
        return sum(1 << i for i in range(64) if (self.e + i) & M24 in self.got)

    def _ack(self, p, flags=0, ts=0, syndrome=wire.AETH_ACK, base=None, bitmap=None):
        self.counts["nacks" if syndrome == wire.AETH_NAK_PSN else "acks"] += 1
        return {"qp": self.qp, "port": p["port"], "ev": p["ev"], "cum_psn": (self.e - 1) & M24,
                "syndrome": syndrome, "msn": self.msn & M24, "flags": flags,
                "base_psn": self.e if base is None else base,
                "bitmap": self.bitmap() if bitmap is None else bitmap, "ts": ts}

    def packet(self, p):
        """-> (place dict or None, [completion dicts], ack dict or None)."""
        if p["kind"] == RxKind.PROBE:
            return None, [], self._ack(p, flags=wire.SACK_PROBE_REPLY, ts=p["ts"])
        if p["trimmed"]:
            return None, [], self._ack(p, flags=wire.SACK_TRIM_NACK, syndrome=wire.AETH_NAK_PSN,
                                       base=p["psn"], bitmap=0)
        psn = p["psn"]
        off = (psn - self.e) & M24
        new = off < self.window and psn not in self.got
        dup = not new and (off < self.window or off >= 1 << 23)
        place = {"place": int(new), "addr": p["addr"], "length": p["length"]}
        cpls, trig = [], False
        if new:
            self.counts["accepted"] += 1
            self.got.add(psn)
            self.flags[psn] = (p["last"], p["has_imm"], p["imm"])
            self.unacked += 1
            trig = self.unacked >= self.every
            while self.e in self.got:
                self.got.remove(self.e)
                last, has_imm, imm = self.flags.pop(self.e)
                if last:
                    cpls.append({"qp": self.qp, "psn": self.e, "has_imm": has_imm, "imm": imm})
                    self.msn += 1
                    self.counts["completions"] += 1
                    trig = True
                self.e = (self.e + 1) & M24
        elif dup:
            self.counts["duplicates"] += 1
            trig = True
        else:
            self.counts["out_of_window"] += 1
        ce = bool(p["ecn_ce"]) and (new or dup)
        ack = None
        if trig or ce:
            ack = self._ack(p, flags=wire.SACK_ECN_ECHO if ce else 0)
            self.unacked = 0
        return place, cpls, ack


def _as_dict(layout, value, fields):
    view = layout.from_bits(value)
    return {f: getattr(view, f) for f in fields}


class TB:
    """Owns the DUT: QP writes, a packet driver, output monitors with random backpressure."""

    def __init__(self, dut):
        self.dut = dut
        self.window = tb_param("window")
        self.cycle = 0
        self.pause = 0.0                     # probability an output sink is not ready
        self.places, self.acks, self.cpls = [], [], []
        self.models = {}

    async def reset(self, ack_every=1, ack_timeout=0):
        await start(self.dut, INPUTS)
        self.dut.ack_every.value = ack_every
        self.dut.ack_timeout.value = ack_timeout
        self.ack_every = ack_every
        cocotb.start_soon(self._monitor())

    async def _monitor(self):
        d = self.dut
        sinks = [("place", self.places, PlaceCmd, ("place", "addr", "length")),
                 ("ack", self.acks, AckRequest, ACK_FIELDS),
                 ("cpl", self.cpls, Completion, ("qp", "psn", "has_imm", "imm"))]
        while True:
            readies = {}
            for name, *_ in sinks:
                readies[name] = int(random.random() >= self.pause)
                getattr(d, f"{name}__ready").value = readies[name]
            await RisingEdge(d.clk)
            self.cycle += 1
            for name, items, layout, fields in sinks:
                if readies[name] and int(getattr(d, f"{name}__valid").value):
                    item = _as_dict(layout, int(getattr(d, f"{name}__payload").value), fields)
                    item["cycle"] = self.cycle
                    items.append(item)

    async def qp_write(self, qp, start_psn):
        d = self.dut
        d.qp_w_en.value, d.qp_w_addr.value = 1, qp
        d.qp_w_data.value = RxQpContext.const(
            {"valid": 1, "qpn": 0x100 + qp, "start_psn": start_psn}).as_value().value
        await RisingEdge(d.clk)
        d.qp_w_en.value = 0
        await ClockCycles(d.clk, self.window // 16 + 2)     # bitmap clear: window/16 cycles
        self.models[qp] = QpModel(qp, start_psn, self.window, self.ack_every)

    async def send(self, p):
        """Drive one packet until the tracker takes it."""
        d = self.dut
        d.pkt__payload.value = RxPacket.const(p).as_value().value
        d.pkt__valid.value = 1
        while True:
            await RisingEdge(d.clk)
            if int(d.pkt__ready.value):
                break
        d.pkt__valid.value = 0

    async def idle(self, quiet=24):
        """Wait until the tracker is idle and every output register has drained.

        Idle = input ready and no output valid for ``quiet`` cycles in a row: an ACK
        is built over several cycles (its bitmap is read 16 PSNs per cycle) during
        which no output is valid yet.
        """
        d = self.dut
        calm = 0
        while calm < quiet:
            await RisingEdge(d.clk)
            if (int(d.pkt__ready.value) and not int(d.place__valid.value)
                    and not int(d.ack__valid.value) and not int(d.cpl__valid.value)):
                calm += 1
            else:
                calm = 0

    def taken(self):
        out = []
        for items in (self.places, self.acks, self.cpls):
            out.append([{k: v for k, v in item.items() if k != "cycle"} for item in items])
            items.clear()
        return out

    async def step(self, p):
        """Send one packet, wait for the tracker to settle, compare every output with the model."""
        await self.send(p)
        await self.idle()
        place, cpls, ack = self.models[p["qp"]].packet(p)
        got_place, got_ack, got_cpl = self.taken()
        assert got_place == ([place] if place else []), (p["psn"], got_place, place)
        assert got_cpl == cpls, (p["psn"], got_cpl, cpls)
        assert got_ack == ([ack] if ack else []), (p["psn"], got_ack, ack)
        return place, cpls, ack

    def expected(self, order):
        """The models' PlaceCmds, completions and ACKs for packets ``order`` (in order)."""
        places, cpls, acks = [], [], []
        for p in order:
            place, c, ack = self.models[p["qp"]].packet(p)
            places += [place] if place else []
            cpls += c
            acks += [ack] if ack else []
        return places, cpls, acks

    def check_counters(self):
        total = {}
        for model in self.models.values():
            for k, v in model.counts.items():
                total[k] = total.get(k, 0) + v
        for k, v in total.items():
            assert int(getattr(self.dut, k).value) == v, (k, int(getattr(self.dut, k).value), v)


def message(start, n, *, qp=0, imm=None, every_last=None):
    """PSNs start..start+n-1 as packets; last of each ``every_last`` chunk (or of all) flagged."""
    pkts = []
    for i in range(n):
        last = (i + 1) % every_last == 0 if every_last else i == n - 1
        pkts.append(rx(start + i, qp=qp, last=int(last), imm=(imm + i) if (last and imm) else None,
                       ev=0x1000 + i, port=i % 4))
    return pkts


async def run_order(tb, start_psn, order, ack_every=4, qp=0):
    """Lock-step run of ``order`` with per-packet model comparison.

    Returns the completions, each with ``step``: the index of the packet that raised it.
    """
    await tb.reset(ack_every=ack_every)
    await tb.qp_write(qp, start_psn)
    cpls = []
    for i, p in enumerate(order):
        _, c, _ = await tb.step(p)
        cpls += [dict(x, step=i) for x in c]
    tb.check_counters()
    return cpls


@cocotb.test()
async def run_in_order(dut):
    """64-packet Write-with-Immediate in order: 64 placements, one completion, ACK every 8th."""
    tb = TB(dut)
    pkts = message(1000, 64, qp=2, imm=0xABCD0000)
    cpls = await run_order(tb, 1000, pkts, ack_every=8, qp=2)
    assert cpls == [{"qp": 2, "psn": 1063, "has_imm": 1, "imm": 0xABCD0000 + 63, "step": 63}]
    assert tb.models[2].e == 1064 and tb.models[2].counts["acks"] == 8


@cocotb.test()
async def run_permutation_dups(dut):
    """Random permutation + 10% duplicates, some CE marks: exact per-packet outputs."""
    rnd = random.Random(7)
    pkts = message(5000, 64, qp=1, imm=0x5000)
    order = pkts[:]
    rnd.shuffle(order)
    for p in rnd.sample(pkts, 7):             # duplicates, re-sent later than the original
        order.insert(rnd.randrange(order.index(p) + 1, len(order) + 1), dict(p))
    for p in rnd.sample(order, 5):
        p["ecn_ce"] = 1
    tb = TB(dut)
    cpls = await run_order(tb, 5000, order, ack_every=4, qp=1)
    # exactly one completion, raised by the packet that filled the last hole
    first = {}
    for i, p in enumerate(order):
        first.setdefault(p["psn"], i)
    assert cpls == [{"qp": 1, "psn": 5063, "has_imm": 1, "imm": 0x5000 + 63,
                     "step": max(first.values())}]
    assert tb.models[1].counts["duplicates"] == 7 and tb.models[1].counts["accepted"] == 64


@cocotb.test()
async def run_wrap(dut):
    """PSNs wrap through 0xFFFFFF; four 16-packet messages, permuted: four completions in order."""
    rnd = random.Random(11)
    start_psn = 0xFFFFE8
    pkts = message(start_psn, 64, every_last=16, imm=0x77)
    order = pkts[:]
    rnd.shuffle(order)
    cpls = await run_order(TB(dut), start_psn, order, ack_every=3, qp=0)
    assert [c["psn"] for c in cpls] == [(start_psn + 16 * k + 15) & M24 for k in range(4)]


@cocotb.test()
async def run_edges(dut):
    """Out of window, far behind, trimmed -> NACK, probe -> reply, CE -> ECN echo; counters."""
    tb = TB(dut)
    window = tb.window
    await tb.reset(ack_every=16)
    await tb.qp_write(5, 200)
    model = tb.models[5]
    await tb.step(rx(200, qp=5, ev=1))                        # new, in order, no ACK yet
    await tb.step(rx(203, qp=5, ev=2))                        # new, out of order
    place, _, ack = await tb.step(rx(201 + window, qp=5))     # first PSN past the window
    assert place["place"] == 0 and ack is None
    place, _, ack = await tb.step(rx(200 + (1 << 23) - 1, qp=5))   # far ahead: out of window
    assert place["place"] == 0 and ack is None
    place, _, ack = await tb.step(rx(200 - 5, qp=5, ev=3))    # behind: duplicate -> ACK
    assert place["place"] == 0 and ack["cum_psn"] == 200 and ack["bitmap"] == 0b100
    place, _, ack = await tb.step(rx(201, qp=5, ev=0xE0E0, port=3, ce=1))  # CE -> ECN echo
    assert place["place"] == 1 and ack["flags"] == wire.SACK_ECN_ECHO and ack["ev"] == 0xE0E0
    assert ack["port"] == 3 and ack["cum_psn"] == 201 and ack["bitmap"] == 0b10
    place, _, ack = await tb.step(rx(205, qp=5, ev=0x7777, port=2, trimmed=1))   # trim NACK
    assert place is None and ack["syndrome"] == wire.AETH_NAK_PSN
    assert ack["flags"] == wire.SACK_TRIM_NACK and ack["base_psn"] == 205 and ack["ev"] == 0x7777
    assert ack["cum_psn"] == 201
    _, _, ack = await tb.step(rx(0, qp=5, kind=RxKind.PROBE, ev=0xBEEF, port=1, ts=0x12345678))
    assert ack["flags"] == wire.SACK_PROBE_REPLY and ack["ts"] == 0x12345678
    assert ack["base_psn"] == 202 and ack["bitmap"] == 0b10 and ack["ev"] == 0xBEEF
    tb.check_counters()
    assert model.counts == dict(accepted=3, duplicates=1, out_of_window=2, completions=0,
                                acks=3, nacks=1)


@cocotb.test()
async def run_coalesce_timer(dut):
    """ack_every=N sends one ACK per N packets; the timer ACKs T cycles after the first un-acked."""
    tb = TB(dut)
    T = 60
    await tb.reset(ack_every=5, ack_timeout=T)
    await tb.qp_write(0, 10)
    t0 = tb.cycle
    for psn in (10, 11):
        await tb.send(rx(psn, ev=0x40 + psn, port=1))
    await ClockCycles(tb.dut.clk, T + 10)
    places, acks, _ = tb.places, tb.acks, tb.cpls
    assert [p["place"] for p in places] == [1, 1]
    assert len(acks) == 1, acks
    assert T <= acks[0]["cycle"] - t0 <= T + 8, acks[0]["cycle"] - t0
    assert acks[0]["cum_psn"] == 11 and acks[0]["ev"] == 0x4B and acks[0]["port"] == 1
    tb.taken()
    for psn in range(12, 17):                # five more: exactly one count-triggered ACK
        await tb.send(rx(psn, ev=psn))
    await ClockCycles(tb.dut.clk, 13)      # (the count ACK leaves about 11 cycles after the 5th)
    assert len(tb.acks) == 1 and tb.acks[0]["cum_psn"] == 16 and tb.acks[0]["ev"] == 16
    await ClockCycles(tb.dut.clk, T + 10)    # the ACK reset the timer: nothing more
    assert len(tb.acks) == 1


@cocotb.test()
async def run_stream(dut):
    """Two QPs interleaved back to back with 30% backpressure on every output: totals exact."""
    tb = TB(dut)
    rnd = random.Random(3)
    await tb.reset(ack_every=4)
    tb.pause = 0.3
    await tb.qp_write(1, 0xFFFFF0)
    await tb.qp_write(6, 77)
    a = message(0xFFFFF0, 48, qp=1, every_last=16, imm=0x100)
    b = message(77, 48, qp=6, every_last=24)
    rnd.shuffle(a)
    rnd.shuffle(b)
    order = [p for pair in zip(a, b) for p in pair]
    order += [dict(p) for p in rnd.sample(order, 6)]        # trailing duplicates
    expect_places, expect_cpls, expect_acks = tb.expected(order)
    t0 = tb.cycle
    for p in order:
        await tb.send(p)
    t1 = tb.cycle
    await tb.idle()
    places, acks, cpls = tb.taken()
    assert places == expect_places
    assert sorted(cpls, key=lambda c: (c["qp"], c["psn"])) == \
        sorted(expect_cpls, key=lambda c: (c["qp"], c["psn"]))
    for q in (1, 6):   # per QP, completions keep their order
        assert [c for c in cpls if c["qp"] == q] == [c for c in expect_cpls if c["qp"] == q]
    for k, (got, want) in enumerate(zip(acks, expect_acks)):
        assert got == want, (k, got, want)
    assert len(acks) == len(expect_acks)
    tb.check_counters()
    dut._log.info("stream: %d packets in %d cycles (%.2f cycles/packet, 30%% backpressure)",
                  len(order), t1 - t0, (t1 - t0) / len(order))


@cocotb.test()
async def run_gaps(dut):
    """Packets with random idle gaps, arriving while the tracker is busy (an ACK being built,
    a slide) with its input register empty: each packet is taken exactly once (one PlaceCmd
    per packet, in order), with 30% backpressure on every output; outputs compared exactly."""
    tb = TB(dut)
    rnd = random.Random(9)
    await tb.reset(ack_every=2)
    tb.pause = 0.3
    await tb.qp_write(0, 500)
    await tb.qp_write(7, 0xFFFFF8)
    a = message(500, 40, qp=0, every_last=8, imm=0x300)
    b = message(0xFFFFF8, 40, qp=7, every_last=20)
    rnd.shuffle(a)
    rnd.shuffle(b)
    order = [p for pair in zip(a, b) for p in pair]
    for p in rnd.sample(order, 8):                  # duplicates (each triggers an ACK)
        order.insert(rnd.randrange(order.index(p) + 1, len(order) + 1), dict(p))
    for k in range(0, len(order), 9):               # trimmed (NACK), out of window, probes
        order.insert(k, rx(order[k]["psn"] + 2000, qp=order[k]["qp"]))
        order.insert(k, rx(0, qp=order[k]["qp"], kind=RxKind.PROBE, ts=k))
        order.insert(k, rx(order[k]["psn"] + 1, qp=order[k]["qp"], trimmed=1, ev=k))
    expect_places, expect_cpls, expect_acks = tb.expected(order)
    for p in order:
        await tb.send(p)
        await ClockCycles(dut.clk, rnd.choice((0, 1, 2, 3, 4, 6, 9)))
    await tb.idle()
    places, acks, cpls = tb.taken()
    assert len(places) == len(expect_places), (len(places), len(expect_places))
    assert places == expect_places
    for q in (0, 7):
        assert [c for c in cpls if c["qp"] == q] == [c for c in expect_cpls if c["qp"] == q]
    assert len(cpls) == len(expect_cpls)
    assert acks == expect_acks
    tb.check_counters()


@cocotb.test()
async def run_same_word(dut):
    """Back-to-back packets into one bitmap word (read-modify-write forwarding): out-of-order
    PSNs of a 16-PSN word, then the next word backwards, each PSN followed at once by its
    duplicate, then the first
    word again as duplicates, with no gaps between packets."""
    tb = TB(dut)
    rnd = random.Random(5)
    await tb.reset(ack_every=100)
    await tb.qp_write(3, 0x40)
    pkts = message(0x40, 32, qp=3, every_last=8, imm=0x900)
    first = pkts[1:16]
    rnd.shuffle(first)
    order = first + [pkts[0]] + [x for p in reversed(pkts[16:]) for x in (p, dict(p))]
    order += [dict(p) for p in pkts[:16]]
    expect_places, expect_cpls = [], []
    for p in order:
        place, cpls, _ = tb.models[3].packet(p)
        expect_places.append(place)
        expect_cpls += cpls
    for p in order:
        await tb.send(p)
    await tb.idle()
    places, _, cpls = tb.taken()
    assert places == expect_places
    assert [p["place"] for p in places] == [1] * 16 + [1, 0] * 16 + [0] * 16
    assert cpls == expect_cpls and len(cpls) == 4
    tb.check_counters()


@cocotb.test()
async def run_throughput(dut):
    """Cycles per packet with outputs always ready: in order, then out of order (shuffled)."""
    tb = TB(dut)
    await tb.reset(ack_every=8)
    await tb.qp_write(4, 300)
    rates = []
    for shuffle in (False, True):
        pkts = message(300 + 64 * shuffle, 64, qp=4)
        if shuffle:
            random.Random(1).shuffle(pkts)
        t0 = tb.cycle
        for p in pkts:
            await tb.send(p)
        rates.append((tb.cycle - t0) / len(pkts))
        await tb.idle()
        places, _, cpls = tb.taken()
        assert [p["place"] for p in places] == [1] * 64 and len(cpls) == 1
    dut._log.info("cycles/packet: in order %.2f, shuffled %.2f", *rates)
    # measured 2.66 / 2.81: about 2 cycles per in-order packet (classify, then act) plus 5 per
    # ACK (the bitmap is read 16 PSNs per cycle); the bounds leave 0.05 of slack for no other
    # reason (before the 125 MHz pipelining: 1.61 / 1.80)
    assert rates[0] <= 2.71 and rates[1] <= 2.86, rates


def test_sack_tracker(tmp_path):
    run_rtl(SackTracker(qps=8, window=256), toplevel="sack_tracker",
            test_module="tests.rtl.test_sack_tracker", build_dir=tmp_path / "w256",
            env={"window": 256}, quiet=True)


def test_sack_tracker_window64(tmp_path):
    run_rtl(SackTracker(qps=8, window=64), toplevel="sack_tracker",
            test_module="tests.rtl.test_sack_tracker", build_dir=tmp_path / "w64",
            env={"window": 64}, testcase="run_wrap", quiet=True)


def test_parameters():
    import pytest
    for kw in ({"qps": 0}, {"qps": 9}, {"window": 100}, {"window": 32}, {"window": 8192}):
        with pytest.raises(ValueError):
            SackTracker(**kw)
