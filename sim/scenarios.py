"""Built-in scenarios of ``mrcnic sim``: RTL NICs across the fabric model, as data.

A scenario is a plain dict (JSON-able) read by :func:`mrcnic.sim.cosim.run_cosim`:

``topology``
    :class:`~mrcnic.sim.topology.ClosTopology` arguments.
``fabric``
    :class:`~mrcnic.sim.fabric.Fabric` arguments (rates in Gb/s, times in ns, bytes).
``nics``
    Host index (topology) of each RTL NIC; NIC *k* is ``n<k>_...`` in the co-simulation top.
``configs``
    One TOML file per NIC (paths relative to the repository), or ``None``: the
    configurations are generated from the topology (:func:`make_configs`), one
    QP pair per transfer, explicit EV profiles of ``evs`` EVs
    (:meth:`ClosTopology.ev_profile`).
``cc``
    Optional NSCC parameters for every QP of generated configurations.
``transfers``
    RDMA WRITEs ``{"src": nic, "dst": nic}`` of ``size`` bytes each, posted at
    the same time; transfer *i* writes at offset ``i * size`` of the destination's
    first memory region.
``size`` / ``test_size``
    Bytes per transfer for ``mrcnic sim`` / for the pytest run.
``failures``
    ``{"action": "fail_link" | "recover_link" | "fail_switch" | "recover_switch" |
    "fail_plane" | "recover_plane", "target": [a, b] | name | plane, "at": f}``: the
    failure takes effect ``f`` x ``ideal_ns`` after the work requests are posted.
``slow_links``
    ``{"link": [a, b], "rate_gbps": r}``: both directions of the link at rate ``r``.
``background``
    Constant-rate traffic injected straight into the fabric from a host without
    an RTL NIC: ``{"src_host", "dst_host", "plane", "spine", "rate_gbps",
    "payload_bytes", "from", "to"}`` (``from``/``to`` in units of ``ideal_ns``).
``reliability``
    Optional overrides of the sender-reliability context of every QP
    (:func:`mrcnic.config.rel_qp_configs`, e.g. ``ack_timeout_exp``).
``linger_ns``
    Simulated time kept running after the last completion (probes, late ACKs).
``stall_ns``
    Optional (default max(100 us, 3 x RTO), :func:`mrcnic.sim.cosim.run_limits`): the run
    gives up when nothing was sent and nothing is in flight for that long before every
    completion arrived.
``time_limit``
    The run stops at ``time_limit`` x ``ideal_ns`` + ``linger_ns`` after posting,
    complete or not (a scenario file without it: max(4, (ideal + 3 x RTO) / ideal)).
``expect``
    What the scenario shows (text; the assertions are in ``tests/test_sim.py``).

Link rates: a NIC moves one 64-bit beat per 8 ns clock, 8 Gb/s over all its
planes together; host and fabric links run at 10 Gb/s per plane unless a
scenario says otherwise, so the NIC is the bottleneck, even with a plane down.
"""

from __future__ import annotations

import copy

from mrcnic.sim.topology import ClosTopology

__all__ = ["SCENARIOS", "get_scenario", "make_configs", "scenario_names", "fabric_defaults",
           "MAX_SIZE", "REGION_VA", "REGION_BASE", "SRC_BASE"]

_FABRIC = dict(rate_gbps=10.0, latency_ns=200.0, host_rate_gbps=10.0, host_latency_ns=100.0,
               switch_latency_ns=0.0, queue_bytes=256 * 1024, ecn_threshold_bytes=64 * 1024,
               trim=True, trim_dscp=46, trim_queue_bytes=8 * 1024)

_DEFAULT = dict(
    description="two NICs, four planes, one RDMA WRITE sprayed over 128 EVs, "
                "one fabric link (plane 2, nic0's leaf to spine 6) fails mid-transfer",
    topology=dict(planes=4, leaves=2, spines=32, hosts_per_leaf=1),
    fabric=_FABRIC,
    nics=[0, 1],
    configs=["examples/two_nics.toml", "examples/nic1.toml"],
    evs=128,
    transfers=[{"src": 0, "dst": 1}],
    size=128 * 1024,
    test_size=32 * 1024,
    # The spray walks the profile in order (entry i: spine i // 4, plane i % 4, EV i), one
    # packet per entry per round: entry 26 (plane 2, spine 6) carries packet 26, which
    # leaves after the failure at 0.15 x ideal for every size from 32 KiB to 128 KiB.
    failures=[{"action": "fail_link", "target": ["p2.leaf0", "p2.spine6"], "at": 0.15}],
    slow_links=[],
    background=[],
    linger_ns=2000.0,
    time_limit=4.0,
    ack_every=4,
    ack_timeout=64,
    expect="bytes_delivered == bytes_posted, no mismatch; the EV on the failed link goes "
           "ASSUMED_BAD (>= 1 EV event), its PSNs are retransmitted elsewhere; completion "
           "within 1.5 x ideal; no data leaves on the failed path after the failover",
)


