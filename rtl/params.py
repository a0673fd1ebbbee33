"""NicParams: the NIC's global parameters, checked once, and the shared checks every block uses.

One :class:`NicParams` describes a NIC build: planes (``ports``), QP contexts
(``qps``), path-table entries (``paths``), the per-QP PSN window (``window``),
the datapath width, the core clock, the plane guard, the receive parser
arrangement and the memory regions of the register map.  It is validated once,
in ``__post_init__``, with messages that name the parameter, the value given and
what is allowed; the index widths follow from it (:attr:`NicParams.path_bits`,
:attr:`NicParams.qp_bits`, ...).

:class:`~mrcnic.rtl.csr_nic.CsrNic` and :class:`~mrcnic.rtl.nic.MRCNic` build
one from their keyword arguments (or take ``params=NicParams(...)``) and hand
it to the blocks they build.  The blocks keep their own keyword arguments for
standalone use (their tests build them directly); whatever the source, their
values are checked by the helpers here (:func:`check_ports`, :func:`check_qps`,
:func:`check_paths`, :func:`check_window`, ...), so a rule is the same in every
block.  :func:`param` picks a block's value of one global parameter from a
``NicParams`` or from the block's keyword argument.

Units: ``window`` in PSNs (packets), ``data_width`` in bits, ``clk_ns`` in ns,
``clock_mhz`` in MHz, ``plane_guard`` in ACK timeouts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .layouts import MAX_PATHS, MAX_PORTS, MAX_QPS

__all__ = [
    "NicParams", "param",
    "MAX_PORTS", "MAX_QPS", "MAX_PATHS", "MIN_PATHS", "MIN_WINDOW", "MAX_WINDOW", "DATA_WIDTH",
    "MAX_REGIONS", "CORE_REGIONS",
    "check_int", "check_range", "check_pow2", "check_ports", "check_port", "check_qps",
    "check_paths", "check_window", "check_data_width", "check_clk_ns", "check_clock_mhz",
    "check_plane_guard", "check_regions", "check_bool",
]

MIN_PATHS = 16          #: smallest path table (entries): the path table's and spray's minimum
MIN_WINDOW = 64         #: smallest PSN window (PSNs): one 64-bit SACK bitmap
MAX_WINDOW = 4096       #: largest PSN window (PSNs)
DATA_WIDTH = 64         #: the datapath width (bits): AXI-Stream planes, frame beats
MAX_REGIONS = 16        #: memory regions the register map can describe (``ID_MAX_REGIONS``)
CORE_REGIONS = 4        #: memory regions the core's receive parsers hold today
MAX_CLK_NS = 1000       #: slowest core clock period (ns)
MAX_CLOCK_MHZ = 1023    #: fastest core clock ``ID_CLOCK_MHZ`` can report (MHz)
MAX_PLANE_GUARD = 15    #: largest plane-guard threshold (its per-plane counters are 4-bit)


# ---- the shared checks -----------------------------------------------------------------------
def check_int(name: str, value) -> int:
    """``value`` must be an ``int`` (not a ``bool``, a float or a string)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    return value


def check_bool(name: str, value) -> bool:
    """``value`` must be a ``bool``."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, not {value!r}")
    return value


def check_range(name: str, value, lo: int, hi: int, unit: str = "") -> int:
    """``value`` must be an integer in ``lo..hi``; ``unit`` (e.g. ``"planes"``) is named in
    the message."""
    check_int(name, value)
    if not lo <= value <= hi:
        what = f" ({unit})" if unit else ""
        raise ValueError(f"{name} must be {lo}..{hi}{what}, not {value!r}")
    return value


def check_pow2(name: str, value, lo: int, hi: int, unit: str = "") -> int:
    """``value`` must be a power of two in ``lo..hi`` (both powers of two)."""
    check_int(name, value)
    if not lo <= value <= hi or value & (value - 1):
        what = f" ({unit})" if unit else ""
        raise ValueError(f"{name} must be a power of two in {lo}..{hi}{what}, not {value!r}")
    return value


def check_ports(ports, name: str = "ports") -> int:
    """Planes of a NIC or a block: 1..:data:`MAX_PORTS` (the port field is 3 bits)."""
    return check_range(name, ports, 1, MAX_PORTS, "planes")


def check_port(port, name: str = "port") -> int:
    """One plane's number: 0..:data:`MAX_PORTS` - 1."""
    return check_range(name, port, 0, MAX_PORTS - 1, "plane number")


