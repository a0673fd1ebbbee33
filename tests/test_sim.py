"""``mrcnic sim``: RTL MRCNics (cocotb + Icarus) across the fabric model, end to end.

Issue "Reliable multipath transfer end to end", parts 2 and 4.  Scapy
(``mrcnic.wire``) checks every frame of the fabric pcap; the receiver's memory
is compared byte for byte with the source data.

The failure scenarios exercise the sender reliability wired into MRCNic (ACK
timeouts, SACK/NACK retransmission, EV events, probes, NSCC).
"""

import json
import random

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from mrcnic import wire
from mrcnic.sim.cosim import run_cosim
from mrcnic.sim.expect import check
from mrcnic.sim.report import CONTRACT_FIELDS
from mrcnic.sim.scenarios import SCENARIOS, get_scenario

BLOCK = 0xFC000000


def check_exact(rep):
    assert rep["complete"], f"not every completion arrived (stalled={rep.get('stalled')})"
    assert rep["bytes_posted"] == rep["size"] * len(rep["transfers"])
    assert rep["bytes_delivered"] == rep["bytes_posted"]
    assert rep["bytes_mismatched"] == 0
    for t in rep["transfers"]:
        assert t["written_outside"] == 0 and t["missing"] == 0 and t["mismatched"] == 0


def evs_through(rep, node):
    """Per-EV entries of the data EVs whose path crosses switch ``node``."""
    return {ev: e for ev, e in rep["per_ev"].items() if e.get("spine") == node and e["packets"]}


# --------------------------------------------------------------------------
# A failure-free transfer: exact delivery, the report, the pcap, the plot
# --------------------------------------------------------------------------
def test_clean_transfer_exact_with_report_pcap_plot(tmp_path):
    size = 16 * 1024
    js, pcap, plot = tmp_path / "r.json", tmp_path / "f.pcap", tmp_path / "t.png"
    rep = run_cosim("clean", size=size, json_path=js, pcap=pcap, plot=plot,
                    build_dir=tmp_path / "b")
    check_exact(rep)
    # Report: the contract fields, from the file as written.
    on_disk = json.loads(js.read_text())
    assert list(on_disk)[:len(CONTRACT_FIELDS)] == list(CONTRACT_FIELDS)
    assert on_disk["scenario"] == "clean" and on_disk["planes"] == 4 and on_disk["evs"] == 128
    n_pkts = size // 1024
    assert rep["packets_sent"] == n_pkts and rep["retransmissions"] == 0
    assert rep["trimmed"] == 0 and rep["ecn_marked"] == 0
    assert rep["evs_assumed_bad"] == 0 and rep["ev_events"] == [] and rep["failures"] == []
    # 16 packets sprayed over 128 EVs in profile order: 16 distinct EVs, 4 per plane.
    used = {ev: e for ev, e in rep["per_ev"].items() if e["packets"]}
    assert len(used) == n_pkts and all(e["packets"] == 1 and e["delivered"] == 1
                                       for e in used.values())
    assert len(set(rep["per_plane_data_bytes"])) == 1 and sum(rep["per_plane_data_bytes"]) > size
    assert all(b > 0 for b in rep["per_plane_bytes"])
    assert rep["drops"]["fabric"] == {} and not any(rep["drops"]["nic"].values())
    rx = rep["nic_counters"][1]
    assert rx["placed_bytes"] == size and rx["duplicates"] == 0
    assert rep["nic_counters"][0]["acks_received"] == rx["acks_sent"] == rep["acks_sent"] > 0
    assert rep["ideal_ns"] > rep["base_rtt_ns"] > 0
    assert rep["ideal_ns"] * 0.9 <= rep["completion_ns"] <= 1.5 * rep["ideal_ns"]
    assert rep["sim"]["cycles"] > 0 and rep["sim"]["cycles_per_s"] > 0

    # pcap: every frame dissects in Scapy, carries a valid ICRC; data frames carry the source
    # bytes for their VA; ACKs echo the EV of data that was sent.
    frames = rdpcap(str(pcap))
    # every frame once per link it crosses: host up, leaf -> spine, spine -> leaf, leaf -> host
    assert len(frames) == rep["pcap_frames"] == 4 * (n_pkts + rep["acks_sent"])
    src = random.Random(1000).randbytes(size)
    va0 = 0x7F0000000000
    data_evs, acked_evs, seen = set(), set(), []
    for f in frames:
        raw = bytes(f)
        pkt = Ether(raw)
        assert IPv6 in pkt and pkt[UDP].dport == 4791 and BTH in pkt
        assert wire.check_icrc(raw, BLOCK)
        bth = pkt[BTH]
        if bth.opcode == wire.OP_WRITE_ONLY:
            reth = pkt[wire.RETH]
            off = reth.va - va0
            assert bytes(reth.payload)[:reth.dmalen] == src[off:off + reth.dmalen]
            assert reth.rkey == 0x2001
            data_evs.add(pkt[IPv6].fl | (pkt[UDP].sport & 0xFFF) << 20)
            seen.append(bth.psn)
        else:
            assert bth.opcode == wire.OP_ACK and wire.MRCSack in pkt
            acked_evs.add(pkt[wire.MRCSack].ev)
    assert sorted(set(seen)) == list(range(n_pkts))
    assert acked_evs and acked_evs <= data_evs
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scenarios_are_consistent():
    """Every built-in scenario resolves: configs load, transfers fit, failures name real links."""
    from mrcnic.sim.cosim import _fabric_for, _resolve, _transfers, ideal_times

    assert {"default", "plane-down", "link-flap", "trim-incast", "ecn"} <= set(SCENARIOS)
    for name in SCENARIOS:
        for test in (False, True):
            sc = get_scenario(name, test=test)
            texts, tables, cfgs = _resolve(sc)
            assert len(tables) == len(sc["nics"])
            wrs = _transfers(sc, cfgs)
            assert len(wrs) == len(sc["transfers"])
            times = ideal_times(sc, tables, cfgs[0].nic.pmtu)
            assert times["ideal_ns"] > times["transfer_ns"] > 0
            topo, fabric = _fabric_for(sc)
            for f in sc["failures"]:
                getattr(fabric, f["action"])(1.0, *(f["target"] if isinstance(f["target"], list)
                                                   else [f["target"]]))
    with pytest.raises(ValueError):
        get_scenario("nope")
    with pytest.raises(ValueError):
        get_scenario("default", size=0)


