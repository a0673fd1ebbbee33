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

Serial table window and external registers (``CsrBank(table_serial=True,
external=RX_DROP_*)``, the configuration of ``CsrNic``), against a word memory
model with a one-cycle read port:

* a WRITE steps every word of the record once (bits above the record width
  cleared, no step beyond the table's words) next to the usual ``<t>_w_en``;
  a READ loads the words back (0 beyond the record), after
  ``table_read_latency`` (the model answers garbage before that);
* ``busy`` holds a write (and its response) until it drops;
* ``RX_DROP_*`` reads return ``ext_rd_data`` for ``rd_addr`` (a model keeper with
  ``CsrBank.EXT_LATENCY`` = 2 register stages; garbage for other addresses), the
  register has no port.

``CsrNic`` (the bank with its shadows and the core, board parameters), through
the firmware client: every writable table reads back what was written (random
legal records, bits above a record cleared); ``EV_WEIGHT_SET`` / ``EV_STATE_SET``
change one field of a path entry (back to back, the weight change keeps a
DENIED state, indices >= paths ignored); a ``rel`` write joins the QP's current
``cc`` entry (the core's NSCC window restarts at that entry's ``init_cwnd``);
per-EV counters, drop counters and the event queue read 0 on an idle NIC.
"""

import logging
import random
from pathlib import Path

import cocotb
import pytest
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster
from mrcnic.fw.client import AsyncCsrClient, EvEvent, pack_record, unpack_record
from mrcnic.fw.transport import AxiLiteTransport, TransportError
from mrcnic.rtl.csr import CsrBank
from mrcnic.rtl.layouts import EvState
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import start

from mrcnic.config import compile_tables, load_config
from mrcnic.regmap import (
    DROP_REASONS,
    REGMAP,
    Access,
    EvEventReason,
    TableOp,
    build_regmap,
)

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
    # the reset (tb.start) restored the RW registers run_rw_roundtrip wrote: their
    # read-back copy too (it is rewritten after reset, while the bank holds off the bus)
    for r in REGMAP.registers:
        if r.access is Access.RW:
            assert await tb.rd(r.name) == r.reset, r.name
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


EXTERNAL = tuple(f"RX_DROP_{r}" for r in DROP_REASONS)
SERIAL_TESTS = ["run_serial_tables", "run_serial_busy_external"]
MASK32 = 0xFFFFFFFF


def ext_value(word_addr):
    """The model's value of an external register (by word address)."""
    return (word_addr * 0x9E3779B1 + 0x1234) & MASK32


class SerialTB(TB):
    """Word-memory model behind the serial window, ``ext_rd_data`` model, ``busy``."""

    def __init__(self, dut):
        super().__init__(dut)
        self.words = {}                 # (table id, index, word) -> 32-bit word
        self.word_writes = []           # (table id, index, word, value) per tbl_w_step
        self.rng = random.Random(7)
        self.word_latency = tb_param("word_latency", 1)

    async def start(self, master=True):
        skip = {REGMAP[n].port_name(f) for n in EXTERNAL for f in REGMAP[n].fields}
        ports = [n for n in in_ports() if n not in skip and not n.endswith("_rd_data")]
        await start(self.dut, ports + ["tbl_rd_word", "busy", "ext_rd_data"])
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(self.dut, "s_axil", bus_separator="__"),
                                  self.dut.clk, self.dut.rst)
        self.axil.write_if.log.setLevel(logging.WARNING)
        self.axil.read_if.log.setLevel(logging.WARNING)
        cocotb.start_soon(self._serial())
        cocotb.start_soon(self._strobes())

    async def _serial(self):
        d = self.dut
        drop_words = {REGMAP[n].offset >> 2 for n in EXTERNAL}
        since_rd = 99                   # cycles since a <t>_rd_en pulse
        delayed = [0] * (self.word_latency - 1)   # the words of the steps before
        # rd_addr of the cycles before the one just ended (read at an edge, a value is the
        # one of the cycle that ended: that alone would be a keeper with one register)
        rd_addrs = [0] * (CsrBank.EXT_LATENCY - 1)
        while True:
            await RisingEdge(d.clk)
            sel, word = int(d.tbl_sel.value), int(d.tbl_word.value)
            index = int(d.path_addr.value)
            for t in REGMAP.tables:
                if t.writable and int(getattr(d, f"{t.name}_w_en").value):
                    v = int(getattr(d, f"{t.name}_w_data").value)
                    self.table_writes.append((t.name, int(getattr(d, f"{t.name}_addr").value), v))
            if int(d.tbl_w_step.value):
                v = int(d.tbl_w_word.value)
                self.words[sel, index, word] = v
                self.word_writes.append((sel, index, word, v))
            since_rd = 0 if any(int(getattr(d, f"{t.name}_rd_en").value)
                                for t in REGMAP.tables) else since_rd + 1
            # a synchronous read port: the word addressed in the cycle just ended, but
            # only once the entry is valid (table_read_latency after rd_en); garbage else
            if since_rd >= self.latency:
                v = self.words.get((sel, index, word), 0)
            else:
                v = self.rng.getrandbits(32)
            if delayed:
                delayed.append(v)
                v = delayed.pop(0)
            d.tbl_rd_word.value = v
            # the keeper of the external registers: two register stages (CsrBank.EXT_LATENCY),
            # the value for rd_addr two cycles before (garbage for other addresses)
            rd_addrs.append(int(d.rd_addr.value))
            rd_addr = rd_addrs.pop(0)
            d.ext_rd_data.value = (ext_value(rd_addr) if rd_addr in drop_words
                                   else self.rng.getrandbits(32))


