"""NSCC congestion window per QP (UET 1.0 NSCC, simplified for hardware).

Source: the Ultra Ethernet Transport 1.0 specification, congestion management,
"NSCC" (network-signal-based congestion control): a sender window in bytes
driven by the ACK's ECN echo and the measured queueing delay against a
target, with four quadrants, quick adapt on loss/trim and parameters
``base_rtt``, ``target_delay``, ``max_cwnd``, ``min_cwnd``, ``fi`` (fair
increase), ``eta`` (proportional increase), multiplicative-decrease cap
(``max_md_jump``) and quick adapt.  The OCP MRC 1.0 controller API names the
same parameters (``mrc_ctl_cc_nscc_cfg``); ``mrcnic.config.CcProfile`` holds
them in the configuration file.

On every update (one per processed ACK, see :class:`NsccUpdate`), with
``qdelay = max(0, rtt_ns - base_rtt_ns)``:

============================  ==========================================================
no ECN (any delay)            fair increase: ``cwnd += fi_bytes * acked / cwnd``
no ECN, ``qdelay < target``   plus proportional increase:
                              ``cwnd += eta * acked * (target - qdelay) / target``
ECN, ``qdelay > target``      multiplicative decrease ``cwnd -= cwnd * md`` (once per epoch)
ECN, ``qdelay <= target``     no change (the sender steers away from the EV instead)
trim NACK                     quick adapt: ``cwnd = min(cwnd, max(min_cwnd, achieved))``
                              (once per epoch), no other change by this update
============================  ==========================================================

then ``cwnd`` is clamped to ``[min_cwnd, max_cwnd]``.

Simplifications against UET (all documented choices of mrcnic):

* no division: ``x / cwnd`` is ``x >> floor(log2(cwnd))`` (up to 2x more
  increase than exact), ``x / target`` is ``x >> (floor(log2(target)) + 1)``
  (up to 2x less);
* increases are applied on every ACK instead of being accumulated until
  ``adjust_bytes_threshold`` / ``adjust_period_threshold``;
* the multiplicative decrease uses the fixed fraction ``md`` (UET scales it by
  ``gamma * (delay - target) / delay`` capped at ``max_md_jump``; mrcnic uses
  the cap);
* "once per RTT" is once per *epoch* of ``base_rtt_ns``: an epoch is rolled
  lazily at the next update at least ``base_rtt_ns`` after its start;
  ``achieved`` is the larger of the bytes acknowledged in the current and in
  the previous epoch (the previous one counts as 0 when the gap was two
  epochs or more).

Fixed-point parameters: ``md_q8`` and ``eta_q8`` are fractions in 1/256.
:func:`nscc_config` converts a :class:`~mrcnic.config.CcProfile`
(``fi_bytes = fi * fi_scale * 1024``, ``md = max_md_jump``).
"""

from contextlib import contextmanager

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .params import NicParams, check_qps, param

__all__ = ["Nscc", "NsccConfig", "NsccUpdate", "nscc_config", "NSCC_DEFAULTS", "UPDATE_CYCLES",
           "CONFIG_CYCLES"]

#: most cycles from an update's acceptance to its ``cwnd`` write (the unit is ready again one cycle later)
UPDATE_CYCLES = 75
#: cycles from a configuration write (the unit idle) to the write of its clamped ``cwnd``
CONFIG_CYCLES = 8


class NsccConfig(data.Struct):
    """NSCC parameters of one QP.  Times in ns, windows in bytes, fractions in 1/256."""
    base_rtt_ns: 24
    target_delay_ns: 24
    max_cwnd: 32
    min_cwnd: 32
    init_cwnd: 32
    fi_bytes: 16
    md_q8: 8
    eta_q8: 8
    qa_enable: 1


class NsccUpdate(data.Struct):
    """One ACK's congestion signals for QP ``qp``.

    ``acked``: bytes newly acknowledged by the ACK; ``rtt_ns``: now minus the
    send time of the newest newly-acknowledged PSN (meaningful when
    ``acked`` > 0); ``ecn``: the ACK echoed ECN; ``trim``: it was a trim NACK.
    """
    qp: 3
    acked: 24
    rtt_ns: 32
    ecn: 1
    trim: 1


