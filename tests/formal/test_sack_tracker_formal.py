"""Formal proof of the SACK tracker (rtl/sack_tracker.py): each PSN placed at most once, only
inside the window; the cumulative ACK never steps back (24-bit serial arithmetic);
completions in order, each only after every PSN of its message was placed.

Small parameters: ``qps=1``, ``window=64`` (the smallest the block allows); packets may
name any QP (QPs other than 0 are out of window).  Placement (at most once, inside the
window), one PlaceCmd per packet in order and the output stream rules are proved unbounded
by k-induction (closes at k=1); the cumulative-ACK and completion properties are bounded at
``DEPTH`` (their invariants, below, are written and hold in the bounded run, but the
induction with them did not finish in 5-10 minutes).

The wrapper's reference model is its own record of the placements (``PlaceCmd`` with
``place=1`` taken at the output): ``base``, the first PSN not placed, and ``got``, the
PSNs in ``(base, base + 64)`` placed out of order, as a ring indexed by PSN mod 64 like the
block's bitmap (no PSN is placed 64 or more beyond ``base``).  A placement of PSN p is checked against it: ``p - base < 64`` (inside the
window, never behind the cumulative point) and p not placed yet (at most once; every PSN,
not one watched PSN; a PSN may be placed again only after the window has passed it, i.e.
after 2**24 PSNs, as for any 24-bit PSN).  ``base2`` / ``got2`` are the same with the
PlaceCmd waiting at the output counted as placed.

The cumulative ACK and the completions compare 24-bit PSNs with the previous one, which is
only meaningful while they are less than 2**23 apart.  The tracker bounds the distance for
ACKs (an ACK at least every 256 new packets; not proved here) but not for completions (a message may be
longer than 2**23 packets), so both are checked while the placement point ``base2`` is
less than 2**22 PSNs ahead of the last cumulative ACK / completion (flags ``far_a`` /
``far_c``, monotonic, never set in a run shorter than 2**22 packets).

Auxiliary invariants (proved by the same induction; those of the ACK and the completion
only with ``parts`` naming them) tie the block's state to the model:
the QP's ePSN ``E`` is at most 64 behind ``base2`` and equal to it outside a slide
(SETTLE / LOAD / ADVANCE); the bitmap memory's 64 received bits (its rows, read through
``formal.Internals``; a ring by PSN mod 64) are exactly the slots of the PSNs in
``[E, base2)`` and those of ``got2``, which are disjoint; the slide registers (``cw`` / ``pos`` / ``b0``, ``e1``, the LOAD address) are
those of ``E``'s word; CLASS / CHECK's registered classification (``at_e``, ``new_w``,
``dup_w``, ``bit_cur``, ``next_set``, ``qp_ok``, ``cw`` / ``pos``) is that of the packet
in ``nxt`` / ``cur``; the packets between ``pkt`` and ``place`` (the place register,
CHECK's ``cur``, CLASS's / the input register's ``nxt``) are the wrapper's in-order queue;
the completion being fetched / offered names a PSN after the previous completion and
before ``E``; the ACK offered and the one being built (``e1`` = ePSN - 1) lie between the
last cumulative ACK and ``E``; the QP write at clock 0 leaves a state the invariants hold
in (the bitmap clear, ``clr_pend``, then every row zero).
"""

import pytest
from amaranth.hdl import Array, Assert, Assume, Cat, Const, Elaboratable, Module, Mux, Signal

from mrcnic import wire
from mrcnic.rtl import sack_tracker
from mrcnic.rtl.layouts import Completion, RxKind, RxPacket
from .formal import (Internals, const, drive_inputs, mutant, require_failed, require_proved,
                     run_formal, stream_rule)

K = 1            # induction length (the placement invariants close at 1)
DEPTH = 14       # bounded proof of the ACK / completion properties
MUTANT_DEPTH = 12   # the mutant's duplicate placement is refuted by clock 11
WINDOW = 64
FIFO = 4         # packets between pkt and place: input register, CLASS/CHECK, output register
FAR = 1 << 22    # distances at or beyond this: a 24-bit PSN comparison is no longer checked


def serial_lt(a, b):
    """a < b in 24-bit serial arithmetic (RFC 1982): (b - a) mod 2**24 in 1 .. 2**23 - 1."""
    d = (b - a)[:24]
    return (d != 0) & ~d[23]


def one_hot(index, width=16):
    """The ``width``-bit one-hot code of ``index``."""
    return (Const(1, width) << index)[:width]


