"""``mrcnic fw``: every command through the TCP transport against a served register model.

The backend (:class:`FakeNic`) is the register-map model ``LoopbackTransport``
(RW registers store values, tables store records, CMD writes are recorded) plus
what the NIC does behind three CMD registers: ``EV_STATE_SET`` / ``EV_WEIGHT_SET``
update the path-table record, ``EV_PROBE_REQ`` queues a probe reply.  It is served
in-process by ``mrcnic.fw.tcp.CsrServer`` and the CLI runs under click's
``CliRunner``.  Also: the framed protocol's error answers over TCP and the UART
transport over a pseudo-terminal.
"""

import copy
import json
import os
import pty
import select
import socket
import threading
import tty
from pathlib import Path

import pytest
from click.testing import CliRunner

from mrcnic.cli import main
from mrcnic.config import compile_tables, load_config
from mrcnic.fw.cli import parse_target
from mrcnic.fw.client import CsrClient, pack_record, unpack_record
from mrcnic.fw.tcp import CsrServer, TcpTransport, _execute
from mrcnic.fw.transport import LoopbackTransport
from mrcnic.fw.uart import (Cmd, RequestDecoder, ResponseDecoder, Status, crc8, encode_request,
                            encode_response)
from mrcnic.regmap import REGMAP
from mrcnic.rtl.layouts import EvState, PathEntry
from mrcnic.rtl.nscc import NSCC_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
SRH = str(ROOT / "examples" / "srh.toml")


class FakeNic(LoopbackTransport):
    """LoopbackTransport + the path-table side effects of the EV command registers."""

    def write32(self, addr, value):
        n = len(self.strobes)
        super().write32(addr, value)
        for name, f in self.strobes[n:]:
            if name in ("EV_STATE_SET", "EV_WEIGHT_SET"):
                rec = unpack_record(PathEntry, self.tables["path"].get(f["index"], 0))
                rec["state" if name == "EV_STATE_SET" else "weight"] = (
                    f["state"] if name == "EV_STATE_SET" else f["weight"])
                self.tables["path"][f["index"]] = pack_record(PathEntry, rec)
            elif name == "EV_PROBE_REQ":
                self.push_probe_reply(f["index"], 1000 + 10 * f["index"])

    def snapshot(self):
        """The NIC's state (the table window's registers and READ commands excluded:
        reading is not a change)."""
        values = {k: v for k, v in self.values.items() if not k.startswith("TBL_")}
        strobes = [s for s in self.strobes if not (s[0] == "TBL_CMD" and s[1]["op"] == 2)]
        return copy.deepcopy((values, self.tables, strobes, list(self.events),
                              list(self.probe_replies)))


@pytest.fixture
def nic():
    backend = FakeNic()
    with CsrServer(backend) as srv:
        host, port = srv.address
        backend.target = f"tcp:{host}:{port}"
        backend.server = srv
        yield backend


def fw(nic, *args, config=None, ok=True):
    argv = ["fw", "--target", nic.target, "--timeout", "1"] + (["--config", config] if config else [])
    res = CliRunner().invoke(main, argv + list(args))
    if ok:
        assert res.exit_code == 0, (args, res.output, res.exception)
    else:
        assert res.exit_code != 0, (args, res.output)
    return res


def fwj(nic, *args, config=None):
    return json.loads(fw(nic, "--json", *args, config=config).output)


def path(nic, i):
    return unpack_record(PathEntry, nic.tables["path"][i])


def provisioned(nic):
    fw(nic, "provision", SRH)
    return compile_tables(load_config(SRH))


