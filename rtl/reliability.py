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
from .layouts import (MAX_PATHS, Completion, EvCounterKind, EvEvent, EvEventReason,
                      EvState,
                      ProbeReq, RetxReq, RxKind, RxPacket, SentInfo)
from .nscc import Nscc, NsccConfig
from .params import NicParams, check_clk_ns, check_paths, check_qps, check_window, param

__all__ = ["SenderReliability", "RelQpConfig", "RelQpParams", "SENT_FIFO_DEPTH", "WINDOW_MARGIN",
           "AVOID_SLOTS", "MAX_TIMEOUT_EXP"]

SENT_FIFO_DEPTH = 2    #: SentInfo records held at the input (two pipeline registers, no FIFO)
WINDOW_MARGIN = 24     #: tx_ok needs fewer than ``window - WINDOW_MARGIN`` PSNs outstanding
AVOID_SLOTS = 8        #: entries that can be ECN-avoided at the same time (all QPs)
MAX_TIMEOUT_EXP = 20   #: ACK timeout exponent cap: at most 1.024 us x 2^20 (~1.07 s)
_RETX_DEPTH = 8
_CPL_DEPTH = 16
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


# One outstanding PSN, in 9-bit lanes (block-RAM byte enables) grouped by who writes them, so
# that a SentInfo (new or retransmitted) never needs the slot's old contents:
# lanes 0-4 {index, ev}: SentInfo; lanes 5-8 {send_ns}: SentInfo, timeout;
# lane 9 {retries, texp}: new SentInfo, timeout; lanes 10-11 {length, msg_last, acked,
# trimmed}: new SentInfo, SACK, trim NACK, a retransmission of a trimmed PSN.  ``texp`` is the
# PSN's current ACK-timeout exponent (capped); ``trimmed``: its last copy was trimmed and its
# bytes are not in ``inflight`` until a new copy is sent.
_Slot = data.StructLayout({
    "index": 8, "ev": 32, "pad_a": 5,
    "send_ns": 32, "pad_t": 4,
    "retries": 4, "texp": 5,
    "length": 13, "msg_last": 1, "acked": 1, "trimmed": 1, "pad_l": 2,
})
_LANE = 9
_LANES_ID, _LANES_TS, _LANES_RT, _LANES_LA = 0b11111, 0b1111 << 5, 1 << 9, 0b11 << 10
_LANES_ALL = (1 << 12) - 1

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


