"""Formal proof of CsrBank (rtl/csr.py), the AXI4-Lite subordinate: the AXI4-Lite
handshake rules (ARM IHI 0022E, A3.2.1): BVALID held with BRESP until BREADY, RVALID held
with RDATA / RRESP until RREADY; exactly one response per request and none without one
(B only for an accepted AW and W, R only for an accepted AR; at most two writes accepted
and unanswered -- one executed or answered, one in the AW/W latches -- and one read);
B and R never offered together; and no AW, W or AR accepted in the reset lap (the RW
readback copy being rewritten).

Small parameters: a map of four registers (RW with a restricted field, so writes can answer
SLVERR; RO; CMD; W1C) and no tables: the RW readback copy then has its minimum depth, 16
words, so the bank is closed for exactly clocks 0..15 (asserted).  Bounded at 40 clocks
from reset: the reset lap and then 24 clocks of traffic, several transactions (a write
takes AW/W at clock 16 and answers B at 19 at the earliest, a read AR at 16..20 and R 3
clocks later): writes back to back with the next AW/W latched while B waits, reads and
writes interleaved (an AR accepted with only AW or only W latched), any BREADY / RREADY
backpressure, any addresses (mapped or not) and strobes.  k-induction does not close (k=8:
the wrappers' counters and clock count are not tied to the bank's internal state).
"""

import pytest
from amaranth.hdl import Assert, Assume, Elaboratable, Module, Signal

from mrcnic.regmap import Access, Block, Field, RegMap, Register
from mrcnic.rtl import csr
from .formal import drive_inputs, mutant, require_failed, require_proved, run_formal, stream_rule

DEPTH = 40
CLOSED = 16          # clocks after reset without a transaction: the RW copy's depth


def small_map():
    """Four registers, one of each behaviour the bus sees (storage, port, strobe, W1C)."""
    return RegMap([Block("T", 0, "formal test block", [
        Register("CTRL", 0x0, Access.RW, [Field("en", 0, 1, 1), Field("mode", 4, 2, 0,
                                                                      values=range(3))]),
        Register("STAT", 0x4, Access.RO, [Field("value", 0, 8)]),
        Register("GO", 0x8, Access.CMD, [Field("value", 0, 4)]),
        Register("EVT", 0xC, Access.W1C, [Field("value", 0, 2)]),
    ])], [], {})


class CsrBankProof(Elaboratable):
    """CsrBank under the AXI4-Lite manager contract (valids held with their payload)."""

    def __init__(self, cls=csr.CsrBank):
        self.dut = cls(small_map())

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        drive_inputs(m, dut)
        s = dut.s_axil
        # Contract (AXI4 A3.2.1): the manager holds AWVALID / WVALID / ARVALID and their
        # payload until the matching READY.  BREADY / RREADY are free (any value, any clock).
        stream_rule(m, s.awvalid, s.awready, [s.awaddr, s.awprot], check=Assume)
        stream_rule(m, s.wvalid, s.wready, [s.wdata, s.wstrb], check=Assume)
        stream_rule(m, s.arvalid, s.arready, [s.araddr, s.arprot], check=Assume)

        # Obligation (A3.2.1): the subordinate holds BVALID with BRESP until BREADY, RVALID
        # with RDATA / RRESP until RREADY.
        stream_rule(m, s.bvalid, s.bready, s.bresp)
        stream_rule(m, s.rvalid, s.rready, [s.rdata, s.rresp])

        # Exactly one response per request (A3.3, B1.1): handshakes counted per channel.
        aw_n, w_n, b_n, ar_n, r_n = (Signal(5, name=n) for n in ("aw_n", "w_n", "b_n", "ar_n", "r_n"))
        m.d.sync += [
            aw_n.eq(aw_n + (s.awvalid & s.awready)), w_n.eq(w_n + (s.wvalid & s.wready)),
            b_n.eq(b_n + (s.bvalid & s.bready)),
            ar_n.eq(ar_n + (s.arvalid & s.arready)), r_n.eq(r_n + (s.rvalid & s.rready)),
        ]
        m.d.comb += [
            # never more responses than requests
            Assert(b_n <= aw_n), Assert(b_n <= w_n), Assert(r_n <= ar_n),
            # bounded buffering: a write being executed / answered plus one more AW and W in
            # the latches (they accept again as soon as the write executes, while its B
            # waits); a read only from IDLE, so one at a time
            Assert(aw_n - b_n <= 2), Assert(w_n - b_n <= 2), Assert(ar_n - r_n <= 1),
        ]
        # no response without its request: B only after both AW and W of the write were
        # accepted (A3.3.1), R only after its AR
        with m.If(s.bvalid):
            m.d.comb += Assert((aw_n != b_n) & (w_n != b_n))
        with m.If(s.rvalid):
            m.d.comb += Assert(ar_n != r_n)
        # one transaction at a time: never a B and an R offered together
        m.d.comb += Assert(~(s.bvalid & s.rvalid))

        # The reset lap: nothing accepted in clocks 0 .. CLOSED-1.
        clk = Signal(6)
        with m.If(clk != 63):
            m.d.sync += clk.eq(clk + 1)
        with m.If(clk < CLOSED):
            m.d.comb += Assert(~s.awready & ~s.wready & ~s.arready)
        return m


@pytest.mark.formal
def test_csr_bank_bounded_40():
    """CsrBank, 4-register map: every property above for 40 clocks from reset."""
    require_proved(run_formal(CsrBankProof(), "csr_bank", mode="bmc", depth=DEPTH))


@pytest.mark.formal
def test_csr_bank_mutant_fails():
    """Teeth: RVALID dropped without waiting for RREADY (the read response may be lost)."""
    mod = mutant(csr, "with m.If(axil.rready):", "with m.If(1):")
    require_failed(run_formal(CsrBankProof(mod.CsrBank), "csr_bank_mutant", mode="bmc",
                              depth=DEPTH))