def _d(a, b):
    """(a - b) mod 2**24."""
    return (a - b)[:24]


class SackProof(Elaboratable):
    """The SACK tracker under its input contract.

    The QP context is written once, at the first clock, with any ``start_psn``
    (``AnyConst``); the contract allows QP writes only while no packet of the QP is in
    flight, and the run then starts from that write.
    """

    def __init__(self, cls=sack_tracker.SackTracker, parts=("ack", "cpl"), aux=True):
        self.dut = cls(qps=1, window=WINDOW)
        self.parts = parts      # properties asserted besides placement and the stream rules
        self.aux = aux          # assert the auxiliary invariants (for the induction)

    def _check(self, part, cond):
        return Assert(cond) if part in self.parts else Assert(1)

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        ins = Internals(dut, platform)
        m.submodules.dut = ins.frag
        drive_inputs(m, dut)
        pkt = dut.pkt
        start, s1 = const(24, name="start")
        m.d.comb += s1
        first = Signal(init=1)
        m.d.sync += first.eq(0)
        # Contract: one QP context write (QP 0, valid, start_psn) at the first clock, none later
        # ("write a QP's context only while no packet of it is in flight").
        m.d.comb += Assume(dut.qp_w_en == first)
        with m.If(first):
            m.d.comb += Assume((dut.qp_w_addr == 0) & dut.qp_w_data.valid
                               & (dut.qp_w_data.start_psn == start))
        # Contract: the input stream holds its packet until taken; kinds are those the parser
        # produces (DATA, PROBE, ACK).
        stream_rule(m, pkt.valid, pkt.ready, pkt.payload.as_value(), check=Assume)
        m.d.comb += Assume(pkt.payload.kind.as_value() != 3)
        # Obligations: every output holds its payload until taken.
        for s in (dut.place, dut.ack, dut.cpl):
            stream_rule(m, s.valid, s.ready, s.payload.as_value())

        # In-order queue of the non-trimmed DATA packets taken, for their PlaceCmd (the block
        # sends exactly one per such packet, in arrival order): their PSNs.
        psns = [Signal(24, name=f"q_psn{k}") for k in range(FIFO)]
        apsns = Array(psns)
        level = Signal(range(FIFO + 2))
        take = pkt.valid & pkt.ready & (pkt.payload.kind == RxKind.DATA) & ~pkt.payload.trimmed
        out = dut.place.valid & dut.place.ready
        m.d.comb += Assert(level <= FIFO)
        m.d.comb += Assert(~out | (level != 0))     # no PlaceCmd without a packet
        head = psns[0]
        with m.If(out):
            for k in range(FIFO - 1):
                m.d.sync += psns[k].eq(psns[k + 1])
        with m.If(take):
            for k in range(FIFO):
                with m.If(level - out == k):
                    m.d.sync += psns[k].eq(pkt.payload.psn)
        m.d.sync += level.eq(level + take - out)

        # ---- the placement model: base (first PSN not placed) and got, a ring indexed by
        # PSN mod 64 like the block's bitmap: got[p mod 64] = PSN p in (base, base + 64) placed
        base = Signal(24)
        got = Signal(WINDOW)
        off = Signal(24)                 # the head's offset from base
        m.d.comb += off.eq(_d(head, base))
        # base2 / got2: the same with the PlaceCmd offered (place=1) counted as placed
        held = dut.place.valid & dut.place.payload.place
        got_p = Signal(WINDOW)
        m.d.comb += got_p.eq(got | Mux(held & (off < WINDOW), one_hot(head[:6], WINDOW), 0))
        # the run of placed PSNs from base on (ring slots base mod 64 ...): adding base's
        # one-hot to the ring written twice clears the run and sets the first slot after it
        b6 = base[:6]
        dbl = Cat(got_p, got_p)
        summ = Signal(2 * WINDOW + 1)
        m.d.comb += summ.eq(dbl + one_hot(b6, 2 * WINDOW))
        run = dbl & ~summ[:2 * WINDOW]
        z = summ & ~Cat(dbl, Const(0, 1))        # one-hot: the first slot not placed
        iz = Signal(8)
        m.d.comb += iz.eq(0)
        for i in range(2 * WINDOW + 1):
            with m.If(z[i]):
                m.d.comb += iz.eq(i)
        t = Signal(range(2 * WINDOW + 1))        # the run's length (all 64 slots: 64)
        m.d.comb += t.eq(Mux(iz - b6 >= WINDOW, WINDOW, iz - b6))
        base2, got2 = Signal(24), Signal(WINDOW)
        m.d.comb += [base2.eq(base + t), got2.eq(got_p & ~(run[:WINDOW] | run[WINDOW:]))]
        with m.If(first):
            m.d.sync += [base.eq(start), got.eq(0)]
        with m.Elif(out & dut.place.payload.place):
            m.d.sync += [base.eq(base2), got.eq(got2)]
            # only inside the window (never behind the cumulative point, never 64 or more
            # beyond it), and at most once
            m.d.comb += [Assert(off < WINDOW), Assert(~got.bit_select(head[:6], 1))]

        # ---- cumulative ACK point (ACK and trim NACK: cum_psn = ePSN - 1) never steps back --
        ack = dut.ack
        is_probe = (ack.payload.flags & wire.SACK_PROBE_REPLY).any()
        cum = Signal(24)
        have_cum = Signal()
        prev_a = Mux(have_cum, cum, (start - 1)[:24])
        far_a_q = Signal()
        far_a = far_a_q | (~first & (_d(base2 - 1, prev_a) >= FAR))
        m.d.sync += far_a_q.eq(far_a)
        with m.If(ack.valid & ack.ready & ~is_probe):
            c = ack.payload.cum_psn
            m.d.sync += [cum.eq(c), have_cum.eq(1)]
            with m.If(~far_a):
                m.d.comb += self._check("ack", ~serial_lt(c, prev_a))

        # ---- completions: in order, each after every PSN since the previous one was placed --
        cpl = dut.cpl
        last_c = Signal(24)
        have_c = Signal()
        prev_c = Mux(have_c, last_c, (start - 1)[:24])
        far_c_q = Signal()
        far_c = far_c_q | (~first & (_d(base2 - 1, prev_c) >= FAR))
        m.d.sync += far_c_q.eq(far_c)
        with m.If(cpl.valid & cpl.ready):
            c = cpl.payload.psn
            m.d.sync += [last_c.eq(c), have_c.eq(1)]
            # c after the previous completion (strictly ascending) and before base2: every PSN
            # up to c placed, or offered as the PlaceCmd waiting at the output (placement
            # holds completions back while a PlaceCmd is offered, so either comes first)
            with m.If(~far_c):
                m.d.comb += [self._check("cpl", _d(c, prev_c) != 0),
                             self._check("cpl", _d(c, prev_c) <= _d(base2 - 1, prev_c))]

        # ================= auxiliary invariants (for the induction) =====================
        if not self.aux:
            return m
        st = ins.signal("fsm_state")
        S = ins.states(st)
        in_ = {name: st == code for name, code in S.items()}
        sliding = in_["SETTLE"] | in_["LOAD"] | in_["ADVANCE"]
        E = ins.signal("epsn0")
        e1 = ins.signal("e1")
        nxt, cur = RxPacket(ins.signal("nxt")), RxPacket(ins.signal("cur"))
        nxt_valid, in_class = ins.signal("nxt_valid"), ins.signal("in_class")
        nxt_kd, nxt_oh, nxt_hm1 = ins.signal("nxt_kd"), ins.signal("nxt_oh"), ins.signal("nxt_hm1")
        cur_kd, cur_dt, cur_pr = ins.signal("cur_kd"), ins.signal("cur_dt"), ins.signal("cur_pr")
        q, rd_addr = ins.signal("q"), ins.signal("rd_addr")
        cw, pos, b0 = ins.signal("cw"), ins.signal("pos"), ins.signal("b0")
        at_e, bit_cur, new_w = ins.signal("at_e"), ins.signal("bit_cur"), ins.signal("new_w")
        dup_w, next_set, qp_ok = ins.signal("dup_w"), ins.signal("next_set"), ins.signal("qp_ok")
        last_wrap = ins.signal("last_wrap")
        j, j_last = ins.signal("j"), ins.signal("j_last")
        cpl_wait, cpl_fill = ins.signal("cpl_wait"), ins.signal("cpl_fill")
        cpl_pl = Completion(ins.signal("cpl_pl"))
        qvalid, clr_pend = ins.signal("qvalid0"), ins.signal("clr_pend0")
        clr_word, armed = ins.signal("clr_word"), ins.signal("armed0")
        rows = ins.memory_rows(("bitmap",))       # 4 words: bits 0..15 received
        arows = Array(rows)

        def kd(p):
            return (p.kind == RxKind.DATA) & ~p.trimmed

        # registers loaded together with the packet they describe (nxt: from the first
        # clock on; cur: once a packet was classified, used in CHECK)
        with m.If(~first):
            m.d.comb += [Assert(nxt_kd == kd(nxt)), Assert(nxt_oh == one_hot(nxt.psn[:4])),
                         Assert(nxt_hm1 == (nxt.psn[6:] - 1)[:18])]
        with m.If(in_["CHECK"]):
            m.d.comb += [Assert(cur_kd == kd(cur)),
                         Assert(cur_dt == ((cur.kind == RxKind.DATA) & cur.trimmed)),
                         Assert(cur_pr == (cur.kind == RxKind.PROBE))]
        m.d.comb += [
            Assert(in_class == in_["CLASS"]),
            Assert(~in_["CLASS"] | ~nxt_valid),
            # at most one completion in the output path (fetching its flags or offered)
            Assert((cpl.valid + cpl_wait + cpl_fill) <= 1),
            # the ACK bitmap's chunk loads (j = 2 .. 5) only while one is built, unoffered
            Assert(~((j >= 2) & (j <= 5)) | (in_["ACK"] & ~ack.valid)),
            Assert(~(in_["ACK"] & (j != 0)) | ~ack.valid),
            Assert(~in_["ACK"] | ((j <= 5) & (j_last == (j == 5)))),
        ]
        # the queue: the place register's packet, then CHECK's cur, then CLASS's / the input
        # register's nxt
        qa = dut.place.valid
        qb = in_["CHECK"] & cur_kd
        qc = (in_["CLASS"] | nxt_valid) & nxt_kd
        with m.If(~first):
            m.d.comb += Assert(level == qa + qb + qc)
            with m.If(qb):
                m.d.comb += Assert(apsns[qa] == cur.psn)
            with m.If(qc):
                m.d.comb += Assert(apsns[qa + qb] == nxt.psn)

        # the state the first clock starts from (the reset values)
        with m.If(first):
            m.d.comb += [Assert(st == S["IDLE"]), Assert(~nxt_valid), Assert(~dut.place.valid),
                         Assert(~ack.valid), Assert(~cpl.valid), Assert(~cpl_wait),
                         Assert(~cpl_fill), Assert(~clr_pend), Assert(~armed), Assert(level == 0),
                         Assert(~have_cum), Assert(~have_c), Assert(~far_a_q), Assert(~far_c_q)]
        # after the QP write: the bitmap is cleared before anything else
        with m.If(~first):
            m.d.comb += [Assert(qvalid), Assert(~in_["CLEAR"] | clr_pend)]
        with m.If(~first & clr_pend):
            m.d.comb += [Assert(in_["IDLE"] | in_["CLEAR"]), Assert(~dut.place.valid),
                         Assert(~ack.valid), Assert(~cpl.valid), Assert(~cpl_wait),
                         Assert(~cpl_fill), Assert(base == start), Assert(got == 0),
                         Assert(E == start), Assert(~have_cum), Assert(~have_c),
                         Assert(~far_a_q), Assert(~far_c_q)]
            with m.If(in_["CLEAR"]):
                m.d.comb += Assert(clr_word <= 3)
                for i, r in enumerate(rows):
                    with m.If(clr_word > i):
                        m.d.comb += Assert(r[:16] == 0)

        run = ~first & ~clr_pend
        with m.If(run):
            # the model's got is normalised (base's slot clear); the PlaceCmd offered is not
            # placed yet
            m.d.comb += Assert(~got.bit_select(b6, 1))
            with m.If(held):
                m.d.comb += [Assert(off < WINDOW), Assert(~got.bit_select(head[:6], 1))]
            # E at most 64 behind base2, equal to it outside a slide
            dE = Signal(24)
            m.d.comb += dE.eq(_d(base2, E))
            m.d.comb += Assert(dE <= WINDOW)
            with m.If(~sliding):
                m.d.comb += Assert(dE == 0)
            # the bitmap's received bits (a ring by PSN mod 64, like got): the PSNs in
            # [E, base2) and got2's; got2 has nothing there (its PSNs there would lie 64 or
            # more beyond E)
            e6, g6 = E[:6], base2[:6]
            th_e = Signal(WINDOW)
            th_g = Signal(WINDOW)
            m.d.comb += [th_e.eq(one_hot(e6, WINDOW) - 1), th_g.eq(one_hot(g6, WINDOW) - 1)]
            span = Signal(WINDOW)
            m.d.comb += span.eq(Mux(dE == WINDOW, Const(-1, WINDOW),
                                    Mux(e6 <= g6, th_g & ~th_e, th_g | ~th_e)))
            bm = Signal(WINDOW)
            m.d.comb += bm.eq(Cat(*[r[:16] for r in rows]))
            m.d.comb += [Assert(bm == (span | got2)), Assert((span & got2) == 0)]
            # the slide registers: E's word
            e_word = arows[E[4:6]][:16]
            with m.If(in_["SETTLE"] | in_["ADVANCE"]):
                m.d.comb += [Assert(cw == e_word), Assert(pos == one_hot(E[:4])),
                             Assert(b0 == (cw & pos).any())]
            with m.If(in_["LOAD"]):
                m.d.comb += [Assert(rd_addr == E[4:6]), Assert(E[:4] == 0)]
            with m.If(in_["CHECK"] | sliding):
                m.d.comb += Assert(e1 == (E + 1)[:24])
            with m.If(in_["ACK"] & j_last):
                m.d.comb += Assert(e1 == (E - 1)[:24])
            # CLASS reads nxt's word; CHECK's registered classification is cur's
            with m.If(in_["CLASS"]):
                m.d.comb += [Assert(rd_addr == nxt.psn[4:6]), Assert(q == nxt.qp)]
            with m.If(in_["CHECK"]):
                c_word = arows[cur.psn[4:6]][:16]
                c_oh = one_hot(cur.psn[:4])
                win = _d(cur.psn, E) < WINDOW
                m.d.comb += [
                    Assert(q == cur.qp), Assert(qp_ok == (cur.qp == 0)),
                    Assert(at_e == (cur.psn == E)),
                    Assert(new_w == (qp_ok & win)),
                    Assert(dup_w == (qp_ok & _d(cur.psn, E)[23])),
                    Assert(bit_cur == (c_word & c_oh).any()),
                    Assert(cw == (c_word | c_oh)), Assert(pos == c_oh), Assert(b0),
                    Assert(next_set == (cw & (pos << 1)[:16]).any()),
                    Assert(last_wrap == (cur.last | cur.psn[:4].all())),
                ]
            # the ACK offered and the one being built: between the last cumulative ACK and E
            with m.If(~far_a):
                m.d.comb += self._check("ack", _d(E - 1, prev_a) <= _d(base2 - 1, prev_a))
                with m.If(ack.valid & ~is_probe):
                    m.d.comb += self._check("ack", _d(ack.payload.cum_psn, prev_a) <= _d(E - 1, prev_a))
            # the completion fetched / offered: after the previous one, before E
            with m.If(~far_c):
                m.d.comb += self._check("cpl", _d(E - 1, prev_c) <= _d(base2 - 1, prev_c))
                with m.If(cpl.valid | cpl_wait | cpl_fill):
                    m.d.comb += [self._check("cpl", _d(cpl_pl.psn, prev_c) != 0),
                                 self._check("cpl", _d(cpl_pl.psn, prev_c) <= _d(E - 1, prev_c))]
        return m


@pytest.mark.formal
def test_sack_tracker_induction():
    """SACK tracker (qps=1, window=64): placement at most once and inside the window, one
    PlaceCmd per packet in order, outputs held until taken: unbounded (k-induction)."""
    require_proved(run_formal(SackProof(parts=()), "sack_tracker", mode="prove", depth=K))


@pytest.mark.formal
def test_sack_tracker_bounded():
    """The cumulative ACK and completion properties (and all the above) for DEPTH clocks."""
    require_proved(run_formal(SackProof(aux=False), "sack_tracker_bmc", mode="bmc",
                              depth=DEPTH))


@pytest.mark.formal
def test_sack_tracker_mutant_fails():
    """Teeth: the bitmap bit ignored (a duplicate counts as new) places a PSN twice.  The
    induction closes at k=1, so its base case is one clock; the mutant runs a BMC of the
    induction's wrapper (every invariant asserted) from reset instead, MUTANT_DEPTH clocks."""
    mod = mutant(sack_tracker, "is_new.eq(new_w & ~bit_cur),", "is_new.eq(new_w),")
    require_failed(run_formal(SackProof(mod.SackTracker, parts=()), "sack_tracker_mutant",
                              mode="bmc", depth=MUTANT_DEPTH))
