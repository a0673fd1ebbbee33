# amaranth: UnusedElaboratable=no
"""SprayScheduler(clients=2): data and ACK requests share one scheduler and one path table.

cocotb testbench (``run_*`` coroutines) and its pytest wrapper.  Each client is
checked against its own instance of the reference model of ``test_spray`` (the
clients keep separate per-QP positions), every decision must carry the record
of its index, the two clients together get one decision per clock, ``avoid``
applies to client 0 only, and random request gaps and backpressure on either
client lose, duplicate or reorder nothing.  The single-client behaviour is the
subject of ``test_spray.py``.
"""

import random

import cocotb
import pytest
from cocotb.triggers import FallingEdge, ReadOnly

from mrcnic.rtl.spray import SprayScheduler
from mrcnic.sim.rtlsim import run_rtl
from mrcnic.sim.tb import start
from tests.rtl.test_spray import (_ENT, _ENT_OFF, GOOD, INPUTS, TB, Model, _field, mixed_profile,
                                  req_bits)

CLIENTS = ("", "_1")


async def drive(tb, n_cycles, requests, ready, offer, avoid=0):
    """Drive both clients for ``n_cycles``; ``requests[k]`` iterates (qp, base, count).

    ``ready[k](cycle)`` / ``offer[k](cycle)`` give client k's decision.ready and whether
    it offers its next request.  Returns per client the decisions (dicts with ``cycle``,
    ``index`` and the entry fields) and the requests taken, in order.
    """
    dut = tb.dut
    dut.avoid.value = avoid
    pend = [next(r, None) for r in requests]
    decs, taken = ([], []), ([], [])
    for _ in range(n_cycles):
        c = tb.cycle
        valid, rdy = [], []
        for k, sfx in enumerate(CLIENTS):
            v = pend[k] is not None and (offer[k](c) or getattr(dut, f"req{sfx}__valid").value == 1)
            if v:
                getattr(dut, f"req{sfx}__payload").value = req_bits(*pend[k])
            getattr(dut, f"req{sfx}__valid").value = int(v)
            r = ready[k](c)
            getattr(dut, f"decision{sfx}__ready").value = int(r)
            valid.append(v)
            rdy.append(r)
        await ReadOnly()
        for k, sfx in enumerate(CLIENTS):
            if rdy[k] and getattr(dut, f"decision{sfx}__valid").value == 1:
                v = int(getattr(dut, f"decision{sfx}__payload").value)
                ent = v >> _ENT_OFF
                decs[k].append({"cycle": c, "index": v & 0xFF,
                                **{f: _field(ent, _ENT, f)
                                   for f in ("ev", "port", "state", "weight", "seg_base", "da")}})
            if valid[k] and getattr(dut, f"req{sfx}__ready").value == 1:
                taken[k].append(pend[k])
                pend[k] = next(requests[k], None)
        await FallingEdge(dut.clk)
        tb.cycle += 1
    for sfx in CLIENTS:
        getattr(dut, f"req{sfx}__valid").value = 0
        getattr(dut, f"decision{sfx}__ready").value = 0
    return decs, taken


def mixed_requests(rng, n, profiles):
    """``n`` requests (qp, base, count), each one of ``profiles`` at random."""
    return [rng.choice(profiles) for _ in range(n)]


async def setup(dut, seed):
    """Reset with both clients' inputs driven; a 32-entry mixed table (GOOD/BAD/DENIED/weight 0)."""
    tb = TB(dut)
    await start(dut, INPUTS + ["req_1__valid", "req_1__payload", "decision_1__ready"])
    await FallingEdge(dut.clk)
    rng = random.Random(seed)
    await tb.fill(mixed_profile(rng, 32, bad=4, denied=2, zero=2))
    return tb, rng


@cocotb.test()
async def run_full_rate(dut):
    """Both clients always requesting and ready: one decision per clock in total, half each."""
    tb, rng = await setup(dut, 11)
    req_lists = [mixed_requests(rng, 3000, [(0, 0, 32), (1, 8, 24)]),
                 mixed_requests(rng, 3000, [(0, 0, 32), (1, 16, 16)])]
    always = (lambda c: True, lambda c: True)
    decs, taken = await drive(tb, 3000, [iter(x) for x in req_lists], always, always)
    cycles = sorted(d["cycle"] for k in (0, 1) for d in decs[k])
    assert len(cycles) == len(set(cycles)), "two decisions in one cycle"
    span = cycles[-1] - cycles[0] + 1
    assert len(cycles) == span, f"{len(cycles)} decisions in {span} cycles"
    assert abs(len(decs[0]) - len(decs[1])) <= 2, (len(decs[0]), len(decs[1]))
    for k in (0, 1):
        tb.check_entries(decs[k])
        model = Model(tb.table, tb.depth)         # each client: its own positions
        picks = [model.pick(*r) for r in taken[k][:len(decs[k])]]
        assert [d["index"] for d in decs[k]] == picks, k


@cocotb.test()
async def run_backpressure(dut):
    """Random gaps and backpressure on both clients; client 0 avoids entries, client 1 not."""
    tb, rng = await setup(dut, 12)
    avoid = (1 << 3) | (1 << 17) | (1 << 30)
    for i in (3, 17, 30):
        await tb.write(i, weight=2)              # GOOD, eligible unless avoided
    reqs = [[(0, 0, 32)] * 1500, [(1, 0, 32)] * 1500]
    offer = (lambda c: rng.random() < 0.6, lambda c: rng.random() < 0.5)
    ready = (lambda c: rng.random() < 0.5, lambda c: rng.random() < 0.7)
    decs, taken = await drive(tb, 5000, [iter(r) for r in reqs], ready, offer, avoid=avoid)
    # drain: everything taken gets its decision
    more, _ = await drive(tb, 40, [iter([]), iter([])], (lambda c: True,) * 2, (lambda c: False,) * 2,
                          avoid=avoid)
    for k in (0, 1):
        decs[k].extend(more[k])
        assert len(decs[k]) == len(taken[k]) > 500, (k, len(decs[k]), len(taken[k]))
        tb.check_entries(decs[k])
        assert all(d["state"] == GOOD for d in decs[k])
    idx0 = [d["index"] for d in decs[0]]
    idx1 = [d["index"] for d in decs[1]]
    assert not set(idx0) & {3, 17, 30}
    assert {3, 17, 30} <= set(idx1)
    model = Model(tb.table, tb.depth)
    assert idx1 == [model.pick(*r) for r in taken[1]]


@pytest.mark.parametrize("depth", [32])
def test_spray_clients(tmp_path, depth):
    run_rtl(SprayScheduler(depth, clients=2), toplevel="spray",
            test_module="tests.rtl.test_spray_clients", build_dir=tmp_path / f"spray2_{depth}",
            env={"depth": depth}, quiet=True)


@pytest.mark.parametrize("clients", [0, 3])
def test_bad_clients(clients):
    with pytest.raises(ValueError, match="clients"):
        SprayScheduler(32, clients=clients)
