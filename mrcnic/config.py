"""The mrcnic NIC configuration file (TOML): loader, validation, hardware tables.

One file describes one NIC: its addresses, its planes (ports), the registered
memory regions, the EV format profiles and EV profiles its QPs spray over,
the QPs and their congestion-control (CC) profiles.  Names follow the OCP MRC
1.0 controller API (``mrc_ctl.h``).  The reference with a full example is
``docs/config.md``; the wire format it feeds is ``docs/wire-format.md``.

:func:`load_config` reads and checks the file and returns a :class:`NicConfig`;
any problem raises :class:`ConfigError` whose message names the file, the key
path (``ev_profiles.p0.entries[3].usids``) and the reason.  The loader also lays
the tables out (:func:`compile_tables`), so a config that would not fit the
hardware is refused at load time: nothing is ever emitted for an invalid file.

:func:`compile_tables` turns a :class:`NicConfig` into :class:`HwTables`, plain
Python ints and dicts keyed by the field names of ``rtl/layouts.py``
(``PathEntry``, ``QpContext``, ``RxQpContext``, ``MemRegion``, ``NicGlobals``),
ready for ``Layout.const(...)`` or the CSR writes of the firmware.
"""

from __future__ import annotations

import difflib
import ipaddress
import itertools
import os
import re
from dataclasses import dataclass, field

try:
    import tomllib
except ModuleNotFoundError:          # Python 3.10
    import tomli as tomllib

from . import wire
from .rtl.layouts import MAX_CARRIERS, MAX_PATHS, MAX_PORTS, MAX_QPS, EvMode, EvState

__all__ = [
    "ConfigError", "load_config", "loads_config", "compile_tables",
    "NicConfig", "NicSettings", "Port", "MemoryRegion", "EvFormatProfile", "EvField",
    "UsidTemplate", "EvEntry", "EvProfile", "Qp", "CcProfile", "HwTables", "expand_ev",
    "EV_BITS", "MAX_SEGMENTS", "PMTUS", "RELIABILITY_DEFAULTS", "rel_qp_configs",
]

#: EV bits each EV format mode carries (wire format v1, fixed bit positions):
#: SRV6/STEV flow label = EV[19:0] and UDP sport = 0xC000 | EV[31:20]; UDP sport = 0xC000 | EV[13:0].
EV_BITS = {"SRV6": 32, "STEV": 32, "UDP": 14}
#: Words (128-bit SRH segments) in the hardware segment memory (``PathEntry.seg_base`` is 8 bits).
MAX_SEGMENTS = 256
MAX_REGIONS = 4          #: memory regions the receive path holds (RxParser regions=4)
#: RoCE path MTUs (bytes of payload per packet) and their log2.
PMTUS = {256: 8, 512: 9, 1024: 10, 2048: 11, 4096: 12}
_STATES = ("GOOD", "DENIED")
_REQ = object()


class ConfigError(ValueError):
    """A configuration file is invalid.

    ``str(err)`` is ``"<file>: <key path>: <reason>"``; the parts are kept in
    the attributes ``source`` (the file name), ``key`` (e.g.
    ``ev_profiles.p0.entries[3].usids``; ``(file)`` for a problem with the file
    as a whole) and ``reason``.
    """

    def __init__(self, source: str, key: str, reason: str):
        self.source, self.key, self.reason = source, key, reason
        super().__init__(f"{source}: {key}: {reason}")


# --------------------------------------------------------------------------
# Configuration objects
# --------------------------------------------------------------------------
@dataclass
class NicSettings:
    """``[nic]``: this NIC.  ``mac`` and ``ipv6`` are the frames' source addresses,
    ``usid`` the NIC's own 16-bit uSID (arrival DA = ``locator_block`` | ``usid``),
    ``locator_block`` the fabric's 32-bit uSID locator block, ``pmtu`` bytes of
    payload per packet, ``dscp``/``trim_dscp`` 6-bit DSCPs of data and of trimmed
    packets, ``clock_mhz`` the core clock."""
    name: str
    mac: str
    ipv6: str
    usid: int
    locator_block: int
    pmtu: int = 1024
    dscp: int = 26
    trim_dscp: int = 46
    clock_mhz: float = 125.0


@dataclass
class Port:
    """``[[ports]]``: one plane.  ``id`` 0..7, ``next_hop_mac`` the leaf's MAC, ``admin`` up/down."""
    id: int
    next_hop_mac: str
    admin: str = "up"


@dataclass
class MemoryRegion:
    """``[[memory_regions]]``: remote VA range [va, va+length) -> host address ``base``, keyed by ``rkey``."""
    va: int
    length: int
    rkey: int
    base: int


@dataclass
class EvFormatProfile:
    """``[ev_format_profiles.NAME]``: how an EV is carried (``mrc_ctl.h`` EV Format profile).

    ``mode`` is SRV6 | STEV | UDP (``enum mrc_ctl_ev_fmt_mode``); ``fmt_fields`` the
    widths of its format fields (``struct mrc_ctl_ev_fmt_field``), field 0 most
    significant; empty = mrcnic's default, one field as wide as the mode carries.
    """
    name: str
    mode: str
    fmt_fields: list[int] = field(default_factory=list)

    @property
    def width(self) -> int:
        """Total width of an expanded EV of this format (sum of the format field widths)."""
        return sum(self.fmt_fields) if self.fmt_fields else EV_BITS[self.mode]


def _popcount(v: int) -> int:
    return bin(v).count("1")


@dataclass
class EvField:
    """One field of a generated EV profile (``struct mrc_ctl_ev_field`` of ``mrc_ctl.h``).

    ``width``, ``init_val``, ``min_val``, ``max_val`` and ``mask`` as in the header;
    ``name`` is mrcnic's (for ``port_field`` and uSID terms).  The generated value
    ``v`` runs over ``min_val..max_val`` and is ``popcount(mask)`` bits wide; the
    field's expanded value is :meth:`expand` ``(v)``.  ``shift`` is the bit position
    of the expanded field's LSB in the EV.
    """
    name: str
    width: int
    init_val: int
    min_val: int
    max_val: int
    mask: int
    shift: int = 0

    @property
    def bits(self) -> int:
        """EV bits the field takes (the set bits of ``mask``; 0 for a fixed field)."""
        return _popcount(self.mask)

    def values(self) -> list[int]:
        """Generated values in mrcnic's enumeration order: ``min_val .. max_val``."""
        return list(range(self.min_val, self.max_val + 1))

    def expand(self, v: int) -> int:
        """mrc_ctl.h EV expansion of one field: start from ``init_val`` (zero-filled to
        ``width``); for each set bit of ``mask``, from the most significant, the next most
        significant of the field's ``bits`` EV bits (of ``v``) overwrites that bit."""
        value = self.init_val
        k = self.bits
        for pos in range(self.width - 1, -1, -1):
            if self.mask >> pos & 1:
                k -= 1
                value = (value & ~(1 << pos)) | ((v >> k & 1) << pos)
        return value


