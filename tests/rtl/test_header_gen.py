"""cocotb testbench of rtl/header_gen.py (HeaderGen) and its pytest wrapper.

Every header is checked byte for byte against Scapy (``mrcnic.wire.build_data_frame``)
and its ICRC view against ``icrc_view(arrival_form(frame, block))``; the
beat stream is checked for tkeep/tlast/tuser port, stability under backpressure,
and zero idle cycles between back-to-back headers.
"""

import gc
import ipaddress
import random
import warnings

import cocotb
import pytest
from amaranth.hdl import UnusedElaboratable
from cocotb.triggers import RisingEdge

from mrcnic import wire
from mrcnic.rtl.header_gen import HeaderGen
from mrcnic.rtl.layouts import EvMode, EvState, NicGlobals, TxPacket
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import start

PORTS = 4
BLOCK = 0xFCBB0000                      # uSID locator block of the fabric
SRC_MAC = "02:00:00:00:00:01"
SRC_IP = "fd00:0:0:1::1"
PEER_IP = "fd00:0:0:2::7"
DSCP = 26
MACS = [f"02:aa:00:00:00:{i + 1:02x}" for i in range(PORTS)]

INPUTS = ["pkt__payload", "pkt__valid", "globals", "next_hop_mac",
          "seg_w_en", "seg_w_addr", "seg_w_data", "m_axis__tready"]


def _mac(text):
    return int(text.replace(":", ""), 16)


def _ip(text):
    return int(ipaddress.IPv6Address(text))


class Case:
    """One TxPacket, its segment-memory words and the Scapy-expected header and ICRC view."""

    def __init__(self, rng, mode, n, imm, length, seg_base, port=None, n_field=None):
        self.port = rng.randrange(PORTS) if port is None else port
        ev = rng.getrandbits(32)
        if mode == "SRV6":
            usids = [rng.randrange(1, 1 << 16) for _ in range(6 * (n - 1) + rng.randint(1, 6))]
            path = wire.PathEncap(ev=ev, port=self.port, mode=mode, block=BLOCK, usids=usids)
            peer_usid = usids[-1]
        else:
            path = wire.PathEncap(ev=ev, port=self.port, mode=mode, dst_ip=PEER_IP)
            peer_usid = rng.getrandbits(16)
        carriers = path.carriers()
        assert len(carriers) == n
        # Segment List[i] (wire order) = reversed carriers, at seg_base + i.
        self.seg_words = {(seg_base + i) & 0xFF: _ip(a) for i, a in enumerate(reversed(carriers))} \
            if n > 1 else {}
        qpn, psn = rng.getrandbits(24), rng.getrandbits(24)
        va, rkey, last = rng.getrandbits(64), rng.getrandbits(32), rng.random() < 0.5
        imm_val = rng.getrandbits(32)
        frame = wire.build_data_frame(
            src_mac=SRC_MAC, dst_mac=MACS[min(self.port, PORTS - 1)], src_ip=SRC_IP, path=path,
            qpn=qpn, psn=psn, va=va, rkey=rkey, payload=bytes(rng.getrandbits(8) for _ in range(length)),
            imm=imm_val if imm else None, last=last, dscp=DSCP)
        hlen = wire.header_length(n, imm)
        self.header = frame[:hlen]
        block = BLOCK if mode == "SRV6" else None
        self.view = wire.icrc_view(wire.arrival_form(frame, block))[:hlen]
        self.value = TxPacket.const({
            "qp": rng.getrandbits(3), "dest_qpn": qpn, "mode": EvMode[mode], "peer_usid": peer_usid,
            "psn": psn, "opcode": wire.OP_WRITE_ONLY_IMM if imm else wire.OP_WRITE_ONLY,
            "last": int(last), "va": va, "rkey": rkey, "length": length, "imm": imm_val,
            "path": {"index": rng.getrandbits(8), "entry": {
                "ev": ev, "port": self.port, "state": EvState.GOOD, "weight": 1,
                "n_carriers": n if n_field is None else n_field, "seg_base": seg_base,
                "da": _ip(carriers[0])}},
        }).as_value().value


def make_cases(rng, repeat):
    """SRV6 with 1..4 carriers, STEV and UDP, each with and without ImmDt, all pad counts."""
    specs = [("SRV6", n, imm) for n in (1, 2, 3, 4) for imm in (False, True)]
    specs += [(mode, 1, imm) for mode in ("STEV", "UDP") for imm in (False, True)]
    cases, seg_base = [], 4
    for r in range(repeat):
        for i, (mode, n, imm) in enumerate(specs):
            length = rng.choice([1, 2, 3, 4, 61, 250, 1023, 4096]) if r else 1 + (i % 4) + 4 * i
            cases.append(Case(rng, mode, n, imm, length, seg_base))
            seg_base += n if n > 1 else 0
    # A 4-carrier segment list that wraps around the end of the segment memory.
    cases.append(Case(rng, "SRV6", 4, False, 100, 254))
    assert seg_base <= 250
    return cases