# --------------------------------------------------------------------------
# The behaviours under failures and congestion
# --------------------------------------------------------------------------
def test_default_link_failure(tmp_path):
    rep = run_cosim("default", build_dir=tmp_path / "b")       # the size users run
    check_exact(rep)
    assert check(rep) == []
    assert rep["evs_assumed_bad"] >= 1 and rep["retransmissions"] >= 1
    assert rep["completion_ns"] <= 1.5 * rep["ideal_ns"]
    bad = [e for e in rep["ev_events"] if e["state"] == "ASSUMED_BAD"]
    failed = evs_through(rep, "p2.spine6")
    assert failed, "the failed link carried data before it failed"
    assert {int(ev, 16) for ev in failed} <= {e["ev"] for e in bad}
    # Traffic leaves the failed path: no data on its EV once the EV is ASSUMED_BAD.
    for ev, e in failed.items():
        t_bad = min(b["t_ns"] for b in bad if b["ev"] == int(ev, 16))
        assert e["last_ns"] <= t_bad


def test_plane_down(tmp_path):
    """Plane 2 dies at 0.3 x ideal: PlaneGuard recognises it from its first 3 timed-out EVs
    and the spray leaves the whole plane (before: one timeout per EV, 32 of them, 1.86x
    ideal); completion <= 1.3 x ideal."""
    rep = run_cosim("plane-down", build_dir=tmp_path / "b")       # the size users run
    check_exact(rep)
    assert check(rep) == []
    assert rep["evs_assumed_bad"] >= 1 and rep["retransmissions"] >= 1
    t_fail = rep["failures"][0]["t_ns"]
    bad_times = [e["t_ns"] for e in rep["ev_events"] if e["state"] == "ASSUMED_BAD"]
    # After the failover, plane 2 carries no more data.
    plane2 = [e for e in rep["per_ev"].values() if e.get("plane") == 2 and e["packets"]]
    assert plane2
    t_over = max(bad_times)
    assert all(e["last_ns"] <= t_over for e in plane2)
    assert t_over > t_fail
    # the guard: far fewer EVs lost a packet than the plane's 32
    assert rep["evs_assumed_bad"] <= 12, rep["evs_assumed_bad"]


