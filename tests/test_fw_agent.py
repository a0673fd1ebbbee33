"""The weight manager (``fw/agent.py``) against a register model of the NIC.

The NIC is :class:`Nic`: the CSR-bank model ``LoopbackTransport`` plus what the
hardware does behind the EV command registers -- ``EV_STATE_SET`` /
``EV_WEIGHT_SET`` change the path-table record, an ACK timeout on a broken
"link" makes a GOOD entry ASSUMED_BAD with an EV event ACK_TIMEOUT, and
``EV_PROBE_REQ`` is answered (probe reply with an RTT) only when the entry's
link works.  The clock is fake (``sleep`` advances it), so the tests are instant;
the CLI test serves the model over TCP (``CsrServer``) and runs in real time.
The agent reaches the NIC through the controller API (``fw/mrc_ctl.py``) only.
"""

import json
import sys

import pytest
from click.testing import CliRunner

from mrcnic.cli import main
from mrcnic.fw.agent import AgentError, EntryStatus, WeightAgent
from mrcnic.fw.client import _OPS, CsrClient, pack_record, unpack_record
from mrcnic.fw.mrc_ctl import MrcCtlContext
from mrcnic.fw.tcp import CsrServer
from mrcnic.fw.transport import LoopbackTransport, TransportError
from mrcnic.rtl.layouts import EvCounters, EvEventReason, EvState, PathEntry

BASE_WEIGHTS = [4, 2, 8, 1, 3, 5]      # entries 0..5: QP 0 -> 0..3, QP 1 -> 2..5 (overlap)


class Nic(LoopbackTransport):
    """LoopbackTransport + the NIC behaviour the agent reacts to."""

    def __init__(self):
        super().__init__()
        self.broken = set()          # entries whose path loses everything
        self.fail_writes = None      # (register, field values) that answer SLVERR once
        self.rtt = {}

    # -- hardware side ------------------------------------------------------------------
    def path(self, i):
        return unpack_record(PathEntry, self.tables["path"].get(i, 0))

    def set_path(self, i, **fields):
        rec = self.path(i)
        rec.update(fields)
        self.tables["path"][i] = pack_record(PathEntry, rec)

    def link_down(self, *idx):
        """Loss on these entries: GOOD ones time out (ASSUMED_BAD + ACK_TIMEOUT event)."""
        for i in idx:
            self.broken.add(i)
            if self.path(i)["state"] == EvState.GOOD.value:
                self.set_path(i, state=EvState.ASSUMED_BAD.value)
                self.push_event(i, EvState.ASSUMED_BAD.value, EvEventReason.ACK_TIMEOUT.value)

    def link_up(self, *idx):
        self.broken.difference_update(idx)

    def traffic(self, i, packets, ecn=0):
        c = unpack_record(EvCounters, self.tables["evcnt"].get(i, 0))
        c["packets"] = (c["packets"] + packets) & 0xFFFFFFFF
        c["ecn_echoes"] = (c["ecn_echoes"] + ecn) & 0xFFFFFFFF
        self.tables["evcnt"][i] = pack_record(EvCounters, c)

    # -- bus side -----------------------------------------------------------------------
    def write32(self, addr, value):
        r = self.regmap.at(addr & 0xFFFC)
        if self.fail_writes and r is not None and r.name == self.fail_writes[0]:
            f = {fl.name: (value >> fl.lsb) & ((1 << fl.width) - 1) for fl in r.fields}
            if all(f[k] == v for k, v in self.fail_writes[1].items()):
                self.fail_writes = None
                raise TransportError("write", addr, 2, "injected")
        n = len(self.strobes)
        super().write32(addr, value)
        for name, f in self.strobes[n:]:
            if name == "EV_STATE_SET":
                self.set_path(f["index"], state=f["state"])
            elif name == "EV_WEIGHT_SET":
                self.set_path(f["index"], weight=f["weight"])
            elif name == "EV_PROBE_REQ" and f["index"] not in self.broken:
                self.push_probe_reply(f["index"], self.rtt.get(f["index"], 5000 + f["index"]))

    def strobes_of(self, name, start=0):
        return [f for n, f in self.strobes[start:] if n == name]


