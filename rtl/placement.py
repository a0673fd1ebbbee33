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

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
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
    extra cycle.  Latency: a command is registered when accepted (``cmd.ready``
    is a flip-flop; one waits there while another executes), starts the cycle
    after, and its AW is issued the cycle after that (``awaddr`` from flip-flops); a payload beat passes a 2-entry input skid
    (``payload.tready`` is a flip-flop: the skid is empty) and is realigned, by
    a barrel shifter over it and the previous beat, into the W output register
    (``wvalid``/``wdata``/``wstrb``/``wlast`` are flip-flops): a W beat leaves 2
    cycles after its payload beat is accepted.  A completion is loaded into the
    ``cpl`` output register (flip-flops) the cycle after it is released, so
    one completion per 2 cycles at most.
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

        # ---------------- payload input: 2-entry skid, tready from a flip-flop ----------------
        # ``pl`` (main register) feeds the realigner; the skid ``sk`` parks the beat that
        # arrived while the main register could not move on, so ``payload.tready`` is the
        # skid's emptiness (a flip-flop, never the W channel's ready).
        src = self.payload
        pl_valid = Signal()
        pl_data = Signal(64, reset_less=True)
        pl_keep = Signal(8, reset_less=True)
        pl_last = Signal(reset_less=True)
        sk_full = Signal()
        sk_data = Signal(64, reset_less=True)
        sk_keep = Signal(8, reset_less=True)
        sk_last = Signal(reset_less=True)
        pl_ready = Signal()                   # the realigner takes the beat in ``pl`` (comb)
        m.d.comb += src.tready.eq(~sk_full)
        with m.If(~pl_valid | pl_ready):
            m.d.sync += [pl_valid.eq(sk_full | src.tvalid), sk_full.eq(0),
                         pl_data.eq(Mux(sk_full, sk_data, src.tdata)),
                         pl_keep.eq(Mux(sk_full, sk_keep, src.tkeep)),
                         pl_last.eq(Mux(sk_full, sk_last, src.tlast))]
        with m.Elif(~sk_full):
            m.d.sync += [sk_full.eq(src.tvalid), sk_data.eq(src.tdata), sk_keep.eq(src.tkeep),
                         sk_last.eq(src.tlast)]

        # ---------------- command register ----------------
        busy = Signal()          # a command is being executed (AW and/or W side)
        shift = Signal(3, reset_less=True)      # addr[2:0]: lane of the first byte
        aw_lo = Signal(8, reset_less=True)      # next burst address, bits [3, 11)
        aw_hi = Signal(aw - 11, reset_less=True)  # ... bits [11, aw) (+1 per 2 KiB crossed)
        aw_left = Signal(10, reset_less=True)   # beats still to announce on AW
        to_boundary = Signal(9, reset_less=True)  # beats to the 2 KiB edge: 256 - aw_lo
        aw_done = Signal()
        w_done = Signal()        # every W beat sent and the frame drained

        # The command is first taken into a register (``cmd.ready`` is its emptiness) with
        # its derived values (placing, beats, length decodes) computed on the way in, so a
        # command starts from flip-flops only; the next one waits there while one executes.
        q_valid = Signal()
        c = Signal(PlaceCmd, reset_less=True)
        placing_cmd = Signal(reset_less=True)       # place = 1 and length != 0
        total_beats = Signal(10, reset_less=True)   # W beats: (addr[2:0] + length + 7) / 8
        c_gt8 = Signal(reset_less=True)             # length > 8
        c_ge8 = Signal(reset_less=True)             # length >= 8
        c_tail = Signal(8, reset_less=True)         # lanes of the last input beat
        thermo = Array(Const((1 << k) - 1, 8) for k in range(8))
        nc = self.cmd.payload
        m.d.comb += self.cmd.ready.eq(~q_valid)
        with m.If(self.cmd.valid & ~q_valid):
            m.d.sync += [q_valid.eq(1), c.eq(nc),
                         placing_cmd.eq(nc.place & (nc.length != 0)),
                         total_beats.eq((nc.addr[:3] + nc.length + 7) >> 3),
                         c_gt8.eq(nc.length > 8), c_ge8.eq(nc.length >= 8),
                         c_tail.eq(thermo[nc.length[:3]])]
        start = Signal()
        m.d.comb += start.eq(~busy & q_valid)
        with m.If(start):
            m.d.sync += q_valid.eq(0)

        with m.If(start):
            m.d.sync += [
                busy.eq(1), shift.eq(c.addr[:3]),
                aw_lo.eq(c.addr[3:11]), aw_hi.eq(c.addr[11:]),
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
        room = Signal(init=1)       # outstanding < max_outstanding (kept with outstanding)
        can_issue = busy & ~aw_done & room
        m.d.comb += [
            axi.awvalid.eq(can_issue),
            axi.awaddr.eq(Cat(Const(0, 3), aw_lo, aw_hi)),
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
                             aw_hi.eq(aw_hi + 1)]

        b_fire = Signal()
        m.d.comb += [axi.bready.eq(1), b_fire.eq(axi.bvalid)]
        with m.If(aw_fire & ~b_fire):
            m.d.sync += [outstanding.eq(outstanding + 1),
                         room.eq(outstanding < self._max_outstanding - 1)]
        with m.Elif(~aw_fire & b_fire & (outstanding != 0)):
            m.d.sync += [outstanding.eq(outstanding - 1), room.eq(1)]
        with m.If(b_fire & (axi.bresp != 0)):
            m.d.sync += self.write_errors.eq(self.write_errors + 1)

        # ---------------- W channel: realign payload to addr[2:0] ----------------
        # Byte k of the packet lands in lane (addr + k) % 8: W beat j is input beat j
        # shifted up by `shift` lanes, its low lanes filled from input beat j-1
        # (`hold`).  Byte strobes travel through the same shifter with the data: the
        # input's tkeep, cut at the command's length, so a short frame leaves its
        # missing bytes' strobes off and a long one never writes past `length`.
        # The realigned beat is loaded into the W output register (``w_*``: wvalid,
        # wdata, wstrb, wlast are flip-flops); it takes a new beat when empty or when
        # its beat is accepted.
        in_done = Signal()                    # tlast consumed
        beats_left = Signal(10, reset_less=True)  # W beats still to send
        beat_lo = Signal(8, reset_less=True)      # W beat address [3, 11) (wlast at 2 KiB)
        in_left = Signal(13, reset_less=True)     # command bytes not yet taken from the input
        in_nz = Signal()                      # in_left != 0   (flags kept with in_left, so no
        in_gt8 = Signal()                     # in_left > 8     wide compare sits in front of
        #                                                         the W handshake)
        placing = Signal()                    # busy & beats_left != 0
        hold = Signal(64, reset_less=True)
        hold_keep = Signal(8)
        short = Signal()                      # the frame ended before `length` bytes

        # lanes of this input beat inside the command: 0xFF while in_left >= 8, else the
        # in_left low lanes (registered with in_left; in_left - 8 has the same low bits, so
        # the last beat's lanes, ``tail``, are decoded once from the command's length)
        cut = Signal(8, reset_less=True)
        tail = Signal(8, reset_less=True)
        need_in = ~in_done & in_nz            # this W beat takes an input beat
        in_keep = Mux(need_in, pl_keep & cut, 0)

        w_valid = Signal()
        w_data = Signal(64, reset_less=True)
        w_strb = Signal(8, reset_less=True)
        w_last = Signal(reset_less=True)
        m.d.comb += [axi.wvalid.eq(w_valid), axi.wdata.eq(w_data), axi.wstrb.eq(w_strb),
                     axi.wlast.eq(w_last)]
        w_free = ~w_valid | axi.wready        # the W register takes a beat this cycle
        w_load = Signal()                     # a realigned beat enters the W register
        m.d.comb += w_load.eq(placing & w_free & (pl_valid | ~need_in))
        with m.If(w_load):
            m.d.sync += [
                w_valid.eq(1),
                w_data.eq(_realign(m, Cat(hold, pl_data), shift, 8, "wdata")),
                w_strb.eq(_realign(m, Cat(hold_keep, in_keep), shift, 1, "wstrb")),
                w_last.eq((beat_lo == 0xFF) | (beats_left == 1)),
            ]
        with m.Elif(axi.wready):
            m.d.sync += w_valid.eq(0)

        # Take input with each W beat that needs one; drain it once nothing more is placed.
        drain = busy & ~in_done & ~placing
        m.d.comb += pl_ready.eq(drain | (placing & need_in & w_free))
        consumed = Signal()
        m.d.comb += consumed.eq(pl_valid & pl_ready)

        # bytes_written counts the payload bytes taken into W beats (every one of them
        # leaves with its strobe set: the last W beat of a command flushes `hold`), two
        # clocks later: the lanes taken are registered, then counted, then added, so
        # neither the realigner nor a popcount sits in front of the 32-bit adder.
        taken_keep = Signal(8)
        n_taken = Signal(4)
        m.d.sync += [
            taken_keep.eq(Mux(w_load & need_in, in_keep, 0)),
            n_taken.eq(sum(taken_keep[i] for i in range(8))),
            self.bytes_written.eq(self.bytes_written + n_taken),
        ]
        n_keep = Signal(4)
        m.d.comb += n_keep.eq(sum(pl_keep[i] for i in range(8)))

        with m.If(start):
            m.d.sync += [
                in_done.eq(0), short.eq(0), hold_keep.eq(0),
                # (beats_left, in_left, in_gt8 and cut matter only while placing / in_nz)
                beats_left.eq(total_beats),
                beat_lo.eq(c.addr[3:11]), in_left.eq(c.length),
                in_nz.eq(placing_cmd),
                in_gt8.eq(c_gt8),
                placing.eq(placing_cmd),
                tail.eq(c_tail),
                cut.eq(Mux(c_ge8, 0xFF, c_tail)),
            ]
        with m.Else():
            with m.If(consumed & pl_last):
                m.d.sync += in_done.eq(1)
            with m.If(w_load):
                m.d.sync += [
                    beats_left.eq(beats_left - 1), beat_lo.eq(beat_lo + 1),
                    placing.eq(beats_left != 1),
                    hold.eq(pl_data), hold_keep.eq(in_keep),
                ]
                with m.If(need_in):
                    m.d.sync += [in_left.eq(Mux(in_gt8, in_left - 8, 0)), in_nz.eq(in_gt8),
                                 in_gt8.eq(in_left[5:].any() | (in_left[4] & in_left[:4].any())),
                                 cut.eq(Mux(in_left[4:].any(), 0xFF, tail))]
            # The frame ends before `length` bytes: counted once.
            with m.If(placing & consumed & pl_last & Mux(in_gt8, 1, n_keep < in_left[:4]) & ~short):
                m.d.sync += [short.eq(1), self.short_frames.eq(self.short_frames + 1)]
        m.d.comb += w_done.eq(~placing & (in_done | (consumed & pl_last)))

        # ---------------- completion fence ----------------
        # A completion is taken into the output register (``cpl.valid`` and payload are
        # flip-flops) only while nothing is pending: no command executing, registered or
        # waiting, and
        # every AW burst answered on B (a W beat still in the W register belongs to a burst
        # whose AW has been issued, so it keeps ``outstanding`` above 0).
        idle = ~busy & ~q_valid & ~self.cmd.valid & (outstanding == 0)
        cpl_valid = Signal()
        cpl_pl = Signal(Completion, reset_less=True)
        m.d.comb += [
            self.cpl.valid.eq(cpl_valid),
            self.cpl.payload.eq(cpl_pl),
            self.cpl_in.ready.eq(idle & ~cpl_valid),
        ]
        with m.If(self.cpl_in.valid & self.cpl_in.ready):
            m.d.sync += [cpl_valid.eq(1), cpl_pl.eq(self.cpl_in.payload)]
        with m.Elif(self.cpl.ready):
            m.d.sync += cpl_valid.eq(0)
        return m
