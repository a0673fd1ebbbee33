"""The mrc_ctl.h / mrc.h Python APIs (fw/mrc_ctl.py, fw/mrc.py) against the in-process
register model (LoopbackTransport, with the CsrNic's EV_STATE_SET / EV_WEIGHT_SET
read-modify-write) and
the co-simulation's board model (sim/serve.py SimBoard) on a plain memory: every call, the
profile state machines, the header's errnos and its per-entry partial-success rule."""

import errno
from pathlib import Path

import pytest
from cocotbext.axi.memory import Memory

from mrcnic.config import compile_tables, load_config
from mrcnic.fw.client import CsrClient, pack_record, unpack_record
from mrcnic.fw.mrc import HostMemory, IbvSendWr, IbvWcOpcode, IbvWrOpcode, MrcContext, MrcQpAttr
from mrcnic.fw.mrc import MrcQpAttrMask as QM
from mrcnic.fw.mrc_ctl import (MRC_CTL_EV_OP_F_ALL_COPIES, MRC_CTL_EV_UNPOPULATED,
                               MrcCtlCcNsccCfg, MrcCtlCcProfileAttr, MrcCtlContext, MrcCtlEpOpType,
                               MrcCtlEpReq, MrcCtlError, MrcCtlEv, MrcCtlEvCounters, MrcCtlEvField,
                               MrcCtlEvFieldsOpArgs, MrcCtlEvFmtField, MrcCtlEvFmtMode,
                               MrcCtlEvFmtOpArgs, MrcCtlEvFmtProfileAttr, MrcCtlEvMode, MrcCtlEvOp,
                               MrcCtlEvOpArgs, MrcCtlEvOpEntry, MrcCtlEvProfileAttr, MrcCtlEvState,
                               MrcCtlPortAdminState, MrcCtlPortAttr, MrcCtlProfileState)
from mrcnic.fw.mrc_ctl import MrcCtlCcProfileAttrMask as CPM
from mrcnic.fw.mrc_ctl import MrcCtlEvFieldsOp as FOP
from mrcnic.fw.mrc_ctl import MrcCtlEvFmtProfileAttrMask as FPM
from mrcnic.fw.mrc_ctl import MrcCtlEvProfileAttrMask as EPM
from mrcnic.fw.provision import apply_plan, provision_plan
from mrcnic.fw.transport import LoopbackTransport
from mrcnic.regmap import REGMAP, EvEventReason
from mrcnic.rtl.layouts import EvCounters, EvState, WorkRequest
from mrcnic.sim.serve import SimBoard

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
INIT, OFFLINE, ONLINE = MrcCtlProfileState
GOOD, BAD, DENIED = (MrcCtlEvState.MRC_CTL_EV_GOOD, MrcCtlEvState.MRC_CTL_EV_ASSUMED_BAD,
                     MrcCtlEvState.MRC_CTL_EV_DENIED)


class _Sig:
    value = 0


class _FakeNic:
    def __init__(self, size=1 << 17):
        self.mem = Memory(size=size)

    def sig(self, name):
        return _Sig()


class Model(LoopbackTransport):
    """The CSR bank model plus what CsrNic does beyond it: EV_STATE_SET / EV_WEIGHT_SET write
    the state / weight of the path entry; a board model (SimBoard) answers from 0x0800."""

    def __init__(self, board=True):
        super().__init__()
        self.board = SimBoard(_FakeNic()) if board else None

    def read32(self, addr):
        if self.board is not None and addr >= 0x800:
            return self.board.read32(addr)
        return super().read32(addr)

    def write32(self, addr, value):
        if self.board is not None and addr >= 0x800:
            return self.board.write32(addr, value)
        super().write32(addr, value)
        for name, key in (("EV_STATE_SET", "state"), ("EV_WEIGHT_SET", "weight")):
            if self.strobes and self.strobes[-1][0] == name and addr == REGMAP[name].offset:
                f = self.strobes[-1][1]
                lay = REGMAP.table("path").layout
                rec = unpack_record(lay, self.tables["path"].get(f["index"], 0))
                rec[key] = f[key]
                self.tables["path"][f["index"]] = pack_record(lay, rec)


def nic(config="two_nics.toml", board=True):
    cfg = load_config(EXAMPLES / config)
    model = Model(board)
    client = CsrClient(model)
    apply_plan(client, provision_plan(cfg, compile_tables(cfg), client.identity()))
    return model, client, cfg


@pytest.fixture
def ctl():
    model, client, cfg = nic()
    return model, MrcCtlContext(client, cfg), cfg


def err(code, fn, *args, **kw):
    with pytest.raises(MrcCtlError) as info:
        fn(*args, **kw)
    assert info.value.errno == code, info.value
    return info.value


def ev_array(c, pid, n=256):
    attr = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_QUERY_EV_ARRAY,
                                                    entry_count=n))
    c.mrc_ctl_query_ev_profile(pid, attr, EPM.MRC_CTL_EV_PROFILE_EV_OP)
    return [(e.ev.val, e.ev.port, e.state) for e in attr.ev_op.entries[:attr.ev_op.entry_count]]


def path_state(model, index):
    return unpack_record(REGMAP.table("path").layout, model.tables["path"][index])["state"]


