"""PortAdminGate: drops whole frames of a plane that is administratively down (OCP MRC port admin state)."""

from amaranth.hdl import Module, Signal
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
        Sampled between frames, into a flip-flop: in every cycle without a frame in flight
        and on each frame's last beat; a frame that starts while that sample is low is
        consumed (``ready`` = 1) and discarded whole; a frame in flight finishes.  So a
        change of ``up`` applies from the first frame that starts at least one cycle later
        (a flip-flop, not the CSR decode, drives ``tvalid`` / ``ready``: on the Versa build
        the gate sits between the NIC and the MAC across the chip, commit e45fbe7's
        critical path).
    """

    def __init__(self):
        super().__init__({"s_axis": In(AxiStreamSignature(64)),
                          "m_axis": Out(AxiStreamSignature(64)), "up": In(1)})

    def elaborate(self, platform):
        m = Module()
        s, o = self.s_axis, self.m_axis
        mid = Signal()              # a frame is in flight (its first beat has passed)
        passing = Signal()          # the current / next frame passes (``up`` sampled)
        beat = s.tvalid & s.tready
        m.d.comb += [o.tdata.eq(s.tdata), o.tkeep.eq(s.tkeep), o.tlast.eq(s.tlast),
                     o.tvalid.eq(s.tvalid & passing),
                     s.tready.eq(~passing | o.tready)]
        with m.If(beat):
            m.d.sync += mid.eq(~s.tlast)
        with m.If((~mid & ~beat) | (beat & s.tlast)):
            m.d.sync += passing.eq(self.up)
        return m
