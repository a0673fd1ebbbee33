"""Colorlight 5A-75B v7.0 (LFE5U-25F-6BG256C): two Broadcom B50612D RGMII PHYs = two MRC planes.

Board top = :class:`mrcnic.boards.common.NicBoardTop` with:

* clocking: the 25 MHz oscillator (P6) -> ``EHXPLLL`` -> 125 MHz ``eth_tx`` (TXC leaves in
  phase with TXD: the B50612D adds the RGMII TX delay itself, as in the community designs
  for this board) and **62.5 MHz** ``sync`` (the NIC).  Line rate: two 1 Gb/s planes are
  2 Gb/s each way; the NIC moves one 64-bit beat per cycle, 4 Gb/s at 62.5 MHz, so it
  carries both planes with 2x to spare (31.25 MHz would be the bare minimum), and the
  shared receive parser sees half its beat rate.  The MACs cross between ``sync`` and
  ``eth_tx`` through their asynchronous FIFOs; the LFE5U-25F at speed grade 6 does not
  close 125 MHz on the NIC's deepest paths;
* RGMII: PHY 0 (J-side ``M2``/``M1`` clocks) and PHY 1 (``M12``/``M16``), pins as in
  amaranth-boards ``Colorlight_5A75B_R70Platform``; the shared PHY reset (``P5``) is held
  ~17 ms after configuration, MDIO is left idle (the PHYs strap to 1000BASE-T RGMII);
* control UART on J19: TX = ``P11`` (the on-board LED's pin), RX = ``M13`` (the button's pin),
  8N1, 115200 baud by default;
* status LEDs (link 0, activity 0, link 1, activity 1, heartbeat) on connector J1 pins
  1, 2, 3, 5, 6 (outputs through the board's 74HC245 buffers; wire LEDs + resistors to them).

See ``docs/boards.md`` for flashing and wiring.
"""

from amaranth.build import Attrs, Pins, PinsN, Resource

from .common import NicBoardTop
from .ecp5 import CLKOS_DIV, ecp5_nic_clocking, rgmii_resource

__all__ = ["ColorlightNicTop", "colorlight_platform"]

DEVICE = "LFE5U-25F"


#: Extra resources: the two RGMII ports without the shared management pins, the shared
#: PHY reset, and five status LEDs on connector J1.
RESOURCES = [
    rgmii_resource(0, "M2", "M3", "L1 L3 P2 L4", "M1", "N6", "N1 M5 N5 M6", "LVCMOS33"),
    rgmii_resource(1, "M12", "R15", "T14 R12 R13 R14", "M16", "L15", "P13 N13 P14 M15",
                   "LVCMOS33"),
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

    def __init__(self, *, paths: int = 16, qps: int = 1, clk_hz: int = 62_500_000, **options):
        """As :class:`NicBoardTop`, sized for the LFE5U-25F by default: one QP with up to 16 EVs,
        the NIC clock at 62.5 MHz (``clk_hz``: 62.5, 52.08 or 41.67 MHz, or 125 MHz).

        With the Versa's ``qps=2, paths=32`` the NIC packs to ~24 700 LUT4 (101 % of the 25F);
        ``paths=16`` or ``qps=1`` alone to 97 %, both to 93 % (91 % after later cuts): still
        above the ~85 % at which nextpnr's placer converges (see ``docs/boards.md``).
        """
        mhz = round(clk_hz / 1e6, 2)
        if mhz != 125 and mhz not in CLKOS_DIV:
            raise ValueError(f"clk_hz must be 125 MHz or one of {sorted(CLKOS_DIV)} MHz, "
                             f"not {clk_hz}")
        super().__init__(paths=paths, qps=qps, clk_hz=clk_hz, **options)

    def clocking(self, m, platform):
        mhz = round(self.clk_hz / 1e6, 2)
        return ecp5_nic_clocking(m, platform, "clk25", in_mhz=25, nic_mhz=mhz)

    def rgmii_pins(self, platform, n):
        return platform.request("mrc_rgmii", n, dir="-")

    def leds(self, m, platform):
        return self.out_buffers(m, platform, "mrc_led", range(5))

    def phy_reset(self, m, platform):
        return self.out_buffers(m, platform, "mrc_phy_rst", [0])
