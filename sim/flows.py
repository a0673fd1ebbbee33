"""Per-flow and per-link figures of a ``mrcnic sim`` run (issue 20 reports).

:func:`flow_stats` turns a run's report (:func:`mrcnic.sim.cosim.run_cosim`) into

* per flow (one transfer = one RDMA WRITE on its own QP): completion time (FCT: from the
  start of the run to the receiver's completion -- the whole message placed -- in ns; the
  sender's send completion, every packet acknowledged, as ``acked_ns``),
  throughput in Gb/s (message bytes x 8 / FCT) and as a fraction of the flow's ideal
  (the run's ``ideal_ns`` / FCT: every NIC of a permutation carries one flow at its full
  rate, so ``ideal_ns`` is each flow's ideal time);
* p50 / p99 / max FCT (nearest-rank percentiles) and mean / min fraction of ideal;
* per fabric link direction (leaf -> spine, spine -> leaf): bytes carried, utilisation
  (bytes x 8 / (rate x run time)) and load relative to the ideal (perfectly even) share:
  the tier's total bytes over its links of the planes that carried traffic.

:func:`plot_fct_cdf` and :func:`plot_link_load` draw the PNGs.
"""

from __future__ import annotations

import math

__all__ = ["flow_stats", "percentile", "plot_fct_cdf", "plot_link_load"]


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` (0..100) of ``values``; ``None`` when empty."""
    if not values:
        return None
    v = sorted(values)
    return v[max(0, math.ceil(q / 100 * len(v)) - 1)]


def _qp_indices(sc: dict, side: str) -> list[int | None]:
    """QP index at the source of each transfer (as :func:`mrcnic.sim.cosim._transfers`):
    configuration files: transfer i -> QP i; generated configurations
    (:func:`mrcnic.sim.scenarios.make_configs`): the NIC's QPs in transfer order, one per
    transfer it sends or receives."""
    if sc.get("configs"):
        n = len(sc["transfers"])
        return list(range(n)) if side == "src" else [None] * n
    out = []
    for i, t in enumerate(sc["transfers"]):
        out.append(sum(1 for u in sc["transfers"][:i] if t[side] in (u["src"], u["dst"])))
    return out


def _port_rate(sc: dict, name: str) -> float:
    a, b = name.split("->")
    for s in sc.get("slow_links", []):
        if {a, b} == set(s["link"]):
            return s["rate_gbps"]
    return sc["fabric"]["rate_gbps"]


def flow_stats(report: dict, sc: dict) -> dict:
    """Per-flow FCT/throughput and per-link load of a run (module docstring).

    ``report`` from :func:`~mrcnic.sim.cosim.run_cosim`, ``sc`` the scenario it ran
    (dict).  Returns ``{"flows": [{src, dst, bytes, delivered, fct_ns, acked_ns, gbps,
    frac_ideal}], "fct_p50_ns", "fct_p99_ns", "fct_max_ns", "mean_frac_ideal",
    "min_frac_ideal", "mean_gbps", "min_gbps", "links": {port: {bytes, util, vs_ideal,
    rate_gbps}}, "max_vs_ideal"}``.  A flow without a send completion has ``fct_ns``
    ``None`` and counts as 0 throughput; with configuration files (``sc["configs"]``) the
    receiver's QP is unknown here and ``fct_ns`` is the send completion.
    """
    t0 = report["sim"]["t0_ns"]
    ideal = report["ideal_ns"]
    sqp, rqp = _qp_indices(sc, "src"), _qp_indices(sc, "dst")
    sent, recv = {}, {}
    for c in report.get("send_completions", []):
        sent.setdefault((c["nic"], c["qp"]), []).append(c["t_ns"])
    for c in report.get("completions", []):
        recv.setdefault((c["nic"], c["qp"]), []).append(c["t_ns"])
    flows = []
    for i, t in enumerate(report["transfers"]):
        # a QP carries one message per round: its first completion is this transfer's
        acked = sent.get((t["src"], sqp[i]), [])
        placed = recv.get((t["dst"], rqp[i]), []) if rqp[i] is not None else []
        acked_ns = acked[0] - t0 if acked else None
        fct = placed[0] - t0 if placed else acked_ns
        flows.append(dict(src=t["src"], dst=t["dst"], bytes=t["bytes"],
                          delivered=t["delivered"], fct_ns=fct, acked_ns=acked_ns,
                          gbps=(t["bytes"] * 8 / fct) if fct else 0.0,
                          frac_ideal=(ideal / fct) if fct else 0.0))
    fcts = [f["fct_ns"] for f in flows if f["fct_ns"] is not None]
    end = report["sim"]["end_ns"]
    dur = max(1.0, end - t0)
    links = {}
    for name, p in (report.get("fabric_ports") or {}).items():
        if "host" in name:
            continue
        rate = _port_rate(sc, name)
        links[name] = dict(bytes=p["bytes"], rate_gbps=rate,
                           util=p["bytes"] * 8 / (rate * dur))
    # the ideal share: the tier's bytes spread evenly over its links in the used planes
    topo = sc["topology"]
    for up in (True, False):
        tier = {n: v for n, v in links.items() if (".leaf" in n.split("->")[0]) == up}
        if not tier:
            continue
        planes = {n.split(".")[0] for n in tier}
        n_links = len(planes) * topo["leaves"] * topo["spines"]
        share = sum(v["bytes"] for v in tier.values()) / n_links
        for v in tier.values():
            v["vs_ideal"] = v["bytes"] / share if share else 0.0
    return dict(
        flows=flows,
        fct_p50_ns=percentile(fcts, 50), fct_p99_ns=percentile(fcts, 99),
        fct_max_ns=max(fcts) if fcts else None,
        mean_frac_ideal=sum(f["frac_ideal"] for f in flows) / len(flows),
        min_frac_ideal=min(f["frac_ideal"] for f in flows),
        mean_gbps=sum(f["gbps"] for f in flows) / len(flows),
        min_gbps=min(f["gbps"] for f in flows),
        links=links,
        max_vs_ideal=max((v.get("vs_ideal", 0.0) for v in links.values()), default=0.0),
    )


def plot_fct_cdf(series: dict, path, title: str = "FCT CDF") -> None:
    """PNG of FCT CDFs: ``series`` maps a label to a list of FCTs in ns (or to a
    ``(fcts, style)`` pair with a matplotlib format string)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, val in series.items():
        fcts, style = val if isinstance(val, tuple) else (val, "-")
        v = sorted(x / 1000 for x in fcts if x is not None)
        if not v:
            continue
        ys = [(i + 1) / len(v) for i in range(len(v))]
        ax.step(v, ys, style, where="post", label=label)
    ax.set_xlabel("flow completion time (us)")
    ax.set_ylabel("fraction of flows")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    if ax.lines:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_link_load(stats: dict, sc: dict, path, title: str = "fabric link load") -> None:
    """PNG of each fabric link direction's bytes relative to the ideal even share, failed
    links (``sc["failures"]``) red, slow links (``sc["slow_links"]``) orange."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    marked = {}
    for f in sc.get("failures", []):
        if isinstance(f["target"], list):
            marked[frozenset(f["target"])] = "tab:red"
    for s in sc.get("slow_links", []):
        marked[frozenset(s["link"])] = "tab:orange"
    names = sorted(stats["links"])
    vals = [stats["links"][n].get("vs_ideal", 0.0) for n in names]
    colors = [marked.get(frozenset(n.split("->")), "tab:blue") for n in names]
    fig, ax = plt.subplots(figsize=(max(7, len(names) * 0.12), 4))
    ax.bar(range(len(names)), vals, color=colors)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=90, fontsize=5)
    ax.set_ylabel("bytes / ideal even share")
    ax.set_title(title + "  (red: failed link, orange: slow link)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
