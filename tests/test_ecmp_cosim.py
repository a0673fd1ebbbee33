"""RTL NICs across the ECMP fabric: each EV format mode made for ordinary ECMP fabrics (STEV:
flow label + UDP source port, UDP: source port) delivers a transfer exactly, hashed by the
leaves over their spine uplinks (``lb = "ecmp"``, ``fabric.routing = "ecmp"``)."""

import pytest

from mrcnic.sim.cosim import run_cosim
from mrcnic.sim.scenario_file import loads_scenario

SCENARIO = """
description = "two NICs on different leaves, one QP on one {fmt} EV per plane"
lb = "ecmp"
ev_format = "{fmt}"
seed = 1
size = 16384
evs = 16
nics = [0, 2]
[topology]
planes = 4
leaves = 2
spines = 4
hosts_per_leaf = 2
[fabric]
rate_gbps = 10.0
latency_ns = 200.0
routing = "ecmp"
[[transfers]]
src = 0
dst = 1
"""


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["STEV", "UDP"])
def test_ev_mode_across_ecmp_fabric(tmp_path, fmt):
    sc = loads_scenario(SCENARIO.format(fmt=fmt), f"{fmt}.toml", f"ecmp-{fmt.lower()}")
    rep = run_cosim(sc, build_dir=tmp_path / "b")
    assert rep["complete"]
    assert rep["bytes_delivered"] == rep["bytes_posted"] == 16384
    assert rep["bytes_mismatched"] == 0 and rep["retransmissions"] == 0
    assert all(b > 0 for b in rep["per_plane_bytes"])
    # the data went up through the leaves' FIBs: one spine per plane (one EV, one hash)
    up = {n: p for n, p in rep["fabric_ports"].items() if ".leaf0->" in n and "spine" in n}
    assert up and all(p["frames"] for p in up.values())
    assert len(up) == 4, up
