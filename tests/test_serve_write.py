"""A 64 KiB RDMA WRITE through ``mrcnic sim --serve`` and ``mrcnic fw`` alone.

The commands of docs/mrc-api.md ("A 64 KiB WRITE"), run against the live co-simulated
NICs (the real RTL over TCP, as on a board over UART): nic0 fills its host memory with
seeded data and posts one Write-with-Immediate 512 KiB into nic1's region; nic1's receive
completion with that immediate arrives; nic1's host memory read back equals the data sent,
byte for byte, and the scenario's own repeated WRITEs stay exact beside it.
"""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mrcnic.cli import main
from mrcnic.sim.scenarios import get_scenario

from .test_serve import served

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def fw(target, *args):
    """``mrcnic fw --target T --json ARGS``: the parsed JSON output (exit code 0 asserted)."""
    res = CliRunner().invoke(main, ["fw", "--target", target, "--timeout", "20", "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.mark.slow
def test_64k_write_with_fw_commands_only(tmp_path):
    sc = get_scenario("clean", size=16 * 1024)      # the default pair, examples/nic1.toml
    with served(sc, tmp_path) as (_, _client, _result):
        nics = json.loads((tmp_path / "sim" / "serve.json").read_text())["nics"]
        t0, t1 = (f"tcp:{x['host']}:{x['port']}" for x in sorted(nics, key=lambda x: x["nic"]))
        sent = tmp_path / "sent.bin"
        post = fw(t0, "wr", "post", "--size", "64k", "--imm", "0x6a11", "--pattern", "seed:25",
                  "--save", str(sent), "--peer-config", str(EXAMPLES / "nic1.toml"),
                  "--offset", "512k")
        assert post["opcode"] == "IBV_WR_RDMA_WRITE_WITH_IMM" and post["size"] == 65536
        assert post["va"] == 0x7F0000080000 and sent.stat().st_size == 65536
        cpls = fw(t1, "wr", "wait", "--imm", "0x6a11", "--wait", "1200")
        mine = [c for c in cpls if not c.get("skipped")]   # the scenario's own are skipped
        assert len(mine) == 1, cpls
        assert mine[0]["imm"] == 0x6A11 and mine[0]["opcode"] == "IBV_WC_RECV_RDMA_WITH_IMM"
        cmp = fw(t1, "mem", "dump", "0x180000", "64k", "--compare", str(sent))
        assert cmp["differing_bytes"] == 0, cmp
        # and a region nobody wrote differs from the data (the compare has teeth)
        other = tmp_path / "other.bin"
        other.write_bytes(bytes(b ^ 0xFF for b in sent.read_bytes()[:4096]))
        res = CliRunner().invoke(main, ["fw", "--target", t1, "--timeout", "20", "mem", "dump",
                                        "0x180000", "4k", "--compare", str(other)])
        assert res.exit_code == 1 and "differ" in res.output, res.output
