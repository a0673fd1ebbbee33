"""Formal proof of Placement (rtl/placement.py): every byte strobed on the AXI W channel
lies inside ``[addr, addr + length)`` of an accepted ``PlaceCmd`` with ``place`` = 1, in
command order; nothing is written without one; a completion is taken only after every
earlier command's W beats were sent and every AW burst was answered on B.

The rkey / VA / region checks happen upstream in the RX parser (``RxPacket.addr`` is
already the checked host address); this block's rule is to write exactly where its
command says.  Bounded at 6 clocks from reset (a few commands of any address and length,
with payload frames of any length, shorter or longer than the command).
"""

import pytest
from amaranth.hdl import Array, Assert, Assume, C, Cat, Elaboratable, Module, Mux, Signal

from mrcnic.rtl import placement
from .formal import (drive_inputs, mutant, require_failed, require_proved, run_formal,
                     stream_rule)

DEPTH = 6
RING = 4         # reference ring of accepted commands (the block holds at most 3)


class PlacementProof(Elaboratable):
    """Placement under its input contract, with a reference queue of the accepted commands."""

    def __init__(self, cls=placement.Placement):
        self.dut = cls()

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        drive_inputs(m, dut)
        axi = dut.m_axi
        # Contract: the three input streams hold their payload until taken.
        stream_rule(m, dut.cmd.valid, dut.cmd.ready, dut.cmd.payload.as_value(), check=Assume)
        stream_rule(m, dut.payload.tvalid, dut.payload.tready,
                    [dut.payload.tdata, dut.payload.tkeep, dut.payload.tlast], check=Assume)
        stream_rule(m, dut.cpl_in.valid, dut.cpl_in.ready, dut.cpl_in.payload.as_value(),
                    check=Assume)
        # Contract: place = 1 commands have length 1..4096 (the parser's limits).
        with m.If(dut.cmd.valid & dut.cmd.payload.place):
            m.d.comb += Assume((dut.cmd.payload.length >= 1) & (dut.cmd.payload.length <= 4096))
        # Contract (AXI4 A3.3.1): a subordinate answers a burst on B only after its AW and
        # its last W beat.
        aw_n, wl_n, b_n = Signal(5), Signal(5), Signal(5)
        aw_fire = axi.awvalid & axi.awready
        w_fire = axi.wvalid & axi.wready
        b_fire = axi.bvalid & axi.bready
        m.d.sync += [aw_n.eq(aw_n + aw_fire), wl_n.eq(wl_n + (w_fire & axi.wlast)),
                     b_n.eq(b_n + b_fire)]
        with m.If(axi.bvalid):
            m.d.comb += Assume((aw_n != b_n) & (wl_n != b_n))

        # Reference ring of the accepted place = 1 commands (addr, length), with two
        # read positions: the W channel's head command (and its beat) and the AW channel's
        # (AXI lets either channel run ahead of the other).
        addrs = Array(Signal(32, name=f"q_addr{k}") for k in range(RING))
        lens = Array(Signal(13, name=f"q_len{k}") for k in range(RING))
        n_push, n_w, n_aw = Signal(4), Signal(4), Signal(4)
        c = dut.cmd.payload
        push = dut.cmd.valid & dut.cmd.ready & c.place & (c.length != 0)
        with m.If(push):
            m.d.sync += [addrs[n_push[:2]].eq(c.addr), lens[n_push[:2]].eq(c.length)]
        m.d.sync += n_push.eq(n_push + push)
        m.d.comb += [Assert((n_push - n_w)[:4] <= RING - 1), Assert((n_push - n_aw)[:4] <= RING - 1)]

        def beats(a, length):
            return (a[:3] + length + 7) >> 3

        # W: beat ``beat`` of the head command strobes only the command's bytes: lane b is
        # byte 8 * beat + b of its aligned span, the command's when
        # addr[2:0] <= 8 * beat + b < addr[2:0] + length.
        beat = Signal(10)
        head_a, head_l = addrs[n_w[:2]], lens[n_w[:2]]
        span = head_a[:3] + head_l
        w_end = w_fire & (beat == beats(head_a, head_l) - 1)
        m.d.sync += [beat.eq(Mux(w_end, 0, beat + w_fire)), n_w.eq(n_w + w_end)]
        mask = Signal(8)
        m.d.comb += mask.eq(Cat(*[((beat * 8 + b) >= head_a[:3]) & ((beat * 8 + b) < span)
                                  for b in range(8)]))
        with m.If(axi.wvalid):
            # nothing written without an accepted command, and only its bytes
            m.d.comb += [Assert(n_w != n_push), Assert((axi.wstrb & ~mask) == 0)]
            # wlast only on a command's last beat or at a burst's end (checked with AW below)

        # AW: the bursts of each command, in order, cover exactly its aligned beats (so W
        # beat j goes to the aligned start + 8 j, which the strobe check relies on) and never
        # cross a 4 KiB boundary.
        aw_done = Signal(10)
        a_a, a_l = addrs[n_aw[:2]], lens[n_aw[:2]]
        burst = axi.awlen + 1
        with m.If(aw_fire):
            m.d.comb += [
                Assert(n_aw != n_push),
                Assert(axi.awaddr == (Cat(C(0, 3), a_a[3:]) + (aw_done << 3))[:32]),
                Assert(aw_done + burst <= beats(a_a, a_l)),
                Assert(axi.awaddr[:12] + (burst << 3) <= 4096),
            ]
        aw_end = aw_fire & (aw_done + burst == beats(a_a, a_l))
        m.d.sync += [aw_done.eq(Mux(aw_end, 0, Mux(aw_fire, aw_done + burst, aw_done))),
                     n_aw.eq(n_aw + aw_end)]

        # Completion fence: a completion is taken only when every command accepted before
        # it has sent its W beats and every burst has its B response.
        with m.If(dut.cpl_in.valid & dut.cpl_in.ready):
            m.d.comb += Assert((n_w == n_push) & (n_aw == n_push) & (aw_n == b_n))
        return m


@pytest.mark.formal
def test_placement_bounded_6():
    """Placement: strobes inside the command, in order; the completion fence; 6 clocks."""
    require_proved(run_formal(PlacementProof(), "placement", mode="bmc", depth=DEPTH))


@pytest.mark.formal
def test_placement_mutant_fails():
    """Teeth: the last input beat's lanes not cut at the command's length (a frame longer
    than the command writes past ``addr + length``)."""
    mod = mutant(placement, "cut.eq(Mux(c_ge8, 0xFF, c_tail)),", "cut.eq(0xFF),")
    require_failed(run_formal(PlacementProof(mod.Placement), "placement_mutant", mode="bmc",
                              depth=DEPTH))
