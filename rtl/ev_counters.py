"""Per-EV counters (OCP MRC 1.0 EV statistics): one :class:`~mrcnic.rtl.layouts.EvCounters`
record per path-table entry, read by the CSR bank.

Three event sources (data packets sprayed, sender-reliability outcomes, probes sent)
each enter a 4-deep ``amaranth.lib.fifo.SyncFIFOBuffered``; one read-modify-write
engine drains them round robin into a 32-bit wide ``amaranth.lib.memory.Memory`` holding
one word per counter (block RAM).  The CSR bank's reads share the memory's read port
(in the cycles the engine does not read) and assemble the record word by word.
"""

from amaranth.hdl import C, Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import MAX_PATHS, EvCounterKind, EvCounters
from .params import NicParams, check_paths, param

__all__ = ["EvCounterBank", "READ_LATENCY"]

#: one queued increment: path-table entry and counter field
_Event = data.StructLayout({"index": 8, "kind": EvCounterKind})

_FIELDS = [name for name, _ in EvCounters.as_shape()]   # field order == EvCounterKind order
_WORDS = len(_FIELDS)                                   # 32-bit counters per record (6)

#: Cycles from a cycle with ``rd_en`` high to the first cycle ``rd_data`` shows the record
#: (worst case, the engine busy all the time; the CSR bank waits this long).
READ_LATENCY = 2 * _WORDS + 3


