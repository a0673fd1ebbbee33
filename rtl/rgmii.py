"""RGMII <-> GMII at 1000 Mb/s: the DDR-half adapter and its ECP5 / platform I/O buffers.

RGMII (Reduced Gigabit Media Independent Interface, v2.0) carries a GMII byte on 4 data
wires and one control wire, clocked on both edges of a 125 MHz clock: bits 3:0 and
TX_EN (RX_DV) on the rising edge, bits 7:4 and TX_EN xor TX_ER (RX_DV xor RX_ER) on the
falling edge.

The double-data-rate registers are platform primitives (ECP5: ``IDDRX1F`` /
``ODDRX1F``) that :class:`amaranth.lib.io.DDRBuffer` only elaborates on a vendor platform
(not in simulation, not in plain Verilog for Icarus).  The block is therefore split in two:

* :class:`RgmiiGmii` — pure logic, simulatable: GMII on one side, the rising/falling-edge
  halves (the ``i``/``o`` members of a ``DDRBuffer``) on the other
  (:class:`RgmiiDdrSignature`);
* :class:`RgmiiDdrIo` — the thin platform wrapper: ``io.DDRBuffer`` for TXD/TX_CTL/TXC
  and RXD/RX_CTL plus the RX clock domain from the RXC pin, built from the pins of
  ``platform.request("eth_rgmii", n, dir="-")`` (amaranth-boards resource names).

Testbenches model the DDR registers themselves (see ``tests/rtl/test_eth_mac.py``).
Only 1000 Mb/s is supported (10/100 Mb/s RGMII uses SDR nibbles and a 2.5/25 MHz clock).

Clock/data skew (RGMII 2.0 "RGMII-ID"): TXC leaves through its own ``DDRBuffer`` in
``txc_domain``; give it a 90-degree-shifted 125 MHz clock from the PLL when the PHY does
not delay TXC itself, or the TX domain when it does.  RX data is sampled with RXC as
received: the PHY must delay RXC (its internal RX delay) or the board adds input delays.
"""

from amaranth.hdl import Module
from amaranth.lib import data, io, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RgmiiDdrSignature", "RgmiiGmii", "RgmiiDdrIo"]


class RgmiiDdrSignature(wiring.Signature):
    """The DDR halves of RGMII, seen from the MAC (flip for the I/O side).

    Members (``[0]`` = rising-edge half, ``[1]`` = falling-edge half, as in ``DDRBuffer``):
    ``txd`` Out(ArrayLayout(4, 2)), ``tx_ctl`` Out(ArrayLayout(1, 2)) in the TX domain;
    ``rxd`` In(ArrayLayout(4, 2)), ``rx_ctl`` In(ArrayLayout(1, 2)) in the RX domain
    (both halves of one RXC period presented together, rising half = bits 3:0).
    In Verilog ``txd`` is one 8-bit vector: bits 3:0 rising half, bits 7:4 falling half.
    """

    def __init__(self):
        super().__init__({
            "txd": Out(data.ArrayLayout(4, 2)),
            "tx_ctl": Out(data.ArrayLayout(1, 2)),
            "rxd": In(data.ArrayLayout(4, 2)),
            "rx_ctl": In(data.ArrayLayout(1, 2)),
        })


class RgmiiGmii(wiring.Component):
    """GMII (8-bit) <-> RGMII DDR halves, 1000 Mb/s; combinational (no latency).

    Ports
    -----
    gmii_txd : In(8), ``gmii_tx_en`` : In(1), ``gmii_tx_er`` : In(1)
        GMII transmit (TX domain); byte bits 3:0 go out on the rising edge.
    gmii_rxd : Out(8), ``gmii_rx_dv`` : Out(1), ``gmii_rx_er`` : Out(1)
        GMII receive (RX domain): ``rxd[1]`` (falling half) becomes bits 7:4,
        RX_DV = rising-edge RX_CTL, RX_ER = RX_CTL(rising) xor RX_CTL(falling).
    rgmii : Out(RgmiiDdrSignature())
        The DDR halves (connect to :class:`RgmiiDdrIo` or a simulation model).

    No backpressure; the RGMII in-band status (RX_CTL pattern between frames) is ignored.
    Source: RGMII v2.0 (HP, 2002) sections 3 and 3.4.
    """

    def __init__(self):
        super().__init__({
            "gmii_txd": In(8),
            "gmii_tx_en": In(1),
            "gmii_tx_er": In(1),
            "gmii_rxd": Out(8),
            "gmii_rx_dv": Out(1),
            "gmii_rx_er": Out(1),
            "rgmii": Out(RgmiiDdrSignature()),
        })

    def elaborate(self, platform):
        m = Module()
        r = self.rgmii
        m.d.comb += [
            r.txd[0].eq(self.gmii_txd[:4]),
            r.txd[1].eq(self.gmii_txd[4:]),
            r.tx_ctl[0].eq(self.gmii_tx_en),
            r.tx_ctl[1].eq(self.gmii_tx_en ^ self.gmii_tx_er),
            self.gmii_rxd.eq(r.rxd.as_value()),
            self.gmii_rx_dv.eq(r.rx_ctl[0]),
            self.gmii_rx_er.eq(r.rx_ctl[0] ^ r.rx_ctl[1]),
        ]
        return m


