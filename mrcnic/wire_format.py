"""mrcnic wire format v1 as data: every header field's offset, width and fixed value.

One description of where each field of each header sits, shared by the code that
builds or reads frames (RTL header builders and parsers, the simulator's quick
positional parses).  :mod:`mrcnic.wire` holds the Scapy layers and the codepoints;
this module describes the same bytes positionally, and ``tests/test_wire_format.py``
checks every field against those Scapy layers.  The prose version is
``docs/wire-format.md``.

Units and conventions
---------------------
* A :class:`Field`'s ``bit`` is its offset in **bits** from the first bit of its
  header, most significant bit first (bit 0 is bit 7 of byte 0), as in the RFC and
  IBTA header diagrams; ``width`` is in bits.  Fields are big-endian (network order)
  except the ICRC, which is little-endian (``order == "little"``).
* A :class:`Layout` places headers in a frame: byte offsets from the first byte of
  the Ethernet destination address (frames without FCS).
* A beat is ``data_width // 8`` bytes of an AXI-Stream ``tdata``; byte lane ``i``
  is ``tdata[8*i : 8*i+8]`` and lane 0 goes first on the wire, so frame byte ``o``
  is beat ``o // (data_width // 8)``, lane ``o % (data_width // 8)``.

Sources
-------
* Ethernet II: IEEE 802.3 clause 3 (MAC frame: destination, source, EtherType).
* IPv6: RFC 8200 section 3 (fixed header); ECN in the traffic class: RFC 3168.
* SRH: RFC 8754 section 2 (Segment Routing Header); uSID carriers: RFC 9800.
* UDP: RFC 768; destination port 4791 and the ICRC: IBTA RoCEv2 annex A17.
* BTH, RETH, AETH, ImmDt: IBTA Vol. 1 ch. 9 (9.2, 9.3.3, 9.3.4, 9.3.5).
* MRCSack (SACK extension) and MRCProbe (EV probe): the MRC paper and OCP MRC 1.0,
  as laid out by mrcnic wire format v1 (``docs/wire-format.md`` sections 11, 12).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import wire

__all__ = [
    "Field", "Header", "Layout", "FieldPos", "Piece", "Span",
    "ETHERNET", "IPV6", "SRH_FIXED", "UDP", "BTH", "RETH", "IMMDT", "AETH", "MRCSACK",
    "MRCPROBE", "ICRC", "HEADERS", "SRH_SEGMENT_BYTES", "LRH_BYTES", "ICRC_FIRST_BYTE",
    "NH_UDP", "NH_ROUTING", "DATA_OPCODES",
    "srh", "layout", "beat_bytes", "beats", "beat_lane", "last_keep", "udp_offset", "bth_offset",
]

NH_UDP = 17           #: IPv6 Next Header: UDP (RFC 768 / IANA protocol numbers)
NH_ROUTING = 43       #: IPv6 Next Header: Routing header (the SRH, RFC 8754)
DATA_OPCODES = (wire.OP_WRITE_ONLY, wire.OP_WRITE_ONLY_IMM)   #: BTH OpCodes of data frames
SRH_SEGMENT_BYTES = 16   #: one Segment List entry (an IPv6 address), bytes
LRH_BYTES = 8            #: the RoCEv2 pseudo LRH: 8 bytes of 0xFF at the start of the ICRC view
ICRC_FIRST_BYTE = wire.ETH_HLEN - LRH_BYTES   #: first frame byte covered by the ICRC (6)


@dataclass(frozen=True)
class Field:
    """One header field.

    ``name`` is the attribute name of the matching Scapy field (``mrcnic.wire`` /
    Scapy layers); ``bit`` the offset in bits from the header's first bit, MSB first;
    ``width`` in bits; ``value`` the value every mrcnic frame carries in it when
    sent (``None``: it varies); ``masked`` True when the ICRC view replaces it with
    ones (IBTA A17.3.3: it may change in flight); ``order`` the byte order.
    """

    name: str
    bit: int
    width: int
    value: int | None = None
    masked: bool = False
    order: str = "big"

    def __post_init__(self):
        # what read() needs, computed once (a field is read for every frame of a run)
        nbytes = (self.bit + self.width - 1) // 8 - self.bit // 8 + 1
        object.__setattr__(self, "_nbytes", nbytes)
        object.__setattr__(self, "_tail", 8 * nbytes - (self.bit % 8) - self.width)
        object.__setattr__(self, "_mask", (1 << self.width) - 1)

    @property
    def byte(self) -> int:
        """Offset in bytes, within the header, of the byte holding the field's first bit."""
        return self.bit // 8

    @property
    def nbytes(self) -> int:
        """Bytes the field touches (a 2-bit field inside one byte: 1)."""
        return self._nbytes

    @property
    def aligned(self) -> bool:
        """True when the field starts and ends on byte boundaries."""
        return self.bit % 8 == 0 and self.width % 8 == 0

    def read(self, buf: bytes, base: int = 0) -> int | None:
        """The field's value in ``buf`` for a header starting at byte ``base``.

        ``None`` when ``buf`` ends before the field does.
        """
        start = base + self.bit // 8
        end = start + self._nbytes
        if start < 0 or len(buf) < end:
            return None
        if self.order == "little":
            return int.from_bytes(buf[start:end], "little")
        # the bits after the field (_tail) shifted out, the field's width kept
        return (int.from_bytes(buf[start:end], "big") >> self._tail) & self._mask

    def write(self, buf: bytearray, value: int, base: int = 0) -> None:
        """Store ``value`` into the field of the header starting at byte ``base`` of ``buf``."""
        if not 0 <= value < 1 << self.width:
            raise ValueError(f"{self.name}: {value:#x} does not fit {self.width} bits")
        start = base + self.byte
        if self.order == "little":
            buf[start:start + self.nbytes] = value.to_bytes(self.nbytes, "little")
            return
        tail = 8 * self.nbytes - (self.bit % 8) - self.width
        mask = ((1 << self.width) - 1) << tail
        raw = int.from_bytes(buf[start:start + self.nbytes], "big")
        raw = (raw & ~mask) | (value << tail)
        buf[start:start + self.nbytes] = raw.to_bytes(self.nbytes, "big")


