"""Transmit pipeline end to end (RTL through Icarus), every frame checked by Scapy.

What the transmit issue must show: a 64 KiB RDMA WRITE sprayed over 128 EVs on
4 planes; SRH paths; STEV and UDP modes; ASSUMED_BAD / DENIED EVs carry
nothing; weight and state changes while traffic runs.
"""

import random
from collections import Counter
from pathlib import Path

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether

from mrcnic import wire
from mrcnic.config import compile_tables, load_config
from mrcnic.sim.tx_tb import TxJob, run_tx

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VA, RKEY = 0x7F0000000000, 0x2001


def ev_of(pkt, mode):
    """The EV a frame carries, read back from flow label and UDP source port."""
    if mode == "UDP":
        return pkt[UDP].sport & 0x3FFF
    return pkt[IPv6].fl | (pkt[UDP].sport & 0xFFF) << 20


def scapy_icrc(arrived: bytes) -> bytes:
    pkt = Ether(arrived)
    pkt[BTH].icrc = None
    return bytes(pkt)[-4:]


def check_frames(result, tables, qp, data, va, rkey, imm=None):
    """Check every frame against Scapy and the configuration; return the entries used."""
    start_psn = tables.qp_contexts[qp]["start_psn"]
    pmtu = 1 << tables.globals["pmtu_log2"]
    base, count = tables.qp_contexts[qp]["profile_base"], tables.qp_contexts[qp]["profile_count"]
    frames = sorted(result.frames, key=lambda f: f[2])
    assert len(frames) == -(-len(data) // pmtu)
    used = []
    for i, (plane, frame, _, _) in enumerate(frames):
        pkt = Ether(frame)
        assert IPv6 in pkt and UDP in pkt and BTH in pkt and "RETH" in pkt, pkt.summary()
        bth, reth = pkt[BTH], pkt["RETH"]
        chunk = data[i * pmtu:(i + 1) * pmtu]
        last = i == len(frames) - 1
        assert bth.psn == (start_psn + i) & 0xFFFFFF
        assert bth.dqpn == tables.qp_contexts[qp]["dest_qpn"]
        assert bth.ackreq == int(last) and bth.padcount == (-len(chunk)) & 3
        assert bth.opcode == (wire.OP_WRITE_ONLY_IMM if (last and imm is not None)
                              else wire.OP_WRITE_ONLY)
        assert reth.va == va + i * pmtu and reth.rkey == rkey and reth.dmalen == len(chunk)
        body = bytes(pkt["RETH"].payload)
        if bth.opcode == wire.OP_WRITE_ONLY_IMM:
            assert pkt["ImmDt"].imm == imm
            body = bytes(pkt["ImmDt"].payload)
        assert body == chunk + bytes((-len(chunk)) & 3), f"payload of PSN {bth.psn} differs"
        # The path: EV, plane and destination address of one entry of the QP's profile.
        enc_mode = tables.path_encaps[base].mode
        ev = ev_of(pkt, enc_mode)
        matches = [j for j in range(base, base + count)
                   if tables.path_entries[j]["ev"] == ev and tables.path_entries[j]["port"] == plane]
        assert matches, f"PSN {bth.psn}: EV {ev:#x} on plane {plane} is not in the profile"
        enc = tables.path_encaps[matches[0]]
        carriers = enc.carriers()
        assert pkt[IPv6].dst == carriers[0]
        assert pkt[IPv6].fl == enc.flow_label and pkt[UDP].sport == enc.sport
        if len(carriers) > 1:
            srh = pkt[IPv6ExtHdrSegmentRouting]
            assert srh.addresses == list(reversed(carriers)) and srh.nh == 17
            assert srh.segleft == len(carriers) - 1 == srh.lastentry
        else:
            assert IPv6ExtHdrSegmentRouting not in pkt
        # ICRC: that of the frame as it will arrive (Scapy's own RoCE ICRC when no SRH).
        block = tables.locator_block if enc.mode == "SRV6" else None
        arrived = wire.arrival_form(frame, block)
        assert wire.check_icrc(frame, block), f"PSN {bth.psn}: bad ICRC"
        if len(carriers) == 1:
            assert scapy_icrc(arrived) == frame[-4:]
        used.append(matches[0])
    return used


def test_write_64k_over_128_evs(tmp_path):
    """64 KiB RDMA WRITE on a QP whose EV profile has 128 EVs over 4 planes."""
    cfg = str(EXAMPLES / "two_nics.toml")
    tables = compile_tables(load_config(cfg))
    data = random.Random(64).randbytes(65536)
    job = TxJob(cfg, wrs=[dict(qp=0, local_addr=0x1000, remote_va=VA, rkey=RKEY, data=data)])
    result = run_tx(job, tmp_path)
    used = check_frames(result, tables, 0, data, VA, RKEY)
    assert len(set(used)) == 64                      # 64 packets, 64 different EVs
    planes = Counter(f[0] for f in result.frames)
    assert sorted(planes) == [0, 1, 2, 3] and min(planes.values()) >= 8
    assert result.wr_refused == 0


def test_write_imm_odd_length_backpressure(tmp_path):
    cfg = str(EXAMPLES / "two_nics.toml")
    tables = compile_tables(load_config(cfg))
    data = random.Random(5).randbytes(5000 + 3)
    job = TxJob(cfg, backpressure=True,
                wrs=[dict(qp=0, opcode="WRITE_IMM", imm=0xC0FFEE11, local_addr=0x2000,
                          remote_va=VA + 8, rkey=RKEY, data=data)])
    result = run_tx(job, tmp_path)
    check_frames(result, tables, 0, data, VA + 8, RKEY, imm=0xC0FFEE11)


@pytest.mark.parametrize("qp", [0, 1])
def test_srh_paths(tmp_path, qp):
    """Paths of more than six uSIDs carry a valid SRH and the ICRC still checks."""
    cfg = str(EXAMPLES / "srh.toml")
    tables = compile_tables(load_config(cfg))
    pmtu = 1 << tables.globals["pmtu_log2"]
    data = random.Random(qp).randbytes(pmtu * 8 + 100)
    mr = tables.memory_regions[0]
    job = TxJob(cfg, wrs=[dict(qp=qp, local_addr=0, remote_va=mr["va"], rkey=mr["rkey"],
                               data=data)])
    result = run_tx(job, tmp_path)
    used = check_frames(result, tables, qp, data, mr["va"], mr["rkey"])
    assert any(tables.path_entries[j]["n_carriers"] > 1 for j in used)
    for j in used:
        assert tables.path_entries[j]["state"] == 0


@pytest.mark.parametrize("name", ["stev.toml", "udp.toml"])
def test_stev_and_udp_modes(tmp_path, name):
    cfg = str(EXAMPLES / name)
    tables = compile_tables(load_config(cfg))
    pmtu = 1 << tables.globals["pmtu_log2"]
    data = random.Random(1).randbytes(pmtu * 6 + 7)
    mr = tables.memory_regions[0]
    job = TxJob(cfg, wrs=[dict(qp=0, local_addr=0x800, remote_va=mr["va"], rkey=mr["rkey"],
                               data=data)])
    result = run_tx(job, tmp_path)
    check_frames(result, tables, 0, data, mr["va"], mr["rkey"])
    peer = load_config(cfg).qps[0].peer_ipv6
    for _, frame, _, _ in result.frames:
        assert Ether(frame)[IPv6].dst == peer


def test_states_and_weights_change_under_traffic(tmp_path):
    """DENIED / ASSUMED_BAD EVs carry nothing; changes apply while traffic runs."""
    cfg = str(EXAMPLES / "two_nics.toml")
    tables = compile_tables(load_config(cfg))
    data = random.Random(9).randbytes(1024 * 384)
    bad = {3: "ASSUMED_BAD", 40: "DENIED"}
    updates = [dict(after_frames=0, index=i, state=s) for i, s in bad.items()]
    updates += [dict(after_frames=128, index=3, state="GOOD"),      # back after two rounds
                dict(after_frames=128, index=7, state="DENIED"),
                dict(after_frames=128, index=9, weight=3)]
    job = TxJob(cfg, updates=updates,
                wrs=[dict(qp=0, local_addr=0, remote_va=VA, rkey=RKEY, data=data)])
    result = run_tx(job, tmp_path)
    used = check_frames(result, tables, 0, data, VA, RKEY)
    early, late = Counter(used[8:120]), Counter(used[140:])
    assert early[3] == 0 and early[40] == 0 and late[40] == 0 and late[7] == 0
    assert late[3] >= 1
    assert late[9] >= 3 and late[9] > late[10] >= 1
