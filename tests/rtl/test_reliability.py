"""SenderReliability: PSN tracking, SACK, trim NACK, ACK timeout + backoff, EV events, probes, ECN avoid.

cocotb testbench (``run_*`` coroutines) and its pytest wrapper.  SentInfo and
ACK RxPacket records are driven straight into the block; a small path-table
model applies the ``st_en`` pulses to the ``eligible`` bitmap the block
reads, as the real path table does.  Every output stream is recorded with the
cycle it was taken, so timeouts and backoff intervals are checked in cycles
(8 ns clock: ACK timeout 1.024 us x 2^t = 128 x 2^t cycles).
"""

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from mrcnic import wire
from mrcnic.rtl.layouts import (Completion, EvEvent, EvEventReason, EvState, ProbeReq, RetxReq,
                                RxKind, RxPacket, SentInfo)
from mrcnic.rtl.nscc import NSCC_DEFAULTS, UPDATE_CYCLES
from mrcnic.rtl.reliability import RelQpConfig, SenderReliability
from mrcnic.sim.rtlsim import run_rtl
from mrcnic.sim.tb import StreamSource, pack, start, unpack

PATHS = 16
INPUTS = ["sent__valid", "sent__payload", "ack__valid", "ack__payload", "eligible",
          "cfg_w_en", "cfg_w_addr", "cfg_w_data", "retx__ready", "event__ready",
          "probe__ready", "recycle__ready", "send_cpl__ready", "ctl_st_en", "ctl_st_addr",
          "cc_w_en", "cc_w_addr", "cc_w_data"]
OUTS = {"retx": RetxReq, "event": EvEvent, "probe": ProbeReq, "recycle": None, "send_cpl": Completion}


def EV(index):
    return 0x5000 + index


class TB:
    """Sources for sent/ack, timestamped sinks for every output stream, a path-table model."""

    def __init__(self, dut):
        self.dut, self.clk = dut, dut.clk

    async def start(self, eligible=(1 << PATHS) - 1):
        await start(self.dut, INPUTS)
        self.cycle = 0
        self.elig = eligible
        self.dut.eligible.value = eligible
        self.st = []
        self.out = {name: [] for name in OUTS}
        self.sent = StreamSource(self.dut, "sent", self.clk)
        self.ack = StreamSource(self.dut, "ack", self.clk)
        self.sent_refused = 0
        for name in OUTS:
            getattr(self.dut, f"{name}__ready").value = 1
        cocotb.start_soon(self._monitor())

    async def _monitor(self):
        while True:
            await RisingEdge(self.clk)
            self.cycle += 1
            d = self.dut
            if int(d.st_en.value):
                addr, state = int(d.st_addr.value), EvState(int(d.st_state.value))
                self.st.append((self.cycle, addr, state))
                if state == EvState.GOOD:
                    self.elig |= 1 << addr
                else:
                    self.elig &= ~(1 << addr)
                d.eligible.value = self.elig
            if int(d.sent__valid.value) and not int(d.sent__ready.value):
                self.sent_refused += 1
            for name, layout in OUTS.items():
                if int(getattr(d, f"{name}__valid").value) and int(getattr(d, f"{name}__ready").value):
                    v = int(getattr(d, f"{name}__payload").value)
                    self.out[name].append((self.cycle, unpack(layout, v) if layout else v))

    async def configure(self, qp, **kw):
        nscc = dict(NSCC_DEFAULTS, **kw.pop("nscc", {}))
        cfg = dict(start_psn=100, profile_base=0, profile_count=8, ev_min_active=1,
                   ack_timeout_exp=15, retry_count=1, probe_interval=0, ecn_hold=0, nscc=nscc)
        cfg.update(kw)
        self.dut.cfg_w_addr.value = qp
        self.dut.cfg_w_data.value = pack(RelQpConfig, cfg)
        self.dut.cfg_w_en.value = 1
        await RisingEdge(self.clk)
        self.dut.cfg_w_en.value = 0
        await ClockCycles(self.clk, 2)

    def send(self, psn, index, *, qp=0, length=1000, last=0, retx=0):
        self.sent.send(pack(SentInfo, {"qp": qp, "psn": psn, "index": index, "ev": EV(index),
                                       "length": length, "msg_last": last, "retx": retx}))

    def send_ack(self, cum, *, qp=0, ev=0, flags=0, base=None, bitmap=0, ts=0):
        syn = wire.AETH_NAK_PSN if flags & wire.SACK_TRIM_NACK else wire.AETH_ACK
        self.ack.send(pack(RxPacket, {
            "kind": RxKind.ACK, "qp": qp, "psn": cum & 0xFFFFFF,
            "ack": {"syndrome": syn, "ev": ev, "flags": flags,
                    "base_psn": (cum + 1 if base is None else base) & 0xFFFFFF,
                    "bitmap": bitmap, "ts": ts}}))

    async def idle(self, cycles=30):
        while not (self.sent.empty() and self.ack.empty()):
            await RisingEdge(self.clk)
        await ClockCycles(self.clk, cycles)

    def word(self, name, qp):
        return (int(getattr(self.dut, name).value) >> (32 * qp)) & 0xFFFFFFFF

    def count(self, name):
        return int(getattr(self.dut, name).value)

    def items(self, name):
        return [v for _, v in self.out[name]]


