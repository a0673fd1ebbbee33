"""Nscc: per-QP NSCC window (fair/proportional increase, MD once per epoch, quick adapt, clamps).

cocotb testbench (``run_*`` coroutines) and its pytest wrappers.  The
testbench drives ``now_ns`` itself, so every update's timing is exact, and a
Python model of the documented update rule predicts ``cwnd`` after every
update: directed cases first (each quadrant, quick adapt, clamps, once per
epoch), then 300 random updates over two QPs, the worst-case update latency
and configuration writes during an update.
"""

import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from mrcnic.rtl.nscc import (CONFIG_CYCLES, NSCC_DEFAULTS, UPDATE_CYCLES, Nscc, NsccConfig,
                             NsccUpdate, nscc_config)
from mrcnic.sim.rtlsim import run_rtl
from mrcnic.sim.tb import StreamSource, pack, start

M32 = (1 << 32) - 1
INPUTS = ["upd__valid", "upd__payload", "cfg_w_en", "cfg_w_addr", "cfg_w_data", "now_ns"]


def flog2(x):
    return max(x.bit_length() - 1, 0)


class Model:
    """Reference model of one QP (the rule of the Nscc docstring, bit-exact)."""

    def __init__(self, cfg, now):
        self.c = cfg
        self.cwnd = min(max(cfg["init_cwnd"], cfg["min_cwnd"]), cfg["max_cwnd"])
        if cfg["init_cwnd"] > cfg["max_cwnd"]:
            self.cwnd = cfg["max_cwnd"]
        self.epoch, self.cur, self.last, self.md, self.qa = now, 0, 0, False, False
        self.decreases = self.quick_adapts = 0

    def update(self, now, acked, rtt, ecn, trim):
        c = self.c
        base, target = c["base_rtt_ns"], c["target_delay_ns"]
        q = max(0, rtt - base)
        since = (now - self.epoch) & M32
        if since >= base:
            last = 0 if since >= 2 * base else self.cur
            self.last, self.cur, self.md, self.qa, self.epoch = last, acked, False, False, now
            achieved = max(last, acked)
        else:
            self.cur = (self.cur + acked) & M32
            achieved = max(self.last, self.cur)
        cw = self.cwnd
        fi = (c["fi_bytes"] * acked) >> flog2(cw)
        pi = (((c["eta_q8"] * acked) & M32) * ((target - q) & 0xFFFFFF)) >> (flog2(target) + 9)
        if trim:
            if c["qa_enable"] and not self.qa:
                new, self.qa = min(max(achieved, c["min_cwnd"]), cw), True
                self.quick_adapts += 1
            else:
                new = cw
        elif ecn:
            if q > target and not self.md:
                new, self.md = cw - ((cw * c["md_q8"]) >> 8), True
                self.decreases += 1
            else:
                new = cw
        elif q < target:
            new = cw + fi + pi
        else:
            new = cw + fi
        self.cwnd = min(max(new, c["min_cwnd"]), c["max_cwnd"])
        return self.cwnd


class TB:
    def __init__(self, dut):
        self.dut = dut

    async def start(self):
        await start(self.dut, INPUTS)
        self.upd = StreamSource(self.dut, "upd", self.dut.clk)
        self.now = 1000
        self.dut.now_ns.value = self.now
        self.models = {}

    async def configure(self, qp, **kw):
        cfg = dict(NSCC_DEFAULTS, **kw)
        self.dut.cfg_w_addr.value = qp
        self.dut.cfg_w_data.value = pack(NsccConfig, cfg)
        self.dut.cfg_w_en.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.cfg_w_en.value = 0
        self.models[qp] = Model(cfg, self.now)
        await RisingEdge(self.dut.clk)
        assert self.cwnd(qp) == cfg["init_cwnd"]          # at once, then clamped (when idle)
        await ClockCycles(self.dut.clk, CONFIG_CYCLES)
        assert self.cwnd(qp) == self.models[qp].cwnd

    def cwnd(self, qp):
        return (int(self.dut.cwnd.value) >> (32 * qp)) & M32

    async def update(self, qp, *, dt=100, acked=0, rtt=0, ecn=0, trim=0):
        """Advance time by dt ns, apply one update, check cwnd; return the new cwnd."""
        self.now = (self.now + dt) & M32
        self.dut.now_ns.value = self.now
        self.upd.send(pack(NsccUpdate, {"qp": qp, "acked": acked, "rtt_ns": rtt, "ecn": ecn,
                                        "trim": trim}))
        while not self.upd.empty():
            await RisingEdge(self.dut.clk)
        await ClockCycles(self.dut.clk, UPDATE_CYCLES + 1)
        want = self.models[qp].update(self.now, acked, rtt, ecn, trim)
        got = self.cwnd(qp)
        assert got == want, f"qp{qp} {acked=} {rtt=} {ecn=} {trim=}: cwnd {got} != model {want}"
        return got


