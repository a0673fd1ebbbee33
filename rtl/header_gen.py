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
(and the peer uSID put into the destination address in SRV6 mode).  Every
field's beat, lane and bits, and the ICRC view's forced lanes, are derived from
``mrcnic.wire_format`` (the geometry constants below, for 64-bit beats).

Sources: IEEE 802.3 (Ethernet II), RFC 8200 (IPv6), RFC 8754 (SRH),
RFC 9800 (NEXT-CSID uSID carriers, arrival DA), RFC 3168 (ECT(0)),
IBTA RoCEv2 annex A17 (UDP 4791, ICRC masking), IBTA Vol. 1 ch. 9 (BTH, RETH, ImmDt).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mrcnic import wire_format as wf
from mrcnic.wire import OP_WRITE_ONLY_IMM, USIDS_PER_CARRIER

from .axis import AxiStreamSignature
from .layouts import MAX_CARRIERS, MAX_PORTS, EvMode, NicGlobals, TxPacket
from .params import NicParams, check_ports, param

__all__ = ["HeaderGen", "SEG_DEPTH", "HDR_USER_WIDTH"]

SEG_DEPTH = 256        #: segment-memory words (128-bit IPv6 addresses), addressed by 8 bits
HDR_USER_WIDTH = 67    #: tuser = 64-bit ICRC view of the beat's lanes + 3-bit port (plane)

_ECT0 = 0b10

# Frame geometry (mrcnic.wire_format) on 64-bit beats.  The beat sequence below (FX0..5,
# B6, [J0, (JO, JE) per segment], T0..T4) is written for 8-byte beats; the asserts hold
# what it relies on.
_WIDTH = 64                                     # data width, bits
_LANES = wf.beat_bytes(_WIDTH)                  # byte lanes per beat
_DATA = wf.layout("data")                       # no SRH, no ImmDt
_IMM = wf.layout("data", imm=True)
_LAYOUTS = [wf.layout("data", n, imm) for n in range(1, MAX_CARRIERS + 1) for imm in (False, True)]
# UDP header + BTH + RETH + ICRC: the fixed part of the UDP length (ImmDt, payload, pad added)
_UDP_FIXED = _DATA.frame_bytes() - _DATA.offset("udp")                   # 40
# Ethernet + IPv6 (``fx``): beats FX0..FX5 whole, then lanes 0..5 of beat B6; every later
# section (SRH, segment, tail) starts at lane 6 too, so its first 2 bytes (``_HEAD``) go
# in the previous beat's lanes 6..7.
_FX_BYTES = _DATA.offset("ipv6") + wf.IPV6.length                        # 54
_FX_BEATS, _SPLIT = divmod(_FX_BYTES, _LANES)                             # 6, 6
_HEAD = _LANES - _SPLIT                                                   # 2
assert _SPLIT == 6 and wf.SRH_FIXED.length == _LANES and wf.SRH_SEGMENT_BYTES == 2 * _LANES
assert all(lay.offset("srh") == _FX_BYTES for lay in _LAYOUTS if "srh" in lay)
_J0_BEAT = _FX_BEATS + 1                        # frame beat of J0 (SRH bytes 2..7)
# The tail (UDP + BTH + RETH [+ ImmDt]) after its first 2 bytes: T0..T4 with or without
# ImmDt; the last beat holds 2 bytes (no ImmDt) or 6 (ImmDt).
_TAIL = wf.beats(_DATA.header_bytes - _FX_BYTES - _HEAD, _WIDTH)         # 5
assert _TAIL == wf.beats(_IMM.header_bytes - _FX_BYTES - _HEAD, _WIDTH)
_TL_BYTES = _HEAD + _LANES * _TAIL              # ``tl``: UDP .. RETH, then zeros (42 bytes)
assert {lay.header_bytes % _LANES for lay in _LAYOUTS} == {_HEAD, _SPLIT}
_BLOCK_BYTES = 16 - 2 * USIDS_PER_CARRIER       # uSID carrier: 32-bit block, then uSID 0
# The beat sequence's states (bits of the one-hot ``st``): FX0..FX5, B6 (the beat Ethernet +
# IPv6 ends in), J0, JO, JE (SRH), T0..T4 (tail).
_FX, _B6 = 0, _FX_BEATS
_J0, _JO, _JE, _T = _B6 + 1, _B6 + 2, _B6 + 3, _B6 + 4
# The flow label (EV bits, selected per mode) lies in two Ethernet/IPv6 beats (FX1, FX2).
_FL = _DATA.field("ipv6", "fl")
_FL_BEATS = sorted({pc.beat for pc in _FL.pieces(_WIDTH)})
assert len(_FL_BEATS) == 2 and 0 < _FL_BEATS[0] and _FL_BEATS[1] < _FX_BEATS


