# amaranth: UnusedElaboratable=no
"""Segmenter: work requests -> TxPacket descriptors + payload frames over AXI4 reads.

cocotb testbench (``run_*`` coroutines) and its pytest wrappers.  Host memory is
cocotbext-axi's ``AxiRamRead`` on the ``m_axi`` port; a coroutine plays the spray
scheduler (round robin over each QP's profile, random answer latency).  Every
descriptor is checked field by field against a Python model of the segmentation
(consecutive PSNs modulo 2**24, VA = remote VA + offset, lengths, AckReq on the
last packet, WRITE_IMM opcode on the last packet only, the i-th decision on the
i-th packet), every payload frame against host memory, and each packet is
rebuilt as a wire frame with Scapy (``mrcnic.wire.build_data_frame``) from the
DUT's descriptor + payload and from the model: both frames must be identical
and dissect as RDMA WRITE ONLY [WITH IMMEDIATE] with the right RETH.  Every AR
burst is checked (INCR, 8-byte beats, <= 256 beats, no 4 KiB crossing) and the
words read must be exactly the words holding the messages' bytes.  Every
SentInfo must describe its packet and transfer with it.

Retransmission (MRC trim NACK / ACK timeout): ``run_retx_*`` hold ``una`` so
messages stay in the table, request PSNs again and check each copy against the
original packet (fields, payload, Scapy frame) except its path, which must
avoid ``avoid_index``; reads must cover exactly the words of every packet sent.
They also cover priority over a long message, unknown PSNs (counted, no hang),
a full message table (``wr`` held until ``una`` advances), ``tx_ok`` and PSN
wrap-around.
"""

import random

import cocotb
import pytest
from amaranth.lib import data
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from cocotbext.axi import AxiRamRead, AxiReadBus

from mrcnic import wire
from mrcnic.rtl.layouts import (Decision, EvMode, EvState, QpContext, RetxReq, SentInfo, TxPacket,
                                WorkRequest, WrOpcode)
from mrcnic.rtl.segmenter import RETX_WINDOW_WAIT, Segmenter
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import start

INPUTS = ["wr__valid", "wr__payload", "qp_w_en", "qp_w_addr", "qp_w_data", "pmtu_log2",
          "spray_req__ready", "spray_decision__valid", "spray_decision__payload", "pkt__ready",
          "payload__tready", "retx__valid", "retx__payload", "una", "tx_ok", "sent__ready"]
MEM_SIZE = 1 << 20
_PATH_OFFSET = data.Layout.cast(TxPacket)["path"].offset


def unpack(layout, value):
    """Bits of ``layout`` -> nested dict of ints."""
    out = {}
    for name, f in data.Layout.cast(layout):
        raw = (value >> f.offset) & ((1 << f.width) - 1)
        try:
            out[name] = unpack(f.shape, raw)
        except TypeError:
            out[name] = raw
    return out


def pack(layout, fields):
    return data.Layout.cast(layout).const(fields).as_value().value


def ctx_dict(dest_qpn, start_psn, base=0, count=4, mode=EvMode.SRV6, peer_usid=0xBEEF):
    return {"dest_qpn": dest_qpn, "start_psn": start_psn, "mode": mode, "profile_base": base,
            "profile_count": count, "peer_usid": peer_usid}


class ErrorRam(AxiRamRead):
    """Host memory whose words in [err_lo, err_hi) answer SLVERR (data reads as zeros)."""

    err_lo = err_hi = 0

    async def _read(self, address, length):
        if self.err_lo <= address < self.err_hi:
            raise ValueError("injected slave error")
        return await super()._read(address, length)


