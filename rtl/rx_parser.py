"""RX parser and validator: one per plane; every field checked, a bad frame is counted, never written.

A received frame (Ethernet II, no FCS, arrival form: uSID DA already shifted to
the receiver's own uSID, SRH Segments Left = 0) is parsed at one 64-bit beat per
clock, checked against the wire format (docs/wire-format.md, ``mrcnic.wire``)
and the receive tables (QPs, memory regions), and either

* accepted: one :class:`~mrcnic.rtl.layouts.RxPacket` on ``pkt`` and, for a
  non-trimmed DATA frame, its payload (``RETH.dmalen`` bytes) on ``payload``; or
* dropped: nothing is emitted and the counter of its :class:`DropReason` is
  incremented (exactly one counter per dropped frame, the lowest reason index
  that applies).

Store and forward: payload bytes are realigned to lane 0 and written into a
buffer memory (``amaranth.lib.memory``) while the frame arrives; the write
pointer is committed only when every check (ICRC last) has passed, so a dropped
frame's bytes are never released.

Header positions.  IPv6 ends at byte 54; an SRH is a multiple of 8 bytes, so
the UDP header always starts at byte lane 6 of beat ``b0`` = 6 (no SRH) or
7 + Hdr Ext Len (SRH), and every transport field sits at a fixed lane of beat
``b0 + k``.  The payload starts in beat ``b0 + 5`` (lane 2, or lane 6 after an
ImmDt).

Sources: RFC 8200 (IPv6), RFC 8754 (SRH), RFC 9800 (NEXT-CSID arrival DA), IBTA
Vol. 1 ch. 9 (BTH, RETH, AETH, ImmDt), IBTA RoCEv2 annex A17 (UDP 4791, ICRC),
MRC / OCP MRC 1.0 (EV format profiles, trimming, probes).
"""

import enum as py_enum
import zlib

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .axis import AxiStreamSignature
from .crc import CRC32_INIT, crc32_final, crc32_update
from .layouts import EvMode, MemRegion, RxKind, RxPacket, RxQpContext

__all__ = ["RxParser", "DropReason"]

ETHERTYPE_IPV6 = 0x86DD
NH_UDP, NH_ROUTING, SRH_TYPE = 17, 43, 4
ROCEV2_PORT = 4791
OP_WRITE_ONLY, OP_WRITE_ONLY_IMM, OP_ACK, OP_PROBE = 0x0A, 0x0B, 0x11, 0xC0
MAX_DMALEN = 4096
PAYLOAD_OFFSET_BEATS = 5      #: payload byte 0 is in beat b0 + 5
MAX_PAYLOAD_WORDS = MAX_DMALEN // 8 + 1   #: words one frame may write (realigned payload + 1)
ICRC_RESIDUE = zlib.crc32(b"x" + zlib.crc32(b"x").to_bytes(4, "little"))   #: 0x2144DF1C


