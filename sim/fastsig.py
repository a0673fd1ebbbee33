"""Cheaper reads and writes of a cocotb signal, for the per-beat loops of the testbench models.

``handle.value`` builds a ``LogicArray`` (or ``Logic``) from the simulator's bit string on
every read, and ``handle.value = int`` range-checks and formats on every write; profiling
``mrcnic sim`` under Verilator put both among the first per-beat Python costs of the AXI
and AXI-Stream models (:mod:`mrcnic.sim.fastaxiram`, :mod:`mrcnic.sim.fastaxis`).  These
helpers read the same bit string and write through the same ``_schedule_write`` (cocotb
2.1's deposit, applied in the next ReadWrite phase, the last write of a timestep winning)
with the same value, so what the simulator sees is unchanged:

* :func:`reader` -- ``int(handle.value)`` (``ValueError`` on X/Z, as ``int(LogicArray)``);
* :func:`bit_reader` -- ``bool(handle.value)`` of a 1-bit port (``True`` only for ``1``);
* :func:`writer` -- ``handle.value = v`` for an ``int``/``bool`` ``v`` in range.

They use cocotb internals (``handle._handle``, ``cocotb.handle._schedule_write``), which is
why pyproject.toml pins cocotb.
"""

from __future__ import annotations

from cocotb.handle import _GPISetAction, _schedule_write

__all__ = ["reader", "bit_reader", "writer"]


def reader(handle):
    """A function returning ``int(handle.value)``."""
    get = handle._handle.get_signal_val_binstr
    return lambda: int(get(), 2)


def bit_reader(handle):
    """A function returning ``bool(handle.value)`` of a 1-bit signal driven to 0 or 1."""
    get = handle._handle.get_signal_val_binstr
    return lambda: get() == "1"


def writer(handle):
    """A function ``f(v)`` doing ``handle.value = v`` for an int (or bool) ``v`` that fits."""
    width = len(handle)
    dep = _GPISetAction.DEPOSIT
    if width == 1:                       # a Logic port: cocotb writes its bit string
        put = handle._handle.set_signal_val_binstr
        return lambda v: _schedule_write(handle, put, dep, "1" if v else "0")
    if width <= 32:
        put = handle._handle.set_signal_val_int
        return lambda v: _schedule_write(handle, put, dep, int(v))
    put, fmt = handle._handle.set_signal_val_binstr, f"0{width}b"
    return lambda v: _schedule_write(handle, put, dep, format(v, fmt))
