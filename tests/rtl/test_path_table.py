# amaranth: UnusedElaboratable=no
"""PathTable: both write ports (alone, together, out of range), eligible bitmap, pipelined read
(``READ_LATENCY`` cycles, back-to-back reads, ``rd_clash`` on a same-cycle wide write)."""

import random

import cocotb
import pytest
from cocotb.triggers import FallingEdge, ReadOnly

from mrcnic.rtl.layouts import EvState, PathEntry
from mrcnic.rtl.path_table import READ_LATENCY, PathTable
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import pack, start, unpack

INPUTS = ["w_en", "w_addr", "w_data", "st_en", "st_addr", "st_state", "rd_en", "rd_addr", "rd_adv",
          "wt_addr"]
RD1 = ["rd1_en", "rd1_addr", "rd1_adv"]
GOOD, BAD, DENIED = EvState.GOOD, EvState.ASSUMED_BAD, EvState.DENIED


class TB:
    """Drives the table at falling edges; keeps the expected table (records + live GOOD flag)."""

    def __init__(self, dut):
        self.dut = dut
        self.depth = tb_param("depth")
        # the read port under test: rd_* or (read_ports=2) rd1_*, the other one idle
        pre = "rd1" if tb_param("port") else "rd"
        self.rd_en, self.rd_addr, self.rd_adv, self.rd_data, self.rd_clash = (
            getattr(dut, f"{pre}_{x}") for x in ("en", "addr", "adv", "data", "clash"))
        self.mem = {}           # index -> record as last written on the wide port
        self.good = {}          # index -> live GOOD flag

    async def cycle(self, w=None, st=None, rd=None):
        """One clock: optional wide write (idx, rec), state write (idx, state), read idx."""
        dut = self.dut
        dut.w_en.value = int(w is not None)
        dut.st_en.value = int(st is not None)
        self.rd_en.value = int(rd is not None)
        if w is not None:
            dut.w_addr.value, dut.w_data.value = w[0], pack(PathEntry, w[1])
        if st is not None:
            dut.st_addr.value, dut.st_state.value = st[0], st[1].value
        if rd is not None:
            self.rd_addr.value = rd
        await FallingEdge(dut.clk)
        if w is not None and w[0] < self.depth:
            self.mem[w[0]] = w[1]
            self.good[w[0]] = w[1]["state"] == GOOD
        if st is not None and st[0] < self.depth:
            self.good[st[0]] = st[1] == GOOD
        dut.w_en.value = dut.st_en.value = self.rd_en.value = 0

    def expected(self, i):
        rec = dict(self.mem[i])
        if self.good[i]:
            rec["state"] = GOOD
        elif rec["state"] == GOOD:
            rec["state"] = BAD
        return rec

    async def check_eligible(self):
        await ReadOnly()
        want = sum(1 << i for i in self.mem if self.good[i] and self.mem[i]["weight"])
        assert int(self.dut.eligible.value) == want
        want = sum(1 << i for i in self.mem if self.mem[i]["weight"] >= 2)
        assert int(self.dut.multi.value) == want
        await FallingEdge(self.dut.clk)

    async def check_weights(self, idxs):
        """The asynchronous LUT-RAM weight port: same-cycle (combinational) read of each index."""
        for i in idxs:
            self.dut.wt_addr.value = i
            await ReadOnly()
            assert int(self.dut.wt_data.value) == self.mem[i]["weight"], i
            assert self.dut.wt_ge3.value == (self.mem[i]["weight"] >= 3), i
            await FallingEdge(self.dut.clk)

    async def read(self, i):
        await self.cycle(rd=i)
        await ReadOnly()
        assert self.rd_clash.value == 0
        for _ in range(READ_LATENCY - 1):
            await FallingEdge(self.dut.clk)
        await ReadOnly()
        got = unpack(PathEntry, self.rd_data.value)
        await FallingEdge(self.dut.clk)
        return got

    async def read_burst(self, idxs):
        """One read per clock; returns the records in order (pipelined, READ_LATENCY late)."""
        got = []
        for k in range(len(idxs) + READ_LATENCY):
            rd = idxs[k] if k < len(idxs) else None
            self.rd_en.value = int(rd is not None)
            if rd is not None:
                self.rd_addr.value = rd
            await ReadOnly()
            if k >= READ_LATENCY:
                got.append(unpack(PathEntry, self.rd_data.value))
            await FallingEdge(self.dut.clk)
        self.rd_en.value = 0
        return got


def record(rng, state=None, weight=None):
    return {"ev": rng.getrandbits(32), "port": rng.randrange(8),
            "state": state if state is not None else rng.choice([GOOD, GOOD, BAD, DENIED]),
            "weight": weight if weight is not None else rng.choice([0, 1, 2, 3, 255]),
            "n_carriers": rng.randint(1, 4), "seg_base": rng.getrandbits(8),
            "da": rng.getrandbits(128)}


