"""UART-to-AXI4-Lite bridge: the board's control-plane port (``mrcnic fw --target uart:...``).

A host speaks the framed protocol of ``docs/uart-protocol.md`` over an 8N1 UART;
the bridge checks every frame (sync byte, command, length, CRC-8) and only then
turns it into AXI4-Lite transactions on ``m_axil`` (normally wired to the CSR bank,
:class:`mrcnic.rtl.csr.CsrBank`).  The Python side of the same protocol is
``mrcnic.fw.uart`` (codec + pyserial transport); the TCP transport of a simulation
(``mrcnic.fw.tcp``) carries the very same frames.

The UART receiver and transmitter are small 8N1 blocks of this file
(:class:`UartRx`, :class:`UartTx`): Amaranth 0.5 has no UART in its library and
amaranth-stdio is not released.  They exist only to serve the bridge.
"""

import math

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import crc, stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from .axi import Axi4LiteSignature

__all__ = ["UartRx", "UartTx", "UartAxilBridge", "SYNC_REQUEST", "SYNC_RESPONSE",
           "CMD_READ", "CMD_WRITE", "STATUS_OK", "STATUS_SLVERR", "STATUS_DECERR",
           "STATUS_BAD_FRAME", "STATUS_BAD_CHECKSUM", "CRC8", "MAX_BURST"]

SYNC_REQUEST = 0xA5        #: first byte of a request frame
SYNC_RESPONSE = 0x5A       #: first byte of a response frame
CMD_READ = 0x01            #: read LEN words from ADDR, ADDR+4, ... (LEN = 1: read32)
CMD_WRITE = 0x02           #: write32 (LEN must be 1)
STATUS_OK = 0x00           #: AXI OKAY
STATUS_SLVERR = 0x02       #: AXI SLVERR (e.g. an unmapped CSR address)
STATUS_DECERR = 0x03       #: AXI DECERR
STATUS_BAD_FRAME = 0x10    #: unknown command or illegal LEN; nothing done
STATUS_BAD_CHECKSUM = 0x11 #: CRC-8 mismatch; nothing done
MAX_BURST = 255            #: largest LEN of a READ
#: CRC-8/SMBUS (poly 0x07, init 0, no reflection, no final XOR), check value 0xF4
CRC8 = crc.catalog.CRC8_SMBUS(data_width=8)


def _divisor(clk_hz, baud):
    if not (isinstance(clk_hz, (int, float)) and clk_hz > 0):
        raise ValueError(f"clk_hz must be a positive number, not {clk_hz!r}")
    if not (isinstance(baud, (int, float)) and baud > 0):
        raise ValueError(f"baud must be a positive number, not {baud!r}")
    div = round(clk_hz / baud)
    if div < 8:
        raise ValueError(f"baud {baud} is too fast for a {clk_hz} Hz clock: a bit must last at "
                         f"least 8 cycles (it would last {clk_hz / baud:.2f})")
    err = abs(clk_hz / div - baud) / baud
    if err > 0.02:
        raise ValueError(f"baud {baud} is {err:.1%} off with a {clk_hz} Hz clock (divisor {div}); "
                         "8N1 needs an error below 2%")
    return div


