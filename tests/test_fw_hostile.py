"""Hostile input against the control plane (fast: in-process models, no simulation).

The TCP server (``fw/tcp.py``) under garbage, partial, oversized frames, a failing
backend and a stop with clients connected; the simulation bridge (``sim/serve.py``)
after the end of a run; the weight manager (``fw/agent.py``) with absurd
parameters, a link failing during its start, a NIC whose path table is smaller
than a QP's EV profile, every EV failing at once; ``provision`` of a config the
client's register map cannot hold; ``mrcnic fw`` / ``mrcnic sim --serve`` with bad
options.  Each test names the problem it guards against.
"""

import json
import math
import socket
import time

import pytest
from click.testing import CliRunner

from mrcnic.cli import main
from mrcnic.fw.agent import AgentError, EntryStatus, WeightAgent
from mrcnic.fw.client import CsrClient, pack_record, unpack_record
from mrcnic.fw.provision import ProvisionError, provision_plan
from mrcnic.fw.tcp import CsrServer, TcpTransport
from mrcnic.fw.transport import LoopbackTransport, TransportError
from mrcnic.fw.uart import LinkError, ResponseDecoder, Status, encode_request
from mrcnic.regmap import REGMAP, build_regmap
from mrcnic.rtl.layouts import EvEventReason, EvState, PathEntry
from mrcnic.sim.serve import SimCsrBridge

MAGIC = REGMAP["ID_MAGIC"].reset


def _talk(address, data: bytes, wait=0.3):
    """Send raw bytes, collect what comes back until ``wait`` s of silence or EOF."""
    s = socket.create_connection(address, timeout=wait)
    s.sendall(data)
    out, eof = b"", False
    try:
        while True:
            d = s.recv(65536)
            if not d:
                eof = True
                break
            out += d
    except socket.timeout:
        pass
    finally:
        s.close()
    return ResponseDecoder().feed(out), eof


# ---- TCP server ---------------------------------------------------------------------------
class Flaky(LoopbackTransport):
    """A backend that raises something other than TransportError at two addresses."""

    def read32(self, addr):
        if addr == 0x1010:
            raise RuntimeError("backend bug")
        if addr == 0x1014:
            raise LinkError("backend link lost")
        return super().read32(addr)


def test_server_survives_garbage_and_partial_frames():
    with CsrServer(LoopbackTransport(), frame_timeout=0.1) as srv:
        assert _talk(srv.address, bytes(range(256)).replace(b"\xa5", b"") * 64) == ([], False)
        (r,), _ = _talk(srv.address, b"\xa5" * 8)                     # CMD 0xA5: BAD_FRAME
        assert r.status == Status.BAD_FRAME
        assert _talk(srv.address, encode_request(1, 0)[:5]) == ([], False)   # partial: dropped
        assert srv.stats["timeouts"] == 1
        (r,), _ = _talk(srv.address, encode_request(1, 0, tag=9)[:-1] + b"\x00")
        assert (r.tag, r.status) == (9, Status.BAD_CHECKSUM)
        (r,), _ = _talk(srv.address, encode_request(1, 0xFFFC, tag=3))      # unmapped
        assert (r.status, r.words) == (Status.SLVERR, (0,))
        (r,), _ = _talk(srv.address, encode_request(1, 0, tag=4, length=255))  # longest burst,
        assert len(r.words) == 255 and r.words[0] == MAGIC          # across unmapped words:
        assert r.status == Status.SLVERR and r.words[-1] == 0        # stops at the first
        _talk(srv.address, b"\x5a" * 1_000_000, wait=0.5)                   # a flood, then EOF
        assert CsrClient(TcpTransport(*srv.address, timeout=1)).read("ID_MAGIC") == MAGIC


def test_backend_exception_is_slverr_not_a_dead_connection():
    """Was: a backend raising e.g. RuntimeError / LinkError killed the handler thread
    (traceback, connection dropped without an answer)."""
    with CsrServer(Flaky()) as srv:
        t = TcpTransport(*srv.address, timeout=1, retries=0)
        for addr in (0x1010, 0x1014):
            with pytest.raises(TransportError, match="SLVERR"):
                t.read32(addr)
        assert t.read32(REGMAP["ID_MAGIC"].offset) == MAGIC       # same connection, still up
        with pytest.raises(TransportError):
            t.read_burst(0x100C, 3)                                 # fails on its 2nd word


