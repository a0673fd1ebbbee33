"""RX parser and validator: valid frames come out exact, every bad frame is counted, never emitted.

cocotb testbench (coroutines ``run_*``) + pytest wrapper (``test_*``).  Frames are built
with ``mrcnic.wire`` (Scapy) and put in their arrival form; expected records and payloads
come from Scapy's dissection; a small byte-level reference model (:func:`ref_reason`)
decides which mutated frames are valid in the fuzz run.
"""

import ipaddress
import random
import struct
import zlib
from collections import deque

import cocotb
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether
from scapy.packet import Raw, fuzz

from mrcnic import wire
from mrcnic.rtl.layouts import EvMode, MemRegion, RxKind, RxPacket, RxQpContext
from mrcnic.rtl.rx_parser import CNT_RD_LATENCY, DropReason, RxParser
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.fuzz import random_tlv_area
from mrcnic.sim.tb import StreamSink, pack, start, unpack

R = DropReason
PORT = 2
BLOCK = 0xFC00_0000
OWN_USID = 0x0042
OWN_IP = "2001:db8:0:1::2"
PEER_IP = "2001:db8:0:9::1"
TRIM_DSCP = 46
MAX_FRAME = 8192
FUZZ_FRAMES = 400   #: mutated frames in the pytest run (10,000 at the RX top level)
MACS = dict(src_mac="02:00:00:00:00:09", dst_mac="02:00:00:00:00:01")
SRV6, STEV, UDPM = EvMode.SRV6, EvMode.STEV, EvMode.UDP
MODE_NAME = {SRV6: "SRV6", STEV: "STEV", UDPM: "UDP"}
#: (valid, qpn, mode) of the 8 receive QP contexts
QPS = [(1, 0x000100, SRV6), (1, 0x000201, STEV), (1, 0x000302, UDPM), (1, 0xABCDEF, SRV6),
       (1, 0x000504, STEV), (1, 0xFFFFFF, UDPM), (1, 0x000706, SRV6), (0, 0x000807, SRV6)]
#: (valid, rkey, va, length, base) of the 4 memory regions
REGIONS = [(1, 0x11110000, 0x1_0000_0000, 0x20000, 0x8000_0000),
           (1, 0x22220000, 0x0040_0000, 8192, 0x0000_1000),
           (0, 0x33330000, 0x0, 0x1000_0000, 0x0),
           (1, 0x44440000, 0xFFFF_FFFF_FFFF_0000, 0x10000, 0x2000_0000)]
SRV6_DA = (BLOCK << 96) | (OWN_USID << 80)
OWN_IP_INT = int(ipaddress.IPv6Address(OWN_IP))


# --------------------------------------------------------------------------- frames
def make_path(mode, ev, srh=False, rng=random):
    if mode == SRV6:
        if srh:
            n = rng.choice([7, 12, 18])
            usids = [rng.randrange(1, 0xFFFF) for _ in range(n - 1)] + [OWN_USID]
        else:
            usids = [rng.randrange(1, 0xFFFF) for _ in range(rng.randrange(0, 5))] + [OWN_USID]
        return wire.PathEncap(ev=ev, port=PORT, mode="SRV6", block=BLOCK, usids=usids)
    return wire.PathEncap(ev=ev, port=PORT, mode=MODE_NAME[mode], dst_ip=OWN_IP)


def qp_of(mode, rng=random):
    return rng.choice([i for i, q in enumerate(QPS) if q[0] and q[2] == mode])


def data_frame(rng, size=None, mode=None, srh=None, imm="rand", ecn=None, trim=False, region=None,
               va_off=None):
    mode = rng.choice([SRV6, STEV, UDPM]) if mode is None else mode
    srh = (rng.random() < 0.5) if srh is None else srh
    size = rng.randrange(1, 200) if size is None else size
    region = rng.choice([0, 1, 3]) if region is None else region
    _, rkey, rva, rlen, _ = REGIONS[region]
    va = rva + (rng.randrange(0, rlen - size + 1) if va_off is None else va_off)
    qp = qp_of(mode, rng)
    ecn = rng.choice([wire.ECN_ECT0, wire.ECN_CE]) if ecn is None else ecn
    if imm == "rand":
        imm = rng.randrange(1 << 32) if rng.random() < 0.3 else None
    frame = wire.build_data_frame(
        **MACS, src_ip=PEER_IP, path=make_path(mode, rng.randrange(1 << 32), srh, rng),
        qpn=QPS[qp][1], psn=rng.randrange(1 << 24), va=va, rkey=rkey,
        payload=rng.randbytes(size), imm=imm, last=rng.random() < 0.5, ecn=ecn)
    frame = wire.arrival_form(frame, BLOCK)
    return wire.trim_frame(frame, TRIM_DSCP) if trim else frame


def ack_frame(rng, mode=None, srh=None):
    mode = rng.choice([SRV6, STEV, UDPM]) if mode is None else mode
    srh = (rng.random() < 0.5) if srh is None else srh
    frame = wire.build_ack_frame(
        **MACS, src_ip=PEER_IP, path=make_path(mode, rng.randrange(1 << 32), srh, rng),
        qpn=QPS[qp_of(mode, rng)][1], psn=rng.randrange(1 << 24), ev=rng.randrange(1 << 32),
        base_psn=rng.randrange(1 << 24), bitmap=rng.randrange(1 << 64),
        flags=rng.randrange(8), ts=rng.randrange(1 << 32),
        syndrome=rng.choice([wire.AETH_ACK, wire.AETH_NAK_PSN]), msn=rng.randrange(1 << 24))
    return wire.arrival_form(frame, BLOCK)