def test_query_device_and_ports(ctl):
    model, c, _ = ctl
    d = c.mrc_ctl_query_device()
    assert d.mrc_ctl_protocol_version == 1 and d.cc.algorithms == ["uet-1.0-nscc"]
    assert d.phy_port_mask == 0b11110                     # 4 ports, bit N = port N (1-based)
    assert d.ev.ev_max_count == 256 and d.ev.ev_free_count == 256 - 128
    assert d.ev.ev_fmt_mode_mask == 0b111 and d.ev.ev_mode_mask == 0b110
    assert d.opt_attr & (1 << 2) and d.opt_attr & (1 << 5)           # EV events, EV probes
    assert not d.opt_attr & (1 << 4)                     # no precise drop counts
    assert c.mrc_ctl_query_port(4).port_admin_state == MrcCtlPortAdminState.MRC_CTL_PORT_ADMIN_ENABLED
    c.mrc_ctl_modify_port(2, MrcCtlPortAttr(MrcCtlPortAdminState.MRC_CTL_PORT_ADMIN_DISABLED))
    assert model.values["PORT_ADMIN"] == 0b1101
    assert c.mrc_ctl_query_port(2).port_admin_state == MrcCtlPortAdminState.MRC_CTL_PORT_ADMIN_DISABLED
    err(errno.EINVAL, c.mrc_ctl_query_port, 0)            # ports are 1-based
    err(errno.EINVAL, c.mrc_ctl_query_port, 5)


def test_adopted_profile_query(ctl):
    model, c, cfg = ctl
    attr = MrcCtlEvProfileAttr()
    c.mrc_ctl_query_ev_profile(1, attr, EPM.MRC_CTL_EV_PROFILE_STATE | EPM.MRC_CTL_EV_PROFILE_MODE
                               | EPM.MRC_CTL_EV_PROFILE_COUNT | EPM.MRC_CTL_EV_PROFILE_MIN_ACTIVE)
    assert (attr.cur_profile_state, attr.ev_mode, attr.ev_count, attr.ev_min_active) == \
        (ONLINE, MrcCtlEvMode.MRC_CTL_EV_MODE_GEN, 128, 8)
    # QUERY_FIELDS with no room: E2BIG and the size needed
    attr = MrcCtlEvProfileAttr(ev_fields_op=MrcCtlEvFieldsOpArgs(FOP.MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS))
    e = err(errno.E2BIG, c.mrc_ctl_query_ev_profile, 1, attr, EPM.MRC_CTL_EV_PROFILE_EV_FIELDS_OP)
    assert e.required == 2 and attr.ev_fields_op.field_count == 2
    c.mrc_ctl_query_ev_profile(1, attr, EPM.MRC_CTL_EV_PROFILE_EV_FIELDS_OP)
    assert [(f.width, f.mask, f.max_val) for f in attr.ev_fields_op.fields] == [(5, 0x1F, 31), (2, 3, 3)]
    # QUERY_EV_ARRAY: E2BIG below ev_count, then the configuration's EVs (ports 1-based)
    attr = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_QUERY_EV_ARRAY, entry_count=4))
    e = err(errno.E2BIG, c.mrc_ctl_query_ev_profile, 1, attr, EPM.MRC_CTL_EV_PROFILE_EV_OP)
    assert e.required == 128
    assert ev_array(c, 1) == [(x.ev, x.port + 1, GOOD) for x in cfg.ev_profiles["to_nic1"].entries]
    err(errno.EINVAL, c.mrc_ctl_query_ev_profile, 1, attr,
        EPM.MRC_CTL_EV_PROFILE_EV_OP | EPM.MRC_CTL_EV_PROFILE_EV_FIELDS_OP)
    err(errno.ENOENT, c.mrc_ctl_query_ev_profile, 9, attr, EPM.MRC_CTL_EV_PROFILE_STATE)


def test_offline_replace_online(ctl):
    model, c, _ = ctl
    st = lambda s: MrcCtlEvProfileAttr(profile_state=s)                       # noqa: E731
    rep = lambda cur, new, flags=0: MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(    # noqa: E731
        MrcCtlEvOp.MRC_CTL_EV_OP_REPLACE_EV, [MrcCtlEvOpEntry(cur, new, GOOD, flags)]))
    # REPLACE_EV on an ONLINE profile needs MODIFY_ONLINE, which mrcnic does not advertise
    err(errno.EINVAL, c.mrc_ctl_modify_ev_profile, 1, rep(MrcCtlEv(5, 2), MrcCtlEv(0x77, 2)),
        EPM.MRC_CTL_EV_PROFILE_EV_OP)
    c.mrc_ctl_modify_ev_profile(1, st(OFFLINE), EPM.MRC_CTL_EV_PROFILE_STATE)
    assert all(path_state(model, i) == EvState.DENIED.value for i in range(128))
    # entry 5 = spine 1, plane 1 (port 2): same port, the path (uSIDs) is kept
    c.mrc_ctl_modify_ev_profile(1, rep(MrcCtlEv(5, 2), MrcCtlEv(0x77, 2)), EPM.MRC_CTL_EV_PROFILE_EV_OP)
    # partial success: the first entry is replaced, the second is not found
    attr = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_REPLACE_EV, [
        MrcCtlEvOpEntry(MrcCtlEv(6, 3), MrcCtlEv(0x66, 3), GOOD),
        MrcCtlEvOpEntry(MrcCtlEv(0x999, 1), MrcCtlEv(0x98, 1), GOOD)]))
    e = err(errno.ENOENT, c.mrc_ctl_modify_ev_profile, 1, attr, EPM.MRC_CTL_EV_PROFILE_EV_OP)
    assert e.partial == 1
    # an SRV6 EV moved to another port needs its path
    err(errno.EINVAL, c.mrc_ctl_modify_ev_profile, 1, rep(MrcCtlEv(7, 4), MrcCtlEv(7, 1)),
        EPM.MRC_CTL_EV_PROFILE_EV_OP)
    assert path_state(model, 5) == EvState.DENIED.value               # still OFFLINE
    c.mrc_ctl_modify_ev_profile(1, st(ONLINE), EPM.MRC_CTL_EV_PROFILE_STATE)
    arr = ev_array(c, 1)
    assert arr[5] == (0x77, 2, GOOD) and arr[6] == (0x66, 3, GOOD) and arr[7] == (7, 4, GOOD)
    assert all(path_state(model, i) == EvState.GOOD.value for i in range(128))
    rec = unpack_record(REGMAP.table("path").layout, model.tables["path"][5])
    assert rec["ev"] == 0x77 and rec["port"] == 1
    err(errno.EINVAL, c.mrc_ctl_modify_ev_profile, 1, st(INIT), EPM.MRC_CTL_EV_PROFILE_STATE)


