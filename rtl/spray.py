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

Pipeline (timing: the selection loop holds no wide search and no block-RAM read)
--------------------------------------------------------------------------------
* **A** (request register): the profile's range mask AND the live eligible
  bitmap gives the candidates; per group of 16 entries an "any" bit and the
  lowest candidate are computed.  A request with no candidate waits here
  (``no_path``); A also waits while the output could not absorb it (credit:
  skid-FIFO level + requests in B, C and D < ``OUT_DEPTH``), so B, C, D never stall.
* **B**: for every group, the first candidate of the next non-empty group after
  it (wrapping to the lowest), registered: the group-level search is done.
* **C** (the only loop, one cycle): the QP position (forwarded from a same-QP
  pick in the previous cycle, otherwise the QP's registers) either repeats
  (still a candidate and fewer decisions than its weight: the ``multi``
  candidate bitmap after one decision, then a registered weight snapshot),
  takes the next candidate in its own group (a 16-bit find-next), or takes
  the registered next-group candidate.
* **D / output**: the pick is registered (D), then goes to the decision
  register (or a ``OUT_DEPTH``-entry skid FIFO under backpressure); the
  table's block RAM is read from D or the FIFO when the decision register is
  loaded, so it is outside the loop.

Two clients (``clients=2``)
---------------------------
The receive pipeline's ACKs are sprayed over the same path table as the data
(MRC: an ACK goes back over an EV of the QP's own profile).  With ``clients=2``
one scheduler serves both: ``req``/``decision`` (client 0, data) and
``req_1``/``decision_1`` (client 1, ACKs).  Stage A takes the requests of the
two clients in turn (round robin when both wait); each client has its own
per-QP positions (so ACKs do not disturb the data's rounds), its own skid FIFO
and decision register; the table's one read port is granted to one client per
clock (round robin), the other client's decision keeps a registered copy of
its entry.  ``avoid`` (ECN steering of data) applies to client 0 only.  One
decision per clock in total; a request waits in A while its own client's
output is full, which also holds the other client's requests behind it (at
most ``OUT_DEPTH`` + 1 decisions of one packet each).

Changes while traffic runs
--------------------------
The candidates of a request are taken in stage A from the eligible bitmap, so
state changes, weight changes to or from 0 and ``avoid`` changes are obeyed by
every decision whose ``valid`` rises ``SETTLE_CYCLES`` = 6 or more cycles after
the cycle of the ``st_en``/``w_en`` strobe (or ``avoid`` change); decisions
already scheduled (in B, C, D or the skid FIFO) are not withdrawn.  Other
weight changes apply within two decisions of a burst (the burst count is
checked against a weight snapshot read from the table's LUT-RAM copy one
cycle after the entry was picked; the first repeat uses the ``multi`` bitmap).

Resources and timing (Yosys ``synth_ecp5`` + nextpnr ``--out-of-context``,
LFE5U-25F CABGA256, ``python -m mrcnic.boards.fmax spray``, depth 32, two clients):
2.1k LUT4, 1.6k FFs, 6 DP16KD, 107-109 MHz (was 1.7k / 1.3k / 6 / 94 MHz).  Positions
are (group, one-hot bit, bits above it), so stage C is a mask, a 16-bit lowest-bit
prefix OR and a mux; A registers its candidates (both the entering and the waiting
request's versions are computed, ``in_ready`` picks one), B reads the QP registers and
C forwards from C, D and E (the write-back happens in D).  The remaining critical path
is the table's block-RAM clock-to-out into the decision register (``entry`` copy).
"""

from amaranth.hdl import Array, C, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .layouts import MAX_PATHS, MAX_QPS, Decision, EvState, PathEntry, SprayReq
from .path_table import PathTable

__all__ = ["SprayScheduler", "SETTLE_CYCLES", "LATENCY", "OUT_DEPTH"]

SETTLE_CYCLES = 6   #: cycles from a write strobe / ``avoid`` change to the first decision obeying it
LATENCY = 5         #: cycles from a ``req`` transfer to its ``decision`` valid (empty pipeline)
OUT_DEPTH = 4       #: decision skid FIFO entries (covers the 3 scheduled-ahead stages + 1)


def _first_set(m, vec, width, name):
    """Lowest set bit of ``vec`` (``width`` bits): returns (any, index) signals."""
    idx = Signal(range(max(width, 2)), name=f"{name}_idx")
    for i in reversed(range(width)):
        with m.If(vec[i]):
            m.d.comb += idx.eq(i)
    return vec.any(), idx


def _lowest(m, vec, name):
    """Lowest set bit of the 16-bit ``vec``: returns (one-hot, bits strictly above it)."""
    above = Signal(16, name=f"{name}_ab")          # OR of the bits below each position
    blk = Signal(4, name=f"{name}_blk")             # OR of each nibble
    pre = Signal(4, name=f"{name}_pre")             # OR of the nibbles below each nibble
    m.d.comb += [blk[j].eq(vec[4 * j:4 * j + 4].any()) for j in range(4)]
    m.d.comb += [pre[j].eq(blk[:j].any()) for j in range(1, 4)]
    m.d.comb += [above[i].eq(pre[i // 4] | vec[4 * (i // 4):i].any()) for i in range(1, 16)]
    oh = Signal(16, name=f"{name}_oh")
    m.d.comb += oh.eq(vec & ~above)
    return oh, above


def _encode(oh):
    """Index of the set bit of the 16-bit one-hot ``oh`` (4 bits; OR trees)."""
    return Cat(*[Cat(*[oh[i] for i in range(16) if i >> j & 1]).any() for j in range(4)])


class SprayScheduler(wiring.Component):
    """Weighted round-robin EV spray over per-QP path-table ranges, one decision per clock.

    Parameters
    ----------
    depth : int
        Path-table entries, a power of two from 16 to 256 (``MAX_PATHS``).
    clients : int
        1, or 2 for a second request/decision pair (``req_1``/``decision_1``) over the
        same table (see "Two clients" in the module notes).

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
        every selected entry has.  Latency ``LATENCY`` = 5 cycles from the
        request transfer; one decision per clock sustained when ``req`` is
        always valid and ``decision`` always ready.  Under backpressure up to
        ``OUT_DEPTH`` + 1 decisions are buffered; ``req.ready`` then falls.
    req_1, decision_1 : (``clients=2`` only) the second client's pair, as ``req`` /
        ``decision``; its decisions ignore ``avoid``.
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

    def __init__(self, depth: int = MAX_PATHS, clients: int = 1):
        if depth not in (16, 32, 64, 128, 256):
            raise ValueError(f"depth must be a power of two from 16 to {MAX_PATHS}, not {depth}")
        if clients not in (1, 2):
            raise ValueError(f"clients must be 1 or 2, not {clients}")
        self.depth, self.clients = depth, clients
        extra = {}
        if clients == 2:
            extra = {"req_1": In(stream.Signature(SprayReq)),
                     "decision_1": Out(stream.Signature(Decision))}
        super().__init__({
            "req": In(stream.Signature(SprayReq)),
            "decision": Out(stream.Signature(Decision)),
            **extra,
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
        gbits = max(1, (n_grp - 1).bit_length())      # group number width
        abits = (depth - 1).bit_length()
        two = self.clients == 2
        reqs = [self.req] + ([self.req_1] if two else [])
        decs = [self.decision] + ([self.decision_1] if two else [])
        n_key = MAX_QPS * self.clients  # per-QP positions of each client

        m.submodules.table = table = PathTable(depth)
        m.d.comb += [
            table.w_en.eq(self.w_en), table.w_addr.eq(self.w_addr), table.w_data.eq(self.w_data),
            table.st_en.eq(self.st_en), table.st_addr.eq(self.st_addr),
            table.st_state.eq(self.st_state),
        ]
        m.d.comb += self.eligible.eq(table.eligible)

        def groups(vec):
            return [vec[16 * g:16 * (g + 1)] for g in range(n_grp)]

        def gidx(first, g):             # entry index from a 4-bit in-group index and a group
            return Cat(first, C(g, 4))[:8] if isinstance(g, int) else Cat(first, g[:4])[:8]

        # ---- input: one request per clock, the two clients in turn ---------------------------
        in_ready = Signal()
        in_valid = Signal()
        sel = Signal()                  # client of the request taken (0 with one client)
        req = Signal(SprayReq)
        if two:
            prefer1 = Signal()
            m.d.comb += [
                sel.eq(self.req_1.valid & (~self.req.valid | prefer1)),
                req.eq(Mux(sel, self.req_1.payload, self.req.payload)),
                in_valid.eq(self.req.valid | self.req_1.valid),
                self.req.ready.eq(in_ready & ~sel), self.req_1.ready.eq(in_ready & sel),
            ]
            with m.If(in_ready & in_valid):
                m.d.sync += prefer1.eq(~sel)
        else:
            m.d.comb += [req.eq(self.req.payload), in_valid.eq(self.req.valid),
                         self.req.ready.eq(in_ready)]

        # ---- stage A: accepted request, its range mask and candidate groups -------------------
        def range_mask(r, name):        # entries base <= i < base + count of request r
            end = Signal(10, name=f"{name}_end")
            rng = Signal(depth, name=f"{name}_rng")
            m.d.comb += end.eq(r.base + r.count)
            gb, bb, ge, be = r.base[4:8], r.base[:4], end[4:], end[:4]
            for g in range(n_grp):
                lo_g, lo_eq = gb < g, gb == g
                hi_g, hi_eq = ge > g, ge == g
                for b in range(16):
                    m.d.comb += rng[16 * g + b].eq((lo_g | (lo_eq & (bb <= b)))
                                                   & (hi_g | (hi_eq & (be > b))))
            return rng
        # with two clients both masks are computed and the grant picks one (off the adder path)
        rng = (Mux(sel, range_mask(self.req_1.payload, "req1"), range_mask(self.req.payload, "req0"))
               if two else range_mask(req, "req"))
        a_valid = Signal()
        a_key = Signal(range(n_key))    # position key: QP (+ MAX_QPS for client 1)
        a_rng = Signal(depth)
        a_cand = Signal(depth)
        a_multi = Signal(depth)         # candidates whose weight is 2 or more
        a_client = a_key[3] if two else C(0, 1)
        # The candidates are registered: sampled from the live bitmap in the cycle before they
        # are used, for the request entering A (its range from the input) or the one waiting;
        # both versions (and their per-group "any") are computed and in_ready only picks one.
        def live(client):
            return table.eligible & ~Mux(client, 0, self.avoid)
        cand_in, cand_wait = Signal(depth), Signal(depth)
        m.d.comb += [cand_in.eq(rng & live(sel)), cand_wait.eq(a_rng & live(a_client))]
        a_any = Signal(n_grp)
        m.d.sync += [
            a_cand.eq(Mux(in_ready, cand_in, cand_wait)),
            a_multi.eq(Mux(in_ready, cand_in, cand_wait) & table.multi),
            a_any.eq(Mux(in_ready, Cat(v.any() for v in groups(cand_in)),
                         Cat(v.any() for v in groups(cand_wait)))),
        ]
        a_first = []                    # per group: (one-hot lowest candidate, bits above it)
        for g, vec in enumerate(groups(a_cand)):
            a_first.append(_lowest(m, vec, f"a_first{g}"))
        a_have = a_any.any()

        # ---- stage B: next non-empty group after each group (wrapping), from registers ---------
        # A position is (group, one-hot bit in the group, bits above it in the group): the
        # selection loop in C then needs no index compare, shift or priority encoder.
        b_valid = Signal()
        b_key = Signal(range(n_key))
        b_cand = Signal(depth)
        b_multi = Signal(depth)
        b_any = Signal(n_grp)
        b_first = Array(Signal(16, name=f"b_first{g}") for g in range(n_grp))
        b_above = Array(Signal(16, name=f"b_fabove{g}") for g in range(n_grp))
        # the request's QP position as read from the QP's registers at the A -> B edge
        b_g, b_oh, b_ab = Signal(gbits, name="b_g"), Signal(16, name="b_oh"), Signal(16, name="b_ab")
        b_ok, b_n, b_fst, b_w = (Signal(name="b_ok"), Signal(8, name="b_n"), Signal(name="b_fst"),
                                 Signal(8, name="b_w"))
        _, b_low = _first_set(m, b_any, n_grp, "b_low")
        b_nf = []                        # first candidate after group g (wraps to the lowest)
        for g in range(n_grp):
            above = b_any & (((1 << n_grp) - 1) & ~((2 << g) - 1))
            if g < n_grp - 1:
                has, g2 = _first_set(m, above, n_grp, f"b_above{g}")
                gsel = Mux(has, g2, b_low)
            else:
                gsel = b_low
            gs = Signal(gbits, name=f"b_nfg{g}")
            m.d.comb += gs.eq(gsel)
            b_nf.append((gs, b_first[gs], b_above[gs]))

        # ---- stage C: selection (the only loop: per-QP position read-modify-write) -------------
        c_valid = Signal()
        c_key = Signal(range(n_key))
        c_cand = Signal(depth)
        c_multi = Signal(depth)
        c_nf_g = Array(Signal(gbits, name=f"c_nfg{g}") for g in range(n_grp))
        c_nf_oh = Array(Signal(16, name=f"c_nfoh{g}") for g in range(n_grp))
        c_nf_ab = Array(Signal(16, name=f"c_nfab{g}") for g in range(n_grp))
        # position: group, one-hot bit and the bits above it; valid; decisions in a row
        c_g, c_oh, c_ab = Signal(gbits, name="c_g"), Signal(16, name="c_oh"), Signal(16, name="c_ab")
        c_ok, n = Signal(), Signal(8)
        c_first = Signal()              # n == 1 (c is fresh: its weight is not snapshotted yet)
        c_w = Signal(8)                 # weight snapshot of c (valid when n >= 2)

        cur = Array(Signal(8, name=f"cur{q}") for q in range(n_key))
        cur_ok = Array(Signal(name=f"cur_ok{q}") for q in range(n_key))
        cnt = Array(Signal(8, name=f"cnt{q}") for q in range(n_key))
        fst = Array(Signal(name=f"fst{q}") for q in range(n_key))     # cnt == 1
        wgt = Array(Signal(8, name=f"wgt{q}") for q in range(n_key))

        # Weight snapshot: the LUT-RAM weight of c, read every cycle, registered (off the loop).
        c_idx = Signal(8)
        m.d.comb += [c_idx.eq(Cat(_encode(c_oh), c_g)[:8]), table.wt_addr.eq(c_idx)]
        if n_grp > 1:
            cand_g, multi_g = Array(groups(c_cand))[c_g], Array(groups(c_multi))[c_g]
        else:
            cand_g, multi_g = c_cand, c_multi
        in_cand = (c_oh & cand_g).any()
        multi = (c_oh & multi_g).any()
        repeat = Signal()
        m.d.comb += repeat.eq(c_ok & in_cand & Mux(c_first, multi, n < c_w))
        masked = Signal(16)
        m.d.comb += masked.eq(cand_g & c_ab)
        nx_oh, nx_ab = _lowest(m, masked, "above")
        any_in = masked.any()
        nf_sel = Mux(c_ok, c_g, n_grp - 1)
        p_g, p_oh, p_ab = (Signal(gbits, name="p_g"), Signal(16, name="p_oh"),   # the pick
                           Signal(16, name="p_ab"))
        with m.If(repeat):
            m.d.comb += [p_g.eq(c_g), p_oh.eq(c_oh), p_ab.eq(c_ab)]
        with m.Elif(c_ok & any_in):
            m.d.comb += [p_g.eq(c_g), p_oh.eq(nx_oh), p_ab.eq(nx_ab)]
        with m.Else():
            m.d.comb += [p_g.eq(c_nf_g[nf_sel]), p_oh.eq(c_nf_oh[nf_sel]),
                         p_ab.eq(c_nf_ab[nf_sel])]
        new_n = Signal(8)
        m.d.comb += new_n.eq(Mux(repeat, n + 1, 1))

        # ---- stage D: the pick registered; its index written back to the QP's position -------
        d_valid = Signal()              # stage D: the pick (block RAM address source)
        d_key = Signal(range(n_key))
        d_g, d_oh, d_ab = Signal(gbits, name="d_g"), Signal(16, name="d_oh"), Signal(16, name="d_ab")
        d_n, d_first, d_w = Signal(8, name="d_n"), Signal(name="d_first"), Signal(8, name="d_w")
        d_index = Signal(8)
        m.d.comb += d_index.eq(Cat(_encode(d_oh), d_g)[:8])
        m.d.sync += [d_valid.eq(c_valid), d_key.eq(c_key), d_g.eq(p_g), d_oh.eq(p_oh),
                     d_ab.eq(p_ab), d_n.eq(new_n), d_first.eq(~repeat), d_w.eq(table.wt_data)]
        with m.If(d_valid):
            m.d.sync += [cur[d_key].eq(d_index), cur_ok[d_key].eq(1), cnt[d_key].eq(d_n),
                         fst[d_key].eq(d_first), wgt[d_key].eq(d_w)]
        # stage E: a copy of the last write-back (B read the QP's registers before it landed)
        e_valid, e_key = Signal(), Signal(range(n_key))
        e_g, e_oh, e_ab = Signal(gbits, name="e_g"), Signal(16, name="e_oh"), Signal(16, name="e_ab")
        e_n, e_first, e_w = Signal(8, name="e_n"), Signal(name="e_first"), Signal(8, name="e_w")
        m.d.sync += [e_valid.eq(d_valid), e_key.eq(d_key), e_g.eq(d_g), e_oh.eq(d_oh),
                     e_ab.eq(d_ab), e_n.eq(d_n), e_first.eq(d_first), e_w.eq(d_w)]
        # ---- stage D and output: per client a skid FIFO and a decision register ---------------
        out = [self._output(m, k, dec, d_valid & (self._client(d_key) == k), d_index)
               for k, dec in enumerate(decs)]
        # the table's read port: one client per clock (round robin when both want it)
        if two:
            prio1 = Signal()
            m.d.comb += [out[1]["take"].eq(out[1]["want"] & (~out[0]["want"] | prio1)),
                         out[0]["take"].eq(out[0]["want"] & ~out[1]["take"])]
            with m.If(out[0]["take"]):
                m.d.sync += prio1.eq(1)
            with m.Elif(out[1]["take"]):
                m.d.sync += prio1.eq(0)
        else:
            m.d.comb += out[0]["take"].eq(out[0]["want"])
        m.d.comb += [table.rd_en.eq(out[0]["take"] | (out[1]["take"] if two else 0)),
                     table.rd_addr.eq(Mux(out[1]["take"], out[1]["src"], out[0]["src"])
                                      if two else out[0]["src"])]
        for k, (o, dec) in enumerate(zip(out, decs)):
            entry = table.rd_data
            if two:                     # the read port moves on: keep a copy of this client's entry
                fresh = Signal(name=f"fresh{k}")
                held = Signal(PathEntry, name=f"entry{k}")
                m.d.sync += fresh.eq(o["take"])
                with m.If(fresh):
                    m.d.sync += held.eq(table.rd_data)
                entry = Mux(fresh, table.rd_data, held)
            m.d.comb += [dec.payload.entry.eq(entry),
                         dec.payload.entry.state.eq(EvState.GOOD)]  # selected => GOOD

        # ---- pipeline control: A advances only with room for everything ahead of it ------------
        def inflight(k):
            return sum((v & (self._client(key) == k)) for v, key in
                       ((b_valid, b_key), (c_valid, c_key), (d_valid, d_key)))
        room = Signal()
        m.d.comb += room.eq(Array(o["fifo"].level + inflight(k) < OUT_DEPTH
                                  for k, o in enumerate(out))[a_client])
        advance = Signal()
        m.d.comb += [
            advance.eq(a_valid & a_have & room),
            in_ready.eq(~a_valid | advance),
            self.no_path.eq(a_valid & ~a_have),
        ]
        with m.If(in_ready):
            m.d.sync += [a_valid.eq(in_valid), a_key.eq(Cat(req.qp, sel) if two else req.qp),
                         a_rng.eq(rng)]
        # B's data registers load every cycle (only b_valid says whether they hold a request):
        # no clock-enable fan-out from the candidate search
        m.d.sync += b_valid.eq(advance)
        m.d.sync += [b_key.eq(a_key), b_cand.eq(a_cand), b_multi.eq(a_multi), b_any.eq(a_any)]
        m.d.sync += [b_first[g].eq(a_first[g][0]) for g in range(n_grp)]
        m.d.sync += [b_above[g].eq(a_first[g][1]) for g in range(n_grp)]
        pos = cur[a_key]
        m.d.sync += [b_g.eq(pos[4:4 + gbits]), b_ok.eq(cur_ok[a_key]), b_n.eq(cnt[a_key]),
                     b_fst.eq(fst[a_key]), b_w.eq(wgt[a_key])]
        m.d.sync += [b_oh[b].eq(pos[:4] == b) for b in range(16)]
        m.d.sync += [b_ab[b].eq(pos[:4] < b) for b in range(16)]
        m.d.sync += c_valid.eq(b_valid)
        with m.If(b_valid):
            m.d.sync += [c_key.eq(b_key), c_cand.eq(b_cand), c_multi.eq(b_multi)]
            for g in range(n_grp):
                m.d.sync += [c_nf_g[g].eq(b_nf[g][0]), c_nf_oh[g].eq(b_nf[g][1]),
                             c_nf_ab[g].eq(b_nf[g][2])]
            # The QP position travels with the request: forwarded from a same-key pick in C
            # this cycle, in D (written back at the end of this cycle) or in E (written back
            # at the end of the last cycle, after B read the QP's registers), else B's read.
            with m.If(c_valid & (c_key == b_key)):
                m.d.sync += [c_g.eq(p_g), c_oh.eq(p_oh), c_ab.eq(p_ab), c_ok.eq(1),
                             n.eq(new_n), c_first.eq(~repeat), c_w.eq(table.wt_data)]
            with m.Elif(d_valid & (d_key == b_key)):
                m.d.sync += [c_g.eq(d_g), c_oh.eq(d_oh), c_ab.eq(d_ab), c_ok.eq(1),
                             n.eq(d_n), c_first.eq(d_first), c_w.eq(d_w)]
            with m.Elif(e_valid & (e_key == b_key)):
                m.d.sync += [c_g.eq(e_g), c_oh.eq(e_oh), c_ab.eq(e_ab), c_ok.eq(1),
                             n.eq(e_n), c_first.eq(e_first), c_w.eq(e_w)]
            with m.Else():
                m.d.sync += [c_g.eq(b_g), c_oh.eq(b_oh), c_ab.eq(b_ab), c_ok.eq(b_ok),
                             n.eq(b_n), c_first.eq(b_fst), c_w.eq(b_w)]
        return m

    def _client(self, key):
        """Client of a position key (bit 3 with two clients, else 0)."""
        return key[3] if self.clients == 2 else C(0, 1)

    def _output(self, m, k, dec, d_mine, d_index):
        """Client ``k``'s skid FIFO and decision register.

        Returns ``{"fifo", "want", "take", "src"}``: ``want`` -- the decision register
        can load and a pick is waiting (FIFO head, else stage D's pick for ``k``);
        ``take`` (driven by the caller) -- the table read port is granted, ``src`` is
        the index read; the decision is valid on the next clock.
        """
        fifo = SyncFIFO(width=8, depth=OUT_DEPTH)
        m.submodules[f"fifo{k}" if k else "fifo"] = fifo
        dec_valid = Signal(name=f"dec_valid{k}")
        dec_index = Signal(8, name=f"dec_index{k}")
        load = Signal(name=f"load{k}")
        want, take, src = Signal(name=f"want{k}"), Signal(name=f"take{k}"), Signal(8, name=f"src{k}")
        m.d.comb += [load.eq(~dec_valid | dec.ready), want.eq(load & (fifo.r_rdy | d_mine))]
        with m.If(fifo.r_rdy):
            m.d.comb += [src.eq(fifo.r_data), fifo.r_en.eq(take),
                         fifo.w_en.eq(d_mine), fifo.w_data.eq(d_index)]
        with m.Else():
            m.d.comb += [src.eq(d_index), fifo.w_en.eq(d_mine & ~take), fifo.w_data.eq(d_index)]
        with m.If(take):
            m.d.sync += [dec_valid.eq(1), dec_index.eq(src)]
        with m.Elif(dec.ready):
            m.d.sync += dec_valid.eq(0)
        m.d.comb += [dec.valid.eq(dec_valid), dec.payload.index.eq(dec_index)]
        return {"fifo": fifo, "want": want, "take": take, "src": src}
