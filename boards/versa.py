"""Lattice ECP5 Versa (LFE5UM-45F-8BG381C): two Marvell 88E1512 RGMII PHYs = two MRC planes.

Board top = :class:`mrcnic.boards.common.NicBoardTop` with:

* clocking: the 100 MHz differential oscillator (P3/P4) -> ``EHXPLLL`` -> 125 MHz ``sync`` =
  ``eth_tx`` (the 88E1512's RGMII TX/RX delays are enabled by its strapping on this board);
* RGMII: both PHYs, pins as in amaranth-boards ``VersaECP5Platform`` (whose port 1 spells its
  control pins ``tx_ctrl``/``rx_ctrl``; the resources here use one spelling for both);
* control UART: the FT2232H's second channel (``A11`` TX, ``C11`` RX), 8N1, 115200 baud;
* LEDs 0..4 (on board): link 0, activity 0, link 1, activity 1, heartbeat;
* PHY resets ``U17`` / ``F20`` held ~17 ms after configuration.

The Versa's device is larger than the Colorlight's: the same build fits with room to spare.
"""

from amaranth.build import Attrs, PinsN, Resource

from .common import NicBoardTop
from .ecp5 import ecp5_nic_clocking, rgmii_resource

__all__ = ["VersaNicTop", "versa_platform"]

DEVICE = "LFE5UM-45F"


RESOURCES = [
    rgmii_resource(0, "P19", "R20", "N19 N20 P18 P20", "L20", "U19", "T20 U20 T19 R18", "LVCMOS25"),
    rgmii_resource(1, "C20", "E19", "J17 J16 D19 D20", "J19", "F19", "G18 G16 H18 H17", "LVCMOS25"),
    Resource("mrc_phy_rst", 0, PinsN("U17", dir="o"), Attrs(IO_TYPE="LVCMOS25")),
    Resource("mrc_phy_rst", 1, PinsN("F20", dir="o"), Attrs(IO_TYPE="LVCMOS25")),
]


def versa_platform():
    """The amaranth-boards Versa ECP5 platform with :data:`RESOURCES` added."""
    from amaranth_boards.versa_ecp5 import VersaECP5Platform
    platform = VersaECP5Platform()
    platform.add_resources(RESOURCES)
    return platform


class VersaNicTop(NicBoardTop):
    """Two-plane MRC NIC on the ECP5 Versa (see the module notes and NicBoardTop)."""

    board = "versa"
    device = DEVICE

    def clocking(self, m, platform):
        return ecp5_nic_clocking(m, platform, "clk100", in_mhz=100)

    def rgmii_pins(self, platform, n):
        return platform.request("mrc_rgmii", n, dir="-")

    def leds(self, m, platform):
        return self.out_buffers(m, platform, "led", range(5))

    def phy_reset(self, m, platform):
        return self.out_buffers(m, platform, "mrc_phy_rst", range(2))
