# amaranth: UnusedElaboratable=no
"""UartAxilBridge + the real CsrBank(REGMAP), driven over a UART by cocotbext-uart.

A sim-only top (:class:`BridgeTop`) wires the bridge's ``m_axil`` to the CSR bank and
puts an ``amaranth.lib.memory`` path table behind the table window.  The firmware
client (``AsyncCsrClient``) runs over a cocotb UART transport built on the protocol
codec of ``mrcnic.fw.uart``.  Proves, on the emitted Verilog:

* identity and RW registers round-trip through UART -> frame -> AXI4-Lite -> CSR bank
  (random legal values written, read back singly and by one burst READ), a path-table
  record goes through the indirect window and back;
* an unmapped address answers SLVERR and the client raises ``TransportError``;
  a burst crossing into an unmapped address stops there (SLVERR, later words 0);
* a request with a bad CRC is answered BAD_CHECKSUM and the register is unchanged;
  an unknown command / illegal LEN is answered BAD_FRAME after the line is quiet,
  nothing is written;
* a truncated frame is dropped by the timeout (counted) and the next good frame works;
  a UART break (stop bit 0) is counted and the next good frame works;
* every response's CRC and tag are checked by the host-side decoder.
"""

import random

import cocotb
import pytest
from amaranth.hdl import Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from cocotb.triggers import Timer
from cocotb.utils import get_sim_time
from cocotbext.uart import UartSink, UartSource

from mrcnic.fw.client import AsyncCsrClient
from mrcnic.fw.transport import TransportError
from mrcnic.fw.uart import Cmd, ResponseDecoder, Status, crc8, encode_request
from mrcnic.regmap import REGMAP
from mrcnic.rtl.csr import CsrBank
from mrcnic.rtl.layouts import EvState, PathEntry
from mrcnic.rtl.uart_bridge import CRC8, UartAxilBridge
from mrcnic.sim.rtlsim import run_rtl
from mrcnic.sim.tb import start

CLK_HZ = 125_000_000
BAUD = 6_250_000          # 20 cycles per bit: short simulations, same logic as 115200
TIMEOUT_US = 30
COUNTERS = ("frames", "bad_frames", "bad_checksums", "timeouts", "rx_errors")


class BridgeTop(wiring.Component):
    """Sim-only top: UART pins and the bridge counters; bridge -> CsrBank -> path-table memory."""

    def __init__(self, clk_hz=CLK_HZ, baud=BAUD, timeout_us=TIMEOUT_US):
        self.args = (clk_hz, baud, timeout_us)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1),
                          **{n: Out(16) for n in COUNTERS}})

    def elaborate(self, platform):
        m = Module()
        m.submodules.bridge = bridge = UartAxilBridge(*self.args)
        m.submodules.csr = csr = CsrBank(REGMAP)
        wiring.connect(m, bridge.m_axil, csr.s_axil)
        m.d.comb += [bridge.rx.eq(self.rx), self.tx.eq(bridge.tx)]
        m.d.comb += [getattr(self, n).eq(getattr(bridge, n)) for n in COUNTERS]
        t = REGMAP.table("path")
        m.submodules.path_mem = mem = memory.Memory(shape=PathEntry, depth=t.depth, init=[])
        wp, rp = mem.write_port(), mem.read_port()
        m.d.comb += [wp.en.eq(csr.path_w_en), wp.addr.eq(csr.path_addr),
                     wp.data.eq(csr.path_w_data), rp.en.eq(csr.path_rd_en),
                     rp.addr.eq(csr.path_addr), csr.path_rd_data.eq(rp.data)]
        return m


