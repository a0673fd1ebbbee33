"""Ethernet MAC receiver: GMII byte stream (PHY RX domain) -> 64-bit AXI-Stream (NIC domain).

The PHY side finds the SFD, checks the FCS, length (runt / giant) and GMII RX_ER, strips
the FCS and packs the bytes into 32-bit words; the last word of every frame carries the
frame's status.  The words cross to the NIC domain through a small Gray-pointer FIFO
(:class:`_Crossing`: 4 words of distributed RAM read asynchronously at a registered
pointer, 3-bit Gray pointers; a word arrives every 4 PHY clocks at most) that the NIC
side drains every cycle (except
for 5 cycles after a reset), pairs into 64-bit beats and writes into a store-and-forward
frame buffer (:class:`amaranth.lib.memory.Memory`): a frame is written speculatively and *committed*
only when its last beat reports a good frame; otherwise the write pointer rolls back, so a
bad frame is never released.

Source: IEEE 802.3 clause 3 (frame format, FCS 3.2.9), clause 4.2.4.2.2 (frames shorter
than 64 bytes are discarded), clause 35 (GMII RX_DV / RX_ER).
"""

from amaranth.hdl import Cat, Const, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.cdc import AsyncFFSynchronizer, FFSynchronizer
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axis import AxiStreamSignature
from .crc import CRC32_INIT, crc32_update

__all__ = ["EthMacRx", "RxStatus", "crc32_byte"]

PREAMBLE = 0x55
SFD = 0xD5
MIN_FRAME = 64              #: bytes including the FCS
#: The CRC register (unreflected, as :func:`mrcnic.rtl.crc.crc32_update` keeps it) after a
#: frame followed by its correct FCS: the CRC-32 residue 0xDEBB20E3, bit-reversed.
CRC32_GOOD = int(f"{0xDEBB20E3:032b}"[::-1], 2)


def crc32_byte(state, byte):
    """The CRC-32 register after one more byte: :func:`mrcnic.rtl.crc.crc32_update` of 1 byte.

    ``state`` (32 bits, unreflected, initial value :data:`mrcnic.rtl.crc.CRC32_INIT`) and
    ``byte`` (8 bits, the wire's first bit in bit 0) give the same 32-bit value as
    ``crc32_update(state, byte, 1)`` (IEEE 802.3 3.2.9), written for a smaller LUT mapping:
    in the one-byte network, data bit ``b`` and state bit ``31 - b`` feed exactly the same
    outputs, so they are XORed once (``byte ^ state[31:23:-1]``) and passed as the data, with
    those 8 state bits zeroed.  That saves the 8 shared XORs in every output bit's tree
    (about 30 LUT4 fewer than the plain network on ECP5).
    """
    return crc32_update(Cat(state[:24], Const(0, 8)), byte ^ state[24:][::-1], 1)


class RxStatus(enum.Enum, shape=3):
    """Status of a frame, carried by its last word across the clock-domain crossing."""
    OK = 0
    BAD_FCS = 1             #: FCS mismatch or RX_ER asserted inside the frame
    RUNT = 2                #: shorter than 64 bytes including the FCS
    GIANT = 3               #: longer than ``max_frame`` bytes including the FCS
    OVERFLOW = 4            #: a beat was lost at the clock-domain crossing


#: A 32-bit word crossing from ``rx_domain`` to ``sync``.  ``ok`` is meaningful on the
#: last word only: when it is 0 the frame is dropped and ``data[:3]`` is its RxStatus.
_Cross = data.StructLayout({
    "data": 32,
    "nbytes_m1": 2,
    "last": 1,
    "ok": 1,
})

_Stored = data.StructLayout({
    "data": 64,
    "nbytes_m1": 3,
    "last": 1,
})


def _gray(v):
    return v ^ v[1:]