class TB:
    """Drives work requests / QP contexts, plays the spray scheduler, sinks pkt + payload.

    All inputs are driven on the falling edge and all handshakes sampled in the
    ReadOnly phase after it (they complete on the next rising edge).
    """

    def __init__(self, dut, pkt_ready=1.0, payload_ready=1.0, spray_ready=1.0, sched_lat=(0, 0),
                 ram_cls=AxiRamRead, seed=1, sent_ready=1.0):
        self.dut = dut
        self.rng = random.Random(seed)
        self.ram = ram_cls(AxiReadBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk,
                           dut.rst, size=MEM_SIZE)
        self.p_pkt, self.p_pay, self.p_spray, self.sched_lat = pkt_ready, payload_ready, spray_ready, sched_lat
        self.wr_q, self.ctx_q, self.sched_q = [], [], []
        self.rr = {}
        self.cycle = 0
        self.decisions = []      # decision bits, in request order
        self.pkts = []           # parsed TxPackets
        self.frames = []         # payload frames (bytes)
        self.beats = []          # (cycle, keep, last) of every payload beat
        self.ars = []            # (araddr, arlen, arsize, arburst, arid)
        self.ar_cycles, self.req_cycles = [], []
        self.cur = bytearray()
        self.wr_accepts = []     # (cycle, wr dict)
        self.pmtu_log2 = 10
        self.ctx = {}            # qp -> ctx dict (model)
        self.next_psn = {}
        self.p_sent = sent_ready
        self.qps = tb_param("qps", 8)
        self.tx_ok = (1 << self.qps) - 1
        self.una = None          # None: una follows next_psn (every message released at once)
        self.retx_q = []         # RetxReq dicts to send
        self.retx_taken = []     # (cycle, RetxReq dict, payload frames out so far)
        self.sent = []           # parsed SentInfo records, in transfer order

    async def init(self, pmtu_log2=10):
        self.pmtu_log2 = pmtu_log2
        await start(self.dut, INPUTS)
        self.dut.pmtu_log2.value = pmtu_log2
        cocotb.start_soon(self._loop())

    # -------------------------------------------------------------- driving
    def write_ctx(self, qp, ctx):
        self.ctx_q.append((qp, ctx))

    def post(self, **wr):
        wr.setdefault("opcode", WrOpcode.WRITE)
        wr.setdefault("wr_id", len(self.wr_q))
        wr.setdefault("rkey", 0x1234ABCD)
        wr.setdefault("imm", 0)
        self.wr_q.append(wr)

    def _decision(self, req):
        qp, base, count = req["qp"], req["base"], req["count"]
        k = self.rr.get(qp, 0)
        self.rr[qp] = k + 1
        idx = (base + k % count) & 0xFF
        return pack(Decision, {"index": idx, "entry": {
            "ev": 0x10000 + idx * 7, "port": idx % 4, "state": EvState.GOOD, "weight": 1,
            "n_carriers": 1, "seg_base": 0, "da": (0xFC00 << 112) | idx}})

    async def _loop(self):
        dut, rng = self.dut, self.rng
        while True:
            await FallingEdge(dut.clk)
            self.cycle += 1
            dut.pkt__ready.value = int(rng.random() < self.p_pkt)
            dut.payload__tready.value = int(rng.random() < self.p_pay)
            dut.spray_req__ready.value = int(rng.random() < self.p_spray)
            dut.sent__ready.value = int(rng.random() < self.p_sent)
            dut.tx_ok.value = self.tx_ok
            if self.una is None:
                dut.una.value = int(dut.next_psn.value)
            else:
                dut.una.value = sum((self.una.get(q, 0) & 0xFFFFFF) << (24 * q)
                                    for q in range(self.qps))
            if self.retx_q:
                dut.retx__valid.value = 1
                dut.retx__payload.value = pack(RetxReq, self.retx_q[0])
            else:
                dut.retx__valid.value = 0
            if self.wr_q and not self.ctx_q:     # contexts first (a write takes effect next cycle)
                dut.wr__valid.value = 1
                dut.wr__payload.value = pack(WorkRequest, self.wr_q[0])
            else:
                dut.wr__valid.value = 0
            if self.ctx_q:
                qp, ctx = self.ctx_q[0]
                dut.qp_w_en.value, dut.qp_w_addr.value = 1, qp
                dut.qp_w_data.value = pack(QpContext, ctx)
            else:
                dut.qp_w_en.value = 0
            if self.sched_q and self.sched_q[0][0] <= self.cycle:
                dut.spray_decision__valid.value = 1
                dut.spray_decision__payload.value = self.sched_q[0][1]
            else:
                dut.spray_decision__valid.value = 0
            await ReadOnly()
            if self.ctx_q:
                qp, ctx = self.ctx_q.pop(0)
                self.ctx[qp] = ctx
                self.next_psn[qp] = ctx["start_psn"]
            if int(dut.wr__valid.value) and int(dut.wr__ready.value):
                self.wr_accepts.append((self.cycle, self.wr_q.pop(0)))
            if int(dut.spray_req__valid.value) and int(dut.spray_req__ready.value):
                req = {"qp": int(dut.spray_req__payload.value) & 7,
                       "base": (int(dut.spray_req__payload.value) >> 3) & 0xFF,
                       "count": int(dut.spray_req__payload.value) >> 11}
                dec = self._decision(req)
                due = self.cycle + 1 + rng.randint(*self.sched_lat)
                if self.sched_q:
                    due = max(due, self.sched_q[-1][0])
                self.sched_q.append((due, dec))
                self.decisions.append(dec)
                self.req_cycles.append(self.cycle)
            if int(dut.spray_decision__valid.value) and int(dut.spray_decision__ready.value):
                self.sched_q.pop(0)
            if int(dut.retx__valid.value) and int(dut.retx__ready.value):
                self.retx_taken.append((self.cycle, self.retx_q.pop(0), len(self.frames)))
            pkt_fire = int(dut.pkt__valid.value) and int(dut.pkt__ready.value)
            sent_fire = int(dut.sent__valid.value) and int(dut.sent__ready.value)
            assert pkt_fire == sent_fire, "pkt and its SentInfo must transfer together"
            if sent_fire:
                self.sent.append(unpack(SentInfo, int(dut.sent__payload.value)))
            if pkt_fire:
                p = unpack(TxPacket, int(dut.pkt__payload.value))
                p["path_bits"] = int(dut.pkt__payload.value) >> _PATH_OFFSET
                p["cycle"] = self.cycle
                self.pkts.append(p)
            if int(dut.payload__tvalid.value) and int(dut.payload__tready.value):
                keep, last = int(dut.payload__tkeep.value), int(dut.payload__tlast.value)
                tdata = int(dut.payload__tdata.value).to_bytes(8, "little")
                if not last:
                    assert keep == 0xFF, f"partial tkeep {keep:#x} before tlast"
                assert keep in (1, 3, 7, 15, 31, 63, 127, 255), f"tkeep {keep:#x} not contiguous"
                self.cur += tdata[:bin(keep).count("1")]
                self.beats.append((self.cycle, keep, last))
                if last:
                    self.frames.append(bytes(self.cur))
                    self.cur = bytearray()
            if int(dut.m_axi__rvalid.value):
                assert int(dut.m_axi__rready.value), "R channel stalled: payload FIFO over-committed"
            if int(dut.m_axi__arvalid.value) and int(dut.m_axi__arready.value):
                self.ars.append((int(dut.m_axi__araddr.value), int(dut.m_axi__arlen.value),
                                 int(dut.m_axi__arsize.value), int(dut.m_axi__arburst.value),
                                 int(dut.m_axi__arid.value)))
                self.ar_cycles.append(self.cycle)

    async def wait_packets(self, n, timeout=20000):
        """Wait until ``n`` descriptors and frames are out, then check nothing more comes."""
        for _ in range(timeout):
            await RisingEdge(self.dut.clk)
            if len(self.pkts) >= n and len(self.frames) >= n and not self.wr_q:
                break
        else:
            raise AssertionError(
                f"timeout: {len(self.pkts)} pkts, {len(self.frames)} frames of {n}; "
                f"{len(self.wr_accepts)} WRs taken, {len(self.decisions)} spray requests, "
                f"{len(self.ars)} ARs, {len(self.beats)} beats, refused {int(self.dut.wr_refused.value)}")
        for _ in range(50):
            await RisingEdge(self.dut.clk)
        assert len(self.pkts) == n, f"{len(self.pkts)} descriptors, expected {n}"
        assert len(self.frames) == n, f"{len(self.frames)} payload frames, expected {n}"
        assert not self.cur, "payload beats left without tlast"
        assert not self.sched_q, "spray decisions left unconsumed"

    # ------------------------------------------------------------- checking
    def model(self, wr):
        """Expected descriptors and payloads of one accepted work request."""
        ctx = self.ctx[wr["qp"]]
        pmtu = 1 << self.pmtu_log2
        out, off = [], 0
        while off < wr["length"]:
            n = min(pmtu, wr["length"] - off)
            last = off + n == wr["length"]
            imm_last = wr["opcode"] == WrOpcode.WRITE_IMM and last
            out.append(({
                "qp": wr["qp"], "dest_qpn": ctx["dest_qpn"], "mode": ctx["mode"].value,
                "peer_usid": ctx["peer_usid"], "psn": self.next_psn[wr["qp"]],
                "opcode": wire.OP_WRITE_ONLY_IMM if imm_last else wire.OP_WRITE_ONLY,
                "last": int(last), "va": (wr["remote_va"] + off) % (1 << 64), "rkey": wr["rkey"],
                "length": n, "imm": wr["imm"]},
                self.ram.read(wr["local_addr"] + off, n)))
            self.next_psn[wr["qp"]] = (self.next_psn[wr["qp"]] + 1) & 0xFFFFFF
            off += n
        return out

    def check(self, wrs, mem_override=None):
        """Check all descriptors/frames/ARs against the model of the accepted ``wrs``."""
        expected = []
        for wr in wrs:
            expected += self.model(wr)
        assert len(self.pkts) == len(expected)
        for i, (p, frame, (exp, exp_payload)) in enumerate(zip(self.pkts, self.frames, expected)):
            if mem_override:
                exp_payload = mem_override(exp, exp_payload)
            got = {k: p[k] for k in exp}
            assert got == exp, f"packet {i}: {got} != {exp}"
            assert p["path_bits"] == self.decisions[i], f"packet {i}: wrong spray decision"
            self.check_sent(i, retx=0)
            assert frame == exp_payload, f"packet {i}: payload differs from memory"
            self.scapy_check(p, frame, exp, exp_payload)
        self.check_reads(wrs)

    def check_sent(self, i, retx):
        """SentInfo ``i`` describes packet ``i``."""
        p, si = self.pkts[i], self.sent[i]
        assert si == {"qp": p["qp"], "psn": p["psn"], "index": p["path"]["index"],
                      "ev": p["path"]["entry"]["ev"], "length": p["length"], "msg_last": p["last"],
                      "retx": retx}, f"SentInfo {i}: {si} for packet {p}"

    def retx(self, qp, psn, avoid_index, trim=0):
        self.retx_q.append({"qp": qp, "psn": psn & 0xFFFFFF, "avoid_index": avoid_index,
                            "trim": trim})

    async def wait_for(self, cond, timeout=20000, what="condition"):
        for _ in range(timeout):
            await RisingEdge(self.dut.clk)
            if cond():
                return
        raise AssertionError(f"timeout waiting for {what}: {len(self.pkts)} pkts, "
                             f"{len(self.frames)} frames")

    def check_all(self, wrs, known_retx):
        """Check a run mixing new packets and retransmissions.

        New packets (``retx`` = 0 in their SentInfo) must be the model of ``wrs``
        in order; the i-th retransmission must be the i-th RetxReq of
        ``known_retx`` -- a copy of the original packet (every field, payload and
        Scapy frame) except its path, whose entry differs from ``avoid_index``
        unless ``same`` is given.  The reads must be exactly the words of every
        packet, in packet order.
        """
        assert len(self.sent) == len(self.pkts) == len(self.frames)
        expected, addrs = [], {}
        for wr in wrs:
            for k, (exp, payload) in enumerate(self.model(wr)):
                expected.append((exp, payload))
                addrs[(exp["qp"], exp["psn"])] = (wr["local_addr"] + (exp["va"] - wr["remote_va"])
                                                  % (1 << 64), exp, payload)
        new = iter(expected)
        retx = iter(known_retx)
        words = []
        for i, (p, frame) in enumerate(zip(self.pkts, self.frames)):
            r = self.sent[i]["retx"]
            self.check_sent(i, retx=r)
            if r:
                req, same = next(retx)
                assert (p["qp"], p["psn"]) == (req["qp"], req["psn"]), f"retx {i}: {p} for {req}"
                _, exp, exp_payload = addrs[(p["qp"], p["psn"])]
                if same:
                    assert p["path"]["index"] == req["avoid_index"]
                else:
                    assert p["path"]["index"] != req["avoid_index"], f"retx {i} on avoided entry"
            else:
                exp, exp_payload = next(new)
            got = {k: p[k] for k in exp}
            assert got == exp, f"packet {i} (retx {r}): {got} != {exp}"
            assert p["path_bits"] in self.decisions
            assert frame == exp_payload, f"packet {i} (retx {r}): payload differs from memory"
            self.scapy_check(p, frame, exp, exp_payload)
            addr = addrs[(p["qp"], p["psn"])][0]
            words += range(addr & ~7, addr + p["length"], 8)
        assert next(new, None) is None, "new packets missing"
        assert next(retx, None) is None, "retransmissions missing"
        got = []
        for araddr, arlen, arsize, arburst, arid in self.ars:
            assert arsize == 3 and arburst == 1 and arid == 0 and arlen <= 255
            assert (araddr & 0xFFF) + (arlen + 1) * 8 <= 0x1000
            got += range(araddr, araddr + (arlen + 1) * 8, 8)
        assert got == words, "AR bursts did not read exactly the words of the packets"

    @staticmethod
    def scapy_check(p, frame, exp, exp_payload):
        dec = p["path"]
        path = wire.PathEncap(ev=dec["entry"]["ev"], port=dec["entry"]["port"], mode="SRV6",
                              block=0xFC000000, usids=[0x100 + dec["index"], 0xBEEF])

        def build(f, payload):
            return wire.build_data_frame(
                src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="fd00::1",
                path=path, qpn=f["dest_qpn"], psn=f["psn"], va=f["va"], rkey=f["rkey"],
                payload=payload, imm=f["imm"] if f["opcode"] == wire.OP_WRITE_ONLY_IMM else None,
                last=bool(f["last"]))

        got = build(p, frame)
        assert got == build(exp, exp_payload), "Scapy frame from DUT output differs from model"
        pkt = wire.Ether(got)
        assert pkt[wire.BTH].opcode == p["opcode"] and pkt[wire.BTH].psn == p["psn"]
        assert pkt[wire.BTH].ackreq == p["last"]
        assert pkt[wire.RETH].va == p["va"] and pkt[wire.RETH].dmalen == p["length"]
        if p["opcode"] == wire.OP_WRITE_ONLY_IMM:
            assert pkt[wire.ImmDt].imm == p["imm"]
        else:
            assert wire.ImmDt not in pkt

    def check_reads(self, wrs):
        words = []
        for araddr, arlen, arsize, arburst, arid in self.ars:
            assert arsize == 3 and arburst == 1 and arid == 0
            assert arlen <= 255 and araddr % 8 == 0
            assert (araddr & 0xFFF) + (arlen + 1) * 8 <= 0x1000, f"burst {araddr:#x}+{arlen} crosses 4 KiB"
            words += range(araddr, araddr + (arlen + 1) * 8, 8)
        exp = []
        for wr in wrs:
            exp += range(wr["local_addr"], wr["local_addr"] + wr["length"], 8)
        assert words == exp, "AR bursts did not read exactly the words of the messages"