def _states(lay):
    """The beat sequence's state (FX + i, B6, J0, JO, JE, T + i) of each beat of ``lay``."""
    FX, B6, J0, JO, JE, T = _FX, _B6, _J0, _JO, _JE, _T
    seq = [FX + i for i in range(_FX_BEATS)] + [B6]
    if lay.n_carriers > 1:
        seq += [J0] + [JO, JE] * lay.n_carriers       # one segment per carrier
    seq += [T + i for i in range(_TAIL)]
    assert len(seq) == wf.beats(lay.header_bytes, _WIDTH)
    return seq


def _state_masks(bits_of):
    """{state: 64-bit mask} of the beats' bits given by ``bits_of(layout)`` (frame bit
    offsets, MSB first), the same in every data layout; in state order."""
    out = {}
    for lay in _LAYOUTS:
        states = _states(lay)
        for bit in bits_of(lay):
            (pc,) = wf.FieldPos("", wf.Field("", bit, 1), bit).pieces(_WIDTH)
            out.setdefault(lay, {}).setdefault(states[pc.beat], 0)
            out[lay][states[pc.beat]] |= 1 << pc.lo
    merged = {}
    for masks in out.values():
        for st, mask in masks.items():
            assert merged.setdefault(st, mask) == mask, st
    return dict(sorted(merged.items()))


def _ones_bits(lay):
    """Frame bits forced to ones in the ICRC view: the pseudo LRH and the masked fields."""
    yield from range(8 * wf.ICRC_FIRST_BYTE, 8 * (wf.ICRC_FIRST_BYTE + wf.LRH_BYTES))
    for fp in lay.fields():
        if fp.field.masked:
            yield from range(fp.bit, fp.bit + fp.width)


def _srv6_zero_bits(lay):
    """Frame bits zeroed in the SRV6 arrival view: the DA after its locator block (the
    peer uSID then goes in its first 2 bytes) and the SRH Segments Left."""
    da = lay.field("ipv6", "dst")
    yield from range(da.bit + 8 * _BLOCK_BYTES, da.bit + da.width)
    if "srh" in lay:
        sl = lay.field("srh", "segleft")
        yield from range(sl.bit, sl.bit + sl.width)


def _section(lay, start, stop, values):
    """Bytes ``start`` .. ``stop - 1`` of a ``lay`` frame in lane order: every field in
    them from ``values[header, name]`` (a Value, LSB = the field's LSB; zero-extended or
    truncated to the field) or, when absent, its fixed value."""
    parts = []
    for fp in lay.fields():
        if not 8 * start <= fp.bit < 8 * stop:
            continue
        assert fp.bit + fp.width <= 8 * stop, (fp.header, fp.field.name)
        key = (fp.header, fp.field.name)
        if key in values:
            value = _zext(values[key], fp.width)
        else:
            assert fp.field.value is not None, key
            value = Const(fp.field.value, fp.width)
        for pc in fp.pieces(8):     # one byte a beat: pc.beat = frame byte
                parts.append((8 * (pc.beat - start) + pc.lo,
                          value[pc.value_lo:pc.value_lo + pc.hi - pc.lo]))
    parts.sort(key=lambda part: part[0])
    pos = 0
    for lo, v in parts:                 # the fields tile the bytes
        assert lo == pos, (start, lo)
        pos += len(v)
    assert pos == 8 * (stop - start)
    return Cat(*[v for _, v in parts])


