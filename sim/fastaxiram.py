"""Cheaper cocotbext-axi ``AxiRam`` models for the co-simulation's host memory (``m_axi``).

Two models, each driving the handshakes ``AxiRam`` drives, cycle for cycle:
:class:`AxiRamOneTask` (the co-simulation's; ``AxiRam``'s seven tasks as one coroutine,
see its docstring) and :class:`AxiRamFast` (``MRCNIC_COSIM_AXIRAM=fast``; ``AxiRam``'s own
tasks, cheaper between their awaits).  ``MRCNIC_COSIM_AXIRAM=cocotbext`` runs ``AxiRam``
itself, the reference.  Profiling put ``AxiRam`` among the first per-beat Python costs of
``mrcnic sim`` under Verilator.

:class:`AxiRamFast` is ``cocotbext.axi.AxiRam`` (0.1.28) with the same objects, made in the
same order, the same coroutines started in the same order, and every ``await`` of theirs
the same: the five channel models (AW/W/AR sinks, B/R sources, queues 2 deep) and the two
burst processes.  Only the work between the ``await``\\ s is cheaper:

* every port is read and written through :mod:`mrcnic.sim.fastsig` (the simulator's bit
  string, no ``LogicArray`` in between);
* the AW, W and AR sinks read the few ports a burst needs once per accepted beat, as
  ints, instead of ``Bus.sample`` into a transaction object (every port as a
  ``LogicArray``, turned into ints again by the burst process);
* the R source writes ``rdata`` per beat, ``rid``/``rlast``/``rresp`` and the handshake
  outputs (``rvalid``, and the sinks' ``*ready``) only when their value changes: a write
  of the value a port already holds changes nothing the RTL sees;
* the write process stores a beat whose ``wstrb`` is all ones as one slice (no per-lane
  loop), the read process takes each beat as one slice of the memory; no per-burst log
  records are formatted (the co-simulation sets these loggers to WARNING).

The handshakes it drives are therefore the same cycle for cycle as ``AxiRam``'s, and so
is the memory: ``mrcnic sim`` gives the same report and the same pcap with either
(checked against ``MRCNIC_COSIM_POLL=1`` runs and the previous harness).  Like ``AxiRam``
it is a :class:`cocotbext.axi.memory.Memory` (``read``/``write``/``mem``).
"""

from __future__ import annotations

from collections import deque

import cocotb
from cocotb.triggers import Edge, Event, RisingEdge
from cocotb.types import LogicArray
from cocotbext.axi import axi_slave
from cocotbext.axi.axi_channels import AxiARSink, AxiAWSink, AxiRSource, AxiWSink
from cocotbext.axi.axi_ram import AxiRamRead, AxiRamWrite
from cocotbext.axi.constants import AxiBurstType, AxiResp
from cocotbext.axi.memory import Memory

from .fastsig import bit_reader, reader, writer

__all__ = ["AxiRamFast", "AxiRamOneTask"]

_FIXED, _INCR, _WRAP = int(AxiBurstType.FIXED), int(AxiBurstType.INCR), int(AxiBurstType.WRAP)


def _sink_run(fields):
    """A ``StreamSink._run`` (cocotbext-axi 0.1.28, line for line) whose accepted beat is
    the tuple of ``int`` values of ``fields`` (port names of the channel)."""

    async def _run(self):
        bus = self.bus
        reads = [reader(getattr(bus, f)) for f in fields]
        ready_r, valid_r = bit_reader(self.ready), bit_reader(self.valid)
        ready_w = writer(self.ready)
        put = self.queue.put_nowait
        clock_edge_event = RisingEdge(self.clock)
        wake_event = self.wake_event.wait()
        driven = None                       # the value last written to ready

        while True:
            pause_sample = bool(self.pause)

            await clock_edge_event

            # read handshake signals
            ready_sample = ready_r()
            valid_sample = valid_r()

            if ready_sample and valid_sample:
                put(tuple([r() for r in reads]))
                self.active_event.set()

            paused = self.full() or pause_sample
            if driven != (not paused):
                driven = not paused
                ready_w(driven)
            if (not valid_sample or paused) and (pause_sample == bool(self.pause)):
                self.wake_event.clear()
                await wake_event

    return _run


