"""Register client of the mrcnic CSR bank, generated from ``mrcnic.regmap``.

Every name, address, field position and legal value comes from the one
register-map description, so the client, the RTL (``mrcnic.rtl.csr``) and
``docs/register-map.md`` cannot drift apart.  Values are checked *before*
anything is written: a value that does not fit its field, an unknown enum
value, an unknown register/field/table or an index beyond a table's depth
raises :class:`CsrValueError` (a ``ValueError``) naming the register and field.

Two front ends share one implementation (each operation is written once as a
generator of bus accesses):

* :class:`CsrClient` over a blocking :class:`~mrcnic.fw.transport.Transport`;
* :class:`AsyncCsrClient` over an :class:`~mrcnic.fw.transport.AsyncTransport`
  (cocotb: ``await client.read("NIC_DSCP")``).

Example::

    c = CsrClient(LoopbackTransport())
    c.write_field("NIC_DSCP", "data", 26)
    c.write_table("path", 3, {"ev": 0x1234, "port": 1, "state": EvState.GOOD, "weight": 1,
                              "n_carriers": 1, "seg_base": 0, "da": 0xfc00 << 112})
    c.pop_event()          # -> EvEvent(index, state, reason) or None
"""

import enum as py_enum
import functools
from typing import NamedTuple

from amaranth.lib import data

from ..regmap import REGMAP, Access, EvEventReason, RegMap, TableOp
from ..rtl.layouts import EvState

__all__ = ["CsrClient", "AsyncCsrClient", "CsrValueError", "EvEvent", "ProbeReply",
           "pack_record", "unpack_record"]


class CsrValueError(ValueError):
    """A value, name or index refused by the client before any bus access."""


class EvEvent(NamedTuple):
    """One EV event (OCP MRC 1.0): path-table ``index``, its new ``state``, the ``reason``."""
    index: int
    state: EvState
    reason: EvEventReason


class ProbeReply(NamedTuple):
    """One EV probe reply: path-table ``index`` and the round-trip time in ns."""
    index: int
    rtt_ns: int


def _int_value(value, what, shape_enum=None):
    if isinstance(value, py_enum.Enum):
        if shape_enum is not None and not isinstance(value, shape_enum):
            raise CsrValueError(f"{what}: {value!r} is not a {shape_enum.__name__}")
        value = value.value
    if isinstance(value, bool):
        return int(value)
    if not isinstance(value, int):
        raise CsrValueError(f"{what}: {value!r} is not an integer")
    return value


def pack_record(layout, record, what="record") -> int:
    """The bits of ``record`` (a dict of the layout's fields, nested dicts for nested
    structs; missing fields are 0) as an int, checking every value first."""
    if isinstance(layout, int):
        v = _int_value(record, what)
        if not 0 <= v < (1 << layout):
            raise CsrValueError(f"{what}: {v:#x} does not fit in {layout} bits")
        return v
    lay = data.Layout.cast(layout)
    if not isinstance(record, dict):
        raise CsrValueError(f"{what}: expected a dict of {', '.join(n for n, _ in lay)}, "
                            f"not {type(record).__name__}")
    names = {n for n, _ in lay}
    unknown = set(record) - names
    if unknown:
        raise CsrValueError(f"{what}: unknown field(s) {', '.join(sorted(unknown))} "
                            f"(fields: {', '.join(n for n, _ in lay)})")
    bits = 0
    for name, fld in lay:
        if name not in record:
            continue
        shape, path = fld.shape, f"{what}.{name}"
        if isinstance(shape, type) and issubclass(shape, data.Struct):
            v = pack_record(shape, record[name], path)
        elif isinstance(shape, type) and issubclass(shape, py_enum.Enum):
            v = _int_value(record[name], path, shape)
            if v not in {m.value for m in shape}:
                raise CsrValueError(f"{path}: {v} is not a {shape.__name__} (one of "
                                    + ", ".join(f"{m.name}={m.value}" for m in shape) + ")")
        else:
            v = _int_value(record[name], path)
            if not 0 <= v < (1 << fld.width):
                raise CsrValueError(f"{path}: {v:#x} does not fit in {fld.width} bits")
        bits |= v << fld.offset
    return bits


def unpack_record(layout, bits: int):
    """Inverse of :func:`pack_record`: a dict of ints (nested dicts), or the int itself."""
    if isinstance(layout, int):
        return bits & ((1 << layout) - 1)
    out = {}
    for name, fld in data.Layout.cast(layout):
        v = (bits >> fld.offset) & ((1 << fld.width) - 1)
        shape = fld.shape
        out[name] = (unpack_record(shape, v) if isinstance(shape, type)
                     and issubclass(shape, data.Struct) else v)
    return out


