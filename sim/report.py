"""Reports of ``mrcnic sim``: the JSON file, a per-plane throughput plot, a console summary.

The report is the dict :func:`mrcnic.sim.cosim.run_cosim` returns.  Contract
fields (../shared/DESIGN.md "Command line"): ``scenario, planes, evs,
bytes_posted, bytes_delivered, bytes_mismatched, packets_sent, retransmissions,
trimmed, ecn_marked, evs_assumed_bad, ev_events, completion_ns, ideal_ns,
per_plane_bytes, failures``; further fields: ``per_ev`` (per-EV counters),
``drops`` (per drop reason, fabric and NICs), ``throughput`` (per-plane bytes per
time bin), ``nic_counters``, ``sim`` (cycles, cycles/s).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["write_json", "plot_throughput", "summary_rows", "CONTRACT_FIELDS"]

CONTRACT_FIELDS = ("scenario", "planes", "evs", "bytes_posted", "bytes_delivered",
                   "bytes_mismatched", "packets_sent", "retransmissions", "trimmed", "ecn_marked",
                   "evs_assumed_bad", "ev_events", "completion_ns", "ideal_ns", "per_plane_bytes",
                   "failures")


def write_json(report: dict, path) -> Path:
    """Write ``report`` as indented JSON (contract fields first); return the path."""
    path = Path(path)
    ordered = {k: report[k] for k in CONTRACT_FIELDS if k in report}
    ordered.update({k: v for k, v in report.items() if k not in ordered})
    path.write_text(json.dumps(ordered, indent=2, default=str) + "\n")
    return path


def plot_throughput(report: dict, path) -> Path:
    """PNG of the per-plane delivered throughput (Gb/s) over time, failures marked.

    Time is in microseconds from the moment the work requests were posted;
    each failure or recovery is a vertical line labelled with its target; the
    completion time and the ideal time are dashed lines; EV events are triangles on the
    time axis (red: ASSUMED_BAD, green: GOOD).  Matplotlib, Agg backend.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    thr = report["throughput"]
    t0, bin_ns = thr["t0_ns"], thr["bin_ns"]
    # Frames are sprayed one by one over the planes, so a plane sees one frame in every
    # ``planes`` (about 1.2 us each at 8 Gb/s): average over three frames per plane, or
    # 1/40 of the run, whichever is longer.
    span = max(1.0, len(thr["t_ns"]) * bin_ns)
    window_ns = max(3 * report["planes"] * 1200.0, span / 40)
    w = max(1, round(window_ns / bin_ns))
    t_us = [(t + bin_ns / 2 - t0) / 1000 for t in thr["t_ns"]]
    fig, ax = plt.subplots(figsize=(10, 4.8), dpi=110)
    t_us += [t_us[-1] + (i + 1) * bin_ns / 1000 for i in range(w)] if t_us else []
    for p, row in enumerate(thr["planes"]):
        row = list(row) + [0] * w          # let the average run out past the last bin
        acc, gbps = 0, []
        for i, b in enumerate(row):
            acc += b - (row[i - w] if i >= w else 0)
            gbps.append(acc * 8 / (w * bin_ns))
        # the average of the w bins ending at bin i, drawn at the window's centre
        pts = [(t - (w - 1) * bin_ns / 2000, g) for t, g in zip(t_us, gbps)]
        ax.plot([t for t, _ in pts], [g for _, g in pts], label=f"plane {p}", linewidth=1.2)
    colors = {"fail": "red", "recover": "green"}
    for f in report.get("failures", []):
        x = f["t_rel_ns"] / 1000
        kind = "fail" if f["action"].startswith("fail") else "recover"
        ax.axvline(x, color=colors[kind], linestyle="-", linewidth=1.5, alpha=0.8)
        ax.annotate(f"{f['action']} {f['target']}", (x, 1), xycoords=("data", "axes fraction"),
                    rotation=90, va="top", ha="right", fontsize=7, color=colors[kind])
    for e in report.get("ev_events", []):
        bad = e["state"] == "ASSUMED_BAD"
        ax.plot([(e["t_ns"] - t0) / 1000], [0], marker="v" if bad else "^", markersize=7,
                color="red" if bad else "green", clip_on=False, zorder=5, linestyle="none")
    if report.get("completion_ns") is not None:
        ax.axvline(report["completion_ns"] / 1000, color="black", linestyle="--", linewidth=1,
                   label="completion")
    ax.axvline(report["ideal_ns"] / 1000, color="grey", linestyle=":", linewidth=1,
               label="ideal")
    ax.set_xlim(left=0)
    ax.set_xlabel("time since the work requests were posted (us)")
    ax.set_ylabel(f"delivered to hosts (Gb/s, {window_ns / 1000:.1f} us average)")
    ax.set_title(f"mrcnic sim {report['scenario']}: {report['nics']} NICs, "
                 f"{report['planes']} planes, {report['evs']} EVs")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def summary_rows(report: dict) -> list[tuple[str, str]]:
    """(name, value) rows for a console table of the main results."""
    cpl = report.get("completion_ns")
    ratio = f"{cpl / report['ideal_ns']:.2f} x ideal" if cpl else "not complete"
    rows = [
        ("scenario", report["scenario"]),
        ("NICs / planes / EVs", f"{report['nics']} / {report['planes']} / {report['evs']}"),
        ("bytes posted", str(report["bytes_posted"])),
        ("bytes delivered", str(report["bytes_delivered"])),
        ("bytes mismatched", str(report["bytes_mismatched"])),
        ("data packets sent", str(report["packets_sent"])),
        ("retransmissions", str(report["retransmissions"])),
        ("trimmed / ECN marked", f"{report['trimmed']} / {report['ecn_marked']}"),
        ("EVs ASSUMED_BAD / EV events", f"{report['evs_assumed_bad']} / {len(report['ev_events'])}"),
        ("completion", f"{cpl / 1000:.2f} us ({ratio})" if cpl else ratio),
        ("ideal", f"{report['ideal_ns'] / 1000:.2f} us"),
        ("per-plane bytes", ", ".join(str(b) for b in report["per_plane_bytes"])),
        ("failures", "; ".join(f"{f['action']} {f['target']} @ {f['t_rel_ns'] / 1000:.1f} us"
                               for f in report["failures"]) or "none"),
        ("simulation", f"{report['sim']['cycles']} cycles, "
                       f"{report['sim']['cycles_per_s']:.0f} cycles/s"),
    ]
    if report.get("csr_ops") or report.get("rounds", 1) > 1:
        rows.append(("served", f"{report.get('rounds', 1)} rounds of transfers, "
                               f"{report.get('csr_ops', 0)} register accesses over TCP"))
    return rows