def expand_ev(fields: list, values: list, fmt_widths: list | None = None) -> int:
    """The expanded EV of generated ``values`` (one per field), ``mrc_ctl.h`` steps 1-3,
    then the fields concatenated, field 0 most significant.  With ``fmt_widths`` (the
    EV Format profile's field widths) each field sits right-aligned in its format field
    (the extra bits zero-filled) and format fields beyond the profile's are zero."""
    ev = 0
    widths = fmt_widths or [f.width for f in fields]
    for i, w in enumerate(widths):
        ev = ev << w | (fields[i].expand(values[i]) if i < len(fields) else 0)
    return ev


@dataclass
class UsidTemplate:
    """One uSID of a generated profile's path: ``base + sum(field_value * coef)``."""
    base: int
    terms: dict[str, int] = field(default_factory=dict)

    def evaluate(self, values: dict[str, int]) -> int:
        return self.base + sum(values[name] * coef for name, coef in self.terms.items())


@dataclass
class EvEntry:
    """One path-table entry of an EV profile (copies already expanded).

    ``usids`` is empty for STEV/UDP profiles; ``key`` is the configuration key
    the entry comes from (for error messages).
    """
    ev: int
    port: int
    usids: tuple[int, ...]
    weight: int = 1
    state: str = "GOOD"
    key: str = ""


@dataclass
class EvProfile:
    """``[ev_profiles.NAME]``: the EV array a QP sprays over; ``entries`` is the expanded array."""
    name: str
    format: str
    mode: str
    type: str
    ev_min_active: int
    entries: list[EvEntry]
    fields: list[EvField] = field(default_factory=list)
    port_field: str | None = None
    usid_template: list[UsidTemplate] = field(default_factory=list)

    @property
    def peer_usid(self) -> int | None:
        """The last uSID of every path (the peer NIC's own uSID), SRV6 only."""
        return self.entries[0].usids[-1] if self.mode == "SRV6" and self.entries else None


@dataclass
class CcProfile:
    """``[cc_profiles.NAME]``: NSCC parameters (UET 1.0 NSCC; ``mrc_ctl_cc_nscc_cfg``).

    Times in ns, windows in bytes.  Defaults suit a small fabric of 1..100 Gb/s
    links with ~10 us base RTT; see docs/config.md.
    """
    name: str = "default"
    algorithm: str = "NSCC"
    base_rtt_ns: int = 10_000
    target_delay_ns: int = 5_000
    max_cwnd_bytes: int = 262_144
    min_cwnd_bytes: int = 4_096
    initial_cwnd_bytes: int | None = None     #: None = max_cwnd_bytes (start at one BDP)
    eta: float = 0.15
    fi: float = 5.0
    fi_scale: float = 0.25
    gamma: float = 0.8
    max_md_jump: float = 0.5
    disable_qa: bool = False
    qa_gate: int = 3
    qa_threshold_ns: int = 20_000
    adjust_bytes_threshold: int = 32_768
    adjust_period_threshold_ns: int = 10_000


@dataclass
class Qp:
    """``[[qps]]``: one reliable connection to a peer QP."""
    qpn: int
    peer_qpn: int
    ev_profile: str
    peer: str = ""
    peer_ipv6: str | None = None
    peer_usid: int | None = None
    cc_profile: str | None = None
    start_psn: int = 0
    peer_start_psn: int = 0     #: first PSN the peer sends (expected by the receive side)


@dataclass
class NicConfig:
    """A loaded, validated configuration (see :func:`load_config`)."""
    source: str
    nic: NicSettings
    ports: list[Port]
    memory_regions: list[MemoryRegion]
    ev_format_profiles: dict[str, EvFormatProfile]
    ev_profiles: dict[str, EvProfile]
    qps: list[Qp]
    cc_profiles: dict[str, CcProfile]

    def cc_profile(self, qp: Qp) -> CcProfile:
        """The CC profile of ``qp`` (the built-in defaults when it names none)."""
        return self.cc_profiles[qp.cc_profile] if qp.cc_profile else CcProfile()


# --------------------------------------------------------------------------
# Checked reads
# --------------------------------------------------------------------------
def _tname(value) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string",
            list: "array", dict: "table"}.get(type(value), type(value).__name__)


def _k(base: str, key) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


class _Reader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, reason: str):
        raise ConfigError(self.source, key, reason)

    def table(self, value, key, allowed, required=()) -> dict:
        if not isinstance(value, dict):
            self.fail(key or "(file)", f"must be a table, got {_tname(value)}")
        for k in value:
            if k not in allowed:
                near = difflib.get_close_matches(k, allowed, n=1)
                hint = f" (did you mean '{near[0]}'?)" if near else \
                    f" (allowed: {', '.join(sorted(allowed))})"
                self.fail(_k(key, k), f"unknown key{hint}")
        for k in required:
            if k not in value:
                self.fail(_k(key, k), "missing required key")
        return value

    def array(self, tbl, k, key, default=_REQ) -> list:
        value = tbl.get(k, default)
        if value is _REQ:
            self.fail(_k(key, k), "missing required key")
        if not isinstance(value, list):
            self.fail(_k(key, k), f"must be an array, got {_tname(value)}")
        return value

    def int(self, tbl, k, key, lo, hi, default=_REQ, hexa=False):
        value = tbl.get(k, default)
        path = _k(key, k) if isinstance(k, str) else key
        if value is _REQ:
            self.fail(path, "missing required key")
        return self.int_value(value, path, lo, hi, hexa)

    def int_value(self, value, path, lo, hi, hexa=False):
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"must be an integer, got {_tname(value)} {value!r}")
        if not lo <= value <= hi:
            f = (lambda v: f"{v:#x}") if hexa else str
            self.fail(path, f"{f(value)} is out of range {f(lo)}..{f(hi)}")
        return value

    def float(self, tbl, k, key, lo, hi, default):
        value = tbl.get(k, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(_k(key, k), f"must be a number, got {_tname(value)} {value!r}")
        if not lo <= value <= hi:
            self.fail(_k(key, k), f"{value} is out of range {lo}..{hi}")
        return float(value)

    def bool(self, tbl, k, key, default):
        value = tbl.get(k, default)
        if not isinstance(value, bool):
            self.fail(_k(key, k), f"must be a boolean, got {_tname(value)} {value!r}")
        return value

    def str(self, tbl, k, key, default=_REQ, choices=None):
        value = tbl.get(k, default)
        if value is _REQ:
            self.fail(_k(key, k), "missing required key")
        if value is None:
            return None
        if not isinstance(value, str):
            self.fail(_k(key, k), f"must be a string, got {_tname(value)} {value!r}")
        if choices is not None and value not in choices:
            self.fail(_k(key, k), f"'{value}' is not one of {', '.join(choices)}")
        return value

    def name(self, value, key):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", value):
            self.fail(key, f"'{value}' is not a valid name (letters, digits, '_', '-')")
        return value

    def mac(self, tbl, k, key, default=_REQ):
        value = self.str(tbl, k, key, default)
        if not re.fullmatch(r"[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}", value):
            self.fail(_k(key, k), f"'{value}' is not a MAC address (xx:xx:xx:xx:xx:xx)")
        if int(value[:2], 16) & 1:
            self.fail(_k(key, k), f"'{value}' is a multicast MAC address, a unicast one is needed")
        return value.lower()

    def ipv6(self, tbl, k, key, default=_REQ):
        value = self.str(tbl, k, key, default)
        if value is None:
            return None
        try:
            addr = ipaddress.IPv6Address(value)
        except ValueError as exc:
            self.fail(_k(key, k), f"'{value}' is not an IPv6 address ({exc})")
        if addr.is_multicast or addr.is_unspecified:
            self.fail(_k(key, k), f"'{value}' is not a unicast IPv6 address")
        return str(addr)

    def usid(self, value, path):
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"a uSID must be an integer, got {_tname(value)} {value!r}")
        if not 0 < value < 1 << 16:
            self.fail(path, f"uSID {value:#x} is not a non-zero 16-bit value (0x0001..0xffff)")
        return value


