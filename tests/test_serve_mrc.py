"""The mrc_ctl.h Python API (fw/mrc_ctl.py) driving a live co-simulated NIC end to end
(``mrcnic sim --serve``, the same RTL a board runs, over TCP): query the device, poll the EV
event a fabric link failure raises, take the EV profile OFFLINE, replace an EV, bring it
ONLINE, deny an EV and see its packet counter stop, probe it and get an RTT, and create the
OCP examples' profiles in the NIC and read them back with the configuration's EVs.

One served run (the scenario of tests/test_serve.py: two NICs, four planes, 8 EVs); the
64 KiB WRITE through ``mrcnic fw`` alone is in docs/mrc-api.md ("A 64 KiB WRITE")."""

import errno
import time
from pathlib import Path

from mrcnic.config import load_config
from mrcnic.fw.mrc_ctl import (MrcCtlContext, MrcCtlEpOpType, MrcCtlEpReq, MrcCtlEv,
                               MrcCtlEvFmtMode, MrcCtlEvOp, MrcCtlEvOpArgs, MrcCtlEvOpEntry,
                               MrcCtlEvProfileAttr, MrcCtlEvState, MrcCtlProfileState,
                               load_config_profiles)
from mrcnic.fw.mrc_ctl import MrcCtlEvProfileAttrMask as EPM
from mrcnic.rtl.layouts import EvState

from .test_serve import BUS, _scenario, entry_state, packets, served, wait_traffic

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GOOD, BAD, DENIED = (MrcCtlEvState.MRC_CTL_EV_GOOD, MrcCtlEvState.MRC_CTL_EV_ASSUMED_BAD,
                     MrcCtlEvState.MRC_CTL_EV_DENIED)
ST, OP = EPM.MRC_CTL_EV_PROFILE_STATE, EPM.MRC_CTL_EV_PROFILE_EV_OP


def ev_array(c, pid):
    attr = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_QUERY_EV_ARRAY,
                                                    entry_count=256))
    c.mrc_ctl_query_ev_profile(pid, attr, OP)
    return [(e.ev.val, e.ev.port, e.state) for e in attr.ev_op.entries[:attr.ev_op.entry_count]]


