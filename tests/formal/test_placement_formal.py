"""Formal proof of Placement (rtl/placement.py): every byte strobed on the AXI W channel
lies inside ``[addr, addr + length)`` of an accepted ``PlaceCmd`` with ``place`` = 1, in
command order; nothing is written without one; a completion is taken only after every
earlier command's W beats were sent and every AW burst was answered on B.

The rkey / VA / region checks happen upstream in the RX parser (``RxPacket.addr`` is
already the checked host address); this block's rule is to write exactly where its
command says.  Bounded at 6 clocks from reset (a few commands of any address and length,
with payload frames of any length, shorter or longer than the command).

Unbounded, by k-induction (k=K), for every property but the completion fence
(``test_placement_strobes_induction``, ``fence=False``): the wrapper then also asserts, as
auxiliary invariants proved by the same induction (:meth:`PlacementProof._aux`), that
the queued command register matches the ring's newest command; that the executing
command's AW progress (address, beats left, distance to the 2 KiB edge) and W progress
(beats loaded, the W register's beat, ``beat_lo``) match the ring's AW and W positions;
and that its input-side registers (command bytes not yet taken, the lanes ``cut`` lets
through from the next payload beat, the lanes held from the previous one) lie inside the
command's bytes.  The block's constant table (``thermo``) becomes a ROM in Yosys, whose
contents an induction step would start from unconstrained: the proof maps ROMs to logic
(``run_formal(..., rom_logic=True)``).  The fence stays bounded: its induction needs the
bursts issued / answered / W-last counts tied to each command's bursts (not written).
"""

import pytest
from amaranth.hdl import Array, Assert, Assume, C, Cat, Elaboratable, Module, Mux, Signal

from mrcnic.rtl import placement
from mrcnic.rtl.layouts import PlaceCmd
from .formal import (Internals, drive_inputs, mutant, require_failed, require_proved, run_formal,
                     stream_rule)

DEPTH = 6
K = 3            # induction length of the strobe / AW properties (closes at 2; the mutant: 3)
RING = 4         # reference ring of accepted commands (the block holds at most 3)


