"""The command line's contract with its users (mrcnic/clikit.py, README "Exit codes").

* a table of commands x bad inputs: each fails before building anything, with its documented
  exit code and one ``error: <command>: ...`` line, no traceback;
* sizes with units; output paths checked while parsing (``--json /nonexistent/x.json``
  fails in under 2 s in a fresh process);
* ``fw provision --dry-run`` needs no target; fw table reads use one multi-word read;
* Ctrl-C (SIGINT to the process group, as ``timeout -s INT`` and a terminal send it) stops
  ``mrcnic sim`` with 130 within 3 s and leaves no simulator process;
* temporary build directories are removed unless ``--build-dir``/``--keep``.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mrcnic.cli import main
from mrcnic.clikit import EXIT_CODES, parse_size
from mrcnic.resources import example

EX = str(example("two_nics.toml"))
EX1 = str(example("nic1.toml"))


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


BAD = [
    # (argv, exit code, text in the one error line)
    (["sim", "--json", "/nonexistent/x.json"], 2, "folder /nonexistent does not exist"),
    (["sim", "--pcap", "/nonexistent/x.pcapng"], 2, "--pcap"),
    (["sim", "--plot", "{tmp}"], 2, "is a directory"),
    (["sim", "--size", "64q"], 2, "is not a size"),
    (["sim", "--size", "1.5"], 2, "whole number of bytes"),
    (["sim", "--scenario", "nope"], 2, "unknown scenario"),
    (["sim", "--bogus"], 2, "No such option"),
    (["sim", "--build-dir", "{file}/x"], 2, "is not a directory"),
    (["sim", "--serve", "0", "--serve-time", "0"], 2, "--serve-time"),
    (["send", "--config", EX, "--qp", "0", "--size", "1x"], 2, "is not a size"),
    (["send", "--config", "/nonexistent.toml", "--qp", "0", "--size", "64k"], 2, "--config"),
    (["send", "--config", EX, "--qp", "0", "--size", "64k", "--out", "/nonexistent/t.pcap"], 2,
     "--out"),
    (["send", "--config", EX, "--qp", "7", "--size", "100"], 2, "--qp 7"),
    (["replay", "--config", EX1, "/nonexistent.pcap"], 2, "/nonexistent.pcap"),
    (["replay", "--config", EX1, "{file}", "--json", "/nonexistent/r.json"], 2, "--json"),
    (["bench", "tx", "--json", "/nonexistent/b.json"], 2, "--json"),
    (["bench", "rx", "--clock-mhz", "0"], 2, "--clock-mhz"),
    (["bench", "tx", "--packets", "0"], 2, "--packets"),
    (["build", "--board", "nope"], 2, "nope"),
    (["build", "--board", "versa", "--json", "/nonexistent/x.json"], 2, "--json"),
    (["fw", "device"], 2, "no target"),
    (["fw", "--target", "tcp:nohost", "device"], 2, "--target"),
    (["fw", "--target", "tcp:127.0.0.1:1", "--timeout", "-1", "device"], 2, "--timeout"),
    (["fw", "--target", "tcp:127.0.0.1:{port}", "device"], 1, "cannot connect"),
    (["fw", "provision", "/nonexistent.toml"], 2, "CONFIG_FILE"),
    (["nope"], 2, "No such command"),
]


@pytest.mark.parametrize("argv,code,text", BAD, ids=[" ".join(b[0])[:60] for b in BAD])
def test_bad_input_table(argv, code, text, tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    argv = [a.format(tmp=tmp_path, file=f, port=_free_port()) for a in argv]
    t0 = time.monotonic()
    res = CliRunner().invoke(main, argv)
    assert time.monotonic() - t0 < 2, "checked before anything was built"
    assert res.exit_code == code, (res.exit_code, res.output)
    assert code in EXIT_CODES
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1, res.output                       # one line, no usage, no traceback
    assert lines[0].startswith("error: mrcnic") and text in lines[0], lines[0]
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_sizes_with_units():
    assert parse_size("64k") == parse_size("64KiB") == 65536
    assert parse_size("1MiB") == parse_size("1M") == 1 << 20
    assert parse_size("2MB") == 2_000_000 and parse_size("0x100") == 256
    assert parse_size("1.5k") == 1536 and parse_size(" 4096 ") == 4096
    for bad in ("", "k", "1.3", "64q", "-1"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_fails_fast_in_a_fresh_process(tmp_path):
    """The issue's check: ``mrcnic sim --json /nonexistent/x.json`` fails in under 2 s, one line."""
    import resource

    t0 = time.monotonic()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run([sys.executable, "-m", "mrcnic.cli", "sim", "--json",
                          "/nonexistent/x.json"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time: the wall time also counts other jobs on a loaded machine (0.6 s when idle)
    assert r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime < 2
    assert time.monotonic() - t0 < 10
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: mrcnic sim:")


def test_help_documents_exit_codes():
    out = CliRunner().invoke(main, ["--help"]).output
    for code in EXIT_CODES:
        assert f"{code} " in out
    assert "130 interrupted" in out


def test_provision_dry_run_needs_no_target():
    res = CliRunner().invoke(main, ["fw", "provision", "--dry-run", EX], env={"MRCNIC_TARGET": ""})
    assert res.exit_code == 0, res.output
    assert "would program nic0" in res.output
    res = CliRunner().invoke(main, ["fw", "--json", "provision", "--dry-run", EX],
                             env={"MRCNIC_TARGET": ""})
    assert '"checked_against": "the default build (no --target)"' in res.output


def test_every_timeout_shows_its_default():
    for argv in (["fw", "--help"], ["fw", "ev", "probe", "--help"], ["fw", "agent", "run", "--help"]):
        out = CliRunner().invoke(main, argv).output
        for line in out.split("--")[1:]:
            if "timeout" in line.split()[0] or line.startswith("wait"):
                assert "default" in line, line


def test_table_reads_use_bursts():
    """``read_table`` reads a record's data words with one multi-word read (fewer round trips)."""
    from mrcnic.fw.client import CsrClient
    from mrcnic.fw.tcp import CsrServer, TcpTransport
    from mrcnic.fw.transport import LoopbackTransport
    from mrcnic.regmap import REGMAP

    class Counting(TcpTransport):
        frames = 0

        def transact(self, *a, **kw):
            Counting.frames += 1
            return super().transact(*a, **kw)

    with CsrServer(LoopbackTransport()) as srv:
        c = CsrClient(Counting(*srv.address))
        c.read_table("path", 3)
    # select, index, command, then one burst of the record's words
    assert Counting.frames == 4 < 3 + REGMAP.table("path").words


def test_temporary_build_dir_removed_unless_kept(tmp_path, monkeypatch):
    """``bench`` in a temporary directory: gone afterwards; with ``--keep`` it stays."""
    import mrcnic.sim.bench as bench

    def fake(packets, build_dir):
        Path(build_dir, "sim.log").write_text("log")
        return [dict(payload=64, srh=False, frames=1, frame_bytes=158, beats=20, cycles=20,
                     efficiency=1.0)]
    monkeypatch.setattr(bench, "bench_tx", fake)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    res = CliRunner().invoke(main, ["bench", "tx", "--json", str(tmp_path / "b.json")])
    assert res.exit_code == 0, res.output
    import json
    row = json.loads((tmp_path / "b.json").read_text())["rows"][0]
    assert row["gbps"] == pytest.approx(7.9) and row["clock_mhz"] == 125.0       # 158 B x 8 bit x 125 MHz / 20
    assert not list(tmp_path.glob("mrcnic-*"))
    res = CliRunner().invoke(main, ["bench", "tx", "--keep"])
    assert res.exit_code == 0 and len(list(tmp_path.glob("mrcnic-bench-tx-*"))) == 1


@pytest.mark.slow
def test_ctrl_c_stops_sim_with_130_and_no_simulator_left(tmp_path):
    """``timeout --preserve-status -s INT 5 mrcnic sim``: 130 within 3 s of the signal, no
    simulator process left, the temporary build directory removed."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    t0 = time.monotonic()
    # --preserve-status: timeout's own status is 124 on expiry; the child's is the point
    res = subprocess.run(["timeout", "--preserve-status", "-s", "INT", "5", sys.executable, "-m",
                          "mrcnic.cli", "sim"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    took = time.monotonic() - t0
    assert res.returncode == 130, (res.returncode, res.stderr[-2000:])
    assert took < 5 + 3, took
    assert "interrupted" in res.stderr
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in ps, [p for p in ps.splitlines() if str(tmp_path) in p]
    assert not list(tmp_path.glob("mrcnic-sim-*")), "the temporary build directory was removed"


@pytest.mark.slow
def test_ctrl_c_on_serve_is_a_clean_stop(tmp_path):
    """Ctrl-C on ``--serve`` is a stop the user asked for: exit 0, "stopped" in the report."""
    import json

    build, out = tmp_path / "b", tmp_path / "r.json"
    # on Verilator (the co-simulation tests' model, built once): Icarus takes ~40 s to serve
    # a round
    env = dict(os.environ, MRCNIC_SIM="verilator")
    proc = subprocess.Popen([sys.executable, "-m", "mrcnic.cli", "sim", "--scenario", "clean",
                             "--size", "16k", "--serve", "0", "--build-dir", str(build),
                             "--json", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 900
        while not (build / "serve.json").exists():
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "never served"
            time.sleep(0.5)
        # until the first served round has completed (the rounds count, and with it the
        # expected completions of the progress lines, went up): its time is then reported
        def rounds_seen():
            f = build / "progress.jsonl"
            lines = f.read_text().splitlines()[:-1] if f.exists() else []   # whole lines
            return {json.loads(x)["cpl_expected"] for x in lines}
        while len(rounds_seen()) < 2:
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the first served round never completed"
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)                     # a terminal's Ctrl-C
        t0 = time.monotonic()
        stdout, stderr = proc.communicate(timeout=60)
        assert time.monotonic() - t0 < 15
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stderr[-2000:]
    assert "stopped" in stderr
    rep = json.loads(out.read_text())
    assert rep["stopped"] == "Ctrl-C or SIGTERM" and rep["bytes_mismatched"] == 0
    assert rep["rounds"] > 1                # a served round completed: its time is reported
    assert rep["completion_ns"] and rep["complete"]
    assert "not complete" not in stdout + stderr


def test_failed_simulation_is_one_line_naming_the_cause(tmp_path, monkeypatch):
    """A simulation that fails inside cocotb (here: an output file that can no longer be
    written) ends with one ``error:`` line naming the cause and the log, exit status 1."""
    import mrcnic.sim.cosim as cosim

    def failing(*args, build_dir=None, **kw):
        log = Path(build_dir) / "sim" / "sim.log"
        log.parent.mkdir(parents=True)
        log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                       "FileNotFoundError: [Errno 2] No such file or directory: '/gone/x.pcapng'\n")
        raise AssertionError(f"the simulation failed (see {Path(build_dir) / 'sim'})")
    monkeypatch.setattr(cosim, "run_cosim", failing)
    res = CliRunner().invoke(main, ["sim", "--build-dir", str(tmp_path / "b")])
    assert res.exit_code == 1, res.output
    err = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "FileNotFoundError" in err[0] and "sim.log" in err[0], res.output
    assert "Traceback" not in res.output


def test_config_names_a_packaged_example_from_any_folder(tmp_path, monkeypatch):
    """``--config examples/...`` outside the checkout is the packaged configuration; a
    wrong example name lists the packaged ones."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["send", "--config", "examples/two_nics.toml", "--qp", "7",
                                    "--size", "100"])
    assert res.exit_code == 2 and "has 1 QP(s)" in res.output, res.output     # it was read
    res = CliRunner().invoke(main, ["replay", "--config", "examples/nope.toml", "x.pcap"])
    assert res.exit_code == 2 and "two_nics.toml" in res.output, res.output
