"""mrcnic.wire_format against the Scapy layers (mrcnic.wire, Scapy) and the frame builders."""

import ipaddress
import random

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether

from mrcnic import wire
from mrcnic import wire_format as wf

BLOCK = 0xFC000000
MACS = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="fc00:1::1")
SCAPY = {"eth": Ether, "ipv6": IPv6, "srh": IPv6ExtHdrSegmentRouting, "udp": UDP, "bth": BTH,
         "reth": wire.RETH, "immdt": wire.ImmDt, "aeth": AETH, "sack": wire.MRCSack,
         "probe": wire.MRCProbe}
_SRH_FLAG_BITS = (("unused1", 7, 1), ("protected", 6, 1), ("oam", 5, 1), ("alert", 4, 1),
                  ("hmac", 3, 1), ("unused2", 0, 3))     # Scapy's split of the SRH Flags byte


def _to_int(value) -> int:
    """A Scapy field value (int, MAC or IPv6 address string, FlagValue) as an integer."""
    if isinstance(value, str):
        if ":" in value and len(value) == 17 and value.count(":") == 5:
            return int(value.replace(":", ""), 16)
        return int(ipaddress.IPv6Address(value))
    return int(value)


def _scapy_value(layer, name: str) -> int:
    """The value Scapy holds for the wire_format field ``name`` of ``layer``."""
    if isinstance(layer, IPv6ExtHdrSegmentRouting):
        if name == "flags":
            return sum(getattr(layer, n) << shift for n, shift, _ in _SRH_FLAG_BITS)
        if name.startswith("segment"):
            return _to_int(layer.addresses[int(name[len("segment"):])])
    return _to_int(layer.getfieldval(name))


def _distinct_values(header: wf.Header, seed: int) -> dict:
    """Distinct non-zero values for every field (1-bit fields: 1)."""
    rng, out, seen = random.Random(seed), {}, set()
    for f in header.fields:
        while True:
            v = rng.getrandbits(f.width) | 1
            if f.width == 1 or v not in seen:
                break
        seen.add(v)
        out[f.name] = v
    return out


def _scapy_kwargs(header: wf.Header, values: dict) -> dict:
    """``values`` (ints) as the keyword arguments of the Scapy layer."""
    kw = {}
    for name, v in values.items():
        if header.name == "eth" and name in ("dst", "src"):
            kw[name] = ":".join(f"{b:02x}" for b in v.to_bytes(6, "big"))
        elif header.name == "ipv6" and name in ("src", "dst"):
            kw[name] = str(ipaddress.IPv6Address(v))
        elif header.name == "srh" and name == "flags":
            kw.update({n: (v >> shift) & ((1 << w) - 1) for n, shift, w in _SRH_FLAG_BITS})
        elif header.name == "srh" and name.startswith("segment"):
            kw.setdefault("addresses", []).append(str(ipaddress.IPv6Address(v)))
        else:
            kw[name] = v
    return kw


STANDALONE = [wf.ETHERNET, wf.IPV6, wf.srh(1), wf.srh(2), wf.srh(4), wf.UDP, wf.RETH, wf.IMMDT,
              wf.AETH, wf.MRCSACK, wf.MRCPROBE]


@pytest.mark.parametrize("header", STANDALONE, ids=lambda h: f"{h.name}{h.length}")
def test_header_fields_match_scapy(header):
    """Every field read at its described offset/width is the value Scapy put there."""
    values = _distinct_values(header, header.length)
    layer = SCAPY[header.name](**_scapy_kwargs(header, values))
    raw = bytes(layer)
    assert len(raw) == header.length
    for f in header.fields:
        assert f.read(raw) == values[f.name] == _scapy_value(layer, f.name), f.name
    # and write() puts it back where Scapy does
    buf = bytearray(len(raw))
    for f in header.fields:
        f.write(buf, values[f.name])
    assert bytes(buf) == raw


