"""The co-simulation's plane-port frame hand-off in HDL (sim/frameport_hdl.py) drives what
cocotbext-axi's stream source and sink (sim/fastaxis.py) drive, cycle for cycle.

* ``mrcnic sim``'s default scenario and a run with random faults (loss, corruption,
  duplication, reordering: the end-of-run drain path) give the same report (every field
  but the wall-clock ones and the models' names) and a byte-identical pcap with the frame
  ports and the host memory in HDL or in Python.
* The modules on their own, against the same Python models on small rings (backlog, wrap):
  tests/test_frameport_unit.py.
"""

import pytest

from tests.test_simulators import assert_runs_identical

BOTH_PYTHON = dict(simulator="verilator", hostmem="python", frameports="python")
BOTH_HDL = dict(simulator="verilator", hostmem="hdl", frameports="hdl")


@pytest.mark.slow
def test_default_scenario_same_with_hdl_frame_ports(tmp_path):
    reps = assert_runs_identical(tmp_path, "default", {"python": BOTH_PYTHON, "hdl": BOTH_HDL})
    assert [reps[m]["sim"]["frameports"] for m in reps] == ["python", "hdl"]


@pytest.mark.slow
def test_faulty_run_same_with_hdl_frame_ports(tmp_path):
    faults = dict(faults="loss=0:0.02,corrupt=0:0.01,dup=0:0.01,reorder=0:0.02", seed=7)
    reps = assert_runs_identical(tmp_path, "default", {
        "python": dict(BOTH_PYTHON, **faults), "hdl": dict(BOTH_HDL, **faults)})
    assert reps["hdl"]["verdict"] == "pass"
