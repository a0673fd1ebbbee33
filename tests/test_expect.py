"""sim/expect.py: which incast runs the fairness rule applies to."""

from mrcnic.sim.expect import FAIRNESS_MIN_SIZE, check


def _report(name, size, times_us):
    """A complete, exact incast report whose senders' last receive completions are
    ``times_us`` (one transfer per sender into NIC 9)."""
    n = len(times_us)
    return {
        "scenario": name, "size": size, "complete": True, "stalled": False,
        "bytes_posted": n * size, "bytes_delivered": n * size, "bytes_mismatched": 0,
        "transfers": [{"src": s, "dst": 9, "bytes": size} for s in range(n)],
        "completions": [{"nic": 9, "qp": s, "psn": 0, "t_ns": t * 1000.0}
                        for s, t in enumerate(times_us)],
        "sim": {"t0_ns": 0.0}, "completion_ns": max(times_us) * 1000.0,
        "ideal_ns": max(times_us) * 1000.0, "ev_events": [], "nic_counters": [],
        "drops": {"nic": {}}, "retransmissions": 0, "trimmed": 0,
    }


def test_fairness_scope():
    unfair = [100.0, 140.0, 141.0]                       # 1.41x apart
    assert check(_report("trim-incast", 65536, unfair)) == []
    assert any("apart" in p for p in check(_report("trim-incast", FAIRNESS_MIN_SIZE, unfair)))
    assert any("apart" in p for p in check(_report("incast-8", 16384, unfair * 2 + [120, 121])))
    assert check(_report("incast-8", 16384, [100.0] * 8)) == []