def probe_frame(rng, mode=None, srh=None):
    mode = rng.choice([SRV6, STEV, UDPM]) if mode is None else mode
    srh = (rng.random() < 0.5) if srh is None else srh
    frame = wire.build_probe_frame(
        **MACS, src_ip=PEER_IP, path=make_path(mode, rng.randrange(1 << 32), srh, rng),
        qpn=QPS[qp_of(mode, rng)][1], probe_id=rng.randrange(1 << 16), ts=rng.randrange(1 << 32))
    return wire.arrival_form(frame, BLOCK)


def any_frame(rng, max_size=200):
    r = rng.random()
    if r < 0.6:
        return data_frame(rng, size=rng.randrange(1, max_size))
    if r < 0.75:
        return data_frame(rng, size=rng.randrange(1, max_size), trim=True)
    return ack_frame(rng) if r < 0.9 else probe_frame(rng)


def fix_icrc(frame) -> bytes:
    """Rewrite the trailing 4 bytes with the ICRC of ``frame`` as it stands.

    Uses ``wire.icrc``; for a frame whose next-header chain is broken on purpose, the
    same masks at the positions the header fields occupy (UDP after IPv6 [+ SRH]).
    """
    try:
        crc = wire.icrc(frame)
    except ValueError:
        v = bytearray(frame)
        v[6:14] = b"\xff" * 8
        v[14] |= 0x0F
        v[15:18] = b"\xff\xff\xff"
        v[21] = 0xFF
        u = l4_offset(frame)
        v[u + 6:u + 8] = b"\xff\xff"
        v[u + 12:u + 13] = b"\xff"
        crc = zlib.crc32(bytes(v[6:-4]))
    return frame[:-4] + struct.pack("<I", crc)


def l4_offset(frame) -> int:
    return 54 + (8 + 8 * frame[55] if frame[20] == 43 else 0)


def poke(frame, off, value: bytes, icrc=True) -> bytes:
    b = bytearray(frame)
    b[off:off + len(value)] = value
    return fix_icrc(bytes(b)) if icrc else bytes(b)


# --------------------------------------------------------------------------- oracle
def expect(frame):
    """(RxPacket fields, payload bytes or None) of a valid frame, from Scapy's dissection."""
    p = Ether(frame)
    ip, udp, bth = p[IPv6], p[UDP], p[wire.BTH]
    qp = next(i for i, q in enumerate(QPS) if q[0] and q[1] == bth.dqpn)
    mode = QPS[qp][2]
    ev = (udp.sport & 0x3FFF) if mode == UDPM else ip.fl | (udp.sport & 0xFFF) << 20
    zero_ack = dict(syndrome=0, msn=0, ev=0, flags=0, base_psn=0, bitmap=0, ts=0)
    rec = dict(port=PORT, qp=qp, psn=bth.psn, opcode=bth.opcode, last=bth.ackreq, ev=ev,
               ecn_ce=int(ip.tc & 3 == 3), has_imm=0, imm=0, va=0, addr=0, length=0,
               trimmed=0, probe_id=0, ts=0, ack=zero_ack)
    payload = None
    if bth.opcode in (wire.OP_WRITE_ONLY, wire.OP_WRITE_ONLY_IMM):
        reth = p[wire.RETH]
        region = next(r for r in REGIONS if r[0] and r[1] == reth.rkey
                      and r[2] <= reth.va and reth.va + reth.dmalen <= r[2] + r[3])
        trimmed = (ip.tc >> 2) == TRIM_DSCP
        rec.update(kind=RxKind.DATA, va=reth.va, addr=(region[4] + reth.va - region[2]) & 0xFFFFFFFF,
                   length=reth.dmalen, trimmed=int(trimmed))
        if bth.opcode == wire.OP_WRITE_ONLY_IMM:
            rec.update(has_imm=1, imm=p[wire.ImmDt].imm)
        if not trimmed:
            payload = bytes(p[Raw].load)[:reth.dmalen]
    elif bth.opcode == wire.OP_PROBE:
        pr = p[wire.MRCProbe]
        rec.update(kind=RxKind.PROBE, probe_id=pr.probe_id, ts=pr.ts)
    else:
        a, s = p[wire.AETH], p[wire.MRCSack]
        rec.update(kind=RxKind.ACK, ack=dict(syndrome=a.syndrome, msn=a.msn, ev=s.ev,
                                            flags=int(s.flags), base_psn=s.base_psn,
                                            bitmap=s.bitmap, ts=s.ts))
    return rec, payload


def srh_tlvs_bad(area: bytes) -> bool:
    """The SRH TLV rule (RFC 8754 section 2.1, as the parser applies it) on the TLV area.

    Pad1 (type 0) is one byte, any other TLV type, length and ``length`` bytes; the TLVs
    must fill the area exactly, and no two may start in one 8-byte beat (the area starts
    at lane 6 of a beat, so TLV byte ``p`` is in beat ``(p + 6) // 8``)."""
    p, beat = 0, None
    while p < len(area):
        if (p + 6) // 8 == beat:
            return True                        # a second TLV start in one beat
        beat = (p + 6) // 8
        if area[p] == 0:
            p += 1
        elif p + 1 >= len(area):
            return True                        # its length byte is past the SRH
        else:
            p += 2 + area[p + 1]
    return p != len(area)


with_tlvs = wire.srh_add_tlvs


