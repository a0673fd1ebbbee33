"""Shared board-top logic: one two-plane NIC (:class:`~mrcnic.rtl.csr_nic.CsrNic`) with its MACs, memory and control port.

Every ECP5 board top (``boards/colorlight.py``, ``boards/versa.py``) is this
:class:`NicBoardTop` plus the board's clocking and pins::

    UART pins ──► UartAxilBridge ──(AXI4-Lite 16/32)──► AxilSplit ─┬─► CsrNic.s_axil (CSR bank ──► MRCNic)
                                                                   └─► BoardRegs ──┬─► s_wr (work requests), recv_cpl FIFO
                                                                                   ├─► MAC / NIC counters, board status
                                                                                   └─► HostMemory word window (0x8000..)
    MRCNic.m_axi (AXI4 64-bit) ──► HostMemory (block RAM, AXI4 subordinate)
    CsrNic.m_axis_p<i> (PORT_ADMIN-gated) ──► EthMac i ──► RgmiiDdrIo i ──► RGMII pins of PHY i
    RGMII pins ──► RgmiiDdrIo i ──► EthMac i ──► MRCNic.s_axis_p<i>

Clock domains: ``sync`` (the NIC core, 125 MHz from the board PLL), ``eth_tx``
(the RGMII transmit clock: the same PLL output, a separate domain name because
:class:`~mrcnic.rtl.eth_mac.EthMac` keeps its MII side in its own domain) and
``eth<i>_rx`` (RXC of PHY i, 125 MHz, asynchronous; the MAC's FIFOs cross it).

The board register window (``BoardRegs``, AXI4-Lite offsets ``0x0800..0x08FF``)
holds what the register map (``mrcnic.regmap``) does not describe yet: posting
work requests, popping receive completions, the MAC frame counters and the
host-memory window; see ``docs/boards.md``.  Register-map features the NIC core
has no port for yet are tied off (listed in :data:`TIED_OFF`).
"""

from amaranth.hdl import Cat, ClockDomain, ClockSignal, Const, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, fifo, io, wiring
from amaranth.lib.cdc import FFSynchronizer, ResetSynchronizer
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..regmap import build_regmap
from ..rtl.axi import Axi4LiteSignature, Axi4Signature
from ..rtl.csr_nic import TIED_OFF as CSR_TIED_OFF
from ..rtl.csr_nic import CsrNic
from ..rtl.eth_mac import EthMac
from ..rtl.layouts import Completion, WorkRequest
from ..rtl.rgmii import RgmiiDdrIo
from ..rtl.uart_bridge import UartAxilBridge

__all__ = ["HostMemory", "AxilSplit", "BoardRegs", "NicBoardTop",
           "BOARD_BASE", "HOSTMEM_BASE", "BOARD_REGS", "TIED_OFF"]

OKAY, SLVERR = 0, 2
BOARD_BASE = 0x0800     #: AXI4-Lite offset of :class:`BoardRegs`
HOSTMEM_BASE = 0x8000   #: AXI4-Lite offset of the host-memory word window

#: Board registers (offset -> (name, access, meaning)); documented in docs/boards.md.
BOARD_REGS = {
    0x0800: ("BOARD_MAGIC", "RO", "ASCII \"BRD1\" (0x42524431)"),
    0x0804: ("BOARD_STATUS", "RO", "bit 0 PLL locked, bits 2:1 RX clock present (port 0, 1), "
                                   "bit 8 work request pending, bits 31:16 completions queued"),
    0x0808: ("WR_POST", "CMD", "write: post the WorkRequest in WR_DATA0..6 to the NIC"),
    0x080C: ("HOSTMEM_WORDS", "RO", "host memory size in 32-bit words"),
    **{0x0810 + 4 * i: (f"WR_DATA{i}", "RW", f"WorkRequest bits {32 * i + 31}:{32 * i}")
       for i in range(7)},
    0x0830: ("CPL_DATA0", "RO", "head receive Completion bits 31:0 (0 when none)"),
    0x0834: ("CPL_DATA1", "RO", "head Completion bits 59:32, bit 31 = valid; reading pops it"),
    **{0x0840 + 0x20 * p + 4 * i: (f"MAC{p}_{n.upper()}", "RO", f"EthMac {p} {n} (wraps)")
       for p in range(2) for i, n in enumerate(
           ("tx_frames", "tx_oversize", "rx_frames", "rx_bad_fcs", "rx_runt", "rx_giant",
            "rx_fifo_overflow"))},
    0x0880: ("NIC_DATA_FRAMES", "RO", "data frames sent, all planes"),
    0x0884: ("NIC_ACK_FRAMES", "RO", "ACK frames sent, all planes"),
    0x0888: ("NIC_ACKS_RECEIVED", "RO", "ACK/SACK/NACK frames received"),
    0x088C: ("NIC_PLACED_BYTES", "RO", "payload bytes written to host memory"),
    0x0890: ("NIC_NO_PATH", "RO", "bit 0: the current work request has no eligible EV"),
}

#: Register-map features with no NIC-core source yet (see ``mrcnic.rtl.csr_nic.TIED_OFF``).
TIED_OFF = CSR_TIED_OFF + (
    "MRCNic send_cpl: consumed and dropped (no board register for send completions yet)",
)


