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
bytes) are covered too: the block's flow control (feed state, carry, flush, ICRC spill
beat, skid register) does not depend on the header's length, only its ICRC value does.

Unbounded, by k-induction (k=7; k=2 closes, 7 is what the mutant's base case needs).  The
contract sets no maximum header length, so the wrapper's beat counts are kept modulo
2**BW (1024 beats, byte counts modulo 8 KiB): the beat count and ``tlast`` position are
exact for every frame of fewer than 1024 beats (a 4096-byte payload with any header up to
~3.9 KiB), and hold modulo 1024 beats beyond.  Frame counters are modulo 64 ("at most 4
in the block" is ``(taken - finished) mod 64 <= 4``).  The stated properties alone are not
inductive (induction k=4 failed: the reference ring was not tied to the block's pipeline);
the wrapper also asserts, as auxiliary invariants proved by the same induction
(:meth:`FrameMergeProof._aux`): the flow-control flip-flops (``go``, ``go_hdr``,
``go_pay``, ``o_oh``, ``o_tv``) are their documented functions; the feed state agrees with
the wrapper's frame state; every beat in the pipeline (S, R2, the ICRC spill beat, RC,
R1, a pending FLUSH beat) belongs in order to a frame of the ring or to the frame coming
in, is on that frame's plane, and each frame's beats there plus those already gone are
its beat count; and the first frame's first beat is 1, 2, 3+ stages in while every tready
has been low.  The bounded run of 10 clocks this replaces took 58-66 s.
"""

import pytest
from amaranth.hdl import Array, Assert, Assume, Cat, Const, Elaboratable, Module, Mux, Signal

from mrcnic.rtl import frame_merge
from .formal import Internals, drive_inputs, mutant, past, require_failed, require_proved, run_formal, stream_rule

K = 7           # induction length (closes at 2; the mutant's base case needs 7)
BW = 10          # beat counters' width (byte counters: BW + 3)
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

    def _aux(self, m, ins, v):
        """Auxiliary invariants (for the induction): the block's flow-control flip-flops are
        their documented functions; every beat in its pipeline (skid S, output register R2,
        the ICRC spill beat, RC, R1, a pending FLUSH beat) belongs, in order, to a frame of
        the wrapper's ring or to the frame coming in, on that frame's plane, and the beats
        of each frame there (plus those already gone) are exactly its beat count."""
        n = self.ports
        sig = ins.signal
        s_valid, r2_valid, spill = sig("s_valid"), sig("r2_valid"), sig("spill")
        s_last, r2_last, s_oh, r2_oh = sig("s_last"), sig("r2_last"), sig("s_oh"), sig("r2_oh")
        o_oh, o_tv = sig("o_oh"), sig("o_tv")
        go, go_hdr, go_pay, feed = sig("go"), sig("go_hdr"), sig("go_pay"), sig("feed")
        r1_valid, r1_end, r1_e6, r1_port = sig("r1_valid"), sig("r1_end"), sig("r1_e6"), sig("r1_port")
        rc_valid, rc_end, rc_e6, rc_port = sig("rc_valid"), sig("rc_end"), sig("rc_e6"), sig("rc_port")
        flush_e6, d_port_q, d_hdr_first, d_k6 = sig("flush_e6"), sig("port_q"), sig("hdr_first"), sig("k6")
        sel_ready = sig("sel_ready")
        HDR, PAY, FLUSH = (1 << x.value for x in frame_merge._Feed)
        in_hdr, in_pay, in_flush = feed == HDR, feed == PAY, feed == FLUSH

        def onehot(port):
            return Cat(*(port == q for q in range(n)))

        # flow control
        m.d.comb += [
            Assert(in_hdr | in_pay | in_flush),
            Assert(go == (~(s_valid & r2_valid) & ~spill)),
            Assert(go_hdr == (go & in_hdr)), Assert(go_pay == (go & in_pay)),
            Assert(o_oh == Mux(s_valid, s_oh, r2_oh)),
            Assert(o_tv == Mux(s_valid | r2_valid, o_oh, 0)),
            Assert(_popcount(s_oh) <= 1), Assert(_popcount(r2_oh) <= 1),
        ]
        with m.If(spill):
            m.d.comb += Assert(r2_valid & ~r2_last)
        # the input side against the wrapper's frame state
        h_first, in_frame = v["h_first"], v["in_frame"]
        m.d.comb += [Assert(d_hdr_first == h_first), Assert(in_pay == (in_frame & h_first))]
        with m.If(in_flush):
            m.d.comb += Assert(~in_frame)
        with m.If(in_frame):
            m.d.comb += Assert(d_port_q == v["port_q"])
        with m.If(in_pay):
            m.d.comb += [Assert(d_k6 == v["fh_k6"]), Assert(v["fh_port"] == v["port_q"])]
        with m.If(~h_first):
            m.d.comb += Assert(v["p_beats"] == 0)
        with m.Else():
            m.d.comb += Assert(v["h_beats"] == 0)
        with m.If(~in_frame):
            m.d.comb += [Assert(h_first), Assert(v["p_beats"] == 0)]

        # the pipeline's beats, oldest first: (valid, beats, ends a frame, plane check)
        items = [
            (s_valid, 1, s_last, lambda port: s_oh == onehot(port)),
            (r2_valid, 1, r2_last, lambda port: r2_oh == onehot(port)),
            (spill, 1, 1, lambda port: r2_oh == onehot(port)),
            (rc_valid, 1 + (rc_end & rc_e6), rc_end, lambda port: rc_port == port),
            (r1_valid, 1 + (r1_end & r1_e6), r1_end, lambda port: r1_port == port),
            (in_flush, 1 + flush_e6, 1, lambda port: d_port_q == port),
        ]
        head, n_in, inside = v["head"], v["n_in"], v["inside"]
        r_port, r_beats = v["r_port"], v["r_beats"]
        off = Const(0, 3)
        offs = []
        for k, (valid, beats, end, _) in enumerate(items):
            o = Signal(3, name=f"item_off{k}")
            m.d.comb += o.eq(off)
            offs.append(o)
            off = (off + (valid & end))[:3]
        ends = Signal(3, name="pipe_ends")
        m.d.comb += ends.eq(off)
        m.d.comb += Assert(inside == ends)
        # the incoming frame's beats loaded so far (a header beat each but the last, which
        # comes with payload beat 0, then a payload beat each)
        loads = Signal(BW)
        m.d.comb += loads.eq(Mux(h_first, v["fh_beats"] - 1 + v["p_beats"], v["h_beats"]))
        # beats of the head frame that left the output stage (sent, or drained when dropped)
        left = Signal(BW)
        o_valid = s_valid | r2_valid
        with m.If(o_valid & sel_ready):
            m.d.sync += left.eq(Mux(Mux(s_valid, s_last, r2_last), 0, left + 1))
        for j in range(CAPACITY + 1):
            cnt = Signal(BW, name=f"pipe_beats{j}")
            m.d.comb += cnt.eq(sum(Mux(valid & (offs[k] == j), beats, 0)
                                   for k, (valid, beats, _, _) in enumerate(items)))
            gone = left if j == 0 else 0
            with m.If(j < ends):
                m.d.comb += Assert((cnt + gone)[:BW] == r_beats[(head + j)[:3]])
            with m.Elif(j == ends):
                with m.If(in_frame):
                    m.d.comb += Assert((cnt + gone)[:BW] == loads)
                with m.Else():      # no frame coming in: nothing after the last frame's end
                    m.d.comb += [Assert(cnt == 0), Assert(gone == 0)]
            for k, (valid, _, _, plane) in enumerate(items):
                with m.If(valid & (offs[k] == j)):
                    m.d.comb += Assert(plane(Mux(j < ends, r_port[(head + j)[:3]], v["port_q"])))
        hp = Mux(ends != 0, r_port[head[:3]], v["port_q"])
        with m.If(hp < n):
            m.d.comb += Assert(v["ob"] == left)
        with m.Else():
            m.d.comb += Assert(v["ob"] == 0)
        with m.If(v["mid"]):
            m.d.comb += Assert((v["mid_port"] == hp) & (hp < n) & ((ends != 0) | in_frame))
        with m.Else():
            m.d.comb += Assert(v["ob"] == 0)
        # the first frame, with every tready low since reset
        no_frame_yet, never_ready = v["no_frame_yet"], v["never_ready"]
        first_good, fg2, fg3, fg_port = v["first_good"], v["fg2"], v["fg3"], v["fg_port"]
        with m.If(no_frame_yet):
            m.d.comb += [Assert(~s_valid & ~r2_valid & ~spill & ~rc_valid & ~r1_valid),
                         Assert(in_hdr & ~in_frame & (inside == 0) & (left == 0)),
                         Assert(~first_good)]
        m.d.comb += [Assert(~fg3 | fg2), Assert(~fg2 | first_good)]
        with m.If(never_ready & first_good):
            m.d.comb += Assert(fg_port < n)
            with m.If(~fg2):
                m.d.comb += Assert(r1_valid & (r1_port == fg_port) & ~rc_valid & ~r2_valid &
                                   ~s_valid & ~spill)
            with m.Elif(~fg3):
                m.d.comb += Assert(rc_valid & (rc_port == fg_port) & ~r2_valid & ~s_valid &
                                   ~spill)
            with m.Else():
                m.d.comb += Assert(Mux(s_valid, s_oh, Mux(r2_valid, r2_oh, 0)) == onehot(fg_port))

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        ins = Internals(dut, platform)
        m.submodules.dut = ins.frag
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
        # (beat counts modulo 2**BW, byte counts modulo 2**(BW+3): exact for frames of fewer
        # than 2**BW beats; the header's length has no maximum in the contract)
        h_fire = hdr.tvalid & hdr.tready
        p_fire = pay.tvalid & pay.tready
        h_first = Signal(init=1)            # the next header beat starts a frame
        h_beats = Signal(BW)                # header beats of the current frame so far
        port_q = Signal(3)
        port_now = Mux(h_first, hdr.tuser[64:67], port_q)
        fh_beats, fh_k6, fh_port = Signal(BW), Signal(), Signal(3)  # last whole header
        in_frame = Signal()                 # a frame's header started, its payload not ended
        p_beats = Signal(BW)                # payload beats of the current frame so far
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
        f_hbeats = Mux(hl_now, h_beats + 1, fh_beats)[:BW]
        f_k6 = Mux(hl_now, hdr.tkeep[2], fh_k6)
        f_port = Mux(hl_now, port_now, fh_port)
        hbytes = Signal(BW + 3)
        pbytes = Signal(BW + 3)
        total = Signal(BW + 3)
        m.d.comb += [
            hbytes.eq(((f_hbeats - 1) << 3) + Mux(f_k6, 6, 2)),
            pbytes.eq((p_beats << 3) + _popcount(pay.tkeep)),
            total.eq(hbytes + pbytes + ((-pbytes) & 3) + 4),
        ]
        r_port = Array(Signal(3, name=f"r_port{k}") for k in range(RING))
        r_beats = Array(Signal(BW, name=f"r_beats{k}") for k in range(RING))
        n_in = Signal(6)                    # frames taken (payload tlast accepted), mod 64
        push = p_fire & pay.tlast
        with m.If(push):
            m.d.sync += [r_port[n_in[:3]].eq(f_port), r_beats[n_in[:3]].eq((total + 7) >> 3),
                         n_in.eq(n_in + 1), in_frame.eq(0)]

        # ---- the frames out: whole, in order, on their plane, exact beat count --------------
        n_out = Signal(6)                   # frames sent (tlast handshakes on any output)
        head = Signal(6)                    # frames finished: sent + dropped (mod 64)
        m.d.comb += head.eq(n_out + dut.drop_count[:6])
        inside = Signal(6)                  # frames taken, not finished
        m.d.comb += inside.eq(n_in - head)
        # never more frames out than in; at most CAPACITY in the block
        m.d.comb += Assert(inside <= CAPACITY)
        ob = Signal(BW)                     # beats of the head frame sent so far
        h_port, h_nbeats = r_port[head[:3]], r_beats[head[:3]]
        pushed = head != n_in               # the head frame's payload has ended
        for p, o in enumerate(outs):
            with m.If(o.tvalid & o.tready):
                m.d.sync += ob.eq(Mux(o.tlast, 0, ob + 1))
                with m.If(o.tlast):
                    m.d.sync += n_out.eq(n_out + 1)
                with m.If(pushed):
                    m.d.comb += [Assert(h_port == p),
                                 Assert(o.tlast == (ob == (h_nbeats - 1)[:BW]))]
                with m.Else():
                    # the frame still coming in: its plane, and not its last beat yet
                    m.d.comb += [Assert(in_frame & (port_q == p)), Assert(~o.tlast)]
        # a dropped frame: a whole frame taken, for a plane >= ports, none of its beats sent
        dropped = dut.drop_count[:6] != past(m, dut.drop_count[:6], name="past_drops")
        past_ob = past(m, ob, name="past_ob")       # (outside the If: updated every clock)
        with m.If(dropped):
            prev = (head - 1)[:6]
            m.d.comb += [Assert(((n_in - prev)[:6] != 0) & ((n_in - prev)[:6] <= CAPACITY + 1)),
                         Assert(r_port[prev[:3]] >= self.ports),
                         Assert(past_ob == 0)]

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
        no_frame_yet = Signal(init=1)       # no header beat taken since reset
        with m.If(h_fire):
            m.d.sync += no_frame_yet.eq(0)
        first_good = Signal()
        fg_port = Signal(3)
        with m.If(h_fire & no_frame_yet & (port_now < self.ports)):
            m.d.sync += [first_good.eq(1), fg_port.eq(port_now)]
        fg2 = past(m, first_good)
        fg3 = past(m, fg2)
        m.d.comb += Assert(~(fg3 & never_ready) | Cat(*(o.tvalid for o in outs)).any())

        self._aux(m, ins, locals())
        return m


@pytest.mark.formal
def test_frame_merge_induction():
    """FrameMerge, 2 planes: every property above, unbounded."""
    require_proved(run_formal(FrameMergeProof(), "frame_merge", mode="prove", depth=K))


@pytest.mark.formal
def test_frame_merge_mutant_fails():
    """Teeth: the output register R2 reloaded while it and the skid register are both full
    (a waiting beat overwritten: lost)."""
    mod = mutant(frame_merge, "m.d.comb += r2_adv.eq(~(s_valid & r2_valid))",
                 "m.d.comb += r2_adv.eq(1)")
    require_failed(run_formal(FrameMergeProof(mod.FrameMerge), "frame_merge_mutant",
                              mode="prove", depth=K))
