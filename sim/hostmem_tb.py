"""Cycle-for-cycle check of the HDL host memory (:mod:`mrcnic.sim.hostmem_hdl`) against
the Python model it reproduces (:class:`mrcnic.sim.fastaxiram.AxiRamOneTask`).

:class:`HostMemPair` holds the HDL memory on the AXI4 port ``m_axi`` and repeats that port's
manager signals on ``py_axi``, whose subordinate signals the Python model drives.  A
cocotbext-axi ``AxiMaster`` with random back-pressure (AR/AW/W valid, R/B ready) runs random
INCR bursts on ``m_axi``; at every falling edge every output of the HDL memory must equal
the Python model's (``valid``/``ready``, and the payload of a valid R or B beat), and at the
end both memories must hold the same bytes.  Reads and writes use separate address ranges
(the HDL memory reads a beat's data when it puts it on R, the model a few edges earlier:
the module docstring of ``hostmem_hdl``), then everything written is read back.

Used by ``tests/test_hostmem_hdl.py`` (Icarus: builds in seconds).
"""

from __future__ import annotations

import mmap
import random

from amaranth.hdl import ClockSignal, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mrcnic.rtl.axi import Axi4Signature

from .hostmem_hdl import (ADDR_WIDTH, DATA_WIDTH, ID_WIDTH, RAM_MODULE, ROW_BYTES, HostMemAxi,
                          ram_address_bits)

__all__ = ["HostMemPair", "MEM_SIZE", "MANAGER"]

MEM_SIZE = 1 << 20          #: bytes of either memory
#: the AXI4 manager's signals (inputs of the memory)
MANAGER = [path[-1] for path, member in
           Axi4Signature(ADDR_WIDTH, DATA_WIDTH, ID_WIDTH).members.flatten()
           if member.flow == Out]


