"""The co-simulation sleeps through the fabric's hops (sim/fabric.py
``Fabric.next_delivery_bound_ns``): it wakes at the first time a frame can reach a host,
not at every fabric event, and the run is the same.

* The bound is a bound: in a congested fabric with seeded faults (held-back, duplicated
  and reordered frames: control events) and a link failure, no frame reaches a host, and
  no control event runs, before the bound the fabric gave at the previous step, however
  the hosts send after it.
* ``mrcnic sim``'s default scenario (a link fails) and a run with random faults give the
  same report (every field but the wall-clock ones) and a byte-identical pcap waking at
  every fabric event (``MRCNIC_COSIM_LOOKAHEAD=0``), at the bound (default), and at every
  clock (``MRCNIC_COSIM_POLL=1``, default scenario).
"""

import random

import pytest

from mrcnic import wire
from mrcnic.sim.fabric import Fabric
from mrcnic.sim.faults import FaultInjector, draw, parse_spec
from mrcnic.sim.topology import ClosTopology
from tests.test_simulators import assert_runs_identical


def _frames(topo, rng, src, dst):
    out = []
    for i, e in enumerate(topo.ev_profile(src, dst, 16)):
        out.append((e.port, wire.build_data_frame(
            src_mac=topo.host_mac(src), dst_mac=topo.host_mac(dst), src_ip=topo.host_ip(src),
            path=topo.encap(e), qpn=0x101, psn=i, va=0, rkey=1,
            payload=rng.randbytes(rng.choice((64, 256, 1024))))))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_delivery_before_the_bound(seed):
    rng = random.Random(seed)
    topo = ClosTopology(planes=2, leaves=2, spines=2, hosts_per_leaf=2)
    fab = Fabric(topo, pcap=None, queue_bytes=4096, trim=True, switch_latency_ns=40.0)
    fab.faults = FaultInjector(draw(parse_spec(
        "loss=0:0.02,dup=0:0.05,reorder=0:0.1,trim=0:0.05"), seed, topo), fab)
    fab.fail_link(20_000.0, "p0.leaf0", "p0.spine0")
    fab.recover_link(60_000.0, "p0.leaf0", "p0.spine0")
    flows = [_frames(topo, rng, s, d) for s, d in ((0, 2), (1, 3), (2, 0), (3, 1), (1, 2))]
    now, checked, delivered, ahead = 0.0, 0, 0, []
    while now < 120_000.0:
        bound = fab.next_delivery_bound_ns()
        # the hosts send at any time from now on; the fabric runs in steps up to then
        step = now + rng.uniform(1.0, 400.0)
        for src, frames in enumerate(flows[:4]):
            if rng.random() < 0.5:
                fab.send(src, *rng.choice(frames), step)
        out = fab.advance(step)
        controls = [e for e in fab.events_log if e["time_ns"] > now]
        if bound is not None:
            assert all(d.time_ns >= bound for d in out), (bound, [d.time_ns for d in out])
            assert all(e["time_ns"] >= bound for e in controls)
            checked += len(out)
            ahead.append(bound - now)
        elif out:
            pytest.fail("frames delivered while the fabric said it was idle")
        delivered += len(out)
        now = step
    delivered += len(fab.drain())
    assert checked > 100 and delivered > 200 and fab.conservation()["balance"] == 0
    # and it is a look-ahead: at least half the time 50 ns or more ahead
    assert sorted(ahead)[len(ahead) // 2] > 50.0


@pytest.mark.slow
def test_default_scenario_same_at_every_wake_mode(tmp_path, monkeypatch):
    reps = assert_runs_identical(tmp_path, "default", {
        "lookahead": dict(simulator="verilator", env=dict(MRCNIC_COSIM_LOOKAHEAD="1")),
        "fabric-events": dict(simulator="verilator", env=dict(MRCNIC_COSIM_LOOKAHEAD="0")),
        "every-clock": dict(simulator="verilator", env=dict(MRCNIC_COSIM_POLL="1"))},
        monkeypatch)
    assert reps["lookahead"]["verdict"] == "pass"


@pytest.mark.slow
def test_faulty_run_same_with_lookahead(tmp_path, monkeypatch):
    faults = dict(simulator="verilator", faults="loss=0:0.02,corrupt=0:0.01,dup=0:0.02,"
                  "reorder=0:0.05,trim=0:0.02", seed=11)
    reps = assert_runs_identical(tmp_path, "default", {
        "lookahead": dict(faults, env=dict(MRCNIC_COSIM_LOOKAHEAD="1")),
        "fabric-events": dict(faults, env=dict(MRCNIC_COSIM_LOOKAHEAD="0"))}, monkeypatch)
    assert reps["lookahead"]["verdict"] == "pass"
