"""AckGen: AckRequest + reverse path -> ACK/SACK/NACK/probe-reply frame, Scapy-checked.

cocotb testbench (``run_*`` coroutines) and its pytest wrapper.  Every frame
must be byte-equal to ``mrcnic.wire.build_ack_frame`` for the same fields,
dissect in Scapy with the right cumulative PSN, SACK bitmap, echoed EV and
flags, carry a correct ICRC (``wire.check_icrc`` on its arrival form), leave
on the path's plane and have no idle beat inside it.  Paths with an SRH are
dropped and counted.
"""

import ipaddress
import random

import cocotb
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamSink
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from mrcnic import wire
from mrcnic.rtl.ack_gen import AckGen
from mrcnic.rtl.layouts import AckRequest, Decision, EvMode, EvState, NicGlobals, RxQpContext
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import start

SRC_MAC, SRC_IP, DSCP, BLOCK = "02:aa:00:00:00:01", "fd00::1", 26, 0xFC000000
NEXT_HOPS = [f"02:00:00:00:0{p}:fe" for p in range(4)]
QPS = {   # local QP -> (mode, peer QPN, peer uSID / address)
    0: ("SRV6", 0x123456, 0x0300),
    1: ("STEV", 0x000042, "fd00::99"),
    2: ("UDP", 0xABCDEF, "fd00::77"),
}


def mac_int(mac):
    return int(mac.replace(":", ""), 16)


def addr_int(addr):
    return int(ipaddress.IPv6Address(addr))


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.ports = tb_param("ports")
        self.sinks = [
            AxiStreamSink(AxiStreamBus.from_prefix(dut, f"m_axis_p{i}", bus_separator="__"),
                          dut.clk, dut.rst) for i in range(self.ports)]
        self.gaps = 0

    async def reset(self):
        inputs = ["req__valid", "req__payload", "path__valid", "path__payload", "globals",
                  "next_hop_mac", "qp_w_en", "qp_w_addr", "qp_w_data"]
        await start(self.dut, inputs)
        d = self.dut
        d.globals.value = NicGlobals.const({"src_mac": mac_int(SRC_MAC), "src_ip": addr_int(SRC_IP),
                                            "dscp": DSCP, "pmtu_log2": 12}).as_value().value
        d.next_hop_mac.value = sum(mac_int(NEXT_HOPS[p]) << (48 * p) for p in range(self.ports))
        for qp, (mode, peer_qpn, peer) in QPS.items():
            d.qp_w_en.value, d.qp_w_addr.value = 1, qp
            d.qp_w_data.value = RxQpContext.const({
                "valid": 1, "qpn": 0x10 + qp, "mode": EvMode[mode], "peer_qpn": peer_qpn,
                "peer_usid": peer if mode == "SRV6" else 0, "start_psn": 0}).as_value().value
            await RisingEdge(d.clk)
        d.qp_w_en.value = 0
        for i in range(self.ports):
            cocotb.start_soon(self._no_gaps(i))

    async def _no_gaps(self, i):
        """Count cycles with tvalid low inside a frame (must stay 0)."""
        d, inside = self.dut, False
        pfx = f"m_axis_p{i}__"
        while True:
            await RisingEdge(d.clk)
            valid = int(getattr(d, pfx + "tvalid").value)
            if inside and not valid:
                self.gaps += 1
            if valid and int(getattr(d, pfx + "tready").value):
                inside = not int(getattr(d, pfx + "tlast").value)

    async def request(self, req, entry):
        d = self.dut
        d.req__payload.value = AckRequest.const(req).as_value().value
        d.path__payload.value = Decision.const({"index": 7, "entry": entry}).as_value().value
        d.req__valid.value = d.path__valid.value = 1
        while True:
            await RisingEdge(d.clk)
            if int(d.req__ready.value):
                assert int(d.path__ready.value)
                break
        d.req__valid.value = d.path__valid.value = 0


