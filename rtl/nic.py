"""MRCNic: the whole NIC datapath -- transmit pipeline, receive pipeline, one port per plane.

::

    s_wr ──► TxPipeline ──(data frames p<i>)─────────────► PlaneMux p<i> ──► m_axis_p<i>
               │ m_axi (AR/R)                                  ▲
               ▼                                               │ (ACK frames p<i>)
    m_axi ◄── AXI4 (reads: TX payload, writes: RX placement)   │
               ▲ m_axi (AW/W/B)                                │
    s_axis_p<i> ──► RxPipeline ──► recv_cpl                    │
                       │ spray_req/decision ◄─► TxPipeline's SprayScheduler (client 1:
                       │                        ACK reverse paths, same path table)
                       └─ ack_rx (received ACKs) ──► SenderReliability
                                                           │ retx, tx_ok, una ──► segmenter
                                                           │ st_* ──► every path-table copy
                                                           │ avoid ──► transmit spray (ECN)
                                                           └ probe ──► probe_table ──► AckGen

Sender reliability (:class:`~mrcnic.rtl.reliability.SenderReliability`)
closes the loop: SACKs and NACKs from the peer, retransmissions on another
EV, ACK timeouts that make an EV ASSUMED_BAD (an EV event), probes that bring
it back, NSCC windows.  Configure each QP with ``rel_w_*`` before posting work
requests on it: a QP without a reliability context has a closed window.

Sources: IBTA RoCEv2 annex A17, RFC 8754, RFC 9800, the MRC paper, OCP MRC 1.0
(EV profiles, EV states).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mrcnic import wire
from .axi import Axi4ReadSignature, Axi4Signature, Axi4WriteSignature
from .axis import AxiStreamSignature
from .ack_gen import ProbeFrameReq
from .ev_counters import EvCounterBank
from .layouts import (Completion, EvCounters, EvEvent, EvState,
                      MemRegion, NicGlobals, PathEntry, ProbeReq, QpContext, RxKind, RxQpContext,
                      WorkRequest)
from .plane_guard import PlaneGuard
from .plane_mux import PlaneMux
from .nscc import NsccConfig
from .params import NicParams
from .reliability import RelQpConfig, SenderReliability
from .rx import RxPipeline
from .tx import TxPipeline

__all__ = ["MRCNic", "ManualProbe", "ProbeReply"]



#: The path-record fields a probe frame uses (the probe path's block-RAM copy).
_ProbePath = data.StructLayout({"ev": 32, "port": 3, "da": 128})

class ManualProbe(data.Struct):
    """A controller-requested EV probe (``EV_PROBE_REQ``): entry ``index``, sent for QP ``qp``
    (the QP whose EV profile holds the entry: its context gives the peer QPN and uSID)."""
    qp: 3
    index: 8


class ProbeReply(data.Struct):
    """The reply to a :class:`ManualProbe`: entry ``index``, round-trip time ``rtt_ns`` (ns)."""
    index: 8
    rtt_ns: 32


class MRCNic(wiring.Component):
    """One MRC NIC: ``ports`` planes, host work requests in, receive completions out, AXI4 to memory.

    Parameters
    ----------
    params : NicParams
        All of the parameters below in one checked set (:class:`~mrcnic.rtl.params.NicParams`),
        instead of the keywords (a keyword given as well must agree with it).  The NIC
        hands it to the blocks it builds; ``self.params`` is the set in use either way.
    ports : int
        Planes (1..8): one 64-bit AXI-Stream input and output each (default 4).
    qps : int
        QP contexts (1..8) on both sides (default 2).
    paths : int
        Path-table entries (16, 32, 64, 128 or 256; default 256); one table and one spray
        scheduler serve the data and the ACK reverse paths.
    window : int
        PSN window of the receive SACK tracker and of sender reliability (packets): a power
        of two in 64..4096 (default 256).
    shared_parser : bool
        One receive parser for all planes (see :class:`~mrcnic.rtl.rx.RxPipeline`);
        the board tops use it, the co-simulation keeps one parser per plane.
    plane_guard : int
        :class:`~mrcnic.rtl.plane_guard.PlaneGuard` threshold: ACK timeouts of that many
        distinct entries of one plane within 4096 cycles make the data spray avoid the whole
        plane for 2**15 cycles or until a probe reply on it (0: no guard).
    clk_ns : int
        The core clock's period in ns, 1..1000 (8 at 125 MHz): the sender reliability's
        time base for RTT samples and ACK timeouts (:class:`SenderReliability`).

    Attributes
    ----------
    s_wr : In(stream.Signature(WorkRequest))
        Host work requests (RDMA WRITE / WRITE with immediate), see ``Segmenter``.
    recv_cpl : Out(stream.Signature(Completion))
        Receive completions: one per message written into this NIC's memory,
        after all its bytes are in memory.  Must be taken (``ready``) or the
        receive path stalls once its completion FIFO fills.
    m_axi : Out(Axi4Signature(32, 64, 4))
        Host memory: AR/R carry the transmit payload reads, AW/W/B the receive
        placement writes (the two halves are independent).
    s_axis_p<i> : In(AxiStreamSignature(64))
        Frames received on plane i (Ethernet without FCS).  Bad frames are
        dropped and counted in ``drops_p<i>``.
    m_axis_p<i> : Out(AxiStreamSignature(64))
        Frames sent on plane i: data frames and ACK/SACK/NACK frames, whole
        frames in round robin (:class:`~mrcnic.rtl.plane_mux.PlaneMux`).
        Backpressure on one plane stalls the transmit pipeline (head of line, v1).
    globals : In(NicGlobals)
        Source MAC/IPv6, DSCP, path MTU of every frame this NIC builds.
    next_hop_mac : In(ArrayLayout(48, ports))
        Destination MAC of each plane's first hop (data and ACK frames).
    pt_w_en, pt_w_addr, pt_w_data : In(1), In(8), In(PathEntry)
        Path-table write.  **Written to both spray schedulers**: the transmit
        one (data) and the ACK one (reverse paths of the ACKs this NIC sends).
        The two tables hold the same entries -- a QP's EV profile is the set of
        paths to its peer, for its data and for its ACKs alike; the duplication
        costs a second table but keeps the transmit scheduler's one decision per
        clock for data only.
    pt_st_en, pt_st_addr, pt_st_state : In(1), In(8), In(EvState)
        EV state update (GOOD / ASSUMED_BAD / DENIED), applied to both tables one cycle
        later (with ``ev_st_*``).
    seg_w_en, seg_w_addr, seg_w_data : In(1), In(8), In(128)
        SRH segment memory write (data frames' uSID carriers).
    qp_w_en, qp_w_addr, qp_w_data : In(1), In(3), In(QpContext)
        QP transmit context.  Also gives the receive side the EV profile its
        ACKs to that QP's peer are sprayed over (``profile_base/count``).
    rxqp_w_en, rxqp_w_addr, rxqp_w_data : In(1), In(3), In(RxQpContext)
        QP receive context (QPN, peer QPN, peer uSID, first expected PSN).
    mr_w_en, mr_w_addr, mr_w_data : In(1), In(2), In(MemRegion)
        Registered memory regions (rkey, VA range, host base).
    own_usid, locator_block, own_ip, trim_dscp : In(16), In(32), In(128), In(6)
        This NIC's uSID and locator block (arrival DA check), IPv6 address,
        and the DSCP of trimmed packets.
    ack_every, ack_timeout : In(8), In(16)
        ACK coalescing: an ACK every N data packets or T cycles (SackTracker).
    avoid : In(paths)
        Transmit entries to skip (ECN steering hook); 0 = none.
    wr_refused : Out(32)
        Work requests refused (zero length, misaligned, unknown QP).
    no_path : Out(1)
        The current request's EV profile has no eligible entry (traffic waits).
    data_frames, ack_frames : Out(32)
        Data frames and ACK frames sent, all planes (wrap).
    acks_received : Out(32)
        ACK/SACK/NACK/probe-reply frames received and validated (wrap).
    placed_bytes, duplicates, out_of_window, acks_sent, accepted : Out(32)
        Receive counters (see :class:`~mrcnic.rtl.rx.RxPipeline`).
    drops_p<i> : Out(ArrayLayout(32, N_REASONS))
        Per-reason drop counters of plane i's parser (``rx_parser.DropReason``).
    rxcnt_rd_stb, rxcnt_rd_addr, rxcnt_rd_data, rx_drop_stb : In(1), In(6), Out(32), Out(1)
        The receive parsers' counter words read from their block RAM (``RxPipeline.cnt_rd_*``,
        ``rx_parser.CNT_RD_LATENCY`` cycles) and their drop pulse (``RxPipeline.drop_stb``).
    rel_w_en, rel_w_addr, rel_w_data : In(1), In(3), In(RelQpConfig)
        Sender-reliability context of a QP (``mrcnic.config.rel_qp_configs``):
        EV profile, ev_min_active, ACK timeout exponent, retries, probe
        interval, ECN hold, NSCC parameters.  Required before sending on the QP.
    cc_w_en, cc_w_addr, cc_w_data : In(1), In(3), In(NsccConfig)
        Live CC-profile (NSCC parameter) change of a QP, without resetting its
        PSN state (``SenderReliability.cc_w_*``).
    send_cpl : Out(stream.Signature(Completion))
        Send completions: a message every PSN of which the peer acknowledged.
    ev_event : Out(stream.Signature(EvEvent))
        EV events (ASSUMED_BAD on an ACK timeout, GOOD after a probe reply,
        MIN_ACTIVE when ev_min_active held an EV GOOD).  Take them or they are
        counted as dropped once the event FIFO is full.
    retransmits, timeouts, trim_nacks, ecn_echoes, clean_acks, probes_sent, probe_replies, ev_events : Out(32)
        Sender-reliability counters.
    cwnd : Out(ArrayLayout(32, qps))
        NSCC congestion window of each QP, bytes.
    probe_req : In(stream.Signature(ManualProbe))
        Controller EV probes (OCP MRC EV probe on {EV, port} of a path-table
        entry).  Taken when the probe path is free (sender reliability's own
        probes share it).  One is tracked at a time: a new one replaces the
        pending one, whose reply is then ignored.
    probe_reply : Out(stream.Signature(ProbeReply))
        The reply of the pending controller probe (matched by the echoed EV and
        time stamp), with its RTT in ns; 4-deep FIFO, a reply that finds it
        full is dropped.  The reply is written into the FIFO 3 cycles after its ACK's
        transfer on the receive pipeline's ``ack_rx``.  No reply (broken path) means nothing comes out.
    evcnt_rd_en, evcnt_rd_addr, evcnt_rd_data : In(1), In(8), Out(EvCounters)
        Per-EV counters (:class:`~mrcnic.rtl.ev_counters.EvCounterBank`):
        data packets sent (new and retransmitted), clean ACKs, ECN echoes, trim
        NACKs, ACK timeouts, probes sent, per path-table entry; read latency ``EvCounterBank.READ_LATENCY`` (14 cycles).
    evcnt_dropped : Out(32)
        Per-EV counter increments lost to a full queue.
    ev_st_en, ev_st_addr, ev_st_state : Out(1), Out(8), Out(EvState)
        The EV state update applied to every path-table copy this cycle
        (``pt_st_*`` or sender reliability's ASSUMED_BAD / GOOD), so a
        controller's copy of the table can follow the NIC's own changes.

    Latency and throughput are those of the pipelines plus zero cycles for the
    plane multiplexers (combinational pass-through, frame-level arbitration).
    Data and ACK frames share each plane at one beat per clock.
    """

    def __init__(self, ports: "int | None" = None, qps: "int | None" = None,
                 paths: "int | None" = None, window: "int | None" = None,
                 shared_parser: "bool | None" = None, plane_guard: "int | None" = None,
                 clk_ns: "int | None" = None, *, params: "NicParams | None" = None):
        # one check of every parameter (NicParams.__post_init__); the blocks get the set
        p = NicParams.of(params, ports=ports, qps=qps, paths=paths, window=window,
                         shared_parser=shared_parser, plane_guard=plane_guard, clk_ns=clk_ns)
        from .rx_parser import N_REASONS
        self.params = p
        ports, qps, paths = p.ports, p.qps, p.paths
        self.ports, self.qps, self.paths, self.window = ports, qps, paths, p.window
        self.shared_parser = p.shared_parser
        self.plane_guard = p.plane_guard
        self.clk_ns = p.clk_ns
        dw = p.data_width
        members = {
            "s_wr": In(stream.Signature(WorkRequest)),
            "recv_cpl": Out(stream.Signature(Completion)),
            "m_axi": Out(Axi4Signature(32, 64, 4)),
            "globals": In(NicGlobals),
            "next_hop_mac": In(data.ArrayLayout(48, ports)),
            "pt_w_en": In(1), "pt_w_addr": In(8), "pt_w_data": In(PathEntry),
            "pt_st_en": In(1), "pt_st_addr": In(8), "pt_st_state": In(EvState),
            "seg_w_en": In(1), "seg_w_addr": In(8), "seg_w_data": In(128),
            "qp_w_en": In(1), "qp_w_addr": In(3), "qp_w_data": In(QpContext),
            "rxqp_w_en": In(1), "rxqp_w_addr": In(3), "rxqp_w_data": In(RxQpContext),
            "mr_w_en": In(1), "mr_w_addr": In(2), "mr_w_data": In(MemRegion),
            "own_usid": In(16), "locator_block": In(32), "own_ip": In(128), "trim_dscp": In(6),
            "ack_every": In(8), "ack_timeout": In(16),
            "avoid": In(paths),
            "wr_refused": Out(32), "no_path": Out(1),
            "data_frames": Out(32), "ack_frames": Out(32), "acks_received": Out(32),
            "placed_bytes": Out(32), "duplicates": Out(32), "out_of_window": Out(32),
            "acks_sent": Out(32), "accepted": Out(32),
            "rxcnt_rd_stb": In(1), "rxcnt_rd_addr": In(6), "rxcnt_rd_data": Out(32),
            "rx_drop_stb": Out(1),
            "rel_w_en": In(1), "rel_w_addr": In(3), "rel_w_data": In(RelQpConfig),
            "cc_w_en": In(1), "cc_w_addr": In(3), "cc_w_data": In(NsccConfig),
            "send_cpl": Out(stream.Signature(Completion)),
            "ev_event": Out(stream.Signature(EvEvent)),
            "retransmits": Out(32), "timeouts": Out(32), "trim_nacks": Out(32),
            "ecn_echoes": Out(32), "clean_acks": Out(32), "probes_sent": Out(32),
            "probe_replies": Out(32), "ev_events": Out(32),
            "cwnd": Out(data.ArrayLayout(32, qps)),
            "probe_req": In(stream.Signature(ManualProbe)),
            "probe_reply": Out(stream.Signature(ProbeReply)),
            "evcnt_rd_en": In(1), "evcnt_rd_addr": In(8), "evcnt_rd_data": Out(EvCounters),
            "evcnt_dropped": Out(32),
            "ev_st_en": Out(1), "ev_st_addr": Out(8), "ev_st_state": Out(EvState),
        }
        for i in range(ports):
            members[f"s_axis_p{i}"] = In(AxiStreamSignature(dw))
            members[f"m_axis_p{i}"] = Out(AxiStreamSignature(dw))
            members[f"drops_p{i}"] = Out(data.ArrayLayout(32, N_REASONS))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self.ports
        p = self.params
        m.submodules.tx = tx = TxPipeline(reliability=True, ack_client=True, params=p)
        m.submodules.rel = rel = SenderReliability(params=p)
        # The probe path's copy of the path records: written like the other copies, read
        # once per probe.  A probe read never shares a cycle with a record write (it waits
        # one cycle), so the block RAM needs no read/write collision logic.
        # Only what a probe frame uses (EV, port, DA: 163 bits, 5 block RAMs at 32 entries).
        m.submodules.probe_entries = probe_mem = Memory(
            shape=_ProbePath, depth=self.paths, init=[],
            attrs={"no_rw_check": 1, "ram_style": "block"})
        probe_w = probe_mem.write_port()
        probe_table = probe_mem.read_port(transparent_for=())
        m.submodules.rx = rx = RxPipeline(params=p)

        # EV state updates: the controller's (pt_st_*) win; otherwise sender
        # reliability's (ASSUMED_BAD on an ACK timeout, GOOD after a probe reply).
        # Every copy of the path table gets the same update, one cycle later from flip-flops
        # (the choice and the CSR decode stay out of the tables' write-enable paths).
        st_en, st_addr, st_state = Signal(), Signal(8), Signal(EvState)
        with m.If(self.pt_st_en):
            m.d.sync += [st_en.eq(1), st_addr.eq(self.pt_st_addr), st_state.eq(self.pt_st_state)]
        with m.Else():
            m.d.sync += [st_en.eq(rel.st_en), st_addr.eq(rel.st_addr), st_state.eq(rel.st_state)]
        m.d.comb += [self.ev_st_en.eq(st_en), self.ev_st_addr.eq(st_addr),
                     self.ev_st_state.eq(st_state)]
        pbits = (self.paths - 1).bit_length()
        m.d.comb += [
            probe_w.en.eq(self.pt_w_en & (self.pt_w_addr < self.paths)),
            probe_w.addr.eq(self.pt_w_addr[:pbits]), probe_w.data.ev.eq(self.pt_w_data.ev),
            probe_w.data.port.eq(self.pt_w_data.port), probe_w.data.da.eq(self.pt_w_data.da),
        ]

        # ---- plane guard: a plane whose EVs time out together is avoided as a whole -------
        m.submodules.plane_guard = guard = PlaneGuard(params=p)
        m.d.comb += [
            guard.w_en.eq(self.pt_w_en), guard.w_addr.eq(self.pt_w_addr),
            guard.w_data.eq(self.pt_w_data),
            guard.ev_valid.eq(rel.event.valid & rel.event.ready), guard.ev.eq(rel.event.payload),
        ]

        # ---- transmit pipeline ------------------------------------------------------------
        wiring.connect(m, wiring.flipped(self.s_wr), tx.s_wr)
        m.d.comb += [
            tx.globals.eq(self.globals), tx.next_hop_mac.eq(self.next_hop_mac),
            tx.pt_w_en.eq(self.pt_w_en), tx.pt_w_addr.eq(self.pt_w_addr),
            tx.pt_w_data.eq(self.pt_w_data),
            tx.pt_st_en.eq(st_en), tx.pt_st_addr.eq(st_addr), tx.pt_st_state.eq(st_state),
            tx.seg_w_en.eq(self.seg_w_en), tx.seg_w_addr.eq(self.seg_w_addr),
            tx.seg_w_data.eq(self.seg_w_data),
            tx.qp_w_en.eq(self.qp_w_en), tx.qp_w_addr.eq(self.qp_w_addr),
            tx.qp_w_data.eq(self.qp_w_data),
            tx.avoid.eq(self.avoid | rel.avoid | guard.avoid),
            self.wr_refused.eq(tx.wr_refused), self.no_path.eq(tx.no_path),
        ]

        # ---- receive pipeline -------------------------------------------------------------
        m.d.comb += [
            rx.own_usid.eq(self.own_usid), rx.locator_block.eq(self.locator_block),
            rx.own_ip.eq(self.own_ip), rx.trim_dscp.eq(self.trim_dscp),
            rx.globals.eq(self.globals), rx.next_hop_mac.eq(self.next_hop_mac),
            rx.ack_every.eq(self.ack_every), rx.ack_timeout.eq(self.ack_timeout),
            rx.qp_w_en.eq(self.rxqp_w_en), rx.qp_w_addr.eq(self.rxqp_w_addr),
            rx.qp_w_data.eq(self.rxqp_w_data),
            # A QP's ACKs go back over the QP's own EV profile (its transmit context).
            rx.ackq_w_en.eq(self.qp_w_en), rx.ackq_w_addr.eq(self.qp_w_addr),
            rx.ackq_w_data.eq(self.qp_w_data),
            rx.mr_w_en.eq(self.mr_w_en), rx.mr_w_addr.eq(self.mr_w_addr),
            rx.mr_w_data.eq(self.mr_w_data),
            self.placed_bytes.eq(rx.placed_bytes), self.duplicates.eq(rx.duplicates),
            self.out_of_window.eq(rx.out_of_window), self.acks_sent.eq(rx.acks_sent),
            self.accepted.eq(rx.accepted),
            rx.cnt_rd_stb.eq(self.rxcnt_rd_stb), rx.cnt_rd_addr.eq(self.rxcnt_rd_addr),
            self.rxcnt_rd_data.eq(rx.cnt_rd_data), self.rx_drop_stb.eq(rx.drop_stb),
        ]
        wiring.connect(m, rx.cpl, wiring.flipped(self.recv_cpl))
        for i in range(n):
            wiring.connect(m, wiring.flipped(getattr(self, f"s_axis_p{i}")),
                           getattr(rx, f"s_axis_p{i}"))
            m.d.comb += getattr(self, f"drops_p{i}").eq(getattr(rx, f"drops_p{i}"))

        # ---- sender reliability (MRC): SACK/NACK, RTO, EV failover, probes, NSCC -----------
        self._wire_reliability(m, tx, rx, rel, probe_table)

        # ---- ACK reverse paths: the transmit scheduler's second client (same path table) ----
        wiring.connect(m, rx.spray_req, tx.ack_spray_req)
        wiring.connect(m, tx.ack_spray_decision, rx.spray_decision)

        # ---- one AXI4 manager: reads for TX, writes for RX ----------------------------------
        for sig, sub in ((Axi4ReadSignature(32, 64, 4), tx.m_axi),
                         (Axi4WriteSignature(32, 64, 4), rx.m_axi)):
            for name, member in sig.members.items():
                ours, theirs = getattr(self.m_axi, name), getattr(sub, name)
                m.d.comb += (ours.eq(theirs) if member.flow == Out else theirs.eq(ours))

        # ---- per plane: data frames and ACK frames onto one port -----------------------------
        data_count = Signal(32)
        ack_count = Signal(32)
        for i in range(n):
            mux = PlaneMux(inputs=2, data_width=p.data_width)
            m.submodules[f"mux_p{i}"] = mux
            wiring.connect(m, getattr(tx, f"m_axis_p{i}"), mux.s_axis_0)
            wiring.connect(m, getattr(rx, f"m_axis_p{i}"), mux.s_axis_1)
            wiring.connect(m, mux.m_axis, wiring.flipped(getattr(self, f"m_axis_p{i}")))
        muxes = [getattr(m.submodules, f"mux_p{i}") for i in range(n)]
        m.d.comb += [
            data_count.eq(sum(mx.frames_0 for mx in muxes)),
            ack_count.eq(sum(mx.frames_1 for mx in muxes)),
            self.data_frames.eq(data_count), self.ack_frames.eq(ack_count),
        ]
        return m

    def _wire_reliability(self, m, tx, rx, rel, probe_table):
        """Join :class:`SenderReliability` to the pipelines (MRC sender side).

        * the segmenter's SentInfo tap feeds it; its RetxReq go back to the segmenter;
        * received ACK/SACK/NACK/probe replies (``rx.ack_rx``) feed it;
        * its per-QP window gate (``tx_ok``) and oldest unacked PSN (``una``)
          drive the segmenter; QPs beyond ``qps`` stay closed;
        * its ``avoid`` mask is ORed into the transmit scheduler's (ECN steering);
        * each ProbeReq reads its entry's EV, port and DA from ``probe_table``
          (the read port of a third copy of those fields, written like the path
          tables; the entry's other fields are 0 in the probe request: probe
          frames do not use them) and goes to the ACK generator as a probe frame;
        * EV events and send completions leave the NIC;
        * controller probes (``probe_req``) share the probe path; the reply whose
          echoed EV and time stamp match the pending one leaves on ``probe_reply``;
        * per-EV counters count sprayed packets, reliability's per-entry ACK /
          timeout outcomes and probes;
        * a controller state or entry write clears reliability's ASSUMED_BAD mark.
        """
        wiring.connect(m, tx.sent, rel.sent)
        wiring.connect(m, rel.retx, tx.retx)
        wiring.connect(m, rx.ack_rx, rel.ack)
        wiring.connect(m, rel.event, wiring.flipped(self.ev_event))
        wiring.connect(m, rel.send_cpl, wiring.flipped(self.send_cpl))
        m.d.comb += [
            tx.tx_ok.eq(rel.tx_ok),
            rel.eligible.eq(tx.eligible),
            rel.cfg_w_en.eq(self.rel_w_en), rel.cfg_w_addr.eq(self.rel_w_addr),
            rel.cfg_w_data.eq(self.rel_w_data),
            rel.cc_w_en.eq(self.cc_w_en), rel.cc_w_addr.eq(self.cc_w_addr),
            rel.cc_w_data.eq(self.cc_w_data),
            rel.recycle.ready.eq(1),
            self.cwnd.eq(rel.cwnd),
            self.retransmits.eq(tx.retransmits), self.timeouts.eq(rel.timeouts),
            self.trim_nacks.eq(rel.trim_nacks), self.ecn_echoes.eq(rel.ecn_echoes),
            self.clean_acks.eq(rel.clean_acks), self.probe_replies.eq(rel.probe_replies),
            self.ev_events.eq(rel.ev_events), self.probes_sent.eq(rx.probes_sent),
        ]
        for q in range(self.qps):
            m.d.comb += tx.una[q].eq(rel.una[q])
        with m.If(rx.ack_rx.valid & rx.ack_rx.ready):
            m.d.sync += self.acks_received.eq(self.acks_received + 1)

        # the controller's entry writes reach sender reliability one cycle later, from flip-flops
        # (its ASSUMED_BAD bookkeeping then has its own cycle; no CSR decode in that path)
        m.d.sync += [rel.ctl_st_en.eq(self.pt_st_en | self.pt_w_en),
                     rel.ctl_st_addr.eq(Mux(self.pt_st_en, self.pt_st_addr, self.pt_w_addr))]

        # Probe path: ProbeReq (reliability) or ManualProbe (controller) -> read the
        # entry (one cycle) -> ProbeFrameReq.  Reliability's probes have priority.
        req = Signal(ProbeReq)
        req_manual = Signal()
        pending = Signal()
        out = Signal(ProbeFrameReq)
        out_valid = Signal()
        free = ~pending & ~out_valid & ~self.pt_w_en     # no read in a record-write cycle
        take_rel = rel.probe.valid & free
        take_man = self.probe_req.valid & free & ~rel.probe.valid
        man = Signal(ProbeReq)
        # The probe copy is read every cycle (no read enable: no enable fan-out over the read
        # port) at the address of the request that would be taken; ``pending`` (the cycle
        # after a take) uses the read of the take's cycle, and no take happens in a record-
        # write cycle, so a read that meets a write is never used.
        m.d.comb += [
            man.qp.eq(self.probe_req.payload.qp), man.index.eq(self.probe_req.payload.index),
            man.ts.eq(rel.now_ns),
            rel.probe.ready.eq(free),
            self.probe_req.ready.eq(free & ~rel.probe.valid),
            probe_table.en.eq(1),
            probe_table.addr.eq(Mux(rel.probe.valid, rel.probe.payload.index,
                                    self.probe_req.payload.index)),
            rx.probe.payload.eq(out), rx.probe.valid.eq(out_valid),
        ]
        with m.If(take_rel):
            m.d.sync += [req.eq(rel.probe.payload), req_manual.eq(0), pending.eq(1)]
        with m.Elif(take_man):
            m.d.sync += [req.eq(man), req_manual.eq(1), pending.eq(1)]
        # the pending controller probe: {index, EV, ts}, armed from ``out`` one cycle after
        # ``pending`` (the block-RAM read data goes to ``out`` only: its register becomes the
        # EBR's output register on ECP5, enable ``pending``)
        pm_valid, pm_index, pm_ev, pm_ts = Signal(), Signal(8), Signal(32), Signal(32)
        pm_arm = Signal()
        m.d.sync += pm_arm.eq(pending & req_manual)
        with m.If(pending):
            m.d.sync += [
                out.qp.eq(req.qp), out.probe_id.eq(req.index), out.ts.eq(req.ts),
                out.entry.ev.eq(probe_table.data.ev), out.entry.port.eq(probe_table.data.port),
                out.entry.da.eq(probe_table.data.da), out_valid.eq(1), pending.eq(0),
            ]
        with m.If(rx.probe.valid & rx.probe.ready):
            m.d.sync += out_valid.eq(0)

        # controller probe replies: a probe-reply ACK echoing the pending EV and ts
        m.submodules.probe_reply_fifo = prf = fifo.SyncFIFOBuffered(
            width=ProbeReply.as_shape().size, depth=4)
        # (the received ACK is registered first: the 64-bit match is not in the ACK path)
        a = rx.ack_rx
        reply = Signal(ProbeReply)
        a_reply, a_ev, a_ts = Signal(), Signal(32), Signal(32)
        m.d.sync += [a_reply.eq(a.valid & a.ready & (a.payload.kind == RxKind.ACK)
                                & ((a.payload.ack.flags & wire.SACK_PROBE_REPLY) != 0)),
                     a_ev.eq(a.payload.ack.ev), a_ts.eq(a.payload.ack.ts)]
        # the 64-bit match is registered (two 32-bit compares), then the hit (hit_q, reply_q): the FIFO's
        # write enable comes from a flip-flop (two cycles more; the RTT is taken with the time
        # of the cycle after the ACK, as before: b_now).  A match made against a probe that is
        # replaced in that cycle (pm_arm: b_kept low) is void.
        b_reply, b_ev_eq, b_ts_eq, b_kept, b_now = (Signal(), Signal(), Signal(), Signal(),
                                                     Signal(32))
        m.d.sync += [b_reply.eq(a_reply), b_ev_eq.eq(a_ev == pm_ev), b_ts_eq.eq(a_ts == pm_ts),
                     b_kept.eq(~pm_arm), b_now.eq(rel.now_ns)]
        hit = Signal()
        hit_q = Signal()
        reply_q = Signal(ProbeReply)
        m.d.comb += [hit.eq(b_reply & b_ev_eq & b_ts_eq & b_kept & pm_valid),
                     reply.index.eq(pm_index), reply.rtt_ns.eq(b_now - pm_ts)]
        m.d.sync += [hit_q.eq(hit), reply_q.eq(reply)]
        m.d.comb += [prf.w_en.eq(hit_q), prf.w_data.eq(reply_q),
                     self.probe_reply.valid.eq(prf.r_rdy), self.probe_reply.payload.eq(prf.r_data),
                     prf.r_en.eq(self.probe_reply.ready)]
        with m.If(hit):
            m.d.sync += pm_valid.eq(0)
        # a probe armed in the cycle of a hit (of the previous probe) stays armed
        with m.If(pm_arm):
            m.d.sync += [pm_valid.eq(1), pm_index.eq(out.probe_id[:8]),
                         pm_ev.eq(out.entry.ev), pm_ts.eq(out.ts)]

        # per-EV counters
        m.submodules.evcnt = evcnt = EvCounterBank(params=self.params)
        # the sent tap is registered before the bank (the handshake is the transmit
        # pipeline's and reliability's; the counters take it one cycle later)
        sent = tx.sent
        sent_q, sent_idx_q = Signal(), Signal(8)
        m.d.sync += [sent_q.eq(sent.valid & sent.ready), sent_idx_q.eq(sent.payload.index)]
        m.d.comb += [
            evcnt.sent_en.eq(sent_q), evcnt.sent_index.eq(sent_idx_q),
            evcnt.stat_en.eq(rel.stat_en), evcnt.stat_index.eq(rel.stat_index),
            evcnt.stat_kind.eq(rel.stat_kind),
            evcnt.probe_en.eq(rx.probe.valid & rx.probe.ready),
            evcnt.probe_index.eq(out.probe_id[:8]),
            evcnt.rd_en.eq(self.evcnt_rd_en), evcnt.rd_addr.eq(self.evcnt_rd_addr),
            self.evcnt_rd_data.eq(evcnt.rd_data), self.evcnt_dropped.eq(evcnt.dropped),
        ]
