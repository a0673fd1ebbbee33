"""Seeded random faults for the fabric model (``mrcnic sim --faults``, ``mrcnic campaign``).

A **fault spec** (:class:`FaultSpec`, text form ``"loss=0:0.01,corrupt=0.002,flaps=0:2"``)
gives each fault kind a range; :func:`draw` turns a spec and a seed into the concrete
faults of one run (a JSON-able dict), and :class:`FaultInjector` applies the per-frame ones
inside :class:`mrcnic.sim.fabric.Fabric` (hook ``Fabric.faults``, off by default).  Every
random choice comes from the run's seed, so ``(scenario, size, spec, seed)`` replays a run
exactly (the RTL and the fabric are deterministic).

Fault kinds (``KINDS``; a value is ``x`` or a range ``lo:hi``, drawn uniformly per run):

``loss``      probability that a frame is lost on a link direction, per frame; each link
              direction gets its own rate, uniform in [0, 2 x the run's rate] ("per-link").
``corrupt``   probability that a frame is corrupted on a link direction, per frame.  On a
              link into a switch the switch's MAC drops it by FCS (counted ``fcs``); on the
              last hop into a NIC one ICRC-covered bit is flipped (never a masked bit: the
              flip is checked with :func:`mrcnic.wire.check_icrc`), so the NIC must drop it.
``dup``       probability that a frame arrives twice (the copy 1 ns after the original).
``reorder``   probability that a frame is held back by a jitter delay on its link...
``jitter_ns`` ...uniform in [0, jitter_ns] ns (default 2000 ns), so later frames pass it.
``trim``      probability that a data frame leaving a switch is trimmed (queue pressure:
              :func:`mrcnic.wire.trim_frame` with the fabric's trim DSCP).
``flaps``     number of link flaps per run (integer): a random link (host or fabric) fails
              at a random time in [0.05, 1.0] x ``ideal_ns`` after posting and comes back
              [0.05, 0.5] x ``ideal_ns`` later.
``switches``  number of switch failures per run (integer): a random spine fails and comes back
              as a flap does.
``plane``     probability that one random plane fails for good at a random time in
              [0.05, 1.0] x ``ideal_ns``.

Frame-level faults apply to every frame on every link direction (data, ACKs, probes), after
the link-down checks of the fabric (a lost-in-flight frame is counted as before).
Accounting: every frame the injector removes is counted in the port's drops (``fault_loss``,
``fcs``); duplicates and delayed frames are counted so that :meth:`FaultInjector.counters`
and :meth:`mrcnic.sim.fabric.Fabric.conservation` balance.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from mrcnic import wire
from mrcnic import wire_format as wf
from mrcnic.sim.fabric import _CONTROL

__all__ = ["FaultSpec", "FaultInjector", "draw", "parse_spec", "KINDS", "run_seed"]

#: Fault kinds of a spec, in their canonical order (text form and table columns).
KINDS = ("loss", "corrupt", "dup", "reorder", "jitter_ns", "trim", "flaps", "switches", "plane")
_INT_KINDS = ("flaps", "switches")
MAX_COUNT = 64          #: most link flaps / switch failures a run may draw
_PROB_KINDS = ("loss", "corrupt", "dup", "reorder", "trim", "plane")


@dataclass(frozen=True)
class FaultSpec:
    """Ranges of every fault kind: ``{kind: (lo, hi)}`` (see the module docstring).

    Probabilities are per frame and link direction (``plane``: per run), in 0..1;
    ``jitter_ns`` in ns; ``flaps`` / ``switches`` counts per run.
    """

    ranges: dict = field(default_factory=dict)

    def text(self) -> str:
        """The canonical text form (``parse_spec(spec.text()) == spec``)."""
        out = []
        for k in KINDS:
            if k in self.ranges:
                lo, hi = self.ranges[k]
                out.append(f"{k}={_num(lo)}" if lo == hi else f"{k}={_num(lo)}:{_num(hi)}")
        return ",".join(out)

    def __bool__(self):
        return any(hi > 0 for k, (lo, hi) in self.ranges.items() if k != "jitter_ns")


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def parse_spec(text: str | None) -> FaultSpec:
    """Parse ``"kind=x,kind=lo:hi,..."`` into a :class:`FaultSpec`.

    Raises ``ValueError`` for an unknown or repeated kind, a malformed, non-finite (nan,
    inf) or negative value, a probability above 1, a count above :data:`MAX_COUNT`, or
    ``lo > hi``.  ``None`` or ``""`` is the empty spec (no faults).
    """
    ranges = {}
    for item in (text or "").replace(" ", "").split(","):
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"fault {item!r}: expected kind=value or kind=lo:hi")
        kind, value = item.split("=", 1)
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r} (kinds: {', '.join(KINDS)})")
        if kind in ranges:
            raise ValueError(f"fault {kind} given twice")
        parts = value.split(":")
        if len(parts) > 2:
            raise ValueError(f"fault {kind}: {value!r} is not a value or a lo:hi range")
        conv = int if kind in _INT_KINDS else float
        try:
            lo, hi = conv(parts[0]), conv(parts[-1])
        except ValueError:
            raise ValueError(f"fault {kind}: {value!r} is not a number"
                             + (" (an integer)" if conv is int else "")) from None
        if not (math.isfinite(lo) and math.isfinite(hi)):     # nan compares false below
            raise ValueError(f"fault {kind}: {value!r} is not a finite number")
        if lo < 0 or lo > hi:
            raise ValueError(f"fault {kind}: need 0 <= lo <= hi, got {value!r}")
        if kind in _INT_KINDS and hi > MAX_COUNT:
            raise ValueError(f"fault {kind}: at most {MAX_COUNT} per run, got {value!r}")
        if kind in _PROB_KINDS and hi > 1:
            raise ValueError(f"fault {kind}: a probability must be at most 1, got {value!r}")
        ranges[kind] = (lo, hi)
    return FaultSpec(ranges)


def run_seed(campaign_seed: int, index: int) -> int:
    """The seed of run ``index`` of a campaign started with ``campaign_seed``: consecutive
    seeds (``campaign_seed + index``), so a run is replayed from its seed alone."""
    return int(campaign_seed) + int(index)


def draw(spec: FaultSpec, seed: int, topology) -> dict:
    """The concrete faults of one run: rates drawn from ``spec`` and timed failures.

    Parameters
    ----------
    spec : FaultSpec
    seed : int
        The run's seed (the same seed and spec give the same faults).
    topology : mrcnic.sim.topology.ClosTopology
        Where links, spines and planes are picked from.

    Returns a dict ``{"seed", "spec", "rates": {kind: value}, "failures": [...]}`` whose
    ``failures`` use the scenario format (``at`` in units of ``ideal_ns``).
    """
    rng = random.Random(f"mrcnic-faults-{seed}")
    rates = {}
    for k in KINDS:
        lo, hi = spec.ranges.get(k, (2000.0, 2000.0) if k == "jitter_ns" else (0, 0))
        rates[k] = rng.randint(lo, hi) if k in _INT_KINDS else (lo if lo == hi else
                                                                 rng.uniform(lo, hi))
    failures = []
    links = [(a, b) for a, b, _ in topology.links]
    for _ in range(rates["flaps"]):
        a, b = rng.choice(links)
        at = rng.uniform(0.05, 1.0)
        failures += [{"action": "fail_link", "target": [a, b], "at": round(at, 4)},
                     {"action": "recover_link", "target": [a, b],
                      "at": round(at + rng.uniform(0.05, 0.5), 4)}]
    spines = [n for n, d in topology.nodes.items() if d["kind"] == "spine"]
    for _ in range(rates["switches"]):
        sw = rng.choice(spines)
        at = rng.uniform(0.05, 1.0)
        failures += [{"action": "fail_switch", "target": sw, "at": round(at, 4)},
                     {"action": "recover_switch", "target": sw,
                      "at": round(at + rng.uniform(0.05, 0.5), 4)}]
    if rates["plane"] > 0 and rng.random() < rates["plane"]:
        failures.append({"action": "fail_plane", "target": rng.randrange(topology.planes),
                         "at": round(rng.uniform(0.05, 1.0), 4)})
    return {"seed": int(seed), "spec": spec.text(),
            "rates": {k: (round(v, 6) if isinstance(v, float) else v) for k, v in rates.items()},
            "failures": failures}


class FaultInjector:
    """Applies the per-frame faults of one run inside a :class:`~mrcnic.sim.fabric.Fabric`.

    Install with ``fabric.faults = FaultInjector(drawn, fabric)``; the fabric then calls
    :meth:`on_arrive` for every frame reaching the far end of a link direction, instead of
    delivering it itself.  Deterministic: one ``random.Random`` seeded from the run's seed,
    consulted in the fabric's (deterministic) event order.

    Attributes
    ----------
    injected : dict
        Counts per fault kind: ``loss``, ``fcs`` (corrupted into a switch, dropped there),
        ``corrupt_to_host`` (ICRC-corrupted frames sent on a last hop; those that reached
        the host, copies included, by host index under ``corrupt_by_host``), ``dup``,
        ``reorder``, ``trim``.
    """

    def __init__(self, drawn: dict, fabric):
        self.rates = dict(drawn["rates"])
        self.fabric = fabric
        self.rng = random.Random(f"mrcnic-frames-{drawn['seed']}")
        base = self.rates["loss"]
        # per-link loss: each link direction its own rate in [0, 2 x the run's rate]
        self.loss = {name: min(1.0, base * 2 * self.rng.random()) for name in sorted(fabric.ports)}
        self.trim_dscp = fabric.trim_dscp if fabric.trim_dscp is not None else 46
        self.injected = dict(loss=0, fcs=0, corrupt_to_host=0, dup=0, reorder=0, trim=0)
        self.corrupt_by_host: dict[int, int] = {}
        self.corrupt_log: list[dict] = []    #: corrupted frames that reached a host
        self.pending = 0            # delayed or duplicated frames not yet handed on

    def on_arrive(self, port, frame: bytes, epoch: int, deliver) -> None:
        """A frame reaches ``port.dst``: lose, corrupt, trim, duplicate or delay it, then
        call ``deliver(port, frame, epoch)`` zero, one or two times (now or later)."""
        r, rates = self.rng.random, self.rates
        if self.loss[port.name] and r() < self.loss[port.name]:
            port.stats.drops["fault_loss"] += 1
            self.injected["loss"] += 1
            return
        to_host = port.dst in self.fabric._host_of_node
        # queue pressure at the switch egress this frame left from (before the wire)
        if rates["trim"] and port.src in self.fabric.switches and r() < rates["trim"] \
                and _is_data(frame) and not _is_trimmed(frame, self.trim_dscp):
            try:
                frame = wire.trim_frame(frame, self.trim_dscp)
                port.stats.trimmed += 1
                self.injected["trim"] += 1
            except ValueError:
                pass
        # then the wire: a corrupted frame
        if rates["corrupt"] and r() < rates["corrupt"]:
            if not to_host:
                port.stats.drops["fcs"] += 1          # the switch's MAC checks the FCS
                self.injected["fcs"] += 1
                return
            bad = self._corrupt(frame)
            if bad is not None:
                frame = bad
                self.injected["corrupt_to_host"] += 1
                deliver = _CountDelivered(self, self.fabric._host_of_node[port.dst], deliver)
        copies = 1
        if rates["dup"] and r() < rates["dup"]:
            copies = 2
            self.injected["dup"] += 1
        delay = 0.0
        if rates["reorder"] and r() < rates["reorder"]:
            delay = r() * rates["jitter_ns"]
            self.injected["reorder"] += 1
        for i in range(copies):
            d = delay + i * 1.0
            if d <= 0:
                deliver(port, frame, epoch)
            else:
                self.pending += 1
                self.fabric._schedule(self.fabric.now + d, _CONTROL,
                                      _Later(self, deliver, port, frame, epoch))

    def _corrupt(self, frame: bytes) -> bytes | None:
        """``frame`` with one ICRC-covered bit flipped (past the Ethernet header), or None
        when the frame has no valid ICRC to begin with (a trimmed frame: passed unchanged)."""
        if not wire.check_icrc(frame):
            return None
        for _ in range(16):
            pos = self.rng.randrange(14, len(frame))
            b = bytearray(frame)
            b[pos] ^= 1 << self.rng.randrange(8)
            if not wire.check_icrc(bytes(b)):
                return bytes(b)
        return None

    def counters(self) -> dict:
        """What was injected (see the class), plus ``pending`` frames still held back."""
        return dict(self.injected, corrupt_by_host=dict(self.corrupt_by_host),
                    pending=self.pending, corrupt_log=list(self.corrupt_log))


class _CountDelivered:
    """Delivers a corrupted frame and counts it per host once it really reached the host
    (a held-back copy may be lost to a link failure first)."""

    __slots__ = ("inj", "host", "deliver")

    def __init__(self, inj, host, deliver):
        self.inj, self.host, self.deliver = inj, host, deliver

    def __call__(self, port, frame, epoch):
        before = len(self.inj.fabric.delivered)
        self.deliver(port, frame, epoch)
        if len(self.inj.fabric.delivered) > before:
            h = self.host
            self.inj.corrupt_by_host[h] = self.inj.corrupt_by_host.get(h, 0) + 1
            self.inj.corrupt_log.append(dict(t_ns=round(self.inj.fabric.now, 1), host=h,
                                             port=port.name, frame=frame.hex()))


class _Later:
    """A held-back frame (reorder jitter or a duplicate), delivered by a control event."""

    __slots__ = ("inj", "deliver", "port", "frame", "epoch")

    def __init__(self, inj, deliver, port, frame, epoch):
        self.inj, self.deliver, self.port, self.frame, self.epoch = inj, deliver, port, frame, epoch

    def __call__(self):
        self.inj.pending -= 1
        self.deliver(self.port, self.frame, self.epoch)


_TC = wf.layout().field("ipv6", "tc")     # IPv6 traffic class: DSCP << 2 | ECN
_OPCODE = wf.BTH["opcode"]


def _is_data(frame: bytes) -> bool:
    """A RoCEv2 RDMA WRITE ONLY [WITH IMMEDIATE] frame (positional parse, optional SRH)."""
    bth = wf.bth_offset(frame)
    return bth is not None and _OPCODE.read(frame, bth) in wf.DATA_OPCODES


def _is_trimmed(frame: bytes, dscp: int) -> bool:
    tc = _TC.read(frame)
    return tc is not None and tc >> 2 == dscp
