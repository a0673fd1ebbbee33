"""ACK / SACK / NACK / probe-reply frame generator.

Turns each :class:`~mrcnic.rtl.layouts.AckRequest` of the SACK tracker, with
the reverse path chosen for it by the receiving NIC's spray scheduler, into
one 102-byte frame (13 beats of 64 bits), byte-equal to
``mrcnic.wire.build_ack_frame``::

    Ether / IPv6(tc = dscp<<2 | ECT(0), fl, hlim 64) / UDP(sport, 4791, csum 0)
          / BTH(RC ACKNOWLEDGE, DestQP = peer QPN, PSN = cumulative PSN)
          / AETH(syndrome, MSN) / MRCSack(EV, flags, base PSN, bitmap, ts) / ICRC

Sources: IBTA Vol. 1 9.2 (BTH), 9.3.4 (AETH), IBTA RoCEv2 annex A17
(UDP 4791, ICRC), RFC 3168 (ECT(0)), RFC 9800 (uSID carrier arrival DA),
OCP MRC 1.0 EV format profiles (flow label / UDP source port), mrcnic wire
format v1 (MRCSack).
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic import wire
from .axis import AxiStreamSignature
from .crc import CRC32_INIT, crc32_final, crc32_update
from .layouts import MAX_PORTS, MAX_QPS, AckRequest, Decision, EvMode, NicGlobals, RxQpContext

__all__ = ["AckGen", "ACK_FRAME_BYTES"]

ACK_FRAME_BYTES = 102   #: 14 Ether + 40 IPv6 + 8 UDP + 12 BTH + 4 AETH + 20 MRCSack + 4 ICRC
_BEATS = (ACK_FRAME_BYTES + 7) // 8
_UDP_LEN = ACK_FRAME_BYTES - 14 - 40
_CRC_FIRST = 10      # ICRC covers bytes 6..97; bytes 6..9 are constant 0xFF (pseudo LRH)
_CRC_WORDS = (ACK_FRAME_BYTES - 4 - _CRC_FIRST) // 8     # 11 words of 8 bytes: 10..97


def _be(value, nbytes):
    """Bytes (8-bit slices) of ``value`` in big-endian (wire) order."""
    return [value[8 * (nbytes - 1 - i):8 * (nbytes - i)] for i in range(nbytes)]


def _c(value, nbytes):
    return _be(Const(value, 8 * nbytes), nbytes)


class AckGen(wiring.Component):
    """ACK / SACK / NACK / probe-reply frame generator, one AXI-Stream per plane.

    For each request, one ``req`` and one ``path`` item are taken together
    (both must be valid).  The frame leaves on plane ``path.entry.port`` to
    ``next_hop_mac[port]`` with IPv6 DA ``path.entry.da``; its flow label and
    UDP source port carry ``path.entry.ev`` by the QP's EV mode (SRV6/STEV:
    fl = EV[19:0], sport = 0xC000 | EV[31:20]; UDP: fl = 0, sport = 0xC000 |
    EV[13:0]).  The MRCSack echoes ``req.ev`` (the data's EV, not the ACK's
    own).  BTH.DestQP = the QP's ``peer_qpn``, BTH.PSN = ``req.cum_psn``.
    The ICRC (IBTA A17.3.3) is computed over the arrival form: in SRV6 mode
    the DA's 32-bit locator block followed by the QP's ``peer_usid`` and
    zeros (the peer NIC's own uSID, what the DA has become at arrival); in
    STEV/UDP mode the DA itself.

    ACKs carry no SRH in wire format v1: a path entry with ``n_carriers`` > 1
    (or a ``port`` >= ``ports``) cannot carry an ACK; the request is consumed,
    nothing is sent and ``dropped`` counts it.

    Parameters
    ----------
    ports : int
        Planes, 1..8: one output stream each.
    qps : int
        QP contexts, 1..8.

    Attributes
    ----------
    req : In(stream.Signature(AckRequest))
        ACK requests from the SACK tracker.
    path : In(stream.Signature(Decision))
        The reverse path of each ACK, one per request (spray scheduler output).
    globals : In(NicGlobals)
        Source MAC, source IPv6 address, DSCP (static configuration).
    next_hop_mac : In(data.ArrayLayout(48, ports))
        Next-hop (leaf switch) MAC of each plane.
    qp_w_en, qp_w_addr, qp_w_data : In(1), In(3), In(RxQpContext)
        QP table write port (``peer_qpn``, ``mode``, ``peer_usid`` are used).
    m_axis_p0 .. m_axis_p{ports-1} : Out(AxiStreamSignature(64))
        Frames, byte lane 0 first on the wire; 13 beats, the last with
        ``tkeep`` = 0x3F; no idle beat inside a frame.
    sent, dropped : Out(32)
        Frames sent; requests dropped (path with an SRH or a bad port).

    Latency and throughput: the first beat is valid the cycle after
    ``req``/``path`` are taken; one frame at a time, so a new request is
    taken the cycle after the last beat's handshake (14 cycles per ACK with
    the sink always ready).  ``tvalid`` never waits on ``tready``.
    """

    def __init__(self, ports: int = 4, qps: int = MAX_QPS):
        if not 1 <= ports <= MAX_PORTS:
            raise ValueError(f"ports must be 1..{MAX_PORTS}, not {ports}")
        if not 1 <= qps <= MAX_QPS:
            raise ValueError(f"qps must be 1..{MAX_QPS}, not {qps}")
        self.ports, self.qps = ports, qps
        members = {
            "req": In(stream.Signature(AckRequest)),
            "path": In(stream.Signature(Decision)),
            "globals": In(NicGlobals),
            "next_hop_mac": In(data.ArrayLayout(48, ports)),
            "qp_w_en": In(1),
            "qp_w_addr": In(3),
            "qp_w_data": In(RxQpContext),
            "sent": Out(32),
            "dropped": Out(32),
        }
        for i in range(ports):
            members[f"m_axis_p{i}"] = Out(AxiStreamSignature(64))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()

        m.submodules.qp_table = qp_table = memory.Memory(shape=RxQpContext, depth=self.qps, init=[])
        qp_wr = qp_table.write_port()
        qp_rd = qp_table.read_port(domain="comb")
        m.d.comb += [qp_wr.addr.eq(self.qp_w_addr), qp_wr.data.eq(self.qp_w_data),
                     qp_wr.en.eq(self.qp_w_en & (self.qp_w_addr < self.qps))]

        req = Signal(AckRequest)
        path = Signal(Decision)
        busy = Signal()
        beat = Signal(range(_BEATS))
        crc = Signal(32)
        crc_i = Signal(range(_CRC_WORDS + 1))
        m.d.comb += qp_rd.addr.eq(req.qp)
        ctx = qp_rd.data
        g = self.globals
        ent = path.entry

        # ---- the frame, as bytes (wire order) and its ICRC view -------------
        srv6 = ctx.mode == EvMode.SRV6
        udp = ctx.mode == EvMode.UDP
        tc = Cat(Const(wire.ECN_ECT0, 2), g.dscp)
        fl = Mux(udp, 0, ent.ev[:20])
        sport = Cat(Mux(udp, ent.ev[:14], ent.ev[20:32]), Const(0b11, 2))
        arrival_da = Mux(srv6, Cat(Const(0, 80), ctx.peer_usid, ent.da[96:128]), ent.da)
        ver_tc_fl = Cat(fl, tc, Const(6, 4))                    # 32 bits
        frame = (
            _be(self.next_hop_mac[ent.port], 6) + _be(g.src_mac, 6) + _c(0x86DD, 2)
            + _be(ver_tc_fl, 4) + _c(_UDP_LEN, 2) + _c(17, 1) + _c(64, 1)
            + _be(g.src_ip, 16) + _be(ent.da, 16)
            + _be(sport, 2) + _c(wire.ROCEV2_PORT, 2) + _c(_UDP_LEN, 2) + _c(0, 2)
            + _c(wire.OP_ACK, 1) + _c(0, 1) + _c(0xFFFF, 2) + _c(0, 1)
            + _be(ctx.peer_qpn, 3) + _c(0, 1) + _be(req.cum_psn, 3)
            + _be(req.syndrome, 1) + _be(req.msn, 3)
            + _be(req.ev, 4) + _be(req.flags, 1) + _be(req.base_psn, 3)
            + _be(req.bitmap, 8) + _be(req.ts, 4)
        )
        assert len(frame) == ACK_FRAME_BYTES - 4
        view = list(frame)
        view[6:14] = _c(0xFFFFFFFFFFFFFFFF, 8)                 # pseudo LRH
        view[14:18] = _c(0x6FFFFFFF, 4)                         # version, TC, flow label
        view[21] = Const(0xFF, 8)                               # hop limit
        view[38:54] = _be(arrival_da, 16)                       # DA at arrival
        view[60:62] = _c(0xFFFF, 2)                             # UDP checksum
        view[66] = Const(0xFF, 8)                               # BTH FECN/BECN/resv6

        # ICRC: bytes 6..9 folded in at the start (constant), then one 8-byte word
        # of bytes 10..97 per cycle, independently of tready; it is done after 11
        # cycles, before the last beat (beat 12) can be presented.
        words = Array(Cat(*view[_CRC_FIRST + 8 * k:_CRC_FIRST + 8 * k + 8])
                      for k in range(_CRC_WORDS))
        word = Signal(64)
        m.d.comb += word.eq(words[crc_i])
        with m.If(busy & (crc_i != _CRC_WORDS)):
            m.d.sync += [crc.eq(crc32_update(crc, word, 8)), crc_i.eq(crc_i + 1)]
        icrc = crc32_final(crc)
        wire_bytes = frame + [icrc[8 * i:8 * i + 8] for i in range(4)]   # ICRC little-endian
        wire_bytes += [Const(0, 8)] * (8 * _BEATS - len(wire_bytes))
        beats = Array(Cat(*wire_bytes[8 * b:8 * b + 8]) for b in range(_BEATS))

        # ---- output routing --------------------------------------------------
        tdata = Signal(64)
        m.d.comb += tdata.eq(beats[beat])
        out_ready = Signal()
        is_last = beat == _BEATS - 1
        for i in range(self.ports):
            port = getattr(self, f"m_axis_p{i}")
            sel = ent.port == i
            m.d.comb += [
                port.tdata.eq(tdata),
                port.tkeep.eq(Mux(is_last, (1 << (ACK_FRAME_BYTES - 8 * (_BEATS - 1))) - 1, 0xFF)),
                port.tlast.eq(is_last),
                port.tvalid.eq(busy & sel),
            ]
            with m.If(sel):
                m.d.comb += out_ready.eq(port.tready)

        # ---- control -----------------------------------------------------------
        take = Signal()
        m.d.comb += [
            take.eq(~busy & self.req.valid & self.path.valid),
            self.req.ready.eq(take),
            self.path.ready.eq(take),
        ]
        with m.If(take):
            m.d.sync += [req.eq(self.req.payload), path.eq(self.path.payload),
                         beat.eq(0), crc_i.eq(0),
                         crc.eq(crc32_update(Const(CRC32_INIT, 32), Const(0xFFFFFFFF, 32), 4))]
            pe = self.path.payload.entry
            with m.If((pe.n_carriers > 1) | (pe.port >= self.ports)):
                m.d.sync += self.dropped.eq(self.dropped + 1)
            with m.Else():
                m.d.sync += busy.eq(1)
        with m.If(busy & out_ready):
            m.d.sync += beat.eq(beat + 1)
            with m.If(is_last):
                m.d.sync += [busy.eq(0), self.sent.eq(self.sent + 1)]

        return m