def _variant(base: dict, **changes) -> dict:
    out = copy.deepcopy(base)
    out.update(copy.deepcopy(changes))
    return out


SCENARIOS: dict[str, dict] = {
    "default": _DEFAULT,
    "clean": _variant(
        _DEFAULT, failures=[],
        description="the default scenario without the failure (two NICs, four planes, 128 EVs)",
        expect="exact delivery at about the ideal time, no retransmission"),
    "plane-down": _variant(
        _DEFAULT, failures=[{"action": "fail_plane", "target": 2, "at": 0.3}],
        description="the default pair; every switch of plane 2 fails mid-transfer",
        expect="exact delivery; every EV of plane 2 that loses a packet goes ASSUMED_BAD "
               "(never below ev_min_active) and plane 2 carries no data after the last one"),
    "link-flap": _variant(
        _DEFAULT,
        # entry 20 (plane 0, spine 5) carries packet 20 while the link is down (0.1 x ideal
        # on); it comes back at 1.2 x ideal, after the transfer, and the probes find it.
        failures=[{"action": "fail_link", "target": ["p0.leaf1", "p0.spine5"], "at": 0.1},
                  {"action": "recover_link", "target": ["p0.leaf1", "p0.spine5"], "at": 1.2}],
        linger_ns=100_000.0,
        description="the default pair; the link from plane 0's spine 5 to nic1's leaf fails, "
                    "then comes back",
        expect="exact delivery; the EV of that link goes ASSUMED_BAD, then GOOD again after "
               "a probe reply once the link is back"),
    "trim-incast": dict(
        description="3:1 incast: three NICs (two on leaf 0, one on the receiver's leaf 1) "
                    "write into one NIC; host links at 2 Gb/s per plane (8 Gb/s per NIC), "
                    "small switch queues that trim on overflow",
        topology=dict(planes=4, leaves=2, spines=4, hosts_per_leaf=3),
        # 8 KiB of queue at 2 Gb/s is 33 us: the ACK timeout (1.024 us x 2^6 = 66 us) stays
        # above queueing delay + RTT, so only trims (NACKs) can trigger retransmissions.
        fabric=dict(_FABRIC, host_rate_gbps=2.0, queue_bytes=8 * 1024,
                    ecn_threshold_bytes=6 * 1024, trim_queue_bytes=8 * 1024),
        # RTO, probe interval and NSCC window from the fabric (fabric_defaults): a packet can
        # queue ~46 us (8 KiB at each hop, 33 us of it at the 2 Gb/s last hop) before it is
        # trimmed, so the ACK timeout is 1.024 us x 2^7 = 131 us, and each sender starts at
        # one BDP of its own rate instead of 256 KiB.
        nics=[0, 1, 3, 4],
        configs=None,
        evs=32,
        transfers=[{"src": 0, "dst": 3}, {"src": 1, "dst": 3}, {"src": 2, "dst": 3}],
        size=64 * 1024,
        test_size=16 * 1024,
        failures=[], slow_links=[], background=[],
        linger_ns=2000.0, time_limit=4.0, ack_every=4, ack_timeout=64,
        expect="trimmed > 0; every trimmed PSN is NACKed at once and retransmitted; no ACK "
               "timeout (no EV goes ASSUMED_BAD); exact delivery of all three transfers"),
    "incast-8": dict(
        description="8:1 incast: eight NICs (five on leaf 0, three on the receiver's leaf 1) "
                    "write into one NIC; host links at 2 Gb/s per plane (8 Gb/s per NIC), "
                    "small switch queues that trim on overflow",
        topology=dict(planes=4, leaves=2, spines=4, hosts_per_leaf=5),
        fabric=dict(_FABRIC, host_rate_gbps=2.0, queue_bytes=8 * 1024,
                    ecn_threshold_bytes=6 * 1024, trim_queue_bytes=8 * 1024),
        nics=[0, 1, 2, 3, 4, 5, 6, 7, 9],
        configs=None,
        evs=16,             # one per path; the receiver's 8 reverse profiles fill 128 entries
        transfers=[{"src": k, "dst": 8} for k in range(8)],
        size=64 * 1024,
        test_size=16 * 1024,
        failures=[], slow_links=[], background=[],
        linger_ns=2000.0, time_limit=4.0, ack_every=4, ack_timeout=64,
        expect="exact delivery of all eight transfers; no ACK timeout, no EV ASSUMED_BAD; "
               "completion within 1.5 x ideal; per-sender completion times within 1.3x of "
               "each other"),
    "ecn": dict(
        description="one congested spine: plane 0's spine 0 link from the sender's leaf runs at "
                    "5 Gb/s and carries 9.5 Gb/s of background traffic (host1 -> host3) for "
                    "the first half of the transfer",
        topology=dict(planes=4, leaves=2, spines=4, hosts_per_leaf=2),
        fabric=dict(_FABRIC, queue_bytes=1024 * 1024, ecn_threshold_bytes=4 * 1024),
        nics=[0, 2],
        configs=None,
        # One EV per path (16), so every EV is used once per 16 packets and ECN steering
        # (an echoed EV avoided for ecn_hold cycles) shows in its share.
        evs=16,
        cc=dict(max_cwnd_bytes=65536, min_cwnd_bytes=4096, base_rtt_ns=10000,
                target_delay_ns=5000),
        transfers=[{"src": 0, "dst": 1}],
        size=256 * 1024,
        test_size=128 * 1024,
        failures=[],
        # The queue grows by about 4.5 Gb/s while the background runs (ECN marks after
        # ~8 us) and peaks at about half the transfer time of delay: the ACK timeout
        # (1.024 us x 2^8 = 262 us) stays above it, so the path is congested, not lost.
        # Spray decisions run up to 16 packets ahead of the wire, so the steering shows from
        # the second round of the profile on: sizes of 128 KiB and more.
        slow_links=[{"link": ["p0.leaf0", "p0.spine0"], "rate_gbps": 5.0}],
        background=[{"src_host": 1, "dst_host": 3, "plane": 0, "spine": 0, "rate_gbps": 9.5,
                     "payload_bytes": 1024, "from": 0.0, "to": 0.5}],
        reliability=dict(ack_timeout_exp=8, ecn_hold=10_000),
        linger_ns=2000.0, time_limit=4.0, ack_every=4, ack_timeout=64,
        expect="ECN marks on the congested spine's EVs; the congestion window shrinks and those "
               "EVs carry a smaller share of the data than the others; exact delivery"),
}


