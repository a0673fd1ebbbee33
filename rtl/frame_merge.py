"""Transmit frame merger: header + realigned payload + pad + ICRC, routed to one plane.

The last block of the transmit pipeline (docs/architecture.md): HeaderGen's
header beats (with their ICRC view) and the segmenter's payload beats become
one RoCEv2 frame, sent on the AXI-Stream output of the frame's plane.

Sources: IBTA RoCEv2 annex A17.3.3 (ICRC: CRC-32 over the masked frame from
the pseudo LRH to the end of the pad, appended least significant byte first),
IBTA Vol. 1 9.2 (BTH PadCnt: payload padded to a multiple of 4 bytes with
zeros), MRC (one output link per plane).
"""

import zlib

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from mrcnic import wire
from mrcnic import wire_format as wf
from .axis import AxiStreamSignature
from .crc import CRC32_INIT, crc32_final, crc32_update
from .params import NicParams, check_ports, param

__all__ = ["FrameMerge"]


class _Feed(enum.Enum, shape=2):
    HDR = 0     #: passing header beats; the header's last beat merges with payload beat 0
    PAY = 1     #: carry (header_len mod 8 bytes) + the next payload beat
    FLUSH = 2   #: the carry left after the last payload beat (no input consumed)


def _crc_state(nbytes):
    """CRC register (as :mod:`mrcnic.rtl.crc` keeps it) after ``nbytes`` bytes of 0xFF."""
    final = zlib.crc32(b"\xff" * nbytes) ^ 0xFFFFFFFF
    return int(f"{final:032b}"[::-1], 2)


