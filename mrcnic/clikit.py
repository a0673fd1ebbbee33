"""Shared pieces of the ``mrcnic`` command line: exit codes, one error style, option types.

Exit codes (every command, ``mrcnic --help`` and README "Exit codes"):

====  =====================================================================================
0     success, or a stop the user asked for (Ctrl-C on ``sim --serve``, ``--serve-time``,
      the stop file): the report says ``stopped``
1     the command ran but failed its own checks (transfer incomplete or corrupted, timing
      not met, no bitstream, a bench or firmware check failed, the target did not answer)
2     bad usage or input (unknown option or value, unreadable or invalid file, an output
      path that cannot be written), found before anything is built or run
130   interrupted (Ctrl-C / SIGINT, SIGTERM) before the command finished
====  =====================================================================================

Every error is one line on stderr, ``error: <command>: <message>``; :class:`MrcnicGroup`
turns click's own usage errors into the same form.  Options that name output files use
:data:`OUT_FILE` / :data:`OUT_DIR`, checked while the command line is parsed, so a run never
simulates for a minute before finding it cannot write its report.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import click

__all__ = ["console", "CONFIG", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_INTERRUPTED",
           "EXIT_CODES", "MrcnicGroup", "InputError", "RunFailed", "SIZE", "OUT_FILE", "OUT_DIR",
           "parse_size", "check_output_file", "check_output_dir"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_CODES = {EXIT_OK: "success, or a stop the user asked for (the report says 'stopped')",
              EXIT_FAILED: "the run failed its own checks",
              EXIT_USAGE: "bad usage or input (found before anything runs)",
              EXIT_INTERRUPTED: "interrupted (Ctrl-C / SIGTERM)"}


class InputError(click.ClickException):
    """Bad input found by a command (a file, a value, a name): exit status 2."""

    exit_code = EXIT_USAGE


class RunFailed(click.ClickException):
    """The command ran but its result failed its own checks: exit status 1."""

    exit_code = EXIT_FAILED


def _echo_error(message: str):
    click.secho(f"error: {message}", fg="red", err=True)


class MrcnicGroup(click.Group):
    """The top-level group: every error, click's included, as one ``error: ...`` line with the
    documented exit code (:data:`EXIT_CODES`); Ctrl-C anywhere exits 130."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        """Run the command line; exit with the documented code (see the module docstring)."""
        prog_name = "mrcnic"       # also under ``python -m mrcnic.cli`` and click.testing
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Exit as exc:           # --help, --version, ctx.exit()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "mrcnic"
            hint = f" (see '{where} --help')" if exc.ctx is not None else ""
            _echo_error(f"{where}: {_one_line(exc.format_message())}{hint}")
            sys.exit(EXIT_USAGE)
        except click.ClickException as exc:
            ctx = click.get_current_context(silent=True)
            where = ctx.command_path if ctx is not None else _command_path(args)
            _echo_error(f"{where}: {_one_line(exc.format_message())}")
            sys.exit(exc.exit_code)
        except (click.exceptions.Abort, KeyboardInterrupt):
            click.secho("interrupted", fg="yellow", err=True)
            sys.exit(EXIT_INTERRUPTED)
        if standalone_mode:
            sys.exit(rv if isinstance(rv, int) else EXIT_OK)
        return rv


def _command_path(args) -> str:
    args = list(sys.argv[1:] if args is None else args)
    words = []
    for a in args:
        if a.startswith("-"):
            break
        words.append(a)
    return " ".join(["mrcnic"] + words[:2])


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


# ---- sizes with units -------------------------------------------------------------------
_UNITS = {"": 1, "b": 1,
          "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30,
          "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3}


def parse_size(text) -> int:
    """Bytes of a size: ``65536``, ``0x10000``, ``64k`` / ``64KiB`` (x1024), ``1M`` / ``1MiB``,
    ``1G`` / ``1GiB``; ``kB``/``MB``/``GB`` are decimal (x1000).  Case-insensitive.

    Raises ``ValueError`` for anything else, a negative size, or a size that is not a whole
    number of bytes.
    """
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    s = str(text).strip()
    if s.startswith("-"):
        raise ValueError(f"{text!r}: a size cannot be negative")
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", s):
        return int(s, 16)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", s)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size (bytes, or with a unit: 64k, 64KiB, 1MiB, "
                         "1M, 1G; kB/MB/GB are powers of 1000)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(value)


class _SizeType(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = _SizeType()      #: a click type for byte sizes with units (:func:`parse_size`)


# ---- output paths, checked while parsing ----------------------------------------------
def check_output_file(path) -> Path:
    """``path`` as a :class:`Path` if a file can be written there; ``ValueError`` otherwise.

    The folder must exist and be writable, and ``path`` must not be a folder; the file is
    opened for writing once (created and removed again when it did not exist; an existing
    one is opened for appending and left as it was), so that a file system that refuses
    files (``/proc``, a read-only mount) fails here, before a run, not after it.  An empty
    path is refused.
    """
    if not str(path).strip():
        raise ValueError("an empty path is not a file name")
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{path} is a directory, not a file")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"cannot write {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ValueError(f"cannot write {path}: permission denied")
    existed = p.exists()
    try:
        with open(p, "ab" if existed else "xb"):
            pass
        if not existed:
            p.unlink()
    except OSError as exc:
        raise ValueError(f"cannot write {path}: {exc.strerror or exc}") from None
    return p


def check_output_dir(path) -> Path:
    """``path`` as a :class:`Path` if it is, or can be made, a writable folder; else ``ValueError``.

    Nothing is created: the nearest existing ancestor must be a writable folder.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{path} exists and is not a directory")
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"cannot create {path}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write in {path}: permission denied on {probe}")
    return p