class HostMemory(wiring.Component):
    """Block-RAM host memory: an AXI4 subordinate (64-bit) plus a 32-bit word window.

    Parameters
    ----------
    size : int
        Bytes, a power of two from 2 KiB to 64 KiB (``size / 8`` 64-bit words of EBR).

    Attributes
    ----------
    s_axi : In(Axi4Signature(32, 64, 4))
        AXI4 subordinate, INCR bursts of 8-byte beats (``*size`` ignored).  Reads
        return one beat per clock (``rvalid`` two cycles after the AR handshake:
        block RAM, then its output register; ``rready`` backpressure stalls both
        stages); a read of a word written in the same cycle returns unspecified
        data (block-RAM port collision); writes take one beat per clock,
        honour ``wstrb`` and answer once per burst.  A beat whose address is
        beyond ``size`` is not written, reads 0 and makes the response SLVERR
        (``rresp`` of that beat, ``bresp`` of the burst).  Address bits 2:0 are
        ignored.  One read burst and one write burst at a time.
    win_addr : In(range(size // 4))
        Word window address (32-bit word index).
    win_we, win_re : In(1)
        Window write / read request, held until ``win_done``.
    win_wdata : In(32), win_rdata : Out(32)
        Window data; ``win_rdata`` is valid in the cycle of ``win_done``.
    win_done : Out(1)
        One-cycle pulse: the window access is done.  The window borrows the read
        or write port while the AXI4 side is between bursts (it waits at most one
        burst; new AXI4 bursts are held off while a window request waits).
    """

    def __init__(self, size: int = 16384):
        if size < 2048 or size > 65536 or size & (size - 1):
            raise ValueError(f"size must be a power of two from 2048 to 65536 bytes, not {size}")
        self.size = size
        self.words = size // 8
        super().__init__({
            "s_axi": In(Axi4Signature(32, 64, 4)),
            "win_addr": In(range(size // 4)), "win_we": In(1), "win_re": In(1),
            "win_wdata": In(32), "win_rdata": Out(32), "win_done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        a = self.s_axi
        aw = (self.words - 1).bit_length()
        # no_rw_check: a read of the word written in the same cycle is unspecified (ECP5
        # cross-port collision) instead of Yosys's bypass logic after the EBR; the NIC never
        # reads a buffer it is writing.
        m.submodules.mem = mem = Memory(shape=64, depth=self.words, init=[],
                                        attrs={"no_rw_check": 1})
        wp = mem.write_port(granularity=8)
        # an asynchronous port and an explicit read register (``rd1``): Yosys honours
        # ``no_rw_check`` only when it merges such a register into the port, a synchronous
        # non-transparent port gets read-first emulation (a delayed write, an address compare
        # and a bypass multiplexer behind the EBR, the block RAM's output no longer feeding
        # ``q`` directly).  Same behaviour: ``rd1`` is the word before a same-cycle write.
        rp = mem.read_port(domain="comb")

        def in_range(byte_addr):
            return byte_addr[3 + aw:] == 0

        # ---- read engine: address -> EBR (stage 1) -> data register q (stage 2, rdata) ------
        # Both stages move together when stage 2 may take a beat (``adv``), so ``q`` is
        # loaded straight from the EBR (it becomes the EBR's output register in board builds).
        r_busy, r_addr, r_cnt = Signal(), Signal(32), Signal(8)
        v1, last1, err1 = Signal(), Signal(), Signal()      # stage 1: an AXI beat is being read
        w1, w2 = Signal(), Signal()                          # stage 1 / 2: a window read
        rd1 = Signal(64, reset_less=True)   # the EBR's read register (no reset: see ebr_outreg)
        q, err2 = Signal(64), Signal()
        adv = ~a.rvalid | a.rready
        issue = adv & r_busy
        m.d.comb += [
            a.arready.eq(~r_busy & ~self.win_re),
            rp.addr.eq(r_addr[3:3 + aw]),
            a.rdata.eq(Mux(err2, 0, q)),
        ]
        with m.If(adv):
            m.d.sync += [rd1.eq(rp.data), q.eq(rd1), a.rvalid.eq(v1), a.rlast.eq(last1), err2.eq(err1),
                         a.rresp.eq(Mux(err1, SLVERR, OKAY)), w2.eq(w1),
                         v1.eq(issue), w1.eq(0)]
        with m.If(issue):
            m.d.sync += [last1.eq(r_cnt == 0), err1.eq(~in_range(r_addr)),
                         r_addr.eq(r_addr + 8), r_cnt.eq(r_cnt - 1)]
            with m.If(r_cnt == 0):
                m.d.sync += r_busy.eq(0)
        with m.If(a.arvalid & a.arready):
            m.d.sync += [r_busy.eq(1), r_addr.eq(a.araddr), r_cnt.eq(a.arlen), a.rid.eq(a.arid)]
        # the window read: only while the AXI pipeline is empty (``adv`` is then true)
        # ``quiet``: the read side was empty in the previous cycle and nothing started
        # then (registered, so the read address multiplexer is one gate after flip-flops);
        # no AXI4 read starts while win_re waits (arready is low)
        win_sel_hi = Signal()
        win_rd_go = Signal()
        quiet = Signal()
        m.d.comb += win_rd_go.eq(self.win_re & quiet)
        m.d.sync += quiet.eq(~(r_busy | (a.arvalid & a.arready) | v1 | a.rvalid | win_rd_go
                               | w1 | w2 | self.win_done))
        with m.If(win_rd_go):
            m.d.comb += rp.addr.eq(self.win_addr[1:])
            m.d.sync += [w1.eq(1), win_sel_hi.eq(self.win_addr[0])]

        # ---- write engine ----------------------------------------------------------------
        # A W beat is taken into a register (word address, data, byte enables) and written
        # to the EBR the cycle after: the manager's W channel logic ends at flip-flops, not
        # at the block RAM's write-enable pins.  The burst's B response comes with that
        # write cycle (bvalid is set at the edge that registers the last beat), so a read
        # after the response sees the data; the window write waits while bvalid is high.
        w_busy, w_addr, w_err = Signal(), Signal(32), Signal()
        wq_addr, wq_data, wq_en = Signal(aw), Signal(64), Signal(8)
        m.d.comb += [
            a.awready.eq(~w_busy & ~a.bvalid & ~self.win_we),
            a.wready.eq(w_busy),
            wp.addr.eq(wq_addr),
            wp.data.eq(wq_data),
            wp.en.eq(wq_en),
        ]
        m.d.sync += [wq_en.eq(0), wq_addr.eq(w_addr[3:3 + aw]), wq_data.eq(a.wdata)]
        with m.If(a.awvalid & a.awready):
            m.d.sync += [w_busy.eq(1), w_addr.eq(a.awaddr), w_err.eq(0), a.bid.eq(a.awid)]
        with m.If(a.wvalid & a.wready):
            with m.If(in_range(w_addr)):
                m.d.sync += wq_en.eq(a.wstrb)
            m.d.sync += [w_addr.eq(w_addr + 8), w_err.eq(w_err | ~in_range(w_addr))]
            with m.If(a.wlast):
                m.d.sync += [w_busy.eq(0), a.bvalid.eq(1),
                             a.bresp.eq(Mux(w_err | ~in_range(w_addr), SLVERR, OKAY))]
        with m.If(a.bvalid & a.bready):
            m.d.sync += a.bvalid.eq(0)

        # ---- window ------------------------------------------------------------------------
        m.d.sync += self.win_done.eq(0)
        with m.If(w2):
            m.d.sync += [self.win_done.eq(1), w2.eq(0),
                         self.win_rdata.eq(Mux(win_sel_hi, q[32:], q[:32]))]
        with m.Elif(self.win_we & ~w_busy & ~a.bvalid & ~self.win_done):
            m.d.comb += [wp.addr.eq(self.win_addr[1:]),
                         wp.data.eq(Cat(self.win_wdata, self.win_wdata)),
                         wp.en.eq(Mux(self.win_addr[0], 0xF0, 0x0F))]
            m.d.sync += self.win_done.eq(1)
        return m


class AxilSplit(wiring.Component):
    """AXI4-Lite 1-to-2 split by address: ``m0`` below ``BOARD_BASE``, ``m1`` from it on.

    A registered split (ARM IHI 0022E, AXI4-Lite handshakes on both sides): every output
    comes from a flip-flop or a gate of flip-flops, so neither the manager's nor the
    subordinates' handshake logic runs through the other side's.

    Attributes
    ----------
    s_axil : In(Axi4LiteSignature(16, 32))
        From the UART bridge.  ``awready`` / ``wready`` / ``arready`` are high while the
        split holds no AW / W / AR of its own (one write and one read at a time; AW and W
        may come in either order or together).
    m0_axil, m1_axil : Out(Axi4LiteSignature(16, 32))
        The CSR bank (offsets ``0x0000..0x07FF``) and the board registers (``0x0800..``).
        Address, data and strobes come from the split's registers, ``*valid`` and
        ``bready`` / ``rready`` from flip-flops of their own per subordinate.

    Latency: AW, W and AR reach the subordinate the cycle after the split takes them
    (a write: the cycle after both AW and W are taken); B and R are registered (the
    response is on ``s_axil`` the cycle after the subordinate's handshake) and held until
    ``bready`` / ``rready``; the split takes the next AW / W / AR the cycle after that.
    The target is decoded from the address as it is taken (``awaddr`` / ``araddr`` bits
    15:11 not all 0: ``m1``).
    """

    def __init__(self):
        super().__init__({"s_axil": In(Axi4LiteSignature(16, 32)),
                          "m0_axil": Out(Axi4LiteSignature(16, 32)),
                          "m1_axil": Out(Axi4LiteSignature(16, 32))})

    def elaborate(self, platform):
        m = Module()
        s, subs = self.s_axil, (self.m0_axil, self.m1_axil)
        hi = BOARD_BASE.bit_length() - 1                # BOARD_BASE is a power of two

        # ---- write: AW and W latches, then the selected subordinate, then B --------------
        aw_got, w_got, w_issued = Signal(), Signal(), Signal()
        w_sel = Signal()
        awaddr, awprot = Signal(16), Signal(3)
        wdata, wstrb = Signal(32), Signal(4)
        awv, wv, brdy = Signal(2), Signal(2), Signal(2)     # per subordinate
        m.d.comb += [s.awready.eq(~aw_got), s.wready.eq(~w_got)]
        with m.If(s.awvalid & ~aw_got):
            m.d.sync += [aw_got.eq(1), awaddr.eq(s.awaddr), awprot.eq(s.awprot),
                         w_sel.eq(s.awaddr[hi:].any())]
        with m.If(s.wvalid & ~w_got):
            m.d.sync += [w_got.eq(1), wdata.eq(s.wdata), wstrb.eq(s.wstrb)]
        with m.If(aw_got & w_got & ~w_issued):          # both held: issue to the target
            m.d.sync += [w_issued.eq(1), awv.eq(Mux(w_sel, 0b10, 0b01)),
                         wv.eq(Mux(w_sel, 0b10, 0b01)), brdy.eq(Mux(w_sel, 0b10, 0b01))]
        for i, sub in enumerate(subs):
            m.d.comb += [sub.awaddr.eq(awaddr), sub.awprot.eq(awprot), sub.awvalid.eq(awv[i]),
                         sub.wdata.eq(wdata), sub.wstrb.eq(wstrb), sub.wvalid.eq(wv[i]),
                         sub.bready.eq(brdy[i])]
            with m.If(sub.awready & awv[i]):
                m.d.sync += awv[i].eq(0)
            with m.If(sub.wready & wv[i]):
                m.d.sync += wv[i].eq(0)
            with m.If(sub.bvalid & brdy[i]):
                m.d.sync += [brdy[i].eq(0), s.bvalid.eq(1), s.bresp.eq(sub.bresp)]
        with m.If(s.bvalid & s.bready):
            m.d.sync += [s.bvalid.eq(0), aw_got.eq(0), w_got.eq(0), w_issued.eq(0)]

        # ---- read: AR latch, the selected subordinate, then R ----------------------------
        ar_got = Signal()
        araddr, arprot = Signal(16), Signal(3)
        arv, rrdy = Signal(2), Signal(2)
        m.d.comb += s.arready.eq(~ar_got)
        with m.If(s.arvalid & ~ar_got):
            sel = Mux(s.araddr[hi:].any(), 0b10, 0b01)
            m.d.sync += [ar_got.eq(1), araddr.eq(s.araddr), arprot.eq(s.arprot),
                         arv.eq(sel), rrdy.eq(sel)]
        for i, sub in enumerate(subs):
            m.d.comb += [sub.araddr.eq(araddr), sub.arprot.eq(arprot), sub.arvalid.eq(arv[i]),
                         sub.rready.eq(rrdy[i])]
            with m.If(sub.arready & arv[i]):
                m.d.sync += arv[i].eq(0)
            with m.If(sub.rvalid & rrdy[i]):
                m.d.sync += [rrdy[i].eq(0), s.rvalid.eq(1), s.rdata.eq(sub.rdata),
                             s.rresp.eq(sub.rresp)]
        with m.If(s.rvalid & s.rready):
            m.d.sync += [s.rvalid.eq(0), ar_got.eq(0)]
        return m


class BoardRegs(wiring.Component):
    """Board registers (:data:`BOARD_REGS`) and the host-memory word window, AXI4-Lite subordinate.

    Attributes
    ----------
    s_axil : In(Axi4LiteSignature(16, 32))
        Offsets ``0x0800..0x08FF`` (registers) and ``0x8000..`` (host memory, 32-bit
        words).  Unknown offsets answer SLVERR (reads: data 0).  One transaction at a
        time; AW and W are taken together; ``bvalid`` follows 2 cycles, ``rvalid`` 5
        cycles later (the address is registered, then decoded into one-hot selects, the
        MACs' RX counter words are fetched meanwhile -- longer while a MAC's counter RAM
        is busy; a read runs through an AND-OR multiplexer in two registered stages into
        ``rdata``); host memory: the cycle after the window access is done.
    m_wr : Out(stream.Signature(WorkRequest))
        ``WR_POST`` presents ``WR_DATA0..6`` as one work request, held until taken.
    s_cpl : In(stream.Signature(Completion))
        Receive completions into a 16-entry FIFO (through an input register: a completion
        is counted in ``BOARD_STATUS`` one cycle after it is taken; ``ready`` is a
        flip-flop, low while 13 or more are queued), popped by reading ``CPL_DATA1``.
    tx_counters : In(ArrayLayout(32, 4))
        MAC 0 ``tx_frames``, ``tx_oversize``, then MAC 1's.
    mac_rd_addr : Out(3)
        The RX counter (:class:`~mrcnic.rtl.eth_mac_rx.RxStatus` value) both MACs read from
        their counter RAM (:class:`~mrcnic.rtl.eth_mac.EthMac` ``rx_cnt_addr``): from the
        registered address, so held during a read.
    mac_rd_data : In(ArrayLayout(32, 2)), mac_rd_fresh : In(2)
        MAC 0 / 1 ``rx_cnt_data`` / ``rx_cnt_fresh``.
    nic_stats : In(ArrayLayout(32, 5))
        ``NIC_DATA_FRAMES`` .. ``NIC_NO_PATH``.
    status : In(3)
        PLL locked, RX clock 0 present, RX clock 1 present.
    win_* : to :class:`HostMemory`'s window.
    """

    def __init__(self, hostmem_words: int):
        from amaranth.lib import stream
        self.hostmem_words = hostmem_words
        super().__init__({
            "s_axil": In(Axi4LiteSignature(16, 32)),
            "m_wr": Out(stream.Signature(WorkRequest)),
            "s_cpl": In(stream.Signature(Completion)),
            "tx_counters": In(data.ArrayLayout(32, 4)),
            "mac_rd_addr": Out(3),
            "mac_rd_data": In(data.ArrayLayout(32, 2)), "mac_rd_fresh": In(2),
            "nic_stats": In(data.ArrayLayout(32, 5)),
            "status": In(3),
            "win_addr": Out(range(hostmem_words)), "win_we": Out(1), "win_re": Out(1),
            "win_wdata": Out(32), "win_rdata": In(32), "win_done": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        s = self.s_axil
        # the completion FIFO: distributed RAM, read asynchronously (the read data is
        # registered into ``rdata``).  A completion is taken into a register first and
        # written into the FIFO the cycle after (the NIC's valid logic ends at flip-flops);
        # ``s_cpl.ready`` is a flip-flop: room for this completion, the one in the register
        # and the one taken in the previous cycle (FIFO level <= depth - 3 a cycle ago).
        cpl_depth = 16
        m.submodules.cpl_fifo = cf = fifo.SyncFIFO(width=Completion.as_shape().size,
                                                   depth=cpl_depth)
        cq_valid, cq_data = Signal(), Signal(Completion.as_shape().size)
        cpl_room = Signal()
        m.d.sync += [cpl_room.eq(cf.level <= cpl_depth - 3),
                     cq_valid.eq(self.s_cpl.valid & cpl_room),
                     cq_data.eq(self.s_cpl.payload.as_value())]
        m.d.comb += [cf.w_data.eq(cq_data), cf.w_en.eq(cq_valid),
                     self.s_cpl.ready.eq(cpl_room)]
        wr_words = Signal(data.ArrayLayout(32, 7))
        m.d.comb += self.m_wr.payload.eq(wr_words.as_value()[:WorkRequest.as_shape().size])
        with m.If(self.m_wr.valid & self.m_wr.ready):
            m.d.sync += self.m_wr.valid.eq(0)

        # the register words (index: (offset - BOARD_BASE) / 4); not listed: SLVERR
        regs = {
            0x800: Const(0x42524431, 32),
            0x804: Cat(self.status, Const(0, 5), self.m_wr.valid, Const(0, 7), cf.level),
            0x80C: Const(self.hostmem_words, 32),
            # CPL_DATA0/1 read 0 while the FIFO is empty: r_rdy joins their selects (below)
            0x830: cf.r_data[:32],
            0x834: Cat(cf.r_data[32:], Const(0, 64 - len(cf.r_data) - 1), Const(1, 1)),
        }
        cpl_words = {(0x830 - BOARD_BASE) >> 2, (0x834 - BOARD_BASE) >> 2}
        for p in range(2):
            for i in range(2):
                regs[0x840 + 0x20 * p + 4 * i] = self.tx_counters[2 * p + i]
        for i in range(5):
            regs[0x880 + 4 * i] = self.nic_stats[i]
        words = {(off - BOARD_BASE) >> 2: value for off, value in regs.items()}
        # the MACs' RX counters (MACp_RX_FRAMES .. MACp_RX_FIFO_OVERFLOW): one select per
        # MAC over its five words, the word read from the MAC's counter RAM
        mac_rx = [{(0x848 + 0x20 * p + 4 * i - BOARD_BASE) >> 2 for i in range(5)}
                  for p in range(2)]

        # one transaction at a time: its address (AW or AR) is registered and decoded in
        # the next cycle into one-hot selects; a register read is then one AND-OR
        # multiplexer (two data bits per LUT, three LUT levels) into ``rdata``
        addr = Signal(16)
        word = addr[2:8]                                 # register word in the window
        in_win = addr[8:12] == (BOARD_BASE >> 8)         # (bits 15:12 ignored, as below 0x8000)
        is_mem = addr[15]                                # >= HOSTMEM_BASE (0x8000)
        mem_idx = addr[2:15]
        mem_ok = mem_idx < self.hostmem_words
        # MACp_RX_* (word 16 + 8p + 2 + k) is RxStatus value k: ``mac_rd_addr`` is loaded
        # with k as the AR address is taken (IDLE, below) and held through the read
        # WR_DATA0..6 read back from a distributed-RAM copy (cheaper than a multiplexer over
        # the work-request flip-flops), at its word index
        wr_first = (0x810 - BOARD_BASE) >> 2
        m.submodules.wr_shadow = shadow = Memory(shape=32, depth=16, init=[])
        sh_w = shadow.write_port()
        sh_r = shadow.read_port(domain="comb")
        m.d.comb += [sh_w.addr.eq(word[:4]), sh_w.data.eq(self.win_wdata), sh_r.addr.eq(word[:4])]
        w_bad, w_post = Signal(), Signal()              # the write's decode, registered

        def bad_write(a):
            """A write to ``a`` (bus address) answers SLVERR: not WR_POST, WR_DATA0..6 nor
            a host-memory word."""
            aw_word = a[2:8]
            ok_reg = (a[8:12] == (BOARD_BASE >> 8)) & (
                (aw_word == (0x808 - BOARD_BASE) >> 2)
                | ((aw_word >= wr_first) & (aw_word < wr_first + 7)))
            return Mux(a[15], a[2:15] >= self.hostmem_words, ~ok_reg)

        sel = {w: Signal(name=f"rd_sel{w}") for w in words}     # one-hot register select
        sel_mac = [Signal(name=f"rd_sel_mac{p}") for p in range(2)]
        sel_wr = Signal()
        part = [Signal(32, name=f"rd_part{i}") for i in range(3)]   # the mux's groups
        rd_hit = Signal()                                # a register is at the read's word
        sh_q = Signal(32)                                # the WR_DATA copy's word, registered
        cases = [(sel_wr, sh_q)] + [(sel_mac[p], self.mac_rd_data[p]) for p in range(2)]
        for w, value in words.items():
            cases.append((sel[w] & cf.r_rdy if w in cpl_words else sel[w], value))
        with m.FSM():
            with m.State("IDLE"):
                with m.If(s.awvalid & s.wvalid):
                    m.d.comb += [s.awready.eq(1), s.wready.eq(1)]
                    m.d.sync += [addr.eq(s.awaddr), self.win_wdata.eq(s.wdata),
                                 w_bad.eq(bad_write(s.awaddr)),
                                 w_post.eq(~s.awaddr[15] & (s.awaddr[8:12] == BOARD_BASE >> 8)
                                           & (s.awaddr[2:8] == (0x808 - BOARD_BASE) >> 2))]
                    m.next = "WDEC"
                with m.Elif(s.arvalid):
                    m.d.comb += s.arready.eq(1)
                    m.d.sync += [addr.eq(s.araddr), self.mac_rd_addr.eq(s.araddr[2:5] - 2)]
                    m.next = "RDEC"
            with m.State("WDEC"):
                # SLVERR: decoded as the write was taken (w_bad), or a WR_POST while the
                # previous work request is not taken yet
                m.d.sync += s.bresp.eq(Mux(w_bad | (w_post & self.m_wr.valid), SLVERR, OKAY))
                with m.If(is_mem & ~w_bad):
                    m.d.sync += [self.win_addr.eq(mem_idx), self.win_we.eq(1)]
                    m.next = "MEM"
                with m.Else():
                    m.d.sync += s.bvalid.eq(1)
                    m.next = "B"
                with m.If(w_post & ~self.m_wr.valid):
                    m.d.sync += self.m_wr.valid.eq(1)
                with m.If(~is_mem & in_win):
                    with m.Switch(word):
                        for i in range(7):
                            with m.Case(wr_first + i):
                                m.d.sync += wr_words[i].eq(self.win_wdata)
                                m.d.comb += sh_w.en.eq(1)
            with m.State("RDEC"):
                m.d.sync += [s.rresp.eq(OKAY), s.rdata.eq(0)]
                with m.If(is_mem):
                    with m.If(mem_ok):
                        m.d.sync += [self.win_addr.eq(mem_idx), self.win_re.eq(1)]
                        m.next = "MEM"
                    with m.Else():
                        m.d.sync += [s.rresp.eq(SLVERR), s.rvalid.eq(1)]
                        m.next = "R"
                with m.Else():
                    m.d.sync += [sel[w].eq(in_win & (word == w)) for w in words]
                    m.d.sync += [sel_mac[p].eq(in_win & Cat(*(word == w for w in mac_rx[p])).any())
                                 for p in range(2)]
                    m.d.sync += sh_q.eq(sh_r.data)
                    wr_set = set(range(wr_first, wr_first + 7))
                    # "a register at this word": one 64-entry constant, indexed by the word
                    hit_set = set(words) | wr_set | mac_rx[0] | mac_rx[1]
                    hit_tab = Const(sum(1 << w for w in hit_set), 64)
                    m.d.sync += [sel_wr.eq(in_win & Cat(*(word == w for w in wr_set)).any()),
                                 rd_hit.eq(in_win & hit_tab.bit_select(word, 1))]
                    m.next = "RWAIT"
            with m.State("RWAIT"):
                # the MACs' counter words: loaded from the address held since RDEC
                with m.If(self.mac_rd_fresh.all()):
                    m.next = "RD1"
            with m.State("RD1"):
                # an AND-OR multiplexer (two data bits per LUT, then an OR4: two levels):
                # registered ORs of up to 8 cases, ORed in RD2; an unknown offset selects
                # nothing (0).  CPL_DATA0/1 select only while the FIFO holds a completion
                # (r_rdy of this cycle, the one the CPL_DATA1 pop sees)
                assert len(cases) <= 8 * len(part)
                m.d.sync += [p.eq(_and_or(cases[8 * i:8 * i + 8])) for i, p in enumerate(part)]
                m.d.comb += cf.r_en.eq(sel[(0x834 - BOARD_BASE) >> 2])   # CPL_DATA1 pops
                m.next = "RD2"
            with m.State("RD2"):
                m.d.sync += s.rdata.eq(part[0] | part[1] | part[2])
                with m.If(~rd_hit):
                    m.d.sync += s.rresp.eq(SLVERR)
                m.d.sync += s.rvalid.eq(1)
                m.next = "R"
            with m.State("MEM"):
                with m.If(self.win_done):
                    m.d.sync += [self.win_we.eq(0), self.win_re.eq(0)]
                    with m.If(self.win_we):
                        m.d.sync += s.bvalid.eq(1)
                        m.next = "B"
                    with m.Else():
                        m.d.sync += [s.rdata.eq(self.win_rdata), s.rvalid.eq(1)]
                        m.next = "R"
            with m.State("B"):
                with m.If(s.bready):
                    m.d.sync += s.bvalid.eq(0)
                    m.next = "IDLE"
            with m.State("R"):
                with m.If(s.rready):
                    m.d.sync += s.rvalid.eq(0)
                    m.next = "IDLE"
        return m


def _and_or(cases):
    """OR of ``value`` over the ``(select, value)`` pairs whose select is set (one-hot).

    The OR is a balanced tree (a linear chain would map to a LUT chain as deep as it is
    long): two terms per LUT, then OR4s, ``1 + ceil(log4(len(cases) / 2))`` LUT levels.
    """
    terms = [Mux(sel, value, 0) for sel, value in cases]
    while len(terms) > 1:
        terms = [terms[i] | terms[i + 1] if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0] if terms else Const(0, 32)


class NicBoardTop(wiring.Component):
    """Board top: two-plane NIC core, two RGMII MACs, block-RAM host memory, UART control port.

    A board file subclasses this and implements :meth:`clocking` (the ``sync`` and
    ``eth_tx`` domains, 125 MHz, and the PLL lock), :meth:`rgmii_pins` and the optional
    :meth:`leds` / :meth:`phy_reset`.

    Parameters
    ----------
    core : str
        ``"nic"``: :class:`mrcnic.rtl.nic.MRCNic` (ports=2).
    paths : int
        Path-table entries of the core's spray schedulers (default 32: two QPs with
        up to 16 EVs each; the Colorlight top defaults to 16 and one QP to fit the
        LFE5U-25F, see ``python -m mrcnic.boards.survey``).
    qps : int
        QP contexts.
    window : int
        Receive SACK window and sender-reliability slots per QP, in PSNs (default 128).
    hostmem_size : int
        Host memory in bytes (EBR; default 8 KiB = 4 DP16KD).
    baud : int
        UART bit rate (8N1) of the control port.
    clk_hz : int
        The ``sync`` (NIC) clock in Hz: 125 MHz (the RGMII TX clock itself) or a slower
        PLL output the board's :meth:`clocking` makes; sets the UART divisor,
        ``ID_CLOCK_MHZ`` and the sender reliability's ns time base.

    The top has no ports (pins come from the platform).
    """

    ports = 2

    def __init__(self, *, core: str = "nic", paths: int = 32, qps: int = 2,
                 hostmem_size: int = 8192, baud: int = 115200, clk_hz: int = 125_000_000,
                 window: int = 128):
        if core not in ("nic",):
            raise ValueError(f"core must be 'nic', not {core!r}")
        if paths not in (16, 32, 64, 128, 256):
            raise ValueError(f"paths must be 16..256 (power of two), not {paths}")
        self.core, self.paths, self.qps, self.window = core, paths, qps, window
        self.hostmem_size, self.baud, self.clk_hz = hostmem_size, baud, clk_hz
        self.regmap = build_regmap(ports=self.ports, clock_mhz=clk_hz // 1_000_000,
                                   window=window, regions=4, paths=paths, qps=qps)
        # the same map as the core's CSR bank (CsrNic builds it from the same arguments)
        super().__init__({})

    # ---- board hooks ---------------------------------------------------------------------------
    def clocking(self, m, platform):
        """Define ``sync`` (``clk_hz``) and ``eth_tx`` (125 MHz); return the PLL lock signal."""
        raise NotImplementedError

    def rgmii_pins(self, platform, n):
        """Pins of RGMII port ``n`` (``tx_clk, tx_ctl, tx_data, rx_clk, rx_ctl, rx_data``), ``dir='-'``."""
        raise NotImplementedError

    def uart_pins(self, m, platform):
        """The control UART: ``(tx, rx)`` signals behind ``io.Buffer``s of ``uart`` 0."""
        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_tx = tx = io.Buffer("o", uart.tx)
        m.submodules.uart_rx = rx = io.Buffer("i", uart.rx)
        return tx.o, rx.i

    def leds(self, m, platform):
        """LED output signals (list, may be empty): link 0, activity 0, link 1, activity 1, heartbeat."""
        return []

    def phy_reset(self, m, platform):
        """The PHYs' reset outputs (list of signals, 1 = in reset)."""
        return []

    @staticmethod
    def out_buffers(m, platform, name, numbers):
        """``io.Buffer("o")`` on resource ``name`` #n for each n; returns their ``o`` signals."""
        outs = []
        for n in numbers:
            buf = io.Buffer("o", platform.request(name, n, dir="-"))
            m.submodules[f"{name}_{n}"] = buf
            outs.append(buf.o)
        return outs

    # ---- the top ---------------------------------------------------------------------------------
    def make_core(self):
        """The NIC with its CSR bank (:class:`~mrcnic.rtl.csr_nic.CsrNic`, ``self.regmap``'s build).

        One receive parser serves both planes (``shared_parser``): the MACs hand over
        whole frames and two 1 Gb/s ports use a quarter of its beat rate.
        """
        return CsrNic(ports=self.ports, qps=self.qps, paths=self.paths, window=self.window,
                      clock_mhz=self.clk_hz // 1_000_000, regions=4, shared_parser=True,
                      clk_ns=round(1e9 / self.clk_hz))

    def elaborate(self, platform):
        m = Module()
        locked = self.clocking(m, platform)

        # ---- NIC core, MACs, PHY I/O -----------------------------------------------------------
        m.submodules.nic = nic = self.make_core()
        m.submodules.hostmem = hostmem = HostMemory(self.hostmem_size)
        wiring.connect(m, nic.m_axi, hostmem.s_axi)
        rx_present = []
        macs = []
        for i in range(self.ports):
            # clocking(): at 125 MHz eth_tx is the sync clock; a slower NIC clock crosses
            # into eth_tx through the MAC's asynchronous FIFO
            mac = EthMac(tx_domain="eth_tx", rx_domain=f"eth{i}_rx",
                         tx_same_clock=self.clk_hz == 125_000_000)
            m.submodules[f"mac{i}"] = mac
            macs.append(mac)
            if platform is not None:
                pio = RgmiiDdrIo(self.rgmii_pins(platform, i), tx_domain="eth_tx",
                                 rx_domain=f"eth{i}_rx")
                m.submodules[f"rgmii{i}"] = pio
                wiring.connect(m, mac.rgmii, pio.rgmii)
                rxc = Signal(name=f"eth{i}_rxc")
                m.d.comb += rxc.eq(pio.rxc)
                platform.add_clock_constraint(rxc, 125e6)
            else:
                rxc = Signal(name=f"eth{i}_rxc")
                m.d.comb += [mac.rgmii.rxd.eq(0), mac.rgmii.rx_ctl.eq(0)]
            m.domains += ClockDomain(f"eth{i}_rx")
            m.d.comb += ClockSignal(f"eth{i}_rx").eq(rxc)
            m.submodules[f"eth{i}_rx_rst"] = ResetSynchronizer(ResetSignal("sync"),
                                                               domain=f"eth{i}_rx")
            # RX clock present: a toggle in the RX domain, seen changing in sync
            tog = Signal(name=f"eth{i}_rx_toggle")
            cnt = Signal(4, name=f"eth{i}_rx_div")
            m.d[f"eth{i}_rx"] += cnt.eq(cnt + 1)
            m.d[f"eth{i}_rx"] += tog.eq(tog ^ (cnt == 0))
            tog_s = Signal(name=f"eth{i}_rx_toggle_s")
            m.submodules[f"eth{i}_rx_tog_sync"] = FFSynchronizer(tog, tog_s)
            tog_d, seen, watchdog = Signal(), Signal(), Signal(10)
            m.d.sync += [tog_d.eq(tog_s), watchdog.eq(watchdog + 1)]
            with m.If(tog_s != tog_d):
                m.d.sync += [seen.eq(1), watchdog.eq(0)]
            with m.Elif(watchdog == 1023):
                m.d.sync += seen.eq(0)
            rx_present.append(seen)

            wiring.connect(m, getattr(nic, f"m_axis_p{i}"), mac.s_axis)   # PORT_ADMIN-gated
            wiring.connect(m, mac.m_axis, getattr(nic, f"s_axis_p{i}"))

        # ---- control port: UART -> AXI4-Lite -> CSR bank | board registers --------------------
        m.submodules.uart = bridge = UartAxilBridge(clk_hz=self.clk_hz, baud=self.baud)
        if platform is not None:
            tx, rx = self.uart_pins(m, platform)
            m.d.comb += [bridge.rx.eq(rx), tx.eq(bridge.tx)]
        m.submodules.axil_split = split = AxilSplit()
        wiring.connect(m, bridge.m_axil, split.s_axil)
        wiring.connect(m, split.m0_axil, nic.s_axil)
        m.submodules.board_regs = regs = BoardRegs(self.hostmem_size // 4)
        wiring.connect(m, split.m1_axil, regs.s_axil)
        m.d.comb += [hostmem.win_addr.eq(regs.win_addr), hostmem.win_we.eq(regs.win_we),
                     hostmem.win_re.eq(regs.win_re), hostmem.win_wdata.eq(regs.win_wdata),
                     regs.win_rdata.eq(hostmem.win_rdata), regs.win_done.eq(hostmem.win_done)]
        wiring.connect(m, regs.m_wr, nic.s_wr)
        wiring.connect(m, nic.recv_cpl, regs.s_cpl)
        m.d.comb += nic.send_cpl.ready.eq(1)
        # TX counters from the MACs' flip-flops; RX counters read from their counter RAM
        for p, mac in enumerate(macs):
            m.d.comb += [regs.tx_counters[2 * p].eq(mac.tx_frames),
                         regs.tx_counters[2 * p + 1].eq(mac.tx_oversize),
                         mac.rx_cnt_addr.eq(regs.mac_rd_addr),
                         regs.mac_rd_data[p].eq(mac.rx_cnt_data),
                         regs.mac_rd_fresh[p].eq(mac.rx_cnt_fresh)]
        # data_frames / ack_frames are sums over the planes: registered here, so their adders
        # stay out of BoardRegs' read multiplexer cycle (they read as of the previous cycle)
        m.d.sync += [regs.nic_stats[0].eq(nic.data_frames), regs.nic_stats[1].eq(nic.ack_frames)]
        m.d.comb += [
            regs.nic_stats[2].eq(nic.acks_received), regs.nic_stats[3].eq(nic.placed_bytes),
            regs.nic_stats[4].eq(nic.no_path),
            regs.status.eq(Cat(locked, *rx_present)),
        ]

 
        # ---- LEDs and PHY reset ----------------------------------------------------------------
        if platform is not None:
            leds = self.leds(m, platform)
            act = []
            for p, mac in enumerate(macs):
                # a frame counter moved <=> its bit 0 toggled (each counts at most one per
                # cycle); the LED stays on for 2**24 cycles after it, until the down-count
                # passes 0 (bit 24 set: no wide compare)
                last = Signal(2)
                stretch = Signal(25, init=1 << 24)
                now = Cat(mac.tx_frames[0], mac.rx_frames[0])
                m.d.sync += last.eq(now)
                with m.If(now != last):
                    m.d.sync += stretch.eq((1 << 24) - 1)
                with m.Elif(~stretch[24]):
                    m.d.sync += stretch.eq(stretch - 1)
                act.append(~stretch[24])
            beat = Signal(27)
            m.d.sync += beat.eq(beat + 1)
            values = [rx_present[0], act[0], rx_present[1], act[1], beat[-1]]
            for led, value in zip(leds, values):
                m.d.comb += led.eq(value)
            # PHY reset: held for 2**21 cycles (~17 ms at 125 MHz) after configuration
            rst_cnt = Signal(22)
            with m.If(~rst_cnt[-1]):
                m.d.sync += rst_cnt.eq(rst_cnt + 1)
            for r in self.phy_reset(m, platform):
                m.d.comb += r.eq(~rst_cnt[-1])
        return m