def nscc_config(profile=None) -> dict:
    """:class:`NsccConfig` field values (a dict) from a ``mrcnic.config.CcProfile`` (None: defaults)."""
    if profile is None:
        from mrcnic.config import CcProfile
        profile = CcProfile()
    init = profile.initial_cwnd_bytes if profile.initial_cwnd_bytes is not None else profile.max_cwnd_bytes
    return {
        "base_rtt_ns": profile.base_rtt_ns, "target_delay_ns": profile.target_delay_ns,
        "max_cwnd": profile.max_cwnd_bytes, "min_cwnd": profile.min_cwnd_bytes, "init_cwnd": init,
        "fi_bytes": min(0xFFFF, round(profile.fi * profile.fi_scale * 1024)),
        "md_q8": min(255, round(profile.max_md_jump * 256)),
        "eta_q8": min(255, round(profile.eta * 256)),
        "qa_enable": int(not profile.disable_qa),
    }


#: Defaults (``CcProfile()``): base RTT 10 us, target 5 us, window 4 KiB..256 KiB starting at
#: 256 KiB, fi 1280 B per window acked, md 0.5, eta 38/256, quick adapt on.
NSCC_DEFAULTS = {
    "base_rtt_ns": 10_000, "target_delay_ns": 5_000, "max_cwnd": 262_144, "min_cwnd": 4_096,
    "init_cwnd": 262_144, "fi_bytes": 1280, "md_q8": 128, "eta_q8": 38, "qa_enable": 1,
}


def _floor_log2(m, value, width, name):
    """``floor(log2(value))`` (0 for 0) as a balanced priority-encoder tree (log2(width) levels)."""
    def enc(v):                     # -> (any bit set, index of the highest set bit)
        if len(v) == 1:
            return v[0], Const(0, 0)
        h = 1 << ((len(v) - 1).bit_length() - 1)
        lo_any, lo_i = enc(v[:h])
        hi_any, hi_i = enc(v[h:])
        return lo_any | hi_any, Mux(hi_any, hi_i + h, lo_i)
    out = Signal(range(width), name=name)
    m.d.comb += out.eq(enc(value[:width])[1])
    return out


class _OneHot:
    """A one-hot state machine (one flip-flop per state: no state decoding in the datapath)."""

    def __init__(self, m, names):
        self.m = m
        self.st = {n: Signal(name=f"st_{n}", init=int(i == 0)) for i, n in enumerate(names)}
        self.cur = None

    @contextmanager
    def State(self, name):
        self.cur = name
        with self.m.If(self.st[name]):
            yield
        self.cur = None

    def goto(self, name):
        self.m.d.sync += [self.st[self.cur].eq(0), self.st[name].eq(1)]