def test_two_clients_and_stop_closes_connections():
    """Was: stop() left open connections served (requests executed after stop)."""
    backend = LoopbackTransport()
    srv = CsrServer(backend).start()
    c1 = CsrClient(TcpTransport(*srv.address, timeout=1, retries=0))
    c2 = CsrClient(TcpTransport(*srv.address, timeout=1, retries=0))
    for k in range(20):                                             # interleaved, both served
        c1.write("NIC_USID", k)
        assert c2.read("NIC_USID") == k
    srv.stop()
    t0 = time.monotonic()
    with pytest.raises(LinkError, match="closed"):
        c1.write("NIC_USID", 0x77)
    assert time.monotonic() - t0 < 0.9 and backend.values["NIC_USID"] == 19


# ---- simulation bridge ------------------------------------------------------------------
def test_bridge_after_the_run_fails_at_once(monkeypatch):
    """Was: a request after fail_pending(), or one in flight when the run ended,
    waited the whole bridge timeout (30 s) for a simulation that no longer runs."""
    import threading

    import cocotb
    started = []
    monkeypatch.setattr(cocotb, "start_soon", lambda coro: started.append(coro) or coro.close())
    bridge = SimCsrBridge(transport=None, timeout=20.0)
    res = {}

    def client():
        try:
            bridge.read32(0x10)
        except TransportError as exc:
            res["err"] = str(exc)
    th = threading.Thread(target=client)
    th.start()
    while bridge._q.empty():
        time.sleep(0.001)
    bridge.service()                        # in flight: its cocotb task never completes
    assert started and bridge._busy
    t0 = time.monotonic()
    bridge.fail_pending()
    th.join(2)
    assert not th.is_alive() and "simulation ended" in res["err"]
    with pytest.raises(TransportError, match="simulation ended"):
        bridge.write32(0x120, 1)
    assert time.monotonic() - t0 < 1.0


def test_bridge_behind_a_stopped_server_closes_clients():
    bridge = SimCsrBridge(transport=None, timeout=20.0)
    srv = CsrServer(bridge).start()
    t = TcpTransport(*srv.address, timeout=1, retries=0)
    srv.stop()
    bridge.fail_pending()
    with pytest.raises(LinkError):
        t.read32(0)


# ---- weight agent -----------------------------------------------------------------------
class Nic(LoopbackTransport):
    """The register model + EV_STATE_SET / EV_WEIGHT_SET acting on the path table;
    ``fail_reads``: table reads (TBL_CMD READ of ``path``) answered SLVERR."""

    def __init__(self, regmap=REGMAP):
        super().__init__(regmap)
        self.fail_path_reads = 0
        self.path_reads = 0

    def path(self, i):
        return unpack_record(PathEntry, self.tables["path"].get(i, 0))

    def write32(self, addr, value):
        r = self.regmap.at(addr & 0xFFFC)
        if r is not None and r.name == "TBL_CMD" and value == 2 \
                and self.values["TBL_SELECT"] == REGMAP.table("path").id.value:
            self.path_reads += 1
            if self.path_reads == self.fail_path_reads:
                raise TransportError("write", addr, 2, "injected")
        n = len(self.strobes)
        super().write32(addr, value)
        for name, f in self.strobes[n:]:
            if name == "EV_PROBE_REQ":
                self.push_probe_reply(f["index"], 1000 + f["index"])
            elif name in ("EV_STATE_SET", "EV_WEIGHT_SET"):
                rec = self.path(f["index"])
                key = "state" if name == "EV_STATE_SET" else "weight"
                rec[key] = f[key]
                self.tables["path"][f["index"]] = pack_record(PathEntry, rec)


