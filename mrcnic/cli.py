"""The ``mrcnic`` command line (click).

Sub-commands are thin: each parses its options and calls into the package
(``mrcnic.sim``, ``mrcnic.fw``, ``mrcnic.boards``) where the work is done and
tested.  Contract: ../shared/DESIGN.md "Command line".
"""

import sys

import click

from . import __version__

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mrcnic")
def main():
    """mrcnic: an open NIC for MRC (Multipath Reliable Connection)."""


def _fail(message: str):
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(2)


class _IntType(click.ParamType):
    name = "INT"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return int(value, 0)
        except ValueError:
            self.fail(f"{value!r} is not an integer (decimal or 0x...)", param, ctx)


INT = _IntType()


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="NIC configuration file (TOML, see docs/config.md).")
@click.option("--qp", required=True, type=int, help="QP index: position in the config's [[qps]].")
@click.option("--size", required=True, type=INT, help="Bytes to write (1..2**31).")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="pcap of every frame sent (also OUT-p<plane>.pcap per plane).")
@click.option("--peer-config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The peer's config: its first memory region gives the default VA and rkey.")
@click.option("--va", type=INT, default=None, help="Remote VA (default: peer's first region).")
@click.option("--rkey", type=INT, default=None, help="Remote rkey (default: peer's first region).")
@click.option("--imm", type=INT, default=None, help="Send a Write-with-Immediate with this value.")
@click.option("--seed", type=int, default=1, help="Seed of the random source data.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write a summary as JSON.")
@click.option("--waves", is_flag=True, help="Dump an FST waveform of the run.")
def send(config_path, qp, size, out, peer_config, va, rkey, imm, seed, json_path, waves):
    """Run the RTL transmit path on one RDMA WRITE and capture the frames."""
    from .sim.send import run_send

    try:
        summary = run_send(config_path, qp=qp, size=size, out=out, peer_config=peer_config,
                           va=va, rkey=rkey, imm=imm, seed=seed, json_path=json_path,
                           waves=waves)
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    _print_send(summary)


def _print_send(summary):
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"mrcnic send: {summary['frames']} frames, {summary['bytes']} payload bytes")
    for col in ("plane", "frames", "wire bytes", "EVs"):
        table.add_column(col, justify="right")
    for plane, row in sorted(summary["per_plane"].items()):
        table.add_row(str(plane), str(row["frames"]), str(row["wire_bytes"]), str(row["evs"]))
    Console().print(table)
    for path in summary.get("pcaps", []):
        click.echo(f"wrote {path}")


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The receiving NIC's configuration file (TOML).")
@click.argument("pcaps", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="pcap of every frame the NIC sent in answer (ACK/SACK/NACK).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the full report (per-frame verdicts, writes, completions) as JSON.")
@click.option("--raw", is_flag=True, help="Feed frames as captured (no arrival-form rewrite).")
@click.option("--waves", is_flag=True, help="Dump an FST waveform of the run.")
def replay(config_path, pcaps, out, json_path, raw, waves):
    """Feed the frames of pcap file(s) into the RTL receive path and report what it did."""
    from rich.console import Console
    from rich.table import Table

    from .sim.replay import run_replay

    console = Console()
    try:
        with console.status("simulating the receive pipeline (Icarus)..."):
            report = run_replay(config_path, pcaps, out=out, json_path=json_path, raw=raw,
                                waves=waves)
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    table = Table(title=f"mrcnic replay: {report['frames']} frames")
    for col in ("#", "plane", "bytes", "verdict"):
        table.add_column(col, justify="right")
    for v in report["verdicts"][:200]:
        style = None if v["verdict"] == "accepted" else "red"
        table.add_row(str(v["index"]), str(v["plane"]), str(v["length"]), v["verdict"],
                      style=style)
    console.print(table)
    if len(report["verdicts"]) > 200:
        console.print(f"... {len(report['verdicts']) - 200} more (see --json)")
    console.print(f"memory: {report['bytes_written']} bytes written in {len(report['writes'])} "
                  f"range(s), {report['rewritten_bytes']} written twice; "
                  f"completions: {len(report['completions'])}; ACK frames sent: {report['acks']}")
    for path in report.get("pcaps", []):
        click.echo(f"wrote {path}")


@main.group()
def bench():
    """Cycle-accurate throughput benchmarks (beats / cycles)."""


@bench.command("tx")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the rows as JSON.")
@click.option("--packets", type=int, default=48, show_default=True,
              help="Back-to-back packets per case.")
def bench_tx_cmd(json_path, packets):
    """Transmit pipeline: beats and cycles per payload size, with and without SRH."""
    import json

    from rich.console import Console

    from .sim.bench import bench_tx

    console = Console()
    with console.status("simulating the transmit pipeline (Icarus)..."):
        rows = bench_tx(packets=packets)
    _print_bench(console, "TX", rows)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump({"bench": "tx", "rows": rows}, fh, indent=2)
        click.echo(f"wrote {json_path}")


@bench.command("rx")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the rows as JSON.")
@click.option("--packets", type=int, default=48, show_default=True,
              help="Back-to-back packets per case.")
def bench_rx_cmd(json_path, packets):
    """Receive pipeline: input beats and cycles per payload size (valid frames, one plane)."""
    import json

    from rich.console import Console

    from .sim.bench import bench_rx

    console = Console()
    with console.status("simulating the receive pipeline (Icarus)..."):
        rows = bench_rx(packets=packets)
    _print_bench(console, "RX", rows)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump({"bench": "rx", "rows": rows}, fh, indent=2)
        click.echo(f"wrote {json_path}")


def _print_bench(console, name, rows):
    from rich.table import Table

    table = Table(title=f"{name} throughput (64-bit datapath, one beat per clock is 1.0)")
    for col in ("payload B", "SRH", "frame B", "frames", "beats", "cycles", "beats/cycle"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["payload"]), "yes" if r.get("srh") else "no", str(r["frame_bytes"]),
                      str(r["frames"]), str(r["beats"]), str(r["cycles"]), f"{r['efficiency']:.3f}")
    console.print(table)


from .fw.cli import fw as _fw  # noqa: E402  (the `mrcnic fw` group, fw/cli.py)

main.add_command(_fw)

if __name__ == "__main__":
    main()
