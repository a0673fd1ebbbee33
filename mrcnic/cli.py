"""The ``mrcnic`` command line (click).

Sub-commands are thin: each parses its options and calls into the package
(``mrcnic.sim``, ``mrcnic.fw``, ``mrcnic.boards``) where the work is done and
tested.  Contract: docs/architecture.md "Command-line contract".
"""

import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

import click

from . import __version__
from .clikit import (CONFIG, EXIT_CODES, EXIT_INTERRUPTED, EXIT_USAGE, OUT_DIR, OUT_FILE, SIZE,
                     InputError, MrcnicGroup, RunFailed)
from .clikit import console as console_  # the CLI's rich Console (160 columns when piped)
from .fw.cli import INT
from .interrupt import sigterm_as_interrupt
from .sim.simulators import SIMULATORS

__all__ = ["main"]

_EPILOG = "Exit codes: " + "; ".join(f"{c} {what}" for c, what in EXIT_CODES.items()) + "."


@click.group(cls=MrcnicGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=_EPILOG)
@click.version_option(__version__, prog_name="mrcnic")
def main():
    """mrcnic: an open NIC for MRC (Multipath Reliable Connection)."""


def _fail(message: str):
    """Bad input found by a command: one ``error:`` line, exit status 2 (mrcnic.clikit)."""
    raise InputError(message)


def _set_simulator(ctx, param, value):
    """``--simulator``: the simulator of every RTL run of this command (as ``$MRCNIC_SIM``);
    its tools are checked here, so a missing one is one error line before anything runs."""
    import os

    from .sim.simulators import SimulatorMissing, resolve, simulator_env
    if value:
        os.environ["MRCNIC_SIM"] = value
    try:
        simulator_env(resolve(value))
    except (SimulatorMissing, ValueError) as exc:
        raise InputError(str(exc)) from None


_SIMULATOR = click.option("--simulator", type=click.Choice(SIMULATORS), default=None,
                          expose_value=False, callback=_set_simulator,
                          help="HDL simulator (default: $MRCNIC_SIM, else verilator; "
                               "its builds are cached).")


def _sim_name() -> str:
    """The simulator this command runs (for status lines)."""
    from .sim.simulators import resolve
    return resolve().capitalize()


_KEEP = click.option("--keep", is_flag=True,
                     help="Keep the temporary build directory (removed by default unless the "
                          "run failed; --build-dir is always kept).")


@contextlib.contextmanager
def _build_dir(build_dir, keep: bool, name: str):
    """The run's build directory: ``build_dir`` if given (kept), else a new temporary one,
    removed when the command ends unless ``keep`` or the command failed (its logs stay)."""
    if build_dir is not None:
        yield build_dir
        return
    tmp = tempfile.mkdtemp(prefix=f"mrcnic-{name}-")
    failed = False
    try:
        yield tmp
    except (SystemExit, click.ClickException) as exc:
        code = exc.code if isinstance(exc, SystemExit) else exc.exit_code
        failed = code not in (0, None, EXIT_USAGE, EXIT_INTERRUPTED)    # a failed run
        raise
    except KeyboardInterrupt:
        raise
    except BaseException:
        failed = True
        raise
    finally:
        if keep or failed:
            if failed and not keep:
                click.echo(f"build directory kept for its logs: {tmp}", err=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)




@main.command()
@click.option("--config", "config_path", required=True, type=CONFIG,
              help="NIC configuration file (TOML, see docs/config.md).")
@click.option("--qp", required=True, type=int, help="QP index: position in the config's [[qps]].")
@click.option("--size", required=True, type=SIZE,
              help="Bytes to write (1..2**31; units: 64k, 1MiB, ...).")
@click.option("--out", type=OUT_FILE, default=None,
              help="pcap of every frame sent (also OUT-p<plane>.pcap per plane).")
@click.option("--peer-config", type=CONFIG, default=None,
              help="The peer's config: its first memory region gives the default VA and rkey.")
