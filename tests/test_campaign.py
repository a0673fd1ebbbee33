"""Fault campaigns (issue 21): seeded faults in the fabric, the run invariants, Dask.

Fast tests: the fault spec, the draw, the injector and the fabric's frame accounting
(plain Python).  Slow tests (co-simulation on the default simulator): a deliberately broken
harness is reported failed with a replay command that reproduces it; a campaign on a Dask
cluster started by hand (one scheduler, two workers) gives the same per-seed verdicts as the
local cluster.
"""

import random
import shlex
import socket
import subprocess
import sys
import time

import pytest

from mrcnic import wire
from mrcnic.sim.fabric import Fabric
from mrcnic.sim.faults import FaultInjector, draw, parse_spec
from mrcnic.sim.topology import ClosTopology

TOPO = dict(planes=4, leaves=2, spines=4, hosts_per_leaf=1)
SPEC = "loss=0:0.05,corrupt=0:0.05,dup=0:0.05,reorder=0:0.2,trim=0:0.05,flaps=0:2,switches=0:1"


def test_spec_round_trip_and_errors():
    s = parse_spec(SPEC + ",plane=0.5,jitter_ns=0:1500")
    assert parse_spec(s.text()) == s
    assert s.ranges["flaps"] == (0, 2) and s.ranges["loss"] == (0.0, 0.05)
    for bad in ("loss", "nope=1", "loss=2", "loss=0.2:0.1", "flaps=0.5", "loss=-1", "loss=a",
                "loss=nan", "loss=nan:nan", "loss=0:nan", "jitter_ns=0:inf", "corrupt=-inf:0",
                "loss=0.1,loss=0.2", "flaps=100000", "switches=0:65"):
        with pytest.raises(ValueError):
            parse_spec(bad)
    assert not parse_spec("") and not parse_spec("loss=0")


def test_draw_is_a_function_of_the_seed():
    topo = ClosTopology(**TOPO)
    spec = parse_spec(SPEC)
    a, b, c = draw(spec, 7, topo), draw(spec, 7, topo), draw(spec, 8, topo)
    assert a == b and a != c
    assert 0 <= a["rates"]["loss"] <= 0.05 and a["rates"]["flaps"] in (0, 1, 2)
    names = {n for n in topo.nodes}
    for f in a["failures"] + c["failures"]:
        t = f["target"]
        assert all(x in names for x in (t if isinstance(t, list) else [t]))


def _data_frames(topo, n, rng):
    out = []
    for i, e in enumerate(topo.ev_profile(0, 1, 16)):
        enc = topo.encap(e)
        out.append((e.port, wire.build_data_frame(
            src_mac=topo.host_mac(0), dst_mac="02:00:00:00:ff:ff", src_ip=topo.host_ip(0),
            path=enc, qpn=0x101, psn=i, va=0, rkey=1, payload=rng.randbytes(256))))
    return [out[i % len(out)] for i in range(n)]


def _run(fabric, frames):
    t = 0.0
    for plane, f in frames:
        fabric.send(0, plane, f, t)
        t += 300.0
    return fabric.drain()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_injector_accounts_for_every_frame(seed):
    """With every per-frame fault on, each frame sent is delivered, dropped under a reason,
    or still held: the fabric's conservation balances; corrupted frames fail the ICRC."""
    topo = ClosTopology(**TOPO)
    fab = Fabric(topo, pcap=None, queue_bytes=64 * 1024, trim=True, trim_queue_bytes=8192)
    drawn = draw(parse_spec("loss=0.05,corrupt=0.05,dup=0.05,reorder=0.2,trim=0.05"), seed, topo)
    fab.faults = FaultInjector(drawn, fab)
    frames = _data_frames(topo, 600, random.Random(seed))
    out = _run(fab, frames)
    inj = fab.faults.counters()
    cons = fab.conservation()
    assert cons["balance"] == 0 and cons["in_fabric"] == 0, cons
    assert cons["delivered"] == len(out)
    assert min(inj[k] for k in ("loss", "fcs", "corrupt_to_host", "dup", "reorder", "trim")) > 0
    bad = sum(1 for d in out if not wire.check_icrc(d.frame_bytes) and
              ((d.frame_bytes[14] & 0x0F) << 4 | d.frame_bytes[15] >> 4) >> 2 != 46)
    assert bad == sum(inj["corrupt_by_host"].values()) >= inj["corrupt_to_host"]
    # reordering happened: PSNs of plane-0 deliveries are not monotonic
    assert inj["reorder"] > 0