@cocotb.test()
async def run_serial_tables(dut):
    tb, rng = SerialTB(dut), random.Random(11)
    await tb.start()
    for t in REGMAP.tables:
        if not t.writable:
            continue
        for _ in range(2):
            index = rng.randrange(t.depth)
            raw = rng.getrandbits(32 * REGMAP.data_words)       # also bits above the record
            bits = raw & ((1 << t.width) - 1)
            await tb.wr("TBL_SELECT", t.id.value)
            await tb.wr("TBL_INDEX", index)
            for i in range(REGMAP.data_words):
                await tb.wr(f"TBL_DATA{i}", (raw >> 32 * i) & MASK32)
            tb.table_writes.clear()
            tb.word_writes.clear()
            tb.pulses.clear()
            await tb.wr("TBL_CMD", TableOp.WRITE.value)
            await ClockCycles(dut.clk, 2)
            assert tb.table_writes == [(t.name, index, bits)], t.name
            assert tb.pulses == {f"{t.name}_w_en": 1}, tb.pulses
            assert tb.word_writes == [(t.id.value, index, k, (bits >> 32 * k) & MASK32)
                                      for k in range(t.words)], t.name
            for i in range(REGMAP.data_words):
                await tb.wr(f"TBL_DATA{i}", MASK32)
            # garbage where the record ends: the READ must load 0 beyond t.words
            for k in range(t.words, REGMAP.data_words):
                tb.words[t.id.value, index, k] = rng.getrandbits(32)
            await tb.wr("TBL_CMD", TableOp.READ.value)
            assert await tb.rd_data() == bits, t.name
            assert tb.pulses.get(f"{t.name}_rd_en") == 1
    # the read-only table: READ after table_read_latency, WRITE refused without steps
    ev = REGMAP.table("evcnt")
    bits = rng.getrandbits(ev.width)
    for k in range(ev.words):
        tb.words[ev.id.value, 30, k] = (bits >> 32 * k) & MASK32
    await tb.wr("TBL_SELECT", ev.id.value)
    await tb.wr("TBL_INDEX", 30)
    await tb.wr("TBL_CMD", TableOp.READ.value)
    assert await tb.rd_data() == bits
    tb.word_writes.clear()
    tb.pulses.clear()
    await tb.wr("TBL_CMD", TableOp.WRITE.value, resp=SLVERR)
    await tb.wr("TBL_INDEX", ev.depth - 1)
    await tb.wr("TBL_SELECT", REGMAP.table("txqp").id.value)
    await tb.wr("TBL_CMD", TableOp.WRITE.value, resp=SLVERR)      # index >= depth
    await ClockCycles(dut.clk, 2)
    assert tb.pulses == {} and tb.word_writes == []


