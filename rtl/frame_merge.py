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

from .axis import AxiStreamSignature
from .crc import CRC32_INIT, crc32_final, crc32_update
from .layouts import MAX_PORTS

__all__ = ["FrameMerge"]


class _Feed(enum.Enum, shape=2):
    HDR = 0     #: passing header beats; the header's last beat merges with payload beat 0
    PAY = 1     #: carry (header_len mod 8 bytes) + the next payload beat
    FLUSH = 2   #: the carry left after the last payload beat (no input consumed)


def _crc_state(nbytes):
    """CRC register (as :mod:`mrcnic.rtl.crc` keeps it) after ``nbytes`` bytes of 0xFF."""
    final = zlib.crc32(b"\xff" * nbytes) ^ 0xFFFFFFFF
    return int(f"{final:032b}"[::-1], 2)


_C4, _C8 = _crc_state(4), _crc_state(8)   # ICRC region start: 4 / 8 pseudo-LRH bytes


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
        output port (plane), taken from the frame's first header beat.
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
    three cycles later (stage 1 realigns into a beat register, stage 2a
    registers the CRC share of the beat's 8-byte chunk, stage 2b adds the
    running state's share and inserts the ICRC into the output register).
    One output beat per clock with no idle cycle between frames: a frame of
    ``n`` bytes takes exactly ``ceil(n / 8)`` output cycles, including the
    cycle of a carry-only last beat and of an ICRC that spills into an extra
    beat, provided both inputs have data and the output port is ready.

    Backpressure
    ------------
    The input treadys depend combinationally on the tready of the port the
    frame in the output register goes to.  A stalled plane stalls the whole
    merger, frames for other planes included (head-of-line blocking across
    planes, accepted in v1; a per-plane FIFO behind this block removes it).
    tvalid never waits for tready.

    ICRC alignment: the CRC runs on 8-byte chunks aligned to the end of the
    ICRC region, whose length (44 + IPv6 Payload Length) is read from the
    header's bytes 18..19; HeaderGen always writes it consistently.  A header
    whose Payload Length disagrees with the frame gets a wrong ICRC (the frame
    is otherwise merged, routed and counted as usual).

    Critical path (about 160 MHz out of context on an LFE5U-25F): the chunk
    multiplexer plus the data half of the 8-byte CRC-32 XOR network
    (stage 2a); stage 2b is the state half (32 inputs) and the ICRC lane
    multiplexer.
    """

    def __init__(self, ports: int = 4):
        if not isinstance(ports, int) or not 1 <= ports <= MAX_PORTS:
            raise ValueError(f"ports must be an integer in 1..{MAX_PORTS}, not {ports!r}")
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

        # ---------------------------------------------------------------
        # Stage 1: realign payload behind the header into R1 beats.
        # ---------------------------------------------------------------
        feed = Signal(_Feed)
        hdr_first = Signal(init=1)        # next header beat starts a frame
        port_q = Signal(3)                # port of the frame being fed
        k6 = Signal()                     # header length is 6 mod 8 (else 2)
        carry = Signal(48)                # last k payload bytes not yet sent
        flush_e6 = Signal()               # the FLUSH beat ends the ICRC region at 6 bytes (else 2)

        r1_valid = Signal()
        r1_data = Signal(64)
        r1_view = Signal(64)
        r1_port = Signal(3)
        r1_end = Signal()                 # last beat of the ICRC region
        r1_e6 = Signal()                  # ... with 6 bytes in it (else 2)
        r1_take = Signal()
        r1_free = Signal()
        m.d.comb += r1_free.eq(~r1_valid | r1_take)

        in_hdr = feed == _Feed.HDR
        k6_now = Mux(in_hdr, hdr.tkeep[2], k6)
        pay_m = pay.tdata & _lanes(pay.tkeep)                       # pad lanes read as zeros
        pay_part = Mux(feed == _Feed.FLUSH, 0, pay_m)
        pre_data = Mux(in_hdr, hdr.tdata, carry)
        pre_view = Mux(in_hdr, hdr.tuser[0:64], carry)
        beat_data = Mux(k6_now, Cat(pre_data[0:48], pay_part[0:16]), Cat(pre_data[0:16], pay_part[0:48]))
        beat_view = Mux(k6_now, Cat(pre_view[0:48], pay_part[0:16]), Cat(pre_view[0:16], pay_part[0:48]))
        carry_next = Mux(k6_now, pay_m[16:64], pay_m[48:64])
        frame_port = Mux(hdr_first, hdr.tuser[64:67], port_q)
        # With payload tlast: the region (header+payload+pad, 2 mod 4 bytes) ends in this
        # beat only when k = 2 and the padded last payload beat has 4 bytes (k + 4 = 6).
        ends_here = ~k6_now & ~pay.tkeep[4]

        r1_b2 = Signal()                  # frame beat 2 (it carries the IPv6 Payload Length)
        r1_al2 = Signal()                 # from beat 2 on: CRC chunks start at lane 2 (else 6)
        n1 = Signal(2)                    # beats of the frame loaded so far (saturates at 3)

        def load_r1(data, view, first, end, e6, port):
            first = Const(first, 1) if isinstance(first, int) else first
            m.d.sync += [r1_valid.eq(1), r1_data.eq(data), r1_view.eq(view),
                         r1_end.eq(end), r1_e6.eq(e6), r1_port.eq(port),
                         r1_b2.eq(~first & (n1 == 2)),
                         n1.eq(Mux(first, 1, Mux(n1 == 3, 3, n1 + 1)))]
            # (beat 2 is always a header beat: a header has >= 12 beats)
            with m.If(~first & (n1 == 2)):
                m.d.sync += r1_al2.eq(~hdr.tuser[26])

        def payload_consumed():
            m.d.sync += carry.eq(carry_next)
            with m.If(pay.tlast):
                with m.If(ends_here):
                    m.d.sync += feed.eq(_Feed.HDR)
                with m.Else():
                    m.d.sync += [feed.eq(_Feed.FLUSH), flush_e6.eq(k6_now & pay.tkeep[4])]
            with m.Else():
                m.d.sync += feed.eq(_Feed.PAY)

        with m.If(r1_take):
            m.d.sync += r1_valid.eq(0)

        with m.If(r1_free):
            with m.Switch(feed):
                with m.Case(_Feed.HDR):
                    with m.If(hdr.tvalid & ~hdr.tlast):
                        m.d.comb += hdr.tready.eq(1)
                        load_r1(hdr.tdata, hdr.tuser[0:64], hdr_first, 0, 0, frame_port)
                        m.d.sync += [hdr_first.eq(0), port_q.eq(frame_port)]
                    with m.Elif(hdr.tvalid & pay.tvalid):
                        m.d.comb += [hdr.tready.eq(1), pay.tready.eq(1)]
                        load_r1(beat_data, beat_view, hdr_first, pay.tlast & ends_here,
                                1, frame_port)
                        m.d.sync += [hdr_first.eq(1), port_q.eq(frame_port), k6.eq(k6_now)]
                        payload_consumed()
                with m.Case(_Feed.PAY):
                    with m.If(pay.tvalid):
                        m.d.comb += pay.tready.eq(1)
                        load_r1(beat_data, beat_view, 0, pay.tlast & ends_here, 1, port_q)
                        payload_consumed()
                with m.Case(_Feed.FLUSH):
                    load_r1(beat_data, beat_view, 0, 1, flush_e6, port_q)
                    m.d.sync += feed.eq(_Feed.HDR)

        # ---------------------------------------------------------------
        # Stage 2: CRC of R1's beat, ICRC inserted into the output register R2.
        # ---------------------------------------------------------------
        # The CRC runs on 8-byte chunks aligned to the end of the ICRC region, so that
        # one XOR network serves every beat.  The region (frame byte 6 to the end of the
        # pad) is 44 + IPv6 Payload Length bytes, 0 or 4 mod 8: chunks start at lane 6
        # (region 0 mod 8) or lane 2 (4 mod 8) of each beat.  Its first 8 bytes are the
        # pseudo-LRH ones (view bytes 6..13), so the state after them (lane 6) or after the
        # first 4 of them (lane 2) is a constant, and the alignment is needed only from
        # beat 2, which carries the Payload Length (bytes 18..19; bit 2 = lane 3 bit 2).
        hold = Signal(48)                 # ICRC view of the previous beat's lanes 2..7
        chunk = Mux(r1_al2, Cat(hold, r1_view[0:16]), Cat(hold[32:48], r1_view[0:48]))

        # Stage 2a: the chunk's share of the CRC (the update is linear: state and data
        # terms XOR), registered (RC); stage 2b adds the state's share and inserts the ICRC.
        rc_valid = Signal()
        rc_data = Signal(64)
        rc_g = Signal(32)                 # crc32_update(0, chunk)
        rc_b2 = Signal()                  # frame beat 2: the CRC restarts from a constant
        rc_al2 = Signal()
        rc_port = Signal(3)
        rc_end = Signal()
        rc_e6 = Signal()
        rc_take = Signal()
        m.d.comb += r1_take.eq(r1_valid & (~rc_valid | rc_take))
        with m.If(rc_take):
            m.d.sync += rc_valid.eq(0)
        with m.If(r1_take):
            m.d.sync += [rc_valid.eq(1), rc_data.eq(r1_data), rc_g.eq(crc32_update(Const(0, 32), chunk, 8)),
                         rc_b2.eq(r1_b2), rc_al2.eq(r1_al2), rc_port.eq(r1_port),
                         rc_end.eq(r1_end), rc_e6.eq(r1_e6),
                         hold.eq(r1_view[16:64])]

        # Stage 2b: CRC of RC's chunk, ICRC inserted into the output register R2.
        crc = Signal(32, init=CRC32_INIT)
        state = Mux(rc_b2, Mux(rc_al2, _C4, _C8), crc)
        c_end = Signal(32)
        m.d.comb += c_end.eq(crc32_update(state, Const(0, 64), 8) ^ rc_g)
        icrc = Signal(32)
        m.d.comb += icrc.eq(crc32_final(c_end))

        r2_valid = Signal()
        r2_data = Signal(64)
        r2_keep = Signal(8)
        r2_last = Signal()
        r2_port = Signal(3)
        spill = Signal()                  # R2 holds ICRC bytes 0..1; bytes 2..3 follow
        icrc_hi = Signal(16)

        port_ok = r2_port < self.ports
        sel_ready = Signal()
        m.d.comb += sel_ready.eq(~port_ok)                 # a bad port drains (dropped)
        for p, out in enumerate(outs):
            m.d.comb += [
                out.tdata.eq(r2_data), out.tkeep.eq(r2_keep), out.tlast.eq(r2_last),
                out.tvalid.eq(r2_valid & (r2_port == p)),
            ]
            with m.If(r2_port == p):
                m.d.comb += sel_ready.eq(out.tready)
        r2_free = ~r2_valid | sel_ready
        m.d.comb += rc_take.eq(r2_free & ~spill & rc_valid)

        with m.If(r2_valid & sel_ready & r2_last & ~port_ok):
            m.d.sync += self.drop_count.eq(self.drop_count + 1)

        with m.If(r2_free):
            with m.If(spill):
                m.d.sync += [r2_valid.eq(1), r2_data.eq(icrc_hi), r2_keep.eq(0x03),
                             r2_last.eq(1), spill.eq(0)]
            with m.Elif(rc_take):
                m.d.sync += [r2_valid.eq(1), r2_port.eq(rc_port), crc.eq(c_end)]
                with m.If(~rc_end):
                    m.d.sync += [r2_data.eq(rc_data), r2_keep.eq(0xFF), r2_last.eq(0)]
                with m.Elif(rc_e6):
                    m.d.sync += [r2_data.eq(Cat(rc_data[0:48], icrc[0:16])), r2_keep.eq(0xFF),
                                 r2_last.eq(0), spill.eq(1), icrc_hi.eq(icrc[16:32])]
                with m.Else():
                    m.d.sync += [r2_data.eq(Cat(rc_data[0:16], icrc)), r2_keep.eq(0x3F),
                                 r2_last.eq(1)]
            with m.Else():
                m.d.sync += r2_valid.eq(0)

        return m