@cocotb.test()
async def run_directed(dut):
    """Each quadrant, once-per-epoch MD, quick adapt, clamps."""
    tb = TB(dut)
    await tb.start()
    await tb.configure(0, base_rtt_ns=2000, target_delay_ns=1000, min_cwnd=4096, max_cwnd=65536,
                       init_cwnd=16384, fi_bytes=1024, md_q8=128, eta_q8=0, qa_enable=1)
    # no ECN, low delay: fair increase only (eta 0) = 1024 * 4096 >> floor(log2(16384)) = 256
    assert await tb.update(0, acked=4096, rtt=2100) == 16384 + 256
    # no ECN, delay above target: fair increase as well
    assert await tb.update(0, acked=4096, rtt=9000) > 16384 + 256
    before = tb.cwnd(0)
    # ECN with low delay: no change
    assert await tb.update(0, dt=3000, acked=1000, rtt=2500, ecn=1) == before
    # ECN with high delay: halve (md 0.5), only once per epoch
    half = before - (before * 128 >> 8)
    assert await tb.update(0, dt=100, acked=1000, rtt=9000, ecn=1) == half
    assert await tb.update(0, dt=100, acked=1000, rtt=9000, ecn=1) == half
    # next epoch: decreases again
    assert await tb.update(0, dt=2500, acked=1000, rtt=9000, ecn=1) < half
    # quick adapt: window cut to the bytes acked in this/last epoch (>= min_cwnd), once per epoch
    assert await tb.update(0, dt=2500, acked=1000, rtt=2100) > 4096
    assert await tb.update(0, dt=100, trim=1) == 4096     # achieved 1000 B < min_cwnd
    await tb.update(0, dt=100, acked=4000, rtt=2100)
    assert await tb.update(0, dt=100, trim=1) > 4096      # second trim in the epoch: no QA
    assert int(dut.quick_adapts.value) == 1
    # clamps: grows to max_cwnd and not beyond, shrinks to min_cwnd and not below
    await tb.configure(1, base_rtt_ns=100, target_delay_ns=100_000, min_cwnd=8192, max_cwnd=20000,
                       init_cwnd=19000, fi_bytes=60000, eta_q8=255)
    assert await tb.update(1, acked=60000, rtt=100) == 20000
    for _ in range(6):
        await tb.update(1, dt=1000, acked=100, rtt=900_000, ecn=1)
    assert tb.cwnd(1) == 8192
    assert await tb.update(1, dt=1000, trim=1) == 8192
    assert int(dut.decreases.value) == tb.models[0].decreases + tb.models[1].decreases


