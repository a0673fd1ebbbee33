"""Plane multiplexer: frame-level round robin of several AXI-Stream sources onto one plane port.

Each plane of an MRCNic carries the data frames of the transmit pipeline and
the ACK / SACK / NACK / probe-reply frames of the receive pipeline on one
Ethernet port.  This block merges them whole frame by whole frame: the beats
of two frames are never interleaved (an Ethernet MAC sends one frame at a
time), and the output moves one beat per clock with no idle cycle between
frames when inputs are waiting.

Source: ARM IHI 0051A (AMBA 4 AXI4-Stream, packet boundaries on ``tlast``).
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from .axis import AxiStreamSignature

__all__ = ["PlaneMux"]


class PlaneMux(wiring.Component):
    """Round-robin frame arbiter: ``inputs`` AXI-Stream sources -> one AXI-Stream output.

    Parameters
    ----------
    inputs : int
        Number of sources, 2..8.  Input 0 is the transmit pipeline's data
        frames and input 1 the receive pipeline's ACK frames in
        :class:`~mrcnic.rtl.nic.MRCNic`; the arbiter treats all alike.
    data_width : int
        ``tdata`` width in bits (mrcnic: 64).

    Attributes
    ----------
    s_axis_<i> : In(AxiStreamSignature(data_width)), i < ``inputs``
        Source i (frames, ``tlast`` on each frame's last beat).
    m_axis : Out(AxiStreamSignature(data_width))
        The merged frames of all sources, each frame's beats contiguous.
    source : Out(3)
        Index of the source whose beats ``m_axis`` carries (valid with ``tvalid``):
        the receive pipeline's shared parser tags each frame with its plane by it.
    frames : Out(32) array per input as ``frames_<i>``
        Frames of source i passed to the output (count of ``tlast`` beats, wraps).

    Arbitration and timing
    ----------------------
    Between frames the grant goes to the first valid source after the one that
    sent the last frame (round robin, so no source waits more than
    ``inputs - 1`` frames); once the granted source's first beat is presented
    the grant is held until its ``tlast`` beat is taken.  The grant is a register
    (the sources' ``tready`` depends on no ``tvalid``): it moves to the next valid source
    in the cycle a frame's ``tlast`` beat is taken, or -- between frames -- in a cycle the
    granted source is idle, so a source that wakes up while another one is granted but
    idle waits one cycle.  The granted source's
    beats enter a 3-entry ``amaranth.lib.fifo.SyncFIFO`` (first-word fall-through)
    that drives ``m_axis`` and ``source``: one cycle of latency, and both
    directions are cut at flip-flops (``m_axis.tvalid``/``tdata`` come from the FIFO;
    each source's ``tready`` is itself a flip-flop, set from the FIFO's next level --
    at most one beat, so room for the next -- and the next grant), so neither the sink's
    ``tready`` nor the source's ``tvalid`` chain through this block into the
    neighbour's logic (an ECP5 timing rule: the chip's 125 MHz budget has no room
    for ready/valid paths that span three blocks).  Only the granted source sees
    ``tready`` high.  A new frame may start in the cycle after the previous frame's
    ``tlast``, so back-to-back frames of one or several sources leave at one beat per
    clock.  A source that raises ``tvalid`` mid-way keeps its frame until granted;
    nothing is dropped.
    """

    def __init__(self, inputs: int = 2, data_width: int = 64):
        if not 2 <= inputs <= 8:
            raise ValueError(f"inputs must be 2..8, not {inputs}")
        if data_width <= 0 or data_width % 8:
            raise ValueError(f"data_width must be a positive multiple of 8, not {data_width}")
        self._inputs, self._width = inputs, data_width
        members = {"m_axis": Out(AxiStreamSignature(data_width)), "source": Out(3)}
        for i in range(inputs):
            members[f"s_axis_{i}"] = In(AxiStreamSignature(data_width))
            members[f"frames_{i}"] = Out(32)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self._inputs
        srcs = [getattr(self, f"s_axis_{i}") for i in range(n)]
        out = self.m_axis

        # ``grant`` is a register: the sources' ``tready`` never depends on any ``tvalid``.
        grant = Signal(range(n))              # the source whose beats go to the FIFO
        mid = Signal()                        # inside a frame of ``grant``: the grant is held

        # Round robin: the first valid source after ``grant`` (``grant`` itself if none).
        # Written from the farthest candidate to the nearest so the nearest wins.
        pick = Signal(range(n))
        m.d.comb += pick.eq(grant)
        for k in reversed(range(1, n)):
            for j in range(n):
                with m.If((grant == j) & srcs[(j + k) % n].tvalid):
                    m.d.comb += pick.eq((j + k) % n)

        # the output register: a 3-entry first-word-fall-through FIFO of beats and their source
        beat = data.StructLayout({"tdata": self._width, "tkeep": self._width // 8, "tlast": 1,
                                  "source": 3})
        m.submodules.out_fifo = q = fifo.SyncFIFO(width=beat.size, depth=3)
        w, r = beat(q.w_data), beat(q.r_data)
        a_valid, a_last = Signal(), Signal()            # the granted source's beat
        # ``room``: the FIFO holds at most one beat (so it has room, ``q.w_rdy``); it and the
        # sources' treadys are flip-flops, computed from the next level and the next grant.
        room = Signal(init=1)
        ready = Signal(n, init=1)                       # == room & (grant == i)
        grant_n = Signal(range(n))
        m.d.comb += grant_n.eq(grant)
        for i, s in enumerate(srcs):
            m.d.comb += s.tready.eq(ready[i])
            with m.If(grant == i):
                m.d.comb += [w.tdata.eq(s.tdata), w.tkeep.eq(s.tkeep), a_last.eq(s.tlast),
                             a_valid.eq(s.tvalid)]
            counter = getattr(self, f"frames_{i}")
            with m.If(s.tvalid & ready[i] & s.tlast):
                m.d.sync += counter.eq(counter + 1)
        push = a_valid & room
        m.d.comb += [w.tlast.eq(a_last), w.source.eq(grant), q.w_en.eq(push),
                     out.tdata.eq(r.tdata), out.tkeep.eq(r.tkeep), out.tlast.eq(r.tlast),
                     out.tvalid.eq(q.r_rdy), q.r_en.eq(out.tready), self.source.eq(r.source)]
        # room next cycle: the level after this cycle's push / pop is <= 1
        room_n = Signal()
        pop = q.r_rdy & out.tready
        m.d.comb += room_n.eq(q.level <= 1)
        with m.If(push & ~pop):
            m.d.comb += room_n.eq(q.level == 0)
        with m.Elif(~push & pop):
            m.d.comb += room_n.eq(q.level <= 2)
        # (updated only on a push, a pop or an idle grant move: otherwise nothing changes,
        # and a simulation's undefined idle ``tvalid`` leaves the registers defined)
        with m.If(push | pop | (~mid & ~a_valid)):
            m.d.sync += [room.eq(room_n),
                         ready.eq(Cat(*[room_n & (grant_n == i) for i in range(n)])),
                         grant.eq(grant_n)]

        # The grant moves on after a frame's tlast beat is taken, or between frames while the
        # granted source has nothing to send; it never moves inside a frame.
        with m.If(push):
            m.d.sync += mid.eq(~a_last)
            with m.If(a_last):
                m.d.comb += grant_n.eq(pick)
        with m.Elif(~mid & ~a_valid):
            m.d.comb += grant_n.eq(pick)
        return m
