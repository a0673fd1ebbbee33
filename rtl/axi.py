"""AXI4 memory-mapped signatures (manager side) with cocotbext-axi member names.

A port ``m_axi: Out(Axi4ReadSignature(...))`` becomes ``m_axi__araddr`` ... in
Verilog; testbenches bind with
``AxiReadBus.from_prefix(dut, "m_axi", bus_separator="__")`` (or ``AxiBus`` for a
port built from :class:`Axi4Signature`).  Only INCR bursts of the full data
width are issued by mrcnic; ``*size`` = log2(data bytes).

Source: ARM IHI 0022E (AMBA AXI4), cocotbext-axi ``axi_channels``.
"""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Axi4ReadSignature", "Axi4WriteSignature", "Axi4Signature", "Axi4LiteSignature"]

BURST_INCR = 0b01


def _read_members(addr_width, data_width, id_width):
    return {
        "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
        "arburst": Out(2), "arvalid": Out(1), "arready": In(1),
        "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
        "rvalid": In(1), "rready": Out(1),
    }


def _write_members(addr_width, data_width, id_width):
    return {
        "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
        "awburst": Out(2), "awvalid": Out(1), "awready": In(1),
        "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
        "wvalid": Out(1), "wready": In(1),
        "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
    }


class Axi4ReadSignature(wiring.Signature):
    """AXI4 read channels (AR, R), manager side: ``addr_width``/``data_width``/``id_width`` bits."""

    def __init__(self, addr_width=32, data_width=64, id_width=4):
        super().__init__(_read_members(addr_width, data_width, id_width))


class Axi4WriteSignature(wiring.Signature):
    """AXI4 write channels (AW, W, B), manager side."""

    def __init__(self, addr_width=32, data_width=64, id_width=4):
        super().__init__(_write_members(addr_width, data_width, id_width))


class Axi4Signature(wiring.Signature):
    """Full AXI4 manager (AW, W, B, AR, R)."""

    def __init__(self, addr_width=32, data_width=64, id_width=4):
        super().__init__({**_write_members(addr_width, data_width, id_width),
                          **_read_members(addr_width, data_width, id_width)})


class Axi4LiteSignature(wiring.Signature):
    """AXI4-Lite, manager side (flip for a subordinate such as the CSR bank); 32-bit data."""

    def __init__(self, addr_width=16, data_width=32):
        super().__init__({
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1),
            "wready": In(1), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })
