"""Scenario files: ``mrcnic sim --scenario FILE.toml`` (format: docs/scenarios.md).

A scenario file is TOML.  It holds what a built-in scenario dict holds
(:mod:`mrcnic.sim.scenarios`): the topology, the fabric (rates, latencies, queues, ECN,
trimming, routing), which hosts are RTL NICs, the traffic (an explicit ``[[transfers]]``
list or a ``[traffic]`` matrix), failures and slow links, the EV count, the load-balancing
mode and a seed.  :func:`load_scenario` reads and checks one, the way
:func:`mrcnic.config.loads_config` checks a NIC configuration: the first wrong key or value
raises :class:`mrcnic.config.ConfigError` naming the file, the key and the reason, in one
line.  The built-in scenarios are the same files, shipped as package data
(``examples/scenarios/<name>.toml``) and loaded by the same code.

Traffic matrices (``[traffic]``, NIC indices into ``nics``):

* ``pattern = "permutation"``: every NIC sends to one other and receives from one other;
  a random derangement drawn from ``seed`` (``random.Random(seed)``, Sattolo's algorithm:
  one cycle through all NICs);
* ``pattern = "incast"``: ``senders`` (default: every NIC but the receiver) write into
  ``receiver`` (default the last NIC);
* ``pattern = "all-to-all"``: every ordered pair;
* ``pattern = "list"``: ``flows = [[src, dst], ...]``.

``count`` repeats every flow (one QP pair per message, all posted back-to-back at the
start; ``size`` is the message size).  The co-simulated NICs hold at most 8 QP contexts
(``mrcnic.sim.cosim.MAX_QPS``): a NIC's QPs are one per message it sends or receives.

Load-balancing modes (``lb``, the sender's; same RTL, only settings):

* ``"mrc"`` (default): spray over the EVs, ECN steering, ASSUMED_BAD on loss, probes;
* ``"oblivious"``: spray over every GOOD EV, no steering: ``ecn_hold = 0`` and the
  profiles' ``ev_min_active`` = their size, so no EV is ever marked ASSUMED_BAD;
* ``"ecmp"``: RoCEv2 over an ECMP fabric: each QP has one EV (a seeded random 32-bit value,
  like a hashed UDP source port) in STEV mode, one entry per plane, ``ecn_hold = 0`` and no
  ASSUMED_BAD; the fabric's hash picks its spine in every plane.  Needs
  ``fabric.routing = "ecmp"``; ``ev_format = "UDP"`` carries the EV in the UDP source port
  only (14 bits).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from mrcnic.config import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:                                   # pragma: no cover
    import tomli as tomllib

__all__ = ["FABRIC_DEFAULTS", "load_scenario", "loads_scenario", "resolve_scenario", "builtin_scenario_file",
           "traffic_transfers",
           "dumps_scenario", "LB_MODES", "PATTERNS"]

LB_MODES = ("mrc", "oblivious", "ecmp")
PATTERNS = ("permutation", "incast", "all-to-all", "list")
_ACTIONS = ("fail_link", "recover_link", "fail_switch", "recover_switch", "fail_plane",
            "recover_plane")
_FABRIC = {  # key: (type, min, max); None = no bound
    "rate_gbps": (float, 0.0, None), "latency_ns": (float, 0.0, None),
    "host_rate_gbps": (float, 0.0, None), "host_latency_ns": (float, 0.0, None),
    "switch_latency_ns": (float, 0.0, None), "queue_bytes": (int, 0, 1 << 30),
    "ecn_threshold_bytes": (int, 0, 1 << 30), "trim": (bool,), "trim_dscp": (int, 0, 63),
    "trim_queue_bytes": (int, 0, 1 << 30), "routing": (str, ("usid", "ecmp")),
    "ecmp_detect_ns": (float, 0.0, None), "ecmp_seed": (int, 0, (1 << 32) - 1),
}
_FABRIC_REQUIRED = ("rate_gbps", "latency_ns")
#: values of the fabric keys a file leaves out (the built-in scenarios' fabric)
FABRIC_DEFAULTS = dict(host_latency_ns=100.0, switch_latency_ns=0.0, queue_bytes=256 * 1024,
                       ecn_threshold_bytes=64 * 1024, trim=True, trim_dscp=46,
                       trim_queue_bytes=8 * 1024)
_TOPOLOGY = {"planes": (1, 16), "leaves": (1, 256), "spines": (1, 256),
             "hosts_per_leaf": (1, 0x0F00), "locator_block": (0, (1 << 32) - 1)}
_RELIABILITY = {"ack_timeout_exp": (0, 31), "retry_count": (0, 255),
                "probe_interval": (1, (1 << 32) - 1), "ecn_hold": (0, (1 << 32) - 1)}
_CC = ("base_rtt_ns", "target_delay_ns", "max_cwnd_bytes", "min_cwnd_bytes",
       "initial_cwnd_bytes")
_TOP = {"description", "expect", "size", "test_size", "evs", "lb", "ev_format", "seed", "nics",
        "configs",
        "linger_ns", "time_limit", "ack_every", "ack_timeout", "stall_ns", "topology",
        "fabric", "traffic", "transfers", "failures", "slow_links", "background",
        "reliability", "cc"}


class _Checker:
    """Raises :class:`ConfigError` ``"<file>: <key>: <reason>"`` for the first problem."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, reason: str):
        raise ConfigError(self.source, key, reason)

    def keys(self, tbl, key: str, allowed, required=()):
        if not isinstance(tbl, dict):
            self.fail(key, f"must be a table, not {type(tbl).__name__}")
        for k in tbl:
            if k not in allowed:
                import difflib
                near = difflib.get_close_matches(k, sorted(allowed), 1)
                hint = f" (did you mean '{near[0]}'?)" if near else \
                    f" (allowed: {', '.join(sorted(allowed))})"
                self.fail(f"{key}.{k}" if key else k, f"unknown key{hint}")
        for k in required:
            if k not in tbl:
                self.fail(f"{key}.{k}" if key else k, "missing required key")

    def int(self, value, key: str, lo=None, hi=None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, not {value!r}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            self.fail(key, f"{value} is out of range {lo}..{hi}")
        return value

    def num(self, value, key: str, lo=None, hi=None, positive=False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(key, f"must be a number, not {value!r}")
        if positive and value <= 0:
            self.fail(key, f"must be > 0, not {value}")
        if lo is not None and value < lo:
            self.fail(key, f"must be >= {lo}, not {value}")
        if hi is not None and value > hi:
            self.fail(key, f"must be <= {hi}, not {value}")
        return value

    def str(self, value, key: str, choices=None) -> str:
        if not isinstance(value, str):
            self.fail(key, f"must be a string, not {value!r}")
        if choices is not None and value not in choices:
            self.fail(key, f"'{value}' is not one of {', '.join(choices)}")
        return value

    def list(self, value, key: str) -> list:
        if not isinstance(value, list):
            self.fail(key, f"must be an array, not {value!r}")
        return value


def builtin_scenario_file(name: str):
    """The packaged file (:class:`importlib.resources.abc.Traversable`) of built-in scenario
    ``name``; raises ``FileNotFoundError`` when there is none."""
    from importlib import resources

    item = resources.files("mrcnic.examples.scenarios").joinpath(f"{name}.toml")
    if not item.is_file():
        raise FileNotFoundError(f"no built-in scenario file {name}.toml")
    return item


def load_scenario(path, name: str | None = None) -> dict:
    """Read and check the scenario file ``path``; return the scenario dict.

    ``name`` defaults to the file's stem.  The dict has the keys of a built-in scenario
    (:data:`mrcnic.sim.scenarios.SCENARIOS`) plus ``name``, and ``lb``, ``seed``,
    ``traffic``, ``ev_format``, ``ev_min_active`` when the file sets them.  Raises
    :class:`mrcnic.config.ConfigError` (a ``ValueError``: ``"<file>: <key>: <reason>"``)
    for an unreadable file, a TOML syntax error, an unknown key or a bad value.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), "(file)", exc.strerror or str(exc)) from None
    return loads_scenario(text, str(path), name or p.stem)


def loads_scenario(text: str, source: str = "<string>", name: str = "custom") -> dict:
    """:func:`load_scenario` of TOML ``text`` (``source`` names it in errors)."""
    c = _Checker(source)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        c.fail("(file)", f"TOML syntax: {exc}")
    c.keys(doc, "", _TOP, required=("size", "evs", "nics", "topology", "fabric"))

    topo = doc["topology"]
    c.keys(topo, "topology", _TOPOLOGY, required=("planes", "leaves", "spines",
                                                  "hosts_per_leaf"))
    topology = {k: c.int(v, f"topology.{k}", *_TOPOLOGY[k]) for k, v in topo.items()}
    hosts = topology["leaves"] * topology["hosts_per_leaf"]
    if hosts > 0x0F00:
        c.fail("topology.hosts_per_leaf", f"{hosts} hosts: at most 3840")

    fab = doc["fabric"]
    c.keys(fab, "fabric", _FABRIC, required=_FABRIC_REQUIRED)
    fabric = {}
    for k, v in fab.items():
        spec = _FABRIC[k]
        if spec[0] is bool:
            if not isinstance(v, bool):
                c.fail(f"fabric.{k}", f"must be true or false, not {v!r}")
            fabric[k] = v
        elif spec[0] is str:
            fabric[k] = c.str(v, f"fabric.{k}", spec[1])
        elif spec[0] is int:
            fabric[k] = c.int(v, f"fabric.{k}", spec[1], spec[2])
        else:
            fabric[k] = c.num(v, f"fabric.{k}", positive=k.endswith("gbps"),
                              lo=None if k.endswith("gbps") else spec[1])

    if "traffic" in doc and "transfers" in doc:
        c.fail("traffic", "give either [traffic] or [[transfers]], not both")
    if "traffic" not in doc and "transfers" not in doc:
        c.fail("transfers", "missing: give [[transfers]] or a [traffic] matrix")
    for k, v in FABRIC_DEFAULTS.items():
        fabric.setdefault(k, v)
    fabric.setdefault("host_rate_gbps", fabric["rate_gbps"])
    nics = [c.int(h, f"nics[{i}]", 0, hosts - 1) for i, h in enumerate(c.list(doc["nics"], "nics"))]
    if len(nics) < 2:
        c.fail("nics", "a scenario needs at least two NICs")
    if len(set(nics)) != len(nics):
        c.fail("nics", "a host appears twice")
    if len(nics) > 16:
        c.fail("nics", f"{len(nics)} NICs: the co-simulation top holds at most 16")

    sc: dict = {}
    sc["description"] = c.str(doc.get("description", ""), "description")
    sc["topology"] = topology
    sc["fabric"] = fabric
    sc["nics"] = nics
    configs = None
    if "configs" in doc:
        configs = [c.str(x, f"configs[{i}]") for i, x in enumerate(c.list(doc["configs"],
                                                                        "configs"))]
        if len(configs) != len(nics):
            c.fail("configs", f"{len(configs)} configuration files for {len(nics)} NICs")
    sc["configs"] = configs
    sc["evs"] = c.int(doc["evs"], "evs", 1, 128)
    seed = c.int(doc.get("seed", 0), "seed", 0, (1 << 63) - 1)

    if "transfers" in doc:
        transfers = []
        for i, t in enumerate(c.list(doc["transfers"], "transfers")):
            key = f"transfers[{i}]"
            c.keys(t, key, {"src", "dst"}, required=("src", "dst"))
            transfers.append({"src": c.int(t["src"], f"{key}.src", 0, len(nics) - 1),
                              "dst": c.int(t["dst"], f"{key}.dst", 0, len(nics) - 1)})
            if t["src"] == t["dst"]:
                c.fail(f"{key}.dst", "a NIC does not write to itself")
        if not transfers:
            c.fail("transfers", "at least one transfer")
    else:
        traffic = _traffic(c, doc["traffic"], len(nics))
        transfers = traffic_transfers(traffic, len(nics), seed)
    sc["transfers"] = transfers
    size = c.int(doc["size"], "size", 1, 1 << 22)
    sc["size"] = size
    sc["test_size"] = c.int(doc.get("test_size", size), "test_size", 1, 1 << 22)

    sc["failures"] = [_failure(c, f, f"failures[{i}]", topology)
                      for i, f in enumerate(c.list(doc.get("failures", []), "failures"))]
    slow = []
    for i, s in enumerate(c.list(doc.get("slow_links", []), "slow_links")):
        key = f"slow_links[{i}]"
        c.keys(s, key, {"link", "rate_gbps"}, required=("link", "rate_gbps"))
        slow.append({"link": _link(c, s["link"], f"{key}.link", topology),
                     "rate_gbps": c.num(s["rate_gbps"], f"{key}.rate_gbps", positive=True)})
    sc["slow_links"] = slow
    bg = []
    bkeys = {"src_host", "dst_host", "plane", "spine", "rate_gbps", "payload_bytes", "from",
             "to"}
    for i, b in enumerate(c.list(doc.get("background", []), "background")):
        key = f"background[{i}]"
        c.keys(b, key, bkeys, required=tuple(sorted(bkeys)))
        bg.append({"src_host": c.int(b["src_host"], f"{key}.src_host", 0, hosts - 1),
                   "dst_host": c.int(b["dst_host"], f"{key}.dst_host", 0, hosts - 1),
                   "plane": c.int(b["plane"], f"{key}.plane", 0, topology["planes"] - 1),
                   "spine": c.int(b["spine"], f"{key}.spine", 0, topology["spines"] - 1),
                   "rate_gbps": c.num(b["rate_gbps"], f"{key}.rate_gbps", positive=True),
                   "payload_bytes": c.int(b["payload_bytes"], f"{key}.payload_bytes", 0, 4096),
                   "from": c.num(b["from"], f"{key}.from", lo=0),
                   "to": c.num(b["to"], f"{key}.to", lo=0)})
    sc["background"] = bg
    sc["linger_ns"] = float(c.num(doc.get("linger_ns", 2000.0), "linger_ns", lo=0))
    if "time_limit" in doc:           # else derived from the RTO (mrcnic.sim.cosim.run_limits)
        sc["time_limit"] = c.num(doc["time_limit"], "time_limit", positive=True)
    sc["ack_every"] = c.int(doc.get("ack_every", 4), "ack_every", 1, 255)
    sc["ack_timeout"] = c.int(doc.get("ack_timeout", 64), "ack_timeout", 1, 65535)
    if "stall_ns" in doc:
        sc["stall_ns"] = float(c.num(doc["stall_ns"], "stall_ns", positive=True))
    if "cc" in doc:
        c.keys(doc["cc"], "cc", set(_CC))
        sc["cc"] = {k: c.int(v, f"cc.{k}", 1, (1 << 32) - 1) for k, v in doc["cc"].items()}
    if "reliability" in doc:
        c.keys(doc["reliability"], "reliability", set(_RELIABILITY))
        sc["reliability"] = {k: c.int(v, f"reliability.{k}", *_RELIABILITY[k])
                             for k, v in doc["reliability"].items()}
    sc["expect"] = c.str(doc.get("expect", ""), "expect")
    if "traffic" in doc:
        sc["traffic"] = traffic
    if "seed" in doc:
        sc["seed"] = seed
    if "lb" in doc:
        lb = c.str(doc["lb"], "lb", LB_MODES)
        sc["lb"] = lb
        _apply_lb(c, sc, lb, c.str(doc.get("ev_format", "STEV"), "ev_format", ("STEV", "UDP")))
    if "ev_format" in doc and sc.get("lb") != "ecmp":
        c.fail("ev_format", "applies to lb = 'ecmp' only (STEV or UDP)")
    if fabric.get("routing") == "ecmp" and "ecmp_detect_ns" not in fabric:
        fabric["ecmp_detect_ns"] = 50_000.0
    sc["name"] = name
    return sc


def _traffic(c: _Checker, t, n: int) -> dict:
    c.keys(t, "traffic", {"pattern", "count", "senders", "receiver", "flows"},
           required=("pattern",))
    pattern = c.str(t["pattern"], "traffic.pattern", PATTERNS)
    out = {"pattern": pattern, "count": c.int(t.get("count", 1), "traffic.count", 1, 64)}
    if pattern == "incast":
        rx = c.int(t.get("receiver", n - 1), "traffic.receiver", 0, n - 1)
        senders = t.get("senders", [k for k in range(n) if k != rx])
        out["receiver"] = rx
        out["senders"] = [c.int(s, f"traffic.senders[{i}]", 0, n - 1)
                          for i, s in enumerate(c.list(senders, "traffic.senders"))]
        if rx in out["senders"] or not out["senders"]:
            c.fail("traffic.senders", "one or more NICs other than the receiver")
    else:
        for k in ("senders", "receiver"):
            if k in t:
                c.fail(f"traffic.{k}", f"applies to pattern 'incast' only")
    if pattern == "list":
        flows = c.list(t.get("flows", []), "traffic.flows")
        if not flows:
            c.fail("traffic.flows", "pattern 'list' needs flows = [[src, dst], ...]")
        out["flows"] = []
        for i, f in enumerate(flows):
            if not isinstance(f, list) or len(f) != 2:
                c.fail(f"traffic.flows[{i}]", f"must be [src, dst], not {f!r}")
            s, d = (c.int(x, f"traffic.flows[{i}]", 0, n - 1) for x in f)
            if s == d:
                c.fail(f"traffic.flows[{i}]", "a NIC does not write to itself")
            out["flows"].append([s, d])
    elif "flows" in t:
        c.fail("traffic.flows", "applies to pattern 'list' only")
    return out


def traffic_transfers(traffic: dict, n: int, seed: int = 0) -> list[dict]:
    """The ``transfers`` (``[{"src", "dst"}]``, NIC indices) of a traffic matrix.

    ``traffic``: ``{"pattern", "count", ...}`` as in the module docstring; ``n`` NICs;
    ``seed`` draws the permutation.  Each flow appears ``count`` times, in flow order.
    """
    pattern = traffic["pattern"]
    if pattern == "permutation":
        perm = list(range(n))
        rng = random.Random(seed)
        for i in range(n - 1, 0, -1):           # Sattolo: a single n-cycle, no fixed point
            j = rng.randrange(i)
            perm[i], perm[j] = perm[j], perm[i]
        flows = [(k, perm[k]) for k in range(n)]
    elif pattern == "incast":
        flows = [(s, traffic["receiver"]) for s in traffic["senders"]]
    elif pattern == "all-to-all":
        flows = [(s, d) for s in range(n) for d in range(n) if s != d]
    else:
        flows = [tuple(f) for f in traffic["flows"]]
    return [{"src": s, "dst": d} for s, d in flows for _ in range(traffic.get("count", 1))]


def _link(c: _Checker, v, key: str, topology: dict) -> list:
    from .topology import ClosTopology

    if not isinstance(v, list) or len(v) != 2 or not all(isinstance(x, str) for x in v):
        c.fail(key, f"must be [node, node], e.g. [\"p0.leaf0\", \"p0.spine0\"], not {v!r}")
    topo = ClosTopology(**topology)
    for x in v:
        if x not in topo.nodes:
            c.fail(key, f"no node {x!r} in this topology")
    if not any({a, b} == set(v) for a, b, _ in topo.links):
        c.fail(key, f"no link between {v[0]!r} and {v[1]!r}")
    return list(v)


def _failure(c: _Checker, f, key: str, topology: dict) -> dict:
    from .topology import ClosTopology

    c.keys(f, key, {"action", "target", "at"}, required=("action", "target", "at"))
    action = c.str(f["action"], f"{key}.action", _ACTIONS)
    target = f["target"]
    if action.endswith("_link"):
        target = _link(c, target, f"{key}.target", topology)
    elif action.endswith("_plane"):
        target = c.int(target, f"{key}.target", 0, topology["planes"] - 1)
    else:
        name = c.str(target, f"{key}.target")
        node = ClosTopology(**topology).nodes.get(name)
        if node is None or node["kind"] == "host":
            c.fail(f"{key}.target", f"no switch {name!r} in this topology")
    return {"action": action, "target": target,
            "at": c.num(f["at"], f"{key}.at", lo=0)}


def _apply_lb(c: _Checker, sc: dict, lb: str, ev_format: str = "STEV"):
    """The load-balancing mode as settings (module docstring)."""
    if lb == "mrc":
        return
    if sc["configs"]:
        c.fail("lb", f"'{lb}' applies to generated NIC configurations (no 'configs')")
    rel = dict(sc.get("reliability") or {})
    rel.setdefault("ecn_hold", 0)
    sc["reliability"] = rel
    if lb == "oblivious":
        sc["ev_min_active"] = "all"
    else:
        if sc["fabric"].get("routing") != "ecmp":
            c.fail("fabric.routing", "lb = 'ecmp' needs routing = 'ecmp' (a fabric that hashes)")
        sc["ev_format"] = ev_format
        sc["ev_min_active"] = "all"


# --------------------------------------------------------------------------
# Writing a scenario dict as a file (the built-ins were made this way)
# --------------------------------------------------------------------------
def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML for {v!r}")


def dumps_scenario(sc: dict) -> str:
    """TOML text of scenario dict ``sc`` that :func:`loads_scenario` reads back to the same
    dict (``name`` excepted: the file's stem).  Raises ``TypeError`` for a value TOML cannot
    hold."""
    top = [k for k in ("description", "expect", "size", "test_size", "evs", "lb", "seed",
                       "nics", "configs", "linger_ns", "time_limit", "ack_every",
                       "ack_timeout", "stall_ns") if sc.get(k) is not None]
    lines = [f"{k} = {_toml_value(sc[k])}" for k in top]
    for tbl in ("topology", "fabric", "traffic", "reliability", "cc"):
        if sc.get(tbl):
            lines += ["", f"[{tbl}]"] + [f"{k} = {_toml_value(v)}" for k, v in sc[tbl].items()]
    if "traffic" not in sc:
        for t in sc["transfers"]:
            lines += ["", "[[transfers]]"] + [f"{k} = {_toml_value(v)}" for k, v in t.items()]
    for arr in ("failures", "slow_links", "background"):
        for item in sc.get(arr) or []:
            lines += ["", f"[[{arr}]]"] + [f"{k} = {_toml_value(v)}" for k, v in item.items()]
    return "\n".join(lines) + "\n"


def resolve_scenario(spec: str, size: int | None = None, test: bool = False) -> dict:
    """The scenario ``mrcnic sim --scenario SPEC`` runs: a file (a name ending in ``.toml``,
    or an existing path) or a built-in name, whose packaged file
    (:func:`builtin_scenario_file`) is read by the same :func:`loads_scenario`.

    ``size`` (bytes per transfer) overrides the scenario's ``size`` (``test_size`` with
    ``test``).  Raises ``ValueError`` (:class:`mrcnic.config.ConfigError` for a bad file)
    for an unknown name, a bad file or a size out of 1..4 MiB.
    """
    from .scenarios import MAX_SIZE, scenario_names

    if spec.endswith(".toml") or Path(spec).is_file():
        sc = load_scenario(spec)
    elif spec in scenario_names():
        sc = loads_scenario(builtin_scenario_file(spec).read_text(encoding="utf-8"),
                            f"examples/scenarios/{spec}.toml", spec)
    else:
        raise ValueError(f"unknown scenario {spec!r} (built in: {', '.join(scenario_names())};"
                         " or a scenario file, FILE.toml)")
    if size is None:
        size = sc["test_size"] if test else sc["size"]
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"size must be 1..{MAX_SIZE} bytes, not {size}")
    sc["size"] = int(size)
    return sc


def write_builtin_files(folder=None) -> list[Path]:
    """Write every built-in scenario dict of :mod:`mrcnic.sim.scenarios` as its file
    (``examples/scenarios/<name>.toml`` of the repository by default), checking that each
    reads back to the same dict; returns the paths.  Run after changing a built-in dict:
    ``python -m mrcnic.sim.scenario_file``."""
    from .scenarios import SCENARIOS

    folder = Path(folder) if folder else Path(__file__).resolve().parents[1] / "examples" / "scenarios"
    out = []
    for name, sc in SCENARIOS.items():
        text = (f"# Built-in scenario '{name}' of mrcnic sim (format: docs/scenarios.md).\n"
                + dumps_scenario(sc))
        back = loads_scenario(text, f"{name}.toml", name)
        back.pop("name")
        if back != sc:
            raise ValueError(f"{name}: the file would not read back to the dict")
        path = folder / f"{name}.toml"
        path.write_text(text)
        out.append(path)
    return out


if __name__ == "__main__":
    for p in write_builtin_files():
        print(f"wrote {p}")