def test_mrc_ctl_api_on_a_live_nic(tmp_path):
    # nic1 (host 2) hangs off leaf 1: its plane-0 uplink to spine 0 fails, then recovers
    link = ["p0.leaf1", "p0.spine0"]
    sc = _scenario(failures=[{"action": "fail_link", "target": link, "at": 1.0},
                             {"action": "recover_link", "target": link, "at": 6.0}])
    with served(sc, tmp_path) as (target, client, _):
        c = MrcCtlContext(client, lock=BUS)
        d = c.mrc_ctl_query_device()
        depth = client.read("ID_PATH_DEPTH")
        assert d.ev.ev_max_count == depth and d.ev.ev_free_count == depth - 8
        assert d.phy_port_mask == 0b11110
        assert d.cc.algorithms == ["uet-1.0-nscc"] and list(c.ev_profiles) == [1]

        # 1. the link failure: the NIC marks an EV ASSUMED_BAD and reports an EV event
        deadline, events = time.monotonic() + 900, []
        while not any(e.state == BAD for e in events):
            assert time.monotonic() < deadline, "no EV event after the link failure"
            events += c.mrc_ctl_poll_ev_event(4)
            time.sleep(0.5)
        bad = next(e for e in events if e.state == BAD)
        assert bad.profile_id == 1 and bad.drop_count == 0
        arr = ev_array(c, 1)
        assert (bad.ev.val, bad.ev.port) in [(v, p) for v, p, _ in arr]

        # 2. OFFLINE (every entry DENIED in the NIC), replace an EV, ONLINE
        c.mrc_ctl_modify_ev_profile(1, MrcCtlEvProfileAttr(profile_state=MrcCtlProfileState.MRC_CTL_PROFILE_OFFLINE), ST)
        with BUS:
            assert all(entry_state(client, i) == EvState.DENIED.value for i in range(8))
        victim = next(i for i, (v, p, s) in enumerate(arr) if (v, p) != (bad.ev.val, bad.ev.port))
        old_val, port, _ = arr[victim]
        new_val = old_val | 0x00ABC000
        c.mrc_ctl_modify_ev_profile(1, MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(
            MrcCtlEvOp.MRC_CTL_EV_OP_REPLACE_EV,
            [MrcCtlEvOpEntry(MrcCtlEv(old_val, port), MrcCtlEv(new_val, port), GOOD)])), OP)
        c.mrc_ctl_modify_ev_profile(1, MrcCtlEvProfileAttr(profile_state=MrcCtlProfileState.MRC_CTL_PROFILE_ONLINE), ST)
        arr2 = ev_array(c, 1)
        assert arr2[victim][:2] == (new_val, port)
        with BUS:
            assert client.read_table("path", victim)["ev"] == new_val
        wait_traffic(client, [victim], 3)                      # the new EV carries packets

        # 3. deny a GOOD EV: its packet counter stops while the others carry traffic
        good = [i for i, (_, _, s) in enumerate(ev_array(c, 1)) if s == GOOD and i != victim]
        deny = good[0]
        dv, dp, _ = arr2[deny]
        c.mrc_ctl_modify_ev_profile(1, MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(
            MrcCtlEvOp.MRC_CTL_EV_OP_MODIFY_EV_STATE, [MrcCtlEvOpEntry(MrcCtlEv(dv, dp), state=DENIED)])), OP)
        others = [i for i in good if i != deny]
        wait_traffic(client, others, 16)                       # packets decided before the deny
        held = packets(client, [deny])
        wait_traffic(client, others, 24)
        assert packets(client, [deny]) == held

        # 4. probe the denied EV: an RTT
        rsp = c.mrc_ctl_ep_batch_send_wait(0, MrcCtlEpOpType.MRC_CTL_EP_OP_EV_PROBE, [
            MrcCtlEpReq(1, None, None, MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_SRV6, MrcCtlEv(dv, dp))],
            rsp_timeout=60 * 10**9)
        assert len(rsp) == 1 and rsp[0].req_id == 1 and rsp[0].port == dp
        assert 400 < rsp[0].rtt < 100_000, rsp
        c.mrc_ctl_modify_ev_profile(1, MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(
            MrcCtlEvOp.MRC_CTL_EV_OP_MODIFY_EV_STATE, [MrcCtlEvOpEntry(MrcCtlEv(dv, dp), state=GOOD)])), OP)

        # 5. the OCP examples' profiles created in the live NIC and read back with the same
        # EVs, one after the other in the free entries (the first ev_free_count EVs of each,
        # as the documents clamp ev_count to the device), then taken back to INIT
        ocp = load_config(EXAMPLES / "ocp_mrc_examples.toml")
        free = c.mrc_ctl_query_device().ev.ev_free_count
        for name, prof in ocp.ev_profiles.items():
            prof.entries = prof.entries[:free]
            prof.ev_min_active = min(prof.ev_min_active, len(prof.entries))
            pid = load_config_profiles(c, ocp, [name])[name]
            assert ev_array(c, pid) == [(e.ev, e.port + 1, GOOD) for e in prof.entries], name
            assert c.mrc_ctl_query_device().ev.ev_free_count == free - len(prof.entries)
            for state in (MrcCtlProfileState.MRC_CTL_PROFILE_OFFLINE, MrcCtlProfileState.MRC_CTL_PROFILE_INIT):
                c.mrc_ctl_modify_ev_profile(pid, MrcCtlEvProfileAttr(profile_state=state), ST)
        assert c.mrc_ctl_query_device().ev.ev_free_count == free
        with BUS:
            assert client.read_table("path", 0)["ev"] == arr2[0][0]       # profile 1 untouched
        try:
            ocp.ev_profiles["exp_stev"].entries *= 2                   # more than the room left
            load_config_profiles(c, ocp, ["exp_stev"])
        except OSError as exc:
            assert exc.errno == errno.E2BIG
        else:
            raise AssertionError("expected E2BIG")
