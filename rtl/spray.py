"""Spray scheduler: one EV decision per clock over a QP's EV profile (MRC transmit side).

MRC sprays the packets of every transfer over the EVs of the QP's EV profile
(OCP MRC 1.0: an EV profile is an EV array; copies of an EV are its weight; only
GOOD EVs carry data, ASSUMED_BAD and DENIED never do).  This block holds the
:class:`~mrcnic.rtl.path_table.PathTable` and answers each :class:`SprayReq`
with one :class:`Decision` (entry index + the full entry).

Scheduling discipline (weighted round robin, per QP)
----------------------------------------------------
A QP's profile is the entry range ``[base, min(base + count, depth))``.  An
entry is *eligible* when it is in the range, its state is GOOD, its weight is
non-zero and its ``avoid`` bit is clear.  Each QP (8, ``MAX_QPS``) keeps its own
position: the current entry and how many decisions it has had in a row.  A
request repeats the current entry while it is still eligible and has had fewer
than ``weight`` decisions; otherwise it moves to the next eligible entry above
the current one, wrapping to the lowest eligible entry of the profile.  A
*round* is one such pass over the profile: every eligible entry gets exactly
``weight`` consecutive decisions per round.  (Firmware that prefers
interleaving over bursts uses weight 1 and copies, which this discipline also
honours.)

Pipeline (timing: the selection loop holds no search, no compare and no block-RAM read)
-------------------------------------------------------------------------------------
* **A** (request register): the profile's range mask.
* **P** (candidate snapshot): range AND the live eligible bitmap, the ``multi``
  bitmap and per-group (16 entries) "any" bits, registered every cycle; a request
  with no candidate waits here (``no_path``, refreshed every cycle) and also while
  the output could not absorb it (credit: requests in N, B, C, D + skid-FIFO level
  < ``OUT_DEPTH``), so N, B, C, D never stall.  P computes, flat 4 x 4 searches,
  every entry's next candidate inside its own group and every group's first.
* **N**: per group the first candidate of the next non-empty group (wrapping), and
  from it the successor map ``S[p]`` = first candidate above entry ``p`` (wrapping
  to the lowest): the whole search is done, registered in B (one register per entry).
* **B**: holds ``S`` and the candidate / ``multi`` bitmaps of the next request of C,
  and its QP's stored position (forwarded from a same-QP pick in C).
* **C** (the only loop, one cycle): C holds the position ``c``, its successor
  ``s1``, "c is a candidate", "c has weight >= 2" and "n + 1 < weight snapshot"
  (all computed the cycle before).  ``repeat`` is one LUT of those flags; the pick
  is ``c`` or ``s1``; the next request's ``c``/``s1``/flags are looked up in B's
  maps at both ``c`` and ``s1`` (separate 2:1 mux trees) and chosen by ``repeat``
  (or, for a request of another QP, looked up at B's stored position).
* **D / output**: the pick is registered (D), then goes to the decision register
  (or a ``OUT_DEPTH``-entry skid FIFO under backpressure); the table's block RAM
  is read from D or the FIFO when the decision register is loaded.

Latency ``LATENCY`` = 7 cycles from the ``req`` transfer to ``decision`` valid (was
5 before the N/B split), one decision per clock sustained, any QP order.

Changes while traffic runs
--------------------------
The candidates of a request are taken in stage P from the eligible bitmap, so
state changes, weight changes to or from 0 and ``avoid`` changes are obeyed by
every decision whose ``valid`` rises ``SETTLE_CYCLES`` = 7 or more cycles after
the cycle of the ``st_en``/``w_en`` strobe (or ``avoid`` change); decisions
already scheduled (in N, B, C, D or the skid FIFO) are not withdrawn.  Other
weight changes apply within two decisions of a burst (the burst count is
checked against the table's LUT-RAM weight of ``c``, read and compared every
cycle; the first repeat uses the ``multi`` bitmap).

Resources and timing (Yosys ``synth_ecp5`` + nextpnr ``--out-of-context``,
LFE5U-25F CABGA256, seed 1, ``tests/rtl/fmax_spray.py``):

=====  ====================================  ====================================
depth  this design (LUT4 / FF / EBR / Fmax)  previous A/B/C/D design
=====  ====================================  ====================================
64     3389 / 1772 / 6 / 113.7 MHz           1810 / 1002 / 6 / 105.7 MHz
256    14041 / 6424 / 6 / 73.3 MHz           6004 / 2702 / 6 / 70.1 MHz
=====  ====================================  ====================================

Still short of 125 MHz.  At depth 64 the critical path is now the C lookup
(``c`` -> 64:1 mux tree of B's successor map -> ``s1``), which ABC maps as a
chain of ~6 LUT4 instead of 3 LUT6-equivalent levels; at depth 256 the 256:1
lookups plus their fan-out (routing 2.8 ns on the first net).  The successor map
costs ``depth`` x (address bits) registers and three mux trees per lookup bit,
hence the LUT growth at 256.
"""

