"""ACK / SACK / NACK / probe-reply and EV probe frame generator.

Turns each :class:`~mrcnic.rtl.layouts.AckRequest` of the SACK tracker, with
the reverse path chosen for it by the receiving NIC's spray scheduler, into
one 102-byte frame (13 beats of 64 bits), byte-equal to
``mrcnic.wire.build_ack_frame``::

    Ether / IPv6(tc = dscp<<2 | ECT(0), fl, hlim 64) / UDP(sport, 4791, csum 0)
          / BTH(RC ACKNOWLEDGE, DestQP = peer QPN, PSN = cumulative PSN)
          / AETH(syndrome, MSN) / MRCSack(EV, flags, base PSN, bitmap, ts) / ICRC

and each :class:`ProbeFrameReq` (OCP MRC "EV probe" on one path-table entry)
into one 90-byte frame (12 beats), byte-equal to
``mrcnic.wire.build_probe_frame``::

    Ether / IPv6 / UDP / BTH(MRC_PROBE 0xC0, DestQP = peer QPN, PSN 0)
          / MRCProbe(EV, port, probe_id, ts) / ICRC

Sources: IBTA Vol. 1 9.2 (BTH), 9.3.4 (AETH), IBTA RoCEv2 annex A17
(UDP 4791, ICRC), RFC 3168 (ECT(0)), RFC 9800 (uSID carrier arrival DA),
OCP MRC 1.0 EV format profiles (flow label / UDP source port) and EV probes,
mrcnic wire format v1 (MRCSack, MRCProbe; docs/wire-format.md 11, 12).
"""

import zlib

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic import wire
from mrcnic import wire_format as wf
from .axis import AxiStreamSignature
from .crc import crc32_final, crc32_update
from .layouts import (MAX_QPS, AckRequest, Decision, EvMode, NicGlobals, PathEntry,
                      RxQpContext)
from .params import NicParams, check_ports, check_qps, param

__all__ = ["AckGen", "ProbeFrameReq", "ACK_FRAME_BYTES", "PROBE_FRAME_BYTES", "ACK_CYCLES"]

#: cycles per ACK frame, back to back, sink always ready (the ICRC pass of 76 bytes at 2 bytes
#: per cycle, 13 beats, request choice and handshakes)
ACK_CYCLES = 55

# Frame layouts (mrcnic.wire_format): control frames carry no SRH in wire format v1.
_ACK = wf.layout("ack")
_PROBE = wf.layout("probe")
_WIDTH = 64                                     # data width, bits
_LANES = wf.beat_bytes(_WIDTH)                  # byte lanes per beat
#: 102: 14 Ether + 40 IPv6 + 8 UDP + 12 BTH + 4 AETH + 20 MRCSack + 4 ICRC
ACK_FRAME_BYTES = _ACK.frame_bytes()
#: 90: 14 Ether + 40 IPv6 + 8 UDP + 12 BTH + 12 MRCProbe + 4 ICRC
PROBE_FRAME_BYTES = _PROBE.frame_bytes()
_BEATS = wf.beats(ACK_FRAME_BYTES, _WIDTH)              # 13
_PROBE_BEATS = wf.beats(PROBE_FRAME_BYTES, _WIDTH)      # 12
# ICRC (IBTA A17.3.3) covers bytes 6..len-5.  Bytes 6..21 (up to the IPv6 source
# address) are constant in the ICRC view: folded into the initial CRC state (per kind:
# the IPv6 payload length differs).  Bytes 22..len-5 follow, 2 per cycle, taken from
# the beat mux: from beat 2 byte pair 3 to beat 12 pair 0 (ACK) or beat 10 pair 2 (probe).
_CRC_START = _ACK.field("ipv6", "src").byte             # 22: the first byte through the mux
_CRC_FIRST_BEAT, _CRC_FIRST_LANE = wf.beat_lane(_CRC_START, _WIDTH)
_CRC_END_BEAT, _CRC_END_LANE = wf.beat_lane(_ACK.offset("icrc") - 2, _WIDTH)      # last pair
_PCRC_END_BEAT, _PCRC_END_LANE = wf.beat_lane(_PROBE.offset("icrc") - 2, _WIDTH)
# The ICRC pass below takes byte pairs (16-bit steps), starting at the pair that loads the
# next beat after it (pair 3), and both kinds share the ICRC-view prefix's offsets.
assert _CRC_FIRST_LANE == _LANES - 2 and _CRC_START == _PROBE.field("ipv6", "src").byte
assert _CRC_END_LANE % 2 == 0 and _PCRC_END_LANE % 2 == 0
assert _ACK.offset("udp") == _PROBE.offset("udp")
_TAIL = (wf.AETH, wf.MRCSACK)                           # ACK headers after the BTH
_TAIL_BYTES = sum(h.length for h in _TAIL)              # 24
_PTAIL_BYTES = wf.MRCPROBE.length                       # 12
assert _ACK.offset("aeth") == _PROBE.offset("probe") == _ACK.offset("bth") + wf.BTH.length
_BLOCK_BYTES = 16 - 2 * wire.USIDS_PER_CARRIER          # uSID carrier: 32-bit block, then uSID 0


