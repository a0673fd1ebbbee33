"""Receive pipeline end to end (RTL through Icarus): placement, SACK/ACK, validation, fuzz.

What the receive issue must show.  The sender is modelled by Scapy
(``mrcnic.wire``) with nic0's configuration; the DUT is nic1's receive path.
Frames are given in their arrival form, as the fabric delivers them.
"""

import random
from pathlib import Path

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from mrcnic import wire
from mrcnic.config import compile_tables, load_config
from mrcnic.rtl.rx_parser import DropReason
from mrcnic.sim.rx_tb import RxJob, run_rx

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NIC0, NIC1 = str(EXAMPLES / "two_nics.toml"), str(EXAMPLES / "nic1.toml")
TX = compile_tables(load_config(NIC0))
RX = compile_tables(load_config(NIC1))
MR = RX.memory_regions[0]
VA, RKEY, BASE = MR["va"], MR["rkey"], MR["base"]
BLOCK = TX.locator_block
QPN = RX.rx_qps[0]["qpn"]
MAC = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:10:00", src_ip="fd00::1")


def data_frames(data: bytes, pmtu=1024, start_psn=0, imm=None, offset=0):
    """(plane, arrival-form frame, psn) for an RDMA WRITE of ``data`` at VA + offset."""
    n = -(-len(data) // pmtu)
    out = []
    for i in range(n):
        enc = TX.path_encaps[i % len(TX.path_encaps)]
        last = i == n - 1
        frame = wire.build_data_frame(**MAC, path=enc, qpn=QPN, psn=(start_psn + i) & 0xFFFFFF,
                                      va=VA + offset + i * pmtu, rkey=RKEY,
                                      payload=data[i * pmtu:(i + 1) * pmtu], last=last,
                                      imm=imm if last else None)
        out.append((enc.port, wire.arrival_form(frame, BLOCK), (start_psn + i) & 0xFFFFFF))
    return out


def check_placed(result, data, offset=0):
    lo = BASE + offset
    assert set(result.writes) == set(range(lo, lo + len(data))), "bytes written outside the message"
    assert set(result.writes.values()) == {1}, "a byte was written more than once"
    base = result.counters["mem_base"]
    assert result.memory[lo - base:lo - base + len(data)] == data


def check_acks(result, evs):
    """Every ACK dissects, has a valid ICRC and echoes an EV the data came on."""
    assert result.acks
    for plane, frame in result.acks:
        pkt = Ether(frame)
        assert pkt[BTH].opcode == wire.OP_ACK and "MRCSack" in pkt
        assert wire.check_icrc(frame, BLOCK), "bad ICRC on an ACK"
        assert pkt["MRCSack"].ev in evs
    return [Ether(f) for _, f in result.acks]


@pytest.mark.parametrize("order,shared", [("in_order", False), ("permuted_dups", False),
                                          ("permuted_dups", True)])
def test_64k_write_lands_exactly_once(tmp_path, order, shared):
    data = random.Random(3).randbytes(65536)
    frames = data_frames(data)
    rng = random.Random(11)
    if order == "permuted_dups":
        rng.shuffle(frames)
        dups = rng.sample(frames, len(frames) // 10)
        for d in dups:
            frames.insert(rng.randrange(len(frames) + 1), d)
        # The last PSN to arrive is a missing one (not a duplicate of an earlier arrival).
        last_new = max(i for i, f in enumerate(frames) if frames.index(f) == i)
    else:
        last_new = len(frames) - 1
    result = run_rx(RxJob(NIC1, frames=[(p, f) for p, f, _ in frames], shared_parser=shared),
                    tmp_path)
    assert all(v == "accepted" for v in result.verdicts), result.verdicts
    check_placed(result, data)
    assert len(result.completions) == 1
    assert result.completions[0]["psn"] == 63
    assert result.cpl_counts[last_new] == 1 and result.cpl_counts[last_new - 1] == 0
    acks = check_acks(result, {e.ev for e in TX.path_encaps})
    # Cumulative PSN = ePSN - 1 (0xFFFFFF before PSN 0 arrived); it reaches the end.
    assert {a[BTH].psn for a in acks} <= set(range(64)) | {0xFFFFFF}
    assert any(a[BTH].psn == 63 for a in acks)
    final = [a for a in acks if a[BTH].psn == 63][-1]
    assert final["MRCSack"].base_psn == 64 and final["MRCSack"].bitmap == 0
    if order == "permuted_dups":
        assert result.counters["duplicates"] == len(frames) - 64


def test_write_imm_and_trim_nack(tmp_path):
    """A trimmed packet is never written and gets an immediate NACK; the retransmission lands."""
    data = random.Random(4).randbytes(3000)
    frames = data_frames(data, imm=0x5EED)
    plane, f1, psn1 = frames[1]
    trimmed = wire.trim_frame(f1, RX.trim_dscp)
    seq = [(frames[0][0], frames[0][1]), (plane, trimmed), (frames[2][0], frames[2][1]), (plane, f1)]
    result = run_rx(RxJob(NIC1, frames=seq), tmp_path)
    assert result.verdicts == ["accepted"] * 4
    check_placed(result, data)
    assert result.cpl_counts == [0, 0, 0, 1]
    cpl = result.completions[0]
    assert cpl["has_imm"] == 1 and cpl["imm"] == 0x5EED
    acks = check_acks(result, {e.ev for e in TX.path_encaps})
    nacks = [a for a in acks if a["MRCSack"].flags & wire.SACK_TRIM_NACK]
    assert len(nacks) == 1 and nacks[0]["MRCSack"].base_psn == psn1
    assert nacks[0]["AETH"].syndrome == wire.AETH_NAK_PSN
    assert nacks[0]["MRCSack"].ev == TX.path_encaps[1].ev


def _bad_frames():
    """(reason, frame) pairs: each frame breaks exactly one validation rule."""
    enc = TX.path_encaps[0]
    good = lambda **kw: wire.arrival_form(wire.build_data_frame(   # noqa: E731
        **MAC, path=enc, qpn=kw.pop("qpn", QPN), psn=kw.pop("psn", 0),
        va=kw.pop("va", VA), rkey=kw.pop("rkey", RKEY), payload=kw.pop("payload", b"z" * 64)),
        BLOCK)

    def patch(frame, offset, value: bytes, fix_icrc=True):
        b = bytearray(frame)
        b[offset:offset + len(value)] = value
        if fix_icrc:
            b[-4:] = wire.icrc_bytes(bytes(b))
        return bytes(b)

    f = good()
    udp = 14 + 40
    bth = udp + 8
    other = wire.PathEncap(ev=1, port=0, block=BLOCK, usids=[0x1000, 0x0777])
    wrong_da = wire.arrival_form(wire.build_data_frame(**MAC, path=other, qpn=QPN, psn=0, va=VA,
                                                       rkey=RKEY, payload=b"z" * 64), BLOCK)
    srh_path = wire.PathEncap(ev=2, port=0, block=BLOCK, usids=list(range(0x10, 0x17)) +
                              [RX.local_usid])
    srh_frame = wire.build_data_frame(**MAC, path=srh_path, qpn=QPN, psn=0, va=VA, rkey=RKEY,
                                      payload=b"z" * 64)            # segments left != 0
    return [
        ("ETHERTYPE", patch(f, 12, b"\x08\x00")),
        ("VERSION", patch(f, 14, bytes([0x40 | f[14] & 0x0F]))),
        ("IPV6_LENGTH", patch(f, 18, (len(f) - 54 + 8).to_bytes(2, "big"))),
        ("NEXT_HEADER", patch(f, 20, b"\x06", fix_icrc=False)),
        ("SRH", srh_frame),
        ("DA", wrong_da),
        ("UDP_PORT", patch(f, udp + 2, (4792).to_bytes(2, "big"))),
        ("UDP_LENGTH", patch(f, udp + 4, (len(f) - 54 - 2).to_bytes(2, "big"))),
        ("OPCODE", patch(f, bth, b"\x04")),
        ("BTH", patch(f, bth + 2, b"\x12\x34")),
        ("QPN", good(qpn=0x999)),
        ("RKEY", good(rkey=RKEY ^ 1)),
        ("RKEY", good(va=VA + MR["length"] - 10)),            # VA range leaves the region
        ("DMALEN", patch(f, bth + 12 + 12, (65).to_bytes(4, "big"))),
        ("ICRC", patch(f, 100, b"\x00", fix_icrc=False)),
        ("RUNT", f[:60]),
    ]


@pytest.mark.parametrize("shared", [False, True], ids=["parser_per_plane", "shared_parser"])
def test_each_validation_rule_drops_and_counts(tmp_path, shared):
    """Each rule drops and counts on the plane the frame came in on (also with one shared parser)."""
    bad = _bad_frames()
    data = random.Random(8).randbytes(64 * len(bad))
    goods = data_frames(data, pmtu=64)
    seq, expect, counts = [], [], []
    for k, ((reason, frame), (plane, g, _)) in enumerate(zip(bad, goods)):
        bad_plane = k % 2
        seq += [(bad_plane, frame), (plane, g)]
        expect += [f"dropped:{reason}", "accepted"]
        counts.append((bad_plane, reason))
    result = run_rx(RxJob(NIC1, frames=seq, shared_parser=shared), tmp_path)
    assert result.verdicts == expect
    check_placed(result, data)
    for p, per_plane in enumerate(result.plane_drops):
        for reason in DropReason:
            want = sum(1 for bp, r in counts if bp == p and r == reason.name)
            assert per_plane[reason.name] == want, (p, reason.name)


def _mutants(rng, base_frames, n):
    """``n`` damaged frames: Scapy fuzz of one layer, truncations, random bytes, bit flips."""
    from scapy.packet import fuzz
    out = []
    for k in range(n):
        frame = rng.choice(base_frames)
        kind = k % 4
        if kind == 0:
            # Every field of one layer replaced by Scapy's random values (fuzz() only
            # randomises unset fields, so fuzz a fresh layer and copy its fields over).
            pkt = Ether(frame)
            layer = pkt.getlayer(rng.choice([IPv6, "UDP", BTH, "RETH"]))
            fz = fuzz(type(layer)())
            for fld in type(layer).fields_desc:
                if fld.name != "icrc" and rng.random() < 0.5:
                    setattr(layer, fld.name, getattr(fz, fld.name))
            try:
                frame = bytes(pkt)
            except Exception:
                frame = rng.randbytes(rng.randrange(14, 200))
        elif kind == 1:
            frame = frame[:rng.randrange(1, len(frame))]
        elif kind == 2:
            frame = rng.randbytes(rng.randrange(1, 300))
        else:
            b = bytearray(frame)
            for _ in range(rng.randrange(1, 4)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
            frame = bytes(b)
        out.append(frame)
    return out


@pytest.mark.slow
def test_fuzz_10000_mutants_with_a_valid_transfer(tmp_path):
    """10,000 mutants interleaved with a valid 32 KiB write: only the write lands, no stall.

    Mutants are made from small valid frames of the same QP whose PSNs lie
    half the PSN space away, so a mutant that is still a valid frame (a flip
    in an ICRC-masked field) is accepted by the parser and never placed by the
    SACK tracker (out of window, a duplicate from far behind, or trimmed):
    every mutant is counted exactly once.
    """
    random.seed(2024)                           # Scapy's fuzz() draws from the global RNG
    rng = random.Random(2024)
    data = rng.randbytes(32 * 1024)
    valid = data_frames(data)
    seeds = [f for _, f, _ in data_frames(rng.randbytes(64 * 16), pmtu=64, start_psn=0x800000,
                                          offset=len(data))]
    mutants = _mutants(rng, seeds, 10_000)
    seq = [(rng.randrange(4), m) for m in mutants]
    for k, (plane, frame, _) in enumerate(valid):
        seq.insert((k + 1) * len(seq) // (len(valid) + 1), (plane, frame))
    result = run_rx(RxJob(NIC1, frames=seq, verdicts=False, max_cycles=2_000_000), tmp_path)
    check_placed(result, data)                  # exact, once each, nothing else written
    assert len(result.completions) == 1
    # Every mutant is either dropped by a parser (counted under its reason) or
    # accepted as a still-valid frame (a flip in an ICRC-masked field, or a
    # fuzzed DSCP that makes it a trimmed frame) which is then never placed.
    dropped = sum(result.drops.values())
    assert dropped + result.counters["accepted"] - len(valid) == len(mutants)
    assert dropped >= 9000


def test_trimmed_probe_is_answered(tmp_path):
    """A switch that trims an EV probe forwards it whole (it has no payload): the receiver
    accepts it and answers with a probe reply echoing its EV (it used to be cut to the BTH
    and dropped as RUNT, so a congested last hop silenced every probe)."""
    enc = TX.path_encaps[2]
    probe = wire.build_probe_frame(**MAC, path=enc, qpn=QPN, probe_id=7, ts=0x1234)
    trimmed = wire.trim_frame(wire.arrival_form(probe, BLOCK), RX.trim_dscp)
    assert len(trimmed) == len(probe) and wire.check_icrc(trimmed, BLOCK)
    assert Ether(trimmed)[IPv6].tc >> 2 == RX.trim_dscp
    result = run_rx(RxJob(NIC1, frames=[(enc.port, trimmed)]), tmp_path)
    assert result.verdicts == ["accepted"], result.verdicts
    assert sum(result.drops.values()) == 0
    replies = [a for a in check_acks(result, {enc.ev})
               if a["MRCSack"].flags & wire.SACK_PROBE_REPLY]
    assert len(replies) == 1 and replies[0]["MRCSack"].ev == enc.ev
