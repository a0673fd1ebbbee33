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

__all__ = ["start", "CLK_NS"]

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