def _write_word(mem, size: int, word_addr: int, data: bytes, strb: int, full: int):
    """Write one beat (``data``: the data width's bytes) at byte address ``word_addr`` (the
    beat's aligned address), the bytes whose ``strb`` bit is set, as cocotbext-axi's
    ``AxiRamWrite`` writes them (the whole beat when ``strb == full``, else one slice per
    run of set bits), the address wrapping modulo ``size``.  Raises ``IndexError`` for a
    slice past the end of the memory (the caller answers SLVERR)."""
    lanes = len(data)
    if strb == full:
        a = word_addr % size
        if a + lanes > size:
            raise IndexError("write past the end of the memory")
        mem[a:a + lanes] = data
        return
    start = None
    for i in range(lanes + 1):
        if i < lanes and strb >> i & 1:
            if start is None:
                start = i
        elif start is not None:
            a = (word_addr + start) % size
            if a + i - start > size:
                raise IndexError("write past the end of the memory")
            mem[a:a + i - start] = data[start:i]
            start = None


class _AWSink(AxiAWSink):
    _run = _sink_run(("awid", "awaddr", "awlen", "awsize", "awburst"))


class _WSink(AxiWSink):
    _run = _sink_run(("wdata", "wstrb", "wlast"))


class _ARSink(AxiARSink):
    _run = _sink_run(("arid", "araddr", "arlen", "arsize", "arburst"))


class _RSource(AxiRSource):
    """``StreamSource._run`` (line for line) for queued ``(rid, rdata, rlast, rresp)``."""

    async def _run(self):
        ready_r, valid_r = bit_reader(self.ready), bit_reader(self.valid)
        valid_w = writer(self.valid)
        bus = self.bus
        rid_w, rdata_w, rlast_w, rresp_w = (writer(bus.rid), writer(bus.rdata),
                                            writer(bus.rlast), writer(bus.rresp))
        queue = self.queue
        clock_edge_event = RisingEdge(self.clock)
        # values last written by this loop (None: not yet; reset writes valid = 0 itself)
        rid = rlast = rresp = None
        valid_driven = None

        while True:
            await clock_edge_event

            # read handshake signals
            ready_sample = ready_r()
            valid_sample = valid_r()

            if (ready_sample and valid_sample) or (not valid_sample):
                if not queue.empty() and not self.pause:
                    i, rdata, last, rr = queue.get_nowait()
                    if i != rid:
                        rid = i
                        rid_w(i)
                    rdata_w(rdata)
                    if last != rlast:
                        rlast = last
                        rlast_w(last)
                    if rr != rresp:
                        rresp = rr
                        rresp_w(rr)
                    self.dequeue_event.set()
                    if valid_driven != 1:
                        valid_driven = 1
                        valid_w(1)
                    self.active = True
                else:
                    if valid_driven != 0:
                        valid_driven = 0
                        valid_w(0)
                    self.active = not queue.empty()
                    if queue.empty():
                        self.idle_event.set()
                        self.active_event.clear()

                        await self.active_event.wait()


class _Channels:
    """Within ``with``: cocotbext-axi's slave models make the fast channel classes."""

    _swap = dict(AxiAWSink=_AWSink, AxiWSink=_WSink, AxiARSink=_ARSink, AxiRSource=_RSource)

    def __enter__(self):
        self._saved = {n: getattr(axi_slave, n) for n in self._swap}
        for n, c in self._swap.items():
            setattr(axi_slave, n, c)

    def __exit__(self, *exc):
        for n, c in self._saved.items():
            setattr(axi_slave, n, c)


