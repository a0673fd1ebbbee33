"""bench fabric's runs (sim/fabricbench.py): the scenarios, and one NIC build for all."""

import pytest

from mrcnic.sim.cosim import _resolve
from mrcnic.sim.fabricbench import CONDITIONS, MODES, SLOW_LINK, bench_scenario


def test_every_run_same_nic_build_and_permutation():
    shapes = set()
    perms = set()
    for mode in MODES:
        for cond in CONDITIONS:
            sc = bench_scenario(mode, cond)
            _, tables, _ = _resolve(sc)
            entries = max(len(tb.path_entries) for tb in tables)
            qps = max(len(tb.rx_qps) for tb in tables)
            shapes.add((len(sc["nics"]), sc["topology"]["planes"], entries, qps))
            perms.add(tuple((t["src"], t["dst"]) for t in sc["transfers"]))
            assert sc["fabric"]["routing"] == "ecmp"
    assert shapes == {(8, 4, 32, 2)}        # CosimTop(8, ports=4, qps=4, paths=32) every time
    assert len(perms) == 1
    (perm,) = perms
    assert all(s // 4 != d // 4 for s, d in perm)     # seed 7: every flow crosses leaves


def test_conditions():
    assert bench_scenario("mrc", "healthy")["slow_links"] == []
    assert bench_scenario("mrc", "slow")["slow_links"] == [{"link": SLOW_LINK, "rate_gbps": 0.5}]
    f = bench_scenario("ecmp", "failed")["failures"]
    assert f == [{"action": "fail_link", "target": SLOW_LINK, "at": 0.3}]
    with pytest.raises(ValueError):
        bench_scenario("spray", "healthy")


def test_transport_settings():
    # 256 KiB flows, a window for the loaded RTT in every mode, a 96 us ECN hold in mrc only
    for mode in MODES:
        sc = bench_scenario(mode, "slow")
        assert sc["size"] == 256 * 1024
        assert sc["cc"] == {"target_delay_ns": 21500, "initial_cwnd_bytes": 43008,
                            "max_cwnd_bytes": 65536}
        assert sc["reliability"]["ecn_hold"] == (12000 if mode == "mrc" else 0)


def test_warns_of_a_failure_after_every_flow_completed():
    from mrcnic.sim.fabricbench import _warnings

    rep = dict(warnings=["w"], failures=[
        dict(action="fail_link", target="p0.leaf0<->p0.spine0", t_rel_ns=6500.0)])
    done = dict(flows=[dict(fct_ns=4700.0), dict(fct_ns=None)])
    late = dict(flows=[dict(fct_ns=9000.0)])
    got = _warnings(rep, done)
    assert got[0] == "w" and len(got) == 2 and "after every flow had completed" in got[1]
    assert _warnings(rep, late) == ["w"]
