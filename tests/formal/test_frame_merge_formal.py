"""Formal proof of FrameMerge (rtl/frame_merge.py): every frame (header frame + its payload
frame) leaves whole, in order, on the plane its header names, with exactly
``ceil((header + payload + pad + 4 ICRC bytes) / 8)`` beats and ``tlast`` on the last one
only (no beat lost or duplicated, frames never interleaved on the outputs); a frame for a
plane >= ``ports`` is counted in ``drop_count`` and sent nowhere; never more frames out
than in, at most 4 in the block; each output holds tvalid and its beat until tready, at
most one output's tvalid high; tvalid never waits for tready (with every tready low since
reset, the first frame's first beat is on its output 3 clocks after it was accepted).

Small parameters: ``ports=2`` (the data width is fixed at 64 bits; the CRC datapath is in
the model but no property reads the ICRC's value).  The header's minimum length (>= 90
bytes, >= 12 beats) is NOT assumed, so short frames (a 2- or 6-byte header, 1..n payload
bytes) reach the outputs within the bound: the block's flow control (feed state, carry,
flush, ICRC spill beat, skid register) does not depend on the header's length, only its
ICRC value does.  Bounded at 10 clocks from reset (a few whole frames, with spill and
flush beats, any backpressure, frames for both planes and for a dropped plane: two whole
frames out and a dropped frame are reachable in the bound); 12 clocks pass too but take
~8 minutes.  k-induction does not close (k=4: the reference ring is not tied to the
block's pipeline registers).
"""

import pytest
from amaranth.hdl import Array, Assert, Assume, Cat, Elaboratable, Module, Mux, Signal

from mrcnic.rtl import frame_merge
from .formal import drive_inputs, mutant, past, require_failed, require_proved, run_formal, stream_rule

DEPTH = 10
PORTS = 2
RING = 8         # reference ring of the frames taken (the block holds at most 4)
CAPACITY = 4     # frames taken but not yet out: one per stage (R1, RC, R2, skid S)


def _popcount(v):
    return sum(v[i] for i in range(len(v)))


