"""Formal proof of the spray scheduler (rtl/spray.py) end to end, with two clients (data,
ACKs) over the smallest table the block allows.

Small parameters: ``depth=16`` entries (one 16-entry group: the group logic is the same
for every group), ``clients=2``.  Bounded at DEPTH clocks from reset: a request is decided
``LATENCY`` = 9 clocks after its transfer, so the run covers only the first decisions of
each client (the first one rises at clock 9 at the earliest: a few decisions per client),
with table writes on both ports in any cycle, any requests, any ``ready`` and ``avoid``.
Depth 13 and more: minutes per step (step 13 alone took 4 min on the shared machine).

Properties (every one against the ports only):

(a) a rising decision never names an entry that is not usable: a decision rising at clock
    t names an entry that was eligible (GOOD and weight non-zero, from a model of the last
    write to each entry on either port) after the writes of clock t - 3 (``DROP_CYCLES``)
    and, for client 0, not ``avoid``-ed at clock t - 3.  For every client, any ``ready``
    history, wide and state-port writes at every clock (picks made stale meanwhile are
    replaced at the output, see rtl/spray.py).
(b) work conservation at the documented latency: while some request transferred at t - 9
    or before is still undecided, a decision is offered at t (one decision per clock while
    asked).  Under: both clients' ``ready`` high so far; a watched entry ``g`` written GOOD
    with a non-zero weight at clock 0; no table write and no ``avoid`` change after clock 0
    (a replaced pick costs clocks); every request so far has ``g`` in its range.
(c) the two clients never share a decision: each client receives no decision without an
    undecided request of its own, and each of its decisions lies in the range of its own
    oldest undecided request (decisions come in request order per client).

Unbounded: (a) alone, by k-induction (``test_spray_eligible_induction``, k=12; it closes at
k=4).  Its auxiliary invariants, proved by the same induction: the path table's GOOD /
weight-non-zero flip-flops equal the wrapper's model (as in test_path_table_formal); each
client's registered ``usable`` bitmap holds only entries eligible now and (client 0) not
avoided a clock ago; S1's "still usable" flag is set only for an in-range entry that was
eligible a clock ago and (client 0) not avoided two clocks ago (the decision rises from S1
a clock later).  (b) and (c) stay bounded: their induction would need the request queue
model tied to every pipeline stage (input skids, T, I, A..E, the skid FIFOs, S1, S2) and
the per-QP positions; not attempted.

Teeth: ``test_spray_output_recheck_mutant_fails`` removes the output stage's re-check (the
RTL before it was added, where a pick kept in the skid FIFO, delayed by a read clash or by
``ready`` low could rise naming an entry made DENIED several clocks earlier: the former
finding of this proof); ``test_spray_mutant_fails`` ignores the eligible bitmap.
"""

import pytest
from amaranth.hdl import Assert, Assume, Const, Elaboratable, Module, Mux, Signal

from mrcnic.rtl import spray
from mrcnic.rtl.layouts import EvState
from .formal import Internals, const, drive_inputs, mutant, past, require_failed, require_proved, \
    run_formal, stream_rule

ENTRIES = 16
DEPTH = 12
K = 12              # (a)'s induction length (closes at 4; the recheck mutant's base case needs 12)
QDEPTH = 16         # requests modelled per client (more than a run of DEPTH clocks transfers)


