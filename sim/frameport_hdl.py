"""The co-simulation's plane-port frame hand-off in the testbench's HDL: whole frames
between the Python fabric and a NIC's AXI-Stream plane ports, no Python per beat.

``mrcnic sim`` connects every plane port of every NIC to the fabric model.  The Python
stream models (:mod:`mrcnic.sim.fastaxis`, cocotbext-axi's ``AxiStreamSource`` /
``AxiStreamSink``) wake at every clock edge while a frame flows, which caps the
co-simulation's speed; these buffers are simulated by the simulator itself and Python
touches them once per frame:

* :data:`INJECT_MODULE` (fabric -> NIC, on the NIC's ``s_axis_p<i>``): a ring of
  ``2**AW`` beats ``{tlast, tkeep[7:0], tdata[63:0]}``, :data:`ROW_BEATS` to a row (one
  GPI access), every frame starting a row, that Python fills through the simulator's
  handles (:class:`HdlFrameSource`), and ``queued``, the frames Python put in
  (written by Python only).  At every rising edge it does what ``AxiStreamSourceFast``
  does at that edge: when the beat on the port was taken (``tvalid & tready``) or
  ``tvalid`` is low, it drives the next beat of the frame in progress, or the first beat
  of the next queued frame (``taken`` counts frames started), or ``tvalid = tlast = 0``
  (``tdata`` / ``tkeep`` keep their last values, as cocotbext-axi's do).  A frame Python
  queues at an edge is first driven at the following edge, as the Python source's (it
  sees a frame sent at an edge from the next edge on).  Reset clears the port (``tvalid``,
  ``tlast``, the frame in progress), not the ring or its counters (``rp``, ``taken``,
  ``queued``): the co-simulation queues frames only after the one reset at its start.
* :data:`CAPTURE_MODULE` (NIC -> fabric, on the NIC's ``m_axis_p<i>``): ``tready`` low in
  reset and for the first edge after it, then high (the Python sink, started at the edge
  after reset, drives ``tready = 1`` from the edge after that, and its queue never
  fills); every beat taken is written to a ring of ``2**AW`` beats ``{tkeep, tdata}`` (rows as
  the inject ring's) at slot ``wp`` (rounded up to a row after each frame; ``frames``
  counts the last beats).  ``done`` (combinational: ``tvalid & tready & tlast``) is high in the clock whose edge takes a frame's last beat;
  :class:`HdlFrameSink` reads the frame at that edge: its earlier beats from the ring,
  the last one from the port (``tdata`` / ``tkeep``, top-level signals of the
  co-simulation top), the bytes whose ``tkeep`` bit is set, as cocotbext-axi's
  ``recv()`` returns them.

The Verilog is hand-written (a memory of thousands of beats as an Amaranth ``Memory``
would carry its initial contents word by word through RTLIL); the metacomments make the
arrays and counters visible to cocotb under Verilator.  Python writes a ring row with an
immediate GPI deposit (a row past every queued frame: the HDL reads it only after
``queued`` counts its frame) and ``queued`` with cocotb's scheduled write (applied after
the edge's logic ran, as a cocotb write is).  Of the capture row the edge it reads at
writes, Python takes only the beats written at earlier edges.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

__all__ = ["INJECT_MODULE", "CAPTURE_MODULE", "INJECT_AW", "CAPTURE_AW",
           "frameport_verilog", "HdlFrameSource", "HdlFrameSink"]

INJECT_MODULE = "mrcnic_frame_inject"     #: Verilog module: fabric -> NIC plane port
CAPTURE_MODULE = "mrcnic_frame_capture"   #: Verilog module: NIC plane port -> fabric
LANES, DATA_WIDTH = 8, 64                 #: the NIC's plane ports (CsrNic)
ROW_BEATS = 8         #: beats per ring row (one GPI access moves a row); frames start a row
INJECT_AW = 10        #: log2(beats) of an inject ring: 8 KiB queued per port (more waits in Python)
CAPTURE_AW = 10       #: log2(beats) of a capture ring: 8 KiB, longer than any NIC frame
# A NIC frame is at most ~4.5 KiB (563 beats, 71 rows).  A frame waits in the inject ring's
# backlog only while the ring holds more than 1024 - 8 - 576 beats still to drive, so it is
# in the ring before the port runs dry: the port's timing stays the Python source's.
_RB = ROW_BEATS.bit_length() - 1


def _text() -> str:
    d, k, r, rb = DATA_WIDTH, LANES, ROW_BEATS, _RB
    return f"""// {INJECT_MODULE}, {CAPTURE_MODULE}: the co-simulation's plane-port frame hand-off
