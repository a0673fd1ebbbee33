"""RX parser and validator: every field checked, a bad frame is counted, never written.

A received frame (Ethernet II, no FCS, arrival form: uSID DA already shifted to
the receiver's own uSID, SRH Segments Left = 0) is parsed at one 64-bit beat per
clock, checked against the wire format (docs/wire-format.md, ``mrcnic.wire``)
and the receive tables (QPs, memory regions), and either

* accepted: one :class:`~mrcnic.rtl.layouts.RxPacket` on ``pkt`` and, for a
  non-trimmed DATA frame, its payload (``RETH.dmalen`` bytes) on ``payload``; or
* dropped: nothing is emitted and the counter of its :class:`DropReason` is
  incremented (exactly one counter per dropped frame, the lowest reason index
  that applies).

One parser serves one plane (``port=i``) or, in shared mode (``port=None,
ports=N``), frames of N planes arriving on one stream, each tagged with its
plane on ``s_port``.

Architecture (store and forward through one block-RAM buffer):

* Write side.  Each check is made at the beat its field arrives and only its
  verdict bit is kept (checks NEXT_HEADER..QPN are summarised at beat
  b0 + 3).  The transport header words a record needs, and the realigned
  payload, are written into the buffer memory as they arrive, at the end of
  the committed records (speculatively).  The CRC-32 of the ICRC
  view runs over whole beats; the last beat is zero-filled beyond ``tkeep``
  and compared with the residue advanced by the same number of zero bytes
  (a constant per tail length), so no tail CRC network is needed.  One cycle
  after the last beat a *meta* word (verdict, sizes, fields found by the
  checks) is written in front of the record and the write pointer committed:
  a frame failing a check that ranks before RKEY leaves a 1-word drop record,
  any other frame a candidate record.
* Read side.  A sequencer reads each committed record: a drop record is
  counted; a candidate's header words are loaded into the ``pkt`` register
  while one shared region checker walks the memory regions (RKEY), then the
  verdict (RKEY, DMALEN, ICRC, in that order) is counted and, if accepted, the
  record and its payload are released.  Nothing leaves before its ICRC and
  every other check has passed.
* Counters.  All counters go through one incrementer: a block-RAM copy of the
  counters is read, incremented and written back together with the output
  register of that counter (one count per three cycles at most; zeroed after
  reset before the first frame is read).  The block RAM's read port also answers
  ``cnt_rd_*`` requests (the CSR bank's reads) in the cycles the incrementer
  leaves it free, with a fixed latency (:data:`CNT_RD_LATENCY`).

Record layout in the buffer (64-bit words; ``x`` = byte offset from the UDP
header): slot 0 meta; slot 1 frame bytes 14..21 (traffic class, flow label,
payload length); slot 1 + k, k = 1..6, bytes x = 8(k-1) .. 8k-1; payload word p
of a DATA frame at slot 7 + p (replacing x40..47).

Header positions.  IPv6 ends at byte 54; an SRH is a multiple of 8 bytes, so
the UDP header always starts at byte lane 6 of beat ``b0`` = 6 (no SRH) or
7 + Hdr Ext Len (SRH), and every transport field sits at a fixed lane of beat
``b0 + k``.  The payload starts in beat ``b0 + 5`` (lane 2, or lane 6 after an
ImmDt).  These beats and lanes, and those of the fields the checks read, are derived
from ``mrcnic.wire_format`` (the frame geometry below, for 64-bit beats).

Sources: RFC 8200 (IPv6), RFC 8754 (SRH), RFC 9800 (NEXT-CSID arrival DA), IBTA
Vol. 1 ch. 9 (BTH, RETH, AETH, ImmDt), IBTA RoCEv2 annex A17 (UDP 4791, ICRC),
MRC / OCP MRC 1.0 (EV format profiles, trimming, probes).
"""

import enum as py_enum
import zlib

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mrcnic import wire
from mrcnic import wire_format as wf
from .axis import AxiStreamSignature
from .crc import CRC32_INIT, crc32_final, crc32_update
from .layouts import EvMode, MemRegion, RxPacket, RxQpContext
from .params import MAX_PORTS, check_port, check_ports, check_qps, check_regions

__all__ = ["RxParser", "DropReason", "CNT_RD_LATENCY"]

#: Cycles from a ``cnt_rd_stb`` cycle to the first cycle ``cnt_rd_data`` shows the counter.
CNT_RD_LATENCY = 6

ETHERTYPE_IPV6 = wf.ETHERNET["type"].value                       # 0x86DD
NH_UDP, NH_ROUTING, SRH_TYPE = wf.NH_UDP, wf.NH_ROUTING, wf.SRH_FIXED["type"].value
ROCEV2_PORT = wf.UDP["dport"].value                               # 4791
OP_WRITE_ONLY, OP_WRITE_ONLY_IMM, OP_ACK, OP_PROBE = (
    wire.OP_WRITE_ONLY, wire.OP_WRITE_ONLY_IMM, wire.OP_ACK, wire.OP_PROBE)
MAX_DMALEN = 4096
MAX_PAYLOAD_WORDS = MAX_DMALEN // 8 + 1   #: payload words one frame may write
HDR_SLOTS = 7                             #: buffer words before a record's payload
ICRC_RESIDUE = zlib.crc32(b"x" + zlib.crc32(b"x").to_bytes(4, "little"))   #: 0x2144DF1C


class DropReason(py_enum.IntEnum):
    """Index of a drop counter in ``RxParser.drops``; a lower index has priority.

    FRAMING: tkeep not contiguous from lane 0, a partial beat before tlast, or
    the frame longer than ``max_frame`` bytes (shared mode: also ``s_port`` not
    below ``ports``).  ETHERTYPE: not 0x86DD.  RUNT:
    tlast before the end of the headers the frame announces (+ 4-byte trailer).
    VERSION: IPv6 version != 6.  IPV6_LENGTH: payload length != frame length - 54.
    NEXT_HEADER: IPv6 next header not UDP(17) / SRH(43), SRH routing type != 4,
    or SRH next header not UDP.  SRH: Segments Left != 0 or > Last Entry, or
    Hdr Ext Len < 2 * (Last Entry + 1), or its TLVs (RFC 8754 section 2.1: Pad1, PadN and
    any other type by its length) do not fill the rest of the SRH exactly, or two of them
    start in one 8-byte beat (not supported: see ``_srh_tlv_walk``).
    DA: destination address neither ``locator_block|own_usid|0`` (SRV6) nor
    ``own_ip`` (STEV/UDP), or the form does not match the QP's EV mode.
    UDP_PORT: destination port != 4791.  UDP_LENGTH: UDP length != IPv6
    payload length - SRH length.  OPCODE: not 0x0A, 0x0B, 0x11, 0xC0.  BTH:
    TVer != 0 or P_Key != 0xFFFF.  QPN: DestQP matches no valid QP context.
    RKEY: (DATA) no valid region with this rkey holds [VA, VA + dmalen).
    DMALEN: (DATA) dmalen 0 or > 4096, PadCnt != (-dmalen) & 3, or (not trimmed)
    payload bytes != dmalen + PadCnt; (ACK, PROBE) frame longer than its headers.
    ICRC: ICRC mismatch (not checked on trimmed DATA frames).
    """
    FRAMING = 0
    ETHERTYPE = 1
    RUNT = 2
    VERSION = 3
    IPV6_LENGTH = 4
    NEXT_HEADER = 5
    SRH = 6
    DA = 7
    UDP_PORT = 8
    UDP_LENGTH = 9
    OPCODE = 10
    BTH = 11
    QPN = 12
    RKEY = 13
    DMALEN = 14
    ICRC = 15


N_REASONS = len(DropReason)


def _data(*args, **kw):
    """A datapath register: no reset (its value is only read after it was loaded)."""
    return Signal(*args, reset_less=True, src_loc_at=1, **kw)


def _bitrev32(v: int) -> int:
    return int(f"{v:032b}"[::-1], 2)