def _provision(nic, n=4, base=0, count=4, states=None):
    c = CsrClient(nic)
    for i in range(n):
        st = (states or {}).get(i, EvState.GOOD)
        nic.tables["path"][i] = pack_record(PathEntry, dict(ev=0x100 + i, port=i % 2, weight=2,
                                                            state=st.value, n_carriers=1))
    c.write_table("txqp", 0, dict(profile_base=base, profile_count=count))
    nic.strobes.clear()
    return c


def _agent(nic, **kw):
    t = [0.0]

    def sleep(dt):
        t[0] += dt
    return WeightAgent(CsrClient(nic), clock=lambda: t[0], sleep=sleep, **kw)


@pytest.mark.parametrize("kw", [dict(period_s=math.inf), dict(probe_timeout_s=math.inf),
                                dict(period_s=math.nan), dict(period_s=True),
                                dict(probe_timeout_s=0), dict(ecn_threshold=True),
                                dict(evcnt_per_period=0), dict(quiet_periods=-1)])
def test_agent_absurd_parameters(kw):
    """Was: an infinite period / probe timeout was accepted (sleep(inf) -> OverflowError,
    a probe that never answers -> waits forever)."""
    with pytest.raises(ValueError):
        WeightAgent(CsrClient(LoopbackTransport()), **kw)


def test_agent_without_any_profile():
    a = _agent(Nic())
    a.run(max_periods=3)
    assert a.entries == {} and a.summary()["periods"] == 3
    assert [r["action"] for r in a.log] == ["start"]


def test_agent_start_interrupted_then_resumed():
    """Was: an AgentError inside start() left the agent 'started' with only part of
    the entries, and the next step() never read the rest."""
    nic = Nic()
    _provision(nic, states={1: EvState.ASSUMED_BAD})
    nic.fail_path_reads = 3                 # path[0], path[1] read; path[2] fails
    a = _agent(nic)
    with pytest.raises(AgentError, match=r"read path\[2\]"):
        a.step()
    assert not a.started
    a.step()                                # start() again, then the period
    assert a.started and sorted(a.entries) == [0, 1, 2, 3]
    assert a.entries[1].status is EntryStatus.QUARANTINED
    # quarantine (DENIED write) done, then a failure later in start(): entry 1 stays
    # the agent's own quarantine, not mistaken for an operator deny
    nic2 = Nic()
    _provision(nic2, states={1: EvState.ASSUMED_BAD, 3: EvState.ASSUMED_BAD})
    a2 = _agent(nic2)
    orig = a2._quarantine

    def quarantine(st, cause):
        if st.index == 3:
            raise AgentError("injected")
        orig(st, cause)
    a2._quarantine = quarantine
    with pytest.raises(AgentError):
        a2.start()
    a2._quarantine = orig
    a2.start()
    assert a2.entries[1].status is EntryStatus.QUARANTINED
    assert a2.entries[3].status is EntryStatus.QUARANTINED
    assert nic2.path(1)["state"] == nic2.path(3)["state"] == EvState.DENIED.value


def test_agent_profile_beyond_the_nics_path_table():
    """Was: a QP profile reaching past ID_PATH_DEPTH of a small NIC made start() read
    path entries the NIC refuses (SLVERR): the agent could not start at all."""
    nic = Nic(build_regmap(paths=16))
    _provision(nic, n=4, base=12, count=40)
    a = _agent(nic)
    a.step()
    assert sorted(a.entries) == [12, 13, 14, 15]


def test_agent_every_ev_failing_at_once_keeps_the_floor():
    """Every link of a profile fails: the NIC holds the last GOOD EV (MIN_ACTIVE), the
    agent quarantines only the entries the NIC made ASSUMED_BAD (documented)."""
    nic = Nic()
    _provision(nic)
    a = _agent(nic)
    a.step()
    for i in (0, 1, 2):
        rec = nic.path(i)
        rec["state"] = EvState.ASSUMED_BAD.value
        nic.tables["path"][i] = pack_record(PathEntry, rec)
        nic.push_event(i, EvState.ASSUMED_BAD.value, EvEventReason.ACK_TIMEOUT.value)
    nic.push_event(3, EvState.GOOD.value, EvEventReason.MIN_ACTIVE.value)
    a.step()
    assert [nic.path(i)["state"] for i in range(4)] == [EvState.DENIED.value] * 3 + [
        EvState.GOOD.value]
    assert [r["index"] for r in a.log if r["action"] == "held"] == [3]