class DropReason(py_enum.IntEnum):
    """Index of a drop counter in ``RxParser.drops``; a lower index has priority.

    FRAMING: tkeep not contiguous from lane 0, a partial beat before tlast, or
    the frame longer than ``max_frame`` bytes.  ETHERTYPE: not 0x86DD.  RUNT:
    tlast before the end of the headers the frame announces (+ 4-byte trailer).
    VERSION: IPv6 version != 6.  IPV6_LENGTH: payload length != frame length - 54.
    NEXT_HEADER: IPv6 next header not UDP(17) / SRH(43), SRH routing type != 4,
    or SRH next header not UDP.  SRH: Segments Left != 0 or > Last Entry, or
    Hdr Ext Len < 2 * (Last Entry + 1) (TLVs, not parsed, must fit in the header).
    DA: destination address neither ``locator_block|own_usid|0`` (SRV6) nor
    ``own_ip`` (STEV/UDP), or the form does not match the QP's EV mode.
    UDP_PORT: destination port != 4791.  UDP_LENGTH: UDP length != IPv6
    payload length - SRH length.  OPCODE: not 0x0A, 0x0B, 0x11, 0xC0.  BTH:
    TVer != 0 or P_Key != 0xFFFF.  QPN: DestQP matches no valid QP context.
    RKEY: (DATA) no valid region with this rkey holds [VA, VA + dmalen).
    DMALEN: (DATA) dmalen 0 or > 4096, PadCnt != (-dmalen) & 3, or (not trimmed)
    payload bytes != dmalen + PadCnt; (ACK, PROBE) frame longer than its headers.
    ICRC: ICRC mismatch (not checked on trimmed DATA frames).
    """
    FRAMING = 0
    ETHERTYPE = 1
    RUNT = 2
    VERSION = 3
    IPV6_LENGTH = 4
    NEXT_HEADER = 5
    SRH = 6
    DA = 7
    UDP_PORT = 8
    UDP_LENGTH = 9
    OPCODE = 10
    BTH = 11
    QPN = 12
    RKEY = 13
    DMALEN = 14
    ICRC = 15


N_REASONS = len(DropReason)


def _bitrev32(v: int) -> int:
    return int(f"{v:032b}"[::-1], 2)


#: CRC register after the first beat of the ICRC view (bytes 6, 7 = 0xFF; bytes 0..5 excluded)
_CRC_AFTER_BEAT0 = _bitrev32(zlib.crc32(b"\xff\xff") ^ 0xFFFFFFFF)
assert CRC32_INIT == 0xFFFFFFFF


