"""The mrcnic control-plane register map, described once.

Everything that talks to the NIC's control plane is generated from this one
description: the RTL CSR decoder (:class:`mrcnic.rtl.csr.CsrBank`), the
firmware client (:class:`mrcnic.fw.client.CsrClient`) and the reference page
``docs/register-map.md`` (``python -m mrcnic.regmap > docs/register-map.md``).

Bus: AXI4-Lite (ARM IHI 0022E, B1), 32-bit data, 16-bit byte addresses,
registers on 4-byte boundaries (address bits 1:0 are ignored).  Unknown
addresses answer SLVERR; writes to read-only registers answer OKAY, change
nothing and are counted in ``RO_WRITE_ATTEMPTS``.

Names follow the OCP MRC 1.0 controller API (``mrc_ctl.h``): EV format
profiles (``EvMode``), EV profiles (path-table ranges), EV states
GOOD / ASSUMED_BAD / DENIED, EV events, EV probes, CC profiles (NSCC), port
admin state.

Access types (:class:`Access`)
------------------------------
RW   read/write storage; the CSR bank drives one output port per field.
RO   read-only; the value comes from an input port per field (or is a build
     constant, ``const``, or is kept by the bank itself, ``internal``).
WO   write-only storage (reads return 0).
W1C  status bits set by hardware (input pulse ``<port>_set``), cleared by
     writing 1.
CMD  command: a write stores the fields and pulses ``<reg>_stb`` for one
     cycle; reads return 0.

Tables (:class:`Table`) are reached through one indirect window so that
256 x 184-bit path entries stay in block RAM: ``TBL_SELECT`` (which table),
``TBL_INDEX`` (entry), ``TBL_DATA0..n`` (the record's bits, ``TBL_DATA0`` =
bits 31:0 of ``layout.const(record).as_value()``) and ``TBL_CMD`` (WRITE or
READ).
"""

import enum as py_enum
import sys
from dataclasses import dataclass, field as dc_field

from amaranth.lib import data, enum

from .rtl.layouts import (MAX_CARRIERS, MAX_PATHS, MAX_QPS, EvCounters,
                          EvEventReason, EvState,
                          MemRegion, PathEntry, QpContext, RxQpContext)
from .rtl.nscc import NsccConfig
from .rtl.params import (check_clock_mhz, check_paths, check_ports, check_qps, check_regions,
                         check_window)
from .rtl.reliability import RelQpParams

__all__ = [
    "Access", "Field", "Register", "Block", "Table", "RegMap", "RegMapError",
    "TableId", "TableOp", "EvEventReason", "EvCounters", "DROP_REASONS",
    "MAGIC", "VERSION", "SEG_DEPTH", "build_regmap", "REGMAP", "generate_markdown",
]

MAGIC = 0x4D52434E        #: ``ID_MAGIC``: ASCII "MRCN"
VERSION = (1, 0)          #: register-map version (major, minor) in ``ID_VERSION``
SEG_DEPTH = 256           #: 128-bit words of SRH segment memory (``PathEntry.seg_base`` is 8 bits)

try:                                   # the RX parser's drop counters, if the block exists
    from .rtl.rx_parser import DropReason as _DropReason
    DROP_REASONS = tuple(r.name for r in sorted(_DropReason, key=int))
except ImportError:                    # pragma: no cover - documented fallback list
    DROP_REASONS = ("FRAMING", "ETHERTYPE", "RUNT", "VERSION", "IPV6_LENGTH", "NEXT_HEADER",
                    "SRH", "DA", "UDP_PORT", "UDP_LENGTH", "OPCODE", "BTH", "QPN", "RKEY",
                    "DMALEN", "ICRC")


class RegMapError(ValueError):
    """The register-map description is inconsistent (overlap, field outside 32 bits, ...)."""


class Access(py_enum.Enum):
    """How software may access a register (see the module notes)."""
    RW = "RW"
    RO = "RO"
    WO = "WO"
    W1C = "W1C"
    CMD = "CMD"