# --------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------
_TOP = {"nic", "ports", "memory_regions", "ev_format_profiles", "ev_profiles", "qps", "cc_profiles"}


def _nic(r: _Reader, tbl) -> NicSettings:
    key = "nic"
    r.table(tbl, key, {"name", "mac", "ipv6", "usid", "locator_block", "pmtu", "dscp",
                       "trim_dscp", "clock_mhz"},
            required=("name", "mac", "ipv6", "usid", "locator_block"))
    name = r.name(r.str(tbl, "name", key), "nic.name")
    block = tbl["locator_block"]
    if isinstance(block, str):
        try:
            net = ipaddress.IPv6Network(block, strict=True)
        except ValueError as exc:
            r.fail("nic.locator_block", f"'{block}' is not an IPv6 prefix ({exc})")
        if net.prefixlen != 32:
            r.fail("nic.locator_block", f"'{block}' is a /{net.prefixlen}: a uSID locator block is a /32")
        block = int(net.network_address) >> 96
    else:
        block = r.int(tbl, "locator_block", key, 0, (1 << 32) - 1, hexa=True)
    pmtu = r.int(tbl, "pmtu", key, 0, 1 << 16, default=1024)
    if pmtu not in PMTUS:
        r.fail("nic.pmtu", f"{pmtu} is not a RoCE path MTU ({', '.join(map(str, PMTUS))})")
    dscp = r.int(tbl, "dscp", key, 0, 63, default=26)
    trim_dscp = r.int(tbl, "trim_dscp", key, 0, 63, default=46)
    if trim_dscp == dscp:
        r.fail("nic.trim_dscp", f"{trim_dscp} equals nic.dscp: a trimmed packet must be "
                                "distinguishable from data")
    return NicSettings(
        name=name, mac=r.mac(tbl, "mac", key), ipv6=r.ipv6(tbl, "ipv6", key),
        usid=r.usid(tbl["usid"], "nic.usid"), locator_block=block, pmtu=pmtu, dscp=dscp,
        trim_dscp=trim_dscp, clock_mhz=r.float(tbl, "clock_mhz", key, 1, 1000, 125.0))


def _ports(r: _Reader, items) -> list[Port]:
    if not isinstance(items, list):
        r.fail("ports", f"must be an array of tables ([[ports]]), got {_tname(items)}")
    if not 1 <= len(items) <= MAX_PORTS:
        r.fail("ports", f"{len(items)} ports given, a NIC has 1..{MAX_PORTS} planes")
    ports = {}
    for i, tbl in enumerate(items):
        key = f"ports[{i}]"
        r.table(tbl, key, {"id", "next_hop_mac", "admin"}, required=("id", "next_hop_mac"))
        pid = r.int(tbl, "id", key, 0, MAX_PORTS - 1)
        if pid in ports:
            r.fail(f"{key}.id", f"duplicate port id {pid}")
        ports[pid] = Port(pid, r.mac(tbl, "next_hop_mac", key),
                          r.str(tbl, "admin", key, "up", choices=("up", "down")))
    for pid in range(len(items)):
        if pid not in ports:
            r.fail("ports", f"port ids must be contiguous from 0: id {pid} is missing "
                            f"(got {sorted(ports)})")
    return [ports[i] for i in range(len(items))]


def _memory_regions(r: _Reader, items) -> list[MemoryRegion]:
    if not isinstance(items, list):
        r.fail("memory_regions", f"must be an array of tables, got {_tname(items)}")
    if len(items) > MAX_REGIONS:
        r.fail("memory_regions", f"{len(items)} memory regions given, the hardware holds "
                                 f"{MAX_REGIONS}")
    regions = []
    for i, tbl in enumerate(items):
        key = f"memory_regions[{i}]"
        r.table(tbl, key, {"va", "length", "rkey", "base"}, required=("va", "length", "rkey", "base"))
        mr = MemoryRegion(va=r.int(tbl, "va", key, 0, (1 << 64) - 1, hexa=True),
                          length=r.int(tbl, "length", key, 1, (1 << 32) - 1),
                          rkey=r.int(tbl, "rkey", key, 0, (1 << 32) - 1, hexa=True),
                          base=r.int(tbl, "base", key, 0, (1 << 32) - 1, hexa=True))
        if mr.va + mr.length > 1 << 64:
            r.fail(f"{key}.length", "va + length runs past the 64-bit VA space")
        if mr.base + mr.length > 1 << 32:
            r.fail(f"{key}.length", f"base {mr.base:#x} + length {mr.length:#x} runs past the "
                                    "32-bit host address space")
        for j, other in enumerate(regions):
            if other.rkey == mr.rkey:
                r.fail(f"{key}.rkey", f"rkey {mr.rkey:#x} is already used by memory_regions[{j}]")
            if mr.base < other.base + other.length and other.base < mr.base + mr.length:
                r.fail(f"{key}.base", f"host range {mr.base:#x}..{mr.base + mr.length - 1:#x} "
                                      f"overlaps memory_regions[{j}]")
        regions.append(mr)
    return regions


def _named_tables(r: _Reader, tbl, key) -> dict:
    if not isinstance(tbl, dict):
        r.fail(key, f"must be a table of named tables ([{key}.NAME]), got {_tname(tbl)}")
    for name in tbl:
        r.name(name, _k(key, name))
    return tbl


#: Widest expanded EV per format mode, bits (mrc_ctl.h: STEV at most 32; SRv6 without SRH
#: at most 128, the address; UDP: mrcnic carries 14 bits in the UDP source port).
FMT_MAX_BITS = {"SRV6": 128, "STEV": 32, "UDP": 14}