def fill(tb, addr, n, seed):
    r = random.Random(seed)
    tb.ram.write(addr, bytes(r.getrandbits(8) for _ in range(n)))


# ---------------------------------------------------------------------- tests
@cocotb.test()
async def run_write_64k(dut):
    """64 KiB WRITE, pmtu 1024: 64 packets; throughput with always-ready sinks."""
    tb = TB(dut)
    await tb.init(pmtu_log2=10)
    tb.write_ctx(2, ctx_dict(0x00ABCD, 1000, base=8, count=5))
    fill(tb, 0x10000, 65536, 1)
    wr = dict(qp=2, local_addr=0x10000, remote_va=0x7F00_0000_1000, length=65536)
    tb.post(**wr)
    await tb.wait_packets(64)
    tb.check([{**wr, "opcode": WrOpcode.WRITE, "rkey": 0x1234ABCD, "imm": 0}])
    assert [p["psn"] for p in tb.pkts] == list(range(1000, 1064))
    assert [p["last"] for p in tb.pkts] == [0] * 63 + [1]
    first, last = tb.beats[0][0], tb.beats[-1][0]
    ratio = len(tb.beats) / (last - first + 1)
    t0 = tb.wr_accepts[0][0]
    dut._log.info("throughput: %d payload beats in %d cycles = %.4f beats/cycle", len(tb.beats),
                  last - first + 1, ratio)
    dut._log.info("latency after WR handshake (cycles): first spray_req %d, first pkt %d, "
                  "first AR %d, first payload beat %d (memory answering at once)",
                  tb.req_cycles[0] - t0, tb.pkts[0]["cycle"] - t0, tb.ar_cycles[0] - t0, first - t0)
    assert len(tb.beats) == 8192
    assert ratio >= 0.99, f"payload throughput {ratio:.3f} beats/cycle"
    # every descriptor is out before its payload's first beat
    starts = [tb.beats[0][0]] + [tb.beats[i + 1][0] for i, b in enumerate(tb.beats[:-1]) if b[2]]
    assert all(p["cycle"] < s for p, s in zip(tb.pkts, starts))


