"""The Wireshark dissector (wireshark/mrcnic.lua) on a fabric capture, run by Debian's tshark.

The capture is the fabric model's own (``Fabric.write_pcap``: pcapng, one interface per link
direction): data frames sprayed over EVs with a burst that overflows a queue (trimmed
frames), and the receiver's answers built with ``mrcnic.wire``: SACKs echoing the EV, a trim
NACK, an EV probe and its reply.  tshark must show the SACK extension's fields, the trim
NACK, the probe and the probe reply by name, and the interface names and trim comments of the
pcapng.  Skipped, with the reason, only where tshark is not installed (CI installs it:
.ci/run).
"""

import json
import shutil
import subprocess

import pytest

from mrcnic import wire
from mrcnic.resources import dissector_path
from mrcnic.sim.fabric import Fabric
from mrcnic.sim.topology import ClosTopology

TSHARK = shutil.which("tshark")
pytestmark = pytest.mark.skipif(
    TSHARK is None, reason="tshark is not installed (apt-get install -y tshark; .ci/run does)")


def _capture(path):
    topo = ClosTopology()
    fab = Fabric(topo, host_rate_gbps=400, queue_bytes=4000, ecn_threshold_bytes=1000, pcap="all")
    prof = topo.ev_profile(0, 1, evs=8)
    paths = {e.ev: wire.PathEncap(ev=e.ev, port=e.port, block=topo.block, usids=list(e.usids))
             for e in prof}
    for i, e in enumerate(prof):
        fab.send(0, e.port, wire.build_data_frame(
            src_mac=topo.host_mac(0), dst_mac=topo.host_mac(1), src_ip=topo.host_ip(0),
            path=paths[e.ev], qpn=0x11, psn=i, va=0x1000 + 1024 * i, rkey=0x77,
            payload=bytes(1024)), 0)
    burst = prof[0]
    for i in range(6):                      # one path, faster than it drains: trims
        fab.send(0, burst.port, wire.build_data_frame(
            src_mac=topo.host_mac(0), dst_mac=topo.host_mac(1), src_ip=topo.host_ip(0),
            path=paths[burst.ev], qpn=0x11, psn=100 + i, va=0x9000, rkey=0x77,
            payload=bytes(1500)), 1000)
    back = topo.ev_profile(1, 0, evs=8)
    rpath = wire.PathEncap(ev=back[1].ev, port=back[1].port, block=topo.block,
                           usids=list(back[1].usids))
    common = dict(src_mac=topo.host_mac(1), dst_mac=topo.host_mac(0), src_ip=topo.host_ip(1),
                  path=rpath, qpn=0x22)
    t = 20_000
    fab.send(1, rpath.port, wire.build_ack_frame(**common, psn=7, ev=prof[3].ev, base_psn=8,
                                                 bitmap=0b1011, flags=0x01), t)
    fab.send(1, rpath.port, wire.build_ack_frame(**common, psn=7, ev=burst.ev, base_psn=103,
                                                 flags=0x02, syndrome=0x60), t + 2000)
    fab.send(0, burst.port, wire.build_probe_frame(
        src_mac=topo.host_mac(0), dst_mac=topo.host_mac(1), src_ip=topo.host_ip(0),
        path=paths[burst.ev], qpn=0x11, probe_id=0x42, ts=123456), t + 4000)
    fab.send(1, rpath.port, wire.build_ack_frame(**common, psn=0, ev=burst.ev, base_psn=0,
                                                 flags=0x04, ts=123456), t + 6000)
    fab.drain()
    assert fab.counters()["trimmed"] > 0
    fab.write_pcap(path)
    return fab


def _tshark(path, *fields, filt=None):
    cmd = [TSHARK, "-n", "-X", f"lua_script:{dissector_path()}", "-r", str(path),
           "-T", "fields", "-E", "separator=|"] + sum((["-e", f] for f in fields), [])
    if filt:
        cmd += ["-Y", filt]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Lua: Error" not in res.stderr and "error" not in res.stderr.lower(), res.stderr
    return [line.split("|") for line in res.stdout.splitlines() if line]


def test_dissector_names_mrc_headers(tmp_path):
    cap = tmp_path / "fabric.pcapng"
    _capture(cap)
    rows = _tshark(cap, "frame.interface_name", "mrcnic.kind", "_ws.col.Info",
                   "mrcnic.sack.ev", "mrcnic.sack.base_psn", "mrcnic.sack.bitmap",
                   "mrcnic.sack.flags.trim_nack", "mrcnic.probe.ev", "mrcnic.ev",
                   "mrcnic.trimmed", "frame.comment")
    kinds = {r[1] for r in rows}
    assert {"data", "trimmed data", "SACK ECN-echo", "trim NACK", "probe", "probe reply"} <= kinds
    assert all("->" in r[0] for r in rows)                       # one interface per tap
    sack = next(r for r in rows if r[1].startswith("SACK"))
    assert sack[4] == "8" and int(sack[5], 16) == 0b1011 and int(sack[3], 16) != 0
    nack = next(r for r in rows if r[1] == "trim NACK")
    assert nack[4] == "103" and nack[6] == "1" and "trim NACK psn=103" in nack[2]
    probe = next(r for r in rows if r[1] == "probe")
    assert int(probe[7], 16) == int(probe[8], 16)                # probed EV = the frame's EV
    trimmed = [r for r in rows if r[1] == "trimmed data"]
    assert trimmed and all(r[9] == "1" and r[10].startswith("trimmed") for r in trimmed)
    # no frame falls back to the InfiniBand dissector's "Unknown OpCode"
    assert not _tshark(cap, "frame.number", filt="infiniband")
    # display filters on the new fields work
    assert len(_tshark(cap, "frame.number", filt='mrcnic.kind == "trim NACK"')) >= 1