def _format_profiles(r: _Reader, tbl) -> dict[str, EvFormatProfile]:
    out = {}
    for name, sub in _named_tables(r, tbl, "ev_format_profiles").items():
        key = f"ev_format_profiles.{name}"
        r.table(sub, key, {"mode", "fmt_fields"}, required=("mode",))
        mode = r.str(sub, "mode", key, choices=tuple(EV_BITS))
        widths = []
        for i, item in enumerate(r.array(sub, "fmt_fields", key, [])):
            fkey = f"{key}.fmt_fields[{i}]"
            if isinstance(item, dict):
                r.table(item, fkey, {"width"}, required=("width",))
                widths.append(r.int(item, "width", fkey, 1, 128))
            else:
                widths.append(r.int_value(item, fkey, 1, 128))
        if sum(widths) > FMT_MAX_BITS[mode]:
            r.fail(f"{key}.fmt_fields", f"the format fields are {sum(widths)} bits wide, more than "
                                        f"the {FMT_MAX_BITS[mode]} bits a {mode} EV holds")
        out[name] = EvFormatProfile(name, mode, widths)
    return out


def _copies_weight_state(r: _Reader, tbl, key):
    copies = r.int(tbl, "copies", key, 1, MAX_PATHS, default=1)
    weight = r.int(tbl, "weight", key, 1, 255, default=1)
    state = r.str(tbl, "state", key, "GOOD")
    if state == "ASSUMED_BAD":
        r.fail(_k(key, "state"), "ASSUMED_BAD is set by the NIC only; a controller sets GOOD or DENIED")
    if state not in _STATES:
        r.fail(_k(key, "state"), f"'{state}' is not one of {', '.join(_STATES)}")
    return copies, weight, state


def _usid_list(r: _Reader, value, key) -> tuple[int, ...]:
    if not isinstance(value, list):
        r.fail(key, f"must be an array of uSIDs, got {_tname(value)}")
    if not value:
        r.fail(key, f"empty uSID list: a path needs 1..{wire.MAX_USIDS} uSIDs")
    if len(value) > wire.MAX_USIDS:
        r.fail(key, f"{len(value)} uSIDs: a path holds at most {wire.MAX_USIDS} "
                    f"({MAX_CARRIERS} carriers of {wire.USIDS_PER_CARRIER})")
    return tuple(r.usid(u, f"{key}[{i}]") for i, u in enumerate(value))


def _explicit(r: _Reader, sub, key, mode, n_ports):
    items = r.array(sub, "entries", key)
    if not items:
        r.fail(f"{key}.entries", "an explicit EV profile needs at least one entry")
    entries = []
    for i, tbl in enumerate(items):
        ekey = f"{key}.entries[{i}]"
        allowed = {"ev", "port", "copies", "weight", "state"} | ({"usids"} if mode == "SRV6" else set())
        if mode != "SRV6" and isinstance(tbl, dict) and "usids" in tbl:
            r.fail(f"{ekey}.usids", f"uSIDs apply to SRV6 format profiles only (this one is {mode})")
        r.table(tbl, ekey, allowed, required=("ev", "port") + (("usids",) if mode == "SRV6" else ()))
        bits = EV_BITS[mode]
        ev = r.int_value(tbl["ev"], f"{ekey}.ev", -(1 << 63), (1 << 63) - 1)
        if ev < 0:
            r.fail(f"{ekey}.ev", f"EV {ev} is negative")
        if ev >> bits:
            r.fail(f"{ekey}.ev", f"EV {ev:#x} is wider than the {bits} bits the {mode} format carries")
        port = r.int(tbl, "port", ekey, 0, MAX_PORTS - 1)
        if port >= n_ports:
            r.fail(f"{ekey}.port", f"port {port} does not exist (ports 0..{n_ports - 1})")
        usids = _usid_list(r, tbl["usids"], f"{ekey}.usids") if mode == "SRV6" else ()
        copies, weight, state = _copies_weight_state(r, tbl, ekey)
        entries += [EvEntry(ev, port, usids, weight, state, ekey) for _ in range(copies)]
        if len(entries) > MAX_PATHS:
            r.fail(f"{key}.entries", f"more than {MAX_PATHS} path entries (copies included) in one profile")
    return entries


#: Key names of mrcnic before issue 25, refused with the mrc_ctl.h name to use.
_OLD_FIELD_KEYS = {"initial": "init_val", "min": "min_val", "max": "max_val"}


def _fields(r: _Reader, sub, key, fmt: EvFormatProfile) -> list[EvField]:
    """Generated fields in mrc_ctl.h terms, every restriction of the header checked."""
    rule = "mrc_ctl.h rule"
    items = r.array(sub, "fields", key)
    if not items:
        r.fail(f"{key}.fields", "a generated EV profile needs at least one field")
    fields = []
    for i, tbl in enumerate(items):
        fkey = f"{key}.fields[{i}]"
        if isinstance(tbl, dict):
            for old, new in _OLD_FIELD_KEYS.items():
                if old in tbl:
                    r.fail(f"{fkey}.{old}", f"renamed: use '{new}' (mrc_ctl.h struct mrc_ctl_ev_field); "
                                            "note that mask now places EV bits over init_val "
                                            "(docs/config.md)")
        r.table(tbl, fkey, {"name", "width", "init_val", "min_val", "max_val", "mask"},
                required=("width",))
        name = r.name(r.str(tbl, "name", fkey, f"f{i}"), f"{fkey}.name")
        if any(f.name == name for f in fields):
            r.fail(f"{fkey}.name", f"duplicate field name '{name}'")
        width = r.int(tbl, "width", fkey, 1, 128)
        top = (1 << width) - 1
        init_val = r.int(tbl, "init_val", fkey, 0, (1 << 128) - 1, default=0, hexa=True)
        if init_val > top:
            r.fail(f"{fkey}.init_val", f"{init_val:#x} is wider than the field's {width} bits "
                                       f"({rule}: a field's init_val cannot be wider than the "
                                       "field's width)")
        mask = r.int(tbl, "mask", fkey, 0, (1 << 128) - 1, default=top, hexa=True)
        if mask & ~top:
            r.fail(f"{fkey}.mask", f"{mask:#x} sets bits outside the field's {width} bits "
                                   f"({rule}: a field's mask cannot contain bits set outside "
                                   "of the field width)")
        bits = _popcount(mask)
        hi = r.int(tbl, "max_val", fkey, 0, (1 << 128) - 1, default=(1 << bits) - 1)
        if hi >> bits:
            r.fail(f"{fkey}.max_val", f"{hi} needs {hi.bit_length()} bits, the mask {mask:#x} has "
                                      f"{bits} set ({rule}: a field's max_val cannot be wider than "
                                      "the number of set mask bits)")
        lo = r.int(tbl, "min_val", fkey, 0, (1 << 128) - 1, default=0)
        if lo > hi:
            r.fail(f"{fkey}.min_val", f"min_val {lo} > max_val {hi}")
        fields.append(EvField(name, width, init_val, lo, hi, mask))
    if fmt.fmt_fields:
        if len(fields) > len(fmt.fmt_fields):
            r.fail(f"{key}.fields", f"{len(fields)} fields, the EV Format profile "
                                    f"ev_format_profiles.{fmt.name} has {len(fmt.fmt_fields)} "
                                    f"({rule}: field_count <= fmt_field_count)")
        for i, (f, w) in enumerate(zip(fields, fmt.fmt_fields)):
            if f.width > w:
                r.fail(f"{key}.fields[{i}].width", f"{f.width} bits, wider than format field {i} "
                                                   f"of ev_format_profiles.{fmt.name} ({w} bits; "
                                                   "mrcnic: each field sits in its format field)")
    total = sum(f.width for f in fields)
    if total > fmt.width:
        r.fail(f"{key}.fields", f"the fields make a {total}-bit EV, wider than the {fmt.width} "
                                f"bits of ev_format_profiles.{fmt.name} ({fmt.mode}; {rule}: sum "
                                "of field widths <= sum of fmt_field widths)")
    widths = fmt.fmt_fields or [f.width for f in fields]
    shift = sum(widths)
    for f, w in zip(fields, widths):
        shift -= w
        f.shift = shift
    return fields


