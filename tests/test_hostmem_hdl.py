"""The co-simulation's host memory in HDL (sim/hostmem_hdl.py) is the Python model's
(sim/fastaxiram.py: AxiRamOneTask) cycle for cycle.

* Under random AXI4 traffic with random back-pressure, every output of the HDL memory
  equals the Python model's at every clock edge, and both hold the same bytes at the end
  (sim/hostmem_tb.py; Icarus).
* ``mrcnic sim``'s default scenario gives the same report (every field but the wall-clock
  ones and the model's name) and a byte-identical pcap with either host memory.
"""

import pytest

from mrcnic.sim.cosim import run_cosim
from mrcnic.sim.rtlsim import run_rtl

#: report fields that measure the host, or name the host memory model
HOST = {"cocotb_wall_s", "cycles_per_s", "wall_s", "simulator", "hostmem"}


def _comparable(rep: dict) -> dict:
    out = {k: v for k, v in rep.items() if k not in ("build_dir", "pcap")}
    out["sim"] = {k: v for k, v in rep["sim"].items() if k not in HOST}
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_hdl_memory_matches_python_model(tmp_path, seed):
    from mrcnic.sim.hostmem_hdl import ram_verilog
    from mrcnic.sim.hostmem_tb import HostMemPair

    run_rtl(HostMemPair(), toplevel="hostmem_pair", test_module="mrcnic.sim.hostmem_tb",
            build_dir=tmp_path, env=dict(seed=seed, bursts=120), sources=[ram_verilog()],
            simulator="icarus", quiet=True, cache_key="HostMemPair")


@pytest.mark.slow
def test_default_scenario_same_with_hdl_memory(tmp_path):
    reps, pcaps = {}, {}
    for model in ("python", "hdl"):
        pcaps[model] = tmp_path / f"{model}.pcap"
        reps[model] = run_cosim("default", test=True, simulator="verilator", hostmem=model,
                                pcap=pcaps[model], build_dir=tmp_path / model)
        assert reps[model]["sim"]["hostmem"] == model
        assert reps[model]["complete"] and reps[model]["bytes_mismatched"] == 0
    a, b = _comparable(reps["python"]), _comparable(reps["hdl"])
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []
    assert pcaps["python"].read_bytes() == pcaps["hdl"].read_bytes()