# ---- targets, device, provisioning ---------------------------------------------------------
def test_parse_target():
    assert parse_target("uart:/dev/ttyUSB0") == ("uart", "/dev/ttyUSB0", 115200)
    assert parse_target("uart:/dev/ttyUSB0:3000000") == ("uart", "/dev/ttyUSB0", 3000000)
    assert parse_target("tcp:localhost:5791") == ("tcp", "localhost", 5791)
    # pyserial URLs keep their own port; a baud rate may follow it
    assert parse_target("uart:socket://ser2net:7777") == ("uart", "socket://ser2net:7777", 115200)
    assert parse_target("uart:socket://ser2net:7777:921600") == \
        ("uart", "socket://ser2net:7777", 921600)
    assert parse_target("uart:loop://") == ("uart", "loop://", 115200)
    assert parse_target("uart:loop://:9600") == ("uart", "loop://", 9600)
    assert parse_target("uart:spy:///dev/ttyUSB0:9600") == ("uart", "spy:///dev/ttyUSB0", 9600)
    assert parse_target("uart:socket://[::1]:7777:9600") == ("uart", "socket://[::1]:7777", 9600)
    assert parse_target("tcp:[::1]:80") == ("tcp", "::1", 80)
    # refused with the usage line: no port / port 0 or too big in a URL, empty devices,
    # baud 0 or negative, non-ASCII digits, huge numbers, malformed hosts
    for bad in ("uart:socket://", "uart:socket://h", "uart:socket://h:0", "uart:socket://h:99999",
                "uart:socket://:7777", "uart:socket://h:7777:", "uart: ", "uart::9600",
                "uart:/dev/x:0", "uart:/dev/x:-1", "uart:COM3:\u0663", "tcp:h:\u0668\u0660",
                "tcp:[]:80", "tcp:[h:80", "tcp: :80", "tcp:h:" + "9" * 5000,
                "uart:/dev/x:" + "9" * 5000):
        with pytest.raises(ValueError, match="bad target"):
            parse_target(bad)
    for bad in ("serial:x", "tcp:host", "tcp:host:0", "uart:", "tcp::99999"):
        with pytest.raises(ValueError, match="bad target"):
            parse_target(bad)
    res = CliRunner().invoke(main, ["fw", "--target", "tcp:nohost", "device"])
    assert res.exit_code == 2 and "uart:DEVICE[:BAUD] or tcp:HOST:PORT" in res.output


def test_unreachable_target():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                        # nothing listens there now
    res = CliRunner().invoke(main, ["fw", "--target", f"tcp:127.0.0.1:{port}", "device"])
    assert res.exit_code == 1 and "cannot connect" in res.output


def test_device(nic):
    d = fwj(nic, "device")
    assert d["ID_MAGIC"] == 0x4D52434E and d["version"] == "1.0"
    assert d["ID_PORTS"] == REGMAP.params["ports"]
    assert "ID_PATH_DEPTH" in fw(nic, "device").output


def test_provision(nic):
    before = nic.snapshot()
    dry = fwj(nic, "provision", "--dry-run", SRH)
    assert dry["dry_run"] and dry["writes"]["path"] == 20
    assert nic.snapshot()[:2] == before[:2]                     # nothing written
    out = fwj(nic, "provision", SRH)
    hw = compile_tables(load_config(SRH))
    assert out["profiles"] == {"long": {"base": 0, "count": 16},
                               "explicit_long": {"base": 16, "count": 4}}
    t = REGMAP.table("path")
    for i, e in enumerate(hw.path_entries):
        assert nic.tables["path"][i] == pack_record(t.layout, e)
    for i, s in enumerate(hw.segments):
        assert nic.tables["seg"][i] == s
    for q, ctx in enumerate(hw.qp_contexts):
        assert nic.tables["txqp"][q] == pack_record(REGMAP.table("txqp").layout, ctx)
    assert unpack_record(REGMAP.table("cc").layout, nic.tables["cc"][0]) == NSCC_DEFAULTS
    assert unpack_record(REGMAP.table("mr").layout, nic.tables["mr"][0])["rkey"] == 0x77
    assert unpack_record(REGMAP.table("mr").layout, nic.tables["mr"][1])["valid"] == 0
    v = nic.values
    assert v["NIC_USID"] == 0x0100 and v["NIC_LOCATOR"] == 0xFC000000
    assert v["NIC_SRC_MAC_LO"] == 0x00000001 and v["NIC_SRC_MAC_HI"] == 0x0200
    assert v["NIC_SRC_IP3"] == 0xFD000000 and v["NIC_SRC_IP0"] == 1
    assert v["NIC_PMTU_LOG2"] == 12 and v["PORT_ADMIN"] == 0b11
    assert v["PORT1_NH_MAC_LO"] == 0x00001100
    assert "programmed nic0" in fw(nic, "provision", SRH).output
    assert "would program nic0" in fw(nic, "provision", "--dry-run", SRH).output


