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


def _or_tree(values):
    """OR of ``values``, as a balanced tree."""
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


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

    Timing: every packet-dependent choice (source port, lengths, and the
    selects of the next-hop MAC, flow label and ImmDt terms) is made when a
    packet moves from the waiting to the active slot or one beat ahead; the
    beat is an AND-OR over registered one-hot selects and registers; the
    segment memory's read address and read data are registered (the read
    runs two beats ahead), so no block RAM output feeds logic.  ``tdata``,
    ``tkeep``, ``tlast``, ``tvalid`` and ``tuser[64:67]`` are flip-flops;
    ``tuser[0:64]`` is ``tdata`` through one LUT (per nibble: forced to ones,
    to zeros or to the peer uSID by flags registered with the beat).
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
        # no_rw_check: a word is never written while a packet that reads it is in
        # flight (see ``seg_w_*``), so Yosys adds no read/write collision logic.
        m.submodules.seg_mem = seg_mem = Memory(shape=128, depth=SEG_DEPTH, init=[],
                                                attrs={"no_rw_check": 1})
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

        # Derived fields of the waiting packet, registered into the active slot: every
        # choice that depends on the packet only is made here, so the beat mux below
        # selects registers.
        g = self.globals
        entry_n = nxt.path.entry
        n_raw = entry_n.n_carriers
        bad_n = (n_raw == 0) | (n_raw > MAX_CARRIERS)
        bad_port = entry_n.port >= self.ports if self.ports < MAX_PORTS else Const(0)
        n_fix = Mux(n_raw == 0, 1, Mux(n_raw > MAX_CARRIERS, MAX_CARRIERS, n_raw))
        has_imm = nxt.opcode == OP_WRITE_ONLY_IMM
        srh = n_fix > 1
        pad = (-nxt.length)[:2]
        # UDP length = 40 + 4 * imm + length + pad and IPv6 payload length = UDP length
        # + SRH length (8 + 16n), all multiples of 4: in words of 4 bytes, the words of
        # the payload (length rounded up: a carry-in) plus a small constant chosen by
        # (imm, n): one carry chain each.
        words = nxt.length[2:]
        part = nxt.length[:2] != 0
        k_udp = Cat(has_imm, Const(_UDP_FIXED // 4 >> 1, 3))
        assert _UDP_FIXED // 4 == 10
        k_ip = Signal(5)
        with m.Switch(Cat(n_raw, has_imm)):
            for n in range(8):
                for imm in (0, 1):
                    nf = min(max(n, 1), MAX_CARRIERS)
                    with m.Case(n | imm << 3):
                        m.d.comb += k_ip.eq(_UDP_FIXED // 4 + imm
                                            + ((8 + 16 * nf) // 4 if nf > 1 else 0))
        udp_len = Cat(Const(0, 2), words + k_udp + part)
        ip_len = Cat(Const(0, 2), words + k_ip + part)
        mode_udp = nxt.mode == EvMode.UDP
        port_idx = entry_n.port if self.ports == MAX_PORTS else \
            Mux(entry_n.port >= self.ports, self.ports - 1, entry_n.port)

        cur = Signal(TxPacket)
        cur_srh = Signal()            # an SRH follows the IPv6 header (n > 1)
        cur_srv6 = Signal()           # mode SRV6 (ICRC view: arrival DA, Segments Left 0)
        cur_imm = Signal()
        cur_last_entry = Signal(2)    # SRH Last Entry = n - 1
        mac_sel = Signal(self.ports)  # the beat about to be built is FX0, to next_hop_mac[i]
        cur_fl_on = Signal()          # flow label = EV[19:0] (SRV6, STEV), else 0 (UDP)
        fl_sel1 = Signal()            # the beat about to be built is FX1 / FX2 and carries
        fl_sel2 = Signal()            # ... flow label bits (selects of their own AND-OR terms)
        cur_sport = Signal(16)        # UDP source port
        t4_imm = Signal()             # the beat about to be built is T4 of a packet with ImmDt
        cur_pad = Signal(2)
        cur_udp_len = Signal(16)
        cur_ip_len = Signal(16)
        cur_valid = Signal()
        errors = Signal(16)
        m.d.comb += self.errors.eq(errors)

        # ---------------------------------------------------------------- beat sequence
        # The beat about to be built is one-hot in ``st``: 0..5 Ethernet/IPv6, 6 = beat 6
        # (IPv6 DA end + the next section's first 2 bytes), then with an SRH: J0 (SRH
        # bytes 2..7 + segment 0 bytes 0..1), and per segment k: JO (segment k bytes
        # 2..9), JE (segment k bytes 10..15 + segment k+1 bytes 0..1, or the tail's first
        # 2 bytes after the last segment); then the 5 tail beats T0..T4.
        FX, B6, J0, JO, JE, T = 0, 6, 7, 8, 9, 10
        st = Signal(15)
        kseg = Signal(2)              # segment of the JO/JE pair under way
        # Lanes 6..7 of beats 6 and JE come from one of three places, decided one beat
        # ahead: SRH bytes 0..1, the tail's bytes 0..1, or a segment's bytes 0..1.
        sel_sf01 = Signal()
        sel_tl01 = Signal()
        sel_seg01 = Signal()
        beat = Signal(5)              # index of the beat about to be built (segment reads)

        out_valid = Signal()
        advance = ~out_valid | self.m_axis.tready
        at_last = st[T + 4]
        load = nxt_valid & (~cur_valid | (advance & at_last))
        step = advance & cur_valid
        k_last = kseg == cur_last_entry

        with m.If(load):
            m.d.sync += [
                cur.eq(nxt),
                cur_srh.eq(srh),
                cur_srv6.eq(nxt.mode == EvMode.SRV6),
                cur_imm.eq(has_imm),
                cur_last_entry.eq(n_fix - 1),
                mac_sel.eq(Cat(*[port_idx == i for i in range(self.ports)])),
                cur_fl_on.eq(~mode_udp), fl_sel1.eq(0), fl_sel2.eq(0),
                cur_sport.eq(0xC000 | Mux(mode_udp, entry_n.ev[0:14], entry_n.ev[20:32])),
                t4_imm.eq(0),
                cur_pad.eq(pad),
                cur_udp_len.eq(udp_len),
                cur_ip_len.eq(ip_len),
                cur_valid.eq(1),
                st.eq(1 << FX), kseg.eq(0), beat.eq(0),
                sel_sf01.eq(0), sel_tl01.eq(0), sel_seg01.eq(0),
                nxt_valid.eq(0),
            ]
            with m.If(bad_n | bad_port):
                m.d.sync += errors.eq(errors + 1)
        with m.Elif(step):
            m.d.sync += [
                beat.eq(beat + 1),
                st.eq(Cat(
                    Const(0, 1), st[FX:FX + 5],                        # FX1..FX5
                    st[FX + 5],                                        # B6
                    st[B6] & cur_srh,                                  # J0
                    st[J0] | (st[JE] & ~k_last),                       # JO
                    st[JO],                                            # JE
                    (st[B6] & ~cur_srh) | (st[JE] & k_last),           # T0
                    st[T:T + 4])),                                     # T1..T4
                sel_sf01.eq(st[FX + 5] & cur_srh),
                sel_tl01.eq((st[FX + 5] & ~cur_srh) | (st[JO] & k_last)),
                sel_seg01.eq((st[B6] & cur_srh) | (st[JO] & ~k_last)),
            ]
            m.d.sync += [t4_imm.eq(st[T + 3] & cur_imm), mac_sel.eq(0),
                         fl_sel1.eq(st[FX + 0] & cur_fl_on), fl_sel2.eq(st[FX + 1] & cur_fl_on)]
            with m.If(st[JE]):
                m.d.sync += kseg.eq(kseg + 1)
            with m.If(at_last):
                m.d.sync += [cur_valid.eq(0), st.eq(0)]

        # ---------------------------------------------------------------- SRH segment reader
        # Beat J0 needs segment word 0, JO(k) word k, JE(k) word k+1 (its bytes 0..1;
        # bytes 10..15 of word k are kept in ``seg_hold`` from JO(k)): word (beat-7) >> 1.
        # The memory's read data is registered (``seg_word``) before any logic, so the
        # read runs two beats ahead: the word for beat b+2 is addressed while beat b is
        # built.  Read port and register advance with the beats.
        seg_q = Signal(128, reset_less=True)
        seg_hold = Signal(48, reset_less=True)
        # The read address is itself registered, computed when ``beat`` steps.
        seg_addr = Signal(8)
        with m.If(step):
            m.d.sync += seg_addr.eq(cur.path.entry.seg_base + (beat - 4)[1:3])   # (b+1+2-7)>>1
        m.d.comb += [
            seg_rd.addr.eq(seg_addr),
            seg_rd.en.eq(advance),
        ]
        with m.If(advance):
            m.d.sync += seg_q.eq(seg_rd.data)
        seg_word = _wire(seg_q, 16)
        with m.If(step & st[JO]):
            m.d.sync += seg_hold.eq(_bytes(seg_word, 10, 16))

        # ---------------------------------------------------------------- header sections
        entry = cur.path.entry
        tc = Cat(Const(_ECT0, 2), g.dscp)
        last_entry = _zext(cur_last_entry, 8)
        # Ethernet + IPv6, 54 bytes in lane order; the destination MAC and the flow label
        # are zero here and come from terms of their own below (selects per plane / mode)
        fx = Cat(
            Const(0, 48), _wire(g.src_mac, 6), _wire(Const(_ETHERTYPE_IPV6, 16), 2),
            Cat(tc[4:8], Const(6, 4)), _wire(Cat(Const(0, 20), tc[0:4]), 3),
            _wire(cur_ip_len, 2), _zext(Mux(cur_srh, _NH_ROUTING, _NH_UDP), 8),
            Const(_HOP_LIMIT, 8), _wire(g.src_ip, 16), _wire(entry.da, 16))
        sf = Cat(           # the 8 SRH bytes before the segment list
            Const(_NH_UDP, 8), _zext(Cat(Const(0, 1), cur_last_entry + 1), 8),
            Const(_SRH_TYPE, 8), last_entry, last_entry, Const(0, 24))
        tl = Cat(           # UDP + BTH + RETH + ImmDt, 40 bytes (+2 zero bytes)
            _wire(cur_sport, 2), _wire(Const(ROCEV2_PORT, 16), 2), _wire(cur_udp_len, 2),
            Const(0, 16),
            cur.opcode, Cat(Const(0, 4), cur_pad, Const(0, 2)), _wire(Const(_PKEY, 16), 2),
            Const(0, 8), _wire(cur.dest_qpn, 3), Cat(Const(0, 7), cur.last), _wire(cur.psn, 3),
            _wire(cur.va, 8), _wire(cur.rkey, 4), _wire(cur.length, 4),
            Const(0, 48))

        # The beat: an AND-OR over the registered one-hot selects (no decoder, no
        # priority chain in front of the output register).
        z16, z48 = Const(0, 16), Const(0, 48)
        terms = [(st[FX + i], fx[64 * i:64 * i + 64]) for i in range(6)]
        terms += [
            (st[B6], Cat(_bytes(fx, 48, 54), z16)),
            (st[J0], Cat(_bytes(sf, 2, 8), z16)),
            (st[JO], _bytes(seg_word, 2, 10)),
            (st[JE], Cat(seg_hold, z16)),
            (sel_sf01, Cat(z48, sf[:16])),
            (sel_tl01, Cat(z48, tl[:16])),
            (sel_seg01, Cat(z48, seg_word[:16])),
        ]
        terms += [(st[T + i], _bytes(tl, 2 + 8 * i, 10 + 8 * i)) for i in range(5)]
        terms += [(t4_imm, Cat(z16, _wire(cur.imm, 4), z16))]     # ImmDt: T4 bytes 2..5
        terms += [(mac_sel[i], Cat(_wire(self.next_hop_mac[i], 6), z16))   # FX0 bytes 0..5
                  for i in range(self.ports)]
        fl = entry.ev[0:20]                                           # flow label: bytes 15..17
        terms += [(fl_sel1, Cat(Const(0, 56), fl[16:20], Const(0, 4))),
                  (fl_sel2, Cat(_wire(fl[0:16], 2), z48))]
        d = Signal(64)
        m.d.comb += d.eq(_or_tree([Mux(sel, value, 0) for sel, value in terms]))

        # ICRC view = the beat with some lanes forced (IBTA A17.3.3 masking; arrival
        # DA = block | peer uSID | 0 and Segments Left 0 in SRV6 mode, RFC 9800/8754):
        #   FX0 bytes 6..7, FX1 bytes 8..13 + TC + FL, FX2 FL + hop limit, T0 UDP
        #   checksum, T1 BTH byte 4: ones; SRV6: FX5 DA bytes 4..9 = peer uSID | 0,
        #   B6 DA bytes 10..15 = 0, J0 Segments Left = 0.
        # The forcing depends on the beat only: per 4-bit nibble, whether it is forced to
        # ones / to zeros / to the uSID is registered with the beat, and ``tuser`` is the
        # registered beat through one LUT (a second AND-OR, or the forcing in front of
        # the output register, would duplicate the beat's OR tree).
        srv6 = cur_srv6
        ones_of = {FX + 0: 0xFFFF << 48, FX + 1: 0xFF0F_FFFF_FFFF_FFFF,
                   FX + 2: 0x0000_FF00_0000_FFFF, T + 0: 0x0000_FFFF_0000_0000,
                   T + 1: 0x0000_0000_00FF_0000}
        zeros_of = {FX + 5: 0xFFFF_FFFF_FFFF_0000, B6: 0x0000_FFFF_FFFF_FFFF, J0: 0xFF00}
        assert all(mask >> (4 * i) & 0xF in (0, 0xF)
                   for mask in list(ones_of.values()) + list(zeros_of.values()) for i in range(16))

        def nibble_states(masks, i):
            return [st[k] for k, mask in masks.items() if mask >> (4 * i) & 0xF]

        set_n = Signal(16)        # per nibble of the output beat: forced to ones
        clr_n = Signal(16)        # ... to zeros (SRV6; DA bytes 4..5 then take the uSID)
        usid_n = Signal()         # DA bytes 4..5 (lanes 2..3) = peer uSID
        usid_q = Signal(16)       # the peer uSID, wire order, as registered with the beat
        with m.If(advance & cur_valid):
            m.d.sync += [
                set_n.eq(Cat(*[_or_tree(nibble_states(ones_of, i) or [Const(0)])
                               for i in range(16)])),
                clr_n.eq(Cat(*[srv6 & _or_tree(nibble_states(zeros_of, i))
                               if nibble_states(zeros_of, i) else Const(0) for i in range(16)])),
                usid_n.eq(srv6 & st[FX + 5]),
                usid_q.eq(_wire(cur.peer_usid, 2)),
            ]
        tdata = self.m_axis.tdata
        usid = Cat(Const(0, 16), usid_q, Const(0, 32))
        v = Cat(*[
            (tdata[4 * i:4 * i + 4] & ~clr_n[i].replicate(4)) | set_n[i].replicate(4)
            | (Mux(usid_n, usid[4 * i:4 * i + 4], 0) if 4 <= i < 8 else 0)
            for i in range(16)])
        out_port = Signal(3)
        m.d.comb += self.m_axis.tuser.eq(Cat(v, out_port))

        # Last beat: 2 bytes (no ImmDt) or 6 bytes (ImmDt).
        last_keep = Mux(cur_imm, 0x3F, 0x03)
        with m.If(advance):
            m.d.sync += out_valid.eq(cur_valid)
            with m.If(cur_valid):
                m.d.sync += [
                    self.m_axis.tdata.eq(d),
                    out_port.eq(entry.port),
                    self.m_axis.tkeep.eq(Mux(at_last, last_keep, 0xFF)),
                    self.m_axis.tlast.eq(at_last),
                ]
        m.d.comb += self.m_axis.tvalid.eq(out_valid)
        return m
