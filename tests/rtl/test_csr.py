# amaranth: UnusedElaboratable=no
"""CsrBank: the AXI4-Lite register bank generated from ``mrcnic.regmap``.

cocotb testbench (``run_*`` coroutines, cocotbext-axi ``AxiLiteMaster`` on
``s_axil``) and its pytest wrapper.  Proves, on the emitted Verilog:

* every RW register round-trips a random legal value and its Out port(s)
  show it; internal window registers round-trip too;
* RO registers return their In ports (const ones their build value), ignore
  writes and count every attempt in ``RO_WRITE_ATTEMPTS``;
* unknown addresses answer SLVERR on read and write and change nothing; an
  illegal enum value answers SLVERR without a strobe;
* AW before W and W before AW (cycles apart) both complete (no deadlock);
* CMD registers pulse ``<reg>_stb`` for exactly one cycle with their fields;
  pop registers pulse ``<reg>_rd_stb`` once per read;
* ``TBL_CMD`` WRITE gives one ``<t>_w_en`` strobe with the right index and
  record; READ returns ``<t>_rd_data`` (a latency-1 memory model); bad
  index / read-only table -> SLVERR and no strobe;
* W1C status set by ``_set`` inputs, cleared bit by bit, ``irq`` = status & enable;
* the firmware client (``AsyncCsrClient`` over ``AxiLiteTransport``) programs
  the tables of ``examples/srh.toml`` and reads them back through the RTL.
"""

import logging
import random
from pathlib import Path

import cocotb
import pytest
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from mrcnic.config import compile_tables, load_config
from mrcnic.fw.client import AsyncCsrClient, EvEvent, pack_record
from mrcnic.fw.transport import AxiLiteTransport, TransportError
from mrcnic.regmap import REGMAP, Access, EvEventReason, TableOp
from mrcnic.rtl.csr import CsrBank
from mrcnic.rtl.layouts import EvState
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import start

ROOT = Path(__file__).resolve().parents[2]
OKAY, SLVERR = 0, 2
AXIL_INPUTS = ["awaddr", "awprot", "awvalid", "wdata", "wstrb", "wvalid", "bready",
               "araddr", "arprot", "arvalid", "rready"]


def in_ports(rm=REGMAP):
    names = [f"s_axil__{n}" for n in AXIL_INPUTS]
    for r in rm.registers:
        if r.internal or r.const:
            continue
        for f in r.fields:
            if r.access is Access.RO:
                names.append(r.port_name(f))
            elif r.access is Access.W1C:
                names.append(r.port_name(f) + "_set")
    return names + [f"{t.name}_rd_data" for t in rm.tables]


def legal_random(f, rng):
    if f.enum is not None:
        return rng.choice([m.value for m in f.enum])
    if f.values is not None:
        return rng.choice(list(f.values))
    return rng.getrandbits(f.width)