class TableId(enum.Enum, shape=3):
    """``TBL_SELECT`` values: the tables behind the indirect window."""
    PATH = 0     #: path table, ``PathEntry`` (EV profiles)
    SEG = 1      #: SRH segment memory, 128-bit Segment List words
    TXQP = 2     #: transmit QP contexts, ``QpContext``
    RXQP = 3     #: receive QP contexts, ``RxQpContext``
    MR = 4       #: registered memory regions, ``MemRegion``
    CC = 5       #: CC profiles (NSCC parameters), ``rtl/nscc.py`` ``NsccConfig``
    EVCNT = 6    #: per-EV counters, ``EvCounters`` (read only)
    REL = 7      #: per-QP sender reliability, ``rtl/reliability.py`` ``RelQpParams``


class TableOp(enum.Enum, shape=2):
    """``TBL_CMD.op`` values."""
    NOP = 0
    WRITE = 1    #: store ``TBL_DATA*`` at ``TBL_INDEX`` of the selected table
    READ = 2     #: load the entry at ``TBL_INDEX`` into ``TBL_DATA*``


@dataclass(frozen=True)
class Field:
    """A bit field of a register: bits ``lsb + width - 1 .. lsb``.

    ``enum`` (an Amaranth/Python enum class) or ``values`` (a ``range``)
    restrict the legal values; the CSR bank refuses (SLVERR) and the client
    rejects (``ValueError``) anything else.
    """
    name: str
    lsb: int
    width: int
    reset: int = 0
    doc: str = ""
    enum: type | None = None
    values: range | None = None

    @property
    def msb(self) -> int:
        return self.lsb + self.width - 1

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    def legal(self, value: int) -> bool:
        """Whether ``value`` (an int) may be written to this field."""
        if not 0 <= value < (1 << self.width):
            return False
        if self.enum is not None:
            return value in {m.value for m in self.enum}
        if self.values is not None:
            return value in self.values
        return True

    def describe_legal(self) -> str:
        if self.enum is not None:
            return "one of " + ", ".join(f"{m.name}={m.value}" for m in self.enum)
        if self.values is not None:
            return f"{self.values.start}..{self.values.stop - 1}"
        return f"0..{(1 << self.width) - 1} ({self.width} bits)"


@dataclass
class Register:
    """A 32-bit register at byte ``offset``.

    ``const``: RO with the fields' ``reset`` values as contents (a build
    parameter; no port).  ``internal``: implemented inside the CSR bank (the
    table window and ``RO_WRITE_ATTEMPTS``; no port).  ``read_strobe``: the
    bank pulses ``<reg>_rd_stb`` when the register is read (pop semantics).
    """
    name: str
    offset: int
    access: Access
    fields: list
    doc: str = ""
    const: bool = False
    internal: bool = False
    read_strobe: bool = False
    block: str = ""

    @property
    def reset(self) -> int:
        return sum(f.reset << f.lsb for f in self.fields)

    @property
    def mask(self) -> int:
        return sum(f.mask for f in self.fields)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r} "
                       f"(fields: {', '.join(f.name for f in self.fields)})")

    def port_name(self, f: Field) -> str:
        """The CSR bank port of field ``f``: ``<reg>`` for a field named ``value``, else ``<reg>_<field>``."""
        base = self.name.lower()
        return base if f.name == "value" else f"{base}_{f.name}"


@dataclass
class Block:
    """A group of registers (one table in the documentation)."""
    name: str
    base: int
    doc: str
    registers: list = dc_field(default_factory=list)


@dataclass(frozen=True)
class Table:
    """A table reached through the indirect window: ``depth`` records of ``layout``
    (an Amaranth layout, or an int width for plain words)."""
    name: str
    id: TableId
    layout: object
    depth: int
    doc: str
    writable: bool = True

    @property
    def width(self) -> int:
        return self.layout if isinstance(self.layout, int) else data.Layout.cast(self.layout).size

    @property
    def words(self) -> int:
        return (self.width + 31) // 32


