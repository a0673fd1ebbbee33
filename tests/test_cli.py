"""The command line as a user runs it: send -> pcap -> replay, benches, clear errors."""

import json
from pathlib import Path

from click.testing import CliRunner
from scapy.utils import rdpcap

from mrcnic import wire
from mrcnic.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_send_then_replay(tmp_path):
    """A pcap written by ``mrcnic send`` replays into the receiver: the write lands, ACKs come back."""
    runner = CliRunner()
    tx_pcap, ack_pcap = tmp_path / "tx.pcap", tmp_path / "acks.pcap"
    res = runner.invoke(main, ["send", "--config", str(EXAMPLES / "two_nics.toml"), "--qp", "0",
                               "--size", "5000", "--peer-config", str(EXAMPLES / "nic1.toml"),
                               "--out", str(tx_pcap), "--json", str(tmp_path / "send.json")])
    assert res.exit_code == 0, res.output
    # a temporary build directory is removed at the end (not named: it is gone)
    assert "build directory" not in res.output
    assert not Path(json.loads((tmp_path / "send.json").read_text())["build_dir"]).exists()
    frames = rdpcap(str(tx_pcap))
    assert len(frames) == 5
    assert all(wire.check_icrc(bytes(f), 0xFC000000) for f in frames)
    assert sorted(p.name for p in tmp_path.glob("tx-p*.pcap"))
    planes = sorted(tmp_path.glob("tx-p*.pcap"))
    res = runner.invoke(main, ["replay", "--config", str(EXAMPLES / "nic1.toml"),
                               *map(str, planes), "--out", str(ack_pcap),
                               "--json", str(tmp_path / "replay.json"),
                               "--build-dir", str(tmp_path / "rb")])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "replay.json").read_text())
    assert f"build directory (Verilog, simulator log): {report['build_dir']}" in res.output
    assert [v["verdict"] for v in report["verdicts"]] == ["accepted"] * 5
    assert report["bytes_written"] == 5000 and report["rewritten_bytes"] == 0
    assert len(report["completions"]) == 1
    acks = rdpcap(str(ack_pcap))
    assert len(acks) >= 1
    assert any(a["BTH"].psn == 4 for a in acks)        # the cumulative ACK reaches the end


def test_send_refuses_bad_arguments(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["send", "--config", str(EXAMPLES / "two_nics.toml"), "--qp", "7",
                               "--size", "100"])
    assert res.exit_code == 2 and "--qp 7" in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text((EXAMPLES / "two_nics.toml").read_text().replace("pmtu = 1024", "pmtu = 1000"))
    res = runner.invoke(main, ["send", "--config", str(bad), "--qp", "0", "--size", "100"])
    assert res.exit_code == 2 and "nic.pmtu" in res.output and "bad.toml" in res.output
