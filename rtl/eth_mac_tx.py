"""Ethernet MAC transmitter: 64-bit AXI-Stream (NIC domain) -> GMII byte stream (PHY TX domain).

Store and forward in the NIC (``sync``) domain: beats go into a block-RAM buffer with
registered pointers, and only whole frames are read out, two ``sync`` cycles per beat at
most, into a small :class:`amaranth.lib.fifo.AsyncFIFO` of beats that crosses to the PHY TX
domain -- or, when the PHY TX domain is clocked by the ``sync`` clock itself
(``same_clock``, the board tops), through one hand-off register (the block RAM's output
register) with no crossing at all.  The wire side needs a beat only every 8 cycles (one
byte per clock), so every decision on either side is taken from registers one cycle ahead.
The wire side adds preamble + SFD, pads short frames to the 60-byte minimum and appends
the FCS.

Source: IEEE 802.3 clause 3 (frame format, FCS 3.2.9, minimum frame 4.4.2), clause 4.4.2
(interPacketGap 96 bit times), clause 35 (GMII).
"""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import AsyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axis import AxiStreamSignature
from .crc import CRC32_INIT, crc32_final
from .eth_mac_rx import crc32_byte

__all__ = ["EthMacTx"]

PREAMBLE = 0x55
SFD = 0xD5
MIN_PAYLOAD = 60            #: bytes before the FCS (64-byte minimum frame incl. FCS)
CROSS_DEPTH = 8             #: beats in the clock-crossing AsyncFIFO (one LUT RAM deep)

_Beat = data.StructLayout({
    "data": 64,
    "nbytes_m1": 3,         # valid bytes - 1 (lanes 0..nbytes_m1)
    "last": 1,
    "err": 1,               # truncated oversize frame: sent with an inverted FCS
})