def check_qps(qps, name: str = "qps") -> int:
    """QP contexts: 1..:data:`MAX_QPS` (the local QP index is 3 bits)."""
    return check_range(name, qps, 1, MAX_QPS, "QP contexts")


def check_paths(paths, name: str = "paths", minimum: int = MIN_PATHS) -> int:
    """Path-table entries: a power of two in :data:`MIN_PATHS`..:data:`MAX_PATHS`.

    ``minimum`` (a power of two) is lowered only by blocks that hold no path table and
    whose logic works for fewer entries (sender reliability, the plane guard: their
    formal proofs use 4); a NIC always has 16 or more.
    """
    return check_pow2(name, paths, minimum, MAX_PATHS, "path-table entries")


def check_window(window, name: str = "window") -> int:
    """The per-QP PSN window (receive SACK window, sender slots): a power of two in
    :data:`MIN_WINDOW`..:data:`MAX_WINDOW` PSNs."""
    return check_pow2(name, window, MIN_WINDOW, MAX_WINDOW, "PSNs")


def check_data_width(data_width, name: str = "data_width") -> int:
    """The datapath width: :data:`DATA_WIDTH` bits only (the datapath is 64-bit today)."""
    check_int(name, data_width)
    if data_width != DATA_WIDTH:
        raise ValueError(f"{name} must be {DATA_WIDTH} (bits), not {data_width!r}: the datapath "
                         f"(frame beats, header positions, CRC lanes) is {DATA_WIDTH}-bit today")
    return data_width


def check_clk_ns(clk_ns, name: str = "clk_ns") -> int:
    """The core clock's period: 1..1000 ns (8 at 125 MHz, 16 at 62.5 MHz)."""
    return check_range(name, clk_ns, 1, MAX_CLK_NS, "ns, the core clock period")


def check_clock_mhz(clock_mhz, name: str = "clock_mhz") -> int:
    """The core clock ``ID_CLOCK_MHZ`` reports: 1..1023 MHz (a 10-bit field)."""
    return check_range(name, clock_mhz, 1, MAX_CLOCK_MHZ, "MHz")


def check_plane_guard(threshold, name: str = "plane_guard") -> int:
    """The plane guard's threshold: 0 (off) or 2..15 ACK timeouts."""
    check_int(name, threshold)
    if threshold != 0 and not 2 <= threshold <= MAX_PLANE_GUARD:
        raise ValueError(f"{name} must be 0 (off) or 2..{MAX_PLANE_GUARD} (ACK timeouts), "
                         f"not {threshold!r}")
    return threshold


def check_regions(regions, name: str = "regions") -> int:
    """Registered memory regions: 1..:data:`MAX_REGIONS`."""
    return check_range(name, regions, 1, MAX_REGIONS, "memory regions")


def _bits(n: int) -> int:
    """Bits of an index of ``n`` items (at least 1)."""
    return max(1, (n - 1).bit_length())