def scenario_names() -> list[str]:
    """Names of the built-in scenarios."""
    return list(SCENARIOS)


def get_scenario(name: str, size: int | None = None, test: bool = False) -> dict:
    """A copy of built-in scenario ``name`` with ``size`` set (bytes per transfer).

    ``size`` None takes the scenario's ``size`` (``test_size`` when ``test``).
    Raises ``ValueError`` for an unknown name or a size out of 1..4 MiB.
    """
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r} (built in: {', '.join(SCENARIOS)})")
    sc = copy.deepcopy(SCENARIOS[name])
    sc["name"] = name
    if size is None:
        size = sc["test_size"] if test else sc["size"]
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"size must be 1..{MAX_SIZE} bytes, not {size}")
    sc["size"] = int(size)
    return sc


# --------------------------------------------------------------------------
# Configuration generation (one TOML text per NIC, checked by loads_config)
# --------------------------------------------------------------------------
MAX_SIZE = 1 << 22             #: largest transfer of a scenario, bytes
REGION_VA = 0x7F00_0000_0000   #: VA of every generated NIC's receive memory region
REGION_BASE = 0x0010_0000      #: its host address
SRC_BASE = 0x0100_0000         #: host address of the source buffers (outside the region)


def _qpn(transfer: int, side: int) -> int:
    return 0x100 + 2 * transfer + side