@cocotb.test()
async def run_serial_busy_external(dut):
    tb = SerialTB(dut)
    await tb.start()
    # the reset restored what run_serial_tables left in TBL_DATA* (and the other RW
    # registers), their read-back copy included
    for r in REGMAP.registers:
        if r.access is Access.RW and r.name not in EXTERNAL:
            assert await tb.rd(r.name) == r.reset, r.name
    # busy holds a write: no change, no response until it drops
    dut.busy.value = 1
    task = cocotb.start_soon(tb.axil.write(REGMAP["NIC_USID"].offset, (0xBEEF).to_bytes(4, "little")))
    await ClockCycles(dut.clk, 20)
    assert not task.done() and int(dut.nic_usid.value) == 0
    dut.busy.value = 0
    await task
    assert int(dut.nic_usid.value) == 0xBEEF
    # external registers: the value of the register at rd_addr, no ports of their own
    for name in EXTERNAL:
        r = REGMAP[name]
        assert not hasattr(dut, r.port_name(r.fields[0]))
        assert await tb.rd(name) == ext_value(r.offset >> 2), name
    # ordinary RO registers, unknown addresses and pops still behave
    dut.rx_accepted.value = 0x5A5A1234
    assert await tb.rd("RX_ACCEPTED") == 0x5A5A1234
    assert await tb.read(0x0590) == (0, SLVERR)
    await tb.rd("EV_EVENT")
    assert tb.pulses.get("ev_event_rd_stb") == 1


NIC_PARAMS = {"ports": 2, "qps": 2, "paths": 32, "window": 128}


def random_record(layout, rng, **fixed):
    """A record of legal random values (enums from their members), as a dict."""
    from amaranth.lib import data
    out = {}
    for name, fld in data.Layout.cast(layout):
        shape = fld.shape
        if name in fixed:
            out[name] = fixed[name]
        elif isinstance(shape, type) and issubclass(shape, data.Struct):
            out[name] = random_record(shape, rng)
        elif hasattr(shape, "__members__"):
            out[name] = rng.choice(list(shape)).value
        else:
            out[name] = rng.getrandbits(fld.width)
    return out


@cocotb.test()
async def run_csr_nic(dut):
    await start(dut, tb_param("inputs"))
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"), dut.clk, dut.rst)
    axil.write_if.log.setLevel(logging.WARNING)
    axil.read_if.log.setLevel(logging.WARNING)
    rm = build_regmap(**NIC_PARAMS)
    c = AsyncCsrClient(AxiLiteTransport(axil), regmap=rm)
    rng = random.Random(21)
    ident = await c.identity()
    assert ident["ID_PORTS"] == 2 and ident["ID_PATH_DEPTH"] == 32
    # every writable table: random legal records, read back (written twice: last one wins)
    written = {}
    for t in rm.tables:
        if not t.writable:
            continue
        for index in sorted({0, t.depth - 1, rng.randrange(t.depth)}):
            for _ in range(2):
                if t.name == "path":
                    rec = random_record(t.layout, rng, state=EvState.GOOD.value)
                elif t.name == "rel":     # quiet sender reliability: no probes, no ECN hold
                    rec = random_record(t.layout, rng, probe_interval=0, ecn_hold=0,
                                        ack_timeout_exp=20)
                elif isinstance(t.layout, int):
                    rec = rng.getrandbits(t.layout)
                else:
                    rec = random_record(t.layout, rng)
                await c.write_table(t.name, index, rec)
                written[t.name, index] = rec
    for (name, index), rec in written.items():
        assert await c.read_table(name, index) == rec, (name, index)
    # EV_WEIGHT_SET / EV_STATE_SET change one field; back to back; >= paths ignored
    e1, e2 = dict(written["path", 0]), dict(written["path", 31])
    await c.set_ev_weight(0, 77)
    await c.set_ev_state(31, EvState.DENIED)
    await c.set_ev_weight(31, 5)                 # keeps DENIED
    await c.set_ev_weight(32, 9)                 # beyond the path table: ignored
    await c.set_ev_state(32 + 31, EvState.GOOD)  # ignored too
    e1["weight"] = 77
    e2.update(weight=5, state=EvState.DENIED.value)
    assert await c.read_table("path", 0) == e1
    assert await c.read_table("path", 31) == e2
    await c.set_ev_state(31, EvState.GOOD)
    e2["state"] = EvState.GOOD.value
    assert await c.read_table("path", 31) == e2
    # rel joins the QP's current cc entry: the core's window restarts at its init_cwnd
    for q, init in ((0, 0x12345), (1, 0x23456), (0, 0x34567)):
        cc = random_record(rm.table("cc").layout, rng, init_cwnd=init, min_cwnd=0x1000,
                           max_cwnd=0x100000)
        await c.write_table("cc", q, cc)
        await ClockCycles(dut.clk, 4)
        assert (int(dut.cwnd.value) >> 32 * q) & MASK32 == init, "cc applies at once"
        await c.write_table("rel", q, written["rel", q])
        await ClockCycles(dut.clk, 4)
        assert (int(dut.cwnd.value) >> 32 * q) & MASK32 == init, "rel joins the cc entry"
        assert await c.read_table("cc", q) == cc
    # an idle NIC: per-EV counters, drop counters, events all 0
    assert await c.read_table("evcnt", 5) == unpack_record(rm.table("evcnt").layout, 0)
    for r in DROP_REASONS:
        assert await c.read(f"RX_DROP_{r}") == 0
    assert await c.pop_event() is None
    assert int(dut.irq.value) == 0
    await rx_counters(dut, c, rng)