class _RamWrite(AxiRamWrite):
    """``AxiRamWrite`` whose ``_process_write`` awaits exactly what
    ``AxiSlaveWrite._process_write`` awaits (AW, then each W beat, then the B send)."""

    async def _process_write(self):
        mem, size = self.mem, self.size
        lanes = self.byte_lanes
        full = self.strb_mask
        aw_recv, w_recv, b_send = self.aw_channel.recv, self.w_channel.recv, self.b_channel.send
        while True:
            awid, addr, length, size_log2, burst = await aw_recv()

            num_bytes = 2 ** size_log2
            assert 0 < num_bytes <= lanes

            aligned_addr = (addr // num_bytes) * num_bytes
            length += 1

            transfer_size = num_bytes * length

            if burst == _WRAP:
                lower_wrap_boundary = (addr // transfer_size) * transfer_size
                upper_wrap_boundary = lower_wrap_boundary + transfer_size

            if burst == _INCR:
                # check 4k boundary crossing
                assert 0x1000 - (aligned_addr & 0xfff) >= transfer_size

            cur_addr = aligned_addr

            b = self.b_channel._transaction_obj()
            b.bid = awid
            b.bresp = AxiResp.OKAY

            for n in range(length):
                cur_word_addr = (cur_addr // lanes) * lanes

                wdata, strb, last = await w_recv()
                data = wdata.to_bytes(lanes, "little")

                try:
                    _write_word(mem, size, cur_word_addr, data, strb, full)
                except Exception:
                    self.log.warning("Write operation failed")
                    b.bresp = AxiResp.SLVERR

                assert last == (n == length - 1)

                if burst != _FIXED:
                    cur_addr += num_bytes

                    if burst == _WRAP:
                        if cur_addr == upper_wrap_boundary:
                            cur_addr = lower_wrap_boundary

            await b_send(b)


class _RamRead(AxiRamRead):
    """``AxiRamRead`` whose ``_process_read`` awaits exactly what
    ``AxiSlaveRead._process_read`` awaits (AR, then each R send)."""

    async def _process_read(self):
        mem, size = self.mem, self.size
        lanes = self.byte_lanes
        okay = int(AxiResp.OKAY)
        ar_recv, r_send = self.ar_channel.recv, self.r_channel.send
        while True:
            arid, addr, length, size_log2, burst = await ar_recv()

            num_bytes = 2 ** size_log2
            assert 0 < num_bytes <= lanes

            aligned_addr = (addr // num_bytes) * num_bytes
            length += 1

            transfer_size = num_bytes * length

            if burst == _WRAP:
                lower_wrap_boundary = (addr // transfer_size) * transfer_size
                upper_wrap_boundary = lower_wrap_boundary + transfer_size

            if burst == _INCR:
                # check 4k boundary crossing
                assert 0x1000 - (aligned_addr & 0xfff) >= transfer_size

            cur_addr = aligned_addr

            for n in range(length):
                a = ((cur_addr // lanes) * lanes) % size
                await r_send((arid, int.from_bytes(mem[a:a + lanes], "little"),
                              int(n == length - 1), okay))

                if burst != _FIXED:
                    cur_addr += num_bytes

                    if burst == _WRAP:
                        if cur_addr == upper_wrap_boundary:
                            cur_addr = lower_wrap_boundary


class AxiRamFast(Memory):
    """``cocotbext.axi.AxiRam(bus, clock, reset, size=, mem=)`` for the co-simulation's
    ``m_axi`` (8-bit lanes, ports ``*id``/``*len``/``*size``/``*burst``/``wstrb``/``rresp``
    present; see the module docstring).  Raises ``ValueError`` for another bus."""

    def __init__(self, bus, clock, reset=None, reset_active_level=True, size=2**64, mem=None,
                 **kwargs):
        need = dict(aw=("awid", "awlen", "awsize", "awburst"), w=("wstrb",),
                    ar=("arid", "arlen", "arsize", "arburst"), r=("rresp",))
        for ch, names in need.items():
            b = getattr(bus.write if ch in ("aw", "w") else bus.read, ch)
            if not all(hasattr(b, n) for n in names):
                raise ValueError(f"AxiRamFast needs the {ch} ports {', '.join(names)}")
        self.write_if = None
        self.read_if = None

        super().__init__(size, mem, **kwargs)

        with _Channels():
            self.write_if = _RamWrite(bus.write, clock, reset, reset_active_level, mem=self.mem)
            self.read_if = _RamRead(bus.read, clock, reset, reset_active_level, mem=self.mem)
        if self.write_if.byte_size != 8 or self.read_if.byte_size != 8:
            raise ValueError("AxiRamFast needs 8-bit byte lanes")



class AxiRamOneTask(Memory):
    """``cocotbext.axi.AxiRam`` as one coroutine: the seven tasks of ``AxiRam`` (AW, W, AR
    sinks, B, R sources, the write and read burst processes), their queues 2 deep, and
    their order within a clock edge, reproduced in one loop that wakes once per clock
    edge while the memory has work, and sleeps while it has none.

    Within a timestep cocotb runs the tasks a clock edge woke first (the channel models,
    phase A), then the tasks their events woke (the burst processes, phase B); each channel
    model touches only its own queue, so at every edge this loop does, in order:

    * phase A: each sink takes a beat if its ``ready`` and ``valid`` (as sampled at the
      edge) are both high, then drives ``ready = not full`` (its queue at 2); each source,
      if its beat was taken or ``valid`` is low, drives its next queued beat or ``valid = 0``;
    * phase B: the read process takes the next AR as soon as the last beat of the previous
      burst is queued, and queues R beats (reading the memory then) while the R queue has
      room; the write process takes the next AW as soon as the previous burst's B is
      queued, consumes W beats (writing the memory then) while there are any, and queues
      B when the burst's last W is consumed and the B queue has room.

    That is ``AxiRam``'s behaviour at every edge (a sleeping cocotbext-axi sink or source
    resumes at the first edge where it would do something).  The loop sleeps when every
    queue is empty, no burst is under way, ``rvalid``/``bvalid`` are low and the inputs
    ``arvalid``/``awvalid``/``wvalid`` are low; a rise of one of those wakes it for the
    next edge.  One difference: within a timestep ``AxiRam``'s two processes run in the
    order their events were set, this loop runs the read process first; they differ
    only if one timestep reads and writes the same address (the co-simulation's source
    and destination buffers never overlap).
    """

    def __init__(self, bus, clock, reset=None, reset_active_level=True, size=2**64, mem=None,
                 **kwargs):
        super().__init__(size, mem, **kwargs)
        wr, rd = bus.write, bus.read
        self.clock, self.reset = clock, reset
        self.lanes = len(wr.w.wdata) // 8
        if len(rd.r.rdata) != self.lanes * 8:
            raise ValueError("AxiRamOneTask: rdata and wdata widths differ")
        self.strb_mask = (1 << self.lanes) - 1
        self.max_burst_size = (self.lanes - 1).bit_length()
        self.p = dict(
            arvalid=rd.ar.arvalid, arready=rd.ar.arready, arid=rd.ar.arid,
            araddr=rd.ar.araddr, arlen=rd.ar.arlen, arsize=rd.ar.arsize,
            arburst=rd.ar.arburst,
            rvalid=rd.r.rvalid, rready=rd.r.rready, rid=rd.r.rid, rdata=rd.r.rdata,
            rlast=rd.r.rlast, rresp=rd.r.rresp,
            awvalid=wr.aw.awvalid, awready=wr.aw.awready, awid=wr.aw.awid,
            awaddr=wr.aw.awaddr, awlen=wr.aw.awlen, awsize=wr.aw.awsize,
            awburst=wr.aw.awburst,
            wvalid=wr.w.wvalid, wready=wr.w.wready, wdata=wr.w.wdata, wstrb=wr.w.wstrb,
            wlast=wr.w.wlast,
            bvalid=wr.b.bvalid, bready=wr.b.bready, bid=wr.b.bid, bresp=wr.b.bresp)
        # as cocotbext-axi at construction: sinks' ready 0, sources' valid 0, their data X
        for n in ("arready", "awready", "wready", "rvalid", "bvalid"):
            self.p[n].setimmediatevalue(0)
        for n in ("rid", "rdata", "rlast", "rresp", "bid", "bresp"):
            self.p[n].setimmediatevalue(LogicArray("x" * len(self.p[n])))
        self._wake = Event()
        self._watchers = [cocotb.start_soon(self._watch(self.p[n]))
                          for n in ("arvalid", "awvalid", "wvalid")]
        self._active_level = bool(reset_active_level)
        # cocotbext.axi.reset.Reset: the models run from construction (reset assumed
        # released), stop while reset is asserted and start again at its release
        if reset is not None:
            cocotb.start_soon(self._run_reset())
        self._task = cocotb.start_soon(self._run())

    async def _watch(self, sig):
        rise = RisingEdge(sig)
        while True:
            await rise
            self._wake.set()

    async def _run_reset(self):
        # cocotbext.axi.reset.Reset: the models start at reset release, stop at reset
        edge = Edge(self.reset)
        while True:
            await edge
            try:
                level = bool(int(self.reset.value))
            except ValueError:
                continue
            if level == self._active_level:
                if self._task is not None:
                    self._task.cancel()
                    self._task = None
                for n in ("rvalid", "bvalid", "arready", "awready", "wready"):
                    self.p[n].value = 0
            elif self._task is None:
                self._task = cocotb.start_soon(self._run())

    async def _run(self):
        p, lanes, size, mem = self.p, self.lanes, self.size, self.mem
        full_strb = self.strb_mask
        R = {n: reader(p[n]) for n in ("arid", "araddr", "arlen", "arsize", "arburst",
                                         "awid", "awaddr", "awlen", "awsize", "awburst",
                                         "wdata", "wstrb")}
        B = {n: bit_reader(p[n]) for n in ("arvalid", "rready", "awvalid", "wvalid",
                                             "wlast", "bready")}
        W = {n: writer(p[n]) for n in ("arready", "awready", "wready", "rvalid", "rid",
                                         "rdata", "rlast", "rresp", "bvalid", "bid", "bresp")}
        arq, rq, awq, wq, bq = deque(), deque(), deque(), deque(), deque()
        # driven outputs (None: not yet driven by this loop)
        d = dict(arready=None, awready=None, wready=None, rvalid=0, bvalid=0,
                 rid=None, rlast=None, rresp=None, bid=None, bresp=None)

        def drive(name, v):
            if d[name] != v:
                d[name] = v
                W[name](v)

        rd_burst = None     # [arid, cur_addr, beats left, n, length, burst, num_bytes, lo, hi]
        wr_burst = None     # [awid, cur_addr, beats left, n, length, burst, num_bytes, lo, hi, b]
        pending_b = None    # (bid, bresp) waiting for room in the B queue
        rd_data = None      # the data of the read burst's next beat
        edge = RisingEdge(self.clock)
        wake = self._wake

        def start(fields):
            i, addr, length, size_log2, burst = fields
            num_bytes = 2 ** size_log2
            assert 0 < num_bytes <= lanes
            aligned = (addr // num_bytes) * num_bytes
            length += 1
            transfer = num_bytes * length
            lo = hi = None
            if burst == _WRAP:
                lo = (addr // transfer) * transfer
                hi = lo + transfer
            if burst == _INCR:
                assert 0x1000 - (aligned & 0xfff) >= transfer
            return [i, aligned, length, 0, length, burst, num_bytes, lo, hi]

        def advance(b):
            b[2] -= 1
            b[3] += 1
            if b[5] != _FIXED:
                b[1] += b[6]
                if b[5] == _WRAP and b[1] == b[8]:
                    b[1] = b[7]

        while True:
            await edge

            # ---- phase A: the channel models, at the edge --------------------------
            # AR sink
            if d["arready"] and B["arvalid"]():
                arq.append((R["arid"](), R["araddr"](), R["arlen"](), R["arsize"](),
                            R["arburst"]()))
            drive("arready", len(arq) < 2)
            # R source
            if not d["rvalid"] or B["rready"]():
                if rq:
                    i, data, last = rq.popleft()
                    drive("rid", i)
                    W["rdata"](data)
                    drive("rlast", last)
                    drive("rresp", 0)
                    drive("rvalid", 1)
                else:
                    drive("rvalid", 0)
            # AW sink
            if d["awready"] and B["awvalid"]():
                awq.append((R["awid"](), R["awaddr"](), R["awlen"](), R["awsize"](),
                            R["awburst"]()))
            drive("awready", len(awq) < 2)
            # W sink
            if d["wready"] and B["wvalid"]():
                wq.append((R["wdata"](), R["wstrb"](), B["wlast"]()))
            drive("wready", len(wq) < 2)
            # B source
            if not d["bvalid"] or B["bready"]():
                if bq:
                    i, resp = bq.popleft()
                    drive("bid", i)
                    drive("bresp", resp)
                    drive("bvalid", 1)
                else:
                    drive("bvalid", 0)

            # ---- phase B: the burst processes ---------------------------------------
            # (a beat's data is read when the previous beat is queued, or the AR taken, and
            # waits for room in the R queue: as AxiSlaveRead._process_read does)
            while True:                                   # read
                if rd_burst is None:
                    if not arq:
                        break
                    rd_burst = start(arq.popleft())
                    a = ((rd_burst[1] // lanes) * lanes) % size
                    rd_data = int.from_bytes(mem[a:a + lanes], "little")
                if len(rq) >= 2:
                    break
                rq.append((rd_burst[0], rd_data, int(rd_burst[2] == 1)))
                advance(rd_burst)
                if rd_burst[2] == 0:
                    rd_burst = None
                else:
                    a = ((rd_burst[1] // lanes) * lanes) % size
                    rd_data = int.from_bytes(mem[a:a + lanes], "little")
            while True:                                   # write
                if pending_b is not None:
                    if len(bq) >= 2:
                        break
                    bq.append(pending_b)
                    pending_b = None
                if wr_burst is None:
                    if not awq:
                        break
                    wr_burst = start(awq.popleft()) + [int(AxiResp.OKAY)]
                if not wq:
                    break
                wdata, strb, last = wq.popleft()
                cur_word = (wr_burst[1] // lanes) * lanes
                data = wdata.to_bytes(lanes, "little")
                try:
                    _write_word(mem, size, cur_word, data, strb, full_strb)
                except Exception:
                    wr_burst[9] = int(AxiResp.SLVERR)
                assert last == (wr_burst[3] == wr_burst[4] - 1)
                advance(wr_burst)
                if wr_burst[2] == 0:
                    pending_b = (wr_burst[0], wr_burst[9])
                    wr_burst = None

            # ---- sleep while there is nothing to do ----------------------------------
            if not (arq or rq or awq or wq or bq or rd_burst or wr_burst or pending_b
                    or d["rvalid"] or d["bvalid"]):
                wake.clear()
                if not (B["arvalid"]() or B["awvalid"]() or B["wvalid"]()):
                    await wake.wait()
