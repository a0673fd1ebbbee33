"""Reports of ``mrcnic sim``: the JSON file, a per-plane throughput plot, a console summary.

The report is the dict :func:`mrcnic.sim.cosim.run_cosim` returns.  Contract
fields (../shared/DESIGN.md "Command line"): ``scenario, planes, evs,
bytes_posted, bytes_delivered, bytes_mismatched, packets_sent, retransmissions,
trimmed, ecn_marked, evs_assumed_bad, ev_events, completion_ns, ideal_ns,
per_plane_bytes, failures``; further fields: ``per_ev`` (per-EV counters),
``drops`` (per drop reason, fabric and NICs), ``throughput`` (per-plane bytes per
time bin), ``nic_counters``, ``sim`` (cycles, cycles/s), ``lower_bound_ns`` (a true
lower bound of ``completion_ns``; ``ideal_ns`` is the contract's reference time, wire
time at full rate plus one base RTT, which a run may beat slightly), ``stopped`` (served
runs: why the run ended as the user asked) and ``warnings`` (:func:`annotate`).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["write_json", "plot_throughput", "plot_window_ns", "summary_rows", "annotate", "failure_traffic",
           "CONTRACT_FIELDS"]

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


def failure_traffic(report: dict, failure: dict) -> dict:
    """Frames sent over and dropped at the ports a failure covers (``fabric_ports``).

    ``fail_link``/``recover_link`` ``"a<->b"``: both directions of the link;
    ``*_switch`` ``name``: every port to or from the switch; ``*_plane`` ``"planeN"``:
    every port of plane N (node names ``pN.``).  Returns ``{"ports", "frames", "drops"}``.
    """
    target = str(failure["target"])
    ports = report.get("fabric_ports", {})
    if "<->" in target:
        a, b = target.split("<->")
        names = [n for n in ports if n in (f"{a}->{b}", f"{b}->{a}")]
    elif target.startswith("plane") and target[5:].isdigit():
        names = [n for n in ports if f"p{target[5:]}." in n]
    else:
        names = [n for n in ports if target in n.split("->")]
    frames = sum(ports[n].get("frames", 0) for n in names)
    drops = sum(sum(ports[n].get("drops", {}).values()) for n in names)
    return dict(ports=names, frames=frames, drops=drops)


def annotate(report: dict, *, served: bool = False, stop_file=None,
             lower_bound_ns: float | None = None) -> dict:
    """Add ``stopped``, ``lower_bound_ns`` and ``warnings`` to a finished run's report.

    * ``stopped`` (served runs only): why the run ended, every way being one the user
      asked for: ``"Ctrl-C or SIGTERM"``, ``"stop file"`` or ``"--serve-time reached"``;
    * ``warnings``: a scheduled failure that took effect but carried no traffic (no frame
      crossed or was lost on what it failed: it tested nothing), one that never took
      effect (the run ended first), a completion under ``lower_bound_ns`` (a model bug).
    """
    from pathlib import Path as _P

    if lower_bound_ns is not None:
        report["lower_bound_ns"] = lower_bound_ns
    warnings = list(report.get("warnings", []))
    for f in report.get("failures", []):
        if not f["action"].startswith("fail"):
            continue
        t = failure_traffic(report, f)
        if not t["frames"] and not t["drops"]:
            warnings.append(f"{f['action']} {f['target']} at {f['t_rel_ns'] / 1000:.1f} us "
                            "carried no traffic: no frame crossed or was lost on it, so the "
                            "failure tested nothing")
    end = report.get("sim", {}).get("end_ns")
    for f in report.get("failures_planned", []):
        if end is not None and f["at_ns"] > end:
            warnings.append(f"{f['action']} {f['target']} was scheduled but never took effect "
                            "(the run ended first)")
    cpl = report.get("completion_ns")
    if cpl is not None and report.get("lower_bound_ns") and cpl < report["lower_bound_ns"]:
        warnings.append(f"completion {cpl:.0f} ns is under the lower bound "
                        f"{report['lower_bound_ns']:.0f} ns: the model or the bound is wrong")
    report["warnings"] = warnings
    if served:
        text = ""
        if stop_file is not None and _P(stop_file).exists():
            text = _P(stop_file).read_text().strip()
        if report.get("interrupted") or text == "interrupted":
            report["stopped"] = "Ctrl-C or SIGTERM"
        elif stop_file is not None and _P(stop_file).exists():
            report["stopped"] = "stop file"
        else:
            report["stopped"] = "--serve-time reached"
    return report


def plot_window_ns(report: dict) -> float:
    """The averaging window of :func:`plot_throughput`, scaled to the run.

    A plane sees one frame in every ``planes`` (spraying), about ``planes`` x 1.2 us
    apart at 8 Gb/s, so a window shorter than that shows single frames, not a rate;
    1/20 of the run keeps the shape of a long run.  The window is the larger of the two,
    but never more than 1/8 of the run (short runs), nor less than one bin.
    """
    thr = report["throughput"]
    span = max(1.0, len(thr["t_ns"]) * thr["bin_ns"])
    window = min(max(report["planes"] * 1200.0, span / 20), span / 8)
    return max(window, thr["bin_ns"])


def plot_throughput(report: dict, path) -> Path:
    """PNG of the per-plane delivered throughput (Gb/s) over time, failures marked.

    Time is in microseconds from the moment the work requests were posted.  Every mark has
    a legend entry: each failure or recovery (a vertical line, its target and time in the
    legend rather than over the curves), EV events (triangles on the time axis: red
    ASSUMED_BAD, green GOOD), the completion time, the contract's reference time
    (``ideal_ns``: wire time at full rate + one base RTT) and the true lower bound
    (``lower_bound_ns``), each with its value.  The averaging window is scaled to the run
    (:func:`plot_window_ns`) and named on the y axis.  Matplotlib, Agg backend.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    thr = report["throughput"]
    t0, bin_ns = thr["t0_ns"], thr["bin_ns"]
    window_ns = plot_window_ns(report)
    w = max(1, round(window_ns / bin_ns))
    t_us = [(t + bin_ns / 2 - t0) / 1000 for t in thr["t_ns"]]
    fig, ax = plt.subplots(figsize=(10, 5.2), dpi=110)
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
    styles = {"fail": ("red", "-"), "recover": ("green", "-")}
    for f in report.get("failures", []):
        x = f["t_rel_ns"] / 1000
        color, ls = styles["fail" if f["action"].startswith("fail") else "recover"]
        ax.axvline(x, color=color, linestyle=ls, linewidth=1.5, alpha=0.8,
                   label=f"{f['action']} {f['target']} @ {x:.1f} us")
    shown = set()
    for e in report.get("ev_events", []):
        bad = e["state"] == "ASSUMED_BAD"
        label = None
        if e["state"] not in shown:
            shown.add(e["state"])
            n = sum(1 for x in report["ev_events"] if x["state"] == e["state"])
            label = f"EV event: {e['state']} ({n})"
        ax.plot([(e["t_ns"] - t0) / 1000], [0], marker="v" if bad else "^", markersize=8,
                color="red" if bad else "green", clip_on=False, zorder=5, linestyle="none",
                label=label)
    if report.get("completion_ns") is not None:
        ax.axvline(report["completion_ns"] / 1000, color="black", linestyle="--", linewidth=1.2,
                   label=f"completion {report['completion_ns'] / 1000:.2f} us", zorder=3)
    ax.axvline(report["ideal_ns"] / 1000, color="tab:blue", linestyle=(0, (1, 1)),
               linewidth=2.2, alpha=0.7, zorder=4,
               label=f"reference (wire time + 1 RTT) {report['ideal_ns'] / 1000:.2f} us")
    if report.get("lower_bound_ns"):
        ax.axvline(report["lower_bound_ns"] / 1000, color="tab:purple", linestyle="-.",
                   linewidth=1.2, zorder=4,
                   label=f"lower bound {report['lower_bound_ns'] / 1000:.2f} us")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time since the work requests were posted (us)")
    ax.set_ylabel(f"delivered to hosts (Gb/s, {window_ns / 1000:.1f} us average)")
    ax.set_title(f"mrcnic sim {report['scenario']}: {report['nics']} NICs, "
                 f"{report['planes']} planes, {report['evs']} EVs")
    ax.grid(True, alpha=0.3)
    # the legend beside the axes: it never covers a curve
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
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
        ("ideal (reference: wire time + 1 RTT)", f"{report['ideal_ns'] / 1000:.2f} us"),
        ("per-plane bytes", ", ".join(str(b) for b in report["per_plane_bytes"])),
        ("failures", "; ".join(f"{f['action']} {f['target']} @ {f['t_rel_ns'] / 1000:.1f} us"
                               for f in report["failures"]) or "none"),
        ("simulation", f"{report['sim']['cycles']} cycles, "
                       f"{report['sim']['cycles_per_s']:.0f} cycles/s"),
    ]
    if report.get("lower_bound_ns"):
        rows.insert(rows.index(next(r for r in rows if r[0].startswith("ideal"))) + 1,
                    ("lower bound", f"{report['lower_bound_ns'] / 1000:.2f} us"))
    if report.get("stopped"):
        rows.append(("stopped", f"as asked: {report['stopped']}"))
    for w in report.get("warnings", []):
        rows.append(("WARNING", w))
    if report.get("csr_ops") or report.get("rounds", 1) > 1:
        rows.append(("served", f"{report.get('rounds', 1)} rounds of transfers, "
                               f"{report.get('csr_ops', 0)} register accesses over TCP"))
    return rows