@cocotb.test()
async def run_random(dut):
    """300 random updates over two QPs, each checked against the model."""
    rnd = random.Random(5)
    tb = TB(dut)
    await tb.start()
    await tb.configure(0)
    await tb.configure(1, base_rtt_ns=500, target_delay_ns=700, min_cwnd=2000, max_cwnd=100_000,
                       init_cwnd=50_000, fi_bytes=3000, md_q8=60, eta_q8=90)
    for _ in range(300):
        qp = rnd.randrange(2)
        base = tb.models[qp].c["base_rtt_ns"]
        await tb.update(qp, dt=rnd.choice([10, 200, base // 2, base, 3 * base]),
                        acked=rnd.choice([0, 64, 1000, 4096, rnd.randrange(1 << 16)]),
                        rtt=rnd.randrange(3 * base + 30_000), ecn=int(rnd.random() < 0.3),
                        trim=int(rnd.random() < 0.1))
    assert int(dut.decreases.value) == sum(m.decreases for m in tb.models.values())
    assert int(dut.quick_adapts.value) == sum(m.quick_adapts for m in tb.models.values())


@cocotb.test()
async def run_latency_and_cancel(dut):
    """Worst-case update latency <= UPDATE_CYCLES; a configuration write cancels an update in flight."""
    tb = TB(dut)
    await tb.start()
    # longest update: floor(log2(cwnd)) = 31 fair-increase steps, 8 + 24 proportional steps
    big = (1 << 32) - 1
    await tb.configure(0, base_rtt_ns=100, target_delay_ns=(1 << 24) - 1, min_cwnd=big, max_cwnd=big,
                       init_cwnd=big, fi_bytes=0xFFFF, eta_q8=255)
    await tb.configure(1, min_cwnd=(1 << 31) + 5, max_cwnd=big, init_cwnd=(1 << 31) + 5,
                       fi_bytes=1, eta_q8=255, target_delay_ns=(1 << 24) - 1, base_rtt_ns=100)
    for qp in (0, 1):
        tb.upd.send(pack(NsccUpdate, {"qp": qp, "acked": (1 << 24) - 1, "rtt_ns": 100}))
        busy = 0                                   # cycles with ready low after the update
        while busy == 0 or not int(dut.upd__ready.value):
            await RisingEdge(dut.clk)
            busy += not int(dut.upd__ready.value)
        assert 30 < busy <= UPDATE_CYCLES, f"update took {busy} cycles (UPDATE_CYCLES {UPDATE_CYCLES})"
        want = tb.models[qp].update(tb.now, (1 << 24) - 1, 100, 0, 0)
        assert tb.cwnd(qp) == want
    assert tb.cwnd(1) == (1 << 31) + 5 + (255 * ((1 << 24) - 1) * ((1 << 24) - 1) >> 32)
    # a configuration write to the QP of an update in flight wins: the update writes nothing
    await tb.configure(0, min_cwnd=1000, max_cwnd=100_000, init_cwnd=50_000)
    for delay in (0, 3, 6, 20):
        tb.upd.send(pack(NsccUpdate, {"qp": 0, "acked": 60_000, "rtt_ns": 100}))
        while not tb.upd.empty():
            await RisingEdge(dut.clk)
        await ClockCycles(dut.clk, delay)
        await tb.configure(0, min_cwnd=1000, max_cwnd=100_000, init_cwnd=20_000 + delay)
        # another QP's configuration write does not disturb an update
        tb.upd.send(pack(NsccUpdate, {"qp": 0, "acked": 4000, "rtt_ns": 100}))
        while not tb.upd.empty():
            await RisingEdge(dut.clk)
        await ClockCycles(dut.clk, 4)
        await tb.configure(1, init_cwnd=30_000)
        await ClockCycles(dut.clk, UPDATE_CYCLES)
        assert tb.cwnd(1) == 30_000
        assert tb.cwnd(0) == tb.models[0].update(tb.now, 4000, 100, 0, 0)
        assert tb.cwnd(0) > 20_000 + delay


@cocotb.test()
async def run_config_clamp(dut):
    """init_cwnd outside [min_cwnd, max_cwnd] is clamped by a job after any update in flight."""
    tb = TB(dut)
    await tb.start()
    # idle: clamped CONFIG_CYCLES after the write (above max_cwnd, then below min_cwnd)
    await tb.configure(0, min_cwnd=4096, max_cwnd=65536, init_cwnd=100_000)
    assert tb.cwnd(0) == 65536
    await tb.configure(1, min_cwnd=8192, max_cwnd=65536, init_cwnd=1000)
    assert tb.cwnd(1) == 8192
    # writes to both QPs in back-to-back cycles while an update of QP 0 is in flight: the
    # update completes (QP 0's write cancels it), then both windows are clamped
    tb.upd.send(pack(NsccUpdate, {"qp": 0, "acked": 60_000, "rtt_ns": 100}))
    while not tb.upd.empty():
        await RisingEdge(dut.clk)
    await ClockCycles(dut.clk, 5)
    for qp, init in ((1, 1 << 20), (0, 10)):
        cfg = dict(NSCC_DEFAULTS, min_cwnd=5000, max_cwnd=70_000, init_cwnd=init)
        dut.cfg_w_addr.value = qp
        dut.cfg_w_data.value = pack(NsccConfig, cfg)
        dut.cfg_w_en.value = 1
        await RisingEdge(dut.clk)
        tb.models[qp] = Model(cfg, tb.now)
    dut.cfg_w_en.value = 0
    await RisingEdge(dut.clk)
    assert (tb.cwnd(0), tb.cwnd(1)) == (10, 1 << 20)          # raw until clamped
    await ClockCycles(dut.clk, UPDATE_CYCLES + 2 * CONFIG_CYCLES + 2)
    assert (tb.cwnd(0), tb.cwnd(1)) == (5000, 70_000)
    # and updates still follow the model
    for qp in (0, 1, 0):
        await tb.update(qp, acked=4000, rtt=100)


def test_nscc(tmp_path):
    run_rtl(Nscc(qps=2), toplevel="nscc", test_module="tests.rtl.test_nscc",
            build_dir=tmp_path / "nscc", quiet=True)


def test_nscc_config():
    from mrcnic.config import CcProfile

    assert nscc_config() == NSCC_DEFAULTS
    c = nscc_config(CcProfile(initial_cwnd_bytes=8192, disable_qa=True))
    assert c["init_cwnd"] == 8192 and c["qa_enable"] == 0


def test_parameters():
    import pytest
    for qps in (0, 9):
        with pytest.raises(ValueError):
            Nscc(qps=qps)
