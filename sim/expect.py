"""What each built-in scenario must show, as code: checks of a ``mrcnic sim`` report.

Each scenario's ``expect`` text (``mrcnic.sim.scenarios``) says what it shows; this module
checks it on a report (:func:`mrcnic.sim.cosim.run_cosim`), at any size, so the tests and
``mrcnic bench scenarios`` (every scenario at the size users run) hold the same line.
:func:`check` returns the list of violated expectations (empty: the run shows what it
should).  Times are compared with the report's ``ideal_ns`` (the contract's reference: the
transfer's wire bytes at the sender's full rate plus one base RTT).
"""

from __future__ import annotations

__all__ = ["check", "LIMITS", "FAIRNESS", "FAIRNESS_MIN_SIZE", "sender_times"]

#: completion_ns / ideal_ns allowed per scenario
LIMITS = {"default": 1.1, "clean": 1.1, "link-flap": 1.1, "plane-down": 1.3,
          "trim-incast": 1.5, "incast-8": 1.5, "ecn": 2.0}
#: per-sender completion times within this ratio of each other (incast fairness), checked
#: for the 8:1 incast at any size and for the others from FAIRNESS_MIN_SIZE bytes per sender:
#: a shorter transfer ends before the windows converge (the first trim epoch's quick adapt
#: sets them apart; ECN marks, which bring them together, start only as they grow back)
FAIRNESS = 1.3
FAIRNESS_MIN_SIZE = 256 * 1024


def sender_times(rep: dict) -> dict[int, float]:
    """Per sending NIC: ns from posting to the receive completion of its last transfer.

    Receive completions are used (a sender's own completion needs an ACK back, which may
    fall after the run's end).  A receiver's QP contexts are numbered in the order of the
    transfers into it (generated configurations, ``make_configs``), so its completion on QP
    ``i`` closes its ``i``-th incoming transfer.
    """
    t0 = rep["sim"]["t0_ns"]
    incoming: dict[int, list[int]] = {}
    for t in rep["transfers"]:
        incoming.setdefault(t["dst"], []).append(t["src"])
    out: dict[int, float] = {}
    for c in rep.get("completions", []):
        srcs = incoming.get(c["nic"], [])
        if c["qp"] < len(srcs):
            src = srcs[c["qp"]]
            out[src] = max(out.get(src, 0.0), c["t_ns"] - t0)
    return out


def _exact(rep, bad):
    if not rep.get("complete"):
        bad.append(f"not complete (stalled={rep.get('stalled')})")
    if rep["bytes_delivered"] != rep["bytes_posted"]:
        bad.append(f"delivered {rep['bytes_delivered']} of {rep['bytes_posted']} bytes")
    if rep["bytes_mismatched"]:
        bad.append(f"{rep['bytes_mismatched']} bytes mismatched")
    for t in rep["transfers"]:
        if t.get("written_outside") or t.get("missing") or t.get("mismatched"):
            bad.append(f"transfer {t['src']}->{t['dst']}: {t}")


def _timeouts(rep) -> int:
    return sum(c.get("timeouts", 0) for c in rep.get("nic_counters", []))


def _congestion_only(rep, bad):
    """Congestion is not failure: no ACK timeout, no EV event, no trimmed frame dropped,
    a retransmission only for a trim (5 % slack)."""
    if _timeouts(rep):
        bad.append(f"{_timeouts(rep)} ACK timeouts")
    if rep["ev_events"]:
        bad.append(f"{len(rep['ev_events'])} EV events")
    drops = sum(rep.get("drops", {}).get("nic", {}).values())
    if drops:
        bad.append(f"{drops} frames dropped at the receivers: {rep['drops']['nic']}")
    if rep["retransmissions"] > 1.05 * rep["trimmed"] + 1:
        bad.append(f"{rep['retransmissions']} retransmissions for {rep['trimmed']} trims")


def check(rep: dict) -> list[str]:
    """The violated expectations of report ``rep`` of a built-in scenario (empty: it passes).

    Raises ``KeyError`` for a scenario this module has no expectations for.
    """
    name = rep["scenario"]
    limit = LIMITS[name]
    bad: list[str] = []
    _exact(rep, bad)
    cpl = rep.get("completion_ns")
    if cpl is not None and cpl > limit * rep["ideal_ns"]:
        bad.append(f"completion {cpl / 1000:.1f} us > {limit} x ideal "
                   f"({rep['ideal_ns'] / 1000:.1f} us): {cpl / rep['ideal_ns']:.2f}x")
    bad_events = [e for e in rep["ev_events"] if e["state"] == "ASSUMED_BAD"]
    if name == "clean":
        if rep["retransmissions"] or rep["ev_events"]:
            bad.append("a clean run retransmitted or raised EV events")
    elif name in ("default", "link-flap", "plane-down"):
        if not bad_events or not rep["retransmissions"]:
            bad.append("the failure was not detected (no ASSUMED_BAD EV, no retransmission)")
        if name == "link-flap" and not any(e["reason"] == "PROBE_OK" for e in rep["ev_events"]):
            bad.append("the link came back but no probe made its EV GOOD again")
    elif name in ("trim-incast", "incast-8"):
        _congestion_only(rep, bad)
        times = sender_times(rep)
        fair_due = name == "incast-8" or rep.get("size", 0) >= FAIRNESS_MIN_SIZE
        if fair_due and len(times) == len(rep["transfers"]) and min(times.values()) > 0:
            ratio = max(times.values()) / min(times.values())
            if ratio > FAIRNESS:
                bad.append(f"per-sender completion times {ratio:.2f}x apart (> {FAIRNESS})")
    elif name == "ecn":
        if not rep["ecn_marked"] or not rep["ecn_echoes"]:
            bad.append("no ECN marks or echoes")
        if _timeouts(rep):
            bad.append(f"{_timeouts(rep)} ACK timeouts")
    return bad