def test_agent_transport_failing_mid_probe_resumes():
    nic = Nic()
    _provision(nic)
    a = _agent(nic, restore_after=1)
    a.step()
    rec = nic.path(2)
    rec["state"] = EvState.ASSUMED_BAD.value
    nic.tables["path"][2] = pack_record(PathEntry, rec)
    nic.push_event(2, EvState.ASSUMED_BAD.value, EvEventReason.ACK_TIMEOUT.value)
    orig = nic.read32
    fails = {"n": 1}

    def read32(addr):
        if addr == REGMAP["EV_PROBE_STATUS"].offset and fails["n"]:
            fails["n"] -= 1
            raise TransportError("read", addr, 2, "link hiccup")
        return orig(addr)
    nic.read32 = read32
    with pytest.raises(AgentError, match="probe replies"):
        a.step()                                      # the event was handled, no probe sent
    assert a.entries[2].status is EntryStatus.QUARANTINED and a.entries[2].probes == 0
    assert not [n for n, _ in nic.strobes if n == "EV_PROBE_REQ"]
    nic.push_probe_reply(2, 1)                        # a stale reply
    a.step()                                          # drains it, probes, restores
    assert a.entries[2].status is EntryStatus.ACTIVE and a.stats["stale_replies"] == 1
    assert a.entries[2].last_rtt_ns == 1002
    assert nic.path(2)["state"] == EvState.GOOD.value


# ---- provision ----------------------------------------------------------------------------
def test_provision_beyond_the_client_map_writes_nothing():
    """Was: a NIC reporting more memory regions (ID_MAX_REGIONS 8) than the client's
    register map holds passed the checks, then failed at mr[4] after ~80 writes
    (ports down, tables half written)."""
    from mrcnic.config import compile_tables, load_config
    cfg = load_config("examples/srh.toml")
    hw = compile_tables(cfg)
    nic = LoopbackTransport(build_regmap(regions=8))
    ident = CsrClient(nic).identity()
    with pytest.raises(ProvisionError, match=r"mr index 4"):
        provision_plan(cfg, hw, ident)
    for reg, v in (("ID_MAX_QPS", 1), ("ID_PATH_DEPTH", 16), ("ID_PORTS", 1)):
        with pytest.raises(ProvisionError, match=reg):
            provision_plan(cfg, hw, dict(ident, ID_MAX_REGIONS=4, **{reg: v}))
    with CsrServer(nic) as srv:
        res = CliRunner().invoke(main, ["fw", "--target", f"tcp:{srv.address[0]}:{srv.address[1]}",
                                        "provision", "examples/srh.toml"])
    assert res.exit_code == 2 and "error:" in res.output and nic.strobes == []