class TB:
    """Clock, AXI4-Lite master, and a latency-1 memory model behind every table port."""

    def __init__(self, dut):
        self.dut = dut
        self.mem = {t.name: {} for t in REGMAP.tables}
        self.table_writes = []        # (table, addr, data) per w_en strobe
        self.pulses = {}              # strobe port -> cycles seen high
        self.latency = tb_param("latency", 1)

    async def start(self, master=True):
        await start(self.dut, in_ports())
        if master:
            self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(self.dut, "s_axil", bus_separator="__"),
                                      self.dut.clk, self.dut.rst)
            self.axil.write_if.log.setLevel(logging.WARNING)
            self.axil.read_if.log.setLevel(logging.WARNING)
        cocotb.start_soon(self._tables())
        cocotb.start_soon(self._strobes())

    async def _tables(self):
        d = self.dut
        while True:
            await RisingEdge(d.clk)
            for t in REGMAP.tables:
                addr = int(getattr(d, f"{t.name}_addr").value)
                if t.writable and int(getattr(d, f"{t.name}_w_en").value):
                    v = int(getattr(d, f"{t.name}_w_data").value)
                    self.mem[t.name][addr] = v
                    self.table_writes.append((t.name, addr, v))
                if int(getattr(d, f"{t.name}_rd_en").value):
                    cocotb.start_soon(self._answer(t, self.mem[t.name].get(addr, 0)))

    async def _answer(self, t, value):
        """Drive ``<t>_rd_data`` with the entry only in the cycle ``latency`` after rd_en
        (garbage before and after, so a capture in the wrong cycle fails)."""
        port = getattr(self.dut, f"{t.name}_rd_data")
        garbage = ~value & ((1 << t.width) - 1)
        for _ in range(self.latency - 1):
            port.value = garbage
            await RisingEdge(self.dut.clk)
        port.value = value
        await RisingEdge(self.dut.clk)
        port.value = garbage

    async def _strobes(self):
        names = [r.name.lower() + "_stb" for r in REGMAP.registers
                 if r.access is Access.CMD and not r.internal]
        names += [r.name.lower() + "_rd_stb" for r in REGMAP.registers if r.read_strobe]
        names += [f"{t.name}_{s}" for t in REGMAP.tables for s in ("w_en", "rd_en")
                  if t.writable or s == "rd_en"]
        while True:
            await RisingEdge(self.dut.clk)
            for n in names:
                if int(getattr(self.dut, n).value):
                    self.pulses[n] = self.pulses.get(n, 0) + 1

    async def read(self, addr):
        r = await self.axil.read(addr, 4)
        return int.from_bytes(r.data, "little"), int(r.resp)

    async def write(self, addr, value):
        r = await self.axil.write(addr, int(value).to_bytes(4, "little"))
        return int(r.resp)

    async def rd(self, name):
        v, resp = await self.read(REGMAP[name].offset)
        assert resp == OKAY, f"read {name}: resp {resp}"
        return v

    async def wr(self, name, value, resp=OKAY):
        got = await self.write(REGMAP[name].offset, value)
        assert got == resp, f"write {name}: resp {got}, expected {resp}"

    async def rd_data(self):
        """The record in TBL_DATA*."""
        bits = 0
        for i in range(REGMAP.data_words):
            bits |= await self.rd(f"TBL_DATA{i}") << 32 * i
        return bits

    async def snapshot(self):
        """Every register without read side effects."""
        return {r.name: await self.rd(r.name) for r in REGMAP.registers if not r.read_strobe}


@cocotb.test()
async def run_rw_roundtrip(dut):
    tb, rng = TB(dut), random.Random(1)
    await tb.start()
    expect = {}
    for r in REGMAP.registers:
        if r.access is not Access.RW:
            continue
        fields = {f.name: legal_random(f, rng) for f in r.fields}
        value = sum(v << r.field(n).lsb for n, v in fields.items())
        await tb.wr(r.name, value | (~r.mask & 0xFFFFFFFF))     # reserved bits are dropped
        expect[r.name] = (value, fields)
    for name, (value, fields) in expect.items():
        r = REGMAP[name]
        assert await tb.rd(name) == value, name
        if not r.internal:
            for f in r.fields:
                assert int(getattr(dut, r.port_name(f)).value) == fields[f.name], (name, f.name)
    # byte strobes: write only byte 1 of NIC_SRC_IP0
    await tb.axil.write(REGMAP["NIC_SRC_IP0"].offset + 1, b"\xa5")
    old = expect["NIC_SRC_IP0"][0]
    assert await tb.rd("NIC_SRC_IP0") == (old & ~0xFF00) | 0xA500
    assert await tb.rd("RO_WRITE_ATTEMPTS") == 0


@cocotb.test()
async def run_ro_and_errors(dut):
    tb, rng = TB(dut), random.Random(2)
    await tb.start()
    ro = [r for r in REGMAP.registers if r.access is Access.RO and not r.internal]
    for r in ro:
        if not r.const:
            for f in r.fields:
                getattr(dut, r.port_name(f)).value = rng.getrandbits(f.width)
    await RisingEdge(dut.clk)
    expect = {}
    for r in ro:
        if r.const:
            expect[r.name] = r.reset
        else:
            expect[r.name] = sum(int(getattr(dut, r.port_name(f)).value) << f.lsb for f in r.fields)
    for n, r in enumerate(ro):
        assert await tb.rd(r.name) == expect[r.name], r.name
        await tb.wr(r.name, 0xFFFFFFFF ^ expect[r.name])          # OKAY, ignored, counted
    tb.pulses.clear()
    for r in ro:
        if not r.read_strobe:
            assert await tb.rd(r.name) == expect[r.name], r.name
    assert await tb.rd("ID_MAGIC") == 0x4D52434E
    assert await tb.rd("RO_WRITE_ATTEMPTS") == len(ro)
    await tb.wr("RO_WRITE_ATTEMPTS", 0)
    assert await tb.rd("RO_WRITE_ATTEMPTS") == len(ro) + 1
    # pop registers: one rd_stb per read
    await tb.rd("EV_EVENT")
    await tb.rd("EV_EVENT")
    assert tb.pulses.get("ev_event_rd_stb") == 2 and "ev_probe_rtt_rd_stb" not in tb.pulses
    # unknown addresses: SLVERR both ways, nothing changes, nothing counted
    before = await tb.snapshot()
    for addr in (0x0030, 0x0208, 0x033C, 0x0590, 0x0700, 0xFFFC):
        assert REGMAP.at(addr) is None
        assert await tb.read(addr) == (0, SLVERR), hex(addr)
        assert await tb.write(addr, 0xFFFFFFFF) == SLVERR, hex(addr)
    # illegal field values: SLVERR, no change, no strobe
    await tb.wr("EV_STATE_SET", 3 << 8 | 5, resp=SLVERR)
    await tb.wr("NIC_PMTU_LOG2", 7, resp=SLVERR)
    await tb.wr("TBL_CMD", 3, resp=SLVERR)                  # undefined table op
    assert await tb.snapshot() == before
    assert "ev_state_set_stb" not in tb.pulses


