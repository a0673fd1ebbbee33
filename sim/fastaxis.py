"""Cheaper cocotbext-axi AXI-Stream sink and source for the co-simulation's plane ports.

``cocotbext.axi.AxiStreamSink`` reads ``tdata`` and ``tkeep`` once per byte lane
of every beat (16 simulator reads per 64-bit beat), and ``AxiStreamSource``
assembles every beat byte by byte; profiling ``mrcnic sim`` under Verilator put
them among the first per-cycle Python costs.  :class:`AxiStreamSinkFast` and
:class:`AxiStreamSourceFast` are the same classes, their ``_run`` loops the same
line for line, with each port read once per beat and each frame cut into beats
once, ports read and written through :mod:`mrcnic.sim.fastsig`, and a port written
only when its value changes (a write of the value it holds changes nothing): the
handshakes they drive are the same cycle for cycle, and so are the frames they carry.
"""

from __future__ import annotations

from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamFrame, AxiStreamSink, AxiStreamSource

from .fastsig import bit_reader, reader, writer

__all__ = ["AxiStreamSinkFast", "AxiStreamSourceFast"]


class AxiStreamSinkFast(AxiStreamSink):
    """``cocotbext.axi.AxiStreamSink`` (same constructor, same ``recv``) for 8-bit byte
    lanes, one read of each port per accepted beat.

    Raises ``ValueError`` for a bus whose byte size is not 8 bits.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.byte_size != 8:
            raise ValueError(f"AxiStreamSinkFast needs 8-bit byte lanes, not {self.byte_size}")

    async def _run(self):
        # cocotbext-axi 0.1.28 AxiStreamSink._run, with the per-lane reads hoisted
        frame = None
        self.active = False
        bus = self.bus
        has_tready, has_tvalid = hasattr(bus, "tready"), hasattr(bus, "tvalid")
        has_tlast, has_tkeep = hasattr(bus, "tlast"), hasattr(bus, "tkeep")
        has_tid, has_tdest = hasattr(bus, "tid"), hasattr(bus, "tdest")
        has_tuser = hasattr(bus, "tuser")
        lanes = self.byte_lanes
        all_keep = [1] * lanes
        clock_edge_event = RisingEdge(self.clock)
        wake_event = self.wake_event.wait()
        tready_r = bit_reader(bus.tready) if has_tready else None
        tready_w = writer(bus.tready) if has_tready else None
        tvalid_r = bit_reader(bus.tvalid) if has_tvalid else None
        tlast_r = bit_reader(bus.tlast) if has_tlast else None
        tdata_r = reader(bus.tdata)
        tkeep_r = reader(bus.tkeep) if has_tkeep else None
        driven = None                       # the value last written to tready

        while True:
            pause_sample = bool(self.pause)

            await clock_edge_event

            tready_sample = (not has_tready) or tready_r()
            tvalid_sample = (not has_tvalid) or tvalid_r()

            if tready_sample and tvalid_sample:
                if not frame:
                    frame = AxiStreamFrame(bytearray(), [], [], [], [])
                    frame.sim_time_start = get_sim_time()
                    self.active = True

                frame.tdata.extend(tdata_r().to_bytes(lanes, "little"))
                if has_tkeep:
                    keep = tkeep_r()
                    frame.tkeep.extend(all_keep if keep == (1 << lanes) - 1
                                       else [(keep >> i) & 1 for i in range(lanes)])
                if has_tid:
                    frame.tid.extend([int(bus.tid.value)] * lanes)
                if has_tdest:
                    frame.tdest.extend([int(bus.tdest.value)] * lanes)
                if has_tuser:
                    frame.tuser.extend([int(bus.tuser.value)] * lanes)

                if not has_tlast or tlast_r():
                    frame.sim_time_end = get_sim_time()
                    self.queue_occupancy_bytes += len(frame)
                    self.queue_occupancy_frames += 1
                    self.queue.put_nowait(frame)
                    self.active_event.set()
                    frame = None
            else:
                self.active = bool(frame)

            if has_tready:
                paused = self.full() or pause_sample
                if driven != (not paused):
                    driven = not paused
                    tready_w(driven)
                if (not tvalid_sample or paused) and (pause_sample == bool(self.pause)):
                    self.wake_event.clear()
                    await wake_event
            else:
                if not tvalid_sample:
                    self.wake_event.clear()
                    await wake_event


class AxiStreamSourceFast(AxiStreamSource):
    """``cocotbext.axi.AxiStreamSource`` (same constructor, same ``send``) for 8-bit byte
    lanes and frames without side-band signals: each queued frame is cut into
    ``(tdata, tkeep, tlast)`` beats once, when it is dequeued.

    Raises ``ValueError`` for a bus with ``tid``/``tdest``/``tuser`` or byte size not 8.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.byte_size != 8 or any(hasattr(self.bus, n) for n in ("tid", "tdest", "tuser")):
            raise ValueError("AxiStreamSourceFast needs 8-bit lanes and no tid/tdest/tuser")

    def _beats(self, frame) -> list:
        """``(tdata, tkeep, tlast)`` of every beat of a normalized frame."""
        lanes, data, keep = self.byte_lanes, bytes(frame.tdata), frame.tkeep
        out = []
        for off in range(0, len(data), lanes):
            chunk = data[off:off + lanes]
            k = 0
            for i, b in enumerate(keep[off:off + lanes]):
                k |= (b & 1) << i
            out.append((int.from_bytes(chunk, "little"), k, off + lanes >= len(data)))
        return out

    async def _run(self):
        # cocotbext-axi 0.1.28 AxiStreamSource._run, with the beats of a frame made at once
        frame = None
        beats, beat = [], 0
        self.active = False
        bus = self.bus
        has_tready, has_tvalid = hasattr(bus, "tready"), hasattr(bus, "tvalid")
        has_tlast, has_tkeep = hasattr(bus, "tlast"), hasattr(bus, "tkeep")
        clock_edge_event = RisingEdge(self.clock)
        tready_r = bit_reader(bus.tready) if has_tready else None
        tvalid_r = bit_reader(bus.tvalid) if has_tvalid else None
        tvalid_w = writer(bus.tvalid) if has_tvalid else None
        tlast_w = writer(bus.tlast) if has_tlast else None
        tkeep_w = writer(bus.tkeep) if has_tkeep else None
        tdata_w = writer(bus.tdata)
        # values last written by this loop (None: not yet; reset writes tvalid = 0 itself)
        valid_d = last_d = keep_d = None

        while True:
            await clock_edge_event

            tready_sample = (not has_tready) or tready_r()
            tvalid_sample = (not has_tvalid) or tvalid_r()

            if (tready_sample and tvalid_sample) or not tvalid_sample:
                if not frame and not self.queue.empty():
                    frame = self.queue.get_nowait()
                    self.dequeue_event.set()
                    self.queue_occupancy_bytes -= len(frame)
                    self.queue_occupancy_frames -= 1
                    self.current_frame = frame
                    frame.sim_time_start = get_sim_time()
                    frame.sim_time_end = None
                    frame.normalize()
                    self.active = True
                    beats, beat = self._beats(frame), 0

                if frame and not self.pause:
                    tdata_val, tkeep_val, tlast_val = beats[beat]
                    beat += 1
                    if tlast_val:
                        frame.sim_time_end = get_sim_time()
                        frame.handle_tx_complete()
                        frame = None
                        self.current_frame = None

                    tdata_w(tdata_val)
                    if has_tvalid and valid_d != 1:
                        valid_d = 1
                        tvalid_w(1)
                    if has_tlast and last_d != int(tlast_val):
                        last_d = int(tlast_val)
                        tlast_w(last_d)
                    if has_tkeep and keep_d != tkeep_val:
                        keep_d = tkeep_val
                        tkeep_w(tkeep_val)
                else:
                    if has_tvalid and valid_d != 0:
                        valid_d = 0
                        tvalid_w(0)
                    if has_tlast and last_d != 0:
                        last_d = 0
                        tlast_w(0)
                    self.active = bool(frame)
                    if not frame and self.queue.empty():
                        self.idle_event.set()
                        self.active_event.clear()

                        await self.active_event.wait()
