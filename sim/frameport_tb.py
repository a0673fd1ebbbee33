"""Cycle-for-cycle check of the HDL frame hand-off (:mod:`mrcnic.sim.frameport_hdl`)
against the Python stream models it reproduces (:mod:`mrcnic.sim.fastaxis`), on small
rings so that the inject ring's backlog and both rings' wrap-around are exercised.

:class:`FramePortPair` holds one instance of each module:

* ``inj`` (:data:`~mrcnic.sim.frameport_hdl.INJECT_MODULE`, ``AW = inject_aw``) drives
  ``hdl``; an ``AxiStreamSourceFast`` drives ``py`` (top-level inputs); both see the one
  ``hdl__tready``, a top input Python sets at random every clock (``py__tready`` repeats
  it).  Test ``inject_matches_python_source`` sends the same random frames to both at the
  same edges (bursts of several frames at one edge, random gaps) through
  :class:`~mrcnic.sim.frameport_hdl.HdlFrameSource` (``refill()`` at every edge) and
  ``send_nowait``; at every falling edge ``tvalid`` and ``tlast`` of both ports must be
  equal (but for the ``x`` cocotbext-axi's source puts on ``tlast`` before its first
  frame, where the module drives 0), and ``tdata`` / ``tkeep`` too while ``tvalid`` is high.
* ``cap`` (:data:`~mrcnic.sim.frameport_hdl.CAPTURE_MODULE`, ``AW = capture_aw``) drains
  ``c``, driven by an ``AxiStreamSourceFast`` with random pauses; ``w`` repeats ``c``'s
  ``tvalid``/``tdata``/``tkeep``/``tlast`` for an ``AxiStreamSinkFast`` whose ``tready``
  (``w__tready``, a top input) drives nothing.  Test ``capture_matches_python_sink``
  requires ``c__tready == w__tready`` at every falling edge, and the frames
  :class:`~mrcnic.sim.frameport_hdl.HdlFrameSink` reads (at the edges its ``done()`` is
  high) to be the Python sink's, at the same simulation time, in order, and the frames sent.

Frame lengths and the inject ring (see :func:`inject_max_bytes`): ``send_nowait``
takes a frame of up to ``rows - 2`` rows (:data:`~mrcnic.sim.frameport_hdl.ROW_BEATS`
beats of 8 bytes each, ``rows = 2**AW / ROW_BEATS``): the port keeps the Python source's
timing only while a backlogged frame reaches the ring before the port runs dry.  Python
reads ``rp`` at an edge before the edge updates it, so at the edge that drives the ring's
last beat at most one row is still in use and a frame of ``rows - 2`` rows fits: it is
queued at that edge and the module starts it at the next edge, as the Python source does
(a frame of ``rows - 1`` rows would fit only one edge later).  The tests send frames of up
to half the 8-row ring of ``AW = 6`` (200 bytes) and up to the bound (384 bytes).

Scheduling: cocotb resumes the tasks an edge wakes in the order they waited; the test's
driver awaits a ``NullTrigger`` after each rising edge so that it runs after the Python
source's and sink's loops at that edge (a frame sent at an edge is the Python source's from
the next edge on, the module's semantics) and still before the simulator applies the edge's
register updates (it reads what the edge sampled, as the co-simulation's loop does).

Used by ``tests/test_frameport_unit.py`` (Icarus: builds and runs in seconds).
"""

from __future__ import annotations

import logging
import random

from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mrcnic.rtl.axis import AxiStreamSignature

from .frameport_hdl import CAPTURE_MODULE, DATA_WIDTH, INJECT_MODULE, LANES, ROW_BEATS

__all__ = ["FramePortPair", "INJECT_TEST_AW", "CAPTURE_TEST_AW", "INPUTS",
           "inject_max_bytes", "capture_max_bytes"]

INJECT_TEST_AW = 6       #: the tests' inject ring: 64 beats, 8 rows
CAPTURE_TEST_AW = 7      #: the tests' capture ring: 128 beats, 16 rows
#: every input of :class:`FramePortPair` but ``clk`` / ``rst``
INPUTS = ["hdl__tready", "py__tvalid", "py__tdata", "py__tkeep", "py__tlast",
          "c__tvalid", "c__tdata", "c__tkeep", "c__tlast", "w__tready"]


