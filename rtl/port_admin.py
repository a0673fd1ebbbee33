"""PortAdminGate: drops whole frames of a plane that is administratively down (OCP MRC port admin state)."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axis import AxiStreamSignature

__all__ = ["PortAdminGate"]


class PortAdminGate(wiring.Component):
    """Drops whole frames of a plane that is administratively down (``PORT_ADMIN``).

    Attributes
    ----------
    s_axis : In(AxiStreamSignature(64)), m_axis : Out(AxiStreamSignature(64))
        Frames pass through combinationally (zero latency, ``ready`` passes back).
    up : In(1)
        Sampled at each frame's first beat: a frame that starts while ``up`` is low is
        consumed (``ready`` = 1) and discarded whole; a frame in flight finishes.
    """

    def __init__(self):
        super().__init__({"s_axis": In(AxiStreamSignature(64)),
                          "m_axis": Out(AxiStreamSignature(64)), "up": In(1)})

    def elaborate(self, platform):
        m = Module()
        s, o = self.s_axis, self.m_axis
        mid, passing = Signal(), Signal()
        pass_now = Mux(mid, passing, self.up)
        m.d.comb += [o.tdata.eq(s.tdata), o.tkeep.eq(s.tkeep), o.tlast.eq(s.tlast),
                     o.tvalid.eq(s.tvalid & pass_now),
                     s.tready.eq(Mux(pass_now, o.tready, 1))]
        with m.If(s.tvalid & s.tready):
            m.d.sync += [mid.eq(~s.tlast), passing.eq(pass_now)]
        return m
