"""Formal proof of UartAxilBridge (rtl/uart_bridge.py), the AXI4-Lite manager: the AXI4-Lite
handshake rules (ARM IHI 0022E, A3.2.1): AWVALID held with AWADDR / AWPROT until AWREADY,
WVALID with WDATA / WSTRB until WREADY, ARVALID with ARADDR / ARPROT until ARREADY; one
transaction at a time and exactly one response per request (a new AW / W / AR only once
the previous transaction's B / R was taken, never a read and a write outstanding
together); BREADY and RREADY always high (a response is taken the cycle it is offered).

Parameters: ``clk_hz`` 1 MHz, ``baud`` 125 000 (divisor 8, the smallest the bridge
allows), ``timeout_us`` 160 (160 clocks, the smallest allowed).

Abstraction of the UART: a request takes ~80 clocks per byte on the serial line (7..11
bytes), far beyond a BMC bound, so the proof replaces the two 8N1 blocks of the same file
(``UartRx``, ``UartTx``; the bridge builds them by name) with free models of their ports
(:class:`FreeUartRx`, :class:`FreeUartTx`) that allow every behaviour of the real ones
and more: received-byte pulses at any time at least 2 clocks apart (real: >= 9.5 bit
times), with any byte, stable from the clock before its pulse (real: from a bit time
before), framing errors at any time; a transmitter ready at any time (real: idle between
10-bit bytes).  The properties hold for the bridge with any such UART, hence with the
real one.  The AXI subordinate is free under the AXI contract (responses held until
taken, B only after AW and W, R only after AR, any READY, any RESP / RDATA).

Unbounded, by k-induction: every reachable state, including the timeout (160 idle clocks)
and BAD_FRAME (drained after 320 quiet clocks) paths that no BMC bound reached.  The
stated properties alone are not inductive (induction k=8 failed: the wrapper's handshake
counters were not tied to the bridge's state machine, e.g. a write counted outstanding
while the bridge waits in HUNT); the wrapper also asserts, as auxiliary invariants proved
by the same induction, that the FSM is in a defined state and that a write is outstanding
(AW and W each offered or accepted) exactly in AXI_W, a read exactly in AXI_R.  It closes
at k=1; the proof runs at k=28 so that its base case (28 clocks from reset: a whole read
request and its first AR) refutes the mutant below.  Requests are counted as "accepted and
not yet answered" per channel (at most 1, so the counters never wrap).
"""

import pytest
from amaranth.hdl import Assert, Assume, Elaboratable, Module, Signal
from amaranth.hdl._ast import AnySeq
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mrcnic.rtl import uart_bridge
from .formal import Internals, drive_inputs, mutant, require_failed, require_proved, run_formal, stream_rule

K = 28          # induction length (closes at 1; see above)
PARAMS = dict(clk_hz=1_000_000, baud=125_000, timeout_us=160)


class FreeUartRx(wiring.Component):
    """UartRx's ports, driven freely: a one-clock ``valid`` pulse whenever (never two in a
    row), the byte any value, changing only on a clock edge not followed by a pulse (the
    bridge registers comparisons of the byte one clock before the pulse)."""

    def __init__(self, divisor):
        super().__init__({"rx": In(1, init=1), "data": Out(stream.Signature(8, always_ready=True)),
                          "framing_error": Out(1)})

    def elaborate(self, platform):
        m = Module()
        nv, fe, nb = Signal(), Signal(), Signal(8)
        shreg = Signal(8)
        m.d.comb += [nv.eq(AnySeq(1)), fe.eq(AnySeq(1)), nb.eq(AnySeq(8))]
        m.d.sync += [self.data.valid.eq(nv & ~self.data.valid), self.framing_error.eq(fe)]
        with m.If(~nv):
            m.d.sync += shreg.eq(nb)
        m.d.comb += self.data.payload.eq(shreg)
        return m