@cocotb.test()
async def run_write_imm_odd(dut):
    """WRITE_IMM of 5000 bytes across a 4 KiB boundary: last packet 0x0B with imm, 904 bytes."""
    tb = TB(dut, sched_lat=(0, 3))
    await tb.init(pmtu_log2=10)
    tb.write_ctx(0, ctx_dict(0x000123, 77, base=0, count=3, mode=EvMode.STEV))
    fill(tb, 0x1E08, 5000, 2)
    wr = dict(qp=0, opcode=WrOpcode.WRITE_IMM, local_addr=0x1E08, remote_va=0x1_0000_0003,
              length=5000, imm=0xCAFEF00D, rkey=0x55)
    tb.post(**wr)
    await tb.wait_packets(5)
    tb.check([{**wr, "wr_id": 0}])
    assert [p["opcode"] for p in tb.pkts] == [0x0A] * 4 + [0x0B]
    assert tb.pkts[-1]["length"] == 5000 % 1024 and tb.pkts[-1]["imm"] == 0xCAFEF00D


@cocotb.test()
async def run_4k_bursts(dut):
    """pmtu 4096 from just past a 4 KiB boundary: bursts split at 256 beats and at 4 KiB."""
    tb = TB(dut)
    await tb.init(pmtu_log2=12)
    tb.write_ctx(5, ctx_dict(0x0F0F0F, 0, base=100, count=1))
    wr = dict(qp=5, local_addr=0x3008, remote_va=0xFFFF_FFFF_FFFF_F000, length=3 * 4096 + 100)
    fill(tb, wr["local_addr"], wr["length"], 3)
    tb.post(**wr)
    await tb.wait_packets(4)
    tb.check([{**wr, "opcode": WrOpcode.WRITE, "rkey": 0x1234ABCD, "imm": 0}])
    assert [p["length"] for p in tb.pkts] == [4096, 4096, 4096, 100]
    assert tb.pkts[1]["va"] == 0 and tb.pkts[3]["va"] == 0x2000   # VA wraps modulo 2**64
    assert any(arlen == 255 for _, arlen, *_ in tb.ars)