async def raw_write(dut, addr, value, w_first, gap):
    """Drive one AXI4-Lite write by hand with AW and W ``gap`` cycles apart; return bresp."""
    s = lambda n: getattr(dut, f"s_axil__{n}")
    first, second = (("w", "aw") if w_first else ("aw", "w"))
    s("awaddr").value, s("wdata").value, s("wstrb").value = addr, value, 0xF
    s("bready").value = 1
    for ch in (first, second):
        s(f"{ch}valid").value = 1
        while True:
            await RisingEdge(dut.clk)
            if int(s(f"{ch}ready").value):
                break
        s(f"{ch}valid").value = 0
        if ch == first:
            await ClockCycles(dut.clk, gap)
    for _ in range(20):
        await RisingEdge(dut.clk)
        if int(s("bvalid").value):
            resp = int(s("bresp").value)
            await RisingEdge(dut.clk)
            assert not int(s("bvalid").value)
            return resp
    raise AssertionError("no write response: deadlock")


@cocotb.test()
async def run_aw_w_skew(dut):
    tb = TB(dut)
    await tb.start(master=False)
    await raw_write(dut, REGMAP["NIC_USID"].offset, 0x1234, w_first=False, gap=3)
    await raw_write(dut, REGMAP["NIC_LOCATOR"].offset, 0xFC000001, w_first=True, gap=5)
    assert await raw_write(dut, 0x0700, 1, w_first=True, gap=0) == SLVERR
    assert int(dut.nic_usid.value) == 0x1234 and int(dut.nic_locator.value) == 0xFC000001


@cocotb.test()
async def run_cmd_tables_w1c(dut):
    tb, rng = TB(dut), random.Random(3)
    await tb.start()
    # CMD register: one strobe, fields held
    await tb.wr("EV_STATE_SET", EvState.DENIED.value << 8 | 77)
    await ClockCycles(dut.clk, 3)
    assert tb.pulses == {"ev_state_set_stb": 1}
    assert int(dut.ev_state_set_index.value) == 77 and int(dut.ev_state_set_state.value) == 2
    assert await tb.rd("EV_STATE_SET") == 0
    # table write: one strobe per command, right index and record
    for t in REGMAP.tables:
        if not t.writable:
            continue
        index, bits = rng.randrange(t.depth), rng.getrandbits(t.width)
        await tb.wr("TBL_SELECT", t.id.value)
        await tb.wr("TBL_INDEX", index)
        for i in range(t.words):
            await tb.wr(f"TBL_DATA{i}", (bits >> 32 * i) & 0xFFFFFFFF)
        tb.table_writes.clear()
        tb.pulses.clear()
        await tb.wr("TBL_CMD", TableOp.WRITE.value)
        await ClockCycles(dut.clk, 2)
        assert tb.table_writes == [(t.name, index, bits)], t.name
        assert tb.pulses == {f"{t.name}_w_en": 1}, tb.pulses
        # table read: clobber DATA, READ, the entry comes back from the In port
        for i in range(REGMAP.data_words):
            await tb.wr(f"TBL_DATA{i}", 0xFFFFFFFF)
        await tb.wr("TBL_CMD", TableOp.READ.value)
        assert await tb.rd_data() == bits, t.name
    # read-only table: READ works, WRITE is refused; index beyond depth refused
    tb.mem["evcnt"][200] = bits = rng.getrandbits(192)
    await tb.wr("TBL_SELECT", REGMAP.table("evcnt").id.value)
    await tb.wr("TBL_INDEX", 200)
    await tb.wr("TBL_CMD", TableOp.READ.value)
    assert await tb.rd_data() == bits
    tb.pulses.clear()
    await tb.wr("TBL_CMD", TableOp.WRITE.value, resp=SLVERR)
    await tb.wr("TBL_SELECT", REGMAP.table("txqp").id.value)
    await tb.wr("TBL_INDEX", REGMAP.table("txqp").depth)
    await tb.wr("TBL_CMD", TableOp.WRITE.value, resp=SLVERR)
    await tb.wr("TBL_CMD", TableOp.READ.value, resp=SLVERR)
    await tb.wr("TBL_CMD", 3, resp=SLVERR)
    await ClockCycles(dut.clk, 2)
    assert tb.pulses == {}
    # W1C + irq
    r = REGMAP["IRQ_STATUS"]
    for f in r.fields:
        getattr(dut, r.port_name(f) + "_set").value = 1
    await RisingEdge(dut.clk)
    for f in r.fields:
        getattr(dut, r.port_name(f) + "_set").value = 0
    assert await tb.rd("IRQ_STATUS") == r.mask
    assert int(dut.irq.value) == 0
    await tb.wr("IRQ_ENABLE", 0b0100)
    assert int(dut.irq.value) == 1
    await tb.wr("IRQ_STATUS", 0b0101)
    assert await tb.rd("IRQ_STATUS") == 0b1010
    assert int(dut.irq.value) == 0 and int(dut.irq_status_probe_reply.value) == 1


