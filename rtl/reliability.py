"""Sender reliability: outstanding PSNs, SACK/NACK processing, ACK timeout, EV failover, probes.

MRC (the transport of the OCP MRC 1.0 specification) sprays every packet of a
transfer over the EVs of the QP's EV profile, so the sender must track each
PSN by itself and react per EV:

* an ACK acknowledges every PSN up to its cumulative PSN (BTH.PSN) and the
  PSNs set in its SACK bitmap (bit *i* = PSN ``base_psn + i``); when the
  last PSN of a message is passed by the cumulative ACK, a send completion
  is raised;
* a clean ACK (no ECN echo) on an EV makes it a recycled EV (REPS-style
  hint) and ends its ECN avoidance; an ECN echo steers traffic away from the
  entry for ``ecn_hold`` cycles and feeds congestion control;
* a trim NACK (flag TRIM_NACK) retransmits ``base_psn`` at once on another
  entry, without blaming the path, and makes NSCC quick-adapt;
* an ACK timeout (loss without trim) makes the entry ASSUMED_BAD at once
  (EV event ACK_TIMEOUT) -- unless that would leave fewer than
  ``ev_min_active`` GOOD entries in the profile (EV event MIN_ACTIVE, entry
  stays GOOD) -- and the PSN is retransmitted elsewhere;
* ASSUMED_BAD entries are probed every ``probe_interval`` cycles; a probe
  reply (flag PROBE_REPLY) makes the entry GOOD again (EV event PROBE_OK
  with the RTT).

Sources: IBTA Vol. 1 9.7 (RC PSN rules, AETH), OCP MRC 1.0 (EV states, EV
events, EV probes, ``ev_min_active``, ACK timeout = 1.024 us x 2^t with
retries then exponential backoff), mrcnic wire format v1 (``mrcnic.wire.MRCSack``),
UET 1.0 NSCC (:mod:`mrcnic.rtl.nscc`).
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from mrcnic import wire
from .layouts import (MAX_PATHS, MAX_QPS, Completion, EvCounterKind, EvEvent, EvEventReason,
                      EvState,
                      ProbeReq, RetxReq, RxKind, RxPacket, SentInfo)
from .nscc import Nscc, NsccConfig

__all__ = ["SenderReliability", "RelQpConfig", "RelQpParams", "SENT_FIFO_DEPTH", "WINDOW_MARGIN",
           "AVOID_SLOTS", "MAX_TIMEOUT_EXP"]

SENT_FIFO_DEPTH = 16   #: SentInfo records buffered (16 back-to-back packets are never refused)
WINDOW_MARGIN = 24     #: tx_ok needs fewer than ``window - WINDOW_MARGIN`` PSNs outstanding
AVOID_SLOTS = 8        #: entries that can be ECN-avoided at the same time (all QPs)
MAX_TIMEOUT_EXP = 20   #: ACK timeout exponent cap: at most 1.024 us x 2^20 (~1.07 s)
_RETX_DEPTH = 8
_CPL_DEPTH = 8
_EVENT_DEPTH = 8
_RECYCLE_DEPTH = 4
_M24 = (1 << 24) - 1


class RelQpConfig(data.Struct):
    """Per-QP configuration of :class:`SenderReliability` (writing it resets the QP).

    ``start_psn``: first PSN the QP sends.  ``profile_base``/``profile_count``:
    the QP's EV profile (path-table range, as in ``QpContext``).
    ``ev_min_active``: GOOD entries the profile keeps at least (OCP MRC).
    ``ack_timeout_exp`` t: ACK timeout 1.024 us x 2^t (0..20).  ``retry_count``:
    retransmissions of a PSN at the fixed timeout before exponential backoff.
    ``probe_interval``: cycles between probe rounds (0: no probes).
    ``ecn_hold``: cycles an ECN-echoed entry is avoided (0: never avoid).
    ``nscc``: the QP's congestion-control parameters.
    """
    start_psn: 24
    profile_base: 8
    profile_count: 9
    ev_min_active: 9
    ack_timeout_exp: 5
    retry_count: 4
    probe_interval: 24
    ecn_hold: 24
    nscc: NsccConfig


RelQpParams = type("RelQpParams", (data.Struct,), {
    "__module__": __name__,
    "__doc__": """:class:`RelQpConfig` without its ``nscc`` part (the same fields, bits and order):
    the register map's ``rel`` table; the ``cc`` table holds the NSCC part and the CSR glue
    (``rtl/csr_nic.py``) joins the two.""",
    "__annotations__": {name: field.shape for name, field in data.Layout.cast(RelQpConfig)
                        if name != "nscc"},
})


# One outstanding PSN, in 9-bit lanes (block-RAM byte enables) grouped by who writes them:
# lanes 0-4 {index, ev, msg_last, length[:4]}: new / retransmitted SentInfo;
# lanes 5-8 {send_ns, retries}: SentInfo, timeout; lanes 9-10 {length[4:], acked}: SACK.
_Slot = data.StructLayout({
    "index": 8, "ev": 32, "msg_last": 1, "length_lo": 4,
    "send_ns": 32, "retries": 4,
    "length_hi": 9, "acked": 1, "pad": 8,
})
_LANE = 9
_LANES_A, _LANES_B, _LANES_C = 0b00000011111, 0b00111100000, 0b11000000000

# pipeline operations on the slot memory
_OP_NONE, _OP_SENT, _OP_CUM, _OP_SACK, _OP_TRIM, _OP_SCAN = range(6)


def _gt_c(x, j):
    """``x > j`` for a constant ``j``, as an AND/OR network (no carry chain)."""
    if j < 0:
        return Const(1)
    if j >= (1 << len(x)) - 1:
        return Const(0)
    g = Const(0)
    for b in range(len(x)):
        g = (x[b] | g) if not (j >> b) & 1 else (x[b] & g)
    return g


def _lt_c(x, j):
    """``x < j`` for a constant ``j`` (no carry chain)."""
    return ~_gt_c(x, j - 1)


def _ge_c(x, j):
    """``x >= j`` for a constant ``j`` (no carry chain)."""
    return _gt_c(x, j - 1)


def _le_c(x, j):
    """``x <= j`` for a constant ``j`` (no carry chain)."""
    return ~_gt_c(x, j)


def _profile_mask(m, paths, base, count, name):
    """Bit i set when entry i is in [base, base + count)."""
    mask = Signal(paths, name=name)
    end = Signal(10, name=f"{name}_end")
    m.d.comb += end.eq(base + count)
    m.d.comb += mask.eq(Cat(_le_c(base, i) & _gt_c(end, i) for i in range(paths)))
    return mask


def _popcount(bits):
    """Number of set bits (balanced adder tree)."""
    terms = [bits[i] for i in range(len(bits))]
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]


class SenderReliability(wiring.Component):
    """MRC sender reliability with per-QP NSCC windows.

    **Outstanding PSNs.**  Each QP tracks the PSNs in ``[una, nxt)``
    (``una`` = oldest PSN not cumulatively acknowledged, ``nxt`` = next new
    PSN), modulo 2**24, in a ring of ``window`` slots (one block-RAM
    ``amaranth.lib.memory.Memory`` of ``qps * window`` x 99 bits in 9-bit
    lanes: entry index, EV, send time in ns, length, msg_last, acked, retry
    count; each write enables only the lanes it changes).  A new
    SentInfo (``retx`` = 0) must carry PSN ``nxt`` and find fewer than
    ``window`` PSNs outstanding, otherwise it is dropped and counted in
    ``sent_dropped``; a retransmission (``retx`` = 1) of an outstanding PSN
    updates its entry, EV and send time; other retransmissions are ignored.
    ``inflight`` (bytes) grows by the length of each new PSN and shrinks when
    a PSN is first acknowledged.

    **One engine.**  A two-stage read-modify-write pipeline owns the slot
    memory; each cycle it starts one operation, by priority: a SentInfo
    (from a FIFO of :data:`SENT_FIFO_DEPTH`, so 16 back-to-back SentInfos are
    always accepted; further ones see ``ready`` low only while the engine is
    busier than one SentInfo per cycle), a step of the current ACK, one PSN
    of the timeout scan.

    **ACK processing** (``ack`` stream, one RxPacket of kind ACK at a time;
    ``ready`` is high only between ACKs; other kinds, ``qp >= qps`` and
    never-configured QPs are dropped and counted in ``acks_dropped``): one
    cycle per PSN that the cumulative PSN passes (each not yet acknowledged
    PSN frees its bytes, each ``msg_last`` PSN raises one ``send_cpl``
    {qp, psn, has_imm 0}), then a walk of the SACK bitmap from bit 0 up to
    its highest set bit: one cycle per bit, a zero low byte skipped in one
    cycle, each set bit a SACK step (PSNs outside
    ``[una, nxt)`` and already acknowledged ones are ignored, so stale and
    duplicate ACKs are harmless), one cycle for a trim NACK, then one
    *finish* cycle:

    * the entry the ACK refers to is the entry of the newly acknowledged PSN
      whose recorded EV equals the echoed EV (the data packet that
      triggered the ACK); for a trim NACK the entry of ``base_psn``;
    * ECN_ECHO: ``ecn_echoes`` += 1; the entry is avoided (``avoid`` bit) for
      ``ecn_hold`` cycles in one of :data:`AVOID_SLOTS` slots (a repeated echo
      re-arms it; with all slots busy no new entry is avoided), never when
      no other GOOD, non-avoided entry of the profile would remain.  A slot
      holds its expiry cycle (one equality compare per slot against a cycle
      counter); expired slots release their entry one per cycle, so when
      several expire in the same cycle the later ones end a cycle later each;
    * no flag (clean ACK): ``clean_acks`` += 1; the entry's avoidance ends and
      its index is offered on ``recycle`` (hint; dropped when its 4-deep FIFO
      is full);
    * TRIM_NACK: ``trim_nacks`` += 1; if ``base_psn`` is outstanding and not
      acknowledged, ``RetxReq{psn=base_psn, avoid_index=its entry}``; the
      entry's state is not touched;
    * NSCC gets {acked bytes, RTT = now - send time of the newest newly
      acknowledged PSN, ecn, trim} when bytes were acknowledged or for a trim;
    * PROBE_REPLY: ``probe_replies`` += 1, then the QP's profile is searched
      (one entry per cycle) for ASSUMED_BAD entries (marked by this block)
      whose last-sent EV equals the echoed EV: each becomes GOOD
      (``st_en`` pulse) with an EvEvent PROBE_OK, ``rtt_ns = now_ns - ts``.

    **ACK timeout.**  The scan visits one outstanding PSN per cycle when no
    ACK is being processed.  A PSN not acknowledged for ``1024 << e`` ns,
    ``e = t + max(0, retries - retry_count + 1)`` capped at
    :data:`MAX_TIMEOUT_EXP` (``retries`` = its retransmissions so far, up to
    15), times out: its send time restarts, its retry count grows,
    ``timeouts`` += 1 and ``RetxReq{avoid_index = its entry}``.  Its entry, if
    GOOD (``eligible``) and not already marked, becomes ASSUMED_BAD (``st_en``
    pulse, EvEvent ACK_TIMEOUT) unless the profile's GOOD entries (eligible,
    in range, not marked) would drop below ``ev_min_active``: then EvEvent
    MIN_ACTIVE (state GOOD) and ``min_active_holds`` += 1.  Entries that are
    not eligible (DENIED, weight 0) are never changed.

    **Probes.**  Every ``probe_interval`` cycles the QP's profile is swept,
    one entry per cycle: each entry marked ASSUMED_BAD by this block yields
    ``ProbeReq{qp, index, ts = now_ns}``.

    **Latency.**  A SentInfo is recorded 1-2 cycles after its transfer.  An
    ACK is taken when the previous one is finished and occupies
    ``4 + passed PSNs + SACK walk + (trim)`` cycles (SACK walk: the bits up
    to the highest set one, less 7 per zero byte skipped) plus any cycle lost
    to a SentInfo, the NSCC unit (:data:`~mrcnic.rtl.nscc.UPDATE_CYCLES`)
    or a full output FIFO; a probe-reply search adds ``profile_count + 1``.
    A timeout is detected within one scan pass (at most ``qps * window``
    scan cycles; the scan pauses while an ACK is processed) after it
    expires, and acted on 3 cycles later (``st_en``, event and RetxReq in the
    same cycle).  ``avoid`` follows an ECN echo 2 cycles after the ACK's
    finish cycle.

    **Resources** (ECP5, ``qps=2, window=128, paths=32``): the slot ring and
    the per-entry EV table are block RAM; per-QP arithmetic is narrowed to
    what the window needs (outstanding count ``log2(window) + 1`` bits, bytes
    in flight ``log2(window) + 13`` bits, zero-extended on the 32-bit ports);
    the profile masks are computed once at the configuration write; constant
    comparisons are AND/OR networks rather than carry chains; the timeout
    test is ``age >> (10 + e) != 0`` (no shifter, no 32-bit comparator).

    Parameters
    ----------
    qps : int
        QPs, 1..8.
    window : int
        PSN slots per QP, a power of two, 64..4096.
    paths : int
        Path-table entries, 1..256.
    clk_ns : int
        Clock period in ns (time stamps and the ACK timeout are in ns).

    Attributes
    ----------
    sent : In(stream.Signature(SentInfo))
        One record per data packet handed to the frame builder (new or retransmitted).
    ack : In(stream.Signature(RxPacket))
        Received ACK/SACK/NACK/probe-reply packets (``psn`` = cumulative PSN, ``ack`` fields).
    eligible : In(paths)
        Path table's per-entry "GOOD and weight > 0" bitmap.
    cfg_w_en, cfg_w_addr, cfg_w_data : In(1), In(3), In(RelQpConfig)
        Per-QP configuration write: resets the QP (``una = nxt = start_psn``,
        nothing in flight, cwnd = ``nscc.init_cwnd``) and clears the
        ASSUMED_BAD marks of its profile range.  Write only while the QP has
        no traffic; it has priority over everything else in that cycle.
    cc_w_en, cc_w_addr, cc_w_data : In(1), In(3), In(NsccConfig)
        Live CC-profile change of a QP (OCP MRC CC profile): the NSCC
        parameters are replaced and the QP's window restarts at ``init_cwnd``;
        its PSN state is kept (unlike ``cfg_w_*``).  ``cfg_w_en`` wins in the
        same cycle.
    retx : Out(stream.Signature(RetxReq))
        PSNs to send again (8-deep FIFO; the engine waits while it is full).
    st_en, st_addr, st_state : Out(1), Out(8), Out(EvState)
        Path-table state update pulse (registered).
    event : Out(stream.Signature(EvEvent))
        EV events (8-deep FIFO; an event that finds it full is counted in ``events_dropped``).
    probe : Out(stream.Signature(ProbeReq))
        EV probes to send.
    avoid : Out(paths)
        ECN steering: entries the spray scheduler should skip (registered).
    recycle : Out(stream.Signature(8))
        Entry indices that just returned a clean ACK (hint).
    send_cpl : Out(stream.Signature(Completion))
        One per message whose last PSN is cumulatively acknowledged, in PSN order.
    tx_ok : Out(qps)
        Per QP: configured, ``inflight < cwnd`` and fewer than
        ``window - WINDOW_MARGIN`` PSNs outstanding (registered).  New packets
        only while set; retransmissions are always allowed.
    una : Out(data.ArrayLayout(24, qps))
        Per QP: oldest PSN not cumulatively acknowledged (the segmenter frees
        a message's descriptor once ``una`` has passed its last PSN).
    cwnd, inflight : Out(data.ArrayLayout(32, qps))
        NSCC window and bytes in flight per QP.
    ctl_st_en, ctl_st_addr : In(1), In(8)
        The controller set entry ``ctl_st_addr``'s state (EV_STATE_SET): this
        block forgets its ASSUMED_BAD mark, so it neither probes the entry nor
        sets it GOOD on a probe reply (a DENIED entry stays DENIED).
    stat_en, stat_index, stat_kind : Out(1), Out(8), Out(EvCounterKind)
        Per-EV counter pulse (registered, one per cycle at most): the entry of
        an ACK's finish cycle (TRIM for a trim NACK, else ECN_ECHO or
        CLEAN_ACK) or of an ACK timeout (TIMEOUT).  Feeds
        :class:`~mrcnic.rtl.ev_counters.EvCounterBank`.
    now_ns : Out(32)
        This block's time base (ns, wraps), the ``ts`` of probes.
    retransmissions, timeouts, trim_nacks, ecn_echoes, clean_acks, probes_sent,
    probe_replies, ev_events, events_dropped, min_active_holds, sent_dropped,
    acks_dropped : Out(32)
        Event counters (wrap around); ``retransmissions`` counts RetxReqs issued.
    """

    def __init__(self, qps: int = 2, window: int = 256, paths: int = MAX_PATHS, clk_ns: int = 8):
        if not 1 <= qps <= MAX_QPS:
            raise ValueError(f"qps must be 1..{MAX_QPS}, not {qps}")
        if window < 64 or window > 4096 or window & (window - 1):
            raise ValueError(f"window must be a power of two in 64..4096, not {window}")
        if not 1 <= paths <= MAX_PATHS:
            raise ValueError(f"paths must be 1..{MAX_PATHS}, not {paths}")
        if not 1 <= clk_ns <= 1000:
            raise ValueError(f"clk_ns must be 1..1000, not {clk_ns}")
        self.qps, self.window, self.paths, self.clk_ns = qps, window, paths, clk_ns
        self._counters = ["retransmissions", "timeouts", "trim_nacks", "ecn_echoes", "clean_acks",
                          "probes_sent", "probe_replies", "ev_events", "events_dropped",
                          "min_active_holds", "sent_dropped", "acks_dropped"]
        ports = {
            "sent": In(stream.Signature(SentInfo)),
            "ack": In(stream.Signature(RxPacket)),
            "eligible": In(paths),
            "cfg_w_en": In(1),
            "cfg_w_addr": In(3),
            "cfg_w_data": In(RelQpConfig),
            "cc_w_en": In(1),
            "cc_w_addr": In(3),
            "cc_w_data": In(NsccConfig),
            "retx": Out(stream.Signature(RetxReq)),
            "st_en": Out(1),
            "st_addr": Out(8),
            "st_state": Out(EvState),
            "event": Out(stream.Signature(EvEvent)),
            "probe": Out(stream.Signature(ProbeReq)),
            "avoid": Out(paths),
            "recycle": Out(stream.Signature(8)),
            "send_cpl": Out(stream.Signature(Completion)),
            "tx_ok": Out(qps),
            "cwnd": Out(data.ArrayLayout(32, qps)),
            "inflight": Out(data.ArrayLayout(32, qps)),
            "una": Out(data.ArrayLayout(24, qps)),
            "ctl_st_en": In(1),
            "ctl_st_addr": In(8),
            "stat_en": Out(1),
            "stat_index": Out(8),
            "stat_kind": Out(EvCounterKind),
            "now_ns": Out(32),
        }
        ports.update({name: Out(32) for name in self._counters})
        super().__init__(ports)

    # ------------------------------------------------------------------
    def elaborate(self, platform):
        m = Module()
        qps, window, paths = self.qps, self.window, self.paths
        wbits = exact_log2(window)
        obits = wbits + 1                  # outstanding PSNs: 0..window
        fbits = wbits + 13                 # bytes in flight < window * 2**13
        ibits = max(1, (paths - 1).bit_length())
        qbits = (qps - 1).bit_length()
        qb = max(1, qbits)                 # per-QP tables are indexed by qp[:qb] (range-checked)

        def inc(counter, cond=None):
            if cond is None:
                m.d.sync += counter.eq(counter + 1)
            else:
                with m.If(cond):
                    m.d.sync += counter.eq(counter + 1)

        def onehot(index, name):
            """paths-bit one-hot of an 8-bit entry index (0 when index >= paths)."""
            v = Signal(paths, name=name)
            m.d.comb += v.eq(Mux(_lt_c(index, paths), Const(1, paths) << index[:ibits], 0))
            return v

        now = Signal(32)
        m.d.sync += now.eq(now + self.clk_ns)
        m.d.comb += self.now_ns.eq(now)
        cyc = Signal(24)                   # cycle count: ECN-avoid expiries
        cyc_next = Signal(24)
        m.d.comb += cyc_next.eq(cyc + 1)
        m.d.sync += cyc.eq(cyc_next)
        m.d.sync += self.stat_en.eq(0)

        def stat(index, kind):
            m.d.sync += [self.stat_en.eq(1), self.stat_index.eq(index), self.stat_kind.eq(kind)]

        # ---- NSCC ------------------------------------------------------
        m.submodules.nscc = nscc = Nscc(qps)
        m.d.comb += [
            # a full QP configuration, or a live CC-profile change (cc_w_*: no QP reset)
            nscc.cfg_w_en.eq(self.cfg_w_en | self.cc_w_en),
            nscc.cfg_w_addr.eq(Mux(self.cfg_w_en, self.cfg_w_addr, self.cc_w_addr)),
            nscc.cfg_w_data.eq(Mux(self.cfg_w_en, self.cfg_w_data.nscc, self.cc_w_data)),
            nscc.now_ns.eq(now),
            self.cwnd.eq(nscc.cwnd),
        ]

        # ---- per-QP state -------------------------------------------------
        cfg = Array(Signal(RelQpParams, name=f"cfg{i}") for i in range(qps))
        pmq = Array(Signal(paths, name=f"pmask{i}") for i in range(qps))   # profile masks
        qvalid = Array(Signal(name=f"qvalid{i}") for i in range(qps))
        una = Array(Signal(24, name=f"una{i}") for i in range(qps))
        nxt = Array(Signal(24, name=f"nxt{i}") for i in range(qps))
        outst = Array(Signal(obits, name=f"outst{i}") for i in range(qps))   # nxt - una
        infl = Array(Signal(fbits, name=f"inflight{i}") for i in range(qps))
        for i in range(qps):
            cw = nscc.cwnd[i]
            m.d.comb += [self.una[i].eq(una[i]), self.inflight[i].eq(infl[i])]
            m.d.sync += self.tx_ok[i].eq(qvalid[i] & ((cw[fbits:] != 0) | (infl[i] < cw[:fbits]))
                                         & _lt_c(outst[i], window - WINDOW_MARGIN))

        bad = Signal(paths)          # entries this block set ASSUMED_BAD
        bad_set = Signal(paths)
        bad_clr = Signal(paths)
        m.d.sync += bad.eq((bad & ~bad_clr) | bad_set)

        # ---- memories ---------------------------------------------------
        m.submodules.slots = slots = memory.Memory(shape=_Slot.size, depth=qps * window, init=[])
        sl_w = slots.write_port(granularity=_LANE)
        sl_r = slots.read_port(transparent_for=(sl_w,))
        sl_wd = Signal(_Slot)
        m.d.comb += sl_w.data.eq(sl_wd)
        m.submodules.evs = evs = memory.Memory(shape=32, depth=paths, init=[],
                                               attrs={"ram_style": "block"})
        ev_w = evs.write_port()
        ev_r = evs.read_port()


        def slot_addr(qp, psn):
            return Cat(psn[:wbits], qp[:qbits]) if qps > 1 else psn[:wbits]

        # ---- output FIFOs ---------------------------------------------------
        def out_fifo(name, port, layout_bits, depth):
            f = fifo.SyncFIFO(width=layout_bits, depth=depth)
            m.submodules[name] = f
            m.d.comb += [port.payload.eq(f.r_data), port.valid.eq(f.r_rdy), f.r_en.eq(port.ready)]
            return f

        retx_f = out_fifo("retx_fifo", self.retx, RetxReq.as_shape().size, _RETX_DEPTH)
        ev_f = out_fifo("event_fifo", self.event, EvEvent.as_shape().size, _EVENT_DEPTH)
        rc_f = out_fifo("recycle_fifo", self.recycle, 8, _RECYCLE_DEPTH)
        # completions: only {qp, psn} are stored (has_imm = imm = 0)
        m.submodules.cpl_fifo = cpl_f = fifo.SyncFIFO(width=27, depth=_CPL_DEPTH)
        m.d.comb += [self.send_cpl.payload.qp.eq(cpl_f.r_data[:3]),
                     self.send_cpl.payload.psn.eq(cpl_f.r_data[3:]),
                     self.send_cpl.valid.eq(cpl_f.r_rdy), cpl_f.r_en.eq(self.send_cpl.ready)]

        event_fields = Signal(EvEvent)
        event_push = Signal()
        m.d.comb += [ev_f.w_data.eq(event_fields), ev_f.w_en.eq(event_push)]
        inc(self.ev_events, event_push)
        inc(self.events_dropped, event_push & ~ev_f.w_rdy)

        retx_data = Signal(RetxReq)
        retx_push = Signal()
        m.d.comb += [retx_f.w_data.eq(retx_data), retx_f.w_en.eq(retx_push)]
        inc(self.retransmissions, retx_push)

        m.d.sync += self.st_en.eq(0)

        # ---- SentInfo FIFO --------------------------------------------------
        m.submodules.sent_fifo = sf = fifo.SyncFIFO(
            width=SentInfo.as_shape().size, depth=SENT_FIFO_DEPTH)
        m.d.comb += [sf.w_data.eq(self.sent.payload), sf.w_en.eq(self.sent.valid),
                     self.sent.ready.eq(sf.w_rdy)]
        sent_head = SentInfo(sf.r_data)

        # ---- pipeline registers ---------------------------------------------
        s1_op = Signal(range(6))
        s1_qp = Signal(3)
        s1_psn = Signal(24)
        s1_sent = Signal(SentInfo)
        s0_op = Signal(range(6))
        s0_qp = Signal(3)
        s0_psn = Signal(24)
        m.d.comb += sl_r.addr.eq(slot_addr(s0_qp, s0_psn))
        m.d.sync += [s1_op.eq(s0_op), s1_qp.eq(s0_qp), s1_psn.eq(s0_psn), s1_sent.eq(sent_head)]
        s1_jobop = (s1_op == _OP_CUM) | (s1_op == _OP_SACK) | (s1_op == _OP_TRIM)

        # ---- ACK job state ----------------------------------------------------
        job = Signal(RxPacket)
        job_qp = job.qp
        cum_ptr = Signal(24)
        cum_left = Signal(obits)
        sack_rem = Signal(64)
        sack_pos = Signal(6)
        newly = Signal(fbits)
        last_send = Signal(32)
        hit_v = Signal()
        hit_idx = Signal(8)
        trim_v = Signal()
        trim_idx = Signal(8)
        flags = job.ack.flags
        f_ecn = flags & wire.SACK_ECN_ECHO != 0
        f_trim = flags & wire.SACK_TRIM_NACK != 0
        f_probe = flags & wire.SACK_PROBE_REPLY != 0

        # ---- timeout action state ---------------------------------------------
        to_pending = Signal()
        to_wait = Signal(2)
        to = Signal(RetxReq)
        to_ev = Signal(32)
        srch_busy = Signal()

        # ---- profile mask / GOOD count (for the timeout action or the finishing ACK) ----
        mask_qp = Signal(3)
        m.d.comb += mask_qp.eq(Mux(to_pending, to.qp, job_qp))
        pmask = Signal(paths)
        m.d.comb += pmask.eq(pmq[mask_qp[:qb]])
        good = Signal(paths)
        m.d.comb += good.eq(self.eligible & ~bad & pmask)
        good_cnt = Signal(range(paths + 2))
        m.d.sync += good_cnt.eq(_popcount(good))

        # ---- ACK job: IDLE -> START -> CUM -> SACK -> TRIM -> WAIT -> FINISH [-> SEARCH] ----
        trim_taken = Signal()
        fin_go = Signal()
        srch_done = Signal()
        with m.FSM(name="ackjob") as ackjob:
            with m.State("IDLE"):
                m.d.comb += self.ack.ready.eq(~self.cfg_w_en)
                with m.If(self.ack.valid & ~self.cfg_w_en):
                    p = self.ack.payload
                    with m.If((p.kind == RxKind.ACK) & _lt_c(p.qp, qps) & qvalid[p.qp[:qb]]):
                        m.d.sync += [job.eq(p), sack_rem.eq(p.ack.bitmap), sack_pos.eq(0)]
                        m.next = "START"
                    with m.Else():
                        inc(self.acks_dropped)
            with m.State("START"):
                # nothing is issued in this state: start once the pipeline is empty
                with m.If(s1_op == _OP_NONE):
                    q = job_qp[:qb]
                    d = Signal(24)
                    m.d.comb += d.eq(job.psn + 1 - una[q])
                    m.d.sync += [
                        cum_ptr.eq(una[q]),
                        cum_left.eq(Mux((d != 0) & (d[obits:] == 0) & (d[:obits] <= outst[q]),
                                        d[:obits], 0)),
                        newly.eq(0), hit_v.eq(0), trim_v.eq(0),
                    ]
                    m.next = "CUM"
            with m.State("CUM"):
                with m.If(cum_left == 0):
                    m.next = "SACK"
            with m.State("SACK"):
                with m.If(sack_rem == 0):
                    m.next = "TRIM"
            with m.State("TRIM"):
                with m.If(trim_taken):
                    m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(~s1_jobop):
                    m.next = "FINISH"
            with m.State("FINISH"):
                with m.If(fin_go):
                    with m.If(f_probe):
                        m.next = "SEARCH"
                    with m.Else():
                        m.next = "IDLE"
            with m.State("SEARCH"):
                with m.If(srch_done):
                    m.next = "IDLE"

        in_cum = ackjob.ongoing("CUM") & (cum_left != 0)
        in_sack = ackjob.ongoing("SACK") & (sack_rem != 0)
        in_trim = ackjob.ongoing("TRIM")
        m.d.comb += srch_busy.eq(ackjob.ongoing("SEARCH"))
        # SACK walk: bit 0 of sack_rem is PSN base_psn + sack_pos; a zero low byte is skipped
        # in one cycle, otherwise the bitmap moves by one bit (issuing a SACK op if it was set)
        sack_skip = sack_rem[:8] == 0

        # ---- stage 0: choose the operation of this cycle -----------------------
        scan_q = Signal(range(qps))
        scan_off = Signal(obits)
        with m.If(self.cfg_w_en):
            m.d.comb += s0_op.eq(_OP_NONE)
        with m.Elif(sf.r_rdy & ~ackjob.ongoing("START")):
            m.d.comb += [s0_op.eq(_OP_SENT), s0_qp.eq(sent_head.qp), s0_psn.eq(sent_head.psn),
                         sf.r_en.eq(1)]
        with m.Elif(in_cum & _lt_c(cpl_f.level, _CPL_DEPTH - 2)):
            m.d.comb += [s0_op.eq(_OP_CUM), s0_qp.eq(job_qp), s0_psn.eq(cum_ptr)]
            m.d.sync += [cum_ptr.eq(cum_ptr + 1), cum_left.eq(cum_left - 1)]
        with m.Elif(in_sack):
            with m.If(sack_skip):
                m.d.sync += [sack_rem.eq(sack_rem >> 8), sack_pos.eq(sack_pos + 8)]
            with m.Else():
                m.d.sync += [sack_rem.eq(sack_rem >> 1), sack_pos.eq(sack_pos + 1)]
                with m.If(sack_rem[0]):
                    m.d.comb += [s0_op.eq(_OP_SACK), s0_qp.eq(job_qp),
                                 s0_psn.eq(job.ack.base_psn + sack_pos)]
        with m.Elif(in_trim):
            m.d.comb += trim_taken.eq(1)
            with m.If(f_trim):
                m.d.comb += [s0_op.eq(_OP_TRIM), s0_qp.eq(job_qp), s0_psn.eq(job.ack.base_psn)]
        with m.Elif(ackjob.ongoing("IDLE") & ~to_pending):
            m.d.comb += [s0_op.eq(_OP_SCAN), s0_qp.eq(scan_q), s0_psn.eq(una[scan_q] + scan_off)]
            last_q = scan_q == qps - 1
            with m.If((scan_off + 1 >= outst[scan_q]) | ~qvalid[scan_q]):
                m.d.sync += [scan_off.eq(0), scan_q.eq(Mux(last_q, 0, scan_q + 1))]
            with m.Else():
                m.d.sync += scan_off.eq(scan_off + 1)

        # ---- stage 1: execute ------------------------------------------------
        slot = _Slot(sl_r.data)
        slot_len = Cat(slot.length_lo, slot.length_hi)
        s1_cfg = cfg[s1_qp[:qb]]
        q1 = s1_qp
        q1i = s1_qp[:qb]
        off1 = Signal(24)
        m.d.comb += off1.eq(s1_psn - una[q1i])
        in_range = Signal()
        m.d.comb += in_range.eq(_lt_c(q1, qps) & qvalid[q1i] & (off1[obits:] == 0)
                                & (off1[:obits] < outst[q1i]))
        # slot write data: every field that a write's lanes carry but it does not change
        # keeps its read value
        m.d.comb += [sl_w.addr.eq(slot_addr(q1, s1_psn)),
                     sl_wd.index.eq(s1_sent.index), sl_wd.ev.eq(s1_sent.ev),
                     sl_wd.msg_last.eq(slot.msg_last), sl_wd.length_lo.eq(slot.length_lo),
                     sl_wd.send_ns.eq(now), sl_wd.retries.eq(slot.retries),
                     sl_wd.length_hi.eq(slot.length_hi), sl_wd.acked.eq(0),
                     ev_w.addr.eq(s1_sent.index), ev_w.data.eq(s1_sent.ev)]
        age = Signal(32)
        m.d.comb += age.eq(now - slot.send_ns)
        extra = Signal(5)
        m.d.comb += extra.eq(Mux(slot.retries >= s1_cfg.retry_count,
                                 slot.retries - s1_cfg.retry_count + 1, 0))
        texp = Signal(6)
        m.d.comb += texp.eq(s1_cfg.ack_timeout_exp + extra)
        # age >= 1024 << min(texp, MAX_TIMEOUT_EXP): a bit of age at 10 + min(texp, ...) or above
        expired = Signal()
        m.d.comb += expired.eq(Cat(age[10 + k] & _le_c(texp, k) if k < MAX_TIMEOUT_EXP
                                   else age[10 + k] for k in range(22)).any())
        m.d.comb += [cpl_f.w_data.eq(Cat(q1, s1_psn))]

        infl_add = Signal()
        infl_sub = Signal()
        infl_len = Signal(13)
        m.d.comb += infl_len.eq(Mux(infl_add, s1_sent.length, slot_len))
        with m.If(infl_add | infl_sub):
            m.d.sync += infl[q1i].eq(infl[q1i] + Mux(infl_add, infl_len, -infl_len))

        def newly_acked():
            m.d.comb += infl_sub.eq(1)
            m.d.sync += [newly.eq(newly + slot_len), last_send.eq(slot.send_ns)]
            with m.If(slot.ev == job.ack.ev):
                m.d.sync += [hit_v.eq(1), hit_idx.eq(slot.index)]

        with m.Switch(s1_op):
            with m.Case(_OP_SENT):
                si = s1_sent
                m.d.comb += ev_w.en.eq(_lt_c(q1, qps) & _lt_c(si.index, paths))
                with m.If(~si.retx):
                    with m.If(_lt_c(q1, qps) & qvalid[q1i] & (s1_psn == nxt[q1i])
                              & ~outst[q1i][wbits]):
                        m.d.comb += [sl_w.en.eq(_LANES_A | _LANES_B | _LANES_C),
                                     sl_wd.length_lo.eq(si.length[:4]),
                                     sl_wd.length_hi.eq(si.length[4:]),
                                     sl_wd.msg_last.eq(si.msg_last), sl_wd.retries.eq(0),
                                     infl_add.eq(1)]
                        m.d.sync += [nxt[q1i].eq(nxt[q1i] + 1), outst[q1i].eq(outst[q1i] + 1)]
                    with m.Else():
                        inc(self.sent_dropped)
                with m.Elif(in_range):
                    m.d.comb += sl_w.en.eq(_LANES_A | _LANES_B)
            with m.Case(_OP_CUM):
                with m.If(in_range & (off1 == 0)):
                    m.d.sync += [una[q1i].eq(s1_psn + 1), outst[q1i].eq(outst[q1i] - 1)]
                    with m.If(~slot.acked):
                        newly_acked()
                    m.d.comb += cpl_f.w_en.eq(slot.msg_last)
            with m.Case(_OP_SACK):
                with m.If(in_range & ~slot.acked):
                    m.d.comb += [sl_w.en.eq(_LANES_C), sl_wd.acked.eq(1)]
                    newly_acked()
            with m.Case(_OP_TRIM):
                with m.If(in_range & ~slot.acked):
                    m.d.sync += [trim_v.eq(1), trim_idx.eq(slot.index)]
            with m.Case(_OP_SCAN):
                with m.If(in_range & ~slot.acked & expired & to_pending):
                    # the timeout action is busy: revisit this PSN next (scan stays in order)
                    m.d.sync += [scan_q.eq(q1), scan_off.eq(off1)]
                with m.If(in_range & ~slot.acked & expired & ~to_pending):
                    m.d.comb += [sl_w.en.eq(_LANES_B),
                                 sl_wd.retries.eq(Mux(slot.retries == 15, 15, slot.retries + 1))]
                    m.d.sync += [to_pending.eq(1), to_wait.eq(0), to.qp.eq(q1), to.psn.eq(s1_psn),
                                 to.avoid_index.eq(slot.index), to_ev.eq(slot.ev)]

        # ---- one-hot of the timeout action's / the probe-reply search's entry --------
        sel_idx = Signal(8)
        sel_bit = onehot(sel_idx, "sel_bit")

        # ---- timeout action (waits 2 cycles for the registered GOOD count) -------
        with m.If(to_pending & (to_wait != 3)):
            m.d.sync += to_wait.eq(to_wait + 1)
        with m.If(to_pending & to_wait[1] & ~srch_busy & retx_f.w_rdy):
            idx = to.avoid_index
            m.d.comb += [retx_push.eq(1), retx_data.eq(to), sel_idx.eq(idx)]
            m.d.sync += to_pending.eq(0)
            inc(self.timeouts)
            stat(idx, EvCounterKind.TIMEOUT)
            in_prof = (sel_bit & pmask).any()
            with m.If((sel_bit & self.eligible & ~bad).any()):
                m.d.comb += [event_push.eq(1), event_fields.index.eq(idx),
                             event_fields.ev.eq(to_ev)]
                with m.If(good_cnt < cfg[to.qp[:qb]].ev_min_active + in_prof):
                    m.d.comb += [event_fields.state.eq(EvState.GOOD),
                                 event_fields.reason.eq(EvEventReason.MIN_ACTIVE)]
                    inc(self.min_active_holds)
                with m.Else():
                    m.d.comb += [event_fields.state.eq(EvState.ASSUMED_BAD),
                                 event_fields.reason.eq(EvEventReason.ACK_TIMEOUT),
                                 bad_set.eq(sel_bit)]
                    m.d.sync += [self.st_en.eq(1), self.st_addr.eq(idx),
                                 self.st_state.eq(EvState.ASSUMED_BAD)]

        # ---- ECN avoidance slots: entry, expiry cycle, expired flag ------------------
        av_v = Signal(AVOID_SLOTS)
        av_i = [Signal(8, name=f"av_i{i}") for i in range(AVOID_SLOTS)]
        av_x = [Signal(24, name=f"av_x{i}") for i in range(AVOID_SLOTS)]
        av_p = Signal(AVOID_SLOTS)             # expired, entry bit not yet cleared
        avb = Signal(paths)                    # entries avoided (one per valid slot)
        avb_set = Signal(paths)
        avb_clr = Signal(paths)
        av_set_p = Signal(AVOID_SLOTS)
        av_clr_v = Signal(AVOID_SLOTS)
        m.d.sync += [avb.eq((avb & ~avb_clr) | avb_set), self.avoid.eq(avb)]
        for i in range(AVOID_SLOTS):
            with m.If(av_v[i] & (cyc_next == av_x[i])):
                m.d.comb += av_set_p[i].eq(1)
        # clear one expired slot per cycle (lowest first)
        exp_i = Signal(range(AVOID_SLOTS))
        for i in reversed(range(AVOID_SLOTS)):
            with m.If(av_p[i]):
                m.d.comb += exp_i.eq(i)
        exp_idx = Signal(8)
        m.d.comb += exp_idx.eq(Array(av_i)[exp_i])
        exp_bit = onehot(exp_idx, "exp_bit")
        with m.If(av_p.any()):
            m.d.comb += [avb_clr.eq(exp_bit), av_clr_v.eq(1 << exp_i)]
        av_hit = Signal(AVOID_SLOTS)
        m.d.comb += av_hit.eq(Cat(av_v[i] & (av_i[i] == hit_idx) for i in range(AVOID_SLOTS)))
        av_free = Signal(range(AVOID_SLOTS + 1))
        m.d.comb += av_free.eq(AVOID_SLOTS)
        for i in reversed(range(AVOID_SLOTS)):
            with m.If(~av_v[i]):
                m.d.comb += av_free.eq(i)
        av_arm = Signal(AVOID_SLOTS)           # (re)armed this cycle
        av_end = Signal(AVOID_SLOTS)           # ended by a clean ACK
        hold = Signal(24)
        m.d.sync += [av_v.eq((av_v & ~av_clr_v & ~av_end) | av_arm),
                     av_p.eq(((av_p | av_set_p) & ~av_clr_v & ~av_end & ~av_arm)
                             | Mux(hold == 1, av_arm, 0))]
        for i in range(AVOID_SLOTS):
            with m.If(av_arm[i]):
                # the entry's bit falls ecn_hold cycles after it rose
                m.d.sync += av_x[i].eq(cyc + hold)

        # ---- finish the ACK ------------------------------------------------------
        need_upd = (newly != 0) | f_trim
        upd = nscc.upd
        m.d.comb += [upd.payload.qp.eq(job_qp), upd.payload.acked.eq(newly),
                     upd.payload.rtt_ns.eq(now - last_send),
                     upd.payload.ecn.eq(f_ecn), upd.payload.trim.eq(f_trim)]
        m.d.comb += fin_go.eq(ackjob.ongoing("FINISH") & ~to_pending
                              & (upd.ready | ~need_upd) & (retx_f.w_rdy | ~trim_v))
        hit_bit = onehot(hit_idx, "hit_bit")
        fcfg = cfg[job_qp[:qb]]
        m.d.comb += hold.eq(fcfg.ecn_hold)
        with m.If(fin_go):
            m.d.comb += upd.valid.eq(need_upd)
            with m.If(trim_v):
                m.d.comb += [retx_push.eq(1), retx_data.qp.eq(job_qp),
                             retx_data.psn.eq(job.ack.base_psn), retx_data.avoid_index.eq(trim_idx)]
            inc(self.trim_nacks, f_trim)
            inc(self.probe_replies, f_probe)
            with m.If(trim_v):
                stat(trim_idx, EvCounterKind.TRIM)
            with m.Elif(hit_v & f_ecn):
                stat(hit_idx, EvCounterKind.ECN_ECHO)
            with m.Elif(hit_v & ~f_trim & ~f_probe):
                stat(hit_idx, EvCounterKind.CLEAN_ACK)
            with m.If(f_ecn):
                inc(self.ecn_echoes)
                others = (good & ~avb & ~hit_bit).any()
                with m.If(hit_v & (hold != 0)):
                    with m.If(av_hit.any()):
                        m.d.comb += [av_arm.eq(av_hit), avb_set.eq(hit_bit)]
                    with m.Elif(others & (av_free != AVOID_SLOTS)):
                        m.d.comb += [av_arm.eq(1 << av_free), avb_set.eq(hit_bit)]
                        for i in range(AVOID_SLOTS):
                            with m.If(av_free == i):
                                m.d.sync += av_i[i].eq(hit_idx)
            with m.Elif(~f_trim & ~f_probe):
                inc(self.clean_acks)
                with m.If(hit_v):
                    m.d.comb += [av_end.eq(av_hit), avb_clr.eq(hit_bit | Mux(av_p.any(), exp_bit, 0))]
                    m.d.comb += [rc_f.w_en.eq(1), rc_f.w_data.eq(hit_idx)]

        # ---- probe reply: search the profile for the echoed EV --------------------
        srch_i = Signal(9)
        srch_v = Signal()
        srch_idx = Signal(9)
        scfg = cfg[job_qp[:qb]]
        s_idx = Signal(10)
        m.d.comb += [s_idx.eq(scfg.profile_base + srch_i), ev_r.addr.eq(s_idx)]
        srch_clr = Signal(paths)
        with m.If(fin_go):
            m.d.sync += [srch_i.eq(0), srch_v.eq(0)]
        with m.If(srch_busy):
            more = (srch_i < scfg.profile_count) & _lt_c(s_idx, paths)
            m.d.sync += [srch_v.eq(more), srch_idx.eq(s_idx)]
            with m.If(more):
                m.d.sync += srch_i.eq(srch_i + 1)
            m.d.comb += [srch_done.eq(~more & ~srch_v), sel_idx.eq(srch_idx)]
            with m.If(srch_v & (ev_r.data == job.ack.ev) & (sel_bit & bad).any()):
                m.d.comb += [event_push.eq(1), event_fields.index.eq(srch_idx),
                             event_fields.ev.eq(job.ack.ev),
                             event_fields.state.eq(EvState.GOOD),
                             event_fields.reason.eq(EvEventReason.PROBE_OK),
                             event_fields.rtt_ns.eq(now - job.ack.ts),
                             srch_clr.eq(sel_bit)]
                m.d.sync += [self.st_en.eq(1), self.st_addr.eq(srch_idx),
                             self.st_state.eq(EvState.GOOD)]

        # ---- probes -----------------------------------------------------------
        pr_due = Signal(qps)
        pr_timer = Array(Signal(24, name=f"pr_timer{i}") for i in range(qps))
        pr_q = Signal(range(qps))
        pr_i = Signal(9)
        pcfg = cfg[pr_q]
        p_idx = Signal(10)
        m.d.comb += p_idx.eq(pcfg.profile_base + pr_i)
        with m.If(self.probe.ready):
            m.d.sync += self.probe.valid.eq(0)
        can = ~self.probe.valid | self.probe.ready
        pr_clear = Signal(qps)
        with m.FSM(name="prober"):
            with m.State("IDLE"):
                for i in reversed(range(qps)):
                    with m.If(pr_due[i]):
                        m.d.sync += [pr_q.eq(i), pr_i.eq(0)]
                        m.d.comb += pr_clear.eq(1 << i)
                        m.next = "SWEEP"
            with m.State("SWEEP"):
                with m.If((pr_i >= pcfg.profile_count) | _ge_c(p_idx, paths)):
                    m.next = "IDLE"
                with m.Elif(can):
                    m.d.sync += pr_i.eq(pr_i + 1)
                    with m.If(bad.bit_select(p_idx[:ibits], 1)):
                        m.d.sync += [self.probe.valid.eq(1), self.probe.payload.qp.eq(pr_q),
                                     self.probe.payload.index.eq(p_idx),
                                     self.probe.payload.ts.eq(now)]
                        inc(self.probes_sent)
        pr_set = Signal(qps)
        for i in range(qps):
            with m.If(qvalid[i] & (cfg[i].probe_interval != 0)):
                with m.If(pr_timer[i] == 0):
                    m.d.sync += pr_timer[i].eq(cfg[i].probe_interval - 1)
                    m.d.comb += pr_set[i].eq(1)
                with m.Else():
                    m.d.sync += pr_timer[i].eq(pr_timer[i] - 1)
        m.d.sync += pr_due.eq((pr_due & ~pr_clear) | pr_set)

        # ---- configuration write (wins over everything above) ------------------------
        w_ok = self.cfg_w_en & _lt_c(self.cfg_w_addr, qps)
        wd = self.cfg_w_data
        wmask = _profile_mask(m, paths, wd.profile_base, wd.profile_count, "wmask")
        ctl_clr = Mux(self.ctl_st_en, onehot(self.ctl_st_addr, "ctl_bit"), 0)
        m.d.comb += bad_clr.eq(srch_clr | Mux(w_ok, wmask, 0) | ctl_clr)
        with m.If(w_ok):
            a = self.cfg_w_addr[:qb]
            m.d.sync += [cfg[a].eq(wd.as_value()[:RelQpParams.as_shape().size]),
                         pmq[a].eq(wmask), qvalid[a].eq(1), una[a].eq(wd.start_psn),
                         nxt[a].eq(wd.start_psn), outst[a].eq(0), infl[a].eq(0),
                         pr_timer[a].eq(wd.probe_interval)]
        return m
