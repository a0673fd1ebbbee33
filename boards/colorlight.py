"""Colorlight 5A-75B v7.0 (LFE5U-25F-6BG256C): two Broadcom B50612D RGMII PHYs = two MRC planes.

Board top = :class:`mrcnic.boards.common.NicBoardTop` with:

* clocking: the 25 MHz oscillator (P6) -> ``EHXPLLL`` -> 125 MHz ``sync`` = ``eth_tx``
  (TXC leaves in phase with TXD: the B50612D adds the RGMII TX delay itself, as in the
  community designs for this board);
* RGMII: PHY 0 (J-side ``M2``/``M1`` clocks) and PHY 1 (``M12``/``M16``), pins as in
  amaranth-boards ``Colorlight_5A75B_R70Platform``; the shared PHY reset (``P5``) is held
  ~17 ms after configuration, MDIO is left idle (the PHYs strap to 1000BASE-T RGMII);
* control UART on J19: TX = ``P11`` (the on-board LED's pin), RX = ``M13`` (the button's pin),
  8N1, 115200 baud by default;
* status LEDs (link 0, activity 0, link 1, activity 1, heartbeat) on connector J1 pins
  1, 2, 3, 5, 6 (outputs through the board's 74HC245 buffers; wire LEDs + resistors to them).

See ``docs/boards.md`` for flashing and wiring.
"""

from amaranth.build import Attrs, Pins, PinsN, Resource, Subsignal
from amaranth.hdl import ClockDomain, ClockSignal, Instance, ResetSignal, Signal
from amaranth.lib import io
from amaranth.lib.cdc import AsyncFFSynchronizer, ResetSynchronizer

from .common import NicBoardTop

__all__ = ["ColorlightNicTop", "colorlight_platform", "ecp5_pll_125", "ecp5_global_reset",
           "ecp5_nic_clocking"]

DEVICE = "LFE5U-25F"


def ecp5_pll_125(m, clk_in, *, in_mhz, name="pll"):
    """Instantiate an ECP5 ``EHXPLLL`` making 125 MHz from ``in_mhz`` (25 or 100 MHz).

    VCO = 625 MHz (CLKOP / 5); the PFD runs at 25 MHz.  Returns ``(clk125, locked)``.
    nextpnr derives the 125 MHz constraint of CLKOP from the input clock's constraint.
    """
    if in_mhz not in (25, 100):
        raise ValueError(f"in_mhz must be 25 or 100, not {in_mhz}")
    clk_out, locked = Signal(name=f"{name}_clk125"), Signal(name=f"{name}_locked")
    m.submodules[name] = Instance(
        "EHXPLLL",
        a_FREQUENCY_PIN_CLKI=str(in_mhz), a_FREQUENCY_PIN_CLKOP="125",
        a_ICP_CURRENT="12", a_LPF_RESISTOR="8",
        a_MFG_ENABLE_FILTEROPAMP="1", a_MFG_GMCREFSEL="2",
        p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
        p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA",
        p_CLKI_DIV=in_mhz // 25, p_CLKFB_DIV=5,
        p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=5, p_CLKOP_CPHASE=4, p_CLKOP_FPHASE=0,
        p_FEEDBK_PATH="CLKOP",
        i_CLKI=clk_in, i_CLKFB=clk_out, i_RST=0, i_STDBY=0,
        i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=0, i_PHASESTEP=0, i_PHASELOADREG=0,
        i_PLLWAKESYNC=0, i_ENCLKOP=0,
        o_CLKOP=clk_out, o_LOCK=locked,
    )
    return clk_out, locked


def ecp5_global_reset(m, arst, *, domain="sync"):
    """Reset ``domain`` from ``arst`` through a synchroniser and an ECP5 global buffer (``DCCA``).

    ``arst`` (1 bit, asynchronous, active high) asserts the domain's reset at once and
    releases it on the domain's clock after two flip-flops (as ``ResetSynchronizer``).
    The synchroniser's output then drives ``ResetSignal(domain)`` through a ``DCCA``, so
    nextpnr routes it on a global network: the NIC's reset reaches ~15 000 flip-flop
    ``LSR`` pins, and as a fabric net it crossed the whole chip on general routing (the
    largest net in the design; routing congestion and a long reset path).  nextpnr-ecp5
    promotes only clock nets by itself; a net driven by a ``DCCA`` is routed on one of
    the 8 globals that reach the fabric (3 are used by the board's clocks).
    """
    raw = Signal(name=f"{domain}_rst_local")
    m.submodules[f"{domain}_rst_sync"] = AsyncFFSynchronizer(arst, raw, o_domain=domain,
                                                             async_edge="pos")
    m.submodules[f"{domain}_rst_dcc"] = Instance("DCCA", i_CLKI=raw, i_CE=1,
                                                 o_CLKO=ResetSignal(domain))