def make_case(rnd, qp, port, flags, syndrome=wire.AETH_ACK):
    mode, peer_qpn, peer = QPS[qp]
    path_ev = rnd.getrandbits(32)
    if mode == "SRV6":
        usids = [rnd.randrange(1, 0x100), rnd.randrange(0x100, 0x200), peer]
        encap = wire.PathEncap(ev=path_ev, port=port, mode=mode, block=BLOCK, usids=usids)
    else:
        encap = wire.PathEncap(ev=path_ev, port=port, mode=mode, dst_ip=peer)
    req = {"qp": qp, "port": rnd.randrange(4), "ev": rnd.getrandbits(32),
           "cum_psn": rnd.getrandbits(24), "syndrome": syndrome, "msn": rnd.getrandbits(24),
           "flags": flags, "base_psn": rnd.getrandbits(24), "bitmap": rnd.getrandbits(64),
           "ts": rnd.getrandbits(32) if flags & wire.SACK_PROBE_REPLY else 0}
    entry = {"ev": path_ev, "port": port, "state": EvState.GOOD, "weight": 1, "n_carriers": 1,
             "seg_base": 0, "da": addr_int(encap.carriers()[0])}
    expect = wire.build_ack_frame(
        src_mac=SRC_MAC, dst_mac=NEXT_HOPS[port], src_ip=SRC_IP, path=encap, qpn=peer_qpn,
        psn=req["cum_psn"], ev=req["ev"], base_psn=req["base_psn"], bitmap=req["bitmap"],
        flags=flags, ts=req["ts"], syndrome=syndrome, msn=req["msn"], dscp=DSCP)
    return req, entry, expect


def check_frame(frame, req, expect, mode):
    assert frame == expect, f"\n{frame.hex()}\n{expect.hex()}"
    pkt = Ether(frame)
    assert pkt[wire.BTH].opcode == wire.OP_ACK and pkt[wire.BTH].psn == req["cum_psn"]
    assert pkt[wire.AETH].syndrome == req["syndrome"] and pkt[wire.AETH].msn == req["msn"]
    sack = pkt[wire.MRCSack]
    assert (sack.ev, int(sack.flags), sack.base_psn, sack.bitmap, sack.ts) == \
        (req["ev"], req["flags"], req["base_psn"], req["bitmap"], req["ts"])
    assert pkt[IPv6].tc == (DSCP << 2) | wire.ECN_ECT0 and pkt[UDP].dport == wire.ROCEV2_PORT
    assert wire.check_icrc(frame, BLOCK if mode == "SRV6" else None)


@cocotb.test()
async def run_frames(dut):
    """Every EV mode, flag combination and plane; sinks always ready."""
    tb = TB(dut)
    await tb.reset()
    rnd = random.Random(5)
    kinds = [(0, wire.AETH_ACK), (wire.SACK_ECN_ECHO, wire.AETH_ACK),
             (wire.SACK_TRIM_NACK, wire.AETH_NAK_PSN), (wire.SACK_PROBE_REPLY, wire.AETH_ACK)]
    cases = []
    for i, (flags, syn) in enumerate(kinds * 3):
        qp = i % 3
        cases.append((qp, *make_case(rnd, qp, port=i % tb.ports, flags=flags, syndrome=syn)))
    for qp, req, entry, expect in cases:
        await tb.request(req, entry)
    for qp, req, entry, expect in cases:
        frame = bytes((await tb.sinks[entry["port"]].recv()).tdata)
        check_frame(frame, req, expect, QPS[qp][0])
    for _ in range(3):
        await RisingEdge(dut.clk)
    assert all(s.empty() for s in tb.sinks)
    assert int(dut.sent.value) == len(cases) and int(dut.dropped.value) == 0
    assert tb.gaps == 0


@cocotb.test()
async def run_backpressure_and_srh(dut):
    """Random tready backpressure; a path with an SRH (n_carriers 2) is dropped and counted."""
    tb = TB(dut)
    await tb.reset()
    rnd = random.Random(9)
    for s in tb.sinks:
        s.set_pause_generator(iter(lambda: rnd.random() < 0.4, None))
    cases = [(qp, *make_case(rnd, qp, port=rnd.randrange(tb.ports), flags=0))
             for qp in (0, 1, 2, 0)]
    bad_req, bad_entry, _ = make_case(rnd, 0, port=0, flags=0)
    bad_entry["n_carriers"] = 2
    await tb.request(cases[0][1], cases[0][2])
    await tb.request(bad_req, bad_entry)
    for qp, req, entry, expect in cases[1:]:
        await tb.request(req, entry)
    for qp, req, entry, expect in cases:
        frame = bytes((await tb.sinks[entry["port"]].recv()).tdata)
        check_frame(frame, req, expect, QPS[qp][0])
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert all(s.empty() for s in tb.sinks)
    assert int(dut.sent.value) == len(cases) and int(dut.dropped.value) == 1
    assert tb.gaps == 0


def test_ack_gen(tmp_path):
    run_rtl(AckGen(ports=4), toplevel="ack_gen", test_module="tests.rtl.test_ack_gen",
            build_dir=tmp_path / "p4", env={"ports": 4}, quiet=True)


def test_parameters():
    import pytest
    for kw in ({"ports": 0}, {"ports": 9}, {"qps": 0}, {"qps": 9}):
        with pytest.raises(ValueError):
            AckGen(**kw)
