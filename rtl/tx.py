"""Transmit pipeline: work requests in, sprayed RoCEv2/SRv6 frames out, one stream per plane.

::

    s_wr ─► Segmenter ─(TxPacket)─► HeaderGen ─(header beats + ICRC view)─┐
              │  ▲ spray_req/decision                                    ▼
              │  └──────── SprayScheduler (path table)              FrameMerge ─► m_axis_p0..N-1
              └─ m_axi (AXI4 read) ─(payload beats)──────────────────────┘

Sources: IBTA RoCEv2 annex A17, RFC 8754, RFC 9800, the MRC paper (per-packet
EV spraying, RETH on every packet).
"""

from amaranth.hdl import Const, Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import Axi4ReadSignature
from .axis import AxiStreamSignature
from .frame_merge import FrameMerge
from .header_gen import HeaderGen
from .layouts import (
    MAX_PATHS,
    MAX_QPS,
    Decision,
    EvState,
    NicGlobals,
    PathEntry,
    QpContext,
    RetxReq,
    SentInfo,
    SprayReq,
    WorkRequest,
)
from .params import NicParams, check_paths, check_ports, check_qps, param
from .segmenter import Segmenter
from .spray import SprayScheduler

__all__ = ["TxPipeline"]


class TxPipeline(wiring.Component):
    """The whole transmit path of one NIC.

    Parameters
    ----------
    ports : int
        Planes (1..8): one 64-bit AXI-Stream output each (default 4).
    paths : int
        Path-table entries, a power of two in 16..256 (default 256).
    reliability : bool
        Wire the segmenter's retransmission/window/SentInfo ports out (below).
    qps : int
        QP contexts in the segmenter (1..8, ``MAX_QPS``); the NIC passes its own
        QP count so the segmenter's per-QP state is sized for it.  Work requests,
        context writes and retransmission requests for ``qp >= qps`` are refused
        or ignored as the segmenter documents; the ``tx_ok``/``una`` ports stay
        ``MAX_QPS`` wide (entries >= ``qps`` unused).  Default ``MAX_QPS``.
    params : NicParams
        The NIC's parameters (:class:`~mrcnic.rtl.params.NicParams`): ``ports``, ``paths``
        and ``qps`` are taken from it (the keywords may then be left out), and it is
        handed to the blocks built here.

    ack_client : bool
        Also serve a second spray client (the receive pipeline's ACK reverse
        paths) from the same scheduler and path table
        (:class:`~mrcnic.rtl.spray.SprayScheduler` ``clients=2``).

    Attributes
    ----------
    s_wr : In(stream WorkRequest)
        Host work requests (RDMA WRITE / WRITE with immediate).
    globals : In(NicGlobals)
        Source MAC/IPv6, DSCP, path MTU (static while traffic runs).
    next_hop_mac : In(ArrayLayout(48, ports))
        Destination MAC of each plane's first hop.
    pt_w_en, pt_w_addr, pt_w_data : In(1), In(8), In(PathEntry)
        Path-table write port (any time; takes effect within a few cycles).
    pt_st_en, pt_st_addr, pt_st_state : In(1), In(8), In(EvState)
        EV state update (GOOD / ASSUMED_BAD / DENIED) without rewriting the entry.
    seg_w_en, seg_w_addr, seg_w_data : In(1), In(8), In(128)
        SRH segment memory write port (uSID carriers).
    qp_w_en, qp_w_addr, qp_w_data : In(1), In(3), In(QpContext)
        QP context write port (resets the QP's next PSN to ``start_psn``).
    avoid : In(paths)
        Entries to skip for now (ECN steering hook); 0 = none.
    m_axi : Out(Axi4ReadSignature(32, 64, 4))
        Payload reads from host memory.
    m_axis_p<i> : Out(AxiStreamSignature(64))
        Frames of plane i (Ethernet without FCS).
    wr_refused : Out(32)
        Work requests refused (zero length, misaligned, unknown QP).
    no_path : Out(1)
        The current request's EV profile has no eligible entry (traffic waits).
    ack_spray_req, ack_spray_decision : In(stream SprayReq), Out(stream Decision)
        Only with ``ack_client=True``: spray requests of the ACKs and their
        decisions (over the same path table; ``avoid`` does not apply to them).
    retx, sent, tx_ok, una, eligible, retransmits
        Only with ``reliability=True``: the segmenter's retransmission request
        input, its SentInfo tap, the per-QP window gate, the per-QP oldest
        unacknowledged PSN, the path table's eligibility bitmap, and the count
        of retransmitted packets (see :class:`~mrcnic.rtl.segmenter.Segmenter`
        and :class:`~mrcnic.rtl.reliability.SenderReliability`).  Without it
        these are tied off: no retransmissions, windows always open.

    Throughput: one beat per clock on the sum of the plane outputs, with no
    idle cycle between back-to-back frames (measured by ``mrcnic bench tx``).
    Backpressure on one plane stalls all of them (head-of-line, v1).
    """

    def __init__(self, ports: "int | None" = None, paths: "int | None" = None,
                 reliability: bool = False, qps: "int | None" = None, ack_client: bool = False, *,
                 params: "NicParams | None" = None):
        ports = check_ports(param(params, "ports", ports, 4))
        paths = check_paths(param(params, "paths", paths, MAX_PATHS))
        qps = check_qps(param(params, "qps", qps, MAX_QPS))
        self._params = params
        self._ports, self._paths, self._rel, self._qps = ports, paths, reliability, qps
        self._ack_client = ack_client
        members = {
            "s_wr": In(stream.Signature(WorkRequest)),
            "globals": In(NicGlobals),
            "next_hop_mac": In(data.ArrayLayout(48, ports)),
            "pt_w_en": In(1), "pt_w_addr": In(8), "pt_w_data": In(PathEntry),
            "pt_st_en": In(1), "pt_st_addr": In(8), "pt_st_state": In(EvState),
            "seg_w_en": In(1), "seg_w_addr": In(8), "seg_w_data": In(128),
            "qp_w_en": In(1), "qp_w_addr": In(3), "qp_w_data": In(QpContext),
            "avoid": In(paths),
            "m_axi": Out(Axi4ReadSignature(32, 64, 4)),
            "wr_refused": Out(32),
            "no_path": Out(1),
        }
        for i in range(ports):
            members[f"m_axis_p{i}"] = Out(AxiStreamSignature(64))
        if ack_client:
            members.update({"ack_spray_req": In(stream.Signature(SprayReq)),
                            "ack_spray_decision": Out(stream.Signature(Decision))})
        if reliability:
            members.update({
                "retx": In(stream.Signature(RetxReq)),
                "sent": Out(stream.Signature(SentInfo)),
                "tx_ok": In(MAX_QPS),
                "una": In(data.ArrayLayout(24, MAX_QPS)),
                "eligible": Out(paths),
                "retransmits": Out(32),
            })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.spray = spray = SprayScheduler(depth=self._paths,
                                                    clients=2 if self._ack_client else 1,
                                                    params=self._params)
        if self._ack_client:
            wiring.connect(m, wiring.flipped(self.ack_spray_req), spray.req_1)
            wiring.connect(m, spray.decision_1, wiring.flipped(self.ack_spray_decision))
        m.submodules.segmenter = seg = Segmenter(qps=self._qps, params=self._params)
        m.submodules.header_gen = hdr = HeaderGen(ports=self._ports, params=self._params)
        m.submodules.frame_merge = merge = FrameMerge(ports=self._ports, params=self._params)

        wiring.connect(m, wiring.flipped(self.s_wr), seg.wr)
        wiring.connect(m, seg.spray_req, spray.req)
        wiring.connect(m, spray.decision, seg.spray_decision)
        wiring.connect(m, seg.pkt, hdr.pkt)
        wiring.connect(m, hdr.m_axis, merge.s_hdr)
        wiring.connect(m, seg.payload, merge.s_payload)
        wiring.connect(m, wiring.flipped(self.m_axi), seg.m_axi)
        for i in range(self._ports):
            wiring.connect(m, getattr(merge, f"m_axis_p{i}"),
                           wiring.flipped(getattr(self, f"m_axis_p{i}")))

        m.d.comb += [
            spray.w_en.eq(self.pt_w_en), spray.w_addr.eq(self.pt_w_addr),
            spray.w_data.eq(self.pt_w_data),
            spray.st_en.eq(self.pt_st_en), spray.st_addr.eq(self.pt_st_addr),
            spray.st_state.eq(self.pt_st_state),
            spray.avoid.eq(self.avoid),
            hdr.globals.eq(self.globals), hdr.next_hop_mac.eq(self.next_hop_mac),
            hdr.seg_w_en.eq(self.seg_w_en), hdr.seg_w_addr.eq(self.seg_w_addr),
            hdr.seg_w_data.eq(self.seg_w_data),
            seg.qp_w_en.eq(self.qp_w_en), seg.qp_w_addr.eq(self.qp_w_addr),
            seg.qp_w_data.eq(self.qp_w_data),
            seg.pmtu_log2.eq(self.globals.pmtu_log2),
            self.wr_refused.eq(seg.wr_refused),
            self.no_path.eq(spray.no_path),
        ]
        if self._rel:
            wiring.connect(m, wiring.flipped(self.retx), seg.retx)
            wiring.connect(m, seg.sent, wiring.flipped(self.sent))
            m.d.comb += [seg.una.eq(self.una.as_value()[:24 * self._qps]),
                         seg.tx_ok.eq(self.tx_ok[:self._qps]),
                         self.eligible.eq(spray.eligible),
                         self.retransmits.eq(seg.retransmits)]
        else:
            # No sender reliability: no retransmission requests, every message
            # released at once, windows always open, SentInfo tap ignored.
            m.d.comb += [seg.retx.valid.eq(0), seg.una.eq(seg.next_psn),
                         seg.tx_ok.eq(Const(-1, self._qps)),
                         seg.sent.ready.eq(1)]
        return m
