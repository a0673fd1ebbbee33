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

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import MAX_QPS

__all__ = ["Nscc", "NsccConfig", "NsccUpdate", "nscc_config", "NSCC_DEFAULTS", "UPDATE_CYCLES"]

UPDATE_CYCLES = 6   #: cycles an update occupies the (time-multiplexed) NSCC unit


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
    out = Signal(range(width), name=name)
    for i in range(width):
        with m.If(value[i]):
            m.d.comb += out.eq(i)
    return out


def _le_c(x, j):
    """``x <= j`` for a constant ``j``, as an AND/OR network (no carry chain)."""
    if j < 0:
        return Const(0)
    if j >= (1 << len(x)) - 1:
        return Const(1)
    g = Const(0)                   # x[:b] > j[:b]
    for b in range(len(x)):
        g = (x[b] | g) if not (j >> b) & 1 else (x[b] & g)
    return ~g


class Nscc(wiring.Component):
    """Time-multiplexed NSCC unit: one congestion window (bytes) per QP.

    The update runs as a short pipeline of registered steps (epoch and
    queueing delay; normalised target distance and fair increase; the
    proportional-increase product; the new window; the clamp), so no step
    holds more than one wide adder, and the divisions by powers of two are
    done without a barrel shifter on the wide products: the proportional
    increase ``(eta * acked * (target - qdelay)) >> (floor(log2(target)) + 9)``
    is computed, bit-exactly, as the top bits of
    ``(eta * acked) * ((target - qdelay) << (23 - floor(log2(target))))``
    (a shift of the 24-bit distance instead of the 56-bit product), and the
    fair increase is saturated at 2**33 - 1 (any value that large clamps the
    window to ``max_cwnd``).  Multiplications map to DSP blocks.

    Parameters
    ----------
    qps : int
        QPs, 1..8.

    Attributes
    ----------
    upd : In(stream.Signature(NsccUpdate))
        Congestion signals of one ACK.  Accepted when the unit is idle
        (``ready`` high); each update takes :data:`UPDATE_CYCLES` cycles, the
        new ``cwnd`` shows on the cycle after.  Updates for ``qp >= qps``
        are consumed and ignored.
    cfg_w_en, cfg_w_addr, cfg_w_data : In(1), In(3), In(NsccConfig)
        Per-QP parameter write; sets ``cwnd`` to ``init_cwnd`` clamped to
        ``[min_cwnd, max_cwnd]`` and starts a new epoch with nothing acked.
        An update in progress for the same QP is overridden.
    now_ns : In(32)
        Current time in ns (wrapping).
    cwnd : Out(data.ArrayLayout(32, qps))
        Congestion window of each QP in bytes (registered; 0 before the
        QP's first configuration write).
    decreases, quick_adapts : Out(32)
        Multiplicative decreases and quick adapts applied (wrap around).
    """

    def __init__(self, qps: int = 2):
        if not 1 <= qps <= MAX_QPS:
            raise ValueError(f"qps must be 1..{MAX_QPS}, not {qps}")
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

        # parameters: distributed RAM, asynchronous read at the update's QP
        m.submodules.cfg = cfg_mem = memory.Memory(shape=NsccConfig, depth=qps, init=[])
        cfg_w = cfg_mem.write_port()
        cfg_r = cfg_mem.read_port(domain="comb")
        cwnd = Array(self.cwnd[i] for i in range(qps))
        epoch = Array(Signal(32, name=f"epoch{i}") for i in range(qps))
        acked_cur = Array(Signal(32, name=f"acked_cur{i}") for i in range(qps))
        acked_last = Array(Signal(32, name=f"acked_last{i}") for i in range(qps))
        md_done = Array(Signal(name=f"md_done{i}") for i in range(qps))
        qa_done = Array(Signal(name=f"qa_done{i}") for i in range(qps))
        w_ok = self.cfg_w_en & (self.cfg_w_addr < qps)
        qb = max(1, (qps - 1).bit_length())    # per-QP state is indexed by qp[:qb]

        u = Signal(NsccUpdate)
        q = u.qp[:qb]
        c = cfg_r.data
        m.d.comb += [cfg_r.addr.eq(q), cfg_w.en.eq(w_ok), cfg_w.addr.eq(self.cfg_w_addr),
                     cfg_w.data.eq(self.cfg_w_data)]
        qdelay = Signal(32)
        cw = Signal(32)
        p_eta = Signal(32)             # eta * acked
        p_fi = Signal(40)              # fi_bytes * acked
        achieved = Signal(32)
        lg_t = Signal(5)
        t_n = Signal(24)               # target << (23 - lg_t)
        tq_n = Signal(24)              # (target - qdelay) << (23 - lg_t) (when qdelay < target)
        q_lt = Signal()                # qdelay < target
        q_gt = Signal()                # qdelay > target
        fi_inc = Signal(33)            # saturated
        md_dec = Signal(32)
        pi_inc = Signal(24)
        qa = Signal(32)
        new = Signal(35)

        # one 24-bit left shifter (by 23 - lg_t): the target, then the queueing delay
        sh_in = Signal(24)
        sh_out = Signal(24)
        sh_amt = Signal(5)
        m.d.comb += [lg_t.eq(_floor_log2(m, c.target_delay_ns, 24, "lg_t_f")),
                     sh_amt.eq(23 - lg_t), sh_out.eq(sh_in << sh_amt)]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.upd.ready.eq(1)
                with m.If(self.upd.valid & (self.upd.payload.qp < qps)):
                    m.d.sync += u.eq(self.upd.payload)
                    m.next = "EPOCH"
            with m.State("EPOCH"):
                since = Signal(32)
                m.d.comb += since.eq(self.now_ns - epoch[q])
                rtt_q = Signal(33)
                m.d.comb += [rtt_q.eq(u.rtt_ns - c.base_rtt_ns), sh_in.eq(c.target_delay_ns)]
                m.d.sync += [
                    qdelay.eq(Mux(rtt_q[32], 0, rtt_q[:32])),
                    cw.eq(cwnd[q]),
                    p_eta.eq(c.eta_q8 * u.acked),
                    p_fi.eq(c.fi_bytes * u.acked),
                    t_n.eq(sh_out),
                ]
                # epoch roll (lazy): the new current/last byte counts, achieved = their maximum
                roll = Signal()
                two = Signal()
                d1 = Signal(26)
                d2 = Signal(26)
                m.d.comb += [d1.eq(since[:25] - c.base_rtt_ns), d2.eq(since[:25] - (c.base_rtt_ns << 1)),
                             roll.eq((since[25:] != 0) | ~d1[25]), two.eq((since[25:] != 0) | ~d2[25])]
                cur_new = Signal(32)
                last_new = Signal(32)
                m.d.comb += [cur_new.eq(Mux(roll, 0, acked_cur[q]) + u.acked),
                             last_new.eq(Mux(roll, Mux(two, 0, acked_cur[q]), acked_last[q]))]
                m.d.sync += [acked_cur[q].eq(cur_new), acked_last[q].eq(last_new),
                             achieved.eq(Mux(last_new > cur_new, last_new, cur_new))]
                with m.If(roll):
                    m.d.sync += [epoch[q].eq(self.now_ns), md_done[q].eq(0), qa_done[q].eq(0)]
                m.next = "DIST"
            with m.State("DIST"):
                # qdelay >= 2**(lg_t + 1) > target: the shifted delay would overflow
                ovf = Cat(qdelay[j] & _le_c(lg_t, j - 1) for j in range(1, 32)).any()
                m.d.comb += sh_in.eq(qdelay[:24])
                diff = Signal(25)
                m.d.comb += diff.eq(t_n - sh_out)
                m.d.sync += [tq_n.eq(diff[:24]), q_lt.eq(~ovf & ~diff[24] & (diff[:24] != 0)),
                             q_gt.eq(ovf | diff[24])]
                # fair increase: (fi_bytes * acked) >> floor(log2(cw)), saturated to 33 bits
                lg_cw = _floor_log2(m, cw, 32, "lg_cw_f")
                fi_ovf = Cat(p_fi[j] & _le_c(lg_cw, j - 33) for j in range(33, 40)).any()
                m.d.sync += [fi_inc.eq(Mux(fi_ovf, (1 << 33) - 1, p_fi >> lg_cw)),
                             md_dec.eq((cw * c.md_q8) >> 8),
                             qa.eq(Mux(achieved > c.min_cwnd, achieved, c.min_cwnd))]
                m.next = "PROD"
            with m.State("PROD"):
                m.d.sync += pi_inc.eq((p_eta * tq_n) >> 32)
                m.next = "CALC"
            with m.State("CALC"):
                inc = Signal(34)
                m.d.comb += inc.eq(fi_inc + Mux(q_lt, pi_inc, 0))
                with m.If(u.trim):
                    with m.If(c.qa_enable & ~qa_done[q]):
                        m.d.sync += [new.eq(Mux(qa < cw, qa, cw)), qa_done[q].eq(1),
                                     self.quick_adapts.eq(self.quick_adapts + 1)]
                    with m.Else():
                        m.d.sync += new.eq(cw)
                with m.Elif(u.ecn):
                    with m.If(q_gt & ~md_done[q]):
                        m.d.sync += [new.eq(cw - md_dec), md_done[q].eq(1),
                                     self.decreases.eq(self.decreases + 1)]
                    with m.Else():
                        m.d.sync += new.eq(cw)
                with m.Else():
                    m.d.sync += new.eq(cw + inc)
                m.next = "CLAMP"
            with m.State("CLAMP"):
                m.d.sync += cwnd[q].eq(Mux((new[32:] != 0) | (new[:32] > c.max_cwnd), c.max_cwnd,
                                           Mux(new[:32] < c.min_cwnd, c.min_cwnd, new)))
                m.next = "IDLE"

        with m.If(w_ok):
            d = self.cfg_w_data
            init = Mux(d.init_cwnd > d.max_cwnd, d.max_cwnd,
                       Mux(d.init_cwnd < d.min_cwnd, d.min_cwnd, d.init_cwnd))
            a = self.cfg_w_addr[:qb]
            m.d.sync += [cwnd[a].eq(init), epoch[a].eq(self.now_ns),
                         acked_cur[a].eq(0), acked_last[a].eq(0), md_done[a].eq(0),
                         qa_done[a].eq(0)]
        return m
