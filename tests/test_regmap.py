"""Register map description, generated docs, and the firmware client over the loopback model.

Pure Python (no simulator): the map is consistent (no overlapping offsets or
fields, every field inside 32 bits, resets legal, every table fits the
``TBL_DATA*`` window), docs/register-map.md is exactly what the description
generates, and :class:`CsrClient` packs records with ``rtl/layouts.py``,
validates values before any bus access and follows the bank's rules (run
against :class:`LoopbackTransport`; the same client against the RTL is in
tests/rtl/test_csr.py).
"""

import subprocess
import sys
from pathlib import Path

import pytest

from mrcnic.config import compile_tables, load_config
from mrcnic.fw.client import AsyncCsrClient, CsrClient, CsrValueError, EvEvent, ProbeReply
from mrcnic.fw.transport import LoopbackTransport, Transport, TransportError
from mrcnic.regmap import (REGMAP, Access, EvEventReason, Field, Register, RegMap, RegMapError,
                           Block, build_regmap, generate_markdown)
from mrcnic.rtl.layouts import EvState, PathEntry, QpContext
from mrcnic.rtl.nscc import nscc_config
from mrcnic.rtl.rx_parser import DropReason

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "register-map.md"


def test_map_consistent():
    offsets, names = set(), set()
    for r in REGMAP.registers:
        assert r.offset % 4 == 0 and r.offset < 1 << 16
        assert r.offset not in offsets and r.name not in names
        offsets.add(r.offset)
        names.add(r.name)
        used = 0
        for f in r.fields:
            assert 0 <= f.lsb and f.msb <= 31
            assert not used & f.mask, f"{r.name}.{f.name} overlaps"
            used |= f.mask
            assert f.reset < (1 << f.width)
    assert {t.words for t in REGMAP.tables} and max(t.words for t in REGMAP.tables) == REGMAP.data_words
    assert [f"TBL_DATA{i}" in REGMAP for i in range(REGMAP.data_words)] == [True] * REGMAP.data_words
    assert REGMAP.table("path").width == 184 and REGMAP.table("path").words == 6
    assert [f"RX_DROP_{r.name}" in REGMAP for r in DropReason] == [True] * len(DropReason)
    assert REGMAP["ID_PORTS"].reset == 4 and REGMAP["ID_PATH_DEPTH"].reset == 256


def test_checker_refuses_bad_maps():
    f = [Field("value", 0, 8)]
    with pytest.raises(RegMapError, match="overlaps"):
        RegMap([Block("B", 0, "", [Register("A", 0, Access.RW, f), Register("C", 0, Access.RW, f)])],
               [], {})
    with pytest.raises(RegMapError, match="outside"):
        RegMap([Block("B", 0, "", [Register("A", 0, Access.RW, [Field("x", 30, 4)])])], [], {})
    with pytest.raises(RegMapError, match="overlaps another field"):
        RegMap([Block("B", 0, "", [Register("A", 0, Access.RW, [Field("x", 0, 4), Field("y", 3, 2)])])],
               [], {})
    with pytest.raises(ValueError, match="ports"):
        build_regmap(ports=9)


def test_doc_not_stale():
    assert DOC.read_text() == generate_markdown(), (
        "docs/register-map.md is stale: regenerate with `python -m mrcnic.regmap > docs/register-map.md`")


def test_module_main_prints_doc():
    out = subprocess.run([sys.executable, "-m", "mrcnic.regmap"], capture_output=True, text=True,
                         check=True).stdout
    assert out == generate_markdown()