#: SRH TLV areas the parser accepts: PadN filling a word, two words, an HMAC-like TLV
#: (type 5) of 40 bytes, a TLV of 6 bytes then a PadN of 2, a Pad1 after a TLV of 7
GOOD_TLVS = [b"\x04\x06" + bytes(6), b"\x04\x06" + bytes(6) + b"\x04\x06" + bytes(6),
             b"\x04\x0e" + bytes(14), b"\x05\x26" + bytes(38),
             b"\x07\x04abcd\x04\x00", b"\x07\x05abcde\x00"]
#: and areas it drops under SRH: a PadN one byte too long, a length far past the SRH, a
#: length byte past the SRH, two TLV starts in one beat (PadN of 0 twice), Pad1 + PadN
BAD_TLVS = [b"\x04\x07" + bytes(6), b"\x04\xc8" + bytes(6), b"\x04\x05" + bytes(5) + b"\x04",
            b"\x04\x00\x04\x00\x04\x02" + bytes(2), b"\x00\x04\x05" + bytes(5)]


def ref_reason(f: bytes, bad_keep=False):
    """Reference verdict on raw bytes: None (accepted) or the DropReason (lowest index first)."""
    n = len(f)
    if bad_keep or n > MAX_FRAME:
        return R.FRAMING
    if n < 14:
        return R.RUNT
    if f[12:14] != b"\x86\xdd":
        return R.ETHERTYPE
    if n < 56:
        return R.RUNT
    nh, has_srh = f[20], f[20] == 43
    srh_len = 8 + 8 * f[55] if has_srh else 0
    u = 54 + srh_len
    if n < u + 24:
        return R.RUNT
    op = f[u + 8]
    is_data, is_ack, is_probe = op in (0x0A, 0x0B), op == 0x11, op == 0xC0
    ext = (20 if op == 0x0B else 16) if is_data else 24 if is_ack else 12 if is_probe else 0
    if n < u + 20 + ext + 4:
        return R.RUNT
    if f[14] >> 4 != 6:
        return R.VERSION
    plen = int.from_bytes(f[18:20], "big")
    if plen + 54 != n:
        return R.IPV6_LENGTH
    if not (nh == 17 or (has_srh and f[56] == 4 and f[54] == 17)):
        return R.NEXT_HEADER
    if has_srh and (f[57] != 0 or f[57] > f[58] or f[55] < 2 * (f[58] + 1)
                    or srh_tlvs_bad(f[62 + 16 * (f[58] + 1):u])):
        return R.SRH
    da = int.from_bytes(f[38:54], "big")
    d6, dip = da == SRV6_DA, da == OWN_IP_INT
    dqpn = int.from_bytes(f[u + 13:u + 16], "big")
    qp = next((q for q in QPS if q[0] and q[1] == dqpn), None)
    if not (d6 or dip) or (qp is not None and not (d6 if qp[2] == SRV6 else dip)):
        return R.DA
    if int.from_bytes(f[u + 2:u + 4], "big") != 4791:
        return R.UDP_PORT
    if int.from_bytes(f[u + 4:u + 6], "big") + srh_len != plen:
        return R.UDP_LENGTH
    if not (is_data or is_ack or is_probe):
        return R.OPCODE
    if f[u + 9] & 0xF or f[u + 10:u + 12] != b"\xff\xff":
        return R.BTH
    if qp is None:
        return R.QPN
    trimmed = is_data and ((f[14] & 0xF) << 2 | f[15] >> 6) == TRIM_DSCP
    if is_data:
        va, rkey, dmalen = struct.unpack("!QII", f[u + 20:u + 36])
        if not any(r[0] and r[1] == rkey and r[2] <= va and va + dmalen <= r[2] + r[3]
                   for r in REGIONS):
            return R.RKEY
        pad = (f[u + 9] >> 4) & 3
        if (dmalen == 0 or dmalen > 4096 or pad != (-dmalen) & 3
                or (not trimmed and plen != srh_len + (44 if op == 0x0B else 40) + dmalen + pad)):
            return R.DMALEN
    if (is_ack and plen != srh_len + 48) or (is_probe and plen != srh_len + 36):
        return R.DMALEN
    if not trimmed and not wire.check_icrc(f):
        return R.ICRC
    return None


# --------------------------------------------------------------------------- testbench
INPUTS = ["s_axis__tvalid", "s_axis__tdata", "s_axis__tkeep", "s_axis__tlast", "pkt__ready",
          "payload__tready", "own_usid", "locator_block", "own_ip", "trim_dscp",
          "qp_w_en", "qp_w_addr", "qp_w_data", "mr_w_en", "mr_w_addr", "mr_w_data",
          "cnt_rd_stb", "cnt_rd_addr"]


