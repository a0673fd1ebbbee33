"""Shared cocotb testbench helpers (clock, reset, the Icarus time-0 X workaround).

Generated Verilog drives some outputs combinationally; Icarus can show X on
them at time 0 (Amaranth issues #594, #1629).  :func:`start` therefore drives
every named input to a known value, starts the clock, holds reset for a few
cycles and returns only after a clock edge with reset released, so no test
ever samples an output before the design has settled.
"""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

__all__ = ["start", "CLK_NS", "pack", "unpack", "StreamSource", "StreamSink"]

CLK_NS = 8   #: default clock period in ns (125 MHz, the ECP5 target)


async def start(dut, inputs=(), period_ns: int = CLK_NS, reset_cycles: int = 4):
    """Drive ``inputs`` (names) to 0, start ``dut.clk``, pulse ``dut.rst``; return the clock task."""
    for name in inputs:
        getattr(dut, name).value = 0
    has_rst = hasattr(dut, "rst")
    if has_rst:
        dut.rst.value = 1
    clock = cocotb.start_soon(Clock(dut.clk, period_ns, unit="ns").start())
    await ClockCycles(dut.clk, reset_cycles)
    if has_rst:
        dut.rst.value = 0
    await RisingEdge(dut.clk)
    return clock


def pack(layout, fields: dict) -> int:
    """Integer bits of a ``data.Struct`` layout filled from ``fields`` (nested dicts, enums ok)."""
    return layout.const(fields).as_value().value


def unpack(layout, value) -> dict:
    """Nested dict of a ``data.Struct`` layout's fields from its integer bits (or a cocotb value)."""
    from amaranth.lib import data

    if not isinstance(value, int):
        value = int(value)
    view = layout.from_bits(value)

    def walk(lay, v):
        out = {}
        for name, fld in lay.as_shape():
            item = getattr(v, name)
            shape = fld.shape
            if isinstance(shape, data.StructLayout) or (
                    isinstance(shape, type) and issubclass(shape, data.Struct)):
                out[name] = walk(shape, item)
            else:
                out[name] = item
        return out

    return walk(layout, view)


class StreamSource:
    """Drive an ``amaranth.lib.stream`` input port (``<name>__payload/valid/ready``).

    ``send(value)`` queues one payload (an int, e.g. from :func:`pack`);
    the driver holds ``valid`` until the DUT takes it.  ``pause`` (optional
    callable returning bool per cycle) inserts idle cycles.
    """

    def __init__(self, dut, name, clk, pause=None):
        from collections import deque
        self._payload = getattr(dut, f"{name}__payload")
        self._valid = getattr(dut, f"{name}__valid")
        self._ready = getattr(dut, f"{name}__ready")
        self._clk, self._queue, self._pause = clk, deque(), pause
        self._valid.value = 0
        self.sent = 0
        cocotb.start_soon(self._run())

    def send(self, value: int):
        self._queue.append(value)

    def empty(self) -> bool:
        return not self._queue and not int(self._valid.value)

    async def _run(self):
        valid = 0
        while True:
            if self._queue and not (self._pause and self._pause()):
                self._payload.value = self._queue[0]
                valid = 1
            else:
                valid = 0
            self._valid.value = valid
            await RisingEdge(self._clk)
            # Values read right after the edge are those the edge sampled.
            if valid and self._ready.value.is_resolvable and int(self._ready.value):
                self._queue.popleft()
                self.sent += 1


class StreamSink:
    """Collect payloads from an ``amaranth.lib.stream`` output port into ``items`` (ints)."""

    def __init__(self, dut, name, clk, pause=None):
        self._payload = getattr(dut, f"{name}__payload")
        self._valid = getattr(dut, f"{name}__valid")
        self._ready = getattr(dut, f"{name}__ready")
        self._clk, self._pause = clk, pause
        self.items = []
        self._ready.value = 0
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            ready = 0 if (self._pause and self._pause()) else 1
            self._ready.value = ready
            await RisingEdge(self._clk)
            valid = self._valid.value
            if ready and valid.is_resolvable and int(valid):
                self.items.append(int(self._payload.value))