# ---- command lines ------------------------------------------------------------------------
@pytest.mark.parametrize("args,code,msg", [
    (["--timeout", "inf", "device"], 2, "--timeout"),
    (["--timeout", "nan", "device"], 2, "--timeout"),
    (["agent", "run", "--period", "inf", "--periods", "2"], 2, "period_s"),
    (["agent", "run", "--probe-timeout", "inf"], 2, "probe_timeout_s"),
    (["agent", "run", "--duration", "-1"], 2, "duration_s"),
    (["agent", "run", "--periods", "-1"], 2, "--periods"),
    (["ev", "probe", "1", "--wait", "inf"], 2, "--wait"),
])
def test_fw_cli_bad_options(args, code, msg):
    with CsrServer(LoopbackTransport()) as srv:
        res = CliRunner().invoke(main, ["fw", "--target",
                                        f"tcp:{srv.address[0]}:{srv.address[1]}"] + args)
    assert res.exit_code == code and msg in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_sim_serve_bad_options_fail_before_building(tmp_path):
    """Was: --serve on a busy port failed after the 1-2 min build with a traceback;
    run_cosim(serve_time_us=0) served forever."""
    from mrcnic.sim.cosim import run_cosim
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        t0 = time.monotonic()
        res = CliRunner().invoke(main, ["sim", "--scenario", "clean", "--size", "16384",
                                        "--serve", str(port), "--build-dir", str(tmp_path / "b")])
        assert res.exit_code != 0 and "cannot serve on 127.0.0.1" in res.output, res.output
        assert isinstance(res.exception, SystemExit)                   # no traceback
        for kw in (dict(serve=0, serve_time_us=0), dict(serve=0, serve_time_us=-1.0),
                   dict(serve=0, serve_time_us=math.nan), dict(serve=0, serve_nic=9)):
            with pytest.raises(ValueError, match="serve_"):
                run_cosim("clean", size=16384, build_dir=tmp_path / "c", **kw)
        assert time.monotonic() - t0 < 30
    finally:
        busy.close()
    res = CliRunner().invoke(main, ["sim", "--serve", "0", "--serve-time", "0"])
    assert res.exit_code == 2


# ---- fw wr / mem / ctl load: checked before anything is written ---------------------------
@pytest.fixture
def board():
    """A provisioned NIC model with a board (host memory, WR slot, completion FIFO) served over
    TCP, its host memory filled with a known background: ``(model, run(*args))``."""
    from .test_fw_mrc_api import nic
    model, _, _ = nic()
    mem = model.board.nic.mem
    mem.write(0, bytes((i * 7 + 3) & 0xFF for i in range(mem.size)))
    with CsrServer(model) as srv:
        target = f"tcp:{srv.address[0]}:{srv.address[1]}"
        yield model, lambda *args: CliRunner().invoke(main, ["fw", "--target", target, *args])


def _one_error_line(res, code, text):
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == code, (res.exit_code, res.output)
    assert len(lines) == 1 and lines[0].startswith("error: mrcnic fw") and text in lines[0], lines
    assert res.exception is None or isinstance(res.exception, SystemExit)    # no traceback


def _cpl(model, imm=None, psn=0):
    from mrcnic.rtl.layouts import Completion
    model.board.cpl.append(pack_record(Completion, dict(qp=0, psn=psn, has_imm=imm is not None,
                                                        imm=imm or 0)))


