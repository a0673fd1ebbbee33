"""Receive pipeline: frames from every plane in, payload placed in host memory, ACKs out.

::

    s_axis_p0 ─► RxParser ─┐                      ┌─► Placement ─► m_axi (AXI4 writes)
    s_axis_p1 ─► RxParser ─┼─► RxArbiter ─► SackTracker ─┤        └─► cpl (after the writes)
       ...                 │        └─► ack_rx (ACKs, for sender reliability)
                           └─ (one parser per plane)      └─► AckGen ─► m_axis_p0..N-1
                                                                ▲ reverse path: spray_req/decision
    (``shared_parser``: s_axis_p0..N-1 ─► PlaneMux ─► one RxParser, frames tagged by plane)

Every byte lands exactly once, at its own VA, or not at all: the parser
validates and holds a frame until its ICRC checks, the tracker places only
new PSNs inside the window, placement writes only the bytes it is told.

Sources: IBTA RoCEv2 annex A17, RFC 8754, RFC 9800, the MRC paper.
"""

from amaranth.hdl import Array, Cat, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .ack_gen import AckGen, ProbeFrameReq
from .axi import Axi4WriteSignature
from .axis import AxiStreamSignature
from .layouts import (MAX_QPS, Completion, Decision, MemRegion, NicGlobals, QpContext, RxPacket,
                      RxQpContext, SprayReq)
from .placement import Placement
from .plane_mux import PlaneMux
from .rx_arbiter import RxArbiter
from .rx_parser import RxParser
from .params import CORE_REGIONS, NicParams, check_bool, check_ports, check_qps, check_window, param
from .sack_tracker import SackTracker

__all__ = ["RxPipeline"]


