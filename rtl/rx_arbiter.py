"""Merge the validated packets of every plane into one receive stream, payload kept with its packet.

Each plane's RX parser emits an ``RxPacket`` and, for a non-trimmed DATA
packet, one payload frame.  This arbiter grants planes round robin, one packet
at a time, and forwards the packet together with its whole payload frame, so
downstream blocks see packets and payloads in the same order.  ACK packets
(for sender reliability) leave on their own stream; DATA and PROBE packets
go to the SACK tracker.

The NIC's receive datapath after this point runs at one beat per clock,
the aggregate rate of the planes (as the transmit side); a burst above it
waits in the parsers' store-and-forward buffers, and sustained overload
back-pressures the plane inputs (their ``tready`` falls).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .axis import AxiStreamSignature
from .layouts import RxKind, RxPacket
from .params import check_ports

__all__ = ["RxArbiter"]


class RxArbiter(wiring.Component):
    """Round-robin packet arbiter over ``ports`` (RxPacket + payload) inputs.

    Parameters
    ----------
    ports : int
        Number of planes (1..8).

    Attributes
    ----------
    pkt_p<i> : In(stream RxPacket)
        Validated packets of plane i.
    payload_p<i> : In(AxiStreamSignature(64))
        Their payload frames (non-trimmed DATA only).
    pkt : Out(stream RxPacket)
        DATA and PROBE packets, to the SACK tracker.
    payload : Out(AxiStreamSignature(64))
        The payload frames of those packets, same order.
    ack : Out(stream RxPacket)
        ACK packets (AETH + MRC SACK), to sender reliability.

    Latency: one cycle to grant; a packet without payload takes one cycle, a
    packet with payload one cycle plus one per payload beat.
    """

    def __init__(self, ports: int = 4):
        check_ports(ports)
        self._ports = ports
        members = {
            "pkt": Out(stream.Signature(RxPacket)),
            "payload": Out(AxiStreamSignature(64)),
            "ack": Out(stream.Signature(RxPacket)),
        }
        for i in range(ports):
            members[f"pkt_p{i}"] = In(stream.Signature(RxPacket))
            members[f"payload_p{i}"] = In(AxiStreamSignature(64))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self._ports
        pkts = [getattr(self, f"pkt_p{i}") for i in range(n)]
        pays = [getattr(self, f"payload_p{i}") for i in range(n)]

        grant = Signal(range(n))        # plane granted (packet phase or payload phase)
        in_payload = Signal()           # forwarding the granted plane's payload frame

        cur = Signal(RxPacket)
        cur_valid = Signal()
        with m.Switch(grant):
            for i in range(n):
                with m.Case(i):
                    m.d.comb += [cur.eq(pkts[i].payload), cur_valid.eq(pkts[i].valid)]

        is_ack = cur.kind == RxKind.ACK
        has_payload = (cur.kind == RxKind.DATA) & ~cur.trimmed
        m.d.comb += [
            self.pkt.payload.eq(cur), self.ack.payload.eq(cur),
            self.pkt.valid.eq(~in_payload & cur_valid & ~is_ack),
            self.ack.valid.eq(~in_payload & cur_valid & is_ack),
        ]
        taken = Signal()
        m.d.comb += taken.eq((self.pkt.valid & self.pkt.ready) | (self.ack.valid & self.ack.ready))
        for i in range(n):
            m.d.comb += pkts[i].ready.eq((grant == i) & ~in_payload & taken)

        # Payload phase: connect the granted plane's payload stream.
        out = self.payload
        with m.Switch(grant):
            for i in range(n):
                with m.Case(i):
                    m.d.comb += [
                        out.tdata.eq(pays[i].tdata), out.tkeep.eq(pays[i].tkeep),
                        out.tlast.eq(pays[i].tlast), out.tvalid.eq(in_payload & pays[i].tvalid),
                        pays[i].tready.eq(in_payload & out.tready),
                    ]

        # Round robin: when the granted plane has nothing, move to the next
        # plane (after the granted one) that has a packet.
        nxt = Signal(range(n))
        m.d.comb += nxt.eq(grant)
        with m.Switch(grant):
            for g in range(n):
                with m.Case(g):
                    for k in reversed(range(1, n + 1)):
                        cand = (g + k) % n
                        with m.If(pkts[cand].valid):
                            m.d.comb += nxt.eq(cand)

        with m.If(in_payload):
            with m.If(out.tvalid & out.tready & out.tlast):
                m.d.sync += [in_payload.eq(0), grant.eq(Mux(grant == n - 1, 0, grant + 1))]
        with m.Elif(taken):
            with m.If(has_payload):
                m.d.sync += in_payload.eq(1)
            with m.Else():
                m.d.sync += grant.eq(Mux(grant == n - 1, 0, grant + 1))
        with m.Elif(~cur_valid):
            m.d.sync += grant.eq(nxt)
        return m
