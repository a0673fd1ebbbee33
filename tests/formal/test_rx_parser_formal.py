"""Formal proof of RxParser (rtl/rx_parser.py): a frame that fails any check produces no
``pkt`` record and bumps exactly one drop counter (the one of the lowest-index
:class:`DropReason` that applies); a frame that passes every check produces exactly one
record and bumps no drop counter.  Each frame is accounted for exactly once, within a fixed
latency after its last beat.

The parser is too deep for a fully symbolic frame (store and forward through a 1024-word
buffer, a running ICRC, 12 beats in, 17-21 clocks of latency), so the input is a *family*
of frames around one good EV probe frame (SRv6 arrival form, no SRH, 90 bytes = 12 beats,
built with ``mrcnic.wire``), with these fields free (``AnyConst``, one value per trace):

* the frame length: ``tlast`` on any beat 0..11 and any ``tkeep`` on that beat
  (contiguous or not; every earlier beat full): FRAMING, RUNT, IPV6_LENGTH;
* IPv6 payload length (IPV6_LENGTH, UDP_LENGTH, DMALEN), destination uSID (DA), UDP
  destination port (UDP_PORT), BTH opcode (OPCODE; a DATA / ACK opcode makes this frame a
  RUNT), P_Key (BTH), DestQP (QPN);
* the ICRC: the good frame's, or the good frame's with one of its 4 bytes changed by any
  value (ICRC).  A frame that passes every other check is the good frame, so its correct
  ICRC is one constant.  (A fully free 32-bit ICRC, or a free PSN, which makes the correct
  ICRC a function of the PSN, stalled Yices for more than 5 minutes at clock 29: the solver
  has to invert the CRC.)

Everything else is fixed: PSN 0, one QP context (written at clock 0: valid, the good QPN,
SRV6 mode), no memory region (a DATA frame would be an RKEY drop; none of this family gets
that far), the parser's own uSID / locator block / own_ip / trim DSCP.  The beats come back
to back from clock 1 (free gaps stalled the solver at clock 29), ``pkt.ready`` is always
high (the deadline below assumes the read side is never held); ``payload.tready`` and the
counter read port (``cnt_rd_stb`` / ``cnt_rd_addr``, strobes at least 3 clocks apart, as
documented) are free: the CSR reads must never disturb a count.

Observed: the drop counters (``drops[r]``, written by the block-RAM incrementer) change by
+1 only, one reason per clock, and ``drop_stb`` precedes each change by one clock; records
are ``pkt`` handshakes.  A reference verdict (the rules of ``DropReason`` restricted to the
free fields, lowest index first) says *drop with reason r* or *pass*.  Asserted: never more
drops (records) than dropping (passing) frames whose last beat was taken, so no record for
a bad frame, no drop for a good one and never a second outcome for a frame; the j-th drop
counted has the reason of the j-th dropping frame; every record has the frame's PSN, kind
PROBE, QP 0; no payload beat; and once a frame is *due*, its outcome was counted.  Due:
its last beat is ``DEADLINE`` clocks old, the clock is at least ``FLOOR`` (the counter
memory is cleared for 19 clocks after reset) and, for the second frame, the first frame's
outcome is ``GAP`` clocks old (the read side takes records in order).

Smallest parameters: ``qps=1``, ``regions=1``, ``max_frame=128`` (``buffer_words`` must
be >= 1024).  Bounded at 36 clocks from reset: the full-length frame takes its last beat at
clock 12, its record is taken at clock 29, an ICRC drop reaches ``drops`` at clock 33;
the deadline (clock 34 for it, 27 for a drop of a short frame) is inside the bound, so
every frame of the family is followed through the whole pipeline to its outcome.

Two frames: ``frames=2`` sends a second frame of the family (its own free fields) right
after the first, bounded at 46 clocks: every assertion holds for both frames up to clock
45, so a frame's verdict, reason or record never leaks into the other; the second frame's
deadline is reached only when it is due by clock 45 (e.g. a short first frame, counted at
clock 27, then a second of any length), not after a full-length first frame (due at 47+).

Not covered: three or more frames, gaps between beats, ``pkt.ready`` low, table writes
during a frame, SRH frames, DATA / ACK frames that pass (RKEY, DMALEN, payload), trimmed
frames, a free PSN or a fully free ICRC, shared mode (``s_port``), frames longer than 96
bytes (``max_frame``).
"""

import struct

import pytest
from amaranth.hdl import Array, Assert, Assume, Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.hdl._ast import AnySeq