class TaggedSource:
    """Drives ``s_axis`` with ``s_port`` (the frame's plane) on every beat, random idle cycles.

    Between beats ``s_port`` carries garbage: the parser must take it with the beats only.
    """

    def __init__(self, dut, seed):
        self.dut, self.rng = dut, random.Random(seed)
        self.queue, self.busy = deque(), False
        cocotb.start_soon(self._run())

    async def send(self, frame, port, tkeep=None):
        self.queue.append((frame, port, tkeep))

    def empty(self):
        return not self.queue and not self.busy

    async def _run(self):
        d = self.dut
        while True:
            if not self.queue:
                self.busy = False
                d.s_axis__tvalid.value = 0
                await RisingEdge(d.clk)
                continue
            self.busy = True
            frame, port, tkeep = self.queue.popleft()
            keep = tkeep or [1] * len(frame)
            nbeats = (len(frame) + 7) // 8
            for k in range(nbeats):
                while self.rng.random() < 0.2:
                    d.s_axis__tvalid.value = 0
                    d.s_port.value = self.rng.randrange(8)
                    await RisingEdge(d.clk)
                chunk = frame[8 * k:8 * k + 8]
                d.s_axis__tdata.value = int.from_bytes(chunk.ljust(8, b"\0"), "little")
                d.s_axis__tkeep.value = sum(keep[8 * k + i] << i for i in range(len(chunk)))
                d.s_axis__tlast.value = int(k == nbeats - 1)
                d.s_axis__tvalid.value = 1
                d.s_port.value = port
                await RisingEdge(d.clk)
                while not int(d.s_axis__tready.value):
                    await RisingEdge(d.clk)


class TB:
    """Owns the DUT: frame source, record and payload sinks, table set-up, counters."""

    def __init__(self, dut, backpressure=False, seed=1, tagged=False):
        self.dut = dut
        self.rng = random.Random(seed)
        if tagged:
            self.source = TaggedSource(dut, seed + 2)
        else:
            self.source = AxiStreamSource(
                AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "payload", bus_separator="__"),
                                  dut.clk, dut.rst)
        prng = random.Random(seed + 1)
        pause = (lambda: prng.random() < 0.3) if backpressure else None
        if backpressure:
            if not tagged:               # (the tagged source inserts its own idle cycles)
                self.source.set_pause_generator(iter(lambda: prng.random() < 0.2, None))
            self.sink.set_pause_generator(iter(lambda: prng.random() < 0.3, None))
        self.pkts = StreamSink(dut, "pkt", dut.clk, pause=pause)

    async def configure(self):
        d = self.dut
        d.own_usid.value = OWN_USID
        d.locator_block.value = BLOCK
        d.own_ip.value = OWN_IP_INT
        d.trim_dscp.value = TRIM_DSCP
        for i, (valid, qpn, mode) in enumerate(QPS):
            d.qp_w_en.value, d.qp_w_addr.value = 1, i
            d.qp_w_data.value = pack(RxQpContext, dict(valid=valid, qpn=qpn, mode=mode,
                                                       peer_qpn=0x77, peer_usid=7, start_psn=0))
            await RisingEdge(d.clk)
        d.qp_w_en.value = 0
        for i, (valid, rkey, va, length, base) in enumerate(REGIONS):
            d.mr_w_en.value, d.mr_w_addr.value = 1, i
            d.mr_w_data.value = pack(MemRegion, dict(valid=valid, rkey=rkey, va=va,
                                                     length=length, base=base))
            await RisingEdge(d.clk)
        d.mr_w_en.value = 0
        await RisingEdge(d.clk)

    def counters(self, name="drops", n=len(R)):
        v = int(getattr(self.dut, name).value)
        return [(v >> (32 * i)) & 0xFFFFFFFF for i in range(n)]

    async def send(self, frame, tkeep=None):
        await self.source.send(AxiStreamFrame(frame, tkeep=tkeep))

    async def drain(self, quiet=40, limit=200000):
        """Wait until the source is idle and both outputs have been quiet for ``quiet`` cycles."""
        d, calm = self.dut, 0
        for _ in range(limit):
            await RisingEdge(d.clk)
            busy = (not self.source.empty() or int(d.s_axis__tvalid.value)
                    or int(d.pkt__valid.value) or int(d.payload__tvalid.value))
            calm = 0 if busy else calm + 1
            if calm >= quiet:
                return
        raise AssertionError("the parser did not go idle (hang or stall)")

    def received(self):
        recs = [unpack(RxPacket, v) for v in self.pkts.items]
        self.pkts.items.clear()
        pays = []
        while not self.sink.empty():
            pays.append(bytes(self.sink.recv_nowait().tdata))
        return recs, pays


def check_output(recs, pays, frames, ports=None):
    """Records and payloads must be exactly those Scapy expects for ``frames``, in order.

    ``ports``: the plane each frame was tagged with (shared mode); else every frame is on PORT.
    """
    exp = [expect(f) for f in frames]
    if ports is not None:
        for (want, _), port in zip(exp, ports):
            want["port"] = port
    assert len(recs) == len(exp), f"{len(recs)} records for {len(exp)} accepted frames"
    for i, (got, (want, _)) in enumerate(zip(recs, exp)):
        for k, v in want.items():
            assert got[k] == v, f"frame {i}: {k} = {got[k]!r}, expected {v!r}"
    want_pays = [p for _, p in exp if p is not None]
    assert len(pays) == len(want_pays), f"{len(pays)} payload frames, expected {len(want_pays)}"
    for i, (g, w) in enumerate(zip(pays, want_pays)):
        assert g == w, f"payload {i}: {len(g)} bytes differ from the expected {len(w)}"


async def setup(dut, **kw):
    await start(dut, INPUTS + (["s_port"] if kw.get("tagged") else []))
    tb = TB(dut, **kw)
    await tb.configure()
    return tb