def copies_nic(tmp_path):
    """two_nics.toml with two copies of every EV: (model, client, config)."""
    text = (EXAMPLES / "two_nics.toml").read_text().replace(
        'port_field = "plane"', 'port_field = "plane"\ncopies = 2')
    text = text.replace("{ name = \"spine\", width = 5 }", "{ name = \"spine\", width = 5, max_val = 15 }")
    (tmp_path / "n.toml").write_text(text)
    cfg = load_config(tmp_path / "n.toml")
    model = Model()
    client = CsrClient(model)
    apply_plan(client, provision_plan(cfg, compile_tables(cfg), client.identity()))
    return model, client, cfg


def test_all_copies_and_ev_state(tmp_path):
    model, client, cfg = copies_nic(tmp_path)
    c = MrcCtlContext(client, cfg)
    c.mrc_ctl_modify_ev_profile(1, MrcCtlEvProfileAttr(profile_state=OFFLINE), EPM.MRC_CTL_EV_PROFILE_STATE)
    one = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_REPLACE_EV, [
        MrcCtlEvOpEntry(MrcCtlEv(1, 2), MrcCtlEv(0x41, 2), GOOD)]))
    c.mrc_ctl_modify_ev_profile(1, one, EPM.MRC_CTL_EV_PROFILE_EV_OP)
    assert [v for v, _, _ in ev_array(c, 1)].count(1) == 1               # one copy replaced
    allc = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_REPLACE_EV, [
        MrcCtlEvOpEntry(MrcCtlEv(2, 3), MrcCtlEv(0x42, 3), GOOD, MRC_CTL_EV_OP_F_ALL_COPIES)]))
    c.mrc_ctl_modify_ev_profile(1, allc, EPM.MRC_CTL_EV_PROFILE_EV_OP)
    vals = [v for v, _, _ in ev_array(c, 1)]
    assert vals.count(2) == 0 and vals.count(0x42) == 2
    c.mrc_ctl_modify_ev_profile(1, MrcCtlEvProfileAttr(profile_state=ONLINE), EPM.MRC_CTL_EV_PROFILE_STATE)
    # MODIFY_EV_STATE (every copy), QUERY_EV_STATE; ASSUMED_BAD is the NIC's
    mod = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_MODIFY_EV_STATE, [
        MrcCtlEvOpEntry(MrcCtlEv(0x42, 3), state=DENIED)]))
    c.mrc_ctl_modify_ev_profile(1, mod, EPM.MRC_CTL_EV_PROFILE_EV_OP)
    idx = [i for i, (v, _, _) in enumerate(ev_array(c, 1)) if v == 0x42]
    assert all(path_state(model, i) == EvState.DENIED.value for i in idx) and len(idx) == 2
    q = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_QUERY_EV_STATE, [
        MrcCtlEvOpEntry(MrcCtlEv(0x42, 3))]))
    c.mrc_ctl_query_ev_profile(1, q, EPM.MRC_CTL_EV_PROFILE_EV_OP)
    assert q.ev_op.entries[0].state == DENIED
    mod.ev_op.entries[0].state = BAD
    err(errno.EINVAL, c.mrc_ctl_modify_ev_profile, 1, mod, EPM.MRC_CTL_EV_PROFILE_EV_OP)


