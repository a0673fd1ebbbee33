"""Ethernet MAC transmitter: 64-bit AXI-Stream (NIC domain) -> GMII byte stream (PHY TX domain).

Store-and-forward through an :class:`amaranth.lib.fifo.AsyncFIFO`: the wire side starts a
frame only once all of its beats are in the FIFO, so a stalling 64-bit source can never
underrun a frame on the wire.  The wire side adds preamble + SFD, pads short frames to the
60-byte minimum and appends the FCS.

Source: IEEE 802.3 clause 3 (frame format, FCS 3.2.9, minimum frame 4.4.2), clause 4.4.2
(interPacketGap 96 bit times), clause 35 (GMII).
"""

from amaranth.hdl import Cat, Const, DomainRenamer, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.crc import Processor, catalog
from amaranth.lib.fifo import AsyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .axis import AxiStreamSignature

__all__ = ["EthMacTx"]

PREAMBLE = 0x55
SFD = 0xD5
MIN_PAYLOAD = 60            #: bytes before the FCS (64-byte minimum frame incl. FCS)

_Beat = data.StructLayout({
    "data": 64,
    "nbytes_m1": 3,         # valid bytes - 1 (lanes 0..nbytes_m1)
    "last": 1,
    "err": 1,               # truncated oversize frame: sent with an inverted FCS
})


def _gray(value):
    return value ^ (value >> 1)