class RegMap:
    """The whole map: ``blocks`` of registers, the ``tables`` behind the window,
    the build ``params`` and the address width (16 bits)."""

    addr_width = 16
    data_width = 32

    def __init__(self, blocks, tables, params):
        self.blocks, self.tables, self.params = list(blocks), list(tables), dict(params)
        self.registers = [r for b in self.blocks for r in b.registers]
        self._by_name = {r.name: r for r in self.registers}
        self._by_offset = {r.offset: r for r in self.registers}
        self._tables = {t.name: t for t in self.tables}
        self.check()

    @property
    def data_words(self) -> int:
        """Number of ``TBL_DATA*`` registers (the widest record)."""
        return max(t.words for t in self.tables)

    def __getitem__(self, name: str) -> Register:
        return self.register(name)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def register(self, name: str) -> Register:
        try:
            return self._by_name[name]
        except KeyError:
            import difflib
            near = difflib.get_close_matches(name, self._by_name, 3)
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise KeyError(f"no register {name!r}{hint}") from None

    def at(self, offset: int) -> Register | None:
        """The register at byte ``offset`` (None if unmapped)."""
        return self._by_offset.get(offset)

    def table(self, name) -> Table:
        if isinstance(name, TableId):
            name = name.name.lower()
        try:
            return self._tables[name]
        except KeyError:
            raise KeyError(f"no table {name!r} (tables: {', '.join(self._tables)})") from None

    def check(self):
        """Raise :class:`RegMapError` on overlaps, fields outside 32 bits, bad resets."""
        seen_off, seen_name = {}, set()
        for r in self.registers:
            if r.name in seen_name:
                raise RegMapError(f"register name {r.name} used twice")
            seen_name.add(r.name)
            if r.offset % 4 or not 0 <= r.offset < (1 << self.addr_width):
                raise RegMapError(f"{r.name}: offset 0x{r.offset:x} not word aligned / out of range")
            if r.offset in seen_off:
                raise RegMapError(f"{r.name} overlaps {seen_off[r.offset]} at 0x{r.offset:04x}")
            seen_off[r.offset] = r.name
            if not r.fields:
                raise RegMapError(f"{r.name}: no fields")
            used = 0
            for f in r.fields:
                if f.width < 1 or f.lsb < 0 or f.msb > 31:
                    raise RegMapError(f"{r.name}.{f.name}: bits {f.msb}:{f.lsb} outside 31:0")
                if used & f.mask:
                    raise RegMapError(f"{r.name}.{f.name}: overlaps another field")
                used |= f.mask
                if f.reset and not f.legal(f.reset):
                    raise RegMapError(f"{r.name}.{f.name}: reset {f.reset} is not legal")
            if r.const and r.access is not Access.RO:
                raise RegMapError(f"{r.name}: const registers must be RO")
            if r.read_strobe and r.access is not Access.RO:
                raise RegMapError(f"{r.name}: read_strobe only on RO registers")
        ports = [r.port_name(f) for r in self.registers if not (r.internal or r.const)
                 for f in r.fields]
        if len(ports) != len(set(ports)):
            raise RegMapError("two fields map to the same CSR bank port name")


# --------------------------------------------------------------------------
# The description
# --------------------------------------------------------------------------
def _v(width=32, reset=0, doc="", **kw):
    return [Field("value", 0, width, reset, doc, **kw)]


