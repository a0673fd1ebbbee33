"""Transmit segmenter: work requests -> packet descriptors + payload read over AXI4.

A host work request (RDMA WRITE or WRITE with immediate, IBTA Vol. 1 9.4.3; MRC
allows no other operation) is cut into path-MTU packets.  Every packet gets its
own PSN, its own remote VA and length (MRC carries a RETH on every packet so the
receiver places each one independently), one spray decision (its EV, asked of
the spray scheduler), and its payload, fetched from host memory with AXI4 INCR
read bursts (ARM IHI 0022E) that never cross a 4 KiB boundary.
"""

from amaranth import Array, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic import wire
from .axi import Axi4ReadSignature
from .axis import AxiStreamSignature
from .layouts import MAX_QPS, Decision, QpContext, SprayReq, TxPacket, WorkRequest, WrOpcode

__all__ = ["Segmenter"]

_MAX_BURST = 256          # AXI4 INCR burst limit, beats
_MAX_WR_LENGTH = 1 << 31  # largest work request, bytes


class _FrameInfo(data.Struct):
    """Per packet, for the payload framer: index of the last beat and its tkeep."""
    last_beat: 9
    keep: 8


class _ReadJob(data.Struct):
    """Per message, for the AR generator: first byte address and length in beats."""
    addr: 32
    beats: 30


class _PendingPacket(data.Struct):
    """A TxPacket without its spray decision, waiting for it."""
    qp: 3
    dest_qpn: 24
    mode: 2
    peer_usid: 16
    psn: 24
    opcode: 8
    last: 1
    va: 64
    rkey: 32
    length: 13
    imm: 32


