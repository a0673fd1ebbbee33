"""Transports between the firmware and the CSR bank: 32-bit reads and writes.

The register client (:mod:`mrcnic.fw.client`) needs only two operations,
``read32(addr) -> int`` and ``write32(addr, value)``, on byte addresses of
the AXI4-Lite CSR bank (``docs/register-map.md``).  A response other than
OKAY raises :class:`TransportError`.

* :class:`Transport` / :class:`AsyncTransport`: the protocols (a board's UART
  bridge, a simulation socket, ...).  The async one is for cocotb, where a bus
  access is a coroutine.
* :class:`LoopbackTransport`: an in-process model of the CSR bank built from
  the same register map (storage, RO inputs, pop queues, W1C, the table
  window, SLVERR rules), for firmware tests without RTL.
* :class:`AxiLiteTransport`: an async adapter over a cocotbext-axi
  ``AxiLiteMaster`` (testbenches drive the real RTL through it).
"""

from collections import deque
from typing import Protocol, runtime_checkable

from ..regmap import REGMAP, Access, RegMap, TableOp

__all__ = ["Transport", "AsyncTransport", "TransportError", "LoopbackTransport",
           "AxiLiteTransport", "OKAY", "SLVERR"]

OKAY, SLVERR = 0, 2


class TransportError(IOError):
    """A bus access answered an error.  ``op`` is "read"/"write", ``addr`` the byte
    address, ``resp`` the AXI response (2 = SLVERR)."""

    def __init__(self, op: str, addr: int, resp: int = SLVERR, detail: str = ""):
        self.op, self.addr, self.resp = op, addr, resp
        name = {1: "EXOKAY", 2: "SLVERR", 3: "DECERR"}.get(resp, str(resp))
        super().__init__(f"CSR {op} at 0x{addr:04X} answered {name}" + (f": {detail}" if detail else ""))


@runtime_checkable
class Transport(Protocol):
    """Blocking 32-bit register access (byte addresses)."""

    def read32(self, addr: int) -> int: ...

    def write32(self, addr: int, value: int) -> None: ...


@runtime_checkable
class AsyncTransport(Protocol):
    """Coroutine 32-bit register access (byte addresses), e.g. inside cocotb."""

    async def read32(self, addr: int) -> int: ...

    async def write32(self, addr: int, value: int) -> None: ...


class AxiLiteTransport:
    """:class:`AsyncTransport` over a cocotbext-axi ``AxiLiteMaster`` (checks ``resp``)."""

    def __init__(self, master):
        self.master = master

    async def read32(self, addr: int) -> int:
        r = await self.master.read(addr, 4)
        if int(r.resp) != OKAY:
            raise TransportError("read", addr, int(r.resp))
        return int.from_bytes(r.data, "little")

    async def write32(self, addr: int, value: int) -> None:
        r = await self.master.write(addr, int(value).to_bytes(4, "little"))
        if int(r.resp) != OKAY:
            raise TransportError("write", addr, int(r.resp))


