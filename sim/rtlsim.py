"""Run Amaranth components as Verilog under cocotb + Verilator or Icarus Verilog.

One helper serves the pytest wrappers of every cocotb testbench and the
``mrcnic`` commands that simulate RTL (``send``, ``replay``, ``bench``, ``sim``):
the component is converted to Verilog (Amaranth + Yosys), compiled with the
cocotb Python runner (Verilator by default, Icarus selectable:
:mod:`mrcnic.sim.simulators`; ``timescale 1ns/1ps``) in its own build
directory, and the cocotb test module is run against it.

One build cache (``$MRCNIC_CACHE`` or ``~/.cache/mrcnic``) holds both the
generated Verilog and the compiled simulation models, each under a key made
by :func:`build_key` and built once under a file lock (:func:`cache_lock`),
so parallel pytest-xdist workers never build the same thing twice.

Parameters reach the cocotb side through environment variables: everything
in ``env`` is passed as ``MRCNIC_<KEY>`` (JSON-encoded), read back with
:func:`tb_param`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

__all__ = ["run_rtl", "tb_param", "write_verilog", "build_sim", "build_key", "cache_dir",
           "cache_lock", "cached_verilog", "rtl_files", "verilog_key"]


def cache_dir() -> Path:
    """The build cache: ``$MRCNIC_CACHE``, else ``~/.cache/mrcnic`` (created)."""
    d = Path(os.environ.get("MRCNIC_CACHE") or Path.home() / ".cache" / "mrcnic")
    d.mkdir(parents=True, exist_ok=True)
    return d


def rtl_files(component=None) -> list[Path]:
    """The Python sources a component's Verilog depends on.

    Every module of ``mrcnic.rtl``, the modules they import from ``mrcnic``
    (``wire``, ``wire_format``, ``regmap``, ``config``), this file (it
    post-processes the Verilog), the file defining ``component``'s class (a
    testbench harness may live outside ``rtl/``) and the files defining the
    Amaranth elaboratables that file imports from ``mrcnic`` (e.g. a simulation-only
    block in ``sim/``).  Found through the imported modules, so the same files count
    in a checkout and in an installed package.
    """
    import inspect

    from amaranth.hdl import Elaboratable

    import mrcnic.config
    import mrcnic.regmap
    import mrcnic.rtl
    import mrcnic.wire
    import mrcnic.wire_format

    files = sorted(Path(mrcnic.rtl.__file__).resolve().parent.glob("*.py"))
    files += [Path(m.__file__).resolve()
              for m in (mrcnic.wire, mrcnic.wire_format, mrcnic.regmap, mrcnic.config)]
    files.append(Path(__file__).resolve())
    if component is not None:
        module = inspect.getmodule(type(component))
        files.append(Path(module.__file__).resolve())
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Elaboratable) and \
                    value.__module__.startswith("mrcnic."):
                files.append(Path(inspect.getfile(value)).resolve())
    return list(dict.fromkeys(files))


def build_key(*parts, files=()) -> str:
    """The one build-cache key: a hash of ``parts`` (JSON-able: names, parameters, flags,
    tool versions) and of the name and bytes of every file in ``files``.

    Used for generated Verilog (parts: the component's key, the Amaranth and Yosys
    versions; files: :func:`rtl_files`) and for compiled simulators (parts: the
    simulator, its version, the flags, cocotb's version; files: the Verilog).
    Returns 20 hex digits.
    """
    import hashlib

    h = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode())
    for f in files:
        f = Path(f)
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:20]


@contextmanager
def cache_lock(key: str):
    """Hold an exclusive lock on cache entry ``key`` (parallel pytest workers, parallel
    ``mrcnic`` runs): the first builds, the others wait and then find the entry."""
    import fcntl

    locks = cache_dir() / "locks"
    locks.mkdir(exist_ok=True)
    with open(locks / f"{key}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _store(src: Path, dst: Path):
    """Copy ``src`` to ``dst`` atomically (a reader never sees half a file)."""
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def verilog_key(component, name: str, cache_key: str) -> str:
    """Build-cache key of ``component``'s Verilog (see :func:`build_key`)."""
    import amaranth
    from amaranth._toolchain.yosys import find_yosys

    opt = os.environ.get("MRCNIC_YOSYS_OPT", "1") != "0"
    yosys = find_yosys(lambda ver: ver >= (0, 40)).version() if opt else None
    return build_key("verilog", cache_key, name, opt, amaranth.__version__, str(yosys),
                     files=rtl_files(component))


def write_verilog(component, name: str, build_dir: Path, cache_key: str | None = None) -> Path:
    """Convert ``component`` to Verilog as module ``name`` into ``build_dir``; return the file.

    By default the design is flattened and optimised for simulation speed
    (:func:`_to_sim_verilog`); ``MRCNIC_YOSYS_OPT=0`` keeps Amaranth's own
    Verilog with its hierarchy.  With a ``cache_key`` (naming the component
    and its parameters), the Verilog is kept in the build cache
    (:func:`cache_dir`) under :func:`verilog_key` and reused while the sources
    are unchanged; parallel callers convert it once (:func:`cache_lock`).
    """
    build_dir.mkdir(parents=True, exist_ok=True)
    path = build_dir / f"{name}.v"
    if not cache_key:
        path.write_text(_convert(component, name))
    else:
        shutil.copyfile(cached_verilog(component, name, cache_key), path)
    return path


def changed_since_loaded(files) -> list[Path]:
    """Those of ``files`` modified after this process started.

    The cache key hashes the sources on disk, but a component is elaborated from the
    modules this process imported: a long-lived process (a pytest worker, a served
    simulation) that imported ``rtl/`` before an edit would store the old design under the
    new key, and every later run would simulate stale RTL.  A source newer than the process
    may differ from what it loaded, so such a process does not use the cache.
    """
    import psutil

    # create_time() counts from the boot time in whole seconds: up to 1 s early
    started = psutil.Process().create_time() + 1.5
    return [Path(f) for f in files if Path(f).stat().st_mtime > started]


def cached_text(stem: str, text: str) -> Path:
    """Hand-written Verilog ``text`` as a file of the build cache, named ``stem`` and a hash
    of the text (so the compiled-model key, which hashes the files, follows any edit);
    written atomically once."""
    import hashlib

    path = cache_dir() / f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.v"
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path


def cached_verilog(component, name: str, cache_key: str) -> Path:
    """The build cache's Verilog of ``component`` as module ``name`` (converted on a miss,
    once among parallel callers); ``cache_key`` names the component and its parameters.

    When a source changed after this process started (:func:`changed_since_loaded`), the
    Verilog is converted into ``<cache>/uncached/`` and never enters the cache.
    """
    if changed_since_loaded(rtl_files(component)):
        out = cache_dir() / "uncached" / f"{name}-{os.getpid()}-{id(component):x}.v"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(_convert(component, name))
        return out
    key = verilog_key(component, name, cache_key)
    cached = cache_dir() / f"{name}-{key}.v"
    with cache_lock(key):
        if not cached.exists():
            tmp = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
            tmp.write_text(_convert(component, name))
            os.replace(tmp, cached)
    return cached


def _convert(component, name: str) -> str:
    """Verilog text of ``component`` as module ``name`` (see :func:`write_verilog`)."""
    from amaranth.back import rtlil, verilog

    if os.environ.get("MRCNIC_YOSYS_OPT", "1") != "0":
        text = _to_sim_verilog(rtlil.convert(component, name=name, emit_src=False))
    else:
        text = verilog.convert(component, name=name, emit_src=False)
    # Yosys wakes every `always @*` block at time 0 through a register declared `= 0`; Icarus
    # applies declaration initialisers before processes start, so that event never happens and
    # a mux whose inputs never change (e.g. registers that stay at their reset value) stays X
    # (Amaranth #594/#1629).  Assign the trigger from an `initial #0` block instead.
    return re.sub(r"reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+ ) = 0;",
                  lambda m: f"reg {m.group(1)};\n  initial #0 {m.group(1)} = 1'b0;", text)


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


#: Verilator flags of every build: Yosys' Verilog trips lint warnings that are not errors
VERILATOR_FLAGS = ("-Wno-fatal", "-Wno-lint", "-Wno-style")


def _verilator_runner(public_ports_only: bool, hier_blocks=()):
    """cocotb's Verilator runner with FST waves (``--trace-fst``, not VCD) and, with
    ``public_ports_only``, only the top level's ports visible to cocotb (a control file
    instead of ``--public-flat-rw``, which keeps every internal net and slows the model).

    ``hier_blocks``: Verilog module names verilated and compiled as hierarchical blocks
    (Verilator ``--hierarchical``, a ``hier_block`` control file): each becomes a library
    of its own whose C++ depends on that module alone, so ccache reuses its objects in
    every top that instantiates the same module (the 2-, 4- and 8-NIC co-simulation tops
    share the NIC's); the model is the same, cycle for cycle.
    """
    from cocotb_tools.runner import Verilator

    class _Runner(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            drop = {"--trace"} | ({"--public-flat-rw"} if public_ports_only else set())
            cmds[0] = [a for a in cmds[0] if a not in drop]
            if self.waves:
                cmds[0].insert(1, "--trace-fst")
            if public_ports_only:
                vlt = self.build_dir / "public.vlt"
                vlt.write_text(f'`verilator_config\npublic_flat_rw -module "{self.hdl_toplevel}" -var "*"\n')
                cmds[0].insert(1, str(vlt))
            if hier_blocks:
                vlt = self.build_dir / "hier.vlt"
                vlt.write_text("`verilator_config\n" + "".join(
                    f'hier_block -module "{name}"\n' for name in hier_blocks))
                cmds[0][1:1] = ["--hierarchical", str(vlt)]
            return cmds

    return _Runner()


@contextmanager
def _environ(extra: dict):
    """``os.environ`` with ``extra`` merged in, restored afterwards (cocotb's runner reads it)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _artifact(simulator: str, toplevel: str) -> str:
    """File a build leaves in its build directory that a test run needs."""
    return toplevel if simulator == "verilator" else "sim.vvp"


def build_sim(sources, *, toplevel: str, build_dir, simulator: str | None = None,
              waves: bool = False, quiet: bool = False, public_ports_only: bool = False,
              hier_blocks=(), cache: bool = True):
    """Compile Verilog ``sources`` for ``simulator`` into ``build_dir``, through the cache.

    The compiled model (Verilator's executable, Icarus' ``sim.vvp``) is cached under
    :func:`build_key` of the simulator, its version, the flags, cocotb's version and
    the Verilog itself; parallel builds of the same model wait for the first
    (:func:`cache_lock`).  ``cache=False`` builds from scratch (no cache, no ccache): a
    cold build, as ``mrcnic bench sim`` times it.  ``hier_blocks``: module names Verilator
    builds as hierarchical blocks (see :func:`_verilator_runner`; Icarus ignores them).
    Returns ``(runner, seconds spent building, cache hit)``.

    Raises
    ------
    mrcnic.sim.simulators.SimulatorMissing
        The simulator or a tool it needs is missing.
    SystemExit
        The build failed (cocotb's runner; the log is ``<build_dir>/build.log`` when ``quiet``).
    """
    import time

    import cocotb
    from cocotb_tools.runner import get_runner

    from .simulators import check_waves, resolve, simulator_env, simulator_version

    simulator = resolve(simulator)
    if waves:
        check_waves(simulator)
    build_dir = Path(build_dir).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    env = simulator_env(simulator)
    flags = list(VERILATOR_FLAGS) if simulator == "verilator" else []
    key = build_key("sim", simulator, simulator_version(simulator), cocotb.__version__, flags,
                    toplevel, bool(waves), public_ports_only,
                    sorted(hier_blocks) if simulator == "verilator" else [],
                    files=[Path(s) for s in sources])
    if simulator == "verilator":
        runner = _verilator_runner(public_ports_only, tuple(hier_blocks))
    else:
        runner = get_runner("icarus")
    art = _artifact(simulator, toplevel)
    cached = cache_dir() / f"{toplevel}-{simulator}-{key}.bin"
    if simulator == "icarus" and waves:
        cache = False              # its sim.vvp names the wave file by its absolute path
    if not cache:
        env = dict(env, CCACHE_DISABLE="1")
    t0 = time.monotonic()
    with cache_lock(key), _environ(env):
        hit = cache and cached.exists()
        if not hit:
            runner.build(sources=list(map(str, sources)), hdl_toplevel=toplevel,
                         build_dir=build_dir, timescale=("1ns", "1ps"), waves=waves,
                         always=True, build_args=flags,
                         log_file=build_dir / "build.log" if quiet else None)
            if cache:
                _store(build_dir / art, cached)
        else:
            _store(cached, build_dir / art)
    return runner, time.monotonic() - t0, hit


def run_rtl(component, *, toplevel: str, test_module: str, build_dir, env: dict | None = None,
            testcase: str | None = None, waves: bool = False, fresh: bool = True,
            quiet: bool = False, cache_key: str | None = None, sources=(),
            simulator: str | None = None, public_ports_only: bool = False,
            hier_blocks=()) -> Path:
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
    simulator : ``"verilator"`` or ``"icarus"`` (default: ``$MRCNIC_SIM``, else Verilator;
        :mod:`mrcnic.sim.simulators`).  The compiled model is cached (:func:`build_sim`).
    public_ports_only : with Verilator, only the top level's ports are visible to the test
        (faster); by default every net is, as under Icarus.
    hier_blocks : Verilog module names (instantiated in ``sources``) that Verilator builds
        as hierarchical blocks, shared through ccache between tops (:func:`build_sim`).

    Returns the results XML path.  When any cocotb test failed this raises:
    under pytest the cocotb runner itself exits (``SystemExit``) after
    logging the failing tests, elsewhere ``AssertionError``; either way the
    caller fails.  The logs are ``<build_dir>/sim.log`` when ``quiet``.
    A missing simulator or compiler raises
    :class:`~mrcnic.sim.simulators.SimulatorMissing`.
    """
    from cocotb_tools.runner import get_results

    from .simulators import check_waves, resolve, simulator_env

    simulator = resolve(simulator)
    simulator_env(simulator)                 # a missing tool fails before the Verilog is made
    if waves:
        check_waves(simulator)
    build_dir = Path(build_dir).resolve()
    if fresh and build_dir.exists():
        shutil.rmtree(build_dir)
    src = write_verilog(component, toplevel, build_dir, cache_key)
    runner, _, _ = build_sim([src, *sources], toplevel=toplevel, build_dir=build_dir,
                             simulator=simulator, waves=waves, quiet=quiet,
                             public_ports_only=public_ports_only, hier_blocks=hier_blocks)
    extra_env = {f"MRCNIC_{k.upper()}": json.dumps(v) for k, v in (env or {}).items()}
    extra_env["MRCNIC_SIMULATOR"] = json.dumps(simulator)
    # cocotb rewrites the asserts of every module the simulation imports (its default
    # "*.py": Scapy, the wire format, ...) at every start, about 1.5 s a run; only the
    # test benches' own files need the better failure messages
    extra_env["COCOTB_REWRITE_ASSERTION_FILES"] = os.environ.get(
        "COCOTB_REWRITE_ASSERTION_FILES", "test_*.py *_tb.py")
    extra_env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])
    with _environ(simulator_env(simulator)):
        results = runner.test(test_module=test_module, hdl_toplevel=toplevel,
                              hdl_toplevel_lang="verilog", build_dir=build_dir,
                              testcase=testcase, extra_env=extra_env, waves=waves,
                              timescale=("1ns", "1ps"),
                              log_file=build_dir / "sim.log" if quiet else None)
    if waves and simulator == "verilator" and (build_dir / "dump.fst").exists():
        os.replace(build_dir / "dump.fst", build_dir / f"{toplevel}.fst")
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
