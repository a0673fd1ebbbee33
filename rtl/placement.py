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

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import Axi4WriteSignature
from .axis import AxiStreamSignature
from .layouts import Completion, PlaceCmd

__all__ = ["Placement"]

BURST_BOUNDARY = 2048   #: bursts split at 2 KiB: <= 256 beats of 8 bytes, never across 4 KiB


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
        Payload bytes written (strobes set).

    Throughput: one W beat per clock; a packet whose bytes straddle one more
    8-byte word than its payload has beats (unaligned ``addr``) takes one
    extra cycle.  Latency: AW is issued the cycle after ``cmd`` is accepted.
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

        # ---------------- command register ----------------
        busy = Signal()          # a command is being executed (AW and/or W side)
        place = Signal()
        addr = Signal(self._addr_width)
        length = Signal(13)
        aw_addr = Signal(self._addr_width)    # next burst address (8-byte aligned)
        aw_left = Signal(10)                  # beats still to announce on AW
        aw_done = Signal()
        w_done = Signal()                     # every W beat sent and the frame drained

        start = Signal()
        m.d.comb += start.eq(~busy & self.cmd.valid)
        m.d.comb += self.cmd.ready.eq(~busy)

        first_beat_addr = self.cmd.payload.addr & ~Const(7, self._addr_width)
        total_beats = (self.cmd.payload.addr[:3] + self.cmd.payload.length + 7) >> 3

        with m.If(start):
            m.d.sync += [
                busy.eq(1), place.eq(self.cmd.payload.place),
                addr.eq(self.cmd.payload.addr), length.eq(self.cmd.payload.length),
                aw_addr.eq(first_beat_addr), aw_left.eq(total_beats),
                aw_done.eq(~self.cmd.payload.place | (self.cmd.payload.length == 0)),
            ]
        with m.Elif(busy & aw_done & w_done):
            m.d.sync += busy.eq(0)

        # ---------------- AW channel ----------------
        outstanding = Signal(range(self._max_outstanding + 1))
        to_boundary = Signal(10)                                      # beats to the 2 KiB edge
        m.d.comb += to_boundary.eq((BURST_BOUNDARY - aw_addr[:11])[3:])
        burst = Signal(10)
        m.d.comb += burst.eq(Mux(aw_left < to_boundary, aw_left, to_boundary))
        can_issue = busy & ~aw_done & (outstanding < self._max_outstanding)
        m.d.comb += [
            axi.awvalid.eq(can_issue),
            axi.awaddr.eq(aw_addr),
            axi.awlen.eq(burst - 1),
            axi.awsize.eq(3),
            axi.awburst.eq(0b01),
            axi.awid.eq(0),
        ]
        aw_fire = Signal()
        m.d.comb += aw_fire.eq(axi.awvalid & axi.awready)
        with m.If(aw_fire):
            m.d.sync += [aw_addr.eq(aw_addr + (burst << 3)), aw_left.eq(aw_left - burst)]
            with m.If(aw_left == burst):
                m.d.sync += aw_done.eq(1)

        b_fire = Signal()
        m.d.comb += [axi.bready.eq(1), b_fire.eq(axi.bvalid)]
        with m.If(aw_fire & ~b_fire):
            m.d.sync += outstanding.eq(outstanding + 1)
        with m.Elif(~aw_fire & b_fire & (outstanding != 0)):
            m.d.sync += outstanding.eq(outstanding - 1)
        with m.If(b_fire & (axi.bresp != 0)):
            m.d.sync += self.write_errors.eq(self.write_errors + 1)

        # ---------------- W channel: realign payload to addr[2:0] ----------------
        # Payload bytes collect in an accumulator (up to 16 bytes); each W beat
        # takes the bytes its lanes need from the front.  Byte k of the packet
        # lands in lane (addr + k) % 8.
        pl = self.payload
        acc = Signal(128)
        acc_n = Signal(5)
        in_done = Signal()                    # tlast consumed
        beats_left = Signal(10)               # W beats still to send
        beat_addr = Signal(self._addr_width)
        first = Signal()                      # next W beat is the first of the command
        remaining = Signal(13)                # payload bytes still to write
        short = Signal()                      # the frame ended before `length` bytes

        in_bytes = Signal(4)
        with m.Switch(pl.tkeep):
            for n in range(9):
                with m.Case((1 << n) - 1):
                    m.d.comb += in_bytes.eq(n)
            with m.Default():
                m.d.comb += in_bytes.eq(8)

        lane0 = Signal(3)
        m.d.comb += lane0.eq(Mux(first, addr[:3], 0))
        room = Signal(4)
        m.d.comb += room.eq(8 - lane0)
        need = Signal(4)                      # bytes this beat carries
        m.d.comb += need.eq(Mux(remaining < room, remaining, room))
        have = Signal(4)                      # bytes actually available for it
        m.d.comb += have.eq(Mux(acc_n < need, acc_n, need))

        placing = busy & place & (beats_left != 0)
        beat_ok = Signal()
        m.d.comb += beat_ok.eq(placing & ((acc_n >= need) | in_done))
        m.d.comb += [
            axi.wvalid.eq(beat_ok),
            axi.wdata.eq((acc << (lane0 * 8))[:64]),
            axi.wstrb.eq((((1 << have) - 1) << lane0)[:8]),
            axi.wlast.eq(((beat_addr + 8)[:11] == 0) | (beats_left == 1)),
        ]
        w_fire = Signal()
        m.d.comb += w_fire.eq(axi.wvalid & axi.wready)
        used = Signal(5)
        m.d.comb += used.eq(Mux(w_fire, have, 0))
        new_n = Signal(5)                     # accumulator bytes after this beat
        m.d.comb += new_n.eq(acc_n - used)

        # Take input while there is space, or drain it once nothing more is placed.
        drain = busy & ~in_done & (~place | (beats_left == 0))
        space = new_n <= 8
        m.d.comb += pl.tready.eq(drain | (placing & ~in_done & space))
        consumed = Signal()
        m.d.comb += consumed.eq(pl.tvalid & pl.tready)
        keep_in = consumed & placing

        shifted = Signal(128)
        m.d.comb += shifted.eq(acc >> (used * 8))
        with m.If(start):
            m.d.sync += [
                acc.eq(0), acc_n.eq(0), in_done.eq(0), first.eq(1), short.eq(0),
                beats_left.eq(Mux(self.cmd.payload.place, total_beats, 0)),
                beat_addr.eq(first_beat_addr), remaining.eq(self.cmd.payload.length),
            ]
        with m.Else():
            with m.If(keep_in):
                m.d.sync += [acc.eq(shifted | (pl.tdata << (new_n * 8))),
                             acc_n.eq(new_n + in_bytes)]
            with m.Else():
                m.d.sync += [acc.eq(shifted), acc_n.eq(new_n)]
            with m.If(consumed & pl.tlast):
                m.d.sync += in_done.eq(1)
            with m.If(w_fire):
                m.d.sync += [
                    beats_left.eq(beats_left - 1), beat_addr.eq(beat_addr + 8),
                    first.eq(0), remaining.eq(remaining - need),
                    self.bytes_written.eq(self.bytes_written + have),
                ]
                with m.If((have != need) & ~short):
                    m.d.sync += [short.eq(1), self.short_frames.eq(self.short_frames + 1)]
        m.d.comb += w_done.eq((beats_left == 0) & (in_done | (consumed & pl.tlast)))

        # ---------------- completion fence ----------------
        idle = ~busy & ~self.cmd.valid & (outstanding == 0)
        m.d.comb += [
            self.cpl.valid.eq(self.cpl_in.valid & idle),
            self.cpl.payload.eq(self.cpl_in.payload),
            self.cpl_in.ready.eq(self.cpl.ready & idle),
        ]
        return m