async def setup(dut, cases):
    await start(dut, INPUTS)
    dut.globals.value = NicGlobals.const({"src_mac": _mac(SRC_MAC), "src_ip": _ip(SRC_IP),
                                          "dscp": DSCP, "pmtu_log2": 12}).as_value().value
    dut.next_hop_mac.value = sum(_mac(m) << (48 * i) for i, m in enumerate(MACS))
    words = {}
    for case in cases:
        words.update(case.seg_words)
    for addr, word in words.items():
        dut.seg_w_en.value, dut.seg_w_addr.value, dut.seg_w_data.value = 1, addr, word
        await RisingEdge(dut.clk)
    dut.seg_w_en.value = 0
    await RisingEdge(dut.clk)


async def drive(dut, cases, rng, gap_prob):
    """Offer the cases' TxPackets in order; ``valid`` never waits on ``ready``."""
    for case in cases:
        while rng.random() < gap_prob:
            dut.pkt__valid.value = 0
            await RisingEdge(dut.clk)
        dut.pkt__payload.value, dut.pkt__valid.value = case.value, 1
        await RisingEdge(dut.clk)
        while not int(dut.pkt__ready.value):
            await RisingEdge(dut.clk)
    dut.pkt__valid.value = 0


async def collect(dut, nframes, rng, ready_prob):
    """Accepted beats grouped into frames: lists of (cycle, tdata, tkeep, tuser)."""
    frames, beats, cycle, stalled = [], [], 0, None
    while len(frames) < nframes:
        dut.m_axis__tready.value = int(rng.random() < ready_prob)
        await RisingEdge(dut.clk)
        cycle += 1
        assert cycle < 20000, "header stream stalled"
        if not int(dut.m_axis__tvalid.value):
            assert stalled is None, "tvalid dropped without a handshake"
            continue
        beat = (int(dut.m_axis__tdata.value), int(dut.m_axis__tkeep.value),
                int(dut.m_axis__tlast.value), int(dut.m_axis__tuser.value))
        if stalled is not None:
            assert beat == stalled, "beat changed while tready was low"
        if not int(dut.m_axis__tready.value):
            stalled = beat
            continue
        stalled = None
        beats.append((cycle,) + beat)
        if beat[2]:
            frames.append(beats)
            beats = []
    return frames


def check_frame(case, beats):
    hlen = len(case.header)
    assert len(beats) == (hlen + 7) // 8, f"{len(beats)} beats for a {hlen}-byte header"
    data, view = bytearray(), bytearray()
    for i, (_, tdata, tkeep, tlast, tuser) in enumerate(beats):
        last = i == len(beats) - 1
        nbytes = hlen - 8 * i if last else 8
        assert tkeep == (1 << nbytes) - 1, f"beat {i}: tkeep {tkeep:#x}"
        assert tlast == int(last)
        assert tuser >> 64 == case.port, f"beat {i}: tuser port {tuser >> 64}"
        assert tdata >> (8 * nbytes) == 0, f"beat {i}: lanes beyond tkeep not zero"
        data += tdata.to_bytes(8, "little")[:nbytes]
        view += (tuser & ((1 << 64) - 1)).to_bytes(8, "little")[:nbytes]
    assert bytes(data) == case.header, f"header\n got {data.hex()}\nwant {case.header.hex()}"
    assert bytes(view) == case.view, f"ICRC view\n got {view.hex()}\nwant {case.view.hex()}"


@cocotb.test()
async def run_backpressure(dut):
    """All modes, ImmDt or not, SRV6 1..4 carriers, every pad count; random gaps and tready."""
    rng = random.Random(tb_param("seed", 1))
    cases = make_cases(rng, 2)
    # A bad entry: n_carriers 0 (framed as 1) on port 6 (>= ports: last plane's MAC), counted.
    bad = Case(rng, "STEV", 1, True, 33, 0, port=6, n_field=0)
    cases.append(bad)
    await setup(dut, cases)
    assert int(dut.errors.value) == 0
    cocotb.start_soon(drive(dut, cases, rng, gap_prob=0.3))
    frames = await collect(dut, len(cases), rng, ready_prob=0.6)
    for case, beats in zip(cases, frames):
        check_frame(case, beats)
    assert int(dut.errors.value) == 1


@cocotb.test()
async def run_back_to_back(dut):
    """Packets always waiting and tready always 1: header beats with no idle cycle."""
    rng = random.Random(tb_param("seed", 1) + 1)
    cases = make_cases(rng, 1)
    await setup(dut, cases)
    cocotb.start_soon(drive(dut, cases, rng, gap_prob=0.0))
    frames = await collect(dut, len(cases), rng, ready_prob=1.0)
    for case, beats in zip(cases, frames):
        check_frame(case, beats)
    cycles = [b[0] for beats in frames for b in beats]
    total = sum((len(c.header) + 7) // 8 for c in cases)
    assert len(cycles) == total
    assert cycles[-1] - cycles[0] + 1 == total, \
        f"{total} beats took {cycles[-1] - cycles[0] + 1} cycles"
    dut._log.info("%d header beats of %d packets in %d consecutive cycles; first beat %d "
                  "cycles after the first packet was offered", total, len(cases), total, cycles[0])


def test_header_gen(tmp_path):
    run_rtl(HeaderGen(ports=PORTS), toplevel="header_gen", test_module="tests.rtl.test_header_gen",
            build_dir=tmp_path / "b", env={"seed": 7}, quiet=True)


@pytest.mark.parametrize("ports", [0, 9, 2.0])
def test_header_gen_bad_params(ports):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)   # the half-built component
        with pytest.raises(ValueError, match="ports"):
            HeaderGen(ports=ports)
        gc.collect()