from amaranth.hdl import Array, C, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .layouts import MAX_PATHS, MAX_QPS, Decision, EvState, PathEntry, SprayReq
from .path_table import PathTable

__all__ = ["SprayScheduler", "SETTLE_CYCLES", "LATENCY", "OUT_DEPTH"]

SETTLE_CYCLES = 7   #: cycles from a write strobe / ``avoid`` change to the first decision obeying it
LATENCY = 7         #: cycles from a ``req`` transfer to its ``decision`` valid (empty pipeline)
OUT_DEPTH = 5       #: decision skid FIFO entries (covers the 4 scheduled-ahead stages + 1)


def _lowest(bits, values, width):
    """The value of the lowest set bit of ``bits`` (0 when none), as one flat AND-OR.

    No chained terms: every term is built from the inputs directly, which keeps the logic
    depth low and event-driven simulators free of glitch cascades."""
    terms = []
    for k, (b, v) in enumerate(zip(bits, values)):
        sel = b & ~Cat(*bits[:k]).any() if k else b
        terms.append(Mux(sel, v, 0))
    return Cat(*[Cat(*[t[i] for t in terms]).any() for i in range(width)])


def _first_set(m, vec, width, name):
    """Lowest set bit of ``vec`` (``width`` bits): returns (any, index) signals."""
    idx = Signal(range(max(width, 2)), name=f"{name}_idx")
    for i in reversed(range(width)):
        with m.If(vec[i]):
            m.d.comb += idx.eq(i)
    return vec.any(), idx