def test_new_generated_profile_from_the_header(ctl):
    """An EV Format profile and a generated STEV profile created through the API, with the
    hand-worked vector of tests/test_config.py (format 8 | 4 | 4)."""
    model, c, _ = ctl
    fmt = MrcCtlEvFmtProfileAttr(profile_state=OFFLINE,
                                 ev_fmt_mode=MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_STEV,
                                 ev_fmt_op=MrcCtlEvFmtOpArgs(fmt_fields=[MrcCtlEvFmtField(w) for w in (8, 4, 4)]))
    fmt.ev_fmt_op.op = 0                                            # MODIFY_FIELDS
    c.mrc_ctl_modify_ev_fmt_profile(13, fmt, FPM.MRC_CTL_EV_FMT_PROFILE_STATE
                                    | FPM.MRC_CTL_EV_FMT_PROFILE_MODE | FPM.MRC_CTL_EV_FMT_PROFILE_OP)
    c.mrc_ctl_modify_ev_fmt_profile(13, MrcCtlEvFmtProfileAttr(profile_state=ONLINE),
                                    FPM.MRC_CTL_EV_FMT_PROFILE_STATE)
    q = MrcCtlEvFmtProfileAttr(ev_fmt_op=MrcCtlEvFmtOpArgs(op=1, fmt_field_count=1))
    e = err(errno.E2BIG, c.mrc_ctl_query_ev_fmt_profile, 13, q, FPM.MRC_CTL_EV_FMT_PROFILE_OP)
    assert e.required == 3
    wide = MrcCtlEvFmtProfileAttr(profile_state=OFFLINE, ev_fmt_mode=MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_UDP,
                                  ev_fmt_op=MrcCtlEvFmtOpArgs(0, [MrcCtlEvFmtField(15)]))
    err(errno.E2BIG, c.mrc_ctl_modify_ev_fmt_profile, 14, wide,
        FPM.MRC_CTL_EV_FMT_PROFILE_STATE | FPM.MRC_CTL_EV_FMT_PROFILE_MODE | FPM.MRC_CTL_EV_FMT_PROFILE_OP)
    fields = [MrcCtlEvField(8, 0xA0, 0, 2, 0x0F), MrcCtlEvField(4, 0x9, 0, 0, 0),
              MrcCtlEvField(2, 0, 0, 1, 0x3)]
    attr = MrcCtlEvProfileAttr(profile_state=OFFLINE, ev_mode=MrcCtlEvMode.MRC_CTL_EV_MODE_GEN,
                               ev_fmt_profile_id=13, ev_count=6, ev_min_active=2,
                               ev_fields_op=MrcCtlEvFieldsOpArgs(FOP.MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS, fields))
    m = (EPM.MRC_CTL_EV_PROFILE_STATE | EPM.MRC_CTL_EV_PROFILE_MODE | EPM.MRC_CTL_EV_PROFILE_FMT_ID
         | EPM.MRC_CTL_EV_PROFILE_COUNT | EPM.MRC_CTL_EV_PROFILE_MIN_ACTIVE
         | EPM.MRC_CTL_EV_PROFILE_EV_FIELDS_OP)
    c.mrc_ctl_modify_ev_profile(2, attr, m)
    c.mrc_ctl_modify_ev_profile(2, MrcCtlEvProfileAttr(profile_state=ONLINE), EPM.MRC_CTL_EV_PROFILE_STATE)
    # the EVs of the hand-worked vector; ports round robin over the 4 ports (1-based)
    assert [(v, p) for v, p, _ in ev_array(c, 2)] == [
        (0xA090, 1), (0xA091, 2), (0xA190, 3), (0xA191, 4), (0xA290, 1), (0xA291, 2)]
    assert c.ev_profiles[2].base == 128                              # after the adopted one
    # each header restriction refused (EINVAL / E2BIG)
    bad = MrcCtlEvProfileAttr(profile_state=OFFLINE, ev_mode=MrcCtlEvMode.MRC_CTL_EV_MODE_GEN,
                              ev_fmt_profile_id=13, ev_count=2, ev_min_active=1, ev_fields_op=MrcCtlEvFieldsOpArgs(
                                  FOP.MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS, [MrcCtlEvField(4, 0, 0, 4, 0x3)]))
    e = err(errno.EINVAL, c.mrc_ctl_modify_ev_profile, 3, bad, m)
    assert "max_val cannot be wider than the number of set mask bits" in str(e)
    bad.ev_fields_op.fields = [MrcCtlEvField(2, 0, 0, 1, 1)] * 4
    c.ev_profiles.pop(3)
    e = err(errno.E2BIG, c.mrc_ctl_modify_ev_profile, 3, bad, m)
    assert "field_count <= fmt_field_count" in str(e)
    # state machine
    c.ev_profiles.pop(3)
    err(errno.EINVAL, c.mrc_ctl_modify_ev_profile, 3, MrcCtlEvProfileAttr(profile_state=ONLINE),
        EPM.MRC_CTL_EV_PROFILE_STATE)
    c.mrc_ctl_modify_ev_profile(2, MrcCtlEvProfileAttr(profile_state=OFFLINE), EPM.MRC_CTL_EV_PROFILE_STATE)
    c.mrc_ctl_modify_ev_profile(2, MrcCtlEvProfileAttr(profile_state=INIT), EPM.MRC_CTL_EV_PROFILE_STATE)
    assert c.mrc_ctl_query_device().ev.ev_free_count == 128
    err(errno.EBUSY, c.mrc_ctl_modify_ev_profile, 1, MrcCtlEvProfileAttr(profile_state=INIT),
        EPM.MRC_CTL_EV_PROFILE_STATE) if c.ev_profiles[1].state is OFFLINE else None
    c.mrc_ctl_modify_ev_profile(1, MrcCtlEvProfileAttr(profile_state=OFFLINE), EPM.MRC_CTL_EV_PROFILE_STATE)
    err(errno.EBUSY, c.mrc_ctl_modify_ev_profile, 1, MrcCtlEvProfileAttr(profile_state=INIT),
        EPM.MRC_CTL_EV_PROFILE_STATE)                                  # QP 0 uses it


