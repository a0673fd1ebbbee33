"""Honour ``no_rw_check`` on memories in Amaranth's RTLIL before Yosys maps them.

A ``Memory`` marked ``attrs={"no_rw_check": 1}`` tells the synthesiser that the design
never reads a word in the cycle it is written, so the block RAM needs no read/write
collision logic.  Yosys 0.70 ignores that attribute on the memories of an RTLIL input,
and Amaranth emits every synchronous read port (``$memrd_v2``) with
``COLLISION_X_MASK`` 0 (the read must return the old word on a collision).  Yosys
then puts an address compare and a bypass multiplexer after the EBR (a 512 x 36
block RAM: ~33 LUT4 more, ``tests/test_rw_check.py``), and the multiplexer stops :mod:`mrcnic.boards.ebr_outreg` from
folding the read register into the EBR's output register (a raw EBR read, ~5.8 ns
on a speed-6 part, then the multiplexer).

:func:`mark_no_rw_check` sets every bit of ``COLLISION_X_MASK`` on the clocked read
ports of the memories carrying ``no_rw_check`` -- the RTLIL way of saying "a
collision reads X", which is what the attribute means.  Asynchronous read ports
(``CLK_ENABLE 0``) are left alone (Yosys requires their mask to be 0), and so is
every memory without the attribute.
"""

import re
from pathlib import Path

__all__ = ["mark_no_rw_check", "mark_file"]

_MEMORY = re.compile(r"((?:^[ \t]*attribute [^\n]*\n)*)^[ \t]*memory [^\n]*?(\S+)[ \t]*$", re.M)
_MEMRD = re.compile(r"^([ \t]*)cell \$memrd_v2 [^\n]*\n.*?^\1end[ \t]*$", re.M | re.S)
_MEMID = re.compile(r'parameter \\MEMID "((?:[^"\\]|\\.)*)"')
_MASK = re.compile(r"(parameter \\COLLISION_X_MASK )(\d+)'[01]+")


def _memid(rtlil_name: str) -> str:
    """The ``MEMID`` string of a memory declared as ``rtlil_name`` (``\\x`` -> ``\\\\x``)."""
    return rtlil_name.replace("\\", "\\\\")


def mark_no_rw_check(rtlil: str) -> tuple[str, int]:
    """Set ``COLLISION_X_MASK`` to all ones on the clocked read ports of ``no_rw_check`` memories.

    Parameters
    ----------
    rtlil : str
        RTLIL text as Amaranth writes it (``top.il``), any number of modules.

    Returns
    -------
    (str, int)
        The edited text and the number of read ports changed.  Memory names are
        matched within their module only.
    """
    total = 0
    modules = re.split(r"(?m)^(?=module )", rtlil)
    for i, mod in enumerate(modules):
        marked = {_memid(name) for attrs, name in _MEMORY.findall(mod)
                  if re.search(r"attribute \\no_rw_check 1\b", attrs)}
        if not marked:
            continue

        def fix(cell):
            nonlocal total
            body = cell.group(0)
            memid = _MEMID.search(body)
            if not memid or memid.group(1) not in marked or \
                    not re.search(r"parameter \\CLK_ENABLE 1\b", body):
                return body
            new = _MASK.sub(lambda mt: f"{mt.group(1)}{mt.group(2)}'{'1' * int(mt.group(2))}",
                            body)
            total += new != body
            return new

        modules[i] = _MEMRD.sub(fix, mod)
    return "".join(modules), total


def mark_file(path) -> int:
    """:func:`mark_no_rw_check` on an RTLIL file in place; returns the ports changed."""
    path = Path(path)
    text, count = mark_no_rw_check(path.read_text())
    if count:
        path.write_text(text)
    return count