@cocotb.test()
async def run_acks(dut):
    """Cumulative + SACK ACKs: bytes in flight, one send completion per message, recycle, duplicates."""
    tb = TB(dut)
    await tb.start()
    await tb.configure(0, nscc={"init_cwnd": 16384})
    await tb.configure(1, start_psn=0xFFFFFE, profile_base=8)
    # 16 back-to-back SentInfos (two messages on QP 0: PSNs 100..103 and 104..109; 6 on QP 1)
    for i in range(10):
        tb.send(100 + i, i % 8, last=int(i in (3, 9)))
    for i in range(6):
        tb.send((0xFFFFFE + i) & 0xFFFFFF, 8 + i, qp=1, length=100, last=int(i == 5))
    await tb.idle()
    assert tb.sent_refused == 0
    assert tb.word("inflight", 0) == 10_000 and tb.word("inflight", 1) == 600
    assert tb.count("sent_dropped") == 0
    # cumulative ACK of the first message (echoes the EV of PSN 103, entry 3)
    tb.send_ack(103, ev=EV(3))
    await tb.idle()
    assert tb.items("send_cpl") == [{"qp": 0, "psn": 103, "has_imm": 0, "imm": 0}]
    assert tb.word("inflight", 0) == 6000
    assert tb.items("recycle") == [3]
    # SACK of PSNs 105..109 (base 104, bits 1..5): no completion yet (104 missing)
    tb.send_ack(103, ev=EV(9 % 8), bitmap=0b111110)
    await tb.idle()
    assert tb.word("inflight", 0) == 1000 and len(tb.items("send_cpl")) == 1
    # the hole fills: cumulative 109 -> second completion; then stale and duplicate ACKs
    tb.send_ack(109, ev=EV(4))
    tb.send_ack(103, ev=EV(3), bitmap=0xFF)
    tb.send_ack(109, ev=EV(4), bitmap=0xFFFF)
    tb.send_ack(5000, ev=EV(4))                    # beyond anything sent: ignored
    # QP 1 wraps through PSN 0xFFFFFF
    tb.send_ack(3, qp=1, ev=EV(13))
    await tb.idle()
    assert tb.items("send_cpl") == [{"qp": 0, "psn": 103, "has_imm": 0, "imm": 0},
                                    {"qp": 0, "psn": 109, "has_imm": 0, "imm": 0},
                                    {"qp": 1, "psn": 3, "has_imm": 0, "imm": 0}]
    assert tb.word("inflight", 0) == 0 and tb.word("inflight", 1) == 0
    assert tb.word("cwnd", 0) > 16384               # NSCC grew on clean, low-delay ACKs
    assert tb.count("clean_acks") == 7
    assert tb.count("retransmissions") == 0 and tb.count("timeouts") == 0
    assert not tb.st and not tb.out["event"]
    # a new SentInfo with a PSN other than the next one is dropped and counted; a non-ACK is dropped
    tb.send(120, 0)
    tb.ack.send(pack(RxPacket, {"kind": RxKind.DATA, "qp": 0, "psn": 110}))
    await tb.idle()
    assert tb.count("sent_dropped") == 1 and tb.count("acks_dropped") == 1
    assert tb.word("inflight", 0) == 0