// (mrcnic.sim.frameport_hdl).  A ring row holds {r} beats: {{tlast x{r}, tkeep x{r}, tdata x{r}}}
// (inject) or {{tkeep x{r}, tdata x{r}}} (capture), beat i in the i-th field from the LSB;
// every frame starts a row.
module {INJECT_MODULE} #(parameter AW = {INJECT_AW}) (
  input clk, input rst,
  output reg tvalid, input tready, output reg [{d - 1}:0] tdata,
  output reg [{k - 1}:0] tkeep, output reg tlast);
  reg [{r * (d + k + 1) - 1}:0] ring [0:(1 << (AW - {rb})) - 1] /*verilator public_flat_rw*/;
  reg [31:0] queued /*verilator public_flat_rw*/;   // frames Python put in (Python writes it)
  reg [31:0] taken /*verilator public_flat_rw*/;    // frames started
  reg [AW - 1:0] rp /*verilator public_flat_rw*/;   // next beat to drive
  reg active /*verilator public_flat_rw*/;          // a frame is in progress
  wire [{r * (d + k + 1) - 1}:0] row = ring[rp[AW - 1:{rb}]];
  wire [{rb - 1}:0] i = rp[{rb - 1}:0];
  wire last = row[{r * (d + k)} + i];
  integer j;
  initial begin
    tvalid = 0; tdata = 0; tkeep = 0; tlast = 0;
    queued = 0; taken = 0; rp = 0; active = 0;
    for (j = 0; j < (1 << (AW - {rb})); j = j + 1) ring[j] = 0;
  end
  always @(posedge clk) begin
    if (rst) begin
      tvalid <= 0; tdata <= 0; tkeep <= 0; tlast <= 0; active <= 0;
    end else if ((tvalid & tready) | ~tvalid) begin
      if (active | (queued != taken)) begin
        tvalid <= 1;
        tdata <= row[i * {d} +: {d}];
        tkeep <= row[{r * d} + i * {k} +: {k}];
        tlast <= last;
        // after a frame's last beat, the next frame's first beat starts the next row
        rp <= last ? {{rp[AW - 1:{rb}] + 1'b1, {rb}'d0}} : rp + 1'b1;
        active <= ~last;
        if (!active) taken <= taken + 1;
      end else begin
        tvalid <= 0; tlast <= 0;
      end
    end
  end
endmodule

module {CAPTURE_MODULE} #(parameter AW = {CAPTURE_AW}) (
  input clk, input rst,
  input tvalid, output reg tready, input [{d - 1}:0] tdata, input [{k - 1}:0] tkeep,
  input tlast, output done);
  reg [{r * (d + k) - 1}:0] ring [0:(1 << (AW - {rb})) - 1] /*verilator public_flat_rw*/;
  reg [31:0] wp /*verilator public_flat_rw*/;       // next beat's slot (beats since reset,
                                                    // rounded up to a row after each frame)
  reg [31:0] frames /*verilator public_flat_rw*/;   // frames ended since reset
  reg armed;
  wire [{rb - 1}:0] i = wp[{rb - 1}:0];
  integer j;
  assign done = tvalid & tready & tlast;
  initial begin
    tready = 0; wp = 0; frames = 0; armed = 0;
    for (j = 0; j < (1 << (AW - {rb})); j = j + 1) ring[j] = 0;
  end
  always @(posedge clk) begin
    armed <= ~rst;
    tready <= ~rst & armed;
    if (rst) begin
      wp <= 0; frames <= 0;
    end else if (tvalid & tready) begin
      ring[wp[AW - 1:{rb}]][i * {d} +: {d}] <= tdata;
      ring[wp[AW - 1:{rb}]][{r * d} + i * {k} +: {k}] <= tkeep;
      if (tlast) begin
        frames <= frames + 1;
        wp <= {{wp[31:{rb}] + 1'b1, {rb}'d0}};
      end else
        wp <= wp + 1;
    end
  end