class _ShiftMul:
    """Serial multiply-and-shift engine: ``acc = floor((acc0 + m * f) / 2**k)``, one bit of ``f`` a cycle.

    While ``k`` > 0 a step is ``acc = (acc + f[0] * m) >> 1`` (the right shifts of the
    division, exact: floor(floor(x / 2) / 2) = floor(x / 4)); once ``k`` is 0 a step is
    ``acc += f[0] * m; m <<= 1`` (the bits of ``f`` at or above ``k``).  It runs
    ``max(k, bit length of f)`` steps (1 at least) after ``start``; ``busy`` is registered.
    A result of 2**32 or more sets ``sat`` (``acc`` is then meaningless).  One 33-bit
    adder; ``acc``, ``m``: 32 bits.
    """

    def __init__(self, m, name, f_width):
        self.name = name
        self._jobs = []
        self.acc = Signal(32, name=f"{name}_acc")
        self.mul = Signal(32, name=f"{name}_m")
        self.f = Signal(f_width, name=f"{name}_f")
        self.k = Signal(5, name=f"{name}_k")
        self.sat = Signal(name=f"{name}_sat")
        self.big = Signal(name=f"{name}_big")      # the true m is 2**32 or more
        self.busy = Signal(name=f"{name}_busy")
        self.knz = Signal(name=f"{name}_knz")      # k != 0, registered (a flag, not a compare)
        s = Signal(33, name=f"{name}_sum")
        m.d.comb += s.eq(self.acc + self.mul)
        with m.If(self.busy):
            with m.If(self.knz):
                m.d.sync += [self.acc.eq(Mux(self.f[0], s[1:], self.acc[1:])), self.k.eq(self.k - 1),
                             self.knz.eq(self.k[1:] != 0)]
            with m.Else():
                with m.If(self.f[0]):
                    m.d.sync += [self.acc.eq(s[:32]), self.sat.eq(self.sat | self.big | s[32])]
                m.d.sync += [self.mul.eq(self.mul << 1), self.big.eq(self.big | self.mul[31])]
            m.d.sync += [self.f.eq(self.f[1:]), self.busy.eq((self.k[1:] != 0) | (self.f[1:] != 0))]

    def start(self, cond, acc0, mul, f, k):
        """Record a job loaded when ``cond`` is true (conditions mutually exclusive); it runs
        from the next cycle.  :meth:`build` makes the loads."""
        self._jobs.append((cond, acc0, mul, f, k, k != 0))

    def build(self, m):
        """The recorded loads, as an AND-OR of the cases (no priority chain)."""
        sel = [Signal(name=f"{self.name}_go{i}") for i in range(len(self._jobs))]
        m.d.comb += [s.eq(job[0]) for s, job in zip(sel, self._jobs)]

        def pick(j):
            v = 0
            for s, job in zip(sel, self._jobs):
                v = v | Mux(s, job[j], 0)
            return v
        with m.If(Cat(sel).any()):
            m.d.sync += [self.acc.eq(pick(1)), self.mul.eq(pick(2)), self.f.eq(pick(3)),
                         self.k.eq(pick(4)), self.knz.eq(pick(5)),
                         self.sat.eq(0), self.big.eq(0), self.busy.eq(1)]


