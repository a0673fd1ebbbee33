"""Statistics counters: several 32-bit event counters sharing one adder and one distributed RAM.

A 32-bit counter in flip-flops costs 32 FFs and a 16-cell carry chain (32 LUT4 sites on
ECP5) of its own.  Counters can share: each counter is a word of a small distributed RAM,
each event source has a small pending count, and one adder visits the counters in turn
(round robin) and adds a counter's pending events to its word.  Used by the Ethernet MAC's
seven frame counters and the sender reliability's event counters.
"""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["StatCounters"]


class StatCounters(wiring.Component):
    """``counters`` 32-bit event counters (wrap at 2**32) in one distributed RAM, domain ``sync``.

    Events: a one-cycle strobe on ``ev[k]`` adds one to counter k's pending count
    (``counters.bit_length()`` bits).  Every source may strobe in every cycle: nothing is
    lost, whatever the rate and however many sources strobe together.

    Service: a round-robin pointer visits one counter per cycle, so each counter is
    visited every ``counters`` cycles.  At a visit the counter's pending count (at most
    ``counters``: the events since the previous visit) is taken into a register and
    restarts from the visit cycle's event; in the next cycle, when it is not zero, the
    counter's RAM word + pending is written back and copied into its ``count`` port.
    ``count[k]`` therefore lags an event by 2 to ``counters + 1`` cycles, at any load.

    Reset: no clearing pass.  A reset marks every counter *stale* (one flip-flop each);
    the first visit after it writes 0 + pending and clears the mark, and a read of a stale
    counter returns 0, so the counters read 0 from the first cycle after a reset and no
    event is lost around it.  (The RAM itself is not reset.)

    Reading: ``rd_data`` is loaded with counter ``rd_addr`` in every cycle the adder does
    not use the RAM's read port (the cycles after a visit that found nothing pending);
    ``rd_fresh`` (a flip-flop) says it was loaded at the last clock edge, so with
    ``rd_addr`` held since the cycle before that edge, ``rd_data`` is that counter (as of
    one cycle ago) until ``rd_addr`` changes.  At most one cycle in ``counters`` per
    busy source is taken, so a read waits at most ``counters`` cycles.  An ``rd_addr`` >=
    ``counters`` reads an unused RAM word (undefined after configuration: no register).

    FPGA cost (ECP5): 8 ``TRELLIS_DPR16X4`` (32 bits x 16 words), a 16-cell carry chain,
    ``counters`` pending counts and stale flags, the round-robin pointer, and the
    ``count`` flip-flops that are used (unused ports are removed by synthesis).

    Parameters
    ----------
    counters : int
        Number of counters, 1..16.

    Attributes
    ----------
    ev : In(counters)
        Event strobes, one bit per counter.
    count : Out(ArrayLayout(32, counters))
        The counters, flip-flops.
    rd_addr : In(range(counters)) (4 bits at most)
    rd_data : Out(32), rd_fresh : Out(1)
        Read port (see above).

    Raises
    ------
    ValueError
        ``counters`` is not 1..16.
    """

    def __init__(self, counters: int):
        if not 1 <= counters <= 16:
            raise ValueError(f"counters must be 1..16, not {counters}")
        self.counters = counters
        self.depth = 1 << max(0, (counters - 1).bit_length())   # RAM words (power of two)
        super().__init__({
            "ev": In(counters),
            "count": Out(data.ArrayLayout(32, counters)),
            "rd_addr": In(range(self.depth)),
            "rd_data": Out(32),
            "rd_fresh": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.counters
        pbits = n.bit_length()                     # a pending count holds up to n events
        m.submodules.words = mem = Memory(shape=32, depth=self.depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="comb")
        pending = [Signal(pbits, name=f"pending{k}") for k in range(n)]
        stale = Signal(n, init=(1 << n) - 1)       # "reads 0": set by a reset
        # the visit (registered): counter ``rr``'s pending count and stale flag are taken
        rr = Signal(range(n))
        sel_i = Signal(range(self.depth))
        sel = Signal(n)                            # one-hot of sel_i
        sel_v = Signal()                           # the visited counter has work
        sel_add = Signal(pbits)
        sel_zero = Signal()                        # it was stale: its word counts from 0
        m.d.sync += rr.eq(Mux(rr == n - 1, 0, rr + 1))
        vis_p = Signal(pbits)                      # counter rr's pending count and flag
        vis_s = Signal()
        with m.Switch(rr):
            for k in range(n):
                with m.Case(k):
                    m.d.comb += [vis_p.eq(pending[k]), vis_s.eq(stale[k])]
        m.d.sync += [sel_i.eq(rr), sel.eq(Const(1, n) << rr), sel_add.eq(vis_p),
                     sel_zero.eq(vis_s), sel_v.eq((vis_p != 0) | vis_s)]
        for k in range(n):
            visit = rr == k
            with m.If(visit):
                m.d.sync += [pending[k].eq(self.ev[k]), stale[k].eq(0)]
            with m.Elif(self.ev[k]):
                m.d.sync += pending[k].eq(pending[k] + 1)
        # the update: word (or 0) + pending, written back and into the count port
        m.d.comb += [rp.addr.eq(Mux(sel_v, sel_i, self.rd_addr)),
                     wp.addr.eq(sel_i),
                     wp.data.eq(Mux(sel_zero, 0, rp.data) + sel_add),
                     wp.en.eq(sel_v)]
        for k in range(n):
            with m.If(sel_v & sel[k]):
                m.d.sync += self.count[k].eq(wp.data)
        # the read port: a stale counter reads 0
        rd_stale = Signal()
        m.d.comb += rd_stale.eq(stale.bit_select(self.rd_addr, 1) if n > 1 else stale[0])
        m.d.sync += self.rd_fresh.eq(~sel_v)
        with m.If(~sel_v):
            m.d.sync += self.rd_data.eq(Mux(rd_stale, 0, rp.data))
        return m
