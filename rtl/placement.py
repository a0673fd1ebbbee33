"""Placement: write received payload into host memory over AXI4 (MRC direct placement).

Every MRC data packet carries its own remote VA, so the receiver places it as
soon as it arrives, in whatever order (the MRC paper, "delivery is decoupled
from message completion").  The RX parser has already checked rkey and VA
bounds and turned the VA into a host address; the SACK tracker has decided
whether the packet is new.  This block only writes, exactly the bytes it is
told: ``wstrb`` covers ``[addr, addr + length)`` and nothing else.

Completions pass through here so that one is never raised before the data it
announces is in memory: a completion is released only when no payload frame
is pending or in flight and every AXI4 write burst issued so far has been
answered on the B channel.

Source: ARM IHI 0022E (AXI4: INCR bursts <= 256 beats, never crossing 4 KiB).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import Axi4WriteSignature
from .axis import AxiStreamSignature
from .layouts import Completion, PlaceCmd

__all__ = ["Placement"]

BURST_BOUNDARY = 2048   #: bursts split at 2 KiB: <= 256 beats of 8 bytes, never across 4 KiB


def _realign(m, pair, shift, lane, name):
    """Lanes 8..15 of the 16 lanes ``pair`` shifted up by ``shift`` (0..7) lanes.

    A barrel shifter, largest step first, each stage only as wide as the output needs.
    """
    value, lo = pair, 0                     # value holds lanes lo..15 of the shifted pair
    for k in (2, 1, 0):
        step = 1 << k
        new_lo = 8 - (step - 1)             # the smaller steps still to come reach down
        stage = Signal((16 - new_lo) * lane, name=f"{name}_s{k}")
        moved = value[(new_lo - step - lo) * lane:(16 - step - lo) * lane]
        m.d.comb += stage.eq(Mux(shift[k], moved, value[(new_lo - lo) * lane:]))
        value, lo = stage, new_lo
    return value


class Placement(wiring.Component):
    """AXI4 write master for received payload, with completion fencing.

    Parameters
    ----------
    addr_width : int
        AXI address width in bits (default 32).
    max_outstanding : int
        Write bursts that may await their B response (default 15).

    Attributes
    ----------
    cmd : In(stream PlaceCmd)
        One per payload frame, in order: ``place`` = 1 writes ``length`` bytes
        (1..4096) at byte address ``addr`` (any alignment); ``place`` = 0
        discards the payload frame.
    payload : In(AxiStreamSignature(64))
        Payload frames (lane 0 first, tkeep partial on the last beat only).
        A frame longer than ``length`` bytes is cut at ``length`` (the rest is
        drained, never written); a shorter one ends the write early with the
        remaining bytes' strobes off, and counts in ``short_frames``.
    cpl_in : In(stream Completion)
        Completions from the SACK tracker, emitted after the PlaceCmd of the
        message's last packet.
    cpl : Out(stream Completion)
        The same completions, released once every earlier write is acknowledged.
    m_axi : Out(Axi4WriteSignature(addr_width, 64, 4))
        AXI4 write channels; INCR bursts, ``awsize`` = 3, ``awid`` = 0.
    write_errors : Out(32)
        B responses other than OKAY.
    short_frames : Out(32)
        Payload frames that ended before ``length`` bytes.
    bytes_written : Out(32)
        Payload bytes written (strobes set), counted as they are taken from
        ``payload`` into a W beat; the count is updated 3 clocks later.

    Throughput: one W beat per clock; a packet whose bytes straddle one more
    8-byte word than its payload has beats (unaligned ``addr``) takes one
    extra cycle.  Latency: AW is issued the cycle after ``cmd`` is accepted;
    each W beat takes its payload beat in the same cycle (``tready`` follows
    ``wready``), realigned by a barrel shifter over it and the previous beat.
    """

    def __init__(self, addr_width: int = 32, max_outstanding: int = 15):
        if not 12 <= addr_width <= 64:
            raise ValueError(f"addr_width must be 12..64, not {addr_width}")
        if not 1 <= max_outstanding <= 255:
            raise ValueError(f"max_outstanding must be 1..255, not {max_outstanding}")
        self._addr_width = addr_width
        self._max_outstanding = max_outstanding
        super().__init__({
            "cmd": In(stream.Signature(PlaceCmd)),
            "payload": In(AxiStreamSignature(64)),
            "cpl_in": In(stream.Signature(Completion)),
            "cpl": Out(stream.Signature(Completion)),
            "m_axi": Out(Axi4WriteSignature(addr_width, 64, 4)),
            "write_errors": Out(32),
            "short_frames": Out(32),
            "bytes_written": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        axi = self.m_axi
        aw = self._addr_width
        pl = self.payload

        # ---------------- command register ----------------
        busy = Signal()          # a command is being executed (AW and/or W side)
        shift = Signal(3, reset_less=True)      # addr[2:0]: lane of the first byte
        aw_lo = Signal(8, reset_less=True)      # next burst address, bits [3, 11) ...
        addr_hi = Signal(aw - 11, reset_less=True)  # ... the command's bits [11, aw) ...
        aw_cross = Signal(2)     # ... plus the 2 KiB boundaries crossed so far
        aw_left = Signal(10, reset_less=True)   # beats still to announce on AW
        to_boundary = Signal(9, reset_less=True)  # beats to the 2 KiB edge: 256 - aw_lo
        aw_done = Signal()
        w_done = Signal()        # every W beat sent and the frame drained

        start = Signal()
        m.d.comb += start.eq(~busy & self.cmd.valid)
        m.d.comb += self.cmd.ready.eq(~busy)

        c = self.cmd.payload
        placing_cmd = c.place & (c.length != 0)
        total_beats = (c.addr[:3] + c.length + 7) >> 3

        with m.If(start):
            m.d.sync += [
                busy.eq(1), shift.eq(c.addr[:3]),
                aw_lo.eq(c.addr[3:11]), addr_hi.eq(c.addr[11:]), aw_cross.eq(0),
                to_boundary.eq(256 - c.addr[3:11]),
                aw_left.eq(total_beats),
                aw_done.eq(~placing_cmd),
            ]
        with m.Elif(busy & aw_done & w_done):
            m.d.sync += busy.eq(0)

        # ---------------- AW channel: INCR bursts, split at 2 KiB ----------------
        outstanding = Signal(range(self._max_outstanding + 1))
        last_burst = aw_left <= to_boundary
        burst = Mux(last_burst, aw_left, to_boundary)
        can_issue = busy & ~aw_done & (outstanding < self._max_outstanding)
        m.d.comb += [
            axi.awvalid.eq(can_issue),
            axi.awaddr.eq(Cat(Const(0, 3), aw_lo, addr_hi + aw_cross)),
            axi.awlen.eq(burst - 1),
            axi.awsize.eq(3),
            axi.awburst.eq(0b01),
            axi.awid.eq(0),
        ]
        aw_fire = Signal()
        m.d.comb += aw_fire.eq(axi.awvalid & axi.awready)
        with m.If(aw_fire):
            with m.If(last_burst):
                m.d.sync += aw_done.eq(1)
            with m.Else():
                m.d.sync += [aw_left.eq(aw_left - to_boundary), aw_lo.eq(0), to_boundary.eq(256),
                             aw_cross.eq(aw_cross + 1)]

        b_fire = Signal()
        m.d.comb += [axi.bready.eq(1), b_fire.eq(axi.bvalid)]
        with m.If(aw_fire & ~b_fire):
            m.d.sync += outstanding.eq(outstanding + 1)
        with m.Elif(~aw_fire & b_fire & (outstanding != 0)):
            m.d.sync += outstanding.eq(outstanding - 1)
        with m.If(b_fire & (axi.bresp != 0)):
            m.d.sync += self.write_errors.eq(self.write_errors + 1)

        # ---------------- W channel: realign payload to addr[2:0] ----------------
        # Byte k of the packet lands in lane (addr + k) % 8: W beat j is input beat j
        # shifted up by `shift` lanes, its low lanes filled from input beat j-1
        # (`hold`).  Byte strobes travel through the same shifter with the data: the
        # input's tkeep, cut at the command's length, so a short frame leaves its
        # missing bytes' strobes off and a long one never writes past `length`.
        in_done = Signal()                    # tlast consumed
        beats_left = Signal(10, reset_less=True)  # W beats still to send
        beat_lo = Signal(8, reset_less=True)      # W beat address [3, 11) (wlast at 2 KiB)
        in_left = Signal(13, reset_less=True)     # command bytes not yet taken from the input
        in_nz = Signal()                      # in_left != 0   (flags kept with in_left, so no
        in_ge8 = Signal()                     # in_left >= 8    wide compare sits in front of
        in_gt8 = Signal()                     # in_left > 8     the W handshake)
        placing = Signal()                    # busy & beats_left != 0
        hold = Signal(64, reset_less=True)
        hold_keep = Signal(8)
        short = Signal()                      # the frame ended before `length` bytes

        cut = Signal(8)                       # lanes of this input beat inside the command
        with m.If(in_ge8):
            m.d.comb += cut.eq(0xFF)
        with m.Else():
            with m.Switch(in_left[:3]):
                for n in range(8):
                    with m.Case(n):
                        m.d.comb += cut.eq((1 << n) - 1)
        need_in = ~in_done & in_nz            # this W beat takes an input beat
        in_keep = Mux(need_in, pl.tkeep & cut, 0)

        m.d.comb += [
            axi.wvalid.eq(placing & (pl.tvalid | ~need_in)),
            axi.wdata.eq(_realign(m, Cat(hold, pl.tdata), shift, 8, "wdata")),
            axi.wstrb.eq(_realign(m, Cat(hold_keep, in_keep), shift, 1, "wstrb")),
            axi.wlast.eq((beat_lo == 0xFF) | (beats_left == 1)),
        ]
        w_fire = Signal()
        m.d.comb += w_fire.eq(axi.wvalid & axi.wready)

        # Take input with each W beat that needs one; drain it once nothing more is placed.
        drain = busy & ~in_done & ~placing
        m.d.comb += pl.tready.eq(drain | (placing & need_in & axi.wready))
        consumed = Signal()
        m.d.comb += consumed.eq(pl.tvalid & pl.tready)

        # bytes_written counts the payload bytes taken into W beats (every one of them
        # leaves with its strobe set: the last W beat of a command flushes `hold`), two
        # clocks later: the lanes taken are registered, then counted, then added, so
        # neither the realigner nor a popcount sits in front of the 32-bit adder.
        taken_keep = Signal(8)
        n_taken = Signal(4)
        m.d.sync += [
            taken_keep.eq(Mux(w_fire & need_in, in_keep, 0)),
            n_taken.eq(sum(taken_keep[i] for i in range(8))),
            self.bytes_written.eq(self.bytes_written + n_taken),
        ]
        n_keep = Signal(4)
        m.d.comb += n_keep.eq(sum(pl.tkeep[i] for i in range(8)))

        with m.If(start):
            m.d.sync += [
                in_done.eq(0), short.eq(0), hold_keep.eq(0),
                beats_left.eq(Mux(placing_cmd, total_beats, 0)),
                beat_lo.eq(c.addr[3:11]), in_left.eq(Mux(placing_cmd, c.length, 0)),
                in_nz.eq(placing_cmd), in_ge8.eq(placing_cmd & (c.length >= 8)),
                in_gt8.eq(placing_cmd & (c.length > 8)), placing.eq(placing_cmd),
            ]
        with m.Else():
            with m.If(consumed & pl.tlast):
                m.d.sync += in_done.eq(1)
            with m.If(w_fire):
                m.d.sync += [
                    beats_left.eq(beats_left - 1), beat_lo.eq(beat_lo + 1),
                    placing.eq(beats_left != 1),
                    hold.eq(pl.tdata), hold_keep.eq(in_keep),
                ]
                with m.If(need_in):
                    m.d.sync += [in_left.eq(Mux(in_gt8, in_left - 8, 0)), in_nz.eq(in_gt8),
                                 in_ge8.eq(in_left >= 16), in_gt8.eq(in_left > 16)]
            # The frame ends before `length` bytes: counted once.
            with m.If(placing & consumed & pl.tlast & Mux(in_gt8, 1, n_keep < in_left[:4]) & ~short):
                m.d.sync += [short.eq(1), self.short_frames.eq(self.short_frames + 1)]
        m.d.comb += w_done.eq(~placing & (in_done | (consumed & pl.tlast)))

        # ---------------- completion fence ----------------
        idle = ~busy & ~self.cmd.valid & (outstanding == 0)
        m.d.comb += [
            self.cpl.valid.eq(self.cpl_in.valid & idle),
            self.cpl.payload.eq(self.cpl_in.payload),
            self.cpl_in.ready.eq(self.cpl.ready & idle),
        ]
        return m