class RxParser(wiring.Component):
    """Receive parser and validator for one plane (64-bit AXI-Stream).

    Parameters
    ----------
    port : int
        Plane index 0..7, copied into ``RxPacket.port``.
    qps : int
        QP contexts 1..8 (``qp_w_addr`` is ceil(log2(qps)) bits, at least 1).
    regions : int
        Memory regions 1..16 (``mr_w_addr`` is ceil(log2(regions)) bits, at least 1).
    max_frame : int
        Longest frame accepted, in bytes (128..16384); longer frames are FRAMING drops.
    buffer_words : int
        Payload buffer depth in 8-byte words, a power of two >= 1024.
    pkt_depth : int
        ``pkt`` output FIFO depth (>= 4).

    Attributes
    ----------
    s_axis : In(AxiStreamSignature(64))
        Received frames, lane 0 = first byte.  ``tready`` drops only at a frame's
        first beat when the ``pkt`` FIFO is nearly full, and at a DATA frame's
        first payload beat while the payload buffer has less than 513 free words;
        with ready outputs it stays high (one beat per clock, no idle cycles).
    own_usid : In(16), locator_block : In(32)
        SRV6 arrival DA = ``locator_block << 96 | own_usid << 80`` (RFC 9800).
    own_ip : In(128)
        DA accepted for QPs in STEV / UDP mode.
    trim_dscp : In(6)
        A DATA frame with this DSCP is a trimmed header (MRC packet trimming).
    qp_w_en : In(1), qp_w_addr : In(ceil(log2(qps))), qp_w_data : In(RxQpContext)
        QP table write port (``valid``, ``qpn``, ``mode`` are used here).
    mr_w_en : In(1), mr_w_addr : In(ceil(log2(regions))), mr_w_data : In(MemRegion)
        Memory-region table write port.  Write both tables while no frame arrives.
    pkt : Out(stream.Signature(RxPacket))
        One record per accepted frame, in arrival order.  ``qp`` is the index of
        the matching QP context; ``ev`` = flow label | (UDP sport & 0xFFF) << 20
        (SRV6, STEV) or UDP sport & 0x3FFF (UDP); ``addr`` = region base + VA -
        region VA; ``length`` = dmalen.  Trimmed DATA frames (DSCP = trim_dscp)
        come out with ``trimmed`` = 1 and no payload; trim-marked ACK/PROBE
        frames are checked as usual (their zeroed trailer fails the ICRC).
    payload : Out(AxiStreamSignature(64))
        Payload of each accepted non-trimmed DATA frame (dmalen bytes, pad
        excluded), lane 0 first, tkeep partial on the last beat; one frame per
        such ``pkt`` record, in the same order, released only after acceptance.
    drops : Out(ArrayLayout(32, len(DropReason)))
        Dropped frames per :class:`DropReason` (wrapping 32-bit counters).
    accepted : Out(ArrayLayout(32, 3))
        Accepted frames per :class:`~mrcnic.rtl.layouts.RxKind` (DATA, PROBE, ACK).

    Latency: the ``pkt`` record is written to its FIFO 3 cycles after the
    frame's last beat (visible 1-2 cycles later); the payload starts 2-3 cycles
    after that.  A frame may be as short as one beat: the verdict pipeline takes
    one frame per clock.
    """

    def __init__(self, port: int = 0, qps: int = 8, regions: int = 4, max_frame: int = 8192,
                 buffer_words: int = 1024, pkt_depth: int = 8):
        if not 0 <= port < 8:
            raise ValueError(f"port must be 0..7, not {port}")
        if not 1 <= qps <= 8:
            raise ValueError(f"qps must be 1..8, not {qps}")
        if not 1 <= regions <= 16:
            raise ValueError(f"regions must be 1..16, not {regions}")
        if not 128 <= max_frame <= 16384:
            raise ValueError(f"max_frame must be 128..16384 bytes, not {max_frame}")
        if buffer_words < 1024 or buffer_words & (buffer_words - 1):
            raise ValueError(f"buffer_words must be a power of two >= 1024, not {buffer_words}")
        if pkt_depth < 4:
            raise ValueError(f"pkt_depth must be >= 4, not {pkt_depth}")
        self._port, self._qps, self._regions = port, qps, regions
        self._max_frame, self._buffer_words, self._pkt_depth = max_frame, buffer_words, pkt_depth
        super().__init__({
            "s_axis": In(AxiStreamSignature(64)),
            "own_usid": In(16),
            "locator_block": In(32),
            "own_ip": In(128),
            "trim_dscp": In(6),
            "qp_w_en": In(1),
            "qp_w_addr": In(max(1, ceil_log2(qps))),
            "qp_w_data": In(RxQpContext),
            "mr_w_en": In(1),
            "mr_w_addr": In(max(1, ceil_log2(regions))),
            "mr_w_data": In(MemRegion),
            "pkt": Out(stream.Signature(RxPacket)),
            "payload": Out(AxiStreamSignature(64)),
            "drops": Out(data.ArrayLayout(32, N_REASONS)),
            "accepted": Out(data.ArrayLayout(32, 3)),
        })

    def elaborate(self, platform):
        m = Module()
        s = self.s_axis
        qps, regions = self._qps, self._regions
        max_beats = (self._max_frame + 7) // 8 + 1        # beat counter saturates here
        abits = ceil_log2(self._buffer_words)

        # ------------------------------------------------------------ tables
        qp_tab = [Signal(RxQpContext, name=f"qp_ctx{i}") for i in range(qps)]
        mr_tab = [Signal(MemRegion, name=f"mem_region{i}") for i in range(regions)]
        with m.If(self.qp_w_en):
            with m.Switch(self.qp_w_addr):
                for i in range(qps):
                    with m.Case(i):
                        m.d.sync += qp_tab[i].eq(self.qp_w_data)
        with m.If(self.mr_w_en):
            with m.Switch(self.mr_w_addr):
                for i in range(regions):
                    with m.Case(i):
                        m.d.sync += mr_tab[i].eq(self.mr_w_data)

        # ------------------------------------------------------------ beat tracking
        tready = Signal()
        fire = Signal()
        m.d.comb += [s.tready.eq(tready), fire.eq(s.tvalid & tready)]

        beat = Signal(range(max_beats + 1))      # index of the current beat in its frame
        nlast = Signal(4)                        # bytes in this beat when tkeep is contiguous
        keep_ok = Signal()
        with m.Switch(s.tkeep):
            for n in range(1, 9):
                with m.Case((1 << n) - 1):
                    m.d.comb += [nlast.eq(n), keep_ok.eq(1)]
        beat_bad = Mux(s.tlast, ~keep_ok, s.tkeep != 0xFF)

        flen = Signal(range(8 * max_beats + 9))  # frame length in bytes (valid after tlast)
        bad_keep = Signal()
        with m.If(fire):
            m.d.sync += bad_keep.eq(beat_bad | ((beat != 0) & bad_keep))
            with m.If(s.tlast):
                m.d.sync += [beat.eq(0), flen.eq(beat * 8 + nlast)]
            with m.Elif(beat != max_beats):
                m.d.sync += beat.eq(beat + 1)

        # ------------------------------------------------------------ header capture
        hdr = [Signal(64, name=f"hdr{i}") for i in range(8)]     # beats 0..7 (bytes 0..63)
        l4 = [Signal(64, name=f"l4_{k}") for k in range(7)]      # beats b0..b0+6
        with m.If(fire):
            for i in range(8):
                with m.If(beat == i):
                    m.d.sync += hdr[i].eq(s.tdata)

        def hb(n):                          # frame byte n (n < 64)
            return hdr[n // 8][8 * (n % 8):8 * (n % 8) + 8]

        def lb(x):                          # byte x after the UDP header start
            j = 6 + x
            return l4[j // 8][8 * (j % 8):8 * (j % 8) + 8]

        def be(get, lo, n):                 # big-endian field of n bytes at lo
            return Cat(*[get(lo + n - 1 - i) for i in range(n)])

        nh = hb(20)
        has_srh = nh == NH_ROUTING
        hel = hb(55)
        b0 = Signal(9)                      # beat holding the UDP header's first byte (lane 6)
        m.d.comb += b0.eq(Mux(has_srh, 7 + hel, 6))
        with m.If(fire):
            for k in range(7):
                with m.If(beat == b0 + k):
                    m.d.sync += l4[k].eq(s.tdata)

        # ------------------------------------------------------------ ICRC (running CRC-32)
        # The ICRC view of the frame (wire.icrc_view) from byte 6 on, ICRC bytes included:
        # a correct frame leaves the CRC-32 residue 0x2144DF1C.  Each beat is masked and
        # registered first; the CRC register folds it in the next cycle, so it holds a
        # frame's final value two cycles after its last beat (stage V1).
        mask = (Mux(beat == 1, Const(0xFF0FFFFFFFFFFFFF, 64), 0)        # bytes 8..13, TC, FL
                | Mux(beat == 2, Const(0x0000FF000000FFFF, 64), 0)      # FL, hop limit
                | Mux(beat == b0 + 1, Const(0x0000FFFF00000000, 64), 0)  # UDP checksum
                | Mux(beat == b0 + 2, Const(0x0000000000FF0000, 64), 0))  # BTH byte 4
        # Full beats go through one 8-byte network (crc_data -> crc, one beat per clock);
        # the last beat waits in tail_hold with a copy of the CRC register (crc_hold), so
        # the 1..8-byte networks see new inputs once per frame, not every clock.
        crc_data = Signal(64)
        crc_first = Signal()               # crc_data is a frame's first beat
        crc_pend = Signal()                # crc_data holds a beat not yet folded in
        tail_data = Signal(64)
        tail_n = Signal(4)                 # bytes in the last beat (1..8)
        tail_pend = Signal()
        m.d.sync += [crc_pend.eq(fire & ~s.tlast), tail_pend.eq(fire & s.tlast)]
        with m.If(fire):
            with m.If(s.tlast):
                m.d.sync += [tail_data.eq(s.tdata | mask), tail_n.eq(nlast)]
            with m.Else():
                m.d.sync += [crc_data.eq(s.tdata | mask), crc_first.eq(beat == 0)]
        crc = Signal(32)                   # CRC register through the last full beat folded
        with m.If(crc_pend):
            m.d.sync += crc.eq(Mux(crc_first, _CRC_AFTER_BEAT0, crc32_update(crc, crc_data, 8)))
        crc_hold = Signal(32)
        tail_hold = Signal(64)
        tail_hold_n = Signal(4)
        with m.If(tail_pend):              # one cycle after the last beat: crc is complete
            m.d.sync += [crc_hold.eq(crc),
                         tail_hold.eq(tail_data), tail_hold_n.eq(tail_n)]
        crc_end = Signal(32)               # CRC register over the whole frame (stage V1)
        with m.Switch(tail_hold_n):
            for n in range(1, 9):
                with m.Case(n):
                    m.d.comb += crc_end.eq(crc32_update(crc_hold, tail_hold, n))

        # ------------------------------------------------------------ payload buffer (write side)
        mem = memory.Memory(shape=64, depth=self._buffer_words, init=[])
        m.submodules.buffer = mem
        wp = mem.write_port()
        rp = mem.read_port(domain="sync")
        commit_ptr = Signal(abits + 1)     # end of the committed (accepted) payload words
        rd_ptr = Signal(abits + 1)         # next word the read side fetches
        used = Signal(abits + 1)
        m.d.comb += used.eq(commit_ptr - rd_ptr)

        tc_hi = hb(14)[0:4]
        tc_lo = hb(15)[4:8]
        dscp = Cat(tc_lo[2:4], tc_hi)
        opcode_now = lb(8)
        data_op_now = (opcode_now == OP_WRITE_ONLY) | (opcode_now == OP_WRITE_ONLY_IMM)
        trim_now = dscp == self.trim_dscp
        wbeat = Signal(range(max_beats + 1))
        m.d.comb += wbeat.eq(beat - (b0 + 6))
        in_pay = Signal()
        m.d.comb += in_pay.eq((beat >= b0 + 6) & (wbeat < MAX_PAYLOAD_WORDS)
                              & data_op_now & ~trim_now)
        prev = Signal(64)
        with m.If(fire):
            m.d.sync += prev.eq(s.tdata)
        m.d.comb += [
            wp.en.eq(fire & in_pay),
            wp.addr.eq(commit_ptr + wbeat),
            wp.data.eq(Mux(opcode_now == OP_WRITE_ONLY_IMM,
                           Cat(prev[48:64], s.tdata[0:48]), Cat(prev[16:64], s.tdata[0:16]))),
        ]
        space_stall = in_pay & (wbeat == 0) & (used > self._buffer_words - MAX_PAYLOAD_WORDS)

        pkt_fifo = fifo.SyncFIFOBuffered(width=RxPacket.as_shape().size, depth=self._pkt_depth)
        desc_fifo = fifo.SyncFIFOBuffered(width=13, depth=16)
        m.submodules.pkt_fifo = pkt_fifo
        m.submodules.desc_fifo = desc_fifo
        start_stall = (beat == 0) & ((pkt_fifo.level > self._pkt_depth - 4)
                                     | (desc_fifo.level > 16 - 4))
        m.d.comb += tready.eq(~start_stall & ~space_stall)

        # ------------------------------------------------------------ lookups (registered every cycle)
        # Their inputs are final at least one beat before the last beat of any frame that
        # is not a RUNT, so at stage E they describe the frame that just ended.
        da = be(hb, 38, 16)
        da_srv6 = Signal()
        da_ip = Signal()
        m.d.sync += [da_srv6.eq(da == Cat(Const(0, 80), self.own_usid, self.locator_block)),
                     da_ip.eq(da == self.own_ip)]
        dqpn = be(lb, 13, 3)
        qp_hit = Signal(qps)
        m.d.sync += qp_hit.eq(Cat(*[q.valid & (q.qpn == dqpn) for q in qp_tab]))
        va = be(lb, 20, 8)
        rkey = be(lb, 28, 4)
        dmalen = be(lb, 32, 4)
        mr_pre = Signal(regions)           # valid, rkey matches, VA >= region VA, offset < 2**32
        mr_off = [Signal(64, name=f"mr_off{i}") for i in range(regions)]
        for i, r in enumerate(mr_tab):
            m.d.sync += [mr_pre[i].eq(r.valid & (r.rkey == rkey) & (va >= r.va)
                                      & ((va - r.va)[32:64] == 0)),
                         mr_off[i].eq(va - r.va)]

        # ------------------------------------------------------------ stage E: all checks
        eof = Signal()                     # the frame that ended last cycle is in the registers
        m.d.sync += eof.eq(fire & s.tlast)

        ethertype = be(hb, 12, 2)
        version = hb(14)[4:8]
        ecn = tc_lo[0:2]
        flow_label = Cat(hb(17), hb(16), hb(15)[0:4])
        plen = be(hb, 18, 2)
        srh_nh, srh_type, segleft, last_entry = hb(54), hb(56), hb(57), hb(58)
        srh_len = Mux(has_srh, 8 + 8 * hel, 0)
        sport = be(lb, 0, 2)
        dport = be(lb, 2, 2)
        ulen = be(lb, 4, 2)
        opcode = lb(8)
        padcnt = lb(9)[4:6]
        tver = lb(9)[0:4]
        pkey = be(lb, 10, 2)
        is_data = (opcode == OP_WRITE_ONLY) | (opcode == OP_WRITE_ONLY_IMM)
        has_imm = opcode == OP_WRITE_ONLY_IMM
        is_ack = opcode == OP_ACK
        is_probe = opcode == OP_PROBE
        trimmed = is_data & (dscp == self.trim_dscp)
        ext = Mux(is_data, Mux(has_imm, 20, 16), Mux(is_ack, 24, Mux(is_probe, 12, 0)))
        hdr_need = 54 + srh_len + 20 + ext + 4

        qp_found = qp_hit.any()
        qp_idx = Signal(3)
        for i in reversed(range(qps)):
            with m.If(qp_hit[i]):
                m.d.comb += qp_idx.eq(i)
        qp_mode = Signal(EvMode)
        m.d.comb += qp_mode.eq(Array(q.mode.as_value() for q in qp_tab)[qp_idx])
        mode_srv6 = qp_mode == EvMode.SRV6
        pad_ok = padcnt == (-dmalen)[0:2]
        data_len_ok = plen == srh_len + Mux(has_imm, 44, 40) + dmalen + padcnt

        flags = Signal(N_REASONS)
        R = DropReason
        checks = {
            R.FRAMING: bad_keep | (flen > self._max_frame),
            R.ETHERTYPE: (flen >= 14) & (ethertype != ETHERTYPE_IPV6),
            R.RUNT: (flen < 14) | (flen < hdr_need),
            R.VERSION: version != 6,
            R.IPV6_LENGTH: plen + 54 != flen,
            R.NEXT_HEADER: ~((nh == NH_UDP) | (has_srh & (srh_type == SRH_TYPE)
                                               & (srh_nh == NH_UDP))),
            R.SRH: has_srh & ((segleft != 0) | (segleft > last_entry)
                              | (hel < 2 * (last_entry + 1))),
            R.DA: ~(da_srv6 | da_ip) | (qp_found & Mux(mode_srv6, ~da_srv6, ~da_ip)),
            R.UDP_PORT: dport != ROCEV2_PORT,
            R.UDP_LENGTH: ulen + srh_len != plen,
            R.OPCODE: ~(is_data | is_ack | is_probe),
            R.BTH: (tver != 0) | (pkey != 0xFFFF),
            R.QPN: ~qp_found,
            R.DMALEN: (is_data & ((dmalen == 0) | (dmalen > MAX_DMALEN) | ~pad_ok
                                  | (~trimmed & ~data_len_ok)))
                      | (is_ack & (plen != srh_len + 48))
                      | (is_probe & (plen != srh_len + 36)),
            R.ICRC: 0,                     # in stage V1, when the CRC register is final
        }
        for reason, expr in checks.items():
            m.d.comb += flags[reason].eq(expr)

        ev = Mux(qp_mode == EvMode.UDP, sport[0:14], Cat(flow_label, sport[0:12]))

        # stage V1 registers
        v1_valid = Signal()
        v1_flags = Signal(N_REASONS)
        v1_pkt = Signal(RxPacket)
        v1_is_data = Signal()
        v1_need_icrc = Signal()
        v1_copy = Signal()                 # accepted -> payload frame
        v1_mr_pre = Signal(regions)
        v1_end = [Signal(33, name=f"v1_end{i}") for i in range(regions)]
        v1_off = [Signal(32, name=f"v1_off{i}") for i in range(regions)]
        m.d.sync += [v1_valid.eq(eof), v1_flags.eq(flags), v1_is_data.eq(is_data),
                     v1_copy.eq(is_data & ~trimmed), v1_mr_pre.eq(mr_pre),
                     v1_need_icrc.eq(~trimmed)]
        for i in range(regions):
            m.d.sync += [v1_end[i].eq(mr_off[i][0:32] + dmalen), v1_off[i].eq(mr_off[i][0:32])]
        p = v1_pkt
        m.d.sync += [
            p.kind.eq(Mux(is_ack, RxKind.ACK, Mux(is_probe, RxKind.PROBE, RxKind.DATA))),
            p.port.eq(self._port),
            p.qp.eq(qp_idx),
            p.psn.eq(be(lb, 17, 3)),
            p.opcode.eq(opcode),
            p.last.eq(lb(16)[7]),
            p.has_imm.eq(has_imm),
            p.imm.eq(Mux(has_imm, be(lb, 36, 4), 0)),
            p.va.eq(Mux(is_data, va, 0)),
            p.length.eq(Mux(is_data, dmalen[0:13], 0)),
            p.ev.eq(ev),
            p.ecn_ce.eq(ecn == 3),
            p.trimmed.eq(trimmed),
            p.probe_id.eq(Mux(is_probe, be(lb, 26, 2), 0)),
            p.ts.eq(Mux(is_probe, be(lb, 28, 4), 0)),
            p.ack.syndrome.eq(Mux(is_ack, lb(20), 0)),
            p.ack.msn.eq(Mux(is_ack, be(lb, 21, 3), 0)),
            p.ack.ev.eq(Mux(is_ack, be(lb, 24, 4), 0)),
            p.ack.flags.eq(Mux(is_ack, lb(28), 0)),
            p.ack.base_psn.eq(Mux(is_ack, be(lb, 29, 3), 0)),
            p.ack.bitmap.eq(Mux(is_ack, be(lb, 32, 8), 0)),
            p.ack.ts.eq(Mux(is_ack, be(lb, 40, 4), 0)),
        ]

        # ------------------------------------------------------------ stage V2: region, verdict
        mr_ok = Signal(regions)
        for i, r in enumerate(mr_tab):
            m.d.comb += mr_ok[i].eq(v1_mr_pre[i] & (v1_end[i] <= r.length))
        addr = Signal(32)
        for i in reversed(range(regions)):
            with m.If(mr_ok[i]):
                m.d.comb += addr.eq(mr_tab[i].base + v1_off[i])
        all_flags = Signal(N_REASONS)
        m.d.comb += all_flags.eq(v1_flags)
        m.d.comb += [all_flags[R.RKEY].eq(v1_is_data & ~mr_ok.any()),
                     all_flags[R.ICRC].eq(v1_need_icrc & (crc32_final(crc_end) != ICRC_RESIDUE))]
        reason = Signal(range(N_REASONS))
        for i in reversed(range(N_REASONS)):
            with m.If(all_flags[i]):
                m.d.comb += reason.eq(i)

        v2_valid = Signal()
        v2_accept = Signal()
        v2_reason = Signal(range(N_REASONS))
        v2_pkt = Signal(RxPacket)
        v2_copy = Signal()
        m.d.sync += [v2_valid.eq(v1_valid), v2_accept.eq(all_flags == 0), v2_reason.eq(reason),
                     v2_pkt.eq(v1_pkt), v2_pkt.addr.eq(Mux(v1_is_data, addr, 0)),
                     v2_copy.eq(v1_copy)]

        # ------------------------------------------------------------ stage V3: act
        drop_cnt = Array(Signal(32, name=f"drop_cnt{i}") for i in range(N_REASONS))
        acc_cnt = Array(Signal(32, name=f"accept_cnt{i}") for i in range(3))
        for i in range(N_REASONS):
            m.d.comb += self.drops[i].eq(drop_cnt[i])
        for i in range(3):
            m.d.comb += self.accepted[i].eq(acc_cnt[i])
        take = v2_valid & v2_accept
        with m.If(v2_valid & ~v2_accept):
            m.d.sync += drop_cnt[v2_reason].eq(drop_cnt[v2_reason] + 1)
        with m.If(take):
            m.d.sync += acc_cnt[v2_pkt.kind.as_value()].eq(acc_cnt[v2_pkt.kind.as_value()] + 1)
        m.d.comb += [pkt_fifo.w_en.eq(take), pkt_fifo.w_data.eq(v2_pkt.as_value()),
                     self.pkt.valid.eq(pkt_fifo.r_rdy), self.pkt.payload.eq(pkt_fifo.r_data),
                     pkt_fifo.r_en.eq(self.pkt.ready)]
        with m.If(take & v2_copy):
            m.d.sync += commit_ptr.eq(commit_ptr + ((v2_pkt.length + 7) >> 3))
        m.d.comb += [desc_fifo.w_en.eq(take & v2_copy), desc_fifo.w_data.eq(v2_pkt.length)]

        # ------------------------------------------------------------ payload buffer (read side)
        o = self.payload
        cur_valid = Signal()
        cur_left = Signal(10)              # words of the current payload frame still to fetch
        cur_keep = Signal(8)
        o_valid, o_last, o_keep = Signal(), Signal(), Signal(8)
        adv = ~o_valid | o.tready
        issue = adv & cur_valid
        m.d.comb += [rp.en.eq(adv), rp.addr.eq(rd_ptr[:abits]),
                     o.tvalid.eq(o_valid), o.tlast.eq(o_last), o.tkeep.eq(o_keep),
                     o.tdata.eq(rp.data)]
        with m.If(adv):
            m.d.sync += [o_valid.eq(issue), o_last.eq(cur_left == 1),
                         o_keep.eq(Mux(cur_left == 1, cur_keep, 0xFF))]
        with m.If(issue):
            m.d.sync += [rd_ptr.eq(rd_ptr + 1), cur_left.eq(cur_left - 1)]
            with m.If(cur_left == 1):
                m.d.sync += cur_valid.eq(0)
        d_len = desc_fifo.r_data
        keeps = Array(Const((1 << (k + 1)) - 1, 8) for k in range(8))
        with m.If((~cur_valid | (issue & (cur_left == 1))) & desc_fifo.r_rdy):
            m.d.comb += desc_fifo.r_en.eq(1)
            m.d.sync += [cur_valid.eq(1), cur_left.eq((d_len + 7) >> 3),
                         cur_keep.eq(keeps[(d_len - 1)[0:3]])]
        return m
