"""Layouts shared by the transmit and receive blocks of mrcnic.

Every record that crosses a block boundary inside the NIC is one
``amaranth.lib.data.Struct`` here, so producer and consumer cannot disagree.
Widths are in bits; addresses in bytes.  Multi-byte wire fields are *not*
stored in wire order here (these are internal records, not headers): a 128-bit
``da`` holds the IPv6 address as an integer (bit 127 = first bit on the wire).

Codepoints and limits come from ``mrcnic.wire`` (docs/wire-format.md).
"""

from amaranth.lib import data, enum

__all__ = [
    "MAX_PORTS", "MAX_QPS", "MAX_PATHS", "MAX_CARRIERS",
    "EvState", "EvMode", "WrOpcode",
    "PathEntry", "SprayReq", "Decision", "QpContext", "NicGlobals", "WorkRequest", "TxPacket",
    "RxKind", "MemRegion", "RxQpContext", "AckInfo", "RxPacket",
    "PlaceCmd", "AckRequest", "Completion",
    "SentInfo", "RetxReq", "EvEventReason", "EvEvent", "EvCounters", "EvCounterKind", "ProbeReq",
]

MAX_PORTS = 8        #: planes a NIC may have (port field is 3 bits)
MAX_QPS = 8          #: QP contexts in hardware (local QP index is 3 bits)
MAX_PATHS = 256      #: path-table entries (entry index is 8 bits)
MAX_CARRIERS = 4     #: uSID carriers per path: the DA plus up to 3 more in an SRH


class EvState(enum.Enum, shape=2):
    """EV state (OCP MRC 1.0): only GOOD entries carry data."""
    GOOD = 0
    ASSUMED_BAD = 1   #: set by the NIC on an ACK timeout (EV event raised)
    DENIED = 2        #: set by the controller


class EvMode(enum.Enum, shape=2):
    """EV format profile mode (OCP MRC 1.0), fixed bit positions of wire format v1.

    SRV6: DA = uSID carrier (+SRH), flow label = EV[19:0], UDP sport = 0xC000|EV[31:20].
    STEV: DA = peer address,        flow label = EV[19:0], UDP sport = 0xC000|EV[31:20].
    UDP:  DA = peer address,        flow label = 0,        UDP sport = 0xC000|EV[13:0].
    """
    SRV6 = 0
    STEV = 1
    UDP = 2


class WrOpcode(enum.Enum, shape=1):
    """Work-request opcode: MRC allows only RDMA Write and Write-with-Immediate."""
    WRITE = 0
    WRITE_IMM = 1


class PathEntry(data.Struct):
    """One path-table entry: an EV and how to reach the peer on it.

    ``da`` is the DA the frame leaves with (SRV6: first uSID carrier; STEV/UDP:
    the peer address).  With ``n_carriers`` > 1 the frame carries an SRH whose
    segment list (wire order: Segment List[0] = last carrier ... [n-1] = first
    carrier = ``da``) sits in the segment memory at ``seg_base``..``seg_base+n-1``.
    ``weight`` is how many decisions this entry gets per scheduling round
    (0 = none); copies of one EV are separate entries.
    """
    ev: 32
    port: 3
    state: EvState
    weight: 8
    n_carriers: 3
    seg_base: 8
    da: 128


class SprayReq(data.Struct):
    """Request for one spray decision: the QP and its EV profile (path-table range)."""
    qp: 3
    base: 8
    count: 9


class Decision(data.Struct):
    """Spray-scheduler output: the entry chosen for one packet."""
    index: 8
    entry: PathEntry


class QpContext(data.Struct):
    """Static per-QP transmit context (the dynamic next PSN lives in the segmenter).

    ``dest_qpn`` goes into BTH.DestQP; ``profile_base``/``profile_count`` is
    the QP's EV profile, a range of path-table entries; ``peer_usid`` is the
    peer NIC's own uSID (the SRV6 arrival DA is block | peer_usid | 0, used
    for the ICRC); ``start_psn`` is the first PSN the QP sends.
    """
    dest_qpn: 24
    start_psn: 24
    mode: EvMode
    profile_base: 8
    profile_count: 9
    peer_usid: 16
    rkey_check: 1     # reserved


