"""Transmit segmenter: work requests -> packet descriptors + payload read over AXI4.

A host work request (RDMA WRITE or WRITE with immediate, IBTA Vol. 1 9.4.3; MRC
allows no other operation) is cut into path-MTU packets.  Every packet gets its
own PSN, its own remote VA and length (MRC carries a RETH on every packet so the
receiver places each one independently), one spray decision (its EV, asked of
the spray scheduler), and its payload, fetched from host memory with AXI4 INCR
read bursts (ARM IHI 0022E) that never cross a 4 KiB boundary.

For MRC reliability the segmenter also re-sends single packets on request of
sender reliability (a trim NACK or an ACK timeout): it keeps a small table of
the outstanding messages of every QP, rebuilds the packet from it (same PSN,
VA, length, opcode, immediate; payload read again from host memory) and sprays
it on another path-table entry than the one that lost it.
"""

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic import wire

from .axi import Axi4ReadSignature
from .axis import AxiStreamSignature
from .layouts import (
    MAX_QPS,
    Decision,
    QpContext,
    RetxReq,
    SentInfo,
    SprayReq,
    TxPacket,
    WorkRequest,
    WrOpcode,
)

__all__ = ["Segmenter"]

_MAX_BURST = 256          # AXI4 INCR burst limit, beats
_MAX_WR_LENGTH = 1 << 31  # largest work request, bytes


class _FrameInfo(data.Struct):
    """Per packet, for the payload framer: index of the last beat and its tkeep."""
    last_beat: 9
    keep: 8


class _ReadJob(data.Struct):
    """Per packet, for the AR generator: first byte address and length in beats."""
    addr: 32
    beats: 10


class _PendingPacket(data.Struct):
    """A TxPacket without its spray decision, waiting for it."""
    qp: 3
    dest_qpn: 24
    mode: 2
    peer_usid: 16
    psn: 24
    imm_op: 1       # opcode OP_WRITE_ONLY_IMM (else OP_WRITE_ONLY)
    last: 1
    va: 64
    rkey: 32
    length: 13
    imm: 32
    retx: 1


class _MsgKey(data.Struct):
    """PSN range of one outstanding message (searched and released one slot per cycle)."""
    first_psn: 24
    count: 24       # packets, modulo 2**24


class _MsgBulk(data.Struct):
    """The rest of an outstanding message, read only to rebuild a retransmitted packet.

    Kept in block RAM as ``_BULK_WORDS`` words of ``_BULK_BITS`` bits per slot, written
    over ``_BULK_WORDS`` cycles after the work request is accepted and read the same way.
    """
    log2: 4         # path MTU of the message, log2 bytes
    local_addr: 29  # local_addr[3:32] (8-byte aligned)
    remote_va: 64
    rkey: 32
    last_len: 13    # bytes in the message's last packet, 1..pmtu
    is_imm: 1
    imm: 32


