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
position: the current entry, how many decisions it has had in a row, and the
weight snapshot taken when it was chosen.  A request repeats the current entry
while it is still eligible and has had fewer than ``weight`` decisions;
otherwise it moves to the next eligible entry above the current one, wrapping
to the lowest eligible entry of the profile.  A *round* is one such pass over
the profile: every eligible entry gets exactly ``weight`` consecutive decisions
per round.  (Firmware that prefers interleaving over bursts uses weight 1 and
copies, which this discipline also honours.)

The search for the next eligible entry is a two-level find-next-set (16
groups of 16 entries: group summary bits and per-group lowest bits) done in a
single cycle, so the scheduler sustains one decision per clock however many
entries are skipped.

Changes while traffic runs
--------------------------
State changes, weight changes to or from 0 and ``avoid`` changes are seen by
the selection in the cycle after the write strobe: every decision whose
``valid`` rises two or more cycles after the cycle of the ``st_en``/``w_en``
strobe (or ``avoid`` change) obeys it (``SETTLE_CYCLES`` = 2).  A decision
already presented (held under backpressure) is not withdrawn.  Other weight
changes apply from the entry's next burst (at the latest the next round).

Resources and timing (Yosys ``synth_ecp5`` + nextpnr out of context, LFE5U-25F,
depth 256): about 3.1k LUT4, 1.2k FFs, 6 DP16KD; depth 128: about 2.0k LUT4.
The single-cycle selection loop currently closes at about 50 MHz, short of the
125 MHz target: the next step is to register the group summaries and take the
table read (and its write-collision bypass) out of the loop.
"""

from amaranth.hdl import Array, C, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import MAX_PATHS, MAX_QPS, Decision, EvState, PathEntry, SprayReq
from .path_table import PathTable

__all__ = ["SprayScheduler", "SETTLE_CYCLES", "LATENCY"]

SETTLE_CYCLES = 2   #: cycles from a write strobe to the first decision that obeys it
LATENCY = 2         #: cycles from a ``req`` transfer to its ``decision`` valid


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
        record at selection (a same-cycle wide write to it is included) with
        ``state`` GOOD, the state every selected entry has.  Latency ``LATENCY`` = 2 cycles
        from the request transfer; one decision per clock sustained when ``req``
        is always valid and ``decision`` always ready.  ``req.ready`` follows
        ``decision.ready`` combinationally (two-entry pipeline, no bubbles).
    no_path : Out(1)
        High while the oldest accepted request has no eligible entry in its
        profile; that request then waits (no decision is produced) and is served
        as soon as an entry becomes eligible.
    avoid : In(depth)
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
        })

    def elaborate(self, platform):
        m = Module()
        depth = self.depth
        n_grp = depth // 16

        m.submodules.table = table = PathTable(depth)
        m.d.comb += [
            table.w_en.eq(self.w_en), table.w_addr.eq(self.w_addr), table.w_data.eq(self.w_data),
            table.st_en.eq(self.st_en), table.st_addr.eq(self.st_addr),
            table.st_state.eq(self.st_state),
        ]

        # ---- stage 1: accepted request and its profile range mask ------------------------------
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
        s1_valid = Signal()
        s1_qp = Signal(range(MAX_QPS))
        s1_rng = Signal(depth)
        # The request's QP position travels with it (forwarded from a same-cycle update), so
        # the selection loop starts from flip-flops, not from an 8:1 per-QP mux.
        s1_c = Signal(8)            # current entry
        s1_cok = Signal()           # current entry is valid
        s1_n = Signal(8)            # decisions it has had in a row
        s1_w = Signal(8)            # its weight snapshot
        s1_wbyp = Signal()          # ... which is on table.rd_data instead (picked last decision)
        s1_more = Signal()          # s1_n < s1_w (precomputed off the loop)

        # ---- stage 2: selection (the only loop: per-QP position read-modify-write) -------------
        cand = Signal(depth)
        m.d.comb += cand.eq(s1_rng & table.eligible & ~self.avoid)
        grp = [cand[16 * g:16 * (g + 1)] for g in range(n_grp)]
        grp_any = Signal(n_grp)
        grp_first = []
        for g in range(n_grp):
            m.d.comb += grp_any[g].eq(grp[g].any())
            grp_first.append(_first_set(m, grp[g], 16, f"grp{g}")[1])
        have = grp_any.any()

        cur = Array(Signal(8, name=f"cur{q}") for q in range(MAX_QPS))
        cur_ok = Array(Signal(name=f"cur_ok{q}") for q in range(MAX_QPS))
        cnt = Array(Signal(8, name=f"cnt{q}") for q in range(MAX_QPS))
        wgt = Array(Signal(8, name=f"wgt{q}") for q in range(MAX_QPS))
        wl_pend = Signal()                  # rd_data holds the entry picked last cycle
        wl_qp = Signal(range(MAX_QPS))

        c, c_ok, n = s1_c, s1_cok, s1_n
        w_eff = Signal(8)
        m.d.comb += w_eff.eq(Mux(s1_wbyp, table.rd_data.weight, s1_w))
        gc, bc = c[4:8], c[:4]
        grp_arr = Array(grp)
        first_arr = Array(grp_first)
        cur_grp = Signal(16)
        m.d.comb += cur_grp.eq(grp_arr[gc])
        # A new pick (s1_wbyp) has had one decision: it repeats when its weight exceeds 1.
        repeat = Signal()
        m.d.comb += repeat.eq(c_ok & cur_grp.bit_select(bc, 1)
                              & Mux(s1_wbyp, table.rd_data.weight[1:].any(), s1_more))
        any_in, b1 = _first_set(m, cur_grp & (C(0xFFFE, 16) << bc)[:16], 16, "above")
        gmask = ((1 << n_grp) - 2) & ((1 << n_grp) - 1)
        any_g, g2 = _first_set(m, grp_any & (C(gmask, n_grp) << gc)[:n_grp], n_grp, "grp_above")
        _, g3 = _first_set(m, grp_any, n_grp, "grp_low")

        pick = Signal(8)
        with m.If(repeat):
            m.d.comb += pick.eq(c)
        with m.Elif(c_ok & any_in):
            m.d.comb += pick.eq(Cat(b1, gc))
        with m.Elif(c_ok & any_g):
            m.d.comb += pick.eq(Cat(first_arr[g2], g2[:4]) if n_grp > 1 else first_arr[0])
        with m.Else():
            m.d.comb += pick.eq(Cat(first_arr[g3], g3[:4]) if n_grp > 1 else first_arr[0])
        new_n = Signal(8)
        m.d.comb += new_n.eq(Mux(repeat, n + 1, 1))

        dec_valid = Signal()
        dec_index = Signal(8)
        fire = Signal()
        m.d.comb += [
            fire.eq(s1_valid & have & (~dec_valid | self.decision.ready)),
            self.req.ready.eq(~s1_valid | fire),
            self.no_path.eq(s1_valid & ~have),
        ]
        with m.If(self.req.ready):
            m.d.sync += [s1_valid.eq(self.req.valid), s1_qp.eq(req.qp), s1_rng.eq(rng)]
            with m.If(fire & (s1_qp == req.qp)):
                m.d.sync += [s1_c.eq(pick), s1_cok.eq(1), s1_n.eq(new_n), s1_w.eq(w_eff),
                             s1_wbyp.eq(~repeat), s1_more.eq(new_n < w_eff)]
            with m.Else():
                w_in = Mux(wl_pend & (wl_qp == req.qp), table.rd_data.weight, wgt[req.qp])
                m.d.sync += [s1_c.eq(cur[req.qp]), s1_cok.eq(cur_ok[req.qp]),
                             s1_n.eq(cnt[req.qp]), s1_wbyp.eq(0), s1_w.eq(w_in),
                             s1_more.eq(cnt[req.qp] < w_in)]

        # Weight snapshot of a newly picked entry arrives on rd_data one cycle later.
        with m.If(wl_pend):
            m.d.sync += wgt[wl_qp].eq(table.rd_data.weight)
        m.d.sync += wl_pend.eq(fire & ~repeat)
        with m.If(fire):
            m.d.sync += [
                cur[s1_qp].eq(pick),
                cur_ok[s1_qp].eq(1),
                cnt[s1_qp].eq(new_n),
                wl_qp.eq(s1_qp),
            ]

        # ---- stage 3: decision register; the entry comes from the table's read port -----------
        m.d.comb += [table.rd_en.eq(fire), table.rd_addr.eq(pick)]
        with m.If(fire):
            m.d.sync += [dec_valid.eq(1), dec_index.eq(pick)]
        with m.Elif(self.decision.ready):
            m.d.sync += dec_valid.eq(0)
        m.d.comb += [
            self.decision.valid.eq(dec_valid),
            self.decision.payload.index.eq(dec_index),
            self.decision.payload.entry.eq(table.rd_data),
            self.decision.payload.entry.state.eq(EvState.GOOD),   # selected => GOOD
        ]
        return m