def _usid_template(r: _Reader, value, key, fields) -> list[UsidTemplate]:
    if not isinstance(value, list):
        r.fail(key, f"must be an array of uSID templates, got {_tname(value)}")
    if not value:
        r.fail(key, f"empty uSID list: a path needs 1..{wire.MAX_USIDS} uSIDs")
    if len(value) > wire.MAX_USIDS:
        r.fail(key, f"{len(value)} uSIDs: a path holds at most {wire.MAX_USIDS} "
                    f"({MAX_CARRIERS} carriers of {wire.USIDS_PER_CARRIER})")
    names = [f.name for f in fields]
    out = []
    for i, item in enumerate(value):
        ukey = f"{key}[{i}]"
        if isinstance(item, dict):
            r.table(item, ukey, {"base", "terms"}, required=("base",))
            base = r.int(item, "base", ukey, 0, 0xFFFF, hexa=True)
            terms = item.get("terms", {})
            if not isinstance(terms, dict):
                r.fail(f"{ukey}.terms", f"must be a table {{field = coefficient}}, got {_tname(terms)}")
            for name, coef in terms.items():
                if name not in names:
                    r.fail(f"{ukey}.terms.{name}", f"unknown field '{name}' (fields: {', '.join(names)})")
                r.int_value(coef, f"{ukey}.terms.{name}", 0, 0xFFFF, hexa=True)
            out.append(UsidTemplate(base, dict(terms)))
        else:
            out.append(UsidTemplate(r.usid(item, ukey)))
    return out


def _generated(r: _Reader, sub, key, fmt: EvFormatProfile, nic, ports):
    mode = fmt.mode
    fields = _fields(r, sub, key, fmt)
    names = [f.name for f in fields]
    port_field = r.str(sub, "port_field", key, None)
    if port_field is not None and port_field not in names:
        r.fail(f"{key}.port_field", f"unknown field '{port_field}' (fields: {', '.join(names)})")
    copies, weight, state = _copies_weight_state(r, sub, key)
    count = 1
    for f in fields:
        count *= f.max_val - f.min_val + 1
    ev_count = r.int(sub, "ev_count", key, 1, MAX_PATHS) if "ev_count" in sub else count
    if ev_count > count:
        r.fail(f"{key}.ev_count", f"{ev_count} exceeds the {count} EVs the fields generate")
    if ev_count * copies > MAX_PATHS:
        r.fail(f"{key}.fields" if "ev_count" not in sub else f"{key}.ev_count",
               f"the fields generate {ev_count if 'ev_count' in sub else count} EVs x {copies} "
               f"copies, more than the {MAX_PATHS} path entries of the path table "
               "(set ev_count to use the first ones)")
    n_ports = len(ports)
    if port_field is not None:
        pf = fields[names.index(port_field)]
        if pf.max_val >= n_ports:
            r.fail(f"{key}.port_field", f"field '{port_field}' reaches port {pf.max_val}, which "
                                        f"does not exist (ports 0..{n_ports - 1})")
    addr_form = mode == "SRV6" and "usids" not in sub
    template = _usid_template(r, sub["usids"], f"{key}.usids", fields) \
        if mode == "SRV6" and not addr_form else []
    tail = ()
    if addr_form:
        width = sum(fmt.fmt_fields) if fmt.fmt_fields else sum(f.width for f in fields)
        if width < 48 or (width - 32) % 16:
            r.fail(f"{key}.fields", f"an SRV6 EV without uSID templates is the SRv6 address: a "
                                    f"32-bit locator then 16-bit uSIDs; these fields make "
                                    f"{width} bits")
        if "tail_usids" in sub:
            tail = _usid_list(r, sub["tail_usids"], f"{key}.tail_usids")
    elif "tail_usids" in sub:
        r.fail(f"{key}.tail_usids", "applies to SRV6 profiles whose fields form the address only")
    up = [p.id for p in ports if p.admin == "up"] or [p.id for p in ports]
    entries = []
    combos = itertools.islice(itertools.product(*(f.values() for f in fields)), ev_count)
    for n, combo in enumerate(combos):
        expanded = {f.name: f.expand(v) for f, v in zip(fields, combo)}
        port = combo[names.index(port_field)] if port_field is not None else up[n % len(up)]
        ev = expand_ev(fields, list(combo), fmt.fmt_fields or None)
        if addr_form:
            nus = (width - 32) // 16
            locator = ev >> (16 * nus)
            if locator != nic.locator_block:
                r.fail(f"{key}.fields", f"EV {n} has locator {locator:#010x}, not nic.locator_block "
                                        f"{nic.locator_block:#010x} (mrcnic: one locator block)")
            usids = [ev >> (16 * (nus - 1 - k)) & 0xFFFF for k in range(nus)]
            while usids and usids[-1] == 0:
                usids.pop()
            if 0 in usids or not usids:
                r.fail(f"{key}.fields", f"EV {n} ({ev:#x}): a zero uSID before the end of the list")
            usids = tuple(usids) + tail
            if len(usids) > wire.MAX_USIDS:
                r.fail(f"{key}.tail_usids", f"{len(usids)} uSIDs: a path holds at most {wire.MAX_USIDS}")
            entries += [EvEntry(n, port, usids, weight, state, key) for _ in range(copies)]
            continue
        usids = []
        for i, t in enumerate(template):
            u = t.evaluate(expanded)
            if not 0 < u < 1 << 16:
                at = ", ".join(f"{k}={v}" for k, v in expanded.items())
                r.fail(f"{key}.usids[{i}]", f"evaluates to {u:#x} for {at}: not a non-zero 16-bit uSID")
            usids.append(u)
        entries += [EvEntry(ev, port, tuple(usids), weight, state, key) for _ in range(copies)]
    return entries, fields, port_field, template


