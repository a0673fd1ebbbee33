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
* **input**: per client a 2-entry skid register of the raw request (``ready`` is
  registered; ``valid`` reaches the flip-flops through <= 2 LUT levels, the payload
  through one mux).
* **T**: per client, the range's compares of the skid's head (``end = base + count``,
  base / end group, bit thermometers), registered.
* **I**: the clients' heads are taken one per clock (round robin when both
  wait) and the request's range mask is registered; I is itself a 2-entry skid,
  so stage A's stall does not reach back into the inputs.
* **A** (the waiting stage): the range mask AND the live eligible bitmap gives the
  candidates (registered: both the entering and the waiting request's versions are
  computed, A's stall picks one); per group of 16 entries the lowest candidate and
  the next non-empty group's first candidate.  A request with no candidate waits
  here (``no_path``); A also waits while its client's output could not absorb it
  (a registered credit: requests in B, C, D and the skid FIFO < ``OUT_DEPTH``), so
  B, C, D never stall.  B reads the QP's state (a LUT RAM) at the A -> B edge.
* **C** (the only loop, one cycle): the QP position (forwarded from a same-QP pick
  in C, D or E, otherwise B's read) either repeats (still a candidate and fewer
  decisions than its weight: the ``multi`` bitmap after one decision, then a weight
  snapshot), takes the next candidate in its own group, or takes the next-group
  candidate.  C's state is prepared for its request as it enters C (candidates
  above the position, repeat vector, next-group candidate, "n < weight"), so the
  loop is a 16-bit find-lowest, a 16-bit AND-OR and muxes whose last level is
  selected by the repeat decision.
* **D**: the pick, registered and written back to the QP's state (E keeps a copy
  for the request B read before the write landed).
* **output** (per client): an ``OUT_DEPTH``-entry skid FIFO of picks (index and the
  request's range mask), then a two-stage table read: S1 the block-RAM read (from the
  FIFO head, else D's pick), S2 the decision (``valid``/``index`` registers, ``entry``
  straight from the read port's output register: the EBR's own, ~1 ns clock-to-out).  A
  full S2 holds S1 and the read port; a read that clashed with a same-cycle wide table
  write is issued again.  S1 re-checks its entry every cycle (eligible and, for client 0,
  not avoided, from a registered copy of the bitmap that already applies the write strobes
  that make an entry ineligible): a pick whose entry
  is no longer usable is *replaced* by the lowest usable entry of its request's range
  (registered one cycle later, then read and checked in turn; with none, S1 waits).  The
  skid queue is a LUT RAM with a thermometer occupancy; the read issue is prepared from
  registers for both values of ``decision.ready``, which selects last.

