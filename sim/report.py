"""Reports of ``mrcnic sim``: the JSON file, a per-plane throughput plot, a console summary.

The report is the dict :func:`mrcnic.sim.cosim.run_cosim` returns.  Contract
fields (docs/architecture.md "Command-line contract"): ``scenario, planes, evs,
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
            cut = report.get("interrupted") or served
            warnings.append(f"{f['action']} {f['target']} at {f['t_rel_ns'] / 1000:.1f} us "
                            "carried no traffic: no frame crossed or was lost on it"
                            + (" before the run was stopped" if cut else "")
                            + ", so the failure tested nothing")
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
    """Half-width of the triangular averaging window of :func:`plot_throughput`, in ns.

    Spraying gives a plane one frame in every ``planes``: frames ``T = planes x frame time``
    apart on each plane (the frame time from the run's own mean data frame at the sender's
    rate).  A triangle of half-width ``T`` turns such a train into its exact mean rate
    (no aliasing spikes); a long run uses the multiple of ``T`` nearest 1/40 of its span,
    a short one never more than 1/6 of the span, and never less than one bin.
    """
    thr = report["throughput"]
    span = max(1.0, len(thr["t_ns"]) * thr["bin_ns"])
    sent = report.get("packets_sent") or 0
    data = sum(report.get("per_plane_data_bytes") or [])
    frame_ns = ((data / sent + 24) * 8 / report.get("sender_gbps", 8.0)) if sent and data \
        else 1200.0
    period = report["planes"] * frame_ns
    window = min(period * max(1, round(span / 40 / period)), span / 6)
    return max(window, thr["bin_ns"])


def plot_throughput(report: dict, path) -> Path:
    """PNG of the per-plane delivered throughput (Gb/s) over time, failures marked.

    Time is in microseconds from the moment the work requests were posted.  Every mark has
    a legend entry: each failure or recovery (a vertical line, its target and time in the
    legend rather than over the curves), EV events (triangles on the time axis: red
    ASSUMED_BAD, green GOOD), the completion time, the contract's reference time
    (``ideal_ns``: wire time at full rate + one base RTT) and the true lower bound
    (``lower_bound_ns``), each with its value.  The rate is a triangular moving average
    whose half-width is scaled to the run (:func:`plot_window_ns`) and named on the y axis.
    Matplotlib, Agg backend.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    thr = report["throughput"]
    t0, bin_ns = thr["t0_ns"], thr["bin_ns"]
    window_ns = plot_window_ns(report)
    m = max(0, round(window_ns / bin_ns) - 1)           # triangle: weights m+1-|j|, |j| <= m
    norm = (m + 1) ** 2
    kernel = [(m + 1 - abs(j)) / norm for j in range(-m, m + 1)]
    senders = sorted({t["src"] for t in report.get("transfers", [])})
    cw = [c for c in report.get("cwnd", []) if c["nic"] in senders]
    if len(senders) > 1 and cw:                  # incast: the windows converging, below
        fig, (ax, ax_cw) = plt.subplots(2, 1, figsize=(10, 7.4), dpi=110, sharex=True,
                                        gridspec_kw=dict(height_ratios=[3, 1.6]))
    else:
        fig, ax = plt.subplots(figsize=(10, 5.2), dpi=110)
        ax_cw = None
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink",
              "tab:olive", "tab:cyan"]
    for p, row in enumerate(thr["planes"]):
        row = [0] * m + list(row) + [0] * m            # the average runs out on both sides
        t_us = [(thr["t_ns"][0] + (i - m + 0.5) * bin_ns - t0) / 1000
                for i in range(len(row))] if thr["t_ns"] else []
        gbps = [sum(k * row[i + j - m] for j, k in enumerate(kernel)
                    if 0 <= i + j - m < len(row)) * 8 / bin_ns for i in range(len(row))]
        ax.plot(t_us, gbps, label=f"plane {p}", linewidth=1.3, color=colors[p % len(colors)])
    styles = {"fail": ("red", (0, (6, 2))), "recover": ("green", (0, (6, 2)))}
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
    ax.axvline(report["ideal_ns"] / 1000, color="navy", linestyle=(0, (1, 1)),
               linewidth=2.2, alpha=0.7, zorder=4,
               label=f"reference (wire time + 1 RTT) {report['ideal_ns'] / 1000:.2f} us")
    if report.get("lower_bound_ns"):
        ax.axvline(report["lower_bound_ns"] / 1000, color="dimgray", linestyle="-.",
                   linewidth=1.2, zorder=4,
                   label=f"lower bound {report['lower_bound_ns'] / 1000:.2f} us")
    if ax_cw is not None:
        _plot_cwnd(ax_cw, report, senders, t0)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    (ax_cw if ax_cw is not None else ax).set_xlabel(
        "time since the work requests were posted (us)")
    ax.set_ylabel(f"delivered to hosts (Gb/s, triangular average +/- {window_ns / 1000:.1f} us)")
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


