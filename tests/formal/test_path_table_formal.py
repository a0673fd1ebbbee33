"""Formal proof of the path table's eligibility (rtl/path_table.py), the spray scheduler's
only source of candidates: an entry is eligible (may carry data) exactly when its last
state write made it GOOD and its last wide write gave it a non-zero weight, so DENIED and
ASSUMED_BAD entries are never eligible.  Bounded at 10 clocks from reset (every entry
written on either port, or both, in every cycle, any number of times: each entry's flags
depend only on its last writes, so 10 clocks cover every sequence of write kinds).  Not
k-inductive as stated: the model's GOOD/weight pair is compared only through their AND.

Small parameters: ``depth=16`` entries (the property is per entry; the address decode is
the same two-level 16 x 16 one for every depth).
"""

import pytest
from amaranth.hdl import Assert, Elaboratable, Module, Signal

from mrcnic.rtl import path_table
from mrcnic.rtl.layouts import EvState
from .formal import drive_inputs, mutant, require_failed, require_proved, run_formal

DEPTH = 16


class PathTableProof(Elaboratable):
    """A reference model of every entry's state and weight, kept from the two write ports
    as the block documents them (writes to addresses >= depth ignored; when both ports hit
    one entry in a cycle the state port's state wins), against ``eligible`` and ``multi``.
    All inputs are free: the ports have no contract beyond their width."""

    def __init__(self, cls=path_table.PathTable):
        self.dut = cls(depth=DEPTH)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        drive_inputs(m, dut)
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
        return m


@pytest.mark.formal
def test_path_table_eligible_bounded_10():
    """Eligible == GOOD and weight != 0, multi == weight >= 2, for every entry, 10 clocks."""
    require_proved(run_formal(PathTableProof(), "path_table", mode="bmc", depth=10))


@pytest.mark.formal
def test_path_table_mutant_fails():
    """Teeth: a DENIED state written on the state port left eligible."""
    mod = mutant(path_table, "st_good = self.st_state == EvState.GOOD",
                 "st_good = self.st_state != EvState.ASSUMED_BAD")
    require_failed(run_formal(PathTableProof(mod.PathTable), "path_table_mutant", mode="bmc",
                              depth=10))
