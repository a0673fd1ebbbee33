"""Fold the flip-flops that register a block RAM's read data into the EBR's output register.

An ECP5 ``DP16KD`` read without its output register (``REGMODE NOREG``, the only mode
Yosys's memory mapper emits) has a clock-to-out of about 5.6-5.8 ns on a speed-6 part,
so even ``q <= mem[addr]`` with nothing in between leaves ~2 ns for routing at 125 MHz.
With ``REGMODE OUTREG`` the same read comes out of a register inside the EBR in about
1 ns (nextpnr-ecp5's timing model), one cycle later -- exactly the cycle the fabric
register added.  This pass does that substitution on Yosys's JSON netlist, between
``synth_ecp5`` and nextpnr, the way vendor tools absorb a read register into the BRAM.

A read port ``X`` (``A`` or ``B``; in the 36-bit pseudo-dual-port mode Yosys uses, the
read port is ``B`` and the data comes out on ``DOA`` and ``DOB``) is converted when

* every used ``DOX`` bit drives only ``DI`` pins of ``TRELLIS_FF`` cells (no logic,
  no top-level port);
* all those flip-flops share the port's clock net (both non-inverted), one clock enable
  (net or constant, non-inverted) and one reset (net or none, non-inverted), reset to 0
  (``REGSET RESET``), with the same synchronous/asynchronous reset mode;
* the port does not write (``WEX`` constant 0) and its ``RSTX`` is constant 0, and the
  other port's reset is constant 0 if the EBR's ``RESETMODE`` must change.

Then ``REGMODE_X = OUTREG``, ``OCEX`` = the flip-flops' clock enable, ``RSTX`` = their
reset (``RESETMODE`` = their mode; the EBR output register, like the flip-flop, resets
to 0), the flip-flops are deleted and the EBR drives their ``Q`` nets.  A ``DO`` bit
with more than one flip-flop leaves the port as it is (Yosys merges identical ones first).

Reference: Lattice TN1264 "ECP5 and ECP5-5G Memory Usage Guide" (DP16KD ``REGMODE``,
``OCE``, ``RST``); nextpnr-ecp5's DP16KD timing (``REGMODE_A/B`` select the model).
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

__all__ = ["absorb_output_registers", "absorb_file", "main"]


def _s(v) -> str:
    """A Yosys JSON string parameter (written with a trailing space when it could look binary)."""
    return str(v).strip()


def _width(v) -> int:
    """A Yosys JSON integer parameter (binary string or int)."""
    return int(v, 2) if isinstance(v, str) else int(v)


def _one(conn, pin):
    """The single bit on ``pin`` (a net number, ``"0"``/``"1"``/``"x"``), or None when absent."""
    bits = conn.get(pin)
    return bits[0] if bits else None


def _ff_control(ff) -> tuple | None:
    """``(clk, ce, lsr, async)`` of a flip-flop, or None when it cannot be absorbed.

    ``ce`` is ``"1"`` for no enable, ``lsr`` ``"0"`` for no reset."""
    p, c = ff["parameters"], ff["connections"]
    if _s(p.get("CLKMUX", "CLK")) != "CLK" or _s(p.get("REGSET", "RESET")) != "RESET":
        return None
    cemux = _s(p.get("CEMUX", "1"))
    if cemux == "CE":
        ce = _one(c, "CE")
        ce = "1" if ce is None else ce
    elif cemux == "1":
        ce = "1"
    else:
        return None
    lsrmux = _s(p.get("LSRMUX", "LSR"))
    lsr = _one(c, "LSR")
    if lsrmux != "LSR":
        return None
    lsr = "0" if lsr in (None, "x") else lsr
    is_async = _s(p.get("SRMODE", "LSR_OVER_CE")) == "ASYNC"
    return (_one(c, "CLK"), ce, lsr, is_async and lsr != "0")


def _port_outputs(cell, port) -> list:
    """The ``DO`` pins carrying read port ``port``'s data (both halves in 36-bit mode)."""
    p = cell["parameters"]
    wide = _width(p.get("DATA_WIDTH_B", 18)) == 36 and _width(p.get("DATA_WIDTH_A", 18)) == 36
    if wide:
        return [f"DOA{i}" for i in range(18)] + [f"DOB{i}" for i in range(18)] if port == "B" else []
    return [f"DO{port}{i}" for i in range(18)]


def absorb_output_registers(netlist: dict, top: str = "top") -> int:
    """Rewrite ``netlist`` (Yosys ``write_json`` data, flattened ``top``) in place.

    Returns
    -------
    int
        Flip-flops removed (absorbed into EBR output registers).

    Raises
    ------
    KeyError
        ``top`` is not a module of ``netlist``.
    """
    mod = netlist["modules"][top]
    cells = mod["cells"]
    sinks = defaultdict(list)           # net bit -> [(cell name, pin)]; ("<port>", name) for ports
    for name, cell in cells.items():
        dirs = cell.get("port_directions", {})
        for pin, bits in cell["connections"].items():
            if dirs.get(pin, "input") != "output":
                for b in bits:
                    if isinstance(b, int):
                        sinks[b].append((name, pin))
    for pname, port in mod.get("ports", {}).items():
        if port["direction"] != "input":
            for b in port["bits"]:
                if isinstance(b, int):
                    sinks[b].append(("<port>", pname))

    removed = 0
    for cell in list(cells.values()):
        if cell["type"] == "DP16KD":
            for port in ("A", "B"):
                removed += _convert_port(cells, cell, port, sinks)
    return removed


def _convert_port(cells, cell, port, sinks) -> int:
    """Convert read port ``port`` of a DP16KD if it qualifies; return flip-flops removed."""
    p, c = cell["parameters"], cell["connections"]
    outs = [pin for pin in _port_outputs(cell, port) if isinstance(_one(c, pin), int)]
    if not outs or _s(p.get(f"REGMODE_{port}", "NOREG")) != "NOREG":
        return 0
    if _one(c, f"WE{port}") != "0" or _one(c, f"RST{port}") not in ("0", None):
        return 0
    if _s(p.get(f"CLK{port}MUX", f"CLK{port}")) != f"CLK{port}":
        return 0
    ffs_of, control = {}, set()
    for pin in outs:
        users = sinks.get(_one(c, pin), [])
        if not users:
            continue                    # an unused bit of the port's width
        if len(users) != 1 or any(u[0] == "<port>" or u[1] != "DI"
                                  or cells[u[0]]["type"] != "TRELLIS_FF" for u in users):
            return 0
        for ff_name, _ in users:
            ctl = _ff_control(cells[ff_name])
            if ctl is None:
                return 0
            control.add(ctl)
        ffs_of[pin] = [u[0] for u in users]
    if len(control) != 1:           # no register at all, or registers that differ
        return 0
    clk, ce, lsr, is_async = control.pop()
    if clk != _one(c, f"CLK{port}"):
        return 0
    other = "B" if port == "A" else "A"
    mode = "ASYNC" if is_async else "SYNC"
    if lsr != "0" and _s(p.get("RESETMODE", "SYNC")) != mode and \
            _one(c, f"RST{other}") not in ("0", None):
        return 0

    removed = 0
    for pin, (ff_name,) in ffs_of.items():
        c[pin] = [_one(cells[ff_name]["connections"], "Q")]
        del cells[ff_name]
        removed += 1
    regs = ("A", "B") if len(_port_outputs(cell, port)) == 36 else (port,)
    for r in regs:                      # 36-bit mode: one output register for all 36 bits
        p[f"REGMODE_{r}"] = "OUTREG"
        c[f"OCE{r}"] = [ce]
    c[f"RST{port}"] = [lsr]
    if lsr != "0":
        p["RESETMODE"] = mode
        p["ASYNC_RESET_RELEASE"] = mode
    return removed


def absorb_file(path, top: str = "top") -> int:
    """Apply :func:`absorb_output_registers` to the Yosys JSON file ``path`` (rewritten in place)."""
    path = Path(path)
    netlist = json.loads(path.read_text())
    removed = absorb_output_registers(netlist, top)
    path.write_text(json.dumps(netlist))
    return removed


def main(argv=None) -> int:
    """``python -m mrcnic.boards.ebr_outreg NETLIST.json``: rewrite it, print the count."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m mrcnic.boards.ebr_outreg NETLIST.json", file=sys.stderr)
        return 2
    print(f"{absorb_file(argv[0])} flip-flops absorbed into EBR output registers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
