"""Scenario files (sim/scenario_file.py): the built-ins as files give the very dicts of
sim/scenarios.py, errors name file, key and reason, traffic matrices, load-balancing modes."""

import subprocess
import sys

import pytest

from mrcnic.config import ConfigError, compile_tables, loads_config
from mrcnic.sim import scenarios
from mrcnic.sim.scenario_file import (builtin_scenario_file, load_scenario, loads_scenario,
                                      resolve_scenario, traffic_transfers)

BASE = """
size = 16384
evs = 32
nics = [0, 1, 2, 3, 4, 5, 6, 7]
[topology]
planes = 4
leaves = 2
spines = 4
hosts_per_leaf = 4
[fabric]
rate_gbps = 10.0
latency_ns = 200.0
host_rate_gbps = 2.0
host_latency_ns = 100.0
"""


@pytest.mark.parametrize("name", scenarios.scenario_names())
def test_builtin_file_is_the_dict(name):
    """Each packaged file loads to exactly the built-in dict, so no result moves."""
    text = builtin_scenario_file(name).read_text()
    sc = loads_scenario(text, f"{name}.toml", name)
    assert sc.pop("name") == name
    assert sc == scenarios.SCENARIOS[name], \
        "a built-in dict changed: regenerate its file with python -m mrcnic.sim.scenario_file"
    got = resolve_scenario(name, test=True)
    assert got == scenarios.get_scenario(name, test=True)


def test_user_file_permutation_failure(tmp_path):
    f = tmp_path / "my.toml"
    f.write_text('lb = "mrc"\nseed = 3\n' + BASE + """
[traffic]
pattern = "permutation"
[[failures]]
action = "fail_link"
target = ["p1.leaf0", "p1.spine2"]
at = 0.3
""")
    sc = load_scenario(f)
    assert sc["name"] == "my"
    dsts = sorted(t["dst"] for t in sc["transfers"])
    assert dsts == list(range(8)) and all(t["src"] != t["dst"] for t in sc["transfers"])
    assert sc["failures"] == [{"action": "fail_link", "target": ["p1.leaf0", "p1.spine2"],
                               "at": 0.3}]
    # the same seed, the same permutation; another seed, (here) another one
    assert load_scenario(f)["transfers"] == sc["transfers"]
    assert traffic_transfers({"pattern": "permutation"}, 8, 4) != sc["transfers"]


@pytest.mark.parametrize("extra,key,reason", [
    ("evz = 3\n", "evz", "did you mean 'evs'"),
    ("[traffic]\npattern = 'permutaton'\n", "traffic.pattern", "not one of"),
    ("[traffic]\npattern = 'permutation'\n[[failures]]\naction = 'fail_link'\n"
     "target = ['p0.leaf0', 'p0.leaf1']\nat = 0.5\n", "failures[0].target", "no link"),
    ("lb = 'ecmp'\n|[traffic]\npattern = 'permutation'\n", "fabric.routing", "needs routing"),
    ("[traffic]\npattern = 'incast'\nreceiver = 9\n", "traffic.receiver", "out of range"),
    ("[[transfers]]\nsrc = 0\ndst = 0\n", "transfers[0].dst", "itself"),
])
def test_errors_name_file_key_reason(tmp_path, extra, key, reason):
    f = tmp_path / "bad.toml"
    top, _, tables = extra.rpartition("|") if "|" in extra else \
        (("", "", extra) if extra.startswith("[") else (extra, "", ""))
    f.write_text(top + BASE + tables)
    with pytest.raises(ConfigError) as exc:
        load_scenario(f)
    assert exc.value.key == key and reason in exc.value.reason
    assert str(exc.value).startswith(f"{f}: {key}: ") and "\n" not in str(exc.value)