def _or_tree(values):
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def _crc_state(data: bytes) -> int:
    """CRC register (as :func:`crc32_update` keeps it) after ``data`` from CRC32_INIT."""
    value = zlib.crc32(data) ^ 0xFFFFFFFF
    return int(f"{value:032b}"[::-1], 2)


def _l3_len(lay: wf.Layout) -> int:
    """IPv6 Payload Length = UDP Length of a frame without SRH: the bytes from the UDP header."""
    return lay.frame_bytes() - lay.offset("udp")


def _view_head(lay: wf.Layout) -> bytes:
    """ICRC view of frame bytes 6..21: the pseudo LRH, then the IPv6 header up to its
    source address with the masked fields (traffic class, flow label, hop limit) as ones."""
    ip = bytearray(wf.IPV6.length)
    known = {"version": wf.IPV6["version"].value, "plen": _l3_len(lay), "nh": wf.NH_UDP}
    for f in wf.IPV6.fields:
        if f.masked:
            f.write(ip, (1 << f.width) - 1)
        elif f.name in known:
            f.write(ip, known[f.name])
    return b"\xff" * wf.LRH_BYTES + bytes(ip[:wf.IPV6["src"].byte])


_CRC_INIT = _crc_state(_view_head(_ACK))
_PCRC_INIT = _crc_state(_view_head(_PROBE))


class ProbeFrameReq(data.Struct):
    """One EV probe to send (OCP MRC "EV probe" on {destination, EV, port}).

    ``qp`` local QP (its context gives the peer QPN, EV mode and peer uSID),
    ``probe_id`` 16-bit sender tag, ``ts`` 32-bit send time in ns (sender's
    clock, echoed by the probe reply), ``entry`` the path-table entry probed:
    the probe leaves on ``entry.port`` with DA ``entry.da`` and carries
    ``entry.ev`` in its flow label / UDP source port and in MRCProbe.
    """
    qp: 3
    probe_id: 16
    ts: 32
    entry: PathEntry


def _be(value, nbytes):
    """Bytes (8-bit slices) of ``value`` in big-endian (wire) order."""
    return [value[8 * (nbytes - 1 - i):8 * (nbytes - i)] for i in range(nbytes)]


def _c(value, nbytes):
    return _be(Const(value, 8 * nbytes), nbytes)


