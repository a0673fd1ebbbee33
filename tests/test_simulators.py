"""Both simulators, one build cache (issue "Fast simulation").

* ``mrcnic sim``'s default scenario gives the same report (every field but the
  wall-clock ones) and a byte-identical pcap under Verilator and Icarus.
* The co-simulation's host memory models (sim/fastaxiram.py) give what cocotbext-axi's
  ``AxiRam`` gives: the same report and pcap (default and link-flap scenarios).
* The build-cache key covers every source the Verilog is made from.
* A missing simulator or compiler is one line on stderr, not a traceback.
"""

import os
import subprocess
import sys

import pytest

from mrcnic.sim import rtlsim
from mrcnic.sim.cosim import run_cosim
from mrcnic.sim.simulators import SimulatorMissing, resolve, simulator_env

#: report fields that measure or name the host side (simulator, host-memory and frame-port
#: models), not the simulated NICs
HOST_FIELDS = {"cocotb_wall_s", "loop_python_s", "cycles_per_s", "wall_s", "simulator",
               "hostmem", "frameports"}


def _comparable(rep: dict) -> dict:
    out = {k: v for k, v in rep.items() if k not in ("build_dir", "pcap")}
    out["sim"] = {k: v for k, v in rep["sim"].items() if k not in HOST_FIELDS}
    return out


def assert_runs_identical(tmp_path, scenario, variants, monkeypatch=None):
    """Run ``scenario`` (test size) once per variant ``{name: dict(kwargs..., env={...})}``
    (``env`` set through ``monkeypatch``); every run completes exactly, and every report
    (host-side fields aside) and pcap equals the first variant's."""
    reps, pcaps = {}, {}
    for name, kw in variants.items():
        kw = dict(kw)
        for var, value in kw.pop("env", {}).items():
            monkeypatch.setenv(var, value)
        pcaps[name] = tmp_path / f"{name}.pcap"
        reps[name] = run_cosim(scenario, test=True, pcap=pcaps[name],
                               build_dir=tmp_path / name, **kw)
        assert reps[name]["complete"] and reps[name]["bytes_mismatched"] == 0, name
    first, *others = variants
    ref = _comparable(reps[first])
    for name in others:
        got = _comparable(reps[name])
        assert ref.keys() == got.keys(), name
        assert [k for k in ref if ref[k] != got[k]] == [], name
        assert pcaps[name].read_bytes() == pcaps[first].read_bytes(), name
    return reps


@pytest.mark.slow
def test_default_scenario_identical_under_both_simulators(tmp_path):
    reps = assert_runs_identical(tmp_path, "default", {
        sim: dict(simulator=sim) for sim in ("verilator", "icarus")})
    assert [reps[s]["sim"]["simulator"] for s in reps] == ["verilator", "icarus"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["default", "link-flap"])
def test_host_memory_models_identical(tmp_path, monkeypatch, scenario):
    """The co-simulation's host memory (sim/fastaxiram.py: AxiRamOneTask, and AxiRamFast)
    drives what cocotbext-axi's AxiRam drives, cycle for cycle: same report, same pcap."""
    assert_runs_identical(tmp_path, scenario, {
        model: dict(simulator="verilator", env=dict(MRCNIC_COSIM_AXIRAM=model))
        for model in ("cocotbext", "fast", "onetask")}, monkeypatch)


def test_build_key_covers_the_sources(tmp_path):
    import mrcnic.config
    import mrcnic.regmap
    import mrcnic.wire
    import mrcnic.wire_format
    from mrcnic.sim import hostmem_hdl
    from mrcnic.sim.hostmem_tb import HostMemPair

    files = rtlsim.rtl_files()
    for mod in (mrcnic.wire, mrcnic.wire_format, mrcnic.regmap, mrcnic.config, rtlsim):
        assert os.path.realpath(mod.__file__) in {str(f) for f in files}
    assert any(f.parent.name == "rtl" and f.name == "nic.py" for f in files)
    # a harness outside rtl/: its file and the sim-only blocks it builds on
    harness = {str(f) for f in rtlsim.rtl_files(HostMemPair())}
    assert os.path.realpath(hostmem_hdl.__file__) in harness
    f = tmp_path / "wire.py"
    f.write_text("A = 1\n")
    k1 = rtlsim.build_key("verilog", "x", files=[f])
    assert rtlsim.build_key("verilog", "x", files=[f]) == k1
    f.write_text("A = 2\n")
    assert rtlsim.build_key("verilog", "x", files=[f]) != k1
    assert rtlsim.build_key("verilog", "y", files=[f]) != rtlsim.build_key("verilog", "x",
                                                                               files=[f])


def test_simulator_choice(monkeypatch):
    monkeypatch.delenv("MRCNIC_SIM", raising=False)
    assert resolve() == "verilator"
    monkeypatch.setenv("MRCNIC_SIM", "icarus")
    assert resolve() == "icarus"
    assert resolve("verilator") == "verilator"
    with pytest.raises(ValueError):
        resolve("modelsim")


def test_missing_compiler_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))          # no g++, no make, no iverilog
    with pytest.raises(SimulatorMissing, match="g\\+\\+ not found"):
        simulator_env("verilator")
    with pytest.raises(SimulatorMissing, match="iverilog not found"):
        simulator_env("icarus")
    proc = subprocess.run([sys.executable, "-m", "mrcnic.cli", "sim", "--simulator", "verilator"],
                          capture_output=True, text=True, env=dict(os.environ, PATH=str(tmp_path)),
                          timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "g++ not found" in lines[0], proc.stderr


@pytest.mark.parametrize("sim", ["verilator", "icarus"])
def test_fst_waves(tmp_path, sim):
    from mrcnic.rtl.plane_mux import PlaneMux

    rtlsim.run_rtl(PlaneMux(inputs=2), toplevel="plane_mux",
                   test_module="tests.rtl.test_plane_mux", build_dir=tmp_path / "b",
                   env={"idle": False, "backpressure": False}, quiet=True, waves=True,
                   simulator=sim)
    fst = tmp_path / "b" / "plane_mux.fst"
    assert fst.stat().st_size > 1000


def test_stale_process_never_fills_the_cache(tmp_path, monkeypatch):
    """A source edited after the process started (the process may hold the old module)
    is converted outside the cache: the cache never gets old RTL under a new key."""
    import os
    import time

    from amaranth.hdl import Module, Signal
    from amaranth.lib import wiring
    from amaranth.lib.wiring import Out

    from mrcnic.sim import rtlsim

    class Tiny(wiring.Component):
        o: Out(1)

        def elaborate(self, platform):
            m = Module()
            m.d.comb += self.o.eq(1)
            return m

    monkeypatch.setenv("MRCNIC_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "tiny_src.py"
    src.write_text("# stands for an rtl/ module\n")
    monkeypatch.setattr(rtlsim, "rtl_files", lambda component=None: [src])
    old = time.time() - 3600
    os.utime(src, (old, old))                      # untouched since before the process
    cached = rtlsim.cached_verilog(Tiny(), "tiny", "Tiny")
    assert cached.parent == rtlsim.cache_dir()
    src.write_text("# edited while the process runs\n")      # mtime: now
    fresh = rtlsim.cached_verilog(Tiny(), "tiny", "Tiny")
    assert fresh.parent.name == "uncached"
    assert sorted(p.name for p in rtlsim.cache_dir().glob("tiny-*.v")) == [cached.name]
