"""``mrcnic sim --serve``: the firmware drives a live co-simulated NIC over TCP.

The NICs are the real RTL (CsrNic: MRCNic behind its CSR bank, cocotb + Icarus)
across the fabric model; the test process is the controller, exactly as on a
board but over ``tcp:`` instead of ``uart:``:

* ``mrcnic fw ev list`` shows the live EV profile; ``ev deny`` takes effect on
  traffic at once (the per-EV packet counter of the entry stops while the
  others keep growing); ``ev probe`` returns a measured RTT; ``ev allow`` puts
  the entry back into use.
* the weight agent (``fw/agent.py``) on a NIC whose fabric loses a link: it
  sees the EV events, keeps the affected entries DENIED (no packets on them),
  probes them without reply while the link is down, and restores them once the
  link is back (and they carry packets again).
"""

import contextlib
import json
import threading
import time

from click.testing import CliRunner

from mrcnic.cli import main
from mrcnic.fw.agent import EntryStatus, WeightAgent
from mrcnic.fw.client import CsrClient
from mrcnic.fw.tcp import TcpTransport
from mrcnic.rtl.layouts import EvState
from mrcnic.sim.cosim import run_cosim
from mrcnic.sim.scenarios import get_scenario

SIZE = 16 * 1024


def _scenario(failures=()):
    """Two NICs, four planes (the cached 4-port NIC), 8 EVs, repeated 16 KiB WRITEs."""
    sc = get_scenario("ecn", size=SIZE)
    sc.update(name="serve", evs=8, slow_links=[], background=[], failures=list(failures),
              reliability=dict(ack_timeout_exp=5, probe_interval=2000))
    sc.pop("cc", None)
    return sc


@contextlib.contextmanager
def served(sc, tmp_path):
    """Run the scenario with ``serve=0`` in a thread; yield (target, client, result)."""
    build = tmp_path / "sim"
    result = {}

    def worker():
        try:
            result["report"] = run_cosim(sc, build_dir=build, serve=0)
        except BaseException as exc:        # noqa: BLE001 - reported by the test
            result["error"] = exc
    th = threading.Thread(target=worker, daemon=True)
    th.start()
    port_file = build / "serve.json"
    deadline = time.monotonic() + 600
    while not port_file.exists():
        assert th.is_alive(), f"simulation ended before serving: {result}"
        assert time.monotonic() < deadline, "the simulation never started serving"
        time.sleep(0.5)
    addr = json.loads(port_file.read_text())
    client = CsrClient(TcpTransport(addr["host"], addr["port"], timeout=20.0))
    try:
        yield f"tcp:{addr['host']}:{addr['port']}", client, result
    finally:
        client.transport.close()
        (build / "serve.stop").write_text("stop")
        th.join(600)
    assert "error" not in result, result.get("error")
    rep = result["report"]
    assert rep["bytes_mismatched"] == 0 and rep["bytes_delivered"] == rep["bytes_posted"]
    assert rep["csr_ops"] > 0