def test_bth_fields_match_scapy():
    """The BTH, whose Scapy layer carries the frame's trailing ICRC as a field."""
    values = _distinct_values(wf.BTH, 12)
    layer = UDP(sport=1, dport=wire.ROCEV2_PORT) / BTH(**values, icrc=0x11223344)
    raw = bytes(layer[BTH])
    assert len(raw) == wf.BTH.length + wf.ICRC.length
    for f in wf.BTH.fields:
        assert f.read(raw) == values[f.name] == _scapy_value(layer[BTH], f.name), f.name
    # Scapy's icrc field is the wire bytes read big-endian; the ICRC value is little-endian
    icrc = wf.ICRC["icrc"].read(raw, wf.BTH.length)
    assert icrc == int.from_bytes((0x11223344).to_bytes(4, "big"), "little")


def test_lengths_agree_with_wire():
    for n in (1, 2, 3, 4):
        for imm in (False, True):
            assert wf.layout("data", n, imm).header_bytes == wire.header_length(n, imm)
    assert wf.layout("ack").frame_bytes() == 102
    assert wf.layout("probe").frame_bytes() == 90
    assert wf.layout("data").frame_bytes(1024) == 1118
    assert wf.layout("data", 4, True).frame_bytes(4096) == 4266
    assert wf.srh(3).length == 8 + 16 * 3
    assert wf.ICRC_FIRST_BYTE == 6
    with pytest.raises(ValueError):
        wf.layout("ack", imm=True)
    with pytest.raises(ValueError):
        wf.layout("nack")


def _path(n_usids: int, mode: str = "SRV6") -> wire.PathEncap:
    usids = list(range(0x100, 0x100 + n_usids))
    return wire.PathEncap(ev=0xABCDE123, port=2, mode=mode, block=BLOCK, usids=usids,
                          dst_ip="fc00:2::7")


def _frames():
    """(layout, frame) for every kind, with and without an SRH of 2..4 carriers."""
    out = []
    for n_usids in (4, 7, 13, 24):
        path = _path(n_usids)
        n = len(path.carriers())
        for payload_len in (1, 6, 64):
            payload = random.Random(payload_len).randbytes(payload_len)
            for imm in (None, 0xDEADBEEF):
                frame = wire.build_data_frame(**MACS, path=path, qpn=0x1234, psn=0xFEDCBA,
                                              va=0x1122334455667788, rkey=0x99AABBCC,
                                              payload=payload, imm=imm, last=True, ecn=wire.ECN_CE)
                out.append((wf.layout("data", n, imm is not None), frame, payload_len))
        ack = wire.build_ack_frame(**MACS, path=path, qpn=0x56, psn=0xABCDEF, ev=0x01020304,
                                   base_psn=0x0A0B0C, bitmap=0x8000000000000001 | 0x5A5A << 16,
                                   flags=wire.SACK_ECN_ECHO | wire.SACK_PROBE_REPLY, ts=0x77665544,
                                   syndrome=wire.AETH_NAK_PSN, msn=0x123456)
        out.append((wf.layout("ack", n), ack, 0))
        probe = wire.build_probe_frame(**MACS, path=path, qpn=0x78, probe_id=0xBEEF, ts=0x31415926)
        out.append((wf.layout("probe", n), probe, 0))
    return out


FRAMES = _frames()


@pytest.mark.parametrize("lay,frame,payload", FRAMES,
                         ids=[f"{lay.kind}-n{lay.n_carriers}-imm{int(lay.imm)}-{i}"
                              for i, (lay, _, _) in enumerate(FRAMES)])
def test_frame_layout_matches_scapy(lay, frame, payload):
    """Header offsets, every field's value (and fixed value) in real frames, ICRC placement."""
    assert len(frame) == lay.frame_bytes(payload)
    pkt = Ether(frame)
    for header, off in lay.headers:
        if header.name == "icrc":
            continue
        layer = pkt[SCAPY[header.name]]
        # Scapy's BTH carries the ICRC: the layers before it end with it, those after do not
        trailer = 0 if header.name in ("eth", "ipv6", "srh", "udp", "bth") else wire.ICRC_LEN
        assert len(frame) - trailer - len(bytes(layer)) == off, header.name
        for f in header.fields:
            pos = lay.field(header.name, f.name)
            assert pos.read(frame) == _scapy_value(layer, f.name), (header.name, f.name)
            if f.value is not None:
                assert pos.read(frame) == f.value, (header.name, f.name)
    icrc = wf.ICRC["icrc"].read(frame, lay.icrc_offset(payload))
    assert icrc == wire.icrc(wire.arrival_form(frame, BLOCK))
    assert lay.icrc_offset(payload) == len(frame) - wire.ICRC_LEN
    assert wf.udp_offset(frame) == lay.offset("udp")