_PEER = ["--peer-config", "examples/nic1.toml"]
_VR = ["--va", "0x7f0000000000", "--rkey", "0x2001"]
_POST = ["wr", "post", "--size", "64", "--local-addr", "0x2000", "--save", "{tmp}/sent.bin"]
BAD_FW = [
    # (args, text in the one error line): exit 2, nothing written (host memory, --save /
    # --out file, WR slot), no completion popped
    (_POST + ["--imm", "0x100000000", *_PEER], "--imm"),
    (_POST + ["--imm=-1", *_PEER], "--imm"),
    (_POST + ["--qp", "99", *_PEER], "QP 99 does not exist"),
    (_POST + ["--qp=-1", *_PEER], "QP -1 does not exist"),
    (_POST + ["--rkey", "0x1ffffffff", "--va", "0"], "--rkey"),
    (_POST + ["--rkey", "1", "--va=-1"], "--va"),
    (_POST + ["--wr-id", "70000", *_PEER], "--wr-id"),            # was: cut to 16 bits
    (_POST + ["--local-addr", "0x2004", *_PEER], "8-byte aligned"),
    (_POST + ["--local-addr", "0x1fff8", "--size", "64k", *_PEER], "beyond"),
    (_POST + ["--local-addr", "0", "--size", "512m", *_VR], "beyond"),  # was: MemoryError
    (_POST + ["--local-addr", "0", "--size", "256m", "--pattern", "seed:1", *_VR], "beyond"),
    (_POST + ["--size=-8", *_PEER], "cannot be negative"),
    (_POST + ["--pattern", "seed:x", *_PEER], "seed:N"),
    (_POST + ["--pattern", "seed:", *_PEER], "seed:N"),
    (_POST + ["--pattern", "seed:1.5", *_PEER], "seed:N"),
    (_POST + ["--offset=-4096", *_PEER], "cannot be negative"),
    (_POST + ["--offset", "64k", *_VR], "--offset"),                 # was: ignored
    (_POST + ["--offset", "64k", "--va", "0x1000", *_PEER], "--offset"),
    (_POST + ["--no-fill", *_PEER], "--no-fill"),                   # was: --save wrote nothing
    (["wr", "post", "--size", "64k", "--local-addr", "0x1fff8", "--no-fill", *_VR], "beyond"),
    (["wr", "post", "--size", "64", "--save", "", *_PEER], "empty path"),
    (["wr", "post", "--size", "64", "--save", "{tmp}/no/s.bin", *_PEER], "does not exist"),
    (["wr", "post", "--size", "64", "--save", "{tmp}", *_PEER], "is a directory"),
    (["wr", "wait", "--wait", "nan"], "--wait"),                     # was: a hang
    (["wr", "wait", "--wait", "inf"], "--wait"),
    (["wr", "wait", "--wait=-1"], "--wait"),
    (["wr", "wait", "--count", "0"], "--count"),
    (["wr", "wait", "--imm", "0x100000000"], "--imm"),
    (["mem", "fill", "--", "0x100", "-1"], "cannot be negative"),   # was: success
    (["mem", "fill", "0x100", str(1 << 40)], "beyond"),              # was: MemoryError
    (["mem", "fill", "0x100", "300m", "--pattern", "incr"], "beyond"),
    (["mem", "fill", "0x100", "8", "--pattern", "seed:x"], "seed:N"),
    (["mem", "fill", "0x100", "8", "--pattern", "0x100"], "seed:N"),
    (["mem", "fill", "0x100", "8", "--file", "examples/nic1.toml", "--pattern", "0x1"],
     "one of --file, --pattern"),
    (["mem", "dump", "0", "4", "--out", ""], "empty path"),
    (["mem", "dump", "0", "4", "--out", "{tmp}/no/d.bin"], "does not exist"),
    (["mem", "dump", "0", "4", "--out", "{tmp}"], "is a directory"),
]


@pytest.mark.parametrize("args,text", BAD_FW, ids=[" ".join(a)[:70] for a, _ in BAD_FW])
def test_fw_bad_input_writes_nothing(board, tmp_path, args, text):
    model, run = board
    mem = model.board.nic.mem
    before = mem.read(0, mem.size)
    _cpl(model, imm=0x77)
    t0 = time.monotonic()
    res = run(*[a.format(tmp=tmp_path) for a in args])
    assert time.monotonic() - t0 < 5, "checked before generating any data"
    _one_error_line(res, 2, text)
    assert mem.read(0, mem.size) == before and model.board.pending is None
    assert len(model.board.cpl) == 1 and list(tmp_path.iterdir()) == []


def test_fw_wr_post_while_pending_fails_writing_nothing(board, tmp_path, monkeypatch):
    """Was: the second post overwrote the pending request's source data, then exit 2 (ENOMEM)."""
    import mrcnic.fw.cli as fwcli
    model, run = board
    monkeypatch.setattr(fwcli, "POST_WAIT_S", 0.2)
    res = run("wr", "post", "--size", "64", "--local-addr", "0x2000", "--pattern", "0x11", *_PEER)
    assert res.exit_code == 0, res.output
    pending, mem = model.board.pending, model.board.nic.mem
    before = mem.read(0, mem.size)
    res = run("wr", "post", "--size", "64", "--local-addr", "0x2000", "--pattern", "0x22",
              "--save", str(tmp_path / "s.bin"), *_PEER)
    _one_error_line(res, 1, "still pending")
    assert mem.read(0, mem.size) == before and mem.read(0x2000, 64) == b"\x11" * 64
    assert model.board.pending == pending and list(tmp_path.iterdir()) == []