@cocotb.test()
async def run_table(dut):
    tb = TB(dut)
    rng = random.Random(11)
    await start(dut, INPUTS + (RD1 if tb_param("ports") == 2 else []))
    dut.rd_adv.value = 1
    if tb_param("ports") == 2:
        dut.rd1_adv.value = 1
    await FallingEdge(dut.clk)
    await ReadOnly()
    assert int(dut.eligible.value) == 0           # after reset nothing is eligible
    await FallingEdge(dut.clk)

    for i in range(tb.depth):
        await tb.cycle(w=(i, record(rng)))
    await tb.check_eligible()
    for i in rng.sample(range(tb.depth), 16):
        assert await tb.read(i) == tb.expected(i)
    await tb.check_weights(range(tb.depth))
    # a weight written at one clock edge is read back combinationally right after it
    for i in rng.sample(range(tb.depth), 8):
        await tb.cycle(w=(i, record(rng, GOOD, rng.randrange(256))))
        await tb.check_weights([i])

    # out-of-range writes are ignored (they must not alias onto a low entry)
    if tb.depth < 256:
        for a in (tb.depth, tb.depth + 3, 255):
            await tb.cycle(w=(a, record(rng, GOOD, 7)), st=(a, BAD))
        await tb.check_eligible()
        for a in (0, 3, 255 % tb.depth):
            assert await tb.read(a) == tb.expected(a)

    # narrow state port: GOOD <-> ASSUMED_BAD / DENIED, read back rule
    for _ in range(60):
        i = rng.randrange(tb.depth)
        await tb.cycle(st=(i, rng.choice([GOOD, BAD, DENIED])))
        if rng.random() < 0.3:
            await tb.check_eligible()
    await tb.check_eligible()
    for i in range(tb.depth):
        assert await tb.read(i) == tb.expected(i), i
    await tb.check_weights(range(tb.depth))       # the state port never touches weights

    # both ports in one cycle: same entry -> st_state wins, other fields from the wide write
    a, b = 5, 9
    await tb.cycle(w=(a, record(rng, GOOD, 2)), st=(a, DENIED))
    await tb.check_eligible()
    assert not tb.good[a] and (await tb.read(a))["state"] == BAD and (await tb.read(a))["weight"] == 2
    # different entries in one cycle: both applied
    await tb.cycle(w=(a, record(rng, GOOD, 3)), st=(b, GOOD))
    await tb.check_eligible()
    assert await tb.read(a) == tb.expected(a) and await tb.read(b) == tb.expected(b)

    # back-to-back reads: one per clock, in order
    idxs = [rng.randrange(tb.depth) for _ in range(20)]
    assert await tb.read_burst(idxs) == [tb.expected(i) for i in idxs]

    # rd_data holds while rd_en is low (also across a later write to the entry it shows)
    held = await tb.read(a)
    await tb.cycle(w=(a, record(rng, GOOD, 1)))
    await ReadOnly()
    assert unpack(PathEntry, tb.rd_data.value) == held
    await FallingEdge(dut.clk)
    await ReadOnly()
    assert unpack(PathEntry, tb.rd_data.value) == held
    await FallingEdge(dut.clk)
    # a write in the cycle before the read is visible
    new = record(rng, GOOD, 5)
    await tb.cycle(w=(b, new))
    assert await tb.read(b) == tb.expected(b) == new
    # a read in the cycle of a wide write to the same entry: rd_clash the next cycle;
    # reading again gives the new record
    new = record(rng, GOOD, 4)
    await tb.cycle(w=(b, new), rd=b)
    await ReadOnly()
    assert tb.rd_clash.value == 1
    await FallingEdge(dut.clk)
    assert await tb.read(b) == tb.expected(b) == new
    # no clash: other entry, narrow state port, out-of-range write aliasing the entry
    for w, st in (((a, record(rng, GOOD, 2)), None), (None, (b, BAD)),
                  ((b + tb.depth, record(rng, GOOD, 3)), None) if tb.depth < 256 else (None, None)):
        await tb.cycle(w=w, st=st, rd=b)
        await ReadOnly()
        assert tb.rd_clash.value == 0
        await FallingEdge(dut.clk)
        await FallingEdge(dut.clk)
    assert await tb.read(b) == tb.expected(b)


    # rd_adv low holds stage 2 (rd_data) and, with rd_en low, stage 1 (a stalled reader)
    for x, y in ((a, b), (b, a)):
        tb.rd_adv.value = 1
        await tb.cycle(rd=x)
        await tb.cycle(rd=y)                     # stage 2: x, stage 1: y
        tb.rd_adv.value = 0
        for _ in range(3):
            await ReadOnly()
            assert unpack(PathEntry, tb.rd_data.value) == tb.expected(x)
            await FallingEdge(dut.clk)
        tb.rd_adv.value = 1
        await FallingEdge(dut.clk)
        await ReadOnly()
        assert unpack(PathEntry, tb.rd_data.value) == tb.expected(y)
        await FallingEdge(dut.clk)

    if tb_param("ports") == 2:                  # both ports at once, different entries
        for _ in range(10):
            x, y = rng.randrange(tb.depth), rng.randrange(tb.depth)
            dut.rd_en.value = dut.rd1_en.value = 1
            dut.rd_addr.value, dut.rd1_addr.value = x, y
            await FallingEdge(dut.clk)
            dut.rd_en.value = dut.rd1_en.value = 0
            await FallingEdge(dut.clk)
            await ReadOnly()
            assert unpack(PathEntry, dut.rd_data.value) == tb.expected(x)
            assert unpack(PathEntry, dut.rd1_data.value) == tb.expected(y)
            await FallingEdge(dut.clk)


@pytest.mark.parametrize("depth,ports,port", [(64, 2, 1), (256, 1, 0)])
def test_path_table(tmp_path, depth, ports, port):
    run_rtl(PathTable(depth, read_ports=ports), toplevel="path_table",
            test_module="tests.rtl.test_path_table", build_dir=tmp_path / f"pt{depth}",
            env={"depth": depth, "ports": ports, "port": port}, quiet=True)


@pytest.mark.parametrize("depth", [0, 8, 100, 512])
def test_bad_depth(depth):
    with pytest.raises(ValueError):
        PathTable(depth)


@pytest.mark.parametrize("ports", [0, 3])
def test_bad_read_ports(ports):
    with pytest.raises(ValueError, match="read_ports"):
        PathTable(32, read_ports=ports)