# ---- the parameter set -----------------------------------------------------------------------
@dataclass(frozen=True)
class NicParams:
    """The global parameters of one NIC build, validated on construction.

    Parameters
    ----------
    ports : int
        Planes, 1..8: one 64-bit AXI-Stream input and output each.
    qps : int
        QP contexts on both sides, 1..8.
    paths : int
        Path-table entries (EVs), a power of two in 16..256; one table (and its copies)
        and one spray scheduler serve the data and the ACK reverse paths.
    window : int
        PSNs per QP of the receive SACK window and of the sender-reliability slots,
        a power of two in 64..4096.
    data_width : int
        Datapath width in bits: 64 (the only width the datapath has today).
    clk_ns : int
        Core clock period in ns, 1..1000 (sender reliability's RTT and timeout clock).
    clock_mhz : int
        Core clock in MHz reported in ``ID_CLOCK_MHZ``, 1..1023 (CsrNic's register map).
    plane_guard : int
        ACK timeouts that make the NIC avoid a whole plane: 0 (off) or 2..15.
    shared_parser : bool
        One receive parser for all planes (board tops with 1 Gb/s ports).
    regions : int
        Registered memory regions of the register map (``mr`` table, ``ID_MAX_REGIONS``),
        1..16.  The core's receive parsers hold :data:`CORE_REGIONS` (4) today.

    The defaults are :class:`~mrcnic.rtl.nic.MRCNic`'s.
    """

    ports: int = 4
    qps: int = 2
    paths: int = MAX_PATHS
    window: int = 256
    data_width: int = DATA_WIDTH
    clk_ns: int = 8
    clock_mhz: int = 125
    plane_guard: int = 3
    shared_parser: bool = False
    regions: int = CORE_REGIONS

    def __post_init__(self):
        check_ports(self.ports)
        check_qps(self.qps)
        check_paths(self.paths)
        check_window(self.window)
        check_data_width(self.data_width)
        check_clk_ns(self.clk_ns)
        check_clock_mhz(self.clock_mhz)
        check_plane_guard(self.plane_guard)
        check_bool("shared_parser", self.shared_parser)
        check_regions(self.regions)

    # ---- derived widths (bits) ----
    @property
    def port_bits(self) -> int:
        """Bits of a plane number (at least 1)."""
        return _bits(self.ports)

    @property
    def qp_bits(self) -> int:
        """Bits of a local QP index (at least 1)."""
        return _bits(self.qps)

    @property
    def path_bits(self) -> int:
        """Bits of a path-table index: log2(paths)."""
        return self.paths.bit_length() - 1

    @property
    def window_bits(self) -> int:
        """Bits of a PSN offset within the window: log2(window)."""
        return self.window.bit_length() - 1

    @property
    def region_bits(self) -> int:
        """Bits of a memory-region index of the register map (at least 1)."""
        return _bits(self.regions)

    @property
    def data_bytes(self) -> int:
        """Bytes per datapath beat (the AXI-Stream ``tkeep`` width)."""
        return self.data_width // 8

    @property
    def shared(self) -> bool:
        """The receive side really shares one parser (``shared_parser`` and more than one plane)."""
        return self.shared_parser and self.ports > 1

    # ---- construction from keyword arguments ----
    @classmethod
    def of(cls, params: "NicParams | None" = None, *, defaults: "dict | None" = None,
           **given) -> "NicParams":
        """The parameter set of a NIC built with ``params`` or with keyword arguments.

        ``given`` holds the keyword arguments (``None`` = not given).  Without ``params``
        the result is ``NicParams(**defaults, **given)``; with it, given values must agree
        with ``params`` (a contradiction is an error) and ``params`` is returned.
        """
        unknown = set(given) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown NIC parameters: {', '.join(sorted(unknown))}")
        given = {k: v for k, v in given.items() if v is not None}
        if params is None:
            return cls(**{**(defaults or {}), **given})
        if not isinstance(params, cls):
            raise ValueError(f"params must be a NicParams, not {type(params).__name__}")
        for name, value in given.items():
            param(params, name, value, None)
        return params

    def replace(self, **changes) -> "NicParams":
        """A copy with ``changes`` (validated again)."""
        from dataclasses import replace
        return replace(self, **changes)


def param(params: "NicParams | None", name: str, value, default):
    """A block's value of the global parameter ``name``: ``params.<name>`` when a
    :class:`NicParams` is given (``value`` must then be ``None`` or equal), else ``value``
    (``None``: ``default``).  The caller checks it with the shared helper."""
    if params is None:
        return default if value is None else value
    if not isinstance(params, NicParams):
        raise ValueError(f"params must be a NicParams, not {type(params).__name__}")
    ours = getattr(params, name)
    if value is not None and (type(value) is not type(ours) or value != ours):
        # the same type too: 1.0, True or numpy ints equal an int but are refused alone
        raise ValueError(f"{name}={value!r} contradicts params.{name}={ours!r}: "
                         f"give it once (the keyword or params)")
    return ours