class SprayProof(Elaboratable):
    """The scheduler with every input free except the request streams' ready/valid rule."""

    def __init__(self, cls=spray.SprayScheduler, *, check_b=True, check_c=True, aux_a=False):
        self.dut = cls(depth=ENTRIES, clients=2)
        self.check_b, self.check_c, self.aux_a = check_b, check_c, aux_a

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        ins = Internals(dut, platform)
        m.submodules.dut = ins.frag
        drive_inputs(m, dut)
        reqs = [dut.req, dut.req_1]
        decs = [dut.decision, dut.decision_1]
        # Contract: each request stream holds its request until taken (stream rule).
        for r in reqs:
            stream_rule(m, r.valid, r.ready, r.payload.as_value(), check=Assume)

        # Model of the table: per entry, eligible = last state write GOOD and last wide
        # write's weight non-zero (the state port wins in a same-cycle double write; writes
        # to addresses >= 16 ignored), as proved at its source (test_path_table_formal).
        el = Signal(ENTRIES)
        for i in range(ENTRIES):
            good, wnz = Signal(name=f"good{i}"), Signal(name=f"wnz{i}")
            w_hit = dut.w_en & (dut.w_addr == i)
            st_hit = dut.st_en & (dut.st_addr == i)
            with m.If(st_hit):
                m.d.sync += good.eq(dut.st_state == EvState.GOOD)
            with m.Elif(w_hit):
                m.d.sync += good.eq(dut.w_data.state == EvState.GOOD)
            with m.If(w_hit):
                m.d.sync += wnz.eq(dut.w_data.weight != 0)
            m.d.comb += el[i].eq(good & wnz)
            if self.aux_a:
                # auxiliary invariant (induction of (a)): the table's flags are the model's
                # (as proved for the path table alone, test_path_table_formal)
                m.d.comb += [Assert(ins.signal("good", ("table",))[i] == good),
                             Assert(ins.signal("wnz", ("table",))[i] == wnz)]
        # el at clock u reflects the writes of clocks < u.  A decision rising at t was checked
        # in S1 at t - 1 against the scheduler's registered copy of the bitmap (the writes of
        # t - 3, re-checked every clock S1 waits): its entry was eligible after the writes of
        # clock t - 3 (el at t - 2) and, for client 0, not avoided at clock t - 3.
        m_el_d1 = past(m, el, name="el_d1")
        el_d2 = past(m, m_el_d1, name="el_d2")
        nav_d3 = ~dut.avoid
        navs = []
        for d in range(1, 4):
            nav_d3 = past(m, nav_d3, name=f"nav_d{d}")
            navs.append(nav_d3)
        win_av_d1, win_av_d2 = navs[0], navs[1]
        win, win_av = Signal(ENTRIES), Signal(ENTRIES)
        m.d.comb += [win.eq(el_d2), win_av.eq(nav_d3)]
        first = Signal(init=1)
        m.d.sync += first.eq(0)
        # (b)'s condition: no table write and no ``avoid`` change after clock 0 (a pick made
        # unusable meanwhile is replaced at the output, which takes a few clocks more)
        still = Signal(init=1)
        with m.If(~first & (dut.w_en | dut.st_en | (dut.avoid != past(m, dut.avoid, name="av_d1")))):
            m.d.sync += still.eq(0)

        # The watched entry g of (b): written GOOD, weight non-zero at clock 0, never again.
        g, s_g = const(4, name="g")
        m.d.comb += s_g
        g_ok = Signal(init=1)
        g_w = dut.w_en & (dut.w_addr == g)
        g_st = dut.st_en & (dut.st_addr == g)
        with m.If(first):
            with m.If(~g_w | (dut.w_data.weight == 0)
                      | (g_st & (dut.st_state != EvState.GOOD))
                      | (~g_st & (dut.w_data.state != EvState.GOOD))):
                m.d.sync += g_ok.eq(0)
        with m.Elif(g_w | g_st):
            m.d.sync += g_ok.eq(0)
        # g never avoided (ECN steering of client 0)
        with m.If(dut.avoid.bit_select(g, 1)):
            m.d.sync += g_ok.eq(0)

        rdy_all = []
        acc, dec_cnt = [], []
        all_g = Signal(init=1)
        for k, (r, dcs) in enumerate(zip(reqs, decs)):
            # ready high at every clock so far (this one included)
            rdy_past = Signal(init=1, name=f"rdy_past{k}")
            m.d.sync += rdy_past.eq(rdy_past & dcs.ready)
            rdy_now = Signal(name=f"rdy_all{k}")
            m.d.comb += rdy_now.eq(rdy_past & dcs.ready)
            rdy_all.append(rdy_now)

            # Request queue model of client k: (base, count) of the undecided requests.
            bases = [Signal(8, name=f"q{k}_base{j}") for j in range(QDEPTH)]
            counts = [Signal(9, name=f"q{k}_count{j}") for j in range(QDEPTH)]
            level = Signal(range(QDEPTH + 1), name=f"q{k}_level")
            a = Signal(6, name=f"acc{k}")          # requests transferred
            dn = Signal(6, name=f"dec{k}")         # decisions transferred
            take = r.valid & r.ready
            out = dcs.valid & dcs.ready
            m.d.sync += [a.eq(a + take), dn.eq(dn + out), level.eq(level + take - out)]
            with m.If(out):
                for j in range(QDEPTH - 1):
                    m.d.sync += [bases[j].eq(bases[j + 1]), counts[j].eq(counts[j + 1])]
            with m.If(take):
                for j in range(QDEPTH):
                    with m.If(level - out == j):
                        m.d.sync += [bases[j].eq(r.payload.base), counts[j].eq(r.payload.count)]
                p = r.payload
                with m.If((p.base > g) | (p.base + p.count <= g)):
                    m.d.sync += all_g.eq(0)
            acc.append(a)
            dec_cnt.append(dn)
            if self.check_c:
                # (c) no decision without an undecided request of this client, and the
                # decision lies in that request's range [base, base + count)
                m.d.comb += Assert(level <= QDEPTH)
                with m.If(dcs.valid):
                    idx = dcs.payload.index
                    m.d.comb += [Assert(level != 0),
                                 Assert((idx >= bases[0]) & (idx < bases[0] + counts[0])
                                        & (idx < ENTRIES))]

            # (a) a rising decision names an entry eligible in its settle window
            rise = dcs.valid & ~past(m, dcs.valid & ~dcs.ready, name=f"held{k}")
            idx = dcs.payload.index
            ok = (idx < ENTRIES) & win.bit_select(idx[:4], 1)
            if k == 0:
                ok = ok & win_av.bit_select(idx[:4], 1)
            with m.If(rise):
                m.d.comb += Assert(ok)
            if self.aux_a:
                # Auxiliary invariants (induction of (a)) on client k's output stage: its
                # registered ``usable`` bitmap only has entries eligible now (and, client 0,
                # not avoided a clock ago); S1's "still usable" flag only for an entry that
                # was so a clock ago (in range; it rises as the decision a clock later).
                usable = ins.signal(f"usable{k}")
                s1_ok, s1_index = ins.signal(f"s1_ok{k}"), ins.signal(f"s1_index{k}")
                el_d1 = m_el_d1
                # (the all-ones constant unsigned: a part-select of a signed Const(-1) at a
                # variable offset did not read as all ones in the proof)
                nav = win_av_d1 if k == 0 else Const((1 << ENTRIES) - 1, ENTRIES)
                nav2 = win_av_d2 if k == 0 else Const((1 << ENTRIES) - 1, ENTRIES)
                m.d.comb += Assert((usable & ~(el & nav)) == 0)
                with m.If(s1_ok):
                    m.d.comb += Assert((s1_index < ENTRIES) & el_d1.bit_select(s1_index[:4], 1)
                                       & nav2.bit_select(s1_index[:4], 1))

        if self.check_b:
            # (b) a request transferred 9 or more clocks ago and still undecided => a
            # decision is offered now (on either client)
            late = []
            for k in range(2):
                prev = acc[k]
                for d in range(spray.LATENCY - 1):
                    prev = past(m, prev, name=f"acc{k}_d{d + 1}")
                # requests transferred at t - 9 or before > decisions transferred before t
                late.append(prev > dec_cnt[k])
            with m.If(g_ok & still & all_g & rdy_all[0] & rdy_all[1] & (late[0] | late[1])):
                m.d.comb += Assert(decs[0].valid | decs[1].valid)
        return m