@cocotb.test()
async def run_fw_client(dut):
    tb = TB(dut)
    await tb.start()
    c = AsyncCsrClient(AxiLiteTransport(tb.axil))
    ident = await c.identity()
    assert ident["ID_PORTS"] == 4 and ident["ID_TABLE_WORDS"] == REGMAP.data_words
    hw = compile_tables(load_config(ROOT / "examples" / "srh.toml"))
    await c.write_field("NIC_DSCP", "data", 26)
    await c.write_field("NIC_DSCP", "trim", 7)
    assert int(dut.nic_dscp_data.value) == 26 and int(dut.nic_dscp_trim.value) == 7
    entries = hw.path_entries[:4]
    for i, e in enumerate(entries):
        await c.write_table("path", i, e)
    await c.write_table("seg", 0, hw.segments[0])
    await c.write_table("txqp", 1, hw.qp_contexts[0])
    t = REGMAP.table("path")
    assert tb.mem["path"] == {i: pack_record(t.layout, e) for i, e in enumerate(entries)}
    for i, e in enumerate(entries):
        assert await c.read_table("path", i) == e
    assert await c.read_table("seg", 0) == hw.segments[0]
    assert await c.read_table("txqp", 1) == hw.qp_contexts[0]
    await c.set_ev_state(2, EvState.DENIED)
    await ClockCycles(dut.clk, 2)
    assert int(dut.ev_state_set_index.value) == 2 and int(dut.ev_state_set_state.value) == 2
    # EV event queue behind EV_EVENT: the client pops through ev_event_rd_stb
    assert await c.pop_event() is None
    dut.ev_event_valid.value, dut.ev_event_index.value = 1, 9
    dut.ev_event_state.value = EvState.ASSUMED_BAD.value
    dut.ev_event_reason.value = EvEventReason.ACK_TIMEOUT.value
    tb.pulses.clear()
    assert await c.pop_event() == EvEvent(9, EvState.ASSUMED_BAD, EvEventReason.ACK_TIMEOUT)
    assert tb.pulses.get("ev_event_rd_stb") == 1
    try:
        await AxiLiteTransport(tb.axil).read32(0x0700)
    except TransportError as e:
        assert e.resp == SLVERR
    else:
        raise AssertionError("unknown address did not raise TransportError")


def test_csr(tmp_path):
    run_rtl(CsrBank(), toplevel="csr_bank", test_module="tests.rtl.test_csr",
            build_dir=tmp_path / "csr", quiet=True)


def test_csr_table_latency(tmp_path):
    """The table window with a 3-cycle read path (the entry is valid for one cycle only)."""
    run_rtl(CsrBank(table_read_latency=3), toplevel="csr_bank", test_module="tests.rtl.test_csr",
            build_dir=tmp_path / "csr3", env={"latency": 3}, testcase="run_cmd_tables_w1c",
            quiet=True)


def test_csr_params():
    with pytest.raises(ValueError, match="table_read_latency"):
        CsrBank(table_read_latency=0)
    with pytest.raises(ValueError, match="RegMap"):
        CsrBank(regmap={})