@click.option("--va", type=INT, default=None, help="Remote VA (default: peer's first region).")
@click.option("--rkey", type=INT, default=None, help="Remote rkey (default: peer's first region).")
@click.option("--imm", type=INT, default=None, help="Send a Write-with-Immediate with this value.")
@click.option("--seed", type=int, default=1, help="Seed of the random source data.")
@click.option("--json", "json_path", type=OUT_FILE, default=None,
              help="Write a summary as JSON.")
@click.option("--waves", is_flag=True, help="Dump an FST waveform of the run (kept).")
@click.option("--build-dir", type=OUT_DIR, default=None,
              help="Build and run directory (default: a temporary one, removed at the end).")
@_KEEP
@_SIMULATOR
def send(config_path, qp, size, out, peer_config, va, rkey, imm, seed, json_path, waves,
         build_dir, keep):
    """Run the RTL transmit path on one RDMA WRITE and capture the frames."""
    from .sim.send import run_send

    with _build_dir(build_dir, keep or waves, "send") as bdir:
        try:
            summary = run_send(config_path, qp=qp, size=size, out=out, peer_config=peer_config,
                               va=va, rkey=rkey, imm=imm, seed=seed, json_path=json_path,
                               waves=waves, build_dir=bdir)
        except (ValueError, OSError) as exc:
            _fail(str(exc))
        _print_send(summary, kept=bool(build_dir or keep or waves))


def _print_send(summary, kept=True):
    from rich.table import Table

    table = Table(title=f"mrcnic send: {summary['frames']} frames, {summary['bytes']} payload bytes")
    for col in ("plane", "frames", "wire bytes", "EVs"):
        table.add_column(col, justify="right")
    for plane, row in sorted(summary["per_plane"].items()):
        table.add_row(str(plane), str(row["frames"]), str(row["wire_bytes"]), str(row["evs"]))
    console_().print(table)
    for path in summary.get("pcaps", []):
        click.echo(f"wrote {path}")
    if kept:
        click.echo(f"build directory (Verilog, simulator log): {summary['build_dir']}")


@main.command()
@click.option("--config", "config_path", required=True, type=CONFIG,
              help="The receiving NIC's configuration file (TOML).")
@click.argument("pcaps", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=OUT_FILE, default=None,
              help="pcap of every frame the NIC sent in answer (ACK/SACK/NACK).")
@click.option("--json", "json_path", type=OUT_FILE, default=None,
              help="Write the full report (per-frame verdicts, writes, completions) as JSON.")
@click.option("--raw", is_flag=True, help="Feed frames as captured (no arrival-form rewrite).")
@click.option("--waves", is_flag=True, help="Dump an FST waveform of the run (kept).")
@click.option("--build-dir", type=OUT_DIR, default=None,
              help="Build and run directory (default: a temporary one, removed at the end).")
@_KEEP
@_SIMULATOR
def replay(config_path, pcaps, out, json_path, raw, waves, build_dir, keep):
    """Feed the frames of pcap file(s) into the RTL receive path and report what it did."""
    from rich.table import Table

    from .sim.replay import run_replay

    console = console_()
    kept = bool(build_dir or keep or waves)
    with _build_dir(build_dir, kept, "replay") as bdir:
        try:
            with console.status(f"simulating the receive pipeline ({_sim_name()})..."):
                report = run_replay(config_path, pcaps, out=out, json_path=json_path, raw=raw,
                                    waves=waves, build_dir=bdir)
        except (ValueError, OSError) as exc:
            _fail(str(exc))
    table = Table(title=f"mrcnic replay: {report['frames']} frames")
    for col in ("#", "plane", "bytes", "verdict", "fate"):
        table.add_column(col, justify="right")
    for v in report["verdicts"][:200]:
        fate = v.get("fate", v["verdict"])
        style = ("red" if v["verdict"] != "accepted" else None if fate.startswith("placed")
                 else "yellow")
        table.add_row(str(v["index"]), str(v["plane"]), str(v["length"]), v["verdict"],
                      fate, style=style)
    console.print(table)
    if len(report["verdicts"]) > 200:
        console.print(f"... {len(report['verdicts']) - 200} more (see --json)")
    console.print(f"memory: {report['bytes_written']} bytes written in {len(report['writes'])} "
                  f"range(s), {report['rewritten_bytes']} written twice; "
                  f"completions: {len(report['completions'])}; ACK frames sent: {report['acks']}")
    for path in report.get("pcaps", []):
        click.echo(f"wrote {path}")
    if kept:
        click.echo(f"build directory (Verilog, simulator log): {report['build_dir']}")