class AckGen(wiring.Component):
    """ACK / SACK / NACK / probe-reply and EV probe frame generator, one AXI-Stream per plane.

    **ACKs.** For each ACK, one ``req`` and one ``path`` item are taken
    together (both must be valid; the choice is registered: an item is taken
    the cycle after it is seen, ``ready`` is a flip-flop ANDed with the other
    stream's valid).  The frame leaves on plane
    ``path.entry.port`` to ``next_hop_mac[port]`` with IPv6 DA
    ``path.entry.da``; its flow label and UDP source port carry
    ``path.entry.ev`` by the QP's EV mode (SRV6/STEV: fl = EV[19:0], sport =
    0xC000 | EV[31:20]; UDP: fl = 0, sport = 0xC000 | EV[13:0]).  The MRCSack
    echoes ``req.ev`` (the data's EV, not the ACK's own).  BTH.DestQP = the
    QP's ``peer_qpn``, BTH.PSN = ``req.cum_psn``.

    **Probes.** For each ``probe`` item, one 90-byte EV probe frame leaves on
    plane ``probe.entry.port`` with DA ``probe.entry.da``, flow label / UDP
    source port from ``probe.entry.ev`` as above, BTH(OpCode 0xC0, DestQP =
    the QP's ``peer_qpn``, PSN 0) and MRCProbe(ev = ``entry.ev``, port =
    ``entry.port``, probe_id, ts).

    Both kinds: the ICRC (IBTA A17.3.3) is computed over the arrival form: in
    SRV6 mode the DA's 32-bit locator block followed by the QP's
    ``peer_usid`` and zeros (the peer NIC's own uSID, what the DA has become
    at arrival); in STEV/UDP mode the DA itself.  Control frames carry no SRH
    in wire format v1: an entry with ``n_carriers`` > 1 (or a ``port`` >=
    ``ports``) is consumed, nothing is sent and ``dropped`` counts it.

    **Arbitration.** Whole frames only, never interleaved beats.  When only
    one kind waits it is taken; when both wait, ACKs go first, then the two
    kinds alternate (a probe after each ACK taken while a probe waits), so
    neither starves.  Dropped requests count as taken.

    Parameters
    ----------
    ports : int
        Planes, 1..8: one output stream each.
    qps : int
        QP contexts, 1..8.
    params : NicParams
        The NIC's parameter set (:class:`~mrcnic.rtl.params.NicParams`): ``ports`` and
        ``qps`` come from it (a keyword given as well must agree).  Standalone: leave it
        out; the keywords are checked by the same rules (:mod:`mrcnic.rtl.params`).

    Attributes
    ----------
    req : In(stream.Signature(AckRequest))
        ACK requests from the SACK tracker.
    path : In(stream.Signature(Decision))
        The reverse path of each ACK, one per request (spray scheduler output).
    probe : In(stream.Signature(ProbeFrameReq))
        EV probes to send (path-table entry, QP, probe_id, ts in ns).
    globals : In(NicGlobals)
        Source MAC, source IPv6 address, DSCP (static configuration).
    next_hop_mac : In(data.ArrayLayout(48, ports))
        Next-hop (leaf switch) MAC of each plane.
    qp_w_en, qp_w_addr, qp_w_data : In(1), In(3), In(RxQpContext)
        QP table write port (``peer_qpn``, ``mode``, ``peer_usid`` are used).
    m_axis_p0 .. m_axis_p{ports-1} : Out(AxiStreamSignature(64))
        Frames, byte lane 0 first on the wire; an ACK is 13 beats, the last
        with ``tkeep`` = 0x3F; a probe is 12 beats, the last with ``tkeep``
        = 0x03; no idle beat inside a frame.
    sent : Out(32)
        ACK frames sent.
    probes_sent : Out(32)
        Probe frames sent.
    dropped : Out(32)
        ACK and probe requests dropped (entry with an SRH or a bad port).

    Latency and throughput: the ICRC is computed first, one byte per cycle,
    through the same beat multiplexer that later drives ``tdata`` (one
    multiplexer and an 8-bit CRC step instead of a second word multiplexer and
    a 64-bit one); the multiplexer, selected by a one-hot beat register, loads
    a 64-bit beat register that is both the CRC pass's input (one beat per 8
    cycles) and the output register (``tdata``, ``tlast`` come from flip-flops).
    Kind-specific fields (the DA, the ACK's PSN and AETH + MRCSack, the
    probe's MRCProbe) have a register per kind, loaded straight from their
    stream, and the multiplexer's selects are one-hot beat registers per
    condition (kind, SRV6 arrival form, ICRC pass).
    The ICRC pass takes two bytes per cycle (a 16-bit CRC step): the receiver
    must answer up to one data packet per ~140 cycles at 8 Gb/s with an ACK, plus
    a NACK per trimmed packet (one byte per cycle, 94 cycles per ACK, does not
    keep up with an 8:1 incast: docs/scenarios.md).
    The first beat is valid about 41 cycles (ACK) / 35 cycles (probe) after the
    request is taken, then the beats follow without a gap.  One frame at a
    time, so a new request is taken the cycle after the last beat's handshake
    (:data:`ACK_CYCLES` = 55 cycles per ACK, about 48 per probe, with the sink always
    ready; an ACK lasts 126 cycles on a 1 Gb/s plane at 125 MHz).  ``tvalid`` never waits on
    ``tready``; ``tready`` reaches the beat register's load enable through
    one AND-OR over a registered one-hot plane select.  The QP context and next-hop MAC are read when the request is
    taken.
    """

    def __init__(self, ports: "int | None" = None, qps: "int | None" = None, *,
                 params: "NicParams | None" = None):
        ports = check_ports(param(params, "ports", ports, 4))
        qps = check_qps(param(params, "qps", qps, MAX_QPS))
        self.ports, self.qps = ports, qps
        members = {
            "req": In(stream.Signature(AckRequest)),
            "path": In(stream.Signature(Decision)),
            "probe": In(stream.Signature(ProbeFrameReq)),
            "globals": In(NicGlobals),
            "next_hop_mac": In(data.ArrayLayout(48, ports)),
            "qp_w_en": In(1),
            "qp_w_addr": In(3),
            "qp_w_data": In(RxQpContext),
            "sent": Out(32),
            "probes_sent": Out(32),
            "dropped": Out(32),
        }
        for i in range(ports):
            members[f"m_axis_p{i}"] = Out(AxiStreamSignature(64))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()

        # QP table: the fields used (mode, peer QPN, peer uSID); registers for one or two
        # QPs (a 2:1 mux is cheaper than distributed RAM), a memory beyond.  The context
        # of the frame's QP is read when its request is taken.
        # The EV mode is kept decoded (SRV6, UDP flags).
        ctx_layout = data.StructLayout({"srv6": 1, "udp": 1, "peer_qpn": 24, "peer_usid": 16})
        ctx_w = Signal(ctx_layout)
        m.d.comb += [ctx_w.srv6.eq(self.qp_w_data.mode == EvMode.SRV6),
                     ctx_w.udp.eq(self.qp_w_data.mode == EvMode.UDP),
                     ctx_w.peer_qpn.eq(self.qp_w_data.peer_qpn),
                     ctx_w.peer_usid.eq(self.qp_w_data.peer_usid)]
        qp_we = self.qp_w_en & (self.qp_w_addr < self.qps)
        new_qp = Signal(3)                # QP of the request being taken
        if self.qps <= 2:
            regs = [Signal(ctx_layout, name=f"qp_ctx{i}") for i in range(self.qps)]
            for i, r in enumerate(regs):
                with m.If(qp_we & (self.qp_w_addr == i)):
                    m.d.sync += r.eq(ctx_w)
            new_ctx = regs[0] if self.qps == 1 else Array(regs)[new_qp[0]]
        else:
            m.submodules.qp_table = qp_table = memory.Memory(shape=ctx_layout, depth=self.qps,
                                                             init=[])
            qp_wr = qp_table.write_port()
            qp_rd = qp_table.read_port(domain="comb")
            m.d.comb += [qp_wr.addr.eq(self.qp_w_addr), qp_wr.data.eq(ctx_w), qp_wr.en.eq(qp_we),
                         qp_rd.addr.eq(new_qp)]
            new_ctx = qp_rd.data

        # The frame's fields, registered when its request is taken.  Fields of one kind
        # only (ACK: cumulative PSN, AETH + MRCSack; probe: MRCProbe) and the DA (from
        # the path or the probe entry) have a register per kind, loaded straight from
        # their stream, and the beat mux selects by kind: cheaper than a kind multiplexer
        # in front of one register (the beat mux has a select per beat anyway).
        peer_qpn = Signal(24, reset_less=True)      # BTH.DestQP (QP context)
        peer_usid = Signal(16, reset_less=True)     # SRV6 arrival DA bytes 4..5 (QP context)
        dst_mac = Signal(48, reset_less=True)       # next_hop_mac[port]
        port = Signal(3, reset_less=True)           # plane
        port_oh = Signal(self.ports, reset_less=True)   # ... one-hot (selects tvalid / tready)
        a_da = Signal(128, reset_less=True)         # IPv6 DA of an ACK (path entry)
        p_da = Signal(128, reset_less=True)         # ... of a probe (probe entry)
        fl = Signal(20, reset_less=True)            # flow label (EV mode applied)
        sport = Signal(16, reset_less=True)         # UDP source port (EV mode applied)
        a_psn = Signal(24, reset_less=True)         # BTH.PSN of an ACK: cum_psn (probe: 0)
        a_tail = Signal(8 * _TAIL_BYTES, reset_less=True)   # ACK bytes 74..97: AETH + MRCSack
        p_tail = Signal(8 * _PTAIL_BYTES, reset_less=True)  # probe bytes 74..85: MRCProbe
        is_probe = Signal()               # kind of the frame being built
        last_ack = Signal()               # the last request taken was an ACK
        busy = Signal()                   # a frame is being built (ICRC pass, then beats)
        sending = Signal()                # ... and its beats are being sent
        fill = Signal()                   # ICRC pass: ``word`` not loaded yet
        beat = Signal(4, reset_less=True)   # the next beat to load into ``word``
        pair = Signal(2, reset_less=True)   # ICRC pass: byte pair of ``word`` taken this cycle
        pair3 = Signal(reset_less=True)     # ... pair == 3: ``word`` loads the next beat
        crc = Signal(32, reset_less=True)
        word = Signal(_WIDTH, reset_less=True)  # the beat register: ICRC pass input, then tdata
        out_valid = Signal()              # ``word`` holds a beat to send
        out_last = Signal()               # ... the frame's last
        g = self.globals
        view = Signal()                   # ICRC pass: the beat mux shows the ICRC view
        # The beat about to be loaded into ``word``, one-hot, once per condition under
        # which a term of the beat mux applies (each a register, so that every term of
        # the AND-OR is one select flip-flop and one data bit):
        #   all: any frame; a / p: an ACK / a probe; sv: the ICRC pass of an SRV6 frame
        #   (DA at its arrival form); nsv_a / nsv_p: ACK / probe outside that; v: the
        #   ICRC pass (masked bytes shown as ones).
        conds = ("all", "a", "p", "sv", "nsv_a", "nsv_p", "v")
        oh = {c: Signal(_BEATS, reset_less=True, name=f"beat_oh_{c}") for c in conds}
        beat_oh = oh["all"]

        # ---- the frame, as bytes (wire order), with the ICRC view's fields -----
        # Bytes 6..21 are constant in the ICRC view (pseudo LRH, version/TC/flow
        # label, payload length, next header, hop limit): folded into the initial
        # CRC state.  Of the later bytes, the view differs in the DA (its arrival
        # form), the UDP checksum and BTH byte 4 (ones): those bytes show the view
        # during the ICRC pass.  Each byte: its (condition, value) alternatives.
        tc = Cat(Const(wire.ECN_ECT0, 2), g.dscp)
        ver_tc_fl = Cat(fl, tc, Const(6, 4))                    # 32 bits

        def one(value, nbytes, cond="all"):
            return [[(cond, b)] for b in _be(value, nbytes)]

        def per_kind(ack, probe):
            return [[("a", x), ("p", y)] for x, y in zip(ack, probe)]

        l3_len = per_kind(_c(_l3_len(_ACK), 2), _c(_l3_len(_PROBE), 2))
        ad, pd = _be(a_da, 16), _be(p_da, 16)
        nb = _BLOCK_BYTES
        da_b = (per_kind(ad[:nb], pd[:nb])                  # block, as sent
                + [[("nsv_a", x), ("nsv_p", y), ("sv", u)]     # SRV6 arrival: uSID
                   for x, y, u in zip(ad[nb:nb + 2], pd[nb:nb + 2], _be(peer_usid, 2))]
                + [[("nsv_a", x), ("nsv_p", y)] for x, y in zip(ad[nb + 2:], pd[nb + 2:])])  # | 0
        ones = [[("v", Const(0xFF, 8))]]
        zero = [[]]                                      # a byte that is 0 in every frame
        # Bytes 0..97 by field, placed at their wire_format offsets; a group of sub-byte
        # fields (IPv6 version/TC/flow label, BTH flag bytes) is placed at its first field.
        frame = [None] * _ACK.offset("icrc")

        def put(header, name, alts):
            start = _ACK.field(header, name).byte
            assert all(x is None for x in frame[start:start + len(alts)]), (header, name)
            frame[start:start + len(alts)] = alts

        put("eth", "dst", one(dst_mac, 6))
        put("eth", "src", one(g.src_mac, 6))
        put("eth", "type", one(Const(wf.ETHERNET["type"].value, 16), 2))
        put("ipv6", "version", one(ver_tc_fl, 4))                # version, TC, flow label
        put("ipv6", "plen", l3_len)
        put("ipv6", "nh", one(Const(wf.NH_UDP, 8), 1))
        put("ipv6", "hlim", one(Const(wf.IPV6["hlim"].value, 8), 1))
        put("ipv6", "src", one(g.src_ip, 16))
        put("ipv6", "dst", da_b)
        put("udp", "sport", one(sport, 2))
        put("udp", "dport", one(Const(wire.ROCEV2_PORT, 16), 2))
        put("udp", "len", l3_len)
        put("udp", "chksum", ones * 2)
        put("bth", "opcode", per_kind(_c(wire.OP_ACK, 1), _c(wire.OP_PROBE, 1)))
        put("bth", "solicited", zero)                             # SE, M, PadCnt, TVer: 0
        put("bth", "pkey", one(Const(wf.BTH["pkey"].value, 16), 2))
        put("bth", "fecn", ones)                                  # FECN, BECN, resv6
        put("bth", "dqpn", one(peer_qpn, 3))
        put("bth", "ackreq", zero)                                # AckReq, resv7: 0
        put("bth", "psn", one(a_psn, 3, "a"))
        put("aeth", "syndrome", [[("a", a_tail[8 * i:8 * i + 8])]
                                 + ([("p", p_tail[8 * i:8 * i + 8])] if i < _PTAIL_BYTES else [])
                                 for i in range(_TAIL_BYTES)])
        assert None not in frame and len(frame) == ACK_FRAME_BYTES - wf.ICRC.length

        # The ICRC (little-endian) follows byte 97 (ACK) or byte 85 (probe).
        icrc = crc32_final(crc)
        icrc_le = [icrc[8 * i:8 * i + 8] for i in range(4)]
        wire_bytes = frame + [[] for _ in range(_LANES * _BEATS - len(frame))]
        for i, b in enumerate(icrc_le):
            wire_bytes[_PROBE.offset("icrc") + i].append(("p", b))
            wire_bytes[_ACK.offset("icrc") + i].append(("a", b))
        # The beat mux as an AND-OR over the registered one-hot selects (cheaper than a
        # mux tree, and no decoder in front of it); it feeds ``word`` only.
        terms = []
        for b in range(_BEATS):
            for c in conds:
                lanes = [dict(wire_bytes[_LANES * b + i]).get(c) for i in range(_LANES)]
                if any(x is not None for x in lanes):
                    value = Cat(*[Const(0, 8) if x is None else x for x in lanes])
                    terms.append(Mux(oh[c][b], value, 0))
        tdata = Signal(_WIDTH)
        m.d.comb += tdata.eq(_or_tree(terms))

        # ---- ICRC pass over the same beat mux: 2 bytes per cycle -------------
        # ``word`` holds beat ``beat - 1``; byte pair ``pair`` of it (bytes 2 pair and
        # 2 pair + 1), from bytes 22..23 (beat 2 pair 3) to the last bytes covered: ACK
        # bytes 96..97 (beat 12 pair 0), probe bytes 84..85 (beat 10 pair 2).  The first
        # cycle (``fill``) only loads beat 2.  The pair taken is registered (``crc_pair``)
        # and folded into ``crc`` on the next cycle (a 16-bit CRC step: the ACK
        # generator has to keep up with one ACK per data packet plus a NACK per trim).
        crc_last = Mux(is_probe, (beat == _PCRC_END_BEAT + 1) & (pair == _PCRC_END_LANE // 2),
                       (beat == _CRC_END_BEAT + 1) & (pair == _CRC_END_LANE // 2))
        load_word = Signal()
        crc_pair = Signal(16, reset_less=True)   # the bytes taken last cycle, and whether
        crc_en = Signal()                        # they were: folded into ``crc`` this cycle
        m.d.sync += crc_en.eq(0)
        with m.If(crc_en):
            m.d.sync += crc.eq(crc32_update(crc, crc_pair, 2))
        with m.If(view):
            with m.If(~fill):
                m.d.sync += [crc_pair.eq(word.word_select(pair, 16)), crc_en.eq(1),
                             pair.eq(pair + 1), pair3.eq(pair == 2)]
                with m.If(crc_last):
                    m.d.sync += [sending.eq(1), view.eq(0)]

        # ---- output routing: ``word`` is the output register ---------------------
        # The sink's ready reaches ``load_word`` through one AND-OR over the registered
        # one-hot plane select; every other term of ``load_word`` is registers only.
        out_ready = Signal()
        last_keep = Mux(is_probe, wf.last_keep(PROBE_FRAME_BYTES, _WIDTH),
                        wf.last_keep(ACK_FRAME_BYTES, _WIDTH))
        readies = []
        for i in range(self.ports):
            axis = getattr(self, f"m_axis_p{i}")
            m.d.comb += [
                axis.tdata.eq(word),
                axis.tkeep.eq(Mux(out_last, last_keep, 0xFF)),
                axis.tlast.eq(out_last),
                axis.tvalid.eq(out_valid & port_oh[i]),
            ]
            readies.append(port_oh[i] & axis.tready)
        m.d.comb += out_ready.eq(_or_tree(readies))
        # load_word = ICRC pass load | (sending & (~out_valid | out_ready) & ~(out_valid & out_last))
        load_now = Signal()               # registers only: the word is loaded this cycle
        load_rdy = Signal()               # registers only: ... if the sink takes the beat
        m.d.comb += [load_now.eq((view & (fill | pair3)) | (sending & ~out_valid)),
                     load_rdy.eq(sending & out_valid & ~out_last),
                     load_word.eq(load_now | (load_rdy & out_ready))]
        with m.If(sending & out_valid & out_last & out_ready):   # the last beat is handed over
            m.d.sync += [busy.eq(0), sending.eq(0), out_valid.eq(0)]
            with m.If(is_probe):
                m.d.sync += self.probes_sent.eq(self.probes_sent + 1)
            with m.Else():
                m.d.sync += self.sent.eq(self.sent + 1)
        with m.If(sending & load_word):
            m.d.sync += [out_valid.eq(1),
                         out_last.eq(Mux(is_probe, beat_oh[_PROBE_BEATS - 1],
                                         beat_oh[_BEATS - 1]))]
        with m.If(view & fill):
            m.d.sync += fill.eq(0)
        with m.If(load_word):
            m.d.sync += [word.eq(tdata), beat.eq(beat + 1)]
            m.d.sync += [sel.eq(sel << 1) for sel in oh.values()]
        with m.If(view & ~fill & crc_last):           # the beats restart from beat 0
            after = {"all": 1, "a": ~is_probe, "p": is_probe, "sv": 0,
                     "nsv_a": ~is_probe, "nsv_p": is_probe, "v": 0}
            m.d.sync += beat.eq(0)
            m.d.sync += [oh[c].eq(Mux(after[c], 1, 0)) for c in conds]

        # ---- arbitration and control ----------------------------------------
        # The choice is made from the valids one cycle ahead and registered (``want_ack``,
        # ``want_probe``): ``probe.ready`` is a flip-flop, ``req.ready`` / ``path.ready``
        # a flip-flop and the other stream's valid (req and path are taken together), so
        # no path runs from the ACK generator's state into the spray scheduler or the
        # request FIFO.  An item whose valid fell meanwhile is not taken; the choice is
        # then made again.
        want_ack = Signal()
        want_probe = Signal()
        take_ack = Signal()
        take_probe = Signal()
        ack_wait = self.req.valid & self.path.valid
        pick_probe = self.probe.valid & (~ack_wait | last_ack)
        choose = ~busy & ~want_ack & ~want_probe
        m.d.sync += [want_ack.eq(choose & ack_wait & ~pick_probe),
                     want_probe.eq(choose & pick_probe)]
        m.d.comb += [
            self.req.ready.eq(want_ack & self.path.valid),
            self.path.ready.eq(want_ack & self.req.valid),
            self.probe.ready.eq(want_probe),
            take_ack.eq(want_ack & ack_wait),
            take_probe.eq(want_probe & self.probe.valid),
        ]
        new_ent = Signal(PathEntry)
        m.d.comb += [
            new_ent.eq(Mux(want_probe, self.probe.payload.entry, self.path.payload.entry)),
            new_qp.eq(Mux(want_probe, self.probe.payload.qp, self.req.payload.qp)),
        ]
        ack, prb = self.req.payload, self.probe.payload
        new_srv6 = new_ctx.srv6
        new_udp = new_ctx.udp
        # AETH + MRCSack and MRCProbe, field by field in wire order (AckRequest's fields
        # are named as wire_format's); ``rsvd`` is its fixed 0
        ack_tail = Cat(*[b for h in _TAIL for f in h.fields
                         for b in _be(getattr(ack, f.name), f.width // 8)])
        probe_src = {"ev": prb.entry.ev, "port": Cat(prb.entry.port, Const(0, 5)),
                     "rsvd": Const(wf.MRCPROBE["rsvd"].value, 8),
                     "probe_id": prb.probe_id, "ts": prb.ts}
        probe_tail = Cat(*[b for f in wf.MRCPROBE.fields
                           for b in _be(probe_src[f.name], f.width // 8)])
        with m.If(want_ack):                # (loaded with the choice, as below)
            m.d.sync += [a_da.eq(self.path.payload.entry.da), a_psn.eq(ack.cum_psn),
                         a_tail.eq(ack_tail)]
        with m.If(want_probe):
            m.d.sync += [p_da.eq(prb.entry.da), p_tail.eq(probe_tail)]
        dropping = (new_ent.n_carriers > 1) | (new_ent.port >= self.ports)
        # The frame's registers are loaded when a kind is chosen (``want_*``, flip-flops), not
        # when its item is taken: nothing reads them before ``busy`` is set (if the item's
        # valid fell, busy stays low and they are loaded again with the next choice), so the
        # streams' valids reach only the control flip-flops below.
        with m.If(want_ack | want_probe):
            m.d.sync += [
                is_probe.eq(want_probe),
                peer_qpn.eq(new_ctx.peer_qpn), peer_usid.eq(new_ctx.peer_usid),
                dst_mac.eq(self.next_hop_mac[new_ent.port]), port.eq(new_ent.port),
                port_oh.eq(Cat(*[new_ent.port == i for i in range(self.ports)])),
                fl.eq(Mux(new_udp, 0, new_ent.ev[:20])),
                sport.eq(Cat(Mux(new_udp, new_ent.ev[:14], new_ent.ev[20:32]), Const(0b11, 2))),
                beat.eq(_CRC_FIRST_BEAT),
                pair.eq(_CRC_FIRST_LANE // 2), pair3.eq(1), fill.eq(1), sending.eq(0), out_valid.eq(0),
                crc.eq(Mux(want_probe, _PCRC_INIT, _CRC_INIT))]
            start = {"all": 1, "a": ~want_probe, "p": want_probe, "sv": new_srv6,
                     "nsv_a": ~want_probe & ~new_srv6, "nsv_p": want_probe & ~new_srv6, "v": 1}
            m.d.sync += [oh[c].eq(Mux(start[c], 1 << _CRC_FIRST_BEAT, 0)) for c in conds]
        with m.If(take_ack | take_probe):
            m.d.sync += [last_ack.eq(take_ack), view.eq(~dropping)]
            with m.If(dropping):
                m.d.sync += self.dropped.eq(self.dropped + 1)
            with m.Else():
                m.d.sync += busy.eq(1)

        return m