class _Ops:
    """The operations, each a generator yielding ``("r", addr)`` / ``("w", addr, value)``."""

    def __init__(self, transport, regmap: RegMap = REGMAP):
        self.transport, self.regmap = transport, regmap

    # -- helpers (no bus access) --------------------------------------------------------
    def reg(self, name: str):
        """The :class:`~mrcnic.regmap.Register` called ``name`` (``CsrValueError`` if none)."""
        try:
            return self.regmap.register(name)
        except KeyError as e:
            raise CsrValueError(e.args[0]) from None

    def addr(self, name: str) -> int:
        """Byte address of register ``name``."""
        return self.reg(name).offset

    def encode(self, name: str, fields: dict) -> int:
        """Register value with ``fields`` ({field: int or enum}), every value checked."""
        r = self.reg(name)
        value = 0
        for fname, v in fields.items():
            try:
                f = r.field(fname)
            except KeyError as e:
                raise CsrValueError(e.args[0]) from None
            v = _int_value(v, f"{name}.{fname}", f.enum)
            if not f.legal(v):
                raise CsrValueError(f"{name}.{fname}: {v} is not allowed ({f.describe_legal()})")
            value |= v << f.lsb
        return value

    def decode(self, name: str, value: int) -> dict:
        """{field: int} of a value of register ``name``."""
        return {f.name: (value >> f.lsb) & ((1 << f.width) - 1) for f in self.reg(name).fields}

    def _writable(self, r):
        if r.access is Access.RO:
            raise CsrValueError(f"{r.name} is read only ({r.access.value})")

    # -- generator operations -----------------------------------------------------------
    def _read(self, name):
        return (yield ("r", self.addr(name)))

    def _write(self, name, value):
        r = self.reg(name)
        self._writable(r)
        value = _int_value(value, name)
        if not 0 <= value < (1 << 32):
            raise CsrValueError(f"{name}: {value:#x} is not a 32-bit value")
        if value & ~r.mask:
            raise CsrValueError(f"{name}: {value:#x} sets bits outside its fields (mask {r.mask:#x})")
        if r.access is not Access.W1C:
            self.encode(name, self.decode(name, value))       # checks enums / ranges
        yield ("w", r.offset, value)

    def _read_fields(self, name):
        return self.decode(name, (yield ("r", self.addr(name))))

    def _read_field(self, name, field):
        r = self.reg(name)
        try:
            f = r.field(field)
        except KeyError as e:
            raise CsrValueError(e.args[0]) from None
        return ((yield ("r", r.offset)) >> f.lsb) & ((1 << f.width) - 1)

    def _write_fields(self, name, **fields):
        """Set ``fields``; RW registers keep their other fields (read-modify-write)."""
        r = self.reg(name)
        self._writable(r)
        new = self.encode(name, fields)
        mask = sum(r.field(n).mask for n in fields)
        old = 0
        if r.access is Access.RW and mask != r.mask:
            old = yield ("r", r.offset)
        yield ("w", r.offset, (old & ~mask) | new)

    def _write_field(self, name, field, value):
        yield from self._write_fields(name, **{field: value})

    def _table(self, table, index):
        try:
            t = self.regmap.table(table)
        except KeyError as e:
            raise CsrValueError(e.args[0]) from None
        index = _int_value(index, f"{t.name} index")
        if not 0 <= index < t.depth:
            raise CsrValueError(f"{t.name} index {index} out of range 0..{t.depth - 1}")
        return t, index

    def _write_table(self, table, index, record):
        t, index = self._table(table, index)
        if not t.writable:
            raise CsrValueError(f"table {t.name} is read only")
        bits = pack_record(t.layout, record, t.name)
        yield ("w", self.addr("TBL_SELECT"), t.id.value)
        yield ("w", self.addr("TBL_INDEX"), index)
        for i in range(t.words):
            yield ("w", self.addr(f"TBL_DATA{i}"), (bits >> (32 * i)) & 0xFFFFFFFF)
        yield ("w", self.addr("TBL_CMD"), TableOp.WRITE.value)

    def _read_table(self, table, index):
        t, index = self._table(table, index)
        yield ("w", self.addr("TBL_SELECT"), t.id.value)
        yield ("w", self.addr("TBL_INDEX"), index)
        yield ("w", self.addr("TBL_CMD"), TableOp.READ.value)
        bits = 0
        addrs = [self.addr(f"TBL_DATA{i}") for i in range(t.words)]
        if addrs == [addrs[0] + 4 * i for i in range(t.words)]:
            # consecutive words: one multi-word read where the transport has one
            words = yield ("rn", addrs[0], t.words)
        else:
            words = []
            for a in addrs:
                words.append((yield ("r", a)))
        for i, w in enumerate(words):
            bits |= w << (32 * i)
        return unpack_record(t.layout, bits)

    def _pop_event(self):
        """Pop the head EV event; None when the queue is empty."""
        f = self.decode("EV_EVENT", (yield ("r", self.addr("EV_EVENT"))))
        if not f["valid"]:
            return None
        return EvEvent(f["index"], EvState(f["state"]), EvEventReason(f["reason"]))

    def _set_ev_state(self, index, state):
        yield from self._write_fields("EV_STATE_SET", index=index, state=state)

    def _set_ev_weight(self, index, weight):
        yield from self._write_fields("EV_WEIGHT_SET", index=index, weight=weight)

    def _probe(self, index, qp=0):
        """EV probe on entry ``index``; ``qp`` = the QP whose EV profile holds it
        (its peer answers the probe)."""
        yield from self._write_fields("EV_PROBE_REQ", index=index, qp=qp)

    def _pop_probe_reply(self):
        """Pop the head probe reply; None when there is none."""
        st = self.decode("EV_PROBE_STATUS", (yield ("r", self.addr("EV_PROBE_STATUS"))))
        if not st["valid"]:
            return None
        return ProbeReply(st["index"], (yield ("r", self.addr("EV_PROBE_RTT"))))

    def _identity(self):
        """{register: value} of the ID block (magic checked)."""
        out = {}
        for r in next(b for b in self.regmap.blocks if b.name == "ID").registers:
            out[r.name] = yield ("r", r.offset)
        if out.get("ID_MAGIC") != self.regmap["ID_MAGIC"].reset:
            raise CsrValueError(f"no mrcnic CSR bank: ID_MAGIC reads {out.get('ID_MAGIC', 0):#x}")
        return out