class FakeTime:
    def __init__(self):
        self.t = 100.0

    def clock(self):
        return self.t

    def sleep(self, dt):
        assert dt >= 0
        self.t += dt


def provisioned_nic():
    nic = Nic()
    c = CsrClient(nic)
    for i, w in enumerate(BASE_WEIGHTS):
        c.write_table("path", i, dict(ev=0x100 + i, port=i % 4, state=EvState.GOOD, weight=w,
                                      n_carriers=1, da=0xfc00 << 112 | i))
    c.write_table("path", 9, dict(ev=0x999, weight=7))          # in no EV profile
    c.write_table("txqp", 0, dict(dest_qpn=0x11, profile_base=0, profile_count=4))
    c.write_table("txqp", 1, dict(dest_qpn=0x12, profile_base=2, profile_count=4))
    c.write_table("txqp", 2, dict(dest_qpn=0x13, profile_base=0, profile_count=4))   # same range
    nic.strobes.clear()
    return nic


@pytest.fixture
def nic():
    return provisioned_nic()


def make_agent(nic, **kw):
    ft = FakeTime()
    a = WeightAgent(CsrClient(nic), clock=ft.clock, sleep=ft.sleep, **kw)
    a.time = ft
    return a


def actions(a, name):
    return [r for r in a.log if r["action"] == name]


def state_sets(nic, start=0):
    return [(f["index"], EvState(f["state"])) for f in nic.strobes_of("EV_STATE_SET", start)]


def probed(nic, start=0):
    return [f["index"] for f in nic.strobes_of("EV_PROBE_REQ", start)]


def probed_qp(nic, start=0):
    return [(f["index"], f["qp"]) for f in nic.strobes_of("EV_PROBE_REQ", start)]


# ---- start ------------------------------------------------------------------------------
def test_start_reads_profiles_and_baselines(nic):
    nic.set_path(5, state=EvState.DENIED.value)              # an operator's deny
    nic.set_path(3, state=EvState.ASSUMED_BAD.value)         # marked before the agent ran
    a = make_agent(nic).start()
    assert a.profiles == {"qp0": (0, 4), "qp1": (2, 4)}
    assert sorted(a.entries) == [0, 1, 2, 3, 4, 5]           # not 9 (in no profile)
    assert [a.entries[i].baseline for i in range(6)] == BASE_WEIGHTS
    assert [a.entries[i].ev for i in range(6)] == [0x100 + i for i in range(6)]
    assert [a.entries[i].qp for i in range(6)] == [0, 0, 0, 0, 1, 1]
    assert a.entries[5].status is EntryStatus.OPERATOR
    assert a.entries[3].status is EntryStatus.QUARANTINED and a.entries[3].failures == 1
    assert state_sets(nic) == [(3, EvState.DENIED)]
    assert a.log[0]["action"] == "start" and a.log[0]["entries"] == 6
    assert a.log[0]["operator_denied"] == [5]
    assert actions(a, "quarantine")[0]["cause"] == "ASSUMED_BAD at start"


def test_start_with_a_controller_context(nic):
    """The agent takes the mrc_ctl context itself (e.g. the one `mrcnic fw` built) as well."""
    ctl = MrcCtlContext(CsrClient(nic))
    ft = FakeTime()
    a = WeightAgent(ctl, clock=ft.clock, sleep=ft.sleep)
    assert a.ctl is ctl and a.client is ctl.client
    a.start()
    assert a.profiles == {"qp0": (0, 4), "qp1": (2, 4)} and sorted(a.entries) == list(range(6))
    nic.link_down(2)
    a.step()
    assert a.entries[2].status is EntryStatus.QUARANTINED and probed_qp(nic) == [(2, 0)]


class _Watched(CsrClient):
    """A register client that records which module called each of its operations."""
    callers = set()


def _watch(name):
    orig = getattr(CsrClient, name)

    def op(self, *args, **kw):
        _Watched.callers.add(sys._getframe(1).f_code.co_filename.rsplit("/", 1)[-1])
        return orig(self, *args, **kw)
    return op


for _name in _OPS:
    setattr(_Watched, _name, _watch(_name))