class EvCounterBank(wiring.Component):
    """Per-EV statistics counters (OCP MRC 1.0 EV statistics), one record per path-table entry.

    Every entry has six 32-bit counters (:class:`~mrcnic.rtl.layouts.EvCounters`:
    ``packets``, ``clean_acks``, ``ecn_echoes``, ``trims``, ``timeouts``, ``probes``),
    each wrapping around at 2**32.  They are 0 after configuration (memory initial
    contents); ``rst`` clears ``dropped`` and the queues but **not** the counters.

    Storage: one 32-bit word per counter, word ``index * 8 + kind`` of a
    ``paths * 8``-word memory (one write port, one synchronous read port: a single
    DP16KD block RAM at ``paths`` <= 64, 4 at 256).

    Event path: each source is a one-cycle strobe queued in its own 4-entry
    ``SyncFIFOBuffered`` of {index, kind} (11 bits).  One read-modify-write engine
    takes one increment every 2 cycles, serving the non-empty queues round robin (the
    queue and its head event are chosen and registered the cycle before the pop), in
    four stages (cycle 1: pop a queue, read the counter word; cycle 2: block-RAM output;
    cycle 3: register the word; cycle 4: write the word + 1 back).  The next event reads
    before the previous one has written: when it is the same word, the written value is
    forwarded (so no read ever uses a word written in its own read cycle).

    * Throughput: 0.5 increments per cycle over all sources together (62.5 M/s at
      125 MHz).  Typical load is about 0.3 (data ~1/8, outcomes ~1/6, rare probes);
      bursts above 0.5/cycle are absorbed by the queues (4 events per source).
    * Latency: an event strobed in cycle 0 is in the memory after the clock edge
      ending cycle 6 when the engine is idle; a ``rd_en`` in cycle 5 or later
      returns it.  Queued events wait up to 2 cycles per event ahead of them.
    * Drop rule: an in-range event whose queue is full is lost and counts one in
      ``dropped`` (up to 3 per cycle); the strobes never wait (there is no ready).
      Events whose index is ``>= paths``, and ``stat`` events whose kind is not an
      :class:`~mrcnic.rtl.layouts.EvCounterKind` value (6, 7), are ignored: not
      queued, not counted, not an error.  Memory is only written at the index
      of a queued event.
    * CSR read: ``rd_en`` latches ``rd_addr``; the six counter words are read in
      cycles where the engine does not read (the engine has priority, so a read
      never costs an event) and shifted into the ``rd_data`` register, which shows
      the whole record from :data:`READ_LATENCY` (15) cycles after the ``rd_en``
      cycle at the latest (9 when the engine is idle) and holds it until the next
      ``rd_en``.  Each counter is read at one instant of that window (the record is
      not one atomic snapshot; every counter is exact at its own instant).  A
      ``rd_en`` while a read is in progress restarts it.
    * FPGA cost (ECP5 ``synth_ecp5``, ``paths=32``): 1 DP16KD, about 330
      LUT4-equivalents (90 of them the three queues) and 415 FFs (the 192-bit
      ``rd_data`` register, the pipeline, ``dropped``).

    Parameters
    ----------
    paths : int
        Number of path-table entries counted: 16, 32, 64, 128 or 256 (``MAX_PATHS``).
    params : NicParams
        The NIC's parameter set (:class:`~mrcnic.rtl.params.NicParams`): ``paths`` come from
        it (a keyword given as well must agree).  Standalone: leave it out; the keywords are
        checked by the same rules (:mod:`mrcnic.rtl.params`).

    Attributes
    ----------
    sent_en : In(1)
        Strobe: a data packet (new or retransmitted) was sprayed on entry
        ``sent_index`` (increments ``packets``).
    sent_index : In(8)
        Path-table entry of the packet.
    stat_en : In(1)
        Strobe from sender reliability: an outcome ``stat_kind`` on entry ``stat_index``.
    stat_index : In(8)
        Path-table entry of the outcome.
    stat_kind : In(EvCounterKind)
        Counter incremented (3 bits); normally CLEAN_ACK, ECN_ECHO, TRIM or TIMEOUT,
        but every kind is accepted.
    probe_en : In(1)
        Strobe: an EV probe was sent on entry ``probe_index`` (increments ``probes``).
    probe_index : In(8)
        Path-table entry of the probe.
    rd_en : In(1)
        CSR read enable (one cycle); ``rd_data`` holds its value until the next one.
    rd_addr : In(8)
        Entry read (sampled with ``rd_en``).
    rd_data : Out(EvCounters)
        Record of ``rd_addr`` (192 bits), valid :data:`READ_LATENCY` cycles after the
        ``rd_en`` cycle; all zero for ``rd_addr >= paths``.
    dropped : Out(32)
        Increments lost because their queue was full (wraps at 2**32).
    """

    def __init__(self, paths: "int | None" = None, *, params: "NicParams | None" = None):
        paths = check_paths(param(params, "paths", paths, MAX_PATHS))
        self.paths = paths
        super().__init__({
            "sent_en": In(1),
            "sent_index": In(8),
            "stat_en": In(1),
            "stat_index": In(8),
            "stat_kind": In(EvCounterKind),
            "probe_en": In(1),
            "probe_index": In(8),
            "rd_en": In(1),
            "rd_addr": In(8),
            "rd_data": Out(EvCounters),
            "dropped": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        paths = self.paths
        abits = (paths - 1).bit_length()

        def in_range(index):
            return index < paths if paths < 256 else C(1, 1)

        # ---- input queues --------------------------------------------------------------
        sources = [
            (self.sent_en, self.sent_index, EvCounterKind.PACKET, C(1, 1)),
            (self.stat_en, self.stat_index, self.stat_kind,
             self.stat_kind.as_value() <= EvCounterKind.PROBE.value),
            (self.probe_en, self.probe_index, EvCounterKind.PROBE, C(1, 1)),
        ]
        fifos, drops = [], []
        for i, (en, index, kind, kind_ok) in enumerate(sources):
            fifo = SyncFIFOBuffered(width=_Event.size, depth=4)
            m.submodules[f"fifo{i}"] = fifo
            fifos.append(fifo)
            ev = Signal(_Event, name=f"ev{i}")
            take = Signal(name=f"take{i}")
            drop = Signal(name=f"drop{i}")
            m.d.comb += [
                ev.index.eq(index),
                ev.kind.eq(kind),
                take.eq(en & in_range(index) & kind_ok),
                fifo.w_en.eq(take),
                fifo.w_data.eq(ev),
                drop.eq(take & ~fifo.w_rdy),
            ]
            drops.append(drop)
        m.d.sync += self.dropped.eq(self.dropped + drops[0] + drops[1] + drops[2])

        # ---- counter memory: word {index, kind} --------------------------------------------
        # no_rw_check: the engine and the CSR read never use a word read in the cycle it is
        # written (both forward instead), so Yosys need not add collision logic after the
        # block RAM, and ``q`` becomes the block RAM's output register on ECP5.
        m.submodules.mem = mem = Memory(shape=32, depth=paths * 8, init=[],
                                        attrs={"no_rw_check": 1})
        # The read register is written out (an asynchronous port, then ``rd_q``) rather than
        # a synchronous port: Yosys honours ``no_rw_check`` only when it merges such a
        # register into the port (``memory_dff``); a synchronous non-transparent port gets
        # read-first emulation (a delayed write, address compare and bypass multiplexer
        # behind the block RAM).  The behaviour is the same: ``rd_q`` is the word before
        # any write of its read cycle.
        wp = mem.write_port()
        rp = mem.read_port(domain="comb")
        # the word read last cycle: the block RAM's read register (no reset, as the EBR's: a
        # reset there would keep its output register from being folded, boards/ebr_outreg.py)
        rd_q = Signal(32, reset_less=True)
        q = Signal(32)              # rd_q, registered: the word read two cycles ago
        m.d.sync += [rd_q.eq(rp.data), q.eq(rd_q)]

        # ---- read-modify-write engine, one event every 2 cycles, 4 stages per event -------
        # A: pop a queue, read the word; B: block RAM output; C: q -> w_val (or forward);
        # D: write w_val + 1.  The event popped 2 or 3 cycles before is in C or D while
        # this one reads: when it is the same word its written value is forwarded.
        # The queue to pop and its head event are chosen one cycle ahead, in a cycle without
        # a pop (round robin over the queues' ``r_rdy``), and registered: stage A starts
        # from flip-flops.  A queue that is ready in a cycle without a pop is still ready
        # (with the same head) in the next, since only the engine pops.
        last = Signal(range(3))     # queue served last (round robin)
        pick = Signal(3)            # one-hot: the queue popped this cycle (stage A)
        engine_rd = Signal()        # stage A this cycle (= pick.any())
        head_addr = Signal(abits + 3)   # word of the event popped this cycle

        rdy = [f.r_rdy for f in fifos]
        nxt = Signal(range(4))      # the queue to pop next cycle (3 = none)
        m.d.comb += nxt.eq(3)
        with m.Switch(last):
            for prev in range(3):
                with m.Case(prev):
                    order = [(prev + k) % 3 for k in (1, 2, 3)]
                    with m.If(rdy[order[0]]):
                        m.d.comb += nxt.eq(order[0])
                    with m.Elif(rdy[order[1]]):
                        m.d.comb += nxt.eq(order[1])
                    with m.Elif(rdy[order[2]]):
                        m.d.comb += nxt.eq(order[2])
        nxt_head = Signal(_Event)
        with m.Switch(nxt):
            for i, f in enumerate(fifos):
                with m.Case(i):
                    m.d.comb += nxt_head.eq(f.r_data)
        for i, f in enumerate(fifos):
            m.d.comb += f.r_en.eq(pick[i])
        with m.If(engine_rd):       # stage B next cycle: no pop then
            m.d.sync += [pick.eq(0), engine_rd.eq(0)]
            for i in range(3):
                with m.If(pick[i]):
                    m.d.sync += last.eq(i)
        with m.Else():
            m.d.sync += [pick.eq(Cat(*(nxt == i for i in range(3)))), engine_rd.eq(nxt != 3),
                         head_addr.eq(Cat(nxt_head.kind, nxt_head.index[:abits]))]
        b_addr, c_addr = Signal(abits + 3), Signal(abits + 3)      # stages B, C
        b_fwd, c_fwd, c_en = Signal(), Signal(), Signal()
        w_en, w_addr, w_val = Signal(), Signal(abits + 3), Signal(32)   # stage D
        busy = Signal()             # stage B of the event popped last cycle
        m.d.sync += busy.eq(engine_rd)
        with m.If(engine_rd):
            m.d.sync += [b_addr.eq(head_addr),
                         b_fwd.eq((c_en & (c_addr == head_addr)) | (w_en & (w_addr == head_addr)))]
        m.d.sync += [c_en.eq(busy), c_addr.eq(b_addr), c_fwd.eq(b_fwd),
                     w_en.eq(c_en), w_addr.eq(c_addr)]
        with m.If(c_en):
            m.d.sync += w_val.eq(Mux(c_fwd, w_val + 1, q))
        m.d.comb += [wp.en.eq(w_en), wp.addr.eq(w_addr), wp.data.eq(w_val + 1)]

        # ---- CSR read: six words through the shared read port, shifted into rd_data ------
        r_addr = Signal(abits)
        r_oor = Signal()            # rd_addr >= paths: the record reads as zeros
        r_word = Signal(range(_WORDS + 1), init=_WORDS)    # next word to read (6 = done)
        r_step = Signal()           # this cycle reads word r_word for the CSR
        r_waddr = Signal(abits + 3)
        cap = Signal(2)             # the read word is in rd_q (bit 0) / q (bit 1)
        hit = Signal(2)             # ... and was written in its read cycle: use fwd_val
        fwd_val = Signal(32)
        m.d.comb += [r_step.eq((r_word != _WORDS) & ~engine_rd), r_waddr.eq(Cat(r_word[:3], r_addr))]
        with m.If(self.rd_en):
            m.d.sync += [r_addr.eq(self.rd_addr[:abits]), r_oor.eq(~in_range(self.rd_addr)),
                         r_word.eq(0)]
        with m.Elif(r_step):
            m.d.sync += r_word.eq(r_word + 1)
        m.d.sync += [cap.eq(Cat(r_step, cap[0])),
                     hit.eq(Cat(r_step & w_en & (w_addr == r_waddr), hit[0]))]
        with m.If(r_step & w_en):
            m.d.sync += fwd_val.eq(wp.data)
        with m.If(cap[1]):
            m.d.sync += self.rd_data.eq(Cat(self.rd_data.as_value()[32:],
                                            Mux(r_oor, 0, Mux(hit[1], fwd_val, q))))
        m.d.comb += [
            rp.addr.eq(Mux(engine_rd, head_addr, r_waddr)),
        ]
        return m