def test_cli_misspelt_key_one_line(tmp_path):
    f = tmp_path / "my.toml"
    f.write_text(BASE.replace("spines = 4", "spine = 4") + "[traffic]\npattern='permutation'\n")
    r = subprocess.run([sys.executable, "-m", "mrcnic.cli", "sim", "--scenario", str(f)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{f}: topology.spine: unknown key" in lines[0], r.stderr


def test_traffic_patterns():
    assert traffic_transfers({"pattern": "incast", "receiver": 3, "senders": [0, 1, 2]}, 4) == \
        [{"src": s, "dst": 3} for s in range(3)]
    a2a = traffic_transfers({"pattern": "all-to-all"}, 3)
    assert len(a2a) == 6 and len({(t["src"], t["dst"]) for t in a2a}) == 6
    assert traffic_transfers({"pattern": "list", "flows": [[0, 1]], "count": 3}, 2) == \
        [{"src": 0, "dst": 1}] * 3
    for seed in range(20):
        perm = traffic_transfers({"pattern": "permutation"}, 8, seed)
        assert sorted(t["dst"] for t in perm) == list(range(8))
        assert all(t["src"] != t["dst"] for t in perm)


def _configs(sc):
    from mrcnic.sim.topology import ClosTopology
    lb = {k: sc[k] for k in ("ev_format", "ev_min_active", "seed") if k in sc}
    texts = scenarios.make_configs(ClosTopology(**sc["topology"]), sc["nics"], sc["transfers"],
                                   sc["evs"], 1 << 20, **lb)
    return [compile_tables(loads_config(t, f"nic{k}")) for k, t in enumerate(texts)], \
        [loads_config(t, f"nic{k}") for k, t in enumerate(texts)]


@pytest.mark.parametrize("lb", ["mrc", "oblivious", "ecmp"])
def test_lb_modes_are_settings(lb):
    text = f"lb = '{lb}'\n" + BASE + "routing = 'ecmp'\n[traffic]\npattern = 'permutation'\n"
    sc = loads_scenario(text, "x.toml")
    tables, cfgs = _configs(sc)
    prof = next(iter(cfgs[0].ev_profiles.values()))
    if lb == "mrc":
        assert "reliability" not in sc and len(prof.entries) == 32 and prof.ev_min_active == 4
        assert prof.mode == "SRV6"
    elif lb == "oblivious":
        assert sc["reliability"] == {"ecn_hold": 0}
        assert prof.mode == "SRV6" and prof.ev_min_active == len(prof.entries) == 32
    else:
        assert sc["reliability"] == {"ecn_hold": 0}
        # the checker caps ev_min_active at the distinct GOOD EVs (4); the RTL's floor counts
        # entries, so copies of the one EV can still go ASSUMED_BAD (docs/scenarios.md)
        assert prof.mode == "STEV" and prof.ev_min_active == 4 and len(prof.entries) == 32
        assert len({e.ev for e in prof.entries}) == 1          # one EV, every plane
        assert sorted({e.port for e in prof.entries}) == [0, 1, 2, 3]


def _docs_example() -> str:
    """The "complete file" of docs/scenarios.md, as a user would copy it."""
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "docs" / "scenarios.md").read_text()
    start = text.index("```toml", text.index("A complete file")) + len("```toml")
    return text[start:text.index("```", start)]


def test_docs_example_run_limits_cover_its_rto():
    """The docs' example sets neither time_limit nor stall_ns: both come from its RTO, so
    its link failure's lost packets are retransmitted (one RTO) before the run gives up
    (the 4 x ideal limit and the 100 us stall detection ended it before its first timeout)."""
    from mrcnic.sim.cosim import _resolve, ideal_times, run_limits

    sc = loads_scenario(_docs_example(), "my.toml", "my")
    assert "time_limit" not in sc and "stall_ns" not in sc
    _, tables, cfgs = _resolve(sc)
    ideal = ideal_times(sc, tables, cfgs[0].nic.pmtu)["ideal_ns"]
    rto = 1024 << sc["reliability"]["ack_timeout_exp"]
    assert rto > 4 * ideal - ideal                       # the old limit: before one RTO
    lim = run_limits(sc, ideal)
    assert lim["time_limit"] * ideal >= ideal + 3 * rto
    assert lim["stall_ns"] >= 3 * rto
    # a scenario's own values win
    assert run_limits(dict(sc, time_limit=2.0, stall_ns=5.0), ideal) == \
        dict(time_limit=2.0, stall_ns=5.0)
