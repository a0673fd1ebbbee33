"""The co-simulation's host memory in HDL (sim/hostmem_hdl.py) is the Python model's
(sim/fastaxiram.py: AxiRamOneTask) cycle for cycle.

* Under random AXI4 traffic with random back-pressure, every output of the HDL memory
  equals the Python model's at every clock edge, and both hold the same bytes at the end
  (sim/hostmem_tb.py; Icarus).
* ``mrcnic sim``'s default scenario gives the same report (every field but the wall-clock
  ones and the model's name) and a byte-identical pcap with either host memory.
"""

import pytest

from mrcnic.sim.rtlsim import run_rtl
from tests.test_simulators import assert_runs_identical


@pytest.mark.parametrize("seed", [1, 2])
def test_hdl_memory_matches_python_model(tmp_path, seed):
    from mrcnic.sim.hostmem_hdl import ram_verilog
    from mrcnic.sim.hostmem_tb import HostMemPair

    run_rtl(HostMemPair(), toplevel="hostmem_pair", test_module="mrcnic.sim.hostmem_tb",
            build_dir=tmp_path, env=dict(seed=seed, bursts=120), sources=[ram_verilog()],
            simulator="icarus", quiet=True, cache_key="HostMemPair")


@pytest.mark.slow
def test_default_scenario_same_with_hdl_memory(tmp_path):
    reps = assert_runs_identical(tmp_path, "default", {
        model: dict(simulator="verilator", hostmem=model) for model in ("python", "hdl")})
    assert [reps[m]["sim"]["hostmem"] for m in reps] == ["python", "hdl"]
