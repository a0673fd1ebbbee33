"""The ECMP fabric of the model (``Fabric(routing="ecmp")``): STEV and UDP EV-mode frames
hashed over equal-cost uplinks, SRV6 frames still on their uSIDs, failed links withdrawn
after the detection delay, and the uSID switch's longest-prefix-match fallback."""

from collections import Counter

import pytest

from mrcnic import wire
from mrcnic.sim.fabric import Fabric, UsidSwitch
from mrcnic.sim.topology import ClosTopology


def _frame(topo, src, dst, ev, port, mode, psn=0):
    enc = wire.PathEncap(ev=ev, port=port, mode=mode, dst_ip=topo.host_ip(dst))
    return wire.build_data_frame(src_mac=topo.host_mac(src), dst_mac="02:00:00:01:00:00",
                                 src_ip=topo.host_ip(src), path=enc, qpn=0x100, psn=psn,
                                 va=0, rkey=1, payload=bytes(256))


def _send_spaced(fab, items, gap_ns=1000.0):
    for i, (host, plane, frame) in enumerate(items):
        fab.send(host, plane, frame, i * gap_ns)
    return fab.drain()


@pytest.mark.parametrize("mode", ["STEV", "UDP"])
def test_ev_modes_hash_over_spines(mode):
    topo = ClosTopology(planes=2, leaves=2, spines=4, hosts_per_leaf=1)
    fab = Fabric(topo, routing="ecmp", pcap=None)
    items = [(0, ev % 2, _frame(topo, 0, 1, ev, ev % 2, mode, psn=ev)) for ev in range(256)]
    got = _send_spaced(fab, items)
    assert len(got) == 256 and fab.counters()["drops"] == {}
    assert all(d.host == 1 for d in got)
    assert [wire.check_icrc(d.frame_bytes) for d in got] == [True] * 256
    # one EV always takes one spine; different EVs spread over all four of each plane
    for p in range(2):
        used = [fab.port(topo.leaf_name(p, 0), topo.spine_name(p, s)).stats.frames
                for s in range(4)]
        assert sum(used) == 128 and min(used) > 10, used
    again = Fabric(topo, routing="ecmp", pcap=None)
    _send_spaced(again, items[:1])
    first = [s for s in range(4)
             if again.port(topo.leaf_name(0, 0), topo.spine_name(0, s)).stats.frames]
    fab2 = Fabric(topo, routing="ecmp", pcap=None)
    _send_spaced(fab2, [items[0]] * 20)
    assert [s for s in range(4) if fab2.port(topo.leaf_name(0, 0),
                                             topo.spine_name(0, s)).stats.frames] == first


def test_same_leaf_goes_direct_and_srv6_still_follows_usids():
    topo = ClosTopology(planes=1, leaves=2, spines=2, hosts_per_leaf=2)
    fab = Fabric(topo, routing="ecmp", pcap=None)
    stev = _frame(topo, 0, 1, 7, 0, "STEV")
    path = topo.paths(0, 3)[1]          # plane 0, spine 1
    enc = wire.PathEncap(ev=1, port=0, mode="SRV6", block=topo.block, usids=path.usids)
    srv6 = wire.build_data_frame(src_mac=topo.host_mac(0), dst_mac="02:00:00:01:00:00",
                                 src_ip=topo.host_ip(0), path=enc, qpn=1, psn=0, va=0, rkey=1,
                                 payload=bytes(64))
    got = _send_spaced(fab, [(0, 0, stev), (0, 0, srv6)])
    assert [d.host for d in got] == [1, 3]
    assert fab.port("p0.leaf0", "p0.spine0").stats.frames == 0       # STEV: leaf -> host
    assert fab.port("p0.leaf0", "p0.spine1").stats.frames == 1       # SRV6: its uSID path
    assert fab.switches["p0.leaf0"].routed == 1


def test_failed_link_leaves_group_after_detection_delay():
    topo = ClosTopology(planes=1, leaves=2, spines=4, hosts_per_leaf=1)
    fab = Fabric(topo, routing="ecmp", ecmp_detect_ns=20_000, pcap=None)
    # find EVs hashed onto spine 2 at leaf 0
    probe = Fabric(topo, routing="ecmp", pcap=None)
    evs = []
    for ev in range(64):
        probe.send(0, 0, _frame(topo, 0, 1, ev, 0, "STEV"), probe.now)
        probe.drain()
        if probe.port("p0.leaf0", "p0.spine2").stats.frames > len(evs):
            evs.append(ev)
    assert evs
    ev = evs[0]
    fab.fail_link(1000, "p0.leaf0", "p0.spine2")
    # before the detection delay: the flow still hashes onto the dead link and is lost
    fab.send(0, 0, _frame(topo, 0, 1, ev, 0, "STEV"), 5000)
    assert fab.advance(10_000) == []
    assert fab.port("p0.leaf0", "p0.spine2").stats.drops["link_down"] == 1
    # after it: rehashed over the three remaining spines, delivered
    fab.send(0, 0, _frame(topo, 0, 1, ev, 0, "STEV", psn=1), 25_000)
    got = fab.drain()
    assert [d.host for d in got] == [1]
    assert [e["action"] for e in fab.events_log] == ["fail_link", "ecmp_withdraw"]
    assert fab.events_log[1]["time_ns"] == 21_000
    assert len(fab.ecmp_group("p0.leaf0", topo.host_usid(1))) == 3
    # the downstream direction: leaf 1 stops using spine 2 for leaf 0's hosts too
    assert fab.port("p0.leaf1", "p0.spine2") not in fab.ecmp_group("p0.leaf1", topo.host_usid(0))


def test_usid_switch_lpm_fallback_off_by_default():
    sw = UsidSwitch("s", 0x2000, 0xFC000000, {})
    topo = ClosTopology(planes=1, leaves=2, spines=1)
    frame = _frame(topo, 0, 1, 1, 0, "STEV")
    assert sw.forward(frame) == (None, "no_match")
    sw.fib = lambda switch, f, da: "out"
    egress, out = sw.forward(frame)
    assert egress == "out" and out[14 + 7] == frame[14 + 7] - 1


def test_default_fabric_unchanged():
    topo = ClosTopology(planes=1, leaves=2, spines=2)
    fab = Fabric(topo, pcap=None)
    assert fab.routing == "usid"
    assert all(sw.fib is None for sw in fab.switches.values())
    _send_spaced(fab, [(0, 0, _frame(topo, 0, 1, 1, 0, "STEV"))])
    assert fab.counters()["drops"] == {"no_match": 1}