def test_link_flap_bad_then_good(tmp_path):
    rep = run_cosim("link-flap", build_dir=tmp_path / "b")       # the size users run
    check_exact(rep)
    assert check(rep) == []
    fail_t, recover_t = (f["t_ns"] for f in rep["failures"])
    failed = {int(ev, 16) for ev in evs_through(rep, "p0.spine5")}
    events = [e for e in rep["ev_events"] if e["ev"] in failed]
    bad = [e for e in events if e["state"] == "ASSUMED_BAD"]
    good = [e for e in events if e["state"] == "GOOD" and e["reason"] == "PROBE_OK"]
    assert bad and good, events
    assert fail_t <= min(e["t_ns"] for e in bad) < recover_t
    assert max(e["t_ns"] for e in good) > recover_t
    assert rep["probes_sent"] >= 1 and rep["probe_replies"] >= 1


def test_trim_incast_recovers_by_nack(tmp_path):
    """At the size users run (64 KiB per sender): trims are NACKed and retransmitted, no ACK
    timeout, no EV event, no frame dropped at the receiver, fair, <= 1.5 x ideal."""
    rep = run_cosim("trim-incast", build_dir=tmp_path / "b")
    assert rep["size"] == SCENARIOS["trim-incast"]["size"]
    check_exact(rep)
    assert check(rep) == []
    assert rep["trimmed"] > 0 and rep["trim_nacks"] > 0
    assert rep["retransmissions"] >= 1
    assert rep["evs_assumed_bad"] == 0


def test_ecn_congested_spine(tmp_path):
    rep = run_cosim("ecn", test=True, build_dir=tmp_path / "b")
    check_exact(rep)
    assert rep["ecn_marked"] > 0 and rep["ecn_echoes"] > 0
    cw = [c["cwnd"] for c in rep["cwnd"] if c["nic"] == 0]
    assert cw and min(cw) < cw[0], "the congestion window never shrank"
    # One EV per path: a fair share is 1/16 of the packets; the congested one carries less.
    congested = sum(e["packets"] for e in evs_through(rep, "p0.spine0").values())
    total = rep["packets_sent"]
    paths = 4 * 4                   # planes x spines of the scenario
    assert congested < total / paths, (congested, total)
    assert not [e for e in rep["ev_events"] if e["reason"] == "ACK_TIMEOUT"]


# --------------------------------------------------------------------------
# SIGTERM to ``mrcnic sim``: the simulator stops too, the report is written
# --------------------------------------------------------------------------
def test_sigterm_stops_the_simulator(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    build = tmp_path / "b"
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "mrcnic.cli", "sim", "--scenario", "clean",
                             "--build-dir", str(build), "--json", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        progress = build / "progress.jsonl"
        deadline = time.monotonic() + 600
        while not (progress.exists() and progress.read_text().strip()):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the simulation never started"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=300)[1]
    finally:
        proc.kill()
    assert proc.returncode == 130, err                # interrupted: reported, exit 130
    assert "interrupted (Ctrl-C or SIGTERM)" in err
    rep = json.loads(out.read_text())
    assert rep["interrupted"] and not rep["complete"]
    # no simulator is left running in this build directory
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(build) not in ps


def test_fabric_defaults_rule():
    """The transport defaults of docs/scenarios.md, worked by hand for trim-incast: queues of
    8 KiB at 10, 10 and 2 Gb/s (6.55 + 6.55 + 32.77 us) plus a 13.37 us base RTT = 59.25 us;
    2 x that = 118.5 us -> 1.024 us x 2^7 = 131 us; one BDP at 8 Gb/s over 13.4 us = 13.4 kB
    -> 14 KiB."""
    from mrcnic.sim.cosim import base_rtt_ns
    from mrcnic.sim.scenarios import fabric_defaults

    sc = get_scenario("trim-incast")
    rtt = base_rtt_ns(sc, 1024)
    assert rtt == pytest.approx(13372.8)
    d = fabric_defaults(sc, rtt, 8.0, 1024)
    assert d["rtt_max_ns"] == pytest.approx(rtt + 8192 * 8 * (2 / 10 + 1 / 2))
    assert d["reliability"] == {"ack_timeout_exp": 7, "probe_interval": 16384}
    assert d["cc"] == {"base_rtt_ns": 13400, "target_delay_ns": 6700,
                       "initial_cwnd_bytes": 14336, "max_cwnd_bytes": 28672,
                       "min_cwnd_bytes": 1024}
    # a scenario's own keys win (ecn keeps its RTO; its probe interval follows that RTO)
    from mrcnic.sim.cosim import _resolve
    ecn = get_scenario("ecn", test=True)
    _resolve(ecn)
    assert ecn["reliability"]["ack_timeout_exp"] == 8
    assert ecn["reliability"]["probe_interval"] == (1024 << 8) // 8
    assert ecn["cc"] == SCENARIOS["ecn"]["cc"]
