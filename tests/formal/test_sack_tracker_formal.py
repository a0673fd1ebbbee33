"""Formal proof of the SACK tracker (rtl/sack_tracker.py): each PSN placed at most once, only
inside the window; the cumulative ACK never steps back (24-bit serial arithmetic);
completions in order, each only after every PSN of its message was placed.

Small parameters: ``qps=1``, ``window=64`` (the smallest the block allows); packets may
name any QP (QPs other than 0 are out of window).  Bounded from reset, so the run
covers only the first packets (about one per 2-5 clocks), not a whole 64-PSN window.
"""

import pytest
from amaranth.hdl import Assert, Assume, Elaboratable, Module, Mux, Signal

from mrcnic import wire
from mrcnic.rtl import sack_tracker
from mrcnic.rtl.layouts import RxKind
from .formal import (const, drive_inputs, mutant, require_failed, require_proved,
                     run_formal, stream_rule)

DEPTH = 14
WINDOW = 64
FIFO = 4         # packets between pkt and place: input register, CLASS/CHECK, output register


def serial_lt(a, b):
    """a < b in 24-bit serial arithmetic (RFC 1982): (b - a) mod 2**24 in 1 .. 2**23 - 1."""
    d = (b - a)[:24]
    return (d != 0) & ~d[23]


class SackProof(Elaboratable):
    """The SACK tracker under its input contract.

    The QP context is written once, at the first clock, with any ``start_psn``
    (``AnyConst``); the contract allows QP writes only while no packet of the QP is in
    flight, and the run then starts from that write.  ``w`` is a watched PSN (``AnyConst``).
    """

    def __init__(self, cls=sack_tracker.SackTracker):
        self.dut = cls(qps=1, window=WINDOW)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        drive_inputs(m, dut)
        pkt = dut.pkt
        start, s1 = const(24, name="start")
        w, s2 = const(24, name="w")
        m.d.comb += [s1, s2]
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
        level = Signal(range(FIFO + 2))
        take = pkt.valid & pkt.ready & (pkt.payload.kind == RxKind.DATA) & ~pkt.payload.trimmed
        out = dut.place.valid & dut.place.ready
        m.d.comb += Assert(level <= FIFO)
        m.d.comb += Assert(~out | (level != 0))     # no PlaceCmd without a packet
        head = psns[0]
        nxt_level = level + take - out
        with m.If(out):
            for k in range(FIFO - 1):
                m.d.sync += psns[k].eq(psns[k + 1])
        with m.If(take):
            for k in range(FIFO):
                with m.If(level - out == k):
                    m.d.sync += psns[k].eq(pkt.payload.psn)
        m.d.sync += level.eq(nxt_level)

        # PSNs placed so far; PSN w placed how often.
        placed = Signal(8)
        placed_w = Signal(2)
        placing = out & dut.place.payload.place
        with m.If(placing):
            m.d.sync += placed.eq(placed + 1)
            with m.If(head == w):
                m.d.sync += placed_w.eq(placed_w + 1)
                # at most once
                m.d.comb += Assert(placed_w == 0)
            # only inside the window: ePSN - start <= PSNs placed before, so a placed PSN
            # lies within window + placed of start, and never behind it
            m.d.comb += Assert(((head - start)[:24]) < WINDOW + placed)

        # Cumulative ACK point (ACK and trim NACK: cum_psn = ePSN - 1) never steps back.
        ack = dut.ack
        cum = Signal(24)

        have_cum = Signal()
        with m.If(ack.valid & ack.ready & ~(ack.payload.flags & wire.SACK_PROBE_REPLY).any()):
            c = ack.payload.cum_psn
            m.d.sync += [cum.eq(c), have_cum.eq(1)]
            m.d.comb += Assert(~serial_lt(c, Mux(have_cum, cum, (start - 1)[:24])))

        # Completions: in order (each beyond the previous), and a completion of PSN c comes
        # only after every PSN from start to c was passed on for placement (the watched w
        # stands for any).
        cpl = dut.cpl
        last_c = Signal(24)
        have_c = Signal()
        with m.If(cpl.valid & cpl.ready):
            c = cpl.payload.psn
            m.d.sync += [last_c.eq(c), have_c.eq(1)]
            with m.If(have_c):
                m.d.comb += Assert(serial_lt(last_c, c))
            # (handed to placement, or waiting on ``place`` as its output: placement holds
            # completions back while a PlaceCmd is offered, so either comes first)
            with m.If((w - start)[:24] <= (c - start)[:24]):      # w in [start, c]
                m.d.comb += Assert((placed_w != 0) | (dut.place.valid & dut.place.payload.place
                                                      & (level != 0) & (head == w)))
        return m


@pytest.mark.formal
def test_sack_tracker_bounded_14():
    """SACK tracker (qps=1, window=64): every property above for 14 clocks from reset."""
    require_proved(run_formal(SackProof(), "sack_tracker", mode="bmc", depth=DEPTH))


@pytest.mark.formal
def test_sack_tracker_mutant_fails():
    """Teeth: the bitmap bit ignored (a duplicate counts as new) places a PSN twice."""
    mod = mutant(sack_tracker, "is_new.eq(new_w & ~bit_cur),", "is_new.eq(new_w),")
    require_failed(run_formal(SackProof(mod.SackTracker), "sack_tracker_mutant", mode="bmc",
                              depth=DEPTH))