def inject_max_bytes(aw: int) -> int:
    """Longest frame ``HdlFrameSource(inst, aw).send_nowait`` takes: ``rows - 2`` rows, the
    longest for which the port keeps the Python source's timing however the backlog fills
    (the module docstring)."""
    return ((1 << aw) - 2 * ROW_BEATS) * LANES


def capture_max_bytes(aw: int) -> int:
    """Longest frame an :data:`CAPTURE_MODULE` ring of ``2**aw`` beats returns whole (a
    frame of ``2**aw`` beats: its last beat is read from the port, not the ring)."""
    return (1 << aw) * LANES


class FramePortPair(wiring.Component):
    """``hdl`` (source): an :data:`INJECT_MODULE` instance ``inj``; ``py`` (flipped: its
    ``tvalid``/``tdata``/``tkeep``/``tlast`` are inputs, for a Python source) sees
    ``hdl__tready`` as its ``tready``.  ``c`` (sink): a :data:`CAPTURE_MODULE` instance
    ``cap`` (its ``done`` on ``c_done``); ``w`` (source) repeats ``c``'s forward signals, its
    ``tready`` goes nowhere (a Python sink watching ``c``)."""

    def __init__(self, inject_aw: int = INJECT_TEST_AW, capture_aw: int = CAPTURE_TEST_AW):
        self.inject_aw, self.capture_aw = inject_aw, capture_aw
        sig = AxiStreamSignature(DATA_WIDTH)
        super().__init__({"hdl": Out(sig), "py": In(sig), "c": In(sig), "w": Out(sig),
                          "c_done": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.inj = Instance(
            INJECT_MODULE, p_AW=self.inject_aw, i_clk=ClockSignal(), i_rst=ResetSignal(),
            o_tvalid=self.hdl.tvalid, i_tready=self.hdl.tready, o_tdata=self.hdl.tdata,
            o_tkeep=self.hdl.tkeep, o_tlast=self.hdl.tlast)
        m.d.comb += self.py.tready.eq(self.hdl.tready)
        m.submodules.cap = Instance(
            CAPTURE_MODULE, p_AW=self.capture_aw, i_clk=ClockSignal(), i_rst=ResetSignal(),
            i_tvalid=self.c.tvalid, o_tready=self.c.tready, i_tdata=self.c.tdata,
            i_tkeep=self.c.tkeep, i_tlast=self.c.tlast, o_done=self.c_done)
        m.d.comb += [self.w.tvalid.eq(self.c.tvalid), self.w.tdata.eq(self.c.tdata),
                     self.w.tkeep.eq(self.c.tkeep), self.w.tlast.eq(self.c.tlast)]
        return m


def _beat_bytes(data: int, keep: int) -> bytes:
    """The bytes of one beat whose ``tkeep`` bits are set."""
    b = data.to_bytes(LANES, "little")
    return bytes(b[i] for i in range(LANES) if keep >> i & 1)


try:
    import cocotb
    from cocotb.triggers import FallingEdge, NullTrigger, RisingEdge
except ImportError:          # pragma: no cover - cocotb is a dependency
    cocotb = None


if cocotb is not None:
    class _PortMonitor:
        """Reassembles the frames of one AXI-Stream port of the top from the beats its
        ``tvalid & tready`` take (call :meth:`sample` at each rising edge)."""

        def __init__(self, dut, prefix: str):
            self.sigs = [getattr(dut, f"{prefix}__{n}")
                         for n in ("tvalid", "tready", "tdata", "tkeep", "tlast")]
            self.frames, self.cur = [], bytearray()

        def sample(self):
            """Take the beat this edge samples, if any."""
            valid, ready, data, keep, last = self.sigs
            if valid.value == 1 and ready.value == 1:
                self.cur += _beat_bytes(int(data.value), int(keep.value))
                if last.value == 1:
                    self.frames.append(bytes(self.cur))
                    self.cur = bytearray()

    @cocotb.test()
    async def inject_matches_python_source(dut):
        """Random frames and random ``tready``: the inject module's port equals the Python
        source's at every falling edge; the backlog and the ring's wrap-around are used."""
        from cocotbext.axi import AxiStreamBus, AxiStreamFrame

        from .fastaxis import AxiStreamSourceFast
        from .frameport_hdl import HdlFrameSource
        from .rtlsim import tb_param
        from .tb import start

        seed, count = tb_param("seed", 1), tb_param("frames", 400)
        aw = tb_param("inject_aw", INJECT_TEST_AW)
        max_len = tb_param("max_len", 200)
        assert max_len <= inject_max_bytes(aw), "frames beyond the cycle-identity bound"
        rng = random.Random(seed)
        await start(dut, INPUTS)
        logging.getLogger(f"cocotb.{dut._name}").setLevel(logging.WARNING)   # cocotbext-axi
        log = logging.getLogger("cocotb.frameport_tb")
        # both sources right after start(), as the co-simulation makes its plane ports
        hdl = HdlFrameSource(dut.inj, aw=aw)
        py = AxiStreamSourceFast(AxiStreamBus.from_prefix(dut, "py", bus_separator="__"),
                                 dut.clk, dut.rst)
        size = hdl.size
        mon_hdl, mon_py = _PortMonitor(dut, "hdl"), _PortMonitor(dut, "py")

        mismatches, stats = [], dict(falling=0, valid=0)
        pairs = [(getattr(dut, f"hdl__{n}"), getattr(dut, f"py__{n}"))
                 for n in ("tvalid", "tlast", "tdata", "tkeep")]

        async def compare():
            """Both ports at every falling edge (mismatches listed, asserted at the end)."""
            while True:
                await FallingEdge(dut.clk)
                stats["falling"] += 1
                got = [(str(h.value), str(p.value)) for h, p in pairs]
                valid = got[0][0] == "1"
                stats["valid"] += valid
                for (name, (h, p)) in zip(("tvalid", "tlast", "tdata", "tkeep"), got):
                    # tlast while tvalid is low too, but for the x cocotbext-axi's source
                    # puts on it when made, before its first frame (the module: 0)
                    if h != p and (valid or name == "tvalid"
                                   or (name == "tlast" and p not in "xX")):
                        mismatches.append((stats["falling"], name, h, p))
        cocotb.start_soon(compare())

        sent, lefts = [], []
        backlogged = max_backlog = from_idle = 0
        edge = RisingEdge(dut.clk)
        rp = dut.inj.rp
        # load phases of 150 clocks: (P(tready), longest gap between sends (for frames of
        # up to 200 bytes; in proportion for longer ones), P(a burst)); a gap of None sends
        # nothing.  Only light ones (below the port's rate: the ring empties, the port
        # idles) follow a phase that left more than 8 frames in the backlog.
        light = [(1.0, 40, 0.0), (0.8, 40, 0.0), (1.0, None, 0), (0.5, None, 0)]
        heavy = [(0.5, 40, 0.2), (0.3, 40, 0.3), (1.0, 20, 0.5), (0.1, 40, 0.2)]
        cycle, next_send, phase = 0, 1, [light[0]]

        def send(frame: bytes):
            """The frame to both sources at this edge."""
            nonlocal backlogged, from_idle
            before = len(hdl.backlog)
            from_idle += hdl.idle() and py.idle()
            hdl.send_nowait(frame)
            py.send_nowait(AxiStreamFrame(frame))
            backlogged += len(hdl.backlog) > before
            sent.append(frame)

        async def step():
            """One rising edge: sample both ports, draw the next ``tready``."""
            nonlocal cycle
            await edge
            await NullTrigger()         # after the Python source's loop at this edge
            cycle += 1
            mon_hdl.sample()
            mon_py.sample()
            if cycle % 150 == 0:
                phase[0] = rng.choice(light + (heavy if len(hdl.backlog) <= 8 else []))
            dut.hdl__tready.value = int(rng.random() < phase[0][0])

        def refill():
            """``refill()`` (every edge, as the co-simulation while ``waiting()``); note the
            beats left to drive when it moves a frame."""
            nonlocal max_backlog
            queued, left = hdl.queued, (hdl.wp - int(rp.value)) % size
            hdl.refill()
            if hdl.queued != queued:
                lefts.append(left)
            max_backlog = max(max_backlog, len(hdl.backlog))

        while len(sent) < count:
            await step()
            if cycle >= next_send and phase[0][1] is not None:
                _, gap, burst = phase[0]
                for _ in range(rng.randint(2, 6) if rng.random() < burst else 1):
                    if len(sent) < count:
                        send(rng.randbytes(rng.randint(1, max_len)))
                next_send = cycle + 1 + rng.randint(0, gap * max_len // 200)
            refill()
        while not (hdl.idle() and py.idle() and len(mon_hdl.frames) == len(sent)):
            assert cycle < 100 * count + 10_000, "the inject port never drained"
            await step()
            refill()
        assert not mismatches, f"{len(mismatches)} mismatches, first {mismatches[:5]}"
        # the longest frame the ring takes goes straight into the empty ring (the port's
        # timing is the Python source's); one byte more is refused, nothing queued
        assert not hdl.backlog and hdl.idle()
        send(rng.randbytes(inject_max_bytes(aw)))
        assert not hdl.backlog, "the longest frame did not fit the empty ring"
        queued, wp = hdl.queued, hdl.wp
        for bad in (bytes(inject_max_bytes(aw) + 1), b""):
            try:
                hdl.send_nowait(bad)
            except ValueError:
                pass
            else:
                raise AssertionError(f"a frame of {len(bad)} bytes was accepted")
        assert (hdl.queued, hdl.wp, len(hdl.backlog)) == (queued, wp, 0)
        while not (hdl.idle() and py.idle() and len(mon_hdl.frames) == len(sent)):
            assert cycle < 100 * count + 20_000, "the inject port never drained"
            await step()
            refill()
        for _ in range(20):
            await step()

        assert not mismatches, f"{len(mismatches)} mismatches, first {mismatches[:5]}"
        assert mon_hdl.frames == sent, "the inject port's frames are not the ones sent"
        assert mon_py.frames == sent, "the Python source's frames are not the ones sent"
        beats = sum(-(-len(f) // LANES) for f in sent)
        assert stats["valid"] >= beats, stats
        # the backlog used, frames put straight in, frames sent to an idle port, idle clocks
        assert backlogged >= 20 and max_backlog >= 3, (backlogged, max_backlog)
        assert len(sent) - backlogged >= 10 and from_idle >= 5, (backlogged, from_idle)
        assert stats["falling"] - stats["valid"] >= stats["falling"] // 50, stats
        wraps = sum(-(-len(f) // (ROW_BEATS * LANES)) for f in sent) * ROW_BEATS // size
        assert wraps >= 20, wraps
        # frames of rows - 2 rows: some backlogged frame went in with at most a row left to
        # drive, the close call the cycle identity depends on (refill() moves a frame of R
        # rows as soon as rows - 1 - R rows are in use)
        tight = sum(left <= ROW_BEATS for left in lefts)
        if max_len > inject_max_bytes(aw) - ROW_BEATS * LANES:
            assert tight >= 1, sorted(lefts)[:10]
        log.info("inject: %d frames (%d beats, %d cycles valid of %d), %d backlogged "
                 "(at most %d waiting), %d sent to an idle port, %d ring wraps, %d refills "
                 "with at most a row left to drive (fewest beats left %d): identical",
                 len(sent), beats, stats["valid"], stats["falling"], backlogged,
                 max_backlog, from_idle, wraps, tight, min(lefts))

    @cocotb.test()
    async def capture_matches_python_sink(dut):
        """Random frames with random source pauses: the capture module's ``tready`` is the
        Python sink's at every falling edge and it returns the Python sink's frames, at the
        same edges; a frame longer than the ring raises ``RuntimeError``."""
        from cocotbext.axi import AxiStreamBus, AxiStreamFrame
        from cocotb.utils import get_sim_time

        from .fastaxis import AxiStreamSinkFast, AxiStreamSourceFast
        from .frameport_hdl import HdlFrameSink
        from .rtlsim import tb_param
        from .tb import start

        seed, count = tb_param("seed", 1), tb_param("frames", 300)
        aw = tb_param("capture_aw", CAPTURE_TEST_AW)
        rng = random.Random(seed)
        await start(dut, INPUTS)
        logging.getLogger(f"cocotb.{dut._name}").setLevel(logging.WARNING)   # cocotbext-axi
        log = logging.getLogger("cocotb.frameport_tb")
        # the Python sink at the edge after reset, as the co-simulation makes it
        py = AxiStreamSinkFast(AxiStreamBus.from_prefix(dut, "w", bus_separator="__"),
                               dut.clk, dut.rst)
        cap = HdlFrameSink(dut.cap, dut.c__tdata, dut.c__tkeep, dut.c_done, aw=aw)
        src = AxiStreamSourceFast(AxiStreamBus.from_prefix(dut, "c", bus_separator="__"),
                                  dut.clk, dut.rst)

        def pauses():
            """The source's pause at each edge: phases of random length and density."""
            p = 0.0
            while True:
                for _ in range(rng.randint(20, 200)):
                    yield rng.random() < p
                p = rng.choice([0.0, 0.0, 0.2, 0.5, 0.8])
        src.set_pause_generator(pauses())

        mismatches, stats = [], dict(falling=0, beats=0)
        c_ready, w_ready, c_valid = dut.c__tready, dut.w__tready, dut.c__tvalid

        async def compare():
            """Both ``tready`` at every falling edge; the beats taken."""
            while True:
                await FallingEdge(dut.clk)
                stats["falling"] += 1
                a, b = str(c_ready.value), str(w_ready.value)
                if a != b:
                    mismatches.append((stats["falling"], a, b))
                stats["beats"] += a == "1" and c_valid.value == 1
        cocotb.start_soon(compare())

        got_py = []

        async def collect():
            """The Python sink's frames with the time of their last beat."""
            while True:
                f = await py.recv()
                got_py.append((f.sim_time_end, bytes(f.tdata)))
        cocotb.start_soon(collect())

        full = capture_max_bytes(aw)
        sent, got_hdl = [], []
        edge = RisingEdge(dut.clk)
        cycle, next_send = 0, 0

        async def step():
            """One rising edge; read the frame whose last beat it takes."""
            nonlocal cycle
            await edge
            await NullTrigger()          # after the Python sink's loop at this edge
            cycle += 1
            if cap.done():
                got_hdl.append((get_sim_time(), cap.frame()))

        while len(sent) < count:
            # the first frames at the edge the sinks are made (driven from the next edge)
            if cycle >= next_send:
                for _ in range(rng.randint(2, 5) if rng.random() < 0.3 else 1):
                    n = len(sent)
                    if n == count:
                        break
                    size = (full if n % 50 == 7 else
                            rng.randint(201, full) if rng.random() < 0.05 else
                            rng.randint(1, 200))
                    sent.append(rng.randbytes(size))
                    src.send_nowait(AxiStreamFrame(sent[-1]))
                next_send = cycle + 1 + rng.randint(0, 40)
            await step()
        while len(got_hdl) < len(sent) or len(got_py) < len(sent):
            assert cycle < 200 * count + 10_000, "the capture port never drained"
            await step()
        for _ in range(20):
            await step()

        assert not mismatches, f"{len(mismatches)} tready mismatches, first {mismatches[:5]}"
        assert len(got_hdl) == len(got_py) == len(sent) >= 100
        for i, ((t, h), (tp, p)) in enumerate(zip(got_hdl, got_py)):
            assert (t, h) == (tp, p), f"frame {i}: HDL at {t} ({len(h)} bytes), " \
                                      f"Python at {tp} ({len(p)} bytes)"
        assert [h for _, h in got_hdl] == sent
        assert int(dut.cap.frames.value) == cap.count == len(sent)
        assert stats["beats"] == sum(-(-len(f) // LANES) for f in sent), stats
        assert sum(len(f) == full for f in sent) >= 2           # frames of a whole ring
        assert cap.rp >= 10 * cap.size, cap.rp                  # the ring wrapped 10 times
        # one beat more than the ring: the HDL sink refuses it, the Python sink takes it
        big = rng.randbytes(full + 1)
        src.send_nowait(AxiStreamFrame(big))
        for _ in range(100 * (full // LANES)):
            await edge
            await NullTrigger()
            if cap.done():
                break
        else:
            raise AssertionError("the long frame never ended")
        try:
            cap.frame()
        except RuntimeError as exc:
            assert "overran the capture ring" in str(exc), exc
        else:
            raise AssertionError("a frame longer than the capture ring was returned")
        for _ in range(4):
            await edge
        assert got_py[-1][1] == big
        log.info("capture: %d frames (%d beats in %d cycles), tready and frames "
                 "identical; %d beats of %d raised RuntimeError", len(sent),
                 stats["beats"], stats["falling"], -(-len(big) // LANES), cap.size)