@pytest.mark.formal
def test_spray_bounded_12():
    """Spray scheduler (depth 16, clients 2): (a), (b), (c) above for 12 clocks from reset."""
    require_proved(run_formal(SprayProof(), "spray", mode="bmc", depth=DEPTH))


@pytest.mark.formal
def test_spray_eligible_induction():
    """Spray scheduler: (a) alone, unbounded (k-induction, K clocks; auxiliary invariants on
    the output stages' ``usable`` bitmaps and S1's "still usable" flags)."""
    require_proved(run_formal(SprayProof(check_b=False, check_c=False, aux_a=True),
                              "spray_a", mode="prove", depth=K))


@pytest.mark.formal
def test_spray_output_recheck_mutant_fails():
    """Teeth: the output stage's re-check removed (a pick is used whatever happened to its
    entry since stage A: the RTL before the fix, where a decision could name an entry made
    DENIED several clocks earlier)."""
    mod = mutant(spray, "good.eq(s1_valid & ~clash & s1_ok),", "good.eq(chk & ~clash),")
    require_failed(run_formal(SprayProof(mod.SprayScheduler, check_b=False, check_c=False,
                                         aux_a=True),
                              "spray_recheck_mutant", mode="prove", depth=K))


@pytest.mark.formal
def test_spray_mutant_fails():
    """Teeth: the live eligible bitmap ignored (every entry in range is a candidate)."""
    mod = mutant(spray, "return table.eligible & ~Mux(client, 0, self.avoid)",
                 "return ~Mux(client, 0, self.avoid)")
    require_failed(run_formal(SprayProof(mod.SprayScheduler), "spray_mutant", mode="bmc",
                              depth=DEPTH))