@cocotb.test()
async def run_trim_nack(dut):
    """Trim NACK: immediate RetxReq with avoid_index, no ASSUMED_BAD; NSCC quick adapt; tx_ok."""
    tb = TB(dut)
    await tb.start()
    await tb.configure(0, nscc={"init_cwnd": 16384, "min_cwnd": 4096, "max_cwnd": 65536})
    assert tb.word("cwnd", 0) == 16384
    for i in range(4):
        tb.send(100 + i, 4 + i)
    await tb.idle()
    assert int(dut.tx_ok.value) & 1
    tb.send_ack(99, ev=EV(6), flags=wire.SACK_TRIM_NACK, base=102)
    await tb.idle()
    assert tb.items("retx") == [{"qp": 0, "psn": 102, "avoid_index": 6, "trim": 1}]
    assert not tb.st and not tb.out["event"]
    assert tb.word("inflight", 0) == 3000                 # the trimmed copy's bytes left
    assert tb.count("trim_nacks") == 1 and tb.count("retransmissions") == 1
    # quick adapt: nothing acknowledged yet -> min_cwnd
    assert tb.word("cwnd", 0) == 4096
    assert int(dut.tx_ok.value) & 1                      # 4000 B in flight < 4096
    tb.send(104, 0)
    tb.send(102, 9, retx=1)                               # the new copy: its bytes are back
    await tb.idle(8)                                      # recorded and tx_ok registered
    assert tb.word("inflight", 0) == 5000
    assert not int(dut.tx_ok.value) & 1                   # 5000 B >= cwnd
    tb.send_ack(104, ev=EV(0))
    await tb.idle()
    assert tb.word("inflight", 0) == 0 and int(dut.tx_ok.value) & 1
    # a trim NACK for an already acknowledged PSN retransmits nothing
    tb.send_ack(104, ev=EV(0), flags=wire.SACK_TRIM_NACK, base=103)
    await tb.idle(40)                                     # (the counters lag by up to 7 cycles)
    assert len(tb.items("retx")) == 1 and tb.count("trim_nacks") == 2
    # trimmed bytes leave once per trimmed copy; acknowledging a trimmed PSN frees nothing more
    tb.send(105, 1)
    tb.send(106, 2)
    await tb.idle(8)
    assert tb.word("inflight", 0) == 2000
    for _ in range(2):                                    # the same trim NACK twice
        tb.send_ack(104, ev=EV(1), flags=wire.SACK_TRIM_NACK, base=105)
        await tb.idle()
    assert tb.word("inflight", 0) == 1000
    assert [r["psn"] for r in tb.items("retx")] == [102, 105, 105]
    tb.send_ack(106, ev=EV(2))                            # 105 (trimmed) and 106 acknowledged
    await tb.idle()
    assert tb.word("inflight", 0) == 0


@cocotb.test()
async def run_trimmed_no_timeout(dut):
    """A trimmed PSN waiting for its retransmission does not time out (its copy is known lost,
    not late); its new copy restarts the timer, and that copy can time out."""
    tb = TB(dut)
    await tb.start()
    await tb.configure(0, ack_timeout_exp=0, retry_count=1, probe_interval=100_000)
    tb.send(100, 0)
    tb.send(101, 1)
    await tb.idle(2)
    tb.send_ack(99, ev=EV(0), flags=wire.SACK_TRIM_NACK, base=100)
    await ClockCycles(dut.clk, 600)                      # > 4 timeouts of 1.024 us (128 cycles)
    # 101 timed out (twice: its retry backs off), 100 (trimmed) did not
    assert [(r["psn"], r["trim"]) for r in tb.items("retx")] == [(100, 1), (101, 0), (101, 0)]
    assert tb.count("timeouts") == 2
    tb.send(100, 5, retx=1)                              # the trimmed PSN's new copy
    t_sent = tb.cycle
    while len(tb.out["retx"]) < 4 or tb.out["retx"][-1][1]["psn"] != 100:
        await RisingEdge(dut.clk)
    cyc, req = tb.out["retx"][-1]
    assert (req["psn"], req["trim"], req["avoid_index"]) == (100, 0, 5)
    assert 128 <= cyc - t_sent <= 128 + 40, cyc - t_sent


