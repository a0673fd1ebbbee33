"""Formal proof of the path table's eligibility (rtl/path_table.py), the spray scheduler's
only source of candidates: an entry is eligible (may carry data) exactly when its last
state write made it GOOD and its last wide write gave it a non-zero weight, so DENIED and
ASSUMED_BAD entries are never eligible.  Unbounded, by k-induction (k=2): the stated
properties alone are not inductive (the model's GOOD/weight pair is compared with the
block only through their AND), so the wrapper also asserts that the block's internal
"GOOD" and "weight non-zero" flip-flops equal the model's, which the same induction proves.

Small parameters: ``depth=16`` entries (the property is per entry; the address decode is
the same two-level 16 x 16 one for every depth).
"""

import pytest
from amaranth.hdl import Assert, Elaboratable, Module, Signal

from mrcnic.rtl import path_table
from mrcnic.rtl.layouts import EvState
from .formal import Internals, drive_inputs, mutant, require_failed, require_proved, run_formal

DEPTH = 16
K = 2           # induction length (it closes at 1; 2 gives the mutant's counterexample room)


class PathTableProof(Elaboratable):
    """A reference model of every entry's state and weight, kept from the two write ports
    as the block documents them (writes to addresses >= depth ignored; when both ports hit
    one entry in a cycle the state port's state wins), against ``eligible`` and ``multi``.
    All inputs are free: the ports have no contract beyond their width."""

    def __init__(self, cls=path_table.PathTable):
        self.dut = cls(depth=DEPTH)

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        ins = Internals(dut, platform)
        m.submodules.dut = ins.frag
        drive_inputs(m, dut)
        # the block's per-entry flags (``good``, ``wnz``; ``multi`` is ``wmul`` itself)
        dut_good, dut_wnz = ins.signal("good"), ins.signal("wnz")
        for i in range(DEPTH):
            good = Signal(name=f"good{i}")           # the entry's state is GOOD
            wnz = Signal(name=f"wnz{i}")             # its weight is non-zero
            wmul = Signal(name=f"wmul{i}")           # its weight is 2 or more
            w_hit = dut.w_en & (dut.w_addr == i)
            st_hit = dut.st_en & (dut.st_addr == i)
            with m.If(st_hit):
                m.d.sync += good.eq(dut.st_state == EvState.GOOD)
            with m.Elif(w_hit):
                m.d.sync += good.eq(dut.w_data.state == EvState.GOOD)
            with m.If(w_hit):
                m.d.sync += [wnz.eq(dut.w_data.weight != 0), wmul.eq(dut.w_data.weight >= 2)]
            m.d.comb += [Assert(dut.eligible[i] == (good & wnz)),
                         Assert(dut.multi[i] == wmul)]
            # auxiliary invariants (for the induction): the block's flags are the model's
            m.d.comb += [Assert(dut_good[i] == good), Assert(dut_wnz[i] == wnz)]
        return m


@pytest.mark.formal
def test_path_table_eligible_induction():
    """Eligible == GOOD and weight != 0, multi == weight >= 2, for every entry, unbounded."""
    require_proved(run_formal(PathTableProof(), "path_table", mode="prove", depth=K))


@pytest.mark.formal
def test_path_table_mutant_fails():
    """Teeth: a DENIED state written on the state port left eligible."""
    mod = mutant(path_table, "st_good = self.st_state == EvState.GOOD",
                 "st_good = self.st_state != EvState.ASSUMED_BAD")
    require_failed(run_formal(PathTableProof(mod.PathTable), "path_table_mutant", mode="prove",
                              depth=K))