class LoopbackTransport:
    """In-process model of :class:`mrcnic.rtl.csr.CsrBank` (same map, same rules).

    The "hardware side" is plain Python:

    * ``inputs[name]``: the value of an RO register (int, or a callable
      returning the int, called at each read);
    * ``tables[name][index]``: table entries as record integers (the layout's bits);
    * ``strobes``: every CMD write, in order, as ``(register, {field: value})``;
      table commands as ``("TBL_CMD", {"op", "table", "index"})``;
    * :meth:`push_event` / :meth:`push_probe_reply`: queue an EV event / a probe
      reply behind ``EV_EVENT`` / ``EV_PROBE_STATUS`` + ``EV_PROBE_RTT``;
    * :meth:`set_status`: set W1C bits (as the ``_set`` inputs do).
    """

    def __init__(self, regmap: RegMap = REGMAP):
        self.regmap = regmap
        self.values = {r.name: r.reset for r in regmap.registers}
        self.inputs = {}
        self.tables = {t.name: {} for t in regmap.tables}
        self.strobes = []
        self.ro_write_attempts = 0
        self.events, self.probe_replies = deque(), deque()
        self.inputs["EV_EVENT"] = lambda: self.events[0] if self.events else 0
        self.inputs["EV_EVENT_COUNT"] = lambda: len(self.events)
        self.inputs["EV_PROBE_STATUS"] = (
            lambda: (1 << 31) | self.probe_replies[0][0] if self.probe_replies else 0)
        self.inputs["EV_PROBE_RTT"] = lambda: self.probe_replies[0][1] if self.probe_replies else 0
        self._pops = {"EV_EVENT": self.events, "EV_PROBE_RTT": self.probe_replies}

    # -- hardware side ------------------------------------------------------------------
    def push_event(self, index: int, state: int, reason: int):
        """Queue an EV event (entry ``index`` went to ``state`` for ``reason``)."""
        r = self.regmap["EV_EVENT"]
        self.events.append((int(index) << r.field("index").lsb) | (int(state) << r.field("state").lsb)
                           | (int(reason) << r.field("reason").lsb) | (1 << r.field("valid").lsb))

    def push_probe_reply(self, index: int, rtt_ns: int):
        """Queue a probe reply for entry ``index`` with its RTT in ns."""
        self.probe_replies.append((int(index), int(rtt_ns)))

    def set_status(self, name: str, bits: int):
        """OR ``bits`` into the W1C register ``name``."""
        self.values[name] |= bits & self.regmap[name].mask

    # -- bus side -----------------------------------------------------------------------
    def _reg(self, op, addr):
        r = self.regmap.at(addr & ~3 & 0xFFFF)
        if r is None:
            raise TransportError(op, addr, SLVERR, "unmapped address")
        return r

    def read32(self, addr: int) -> int:
        r = self._reg("read", addr)
        if r.const:
            return r.reset
        if r.name == "RO_WRITE_ATTEMPTS":
            return self.ro_write_attempts
        if r.access in (Access.WO, Access.CMD):
            return 0
        if r.access is Access.RO:
            v = self.inputs.get(r.name, 0)
            v = (v() if callable(v) else v) & r.mask
            if r.read_strobe and self._pops.get(r.name):
                self._pops[r.name].popleft()
            return v
        return self.values[r.name]

    def write32(self, addr: int, value: int) -> None:
        r = self._reg("write", addr)
        value &= 0xFFFFFFFF
        if r.access is Access.RO:
            self.ro_write_attempts += 1
            return
        if r.access is Access.W1C:
            self.values[r.name] &= ~value
            return
        fields = {f.name: (value >> f.lsb) & ((1 << f.width) - 1) for f in r.fields}
        bad = [f"{f.name}={fields[f.name]}" for f in r.fields if not f.legal(fields[f.name])]
        if bad:
            raise TransportError("write", addr, SLVERR, f"{r.name}: illegal {', '.join(bad)}")
        if r.name == "TBL_CMD":
            self._table_cmd(addr, fields["op"])
            return
        self.values[r.name] = value & r.mask
        if r.access is Access.CMD:
            self.strobes.append((r.name, fields))

    def _table_cmd(self, addr, op):
        if op == TableOp.NOP.value:
            return
        sel = self.values["TBL_SELECT"]
        t = next((t for t in self.regmap.tables if t.id.value == sel), None)
        index = self.values["TBL_INDEX"]
        if t is None or index >= t.depth or (op == TableOp.WRITE.value and not t.writable):
            raise TransportError("write", addr, SLVERR, f"table command {op} refused")
        words = [f"TBL_DATA{i}" for i in range(self.regmap.data_words)]
        self.strobes.append(("TBL_CMD", {"op": op, "table": t.name, "index": index}))
        if op == TableOp.WRITE.value:
            bits = sum(self.values[w] << (32 * i) for i, w in enumerate(words))
            self.tables[t.name][index] = bits & ((1 << t.width) - 1)
        else:
            bits = self.tables[t.name].get(index, 0)
            for i, w in enumerate(words):
                self.values[w] = (bits >> (32 * i)) & 0xFFFFFFFF
