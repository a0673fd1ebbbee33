"""Formal proof of sender reliability (rtl/reliability.py): the ev_min_active floor of its
ASSUMED_BAD marks, and retransmission only of outstanding PSNs (24-bit serial arithmetic).

Small parameters: ``qps=1``, ``window=64`` (the smallest the block allows), ``paths=4``,
``clk_ns=512`` (so an ACK timeout of 1.024 us x 2^0 expires after 2 clocks and a timeout
action, with its ``st_en``, is reachable in the bound).  Bounded at DEPTH clocks from reset:
the QP configured at clock 0 (any configuration), then any SentInfos / ACKs / probe replies.
A first timeout's ``st_en`` comes about 17 clocks after reset at the earliest (SentInfo
recorded 4-6 clocks after its transfer, 2 clocks of age, scan, 4 + 1 clocks of action).

Properties:

(a) when the block marks an entry ASSUMED_BAD (``st_en``, ``st_state`` ASSUMED_BAD), the
    profile keeps at least ``ev_min_active`` GOOD entries without it (GOOD from a model of
    the path table: any initial state, then this block's ``st_en`` writes and the
    controller's GOOD writes, a clock after their strobe, as ``PathTable.eligible``).
(b) every RetxReq offered on ``retx`` names QP 0 and a PSN that was sent (``psn`` in
    ``[start_psn, nxt)`` in 24-bit serial arithmetic, nxt = the next new PSN): never
    beyond nxt.

(b') every RetxReq names a PSN outstanding (in ``[una, nxt)``) in the clock it was decided
    (three clocks before it is offered, with ``retx.ready`` high since reset): a timed-out PSN
    cumulatively acknowledged while its timeout action waits (una passing it) is not
    retransmitted.  This failed at clock 19 (then 20, once the RetxReq FIFO became
    window-deep) before the action re-checked una (``t_gone``);
    ``test_reliability_acked_mutant_fails`` removes the re-check and sees it fail again.
"""

import pytest
from amaranth.hdl import Assert, Assume, Cat, Elaboratable, Module, Mux, Signal

from mrcnic.rtl import reliability
from mrcnic.rtl.layouts import EvState
from .formal import drive_inputs, free, mutant, past, require_failed, require_proved, run_formal, \
    stream_rule

PATHS = 4
DEPTH = 21


def popcount(v):
    return sum(v[i] for i in range(len(v)))