from mrcnic import wire
from mrcnic.rtl import rx_parser
from mrcnic.rtl.layouts import EvMode, RxKind
from mrcnic.rtl.rx_parser import DropReason as R
from .formal import (const, drive_inputs, mutant, past, require_failed, require_proved,
                     run_formal)

DEPTH = 36
DEADLINE = 22   # clocks from a frame's last beat to its outcome counted (18 record, 22 ICRC drop)
FLOOR = 27      # ... and not before this clock (counter memory cleared after reset: 19 clocks)
GAP = 17        # ... and from the previous frame's outcome (read side: 4 clocks per drop
                # record, 11 + per candidate, then the counter's 5-clock write)
PORT = 0
BLOCK = 0xFC00_0000
OWN_USID = 0x0042
OWN_IP = 0x2001_0DB8_0000_0001_0000_0000_0000_0002
TRIM_DSCP = 46
QPN = 0x000100
PSN_OFF = 71         # PSN bytes 71..73 (BTH byte 9..11)


def _probe(psn):
    path = wire.PathEncap(ev=0x12345678, port=PORT, mode="SRV6", block=BLOCK, usids=[OWN_USID])
    f = bytearray(wire.build_probe_frame(src_mac="02:00:00:00:00:09", dst_mac="02:00:00:00:00:01",
                                         src_ip="2001:db8:0:9::1", path=path, qpn=QPN,
                                         probe_id=0x55, ts=0x1234))
    assert wire.arrival_form(bytes(f), BLOCK) == bytes(f)
    f[PSN_OFF:PSN_OFF + 3] = psn.to_bytes(3, "big")
    f[-4:] = struct.pack("<I", wire.icrc(bytes(f)))
    return bytes(f)


FRAME = _probe(0)
assert len(FRAME) == 90 and wire.check_icrc(FRAME, BLOCK)
ICRC0 = wire.icrc(FRAME)
PSN = 0x000000       # fixed: a free PSN makes the correct ICRC a function of it (too slow)
# free fields: name -> (first byte, bytes, big-endian good value)
FIELDS = {
    "plen": (18, 2, 36),
    "usid": (42, 2, OWN_USID),
    "dport": (56, 2, 4791),
    "opcode": (62, 1, 0xC0),
    "pkey": (64, 2, 0xFFFF),
    "qpn": (67, 3, QPN),
}
for _name, (_off, _n, _good) in FIELDS.items():
    assert int.from_bytes(FRAME[_off:_off + _n], "big") == _good, _name


