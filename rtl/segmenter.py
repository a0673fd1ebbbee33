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

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed
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
from .params import NicParams, check_qps, param

__all__ = ["Segmenter", "RETX_WINDOW_WAIT"]

_MAX_BURST = 256          # AXI4 INCR burst limit, beats
#: most cycles a retransmission of a trimmed PSN waits for its QP's window (``tx_ok``)
RETX_WINDOW_WAIT = 2048
_MAX_WR_LENGTH = 1 << 31  # largest work request, bytes


class _FrameInfo(data.Struct):
    """Per packet, for the payload framer: index of the last beat, its tkeep, retransmission."""
    last_beat: 9
    keep: 8
    retx: 1


class _ReadJob(data.Struct):
    """Per packet, for the AR generator: first 8-byte word address and length in beats."""
    addr8: 29
    beats: 10


class _PendingPacket(data.Struct):
    """A TxPacket without its spray decision and QP-context fields, waiting for them."""
    qp: 3
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
        downstream frame builder (>= 4); also the depth of the per-packet
        framing and read-job FIFOs, i.e. how many packets may be cut ahead of
        their payload.
    msgs : int
        Message-table slots per QP (outstanding messages kept for
        retransmission), a power of two 2..16.
    retx_tries : int
        Spray decisions asked at most for one retransmission (1..16) while
        the decision's entry equals ``avoid_index``.
    params : NicParams
        The NIC's parameter set (:class:`~mrcnic.rtl.params.NicParams`): ``qps`` come from
        it (a keyword given as well must agree).  Standalone: leave it out; the keywords are
        checked by the same rules (:mod:`mrcnic.rtl.params`).

    Attributes
    ----------
    wr : In(stream.Signature(WorkRequest))
        Work requests.  Accepted (``ready`` high: flip-flops selected by
        ``wr.payload.qp``) into a one-entry holding register when it is empty,
        no commit happened in the previous cycle,
        and the QP's message table had a free slot or the QP was invalid
        in the previous cycle
        (``ready`` depends on ``wr.payload.qp``: a QP with a full table holds
        the stream, head of line, until ``una`` frees a slot -- never dropped;
        this holds a request that will be refused for its length or address,
        too).  It is checked there over 4 cycles while the previous message
        is still being cut, and committed to the cutter when that is free.
        Refused -- dropped,
        counted in ``wr_refused``, ``wr_error`` pulsed, nothing emitted, no PSN
        used, no slot taken -- when ``length`` is 0 or > 2**31, ``local_addr``
        is not 8-byte aligned, ``local_addr + length`` passes 2**32,
        ``qp >= qps`` or the QP's context was never written.  ``wr_id`` is not
        used here (completion tracking is downstream's, by PSN).
    qp_w_en, qp_w_addr, qp_w_data : In(1), In(3), In(QpContext)
        QP context table write port.  A write (re)sets the QP's next PSN to
        ``start_psn``, empties its message table and marks the context valid;
        writes to ``addr >= qps`` are ignored.  Packets take the EV profile
        current one cycle before they are cut, and DestQP, mode and peer uSID
        current while they wait on ``pkt`` (read from the context table then,
        not queued with the descriptor); a context write delays the commit of a waiting request
        by a cycle (it then starts at the new next PSN), except in the commit
        cycle itself, where the request uses the old next PSN and the write
        sets the new one.  Write a context only while its QP has no traffic
        and no retransmission request.
    pmtu_log2 : In(4)
        Path MTU: 2**pmtu_log2 payload bytes per packet, clamped to 8..12
        (256..4096 bytes).  Sampled when a work request is accepted (kept per
        message for its retransmissions).
    spray_req : Out(stream.Signature(SprayReq))
        One request per packet {qp, base = profile_base, count = profile_count},
        plus one per try of a retransmission; ``valid`` and ``payload`` come from
        a 5-entry FIFO (registered), ``ready`` only pops it.
    spray_decision : In(stream.Signature(Decision))
        One decision per request, in request order, any number of cycles later.
        Taken into a one-entry register: ``ready`` is a flip-flop (high while
        that register will be empty), so at most one decision per 2 cycles.
    pkt : Out(stream.Signature(TxPacket))
        One descriptor per packet: new packets in PSN order per QP, with
        retransmissions between them.  QP context fields, ``psn`` (consecutive
        from the QP's next PSN, modulo 2**24), ``opcode`` (``OP_WRITE_ONLY``;
        ``OP_WRITE_ONLY_IMM`` on the last packet of a WRITE_IMM), ``last``
        (last packet of the message, BTH AckReq), ``va`` = remote_va + offset,
        ``rkey``, ``length`` (bytes: the path MTU, the remainder on the last
        packet), ``imm``, ``path`` = the decision.  ``valid`` also requires
        ``sent.ready`` (the two transfer together).  ``valid`` is one LUT level
        from flip-flops and ``sent.ready``, ``payload`` comes from flip-flops
        (``opcode`` one LUT level; ``dest_qpn``, ``mode``, ``peer_usid`` through
        the context table's read mux by ``qp`` when ``qps`` > 1); ``ready`` drives no FIFO logic (the
        descriptor FIFO is popped the cycle after the transfer).  At most one
        descriptor per 2 cycles (packets are >= 32 payload beats).
    payload : Out(AxiStreamSignature(64))
        One frame per ``pkt``, same order: the packet's payload bytes, lane 0
        first, ``tkeep`` all ones except on the last beat, ``tlast`` on it.
        ``tvalid``, ``tdata``, ``tkeep``, ``tlast`` come from flip-flops (a
        9-entry output FIFO, fed from the block RAM's output register).
    m_axi : Out(Axi4ReadSignature(32, 64, 4))
        AXI4 read manager (``m_axi__araddr`` ...): ``arid`` 0, INCR,
        ``arsize`` 3, <= 256 beats, never across a 4 KiB boundary; one or more
        bursts per packet reading the 8-byte words holding its bytes, nothing
        else.  Several bursts are outstanding; data must return in order (one
        ID).  ``rready`` is always high: a burst is issued only when the
        payload FIFO has room for 256 more beats than are already in flight.
    retx : In(stream.Signature(RetxReq))
        Send PSN ``psn`` of QP ``qp`` again, not on entry ``avoid_index``.
        Taken (``ready``, a flip-flop) into a one-entry register when that is
        empty; the retransmission engine takes it from there when idle -- a
        request with ``trim`` set (its copy was trimmed: its bytes left the
        window) only while its QP's ``tx_ok`` was set in the previous cycle, or
        after :data:`RETX_WINDOW_WAIT` cycles of waiting for it.  The PSN is
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
        are checked for the oldest message of one QP per 4 cycles (read,
        subtract, compare, release; ``una`` registered), round robin -- the same QP
        again after a check that released, so one QP drains a message per 4 cycles --
        while the retransmission engine is idle.  Tie to ``next_psn`` when no reliability block is
        present (every message released at once; no retransmission possible).
    tx_ok : In(qps)
        Per QP window (from sender reliability): a new packet of the QP is cut
        only while its bit was 1 in the previous cycle (registered);
        retransmissions after an ACK timeout ignore it, those of trimmed copies
        wait for it (see ``retx``).  While the message
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

    * WR handshake -> first ``spray_req`` valid: 13 + (pmtu_log2 - 8) (4 cycles of
      checks, plus one per bit the length is shifted right beyond 8 for the packet
      count, and the
      QP's next PSN in the holding register, commit, the message's table entry
      written: 5 block-RAM words, one per cycle, then the cutter starts; the
      request passes the spray request FIFO).  Then one packet per cycle while
      the spray request FIFO has room, ``tx_ok`` was set, the pending/framing/
      read-job FIFOs have 4 free entries (checked two cycles early and written
      a cycle after the cut: cuts fill them to ``pending_depth`` - 2) and fewer than ``fifo_depth`` beats of new
      packets are cut but not yet out on ``payload`` (counted one cycle late,
      an overestimate; this bounds how far new packets run ahead, hence how
      long a retransmission waits: at most min(``pending_depth``,
      ``fifo_depth`` / packet beats + 1) packets).  A message of N packets
      occupies the cutter N + 7 cycles; the next one is checked meanwhile.
      (Every decision of the cutter comes from flip-flops one LUT level deep.)
    * Decision arrival -> ``pkt`` valid: 1 (it passes the decision register;
      the descriptor is in the pending FIFO by then when the decision came
      back at once).
      Descriptors run up to ``pending_depth`` packets ahead of the payload.
    * Packet cut -> its AR: 4 (one read job per packet; bursts sized over 2
      cycles, one AR every 3 cycles at most).
    * R beat -> ``payload`` beat: 5 (block RAM write, read address, EBR
      output register, output FIFO write and its output register).  Payload runs at one beat per cycle while R
      does, with no idle cycle between packets or messages.
    * Retransmission: ``retx`` handshake -> engine (between two release
      checks, within 4 cycles of the handshake, or when the previous
      retransmission is settled) -> table lookup 4 cycles per slot searched (read,
      subtract, compare, decide; <= ``msgs`` slots) + 1 -> the message's
      block-RAM words fetched (7 cycles: the RAM output is registered) ->
      packet rebuilt over 4 + (log2 - 8) cycles (the offset shifted one bit per
      cycle beyond 8) -> queued (read job issued) -> one spray
      request per try, each waiting for the decisions of packets queued
      before it.  No new packet is cut from the ``retx`` handshake until the
      decision is settled; the retransmitted packet leaves after the packets
      already cut (bounded as above).  One retransmission is handled at a
      time; the accepted decision stays in the decision register (the head
      of the decision stream) until its packet leaves on ``pkt`` (refused ones are taken at once), so
      any number of retransmitted packets may wait in the pending FIFO.
    * Buffering: ``fifo_depth`` x 64-bit payload block RAM (read through the
      EBR output register: ``no_rw_check``, only written words are read) + 9
      beats in the output FIFO, ``pending_depth``
      descriptors / frame infos / read jobs, ``qps * msgs`` message-table
      slots: 48-bit PSN ranges (distributed RAM) + 5 x 36-bit words in one
      block RAM (``ram_style = "block"``).
    * A message of 2**23 or more packets is never released (its table slot
      stays used); sender reliability windows are far smaller.
    """

    def __init__(self, qps: "int | None" = None, fifo_depth: int = 1024, pending_depth: int = 16,
                 msgs: int = 4, retx_tries: int = 4, *, params: "NicParams | None" = None):
        qps = check_qps(param(params, "qps", qps, MAX_QPS))
        if fifo_depth < 2 * _MAX_BURST:
            raise ValueError(f"fifo_depth must be >= {2 * _MAX_BURST} beats, not {fifo_depth}")
        if pending_depth < 4:
            raise ValueError(f"pending_depth must be >= 4, not {pending_depth}")
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
        ctx_o = ctx.read_port(domain="comb")     # the QP of the descriptor on ``pkt``
        ctx_valid = Signal(qps)
        next_psn = Array(Signal(24, name=f"next_psn{i}") for i in range(qps))
        for i in range(qps):
            m.d.comb += self.next_psn[i].eq(next_psn[i])

        # ------------------------------------------------------ message table
        m.submodules.msgs = tab = memory.Memory(shape=_MsgKey, depth=qps * msgs, init=[])
        tab_w = tab.write_port()
        # no_rw_check: bulk words are written when a free slot takes a new message and read
        # only for a retransmission of a message already in its slot, so a word is never
        # read in the cycle it is written (no collision logic after the block RAM, and
        # bulk_q becomes its output register).
        m.submodules.msg_bulk = bulk = memory.Memory(
            shape=_BULK_BITS, depth=qps * msgs * _BULK_STRIDE, init=[],
            attrs={"ram_style": "block", "no_rw_check": 1})
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
        # spray requests leave from a register: ``spray_req.ready`` reaches no cutter logic
        m.submodules.spray_reqs = sq = fifo.SyncFIFOBuffered(
            width=SprayReq.as_shape().size, depth=5)
        m.d.comb += [
            self.spray_req.valid.eq(sq.r_rdy),
            self.spray_req.payload.eq(sq.r_data),
            sq.r_en.eq(self.spray_req.ready),
        ]

        rx_idle = Signal()          # retransmission engine idle (no table search / rebuild)
        rx_busy = Signal()          # its inverse, as a flip-flop (== state != IDLE)
        rel_busy = Signal()         # a release check is in flight

        # ------------------------------------------- WR intake: hold register + checks
        # Taken into a register when it is empty and the QP's table has room (or the
        # request is refused anyway); checked over 3 cycles while the cutter may still
        # be busy with the previous message; committed when the cutter is free.
        wr = self.wr.payload
        p_log2 = Signal(4)
        with m.If(self.pmtu_log2 < 8):
            m.d.comb += p_log2.eq(8)
        with m.Elif(self.pmtu_log2 > 12):
            m.d.comb += p_log2.eq(12)
        with m.Else():
            m.d.comb += p_log2.eq(self.pmtu_log2)

        w_full = Signal()
        w_step = Signal(2)      # 0, 1, 2: checking; 3: next PSN read, then ready to commit
        w_qp = Signal(3)
        w_is_imm = Signal()
        w_addr = Signal(32)
        w_va = Signal(64)
        w_len = Signal(32)
        w_rkey = Signal(32)
        w_imm = Signal(32)
        w_log2 = Signal(4)
        w_qp_ok = Signal()
        w_len_m1 = Signal(32)
        w_bad = Signal()
        w_shift = Signal(24)
        w_sh = Signal(3)        # right shifts of w_shift still to do (pmtu_log2 - 8)
        w_npkts = Signal(24)    # packets of the message, modulo 2**24
        w_last_len = Signal(13)  # bytes in the last packet
        w_last_m1 = Signal(12)   # ... minus 1 (step 1)
        w_one = Signal()         # the message is one packet (w_npkts == 1)
        w_beats0 = Signal(10)    # beats of its first packet
        w_pmtu = Signal(13)
        w_pmtu_fr = Signal(_FrameInfo)
        w_pmtu_beats = Signal(10)
        w_last_fr = Signal(_FrameInfo)
        w_last_beats = Signal(10)
        w_first = Signal(24)    # step 3: the QP's next PSN, registered every cycle
        w_sum = Signal(24)      # ... and next PSN + npkts
        w_sum_ok = Signal()     # w_first / w_sum are current (no context write last cycle)

        qp_ok_in = Signal()
        # ready from flip-flops: per QP "table has room or the request is refused anyway"
        # (registered, so one cycle stale: a commit blocks the cycle after it, where the
        # committed QP's flag is not updated yet; a release or context write shows late)
        wr_ok_r = Signal(8)
        commit_r = Signal()
        m.d.comb += [
            qp_ok_in.eq((wr.qp < qps) & ctx_valid.bit_select(wr.qp, 1)),
            self.wr.ready.eq(~w_full & ~commit_r & wr_ok_r.bit_select(wr.qp, 1)),
        ]
        for i in range(8):
            m.d.sync += wr_ok_r[i].eq(((occ[i] < msgs) | ~ctx_valid[i]) if i < qps else 1)
        # the holding registers follow the stream while empty (enable ~w_full, a
        # flip-flop); the handshake only sets w_full and restarts the checks
        with m.If(self.wr.valid & self.wr.ready):
            m.d.sync += [w_full.eq(1), w_step.eq(0), w_sum_ok.eq(0)]
        with m.If(~w_full):
            m.d.sync += [
                w_qp.eq(wr.qp), w_is_imm.eq(wr.opcode == WrOpcode.WRITE_IMM),
                w_addr.eq(wr.local_addr), w_va.eq(wr.remote_va), w_len.eq(wr.length),
                w_rkey.eq(wr.rkey), w_imm.eq(wr.imm), w_log2.eq(p_log2), w_qp_ok.eq(qp_ok_in),
            ]
        m.d.sync += self.wr_error.eq(0)
        with m.If(w_full), m.Switch(w_step):
            with m.Case(0):
                m.d.sync += [
                    w_len_m1.eq(w_len - 1),
                    w_bad.eq((w_len == 0) | (w_len[31] & (w_len[:31] != 0))
                             | (w_addr[:3] != 0) | ~w_qp_ok),
                    w_step.eq(1),
                ]
            with m.Case(1):
                m.d.sync += [
                    # local_addr + length > 2**32 <=> local_addr + (length - 1) carries out
                    # (length 0 is refused already): the adder's carry only, no compare
                    w_bad.eq(w_bad | (Cat(w_addr, Const(0, 1)) + w_len_m1)[32]),
                    # (len - 1) >> log2, log2 = 8..12: >> 8 here, then one bit per cycle
                    w_shift.eq(w_len_m1[8:]),
                    w_sh.eq(w_log2[:3]),
                    w_last_m1.eq(w_len_m1[:12] & ~(Const(-1, 12) << w_log2)),
                    w_pmtu.eq(Const(1, 13) << w_log2),
                    w_step.eq(2),
                ]
            with m.Case(2):
                with m.If(w_sh != 0):
                    m.d.sync += [w_shift.eq(w_shift >> 1), w_sh.eq(w_sh - 1)]
                with m.Else():
                    with m.If(w_bad):
                        m.d.sync += [self.wr_refused.eq(self.wr_refused + 1), self.wr_error.eq(1),
                                     w_full.eq(0)]
                    m.d.sync += [
                        w_npkts.eq(w_shift + 1),
                        w_one.eq(w_shift == 0),
                        w_last_len.eq(w_last_m1 + 1),
                        w_last_beats.eq((w_last_m1 >> 3) + 1),
                        w_last_fr.last_beat.eq(w_last_m1 >> 3),
                        # bytes on the last beat: w_last_m1[:3] + 1
                        w_last_fr.keep.eq(((Const(2, 10) << w_last_m1[:3]) - 1)[:8]),
                        w_pmtu_beats.eq(w_pmtu[3:]),
                        w_pmtu_fr.last_beat.eq(w_pmtu[3:] - 1),
                        w_pmtu_fr.keep.eq(0xFF),
                        w_step.eq(3),
                    ]
            with m.Case(3):
                m.d.sync += [w_first.eq(next_psn[w_qp]), w_sum.eq(next_psn[w_qp] + w_npkts),
                             w_beats0.eq(Mux(w_one, w_last_beats, w_pmtu_beats)),
                             w_sum_ok.eq(~self.qp_w_en)]

        # cutter state (one message at a time)
        g_active = Signal()     # a message is committed and not fully cut
        g_go = Signal()         # ... and its bulk words are written: cutting
        g_qp = Signal(3)
        c_ctx = Signal(QpContext)   # context of the cutter's / the retransmission's QP, a cycle old
        g_first = Signal(24)
        g_slot = Signal(sbits)
        g_psn = Signal(24)
        g_va_lo = Signal(32)
        g_va_hi = Signal(32)
        g_va_fix = Signal()     # g_va_lo carried out: g_va_hi + 1 next cycle (no cut meanwhile)
        g_addr = Signal(32)
        g_left = Signal(24)     # packets left to cut, modulo 2**24
        g_last = Signal()       # g_left == 1
        g_last_len = Signal(13)
        g_rkey = Signal(32)
        g_imm = Signal(32)
        g_is_imm = Signal()
        g_pmtu = Signal(13)
        g_log2 = Signal(4)
        g_pmtu_fr = Signal(_FrameInfo)
        g_pmtu_beats = Signal(10)
        g_last_fr = Signal(_FrameInfo)
        g_last_beats = Signal(10)
        g_beats = Signal(10)    # beats of the next packet: g_last ? g_last_beats : g_pmtu_beats
        g_wbeat = Signal(range(_BULK_WORDS))   # bulk words written (cutting waits for all)

        commit = Signal()
        w_room = Signal()
        tail = Signal(sbits)
        m.d.comb += [
            tail.eq(head[w_qp] + occ[w_qp]),
            commit.eq(w_full & w_sum_ok & w_room & ~g_active & rx_idle),
        ]
        # w_room: the held request's QP has a free table slot, registered (stale only
        # after a release or context write: a commit clears w_full, and the next request
        # reaches step 3 >= 4 cycles later)
        m.d.sync += w_room.eq(occ[w_qp] < msgs)
        m.d.sync += commit_r.eq(commit)
        with m.If(commit):
            m.d.sync += [
                w_full.eq(0),
                g_active.eq(1), g_wbeat.eq(0),
                next_psn[w_qp].eq(w_sum),
            ]
        new_key = Signal(_MsgKey)
        m.d.comb += [
            new_key.first_psn.eq(w_first),
            new_key.count.eq(w_npkts),
            tab_w.addr.eq((w_qp << sbits) | tail),
            tab_w.data.eq(new_key),
            tab_w.en.eq(commit),
        ]
        # bulk words: from the cutter registers, before the first cut changes g_va/g_addr
        g_bulk = Signal(_MsgBulk)
        g_writing = Signal()
        m.d.comb += [
            g_bulk.log2.eq(g_log2),
            g_bulk.local_addr.eq(g_addr[3:]),
            g_bulk.remote_va.eq(Cat(g_va_lo, g_va_hi)),
            g_bulk.rkey.eq(g_rkey),
            g_bulk.last_len.eq(g_last_len),
            g_bulk.is_imm.eq(g_is_imm),
            g_bulk.imm.eq(g_imm),
            g_writing.eq(g_active & ~g_go),
        ]
        # written a cycle late, from registers (a retransmission reads the words only
        # after a packet of the message is cut, many cycles after the last one)
        m.d.sync += [
            bulk_w.addr.eq(Cat(g_wbeat, Const(0, 3 - len(g_wbeat)), g_slot, g_qp[:max(1, (qps - 1).bit_length())])),
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
        rx_w = Signal(range(_BULK_WORDS + 2))
        bulk_q = Signal(_BULK_BITS)     # block-RAM output register (read data 2 cycles late)
        m.d.sync += bulk_q.eq(bulk_r.data)
        rx_tries = Signal(range(self.retx_tries + 1))
        rx_skip = Signal(range(self.pending_depth + 2))
        # decisions asked for (pushed into the spray request FIFO) and taken, modulo 2**k
        nbits = (self.pending_depth + 2).bit_length() + 1
        nout = Signal(nbits)                           # decisions asked for, not yet taken
        dec_used = Signal()                            # a packet took its decision this cycle
        dec_used_r = Signal()                          # ... last cycle
        rx_load = Signal()
        in_load = Signal()          # == state LOAD, as a flip-flop
        in_req = Signal()           # == state REQ, as a flip-flop (the spray FIFO's write enable)
        rx_push = Signal()
        sq_room = Signal()          # registered: the spray FIFO has room for one more
        # in_req is 1 exactly in REQ (set on every entry, cleared on the only exit), so the
        # push needs no state decode, and room is a register (lv_ok[3], see the cutter),
        # not the FIFO's w_rdy: the spray FIFO's write enable is two registers deep
        # (Versa critical path: FIFO level -> w_rdy -> push -> w_en -> FIFO level)
        m.d.comb += rx_push.eq(in_req & sq_room)
        dec_for_retx = Signal()     # registered: WAIT and the decision at the head is ours
        room_ok = Signal()          # per-packet FIFOs can take a packet (see the cutter)

        # context read: the cutter's QP or, while the engine is busy, the retransmitted one's
        m.d.comb += ctx_r.addr.eq(Mux(rx_idle, Mux(g_active, g_qp, w_qp), rx_q))
        m.d.sync += c_ctx.eq(ctx_r.data)

        # table search: one slot per 4 cycles (read, subtract, compare, decide)
        t_key = Signal(_MsgKey)             # table word read last cycle
        t_slot = Signal(sbits)
        x_slot = Signal(sbits)
        x_d = Signal(24)
        x_cnt = Signal(24)
        x_cut = Signal(24)
        x_cur = Signal()
        x_hit = Signal()
        m.d.sync += t_key.eq(tab_r.data)
        lt_cnt = Signal(25)
        lt_cut = Signal(25)
        m.d.comb += [lt_cnt.eq(x_d - x_cnt), lt_cut.eq(x_d - x_cut)]
        # x_slot = head + rx_i and occ_q = occ of rx_q kept in registers: while the engine
        # is busy neither changes (commits and releases wait for it to be idle; a commit
        # in the very cycle a request is taken adds a message with no packet cut yet,
        # which the search would not match anyway)
        occ_q = Signal(range(msgs + 1))

        # packet rebuilt from the table entry, over 3 cycles (registered)
        x_byte = Signal(32)
        x_sh = Signal(3)        # left shifts of x_byte still to do (log2 - 8)
        x_cntm1 = Signal(24)
        x_pmtu = Signal(13)
        x_last = Signal()
        x_va_lo = Signal(33)
        x_va_hi = Signal(32)
        x_addr = Signal(32)
        x_len = Signal(13)
        x_beats = Signal(10)
        x_fr = Signal(_FrameInfo)
        x_pp = Signal(_PendingPacket)
        x_job = Signal(_ReadJob)
        m.d.comb += [
            x_pp.qp.eq(rx_q),
            x_pp.psn.eq(rx_psn),
            x_pp.imm_op.eq(rx_msg.is_imm & x_last),
            x_pp.last.eq(x_last),
            x_pp.va.eq(Cat(x_va_lo[:32], x_va_hi)),
            x_pp.rkey.eq(rx_msg.rkey),
            x_pp.length.eq(x_len),
            x_pp.imm.eq(rx_msg.imm),
            x_pp.retx.eq(1),
            x_job.addr8.eq(x_addr[3:]),
            x_job.beats.eq(x_beats),
        ]
        dec_refused = Signal()
        # Spray decisions pass a one-entry register: ``spray_decision.ready`` is a flip-flop
        # (high while the register will be empty), so the scheduler's output stage sees no
        # logic of ours.  One decision per 2 cycles at most (packets are >= 32 beats).
        d_valid = Signal()
        d_rdy = Signal()
        d_take = Signal()           # the decision in the register is used or refused
        dec = Signal(Decision)
        d_load = Signal()
        d_valid_next = Signal()
        m.d.comb += [
            self.spray_decision.ready.eq(d_rdy),
            d_load.eq(self.spray_decision.valid & d_rdy),
            d_valid_next.eq((d_valid & ~d_take) | d_load),
        ]
        m.d.sync += [d_valid.eq(d_valid_next), d_rdy.eq(~d_valid_next)]
        # compared as it is loaded (rx_avoid and rx_tries are set before the request
        # whose decision it may be): ``d_same`` its entry is ``avoid_index``,
        # ``d_refuse`` a retransmission would refuse it
        d_same = Signal()
        d_refuse = Signal()
        with m.If(d_load):
            d_idx_same = self.spray_decision.payload.index == rx_avoid
            m.d.sync += [dec.eq(self.spray_decision.payload), d_same.eq(d_idx_same),
                         d_refuse.eq(d_idx_same & (rx_tries < self.retx_tries))]
        # dec_for_retx is only ever set in WAIT
        m.d.comb += dec_refused.eq(dec_for_retx & d_valid & d_refuse)

        # retransmission requests pass a one-entry register (``retx.ready`` = empty, a
        # flip-flop); the engine takes it from there when idle, between release checks
        r_full = Signal()
        r_req = Signal(RetxReq)
        m.d.comb += self.retx.ready.eq(~r_full)
        with m.If(self.retx.valid & ~r_full):
            m.d.sync += [r_full.eq(1), r_req.eq(self.retx.payload)]

        # a trimmed PSN's copy waits for its QP's window (``tx_ok``, registered), at most
        # RETX_WINDOW_WAIT cycles (so a window that never opens cannot hold the engine)
        tx_ok_r = Signal(qps)
        r_wait = Signal(range(RETX_WINDOW_WAIT + 1))
        r_go = Signal()
        m.d.sync += tx_ok_r.eq(self.tx_ok)
        m.d.comb += r_go.eq(~r_req.trim | (r_req.qp >= qps) | (r_wait == RETX_WINDOW_WAIT)
                            | tx_ok_r.bit_select(r_req.qp[:max(1, (qps - 1).bit_length())], 1))
        with m.If(~r_full):
            m.d.sync += r_wait.eq(0)
        with m.Elif(~r_go):
            m.d.sync += r_wait.eq(r_wait + 1)
        m.d.comb += [rx_idle.eq(~rx_busy), rx_load.eq(in_load & room_ok)]
        with m.FSM(name="retx_fsm"):
            with m.State("IDLE"):
                with m.If(r_full & ~rel_busy & r_go):
                    m.d.sync += [rx_q.eq(r_req.qp), rx_psn.eq(r_req.psn),
                                 rx_avoid.eq(r_req.avoid_index), rx_i.eq(0), r_full.eq(0),
                                 x_slot.eq(head[r_req.qp]), occ_q.eq(occ[r_req.qp])]
                    with m.If(r_req.qp < qps):
                        m.d.sync += rx_busy.eq(1)
                        m.next = "SEARCH"
                    with m.Else():
                        m.d.sync += self.retx_unknown.eq(self.retx_unknown + 1)
            with m.State("SEARCH"):
                # table word of slot head + rx_i read (into t_key)
                with m.If(rx_i >= occ_q):
                    m.d.sync += self.retx_unknown.eq(self.retx_unknown + 1)
                    m.d.sync += rx_busy.eq(0)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += t_slot.eq(x_slot)
                    m.next = "SUB"
            with m.State("SUB"):
                m.d.sync += [
                    x_d.eq(rx_psn - t_key.first_psn),
                    x_cnt.eq(t_key.count),
                    x_cur.eq(g_active & (g_qp == rx_q) & (g_slot == t_slot)),
                    x_cut.eq(g_psn - g_first),
                ]
                m.next = "CMP"
            with m.State("CMP"):
                # compares as subtractions (carry chains): borrow = less than
                m.d.sync += x_hit.eq(lt_cnt[24] & ~(x_cur & ~lt_cut[24]))
                m.next = "HIT"
            with m.State("HIT"):
                with m.If(x_hit):
                    m.d.sync += [rx_count.eq(x_cnt), rx_off.eq(x_d), rx_slot.eq(t_slot),
                                 rx_w.eq(0)]
                    m.next = "FETCH"
                with m.Else():
                    m.d.sync += [rx_i.eq(rx_i + 1), x_slot.eq(x_slot + 1)]
                    m.next = "SEARCH"
            with m.State("FETCH"):
                # the slot's bulk words, one per cycle (data two cycles after the address)
                m.d.comb += [
                    bulk_r.addr.eq(Cat(rx_w[:3], rx_slot, rx_q[:max(1, (qps - 1).bit_length())])),
                    bulk_r.en.eq(1),
                ]
                m.d.sync += rx_w.eq(rx_w + 1)
                with m.If(rx_w >= 2):
                    # shift register: word 0 ends at the bottom after the last one
                    m.d.sync += rx_bulk_words.eq(Cat(rx_bulk_words[_BULK_BITS:], bulk_q))
                with m.If(rx_w == _BULK_WORDS + 1):
                    m.next = "PREP1"
            with m.State("PREP1"):
                # offset << log2, log2 = 8..12: << 8 here, then one bit per cycle (SHIFT)
                m.d.sync += [x_byte.eq(Cat(Const(0, 8), rx_off)), x_sh.eq(rx_msg.log2[:3]),
                             x_cntm1.eq(rx_count - 1),
                             x_pmtu.eq(Const(1, 13) << rx_msg.log2)]
                m.next = "SHIFT"
            with m.State("SHIFT"):
                with m.If(x_sh != 0):
                    m.d.sync += [x_byte.eq(x_byte << 1), x_sh.eq(x_sh - 1)]
                with m.Else():
                    m.next = "PREP2"
            with m.State("PREP2"):
                m.d.sync += [
                    x_last.eq(rx_off == x_cntm1),
                    x_va_lo.eq(Cat(rx_msg.remote_va[:8], rx_msg.remote_va[8:32] + x_byte[8:])),
                    x_addr.eq(Cat(Const(0, 3), rx_msg.local_addr[:5],
                                  rx_msg.local_addr[5:] + x_byte[8:])),
                ]
                m.next = "PREP3"
            with m.State("PREP3"):
                full_beats = x_pmtu[3:]
                m.d.sync += [
                    x_va_hi.eq(rx_msg.remote_va[32:] + x_va_lo[32]),
                    x_len.eq(Mux(x_last, rx_msg.last_len, x_pmtu)),
                    x_beats.eq(Mux(x_last, (rx_msg.last_len + 7) >> 3, full_beats)),
                    x_fr.last_beat.eq(Mux(x_last, (rx_msg.last_len - 1) >> 3, full_beats - 1)),
                    x_fr.retx.eq(1),
                    x_fr.keep.eq(Mux(x_last & (rx_msg.last_len[:3] != 0),
                                     (Const(1, 9) << rx_msg.last_len[:3]) - 1, 0xFF)),
                ]
                m.d.sync += in_load.eq(1)
                m.next = "LOAD"
            with m.State("LOAD"), m.If(room_ok):
                m.d.sync += in_load.eq(0)
                m.d.sync += [rx_tries.eq(0), self.retransmits.eq(self.retransmits + 1)]
                m.d.sync += in_req.eq(1)
                m.next = "REQ"
            with m.State("REQ"):
                with m.If(sq_room):
                    m.d.sync += in_req.eq(0)
                    m.d.sync += [rx_tries.eq(rx_tries + 1),
                                 rx_skip.eq(nout),
                                 dec_for_retx.eq(nout == 0)]
                    m.next = "WAIT"
            with m.State("WAIT"):
                # The decision stays in the spray stream; once it is at the head
                # (every earlier one taken by its packet) it is refused -- taken
                # here, another one asked for -- or left for the retransmitted
                # packet, now at the head of the pending FIFO.
                # dec_for_retx (a register) == rx_skip is 0 here
                with m.If(dec_for_retx):
                    with m.If(d_valid):
                        m.d.sync += dec_for_retx.eq(0)
                        with m.If(d_refuse):
                            m.d.sync += in_req.eq(1)
                            m.next = "REQ"
                        with m.Else():
                            with m.If(d_same):
                                m.d.sync += self.retx_same_path.eq(self.retx_same_path + 1)
                            m.d.sync += rx_busy.eq(0)
                            m.next = "IDLE"
                with m.Else():
                    m.d.sync += [rx_skip.eq(rx_skip - dec_used_r),
                                 dec_for_retx.eq((rx_skip == 1) & dec_used_r)]

        # -------------------------------------------------- message release
        # One QP's oldest message per 4 cycles, round robin (staying on a QP while its checks
        # release), while the retransmission engine is idle: read its table word, subtract,
        # compare (``una`` registered).
        una_r = Signal(data.ArrayLayout(24, qps))
        m.d.sync += una_r.eq(self.una)
        rel_q = Signal(range(qps))
        rel_st = Signal(2)              # 0: start, 1: subtract, 2: compare, 3: release
        r_hit = Signal()
        r_ok = Signal()
        r_d = Signal(24)
        r_cnt = Signal(24)
        rel = Signal()
        r_lt = Signal(25)       # borrow of r_d - r_cnt: r_d < r_cnt
        m.d.comb += r_lt.eq(r_d - r_cnt)
        m.d.comb += [
            rel_busy.eq(rel_st != 0),
            tab_r.addr.eq(Mux(rx_idle, (rel_q << sbits) | head[rel_q], (rx_q << sbits) | x_slot)),
        ]
        with m.Switch(rel_st):
            with m.Case(0), m.If(rx_idle & ~r_full):
                m.d.sync += [r_ok.eq((occ[rel_q] != 0) & ~self.qp_w_en), rel_st.eq(1)]
            with m.Case(1):
                m.d.sync += [r_d.eq(una_r[rel_q] - t_key.first_psn), r_cnt.eq(t_key.count),
                             rel_st.eq(2)]
            with m.Case(2):
                m.d.sync += [r_hit.eq(~r_lt[24] & ~r_d[23]), rel_st.eq(3)]
            with m.Case(3):
                # a QP whose check released a message is checked again next (it drains at
                # one message per 4 cycles: single-packet messages at line rate), the next
                # QP otherwise (an empty table or nothing acknowledged: round robin)
                m.d.comb += rel.eq(r_ok & r_hit)
                m.d.sync += rel_st.eq(0)
                with m.If(~(r_ok & r_hit)):
                    m.d.sync += rel_q.eq(Mux(rel_q == qps - 1, 0, rel_q + 1))
        with m.If(self.qp_w_en):
            m.d.sync += r_ok.eq(0)      # a context write empties tables: check again
        for i in range(qps):
            inc = commit & (w_qp == i)
            dcr = rel & (rel_q == i)
            m.d.sync += occ[i].eq(Mux(inc, Mux(dcr, occ[i], occ[i] + 1),
                                      Mux(dcr, occ[i] - 1, occ[i])))
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
        pkt_len = Signal(13)
        new_ok = Signal()
        cut = Signal()
        ahead = Signal(range(max(self.fifo_depth, 512 * self.pending_depth) + 513))   # beats cut, not yet out on payload
        # Registered room: at most one write per cycle, each FIFO's level compared
        # (registered) two cycles before the cut may use it, and the per-packet FIFOs
        # written a cycle after the cut, so "4 free entries" then (3 for the spray
        # request FIFO, written at the cut) guarantees one when the write lands.
        room_next = Signal()
        lv_ok = Signal(4)
        m.d.sync += lv_ok.eq(Cat(pend.w_level <= self.pending_depth - 4,
                                 fi.w_level <= self.pending_depth - 4,
                                 rj.w_level <= self.pending_depth - 4,
                                 sq.w_level <= sq.depth - 3))
        m.d.comb += room_next.eq(lv_ok.all())
        # level <= depth - 3 last cycle, at most one write since: at least 2 entries free
        # now, so w_rdy holds (SyncFIFOBuffered: its inner FIFO has depth - 1 entries)
        m.d.comb += sq_room.eq(lv_ok[3])
        m.d.sync += room_ok.eq(room_next)
        # new_ok from two registers holding next cycle's terms, so the cut (the clock
        # enable of the whole cutter and the FIFO writes) is one LUT level deep:
        #   go_r   = g_go & ~g_va_fix & rx_idle, and rx_idle last cycle (c_ctx then holds
        #            g_qp's context)
        #   flow_r = room_ok & tx_ok of the cutter's QP (registered)
        #   ahead_ok = ahead < fifo_depth (registered from both outcomes of this cycle)
        go_r = Signal()
        flow_r = Signal()
        ahead_ok = Signal()
        g_go_next = Signal()
        va_next = Signal(33)    # g_va_lo + g_pmtu, with its carry: a register
        m.d.comb += [
            g_go_next.eq((g_go & ~(cut & g_last)) | (g_writing & (g_wbeat == _BULK_WORDS - 1))),
            pkt_len.eq(Mux(g_last, g_last_len, g_pmtu)),
            new_ok.eq(go_r & flow_r & ahead_ok & ~r_full),
            cut.eq(new_ok),
        ]
        m.d.sync += [
            g_go.eq(g_go_next),
            # rx_idle now and next cycle (no retransmission request taken now)
            go_r.eq(g_go_next & ~(cut & va_next[32]) & rx_idle
                    & ~(r_full & ~rel_busy)),
        ]
        sreq = SprayReq(sq.w_data)
        m.d.comb += [
            sq.w_en.eq(cut | rx_push),
            sreq.qp.eq(Mux(rx_idle, g_qp, rx_q)),
            sreq.base.eq(c_ctx.profile_base),
            sreq.count.eq(c_ctx.profile_count),
        ]

        pp = Signal(_PendingPacket)
        m.d.comb += [
            pp.qp.eq(g_qp),
            pp.psn.eq(g_psn),
            pp.imm_op.eq(g_is_imm & g_last),
            pp.last.eq(g_last),
            pp.va.eq(Cat(g_va_lo, g_va_hi)),
            pp.rkey.eq(g_rkey),
            pp.length.eq(pkt_len),
            pp.imm.eq(g_imm),
            pp.retx.eq(0),
        ]
        job = Signal(_ReadJob)
        m.d.comb += [job.addr8.eq(g_addr[3:]),
                     job.beats.eq(g_beats)]
        m.d.comb += [
            # write data selected by the (registered) engine state, not by the late enables
        ]
        # the per-packet FIFOs are written a cycle after the cut, from registers (their
        # level logic sees no cutter logic); the room check allows for it (see above)
        q_en = Signal()
        m.d.sync += [
            q_en.eq(cut | rx_load),
            pend.w_data.eq(Mux(rx_idle, pp, x_pp)),
            rj.w_data.eq(Mux(rx_idle, job, x_job)),
            fi.w_data.eq(Mux(rx_idle, Mux(g_last, g_last_fr, g_pmtu_fr), x_fr)),
        ]
        m.d.comb += [
            pend.w_en.eq(q_en),
            rj.w_en.eq(q_en),
            fi.w_en.eq(q_en),
        ]
        with m.If(cut):
            m.d.sync += [
                g_psn.eq(g_psn + 1),
                g_va_lo.eq(va_next[:32]),
                g_va_fix.eq(va_next[32]),
                va_next.eq(Cat(va_next[:8], va_next[8:32] + g_pmtu[8:])),
                g_addr.eq(Cat(g_addr[:8], g_addr[8:] + g_pmtu[8:])),
                g_left.eq(g_left - 1),
                g_last.eq(g_left == 2),
                g_beats.eq(Mux(g_left == 2, g_last_beats, g_pmtu_beats)),
            ]
            with m.If(g_last):
                m.d.sync += g_active.eq(0)
        with m.If(g_va_fix):
            m.d.sync += [g_va_hi.eq(g_va_hi + 1), g_va_fix.eq(0)]
        # While no message is committed the cutter registers follow the held request
        # (enable ~g_active, a flip-flop, rather than the commit logic): at the commit
        # they hold its values.  Last here: this wins over the g_va_fix update.
        with m.If(~g_active):
            m.d.sync += [
                g_qp.eq(w_qp),
                g_first.eq(w_first),
                g_slot.eq(tail),
                g_psn.eq(w_first),
                g_va_lo.eq(w_va[:32]), g_va_hi.eq(w_va[32:]), g_va_fix.eq(0),
                va_next.eq(Cat(w_va[:8], w_va[8:32] + w_pmtu[8:])),
                g_addr.eq(w_addr),
                g_left.eq(w_npkts),
                g_last.eq(w_one),
                g_beats.eq(w_beats0),
                g_last_len.eq(w_last_len),
                g_rkey.eq(w_rkey),
                g_imm.eq(w_imm),
                g_is_imm.eq(w_is_imm),
                g_pmtu.eq(w_pmtu),
                g_log2.eq(w_log2),
                g_pmtu_fr.eq(w_pmtu_fr), g_pmtu_beats.eq(w_pmtu_beats),
                g_last_fr.eq(w_last_fr), g_last_beats.eq(w_last_beats),
            ]

        # ------------------------------------- descriptor + decision -> pkt
        pend_pkt = _PendingPacket(pend.r_data)
        out = self.pkt.payload
        base_valid = Signal()
        xfer = Signal()
        xfer_r = Signal()
        # The descriptor is popped the cycle after its transfer (``xfer_r``), so
        # ``pkt.ready`` drives no FIFO logic: the decision register is empty in that cycle
        # (it refills at most every 2 cycles), so ``pkt.valid`` is low meanwhile.
        m.d.sync += xfer_r.eq(xfer)
        m.d.comb += [
            base_valid.eq(pend.r_rdy & d_valid & ~dec_for_retx),
            self.pkt.valid.eq(base_valid & self.sent.ready),
            self.sent.valid.eq(base_valid & self.pkt.ready),
            xfer.eq(base_valid & self.pkt.ready & self.sent.ready),
            d_take.eq(dec_refused | xfer),
            pend.r_en.eq(xfer_r),
            dec_used.eq(xfer),
            out.qp.eq(pend_pkt.qp),
            ctx_o.addr.eq(pend_pkt.qp),
            out.dest_qpn.eq(ctx_o.data.dest_qpn),
            out.mode.eq(ctx_o.data.mode),
            out.peer_usid.eq(ctx_o.data.peer_usid),
            out.psn.eq(pend_pkt.psn),
            out.opcode.eq(Mux(pend_pkt.imm_op, wire.OP_WRITE_ONLY_IMM, wire.OP_WRITE_ONLY)),
            out.last.eq(pend_pkt.last),
            out.va.eq(pend_pkt.va),
            out.rkey.eq(pend_pkt.rkey),
            out.length.eq(pend_pkt.length),
            out.imm.eq(pend_pkt.imm),
            out.path.eq(dec),
        ]
        # nout counts takes when they happen, the engine's rx_skip a cycle later
        # (dec_used_r): ``nout`` sampled in REQ misses a take in that very cycle, and
        # rx_skip then sees it in the first WAIT cycle.  dec_for_retx is thereby set one
        # cycle after the previous decision is taken -- still in time, because the
        # decision register is empty in that cycle (it refills at most every 2 cycles).
        nout_p1 = Signal.like(nout)
        nout_m1 = Signal.like(nout)
        m.d.comb += [nout_p1.eq(nout + 1), nout_m1.eq(nout - 1)]
        m.d.sync += [nout.eq(Mux(sq.w_en, Mux(d_take, nout, nout_p1), Mux(d_take, nout_m1, nout))),
                     dec_used_r.eq(dec_used)]
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
        # load a read job -> size the next burst (registered) -> issue it
        axi = self.m_axi
        rjob = _ReadJob(rj.r_data)
        ar_active = Signal()
        ar_step = Signal(2)     # 0: size the 4 KiB cap, 1: size the burst, 2: ar_n / ar_final ready
        ar_addr = Signal(32)
        ar_rem = Signal(10)
        ar_valid = Signal()
        ar_araddr = Signal(32)
        ar_len = Signal(8)
        ar_n = Signal(9)
        ar_final = Signal()
        # beats in flight or buffered: issued on AR, not yet sent on payload
        reserved = Signal(range(self.fifo_depth + 1))
        reserved_ok = Signal()  # registered: reserved <= fifo_depth - 256 (stale only low)

        cap = Signal(9)        # largest legal burst from ar_addr, 1..256 (registered)
        m.d.comb += rj.r_en.eq(~ar_active)
        m.d.sync += reserved_ok.eq(reserved <= self.fifo_depth - _MAX_BURST)
        with m.If(~ar_active & rj.r_rdy):
            m.d.sync += [ar_active.eq(1), ar_step.eq(0), ar_addr.eq(Cat(Const(0, 3), rjob.addr8)),
                         ar_rem.eq(rjob.beats)]
        with m.Elif(ar_active & (ar_step == 0)):
            # beats before the next 4 KiB boundary, at most 256
            m.d.sync += [cap.eq(_MAX_BURST - Mux(ar_addr[11], ar_addr[3:11], 0)), ar_step.eq(1)]
        with m.Elif(ar_active & (ar_step == 1)):
            m.d.sync += [ar_final.eq(ar_rem <= cap), ar_n.eq(Mux(ar_rem <= cap, ar_rem, cap)),
                         ar_step.eq(2)]

        issue = Signal()
        m.d.comb += issue.eq((ar_step == 2) & ~ar_valid & reserved_ok)
        with m.If(issue):
            m.d.sync += [
                ar_valid.eq(1),
                ar_araddr.eq(ar_addr),
                ar_len.eq(ar_n - 1),
                ar_addr.eq(ar_addr + (ar_n << 3)),
                ar_rem.eq(ar_rem - ar_n),
                ar_step.eq(0),
            ]
            with m.If(ar_final):
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

        # ------------------------------------------------------- payload path
        # R beats -> block RAM (``fifo_depth`` x 64; room guaranteed by ``reserved``, so
        # ``rready`` is constant 1) -> read, framed at the read: 2-cycle read through the
        # EBR's output register (``pf_q`` takes the RAM data and nothing else) -> a small
        # output FIFO (distributed RAM, registered output) that ``payload`` leaves from.
        # A read is issued only while the output FIFO has room for it (``rd_ok``).
        depth = self.fifo_depth
        pow2 = (depth & (depth - 1)) == 0
        m.submodules.payload_ram = pram = memory.Memory(
            shape=64, depth=depth, init=[], attrs={"ram_style": "block", "no_rw_check": 1})
        pram_w = pram.write_port()
        pram_r = pram.read_port()
        wp = Signal(range(depth))
        rp = Signal(range(depth))
        m.d.comb += [
            axi.rready.eq(1),
            pram_w.addr.eq(wp),
            pram_w.data.eq(axi.rdata),
            pram_w.en.eq(axi.rvalid),
            pram_r.addr.eq(rp),
            pram_r.en.eq(1),
        ]
        with m.If(axi.rvalid):
            m.d.sync += wp.eq(wp + 1 if pow2 else Mux(wp == depth - 1, 0, wp + 1))
        with m.If(axi.rvalid & (axi.rresp != 0)):
            m.d.sync += self.rd_errors.eq(self.rd_errors + 1)

        # beats written, not yet read; "!= 0" and "!= 1" kept as flags for next cycle
        avail = Signal(range(depth + 1))
        a_ne0 = Signal()
        a_ne1 = Signal(init=1)
        rd = Signal()
        rd_ok = Signal()        # a beat to read and room for it in the output FIFO (registered)
        a_ne0_n = Signal()
        m.d.comb += a_ne0_n.eq(Mux(axi.rvalid, Mux(rd, a_ne0, 1), Mux(rd, a_ne1, a_ne0)))
        m.d.sync += [
            avail.eq(avail + axi.rvalid - rd),
            a_ne0.eq(a_ne0_n),
            a_ne1.eq(Mux(axi.rvalid, Mux(rd, avail != 1, avail != 0), Mux(rd, avail != 2, avail != 1))),
        ]
        with m.If(rd):
            m.d.sync += rp.eq(rp + 1 if pow2 else Mux(rp == depth - 1, 0, rp + 1))

        # framing at the read: the frame at the head of ``fi`` is taken into ``f_*``
        f_valid = Signal()
        f_left = Signal(9)      # beats after the next one read
        f_last = Signal()       # the next beat read is the frame's last (f_left == 0)
        f_keep = Signal(8)
        f_retx = Signal()
        fhead = _FrameInfo(fi.r_data)
        f_load = Signal()
        m.d.comb += [
            # one LUT of flip-flops (rd_ok, not rd): the FIFO's read enable is shallow
            f_load.eq(fi.r_rdy & (~f_valid | (rd_ok & f_last))),
            fi.r_en.eq(f_load),
        ]
        with m.If(f_load):
            m.d.sync += [f_left.eq(fhead.last_beat - 1), f_last.eq(fhead.last_beat == 0),
                         f_keep.eq(fhead.keep), f_retx.eq(fhead.retx)]
        with m.Elif(rd):
            m.d.sync += [f_left.eq(f_left - 1), f_last.eq(f_left == 0)]
        with m.If(f_load):
            m.d.sync += f_valid.eq(1)
        with m.Elif(rd & f_last):
            m.d.sync += f_valid.eq(0)

        # output FIFO credit: reads issued, not yet popped from the output FIFO
        ob_depth = 9            # 8 in distributed RAM + the output register
        m.submodules.payload_out = ob = fifo.SyncFIFOBuffered(width=64 + 8 + 1 + 1, depth=ob_depth)
        ob_cnt = Signal(range(ob_depth + 1))
        ps = self.payload
        pop = Signal()
        m.d.comb += [
            rd.eq(rd_ok & f_valid),
            pop.eq(ob.r_rdy & ps.tready),
        ]
        ob_ok_n = Signal()      # room for a read next cycle (in ``rd_ok``)
        m.d.comb += ob_ok_n.eq(Mux(rd & ~pop, ob_cnt < ob_depth - 1,
                                   Mux(pop & ~rd, 1, ob_cnt < ob_depth)))
        m.d.sync += [
            ob_cnt.eq(ob_cnt + rd - pop),
            rd_ok.eq(a_ne0_n & ob_ok_n),
        ]
        # read pipeline: rd -> (EBR) -> pf_q (EBR output register) -> output FIFO
        s1_v = Signal()
        s1_tag = Signal(10)     # keep, last, retx
        s2_v = Signal()
        s2_tag = Signal(10)
        pf_q = Signal(64, reset_less=True)
        m.d.sync += [
            s1_v.eq(rd),
            s1_tag.eq(Cat(Mux(f_last, f_keep, 0xFF), f_last, f_retx)),
            s2_v.eq(s1_v),
            s2_tag.eq(s1_tag),
            pf_q.eq(pram_r.data),
        ]
        m.d.comb += [
            ob.w_en.eq(s2_v),
            ob.w_data.eq(Cat(pf_q, s2_tag)),
            ob.r_en.eq(ps.tready),
            ps.tvalid.eq(ob.r_rdy),
            ps.tdata.eq(ob.r_data[:64]),
            ps.tkeep.eq(ob.r_data[64:72]),
            ps.tlast.eq(ob.r_data[72]),
        ]

        # the counters see a payload beat one cycle late (registered): they only overestimate
        pop_r = Signal()
        pop_new = Signal()
        m.d.sync += [pop_r.eq(pop), pop_new.eq(pop & ~ob.r_data[73])]
        m.d.sync += reserved.eq(reserved + Mux(issue, ar_n, 0) - pop_r)
        # ahead: both outcomes of this cycle's write computed from registers; the late
        # write enable only selects
        # (new packets only: retransmissions neither count nor wait for it)
        ahead_w = Signal.like(ahead)
        ahead_n = Signal.like(ahead)
        ahead_pb = Signal.like(ahead)
        beats_mp = Signal(signed(12))
        ahead_inc = Signal(signed(12))
        m.d.comb += [
            # one adder after the cut: ahead + (cut ? beats - pop : -pop)
            beats_mp.eq(job.beats - pop_new),
            ahead_inc.eq(Mux(cut, beats_mp, -pop_new)),
            ahead_w.eq(ahead + ahead_inc),
            ahead_n.eq(ahead - pop_new),
            ahead_pb.eq(ahead + job.beats),
        ]
        m.d.sync += ahead.eq(ahead_w)
        m.d.sync += [
            # ahead_ok ignores this cycle's payload beat (one adder before the compare):
            # it may hold a cut back one cycle at the limit, never lets one through early
            ahead_ok.eq(Mux(cut, ahead_pb < self.fifo_depth, ahead < self.fifo_depth)),
            flow_r.eq(room_next & self.tx_ok.bit_select(g_qp, 1)),
        ]
        return m