class AsyncUartTransport:
    """Async transport (``read32``/``write32``) over cocotbext-uart: the host side of the protocol."""

    def __init__(self, source, sink, timeout_us=400):
        self.source, self.sink, self.timeout_us = source, sink, timeout_us
        self.decoder = ResponseDecoder()
        self.tag = 0

    async def send_raw(self, frame: bytes):
        await self.source.write(frame)
        await self.source.wait()

    async def response(self, timeout_us=None):
        """The next complete response frame (CRC checked), or None after the timeout."""
        end = get_sim_time("us") + (timeout_us or self.timeout_us)
        while True:
            if not self.sink.empty():
                got = self.decoder.feed(self.sink.read_nowait())
                if got:
                    assert len(got) == 1 and not self.decoder.buf, got
                    return got[0]
            left = end - get_sim_time("us")
            if left <= 0:
                return None
            await self.sink.wait(int(left * 1000) + 1, "ns")

    async def transact(self, cmd, addr, data=None, length=1):
        self.tag = (self.tag + 1) & 0xFF
        await self.send_raw(encode_request(cmd, addr, tag=self.tag, data=data, length=length))
        r = await self.response()
        assert r is not None, f"no response to {Cmd(cmd).name} 0x{addr:04x}"
        assert (r.tag, r.cmd) == (self.tag, cmd), r
        return r

    async def read32(self, addr):
        r = await self.transact(Cmd.READ, addr)
        assert len(r.words) == 1
        if r.status != Status.OK:
            raise TransportError("read", addr, r.status)
        return r.words[0]

    async def write32(self, addr, value):
        r = await self.transact(Cmd.WRITE, addr, data=value)
        assert r.words == ()
        if r.status != Status.OK:
            raise TransportError("write", addr, r.status)


class TB:
    def __init__(self, dut):
        self.dut = dut

    async def start(self):
        self.dut.rx.value = 1                    # idle line (not 0) through reset
        await start(self.dut, [])
        self.source = UartSource(self.dut.rx, baud=BAUD)
        self.sink = UartSink(self.dut.tx, baud=BAUD)
        for s in (self.source, self.sink):
            s.log.setLevel("WARNING")
        self.link = AsyncUartTransport(self.source, self.sink)
        self.client = AsyncCsrClient(self.link)
        await Timer(2, "us")

    def counters(self):
        return {n: int(getattr(self.dut, n).value) for n in COUNTERS}


def legal_random(f, rng):
    if f.enum is not None:
        return rng.choice([m.value for m in f.enum])
    if f.values is not None:
        return rng.choice(list(f.values))
    return rng.getrandbits(f.width)


@cocotb.test()
async def run_roundtrip(dut):
    tb, rng = TB(dut), random.Random(5)
    await tb.start()
    c = tb.client
    ident = await c.identity()
    assert ident["ID_MAGIC"] == 0x4D52434E and ident["ID_PORTS"] == REGMAP.params["ports"]
    names = ["NIC_SRC_MAC_LO", "NIC_SRC_MAC_HI", "NIC_SRC_IP3", "NIC_DSCP", "NIC_PMTU_LOG2",
             "NIC_USID", "NIC_LOCATOR", "PORT_ADMIN", "IRQ_ENABLE"]
    expect = {}
    for name in names:
        r = REGMAP[name]
        value = sum(legal_random(f, rng) << f.lsb for f in r.fields)
        await c.write(name, value)
        expect[name] = value
    for name in names:
        assert await c.read(name) == expect[name], name
    # one burst READ of the whole NIC block
    nic = [r for r in REGMAP.registers if r.block == "NIC"]
    r = await tb.link.transact(Cmd.READ, nic[0].offset, length=len(nic))
    assert r.status == Status.OK and len(r.words) == len(nic)
    for reg, word in zip(nic, r.words):
        if reg.name in expect:
            assert word == expect[reg.name], reg.name
    # a path-table record through the indirect window (TBL_* registers) and back
    entry = dict(ev=0x12345, port=3, state=EvState.DENIED.value, weight=7, n_carriers=1,
                 seg_base=0, da=0xFC00_0000_0001_0002_0003 << 48)
    await c.write_table("path", 200, entry)
    assert await c.read_table("path", 200) == entry
    assert tb.counters() == dict(frames=tb.link.tag, bad_frames=0, bad_checksums=0, timeouts=0,
                                 rx_errors=0)