@main.command()
@click.option("--scenario", default="default", show_default=True,
              help="Built-in scenario (default, clean, plane-down, link-flap, trim-incast, "
                   "incast-8, ecn) or a scenario file FILE.toml (docs/scenarios.md).")
@click.option("--json", "json_path", type=OUT_FILE, default=None,
              help="Write the report as JSON.")
@click.option("--pcap", type=OUT_FILE, default=None,
              help="Write the fabric's traffic as pcapng: one interface per link direction "
                   "(e.g. p2.leaf0->p2.spine6), comments on trimmed and lost frames "
                   "(docs/wire-format.md: Wireshark dissector).")
@click.option("--plot", type=OUT_FILE, default=None,
              help="Write a PNG of the per-plane throughput over time, failures marked.")
@click.option("--waves", is_flag=True, help="Dump an FST waveform of the run.")
@click.option("--size", type=SIZE, default=None,
              help="Bytes per RDMA WRITE (default: the scenario's; units: 64k, 1MiB, ...).")
@click.option("--build-dir", type=OUT_DIR, default=None,
              help="Build and run directory (default: a temporary one, removed at the end).")
@_KEEP
@_SIMULATOR
@click.option("--serve", "serve_port", type=click.IntRange(0, 65535), default=None,
              help="Keep the NICs running (transfers repeated) and serve a NIC's CSR bank on "
                   "tcp:127.0.0.1:PORT for 'mrcnic fw --target tcp:...' (0: a free port).")
@click.option("--serve-time", "serve_time_us", type=click.FloatRange(min=0, min_open=True),
              default=None, help="With --serve: stop after this many simulated us "
                                 "(default: run until Ctrl-C).")
@click.option("--serve-nic", type=click.IntRange(0, 15), default=0, show_default=True,
              help="With --serve: the NIC served on PORT itself; the others follow on "
                   "PORT+1, PORT+2, ... in NIC order.")
@click.option("--faults", default=None, metavar="SPEC",
              help="Seeded random faults in the fabric, e.g. 'loss=0:0.01,corrupt=0.002,"
                   "dup=0.01,reorder=0.02,trim=0.01,flaps=0:2' (kinds: docs/campaign.md); "
                   "the run's invariants then decide the exit status.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="With --faults: the seed the faults are drawn from (a campaign's failing "
                   "run prints the command that replays it).")
@click.option("--harness-bug", type=click.Choice(["corrupt-byte", "drop-completion",
                                                  "stray-write"]),
              default=None, hidden=True,
              help="Deliberately break the harness (proves the invariants catch it).")
def sim(scenario, json_path, pcap, plot, waves, size, build_dir, keep, serve_port, serve_time_us,
        serve_nic, faults, seed, harness_bug):
    """Run RTL NICs (cocotb + Verilator or Icarus) across the fabric model on a scenario.

    Exit status 0 when every byte arrived intact, or when a served run (--serve) was
    stopped as asked (Ctrl-C, --serve-time, the stop file: "stopped" in the report);
    1 when the transfer is incomplete or corrupted; 2 for bad usage (an unknown option,
    scenario or value); 130 when an ordinary run is interrupted.
    """
    from .sim.cosim import run_cosim
    from .sim.scenario_file import resolve_scenario

    try:        # a built-in name or a file, both read by the scenario-file loader
        sc = resolve_scenario(scenario, size=size)
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    if faults is not None:
        from .sim.faults import parse_spec
        try:
            parse_spec(faults)
        except ValueError as exc:
            _fail(f"--faults: {exc}")
    kept = bool(build_dir or keep or waves)
    with _build_dir(build_dir, kept, "sim") as bdir:
        try:
            report = run_cosim(sc, json_path=json_path, pcap=pcap, plot=plot,
                               waves=waves, build_dir=bdir, progress=True, serve=serve_port,
                               serve_time_us=serve_time_us, serve_nic=serve_nic,
                               faults=faults, seed=seed, harness_bug=harness_bug)
        except (ValueError, OSError) as exc:
            _fail(str(exc))
        except AssertionError as exc:       # the simulation itself failed: one line, exit 1
            raise RunFailed(_sim_failure(exc, bdir)) from None
        _print_sim(scenario, report, (json_path, pcap, plot), kept)


def _sim_failure(exc, build_dir) -> str:
    """One line for a simulation that failed (``AssertionError`` of run_cosim): its message
    and the last exception line of the simulator log (``<build_dir>/sim/sim.log``), which
    names the cause (e.g. an output file that could no longer be written)."""
    log = Path(build_dir) / "sim" / "sim.log"
    cause = ""
    if log.exists():
        import re
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines()
                 if re.match(r"\s*\w+(Error|Exception)\b.*:", ln)]
        cause = f": {lines[-1]}" if lines else ""
    return f"{exc}{cause} (log: {log})"


