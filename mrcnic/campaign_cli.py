"""``mrcnic campaign``, ``mrcnic sweep`` and ``mrcnic fuzz`` (registered in :mod:`mrcnic.cli`).

Thin: options are parsed here, the work is in :mod:`mrcnic.sim.campaign` and
:mod:`mrcnic.sim.fuzz`.  Exit status 0 when every run passed, 1 when a run failed (each
failing run's replay command is printed), 2 for bad input.
"""

from __future__ import annotations

import os

import click

from .clikit import OUT_DIR, OUT_FILE, SIZE, InputError, RunFailed

__all__ = ["campaign", "sweep", "fuzz", "DEFAULT_FAULTS"]

#: Fault ranges of ``mrcnic campaign`` without ``--faults``: every kind the issue names but
#: a whole plane down (``plane=...`` adds it); drawn per run.
DEFAULT_FAULTS = ("loss=0:0.03,corrupt=0:0.02,dup=0:0.03,reorder=0:0.05,jitter_ns=0:3000,"
                  "trim=0:0.03,flaps=0:2,switches=0:1")


def _set_simulator(ctx, param, value):
    from .sim.simulators import SimulatorMissing, resolve, simulator_env
    if value:
        os.environ["MRCNIC_SIM"] = value
    try:
        simulator_env(resolve(value))
    except (SimulatorMissing, ValueError) as exc:
        raise InputError(str(exc)) from None
    return value


def _common(fn):
    opts = [
        click.option("--scenario", default="default", show_default=True,
                     help="Built-in scenario or a scenario file FILE.toml."),
        click.option("--size", type=SIZE, default="16k", show_default=True,
                     help="Bytes per RDMA WRITE of every run."),
        click.option("--faults", default=DEFAULT_FAULTS, show_default=True, metavar="SPEC",
                     help="Fault ranges, drawn per run from its seed (kinds: docs/campaign.md)."),
        click.option("--runs", type=click.IntRange(min=1), default=10, show_default=True,
                     help="Runs (campaign) or runs per grid point (sweep)."),
        click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True,
                     help="Seed of the first run; run i uses seed + i."),
        click.option("--scheduler", default=None, metavar="tcp://HOST:8786",
                     help="A Dask scheduler started by hand (dask scheduler / dask worker); "
                          "default: a local cluster."),
        click.option("--workers", type=click.IntRange(min=1), default=None,
                     help="Workers of the local cluster (default: one per core)."),
        click.option("--out", "out_dir", type=OUT_DIR, default="campaign-out", show_default=True,
                     help="Folder for runs.csv, runs.jsonl, summary.json, summary.png."),
        click.option("--simulator", type=click.Choice(["verilator", "icarus"]), default=None,
                     callback=_set_simulator,
                     help="HDL simulator of every run (default: $MRCNIC_SIM, else verilator)."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _finish(summary: dict, out_dir):
    from rich.table import Table

    from .clikit import console as console_

    t = Table(title="campaign summary", show_header=False)
    t.add_column("")
    t.add_column("", justify="right")
    for k in ("runs", "passed", "failed", "errors", "workers", "wall_s", "per_run_s",
              "runs_per_hour", "retransmissions"):
        t.add_row(k, str(summary.get(k)))
    t.add_row("faults injected", ", ".join(f"{k[4:]} {v}" for k, v in summary["injected"].items()))
    for point, d in (summary.get("points") or {}).items():
        t.add_row(point, f"{d['passed']}/{d['runs']} passed, completion "
                         f"{d['mean_completion_x_ideal']} x ideal")
    console_().print(t)
    click.echo(f"wrote {out_dir}/runs.csv, runs.jsonl, summary.json, summary.png")
    rtl = summary.get("rtl_versions") or []
    if len(rtl) > 1:
        click.secho(f"warning: the RTL sources changed while the campaign ran: its runs used "
                    f"{len(rtl)} versions ({', '.join(rtl)}; column 'rtl' of runs.csv)",
                    fg="yellow", err=True)
    for f in summary["failing"]:
        click.secho(f"FAILED seed {f['seed']} ({f['verdict']}: {f['failed'] or f['error']})",
                    fg="red", err=True)
        click.echo(f"  replay: {f['replay']}", err=True)
    if summary["failing"]:
        raise RunFailed(f"{len(summary['failing'])} of {summary['runs']} runs failed")


@click.command()
@_common
@click.option("--harness-bug", type=click.Choice(["corrupt-byte", "drop-completion",
                                                  "stray-write"]),
              default=None, hidden=True, help="Deliberately break the harness of every run.")
def campaign(scenario, size, faults, runs, seed, scheduler, workers, out_dir, simulator,
             harness_bug):
    """Many seeded fault runs of one scenario, as Dask tasks, every run checked.

    Run i draws its faults from seed + i; each run checks the harness invariants
    (docs/campaign.md).  Results stream into OUT/runs.csv and runs.jsonl; a failing
    run's replay command is printed.  Exit status 1 when any run failed.
    """
    from .sim.campaign import campaign_params, run_campaign

    try:
        params = campaign_params(scenario, runs, seed, faults, size, harness_bug=harness_bug,
                                 simulator=simulator)
    except (ValueError, OSError) as exc:
        raise InputError(str(exc)) from None
    try:
        summary = run_campaign(params, out_dir, scheduler=scheduler, workers=workers,
                               title=f"campaign {scenario}")
    except (OSError, TimeoutError) as exc:
        raise InputError(f"cannot run the campaign: {exc}") from None
    _finish(summary, out_dir)


@click.command()
@_common
@click.option("--grid", "grid", multiple=True, required=True, metavar="KEY=V1,V2,...",
              help="A grid axis: a fault kind (loss=0,0.01,0.02), size=8k,16k or "
                   "scenario=NAME,FILE.toml; repeat for more axes.")
def sweep(scenario, size, faults, runs, seed, scheduler, workers, out_dir, simulator, grid):
    """The campaign engine over a parameter grid: --runs seeds per grid point."""
    from .sim.campaign import parse_grid, run_campaign, sweep_params

    try:
        params = sweep_params(scenario, parse_grid(grid), runs, seed, faults, size,
                              simulator=simulator)
    except (ValueError, OSError) as exc:
        raise InputError(str(exc)) from None
    try:
        summary = run_campaign(params, out_dir, scheduler=scheduler, workers=workers,
                               title="sweep " + " x ".join(g.split("=")[0] for g in grid))
    except (OSError, TimeoutError) as exc:
        raise InputError(f"cannot run the sweep: {exc}") from None
    _finish(summary, out_dir)


@click.command()
@click.option("--frames", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Fuzzed frames through the receive path.")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--json", "json_path", type=OUT_FILE, default=None, help="Write the report.")
@click.option("--simulator", type=click.Choice(["verilator", "icarus"]), default=None,
              callback=_set_simulator, help="HDL simulator (default: $MRCNIC_SIM, else verilator).")
def fuzz(frames, seed, json_path, simulator):
    """Fuzzed frames through the RTL receive path: no hang, no write outside a region, every
    frame placed exactly or counted as a drop."""
    import json

    from .sim.fuzz import run_fuzz

    rep = run_fuzz(frames, seed=seed, simulator=simulator)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(rep, fh, indent=2, default=str)
    for k in ("frames", "accepted", "dropped", "placed_exact", "wall_s", "verdict"):
        click.echo(f"{k}: {rep.get(k)}")
    for p in rep.get("problems", [])[:10]:
        click.secho(f"problem: {p}", fg="red", err=True)
    if rep["verdict"] != "pass":
        raise RunFailed(f"{len(rep.get('problems', []))} problems")