def test_every_access_goes_through_the_controller_api(nic):
    """One path to the hardware: whatever the agent does (start, events, quarantine,
    probes, restore, operator changes, ECN weights), each register operation is called by
    fw/mrc_ctl.py, never by the agent itself."""
    ft = FakeTime()
    _Watched.callers = set()
    nic.set_path(5, state=EvState.ASSUMED_BAD.value)
    a = WeightAgent(_Watched(nic), clock=ft.clock, sleep=ft.sleep, restore_after=1)
    a.step()
    nic.link_down(1)
    nic.push_event(3, EvState.GOOD.value, EvEventReason.MIN_ACTIVE.value)
    nic.push_event(9, EvState.ASSUMED_BAD.value, EvEventReason.ACK_TIMEOUT.value)
    nic.push_probe_reply(4, 1)
    a.step()
    nic.link_up(1, 5)
    nic.traffic(2, 100, ecn=90)
    a.step()
    CsrClient(nic).set_ev_state(5, EvState.GOOD)
    a.step()
    for _ in range(6):
        nic.traffic(2, 100)
        a.step()
    kinds = {r["action"] for r in a.log}
    assert kinds >= {"start", "quarantine", "held", "restored", "ecn_halve", "ecn_raise"}, kinds
    assert a.stats["stale_replies"] == 1 and a.stats["unmanaged_events"] == 1
    assert _Watched.callers == {"mrc_ctl.py"}


def test_parameters_checked(nic):
    c = CsrClient(nic)
    for kw in (dict(period_s=0), dict(probe_timeout_s=-1), dict(restore_after=0),
               dict(deny_after=0), dict(ecn_threshold=1.5), dict(min_packets=0),
               dict(quiet_periods=0), dict(restore_after=1.5)):
        with pytest.raises(ValueError):
            WeightAgent(c, **kw)


# ---- link loss, quarantine, probes, restore ----------------------------------------------
def test_link_loss_quarantine_probe_restore(nic):
    a = make_agent(nic, restore_after=2, probe_timeout_s=0.02)
    a.step()
    assert state_sets(nic) == [] and probed(nic) == []
    nic.link_down(1, 2)
    s0 = len(nic.strobes)
    a.step()
    # quarantined at once: DENIED (the NIC's own probe restore cannot undo that), then probed
    assert state_sets(nic, s0) == [(1, EvState.DENIED), (2, EvState.DENIED)]
    assert nic.path(1)["state"] == nic.path(2)["state"] == EvState.DENIED.value
    assert [(r["index"], r["ev"], r["failures"]) for r in actions(a, "quarantine")] == \
        [(1, 0x101, 1), (2, 0x102, 1)]
    assert probed_qp(nic, s0) == [(1, 0), (2, 0)]           # entry 2: QPs 0 and 1 -> QP 0
    assert not nic.probe_replies
    # while the link is down: probed every period, no reply, nothing restored
    for _ in range(4):
        s = len(nic.strobes)
        t = a.time.t
        a.step()
        assert probed(nic, s) == [1, 2]
        assert state_sets(nic, s) == [] and nic.strobes_of("EV_WEIGHT_SET", s) == []
        assert a.time.t - t == pytest.approx(2 * 0.02)        # waited probe_timeout for each
    assert a.stats["probes_lost"] == 10
    # the NIC's own (stale) PROBE_OK for a quarantined entry changes nothing
    nic.push_event(1, EvState.GOOD.value, EvEventReason.PROBE_OK.value)
    nic.link_up(1, 2)
    nic.rtt[2] = 7777
    s = len(nic.strobes)
    a.step()                                                   # first reply: streak 1
    assert probed(nic, s) == [1, 2] and state_sets(nic, s) == []
    assert a.stats["stale_events"] == 1
    assert a.entries[1].streak == 1
    nic.link_down(1)                                           # entry 1 breaks again: streak reset
    s = len(nic.strobes)
    a.step()                                                   # 2 restored, 1 still out
    assert state_sets(nic, s) == [(2, EvState.GOOD)]
    ws = nic.strobes_of("EV_WEIGHT_SET", s)
    assert ws == [dict(index=2, weight=8)]
    # weight is written before the state
    names = [n for n, _ in nic.strobes[s:] if n in ("EV_STATE_SET", "EV_WEIGHT_SET")]
    assert names == ["EV_WEIGHT_SET", "EV_STATE_SET"]
    assert nic.path(2)["state"] == EvState.GOOD.value and nic.path(2)["weight"] == 8
    r = actions(a, "restored")
    assert [(x["index"], x["rtt_ns"], x["weight"]) for x in r] == [(2, 7777, 8)]
    assert a.entries[1].streak == 0 and a.entries[1].status is EntryStatus.QUARANTINED
    nic.link_up(1)
    for _ in range(2):
        s = len(nic.strobes)
        a.step()
        assert probed(nic, s) == [1]
    assert nic.path(1)["state"] == EvState.GOOD.value and nic.path(1)["weight"] == 2
    assert [x["index"] for x in actions(a, "restored")] == [2, 1]
    s = len(nic.strobes)
    a.step()
    assert probed(nic, s) == []                                # nothing quarantined
    assert a.summary()["quarantined"] == [] and a.summary()["probes"]["lost"] == 11


