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
from amaranth.utils import exact_log2

from mrcnic import wire
from .layouts import (MAX_QPS, AckRequest, Completion, PlaceCmd, RxKind, RxPacket,
                      RxQpContext)

__all__ = ["SackTracker"]

_PSN_MASK = (1 << 24) - 1


class SackTracker(wiring.Component):
    """Per-QP PSN window, duplicate detection, cumulative ACK, completions and ACK coalescing.

    Each QP keeps its expected PSN ``ePSN`` (cumulative ACK point + 1) and a
    bitmap of ``window`` PSNs starting at ``ePSN`` (a ring indexed by
    PSN mod ``window``, kept in a memory of 64-bit words), plus, per PSN slot,
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

    Attributes
    ----------
    pkt : In(stream.Signature(RxPacket))
        Validated frames (kinds DATA, PROBE).  ``ready`` is high only when the
        tracker is idle (backpressure while a packet is being processed).
    place : Out(stream.Signature(PlaceCmd))
        Exactly one per non-trimmed DATA packet, in arrival order.
    ack : Out(stream.Signature(AckRequest))
        ACK / SACK / trim-NACK / probe-reply requests for :class:`~mrcnic.rtl.ack_gen.AckGen`.
    cpl : Out(stream.Signature(Completion))
        One per completed message.
    qp_w_en, qp_w_addr, qp_w_data : In(1), In(3), In(RxQpContext)
        QP context write port: sets the QP's ``ePSN`` to ``start_psn``, clears
        its bitmap (``window``/64 cycles), MSN, ACK count and timer.  Write a
        QP's context only while no packet of it is in flight.
    ack_every : In(8)
        Coalescing count ``N`` (packets).
    ack_timeout : In(16)
        Coalescing timeout ``T`` (cycles).
    accepted, duplicates, out_of_window, completions, acks, nacks : Out(32)
        Event counters (wrap around).

    Latency and throughput: a packet is taken when the tracker is idle or in
    the cycle it finishes the previous one; its PlaceCmd / NACK is
    registered one cycle later.  A packet that triggers no ACK and slides
    ``ePSN`` by at most one (or not at all) takes 1 cycle, unless ePSN
    crosses a 64-PSN word boundary (+1); an ACK or probe reply costs 1 more
    cycle, each extra PSN passed by the slide 1 more (measured: 1.1 cycles
    per packet in order with ``ack_every`` = 8, 1.4 for a shuffled
    64-packet message).  ``pkt.ready`` is low while busy, while a QP's bitmap
    is cleared and while a timer ACK is being built.  Output streams are
    registered; the tracker stalls (never drops) while an output is full.
    """

    def __init__(self, qps: int = 8, window: int = 256):
        if not 1 <= qps <= MAX_QPS:
            raise ValueError(f"qps must be 1..{MAX_QPS}, not {qps}")
        if window < 64 or window > 4096 or window & (window - 1):
            raise ValueError(f"window must be a power of two in 64..4096, not {window}")
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
        nwords = window // 64
        wbits = exact_log2(window)

        # ---- per-QP state --------------------------------------------------
        epsn = Array(Signal(24, name=f"epsn{i}") for i in range(qps))
        qvalid = Array(Signal(name=f"qvalid{i}") for i in range(qps))
        msn = Array(Signal(24, name=f"msn{i}") for i in range(qps))
        unacked = Array(Signal(8, name=f"unacked{i}") for i in range(qps))
        armed = Array(Signal(name=f"armed{i}") for i in range(qps))
        timer = Array(Signal(16, name=f"timer{i}") for i in range(qps))
        clr_pend = Array(Signal(name=f"clr_pend{i}") for i in range(qps))
        last_ev = Array(Signal(32, name=f"last_ev{i}") for i in range(qps))
        last_port = Array(Signal(3, name=f"last_port{i}") for i in range(qps))

        # ---- memories: bitmap words and per-PSN message flags -------------
        m.submodules.bitmap = bitmap = memory.Memory(shape=64, depth=qps * nwords, init=[])
        bm_w = bitmap.write_port()
        bm_a = bitmap.read_port(transparent_for=(bm_w,))    # word of PSN / ePSN
        bm_b = bitmap.read_port(transparent_for=(bm_w,))    # word of ePSN + 64
        flag_layout = data.StructLayout({"last": 1, "has_imm": 1, "imm": 32})
        m.submodules.flags = flags = memory.Memory(shape=flag_layout, depth=qps * window, init=[])
        fl_w = flags.write_port()
        fl_r = flags.read_port(transparent_for=(fl_w,))

        def word_addr(qp, psn):
            word = psn[6:wbits] if nwords > 1 else Const(0, 1)
            return qp * nwords + word

        def slot_addr(qp, psn):
            return qp * window + psn[:wbits]

        def one_hot(psn):       # the PSN's bit in its bitmap word
            return Const(1, 64) << psn[:6]

        rd_qp = Signal(3)
        rd_psn = Signal(24)
        rd_psn_b = Signal(24)
        m.d.comb += [
            rd_psn_b.eq(rd_psn + 64),
            bm_a.addr.eq(word_addr(rd_qp, rd_psn)),
            bm_b.addr.eq(word_addr(rd_qp, rd_psn_b)),
            fl_r.addr.eq(slot_addr(rd_qp, rd_psn)),
        ]

        # ---- output stream registers ----------------------------------------
        for port in (self.place, self.ack, self.cpl):
            with m.If(port.ready):
                m.d.sync += port.valid.eq(0)
        place_free = ~self.place.valid | self.place.ready
        ack_free = ~self.ack.valid | self.ack.ready
        cpl_free = ~self.cpl.valid | self.cpl.ready

        # ---- ACK coalescing timers ------------------------------------------
        timeout = Signal(qps)
        for i in range(qps):
            with m.If(armed[i] & (timer[i] != 0)):
                m.d.sync += timer[i].eq(timer[i] - 1)
            m.d.comb += timeout[i].eq(armed[i] & (timer[i] == 0))
        to_qp = Signal(3)
        for i in reversed(range(qps)):
            with m.If(timeout[i]):
                m.d.comb += to_qp.eq(i)
        clr_any = Signal()
        clr_qp = Signal(3)
        for i in reversed(range(qps)):
            with m.If(clr_pend[i]):
                m.d.comb += [clr_any.eq(1), clr_qp.eq(i)]

        # ---- packet / ACK context registers -------------------------------
        cur = Signal(RxPacket)
        q = Signal(3)                  # QP being worked on
        ack_need = Signal()
        ack_probe = Signal()
        ack_flags = Signal(8)
        ack_ev = Signal(32)
        ack_port = Signal(3)
        ack_ts = Signal(32)
        clr_word = Signal(range(nwords + 1))

        def count(counter):
            m.d.sync += counter.eq(counter + 1)

        e_cur = epsn[cur.qp]
        off = Signal(24)
        m.d.comb += off.eq(cur.psn - e_cur)
        qp_ok = (cur.qp < qps) & qvalid[cur.qp]
        in_win = off < window
        behind = off[23]
        bit_cur = bm_a.data.bit_select(cur.psn[:6], 1)
        is_new = Signal()
        is_dup = Signal()
        m.d.comb += [
            is_new.eq(qp_ok & in_win & ~bit_cur),
            is_dup.eq(qp_ok & (behind | (in_win & bit_cur))),
        ]
        at_e = off == 0
        n_unacked = Signal(9)
        m.d.comb += n_unacked.eq(unacked[cur.qp] + 1)

        e_q = epsn[q]
        bit_e = bm_a.data.bit_select(e_q[:6], 1)
        window_bits = Signal(64)
        m.d.comb += window_bits.eq(Cat(bm_a.data, bm_b.data) >> e_q[:6])
        flag_e = fl_r.data

        def take_packet():
            m.d.comb += [self.pkt.ready.eq(1),
                         rd_qp.eq(self.pkt.payload.qp), rd_psn.eq(self.pkt.payload.psn)]
            with m.If(self.pkt.valid):
                m.d.sync += [cur.eq(self.pkt.payload), q.eq(self.pkt.payload.qp)]
                m.next = "CHECK"

        def finish():
            # Back to IDLE, or straight on with the next packet when nothing else is pending.
            m.next = "IDLE"
            with m.If(~clr_any & ~timeout.any()):
                take_packet()

        with m.FSM():
            with m.State("IDLE"):
                with m.If(clr_any):
                    m.d.sync += [q.eq(clr_qp), clr_word.eq(0)]
                    m.next = "CLEAR"
                with m.Elif(timeout.any()):
                    m.d.comb += [rd_qp.eq(to_qp), rd_psn.eq(epsn[to_qp])]
                    m.d.sync += [q.eq(to_qp), ack_need.eq(1), ack_probe.eq(0), ack_flags.eq(0),
                                 ack_ev.eq(last_ev[to_qp]), ack_port.eq(last_port[to_qp]),
                                 ack_ts.eq(0)]
                    m.next = "ADVANCE"
                with m.Else():
                    take_packet()

            with m.State("CHECK"):
                m.d.comb += [rd_qp.eq(cur.qp), rd_psn.eq(cur.psn)]   # hold while stalled
                m.d.sync += [ack_ev.eq(cur.ev), ack_port.eq(cur.port), ack_ts.eq(0),
                             ack_probe.eq(0)]
                with m.If(cur.kind == RxKind.DATA):
                    with m.If(cur.trimmed):
                        with m.If(~qp_ok):
                            count(self.out_of_window)
                            finish()
                        with m.Elif(ack_free):
                            m.d.sync += [
                                self.ack.valid.eq(1),
                                self.ack.payload.qp.eq(cur.qp),
                                self.ack.payload.port.eq(cur.port),
                                self.ack.payload.ev.eq(cur.ev),
                                self.ack.payload.cum_psn.eq(e_cur - 1),
                                self.ack.payload.syndrome.eq(wire.AETH_NAK_PSN),
                                self.ack.payload.msn.eq(msn[cur.qp]),
                                self.ack.payload.flags.eq(wire.SACK_TRIM_NACK),
                                self.ack.payload.base_psn.eq(cur.psn),
                                self.ack.payload.bitmap.eq(0),
                                self.ack.payload.ts.eq(0),
                            ]
                            count(self.nacks)
                            finish()
                    with m.Elif(place_free & (cpl_free | ~(is_new & at_e & cur.last))):
                        m.d.sync += [
                            self.place.valid.eq(1),
                            self.place.payload.place.eq(is_new),
                            self.place.payload.addr.eq(cur.addr),
                            self.place.payload.length.eq(cur.length),
                        ]
                        m.d.comb += rd_psn.eq(e_cur)
                        trig = Signal()
                        ce = Signal()
                        m.d.comb += ce.eq(cur.ecn_ce & (is_new | is_dup))
                        m.d.sync += ack_flags.eq(Mux(ce, wire.SACK_ECN_ECHO, 0))
                        with m.If(is_new | is_dup):
                            m.d.sync += [last_ev[cur.qp].eq(cur.ev),
                                         last_port[cur.qp].eq(cur.port)]
                        with m.If(is_new):
                            count(self.accepted)
                            m.d.sync += unacked[cur.qp].eq(n_unacked)
                            with m.If(n_unacked >= self.ack_every):
                                m.d.comb += trig.eq(1)
                            with m.If(~armed[cur.qp] & (self.ack_timeout != 0)):
                                m.d.sync += [armed[cur.qp].eq(1),
                                             timer[cur.qp].eq(self.ack_timeout)]
                            with m.If(at_e):
                                m.d.comb += rd_psn.eq(cur.psn + 1)
                                m.d.sync += epsn[cur.qp].eq(cur.psn + 1)
                                with m.If(cur.last):
                                    m.d.comb += trig.eq(1)
                                    m.d.sync += [
                                        self.cpl.valid.eq(1),
                                        self.cpl.payload.qp.eq(cur.qp),
                                        self.cpl.payload.psn.eq(cur.psn),
                                        self.cpl.payload.has_imm.eq(cur.has_imm),
                                        self.cpl.payload.imm.eq(cur.imm),
                                        msn[cur.qp].eq(msn[cur.qp] + 1),
                                    ]
                                    count(self.completions)
                            with m.Else():
                                m.d.comb += [bm_w.addr.eq(word_addr(cur.qp, cur.psn)),
                                             bm_w.data.eq(bm_a.data | one_hot(cur.psn)),
                                             bm_w.en.eq(-1),
                                             fl_w.addr.eq(slot_addr(cur.qp, cur.psn)),
                                             fl_w.data.eq(Cat(cur.last, cur.has_imm, cur.imm)),
                                             fl_w.en.eq(1)]
                        with m.Elif(is_dup):
                            count(self.duplicates)
                            m.d.comb += trig.eq(1)
                        with m.Else():
                            count(self.out_of_window)
                        m.d.sync += ack_need.eq(trig | ce)
                        # In order and the next PSN not yet here: nothing to slide.
                        next_set = (cur.psn[:6] == 63) | bm_a.data.bit_select(cur.psn[:6] + 1, 1)
                        with m.If((is_new & at_e & next_set) | trig | ce):
                            m.next = "ADVANCE"
                        with m.Else():
                            finish()
                with m.Elif((cur.kind == RxKind.PROBE) & qp_ok):
                    m.d.comb += rd_psn.eq(e_cur)
                    m.d.sync += [ack_need.eq(1), ack_probe.eq(1),
                                 ack_flags.eq(wire.SACK_PROBE_REPLY), ack_ts.eq(cur.ts)]
                    m.next = "ADVANCE"
                with m.Else():
                    finish()

            with m.State("ADVANCE"):
                m.d.comb += [rd_qp.eq(q), rd_psn.eq(e_q)]
                with m.If(bit_e):
                    with m.If(cpl_free | ~flag_e.last):
                        m.d.comb += [rd_psn.eq(e_q + 1),
                                     bm_w.addr.eq(word_addr(q, e_q)),
                                     bm_w.data.eq(bm_a.data & ~one_hot(e_q)),
                                     bm_w.en.eq(-1)]
                        m.d.sync += epsn[q].eq(e_q + 1)
                        with m.If(flag_e.last):
                            m.d.sync += [
                                self.cpl.valid.eq(1),
                                self.cpl.payload.qp.eq(q),
                                self.cpl.payload.psn.eq(e_q),
                                self.cpl.payload.has_imm.eq(flag_e.has_imm),
                                self.cpl.payload.imm.eq(flag_e.imm),
                                msn[q].eq(msn[q] + 1),
                                ack_need.eq(1),
                            ]
                            count(self.completions)
                with m.Elif(~ack_need):
                    finish()
                with m.Elif(ack_free):
                    m.d.sync += [
                        self.ack.valid.eq(1),
                        self.ack.payload.qp.eq(q),
                        self.ack.payload.port.eq(ack_port),
                        self.ack.payload.ev.eq(ack_ev),
                        self.ack.payload.cum_psn.eq(e_q - 1),
                        self.ack.payload.syndrome.eq(wire.AETH_ACK),
                        self.ack.payload.msn.eq(msn[q]),
                        self.ack.payload.flags.eq(ack_flags),
                        self.ack.payload.base_psn.eq(e_q),
                        self.ack.payload.bitmap.eq(window_bits),
                        self.ack.payload.ts.eq(ack_ts),
                    ]
                    count(self.acks)
                    with m.If(~ack_probe):
                        m.d.sync += [unacked[q].eq(0), armed[q].eq(0)]
                    finish()

            with m.State("CLEAR"):
                m.d.comb += [bm_w.addr.eq(q * nwords + clr_word), bm_w.data.eq(0), bm_w.en.eq(-1)]
                m.d.sync += clr_word.eq(clr_word + 1)
                with m.If(clr_word == nwords - 1):
                    m.d.sync += clr_pend[q].eq(0)
                    m.next = "IDLE"

        # ---- QP context writes (last: they win over the FSM) ---------------
        with m.If(self.qp_w_en & (self.qp_w_addr < qps)):
            a = self.qp_w_addr
            m.d.sync += [
                epsn[a].eq(self.qp_w_data.start_psn),
                qvalid[a].eq(self.qp_w_data.valid),
                msn[a].eq(0),
                unacked[a].eq(0),
                armed[a].eq(0),
                clr_pend[a].eq(1),
            ]

        return m