def test_explicit_profile_unpopulated(ctl):
    model, c, _ = ctl
    fmt = MrcCtlEvFmtProfileAttr(profile_state=OFFLINE, ev_fmt_mode=MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_STEV,
                                 ev_fmt_op=MrcCtlEvFmtOpArgs(0, [MrcCtlEvFmtField(32)]))
    c.mrc_ctl_modify_ev_fmt_profile(5, fmt, FPM.MRC_CTL_EV_FMT_PROFILE_STATE
                                    | FPM.MRC_CTL_EV_FMT_PROFILE_MODE | FPM.MRC_CTL_EV_FMT_PROFILE_OP)
    attr = MrcCtlEvProfileAttr(profile_state=OFFLINE, ev_mode=MrcCtlEvMode.MRC_CTL_EV_MODE_EXP,
                               ev_fmt_profile_id=5, ev_count=2)
    c.mrc_ctl_modify_ev_profile(4, attr, EPM.MRC_CTL_EV_PROFILE_STATE | EPM.MRC_CTL_EV_PROFILE_MODE
                                | EPM.MRC_CTL_EV_PROFILE_FMT_ID | EPM.MRC_CTL_EV_PROFILE_COUNT)
    # EV_UNPOPULATED entries: ONLINE refused until they are replaced
    err(errno.EINVAL, c.mrc_ctl_modify_ev_profile, 4, MrcCtlEvProfileAttr(profile_state=ONLINE),
        EPM.MRC_CTL_EV_PROFILE_STATE)
    fill = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_REPLACE_EV, [
        MrcCtlEvOpEntry(MRC_CTL_EV_UNPOPULATED, MrcCtlEv(0x12345678, 1), GOOD),
        MrcCtlEvOpEntry(MRC_CTL_EV_UNPOPULATED, MrcCtlEv(0xdeaddead, 2), GOOD)]))
    c.mrc_ctl_modify_ev_profile(4, fill, EPM.MRC_CTL_EV_PROFILE_EV_OP)
    c.mrc_ctl_modify_ev_profile(4, MrcCtlEvProfileAttr(profile_state=ONLINE), EPM.MRC_CTL_EV_PROFILE_STATE)
    assert ev_array(c, 4) == [(0x12345678, 1, GOOD), (0xdeaddead, 2, GOOD)]


def test_cc_profiles(ctl):
    model, c, _ = ctl
    attr = MrcCtlCcProfileAttr()
    c.mrc_ctl_query_cc_profile(1, attr, CPM.MRC_CTL_CC_PROFILE_STATE | CPM.MRC_CTL_CC_PROFILE_ALGORITHM
                               | CPM.MRC_CTL_CC_PROFILE_CONFIG)
    assert attr.cur_profile_state == ONLINE and attr.algorithm == "uet-1.0-nscc"
    err(errno.EINVAL, c.mrc_ctl_modify_cc_profile, 7,
        MrcCtlCcProfileAttr(profile_state=OFFLINE, algorithm="dcqcn"),
        CPM.MRC_CTL_CC_PROFILE_STATE | CPM.MRC_CTL_CC_PROFILE_ALGORITHM)
    c.ev_profiles  # noqa: B018
    c.cc_profiles.pop(7, None)
    cfg = MrcCtlCcNsccCfg(base_rtt=8000, target_delay=4000, max_cwnd=131072)
    c.mrc_ctl_modify_cc_profile(7, MrcCtlCcProfileAttr(profile_state=OFFLINE, algorithm="uet-1.0-nscc"),
                                CPM.MRC_CTL_CC_PROFILE_STATE | CPM.MRC_CTL_CC_PROFILE_ALGORITHM)
    err(errno.EINVAL, c.mrc_ctl_modify_cc_profile, 7, MrcCtlCcProfileAttr(profile_state=ONLINE),
        CPM.MRC_CTL_CC_PROFILE_STATE)                                  # CONFIG missing
    c.mrc_ctl_modify_cc_profile(7, MrcCtlCcProfileAttr(profile_state=ONLINE, cc_config=cfg),
                                CPM.MRC_CTL_CC_PROFILE_STATE | CPM.MRC_CTL_CC_PROFILE_CONFIG)
    ctx = MrcContext(c)
    ctx.qp(0).mrc_modify_qp(MrcQpAttr(cc_profile_id=7), QM.MRC_CC_PROFILE_ID)
    rec = unpack_record(REGMAP.table("cc").layout, model.tables["cc"][0])
    assert rec["base_rtt_ns"] == 8000 and rec["max_cwnd"] == 131072
    assert ctx.qp(0).mrc_query_qp().cc_profile_id == 7
    # CONFIG changes ONLINE (MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE): written at once
    c.mrc_ctl_modify_cc_profile(7, MrcCtlCcProfileAttr(cc_config=MrcCtlCcNsccCfg(max_cwnd=65536)),
                                CPM.MRC_CTL_CC_PROFILE_CONFIG)
    assert unpack_record(REGMAP.table("cc").layout, model.tables["cc"][0])["max_cwnd"] == 65536
    err(errno.EBUSY, c.mrc_ctl_modify_cc_profile, 7, MrcCtlCcProfileAttr(profile_state=OFFLINE),
        CPM.MRC_CTL_CC_PROFILE_STATE)


def test_ev_events_and_probes(ctl):
    model, c, _ = ctl
    model.push_event(6, EvState.ASSUMED_BAD.value, EvEventReason.ACK_TIMEOUT.value)
    model.push_event(6, EvState.GOOD.value, EvEventReason.PROBE_OK.value) \
        if hasattr(EvEventReason, "PROBE_OK") else model.push_event(6, EvState.GOOD.value, 0)
    evs = c.mrc_ctl_poll_ev_event(8)
    assert [(e.profile_id, e.ev.val, e.ev.port, e.state, e.drop_count) for e in evs] == \
        [(1, 6, 3, BAD, 0), (1, 6, 3, GOOD, 0)]
    assert c.mrc_ctl_poll_ev_event(8) == []
    # probes: sent on the entry holding the EV; the reply arrives while waiting
    req = [MrcCtlEpReq(7, "fd00::1", "fd00::2", MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_SRV6, MrcCtlEv(6, 3))]
    rsp = c.mrc_ctl_ep_batch_send_wait(0, MrcCtlEpOpType.MRC_CTL_EP_OP_EV_PROBE, req, 10**9,
                                       sleep=lambda s: model.push_probe_reply(6, 2345))
    assert [(r.req_id, r.port, r.rtt) for r in rsp] == [(7, 3, 2345)]
    assert ("EV_PROBE_REQ", {"index": 6, "qp": 0}) in model.strobes
    e = err(errno.ETIMEDOUT, c.mrc_ctl_ep_batch_send_wait, 0, MrcCtlEpOpType.MRC_CTL_EP_OP_EV_PROBE,
            req, 1000, sleep=lambda s: None)
    assert e.rsp == []
    err(errno.ENOTSUP, c.mrc_ctl_ep_batch_send_wait, 0, MrcCtlEpOpType.MRC_CTL_EP_OP_PORT_STATUS_UPDATE,
        req, 1000)
    req[0].ev_fmt_mode = MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_STEV      # the QP is SRV6
    err(errno.EINVAL, c.mrc_ctl_ep_batch_send_wait, 0, MrcCtlEpOpType.MRC_CTL_EP_OP_EV_PROBE, req, 1000)