@cocotb.test()
async def run_timeout_probe(dut):
    """ACK timeout -> ASSUMED_BAD + event + RetxReq, backoff after retry_count; probes; probe reply -> GOOD."""
    tb = TB(dut)
    await tb.start()
    await tb.configure(0, ack_timeout_exp=0, retry_count=1, probe_interval=300)
    for i in range(3):
        tb.send(100 + i, i)
    await tb.idle(2)
    tb.send_ack(100, ev=EV(0), base=101, bitmap=0b10)     # 100 and 102 arrive, 101 is lost
    t_sent = tb.cycle
    stamps = []
    for resend_on in (3, 4, None):
        while len(tb.out["retx"]) == len(stamps):
            await RisingEdge(dut.clk)
        cyc, req = tb.out["retx"][-1]
        stamps.append(cyc)
        if resend_on is not None:
            tb.send(101, resend_on, retx=1)
    # 1.024 us = 128 cycles; retry 1 at the fixed timeout, then 2x, 4x (retry_count 1)
    gaps = [stamps[0] - t_sent, stamps[1] - stamps[0], stamps[2] - stamps[1]]
    for gap, want in zip(gaps, (128, 256, 512)):
        assert want <= gap <= want + 24, gaps          # + scan pass, pipeline, action wait
    assert [r["avoid_index"] for r in tb.items("retx")] == [1, 3, 4]
    assert all(r["psn"] == 101 for r in tb.items("retx"))
    assert [(a, s) for _, a, s in tb.st] == [(i, EvState.ASSUMED_BAD) for i in (1, 3, 4)]
    assert tb.items("event") == [{"index": i, "ev": EV(i), "state": EvState.ASSUMED_BAD,
                                  "reason": EvEventReason.ACK_TIMEOUT, "rtt_ns": 0}
                                 for i in (1, 3, 4)]
    assert tb.elig == 0xFFFF & ~0b11010
    assert tb.count("timeouts") == 3 and tb.count("ev_events") == 3
    tb.send_ack(102, ev=EV(4))
    # probes: every 300 cycles each ASSUMED_BAD entry of the profile is probed (one sweep of the
    # 8-entry profile takes a few cycles); look at the sweeps after the third timeout
    while tb.cycle < stamps[2] + 700:
        await RisingEdge(dut.clk)
    sweeps = []
    for cyc, p in tb.out["probe"]:
        assert p["qp"] == 0
        if sweeps and cyc - sweeps[-1][0] < 20:
            sweeps[-1][1].append(p["index"])
        else:
            sweeps.append((cyc, [p["index"]]))
    assert [s[1] for s in sweeps if s[0] > stamps[2] + 5] == [[1, 3, 4], [1, 3, 4]], sweeps
    assert all(abs(b[0] - a[0] - 300) <= 2 for a, b in zip(sweeps, sweeps[1:])), sweeps
    # the probe reply on entry 3's EV comes back; RTT = reply time - the probe's ts
    last3 = [(c, p) for c, p in tb.out["probe"] if p["index"] == 3][-1]
    t_reply = tb.cycle
    tb.send_ack(102, ev=EV(3), flags=wire.SACK_PROBE_REPLY, ts=last3[1]["ts"])
    await tb.idle()
    ev = tb.items("event")[-1]
    assert ev["index"] == 3 and ev["state"] == EvState.GOOD and ev["reason"] == EvEventReason.PROBE_OK
    lo = (t_reply - last3[0]) * 8
    assert lo <= ev["rtt_ns"] <= lo + 30 * 8, (ev, lo)
    assert tb.st[-1][1:] == (3, EvState.GOOD) and tb.elig & (1 << 3)
    assert tb.count("probe_replies") == 1
    # from now on only entries 1 and 4 are probed; a second reply for 3 changes nothing
    n = len(tb.out["probe"])
    tb.send_ack(102, ev=EV(3), flags=wire.SACK_PROBE_REPLY, ts=0)
    await ClockCycles(dut.clk, 700)
    assert {p["index"] for p in tb.items("probe")[n:]} == {1, 4}
    assert len(tb.items("event")) == 4 and tb.count("timeouts") == 3


