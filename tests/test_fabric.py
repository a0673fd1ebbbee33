"""Fabric model: Clos topology, uSID switching (RFC 9800 / RFC 8754), queues, ECN,
trimming, failures, timing and pcap taps.  Scapy (mrcnic.wire) is the oracle."""

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import rdpcap

from mrcnic import wire
from mrcnic.sim.fabric import Fabric, Port, UsidSwitch, _Link, wire_bytes
from mrcnic.sim.topology import ClosTopology

BLOCK = 0xFC000000


def data_frame(topo, src, dst, usids, *, ev=0, port=0, payload=64, psn=0, ecn=wire.ECN_ECT0):
    path = wire.PathEncap(ev=ev, port=port, block=topo.block, usids=list(usids))
    return wire.build_data_frame(src_mac=topo.host_mac(src), dst_mac=topo.host_mac(dst),
                                 src_ip=topo.host_ip(src), path=path, qpn=0x11, psn=psn,
                                 va=0x1000 + psn * 4096, rkey=0x77,
                                 payload=bytes((psn + i) & 0xFF for i in range(payload)),
                                 ecn=ecn)


def with_hlim(frame, hlim=64):
    b = bytearray(frame)
    b[14 + 7] = hlim
    return bytes(b)


def expected_arrival(frame, block=BLOCK):
    """What the receiver must see: exactly wire.arrival_form (the hop limit aside)."""
    return wire.arrival_form(frame, block)


def spaced_send(fab, frames, gap_ns=10_000.0, start=0.0):
    """Send (host, plane, frame) tuples far enough apart that nothing queues."""
    t = start
    for host, plane, frame in frames:
        fab.send(host, plane, frame, t)
        t += gap_ns
    return t