def build_regmap(ports: int = 4, clock_mhz: int = 125, window: int = 256, regions: int = 4,
                 paths: int = MAX_PATHS, qps: int = MAX_QPS) -> RegMap:
    """Build the register map of one NIC build.

    Parameters
    ----------
    ports : int
        Planes (NIC ports), 1..8.
    clock_mhz : int
        Core clock in MHz (reported in ``ID_CLOCK_MHZ``), 1..1023.
    window : int
        SACK window of the receiver, PSNs (``ID_WINDOW``): a power of two in 64..4096.
    regions : int
        Registered memory regions, 1..16.
    paths : int
        Path-table depth, a power of two in 16..256.
    qps : int
        QP contexts, 1..8.

    The parameters are checked by the same rules as the NIC's
    (:mod:`mrcnic.rtl.params`, :class:`~mrcnic.rtl.params.NicParams`).
    """
    check_ports(ports)
    check_clock_mhz(clock_mhz)
    check_regions(regions)
    check_paths(paths)
    check_qps(qps)
    check_window(window)
    RO, RW, CMD, W1C = Access.RO, Access.RW, Access.CMD, Access.W1C
    blocks = []

    def block(name, base, doc, regs):
        b = Block(name, base, doc)
        for i, (rname, access, fields, rdoc, kw) in enumerate(regs):
            off = kw.pop("offset", base + 4 * i)
            b.registers.append(Register(rname, off, access, fields, rdoc, block=name, **kw))
        blocks.append(b)

    tables = [
        Table("path", TableId.PATH, PathEntry, paths,
              "Path table: the EV profiles (``rtl/layouts.py`` ``PathEntry``)."),
        Table("seg", TableId.SEG, 128, SEG_DEPTH,
              "SRH segment memory: one 128-bit Segment List word per entry."),
        Table("txqp", TableId.TXQP, QpContext, qps, "Transmit QP contexts (``QpContext``)."),
        Table("rxqp", TableId.RXQP, RxQpContext, qps, "Receive QP contexts (``RxQpContext``)."),
        Table("mr", TableId.MR, MemRegion, regions, "Registered memory regions (``MemRegion``)."),
        Table("cc", TableId.CC, NsccConfig, qps,
              "CC profile of each QP: NSCC parameters (``rtl/nscc.py`` ``NsccConfig``; "
              "``nscc_config(profile)`` gives the record)."),
        Table("evcnt", TableId.EVCNT, EvCounters, paths,
              "Per-EV counters (``EvCounters``), indexed like the path table; read only.",
              writable=False),
        Table("rel", TableId.REL, RelQpParams, qps,
              "Sender reliability of each QP (``rtl/reliability.py`` ``RelQpParams``: first PSN, "
              "EV profile range, ev_min_active, ACK timeout 1.024 us x 2^t, retries, probe "
              "interval and ECN hold in cycles).  Writing it (re)configures the QP's sender "
              "reliability with it and the QP's ``cc`` entry and resets its PSN state: only "
              "while the QP is idle.  A ``cc`` write alone applies at once without a reset."),
    ]
    words = max(t.words for t in tables)

    c = dict(const=True)
    block("ID", 0x0000, "Identity and capabilities (read only; like ``mrc_ctl_query_device``).", [
        ("ID_MAGIC", RO, _v(32, MAGIC), "ASCII \"MRCN\": an mrcnic CSR bank is present.", dict(c)),
        ("ID_VERSION", RO, [Field("minor", 0, 8, VERSION[1], "minor version"),
                            Field("major", 8, 8, VERSION[0], "major version")],
         "Register-map version.", dict(c)),
        ("ID_PORTS", RO, _v(4, ports), "Planes (NIC ports).", dict(c)),
        ("ID_MAX_QPS", RO, _v(4, qps), "QP contexts.", dict(c)),
        ("ID_PATH_DEPTH", RO, _v(9, paths), "Path-table entries (EVs over all EV profiles).", dict(c)),
        ("ID_MAX_CARRIERS", RO, _v(3, MAX_CARRIERS),
         "uSID carriers per path (DA + SRH segments).", dict(c)),
        ("ID_SEG_DEPTH", RO, _v(9, SEG_DEPTH), "SRH segment-memory words.", dict(c)),
        ("ID_MAX_REGIONS", RO, _v(5, regions), "Registered memory regions.", dict(c)),
        ("ID_EV_MODES", RO, [Field("srv6", 0, 1, 1, "SRV6 EV format mode"),
                             Field("stev", 1, 1, 1, "STEV EV format mode"),
                             Field("udp", 2, 1, 1, "UDP EV format mode")],
         "Supported EV format profile modes.", dict(c)),
        ("ID_WINDOW", RO, _v(16, window), "Receive SACK window, PSNs.", dict(c)),
        ("ID_CLOCK_MHZ", RO, _v(10, clock_mhz), "Core clock, MHz.", dict(c)),
        ("ID_TABLE_WORDS", RO, _v(4, words), "Number of ``TBL_DATA*`` registers.", dict(c)),
    ])
    block("NIC", 0x0100, "NIC-wide settings (``NicGlobals`` and receive settings).", [
        ("NIC_SRC_MAC_LO", RW, _v(32), "Source MAC, bits 31:0.", {}),
        ("NIC_SRC_MAC_HI", RW, _v(16), "Source MAC, bits 47:32.", {}),
        ("NIC_SRC_IP0", RW, _v(32), "Source IPv6 address, bits 31:0.", {}),
        ("NIC_SRC_IP1", RW, _v(32), "Source IPv6 address, bits 63:32.", {}),
        ("NIC_SRC_IP2", RW, _v(32), "Source IPv6 address, bits 95:64.", {}),
        ("NIC_SRC_IP3", RW, _v(32), "Source IPv6 address, bits 127:96 (first on the wire).", {}),
        ("NIC_DSCP", RW, [Field("data", 0, 6, 0, "DSCP of data, ACK and probe frames"),
                          Field("trim", 8, 6, 0, "DSCP marking a trimmed frame")],
         "IPv6 traffic-class DSCPs (ECN bits are set by the NIC).", {}),
        ("NIC_PMTU_LOG2", RW, _v(4, 10, "RoCE path MTU = 2**value payload bytes",
                                 values=range(8, 13)),
         "Path MTU (8..12: 256..4096 bytes).", {}),
        ("NIC_USID", RW, _v(16), "This NIC's own uSID (arrival DA = block | uSID).", {}),
        ("NIC_LOCATOR", RW, _v(32), "uSID locator block (DA bits 127:96).", {}),
        ("NIC_ACK", RW, [Field("every", 0, 8, 1, "ACK after this many packets (N)"),
                         Field("timeout", 16, 16, 0, "or after this many cycles (T); 0 = never")],
         "ACK coalescing of the receiver (SACK tracker).", {}),
    ])
    regs = [("PORT_ADMIN", RW, [Field("up", 0, ports, 0,
                                      "bit p = 1: plane p administratively up")],
             "Port admin state (OCP MRC 1.0): a down plane sends nothing.", {})]
    for p in range(ports):
        regs += [(f"PORT{p}_NH_MAC_LO", RW, _v(32), f"Next-hop (leaf) MAC of port {p}, bits 31:0.",
                  dict(offset=0x0210 + 8 * p)),
                 (f"PORT{p}_NH_MAC_HI", RW, _v(16), f"Next-hop MAC of port {p}, bits 47:32.",
                  dict(offset=0x0214 + 8 * p))]
    block("PORT", 0x0200, "Ports (planes).", regs)
    it = dict(internal=True)
    regs = [
        ("TBL_SELECT", RW, [Field("table", 0, 3, 0, "table", enum=TableId)],
         "Table of the next command.", dict(it)),
        ("TBL_INDEX", RW, _v(8, 0, "entry index (< the table's depth)"),
         "Entry of the next command.", dict(it)),
        ("TBL_CMD", CMD, [Field("op", 0, 2, 0, "operation", enum=TableOp)],
         "Write: run the command.  SLVERR (nothing done) if the index is >= the table's depth "
         "or a read-only table is written.  READ answers after the entry is in ``TBL_DATA*``.",
         dict(it)),
    ]
    for i in range(words):
        regs.append((f"TBL_DATA{i}", RW, _v(32), f"Record bits {32 * i + 31}:{32 * i}.",
                     dict(internal=True, offset=0x0320 + 4 * i)))
    block("TBL", 0x0300, "Indirect table window (see the tables below).", regs)
    block("EV", 0x0400, "EV control: state and weight updates, EV events, EV probes.", [
        ("EV_STATE_SET", CMD, [Field("index", 0, 8, 0, "path-table entry"),
                               Field("state", 8, 2, 0, "new state", enum=EvState)],
         "Set an entry's EV state (controller: DENIED / GOOD).", {}),
        ("EV_WEIGHT_SET", CMD, [Field("index", 0, 8, 0, "path-table entry"),
                                Field("weight", 8, 8, 0, "decisions per round (0 = none)")],
         "Set an entry's weight.", {}),
        ("EV_EVENT", RO, [Field("index", 0, 8, 0, "path-table entry"),
                          Field("state", 8, 2, 0, "its new state", enum=EvState),
                          Field("reason", 12, 3, 0, "why", enum=EvEventReason),
                          Field("valid", 31, 1, 0, "an event is present")],
         "Head of the EV event queue; reading it pops the event (``ev_event_rd_stb``).",
         dict(read_strobe=True)),
        ("EV_EVENT_COUNT", RO, _v(16), "Events waiting in the queue.", {}),
        ("EV_PROBE_REQ", CMD, [Field("index", 0, 8, 0, "path-table entry to probe"),
                               Field("qp", 8, 3, 0, "QP whose EV profile holds the entry",
                                     values=range(qps))],
         "Send an EV probe on the entry's {EV, port}; its reply (if the path works) appears "
         "in ``EV_PROBE_STATUS``.  One probe is tracked at a time.", {}),
        ("EV_PROBE_STATUS", RO, [Field("index", 0, 8, 0, "entry the reply belongs to"),
                                 Field("valid", 31, 1, 0, "a probe reply is present")],
         "Head of the probe-reply queue; read it first, then ``EV_PROBE_RTT``.", {}),
        ("EV_PROBE_RTT", RO, _v(32, 0, "round-trip time, ns"),
         "RTT of the head probe reply; reading it pops the reply (``ev_probe_rtt_rd_stb``).",
         dict(read_strobe=True)),
    ])
    regs = [(f"RX_DROP_{r}", RO, _v(32), f"Frames dropped by the RX parser: {r}.", {})
            for r in DROP_REASONS]
    rx = [("RX_ACCEPTED",
           "packets of every kind (data, ACK, probe) that passed the parsers' checks"),
          ("RX_DUPLICATES", "duplicate packets"),
          ("RX_OUT_OF_WINDOW", "packets beyond the SACK window"),
          ("RX_COMPLETIONS", "messages completed"), ("RX_ACKS", "ACK/SACK frames requested"),
          ("RX_NACKS", "trim NACKs requested")]
    regs += [(n, RO, _v(32), f"Receive: {d}.", dict(offset=0x0540 + 4 * i))
             for i, (n, d) in enumerate(rx)]
    tx = [("TX_WR_REFUSED", "work requests refused (bad QP, length, alignment, full)"),
          ("TX_RD_ERRORS", "payload AXI4 read errors"), ("TX_PACKETS", "data packets sent"),
          ("TX_RETRANSMITS", "data packets retransmitted")]
    regs += [(n, RO, _v(32), f"Transmit: {d}.", dict(offset=0x0580 + 4 * i))
             for i, (n, d) in enumerate(tx)]
    block("CNT", 0x0500, "Counters (32-bit, wrap around; per-EV counters are the ``evcnt`` table).",
          regs)
    irq = [Field("ev_event", 0, 1, 0, "an EV event was queued"),
           Field("probe_reply", 1, 1, 0, "a probe reply was queued"),
           Field("rx_drop", 2, 1, 0, "the RX parser dropped a frame"),
           Field("wr_refused", 3, 1, 0, "a work request was refused")]
    block("IRQ", 0x0600, "Interrupts and bus status.", [
        ("IRQ_STATUS", W1C, irq, "Interrupt status; write 1 to clear.", {}),
        ("IRQ_ENABLE", RW, [Field(f.name, f.lsb, 1, 0, "enable: " + f.doc) for f in irq],
         "Interrupt enable; ``irq`` = OR(status & enable).", {}),
        ("RO_WRITE_ATTEMPTS", RO, _v(32), "Writes to read-only registers (ignored).", dict(it)),
    ])
    params = dict(ports=ports, clock_mhz=clock_mhz, window=window, regions=regions, paths=paths,
                  qps=qps)
    return RegMap(blocks, tables, params)