class Nscc(wiring.Component):
    """Time-multiplexed NSCC unit: one congestion window (bytes) per QP.

    One update at a time runs through a sequence of registered steps, each
    with at most one adder or comparator of <= 34 bits and its operands taken
    from flip-flops:

    0. the QP's parameters, window and epoch start are copied into working
       registers (the QP number drives one multiplexer level; a configuration
       write to that QP during the update cancels it); its epoch byte counts
       are read in place (through one multiplexer level: the QP number is a
       register, stable for the update);
    1. the epoch (``now - epoch``, against ``base_rtt`` and twice it) and the
       queueing delay against the target (24-bit subtractions), then the new
       per-QP epoch state (bytes acked in the current and the last epoch);
    2. the products, bit-serially without multipliers or barrel shifters, in
       one shift-and-add engine, one job after the other: on an ECN echo
       ``cwnd - ((cwnd * md) >> 8)`` (computed as
       ``floor((255 + cwnd * (256 - md)) / 256)``, which is equal); otherwise
       ``eta * acked``, then (below the target only)
       ``pi = (eta * acked * (target - qdelay)) >> (floor(log2(target)) + 9)``,
       then the fair increase ``(fi_bytes * acked) >> floor(log2(cwnd))``
       (saturated at 2**32: any value that large clamps the window to
       ``max_cwnd``);
    3. the new window on one 34-bit adder / comparator: the sums, the quick
       adapt ``min(max(achieved, min_cwnd), cwnd)`` (as ``min(max(cur, last),
       cwnd)`` followed by the clamp, which is equal) and the clamp to
       ``[min_cwnd, max_cwnd]`` (``max`` first, as the rule's table).

    The result is bit-exact to the rule of the module docstring.

    Parameters
    ----------
    qps : int
        QPs, 1..8.
    params : NicParams
        The NIC's parameter set (:class:`~mrcnic.rtl.params.NicParams`): ``qps`` come from
        it (a keyword given as well must agree).  Standalone: leave it out; the keywords are
        checked by the same rules (:mod:`mrcnic.rtl.params`).

    Attributes
    ----------
    upd : In(stream.Signature(NsccUpdate))
        Congestion signals of one ACK.  ``ready`` is high (registered state)
        while the unit is idle; an accepted update writes the QP's ``cwnd`` at
        most :data:`UPDATE_CYCLES` cycles later (15 for a trim NACK, about 20 on
        an ECN echo, 20..75 otherwise: the engine runs ``bit length of eta``,
        ``floor(log2(target)) + 1`` (below the target) and ``max(floor(log2(cwnd)),
        bit length of fi_bytes)`` steps, plus one cycle per job) and the unit
        is ready again on the cycle after; while busy ``ready`` is low (an
        update is never dropped, the sender waits).
        Updates for ``qp >= qps`` are consumed and ignored.
    cfg_w_en, cfg_w_addr, cfg_w_data : In(1), In(3), In(NsccConfig)
        Per-QP parameter write; sets ``cwnd`` (on the next cycle) to
        ``init_cwnd`` and starts a new epoch with nothing acked; the unit then
        clamps that ``cwnd`` to ``[min_cwnd, max_cwnd]`` (a short job of the
        sequencer, :data:`CONFIG_CYCLES` after the write when idle, else after
        the update in progress; pending clamps run before the next update is
        taken), so an ``init_cwnd`` inside the range holds at once.  An update
        in progress for the same QP is cancelled (it writes nothing, counts
        nothing).
    now_ns : In(32)
        Current time in ns (wrapping); sampled on the update's first cycles.
    cwnd : Out(data.ArrayLayout(32, qps))
        Congestion window of each QP in bytes (registered; 0 before the
        QP's first configuration write).
    decreases, quick_adapts : Out(32)
        Multiplicative decreases and quick adapts applied (wrap around).
    """

    def __init__(self, qps: "int | None" = None, *, params: "NicParams | None" = None):
        qps = check_qps(param(params, "qps", qps, 2))
        self.qps = qps
        super().__init__({
            "upd": In(stream.Signature(NsccUpdate)),
            "cfg_w_en": In(1),
            "cfg_w_addr": In(3),
            "cfg_w_data": In(NsccConfig),
            "now_ns": In(32),
            "cwnd": Out(data.ArrayLayout(32, qps)),
            "decreases": Out(32),
            "quick_adapts": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        qps = self.qps
        qb = max(1, (qps - 1).bit_length())    # per-QP state is indexed by qp[:qb]

        # per-QP parameters and state (flip-flops; ``init_cwnd`` is only used by the write)
        w_ok = self.cfg_w_en & (self.cfg_w_addr < qps)
        w_sel = [w_ok & (self.cfg_w_addr[:qb] == i) for i in range(qps)]
        cfgs = [Signal(NsccConfig, name=f"cfg{i}") for i in range(qps)]
        cwnd = Array(self.cwnd[i] for i in range(qps))
        epoch = [Signal(32, name=f"epoch{i}") for i in range(qps)]
        acked_cur = [Signal(32, name=f"acked_cur{i}") for i in range(qps)]
        acked_last = [Signal(32, name=f"acked_last{i}") for i in range(qps)]
        md_done = [Signal(name=f"md_done{i}") for i in range(qps)]
        qa_done = [Signal(name=f"qa_done{i}") for i in range(qps)]

        # the update in progress: its signals; its QP's parameters and state are read in place
        # through one multiplexer level (q is a register, stable for the update; a
        # configuration write to q cancels the update, and the update's own writes come after
        # its last read), so no working copies are kept
        q = Signal(qb)
        acked = Signal(24)
        rtt = Signal(32)
        ecn = Signal()
        trim = Signal()
        c = Signal(NsccConfig)
        cw = Signal(32)
        ep = Signal(32)
        m.d.comb += [c.eq(Array(cfgs)[q]), cw.eq(cwnd[q]), ep.eq(Array(epoch)[q])]
        cur = Signal(32)             # the QP's epoch state, read in place (q is stable
        last = Signal(32)            # during an update; written back in the STATE cycle)
        mdd = Signal()
        qad = Signal()
        m.d.comb += [mdd.eq(Array(md_done)[q]), qad.eq(Array(qa_done)[q])]
        qoh = Signal(qps)            # q, one-hot
        pend = Signal(qps)           # per QP: its configured cwnd still needs the clamp
        init_job = Signal()          # the job in progress is that clamp
        pick = Signal(qb)            # the lowest QP with a clamp pending, and one-hot
        pick_oh = Signal(qps)
        for i in reversed(range(qps)):
            with m.If(pend[i]):
                m.d.comb += [pick.eq(i), pick_oh.eq(1 << i)]
        st_go = Signal()             # write the epoch state (STATE cycle)
        wr_go = Signal()             # write cwnd (WRITE cycle)
        abort = Signal()             # a configuration write to q cancelled this update
        cancel = Signal()
        m.d.comb += cancel.eq(abort | (w_ok & (self.cfg_w_addr[:qb] == q)))
        m.d.sync += abort.eq(cancel)

        since = Signal(32)           # now - epoch
        qlo = Signal(25)             # rtt[:24] - base (bit 24: borrow)
        rhz = Signal()               # rtt[24:] == 0
        rh1 = Signal()               # rtt[24:] == 1
        cw_nz = Signal(4)            # floor(log2(cw)) in two steps: the nonzero bytes of cw,
        cw_lg = [Signal(3, name=f"cw_lg{j}") for j in range(4)]   # floor(log2()) of each
        lg_cw_c = Signal(5)
        lg_cw = Signal(5)            # ... combined, registered in DELAY (used from WAIT_PI on)
        md_c = Signal(9)             # 256 - md
        for j in range(4):
            with m.If(cw_nz[j]):
                m.d.comb += lg_cw_c.eq(Cat(cw_lg[j], Const(j, 2)))
        lt1 = Signal(5)              # floor(log2(target)) (+ 1 from the DELAY step on)
        t_nz = Signal(3)             # the nonzero bytes of target (LOAD)
        t_lg = [Signal(3, name=f"t_lg{j}") for j in range(3)]    # floor(log2()) of each
        lg_t = Signal(5)
        for j in range(3):
            with m.If(t_nz[j]):
                m.d.comb += lg_t.eq(Cat(t_lg[j], Const(j, 2)))
        ge1 = Signal()               # since[:25] >= base
        ge2 = Signal()               # since[:25] >= 2 * base
        hi = Signal()                # since >= 2**25
        roll = Signal()
        two = Signal()
        dq = Signal(25)              # target - min(qdelay, 2**24 - 1) (bit 24: borrow)
        qhi = Signal()               # qdelay >= 2**24
        q_lt = Signal()
        q_gt = Signal()

        e = _ShiftMul(m, "e", 24)    # eta * acked, the proportional and the fair increase,
                                     # or the decreased window, one after the other

        nw = Signal(34)              # the new window
        b = Signal(32)               # its operand register
        lt = Signal()                # nw < b
        fsat = Signal()              # fair increase >= 2**32: the window clamps to max_cwnd
        nw_b = Signal(35)
        m.d.comb += nw_b.eq(nw - b)
        m.d.sync += lt.eq(nw_b[34])
        apply = Signal()             # the decrease / quick adapt is applied

        # the epoch state after this update (written in the STATE cycle)
        new_cur = Signal(32)
        new_last = Signal(32)
        m.d.comb += [cur.eq(Array(acked_cur)[q]), last.eq(Array(acked_last)[q])]
        m.d.comb += [new_cur.eq(Mux(roll, 0, cur) + acked),
                     new_last.eq(Mux(roll, Mux(two, 0, cur), last))]

        m.d.sync += [st_go.eq(0), wr_go.eq(0)]      # strobes, set by the FSM
        fsm = _OneHot(m, ["IDLE", "LOAD", "EPOCH", "DELAY", "FLAGS", "STATE", "WAIT_E", "WAIT_P",
                          "E_LOAD", "WAIT_PI", "ADD_PI", "PI_SUM", "WAIT_FI", "ADD_FI", "FI_SUM",
                          "QA_CUR", "QA_CMP1", "QA_MAX",
                          "QA_CMP2", "QA_MIN", "INIT", "CLAMP_CMP1", "CLAMP_MAX", "CLAMP_CMP2",
                          "FINAL", "WRITE"])
        st = fsm.st
        qa_go = Signal()             # trim: the quick adapt applies (registered in FLAGS, used
                                     # in STATE: qa_done is written from STATE on; a write to
                                     # cfg/qa_done of q in FLAGS aborts the update)
        # rdy = IDLE and no clamp pending, as a register (upd.ready: no decoding in the
        # producer's handshake): its next value from the next state and the next pend
        rdy = Signal(init=1)
        pend_nx = Signal(qps)
        m.d.comb += [pend_nx.eq(Cat(w_sel) | (pend & ~Mux(wr_go & ~abort, qoh, 0))),
                     self.upd.ready.eq(rdy)]
        m.d.sync += rdy.eq((st["WRITE"] | (rdy & ~(self.upd.valid & (self.upd.payload.qp < qps))))
                           & ~pend_nx.any())
        with fsm.State("IDLE"):
            p = self.upd.payload
            with m.If(~rdy):                 # (in IDLE: a clamp is pending)
                # a configuration write's clamp of init_cwnd goes first (no update taken)
                m.d.sync += [q.eq(pick), qoh.eq(pick_oh), init_job.eq(1), abort.eq(0),
                             ecn.eq(0), trim.eq(0)]
                fsm.goto("LOAD")
            with m.Else():
                m.d.sync += [q.eq(p.qp[:qb]), acked.eq(p.acked), rtt.eq(p.rtt_ns), ecn.eq(p.ecn),
                             trim.eq(p.trim), abort.eq(0), qoh.eq(1 << p.qp[:qb]), init_job.eq(0)]
                with m.If(self.upd.valid & (p.qp < qps)):
                    fsm.goto("LOAD")
        with fsm.State("LOAD"):
            m.d.sync += md_c.eq((~c.md_q8 & 0xFF) + 1)
            # floor(log2(target)) in two steps (as for cw): per byte here, combined in EPOCH
            m.d.sync += [t_nz.eq(Cat(c.target_delay_ns[8 * j:8 * j + 8] != 0 for j in range(3))),
                         *(t_lg[j].eq(_floor_log2(m, c.target_delay_ns[8 * j:8 * j + 8], 8,
                                                  f"lg_t{j}"))
                           for j in range(3))]
            with m.If(init_job):
                fsm.goto("INIT")
            with m.Else():
                fsm.goto("EPOCH")
        with fsm.State("INIT"):          # nw = cwnd (= init_cwnd), b = min_cwnd: the clamp
            m.d.sync += fsat.eq(0)
            fsm.goto("CLAMP_CMP1")
        with fsm.State("EPOCH"):
            m.d.sync += [since.eq(self.now_ns - ep), qlo.eq(rtt[:24] - c.base_rtt_ns),
                         rhz.eq(rtt[24:] == 0), rh1.eq(rtt[24:] == 1),
                         cw_nz.eq(Cat(cw[8 * j:8 * j + 8] != 0 for j in range(4))),
                         *(cw_lg[j].eq(_floor_log2(m, cw[8 * j:8 * j + 8], 8, f"lg_cw{j}"))
                           for j in range(4)),
                         lt1.eq(lg_t)]
            fsm.goto("DELAY")
        e.start(st["EPOCH"] & ecn, 255, cw, md_c, 8)          # cwnd - (cwnd * md >> 8)
        e.start(st["EPOCH"] & ~ecn, 0, acked, c.eta_q8, 0)    # eta * acked
        with fsm.State("DELAY"):
            # qdelay = max(0, rtt - base): negative / >= 2**24 / its low 24 bits
            neg = rhz & qlo[24]
            d1 = Signal(26)      # subtractions (carry chains) for the comparisons
            d2 = Signal(26)
            m.d.comb += [d1.eq(since[:25] - c.base_rtt_ns), d2.eq(since[:25] - (c.base_rtt_ns << 1))]
            m.d.sync += [ge1.eq(~d1[25]), ge2.eq(~d2[25]),
                         hi.eq(since[25:] != 0),
                         qhi.eq(~rhz & ~(rh1 & qlo[24])),
                         dq.eq(c.target_delay_ns - Mux(neg, 0, qlo[:24])), lt1.eq(lt1 + 1),
                         lg_cw.eq(lg_cw_c)]
            fsm.goto("FLAGS")
        with fsm.State("FLAGS"):
            m.d.sync += st_go.eq(1)
            m.d.sync += [roll.eq(hi | ge1), two.eq(hi | ge2),
                         qa_go.eq(c.qa_enable & (hi | ge1 | ~qad)),
                         q_gt.eq(qhi | dq[24]), q_lt.eq(~qhi & ~dq[24] & (dq[:24] != 0))]
            fsm.goto("STATE")
        with fsm.State("STATE"):
            # (the per-QP epoch state is written in this cycle, below)
            m.d.sync += fsat.eq(0)
            with m.If(trim):
                m.d.sync += apply.eq(qa_go)
                with m.If(qa_go):
                    fsm.goto("QA_CUR")
                with m.Else():           # nw = cwnd
                    fsm.goto("CLAMP_CMP1")
            with m.Elif(ecn):
                m.d.sync += apply.eq(q_gt & (roll | ~mdd))
                fsm.goto("WAIT_E")
            with m.Else():
                fsm.goto("WAIT_P")
        with fsm.State("WAIT_E"), m.If(~e.busy):
            fsm.goto("E_LOAD")
        with fsm.State("E_LOAD"):        # nw = the decreased window, or cwnd; b = min_cwnd
            fsm.goto("CLAMP_CMP1")
        # no ECN: nw = cwnd + pi + fi (nw = cwnd from the STATE cycle on)
        with fsm.State("WAIT_P"), m.If(~e.busy):
            fsm.goto("WAIT_PI")
        # (eta * acked * (target - qdelay)) >> (lg_t + 1)
        e.start(st["WAIT_P"] & ~e.busy & q_lt, 0, e.acc, dq[:24], lt1)
        with fsm.State("WAIT_PI"), m.If(~e.busy):       # b = pi
            fsm.goto("ADD_PI")
        # (fi * acked) >> floor(log2(cwnd))
        e.start(st["WAIT_PI"] & ~e.busy, 0, acked, c.fi_bytes, lg_cw)
        e.build(m)
        with fsm.State("ADD_PI"):        # (sum = nw + b)
            fsm.goto("PI_SUM")
        with fsm.State("PI_SUM"):        # nw = sum
            fsm.goto("WAIT_FI")
        with fsm.State("WAIT_FI"), m.If(~e.busy):       # b = fi
            m.d.sync += fsat.eq(e.sat)
            fsm.goto("ADD_FI")
        with fsm.State("ADD_FI"):        # (sum = nw + b)
            fsm.goto("FI_SUM")
        with fsm.State("FI_SUM"):        # nw = sum, b = min_cwnd
            fsm.goto("CLAMP_CMP1")
        # quick adapt: nw = min(max(cur, last), cwnd) (the clamp below then makes it
        # min(max(cur, last, min_cwnd), cwnd) clamped: the same value)
        with fsm.State("QA_CUR"):        # nw = cur, b = last
            fsm.goto("QA_CMP1")
        with fsm.State("QA_CMP1"):
            fsm.goto("QA_MAX")
        with fsm.State("QA_MAX"):        # nw = max(nw, b), b = cwnd
            fsm.goto("QA_CMP2")
        with fsm.State("QA_CMP2"):
            fsm.goto("QA_MIN")
        with fsm.State("QA_MIN"):        # nw = min(nw, b), b = min_cwnd
            fsm.goto("CLAMP_CMP1")
        # the clamp: nw = min(max(nw, min_cwnd), max_cwnd)
        with fsm.State("CLAMP_CMP1"):
            fsm.goto("CLAMP_MAX")
        with fsm.State("CLAMP_MAX"):     # nw = max(nw, b), b = max_cwnd
            fsm.goto("CLAMP_CMP2")
        with fsm.State("CLAMP_CMP2"):
            fsm.goto("FINAL")
        with fsm.State("FINAL"):         # nw = min(nw, b) (b on a saturated fair increase)
            m.d.sync += wr_go.eq(1)
            fsm.goto("WRITE")
        with fsm.State("WRITE"):
            m.d.sync += apply.eq(0)
            fsm.goto("IDLE")

        # nw and b: their next values as an AND-OR of the (mutually exclusive) one-hot cases
        # (two LUT levels, no priority chain), loaded through the flip-flops' enables
        # (nw's cases depend on the state and registered flags only; its sums come from the
        # registered adder output ``sum_q``)
        done = ~e.busy
        trim_cw = (st["STATE"] & trim & ~qa_go) | st["INIT"]
        sum_q = Signal(34)
        m.d.sync += sum_q.eq(nw + b)
        nw_cases = [
            (trim_cw | (st["STATE"] & ~trim & ~ecn) | (st["E_LOAD"] & ~apply), cw),
            (st["E_LOAD"] & apply, e.acc),
            (st["QA_CUR"], cur),
            (st["PI_SUM"] | st["FI_SUM"], sum_q),
            ((st["QA_MAX"] & lt) | (st["QA_MIN"] & ~lt) | (st["CLAMP_MAX"] & lt)
             | (st["FINAL"] & (~lt | fsat)), b),
        ]
        b_cases = [
            (st["WAIT_PI"] & done, Mux(q_lt, e.acc[8:], 0)),
            (st["WAIT_FI"] & done, e.acc),
            (st["QA_CUR"], last),
            (st["QA_MAX"], cw),
            (trim_cw | st["E_LOAD"] | st["FI_SUM"] | st["QA_MIN"], c.min_cwnd),
            (st["CLAMP_MAX"], c.max_cwnd),
        ]
        for reg, cases in ((nw, nw_cases), (b, b_cases)):
            sel = [Signal(name=f"{reg.name}_sel{k}") for k in range(len(cases))]
            m.d.comb += [s.eq(cond) for s, (cond, _) in zip(sel, cases)]
            nxt = 0
            for s, (_, val) in zip(sel, cases):
                nxt = nxt | Mux(s, val, 0)
            with m.If(Cat(sel).any()):
                m.d.sync += reg.eq(nxt)

        # write-back, in the STATE (st_go) and WRITE (wr_go) cycles; a configuration write
        # (below) to the same QP in the same cycle wins
        for i in range(qps):
            with m.If(st_go & ~abort & qoh[i]):
                # epoch roll (lazy); the bytes acked in the current / last epoch
                m.d.sync += [acked_cur[i].eq(new_cur), acked_last[i].eq(new_last)]
                with m.If(roll):
                    m.d.sync += [epoch[i].eq(self.now_ns), md_done[i].eq(0), qa_done[i].eq(0)]
            with m.If(wr_go & ~abort & qoh[i]):
                m.d.sync += [self.cwnd[i].eq(nw[:32]), pend[i].eq(0)]
                with m.If(apply & trim):
                    m.d.sync += qa_done[i].eq(1)
                with m.If(apply & ~trim & ecn):
                    m.d.sync += md_done[i].eq(1)
        with m.If(wr_go & ~cancel & apply):
            with m.If(trim):
                m.d.sync += self.quick_adapts.eq(self.quick_adapts + 1)
            with m.Elif(ecn):
                m.d.sync += self.decreases.eq(self.decreases + 1)

        # a configuration write: cwnd = init_cwnd at once, clamped by a job of the sequencer
        d = self.cfg_w_data
        for i in range(qps):
            with m.If(w_sel[i]):
                m.d.sync += [cfgs[i].eq(d), self.cwnd[i].eq(d.init_cwnd), pend[i].eq(1),
                             epoch[i].eq(self.now_ns),
                             acked_cur[i].eq(0), acked_last[i].eq(0), md_done[i].eq(0),
                             qa_done[i].eq(0)]
        return m
