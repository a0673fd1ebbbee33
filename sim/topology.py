"""Multi-plane 2-tier Clos topology with deterministic SRv6 uSIDs (the MRC fabric).

Every plane is its own leaf/spine Clos: ``leaves`` leaf switches, each linked to
all ``spines`` spine switches of the same plane.  Every host (one mrcnic NIC)
has one port per plane, port *p* linked to its leaf in plane *p*; host *h*
hangs off leaf ``h // hosts_per_leaf`` in every plane.  Planes share nothing.

uSID assignment (16-bit, never zero, unique across the whole fabric, so a
frame sent on the wrong plane is dropped instead of silently delivered)::

    host  h            0x0100 + h                 h < 0x0F00    (0x0100..0x0FFF)
    leaf  l, plane p   0x1000 | p << 8 | l        p < 16, l < 256 (0x1000..0x1FFF)
    spine s, plane p   0x2000 | p << 8 | s        p < 16, s < 256 (0x2000..0x2FFF)

A host keeps the same uSID on every plane: the destination address a NIC
receives is ``block | host uSID | zeros`` whatever plane it came on
(:func:`mrcnic.wire.usid_arrival`).

Paths (:meth:`ClosTopology.paths`) always go up to a spine and down again:
``[leaf_src, spine, leaf_dst, dst_host]``, also between two hosts of the same
leaf (the frame hairpins through the spine), so every host pair has exactly
``planes * spines`` distinct paths and EVs spread the same way for every pair.
``direct=True`` adds, for same-leaf pairs, the one-switch path ``[leaf, dst]``
per plane (``spine=None``).

EV numbering (:meth:`ClosTopology.ev_profile`): ``EV = copy << (PB + SB) |
plane << SB | spine`` with ``SB = max(5, bits(spines - 1))`` and ``PB = max(3,
bits(planes - 1))`` (so for up to 8 planes x 32 spines ``EV = copy << 8 | plane
<< 5 | spine``).  The list walks planes fastest, then spines, then copies, so
consecutive profile entries land on different planes; every EV is distinct
and every path gets ``evs / (planes * spines)`` EVs (the first paths one more
when it does not divide).
"""

from __future__ import annotations

from typing import NamedTuple

from mrcnic import wire

__all__ = ["ClosTopology", "Path", "EvEntry", "HOST_USID_BASE", "LEAF_USID_BASE",
           "SPINE_USID_BASE"]

HOST_USID_BASE = 0x0100   #: host h has uSID HOST_USID_BASE + h
LEAF_USID_BASE = 0x1000   #: leaf l of plane p has uSID LEAF_USID_BASE | p << 8 | l
SPINE_USID_BASE = 0x2000  #: spine s of plane p has uSID SPINE_USID_BASE | p << 8 | s


class Path(NamedTuple):
    """One path between two hosts: ``plane`` (= NIC port), ``spine`` index (``None`` for
    a same-leaf direct path) and the path's ``usids`` in travel order (last = destination host)."""

    plane: int
    spine: int | None
    usids: list[int]


class EvEntry(NamedTuple):
    """One EV-profile entry as the NIC path table holds it: 32-bit ``ev``, ``port`` (plane)
    and the path's ``usids`` (for :class:`mrcnic.wire.PathEncap`)."""

    ev: int
    port: int
    usids: list[int]