class PlacementProof(Elaboratable):
    """Placement under its input contract, with a reference queue of the accepted commands."""

    def __init__(self, cls=placement.Placement, *, fence=True, aux=False):
        self.dut = cls()
        self.fence, self.aux = fence, aux

    def _aux(self, m, ins, v):
        """Auxiliary invariants (for the induction): the queued command register, the
        executing command's AW and W progress and its input-lane registers against the
        reference ring."""
        sig = ins.signal
        busy, shift, aw_lo, aw_hi = sig("busy"), sig("shift"), sig("aw_lo"), sig("aw_hi")
        aw_left, to_b, aw_dn = sig("aw_left"), sig("to_boundary"), sig("aw_done")
        q_valid, c, placing_cmd = sig("q_valid"), PlaceCmd(sig("c")), sig("placing_cmd")
        total_beats, c_gt8, c_ge8, c_tail = (sig("total_beats"), sig("c_gt8"), sig("c_ge8"),
                                             sig("c_tail"))
        in_done, beats_left, beat_lo = sig("in_done"), sig("beats_left"), sig("beat_lo")
        in_left, in_nz, in_gt8, placing = sig("in_left"), sig("in_nz"), sig("in_gt8"), sig("placing")
        hold_keep, cut, tail, w_valid = sig("hold_keep"), sig("cut"), sig("tail"), sig("w_valid")
        addrs, lens, n_push, n_w, n_aw = v["addrs"], v["lens"], v["n_push"], v["n_w"], v["n_aw"]
        beat, aw_done_w, beats = v["beat"], v["aw_done"], v["beats"]
        class _Thermo:              # lanes below k: (1 << k) - 1, k = 0..7
            def __getitem__(self, k):
                return ((C(1, 8) << k) - 1)[:8]
        thermo = _Thermo()
        cl = c.length
        # the queued command
        q_ring = q_valid & placing_cmd
        with m.If(q_valid):
            m.d.comb += [Assert(placing_cmd == (c.place & (cl != 0))),
                         Assert(c_gt8 == (cl > 8)), Assert(c_ge8 == (cl >= 8)),
                         Assert(c_tail == thermo[cl[:3]])]
            with m.If(placing_cmd):
                last = (n_push - 1)[:2]
                m.d.comb += [Assert(c.addr == addrs[last]), Assert(cl == lens[last]),
                             Assert(cl <= 4096), Assert(total_beats == beats(c.addr, cl))]
        # every command in the ring (not yet through W): length 1..4096
        for k in range(RING):
            with m.If((C(k, 2) - n_w[:2])[:2] < (n_push - n_w)[:4]):
                m.d.comb += Assert((lens[k] >= 1) & (lens[k] <= 4096))
        # the executing (or last executed) command X: the last one pushed before the queued
        x = Signal(4, name="x_cmd")
        m.d.comb += x.eq(n_push - 1 - q_ring)
        ax, lx = addrs[x[:2]], lens[x[:2]]
        totx = Signal(10, name="x_beats")
        m.d.comb += totx.eq(beats(ax, lx))
        m.d.comb += Assert(~placing | busy)
        # AW: the executing command's bursts still to announce
        with m.If(busy & ~aw_dn):
            m.d.comb += [Assert(n_aw == x),
                         Assert(Cat(C(0, 3), aw_lo, aw_hi) ==
                                (Cat(C(0, 3), ax[3:]) + (aw_done_w << 3))[:32]),
                         Assert(aw_left + aw_done_w == totx), Assert(aw_left != 0),
                         Assert(to_b == 256 - aw_lo), Assert((lx >= 1) & (lx <= 4096))]
        with m.Else():
            m.d.comb += [Assert(n_aw == (n_push - q_ring)[:4]), Assert(aw_done_w == 0)]
        # W: beats loaded into the W register (jn) and sent (beat)
        jn = Signal(10, name="x_loaded")
        m.d.comb += jn.eq(totx - beats_left)
        prev = (x - 1)[:4]
        with m.If(busy & placing):
            m.d.comb += [Assert((beats_left != 0) & (beats_left <= totx)),
                         Assert((lx >= 1) & (lx <= 4096)),
                         Assert(shift == ax[:3]), Assert(beat_lo == (ax[3:11] + jn)[:8])]
            with m.If(w_valid & (n_w != x)):
                m.d.comb += [Assert(n_w == prev),
                             Assert(beat == beats(addrs[prev[:2]], lens[prev[:2]]) - 1),
                             Assert(jn == 0)]
            with m.Else():
                m.d.comb += [Assert(n_w == x), Assert(beat + w_valid == jn)]
            # the input side: bytes of the command not yet taken, the next beat's lanes
            with m.If(~in_done):
                m.d.comb += Assert(in_left == Mux(lx > (jn << 3), lx - (jn << 3), 0))
            m.d.comb += [Assert(in_nz == (in_left != 0)), Assert(in_gt8 == (in_left > 8)),
                         Assert(tail == thermo[lx[:3]])]
            with m.If(in_left != 0):
                m.d.comb += Assert(cut == Mux(in_left >= 8, 0xFF, thermo[in_left[:3]]))
            for lane in range(8):
                with m.If(hold_keep[lane]):
                    m.d.comb += Assert((jn != 0) & ((((jn - 1) << 3) + lane) < lx))
        with m.Elif(w_valid):
            m.d.comb += [Assert(n_w == x), Assert(beat == totx - 1)]
        with m.Else():
            m.d.comb += [Assert(n_w == (n_push - q_ring)[:4]), Assert(beat == 0)]

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        ins = Internals(dut, platform)
        m.submodules.dut = ins.frag
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
        if self.fence:
            with m.If(dut.cpl_in.valid & dut.cpl_in.ready):
                m.d.comb += Assert((n_w == n_push) & (n_aw == n_push) & (aw_n == b_n))
        if self.aux:
            self._aux(m, ins, locals())
        return m


@pytest.mark.formal
def test_placement_bounded_6():
    """Placement: strobes inside the command, in order; the completion fence; 6 clocks."""
    require_proved(run_formal(PlacementProof(), "placement", mode="bmc", depth=DEPTH))


@pytest.mark.formal
def test_placement_strobes_induction():
    """Placement: strobes inside the command, in order; AW bursts; unbounded (no fence)."""
    require_proved(run_formal(PlacementProof(fence=False, aux=True), "placement_induction",
                              mode="prove", depth=K, rom_logic=True, timeout=1200))


@pytest.mark.formal
def test_placement_induction_mutant_fails():
    """Teeth of the induction: the same mutant as below fails its base case."""
    mod = mutant(placement, "cut.eq(Mux(c_ge8, 0xFF, c_tail)),", "cut.eq(0xFF),")
    require_failed(run_formal(PlacementProof(mod.Placement, fence=False, aux=True),
                              "placement_induction_mutant", mode="prove", depth=K,
                              rom_logic=True))


@pytest.mark.formal
def test_placement_mutant_fails():
    """Teeth: the last input beat's lanes not cut at the command's length (a frame longer
    than the command writes past ``addr + length``)."""
    mod = mutant(placement, "cut.eq(Mux(c_ge8, 0xFF, c_tail)),", "cut.eq(0xFF),")
    require_failed(run_formal(PlacementProof(mod.Placement), "placement_mutant", mode="bmc",
                              depth=DEPTH))