def _ev_profiles(r: _Reader, tbl, formats, ports, nic) -> dict[str, EvProfile]:
    out = {}
    for name, sub in _named_tables(r, tbl, "ev_profiles").items():
        key = f"ev_profiles.{name}"
        common = {"format", "ev_min_active", "type"}
        r.table(sub, key, common | {"entries", "fields", "port_field", "usids", "copies", "weight",
                                    "state", "ev_count", "tail_usids"}, required=("format", "type"))
        fmt = r.str(sub, "format", key)
        if fmt not in formats:
            r.fail(f"{key}.format", f"unknown EV format profile '{fmt}' "
                                    f"(defined: {', '.join(formats) or 'none'})")
        mode = formats[fmt].mode
        kind = r.str(sub, "type", key, choices=("explicit", "generated"))
        if kind == "explicit":
            r.table(sub, key, common | {"entries"}, required=("entries",))
            entries = _explicit(r, sub, key, mode, len(ports))
            prof = EvProfile(name, fmt, mode, kind, 1, entries)
        else:
            gen = common | {"fields", "port_field", "copies", "weight", "state", "ev_count"}
            if mode != "SRV6" and "usids" in sub:
                r.fail(f"{key}.usids", f"uSIDs apply to SRV6 format profiles only (this one is {mode})")
            r.table(sub, key, gen | ({"usids", "tail_usids"} if mode == "SRV6" else set()),
                    required=("fields",))
            entries, fields, port_field, template = _generated(r, sub, key, formats[fmt], nic,
                                                               ports)
            prof = EvProfile(name, fmt, mode, kind, 1, entries, fields, port_field, template)
        if mode == "SRV6":
            last = entries[0].usids[-1]
            for e in entries:
                if e.usids[-1] != last:
                    r.fail(f"{e.key}.usids" if kind == "explicit" else f"{key}.usids",
                           f"path ends with uSID {e.usids[-1]:#06x} but {entries[0].key} ends with "
                           f"{last:#06x}: every path of a profile ends with the peer NIC's uSID")
        good = {(e.ev, e.port) for e in entries
                if e.state == "GOOD" and ports[e.port].admin == "up"}
        prof.ev_min_active = r.int(sub, "ev_min_active", key, 1, MAX_PATHS, default=1)
        if len(good) < prof.ev_min_active:
            r.fail(f"{key}.ev_min_active", f"{prof.ev_min_active} exceeds the {len(good)} GOOD EVs of "
                                           "the profile (DENIED EVs and admin-down ports excluded)")
        out[name] = prof
    return out


def _cc_profiles(r: _Reader, tbl, pmtu) -> dict[str, CcProfile]:
    out = {}
    d = CcProfile()
    for name, sub in _named_tables(r, tbl, "cc_profiles").items():
        key = f"cc_profiles.{name}"
        r.table(sub, key, set(CcProfile.__dataclass_fields__) - {"name"})
        ns = (1 << 32) - 1
        cc = CcProfile(
            name=name,
            algorithm=r.str(sub, "algorithm", key, "NSCC", choices=("NSCC",)),
            base_rtt_ns=r.int(sub, "base_rtt_ns", key, 1, ns, d.base_rtt_ns),
            target_delay_ns=r.int(sub, "target_delay_ns", key, 1, ns, d.target_delay_ns),
            max_cwnd_bytes=r.int(sub, "max_cwnd_bytes", key, 1, ns, d.max_cwnd_bytes),
            min_cwnd_bytes=r.int(sub, "min_cwnd_bytes", key, 1, ns, d.min_cwnd_bytes),
            initial_cwnd_bytes=r.int(sub, "initial_cwnd_bytes", key, 1, ns, None)
            if "initial_cwnd_bytes" in sub else None,
            eta=r.float(sub, "eta", key, 0.0, 1e6, d.eta),
            fi=r.float(sub, "fi", key, 0.0, 1e6, d.fi),
            fi_scale=r.float(sub, "fi_scale", key, 0.0, 1e6, d.fi_scale),
            gamma=r.float(sub, "gamma", key, 0.0, 1.0, d.gamma),
            max_md_jump=r.float(sub, "max_md_jump", key, 0.0, 1.0, d.max_md_jump),
            disable_qa=r.bool(sub, "disable_qa", key, d.disable_qa),
            qa_gate=r.int(sub, "qa_gate", key, 0, 255, d.qa_gate),
            qa_threshold_ns=r.int(sub, "qa_threshold_ns", key, 1, ns, d.qa_threshold_ns),
            adjust_bytes_threshold=r.int(sub, "adjust_bytes_threshold", key, 1, ns,
                                         d.adjust_bytes_threshold),
            adjust_period_threshold_ns=r.int(sub, "adjust_period_threshold_ns", key, 1, ns,
                                             d.adjust_period_threshold_ns))
        if cc.min_cwnd_bytes < pmtu:
            r.fail(f"{key}.min_cwnd_bytes", f"{cc.min_cwnd_bytes} is below one packet (nic.pmtu {pmtu})")
        if cc.min_cwnd_bytes > cc.max_cwnd_bytes:
            r.fail(f"{key}.min_cwnd_bytes", f"min_cwnd_bytes {cc.min_cwnd_bytes} > max_cwnd_bytes "
                                            f"{cc.max_cwnd_bytes}")
        if cc.initial_cwnd_bytes is not None and not \
                cc.min_cwnd_bytes <= cc.initial_cwnd_bytes <= cc.max_cwnd_bytes:
            r.fail(f"{key}.initial_cwnd_bytes", f"{cc.initial_cwnd_bytes} is outside min_cwnd_bytes.."
                                                "max_cwnd_bytes")
        out[name] = cc
    return out