class ClosTopology:
    """Multi-plane 2-tier Clos: planes x (leaves leaf switches + spines spine switches).

    Parameters
    ----------
    planes : int
        Independent planes (= ports per NIC), 1..16.
    leaves : int
        Leaf switches per plane, 1..256.
    spines : int
        Spine switches per plane, 1..256.
    hosts_per_leaf : int
        Hosts (NICs) under each leaf; ``leaves * hosts_per_leaf`` <= 0x0F00.
    locator_block : int
        32-bit SRv6 uSID locator block (RFC 9800), ``0xFC000000`` = ``fc00:0::/32``.

    Attributes
    ----------
    hosts : int
        Number of hosts, ``leaves * hosts_per_leaf``.
    nodes : dict[str, dict]
        Every node by name (``host{h}``, ``p{p}.leaf{l}``, ``p{p}.spine{s}``):
        ``{"kind", "plane", "index", "usid"}`` (``plane`` is ``None`` for hosts).
    links : list[tuple[str, str, int]]
        Every full-duplex link as ``(a, b, plane)``; host links name the host first,
        fabric links name the leaf first.

    Raises
    ------
    ValueError
        A size out of range or a block that does not fit 32 bits.
    """

    def __init__(self, planes: int = 4, leaves: int = 2, spines: int = 8,
                 hosts_per_leaf: int = 1, locator_block: int = 0xFC000000):
        if not 1 <= planes <= 16:
            raise ValueError(f"planes must be 1..16, got {planes}")
        if not 1 <= leaves <= 256:
            raise ValueError(f"leaves must be 1..256, got {leaves}")
        if not 1 <= spines <= 256:
            raise ValueError(f"spines must be 1..256, got {spines}")
        if hosts_per_leaf < 1 or leaves * hosts_per_leaf > 0x0F00:
            raise ValueError(f"hosts_per_leaf must be >= 1 with at most 3840 hosts, "
                             f"got {leaves} x {hosts_per_leaf}")
        if not 0 <= locator_block < 1 << 32:
            raise ValueError(f"locator block {locator_block:#x} does not fit 32 bits")
        self.planes = planes
        self.leaves = leaves
        self.spines = spines
        self.hosts_per_leaf = hosts_per_leaf
        self.hosts = leaves * hosts_per_leaf
        self.block = locator_block
        self.nodes: dict[str, dict] = {}
        self.links: list[tuple[str, str, int]] = []
        self._by_usid: dict[int, str] = {}
        for h in range(self.hosts):
            self._add(self.host_name(h), "host", None, h, self.host_usid(h))
        for p in range(planes):
            for leaf in range(leaves):
                self._add(self.leaf_name(p, leaf), "leaf", p, leaf, self.leaf_usid(p, leaf))
            for s in range(spines):
                self._add(self.spine_name(p, s), "spine", p, s, self.spine_usid(p, s))
        for p in range(planes):
            for h in range(self.hosts):
                self.links.append((self.host_name(h), self.leaf_name(p, self.leaf_of(h)), p))
            for leaf in range(leaves):
                for s in range(spines):
                    self.links.append((self.leaf_name(p, leaf), self.spine_name(p, s), p))

    def _add(self, name, kind, plane, index, usid):
        assert usid not in self._by_usid and 0 < usid < 1 << 16
        self.nodes[name] = {"kind": kind, "plane": plane, "index": index, "usid": usid}
        self._by_usid[usid] = name

    # ---- names and uSIDs ---------------------------------------------------
    @staticmethod
    def host_name(h: int) -> str:
        return f"host{h}"

    @staticmethod
    def leaf_name(plane: int, leaf: int) -> str:
        return f"p{plane}.leaf{leaf}"

    @staticmethod
    def spine_name(plane: int, spine: int) -> str:
        return f"p{plane}.spine{spine}"

    @staticmethod
    def host_usid(h: int) -> int:
        return HOST_USID_BASE + h

    @staticmethod
    def leaf_usid(plane: int, leaf: int) -> int:
        return LEAF_USID_BASE | plane << 8 | leaf

    @staticmethod
    def spine_usid(plane: int, spine: int) -> int:
        return SPINE_USID_BASE | plane << 8 | spine

    def leaf_of(self, host: int) -> int:
        """Leaf index (same in every plane) that ``host`` hangs off."""
        self._check_host(host)
        return host // self.hosts_per_leaf

    def node_of_usid(self, usid: int) -> str | None:
        """Name of the node owning ``usid``, or ``None``."""
        return self._by_usid.get(usid)

    def host_ip(self, host: int) -> str:
        """A source address for ``host``: its uSID carrier ``block | host uSID`` (what it receives)."""
        return wire.usid_carrier(self.block, [self.host_usid(host)])

    def host_mac(self, host: int) -> str:
        """A locally administered MAC for ``host`` (``02:00:00:00:hh:hh``)."""
        return f"02:00:00:00:{host >> 8 & 0xFF:02x}:{host & 0xFF:02x}"

    def _check_host(self, host):
        if not 0 <= host < self.hosts:
            raise ValueError(f"host {host} out of range 0..{self.hosts - 1}")

    # ---- paths -------------------------------------------------------------
    def paths(self, src_host: int, dst_host: int, direct: bool = False) -> list[Path]:
        """All paths from ``src_host`` to ``dst_host``, planes outer, spines inner.

        Each is ``Path(plane, spine, [leaf_src, spine, leaf_dst, dst_host])`` (uSIDs);
        with ``direct=True`` and both hosts on one leaf, a ``Path(plane, None, [leaf,
        dst_host])`` per plane comes first in each plane.  Raises ``ValueError`` for an
        unknown host or ``src_host == dst_host``.
        """
        self._check_host(src_host)
        self._check_host(dst_host)
        if src_host == dst_host:
            raise ValueError("source and destination host are the same")
        ls, ld = self.leaf_of(src_host), self.leaf_of(dst_host)
        dst = self.host_usid(dst_host)
        out = []
        for p in range(self.planes):
            if direct and ls == ld:
                out.append(Path(p, None, [self.leaf_usid(p, ls), dst]))
            for s in range(self.spines):
                out.append(Path(p, s, [self.leaf_usid(p, ls), self.spine_usid(p, s),
                                       self.leaf_usid(p, ld), dst]))
        return out

    def ev_bits(self) -> tuple[int, int]:
        """(plane field shift, copy field shift) of the EV numbering: (SB, PB + SB)."""
        sb = max(5, (self.spines - 1).bit_length())
        pb = max(3, (self.planes - 1).bit_length())
        return sb, pb + sb

    def ev_of(self, plane: int, spine: int, copy: int = 0) -> int:
        """The EV naming (plane, spine), copy ``copy``."""
        sb, cb = self.ev_bits()
        return copy << cb | plane << sb | spine

    def ev_profile(self, src: int, dst: int, evs: int = 128) -> list[EvEntry]:
        """An explicit EV profile of ``evs`` distinct EVs from ``src`` to ``dst``.

        Entry *i* uses plane ``i % planes``, spine ``(i // planes) % spines`` and
        copy ``i // (planes * spines)``; its EV is :meth:`ev_of` of those.  Raises
        ``ValueError`` when ``evs`` is not 1..256 (the NIC path table size).
        """
        if not 1 <= evs <= 256:
            raise ValueError(f"evs must be 1..256, got {evs}")
        by_key = {(pa.plane, pa.spine): pa for pa in self.paths(src, dst)}
        out = []
        for i in range(evs):
            plane = i % self.planes
            spine = (i // self.planes) % self.spines
            copy = i // (self.planes * self.spines)
            out.append(EvEntry(self.ev_of(plane, spine, copy), plane,
                               list(by_key[plane, spine].usids)))
        return out

    def encap(self, entry: EvEntry) -> wire.PathEncap:
        """The :class:`mrcnic.wire.PathEncap` (SRV6 mode) of one EV-profile entry."""
        return wire.PathEncap(ev=entry.ev, port=entry.port, mode="SRV6", block=self.block,
                              usids=list(entry.usids))

    def __repr__(self):
        return (f"ClosTopology(planes={self.planes}, leaves={self.leaves}, spines={self.spines}, "
                f"hosts_per_leaf={self.hosts_per_leaf}, locator_block={self.block:#010x})")
