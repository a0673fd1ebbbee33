"""The cwnd panel's arithmetic (sim/report.py): step-function means and sliding means."""

import pytest

from mrcnic.sim.report import cwnd_means, plot_throughput, step_mean


def test_step_mean():
    pts = [(0, 10.0), (10, 20.0), (30, 0.0)]
    assert step_mean(pts, 0, 10) == 10.0
    assert step_mean(pts, 0, 30) == pytest.approx((10 * 10 + 20 * 20) / 30)
    assert step_mean(pts, 5, 15) == pytest.approx(15.0)
    assert step_mean(pts, 30, 40) == 0.0                  # the last value holds
    assert step_mean(pts, -10, 0) is None                 # before the first point


def test_cwnd_means_sliding():
    # one sender alternating 1000 / 3000 bytes every 10 us: its 40-us mean is 2000 throughout
    report = {"cwnd": [{"nic": 3, "t_ns": t * 10_000.0, "cwnd": 1000 if t % 2 else 3000}
                       for t in range(20)]}
    rows = cwnd_means(report, 40_000.0)[3]
    assert rows and all(m == pytest.approx(2000) for _, m in rows)
    assert rows[0][0] == 20_000.0 and rows[-1][0] <= 190_000.0 - 20_000.0


def test_plot_with_cwnd(tmp_path):
    """A report with windows plots them (steps + means) without error."""
    report = {"scenario": "x", "nics": 3, "planes": 1, "evs": 1, "completion_ns": 90_000.0,
              "ideal_ns": 80_000.0, "base_rtt_ns": 10_000.0, "sender_gbps": 8.0,
              "throughput": {"bin_ns": 1000.0, "t0_ns": 0.0, "t_ns": [i * 1000.0 for i in range(90)],
                             "planes": [[1.0] * 90]},
              "cwnd": [{"nic": n, "t_ns": t * 5000.0, "cwnd": 2048 + 512 * ((t + n) % 3)}
                       for n in (0, 1) for t in range(18)],
              "ev_events": [], "failures": []}
    path = plot_throughput(report, tmp_path / "p.png")
    assert path.stat().st_size > 10_000