# Frame geometry (mrcnic.wire_format) on 64-bit beats.  The realignment and ICRC
# datapath below is written for 8-byte beats; the asserts hold what it relies on.
_WIDTH = 64                                     # data width, bits
_LANES = wf.beat_bytes(_WIDTH)                  # byte lanes per beat
_DATA = [wf.layout("data", n, imm) for n in range(1, wire.MAX_USIDS // wire.USIDS_PER_CARRIER + 1)
         for imm in (False, True)]              # every data header: 0..4 SRH segments, ImmDt
# A header is 2 or 6 mod 8 bytes (its last beat's tkeep is 0x03 or 0x3F: k = 2 or 6).
assert {lay.header_bytes % _LANES for lay in _DATA} == {2, 6}
# The ICRC region runs from frame byte 6 to the end of the pad: frame bytes 6 up to the
# end of the IPv6 header (which the IPv6 Payload Length does not count), less the ICRC
# (which it does), plus the Payload Length: 44 + Payload Length bytes.
_PLEN = _DATA[0].field("ipv6", "plen")          # IPv6 Payload Length: frame bytes 18..19
assert all(lay.field("ipv6", "plen") == _PLEN for lay in _DATA)
_REGION_BASE = (_DATA[0].offset("ipv6") + wf.IPV6.length
                - wf.ICRC_FIRST_BYTE - wf.ICRC.length)                  # 44
# The Payload Length is 0 or 4 mod 8 (frames are 2 or 6 mod 8), so the region is
# 44 + 0 or 4 mod 8 long; with 44 = 4 mod 8 the region is 4 mod 8 (CRC chunks aligned to
# its end start at lane 2) when Payload Length bit 2 is 0, else 0 mod 8 (chunks at lane 6).
_AL_BIT = 2                                     # the Payload Length bit that tells them apart
assert _REGION_BASE % _LANES == 4 and 1 << _AL_BIT == 4
_AL2_LANE = (wf.ICRC_FIRST_BYTE + _REGION_BASE) % _LANES               # 2
_AL6_LANE = (wf.ICRC_FIRST_BYTE + _REGION_BASE + 4) % _LANES           # 6
assert (_AL2_LANE, _AL6_LANE) == (2, 6)
# The beat carrying the Payload Length (2) and its tdata bit holding bit 2 (lane 3 bit 2).
(_PLEN_BEAT,) = {pc.beat for pc in _PLEN.pieces(_WIDTH)}
(_AL_TBIT,) = [pc.lo + _AL_BIT - pc.value_lo for pc in _PLEN.pieces(_WIDTH)
               if pc.value_lo <= _AL_BIT < pc.value_lo + pc.hi - pc.lo]
assert _PLEN_BEAT < 3                           # ``n1`` (saturating at 3) counts up to it
# ... and it is a header beat, not the last (a header has >= 12 beats).
assert min(wf.beats(lay.header_bytes, _WIDTH) for lay in _DATA) > _PLEN_BEAT + 1
# The CRC restarts with the chunk that ends in that beat; it starts in the beat before
# (``r1_b1``) at lane 2 or 6, after 4 or 8 region bytes, all pseudo-LRH ones (view bytes
# 6..13): the CRC state there is a constant.
_C4_BYTES, _C8_BYTES = [_LANES * (_PLEN_BEAT - 1) + lane - wf.ICRC_FIRST_BYTE
                        for lane in (_AL2_LANE, _AL6_LANE)]           # 4, 8
assert 0 < _C4_BYTES < _C8_BYTES <= wf.LRH_BYTES
_C4, _C8 = _crc_state(_C4_BYTES), _crc_state(_C8_BYTES)   # ICRC region start: 4 / 8 LRH bytes


def _lanes(keep):
    """64-bit byte mask from an 8-bit ``tkeep``."""
    return Cat(*[keep[i].replicate(8) for i in range(8)])


class FrameMerge(wiring.Component):
    """Merge header and payload beats into frames with pad and ICRC, one output per plane.

    Output frame = header bytes || payload bytes (shifted to follow the
    header's last byte) || ``(-payload_len) & 3`` zero pad bytes || 4-byte
    ICRC.  The ICRC is ``zlib.crc32`` of the ICRC view of frame bytes 6 up to
    the end of the pad (header bytes as given on ``s_hdr.tuser[0:64]``,
    payload bytes as themselves, pad as zeros) and goes on the wire least
    significant byte first (``mrcnic.wire.icrc_bytes``).

    Parameters
    ----------
    ports : int
        Number of planes (output ports), 1..8.
    params : NicParams
        The NIC's parameter set (:class:`~mrcnic.rtl.params.NicParams`): ``ports`` come from
        it (a keyword given as well must agree).  Standalone: leave it out; the keywords are
        checked by the same rules (:mod:`mrcnic.rtl.params`).

    Attributes
    ----------
    s_hdr : In(AxiStreamSignature(64, user_width=67))
        Header beats of one frame (Ethernet .. RETH [.. ImmDt]), tlast on the
        last one.  The header is >= 90 bytes and its length is 2 or 6 mod 8:
        every beat has tkeep 0xFF except the last, which has tkeep 0x03 or
        0x3F (only ``tkeep[2]`` is looked at).  ``tuser[0:64]`` is the ICRC
        view of the same byte lanes (bytes 6..13 0xFF -- the CRC takes its
        first 4 or 8 region bytes as that constant --, masked fields ones, DA / Segments
        Left at their arrival values); ``tuser[64:67]`` is the
        output port (plane), taken from the frame's first header beat.  The
        view of the last header beat is not read: its bytes (the end of the
        RETH or the ImmDt) are never masked, so their view is their data.
    s_payload : In(AxiStreamSignature(64))
        The frame's payload, 1..4096 bytes from lane 0, tkeep contiguous and
        partial only on the tlast beat; exactly one payload frame per header
        frame, in the same order.  Lanes outside tkeep are ignored (zeroed).
    m_axis_p0 .. m_axis_p{ports-1} : Out(AxiStreamSignature(64))
        One output per plane; a frame appears whole, contiguously, on the
        port named by its header.  All ports share tdata/tkeep/tlast; only
        the selected port sees tvalid.  tkeep is 0xFF except on the last
        beat (0x03 or 0x3F: a frame is 2 or 6 mod 8 bytes long).
    drop_count : Out(32)
        Frames dropped because their port was >= ``ports`` (bad input; such
        a frame is consumed and sent nowhere, so it never blocks the merger).
        Wraps at 2**32.

    Latency and throughput
    ----------------------
    Three pipeline registers: a beat accepted on an input is on the output
    three cycles later (stage 1 realigns into a beat register and forms the
    beat's CRC chunk, stage 2a registers the chunk's share of the CRC, stage
    2b adds the running state's share and inserts the ICRC into the output
    register).  One output beat per clock with no idle cycle between frames:
    a frame of ``n`` bytes takes exactly ``ceil(n / 8)`` output cycles,
    including the cycle of a carry-only last beat and of an ICRC that spills
    into an extra beat, provided both inputs have data and the output port
    is ready.

    Backpressure
    ------------
    The output register is backed by a one-beat skid register, so the three
    stages move together on a flip-flop (``go``: the skid register is free
    or the output register empty, and no ICRC spill beat is pending) and the
    input treadys depend only on flip-flops and the inputs' own
    ``tvalid``/``tlast``, never combinationally on any output's tready.  The
    outputs' tvalids are flip-flops; tdata/tkeep/tlast come from the skid or
    the output register through one multiplexer.  A stalled plane stalls the
    whole merger, frames for other planes included (head-of-line blocking
    across planes, accepted in v1; a per-plane FIFO behind this block removes
    it).  tvalid never waits for tready.

    ICRC alignment: the CRC runs on 8-byte chunks aligned to the end of the
    ICRC region, whose length (44 + IPv6 Payload Length) is read from the
    header's bytes 18..19; HeaderGen always writes it consistently.  (These
    positions, and the constant CRC states below, are derived from
    :mod:`mrcnic.wire_format` at the top of the module.)  A header
    whose Payload Length disagrees with the frame gets a wrong ICRC (the frame
    is otherwise merged, routed and counted as usual).

    Timing: every stage reads registers only (the CRC chunk is aligned while the
    beat is loaded, the restart constant of beat 2 joins stage 2a, and the CRC
    register is cleared by a synchronous reset), so no multiplexer sits in
    front of either half of the CRC-32 XOR network.
    """

    def __init__(self, ports: "int | None" = None, *, params: "NicParams | None" = None):
        ports = check_ports(param(params, "ports", ports, 4))
        self.ports = ports
        members = {
            "s_hdr": In(AxiStreamSignature(64, user_width=67)),
            "s_payload": In(AxiStreamSignature(64)),
        }
        for p in range(ports):
            members[f"m_axis_p{p}"] = Out(AxiStreamSignature(64))
        members["drop_count"] = Out(32)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        hdr, pay = self.s_hdr, self.s_payload
        outs = [getattr(self, f"m_axis_p{p}") for p in range(self.ports)]

        # The three stages (R1, RC, R2) move together on ``go``: R2 may be reloaded
        # (``r2_adv``: the output skid register is free or R2 is empty) and no ICRC spill
        # beat is pending.  Both come from flip-flops, so the input treadys do not depend
        # on any output tready (the ready chain ends at the skid register).
        s_valid = Signal()                # output skid register holds a beat
        r2_valid = Signal()
        spill = Signal()                  # R2 holds ICRC bytes 0..1; bytes 2..3 follow
        r2_adv = Signal()
        go = Signal(init=1)               # == r2_adv & ~spill, kept as a flip-flop
        m.d.comb += r2_adv.eq(~(s_valid & r2_valid))

        # ---------------------------------------------------------------
        # Stage 1: realign payload behind the header into R1 beats.
        # ---------------------------------------------------------------
        feed = Signal(3, init=1)          # one-hot, bit = _Feed value
        hdr_first = Signal(init=1)        # next header beat starts a frame
        port_q = Signal(3)                # port of the frame being fed
        k6 = Signal()                     # header length is 6 mod 8 (else 2)
        carry = Signal(48)                # last k payload bytes not yet sent
        flush_e6 = Signal()               # the FLUSH beat ends the ICRC region at 6 bytes (else 2)

        r1_valid = Signal()
        r1_data = Signal(64)
        r1_chunk = Signal(64)             # the CRC chunk that ends in this beat (see stage 2)
        last_v48 = Signal(48)             # ICRC view of the last loaded beat's lanes 2..7
        r1_port = Signal(3)
        r1_end = Signal()                 # last beat of the ICRC region
        r1_e6 = Signal()                  # ... with 6 bytes in it (else 2)

        in_hdr = feed[_Feed.HDR.value]
        in_flush = feed[_Feed.FLUSH.value]

        # next feed state (one-hot), registered with ``go`` into ``go_hdr``/``go_pay`` so
        # that the input treadys are one LUT of flip-flops and the inputs' flags
        feed_n = Signal(3)
        m.d.comb += feed_n.eq(feed)
        m.d.sync += feed.eq(feed_n)

        def set_feed(state):
            m.d.comb += feed_n.eq(1 << state.value)

        go_hdr = Signal(init=1)           # == go & in_hdr
        go_pay = Signal()                 # == go & in_pay

        k6_now = Mux(in_hdr, hdr.tkeep[2], k6)
        pay_m = pay.tdata & _lanes(pay.tkeep)                       # pad lanes read as zeros
        pay_part = Mux(in_flush, 0, pay_m)
        pre_data = Mux(in_hdr, hdr.tdata, carry)
        # A beat: lanes 0..k-1 from the header (or the carry), lanes k..7 from the payload,
        # k = 2 or 6; a header beat that is not the last is the header beat whole.
        hdr_full = in_hdr & ~hdr.tlast

        def form(pre):
            lanes = []
            for i in range(8):
                lane = pre.word_select(i, 8)
                if i >= 2:
                    p2 = pay_part.word_select(i - 2, 8)
                    if i < 6:
                        lane = Mux(k6_now | hdr_full, lane, p2)
                    else:
                        lane = Mux(hdr_full, lane, Mux(k6_now, pay_part.word_select(i - 6, 8), p2))
                lanes.append(lane)
            return Cat(*lanes)

        beat_data = form(pre_data)
        # ICRC view of the beat: the header's view only on a full header beat.  A merged
        # beat's header lanes are the header's last 2 or 6 bytes (RETH DMA length or
        # ImmDt, never ICRC-masked: their view is their data), the rest is payload.
        beat_view = Mux(hdr_full, hdr.tuser[0:64], beat_data)
        carry_next = Mux(k6_now, pay_m[16:64], pay_m[48:64])
        frame_port = Mux(hdr_first, hdr.tuser[64:67], port_q)
        # With payload tlast: the region (header+payload+pad, 2 mod 4 bytes) ends in this
        # beat only when k = 2 and the padded last payload beat has 4 bytes (k + 4 = 6).
        ends_here = ~k6_now & ~pay.tkeep[4]

        r1_b1 = Signal()                  # frame beat 1
        r1_b2 = Signal()                  # frame beat 2 (it carries the IPv6 Payload Length)
        r1_al2 = Signal()                 # from beat 2 on: CRC chunks start at lane 2 (else 6)
        n1 = Signal(2)                    # beats of the frame loaded so far (saturates at 3)

        # The CRC runs on 8-byte chunks aligned to the end of the ICRC region (stage 2):
        # the chunk ending in a beat is the previous beat's view lanes 2..7 (or 6..7) and
        # this beat's lanes 0..1 (or 0..5).  It is formed here, while the beat is loaded,
        # so that stage 2a's XOR network reads registers only.  The alignment is known from
        # beat 2 (always a header beat: a header has >= 12 beats), whose own chunk uses it.
        b2_now = in_hdr & ~hdr_first & (n1 == _PLEN_BEAT)
        al2_now = Mux(b2_now, ~hdr.tdata[_AL_TBIT], r1_al2)
        beat_chunk = Mux(al2_now, Cat(last_v48, beat_view[0:16]),
                         Cat(last_v48[32:48], beat_view[0:48]))

        def load_r1(data, view, chunk, first, end, e6, port):
            first = Const(first, 1) if isinstance(first, int) else first
            m.d.sync += [r1_valid.eq(1), r1_data.eq(data), r1_chunk.eq(chunk),
                         last_v48.eq(view[16:64]),
                         r1_end.eq(end), r1_e6.eq(e6), r1_port.eq(port),
                         r1_b1.eq(~first & (n1 == _PLEN_BEAT - 1)),
                         r1_b2.eq(~first & (n1 == _PLEN_BEAT)),
                         n1.eq(Mux(first, 1, Mux(n1 == 3, 3, n1 + 1)))]
            with m.If(~first & (n1 == _PLEN_BEAT)):
                m.d.sync += r1_al2.eq(~hdr.tdata[_AL_TBIT])

        def payload_consumed():
            m.d.sync += carry.eq(carry_next)
            with m.If(pay.tlast):
                with m.If(ends_here):
                    set_feed(_Feed.HDR)
                with m.Else():
                    set_feed(_Feed.FLUSH)
                    m.d.sync += flush_e6.eq(k6_now & pay.tkeep[4])
            with m.Else():
                set_feed(_Feed.PAY)

        # treadys from flip-flops and the inputs' own (registered) flags; ``tlast`` only
        # with ``tvalid`` (an idle source's tlast may be undefined)
        m.d.comb += [
            hdr.tready.eq(go_hdr & hdr.tvalid & (~hdr.tlast | pay.tvalid)),
            pay.tready.eq(go_pay | (go_hdr & hdr.tvalid & hdr.tlast)),
        ]

        with m.If(go):
            m.d.sync += r1_valid.eq(0)                 # a bubble unless a beat is loaded
        with m.If(go_hdr):
            with m.If(hdr.tvalid & ~hdr.tlast):
                load_r1(beat_data, beat_view, beat_chunk, hdr_first, 0, 0, frame_port)
                m.d.sync += [hdr_first.eq(0), port_q.eq(frame_port)]
            with m.Elif(hdr.tvalid & pay.tvalid):
                load_r1(beat_data, beat_view, beat_chunk, hdr_first,
                        pay.tlast & ends_here, 1, frame_port)
                m.d.sync += [hdr_first.eq(1), port_q.eq(frame_port), k6.eq(k6_now)]
                payload_consumed()
        with m.If(go_pay & pay.tvalid):
            load_r1(beat_data, beat_view, beat_chunk, 0, pay.tlast & ends_here, 1, port_q)
            payload_consumed()
        with m.If(go & in_flush):
            load_r1(beat_data, beat_view, beat_chunk, 0, 1, flush_e6, port_q)
            set_feed(_Feed.HDR)

        # ---------------------------------------------------------------
        # Stage 2: CRC of R1's beat, ICRC inserted into the output register R2.
        # ---------------------------------------------------------------
        # The CRC runs on 8-byte chunks aligned to the end of the ICRC region, so that
        # one XOR network serves every beat.  The region (frame byte 6 to the end of the
        # pad) is 44 (``_REGION_BASE``) + IPv6 Payload Length bytes, 0 or 4 mod 8: chunks
        # start at lane 6 (region 0 mod 8) or lane 2 (4 mod 8) of each beat.  Its first 8
        # bytes are the pseudo-LRH ones (view bytes 6..13), so the state after them (lane 6)
        # or after the first 4 of them (lane 2) is a constant, and the alignment is needed
        # only from beat 2, which carries the Payload Length (bytes 18..19; bit 2 = lane 3 bit 2:
        # ``_PLEN_BEAT``, ``_AL_TBIT``, from wire_format).

        # Stage 2a: the chunk's share of the CRC (the update is linear: state and data
        # terms XOR), registered (RC); stage 2b adds the state's share and inserts the ICRC.
        # Beat 2 restarts the CRC from a constant state C (C4 or C8): the CRC register is
        # cleared after beat 1 (a synchronous reset, outside the XOR network) and C's share
        # F(C) joins the chunk's share here, so stage 2b never selects its state.
        def f_share(c):
            return crc32_update(Const(c, 32), Const(0, 64), 8)

        rc_valid = Signal()
        rc_data = Signal(64)
        rc_g = Signal(32)                 # crc32_update(0, chunk) [^ F(C) on beat 2]
        rc_b1 = Signal()                  # frame beat 1: the CRC register is cleared after it
        rc_port = Signal(3)
        rc_end = Signal()
        rc_e6 = Signal()
        k_share = Mux(r1_b2, Mux(r1_al2, f_share(_C4), f_share(_C8)), 0)
        with m.If(go):
            m.d.sync += [rc_valid.eq(r1_valid), rc_data.eq(r1_data),
                         rc_g.eq(crc32_update(Const(0, 32), r1_chunk, 8) ^ k_share),
                         rc_b1.eq(r1_b1), rc_port.eq(r1_port),
                         rc_end.eq(r1_end), rc_e6.eq(r1_e6)]

        # Stage 2b: CRC of RC's chunk, ICRC inserted into the output register R2.
        crc = Signal(32, init=CRC32_INIT)
        c_end = Signal(32)
        m.d.comb += c_end.eq(crc32_update(crc, Const(0, 64), 8) ^ rc_g)
        icrc = Signal(32)
        m.d.comb += icrc.eq(crc32_final(c_end))

        # R2 and the output skid register S: beats leave from S if it is full, else from
        # R2 (S is always the older).  ``*_oh`` is the beat's plane, one-hot (all zeros for
        # a port >= ``ports``: such a beat is drained and dropped).  The flags are computed
        # as next-state values so that ``go``, the output tvalids and the head beat's plane
        # are flip-flops.
        r2_data = Signal(64)
        r2_keep = Signal(8)
        r2_last = Signal()
        r2_oh = Signal(self.ports)
        icrc_hi = Signal(16)
        s_data = Signal(64)
        s_keep = Signal(8)
        s_last = Signal()
        s_oh = Signal(self.ports)
        rc_oh = Signal(self.ports)
        m.d.comb += [rc_oh[p].eq(rc_port == p) for p in range(self.ports)]
        o_oh = Signal(self.ports)         # plane of the head beat (S if full, else R2)
        o_tv = Signal(self.ports)         # the outputs' tvalid
        rc_take = r2_adv & ~spill & rc_valid

        with m.If(rc_take):
            m.d.sync += crc.eq(c_end)
            with m.If(rc_b1):
                m.d.sync += crc.eq(0)
        with m.If(r2_adv):
            with m.If(spill):
                m.d.sync += [r2_data.eq(icrc_hi), r2_keep.eq(0x03), r2_last.eq(1)]
            with m.Elif(~rc_end):
                m.d.sync += [r2_data.eq(rc_data), r2_keep.eq(0xFF), r2_last.eq(0)]
            with m.Elif(rc_e6):
                m.d.sync += [r2_data.eq(Cat(rc_data[0:48], icrc[0:16])), r2_keep.eq(0xFF),
                             r2_last.eq(0), icrc_hi.eq(icrc[16:32])]
            with m.Else():
                m.d.sync += [r2_data.eq(Cat(rc_data[0:16], icrc)), r2_keep.eq(0x3F),
                             r2_last.eq(1)]

        sel_ready = Signal()
        m.d.comb += sel_ready.eq(~o_oh.any() | _or_tree(
            [o_oh[p] & out.tready for p, out in enumerate(outs)]))
        o_valid = s_valid | r2_valid
        o_last = Mux(s_valid, s_last, r2_last)

        s_valid_n, r2_valid_n, spill_n = Signal(), Signal(), Signal()
        s_oh_n, r2_oh_n = Signal(self.ports), Signal(self.ports)
        m.d.comb += [
            s_valid_n.eq(o_valid & ~sel_ready),
            r2_valid_n.eq(Mux(r2_adv, spill | rc_valid, r2_valid)),
            spill_n.eq(Mux(r2_adv, ~spill & rc_valid & rc_end & rc_e6, spill)),
            s_oh_n.eq(Mux(s_valid, s_oh, r2_oh)),      # S copies R2 while it is free
            r2_oh_n.eq(Mux(rc_take, rc_oh, r2_oh)),
        ]
        o_oh_n = Mux(s_valid_n, s_oh_n, r2_oh_n)
        m.d.sync += [
            s_valid.eq(s_valid_n), r2_valid.eq(r2_valid_n), spill.eq(spill_n),
            s_oh.eq(s_oh_n), r2_oh.eq(r2_oh_n), o_oh.eq(o_oh_n),
            o_tv.eq(o_oh_n & Mux(s_valid_n | r2_valid_n, Const(-1, self.ports), 0)),
            go.eq(~(s_valid_n & r2_valid_n) & ~spill_n),
            go_hdr.eq(~(s_valid_n & r2_valid_n) & ~spill_n & feed_n[_Feed.HDR.value]),
            go_pay.eq(~(s_valid_n & r2_valid_n) & ~spill_n & feed_n[_Feed.PAY.value]),
        ]
        with m.If(~s_valid):
            m.d.sync += [s_data.eq(r2_data), s_keep.eq(r2_keep), s_last.eq(r2_last)]
        for p, out in enumerate(outs):
            m.d.comb += [
                out.tdata.eq(Mux(s_valid, s_data, r2_data)),
                out.tkeep.eq(Mux(s_valid, s_keep, r2_keep)),
                out.tlast.eq(o_last),
                out.tvalid.eq(o_tv[p]),
            ]

        with m.If(o_valid & sel_ready & o_last & ~o_oh.any()):
            m.d.sync += self.drop_count.eq(self.drop_count + 1)

        return m


def _or_tree(values):
    """OR of ``values``, as a balanced tree."""
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]