def _op(op, entries):
    return MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(op, entries))


def _table_reads(model, start=0):
    return [f["index"] for n, f in model.strobes[start:] if n == "TBL_CMD" and f["op"] == 2]


def test_mrcnic_extensions(tmp_path):
    """mrcnic's extensions, as the weight agent uses them: one copy by path-table index,
    weights, per-EV counters, an event's EV without a path read once known, probes one
    after the other with the stale replies counted."""
    model, client, cfg = copies_nic(tmp_path)
    c = MrcCtlContext(client, cfg)
    s0 = len(model.strobes)
    attr = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_QUERY_EV_ARRAY,
                                                    entry_count=256))
    c.mrc_ctl_query_ev_profile(1, attr, EPM.MRC_CTL_EV_PROFILE_EV_OP)
    arr = attr.ev_op.entries[:attr.ev_op.entry_count]
    base = c.ev_profiles[1].base
    assert [e.index for e in arr] == list(range(base, base + len(arr)))
    assert all(e.weight == 1 for e in arr)
    assert _table_reads(model, s0) == [e.index for e in arr]          # one read per entry
    ev = arr[0].ev
    i0, i1 = [e.index for e in arr if e.ev == ev]                      # the two copies
    # QUERY_EV_STATE of one entry, EV left open: the query fills it in
    q = MrcCtlEvOpEntry(index=i1)
    c.mrc_ctl_query_ev_profile(1, _op(MrcCtlEvOp.MRC_CTL_EV_OP_QUERY_EV_STATE, [q]),
                               EPM.MRC_CTL_EV_PROFILE_EV_OP)
    assert (q.ev, q.state, q.weight) == (ev, GOOD, 1)
    # MODIFY_EV_STATE of one copy
    c.mrc_ctl_modify_ev_profile(1, _op(MrcCtlEvOp.MRC_CTL_EV_OP_MODIFY_EV_STATE, [
        MrcCtlEvOpEntry(ev, state=DENIED, index=i1)]), EPM.MRC_CTL_EV_PROFILE_EV_OP)
    assert path_state(model, i1) == EvState.DENIED.value and path_state(model, i0) == EvState.GOOD.value
    other = next(e.ev for e in arr if e.ev != ev)
    e = err(errno.ENOENT, c.mrc_ctl_modify_ev_profile, 1, _op(MrcCtlEvOp.MRC_CTL_EV_OP_MODIFY_EV_STATE, [
        MrcCtlEvOpEntry(ev, state=GOOD, index=i0), MrcCtlEvOpEntry(other, state=GOOD, index=i1)]),
        EPM.MRC_CTL_EV_PROFILE_EV_OP)
    assert e.partial == 1 and "does not hold" in str(e)
    err(errno.ENOENT, c.mrc_ctl_modify_ev_profile, 1, _op(MrcCtlEvOp.MRC_CTL_EV_OP_MODIFY_EV_STATE, [
        MrcCtlEvOpEntry(ev, state=GOOD, index=base + len(arr))]), EPM.MRC_CTL_EV_PROFILE_EV_OP)
    # weights: one copy, every copy, out of range (per-entry partial success)
    s = len(model.strobes)
    c.mrc_ctl_modify_ev_weight(1, [MrcCtlEvOpEntry(ev, index=i0, weight=7)])
    c.mrc_ctl_modify_ev_weight(1, [MrcCtlEvOpEntry(ev, weight=3)])
    assert [f for n, f in model.strobes[s:] if n == "EV_WEIGHT_SET"] == [
        dict(index=i0, weight=7), dict(index=i0, weight=3), dict(index=i1, weight=3)]
    e = err(errno.EINVAL, c.mrc_ctl_modify_ev_weight, 1, [MrcCtlEvOpEntry(ev, weight=2),
                                                         MrcCtlEvOpEntry(ev, weight=256)])
    assert e.partial == 1
    assert path_state(model, i1) == EvState.DENIED.value             # weights leave states alone
    q = MrcCtlEvOpEntry(ev, index=i0)
    c.mrc_ctl_query_ev_profile(1, _op(MrcCtlEvOp.MRC_CTL_EV_OP_QUERY_EV_STATE, [q]),
                               EPM.MRC_CTL_EV_PROFILE_EV_OP)
    assert (q.state, q.weight) == (GOOD, 2)
    err(errno.ENOENT, c.mrc_ctl_modify_ev_weight, 9, [MrcCtlEvOpEntry(ev, weight=1)])
    # per-EV counters: one copy, or every copy summed (32-bit, wrapping)
    model.tables["evcnt"][i0] = pack_record(EvCounters, dict(packets=0xFFFFFFFF, ecn_echoes=2))
    model.tables["evcnt"][i1] = pack_record(EvCounters, dict(packets=3, ecn_echoes=1, probes=4))
    one, both = c.mrc_ctl_query_ev_counters(1, [MrcCtlEvOpEntry(ev, index=i1), MrcCtlEvOpEntry(ev)])
    assert one == MrcCtlEvCounters(packets=3, ecn_echoes=1, probes=4)
    assert both == MrcCtlEvCounters(packets=2, ecn_echoes=3, probes=4)
    # events: the EV of an entry already read comes from the profile (no path read)
    model.push_event(i1, EvState.ASSUMED_BAD.value, EvEventReason.ACK_TIMEOUT.value)
    s = len(model.strobes)
    (got,) = c.mrc_ctl_poll_ev_event(4)
    assert (got.ev, got.index, got.state, got.reason) == (ev, i1, BAD, EvEventReason.ACK_TIMEOUT)
    assert _table_reads(model, s) == []
    # probes: the requested copies, one after the other; a stale reply is dropped and counted
    model.push_probe_reply(i0, 1)
    sent = []

    def answer(_):                  # the reply of the probe in flight, and how many were sent
        sent.append([f["index"] for n, f in model.strobes if n == "EV_PROBE_REQ"])
        model.push_probe_reply(sent[-1][-1], 100 + sent[-1][-1])
    fmt = c.ev_fmt_mode_of(1)
    assert fmt == MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_SRV6
    rsp = c.mrc_ctl_ep_batch_send_wait(0, MrcCtlEpOpType.MRC_CTL_EP_OP_EV_PROBE, [
        MrcCtlEpReq(1, None, None, fmt, ev, index=i1), MrcCtlEpReq(2, None, None, fmt, ev, index=i0)],
        10**9, sleep=answer)
    assert [(r.req_id, r.port, r.rtt) for r in rsp] == [(1, ev.port, 100 + i1), (2, ev.port, 100 + i0)]
    assert sent == [[i1], [i1, i0]] and c.ep_stale_rsp == 1
    e = err(errno.EINVAL, c.mrc_ctl_ep_batch_send_wait, 0, MrcCtlEpOpType.MRC_CTL_EP_OP_EV_PROBE,
            [MrcCtlEpReq(1, None, None, fmt, other, index=i0)], 1000)
    assert f"(entry {i0}) is in no ONLINE profile" in str(e)