def ecp5_nic_clocking(m, platform, osc, *, in_mhz):
    """The board tops' clocking: oscillator ``osc`` (``in_mhz`` 25 or 100) -> 125 MHz.

    One ``EHXPLLL`` (:func:`ecp5_pll_125`) clocks both ``sync`` (the NIC) and ``eth_tx``
    (RGMII TX); ``sync`` is reset through a global buffer (:func:`ecp5_global_reset`),
    ``eth_tx`` through a ``ResetSynchronizer``, both while the PLL is not locked.
    Returns the PLL's ``locked`` (1 bit).
    """
    m.submodules[f"{osc}_buf"] = buf = io.Buffer("i", platform.request(osc, 0, dir="-"))
    clk125, locked = ecp5_pll_125(m, buf.i, in_mhz=in_mhz)
    m.domains.sync = ClockDomain("sync")
    m.domains.eth_tx = ClockDomain("eth_tx")
    m.d.comb += [ClockSignal("sync").eq(clk125), ClockSignal("eth_tx").eq(clk125)]
    ecp5_global_reset(m, ~locked, domain="sync")
    m.submodules.eth_tx_rst = ResetSynchronizer(~locked, domain="eth_tx")
    return locked


def _rgmii(n, tx_clk, tx_ctl, tx_data, rx_clk, rx_ctl, rx_data, io_type="LVCMOS33"):
    return Resource("mrc_rgmii", n,
                    Subsignal("tx_clk", Pins(tx_clk, dir="o")),
                    Subsignal("tx_ctl", Pins(tx_ctl, dir="o")),
                    Subsignal("tx_data", Pins(tx_data, dir="o")),
                    Subsignal("rx_clk", Pins(rx_clk, dir="i")),
                    Subsignal("rx_ctl", Pins(rx_ctl, dir="i")),
                    Subsignal("rx_data", Pins(rx_data, dir="i")),
                    Attrs(IO_TYPE=io_type))


#: Extra resources: the two RGMII ports without the shared management pins, the shared
#: PHY reset, and five status LEDs on connector J1.
RESOURCES = [
    _rgmii(0, "M2", "M3", "L1 L3 P2 L4", "M1", "N6", "N1 M5 N5 M6"),
    _rgmii(1, "M12", "R15", "T14 R12 R13 R14", "M16", "L15", "P13 N13 P14 M15"),
    Resource("mrc_phy_rst", 0, PinsN("P5", dir="o"), Attrs(IO_TYPE="LVCMOS33")),
    *[Resource("mrc_led", i, Pins(str(pin), dir="o", conn=("j", 1)), Attrs(IO_TYPE="LVCMOS33"))
      for i, pin in enumerate((1, 2, 3, 5, 6))],
]


def colorlight_platform():
    """The amaranth-boards platform of the 5A-75B v7.0 with :data:`RESOURCES` added."""
    from amaranth_boards.colorlight_5a75b_r7_0 import Colorlight_5A75B_R70Platform
    platform = Colorlight_5A75B_R70Platform()
    platform.add_resources(RESOURCES)
    return platform


class ColorlightNicTop(NicBoardTop):
    """Two-plane MRC NIC on the Colorlight 5A-75B v7.0 (see the module notes and NicBoardTop)."""

    board = "colorlight"
    device = DEVICE

    def __init__(self, *, paths: int = 16, qps: int = 1, **options):
        """As :class:`NicBoardTop`, sized for the LFE5U-25F by default: one QP with up to 16 EVs.

        With the Versa's ``qps=2, paths=32`` the NIC packs to ~24 700 LUT4 (101 % of the 25F);
        ``paths=16`` or ``qps=1`` alone to 97 %, both to 93 % (91 % after later cuts): still
        above the ~85 % at which nextpnr's placer converges (see ``docs/boards.md``).
        """
        super().__init__(paths=paths, qps=qps, **options)

    def clocking(self, m, platform):
        return ecp5_nic_clocking(m, platform, "clk25", in_mhz=25)

    def rgmii_pins(self, platform, n):
        return platform.request("mrc_rgmii", n, dir="-")

    def leds(self, m, platform):
        return self.out_buffers(m, platform, "mrc_led", range(5))

    def phy_reset(self, m, platform):
        return self.out_buffers(m, platform, "mrc_phy_rst", [0])
