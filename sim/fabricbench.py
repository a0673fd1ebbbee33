"""``mrcnic bench fabric``: the spray-vs-ECMP reference experiment (issue 20).

A random permutation (seeded) across 8 RTL NICs on a 2-tier, 4-plane Clos
(2 leaves x 4 spines per plane, 4 hosts per leaf, every link 2 Gb/s: each NIC moves at most
8 Gb/s = one 64-bit beat per 8 ns clock, and the fabric is non-blocking), one 256 KiB RDMA
WRITE per flow (about 13 base RTTs of transfer, so steering has time to act), run in three
fabric conditions

* ``healthy``;
* ``slow``: one fabric link (plane 0, leaf 0 <-> spine 0, both directions) at 25 % rate;
* ``failed``: that link fails at 0.3 x the ideal time;

with each load-balancing mode of the senders (:mod:`mrcnic.sim.scenario_file`): ``ecmp``
(one STEV EV per QP on every plane, the leaves hash it), ``oblivious`` (spray over the 16
EVs, no steering, nothing marked ASSUMED_BAD) and ``mrc`` (spray, ECN steering,
ASSUMED_BAD, probes).  The fabric is the ECMP fabric (``routing = "ecmp"``, failed links
withdrawn 50 us after they fail) in every run, so SRV6 spraying and STEV hashing cross the
same switches.  The transport settings come from the fabric (docs/scenarios.md,
"Transport defaults"): 8 KiB queues give an ACK timeout of 1.024 us x 2^8 = 262 us, and
a run counts as stalled only after 600 us without progress (more than two timeouts).
NSCC is the fabric-derived one except for the window: the base RTT is 21.5 us (one BDP =
21 KiB at 8 Gb/s) but a loaded 1:1 fabric's RTT is about twice that, so the window starts at
two BDPs (42 KiB), may grow to 64 KiB and decreases on ECN only beyond one base RTT of
queueing (``target_delay_ns`` = 21.5 us instead of half of it); with one BDP the healthy
runs were window-limited at 0.70-0.73 of ideal.  In ``mrc`` mode an ECN-echoed EV is avoided
for 96 us (``ecn_hold`` 12 000 cycles) instead of 16 us: a 16-EV spray comes back to an EV
only every ~18 us, so a 16 us hold could not lower any EV's share.
Every run uses the same NIC build (8 NICs, 4 ports, 4 QP contexts, a
16-entry path table: 16 EVs = one per path), so the Verilator model is built once.

Per run: per-flow FCT, mean and min per-flow throughput as a fraction of ideal
(:func:`mrcnic.sim.flows.flow_stats`), p99 FCT as a multiple of the same mode's healthy
p99, and the checks bytes_delivered == bytes_posted, 0 mismatched.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MODES", "CONDITIONS", "bench_scenario", "run_fabric_bench", "SLOW_LINK", "size_text"]

MODES = ("ecmp", "oblivious", "mrc")
CONDITIONS = ("healthy", "slow", "failed")
SLOW_LINK = ["p0.leaf0", "p0.spine0"]     #: the degraded / failed fabric link
FAIL_AT = 0.3                             #: failure time, x ideal_ns
SIZE = 256 * 1024                         #: bytes per flow (one RDMA WRITE)

_BASE = """
description = "bench fabric: {mode}, {cond}"
size = {size}
evs = 16
seed = {seed}
lb = "{mode}"
nics = [0, 1, 2, 3, 4, 5, 6, 7]
time_limit = 40.0
linger_ns = 2000.0
stall_ns = 600000.0

[topology]
planes = 4
leaves = 2
spines = 4
hosts_per_leaf = 4

[fabric]
rate_gbps = 2.0
host_rate_gbps = 2.0
latency_ns = 200.0
host_latency_ns = 100.0
queue_bytes = 8192
ecn_threshold_bytes = 4096
trim_queue_bytes = 8192
routing = "ecmp"
ecmp_detect_ns = 50000.0

[traffic]
pattern = "permutation"