class UartRx(wiring.Component):
    """8N1 UART receiver (LSB first, one start bit, 8 data bits, one stop bit).

    The line is synchronised by two flip-flops; a start bit is confirmed at its
    middle (a shorter low glitch is ignored), every data bit and the stop bit are
    sampled at their middle.  The receiver is back in its idle state at the middle
    of the stop bit, so back-to-back bytes are received at full rate.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit (>= 8), ``round(clk_hz / baud)``.

    Attributes
    ----------
    rx : In(1)
        Serial input, idle high.
    data : Out(stream.Signature(8, always_ready=True))
        One ``valid`` pulse per received byte (no backpressure: the consumer must
        take it in that cycle).  Latency: the middle of the stop bit (+2 cycles
        of synchroniser) after the byte's start edge.
    framing_error : Out(1)
        One-cycle pulse when a stop bit reads 0 (the byte is dropped; the
        receiver then waits for the line to go high again, so a break is one error).
    """

    def __init__(self, divisor: int):
        if not (isinstance(divisor, int) and divisor >= 8):
            raise ValueError(f"divisor must be an int >= 8 cycles per bit, not {divisor!r}")
        self.divisor = divisor
        super().__init__({
            "rx": In(1, init=1),
            "data": Out(stream.Signature(8, always_ready=True)),
            "framing_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        div = self.divisor
        line = Signal(init=1)
        m.submodules.sync_rx = FFSynchronizer(self.rx, line, init=1)
        count = Signal(range(div))
        bits = Signal(range(8))
        shreg = Signal(8)
        m.d.sync += [self.data.valid.eq(0), self.framing_error.eq(0)]
        m.d.comb += self.data.payload.eq(shreg)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~line):
                    m.d.sync += count.eq(div // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(count == 0):
                    with m.If(~line):
                        m.d.sync += [count.eq(div - 1), bits.eq(0)]
                        m.next = "DATA"
                    with m.Else():
                        m.next = "IDLE"                     # glitch, not a start bit
                with m.Else():
                    m.d.sync += count.eq(count - 1)
            with m.State("DATA"):
                with m.If(count == 0):
                    m.d.sync += [shreg.eq(Cat(shreg[1:], line)), count.eq(div - 1),
                                 bits.eq(bits + 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
                with m.Else():
                    m.d.sync += count.eq(count - 1)
            with m.State("STOP"):
                with m.If(count == 0):
                    with m.If(line):
                        m.d.sync += self.data.valid.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += self.framing_error.eq(1)
                        m.next = "BREAK"
                with m.Else():
                    m.d.sync += count.eq(count - 1)
            with m.State("BREAK"):
                with m.If(line):
                    m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """8N1 UART transmitter.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit (>= 8).

    Attributes
    ----------
    data : In(stream.Signature(8))
        Bytes to send; ``ready`` is high while the transmitter is idle, a byte
        is taken at ``valid & ready`` and occupies the line for 10 bit times.
    tx : Out(1)
        Serial output (registered), idle high.
    """

    def __init__(self, divisor: int):
        if not (isinstance(divisor, int) and divisor >= 8):
            raise ValueError(f"divisor must be an int >= 8 cycles per bit, not {divisor!r}")
        self.divisor = divisor
        super().__init__({"data": In(stream.Signature(8)), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        div = self.divisor
        busy = Signal()
        shreg = Signal(9)
        bits = Signal(range(10))
        count = Signal(range(div))
        m.d.comb += self.data.ready.eq(~busy)
        with m.If(~busy):
            with m.If(self.data.valid):
                m.d.sync += [busy.eq(1), self.tx.eq(0), shreg.eq(Cat(self.data.payload, 1)),
                             bits.eq(9), count.eq(div - 1)]
        with m.Elif(count == 0):
            m.d.sync += count.eq(div - 1)
            with m.If(bits == 0):
                m.d.sync += busy.eq(0)
            with m.Else():
                m.d.sync += [self.tx.eq(shreg[0]), shreg.eq(shreg[1:]), bits.eq(bits - 1)]
        with m.Else():
            m.d.sync += count.eq(count - 1)
        return m


class UartAxilBridge(wiring.Component):
    """UART (8N1) framed-protocol to AXI4-Lite manager bridge (``docs/uart-protocol.md``).

    Request ``A5 TAG CMD LEN ADDR[2] (DATA[4]) CRC``, response
    ``5A TAG CMD LEN DATA[4*LEN] STATUS CRC`` (multi-byte fields little endian,
    CRC-8/SMBUS over every byte after the sync byte).  ``CMD`` 0x01 reads ``LEN``
    (1..255) words at ``ADDR``, ``ADDR+4``, ... (one AXI4-Lite read each; after an
    error the remaining words are not read and are sent as 0); 0x02 writes one
    word (``LEN`` = 1).  ``STATUS`` is the AXI response (OKAY 0, SLVERR 2,
    DECERR 3) or BAD_FRAME (0x10) / BAD_CHECKSUM (0x11).

    Never half-applied: the AXI4-Lite write is issued only after the whole frame,
    CRC included, has been received and checked.  A bad CRC is answered
    BAD_CHECKSUM, an unknown command or illegal ``LEN`` is answered BAD_FRAME
    once the line has been quiet for 40 bit times (the rest of the bad frame is
    discarded); neither touches the bus.  A frame that stops arriving (no byte
    for ``timeout_us``) is dropped silently and the receiver hunts for the next
    sync byte.  Bytes arriving while a request is executed or answered are
    ignored: the host keeps one request outstanding.  Every drop is counted.

    The AXI4-Lite subordinate must answer every transaction (the CSR bank does);
    AW and W are presented together; ``awvalid``/``wvalid``/``arvalid`` come from
    flip-flops, ``bready``/``rready`` are always high.  Response bytes pass through a
    one-byte transmit register in front of the UART transmitter.

    Parameters
    ----------
    clk_hz : int
        ``sync`` clock frequency, Hz.
    baud : int
        UART bit rate (default 115200); ``clk_hz / baud`` must be >= 8 cycles
        and within 2% of an integer.
    timeout_us : float
        A partial frame is dropped after this many microseconds without a byte
        (default 10000 = 10 ms, generous for USB-UART adapters).

    Attributes
    ----------
    rx : In(1)
        UART receive line (from the host), idle high; asynchronous (synchronised inside).
    tx : Out(1)
        UART transmit line (to the host), idle high.
    m_axil : Out(Axi4LiteSignature(16, 32))
        AXI4-Lite manager (Verilog ``m_axil__awaddr`` ...), one transaction at a time.
    frames : Out(16)
        Requests executed (wraps).
    bad_frames : Out(16)
        Requests answered BAD_FRAME (wraps).
    bad_checksums : Out(16)
        Requests answered BAD_CHECKSUM (wraps).
    timeouts : Out(16)
        Partial frames dropped by the timeout (wraps).
    rx_errors : Out(16)
        UART framing errors (stop bit 0; the byte is dropped) (wraps).
    """

    def __init__(self, clk_hz: int, baud: int = 115200, timeout_us: float = 10_000):
        self.divisor = _divisor(clk_hz, baud)
        if not (isinstance(timeout_us, (int, float)) and timeout_us > 0):
            raise ValueError(f"timeout_us must be a positive number, not {timeout_us!r}")
        self.timeout_cycles = math.ceil(clk_hz * timeout_us / 1e6)
        self.drain_cycles = 40 * self.divisor
        if self.timeout_cycles < 20 * self.divisor:
            raise ValueError(f"timeout_us {timeout_us} is shorter than two byte times at {baud} baud")
        if self.timeout_cycles >= 1 << 32:
            raise ValueError(f"timeout_us {timeout_us} is too long (over 2**32 cycles)")
        self.clk_hz, self.baud, self.timeout_us = clk_hz, baud, timeout_us
        super().__init__({
            "rx": In(1, init=1),
            "tx": Out(1, init=1),
            "m_axil": Out(Axi4LiteSignature(16, 32)),
            "frames": Out(16),
            "bad_frames": Out(16),
            "bad_checksums": Out(16),
            "timeouts": Out(16),
            "rx_errors": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        axil = self.m_axil
        m.submodules.uart_rx = urx = UartRx(self.divisor)
        m.submodules.uart_tx = utx = UartTx(self.divisor)
        # one CRC-8 for both directions (a request is received, checked, then answered):
        # a received byte is fed as it arrives while a frame is being received (``rx_en``, a
        # flip-flop), a sent byte the cycle after it was loaded into the transmit register.
        # The CRC's data, valid and start come from flip-flops (``crc_d``/``crc_v``/``crc_s``,
        # one cycle after the decision; the order of starts and bytes is kept): the CRC
        # matrix is not behind the state decode.  The CRC byte is loaded once no byte is on
        # its way into the CRC, so it covers STATUS.
        m.submodules.crc = crc_u = CRC8.create()
        rx_en = Signal()                # receiving a frame: received bytes go into the CRC
        tx_byte = Signal(8)
        tx_feed = Signal()
        crc_start = Signal()            # (comb) restart the CRC
        crc_d, crc_v, crc_s = Signal(8), Signal(), Signal()
        m.d.sync += tx_feed.eq(0)
        byte, got = urx.data.payload, urx.data.valid
        m.d.sync += [crc_d.eq(Mux(tx_feed, tx_byte, byte)), crc_v.eq((got & rx_en) | tx_feed),
                     crc_s.eq(crc_start)]
        m.d.comb += [crc_u.data.eq(crc_d), crc_u.valid.eq(crc_v), crc_u.start.eq(crc_s)]
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx)]

        # the transmit register: UartTx sees a flip-flop valid and byte (the state
        # machine's byte multiplexer and its ``sent`` decisions stay out of each other's way)
        txq_valid, txq_byte = Signal(), Signal(8)
        m.d.comb += [utx.data.valid.eq(txq_valid), utx.data.payload.eq(txq_byte)]
        with m.If(utx.data.ready):
            m.d.sync += txq_valid.eq(0)
        tx_free = ~txq_valid

        with m.If(urx.framing_error):
            m.d.sync += self.rx_errors.eq(self.rx_errors + 1)

        # cycles since the last received byte, and whether it reached the timeout / the
        # drain time (registered flags, set as the count passes them: equality compares
        # only); the count stops once both are reached
        idle_max = max(self.timeout_cycles, self.drain_cycles)
        idle = Signal(range(idle_max + 1))
        timed_out = Signal()            # idle >= timeout_cycles
        drained = Signal()              # idle >= drain_cycles
        with m.If(got):
            m.d.sync += [idle.eq(0), timed_out.eq(0), drained.eq(0)]
        with m.Elif(~(timed_out & drained)):
            m.d.sync += idle.eq(idle + 1)
            with m.If(idle == self.timeout_cycles - 1):
                m.d.sync += timed_out.eq(1)
            with m.If(idle == self.drain_cycles - 1):
                m.d.sync += drained.eq(1)

        tag, cmd, length = Signal(8), Signal(8), Signal(8)
        addr, wdata, rdata = Signal(16), Signal(32), Signal(32)
        status, len_out = Signal(8), Signal(8)
        nbyte = Signal(2)               # byte of the current data word
        left = Signal(8)                # data words still to send
        is_wr_cmd = Signal()            # cmd == CMD_WRITE (registered with cmd)
        last_word = Signal()            # left == 1 (registered)

        # AXI4-Lite manager: valids from flip-flops (set when the state machine issues,
        # cleared by the handshake), bready / rready always high (one transaction at a time)
        awv, wv, arv = Signal(), Signal(), Signal()
        m.d.comb += [axil.awaddr.eq(addr), axil.araddr.eq(addr), axil.wdata.eq(wdata),
                     axil.wstrb.eq(0b1111), axil.awprot.eq(0), axil.arprot.eq(0),
                     axil.awvalid.eq(awv), axil.wvalid.eq(wv), axil.arvalid.eq(arv),
                     axil.bready.eq(1), axil.rready.eq(1)]
        with m.If(axil.awready):
            m.d.sync += awv.eq(0)
        with m.If(axil.wready):
            m.d.sync += wv.eq(0)
        with m.If(axil.arready):
            m.d.sync += arv.eq(0)

        # comparisons of the received byte, registered: UartRx completes its byte a bit
        # time (>= 8 cycles) before the byte's valid pulse (the middle of the stop bit),
        # and the CRC is unchanged since the previous byte, so the flags are current then
        is_sync, is_read, is_write, is_zero, crc_ok = (Signal(name=n) for n in (
            "is_sync", "is_read", "is_write", "is_zero", "crc_ok"))
        m.d.sync += [is_sync.eq(byte == SYNC_REQUEST), is_read.eq(byte == CMD_READ),
                     is_write.eq(byte == CMD_WRITE), is_zero.eq(byte == 0),
                     crc_ok.eq(byte == crc_u.crc)]

        def take(next_state):
            """Receive one byte of the frame (into the CRC) and move on; or time out."""
            with m.If(got):
                m.next = next_state
            with m.Elif(timed_out):
                m.d.sync += self.timeouts.eq(self.timeouts + 1)
                m.next = "HUNT"

        def send(value, next_state, feed=True):
            """Load ``value`` into the transmit register when it is free (into the CRC the
            cycle after, unless not ``feed``) and move on; returns the load condition."""
            with m.If(tx_free):
                m.d.sync += [txq_valid.eq(1), txq_byte.eq(value)]
                if feed:
                    m.d.sync += [tx_feed.eq(1), tx_byte.eq(value)]
                m.next = next_state
            return tx_free

        with m.FSM():
            with m.State("HUNT"):
                m.d.sync += rx_en.eq(0)
                with m.If(got & is_sync):
                    m.d.comb += crc_start.eq(1)
                    m.d.sync += rx_en.eq(1)
                    m.next = "TAG"
            with m.State("TAG"):
                take("CMD")
                with m.If(got):
                    m.d.sync += tag.eq(byte)
            with m.State("CMD"):
                take("LEN")
                with m.If(got):
                    m.d.sync += [cmd.eq(byte), is_wr_cmd.eq(is_write)]
                    with m.If(~is_read & ~is_write):
                        m.next = "DRAIN"
            with m.State("LEN"):
                take("ADDR0")
                with m.If(got):
                    m.d.sync += length.eq(byte)
                    with m.If(Mux(is_wr_cmd, ~is_read, is_zero)):    # LEN 1 / >= 1
                        m.next = "DRAIN"
            with m.State("ADDR0"):
                take("ADDR1")
                with m.If(got):
                    m.d.sync += addr[:8].eq(byte)
            with m.State("ADDR1"):
                take("CHECK")
                with m.If(got):
                    m.d.sync += [addr[8:].eq(byte), nbyte.eq(0)]
                    with m.If(is_wr_cmd):
                        m.next = "DATA"
            with m.State("DATA"):
                take("DATA")
                with m.If(got):
                    m.d.sync += [wdata.eq(Cat(wdata[8:], byte)), nbyte.eq(nbyte + 1)]
                    with m.If(nbyte == 3):
                        m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += rx_en.eq(0)         # the CRC byte itself is compared, not fed
                with m.If(got):
                    m.d.sync += [left.eq(length), last_word.eq(length == 1), nbyte.eq(0),
                                 status.eq(STATUS_OK), len_out.eq(0)]
                    with m.If(~crc_ok):
                        m.d.sync += [status.eq(STATUS_BAD_CHECKSUM),
                                     self.bad_checksums.eq(self.bad_checksums + 1)]
                        m.next = "T_SYNC"
                    with m.Else():
                        m.d.sync += self.frames.eq(self.frames + 1)
                        with m.If(is_wr_cmd):
                            m.d.sync += [awv.eq(1), wv.eq(1)]
                            m.next = "AXI_W"
                        with m.Else():
                            m.d.sync += len_out.eq(length)
                            m.next = "T_SYNC"
                with m.Elif(timed_out):
                    m.d.sync += self.timeouts.eq(self.timeouts + 1)
                    m.next = "HUNT"
            with m.State("DRAIN"):
                # discard the rest of a malformed frame, answer once the line is quiet
                m.d.sync += rx_en.eq(0)
                with m.If(~got & (drained)):
                    m.d.sync += [status.eq(STATUS_BAD_FRAME), len_out.eq(0),
                                 self.bad_frames.eq(self.bad_frames + 1)]
                    m.next = "T_SYNC"
            with m.State("AXI_W"):
                # the response comes after both AW and W were taken
                with m.If(axil.bvalid):
                    m.d.sync += status.eq(axil.bresp)
                    m.next = "T_SYNC"
            with m.State("T_SYNC"):
                m.d.comb += crc_start.eq(1)
                send(SYNC_RESPONSE, "T_TAG", feed=False)
            with m.State("T_TAG"):
                send(tag, "T_CMD")
            with m.State("T_CMD"):
                send(cmd, "T_LEN")
            with m.State("T_LEN"):
                with m.If(send(len_out, "T_STATUS") & (len_out != 0)):
                    m.next = "AXI_AR"
            with m.State("AXI_AR"):
                with m.If(status != STATUS_OK):
                    m.d.sync += rdata.eq(0)              # after an error: no read, send 0
                    m.next = "T_DATA"
                with m.Else():
                    m.d.sync += arv.eq(1)
                    m.next = "AXI_R"
            with m.State("AXI_R"):
                with m.If(axil.rvalid):
                    m.d.sync += [rdata.eq(Mux(axil.rresp == 0, axil.rdata, 0)),
                                 status.eq(axil.rresp)]
                    m.next = "T_DATA"
            with m.State("T_DATA"):
                with m.If(send(rdata.word_select(nbyte, 8), "T_DATA")):
                    m.d.sync += nbyte.eq(nbyte + 1)
                    with m.If(nbyte == 3):
                        m.d.sync += [left.eq(left - 1), last_word.eq(left == 2),
                                     addr.eq(addr + 4)]
                        with m.If(last_word):
                            m.next = "T_STATUS"
                        with m.Else():
                            m.next = "AXI_AR"
            with m.State("T_STATUS"):
                send(status, "T_CRC")
            with m.State("T_CRC"):
                # STATUS is in the CRC once neither its feed nor the CRC's input register
                # holds a byte
                with m.If(~tx_feed & ~crc_v):
                    send(crc_u.crc, "HUNT", feed=False)
        return m
