"""mrcnic wire format v1: Scapy layers, uSID carriers and the RoCEv2 ICRC.

Every header mrcnic puts on the wire has a Scapy layer here, so tests, the
simulator and users build and dissect the very same packets.  The bit-exact
description lives in ``docs/wire-format.md``; this module is its executable
form.

Frame layout (Ethernet II, IPv6 only)::

    Ether / IPv6 [/ IPv6ExtHdrSegmentRouting] / UDP(dport=4791) / BTH / ...
        data:   BTH(RC_RDMA_WRITE_ONLY[_WITH_IMMEDIATE]) / RETH [/ ImmDt] / payload / pad / ICRC
        ack:    BTH(RC_ACKNOWLEDGE) / AETH / MRCSack / ICRC
        probe:  BTH(MRC_PROBE) / MRCProbe / ICRC

Sources: IBTA RoCEv2 annex A17 (ICRC, UDP port 4791), IBTA Vol. 1 ch. 9
(BTH, RETH, AETH, ImmDt), RFC 8754 (SRH), RFC 9800 (NEXT-CSID uSIDs),
the MRC paper and OCP MRC 1.0 (EV, SACK echo, trimming).
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from dataclasses import dataclass, field

from scapy.contrib.roce import AETH, BTH
from scapy.fields import (BitField, ByteField, FlagsField, IntField,
                          ShortField, XIntField,
                          XLongField)
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

__all__ = [
    "ROCEV2_PORT", "OP_WRITE_ONLY", "OP_WRITE_ONLY_IMM", "OP_ACK", "OP_PROBE",
    "AETH_ACK", "AETH_NAK_PSN", "SACK_ECN_ECHO", "SACK_TRIM_NACK", "SACK_PROBE_REPLY",
    "ECN_NOT_ECT", "ECN_ECT0", "ECN_ECT1", "ECN_CE", "USIDS_PER_CARRIER",
    "RETH", "ImmDt", "MRCSack", "MRCProbe", "AETH", "BTH",
    "usid_carrier", "usid_decode", "usid_shift", "usid_arrival", "path_carriers",
    "ev_flow_label", "ev_udp_sport", "PathEncap",
    "build_data_frame", "build_ack_frame", "build_probe_frame",
    "arrival_form", "icrc_view", "icrc", "icrc_bytes", "check_icrc", "roce_pad",
    "header_length", "trim_frame", "srh_add_tlvs",
]

# --------------------------------------------------------------------------
# Codepoints
# --------------------------------------------------------------------------
ROCEV2_PORT = 4791            #: UDP destination port (IBTA A17.2)
OP_WRITE_ONLY = 0x0A          #: RC RDMA WRITE ONLY (IBTA Table 37)
OP_WRITE_ONLY_IMM = 0x0B      #: RC RDMA WRITE ONLY WITH IMMEDIATE
OP_ACK = 0x11                 #: RC ACKNOWLEDGE
OP_PROBE = 0xC0               #: MRC EV probe (IBTA manufacturer-specific range 0xC0-0xFF)

AETH_ACK = 0x1F               #: AETH syndrome: ACK, credit field 0b11111 (no credit limit)
AETH_NAK_PSN = 0x60           #: AETH syndrome: NAK, PSN sequence error (used for trim NACK)

SACK_ECN_ECHO = 0x01          #: MRCSack.flags: the acked data arrived CE-marked
SACK_TRIM_NACK = 0x02         #: MRCSack.flags: base_psn was trimmed, retransmit it now
SACK_PROBE_REPLY = 0x04       #: MRCSack.flags: this is the answer to an MRCProbe

ECN_NOT_ECT, ECN_ECT1, ECN_ECT0, ECN_CE = 0, 1, 2, 3   #: RFC 3168 codepoints

USIDS_PER_CARRIER = 6         #: 16-bit uSIDs after the 32-bit locator block (RFC 9800)
MAX_USIDS = 24                #: longest path: 4 carriers (DA + SRH)
ETH_HLEN, IPV6_HLEN, UDP_HLEN, BTH_HLEN, RETH_HLEN, IMM_HLEN = 14, 40, 8, 12, 16, 4
ICRC_LEN = 4


# --------------------------------------------------------------------------
# Scapy layers
# --------------------------------------------------------------------------
class RETH(Packet):
    """RDMA Extended Transport Header, 16 bytes (IBTA Vol. 1 9.3.3).

    Fields: ``va`` 64-bit remote virtual address of *this packet's* first
    byte, ``rkey`` 32-bit remote key, ``dmalen`` 32-bit length in bytes of
    this packet's payload (pad excluded).  mrcnic carries a RETH on every data
    packet so each one is placed independently (MRC).
    """

    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dmalen", 0)]

    def guess_payload_class(self, payload):
        bth = self.underlayer
        if isinstance(bth, BTH) and bth.opcode == OP_WRITE_ONLY_IMM:
            return ImmDt
        return Raw


class ImmDt(Packet):
    """Immediate data, 4 bytes (IBTA Vol. 1 9.3.5); last packet of a Write-with-Immediate."""

    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]


class MRCSack(Packet):
    """MRC SACK extension after the AETH, 20 bytes (mrcnic wire format v1).

    ``ev`` 32-bit EV echoed from the acknowledged data (or probe);
    ``flags`` 8 bits: ECN_ECHO (0x01), TRIM_NACK (0x02), PROBE_REPLY (0x04);
    ``base_psn`` 24-bit PSN of bitmap bit 0 (for a trim NACK: the trimmed PSN);
    ``bitmap`` 64 bits, bit *i* (LSB = 0) set when PSN base_psn+i has arrived;
    ``ts`` 32-bit timestamp echoed from the probe (ns, sender's clock), 0 otherwise.
    """

    name = "MRCSack"
    fields_desc = [
        XIntField("ev", 0),
        FlagsField("flags", 0, 8, ["ECN_ECHO", "TRIM_NACK", "PROBE_REPLY",
                                   "R3", "R4", "R5", "R6", "R7"]),
        BitField("base_psn", 0, 24),
        XLongField("bitmap", 0),
        IntField("ts", 0),
    ]


class MRCProbe(Packet):
    """MRC EV probe, 12 bytes (mrcnic wire format v1; OCP MRC ``EV probe``).

    ``ev`` 32-bit EV probed, ``port`` 8-bit plane it was sent on, ``rsvd`` 8,
    ``probe_id`` 16-bit sender tag, ``ts`` 32-bit send time in ns (sender
    clock), echoed by the probe reply so the sender measures the RTT.
    """

    name = "MRCProbe"
    fields_desc = [XIntField("ev", 0), ByteField("port", 0), ByteField("rsvd", 0),
                   ShortField("probe_id", 0), IntField("ts", 0)]


bind_layers(BTH, RETH, opcode=OP_WRITE_ONLY)
bind_layers(BTH, RETH, opcode=OP_WRITE_ONLY_IMM)
bind_layers(BTH, MRCProbe, opcode=OP_PROBE)
bind_layers(AETH, MRCSack)


# --------------------------------------------------------------------------
# uSID carriers (RFC 9800 NEXT-CSID, 32-bit locator block, 16-bit uSIDs)
# --------------------------------------------------------------------------
def _addr_int(addr) -> int:
    if isinstance(addr, int):
        return addr
    return int(ipaddress.IPv6Address(addr))


def _addr_str(value: int) -> str:
    return str(ipaddress.IPv6Address(value))


def usid_carrier(block: int, usids: list[int]) -> str:
    """Pack a 32-bit locator ``block`` and up to 6 16-bit ``usids`` into an IPv6 address.

    The first uSID follows the block (bits 95:80); unused uSIDs are 0x0000
    (end of carrier).  Raises ``ValueError`` for an empty or over-long list,
    a zero uSID or a value out of range.  Source: RFC 9800 section 4.
    """
    if not 0 <= block < 1 << 32:
        raise ValueError(f"locator block {block:#x} does not fit 32 bits")
    if not 1 <= len(usids) <= USIDS_PER_CARRIER:
        raise ValueError(f"a carrier holds 1..{USIDS_PER_CARRIER} uSIDs, got {len(usids)}")
    value = block << 96
    for i, usid in enumerate(usids):
        if not 0 < usid < 1 << 16:
            raise ValueError(f"uSID {usid:#x} is not a non-zero 16-bit value")
        value |= usid << (80 - 16 * i)
    return _addr_str(value)


def usid_decode(addr) -> tuple[int, list[int]]:
    """Split a uSID carrier into (32-bit block, list of uSIDs up to the first 0x0000)."""
    value = _addr_int(addr)
    usids = []
    for i in range(USIDS_PER_CARRIER):
        usid = (value >> (80 - 16 * i)) & 0xFFFF
        if usid == 0:
            break
        usids.append(usid)
    return value >> 96, usids


def usid_shift(addr) -> str:
    """Shift-and-forward of a uSID switch: drop the active uSID, shift the rest left 16 bits."""
    value = _addr_int(addr)
    block = value >> 96
    rest = (value << 16) & ((1 << 96) - 1)
    return _addr_str((block << 96) | rest)


def usid_arrival(block: int, usids: list[int]) -> str:
    """Destination address as it arrives: block + the last uSID (the destination NIC's own)."""
    if not usids:
        raise ValueError("a path needs at least one uSID")
    return usid_carrier(block, [usids[-1]])


def path_carriers(block: int, usids: list[int]) -> list[str]:
    """Carriers for a whole path, 6 uSIDs each, in travel order (first = initial DA).

    One carrier means no SRH; more mean an SRH whose segment list holds them
    in reverse order (RFC 8754: Segment List[0] is the last segment).
    Raises ``ValueError`` for an empty list or more than ``MAX_USIDS`` uSIDs.
    """
    if not usids:
        raise ValueError("a path needs at least one uSID")
    if len(usids) > MAX_USIDS:
        raise ValueError(f"a path holds at most {MAX_USIDS} uSIDs, got {len(usids)}")
    n = USIDS_PER_CARRIER
    return [usid_carrier(block, usids[i:i + n]) for i in range(0, len(usids), n)]


# --------------------------------------------------------------------------
# EV carriage (OCP MRC EV format profiles)
# --------------------------------------------------------------------------
def ev_flow_label(mode: str, ev: int, fl_bits: int = 20) -> int:
    """IPv6 flow label for ``ev``: EV[fl_bits-1:0] in SRV6 and STEV modes, 0 in UDP mode."""
    if mode == "UDP":
        return 0
    return ev & ((1 << fl_bits) - 1)


def ev_udp_sport(mode: str, ev: int, fl_bits: int = 20, sport_bits: int = 12) -> int:
    """UDP source port for ``ev``: 0xC000 | EV[fl_bits+sport_bits-1:fl_bits] (SRV6, STEV),
    0xC000 | EV[13:0] (UDP mode)."""
    if mode == "UDP":
        return 0xC000 | (ev & 0x3FFF)
    return 0xC000 | ((ev >> fl_bits) & ((1 << sport_bits) - 1))


@dataclass
class PathEncap:
    """Everything a frame needs to travel one path (one path-table entry).

    ``ev`` 32-bit EV, ``port`` plane index, ``mode`` 'SRV6' | 'STEV' | 'UDP',
    ``block`` 32-bit locator block and ``usids`` the path's uSIDs (SRV6), or
    ``dst_ip`` the peer's ordinary address (STEV, UDP).
    """

    ev: int
    port: int = 0
    mode: str = "SRV6"
    block: int = 0
    usids: list[int] = field(default_factory=list)
    dst_ip: str = "::"
    fl_bits: int = 20
    sport_bits: int = 12

    def carriers(self) -> list[str]:
        if self.mode not in ("SRV6", "STEV", "UDP"):
            raise ValueError(f"EV format mode must be SRV6, STEV or UDP, not {self.mode!r}")
        if self.mode != "SRV6":
            return [self.dst_ip]
        return path_carriers(self.block, self.usids)

    def arrival_da(self) -> str:
        if self.mode != "SRV6":
            return self.dst_ip
        return usid_arrival(self.block, self.usids)

    @property
    def flow_label(self) -> int:
        return ev_flow_label(self.mode, self.ev, self.fl_bits)

    @property
    def sport(self) -> int:
        return ev_udp_sport(self.mode, self.ev, self.fl_bits, self.sport_bits)


# --------------------------------------------------------------------------
# Frame builders (the reference model)
# --------------------------------------------------------------------------
def roce_pad(length: int) -> int:
    """BTH PadCnt for a payload of ``length`` bytes: bytes to the next 4-byte multiple."""
    return (-length) & 3


def header_length(n_carriers: int = 1, imm: bool = False) -> int:
    """Bytes before the payload of a data frame: 90, +4 with ImmDt, +8+16n with an SRH of n carriers."""
    srh = 0 if n_carriers <= 1 else 8 + 16 * n_carriers
    return ETH_HLEN + IPV6_HLEN + srh + UDP_HLEN + BTH_HLEN + RETH_HLEN + (IMM_HLEN if imm else 0)


def _l3(src_mac, dst_mac, src_ip, path: PathEncap, dscp, ecn):
    carriers = path.carriers()
    tc = (dscp << 2) | ecn
    ip = IPv6(src=src_ip, dst=carriers[0], tc=tc, fl=path.flow_label, hlim=64)
    pkt = Ether(src=src_mac, dst=dst_mac) / ip
    if len(carriers) > 1:
        segs = list(reversed(carriers))
        pkt = pkt / IPv6ExtHdrSegmentRouting(addresses=segs, segleft=len(segs) - 1,
                                             lastentry=len(segs) - 1, nh=17)
    return pkt / UDP(sport=path.sport, dport=ROCEV2_PORT, chksum=0)


def _finish(pkt: Packet, path: PathEncap) -> bytes:
    """Serialise ``pkt`` with a placeholder ICRC, then write the ICRC of its arrival form."""
    raw = bytearray(bytes(pkt))
    block = path.block if path.mode == "SRV6" else None
    raw[-4:] = icrc_bytes(bytes(raw), block)
    return bytes(raw)


def build_data_frame(*, src_mac: str, dst_mac: str, src_ip: str, path: PathEncap,
                     qpn: int, psn: int, va: int, rkey: int, payload: bytes,
                     imm: int | None = None, last: bool = True, dscp: int = 26,
                     ecn: int = ECN_ECT0) -> bytes:
    """One mrcnic data frame (bytes, no FCS): RDMA WRITE ONLY [WITH IMMEDIATE] with RETH.

    ``last`` sets the BTH AckReq bit, which marks the last packet of a
    message; ``imm`` (32-bit) makes it a Write-with-Immediate last packet.
    The ICRC is that of the frame as it arrives (see :func:`arrival_form`).
    """
    opcode = OP_WRITE_ONLY if imm is None else OP_WRITE_ONLY_IMM
    pad = roce_pad(len(payload))
    pkt = _l3(src_mac, dst_mac, src_ip, path, dscp, ecn)
    pkt = pkt / BTH(opcode=opcode, padcount=pad, dqpn=qpn, ackreq=int(last), psn=psn, icrc=0)
    pkt = pkt / RETH(va=va, rkey=rkey, dmalen=len(payload))
    if imm is not None:
        pkt = pkt / ImmDt(imm=imm)
    pkt = pkt / Raw(payload + b"\0" * pad)
    return _finish(pkt, path)


def build_ack_frame(*, src_mac: str, dst_mac: str, src_ip: str, path: PathEncap,
                    qpn: int, psn: int, ev: int, base_psn: int, bitmap: int = 0,
                    flags: int = 0, ts: int = 0, syndrome: int = AETH_ACK, msn: int = 0,
                    dscp: int = 26) -> bytes:
    """One ACK/SACK/NACK frame: BTH(ACKNOWLEDGE, psn=cumulative PSN) / AETH / MRCSack."""
    pkt = _l3(src_mac, dst_mac, src_ip, path, dscp, ECN_ECT0)
    pkt = pkt / BTH(opcode=OP_ACK, dqpn=qpn, psn=psn, icrc=0) / AETH(syndrome=syndrome, msn=msn)
    pkt = pkt / MRCSack(ev=ev, flags=flags, base_psn=base_psn, bitmap=bitmap, ts=ts)
    return _finish(pkt, path)


def build_probe_frame(*, src_mac: str, dst_mac: str, src_ip: str, path: PathEncap,
                      qpn: int, probe_id: int = 0, ts: int = 0, dscp: int = 26) -> bytes:
    """One EV probe frame on ``path`` (payload-free): BTH(MRC_PROBE) / MRCProbe."""
    pkt = _l3(src_mac, dst_mac, src_ip, path, dscp, ECN_ECT0)
    pkt = pkt / BTH(opcode=OP_PROBE, dqpn=qpn, icrc=0)
    pkt = pkt / MRCProbe(ev=path.ev, port=path.port, probe_id=probe_id, ts=ts)
    return _finish(pkt, path)


def trim_frame(frame: bytes, trim_dscp: int = 46) -> bytes:
    """What a trimming switch forwards instead of ``frame`` (MRC packet trimming).

    A data frame (RDMA WRITE ONLY [WITH IMMEDIATE]) is cut right after its
    transport headers (BTH + RETH [+ ImmDt]), the IPv6 payload length and UDP
    length are rewritten to match, the DSCP becomes ``trim_dscp`` (ECN kept)
    and a zero 4-byte trailer stands where the ICRC was (so dissectors still
    find the headers): a trimmed data frame never carries a valid ICRC and is
    never placed.

    A payload-free frame (ACK/SACK/NACK, EV probe) is shorter than any trim
    length a switch uses (UET trims to at least the transport headers), so it
    is forwarded whole; only its DSCP becomes ``trim_dscp``.  Its ICRC stays
    valid: the IPv6 traffic class is masked out of the ICRC (IBTA A17.3.3).
    (Cutting it to the BTH used to turn trimmed EV probes into RUNT drops at
    the receiver, so their probe replies never came back.)
    """
    try:
        pkt = Ether(frame)
    except (struct.error, IndexError) as exc:
        raise ValueError(f"not an Ethernet frame ({exc})") from exc
    if BTH not in pkt or UDP not in pkt:
        raise ValueError("only a RoCEv2 frame (UDP + BTH) can be trimmed")
    bth = pkt[BTH]
    is_data = bth.opcode in (OP_WRITE_ONLY, OP_WRITE_ONLY_IMM)
    if is_data:
        keep = BTH_HLEN + RETH_HLEN + (IMM_HLEN if bth.opcode == OP_WRITE_ONLY_IMM else 0)
        udp_off = len(frame) - len(bytes(pkt[UDP]))
        cut = bytearray(frame[:udp_off + UDP_HLEN + keep] + bytes(ICRC_LEN))
    else:
        cut = bytearray(frame)           # payload-free: forwarded whole, ICRC still valid
    ip = ETH_HLEN
    tc = (((cut[ip] & 0x0F) << 4) | (cut[ip + 1] >> 4))
    tc = (trim_dscp << 2) | (tc & 3)
    cut[ip] = 0x60 | (tc >> 4)
    cut[ip + 1] = ((tc & 0x0F) << 4) | (cut[ip + 1] & 0x0F)
    if is_data:
        struct.pack_into("!H", cut, ip + 4, len(cut) - ip - IPV6_HLEN)
        struct.pack_into("!H", cut, udp_off + 4, UDP_HLEN + keep + ICRC_LEN)
    return bytes(cut)


# --------------------------------------------------------------------------
# ICRC (IBTA RoCEv2 annex A17.3.3, IPv6 variant, extended over an SRH)
# --------------------------------------------------------------------------
def arrival_form(frame: bytes, usid_block: int | None = None) -> bytes:
    """The frame as the destination NIC receives it.

    ``usid_block`` is the 32-bit uSID locator block of the fabric; a
    destination address (or last SRH segment) outside it is an ordinary
    address (STEV/UDP modes) and is left alone.  With ``None`` the frame is
    returned unchanged.

    Without an SRH the uSID carrier is shifted until only its last uSID is
    left; with an SRH, Segments Left becomes 0 and the DA is the last
    carrier (Segment List[0]) shifted likewise (RFC 8754 4.3, RFC 9800 4.1).
    Non-uSID destinations (STEV/UDP modes) are unchanged.  The ICRC field is
    kept as it is.  Raises ``ValueError`` for a frame that is not IPv6.
    """
    if usid_block is None:
        return frame
    try:
        pkt = Ether(frame)
    except (struct.error, IndexError) as exc:
        raise ValueError(f"not an Ethernet frame ({exc})") from exc
    if IPv6 not in pkt:
        raise ValueError("not an IPv6 frame")
    ip = pkt[IPv6]
    srh = pkt.getlayer(IPv6ExtHdrSegmentRouting)
    last = srh.addresses[0] if srh is not None else ip.dst
    block, usids = usid_decode(last)
    if block != usid_block:
        return frame
    if usids and srh is not None:
        srh.segleft = 0
    if len(usids) > 1:
        ip.dst = usid_arrival(block, usids)
    elif srh is not None and usids:
        ip.dst = last
    return bytes(pkt)


def icrc_view(frame: bytes) -> bytes:
    """``frame`` (without FCS, ICRC included) with every ICRC-masked byte replaced.

    Same length as ``frame``.  Bytes 6..13 become 0xFF (the 8-byte pseudo
    LRH sits where the end of the Ethernet header is), IPv6 Traffic Class,
    Flow Label and Hop Limit, the UDP checksum and BTH byte 4 become ones.
    The ICRC is ``zlib.crc32(view[6:-4])``.  Hardware computes the CRC over
    exactly this view, so tests compare against it byte for byte.  Raises
    ``ValueError`` for a frame too short or without a UDP header.
    """
    if len(frame) < ETH_HLEN + IPV6_HLEN + UDP_HLEN + BTH_HLEN + ICRC_LEN:
        raise ValueError(f"a {len(frame)}-byte frame is too short for IPv6/UDP/BTH/ICRC")
    b = bytearray(frame)
    b[6:ETH_HLEN] = b"\xff" * 8
    ip = ETH_HLEN
    b[ip] |= 0x0F           # version nibble kept, traffic class high nibble set
    b[ip + 1:ip + 4] = b"\xff\xff\xff"   # traffic class low nibble + flow label
    b[ip + 7] = 0xFF        # hop limit
    nh, off = b[ip + 6], ip + IPV6_HLEN
    while nh != 17:
        if nh not in (0, 43, 60) or off + 2 > len(b):
            raise ValueError(f"cannot find the UDP header (next header {nh})")
        nh, off = b[off], off + 8 + 8 * b[off + 1]
    if off + UDP_HLEN + BTH_HLEN + ICRC_LEN > len(b):
        raise ValueError("the frame ends inside its UDP/BTH headers")
    b[off + 6:off + 8] = b"\xff\xff"
    b[off + UDP_HLEN + 4] = 0xFF
    return bytes(b)


def icrc(frame: bytes) -> int:
    """ICRC (CRC-32, reflected, as ``zlib.crc32``) of an Ethernet frame without FCS.

    Covers 8 bytes of 0xFF (the pseudo LRH), the IPv6 header with Traffic
    Class, Flow Label and Hop Limit set to all ones, any extension headers
    (the SRH) as they stand, the UDP header with its checksum set to 0xFFFF,
    the BTH with byte 4 (FECN, BECN, resv6) set to 0xFF, and everything after
    it up to (not including) the trailing 4-byte ICRC.  Identical to Scapy's
    ``BTH.compute_icrc`` when there is no SRH.  The caller chooses which form
    of the frame (as sent or as arrived) it passes.
    """
    return zlib.crc32(icrc_view(frame)[6:-ICRC_LEN]) & 0xFFFFFFFF


def icrc_bytes(frame: bytes, usid_block: int | None = None) -> bytes:
    """The 4 ICRC bytes (little-endian CRC, as Scapy packs them) for the arrival form of ``frame``."""
    return struct.pack("<I", icrc(arrival_form(frame, usid_block)))


def check_icrc(frame: bytes, usid_block: int | None = None) -> bool:
    """True when the trailing 4 bytes of ``frame`` are the ICRC of its arrival form.

    Pass the fabric's ``usid_block`` for a frame captured at the sender (its
    DA is then shifted to the arrival value first); pass ``None`` for a frame
    captured at the receiver or an ordinary-address (STEV/UDP) frame.
    A malformed frame (not IPv6/UDP/BTH) is simply not valid: ``False``.
    """
    try:
        form = arrival_form(frame, usid_block)
        return struct.pack("<I", icrc(form)) == frame[-ICRC_LEN:]
    except (ValueError, struct.error):
        return False


def srh_add_tlvs(frame: bytes, tlvs: bytes) -> bytes:
    """``frame`` (Ethernet/IPv6/SRH/...) with ``tlvs`` (a multiple of 8 bytes) appended to its
    SRH after the segment list (RFC 8754 section 2.1), Hdr Ext Len and the IPv6 payload length
    grown by them and the ICRC recomputed (left alone when the frame has no UDP/BTH to find).

    Raises ``ValueError`` when ``frame`` has no SRH or ``tlvs`` is not whole 8-byte words."""
    if len(frame) < 56 or frame[20] != 43 or len(tlvs) % 8:
        raise ValueError("srh_add_tlvs needs a frame with an SRH and whole 8-byte words of TLVs")
    u = ETH_HLEN + IPV6_HLEN + 8 + 8 * frame[55]
    b = bytearray(frame[:u] + tlvs + frame[u:])
    b[55] = (b[55] + len(tlvs) // 8) & 0xFF
    struct.pack_into("!H", b, 18, (struct.unpack_from("!H", b, 18)[0] + len(tlvs)) & 0xFFFF)
    try:
        b[-4:] = struct.pack("<I", icrc(bytes(b)))
    except ValueError:
        pass
    return bytes(b)