def _beats(frame: bytes, width: int) -> list[int]:
    """``tdata`` of each beat of ``frame`` (byte lane 0 = bits 7:0 = first wire byte)."""
    nb = width // 8
    return [int.from_bytes(frame[i:i + nb], "little") for i in range(0, len(frame), nb)]


@pytest.mark.parametrize("width", [32, 64, 128])
def test_beat_pieces_rebuild_fields(width):
    """Every field rebuilt from its pieces in the beats of real frames equals its value."""
    for lay, frame, payload in FRAMES[::3]:
        tdata = _beats(frame, width)
        assert len(tdata) == wf.beats(len(frame), width)
        keep = wf.last_keep(len(frame), width)
        assert keep.bit_length() == len(frame) - (len(tdata) - 1) * (width // 8)
        positions = lay.fields()[:-1] + [wf.FieldPos("icrc", wf.ICRC["icrc"],
                                                      8 * lay.icrc_offset(payload))]
        for pos in positions:
            value = 0
            for p in pos.pieces(width):
                assert 0 <= p.lo < p.hi <= width and p.lo // 8 == p.lane == (p.hi - 1) // 8
                value |= ((tdata[p.beat] >> p.lo) & ((1 << (p.hi - p.lo)) - 1)) << p.value_lo
            assert value == pos.read(frame), (pos.header, pos.field.name)
            if pos.field.aligned:
                spans = pos.spans(width)
                lanes = [tdata[s.beat].to_bytes(width // 8, "little") for s in spans]
                got = b"".join(b[s.lane:s.lane + s.nlanes] for b, s in zip(lanes, spans))
                assert got == frame[pos.byte:pos.byte + pos.nbytes]
                assert [s.first for s in spans] == [sum(x.nlanes for x in spans[:i])
                                                    for i in range(len(spans))]


def test_pieces_straddling_a_beat():
    """IPv6 flow label (bytes 15..17) straddles beats 1/2 at 64 bits; fields of known place."""
    fl = wf.layout().field("ipv6", "fl")
    assert fl.pieces(64) == [wf.Piece(1, 7, 56, 60, 16), wf.Piece(2, 0, 0, 8, 8),
                             wf.Piece(2, 1, 8, 16, 0)]
    src = wf.layout().field("ipv6", "src")
    assert src.spans(64) == [wf.Span(2, 6, 2, 0), wf.Span(3, 0, 8, 2), wf.Span(4, 0, 6, 10)]
    assert src.spans(128) == [wf.Span(1, 6, 10, 0), wf.Span(2, 0, 6, 10)]
    assert wf.layout().field("bth", "padcount").pieces(32) == [wf.Piece(15, 3, 28, 30, 0)]
    assert wf.beat_lane(97, 64) == (12, 1) and wf.beat_lane(97, 32) == (24, 1)
    with pytest.raises(ValueError):
        fl.spans(64)


def test_udp_offset():
    path = _path(13)
    frame = wire.build_probe_frame(**MACS, path=path, qpn=1)
    assert wf.udp_offset(frame) == wf.layout("probe", 3).offset("udp") == 54 + 8 + 48
    assert wf.udp_offset(frame[:40]) is None
    assert wf.udp_offset(b"\x00" * 12 + b"\x08\x00" + frame[14:]) is None     # not IPv6
    bad = bytearray(frame)
    wf.layout("probe", 3).field("srh", "nh").field.write(bad, 6, 54)         # SRH -> TCP
    assert wf.udp_offset(bytes(bad)) is None
    assert wf.bth_offset(frame) == wf.layout("probe", 3).offset("bth")
    assert wf.bth_offset(bytes(bad)) is None