class HostMemPair(wiring.Component):
    """``m_axi`` (subordinate): the HDL memory (:class:`HostMemAxi` and an instance ``ram``
    of the storage); ``py_axi`` (manager, flipped for its subordinate signals): ``m_axi``'s
    manager signals repeated, for the Python model."""

    def __init__(self):
        sig = Axi4Signature(ADDR_WIDTH, DATA_WIDTH, ID_WIDTH)
        super().__init__({"m_axi": In(sig), "py_axi": Out(sig), "err": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.hm = hm = HostMemAxi()
        wiring.connect(m, wiring.flipped(self.m_axi), hm.axi)
        for name in MANAGER:                   # repeated on py_axi
            m.d.comb += getattr(self.py_axi, name).eq(getattr(self.m_axi, name))
        ram = dict(we0=hm.we0, wa0=hm.wa0, wd0=hm.wd0, we1=hm.we1, wa1=hm.wa1, wd1=hm.wd1,
                   re=hm.re, ra=hm.ra)
        rd = Signal(DATA_WIDTH)
        m.d.comb += [hm.rd.eq(rd), self.err.eq(hm.err)]
        m.submodules.ram = Instance(RAM_MODULE, p_AW=ram_address_bits(MEM_SIZE),
                                    i_clk=ClockSignal(), o_rd=rd,
                                    **{f"i_{n}": v for n, v in ram.items()})
        return m


try:
    import cocotb
    from cocotb.triggers import ClockCycles, FallingEdge
except ImportError:          # pragma: no cover - cocotb is a dependency
    cocotb = None

_OUTS = ("arready", "awready", "wready", "rvalid", "bvalid")


if cocotb is not None:
    @cocotb.test()
    async def hostmem_pair(dut):
        """Random traffic; the HDL memory's outputs equal the Python model's at every edge."""
        from cocotbext.axi import AxiBus, AxiMaster

        from .fastaxiram import AxiRamOneTask
        from .hostmem_hdl import HdlHostMem
        from .rtlsim import tb_param
        from .tb import start

        seed, bursts = tb_param("seed", 1), tb_param("bursts", 200)
        rng = random.Random(seed)
        # the model before the reset, as the HDL memory: both start at its release
        py = AxiRamOneTask(AxiBus.from_prefix(dut, "py_axi", bus_separator="__"), dut.clk,
                           dut.rst, size=MEM_SIZE, mem=mmap.mmap(-1, MEM_SIZE))
        await start(dut, [f"m_axi__{n}" for n in MANAGER])
        hdl = HdlHostMem(dut.ram, MEM_SIZE)
        master = AxiMaster(AxiBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk,
                           dut.rst, max_burst_len=rng.choice([16, 64, 256]))

        def pauses(p):
            while True:
                yield rng.random() < p
        for ch, p in ((master.write_if.aw_channel, 0.3), (master.write_if.w_channel, 0.3),
                      (master.write_if.b_channel, 0.4), (master.read_if.ar_channel, 0.3),
                      (master.read_if.r_channel, 0.4)):
            ch.set_pause_generator(pauses(p))
        # the read-only range, the same bytes in both memories
        ro_lo, ro_hi = 0x40000, 0x80000
        fill = rng.randbytes(ro_hi - ro_lo)
        py.write(ro_lo, fill)
        hdl.write(ro_lo, fill)

        mismatches = []
        beats = dict(rvalid=0, bvalid=0)
        outs = {n: (getattr(dut, f"m_axi__{n}"), getattr(dut, f"py_axi__{n}")) for n in _OUTS}
        payload = dict(rvalid=("rid", "rdata", "rlast", "rresp"), bvalid=("bid", "bresp"))

        async def compare():
            cycle = 0
            while True:
                await FallingEdge(dut.clk)
                cycle += 1
                for n, (h, p) in outs.items():
                    if str(h.value) != str(p.value):
                        mismatches.append((cycle, n, str(h.value), str(p.value)))
                for v, fields in payload.items():
                    if outs[v][0].value == 1:
                        beats[v] += 1
                        for f in fields:
                            a = str(getattr(dut, f"m_axi__{f}").value)
                            b = str(getattr(dut, f"py_axi__{f}").value)
                            if a != b:
                                mismatches.append((cycle, f, a, b))
        cocotb.start_soon(compare())

        written = []

        async def writer(n):
            for _ in range(n):
                addr = rng.randrange(0, 0x40000 - 4096)
                data = rng.randbytes(rng.randrange(1, 3000))
                written.append((addr, data))
                await master.write(addr, data, awid=rng.randrange(16))

        async def reader(n):
            for _ in range(n):
                addr = rng.randrange(ro_lo, ro_hi - 4096)
                length = rng.randrange(1, 3000)
                got = await master.read(addr, length, arid=rng.randrange(16))
                assert got.data == fill[addr - ro_lo:addr - ro_lo + length]

        tasks = [cocotb.start_soon(writer(bursts // 4)) for _ in range(2)] + \
            [cocotb.start_soon(reader(bursts // 4)) for _ in range(2)]
        for t in tasks:
            await t
        # everything written, read back through both
        for addr, data in written[-20:]:
            await master.read(addr, len(data))
        await ClockCycles(dut.clk, 20)
        assert not mismatches, f"{len(mismatches)} mismatches, first {mismatches[:5]}"
        assert dut.err.value == 0
        assert hdl.read(0, MEM_SIZE) == py.read(0, MEM_SIZE)
        # backdoor writes at odd addresses into pages the NIC wrote keep the rest of each
        # storage row (HdlHostMem reads the row first), and the NIC reads them back
        for addr, data in written[:10]:
            a = addr + len(data) // 3
            patch = rng.randbytes(rng.randrange(1, 150))
            py.write(a, patch)
            hdl.write(a, patch)
            got = await master.read(a, len(patch))
            assert got.data == patch
        assert hdl.read(0, MEM_SIZE) == py.read(0, MEM_SIZE)
        # writes into one row of a NIC-written page in one timestep: each read sees them
        # and none is lost (the firmware's 4-byte words of a served run)
        rb = ROW_BYTES
        addr = written[0][0] // rb * rb + rb
        for k in range(12):
            b = bytes([0x11 * (k % 15 + 1)] * rng.randrange(1, 5))
            a = addr + rng.randrange(0, rb - 4)
            py.write(a, b)
            hdl.write(a, b)
            assert hdl.read(a, len(b)) == b
        assert hdl.read(addr - rb, 3 * rb) == py.read(addr - rb, 3 * rb)
        got = await master.read(addr - rb, 3 * rb)
        assert got.data == py.read(addr - rb, 3 * rb)
        assert beats["rvalid"] > 100 and beats["bvalid"] > 10, beats
        dut._log.info("hostmem pair: %d writes, %s cycles with R / B valid, identical",
                      len(written), beats)
