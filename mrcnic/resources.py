"""Run-time data shipped inside the ``mrcnic`` package, found through :mod:`importlib.resources`.

Everything a command reads at run time travels with the installed package, so a plain
(non-editable) ``pip install`` works from any directory:

* ``examples/*.toml`` -- the example NIC configurations (package ``mrcnic.examples``,
  mapped to the repository's ``examples/`` folder in ``pyproject.toml``); the built-in
  ``mrcnic sim`` scenarios name them as ``examples/<file>``;
* ``wireshark/mrcnic.lua`` -- the Wireshark dissector (package ``mrcnic.wireshark``).

The built-in scenarios are Python data (:mod:`mrcnic.sim.scenarios`) and, identical (a
test compares them), scenario files ``examples/scenarios/<name>.toml`` (package
``mrcnic.examples.scenarios``) that ``mrcnic sim`` reads with the loader of user-written
scenario files (:mod:`mrcnic.sim.scenario_file`).
"""

from __future__ import annotations

from importlib import resources

__all__ = ["resource", "resource_text", "example", "dissector_path"]

_PACKAGES = {"examples": "mrcnic.examples", "wireshark": "mrcnic.wireshark"}


def resource(name: str):
    """The :class:`importlib.resources.abc.Traversable` of ``name`` (``"examples/nic1.toml"``).

    Raises ``FileNotFoundError`` naming what exists when there is no such resource.
    """
    folder, _, file = str(name).replace("\\", "/").partition("/")
    if folder not in _PACKAGES or not file or "/" in file:
        raise FileNotFoundError(f"no packaged resource {name!r} "
                                f"(folders: {', '.join(sorted(_PACKAGES))})")
    item = resources.files(_PACKAGES[folder]).joinpath(file)
    if not item.is_file():
        have = sorted(p.name for p in resources.files(_PACKAGES[folder]).iterdir()
                      if p.is_file() and not p.name.endswith((".py", ".pyc")))
        raise FileNotFoundError(f"no packaged resource {name!r} ({folder}/: {', '.join(have)})")
    return item


def resource_text(name: str) -> str:
    """The text of the packaged resource ``name`` (see :func:`resource`)."""
    return resource(name).read_text(encoding="utf-8")


def example(file: str):
    """A real filesystem path of ``examples/<file>`` (the installed copy).

    For a package installed as files (wheel or editable) this is the file itself; a
    zipped install would need :func:`importlib.resources.as_file`.
    """
    from pathlib import Path
    return Path(str(resource(f"examples/{file}")))


def dissector_path():
    """Path of the Wireshark Lua dissector shipped with the package (``mrcnic.lua``)."""
    from pathlib import Path
    return Path(str(resource("wireshark/mrcnic.lua")))