class EthMacTx(wiring.Component):
    """IEEE 802.3 transmit MAC, 64-bit AXI-Stream in, GMII (8-bit, 1000 Mb/s) out.

    Parameters
    ----------
    max_frame : int
        Largest frame in bytes *including* the FCS (1518 standard, up to 9022 for jumbo
        frames).  Sets the store-and-forward FIFO depth (the next power of two of
        ``ceil((max_frame - 4) / 8) + 2`` beats).
    tx_domain : str
        Clock domain of the GMII side (125 MHz for 1000 Mb/s).

    Ports
    -----
    s_axis : In(AxiStreamSignature(64)), domain ``sync``
        Frames without FCS, byte lane 0 first; ``tkeep`` contiguous from lane 0; only the
        ``tlast`` beat may be partial (non-last beats count as 8 bytes; a ``tlast`` beat's
        length is the highest set ``tkeep`` bit + 1, at least 1 byte).  ``tready`` is high
        while the FIFO has room; a frame of up to ``max_frame - 4`` bytes always fits.
    txd : Out(8), ``tx_en`` : Out(1), ``tx_er`` : Out(1), domain ``tx_domain``
        GMII transmit: 7 x 0x55, 0xD5, payload, zero pad to 60 bytes, FCS (CRC-32,
        ``zlib.crc32`` of the padded payload, least significant byte first), then at
        least 12 idle cycles (interframe gap).  ``tx_er`` is always 0.  Registered outputs.
    tx_frames : Out(32), domain ``sync``
        Frames accepted from ``s_axis`` (every accepted frame is transmitted).
    tx_oversize : Out(32), domain ``sync``
        Frames longer than ``max_frame - 4`` bytes.  They are sent with an inverted FCS so
        every receiver drops them: whole if they end within ``ceil((max_frame - 4) / 8)``
        beats, otherwise cut after that many beats (the rest is accepted and discarded).
        They are also counted in ``tx_frames``.

    Store and forward: the NIC side counts committed frames (gray-coded, crossing through
    an ``FFSynchronizer`` two cycles after the FIFO write pointer); the wire side starts a
    frame only while committed != sent.  Latency: the preamble starts about 3 ``sync`` +
    4 ``tx_domain`` cycles after the ``tlast`` beat is accepted (once the gap has elapsed).  Throughput: line rate;
    the 64-bit side may stall anywhere, the wire never underruns inside a frame.
    """

    def __init__(self, *, max_frame: int = 1518, tx_domain: str = "rgmii_tx"):
        if not 64 <= max_frame <= 16384:
            raise ValueError(f"max_frame must be in 64..16384 bytes, not {max_frame}")
        if not isinstance(tx_domain, str) or tx_domain == "sync":
            raise ValueError(f"tx_domain must be a clock domain name other than 'sync', "
                             f"not {tx_domain!r}")
        self.max_frame, self.tx_domain = max_frame, tx_domain
        self.max_beats = -(-(max_frame - 4) // 8)
        self.fifo_depth = 1 << (self.max_beats + 2 - 1).bit_length()
        super().__init__({
            "s_axis": In(AxiStreamSignature(64)),
            "txd": Out(8),
            "tx_en": Out(1),
            "tx_er": Out(1),
            "tx_frames": Out(32),
            "tx_oversize": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        tx = self.tx_domain
        # buffered: the wire side reads the beat from flip-flops, not from the EBR's
        # slow clock-to-out (the output register is one more queue entry)
        m.submodules.fifo = fifo = AsyncFIFOBuffered(width=_Beat.size,
                                                     depth=self.fifo_depth + 1,
                                                     r_domain=tx, w_domain="sync")
        w_beat = _Beat(fifo.w_data)
        r_beat = _Beat(fifo.r_data)

        # ---------------------------------------------------------------- NIC side (sync)
        s = self.s_axis
        beats = Signal(range(self.max_beats + 1))      # beats of this frame already stored
        final = Signal()                              # beats == max_beats - 1 (registered)
        discard = Signal()                            # truncated: drop until tlast
        last_hi = Signal(3)
        for i in range(8):
            with m.If(s.tkeep[i]):
                m.d.comb += last_hi.eq(i)
        nbytes_m1 = Mux(s.tlast, last_hi, 7)
        # only the final beat slot can overflow max_frame - 4 bytes (max_beats rounds up)
        rem = self.max_frame - 4 - 8 * (self.max_beats - 1)      # bytes left for it, 1..8
        too_long = final & (nbytes_m1 >= rem) if rem < 8 else Const(0)
        truncate = ~s.tlast & final
        m.d.comb += [
            w_beat.data.eq(s.tdata),
            w_beat.nbytes_m1.eq(nbytes_m1),
            w_beat.last.eq(s.tlast | truncate),
            w_beat.err.eq(too_long | truncate),
            s.tready.eq(fifo.w_rdy | discard),
            fifo.w_en.eq(s.tvalid & ~discard),
        ]
        # frames committed (gray-coded for the crossing); the count moves two cycles after
        # the last beat's write so the FIFO's own write pointer is visible to the reader first
        committed = Signal(range(2 * self.fifo_depth))
        committed_gray = Signal.like(committed)
        commit_d = Signal(2)
        m.d.sync += commit_d.eq(Cat(fifo.w_en & fifo.w_rdy & w_beat.last, commit_d[0]))
        with m.If(commit_d[1]):
            m.d.sync += committed.eq(committed + 1)
        m.d.sync += committed_gray.eq(_gray(committed))

        with m.If(s.tvalid & s.tready):
            with m.If(s.tlast):
                m.d.sync += [beats.eq(0), final.eq(0), discard.eq(0),
                             self.tx_frames.eq(self.tx_frames + 1)]
                with m.If(discard | too_long):
                    m.d.sync += self.tx_oversize.eq(self.tx_oversize + 1)
            with m.Elif(truncate):
                m.d.sync += discard.eq(1)
            with m.Elif(~discard):
                m.d.sync += [beats.eq(beats + 1), final.eq(beats == self.max_beats - 2)]

        # ---------------------------------------------------------------- wire side (tx)
        committed_r = Signal.like(committed_gray)
        m.submodules.commit_sync = FFSynchronizer(committed_gray, committed_r, o_domain=tx)
        sent = Signal.like(committed)
        frame_ready = committed_r != _gray(sent)

        m.submodules.crc = crc = DomainRenamer({"sync": tx})(
            Processor(catalog.CRC32_ETHERNET(data_width=8)))

        count = Signal(range(16))          # preamble byte / gap cycle / FCS byte index
        lane = Signal(3)                   # byte lane of the current beat
        cur = Signal(_Beat)                # the beat being sent (popped from the FIFO)
        lane_end = Signal()                # lane == cur.nbytes_m1 (registered)
        pop = Signal()                     # FIFO read this cycle (decided one cycle ahead)
        m.d[tx] += pop.eq(0)
        m.d.comb += fifo.r_en.eq(pop)
        length = Signal(range(MIN_PAYLOAD + 1))   # payload bytes sent, saturating at 60
        bad = Signal()
        txd = Signal(8)
        tx_en = Signal()
        m.d[tx] += [self.txd.eq(txd), self.tx_en.eq(tx_en)]
        m.d.comb += self.tx_er.eq(0)

        with m.FSM(domain=tx):
            with m.State("GAP"):
                # 12 idle cycles after the previous FCS byte (also the state after reset)
                with m.If(count != 11):
                    m.d[tx] += count.eq(count + 1)
                with m.Elif(frame_ready & fifo.r_rdy):
                    m.d[tx] += count.eq(0)
                    m.next = "PREAMBLE"
            with m.State("PREAMBLE"):
                m.d.comb += [tx_en.eq(1), txd.eq(Mux(count == 7, SFD, PREAMBLE))]
                m.d[tx] += count.eq(count + 1)
                with m.If(count == 6):
                    m.d[tx] += pop.eq(1)
                with m.If(count == 7):
                    # pop the first beat into ``cur`` (the FIFO output then holds the next)
                    m.d.comb += crc.start.eq(1)
                    m.d[tx] += [lane.eq(0), length.eq(0), bad.eq(0), cur.eq(r_beat),
                                lane_end.eq(r_beat.nbytes_m1 == 0)]
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [
                    tx_en.eq(1),
                    txd.eq(cur.data.word_select(lane, 8)),
                    crc.valid.eq(1),
                    crc.data.eq(txd),
                ]
                with m.If(length != MIN_PAYLOAD):
                    m.d[tx] += length.eq(length + 1)
                with m.If(lane_end):
                    m.d[tx] += lane.eq(0)
                    with m.If(cur.last):
                        m.d[tx] += [sent.eq(sent + 1), bad.eq(cur.err), count.eq(0)]
                        with m.If(length >= MIN_PAYLOAD - 1):
                            m.next = "FCS"
                        with m.Else():
                            m.next = "PAD"
                    with m.Else():
                        # the frame is all in the FIFO: its next beat is in the output register
                        m.d[tx] += [cur.eq(r_beat), lane_end.eq(r_beat.nbytes_m1 == 0)]
                with m.Else():
                    m.d[tx] += [lane.eq(lane + 1), lane_end.eq(lane + 1 == cur.nbytes_m1),
                                pop.eq((lane + 1 == cur.nbytes_m1) & ~cur.last)]
            with m.State("PAD"):
                m.d.comb += [tx_en.eq(1), txd.eq(0), crc.valid.eq(1), crc.data.eq(0)]
                m.d[tx] += length.eq(length + 1)
                with m.If(length == MIN_PAYLOAD - 1):
                    m.next = "FCS"
            with m.State("FCS"):
                m.d.comb += [tx_en.eq(1),
                             txd.eq(crc.crc.word_select(count[:2], 8) ^ Mux(bad, 0xFF, 0))]
                m.d[tx] += count.eq(count + 1)
                with m.If(count == 3):
                    m.d[tx] += count.eq(0)
                    m.next = "GAP"
        return m
