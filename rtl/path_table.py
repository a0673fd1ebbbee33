"""Path table: the EV profiles of every QP (MRC / OCP MRC 1.0 "EV profile").

Up to 256 :class:`~mrcnic.rtl.layouts.PathEntry` records {EV, port (plane),
state, weight, uSID carrier DA, SRH segment pointer}.  A QP's EV profile is a
range of consecutive entries (``QpContext.profile_base``/``profile_count``);
an EV that appears several times in a profile is weighted by its copies.

Internal organisation (chosen to fit the ECP5-25F):

* the wide records (184 bits each) live in one ``amaranth.lib.memory.Memory``
  (one write port, one synchronous read port; ~6 EBRs at depth 256), never in
  flip-flops;
* per entry, flip-flops hold the live EV ``state`` (2 bits) and ``weight != 0``
  (1 bit), so the ``eligible`` bitmap (state GOOD and weight non-zero) is
  available to the spray scheduler for every entry in parallel.  At depth 256
  that is 768 FFs plus one LUT per entry.

The ``state`` field inside the memory is the one last written on the wide
port; the live state is the flip-flop one, which is what ``rd_data.state``
returns.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import MAX_PATHS, EvState, PathEntry

__all__ = ["PathTable"]


class PathTable(wiring.Component):
    """EV path table with a control-plane write port and a narrow state port.

    Both write ports may be used at any time, while traffic runs; writes take
    effect at the next clock edge.  Writes to addresses ``>= depth`` are ignored.
    After reset every entry is DENIED with weight 0 (never eligible) until the
    control plane writes it; the memory contents are not cleared by reset.

    Parameters
    ----------
    depth : int
        Number of entries, a power of two from 16 to 256 (``MAX_PATHS``).

    Attributes
    ----------
    w_en : In(1)
        Control-plane write strobe: ``w_data`` is stored at ``w_addr``
        (all fields, including ``state`` and ``weight``).
    w_addr : In(8)
        Entry index of the write.
    w_data : In(PathEntry)
        The entry written (184 bits).
    st_en : In(1)
        State update strobe (sender reliability: GOOD <-> ASSUMED_BAD; controller:
        DENIED).  When ``st_en`` and ``w_en`` hit the same entry in one cycle,
        ``st_state`` wins; other fields of the ``w_en`` write are still stored.
    st_addr : In(8)
        Entry index of the state update.
    st_state : In(EvState)
        New state (2 bits).
    rd_en : In(1)
        Read enable; ``rd_data`` keeps its value while ``rd_en`` is low.
    rd_addr : In(8)
        Entry index to read.
    rd_data : Out(PathEntry)
        Entry at ``rd_addr``, one cycle after ``rd_en`` (synchronous read).  Its
        ``state`` is the live state at the read; a same-cycle wide write to the
        same entry is not visible (read-before-write).
    eligible : Out(depth)
        Bit ``i`` set when entry ``i`` is GOOD and has a non-zero weight
        (registered: it reflects every write of the previous cycles).
    """

    def __init__(self, depth: int = MAX_PATHS):
        if depth not in (16, 32, 64, 128, 256):
            raise ValueError(f"depth must be a power of two from 16 to {MAX_PATHS}, not {depth}")
        self.depth = depth
        super().__init__({
            "w_en": In(1),
            "w_addr": In(8),
            "w_data": In(PathEntry),
            "st_en": In(1),
            "st_addr": In(8),
            "st_state": In(EvState),
            "rd_en": In(1),
            "rd_addr": In(8),
            "rd_data": Out(PathEntry),
            "eligible": Out(depth),
        })

    def elaborate(self, platform):
        m = Module()
        depth = self.depth
        abits = (depth - 1).bit_length()

        m.submodules.mem = mem = Memory(shape=PathEntry, depth=depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="sync")

        w_ok = self.w_en & (self.w_addr < depth) if depth < 256 else self.w_en
        st_ok = self.st_en & (self.st_addr < depth) if depth < 256 else self.st_en
        m.d.comb += [
            wp.en.eq(w_ok),
            wp.addr.eq(self.w_addr[:abits]),
            wp.data.eq(self.w_data),
        ]

        # Per-entry live state and weight-non-zero flags.
        state = [Signal(EvState, init=EvState.DENIED, name=f"state{i}") for i in range(depth)]
        wnz = Signal(depth)
        w_nz = self.w_data.weight != 0
        for i in range(depth):
            with m.If(st_ok & (self.st_addr[:abits] == i)):
                m.d.sync += state[i].eq(self.st_state)
            with m.Elif(w_ok & (self.w_addr[:abits] == i)):
                m.d.sync += state[i].eq(self.w_data.state)
            with m.If(w_ok & (self.w_addr[:abits] == i)):
                m.d.sync += wnz[i].eq(w_nz)
        m.d.comb += self.eligible.eq(Cat(*[(state[i] == EvState.GOOD) & wnz[i]
                                           for i in range(depth)]))

        # Synchronous read: memory record plus the live state, both captured at the read.
        live_state = Signal(EvState)
        rd_sel = self.rd_addr[:abits]
        with m.Switch(rd_sel):
            for i in range(depth):
                with m.Case(i):
                    m.d.comb += live_state.eq(state[i])
        state_q = Signal(EvState)
        with m.If(self.rd_en):
            m.d.sync += state_q.eq(live_state)
        m.d.comb += [
            rp.en.eq(self.rd_en),
            rp.addr.eq(rd_sel),
            self.rd_data.eq(rp.data),
            self.rd_data.state.eq(state_q),
        ]
        return m
