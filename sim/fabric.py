"""Discrete-event model of the multi-plane Clos fabric that mrcnic NICs are connected to.

The fabric is built from a :class:`mrcnic.sim.topology.ClosTopology`: every node
is a host port or a uSID switch, every link is full duplex with one transmitter
(egress port, :class:`Port`) per direction.  Plain Python, no threads, fully
deterministic (a single event heap, ties broken by scheduling order).

Model and assumptions
---------------------
* **Time** is in nanoseconds, ``float`` internally; every API accepts ``int``
  or ``float`` ns and returns ``float`` ns.
* **Links** have a rate (Gb/s) and a propagation latency (ns); host links
  (host <-> leaf) and fabric links (leaf <-> spine) are configured separately.
  A frame of ``n`` bytes (as handled everywhere here: Ethernet header to ICRC,
  no FCS) occupies the wire for :func:`wire_bytes` ``(n) = max(n + 4, 64) + 20``
  bytes: FCS, the 64-byte minimum frame, and 20 bytes of preamble, SFD and
  inter-frame gap.  Serialisation time is ``wire_bytes * 8 / rate_gbps`` ns;
  the frame arrives (last bit, IFG included) at the far end
  ``serialisation + latency`` ns after its first bit left.  Switches are
  store-and-forward with a fixed forwarding delay ``switch_latency_ns``.
* **Host uplinks** (NIC -> leaf) are pure serialisers with an unbounded FIFO:
  :meth:`Fabric.send` at ``now`` starts the frame at ``now`` when the port is
  idle, else right after the frames queued before it.  Pacing is the NIC's job.
* **uSID switches** (:class:`UsidSwitch`, RFC 9800 NEXT-CSID, 32-bit block,
  16-bit uSIDs, RFC 8754 SRH): static tables from the topology, no ECMP.  A
  leaf knows its hosts and its plane's spines, a spine its plane's leaves.
  MAC addresses are not rewritten (the fabric is routed on the IPv6 DA only);
  frames arrive with the sender's Ethernet header.  Hop limit, DA, SRH Segments
  Left and ECN change on the way, all masked or normalised by the ICRC
  (:func:`mrcnic.wire.arrival_form`), so the ICRC still checks at the receiver.
* **ECMP** (``routing="ecmp"``, off by default): every switch also has an IPv6
  FIB and forwards a frame whose active uSID is not its own by it, as Linux
  seg6 NEXT-C-SID does (longest-prefix match; all prefixes here are /48s).
  A leaf hashes frames for other leaves' hosts over its equal-cost spine
  uplinks (source/destination address, flow label, UDP source port), so STEV
  and UDP EV-mode frames cross a flow-hashed fabric while SRV6 frames still
  follow their uSIDs.  A failed link leaves the ECMP groups
  ``ecmp_detect_ns`` after it went down (:meth:`Fabric.ecmp_group`).
* **Egress queues** on switch ports: a data FIFO of ``queue_bytes`` capacity
  (frame bytes) and a strict-priority FIFO of ``trim_queue_bytes`` for trimmed
  headers.  ECN: a frame whose ECN is ECT(0)/ECT(1) is set to CE when the bytes
  already waiting in the data FIFO (not counting the frame on the wire)
  exceed ``ecn_threshold_bytes``.  Overflow: a frame that does not fit is
  trimmed (:func:`mrcnic.wire.trim_frame`, DSCP ``trim_dscp``) into the
  priority FIFO, or dropped (``overflow``) when the trimmed frame does not fit
  either, trimming is off, or the frame is not RoCEv2.
* **Failures** (:meth:`Fabric.fail_link`, :meth:`Fabric.fail_switch`,
  :meth:`Fabric.fail_plane` and their ``recover_*``) take effect at a set time.
  A link is down while any failure covers it.  When it goes down, frames
  queued on it are lost (``link_down``), frames on the wire or in flight on it
  are lost on arrival, and frames later sent into it are lost.  A failed
  switch also loses every frame reaching it (``switch_down`` on the switch).
  A plane failure fails every switch of the plane (hence all its links).
* **Taps**: frames are recorded on host links (both directions) by default,
  or on every link (``pcap="all"``), timestamped when their first bit leaves
  the transmitter; :meth:`Fabric.write_pcap` writes a nanosecond pcap
  (Ethernet link type) with Scapy that opens in Wireshark.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import NamedTuple

from mrcnic import wire
from mrcnic import wire_format as wf
from mrcnic.sim.topology import ClosTopology

__all__ = ["Fabric", "UsidSwitch", "Port", "PortStats", "Delivery", "wire_bytes",
           "WIRE_OVERHEAD_BYTES", "FCS_BYTES", "MIN_FRAME_BYTES"]

WIRE_OVERHEAD_BYTES = 20   #: preamble (7) + SFD (1) + inter-frame gap (12), per frame
FCS_BYTES = 4              #: Ethernet FCS, not part of the frames handled here
MIN_FRAME_BYTES = 64       #: minimum Ethernet frame, FCS included
ETHERTYPE_IPV6 = wf.ETHERNET["type"].value   #: 0x86DD
# Frame byte offsets, from mrcnic.wire_format (positional reads on the forwarding path)
_IP = wf.layout().offset("ipv6")                # IPv6 header
_TC_END = wf.IPV6["tc"].bit + wf.IPV6["tc"].width   # bit after the traffic class (its ECN bits)
_ECN = _IP + (_TC_END - 1) // 8                 # byte holding ECN (the traffic class's last 2 bits)
_NH = _IP + wf.IPV6["nh"].byte                  # next header
_HLIM = _IP + wf.IPV6["hlim"].byte              # hop limit
_SA = _IP + wf.IPV6["src"].byte                 # source address
_DA = _IP + wf.IPV6["dst"].byte                 # destination address
_ADDR = wf.IPV6["dst"].width // 8               # bytes of an address
_SRH = _IP + wf.IPV6.length                     # first extension header (or UDP)
_SRH_FIELD = {n: _SRH + wf.SRH_FIXED[n].byte for n in ("len", "type", "segleft", "lastentry")}
_SEGMENTS = _SRH + wf.SRH_FIXED.length          # SRH Segment List[0]
_ROUTING = wf.NH_ROUTING
_SRH_TYPE = wf.SRH_FIXED["type"].value
_FLOW = wf.layout().field("ipv6", "fl")
_TCLASS = wf.layout().field("ipv6", "tc")
_ECN_CE_BITS = wire.ECN_CE << (-_TC_END % 8)   # CE in the byte at _ECN


def _ecmp_hash(frame: bytes, salt: str, seed: int) -> int:
    """ECMP hash of a frame: CRC-32 over the switch's salt, the seed, IPv6 source and
    destination address, flow label, next header and (for UDP) the source port."""
    import zlib

    fl = _FLOW.read(frame).to_bytes(3, "big")
    nh = frame[_NH]
    sport = frame[_SRH:_SRH + wf.UDP["sport"].width // 8] if nh == wf.NH_UDP else b""
    h = zlib.crc32(f"{salt}/{seed}".encode())
    return zlib.crc32(frame[_SA:_DA + _ADDR] + fl + bytes((nh,)) + sport, h)


def wire_bytes(frame_len: int) -> int:
    """Bytes a frame of ``frame_len`` bytes (no FCS) occupies on the wire.

    FCS added, padded to the 64-byte minimum, plus preamble, SFD and IFG:
    ``max(frame_len + 4, 64) + 20``.
    """
    return max(frame_len + FCS_BYTES, MIN_FRAME_BYTES) + WIRE_OVERHEAD_BYTES


@functools.lru_cache(maxsize=1 << 16)
def _shift_carrier(da: int) -> tuple[bytes, int]:
    """(shifted DA as 16 bytes, its active uSID or 0) of a 128-bit carrier ``da``: the
    shift-and-forward of :func:`mrcnic.wire.usid_shift` (the 32-bit block kept, the uSIDs
    after it moved up 16 bits, 0x0000 shifted in) and the first uSID after the block, as
    :func:`mrcnic.wire.usid_decode` gives it (RFC 9800 NEXT-CSID), on the integer.

    Cached: a fabric has few distinct carriers.  ``tests/test_fabric.py`` checks it against
    the reference functions.
    """
    new_da = (da >> 96 << 96) | ((da << 16) & ((1 << 96) - 1))
    return new_da.to_bytes(16, "big"), (new_da >> 80) & 0xFFFF


@functools.lru_cache(maxsize=1 << 16)
def _carrier_head(da: bytes) -> tuple[int, int]:
    """(block, active uSID or 0) of a carrier, by :func:`mrcnic.wire.usid_decode`."""
    block, usids = wire.usid_decode(int.from_bytes(da, "big"))
    return block, (usids[0] if usids else 0)


class Delivery(NamedTuple):
    """A frame handed to a NIC port: ``host`` index, ``plane`` (= NIC port), the frame
    (``frame_bytes``, no FCS) and ``time_ns`` its last bit arrived."""

    host: int
    plane: int
    frame_bytes: bytes
    time_ns: float


@dataclass
class PortStats:
    """Counters of one egress port (one direction of a link).

    ``frames``/``bytes`` transmitted (frame bytes, no FCS/overhead), ``drops``
    by reason (``overflow``, ``link_down``), ``ecn_marked`` frames set to CE,
    ``trimmed`` frames trimmed instead of dropped.
    """

    frames: int = 0
    bytes: int = 0
    drops: Counter = field(default_factory=Counter)
    ecn_marked: int = 0
    trimmed: int = 0

    def as_dict(self) -> dict:
        return {"frames": self.frames, "bytes": self.bytes, "drops": dict(self.drops),
                "ecn_marked": self.ecn_marked, "trimmed": self.trimmed}


class _Link:
    """Shared state of a full-duplex link: the failures covering it and an epoch
    bumped each time it goes down (frames in flight from an older epoch are lost)."""

    def __init__(self, a: str, b: str, plane: int):
        self.a, self.b, self.plane = a, b, plane
        self.down: set = set()
        self.epoch = 0
        self.ports: list[Port] = []

    @property
    def up(self) -> bool:
        return not self.down


def _is_trimmed(frame: bytes, trim_dscp: int) -> bool:
    """True for a data frame (BTH OpCode 0x0A/0x0B) whose IPv6 DSCP is ``trim_dscp``."""
    bth = wf.bth_offset(frame)
    if bth is None or _TCLASS.read(frame) >> 2 != trim_dscp:
        return False
    return wf.BTH["opcode"].read(frame, bth) in wf.DATA_OPCODES


class Port:
    """Egress port: the transmitter of one direction of a link, with its queues.

    Parameters
    ----------
    src, dst : str
        Node names; frames go from ``src`` to ``dst``.
    link : _Link
        The full-duplex link it belongs to.
    rate_gbps : float
        Line rate in Gb/s.
    latency_ns : float
        Propagation latency in ns.
    queue_bytes : int or None
        Data FIFO capacity in frame bytes; ``None`` = unbounded, no ECN, no trimming.
    ecn_threshold_bytes : int or None
        ECN CE-marking threshold on the waiting bytes; ``None`` = never mark.
    trim : bool
        Trim on overflow instead of dropping.
    trim_dscp : int
        DSCP written into trimmed frames.
    trim_queue_bytes : int
        Capacity of the priority FIFO for trimmed frames.
    """

    def __init__(self, src, dst, link, rate_gbps, latency_ns, queue_bytes=None,
                 ecn_threshold_bytes=None, trim=False, trim_dscp=46, trim_queue_bytes=0):
        if rate_gbps <= 0 or latency_ns < 0:
            raise ValueError("a link needs a positive rate and a non-negative latency")
        self.src, self.dst, self.link = src, dst, link
        self.name = f"{src}->{dst}"
        self.rate_gbps = float(rate_gbps)
        self.latency_ns = float(latency_ns)
        self.queue_bytes = queue_bytes
        self.ecn_threshold_bytes = ecn_threshold_bytes
        self.trim = trim
        self.trim_dscp = trim_dscp
        self.trim_queue_bytes = trim_queue_bytes
        self.data: deque[bytes] = deque()
        self.data_depth = 0
        self.prio: deque[bytes] = deque()
        self.prio_depth = 0
        self.busy = False
        self.tap = False
        self.on_drop = None     #: ``f(port, frame, reason)`` for each frame lost here (tapped ports)
        self.stats = PortStats()

    def serialisation_ns(self, frame_len: int) -> float:
        """Time the frame holds the transmitter: ``wire_bytes(frame_len) * 8 / rate_gbps`` ns."""
        return wire_bytes(frame_len) * 8 / self.rate_gbps

    @property
    def depth(self) -> int:
        """Frame bytes waiting (both FIFOs, the frame on the wire excluded)."""
        return self.data_depth + self.prio_depth

    def enqueue(self, frame: bytes) -> bool:
        """Queue ``frame`` (ECN-marking or trimming it as configured); False when dropped."""
        if not self.link.up:
            self.stats.drops["link_down"] += 1
            if self.on_drop is not None:
                self.on_drop(self, frame, "link down")
            return False
        n = len(frame)
        if self.queue_bytes is None or self.data_depth + n <= self.queue_bytes:
            if (self.ecn_threshold_bytes is not None and self.data_depth > self.ecn_threshold_bytes
                    and len(frame) > _ECN and _TCLASS.read(frame) & 3 in
                    (wire.ECN_ECT0, wire.ECN_ECT1)):
                b = bytearray(frame)
                b[_ECN] |= _ECN_CE_BITS
                frame = bytes(b)
                self.stats.ecn_marked += 1
            self.data.append(frame)
            self.data_depth += n
            return True
        if self.trim:
            try:
                cut = wire.trim_frame(frame, self.trim_dscp)
            except Exception:       # not a RoCEv2 frame: nothing to trim to
                cut = None
            if cut is not None and self.prio_depth + len(cut) <= self.trim_queue_bytes:
                self.prio.append(cut)
                self.prio_depth += len(cut)
                self.stats.trimmed += 1
                return True
        self.stats.drops["overflow"] += 1
        if self.on_drop is not None:
            self.on_drop(self, frame, "queue overflow" + (", no room to trim" if self.trim else ""))
        return False

    def dequeue(self) -> bytes | None:
        """Next frame to send: the priority FIFO first, then the data FIFO."""
        if self.prio:
            frame = self.prio.popleft()
            self.prio_depth -= len(frame)
            return frame
        if self.data:
            frame = self.data.popleft()
            self.data_depth -= len(frame)
            return frame
        return None

    def flush(self, reason: str = "link_down") -> int:
        """Lose every queued frame (counted as ``reason``); returns how many."""
        lost = len(self.data) + len(self.prio)
        self.stats.drops[reason] += lost
        if self.on_drop is not None:
            for frame in (*self.prio, *self.data):
                self.on_drop(self, frame, f"queued when the link went down ({reason})")
        self.data.clear()
        self.prio.clear()
        self.data_depth = self.prio_depth = 0
        return lost

    def __repr__(self):
        return f"Port({self.name}, {self.rate_gbps} Gb/s, {self.latency_ns} ns)"


class UsidSwitch:
    """SRv6 uSID switch: RFC 9800 NEXT-CSID shift-and-forward with a static table.

    Parameters
    ----------
    name : str
        Node name (for counters).
    usid : int
        The switch's own 16-bit uSID.
    block : int
        32-bit locator block.
    table : dict[int, object]
        Static forwarding table: next active uSID -> egress port (any object).

    Attributes
    ----------
    drops : collections.Counter
        Frames dropped by reason: ``malformed`` (too short, not IPv6 version 6,
        bad SRH), ``not_ipv6`` (EtherType), ``no_match`` (DA outside the block or
        active uSID not this switch's), ``hop_limit`` (hop limit would reach 0),
        ``end_of_path`` (uSID list and SRH exhausted at a switch), ``no_route``
        (no table entry for the next uSID), ``switch_down`` (counted by the fabric).
    forwarded : int
        Frames forwarded.
    """

    def __init__(self, name: str, usid: int, block: int, table: dict):
        if not 0 < usid < 1 << 16:
            raise ValueError(f"uSID {usid:#x} is not a non-zero 16-bit value")
        if not 0 <= block < 1 << 32:
            raise ValueError(f"locator block {block:#x} does not fit 32 bits")
        self.name, self.usid, self.block = name, usid, block
        self.table = dict(table)
        self.down: set = set()
        self.drops: Counter = Counter()
        self.forwarded = 0
        #: ``f(switch, frame, da) -> egress or None``: the IPv6 FIB used when the active uSID is
        #: not this switch's (Linux seg6 NEXT-C-SID, :meth:`Fabric` ``routing="ecmp"``);
        #: ``None`` (the default) drops such frames as ``no_match``
        self.fib = None

    @property
    def up(self) -> bool:
        return not self.down

    def forward(self, frame: bytes):
        """Process one frame: ``(egress, new_frame)`` or ``(None, reason)`` (counted).

        1. Ethernet II, EtherType 0x86DD, IPv6 version 6, else dropped.
        2. The DA's top 32 bits must be the block and its active uSID (bits 95:80)
           this switch's uSID (``no_match``).
        3. Hop limit decremented; a frame whose hop limit would become 0 is dropped.
        4. The DA is shifted left by 16 bits (:func:`mrcnic.wire.usid_shift`); if
           the next uSID is 0 (carrier exhausted) and an SRH (routing type 4) has
           Segments Left > 0, Segments Left is decremented and Segment List[SL]
           becomes the DA (RFC 8754 4.3.1.1, RFC 9800 4.1.2).
        5. The new active uSID selects the egress port in the static table.
        """
        if len(frame) < _SRH:
            return self._drop("malformed")
        if wf.ETHERNET["type"].read(frame) != ETHERTYPE_IPV6:
            return self._drop("not_ipv6")
        if wf.IPV6["version"].read(frame, _IP) != wf.IPV6["version"].value:
            return self._drop("malformed")
        da = int.from_bytes(frame[_DA:_DA + _ADDR], "big")
        if da >> 96 != self.block or (da >> 80) & 0xFFFF != self.usid:
            if self.fib is not None:
                return self._route(frame, da)
            return self._drop("no_match")
        hlim = frame[_HLIM]
        if hlim <= 1:
            return self._drop("hop_limit")
        out = bytearray(frame)
        out[_HLIM] = hlim - 1
        new_da, next_usid = _shift_carrier(da)
        if not next_usid:
            if frame[_NH] != _ROUTING:
                return self._drop("end_of_path")
            if len(frame) < _SEGMENTS:
                return self._drop("malformed")
            ext_len, rtype, sl, last = (frame[_SRH_FIELD[n]]
                                        for n in ("len", "type", "segleft", "lastentry"))
            if rtype != _SRH_TYPE or 2 * (last + 1) > ext_len or sl > last + 1 \
                    or len(frame) < _SEGMENTS + 8 * ext_len:
                return self._drop("malformed")
            if sl == 0:
                return self._drop("end_of_path")
            sl -= 1
            off = _SEGMENTS + wf.SRH_SEGMENT_BYTES * sl
            new_da = frame[off:off + _ADDR]
            block, next_usid = _carrier_head(new_da)
            if block != self.block or not next_usid:
                return self._drop("no_route")
            out[_SRH_FIELD["segleft"]] = sl
        out[_DA:_DA + _ADDR] = new_da
        egress = self.table.get(next_usid)
        if egress is None:
            return self._drop("no_route")
        self.forwarded += 1
        return egress, bytes(out)

    def _route(self, frame: bytes, da: int):
        """Plain IPv6 forwarding by :attr:`fib` (DA unchanged, hop limit decremented), as a
        Linux SRv6 node forwards a packet whose DA is not one of its local SIDs."""
        hlim = frame[_HLIM]
        if hlim <= 1:
            return self._drop("hop_limit")
        egress = self.fib(self, frame, da)
        if egress is None:
            return self._drop("no_route")
        out = bytearray(frame)
        out[_HLIM] = hlim - 1
        self.routed += 1
        self.forwarded += 1
        return egress, bytes(out)

    routed = 0      #: frames forwarded by the FIB (ECMP / longest-prefix match), not by uSID

    def _drop(self, reason: str):
        self.drops[reason] += 1
        return None, reason

    def __repr__(self):
        return f"UsidSwitch({self.name}, usid={self.usid:#06x}, {len(self.table)} routes)"


# event kinds (ints sort fine; the heap orders by (time, seq) first anyway)
_TX_DONE, _ARRIVE, _ENQUEUE, _CONTROL = range(4)


class Fabric:
    """The multi-plane Clos fabric as a discrete-event simulator.

    Parameters
    ----------
    topology : ClosTopology
        The topology (a default 4-plane one when ``None``).
    rate_gbps : float
        Fabric (leaf <-> spine) link rate, Gb/s.
    latency_ns : float
        Fabric link propagation latency, ns.
    host_rate_gbps : float or None
        Host (NIC <-> leaf) link rate, Gb/s; ``None`` = ``rate_gbps``.
    host_latency_ns : float
        Host link propagation latency, ns.
    switch_latency_ns : float
        Store-and-forward delay of a switch, from last bit in to enqueue, ns.
    queue_bytes : int
        Data FIFO capacity of every switch egress port, frame bytes.
    ecn_threshold_bytes : int or None
        ECN CE-marking threshold of every switch egress port (``None``: off).
    trim : bool
        Trim frames that overflow a switch queue (MRC packet trimming).
    trim_dscp : int
        DSCP of trimmed frames.
    trim_queue_bytes : int
        Priority FIFO capacity for trimmed frames, per switch egress port.
    pcap : str or None
        Frames recorded for :meth:`write_pcap`: ``"hosts"`` (host links, both
        directions), ``"all"`` (every link) or ``None``.
    pcap_max_frames : int
        Taps stop recording after this many frames (``pcap_dropped`` counts the rest).
    routing : str
        ``"usid"`` (default): static uSID tables only, a frame whose active uSID is not the
        switch's own is dropped (``no_match``).  ``"ecmp"``: every switch also holds an IPv6
        FIB with equal-cost multipath and forwards such frames by it (:meth:`ecmp_group`):
        STEV/UDP frames (DA = the peer's ordinary address) are hashed over the equal-cost
        uplinks, SRV6 frames still follow their uSIDs.
    ecmp_detect_ns : float
        With ``routing="ecmp"``: how long after a link goes down (or comes back) the FIBs
        stop (or start again) using it, ns -- link-down detection, BFD and the routing
        protocol's convergence together.  Until then frames hashed onto it are lost.
    ecmp_seed : int
        Salt of the ECMP hash (each switch also salts it with its own name, so the hash does
        not polarise from tier to tier).

    Attributes
    ----------
    now : float
        Simulation time reached, ns.
    ports : dict[str, Port]
        Every egress port by name ``"src->dst"``.
    switches : dict[str, UsidSwitch]
        Every switch by node name.
    delivered : list[tuple[float, int, int, int]]
        ``(time_ns, host, plane, frame bytes)`` of every delivery.
    events_log : list[dict]
        Failures and recoveries as they took effect: ``{time_ns, action, target}``.

    Raises
    ------
    ValueError
        Bad parameters; :meth:`send` with an unknown host/plane or a time in the
        past; a failure scheduled in the past or naming an unknown node or link.
    """

    def __init__(self, topology: ClosTopology | None = None, *, rate_gbps: float = 100.0,
                 latency_ns: float = 500.0, host_rate_gbps: float | None = None,
                 host_latency_ns: float = 100.0, switch_latency_ns: float = 0.0,
                 queue_bytes: int = 128 * 1024, ecn_threshold_bytes: int | None = 32 * 1024,
                 trim: bool = True, trim_dscp: int = 46, trim_queue_bytes: int = 8 * 1024,
                 pcap: str | None = "hosts", pcap_max_frames: int = 1_000_000,
                 routing: str = "usid", ecmp_detect_ns: float = 50_000.0, ecmp_seed: int = 0):
        if switch_latency_ns < 0:
            raise ValueError("switch_latency_ns must be >= 0")
        if queue_bytes < 0 or trim_queue_bytes < 0:
            raise ValueError("queue sizes must be >= 0")
        if not 0 <= trim_dscp < 64:
            raise ValueError(f"trim_dscp must be 0..63, got {trim_dscp}")
        if pcap not in ("hosts", "all", None):
            raise ValueError(f"pcap must be 'hosts', 'all' or None, got {pcap!r}")
        if routing not in ("usid", "ecmp"):
            raise ValueError(f"routing must be 'usid' or 'ecmp', got {routing!r}")
        if ecmp_detect_ns < 0:
            raise ValueError("ecmp_detect_ns must be >= 0")
        self.topology = topo = topology or ClosTopology()
        self.switch_latency_ns = float(switch_latency_ns)
        self.now = 0.0
        self.ports: dict[str, Port] = {}
        self.switches: dict[str, UsidSwitch] = {}
        self.links: dict[frozenset, _Link] = {}
        self._uplink: dict[tuple[int, int], Port] = {}
        self._host_of_node = {topo.host_name(h): h for h in range(topo.hosts)}
        host_rate = rate_gbps if host_rate_gbps is None else host_rate_gbps
        swq = dict(queue_bytes=queue_bytes, ecn_threshold_bytes=ecn_threshold_bytes, trim=trim,
                   trim_dscp=trim_dscp, trim_queue_bytes=trim_queue_bytes)
        tables: dict[str, dict] = {n: {} for n, d in topo.nodes.items() if d["kind"] != "host"}
        for a, b, plane in topo.links:
            link = _Link(a, b, plane)
            self.links[frozenset((a, b))] = link
            is_host = a in self._host_of_node
            rate, lat = (host_rate, host_latency_ns) if is_host else (rate_gbps, latency_ns)
            fwd = Port(a, b, link, rate, lat, **({} if is_host else swq))
            rev = Port(b, a, link, rate, lat, **swq)
            link.ports = [fwd, rev]
            for port in (fwd, rev):
                self.ports[port.name] = port
                port.tap = pcap == "all" or (pcap == "hosts" and is_host)
                if port.tap:
                    port.on_drop = self._tap_drop
            if is_host:
                self._uplink[self._host_of_node[a], plane] = fwd
            else:
                tables[a][topo.nodes[b]["usid"]] = fwd
            tables[b][topo.nodes[a]["usid"]] = rev
        for name, table in tables.items():
            self.switches[name] = UsidSwitch(name, topo.nodes[name]["usid"], topo.block, table)
        self._heap: list = []
        self._seq = 0
        self._last = (-math.inf, 0)     # (time, seq) of the last event run
        # (earliest host arrival the event can lead to, time, seq) per pending event
        self._due_heap: list = []
        self._to_host_ns = self._distances_to_hosts()
        self._pending: list[Delivery] = []
        self.delivered: list[tuple[float, int, int, int]] = []
        self.events_log: list[dict] = []
        self.taps: list[tuple[float, str, bytes]] = []
        self.tap_notes: dict[int, list[str]] = {}   # tap index -> comments (trims, drops)
        self._tap_of: dict[tuple[str, int], int] = {}   # (port, id(frame)) in flight -> tap
        self.trim_dscp = trim_dscp if trim else None
        self.pcap_max_frames = pcap_max_frames
        self.pcap_dropped = 0
        self.lost_in_flight = 0
        self.frames_sent = 0    #: frames handed to :meth:`send` (NICs and background traffic)
        #: Optional per-frame fault hook (:class:`mrcnic.sim.faults.FaultInjector`); None = off
        self.faults = None
        self.routing = routing
        self.ecmp_detect_ns = float(ecmp_detect_ns)
        self.ecmp_seed = int(ecmp_seed)
        self._routed_down: set = set()      # links the FIBs have withdrawn (frozenset of ends)
        self._groups: dict = {}             # (switch, destination uSID) -> [egress Port]
        if routing == "ecmp":
            for sw in self.switches.values():
                sw.fib = self._fib_lookup

    # ---- event machinery ---------------------------------------------------
    def _distances_to_hosts(self) -> dict:
        """Per node, the least propagation delay (ns) from it to any host: the sum of the
        ``latency_ns`` of the links on the way (Dijkstra from the hosts, links up or not)."""
        dist = {node: 0.0 for node in self._host_of_node}
        todo = [(0.0, node) for node in dist]
        into: dict = {}
        for port in self.ports.values():
            into.setdefault(port.dst, []).append(port)
        while todo:
            d, node = heapq.heappop(todo)
            if d > dist.get(node, math.inf):
                continue
            for port in into.get(node, ()):
                nd = d + port.latency_ns
                if nd < dist.get(port.src, math.inf):
                    dist[port.src] = nd
                    heapq.heappush(todo, (nd, port.src))
        return dist

    def _schedule(self, time, kind, a=None, b=None, c=None):
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq, kind, a, b, c))
        # the earliest a frame can reach a host because of this event: an arrival at a host
        # port and a control event (a fault hook's held frame, a failure) at their time; a
        # port's next frame (TX_DONE, ENQUEUE) and a frame at a switch one link or more later
        if kind == _ARRIVE:
            due = time + self._to_host_ns.get(a.dst, math.inf)
        elif kind == _CONTROL:
            due = time
        else:
            due = time + a.latency_ns + self._to_host_ns.get(a.dst, math.inf)
        heapq.heappush(self._due_heap, (due, time, self._seq))

    def next_event_ns(self) -> float | None:
        """Time of the earliest pending event (ns), or ``None`` when the fabric is idle."""
        return self._heap[0][0] if self._heap else None

    def next_delivery_bound_ns(self) -> float | None:
        """A time (ns) before which no frame reaches a host and no control event (failure,
        fault hook) runs, whatever the events pending now do, until the next :meth:`send`
        (a frame sent can arrive sooner: ask again after sending).  The co-simulation,
        which asks after every edge it sends at, may leave the fabric alone until then and
        still hand every frame to its NIC at the edge it arrives.  ``None`` when the
        fabric is idle.  Conservative: every hop's propagation delay counts, queueing and
        serialisation do not.  (Bounds of events already run are pruned by :meth:`_run`.)"""
        return self._due_heap[0][0] if self._due_heap else None

    def _prune_due(self):
        """Drop the bounds of events already run from the top of :attr:`_due_heap` (an
        event's bound is at most its time plus the longest distance to a host, so the
        heap holds at most the events of that last stretch of time and those pending)."""
        due = self._due_heap
        while due and (due[0][1], due[0][2]) <= self._last:
            heapq.heappop(due)

    def has_pending_deliveries(self) -> bool:
        """Frames reached hosts in events already run (in :meth:`send`) that
        :meth:`advance` has not returned yet."""
        return bool(self._pending)

    def _run(self, until: float):
        heap = self._heap
        while heap and heap[0][0] <= until:
            time, seq, kind, a, b, c = heapq.heappop(heap)
            self.now = time
            self._last = (time, seq)
            if kind == _TX_DONE:
                a.busy = False
                self._start(a)
            elif kind == _ARRIVE:
                self._arrive(a, b, c)
            elif kind == _ENQUEUE:
                if a.enqueue(b):
                    self._start(a)
            else:
                a()
        if until != math.inf and until > self.now:
            self.now = float(until)
        self._prune_due()

    def _start(self, port: Port):
        if port.busy:
            return
        frame = port.dequeue()
        if frame is None:
            return
        t = self.now
        ser = port.serialisation_ns(len(frame))
        port.busy = True
        port.stats.frames += 1
        port.stats.bytes += len(frame)
        if port.tap:
            if len(self.taps) < self.pcap_max_frames:
                self._tap_of[port.name, id(frame)] = len(self.taps)
                if self.trim_dscp is not None and _is_trimmed(frame, self.trim_dscp):
                    self.tap_notes[len(self.taps)] = [
                        f"trimmed (DSCP {self.trim_dscp}): a switch cut the payload off, "
                        "no valid ICRC"]
                self.taps.append((t, port.name, frame))
            else:
                self.pcap_dropped += 1
        self._schedule(t + ser, _TX_DONE, port)
        self._schedule(t + ser + port.latency_ns, _ARRIVE, port, frame, port.link.epoch)

    def _arrive(self, port: Port, frame: bytes, epoch: int):
        if self.faults is not None:         # seeded faults: lose, corrupt, dup, delay, trim
            self.faults.on_arrive(port, frame, epoch, self._arrive_now)
        else:
            self._arrive_now(port, frame, epoch)

    def _arrive_now(self, port: Port, frame: bytes, epoch: int):
        link = port.link
        tap = self._tap_of.pop((port.name, id(frame)), None) if port.tap else None
        if not link.up or link.epoch != epoch:
            port.stats.drops["link_down"] += 1
            self.lost_in_flight += 1
            self._note(tap, f"lost in flight: link {port.name} went down")
            return
        host = self._host_of_node.get(port.dst)
        if host is not None:
            self._pending.append(Delivery(host, link.plane, frame, self.now))
            self.delivered.append((self.now, host, link.plane, len(frame)))
            return
        switch = self.switches[port.dst]
        if not switch.up:
            switch.drops["switch_down"] += 1
            self._note(tap, f"lost: switch {switch.name} is down")
            return
        egress, result = switch.forward(frame)
        if egress is None:
            self._note(tap, f"dropped by switch {switch.name} ({result})")
            return
        if self.switch_latency_ns:
            self._schedule(self.now + self.switch_latency_ns, _ENQUEUE, egress, result)
        elif egress.enqueue(result):
            self._start(egress)

    def _note(self, tap: int | None, text: str):
        if tap is not None:
            self.tap_notes.setdefault(tap, []).append(text)

    def _tap_drop(self, port: Port, frame: bytes, reason: str):
        """A frame lost at a tapped port before it was sent: one record with a comment."""
        if len(self.taps) < self.pcap_max_frames:
            self.tap_notes[len(self.taps)] = [f"dropped at {port.name} before sending: {reason}"]
            self.taps.append((self.now, port.name, frame))
        else:
            self.pcap_dropped += 1

    # ---- the co-simulation API ---------------------------------------------
    def send(self, host: int, plane: int, frame_bytes: bytes, now_ns: float) -> None:
        """NIC ``host``'s port ``plane`` emits ``frame_bytes`` (no FCS), first bit at ``now_ns``.

        Events up to ``now_ns`` are processed first (their deliveries are kept
        for the next :meth:`advance`).  Raises ``ValueError`` for an unknown
        host/plane or ``now_ns`` earlier than :attr:`now`.  A frame sent into a
        failed host link is lost (counted on the uplink port as ``link_down``).
        """
        port = self._uplink.get((host, plane))
        if port is None:
            raise ValueError(f"no port for host {host} plane {plane}")
        if now_ns < self.now:
            raise ValueError(f"send at {now_ns} ns is before the fabric time {self.now} ns")
        self._run(now_ns)
        self.frames_sent += 1
        if port.enqueue(bytes(frame_bytes)):
            self._start(port)

    def advance(self, now_ns: float) -> list[Delivery]:
        """Run the fabric up to ``now_ns`` (inclusive) and return the frames whose last
        bit reached a host port since the previous call, in time order."""
        if now_ns < self.now:
            raise ValueError(f"advance to {now_ns} ns is before the fabric time {self.now} ns")
        self._run(now_ns)
        out, self._pending = self._pending, []
        return out

    def drain(self) -> list[Delivery]:
        """Run until no event is left (failures scheduled later included)."""
        self._run(math.inf)
        out, self._pending = self._pending, []
        return out

    # ---- failures ----------------------------------------------------------
    def _at(self, time_ns, fn, action, target):
        if time_ns < self.now:
            raise ValueError(f"{action} at {time_ns} ns is before the fabric time {self.now} ns")

        def run():
            fn()
            self.events_log.append({"time_ns": self.now, "action": action, "target": target})
        self._schedule(float(time_ns), _CONTROL, run)

    def _link(self, a: str, b: str) -> _Link:
        link = self.links.get(frozenset((a, b)))
        if link is None:
            raise ValueError(f"no link between {a!r} and {b!r}")
        return link

    def _switch(self, name: str) -> UsidSwitch:
        if name not in self.switches:
            raise ValueError(f"no switch {name!r}")
        return self.switches[name]

    def _link_cause(self, link: _Link, cause, down: bool):
        was_up = link.up
        if down:
            link.down.add(cause)
        else:
            link.down.discard(cause)
        if was_up and not link.up:
            link.epoch += 1
            for port in link.ports:
                port.flush("link_down")
        if self.routing == "ecmp" and was_up != link.up:
            self._schedule(self.now + self.ecmp_detect_ns, _CONTROL,
                           lambda: self._reroute(link))

    # ---- ECMP FIB (routing="ecmp") -----------------------------------------
    def _reroute(self, link: _Link):
        """The control plane catches up with ``link``'s state (``ecmp_detect_ns`` after it
        changed): the FIBs withdraw it when it is down, use it again when it is up."""
        key = frozenset((link.a, link.b))
        changed = (key in self._routed_down) == link.up
        if link.up:
            self._routed_down.discard(key)
        else:
            self._routed_down.add(key)
        if changed:
            self._groups.clear()
            self.events_log.append({"time_ns": self.now,
                                    "action": "ecmp_withdraw" if not link.up else "ecmp_restore",
                                    "target": f"{link.a}<->{link.b}"})

    def _usable(self, a: str, b: str) -> bool:
        return frozenset((a, b)) not in self._routed_down

    def ecmp_group(self, switch: str, usid: int) -> list:
        """The FIB entry of ``switch`` for the /48 prefix ``block:usid``: its egress ports.

        Every prefix of this fabric is a /48 (locator block + one 16-bit uSID: a host, a
        leaf or a spine), so longest-prefix match is an exact match on DA[127:80].  A leaf
        reaches its own hosts directly and any other host or leaf of its plane over every
        spine whose links on the way are not withdrawn (the equal-cost group), a spine of its
        plane directly; a spine reaches every leaf of its plane, and every host, through that
        host's leaf.  Other planes' prefixes: no route (``[]``).
        """
        key = (switch, usid)
        if key in self._groups:
            return self._groups[key]
        topo = self.topology
        me = topo.nodes[switch]
        name = topo.node_of_usid(usid)
        out = []
        if name is not None:
            node = topo.nodes[name]
            p = me["plane"]
            if node["kind"] == "host":
                dst_leaf = topo.leaf_name(p, topo.leaf_of(node["index"]))
                target = name
            elif node["plane"] == p:
                dst_leaf = name if node["kind"] == "leaf" else None
                target = name
            else:
                dst_leaf = target = None
            if target is not None:
                if me["kind"] == "leaf":
                    if dst_leaf == switch or node["kind"] == "spine":
                        out = [self.port(switch, target)] if self._usable(switch, target) else []
                    else:
                        out = [self.port(switch, topo.spine_name(p, s)) for s in range(topo.spines)
                               if self._usable(switch, topo.spine_name(p, s))
                               and self._usable(topo.spine_name(p, s), dst_leaf)]
                elif dst_leaf is not None:      # a spine: down to the leaf
                    out = [self.port(switch, dst_leaf)] if self._usable(switch, dst_leaf) else []
        self._groups[key] = out
        return out

    def _fib_lookup(self, switch: UsidSwitch, frame: bytes, da: int):
        """Egress of a frame the switch routes by its FIB: the ECMP group of the DA's /48,
        one member picked by a hash of source and destination address, flow label, next
        header and UDP source port (the fields a RoCEv2 ECMP hash uses)."""
        if da >> 96 != switch.block:
            return None
        group = self.ecmp_group(switch.name, (da >> 80) & 0xFFFF)
        if not group:
            return None
        if len(group) == 1:
            return group[0]
        return group[_ecmp_hash(frame, switch.name, self.ecmp_seed) % len(group)]

    def _switch_cause(self, switch: UsidSwitch, cause, down: bool):
        if down:
            switch.down.add(cause)
        else:
            switch.down.discard(cause)
        for link in self.links.values():
            if switch.name in (link.a, link.b):
                self._link_cause(link, (cause, switch.name), down)

    def fail_link(self, time_ns: float, a: str, b: str) -> None:
        """At ``time_ns``, fail the link between nodes ``a`` and ``b`` (both directions)."""
        link = self._link(a, b)
        self._at(time_ns, lambda: self._link_cause(link, "link", True), "fail_link", f"{a}<->{b}")

    def recover_link(self, time_ns: float, a: str, b: str) -> None:
        """At ``time_ns``, undo :meth:`fail_link` (the link stays down if a switch or plane failure covers it)."""
        link = self._link(a, b)
        self._at(time_ns, lambda: self._link_cause(link, "link", False), "recover_link",
                 f"{a}<->{b}")

    def fail_switch(self, time_ns: float, name: str) -> None:
        """At ``time_ns``, fail switch ``name``: every link to it goes down, arrivals are lost."""
        sw = self._switch(name)
        self._at(time_ns, lambda: self._switch_cause(sw, "switch", True), "fail_switch", name)

    def recover_switch(self, time_ns: float, name: str) -> None:
        """At ``time_ns``, undo :meth:`fail_switch`."""
        sw = self._switch(name)
        self._at(time_ns, lambda: self._switch_cause(sw, "switch", False), "recover_switch", name)

    def _plane_switches(self, plane):
        if not 0 <= plane < self.topology.planes:
            raise ValueError(f"plane {plane} out of range")
        return [sw for n, sw in self.switches.items()
                if self.topology.nodes[n]["plane"] == plane]

    def fail_plane(self, time_ns: float, plane: int) -> None:
        """At ``time_ns``, fail every switch (hence every link) of ``plane``."""
        sws = self._plane_switches(plane)
        self._at(time_ns, lambda: [self._switch_cause(sw, "plane", True) for sw in sws],
                 "fail_plane", f"plane{plane}")

    def recover_plane(self, time_ns: float, plane: int) -> None:
        """At ``time_ns``, undo :meth:`fail_plane`."""
        sws = self._plane_switches(plane)
        self._at(time_ns, lambda: [self._switch_cause(sw, "plane", False) for sw in sws],
                 "recover_plane", f"plane{plane}")

    # ---- counters and traces -----------------------------------------------
    def port(self, src: str, dst: str) -> Port:
        """The egress port from node ``src`` to node ``dst``."""
        return self.ports[f"{src}->{dst}"]

    def uplink(self, host: int, plane: int) -> Port:
        """The NIC-to-leaf port of ``host`` on ``plane``."""
        return self._uplink[host, plane]

    def per_plane_bytes(self) -> list[int]:
        """Frame bytes delivered to hosts, per plane."""
        out = [0] * self.topology.planes
        for _, _, plane, n in self.delivered:
            out[plane] += n
        return out

    def throughput(self, bin_ns: float, end_ns: float | None = None) -> dict:
        """Delivered bytes per plane in bins of ``bin_ns``: ``{"t_ns": [...], "planes":
        [[bytes per bin] per plane]}`` (``t_ns`` = bin starts), for a throughput plot."""
        if bin_ns <= 0:
            raise ValueError("bin_ns must be positive")
        end = self.now if end_ns is None else end_ns
        if self.delivered:
            end = max(end, self.delivered[-1][0])
        nbins = int(end // bin_ns) + 1
        planes = [[0] * nbins for _ in range(self.topology.planes)]
        for t, _, plane, n in self.delivered:
            planes[plane][int(t // bin_ns)] += n
        return {"t_ns": [i * bin_ns for i in range(nbins)], "planes": planes}

    def counters(self) -> dict:
        """All counters as plain data: ports (those that saw traffic or drops),
        switch drops, totals and the failure log."""
        ports = {n: p.stats.as_dict() for n, p in self.ports.items()
                 if p.stats.frames or p.stats.drops}
        switch_drops = {n: dict(s.drops) for n, s in self.switches.items() if s.drops}
        drops = Counter()
        for p in self.ports.values():
            drops.update(p.stats.drops)
        for s in self.switches.values():
            drops.update(s.drops)
        return {
            "ports": ports, "switch_drops": switch_drops, "drops": dict(drops),
            "ecn_marked": sum(p.stats.ecn_marked for p in self.ports.values()),
            "trimmed": sum(p.stats.trimmed for p in self.ports.values()),
            "delivered_frames": len(self.delivered),
            "per_plane_bytes": self.per_plane_bytes(),
            "failures": list(self.events_log),
        }

    def conservation(self) -> dict:
        """Frame accounting: every frame sent into the fabric was delivered to a host,
        dropped under a named reason, or is still in the fabric.

        Returns ``{"sent", "duplicated", "delivered", "dropped", "in_fabric", "balance"}``
        (frames; ``balance`` = sent + duplicated - delivered - dropped - in_fabric, 0 when
        every frame is accounted for).  ``in_fabric`` counts frames queued at ports, on the
        wire or between hops, and frames a fault hook holds back.
        """
        dropped = sum(sum(p.stats.drops.values()) for p in self.ports.values())
        dropped += sum(sum(s.drops.values()) for s in self.switches.values())
        queued = sum(len(p.data) + len(p.prio) for p in self.ports.values())
        moving = sum(1 for e in self._heap if e[2] in (_ARRIVE, _ENQUEUE))
        held = dup = 0
        if self.faults is not None:
            held = self.faults.pending
            dup = self.faults.injected.get("dup", 0)
        in_fabric = queued + moving + held
        delivered = len(self.delivered)
        return dict(sent=self.frames_sent, duplicated=dup, delivered=delivered, dropped=dropped,
                    in_fabric=in_fabric,
                    balance=self.frames_sent + dup - delivered - dropped - in_fabric)

    def write_pcap(self, path, port: str | None = None) -> int:
        """Write the tapped frames (optionally of one port ``"src->dst"``) as pcapng.

        One interface per tapped port, named as the port (``"p2.leaf0->p2.spine6"``: the
        link and its direction), so each frame appears once per tap it crossed; nanosecond
        timestamps (simulation time from 0); Ethernet link type, frames without FCS, in
        time order; packet comments for trimmed frames and for frames dropped or lost
        (:mod:`mrcnic.sim.pcapng`).  Returns the number of frames written.
        """
        from .pcapng import PcapNgWriter

        records = sorted((i for i, t in enumerate(self.taps) if port is None or t[1] == port),
                         key=lambda i: self.taps[i][0])
        with PcapNgWriter(path) as writer:
            for name in sorted({self.taps[i][1] for i in records}):
                p = self.ports[name]
                writer.interface(name, f"plane {p.link.plane}: {p.src} to {p.dst}, "
                                       f"{p.rate_gbps:g} Gb/s, {p.latency_ns:g} ns")
            for i in records:
                t, name, frame = self.taps[i]
                writer.write(name, int(round(t)), frame, self.tap_notes.get(i, ()))
        return len(records)