class ReliabilityProof(Elaboratable):
    def __init__(self, cls=reliability.SenderReliability, *, check_una=False):
        self.dut = cls(qps=1, window=64, paths=PATHS, clk_ns=512)
        self.check_una = check_una       # (b') outstanding when decided: FAILS (finding)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        drive_inputs(m, dut, skip=("eligible",))
        first = Signal(init=1)
        m.d.sync += first.eq(0)

        # Contract: one configuration write of QP 0 at clock 0, none later ("write only while
        # the QP has no traffic"); its fields are any.  Captured by the model.
        m.d.comb += Assume(dut.cfg_w_en == first)
        with m.If(first):
            m.d.comb += Assume(dut.cfg_w_addr == 0)
        cfg = Signal.like(dut.cfg_w_data)
        with m.If(first):
            m.d.sync += cfg.eq(dut.cfg_w_data)
        start = Signal(24)
        m.d.comb += start.eq(Mux(first, dut.cfg_w_data.start_psn, cfg.start_psn))
        pm = Signal(PATHS)                       # the profile's entries
        end = cfg.profile_base + cfg.profile_count
        m.d.comb += pm.eq(Cat((cfg.profile_base <= i) & (end > i) for i in range(PATHS)))

        # Contract: the input streams hold their payload until taken; no SentInfo in the clock
        # of the configuration write; a new SentInfo (retx = 0) carries QP 0 and the next PSN
        # (start_psn, then one more per new SentInfo: the segmenter's order).
        sent, ack = dut.sent, dut.ack
        stream_rule(m, sent.valid, sent.ready, sent.payload.as_value(), check=Assume)
        stream_rule(m, ack.valid, ack.ready, ack.payload.as_value(), check=Assume)
        m.d.comb += Assume(~(first & sent.valid))
        nxt = Signal(24)                         # next new PSN (model)
        with m.If(first):
            m.d.sync += nxt.eq(dut.cfg_w_data.start_psn)
        with m.If(sent.valid & ~sent.payload.retx):
            m.d.comb += Assume((sent.payload.qp == 0) & (sent.payload.psn == nxt))
        with m.If(sent.valid & sent.ready & ~sent.payload.retx):
            m.d.sync += nxt.eq(nxt + 1)

        # The path table's GOOD-and-weight bitmap: any at clock 1, then this block's st_en
        # writes and the controller's (ctl_st_en: contract restricted to setting GOOD, which
        # only raises the count), each a clock after its strobe.
        el = Signal(PATHS)
        el_init, s_init = free(PATHS, name="el_init")       # any value at clock 0
        m.d.comb += s_init
        m.d.comb += dut.eligible.eq(el)
        with m.If(first):
            m.d.sync += el.eq(el_init)
        with m.Else():
            for i in range(PATHS):
                with m.If(dut.st_en & (dut.st_addr == i)):
                    m.d.sync += el[i].eq(dut.st_state == EvState.GOOD)
                with m.Elif(dut.ctl_st_en & (dut.ctl_st_addr == i)):
                    m.d.sync += el[i].eq(1)

        # (a) an ASSUMED_BAD mark leaves >= ev_min_active GOOD entries in the profile
        with m.If(dut.st_en & (dut.st_state == EvState.ASSUMED_BAD)):
            others = Signal(PATHS)
            m.d.comb += others.eq(el & pm & ~Mux(dut.st_addr < PATHS,
                                                 1 << dut.st_addr[:2], 0))
            m.d.comb += Assert(popcount(others) >= cfg.ev_min_active)

        # (b) RetxReqs: sent PSNs only; outstanding when decided (ready high since reset)
        retx = dut.retx
        rdy = Signal(init=1)
        m.d.sync += rdy.eq(rdy & retx.ready)
        una = dut.una[0]
        # a RetxReq is offered 3 clocks after its decision: the push register, then the
        # window-deep FIFO's registered block-RAM read (SyncFIFOBuffered)
        una_d2 = past(m, past(m, past(m, una, name="una_d1"), name="una_d2"), name="una_d3")
        nxt_d2 = past(m, past(m, past(m, nxt, name="nxt_d1"), name="nxt_d2"), name="nxt_d3")
        with m.If(retx.valid):
            p = retx.payload
            m.d.comb += Assert((p.qp == 0) & ((p.psn - start)[:24] < (nxt - start)[:24]))
            if self.check_una:
                m.d.comb += Assert(~rdy | ((p.psn - una_d2)[:24] < (nxt_d2 - una_d2)[:24]))
        return m


@pytest.mark.formal
def test_reliability_bounded_21():
    """Sender reliability (qps 1, window 64, paths 4): (a), (b) and (b') for 21 clocks from
    reset."""
    require_proved(run_formal(ReliabilityProof(check_una=True), "reliability", mode="bmc",
                              depth=DEPTH))


@pytest.mark.formal
def test_reliability_acked_mutant_fails():
    """Teeth of (b'): without the re-check of una (a timed-out PSN acknowledged during the
    timeout action retransmitted all the same, as before the fix) the proof fails."""
    mod = mutant(reliability, "(to_wait == 4) & ~t_gone & ~srch_busy & retx_room",
                 "(to_wait == 4) & ~srch_busy & retx_room")
    require_failed(run_formal(ReliabilityProof(mod.SenderReliability, check_una=True),
                              "reliability_acked_mutant", mode="bmc", depth=DEPTH))


@pytest.mark.formal
def test_reliability_mutant_fails():
    """Teeth: the ev_min_active check off by one (the timed-out entry itself not counted)."""
    mod = mutant(reliability, "t_thr.eq(cfg[to.qp[:qb]].ev_min_active + t_in_prof),",
                 "t_thr.eq(cfg[to.qp[:qb]].ev_min_active),")
    require_failed(run_formal(ReliabilityProof(mod.SenderReliability), "reliability_mutant",
                              mode="bmc", depth=DEPTH))