@cocotb.test()
async def run_valid(dut):
    """Payload 1..127, 1024, 4096 over SRV6 (with/without SRH), STEV, UDP; ACK, probe, trimmed."""
    tb = await setup(dut, backpressure=True, seed=11)
    rng = tb.rng
    modes = [(SRV6, False), (SRV6, True), (STEV, False), (UDPM, False)]
    frames = []
    for size in list(range(1, 128)) + [1024, 4096, 4096]:
        mode, srh = modes[size % 4]
        frames.append(data_frame(rng, size=size, mode=mode, srh=srh,
                                 imm=rng.randrange(1 << 32) if size % 3 == 0 else None))
    for mode, srh in modes:
        frames += [ack_frame(rng, mode, srh), probe_frame(rng, mode, srh),
                   data_frame(rng, mode=mode, srh=srh, trim=True),
                   data_frame(rng, mode=mode, srh=srh, imm=5, trim=True),
                   data_frame(rng, size=8, mode=mode, srh=srh, region=3)]
    # SRHs with TLVs (RFC 8754 section 2.1) are accepted: data, an ACK and a probe
    frames += [with_tlvs(data_frame(rng, size=17 * i + 1, mode=SRV6, srh=True), t)
               for i, t in enumerate(GOOD_TLVS)]
    frames += [with_tlvs(ack_frame(rng, SRV6, True), GOOD_TLVS[3]),
               with_tlvs(probe_frame(rng, SRV6, True), GOOD_TLVS[4])]
    for f in frames:
        assert ref_reason(f) is None
        await tb.send(f)
    await tb.drain()
    recs, pays = tb.received()
    check_output(recs, pays, frames)
    assert sum(tb.counters()) == 0, f"drops {tb.counters()}"
    acc = tb.counters("accepted", 3)
    assert acc == [len(frames) - 10, 5, 5], acc


def rule_cases(rng):
    """(reason, frame, tkeep or None) triples, each frame breaking exactly one rule."""
    base = lambda **kw: data_frame(rng, size=rng.randrange(1, 64), **kw)   # noqa: E731
    cases = []

    def add(reason, frame, tkeep=None):
        cases.append((reason, frame, tkeep))

    f = base()
    hole = [1] * len(f)
    hole[30] = 0
    add(R.FRAMING, f, hole)
    f = base(mode=STEV)
    add(R.FRAMING, f, [1] * (len(f) - 9) + [0] + [1] * 8)        # partial beat before tlast
    big = data_frame(rng, size=4096, region=0)
    add(R.FRAMING, big + bytes(MAX_FRAME - len(big) + 8))
    add(R.ETHERTYPE, poke(base(), 12, b"\x08\x00", icrc=False))
    add(R.ETHERTYPE, bytes(rng.randrange(256) for _ in range(12)) + b"\x88\xcc" + bytes(50))
    add(R.RUNT, base()[:9])
    add(R.RUNT, base()[:70])
    f = base(srh=True, mode=SRV6)
    add(R.RUNT, f[:l4_offset(f) + 30])
    add(R.RUNT, ack_frame(rng)[:-5])
    add(R.VERSION, poke(base(), 14, bytes([0x40 | (base()[14] & 0xF)])))
    f = base()
    tail = f[:-4] + rng.randbytes(4)              # 4 bytes more than IPv6 says, valid ICRC
    add(R.IPV6_LENGTH, fix_icrc(tail + bytes(4)))
    add(R.NEXT_HEADER, poke(base(srh=False, mode=STEV), 20, b"\x06"))
    f = base(srh=True, mode=SRV6)
    add(R.NEXT_HEADER, poke(f, 56, b"\x03"))
    add(R.NEXT_HEADER, poke(f, 54, b"\x06"))
    f = base(srh=True, mode=SRV6)
    add(R.SRH, poke(f, 57, b"\x01"))
    add(R.SRH, poke(f, 58, bytes([f[58] + 1])))
    for tlvs in BAD_TLVS:
        add(R.SRH, with_tlvs(base(srh=True, mode=SRV6), tlvs))
    add(R.DA, poke(base(mode=SRV6, srh=False), 53, b"\x01"))
    add(R.DA, poke(base(mode=SRV6, srh=False), 38, OWN_IP_INT.to_bytes(16, "big")))
    add(R.DA, poke(base(mode=UDPM), 38, SRV6_DA.to_bytes(16, "big")))
    add(R.DA, poke(base(mode=STEV), 40, b"\xde\xad"))
    f = base()
    add(R.UDP_PORT, poke(f, l4_offset(f) + 2, b"\x12\xb8"))
    f = base()
    u = l4_offset(f)
    add(R.UDP_LENGTH, poke(f, u + 4, (int.from_bytes(f[u + 4:u + 6], "big") + 4).to_bytes(2, "big")))
    for op in (0x04, 0x06, 0x0C, 0x12, 0xC1):
        f = base()
        add(R.OPCODE, poke(f, l4_offset(f) + 8, bytes([op])))
    f = base()
    u = l4_offset(f)
    add(R.BTH, poke(f, u + 9, bytes([f[u + 9] | 1])))
    add(R.BTH, poke(f, u + 10, b"\x7f\xff"))
    for qpn in (0x000101, QPS[7][1]):
        f = base(mode=SRV6)
        add(R.QPN, poke(f, l4_offset(f) + 13, qpn.to_bytes(3, "big")))
    f = probe_frame(rng)
    add(R.QPN, poke(f, l4_offset(f) + 13, (0x123456).to_bytes(3, "big")))
    f = base(region=1)
    u = l4_offset(f)
    va, rkey, dmalen = struct.unpack("!QII", f[u + 20:u + 36])
    add(R.RKEY, poke(f, u + 28, (0x11111111).to_bytes(4, "big")))
    add(R.RKEY, poke(f, u + 28, REGIONS[2][1].to_bytes(4, "big")))
    add(R.RKEY, poke(f, u + 20, (REGIONS[1][2] - 1).to_bytes(8, "big")))
    add(R.RKEY, poke(f, u + 20, (REGIONS[1][2] + REGIONS[1][3] - dmalen + 1).to_bytes(8, "big")))
    f = base(region=0, va_off=0x100)
    u = l4_offset(f)
    dmalen = int.from_bytes(f[u + 32:u + 36], "big")
    add(R.DMALEN, poke(f, u + 32, (dmalen + 4).to_bytes(4, "big")))
    add(R.DMALEN, poke(f, u + 32, (5000).to_bytes(4, "big")))
    add(R.DMALEN, poke(f, u + 9, bytes([f[u + 9] ^ 0x10])))
    z = data_frame(rng, size=4, region=0)
    add(R.DMALEN, poke(z, l4_offset(z) + 32, bytes(4)))
    a = bytearray(ack_frame(rng, srh=False))
    struct.pack_into("!H", a, 18, struct.unpack_from("!H", a, 18)[0] + 4)
    struct.pack_into("!H", a, 58, struct.unpack_from("!H", a, 58)[0] + 4)
    add(R.DMALEN, fix_icrc(bytes(a[:-4]) + b"\x01\x02\x03\x04" + bytes(4)))
    f = bytearray(base())
    f[-7] ^= 0x20
    add(R.ICRC, bytes(f))
    f = bytearray(base())
    f[-1] ^= 0x55
    add(R.ICRC, bytes(f))
    add(R.ICRC, poke(ack_frame(rng), 14, bytes([0x60 | (TRIM_DSCP >> 2)]), icrc=False)[:-4] + bytes(4))
    # a probe cut to its BTH by a trimmer that does not know probes (lengths rewritten,
    # zero trailer): the probe header is missing, a RUNT (wire.trim_frame forwards it whole)
    p = bytearray(probe_frame(rng))
    u = l4_offset(p)
    cut = p[:u + 20] + bytes(4)
    struct.pack_into("!H", cut, 18, len(cut) - 54)
    struct.pack_into("!H", cut, u + 4, len(cut) - u)
    add(R.RUNT, bytes(cut))
    # a trim-marked probe is forwarded whole and accepted (its reply must come back)
    assert ref_reason(wire.trim_frame(probe_frame(rng), TRIM_DSCP)) is None
    return cases


