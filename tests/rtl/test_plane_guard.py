# amaranth: UnusedElaboratable=no
"""PlaneGuard: a plane is avoided after ``threshold`` timeouts of distinct entries within
``window``; a probe reply or ``hold`` ends it; a single link's timeouts (below the threshold),
timeouts spread out over more than ``window``, and the last usable plane never trip it."""

import cocotb
import pytest
from cocotb.triggers import FallingEdge

from mrcnic.rtl.layouts import EvEvent, EvEventReason, EvState, PathEntry
from mrcnic.rtl.plane_guard import PlaneGuard
from mrcnic.sim.rtlsim import run_rtl, tb_param
from mrcnic.sim.tb import pack, start

PATHS, PORTS, THRESHOLD, WINDOW, HOLD = 16, 4, 3, 50, 400
INPUTS = ["w_en", "w_addr", "w_data", "ev_valid", "ev"]


class TB:
    """Drives the guard at falling edges; entry i is on port i % PORTS."""

    def __init__(self, dut):
        self.dut = dut

    async def cycles(self, n=1):
        for _ in range(n):
            await FallingEdge(self.dut.clk)

    async def program(self):
        dut = self.dut
        await self.cycles()             # drive from a falling edge on
        for i in range(PATHS):
            dut.w_en.value = 1
            dut.w_addr.value = i
            dut.w_data.value = pack(PathEntry, dict(ev=0x100 + i, port=i % PORTS,
                                                   state=EvState.GOOD, weight=1))
            await self.cycles()
        dut.w_en.value = 0
        await self.cycles()

    async def event(self, index, reason, state=EvState.ASSUMED_BAD):
        dut = self.dut
        dut.ev_valid.value = 1
        dut.ev.value = pack(EvEvent, dict(index=index, ev=0x100 + index, state=state,
                                          reason=reason, rtt_ns=0))
        await self.cycles()
        dut.ev_valid.value = 0

    def avoided(self):
        v = int(self.dut.avoid.value)
        return {i for i in range(PATHS) if v >> i & 1}

    def suspect(self):
        return int(self.dut.suspect.value)


def on_port(p):
    return {i for i in range(PATHS) if i % PORTS == p}


@cocotb.test()
async def run_plane_guard(dut):
    await start(dut, INPUTS)
    tb = TB(dut)
    await tb.program()
    T = EvEventReason.ACK_TIMEOUT
    # two timeouts on port 2 (one failed link's worth): nothing
    await tb.event(2, T)
    await tb.cycles(5)
    await tb.event(6, T)
    await tb.cycles(5)
    assert tb.suspect() == 0 and not tb.avoided()
    # the window passes, the count restarts: one more timeout is still not enough
    await tb.cycles(WINDOW + 5)
    await tb.event(10, T)
    await tb.cycles(5)
    assert tb.suspect() == 0
    # two more within the window: the third makes port 2 suspect, every entry on it avoided
    await tb.event(14, T)
    await tb.cycles(3)
    await tb.event(2, T)
    await tb.cycles(3)
    assert tb.suspect() == 1 << 2
    assert tb.avoided() == on_port(2)
    assert int(dut.trips.value) == 1
    # a timeout on another port does not disturb it; a probe reply on port 2 clears it
    await tb.event(1, T)
    await tb.event(6, EvEventReason.PROBE_OK, EvState.GOOD)
    await tb.cycles(3)
    assert tb.suspect() == 0 and not tb.avoided()
    # hold: port 0 suspect, cleared after HOLD cycles without a probe reply
    for i in (0, 4, 8):
        await tb.event(i, T)
    await tb.cycles(3)
    assert tb.suspect() == 1 << 0 and tb.avoided() == on_port(0)
    await tb.cycles(HOLD - 10)
    assert tb.suspect() == 1 << 0
    await tb.cycles(12)
    assert tb.suspect() == 0 and not tb.avoided()
    # never every plane: ports 0..2 suspect, port 3's timeouts do not take the last one out
    for p in range(PORTS):
        for i in sorted(on_port(p))[:THRESHOLD]:
            await tb.event(i, T)
        await tb.cycles(3)
    assert tb.suspect() == 0b0111, bin(tb.suspect())
    assert tb.avoided() == on_port(0) | on_port(1) | on_port(2)
    # a controller or MIN_ACTIVE event is not a timeout
    await tb.cycles(HOLD + 5)
    assert tb.suspect() == 0
    for i in sorted(on_port(1))[:THRESHOLD]:
        await tb.event(i, EvEventReason.MIN_ACTIVE, EvState.GOOD)
        await tb.event(i, EvEventReason.CONTROLLER, EvState.DENIED)
    await tb.cycles(3)
    assert tb.suspect() == 0


def test_plane_guard(tmp_path):
    run_rtl(PlaneGuard(PATHS, PORTS, THRESHOLD, WINDOW, HOLD), toplevel="plane_guard",
            test_module="tests.rtl.test_plane_guard", build_dir=tmp_path / "pg", quiet=True)


@pytest.mark.parametrize("kw", [dict(paths=0), dict(ports=9), dict(threshold=1),
                                dict(window=0), dict(hold=1 << 24)])
def test_bad_parameters(kw):
    with pytest.raises(ValueError):
        PlaneGuard(**kw)
