"""Path table: the EV profiles of every QP (MRC / OCP MRC 1.0 "EV profile").

Up to 256 :class:`~mrcnic.rtl.layouts.PathEntry` records {EV, port (plane),
state, weight, uSID carrier DA, SRH segment pointer}.  A QP's EV profile is a
range of consecutive entries (``QpContext.profile_base``/``profile_count``);
an EV that appears several times in a profile is weighted by its copies.

Internal organisation (chosen to fit the ECP5-25F):

* the wide records (184 bits each) live in one ``amaranth.lib.memory.Memory``
  (one write port, one synchronous read port; ~6 EBRs at depth 256), never in
  flip-flops;
* per entry, three flip-flops hold "state is GOOD", "weight is non-zero" and
  "weight >= 2", so the ``eligible`` bitmap (GOOD and weight non-zero) and the
  ``multi`` bitmap are available to the spray scheduler for every entry in
  parallel: 768 FFs and about 5 LUTs per entry at depth 256 (the narrow state port updates only the GOOD flip-flop, which is
  why both write ports can be used in the same cycle);
* a copy of every ``weight`` lives in distributed (LUT) RAM with an
  asynchronous read port (``wt_addr`` -> ``wt_data``, combinational), so the
  spray scheduler can count a burst against the live weight without waiting
  for the block-RAM read;
* the record read is registered twice: the block RAM's own read register, then a
  register loaded straight from it (no logic between), which board builds fold into
  the EBR's output register (``boards/ebr_outreg.py``): ``rd_data`` comes out of
  flip-flops plus the two-bit ``state`` rule, not after the ~5.8 ns clock-to-output
  of an unregistered DP16KD read.  The memory has no read/write collision logic
  (``no_rw_check``); a read of the entry written on the wide port in the same cycle
  is flagged by ``rd_clash`` instead, and the reader reads again.

The ``state`` field inside the memory is the one last written on the wide
port.  ``rd_data.state`` is GOOD when the entry is GOOD now; otherwise it is
the state last written on the wide port, or ASSUMED_BAD when that was GOOD
(so a DENIED set through the narrow port reads back as ASSUMED_BAD: both mean
"never used for data").
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import MAX_PATHS, EvState, PathEntry
from .params import NicParams, check_paths, param

__all__ = ["PathTable", "READ_LATENCY"]

READ_LATENCY = 2    #: cycles from ``rd_en`` to ``rd_data``


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
    read_ports : int
        1, or 2 for a second read port ``rd1_*`` (a second copy of the block RAM).
    params : NicParams
        The NIC's parameter set (:class:`~mrcnic.rtl.params.NicParams`): ``depth``
        (``params.paths``) come from it (a keyword given as well must agree).  Standalone:
        leave it out; the keywords are checked by the same rules (:mod:`mrcnic.rtl.params`).

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
        Read enable (stage 1 of the read pipeline takes ``rd_addr``; it keeps its
        read while ``rd_en`` is low).
    rd_addr : In(8)
        Entry index to read.
    rd_adv : In(1, init 1)
        Stage 2 (``rd_data``) takes stage 1's read; ``rd_data`` keeps its value
        while ``rd_adv`` is low.  With ``rd_adv`` high, a read's record is on
        ``rd_data`` ``READ_LATENCY`` = 2 cycles after its ``rd_en`` (one read per
        clock, pipelined); a stalled reader lowers ``rd_adv`` and ``rd_en`` to hold
        both stages.
    rd_data : Out(PathEntry)
        Stage 2: the entry read, from flip-flops (the EBR's output register).  Its ``state`` is GOOD exactly when
        the entry was GOOD at the read (see the module notes for the other states).
        Writes of earlier cycles are visible; a wide write to the same entry in the
        cycle of the read raises ``rd_clash`` and leaves that ``rd_data`` undefined.
    rd_clash : Out(1)
        One cycle after ``rd_en`` (a cycle before its ``rd_data``): that read hit
        the entry written on the wide port (``w_en``) in the same cycle; read it
        again to see the new record (the state port never clashes).  Keeps its
        value while ``rd_en`` is low.
    rd1_en, rd1_addr, rd1_adv, rd1_data, rd1_clash :
        (``read_ports=2`` only) a second, independent read port, as ``rd_*`` (the
        block RAM is duplicated: twice the EBRs).
    eligible : Out(depth)
        Bit ``i`` set when entry ``i`` is GOOD and has a non-zero weight
        (registered: it reflects every write of the previous cycles).
    multi : Out(depth)
        Bit ``i`` set when entry ``i`` has a weight of 2 or more (registered, like
        ``eligible``): the scheduler's "repeat after a first decision" test.
    wt_addr : In(8)
        Entry index of the weight read (asynchronous).
    wt_data : Out(8)
        ``weight`` last written to entry ``wt_addr`` (combinational, no read
        latency; a write becomes visible after its clock edge).  Addresses
        ``>= depth`` read entry ``wt_addr mod depth``.
    wt_ge3 : Out(1)
        That weight is 3 or more (stored with it: no compare after the read).
    """

    def __init__(self, depth: "int | None" = None, read_ports: int = 1, *,
                 params: "NicParams | None" = None):
        depth = check_paths(param(params, "paths", depth, MAX_PATHS), "depth")
        if read_ports not in (1, 2):
            raise ValueError(f"read_ports must be 1 or 2, not {read_ports}")
        self.depth, self.read_ports = depth, read_ports
        second = {}
        if read_ports == 2:
            second = {"rd1_en": In(1), "rd1_addr": In(8), "rd1_adv": In(1, init=1),
                      "rd1_data": Out(PathEntry), "rd1_clash": Out(1)}
        super().__init__({
            "w_en": In(1),
            "w_addr": In(8),
            "w_data": In(PathEntry),
            "st_en": In(1),
            "st_addr": In(8),
            "st_state": In(EvState),
            "rd_en": In(1),
            "rd_addr": In(8),
            "rd_adv": In(1, init=1),
            "rd_data": Out(PathEntry),
            "rd_clash": Out(1),
            **second,
            "eligible": Out(depth),
            "multi": Out(depth),
            "wt_addr": In(8),
            "wt_data": Out(8),
            "wt_ge3": Out(1),
        })

    def _rd(self, r):
        """(en, addr, adv, data, clash) of read port ``r``."""
        pre = "rd" if r == 0 else f"rd{r}"
        return tuple(getattr(self, f"{pre}_{x}") for x in ("en", "addr", "adv", "data", "clash"))

    def elaborate(self, platform):
        m = Module()
        depth = self.depth
        abits = (depth - 1).bit_length()

        # no_rw_check: no collision logic after the EBR (a same-cycle clash is flagged instead)
        m.submodules.mem = mem = Memory(shape=PathEntry, depth=depth, init=[],
                                          attrs={"ram_style": "block", "no_rw_check": 1})
        wp = mem.write_port()
        rps = [mem.read_port(domain="sync") for _ in range(self.read_ports)]

        w_ok = self.w_en & (self.w_addr < depth) if depth < 256 else self.w_en
        st_ok = self.st_en & (self.st_addr < depth) if depth < 256 else self.st_en
        m.d.comb += [
            wp.en.eq(w_ok),
            wp.addr.eq(self.w_addr[:abits]),
            wp.data.eq(self.w_data),
        ]

        # Weight copy in distributed RAM (asynchronous read for the scheduler's burst count).
        m.submodules.wmem = wmem = Memory(shape=9, depth=depth, init=[])
        wwp = wmem.write_port()
        wrp = wmem.read_port(domain="comb")
        wt = self.w_data.weight
        m.d.comb += [
            wwp.en.eq(w_ok), wwp.addr.eq(self.w_addr[:abits]),
            wwp.data.eq(Cat(wt, wt[2:].any() | wt[:2].all())),
            wrp.addr.eq(self.wt_addr[:abits]), self.wt_data.eq(wrp.data[:8]),
            self.wt_ge3.eq(wrp.data[8]),
        ]

        # Per-entry flags: live "state is GOOD" and "weight is non-zero" (2 FFs per entry).
        good = Signal(depth)
        wnz = Signal(depth)
        wmul = Signal(depth)
        st_good = self.st_state == EvState.GOOD
        w_good = self.w_data.state == EvState.GOOD
        w_nz = self.w_data.weight != 0
        w_mul = self.w_data.weight[1:].any()
        # Two-level address decode (16 x 16 one-hot) shared by all entries.
        def decode(en, addr):
            lo = Signal(16)
            hi = Signal(16)
            m.d.comb += [lo.eq(1 << addr[:4]), hi.eq(Mux(en, 1 << addr[4:8], 0))]
            return lo, hi
        st_lo, st_hi = decode(st_ok, self.st_addr)
        w_lo, w_hi = decode(w_ok, self.w_addr)
        for i in range(depth):
            st_hit = st_hi[i // 16] & st_lo[i % 16]
            w_hit = w_hi[i // 16] & w_lo[i % 16]
            with m.If(st_hit):
                m.d.sync += good[i].eq(st_good)
            with m.Elif(w_hit):
                m.d.sync += good[i].eq(w_good)
            with m.If(w_hit):
                m.d.sync += [wnz[i].eq(w_nz), wmul[i].eq(w_mul)]
        m.d.comb += [self.eligible.eq(good & wnz), self.multi.eq(wmul)]

        # Read ports: EBR read register (stage 1, enable rd_en) -> rd_q (stage 2, enable
        # rd_adv; all bits straight from the EBR: it becomes the EBR's output register); the
        # live GOOD bit and the clash flag are captured at the read and travel alongside.
        for r, rp in enumerate(rps):
            en, addr, adv, rdata, clash = self._rd(r)
            rd_sel = addr[:abits]
            rd_q = Signal(PathEntry, name=f"rd_q{r}")
            good1, good2 = Signal(name=f"good1_{r}"), Signal(name=f"good2_{r}")
            with m.If(en):
                m.d.sync += [good1.eq(good.bit_select(rd_sel, 1)),
                             clash.eq(w_ok & (self.w_addr[:abits] == rd_sel))]
            with m.If(adv):
                m.d.sync += [rd_q.eq(rp.data), good2.eq(good1)]
            m.d.comb += [rp.en.eq(en), rp.addr.eq(rd_sel), rdata.eq(rd_q)]
            with m.If(good2):
                m.d.comb += rdata.state.eq(EvState.GOOD)
            with m.Elif(rd_q.state == EvState.GOOD):
                m.d.comb += rdata.state.eq(EvState.ASSUMED_BAD)
        return m