class NicGlobals(data.Struct):
    """NIC-wide transmit settings (per-port next-hop MACs are a separate array)."""
    src_mac: 48
    src_ip: 128
    dscp: 6
    pmtu_log2: 4      #: RoCE path MTU = 2**pmtu_log2 bytes of payload (8..12: 256..4096)


class WorkRequest(data.Struct):
    """Host work request (stream into the segmenter).

    ``local_addr`` is the byte address of the source data in host memory and
    must be 8-byte aligned; ``length`` is 1..2**31 bytes; ``imm`` is used by
    WRITE_IMM only; ``wr_id`` comes back in the completion.
    """
    qp: 3
    opcode: WrOpcode
    wr_id: 16
    local_addr: 32
    remote_va: 64
    rkey: 32
    length: 32
    imm: 32


class TxPacket(data.Struct):
    """One data packet to frame: segmenter (+ spray decision) -> header generator.

    ``opcode`` is the BTH opcode (``wire.OP_WRITE_ONLY`` or ``OP_WRITE_ONLY_IMM``),
    ``last`` marks the last packet of a message (BTH AckReq), ``length`` is the
    payload in bytes (1..pmtu), ``va`` the remote VA of its first byte.
    ``dest_qpn``, ``mode`` and ``peer_usid`` are copied from the QP context.
    The payload itself follows on the payload stream, one frame per packet.
    """
    qp: 3
    dest_qpn: 24
    mode: EvMode
    peer_usid: 16
    psn: 24
    opcode: 8
    last: 1
    va: 64
    rkey: 32
    length: 13
    imm: 32
    path: Decision


# --------------------------------------------------------------------------
# Receive side
# --------------------------------------------------------------------------
class RxKind(enum.Enum, shape=2):
    """What a validated frame is."""
    DATA = 0      #: RDMA WRITE ONLY [WITH IMMEDIATE]
    PROBE = 1     #: MRC EV probe
    ACK = 2       #: ACK / SACK / NACK / probe reply (consumed by sender reliability)


class MemRegion(data.Struct):
    """A registered memory region: remote VA range [va, va+length) -> host address ``base``."""
    valid: 1
    rkey: 32
    va: 64
    length: 32
    base: 32


class RxQpContext(data.Struct):
    """Static per-QP receive context; the QP is found by BTH.DestQP == ``qpn``.

    ``peer_qpn`` goes into BTH.DestQP of the ACKs; ``peer_usid`` is the peer
    NIC's own uSID (arrival DA of ACKs in SRV6 mode, for their ICRC);
    ``start_psn`` is the first PSN expected.
    """
    valid: 1
    qpn: 24
    mode: EvMode
    peer_qpn: 24
    peer_usid: 16
    start_psn: 24


class AckInfo(data.Struct):
    """Fields of a received ACK/SACK/NACK (AETH + MRCSack), for sender reliability."""
    syndrome: 8
    msn: 24
    ev: 32
    flags: 8
    base_psn: 24
    bitmap: 64
    ts: 32


class RxPacket(data.Struct):
    """One validated frame: RX parser -> SACK tracker / placement / ACK generator.

    ``ev`` is rebuilt from the flow label and UDP source port by the QP's EV
    mode; ``ecn_ce`` is set when the frame arrived CE-marked; ``trimmed`` when
    its DSCP is the trim DSCP (its payload is gone: never placed).  ``addr``
    is the host address of the payload's first byte (region base + VA offset),
    already bounds- and rkey-checked.  For PROBE, ``probe_id``/``ts`` are
    echoed; for ACK, ``ack`` holds the AETH/SACK fields.
    """
    kind: RxKind
    port: 3
    qp: 3
    psn: 24
    opcode: 8
    last: 1
    has_imm: 1
    imm: 32
    va: 64
    addr: 32
    length: 13
    ev: 32
    ecn_ce: 1
    trimmed: 1
    probe_id: 16
    ts: 32
    ack: AckInfo