class _OutPath(click.ParamType):
    def __init__(self, directory: bool):
        self.directory = directory
        self.name = "DIR" if directory else "FILE"

    def convert(self, value, param, ctx):
        if value is None:
            return None
        try:
            p = check_output_dir(value) if self.directory else check_output_file(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return str(p)


OUT_FILE = _OutPath(directory=False)    #: an output file, checked before the command runs
OUT_DIR = _OutPath(directory=True)      #: an output folder (created later if needed), checked


def console(**kwargs):
    """A ``rich`` Console for the CLI's tables and progress: the terminal's width on a
    terminal; when the output is piped or redirected (rich would wrap at 80 columns, cutting
    the report tables' rows in two) 160; ``$COLUMNS`` wins when it is a number of at least
    60 (smaller or malformed values are ignored: a width of 0 printed no report at all).
    ``kwargs`` go to ``rich.console.Console`` (e.g. ``stderr=True``)."""
    from rich.console import Console

    stream = sys.stderr if kwargs.get("stderr") else sys.stdout
    if "width" not in kwargs:
        cols = os.environ.get("COLUMNS", "").strip()
        n = int(cols) if cols.isdigit() else 0
        if n >= 60:
            kwargs["width"] = n
        elif not stream.isatty():
            kwargs["width"] = 160
        elif cols:                  # a $COLUMNS of 0, 20 or "abc" on a terminal: ignored
            kwargs["width"] = 80
    return Console(**kwargs)


class _ConfigPath(click.ParamType):
    """A NIC configuration file: an existing file, or a packaged example named as in the
    repository (``examples/two_nics.toml``: found in the installed package when there is no
    such file here, so the README's commands run from any folder)."""

    name = "FILE"

    def convert(self, value, param, ctx):
        if value is None:
            return None
        p = Path(value)
        if p.is_file():
            return str(p)
        if p.is_dir():
            self.fail(f"{value} is a directory, not a file", param, ctx)
        from .resources import resource
        if str(value).replace("\\", "/").startswith("examples/"):
            try:
                return str(resource(value))
            except FileNotFoundError as exc:
                self.fail(str(exc), param, ctx)
        self.fail(f"file {value!r} does not exist", param, ctx)


#: ``--config`` of send / replay: a file, or a packaged ``examples/...`` configuration
CONFIG = _ConfigPath()
