"""Wire format: Scapy layers round-trip, uSID carriers, ICRC against Scapy's RoCE oracle."""

import random

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether

from mrcnic import wire

BLOCK = 0xFC000000
MACS = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="fc00:1::1")


def scapy_icrc(frame: bytes) -> bytes:
    pkt = Ether(frame)
    pkt[BTH].icrc = None
    return bytes(pkt)[-4:]


def test_usid_carrier_roundtrip():
    da = wire.usid_carrier(BLOCK, [0x100, 0x200, 0x300, 0x101])
    assert da == "fc00:0:100:200:300:101::"
    assert wire.usid_decode(da) == (BLOCK, [0x100, 0x200, 0x300, 0x101])
    assert wire.usid_shift(da) == "fc00:0:200:300:101::"
    assert wire.usid_arrival(BLOCK, [0x100, 0x101]) == "fc00:0:101::"


@pytest.mark.parametrize("bad", [[], [1] * 7, [0], [0x10000]])
def test_usid_carrier_rejects(bad):
    with pytest.raises(ValueError):
        wire.usid_carrier(BLOCK, bad)


@pytest.mark.parametrize("length", [1, 2, 3, 4, 63, 1024])
@pytest.mark.parametrize("imm", [None, 0xDEADBEEF])
def test_data_frame_icrc_matches_scapy(length, imm):
    path = wire.PathEncap(ev=0xABCDE123, port=2, block=BLOCK, usids=[0x100, 0x205, 0x300, 0x101])
    payload = random.Random(length).randbytes(length)
    frame = wire.build_data_frame(**MACS, path=path, qpn=9, psn=0xFFFFFF, va=0x1000 + length,
                                  rkey=0x77, payload=payload, imm=imm)
    pkt = Ether(frame)
    assert pkt[IPv6].fl == 0xDE123 and pkt["UDP"].sport == 0xCABC
    assert pkt["RETH"].dmalen == length and pkt[BTH].padcount == (-length) & 3
    arrived = wire.arrival_form(frame, BLOCK)
    assert Ether(arrived)[IPv6].dst == "fc00:0:101::"
    assert scapy_icrc(arrived) == frame[-4:]
    assert wire.check_icrc(frame, BLOCK) and wire.check_icrc(arrived)
    assert not wire.check_icrc(frame[:-1] + bytes([frame[-1] ^ 1]), BLOCK)


@pytest.mark.parametrize("n_usids", [7, 12, 13, 24])
def test_srh_frames(n_usids):
    usids = list(range(0x10, 0x10 + n_usids))
    path = wire.PathEncap(ev=5, port=0, block=BLOCK, usids=usids)
    frame = wire.build_data_frame(**MACS, path=path, qpn=1, psn=0, va=0, rkey=1, payload=b"abcd")
    pkt = Ether(frame)
    srh = pkt[IPv6ExtHdrSegmentRouting]
    n = (n_usids + 5) // 6
    assert len(srh.addresses) == n and srh.segleft == n - 1 and srh.lastentry == n - 1
    assert srh.nh == 17 and pkt[IPv6].nh == 43 and pkt[IPv6].dst == srh.addresses[-1]
    assert len(frame) == wire.header_length(n) + 4 + 4
    arrived = Ether(wire.arrival_form(frame, BLOCK))
    assert arrived[IPv6ExtHdrSegmentRouting].segleft == 0
    assert wire.usid_decode(arrived[IPv6].dst)[1] == [usids[-1]]
    assert wire.check_icrc(frame, BLOCK)


def test_ack_and_probe_dissect():
    path = wire.PathEncap(ev=0x42, port=1, block=BLOCK, usids=[0x101, 0x200, 0x100, 0x1])
    ack = Ether(wire.build_ack_frame(**MACS, path=path, qpn=3, psn=99, ev=0x42, base_psn=100,
                                     bitmap=0b1011, flags=wire.SACK_ECN_ECHO))
    assert ack[BTH].opcode == wire.OP_ACK and ack["MRCSack"].bitmap == 0b1011
    assert ack["MRCSack"].flags == wire.SACK_ECN_ECHO and ack["MRCSack"].ev == 0x42
    probe = wire.build_probe_frame(**MACS, path=path, qpn=3, probe_id=7, ts=1234)
    p = Ether(probe)
    assert p["MRCProbe"].ev == 0x42 and p["MRCProbe"].port == 1 and p["MRCProbe"].ts == 1234
    assert wire.check_icrc(probe, BLOCK)


def test_stev_and_udp_modes():
    for mode, fl, sport in [("STEV", 0x23456, 0xC001), ("UDP", 0, 0xC000 | 0x3456 & 0x3FFF)]:
        path = wire.PathEncap(ev=0x00123456, mode=mode, dst_ip="fc00:99::2")
        pkt = Ether(wire.build_data_frame(**MACS, path=path, qpn=1, psn=0, va=0, rkey=1,
                                          payload=b"x"))
        assert pkt[IPv6].dst == "fc00:99::2" and pkt[IPv6].fl == fl and pkt["UDP"].sport == sport
        assert scapy_icrc(bytes(pkt)) == bytes(pkt)[-4:]


@pytest.mark.parametrize("junk", [b"", b"\x00" * 13, bytes(Ether() / (b"x" * 60)),
                                  bytes(Ether() / IPv6(nh=59) / (b"y" * 20))])
def test_helpers_refuse_malformed_frames(junk):
    """Malformed frames are invalid (False) or a ValueError, never an IndexError."""
    assert not wire.check_icrc(junk, BLOCK) and not wire.check_icrc(junk)
    checks = [lambda: wire.icrc_view(junk), lambda: wire.trim_frame(junk)]
    if IPv6 not in Ether(junk) if len(junk) >= 14 else True:
        checks.append(lambda: wire.arrival_form(junk, BLOCK))
    for fn in checks:
        with pytest.raises(ValueError):
            fn()