class FreeUartTx(wiring.Component):
    """UartTx's ports, driven freely: ``ready`` any value on any clock."""

    def __init__(self, divisor):
        super().__init__({"data": In(stream.Signature(8)), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.data.ready.eq(AnySeq(1))
        return m


def with_free_uart(mod):
    """Make the bridge of module ``mod`` build the free UART models."""
    mod.UartRx, mod.UartTx = FreeUartRx, FreeUartTx
    return mod


class UartBridgeProof(Elaboratable):
    """UartAxilBridge with free UART models, under the AXI4-Lite subordinate contract."""

    def __init__(self, cls=uart_bridge.UartAxilBridge):
        self.dut = cls(**PARAMS)

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        ins = Internals(dut, platform)
        m.submodules.dut = ins.frag
        drive_inputs(m, dut)
        a = dut.m_axil
        # requests accepted and not yet answered, per channel (a B answers one AW and one W)
        aw_o, w_o, r_o = (Signal(2, name=n) for n in ("aw_o", "w_o", "r_o"))
        b_fire, r_fire = a.bvalid & a.bready, a.rvalid & a.rready
        m.d.sync += [aw_o.eq(aw_o + (a.awvalid & a.awready) - b_fire),
                     w_o.eq(w_o + (a.wvalid & a.wready) - b_fire),
                     r_o.eq(r_o + (a.arvalid & a.arready) - r_fire)]
        # Contract (AXI4 A3.2.1): the subordinate holds BVALID with BRESP until BREADY,
        # RVALID with RDATA / RRESP until RREADY.
        stream_rule(m, a.bvalid, a.bready, a.bresp, check=Assume)
        stream_rule(m, a.rvalid, a.rready, [a.rdata, a.rresp], check=Assume)
        # Contract (A3.3.1): B only after both the AW and the W of a write were accepted
        # and not yet answered; R only after an AR not yet answered.  AWREADY / WREADY /
        # ARREADY, BRESP / RRESP / RDATA are free.
        with m.If(a.bvalid):
            m.d.comb += Assume((aw_o != 0) & (w_o != 0))
        with m.If(a.rvalid):
            m.d.comb += Assume(r_o != 0)

        # Obligation (A3.2.1): the manager holds each VALID with its payload until READY.
        stream_rule(m, a.awvalid, a.awready, [a.awaddr, a.awprot])
        stream_rule(m, a.wvalid, a.wready, [a.wdata, a.wstrb])
        stream_rule(m, a.arvalid, a.arready, [a.araddr, a.arprot])
        # Responses are taken as offered (documented: BREADY / RREADY always high).
        m.d.comb += Assert(a.bready & a.rready)
        # Exactly one response per request, one transaction at a time: a request is offered
        # only when every earlier one of its kind was answered, and never a read and a write
        # outstanding together (a write is outstanding from AW/W offered to B taken).
        with m.If(a.awvalid):
            m.d.comb += Assert(aw_o == 0)
        with m.If(a.wvalid):
            m.d.comb += Assert(w_o == 0)
        with m.If(a.arvalid):
            m.d.comb += Assert(r_o == 0)
        m.d.comb += [Assert(aw_o <= 1), Assert(w_o <= 1), Assert(r_o <= 1)]
        w_out = a.awvalid | a.wvalid | (aw_o != 0) | (w_o != 0)
        r_out = a.arvalid | (r_o != 0)
        m.d.comb += Assert(~(w_out & r_out))

        # Auxiliary invariants (for the induction): the bridge's FSM is in a defined state;
        # a write is outstanding (AW and W each offered or accepted) exactly in AXI_W, a
        # read exactly in AXI_R.
        st = ins.signal("fsm_state")
        S = ins.states(st)
        m.d.comb += Assert(st < len(S))
        with m.If(st == S["AXI_W"]):
            m.d.comb += [Assert(a.awvalid ^ (aw_o == 1)), Assert(a.wvalid ^ (w_o == 1))]
        with m.Else():
            m.d.comb += Assert(~a.awvalid & ~a.wvalid & (aw_o == 0) & (w_o == 0))
        with m.If(st == S["AXI_R"]):
            m.d.comb += Assert(a.arvalid ^ (r_o == 1))
        with m.Else():
            m.d.comb += Assert(~a.arvalid & (r_o == 0))
        return m


@pytest.mark.formal
def test_uart_bridge_induction(monkeypatch):
    """UartAxilBridge, free UART models: every property above, unbounded."""
    monkeypatch.setattr(uart_bridge, "UartRx", FreeUartRx)
    monkeypatch.setattr(uart_bridge, "UartTx", FreeUartTx)
    require_proved(run_formal(UartBridgeProof(), "uart_bridge", mode="prove", depth=K))


@pytest.mark.formal
def test_uart_bridge_mutant_fails():
    """Teeth: ARVALID dropped after one clock whether or not ARREADY came (the read
    request withdrawn before its handshake)."""
    mod = with_free_uart(mutant(uart_bridge, "with m.If(axil.arready):", "with m.If(1):"))
    require_failed(run_formal(UartBridgeProof(mod.UartAxilBridge), "uart_bridge_mutant",
                              mode="prove", depth=K))
