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

    Reset: the first lap of visits after a reset (``counters`` cycles) writes every
    counter as 0 + pending, reading the RAM's spare last word (0 from the configuration,
    never written) instead of the counter's own; no event around a reset is lost, and
    reads wait for the lap to end.

    Reading: ``rd_data`` is loaded with counter ``rd_addr`` in every cycle the adder does
    not use the RAM's read port (the cycles after a visit that found nothing pending);
    ``rd_fresh`` (a flip-flop) says it was loaded at the last clock edge, so with
    ``rd_addr`` held since the cycle before that edge, ``rd_data`` is that counter (as of
    one cycle ago) until ``rd_addr`` changes.  At most one cycle in ``counters`` per
    busy source is taken, so a read waits at most ``counters`` cycles (plus the lap after
    a reset).  An ``rd_addr`` >= ``counters`` reads an unused word: 0.

    FPGA cost (ECP5): 8 ``TRELLIS_DPR16X4`` (32 bits x 16 words), a 16-cell carry chain,
    ``counters`` pending counts, the round-robin pointer, and the
    ``count`` flip-flops that are used (unused ports are removed by synthesis).

    Parameters
    ----------
    counters : int
        Number of counters, 1..15.

    Attributes
    ----------
    ev : In(counters)
        Event strobes, one bit per counter.
    count : Out(ArrayLayout(32, counters))
        The counters, flip-flops.
    rd_addr : In(range(depth)), ``depth`` the RAM's words (the power of two above ``counters``)
    rd_data : Out(32), rd_fresh : Out(1)
        Read port (see above).

    Raises
    ------
    ValueError
        ``counters`` is not 1..15.
    """

    def __init__(self, counters: int):
        if not 1 <= counters <= 15:
            raise ValueError(f"counters must be 1..15, not {counters}")
        self.counters = counters
        self.depth = 1 << counters.bit_length()    # RAM words: a spare (zero) word at the end
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
        # after a reset the first lap of visits writes 0 + pending: it reads the spare last
        # word (0 from the configuration, never written) instead of the counter's own
        clearing = Signal(init=1)
        # the visit (registered): counter ``rr``'s pending count is taken
        rr = Signal(range(n))
        sel_i = Signal(range(self.depth))          # the word written
        sel_ra = Signal(range(self.depth))         # the word read: sel_i, or the zero word
        sel = Signal(n)                            # one-hot of sel_i
        sel_v = Signal()                           # the visited counter has work
        sel_add = Signal(pbits)
        m.d.sync += rr.eq(Mux(rr == n - 1, 0, rr + 1))
        with m.If(rr == n - 1):
            m.d.sync += clearing.eq(0)
        vis_p = Signal(pbits)                      # counter rr's pending count
        with m.Switch(rr):
            for k in range(n):
                with m.Case(k):
                    m.d.comb += vis_p.eq(pending[k])
        m.d.sync += [sel_i.eq(rr), sel_ra.eq(Mux(clearing, self.depth - 1, rr)),
                     sel.eq(Const(1, n) << rr), sel_add.eq(vis_p),
                     sel_v.eq((vis_p != 0) | clearing)]
        for k in range(n):
            with m.If(rr == k):
                m.d.sync += pending[k].eq(self.ev[k])
            with m.Elif(self.ev[k]):
                m.d.sync += pending[k].eq(pending[k] + 1)
        # the update: word + pending, written back and into the count port
        m.d.comb += [rp.addr.eq(Mux(sel_v, sel_ra, self.rd_addr)),
                     wp.addr.eq(sel_i),
                     wp.data.eq(rp.data + sel_add),
                     wp.en.eq(sel_v)]
        for k in range(n):
            with m.If(sel_v & sel[k]):
                m.d.sync += self.count[k].eq(wp.data)
        # the read port (not during the clearing lap)
        m.d.sync += self.rd_fresh.eq(~sel_v & ~clearing)
        with m.If(~sel_v):
            m.d.sync += self.rd_data.eq(rp.data)
        return m