@cocotb.test()
async def run_errors(dut):
    tb = TB(dut)
    await tb.start()
    c, link = tb.client, tb.link
    usid = REGMAP["NIC_USID"].offset
    await c.write("NIC_USID", 0x1111)
    # unmapped address: SLVERR both ways, the client raises a clear error
    assert REGMAP.at(0x0700) is None
    for op in ("read", "write"):
        try:
            if op == "read":
                await link.read32(0x0700)
            else:
                await link.write32(0x0700, 5)
        except TransportError as e:
            assert e.resp == 2 and e.op == op and "0x0700" in str(e) and "SLVERR" in str(e)
        else:
            raise AssertionError(f"{op} of an unmapped address did not raise")
    # burst into an unmapped address: the words before it, then SLVERR and zeros
    base = REGMAP["ID_CLOCK_MHZ"].offset
    assert REGMAP.at(base + 8) is None
    r = await link.transact(Cmd.READ, base, length=4)
    assert r.status == Status.SLVERR
    assert r.words == (REGMAP["ID_CLOCK_MHZ"].reset, REGMAP["ID_TABLE_WORDS"].reset, 0, 0)
    # bad checksum: answered BAD_CHECKSUM, register unchanged
    frame = bytearray(encode_request(Cmd.WRITE, usid, tag=0x77, data=0xBEEF))
    frame[-1] ^= 0x01
    await link.send_raw(bytes(frame))
    r = await link.response()
    assert (r.tag, r.cmd, r.status, r.words) == (0x77, Cmd.WRITE, Status.BAD_CHECKSUM, ())
    frame = bytearray(encode_request(Cmd.WRITE, usid, tag=0x78, data=0xBEEF))
    frame[6] ^= 0x40                                      # corrupted data byte, CRC as sent
    await link.send_raw(bytes(frame))
    assert (await link.response()).status == Status.BAD_CHECKSUM
    assert await c.read("NIC_USID") == 0x1111
    assert tb.counters()["bad_checksums"] == 2
    # truncated frame, then silence beyond the timeout: dropped; the next frame works
    await link.send_raw(encode_request(Cmd.WRITE, usid, tag=0x79, data=0x2222)[:7])
    assert await link.response(timeout_us=2 * TIMEOUT_US) is None
    assert tb.counters()["timeouts"] == 1
    await c.write("NIC_USID", 0x3333)
    assert await c.read("NIC_USID") == 0x3333
    # unknown command with a tail of junk (a 0xA5 in it): one BAD_FRAME, nothing written
    body = bytes([0x42, 0x07, 1, usid & 0xFF, usid >> 8, 0xA5, 0x44, 0x44, 0x44])
    await link.send_raw(bytes([0xA5]) + body + bytes([crc8(body)]))
    r = await link.response()
    assert (r.tag, r.cmd, r.status) == (0x42, 0x07, Status.BAD_FRAME)
    assert await link.response(timeout_us=20) is None          # exactly one answer
    # illegal lengths: a WRITE of 2 words, a READ of 0 words
    for cmd, length in ((Cmd.WRITE, 2), (Cmd.READ, 0)):
        body = bytes([0x43, cmd, length, usid & 0xFF, usid >> 8, 1, 2, 3, 4])
        await link.send_raw(bytes([0xA5]) + body + bytes([crc8(body)]))
        r = await link.response()
        assert (r.tag, r.status, r.words) == (0x43, Status.BAD_FRAME, ())
    assert await c.read("NIC_USID") == 0x3333
    # a UART break (stop bit 0) is counted; the next frame works
    dut.rx.value = 0
    await Timer(12 * 1e9 / BAUD, "ns")
    dut.rx.value = 1
    await Timer(1, "us")
    await c.write("NIC_USID", 0x4444)
    assert await c.read("NIC_USID") == 0x4444
    cnt = tb.counters()
    assert cnt["rx_errors"] == 1 and cnt["bad_frames"] == 3 and cnt["bad_checksums"] == 2
    assert cnt["timeouts"] == 1


def test_uart_bridge(tmp_path):
    run_rtl(BridgeTop(), toplevel="uart_bridge_top", test_module="tests.rtl.test_uart_bridge",
            build_dir=tmp_path / "bridge", quiet=True)


def test_uart_bridge_params():
    assert UartAxilBridge(125_000_000).divisor == 1085
    with pytest.raises(ValueError, match="at least 8 cycles"):
        UartAxilBridge(10_000_000, baud=3_000_000)
    with pytest.raises(ValueError, match="off"):
        UartAxilBridge(1_000_000, baud=115200)
    with pytest.raises(ValueError, match="timeout_us"):
        UartAxilBridge(125_000_000, timeout_us=1)
    with pytest.raises(ValueError, match="clk_hz"):
        UartAxilBridge(0)


def test_crc8_matches_rtl_crc():
    """The host CRC is the CRC the RTL computes (amaranth.lib.crc CRC-8/SMBUS)."""
    rng = random.Random(1)
    for n in (0, 1, 9, 40):
        data = bytes(rng.getrandbits(8) for _ in range(n))
        assert crc8(data) == CRC8.compute(data)
    assert crc8(b"123456789") == 0xF4