def _in_beat(fp, value, beat):
    """A 64-bit beat holding the bits of field ``fp`` (``value``) that lie in frame beat
    ``beat``, zeros elsewhere."""
    parts, pos = [], 0
    for pc in fp.pieces(_WIDTH):
        if pc.beat != beat:
            continue
        if pc.lo > pos:
            parts.append(Const(0, pc.lo - pos))
        parts.append(value[pc.value_lo:pc.value_lo + pc.hi - pc.lo])
        pos = pc.hi
    assert parts, (fp.header, fp.field.name, beat)
    return Cat(*parts, Const(0, _WIDTH - pos)) if pos < _WIDTH else Cat(*parts)


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
    params : NicParams
        The NIC's parameter set (:class:`~mrcnic.rtl.params.NicParams`): ``ports`` come from
        it (a keyword given as well must agree).  Standalone: leave it out; the keywords are
        checked by the same rules (:mod:`mrcnic.rtl.params`).

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

    def __init__(self, ports: "int | None" = None, *, params: "NicParams | None" = None):
        ports = check_ports(param(params, "ports", ports, 4))
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
        assert _UDP_FIXED % 8 == 0 and _UDP_FIXED // 4 >> 1 < 8
        k_ip = Signal(5)
        with m.Switch(Cat(n_raw, has_imm)):
            for n in range(8):
                for imm in (0, 1):
                    nf = min(max(n, 1), MAX_CARRIERS)
                    lay = wf.layout("data", nf, bool(imm))   # bytes after the IPv6 header
                    with m.Case(n | imm << 3):
                        m.d.comb += k_ip.eq((lay.frame_bytes() - _FX_BYTES) // 4)
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
        FX, B6, J0, JO, JE, T = _FX, _B6, _J0, _JO, _JE, _T
        st = Signal(T + _TAIL)
        kseg = Signal(2)              # segment of the JO/JE pair under way
        # Lanes 6..7 of beats 6 and JE come from one of three places, decided one beat
        # ahead: SRH bytes 0..1, the tail's bytes 0..1, or a segment's bytes 0..1.
        sel_sf01 = Signal()
        sel_tl01 = Signal()
        sel_seg01 = Signal()
        beat = Signal(5)              # index of the beat about to be built (segment reads)

        out_valid = Signal()
        advance = ~out_valid | self.m_axis.tready
        at_last = st[T + _TAIL - 1]
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
                    Const(0, 1), st[FX:FX + _FX_BEATS - 1],            # FX1..FX5
                    st[FX + _FX_BEATS - 1],                            # B6
                    st[B6] & cur_srh,                                  # J0
                    st[J0] | (st[JE] & ~k_last),                       # JO
                    st[JO],                                            # JE
                    (st[B6] & ~cur_srh) | (st[JE] & k_last),           # T0
                    st[T:T + _TAIL - 1])),                             # T1..T4
                sel_sf01.eq(st[FX + _FX_BEATS - 1] & cur_srh),
                sel_tl01.eq((st[FX + _FX_BEATS - 1] & ~cur_srh) | (st[JO] & k_last)),
                sel_seg01.eq((st[B6] & cur_srh) | (st[JO] & ~k_last)),
            ]
            m.d.sync += [t4_imm.eq(st[T + _TAIL - 2] & cur_imm), mac_sel.eq(0),
                         fl_sel1.eq(st[FX + _FL_BEATS[0] - 1] & cur_fl_on),
                         fl_sel2.eq(st[FX + _FL_BEATS[1] - 1] & cur_fl_on)]
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
        seg_hold = Signal(8 * _SPLIT, reset_less=True)
        # The read address is itself registered, computed when ``beat`` steps.
        seg_addr = Signal(8)
        with m.If(step):
            m.d.sync += seg_addr.eq(cur.path.entry.seg_base
                                    + (beat - (_J0_BEAT - 3))[1:3])   # (b+1+2-7)>>1
        m.d.comb += [
            seg_rd.addr.eq(seg_addr),
            seg_rd.en.eq(advance),
        ]
        with m.If(advance):
            m.d.sync += seg_q.eq(seg_rd.data)
        seg_word = _wire(seg_q, 16)
        with m.If(step & st[JO]):
            m.d.sync += seg_hold.eq(_bytes(seg_word, _HEAD + _LANES, wf.SRH_SEGMENT_BYTES))

        # ---------------------------------------------------------------- header sections
        entry = cur.path.entry
        tc = Cat(Const(_ECT0, 2), g.dscp)
        last_entry = _zext(cur_last_entry, 8)
        # Each section in lane order, every field at its wire_format place (fixed fields
        # at their fixed values).  Ethernet + IPv6, 54 bytes; the destination MAC and the
        # flow label are zero here and come from terms of their own below (selects per
        # plane / mode)
        fx = _section(_DATA, 0, _FX_BYTES, {
            ("eth", "dst"): Const(0, 48), ("eth", "src"): g.src_mac,
            ("ipv6", "tc"): tc, ("ipv6", "fl"): Const(0, 20), ("ipv6", "plen"): cur_ip_len,
            ("ipv6", "nh"): Mux(cur_srh, wf.NH_ROUTING, wf.NH_UDP),
            ("ipv6", "src"): g.src_ip, ("ipv6", "dst"): entry.da})
        srh_at = _FX_BYTES          # the 8 SRH bytes before the segment list
        sf = _section(wf.layout("data", 2), srh_at, srh_at + wf.SRH_FIXED.length, {
            ("srh", "len"): Cat(Const(0, 1), cur_last_entry + 1),        # 2n
            ("srh", "segleft"): last_entry, ("srh", "lastentry"): last_entry})
        tl = Cat(           # UDP + BTH + RETH, 36 bytes (+6 zero bytes); ImmDt: own term
            _section(_DATA, _FX_BYTES, _DATA.header_bytes, {
                ("udp", "sport"): cur_sport, ("udp", "len"): cur_udp_len,
                ("bth", "opcode"): cur.opcode, ("bth", "padcount"): cur_pad,
                ("bth", "dqpn"): cur.dest_qpn, ("bth", "ackreq"): cur.last,
                ("bth", "psn"): cur.psn, ("reth", "va"): cur.va, ("reth", "rkey"): cur.rkey,
                ("reth", "dmalen"): cur.length}),
            Const(0, 8 * (_TL_BYTES - (_DATA.header_bytes - _FX_BYTES))))

        # The beat: an AND-OR over the registered one-hot selects (no decoder, no
        # priority chain in front of the output register).
        z16, z48 = Const(0, 8 * _HEAD), Const(0, 8 * _SPLIT)
        terms = [(st[FX + i], fx[_WIDTH * i:_WIDTH * i + _WIDTH]) for i in range(_FX_BEATS)]
        terms += [
            (st[B6], Cat(_bytes(fx, _LANES * _FX_BEATS, _FX_BYTES), z16)),
            (st[J0], Cat(_bytes(sf, _HEAD, wf.SRH_FIXED.length), z16)),
            (st[JO], _bytes(seg_word, _HEAD, _HEAD + _LANES)),
            (st[JE], Cat(seg_hold, z16)),
            (sel_sf01, Cat(z48, sf[:8 * _HEAD])),
            (sel_tl01, Cat(z48, tl[:8 * _HEAD])),
            (sel_seg01, Cat(z48, seg_word[:8 * _HEAD])),
        ]
        terms += [(st[T + i], _bytes(tl, _HEAD + _LANES * i, _HEAD + _LANES * (i + 1)))
                  for i in range(_TAIL)]
        imm_f = _IMM.field("immdt", "imm")                            # ImmDt: T4 bytes 2..5
        (imm_beat,) = {pc.beat for pc in imm_f.pieces(_WIDTH)}
        assert _states(_IMM)[imm_beat] == T + _TAIL - 1
        terms += [(t4_imm, _in_beat(imm_f, cur.imm, imm_beat))]
        dst_f = _DATA.field("eth", "dst")                             # FX0 bytes 0..5
        terms += [(mac_sel[i], _in_beat(dst_f, self.next_hop_mac[i], 0))
                  for i in range(self.ports)]
        fl = entry.ev[0:_FL.width]                                    # flow label: bytes 15..17
        terms += [(fl_sel1, _in_beat(_FL, fl, _FL_BEATS[0])),
                  (fl_sel2, _in_beat(_FL, fl, _FL_BEATS[1]))]
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
        ones_of = _state_masks(_ones_bits)         # (FX0..2, T0, T1)
        zeros_of = _state_masks(_srv6_zero_bits)   # (FX5, B6, J0)
        assert all(mask >> (4 * i) & 0xF in (0, 0xF)
                   for mask in list(ones_of.values()) + list(zeros_of.values()) for i in range(16))

        def nibble_states(masks, i):
            return [st[k] for k, mask in masks.items() if mask >> (4 * i) & 0xF]

        # The peer uSID: DA bytes 4..5, after the locator block (FX5 lanes 2..3)
        usid_beat, usid_lane = wf.beat_lane(_DATA.field("ipv6", "dst").byte + _BLOCK_BYTES,
                                            _WIDTH)
        assert usid_lane + 2 <= _LANES
        usid_st = _states(_DATA)[usid_beat]
        usid_lo = 8 * usid_lane

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
                usid_n.eq(srv6 & st[usid_st]),
                usid_q.eq(_wire(cur.peer_usid, 2)),
            ]
        tdata = self.m_axis.tdata
        usid = Cat(Const(0, usid_lo), usid_q, Const(0, _WIDTH - usid_lo - len(usid_q)))
        v = Cat(*[
            (tdata[4 * i:4 * i + 4] & ~clr_n[i].replicate(4)) | set_n[i].replicate(4)
            | (Mux(usid_n, usid[4 * i:4 * i + 4], 0) if usid_lo <= 4 * i < usid_lo + 16 else 0)
            for i in range(16)])
        out_port = Signal(3)
        m.d.comb += self.m_axis.tuser.eq(Cat(v, out_port))

        # Last beat: 2 bytes (no ImmDt) or 6 bytes (ImmDt).
        last_keep = Mux(cur_imm, wf.last_keep(_IMM.header_bytes, _WIDTH),
                        wf.last_keep(_DATA.header_bytes, _WIDTH))
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
