"""Plane guard: recognise a failure that takes out many EVs of one plane from its first few.

When a whole plane (or a spine serving many EVs) dies, every EV of it loses the packets sent
on it, and sender reliability marks each EV ASSUMED_BAD only when its own packet times out.
The spray walks the profile one entry per packet, so without help the dead plane keeps
receiving new packets until every one of its EVs has lost one and timed out: a round of the
whole profile (MRC paper: failures that take out many paths at once should be recognised as
such).  This block watches the EV events: when ``threshold`` different entries of one port
(plane) time out (EV event reason ACK_TIMEOUT) within ``window`` cycles of each other, the
port is *suspect*: every entry on it is avoided by the data spray (``avoid`` bit) for
``hold`` cycles, or until a probe reply comes back on one of its entries (EV event
PROBE_OK on that port), whichever is first.  Then the port is used again; if it is still
dead, its next ``threshold`` timeouts make it suspect again.

Avoiding is not a state change: the entries stay GOOD (no EV event, ``ev_min_active`` not
involved), the ones that timed out are ASSUMED_BAD and probed as usual.  A port is never made
suspect while every other port that has entries is suspect (at least one plane keeps
carrying data).  ``threshold`` must exceed the number of a profile's entries that one link
can carry, so that a single failed link never takes a whole plane out (the built-in
topologies: at most 2 entries per plane and spine).

Sources: OCP MRC 1.0 (EV events ACK_TIMEOUT / PROBE_OK, ports = planes), the MRC paper's
fast failover across planes.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .layouts import MAX_PATHS, EvEvent, EvEventReason, PathEntry
from .params import NicParams, check_paths, check_plane_guard, check_ports, param

__all__ = ["PlaneGuard"]


class PlaneGuard(wiring.Component):
    """Per-port failure recogniser driving a data-spray avoid mask.

    Parameters
    ----------
    paths : int
        Path-table entries, a power of two in 1..256 (the NIC's are 16..256).
    ports : int
        Ports (planes), 1..8.
    threshold : int
        ACK-timeout events of distinct entries of one port that make it suspect, 2..15
        (0 disables the guard).
    window : int
        Cycles within which consecutive timeouts of one port count together (the count
        restarts after ``window`` cycles without one), 1..65535.
    hold : int
        Cycles a suspect port stays avoided unless a probe reply clears it, 1..2**24-1.
    params : NicParams
        The NIC's parameter set (:class:`~mrcnic.rtl.params.NicParams`): ``paths``,
        ``ports`` and ``threshold`` (``params.plane_guard``) come from it (a keyword given
        as well must agree).  Standalone: leave it out; the keywords are checked by the same
        rules (:mod:`mrcnic.rtl.params`).

    Attributes
    ----------
    w_en, w_addr, w_data : In(1), In(8), In(PathEntry)
        The path table's control-plane write port (only ``port`` is kept: 3 bits per entry).
    ev_valid : In(1)
        An EV event is taken this cycle (``valid & ready`` of the reliability's ``event``).
    ev : In(EvEvent)
        That event.
    avoid : Out(paths)
        Entries on a suspect port (registered, one cycle after the decision).
    suspect : Out(ports)
        Ports currently suspect (registered).
    trips : Out(32)
        Times a port became suspect (wraps).

    Latency: a timeout event makes its port suspect three cycles later (the event is
    registered, then its port is looked up and registered); ``avoid`` follows a cycle after
    that.  Resources: ``3 x paths`` flip-flops for the port map, per port a 4-bit
    count, a 16-bit window timer and a 24-bit hold timer.
    """

    def __init__(self, paths: "int | None" = None, ports: "int | None" = None,
                 threshold: "int | None" = None, window: int = 4096, hold: int = 1 << 15, *,
                 params: "NicParams | None" = None):
        # no path table here: fewer than 16 entries are fine standalone (minimum=1)
        paths = check_paths(param(params, "paths", paths, MAX_PATHS), minimum=1)
        ports = check_ports(param(params, "ports", ports, 4))
        threshold = check_plane_guard(param(params, "plane_guard", threshold, 3), "threshold")
        if not 1 <= window <= 0xFFFF:
            raise ValueError(f"window must be 1..65535 cycles, not {window}")
        if not 1 <= hold < 1 << 24:
            raise ValueError(f"hold must be 1..2**24-1 cycles, not {hold}")
        self.paths, self.ports = paths, ports
        self.threshold, self.window, self.hold = threshold, window, hold
        super().__init__({
            "w_en": In(1), "w_addr": In(8), "w_data": In(PathEntry),
            "ev_valid": In(1), "ev": In(EvEvent),
            "avoid": Out(paths), "suspect": Out(ports), "trips": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        if self.threshold == 0:
            return m
        paths, ports = self.paths, self.ports
        port_of = [Signal(3, name=f"port_of{i}") for i in range(paths)]
        used = [Signal(name=f"used{i}") for i in range(paths)]     # entry ever written
        for i in range(paths):
            with m.If(self.w_en & (self.w_addr == i)):
                m.d.sync += [port_of[i].eq(self.w_data.port), used[i].eq(1)]

        # three stages keep the 256-way port lookup off the counters' paths:
        # 1. the event, registered (kept off the reliability's output paths);
        # 2. its port, one multiplexer over the entries (the index is < paths), registered
        #    as one-hot timeout / probe-reply vectors per port;
        # 3. the per-port counters and timers below act on those vectors.
        ev_valid, ev = Signal(), Signal(EvEvent)
        m.d.sync += [ev_valid.eq(self.ev_valid), ev.eq(self.ev)]
        ev_port = Signal(3)
        with m.Switch(ev.index):
            for i in range(paths):
                with m.Case(i):
                    m.d.comb += ev_port.eq(port_of[i])
        hit_at = Signal(ports)       # a timeout of an entry of port p (stage 3)
        probe_at = Signal(ports)     # a probe reply on an entry of port p (stage 3)
        for p in range(ports):
            m.d.sync += [
                hit_at[p].eq(ev_valid & (ev.reason == EvEventReason.ACK_TIMEOUT)
                             & (ev_port == p)),
                probe_at[p].eq(ev_valid & (ev.reason == EvEventReason.PROBE_OK)
                               & (ev_port == p)),
            ]

        has = Signal(ports)          # ports with at least one entry (registered: it only
        for p in range(ports):       # changes on a control-plane write)
            m.d.sync += has[p].eq(Cat(used[i] & (port_of[i] == p) for i in range(paths)).any())

        for p in range(ports):
            count = Signal(4, name=f"count{p}")
            age = Signal(range(self.window + 1), name=f"age{p}")
            left = Signal(24, name=f"left{p}")
            hit = hit_at[p]
            # another port with entries stays usable
            others_ok = Cat(has[q] & ~self.suspect[q] for q in range(ports) if q != p).any() \
                if ports > 1 else 0
            with m.If(self.suspect[p]):
                m.d.sync += left.eq(left - 1)
                with m.If(probe_at[p] | (left == 1)):
                    m.d.sync += [self.suspect[p].eq(0), count.eq(0)]
            with m.Elif(hit):
                m.d.sync += age.eq(0)
                with m.If((count + 1 >= self.threshold) & others_ok):
                    m.d.sync += [self.suspect[p].eq(1), left.eq(self.hold), count.eq(0)]
                with m.Elif(count != 15):
                    m.d.sync += count.eq(count + 1)
            with m.Elif(count != 0):
                with m.If(age == self.window):
                    m.d.sync += count.eq(0)
                with m.Else():
                    m.d.sync += age.eq(age + 1)
        rise = Signal(ports)
        prev = Signal(ports)
        m.d.sync += prev.eq(self.suspect)
        m.d.comb += rise.eq(self.suspect & ~prev)
        with m.If(rise.any()):
            m.d.sync += self.trips.eq(self.trips + 1)
        for i in range(paths):
            m.d.sync += self.avoid[i].eq(used[i] & Mux(port_of[i] < ports,
                                                      self.suspect.bit_select(port_of[i], 1), 0))
        return m