class Segmenter(wiring.Component):
    """Work request -> per-packet :class:`TxPacket` descriptors + payload frames.

    Parameters
    ----------
    qps : int
        Number of QP contexts, 1..8 (``MAX_QPS``).
    fifo_depth : int
        Payload FIFO depth in 64-bit beats, >= 512 (one 4096-byte packet);
        the AR channel runs ahead of the payload output by up to this much.
    pending_depth : int
        Packet descriptors that may wait for their spray decision / for the
        downstream frame builder (>= 2); also the depth of the per-packet
        framing FIFO, i.e. how many headers may run ahead of their payload.

    Attributes
    ----------
    wr : In(stream.Signature(WorkRequest))
        Work requests.  Accepted (``ready`` high) when no other message is being
        cut and the read-job queue has room.  Refused -- dropped, counted in
        ``wr_refused``, ``wr_error`` pulsed, nothing emitted, no PSN used -- when
        ``length`` is 0 or > 2**31, ``local_addr`` is not 8-byte aligned,
        ``local_addr + length`` passes 2**32, ``qp >= qps`` or the QP's
        context was never written.  ``wr_id`` is not used here (``TxPacket``
        has no field for it; completion tracking is downstream's, by PSN).
    qp_w_en, qp_w_addr, qp_w_data : In(1), In(3), In(QpContext)
        QP context table write port.  A write (re)sets the QP's next PSN to
        ``start_psn`` and marks the context valid; writes to ``addr >= qps`` are
        ignored.  A message already being cut keeps the context it started with;
        when a context write and the acceptance of a WR on the same QP share a
        cycle, the WR uses the old next PSN and the write sets the new one.
    pmtu_log2 : In(4)
        Path MTU: 2**pmtu_log2 payload bytes per packet, clamped to 8..12
        (256..4096 bytes).  Sampled when a work request is accepted.
    spray_req : Out(stream.Signature(SprayReq))
        One request per packet {qp, base = profile_base, count = profile_count}.
    spray_decision : In(stream.Signature(Decision))
        One decision per request, in request order, any number of cycles later.
    pkt : Out(stream.Signature(TxPacket))
        One descriptor per packet, in PSN order: QP context fields, ``psn``
        (consecutive from the QP's next PSN, modulo 2**24), ``opcode``
        (``OP_WRITE_ONLY``; ``OP_WRITE_ONLY_IMM`` on the last packet of a
        WRITE_IMM), ``last`` (last packet of the message, BTH AckReq),
        ``va`` = remote_va + offset, ``rkey``, ``length`` (bytes: the path MTU,
        the remainder on the last packet), ``imm``, ``path`` = the decision.
    payload : Out(AxiStreamSignature(64))
        One frame per ``pkt``, same order: the packet's payload bytes, lane 0
        first, ``tkeep`` all ones except on the last beat, ``tlast`` on it.
    m_axi : Out(Axi4ReadSignature(32, 64, 4))
        AXI4 read manager (``m_axi__araddr`` ...): ``arid`` 0, INCR,
        ``arsize`` 3, <= 256 beats, never across a 4 KiB boundary; reads the
        8-byte words holding the message's bytes, nothing else.  Several bursts
        are outstanding; data must return in order (one ID).  ``rready`` is
        always high: a burst is issued only when the payload FIFO has room for
        256 more beats than are already in flight.
    wr_refused : Out(32)
        Count of refused work requests (wraps).
    wr_error : Out(1)
        One-cycle pulse when a work request is refused.
    rd_errors : Out(32)
        Count of R beats with ``rresp`` != OKAY (wraps).  Such a beat's data is
        still delivered (a packet is never cut short or lost, nothing hangs); the
        host sees the error through this counter.

    Notes
    -----
    Latency and throughput, in cycles of ``clk`` (measured by the testbench):

    * WR accepted -> first ``spray_req`` valid: 1; then one packet per cycle
      while ``spray_req`` is ready and the pending/framing FIFOs have room.
      Messages are accepted one at a time: a message of N packets occupies the
      cutter N + 1 cycles.
    * ``spray_req`` handshake -> ``pkt`` valid: 2, or when the decision arrives
      (``pkt`` is combinational from the decision and the pending FIFO).
      Descriptors run up to ``pending_depth`` packets ahead of the payload, so
      packet k+1's descriptor is ready long before packet k's payload ends.
    * WR accepted -> first AR: 4; then one AR every 2 cycles (up to 256 beats each).
    * R beat -> ``payload`` beat: 2.  Payload runs at one beat per cycle while R
      does, with no idle cycle between packets or messages.
    * Buffering: ``fifo_depth`` x 64-bit payload FIFO, ``pending_depth``
      descriptors, 4 queued read jobs (messages).
    """

    def __init__(self, qps: int = 8, fifo_depth: int = 1024, pending_depth: int = 16):
        if not 1 <= qps <= MAX_QPS:
            raise ValueError(f"qps must be 1..{MAX_QPS}, not {qps}")
        if fifo_depth < 2 * _MAX_BURST:
            raise ValueError(f"fifo_depth must be >= {2 * _MAX_BURST} beats, not {fifo_depth}")
        if pending_depth < 2:
            raise ValueError(f"pending_depth must be >= 2, not {pending_depth}")
        self.qps = qps
        self.fifo_depth = fifo_depth
        self.pending_depth = pending_depth
        super().__init__({
            "wr": In(stream.Signature(WorkRequest)),
            "qp_w_en": In(1),
            "qp_w_addr": In(3),
            "qp_w_data": In(QpContext),
            "pmtu_log2": In(4),
            "spray_req": Out(stream.Signature(SprayReq)),
            "spray_decision": In(stream.Signature(Decision)),
            "pkt": Out(stream.Signature(TxPacket)),
            "payload": Out(AxiStreamSignature(64)),
            "m_axi": Out(Axi4ReadSignature(addr_width=32, data_width=64, id_width=4)),
            "wr_refused": Out(32),
            "wr_error": Out(1),
            "rd_errors": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        qps = self.qps

        # ---------------------------------------------------------- QP contexts
        m.submodules.ctx = ctx = memory.Memory(shape=QpContext, depth=qps, init=[])
        ctx_w = ctx.write_port()
        ctx_r = ctx.read_port(domain="comb")
        ctx_valid = Signal(qps)
        next_psn = Array(Signal(24, name=f"next_psn{i}") for i in range(qps))

        # ------------------------------------------------------------- FIFOs
        m.submodules.read_jobs = rj = fifo.SyncFIFOBuffered(
            width=_ReadJob.as_shape().size, depth=4)
        m.submodules.pending = pend = fifo.SyncFIFOBuffered(
            width=_PendingPacket.as_shape().size, depth=self.pending_depth)
        m.submodules.frames = fi = fifo.SyncFIFOBuffered(
            width=_FrameInfo.as_shape().size, depth=self.pending_depth)
        m.submodules.payload_fifo = pf = fifo.SyncFIFOBuffered(width=64, depth=self.fifo_depth)

        # --------------------------------------------------- WR intake / check
        wr = self.wr.payload
        p_log2 = Signal(4)
        with m.If(self.pmtu_log2 < 8):
            m.d.comb += p_log2.eq(8)
        with m.Elif(self.pmtu_log2 > 12):
            m.d.comb += p_log2.eq(12)
        with m.Else():
            m.d.comb += p_log2.eq(self.pmtu_log2)

        qp_ok = Signal()
        m.d.comb += [
            ctx_r.addr.eq(wr.qp),
            qp_ok.eq((wr.qp < qps) & ctx_valid.bit_select(wr.qp, 1)),
        ]
        bad = Signal()
        m.d.comb += bad.eq((wr.length == 0) | (wr.length > _MAX_WR_LENGTH)
                           | (wr.local_addr[:3] != 0)
                           | ((wr.local_addr + wr.length) > (1 << 32))
                           | ~qp_ok)
        npkts = Signal(24)   # packets of the message, modulo 2**24
        m.d.comb += npkts.eq(((wr.length - 1) >> p_log2) + 1)

        g_active = Signal()
        m.d.comb += self.wr.ready.eq(~g_active & rj.w_rdy)
        wr_fire = self.wr.valid & self.wr.ready

        # cutter state (one message at a time)
        g_qp = Signal(3)
        g_ctx = Signal(QpContext)
        g_psn = Signal(24)
        g_va = Signal(64)
        g_rem = Signal(32)
        g_rkey = Signal(32)
        g_imm = Signal(32)
        g_is_imm = Signal()
        g_pmtu = Signal(13)

        m.d.sync += self.wr_error.eq(0)
        with m.If(wr_fire):
            with m.If(bad):
                m.d.sync += [self.wr_refused.eq(self.wr_refused + 1), self.wr_error.eq(1)]
            with m.Else():
                m.d.sync += [
                    g_active.eq(1),
                    g_qp.eq(wr.qp),
                    g_ctx.eq(ctx_r.data),
                    g_psn.eq(next_psn[wr.qp]),
                    g_va.eq(wr.remote_va),
                    g_rem.eq(wr.length),
                    g_rkey.eq(wr.rkey),
                    g_imm.eq(wr.imm),
                    g_is_imm.eq(wr.opcode == WrOpcode.WRITE_IMM),
                    g_pmtu.eq(Const(1, 13) << p_log2),
                    next_psn[wr.qp].eq(next_psn[wr.qp] + npkts),
                ]
        new_job = Signal(_ReadJob)
        m.d.comb += [
            new_job.addr.eq(wr.local_addr),
            new_job.beats.eq((wr.length + 7) >> 3),
            rj.w_data.eq(new_job),
            rj.w_en.eq(wr_fire & ~bad),
        ]

        # context writes come last: they win the next-PSN register
        with m.If(self.qp_w_en & (self.qp_w_addr < qps)):
            m.d.comb += [
                ctx_w.en.eq(1),
                ctx_w.addr.eq(self.qp_w_addr),
                ctx_w.data.eq(self.qp_w_data),
            ]
            m.d.sync += [
                ctx_valid.bit_select(self.qp_w_addr, 1).eq(1),
                next_psn[self.qp_w_addr].eq(self.qp_w_data.start_psn),
            ]

        # ------------------------------------------------------ packet cutter
        g_last = Signal()
        pkt_len = Signal(13)
        m.d.comb += [
            g_last.eq(g_rem <= g_pmtu),
            pkt_len.eq(Mux(g_last, g_rem[:13], g_pmtu)),
            self.spray_req.valid.eq(g_active & pend.w_rdy & fi.w_rdy),
            self.spray_req.payload.qp.eq(g_qp),
            self.spray_req.payload.base.eq(g_ctx.profile_base),
            self.spray_req.payload.count.eq(g_ctx.profile_count),
        ]
        cut = self.spray_req.valid & self.spray_req.ready

        pp = Signal(_PendingPacket)
        m.d.comb += [
            pp.qp.eq(g_qp),
            pp.dest_qpn.eq(g_ctx.dest_qpn),
            pp.mode.eq(g_ctx.mode),
            pp.peer_usid.eq(g_ctx.peer_usid),
            pp.psn.eq(g_psn),
            pp.opcode.eq(Mux(g_is_imm & g_last, wire.OP_WRITE_ONLY_IMM, wire.OP_WRITE_ONLY)),
            pp.last.eq(g_last),
            pp.va.eq(g_va),
            pp.rkey.eq(g_rkey),
            pp.length.eq(pkt_len),
            pp.imm.eq(g_imm),
            pend.w_data.eq(pp),
            pend.w_en.eq(cut),
        ]
        fr = Signal(_FrameInfo)
        tail = pkt_len[:3]
        m.d.comb += [
            fr.last_beat.eq((pkt_len - 1) >> 3),
            fr.keep.eq(Mux(tail == 0, 0xFF, (Const(1, 9) << tail) - 1)),
            fi.w_data.eq(fr),
            fi.w_en.eq(cut),
        ]
        with m.If(cut):
            m.d.sync += [
                g_psn.eq(g_psn + 1),
                g_va.eq(g_va + g_pmtu),
                g_rem.eq(g_rem - g_pmtu),
            ]
            with m.If(g_last):
                m.d.sync += g_active.eq(0)

        # ------------------------------------- descriptor + decision -> pkt
        pend_pkt = _PendingPacket(pend.r_data)
        out = self.pkt.payload
        m.d.comb += [
            self.pkt.valid.eq(pend.r_rdy & self.spray_decision.valid),
            self.spray_decision.ready.eq(pend.r_rdy & self.pkt.ready),
            pend.r_en.eq(self.pkt.valid & self.pkt.ready),
            out.qp.eq(pend_pkt.qp),
            out.dest_qpn.eq(pend_pkt.dest_qpn),
            out.mode.eq(pend_pkt.mode),
            out.peer_usid.eq(pend_pkt.peer_usid),
            out.psn.eq(pend_pkt.psn),
            out.opcode.eq(pend_pkt.opcode),
            out.last.eq(pend_pkt.last),
            out.va.eq(pend_pkt.va),
            out.rkey.eq(pend_pkt.rkey),
            out.length.eq(pend_pkt.length),
            out.imm.eq(pend_pkt.imm),
            out.path.eq(self.spray_decision.payload),
        ]

        # ------------------------------------------------------ AR generator
        axi = self.m_axi
        job = _ReadJob(rj.r_data)
        ar_active = Signal()
        ar_addr = Signal(32)
        ar_rem = Signal(30)
        ar_valid = Signal()
        ar_araddr = Signal(32)
        ar_len = Signal(8)
        # beats in flight or buffered: issued on AR, not yet sent on payload
        reserved = Signal(range(self.fifo_depth + 1))

        to_4k = Signal(10)     # beats left before the next 4 KiB boundary, 1..512
        cap = Signal(9)        # largest legal burst from ar_addr, 1..256
        n = Signal(9)          # this burst, beats
        m.d.comb += [
            to_4k.eq(512 - ar_addr[3:12]),
            cap.eq(Mux(to_4k > _MAX_BURST, _MAX_BURST, to_4k)),
            n.eq(Mux(ar_rem < cap, ar_rem, cap)),
            rj.r_en.eq(~ar_active),
        ]
        with m.If(~ar_active & rj.r_rdy):
            m.d.sync += [ar_active.eq(1), ar_addr.eq(job.addr), ar_rem.eq(job.beats)]

        issue = Signal()
        m.d.comb += issue.eq(ar_active & ~ar_valid & (reserved <= self.fifo_depth - _MAX_BURST))
        with m.If(issue):
            m.d.sync += [
                ar_valid.eq(1),
                ar_araddr.eq(ar_addr),
                ar_len.eq(n - 1),
                ar_addr.eq(ar_addr + (n << 3)),
                ar_rem.eq(ar_rem - n),
            ]
            with m.If(ar_rem == n):
                m.d.sync += ar_active.eq(0)
        with m.Elif(axi.arvalid & axi.arready):
            m.d.sync += ar_valid.eq(0)

        m.d.comb += [
            axi.arid.eq(0),
            axi.araddr.eq(ar_araddr),
            axi.arlen.eq(ar_len),
            axi.arsize.eq(3),
            axi.arburst.eq(0b01),
            axi.arvalid.eq(ar_valid),
        ]

        # R -> payload FIFO (room guaranteed by ``reserved``)
        m.d.comb += [
            axi.rready.eq(pf.w_rdy),
            pf.w_en.eq(axi.rvalid),
            pf.w_data.eq(axi.rdata),
        ]
        with m.If(axi.rvalid & axi.rready & (axi.rresp != 0)):
            m.d.sync += self.rd_errors.eq(self.rd_errors + 1)

        # --------------------------------------------------- payload framer
        frame = _FrameInfo(fi.r_data)
        beat = Signal(9)
        is_last = Signal()
        ps = self.payload
        m.d.comb += [
            is_last.eq(beat == frame.last_beat),
            ps.tvalid.eq(pf.r_rdy & fi.r_rdy),
            ps.tdata.eq(pf.r_data),
            ps.tkeep.eq(Mux(is_last, frame.keep, 0xFF)),
            ps.tlast.eq(is_last),
        ]
        pop = ps.tvalid & ps.tready
        m.d.comb += [pf.r_en.eq(pop), fi.r_en.eq(pop & is_last)]
        with m.If(pop):
            m.d.sync += beat.eq(Mux(is_last, 0, beat + 1))

        m.d.sync += reserved.eq(reserved + Mux(issue, n, 0) - pop)
        return m