def test_post_poll_and_host_memory(ctl):
    model, c, _ = ctl
    ctx = MrcContext(c)
    assert ctx.board
    data = bytes(range(256)) * 3
    ctx.mem.write(0x1003, data)                                       # unaligned both ends
    assert ctx.mem.read(0x1003, len(data)) == data
    assert ctx.mem.read(0x1000, 3) == b"\0\0\0"
    ctx.mem.write(0x9000, b"page1")                                   # beyond the first window
    assert model.board.page == 1 and ctx.mem.read(0x9000, 5) == b"page1"
    qp = ctx.qp(0)
    qp.mrc_post_send(IbvSendWr(9, IbvWrOpcode.IBV_WR_RDMA_WRITE_WITH_IMM, 0x1000, 65536,
                               0x7f0000000000, 0x2001, 0xabcd))
    wr = unpack_record(WorkRequest, model.board.pending)
    assert (wr["qp"], wr["opcode"], wr["wr_id"], wr["local_addr"], wr["remote_va"], wr["rkey"],
            wr["length"], wr["imm"]) == (0, 1, 9, 0x1000, 0x7f0000000000, 0x2001, 65536, 0xabcd)
    err(errno.ENOMEM, qp.mrc_post_send, IbvSendWr(1, IbvWrOpcode.IBV_WR_RDMA_WRITE, 0, 8, 0, 0), wait=0)
    err(errno.EINVAL, qp.mrc_post_send, IbvSendWr(1, IbvWrOpcode.IBV_WR_RDMA_WRITE, 4, 8, 0, 0))
    from mrcnic.rtl.layouts import Completion
    model.board.cpl.append(pack_record(Completion, dict(qp=0, psn=63, has_imm=1, imm=0xabcd)))
    model.board.cpl.append(pack_record(Completion, dict(qp=1, psn=5, has_imm=0, imm=0)))
    wcs = ctx.mrc_poll_cq("recv", 4)
    assert [(w.qp_num, w.opcode, w.psn, w.imm_data) for w in wcs] == [
        (0, IbvWcOpcode.IBV_WC_RECV_RDMA_WITH_IMM, 63, 0xabcd), (1, IbvWcOpcode.IBV_WC_RDMA_WRITE, 5, 0)]
    assert ctx.mrc_poll_cq("send", 4) == []
    a = qp.mrc_query_qp()
    assert a.ev_profile_id == 1 and a.mpr == 2
    qp.mrc_modify_qp(MrcQpAttr(timeout=7, linear_cnt=5), QM.MRC_QP_TIMEOUT | QM.MRC_QP_RETRY_CNT)
    assert qp.mrc_query_qp().timeout == 7 and qp.mrc_query_qp().linear_cnt == 5
    err(errno.EINVAL, qp.mrc_modify_qp, MrcQpAttr(mpr=4), QM.MRC_QP_MPR)
    err(errno.EINVAL, qp.mrc_modify_qp, MrcQpAttr(linear_cnt=1, exp_cnt=3), QM.MRC_QP_RETRY_CNT)


def test_no_board():
    model, client, cfg = nic(board=False)
    ctx = MrcContext(MrcCtlContext(client, cfg))
    assert not ctx.board
    err(errno.ENOTSUP, ctx.mrc_poll_cq, "recv", 1)
    err(errno.ENOTSUP, ctx.qp(0).mrc_post_send,
        IbvSendWr(1, IbvWrOpcode.IBV_WR_RDMA_WRITE, 0, 8, 0, 0))