def test_deny_after_failures_then_operator_allow(nic):
    a = make_agent(nic, restore_after=1, deny_after=3)
    a.step()
    for n in (1, 2):
        nic.link_down(0)
        a.step()
        assert actions(a, "quarantine")[-1]["failures"] == n
        nic.link_up(0)
        a.step()
        assert nic.path(0)["state"] == EvState.GOOD.value
    nic.link_down(0)
    s = len(nic.strobes)
    a.step()
    d = actions(a, "denied")
    assert [(x["index"], x["failures"]) for x in d] == [(0, 3)]
    assert state_sets(nic, s) == [(0, EvState.DENIED)] and probed(nic, s) == []
    nic.link_up(0)                                             # even a working path stays DENIED
    s = len(nic.strobes)
    for _ in range(5):
        a.step()
    assert probed(nic, s) == [] and state_sets(nic, s) == []
    assert nic.path(0)["state"] == EvState.DENIED.value
    assert a.summary()["denied"] == [0]
    # only an operator `ev allow` brings it back, with its failure count reset
    CsrClient(nic).set_ev_state(0, EvState.GOOD)
    a.step()
    al = actions(a, "allowed")
    assert [(x["index"], x["was"]) for x in al] == [(0, "denied")]
    assert a.entries[0].status is EntryStatus.ACTIVE and a.entries[0].failures == 0
    nic.link_down(0)
    a.step()
    assert actions(a, "quarantine")[-1]["failures"] == 1


def test_other_events(nic):
    a = make_agent(nic)
    a.step()
    nic.push_event(3, EvState.GOOD.value, EvEventReason.MIN_ACTIVE.value)   # NIC held it GOOD
    nic.push_event(9, EvState.ASSUMED_BAD.value, EvEventReason.ACK_TIMEOUT.value)  # no profile
    nic.push_event(4, EvState.GOOD.value, EvEventReason.PROBE_OK.value)     # NIC restored it
    s = len(nic.strobes)
    a.step()
    assert state_sets(nic, s) == [] and probed(nic, s) == []
    assert [(r["action"], r["index"]) for r in a.log[1:]] == [("held", 3)]
    assert a.stats["unmanaged_events"] == 1
    # ACK_TIMEOUT then the NIC's PROBE_OK in one batch: quarantined anyway; a second
    # ACK_TIMEOUT queued before the DENIED write is the same outage (one failure)
    nic.link_down(4)
    nic.push_event(4, EvState.GOOD.value, EvEventReason.PROBE_OK.value)
    nic.push_event(4, EvState.ASSUMED_BAD.value, EvEventReason.ACK_TIMEOUT.value)
    a.step()
    assert a.entries[4].status is EntryStatus.QUARANTINED and a.entries[4].failures == 1
    assert probed_qp(nic)[-1] == (4, 1)                       # entry 4 is only in QP 1's profile
    assert a.stats["stale_events"] == 2
    # a reply for another entry (a probe of `mrcnic fw ev probe`) is not taken for ours
    nic.push_probe_reply(2, 1)
    a.step()
    assert a.entries[4].streak == 0 and a.stats["stale_replies"] == 1


