"""Run Amaranth components as Verilog under cocotb + Icarus Verilog.

One helper serves the pytest wrappers of every cocotb testbench and the
``mrcnic`` commands that simulate RTL (``send``, ``replay``, ``bench``, ``sim``):
the component is converted with :func:`amaranth.back.verilog.convert`, built
with the cocotb Python runner (Icarus, ``timescale 1ns/1ps``) in its own build
directory, and the cocotb test module is run against it.

Parameters reach the cocotb side through environment variables: everything
in ``env`` is passed as ``MRCNIC_<KEY>`` (JSON-encoded), read back with
:func:`tb_param`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

__all__ = ["run_rtl", "tb_param", "write_verilog"]


def _rtl_digest(component) -> str:
    """Hash of every ``rtl/`` source file and of the file defining ``component``'s class.

    A cached Verilog is valid while they are unchanged.
    """
    import hashlib
    import inspect

    h = hashlib.sha256()
    files = sorted((Path(__file__).resolve().parents[1] / "rtl").glob("*.py"))
    files.append(Path(inspect.getfile(type(component))))
    for f in files:
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def write_verilog(component, name: str, build_dir: Path, cache_key: str | None = None) -> Path:
    """Convert ``component`` to Verilog as module ``name`` into ``build_dir``; return the file.

    By default the design is flattened and optimised for simulation speed
    (:func:`_to_sim_verilog`); ``MRCNIC_YOSYS_OPT=0`` keeps Amaranth's own
    Verilog with its hierarchy.  With a ``cache_key`` (naming the component
    and its parameters), the Verilog is kept in ``~/.cache/mrcnic`` (or
    ``$MRCNIC_CACHE``) and reused while the ``rtl/`` sources are unchanged.
    """
    from amaranth.back import rtlil, verilog

    build_dir.mkdir(parents=True, exist_ok=True)
    path = build_dir / f"{name}.v"
    opt = os.environ.get("MRCNIC_YOSYS_OPT", "1") != "0"
    cached = None
    if cache_key:
        cache_dir = Path(os.environ.get("MRCNIC_CACHE", Path.home() / ".cache" / "mrcnic"))
        cached = cache_dir / f"{cache_key}-{name}-{int(opt)}-{_rtl_digest(component)}.v"
        if cached.exists():
            shutil.copyfile(cached, path)
            return path
    if opt:
        text = _to_sim_verilog(rtlil.convert(component, name=name, emit_src=False))
    else:
        text = verilog.convert(component, name=name, emit_src=False)
    # Yosys wakes every `always @*` block at time 0 through a register declared `= 0`; Icarus
    # applies declaration initialisers before processes start, so that event never happens and
    # a mux whose inputs never change (e.g. registers that stay at their reset value) stays X
    # (Amaranth #594/#1629).  Assign the trigger from an `initial #0` block instead.
    text = re.sub(r"reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+ ) = 0;",
                  lambda m: f"reg {m.group(1)};\n  initial #0 {m.group(1)} = 1'b0;", text)
    path.write_text(text)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, cached)          # atomic: parallel workers never read a partial file
    return path


def _to_sim_verilog(rtlil_text: str) -> str:
    """Verilog of ``rtlil_text`` flattened and optimised into simple assignments.

    Amaranth's Verilog keeps each process as an ``always @*`` block that Icarus
    re-evaluates whole whenever any of its inputs changes; after ``proc``,
    ``flatten`` and ``opt`` the same logic is a net of small continuous
    assignments, which Icarus simulates much faster.  Same RTL, no
    technology mapping.
    """
    from amaranth._toolchain.yosys import find_yosys

    yosys = find_yosys(lambda ver: ver >= (0, 40))
    script = "\n".join([
        f"read_rtlil <<rtlil\n{rtlil_text}\nrtlil",
        "proc", "flatten", "memory_collect", "opt", "opt_clean -purge",
        "write_verilog -noattr",
    ])
    return yosys.run(["-q", "-"], script, ignore_warnings=True)


def run_rtl(component, *, toplevel: str, test_module: str, build_dir, env: dict | None = None,
            testcase: str | None = None, waves: bool = False, fresh: bool = True,
            quiet: bool = False, cache_key: str | None = None, sources=()) -> Path:
    """Build ``component`` and run the cocotb ``test_module`` on it.

    Parameters
    ----------
    component : amaranth Elaboratable (usually a ``wiring.Component``)
    toplevel : Verilog module name given to the design.
    test_module : dotted name of the cocotb test module (must be importable).
    build_dir : directory of this run (one per test ID); recreated when ``fresh``.
    env : values passed to the testbench (``MRCNIC_<KEY>`` = JSON).
    testcase : run only this cocotb test.
    waves : dump an FST waveform (``<build_dir>/<toplevel>.fst``).
    cache_key : reuse the Verilog of an identical earlier build (see :func:`write_verilog`).
    sources : further Verilog files to build with it (modules the component instantiates).

    Returns the results XML path.  When any cocotb test failed this raises:
    under pytest the cocotb runner itself exits (``SystemExit``) after
    logging the failing tests, elsewhere ``AssertionError``; either way the
    caller fails.  The logs are ``<build_dir>/sim.log`` when ``quiet``.
    """
    from cocotb_tools.runner import get_results, get_runner

    build_dir = Path(build_dir).resolve()
    if fresh and build_dir.exists():
        shutil.rmtree(build_dir)
    src = write_verilog(component, toplevel, build_dir, cache_key)
    runner = get_runner("icarus")
    runner.build(sources=[src, *map(str, sources)], hdl_toplevel=toplevel, build_dir=build_dir,
                 timescale=("1ns", "1ps"), waves=waves, always=True,
                 log_file=build_dir / "build.log" if quiet else None)
    extra_env = {f"MRCNIC_{k.upper()}": json.dumps(v) for k, v in (env or {}).items()}
    extra_env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])
    results = runner.test(test_module=test_module, hdl_toplevel=toplevel, build_dir=build_dir,
                          testcase=testcase, extra_env=extra_env, waves=waves,
                          timescale=("1ns", "1ps"),
                          log_file=build_dir / "sim.log" if quiet else None)
    total, failed = get_results(results)
    if failed:
        raise AssertionError(f"{failed} of {total} cocotb tests failed (see {build_dir})")
    if total == 0:
        raise AssertionError(f"no cocotb test ran (see {build_dir})")
    return results


def tb_param(key: str, default=None):
    """Read a value passed by :func:`run_rtl` (``env[key]``) inside a cocotb test."""
    raw = os.environ.get(f"MRCNIC_{key.upper()}")
    return default if raw is None else json.loads(raw)