_OPS = ("read", "write", "read_fields", "read_field", "write_fields", "write_field",
        "write_table", "read_table", "pop_event", "set_ev_state", "set_ev_weight", "probe",
        "pop_probe_reply", "identity")


def _sync(gen_fn):
    @functools.wraps(gen_fn)
    def method(self, *args, **kwargs):
        gen, result = gen_fn(self, *args, **kwargs), None
        try:
            while True:
                req = gen.send(result)
                if req[0] == "r":
                    result = self.transport.read32(req[1])
                elif req[0] == "rn":            # consecutive words: a burst if available
                    burst = getattr(self.transport, "read_burst", None)
                    result = (burst(req[1], req[2]) if burst is not None else
                              [self.transport.read32(req[1] + 4 * k) for k in range(req[2])])
                else:
                    self.transport.write32(req[1], req[2])
                    result = None
        except StopIteration as stop:
            return stop.value
    method.__name__ = gen_fn.__name__.lstrip("_")
    return method


def _async(gen_fn):
    @functools.wraps(gen_fn)
    async def method(self, *args, **kwargs):
        gen, result = gen_fn(self, *args, **kwargs), None
        try:
            while True:
                req = gen.send(result)
                if req[0] == "r":
                    result = await self.transport.read32(req[1])
                elif req[0] == "rn":
                    result = [await self.transport.read32(req[1] + 4 * k) for k in range(req[2])]
                else:
                    await self.transport.write32(req[1], req[2])
                    result = None
        except StopIteration as stop:
            return stop.value
    method.__name__ = gen_fn.__name__.lstrip("_")
    return method


class CsrClient(_Ops):
    """Named access to the CSR bank over a blocking transport.

    Methods: ``read(name)``, ``write(name, value)``, ``read_fields(name)``,
    ``read_field(name, field)``, ``write_fields(name, **fields)``,
    ``write_field(name, field, value)`` (read-modify-write on RW registers),
    ``write_table(table, index, record)``, ``read_table(table, index)``,
    ``pop_event()``, ``set_ev_state(index, state)``, ``set_ev_weight(index,
    weight)``, ``probe(index, qp=0)``, ``pop_probe_reply()``, ``identity()``.
    Bus errors raise :class:`~mrcnic.fw.transport.TransportError`.
    """


class AsyncCsrClient(_Ops):
    """:class:`CsrClient` with coroutine methods, over an async transport (cocotb)."""


for _name in _OPS:
    setattr(CsrClient, _name, _sync(getattr(_Ops, "_" + _name)))
    setattr(AsyncCsrClient, _name, _async(getattr(_Ops, "_" + _name)))
del _name