@cocotb.test()
async def run_rules(dut):
    """Each rule broken alone: dropped, counted under its reason, nothing out, next frame fine."""
    tb = await setup(dut, seed=21)
    rng = tb.rng
    covered = set()
    for reason, bad, tkeep in rule_cases(rng):
        assert ref_reason(bad, bad_keep=tkeep is not None) == reason, (reason, ref_reason(bad))
        good = any_frame(rng)
        before = tb.counters()
        acc = tb.counters("accepted", 3)
        await tb.send(bad, tkeep)
        await tb.send(good)
        await tb.drain(quiet=20)
        after = tb.counters()
        delta = [a - b for a, b in zip(after, before)]
        want = [int(i == reason) for i in range(len(R))]
        assert delta == want, f"{reason.name}: drop counters moved by {delta}"
        recs, pays = tb.received()
        check_output(recs, pays, [good])
        assert sum(tb.counters("accepted", 3)) == sum(acc) + 1
        covered.add(reason)
    assert covered == set(R), f"rules without a test: {set(R) - covered}"


def mutate(rng, frame):
    """One random mutation: (frame, bad tkeep?)."""
    kind = rng.randrange(10)
    f = bytearray(frame)
    if kind == 9 and f[20] == 43:                  # an SRH TLV area of random TLVs
        return with_tlvs(bytes(f), random_tlv_area(rng)), False
    if kind == 0:                                  # bit flips, ICRC left alone
        for _ in range(rng.randrange(1, 4)):
            f[rng.randrange(len(f))] ^= 1 << rng.randrange(8)
        return bytes(f), False
    if kind == 1:                                  # a header byte rewritten, ICRC recomputed
        i = rng.randrange(min(len(f) - 4, 140))
        f[i] = rng.randrange(256)
        try:
            return fix_icrc(bytes(f)), False
        except ValueError:
            return bytes(f), False
    if kind == 2:                                  # truncated anywhere
        return bytes(f[:rng.randrange(1, len(f))]), False
    if kind == 3:                                  # random bytes
        return rng.randbytes(rng.randrange(1, 200)), False
    if kind == 4:                                  # extended
        return bytes(f) + rng.randbytes(rng.randrange(1, 20)), False
    if kind == 5:                                  # sparse tkeep
        return bytes(f), True
    # Scapy fuzz() of one layer, the layers around it real
    p = Ether(bytes(frame))
    layers = [lay for lay in (IPv6, IPv6ExtHdrSegmentRouting, UDP, wire.BTH, wire.RETH,
                              wire.AETH, wire.MRCSack, wire.MRCProbe) if lay in p]
    target = p[rng.choice(layers)]
    rest = target.payload.copy()
    fz = fuzz(target.copy())
    fz.remove_payload()
    under = target.underlayer
    under.remove_payload()
    under.add_payload(fz / rest)
    out = bytes(p)
    if rng.random() < 0.5 and len(out) > 60:
        try:
            out = fix_icrc(out)
        except (ValueError, IndexError):
            pass
    return out, False