def _qps(r: _Reader, items, profiles, cc_profiles) -> list[Qp]:
    if not isinstance(items, list):
        r.fail("qps", f"must be an array of tables ([[qps]]), got {_tname(items)}")
    if len(items) > MAX_QPS:
        r.fail("qps", f"{len(items)} QPs given, the hardware holds {MAX_QPS}")
    qps = []
    seen = {}
    for i, tbl in enumerate(items):
        key = f"qps[{i}]"
        r.table(tbl, key, {"qpn", "peer", "peer_qpn", "peer_ipv6", "peer_usid", "ev_profile",
                           "cc_profile", "start_psn", "peer_start_psn"}, required=("qpn", "peer_qpn", "ev_profile"))
        qp = Qp(qpn=r.int(tbl, "qpn", key, 2, (1 << 24) - 1, hexa=False),
                peer_qpn=r.int(tbl, "peer_qpn", key, 2, (1 << 24) - 1),
                ev_profile=r.str(tbl, "ev_profile", key),
                peer=r.str(tbl, "peer", key, ""),
                peer_ipv6=r.ipv6(tbl, "peer_ipv6", key, None),
                cc_profile=r.str(tbl, "cc_profile", key, None),
                start_psn=r.int(tbl, "start_psn", key, 0, (1 << 24) - 1, default=0),
                peer_start_psn=r.int(tbl, "peer_start_psn", key, 0, (1 << 24) - 1, default=0))
        if qp.qpn in seen:
            r.fail(f"{key}.qpn", f"duplicate QPN {qp.qpn} (also qps[{seen[qp.qpn]}])")
        seen[qp.qpn] = i
        if qp.ev_profile not in profiles:
            r.fail(f"{key}.ev_profile", f"unknown EV profile '{qp.ev_profile}' "
                                        f"(defined: {', '.join(profiles) or 'none'})")
        if qp.cc_profile is not None and qp.cc_profile not in cc_profiles:
            r.fail(f"{key}.cc_profile", f"unknown CC profile '{qp.cc_profile}' "
                                        f"(defined: {', '.join(cc_profiles) or 'none'})")
        prof = profiles[qp.ev_profile]
        if prof.mode == "SRV6":
            if "peer_usid" in tbl:
                qp.peer_usid = r.usid(tbl["peer_usid"], f"{key}.peer_usid")
                if qp.peer_usid != prof.peer_usid:
                    r.fail(f"{key}.peer_usid", f"{qp.peer_usid:#06x} differs from {prof.peer_usid:#06x}, "
                                               f"the last uSID of the paths of ev_profiles.{prof.name}")
            else:
                qp.peer_usid = prof.peer_usid
        else:
            if "peer_usid" in tbl:
                r.fail(f"{key}.peer_usid", f"a uSID applies to SRV6 profiles only "
                                           f"(ev_profiles.{prof.name} is {prof.mode})")
            if qp.peer_ipv6 is None:
                r.fail(f"{key}.peer_ipv6", f"missing required key: ev_profiles.{prof.name} is "
                                           f"{prof.mode}, its frames go to the peer's address")
            for j, other in enumerate(qps):
                if other.ev_profile == qp.ev_profile and other.peer_ipv6 != qp.peer_ipv6:
                    r.fail(f"{key}.peer_ipv6", f"{qp.peer_ipv6} differs from qps[{j}].peer_ipv6 "
                                               f"{other.peer_ipv6}: QPs sharing a {prof.mode} profile "
                                               "share its destination address")
        qps.append(qp)
    return qps


def _parse(data: dict, source: str) -> NicConfig:
    r = _Reader(source)
    r.table(data, "", _TOP, required=("nic", "ports"))
    nic = _nic(r, data["nic"])
    ports = _ports(r, data["ports"])
    regions = _memory_regions(r, data.get("memory_regions", []))
    formats = _format_profiles(r, data.get("ev_format_profiles", {}))
    profiles = _ev_profiles(r, data.get("ev_profiles", {}), formats, ports, nic)
    ccs = _cc_profiles(r, data.get("cc_profiles", {}), nic.pmtu)
    qps = _qps(r, data.get("qps", []), profiles, ccs)
    cfg = NicConfig(source, nic, ports, regions, formats, profiles, qps, ccs)
    _compile(cfg, r)            # capacity checks: refuse what the hardware cannot hold
    return cfg