_BULK_BITS = 36                                            # one DP16KD word (512 x 36)
_BULK_WORDS = -(-_MsgBulk.as_shape().size // _BULK_BITS)   # 5
_BULK_STRIDE = 8                                           # words per slot in the bulk RAM


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
        framing and read-job FIFOs, i.e. how many packets may be cut ahead of
        their payload.
    msgs : int
        Message-table slots per QP (outstanding messages kept for
        retransmission), a power of two 2..16.
    retx_tries : int
        Spray decisions asked at most for one retransmission (1..16) while
        the decision's entry equals ``avoid_index``.

    Attributes
    ----------
    wr : In(stream.Signature(WorkRequest))
        Work requests.  Accepted (``ready`` high) when no other message is being
        cut and the QP's message table has a free slot (``ready`` may depend on
        ``wr.payload.qp``: a QP with a full table holds the stream, head of
        line, until ``una`` frees a slot -- never dropped).  Refused -- dropped,
        counted in ``wr_refused``, ``wr_error`` pulsed, nothing emitted, no PSN
        used, no slot taken -- when ``length`` is 0 or > 2**31, ``local_addr``
        is not 8-byte aligned, ``local_addr + length`` passes 2**32,
        ``qp >= qps`` or the QP's context was never written.  ``wr_id`` is not
        used here (completion tracking is downstream's, by PSN).
    qp_w_en, qp_w_addr, qp_w_data : In(1), In(3), In(QpContext)
        QP context table write port.  A write (re)sets the QP's next PSN to
        ``start_psn``, empties its message table and marks the context valid;
        writes to ``addr >= qps`` are ignored.  Packets take the context
        fields (DestQP, mode, peer uSID, EV profile) current when they are
        cut; when a context write and the acceptance of a WR on the same QP
        share a cycle, the WR uses the old next PSN and the write sets the
        new one.  Write a context only while its QP has no traffic and no
        retransmission request.
    pmtu_log2 : In(4)
        Path MTU: 2**pmtu_log2 payload bytes per packet, clamped to 8..12
        (256..4096 bytes).  Sampled when a work request is accepted (kept per
        message for its retransmissions).
    spray_req : Out(stream.Signature(SprayReq))
        One request per packet {qp, base = profile_base, count = profile_count},
        plus one per try of a retransmission.
    spray_decision : In(stream.Signature(Decision))
        One decision per request, in request order, any number of cycles later.
    pkt : Out(stream.Signature(TxPacket))
        One descriptor per packet: new packets in PSN order per QP, with
        retransmissions between them.  QP context fields, ``psn`` (consecutive
        from the QP's next PSN, modulo 2**24), ``opcode`` (``OP_WRITE_ONLY``;
        ``OP_WRITE_ONLY_IMM`` on the last packet of a WRITE_IMM), ``last``
        (last packet of the message, BTH AckReq), ``va`` = remote_va + offset,
        ``rkey``, ``length`` (bytes: the path MTU, the remainder on the last
        packet), ``imm``, ``path`` = the decision.  ``valid`` also requires
        ``sent.ready`` (the two transfer together).
    payload : Out(AxiStreamSignature(64))
        One frame per ``pkt``, same order: the packet's payload bytes, lane 0
        first, ``tkeep`` all ones except on the last beat, ``tlast`` on it.
    m_axi : Out(Axi4ReadSignature(32, 64, 4))
        AXI4 read manager (``m_axi__araddr`` ...): ``arid`` 0, INCR,
        ``arsize`` 3, <= 256 beats, never across a 4 KiB boundary; one or more
        bursts per packet reading the 8-byte words holding its bytes, nothing
        else.  Several bursts are outstanding; data must return in order (one
        ID).  ``rready`` is always high: a burst is issued only when the
        payload FIFO has room for 256 more beats than are already in flight.
    retx : In(stream.Signature(RetxReq))
        Send PSN ``psn`` of QP ``qp`` again, not on entry ``avoid_index``.
        Taken (``ready``) when the retransmission engine is idle.  The PSN is
        looked up in the QP's message table (one slot per cycle); a PSN of no
        message in the table (released, never sent, not yet cut) or a QP
        ``>= qps`` is dropped and counted in ``retx_unknown``.  Otherwise the
        packet is rebuilt exactly as first sent (same ``psn``, ``va`` =
        remote_va + (psn - first PSN) * pmtu, ``length`` -- short on the last
        packet --, ``opcode``, ``last``, ``rkey``, ``imm``; QP fields from the
        current context), its payload read again over ``m_axi``, and it goes
        out ahead of every new packet not yet cut (priority between packets,
        never inside one).  Path: a spray decision is asked for as for a new
        packet; while its ``index`` equals ``avoid_index`` another one is
        asked, up to ``retx_tries`` decisions; if all of them name
        ``avoid_index`` (the profile has only that entry eligible, or a weight
        >= ``retx_tries`` repeats it) the packet is sent on it anyway and
        ``retx_same_path`` counts it.  A profile with no eligible entry at
        all makes the retransmission wait, like any packet (spray ``no_path``).
    una : In(data.ArrayLayout(24, qps))
        Per QP, the oldest PSN not cumulatively acknowledged (from sender
        reliability).  A message is released from the table once its last PSN
        is before ``una`` in serial-number arithmetic modulo 2**24 (RFC 1982
        style): ``count <= (una - first_psn) mod 2**24 < 2**23``.  Releases
        are checked for the oldest message of one QP per cycle, round robin,
        while the retransmission engine is idle.  Tie to ``next_psn`` when no reliability block is
        present (every message released at once; no retransmission possible).
    tx_ok : In(qps)
        Per QP window (from sender reliability): a new packet of the QP is cut
        only while its bit is 1; retransmissions ignore it.  While the message
        being cut waits for it, no other message is cut (head of line).  Tie
        to all ones for the unchanged behaviour.
    sent : Out(stream.Signature(SentInfo))
        Tap: one record per packet, transferred in the same cycle as its
        ``pkt`` {qp, psn, index = path.index, ev = path.entry.ev, length,
        msg_last = last, retx}.  ``pkt.valid`` waits for ``sent.ready``, so
        nothing is lost, but the consumer must accept one record per packet
        to keep the packet rate (tie ``ready`` high when unused).
    next_psn : Out(data.ArrayLayout(24, qps))
        Per QP, the PSN the next accepted work request starts with.
    wr_refused : Out(32)
        Count of refused work requests (wraps).
    wr_error : Out(1)
        One-cycle pulse when a work request is refused.
    rd_errors : Out(32)
        Count of R beats with ``rresp`` != OKAY (wraps).  Such a beat's data is
        still delivered (a packet is never cut short or lost, nothing hangs); the
        host sees the error through this counter.
    retransmits, retx_unknown, retx_same_path : Out(32)
        Retransmitted packets, dropped retransmission requests, and
        retransmissions sent on ``avoid_index`` after ``retx_tries`` decisions
        (all wrap).

    Notes
    -----
    Latency and throughput, in cycles of ``clk`` (measured by the testbench):

    * WR accepted -> first ``spray_req`` valid: 6 (the message's table entry is
      written first: 5 block-RAM words, one per cycle); then one packet per cycle
      while ``spray_req`` is ready, ``tx_ok`` is set, the pending/framing/
      read-job FIFOs have room and fewer than ``fifo_depth`` beats are cut but
      not yet out on ``payload`` (this bounds how far new packets run ahead,
      hence how long a retransmission waits: at most
      min(``pending_depth``, ``fifo_depth`` / packet beats + 1) packets).  Messages are accepted one at a time: a
      message of N packets occupies the cutter N + 6 cycles.
    * ``spray_req`` handshake -> ``pkt`` valid: 2, or when the decision arrives
      (``pkt`` is combinational from the decision and the pending FIFO).
      Descriptors run up to ``pending_depth`` packets ahead of the payload.
    * Packet cut -> its AR: 2 (one read job per packet; one AR every 2 cycles).
    * R beat -> ``payload`` beat: 2.  Payload runs at one beat per cycle while R
      does, with no idle cycle between packets or messages.
    * Retransmission: ``retx`` handshake -> table lookup 1 cycle per slot
      searched (<= ``msgs`` + 1) -> the message's block-RAM words fetched
      (6 cycles) -> packet queued (read job issued) 1 cycle later -> one spray
      request per try, each waiting for the decisions of packets queued
      before it.  No new packet is cut from the ``retx`` handshake until the
      decision is settled; the retransmitted packet leaves after the packets
      already cut (bounded as above).  One retransmission is handled at a
      time; the accepted decision stays at the head of ``spray_decision``
      until its packet leaves on ``pkt`` (refused ones are taken at once), so
      any number of retransmitted packets may wait in the pending FIFO.
    * Buffering: ``fifo_depth`` x 64-bit payload FIFO, ``pending_depth``
      descriptors / frame infos / read jobs, ``qps * msgs`` message-table
      slots: 48-bit PSN ranges (distributed RAM) + 5 x 36-bit words in one
      block RAM (``ram_style = "block"``).
    * A message of 2**23 or more packets is never released (its table slot
      stays used); sender reliability windows are far smaller.
    """

    def __init__(self, qps: int = 8, fifo_depth: int = 1024, pending_depth: int = 16,
                 msgs: int = 4, retx_tries: int = 4):
        if not 1 <= qps <= MAX_QPS:
            raise ValueError(f"qps must be 1..{MAX_QPS}, not {qps}")
        if fifo_depth < 2 * _MAX_BURST:
            raise ValueError(f"fifo_depth must be >= {2 * _MAX_BURST} beats, not {fifo_depth}")
        if pending_depth < 2:
            raise ValueError(f"pending_depth must be >= 2, not {pending_depth}")
        if msgs not in (2, 4, 8, 16):
            raise ValueError(f"msgs must be a power of two 2..16, not {msgs}")
        if not 1 <= retx_tries <= 16:
            raise ValueError(f"retx_tries must be 1..16, not {retx_tries}")
        self.qps = qps
        self.fifo_depth = fifo_depth
        self.pending_depth = pending_depth
        self.msgs = msgs
        self.retx_tries = retx_tries
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
            "retx": In(stream.Signature(RetxReq)),
            "una": In(data.ArrayLayout(24, qps)),
            "tx_ok": In(qps),
            "sent": Out(stream.Signature(SentInfo)),
            "next_psn": Out(data.ArrayLayout(24, qps)),
            "wr_refused": Out(32),
            "wr_error": Out(1),
            "rd_errors": Out(32),
            "retransmits": Out(32),
            "retx_unknown": Out(32),
            "retx_same_path": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        qps, msgs = self.qps, self.msgs
        sbits = msgs.bit_length() - 1          # slot index bits

        # ---------------------------------------------------------- QP contexts
        m.submodules.ctx = ctx = memory.Memory(shape=QpContext, depth=qps, init=[])
        ctx_w = ctx.write_port()
        ctx_r = ctx.read_port(domain="comb")     # the QP of the packet being cut / rebuilt
        ctx_valid = Signal(qps)
        next_psn = Array(Signal(24, name=f"next_psn{i}") for i in range(qps))
        for i in range(qps):
            m.d.comb += self.next_psn[i].eq(next_psn[i])

        # ------------------------------------------------------ message table
        m.submodules.msgs = tab = memory.Memory(shape=_MsgKey, depth=qps * msgs, init=[])
        tab_w = tab.write_port()
        m.submodules.msg_bulk = bulk = memory.Memory(
            shape=_BULK_BITS, depth=qps * msgs * _BULK_STRIDE, init=[],
            attrs={"ram_style": "block"})
        bulk_w = bulk.write_port()
        bulk_r = bulk.read_port()                # sync: retransmission fetch
        tab_r = tab.read_port(domain="comb")     # release check (head slot) / retx lookup
        head = Array(Signal(sbits, name=f"head{i}") for i in range(qps))
        occ = Array(Signal(range(msgs + 1), name=f"occ{i}") for i in range(qps))

        # ------------------------------------------------------------- FIFOs
        m.submodules.read_jobs = rj = fifo.SyncFIFOBuffered(
            width=_ReadJob.as_shape().size, depth=self.pending_depth)
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
            qp_ok.eq((wr.qp < qps) & ctx_valid.bit_select(wr.qp, 1)),
        ]
        bad = Signal()
        m.d.comb += bad.eq((wr.length == 0) | (wr.length > _MAX_WR_LENGTH)
                           | (wr.local_addr[:3] != 0)
                           | ((wr.local_addr + wr.length) > (1 << 32))
                           | ~qp_ok)
        npkts = Signal(24)   # packets of the message, modulo 2**24
        len_m1 = Signal(32)
        last_len = Signal(13)  # bytes in the last packet
        m.d.comb += [
            len_m1.eq(wr.length - 1),
            npkts.eq((len_m1 >> p_log2) + 1),
            last_len.eq((len_m1[:12] & ~(Const(-1, 12) << p_log2)) + 1),
        ]
        room = Signal()
        m.d.comb += room.eq(occ[wr.qp] < msgs)

        g_active = Signal()
        m.d.comb += self.wr.ready.eq(~g_active & (bad | room))
        wr_fire = self.wr.valid & self.wr.ready
        wr_take = wr_fire & ~bad

        # cutter state (one message at a time)
        g_qp = Signal(3)
        g_ctx = QpContext(ctx_r.data)     # read at cut time (see ``qp_w_en``)
        g_first = Signal(24)
        g_slot = Signal(sbits)
        g_psn = Signal(24)
        g_va = Signal(64)
        g_addr = Signal(32)
        g_left = Signal(24)     # packets left to cut, modulo 2**24
        g_last_len = Signal(13)
        g_rkey = Signal(32)
        g_imm = Signal(32)
        g_is_imm = Signal()
        g_pmtu = Signal(13)
        g_log2 = Signal(4)
        g_wbeat = Signal(range(_BULK_WORDS + 1))   # bulk words written (cutting waits for all)

        tail = Signal(sbits)
        m.d.comb += tail.eq(head[wr.qp] + occ[wr.qp])

        m.d.sync += self.wr_error.eq(0)
        with m.If(wr_fire):
            with m.If(bad):
                m.d.sync += [self.wr_refused.eq(self.wr_refused + 1), self.wr_error.eq(1)]
            with m.Else():
                m.d.sync += [
                    g_active.eq(1),
                    g_qp.eq(wr.qp),
                    g_first.eq(next_psn[wr.qp]),
                    g_slot.eq(tail),
                    g_psn.eq(next_psn[wr.qp]),
                    g_va.eq(wr.remote_va),
                    g_addr.eq(wr.local_addr),
                    g_left.eq(npkts),
                    g_last_len.eq(last_len),
                    g_rkey.eq(wr.rkey),
                    g_imm.eq(wr.imm),
                    g_is_imm.eq(wr.opcode == WrOpcode.WRITE_IMM),
                    g_pmtu.eq(Const(1, 13) << p_log2),
                    g_log2.eq(p_log2),
                    g_wbeat.eq(0),
                    next_psn[wr.qp].eq(next_psn[wr.qp] + npkts),
                ]
        new_key = Signal(_MsgKey)
        m.d.comb += [
            new_key.first_psn.eq(next_psn[wr.qp]),
            new_key.count.eq(npkts),
            tab_w.addr.eq((wr.qp << sbits) | tail),
            tab_w.data.eq(new_key),
            tab_w.en.eq(wr_take),
        ]
        # bulk words: from the cutter registers, before the first cut changes g_va/g_addr
        g_bulk = Signal(_MsgBulk)
        g_writing = Signal()
        m.d.comb += [
            g_bulk.log2.eq(g_log2),
            g_bulk.local_addr.eq(g_addr[3:]),
            g_bulk.remote_va.eq(g_va),
            g_bulk.rkey.eq(g_rkey),
            g_bulk.last_len.eq(g_last_len),
            g_bulk.is_imm.eq(g_is_imm),
            g_bulk.imm.eq(g_imm),
            g_writing.eq(g_active & (g_wbeat != _BULK_WORDS)),
            bulk_w.addr.eq(Cat(g_wbeat[:3], g_slot, g_qp[:max(1, (qps - 1).bit_length())])),
            bulk_w.data.eq(Cat(g_bulk, Const(0, _BULK_WORDS * _BULK_BITS - len(g_bulk.as_value())))
                           .word_select(g_wbeat, _BULK_BITS)),
            bulk_w.en.eq(g_writing),
        ]
        with m.If(g_writing):
            m.d.sync += g_wbeat.eq(g_wbeat + 1)

        # --------------------------------------------- retransmission engine
        rx_q = Signal(3)
        rx_psn = Signal(24)
        rx_avoid = Signal(8)
        rx_i = Signal(range(msgs + 1))
        rx_off = Signal(24)
        rx_count = Signal(24)
        rx_slot = Signal(sbits)
        rx_bulk_words = Signal(_BULK_WORDS * _BULK_BITS)
        rx_msg = _MsgBulk(rx_bulk_words[:_MsgBulk.as_shape().size])
        rx_w = Signal(range(_BULK_WORDS + 1))
        rx_tries = Signal(range(self.retx_tries + 1))
        rx_skip = Signal(range(self.pending_depth + 2))
        nout = Signal(range(self.pending_depth + 2))   # decisions asked for, not yet taken
        dec_used = Signal()                            # a packet took its decision this cycle
        rx_idle = Signal()
        rx_load = Signal()
        dec_for_retx = Signal()

        m.d.comb += ctx_r.addr.eq(Mux(rx_idle, g_qp, rx_q))
        x_slot = Signal(sbits)
        x_d = Signal(24)
        x_msg = _MsgKey(tab_r.data)
        x_cut = Signal(24)
        x_current = Signal()
        x_hit = Signal()
        m.d.comb += [
            x_slot.eq(head[rx_q] + rx_i),
            x_d.eq(rx_psn - x_msg.first_psn),
            x_cut.eq(g_psn - g_first),
            x_current.eq(g_active & (g_qp == rx_q) & (g_slot == x_slot)),
            x_hit.eq((x_d < x_msg.count) & ~(x_current & (x_d >= x_cut))),
        ]

        # packet rebuilt from the table entry (registered inputs only)
        x_byte = Signal(32)
        x_last = Signal()
        x_len = Signal(13)
        x_pp = Signal(_PendingPacket)
        x_job = Signal(_ReadJob)
        x_ctx = g_ctx
        m.d.comb += [
            x_byte.eq(rx_off << rx_msg.log2),
            x_last.eq((rx_off + 1)[:24] == rx_count),
            x_len.eq(Mux(x_last, rx_msg.last_len, Const(1, 13) << rx_msg.log2)),
            x_pp.qp.eq(rx_q),
            x_pp.dest_qpn.eq(x_ctx.dest_qpn),
            x_pp.mode.eq(x_ctx.mode),
            x_pp.peer_usid.eq(x_ctx.peer_usid),
            x_pp.psn.eq(rx_psn),
            x_pp.imm_op.eq(rx_msg.is_imm & x_last),
            x_pp.last.eq(x_last),
            x_pp.va.eq(rx_msg.remote_va + x_byte),
            x_pp.rkey.eq(rx_msg.rkey),
            x_pp.length.eq(x_len),
            x_pp.imm.eq(rx_msg.imm),
            x_pp.retx.eq(1),
            x_job.addr.eq(Cat(Const(0, 3), rx_msg.local_addr) + x_byte),
            x_job.beats.eq((x_len + 7) >> 3),
        ]
        x_room = Signal()
        m.d.comb += x_room.eq(pend.w_rdy & fi.w_rdy & rj.w_rdy)
        rx_req_valid = Signal()
        dec_refused = Signal()
        dec = self.spray_decision.payload

        with m.FSM(name="retx_fsm"):
            with m.State("IDLE"):
                m.d.comb += [rx_idle.eq(1), self.retx.ready.eq(1)]
                with m.If(self.retx.valid):
                    m.d.sync += [rx_q.eq(self.retx.payload.qp), rx_psn.eq(self.retx.payload.psn),
                                 rx_avoid.eq(self.retx.payload.avoid_index), rx_i.eq(0)]
                    with m.If(self.retx.payload.qp < qps):
                        m.next = "SEARCH"
                    with m.Else():
                        m.d.sync += self.retx_unknown.eq(self.retx_unknown + 1)
            with m.State("SEARCH"):
                with m.If(rx_i >= occ[rx_q]):
                    m.d.sync += self.retx_unknown.eq(self.retx_unknown + 1)
                    m.next = "IDLE"
                with m.Elif(x_hit):
                    m.d.sync += [rx_count.eq(x_msg.count), rx_off.eq(x_d), rx_slot.eq(x_slot),
                                 rx_w.eq(0)]
                    m.next = "FETCH"
                with m.Else():
                    m.d.sync += rx_i.eq(rx_i + 1)
            with m.State("FETCH"):
                # the slot's bulk words, one per cycle (read data one cycle after the address)
                m.d.comb += [
                    bulk_r.addr.eq(Cat(rx_w[:3], rx_slot, rx_q[:max(1, (qps - 1).bit_length())])),
                    bulk_r.en.eq(1),
                ]
                m.d.sync += rx_w.eq(rx_w + 1)
                with m.If(rx_w != 0):
                    # shift register: word 0 ends at the bottom after the last one
                    m.d.sync += rx_bulk_words.eq(Cat(rx_bulk_words[_BULK_BITS:], bulk_r.data))
                with m.If(rx_w == _BULK_WORDS):
                    m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += rx_load.eq(x_room)
                with m.If(x_room):
                    m.d.sync += [rx_tries.eq(0), self.retransmits.eq(self.retransmits + 1)]
                    m.next = "REQ"
            with m.State("REQ"):
                m.d.comb += rx_req_valid.eq(1)
                with m.If(self.spray_req.ready):
                    m.d.sync += [rx_tries.eq(rx_tries + 1), rx_skip.eq(nout - dec_used)]
                    m.next = "WAIT"
            with m.State("WAIT"):
                # The decision stays in the spray stream; once it is at the head
                # (every earlier one taken by its packet) it is refused -- taken
                # here, another one asked for -- or left for the retransmitted
                # packet, now at the head of the pending FIFO.
                m.d.comb += dec_for_retx.eq(rx_skip == 0)
                with m.If(dec_for_retx):
                    with m.If(self.spray_decision.valid):
                        with m.If((dec.index == rx_avoid) & (rx_tries < self.retx_tries)):
                            m.d.comb += dec_refused.eq(1)
                            m.next = "REQ"
                        with m.Else():
                            with m.If(dec.index == rx_avoid):
                                m.d.sync += self.retx_same_path.eq(self.retx_same_path + 1)
                            m.next = "IDLE"
                with m.Else():
                    m.d.sync += rx_skip.eq(rx_skip - dec_used)

        # -------------------------------------------------- message release
        rel_q = Signal(range(qps))
        rel_d = Signal(24)
        rel_msg = _MsgKey(tab_r.data)
        rel = Signal()
        m.d.sync += rel_q.eq(Mux(rel_q == qps - 1, 0, rel_q + 1))
        m.d.comb += [
            tab_r.addr.eq(Mux(rx_idle, (rel_q << sbits) | head[rel_q], (rx_q << sbits) | x_slot)),
            rel_d.eq(self.una[rel_q] - rel_msg.first_psn),
            rel.eq(rx_idle & (occ[rel_q] != 0) & (rel_d >= rel_msg.count) & ~rel_d[23]),
        ]
        for i in range(qps):
            inc = wr_take & (wr.qp == i)
            dcr = rel & (rel_q == i)
            m.d.sync += occ[i].eq(occ[i] + inc - dcr)
            with m.If(dcr):
                m.d.sync += head[i].eq(head[i] + 1)

        # context writes come last: they win the next-PSN register and the table
        with m.If(self.qp_w_en & (self.qp_w_addr < qps)):
            m.d.comb += [
                ctx_w.en.eq(1),
                ctx_w.addr.eq(self.qp_w_addr),
                ctx_w.data.eq(self.qp_w_data),
            ]
            m.d.sync += [
                ctx_valid.bit_select(self.qp_w_addr, 1).eq(1),
                next_psn[self.qp_w_addr].eq(self.qp_w_data.start_psn),
                occ[self.qp_w_addr].eq(0),
                head[self.qp_w_addr].eq(0),
            ]

        # ------------------------------------------------------ packet cutter
        g_last = Signal()
        pkt_len = Signal(13)
        new_ok = Signal()
        ahead = Signal(range(max(self.fifo_depth, 512 * self.pending_depth) + 513))   # beats cut, not yet out on payload
        m.d.comb += [
            g_last.eq(g_left == 1),
            pkt_len.eq(Mux(g_last, g_last_len, g_pmtu)),
            new_ok.eq(g_active & ~g_writing & self.tx_ok.bit_select(g_qp, 1) & rx_idle & ~self.retx.valid
                      & pend.w_rdy & fi.w_rdy & rj.w_rdy & (ahead < self.fifo_depth)),
            self.spray_req.valid.eq(new_ok | rx_req_valid),
        ]
        m.d.comb += [
            self.spray_req.payload.qp.eq(Mux(rx_idle, g_qp, rx_q)),
            self.spray_req.payload.base.eq(g_ctx.profile_base),
            self.spray_req.payload.count.eq(g_ctx.profile_count),
        ]
        cut = new_ok & self.spray_req.ready

        pp = Signal(_PendingPacket)
        m.d.comb += [
            pp.qp.eq(g_qp),
            pp.dest_qpn.eq(g_ctx.dest_qpn),
            pp.mode.eq(g_ctx.mode),
            pp.peer_usid.eq(g_ctx.peer_usid),
            pp.psn.eq(g_psn),
            pp.imm_op.eq(g_is_imm & g_last),
            pp.last.eq(g_last),
            pp.va.eq(g_va),
            pp.rkey.eq(g_rkey),
            pp.length.eq(pkt_len),
            pp.imm.eq(g_imm),
            pp.retx.eq(0),
        ]
        job = Signal(_ReadJob)
        m.d.comb += [job.addr.eq(g_addr), job.beats.eq((pkt_len + 7) >> 3)]
        q_len = Signal(13)
        m.d.comb += [
            pend.w_data.eq(Mux(rx_load, x_pp, pp)),
            rj.w_data.eq(Mux(rx_load, x_job, job)),
            q_len.eq(Mux(rx_load, x_len, pkt_len)),
            pend.w_en.eq(cut | rx_load),
            rj.w_en.eq(cut | rx_load),
            fi.w_en.eq(cut | rx_load),
        ]
        fr = Signal(_FrameInfo)
        tail3 = q_len[:3]
        m.d.comb += [
            fr.last_beat.eq((q_len - 1) >> 3),
            fr.keep.eq(Mux(tail3 == 0, 0xFF, (Const(1, 9) << tail3) - 1)),
            fi.w_data.eq(fr),
        ]
        with m.If(cut):
            m.d.sync += [
                g_psn.eq(g_psn + 1),
                g_va.eq(g_va + g_pmtu),
                g_addr.eq(g_addr + g_pmtu),
                g_left.eq(g_left - 1),
            ]
            with m.If(g_last):
                m.d.sync += g_active.eq(0)

        # ------------------------------------- descriptor + decision -> pkt
        pend_pkt = _PendingPacket(pend.r_data)
        out = self.pkt.payload
        base_valid = Signal()
        xfer = Signal()
        m.d.comb += [
            base_valid.eq(pend.r_rdy & self.spray_decision.valid & ~dec_for_retx),
            self.pkt.valid.eq(base_valid & self.sent.ready),
            self.sent.valid.eq(base_valid & self.pkt.ready),
            xfer.eq(base_valid & self.pkt.ready & self.sent.ready),
            self.spray_decision.ready.eq(dec_refused | xfer),
            pend.r_en.eq(xfer),
            dec_used.eq(xfer),
            out.qp.eq(pend_pkt.qp),
            out.dest_qpn.eq(pend_pkt.dest_qpn),
            out.mode.eq(pend_pkt.mode),
            out.peer_usid.eq(pend_pkt.peer_usid),
            out.psn.eq(pend_pkt.psn),
            out.opcode.eq(Mux(pend_pkt.imm_op, wire.OP_WRITE_ONLY_IMM, wire.OP_WRITE_ONLY)),
            out.last.eq(pend_pkt.last),
            out.va.eq(pend_pkt.va),
            out.rkey.eq(pend_pkt.rkey),
            out.length.eq(pend_pkt.length),
            out.imm.eq(pend_pkt.imm),
            out.path.eq(self.spray_decision.payload),
        ]
        m.d.sync += nout.eq(nout + (self.spray_req.valid & self.spray_req.ready)
                            - (self.spray_decision.valid & self.spray_decision.ready))
        si = self.sent.payload
        m.d.comb += [
            si.qp.eq(out.qp),
            si.psn.eq(out.psn),
            si.index.eq(out.path.index),
            si.ev.eq(out.path.entry.ev),
            si.length.eq(out.length),
            si.msg_last.eq(out.last),
            si.retx.eq(pend_pkt.retx),
        ]

        # ------------------------------------------------------ AR generator
        axi = self.m_axi
        rjob = _ReadJob(rj.r_data)
        ar_active = Signal()
        ar_addr = Signal(32)
        ar_rem = Signal(10)
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
            m.d.sync += [ar_active.eq(1), ar_addr.eq(rjob.addr), ar_rem.eq(rjob.beats)]

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
        m.d.sync += ahead.eq(ahead + Mux(rj.w_en, _ReadJob(rj.w_data).beats, 0) - pop)
        return m