def test_client_registers_and_validation():
    lb = LoopbackTransport()
    assert isinstance(lb, Transport)
    c = CsrClient(lb)
    assert c.identity()["ID_MAGIC"] == 0x4D52434E
    c.write_field("NIC_DSCP", "data", 26)
    c.write_field("NIC_DSCP", "trim", 5)          # read-modify-write keeps `data`
    assert c.read_fields("NIC_DSCP") == {"data": 26, "trim": 5}
    assert c.read("NIC_DSCP") == 26 | 5 << 8
    before = list(lb.strobes), dict(lb.values)
    for bad, msg in [(lambda: c.write_field("NIC_DSCP", "data", 64), "NIC_DSCP.data: 64"),
                     (lambda: c.write("NIC_PMTU_LOG2", 13), "8..12"),
                     (lambda: c.set_ev_state(3, 3), "EV_STATE_SET.state"),
                     (lambda: c.write("NIC_USID", 1 << 16), "outside its fields"),
                     (lambda: c.write("RX_ACCEPTED", 1), "read only"),
                     (lambda: c.read("NIC_DSPC"), "NIC_DSCP"),
                     (lambda: c.write_field("NIC_ACK", "evry", 1), "no field"),
                     (lambda: c.write_table("txqp", 8, {}), "out of range"),
                     (lambda: c.write_table("path", 0, {"port": 8}), "path.port"),
                     (lambda: c.write_table("path", 0, {"state": 3}), "EvState"),
                     (lambda: c.write_table("path", 0, {"colour": 1}), "unknown field"),
                     (lambda: c.write_table("evcnt", 0, {}), "read only")]:
        with pytest.raises(CsrValueError, match=msg):
            bad()
    assert (list(lb.strobes), dict(lb.values)) == before      # nothing reached the bus
    with pytest.raises(TransportError, match="SLVERR"):
        lb.read32(0xFFF0)
    lb.write32(REGMAP["ID_MAGIC"].offset, 0)                   # RO: ignored and counted
    assert c.read("ID_MAGIC") == 0x4D52434E and c.read("RO_WRITE_ATTEMPTS") == 1


def test_client_tables_events_probes():
    lb = LoopbackTransport()
    c = CsrClient(lb)
    entry = {"ev": 0xABCDE123, "port": 3, "state": EvState.GOOD, "weight": 2, "n_carriers": 2,
             "seg_base": 7, "da": 0xFC00_0001_0002_0003_0004_0005_0006_0007}
    c.write_table("path", 200, entry)
    assert lb.tables["path"][200] == PathEntry.const(entry).as_value().value
    assert c.read_table("path", 200) == {**entry, "state": EvState.GOOD.value}
    assert c.read_table("path", 201)["weight"] == 0
    hw = compile_tables(load_config(ROOT / "examples" / "srh.toml"))   # HwTables dicts load as-is
    for i, e in enumerate(hw.path_entries):
        c.write_table("path", i, e)
    for i, w in enumerate(hw.segments):
        c.write_table("seg", i, w)
    c.write_table("txqp", 0, hw.qp_contexts[0])
    c.write_table("mr", 0, hw.memory_regions[0])
    assert lb.tables["txqp"][0] == QpContext.const(hw.qp_contexts[0]).as_value().value
    assert c.read_table("path", len(hw.path_entries) - 1) == hw.path_entries[-1]
    c.write_table("cc", 7, nscc_config())                     # the NSCC block's own record
    assert c.read_table("cc", 7) == nscc_config()
    assert c.pop_event() is None
    lb.push_event(9, EvState.ASSUMED_BAD.value, EvEventReason.ACK_TIMEOUT.value)
    lb.push_event(9, EvState.GOOD.value, EvEventReason.PROBE_OK.value)
    assert c.read("EV_EVENT_COUNT") == 2
    assert c.pop_event() == EvEvent(9, EvState.ASSUMED_BAD, EvEventReason.ACK_TIMEOUT)
    assert c.pop_event() == EvEvent(9, EvState.GOOD, EvEventReason.PROBE_OK)
    assert c.pop_event() is None
    c.probe(17)
    c.set_ev_state(4, EvState.DENIED)
    assert lb.strobes[-2:] == [("EV_PROBE_REQ", {"index": 17, "qp": 0}),
                               ("EV_STATE_SET", {"index": 4, "state": 2})]
    lb.push_probe_reply(17, 12345)
    assert c.pop_probe_reply() == ProbeReply(17, 12345) and c.pop_probe_reply() is None
    lb.set_status("IRQ_STATUS", 0b1011)
    c.write_field("IRQ_STATUS", "ev_event", 1)                  # W1C clears only that bit
    assert c.read("IRQ_STATUS") == 0b1010


def test_async_client():
    import asyncio

    class AsyncLoop:
        def __init__(self):
            self.lb = LoopbackTransport()

        async def read32(self, addr):
            return self.lb.read32(addr)

        async def write32(self, addr, value):
            self.lb.write32(addr, value)

    async def run():
        t = AsyncLoop()
        c = AsyncCsrClient(t)
        await c.write_table("seg", 255, (1 << 128) - 1)
        assert await c.read_table("seg", 255) == (1 << 128) - 1
        with pytest.raises(CsrValueError):
            await c.write_table("seg", 0, 1 << 128)
    asyncio.run(run())