class SprayScheduler(wiring.Component):
    """Weighted round-robin EV spray over per-QP path-table ranges, one decision per clock.

    Parameters
    ----------
    depth : int
        Path-table entries, a power of two from 16 to 256 (``MAX_PATHS``).

    Attributes
    ----------
    req : In(stream.Signature(SprayReq))
        Requests {qp (3 bits), base (8 bits), count (9 bits)}; one decision per
        request, in order.  ``count`` 0 or a profile without an eligible entry
        leaves the request waiting (``no_path``).
    decision : Out(stream.Signature(Decision))
        {index (8 bits), entry (PathEntry, 184 bits)}; ``entry`` is the table
        record read when the decision is loaded into the output register (a
        same-cycle wide write to it is included) with ``state`` GOOD, the state
        every selected entry has.  Latency ``LATENCY`` = 7 cycles from the
        request transfer; one decision per clock sustained when ``req`` is
        always valid and ``decision`` always ready.  Under backpressure up to
        ``OUT_DEPTH`` + 1 decisions are buffered; ``req.ready`` then falls.
    no_path : Out(1)
        High while the oldest request not yet scheduled has no eligible entry in
        its profile; that request then waits (no decision is produced) and is
        served as soon as an entry becomes eligible.
    avoid : In(depth)
        (Out) ``eligible``: the table's per-entry GOOD-and-weight-non-zero bitmap
        (``avoid`` not applied), for sender reliability's ev_min_active check.
        Temporary mask (ECN steering hook): a set bit makes the entry ineligible
        while it stays set.  Tie to 0 when unused.
    w_en, w_addr, w_data : In(1), In(8), In(PathEntry)
        Control-plane write of a whole entry (see :class:`PathTable`).
    st_en, st_addr, st_state : In(1), In(8), In(EvState)
        Narrow state update (sender reliability / controller).
    """

    def __init__(self, depth: int = MAX_PATHS):
        if depth not in (16, 32, 64, 128, 256):
            raise ValueError(f"depth must be a power of two from 16 to {MAX_PATHS}, not {depth}")
        self.depth = depth
        super().__init__({
            "req": In(stream.Signature(SprayReq)),
            "decision": Out(stream.Signature(Decision)),
            "no_path": Out(1),
            "avoid": In(depth),
            "w_en": In(1),
            "w_addr": In(8),
            "w_data": In(PathEntry),
            "st_en": In(1),
            "st_addr": In(8),
            "st_state": In(EvState),
            "eligible": Out(depth),
        })

    def elaborate(self, platform):
        m = Module()
        depth = self.depth
        n_grp = depth // 16
        abits = (depth - 1).bit_length()

        m.submodules.table = table = PathTable(depth)
        m.d.comb += [
            table.w_en.eq(self.w_en), table.w_addr.eq(self.w_addr), table.w_data.eq(self.w_data),
            table.st_en.eq(self.st_en), table.st_addr.eq(self.st_addr),
            table.st_state.eq(self.st_state),
        ]
        m.d.comb += self.eligible.eq(table.eligible)
        live = Signal(depth)            # eligible now: GOOD, weight non-zero, not avoided
        m.d.comb += live.eq(table.eligible & ~self.avoid)

        def groups(vec):
            return [vec[16 * g:16 * (g + 1)] for g in range(n_grp)]

        def gidx(first, g):             # entry index from a 4-bit in-group index and a group
            return Cat(first, C(g, 4))[:8] if isinstance(g, int) else Cat(first, g[:4])[:8]

        # ---- stage A: the accepted request and its range mask ---------------------------------
        req = self.req.payload
        end = Signal(10)
        m.d.comb += end.eq(req.base + req.count)
        rng = Signal(depth)
        gb, bb, ge, be = req.base[4:8], req.base[:4], end[4:], end[:4]
        for g in range(n_grp):
            lo_g, lo_eq = gb < g, gb == g
            hi_g, hi_eq = ge > g, ge == g
            for b in range(16):
                m.d.comb += rng[16 * g + b].eq((lo_g | (lo_eq & (bb <= b)))
                                               & (hi_g | (hi_eq & (be > b))))
        a_valid = Signal()
        a_qp = Signal(range(MAX_QPS))
        a_rng = Signal(depth)

        # ---- stage P: candidate snapshot (waits here while the profile has no candidate) -------
        p_valid = Signal()
        p_qp = Signal(range(MAX_QPS))
        p_rng = Signal(depth)
        p_cand = Signal(depth)          # snapshot: range AND live, taken the cycle before
        p_cm = Signal(depth)            # candidates whose weight is 2 or more
        p_have = Signal()               # p_cand is not empty
        a_cand = Signal(depth)
        p_live = Signal(depth)
        m.d.comb += [a_cand.eq(a_rng & live), p_live.eq(p_rng & live)]
        a_have, p_now = a_cand.any(), p_live.any()

        inflight = Signal(range(OUT_DEPTH + 2))     # requests in C, D and the skid FIFO
        p_adv, p_load = Signal(), Signal()
        m.d.comb += [
            p_adv.eq(p_valid & p_have & (inflight < OUT_DEPTH)),
            p_load.eq(~p_valid | p_adv),
            self.req.ready.eq(~a_valid | p_load),
            self.no_path.eq(Mux(p_valid, ~p_now, a_valid & ~a_have)),
        ]
        with m.If(self.req.ready):
            m.d.sync += [a_valid.eq(self.req.valid), a_qp.eq(req.qp), a_rng.eq(rng)]
        snap = Signal(depth)
        m.d.comb += snap.eq(Mux(p_load, a_cand, p_live))
        m.d.sync += [p_cand.eq(snap), p_cm.eq(snap & table.multi),
                     p_have.eq(Mux(p_load, a_have, p_now))]
        with m.If(p_load):
            m.d.sync += [p_valid.eq(a_valid), p_qp.eq(a_qp), p_rng.eq(a_rng)]

        p_gany = Signal(n_grp)          # per group of 16: p_cand has a candidate there
        m.d.sync += p_gany.eq(Cat(*[Mux(p_load, ga.any(), gp.any())
                                    for ga, gp in zip(groups(a_cand), groups(p_live))]))

        # P, combinational: per entry the next candidate above it in its own group, and per
        # group its first candidate; flat two-level (4 x 4) searches, registered in N.
        ig_has, ig_idx, p_first = [], [], []
        for g, vec in enumerate(groups(p_cand)):
            q_any = [vec[4 * k:4 * k + 4].any() for k in range(4)]
            q_first = [_lowest(list(vec[4 * k:4 * k + 4]), [C(i, 2) for i in range(4)], 2)
                       for k in range(4)]
            p_first.append(_lowest(q_any, [Cat(q_first[k], C(k, 2)) for k in range(4)], 4))
            for b in range(16):
                k, j = divmod(b, 4)
                w_bits = [vec[4 * k + i] for i in range(j + 1, 4)]          # in b's quad
                has, idx = Signal(name=f"p_ih{16 * g + b}"), Signal(4, name=f"p_ii{16 * g + b}")
                q_has = Cat(*q_any[k + 1:]).any() if k < 3 else C(0, 1)
                q_idx = (_lowest(q_any[k + 1:], [Cat(q_first[kk], C(kk, 2))
                                                 for kk in range(k + 1, 4)], 4) if k < 3 else C(0, 4))
                if w_bits:
                    w_idx = _lowest(w_bits, [C(4 * k + i, 4) for i in range(j + 1, 4)], 4)
                    w_has = Cat(*w_bits).any()
                    m.d.comb += [has.eq(w_has | q_has), idx.eq(Mux(w_has, w_idx, q_idx))]
                else:
                    m.d.comb += [has.eq(q_has), idx.eq(q_idx)]
                ig_has.append(has)
                ig_idx.append(idx)

        # ---- stage N: next-candidate maps, registered -----------------------------------------
        n_valid = Signal()
        n_qp = Signal(range(MAX_QPS))
        n_cand = Signal(depth)
        n_cm = Signal(depth)
        n_has = Signal(depth)
        n_gany = Signal(n_grp)
        n_idx = Array(Signal(4, name=f"n_idx{i}") for i in range(depth))
        n_first = [Signal(4, name=f"n_first{g}") for g in range(n_grp)]
        m.d.sync += [n_valid.eq(p_adv), n_qp.eq(p_qp), n_cand.eq(p_cand), n_cm.eq(p_cm),
                     n_has.eq(Cat(*ig_has)), n_gany.eq(p_gany)]
        m.d.sync += [n_idx[i].eq(ig_idx[i]) for i in range(depth)]
        m.d.sync += [n_first[g].eq(p_first[g]) for g in range(n_grp)]
        # N, combinational: per group the first candidate of the next non-empty group after it
        # (wrapping to the lowest), then the successor map S[p] = first candidate above entry p.
        succ = []
        for g in range(n_grp):
            order = list(range(g + 1, n_grp)) + list(range(g + 1))   # groups after g, wrapping
            nf = Signal(abits, name=f"n_nf{g}")
            m.d.comb += nf.eq(_lowest([n_gany[x] for x in order],
                                      [gidx(n_first[x], x)[:abits] for x in order], abits))
            succ += [Mux(n_has[16 * g + b], gidx(n_idx[16 * g + b], g)[:abits], nf)
                     for b in range(16)]

        # ---- stage B: the request's successor map and bitmaps, registered ---------------------
        b_valid = Signal()
        b_qp = Signal(range(MAX_QPS))
        # one small register per entry (each lookup below is a mux tree over them)
        b_cand = [Signal(name=f"b_cand{i}") for i in range(depth)]
        b_cm = [Signal(name=f"b_cm{i}") for i in range(depth)]
        b_succ = [Signal(abits, name=f"b_succ{i}") for i in range(depth)]
        b_cur = Signal(abits, init=depth - 1)   # the QP's position, counters and weight snapshot
        b_cnt, b_first, b_more = Signal(8), Signal(), Signal()
        m.d.sync += [b_valid.eq(n_valid), b_qp.eq(n_qp)]
        m.d.sync += [b_cand[i].eq(n_cand[i]) for i in range(depth)]
        m.d.sync += [b_cm[i].eq(n_cm[i]) for i in range(depth)]
        m.d.sync += [b_succ[i].eq(succ[i]) for i in range(depth)]

        def at(words, pos):             # B's map at entry ``pos``: a 2:1 mux tree (one per
            for bit in range(abits):    # lookup, never shared with the others: the loop's
                words = [Mux(pos[bit], words[2 * i + 1], words[2 * i])   # select comes last)
                         for i in range(len(words) // 2)]
            return words[0]

        # ---- stage C: selection (the only loop: per-QP position read-modify-write) -------------
        # C holds its request's position c, the successor s1 of c and whether c is a candidate
        # (cc) / a multi-weight candidate (cmc), all looked up in B's maps the cycle before, so
        # the loop itself is: repeat? -> pick c or s1 -> next lookups in B -> registers.
        c_valid = Signal()
        c_qp = Signal(range(MAX_QPS))
        m.d.sync += [c_valid.eq(b_valid), c_qp.eq(b_qp)]
        c = Signal(abits, init=depth - 1)       # position (no position yet: the last entry)
        s1 = Signal(abits)              # first candidate above c (wrapping)
        cc, cmc = Signal(), Signal()    # c is a candidate / a candidate of weight >= 2
        n = Signal(8)                   # decisions in a row on c (0: no position yet)
        c_first = Signal()              # n == 1 (c is fresh: its weight is not snapshotted yet)
        c_more = Signal()               # n < weight snapshot of c (used when n >= 2)

        cur = Array(Signal(abits, init=depth - 1, name=f"cur{q}") for q in range(MAX_QPS))
        first = Array(Signal(name=f"first{q}") for q in range(MAX_QPS))
        cnt = Array(Signal(8, name=f"cnt{q}") for q in range(MAX_QPS))
        more = Array(Signal(name=f"more{q}") for q in range(MAX_QPS))

        # Weight snapshot: the LUT-RAM weight of c, read every cycle and compared with the count
        # the next decision on c would have (n + 1), registered: the loop sees one flag.
        m.d.comb += table.wt_addr.eq(c)
        more_next = Signal()
        m.d.comb += more_next.eq(n + 1 < table.wt_data)
        repeat = Signal()
        m.d.comb += repeat.eq(Mux(c_first, cmc, cc & c_more))
        pick = Signal(abits)
        m.d.comb += pick.eq(Mux(repeat, c, s1))
        new_n = Signal(8)
        m.d.comb += new_n.eq(Mux(repeat, n + 1, 1))

        with m.If(c_valid):
            m.d.sync += [cur[c_qp].eq(pick), first[c_qp].eq(~repeat), cnt[c_qp].eq(new_n),
                         more[c_qp].eq(more_next)]
        # The QP position travels with the request: forwarded from a same-QP pick this cycle.
        with m.If(c_valid & (c_qp == b_qp)):
            m.d.sync += [c.eq(pick), n.eq(new_n), c_first.eq(~repeat), c_more.eq(more_next),
                         s1.eq(Mux(repeat, at(b_succ, c), at(b_succ, s1))),
                         cc.eq(Mux(repeat, at(b_cand, c), at(b_cand, s1))),
                         cmc.eq(Mux(repeat, at(b_cm, c), at(b_cm, s1)))]
        with m.Else():
            m.d.sync += [c.eq(b_cur), n.eq(b_cnt), c_first.eq(b_first), c_more.eq(b_more),
                         s1.eq(at(b_succ, b_cur)), cc.eq(at(b_cand, b_cur)),
                         cmc.eq(at(b_cm, b_cur))]
        # B's copy of its QP's stored position (read while the request enters B; a pick of the
        # same QP made in C in that cycle is forwarded), so C's load from it is one lookup.
        with m.If(c_valid & (c_qp == n_qp)):
            m.d.sync += [b_cur.eq(pick), b_cnt.eq(new_n), b_first.eq(~repeat),
                         b_more.eq(more_next)]
        with m.Else():
            m.d.sync += [b_cur.eq(cur[n_qp]), b_cnt.eq(cnt[n_qp]), b_first.eq(first[n_qp]),
                         b_more.eq(more[n_qp])]

        # ---- output: skid FIFO (falls through when empty) and decision register ---------------
        m.submodules.fifo = fifo = SyncFIFO(width=8, depth=OUT_DEPTH)
        dec_valid = Signal()
        dec_index = Signal(8)
        load = Signal()
        m.d.comb += load.eq(~dec_valid | self.decision.ready)
        d_valid = Signal()              # stage D: the pick, registered (block RAM address source)
        d_index = Signal(8)
        m.d.sync += [d_valid.eq(c_valid), d_index.eq(pick)]
        src = Signal(8)
        with m.If(fifo.r_rdy):
            m.d.comb += [src.eq(fifo.r_data), fifo.r_en.eq(load),
                         fifo.w_en.eq(d_valid), fifo.w_data.eq(d_index)]
        with m.Else():
            m.d.comb += [src.eq(d_index), fifo.w_en.eq(d_valid & ~load), fifo.w_data.eq(d_index)]
        take = Signal()
        m.d.comb += take.eq(load & (fifo.r_rdy | d_valid))
        m.d.comb += [table.rd_en.eq(take), table.rd_addr.eq(src)]
        with m.If(take):
            m.d.sync += [dec_valid.eq(1), dec_index.eq(src)]
        with m.Elif(self.decision.ready):
            m.d.sync += dec_valid.eq(0)
        m.d.comb += [
            self.decision.valid.eq(dec_valid),
            self.decision.payload.index.eq(dec_index),
            self.decision.payload.entry.eq(table.rd_data),
            self.decision.payload.entry.state.eq(EvState.GOOD),   # selected => GOOD
        ]
        # Credit: a request leaves P only with room for it in C, D, the FIFO (taken = left).
        m.d.sync += inflight.eq(inflight + p_adv - take)
        return m
