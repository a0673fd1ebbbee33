"""The one AXI4-Stream signature every packet interface of mrcnic uses.

Members follow the AMBA AXI4-Stream names that cocotbext-axi binds to:
``tdata`` (8*N bits, byte lane 0 = first byte on the wire), ``tkeep`` (N bits,
contiguous from lane 0; only the last beat of a frame may be partial),
``tlast``, ``tvalid``, ``tready`` and optionally ``tuser``.  In generated
Verilog a port ``m_axis`` becomes ``m_axis__tdata`` ...; testbenches bind with
``AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__")``.

Source: ARM IHI 0051A (AMBA 4 AXI4-Stream).
"""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiStreamSignature"]


class AxiStreamSignature(wiring.Signature):
    """AXI4-Stream source signature (flip it for a sink).

    Parameters
    ----------
    data_width : int
        ``tdata`` width in bits, a multiple of 8 (mrcnic: 64).
    user_width : int
        ``tuser`` width in bits; 0 leaves ``tuser`` out.
    """

    def __init__(self, data_width: int = 64, user_width: int = 0):
        if data_width % 8 or data_width <= 0:
            raise ValueError(f"data_width must be a positive multiple of 8, not {data_width}")
        self.data_width, self.user_width = data_width, user_width
        members = {
            "tdata": Out(data_width),
            "tkeep": Out(data_width // 8),
            "tlast": Out(1),
            "tvalid": Out(1),
            "tready": In(1),
        }
        if user_width:
            members["tuser"] = Out(user_width)
        super().__init__(members)

    def __eq__(self, other):
        return (isinstance(other, AxiStreamSignature) and other.data_width == self.data_width
                and other.user_width == self.user_width)

    def __repr__(self):
        return f"AxiStreamSignature({self.data_width}, {self.user_width})"
