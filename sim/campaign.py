"""Fault campaigns and sweeps: many independent co-simulations as Dask tasks.

``mrcnic campaign`` runs one scenario ``--runs N`` times, run *i* with fault seed
``S + i`` (:func:`mrcnic.sim.faults.run_seed`) and faults drawn from one spec;
``mrcnic sweep`` runs the same engine over a parameter grid (every combination of
the ``--grid`` values, ``--runs`` seeds per point).  Each run is a task
(:func:`run_one`) on a Dask distributed cluster: a ``LocalCluster`` of one
single-threaded worker process per core by default, or a cluster started by hand
(``dask scheduler`` / ``dask worker tcp://HOST:8786``) given by its address.  A run
needs nothing but its parameters (the scenario is resolved by the client and sent
as a dict), and its result depends on nothing else: the same seed gives the same
verdict on any worker.

Results stream in as runs finish: one row per run (:data:`COLUMNS`) appended to
``runs.csv`` and ``runs.jsonl``, with a rich progress bar; at the end ``summary.json``
and ``summary.png`` (verdict counts; completion time / ideal against the run's total
fault rate).  A failed run's row holds the one ``mrcnic sim`` command that replays it
(:func:`replay_command`).
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import shlex
import shutil
import tempfile
import time
from pathlib import Path

__all__ = ["run_one", "run_campaign", "replay_command", "campaign_params", "sweep_params",
           "parse_grid", "COLUMNS", "load_scenario_spec"]

#: Columns of ``runs.csv`` (the JSON lines hold the same, plus ``invariants``).
COLUMNS = ("run", "seed", "point", "verdict", "failed", "loss", "corrupt", "dup", "reorder",
           "trim", "flaps", "switches", "plane", "fault_rate", "inj_loss", "inj_fcs",
           "inj_corrupt", "inj_dup", "inj_reorder", "inj_trim", "packets_sent",
           "retransmissions", "evs_assumed_bad", "nic_drops", "fabric_drops",
           "completion_ns", "ideal_ns", "completion_x_ideal", "sim_cycles", "wall_s",
           "worker", "rtl", "error", "replay")


def rtl_version() -> str:
    """Hash (12 hex digits) of every RTL source file (``rtl/*.py``) as it is now: a run's
    ``rtl`` column, so a campaign whose sources changed while it ran says so."""
    from . import rtlsim
    from .. import rtl
    return rtlsim.build_key("rtl", files=sorted(Path(rtl.__file__).parent.glob("*.py")))[:12]

_GRID_KEYS = ("size", "scenario")     #: grid keys besides the fault kinds


def load_scenario_spec(spec: str, size: int | None = None) -> dict:
    """A scenario dict from a built-in name or a scenario file (``FILE.toml``).

    Uses the scenario-file loader (``mrcnic.sim.scenario_file.resolve_scenario``) when it
    exists, else the built-in table.  Raises ``ValueError`` (unknown name, bad file).
    """
    try:
        from .scenario_file import resolve_scenario
    except ImportError:
        from .scenarios import get_scenario
        return get_scenario(spec, size=size)
    return resolve_scenario(spec, size=size)


def replay_command(row: dict) -> str:
    """The ``mrcnic sim`` command that replays one run exactly (a shell line)."""
    p = row["params"]
    cmd = ["mrcnic", "sim", "--scenario", p["scenario_spec"], "--size", str(p["size"]),
           "--faults", p["faults"], "--seed", str(p["seed"])]
    if p.get("harness_bug"):
        cmd += ["--harness-bug", p["harness_bug"]]
    if p.get("simulator"):
        cmd += ["--simulator", p["simulator"]]
    return " ".join(shlex.quote(c) for c in cmd)


def run_one(params: dict) -> dict:
    """One campaign run (a Dask task): co-simulate, judge, return its row (a dict).

    ``params``: ``scenario`` (dict), ``scenario_spec`` (name or file, for the replay
    command), ``size`` (bytes), ``faults`` (spec text), ``seed``, optional
    ``harness_bug``, ``simulator``, ``run``, ``point``.
    Never raises: an exception becomes verdict ``"error"`` with its text.  The run's
    build directory is removed unless the run failed (its path is then in ``error``).
    """
    import socket

    from .cosim import run_cosim
    from .faults import KINDS

    t0 = time.monotonic()
    row = {c: "" for c in COLUMNS}
    row.update(run=params.get("run", 0), seed=params["seed"], point=params.get("point", ""),
               worker=f"{socket.gethostname()}:{os.getpid()}", rtl=rtl_version(),
               params=params)
    bdir = Path(tempfile.mkdtemp(prefix=f"mrcnic-run{params['seed']}-"))
    keep = False
    try:
        rep = run_cosim(dict(params["scenario"]), size=params["size"], faults=params["faults"], seed=params["seed"],
                        harness_bug=params.get("harness_bug"), build_dir=bdir,
                        simulator=params.get("simulator"))
        inv = rep.get("invariants") or {}
        rates = (rep.get("faults") or {}).get("rates", {})
        inj = (rep.get("faults") or {}).get("injected", {})
        row.update({k: rates.get(k, "") for k in KINDS if k in COLUMNS})
        row.update(
            verdict=rep.get("verdict") or "fail",
            failed=" ".join(n for n, v in inv.items() if not v["ok"]),
            fault_rate=round(sum(rates.get(k, 0) for k in ("loss", "corrupt", "dup", "reorder",
                                                           "trim")), 6),
            inj_loss=inj.get("loss", 0), inj_fcs=inj.get("fcs", 0),
            inj_corrupt=inj.get("corrupt_to_host", 0), inj_dup=inj.get("dup", 0),
            inj_reorder=inj.get("reorder", 0), inj_trim=inj.get("trim", 0),
            packets_sent=rep["packets_sent"], retransmissions=rep["retransmissions"],
            evs_assumed_bad=rep["evs_assumed_bad"],
            nic_drops=sum(rep["drops"]["nic"].values()),
            fabric_drops=sum(rep["drops"]["fabric"].values()),
            completion_ns=rep["completion_ns"] if rep["completion_ns"] is not None else "",
            ideal_ns=round(rep["ideal_ns"], 1),
            completion_x_ideal=(round(rep["completion_ns"] / rep["ideal_ns"], 4)
                                if rep["completion_ns"] else ""),
            sim_cycles=rep["sim"]["cycles"])
        row["invariants"] = inv
        keep = row["verdict"] != "pass"
    except BaseException as exc:      # noqa: BLE001 - a task reports, never raises
        if isinstance(exc, KeyboardInterrupt):
            raise
        row.update(verdict="error", error=f"{type(exc).__name__}: {exc}"[:500])
        keep = True
    if keep:
        row["error"] = (row["error"] + " " if row["error"] else "") + f"(run directory {bdir})"
    else:
        shutil.rmtree(bdir, ignore_errors=True)
    row["wall_s"] = round(time.monotonic() - t0, 2)
    row["replay"] = replay_command(row) if row["verdict"] != "pass" else ""
    return row


def campaign_params(scenario_spec: str, runs: int, seed: int, faults: str, size: int | None,
                    harness_bug: str | None = None, simulator: str | None = None) -> list[dict]:
    """Parameters of every run of a campaign (run *i*: seed ``seed + i``).

    Raises ``ValueError`` for an unknown scenario or a bad fault spec.
    """
    from .faults import parse_spec, run_seed

    parse_spec(faults)
    sc = load_scenario_spec(scenario_spec, size=size)
    return [dict(run=i, seed=run_seed(seed, i), scenario=sc, scenario_spec=scenario_spec,
                 size=sc["size"], faults=faults, harness_bug=harness_bug,
                 simulator=simulator, point="")
            for i in range(runs)]


def parse_grid(items) -> dict:
    """``["loss=0,0.01,0.02", "evs=32,128"]`` -> ``{"loss": [...], "evs": [...]}``.

    Keys: a fault kind (a value or a ``lo:hi`` range per point), ``size`` (bytes per
    transfer, units allowed) or ``scenario`` (a built-in name or a scenario file, e.g. one
    per load-balancing mode).  Raises ``ValueError``.
    """
    from .faults import KINDS

    grid = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"grid {item!r}: expected key=v1,v2,...")
        k, vals = item.split("=", 1)
        if k not in KINDS and k not in _GRID_KEYS:
            raise ValueError(f"grid key {k!r}: a fault kind ({', '.join(KINDS)}), size or "
                             "scenario")
        values = [v for v in vals.split(",") if v]
        if not values:
            raise ValueError(f"grid {k}: no values")
        grid[k] = values
    return grid


def sweep_params(scenario_spec: str, grid: dict, runs: int, seed: int, faults: str,
                 size: int | None, simulator: str | None = None) -> list[dict]:
    """Parameters of a sweep: every grid point x ``runs`` seeds.  A fault kind of the grid
    replaces that kind in ``faults``; ``size`` / ``scenario`` replace the transfer size /
    the scenario.  Point *p*'s runs use seeds ``seed + p * runs + i``.  Raises ``ValueError``
    (bad spec, size or scenario)."""
    from mrcnic.clikit import parse_size

    from .faults import KINDS, FaultSpec, parse_spec, run_seed

    base = parse_spec(faults)
    keys = list(grid)
    out = []
    for p, combo in enumerate(itertools.product(*(grid[k] for k in keys))):
        ranges = dict(base.ranges)
        spec_name, psize = scenario_spec, size
        for k, v in zip(keys, combo):
            if k in KINDS:
                ranges.update(parse_spec(f"{k}={v}").ranges)
            elif k == "size":
                psize = parse_size(v)
            else:
                spec_name = v
        sc = load_scenario_spec(spec_name, size=psize)
        spec = FaultSpec(ranges).text()
        point = " ".join(f"{k}={v}" for k, v in zip(keys, combo))
        for i in range(runs):
            out.append(dict(run=len(out), seed=run_seed(seed, p * runs + i), scenario=sc,
                            scenario_spec=spec_name, size=sc["size"], faults=spec,
                            simulator=simulator, point=point))
    return out


def _client(scheduler: str | None, workers: int | None):
    """(client, cluster or None): a LocalCluster of ``workers`` single-threaded processes
    (default: one per core) or the scheduler at ``scheduler``."""
    from dask.distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler, timeout="20s"), None
    n = workers or os.cpu_count() or 1
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=40)
    return Client(cluster), cluster


def run_campaign(params: list[dict], out_dir, *, scheduler: str | None = None,
                 workers: int | None = None, progress: bool = True, title: str = "campaign",
                 on_row=None) -> dict:
    """Run every parameter set as a Dask task; stream rows to ``out_dir``; return the summary.

    Writes ``runs.csv`` and ``runs.jsonl`` (one row per run, in completion order),
    ``summary.json`` and ``summary.png``.  ``on_row(row)`` is called for each finished run.
    The summary holds ``runs, passed, failed, errors, wall_s, runs_per_hour, per_run_s``
    (mean task wall time), ``failing`` (seed, failed invariants, replay command) and the
    workers used.  Raises ``OSError`` when ``out_dir`` cannot be written, ``OSError`` /
    ``TimeoutError`` when the scheduler cannot be reached.
    """
    from dask.distributed import as_completed

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, jsonl_path = out / "runs.csv", out / "runs.jsonl"
    t0 = time.monotonic()
    client, cluster = _client(scheduler, workers)
    rows = []
    bar = task = None
    try:
        nworkers = len(client.scheduler_info().get("workers", {}))
        if progress:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                           MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                           TimeElapsedColumn(), TimeRemainingColumn())
            bar.start()
            task = bar.add_task(title, total=len(params), info=f"{nworkers} workers")
        futures = client.map(run_one, params, pure=False)
        with open(csv_path, "w", newline="") as fc, open(jsonl_path, "w") as fj:
            writer = csv.DictWriter(fc, fieldnames=COLUMNS, extrasaction="ignore")
            writer.writeheader()
            for fut in as_completed(futures):
                row = fut.result()
                fut.release()
                rows.append(row)
                writer.writerow(row)
                fc.flush()
                fj.write(json.dumps({k: v for k, v in row.items() if k != "params"},
                                    default=str) + "\n")
                fj.flush()
                if on_row is not None:
                    on_row(row)
                if bar is not None:
                    bad = sum(1 for r in rows if r["verdict"] != "pass")
                    bar.update(task, advance=1, info=f"{nworkers} workers, {bad} failed")
    finally:
        if bar is not None:
            bar.stop()
        client.close()
        if cluster is not None:
            cluster.close()
    wall = time.monotonic() - t0
    summary = summarize(rows, wall)
    summary["workers"] = nworkers
    summary["scheduler"] = scheduler or "local"
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    try:
        plot_summary(rows, out / "summary.png", title)
        summary["plot"] = str(out / "summary.png")
    except Exception as exc:        # noqa: BLE001 - a plot never fails a campaign
        summary["plot_error"] = str(exc)
    return summary


def summarize(rows: list[dict], wall_s: float) -> dict:
    """Counts, timings and the failing runs of a list of rows."""
    rows = sorted(rows, key=lambda r: r["run"])
    passed = sum(1 for r in rows if r["verdict"] == "pass")
    errors = sum(1 for r in rows if r["verdict"] == "error")
    walls = [r["wall_s"] for r in rows if r["wall_s"] != ""]
    by_point = {}
    for r in rows:
        if r.get("point"):
            d = by_point.setdefault(r["point"], dict(runs=0, passed=0, completion_x_ideal=[]))
            d["runs"] += 1
            d["passed"] += r["verdict"] == "pass"
            if r["completion_x_ideal"] != "":
                d["completion_x_ideal"].append(r["completion_x_ideal"])
    for d in by_point.values():
        xs = d.pop("completion_x_ideal")
        d["mean_completion_x_ideal"] = round(sum(xs) / len(xs), 4) if xs else None
    return dict(
        runs=len(rows), passed=passed, failed=len(rows) - passed - errors, errors=errors,
        wall_s=round(wall_s, 1),
        runs_per_hour=round(len(rows) / wall_s * 3600, 1) if wall_s else None,
        per_run_s=round(sum(walls) / len(walls), 2) if walls else None,
        injected={k: sum(int(r[k] or 0) for r in rows)
                  for k in ("inj_loss", "inj_fcs", "inj_corrupt", "inj_dup", "inj_reorder",
                            "inj_trim")},
        retransmissions=sum(int(r["retransmissions"] or 0) for r in rows),
        failing=[dict(seed=r["seed"], verdict=r["verdict"], failed=r["failed"],
                      error=r["error"], replay=r["replay"])
                 for r in rows if r["verdict"] != "pass"],
        points=by_point or None,
        rtl_versions=sorted({r.get("rtl", "") for r in rows} - {""}))


def plot_summary(rows: list[dict], path, title: str = "campaign") -> Path:
    """PNG: verdict counts, and completion time / ideal against each run's fault rate
    (the sum of its loss, corruption, duplication, reorder and trim probabilities)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1, 2.4]})
    names = ["pass", "fail", "error"]
    counts = [sum(1 for r in rows if r["verdict"] == n) for n in names]
    a1.bar(names, counts, color=["tab:green", "tab:red", "tab:gray"])
    for i, c in enumerate(counts):
        a1.text(i, c, str(c), ha="center", va="bottom")
    a1.set_title("verdicts")
    a1.set_ylabel("runs")
    for verdict, color in (("pass", "tab:blue"), ("fail", "tab:red")):
        pts = [(r["fault_rate"], r["completion_x_ideal"]) for r in rows
               if r["verdict"] == verdict and r["completion_x_ideal"] != ""
               and r["fault_rate"] != ""]
        if pts:
            a2.scatter(*zip(*pts), s=10, alpha=0.6, color=color, label=verdict)
    a2.set_xlabel("fault rate per frame and link (loss + corrupt + dup + reorder + trim)")
    a2.set_ylabel("completion time / ideal")
    a2.set_title("completion time against fault rate")
    a2.grid(alpha=0.3)
    a2.legend()
    fig.suptitle(f"{title}: {len(rows)} runs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