@cocotb.test()
async def run_min_active(dut):
    """ev_min_active holds the last GOOD entries (event MIN_ACTIVE); non-eligible entries never change."""
    tb = TB(dut)
    await tb.start(eligible=0xFFFF & ~(1 << 4))           # entry 4 is DENIED
    await tb.configure(0, start_psn=0, profile_count=5, ev_min_active=3, ack_timeout_exp=0)
    # (16 cycles apart, so that the PSNs time out in send order: sent in one burst, the order
    # in which the timeout scan finds them depends on its phase, and with it which entry
    # min_active holds)
    for psn, index in ((0, 4), (1, 0), (2, 1)):
        tb.send(psn, index)
        await ClockCycles(dut.clk, 16)
    for _ in range(20000):              # bounded: a missing retransmission fails, not hangs
        if len(tb.out["retx"]) >= 3:
            break
        await RisingEdge(dut.clk)
    assert len(tb.out["retx"]) >= 3, tb.items("retx")
    await ClockCycles(dut.clk, 10)
    assert [(r["psn"], r["avoid_index"]) for r in tb.items("retx")[:3]] == [(0, 4), (1, 0), (2, 1)]
    assert [(a, s) for _, a, s in tb.st] == [(0, EvState.ASSUMED_BAD)]
    assert tb.items("event") == [
        {"index": 0, "ev": EV(0), "state": EvState.ASSUMED_BAD, "reason": EvEventReason.ACK_TIMEOUT,
         "rtt_ns": 0},
        {"index": 1, "ev": EV(1), "state": EvState.GOOD, "reason": EvEventReason.MIN_ACTIVE,
         "rtt_ns": 0}]
    assert tb.count("min_active_holds") == 1 and tb.count("timeouts") == 3


@cocotb.test()
async def run_ecn_avoid(dut):
    """ECN echo avoids the entry for ecn_hold cycles or until a clean ACK; never the last entry."""
    tb = TB(dut)
    await tb.start()
    await tb.configure(0, start_psn=0, profile_count=4, ecn_hold=100,
                       nscc={"base_rtt_ns": 100, "target_delay_ns": 100, "init_cwnd": 16384})
    await tb.configure(1, start_psn=0, profile_base=8, profile_count=1, ecn_hold=100)
    tb.send(0, 2)
    await tb.idle(2)
    tb.send_ack(0, ev=EV(2), flags=wire.SACK_ECN_ECHO)
    while not int(dut.avoid.value) & (1 << 2):
        await RisingEdge(dut.clk)
    t0 = tb.cycle
    while int(dut.avoid.value) & (1 << 2):
        await RisingEdge(dut.clk)
    assert 98 <= tb.cycle - t0 <= 102, tb.cycle - t0
    assert int(dut.avoid.value) == 0
    assert tb.word("cwnd", 0) == 16384                # ECN with a low delay: window unchanged
    # avoided again, then a clean ACK on the same entry ends it at once and recycles the entry
    tb.send(1, 2)
    tb.send(2, 2)
    await tb.idle(100)                                  # RTT 800 ns: delay above target
    tb.send_ack(1, ev=EV(2), flags=wire.SACK_ECN_ECHO)
    await tb.idle(20 + UPDATE_CYCLES)                   # the NSCC update has been applied
    assert int(dut.avoid.value) == 1 << 2
    assert tb.word("cwnd", 0) == 8192                 # ECN with a high delay: halved (md 0.5)
    tb.send_ack(2, ev=EV(2))
    await tb.idle(20)
    assert int(dut.avoid.value) == 0
    assert tb.items("recycle") == [2]
    # QP 1's profile has a single entry: it is never avoided
    tb.send(0, 8, qp=1)
    await tb.idle(2)
    tb.send_ack(0, qp=1, ev=EV(8), flags=wire.SACK_ECN_ECHO)
    await tb.idle(20)
    assert int(dut.avoid.value) == 0
    assert tb.count("ecn_echoes") == 3 and tb.count("clean_acks") == 1