def fw(target, *args):
    res = CliRunner().invoke(main, ["fw", "--target", target, "--timeout", "20", "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


#: One controller at a time: table accesses go through the shared indirect window
#: (TBL_SELECT / TBL_INDEX / TBL_DATA*), so the test and the agent take turns.
BUS = threading.RLock()


def packets(client, indices):
    with BUS:
        return {i: client.read_table("evcnt", i)["packets"] for i in indices}


def entry_state(client, index):
    with BUS:
        return client.read_table("path", index)["state"]


def wait_traffic(client, indices, grow: int, timeout: float = 300.0):
    """Wait until the packets on ``indices`` together grew by ``grow``; return the counts."""
    start = packets(client, indices)
    deadline = time.monotonic() + timeout
    while True:
        now = packets(client, indices)
        if sum(now.values()) - sum(start.values()) >= grow:
            return now
        assert time.monotonic() < deadline, f"traffic stalled: {start} -> {now}"
        time.sleep(0.2)


def test_serve_ev_list_deny_probe_allow(tmp_path):
    with served(_scenario(), tmp_path) as (target, client, _):
        listing = fw(target, "ev", "list")
        entries = [e for prof in listing.values() for e in prof["entries"]] \
            if isinstance(listing, dict) else listing
        assert len(entries) == 8
        assert all(e["state"] == "GOOD" and e["weight"] > 0 for e in entries)
        indices = [e["index"] for e in entries]
        victim = entries[3]
        others = [i for i in indices if i != victim["index"]]

        before = wait_traffic(client, indices, 12)
        assert before[victim["index"]] > 0                       # in use before the deny
        fw(target, "ev", "deny", hex(victim["ev"]))
        assert client.read_table("path", victim["index"])["state"] == EvState.DENIED.value
        at_deny = packets(client, [victim["index"]])[victim["index"]]
        wait_traffic(client, others, 8)
        settled = packets(client, [victim["index"]])[victim["index"]]
        # at most the packets already scheduled when the deny landed (spray pipeline)
        assert settled - at_deny <= 4, (at_deny, settled)
        wait_traffic(client, others, 24)
        assert packets(client, [victim["index"]])[victim["index"]] == settled

        probe = fw(target, "ev", "probe", hex(victim["ev"]), "--wait", "20")
        assert probe["missing"] == [] and len(probe["replies"]) == 1
        rtt = probe["replies"][0]["rtt_ns"]
        assert 400 < rtt < 100_000, rtt            # host + fabric links both ways, ns

        fw(target, "ev", "allow", hex(victim["ev"]))
        wait_traffic(client, [victim["index"]], 3)            # back in use

        # a CC profile change applies live: the QP keeps sending (no PSN-state reset)
        fw(target, "cc", "set", "0", "max_cwnd=0x20000")
        with BUS:
            assert client.read_table("cc", 0)["max_cwnd"] == 0x20000
        before = sum(wait_traffic(client, indices, 16).values())
        counters = fw(target, "counters")
        after = sum(packets(client, indices).values())
        # TX_PACKETS (data frames out of all planes) against the per-EV packet counters (the
        # segmenter's sent tap, read before and after): frames still in the transmit pipeline
        # at the first read (< 16) are the only lag (probe frames count as ACK frames)
        assert before - 16 <= counters["TX_PACKETS"] <= after, (before, counters, after)
        assert counters["TX_PACKETS"] > 0                      # nic0 sends, the fabric is clean:
        assert all(v == 0 for k, v in counters.items() if k.startswith("RX_DROP_"))


def test_agent_link_loss_and_recovery(tmp_path):
    # nic1 (host 2) hangs off leaf 1: its plane-0 uplink to spine 0 fails, then recovers
    link = ["p0.leaf1", "p0.spine0"]
    # the link stays down for 100 ideal transfer times (~2 ms simulated, about a minute of
    # wall time with the agent's CSR traffic): the agent (wall-clock periods, a 3 s probe
    # timeout) must see the
    # ASSUMED_BAD event, quarantine and probe in vain before it comes back (at 24 ideal
    # times a served Verilator run, which sleeps between events, recovered the link before
    # the agent's probe had timed out)
    sc = _scenario(failures=[{"action": "fail_link", "target": link, "at": 1.0},
                             {"action": "recover_link", "target": link, "at": 100.0}])
    with served(sc, tmp_path) as (target, client, _):
        # the NIC's own reaction first, seen through the CSR bank: an entry goes ASSUMED_BAD
        # (ACK timeout; the path table read back follows the NIC's state changes)
        deadline = time.monotonic() + 900
        while not any(entry_state(client, i) == EvState.ASSUMED_BAD.value for i in range(8)):
            assert time.monotonic() < deadline, "no entry went ASSUMED_BAD"
            time.sleep(0.5)
        actions = []
        # wall-clock timings for a simulation at a few us of simulated time per second
        agent = WeightAgent(client, period_s=0.2, probe_timeout_s=3.0, restore_after=2,
                            deny_after=5, evcnt_per_period=4, on_action=actions.append)
        stop, paused = threading.Event(), threading.Event()
        errors = []

        def run():
            try:
                with BUS:
                    agent.start()
                while not stop.is_set():
                    with BUS:               # paused is read under the lock the test takes
                        if not paused.is_set():
                            agent.step()
                    time.sleep(agent.period_s)
            except Exception as exc:               # noqa: BLE001 - reported below
                errors.append(exc)
        th = threading.Thread(target=run, daemon=True)
        th.start()
        try:
            deadline = time.monotonic() + 900
            while not any(a["action"] == "quarantine" for a in actions):
                assert not errors, errors
                assert time.monotonic() < deadline, actions
                time.sleep(0.5)
            # kept out of use: DENIED, and no packets on it while the others carry traffic.
            # The agent is paused for the check so that it cannot restore the entry meanwhile.
            paused.set()
            with BUS:                       # the agent's step in progress (if any) ends first
                bad = sorted({a["index"] for a in actions if a["action"] == "quarantine"})
                out = [i for i in bad if agent.entries[i].status is EntryStatus.QUARANTINED]
            assert out, actions             # the link is still down: its EV is still out
            for i in out:
                assert entry_state(client, i) == EvState.DENIED.value
            others = [i for i in agent.entries if i not in bad]
            # packets whose spray decision came before the deny may still leave: the
            # segmenter's descriptors run up to pending_depth (16) packets ahead, in order
            wait_traffic(client, others, 16)
            held = packets(client, out)
            wait_traffic(client, others, 16)
            assert packets(client, out) == held
            paused.clear()
            # restored once the link is back
            while not {a["index"] for a in actions if a["action"] == "restored"} >= set(bad):
                assert not errors, errors
                assert time.monotonic() < deadline, actions
                time.sleep(0.5)
            assert agent.stats["probes_lost"] >= 1               # probed while the link was down
            for i in bad:
                assert entry_state(client, i) == EvState.GOOD.value
            wait_traffic(client, bad, len(bad))                   # back in use
        finally:
            stop.set()
            th.join(60)
        assert not errors, errors