@cocotb.test()
async def run_psn_wrap(dut):
    """PSNs wrap from 0xFFFFFF to 0 inside a message and carry over to the next one."""
    tb = TB(dut)
    await tb.init(pmtu_log2=8)
    tb.write_ctx(1, ctx_dict(0x000001, 0xFFFFFD, count=2))
    fill(tb, 0x8000, 4096, 4)
    wrs = [dict(qp=1, local_addr=0x8000, remote_va=0x100, length=2000),
           dict(qp=1, local_addr=0x8800, remote_va=0x900, length=8)]
    for wr in wrs:
        tb.post(**wr)
    await tb.wait_packets(9)
    tb.check([{**w, "opcode": WrOpcode.WRITE, "rkey": 0x1234ABCD, "imm": 0} for w in wrs])
    assert [p["psn"] for p in tb.pkts] == [0xFFFFFD, 0xFFFFFE, 0xFFFFFF, 0, 1, 2, 3, 4, 5]
    assert [p["last"] for p in tb.pkts] == [0] * 7 + [1, 1]


@cocotb.test()
async def run_two_qps(dut):
    """Back-to-back requests of two QPs keep separate PSNs; a context write resets the PSN."""
    tb = TB(dut, sched_lat=(0, 2))
    await tb.init(pmtu_log2=9)
    tb.write_ctx(3, ctx_dict(0x333333, 300, base=0, count=4))
    tb.write_ctx(6, ctx_dict(0x666666, 600, base=50, count=2, mode=EvMode.UDP))
    fill(tb, 0x20000, 16384, 5)
    wrs = [dict(qp=3, local_addr=0x20000, remote_va=0xA000, length=1500),
           dict(qp=6, local_addr=0x21000, remote_va=0xB000, length=1024, opcode=WrOpcode.WRITE_IMM,
                imm=0x66),
           dict(qp=3, local_addr=0x22000, remote_va=0xA5DC, length=513),
           dict(qp=6, local_addr=0x23000, remote_va=0xB400, length=7)]
    for wr in wrs:
        tb.post(**wr)
    await tb.wait_packets(3 + 2 + 2 + 1)
    full = [{"opcode": WrOpcode.WRITE, "rkey": 0x1234ABCD, "imm": 0, **w} for w in wrs]
    tb.check(full)
    assert [p["psn"] for p in tb.pkts if p["qp"] == 3] == [300, 301, 302, 303, 304]
    # back-to-back messages: payload keeps one beat per cycle across message boundaries
    span = tb.beats[-1][0] - tb.beats[0][0] + 1
    dut._log.info("4 messages: %d payload beats in %d cycles", len(tb.beats), span)
    assert len(tb.beats) == span == 188 + 128 + 65 + 1
    assert [p["psn"] for p in tb.pkts if p["qp"] == 6] == [600, 601, 602]
    # rewrite QP 3's context: next PSN restarts at the new start_psn
    tb.write_ctx(3, ctx_dict(0x333333, 42, base=0, count=4))
    for _ in range(3):
        await RisingEdge(dut.clk)
    wr = dict(qp=3, local_addr=0x20000, remote_va=0, length=100)
    tb.post(**wr)
    await tb.wait_packets(9)
    assert tb.pkts[-1]["psn"] == 42


@cocotb.test()
async def run_refused(dut):
    """Length 0, misaligned, unknown QP, too long, address overflow: dropped and counted."""
    qps = tb_param("qps", 8)
    tb = TB(dut)
    await tb.init(pmtu_log2=10)
    tb.write_ctx(0, ctx_dict(0x10, 10))
    fill(tb, 0x4000, 2048, 6)
    good = dict(qp=0, local_addr=0x4000, remote_va=0x9000, length=2048)
    bad = [dict(qp=0, local_addr=0x4000, remote_va=0, length=0),
           dict(qp=0, local_addr=0x4004, remote_va=0, length=64),
           dict(qp=4 if qps <= 4 else 7, local_addr=0x4000, remote_va=0, length=64),
           dict(qp=1, local_addr=0x4000, remote_va=0, length=64),     # context never written
           dict(qp=0, local_addr=0x4000, remote_va=0, length=(1 << 31) + 8),
           dict(qp=0, local_addr=0xFFFF_FF00, remote_va=0, length=0x108)]
    if qps > 4:
        tb.write_ctx(4, ctx_dict(0x40, 40))     # QP 4 exists here: fine; QP 7 unknown
    tb.post(**bad[0])
    tb.post(**good)
    for b in bad[1:]:
        tb.post(**b)
    tb.post(**good)
    await tb.wait_packets(4)
    assert int(dut.wr_refused.value) == len(bad)
    tb.check([{"opcode": WrOpcode.WRITE, "rkey": 0x1234ABCD, "imm": 0, **good}] * 2)
    assert [p["psn"] for p in tb.pkts] == [10, 11, 12, 13]