def test_provision_bad_config(nic, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(Path(SRH).read_text().replace("ev_min_active = 2", "ev_min_active = 9"))
    before = nic.snapshot()
    res = fw(nic, "provision", str(bad), ok=False)
    assert res.exit_code == 2 and "ev_min_active" in res.output and "bad.toml" in res.output
    assert nic.snapshot() == before
    too_many = tmp_path / "many.toml"
    text = Path(SRH).read_text()
    for p in range(2, 6):                                   # 6 ports on a 4-port NIC
        text = text.replace("[[memory_regions]]", f"[[ports]]\nid = {p}\n"
                            f"next_hop_mac = \"02:00:00:00:1{p}:00\"\n\n[[memory_regions]]", 1)
    too_many.write_text(text)
    res = fw(nic, "provision", str(too_many), ok=False)
    assert "needs 6 ports, the NIC has 4" in res.output
    assert nic.snapshot()[:2] == before[:2]


# ---- ports --------------------------------------------------------------------------------
def test_ports(nic):
    provisioned(nic)
    rows = fwj(nic, "ports")
    assert [r["admin"] for r in rows] == ["up", "up", "down", "down"]
    assert rows[1]["next_hop_mac"] == "02:00:00:00:11:00"
    fw(nic, "ports", "disable", "1")
    assert nic.values["PORT_ADMIN"] == 0b01
    fw(nic, "ports", "enable", "3")
    assert nic.values["PORT_ADMIN"] == 0b1001
    before = nic.snapshot()
    res = fw(nic, "ports", "enable", "4", ok=False)
    assert "port 4 does not exist (ports 0..3)" in res.output
    assert nic.snapshot() == before
    assert "02:00:00:00:10:00" in fw(nic, "ports").output


# ---- EVs ----------------------------------------------------------------------------------
def test_ev_list(nic):
    hw = provisioned(nic)
    data = fwj(nic, "ev", "list", config=SRH)
    assert list(data) == ["long", "explicit_long"]
    ex = data["explicit_long"]
    assert ex["ev_min_active"] == 2 and [e["ev"] for e in ex["entries"]] == [0x100, 0x101, 0x101, 0x102]
    assert [e["state"] for e in ex["entries"]] == ["GOOD", "GOOD", "GOOD", "DENIED"]
    assert [e["ev"] for e in data["long"]["entries"]] == [e["ev"] for e in hw.path_entries[:16]]
    # without --config: the profiles are read back from the QP contexts
    back = fwj(nic, "ev", "list")
    assert list(back) == ["qp0", "qp1"] and back["qp1"]["entries"] == ex["entries"]
    assert fwj(nic, "ev", "list", "explicit_long", config=SRH) == {"explicit_long": ex}
    res = fw(nic, "ev", "list", "nope", config=SRH, ok=False)
    assert "unknown EV profile 'nope' (profiles: long, explicit_long)" in res.output
    assert "EV profile explicit_long" in fw(nic, "ev", "list", config=SRH).output


def test_ev_weight(nic):
    provisioned(nic)
    out = fwj(nic, "ev", "set-weight", "0x101", "9", config=SRH)
    assert out["entries"] == [17, 18]
    assert path(nic, 17)["weight"] == path(nic, 18)["weight"] == 9 and path(nic, 16)["weight"] == 1
    before = nic.snapshot()
    res = fw(nic, "ev", "set-weight", "0x101", "256", ok=False)
    assert "weight 256 out of range 0..255" in res.output
    res = fw(nic, "ev", "set-weight", "0x777", "3", config=SRH, ok=False)
    assert "unknown EV 0x777: not in any EV profile (long, explicit_long); EVs: 0x0, 0x1" in res.output
    res = fw(nic, "ev", "set-weight", "0x5", "3", "--profile", "explicit_long", config=SRH, ok=False)
    assert "unknown EV 0x5: not in profile explicit_long; EVs: 0x100, 0x101, 0x102" in res.output
    res = fw(nic, "ev", "set-weight", "zz", "3", ok=False)
    assert res.exit_code == 2 and "not an integer" in res.output
    assert nic.snapshot() == before


def test_ev_deny_allow(nic):
    provisioned(nic)
    before = nic.snapshot()
    # explicit_long: EVs 0x100, 0x101 (2 copies) GOOD, 0x102 DENIED; ev_min_active = 2
    res = fw(nic, "ev", "deny", "0x100", config=SRH, ok=False)
    assert "would leave 1 GOOD EVs in profile explicit_long, below its ev_min_active 2" in res.output
    assert nic.snapshot() == before
    fw(nic, "ev", "allow", "0x102", config=SRH)
    assert path(nic, 19)["state"] == EvState.GOOD.value
    out = fwj(nic, "ev", "deny", "0x101", config=SRH)
    assert out["entries"] == [17, 18] and out["good_evs_left"] == 2
    assert path(nic, 17)["state"] == path(nic, 18)["state"] == EvState.DENIED.value
    # without --config the floor is 1: the last GOOD EV is protected
    fw(nic, "ev", "deny", "0x100", "--profile", "qp1")
    res = fw(nic, "ev", "deny", "0x102", ok=False)
    assert "below its ev_min_active 1" in res.output
    # an admin-down port does not count as GOOD
    fw(nic, "ev", "allow", "0x100")
    fw(nic, "ports", "disable", "0")                           # 0x100 and 0x102 are on port 0
    res = fw(nic, "ev", "deny", "0x101", config=SRH, ok=False)  # 0x101 is already DENIED...
    assert "would leave 0 GOOD EVs" in res.output


def test_ev_probe(nic):
    provisioned(nic)
    out = fwj(nic, "ev", "probe", "0x101", config=SRH)
    assert out["replies"] == [{"index": 17, "rtt_ns": 1170, "requested": True}]
    assert out["missing"] == []
    assert [s for s in nic.strobes if s[0] == "EV_PROBE_REQ"] == [("EV_PROBE_REQ", {"index": 17, "qp": 1})]   # profile explicit_long: QP 1
    res = fw(nic, "ev", "probe", "0x100", config=SRH)
    assert "1160" in res.output


def test_ev_probe_no_reply(nic):
    provisioned(nic)
    nic.push_probe_reply = lambda index, rtt: None               # the path never answers
    res = fw(nic, "ev", "probe", "0x100", "--wait", "0.1", config=SRH, ok=False)
    assert "no probe reply for EV 0x100" in res.output


# ---- events, counters, cc -----------------------------------------------------------------
def test_events(nic):
    provisioned(nic)
    assert fwj(nic, "events") == []
    nic.push_event(17, EvState.ASSUMED_BAD.value, 0)
    nic.push_event(17, EvState.GOOD.value, 1)
    out = fwj(nic, "events")
    assert out == [{"index": 17, "ev": 0x101, "state": "ASSUMED_BAD", "reason": "ACK_TIMEOUT"},
                   {"index": 17, "ev": 0x101, "state": "GOOD", "reason": "PROBE_OK"}]
    assert not nic.events
    nic.push_event(16, EvState.GOOD.value, 3)
    assert "MIN_ACTIVE" in fw(nic, "events").output


def test_counters(nic):
    nic.inputs["RX_ACCEPTED"] = 5
    ticks = iter(range(100, 1000, 7))
    nic.inputs["TX_PACKETS"] = lambda: next(ticks)
    out = fwj(nic, "counters")
    assert out["RX_ACCEPTED"] == 5 and out["TX_PACKETS"] == 100 and "RX_DROP_ICRC" in out
    res = fw(nic, "--json", "counters", "--watch", "--count", "3", "--interval", "0")
    lines = [json.loads(x) for x in res.output.splitlines()]
    assert len(lines) == 3 and lines[0]["delta"] is None
    assert lines[1]["delta"]["TX_PACKETS"] == 7 and lines[2]["delta"]["RX_ACCEPTED"] == 0
    res = fw(nic, "counters", "--watch", "--count", "2", "--interval", "0")
    assert res.output.count("counters (") == 2 and "delta" in res.output


def test_cc(nic):
    provisioned(nic)
    out = fwj(nic, "cc", "show")
    assert out["0"] == NSCC_DEFAULTS and len(out) == REGMAP.params["qps"]
    fw(nic, "cc", "set", "1", "max_cwnd=0x20000", "eta_q8=40")
    rec = unpack_record(REGMAP.table("cc").layout, nic.tables["cc"][1])
    assert rec == dict(NSCC_DEFAULTS, max_cwnd=0x20000, eta_q8=40)
    assert fwj(nic, "cc", "show", "1")["1"]["max_cwnd"] == 0x20000
    before = nic.snapshot()
    for args, msg in ((("1", "qa_enable=2"), "does not fit in 1 bits"),
                      (("1", "cwnd=5"), "unknown NSCC field 'cwnd'"),
                      (("1", "eta_q8"), "is not FIELD=VALUE"),
                      (("9", "eta_q8=1"), "QP 9 does not exist"),
                      (("1",), "nothing to set"),
                      (("1", "--profile", "x"), "--profile needs --config")):
        res = fw(nic, "cc", "set", *args, ok=False)
        assert msg in res.output, (args, res.output)
    assert nic.snapshot() == before
    assert "max_cwnd" in fw(nic, "cc", "show").output


def test_bus_error_is_clear(nic):
    """A register the NIC refuses (SLVERR) ends the command with the address and the response."""
    provisioned(nic)
    nic.tables["txqp"][1] = pack_record(REGMAP.table("txqp").layout,
                                        dict(profile_base=250, profile_count=9))
    res = fw(nic, "ev", "list", ok=False)                      # index 256 is beyond the table
    assert "answered SLVERR" in res.output or "out of range" in res.output


# ---- the protocol on the wire -------------------------------------------------------------
def test_tcp_frame_errors(nic):
    with socket.create_connection(nic.server.address, timeout=2) as s:
        dec = ResponseDecoder()

        def answer():
            got = []
            while not got:
                got = dec.feed(s.recv(256))
            return got[0]

        frame = bytearray(encode_request(Cmd.WRITE, REGMAP["NIC_USID"].offset, tag=9, data=0x55))
        frame[-1] ^= 0xFF
        s.sendall(b"\x00\x13" + bytes(frame))                  # junk, then a bad CRC
        assert answer() == (9, Cmd.WRITE, Status.BAD_CHECKSUM, ())
        body = bytes([4, 0x33, 1, 0, 0])
        s.sendall(bytes([0xA5]) + body + bytes([crc8(body)]))
        assert answer()[2] == Status.BAD_FRAME
        s.sendall(encode_request(Cmd.READ, 0x0700, tag=5))
        assert answer() == (5, Cmd.READ, Status.SLVERR, (0,))
        s.sendall(encode_request(Cmd.READ, REGMAP["ID_MAGIC"].offset, tag=6, length=2))
        assert answer() == (6, Cmd.READ, Status.OK, (0x4D52434E, 0x0100))
    assert nic.values["NIC_USID"] == 0
    assert nic.server.stats["bad_checksums"] == 1 and nic.server.stats["bad_frames"] == 1


def test_tcp_client_burst_and_retry(nic):
    t = TcpTransport(*nic.server.address, timeout=0.5)
    assert t.read_burst(REGMAP["ID_MAGIC"].offset, 3)[:2] == [0x4D52434E, 0x0100]
    c = CsrClient(t)
    c.write("NIC_USID", 0x4242)
    assert c.read("NIC_USID") == 0x4242
    t.close()


def test_uart_transport_over_pty():
    """UartTransport (pyserial) against a bridge model on a pseudo-terminal."""
    backend = FakeNic()
    master, slave = pty.openpty()
    tty.setraw(slave)
    stop = threading.Event()

    def bridge():
        dec, lock = RequestDecoder(), threading.Lock()
        while not stop.is_set():
            if not select.select([master], [], [], 0.05)[0]:
                continue
            data = os.read(master, 256)
            for ev in dec.feed(data):
                if isinstance(ev, tuple) and not hasattr(ev, "addr"):
                    os.write(master, encode_response(*ev))
                else:
                    os.write(master, _execute(backend, lock, ev))

    th = threading.Thread(target=bridge, daemon=True)
    th.start()
    try:
        dev = os.ttyname(slave)
        res = CliRunner().invoke(main, ["fw", "--target", f"uart:{dev}:115200", "--json", "device"])
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["ID_MAGIC"] == 0x4D52434E
        res = CliRunner().invoke(main, ["fw", "--target", f"uart:{dev}", "ports", "enable", "2"])
        assert res.exit_code == 0, res.output
        assert backend.values["PORT_ADMIN"] == 0b100
    finally:
        stop.set()
        th.join()
        os.close(slave)
        os.close(master)