class PlaceCmd(data.Struct):
    """SACK tracker -> placement, one per DATA payload frame, in order.

    ``place`` = 1: write ``length`` bytes at host address ``addr``;
    ``place`` = 0: discard the payload frame (duplicate, out of window).
    """
    place: 1
    addr: 32
    length: 13


class AckRequest(data.Struct):
    """SACK tracker -> ACK generator: one ACK/SACK/NACK/probe-reply frame to send.

    ``cum_psn`` goes into BTH.PSN (the last PSN received in order);
    ``syndrome`` is AETH_ACK or AETH_NAK_PSN (trim NACK); ``flags`` are the
    MRCSack flags; ``ev`` the echoed EV; ``port`` the plane the data came in on.
    """
    qp: 3
    port: 3
    ev: 32
    cum_psn: 24
    syndrome: 8
    msn: 24
    flags: 8
    base_psn: 24
    bitmap: 64
    ts: 32


class Completion(data.Struct):
    """Receive completion: a whole message has been placed (raised once).

    ``psn`` is the message's last PSN; ``has_imm``/``imm`` carry the
    Write-with-Immediate's immediate data.
    """
    qp: 3
    psn: 24
    has_imm: 1
    imm: 32


# --------------------------------------------------------------------------
# Sender reliability (MRC: SACK/NACK processing, RTO, EV failover, probes)
# --------------------------------------------------------------------------
class SentInfo(data.Struct):
    """One data packet handed to the frame builder (tap on the segmenter's output).

    ``index`` is the path-table entry it was sprayed on; ``msg_last`` marks the
    last packet of its message; ``retx`` marks a retransmission.
    """
    qp: 3
    psn: 24
    index: 8
    ev: 32
    length: 13
    msg_last: 1
    retx: 1


class RetxReq(data.Struct):
    """Sender reliability -> segmenter: send PSN ``psn`` of QP ``qp`` again.

    ``avoid_index`` is the path-table entry the lost copy used; the new copy
    must go out on another entry.  ``trim``: the copy was trimmed (a trim NACK,
    not an ACK timeout): its bytes left the QP's bytes in flight, so the
    segmenter sends the new copy within the congestion window (``tx_ok``).
    """
    qp: 3
    psn: 24
    avoid_index: 8
    trim: 1


class EvEventReason(enum.Enum, shape=3):
    """Why an EV changed state (OCP MRC 1.0 EV events)."""
    ACK_TIMEOUT = 0     #: loss without trim: the path is presumed broken -> ASSUMED_BAD
    PROBE_OK = 1        #: a probe reply came back -> GOOD
    CONTROLLER = 2      #: set through the CSR bank
    MIN_ACTIVE = 3      #: would have gone ASSUMED_BAD, but ev_min_active holds it GOOD


class EvEvent(data.Struct):
    """An EV event: entry ``index`` (EV ``ev``) changed to ``state`` for ``reason``."""
    index: 8
    ev: 32
    state: EvState
    reason: EvEventReason
    rtt_ns: 32


class EvCounters(data.Struct):
    """Per-EV counters of one path-table entry (32-bit each, wrap around; OCP MRC 1.0 EV
    statistics): data packets sent (new and retransmitted), clean ACKs, ECN echoes, trim
    NACKs, ACK timeouts, probes sent.  Field order = :class:`EvCounterKind` order."""
    packets: 32
    clean_acks: 32
    ecn_echoes: 32
    trims: 32
    timeouts: 32
    probes: 32


class EvCounterKind(enum.Enum, shape=3):
    """Which :class:`EvCounters` field an increment goes to (same order as the fields)."""
    PACKET = 0      #: a data packet was sprayed on the entry
    CLEAN_ACK = 1   #: an ACK without ECN echo came back for a packet sent on it
    ECN_ECHO = 2    #: an ACK with ECN echo came back for a packet sent on it
    TRIM = 3        #: a trim NACK came back for a packet sent on it
    TIMEOUT = 4     #: a packet sent on it timed out (ACK timeout)
    PROBE = 5       #: an EV probe was sent on it


class ProbeReq(data.Struct):
    """Send one EV probe on path-table entry ``index`` for QP ``qp`` (time stamp ``ts`` ns)."""
    qp: 3
    index: 8
    ts: 32
