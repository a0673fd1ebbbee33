"""PlaneMux: whole frames from two sources onto one plane port, round robin, 1 beat/clock.

Frames of sizes 1..127, 60/64, 1500 and 9000 bytes from both inputs, with and
without idle cycles at the sources and backpressure at the output: every frame
comes out whole (beats never interleaved), byte for byte, each source's frames
in order; with both sources busy and no backpressure the output moves one beat
per clock; the grant alternates frame by frame; the frame counters match.
"""

import random

import pytest

try:
    import cocotb
    from cocotb.triggers import ClockCycles, RisingEdge
except ImportError:        # pragma: no cover
    cocotb = None

from mrcnic.rtl.plane_mux import PlaneMux
from mrcnic.sim.rtlsim import run_rtl, tb_param

SIZES = list(range(1, 128)) + [60, 64, 1500, 9000]


class TB:
    def __init__(self, dut, idle: bool, backpressure: bool):
        from cocotbext.axi import AxiStreamBus, AxiStreamSink, AxiStreamSource

        self.dut = dut
        bus = lambda name: AxiStreamBus.from_prefix(dut, name, bus_separator="__")  # noqa: E731
        self.sources = [AxiStreamSource(bus(f"s_axis_{i}"), dut.clk, dut.rst) for i in range(2)]
        self.sink = AxiStreamSink(bus("m_axis"), dut.clk, dut.rst)
        rng = random.Random(7)
        if idle:
            for s in self.sources:
                s.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
        if backpressure:
            self.sink.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
        self.beats = []          # (cycle, source of the beat by tdata tag)
        self.cycle = 0
        cocotb.start_soon(self._monitor())

    async def _monitor(self):
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            if dut.m_axis__tvalid.value.is_resolvable and int(dut.m_axis__tvalid.value) \
                    and int(dut.m_axis__tready.value):
                self.beats.append((self.cycle, int(dut.m_axis__tlast.value),
                                   int(dut.source.value), int(dut.m_axis__tdata.value) & 0xFF))


if cocotb is not None:
    @cocotb.test()
    async def run_plane_mux(dut):
        from cocotbext.axi import AxiStreamFrame

        from mrcnic.sim.tb import start

        idle, bp = tb_param("idle"), tb_param("backpressure")
        await start(dut, ["s_axis_0__tvalid", "s_axis_1__tvalid", "m_axis__tready"])
        tb = TB(dut, idle, bp)
        rng = random.Random(3)
        sent = [[], []]
        for n, size in enumerate(SIZES):
            for src in (0, 1):
                # first byte tags the source, second the frame number within it
                body = bytes([src, len(sent[src]) & 0xFF]) + rng.randbytes(max(0, size - 2))
                body = body[:size] if size >= 2 else bytes([src])
                sent[src].append(body)
                await tb.sources[src].send(AxiStreamFrame(body))
        got = []
        total = len(sent[0]) + len(sent[1])
        for _ in range(total):
            got.append(bytes((await tb.sink.recv()).tdata))
        await ClockCycles(dut.clk, 10)
        assert tb.sink.empty()
        # Whole frames, each source's in order, nothing lost or duplicated.
        per_src = [[g for g in got if g[0] == s] for s in (0, 1)]
        assert per_src == sent
        # Round robin: with both sources full of frames the grant alternates.
        if not idle:
            order = [g[0] for g in got]
            assert all(a != b for a, b in zip(order, order[1:])), order[:20]
        # One beat per clock across frame boundaries when nothing pauses.
        if not idle and not bp:
            cycles = [b[0] for b in tb.beats]
            assert cycles[-1] - cycles[0] + 1 == len(cycles)
        # ``source`` names the frame's input on every beat (the first byte tags it).
        first = True
        for _, last, source, byte0 in tb.beats:
            if first:
                tag = byte0
            assert source == tag
            first = bool(last)
        assert int(dut.frames_0.value) == len(sent[0])
        assert int(dut.frames_1.value) == len(sent[1])


@pytest.mark.parametrize("idle,backpressure", [(False, False), (True, True), (False, True)])
def test_plane_mux(tmp_path, idle, backpressure):
    run_rtl(PlaneMux(inputs=2), toplevel="plane_mux", test_module="tests.rtl.test_plane_mux",
            build_dir=tmp_path / "b", env={"idle": idle, "backpressure": backpressure},
            quiet=True)


def test_plane_mux_parameters():
    with pytest.raises(ValueError):
        PlaneMux(inputs=1)
    with pytest.raises(ValueError):
        PlaneMux(inputs=9)
    with pytest.raises(ValueError):
        PlaneMux(data_width=12)