def test_no_faults_changes_nothing():
    """The hook off (default) and an injector with zero rates deliver the same frames at
    the same times."""
    topo = ClosTopology(**TOPO)
    frames = _data_frames(topo, 200, random.Random(4))
    a = Fabric(topo, pcap=None)
    b = Fabric(topo, pcap=None)
    b.faults = FaultInjector(draw(parse_spec(""), 9, topo), b)
    ra, rb = _run(a, frames), _run(b, frames)
    assert [(d.time_ns, d.frame_bytes) for d in ra] == [(d.time_ns, d.frame_bytes) for d in rb]


# ---------------------------------------------------------------------------------------
# Co-simulation: the checker has teeth; Dask cluster started by hand
# ---------------------------------------------------------------------------------------
SMALL = "loss=0:0.03,corrupt=0:0.02,dup=0:0.03,reorder=0:0.05,trim=0:0.03,flaps=0:1"


@pytest.mark.slow
@pytest.mark.parametrize("bug,invariant", [("corrupt-byte", "memory"),
                                           ("drop-completion", "completions"),
                                           ("stray-write", "memory_outside")])
def test_broken_harness_fails_and_its_replay_reproduces_it(bug, invariant):
    from mrcnic.sim.campaign import campaign_params, run_one

    params = campaign_params("default", 1, 5, SMALL, 4096, harness_bug=bug)[0]
    row = run_one(params)
    assert row["verdict"] == "fail", row
    assert invariant in row["failed"].split()
    assert f"--harness-bug {bug}" in row["replay"] and "--seed 5" in row["replay"]
    # the printed command reproduces the failure
    proc = subprocess.run(shlex.split(row["replay"]), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "invariants failed" in proc.stderr and invariant in proc.stderr


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.slow
def test_cluster_started_by_hand_gives_the_same_verdicts(tmp_path):
    """``dask scheduler`` + two ``dask worker`` processes: the same per-seed verdicts (and
    counters) as the local cluster."""
    from mrcnic.sim.campaign import campaign_params, run_campaign

    params = campaign_params("default", 4, 300, SMALL, 4096)
    local = run_campaign(params, tmp_path / "local", workers=2, progress=False)
    port = _free_port()
    addr = f"tcp://127.0.0.1:{port}"
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    procs = [subprocess.Popen(dask + ["--host", "127.0.0.1", "--port", str(port),
                                      "--dashboard-address", ":0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        time.sleep(3)
        for _ in range(2):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", addr, "--nthreads", "1",
                 "--nworkers", "1", "--no-dashboard"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from dask.distributed import Client
        with Client(addr, timeout="30s") as c:
            c.wait_for_workers(2, timeout=60)
        remote = run_campaign(params, tmp_path / "remote", scheduler=addr, progress=False)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    assert remote["workers"] == 2
    assert local["runs"] == remote["runs"] == 4

    def rows(d):
        import csv
        with open(d / "runs.csv") as fh:
            return {r["seed"]: (r["verdict"], r["retransmissions"], r["inj_loss"],
                                r["completion_ns"]) for r in csv.DictReader(fh)}
    assert rows(tmp_path / "local") == rows(tmp_path / "remote")


# ---------------------------------------------------------------------------------------
# mrcnic replay: each frame's final fate (not only the parser's verdict)
# ---------------------------------------------------------------------------------------
def test_frame_fate_names_what_happened():
    from mrcnic.sim.rx_tb import frame_fate

    assert frame_fate("dropped:ICRC", b"", {}, 46) == "dropped:ICRC"
    assert frame_fate("accepted", b"", {"duplicates": 1}, 46).startswith("duplicate")
    assert frame_fate("accepted", b"", {"out_of_window": 1}, 46).startswith("out of window")
    assert frame_fate("accepted", b"", {"placed_bytes": 64}, 46) == "placed 64 bytes"
    topo = ClosTopology(**TOPO)
    enc = topo.encap(topo.ev_profile(0, 1, 4)[0])
    f = wire.build_data_frame(src_mac=topo.host_mac(0), dst_mac="02:00:00:00:ff:ff",
                              src_ip=topo.host_ip(0), path=enc, qpn=1, psn=0, va=0, rkey=1,
                              payload=bytes(64))
    assert frame_fate("accepted", wire.trim_frame(f, 46), {}, 46).startswith("trimmed")


@pytest.mark.slow
def test_replay_shows_a_duplicate_as_discarded(tmp_path):
    """The same data frame twice: both pass the parser ("accepted"), the second is discarded
    by the SACK tracker, and its fate says so."""
    from mrcnic.resources import example
    from mrcnic.sim.fuzz import _frames, _setup
    from mrcnic.sim.rx_tb import RxJob, run_rx

    tx, rx = _setup()
    (p0, f0), (p1, f1) = _frames(tx, rx, random.Random(1).randbytes(2048), 1024)
    r = run_rx(RxJob(str(example("nic1.toml")), frames=[(p0, f0), (p0, f0), (p1, f1)]),
               tmp_path)
    assert r.verdicts == ["accepted"] * 3
    assert r.fates == ["placed 1024 bytes", "duplicate: discarded by the tracker",
                       "placed 1024 bytes"]


def test_sweep_grid_and_replay_commands():
    """A sweep is every grid combination x --runs seeds; each run's replay command carries
    its own scenario, size, fault spec and seed."""
    from mrcnic.sim.campaign import campaign_params, parse_grid, replay_command, sweep_params

    grid = parse_grid(["loss=0,0.02", "size=4k,8k", "scenario=default,clean"])
    ps = sweep_params("default", grid, 2, 100, "dup=0.01", None)
    assert len(ps) == 2 * 2 * 2 * 2
    assert len({p["seed"] for p in ps}) == len(ps)
    p = next(p for p in ps if p["point"] == "loss=0.02 size=8k scenario=clean")
    cmd = replay_command(dict(params=p))
    assert "--scenario clean" in cmd and "--size 8192" in cmd
    assert "loss=0.02" in cmd and "dup=0.01" in cmd and f"--seed {p['seed']}" in cmd
    with pytest.raises(ValueError):
        parse_grid(["nope=1"])
    runs = campaign_params("default", 3, 7, "loss=0:0.01", 4096)
    assert [r["seed"] for r in runs] == [7, 8, 9] and all(r["size"] == 4096 for r in runs)


def test_summary_names_rtl_versions(tmp_path):
    """Each run records the RTL it simulated (``rtl``: a hash of rtl/*.py); a campaign whose
    sources changed while it ran lists both versions and the CLI warns."""
    import click
    from click.testing import CliRunner

    from mrcnic.campaign_cli import _finish
    from mrcnic.sim.campaign import COLUMNS, rtl_version, summarize

    now = rtl_version()
    assert len(now) == 12 and now == rtl_version()
    row = {c: "" for c in COLUMNS}
    rows = [dict(row, run=i, seed=i, verdict="pass", wall_s=1.0, rtl=v)
            for i, v in enumerate([now, now, "0123456789ab"])]
    s = summarize(rows, 3.0)
    assert s["rtl_versions"] == sorted([now, "0123456789ab"])
    assert summarize(rows[:2], 2.0)["rtl_versions"] == [now]
    res = CliRunner().invoke(click.command()(lambda: _finish(s, tmp_path)), [])
    assert res.exit_code == 0 and "RTL sources changed" in res.output
    res = CliRunner().invoke(click.command()(lambda: _finish(summarize(rows[:2], 2.0),
                                                               tmp_path)), [])
    assert res.exit_code == 0 and "RTL sources changed" not in res.output