def _ge_v(a, b):
    """``a >= b`` for two short unsigned values, as an AND/OR network (no carry chain)."""
    ge = Const(1)
    for k in range(len(a)):
        ge = (a[k] & ~b[k]) | (~(a[k] ^ b[k]) & ge)
    return ge


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
    ``amaranth.lib.memory.Memory`` of ``qps * window`` x 108 bits in 9-bit
    lanes: entry index, EV, send time in ns, length, msg_last, acked, retry
    count, current timeout exponent; each write enables only the lanes it
    changes, and a SentInfo's lanes hold nothing it does not write).  A new
    SentInfo (``retx`` = 0) must carry PSN ``nxt`` and find fewer than
    ``window`` PSNs outstanding, otherwise it is dropped and counted in
    ``sent_dropped``; a retransmission (``retx`` = 1) of an outstanding PSN
    updates its entry, EV and send time; other retransmissions are ignored.
    ``inflight`` (bytes) grows by the length of each new PSN and shrinks when
    a PSN is first acknowledged; a trim NACK takes a PSN's bytes out until
    its next copy is sent (a trimmed copy is no longer in the network, and its
    retransmission is sent within the window: ``RetxReq.trim``).

    **One engine.**  A read-modify-write pipeline owns the slot memory (S0
    registered operation = read address, S1 per-QP PSN state
    ``una``/``nxt``/outstanding count -- read and written only there, S2
    registered block-RAM data, S3 write-back of registered data and the ACK's
    accumulators, S4 a timeout's write-back); each cycle it starts one
    operation, by priority:
    a SentInfo (through two input registers, :data:`SENT_FIFO_DEPTH`:
    back-to-back SentInfos are accepted one per cycle, ``ready`` is a function
    of flip-flops and is low only while both registers are full and the head
    waits, in the cycle after a scan step or a configuration write; no scan
    starts while a SentInfo is in the first register, so a burst arriving
    during scans is never refused), a step of the current ACK, one PSN of the
    timeout scan (the cycle after a scan step starts nothing).  An operation that reads a slot (ACK step, scan) waits while an
    older one that may write it is in S0..S2 (a scan: S0..S3), tested on
    registered flags (an ACK step waits for any SentInfo or scan there), so
    every read comes after the last write of its slot: no forwarding, and
    back-to-back updates of one slot are never lost.

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
      several expire in the same cycle the later ones end a cycle later each
      (an ``ecn_hold`` of 1..3 acts as 2);
    * no flag (clean ACK): ``clean_acks`` += 1; the entry's avoidance ends and
      its index is offered on ``recycle`` (hint; dropped when its 4-deep FIFO
      is full);
    * TRIM_NACK: ``trim_nacks`` += 1; if ``base_psn`` is outstanding and not
      acknowledged, ``RetxReq{psn=base_psn, avoid_index=its entry, trim=1}``
      (its bytes leave ``inflight`` once per trimmed copy); the entry's state
      is not touched;
    * NSCC gets {acked bytes, RTT = now - send time of the newest newly
      acknowledged PSN, ecn, trim} when bytes were acknowledged or for a trim;
    * PROBE_REPLY: ``probe_replies`` += 1, then the QP's profile is searched
      (one entry per cycle) for ASSUMED_BAD entries (marked by this block)
      whose last-sent EV equals the echoed EV: each becomes GOOD
      (``st_en`` pulse) with an EvEvent PROBE_OK, ``rtt_ns = now_ns - ts``.

    **ACK timeout.**  The scan visits one outstanding PSN per cycle when no
    ACK is being processed.  A PSN not acknowledged (and not trimmed: a trimmed
    PSN waits for its retransmission, which restarts its timer) for ``1024 << e`` ns,
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

    **Latency.**  A SentInfo is recorded 4-6 cycles after its transfer (its
    PSN counts as outstanding 3-4 cycles after).  An ACK is taken when the
    previous one is finished and occupies about
    ``9 + passed PSNs + SACK walk + (trim)`` cycles (SACK walk: the bits up
    to the highest set one, less 7 per zero byte skipped) plus any cycle lost
    to a SentInfo, a same-slot wait, the NSCC unit
    (:data:`~mrcnic.rtl.nscc.UPDATE_CYCLES`) or a full output FIFO; a
    probe-reply search adds ``profile_count + 3``.  A timeout is detected
    within one scan pass (at most ``2 * qps * window`` cycles; the scan
    pauses while an ACK is processed) after it expires, and acted on 6
    cycles later (``st_en``; the event and RetxReq are valid a cycle after).
    ``avoid`` follows an ECN echo 3 cycles after the ACK's finish cycle (the
    cycle its NSCC update is taken).

    **Resources** (ECP5, ``qps=2, window=128, paths=32``): the slot ring and
    the per-entry EV table are block RAM; per-QP arithmetic is narrowed to
    what the window needs (outstanding count ``log2(window) + 1`` bits, bytes
    in flight ``log2(window) + 13`` bits, zero-extended on the 32-bit ports);
    the profile masks are computed once at the configuration write; constant
    comparisons are AND/OR networks rather than carry chains; the timeout
    test is ``age >> (10 + e) != 0`` (no shifter, no 32-bit comparator);
    a slot write takes each field from the one source its lanes allow (only
    ``length``/``msg_last`` are chosen between SentInfo and slot); one index
    decoder is shared by the timeout action, the finishing ACK and the
    probe-reply search; SentInfos and EV events pass through registers, not
    LUT-RAM FIFOs; the read holds make slot forwarding unnecessary; seven
    low-rate counters share one 32-bit incrementer.

    Parameters
    ----------
    qps : int
        QPs, 1..8.
    window : int
        PSN slots per QP, a power of two, 64..4096.
    paths : int
        Path-table entries, a power of two in 1..256 (the NIC's are 16..256; this block
        holds no table, and its formal proof uses 4).
    clk_ns : int
        Clock period in ns, 1..1000 (time stamps and the ACK timeout are in ns).
    params : NicParams
        The NIC's parameter set (:class:`~mrcnic.rtl.params.NicParams`): ``qps``,
        ``window``, ``paths`` and ``clk_ns`` come from it (a keyword given as well must
        agree).  Standalone: leave it out; the keywords are checked by the same rules
        (:mod:`mrcnic.rtl.params`).

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
        nothing in flight, cwnd = ``nscc.init_cwnd``; 2 cycles later) and
        clears the ASSUMED_BAD marks of its profile range (3 cycles later).
        Write only while the QP has no traffic; it has priority over
        everything else.
    cc_w_en, cc_w_addr, cc_w_data : In(1), In(3), In(NsccConfig)
        Live CC-profile change of a QP (OCP MRC CC profile): the NSCC
        parameters are replaced and the QP's window restarts at ``init_cwnd``;
        its PSN state is kept (unlike ``cfg_w_*``).  ``cfg_w_en`` wins in the
        same cycle.
    retx : Out(stream.Signature(RetxReq))
        PSNs to send again (a FIFO of ``window`` entries, in block RAM; a RetxReq waits while
        fewer than 3 entries are free).
    st_en, st_addr, st_state : Out(1), Out(8), Out(EvState)
        Path-table state update pulse (registered).
    event : Out(stream.Signature(EvEvent))
        EV events, from one output register (valid 2 cycles after the decision, as the
        ``st_en`` pulse); an event that finds the register still full (``ready`` low) is
        dropped and counted in ``events_dropped``.  The NIC's consumer (the CSR glue's event
        queue) is always ready.
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
        block forgets its ASSUMED_BAD mark (a cycle later: the decoded entry is
        registered), so it neither probes the entry nor sets it GOOD on a probe
        reply (a DENIED entry stays DENIED).
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
        ``retransmissions``, ``timeouts``, ``min_active_holds``, ``trim_nacks``,
        ``probe_replies``, ``ecn_echoes`` and ``clean_acks`` share one incrementer
        (a distributed-RAM copy of them): they show an event 1..7 cycles after it,
        never lose one; the others count in the cycle after their event.
    """

    def __init__(self, qps: "int | None" = None, window: "int | None" = None,
                 paths: "int | None" = None, clk_ns: "int | None" = None, *,
                 params: "NicParams | None" = None):
        qps = check_qps(param(params, "qps", qps, 2))
        window = check_window(param(params, "window", window, 256))
        # no path table here: its formal proof uses 4 entries (minimum=1)
        paths = check_paths(param(params, "paths", paths, MAX_PATHS), minimum=1)
        clk_ns = check_clk_ns(param(params, "clk_ns", clk_ns, 8))
        self._params = params
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
        abits = wbits + qbits              # slot address

        # the low-rate counters share one incrementer (see "shared counters" below): an
        # increment sets the counter's pending bit
        shared = ["retransmissions", "timeouts", "min_active_holds", "trim_nacks",
                  "probe_replies", "ecn_echoes", "clean_acks"]
        cnt_ev = Signal(len(shared))

        def inc(counter, cond=None):
            name = next((n for n in shared if getattr(self, n) is counter), None)
            if name is not None:
                with m.If(1 if cond is None else cond):
                    m.d.comb += cnt_ev[shared.index(name)].eq(1)
            elif cond is None:
                m.d.sync += counter.eq(counter + 1)
            else:
                with m.If(cond):
                    m.d.sync += counter.eq(counter + 1)

        def onehot(index, name):
            """paths-bit one-hot of an 8-bit entry index (0 when index >= paths)."""
            v = Signal(paths, name=name)
            m.d.comb += v.eq(Mux(_lt_c(index, paths), Const(1, paths) << index[:ibits], 0))
            return v

        def bit_of(vec, index):
            """Bit ``index`` of a paths-bit vector (0 when index >= paths)."""
            return vec.bit_select(index[:ibits], 1) & _lt_c(index, paths)

        now = Signal(32)
        m.d.sync += now.eq(now + self.clk_ns)
        m.d.comb += self.now_ns.eq(now)
        cyc = Signal(24)                   # cycle count: ECN-avoid expiries
        if self.clk_ns & (self.clk_ns - 1) == 0:
            # now = clk_ns * cycles (both start at 0): the cycle count is a slice of it
            m.d.comb += cyc.eq(now[exact_log2(self.clk_ns):])
        else:
            m.d.sync += cyc.eq(cyc + 1)
        m.d.sync += self.stat_en.eq(0)

        def stat(index, kind):
            m.d.sync += [self.stat_en.eq(1), self.stat_index.eq(index), self.stat_kind.eq(kind)]

        # ---- NSCC ------------------------------------------------------
        m.submodules.nscc = nscc = Nscc(qps, params=self._params)
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
        # derived at the configuration write: a new PSN's timeout exponent, retry_count - 1,
        # retry_count == 0
        e0q = Array(Signal(5, name=f"e0_{i}") for i in range(qps))
        rcm1q = Array(Signal(4, name=f"rcm1_{i}") for i in range(qps))
        rc0q = Array(Signal(name=f"rc0_{i}") for i in range(qps))
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
        # no_rw_check: an issued read never meets a write of its slot (the read holds), so
        # synthesis needs no collision logic behind the RAM
        m.submodules.slots = slots = memory.Memory(shape=_Slot.size, depth=qps * window, init=[],
                                                   attrs={"no_rw_check": 1})
        sl_w = slots.write_port(granularity=_LANE)
        sl_r = slots.read_port()          # not transparent: never needed (the read holds)
        m.submodules.evs = evs = memory.Memory(shape=32, depth=paths, init=[],
                                               attrs={"ram_style": "block", "no_rw_check": 1})
        ev_w = evs.write_port()
        # (no_rw_check, not transparent: a read in the cycle of a write of its entry is
        # replaced in the fabric, see the search)
        ev_r = evs.read_port()

        def slot_addr(qp, psn):
            return Cat(psn[:wbits], qp[:qbits]) if qps > 1 else psn[:wbits]

        # ---- output FIFOs ---------------------------------------------------
        def out_fifo(name, port, layout_bits, depth):
            # (deep FIFOs in block RAM: a registered read)
            f = (fifo.SyncFIFOBuffered if depth > 16 else fifo.SyncFIFO)(width=layout_bits,
                                                                         depth=depth)
            m.submodules[name] = f
            m.d.comb += [port.payload.eq(f.r_data), port.valid.eq(f.r_rdy), f.r_en.eq(port.ready)]
            return f

        # one entry per PSN of the window: a trimmed copy's retransmission may wait for the
        # congestion window in the segmenter, and the ACK job waits for room here only when
        # the whole window was trimmed (it must not stall the ACKs that open the window)
        retx_depth = max(_RETX_DEPTH, window)
        retx_f = out_fifo("retx_fifo", self.retx, RetxReq.as_shape().size, retx_depth)
        rc_f = out_fifo("recycle_fifo", self.recycle, 8, _RECYCLE_DEPTH)
        # completions: only {qp, psn} are stored (has_imm = imm = 0)
        m.submodules.cpl_fifo = cpl_f = fifo.SyncFIFO(width=27, depth=_CPL_DEPTH)
        m.d.comb += [self.send_cpl.payload.qp.eq(cpl_f.r_data[:3]),
                     self.send_cpl.payload.psn.eq(cpl_f.r_data[3:]),
                     self.send_cpl.valid.eq(cpl_f.r_rdy), cpl_f.r_en.eq(self.send_cpl.ready)]

        event_fields = Signal(EvEvent)
        event_push = Signal()
        # pushes reach the output FIFOs through a register (the FIFO's level logic is then
        # not behind the decision)
        # events: one output register (the NIC's consumer, the CSR glue's event queue, is
        # always ready); an event that finds it full is dropped and counted
        ev_q = Signal(EvEvent)
        ev_q_v = Signal()
        m.d.sync += [ev_q.eq(event_fields), ev_q_v.eq(event_push)]
        inc(self.ev_events, ev_q_v)
        ev_room = Signal()
        m.d.comb += ev_room.eq(~self.event.valid | self.event.ready)
        with m.If(self.event.ready):
            m.d.sync += self.event.valid.eq(0)
        with m.If(ev_q_v & ev_room):
            m.d.sync += [self.event.valid.eq(1), self.event.payload.eq(ev_q)]
        inc(self.events_dropped, ev_q_v & ~ev_room)

        retx_data = Signal(RetxReq)
        retx_push = Signal()
        retx_room = Signal()              # registered: room for a push in this cycle or the next
        m.d.sync += retx_room.eq(_lt_c(retx_f.level, retx_depth - 2))
        m.d.sync += [retx_f.w_data.eq(retx_data), retx_f.w_en.eq(retx_push)]
        inc(self.retransmissions, retx_f.w_en)

        m.d.sync += self.st_en.eq(0)

        # ---- SentInfo input: two pipeline registers ------------------------------------
        # (sent_a -> sent_head; the head is issued when the engine takes it, sent_go).  The
        # stages move together, so at one SentInfo per cycle ``ready`` (a function of
        # flip-flops) stays high; it drops only while both are full and the head waits (the
        # cycle after a scan step or a configuration write).  A SentInfo reaches the engine
        # 2 cycles after its transfer, as through the former output-registered FIFO.
        sent_a = Signal(SentInfo)
        full_a = Signal()
        sent_head = Signal(SentInfo)
        sent_full = Signal()
        sent_go = Signal()
        cum_go = Signal()
        sack_go = Signal()
        trim_go = Signal()
        scan_go = Signal()
        hold0 = Signal()
        take = Signal()
        adv = Signal()
        m.d.comb += [self.sent.ready.eq(~full_a | ~sent_full | ~hold0),
                     take.eq(self.sent.valid & self.sent.ready),
                     adv.eq(full_a & (~sent_full | sent_go))]
        with m.If(take):
            m.d.sync += sent_a.eq(self.sent.payload)
        with m.If(adv):
            m.d.sync += sent_head.eq(sent_a)
        m.d.sync += [full_a.eq((full_a & ~adv) | take), sent_full.eq((sent_full & ~sent_go) | adv)]

        # ---- pipeline registers ---------------------------------------------
        # selection (comb) -> S0 register = read address -> S1 per-QP PSN state (the RAM
        # reads) -> S2 slot data (registered RAM output) -> S3 write-back and accumulators
        # -> S4 a timeout's write-back.  An operation that reads the slot is not selected while
        # an older one that may write the same slot is in S0..S2 (S3 writes; a scan: S0..S3,
        # S4 writes), so every read is issued after the write (no forwarding).  The test is
        # made on registered flags (no address compare in the selection): a SentInfo in S0..S2
        # holds every read; a SACK in S0..S2 holds a trim read (SACK steps of one ACK touch
        # distinct slots); a scan in S0..S3 holds every read, except that a scan only waits for
        # an older scan of the same slot (registered address compares, in ``scan_blk``).
        stage = data.StructLayout({"op": range(6), "qp": 3, "psn": 24, "addr": abits,
                                   "sent": SentInfo, "wr": 1, "is_sent": 1, "is_sack": 1,
                                   "is_scan": 1, "job": 1})
        s0 = Signal(stage)                 # the operation selected this cycle (comb)
        # the op flags straight from the (mutually exclusive) go signals, not decoded from op
        m.d.comb += [s0.addr.eq(slot_addr(s0.qp, s0.psn)), s0.sent.eq(sent_head),
                     s0.wr.eq(sent_go | sack_go | scan_go), s0.is_sent.eq(sent_go),
                     s0.is_sack.eq(sack_go), s0.is_scan.eq(scan_go),
                     s0.job.eq(cum_go | sack_go | trim_go)]
        s0_op, s0_qp, s0_psn = s0.op, s0.qp, s0.psn
        # the selected operation is registered (S0) and its register is the read address
        r0 = Signal(stage)
        s1 = Signal(stage)
        s2 = Signal(stage)
        m.d.sync += [r0.eq(s0), s1.eq(r0), s2.eq(s1)]
        job_s123 = Signal()                # a job's operation in S1..S3 (registered)
        m.d.sync += job_s123.eq(r0.job | s1.job | s2.job)
        r0_op, r0_qp, r0_psn, r0_addr = r0.op, r0.qp, r0.psn, r0.addr
        s1_op, s1_qp, s1_sent, s1_addr = s1.op, s1.qp, s1.sent, s1.addr
        s2_op, s2_qp, s2_psn, s2_sent, s2_addr = s2.op, s2.qp, s2.psn, s2.sent, s2.addr
        m.d.comb += sl_r.addr.eq(r0_addr)
        s2_new_ok = Signal()              # a new SentInfo that was accepted
        s2_qok = Signal()                 # qp < qps and configured
        s2_inr = Signal()                 # qok and psn in [una, nxt)
        s2_off_lo = Signal(obits)
        s2_e0 = Signal(5)                 # ACK-timeout exponent of a new PSN
        s2_rcm1 = Signal(4)               # retry_count - 1
        s2_rc0 = Signal()                 # retry_count == 0
        s3_op = Signal(range(6))
        s3_qp = Signal(3)
        s3_psn = Signal(24)
        s3_addr = Signal(abits)
        s3_off = Signal(obits)
        s3_wen = Signal(12)
        s3_wd = Signal(_Slot)
        s3_scan = Signal()                # a scan of an outstanding, unacknowledged PSN
        s3_age = Signal(22)               # (now - send_ns) >> 10
        s3_le = Signal(20)                # bit k: texp <= k
        s3_retries = Signal(4)            # the slot's retries, texp and whether a timeout
        s3_texp = Signal(5)               # raises texp
        s3_eup = Signal()
        s3_infl_en = Signal()
        s3_delta = Signal(fbits)
        s3_newly = Signal()
        s3_len = Signal(13)
        s3_send = Signal(32)
        s3_hit = Signal()
        s3_index = Signal(8)
        s3_ev = Signal(32)
        s3_evlo = Signal()                # s3_ev[:16] == job.ack.ev[:16]
        s3_evhi = Signal()                # s3_ev[16:] == job.ack.ev[16:]
        m.d.sync += [s3_op.eq(s2_op), s3_qp.eq(s2_qp), s3_psn.eq(s2_psn), s3_addr.eq(s2_addr),
                     s3_off.eq(s2_off_lo)]

        s4_tw = Signal()                  # the S3 scan timed its PSN out: write it back
        s4_addr = Signal(abits)
        s4_rt = Signal(9)                 # {retries, texp} of that write

        # registered read holds (see above)
        hold_scan = Signal()               # a scan in S0..S3 next cycle
        hold_sack = Signal()               # a SACK in S0..S2 next cycle
        m.d.sync += [hold_scan.eq(s0.is_scan | r0.is_scan | s1.is_scan | s2.is_scan),
                     hold_sack.eq(s0.is_sack | r0.is_sack | s1.is_sack)]

        # ---- ACK job state ----------------------------------------------------
        job = Signal(RxPacket)
        job_qp = job.qp
        cum_d = Signal(obits)              # job.psn - una: the PSNs passed, less one (low bits)
        cum_hz = Signal()                  # ... and its high bits are zero
        cum_ptr = Signal(24)
        cum_left = Signal(obits)           # CUM operations left, less one
        cum_nz = Signal()                  # CUM operations left
        sack_rem = Signal(64)
        sack_psn = Signal(24)              # PSN of sack_rem bit 0
        sack_nzb = Signal(8)               # bit k: sack_rem[8 * k:] != 0 (registered with it)
        sack_nz = sack_nzb[0]
        sack_skip = Signal()               # sack_rem[:8] == 0
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
        to_wait = Signal(3)
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
        # GOOD count in three registered steps: the GOOD bitmap, popcounts of 8-bit groups, sum
        good_r = Signal(paths)
        m.d.sync += good_r.eq(good)
        groups = [Signal(4, name=f"good_pc{g}") for g in range((paths + 7) // 8)]
        m.d.sync += [pc.eq(_popcount(good_r[8 * g:8 * g + 8])) for g, pc in enumerate(groups)]
        good_cnt = Signal(range(paths + 2))
        terms = list(groups)
        while len(terms) > 1:
            terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                     for i in range(0, len(terms), 2)]
        m.d.sync += good_cnt.eq(terms[0])

        # ---- ACK job: IDLE -> START -> START2 -> CUM -> SACK -> TRIM -> WAIT -> FIN0 ->
        #      FIN1 -> FINISH [-> SEARCH] ----
        trim_taken = Signal()
        fin_go = Signal()
        srch_done = Signal()
        # state flags as registers (set and cleared on the transitions, so the operation
        # selection and the finish cycle decode no state): IDLE, CUM with PSNs left (cum_nz:
        # set only on START2 -> CUM and cleared in CUM), TRIM, FINISH
        job_idle = Signal(init=1)
        in_trim = Signal()
        st_fin = Signal()
        with m.FSM(name="ackjob") as ackjob:
            with m.State("IDLE"):
                m.d.comb += self.ack.ready.eq(~self.cfg_w_en)
                with m.If(self.ack.valid & ~self.cfg_w_en):
                    p = self.ack.payload
                    with m.If((p.kind == RxKind.ACK) & _lt_c(p.qp, qps) & qvalid[p.qp[:qb]]):
                        m.d.sync += [job.eq(p),
                                     sack_rem.eq(p.ack.bitmap), sack_psn.eq(p.ack.base_psn),
                                     # (per byte here; made suffix ORs in START)
                                     sack_nzb.eq(Cat(p.ack.bitmap[8 * k:8 * k + 8] != 0
                                                     for k in range(8))),
                                     sack_skip.eq(p.ack.bitmap[:8] == 0), job_idle.eq(0)]
                        m.next = "START"
                    with m.Else():
                        inc(self.acks_dropped)
            with m.State("START"):
                # una changes only by this job's CUM operations: none in flight yet
                q = job_qp[:qb]
                d = job.psn - una[q]
                m.d.sync += [cum_d.eq(d[:obits]), cum_hz.eq(d[obits:24] == 0), cum_ptr.eq(una[q]),
                             newly.eq(0), hit_v.eq(0), trim_v.eq(0),
                             sack_nzb.eq(Cat(sack_nzb[k:].any() for k in range(8)))]
                m.next = "START2"
            with m.State("START2"):
                q = job_qp[:qb]
                # psn - una + 1 PSNs passed, at most the outstanding ones
                ok = cum_hz & (cum_d < outst[q])
                m.d.sync += [cum_left.eq(cum_d), cum_nz.eq(ok)]
                m.next = "CUM"
            with m.State("CUM"):
                with m.If(~cum_nz):
                    m.next = "SACK"
            with m.State("SACK"):
                with m.If(~sack_nz):
                    m.d.sync += in_trim.eq(1)
                    m.next = "TRIM"
            with m.State("TRIM"):
                with m.If(trim_taken):
                    m.d.sync += in_trim.eq(0)
                    m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(~r0.job & ~job_s123):
                    m.next = "FIN0"
            with m.State("FIN0"):
                # registered inputs of the finish cycle; no scan runs during a job, so a
                # pending timeout action only ends
                with m.If(~to_pending):
                    m.next = "FIN1"
            with m.State("FIN1"):
                # the GOOD bitmap (good_r) now has the job's profile mask
                m.d.sync += st_fin.eq(1)
                m.next = "FINISH"
            with m.State("FINISH"):
                with m.If(fin_go):
                    m.d.sync += st_fin.eq(0)
                    with m.If(f_probe):
                        m.next = "SEARCH"
                    with m.Else():
                        m.d.sync += job_idle.eq(1)
                        m.next = "IDLE"
            with m.State("SEARCH"):
                with m.If(srch_done):
                    m.d.sync += job_idle.eq(1)
                    m.next = "IDLE"

        in_cum = cum_nz                    # (cum_nz is set only in CUM: see job_idle)
        # in_sack: registered "state SACK and bits left" (set on the CUM -> SACK transition,
        # follows sack_nz in SACK)
        in_sack = Signal()
        with m.If(ackjob.ongoing("CUM") & ~cum_nz):
            m.d.sync += in_sack.eq(sack_nz)
        with m.Elif(~ackjob.ongoing("SACK")):
            m.d.sync += in_sack.eq(0)
        # srch_busy = state SEARCH, as a flag register (entered from FINISH on a probe
        # reply, left when the search is done)
        m.d.sync += srch_busy.eq((srch_busy & ~srch_done)
                                 | (fin_go & f_probe))
        # SACK walk: bit 0 of sack_rem is PSN sack_psn; a zero low byte is skipped in one
        # cycle, otherwise the bitmap moves by one bit (issuing a SACK op if it was set)
        # (sack_skip is registered: sack_rem[:8] == 0)

        def sack_shift():
            # by 8 bits (sack_skip) or by 1: one adder; the nonzero tests per byte position,
            # each from the next one (bytes k + 1.. of the bitmap) and 7 bits of its own
            rem = Mux(sack_skip, sack_rem >> 8, sack_rem >> 1)
            nzb = Cat((sack_nzb[k + 1] if k < 7 else 0)
                      | (~sack_skip & sack_rem[8 * k + 1:8 * k + 8].any()) for k in range(8))
            m.d.sync += [sack_rem.eq(rem), sack_psn.eq(sack_psn + Mux(sack_skip, 8, 1)),
                         sack_nzb.eq(nzb), in_sack.eq(nzb[0]), sack_skip.eq(rem[:8] == 0)]

        # ---- stage 0: choose the operation of this cycle -----------------------
        scan_q = Signal(range(qps))
        scan_off = Signal(obits)
        scan_psn = Signal(24)              # una[scan_q] + scan_off when it was advanced
        scan_step = Signal()
        scan_adv = Signal()
        # the read address depends only on registers and the job's state (not on whether
        # the operation is issued: a read that is not issued is harmless)
        # (a SentInfo does not read: it never sets the read address)
        r_qp = Signal(3)
        r_psn = Signal(24)
        # (by the flags: at most one of in_cum, in_sack, in_trim is set, and only then is a
        # job's operation issued)
        with m.If(in_cum):
            m.d.comb += [r_qp.eq(job_qp), r_psn.eq(cum_ptr)]
        with m.Elif(in_sack):
            m.d.comb += [r_qp.eq(job_qp), r_psn.eq(sack_psn)]
        with m.Elif(in_trim):
            m.d.comb += [r_qp.eq(job_qp), r_psn.eq(job.ack.base_psn)]
        with m.Else():
            m.d.comb += [r_qp.eq(scan_q), r_psn.eq(scan_psn)]
        with m.If(sent_full):
            m.d.comb += [s0_qp.eq(sent_head.qp), s0_psn.eq(sent_head.psn)]
        with m.Else():
            m.d.comb += [s0_qp.eq(r_qp), s0_psn.eq(r_psn)]
        # one "go" signal per source, each from a few registers (the cycle after a scan is a
        # bubble: see the write-back in S3/S4); a SentInfo never reads, so it never waits
        cfg_busy = Signal()                # a configuration write was registered (wa_ok)
        m.d.comb += hold0.eq(cfg_busy | r0.is_scan)
        m.d.comb += sent_go.eq(sent_full & ~hold0)
        free0 = Signal()                   # no SentInfo and no bubble this cycle
        m.d.comb += free0.eq(~sent_full & ~hold0)
        job_hold = Signal()                # a SentInfo in S0..S2 or a scan in S0..S3 (registered)
        m.d.sync += job_hold.eq(s0.is_sent | r0.is_sent | s1.is_sent
                                | s0.is_scan | r0.is_scan | s1.is_scan | s2.is_scan)
        cpl_room = Signal()                # registered: room for the CUMs in flight
        m.d.sync += cpl_room.eq(_lt_c(cpl_f.level, _CPL_DEPTH - 6))
        m.d.comb += cum_go.eq(free0 & in_cum & cpl_room & ~job_hold)
        sack_step = Signal()
        m.d.comb += [sack_step.eq(free0 & in_sack & (sack_skip | ~sack_rem[0] | ~job_hold)),
                     sack_go.eq(sack_step & ~sack_skip & sack_rem[0])]
        m.d.comb += [trim_taken.eq(free0 & in_trim & (~f_trim | ~(job_hold | hold_sack))),
                     trim_go.eq(trim_taken & f_trim)]
        # a scan waits for an older scan of the same slot in S1/S2 (compares registered a cycle
        # early: the scan position does not move in the cycle after a scan, a bubble) and for
        # a SentInfo in S0/S1
        scan_addr = Signal(abits)
        m.d.comb += scan_addr.eq(slot_addr(scan_q, scan_psn))
        # (sc_c1..sc_c3 and hold_sent, as one register: scan_blk)
        scan_blk = Signal()
        m.d.sync += scan_blk.eq(s0.is_sent | r0.is_sent | s1.is_sent
                                | (r0.is_scan & (r0_addr == scan_addr))
                                | (s1.is_scan & (s1_addr == scan_addr))
                                | (s2.is_scan & (s2_addr == scan_addr)))
        # the scan's wrap test, registered (scan_off, scan_q and outst are stable for the
        # bubble cycle after a scan step; a stale outst only ends a pass early or late by one)
        scan_last = Signal()
        m.d.sync += scan_last.eq((scan_off + 1 >= outst[scan_q]) | ~qvalid[scan_q])
        # (no scan while a SentInfo is in the first input register: it is the head next
        # cycle, the scan's bubble would then hold it while the next one arrives)
        m.d.comb += scan_go.eq(free0 & ~full_a & job_idle & ~to_pending
                               & ~scan_blk)
        with m.If(sent_go):
            m.d.comb += s0_op.eq(_OP_SENT)
        with m.If(cum_go):
            m.d.comb += s0_op.eq(_OP_CUM)
            m.d.sync += [cum_ptr.eq(cum_ptr + 1), cum_left.eq(cum_left - 1),
                         cum_nz.eq(cum_left != 0)]
        with m.If(sack_step):
            sack_shift()
        with m.If(sack_go):
            m.d.comb += s0_op.eq(_OP_SACK)
        with m.If(trim_go):
            m.d.comb += s0_op.eq(_OP_TRIM)
        with m.If(scan_go):
            m.d.comb += s0_op.eq(_OP_SCAN)
            nq = (scan_q + 1)[:len(scan_q)] if qps > 1 else scan_q
            if qps > 1 and qps & (qps - 1):
                nq = Mux(scan_q == qps - 1, 0, scan_q + 1)
            with m.If(scan_last):
                m.d.sync += [scan_off.eq(0), scan_q.eq(nq), scan_psn.eq(una[nq])]
            with m.Else():
                m.d.comb += scan_step.eq(1)
        # one incrementer moves the scan by one PSN: a scan step, or the cycle after a
        # timeout (scan_adv: the scan then resumes after the timed-out PSN; to_pending holds
        # it meanwhile)
        with m.If(scan_step | scan_adv):
            m.d.sync += [scan_off.eq(scan_off + 1), scan_psn.eq(scan_psn + 1)]

        # ---- stage 1: per-QP PSN state (read and written only here) --------------------
        # what S1 needs is compared / subtracted one cycle early (from the S0 register) against
        # nxt/una as they are then, and corrected in S1 for the update the operation ahead
        # of it (then in S1) made: nxt + 1 (new SentInfo) or una + 1 (CUM) of the same QP
        # (one subtractor each: psn - nxt is 0 or 1, psn - una is split into its offset and
        # a high-bits-zero flag)
        q0 = r0_qp[:qb]
        q1 = s1_qp[:qb]
        s1_qok = Signal()                  # qp < qps and configured
        s1_dn0 = Signal()                  # bit 0 of psn - nxt (before the update ahead)
        s1_dnz = Signal(2)                 # its bits 1..11, 12..23 are zero
        s1_d0 = Signal(obits)              # psn - una (before the update ahead), low bits
        s1_dhz = Signal()                  # ... and its high bits are zero
        s1_bn = Signal()                   # the operation ahead advanced nxt of this QP
        s1_bu = Signal()                   # the operation ahead advanced una of this QP
        qok1 = s1_qok
        new_ok = Signal()
        cum_ok = Signal()
        same = Signal()
        m.d.comb += same.eq(q1 == q0)
        s1_nw = Signal()                   # a new SentInfo (not a retransmission) of a valid QP
        m.d.sync += s1_nw.eq(r0.is_sent & ~r0.sent.retx & _lt_c(r0_qp, qps) & qvalid[q0])
        dn = Signal(24)                    # psn - nxt
        du = Signal(24)                    # psn - una
        m.d.comb += [dn.eq(r0_psn - nxt[q0]), du.eq(r0_psn - una[q0])]
        m.d.sync += [s1_qok.eq(_lt_c(r0_qp, qps) & qvalid[q0]),
                     s1_dn0.eq(dn[0]), s1_dnz.eq(Cat(dn[1:12] == 0, dn[12:] == 0)),
                     s1_d0.eq(du[:obits]), s1_dhz.eq(du[obits:] == 0),
                     s1_bn.eq(new_ok & same), s1_bu.eq(cum_ok & same)]
        nxt_eq = Signal()                  # psn - nxt is 1 behind a new PSN of this QP, else 0
        m.d.comb += nxt_eq.eq(s1_dnz.all() & (s1_dn0 == s1_bn))
        m.d.comb += new_ok.eq(s1_nw & nxt_eq & ~outst[q1][wbits])
        with m.If(new_ok):
            m.d.sync += [nxt[q1].eq(nxt[q1] + 1), outst[q1].eq(outst[q1] + 1)]
        inc(self.sent_dropped, s1.is_sent & ~s1_sent.retx & ~new_ok)
        # a CUM operation always targets una (the ACK job bounded it by outst)
        m.d.comb += cum_ok.eq((s1_op == _OP_CUM) & qok1)
        with m.If(cum_ok):
            m.d.sync += [una[q1].eq(una[q1] + 1), outst[q1].eq(outst[q1] - 1)]
        # in [una, nxt): 0 <= psn - una < outst, or, behind a CUM of this QP (una + 1),
        # 1 <= psn - una <= outst (outst < 2**obits: the high bits are zero in both)
        d_lt = Signal()
        d_le = Signal()
        m.d.comb += [d_lt.eq(s1_d0 < outst[q1]), d_le.eq(s1_d0 <= outst[q1])]
        # (the offset is used by a scan only, never right behind a CUM: no correction)
        m.d.sync += [s2_new_ok.eq(new_ok), s2_qok.eq(qok1),
                     s2_inr.eq(qok1 & s1_dhz & Mux(s1_bu, (s1_d0 != 0) & d_le, d_lt)),
                     s2_off_lo.eq(s1_d0),
                     s2_e0.eq(e0q[q1]), s2_rcm1.eq(rcm1q[q1]), s2_rc0.eq(rc0q[q1])]
        m.d.comb += [ev_w.en.eq((s1_op == _OP_SENT) & _lt_c(s1_qp, qps)
                                & _lt_c(s1_sent.index, paths)),
                     ev_w.addr.eq(s1_sent.index), ev_w.data.eq(s1_sent.ev)]

        # ---- stage 2: registered slot data --------------------------------------------
        # rd registers the block RAM's read data and nothing else (the EBR's output
        # register, see boards/ebr_outreg.py).  No write can land in the cycle of an issued
        # read or later while the reader is in S0..S2 (see the read holds), so the RAM's data
        # is current: no forwarding registers, no lane multiplexers.
        rd = Signal(_Slot)
        m.d.sync += rd.eq(sl_r.data)
        s2_nack = Signal()
        m.d.comb += s2_nack.eq(~rd.acked)
        in_range = Signal()
        m.d.comb += in_range.eq(s2_inr)
        nacked = Signal()
        m.d.comb += nacked.eq(in_range & s2_nack)
        newly_c = Signal()
        m.d.comb += newly_c.eq(((s2_op == _OP_CUM) & s2_qok & s2_nack)
                               | ((s2_op == _OP_SACK) & nacked))
        is_sent2 = s2_op == _OP_SENT
        # write data: fields a write's lanes carry but it does not change keep their value
        # (by lanes: {index, ev} and {retries, texp} are written by SentInfos only (a timeout
        # writes its own {retries, texp} in S4), send_ns is the write cycle's time, so only
        # {length, msg_last} - rewritten with acked by a SACK - come from the slot)
        wd = Signal(_Slot)
        m.d.comb += [wd.index.eq(s2_sent.index), wd.ev.eq(s2_sent.ev),
                     wd.retries.eq(0), wd.texp.eq(s2_e0),
                     wd.length.eq(Mux(is_sent2, s2_sent.length, rd.length)),
                     wd.msg_last.eq(Mux(is_sent2, s2_sent.msg_last, rd.msg_last)),
                     wd.acked.eq(s2_op == _OP_SACK), wd.trimmed.eq(s2_op == _OP_TRIM)]
        # trimmed bytes: a trim NACK of an outstanding, unacknowledged PSN takes its bytes out
        # of ``inflight`` (once: the slot's ``trimmed`` flag); the next copy sent puts them back
        # and clears the flag; an acknowledgement of a trimmed PSN frees nothing more.  (A
        # retransmission's SentInfo never waits, so its slot read may miss a SACK or trim of
        # the same PSN written in the same few cycles; either order keeps every -length
        # matched by a +length, the flag may then mark an acknowledged PSN unacknowledged
        # again until the cumulative ACK passes it.)
        trim_sub = Signal()
        retx_add = Signal()
        m.d.comb += [trim_sub.eq((s2_op == _OP_TRIM) & nacked & ~rd.trimmed),
                     retx_add.eq(is_sent2 & s2_sent.retx & nacked & rd.trimmed)]
        wen = Signal(12)
        with m.If(is_sent2 & s2_new_ok):
            m.d.comb += wen.eq(_LANES_ALL)
        with m.Elif(is_sent2 & s2_sent.retx & in_range):
            m.d.comb += wen.eq(_LANES_ID | _LANES_TS | Mux(retx_add, _LANES_LA, 0))
        with m.Elif(((s2_op == _OP_SACK) & nacked) | trim_sub):
            m.d.comb += wen.eq(_LANES_LA)
        age = Signal(32)
        m.d.comb += age.eq(now - rd.send_ns)
        # a timeout: retries + 1 (saturating), texp + 1 once retries + 1 >= retry_count
        # (capped at MAX_TIMEOUT_EXP); computed for every read, used by a timed-out scan
        r2 = rd.retries
        e_up = Signal()
        m.d.comb += e_up.eq((r2 != 15) & (s2_rc0 | _ge_v(r2, s2_rcm1))
                            & _lt_c(rd.texp, MAX_TIMEOUT_EXP))
        # (a trimmed PSN does not time out: its copy is known lost, its retransmission waits
        # for the window; the new copy's send restarts its timer)
        m.d.sync += [s3_wd.eq(wd), s3_wen.eq(wen),
                     s3_scan.eq((s2_op == _OP_SCAN) & nacked & ~rd.trimmed),
                     s3_age.eq(age[10:]),
                     s3_le.eq(Cat(_le_c(rd.texp, k) for k in range(MAX_TIMEOUT_EXP))),
                     s3_retries.eq(r2), s3_texp.eq(rd.texp), s3_eup.eq(e_up),
                     s3_infl_en.eq((is_sent2 & s2_new_ok) | (newly_c & ~rd.trimmed) | trim_sub
                                   | retx_add),
                     s3_delta.eq(Mux(is_sent2, s2_sent.length, -rd.length)),
                     s3_newly.eq(newly_c), s3_len.eq(rd.length), s3_send.eq(rd.send_ns),
                     s3_index.eq(rd.index),
                     s3_ev.eq(rd.ev),
                     # the hit's EV compare, registered in halves (job.ack.ev is stable while
                     # the job's operations are in S0..S3)
                     s3_evlo.eq(rd.ev[:16] == job.ack.ev[:16]),
                     s3_evhi.eq(rd.ev[16:] == job.ack.ev[16:])]
        m.d.sync += [cpl_f.w_en.eq((s2_op == _OP_CUM) & s2_qok & rd.msg_last),
                     cpl_f.w_data.eq(Cat(s2_qp, s2_psn))]
        with m.If((s2_op == _OP_TRIM) & nacked):
            m.d.sync += [trim_v.eq(1), trim_idx.eq(rd.index)]

        # ---- stage 3: write-back, bytes in flight, the ACK's accumulators, timeouts ------
        q3 = s3_qp[:qb]
        # age >= 1024 << texp (texp <= MAX_TIMEOUT_EXP): a bit of age at 10 + texp or above
        expired = Signal()
        m.d.comb += expired.eq((s3_age[:MAX_TIMEOUT_EXP] & s3_le).any()
                               | s3_age[MAX_TIMEOUT_EXP:].any())
        to_set = Signal()
        m.d.comb += to_set.eq(s3_scan & expired & ~to_pending)
        # all write-port inputs come from registers: a timeout's write-back is one cycle
        # later (S4); the operation behind a scan is always a bubble, so S3 never writes then
        # {retries, texp} after a timeout of this PSN (computed for every scan)
        m.d.sync += [s4_tw.eq(to_set), s4_addr.eq(s3_addr),
                     s4_rt.eq(Cat(Mux(s3_retries == 15, 15, s3_retries + 1)[:4],
                                  Mux(s3_eup, s3_texp + 1, s3_texp)[:5]))]
        sl_wd = Signal(_Slot)
        m.d.comb += [sl_wd.eq(s3_wd), sl_wd.send_ns.eq(now), sl_w.data.eq(sl_wd)]
        with m.If(s4_tw):
            m.d.comb += [sl_wd.retries.eq(s4_rt[:4]), sl_wd.texp.eq(s4_rt[4:]),
                         sl_w.addr.eq(s4_addr), sl_w.en.eq(_LANES_TS | _LANES_RT)]
        with m.Else():
            m.d.comb += [sl_w.addr.eq(s3_addr), sl_w.en.eq(s3_wen)]
        with m.If(s3_infl_en):
            m.d.sync += infl[q3].eq(infl[q3] + s3_delta)
        with m.If(s3_newly):
            m.d.sync += [newly.eq(newly + s3_len), last_send.eq(s3_send)]
        m.d.comb += s3_hit.eq(s3_newly & s3_evlo & s3_evhi)       # EV compare from S2
        with m.If(s3_hit):
            m.d.sync += [hit_v.eq(1), hit_idx.eq(s3_index)]
        s4_qp = Signal(3)
        s4_psn = Signal(24)
        s4_off = Signal(obits)
        s4_index = Signal(8)
        s4_ev = Signal(32)
        m.d.sync += [s4_qp.eq(s3_qp), s4_psn.eq(s3_psn), s4_off.eq(s3_off), s4_index.eq(s3_index),
                     s4_ev.eq(s3_ev)]
        with m.If(s4_tw):
            # the younger scan operations in flight (scans are two cycles apart) see
            # to_pending and do nothing; the scan resumes after this PSN once the action is done
            m.d.sync += [to_pending.eq(1), to_wait.eq(0), to.qp.eq(s4_qp), to.psn.eq(s4_psn),
                         to.avoid_index.eq(s4_index), to_ev.eq(s4_ev),
                         scan_q.eq(s4_qp[:len(scan_q)]), scan_off.eq(s4_off),
                         scan_psn.eq(s4_psn)]
        m.d.sync += scan_adv.eq(s4_tw)

        # ---- timeout action (waits 4 cycles: registered profile / GOOD-count tests) -------
        t_idx = to.avoid_index
        t_in_prof = Signal()
        t_el = Signal()
        t_bd = Signal()
        t_elig = Signal()
        m.d.comb += t_elig.eq(t_el & ~t_bd)
        t_thr = Signal(10)
        t_hold = Signal()
        # one registered index decoder (idx_bit) serves the timeout action, the finishing ACK
        # and the probe-reply search, which never overlap: a pending timeout action holds the
        # ACK job in FIN0, and no scan (so no timeout) starts while a job runs
        idx_bit = Signal(paths)
        t_bit = idx_bit                    # to_pending for 4 cycles: onehot(t_idx)
        # (from the decoded index, registered a cycle after to_pending rose; pmask is the
        # profile mask of to.qp while to_pending)
        m.d.sync += [t_in_prof.eq((pmask & t_bit).any()),
                     t_el.eq((self.eligible & t_bit).any()), t_bd.eq((bad & t_bit).any()),
                     t_thr.eq(cfg[to.qp[:qb]].ev_min_active + t_in_prof),
                     t_hold.eq(good_cnt < t_thr)]
        with m.If(to_pending & (to_wait != 4)):
            m.d.sync += to_wait.eq(to_wait + 1)
        # the timed-out PSN may be cumulatively acknowledged while the action waits: una of
        # its QP passed it before the action started (to.psn - una wrapped: high bits set,
        # checked in its first cycle) or passes it now (a CUM operation at una == to.psn;
        # una moves by one per CUM).  Such a PSN is not retransmitted and its timeout is not
        # counted: the action just ends (the scan resumes after it).
        t_gone = Signal()
        t_d = Signal(24)
        m.d.comb += t_d.eq(to.psn - una[to.qp[:qb]])
        t_cum = Signal()
        m.d.comb += t_cum.eq(cum_ok & (q1 == to.qp[:qb]) & (una[q1] == to.psn))
        with m.If(s4_tw):
            m.d.sync += t_gone.eq(0)
        with m.Elif(to_pending):
            m.d.sync += t_gone.eq(t_gone | t_cum | ((to_wait == 0) & t_d[obits:].any()))
        with m.If(to_pending & (to_wait == 4) & t_gone):
            m.d.sync += to_pending.eq(0)
        with m.If(to_pending & (to_wait == 4) & ~t_gone & ~srch_busy & retx_room):
            m.d.comb += [retx_push.eq(1), retx_data.eq(to)]
            m.d.sync += to_pending.eq(0)
            inc(self.timeouts)
            stat(t_idx, EvCounterKind.TIMEOUT)
            with m.If(t_elig):
                m.d.comb += [event_push.eq(1), event_fields.index.eq(t_idx),
                             event_fields.ev.eq(to_ev)]
                with m.If(t_hold):
                    m.d.comb += [event_fields.state.eq(EvState.GOOD),
                                 event_fields.reason.eq(EvEventReason.MIN_ACTIVE)]
                    inc(self.min_active_holds)
                with m.Else():
                    m.d.comb += [event_fields.state.eq(EvState.ASSUMED_BAD),
                                 event_fields.reason.eq(EvEventReason.ACK_TIMEOUT),
                                 bad_set.eq(t_bit)]
                    m.d.sync += [self.st_en.eq(1), self.st_addr.eq(t_idx),
                                 self.st_state.eq(EvState.ASSUMED_BAD)]

        # ---- ECN avoidance slots: entry, expiry cycle, expired flag ------------------
        av_v = Signal(AVOID_SLOTS)
        av_i = [Signal(8, name=f"av_i{i}") for i in range(AVOID_SLOTS)]
        av_ok = [Signal(name=f"av_ok{i}") for i in range(AVOID_SLOTS)]   # av_i < paths
        av_x = [Signal(24, name=f"av_x{i}") for i in range(AVOID_SLOTS)]
        av_p = Signal(AVOID_SLOTS)             # expired, entry bit not yet cleared
        avb = Signal(paths)                    # entries avoided (one per valid slot)
        avb_set = Signal(paths)
        avb_clr = Signal(paths)
        av_arm = Signal(AVOID_SLOTS)           # (re)armed this cycle
        av_end = Signal(AVOID_SLOTS)           # ended by a clean ACK
        m.d.sync += [avb.eq((avb & ~avb_clr) | avb_set), self.avoid.eq(avb)]
        # expiry compare registered: av_eq[i] = (cyc == av_x[i]) one cycle ago, so the slot
        # is armed with cyc + ecn_hold - 3 and the compare is ignored in the cycle after an arm
        # (cyc - 3 is cyc three cycles ago: a delay line, no subtractor)
        cyc_d = [Signal(24, name=f"cyc_d{k}") for k in range(3)]
        m.d.sync += [cyc_d[0].eq(cyc), cyc_d[1].eq(cyc_d[0]), cyc_d[2].eq(cyc_d[1])]
        av_eq = Signal(AVOID_SLOTS)
        av_arm_r = Signal(AVOID_SLOTS)
        m.d.sync += [av_eq.eq(Cat(cyc == av_x[i] for i in range(AVOID_SLOTS))),
                     av_arm_r.eq(av_arm)]
        av_exp = Signal(AVOID_SLOTS)
        m.d.comb += av_exp.eq(av_v & av_eq & ~av_arm_r)
        # release one expired slot per cycle (lowest first): its entry bit falls a cycle later
        av_pick = Signal(AVOID_SLOTS)
        m.d.comb += av_pick.eq(Cat(av_p[i] & ~av_p[:i].any() if i else av_p[0]
                                   for i in range(AVOID_SLOTS)))
        # exp_go: a slot was released a cycle ago and not re-armed in that cycle (its av_v
        # bit now is (av_arm & av_pick) of then: the flag is registered, not compared here);
        # exp_idx: that slot's entry (low bits) and whether it is < paths, picked by a tree
        # of 2:1 multiplexers (the lowest expired slot, as av_pick)
        exp_go = Signal()
        exp_idx = Signal(ibits + 1)

        def pick_tree(lo, hi):
            if hi - lo == 1:
                return av_p[lo], Cat(av_i[lo][:ibits], av_ok[lo])
            mid = (lo + hi) // 2
            a_any, a_val = pick_tree(lo, mid)
            b_any, b_val = pick_tree(mid, hi)
            return a_any | b_any, Mux(a_any, a_val, b_val)
        m.d.sync += [exp_go.eq(av_p.any() & ~(av_arm & av_pick).any()),
                     exp_idx.eq(pick_tree(0, AVOID_SLOTS)[1])]
        exp_bit = Signal(paths)
        m.d.comb += exp_bit.eq(Cat(exp_idx[ibits] & (exp_idx[:ibits] == j) for j in range(paths)))
        hold = Signal(24)                      # ecn_hold (the job's QP)
        hold_le3 = Signal()
        hold_nz = Signal()
        m.d.sync += [av_v.eq((av_v & ~av_pick & ~av_end) | av_arm),
                     av_p.eq(((av_p | av_exp) & ~av_pick & ~av_end & ~av_arm)
                             | Mux(hold_le3, av_arm, 0))]
        for i in range(AVOID_SLOTS):
            with m.If(av_arm[i]):
                m.d.sync += av_x[i].eq(cyc_d[2] + hold)

        # ---- finish the ACK ------------------------------------------------------
        need_upd = Signal()
        others = Signal()
        av_hit = Signal(AVOID_SLOTS)
        av_free = Signal(AVOID_SLOTS)          # the lowest free slot, one-hot
        av_full = Signal()
        hit_bit = Signal(paths)
        fcfg = cfg[job_qp[:qb]]
        with m.If(ackjob.ongoing("FIN0")):
            m.d.sync += [need_upd.eq((newly != 0) | f_trim),
                         av_hit.eq(Cat(av_v[i] & (av_i[i] == hit_idx)
                                       for i in range(AVOID_SLOTS))),
                         av_free.eq(Cat(~av_v[i] & av_v[:i].all() if i else ~av_v[0]
                                        for i in range(AVOID_SLOTS))),
                         av_full.eq(av_v.all()),
                         hold.eq(fcfg.ecn_hold), hold_le3.eq(_le_c(fcfg.ecn_hold, 3)),
                         hold_nz.eq(fcfg.ecn_hold != 0)]
        with m.If(ackjob.ongoing("FIN1")):
            # idx_bit = onehot(hit_idx) here (FIN0 left without a timeout action pending)
            m.d.sync += [hit_bit.eq(idx_bit), others.eq((good_r & ~avb & ~idx_bit).any())]
        # an entry released a cycle ago keeps its bit when its slot was re-armed since
        exp_clr = Signal(paths)
        m.d.comb += exp_clr.eq(Mux(exp_go, exp_bit, 0))
        m.d.comb += avb_clr.eq(exp_clr)
        upd = nscc.upd
        m.d.comb += [upd.payload.qp.eq(job_qp), upd.payload.acked.eq(newly),
                     upd.payload.rtt_ns.eq(now - last_send),
                     upd.payload.ecn.eq(f_ecn), upd.payload.trim.eq(f_trim)]
        # fin_room = retx_room | ~trim_v, registered from retx_room's own input (trim_v is
        # stable from WAIT on)
        fin_room = Signal()
        m.d.sync += fin_room.eq(_lt_c(retx_f.level, retx_depth - 2) | ~trim_v)
        m.d.comb += fin_go.eq(st_fin & ~to_pending & (upd.ready | ~need_upd) & fin_room)
        m.d.comb += upd.valid.eq(fin_go & need_upd)
        # the finish cycle only hands the update to NSCC; its other actions happen one cycle
        # later (fin_r), from flags registered while FINISH waits (their inputs are stable then)
        fin_r = Signal()
        arm_hit = Signal()
        arm_new = Signal()
        clean_hit = Signal()
        fs_en = Signal()                   # the per-EV counter pulse of the finish: entry, kind
        fs_idx = Signal(8)
        fs_kind = Signal(EvCounterKind)
        m.d.sync += [fs_en.eq(trim_v | (hit_v & f_ecn) | (hit_v & ~f_trim & ~f_probe)),
                     fs_idx.eq(Mux(trim_v, trim_idx, hit_idx)),
                     fs_kind.eq(Mux(trim_v, EvCounterKind.TRIM,
                                    Mux(f_ecn, EvCounterKind.ECN_ECHO, EvCounterKind.CLEAN_ACK)))]
        arm_oh = Signal(AVOID_SLOTS)       # the slots (re)armed: av_hit or av_free
        m.d.sync += [fin_r.eq(fin_go),
                     arm_hit.eq(f_ecn & hit_v & hold_nz & av_hit.any()),
                     arm_new.eq(f_ecn & hit_v & hold_nz & ~av_hit.any() & others & ~av_full),
                     arm_oh.eq(Mux(f_ecn & hit_v & hold_nz,
                                   Mux(av_hit.any(), av_hit, Mux(others & ~av_full, av_free, 0)),
                                   0)),
                     clean_hit.eq(~f_ecn & ~f_trim & ~f_probe & hit_v)]
        with m.If(fin_r):
            with m.If(trim_v):
                m.d.comb += [retx_push.eq(1), retx_data.qp.eq(job_qp), retx_data.trim.eq(1),
                             retx_data.psn.eq(job.ack.base_psn), retx_data.avoid_index.eq(trim_idx)]
            inc(self.trim_nacks, f_trim)
            inc(self.probe_replies, f_probe)
            inc(self.ecn_echoes, f_ecn)
            inc(self.clean_acks, ~f_ecn & ~f_trim & ~f_probe)
            with m.If(fs_en):
                stat(fs_idx, fs_kind)
            m.d.comb += av_arm.eq(arm_oh)
            with m.If(arm_hit | arm_new):
                m.d.comb += avb_set.eq(hit_bit)
            with m.If(arm_new):
                for i in range(AVOID_SLOTS):
                    with m.If(av_free[i]):
                        m.d.sync += [av_i[i].eq(hit_idx), av_ok[i].eq(_lt_c(hit_idx, paths))]
            with m.If(clean_hit):
                m.d.comb += [av_end.eq(av_hit), avb_clr.eq(hit_bit | exp_clr),
                             rc_f.w_en.eq(1), rc_f.w_data.eq(hit_idx)]

        # ---- probe reply: search the profile for the echoed EV --------------------
        # address -> EV table -> registered read data (nothing else: the EBR's output register,
        # see rd above) -> compare.  A SentInfo that writes the entry in the cycle of its read
        # wins (as a transparent read port): its EV is compared (c1/m1, c2/m2) instead.
        srch_idx = Signal(9)
        srch_left = Signal(9)
        srch_va = Signal()
        srch_vb = Signal()
        srch_ia = Signal(8)
        srch_ib = Signal(8)
        ev_rd = Signal(32)
        srch_c1 = Signal()                 # the entry read was written in the read's cycle
        srch_m1 = Signal()                 # ... with the echoed EV
        srch_c2 = Signal()
        srch_m2 = Signal()
        srch_vc = Signal()                 # entry srch_ic matches and is marked ASSUMED_BAD
        srch_ic = Signal(8)
        srch_cbit = idx_bit                # onehot(srch_ic) (SEARCH: no timeout action)
        m.d.comb += ev_r.addr.eq(srch_idx)
        m.d.sync += [srch_c1.eq(ev_w.en & (ev_w.addr == ev_r.addr)),
                     srch_m1.eq(ev_w.data == job.ack.ev),
                     srch_c2.eq(srch_c1), srch_m2.eq(srch_m1), ev_rd.eq(ev_r.data)]
        m.d.sync += [srch_vb.eq(srch_va), srch_ib.eq(srch_ia),
                     # (srch_vb implies srch_busy, and srch_ib < paths)
                     srch_vc.eq(srch_vb & Mux(srch_c2, srch_m2, ev_rd == job.ack.ev)
                                & bad.bit_select(srch_ib[:ibits], 1)),
                     srch_ic.eq(srch_ib)]
        m.d.sync += idx_bit.eq(onehot(Mux(to_pending, t_idx, Mux(srch_busy, srch_ib, hit_idx)),
                                      "idx_bit_c"))
        srch_clr = Signal(paths)
        more = Signal()                    # registered (srch_left != 0) & (srch_idx < paths)
        with m.If(st_fin):                 # (loaded while FINISH waits: the search starts after)
            m.d.sync += [srch_idx.eq(fcfg.profile_base), srch_left.eq(fcfg.profile_count),
                         srch_va.eq(0),
                         more.eq((fcfg.profile_count != 0) & _lt_c(fcfg.profile_base, paths))]
        with m.If(srch_busy):
            m.d.sync += [srch_va.eq(more), srch_ia.eq(srch_idx)]
            with m.If(more):
                m.d.sync += [srch_idx.eq(srch_idx + 1), srch_left.eq(srch_left - 1),
                             more.eq((srch_left != 1) & _lt_c(srch_idx, paths - 1))]
            m.d.comb += srch_done.eq(~more & ~srch_va & ~srch_vb & ~srch_vc)
        # (srch_vc implies SEARCH)
        with m.If(srch_vc):
            m.d.comb += [event_push.eq(1), event_fields.index.eq(srch_ic),
                         event_fields.ev.eq(job.ack.ev),
                         event_fields.state.eq(EvState.GOOD),
                         event_fields.reason.eq(EvEventReason.PROBE_OK),
                         event_fields.rtt_ns.eq(now - job.ack.ts),
                         srch_clr.eq(srch_cbit)]
            m.d.sync += [self.st_en.eq(1), self.st_addr.eq(srch_ic),
                         self.st_state.eq(EvState.GOOD)]

        # ---- probes -----------------------------------------------------------
        pr_due = Signal(qps)
        pr_timer = Array(Signal(24, name=f"pr_timer{i}") for i in range(qps))
        pr_q = Signal(range(qps))
        pr_left = Signal(9)
        p_idx = Signal(9)
        pr_stop = Signal()           # the sweep ends: pr_left == 0 or p_idx >= paths (registered)
        pr_l1 = Signal()             # pr_left == 1 (registered)
        pr_il = Signal()             # p_idx >= paths - 1 (registered)
        with m.If(self.probe.ready):
            m.d.sync += self.probe.valid.eq(0)
        can = ~self.probe.valid | self.probe.ready
        pr_clear = Signal(qps)
        with m.FSM(name="prober"):
            with m.State("IDLE"):
                for i in reversed(range(qps)):
                    with m.If(pr_due[i]):
                        m.d.sync += [pr_q.eq(i), p_idx.eq(cfg[i].profile_base),
                                     pr_left.eq(cfg[i].profile_count),
                                     pr_stop.eq((cfg[i].profile_count == 0)
                                                | _ge_c(cfg[i].profile_base, paths)),
                                     pr_l1.eq(cfg[i].profile_count == 1),
                                     pr_il.eq(_ge_c(cfg[i].profile_base, paths - 1))]
                        m.d.comb += pr_clear.eq(1 << i)
                        m.next = "SWEEP"
            with m.State("SWEEP"):
                with m.If(pr_stop):
                    m.next = "IDLE"
                with m.Elif(can):
                    m.d.sync += [p_idx.eq(p_idx + 1), pr_left.eq(pr_left - 1),
                                 pr_stop.eq(pr_l1 | pr_il), pr_l1.eq(pr_left == 2),
                                 pr_il.eq(_ge_c(p_idx, paths - 2))]
                    # (the payload is loaded at every step: without valid it is not looked at)
                    m.d.sync += [self.probe.payload.qp.eq(pr_q),
                                 self.probe.payload.index.eq(p_idx),
                                 self.probe.payload.ts.eq(now)]
                    with m.If(bad.bit_select(p_idx[:ibits], 1)):
                        m.d.sync += self.probe.valid.eq(1)
                        inc(self.probes_sent)
        # pr_timer holds (cycles to the next round) + 1, so a round reloads it with
        # probe_interval itself (no subtractor); the cycle after the configuration write
        # (pr_hold) loads it the same way, from the QP's new configuration
        pr_set = Signal(qps)
        pr_zero = Array(Signal(name=f"pr_zero{i}") for i in range(qps))   # pr_timer == 1
        pr_on = Array(Signal(name=f"pr_on{i}") for i in range(qps))       # probe_interval != 0
        pr_one = Array(Signal(name=f"pr_one{i}") for i in range(qps))     # probe_interval == 1
        pr_hold = Array(Signal(name=f"pr_hold{i}") for i in range(qps))
        for i in range(qps):
            with m.If(qvalid[i] & pr_on[i]):
                with m.If(pr_zero[i]):
                    m.d.sync += [pr_timer[i].eq(cfg[i].probe_interval), pr_zero[i].eq(pr_one[i])]
                    m.d.comb += pr_set[i].eq(1)
                with m.Elif(pr_hold[i]):
                    m.d.sync += [pr_timer[i].eq(cfg[i].probe_interval), pr_hold[i].eq(0),
                                 pr_zero[i].eq(pr_one[i])]
                with m.Else():
                    m.d.sync += [pr_timer[i].eq(pr_timer[i] - 1), pr_zero[i].eq(pr_timer[i] == 2)]
        m.d.sync += pr_due.eq((pr_due & ~pr_clear) | pr_set)

        # ---- shared counters ----------------------------------------------------------
        # The ports are flip-flops; a copy of each lives in a distributed RAM that feeds one
        # incrementer: each cycle the lowest pending counter k (retransmissions first) gets
        # word[k] + 1 in its RAM word and its port.  Each of these counters is incremented at
        # most once per 4 cycles (retransmissions: a timeout's RetxReq, then a trim NACK's 4
        # cycles later) or per 9 cycles (the others: one ACK finish or one timeout action), and
        # at most 7 bits are pending, so a pending bit is always served before its counter's
        # next increment: the port lags its event by 1..7 cycles and no increment is lost.
        # Word 7 holds 0xFFFFFFFF from the configuration and is never written: for 8 cycles
        # after a reset the words are cleared as word[7] + 1 (as rtl/eth_mac_rx.py does).
        ns = len(shared)
        m.submodules.counters = cmem = memory.Memory(shape=32, depth=8,
                                                     init=[0] * 7 + [0xFFFFFFFF])
        cm_w = cmem.write_port()
        cm_r = cmem.read_port(domain="comb")
        cnt_p = Signal(ns)                 # pending increments
        clearing = Signal(init=1)
        clr = Signal(3)
        pick = Signal(ns)                  # the lowest pending counter, one-hot and index
        pick_i = Signal(3)
        for k in reversed(range(ns)):
            with m.If(cnt_p[k]):
                m.d.comb += [pick.eq(1 << k), pick_i.eq(k)]
        m.d.comb += [cm_r.addr.eq(Mux(clearing, 7, pick_i)),
                     cm_w.addr.eq(Mux(clearing, clr, pick_i)),
                     cm_w.data.eq(cm_r.data + 1),
                     cm_w.en.eq(clearing | cnt_p.any())]
        with m.If(clearing):
            m.d.sync += [clr.eq(clr + 1), clearing.eq(clr != 6),
                         cnt_p.eq(cnt_p | cnt_ev)]
        with m.Else():
            m.d.sync += cnt_p.eq((cnt_p & ~pick) | cnt_ev)
            for k, name in enumerate(shared):
                with m.If(pick[k]):
                    m.d.sync += getattr(self, name).eq(cm_w.data)

        # ---- configuration write (registered; wins over everything above) --------------
        # cycle 1: the write is registered (with base + count); cycle 2: the QP's state is
        # reset and the profile mask computed; cycle 3: mask stored, ASSUMED_BAD marks cleared
        wa_ok = cfg_busy
        wa_addr = Signal(qb)
        wa_data = Signal(RelQpParams)
        wa_end = Signal(10)
        wd_c = self.cfg_w_data
        m.d.sync += [wa_ok.eq(self.cfg_w_en & _lt_c(self.cfg_w_addr, qps)),
                     wa_addr.eq(self.cfg_w_addr[:qb]),
                     wa_data.eq(wd_c.as_value()[:RelQpParams.as_shape().size]),
                     wa_end.eq(wd_c.profile_base + wd_c.profile_count)]
        wb_ok = Signal()
        wb_addr = Signal(qb)
        wb_mask = Signal(paths)
        m.d.sync += [wb_ok.eq(wa_ok), wb_addr.eq(wa_addr),
                     wb_mask.eq(Cat(_le_c(wa_data.profile_base, i) & _gt_c(wa_end, i)
                                    for i in range(paths)))]
        ctl_clr = Signal(paths)            # registered: the decoder is not behind the port
        m.d.sync += ctl_clr.eq(Mux(self.ctl_st_en, onehot(self.ctl_st_addr, "ctl_bit"), 0))
        m.d.comb += bad_clr.eq(srch_clr | Mux(wb_ok, wb_mask, 0) | ctl_clr)
        with m.If(wa_ok):
            a = wa_addr
            m.d.sync += [cfg[a].eq(wa_data), qvalid[a].eq(1), una[a].eq(wa_data.start_psn),
                         nxt[a].eq(wa_data.start_psn),
                         outst[a].eq(0), infl[a].eq(0),
                         pr_zero[a].eq(0), pr_hold[a].eq(1),
                         pr_one[a].eq(wa_data.probe_interval == 1),
                         pr_on[a].eq(wa_data.probe_interval != 0),
                         e0q[a].eq(Mux(_ge_c(wa_data.ack_timeout_exp, MAX_TIMEOUT_EXP),
                                       MAX_TIMEOUT_EXP,
                                       wa_data.ack_timeout_exp + (wa_data.retry_count == 0))),
                         rcm1q[a].eq(wa_data.retry_count - 1),
                         rc0q[a].eq(wa_data.retry_count == 0)]
        with m.If(wb_ok):
            m.d.sync += pmq[wb_addr].eq(wb_mask)
        return m