def test_host_memory_board_window():
    """A board's window without HOSTMEM_PAGE: 16 KiB, beyond it EINVAL."""
    model = Model()
    model.board.regs.pop(0x08A0)
    model.board.mem_size = 16384
    mem = HostMemory(model)
    assert not mem.paged and mem.size == 16384
    mem.write(16380, b"abcd")
    with pytest.raises(MrcCtlError) as info:
        mem.write(16382, b"abcd")
    assert info.value.errno == errno.EINVAL


def test_cli_wr_post_wait_mem(tmp_path):
    """``mrcnic fw wr post`` / ``wr wait`` / ``mem fill`` / ``mem dump --compare`` over TCP."""
    import json

    from click.testing import CliRunner

    from mrcnic.cli import main
    from mrcnic.fw.tcp import CsrServer
    from mrcnic.rtl.layouts import Completion
    model, client, cfg = nic()
    with CsrServer(model) as srv:
        target = f"tcp:{srv.address[0]}:{srv.address[1]}"

        def fw(*args, ok=True):
            res = CliRunner().invoke(main, ["fw", "--target", target, "--json", *args])
            assert (res.exit_code == 0) == ok, res.output
            return json.loads(res.output) if ok else res.output
        sent = tmp_path / "sent.bin"
        out = fw("wr", "post", "--size", "4k", "--imm", "0x55", "--local-addr", "0x2000",
                 "--pattern", "seed:7", "--save", str(sent),
                 "--peer-config", str(EXAMPLES / "nic1.toml"), "--offset", "512k")
        assert out["opcode"] == "IBV_WR_RDMA_WRITE_WITH_IMM" and out["va"] == 0x7f0000080000
        wr = unpack_record(WorkRequest, model.board.pending)
        assert (wr["length"], wr["rkey"], wr["imm"], wr["local_addr"]) == (4096, 0x2001, 0x55, 0x2000)
        assert fw("mem", "dump", "0x2000", "4k", "--compare", str(sent))["differing_bytes"] == 0
        fw("mem", "fill", "0x2000", "16", "--pattern", "0xee")
        assert "differs" in fw("mem", "dump", "0x2000", "4k", "--compare", str(sent), ok=False)
        model.board.cpl.append(pack_record(Completion, dict(qp=0, psn=3, has_imm=1, imm=0x55)))
        assert fw("wr", "wait", "--wait", "2") == [dict(qp=0, opcode="IBV_WC_RECV_RDMA_WITH_IMM",
                                                        psn=3, imm=0x55)]
        assert "ETIMEDOUT" in fw("wr", "wait", "--wait", "0.2", ok=False)
        dev = fw("ctl", "device")
        assert dev["cc"]["algorithms"] == ["uet-1.0-nscc"]
        res = CliRunner().invoke(main, ["fw", "--target", target, "--config",
                                        str(EXAMPLES / "two_nics.toml"), "--json", "ctl",
                                        "profiles", "--evs"])
        assert res.exit_code == 0, res.output
        prof = json.loads(res.output)["1"]
        assert prof["name"] == "to_nic1" and prof["state"] == "MRC_CTL_PROFILE_ONLINE"
        assert [(e["val"], e["port"]) for e in prof["evs"]] == \
            [(x.ev, x.port + 1) for x in cfg.ev_profiles["to_nic1"].entries]


def test_ocp_examples_created_through_the_api():
    """examples/ocp_mrc_examples.toml (the OCP repository's example profiles) created in a
    NIC through the controller API and read back with the configuration's EVs."""
    from mrcnic.fw.mrc_ctl import load_config_profiles
    model, client, _ = nic("udp.toml")
    c = MrcCtlContext(client)
    ocp = load_config(EXAMPLES / "ocp_mrc_examples.toml")
    ids = load_config_profiles(c, ocp)
    assert list(ids) == ["gen_stev", "gen_srv6", "exp_stev"]
    assert c.ev_profiles[ids["gen_stev"]].ev_mode == MrcCtlEvMode.MRC_CTL_EV_MODE_GEN
    for name, pid in ids.items():
        want = [(e.ev, e.port + 1, GOOD) for e in ocp.ev_profiles[name].entries]
        assert ev_array(c, pid) == want, name
    # hand-worked: gen_stev is T0 << 8 | T1 << 4 | T2 with T2 fastest: EVs 0..31
    assert [v for v, _, _ in ev_array(c, ids["gen_stev"])] == list(range(32))
    # gen_srv6: the path of EV 3 is locator | 0x100 0x200 0x300 0x403, then the peer
    rec = unpack_record(REGMAP.table("path").layout,
                        model.tables["path"][c.ev_profiles[ids["gen_srv6"]].base + 3])
    import ipaddress
    assert ipaddress.IPv6Address(rec["da"]) == ipaddress.IPv6Address("fc00:0:100:200:300:403:101::")
    # mrc_ctl_exp_ev.md: deny EVs 13..15 ((i << 16) | i, port 1)
    attr = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_MODIFY_EV_STATE, [
        MrcCtlEvOpEntry(MrcCtlEv(i << 16 | i, 1), state=DENIED) for i in range(13, 16)]))
    c.mrc_ctl_modify_ev_profile(ids["exp_stev"], attr, EPM.MRC_CTL_EV_PROFILE_EV_OP)
    assert [s for _, _, s in ev_array(c, ids["exp_stev"])] == [GOOD] * 13 + [DENIED] * 3
