"""Ethernet MAC receiver: GMII byte stream (PHY RX domain) -> 64-bit AXI-Stream (NIC domain).

The PHY side finds the SFD, checks the FCS, length (runt / giant) and GMII RX_ER, strips
the FCS and packs the bytes into 64-bit beats; the last beat of every frame carries the
frame's status.  The beats cross to the NIC domain through an
:class:`amaranth.lib.fifo.AsyncFIFO` that the NIC side drains every cycle into a
store-and-forward frame buffer (:class:`amaranth.lib.memory.Memory`): a frame is written
speculatively and *committed* only when its last beat reports a good frame; otherwise the
write pointer rolls back, so a bad frame is never released.

Source: IEEE 802.3 clause 3 (frame format, FCS 3.2.9), clause 4.2.4.2.2 (frames shorter
than 64 bytes are discarded), clause 35 (GMII RX_DV / RX_ER).
"""

from amaranth.hdl import Cat, DomainRenamer, Module, Mux, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.crc import Processor, catalog
from amaranth.lib.fifo import AsyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axis import AxiStreamSignature

__all__ = ["EthMacRx", "RxStatus"]

PREAMBLE = 0x55
SFD = 0xD5
MIN_FRAME = 64              #: bytes including the FCS


class RxStatus(enum.Enum, shape=3):
    """Status carried by the last beat of a frame across the clock-domain crossing."""
    OK = 0
    BAD_FCS = 1             #: FCS mismatch or RX_ER asserted inside the frame
    RUNT = 2                #: shorter than 64 bytes including the FCS
    GIANT = 3               #: longer than ``max_frame`` bytes including the FCS
    OVERFLOW = 4            #: a beat was lost at the clock-domain crossing


_Cross = data.StructLayout({
    "data": 64,
    "nbytes_m1": 3,
    "last": 1,
    "status": RxStatus,
})

_Stored = data.StructLayout({
    "data": 64,
    "nbytes_m1": 3,
    "last": 1,
})


