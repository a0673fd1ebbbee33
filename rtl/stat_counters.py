"""Low-rate statistics counters: several 32-bit counters sharing one incrementer and one
distributed RAM.

A 32-bit counter in flip-flops costs 32 FFs and a 16-cell carry chain (32 LUT4 sites on
ECP5) of its own.  Counters whose events are rare (at most one per frame, per ACK, per
timeout) can share: each counter is a word of a small distributed RAM, and one
incrementer serves one pending event per cycle.  Used by the Ethernet MAC's seven frame
counters and the sender reliability's event counters.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["StatCounters"]


class StatCounters(wiring.Component):
    """``counters`` 32-bit event counters (wrap at 2**32) in one distributed RAM, domain ``sync``.

    Each cycle the lowest-numbered counter with a pending event is picked (into a
    register, clearing its pending bit) and the counter picked the cycle before is
    served: its RAM word + 1 is written back and copied into its ``count`` port.  An
    event (a one-cycle strobe on ``ev[k]``) sets counter k's pending bit; an event that
    arrives while the bit is still set is lost, so every source must strobe at most once
    per ``counters`` cycles (the users' sources are frame, ACK or timeout events, at least
    4 cycles apart, with at most 7 counters: see their notes).  ``count[k]`` lags its
    event by 2 to ``counters + 1`` cycles.

    After a reset the RAM words are cleared in the first ``depth`` cycles (``depth`` =
    the RAM's size, the next power of two above ``counters``): the last word holds
    0xFFFFFFFF from the configuration and is never written, and each other word is
    written with it + 1.  Events of those cycles stay pending and are served after.

    Reading: ``rd_data`` is loaded with the word at ``rd_addr`` in every cycle the
    incrementer does not use the RAM's read port; ``rd_fresh`` (a flip-flop) says it was
    loaded at the last clock edge, so with ``rd_addr`` held since the cycle before that
    edge, ``rd_data`` is that counter (as of one cycle ago) until ``rd_addr`` changes.
    An ``rd_addr`` >= ``counters`` reads an unused word: 0, or 0xFFFFFFFF at ``depth - 1``
    (the clearing word).

    FPGA cost (ECP5): 8 ``TRELLIS_DPR16X4`` (32 bits x 16 words), a 16-cell carry chain,
    the priority pick, and the ``count`` flip-flops that are used (unused ports are
    removed by synthesis).

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
    rd_addr : In(range(depth))
    rd_data : Out(32), rd_fresh : Out(1)
        Read port (see above).
    """

    def __init__(self, counters: int):
        if not 1 <= counters <= 15:
            raise ValueError(f"counters must be 1..15, not {counters}")
        self.counters = counters
        self.depth = 1 << counters.bit_length()       # > counters: the last word clears
        super().__init__({
            "ev": In(counters),
            "count": Out(data.ArrayLayout(32, counters)),
            "rd_addr": In(range(self.depth)),
            "rd_data": Out(32),
            "rd_fresh": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, depth = self.counters, self.depth
        m.submodules.words = mem = Memory(shape=32, depth=depth,
                                          init=[0] * (depth - 1) + [0xFFFFFFFF])
        wp = mem.write_port()
        rp = mem.read_port(domain="comb")
        pending = Signal(n)
        clearing = Signal(init=1)
        clr = Signal(range(depth))
        pick = Signal(n)                   # the lowest pending counter, one-hot and index
        pick_i = Signal(range(depth))
        for k in reversed(range(n)):
            with m.If(pending[k]):
                m.d.comb += [pick.eq(1 << k), pick_i.eq(k)]
        # the pick is registered (sel_*): the read-modify-write cycle starts from flip-flops
        sel_v = Signal()
        sel_i = Signal(range(depth))
        sel = Signal(n)
        busy = clearing | sel_v
        m.d.comb += [rp.addr.eq(Mux(clearing, depth - 1, Mux(sel_v, sel_i, self.rd_addr))),
                     wp.addr.eq(Mux(clearing, clr, sel_i)),
                     wp.data.eq(rp.data + 1),
                     wp.en.eq(busy)]
        m.d.sync += self.rd_fresh.eq(~busy)
        with m.If(~busy):
            m.d.sync += self.rd_data.eq(rp.data)
        with m.If(clearing):
            m.d.sync += [clr.eq(clr + 1), clearing.eq(clr != depth - 2),
                         pending.eq(pending | self.ev)]
        with m.Else():
            m.d.sync += [pending.eq((pending & ~pick) | self.ev),
                         sel_v.eq(pending.any()), sel_i.eq(pick_i), sel.eq(pick)]
            for k in range(n):
                with m.If(sel_v & sel[k]):
                    m.d.sync += self.count[k].eq(wp.data)
        return m