def make_configs(topo: ClosTopology, nics: list[int], transfers: list[dict], evs: int,
                 region_bytes: int, pmtu: int = 1024, cc: dict | None = None,
                 ev_format: str = "SRV6", ev_min_active: int | str | None = None,
                 seed: int = 0) -> list[str]:
    """TOML configuration text of every NIC of a generated scenario.

    NIC *k* sits on host ``nics[k]``.  Each transfer gets a QP at its source
    (QPN ``0x100 + 2i``) and one at its destination (``0x101 + 2i``), each with
    an explicit SRV6 EV profile of ``evs`` EVs to the other
    (:meth:`ClosTopology.ev_profile`, so the EV numbering is the topology's).
    Each NIC has one memory region of ``region_bytes`` at VA :data:`REGION_VA`,
    host address :data:`REGION_BASE`, rkey ``0x1000 + k``.  ``cc`` (NSCC
    parameters, ``[cc_profiles]`` keys) makes every QP use that CC profile.

    Load-balancing modes (:mod:`mrcnic.sim.scenario_file`): ``ev_min_active`` ``"all"``
    sets each profile's floor to its size (no EV is ever marked ASSUMED_BAD), an int sets
    it, ``None`` keeps ``evs // 8``.  ``ev_format`` ``"STEV"`` or ``"UDP"`` (``ecmp`` mode)
    gives each QP one EV -- ``random.Random(seed * 65536 + QPN)``, 32 bits (STEV) or 14
    (UDP) -- on every plane (``evs // planes`` copies each: the profile has as many path
    entries as an SRV6 one, so every mode runs on the same NIC build), and the peer's
    address as destination (``peer_ipv6``): the fabric's ECMP hash picks the path.  Raises ``ValueError`` for another format.
    """
    import random

    if ev_format not in ("SRV6", "STEV", "UDP"):
        raise ValueError(f"ev_format must be SRV6, STEV or UDP, not {ev_format!r}")
    out = []
    for k, host in enumerate(nics):
        lines = [
            "[nic]", f'name = "nic{k}"', f'mac = "{topo.host_mac(host)}"',
            f'ipv6 = "{topo.host_ip(host)}"', f"usid = {topo.host_usid(host):#06x}",
            f"locator_block = {topo.block:#010x}", f"pmtu = {pmtu}", "",
        ]
        leaf = topo.leaf_of(host)
        for p in range(topo.planes):
            lines += ["[[ports]]", f"id = {p}",
                      f'next_hop_mac = "02:00:00:01:{p:02x}:{leaf:02x}"', ""]
        lines += ["[[memory_regions]]", f"va = {REGION_VA:#x}", f"length = {region_bytes}",
                  f"rkey = {0x1000 + k:#x}", f"base = {REGION_BASE:#x}", "",
                  f"[ev_format_profiles.{ev_format.lower()}]", f'mode = "{ev_format}"', ""]
        qps = []
        for i, t in enumerate(transfers):
            for side, (me, peer) in enumerate(((t["src"], t["dst"]), (t["dst"], t["src"]))):
                if me != k:
                    continue
                prof = f"t{i}_to_nic{peer}"
                if ev_format == "SRV6":
                    entries = topo.ev_profile(host, nics[peer], evs)
                    rows = [f"  {{ ev = {e.ev:#x}, port = {e.port}, usids = "
                            f"[{', '.join(f'{u:#06x}' for u in e.usids)}] }},"
                            for e in entries]
                else:
                    ev = random.Random(seed * 65536 + _qpn(i, side)).getrandbits(
                        32 if ev_format == "STEV" else 14)
                    cp = max(1, evs // topo.planes)    # as many path entries as SRV6
                    rows = [f"  {{ ev = {ev:#x}, port = {p}"
                            + (f", copies = {cp}" if cp > 1 else "") + " },"
                            for p in range(topo.planes)]
                floor = (max(1, evs // 8) if ev_min_active is None else
                         len(rows) if ev_min_active == "all" else int(ev_min_active))
                lines += [f"[ev_profiles.{prof}]", f'format = "{ev_format.lower()}"',
                          'type = "explicit"', f"ev_min_active = {floor}", "entries = ["]
                lines += rows
                lines += ["]", ""]
                qps.append((_qpn(i, side), _qpn(i, 1 - side), prof,
                            None if ev_format == "SRV6" else topo.host_ip(nics[peer])))
        if cc:
            lines += ["[cc_profiles.scenario]"] + [f"{k} = {v!r}" for k, v in cc.items()] + [""]
        for qpn, peer_qpn, prof, peer_ip in qps:
            lines += ["[[qps]]", f"qpn = {qpn:#x}", f"peer_qpn = {peer_qpn:#x}",
                      f'ev_profile = "{prof}"'] + (['cc_profile = "scenario"'] if cc else []) \
                + ([f'peer_ipv6 = "{peer_ip}"'] if peer_ip else []) + [""]
        out.append("\n".join(lines))
    return out


# --------------------------------------------------------------------------
# Transport defaults derived from the fabric (generated configurations)
# --------------------------------------------------------------------------
def _path_hops(fab: dict) -> list[tuple[float, int]]:
    """(rate Gb/s, data-queue bytes) of the switch egress ports a data packet crosses:
    leaf -> spine, spine -> leaf, leaf -> host."""
    host_rate = fab.get("host_rate_gbps") or fab["rate_gbps"]
    q = fab.get("queue_bytes") or 0
    return [(fab["rate_gbps"], q), (fab["rate_gbps"], q), (host_rate, q)]


def fabric_defaults(sc: dict, base_rtt_ns: float, sender_gbps: float, pmtu: int) -> dict:
    """Sender-reliability and NSCC settings that suit a scenario's fabric (its ``reliability``
    and ``cc`` keys win over them).

    The rule (docs/scenarios.md, "Transport defaults"): congestion must not look like failure.
    With trimming, a packet is either delivered, trimmed (the receiver NACKs it at once) or
    lost to a failure; a delivered packet waits at most ``queue_bytes * 8 / rate`` at each of
    the three switch egress ports on its path (leaf up, spine down, leaf to host), so

    * ``qdelay_max_ns`` = the sum of those three, ``rtt_max_ns`` = ``base_rtt_ns`` + it;
    * ACK timeout ``1.024 us x 2^t`` with the smallest ``t`` for which it is at least
      ``2 x rtt_max_ns`` (the 2x covers ACK coalescing, the receiver's NACK queue and the
      sender's own queue of pending packets ahead of a retransmission);
    * probe interval = the ACK timeout (in 8 ns cycles): a path is probed about once per RTO;
    * NSCC ``base_rtt_ns`` = the fabric's base RTT (rounded up to 100 ns),
      ``target_delay_ns`` = half of it (at least 1 us), ``initial_cwnd_bytes`` = one BDP
      of the sender's full rate over that RTT, ``max_cwnd_bytes`` = two BDPs,
      ``min_cwnd_bytes`` = one packet (``pmtu``): a sender starts at the rate the fabric
      can carry instead of flooding the last hop with a 256 KiB window, and many senders
      into one receiver can each fall to less than 4 KiB of window.

    Parameters: ``sc`` a resolved scenario (``fabric`` in Gb/s, ns, bytes); ``base_rtt_ns``
    and ``sender_gbps`` as :func:`mrcnic.sim.cosim.ideal_times` computes them; ``pmtu`` bytes.
    Returns ``{"reliability": {...}, "cc": {...}, "rtt_max_ns": float}``; the fabric with no
    queue limit (``queue_bytes`` None) counts one default 256 KiB queue per hop.
    """
    import math

    fab = dict(sc["fabric"])
    if fab.get("queue_bytes") is None:
        fab["queue_bytes"] = 256 * 1024
    qdelay = sum(q * 8 / rate for rate, q in _path_hops(fab))
    rtt_max = base_rtt_ns + qdelay
    exp = max(0, math.ceil(math.log2(2 * rtt_max / 1024)))
    rto_ns = 1024 * (1 << exp)
    base = int(math.ceil(base_rtt_ns / 100) * 100)
    bdp = int(math.ceil(sender_gbps * base / 8 / 1024)) * 1024
    return {
        "reliability": dict(ack_timeout_exp=exp, probe_interval=max(2000, rto_ns // 8)),
        "cc": dict(base_rtt_ns=base, target_delay_ns=max(1000, base // 2),
                   initial_cwnd_bytes=max(pmtu, bdp), max_cwnd_bytes=max(2 * pmtu, 2 * bdp),
                   min_cwnd_bytes=pmtu),
        "rtt_max_ns": rtt_max,
    }