class RxParserProof(Elaboratable):
    """RxParser fed one frame of the family above, with a reference verdict."""

    def __init__(self, cls=rx_parser.RxParser, frames=1):
        self.dut = cls(port=PORT, qps=1, regions=1, max_frame=128, buffer_words=1024)
        self.frames = frames
        self.nb, self.kl = [], []

    def frame(self, m, k):
        """Frame ``k``'s 12 beats, its reference verdict (bad) and drop reason."""
        f = {}
        for name, (_, n, _) in FIELDS.items():
            f[name], f_set = const(8 * n, name=f"{name}{k}")
            m.d.comb += f_set
        nb, nb_set = const(4, name=f"nb{k}")           # index of the last beat
        kl, kl_set = const(8, name=f"kl{k}")           # tkeep of the last beat
        m.d.comb += [nb_set, kl_set, Assume(nb <= 11)]
        self.nb.append(nb)
        self.kl.append(kl)
        # ICRC: the good frame's, or that with one of its 4 bytes changed by any value (a
        # fully free ICRC makes the solver invert the CRC: > 5 min per step)
        delta, delta_set = const(8, name=f"icrc_delta{k}")
        sel, sel_set = const(2, name=f"icrc_byte{k}")
        icrc = Signal(32, name=f"icrc{k}")
        m.d.comb += [delta_set, sel_set, icrc.eq(ICRC0 ^ (delta << (8 * sel)))]
        byte = [Const(b, 8) for b in FRAME] + [Const(0, 8)] * 6
        for name, (off, n, _) in FIELDS.items():
            for i in range(n):
                byte[off + i] = f[name][8 * (n - 1 - i):8 * (n - i)]
        for i in range(4):
            byte[86 + i] = icrc[8 * i:8 * i + 8]
        beats = [Cat(*byte[8 * b:8 * b + 8]) for b in range(12)]

        # reference verdict (DropReason's rules on the free fields, lowest index first)
        keep_ok = kl[0] & Cat(*[~kl[i + 1] | kl[i] for i in range(7)]).all()
        nbytes = Signal(7, name=f"nbytes{k}")      # frame length (when keep_ok)
        m.d.comb += nbytes.eq(nb * 8 + sum(kl[i] for i in range(8)))
        op = f["opcode"]
        is_data = (op == 0x0A) | (op == 0x0B)
        is_ack, is_probe = op == 0x11, op == 0xC0
        ext = Mux(op == 0x0B, 20, Mux(op == 0x0A, 16, Mux(is_ack, 24, Mux(is_probe, 12, 0))))
        plen = f["plen"]
        flags = {
            R.FRAMING: ~keep_ok,
            R.RUNT: nbytes < 54 + 20 + 4 + ext,
            R.IPV6_LENGTH: plen != nbytes - 54,
            R.DA: f["usid"] != OWN_USID,
            R.UDP_PORT: f["dport"] != 4791,
            R.UDP_LENGTH: plen != 36,                  # UDP length fixed at 36
            R.OPCODE: ~(is_data | is_ack | is_probe),
            R.BTH: f["pkey"] != 0xFFFF,
            R.QPN: f["qpn"] != QPN,
            R.RKEY: is_data,                            # no memory region
            R.DMALEN: (is_ack & (plen != 48)) | (is_probe & (plen != 36)),
            R.ICRC: delta != 0,                        # never trimmed (DSCP 26)
        }
        bad = Signal(name=f"bad{k}")
        reason = Signal(4, name=f"reason{k}")
        m.d.comb += bad.eq(Cat(*flags.values()).any())
        for r in sorted(flags, reverse=True):
            with m.If(flags[r]):
                m.d.comb += reason.eq(r)
        return beats, bad, reason

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        drive_inputs(m, dut, skip=("s_axis", "own_usid", "locator_block", "own_ip", "trim_dscp",
                                   "qp_w_en", "qp_w_addr", "qp_w_data", "mr_w_en", "pkt__ready",
                                   "cnt_rd_stb", "cnt_rd_addr"))
        # ------------------------------------------------------------ configuration
        m.d.comb += [dut.own_usid.eq(OWN_USID), dut.locator_block.eq(BLOCK),
                     dut.own_ip.eq(OWN_IP), dut.trim_dscp.eq(TRIM_DSCP), dut.mr_w_en.eq(0),
                     dut.pkt.ready.eq(1)]
        cyc = Signal(7)
        m.d.sync += cyc.eq(Mux(cyc == 127, 127, cyc + 1))
        # QP context 0 written at clock 0 ("write both tables while no frame arrives": no
        # beat is offered before clock 1)
        m.d.comb += [dut.qp_w_en.eq(cyc == 0), dut.qp_w_addr.eq(0),
                     dut.qp_w_data.valid.eq(1), dut.qp_w_data.qpn.eq(QPN),
                     dut.qp_w_data.mode.eq(EvMode.SRV6)]
        # Contract: counter read strobes at least 3 clocks apart, of an existing counter word.
        stb, addr = Signal(), Signal.like(dut.cnt_rd_addr)
        m.d.comb += [stb.eq(AnySeq(1)), addr.eq(AnySeq(len(addr))),
                     dut.cnt_rd_stb.eq(stb), dut.cnt_rd_addr.eq(addr)]
        stb1 = past(m, stb)
        stb2 = past(m, stb1)
        m.d.comb += Assume(~(stb & (stb1 | stb2)) & (addr < dut.counters))

        # ------------------------------------------------------------ the frames
        beats, bad, reason = [], [], []
        for k in range(self.frames):
            bk, badk, rk = self.frame(m, k)
            beats += bk
            bad.append(badk)
            reason.append(rk)
        beats = Array(beats)
        s = dut.s_axis
        fi = Signal(2)                    # frame offered (== frames: all sent)
        bi = Signal(4)                    # its beat offered
        nbs = Array(self.nb)
        kls = Array(self.kl)
        last = bi == nbs[fi]
        # beats back to back from clock 1 (with gaps the solver stalls at clock 29)
        m.d.comb += [s.tvalid.eq((fi < self.frames) & (cyc != 0)),
                     s.tdata.eq(beats[fi * 12 + bi]), s.tlast.eq(last),
                     s.tkeep.eq(Mux(last, kls[fi], 0xFF))]
        take = s.tvalid & s.tready
        t_last = [Signal(7, name=f"t_last{k}") for k in range(self.frames)]
        with m.If(take):
            m.d.sync += bi.eq(bi + 1)
            with m.If(last):
                m.d.sync += [bi.eq(0), fi.eq(fi + 1)]
                for k in range(self.frames):
                    with m.If(fi == k):
                        m.d.sync += t_last[k].eq(cyc)

        # ------------------------------------------------------------ outcomes
        drops = [dut.drops[i] for i in range(len(R))]
        inc = Signal(len(R))
        for i, d in enumerate(drops):
            d_prev = past(m, d)
            m.d.comb += [inc[i].eq(d != d_prev),
                         Assert(~inc[i] | (d == (d_prev + 1)[:32]))]   # by +1 only
        m.d.comb += Assert((inc & (inc - 1)) == 0)                     # one reason at a time
        drop_ev = inc.any()
        m.d.comb += Assert(past(m, dut.drop_stb) == drop_ev)           # drop_stb announces it
        inc_r = Signal(4)
        for i in reversed(range(len(R))):
            with m.If(inc[i]):
                m.d.comb += inc_r.eq(i)
        rec_ev = dut.pkt.valid & dut.pkt.ready
        n_drop, n_rec = Signal(3), Signal(3)
        m.d.sync += [n_drop.eq(n_drop + drop_ev), n_rec.eq(n_rec + rec_ev)]
        # frames sent / due (frames end in order: both are prefixes).  A frame is due once its
        # last beat is DEADLINE clocks old and, after the first, GAP clocks after the
        # previous frame's outcome was counted (the read side takes records in order)
        n_out = Signal(3)
        t_out = Signal(7)
        m.d.comb += n_out.eq(n_drop + n_rec)
        with m.If(drop_ev | rec_ev):
            m.d.sync += t_out.eq(cyc + 1)
        sent = [fi > k for k in range(self.frames)]
        late = [sent[k] & (cyc - t_last[k] >= DEADLINE) & (cyc >= FLOOR)
                & ((n_out >= k) & (cyc - t_out >= GAP) if k else 1)
                for k in range(self.frames)]
        n_bad_sent = sum(sent[k] & bad[k] for k in range(self.frames))
        n_good_sent = sum(sent[k] & ~bad[k] for k in range(self.frames))
        n_bad_late = sum(late[k] & bad[k] for k in range(self.frames))
        n_good_late = sum(late[k] & ~bad[k] for k in range(self.frames))
        # never more drops (records) than dropping (passing) frames whose last beat was
        # taken: no record for a bad frame, no drop for a good one, one outcome per frame
        m.d.comb += [Assert(n_drop + drop_ev <= n_bad_sent),
                     Assert(n_rec + rec_ev <= n_good_sent)]
        # the j-th drop counted has the reason of the j-th dropping frame; the j-th record
        # is the j-th passing frame's (its fields: every frame has PSN 0, QP 0, kind PROBE)
        for k in range(self.frames):
            rank = sum(bad[i] for i in range(k))
            with m.If(drop_ev & bad[k] & (n_drop == rank)):
                m.d.comb += Assert(inc_r == reason[k])
        p = dut.pkt.payload
        with m.If(rec_ev):
            m.d.comb += Assert((p.psn == PSN) & (p.kind == RxKind.PROBE) & (p.qp == 0)
                               & (p.opcode == 0xC0) & (p.port == PORT))
        m.d.comb += Assert(~dut.payload.tvalid)        # no DATA frame is accepted here
        # deadline: once a frame is due, its outcome was counted
        m.d.comb += Assert((n_drop >= n_bad_late) & (n_rec >= n_good_late))
        return m


@pytest.mark.formal
def test_rx_parser_bounded_36():
    """RxParser (1 QP, 1 region): one frame of the family, every property, 36 clocks."""
    require_proved(run_formal(RxParserProof(), "rx_parser", mode="bmc", depth=DEPTH))


@pytest.mark.formal
def test_rx_parser_two_frames_bounded_46():
    """RxParser (1 QP, 1 region): two frames of the family back to back, 46 clocks."""
    require_proved(run_formal(RxParserProof(frames=2), "rx_parser_2", mode="bmc", depth=46))


@pytest.mark.formal
def test_rx_parser_mutant_fails():
    """Teeth: the P_Key check dropped from the BTH verdict (a bad P_Key frame passes)."""
    mod = mutant(rx_parser, "bth_bad.eq(bth_bad | (fld(pkey_f) != pkey_f.field.value)),",
                 "bth_bad.eq(bth_bad),")
    require_failed(run_formal(RxParserProof(mod.RxParser), "rx_parser_mutant", mode="bmc",
                              depth=DEPTH))