class _Crossing(wiring.Component):
    """Clock-domain-crossing FIFO, ``depth`` words of ``width`` bits, first-word fall-through.

    The Gray-pointer FIFO of :class:`amaranth.lib.fifo.AsyncFIFO` (Cummings, "Simulation
    and Synthesis Techniques for Asynchronous FIFO Design", style 2, the same ports and
    the same write-domain reset handling), but its storage is read asynchronously at the
    registered read pointer (distributed RAM, ``r_data`` is valid with ``r_rdy``) instead
    of through a synchronous port addressed by the next pointer: the read side's logic
    is ``r_rdy`` (the synchronised write pointer against the read pointer, both
    registers) and the pointer increment, no empty-flag-to-address path.

    Ports: ``w_data`` In(width), ``w_en`` In(1), ``w_rdy`` Out(1) in ``w_domain``;
    ``r_data`` Out(width), ``r_en`` In(1), ``r_rdy`` Out(1) in ``r_domain``.
    """

    def __init__(self, width, depth, w_domain, r_domain):
        assert depth >= 2 and depth & (depth - 1) == 0
        self.depth, self._w, self._r = depth, w_domain, r_domain
        super().__init__({"w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
                          "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1)})

    def elaborate(self, platform):
        m = Module()
        bits = self.depth.bit_length()              # pointer bits (one above the address)
        w_bin, w_gry, w_gry_r = Signal(bits), Signal(bits), Signal(bits)
        # the read pointers are reset through the write domain's reset (as AsyncFIFO)
        r_bin, r_gry = Signal(bits, reset_less=True), Signal(bits, reset_less=True)
        r_gry_w = Signal(bits)
        m.submodules.produce_cdc = FFSynchronizer(w_gry, w_gry_r, o_domain=self._r)
        m.submodules.consume_cdc = FFSynchronizer(r_gry, r_gry_w, o_domain=self._w)
        m.submodules.storage = mem = Memory(shape=len(self.w_data), depth=self.depth, init=[])
        wp = mem.write_port(domain=self._w)
        rp = mem.read_port(domain="comb")
        # full: the pointers differ in their two top Gray bits only
        full = ((w_gry[-1] != r_gry_w[-1]) & (w_gry[-2] != r_gry_w[-2])
                & (w_gry[:-2] == r_gry_w[:-2]))
        write = self.w_en & ~full
        w_nxt = (w_bin + write)[:bits]
        m.d[self._w] += [w_bin.eq(w_nxt), w_gry.eq(_gray(w_nxt))]
        m.d.comb += [self.w_rdy.eq(~full), wp.addr.eq(w_bin[:-1]), wp.data.eq(self.w_data),
                     wp.en.eq(write), rp.addr.eq(r_bin[:-1]), self.r_data.eq(rp.data)]
        r_rst = Signal()
        m.submodules.rst_cdc = AsyncFFSynchronizer(
            ResetSignal(self._w, allow_reset_less=True), r_rst, o_domain=self._r)
        # while r_rst: empty, the read pointer taken from the (reset) write pointer.  The
        # pointers are loaded only on a pop or r_rst (their clock enable), from the
        # incremented pointer (a LUT after flip-flops) or the write pointer
        m.d.comb += self.r_rdy.eq((w_gry_r != r_gry) & ~r_rst)
        r_inc = (r_bin + 1)[:bits]
        with m.If((self.r_rdy & self.r_en) | r_rst):
            m.d[self._r] += [r_gry.eq(Mux(r_rst, w_gry_r, _gray(r_inc))),
                             r_bin.eq(Mux(r_rst, _gray_decode(w_gry_r), r_inc))]
        return m


def _gray_decode(v):
    out = [v[-1]]
    for i in reversed(range(len(v) - 1)):
        out.insert(0, out[0] ^ v[i])
    return Cat(*out)


class EthMacRx(wiring.Component):
    """IEEE 802.3 receive MAC, GMII (8-bit, 1000 Mb/s) in, 64-bit AXI-Stream out.

    Parameters
    ----------
    max_frame : int
        Largest accepted frame in bytes *including* the FCS: 1518 standard (1522 with a
        VLAN tag), up to 16384 for jumbo frames (9018+).  Longer frames are giants.
    buffer_frames : int
        Store-and-forward buffer size in maximum-size frames (1 or more); the buffer is
        the next power of two of ``buffer_frames * ceil((max_frame - 4) / 8) + 1`` beats.
    rx_domain : str
        Clock domain of the GMII side (the PHY's recovered RX clock, 125 MHz).

    Ports
    -----
    rxd : In(8), ``rx_dv`` : In(1), ``rx_er`` : In(1), domain ``rx_domain``
        GMII receive.  Bytes before the SFD must be 0x55 (any number of them, the PHY may
        shrink the preamble); a frame with another byte before its SFD is ignored
        (not counted).
    m_axis : Out(AxiStreamSignature(64)), domain ``sync``
        Good frames, FCS stripped, byte lane 0 first, ``tkeep`` contiguous from lane 0,
        only the ``tlast`` beat partial.  A frame appears only after its last byte and FCS
        were checked (store and forward).  ``tvalid`` never waits on ``tready``; the sink
        may stall forever: frames that find the buffer full are dropped and counted.
    rx_frames : Out(32), domain ``sync``
        Good frames committed to the buffer.
    rx_bad_fcs : Out(32)
        Frames dropped for an FCS mismatch or RX_ER inside the frame.
    rx_runt : Out(32)
        Frames dropped for being shorter than 64 bytes including the FCS.
    rx_giant : Out(32)
        Frames dropped for being longer than ``max_frame`` bytes including the FCS.
    rx_fifo_overflow : Out(32)
        Good frames dropped because the frame buffer was full (``m_axis`` backpressure) or
        a word was lost at the crossing.  All counters are in ``sync``; the status reasons
        are exclusive and checked in the order giant, runt, bad FCS, overflow.  The five
        counters are flip-flops, updated one cycle after the frame's end is decided
        (buffer commit / rollback) by one shared incrementer that reads a copy of them
        in an 8 x 32 distributed RAM; they are 0 after a reset (the RAM copy is cleared
        in the 5 cycles after it, while the crossing FIFO is not popped).
    cnt_addr : In(3), domain ``sync``
        A counter to read from the RAM copy (its :class:`RxStatus` value: 0 ``rx_frames``,
        1 ``rx_bad_fcs``, 2 ``rx_runt``, 3 ``rx_giant``, 4 ``rx_fifo_overflow``), for a
        reader that needs no flip-flop port per counter (the board registers).
    cnt_data : Out(32), cnt_fresh : Out(1), domain ``sync``
        ``cnt_data`` is loaded with the counter at ``cnt_addr`` in every cycle the shared
        incrementer does not read the RAM; ``cnt_fresh`` (a flip-flop) says it was loaded
        at the last clock edge, so with ``cnt_addr`` held since the cycle before that edge,
        ``cnt_data`` is that counter (as of two cycles ago: a frame's count lands in the
        RAM two cycles after its end) until ``cnt_addr`` changes.

    The NIC side pops the crossing FIFO every cycle, so it never fills while the ``sync``
    clock is faster than 1/4 of the RX clock (one 32-bit word per 4 bytes).  Latency: about
    5 ``rx_domain`` + 10 ``sync`` cycles from the frame's last FCS byte (plus the FIFO
    synchroniser) to its first beat on ``m_axis`` (two GMII input registers, FSM, a
    registered FCS check, FIFO write register on the PHY side; FIFO output register, word
    pairing, buffer write, block-RAM read, its output register and the ``m_axis`` register
    on the NIC side).  ``m_axis`` comes from flip-flops; ``tready`` reaches
    only the output and skid registers (a one-beat skid buffer), so a sink may stall
    at any beat with no bubble at line rate.  The buffer holds ``buffer_depth - 1``
    beats (its full flag is registered) plus up to 4 beats in the read pipeline.
    """

    def __init__(self, *, max_frame: int = 1518, buffer_frames: int = 1,
                 rx_domain: str = "rgmii_rx"):
        if not 64 <= max_frame <= 16384:
            raise ValueError(f"max_frame must be in 64..16384 bytes, not {max_frame}")
        if not isinstance(buffer_frames, int) or buffer_frames < 1:
            raise ValueError(f"buffer_frames must be a positive integer, not {buffer_frames!r}")
        if not isinstance(rx_domain, str) or rx_domain == "sync":
            raise ValueError(f"rx_domain must be a clock domain name other than 'sync', "
                             f"not {rx_domain!r}")
        self.max_frame, self.rx_domain = max_frame, rx_domain
        self.max_beats = -(-(max_frame - 4) // 8)
        self.buffer_depth = 1 << (buffer_frames * self.max_beats).bit_length()
        super().__init__({
            "rxd": In(8),
            "rx_dv": In(1),
            "rx_er": In(1),
            "m_axis": Out(AxiStreamSignature(64)),
            "rx_frames": Out(32),
            "rx_bad_fcs": Out(32),
            "rx_runt": Out(32),
            "rx_giant": Out(32),
            "rx_fifo_overflow": Out(32),
            "cnt_addr": In(3),
            "cnt_data": Out(32),
            "cnt_fresh": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        rx = self.rx_domain
        m.submodules.fifo = fifo = _Crossing(_Cross.size, 4, w_domain=rx, r_domain="sync")

        # ---------------------------------------------------------------- PHY side (rx)
        # stage 0: GMII input register (keeps the pins' neighbour logic off the FSM paths)
        rxd0, dv0, er0 = Signal(8), Signal(), Signal()
        m.d[rx] += [rxd0.eq(self.rxd), dv0.eq(self.rx_dv), er0.eq(self.rx_er)]
        # stage 1: the byte with its SFD / preamble compares decoded a cycle ahead
        rxd, rx_dv, rx_er, is_sfd, is_pre = Signal(8), Signal(), Signal(), Signal(), Signal()
        m.d[rx] += [rxd.eq(rxd0), rx_dv.eq(dv0), rx_er.eq(er0),
                    is_sfd.eq(rxd0 == SFD), is_pre.eq(rxd0 == PREAMBLE)]

        # stage 2: SFD / FCS / length FSM and the word packer.  Length thresholds are
        # registered flags updated with ``count`` (no wide compare in the same cycle); the
        # CRC's residue compare is registered (``fcs_ok``) and read a cycle after the frame.
        # CRC-32 register (IEEE 802.3 3.2.9): amaranth.lib.crc's XOR network for one byte
        # per clock (rtl/crc.py), initialised in IDLE, updated with every DATA byte
        fcs_reg = Signal(32, init=CRC32_INIT)
        count = Signal(range(self.max_frame + 1))  # bytes after the SFD, saturating
        at_max = Signal()                          # count == max_frame
        payload = Signal()                         # count >= 4
        long_enough = Signal()                     # count >= MIN_FRAME
        delay = Signal(32)                         # the last 4 bytes (FCS candidates)
        word = Signal(32)
        lane = Signal(2)                           # next byte lane of ``word``
        full = Signal()                            # ``word`` holds 4 bytes
        giant = Signal()
        er_seen = Signal()
        fcs_ok = Signal()
        status = Signal(RxStatus)
        push = Signal()                            # hand ``word`` to stage 3 (comb)
        push_last = Signal()
        m.d[rx] += fcs_ok.eq(fcs_reg == CRC32_GOOD)

        # stage 3: one registered word in front of the crossing FIFO.  A full word that
        # finds the FIFO full is lost (the frame's status becomes OVERFLOW); the last word
        # waits for room (the FSM holds in FLUSH meanwhile).  The last word of a bad frame
        # carries its status in ``data[:3]`` instead of bytes (``ok`` = 0).
        pend = Signal(_Cross)
        pend_valid = Signal()
        lost = Signal()
        w = _Cross(fifo.w_data)
        m.d.comb += [
            fifo.w_en.eq(pend_valid),
            w.data[3:].eq(pend.data[3:]),
            w.data[:3].eq(Mux(pend.last & pend.ok & lost, RxStatus.OVERFLOW.value,
                              pend.data[:3])),
            w.nbytes_m1.eq(pend.nbytes_m1),
            w.last.eq(pend.last),
            w.ok.eq(pend.ok & ~lost),
        ]
        ok = Signal()
        with m.If(push):
            m.d[rx] += [pend_valid.eq(1), pend.data[3:].eq(word[3:]),
                        pend.data[:3].eq(Mux(~push_last | ok, word[:3], status)),
                        pend.nbytes_m1.eq(lane - 1), pend.last.eq(push_last), pend.ok.eq(ok)]
        with m.Elif(pend_valid & (fifo.w_rdy | ~pend.last)):
            m.d[rx] += pend_valid.eq(0)
        with m.If(pend_valid & ~pend.last & ~fifo.w_rdy):
            m.d[rx] += lost.eq(1)
        with m.If(pend_valid & pend.last & fifo.w_rdy):
            m.d[rx] += lost.eq(0)

        with m.FSM(domain=rx):
            with m.State("IDLE"):
                m.d[rx] += [fcs_reg.eq(CRC32_INIT), count.eq(0), at_max.eq(0), payload.eq(0), long_enough.eq(0),
                            lane.eq(0), full.eq(0), giant.eq(0), er_seen.eq(0)]
                with m.If(rx_dv):
                    with m.If(is_sfd):
                        m.next = "DATA"
                    with m.Elif(~is_pre):
                        m.next = "DROP"
            with m.State("DATA"):
                with m.If(rx_dv):
                    m.d[rx] += [fcs_reg.eq(crc32_byte(fcs_reg, rxd)),
                                delay.eq(Cat(delay[8:], rxd))]
                    with m.If(rx_er):
                        m.d[rx] += er_seen.eq(1)
                    with m.If(at_max):
                        m.d[rx] += giant.eq(1)
                    with m.Else():
                        m.d[rx] += [count.eq(count + 1),
                                    at_max.eq(count == self.max_frame - 1)]
                        with m.If(count == 3):
                            m.d[rx] += payload.eq(1)
                        with m.If(count == MIN_FRAME - 1):
                            m.d[rx] += long_enough.eq(1)
                        with m.If(payload):
                            # the byte leaving the delay line is payload
                            m.d[rx] += [word.word_select(lane, 8).eq(delay[:8]),
                                        lane.eq(lane + 1), full.eq(lane == 3)]
                            with m.If(full):
                                m.d.comb += push.eq(1)
                with m.Else():
                    m.next = "CHECK"
            with m.State("CHECK"):
                # ``fcs_ok`` now reflects the CRC after the frame's last byte
                with m.If(giant):
                    m.d[rx] += [status.eq(RxStatus.GIANT), ok.eq(0)]
                with m.Elif(~long_enough):
                    m.d[rx] += [status.eq(RxStatus.RUNT), ok.eq(0)]
                with m.Elif(~fcs_ok | er_seen):
                    m.d[rx] += [status.eq(RxStatus.BAD_FCS), ok.eq(0)]
                with m.Else():
                    m.d[rx] += [status.eq(RxStatus.OK), ok.eq(1)]
                m.next = "END"
            with m.State("END"):
                # the last word (maybe empty for a runt) carries the status
                m.d.comb += [push.eq(1), push_last.eq(1)]
                m.next = "FLUSH"
            with m.State("FLUSH"):
                # wait until stage 3 has written the last word into the crossing FIFO
                with m.If(~pend_valid):
                    m.next = "IDLE"
            with m.State("DROP"):
                with m.If(~rx_dv):
                    m.next = "IDLE"

        # ---------------------------------------------------------------- NIC side (sync)
        # stage A: the crossing FIFO's output, registered (popped every cycle, except in the
        # 5 cycles after a reset while stage D clears its counter RAM).
        clearing = Signal(init=1)
        a = Signal(_Cross, reset_less=True)
        a_valid = Signal()
        m.d.comb += fifo.r_en.eq(~clearing)
        m.d.sync += [a.eq(fifo.r_data), a_valid.eq(fifo.r_rdy & ~clearing)]

        # stage B: two words make a 64-bit beat, each written in place (no lane mux); the
        # end-of-frame reason (an RxStatus value, 1..4) is kept for stage C.
        b_data = Signal(64, reset_less=True)
        b_nbytes_m1, b_last = Signal(3, reset_less=True), Signal(reset_less=True)
        b_good, b_code = Signal(reset_less=True), Signal(3, reset_less=True)
        b_valid, half = Signal(), Signal()
        m.d.sync += b_valid.eq(a_valid & (half | a.last))
        with m.If(a_valid):
            with m.If(half):
                m.d.sync += b_data[32:].eq(a.data)
            with m.Else():
                m.d.sync += b_data[:32].eq(a.data)
            m.d.sync += [
                half.eq(~half & ~a.last),
                b_nbytes_m1.eq(Cat(a.nbytes_m1, half)),
                b_last.eq(a.last),
                b_good.eq(a.ok),
                # BAD_FCS, RUNT, GIANT as they are, OVERFLOW (and nothing else) has bit 2
                b_code.eq(Mux(a.data[2], RxStatus.OVERFLOW.value, a.data[:2])),
            ]

        # stage C: speculative buffer write and commit / rollback; stage D: the counters.
        depth = self.buffer_depth
        abits = (depth - 1).bit_length()
        # The read port reads only committed words (rd < commit <= wr, wr - rd < depth), so
        # it never reads the word being written, except while not fetching (rd == commit ==
        # wr), when the read data is discarded (v1 = 0): no read/write collision logic.
        m.submodules.mem = mem = Memory(shape=_Stored, depth=depth, init=[],
                                        attrs={"no_rw_check": 1})
        wp = mem.write_port()
        rp = mem.read_port()
        wr = Signal(abits + 1)          # next write (speculative, current frame)
        commit = Signal(abits + 1)      # end of the last good frame
        rd = Signal(abits + 1)          # next beat to fetch from the buffer
        dropping = Signal()
        # Registered, one cycle behind: wr grows by at most 1 per cycle and rd never goes
        # back, so "wr - rd >= depth - 1 a cycle ago" covers "full now" (one word unused).
        buf_full = Signal()
        m.d.sync += buf_full.eq((wr - rd)[:abits + 1] >= depth - 1)

        m.d.comb += [
            wp.addr.eq(wr[:abits]),
            wp.data.data.eq(b_data),
            wp.data.nbytes_m1.eq(b_nbytes_m1),
            wp.data.last.eq(b_last),
        ]
        # the frame's counter for stage D: its RxStatus value (OK: rx_frames)
        cnt_go = Signal()
        cnt_idx = Signal(3)
        m.d.sync += cnt_go.eq(0)
        with m.If(b_valid):
            with m.If(~dropping & ~buf_full):
                m.d.comb += wp.en.eq(1)
                m.d.sync += wr.eq(wr + 1)
            with m.Else():
                m.d.sync += dropping.eq(1)
            with m.If(b_last):
                m.d.sync += [dropping.eq(0), cnt_go.eq(1)]
                with m.If(b_good & ~dropping & ~buf_full):
                    m.d.sync += [commit.eq(wr + 1), cnt_idx.eq(RxStatus.OK.value)]
                with m.Else():
                    m.d.sync += [wr.eq(commit),
                                 cnt_idx.eq(Mux(b_good, RxStatus.OVERFLOW.value, b_code))]

        # stage D: the five counters.  The ports are flip-flops; a copy of each lives in a
        # distributed RAM (word = RxStatus value) that feeds the one shared incrementer, in
        # two cycles: D1 reads stats[idx] into a register (forwarded from D2 when D2 writes
        # that word in the same cycle), D2 writes that + 1 back to the RAM and into the
        # port of that counter; one frame per cycle.  Word 7 is never written: it holds
        # 0xFFFFFFFF from the configuration, so after a reset words 0..4 are cleared as
        # stats[7] + 1 (the crossing FIFO is not popped meanwhile, so no frame ends during
        # those cycles).
        names = ("rx_frames", "rx_bad_fcs", "rx_runt", "rx_giant", "rx_fifo_overflow")
        m.submodules.stats = stats = Memory(shape=32, depth=8, init=[0] * 7 + [0xFFFFFFFF])
        st_w = stats.write_port()
        st_r = stats.read_port(domain="comb")
        clr = Signal(3)
        # the read port serves the incrementer's D1, else ``cnt_addr`` (into ``cnt_data``)
        busy = clearing | cnt_go
        d1_addr = Mux(clearing, 7, cnt_idx)
        d2_en, d2_cnt = Signal(), Signal()      # D2 writes / D2 writes a frame's counter
        d2_idx, d2_val = Signal(3), Signal(32)  # the word and its value before the + 1
        m.d.comb += [
            st_r.addr.eq(Mux(busy, d1_addr, self.cnt_addr)),
            st_w.addr.eq(d2_idx),
            st_w.data.eq(d2_val + 1),
            st_w.en.eq(d2_en),
        ]
        m.d.sync += [d2_en.eq(busy), d2_cnt.eq(cnt_go),
                     d2_idx.eq(Mux(clearing, clr, cnt_idx)),
                     d2_val.eq(Mux(d2_en & (d2_idx == d1_addr), st_w.data, st_r.data))]
        m.d.sync += self.cnt_fresh.eq(~busy)
        with m.If(~busy):
            m.d.sync += self.cnt_data.eq(st_r.data)
        with m.If(clearing):
            m.d.sync += clr.eq(clr + 1)
            with m.If(clr == len(names) - 1):
                m.d.sync += clearing.eq(0)
        for k, name in enumerate(names):
            with m.If(d2_cnt & (d2_idx == k)):
                m.d.sync += getattr(self, name).eq(st_w.data)

        # Read pipeline, all stages enabled by ``go`` (a register): block-RAM read (v1),
        # ``q`` = the read data with nothing in between (it becomes the EBR's output
        # register, boards/ebr_outreg.py), then the output register ``o`` with a one-beat
        # skid register ``sk``: go falls the cycle after a beat had to park in ``sk``.
        o = self.m_axis
        sk_valid = Signal()
        go = Signal(init=1)             # = ~sk_valid (its own flip-flop: a plain clock enable)
        v1, v2 = Signal(), Signal()
        q = Signal(_Stored, reset_less=True)
        fetch = go & (rd != commit)
        m.d.comb += [rp.addr.eq(rd[:abits]), rp.en.eq(go)]
        with m.If(go):
            m.d.sync += [v1.eq(fetch), v2.eq(v1), q.eq(rp.data)]
        with m.If(fetch):
            m.d.sync += rd.eq(rd + 1)
        keep_q = Cat(*[q.nbytes_m1 >= i for i in range(8)])
        sk_data, sk_keep, sk_last = (Signal(64, reset_less=True), Signal(8, reset_less=True),
                                     Signal(reset_less=True))
        o_data, o_keep, o_last = (Signal(64, reset_less=True), Signal(8, reset_less=True),
                                  Signal(reset_less=True))
        o_valid = Signal()
        m.d.comb += [o.tvalid.eq(o_valid), o.tdata.eq(o_data), o.tkeep.eq(o_keep),
                     o.tlast.eq(o_last)]
        new = go & v2                   # a beat leaves ``q`` this cycle
        with m.If(~o_valid | o.tready):
            with m.If(sk_valid):
                m.d.sync += [o_valid.eq(1), o_data.eq(sk_data), o_keep.eq(sk_keep),
                             o_last.eq(sk_last), sk_valid.eq(0), go.eq(1)]
            with m.Else():
                m.d.sync += [o_valid.eq(new), o_data.eq(q.data), o_keep.eq(keep_q),
                             o_last.eq(q.last)]
        with m.Elif(new):
            m.d.sync += [sk_valid.eq(1), go.eq(0), sk_data.eq(q.data), sk_keep.eq(keep_q),
                         sk_last.eq(q.last)]
        return m
