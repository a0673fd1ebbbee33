"""Transmit header generator: one ``TxPacket`` -> the header beats of its data frame.

The header of an mrcnic data frame (wire format v1, ``mrcnic.wire.build_data_frame``)
is, in wire order::

    Ethernet (14) | IPv6 (40) | [SRH 8 + 16n] | UDP (8) | BTH (12) | RETH (16) | [ImmDt (4)]

90 bytes, +4 with ImmDt, +8+16n with an SRH of n > 1 carriers.  Every section
boundary after the IPv6 destination address falls on byte lane 6 (54, 62+16k
and the tail start are all 6 mod 8), so the generator walks the header one
64-bit beat at a time: each beat is 8 bytes sliced from at most two sections,
selected by the beat counter.  No header is ever stored whole; SRH segment
words are read from the segment memory while their beats stream.  The ICRC
view of a beat is the beat itself with a few lanes forced to ones or zeros
(and the peer uSID put into the destination address in SRV6 mode).

Sources: IEEE 802.3 (Ethernet II), RFC 8200 (IPv6), RFC 8754 (SRH),
RFC 9800 (NEXT-CSID uSID carriers, arrival DA), RFC 3168 (ECT(0)),
IBTA RoCEv2 annex A17 (UDP 4791, ICRC masking), IBTA Vol. 1 ch. 9 (BTH, RETH, ImmDt).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mrcnic.wire import OP_WRITE_ONLY_IMM, ROCEV2_PORT

from .axis import AxiStreamSignature
from .layouts import MAX_CARRIERS, MAX_PORTS, EvMode, NicGlobals, TxPacket

__all__ = ["HeaderGen", "SEG_DEPTH", "HDR_USER_WIDTH"]

SEG_DEPTH = 256        #: segment-memory words (128-bit IPv6 addresses), addressed by 8 bits
HDR_USER_WIDTH = 67    #: tuser = 64-bit ICRC view of the beat's lanes + 3-bit port (plane)

_HOP_LIMIT = 64
_ETHERTYPE_IPV6 = 0x86DD
_NH_UDP, _NH_ROUTING = 17, 43
_SRH_TYPE = 4
_ECT0 = 0b10
_PKEY = 0xFFFF
# UDP header + BTH + RETH + ICRC: the fixed part of the UDP length (ImmDt, payload, pad added)
_UDP_FIXED = 8 + 12 + 16 + 4


def _wire(value, nbytes):
    """``value`` (an integer-like Value, MSB first on the wire) as ``nbytes`` bytes in lane order."""
    value = Cat(value, Const(0, 8 * nbytes - len(value))) if len(value) < 8 * nbytes else value
    return Cat(*[value.word_select(nbytes - 1 - i, 8) for i in range(nbytes)])


def _zext(value, width):
    """``value`` truncated or zero-extended to exactly ``width`` bits."""
    value = value[:width] if len(value) > width else value
    return Cat(value, Const(0, width - len(value)))


def _bytes(vec, start, stop):
    """Bytes ``start``..``stop-1`` of a lane-ordered byte vector."""
    return vec[8 * start:8 * stop]


class HeaderGen(wiring.Component):
    """Header bytes (and their ICRC view) of one mrcnic data frame per ``TxPacket``.

    Parameters
    ----------
    ports : int
        Number of planes (1..8); sizes ``next_hop_mac``.

    Attributes
    ----------
    pkt : In(stream.Signature(TxPacket))
        One packet to frame per transfer.  ``ready`` does not depend on ``valid``.
    globals : In(NicGlobals)
        Source MAC, source IPv6 address, DSCP.  Static while packets flow.
    next_hop_mac : In(data.ArrayLayout(48, ports))
        Ethernet destination per plane.  Static while packets flow.
    seg_w_en, seg_w_addr, seg_w_data : In(1), In(8), In(128)
        Write port of the 256 x 128-bit segment memory (SRH carriers, an IPv6
        address as an integer, bit 127 first on the wire).  The words of a
        packet's SRH are read while its header streams (no copy is kept), so
        write them only while no packet that uses them is in flight.
    m_axis : Out(AxiStreamSignature(64, user_width=67))
        Header beats only.  Byte lane 0 = first wire byte; ``tkeep`` is all ones
        except on the last beat (``tlast``), whose length is the header length
        mod 8 (2, or 6 with ImmDt); lanes beyond ``tkeep`` are zero in ``tdata``.
        ``tuser[0:64]`` is the ICRC view of the
        same lanes (``mrcnic.wire.icrc_view(arrival_form(frame, block))``):
        bytes 6..13, IPv6 traffic class, flow label, hop limit, UDP checksum
        and BTH byte 4 set to ones; in mode SRV6 the destination address at its
        arrival value (locator block ``da[127:96]`` | ``peer_usid`` | 0) and SRH
        Segments Left = 0.  ``tuser[64:67]`` is the packet's port (plane).
    errors : Out(16)
        Count (wrapping) of packets with ``n_carriers`` outside 1..4 or
        ``port`` >= ``ports``.  Such a packet is still framed, so the header
        stream stays paired with the payload stream: ``n_carriers`` 0 is
        taken as 1 and 5..7 as 4; an out-of-range port gets the MAC of the
        last plane and its port number is passed on unchanged in ``tuser``.

    Frame fields: Ethernet dst = ``next_hop_mac[port]``, src = ``src_mac``,
    type 0x86DD.  IPv6: traffic class = DSCP << 2 | ECT(0), flow label = EV[19:0]
    (SRV6, STEV) or 0 (UDP), payload length = everything after the IPv6 header
    up to and including the 4-byte ICRC, next header 43 (SRH) or 17, hop limit 64,
    DA = ``path.entry.da``.  SRH (n > 1 carriers, RFC 8754): next header 17,
    Hdr Ext Len 2n, type 4, Segments Left = Last Entry = n-1, flags/tag 0,
    Segment List[i] = segment memory word ``seg_base + i``.  UDP: sport =
    0xC000 | EV[31:20] (SRV6, STEV) or 0xC000 | EV[13:0] (UDP), dport 4791,
    checksum 0.  BTH: ``opcode``, PadCnt = (-length) & 3, P_Key 0xFFFF, DestQP,
    AckReq = ``last``, PSN.  RETH: VA, rkey, DMA length = ``length``.  ImmDt
    when ``opcode`` is RDMA WRITE ONLY WITH IMMEDIATE (0x0B).

    Latency and throughput: a packet accepted on clock *c* is prepared on *c+1*
    and its first beat is valid on ``m_axis`` from *c+3* when the output is idle.
    Beats of one header follow at one per clock while ``tready`` is high, and a
    packet waiting on ``pkt`` while a header streams (the generator holds one
    in progress and one waiting) has its first beat on the clock after the
    previous ``tlast`` beat: zero idle cycles between back-to-back headers.
    Backpressure: ``tvalid`` and the beat stay stable while ``tready`` is low;
    ``pkt.ready`` is low while the waiting slot is full.
    """

    def __init__(self, ports: int = 4):
        if not isinstance(ports, int) or not 1 <= ports <= MAX_PORTS:
            raise ValueError(f"ports must be an integer in 1..{MAX_PORTS}, not {ports!r}")
        self.ports = ports
        super().__init__({
            "pkt": In(stream.Signature(TxPacket)),
            "globals": In(NicGlobals),
            "next_hop_mac": In(data.ArrayLayout(48, ports)),
            "seg_w_en": In(1),
            "seg_w_addr": In(8),
            "seg_w_data": In(128),
            "m_axis": Out(AxiStreamSignature(64, user_width=HDR_USER_WIDTH)),
            "errors": Out(16),
        })

    def elaborate(self, platform):
        m = Module()

        # ---------------------------------------------------------------- segment memory
        m.submodules.seg_mem = seg_mem = Memory(shape=128, depth=SEG_DEPTH, init=[])
        seg_wr = seg_mem.write_port()
        seg_rd = seg_mem.read_port()
        m.d.comb += [
            seg_wr.en.eq(self.seg_w_en),
            seg_wr.addr.eq(self.seg_w_addr),
            seg_wr.data.eq(self.seg_w_data),
        ]

        # ---------------------------------------------------------------- waiting slot
        nxt = Signal(TxPacket)
        nxt_valid = Signal()
        m.d.comb += self.pkt.ready.eq(~nxt_valid)
        with m.If(self.pkt.valid & self.pkt.ready):
            m.d.sync += [nxt.eq(self.pkt.payload), nxt_valid.eq(1)]

        # Derived fields of the waiting packet, registered into the active slot.
        n_raw = nxt.path.entry.n_carriers
        bad_n = (n_raw == 0) | (n_raw > MAX_CARRIERS)
        bad_port = nxt.path.entry.port >= self.ports if self.ports < MAX_PORTS else Const(0)
        n_fix = Mux(n_raw == 0, 1, Mux(n_raw > MAX_CARRIERS, MAX_CARRIERS, n_raw))
        has_imm = nxt.opcode == OP_WRITE_ONLY_IMM
        srh = n_fix > 1
        pad = (-nxt.length)[:2]
        srh_len = Mux(srh, 8 + 16 * n_fix, 0)
        udp_len = _UDP_FIXED + Mux(has_imm, 4, 0) + nxt.length + pad
        srh_beats = Mux(srh, 2 * n_fix + 1, 0)

        cur = Signal(TxPacket)
        cur_n = Signal(3)
        cur_imm = Signal()
        cur_pad = Signal(2)
        cur_udp_len = Signal(16)
        cur_ip_len = Signal(16)
        cur_srh_beats = Signal(4)
        cur_last_beat = Signal(5)     # index of the tlast beat
        cur_valid = Signal()
        beat = Signal(5)              # index of the next beat to present
        errors = Signal(16)
        m.d.comb += self.errors.eq(errors)

        # ---------------------------------------------------------------- output register
        out_valid = Signal()
        advance = ~out_valid | self.m_axis.tready
        at_last = beat == cur_last_beat
        load = nxt_valid & (~cur_valid | (advance & at_last))

        with m.If(load):
            m.d.sync += [
                cur.eq(nxt),
                cur_n.eq(n_fix),
                cur_imm.eq(has_imm),
                cur_pad.eq(pad),
                cur_udp_len.eq(udp_len),
                cur_ip_len.eq(udp_len + srh_len),
                cur_srh_beats.eq(srh_beats),
                cur_last_beat.eq(11 + srh_beats),
                cur_valid.eq(1),
                beat.eq(0),
                nxt_valid.eq(0),
            ]
            with m.If(bad_n | bad_port):
                m.d.sync += errors.eq(errors + 1)
        with m.Elif(advance & cur_valid):
            m.d.sync += beat.eq(beat + 1)
            with m.If(at_last):
                m.d.sync += cur_valid.eq(0)

        # ---------------------------------------------------------------- SRH segment reader
        # SRH beat j (= beat - 7) needs segment word j >> 1 on the read port's
        # data: j = 0 takes its bytes 0..1, j = 2k+1 bytes 2..9 of word k, and
        # j = 2k+2 bytes 0..1 of word k+1 after bytes 10..15 of word k, kept in
        # ``seg_hold`` from beat 2k+1.  The read advances with the beat, one beat
        # ahead: the word for beat b+1 is addressed while beat b is presented.
        seg_hold = Signal(48)
        seg_next = (beat - 6)[1:3]          # (beat + 1 - 7) >> 1, the next beat's word
        m.d.comb += [
            seg_rd.addr.eq(cur.path.entry.seg_base + seg_next),
            seg_rd.en.eq(advance),
        ]

        # ---------------------------------------------------------------- header sections
        g = self.globals
        entry = cur.path.entry
        mode_udp = cur.mode == EvMode.UDP
        mode_srv6 = cur.mode == EvMode.SRV6
        has_srh = cur_srh_beats != 0
        port_idx = entry.port if self.ports == MAX_PORTS else \
            Mux(entry.port >= self.ports, self.ports - 1, entry.port)
        dst_mac = self.next_hop_mac[port_idx]
        flow_label = Mux(mode_udp, 0, entry.ev[0:20])
        sport = 0xC000 | Mux(mode_udp, entry.ev[0:14], entry.ev[20:32])
        tc = Cat(Const(_ECT0, 2), g.dscp)
        last_entry = _zext(cur_n - 1, 8)

        fx = Cat(           # Ethernet + IPv6, 54 bytes in lane order
            _wire(dst_mac, 6), _wire(g.src_mac, 6), _wire(Const(_ETHERTYPE_IPV6, 16), 2),
            Cat(tc[4:8], Const(6, 4)), _wire(Cat(flow_label, tc[0:4]), 3),
            _wire(cur_ip_len, 2), _zext(Mux(has_srh, _NH_ROUTING, _NH_UDP), 8),
            Const(_HOP_LIMIT, 8), _wire(g.src_ip, 16), _wire(entry.da, 16))
        sf = Cat(           # the 8 SRH bytes before the segment list
            Const(_NH_UDP, 8), _zext(cur_n << 1, 8), Const(_SRH_TYPE, 8),
            last_entry, last_entry, Const(0, 24))
        tl = Cat(           # UDP + BTH + RETH + ImmDt, 40 bytes (+2 zero bytes)
            _wire(sport, 2), _wire(Const(ROCEV2_PORT, 16), 2), _wire(cur_udp_len, 2),
            Const(0, 16),
            cur.opcode, Cat(Const(0, 4), cur_pad, Const(0, 2)), _wire(Const(_PKEY, 16), 2),
            Const(0, 8), _wire(cur.dest_qpn, 3), Cat(Const(0, 7), cur.last), _wire(cur.psn, 3),
            _wire(cur.va, 8), _wire(cur.rkey, 4), _wire(cur.length, 4),
            _wire(Mux(cur_imm, cur.imm, 0), 4), Const(0, 16))
        seg_word = _wire(seg_rd.data, 16)

        # Beat numbering: 0..6 Ethernet/IPv6 (beat 6 ends with 2 bytes of the next
        # section), 7..6+srh_beats the SRH (beat 7: SRH[2:8] + seg0[0:2]; then per
        # segment k: seg k[2:10], seg k[10:16] + next section[0:2]), then 5 tail beats.
        j = Signal(5)       # beat index inside the SRH region
        t = Signal(5)       # beat index inside the tail region
        m.d.comb += [j.eq(beat - 7), t.eq(beat - 7 - cur_srh_beats)]
        k_last = (j - 1)[1:3] == cur_n - 1      # beat 2k+2 ends segment k = n-1
        with m.If(advance & j[0]):
            m.d.sync += seg_hold.eq(_bytes(seg_word, 10, 16))

        d = Signal(64)
        with m.If(beat < 6):
            m.d.comb += d.eq(fx.word_select(beat[:3], 64))
        with m.Elif(beat == 6):
            m.d.comb += d.eq(Cat(_bytes(fx, 48, 54), Mux(has_srh, sf[:16], tl[:16])))
        with m.Elif(j < cur_srh_beats):
            with m.If(j == 0):
                m.d.comb += d.eq(Cat(_bytes(sf, 2, 8), seg_word[:16]))
            with m.Elif(j[0]):
                m.d.comb += d.eq(_bytes(seg_word, 2, 10))
            with m.Else():
                m.d.comb += d.eq(Cat(seg_hold, Mux(k_last, tl[:16], seg_word[:16])))
        with m.Else():
            with m.Switch(t):
                for i in range(5):
                    with m.Case(i):
                        m.d.comb += d.eq(_bytes(tl, 2 + 8 * i, 10 + 8 * i))

        # ICRC view = the beat with some lanes forced (IBTA A17.3.3 masking; arrival
        # DA = block | peer uSID | 0 and Segments Left 0 in SRV6 mode, RFC 9800/8754):
        # view = (d & ~clear) | set, then the peer uSID into DA bytes 4..5.
        set_, clear = Signal(64), Signal(64)
        usid_lanes = mode_srv6 & (beat == 5)
        with m.Switch(beat):
            with m.Case(0):
                m.d.comb += set_.eq(0xFFFF << 48)                          # bytes 6..7
            with m.Case(1):
                m.d.comb += set_.eq(0xFF0F_FFFF_FFFF_FFFF)                 # 8..13, TC, FL
            with m.Case(2):
                m.d.comb += set_.eq(0x0000_FF00_0000_FFFF)                 # FL, hop limit
            with m.Case(5):
                m.d.comb += clear.eq(Mux(mode_srv6, 0xFFFF_FFFF_0000_0000, 0))  # DA 6..9
            with m.Case(6):
                m.d.comb += clear.eq(Mux(mode_srv6, 0x0000_FFFF_FFFF_FFFF, 0))  # DA 10..15
            with m.Case(7):
                with m.If(has_srh & mode_srv6):
                    m.d.comb += clear.eq(0xFF00)                           # Segments Left
        with m.If(t == 0):
            m.d.comb += set_.eq(0x0000_FFFF_0000_0000)                     # UDP checksum
        with m.Elif(t == 1):
            m.d.comb += set_.eq(0x0000_0000_00FF_0000)                     # BTH byte 4
        v = Signal(64)
        m.d.comb += v.eq((d & ~clear) | set_)
        with m.If(usid_lanes):
            m.d.comb += v[16:32].eq(_wire(cur.peer_usid, 2))               # DA 4..5

        # Last beat: 2 bytes (no ImmDt) or 6 bytes (ImmDt).
        last_keep = Mux(cur_imm, 0x3F, 0x03)
        with m.If(advance):
            m.d.sync += out_valid.eq(cur_valid)
            with m.If(cur_valid):
                m.d.sync += [
                    self.m_axis.tdata.eq(d),
                    self.m_axis.tuser.eq(Cat(v, entry.port)),
                    self.m_axis.tkeep.eq(Mux(at_last, last_keep, 0xFF)),
                    self.m_axis.tlast.eq(at_last),
                ]
        m.d.comb += self.m_axis.tvalid.eq(out_valid)
        return m