def _print_sim(scenario, report, outputs, kept):
    """Print the summary table of a ``mrcnic sim`` run; exit with its status (see ``sim``)."""
    from rich.table import Table

    from .sim.report import summary_rows
    table = Table(title=f"mrcnic sim {scenario}: {report['description']}", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    for name, value in summary_rows(report):
        table.add_row(name, value)
    console_().print(table)
    json_path, pcap, plot = outputs
    for path in (json_path, pcap, *(report.get("plots") or [plot]), report.get("waves")):
        if path:
            click.echo(f"wrote {path}")
    if kept:
        click.echo(f"build directory (Verilog, simulator log): {report['build_dir']}")
    for w in report.get("warnings", []):
        click.secho(f"warning: {w}", fg="yellow", err=True)
    if (report.get("faults") or report.get("harness_bug")) and report.get("verdict") == "fail":
        bad = [f"{n}: {v['detail']}" for n, v in report["invariants"].items() if not v["ok"]]
        raise RunFailed("invariants failed: " + "; ".join(bad))
    if report["bytes_mismatched"]:
        raise RunFailed(f"{report['bytes_mismatched']} bytes mismatched")
    if report.get("stopped"):
        click.secho(f"stopped ({report['stopped']})", fg="green", err=True)
        return
    if report.get("interrupted"):
        click.secho("interrupted (Ctrl-C or SIGTERM)", fg="yellow", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if not report["complete"]:
        raise RunFailed("transfer incomplete" + (" (stalled)" if report.get("stalled") else ""))


@main.group()
def bench():
    """Cycle-accurate throughput benchmarks (beats / cycles)."""


_PACKETS = click.option("--packets", type=click.IntRange(1, 64), default=48, show_default=True,
                        help="Back-to-back packets per case.")
_BENCH_JSON = click.option("--json", "json_path", type=OUT_FILE, default=None,
                           help="Write the rows as JSON.")


_BENCH_CLOCK = click.option("--clock-mhz", type=click.FloatRange(min=0, min_open=True),
                            default=125.0, show_default=True,
                            help="NIC clock for the Gb/s column (Gb/s = frame bytes x 8 / cycles x "
                                 "clock: the frames' own bits, not a last beat's idle bytes).")
_BENCH_DIR = click.option("--build-dir", type=OUT_DIR, default=None,
                          help="Build and run directory (default: a temporary one, removed at "
                               "the end).")


@bench.command("tx")
@_BENCH_JSON
@_PACKETS
@_BENCH_CLOCK
@_BENCH_DIR
@_KEEP
@_SIMULATOR
def bench_tx_cmd(json_path, packets, clock_mhz, build_dir, keep):
    """Transmit pipeline: beats and cycles per payload size, with and without SRH."""
    from .sim.bench import bench_tx
    _run_bench("tx", "transmit", bench_tx, packets, json_path, clock_mhz, build_dir, keep)


@bench.command("rx")
@_BENCH_JSON
@_PACKETS
@_BENCH_CLOCK
@_BENCH_DIR
@_KEEP
@_SIMULATOR
def bench_rx_cmd(json_path, packets, clock_mhz, build_dir, keep):
    """Receive pipeline: input beats and cycles per payload size (valid frames, one plane)."""
    from .sim.bench import bench_rx
    _run_bench("rx", "receive", bench_rx, packets, json_path, clock_mhz, build_dir, keep)


@bench.command("sim")
@_BENCH_JSON
@click.option("--simulator", "simulators", type=click.Choice(SIMULATORS), multiple=True,
              help="Measure only this simulator (repeatable; default: all).")
@click.option("--scenario", default="default", show_default=True,
              help="The mrcnic sim scenario to time.")
@click.option("--clock-cycles", type=click.IntRange(1000), default=None,
              help="Cycles of the clock-only run (default: 200000 on Verilator, 5000 on Icarus).")
@click.option("--no-cold", is_flag=True, help="Skip the cold (uncached) build timing.")
@_BENCH_DIR
@_KEEP
def bench_sim_cmd(json_path, simulators, scenario, clock_cycles, no_cold, build_dir, keep):
    """Simulation speed: NIC clock cycles per wall second of the 2-NIC top with only a clock
    and of 'mrcnic sim' (SCENARIO), under each simulator; cold and cached build times."""
    import json

    from rich.table import Table

    from .sim.bench import bench_sim
    from .sim.scenarios import scenario_names

    if scenario not in scenario_names():
        _fail(f"unknown scenario {scenario!r} (built in: {', '.join(scenario_names())})")
    console = console_()
    with _build_dir(build_dir, keep, "bench-sim") as bdir:
        try:
            with console.status("starting") as status:
                res = bench_sim(simulators or None, scenario=scenario, clock_cycles=clock_cycles,
                                cold=not no_cold, build_dir=bdir,
                                progress=lambda text: status.update(text))
        except (ValueError, RuntimeError, OSError, AssertionError) as exc:
            raise RunFailed(f"{exc} (build directory: {bdir})") from None
        table = Table(title=f"simulation speed: NIC clock cycles per wall second "
                            f"(2 NICs, scenario {scenario})")
        for col in ("simulator", "clock only", f"{scenario}", "harness", "python share",
                    "sim wall s", "build cold s", "build cached s"):
            table.add_column(col, justify="right")
        for r in res["rows"]:
            share = r.get("python_share")
            table.add_row(r["simulator"], f"{r['clock_cps']:,.0f}", f"{r['scenario_cps']:,.0f}",
                          f"{r['harness']:.2f}", "-" if share is None else f"{share:.2f}",
                          f"{r['sim_wall_s']:.1f}",
                          "-" if r["build_cold_s"] is None else f"{r['build_cold_s']:.1f}",
                          f"{r['build_cached_s']:.2f}")
        console.print(table)
        if res["verilator_over_icarus"]:
            console.print(f"verilator / icarus ({scenario}): {res['verilator_over_icarus']:.1f}x")
        if res.get("commit"):
            console.print(f"sources: {res['commit']}")
        if json_path:
            with open(json_path, "w") as fh:
                json.dump(dict(res, bench="sim"), fh, indent=2)
            click.echo(f"wrote {json_path}")
        if build_dir or keep:
            click.echo(f"build directory: {bdir}")
        if not all(r["complete"] for r in res["rows"]):
            raise RunFailed("a scenario run did not complete")


@bench.command("scenarios")
@_BENCH_JSON
@click.option("--scenario", "names", multiple=True,
              help="Run only this built-in scenario (repeatable; default: every one).")
@click.option("--simulator", type=click.Choice(SIMULATORS), default=None,
              help="HDL simulator (default: $MRCNIC_SIM, else verilator).")
@_BENCH_DIR
@_KEEP
def bench_scenarios_cmd(json_path, names, simulator, build_dir, keep):
    """Every built-in scenario at the size users run, checked against what it must show
    (mrcnic.sim.expect): completion against ideal, timeouts, EV events, fairness."""
    import json

    from rich.table import Table

    from .sim.cosim import run_cosim
    from .sim.expect import LIMITS, check, sender_times
    from .sim.scenarios import scenario_names

    names = list(names) or [n for n in scenario_names() if n in LIMITS]
    for n in names:
        if n not in LIMITS:
            _fail(f"unknown scenario {n!r} (built in: {', '.join(LIMITS)})")
    console = console_()
    rows = []
    with _build_dir(build_dir, keep, "bench-scenarios") as bdir:
        for n in names:
            with console.status(f"{n}: simulating"):
                try:
                    rep = run_cosim(n, build_dir=Path(bdir) / n, simulator=simulator)
                except (ValueError, RuntimeError, OSError, AssertionError) as exc:
                    raise RunFailed(f"{n}: {exc} (build directory: {bdir})") from None
            times = sender_times(rep)
            cpl = rep.get("completion_ns")
            rows.append(dict(
                scenario=n, size=rep["size"], complete=bool(rep.get("complete")),
                completion_us=None if cpl is None else round(cpl / 1000, 2),
                ideal_us=round(rep["ideal_ns"] / 1000, 2),
                x_ideal=None if cpl is None else round(cpl / rep["ideal_ns"], 3),
                limit=LIMITS[n], timeouts=sum(c.get("timeouts", 0) for c in rep["nic_counters"]),
                ev_events=len(rep["ev_events"]), trimmed=rep["trimmed"],
                retransmissions=rep["retransmissions"],
                fairness=(round(max(times.values()) / min(times.values()), 3)
                          if len(times) > 1 and min(times.values()) > 0 else None),
                wall_s=rep["sim"]["wall_s"], problems=check(rep)))
            console.print(f"{n}: {'ok' if not rows[-1]['problems'] else 'FAILED'}")
    table = Table(title="built-in scenarios at their default sizes")
    for col in ("scenario", "size", "completion us", "x ideal", "limit", "timeouts",
                "EV events", "trimmed", "retx", "fairness", "wall s", "verdict"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["scenario"], f"{r['size'] // 1024} KiB",
                      "-" if r["completion_us"] is None else f"{r['completion_us']:.1f}",
                      "-" if r["x_ideal"] is None else f"{r['x_ideal']:.2f}", f"{r['limit']}",
                      str(r["timeouts"]), str(r["ev_events"]), str(r["trimmed"]),
                      str(r["retransmissions"]),
                      "-" if r["fairness"] is None else f"{r['fairness']:.2f}",
                      f"{r['wall_s']:.0f}", "ok" if not r["problems"] else "; ".join(r["problems"]))
    console.print(table)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump({"bench": "scenarios", "rows": rows}, fh, indent=2)
        click.echo(f"wrote {json_path}")
    if any(r["problems"] for r in rows):
        raise RunFailed("a scenario did not show what it must (see the table)")


@bench.command("fabric")
@_BENCH_JSON
@click.option("--mode", "modes", multiple=True, type=click.Choice(["ecmp", "oblivious", "mrc"]),
              help="Load-balancing mode (repeatable; default: ecmp, oblivious, mrc).")
@click.option("--condition", "conditions", multiple=True,
              type=click.Choice(["healthy", "slow", "failed"]),
              help="Fabric condition (repeatable; default: healthy, slow, failed).")
@click.option("--size", type=SIZE, default="256k", show_default=True,
              help="Bytes per flow (one RDMA WRITE per NIC).")
@click.option("--seed", type=click.IntRange(min=0), default=7, show_default=True,
              help="Seed of the permutation (7: every flow crosses leaves).")
@click.option("--plot", type=OUT_FILE, default=None, help="Write the FCT CDFs (PNG).")
@click.option("--simulator", type=click.Choice(SIMULATORS), default=None,
              help="HDL simulator (default: $MRCNIC_SIM, else verilator).")
@_BENCH_DIR
@_KEEP
def bench_fabric_cmd(json_path, modes, conditions, size, seed, plot, simulator, build_dir, keep):
    """Spray vs ECMP: a permutation across 8 RTL NICs on a 4-plane 2-tier Clos, healthy /
    one fabric link at 25 % rate / that link failed mid-run, in each load-balancing mode
    (mrcnic.sim.fabricbench).  Exit 1 when a run does not deliver every byte exactly."""
    import json

    from rich.table import Table

    from .sim.fabricbench import CONDITIONS, MODES, run_fabric_bench, size_text

    console = console_()
    with _build_dir(build_dir, keep, "bench-fabric") as bdir:
        try:
            with console.status("bench fabric") as status:
                res = run_fabric_bench(modes or MODES, conditions or CONDITIONS, size=size,
                                       seed=seed, build_dir=bdir, simulator=simulator,
                                       plot=plot, progress=lambda t: status.update(
                                           f"bench fabric: {t} (8 NICs; first run builds)"))
        except (ValueError, RuntimeError, OSError, AssertionError) as exc:
            raise RunFailed(f"{exc} (build directory: {bdir})") from None
    table = Table(title=f"bench fabric: 8-NIC permutation, {size_text(size)} per flow, "
                        "per-flow throughput as a fraction of ideal")
    for col in ("condition", "mode", "mean", "min", "mean Gb/s", "min Gb/s", "p99 FCT us",
                "p99 x healthy", "retx", "trimmed", "EV events", "exact", "wall s"):
        table.add_column(col, justify="right", overflow="fold")     # narrow: fold, never "..."
    for r in res["runs"]:
        exact = r["complete"] and r["bytes_delivered"] == r["bytes_posted"] \
            and not r["bytes_mismatched"]
        table.add_row(r["condition"], r["mode"], f"{r['mean_frac_ideal']:.2f}",
                      f"{r['min_frac_ideal']:.2f}", f"{r['mean_gbps']:.2f}",
                      f"{r['min_gbps']:.2f}", f"{r['fct_p99_us']}",
                      "-" if r["p99_vs_healthy"] is None else f"{r['p99_vs_healthy']:.2f}",
                      str(r["retransmissions"]), str(r["trimmed"]), str(r["ev_events"]),
                      "yes" if exact else "NO", f"{r['wall_s']:.0f}")
    console.print(table)
    for r in res["runs"]:
        for w in r.get("warnings", []):
            click.secho(f"warning: {r['mode']} / {r['condition']}: {w}", fg="yellow", err=True)
    if json_path:
        Path(json_path).write_text(json.dumps(res, indent=1))
        click.echo(f"wrote {json_path}")
    if plot:
        click.echo(f"wrote {plot}")
    if not all(r["complete"] and r["bytes_delivered"] == r["bytes_posted"]
               and not r["bytes_mismatched"] for r in res["runs"]):
        raise RunFailed("a run did not deliver every byte exactly (see the table)")


def _run_bench(name, pipeline, bench_fn, packets, json_path, clock_mhz=125.0, build_dir=None,
               keep=False):
    """Run one bench with a status line, print its table, write its JSON.

    Each row gains ``gbps``: the frame bits moved per second at ``clock_mhz`` (frames x frame
    bytes x 8 / cycles x clock: the frames' own bytes, not the idle bytes of a last beat),
    unrounded (the table shows two decimals).
    """
    import json

    console = console_()
    with _build_dir(build_dir, keep, f"bench-{name}") as bdir:
        try:
            with console.status(f"simulating the {pipeline} pipeline ({_sim_name()})..."):
                rows = bench_fn(packets=packets, build_dir=bdir)
        except (ValueError, RuntimeError, OSError) as exc:
            raise RunFailed(f"{exc} (build directory: {bdir})") from None
        for r in rows:
            r["clock_mhz"] = clock_mhz
            r["gbps"] = r["frames"] * r["frame_bytes"] * 8 * clock_mhz / 1e3 / r["cycles"]
        _print_bench(console, name.upper(), rows, clock_mhz)
        if json_path:
            with open(json_path, "w") as fh:
                json.dump({"bench": name, "clock_mhz": clock_mhz, "rows": rows}, fh, indent=2)
            click.echo(f"wrote {json_path}")
        if build_dir or keep:
            click.echo(f"build directory (Verilog, simulator log): {bdir}")


def _print_bench(console, name, rows, clock_mhz=125.0):
    from rich.table import Table

    table = Table(title=f"{name} throughput (64-bit datapath, one beat per clock is 1.0; "
                        f"Gb/s of frame bytes at {clock_mhz:g} MHz)")
    for col in ("payload B", "SRH", "frame B", "frames", "beats", "cycles", "beats/cycle",
                "Gb/s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["payload"]), "yes" if r.get("srh") else "no", str(r["frame_bytes"]),
                      str(r["frames"]), str(r["beats"]), str(r["cycles"]), f"{r['efficiency']:.3f}",
                      f"{r['gbps']:.2f}")
    console.print(table)


@main.command()
@click.option("--board", required=True,
              help="Board: colorlight-5a75b (Colorlight 5A-75B v7.0) or versa-ecp5 (ECP5 Versa); "
                   "colorlight / versa for short.")
@click.option("--json", "json_path", type=OUT_FILE, default=None,
              help="Write the build summary (board, device, fmax_mhz, ...) as JSON.")
@click.option("--build-dir", type=OUT_DIR, default="build", show_default=True,
              help="Build directory (the board's files go to BUILD_DIR/<board name>).")
@click.option("--seed", type=int, default=1, show_default=True, help="nextpnr placement seed.")
def build(board, json_path, build_dir, seed):
    """Build a board's bitstream with YoWASP Yosys / nextpnr-ecp5 / ecppack.

    Exits 1 when timing is not met (the bitstream and the numbers are still written), and
    when there is no bitstream: the design does not fit, or it packs above 85 % of the
    device's LUT4s, where nextpnr's placer does not converge (the packed numbers are written).
    """
    import json
    import time

    from rich.table import Table

    from .boards.build import BuildError, build_board, resolve_board

    try:
        board = resolve_board(board)
    except ValueError as exc:
        _fail(str(exc))
    console = console_()
    labels = {"elaborate": "elaborating (Amaranth)", "synth": "synthesis (Yosys)",
              "pnr": "place and route (nextpnr-ecp5)", "pack": "bitstream (ecppack)"}
    status = console.status("starting")
    status.start()
    started = {}

    def progress(step, state, seconds):
        if state == "start":
            started[step] = time.monotonic()
            status.update(f"{labels.get(step, step)}...")
        elif state == "failed":
            console.print(f"[red]failed[/red] {labels.get(step, step)} after {seconds:.0f} s")
        else:
            console.print(f"[green]done[/green] {labels.get(step, step)} in {seconds:.0f} s")
    try:
        with sigterm_as_interrupt():        # Ctrl-C / SIGTERM: the running tool is killed too
            summary = build_board(board, build_dir, progress=progress, seed=seed)
    except (BuildError, ValueError, OSError) as exc:
        status.stop()
        _fail(str(exc))
    except KeyboardInterrupt:
        status.stop()
        click.secho("interrupted (Ctrl-C or SIGTERM): the build was stopped", fg="yellow",
                    err=True)
        sys.exit(EXIT_INTERRUPTED)
    status.stop()
    table = Table(title=f"mrcnic build {board} ({summary['device']})", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    util = summary["utilisation"]

    def of(bel, value):
        avail = util.get(bel, {}).get("available")
        return f"{value} / {avail}" if avail else str(value)
    table.add_row("Fmax (MHz)", f"{summary['fmax_mhz']} (target {summary['target_mhz']})")
    for net, c in summary["clocks"].items():
        table.add_row(f"  {net}", f"{c['fmax_mhz']} / {c['target_mhz']}")
    table.add_row("LUT4", of("TRELLIS_COMB", summary["luts"]))
    table.add_row("FF", of("TRELLIS_FF", summary["ffs"]))
    table.add_row("EBR (DP16KD)", of("DP16KD", summary["ebrs"]))
    table.add_row("timing", "met" if summary["timing_met"] else "NOT met")
    if summary.get("error"):
        table.add_row("error", summary["error"])
    table.add_row("bitstream", str(summary["bitstream"]))
    console.print(table)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(summary, fh, indent=2)
        click.echo(f"wrote {json_path}")
    if summary.get("error"):
        raise RunFailed(f"no bitstream: {summary['error']}")
    if not summary["timing_met"]:
        raise RunFailed("timing not met")


from .fw.cli import fw as _fw  # noqa: E402  (the `mrcnic fw` group, fw/cli.py)

main.add_command(_fw)

if __name__ == "__main__":
    main()


# fault campaigns, sweeps and the receive-path fuzzer (mrcnic/campaign_cli.py)
from .campaign_cli import campaign, fuzz, sweep  # noqa: E402

main.add_command(campaign)
main.add_command(sweep)
main.add_command(fuzz)