REGMAP = build_regmap()     #: the default build (4 ports, 125 MHz): docs/register-map.md


# --------------------------------------------------------------------------
# Documentation
# --------------------------------------------------------------------------
def _bits(f) -> str:
    return f"{f.msb}" if f.width == 1 else f"{f.msb}:{f.lsb}"


def _legal(f) -> str:
    if f.enum is not None:
        return " (" + ", ".join(f"{m.name}={m.value}" for m in f.enum) + ")"
    if f.values is not None:
        return f" ({f.values.start}..{f.values.stop - 1})"
    return ""


def _layout_rows(layout, base=0, prefix=""):
    lay = data.Layout.cast(layout)
    for name, fld in lay:
        shape = fld.shape
        if isinstance(shape, type) and issubclass(shape, data.Struct):
            yield from _layout_rows(shape, base + fld.offset, prefix + name + ".")
            continue
        legal = ""
        if isinstance(shape, type) and issubclass(shape, py_enum.Enum):
            legal = ", ".join(f"{m.name}={m.value}" for m in shape)
        lo = base + fld.offset
        yield f"| {prefix}{name} | {lo + fld.width - 1}:{lo} | {fld.width} | {legal} |"


def generate_markdown(regmap: RegMap = REGMAP) -> str:
    """The register-map reference page (``docs/register-map.md``) of ``regmap``."""
    p = regmap.params
    out = [
        "# mrcnic register map",
        "",
        "<!-- GENERATED by `python -m mrcnic.regmap > docs/register-map.md` from mrcnic/regmap.py;"
        " do not edit. -->",
        "",
        f"Default build: {p['ports']} ports, {p['clock_mhz']} MHz, path table {p['paths']} entries,"
        f" {p['qps']} QPs, {p['regions']} memory regions, SACK window {p['window']} PSNs.",
        "",
        "AXI4-Lite subordinate (`s_axil`), 32-bit data, 16-bit byte addresses, one transaction at a "
        "time; address bits 1:0 are ignored.  Unknown addresses answer **SLVERR** (resp = 2) and "
        "change nothing.  Writes to read-only (RO) registers answer OKAY, change nothing and are "
        "counted in `RO_WRITE_ATTEMPTS`.  A write of an illegal value to a field with listed values "
        "answers SLVERR and changes nothing.  Byte strobes are honoured.",
        "",
        "Access: **RW** read/write; **RO** read only; **WO** write only (reads 0); **W1C** status, "
        "write 1 to clear; **CMD** command: a write acts (one-cycle strobe), reads return 0.",
        "",
        "CSR bank ports (`mrcnic.rtl.csr.CsrBank`): each field of an RW/WO/CMD register is an output "
        "`<reg>_<field>` (just `<reg>` for a field named `value`, lower case); each field of an RO "
        "register an input of the same name; a CMD register also has the output strobe `<reg>_stb`; "
        "an RO register marked *pop* has the output `<reg>_rd_stb`, pulsed when it is read; a W1C field "
        "has the input pulse `<reg>_<field>_set` and its state on the output `<reg>_<field>`.  "
        "*const* registers are build parameters, *internal* ones live in the bank (no ports).",
        "",
    ]
    for b in regmap.blocks:
        out += [f"## {b.name}: {b.doc}", "",
                "| offset | register | access | bits | field | reset | description |",
                "|---|---|---|---|---|---|---|"]
        for r in b.registers:
            notes = [n for n, on in (("const", r.const), ("internal", r.internal),
                                     ("pop", r.read_strobe)) if on]
            acc = r.access.value + (" (" + ", ".join(notes) + ")" if notes else "")
            for i, f in enumerate(r.fields):
                head = (f"| 0x{r.offset:04X} | {r.name} | {acc} " if i == 0 else "| | | ")
                rdoc = r.doc if i == 0 else ""
                fdoc = f.doc + _legal(f)
                desc = " — ".join(s for s in (rdoc, fdoc) if s).replace("|", "\\|")
                out.append(f"{head}| {_bits(f)} | {f.name} | 0x{f.reset:X} | {desc} |")
        out.append("")
    out += [
        "## Tables",
        "",
        "Indirect access (records never become flip-flops): write `TBL_SELECT`, `TBL_INDEX`, then "
        "either `TBL_DATA0..` and `TBL_CMD` = WRITE (1), or `TBL_CMD` = READ (2) and read "
        "`TBL_DATA0..`.  A record is packed as its Amaranth layout's bits "
        "(`Layout.const(record).as_value()`); `TBL_DATA0` holds bits 31:0, unused high bits are 0.",
        "",
        "Ports per table `<t>` (writable tables have the write ones): `<t>_addr` (out, 8), "
        "`<t>_w_data` (out, record), `<t>_w_en` (out, one-cycle strobe), `<t>_rd_en` (out, one-cycle "
        "strobe), `<t>_rd_data` (in, record; sampled `table_read_latency` cycles after `<t>_rd_en`, "
        "default 1 = a synchronous memory read port).",
        "",
        "| TBL_SELECT | table | depth | record bits | DATA words | description |",
        "|---|---|---|---|---|---|",
    ]
    for t in regmap.tables:
        rec = "128-bit word" if isinstance(t.layout, int) else f"`{t.layout.__name__}` {t.width}"
        out.append(f"| {t.id.value} | {t.name} | {t.depth} | {rec} | {t.words} | {t.doc} |")
    out.append("")
    for t in regmap.tables:
        if isinstance(t.layout, int):
            continue
        out += [f"### {t.layout.__name__} ({t.name}, {t.width} bits)", "",
                "| field | bits | width | values |", "|---|---|---|---|"]
        out += list(_layout_rows(t.layout))
        out.append("")
    return "\n".join(out).replace("``", "`") + "\n"


if __name__ == "__main__":
    sys.stdout.write(generate_markdown())