# --------------------------------------------------------------------------
# topology
# --------------------------------------------------------------------------
@pytest.mark.parametrize("planes,leaves,spines,hpl", [(4, 2, 8, 1), (8, 4, 16, 3), (1, 1, 1, 2)])
def test_topology_sizes_and_unique_usids(planes, leaves, spines, hpl):
    topo = ClosTopology(planes=planes, leaves=leaves, spines=spines, hosts_per_leaf=hpl)
    hosts = leaves * hpl
    kinds = [d["kind"] for d in topo.nodes.values()]
    assert topo.hosts == hosts
    assert kinds.count("host") == hosts
    assert kinds.count("leaf") == planes * leaves and kinds.count("spine") == planes * spines
    assert len(topo.links) == planes * (hosts + leaves * spines)
    assert len({frozenset(link[:2]) for link in topo.links}) == len(topo.links)
    usids = [d["usid"] for d in topo.nodes.values()]
    assert len(set(usids)) == len(usids)
    assert all(0 < u < 1 << 16 for u in usids)
    for name, d in topo.nodes.items():
        assert topo.node_of_usid(d["usid"]) == name
    # every host has exactly one link per plane, to its leaf in that plane
    for h in range(hosts):
        mine = [(b, p) for a, b, p in topo.links if a == topo.host_name(h)]
        assert sorted(p for _, p in mine) == list(range(planes))
        assert all(b == topo.leaf_name(p, h // hpl) for b, p in mine)


@pytest.mark.parametrize("kw", [dict(planes=0), dict(planes=17), dict(leaves=0), dict(spines=257),
                                dict(hosts_per_leaf=0), dict(leaves=256, hosts_per_leaf=16),
                                dict(locator_block=1 << 32)])
def test_topology_rejects(kw):
    with pytest.raises(ValueError):
        ClosTopology(**kw)


def test_paths_and_ev_profile():
    topo = ClosTopology()
    paths = topo.paths(0, 1)
    assert len(paths) == 4 * 8
    assert len({tuple(p.usids) for p in paths}) == 32
    for p in paths:
        assert p.usids == [topo.leaf_usid(p.plane, 0), topo.spine_usid(p.plane, p.spine),
                           topo.leaf_usid(p.plane, 1), topo.host_usid(1)]
    prof = topo.ev_profile(0, 1, evs=128)
    assert len(prof) == 128 and len({e.ev for e in prof}) == 128
    for i, e in enumerate(prof):
        plane, spine, copy = i % 4, (i // 4) % 8, i // 32
        assert e.port == plane and e.ev == copy << 8 | plane << 5 | spine
        assert e.usids == paths[plane * 8 + spine].usids
    assert [e.port for e in prof[:8]] == [0, 1, 2, 3, 0, 1, 2, 3]
    with pytest.raises(ValueError):
        topo.ev_profile(0, 1, evs=257)
    with pytest.raises(ValueError):
        topo.paths(1, 1)
    # same-leaf hosts: via every spine (hairpin), plus the direct path on request
    topo2 = ClosTopology(planes=2, leaves=1, spines=2, hosts_per_leaf=2)
    p2 = topo2.paths(0, 1, direct=True)
    assert [(p.plane, p.spine) for p in p2] == [(0, None), (0, 0), (0, 1), (1, None), (1, 0), (1, 1)]
    assert p2[0].usids == [topo2.leaf_usid(0, 0), topo2.host_usid(1)]
    assert p2[1].usids == [0x1000, 0x2000, 0x1000, 0x0101]


# --------------------------------------------------------------------------
# end-to-end delivery along every EV of a profile
# --------------------------------------------------------------------------
@pytest.mark.parametrize("src,dst", [(0, 1), (1, 0)])
def test_every_ev_path_delivers_arrival_form(src, dst):
    topo = ClosTopology()
    fab = Fabric(topo)
    prof = topo.ev_profile(src, dst, evs=128)
    sent = [data_frame(topo, src, dst, e.usids, ev=e.ev, port=e.port, psn=i)
            for i, e in enumerate(prof)]
    spaced_send(fab, [(src, e.port, f) for e, f in zip(prof, sent)])
    got = fab.drain()
    assert len(got) == 128
    assert fab.counters()["drops"] == {}
    for e, frame, d in zip(prof, sent, got):
        assert (d.host, d.plane) == (dst, e.port)
        pkt = Ether(d.frame_bytes)
        assert pkt[IPv6].dst == wire.usid_arrival(BLOCK, e.usids)
        assert pkt[IPv6].hlim == 64 - 3
        assert with_hlim(d.frame_bytes) == expected_arrival(frame)
        assert wire.check_icrc(d.frame_bytes)
    # every spine of every plane carried exactly its 4 EVs' frames
    for p in range(4):
        for s in range(8):
            up = fab.port(topo.leaf_name(p, topo.leaf_of(src)), topo.spine_name(p, s))
            assert up.stats.frames == 4
    assert fab.per_plane_bytes() == [sum(len(f) for e, f in zip(prof, sent) if e.port == p)
                                     for p in range(4)]


def test_same_leaf_hairpin_and_direct_paths():
    topo = ClosTopology(planes=2, leaves=2, spines=2, hosts_per_leaf=2)
    fab = Fabric(topo)
    paths = topo.paths(0, 1, direct=True) + topo.paths(0, 3)
    sent = [data_frame(topo, 0, 1 if i < 6 else 3, p.usids, port=p.plane, psn=i)
            for i, p in enumerate(paths)]
    spaced_send(fab, [(0, p.plane, f) for p, f in zip(paths, sent)])
    got = fab.drain()
    assert [(d.host, d.plane) for d in got] == [(1 if i < 6 else 3, p.plane)
                                                for i, p in enumerate(paths)]
    for p, f, d in zip(paths, sent, got):
        assert Ether(d.frame_bytes)[IPv6].hlim == 64 - (len(p.usids) - 1)
        assert with_hlim(d.frame_bytes) == expected_arrival(f) and wire.check_icrc(d.frame_bytes)


# --------------------------------------------------------------------------
# SRH: multi-carrier routes
# --------------------------------------------------------------------------
@pytest.mark.parametrize("n_switches", [6, 7, 12, 13, 17])
def test_srh_long_route_through_fabric(n_switches):
    """A synthetic route bouncing leaf/spine/leaf/... in plane 2, 2..3 carriers + SRH."""
    topo = ClosTopology()
    fab = Fabric(topo, pcap="all")
    usids, leaf, spine = [topo.leaf_usid(2, 0)], 0, 0
    while len(usids) < n_switches or leaf != 1:       # L0 S L1 S L0 ... ending at L1
        leaf, spine = 1 - leaf, (spine + 3) % 8
        usids += [topo.spine_usid(2, spine), topo.leaf_usid(2, leaf)]
    usids.append(topo.host_usid(1))
    assert len(usids) > 6
    frame = data_frame(topo, 0, 1, usids, port=2, payload=200)
    assert Ether(frame).haslayer(IPv6ExtHdrSegmentRouting)
    fab.send(0, 2, frame, 0)
    (d,) = fab.drain()
    assert (d.host, d.plane) == (1, 2)
    pkt = Ether(d.frame_bytes)
    assert pkt[IPv6ExtHdrSegmentRouting].segleft == 0
    assert pkt[IPv6].dst == wire.usid_arrival(BLOCK, usids)
    assert pkt[IPv6].hlim == 64 - (len(usids) - 1)
    assert with_hlim(d.frame_bytes) == expected_arrival(frame)
    assert wire.check_icrc(d.frame_bytes)
    # every hop's DA is the previous one shifted (or the next SRH carrier)
    hops = [Ether(f) for _, _, f in sorted(fab.taps, key=lambda r: r[0])]
    carriers = wire.path_carriers(BLOCK, usids)
    assert len(hops) == len(usids)          # host uplink + one per switch
    for a, b in zip(hops, hops[1:]):
        shifted = wire.usid_shift(a[IPv6].dst)
        if wire.usid_decode(shifted)[1]:
            assert b[IPv6].dst == shifted
        else:
            sl = b[IPv6ExtHdrSegmentRouting].segleft
            assert a[IPv6ExtHdrSegmentRouting].segleft == sl + 1
            assert b[IPv6].dst == carriers[len(carriers) - 1 - sl]


def _switch_frame(topo, usids, hlim=64):
    frame = data_frame(topo, 0, 1, usids, port=0)
    return with_hlim(frame, hlim)


def test_switch_srh_processing_directly():
    topo = ClosTopology()
    sw = UsidSwitch("s", 0x2000, BLOCK, {0x1001: "to_leaf1", 0x1000: "to_leaf0"})
    # 7 uSIDs: carrier 0 = [x, x, x, x, x, 0x2000], carrier 1 = [0x1001]
    usids = [0x1000, 0x2000, 0x1001, 0x2001, 0x1000, 0x2000, 0x1001]
    frame = _switch_frame(topo, usids)
    carriers = wire.path_carriers(BLOCK, usids)
    # advance the frame as the first five switches would have (plain shifts)
    b = bytearray(frame)
    da = Ether(frame)[IPv6].dst
    for _ in range(5):
        da = wire.usid_shift(da)
    pkt = Ether(bytes(b))
    pkt[IPv6].dst = da
    frame5 = bytes(pkt)
    egress, out = sw.forward(frame5)
    assert egress == "to_leaf1"
    o = Ether(out)
    assert o[IPv6ExtHdrSegmentRouting].segleft == 0 and o[IPv6].dst == carriers[1]
    assert o[IPv6].hlim == 63
    assert bytes(o[UDP]) == bytes(Ether(frame5)[UDP])
    # plain shift (no carrier change) from the first carrier position of a spine
    pkt[IPv6].dst = wire.usid_shift(Ether(frame)[IPv6].dst)      # active = 0x2000
    egress, out = sw.forward(bytes(pkt))
    assert egress == "to_leaf1"
    assert Ether(out)[IPv6].dst == wire.usid_shift(pkt[IPv6].dst)
    assert Ether(out)[IPv6ExtHdrSegmentRouting].segleft == 1
    assert sw.forwarded == 2 and not sw.drops


def test_switch_drop_reasons():
    topo = ClosTopology()
    sw = UsidSwitch("s", 0x2000, BLOCK, {0x1001: "p"})
    ok = _switch_frame(topo, [0x2000, 0x1001, 0x0101])
    assert sw.forward(ok)[0] == "p"
    cases = {
        "no_match": _switch_frame(topo, [0x2001, 0x1001, 0x0101]),
        "no_route": _switch_frame(topo, [0x2000, 0x1002, 0x0101]),
        "hop_limit": _switch_frame(topo, [0x2000, 0x1001, 0x0101], hlim=1),
        "end_of_path": _switch_frame(topo, [0x2000]),
        "not_ipv6": ok[:12] + b"\x08\x00" + ok[14:],
        "malformed": ok[:40],
    }
    wrong_block = bytearray(ok)
    wrong_block[38] ^= 0x01
    for reason, frame in cases.items():
        assert sw.forward(frame) == (None, reason)
    assert sw.forward(bytes(wrong_block)) == (None, "no_match")
    assert sw.drops == {r: 1 for r in cases} | {"no_match": 2}


def test_wrong_plane_and_bad_route_are_counted_drops():
    topo = ClosTopology()
    fab = Fabric(topo)
    good = topo.paths(0, 1)[0].usids                         # a plane-0 path
    fab.send(0, 1, data_frame(topo, 0, 1, good), 0)          # sent on plane 1
    bad = [topo.leaf_usid(0, 0), topo.leaf_usid(0, 1), topo.host_usid(1)]   # leaf -> leaf
    fab.send(0, 0, data_frame(topo, 0, 1, bad), 1000)
    assert fab.drain() == []
    c = fab.counters()
    assert c["switch_drops"] == {"p1.leaf0": {"no_match": 1}, "p0.leaf0": {"no_route": 1}}


# --------------------------------------------------------------------------
# queues: ECN and trimming
# --------------------------------------------------------------------------
def _port(**kw):
    link = _Link("a", "b", 0)
    port = Port("a", "b", link, 100, 0, **kw)
    link.ports = [port]
    return port


def test_ecn_marking_above_threshold():
    topo = ClosTopology()
    usids = topo.paths(0, 1)[0].usids
    frames = [data_frame(topo, 0, 1, usids, psn=i, payload=1000) for i in range(8)]
    n = len(frames[0])
    port = _port(queue_bytes=100 * n, ecn_threshold_bytes=2 * n)
    for f in frames:
        assert port.enqueue(f)
    notect = data_frame(topo, 0, 1, usids, psn=9, payload=1000, ecn=wire.ECN_NOT_ECT)
    port.enqueue(notect)
    out = [port.dequeue() for _ in range(9)]
    ecn = [Ether(f)[IPv6].tc & 3 for f in out]
    # bytes waiting ahead of frame i = i * n; marked when that exceeds 2n
    assert ecn == [wire.ECN_ECT0] * 3 + [wire.ECN_CE] * 5 + [wire.ECN_NOT_ECT]
    assert port.stats.ecn_marked == 5
    for f, o in zip(frames + [notect], out):
        assert len(o) == len(f) and wire.check_icrc(o, BLOCK)
        assert Ether(o)[IPv6].tc >> 2 == Ether(f)[IPv6].tc >> 2    # DSCP untouched


def test_ecn_and_trim_in_congested_fabric():
    """Host uplinks 4x faster than the fabric: a burst on one path queues at the leaf."""
    topo = ClosTopology()
    fab = Fabric(topo, rate_gbps=100, host_rate_gbps=400, queue_bytes=8 * 1100,
                 ecn_threshold_bytes=3 * 1100, trim_queue_bytes=250)
    usids = topo.paths(0, 1)[5].usids
    sent = [data_frame(topo, 0, 1, usids, psn=i, payload=1000) for i in range(40)]
    for f in sent:
        fab.send(0, 0, f, 0)
    got = fab.drain()
    up = fab.port("p0.leaf0", "p0.spine5")
    full = [d for d in got if len(d.frame_bytes) == len(sent[0])]
    trimmed = [d for d in got if len(d.frame_bytes) < len(sent[0])]
    assert up.stats.ecn_marked > 0 and up.stats.trimmed > 0 and up.stats.drops["overflow"] > 0
    assert len(full) + len(trimmed) + up.stats.drops["overflow"] == 40
    assert len(trimmed) == up.stats.trimmed
    assert sum(Ether(d.frame_bytes)[IPv6].tc & 3 == wire.ECN_CE for d in full) == up.stats.ecn_marked
    by_psn = {Ether(f)[BTH].psn: f for f in sent}
    for d in full:
        assert wire.check_icrc(d.frame_bytes)
    for d in trimmed:
        pkt = Ether(d.frame_bytes)
        orig = by_psn[pkt[BTH].psn]
        assert with_hlim(d.frame_bytes) == expected_arrival(wire.trim_frame(orig, 46))
        assert pkt[IPv6].tc >> 2 == 46 and pkt["RETH"].dmalen == 1000
    # the priority queue lets trimmed headers overtake full frames queued before them
    psns = [Ether(d.frame_bytes)[BTH].psn for d in got]
    t0 = got.index(trimmed[0])
    assert any(psn < psns[t0] for psn in psns[t0 + 1:])
    c = fab.counters()
    assert c["trimmed"] == up.stats.trimmed and c["drops"]["overflow"] == up.stats.drops["overflow"]


def test_trim_on_overflow_port_level():
    topo = ClosTopology()
    usids = topo.paths(0, 1)[0].usids
    frames = [data_frame(topo, 0, 1, usids, psn=i, payload=1500) for i in range(6)]
    n = len(frames[0])
    tn = len(wire.trim_frame(frames[0], 40))
    port = _port(queue_bytes=3 * n, ecn_threshold_bytes=None, trim=True, trim_dscp=40,
                 trim_queue_bytes=2 * tn)
    results = [port.enqueue(f) for f in frames]
    assert results == [True] * 5 + [False]           # 3 fit, 2 trimmed, 1 dropped
    assert port.stats.trimmed == 2 and port.stats.drops == {"overflow": 1}
    out = [port.dequeue() for _ in range(5)]
    assert port.dequeue() is None and port.depth == 0
    assert out[:2] == [wire.trim_frame(frames[3], 40), wire.trim_frame(frames[4], 40)]
    assert out[2:] == frames[:3]
    for t in out[:2]:
        pkt = Ether(t)
        assert pkt.haslayer(BTH) and pkt.haslayer("RETH") and not pkt.haslayer(Raw)
        assert pkt[IPv6].tc >> 2 == 40 and pkt[IPv6].plen == len(t) - 54
        assert pkt[UDP].len == len(t) - 54 and pkt[BTH].icrc == 0
    # without trimming, overflow is a plain drop
    plain = _port(queue_bytes=n, trim=False)
    assert [plain.enqueue(f) for f in frames[:2]] == [True, False]
    assert plain.stats.drops == {"overflow": 1}


# --------------------------------------------------------------------------
# failures
# --------------------------------------------------------------------------
def _profile_round(fab, topo, t0, evs=32):
    prof = topo.ev_profile(0, 1, evs=evs)
    frames = [(0, e.port, data_frame(topo, 0, 1, e.usids, ev=e.ev, port=e.port, psn=i))
              for i, e in enumerate(prof)]
    end = spaced_send(fab, frames, gap_ns=5000.0, start=t0)
    return prof, fab.advance(end + 50_000)


def _ev_of(topo, delivery):
    return Ether(delivery.frame_bytes)[IPv6].fl


def test_link_failure_drops_that_path_only_and_recovery_restores():
    topo = ClosTopology()
    fab = Fabric(topo)
    fab.fail_link(1_000_000, "p1.leaf0", "p1.spine3")
    fab.recover_link(2_000_000, "p1.spine3", "p1.leaf0")
    prof, before = _profile_round(fab, topo, 0)
    assert len(before) == 32
    prof, during = _profile_round(fab, topo, 1_000_000)
    lost = {e.ev for e in prof} - {_ev_of(topo, d) for d in during}
    assert lost == {topo.ev_of(1, 3)}
    assert fab.port("p1.leaf0", "p1.spine3").stats.drops == {"link_down": 1}
    prof, after = _profile_round(fab, topo, 2_000_000)
    assert len(after) == 32
    assert [e["action"] for e in fab.events_log] == ["fail_link", "recover_link"]
    assert fab.events_log[0]["time_ns"] == 1_000_000


def test_in_flight_and_queued_frames_are_lost_on_failure():
    topo = ClosTopology()
    fab = Fabric(topo, latency_ns=1000)
    usids = topo.paths(0, 1)[0].usids
    # frame 0 is propagating on leaf0->spine0 when the link fails; frames 1.. queue behind it
    fab.send(0, 0, data_frame(topo, 0, 1, usids, payload=1000), 0)
    t_fail = 100 + 2 * fab.uplink(0, 0).serialisation_ns(1094) + 10
    fab.fail_link(t_fail, "p0.leaf0", "p0.spine0")
    got = fab.drain()
    assert got == [] and fab.lost_in_flight == 1
    assert fab.port("p0.leaf0", "p0.spine0").stats.drops == {"link_down": 1}


def test_switch_and_plane_failure():
    topo = ClosTopology()
    fab = Fabric(topo)
    fab.fail_switch(0, "p2.spine6")
    fab.fail_plane(0, 3)
    fab.recover_plane(1_000_000, 3)
    fab.recover_switch(1_000_000, "p2.spine6")
    prof, during = _profile_round(fab, topo, 10)
    delivered = {_ev_of(topo, d) for d in during}
    lost = {e.ev for e in prof} - delivered
    assert lost == {topo.ev_of(3, s) for s in range(8)} | {topo.ev_of(2, 6)}
    assert all(d.plane != 3 for d in during)
    assert fab.uplink(0, 3).stats.drops == {"link_down": 8}
    assert fab.port("p2.leaf0", "p2.spine6").stats.drops == {"link_down": 1}
    prof, after = _profile_round(fab, topo, 1_000_000)
    assert len(after) == 32
    assert fab.per_plane_bytes()[3] == sum(len(d.frame_bytes) for d in after if d.plane == 3)
    assert {e["action"] for e in fab.events_log} == {"fail_switch", "fail_plane",
                                                     "recover_plane", "recover_switch"}


def test_link_stays_down_while_any_failure_covers_it():
    topo = ClosTopology()
    fab = Fabric(topo)
    fab.fail_link(0, "host0", "p0.leaf0")
    fab.fail_plane(0, 0)
    fab.recover_plane(10, 0)
    usids = topo.paths(0, 1)[0].usids
    fab.send(0, 0, data_frame(topo, 0, 1, usids), 20)
    assert fab.drain() == [] and fab.uplink(0, 0).stats.drops == {"link_down": 1}


def test_api_rejects_bad_calls():
    topo = ClosTopology()
    fab = Fabric(topo)
    fab.advance(100)
    frame = data_frame(topo, 0, 1, topo.paths(0, 1)[0].usids)
    with pytest.raises(ValueError):
        fab.send(0, 0, frame, 50)
    with pytest.raises(ValueError):
        fab.send(5, 0, frame, 200)
    with pytest.raises(ValueError):
        fab.send(0, 4, frame, 200)
    with pytest.raises(ValueError):
        fab.fail_link(50, "p0.leaf0", "p0.spine0")
    with pytest.raises(ValueError):
        fab.fail_link(500, "p0.leaf0", "p1.spine0")
    with pytest.raises(ValueError):
        fab.fail_switch(500, "host0")
    with pytest.raises(ValueError):
        fab.fail_plane(500, 4)
    with pytest.raises(ValueError):
        Fabric(topo, pcap="some")


# --------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------
def test_wire_bytes():
    assert wire_bytes(10) == 84 and wire_bytes(60) == 84 and wire_bytes(61) == 85
    assert wire_bytes(1500) == 1524


@pytest.mark.parametrize("payload", [0, 1000, 4096])
def test_single_frame_latency_exact(payload):
    topo = ClosTopology()
    fab = Fabric(topo, rate_gbps=400, latency_ns=500, host_rate_gbps=100, host_latency_ns=50,
                 switch_latency_ns=300)
    frame = data_frame(topo, 0, 1, topo.paths(0, 1)[9].usids, port=1, payload=payload)
    wb = wire_bytes(len(frame))
    t0 = 1234.5
    fab.send(0, 1, frame, t0)
    host_ser, fab_ser = wb * 8 / 100, wb * 8 / 400
    expect = t0 + 2 * (host_ser + 50) + 2 * (fab_ser + 500) + 3 * 300
    assert fab.advance(expect - 0.001) == []
    assert fab.next_event_ns() == pytest.approx(expect)
    (d,) = fab.advance(expect)
    assert d.time_ns == pytest.approx(expect, abs=1e-9)
    assert fab.next_event_ns() is None
    # a second frame right behind the first on the same path arrives one host slot later
    fab.send(0, 1, frame, 10_000)
    fab.send(0, 1, frame, 10_000)
    a, b = fab.drain()
    assert b.time_ns - a.time_ns == pytest.approx(host_ser, abs=1e-9)
    assert a.time_ns == pytest.approx(10_000 + expect - t0, abs=1e-9)


def test_throughput_series():
    topo = ClosTopology()
    fab = Fabric(topo)
    prof, got = _profile_round(fab, topo, 0)
    series = fab.throughput(20_000)
    assert [sum(p) for p in series["planes"]] == fab.per_plane_bytes()
    assert sum(fab.per_plane_bytes()) == sum(len(d.frame_bytes) for d in got)
    assert series["t_ns"][1] == 20_000


# --------------------------------------------------------------------------
# pcap taps and determinism
# --------------------------------------------------------------------------
def _mixed_run(pcap):
    topo = ClosTopology()
    fab = Fabric(topo, host_rate_gbps=400, queue_bytes=4000, ecn_threshold_bytes=1000,
                 pcap=pcap)
    prof = topo.ev_profile(0, 1, evs=16)
    for i, e in enumerate(prof):
        fab.send(0, e.port, data_frame(topo, 0, 1, e.usids, ev=e.ev, port=e.port, psn=i,
                                       payload=1500), 0)
    usids = topo.paths(0, 1)[0].usids
    for i in range(6):                      # a burst on one path: ECN and trimming
        fab.send(0, 0, data_frame(topo, 0, 1, usids, psn=100 + i, payload=1500), 1000)
    long = [0x1000, 0x2000, 0x1001, 0x2001, 0x1000, 0x2002, 0x1001, 0x0101]
    fab.send(0, 0, data_frame(topo, 0, 1, long, psn=200), 2000)      # SRH
    fab.send(1, 2, data_frame(topo, 1, 0, topo.paths(1, 0)[17].usids, port=2, psn=300), 2000)
    got = fab.drain()
    c = fab.counters()
    assert not c["switch_drops"] and "link_down" not in c["drops"]
    assert len(got) == 24 - c["drops"].get("overflow", 0)
    return fab


def test_pcap_written_and_reread(tmp_path):
    fab = _mixed_run("all")
    c = fab.counters()
    assert c["trimmed"] > 0 and c["ecn_marked"] > 0
    path = tmp_path / "fabric.pcap"
    n = fab.write_pcap(path)
    assert n == len(fab.taps) == sum(p.stats.frames for p in fab.ports.values())
    pkts = rdpcap(str(path))
    assert len(pkts) == n
    records = sorted(fab.taps, key=lambda r: r[0])
    for pkt, (t, _, frame) in zip(pkts, records):
        assert bytes(pkt) == frame
        assert int(round(float(pkt.time) * 1e9)) == int(round(t))
        assert pkt.haslayer(IPv6) and pkt.haslayer(UDP) and pkt.haslayer(BTH)
        assert pkt.haslayer("RETH")
        assert pkt[UDP].dport == wire.ROCEV2_PORT
        if pkt[IPv6].tc >> 2 == 46:                     # trimmed: headers and zero trailer only
            assert pkt[BTH].icrc == 0 and not pkt.haslayer(Raw)
        else:
            assert wire.check_icrc(frame, BLOCK)
    assert [float(p.time) for p in pkts] == sorted(float(p.time) for p in pkts)
    # host-link taps only: NIC transmit and receive sides, and a per-port pcap
    hosts = _mixed_run("hosts")
    assert {name for _, name, _ in hosts.taps} <= {n for n in hosts.ports if "host" in n}
    assert hosts.write_pcap(tmp_path / "rx.pcap", port="p0.leaf1->host1") == \
        len(rdpcap(str(tmp_path / "rx.pcap"))) > 0


def test_deterministic():
    a, b = _mixed_run("all"), _mixed_run("all")
    assert a.taps == b.taps and a.delivered == b.delivered and a.counters() == b.counters()


def test_pcapng_one_interface_per_tap_with_comments(tmp_path):
    """The capture is pcapng: each frame once per tap it crossed, on an interface named as the
    port (``src->dst``); trimmed frames and frames lost to a failure carry a comment."""
    fab = _mixed_run("all")
    path = tmp_path / "fabric.pcapng"
    n = fab.write_pcap(path)
    pkts = rdpcap(str(path))
    assert len(pkts) == n == len(fab.taps)
    assert path.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"              # a pcapng section
    records = sorted(range(len(fab.taps)), key=lambda i: fab.taps[i][0])
    per_tap = {}
    for pkt, i in zip(pkts, records):
        t, name, frame = fab.taps[i]
        assert pkt.sniffed_on == name and "->" in name
        per_tap.setdefault(name, []).append(frame)
        comments = [c.decode() for c in (pkt.comments or [])]
        if pkt[IPv6].tc >> 2 == 46:
            assert any(c.startswith("trimmed") for c in comments), comments
    for name, frames in per_tap.items():            # a frame never appears twice on one tap
        assert len(frames) == len(set(frames)), name
    # a link failing with a frame in flight on it: the tap's record says so
    topo = ClosTopology()
    fab = Fabric(topo, pcap="all")
    e = topo.ev_profile(0, 1, evs=4)[0]
    fab.send(0, e.port, data_frame(topo, 0, 1, e.usids, ev=e.ev, port=e.port), 0)
    uplink = fab.uplink(0, e.port)
    fab.fail_link(10.0, uplink.src, uplink.dst)
    fab.drain()
    fab.write_pcap(tmp_path / "fail.pcapng")
    lost = [p for p in rdpcap(str(tmp_path / "fail.pcapng")) if p.comments]
    assert lost and b"lost in flight" in lost[0].comments[0]
    assert lost[0].sniffed_on == uplink.name


def test_shift_carrier_matches_the_reference_functions():
    """The fabric's integer uSID shift equals mrcnic.wire's usid_shift / usid_decode."""
    import ipaddress
    import random

    from mrcnic import wire
    from mrcnic.sim.fabric import _shift_carrier

    rng = random.Random(5)
    values = [rng.getrandbits(128) for _ in range(500)]
    values += [int(ipaddress.IPv6Address(wire.usid_carrier(0xFC000000, u)))
               for u in ([0xE001], [0x1000, 0xE001], [0x1000, 0x2000, 0x1001, 0xE001])]
    values += [v & ~(0xFFFF << 64) for v in values[:50]]        # a 0x0000 second uSID
    for v in values:
        new_da, active = _shift_carrier.__wrapped__(v)
        ref = wire.usid_shift(v)
        assert new_da == ipaddress.IPv6Address(ref).packed
        usids = wire.usid_decode(ref)[1]
        assert active == (usids[0] if usids else 0)