Two clients (``clients=2``)
---------------------------
The receive pipeline's ACKs are sprayed over the same path table as the data
(MRC: an ACK goes back over an EV of the QP's own profile).  With ``clients=2``
one scheduler serves both: ``req``/``decision`` (client 0, data) and
``req_1``/``decision_1`` (client 1, ACKs).  Stage I takes the requests of the
two clients in turn (round robin when both wait); each client has its own
per-QP positions (so ACKs do not disturb the data's rounds), its own skid FIFO,
its own table read port (``PathTable(read_ports=2)``: the block RAM is kept twice,
12 EBRs at depth 32) and decision register.  ``avoid`` (ECN steering of data)
applies to client 0 only.  One decision per clock in total; a request waits in A
while its own client's output is full, which also holds the other client's
requests behind it (at most ``OUT_DEPTH`` + 2 decisions of one packet each).

Changes while traffic runs
--------------------------
An entry made ineligible (a state write other than GOOD, a wide write with weight 0 or a
state other than GOOD, an ``avoid`` bit set for client 0) is named by no decision whose
``valid`` rises ``DROP_CYCLES`` = 3 or more cycles after the strobe: picks already
scheduled for it (in B, C, D, the skid FIFO or S1) are checked in S1 and replaced by the
lowest usable entry of their request's range, at the cost of 2 cycles each (the replacement
is outside the round: the QP's position is not moved).  A decision already raised and held
by ``ready`` low is not withdrawn (a stream's payload holds until taken).  An entry made
eligible (or a weight changed) is obeyed by the scheduling of every decision whose
``valid`` rises ``SETTLE_CYCLES`` = 7 or more cycles after the strobe.  The first rule is
proved (bounded) in tests/formal/test_spray_formal.py, both are tested in
tests/rtl/test_spray.py.  Other weight changes apply within two
decisions of a burst (the burst count is checked against a weight snapshot read from the
table's LUT-RAM copy when the entry had its first decision; the first repeat uses the
``multi`` bitmap).  A decision's ``entry`` is the record as of its block-RAM read, which
is ``READ_LATENCY`` = 2 cycles before ``valid`` rises (writes of that cycle and earlier
included: a read clashing with a same-cycle write is redone); a decision held by
``ready`` low keeps the record it was read with.

Resources and timing (Yosys ``synth_ecp5`` + nextpnr ``--out-of-context``,
LFE5U-25F CABGA256, ``python -m mrcnic.boards.fmax spray``, depth 32, two clients):
1.81k LUT4 (TRELLIS_COMB), 0.95k FFs, 12 DP16KD, 129 MHz (seed 1) / 128 MHz (seed 2)
(was 2.1k / 1.6k / 6 / 109 MHz; 1.78k / 0.94k / 131 / 134 MHz before the input register
stage T and the ready-last output queue).  The critical path is the loop in C (six LUT
levels: find-lowest -> forwarded next state).
"""

from amaranth.hdl import Array, C, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import MAX_PATHS, MAX_QPS, Decision, EvState, PathEntry, SprayReq
from .path_table import PathTable
from .params import NicParams, check_paths, param

__all__ = ["SprayScheduler", "SETTLE_CYCLES", "DROP_CYCLES", "LATENCY", "OUT_DEPTH"]

SETTLE_CYCLES = 7   #: cycles from a write strobe / ``avoid`` change to the first decision obeying it
DROP_CYCLES = 3     #: an entry made ineligible is named by no decision rising this many cycles after the strobe
LATENCY = 9         #: cycles from a ``req`` transfer to its ``decision`` valid (empty pipeline)
OUT_DEPTH = 5       #: decision skid queue entries in use (the 3 scheduled-ahead stages + 1, + 1 for the credit's delay)


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


def _lowest_index(m, vec, name):
    """Index (4 bits) of the lowest set bit of the 16-bit ``vec`` (0 when none): per nibble an
    "any" bit and a local index, then the first non-empty nibble selects (3 LUT levels)."""
    blk = [vec[4 * j:4 * j + 4].any() for j in range(4)]
    loc = []
    for j in range(4):
        v = vec[4 * j:4 * j + 4]
        li = Signal(2, name=f"{name}_li{j}")
        m.d.comb += li.eq(Mux(v[0], 0, Mux(v[1], 1, Mux(v[2], 2, 3))))
        loc.append(li)
    idx = Signal(4, name=f"{name}_idx")
    m.d.comb += idx.eq(Mux(blk[0], Cat(loc[0], C(0, 2)), Mux(blk[1], Cat(loc[1], C(1, 2)),
                       Mux(blk[2], Cat(loc[2], C(2, 2)), Cat(loc[3], C(3, 2))))))
    return idx


def _above(m, oh, name):
    """Bits strictly above the set bit of the 16-bit one-hot ``oh`` (its prefix OR)."""
    ab = Signal(16, name=f"{name}_ab")
    m.d.comb += [ab[i].eq(oh[:i].any()) for i in range(1, 16)]
    return ab


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
    params : NicParams
        The NIC's parameter set (:class:`~mrcnic.rtl.params.NicParams`): ``depth``
        (``params.paths``) come from it (a keyword given as well must agree).  Standalone:
        leave it out; the keywords are checked by the same rules (:mod:`mrcnic.rtl.params`).

    Attributes
    ----------
    req : In(stream.Signature(SprayReq))
        Requests {qp (3 bits), base (8 bits), count (9 bits)}; one decision per
        request, in order.  ``count`` 0 or a profile without an eligible entry
        leaves the request waiting (``no_path``).
    decision : Out(stream.Signature(Decision))
        {index (8 bits), entry (PathEntry, 184 bits)}; ``entry`` is the table
        record as of the cycle ``READ_LATENCY`` = 2 cycles before ``valid`` rose
        (see "Changes while traffic runs"), from flip-flops, with ``state`` GOOD, the state
        every selected entry has.  Latency ``LATENCY`` = 9 cycles from the
        request transfer; one decision per clock sustained when ``req`` is
        always valid and ``decision`` always ready.  Under backpressure up to
        ``OUT_DEPTH`` + 2 decisions are buffered, then 3 requests in the input
        skid and stage T; ``req.ready`` (registered) then falls.
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

    def __init__(self, depth: "int | None" = None, clients: int = 1, *,
                 params: "NicParams | None" = None):
        depth = check_paths(param(params, "paths", depth, MAX_PATHS), "depth")
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
        two = self.clients == 2
        reqs = [self.req] + ([self.req_1] if two else [])
        decs = [self.decision] + ([self.decision_1] if two else [])
        n_key = MAX_QPS * self.clients  # per-QP positions of each client

        m.submodules.table = table = PathTable(depth, read_ports=self.clients)
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

        # ---- input: per client a 2-entry skid register (``ready`` is registered; the range's
        # compares are done on the way in); stage I takes the heads one per clock (the two
        # clients in turn) and registers the request's range mask -------------------------------
        # the range [base, base + count) is kept as compares: per group "below / in / above"
        # the base's and the end's group, per bit of a group "at or above the base's bit" and
        # "below the end's bit" (the mask is then two LUT levels of them)
        req_in = data.StructLayout({"qp": 3, "lo_th": 16, "hi_th": 16, "lo_gt": n_grp,
                                    "lo_eq": n_grp, "hi_gt": n_grp, "hi_eq": n_grp})
        heads = []
        for k, r in enumerate(reqs):
            # input skid: the raw request, registered straight from the port (``ready`` is
            # ``~skid_v``; ``valid`` reaches the flip-flops through one or two LUT levels)
            main, skid = Signal(SprayReq, name=f"in{k}_main"), Signal(SprayReq, name=f"in{k}_skid")
            main_v, skid_v = Signal(name=f"in{k}_main_v"), Signal(name=f"in{k}_skid_v")
            # stage T: the range's compares of the skid's head, registered (the head I takes)
            t_v, t = Signal(name=f"in{k}_t_v"), Signal(req_in, name=f"in{k}_t")
            take = Signal(name=f"in{k}_take")          # I takes T's request
            t_load = Signal(name=f"in{k}_t_load")       # T is free this cycle
            new = Signal(req_in, name=f"in{k}_new")
            end = Signal(10, name=f"in{k}_end")
            base = main.base
            m.d.comb += [end.eq(base + main.count), new.qp.eq(main.qp), r.ready.eq(~skid_v),
                         t_load.eq(take | ~t_v)]
            gb, bb, ge, be = base[4:8], base[:4], end[4:], end[:4]
            m.d.comb += [new.lo_th[b].eq(bb <= b) for b in range(16)]
            m.d.comb += [new.hi_th[b].eq(be > b) for b in range(16)]
            for g in range(n_grp):
                m.d.comb += [new.lo_gt[g].eq(gb < g), new.lo_eq[g].eq(gb == g),
                             new.hi_gt[g].eq(ge > g), new.hi_eq[g].eq(ge == g)]
            accept = r.valid & ~skid_v
            with m.If(t_load | ~main_v):
                with m.If(skid_v):
                    m.d.sync += [main.eq(skid), skid_v.eq(0)]
                with m.Else():
                    m.d.sync += [main.eq(r.payload), main_v.eq(accept)]
            with m.Elif(accept):
                m.d.sync += [skid.eq(r.payload), skid_v.eq(1)]
            with m.If(t_load):
                m.d.sync += [t.eq(new), t_v.eq(main_v)]
            heads.append((t_v, t, take))

        def range_mask(r, name):        # entries base <= i < base + count of head r
            rng = Signal(depth, name=f"{name}_rng")
            for g in range(n_grp):
                for b in range(16):
                    m.d.comb += rng[16 * g + b].eq((r.lo_gt[g] | (r.lo_eq[g] & r.lo_th[b]))
                                                   & (r.hi_gt[g] | (r.hi_eq[g] & r.hi_th[b])))
            return rng
        in_ready = Signal()             # stage A takes I's request
        i_valid, i_key, i_rng = Signal(), Signal(range(n_key)), Signal(depth)
        s_valid, s_key, s_rng = Signal(name="i_spare_v"), Signal(range(n_key), name="i_spare_key"), \
            Signal(depth, name="i_spare_rng")
        h_take = Signal()               # a head is taken into I this cycle
        h_key, h_rng = Signal(range(n_key), name="h_key"), Signal(depth, name="h_rng")
        if two:
            prefer1 = Signal()
            (v0, h0, t0), (v1, h1, t1) = heads
            sel = Signal()
            m.d.comb += [sel.eq(v1 & (~v0 | prefer1)),
                         t0.eq(~s_valid & v0 & ~sel), t1.eq(~s_valid & sel),
                         h_take.eq(~s_valid & (v0 | v1)),
                         h_key.eq(Cat(Mux(sel, h1.qp, h0.qp), sel)),
                         # both masks are computed and the grant picks one
                         h_rng.eq(Mux(sel, range_mask(h1, "req1"), range_mask(h0, "req0")))]
            with m.If(h_take):
                m.d.sync += prefer1.eq(~sel)
        else:
            (v0, h0, t0), = heads
            m.d.comb += [t0.eq(~s_valid & v0), h_take.eq(~s_valid & v0), h_key.eq(h0.qp),
                         h_rng.eq(range_mask(h0, "req"))]
        with m.If(in_ready | ~i_valid):
            with m.If(s_valid):
                m.d.sync += [i_valid.eq(1), i_key.eq(s_key), i_rng.eq(s_rng), s_valid.eq(0)]
            with m.Else():
                m.d.sync += [i_valid.eq(h_take), i_key.eq(h_key), i_rng.eq(h_rng)]
        with m.Elif(h_take):
            m.d.sync += [s_valid.eq(1), s_key.eq(h_key), s_rng.eq(h_rng)]
        i_client = i_key[3] if two else C(0, 1)

        # ---- stage A: accepted request, its range mask and candidate groups -------------------
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
        m.d.comb += [cand_in.eq(i_rng & live(i_client)), cand_wait.eq(a_rng & live(a_client))]
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
        _, a_low = _first_set(m, a_any, n_grp, "a_low")
        a_nf = []                        # first candidate after group g (wraps to the lowest)
        a_firsts = Array(f[0] for f in a_first)
        a_aboves = Array(f[1] for f in a_first)
        for g in range(n_grp):
            above = a_any & (((1 << n_grp) - 1) & ~((2 << g) - 1))
            if g < n_grp - 1:
                has, g2 = _first_set(m, above, n_grp, f"a_above{g}")
                gsel = Mux(has, g2, a_low)
            else:
                gsel = a_low
            gs = Signal(gbits, name=f"a_nfg{g}")
            m.d.comb += gs.eq(gsel)
            a_nf.append((gs, a_firsts[gs] if n_grp > 1 else a_first[0][0],
                         a_aboves[gs] if n_grp > 1 else a_first[0][1]))

        # ---- stage B: next non-empty group after each group (wrapping), from registers ---------
        # A position is (group, one-hot bit in the group, bits above it in the group, index): the
        # selection loop in C then needs no index compare, shift or priority encoder.
        b_valid = Signal()
        b_key = Signal(range(n_key))
        b_cand = Signal(depth)
        b_multi = Signal(depth)
        b_rng = Signal(depth)            # the request's range mask (for an output re-pick)
        # per group g: the first candidate of the next non-empty group after g (wrapping),
        # computed in A (from its registered group "any" bits)
        b_nfg = [Signal(gbits, name=f"b_nfg{g}") for g in range(n_grp)]
        b_nfoh = [Signal(16, name=f"b_nfoh{g}") for g in range(n_grp)]
        b_nfab = [Signal(16, name=f"b_nfab{g}") for g in range(n_grp)]
        b_nfi = [Signal(4, name=f"b_nfi{g}") for g in range(n_grp)]     # index of b_nfoh[g]
        # the request ahead of this one is now in C / D / E and has the same key (registered
        # when this request entered B)
        b_eq_c, b_eq_d, b_eq_e = Signal(name="b_eq_c"), Signal(name="b_eq_d"), Signal(name="b_eq_e")
        # the request's QP state as read from the QP's registers at the A -> B edge
        b_g, b_oh, b_ab = Signal(gbits, name="b_g"), Signal(16, name="b_oh"), Signal(16, name="b_ab")
        b_idx, b_ok, b_n, b_fst, b_w = (Signal(8, name="b_idx"), Signal(name="b_ok"),
                                        Signal(8, name="b_n"), Signal(name="b_fst"),
                                        Signal(8, name="b_w"))
        b_more = Signal(name="b_more")  # b_fst | (b_n < b_w), compared at the read
        b_nf = list(zip(b_nfg, b_nfoh, b_nfab, b_nfi))

        def nf_of(g):                   # (group, one-hot, above, in-group index) of b_nf[g]
            if n_grp == 1:
                return b_nf[0]
            return tuple(Array(x[i] for x in b_nf)[g] for i in range(4))

        def grp_of(vec, g):             # 16-bit group g of a depth-bit vector
            return Array(groups(vec))[g] if n_grp > 1 else vec

        # ---- stage C: selection (the only loop: per-QP position read-modify-write) -------------
        # C's state is prepared for its request when it enters C: the candidates above the
        # position (``c_x``), the entries the position may repeat on (``c_v``: the multi bitmap
        # after a first decision, else the candidates) and the next-group candidate (``c_nf*``),
        # so the loop is a find-lowest over 16 bits, a 16-bit AND-OR and the muxes.
        c_valid = Signal()
        c_key = Signal(range(n_key))
        c_rng = Signal(depth)
        c_g, c_oh = Signal(gbits, name="c_g"), Signal(16, name="c_oh")
        c_idx = Signal(8)
        c_x, c_v = Signal(16, name="c_x"), Signal(16, name="c_v")
        n = Signal(8)
        c_first = Signal()              # n == 1 (c is fresh: its weight is not snapshotted yet)
        c_w = Signal(8)                 # weight snapshot of c (valid when n >= 2)
        c_more = Signal()               # n == 1 or n < c_w (registered: off the loop)
        c_nfg, c_nfoh = Signal(gbits, name="c_nfg"), Signal(16, name="c_nfoh")
        # from registers, off the loop: the bits above c / the next-group candidate, its index
        c_nfab = Signal(16, name="c_nfab")
        c_nfi = Signal(4, name="c_nfi")  # index of c_nfoh in its group (registered, no encoder)
        c_ab = _above(m, c_oh, "c")
        c_nfidx = Cat(c_nfi, c_nfg)[:8]

        # Per-QP state: {position index, decisions in a row, == 1, weight snapshot} in a LUT RAM
        # (written by D, read asynchronously at the A -> B edge); "has a position" in flip-flops
        # (reset to none).
        qp_state = data.StructLayout({"cur": 8, "cnt": 8, "fst": 1, "wgt": 8})
        m.submodules.qp_mem = qp_mem = Memory(shape=qp_state, depth=n_key, init=[])
        qp_wp = qp_mem.write_port()
        qp_rp = qp_mem.read_port(domain="comb")
        cur_ok = Signal(n_key)

        # Weight snapshot: the LUT-RAM weight of c, read every cycle, registered (off the loop).
        m.d.comb += table.wt_addr.eq(c_idx)
        nx_oh, nx_ab = _lowest(m, c_x, "nx")
        nx_i = _lowest_index(m, c_x, "nx")
        any_in = Signal()
        repeat = Signal()
        m.d.comb += [any_in.eq(c_x.any()), repeat.eq((c_oh & c_v).any() & c_more)]
        p_g, p_oh, p_ab = (Signal(gbits, name="p_g"), Signal(16, name="p_oh"),   # the pick
                           Signal(16, name="p_ab"))
        p_idx = Signal(8, name="p_idx")
        nx_idx = Cat(nx_i, c_g)[:8]
        # repeat (the latest signal) is the last mux level
        for p_x, c_x_, nx_x, nf_x in ((p_g, c_g, c_g, c_nfg), (p_oh, c_oh, nx_oh, c_nfoh),
                                      (p_ab, c_ab, nx_ab, c_nfab), (p_idx, c_idx, nx_idx, c_nfidx)):
            m.d.comb += p_x.eq(Mux(repeat, c_x_, Mux(any_in, nx_x, nf_x)))
        new_n = Signal(8)
        m.d.comb += new_n.eq(Mux(repeat, n + 1, 1))

        # ---- stage D: the pick registered; its index written back to the QP's position -------
        d_valid = Signal()              # stage D: the pick (block RAM address source)
        d_key = Signal(range(n_key))
        d_g, d_oh, d_ab = Signal(gbits, name="d_g"), Signal(16, name="d_oh"), Signal(16, name="d_ab")
        d_n, d_first, d_w = Signal(8, name="d_n"), Signal(name="d_first"), Signal(8, name="d_w")
        d_index = Signal(8)
        d_rng = Signal(depth)
        m.d.sync += [d_valid.eq(c_valid), d_key.eq(c_key), d_rng.eq(c_rng), d_g.eq(p_g), d_oh.eq(p_oh),
                     d_ab.eq(p_ab), d_index.eq(p_idx), d_n.eq(new_n), d_first.eq(~repeat),
                     d_w.eq(table.wt_data)]
        m.d.comb += [qp_wp.en.eq(d_valid), qp_wp.addr.eq(d_key), qp_wp.data.cur.eq(d_index),
                     qp_wp.data.cnt.eq(d_n), qp_wp.data.fst.eq(d_first), qp_wp.data.wgt.eq(d_w)]
        with m.If(d_valid):
            m.d.sync += cur_ok.bit_select(d_key, 1).eq(1)
        # stage E: a copy of the last write-back (B read the QP's registers before it landed)
        e_valid, e_key = Signal(), Signal(range(n_key))
        e_g, e_oh, e_ab = Signal(gbits, name="e_g"), Signal(16, name="e_oh"), Signal(16, name="e_ab")
        e_n, e_first, e_w = Signal(8, name="e_n"), Signal(name="e_first"), Signal(8, name="e_w")
        e_index = Signal(8, name="e_index")
        d_more, e_more = Signal(name="d_more"), Signal(name="e_more")   # first | n < w
        m.d.comb += d_more.eq(d_first | (d_n < d_w))
        m.d.sync += [e_valid.eq(d_valid), e_key.eq(d_key), e_g.eq(d_g), e_oh.eq(d_oh),
                     e_ab.eq(d_ab), e_index.eq(d_index), e_n.eq(d_n), e_first.eq(d_first),
                     e_w.eq(d_w), e_more.eq(d_more)]
        # ---- stage D and output: per client a skid FIFO, a table read port, a decision -----
        out = [self._output(m, k, dec, d_valid & (self._client(d_key) == k), d_index, d_rng,
                            table)
               for k, dec in enumerate(decs)]

        # ---- pipeline control: A advances only with room for everything ahead of it ------------
        # Per client, a count of its requests in B, C, D and its FIFO (the credit): A advances
        # while it is below OUT_DEPTH.  The count is registered and a read taken from the FIFO
        # or D frees its place one cycle late (off the read-port arbitration path), which the
        # FIFO's extra entry covers; this cycle's advance is counted at once.
        room = Signal()
        advance = Signal()
        rooms = []
        for k, o in enumerate(out):
            credit = Signal(range(OUT_DEPTH + 1), name=f"credit{k}")
            rk = Signal(name=f"room{k}", init=1)
            pop_q = Signal(name=f"pop_q{k}")
            inc = advance & (a_client == k)
            m.d.sync += pop_q.eq(o["pop"])
            # the count's +1 / -1 / compare are done on the register, inc/pop only select
            with m.If(inc & ~pop_q):
                m.d.sync += [credit.eq(credit + 1), rk.eq(credit < OUT_DEPTH - 1)]
            with m.Elif(pop_q & ~inc):
                m.d.sync += [credit.eq(credit - 1), rk.eq(1)]
            rooms.append(rk)
        m.d.comb += room.eq(Array(rooms)[a_client] if two else rooms[0])
        m.d.comb += [
            advance.eq(a_valid & a_have & room),
            in_ready.eq(~a_valid | advance),
            self.no_path.eq(a_valid & ~a_have),
        ]
        with m.If(in_ready):
            m.d.sync += [a_valid.eq(i_valid), a_key.eq(i_key), a_rng.eq(i_rng)]
        # B's data registers load every cycle (only b_valid says whether they hold a request):
        # no clock-enable fan-out from the candidate search
        m.d.sync += b_valid.eq(advance)
        m.d.sync += [b_key.eq(a_key), b_cand.eq(a_cand), b_multi.eq(a_multi), b_rng.eq(a_rng)]
        m.d.sync += [b_nfg[g].eq(a_nf[g][0]) for g in range(n_grp)]
        m.d.sync += [b_nfoh[g].eq(a_nf[g][1]) for g in range(n_grp)]
        m.d.sync += [b_nfab[g].eq(a_nf[g][2]) for g in range(n_grp)]
        m.d.sync += [b_nfi[g].eq(_encode(a_nf[g][1])) for g in range(n_grp)]
        m.d.sync += [b_eq_c.eq(b_valid & (b_key == a_key)), b_eq_d.eq(c_valid & (c_key == a_key)),
                     b_eq_e.eq(d_valid & (d_key == a_key))]
        m.d.comb += qp_rp.addr.eq(a_key)
        pos = qp_rp.data.cur
        m.d.sync += [b_g.eq(pos[4:4 + gbits]), b_idx.eq(pos), b_ok.eq(cur_ok.bit_select(a_key, 1)),
                     b_n.eq(qp_rp.data.cnt), b_fst.eq(qp_rp.data.fst), b_w.eq(qp_rp.data.wgt),
                     b_more.eq(qp_rp.data.fst | (qp_rp.data.cnt < qp_rp.data.wgt))]
        m.d.sync += [b_oh[b].eq(pos[:4] == b) for b in range(16)]
        m.d.sync += [b_ab[b].eq(pos[:4] < b) for b in range(16)]
        m.d.sync += c_valid.eq(b_valid)

        # the QP state from D, E or B's read ("other" than C's pick), each source's n < w
        # compared on its own registers
        o_g, o_oh, o_ab = Signal(gbits, name="o_g"), Signal(16, name="o_oh"), Signal(16, name="o_ab")
        o_idx, o_ok, o_n, o_first, o_w, o_more = (
            Signal(8, name="o_idx"), Signal(name="o_ok"), Signal(8, name="o_n"),
            Signal(name="o_first"), Signal(8, name="o_w"), Signal(name="o_more"))
        with m.If(b_eq_d):
            m.d.comb += [o_g.eq(d_g), o_oh.eq(d_oh), o_ab.eq(d_ab), o_idx.eq(d_index), o_ok.eq(1),
                         o_n.eq(d_n), o_first.eq(d_first), o_w.eq(d_w),
                         o_more.eq(d_more)]
        with m.Elif(b_eq_e):
            m.d.comb += [o_g.eq(e_g), o_oh.eq(e_oh), o_ab.eq(e_ab), o_idx.eq(e_index), o_ok.eq(1),
                         o_n.eq(e_n), o_first.eq(e_first), o_w.eq(e_w),
                         o_more.eq(e_more)]
        with m.Else():
            m.d.comb += [o_g.eq(b_g), o_oh.eq(b_oh), o_ab.eq(b_ab), o_idx.eq(b_idx), o_ok.eq(b_ok),
                         o_n.eq(b_n), o_first.eq(b_fst), o_w.eq(b_w),
                         o_more.eq(b_more)]
        bc_o, bm_o = grp_of(b_cand, o_g), grp_of(b_multi, o_g)
        # C's pick forwarded: B's candidates / multi / next-group candidate in the group of c
        # and of c's next-group candidate, each from registers (not muxed by the pick)
        bc_c, bm_c, bc_f, bm_f = (Signal(16, name="bc_c"), Signal(16, name="bm_c"),
                                  Signal(16, name="bc_f"), Signal(16, name="bm_f"))
        m.d.comb += [bc_c.eq(grp_of(b_cand, c_g)), bm_c.eq(grp_of(b_multi, c_g)),
                     bc_f.eq(grp_of(b_cand, c_nfg)), bm_f.eq(grp_of(b_multi, c_nfg))]
        nf_c = (Signal(gbits, name="nf_c_g"), Signal(16, name="nf_c_oh"), Signal(16, name="nf_c_ab"),
                Signal(4, name="nf_c_i"))
        nf_f = (Signal(gbits, name="nf_f_g"), Signal(16, name="nf_f_oh"), Signal(16, name="nf_f_ab"),
                Signal(4, name="nf_f_i"))
        m.d.comb += [x.eq(y) for x, y in zip(nf_c, nf_of(c_g))]
        m.d.comb += [x.eq(y) for x, y in zip(nf_f, nf_of(c_nfg))]

        # C's next state, field by field: the three forwarded options R (repeat), N (next in
        # the group), F (next group) and the other sources' O, arranged so that the last mux is
        # selected by ``b_eq_c & ~repeat`` (``repeat`` is the latest signal of the loop) between
        # the search's pick (N/F) and R-or-O: one LUT level after the search and ``repeat``.
        regs = (c_g, c_oh, c_idx, c_x, c_v, c_first, n, c_w, c_more, c_nfg, c_nfoh, c_nfab, c_nfi)
        opt_r = (c_g, c_oh, c_idx, bc_c & c_ab, bc_c, 0, n + 1, table.wt_data,
                 # n + 1 < weight: from the snapshot, or (n == 1) the weight read now
                 Mux(c_first, table.wt_ge3, n + 1 < c_w),
                 *nf_c)
        opt_n = (c_g, nx_oh, nx_idx, bc_c & nx_ab, bm_c, 1, 1, table.wt_data, 1, *nf_c)
        opt_f = (c_nfg, c_nfoh, c_nfidx, bc_f & c_nfab, bm_f, 1, 1, table.wt_data, 1, *nf_f)
        opt_o = (o_g, o_oh, o_idx, Mux(o_ok, bc_o & o_ab, 0), Mux(o_ok, Mux(o_first, bm_o, bc_o), 0),
                 o_first, o_n, o_w, o_more, *nf_of(Mux(o_ok, o_g, n_grp - 1)))
        with m.If(b_valid):
            m.d.sync += [c_key.eq(b_key), c_rng.eq(b_rng)]
            # The QP position travels with the request: forwarded from a same-key pick in C
            # this cycle (b_eq_c), in D (written back at the end of this cycle) or in E (written
            # back at the end of the last cycle, after B read the QP's registers), else B's read.
            for reg, r, nn, f, o in zip(regs, opt_r, opt_n, opt_f, opt_o):
                if_r = Signal.like(reg, name=f"{reg.name}_if_r")
                m.d.comb += if_r.eq(Mux(b_eq_c, r, o))
                m.d.sync += reg.eq(Mux(b_eq_c & ~repeat, Mux(any_in, nn, f), if_r))
        return m

    def _client(self, key):
        """Client of a position key (bit 3 with two clients, else 0)."""
        return key[3] if self.clients == 2 else C(0, 1)

    def _output(self, m, k, dec, d_mine, d_index, d_rng, table):
        """Client ``k``'s skid queue, table read port and decision (a two-stage read pipeline).

        S1 is the block RAM read (issued from the queue head, else stage D's pick for ``k``),
        S2 the decision: ``valid``/``index`` registers and ``entry`` straight from the read
        port's output register.  S2 advances when it is empty or ``ready``; S1 then moves
        into it when its entry is still usable: its read did not clash with a same-cycle wide
        write (else S1 reads again) and the entry is still eligible (``s1_ok``: GOOD, weight
        non-zero and, for client 0, not avoided, as of the writes of two cycles earlier;
        re-checked every cycle S1 waits).  A pick that is no longer usable is replaced: one
        cycle later the lowest usable entry of its request's range (``rp_idx``, registered
        from S1's range mask and the live bitmap) is read instead, and checked in turn; with
        none in the range S1 waits.  A full S2 holds S1 (and the read port's two stages).
        ``ready`` reaches the flip-flops and the block RAM's enables through one or two LUT
        levels: every decision is prepared for both of its values from registers and
        ``ready`` selects last.  Returns ``{"pop"}``: ``pop`` -- a pick left the queue or
        stage D for S1 this cycle.
        """
        depth = self.depth
        qd = 1 << (OUT_DEPTH - 1).bit_length()          # queue entries (>= OUT_DEPTH)
        qbits = (qd - 1).bit_length()
        pick = data.StructLayout({"index": 8, "rng": depth})
        m.submodules[f"queue{k}"] = qmem = Memory(shape=pick, depth=qd, init=[])
        qw = qmem.write_port()
        qr = qmem.read_port(domain="comb")
        wptr, rptr = Signal(qbits, name=f"q_wptr{k}"), Signal(qbits, name=f"q_rptr{k}")
        occ = Signal(qd, name=f"q_occ{k}")        # thermometer: occ[j] = more than j picks queued
        en, addr, adv, rdata, clash = table._rd(k)
        s1_valid, s1_index = Signal(name=f"s1_valid{k}"), Signal(8, name=f"s1_index{k}")
        s1_rng = Signal(depth, name=f"s1_rng{k}")
        s1_ok = Signal(name=f"s1_ok{k}")           # S1's entry still usable (see above)
        s1_rp = Signal(name=f"s1_rp{k}")           # S1 waits for its replacement pick
        dec_valid = Signal(name=f"dec_valid{k}")
        dec_index = Signal(8, name=f"dec_index{k}")
        adv2, move, retry, issue, have = (Signal(name=f"adv2_{k}"), Signal(name=f"move{k}"),
                                          Signal(name=f"retry{k}"), Signal(name=f"issue{k}"),
                                          Signal(name=f"have{k}"))
        ne = occ[0]
        rdy = dec.ready

        # usable entries, registered: eligible and (client 0) not avoided after the writes of
        # the previous cycle (a strobe of that cycle that makes an entry ineligible is decoded
        # here; one that makes it eligible is seen a cycle later, through the table's bitmap)
        abits = (depth - 1).bit_length()
        w_drop = (self.w_data.state != EvState.GOOD) | (self.w_data.weight == 0)
        st_drop = self.st_state != EvState.GOOD
        drop = Signal(depth, name=f"drop{k}")
        for i in range(depth):
            m.d.comb += drop[i].eq((self.w_en & w_drop & (self.w_addr == i))
                                   | (self.st_en & st_drop & (self.st_addr == i)))
        usable = Signal(depth, name=f"usable{k}")
        m.d.sync += usable.eq(table.eligible & ~(self.avoid if k == 0 else 0) & ~drop)

        def ok_at(index):
            ok = usable.bit_select(index[:abits], 1)
            return ok & (index < depth) if depth < 256 else ok

        # the replacement pick: lowest usable entry of S1's range, registered every cycle
        rp_idx, rp_any = Signal(8, name=f"rp_idx{k}"), Signal(name=f"rp_any{k}")
        cand = Signal(depth, name=f"rp_cand{k}")
        m.d.comb += cand.eq(s1_rng & usable)
        g_any = [cand[16 * g:16 * g + 16].any() for g in range(depth // 16)]
        g_idx = [_lowest_index(m, cand[16 * g:16 * g + 16], f"rp{k}_g{g}")
                 for g in range(depth // 16)]
        rp_next = Signal(8, name=f"rp_next{k}")
        for g in reversed(range(depth // 16)):
            with m.If(g_any[g]):
                m.d.comb += rp_next.eq(Cat(g_idx[g], C(g, 4)))
        m.d.sync += [rp_idx.eq(rp_next), rp_any.eq(Cat(*g_any).any())]

        chk = Signal(name=f"s1_chk{k}")            # S1 holds a read result
        good = Signal(name=f"s1_good{k}")          # ... that may become the decision
        stale = Signal(name=f"s1_stale{k}")        # ... that must be replaced
        rp_go = Signal(name=f"rp_go{k}")           # the replacement is read this cycle
        # (s1_ok is 0 while S1 waits for a replacement: it is cleared by the stale check and
        # set only by a read, so ``good`` needs no ``s1_rp`` term)
        m.d.comb += [
            chk.eq(s1_valid & ~s1_rp),
            good.eq(s1_valid & ~clash & s1_ok),
            stale.eq(chk & ~clash & ~s1_ok),
            rp_go.eq(s1_valid & s1_rp & rp_any),
        ]
        # S1 frees this cycle: always (empty, or S2 empty), or when ``ready`` (S2 full)
        free0, free1 = Signal(name=f"free0_{k}"), Signal(name=f"free1_{k}")
        m.d.comb += [
            have.eq(ne | d_mine),
            free0.eq(have & (~s1_valid | (good & ~dec_valid))),
            free1.eq(have & good),
            retry.eq((chk & clash) | rp_go),   # S1 reads again: a clash, or the replacement
        ]
        # Every enable and next value is prepared from registers for ready = 0 (``*_0``) and
        # ready = 1 (``*_1``); ``ready`` is the last mux (one LUT level from ``ready`` to the
        # flip-flops and the block RAM's enables).
        def both(name, f):
            v0, v1 = Signal(name=f"{name}{k}_r0"), Signal(name=f"{name}{k}_r1")
            m.d.comb += [v0.eq(f(0)), v1.eq(f(1))]
            return v0, v1
        adv2_r = both("adv2_", lambda r: ~dec_valid | r)
        move_r = both("move", lambda r: good & adv2_r[r])                          # S1 -> S2
        issue_r = both("issue", lambda r: free0 | (free1 & r))   # a new read (queue head or D's)
        en_r = both("en", lambda r: retry | issue_r[r])
        s1n_r = both("s1n", lambda r: en_r[r] | (s1_valid & ~move_r[r]))
        dvn_r = both("dvn", lambda r: Mux(adv2_r[r], move_r[r], dec_valid))
        s1_next, dec_next = Signal(name=f"s1_next{k}"), Signal(name=f"dec_next{k}")
        for x, (x0, x1) in ((adv2, adv2_r), (move, move_r), (issue, issue_r), (en, en_r),
                            (s1_next, s1n_r), (dec_next, dvn_r)):
            m.d.comb += x.eq(Mux(rdy, x1, x0))
        head_idx = Mux(ne, qr.data.index, d_index)
        m.d.comb += [
            addr.eq(Mux(rp_go, rp_idx, Mux(retry, s1_index, head_idx))),
            adv.eq(adv2),
            qr.addr.eq(rptr),
            qw.en.eq(d_mine), qw.addr.eq(wptr), qw.data.index.eq(d_index), qw.data.rng.eq(d_rng),
        ]
        # the usability of the entry S1 holds next: of the address read (each source's check
        # made in parallel, selected like the address), else the held entry's, re-checked
        ok_rd = Signal(name=f"ok_rd{k}")
        m.d.comb += ok_rd.eq(Mux(rp_go, ok_at(rp_idx), Mux(retry, ok_at(s1_index),
                                                            Mux(ne, ok_at(qr.data.index),
                                                                ok_at(d_index)))))
        ok_hold = s1_ok & ok_at(s1_index)
        # every pick of D is queued; a read (the head, or D's pick when the queue is empty)
        # takes the entry at rptr
        with m.If(d_mine):
            m.d.sync += wptr.eq(wptr + 1)
        up = Cat(C(1, 1), occ[:-1])             # occupancy + 1
        down = Cat(occ[1:], C(0, 1))            # occupancy - 1
        # the registers ``ready`` acts on: next values for both of its values, ``ready`` last
        for reg, f in ((rptr, lambda r: Mux(issue_r[r], rptr + 1, rptr)),
                       (occ, lambda r: Mux(issue_r[r], Mux(d_mine, occ, down),
                                           Mux(d_mine, up, occ))),
                       (s1_index, lambda r: Mux(en_r[r], addr, s1_index)),
                       (s1_ok, lambda r: Mux(en_r[r], ok_rd, ok_hold)),
                       (dec_index, lambda r: Mux(adv2_r[r], s1_index, dec_index))):
            n0, n1 = Signal.like(reg, name=f"{reg.name}_r0"), Signal.like(reg, name=f"{reg.name}_r1")
            m.d.comb += [n0.eq(f(0)), n1.eq(f(1))]
            m.d.sync += reg.eq(Mux(rdy, n1, n0))
        with m.If(issue):                       # (a clock enable: off the ready-last muxes)
            m.d.sync += s1_rng.eq(Mux(ne, qr.data.rng, d_rng))
        # S1 waits for a replacement from a stale check until the replacement's read
        m.d.sync += s1_rp.eq((s1_rp & ~rp_go) | stale)
        m.d.sync += [s1_valid.eq(s1_next), dec_valid.eq(dec_next)]
        m.d.comb += [dec.valid.eq(dec_valid), dec.payload.index.eq(dec_index),
                     dec.payload.entry.eq(rdata),
                     dec.payload.entry.state.eq(EvState.GOOD)]  # checked usable => GOOD
        return {"pop": issue}