class RgmiiDdrIo(wiring.Component):
    """Platform DDR I/O buffers of one RGMII port (ECP5: ``ODDRX1F`` / ``IDDRX1F``).

    Parameters
    ----------
    pins : object
        The port's pins from ``platform.request("eth_rgmii", n, dir="-")``: ``tx_clk``,
        ``tx_ctl``, ``tx_data`` (4), ``rx_clk``, ``rx_ctl``, ``rx_data`` (4).
    tx_domain : str
        Domain of the MAC's TX side (125 MHz); clocks the TXD/TX_CTL output registers.
    rx_domain : str
        Domain of the MAC's RX side; clocks the RXD/RX_CTL input registers.  The board
        top defines it from :attr:`rxc` (Amaranth wants domains defined by a parent)::

            m.domains.eth0_rx = ClockDomain()
            m.d.comb += ClockSignal("eth0_rx").eq(pio.rxc)
            m.submodules += ResetSynchronizer(ResetSignal("sync"), domain="eth0_rx")
    txc_domain : str or None
        Domain clocking the TXC forwarding register (drives 1 then 0 each period):
        a 90-degree-shifted copy of ``tx_domain`` for RGMII without TX delay in the PHY;
        ``None`` = ``tx_domain``.

    Ports
    -----
    rgmii : In(RgmiiDdrSignature())
        The DDR halves from :class:`RgmiiGmii` (or :class:`mrcnic.rtl.eth_mac.EthMac`).
    rxc : Out(1)
        The RXC pin (through an input buffer): the clock of ``rx_domain``.

    Latency: one ``tx_domain`` cycle out, one ``rx_domain`` cycle in (``DDRBuffer``
    latency on ECP5; more on platforms with extra pipeline registers).  Needs a platform
    with DDR support; raises ``NotImplementedError`` (from Amaranth) otherwise.
    """

    def __init__(self, pins, *, tx_domain: str = "rgmii_tx", rx_domain: str = "rgmii_rx",
                 txc_domain: str | None = None):
        for name in ("tx_clk", "tx_ctl", "tx_data", "rx_clk", "rx_ctl", "rx_data"):
            if not hasattr(pins, name):
                raise ValueError(f"pins lack the RGMII pin {name!r}")
        if len(pins.tx_data) != 4 or len(pins.rx_data) != 4:
            raise ValueError("RGMII tx_data and rx_data must be 4 pins wide")
        if tx_domain == rx_domain:
            raise ValueError("tx_domain and rx_domain must differ (RXC is the PHY's clock)")
        self.pins = pins
        self.tx_domain, self.rx_domain = tx_domain, rx_domain
        self.txc_domain = txc_domain or tx_domain
        super().__init__({"rgmii": In(RgmiiDdrSignature()), "rxc": Out(1)})

    def elaborate(self, platform):
        m = Module()
        p, r = self.pins, self.rgmii
        m.submodules.txd = txd = io.DDRBuffer("o", p.tx_data, o_domain=self.tx_domain)
        m.submodules.tx_ctl = tx_ctl = io.DDRBuffer("o", p.tx_ctl, o_domain=self.tx_domain)
        m.submodules.txc = txc = io.DDRBuffer("o", p.tx_clk, o_domain=self.txc_domain)
        m.submodules.rxd = rxd = io.DDRBuffer("i", p.rx_data, i_domain=self.rx_domain)
        m.submodules.rx_ctl = rx_ctl = io.DDRBuffer("i", p.rx_ctl, i_domain=self.rx_domain)
        m.d.comb += [
            txd.o.eq(r.txd),
            tx_ctl.o.eq(r.tx_ctl),
            txc.o[0].eq(1),
            txc.o[1].eq(0),
            r.rxd.eq(rxd.i),
            r.rx_ctl.eq(rx_ctl.i),
        ]
        m.submodules.rxc = rxc = io.Buffer("i", p.rx_clk)
        m.d.comb += self.rxc.eq(rxc.i)
        return m