@cocotb.test()
async def run_fuzz(dut):
    """Mutated frames (Scapy fuzz(), truncations, random bytes, bit flips, sparse tkeep)
    interleaved with valid frames: exactly the valid ones come out, nothing stalls."""
    n = tb_param("fuzz_frames", FUZZ_FRAMES)
    tb = await setup(dut, backpressure=True, seed=31)
    rng = tb.rng
    accepted, drops = [], [0] * len(R)
    for i in range(n):
        good = any_frame(rng, 48)
        frame, bad_keep = mutate(rng, any_frame(rng, 48))
        bad_keep = bad_keep and len(frame) > 1
        reason = ref_reason(frame, bad_keep)
        tkeep = None
        if bad_keep:
            tkeep = [1] * len(frame)
            tkeep[rng.randrange(len(frame) - 1)] = 0
        if reason is None:
            accepted.append(frame)
        else:
            drops[reason] += 1
        await tb.send(frame, tkeep)
        accepted.append(good)
        await tb.send(good)
        if i % 100 == 99:
            await tb.drain(quiet=10)
    await tb.drain()
    recs, pays = tb.received()
    check_output(recs, pays, accepted)
    assert tb.counters() == drops, f"drops {tb.counters()} != model {drops}"
    dut._log.info("fuzz: %d frames, %d accepted, drops %s", 2 * n, len(accepted),
                  {r.name: drops[r] for r in R if drops[r]})