# ---- congestion ---------------------------------------------------------------------------
def test_ecn_halving_and_slow_restore(nic):
    a = make_agent(nic, ecn_threshold=0.2)
    a.step()                                                   # counters' first sample
    nic.traffic(2, 100, ecn=50)                                # entry 2: weight 8
    nic.traffic(3, 100, ecn=80)                                # entry 3: weight 1 (minimum)
    nic.traffic(4, 7, ecn=7)                                   # fewer than 8 packets: ignored
    nic.traffic(0, 100, ecn=20)                                # ratio 0.2: not above threshold
    s = len(nic.strobes)
    a.step()
    assert nic.strobes_of("EV_WEIGHT_SET", s) == [dict(index=2, weight=4)]
    h = actions(a, "ecn_halve")[0]
    assert (h["index"], h["weight"], h["old_weight"], h["ratio"]) == (2, 4, 8, 0.5)
    nic.traffic(2, 40, ecn=20)
    a.step()
    assert nic.path(2)["weight"] == 2
    # quiet: +1 after every 4 periods without congestion, up to the baseline
    weights = []
    for _ in range(6 * 4 + 4):
        nic.traffic(2, 50, ecn=1)
        a.step()
        weights.append(nic.path(2)["weight"])
    assert weights == [2] * 3 + [3] * 4 + [4] * 4 + [5] * 4 + [6] * 4 + [7] * 4 + [8] * 5
    assert [r["weight"] for r in actions(a, "ecn_raise")] == [3, 4, 5, 6, 7, 8]
    assert a.summary()["reduced"] == {}
    assert all(r["index"] == 2 for r in actions(a, "ecn_halve") + actions(a, "ecn_raise"))


def test_ecn_never_touches_denied_entries(nic):
    nic.set_path(5, state=EvState.DENIED.value)                # operator-DENIED at start
    a = make_agent(nic)
    a.step()
    nic.link_down(1)                                           # agent-DENIED
    a.step()
    s = len(nic.strobes)
    for i in (1, 5):
        nic.traffic(i, 100, ecn=100)
    a.step()
    assert nic.strobes_of("EV_WEIGHT_SET", s) == []
    # the operator denies entry 2 behind the agent's back: found before the weight write
    CsrClient(nic).set_ev_state(2, EvState.DENIED)
    nic.traffic(2, 100, ecn=100)
    s = len(nic.strobes)
    a.step()
    assert nic.strobes_of("EV_WEIGHT_SET", s) == []
    assert [r["index"] for r in actions(a, "operator_denied")] == [2]
    assert a.entries[2].status is EntryStatus.OPERATOR
    # and an operator's weight change becomes the baseline
    CsrClient(nic).set_ev_weight(0, 6)
    nic.traffic(0, 100, ecn=100)
    a.step()
    assert actions(a, "operator_weight")[-1]["weight"] == 6 and a.entries[0].baseline == 6
    nic.traffic(0, 100, ecn=100)
    a.step()
    assert nic.path(0)["weight"] == 3


def test_counter_wrap(nic):
    nic.traffic(0, 0xFFFFFFF0)
    a = make_agent(nic)
    a.step()
    nic.traffic(0, 0x20, ecn=0x10)                             # packets wrap around 2**32
    a.step()
    assert actions(a, "ecn_halve")[0]["packets"] == 0x20


# ---- errors ---------------------------------------------------------------------------------
def test_transport_error_leaves_no_half_applied_change(nic):
    a = make_agent(nic, restore_after=1)
    a.step()
    nic.link_down(1)
    nic.fail_writes = ("EV_STATE_SET", dict(index=1, state=EvState.DENIED.value))
    with pytest.raises(AgentError, match=r"quarantine of entry 1 \(EV 0x101\) failed.*SLVERR"):
        a.step()
    assert a.entries[1].status is EntryStatus.ACTIVE          # nothing recorded as done
    a.step()                                                   # the pending event is handled now
    assert a.entries[1].status is EntryStatus.QUARANTINED and a.entries[1].failures == 1
    nic.link_up(1)
    nic.fail_writes = ("EV_STATE_SET", dict(index=1, state=EvState.GOOD.value))
    with pytest.raises(AgentError, match="restore state of entry 1"):
        a.step()
    # weight written first: the entry is still DENIED (out of use), with its baseline weight
    assert nic.path(1)["state"] == EvState.DENIED.value and nic.path(1)["weight"] == 2
    assert a.entries[1].status is EntryStatus.QUARANTINED
    a.step()
    assert nic.path(1)["state"] == EvState.GOOD.value
    assert [r["index"] for r in actions(a, "restored")] == [1]