class EthMacTx(wiring.Component):
    """IEEE 802.3 transmit MAC, 64-bit AXI-Stream in, GMII (8-bit, 1000 Mb/s) out.

    Parameters
    ----------
    max_frame : int
        Largest frame in bytes *including* the FCS (1518 standard, up to 9022 for jumbo
        frames).  Sets the store-and-forward buffer depth (the next power of two of
        ``ceil((max_frame - 4) / 8) + 2`` beats).
    tx_domain : str
        Clock domain of the GMII side (125 MHz for 1000 Mb/s).  It may be the same clock
        as ``sync`` or an unrelated one; ``sync`` must run faster than a quarter of it
        (the buffer is read at up to one beat per two ``sync`` cycles, the wire takes one
        beat per 8 cycles; tested down to 40 MHz).
    same_clock : bool
        ``tx_domain`` is clocked by the very clock of ``sync`` (one PLL output; the two
        resets may differ).  The AsyncFIFO is then left out: the wire side takes each
        beat straight from the block RAM's output register, which holds one beat until
        the wire side's ``pop`` register empties it; the next one is read 4 cycles later,
        the wire takes one per 8 cycles.  The GMII logic still runs in ``tx_domain``, so
        the platform code is the same in both modes.  With an unrelated ``tx_domain``
        clock this mode is wrong (no synchronisers): use the default, ``False``.

    Ports
    -----
    s_axis : In(AxiStreamSignature(64)), domain ``sync``
        Frames without FCS, byte lane 0 first; ``tkeep`` contiguous from lane 0; only the
        ``tlast`` beat may be partial (non-last beats count as 8 bytes; a ``tlast`` beat's
        length is the highest set ``tkeep`` bit + 1, at least 1 byte).  ``tready`` is a
        flip-flop: high while the buffer has room for two more beats (it holds
        ``fifo_depth - 1``) or while an oversize frame's tail is discarded; a frame of up to
        ``max_frame - 4`` bytes always fits.
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

    Store and forward: a frame becomes readable once its last beat is in the buffer
    (committed write pointer); the reader moves committed beats into the crossing FIFO
    (read address straight from a register, block-RAM output register used, at most one
    beat per two ``sync`` cycles, while the crossing FIFO's registered level leaves room);
    the wire side starts a frame once a beat is in the crossing FIFO (the rest of the frame
    follows faster than the wire takes it).  Latency: the preamble appears on ``txd`` about
    5 ``sync`` + 7 ``tx_domain`` cycles after the ``tlast`` beat is accepted (once the gap
    has elapsed; the byte sequencer is followed by a CRC stage and the output register);
    with ``same_clock``, about 4 + 7 cycles (no FIFO, no synchroniser).
    Throughput:
    line rate; the 64-bit side may stall anywhere, the wire never underruns inside a frame
    (should ``sync`` be too slow, the underrun frame goes out with an inverted FCS).
    """

    def __init__(self, *, max_frame: int = 1518, tx_domain: str = "rgmii_tx",
                 same_clock: bool = False):
        if not 64 <= max_frame <= 16384:
            raise ValueError(f"max_frame must be in 64..16384 bytes, not {max_frame}")
        if not isinstance(tx_domain, str) or tx_domain == "sync":
            raise ValueError(f"tx_domain must be a clock domain name other than 'sync', "
                             f"not {tx_domain!r}")
        if not isinstance(same_clock, bool):
            raise ValueError(f"same_clock must be a bool, not {same_clock!r}")
        self.max_frame, self.tx_domain, self.same_clock = max_frame, tx_domain, same_clock
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
        depth = self.fifo_depth

        # ---------------------------------------------------------------- NIC side (sync)
        # store-and-forward buffer: block RAM, addresses straight from registers
        # no_rw_check: rd reads buf[rp] every cycle, but a beat is used only once it is
        # committed, never in the cycle it is written
        m.submodules.buf = buf = Memory(shape=_Beat, depth=depth, init=[],
                                        attrs={"no_rw_check": 1})
        wr = buf.write_port()
        rd = buf.read_port(transparent_for=())
        if not self.same_clock:
            m.submodules.cross = cross = AsyncFIFO(width=_Beat.size, depth=CROSS_DEPTH,
                                                   r_domain=tx, w_domain="sync")

        s = self.s_axis
        beats = Signal(range(self.max_beats + 1))      # beats of this frame already stored
        final = Signal()                              # beats == max_beats - 1 (registered)
        discard = Signal()                            # truncated: drop until tlast
        room = Signal()                               # >= 2 free entries (registered)
        discard_nxt = Signal()
        tready = Signal()                             # room | discard, as a flip-flop
        wp = Signal(range(depth))                     # write pointer
        wc = Signal(range(depth))                     # committed: end of the last whole frame
        rp = Signal(range(depth))                     # read pointer
        used = Signal(range(depth))                   # beats written, not yet read (comb)
        last_hi = Signal(3)
        for i in range(8):
            with m.If(s.tkeep[i]):
                m.d.comb += last_hi.eq(i)
        nbytes_m1 = Mux(s.tlast, last_hi, 7)
        # only the final beat slot can overflow max_frame - 4 bytes (max_beats rounds up)
        rem = self.max_frame - 4 - 8 * (self.max_beats - 1)      # bytes left for it, 1..8
        too_long = final & (nbytes_m1 >= rem) if rem < 8 else Const(0)
        truncate = ~s.tlast & final
        write = Signal()
        m.d.comb += [
            s.tready.eq(tready),
            write.eq(s.tvalid & room & ~discard),
            wr.addr.eq(wp),
            wr.en.eq(write),
            wr.data.data.eq(s.tdata),
            wr.data.nbytes_m1.eq(nbytes_m1),
            wr.data.last.eq(s.tlast | truncate),
            wr.data.err.eq(too_long | truncate),
        ]
        with m.If(write):
            m.d.sync += wp.eq(wp + 1)
            with m.If(s.tlast | truncate):
                m.d.sync += wc.eq(wp + 1)

        # the next ``discard`` as one flat function of the beat taken (tlast: 0; the final
        # slot without tlast: 1; else unchanged), so ``tready``'s input is a few LUTs after
        # the sink's valid (which passes the port-admin gate)
        fire = s.tvalid & s.tready
        m.d.comb += discard_nxt.eq(Mux(fire, ~s.tlast & (discard | final), discard))
        m.d.sync += [discard.eq(discard_nxt), tready.eq((used <= depth - 3) | discard_nxt)]
        with m.If(fire):
            with m.If(s.tlast):
                m.d.sync += [beats.eq(0), final.eq(0),
                             self.tx_frames.eq(self.tx_frames + 1)]
                with m.If(discard | too_long):
                    m.d.sync += self.tx_oversize.eq(self.tx_oversize + 1)
            with m.Elif(~truncate & ~discard):
                m.d.sync += [beats.eq(beats + 1), final.eq(beats == self.max_beats - 2)]

        # reader: ``issue`` (a register) reads buf[rp]; the data reaches ``beat`` (the
        # block RAM's output register) two cycles later.  ``used`` <= depth - 1, so
        # rp == wc means "no committed beat left".
        issue = Signal()
        issued = Signal()
        beat = Signal(_Beat, reset_less=True)        # becomes the EBR output register
        m.d.comb += rd.addr.eq(rp)
        m.d.sync += issued.eq(issue)
        if self.same_clock:
            # ``beat`` is the hand-off register itself: one beat in flight or held at a
            # time (``held``); the wire side's ``pop`` (a register of the same clock)
            # empties it, and the next beat is there 4 cycles later, well before the wire
            # needs it (8 cycles per beat, 20 from a frame's last beat to the next first).
            held = Signal()
            m.d.sync += issue.eq(~issue & ~issued & ~held & (rp != wc))
            with m.If(issued):
                m.d.sync += [beat.eq(rd.data), held.eq(1)]
        else:
            # the crossing FIFO takes ``beat`` the cycle after it is loaded; its w_level
            # lags two writes; with one issue per two cycles at most three writes are not
            # yet counted in it when the issued beat is written.
            m.d.sync += [
                issue.eq(~issue & (rp != wc) & (cross.w_level <= CROSS_DEPTH - 3)),
                beat.eq(rd.data),
                cross.w_en.eq(issued),
            ]
            m.d.comb += cross.w_data.eq(beat)
        with m.If(issue):
            m.d.sync += rp.eq(rp + 1)
        # used <= depth - 1 (below), so the pointers' difference modulo depth is exact
        m.d.comb += used.eq(wp - rp)
        # room for two: used <= depth - 3 now, so after this and the next write <= depth - 1
        # (``tready`` is the same flip-flop OR the next ``discard``)
        m.d.sync += room.eq(used <= depth - 3)

        # ---------------------------------------------------------------- wire side (tx)
        lane = Signal(3)                   # byte lane of the current beat
        cur = Signal(_Beat)                # the beat being sent (popped from the FIFO)
        lane_end = Signal()                # lane == cur.nbytes_m1 (registered)
        pop = Signal()                     # FIFO read + load ``cur`` (decided one cycle ahead)
        m.d[tx] += pop.eq(0)
        if self.same_clock:
            r_beat, r_rdy = beat, held
            ready = held                   # a flip-flop; only pops clear it
            with m.If(pop):
                m.d.sync += held.eq(0)
        else:
            r_beat, r_rdy = _Beat(cross.r_data), cross.r_rdy
            ready = Signal()               # cross.r_rdy, registered (only pops clear it)
            m.d[tx] += ready.eq(cross.r_rdy)
            m.d.comb += cross.r_en.eq(pop)
        with m.If(pop):
            # the first beat (end of the preamble) or the next one (the reader outpaces the
            # wire, so it is there; an underrun would send garbage and marks the frame bad)
            m.d[tx] += [cur.eq(r_beat), cur.err.eq(r_beat.err | ~r_rdy),
                        lane_end.eq(r_beat.nbytes_m1 == 0)]
        length = Signal(range(MIN_PAYLOAD))       # payload bytes sent, up to 59
        full = Signal()                           # length == 59: the 60th byte goes out now
        bad = Signal()                            # sticky: frame gets an inverted FCS
        # byte sequencer (stage A) -> registered byte + flags -> CRC / FCS mux (stage B)
        # -> registered GMII outputs
        a_byte, a_start = Signal(8), Signal()
        b_byte, b_en, b_crc, b_start, b_fcs = Signal(8), Signal(), Signal(), Signal(), Signal()
        b_idx = Signal(2)
        # CRC-32 register (IEEE 802.3 3.2.9, one byte per clock, the XOR network of
        # amaranth.lib.crc's matrices in rtl/crc.py, inline so that the FCS inversion and
        # the byte select fold into the output multiplexer); (re)initialised at the SFD
        fcs_reg = Signal(32, init=CRC32_INIT)
        with m.If(b_start):
            m.d[tx] += fcs_reg.eq(CRC32_INIT)
        with m.Elif(b_crc):
            m.d[tx] += fcs_reg.eq(crc32_byte(fcs_reg, b_byte))
        fcs_byte = crc32_final(fcs_reg).word_select(b_idx, 8)
        m.d[tx] += [
            self.txd.eq(Mux(b_fcs, fcs_byte ^ Mux(bad, 0xFF, 0), b_byte)),
            self.tx_en.eq(b_en),
        ]
        m.d.comb += self.tx_er.eq(0)

        # one-hot states; ``cnt`` counts GAP (12 idle cycles after the previous FCS byte,
        # also after reset), PREAMBLE (8 bytes) and FCS (4 bytes) down to 0 (``cnt_z``)
        gap, pre, dat, pad, fcs = (Signal(init=1, name="gap"), Signal(name="pre"),
                                   Signal(name="dat"), Signal(name="pad"), Signal(name="fcs"))
        cnt = Signal(4, init=11)
        cnt_z = Signal()
        with m.If(~cnt_z):
            m.d[tx] += [cnt.eq(cnt - 1), cnt_z.eq(cnt == 1)]
        fin = dat & lane_end & cur.last            # last byte of the frame's data
        m.d.comb += [
            a_byte.eq(Mux(dat, cur.data.word_select(lane, 8),
                          Mux(pre, Mux(cnt_z, SFD, PREAMBLE), 0))),
            a_start.eq(pre & cnt_z),
        ]
        m.d[tx] += [b_byte.eq(a_byte), b_en.eq(~gap), b_crc.eq(dat | pad),
                    b_start.eq(a_start), b_fcs.eq(fcs), b_idx.eq(~cnt[:2])]
        with m.If(gap & cnt_z & ready):
            m.d[tx] += [gap.eq(0), pre.eq(1), cnt.eq(7), cnt_z.eq(0)]
        with m.If(pre & (cnt == 1)):
            m.d[tx] += pop.eq(1)                   # the first beat, at the SFD
        with m.If(a_start):
            m.d[tx] += [pre.eq(0), dat.eq(1), lane.eq(0), length.eq(0), full.eq(0), bad.eq(0)]
        with m.If((dat | pad) & ~full):
            m.d[tx] += [length.eq(length + 1), full.eq(length == MIN_PAYLOAD - 2)]
        with m.If(dat & lane_end):
            m.d[tx] += [lane.eq(0), bad.eq(bad | cur.err)]
        with m.If(dat & ~lane_end):
            m.d[tx] += [lane.eq(lane + 1), lane_end.eq(lane + 1 == cur.nbytes_m1),
                        pop.eq((lane + 1 == cur.nbytes_m1) & ~cur.last)]
        with m.If(fin):
            m.d[tx] += [dat.eq(0), pad.eq(~full)]
        with m.If((fin | pad) & full):
            m.d[tx] += [pad.eq(0), fcs.eq(1), cnt.eq(3), cnt_z.eq(0)]
        with m.If(fcs & cnt_z):
            # stage B sends CRC byte 3 - cnt one cycle later, after the last data byte
            m.d[tx] += [fcs.eq(0), gap.eq(1), cnt.eq(11), cnt_z.eq(0)]
        return m
