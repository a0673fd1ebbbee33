"""Receive-side reorder / SACK tracker: per-QP PSN window, duplicates, completions, ACK policy.

MRC sprays the packets of a message over many paths, so they arrive in any
order; every data packet carries its own RETH and is placed at once.  This
block decides, per packet, whether its payload is new (place it), a
duplicate or out of the window (discard it), slides the cumulative ACK
point, raises one completion per message once every PSN up to its last one
has arrived, and asks the ACK generator for ACK / SACK / trim-NACK /
probe-reply frames.

Sources: IBTA Vol. 1 9.7 (RC PSN sequencing, duplicate detection, AETH
syndromes, MSN), MRC (out-of-order placement, SACK echoing the EV, trim
NACK, EV probes), mrcnic wire format v1 (``mrcnic.wire.MRCSack``).
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from mrcnic import wire
from .layouts import (MAX_QPS, AckRequest, Completion, PlaceCmd, RxKind, RxPacket,
                      RxQpContext)
from .params import NicParams, check_qps, check_window, param

__all__ = ["SackTracker"]

_PSN_MASK = (1 << 24) - 1
_WLOG = 4                   #: bitmap words are 2**_WLOG = 16 PSNs
_W = 1 << _WLOG
_ACK_READS = 64 // _W + 1    #: bitmap words read per ACK (64 bits from any offset)
_ACK_LEAD = _ACK_READS       #: cycles a timer ACK is started before its timer expires


def _window(m, pair, shift):
    """Bits ``shift`` .. ``shift`` + 15 of the 32-bit ``pair``: a barrel shifter, largest
    step first, each stage only as wide as the later stages need."""
    value = pair
    for k in reversed(range(_WLOG)):
        step = 1 << k
        stage = Signal(_W + step - 1, name=f"window_s{k}")  # bits the smaller steps reach
        m.d.comb += stage.eq(Mux(shift[k], value[step:], value[:len(stage)]))
        value = stage
    return value


class SackTracker(wiring.Component):
    """Per-QP PSN window, duplicate detection, cumulative ACK, completions and ACK coalescing.

    Each QP keeps its expected PSN ``ePSN`` (cumulative ACK point + 1) and a
    bitmap of ``window`` PSNs starting at ``ePSN`` (a ring indexed by
    PSN mod ``window``, kept in a memory of 16-bit words), plus, per PSN slot,
    the last-of-message flag (BTH AckReq) and the immediate data of a
    Write-with-Immediate.  PSN arithmetic is modulo 2**24.  With
    ``off = (PSN - ePSN) mod 2**24``:

    * ``off < window`` and bit clear: **new** -> ``PlaceCmd(place=1)``, counted in ``accepted``;
    * ``off < window`` and bit set, or ``off >= 2**23`` (behind ``ePSN``): **duplicate**
      -> ``PlaceCmd(place=0)``, counted in ``duplicates``;
    * otherwise, or for a QP written with ``valid`` = 0 / never written /
      ``qp >= qps``: **out of window**
      -> ``PlaceCmd(place=0)``, counted in ``out_of_window``, no ACK.

    When the PSN at ``ePSN`` has arrived, ``ePSN`` slides forward one PSN per
    cycle while the next bit is set; every PSN it passes that is flagged last
    raises exactly one :class:`Completion` ``{qp, psn, has_imm, imm}`` and
    increments the QP's MSN, so a completion appears only once the last
    missing PSN of its message has arrived, in any arrival order.

    Trimmed DATA (``RxPacket.trimmed``) is never placed and changes no state:
    it yields an immediate NACK ``{syndrome AETH_NAK_PSN, flags TRIM_NACK,
    base_psn = trimmed PSN, bitmap 0, cum_psn = ePSN-1, ev/port echoed}``
    (counted in ``nacks``).  PROBE yields an immediate probe reply
    ``{AETH_ACK, flags PROBE_REPLY, ev = probe EV, ts echoed, base_psn = ePSN,
    bitmap}`` (counted in ``acks``; it does not reset the coalescing state).
    ACK-kind frames are accepted and ignored.

    ACK coalescing policy (per QP).  Let ``N = ack_every`` and
    ``T = ack_timeout``.  An ACK ``{AETH_ACK, cum_psn = ePSN-1, base_psn =
    ePSN, bitmap bit i = PSN ePSN+i received, msn = completed messages mod
    2**24}`` is requested

    * when the count of new DATA packets since the QP's last ACK reaches
      ``N`` (``N`` = 0 or 1: every packet);
    * ``T`` cycles after the first new DATA packet not yet acknowledged
      (``T`` = 0 disables the timer);
    * at once when a message completes, when a duplicate arrives (the sender
      may have missed an ACK) and when the packet arrived CE-marked (flags
      ``SACK_ECN_ECHO``).

    ``ev``/``port`` of an ACK are those of the data packet that triggered it
    (the most recent data packet of the QP for a timer ACK).  Any ACK resets
    the QP's count and timer.

    Parameters
    ----------
    qps : int
        QP contexts, 1..8.
    window : int
        PSNs tracked per QP, a power of two, 64..4096.
    params : NicParams
        The NIC's parameter set (:class:`~mrcnic.rtl.params.NicParams`): ``qps`` and
        ``window`` come from it (a keyword given as well must agree).  Standalone: leave it
        out; the keywords are checked by the same rules (:mod:`mrcnic.rtl.params`).

    Attributes
    ----------
    pkt : In(stream.Signature(RxPacket))
        Validated frames (kinds DATA, PROBE), through a one-packet input register:
        ``ready`` is high while that register is empty and no slide / ACK / bitmap
        clear is in progress (registered, no combinational path from any input).
    place : Out(stream.Signature(PlaceCmd))
        Exactly one per non-trimmed DATA packet, in arrival order.
    ack : Out(stream.Signature(AckRequest))
        ACK / SACK / trim-NACK / probe-reply requests for :class:`~mrcnic.rtl.ack_gen.AckGen`.
    cpl : Out(stream.Signature(Completion))
        One per completed message.
    qp_w_en, qp_w_addr, qp_w_data : In(1), In(3), In(RxQpContext)
        QP context write port: sets the QP's ``ePSN`` to ``start_psn``, clears
        its bitmap (``window``/16 cycles), MSN, ACK count and timer.  Write a
        QP's context only while no packet of it is in flight.
    ack_every : In(8)
        Coalescing count ``N`` (packets).
    ack_timeout : In(16)
        Coalescing timeout ``T`` (cycles).
    accepted, duplicates, out_of_window, completions, acks, nacks : Out(32)
        Event counters (wrap around).

    Latency and throughput: a packet is first registered in an input register
    (``pkt.ready`` is that register's emptiness, low as well while a slide, an
    ACK or a bitmap clear is in progress: a flip-flop and one LUT, never a
    sink's ready).  It is taken from there when the tracker is idle or in the
    cycle it finishes the previous one; it is classified in the next cycle
    (window, ePSN, bitmap bits and count compare registered) and acted on in
    the one after, which registers its PlaceCmd.  One QP is worked on at a
    time, so the per-QP arithmetic (PSN compare, ePSN +/- 1, MSN + 1) exists
    once; ``e1`` = ePSN + 1 of that QP is a register.  The slide works on a
    registered copy of ePSN's bitmap word (received bits, last-of-message bits,
    a one-hot position and the bits at and after ePSN, all flip-flops), so a
    slide step is decided from flip-flops.  A packet that triggers no ACK and
    slides ``ePSN`` by at most one (or not at all) takes 2 cycles, +2 when ePSN
    crosses into the next 16-PSN word (it is loaded from the bitmap memory);
    the last PSN of a message arriving in order +3; each extra PSN passed by
    the slide +1; an ACK, NACK or probe reply +5 (its 64-bit bitmap is read 16
    bits per cycle from the bitmap memory into the output register).
    Measured: 2.66 cycles per packet in order with ``ack_every`` = 8, 2.80 for
    a shuffled 64-packet message; the board's datapath has at least 8 cycles
    per packet.  A timer ACK is started 5 cycles before its timer expires, so
    it leaves about ``T`` cycles after arming.  A completion leaves 2 cycles
    after ePSN passes its PSN (its immediate data comes from the block RAM's
    output register; the RAM is written one cycle after the decision).  An
    output register is refilled at the earliest the cycle after it was taken
    (its "free" is its valid flip-flop); the tracker stalls (never drops)
    while an output is full.  The bitmap (received and last-of-message bits,
    16 PSNs a word) is distributed RAM read through a registered address, so
    a word written at a clock edge is read back in the next cycle.
    """

    def __init__(self, qps: "int | None" = None, window: "int | None" = None, *,
                 params: "NicParams | None" = None):
        qps = check_qps(param(params, "qps", qps, MAX_QPS))
        window = check_window(param(params, "window", window, 256))
        self.qps, self.window = qps, window
        super().__init__({
            "pkt": In(stream.Signature(RxPacket)),
            "place": Out(stream.Signature(PlaceCmd)),
            "ack": Out(stream.Signature(AckRequest)),
            "cpl": Out(stream.Signature(Completion)),
            "qp_w_en": In(1),
            "qp_w_addr": In(3),
            "qp_w_data": In(RxQpContext),
            "ack_every": In(8),
            "ack_timeout": In(16),
            "accepted": Out(32),
            "duplicates": Out(32),
            "out_of_window": Out(32),
            "completions": Out(32),
            "acks": Out(32),
            "nacks": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        qps, window = self.qps, self.window
        wbits = exact_log2(window)
        nwords = window >> _WLOG                  # bitmap words per QP
        qbits = ceil_log2(qps)

        q = Signal(3)                   # QP being worked on
        # Per-QP state is read and written for QP q only (one QP's arithmetic, shared).
        # Every write is guarded by qp_ok (q < qps), so q's low bits select the QP.
        qi = q[:qbits] if qps & (qps - 1) == 0 else q

        def per_qp(width, name, **kw):
            return [Signal(width, name=f"{name}{i}", **kw) for i in range(qps)]

        def sel(regs, index=None):
            return regs[0] if qps == 1 else Array(regs)[qi if index is None else index]

        # (ePSN, MSN and the count are set by the QP write before the QP is valid.)
        epsn = per_qp(24, "epsn", reset_less=True)
        qvalid = per_qp(1, "qvalid")
        msn = per_qp(24, "msn", reset_less=True)
        unacked = per_qp(8, "unacked", reset_less=True)
        armed = per_qp(1, "armed")
        expired = per_qp(1, "expired")
        deadline = per_qp(16, "deadline", reset_less=True)
        clr_pend = per_qp(1, "clr_pend")
        last_ev = per_qp(32, "last_ev", reset_less=True)
        last_port = per_qp(3, "last_port", reset_less=True)

        # ---- memories: bitmap words and per-PSN message flags -------------
        # Bitmap words: bits 0..15 received, bits 16..31 last-of-message (valid where received).
        # Distributed RAM read asynchronously through a registered address (rd_addr): a word
        # written at a clock edge is read back in the next cycle, no forwarding needed.
        m.submodules.bitmap = bitmap = memory.Memory(shape=2 * _W, depth=qps * nwords, init=[])
        bm_w = bitmap.write_port()
        bm_r = bitmap.read_port(domain="comb")
        # Immediate data per PSN slot (block RAM).  A slot is never read for use in the cycle
        # it is written, so no read/write collision logic.  It is always addressed by PSN e of
        # QP q (registers) and its read data is registered right away (the EBR output
        # register): the flags of PSN e in cycle c are in flag_q in cycle c + 2, when the
        # completion passed in cycle c (cpl_we) is loaded into the cpl output register.
        flag_layout = data.StructLayout({"has_imm": 1, "imm": 32})
        m.submodules.flags = flags = memory.Memory(shape=flag_layout, depth=qps * window, init=[],
                                                   attrs={"no_rw_check": 1})
        fl_w = flags.write_port()
        fl_r = flags.read_port()

        def word_addr(qp, lo):          # lo: PSN bits [0, wbits) (or a word index << _WLOG)
            return Cat(lo[_WLOG:wbits], qp[:qbits])

        def slot_addr(qp, lo):
            return Cat(lo[:wbits], qp[:qbits])

        def one_hot(psn):               # the PSN's bit in its bitmap word
            return (Const(1, _W) << psn[:_WLOG])[:_W]

        rd_qp = Signal(3)
        rd_lo = Signal(wbits)           # PSN (low bits) whose word is read in the next cycle
        rd_addr = Signal(len(bm_r.addr))
        m.d.comb += rd_qp.eq(q)
        m.d.sync += rd_addr.eq(word_addr(rd_qp, rd_lo))
        m.d.comb += bm_r.addr.eq(rd_addr)
        word = bm_r.data[:_W]           # bitmap word of the PSN presented last cycle
        last_w = bm_r.data[_W:]         # ... and its last-of-message flags
        flag_q = Signal(flag_layout, reset_less=True)
        m.d.sync += flag_q.eq(fl_r.data)

        # ---- control strobes (set by the FSM) and the registers they load ----
        take = Signal()                 # a packet is taken from nxt: cur, q
        e_we = Signal()                 # ePSN of q <- e + 1 (= e1)
        step = Signal()                 # the slide passes PSN e (e_we; cw/pos/b0/l0 move on)
        cpl_we = Signal()               # completion of PSN e (flags from memory)
        place_we = Signal()
        fl_we = Signal()                # flags of cur.psn written (one cycle later)
        ack_we = Signal()               # the ACK being built is complete
        seen_we = Signal()              # data packet new or duplicate: last EV/port of q
        new_we = Signal()               # new data packet: count it, arm the timer
        clr_done = Signal()             # the bitmap of QP q is cleared
        cnt = {name: Signal(name=f"cnt_{name}") for name in
               ("accepted", "duplicates", "out_of_window", "nacks")}

        # ---- output stream registers (payloads without reset: never seen while invalid) --
        place_pl = Signal(PlaceCmd, reset_less=True)
        ack_pl = Signal(AckRequest, reset_less=True)
        cpl_pl = Signal(Completion, reset_less=True)
        m.d.comb += [self.place.payload.eq(place_pl), self.ack.payload.eq(ack_pl),
                     self.cpl.payload.eq(cpl_pl)]
        for port in (self.place, self.ack, self.cpl):
            with m.If(port.ready):
                m.d.sync += port.valid.eq(0)
        # "Free" outputs are decided from registers only (never from a sink's ready): a
        # register is refilled at the earliest the cycle after it was taken.
        place_free = ~self.place.valid
        cpl_wait = Signal()             # a completion waits for its immediate data
        cpl_fill = Signal()             # a completion's immediate data arrives from flag_q
        cpl_free = ~self.cpl.valid & ~cpl_wait & ~cpl_fill

        # ---- input register: pkt.ready from a flip-flop --------------------
        nxt = Signal(RxPacket, reset_less=True)
        nxt_valid = Signal()
        slow = Signal()                 # a slide, an ACK or a bitmap clear is in progress
        m.d.comb += self.pkt.ready.eq(~nxt_valid & ~slow)
        # Loaded on the handshake only: a packet presented while ``slow`` (ready low) is
        # not taken, so loading it then would take it twice (once more when ready rises).
        # (take = take_ok & nxt_valid: full, the register empties when taken; empty, it fills
        # on the handshake.)
        take_ok = Signal()              # the FSM takes the waiting packet, if any
        with m.If(nxt_valid):
            m.d.sync += nxt_valid.eq(~take_ok)
        with m.Else():
            m.d.sync += nxt_valid.eq(self.pkt.valid & ~slow)
        # Registers CLASS needs, computed from the packet as it enters nxt (CLASS reads the
        # packet from nxt: nxt still holds it in the cycle after it was taken).
        nxt_hm1 = Signal(24 - wbits, reset_less=True)   # PSN bits [wbits, 24) of nxt, minus 1
        nxt_oh = Signal(_W, reset_less=True)    # nxt's bit in its bitmap word (one-hot)
        nxt_kd = Signal(reset_less=True)        # nxt is a DATA packet, not trimmed
        with m.If(self.pkt.ready):
            m.d.sync += [nxt.eq(self.pkt.payload),
                         nxt_hm1.eq(self.pkt.payload.psn[wbits:] - 1),
                         nxt_oh.eq(one_hot(self.pkt.payload.psn)),
                         nxt_kd.eq((self.pkt.payload.kind == RxKind.DATA)
                                   & ~self.pkt.payload.trimmed)]

        # ---- packet / ACK context registers -------------------------------
        # cur: the packet after CLASS (CHECK .. the next take).  It is copied from nxt at
        # the end of CLASS, so its load enable is one flip-flop (``in_class``), not the
        # FSM's take decision; CLASS itself reads nxt (unchanged until CLASS ends).
        cur = Signal(RxPacket, reset_less=True)
        in_class = Signal()             # the FSM is in CLASS (= take one cycle ago)
        ack_need = Signal()
        ack_probe = Signal()            # the ACK being built is a probe reply
        ack_nack = Signal()             # ... a trim NACK
        ack_timer = Signal()            # ... a timer ACK (ev/port of the QP's last data packet)
        ack_flags = Signal(8)
        clr_word = Signal(range(nwords + 1))
        j = Signal(range(_ACK_READS + 1))   # ACK build: bitmap words read so far
        j_last = Signal()               # ... j == _ACK_READS (registered with j)
        ack_lo = Signal(wbits)          # ... PSN (low bits) of the word read next: e + 16 j
        prev = Signal(_W, reset_less=True)

        cur_kd = Signal(reset_less=True)        # cur is a DATA packet, not trimmed
        cur_dt = Signal(reset_less=True)        # ... a trimmed DATA packet
        cur_pr = Signal(reset_less=True)        # ... a PROBE
        m.d.sync += in_class.eq(take)
        with m.If(take):
            m.d.sync += [q.eq(nxt.qp), ack_timer.eq(0)]
        with m.If(in_class):
            m.d.sync += [cur.eq(nxt), cur_kd.eq(nxt_kd),
                         cur_dt.eq((nxt.kind == RxKind.DATA) & nxt.trimmed),
                         cur_pr.eq(nxt.kind == RxKind.PROBE)]

        # One QP's arithmetic, shared by every state: e = ePSN of QP q, e1 = e + 1 (register:
        # loaded in CLASS, stepped with every slide).
        e = sel(epsn)
        e1 = Signal(24, reset_less=True)    # (in ACK: e - 1, the cumulative ACK PSN)
        e_load = Signal()               # e1 <- e +/- 1
        e_dec = Signal()
        e_pm = Signal(24)
        m.d.comb += e_pm.eq(Mux(e_load, e, e1) + Cat(Const(1, 1), e_dec.replicate(23)))
        with m.If(e_load | step):
            m.d.sync += e1.eq(e_pm)
        qp_ok = Signal()
        # Classification of the packet in ``cur``, computed in CLASS from registers and
        # registered for CHECK (ePSN, the count and the word do not change in between).
        at_e = Signal()
        cnt_hit = Signal()              # the count of new packets reaches ack_every
        next_set = Signal()             # the PSN after cur.psn is set (in cur.psn's word)
        last_wrap = Signal()            # cur is flagged last, or the last PSN of its word
        hit_ce = Signal()               # the count reaches ack_every, or cur is CE-marked
        # (the packet's class, registered in CLASS: CHECK's decisions start at flip-flops;
        # the bitmap bit, read from the distributed RAM in CLASS, is registered on its own)
        bit_cur = Signal()              # cur's bit is set in the bitmap
        new_w = Signal()                # qp_ok and cur in the window
        dup_w = Signal()                # qp_ok and cur behind ePSN
        is_seen = Signal()              # is_new | is_dup (without the bitmap bit)
        new_data = Signal()             # new_w for a non-trimmed DATA packet not yet placed
        is_new = Signal()
        is_dup = Signal()
        # CHECK's "nothing more to do" (no slide, no ACK) for a non-trimmed DATA packet
        fin = ~is_dup & ~(is_new & ((at_e & (last_wrap | next_set)) | hit_ce))
        m.d.comb += [
            is_new.eq(new_w & ~bit_cur),
            is_dup.eq(dup_w | (new_w & bit_cur)),
        ]
        n_unacked = Signal(9)
        m.d.comb += n_unacked.eq(sel(unacked) + 1)
        m.d.comb += fl_r.addr.eq(slot_addr(q, e))     # flags of PSN e in flag_q 2 cycles later
        msn_q = sel(msn)
        msn_inc = Signal(24)
        m.d.comb += msn_inc.eq(msn_q + 1)
        # ack_every - 1 (registered input): the count reaches N when unacked >= N - 1.
        every_m1 = Signal(8)
        every_0 = Signal()
        m.d.sync += [every_m1.eq(self.ack_every - 1), every_0.eq(self.ack_every == 0)]

        # The slide works on a registered copy of ePSN's bitmap word: cw (received bits, the
        # ones passed cleared), cl (last-of-message bits), pos (one-hot: e's bit), b0 / l0
        # (e's received / last bit) and nb / nl (those of e + 1, from cw/cl).
        cw = Signal(_W, reset_less=True)
        cl = Signal(_W, reset_less=True)
        pos = Signal(_W, reset_less=True)
        b0 = Signal(reset_less=True)
        l0 = Signal(reset_less=True)
        pos_n = Signal(_W)
        m.d.comb += pos_n.eq(pos << 1)
        nb = (cw & pos_n).any()
        nl = (cl & pos_n).any()
        with m.If(step):
            m.d.sync += [pos.eq(pos_n), b0.eq(nb), l0.eq(nl), cw.eq(cw & ~pos)]
        wrap = pos[_W - 1]              # a step passes the last PSN of the word

        # ---- ACK coalescing timers: one free-running clock, a deadline per QP --
        now = Signal(16)
        m.d.sync += now.eq(now + 1)
        # The timer ACK is started _ACK_LEAD cycles early: it leaves T cycles after arming.
        t_lead = Signal(17)
        t_now = Signal()                # the timer expires at once
        m.d.sync += [t_lead.eq(self.ack_timeout - _ACK_LEAD),
                     t_now.eq(self.ack_timeout <= _ACK_LEAD)]
        dl_new = Signal(16)
        m.d.comb += dl_new.eq(now + t_lead[:16])
        t_on = Signal()
        m.d.sync += t_on.eq(self.ack_timeout != 0)
        arm = new_we & ~sel(armed) & t_on
        timeout = Signal(qps)
        # an ACK's timer reset is applied one cycle late (tmr_rst, per QP, a register: no
        # path from the FSM's ACK decision to the timer flip-flops' enables); meanwhile the
        # timeout it clears is masked.  No new packet arms a timer in that cycle (CHECK comes
        # two cycles after the ACK at the earliest).
        tmr_rst = Signal(qps)
        for i in range(qps):
            m.d.comb += timeout[i].eq(armed[i] & expired[i] & ~tmr_rst[i])
            with m.If(armed[i] & (now == deadline[i])):
                m.d.sync += expired[i].eq(1)
        to_qp = Signal(3)
        for i in reversed(range(qps)):
            with m.If(timeout[i]):
                m.d.comb += to_qp.eq(i)
        clr_any = Signal()
        clr_qp = Signal(3)
        for i in reversed(range(qps)):
            with m.If(clr_pend[i]):
                m.d.comb += [clr_any.eq(1), clr_qp.eq(i)]

        def take_packet():
            m.d.comb += [take_ok.eq(1), take.eq(nxt_valid), rd_qp.eq(nxt.qp), rd_lo.eq(nxt.psn)]
            with m.If(nxt_valid):
                m.next = "CLASS"

        def finish():
            # Back to IDLE, or straight on with the next packet when nothing else is pending.
            m.next = "IDLE"
            with m.If(~clr_any & ~timeout.any()):
                take_packet()

        def ack_regs(lo):
            # the ACK build's counters (the first bitmap word is read at once when the
            # output is free)
            m.d.sync += [j.eq(~self.ack.valid), j_last.eq(0),
                         ack_lo.eq(lo[:wbits] + Mux(self.ack.valid, 0, _W))]

        def start_ack(lo, load=True):
            # Build an ACK next; read its first bitmap word now when the output is free.
            # (CHECK loads the counters in every cycle, ack_regs, so that their enable is
            # not its decision: they are used in ACK only.)
            m.next = "ACK"
            m.d.comb += rd_lo.eq(lo)
            if load:
                ack_regs(lo)

        # new_data is set in CLASS for a non-trimmed DATA packet of a valid QP in the window,
        # and cleared when CHECK places it (CHECK waits for place_free with it set, then
        # places the packet and leaves): new_we is one LUT
        m.d.comb += [new_we.eq(new_data & place_free & ~bit_cur), cnt["accepted"].eq(new_we)]
        with m.If(new_data & place_free):
            m.d.sync += new_data.eq(0)

        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(clr_any):
                    m.d.sync += [q.eq(clr_qp), clr_word.eq(0)]
                    m.next = "CLEAR"
                with m.Elif(timeout.any()):
                    m.d.sync += [q.eq(to_qp), ack_timer.eq(1), ack_probe.eq(0), ack_nack.eq(0),
                                 ack_flags.eq(0), j.eq(0), j_last.eq(0),
                                 ack_lo.eq(sel(epsn, to_qp)[:wbits])]
                    m.next = "ACK"
                with m.Else():
                    take_packet()

            with m.State("CLASS"):
                # word = bitmap word of the packet taken (read when it was taken); the packet
                # is still in nxt (its ready was low), copied into cur as CLASS ends.
                m.d.comb += rd_lo.eq(nxt.psn)
                lo_p, lo_e = nxt.psn[:wbits], e[:wbits]
                # off = nxt.psn - e < window: the high PSN bits equal e's, or e's + 1
                # when the low bits borrow.
                c_win = Mux(lo_p < lo_e, nxt_hm1 == e[wbits:], nxt.psn[wbits:] == e[wbits:])
                c_behind = (nxt.psn - e)[23]
                c_at_e = (nxt.psn[wbits:] == e[wbits:]) & (lo_p == lo_e)
                c_bit = (word & nxt_oh).any()
                c_ok = (q < qps) & sel(qvalid)
                m.d.sync += [
                    at_e.eq(c_at_e),
                    bit_cur.eq(c_bit),
                    new_w.eq(c_ok & c_win),
                    dup_w.eq(c_ok & c_behind),
                    new_data.eq(nxt_kd & c_ok & c_win),
                    is_seen.eq(c_ok & (c_behind | c_win)),
                    next_set.eq((word[1:] & nxt_oh[:_W - 1]).any()),
                    cnt_hit.eq(every_0 | (sel(unacked) >= every_m1)),
                    last_wrap.eq(nxt.last | nxt.psn[:_WLOG].all()),
                    hit_ce.eq(every_0 | (sel(unacked) >= every_m1) | nxt.ecn_ce),
                    qp_ok.eq(c_ok),
                    # the slide registers as if the packet were new at e
                    cw.eq(word | nxt_oh),
                    cl.eq(Mux(nxt.last, last_w | nxt_oh, last_w & ~nxt_oh)),
                    pos.eq(nxt_oh), b0.eq(1), l0.eq(nxt.last),
                ]
                m.d.comb += e_load.eq(1)
                m.next = "CHECK"

            with m.State("CHECK"):
                m.d.comb += rd_lo.eq(cur.psn)                     # hold while stalled
                m.d.sync += [ack_probe.eq(0), ack_nack.eq(0)]
                # the ACK's first word: e's (after a new in-order data packet the ACK starts
                # at e + 1, in the same word: a slide into the next word goes through LOAD)
                ack_regs(e)
                with m.If(cur_dt):
                    with m.If(~qp_ok):
                        m.d.comb += cnt["out_of_window"].eq(1)
                        finish()
                    with m.Else():
                        m.d.sync += [ack_nack.eq(1), ack_flags.eq(wire.SACK_TRIM_NACK)]
                        start_ack(e, load=False)
                with m.Elif(cur_kd):
                    with m.If(place_free):
                        m.d.comb += [place_we.eq(1), seen_we.eq(is_seen)]
                        trig = Signal()
                        ce = Signal()
                        m.d.comb += ce.eq(cur.ecn_ce & is_seen)
                        m.d.sync += ack_flags.eq(Mux(ce, wire.SACK_ECN_ECHO, 0))
                        with m.If(is_new):
                            # (new_we and the accepted count: outside the FSM)
                            with m.If(cnt_hit):
                                m.d.comb += trig.eq(1)
                            with m.If(at_e & ~cur.last):
                                m.d.comb += [e_we.eq(1), step.eq(1)]   # passed at once
                            with m.Else():      # (the last PSN of a message completes in ADVANCE)
                                m.d.comb += [bm_w.en.eq(1), fl_we.eq(1)]
                        with m.Elif(is_dup):
                            m.d.comb += [cnt["duplicates"].eq(1), trig.eq(1)]
                        with m.Else():
                            m.d.comb += cnt["out_of_window"].eq(1)
                        m.d.sync += ack_need.eq(trig | ce)
                        # Nothing more (no slide, no ACK): decided from registers only.
                        # In order: slide on through the registered word (or the next word).
                        with m.If(fin):
                            finish()
                        with m.Elif(is_new & at_e & cur.last):
                            m.next = "SETTLE"
                        with m.Elif(is_new & at_e & wrap):
                            m.d.comb += rd_lo.eq(e1)
                            m.next = "LOAD"
                        with m.Elif(is_new & at_e & next_set):
                            m.next = "ADVANCE"
                        with m.Elif(trig | ce):
                            start_ack(e, load=False)
                        with m.Else():
                            finish()
                with m.Elif(cur_pr & qp_ok):
                    m.d.sync += [ack_probe.eq(1), ack_flags.eq(wire.SACK_PROBE_REPLY)]
                    start_ack(e, load=False)
                with m.Else():
                    finish()

            with m.State("SETTLE"):
                m.next = "ADVANCE"

            with m.State("LOAD"):
                # word = bitmap word of e (its first PSN): load the slide registers.
                m.d.sync += [cw.eq(word), cl.eq(last_w), pos.eq(1), b0.eq(word[0]),
                             l0.eq(last_w[0])]
                m.next = "ADVANCE"

            with m.State("ADVANCE"):
                # b0 / l0: received / last bit of PSN e of QP q (registers).
                with m.If(b0):
                    with m.If(cpl_free | ~l0):
                        m.d.comb += [bm_w.en.eq(1), e_we.eq(1), step.eq(1), cpl_we.eq(l0)]
                        with m.If(l0):
                            m.d.sync += ack_need.eq(1)
                        with m.If(wrap):
                            m.d.comb += rd_lo.eq(e1)
                            m.next = "LOAD"
                with m.Elif(~ack_need):
                    finish()
                with m.Else():
                    start_ack(e)

            with m.State("ACK"):
                # Read bitmap words e>>4 .. e>>4 + 4 one per cycle (j = words already asked
                # for) and shift each pair into 16 bitmap bits: bits e .. e+63.
                # (rd_lo = e + 16 j from the register ack_lo, stepped with j)
                m.d.comb += [rd_lo.eq(ack_lo), e_load.eq(1), e_dec.eq(1)]
                with m.If((j != 0) | ~self.ack.valid):
                    m.d.sync += [j.eq(j + 1), prev.eq(word), j_last.eq(j == _ACK_READS - 1),
                                 ack_lo.eq(ack_lo + _W)]
                with m.If(j_last):
                    m.d.comb += ack_we.eq(1)
                    finish()

            with m.State("CLEAR"):
                m.d.comb += bm_w.en.eq(1)
                m.d.sync += clr_word.eq(clr_word + 1)
                with m.If(clr_word == nwords - 1):
                    m.d.comb += clr_done.eq(1)
                    m.next = "IDLE"

        m.d.comb += slow.eq(fsm.ongoing("ADVANCE") | fsm.ongoing("LOAD") | fsm.ongoing("ACK")
                            | fsm.ongoing("SETTLE")
                            | fsm.ongoing("CLEAR"))

        # Bitmap write address and data depend on the state only (the decision gates bm_w.en).
        with m.If(fsm.ongoing("CLEAR")):
            m.d.comb += [bm_w.addr.eq(Cat(clr_word[:wbits - _WLOG], q[:qbits])), bm_w.data.eq(0)]
        with m.Elif(fsm.ongoing("ADVANCE")):
            m.d.comb += [bm_w.addr.eq(word_addr(q, e)),
                         bm_w.data.eq(Cat(cw & ~pos, cl))]
        with m.Else():                  # CHECK: the updated word, as loaded into cw / cl
            m.d.comb += [bm_w.addr.eq(word_addr(q, cur.psn)), bm_w.data.eq(Cat(cw, cl))]
        # The flags write is registered (the block RAM sits far from the decision logic): it
        # lands one cycle after CHECK, so an in-order last PSN waits one cycle (SETTLE) before
        # the slide reads its flags.
        m.d.sync += [fl_w.en.eq(fl_we), fl_w.addr.eq(slot_addr(q, cur.psn)),
                     fl_w.data.eq(Cat(cur.has_imm, cur.imm))]

        # ---- datapath registers, each loaded by one strobe ------------------
        with m.If(place_we):
            m.d.sync += [
                self.place.valid.eq(1),
                place_pl.place.eq(is_new),
                place_pl.addr.eq(cur.addr),
                place_pl.length.eq(cur.length),
            ]
        m.d.sync += [cpl_wait.eq(cpl_we), cpl_fill.eq(cpl_wait)]
        with m.If(cpl_we):
            m.d.sync += [cpl_pl.qp.eq(q), cpl_pl.psn.eq(e)]
        with m.If(cpl_fill):
            m.d.sync += [
                self.cpl.valid.eq(1),
                cpl_pl.has_imm.eq(flag_q.has_imm),
                cpl_pl.imm.eq(flag_q.imm),
            ]
        chunk = Signal(_W)
        m.d.comb += chunk.eq(Mux(ack_nack, 0, _window(m, Cat(prev, word), e[:_WLOG])))
        for k in range(2, _ACK_READS + 1):
            with m.If(j == k):
                m.d.sync += ack_pl.bitmap[_W * (k - 2):_W * (k - 1)].eq(chunk)
        with m.If(ack_we):
            m.d.sync += [
                self.ack.valid.eq(1),
                ack_pl.qp.eq(q),
                ack_pl.port.eq(Mux(ack_timer, sel(last_port), cur.port)),
                ack_pl.ev.eq(Mux(ack_timer, sel(last_ev), cur.ev)),
                ack_pl.cum_psn.eq(e1),
                ack_pl.syndrome.eq(Mux(ack_nack, wire.AETH_NAK_PSN, wire.AETH_ACK)),
                ack_pl.msn.eq(msn_q),
                ack_pl.flags.eq(ack_flags),
                ack_pl.base_psn.eq(Mux(ack_nack, cur.psn, e)),
                ack_pl.ts.eq(cur.ts),
            ]
        # (after the loads: zeroing is the flip-flops' synchronous reset, no per-bit mux)
        with m.If(ack_we & ~ack_probe):
            m.d.sync += ack_pl.ts.eq(0)

        def count(counter, en):
            with m.If(en):
                m.d.sync += counter.eq(counter + 1)

        for name, strobe in cnt.items():
            count(getattr(self, name), strobe)
        count(self.completions, cpl_we)
        count(self.acks, ack_we & ~ack_nack)
        m.d.comb += cnt["nacks"].eq(ack_we & ack_nack)

        # ---- per-QP registers (QP context writes last: they win) ------------
        ack_reset = ack_we & ~ack_probe & ~ack_nack     # any ACK resets count and timer
        w = self.qp_w_data
        for i in range(qps):
            hit = qi == i if qps > 1 else Const(1)
            wr = self.qp_w_en & (self.qp_w_addr == i)
            with m.If(wr | (hit & e_we)):
                m.d.sync += epsn[i].eq(Mux(wr, w.start_psn, e1))
            with m.If(wr | (hit & cpl_we)):
                m.d.sync += msn[i].eq(Mux(wr, 0, msn_inc))
            with m.If(wr | (hit & (new_we | ack_reset))):
                m.d.sync += unacked[i].eq(Mux(wr | ack_reset, 0, n_unacked))
            with m.If(hit & seen_we):
                m.d.sync += [last_ev[i].eq(cur.ev), last_port[i].eq(cur.port)]
            m.d.sync += tmr_rst[i].eq(hit & ack_reset)
            with m.If(tmr_rst[i]):
                m.d.sync += [armed[i].eq(0), expired[i].eq(0)]
            with m.If(hit & arm):
                m.d.sync += [armed[i].eq(1), deadline[i].eq(dl_new),
                             expired[i].eq(t_now)]
            with m.If(wr):
                m.d.sync += [armed[i].eq(0), expired[i].eq(0)]
            with m.If(hit & clr_done):
                m.d.sync += clr_pend[i].eq(0)
            with m.If(wr):
                m.d.sync += [qvalid[i].eq(w.valid), clr_pend[i].eq(1)]

        return m