# ---------------------------------------------------------------- frame geometry
# Field positions (mrcnic.wire_format) on 64-bit beats.  The parser's beat tracking is
# written for 8-byte beats; the asserts hold what it relies on.
_WIDTH = 64                                     # data width, bits
_LANES = wf.beat_bytes(_WIDTH)                  # byte lanes per beat
_DATA = wf.layout("data")                       # no SRH, no ImmDt
_LAYOUTS = [wf.layout(kind, n, imm) for kind in ("data", "ack", "probe")
            for n in range(1, wire.MAX_USIDS // wire.USIDS_PER_CARRIER + 1)
            for imm in ((False, True) if kind == "data" else (False,))]
# The UDP header starts at lane 6 of beat b0: 6 without an SRH, 7 + Hdr Ext Len with one
# (the SRH is 8 + 8 Hdr Ext Len bytes, RFC 8200 / 8754: Hdr Ext Len in 8-byte units).
_B0, _UDP_LANE = wf.beat_lane(_DATA.offset("udp"), _WIDTH)             # 6, 6
_HEL_UNIT = 8
assert _HEL_UNIT == _LANES and wf.SRH_FIXED.length == _LANES and _UDP_LANE == 6
assert all(lay.offset("udp") == _DATA.offset("udp") + (lay.header("srh").length if "srh" in lay
                                                        else 0) for lay in _LAYOUTS)
_REL_LAST = _UDP_LANE - 1       # frame bytes - 1 from beat b0's first byte = UDP length + 5
_SRH_ADJ = wf.SRH_FIXED.length - _REL_LAST      # ... = IPv6 payload length - 8 Hdr Ext Len - 3
assert 0 <= _SRH_ADJ < _HEL_UNIT


def _l4_len(lay):
    """UDP length of a payload-free ``lay`` frame: UDP .. ICRC."""
    return lay.frame_bytes() - lay.offset("udp")


def _ext_len(lay):
    """Bytes of the headers after the BTH (RETH [+ ImmDt], AETH + MRCSack, MRCProbe)."""
    return lay.header_bytes - lay.offset("bth") - wf.BTH.length


def _fpos(header, name, lay=None):
    """Field ``name`` of ``header`` at its place in a frame without SRH (SRH fields: in a
    frame with an SRH; ACK, probe and ImmDt fields: in those frames)."""
    if lay is None:
        lay = _FPOS_LAYOUT.get(header, _DATA)
    return lay.field(header, name)


_FPOS_LAYOUT = {"srh": wf.layout("data", 2), "aeth": wf.layout("ack"), "sack": wf.layout("ack"),
                "probe": wf.layout("probe"), "immdt": wf.layout("data", imm=True)}
assert all(lay.offset("udp") == _DATA.offset("udp")
           for h, lay in _FPOS_LAYOUT.items() if h != "srh")


def _beat_of(fp):
    """The one beat field ``fp`` lies in (asserted)."""
    (beat,) = {pc.beat for pc in fp.pieces(_WIDTH)}
    return beat


def _rel_of(fp):
    """The beat of a transport field relative to b0 (the same with or without an SRH)."""
    assert fp.byte >= _DATA.offset("udp"), (fp.header, fp.field.name)
    return _beat_of(fp) - _B0


def _lanes_of(fp):
    """The byte lanes field ``fp`` occupies in its beat."""
    return [pc.lane for pc in fp.pieces(_WIDTH)]


def _view_ones():
    """{beat: 64-bit mask} of the bits forced to ones in the ICRC view of a frame without
    SRH (the pseudo LRH and the masked fields), in beat order; an SRH, a multiple of 8 bytes
    with no masked field, moves the transport beats' masks by whole beats."""
    bits = list(range(8 * wf.ICRC_FIRST_BYTE, 8 * (wf.ICRC_FIRST_BYTE + wf.LRH_BYTES)))
    bits += [b for fp in _DATA.fields() if fp.field.masked
             for b in range(fp.bit, fp.bit + fp.width)]
    out = {}
    for bit in bits:
        (pc,) = wf.FieldPos("", wf.Field("", bit, 1), bit).pieces(_WIDTH)
        out[pc.beat] = out.get(pc.beat, 0) | 1 << pc.lo
    assert not any(fp.field.masked for lay in _LAYOUTS if "srh" in lay
                   for fp in lay.fields() if fp.header == "srh")
    return dict(sorted(out.items()))


_VIEW_ONES = _view_ones()
# Beat 0's forced bytes (6, 7: the pseudo LRH's first) are folded into a constant CRC state;
# the others are beats 1 and 2 (LRH, TC, flow label, hop limit) and b0 + 1, b0 + 2 (UDP
# checksum, BTH FECN/BECN/resv6): ``mk_next`` selects their masks one beat ahead.
assert list(_VIEW_ONES) == [0, 1, 2, _B0 + 1, _B0 + 2]
assert _VIEW_ONES[0] == (1 << _WIDTH) - (1 << 8 * wf.ICRC_FIRST_BYTE)
#: CRC register after the first beat of the ICRC view (bytes 6, 7 = 0xFF; bytes 0..5 excluded)
_CRC_AFTER_BEAT0 = _bitrev32(zlib.crc32(b"\xff" * (_LANES - wf.ICRC_FIRST_BYTE)) ^ 0xFFFFFFFF)
assert CRC32_INIT == 0xFFFFFFFF
#: CRC value (zlib form) of a correct frame followed by k zero bytes, k = 0..7: the last
#: beat is zero-filled beyond tkeep, so a frame of length L ends with (-L) % 8 zero bytes.
_ICRC_PADDED = [zlib.crc32(bytes(k), ICRC_RESIDUE) for k in range(8)]


#: The meta word in front of every record (slot 0).
_Meta = data.StructLayout({
    "cand": 1,          # 1: candidate record (passed every check ranked before RKEY)
    "reason": 4,        # drop record: the DropReason
    "port": 3,          # plane the frame arrived on
    "size": 10,         # words of the record (1 for a drop record)
    "dmalen_bad": 1,    # candidate: DMALEN check failed
    "icrc_bad": 1,      # candidate: ICRC check failed
    "trimmed": 1,       # DATA frame carrying the trim DSCP
    "udp": 1,           # the QP is in UDP EV mode
    "copy": 1,          # DATA, not trimmed: a payload follows in slots 7..
    "opcode": 8,
    "qp": 3,
})


class RxParser(wiring.Component):
    """Receive parser and validator for one plane, or shared by several (64-bit AXI-Stream).

    Parameters
    ----------
    port : int or None
        Plane index 0..7, copied into ``RxPacket.port``; ``None`` selects the
        shared mode (``ports`` planes on one stream, tagged by ``s_port``).
    qps : int
        QP contexts 1..8 (``qp_w_addr`` is ceil(log2(qps)) bits, at least 1).
    regions : int
        Memory regions 1..16 (``mr_w_addr`` is ceil(log2(regions)) bits, at least 1).
    max_frame : int
        Longest frame accepted, in bytes (128..16384); longer frames are FRAMING drops.
    buffer_words : int
        Record buffer depth in 8-byte words, a power of two >= 1024 (one
        record: 1 word for a dropped frame, 8 for a frame without payload,
        7 + ceil(dmalen / 8) for a DATA frame).
    pkt_depth : int
        Kept for compatibility (>= 4): records wait in the record buffer, not
        in a separate FIFO.
    ports : int or None
        Shared mode only: number of planes 1..8.

    Attributes
    ----------
    s_axis : In(AxiStreamSignature(64))
        Received frames, lane 0 = first byte.  Every beat is registered once
        (a 2-entry input skid; ``tready`` is a flip-flop: the skid is empty).
        The parser stalls only while the buffer word a beat would write is
        still occupied (the read side frees one word per payload beat it
        sends), and at a frame's first beat while the previous frame's record
        cannot be written (buffer full); ``tready`` falls one cycle after a
        stall begins.  With ready outputs it stays high: one beat per clock,
        no idle cycles.
    s_port : In(3)
        Shared mode only: plane of the frame on ``s_axis``, valid with every
        beat, sampled on the first beat; copied into ``RxPacket.port``.
    own_usid : In(16), locator_block : In(32)
        SRV6 arrival DA = ``locator_block << 96 | own_usid << 80`` (RFC 9800).
    own_ip : In(128)
        DA accepted for QPs in STEV / UDP mode.
    trim_dscp : In(6)
        A DATA frame with this DSCP is a trimmed header (MRC packet trimming).
    qp_w_en : In(1), qp_w_addr : In(ceil(log2(qps))), qp_w_data : In(RxQpContext)
        QP table write port (``valid``, ``qpn``, ``mode`` are used here).
    mr_w_en : In(1), mr_w_addr : In(ceil(log2(regions))), mr_w_data : In(MemRegion)
        Memory-region table write port.  Write both tables while no frame arrives.
    pkt : Out(stream.Signature(RxPacket))
        One record per accepted frame, in arrival order.  ``qp`` is the index of
        the matching QP context; ``ev`` = flow label | (UDP sport & 0xFFF) << 20
        (SRV6, STEV) or UDP sport & 0x3FFF (UDP); ``addr`` = region base + VA -
        region VA; ``length`` = dmalen.  Trimmed DATA frames (DSCP = trim_dscp)
        come out with ``trimmed`` = 1 and no payload; trim-marked ACK/PROBE
        frames are checked as usual (their zeroed trailer fails the ICRC).
    payload : Out(AxiStreamSignature(64))
        Payload of each accepted non-trimmed DATA frame (dmalen bytes, pad
        excluded), lane 0 first, tkeep partial on the last beat; one frame per
        such ``pkt`` record, in the same order, released only after acceptance
        and after its ``pkt`` record has been presented.
    drops : Out(ArrayLayout(32, len(DropReason)))
        One-plane mode: dropped frames per :class:`DropReason` (wrapping 32-bit).
    drops_p<i> : Out(ArrayLayout(32, len(DropReason)))
        Shared mode: dropped frames of plane i (by ``s_port``) per reason.
    accepted : Out(ArrayLayout(32, 3))
        Accepted frames per :class:`~mrcnic.rtl.layouts.RxKind` (DATA, PROBE, ACK).
    cnt_rd_stb : In(1), cnt_rd_addr : In(range(counters))
        Read request of counter word ``cnt_rd_addr`` (one-cycle strobe, at least 3 cycles
        apart): word ``p * N_REASONS + r`` is the drop counter of plane ``p`` (shared mode;
        ``r`` in one-plane mode) and reason ``r``, word ``planes * N_REASONS + k`` the
        accepted counter of kind ``k``.  ``counters`` = ``planes * N_REASONS + 3``.
    cnt_rd_data : Out(32)
        The word requested, from :data:`CNT_RD_LATENCY` (6) cycles after the strobe cycle
        until the next request's word arrives (at least 4 cycles after its strobe).  Read
        from the counter block RAM in a cycle without an increment's read or write (the
        value of one instant between the strobe and its answer), so no count waits for it.
    drop_stb : Out(1)
        One-cycle pulse: a drop counter is written this cycle (the port shows it next cycle).

    Latency: a frame's record is committed 2 cycles after its last beat is
    taken on ``s_axis`` (1 in the input register; its buffer writes go through a
    register stage; its meta word, which waits for the two-stage ICRC, 2 cycles
    later); with the read side idle, its ``pkt`` record is presented
    ``max(15, regions + 13)`` cycles after the last beat (17 for 4 regions) and its
    payload's first beat 2 cycles after that; a drop is counted about 12 cycles
    after the last beat.  Read side: 4 cycles per
    dropped frame, ``max(11, regions + 9)`` cycles per other frame plus, with a
    payload, one per payload word and 2 for the read pipeline; a frame may be as
    short as one beat (the input waits only when the buffer is full).

    Timing structure (ECP5, 150 MHz class, at most 4-5 LUT levels per path): the
    input beat is registered (tkeep decoded, bytes beyond tkeep zeroed) and the
    parser's stall is a register computed from the next values of its terms
    (space check, verdict pending, buffer full), so the beat-taken enable is one
    LUT level; beat positions are one-hots and registered decodes of the beat
    counters; wide compares (DA in 16-bit pieces, DMALEN, the header checks'
    flags, the ICRC in quarters) are registered in parts and combined a cycle
    later; the ICRC verdict is patched into the meta word as it is written; HEAD steps of the
    read side are a registered one-hot; the buffer is read through the block RAM's
    output register (``rdw``), which also drives ``payload`` (no logic after
    it); the region checker registers the region word before comparing; the
    counter read-modify-write is 4 cycles deep and the read side makes count
    events at least 4 cycles apart.
    """

    def __init__(self, port: "int | None" = 0, qps: int = 8, regions: int = 4,
                 max_frame: int = 8192, buffer_words: int = 1024, pkt_depth: int = 8,
                 ports: "int | None" = None):
        if port is None:
            if ports is None:
                raise ValueError(f"shared mode (port=None) needs ports 1..{MAX_PORTS}, not None")
            check_ports(ports)
        else:
            check_port(port)
            if ports is not None:
                raise ValueError("give either port (one plane) or ports (shared mode), not both")
        check_qps(qps)
        check_regions(regions)
        if not 128 <= max_frame <= 16384:
            raise ValueError(f"max_frame must be 128..16384 bytes, not {max_frame}")
        if buffer_words < 1024 or buffer_words & (buffer_words - 1):
            raise ValueError(f"buffer_words must be a power of two >= 1024, not {buffer_words}")
        if pkt_depth < 4:
            raise ValueError(f"pkt_depth must be >= 4, not {pkt_depth}")
        self._port, self._ports, self._qps, self._regions = port, ports, qps, regions
        self._max_frame, self._buffer_words = max_frame, buffer_words
        #: counter words: drops (plane p, reason r at ``p * N_REASONS + r``), then accepted
        self.counters = (ports if port is None else 1) * N_REASONS + 3
        members = {
            "s_axis": In(AxiStreamSignature(64)),
            "own_usid": In(16),
            "locator_block": In(32),
            "own_ip": In(128),
            "trim_dscp": In(6),
            "qp_w_en": In(1),
            "qp_w_addr": In(max(1, ceil_log2(qps))),
            "qp_w_data": In(RxQpContext),
            "mr_w_en": In(1),
            "mr_w_addr": In(max(1, ceil_log2(regions))),
            "mr_w_data": In(MemRegion),
            "pkt": Out(stream.Signature(RxPacket)),
            "payload": Out(AxiStreamSignature(64)),
            "accepted": Out(data.ArrayLayout(32, 3)),
            "cnt_rd_stb": In(1),
            "cnt_rd_addr": In(range(self.counters)),
            "cnt_rd_data": Out(32),
            "drop_stb": Out(1),
        }
        if port is None:
            members["s_port"] = In(3)
            for i in range(ports):
                members[f"drops_p{i}"] = Out(data.ArrayLayout(32, N_REASONS))
        else:
            members["drops"] = Out(data.ArrayLayout(32, N_REASONS))
        super().__init__(members)

    @staticmethod
    def _srh_tlv_walk(m, fire, i_last, lane, bt7, pre, rel, b0, has_srh):
        """The SRH's TLVs (RFC 8754 section 2.1), walked one TLV per beat; returns ``bad``.

        The TLV area runs from the end of the segment list (byte 62 + 16 (Last Entry + 1):
        lane 6 of beat 9 + 2 Last Entry) to the end of the SRH (byte 62 + 8 Hdr Ext Len:
        lane 5 of beat b0), ``W`` = Hdr Ext Len - 2 (Last Entry + 1) words.  Each TLV is a
        Pad1 (type 0, one byte) or type, length and ``length`` bytes (PadN, HMAC, any
        other type: skipped).  The walk works on the previous beat, so a TLV starting in
        lane 7 reads its length from lane 0 of the beat in hand; ``d`` is the lane of the
        next TLV in the previous beat (>= 8: a later beat).  Each beat's per-lane TLV ends
        are computed as it is taken, so the walk's loop is a lane multiplexer.  ``bad``
        (the frame is dropped under SRH) is set when a TLV runs past the end of the SRH, or
        when a second TLV starts in the beat of another (more than one TLV start per 8-byte beat is not
        supported: RFC 8754 uses Pad1 for a single byte of padding and PadN beyond it).
        """
        w_lim = Signal(8)              # W, the TLV area in 8-byte words (beat 7)
        d = Signal(10)                 # lane of the next TLV start in the previous beat
        p_tlv, p_b0 = Signal(), Signal()   # the previous beat is a TLV beat / is beat b0
        bad = Signal()
        # Per lane L of a beat, registered as the beat is taken (so the walk's loop is only
        # a lane multiplexer): a TLV starting at L ends at nd = L + (1 for Pad1, else
        # 2 + its length byte at lane L + 1): dn[L] = nd - 8 (the next start's lane in the
        # following beat), lt8[L] = nd < 8 (a second start in this beat), eq6[L] = nd == 6
        # (the end of the area in beat b0).  Lane 7's length byte is lane 0 of the next beat.
        dn = [Signal(10, name=f"tw_dn{lane_i}") for lane_i in range(7)]
        lt8, eq6 = Signal(7), Signal(7)
        t7_pad1 = Signal()
        with m.If(fire):
            for L in range(7):
                # (one adder per lane, the compares on the length byte itself)
                pad1, ln = lane(L) == 0, lane(L + 1)
                m.d.sync += [dn[L].eq(Mux(pad1, (L - 7) & 0x3FF, ln + ((L - 6) & 0x3FF))),
                             lt8[L].eq(pad1 | (ln < max(0, 6 - L))),
                             eq6[L].eq(Mux(pad1, L == 5, ln == 4 - L) if L <= 4 else
                                       (pad1 & (L == 5)))]
            m.d.sync += [t7_pad1.eq(lane(7) == 0),
                         # beat 9 + 2 Last Entry .. b0 - 1 (pre: rel = Hdr Ext Len - 1 - (beat - 7));
                         # beat 7 never is one (w_lim is still the previous frame's then)
                         p_tlv.eq(~i_last & ~bt7 & pre & (rel < w_lim) & (w_lim != 0)),
                         p_b0.eq(~i_last & ~bt7 & b0 & has_srh & (w_lim != 0))]
        with m.If(fire & bt7):
            # in beat 7 with an SRH, rel = Hdr Ext Len - 1 (pre); W = Hdr Ext Len - 2 LE - 2
            m.d.sync += [w_lim.eq(Mux(pre, rel - 2 * lane(2) - 1, 0)), d.eq(6), bad.eq(0)]
        dn7 = Signal(10)
        m.d.comb += dn7.eq(Mux(t7_pad1, 0, lane(0) + 1))     # 7 + (1 or 2 + length) - 8
        sel = d[:3]
        near = d[3:] == 0                                     # d < 8
        dn_d = Array(dn + [dn7])[sel]
        lt8_d = Cat(lt8, Const(0, 1)).bit_select(sel, 1)
        eq6_d = Cat(eq6, Const(0, 1)).bit_select(sel, 1)
        with m.If(fire & p_tlv):
            m.d.sync += d.eq(Mux(near, dn_d, d - 8))
            with m.If(near & lt8_d):
                m.d.sync += bad.eq(1)                 # a second TLV start in this beat
        with m.If(fire & p_b0):
            # b0: lanes 0-5 end the area, the UDP header starts at lane 6
            with m.If(Mux(d < 6, ~eq6_d, d != 6)):
                m.d.sync += bad.eq(1)   # past the SRH, a second start, or a TLV ran past it
        return bad

    def elaborate(self, platform):
        m = Module()
        s = self.s_axis
        shared = self._port is None
        planes = self._ports if shared else 1
        qps, regions = self._qps, self._regions
        max_beats = (self._max_frame + 7) // 8 + 1        # beat counter saturates here
        depth = self._buffer_words
        abits = ceil_log2(depth)
        R = DropReason

        # ================================================================ tables
        qp_valid = [Signal(name=f"qp{i}_valid") for i in range(qps)]
        qp_qpn = [Signal(24, name=f"qp{i}_qpn") for i in range(qps)]
        qp_mode = [Signal(EvMode, name=f"qp{i}_mode") for i in range(qps)]
        with m.If(self.qp_w_en):
            with m.Switch(self.qp_w_addr):
                for i in range(qps):
                    with m.Case(i):
                        m.d.sync += [qp_valid[i].eq(self.qp_w_data.valid),
                                     qp_qpn[i].eq(self.qp_w_data.qpn),
                                     qp_mode[i].eq(self.qp_w_data.mode)]

        # Memory regions: three small memories read asynchronously (distributed RAM) by
        # the three stages of the region checker, each at its own entry.
        rbits = max(1, ceil_log2(regions))
        mr_a = memory.Memory(shape=97, depth=1 << rbits, init=[])        # valid, rkey, va
        mr_b = memory.Memory(shape=32, depth=1 << rbits, init=[])        # base
        mr_c = memory.Memory(shape=32, depth=1 << rbits, init=[])        # length
        m.submodules.mr_a, m.submodules.mr_b, m.submodules.mr_c = mr_a, mr_b, mr_c
        w = self.mr_w_data
        for mem, value in ((mr_a, Cat(w.valid, w.rkey, w.va)), (mr_b, w.base), (mr_c, w.length)):
            wport = mem.write_port()
            m.d.comb += [wport.en.eq(self.mr_w_en), wport.addr.eq(self.mr_w_addr),
                         wport.data.eq(value)]
        mr_ra = mr_a.read_port(domain="comb")
        mr_rb = mr_b.read_port(domain="comb")
        mr_rc = mr_c.read_port(domain="comb")

        # ================================================================ buffer memory
        # The read side never reads a word in the cycle it is written (it reads only
        # committed words; the write side writes only past the commit pointer): no
        # read/write collision logic is needed.
        mem = memory.Memory(shape=64, depth=depth, init=[], attrs={"no_rw_check": 1})
        m.submodules.buffer = mem
        wp = mem.write_port()
        rp = mem.read_port(domain="sync")
        # Writes go through a register stage (wr_*: the buffer is written one cycle after
        # the write side decides).  The read side sees the commit pointer one cycle late
        # (commit_vis), so the meta word of a record is in the buffer before it is read.
        commit_ptr = Signal(abits + 1)     # end of the committed records
        commit_vis = Signal(abits + 1)     # commit_ptr one cycle later (read side)
        m.d.sync += commit_vis.eq(commit_ptr)
        rd_lim = Signal(abits + 1)         # first word the read side still needs
        # The write side checks space against rd_lim one cycle old (rd_lim only moves up,
        # so a stale value is conservative), as registered bounds.
        rd_lim_r = Signal(abits + 1)
        lim2 = Signal(abits + 1)           # rd_lim + depth - 2: last address a beat's next
        m.d.sync += [rd_lim_r.eq(rd_lim), lim2.eq(rd_lim + depth - 2)]
        wr_en = Signal()
        wr_addr = _data(abits)
        wr_data = _data(64)
        wr_meta = _data()                  # wr_data is a meta word: its icrc_bad comes now
        icrc_pos = _Meta["icrc_bad"].offset
        wr_patch = Signal(64)
        m.d.comb += [wp.en.eq(wr_en), wp.addr.eq(wr_addr), wp.data.eq(wr_data | wr_patch)]

        # ================================================================ input register
        # Every beat is registered once before the parser looks at it (i_*), through a
        # 2-entry skid (k_*): s_axis.tready is a flip-flop (skid empty), and the beat
        # reaches its register through a mux and the tkeep decode (2 LUT levels).  Bytes
        # beyond tkeep are zeroed here (the ICRC view of the last beat is zero-filled).
        i_valid = Signal()
        k_empty = Signal(init=1)                 # the skid is empty (= s_axis.tready)
        k_valid = ~k_empty
        i_data, i_last, i_nl1, i_keep_ok, i_full = _data(64), _data(), _data(3), _data(), _data()
        k_data, k_keep, k_last = _data(64), _data(8), _data()
        i_port, k_port = _data(3), _data(3)
        i_l7z = _data()                          # lane 7 of i_data is zero
        s_port = self.s_port if shared else Const(0, 3)
        tready = Signal()                        # the parser takes the beat in i_*
        fire = Signal()
        m.d.comb += [s.tready.eq(k_empty), fire.eq(i_valid & tready)]
        take = ~i_valid | tready
        src_keep = Mux(k_valid, k_keep, s.tkeep)
        k = Signal(8)
        m.d.comb += k.eq(src_keep)
        with m.If(take):
            m.d.sync += [i_valid.eq(k_valid | s.tvalid), k_empty.eq(1),
                         i_data.eq(Mux(k_valid, k_data, s.tdata)
                                   & Cat(*[k[i].replicate(8) for i in range(8)])),
                         i_last.eq(Mux(k_valid, k_last, s.tlast)),
                         i_port.eq(Mux(k_valid, k_port, s_port)),
                         i_l7z.eq(~k[7] | ~Mux(k_valid, k_data, s.tdata)[56:64].any()),
                         i_keep_ok.eq(k[0] & Cat(*[~k[i + 1] | k[i] for i in range(7)]).all()),
                         i_full.eq(k.all()),
                         i_nl1.eq(Cat((k[1] & ~k[2]) | (k[3] & ~k[4]) | (k[5] & ~k[6]) | k[7],
                                      (k[2] & ~k[4]) | k[6], k[4]))]
        with m.Elif(k_empty):
            m.d.sync += [k_empty.eq(~s.tvalid), k_data.eq(s.tdata), k_keep.eq(s.tkeep),
                         k_last.eq(s.tlast), k_port.eq(s_port)]
        td = i_data

        def lane(i):
            return td[8 * i:8 * i + 8]

        def fld(fp, beat=None):            # field ``fp`` (its part in ``beat``) from the beat
            pcs = [pc for pc in fp.pieces(_WIDTH) if beat is None or pc.beat == beat]
            assert beat is not None or len({pc.beat for pc in pcs}) == 1
            return Cat(*[td[pc.lo:pc.hi] for pc in sorted(pcs, key=lambda pc: pc.value_lo)])

        beat = Signal(range(max_beats + 1))      # index of the current beat in its frame
        baddr = Signal(abits + 1, init=1)  # buffer address of this beat's word: commit_ptr + 1
                                           # (+ rel while l4)
        nl1 = i_nl1                              # bytes in this beat - 1 (tkeep contiguous)
        bt = Signal(8, init=1)                   # one-hot: bt[k] = (beat == k), k < 8
        with m.If(fire):
            m.d.sync += bt.eq(Mux(i_last, 1, bt << 1))
        first = bt[0]
        beat_bad = Mux(i_last, ~i_keep_ok, ~i_full)
        bad_keep = Signal()                      # an earlier beat of this frame was bad
        beat_sat = Signal()                      # beat == max_beats (it stops counting)
        with m.If(fire):
            m.d.sync += bad_keep.eq(~i_last & (beat_bad | (~first & bad_keep)))
            with m.If(i_last):
                m.d.sync += [beat.eq(0), beat_sat.eq(0)]
            with m.Elif(~beat_sat):
                m.d.sync += [beat.eq(beat + 1), beat_sat.eq(beat == max_beats - 1)]
        # at_lim: beat == max_frame // 8 (registered when the previous beat is taken)
        lim_b, lim_r = self._max_frame // 8, self._max_frame % 8
        at_lim = Signal()
        with m.If(fire):
            m.d.sync += at_lim.eq(~i_last & ~beat_sat & (beat == lim_b - 1))

        port_r = _data(3)                        # plane of the current frame
        port_bad = _data()
        if shared:
            with m.If(fire & first):
                m.d.sync += [port_r.eq(Mux(i_port < planes, i_port, planes - 1)),
                             port_bad.eq(i_port >= planes)]
        else:
            m.d.comb += port_r.eq(self._port)

        # L4 beat tracking: rel = beat - b0 while l4 (b0 = 6, or 7 + Hdr Ext Len with an SRH)
        has_srh = Signal()
        l4 = Signal()
        rel = _data(range(max_beats + 1))
        pre = Signal()                     # SRH: rel counts down to b0 (from Hdr Ext Len - 1)
        hel_f = _fpos("srh", "len")
        hel_now = fld(hel_f)               # SRH Hdr Ext Len (byte 55) in beat 6
        hel_z = i_l7z                      # ... == 0 (from the input register)
        ar = Signal(8)                     # one-hot: ar[k] = l4 & (rel == k), k < 8
        # registered rel decodes: ge6/ge7 (rel >= 6 / 7 while l4), rel_sat (rel == max_beats:
        # it stops counting), at_pe (rel == PE, the last payload word a frame may write),
        # pre_z (pre: rel == 0)
        PE = HDR_SLOTS + MAX_PAYLOAD_WORDS - 2
        ge6, ge7, rel_sat, at_pe, pre_z = Signal(), Signal(), Signal(), Signal(), Signal()
        advance = l4 & ~rel_sat
        l4_start = Signal()
        with m.If(fire):
            m.d.sync += ar.eq(Mux(i_last, 0, Cat(Const(0, 1), ar[0:7])))
            with m.If(i_last):
                m.d.sync += [l4.eq(0), pre.eq(0), ge6.eq(0), ge7.eq(0), at_pe.eq(0)]
            with m.Else():
                with m.If(advance):
                    m.d.sync += [rel.eq(rel + 1), baddr.eq(baddr + 1),
                                 rel_sat.eq(rel == max_beats - 1), at_pe.eq(rel == PE - 1),
                                 ge6.eq(ge6 | ar[5]), ge7.eq(ge7 | ar[6])]
                with m.If(bt[_B0 - 1] & ~has_srh):
                    m.d.comb += l4_start.eq(1)
                with m.If(bt[_beat_of(hel_f)] & has_srh):
                    with m.If(hel_z):
                        m.d.comb += l4_start.eq(1)
                    with m.Else():
                        m.d.sync += [pre.eq(1), rel.eq(hel_now - 1), pre_z.eq(hel_now == 1)]
                with m.If(pre):
                    with m.If(pre_z):
                        m.d.comb += l4_start.eq(1)
                    with m.Else():
                        m.d.sync += [rel.eq(rel - 1), pre_z.eq(rel == 1)]
                with m.If(l4_start):
                    m.d.sync += [l4.eq(1), pre.eq(0), rel.eq(0), ar.eq(1), ge6.eq(0), ge7.eq(0),
                                 rel_sat.eq(0), at_pe.eq(0)]

        def at_rel(k):
            assert k < len(ar) or k == PE
            return ar[k] if k < len(ar) else at_pe

        rel_lt7 = ~ge7                                 # rel <= 6 (l4)
        rel_ge6 = ge6                                  # rel >= 6 (l4)
        pay_end = Signal()                 # past the last payload word a frame may write
        with m.If(fire):
            m.d.sync += pay_end.eq(~i_last & (pay_end | at_pe))

        # ---------------------------------------------------------------- field checks
        eth_bad, ver_bad, trim_r = _data(), _data(), _data()     # (eth_bad: frame >= 14 bytes)
        with m.If(fire & first):
            m.d.sync += eth_bad.eq(0)
        type_f, ver_f, tc_f = _fpos("eth", "type"), _fpos("ipv6", "version"), _fpos("ipv6", "tc")
        assert _beat_of(type_f) == _beat_of(ver_f) == _beat_of(tc_f)
        with m.If(fire & bt[_beat_of(type_f)]):
            # (the EtherType is there when the beat reaches its last lane; DSCP = TC >> 2)
            m.d.sync += [eth_bad.eq((fld(type_f) != ETHERTYPE_IPV6)
                                    & (~i_last | (nl1 >= _lanes_of(type_f)[-1]))),
                         ver_bad.eq(fld(ver_f) != ver_f.field.value),
                         trim_r.eq(fld(tc_f)[2:8] == self.trim_dscp)]
        # plen: the IPv6 payload length (beat 2); from beat 7 on the UDP length + 5 (= SRH
        # length subtracted): a frame of the right length ends at rel, bytes - 1 =
        # plen >> 3, plen & 7.  18 bits, two's complement (negative: never equal to a
        # 16-bit field).
        plen = _data(18)
        nh_udp = _data()
        plen_f, nh_f = _fpos("ipv6", "plen"), _fpos("ipv6", "nh")
        assert _beat_of(plen_f) == _beat_of(nh_f)
        with m.If(fire & bt[_beat_of(plen_f)]):
            m.d.sync += [plen.eq(fld(plen_f)), nh_udp.eq(fld(nh_f) == NH_UDP),
                         has_srh.eq(fld(nh_f) == NH_ROUTING)]

        # DA (bytes 38..53: beat 4 lanes 6-7, beat 5, beat 6 lanes 0-5) against both forms
        da_srv6 = Cat(Const(0, 80), self.own_usid, self.locator_block)

        def da_byte(target, j):            # DA byte j (0 = first on the wire)
            return target[8 * (15 - j):8 * (16 - j)]

        def da_eq(target, lanes, j0):
            return Cat(*[lane(ln) == da_byte(target, j0 + i) for i, ln in enumerate(lanes)]).all()
        # the three beats' compares are registered in 16-bit pieces (two lanes each, at most
        # 3 LUT levels), then folded into da6 / dip
        da6, dip = _data(), _data()
        da_p = Signal(3)                   # the pieces hold the compares of beat 4, 5, 6
        da_s, da_i = [], []                # per beat: all pieces equal (SRV6 form, own_ip)
        da_spans = _fpos("ipv6", "dst").spans(_WIDTH)
        assert len(da_spans) == 3
        for bi, (lanes, j0) in enumerate((list(range(sp.lane, sp.lane + sp.nlanes)), sp.first)
                                         for sp in da_spans):
            ps, pi = [], []
            for k in range(0, len(lanes), 2):
                gs, gi = _data(name=f"da_s{bi}_{k // 2}"), _data(name=f"da_i{bi}_{k // 2}")
                m.d.sync += [gs.eq(da_eq(da_srv6, lanes[k:k + 2], j0 + k)),
                             gi.eq(da_eq(self.own_ip, lanes[k:k + 2], j0 + k))]
                ps.append(gs)
                pi.append(gi)
            da_s.append(Cat(*ps).all())
            da_i.append(Cat(*pi).all())
        m.d.sync += da_p.eq(Cat(*[fire & bt[sp.beat] for sp in da_spans]))
        with m.If(da_p[0]):
            m.d.sync += [da6.eq(da_s[0]), dip.eq(da_i[0])]
        with m.If(da_p[1]):
            m.d.sync += [da6.eq(da6 & da_s[1]), dip.eq(dip & da_i[1])]
        with m.If(da_p[2]):
            m.d.sync += [da6.eq(da6 & da_s[2]), dip.eq(dip & da_i[2])]

        srh_nh_udp, srh_type_ok, srh_bad = _data(), _data(), _data()
        srh_nh_f = _fpos("srh", "nh")
        assert _beat_of(srh_nh_f) == _beat_of(hel_f) == _B0 and _lanes_of(hel_f) == [7]
        hel_bits = (_HEL_UNIT - 1).bit_length()           # 8 Hdr Ext Len = Hdr Ext Len << 3
        with m.If(fire & bt[_beat_of(srh_nh_f)]):
            m.d.sync += [srh_nh_udp.eq(fld(srh_nh_f) == NH_UDP),
                         plen.eq(plen - Mux(has_srh, Cat(Const(_SRH_ADJ, hel_bits), hel_now),
                                            -_REL_LAST))]
        srh_type_f, sl_f, le_f = _fpos("srh", "type"), _fpos("srh", "segleft"), \
            _fpos("srh", "lastentry")
        assert _beat_of(srh_type_f) == _beat_of(sl_f) == _beat_of(le_f) == _B0 + 1
        seg_units = wf.SRH_SEGMENT_BYTES // _HEL_UNIT     # Hdr Ext Len units per segment
        with m.If(fire & bt[_beat_of(srh_type_f)]):
            # Hdr Ext Len < 2 * (Last Entry + 1); in beat 7, rel = Hdr Ext Len - 1 when pre
            # is set, and Hdr Ext Len = 0 when not
            m.d.sync += [srh_type_ok.eq(fld(srh_type_f) == SRH_TYPE),
                         srh_bad.eq((fld(sl_f) != 0) | ~pre | (rel < seg_units * fld(le_f) + 1))]
        tw_bad = self._srh_tlv_walk(m, fire, i_last, lane, bt[7], pre, rel, at_rel(0), has_srh)
        # udp_len = plen - 5 from beat 7 on, registered at beat 6 (plen_m8 = IPv6 payload
        # length - 8, registered between beats 2 and 6)
        udp_len, plen_m8 = _data(18), _data(18)
        m.d.sync += plen_m8.eq(plen - wf.SRH_FIXED.length)
        with m.If(fire & bt[_beat_of(hel_f)]):
            m.d.sync += udp_len.eq(Mux(has_srh, plen_m8 - Cat(Const(0, hel_bits), hel_now), plen))

        # transport fields: byte x of the UDP header is lane (x + 6) % 8 of beat b0 + (x + 6) // 8
        opcode = _data(8)
        dport_bad, ulen_bad, bth_bad = _data(), _data(), _data()
        pad = _data(2)
        dport_f, ulen_f = _fpos("udp", "dport"), _fpos("udp", "len")
        op_f, pad_f, tver_f = _fpos("bth", "opcode"), _fpos("bth", "padcount"), \
            _fpos("bth", "version")
        r1 = _rel_of(dport_f)
        assert r1 == _rel_of(ulen_f) == _rel_of(op_f) == _rel_of(pad_f) == _rel_of(tver_f)
        with m.If(fire & at_rel(r1)):
            m.d.sync += [dport_bad.eq(fld(dport_f) != ROCEV2_PORT),
                         ulen_bad.eq(fld(ulen_f) != udp_len),
                         opcode.eq(fld(op_f)), pad.eq(fld(pad_f)),
                         bth_bad.eq(fld(tver_f) != tver_f.field.value)]
        is_data, has_imm, is_ack, is_probe = _data(), _data(), _data(), _data()  # opcode decoded
        with m.If(fire & at_rel(r1)):
            m.d.sync += [is_data.eq((fld(op_f) == OP_WRITE_ONLY)
                                    | (fld(op_f) == OP_WRITE_ONLY_IMM)),
                         has_imm.eq(fld(op_f) == OP_WRITE_ONLY_IMM),
                         is_ack.eq(fld(op_f) == OP_ACK), is_probe.eq(fld(op_f) == OP_PROBE)]
        qp_hit = _data(qps)
        pkey_f, dqpn_f = _fpos("bth", "pkey"), _fpos("bth", "dqpn")
        r2 = _rel_of(pkey_f)
        assert r2 == _rel_of(dqpn_f)
        with m.If(fire & at_rel(r2)):
            dqpn = fld(dqpn_f)
            m.d.sync += [bth_bad.eq(bth_bad | (fld(pkey_f) != pkey_f.field.value)),
                         qp_hit.eq(Cat(*[qp_valid[i] & (qp_qpn[i] == dqpn) for i in range(qps)]))]
        qp_found = qp_hit.any()
        qp_first = Signal(qps)             # one-hot: the lowest matching QP context
        for i in range(qps):
            m.d.comb += qp_first[i].eq(qp_hit[i] & ~qp_hit[:i].any() if i else qp_hit[0])
        # the matching QP's index and UDP mode, registered (read with the verdict, which is at
        # least two cycles after qp_hit is loaded)
        qp_idx, qp_udp = _data(3), _data()
        m.d.sync += [qp_idx.eq(Cat(*[Cat(*[qp_first[i] for i in range(qps) if i >> b & 1]).any()
                                     for b in range(3)])),
                     qp_udp.eq(Cat(*[qp_first[i] & (qp_mode[i] == EvMode.UDP)
                                     for i in range(qps)]).any())]
        # DMALEN: ACK/PROBE at rel 2 (dm_ap); DATA from registered parts of the rel 4 / rel 5
        # fields (dm_*), combined at the verdict.  At rel 5 the record size assumes a good
        # dmalen; the cycle after, a bad one shrinks it to the header record (a frame ending
        # at rel 5 carries no payload: its record is the header record from the start).
        dm_ap, dm_hi, dm_zero, dm_gt, dm_pad, dm_lo_ne, dm_hi_ne = (_data() for _ in range(7))
        dm_pend = Signal()
        exp_dml = _data(17)                # DATA: the dmalen the frame length implies
        copy = _data()                     # DATA, not trimmed, dmalen good: payload follows
        rec_size = _data(10)               # words of the record if it is a candidate
        rec_size1 = _data(11)              # rec_size + 1
        trimmed = _data()                  # DATA frame with the trim DSCP (from rel 2)
        # 8 + 12 + 16 + 4 (+ 4) + pad: UDP .. ICRC of a payload-free DATA frame (+ ImmDt)
        assert _l4_len(_DATA) % 8 == 0 and wf.IMMDT.length == 4
        l4_fixed = Cat(pad, has_imm, Const(_l4_len(_DATA) >> 3, 3))
        ack_l4, probe_l4 = _l4_len(wf.layout("ack")), _l4_len(wf.layout("probe"))   # 48, 36
        with m.If(fire & at_rel(r1 + 1)):
            m.d.sync += [dm_ap.eq((is_ack & (plen != ack_l4 + _REL_LAST))
                                  | (is_probe & (plen != probe_l4 + _REL_LAST))),
                         dm_hi.eq(0), dm_zero.eq(0), dm_gt.eq(0), dm_pad.eq(0),
                         dm_lo_ne.eq(0), dm_hi_ne.eq(0), trimmed.eq(is_data & trim_r),
                         copy.eq(0), rec_size.eq(HDR_SLOTS + 1), rec_size1.eq(HDR_SLOTS + 2),
                         exp_dml.eq(udp_len - l4_fixed)]
        dml_f = _fpos("reth", "dmalen")
        dml_hi_rel, dml_lo_rel = sorted({pc.beat - _B0 for pc in dml_f.pieces(_WIDTH)})
        with m.If(fire & at_rel(dml_hi_rel) & is_data):
            m.d.sync += dm_hi.eq(fld(dml_f, _B0 + dml_hi_rel) != 0)
        m.d.sync += dm_pend.eq(fire & at_rel(dml_lo_rel) & is_data)
        with m.If(fire & at_rel(dml_lo_rel) & is_data):
            dml = fld(dml_f, _B0 + dml_lo_rel)              # dmalen[0:16]
            assert len(dml) == 16
            short = trimmed | i_last
            m.d.sync += [dm_zero.eq(dml == 0), dm_gt.eq(dml > MAX_DMALEN),
                         dm_pad.eq(pad != (-dml)[0:2]),
                         dm_lo_ne.eq(dml[0:8] != exp_dml[0:8]),
                         dm_hi_ne.eq(Cat(dml[8:16] != exp_dml[8:16], exp_dml[16]).any()),
                         copy.eq(~short),
                         rec_size.eq(Mux(short, HDR_SLOTS + 1, (dml[0:13] + 8 * HDR_SLOTS + 7) >> 3)),
                         rec_size1.eq(Mux(short, HDR_SLOTS + 2,
                                          (dml[0:13] + 8 * HDR_SLOTS + 15) >> 3))]
        dmalen_bad = (dm_ap | dm_hi | dm_zero | dm_gt | dm_pad
                      | (~trimmed & (dm_lo_ne | dm_hi_ne)))
        with m.If(dm_pend & dmalen_bad):
            m.d.sync += [copy.eq(0), rec_size.eq(HDR_SLOTS + 1), rec_size1.eq(HDR_SLOTS + 2)]

        # ---------------------------------------------------------------- ICRC (running CRC-32)
        # The ICRC view of the frame (wire.icrc_view) from byte 6 on, ICRC bytes included,
        # zero-filled to whole beats: a correct frame leaves the residue advanced by the
        # fill bytes.  Mask selects are registered one beat ahead.
        mk_b1, mk_r1 = _data(), _data()
        mk_next = [first & ~i_last, mk_b1 & ~i_last, at_rel(0) & ~i_last, mk_r1 & ~i_last]
        with m.If(fire):
            m.d.sync += [mk_b1.eq(mk_next[0]), mk_r1.eq(mk_next[2])]
        masks = [_VIEW_ONES[1],            # beat 1: bytes 8..13, TC, FL
                 _VIEW_ONES[2],            # beat 2: FL, hop limit
                 _VIEW_ONES[_B0 + 1],      # rel 1 (selected at rel 0): UDP checksum
                 _VIEW_ONES[_B0 + 2]]      # rel 2 (selected at rel 1): BTH byte 4
        # one registered select per set of masks covering a nibble (the mask is one flip-flop
        # and the beat's bit away from the XOR network)
        mk_sel = {}
        nibbles = []
        for n in range(16):
            cover = tuple(i for i, c in enumerate(masks) if c >> (4 * n) & 0xF)
            assert all((c >> (4 * n) & 0xF) in (0, 0xF) for c in masks)
            if cover and cover not in mk_sel:
                mk_sel[cover] = _data(name=f"mk_sel{len(mk_sel)}")
                with m.If(fire):
                    m.d.sync += mk_sel[cover].eq(Cat(*[mk_next[i] for i in cover]).any())
            nibbles.append(mk_sel[cover].replicate(4) if cover else Const(0, 4))
        mask = Cat(*nibbles)
        # Two stages: the beat's own share of the CRC (an XOR network over the masked beat
        # alone) is registered first (dx), then folded into the running state (the state's
        # share is an XOR of at most 32 state bits), so the CRC register's loop stays short.
        # The CRC of a frame is final two cycles after its last beat.
        # (the beat's share in two halves, bytes 0..3 and 4..7: two XOR networks of half
        # the inputs each)
        crc = _data(32)
        dx_lo, dx_hi, dx_first = _data(32), _data(32), _data()
        dx_v = Signal()
        tm = Signal(64)
        m.d.comb += tm.eq(td | mask)
        m.d.sync += dx_v.eq(fire)
        with m.If(fire):
            m.d.sync += [dx_lo.eq(crc32_update(Const(0, 32), Cat(tm[0:32], Const(0, 32)), 8)),
                         dx_hi.eq(crc32_update(Const(0, 32), Cat(Const(0, 32), tm[32:64]), 8)),
                         dx_first.eq(first)]
        with m.If(dx_v):
            m.d.sync += crc.eq(Mux(dx_first, _CRC_AFTER_BEAT0,
                                   crc32_update(crc, Const(0, 64), 8) ^ dx_lo ^ dx_hi))

        # ---------------------------------------------------------------- frame end (stage E)
        # Length-dependent checks at the last beat; every other check one cycle later from
        # the field registers (the next frame cannot change them before its beat 1).
        # frame longer than max_frame: beats past index B, or beat B with more than r bytes
        past_lim = Signal()
        with m.If(fire):
            m.d.sync += past_lim.eq(~i_last & (past_lim | at_lim))
        too_long = past_lim | (at_lim & (nl1 >= lim_r))
        ef_framing, ef_runt, ef_len = _data(), _data(), _data()
        v_valid = Signal()
        ext = Mux(is_data, Mux(has_imm, _ext_len(wf.layout("data", imm=True)), _ext_len(_DATA)),
                  Mux(is_ack, _ext_len(wf.layout("ack")),
                      Mux(is_probe, _ext_len(wf.layout("probe")), 0)))
        # bytes from beat b0's first up to the end of the ICRC: 6 + UDP + BTH + ext + ICRC
        l4_min = _UDP_LANE + wf.UDP.length + wf.BTH.length + wf.ICRC.length           # 30
        runt_l4 = ~l4 | (rel_lt7 & (Cat(nl1, rel[0:3]) + 1 < l4_min + ext))
        with m.If(fire & i_last):
            m.d.sync += [
                ef_framing.eq(bad_keep | beat_bad | too_long | port_bad),
                ef_runt.eq(runt_l4),
                # (a frame ending before b0 is a RUNT) flen = 48 + SRH length + 8 rel + bytes
                ef_len.eq(Cat(nl1, rel) != plen),
            ]

        # ---------------------------------------------------------------- stage V: verdict
        # Reasons NEXT_HEADER..QPN are summarised at rel 3 (every field they need is in by
        # then; a frame ending earlier is a RUNT, which ranks before them).
        hdr_flags = Signal(R.QPN + 1 - R.NEXT_HEADER)
        for reason, expr in {
            R.NEXT_HEADER: ~(nh_udp | (has_srh & srh_type_ok & srh_nh_udp)),
            R.SRH: has_srh & (srh_bad | tw_bad),
            R.DA: ~(da6 | dip) | Cat(*[qp_first[i] & Mux(qp_mode[i] == EvMode.SRV6, ~da6, ~dip)
                                       for i in range(qps)]).any(),
            R.UDP_PORT: dport_bad,
            R.UDP_LENGTH: ulen_bad,
            R.OPCODE: ~(is_data | is_ack | is_probe),
            R.BTH: bth_bad,
            R.QPN: ~qp_found,
        }.items():
            m.d.comb += hdr_flags[reason - R.NEXT_HEADER].eq(expr)
        # (the summary and the flags are registered every cycle: a frame that is not a RUNT
        # ends at rel 3 or later, and its verdict, at least one cycle after its last beat,
        # sees every field it needs; the reason is decoded from the flags after the register)
        hdr_f, hdr_bad = _data(len(hdr_flags)), _data()
        m.d.sync += [hdr_f.eq(hdr_flags), hdr_bad.eq(hdr_flags.any())]
        hdr_reason = Signal(4)
        for i in reversed(range(len(hdr_flags))):
            with m.If(hdr_f[i]):
                m.d.comb += hdr_reason.eq(R.NEXT_HEADER + i)
        early_reason = Signal(4)
        early = [(ef_framing, R.FRAMING), (eth_bad, R.ETHERTYPE), (ef_runt, R.RUNT),
                 (ver_bad, R.VERSION), (ef_len, R.IPV6_LENGTH)]
        m.d.comb += early_reason.eq(hdr_reason)
        for flag, reason in reversed(early):
            with m.If(flag):
                m.d.comb += early_reason.eq(reason)
        cand = ~(ef_framing | eth_bad | ef_runt | ver_bad | ef_len | hdr_bad)
        # zero bytes after the ICRC in the last beat: -(IPv6 payload length + 54) mod 8
        fill = ~plen[0:3]
        # ICRC verdict: each CRC bit against its expected value for this fill (one LUT: the
        # bit and the 3 fill bits), ORed in quarters and registered every cycle (crc and
        # plen hold until the verdict is written: the next frame's first beat is taken at the
        # earliest with it, and reaches crc two cycles later, plen four cycles later); the
        # quarters are combined as the verdict is patched into the meta word on its way into
        # the buffer (wr_meta, two cycles after the verdict: the meta word waits in mw_*)
        crc_ne = Signal(32)
        crc_f = crc32_final(crc)
        for j in range(32):
            m.d.comb += crc_ne[j].eq(crc_f[j] ^ Array(Const(c >> j & 1, 1)
                                                      for c in _ICRC_PADDED)[fill])
        icrc_ne = _data(4)
        m.d.sync += icrc_ne.eq(Cat(*[crc_ne[8 * i:8 * i + 8].any() for i in range(4)]))
        icrc_bad = ~trimmed & icrc_ne.any()
        meta = Signal(_Meta)
        m.d.comb += [
            meta.cand.eq(cand), meta.reason.eq(early_reason), meta.port.eq(port_r),
            meta.size.eq(Mux(cand, rec_size, 1)),
            meta.dmalen_bad.eq(dmalen_bad), meta.icrc_bad.eq(0),
            meta.trimmed.eq(trimmed), meta.udp.eq(qp_udp), meta.copy.eq(copy),
            meta.opcode.eq(opcode), meta.qp.eq(qp_idx),
        ]
        # The word at commit_ptr is free unless the buffer is full: commit_ptr - rd_lim =
        # depth, registered from the values a cycle earlier (commit_ptr moves only at v_do,
        # then full is assumed for one cycle; rd_lim only moves up).
        full = Signal()
        v_do = v_valid & ~full
        c_used = Signal(abits + 1)
        m.d.comb += c_used.eq(commit_ptr - rd_lim_r)
        full_next, v_valid_next = Signal(), Signal()
        m.d.comb += [full_next.eq(v_do | c_used[abits]),
                     v_valid_next.eq((fire & i_last) | (v_valid & full))]
        m.d.sync += [full.eq(full_next), v_valid.eq(v_valid_next)]
        commit_cand = Signal(abits + 1)
        commit_drop = Signal(abits + 1)
        m.d.comb += [commit_cand.eq(commit_ptr + rec_size), commit_drop.eq(commit_ptr + 1)]
        with m.If(v_do):
            # (v_valid follows tlast: l4 is 0, baddr is not moving)
            m.d.sync += [commit_ptr.eq(Mux(cand, commit_cand, commit_drop)),
                         baddr.eq(Mux(cand, commit_ptr + rec_size1, commit_ptr + 2))]

        # ---------------------------------------------------------------- buffer writes
        # beat 2 -> slot 1; beat b0 + k -> slot 1 + k (k = 1..6, and up to the last payload
        # word for DATA).  Words x0.. are realigned by 6 lanes (x = 8j .. 8j + 7), the payload
        # of a DATA frame without ImmDt by 2 lanes (it starts at x36).
        # (the words start at the UDP header's lane, 6, slot 1 with IPv6 byte 0 too; a DATA
        # payload without ImmDt at lane 2 (x36), with ImmDt at lane 6 (x40))
        pay_lane = _DATA.header_bytes % _LANES                                  # 2
        slot1_beat = _beat_of(_fpos("ipv6", "plen"))   # last beat of bytes 14..21 (beat 2)
        assert _DATA.offset("ipv6") % _LANES == _UDP_LANE and 0 < pay_lane < _UDP_LANE
        assert wf.layout("data", imm=True).header_bytes % _LANES == _UDP_LANE
        assert slot1_beat == (_DATA.offset("ipv6") + _LANES - 1) // _LANES
        prev = _data(8 * (_LANES - pay_lane))   # bytes 2..7 of the previous beat
        with m.If(fire):
            m.d.sync += prev.eq(td[8 * pay_lane:_WIDTH])
        # beat_wr: this beat writes a buffer word (beat 2, rel 1..6, DATA payload words up to
        # pay_end), registered when the previous beat is taken
        beat_wr, beat_wr_next = Signal(), Signal()
        m.d.comb += beat_wr_next.eq(Mux(fire, ~i_last & (bt[slot1_beat - 1] | (l4 & (~ge6 | (
            is_data & ~pay_end & ~at_pe)))), beat_wr))
        m.d.sync += beat_wr.eq(beat_wr_next)
        shift2 = l4 & is_data & ~has_imm & rel_ge6
        # Space check, one cycle ahead, for the word after this beat's (baddr + 1 <= rd_lim +
        # depth - 1; ahead negative: no space): the next write address is at most baddr + 1
        # (baddr jumps only when a record is committed, before the next frame's first beat,
        # two beats before its first write).
        ahead = Signal(abits + 1)
        m.d.comb += ahead.eq(lim2 - baddr)
        # (no beat is written while v_valid: the next frame is at its beat 0 at most)
        m.d.comb += wr_patch[icrc_pos].eq(wr_meta & icrc_bad)
        # The meta word is written two cycles after the verdict (v_do), when its ICRC check
        # is final: it waits one cycle in mw_*.  No beat is written then: the next frame's
        # first beat is taken with the verdict at the earliest, and only its third beat
        # (taken two cycles after the verdict, written the cycle after) writes.
        mw_v = Signal()
        mw_addr, mw_data = _data(abits), _data(_Meta.size)
        m.d.sync += mw_v.eq(v_do)
        with m.If(v_do):
            m.d.sync += [mw_addr.eq(commit_ptr), mw_data.eq(meta.as_value())]
        m.d.sync += [wr_meta.eq(mw_v), wr_en.eq(mw_v | (fire & beat_wr)),
                     wr_addr.eq(Mux(mw_v, mw_addr, baddr)),
                     wr_data.eq(Mux(mw_v, mw_data,
                                    Mux(shift2, Cat(prev, td[0:8 * pay_lane]),
                                        Cat(prev[8 * (_UDP_LANE - pay_lane):],
                                            td[0:8 * _UDP_LANE]))))]
        # The parser stalls (stall, registered from the next values of its terms) while the
        # beat would write a word that is not free, and while the previous frame's verdict
        # cannot be written (v_valid: the beat is the next frame's first).
        stall = Signal()
        m.d.sync += stall.eq((beat_wr_next & ahead[abits]) | (v_valid_next & full_next))
        m.d.comb += tready.eq(~stall)

        # ================================================================ counters
        # One block-RAM word per counter, one incrementer (read, EBR output register, + 1,
        # write: 4 cycles per event, events at least 4 cycles apart).  The read port also
        # serves the CSR reads (cnt_rd_*) in the cycles the incrementer neither reads nor
        # writes.  cnt_out: flip-flop copies, written with the count, that only drive the
        # drops / accepted ports (simulation and test visibility; a build that reads the
        # counters through cnt_rd_* only leaves them without a load and they are removed).
        n_drop = planes * N_REASONS
        n_cnt = n_drop + 3
        assert n_cnt == self.counters
        cnt_out = [Signal(32, name=f"cnt{i}") for i in range(n_cnt)]
        cmem = memory.Memory(shape=32, depth=n_cnt, init=[],
                             attrs={"ram_style": "block", "no_rw_check": 1})
        m.submodules.counters = cmem
        c_rp = cmem.read_port(domain="sync")
        c_wp = cmem.write_port()
        ev_en = Signal()                   # count event this cycle (at most one per 4 cycles)
        ev_idx = Signal(range(n_cnt))
        # event (ev), read (_r), block RAM output (_rr), c_raw (_3), inc_r (_4): written at _4
        ev_en_r, ev_en_rr, ev_en_3, ev_en_4 = Signal(), Signal(), Signal(), Signal()
        ev_idx_r, ev_idx_rr, ev_idx_3, ev_idx_4 = (_data(range(n_cnt)) for _ in range(4))
        drop_3 = Signal()                  # the event at _3 counts a drop
        clr_busy = Signal(init=1)          # zeroing the counter memory after reset
        clr_idx = Signal(range(n_cnt))
        # CSR read (cnt_rd_*): the request waits in q_pend / q_addr for a cycle in which the
        # port is free (no incrementer read: ev_en_r; no write, whose word a same-cycle read
        # would see undefined: ev_en_4, clr_busy).  At most two cycles in a row are taken
        # (the read of one event and the write of the one before it), so a request made in
        # cycle S reads in S + 1 .. S + 3 and its word is in cnt_rd_data from S + 6 on.
        q_pend, q_addr = Signal(), _data(range(n_cnt))
        q_go = Signal()
        q_go_1, q_go_2 = Signal(), Signal()
        m.d.comb += q_go.eq(q_pend & ~ev_en_r & ~ev_en_4 & ~clr_busy)
        with m.If(self.cnt_rd_stb):
            m.d.sync += [q_pend.eq(1), q_addr.eq(self.cnt_rd_addr)]
        with m.Elif(q_go):
            m.d.sync += q_pend.eq(0)
        m.d.sync += [q_go_1.eq(q_go), q_go_2.eq(q_go_1)]
        m.d.comb += [c_rp.addr.eq(Mux(ev_en_r, ev_idx_r, q_addr)), c_rp.en.eq(1)]
        m.d.sync += [ev_en_r.eq(ev_en), ev_idx_r.eq(ev_idx),
                     ev_en_rr.eq(ev_en_r), ev_idx_rr.eq(ev_idx_r),
                     ev_en_3.eq(ev_en_rr), ev_idx_3.eq(ev_idx_rr),
                     ev_en_4.eq(ev_en_3), ev_idx_4.eq(ev_idx_3),
                     drop_3.eq(ev_en_rr & (ev_idx_rr < n_drop)),
                     self.drop_stb.eq(drop_3)]
        c_raw = _data(32)                  # the counter read (block RAM output register)
        m.d.sync += c_raw.eq(c_rp.data)
        with m.If(q_go_2):
            m.d.sync += self.cnt_rd_data.eq(c_raw)
        # A count is written 3 cycles after its read: the read side makes its events at
        # least 4 cycles apart (a record takes IDLE x 2, HEAD step 0, step 1 at least), so
        # every read sees the previous write.
        inc_r = _data(32)
        with m.If(ev_en_3):
            m.d.sync += inc_r.eq(c_raw + 1)
        with m.If(clr_busy):
            m.d.comb += [c_wp.en.eq(1), c_wp.addr.eq(clr_idx), c_wp.data.eq(0)]
            m.d.sync += clr_idx.eq(clr_idx + 1)
            with m.If(clr_idx == n_cnt - 1):
                m.d.sync += clr_busy.eq(0)
        with m.Else():
            m.d.comb += [c_wp.en.eq(ev_en_4), c_wp.addr.eq(ev_idx_4), c_wp.data.eq(inc_r)]
        with m.If(ev_en_4):
            with m.Switch(ev_idx_4):
                for i in range(n_cnt):
                    with m.Case(i):
                        m.d.sync += cnt_out[i].eq(inc_r)
        if shared:
            for p in range(planes):
                for i in range(N_REASONS):
                    m.d.comb += getattr(self, f"drops_p{p}")[i].eq(cnt_out[p * N_REASONS + i])
        else:
            for i in range(N_REASONS):
                m.d.comb += self.drops[i].eq(cnt_out[i])
        for k in range(3):
            m.d.comb += self.accepted[k].eq(cnt_out[n_drop + k])

        def drop_idx(port, reason):
            return Cat(Const(reason, 4), port[0:3]) if shared else Const(reason, range(n_cnt))

        # ================================================================ read side
        # rdw: the buffer word, registered right after the block RAM (nothing in between,
        # same enable: the EBR's output register, boards/ebr_outreg.py); a word read at
        # HEAD step k is in rdw at step k + 2.
        rdw = _data(64)
        adv = Signal()
        with m.If(adv):
            m.d.sync += rdw.eq(rp.data)

        # the pkt register (kind and has_imm follow from the opcode of an accepted frame)
        o_port, o_qp, o_opcode = _data(3), _data(3), _data(8)
        o_psn, o_last, o_imm, o_va = _data(24), _data(), _data(32), _data(64)
        o_addr, o_len, o_ev, o_ecn, o_trim = _data(32), _data(13), _data(32), _data(2), _data()
        o_pid, o_ts = _data(16), _data(32)
        a_syn, a_msn, a_ev, a_flags = _data(8), _data(24), _data(32), _data(8)
        a_bpsn, a_bitmap, a_ts = _data(24), _data(64), _data(32)
        o_valid = Signal()
        r_data, r_imm, r_ack, r_probe = _data(), _data(), _data(), _data()   # opcode decoded
        p = self.pkt.payload
        m.d.comb += [
            self.pkt.valid.eq(o_valid),
            p.kind.eq(Cat(o_opcode[7], o_opcode[4])),    # 0x0A/0x0B DATA, 0xC0 PROBE, 0x11 ACK
            p.port.eq(o_port if shared else self._port), p.qp.eq(o_qp),
            p.psn.eq(o_psn), p.opcode.eq(o_opcode), p.last.eq(o_last),
            p.has_imm.eq(o_opcode[0] & ~o_opcode[4]), p.imm.eq(o_imm), p.va.eq(o_va),
            p.addr.eq(o_addr), p.length.eq(o_len), p.ev.eq(o_ev), p.ecn_ce.eq(o_ecn.all()),
            p.trimmed.eq(o_trim), p.probe_id.eq(o_pid), p.ts.eq(o_ts),
            p.ack.syndrome.eq(a_syn), p.ack.msn.eq(a_msn), p.ack.ev.eq(a_ev),
            p.ack.flags.eq(a_flags), p.ack.base_psn.eq(a_bpsn), p.ack.bitmap.eq(a_bitmap),
            p.ack.ts.eq(a_ts),
        ]
        with m.If(self.pkt.ready):
            m.d.sync += o_valid.eq(0)

        IDLE, HEAD, PAY = 0, 1, 2
        st = Signal(2)
        hs = Signal(5)                     # HEAD step: rdw holds slot SLOTS[hs - 1]
        rd_ptr = Signal(abits + 1)         # first word of the current record
        pay_addr = Signal(abits + 1)
        pay_left = Signal(10)              # payload words still to read
        r_dmalen_bad, r_icrc_bad, r_udp, r_copy = _data(), _data(), _data(), _data()
        r_pass, r_pass_cp = _data(), _data()     # no DMALEN / ICRC drop (and r_copy)
        rd_addr = Signal(abits + 1)
        m.d.comb += [rp.addr.eq(rd_addr[:abits]),
                     rd_lim.eq(Mux(st == PAY, pay_addr, rd_ptr))]

        o = self.payload
        p1_valid, p1_last = Signal(), _data()     # payload word in the block RAM's output
        p_valid, p_last = Signal(), _data()       # ... in rdw (the payload output register)
        m.d.comb += adv.eq(~p_valid | o.tready)
        issue = Signal()
        # (the pkt register holds the length until the payload has been sent)
        keeps = Array(Const((1 << (k + 1)) - 1, 8) for k in range(8))
        m.d.comb += [rp.en.eq(adv), o.tvalid.eq(p_valid), o.tlast.eq(p_last),
                     o.tkeep.eq(Mux(p_last, keeps[(o_len - 1)[0:3]], 0xFF)), o.tdata.eq(rdw)]
        pay_last = Signal()                # pay_left == 1 (registered with pay_left)
        with m.If(adv):
            m.d.sync += [p1_valid.eq(issue), p1_last.eq(pay_last),
                         p_valid.eq(p1_valid), p_last.eq(p1_last)]

        # read order after the meta word: x16.., x24.., x32.. (region check inputs), x0..,
        # bytes 14..21, x40..
        slots = [0, 4, 5, 6, 2, 1, 7]

        def rpieces(fp, k):
            """The pieces of field ``fp`` in the record word read at HEAD step ``k`` (in rdw
            at ``hsel[k]``), LSB first: slot 1 holds frame bytes 14..21, slot 2 + j the UDP
            header's bytes x = 8j .. 8j + 7."""
            slot = slots[k - 1]             # (ACK / probe fields: UDP at the same offset)
            base = (_DATA.offset("ipv6") if slot == 1
                    else _DATA.offset("udp") + _LANES * (slot - 2))
            word = wf.FieldPos(fp.header, fp.field, fp.bit - 8 * base)   # base at beat 0
            pcs = [pc for pc in word.pieces(_WIDTH) if pc.beat == 0]
            assert pcs, (fp.header, fp.field.name, k)
            return sorted(pcs, key=lambda pc: pc.value_lo)

        def rpart(fp, k):
            """(value_lo, bits) of the part of field ``fp`` in the word read at step ``k``."""
            pcs = rpieces(fp, k)
            return pcs[0].value_lo, Cat(*[rdw[pc.lo:pc.hi] for pc in pcs])

        def word_bits(fp, k):
            """The word bits (LSB first) holding field ``fp`` at HEAD step ``k``."""
            return [i for pc in rpieces(fp, k) for i in range(pc.lo, pc.hi)]

        def rfld(fp, k):
            """Field ``fp``'s bits in the word read at HEAD step ``k`` (the whole field)."""
            lo, bits = rpart(fp, k)
            assert lo == 0 and len(bits) == fp.width, (fp.header, fp.field.name)
            return bits

        # registered from rd_ptr and o_len (loaded at hs 4, read at decide >= 8):
        rec_next = _data(abits + 1)        # the next record (a DATA record ends past its payload)
        pay_first = _data(abits + 1)       # the first payload word
        pay_words = _data(10)
        m.d.sync += [rec_next.eq(Mux(r_copy, rd_ptr + ((o_len + 8 * HDR_SLOTS + 7) >> 3),
                                     rd_ptr + HDR_SLOTS + 1)),
                     pay_first.eq(rd_ptr + HDR_SLOTS), pay_words.eq((o_len + 7) >> 3)]
        decide = max(8, regions + 6)       # hs of the verdict
        hsel = Signal(decide + 1)          # one-hot HEAD step: hsel[k] = (st == HEAD) & (hs == k)
        # HEAD reads rd_ptr + slots[hs + 1], registered a cycle ahead (rd_ptr does not move
        # in HEAD before its last step)
        head_addr = _data(abits + 1)
        hs_next = Mux(st == HEAD, hs + 1, 0)
        m.d.sync += head_addr.eq(rd_ptr + Array(Const(sl, 3) for sl in slots[1:] + [0, 0])[
            hs_next[0:3]])
        mv = _Meta(rdw[0:_Meta.size])

        # region checker: stage A (hs = 4 + i), B (5 + i), C (6 + i) for region i.  Stage A
        # reads the region's valid / rkey / VA and base, stage B its length; every compare
        # and add works on registers (C: end <= length, then the found flag and o_addr).
        rkey = Cat(a_bpsn, a_flags)
        dmalen = a_bitmap[32:64]
        # (a DATA frame's rkey and dmalen lie where those ACK fields are loaded from)
        assert word_bits(_fpos("reth", "rkey"), 3) == (word_bits(_fpos("sack", "base_psn"), 3)
                                                   + word_bits(_fpos("sack", "flags"), 3))
        assert (word_bits(_fpos("reth", "dmalen"), 4)
                == word_bits(_fpos("sack", "bitmap"), 4)[32:64])
        d1_lo, e_end = _data(32), _data(33)
        base_b, addr_c, len_c = _data(32), _data(32), _data(32)
        ok_a, ok_b, found = _data(), _data(), _data()
        # stage enables and region addresses, registered (set for the next hs)
        # (the valid / rkey / VA word is read one step ahead, at hs = 3 + i, into ra_q)
        act_a, act_b, act_c = Signal(), Signal(), Signal()
        reg_a0, reg_a, reg_b = _data(rbits), _data(rbits), _data(rbits)
        hs_n = hs + 1
        m.d.sync += [act_a.eq((st == HEAD) & r_data & (hs_n >= 4) & (hs_n < 4 + regions)),
                     reg_a0.eq((hs_n - 3)[0:rbits]), reg_a.eq(reg_a0),
                     act_b.eq(act_a), reg_b.eq(reg_a), act_c.eq(act_b)]
        m.d.comb += [mr_ra.addr.eq(reg_a0), mr_rb.addr.eq(reg_a), mr_rc.addr.eq(reg_b)]
        ra_q = _data(97)
        m.d.sync += ra_q.eq(mr_ra.data)
        r_valid, r_rkey, r_va = ra_q[0], ra_q[1:33], ra_q[33:97]
        # 0 <= VA - region VA < 2**32: the low halves' difference, and the high halves'
        # difference (two registered subtractions) equal to the low halves' borrow
        d1 = Signal(33)
        m.d.comb += d1.eq(o_va[0:32] - r_va[0:32])
        borrow, d_hi = _data(), _data(32)
        m.d.sync += [d1_lo.eq(d1[0:32]), borrow.eq(d1[32]),
                     d_hi.eq(o_va[32:64] - r_va[32:64]),
                     ok_a.eq(act_a & r_valid & (r_rkey == rkey)),
                     base_b.eq(mr_rb.data),
                     e_end.eq(d1_lo + dmalen),
                     ok_b.eq(ok_a & ~d_hi[1:32].any() & (d_hi[0] == borrow)),
                     addr_c.eq(base_b + d1_lo), len_c.eq(mr_rc.data)]
        room = Signal(34)                  # len - end: a carry chain, its sign bit the compare
        m.d.comb += room.eq(len_c - e_end)
        ok_c = act_c & ok_b & ~room[33]
        with m.If(ok_c & ~found):
            m.d.sync += [found.eq(1), o_addr.eq(addr_c)]

        # rd_ptr != commit_vis, registered: rd_ptr moves only when the sequencer enters
        # IDLE, so from the second IDLE cycle on (settled) the compare is current.
        has_rec, settled = Signal(), Signal()
        m.d.sync += [has_rec.eq(rd_ptr != commit_vis), settled.eq(st == IDLE)]
        with m.Switch(st):
            with m.Case(IDLE):
                m.d.comb += rd_addr.eq(rd_ptr)
                # (records wait while the pkt register is busy, and for the last payload
                # word to leave the block RAM's output: adv keeps rdw moving through HEAD;
                # has_rec is exact from the second IDLE cycle on)
                with m.If(settled & has_rec & adv & ~p1_valid & ~clr_busy & ~o_valid):
                    m.d.sync += [st.eq(HEAD), hs.eq(0), hsel.eq(1)]
            with m.Case(HEAD):
                m.d.comb += rd_addr.eq(head_addr)
                m.d.sync += hs.eq(hs + 1)
                m.d.sync += hsel.eq(hsel << 1)
            with m.Case(PAY):
                m.d.comb += [rd_addr.eq(pay_addr), issue.eq(adv)]
                with m.If(issue):
                    m.d.sync += [pay_addr.eq(pay_addr + 1), pay_left.eq(pay_left - 1),
                                 pay_last.eq(pay_left == 2)]
                    with m.If(pay_last):
                        # (pay_addr + 1 = pay_first + pay_words = rec_next: rd_ptr, o_len
                        # and r_copy do not change in PAY)
                        m.d.sync += [st.eq(IDLE), rd_ptr.eq(rec_next)]
        # HEAD steps (hsel: one-hot, registered: hsel[k] = HEAD & hs == k)
        with m.If(hsel[1]):        # meta
            m.d.sync += [o_port.eq(mv.port), o_qp.eq(mv.qp),
                         o_opcode.eq(mv.opcode), o_trim.eq(mv.trimmed),
                         o_addr.eq(0), found.eq(0),
                         r_dmalen_bad.eq(mv.dmalen_bad),
                         r_icrc_bad.eq(mv.icrc_bad), r_udp.eq(mv.udp),
                         r_copy.eq(mv.copy),
                         r_pass.eq(~mv.dmalen_bad & ~mv.icrc_bad),
                         r_pass_cp.eq(~mv.dmalen_bad & ~mv.icrc_bad & mv.copy),
                         r_data.eq((mv.opcode == OP_WRITE_ONLY)
                                   | (mv.opcode == OP_WRITE_ONLY_IMM)),
                         r_imm.eq(mv.opcode == OP_WRITE_ONLY_IMM),
                         r_ack.eq(mv.opcode == OP_ACK),
                         r_probe.eq(mv.opcode == OP_PROBE)]
            with m.If(~mv.cand):                  # a drop record: count it
                m.d.comb += [ev_en.eq(1), ev_idx.eq(
                    Cat(mv.reason, mv.port) if shared else mv.reason)]
                m.d.sync += [rd_ptr.eq(rd_ptr + 1), st.eq(IDLE), hsel.eq(0)]
        # (hsel is one-hot: the steps are independent Ifs, no priority chain)
        # Kind-specific fields are zeroed at the meta step (below) and loaded only for their
        # kind: the zeroing is the flip-flops' synchronous reset (one net), no per-bit mux.
        F = _fpos
        va_f = F("reth", "va")
        with m.If(hsel[2]):        # x16..23
            m.d.sync += [o_last.eq(rfld(F("bth", "ackreq"), 2)),
                         o_psn.eq(rfld(F("bth", "psn"), 2))]
            with m.If(r_data):
                lo, bits = rpart(va_f, 2)
                m.d.sync += o_va[lo:lo + len(bits)].eq(bits)
            with m.If(r_ack):
                m.d.sync += [a_syn.eq(rfld(F("aeth", "syndrome"), 2)),
                             a_msn.eq(rfld(F("aeth", "msn"), 2))]
        with m.If(hsel[3]):        # x24..31 (rkey kept in ack.flags/base_psn)
            m.d.sync += [a_flags.eq(rfld(F("sack", "flags"), 3)),
                         a_bpsn.eq(rfld(F("sack", "base_psn"), 3))]
            with m.If(r_data):
                lo, bits = rpart(va_f, 3)
                m.d.sync += o_va[lo:lo + len(bits)].eq(bits)
            with m.If(r_ack):
                m.d.sync += a_ev.eq(rfld(F("sack", "ev"), 3))
            with m.If(r_probe):
                m.d.sync += [o_pid.eq(rfld(F("probe", "probe_id"), 3)),
                             o_ts.eq(rfld(F("probe", "ts"), 3))]
        with m.If(hsel[4]):        # x32..39 (dmalen kept in ack.bitmap)
            m.d.sync += a_bitmap.eq(rfld(F("sack", "bitmap"), 4))
            with m.If(r_data):
                m.d.sync += o_len.eq(rfld(F("reth", "dmalen"), 4)[0:len(o_len)])
            with m.If(r_imm):
                m.d.sync += o_imm.eq(rfld(F("immdt", "imm"), 4))
        with m.If(hsel[5]):        # x0..7: UDP source port
            sport = rfld(F("udp", "sport"), 5)
            with m.If(r_udp):
                m.d.sync += o_ev.eq(sport[0:14])
            with m.Else():
                m.d.sync += o_ev[20:32].eq(sport[0:12])
        with m.If(hsel[6]):        # bytes 14..21: ECN, flow label
            m.d.sync += o_ecn.eq(rfld(F("ipv6", "tc"), 6)[0:2])
            with m.If(~r_udp):
                fl_f = F("ipv6", "fl")
                m.d.sync += o_ev[0:fl_f.width].eq(rfld(fl_f, 6))
        with m.If(hsel[7]):        # x40..47
            with m.If(r_ack):
                m.d.sync += a_ts.eq(rfld(F("sack", "ts"), 7))
        with m.If(hsel[decide]):
            m.d.sync += hsel.eq(0)
            rkey_bad = r_data & ~found
            accept = ~rkey_bad & r_pass
            late = Mux(rkey_bad, R.RKEY, Mux(r_dmalen_bad, R.DMALEN, R.ICRC))
            m.d.comb += [ev_en.eq(1), ev_idx.eq(Mux(
                accept, n_drop + Cat(o_opcode[7], o_opcode[4]),
                Cat(late, o_port) if shared else late))]
            with m.If(accept):
                m.d.sync += o_valid.eq(1)
            with m.If(~rkey_bad & r_pass_cp):
                m.d.sync += [st.eq(PAY), pay_addr.eq(pay_first),
                             pay_left.eq(pay_words), pay_last.eq(pay_words == 1)]
            with m.Else():
                m.d.sync += [st.eq(IDLE),
                             rd_ptr.eq(rec_next)]
        # (statements last, so that each is the flip-flops' synchronous reset, over their
        # enables: the kind-specific fields at the meta step, the rkey / dmalen kept in the
        # ACK fields when a frame that is not an ACK is accepted)
        with m.If(hsel[1]):
            m.d.sync += [o_va.eq(0), a_syn.eq(0), a_msn.eq(0), a_ev.eq(0), o_pid.eq(0),
                         o_ts.eq(0), o_len.eq(0), o_imm.eq(0), a_ts.eq(0)]
        with m.If(hsel[decide] & ~r_ack):
            m.d.sync += [a_flags.eq(0), a_bpsn.eq(0), a_bitmap.eq(0)]
        return m