def loads_config(text: str, source: str = "<string>") -> NicConfig:
    """Parse, validate and lay out configuration ``text`` (see :func:`load_config`).

    Parameters
    ----------
    text : str
        TOML text.
    source : str
        Name used for the file in error messages.

    Returns
    -------
    NicConfig

    Raises
    ------
    ConfigError
        As :func:`load_config`.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "(file)", f"TOML syntax error: {exc}") from None
    return _parse(data, source)


def load_config(path) -> NicConfig:
    """Read, validate and lay out the NIC configuration file at ``path``.

    Parameters
    ----------
    path : str or os.PathLike
        The TOML file (reference: docs/config.md).

    Returns
    -------
    NicConfig
        The validated configuration; :func:`compile_tables` turns it into hardware tables.

    Raises
    ------
    ConfigError
        (a ``ValueError``) naming the file, the key path and the reason, for: an
        unreadable file or bad TOML, unknown keys, missing keys, wrong types,
        out-of-range values, bad MAC or IPv6 syntax, uSID lists empty or over 24
        long, zero or over-16-bit uSIDs, EVs wider than their format, ports that
        do not exist, generated fields with min > max or width/mask/initial out of
        range, EV profiles with fewer GOOD EVs than ``ev_min_active``, more than
        256 path entries or 256 SRH segment words, unknown profile or format
        names, duplicate QPNs or rkeys, overlapping memory regions.  Nothing is
        emitted for an invalid file.
    """
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ConfigError(source, "(file)", f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, "(file)", f"not UTF-8 text: {exc}") from None
    return loads_config(text, source)


# --------------------------------------------------------------------------
# Hardware tables
# --------------------------------------------------------------------------
def _mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


@dataclass
class HwTables:
    """What the RTL needs, as plain ints and dicts keyed by ``rtl/layouts.py`` field names.

    Attributes
    ----------
    globals : dict
        ``NicGlobals`` fields: ``src_mac`` (48-bit int), ``src_ip`` (128-bit int), ``dscp``, ``pmtu_log2``.
    next_hop_mac : list of int
        48-bit next-hop (leaf) MAC per port, index = port id.
    port_up : list of bool
        Administrative state per port.
    path_entries : list of dict
        ``PathEntry`` fields per path-table entry: ``ev``, ``port``, ``state`` (``EvState`` value),
        ``weight``, ``n_carriers``, ``seg_base``, ``da`` (128-bit int).
    path_encaps : list of wire.PathEncap
        The same entries as ``mrcnic.wire.PathEncap`` (to build the expected frame).
    segments : list of int
        The segment memory: 128-bit SRH Segment List words.  Entry *e* with ``n_carriers`` = n > 1
        uses ``segments[seg_base + k]`` = Segment List[k], k = 0..n-1 (wire order: [0] = last
        carrier, [n-1] = first carrier = ``da``).  Identical lists are stored once.
    qp_contexts, rx_qps : list of dict
        ``QpContext`` / ``RxQpContext`` fields per QP, index = position in ``[[qps]]``.
    memory_regions : list of dict
        ``MemRegion`` fields per region.
    profile_ranges : dict
        EV profile name -> (base, count) in the path table.
    locator_block, local_usid, trim_dscp : int
        uSID locator block, this NIC's uSID (its arrival DA is ``block | usid``), trim DSCP.
    """
    globals: dict
    next_hop_mac: list
    port_up: list
    path_entries: list
    path_encaps: list
    segments: list
    qp_contexts: list
    rx_qps: list
    memory_regions: list
    profile_ranges: dict
    locator_block: int
    local_usid: int
    trim_dscp: int

    def expected_path(self, index: int) -> tuple[int, int, list[int]]:
        """(EV, port, uSIDs) of path-table entry ``index`` (uSIDs empty for STEV/UDP)."""
        p = self.path_encaps[index]
        return p.ev, p.port, list(p.usids)

    def local_da(self) -> int:
        """The SRV6 arrival DA of frames to this NIC: ``locator_block | usid | 0...`` (128-bit int)."""
        return int(ipaddress.IPv6Address(wire.usid_arrival(self.locator_block, [self.local_usid])))


def _compile(cfg: NicConfig, r: _Reader) -> HwTables:
    nic = cfg.nic
    order = []                              # profiles used by QPs, in order of first use
    for qp in cfg.qps:
        if qp.ev_profile not in order:
            order.append(qp.ev_profile)
    entries, encaps, segments, seg_index, ranges = [], [], [], {}, {}
    for name in order:
        prof = cfg.ev_profiles[name]
        base = len(entries)
        if base + len(prof.entries) > MAX_PATHS:
            r.fail(f"ev_profiles.{name}", f"path table full: the profiles used by [[qps]] need "
                                          f"{base + len(prof.entries)} entries in total, the path "
                                          f"table holds {MAX_PATHS}")
        ranges[name] = (base, len(prof.entries))
        peer_ip = next((q.peer_ipv6 for q in cfg.qps if q.ev_profile == name), None)
        for e in prof.entries:
            enc = wire.PathEncap(ev=e.ev, port=e.port, mode=prof.mode, block=nic.locator_block,
                                 usids=list(e.usids), dst_ip=peer_ip or "::")
            carriers = [int(ipaddress.IPv6Address(c)) for c in enc.carriers()]
            seg_base = 0
            if len(carriers) > 1:
                words = tuple(reversed(carriers))
                if words not in seg_index:
                    if len(segments) + len(words) > MAX_SEGMENTS:
                        r.fail(e.key, f"SRH segment memory full: more than {MAX_SEGMENTS} segment words")
                    seg_index[words] = len(segments)
                    segments.extend(words)
                seg_base = seg_index[words]
            denied = e.state == "DENIED" or cfg.ports[e.port].admin == "down"
            entries.append(dict(ev=e.ev, port=e.port,
                                state=(EvState.DENIED if denied else EvState.GOOD).value,
                                weight=e.weight, n_carriers=len(carriers), seg_base=seg_base,
                                da=carriers[0]))
            encaps.append(enc)
    qp_contexts, rx_qps = [], []
    for qp in cfg.qps:
        prof = cfg.ev_profiles[qp.ev_profile]
        base, count = ranges[qp.ev_profile]
        mode = EvMode[prof.mode].value
        qp_contexts.append(dict(dest_qpn=qp.peer_qpn, start_psn=qp.start_psn, mode=mode,
                                profile_base=base, profile_count=count,
                                peer_usid=qp.peer_usid or 0, rkey_check=0))
        rx_qps.append(dict(valid=1, qpn=qp.qpn, mode=mode, peer_qpn=qp.peer_qpn,
                           peer_usid=qp.peer_usid or 0, start_psn=qp.peer_start_psn))
    return HwTables(
        globals=dict(src_mac=_mac_int(nic.mac), src_ip=int(ipaddress.IPv6Address(nic.ipv6)),
                     dscp=nic.dscp, pmtu_log2=PMTUS[nic.pmtu]),
        next_hop_mac=[_mac_int(p.next_hop_mac) for p in cfg.ports],
        port_up=[p.admin == "up" for p in cfg.ports],
        path_entries=entries, path_encaps=encaps, segments=segments,
        qp_contexts=qp_contexts, rx_qps=rx_qps,
        memory_regions=[dict(valid=1, rkey=m.rkey, va=m.va, length=m.length, base=m.base)
                        for m in cfg.memory_regions],
        profile_ranges=ranges, locator_block=nic.locator_block, local_usid=nic.usid,
        trim_dscp=nic.trim_dscp)


def compile_tables(cfg: NicConfig) -> HwTables:
    """Lay a loaded configuration out as the hardware tables.

    Path table: every EV profile used by a ``[[qps]]`` entry, in order of first
    use, as one contiguous range of entries (QPs naming the same profile share
    its range, hence its EV states); profiles no QP uses are validated but not
    laid out.  ``copies = n`` of an EV are n separate entries; ``weight = w`` is
    the entry's ``weight`` field (decisions per scheduling round).  Entries that
    are DENIED, or on an admin-down port, get ``EvState.DENIED``.  SRV6 entries
    get ``da`` = first uSID carrier (``wire.path_carriers``) and, beyond 6
    uSIDs, an SRH segment list (RFC 8754 wire order) in the segment memory;
    STEV/UDP entries get ``da`` = the peer address of the QPs using the profile.

    Parameters
    ----------
    cfg : NicConfig
        A configuration returned by :func:`load_config`.

    Returns
    -------
    HwTables

    Raises
    ------
    ConfigError
        When the tables do not fit the hardware (never for a configuration that
        :func:`load_config` accepted, which runs this same layout).
    """
    return _compile(cfg, _Reader(cfg.source))


#: Sender-reliability defaults (OCP MRC ACK timeout 1.024 us x 2^t; probes and ECN hold in cycles).
RELIABILITY_DEFAULTS = dict(ack_timeout_exp=4, retry_count=3, probe_interval=2000, ecn_hold=2000)


def rel_qp_configs(cfg: NicConfig, tables: HwTables, **overrides) -> list[dict]:
    """``RelQpConfig`` field values (dicts, ``rtl/reliability.py``) per QP of ``cfg``.

    Profile range and ``ev_min_active`` come from the QP's EV profile, the
    NSCC parameters from its CC profile (``rtl.nscc.nscc_config``), the rest
    from :data:`RELIABILITY_DEFAULTS` unless given in ``overrides``.
    """
    from mrcnic.rtl.nscc import nscc_config

    out = []
    for qp, ctx in zip(cfg.qps, tables.qp_contexts):
        prof = cfg.ev_profiles[qp.ev_profile]
        cc = cfg.cc_profiles.get(qp.cc_profile) if qp.cc_profile else None
        rel = dict(RELIABILITY_DEFAULTS, start_psn=ctx["start_psn"],
                   profile_base=ctx["profile_base"], profile_count=ctx["profile_count"],
                   ev_min_active=prof.ev_min_active, nscc=nscc_config(cc))
        rel.update(overrides)
        out.append(rel)
    return out
