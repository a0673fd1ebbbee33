"""ECP5 board glue shared by the board tops: the 125 MHz PLL, the global reset, the NIC
clocking, and the RGMII pin resource.

Used by :mod:`mrcnic.boards.colorlight` and :mod:`mrcnic.boards.versa` (Lattice ECP5
``EHXPLLL`` / ``DCCA`` primitives, FPGA-TN-02200 "ECP5 and ECP5-5G sysCLOCK PLL/DLL").
"""

from amaranth.build import Attrs, Pins, Resource, Subsignal
from amaranth.hdl import ClockDomain, ClockSignal, Instance, ResetSignal, Signal
from amaranth.lib import io
from amaranth.lib.cdc import AsyncFFSynchronizer, ResetSynchronizer

__all__ = ["ecp5_pll_125", "ecp5_global_reset", "ecp5_nic_clocking", "rgmii_resource"]


#: Secondary PLL outputs (MHz) :func:`ecp5_pll_125` can add: the VCO (625 MHz) divided by 10,
#: 12 or 15.
CLKOS_DIV = {62.5: 10, 52.08: 12, 41.67: 15}


def ecp5_pll_125(m, clk_in, *, in_mhz, name="pll", clkos_mhz=None):
    """Instantiate an ECP5 ``EHXPLLL`` making 125 MHz from ``in_mhz`` (25 or 100 MHz).

    VCO = 625 MHz (CLKOP / 5); the PFD runs at 25 MHz.  Returns ``(clk125, locked)``, or
    ``(clk125, clkos, locked)`` when ``clkos_mhz`` (a key of :data:`CLKOS_DIV`) asks for
    a second, slower output on CLKOS (VCO / 10, 12 or 15; raises ``ValueError`` for any
    other frequency).  nextpnr derives both outputs' constraints from the input clock's.
    """
    if in_mhz not in (25, 100):
        raise ValueError(f"in_mhz must be 25 or 100, not {in_mhz}")
    if clkos_mhz is not None and clkos_mhz not in CLKOS_DIV:
        raise ValueError(f"clkos_mhz must be one of {sorted(CLKOS_DIV)}, not {clkos_mhz}")
    clk_out, locked = Signal(name=f"{name}_clk125"), Signal(name=f"{name}_locked")
    clkos = {}
    if clkos_mhz is not None:
        div = CLKOS_DIV[clkos_mhz]
        clk_os = Signal(name=f"{name}_clkos")
        clkos = dict(a_FREQUENCY_PIN_CLKOS=str(round(625 / div, 4)), p_CLKOS_ENABLE="ENABLED",
                     p_CLKOS_DIV=div, p_CLKOS_CPHASE=div - 1, p_CLKOS_FPHASE=0,
                     i_ENCLKOS=0, o_CLKOS=clk_os)
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
        o_CLKOP=clk_out, o_LOCK=locked, **clkos,
    )
    if clkos_mhz is not None:
        return clk_out, clkos["o_CLKOS"], locked
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


def ecp5_nic_clocking(m, platform, osc, *, in_mhz, nic_mhz=125):
    """The board tops' clocking: oscillator ``osc`` (``in_mhz`` 25 or 100) -> 125 MHz.

    One ``EHXPLLL`` (:func:`ecp5_pll_125`) clocks ``eth_tx`` (RGMII TX) at 125 MHz and
    ``sync`` (the NIC) at ``nic_mhz``: 125 (the same net as ``eth_tx``) or a slower
    output of :data:`CLKOS_DIV` (then the MACs cross into ``eth_tx`` through their
    asynchronous FIFOs).  ``sync`` is reset through a global buffer
    (:func:`ecp5_global_reset`), ``eth_tx`` through a ``ResetSynchronizer``, both while
    the PLL is not locked.  Returns the PLL's ``locked`` (1 bit).
    """
    m.submodules[f"{osc}_buf"] = buf = io.Buffer("i", platform.request(osc, 0, dir="-"))
    m.domains.sync = ClockDomain("sync")
    m.domains.eth_tx = ClockDomain("eth_tx")
    if nic_mhz == 125:
        clk125, locked = ecp5_pll_125(m, buf.i, in_mhz=in_mhz)
        m.d.comb += [ClockSignal("sync").eq(clk125), ClockSignal("eth_tx").eq(clk125)]
    else:
        clk125, clknic, locked = ecp5_pll_125(m, buf.i, in_mhz=in_mhz, clkos_mhz=nic_mhz)
        m.d.comb += [ClockSignal("sync").eq(clknic), ClockSignal("eth_tx").eq(clk125)]
    ecp5_global_reset(m, ~locked, domain="sync")
    m.submodules.eth_tx_rst = ResetSynchronizer(~locked, domain="eth_tx")
    return locked


def rgmii_resource(n, tx_clk, tx_ctl, tx_data, rx_clk, rx_ctl, rx_data, io_type):
    """An ``mrc_rgmii`` resource (number ``n``): the RGMII pins of one PHY, by ball name
    (``tx_data`` / ``rx_data``: four balls, space-separated), all of ``io_type``."""
    return Resource("mrc_rgmii", n,
                    Subsignal("tx_clk", Pins(tx_clk, dir="o")),
                    Subsignal("tx_ctl", Pins(tx_ctl, dir="o")),
                    Subsignal("tx_data", Pins(tx_data, dir="o")),
                    Subsignal("rx_clk", Pins(rx_clk, dir="i")),
                    Subsignal("rx_ctl", Pins(rx_ctl, dir="i")),
                    Subsignal("rx_data", Pins(rx_data, dir="i")),
                    Attrs(IO_TYPE=io_type))