@cocotb.test()
async def run_backpressure(dut):
    """Random ready on pkt / payload / spray_req, slow scheduler, many small requests."""
    tb = TB(dut, pkt_ready=0.5, payload_ready=0.6, spray_ready=0.7, sched_lat=(0, 4), seed=7)
    await tb.init(pmtu_log2=8)
    tb.write_ctx(0, ctx_dict(0xAAA, 0xFFFFF0, count=7))
    tb.write_ctx(4, ctx_dict(0xBBB, 5, base=9, count=3))
    fill(tb, 0, 0x10000, 7)
    rng = random.Random(3)
    wrs = []
    for i, length in enumerate([1, 7, 8, 9, 255, 256, 257, 1025, 3000, 64, 2, 700]):
        addr = rng.choice([0x0FF8, 0x1FF0, 0x2000, 0x5A38, 0x7E00])
        wrs.append(dict(qp=rng.choice([0, 4]), local_addr=addr, remote_va=rng.getrandbits(48),
                        length=length, opcode=rng.choice(list(WrOpcode)), imm=i, rkey=i * 3,
                        wr_id=i))
    for wr in wrs:
        tb.post(**wr)
    n = sum(-(-w["length"] // 256) for w in wrs)
    await tb.wait_packets(n)
    tb.check(wrs)


@cocotb.test()
async def run_rresp_error(dut):
    """SLVERR beats: data (zeros) still delivered in place, errors counted, nothing hangs."""
    tb = TB(dut, ram_cls=ErrorRam)
    tb.ram.err_lo, tb.ram.err_hi = 0x6100, 0x6140
    await tb.init(pmtu_log2=8)
    tb.write_ctx(0, ctx_dict(0x1, 0))
    fill(tb, 0x6000, 1024, 8)
    wr = dict(qp=0, local_addr=0x6000, remote_va=0, length=1024)
    tb.post(**wr)
    await tb.wait_packets(4)

    def zeroed(exp, payload):
        lo = 0x6000 + exp["va"]
        return bytes(0 if 0x6100 <= lo + i < 0x6140 else b for i, b in enumerate(payload))

    tb.check([{"opcode": WrOpcode.WRITE, "rkey": 0x1234ABCD, "imm": 0, **wr}], mem_override=zeroed)
    assert int(dut.rd_errors.value) == 8
    assert tb.frames[1][:64] == bytes(64)


# ------------------------------------------------------- retransmission tests
FULL = {"opcode": WrOpcode.WRITE, "rkey": 0x1234ABCD, "imm": 0}


def counters(dut):
    return (int(dut.retransmits.value), int(dut.retx_unknown.value), int(dut.retx_same_path.value))


@cocotb.test()
async def run_retx_64k(dut):
    """Odd-length 64 KiB WRITE_IMM, then PSNs 3, 40, 63 (short last, imm) sent again on other entries."""
    tb = TB(dut, sched_lat=(0, 3), sent_ready=0.7, seed=11)
    await tb.init(pmtu_log2=10)
    tb.una = {2: 0}                        # nothing acknowledged: the message stays in the table
    tb.write_ctx(2, ctx_dict(0x00ABCD, 0, base=8, count=5))
    length = 63 * 1024 + 300
    fill(tb, 0x10000, 65536, 21)
    wr = dict(qp=2, opcode=WrOpcode.WRITE_IMM, local_addr=0x10000, remote_va=0x7F00_0000_1000,
              length=length, imm=0xD00DFEED, rkey=0x77)
    tb.post(**wr)
    await tb.wait_packets(64)
    by_psn = {p["psn"]: p for p in tb.pkts}
    # PSN 40: avoid the entry the round robin gives next, so one decision is refused
    nxt = 8 + (len(tb.decisions) + 1) % 5      # PSN 3 takes the next one
    reqs = [{"qp": 2, "psn": 3, "avoid_index": by_psn[3]["path"]["index"]},
            {"qp": 2, "psn": 40, "avoid_index": nxt},
            {"qp": 2, "psn": 63, "avoid_index": by_psn[63]["path"]["index"]}]
    n_dec = len(tb.decisions)
    for r in reqs:
        tb.retx(**r)
    await tb.wait_packets(67)
    tb.check_all([{**wr, "wr_id": 0}], [(r, False) for r in reqs])
    assert [s["retx"] for s in tb.sent] == [0] * 64 + [1] * 3
    retx = tb.pkts[64:]
    assert [p["psn"] for p in retx] == [3, 40, 63]
    assert retx[2]["length"] == 300 and retx[2]["last"] == 1 and retx[2]["opcode"] == 0x0B
    assert retx[2]["imm"] == 0xD00DFEED and retx[2]["va"] == 0x7F00_0000_1000 + 63 * 1024
    assert retx[0]["opcode"] == 0x0A and retx[0]["last"] == 0
    assert len(tb.decisions) - n_dec == 4, "PSN 40 should have needed exactly one more decision"
    assert counters(dut) == (3, 0, 0)


@cocotb.test()
async def run_retx_priority(dut):
    """Retransmissions overtake a long message within a few packets; unknown PSNs counted, no hang."""
    depth, fifo_depth = tb_param("pending_depth", 16), tb_param("fifo_depth", 1024)
    tb = TB(dut, sched_lat=(0, 2), seed=12)
    await tb.init(pmtu_log2=10)
    tb.una = {0: 1000, 1: 500}
    tb.write_ctx(1, ctx_dict(0x000011, 500, base=0, count=4))
    tb.write_ctx(0, ctx_dict(0x000010, 1000, base=4, count=3))
    fill(tb, 0, 0x12000, 22)
    short = dict(qp=1, local_addr=0x10000, remote_va=0x5000, length=3000)   # PSN 500..502
    long = dict(qp=0, local_addr=0x0, remote_va=0x9_0000_0000, length=65536)  # PSN 1000..1063
    tb.post(**short)
    await tb.wait_packets(3)
    tb.post(**long)
    await tb.wait_for(lambda: len(tb.frames) >= 3 + 20, what="20 packets of the long message")
    known = [{"qp": 1, "psn": 502, "avoid_index": tb.pkts[2]["path"]["index"]},
             {"qp": 0, "psn": 1005, "avoid_index": tb.pkts[3 + 5]["path"]["index"]}]
    tb.retx(**known[0])
    tb.retx(qp=1, psn=503, avoid_index=0)     # never sent
    tb.retx(qp=0, psn=1060, avoid_index=0)    # message accepted, packet not cut yet
    tb.retx(qp=1, psn=499, avoid_index=0)     # before the first message
    tb.retx(**known[1])
    tb.retx(qp=7, psn=0, avoid_index=0)       # QP without context
    await tb.wait_packets(3 + 64 + 2)
    assert not tb.retx_q
    tb.check_all([{**FULL, **short}, {**FULL, **long}], [(r, False) for r in known])
    assert tb.pkts[-1]["psn"] == 1063
    # each retransmission's payload leaves after at most the packets already cut:
    # min(pending_depth, fifo_depth / packet beats + 1)
    out = [i for i, s in enumerate(tb.sent) if s["retx"]]
    taken = [n for _, r, n in tb.retx_taken if r in known]
    lag = [o - t for o, t in zip(out, taken)]
    bound = min(depth, fifo_depth // 128 + 1) + 1
    dut._log.info("retransmission lag behind request (payload frames): %s (bound %d)", lag, bound)
    assert all(0 <= x <= bound for x in lag), lag
    assert tb.pkts[out[0]]["length"] == 3000 - 2048 and tb.pkts[out[0]]["last"] == 1
    assert counters(dut) == (2, 4, 0)


@cocotb.test()
async def run_tx_ok(dut):
    """tx_ok = 0 holds new packets of the QP (after those already cut) and retransmissions of
    trimmed copies (RETX_WINDOW_WAIT cycles at most), not those after an ACK timeout."""
    depth = tb_param("pending_depth", 16)
    tb = TB(dut, seed=13)
    await tb.init(pmtu_log2=8)
    tb.una = {3: 0}
    tb.write_ctx(3, ctx_dict(0x000033, 0, base=30, count=6))
    fill(tb, 0x40000, 32768, 23)
    wr = dict(qp=3, local_addr=0x40000, remote_va=0x1000, length=32768)      # 128 packets
    tb.post(**wr)
    await tb.wait_for(lambda: len(tb.pkts) >= 10, what="10 packets")
    tb.tx_ok = (1 << tb.qps) - 1 - (1 << 3)
    n_off = len(tb.pkts)
    await tb.wait_for(lambda: False if len(tb.frames) < len(tb.pkts) else True, what="payload drained")
    for _ in range(300):
        await RisingEdge(dut.clk)
    held = len(tb.pkts)
    assert held <= n_off + depth + 1, f"{held - n_off} packets after tx_ok fell"
    for _ in range(300):
        await RisingEdge(dut.clk)
    assert len(tb.pkts) == held, "new packets sent while tx_ok = 0"
    req = {"qp": 3, "psn": 2, "avoid_index": tb.pkts[2]["path"]["index"]}
    tb.retx(**req)
    await tb.wait_for(lambda: len(tb.frames) == held + 1, what="retransmission with tx_ok = 0")
    assert tb.sent[-1]["retx"] == 1 and tb.pkts[-1]["psn"] == 2
    for _ in range(100):
        await RisingEdge(dut.clk)
    assert len(tb.pkts) == held + 1
    # a trimmed copy's retransmission waits for the window, RETX_WINDOW_WAIT cycles at most
    trim3 = {"qp": 3, "psn": 3, "avoid_index": tb.pkts[3]["path"]["index"], "trim": 1}
    t0 = tb.cycle
    tb.retx(**trim3)
    await tb.wait_for(lambda: len(tb.frames) == held + 2, timeout=RETX_WINDOW_WAIT + 400,
                      what="trimmed copy's retransmission after the wait bound")
    assert tb.pkts[-1]["psn"] == 3
    waited = tb.cycle - t0
    assert RETX_WINDOW_WAIT <= waited <= RETX_WINDOW_WAIT + 200, waited
    # ... and goes as soon as the window opens
    trim4 = {"qp": 3, "psn": 4, "avoid_index": tb.pkts[4]["path"]["index"], "trim": 1}
    tb.retx(**trim4)
    for _ in range(400):
        await RisingEdge(dut.clk)
    assert len(tb.pkts) == held + 2, "a trimmed copy's retransmission sent with tx_ok = 0"
    t0 = tb.cycle
    tb.tx_ok = (1 << tb.qps) - 1
    await tb.wait_for(lambda: any(p["psn"] == 4 for p in tb.pkts[held + 2:]), timeout=200,
                      what="trimmed copy's retransmission once tx_ok is set")
    assert tb.cycle - t0 < 100
    await tb.wait_packets(131)
    tb.check_all([{**FULL, **wr}], [(req, False), (trim3, False), (trim4, False)])
    assert counters(dut) == (3, 0, 0)


@cocotb.test()
async def run_table_full(dut):
    """A full message table holds wr (no drop) until una releases a message; released PSNs are unknown."""
    msgs = tb_param("msgs", 4)
    tb = TB(dut, seed=14)
    await tb.init(pmtu_log2=8)
    tb.una = {3: 100}
    tb.write_ctx(3, ctx_dict(0x000033, 100, base=0, count=2))
    tb.write_ctx(5, ctx_dict(0x000055, 7, base=2, count=2))
    fill(tb, 0x2000, 8192, 24)
    wrs = [dict(qp=3, local_addr=0x2000 + 0x200 * k, remote_va=0x100000 * k, length=300)
           for k in range(msgs + 2)]                 # 2 packets each: PSNs 100+2k, 101+2k
    other = dict(qp=5, local_addr=0x3000, remote_va=0, length=8)
    for w in wrs:
        tb.post(**w)
    tb.post(**other)
    for _ in range(400):
        await RisingEdge(dut.clk)
    assert len(tb.wr_accepts) == msgs and len(tb.pkts) == 2 * msgs
    assert int(dut.wr__valid.value) and not int(dut.wr__ready.value), "full table must hold wr"
    retx = [({"qp": 3, "psn": 100, "avoid_index": 0}, False)]
    tb.retx(**retx[0][0])                                   # oldest message: still there
    await tb.wait_for(lambda: len(tb.pkts) == 2 * msgs + 1, what="retransmission of PSN 100")
    tb.una = {3: 101}                                       # message 0 not fully acknowledged
    for _ in range(100):
        await RisingEdge(dut.clk)
    assert len(tb.wr_accepts) == msgs
    tb.una = {3: 102}                                       # message 0 done: one slot
    await tb.wait_for(lambda: len(tb.wr_accepts) == msgs + 1, what="a slot after una")
    for _ in range(100):
        await RisingEdge(dut.clk)
    assert len(tb.wr_accepts) == msgs + 1
    tb.retx(qp=3, psn=101, avoid_index=0)                         # released: unknown
    tb.una = {3: 104}
    await tb.wait_packets(2 * (msgs + 2) + 1 + 1)
    assert counters(dut) == (1, 1, 0)
    tb.check_all([{**FULL, **w} for w in wrs + [other]], retx)


@cocotb.test()
async def run_retx_wrap(dut):
    """Retransmissions of a message whose PSNs wrap across 0xFFFFFF; release across the wrap."""
    tb = TB(dut, sched_lat=(0, 2), seed=15)
    await tb.init(pmtu_log2=8)
    tb.una = {1: 0xFFFFFD}
    tb.write_ctx(1, ctx_dict(0x000001, 0xFFFFFD, base=40, count=3))
    fill(tb, 0x8000, 2048, 25)
    wr = dict(qp=1, opcode=WrOpcode.WRITE_IMM, local_addr=0x8000, remote_va=0xFFFF_FFFF_FFFF_FE00,
              length=1500, imm=0x1234, rkey=9)             # PSNs FFFFFD..2, VA wraps too
    tb.post(**wr)
    await tb.wait_packets(6)
    assert [p["psn"] for p in tb.pkts] == [0xFFFFFD, 0xFFFFFE, 0xFFFFFF, 0, 1, 2]
    reqs = [{"qp": 1, "psn": p, "avoid_index": tb.pkts[k]["path"]["index"]}
            for k, p in ((2, 0xFFFFFF), (5, 2), (4, 1))]
    for r in reqs:
        tb.retx(**r)
    await tb.wait_packets(9)
    assert [p["psn"] for p in tb.pkts[6:]] == [0xFFFFFF, 2, 1]
    assert tb.pkts[7]["length"] == 1500 - 5 * 256 and tb.pkts[7]["opcode"] == 0x0B
    tb.una = {1: 2}                       # PSN 2 not acknowledged: the message stays
    for _ in range(50):
        await RisingEdge(dut.clk)
    reqs.append({"qp": 1, "psn": 0xFFFFFE, "avoid_index": tb.pkts[1]["path"]["index"]})
    tb.retx(**reqs[-1])
    await tb.wait_packets(10)
    tb.una = {1: 3}                       # all acknowledged across the wrap: released
    for _ in range(50):
        await RisingEdge(dut.clk)
    tb.retx(qp=1, psn=0, avoid_index=0)
    await tb.wait_packets(10)
    tb.check_all([{**wr, "wr_id": 0}], [(r, False) for r in reqs])
    assert counters(dut) == (4, 1, 0)


@cocotb.test()
async def run_retx_same_path(dut):
    """A profile with one eligible entry: the retransmission goes out on it anyway, counted."""
    tries = tb_param("retx_tries", 4)
    tb = TB(dut, seed=16)
    await tb.init(pmtu_log2=9)
    tb.una = {4: 10}
    tb.write_ctx(4, ctx_dict(0x000044, 10, base=77, count=1))
    fill(tb, 0x1000, 1024, 26)
    wr = dict(qp=4, local_addr=0x1000, remote_va=0x40, length=1024)
    tb.post(**wr)
    await tb.wait_packets(2)
    n_dec = len(tb.decisions)
    req = {"qp": 4, "psn": 11, "avoid_index": 77}
    tb.retx(**req)
    await tb.wait_packets(3)
    assert len(tb.decisions) - n_dec == tries
    tb.check_all([{**FULL, **wr}], [(req, True)])
    assert counters(dut) == (1, 0, 1)


# ------------------------------------------------------------ pytest wrappers
def test_segmenter(tmp_path):
    run_rtl(Segmenter(qps=8), toplevel="segmenter", test_module="tests.rtl.test_segmenter",
            build_dir=tmp_path / "q8", env={"qps": 8}, quiet=True)


def test_segmenter_refused_qps4(tmp_path):
    run_rtl(Segmenter(qps=4), toplevel="segmenter", test_module="tests.rtl.test_segmenter",
            build_dir=tmp_path / "q4", env={"qps": 4}, testcase="run_refused", quiet=True)


def test_segmenter_min_pending(tmp_path):
    """Smallest pending_depth (4): the registered room checks (two cycles early, FIFO
    writes a cycle after the cut) never overfill the per-packet FIFOs under backpressure."""
    run_rtl(Segmenter(qps=8, pending_depth=4), toplevel="segmenter",
            test_module="tests.rtl.test_segmenter", build_dir=tmp_path / "p4",
            env={"qps": 8, "pending_depth": 4}, testcase="run_backpressure", quiet=True)


@pytest.mark.parametrize("kwargs", [{"qps": 0}, {"qps": 9}, {"fifo_depth": 256},
                                    {"pending_depth": 1}, {"pending_depth": 3},
                                    {"msgs": 3}, {"msgs": 32},
                                    {"retx_tries": 0}])
def test_segmenter_bad_params(kwargs):
    with pytest.raises(ValueError):
        Segmenter(**kwargs)
