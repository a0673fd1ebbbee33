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


def _print_bench(console, name, rows):
    from rich.table import Table

    table = Table(title=f"{name} throughput (64-bit datapath, one beat per clock is 1.0)")
    for col in ("payload B", "SRH", "frame B", "frames", "beats", "cycles", "beats/cycle"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["payload"]), "yes" if r.get("srh") else "no", str(r["frame_bytes"]),
                      str(r["frames"]), str(r["beats"]), str(r["cycles"]), f"{r['efficiency']:.3f}")
    console.print(table)


if __name__ == "__main__":
    main()