@cocotb.test()
async def run_throughput(dut):
    """Back-to-back valid frames, outputs always ready: one beat per clock, tready never low."""
    tb = await setup(dut, seed=41)
    rng = tb.rng
    d = dut
    for size in (64, 256, 1024, 4096):
        frames = [data_frame(rng, size=size, region=0, imm=None) for _ in range(6)]
        frames += [data_frame(rng, size=size, region=0, imm=7, srh=True, mode=SRV6)
                   for _ in range(3)]
        total = sum((len(f) + 7) // 8 for f in frames)
        for f in frames:
            await tb.send(f)
        beats = cycles = stalls = 0
        while beats < total:
            await RisingEdge(d.clk)
            valid = int(d.s_axis__tvalid.value)
            ready = int(d.s_axis__tready.value)
            if valid or beats:
                cycles += 1
            beats += valid & ready
            stalls += valid & (1 - ready)
        await tb.drain()
        recs, pays = tb.received()
        check_output(recs, pays, frames)
        dut._log.info("payload %d: %d beats in %d cycles", size, beats, cycles)
        assert stalls == 0 and beats == cycles, f"payload {size}: {beats} beats / {cycles} cycles"


@cocotb.test()
async def run_icrc_back_to_back(dut):
    """Short frames back to back (no idle cycle), ICRC good and bad alternating at random: the
    two-stage ICRC and the delayed meta-word write never mix one frame's verdict with the
    next's; exactly the good frames come out, the bad ones count as ICRC drops."""
    tb = await setup(dut, seed=53)
    rng = tb.rng
    accepted, n_bad = [], 0
    for i in range(40):
        f = rng.choice([data_frame(rng, size=rng.randrange(1, 24), region=0),
                        ack_frame(rng), probe_frame(rng)])
        if rng.random() < 0.5:
            b = bytearray(f)
            b[-1 - rng.randrange(4)] ^= 1 << rng.randrange(8)    # the ICRC itself
            await tb.send(bytes(b))
            n_bad += 1
        else:
            await tb.send(f)
            accepted.append(f)
    await tb.drain()
    recs, pays = tb.received()
    check_output(recs, pays, accepted)
    drops = tb.counters()
    assert drops[R.ICRC] == n_bad and sum(drops) == n_bad, drops


SHARED_PORTS = 3          #: planes of the shared-mode parser
SHARED_FRAMES = 160


@cocotb.test()
async def run_shared(dut):
    """Shared mode: frames of 3 planes (tagged by s_port, valid and mutated ones mixed, outputs
    back-pressured) come out with their plane in RxPacket.port, drops counted on their plane."""
    n = tb_param("shared_frames", SHARED_FRAMES)
    tb = await setup(dut, backpressure=True, seed=51, tagged=True)
    rng = tb.rng
    accepted, ports = [], []
    drops = [[0] * len(R) for _ in range(SHARED_PORTS)]
    for i in range(n):
        plane = rng.randrange(SHARED_PORTS)
        if rng.random() < 0.4:
            frame, bad_keep = mutate(rng, any_frame(rng, 48))
            bad_keep = bad_keep and len(frame) > 1
        else:
            frame, bad_keep = any_frame(rng, 300), False
        tkeep = None
        if bad_keep:
            tkeep = [1] * len(frame)
            tkeep[rng.randrange(len(frame) - 1)] = 0
        reason = ref_reason(frame, bad_keep)
        tag = plane
        if i % 40 == 17:                 # not a plane of this parser: FRAMING on the last plane
            tag, plane, reason = 4 + rng.randrange(4), SHARED_PORTS - 1, R.FRAMING
        if reason is None:
            accepted.append(frame)
            ports.append(plane)
        else:
            drops[plane][reason] += 1
        await tb.source.send(frame, tag, tkeep)
    await tb.drain()
    recs, pays = tb.received()
    check_output(recs, pays, accepted, ports)
    for plane in range(SHARED_PORTS):
        got = tb.counters(f"drops_p{plane}")
        assert got == drops[plane], f"plane {plane}: drops {got} != model {drops[plane]}"
    kinds = [expect(f)[0]["kind"] for f in accepted]
    assert tb.counters("accepted", 3) == [kinds.count(k) for k in RxKind]
    assert sum(map(sum, drops)) > 20 and len(set(ports)) == SHARED_PORTS
    dut._log.info("shared: %d frames, %d accepted, drops per plane %s", n, len(accepted),
                  [sum(d) for d in drops])


@cocotb.test()
async def run_counter_reads(dut):
    """Counter words read through cnt_rd_* while drops are counted at the highest rate
    (one-beat frames back to back: a count event every 4 cycles): each answer, from
    CNT_RD_LATENCY cycles after its strobe, is the counter's value at one cycle the block
    RAM could serve it (S + 1 .. S + 3), requests 3..7 cycles apart; drop_stb pulses once
    per counted drop; at the end every word reads its port's value."""
    planes = tb_param("planes", 0)          # 0: one-plane parser
    tb = await setup(dut, seed=61, tagged=bool(planes))
    rng, d = tb.rng, dut
    if planes:
        names = [(f"drops_p{p}", r) for p in range(planes) for r in range(len(R))]
    else:
        names = [("drops", r) for r in range(len(R))]
    names += [("accepted", k) for k in range(3)]

    def words():
        vals = {}
        for name in {n for n, _ in names}:
            v = int(getattr(d, name).value)
            vals[name] = [(v >> (32 * i)) & 0xFFFFFFFF for i in range(len(R))]
        return [vals[n][i] for n, i in names]

    n_bad = n_good = 0
    for i in range(150):
        if rng.random() < 0.8:          # 14-byte IPv4 frames: ETHERTYPE drops, 4 cycles each
            f = rng.randbytes(12) + b"\x08\x00"
            n_bad += 1
        else:
            f = ack_frame(rng)
            n_good += 1
        if planes:
            await tb.source.send(f, rng.randrange(planes))
        else:
            await tb.send(f)
    history = []                        # word values per cycle
    pending = []                        # (strobe cycle, word)
    next_stb, cyc, reads, pulses, moved = 2, 0, 0, 0, 0
    calm = 0
    while calm < 60:
        d.cnt_rd_stb.value = 0
        if cyc == next_stb:
            w = rng.randrange(len(names))
            if rng.random() < 0.6:      # mostly the word being counted: reads race counts
                w = rng.randrange(max(planes, 1)) * len(R) + R.ETHERTYPE
            d.cnt_rd_stb.value, d.cnt_rd_addr.value = 1, w
            pending.append((cyc, w))
            next_stb = cyc + rng.randrange(3, 8)
        await RisingEdge(d.clk)         # cycle cyc ends: its values are visible now
        history.append(words())
        pulses += int(d.drop_stb.value)
        if pending and pending[0][0] + CNT_RD_LATENCY == cyc:
            s_cyc, w = pending.pop(0)
            got = int(d.cnt_rd_data.value)
            ok = {history[c][w] for c in range(s_cyc + 1, s_cyc + 4)}
            assert got in ok, f"word {w} {names[w]} read {got}, expected one of {ok}"
            reads += 1
            moved += len(ok) > 1
        if cyc > 1 and history[-1] != history[-2]:
            calm = 0
        else:
            calm += 1
        cyc += 1
    final = words()
    assert sum(final[:-3]) == n_bad and sum(final[-3:]) == n_good, (final, n_bad, n_good)
    assert pulses == n_bad, f"{pulses} drop_stb pulses for {n_bad} drops"
    for w in range(len(names)):         # every word, quietly
        d.cnt_rd_stb.value, d.cnt_rd_addr.value = 1, w
        await RisingEdge(d.clk)
        d.cnt_rd_stb.value = 0
        for _ in range(CNT_RD_LATENCY):
            await RisingEdge(d.clk)
        assert int(d.cnt_rd_data.value) == final[w], names[w]
    assert reads > 100 and moved > 0, (reads, moved)
    dut._log.info("counter reads: %d during counting (%d raced a count), %d drops", reads,
                  moved, n_bad)


ONE_PLANE_TESTS = ["run_valid", "run_rules", "run_fuzz", "run_throughput", "run_icrc_back_to_back",
                   "run_counter_reads"]


def test_rx_parser(tmp_path):
    run_rtl(RxParser(port=PORT, max_frame=MAX_FRAME), toplevel="rx_parser",
            test_module="tests.rtl.test_rx_parser", build_dir=tmp_path / "rx_parser",
            env={"fuzz_frames": FUZZ_FRAMES}, testcase=ONE_PLANE_TESTS, quiet=True)


def test_rx_parser_shared(tmp_path):
    """One parser serving three planes (``port=None, ports=3``)."""
    run_rtl(RxParser(port=None, ports=SHARED_PORTS, max_frame=MAX_FRAME), toplevel="rx_parser",
            test_module="tests.rtl.test_rx_parser", build_dir=tmp_path / "rx_parser_shared",
            env={"shared_frames": SHARED_FRAMES, "planes": SHARED_PORTS},
            testcase=["run_shared", "run_counter_reads"], quiet=True)


def test_rx_parser_params():
    """Parameter checks: one plane xor shared mode."""
    import pytest
    for kw in (dict(port=8), dict(port=None), dict(port=None, ports=9), dict(port=1, ports=2),
               dict(qps=0), dict(regions=17), dict(buffer_words=1000)):
        with pytest.raises(ValueError):
            RxParser(**kw)
    shared = RxParser(port=None, ports=2, qps=2)
    assert "s_port" in shared.signature.members and "drops_p1" in shared.signature.members
    assert "drops" not in shared.signature.members
    assert "s_port" not in RxParser(port=1).signature.members