def test_unmapped_bus_error_is_clear():
    class Dead(LoopbackTransport):
        def read32(self, addr):
            raise TransportError("read", addr, 2, "bridge down")
    with pytest.raises(AgentError, match="identify the NIC failed.*bridge down"):
        WeightAgent(CsrClient(Dead()), clock=lambda: 0.0, sleep=lambda s: None).step()


# ---- run loop, log ----------------------------------------------------------------------------
def test_run_and_jsonl_log(nic, tmp_path):
    log = tmp_path / "agent.jsonl"
    a = make_agent(nic, period_s=0.05, log=str(log))
    seen = []
    a.on_action = seen.append
    t0 = a.time.t
    nic.link_down(3)
    out = a.run(max_periods=5)
    assert out["periods"] == 5 and out["overruns"] == 0
    assert a.time.t - t0 == pytest.approx(4 * 0.05 + 0.02)    # last period: its probe wait only
    assert out["quarantined"] == [3] and out["probes"]["sent"] == 5
    out = a.run(duration_s=0.2)
    assert out["periods"] == 5 + 4
    a.close()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert lines == a.log == seen
    assert [r["action"] for r in lines] == ["start", "quarantine"]
    assert set(lines[1]) >= {"t_s", "action", "index", "ev"} and lines[1]["ev"] == 0x103
    # overrun: a probe wait longer than the period
    b = make_agent(provisioned_nic(), period_s=0.01, probe_timeout_s=0.03)
    b.client.transport.link_down(0)
    assert b.run(max_periods=3)["overruns"] == 3


# ---- CLI ----------------------------------------------------------------------------------------
def test_cli_agent_run_json(tmp_path):
    backend = provisioned_nic()
    backend.link_down(1)
    backend.traffic(2, 10)
    with CsrServer(backend) as srv:
        host, port = srv.address
        log = tmp_path / "a.jsonl"
        res = CliRunner().invoke(main, [
            "fw", "--target", f"tcp:{host}:{port}", "--timeout", "2", "--json", "agent", "run",
            "--period", "0.01", "--probe-timeout", "0.005", "--periods", "3", "--log", str(log)])
        assert res.exit_code == 0, (res.output, res.exception)
        lines = [json.loads(x) for x in res.output.splitlines()]
        assert [r.get("action") for r in lines[:-1]] == ["start", "quarantine"]
        assert lines[1]["index"] == 1 and lines[1]["ev"] == 0x101
        s = lines[-1]["summary"]
        assert s["periods"] == 3 and s["quarantined"] == [1] and s["probes"]["sent"] == 3
        assert s["interrupted"] is False and s["error"] is None
        assert [json.loads(x) for x in log.read_text().splitlines()] == lines[:-1]
        assert backend.path(1)["state"] == EvState.DENIED.value
        # people get one line per action and a summary table
        backend.link_down(4)
        res = CliRunner().invoke(main, [
            "fw", "--target", f"tcp:{host}:{port}", "agent", "run", "--period", "0.01",
            "--probe-timeout", "0.05", "--periods", "3"])
        assert res.exit_code == 0, (res.output, res.exception)
        assert "quarantine" in res.output and "entry   4  EV 0x104" in res.output
        assert "agent summary" in res.output
        res = CliRunner().invoke(main, [
            "fw", "--target", f"tcp:{host}:{port}", "agent", "run", "--period", "0"])
        assert res.exit_code == 2 and "period_s must be > 0" in res.output


def test_cli_ctrl_c_prints_summary(monkeypatch, tmp_path):
    backend = provisioned_nic()

    def interrupted(self, duration_s=None, max_periods=None):
        self.start()
        self.step()
        raise KeyboardInterrupt
    monkeypatch.setattr(WeightAgent, "run", interrupted)
    with CsrServer(backend) as srv:
        host, port = srv.address
        res = CliRunner().invoke(main, ["fw", "--target", f"tcp:{host}:{port}", "--json",
                                        "agent", "run"])
    assert res.exit_code == 0, (res.output, res.exception)
    s = json.loads(res.output.splitlines()[-1])["summary"]
    assert s["interrupted"] is True and s["periods"] == 1
