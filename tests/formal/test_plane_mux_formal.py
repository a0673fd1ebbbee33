"""Formal proof of PlaneMux (rtl/plane_mux.py): frames never interleaved (``tlast`` ends
each source's frame on the output), no beat duplicated, the output's valid held with its
beat until ready and never waiting on ready.

Small parameters: ``inputs=2``, ``data_width=8`` (the datapath is only moved, never
computed on).  Unbounded, by k-induction (closes at k=1; run at k=6, whose base case also
refutes the mutant).  The stated properties alone are not inductive; the wrapper also
asserts, as auxiliary invariants proved by the same induction, the state of the block: the
3-entry output FIFO's level and pointers agree, the beats it holds (read as the rows of its
memory) are, per source, exactly the wrapper's beats in flight, consecutive beats of one
frame in it have one source, the frame context before its head (the last beat out) and
after its tail (the last beat pushed, the block's ``mid`` and ``grant``) agree with them,
and ``room`` / ``ready`` are the FIFO level's and grant's functions.  Beats are counted as
"taken and not yet out" per source (at most 3, so the counters never wrap).
"""

import pytest
from amaranth.hdl import Array, Assert, Assume, Cat, Elaboratable, Module, Mux, Signal
from amaranth.lib import data

from mrcnic.rtl import plane_mux
from .formal import (Internals, drive_inputs, mutant, past, require_failed, require_proved, run_formal,
                     stream_rule)

K = 6           # induction length (closes at 1; the mutant fails from 2)


class PlaneMuxProof(Elaboratable):
    """PlaneMux under its input contract (each source holds its beat until ``tready``)."""

    def __init__(self, cls=plane_mux.PlaneMux, inputs=2):
        self.dut = cls(inputs=inputs, data_width=8)
        self.inputs = inputs

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        ins = Internals(dut, platform)
        m.submodules.dut = ins.frag
        drive_inputs(m, dut)
        n = self.inputs
        out = dut.m_axis
        srcs = [getattr(dut, f"s_axis_{i}") for i in range(n)]
        # Contract (AXI4-Stream, ARM IHI 0051A 2.2.1): a source holds tvalid and its beat
        # until tready.
        for s in srcs:
            stream_rule(m, s.tvalid, s.tready, [s.tdata, s.tkeep, s.tlast], check=Assume)
        # Obligation: the output holds tvalid, its beat and its source tag until tready.
        stream_rule(m, out.tvalid, out.tready, [out.tdata, out.tkeep, out.tlast, dut.source])
        out_fire = out.tvalid & out.tready
        any_in = Signal()
        inflight = []
        for i, s in enumerate(srcs):
            # beats of source i taken and not yet out (a beat is out a clock after it is
            # taken at the earliest, so an output beat is counted before it leaves)
            c = Signal(3, name=f"inflight{i}")
            inflight.append(c)
            m.d.sync += c.eq(c + (s.tvalid & s.tready) - (out_fire & (dut.source == i)))
            with m.If(s.tvalid & s.tready):
                m.d.sync += any_in.eq(1)
            # no beat duplicated or invented: never a beat of source i out unless one of
            # source i was taken and is not yet out (never more out than in)
            with m.If(out_fire & (dut.source == i)):
                m.d.comb += Assert(c != 0)
            m.d.comb += Assert(c <= 3)
        # Frames whole: after a beat without tlast, the next beat taken is the same source's.
        mid = Signal()
        src_prev = Signal(3)
        with m.If(out_fire):
            m.d.sync += [mid.eq(~out.tlast), src_prev.eq(dut.source)]
            with m.If(mid):
                m.d.comb += Assert(dut.source == src_prev)
        # Valid never waits on ready: with tready low since reset, a beat handed over is on
        # the output two clocks later.
        never_ready = Signal(init=1)
        with m.If(out.tready):
            m.d.sync += never_ready.eq(0)
        m.d.comb += Assert(~(past(m, any_in) & never_ready) | out.tvalid)

        # Auxiliary invariants (for the induction) on the block's state: the output FIFO
        # (its level, pointers and the beats it holds, read as rows of its memory), the
        # grant and its frame flag, and the registered ready / room.
        grant, dmid = ins.signal("grant"), ins.signal("mid")
        room, ready = ins.signal("room"), ins.signal("ready")
        level = ins.signal("level", ("out_fifo",))
        (produce,), (consume,) = ins.ports(("out_fifo",))
        # a FIFO row: the block's ``beat`` layout (tdata, tkeep, tlast, source)
        beat = data.StructLayout({"tdata": 8, "tkeep": 1, "tlast": 1, "source": 3})
        rows = Array(beat(r) for r in ins.memory_rows(("out_fifo",)))
        depth = len(rows)
        m.d.comb += [Assert(level <= depth), Assert(produce < depth), Assert(consume < depth),
                     Assert(produce == Mux(consume + level >= depth, consume + level - depth,
                                           consume + level)),
                     Assert(grant < n),
                     Assert(room == (level <= 1)),
                     Assert(ready == Cat(*[room & (grant == i) for i in range(n)]))]
        slot = [Signal(range(depth), name=f"slot{k}") for k in range(depth)]  # k-th in line
        for k in range(depth):
            m.d.comb += slot[k].eq(Mux(consume + k >= depth, consume + k - depth, consume + k))
        ent = [rows[slot[k]] for k in range(depth)]
        for i in range(n):
            m.d.comb += Assert(inflight[i] == sum(((level > k) & (ent[k].source == i))
                                                  for k in range(depth)))
        for k in range(depth):
            with m.If(level > k):
                m.d.comb += Assert(ent[k].source < n)
                if k + 1 < depth:
                    with m.If((level > k + 1) & ~ent[k].tlast):
                        m.d.comb += Assert(ent[k + 1].source == ent[k].source)
        # the frame context before the FIFO's head (the last beat out) and after its tail
        # (the last beat pushed): inside a frame, its source
        with m.If(mid & (level != 0)):
            m.d.comb += Assert(ent[0].source == src_prev)
        tail = rows[Mux(produce == 0, depth - 1, produce - 1)]
        with m.If(level == 0):
            m.d.comb += Assert(dmid == mid)
            with m.If(mid):
                m.d.comb += Assert(grant == src_prev)
        with m.Else():
            m.d.comb += Assert(dmid == ~tail.tlast)
            with m.If(dmid):
                m.d.comb += Assert(grant == tail.source)
        m.d.comb += Assert(~(never_ready & any_in) | (level != 0))
        return m


@pytest.mark.formal
def test_plane_mux_induction():
    """PlaneMux, 2 inputs: every property above, unbounded."""
    require_proved(run_formal(PlaneMuxProof(), "plane_mux", mode="prove", depth=K))


@pytest.mark.formal
def test_plane_mux_mutant_fails():
    """Teeth: the grant allowed to move inside a frame (``mid`` never set) interleaves frames."""
    mod = mutant(plane_mux, "m.d.sync += mid.eq(~a_last)", "m.d.sync += mid.eq(0)")
    require_failed(run_formal(PlaneMuxProof(mod.PlaneMux), "plane_mux_mutant", mode="prove",
                              depth=K))