RX_BLOCK, RX_USID, RX_QPN = 0xFC00_0000, 0x0042, 0x000100


def rx_frame(rng, plane, kind):
    """An ACK frame for QP RX_QPN arriving on ``plane`` (kind "ack"), cut short ("runt"), or
    an IPv4 frame ("ipv4", an ETHERTYPE drop)."""
    from mrcnic import wire
    if kind == "ipv4":
        return rng.randbytes(12) + b"\x08\x00" + rng.randbytes(rng.randrange(0, 40))
    path = wire.PathEncap(ev=rng.randrange(1 << 32), port=plane, mode="SRV6", block=RX_BLOCK,
                          usids=[RX_USID])
    f = wire.arrival_form(wire.build_ack_frame(
        src_mac="02:00:00:00:00:09", dst_mac="02:00:00:00:00:01", src_ip="2001:db8:0:9::1",
        path=path, qpn=RX_QPN, psn=rng.randrange(1 << 24), ev=rng.randrange(1 << 32),
        base_psn=rng.randrange(1 << 24), bitmap=rng.randrange(1 << 64), ts=rng.randrange(1 << 32),
        msn=rng.randrange(1 << 24)), RX_BLOCK)
    return f[:-5] if kind == "runt" else f


async def rx_counters(dut, c, rng):
    """RX_DROP_<reason> (sum over planes) and RX_ACCEPTED (sum over kinds), read from the
    parsers' counter block RAM while frames are being counted (never decreasing), then
    exact and equal to the drops_p<i> / accepted ports; IRQ_STATUS.rx_drop set."""
    from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource
    from mrcnic.rtl.layouts import EvMode
    await c.write("NIC_LOCATOR", RX_BLOCK)
    await c.write("NIC_USID", RX_USID)
    rm = c.regmap
    for q in range(2):
        await c.write_table("rxqp", q, random_record(rm.table("rxqp").layout, rng, valid=1,
                                                     qpn=RX_QPN + q, mode=EvMode.SRV6.value))
    await c.write("IRQ_STATUS", 0xF)
    srcs = [AxiStreamSource(AxiStreamBus.from_prefix(dut, f"s_axis_p{p}", bus_separator="__"),
                            dut.clk, dut.rst) for p in range(2)]
    want = {}
    for i in range(60):
        p, kind = rng.randrange(2), rng.choice(["ack", "ipv4", "ipv4", "runt"])
        want[p, kind] = want.get((p, kind), 0) + 1
        await srcs[p].send(AxiStreamFrame(rx_frame(rng, p, kind)))
    seen = []
    while not all(s.empty() for s in srcs) or len(seen) < 8:
        seen.append(await c.read("RX_DROP_ETHERTYPE"))
    assert seen == sorted(seen) and seen[-1] > 0, seen
    for _ in range(100):                # every frame counted (ACKs may wait for the sender)
        total = int(dut.accepted.value) + sum(
            (int(getattr(dut, f"drops_p{p}").value) >> (32 * i)) & MASK32
            for p in range(2) for i in range(len(DROP_REASONS)))
        if total == 60:
            break
        await ClockCycles(dut.clk, 100)
    assert total == 60, total
    n = lambda kind: want.get((0, kind), 0) + want.get((1, kind), 0)   # noqa: E731
    assert await c.read("RX_DROP_ETHERTYPE") == n("ipv4")
    assert await c.read("RX_DROP_RUNT") == n("runt")
    assert await c.read("RX_ACCEPTED") == n("ack") == int(dut.accepted.value)
    for r in DROP_REASONS:
        plane = [(int(getattr(dut, f"drops_p{p}").value) >> (32 * DROP_REASONS.index(r))) & MASK32
                 for p in range(2)]
        assert await c.read(f"RX_DROP_{r}") == sum(plane), r
        if r in ("ETHERTYPE", "RUNT"):
            kind = "ipv4" if r == "ETHERTYPE" else "runt"
            assert plane == [want.get((p, kind), 0) for p in range(2)], (r, plane)
    assert (await c.read("IRQ_STATUS")) >> 2 & 1, "IRQ_STATUS.rx_drop"