endmodule
"""


def frameport_verilog() -> Path:
    """Both modules' Verilog, in the build cache under a name that hashes its text."""
    from .rtlsim import cached_text

    return cached_text("mrcnic_frameport", _text())


def _rows(frame: bytes) -> list[int]:
    """The inject ring rows of a frame (:data:`ROW_BEATS` beats of 8 bytes per row), the
    last beat's missing lanes zero with their ``tkeep`` bits clear, ``tlast`` on the last
    beat only (as ``AxiStreamSourceFast`` cuts it)."""
    r, n = ROW_BEATS, len(frame)
    span = r * LANES
    rows = []
    for off in range(0, n, span):
        chunk = frame[off:off + span]
        keep = (1 << len(chunk)) - 1                       # one bit per byte present
        last = 0
        if off + span >= n:
            last = 1 << ((len(chunk) - 1) // LANES)        # the beat holding the last byte
        rows.append((last << (r * (DATA_WIDTH + LANES))) | (keep << (r * DATA_WIDTH))
                    | int.from_bytes(chunk, "little"))
    return rows


def _beat_count(n: int) -> int:
    """Ring beats (slots) a frame of ``n`` bytes takes: its beats rounded up to a row."""
    return -(-n // (ROW_BEATS * LANES)) * ROW_BEATS


class HdlFrameSource:
    """Python's side of one :data:`INJECT_MODULE` instance (``inst``: its cocotb handle):
    :meth:`send_nowait` queues a frame (``bytes``, at least one byte) for the NIC's plane
    port.

    A frame goes into the ring at once when it has room (one GPI write per row of
    :data:`ROW_BEATS` beats, then ``queued`` + 1); otherwise it waits in :attr:`backlog`
    until :meth:`refill`, which the co-simulation calls at every edge while the backlog is
    not empty (:meth:`waiting`).  A frame longer than the ring raises ``ValueError``.
    """

    def __init__(self, inst, aw: int = INJECT_AW):
        from .fastsig import reader, writer

        self.size = 1 << aw                    # beats
        ring = inst.ring._handle
        # every row's GPI handle made now, before the run (one call each)
        self._rows = [ring.get_handle_by_index(i) for i in range(self.size // ROW_BEATS)]
        self._rp = reader(inst.rp)
        self._taken = reader(inst.taken)
        self._active = reader(inst.active)
        self._queued_w = writer(inst.queued)
        self.queued = 0           # frames put in the ring (the value last written to queued)
        self.wp = 0               # the next free slot (beats, a row's first)
        self.backlog = deque()
        self._fmt = f"0{ROW_BEATS * (DATA_WIDTH + LANES + 1)}b"

    def _room(self) -> int:
        """Rows free: the ring less the rows holding beats not yet driven, less one (so
        ``wp == rp`` means empty)."""
        used = -(-((self.wp - self._rp()) % self.size) // ROW_BEATS)
        return self.size // ROW_BEATS - 1 - used

    def _put(self, rows: list[int]):
        fmt = self._fmt
        for v in rows:
            # an immediate deposit: a row the HDL reads only once queued counts its frame
            self._rows[self.wp >> _RB].set_signal_val_binstr(0, format(v, fmt))
            self.wp = (self.wp + ROW_BEATS) % self.size
        self.queued = (self.queued + 1) & 0xFFFFFFFF
        self._queued_w(self.queued)

    def send_nowait(self, frame: bytes):
        """Queue ``frame`` (its bytes, all lanes valid but the last beat's tail)."""
        rows = _rows(bytes(frame))
        # at most rows - 2 rows: such a frame, backlogged, reaches the ring by the edge the
        # ring's last beat is driven, so the port's timing stays the Python source's
        if not rows or len(rows) > self.size // ROW_BEATS - 2:
            raise ValueError(f"a frame of {len(frame)} bytes does not fit the inject ring "
                             f"(at most {(self.size - 2 * ROW_BEATS) * LANES} bytes)")
        if self.backlog or len(rows) > self._room():
            self.backlog.append(rows)
        else:
            self._put(rows)

    def refill(self):
        """Move backlogged frames into the ring while they fit, in order."""
        while self.backlog and len(self.backlog[0]) <= self._room():
            self._put(self.backlog.popleft())

    def waiting(self) -> bool:
        """Frames wait in the backlog (the co-simulation then wakes at every edge)."""
        return bool(self.backlog)

    def idle(self) -> bool:
        """No frame queued, backlogged or in progress (``AxiStreamSource.idle()``)."""
        return not self.backlog and self._taken() == self.queued and not self._active()


class HdlFrameSink:
    """Python's side of one :data:`CAPTURE_MODULE` instance (``inst``) on a NIC's
    ``m_axis_p<i>`` (``tdata`` / ``tkeep``: cocotb handles of the port's top-level
    signals, ``done``: of its ``done``).

    :meth:`frame` at an edge where :meth:`done` is true (read right after the edge: the
    values the edge sampled) returns the frame whose last beat that edge takes.  Raises
    ``RuntimeError`` for a frame longer than the ring (it would have overwritten its own
    first beats) and when a frame ended at an edge Python did not read (``frames``, the
    HDL's count of frames ended, is not :attr:`count`).
    """

    def __init__(self, inst, tdata, tkeep, done, aw: int = CAPTURE_AW):
        from .fastsig import bit_reader, reader

        self.size = 1 << aw                    # beats
        ring = inst.ring._handle
        self._rows = [ring.get_handle_by_index(i) for i in range(self.size // ROW_BEATS)]
        self._wp = reader(inst.wp)
        self._frames = reader(inst.frames)
        self._tdata, self._tkeep = reader(tdata), reader(tkeep)
        self.done = bit_reader(done)
        self.count = 0            # frames read
        self.rp = 0               # the frame in progress's first slot (a row's first)

    @staticmethod
    def _bytes(data: int, keep: int, beats: int) -> bytes:
        """The bytes of the first ``beats`` beats of a row whose ``tkeep`` bits are set."""
        n = beats * LANES
        b = (data & ((1 << (8 * n)) - 1)).to_bytes(n, "little")
        keep &= (1 << n) - 1
        if keep == (1 << n) - 1:
            return b
        return bytes(b[i] for i in range(n) if keep >> i & 1)

    def frame(self) -> bytes:
        """The frame ending at this edge (see the class)."""
        if self._frames() != self.count:
            raise RuntimeError(f"{self._frames() - self.count} frame(s) ended at edges the "
                               "co-simulation did not read (mrcnic.sim.frameport_hdl)")
        self.count = (self.count + 1) & 0xFFFFFFFF
        wp = self._wp()
        n = (wp - self.rp) & 0xFFFFFFFF        # beats of the frame already in the ring
        if n >= self.size:
            raise RuntimeError(f"a frame of more than {self.size} beats overran the capture "
                               "ring (mrcnic.sim.frameport_hdl.CAPTURE_AW)")
        out = bytearray()
        span = ROW_BEATS * DATA_WIDTH
        rows = self.size // ROW_BEATS
        for r in range(-(-n // ROW_BEATS)):
            v = int(self._rows[((self.rp >> _RB) + r) % rows].get_signal_val_binstr(), 2)
            out += self._bytes(v, v >> span, min(ROW_BEATS, n - r * ROW_BEATS))
        out += self._bytes(self._tdata(), self._tkeep(), 1)
        self.rp = ((wp >> _RB) + 1) << _RB & 0xFFFFFFFF
        return bytes(out)