@dataclass(frozen=True)
class Header:
    """A header: short ``name`` (the key used by :class:`Layout`), ``title``, ``length`` in
    bytes and its ``fields`` in wire order.  Fields tile the header exactly."""

    name: str
    title: str
    length: int
    fields: tuple[Field, ...]

    def __post_init__(self):
        pos = 0
        for f in self.fields:
            if f.bit != pos:
                raise ValueError(f"{self.name}.{f.name} starts at bit {f.bit}, expected {pos}")
            pos += f.width
        if pos != 8 * self.length:
            raise ValueError(f"{self.name}: fields cover {pos} bits, not {8 * self.length}")
        object.__setattr__(self, "_by_name", {f.name: f for f in self.fields})

    def field(self, name: str) -> Field:
        """The field called ``name`` (``KeyError`` when there is none)."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"{self.name} has no field {name!r}") from None

    def __getitem__(self, name: str) -> Field:
        return self.field(name)


def _header(name: str, title: str, spec) -> Header:
    """A header from ``(field name, width in bits[, fixed value[, masked]])`` in wire order."""
    fields, bit = [], 0
    for entry in spec:
        fname, width, value, masked = tuple(entry) + (None, False)[len(entry) - 2:]
        fields.append(Field(fname, bit, width, value, masked))
        bit += width
    return Header(name, title, bit // 8, tuple(fields))


# --------------------------------------------------------------------------
# The headers
# --------------------------------------------------------------------------
#: Ethernet II, IEEE 802.3 (no VLAN tag; the MAC adds preamble and FCS).
ETHERNET = _header("eth", "Ethernet II", [
    ("dst", 48), ("src", 48), ("type", 16, 0x86DD)])

#: IPv6 fixed header, RFC 8200 section 3.  ``hlim`` 64 is the value sent (switches
#: decrement it); ``tc`` = DSCP << 2 | ECN (RFC 3168).
IPV6 = _header("ipv6", "IPv6", [
    ("version", 4, 6), ("tc", 8, None, True), ("fl", 20, None, True), ("plen", 16),
    ("nh", 8), ("hlim", 8, 64, True), ("src", 128), ("dst", 128)])

#: Segment Routing Header, RFC 8754 section 2: its first 8 bytes (the Segment List
#: follows, 16 bytes per entry; see :func:`srh`).  mrcnic sends no TLVs.
SRH_FIXED = _header("srh", "Segment Routing Header", [
    ("nh", 8, NH_UDP), ("len", 8), ("type", 8, 4), ("segleft", 8), ("lastentry", 8),
    ("flags", 8, 0), ("tag", 16, 0)])

#: UDP, RFC 768; destination port 4791 (IBTA A17.2), checksum 0 (the ICRC covers
#: the datagram; masked to ones in the ICRC view).
UDP = _header("udp", "UDP", [
    ("sport", 16), ("dport", 16, wire.ROCEV2_PORT), ("len", 16), ("chksum", 16, 0, True)])

#: Base Transport Header, IBTA Vol. 1 9.2 (Scapy's ``BTH`` field names; its ICRC is
#: the frame's trailer, :data:`ICRC`).
BTH = _header("bth", "Base Transport Header", [
    ("opcode", 8), ("solicited", 1, 0), ("migreq", 1, 0), ("padcount", 2), ("version", 4, 0),
    ("pkey", 16, 0xFFFF), ("fecn", 1, 0, True), ("becn", 1, 0, True), ("resv6", 6, 0, True),
    ("dqpn", 24), ("ackreq", 1), ("resv7", 7, 0), ("psn", 24)])

#: RDMA Extended Transport Header, IBTA Vol. 1 9.3.3 (on every mrcnic data packet).
RETH = _header("reth", "RDMA Extended Transport Header", [
    ("va", 64), ("rkey", 32), ("dmalen", 32)])

#: Immediate data, IBTA Vol. 1 9.3.5 (OpCode 0x0B only).
IMMDT = _header("immdt", "Immediate Data", [("imm", 32)])

#: ACK Extended Transport Header, IBTA Vol. 1 9.3.4.
AETH = _header("aeth", "ACK Extended Transport Header", [("syndrome", 8), ("msn", 24)])

#: MRC SACK extension after the AETH (MRC paper / OCP MRC 1.0; mrcnic v1 layout).
MRCSACK = _header("sack", "MRC SACK extension", [
    ("ev", 32), ("flags", 8), ("base_psn", 24), ("bitmap", 64), ("ts", 32)])

#: MRC EV probe (OCP MRC 1.0 "EV probe"; mrcnic v1 layout).
MRCPROBE = _header("probe", "MRC EV probe", [
    ("ev", 32), ("port", 8), ("rsvd", 8, 0), ("probe_id", 16), ("ts", 32)])

#: Invariant CRC, IBTA RoCEv2 annex A17.3.3: the frame's last 4 bytes, little-endian.
ICRC = Header("icrc", "Invariant CRC", wire.ICRC_LEN, (Field("icrc", 0, 32, order="little"),))

#: Every fixed-length header by short name (the SRH, whose length varies, is :func:`srh`).
HEADERS = {h.name: h for h in (ETHERNET, IPV6, UDP, BTH, RETH, IMMDT, AETH, MRCSACK,
                               MRCPROBE, ICRC)}

# The lengths agree with mrcnic.wire's constants (which the builders use).
assert (ETHERNET.length, IPV6.length, UDP.length, BTH.length, RETH.length, IMMDT.length) == (
    wire.ETH_HLEN, wire.IPV6_HLEN, wire.UDP_HLEN, wire.BTH_HLEN, wire.RETH_HLEN, wire.IMM_HLEN)


def srh(n_carriers: int) -> Header:
    """The SRH carrying ``n_carriers`` (1..4) segments: :data:`SRH_FIXED` followed by
    ``segment0`` .. ``segment{n-1}`` (128 bits each, Segment List[i]; RFC 8754 2).
    Length ``8 + 16 * n_carriers`` bytes."""
    if not 1 <= n_carriers <= wire.MAX_USIDS // wire.USIDS_PER_CARRIER:
        raise ValueError(f"an SRH holds 1..4 carriers, not {n_carriers}")
    segs = tuple(Field(f"segment{i}", 8 * (SRH_FIXED.length + SRH_SEGMENT_BYTES * i),
                       8 * SRH_SEGMENT_BYTES) for i in range(n_carriers))
    return Header("srh", SRH_FIXED.title, SRH_FIXED.length + SRH_SEGMENT_BYTES * n_carriers,
                  SRH_FIXED.fields + segs)


# --------------------------------------------------------------------------
# Frame layouts and beat positions
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Piece:
    """The part of a field that lies in one byte lane of one beat.

    ``tdata[lo:hi]`` of beat ``beat`` (lane ``lane``) holds bits
    ``[value_lo, value_lo + hi - lo)`` of the field's value (bit 0 = LSB).
    """

    beat: int
    lane: int
    lo: int
    hi: int
    value_lo: int


@dataclass(frozen=True)
class Span:
    """The whole bytes of a byte-aligned field in one beat: lanes ``lane`` ..
    ``lane + nlanes - 1`` of beat ``beat`` hold the field's bytes ``first`` ..
    ``first + nlanes - 1`` (0 = most significant for big-endian fields)."""

    beat: int
    lane: int
    nlanes: int
    first: int


@dataclass(frozen=True)
class FieldPos:
    """A field at its place in a frame: header name, the :class:`Field`, and ``bit``, the
    absolute bit offset from the frame's first bit (MSB first)."""

    header: str
    field: Field
    bit: int

    @property
    def byte(self) -> int:
        """Frame byte offset of the byte holding the field's first bit."""
        return self.bit // 8

    @property
    def width(self) -> int:
        """Width in bits."""
        return self.field.width

    @property
    def nbytes(self) -> int:
        """Frame bytes the field touches."""
        return (self.bit + self.width - 1) // 8 - self.byte + 1

    def read(self, frame: bytes) -> int | None:
        """The field's value in ``frame`` (``None`` when the frame is too short)."""
        return self.field.read(frame, self.byte - self.field.byte)

    def pieces(self, data_width: int = 64) -> list[Piece]:
        """Where the field lies in ``data_width``-bit beats: one :class:`Piece` per byte
        lane touched, in wire order (a field across a beat boundary spans two beats).

        A little-endian field (the ICRC) must be byte-aligned.
        """
        nb = beat_bytes(data_width)
        first, end = self.bit, self.bit + self.width
        out = []
        for byte in range(first // 8, (end - 1) // 8 + 1):
            k0, k1 = max(first, 8 * byte) - 8 * byte, min(end, 8 * byte + 8) - 8 * byte
            lane = byte % nb
            if self.field.order == "little":
                if not self.field.aligned:
                    raise ValueError("a little-endian field must be byte-aligned")
                value_lo = 8 * (byte - first // 8)
            else:
                value_lo = end - (8 * byte + k1)
            out.append(Piece(byte // nb, lane, 8 * lane + 8 - k1, 8 * lane + 8 - k0, value_lo))
        return out

    def spans(self, data_width: int = 64) -> list[Span]:
        """The field's bytes grouped by beat (byte-aligned fields only; ``ValueError``
        otherwise): one :class:`Span` per beat it touches, in wire order."""
        if not self.field.aligned:
            raise ValueError(f"{self.header}.{self.field.name} is not byte-aligned")
        nb = beat_bytes(data_width)
        out = []
        for i in range(self.nbytes):
            beat, lane = divmod(self.byte + i, nb)
            if out and out[-1].beat == beat:
                out[-1] = Span(beat, out[-1].lane, out[-1].nlanes + 1, out[-1].first)
            else:
                out.append(Span(beat, lane, 1, i))
        return out


@dataclass(frozen=True)
class Layout:
    """The headers of one kind of frame, with their byte offsets.

    ``kind`` is ``"data"``, ``"ack"`` or ``"probe"``; ``n_carriers`` the uSID
    carriers of the path (more than one: an SRH of that many segments); ``imm``
    (data only) an ImmDt after the RETH.  Build with :func:`layout`.
    """

    kind: str
    n_carriers: int
    imm: bool
    headers: tuple[tuple[Header, int], ...]

    def header(self, name: str) -> Header:
        """The header called ``name`` (``KeyError`` when the frame has none)."""
        for h, _ in self.headers:
            if h.name == name:
                return h
        raise KeyError(f"a {self.kind} frame has no {name} header")

    def offset(self, name: str) -> int:
        """Byte offset of header ``name`` in the frame (``KeyError`` when absent).
        The ICRC's offset is that of a payload-free frame (see :meth:`icrc_offset`)."""
        for h, off in self.headers:
            if h.name == name:
                return off
        raise KeyError(f"a {self.kind} frame has no {name} header")

    def __contains__(self, name: str) -> bool:
        return any(h.name == name for h, _ in self.headers)

    def field(self, header: str, name: str) -> FieldPos:
        """Field ``name`` of header ``header`` at its place in the frame."""
        f = self.header(header).field(name)
        return FieldPos(header, f, 8 * self.offset(header) + f.bit)

    def fields(self) -> list[FieldPos]:
        """Every field of the frame's headers in wire order (the ICRC last)."""
        return [FieldPos(h.name, f, 8 * off + f.bit) for h, off in self.headers for f in h.fields]

    @property
    def header_bytes(self) -> int:
        """Bytes before the payload (data) or before the ICRC (ack, probe)."""
        return self.offset("icrc")

    def icrc_offset(self, payload: int = 0) -> int:
        """Byte offset of the ICRC for a payload of ``payload`` bytes (BTH PadCnt added)."""
        return self.header_bytes + payload + wire.roce_pad(payload)

    def frame_bytes(self, payload: int = 0) -> int:
        """Whole frame length in bytes, ICRC included, FCS excluded."""
        return self.icrc_offset(payload) + ICRC.length


def layout(kind: str = "data", n_carriers: int = 1, imm: bool = False) -> Layout:
    """The :class:`Layout` of a ``kind`` frame (``"data"``, ``"ack"``, ``"probe"``) on a
    path of ``n_carriers`` uSID carriers (1: no SRH), with ImmDt when ``imm`` (data only).

    The ICRC is placed as for a payload-free frame; :meth:`Layout.icrc_offset` gives it
    for a payload.  ``docs/wire-format.md`` section 1.
    """
    tails = {"data": (RETH,) + ((IMMDT,) if imm else ()), "ack": (AETH, MRCSACK),
             "probe": (MRCPROBE,)}
    if kind not in tails:
        raise ValueError(f"kind must be data, ack or probe, not {kind!r}")
    if imm and kind != "data":
        raise ValueError("only a data frame carries an ImmDt")
    seq = [ETHERNET, IPV6] + ([srh(n_carriers)] if n_carriers > 1 else [])
    seq += [UDP, BTH, *tails[kind], ICRC]
    placed, off = [], 0
    for h in seq:
        placed.append((h, off))
        off += h.length
    return Layout(kind, n_carriers, imm, tuple(placed))


def beat_bytes(data_width: int) -> int:
    """Bytes per beat of a ``data_width``-bit stream (32, 64, 128, ...: a multiple of 8)."""
    if data_width <= 0 or data_width % 8:
        raise ValueError(f"data width must be a positive multiple of 8 bits, not {data_width}")
    return data_width // 8


def beats(nbytes: int, data_width: int = 64) -> int:
    """Beats a frame of ``nbytes`` bytes takes on a ``data_width``-bit stream."""
    return -(-nbytes // beat_bytes(data_width))


def beat_lane(offset: int, data_width: int = 64) -> tuple[int, int]:
    """(beat, byte lane) of frame byte ``offset`` on a ``data_width``-bit stream."""
    return divmod(offset, beat_bytes(data_width))


def last_keep(nbytes: int, data_width: int = 64) -> int:
    """``tkeep`` of the last beat of an ``nbytes``-byte frame (lanes from 0, contiguous)."""
    rest = nbytes % beat_bytes(data_width) or beat_bytes(data_width)
    return (1 << rest) - 1


# --------------------------------------------------------------------------
# Quick positional parse (simulator side)
# --------------------------------------------------------------------------
def udp_offset(frame: bytes) -> int | None:
    """Byte offset of the UDP header of an Ethernet / IPv6 [/ SRH] / UDP frame.

    Walks at most one Routing header (the SRH, length from its Hdr Ext Len).
    ``None`` when the frame is not IPv6, the header after the IPv6 header (or
    the SRH) is not UDP, or the frame ends before the UDP header starts.
    Nothing else is checked (this is not a validity check: ``rtl/rx_parser.py``
    is).
    """
    ip = ETHERNET.length
    if ETHERNET["type"].read(frame) != ETHERNET["type"].value:
        return None
    nh, off = IPV6["nh"].read(frame, ip), ip + IPV6.length
    if nh == NH_ROUTING:
        ext = SRH_FIXED["len"].read(frame, off)
        if ext is None:
            return None
        nh, off = SRH_FIXED["nh"].read(frame, off), off + SRH_FIXED.length + 8 * ext
    if nh != NH_UDP or len(frame) < off:
        return None
    return off


def bth_offset(frame: bytes) -> int | None:
    """Byte offset of the BTH (right after the UDP header found by :func:`udp_offset`).

    ``None`` when :func:`udp_offset` finds no UDP header.  The frame may end inside
    the BTH or before it: :meth:`Field.read` then returns ``None``.
    """
    udp = udp_offset(frame)
    return None if udp is None else udp + UDP.length