PARALLEL_TESTS = ["run_rw_roundtrip", "run_ro_and_errors", "run_aw_w_skew", "run_cmd_tables_w1c",
                  "run_fw_client"]


def test_csr(tmp_path):
    run_rtl(CsrBank(), toplevel="csr_bank", test_module="tests.rtl.test_csr",
            build_dir=tmp_path / "csr", testcase=PARALLEL_TESTS, quiet=True)


@pytest.mark.parametrize("word_latency", [1, 2, 4])
def test_csr_serial(tmp_path, word_latency):
    """The serial window and external registers (as CsrNic uses them), read latency 5."""
    run_rtl(CsrBank(table_read_latency=5, table_serial=True, table_word_latency=word_latency,
                    external=EXTERNAL),
            toplevel="csr_bank", test_module="tests.rtl.test_csr",
            build_dir=tmp_path / f"csrs{word_latency}",
            env={"latency": 5, "word_latency": word_latency}, testcase=SERIAL_TESTS, quiet=True)


def test_csr_table_latency(tmp_path):
    """The table window with a 3-cycle read path (the entry is valid for one cycle only)."""
    run_rtl(CsrBank(table_read_latency=3), toplevel="csr_bank", test_module="tests.rtl.test_csr",
            build_dir=tmp_path / "csr3", env={"latency": 3}, testcase="run_cmd_tables_w1c",
            quiet=True)


@pytest.mark.parametrize("shared", [False, True])
def test_csr_nic(tmp_path, shared):
    """The bank in CsrNic (board parameters, one parser per plane or the boards' shared one):
    shadows, path/rel glue, counters."""
    from amaranth.lib.wiring import In as _In
    from mrcnic.rtl.csr_nic import CsrNic
    nic = CsrNic(**NIC_PARAMS, shared_parser=shared)
    inputs = ["__".join(map(str, path)) for path, member, _ in nic.signature.flatten(nic)
              if member.flow == _In]
    run_rtl(nic, toplevel="csr_nic", test_module="tests.rtl.test_csr",
            build_dir=tmp_path / "nic", env={"inputs": inputs}, testcase="run_csr_nic",
            quiet=True)


def test_csr_params():
    with pytest.raises(ValueError, match="table_read_latency"):
        CsrBank(table_read_latency=0)
    with pytest.raises(ValueError, match="RegMap"):
        CsrBank(regmap={})
    with pytest.raises(ValueError, match="table_word_latency"):
        CsrBank(table_serial=True, table_word_latency=5)
    with pytest.raises(ValueError, match="external"):
        CsrBank(external=["ID_MAGIC"])
    with pytest.raises(ValueError, match="external"):
        CsrBank(external=["NO_SUCH_REGISTER"])