class RxPipeline(wiring.Component):
    """The whole receive path of one NIC.

    Parameters
    ----------
    ports : int
        Planes (1..8): one 64-bit AXI-Stream input and one ACK output each (default 4).
    qps : int
        QP contexts (1..8, default ``MAX_QPS``).
    window : int
        PSN window of the SACK tracker (packets): a power of two in 64..4096 (default 256).
    shared_parser : bool
        One :class:`RxParser` for all planes behind a frame-level round-robin
        :class:`~mrcnic.rtl.plane_mux.PlaneMux` (its ``source`` tags each frame
        with its plane) instead of one parser per plane.  The planes then share
        one beat per clock (8 Gb/s at 125 MHz): enough for boards whose planes
        are 1 Gb/s Ethernet ports with store-and-forward MACs (frames arrive
        whole); per-plane drop counters are kept.  Default False.
    params : NicParams
        The NIC's parameters (:class:`~mrcnic.rtl.params.NicParams`): ``ports``, ``qps``,
        ``window`` and ``shared_parser`` are taken from it (the keywords may then be left
        out), and it is handed to the blocks built here.  The parsers hold
        ``CORE_REGIONS`` (4) memory regions whatever ``params.regions`` says.

    Attributes
    ----------
    s_axis_p<i> : In(AxiStreamSignature(64))
        Frames received on plane i (Ethernet without FCS).
    m_axis_p<i> : Out(AxiStreamSignature(64))
        ACK / SACK / NACK / probe-reply frames for plane i.
    own_usid, locator_block, own_ip, trim_dscp : In(16), In(32), In(128), In(6)
        This NIC's identity for DA checks, and the trim DSCP.
    globals, next_hop_mac : In(NicGlobals), In(ArrayLayout(48, ports))
        Source addresses and next hops of the ACK frames.
    ack_every, ack_timeout : In(8), In(16)
        ACK coalescing: every N data packets or T cycles (see SackTracker).
    qp_w_en, qp_w_addr, qp_w_data : In(1), In(3), In(RxQpContext)
        Receive QP contexts (parsers, tracker, ACK generator).
    ackq_w_en, ackq_w_addr, ackq_w_data : In(1), In(3), In(QpContext)
        The EV profile (``profile_base``/``profile_count``) each QP's ACKs are sprayed over.
    mr_w_en, mr_w_addr, mr_w_data : In(1), In(2), In(MemRegion)
        Registered memory regions.
    spray_req : Out(stream SprayReq), spray_decision : In(stream Decision)
        Reverse path of each ACK, from a spray scheduler.
    m_axi : Out(Axi4WriteSignature(32, 64, 4))
        Payload writes into host memory.
    cpl : Out(stream Completion)
        One per message, after all its data is in memory.
    ack_rx : Out(stream RxPacket)
        Received ACKs (for the sender side); leave ``ready`` high if unused.
    drops_p<i> : Out(ArrayLayout(32, N_REASONS))
        Per-reason drop counters of plane i's parser.
    accepted : Out(32)
        Frames accepted by all parsers (every kind).
    cnt_rd_stb, cnt_rd_addr, cnt_rd_data : In(1), In(6), Out(32)
        Counter word read of the parser(s) (:class:`~mrcnic.rtl.rx_parser.RxParser`
        ``cnt_rd_*``, ``CNT_RD_LATENCY`` cycles): with ``shared_parser`` the one parser's
        word ``cnt_rd_addr``, else the sum of that word over the per-plane parsers.
    drop_stb : Out(1)
        A parser counted a drop this cycle.
    probe : In(stream ProbeFrameReq)
        EV probes to send (sender reliability), framed by the ACK generator.
    probes_sent : Out(32)
        Probe frames sent.
    placed_bytes, duplicates, out_of_window, acks_sent : Out(32)
        Bytes written to host memory; duplicate and out-of-window data packets; ACK frames sent.
    """

    def __init__(self, ports: "int | None" = None, qps: "int | None" = None,
                 window: "int | None" = None, shared_parser: "bool | None" = None, *,
                 params: "NicParams | None" = None):
        ports = check_ports(param(params, "ports", ports, 4))
        qps = check_qps(param(params, "qps", qps, MAX_QPS))
        window = check_window(param(params, "window", window, 256))
        shared_parser = check_bool("shared_parser",
                                   param(params, "shared_parser", shared_parser, False))
        self._params = params
        from .rx_parser import N_REASONS
        self._ports, self._qps, self._window = ports, qps, window
        self._shared = shared_parser and ports > 1
        members = {
            "own_usid": In(16), "locator_block": In(32), "own_ip": In(128), "trim_dscp": In(6),
            "globals": In(NicGlobals), "next_hop_mac": In(data.ArrayLayout(48, ports)),
            "ack_every": In(8), "ack_timeout": In(16),
            "qp_w_en": In(1), "qp_w_addr": In(3), "qp_w_data": In(RxQpContext),
            "ackq_w_en": In(1), "ackq_w_addr": In(3), "ackq_w_data": In(QpContext),
            "mr_w_en": In(1), "mr_w_addr": In(2), "mr_w_data": In(MemRegion),
            "spray_req": Out(stream.Signature(SprayReq)),
            "spray_decision": In(stream.Signature(Decision)),
            "m_axi": Out(Axi4WriteSignature(32, 64, 4)),
            "cpl": Out(stream.Signature(Completion)),
            "ack_rx": Out(stream.Signature(RxPacket)),
            "placed_bytes": Out(32),
            "duplicates": Out(32),
            "out_of_window": Out(32),
            "acks_sent": Out(32),
            "accepted": Out(32),
            "cnt_rd_stb": In(1), "cnt_rd_addr": In(6), "cnt_rd_data": Out(32),
            "drop_stb": Out(1),
            "probe": In(stream.Signature(ProbeFrameReq)),
            "probes_sent": Out(32),
        }
        for i in range(ports):
            members[f"s_axis_p{i}"] = In(AxiStreamSignature(64))
            members[f"m_axis_p{i}"] = Out(AxiStreamSignature(64))
            members[f"drops_p{i}"] = Out(data.ArrayLayout(32, N_REASONS))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self._ports
        m.submodules.arbiter = arb = RxArbiter(ports=1 if self._shared else n)
        m.submodules.tracker = trk = SackTracker(qps=self._qps, window=self._window,
                                                 params=self._params)
        m.submodules.placement = plc = Placement()
        m.submodules.ack_gen = agen = AckGen(ports=n, qps=self._qps, params=self._params)

        parsers = self._parsers(m, arb)
        for i in range(n):
            wiring.connect(m, getattr(agen, f"m_axis_p{i}"),
                           wiring.flipped(getattr(self, f"m_axis_p{i}")))

        wiring.connect(m, arb.pkt, trk.pkt)
        wiring.connect(m, arb.payload, plc.payload)
        wiring.connect(m, arb.ack, wiring.flipped(self.ack_rx))
        wiring.connect(m, trk.place, plc.cmd)
        wiring.connect(m, trk.cpl, plc.cpl_in)
        wiring.connect(m, plc.cpl, wiring.flipped(self.cpl))
        wiring.connect(m, wiring.flipped(self.m_axi), plc.m_axi)

        # Each ACK request asks the spray scheduler for its reverse path (once: ``ack_asked``)
        # and waits in the tracker's ACK output register for it; the ACK generator then
        # takes request and path together (it copies the request into its own registers,
        # so no request FIFO is needed: the tracker can build the next ACK meanwhile, and
        # the generator's frame time, tens of cycles per ACK, hides the scheduler's latency).
        profiles = Array(Signal(QpContext, name=f"ack_profile{i}") for i in range(self._qps))
        with m.If(self.ackq_w_en & (self.ackq_w_addr < self._qps)):
            m.d.sync += profiles[self.ackq_w_addr].eq(self.ackq_w_data)
        prof = profiles[trk.ack.payload.qp]
        ack_asked = Signal()            # the ACK in trk.ack has made its spray request
        with m.If(trk.ack.valid & trk.ack.ready):
            m.d.sync += ack_asked.eq(0)
        with m.Elif(self.spray_req.valid & self.spray_req.ready):
            m.d.sync += ack_asked.eq(1)
        m.d.comb += [
            self.spray_req.payload.qp.eq(trk.ack.payload.qp),
            self.spray_req.payload.base.eq(prof.profile_base),
            self.spray_req.payload.count.eq(prof.profile_count),
            self.spray_req.valid.eq(trk.ack.valid & ~ack_asked),
            agen.req.payload.eq(trk.ack.payload),
            agen.req.valid.eq(trk.ack.valid & ack_asked),
            trk.ack.ready.eq(agen.req.ready & ack_asked),
        ]
        wiring.connect(m, wiring.flipped(self.spray_decision), agen.path)
        wiring.connect(m, wiring.flipped(self.probe), agen.probe)
        m.d.comb += self.probes_sent.eq(agen.probes_sent)

        m.d.comb += self.accepted.eq(sum(p.accepted[k] for p in parsers for k in range(3)))
        m.d.comb += [p.cnt_rd_stb.eq(self.cnt_rd_stb) for p in parsers]
        m.d.comb += [p.cnt_rd_addr.eq(self.cnt_rd_addr) for p in parsers]
        m.d.comb += [self.cnt_rd_data.eq(sum(p.cnt_rd_data for p in parsers)),
                     self.drop_stb.eq(Cat(*(p.drop_stb for p in parsers)).any())]
        m.d.comb += [
            trk.qp_w_en.eq(self.qp_w_en), trk.qp_w_addr.eq(self.qp_w_addr),
            trk.qp_w_data.eq(self.qp_w_data),
            trk.ack_every.eq(self.ack_every), trk.ack_timeout.eq(self.ack_timeout),
            agen.globals.eq(self.globals), agen.next_hop_mac.eq(self.next_hop_mac),
            agen.qp_w_en.eq(self.qp_w_en), agen.qp_w_addr.eq(self.qp_w_addr),
            agen.qp_w_data.eq(self.qp_w_data),
            self.placed_bytes.eq(plc.bytes_written),
            self.duplicates.eq(trk.duplicates),
            self.out_of_window.eq(trk.out_of_window),
            self.acks_sent.eq(agen.sent),
        ]
        return m

    def _parsers(self, m, arb):
        """The parser(s): one per plane into the arbiter, or one shared behind a PlaneMux."""
        n = self._ports
        if self._shared:
            m.submodules.rx_mux = mux = PlaneMux(inputs=n)
            m.submodules.parser = parser = RxParser(port=None, ports=n, qps=self._qps,
                                                    regions=CORE_REGIONS)
            for i in range(n):
                wiring.connect(m, wiring.flipped(getattr(self, f"s_axis_p{i}")),
                               getattr(mux, f"s_axis_{i}"))
                m.d.comb += getattr(self, f"drops_p{i}").eq(getattr(parser, f"drops_p{i}"))
            wiring.connect(m, mux.m_axis, parser.s_axis)
            m.d.comb += parser.s_port.eq(mux.source)
            parsers = [parser]
        else:
            parsers = []
            for i in range(n):
                parser = RxParser(port=i, qps=self._qps, regions=CORE_REGIONS)
                m.submodules[f"parser_p{i}"] = parser
                wiring.connect(m, wiring.flipped(getattr(self, f"s_axis_p{i}")), parser.s_axis)
                m.d.comb += getattr(self, f"drops_p{i}").eq(parser.drops)
                parsers.append(parser)
        for i, parser in enumerate(parsers):
            wiring.connect(m, parser.pkt, getattr(arb, f"pkt_p{i}"))
            wiring.connect(m, parser.payload, getattr(arb, f"payload_p{i}"))
            m.d.comb += [
                parser.own_usid.eq(self.own_usid), parser.locator_block.eq(self.locator_block),
                parser.own_ip.eq(self.own_ip), parser.trim_dscp.eq(self.trim_dscp),
                parser.qp_w_en.eq(self.qp_w_en), parser.qp_w_addr.eq(self.qp_w_addr),
                parser.qp_w_data.eq(self.qp_w_data),
                parser.mr_w_en.eq(self.mr_w_en), parser.mr_w_addr.eq(self.mr_w_addr),
                parser.mr_w_data.eq(self.mr_w_data),
            ]
        return parsers