def test_fw_wr_wait_imm_pops_only_what_it_needs(board):
    """Was: polled 16 at a time: extra matching completions were popped and lost; skipped
    ones were listed in --json only."""
    model, run = board
    for psn, imm in enumerate([0x55, 0x55, None, 0x55]):
        _cpl(model, imm, psn)
    res = run("--json", "wr", "wait", "--imm", "0x55", "--count", "1", "--wait", "1")
    assert res.exit_code == 0, res.output
    assert [(w["psn"], w.get("skipped")) for w in json.loads(res.output)] == [(0, None)]
    assert len(model.board.cpl) == 3
    res = run("--json", "wr", "wait", "--imm", "0x55", "--count", "2", "--wait", "1")
    assert [(w["psn"], w.get("skipped")) for w in json.loads(res.output)] == [
        (1, None), (3, None), (2, True)]
    assert len(model.board.cpl) == 0
    _cpl(model, None, 7)
    _cpl(model, 0x55, 8)
    res = run("wr", "wait", "--imm", "0x55", "--wait", "1")
    assert res.exit_code == 0 and "1 skipped" in res.output, res.output
    rows = [line for line in res.output.splitlines() if "IBV_WC" in line]
    assert len(rows) == 2 and "skipped" in rows[1] and " 7 " in rows[1], rows


def test_fw_mem_dump_compare_lengths(board, tmp_path):
    """Was: a file shorter or longer than LENGTH compared as identical in its common part
    (longer) or with first_difference null (shorter)."""
    model, run = board
    data = model.board.nic.mem.read(0x100, 16)
    for name, content, first in (("same", data, None), ("short", data[:12], 12),
                                 ("long", data + b"\0\0", 16),
                                 ("other", data[:5] + bytes([data[5] ^ 0xFF]) + data[6:], 5)):
        f = tmp_path / name
        f.write_bytes(content)
        res = run("--json", "mem", "dump", "0x100", "16", "--compare", str(f))
        if first is None:
            assert res.exit_code == 0, res.output
            continue
        assert res.exit_code == 1, res.output
        out = json.loads(res.output[:res.output.rindex("}") + 1])
        assert out["first_difference"] == first and out["compared_length"] == len(f.read_bytes())
        assert out["differing_bytes"] == (1 if name == "other" else abs(len(content) - 16))
        assert f"the file {len(f.read_bytes())} bytes" in res.output.splitlines()[-1]
        assert "LENGTH 16" in res.output.splitlines()[-1]


def test_fw_sizes_are_the_projects_sizes(board):
    """fw sizes use mrcnic.clikit.parse_size: 1KB is 1000 bytes, 1KiB 1024, GiB a size."""
    model, run = board
    for size, n in (("1KB", 1000), ("1KiB", 1024), ("1k", 1024), ("0x10", 16)):
        res = run("--json", "mem", "dump", "0", size)
        assert res.exit_code == 0 and json.loads(res.output)["length"] == n, res.output
    _one_error_line(run("mem", "dump", "0", "1GiB"), 2, "beyond")


def test_fw_ctl_load_read_back_mismatch_exits_1(board, monkeypatch):
    """Was: exit 2 (bad input) when the NIC read back other EVs than the file's."""
    import dataclasses

    from mrcnic.fw.mrc_ctl import MrcCtlContext
    _, run = board
    orig = MrcCtlContext.mrc_ctl_query_ev_profile

    def query(self, pid, attr, mask):
        r = orig(self, pid, attr, mask)
        if attr.ev_op is not None and attr.ev_op.entries:
            e = attr.ev_op.entries[0]
            attr.ev_op.entries[0] = dataclasses.replace(e, ev=dataclasses.replace(e.ev,
                                                                               val=e.ev.val ^ 1))
        return r
    monkeypatch.setattr(MrcCtlContext, "mrc_ctl_query_ev_profile", query)
    res = run("ctl", "load", "examples/ocp_mrc_examples.toml", "--profile", "gen_stev")
    assert res.exit_code == 1 and "DIFFERENT" in res.output, res.output
    assert res.output.splitlines()[-1].startswith("error: mrcnic fw") and \
        "read back differs" in res.output.splitlines()[-1]