class FrameMergeProof(Elaboratable):
    """FrameMerge under its input contract, with a reference ring of the frames taken."""

    def __init__(self, cls=frame_merge.FrameMerge, ports=PORTS):
        self.dut = cls(ports=ports)
        self.ports = ports

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        drive_inputs(m, dut)
        hdr, pay = dut.s_hdr, dut.s_payload
        outs = [getattr(dut, f"m_axis_p{p}") for p in range(self.ports)]

        # Contract (AXI4-Stream, ARM IHI 0051A 2.2.1): both sources hold tvalid and their
        # beat until tready.
        stream_rule(m, hdr.tvalid, hdr.tready, [hdr.tdata, hdr.tkeep, hdr.tlast, hdr.tuser],
                    check=Assume)
        stream_rule(m, pay.tvalid, pay.tready, [pay.tdata, pay.tkeep, pay.tlast], check=Assume)
        # Contract (FrameMerge docstring): a header is 2 or 6 mod 8 bytes long: tkeep 0xFF
        # on every beat but the last, 0x03 or 0x3F on the last.
        with m.If(hdr.tvalid):
            m.d.comb += Assume(Mux(hdr.tlast, (hdr.tkeep == 0x03) | (hdr.tkeep == 0x3F),
                                   hdr.tkeep == 0xFF))
        # Contract: payload bytes from lane 0, tkeep contiguous, partial only on tlast.
        with m.If(pay.tvalid):
            m.d.comb += Assume(Cat(*(pay.tkeep == (1 << k) - 1 for k in range(1, 9))).any())
            with m.If(~pay.tlast):
                m.d.comb += Assume(pay.tkeep == 0xFF)

        # Obligation: each output holds tvalid and its beat until tready; one tvalid at most.
        for o in outs:
            stream_rule(m, o.tvalid, o.tready, [o.tdata, o.tkeep, o.tlast])
        m.d.comb += Assert(_popcount(Cat(*(o.tvalid for o in outs))) <= 1)

        # ---- the frames taken: plane, header beats / k, payload beats / bytes ---------------
        h_fire = hdr.tvalid & hdr.tready
        p_fire = pay.tvalid & pay.tready
        h_first = Signal(init=1)            # the next header beat starts a frame
        h_beats = Signal(6)                 # header beats of the current frame so far
        port_q = Signal(3)
        port_now = Mux(h_first, hdr.tuser[64:67], port_q)
        fh_beats, fh_k6, fh_port = Signal(6), Signal(), Signal(3)   # last whole header
        in_frame = Signal()                 # a frame's header started, its payload not ended
        p_beats = Signal(6)                 # payload beats of the current frame so far
        with m.If(h_fire):
            m.d.sync += [h_first.eq(hdr.tlast), port_q.eq(port_now), in_frame.eq(1),
                         h_beats.eq(Mux(hdr.tlast, 0, h_beats + 1))]
            with m.If(hdr.tlast):
                m.d.sync += [fh_beats.eq(h_beats + 1), fh_k6.eq(hdr.tkeep[2]), fh_port.eq(port_now)]
        with m.If(p_fire):
            m.d.sync += p_beats.eq(Mux(pay.tlast, 0, p_beats + 1))
            # a payload beat only inside a frame whose header is whole or ends now
            m.d.comb += Assert((in_frame | h_fire) & (h_first | (h_fire & hdr.tlast)))
        # the header values of the frame whose payload ends now (its header may end now too)
        hl_now = h_fire & hdr.tlast
        f_hbeats = Mux(hl_now, h_beats + 1, fh_beats)
        f_k6 = Mux(hl_now, hdr.tkeep[2], fh_k6)
        f_port = Mux(hl_now, port_now, fh_port)
        hbytes = Signal(10)
        pbytes = Signal(10)
        total = Signal(10)
        m.d.comb += [
            hbytes.eq(((f_hbeats - 1) << 3) + Mux(f_k6, 6, 2)),
            pbytes.eq((p_beats << 3) + _popcount(pay.tkeep)),
            total.eq(hbytes + pbytes + ((-pbytes) & 3) + 4),
        ]
        r_port = Array(Signal(3, name=f"r_port{k}") for k in range(RING))
        r_beats = Array(Signal(7, name=f"r_beats{k}") for k in range(RING))
        n_in = Signal(6)                    # frames taken (payload tlast accepted)
        push = p_fire & pay.tlast
        with m.If(push):
            m.d.sync += [r_port[n_in[:3]].eq(f_port), r_beats[n_in[:3]].eq((total + 7) >> 3),
                         n_in.eq(n_in + 1), in_frame.eq(0)]

        # ---- the frames out: whole, in order, on their plane, exact beat count --------------
        n_out = Signal(6)                   # frames sent (tlast handshakes on any output)
        head = Signal(6)                    # frames finished: sent + dropped
        m.d.comb += head.eq(n_out + dut.drop_count[:6])
        # never more frames out than in; at most CAPACITY in the block
        m.d.comb += [Assert(head <= n_in), Assert(n_in - head <= CAPACITY)]
        ob = Signal(7)                      # beats of the head frame sent so far
        h_port, h_nbeats = r_port[head[:3]], r_beats[head[:3]]
        pushed = head != n_in               # the head frame's payload has ended
        for p, o in enumerate(outs):
            with m.If(o.tvalid & o.tready):
                m.d.sync += ob.eq(Mux(o.tlast, 0, ob + 1))
                with m.If(o.tlast):
                    m.d.sync += n_out.eq(n_out + 1)
                with m.If(pushed):
                    m.d.comb += [Assert(h_port == p), Assert(ob < h_nbeats),
                                 Assert(o.tlast == (ob == h_nbeats - 1))]
                with m.Else():
                    # the frame still coming in: its plane, and not its last beat yet
                    m.d.comb += [Assert(in_frame & (port_q == p)), Assert(~o.tlast)]
        # a dropped frame: a whole frame taken, for a plane >= ports, none of its beats sent
        dropped = dut.drop_count[:6] != past(m, dut.drop_count[:6])
        with m.If(dropped):
            prev = (head - 1)[:6]
            m.d.comb += [Assert(prev < n_in), Assert(r_port[prev[:3]] >= self.ports),
                         Assert(past(m, ob) == 0)]

        # Frames never interleaved: after a beat without tlast, the next beat sent is on the
        # same output.
        mid, mid_port = Signal(), Signal(3)
        for p, o in enumerate(outs):
            with m.If(o.tvalid & o.tready):
                m.d.sync += [mid.eq(~o.tlast), mid_port.eq(p)]
                with m.If(mid):
                    m.d.comb += Assert(mid_port == p)

        # tvalid never waits for tready: with every tready low since reset, the first frame's
        # first header beat (for a plane < ports) is on its output 3 clocks after it was taken.
        never_ready = Signal(init=1)
        with m.If(Cat(*(o.tready for o in outs)).any()):
            m.d.sync += never_ready.eq(0)
        first_good = Signal()
        with m.If(h_fire & h_first & (n_in == 0) & ~in_frame & (port_now < self.ports)):
            m.d.sync += first_good.eq(1)
        m.d.comb += Assert(~(past(m, past(m, first_good)) & never_ready) |
                           Cat(*(o.tvalid for o in outs)).any())
        return m


@pytest.mark.formal
def test_frame_merge_bounded_10():
    """FrameMerge, 2 planes: every property above for 10 clocks from reset."""
    require_proved(run_formal(FrameMergeProof(), "frame_merge", mode="bmc", depth=DEPTH))


@pytest.mark.formal
def test_frame_merge_mutant_fails():
    """Teeth: the output register R2 reloaded while it and the skid register are both full
    (a waiting beat overwritten: lost)."""
    mod = mutant(frame_merge, "m.d.comb += r2_adv.eq(~(s_valid & r2_valid))",
                 "m.d.comb += r2_adv.eq(1)")
    require_failed(run_formal(FrameMergeProof(mod.FrameMerge), "frame_merge_mutant",
                              mode="bmc", depth=DEPTH))
