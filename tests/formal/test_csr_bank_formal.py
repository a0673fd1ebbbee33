"""Formal proof of CsrBank (rtl/csr.py), the AXI4-Lite subordinate: the AXI4-Lite
handshake rules (ARM IHI 0022E, A3.2.1): BVALID held with BRESP until BREADY, RVALID held
with RDATA / RRESP until RREADY; exactly one response per request and none without one
(B only for an accepted AW and W, R only for an accepted AR; at most two writes accepted
and unanswered -- one executed or answered, one in the AW/W latches -- and one read);
B and R never offered together; and no AW, W or AR accepted in the reset lap (the RW
readback copy being rewritten).

Small parameters: a map of four registers (RW with a restricted field, so writes can answer
SLVERR; RO; CMD; W1C) and no tables: the RW readback copy then has its minimum depth, 16
words, so the bank is closed for exactly clocks 0..15 (asserted).  Unbounded, by
k-induction.  The stated properties alone are not inductive (induction k=8 failed: the
wrapper's counters and clock count were not tied to the bank's internal state); the
wrapper also asserts, as auxiliary invariants proved by the same induction, that the reset
lap's counter follows the clock, that the FSM is in a defined state with BVALID / RVALID
exactly in its response states, and that the AW / W latches plus the FSM hold exactly the
requests not yet answered.  It closes at k=1; the proof runs at k=22 so that its base case
(22 clocks from reset: the reset lap, then a read answered) refutes the mutant below.
Requests are counted as "accepted and not yet answered" per channel (at most 2 / 2 / 1, so
the counters never wrap).
"""

import pytest
from amaranth.hdl import Assert, Assume, Elaboratable, Module, Signal

from mrcnic.regmap import Access, Block, Field, RegMap, Register
from mrcnic.rtl import csr
from .formal import Internals, drive_inputs, mutant, require_failed, require_proved, run_formal, stream_rule

K = 22          # induction length (closes at 1; see above)
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
        dut = self.dut
        ins = Internals(dut, platform)
        m.submodules.dut = ins.frag
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

        # Exactly one response per request (A3.3, B1.1): requests accepted and not yet
        # answered, per channel (a B answers one AW and one W, an R one AR).
        aw_o, w_o, r_o = (Signal(3, name=n) for n in ("aw_o", "w_o", "r_o"))
        b_fire, r_fire = s.bvalid & s.bready, s.rvalid & s.rready
        m.d.sync += [aw_o.eq(aw_o + (s.awvalid & s.awready) - b_fire),
                     w_o.eq(w_o + (s.wvalid & s.wready) - b_fire),
                     r_o.eq(r_o + (s.arvalid & s.arready) - r_fire)]
        # no response without its request: B only after both AW and W of the write were
        # accepted (A3.3.1), R only after its AR (so never more responses than requests)
        with m.If(s.bvalid):
            m.d.comb += Assert((aw_o != 0) & (w_o != 0))
        with m.If(s.rvalid):
            m.d.comb += Assert(r_o != 0)
        # bounded buffering: a write being executed / answered plus one more AW and W in
        # the latches (they accept again as soon as the write executes, while its B
        # waits); a read only from IDLE, so one at a time
        m.d.comb += [Assert(aw_o <= 2), Assert(w_o <= 2), Assert(r_o <= 1)]
        # one transaction at a time: never a B and an R offered together
        m.d.comb += Assert(~(s.bvalid & s.rvalid))

        # The reset lap: nothing accepted in clocks 0 .. CLOSED-1.
        clk = Signal(6)
        with m.If(clk != 63):
            m.d.sync += clk.eq(clk + 1)
        with m.If(clk < CLOSED):
            m.d.comb += Assert(~s.awready & ~s.wready & ~s.arready)

        # Auxiliary invariants (for the induction) on the bank's internal state: the reset
        # lap's counter follows the clock; the FSM is in a defined state; the AW / W latches
        # and the FSM hold exactly the requests not yet answered.
        init_busy, init_cnt = ins.signal("sh_init_busy"), ins.signal("sh_init_cnt")
        w_full = ins.signal("w_full")
        aw_full, = (x for x in ins.drivers(s.awready) if x.name == "$signal")
        st = ins.signal("fsm_state")
        S = ins.states(st)
        with m.If(clk < CLOSED):
            m.d.comb += [Assert(init_busy), Assert(init_cnt == clk)]
        with m.Else():
            m.d.comb += Assert(~init_busy)
        m.d.comb += [
            Assert(st < len(S)),
            Assert(s.bvalid == (st == S["BRESP"])),
            Assert(s.rvalid == (st == S["RRESP"])),
            Assert(aw_o == aw_full + (st == S["BRESP"])),
            Assert(w_o == w_full + (st == S["BRESP"])),
            Assert(r_o == ((st == S["READ"]) | (st == S["READ2"]) | (st == S["RRESP"]))),
            Assert(ins.signal("rd_wait") == 0),
        ]
        with m.If(st == S["WRITE"]):
            m.d.comb += Assert(aw_full & w_full)
        with m.If(init_busy):
            m.d.comb += [Assert(st == S["IDLE"]), Assert(~aw_full & ~w_full)]
        return m


@pytest.mark.formal
def test_csr_bank_induction():
    """CsrBank, 4-register map: every property above, unbounded."""
    require_proved(run_formal(CsrBankProof(), "csr_bank", mode="prove", depth=K))


@pytest.mark.formal
def test_csr_bank_mutant_fails():
    """Teeth: RVALID dropped without waiting for RREADY (the read response may be lost)."""
    mod = mutant(csr, "with m.If(axil.rready):", "with m.If(1):")
    require_failed(run_formal(CsrBankProof(mod.CsrBank), "csr_bank_mutant", mode="prove",
                              depth=K))