[cc]
target_delay_ns = 21500
initial_cwnd_bytes = 43008
max_cwnd_bytes = 65536
"""

#: mrc mode only: an ECN-echoed EV is avoided for 96 us.  The default 2000 cycles (16 us) is
#: shorter than the time a 16-EV spray takes to come back to the same EV at 8 Gb/s (~18 us
#: for 16 packets of ~1.1 KB), so it could not lower an EV's share at all.  (Not in the
#: other modes: their ``ecn_hold`` is 0 unless set, and a set one would win.)
_MRC = """
[reliability]
ecn_hold = 12000
"""


def bench_scenario(mode: str, cond: str, size: int = SIZE, seed: int = 7) -> dict:
    """The scenario dict of one run (``mode`` of :data:`MODES`, ``cond`` of
    :data:`CONDITIONS`; ``size`` bytes per flow; ``seed`` the permutation's).  Seed 7 gives
    a permutation whose every flow crosses from one leaf to the other.  Raises
    ``ValueError`` for an unknown mode or condition."""
    from .scenario_file import loads_scenario

    if mode not in MODES or cond not in CONDITIONS:
        raise ValueError(f"mode must be one of {MODES}, condition one of {CONDITIONS}")
    text = _BASE.format(mode=mode, cond=cond, size=size, seed=seed)
    if mode == "mrc":
        text += _MRC
    if cond == "slow":
        text += f'\n[[slow_links]]\nlink = {SLOW_LINK!r}\nrate_gbps = 0.5\n'.replace("'", '"')
    elif cond == "failed":
        text += (f'\n[[failures]]\naction = "fail_link"\ntarget = {SLOW_LINK!r}\n'
                 f'at = {FAIL_AT}\n').replace("'", '"')
    return loads_scenario(text, f"<bench fabric {mode}/{cond}>", f"fabric-{mode}-{cond}")


def run_fabric_bench(modes=MODES, conditions=CONDITIONS, *, size: int = SIZE,
                     seed: int = 7, build_dir=None, simulator: str | None = None,
                     plot=None, progress=None) -> dict:
    """Run every (condition, mode); return ``{"runs": [...], "setup": {...}}``.

    Each run: ``mode, condition, complete, bytes_posted, bytes_delivered,
    bytes_mismatched, mean_frac_ideal, min_frac_ideal, mean_gbps, min_gbps, fct_p50_us,
    fct_p99_us, fct_max_us, p99_vs_healthy`` (None without a healthy run of that mode),
    ``retransmissions, trimmed, ecn_marked, ev_events, wall_s, fcts_us`` (per flow),
    ``warnings`` (the run's, e.g. a failure that no frame crossed) and
    ``flows`` (src, dst, fct_us, frac_ideal).  ``plot`` writes the FCT CDFs of every run
    (PNG).  ``progress(text)`` is called before each run.  Raises ``AssertionError`` when a
    simulation fails.
    """
    from .cosim import run_cosim
    from .flows import plot_fct_cdf

    runs = []
    base = Path(build_dir) if build_dir else None
    for cond in conditions:
        for mode in modes:
            if progress:
                progress(f"{mode} / {cond}")
            sc = bench_scenario(mode, cond, size, seed)
            rep = run_cosim(sc, simulator=simulator,
                            build_dir=None if base is None else base / f"{mode}-{cond}")
            st = rep["flows"]
            runs.append(dict(
                mode=mode, condition=cond, complete=bool(rep.get("complete")),
                bytes_posted=rep["bytes_posted"], bytes_delivered=rep["bytes_delivered"],
                bytes_mismatched=rep["bytes_mismatched"],
                mean_frac_ideal=round(st["mean_frac_ideal"], 3),
                min_frac_ideal=round(st["min_frac_ideal"], 3),
                mean_gbps=round(st["mean_gbps"], 3), min_gbps=round(st["min_gbps"], 3),
                fct_p50_us=_us(st["fct_p50_ns"]), fct_p99_us=_us(st["fct_p99_ns"]),
                fct_max_us=_us(st["fct_max_ns"]), ideal_us=_us(rep["ideal_ns"]),
                retransmissions=rep["retransmissions"], trimmed=rep["trimmed"],
                ecn_marked=rep["ecn_marked"], ev_events=len(rep["ev_events"]),
                max_link_vs_ideal=round(st["max_vs_ideal"], 2),
                failures=rep.get("failures"), warnings=_warnings(rep, st),
                wall_s=rep["sim"]["wall_s"], cycles=rep["sim"]["cycles"],
                flows=[dict(src=f["src"], dst=f["dst"], fct_us=_us(f["fct_ns"]),
                            frac_ideal=round(f["frac_ideal"], 3)) for f in st["flows"]]))
    healthy = {r["mode"]: r["fct_p99_us"] for r in runs if r["condition"] == "healthy"}
    for r in runs:
        h = healthy.get(r["mode"])
        r["p99_vs_healthy"] = round(r["fct_p99_us"] / h, 2) if h and r["fct_p99_us"] else None
    if plot:
        styles = {"ecmp": "C0", "oblivious": "C1", "mrc": "C2"}
        dash = {"healthy": "-", "slow": "--", "failed": ":"}
        plot_fct_cdf({f"{r['mode']} {r['condition']}":
                      ([f["fct_us"] * 1000 for f in r["flows"] if f["fct_us"] is not None],
                       dash[r["condition"]] + styles[r["mode"]])
                      for r in runs}, plot,
                     f"bench fabric: 8-NIC permutation, {size_text(size)} per flow")
    return dict(setup=dict(nics=8, planes=4, leaves=2, spines=4, hosts_per_leaf=4,
                           link_gbps=2.0, nic_gbps=8.0, size=size, seed=seed,
                           slow_link=SLOW_LINK, slow_rate=0.25, fail_at_x_ideal=FAIL_AT,
                           ecmp_detect_us=50.0, nscc=dict(target_delay_ns=21500, initial_cwnd_bytes=43008,
                                                          max_cwnd_bytes=65536),
                           mrc_ecn_hold_cycles=12000), runs=runs)


def _us(ns):
    return None if ns is None else round(ns / 1000, 2)


def size_text(size: int) -> str:
    """A flow size for a title: ``"256 KiB"`` for whole KiB, else ``"4097 bytes"``."""
    return f"{size // 1024} KiB" if size and size % 1024 == 0 else f"{size} bytes"


def _warnings(rep: dict, st: dict) -> list[str]:
    """The run's own warnings, and one for a link failure after every flow had completed
    (a tiny ``--size``: the "failed" condition then tests nothing)."""
    out = list(rep.get("warnings", []))
    fcts = [f["fct_ns"] for f in st["flows"] if f["fct_ns"] is not None]
    for f in rep.get("failures") or []:
        if f.get("action") == "fail_link" and fcts and f["t_rel_ns"] > max(fcts):
            out.append(f"{f['target']} failed at {f['t_rel_ns'] / 1000:.1f} us, after every "
                       f"flow had completed ({max(fcts) / 1000:.1f} us): the failure tested "
                       "nothing (a larger --size)")
    return out