def step_mean(points: list, a: float, b: float) -> float | None:
    """Time-weighted mean of a step function over ``[a, b)``.

    ``points``: (t, value) pairs sorted by t, each value holding until the next point (the
    last one until ``b``).  Returns None when the function is undefined over the whole
    interval (no point at or before ``b``)."""
    total = weight = 0.0
    for i, (t, v) in enumerate(points):
        lo = max(t, a)
        hi = min(points[i + 1][0] if i + 1 < len(points) else b, b)
        if hi > lo:
            total += v * (hi - lo)
            weight += hi - lo
    return total / weight if weight else None


def cwnd_means(report: dict, span_ns: float) -> dict[int, list[tuple[float, float]]]:
    """Each sender's NSCC window averaged over a sliding ``span_ns`` (centred), sampled every
    ``span_ns / 8``: {nic: [(t_ns, mean bytes), ...]} (the samples after the first window
    point and before the last)."""
    per: dict[int, list] = {}
    for c in report.get("cwnd", []):
        per.setdefault(c["nic"], []).append((c["t_ns"], c["cwnd"]))
    out = {}
    for nic, pts in per.items():
        pts.sort()
        t, end, step, rows = pts[0][0] + span_ns / 2, pts[-1][0] - span_ns / 2, span_ns / 8, []
        while t <= end:
            mean = step_mean(pts, t - span_ns / 2, t + span_ns / 2)
            if mean is not None:
                rows.append((t, mean))
            t += step
        out[nic] = rows
    return out


def _plot_cwnd(ax, report: dict, senders: list, t0: float):
    """Each sender's NSCC window (KiB, QP 0) over time (thin steps) and its mean over a
    sliding 4 base RTTs (bold), with the fair share of the busiest receiver's
    bandwidth-delay product (its rate x base RTT / senders) as a reference."""
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink",
              "tab:olive", "tab:cyan", "tab:red", "tab:gray"]
    span = 4 * report["base_rtt_ns"] if report.get("base_rtt_ns") else 50_000.0
    means = cwnd_means(report, span)
    for i, k in enumerate(senders):
        color = colors[i % len(colors)]
        pts = [(c["t_ns"], c["cwnd"]) for c in report["cwnd"] if c["nic"] == k]
        ax.step([(t - t0) / 1000 for t, _ in pts], [w / 1024 for _, w in pts], where="post",
                linewidth=0.7, alpha=0.45, color=color)
        ax.plot([(t - t0) / 1000 for t, _ in means.get(k, [])],
                [w / 1024 for _, w in means.get(k, [])], linewidth=1.8, color=color,
                label=f"nic{k} cwnd")
    ax.plot([], [], color="gray", linewidth=0.7, alpha=0.45, label="window (steps)")
    ax.plot([], [], color="gray", linewidth=1.8, label=f"mean over {span / 1000:.0f} us")
    if report.get("base_rtt_ns") and report.get("sender_gbps"):
        fair = report["sender_gbps"] * report["base_rtt_ns"] / 8 / len(senders) / 1024
        ax.axhline(fair, color="black", linestyle=":", linewidth=1.2,
                   label=f"fair share of one BDP ({fair:.1f} KiB)")
    ax.set_ylabel("NSCC cwnd (KiB)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)


def summary_rows(report: dict) -> list[tuple[str, str]]:
    """(name, value) rows for a console table of the main results."""
    cpl = report.get("completion_ns")
    ratio = f"{cpl / report['ideal_ns']:.2f} x ideal" if cpl else "not complete"
    if cpl and report.get("rounds", 1) > 1:
        ratio += ", first round"
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