class EthMacRx(wiring.Component):
    """IEEE 802.3 receive MAC, GMII (8-bit, 1000 Mb/s) in, 64-bit AXI-Stream out.

    Parameters
    ----------
    max_frame : int
        Largest accepted frame in bytes *including* the FCS: 1518 standard (1522 with a
        VLAN tag), up to 16384 for jumbo frames (9018+).  Longer frames are giants.
    buffer_frames : int
        Store-and-forward buffer size in maximum-size frames (1 or more); the buffer is
        the next power of two of ``buffer_frames * ceil((max_frame - 4) / 8) + 1`` beats.
    rx_domain : str
        Clock domain of the GMII side (the PHY's recovered RX clock, 125 MHz).

    Ports
    -----
    rxd : In(8), ``rx_dv`` : In(1), ``rx_er`` : In(1), domain ``rx_domain``
        GMII receive.  Bytes before the SFD must be 0x55 (any number of them, the PHY may
        shrink the preamble); a frame with another byte before its SFD is ignored
        (not counted).
    m_axis : Out(AxiStreamSignature(64)), domain ``sync``
        Good frames, FCS stripped, byte lane 0 first, ``tkeep`` contiguous from lane 0,
        only the ``tlast`` beat partial.  A frame appears only after its last byte and FCS
        were checked (store and forward).  ``tvalid`` never waits on ``tready``; the sink
        may stall forever: frames that find the buffer full are dropped and counted.
    rx_frames : Out(32), domain ``sync``
        Good frames committed to the buffer.
    rx_bad_fcs : Out(32)
        Frames dropped for an FCS mismatch or RX_ER inside the frame.
    rx_runt : Out(32)
        Frames dropped for being shorter than 64 bytes including the FCS.
    rx_giant : Out(32)
        Frames dropped for being longer than ``max_frame`` bytes including the FCS.
    rx_fifo_overflow : Out(32)
        Good frames dropped because the frame buffer was full (``m_axis`` backpressure) or
        a beat was lost at the crossing.  All counters are in ``sync``; the status reasons
        are exclusive and checked in the order giant, runt, bad FCS, overflow.

    The NIC side pops the crossing FIFO every cycle, so it never fills while the ``sync``
    clock is faster than 1/8 of the RX clock (one beat per 8 bytes).  Latency: about
    3 ``rx_domain`` + 8 ``sync`` cycles from the frame's last FCS byte (plus the FIFO
    synchroniser) to its first beat on ``m_axis`` (GMII input register, FSM, FIFO write
    register on the PHY side; block-RAM read, its output register and the ``m_axis``
    register on the NIC side).  ``m_axis`` comes from flip-flops; ``tready`` reaches
    only the output and skid registers (a one-beat skid buffer), so a sink may stall
    at any beat with no bubble at line rate.  The buffer holds ``buffer_depth - 1``
    beats (its full flag is registered) plus up to 4 beats in the read pipeline.
    """

    def __init__(self, *, max_frame: int = 1518, buffer_frames: int = 1,
                 rx_domain: str = "rgmii_rx"):
        if not 64 <= max_frame <= 16384:
            raise ValueError(f"max_frame must be in 64..16384 bytes, not {max_frame}")
        if not isinstance(buffer_frames, int) or buffer_frames < 1:
            raise ValueError(f"buffer_frames must be a positive integer, not {buffer_frames!r}")
        if not isinstance(rx_domain, str) or rx_domain == "sync":
            raise ValueError(f"rx_domain must be a clock domain name other than 'sync', "
                             f"not {rx_domain!r}")
        self.max_frame, self.rx_domain = max_frame, rx_domain
        self.max_beats = -(-(max_frame - 4) // 8)
        self.buffer_depth = 1 << (buffer_frames * self.max_beats).bit_length()
        super().__init__({
            "rxd": In(8),
            "rx_dv": In(1),
            "rx_er": In(1),
            "m_axis": Out(AxiStreamSignature(64)),
            "rx_frames": Out(32),
            "rx_bad_fcs": Out(32),
            "rx_runt": Out(32),
            "rx_giant": Out(32),
            "rx_fifo_overflow": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        rx = self.rx_domain
        m.submodules.fifo = fifo = AsyncFIFO(width=_Cross.size, depth=16,
                                             w_domain=rx, r_domain="sync")

        # ---------------------------------------------------------------- PHY side (rx)
        # stage 0: GMII input register (keeps the pins' neighbour logic off the FSM paths)
        rxd, rx_dv, rx_er = Signal(8), Signal(), Signal()
        m.d[rx] += [rxd.eq(self.rxd), rx_dv.eq(self.rx_dv), rx_er.eq(self.rx_er)]

        # stage 1: SFD / FCS / length FSM and the beat packer.  Length thresholds are
        # registered flags updated with ``count`` (no wide compare in the same cycle).
        m.submodules.crc = crc = DomainRenamer({"sync": rx})(
            Processor(catalog.CRC32_ETHERNET(data_width=8)))
        count = Signal(range(self.max_frame + 1))  # bytes after the SFD, saturating
        at_max = Signal()                          # count == max_frame
        payload = Signal()                         # count >= 4
        long_enough = Signal()                     # count >= MIN_FRAME
        delay = Signal(32)                         # the last 4 bytes (FCS candidates)
        beat = Signal(64)
        lanes = Signal(range(9))                   # bytes in ``beat``
        full = Signal()                            # lanes == 8
        giant = Signal()
        er_seen = Signal()
        status = Signal(RxStatus)
        push = Signal()                            # hand ``beat`` to stage 2 (comb)
        push_last = Signal()
        m.d.comb += crc.data.eq(rxd)

        # stage 2: one registered beat in front of the crossing FIFO.  A full beat that
        # finds the FIFO full is lost (the frame's status becomes OVERFLOW); the last beat
        # waits for room (the FSM holds in FLUSH meanwhile).
        pend = Signal(_Cross)
        pend_valid = Signal()
        lost = Signal()
        w = _Cross(fifo.w_data)
        m.d.comb += [
            fifo.w_en.eq(pend_valid),
            w.data.eq(pend.data),
            w.nbytes_m1.eq(pend.nbytes_m1),
            w.last.eq(pend.last),
            w.status.eq(Mux(pend.last & (pend.status == RxStatus.OK) & lost,
                            RxStatus.OVERFLOW, pend.status)),
        ]
        with m.If(push):
            m.d[rx] += [pend_valid.eq(1), pend.data.eq(beat), pend.nbytes_m1.eq(lanes - 1),
                        pend.last.eq(push_last), pend.status.eq(status)]
        with m.Elif(pend_valid & (fifo.w_rdy | ~pend.last)):
            m.d[rx] += pend_valid.eq(0)
        with m.If(pend_valid & ~pend.last & ~fifo.w_rdy):
            m.d[rx] += lost.eq(1)
        with m.If(pend_valid & pend.last & fifo.w_rdy):
            m.d[rx] += lost.eq(0)

        with m.FSM(domain=rx):
            with m.State("IDLE"):
                m.d[rx] += [count.eq(0), at_max.eq(0), payload.eq(0), long_enough.eq(0),
                            lanes.eq(0), full.eq(0), giant.eq(0), er_seen.eq(0)]
                with m.If(rx_dv):
                    with m.If(rxd == SFD):
                        m.d.comb += crc.start.eq(1)
                        m.next = "DATA"
                    with m.Elif(rxd != PREAMBLE):
                        m.next = "DROP"
            with m.State("DATA"):
                with m.If(rx_dv):
                    m.d.comb += crc.valid.eq(1)
                    m.d[rx] += delay.eq(Cat(delay[8:], rxd))
                    with m.If(rx_er):
                        m.d[rx] += er_seen.eq(1)
                    with m.If(at_max):
                        m.d[rx] += giant.eq(1)
                    with m.Else():
                        m.d[rx] += [count.eq(count + 1),
                                    at_max.eq(count == self.max_frame - 1)]
                        with m.If(count == 3):
                            m.d[rx] += payload.eq(1)
                        with m.If(count == MIN_FRAME - 1):
                            m.d[rx] += long_enough.eq(1)
                        with m.If(payload):
                            # the byte leaving the delay line is payload
                            with m.If(full):
                                m.d.comb += push.eq(1)
                                m.d[rx] += [beat[:8].eq(delay[:8]), lanes.eq(1), full.eq(0)]
                            with m.Else():
                                m.d[rx] += [beat.word_select(lanes[:3], 8).eq(delay[:8]),
                                            lanes.eq(lanes + 1), full.eq(lanes == 7)]
                with m.Else():
                    with m.If(giant):
                        m.d[rx] += status.eq(RxStatus.GIANT)
                    with m.Elif(~long_enough):
                        m.d[rx] += status.eq(RxStatus.RUNT)
                    with m.Elif(~crc.match_detected | er_seen):
                        m.d[rx] += status.eq(RxStatus.BAD_FCS)
                    with m.Else():
                        m.d[rx] += status.eq(RxStatus.OK)
                    m.next = "END"
            with m.State("END"):
                # the last beat (maybe empty for a runt) carries the status
                m.d.comb += [push.eq(1), push_last.eq(1)]
                m.next = "FLUSH"
            with m.State("FLUSH"):
                # wait until stage 2 has written the last beat into the crossing FIFO
                with m.If(~pend_valid):
                    m.next = "IDLE"
            with m.State("DROP"):
                with m.If(~rx_dv):
                    m.next = "IDLE"

        # ---------------------------------------------------------------- NIC side (sync)
        depth = self.buffer_depth
        abits = (depth - 1).bit_length()
        # The read port reads only committed words (rd < commit <= wr, wr - rd < depth), so
        # it never reads the word being written, except while not fetching (rd == commit ==
        # wr), when the read data is discarded (v1 = 0): no read/write collision logic.
        m.submodules.mem = mem = Memory(shape=_Stored, depth=depth, init=[],
                                        attrs={"no_rw_check": 1})
        wp = mem.write_port()
        rp = mem.read_port()
        wr = Signal(abits + 1)          # next write (speculative, current frame)
        commit = Signal(abits + 1)      # end of the last good frame
        rd = Signal(abits + 1)          # next beat to fetch from the buffer
        dropping = Signal()
        r = _Cross(fifo.r_data)
        # Registered, one cycle behind: wr grows by at most 1 per cycle and rd never goes
        # back, so "wr - rd >= depth - 1 a cycle ago" covers "full now" (one word unused).
        full = Signal()
        m.d.sync += full.eq((wr - rd)[:abits + 1] >= depth - 1)

        m.d.comb += [
            fifo.r_en.eq(1),
            wp.addr.eq(wr[:abits]),
            wp.data.data.eq(r.data),
            wp.data.nbytes_m1.eq(r.nbytes_m1),
            wp.data.last.eq(r.last),
        ]
        with m.If(fifo.r_rdy):
            with m.If(~dropping & ~full):
                m.d.comb += wp.en.eq(1)
                m.d.sync += wr.eq(wr + 1)
            with m.Else():
                m.d.sync += dropping.eq(1)
            with m.If(r.last):
                m.d.sync += dropping.eq(0)
                with m.If((r.status == RxStatus.OK) & ~dropping & ~full):
                    m.d.sync += [commit.eq(wr + 1), self.rx_frames.eq(self.rx_frames + 1)]
                with m.Else():
                    m.d.sync += wr.eq(commit)
                    with m.Switch(r.status):
                        with m.Case(RxStatus.BAD_FCS):
                            m.d.sync += self.rx_bad_fcs.eq(self.rx_bad_fcs + 1)
                        with m.Case(RxStatus.RUNT):
                            m.d.sync += self.rx_runt.eq(self.rx_runt + 1)
                        with m.Case(RxStatus.GIANT):
                            m.d.sync += self.rx_giant.eq(self.rx_giant + 1)
                        with m.Default():
                            m.d.sync += self.rx_fifo_overflow.eq(self.rx_fifo_overflow + 1)

        # Read pipeline, all stages enabled by ``go`` (a register): block-RAM read (v1),
        # ``q`` = the read data with nothing in between (it becomes the EBR's output
        # register, boards/ebr_outreg.py), then the output register ``o`` with a one-beat
        # skid register ``sk``: go falls the cycle after a beat had to park in ``sk``.
        o = self.m_axis
        sk_valid = Signal()
        go = Signal(init=1)             # = ~sk_valid (its own flip-flop: a plain clock enable)
        v1, v2 = Signal(), Signal()
        q = Signal(_Stored, reset_less=True)
        fetch = go & (rd != commit)
        m.d.comb += [rp.addr.eq(rd[:abits]), rp.en.eq(go)]
        with m.If(go):
            m.d.sync += [v1.eq(fetch), v2.eq(v1), q.eq(rp.data)]
        with m.If(fetch):
            m.d.sync += rd.eq(rd + 1)
        keep_q = Cat(*[q.nbytes_m1 >= i for i in range(8)])
        sk_data, sk_keep, sk_last = (Signal(64, reset_less=True), Signal(8, reset_less=True),
                                     Signal(reset_less=True))
        o_data, o_keep, o_last = (Signal(64, reset_less=True), Signal(8, reset_less=True),
                                  Signal(reset_less=True))
        o_valid = Signal()
        m.d.comb += [o.tvalid.eq(o_valid), o.tdata.eq(o_data), o.tkeep.eq(o_keep),
                     o.tlast.eq(o_last)]
        new = go & v2                   # a beat leaves ``q`` this cycle
        with m.If(~o_valid | o.tready):
            with m.If(sk_valid):
                m.d.sync += [o_valid.eq(1), o_data.eq(sk_data), o_keep.eq(sk_keep),
                             o_last.eq(sk_last), sk_valid.eq(0), go.eq(1)]
            with m.Else():
                m.d.sync += [o_valid.eq(new), o_data.eq(q.data), o_keep.eq(keep_q),
                             o_last.eq(q.last)]
        with m.Elif(new):
            m.d.sync += [sk_valid.eq(1), go.eq(0), sk_data.eq(q.data), sk_keep.eq(keep_q),
                         sk_last.eq(q.last)]
        return m
