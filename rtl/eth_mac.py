"""Ethernet MAC for one RGMII gigabit PHY: :class:`EthMacTx` + :class:`EthMacRx` + RGMII halves.

One instance per plane.  The NIC side is 64-bit AXI-Stream in the ``sync`` domain; the PHY
side is RGMII as DDR halves (:class:`mrcnic.rtl.rgmii.RgmiiDdrSignature`), which a board
top connects to :class:`mrcnic.rtl.rgmii.RgmiiDdrIo` (``io.DDRBuffer``: ``ODDRX1F`` /
``IDDRX1F`` on ECP5) and a simulation testbench to its own DDR model::

    m.submodules.mac0 = mac = EthMac(tx_domain="eth0_tx", rx_domain="eth0_rx")
    m.submodules.io0 = pio = RgmiiDdrIo(platform.request("eth_rgmii", 0, dir="-"),
                                        tx_domain="eth0_tx", rx_domain="eth0_rx")
    wiring.connect(m, mac.rgmii, pio.rgmii)
    m.domains.eth0_rx = ClockDomain()                       # RXC from the PHY
    m.d.comb += ClockSignal("eth0_rx").eq(pio.rxc)
    m.submodules.eth0_rx_rst = ResetSynchronizer(ResetSignal("sync"), domain="eth0_rx")

``eth0_tx`` is a 125 MHz PLL output.  ``sync`` may be the same clock: the FIFOs do not mind,
and with ``tx_same_clock=True`` (the board tops, whose ``sync`` and ``eth_tx`` are one PLL
output) the TX side hands beats over through a register instead of an AsyncFIFO.
1000 Mb/s only.  Source: IEEE 802.3 clauses 3, 4 and 35; RGMII v2.0.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axis import AxiStreamSignature
from .eth_mac_rx import EthMacRx
from .eth_mac_tx import EthMacTx
from .rgmii import RgmiiDdrSignature, RgmiiGmii

__all__ = ["EthMac"]


class EthMac(wiring.Component):
    """Gigabit Ethernet MAC with RGMII DDR halves and 64-bit AXI-Stream NIC ports.

    Parameters
    ----------
    max_frame : int
        Largest frame in bytes including the FCS, both directions (1518; jumbo up to 16384).
        RX drops longer frames as giants; TX sends them truncated with a bad FCS.
    rx_buffer_frames : int
        RX store-and-forward buffer in maximum-size frames (see :class:`EthMacRx`).
    tx_domain, rx_domain : str
        The 125 MHz RGMII TX clock domain and the PHY's RX clock domain.
    tx_same_clock : bool
        ``tx_domain`` is driven by the very same clock as ``sync`` (only its reset may
        differ): no clock-domain crossing on the TX side (see :class:`EthMacTx`).

    Ports
    -----
    s_axis : In(AxiStreamSignature(64)), ``sync``
        Frames to send, without FCS (lane 0 first); see :class:`EthMacTx`.
    m_axis : Out(AxiStreamSignature(64)), ``sync``
        Good received frames, FCS stripped; see :class:`EthMacRx`.
    rgmii : Out(RgmiiDdrSignature())
        TXD/TX_CTL halves (``tx_domain``), RXD/RX_CTL halves (``rx_domain``).
    tx_frames, tx_oversize, rx_frames, rx_bad_fcs, rx_runt, rx_giant, rx_fifo_overflow : Out(32)
        Frame counters in ``sync`` (wrap at 2**32); see :class:`EthMacTx` / :class:`EthMacRx`.
    rx_cnt_addr : In(3), rx_cnt_data : Out(32), rx_cnt_fresh : Out(1)
        The RX counters read from their RAM copy (:class:`EthMacRx` ``cnt_*``); a user of
        this port alone leaves the five RX counter flip-flop ports unconnected.
    """

    def __init__(self, *, max_frame: int = 1518, rx_buffer_frames: int = 1,
                 tx_domain: str = "rgmii_tx", rx_domain: str = "rgmii_rx",
                 tx_same_clock: bool = False):
        if not 64 <= max_frame <= 16384:
            raise ValueError(f"max_frame must be in 64..16384 bytes, not {max_frame}")
        if not isinstance(rx_buffer_frames, int) or rx_buffer_frames < 1:
            raise ValueError(f"rx_buffer_frames must be a positive integer, "
                             f"not {rx_buffer_frames!r}")
        for name in (tx_domain, rx_domain):
            if not isinstance(name, str) or name == "sync":
                raise ValueError(f"tx_domain/rx_domain must be domain names other than 'sync', "
                                 f"not {name!r}")
        if tx_domain == rx_domain:
            raise ValueError("tx_domain and rx_domain must differ (RXC is the PHY's clock)")
        if not isinstance(tx_same_clock, bool):
            raise ValueError(f"tx_same_clock must be a bool, not {tx_same_clock!r}")
        self.tx_same_clock = tx_same_clock
        self.max_frame, self.rx_buffer_frames = max_frame, rx_buffer_frames
        self.tx_domain, self.rx_domain = tx_domain, rx_domain
        super().__init__({
            "s_axis": In(AxiStreamSignature(64)),
            "m_axis": Out(AxiStreamSignature(64)),
            "rgmii": Out(RgmiiDdrSignature()),
            "tx_frames": Out(32),
            "tx_oversize": Out(32),
            "rx_frames": Out(32),
            "rx_bad_fcs": Out(32),
            "rx_runt": Out(32),
            "rx_giant": Out(32),
            "rx_fifo_overflow": Out(32),
            "rx_cnt_addr": In(3),
            "rx_cnt_data": Out(32),
            "rx_cnt_fresh": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx = tx = EthMacTx(max_frame=self.max_frame, tx_domain=self.tx_domain,
                                        same_clock=self.tx_same_clock)
        m.submodules.rx = rx = EthMacRx(max_frame=self.max_frame,
                                        buffer_frames=self.rx_buffer_frames,
                                        rx_domain=self.rx_domain)
        m.submodules.rgmii = phy = RgmiiGmii()
        wiring.connect(m, wiring.flipped(self.s_axis), tx.s_axis)
        wiring.connect(m, rx.m_axis, wiring.flipped(self.m_axis))
        wiring.connect(m, phy.rgmii, wiring.flipped(self.rgmii))
        m.d.comb += [
            phy.gmii_txd.eq(tx.txd),
            phy.gmii_tx_en.eq(tx.tx_en),
            phy.gmii_tx_er.eq(tx.tx_er),
            rx.rxd.eq(phy.gmii_rxd),
            rx.rx_dv.eq(phy.gmii_rx_dv),
            rx.rx_er.eq(phy.gmii_rx_er),
        ]
        for name in ("tx_frames", "tx_oversize"):
            m.d.comb += getattr(self, name).eq(getattr(tx, name))
        for name in ("rx_frames", "rx_bad_fcs", "rx_runt", "rx_giant", "rx_fifo_overflow"):
            m.d.comb += getattr(self, name).eq(getattr(rx, name))
        m.d.comb += [rx.cnt_addr.eq(self.rx_cnt_addr), self.rx_cnt_data.eq(rx.cnt_data),
                     self.rx_cnt_fresh.eq(rx.cnt_fresh)]
        return m