@cocotb.test()
async def run_hazards(dut):
    """Back-to-back operations on one slot: an ACK or a timeout scan right behind a SentInfo."""
    tb = TB(dut)
    await tb.start()
    await tb.configure(0, start_psn=0)
    # a first pass over QP 0's 64 slots leaves each one acknowledged by a SACK
    for i in range(64):
        tb.send(i, i % 8, length=100)
    await tb.idle(5)
    tb.send_ack(0xFFFFFF, ev=EV(0), base=0, bitmap=(1 << 64) - 1)
    tb.send_ack(63, ev=EV(7))
    await tb.idle()
    assert tb.word("inflight", 0) == 0 and tb.count("sent_dropped") == 0
    # each new PSN reuses such a slot and is acknowledged while its SentInfo is still being
    # recorded (several offsets: some ACKs come too early and are ignored); a stale "acked"
    # would keep its bytes in flight for ever
    for k in range(8):
        psn = 64 + k
        tb.send(psn, k, length=100, last=1)
        await ClockCycles(dut.clk, k)
        tb.send_ack(psn, ev=EV(k))
        await tb.idle(10)
    tb.send_ack(71, ev=EV(7))
    await tb.idle()
    assert tb.items("send_cpl") == [{"qp": 0, "psn": p, "has_imm": 0, "imm": 0}
                                    for p in range(64, 72)]
    assert tb.word("inflight", 0) == 0
    # QP 1's never-written slots hold send time 0: a scan that read one before its SentInfo
    # landed would see a PSN sent 3 us ago and time it out at once (timeout 1.024 us); one
    # PSN at a time, at 16 phases against the scan, each acknowledged well before 1.024 us
    await tb.configure(1, start_psn=0, profile_base=8, ack_timeout_exp=0, retry_count=4)
    while tb.cycle < 400:
        await RisingEdge(dut.clk)
    for k in range(16):
        await ClockCycles(dut.clk, k % 8)
        tb.send(k, 8 + k % 4, qp=1, length=100)
        await ClockCycles(dut.clk, 20)
        tb.send_ack(k, qp=1, ev=EV(8 + k % 4))
        await tb.idle(20)
    assert tb.count("timeouts") == 0 and not tb.out["retx"]
    assert tb.word("inflight", 1) == 0
    # a PSN left unacknowledged still times out (after 128 cycles)
    t0 = tb.cycle
    tb.send(16, 8, qp=1, length=100)
    while not tb.out["retx"] and tb.cycle < t0 + 300:
        await RisingEdge(dut.clk)
    assert tb.items("retx") == [{"qp": 1, "psn": 16, "avoid_index": 8, "trim": 0}]
    assert tb.out["retx"][0][0] >= t0 + 128


@cocotb.test()
async def run_event_stall(dut):
    """A stalled EV-event consumer: the first event waits in the output register, later ones
    are dropped and counted (events_dropped), none is lost silently or duplicated."""
    tb = TB(dut)
    await tb.start()
    await tb.configure(0, ack_timeout_exp=0)
    dut.event__ready.value = 0
    tb.send(100, 0)
    tb.send(101, 1)
    while tb.count("ev_events") < 2:                  # both PSNs time out: two ASSUMED_BAD events
        await RisingEdge(dut.clk)
    tb.send_ack(101, ev=EV(2))                        # both acknowledged: no further events
    await tb.idle(50)
    made, dropped = tb.count("ev_events"), tb.count("events_dropped")
    assert made >= 2 and dropped == made - 1 and tb.out["event"] == [], (made, dropped)
    dut.event__ready.value = 1
    await ClockCycles(dut.clk, 10)
    held = tb.items("event")
    assert len(held) == 1 and held[0]["state"] == EvState.ASSUMED_BAD, held
    assert held[0]["reason"] == EvEventReason.ACK_TIMEOUT and held[0]["index"] in (0, 1)
    assert tb.count("events_dropped") == dropped


def test_reliability(tmp_path):
    run_rtl(SenderReliability(qps=2, window=64, paths=PATHS), toplevel="sender_reliability",
            test_module="tests.rtl.test_reliability", build_dir=tmp_path / "rel", quiet=True)


def test_parameters():
    import pytest
    for kw in ({"qps": 0}, {"qps": 9}, {"window": 100}, {"window": 32}, {"paths": 0},
               {"paths": 257}, {"clk_ns": 0}):
        with pytest.raises(ValueError):
            SenderReliability(**kw)
