"""NIC configuration file: every validation rule refuses its bad value with a message naming
the file, the key path and the reason; the examples load; compile_tables is consistent with
the wire format (mrcnic.wire / Scapy is the oracle for DA, SRH segments and EV carriage)."""

import ipaddress
from enum import Enum
from pathlib import Path

import pytest
from amaranth.lib import data
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether

from mrcnic import wire
from mrcnic.config import (EV_BITS, ConfigError, EvField, NicConfig, compile_tables,
                           load_config, loads_config)
from mrcnic.rtl.layouts import (EvMode, EvState, MemRegion, NicGlobals, PathEntry, QpContext,
                                RxQpContext)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BLOCK = 0xFC000000

BASE = """
[nic]
name = "t0"
mac = "02:00:00:00:00:01"
ipv6 = "fd00::1"
usid = 0xE000
locator_block = "fc00:0::/32"

[[ports]]
id = 0
next_hop_mac = "02:00:00:00:10:00"

[[ports]]
id = 1
next_hop_mac = "02:00:00:00:11:00"

[[memory_regions]]
va = 0x1000
length = 0x1000
rkey = 0x10
base = 0x10000

[[memory_regions]]
va = 0x1000
length = 0x1000
rkey = 0x11
base = 0x20000

[ev_format_profiles.srv6]
mode = "SRV6"

[ev_format_profiles.udp]
mode = "UDP"

[ev_profiles.p0]
format = "srv6"
type = "explicit"
ev_min_active = 2
entries = [
  { ev = 1, port = 0, usids = [0x1000, 0x2000, 0x1001, 0xE001] },
  { ev = 2, port = 1, usids = [0x1100, 0x2100, 0x1101, 0xE001] },
  { ev = 3, port = 1, copies = 2, usids = [0x1100, 0x2101, 0x1101, 0xE001] },
  { ev = 4, port = 0, state = "DENIED", usids = [0x1000, 0x2001, 0x1001, 0xE001] },
]

[ev_profiles.g]
format = "srv6"
type = "generated"
fields = [
  { name = "spine", width = 3, min_val = 0, max_val = 7 },
  { name = "plane", width = 1 },
]
port_field = "plane"
usids = [{ base = 0x1000, terms = { plane = 0x100 } },
         { base = 0x2000, terms = { plane = 0x100, spine = 1 } },
         0xE001]

[ev_profiles.u]
format = "udp"
type = "explicit"
entries = [{ ev = 0x3FFF, port = 0 }]

[cc_profiles.c]
base_rtt_ns = 9000

[[qps]]
qpn = 0x11
peer = "t1"
peer_qpn = 0x21
ev_profile = "p0"
cc_profile = "c"

[[qps]]
qpn = 0x12
peer_qpn = 0x22
ev_profile = "g"

[[qps]]
qpn = 0x13
peer_qpn = 0x23
peer_ipv6 = "fd00::2"
ev_profile = "u"
"""


def write(tmp_path, text, name="nic.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def edit(old, new, text=BASE, count=1):
    assert text.count(old) >= 1, old
    return text.replace(old, new, count)


def refused(tmp_path, text, key, reason):
    """Load ``text`` from a file; assert it is refused naming the file, ``key`` and ``reason``."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    msg = str(err)
    assert str(path) in msg and err.source == str(path)
    assert err.key == key, msg
    assert f": {key}: " in msg
    assert reason in err.reason, msg
    assert isinstance(err, ValueError)
    return err


def test_base_loads(tmp_path):
    cfg = load_config(write(tmp_path, BASE))
    assert isinstance(cfg, NicConfig)
    assert cfg.nic.pmtu == 1024 and cfg.nic.dscp == 26 and cfg.nic.trim_dscp == 46
    assert cfg.nic.locator_block == BLOCK and cfg.nic.clock_mhz == 125
    assert [e.ev for e in cfg.ev_profiles["p0"].entries] == [1, 2, 3, 3, 4]
    assert cfg.qps[0].peer_usid == 0xE001 and cfg.qps[2].peer_usid is None
    assert cfg.cc_profile(cfg.qps[0]).base_rtt_ns == 9000
    assert cfg.cc_profile(cfg.qps[1]).algorithm == "NSCC"      # built-in defaults


# (old text, new text, key path, reason fragment)
P0_E3 = "{ ev = 4, port = 0, state = \"DENIED\", usids = [0x1000, 0x2001, 0x1001, 0xE001] }"
BAD = {
    # uSID lists
    "usids_empty": (P0_E3, "{ ev = 4, port = 0, usids = [] }",
                    "ev_profiles.p0.entries[3].usids", "empty uSID list"),
    "usids_too_long": (P0_E3, "{ ev = 4, port = 0, usids = [%s] }" % ", ".join(["0x100"] * 24 + ["0xE001"]),
                       "ev_profiles.p0.entries[3].usids", "at most 24"),
    "usid_zero": ("usids = [0x1100, 0x2100", "usids = [0x1100, 0x0000",
                  "ev_profiles.p0.entries[1].usids[1]", "non-zero 16-bit"),
    "usid_17bit": ("usids = [0x1100, 0x2100", "usids = [0x1100, 0x10000",
                   "ev_profiles.p0.entries[1].usids[1]", "non-zero 16-bit"),
    "usid_type": ("usids = [0x1100, 0x2100", "usids = [0x1100, \"x\"",
                  "ev_profiles.p0.entries[1].usids[1]", "must be an integer"),
    "usids_not_array": ("usids = [0x1000, 0x2000, 0x1001, 0xE001] }", "usids = 5 }",
                        "ev_profiles.p0.entries[0].usids", "must be an array"),
    "peer_usid_mismatch": ("ev_profile = \"p0\"", "ev_profile = \"p0\"\npeer_usid = 0xE002",
                           "qps[0].peer_usid", "differs from 0xe001"),
    "paths_end_differently": ("0x1101, 0xE001] },\n  { ev = 3", "0x1101, 0xE002] },\n  { ev = 3",
                              "ev_profiles.p0.entries[1].usids", "peer NIC's uSID"),
    "template_usid_overflow": ("{ base = 0x2000, terms = { plane = 0x100, spine = 1 } }",
                               "{ base = 0xFFFC, terms = { spine = 1 } }",
                               "ev_profiles.g.usids[1]", "0x10000 for spine=4"),
    "template_unknown_term": ("terms = { plane = 0x100, spine = 1 }", "terms = { plan = 1 }",
                              "ev_profiles.g.usids[1].terms.plan", "unknown field 'plan'"),
    "template_empty": ("usids = [{ base = 0x1000, terms = { plane = 0x100 } },\n"
                       "         { base = 0x2000, terms = { plane = 0x100, spine = 1 } },\n"
                       "         0xE001]", "usids = []",
                       "ev_profiles.g.usids", "empty uSID list"),
    # EV width
    "ev_too_wide_srv6": ("{ ev = 1, port = 0", "{ ev = 0x100000000, port = 0",
                         "ev_profiles.p0.entries[0].ev", "wider than the 32 bits"),
    "ev_too_wide_udp": ("{ ev = 0x3FFF, port = 0 }", "{ ev = 0x4000, port = 0 }",
                        "ev_profiles.u.entries[0].ev", "wider than the 14 bits the UDP format"),
    "ev_negative": ("{ ev = 1, port = 0", "{ ev = -1, port = 0",
                    "ev_profiles.p0.entries[0].ev", "negative"),
    "usids_in_udp_generated": ("format = \"srv6\"\ntype = \"generated\"",
                               "format = \"udp\"\ntype = \"generated\"",
                               "ev_profiles.g.usids", "SRV6 format profiles only"),
    "usids_in_udp_explicit": ("{ ev = 0x3FFF, port = 0 }", "{ ev = 0x3FFF, port = 0, usids = [1] }",
                              "ev_profiles.u.entries[0].usids", "SRV6 format profiles only"),
    "generated_too_wide_udp": ("[cc_profiles.c]", "[ev_profiles.wide]\nformat = \"udp\"\ntype = \"generated\"\n"
                               "fields = [{ name = \"a\", width = 14, max_val = 3 }, { name = \"p\", width = 1 }]\n"
                               "port_field = \"p\"\n\n[cc_profiles.c]",
                               "ev_profiles.wide.fields", "15-bit EV, wider than the 14 bits of ev_format_profiles.udp"),
    # ports
    "port_missing": ("{ ev = 2, port = 1", "{ ev = 2, port = 2",
                     "ev_profiles.p0.entries[1].port", "port 2 does not exist"),
    "port_over_7": ("{ ev = 2, port = 1", "{ ev = 2, port = 8",
                    "ev_profiles.p0.entries[1].port", "out of range 0..7"),
    "port_field_too_wide": ("{ name = \"plane\", width = 1 }", "{ name = \"plane\", width = 2 }",
                            "ev_profiles.g.port_field", "port 3, which does not exist"),
    "port_field_unknown": ("port_field = \"plane\"", "port_field = \"planes\"",
                           "ev_profiles.g.port_field", "unknown field 'planes'"),
    "port_ids_gap": ("id = 1\n", "id = 2\n", "ports", "id 1 is missing"),
    "port_id_dup": ("id = 1\n", "id = 0\n", "ports[1].id", "duplicate port id 0"),
    "port_admin": ("next_hop_mac = \"02:00:00:00:11:00\"",
                   "next_hop_mac = \"02:00:00:00:11:00\"\nadmin = \"off\"",
                   "ports[1].admin", "'off' is not one of up, down"),
    # generated fields
    "field_min_gt_max": ("{ name = \"spine\", width = 3, min_val = 0, max_val = 7 }",
                         "{ name = \"spine\", width = 3, min_val = 5, max_val = 3 }",
                         "ev_profiles.g.fields[0].min_val", "min_val 5 > max_val 3"),
    "field_width_0": ("{ name = \"spine\", width = 3,", "{ name = \"spine\", width = 0,",
                      "ev_profiles.g.fields[0].width", "out of range 1..128"),
    # the restrictions of mrc_ctl.h (struct mrc_ctl_ev_profile_attr), each named in the message
    "field_init_val_wider": ("min_val = 0, max_val = 7 }", "min_val = 0, max_val = 7, init_val = 8 }",
                             "ev_profiles.g.fields[0].init_val",
                             "a field's init_val cannot be wider than the field's width"),
    "field_mask_over_width": ("min_val = 0, max_val = 7 }", "min_val = 0, max_val = 7, mask = 0xf }",
                              "ev_profiles.g.fields[0].mask",
                              "a field's mask cannot contain bits set outside of the field width"),
    "field_max_over_mask_bits": ("min_val = 0, max_val = 7 }", "min_val = 0, max_val = 4, mask = 0x5 }",
                                 "ev_profiles.g.fields[0].max_val",
                                 "a field's max_val cannot be wider than the number of set mask bits"),
    "field_max_over_mask_0x0f": ("min_val = 0, max_val = 7 }", "min_val = 0, max_val = 7, mask = 0x3 }",
                                 "ev_profiles.g.fields[0].max_val", "the mask 0x3 has 2 set"),
    "field_count_over_fmt": ("mode = \"SRV6\"", "mode = \"SRV6\"\nfmt_fields = [7]",
                             "ev_profiles.g.fields", "field_count <= fmt_field_count"),
    "field_wider_than_fmt_field": ("mode = \"SRV6\"", "mode = \"SRV6\"\nfmt_fields = [{ width = 2 }, { width = 2 }]",
                                   "ev_profiles.g.fields[0].width", "wider than format field 0"),
    "fields_too_wide": ("{ name = \"spine\", width = 3, min_val = 0, max_val = 7 }",
                        "{ name = \"spine\", width = 32, min_val = 0, max_val = 7 }",
                        "ev_profiles.g.fields", "sum of field widths <= sum of fmt_field widths"),
    "generated_too_many": ("{ name = \"spine\", width = 3, min_val = 0, max_val = 7 }",
                           "{ name = \"spine\", width = 8 }",
                           "ev_profiles.g.fields", "512 EVs x 1 copies, more than the 256"),
    "ev_count_over_generated": ("port_field = \"plane\"", "port_field = \"plane\"\nev_count = 17",
                                "ev_profiles.g.ev_count", "exceeds the 16 EVs the fields generate"),
    # the key names before mrc_ctl.h's: refused, naming the new key
    "old_key_initial": ("min_val = 0, max_val = 7 }", "min_val = 0, max_val = 7, initial = 1 }",
                        "ev_profiles.g.fields[0].initial", "renamed: use 'init_val'"),
    "old_key_min": ("min_val = 0, max_val = 7 }", "min = 0, max_val = 7 }",
                    "ev_profiles.g.fields[0].min", "renamed: use 'min_val'"),
    "old_key_max": ("min_val = 0, max_val = 7 }", "min_val = 0, max = 7 }",
                    "ev_profiles.g.fields[0].max", "renamed: use 'max_val'"),
    "fmt_fields_too_wide": ("mode = \"UDP\"", "mode = \"UDP\"\nfmt_fields = [8, 7]",
                            "ev_format_profiles.udp.fmt_fields", "15 bits wide, more than the 14"),
    # ev_min_active
    "min_active_too_big": ("ev_min_active = 2", "ev_min_active = 4",
                           "ev_profiles.p0.ev_min_active", "exceeds the 3 GOOD EVs"),
    "min_active_admin_down": ("next_hop_mac = \"02:00:00:00:11:00\"",
                              "next_hop_mac = \"02:00:00:00:11:00\"\nadmin = \"down\"",
                              "ev_profiles.p0.ev_min_active", "exceeds the 1 GOOD EVs"),
    "state_assumed_bad": ("state = \"DENIED\"", "state = \"ASSUMED_BAD\"",
                          "ev_profiles.p0.entries[3].state", "set by the NIC only"),
    "state_unknown": ("state = \"DENIED\"", "state = \"BAD\"",
                      "ev_profiles.p0.entries[3].state", "not one of GOOD, DENIED"),
    # path table capacity
    "copies_over_256": ("copies = 2", "copies = 254",
                        "ev_profiles.p0.entries", "more than 256 path entries"),
    "copies_range": ("copies = 2", "copies = 0",
                     "ev_profiles.p0.entries[2].copies", "out of range 1..256"),
    "weight_range": ("copies = 2", "weight = 256",
                     "ev_profiles.p0.entries[2].weight", "out of range 1..255"),
    # names
    "unknown_format": ("format = \"srv6\"\ntype = \"explicit\"", "format = \"srv7\"\ntype = \"explicit\"",
                       "ev_profiles.p0.format", "unknown EV format profile 'srv7'"),
    "unknown_mode": ("mode = \"UDP\"", "mode = \"VXLAN\"",
                     "ev_format_profiles.udp.mode", "not one of SRV6, STEV, UDP"),
    "unknown_ev_profile": ("ev_profile = \"g\"", "ev_profile = \"h\"",
                           "qps[1].ev_profile", "unknown EV profile 'h'"),
    "unknown_cc_profile": ("cc_profile = \"c\"", "cc_profile = \"d\"",
                           "qps[0].cc_profile", "unknown CC profile 'd'"),
    "unknown_type": ("type = \"explicit\"", "type = \"listed\"",
                     "ev_profiles.p0.type", "not one of explicit, generated"),
    # QPs
    "duplicate_qpn": ("qpn = 0x12", "qpn = 0x11", "qps[1].qpn", "duplicate QPN 17"),
    "qpn_24bit": ("qpn = 0x12", "qpn = 0x1000000", "qps[1].qpn", "out of range"),
    "qpn_reserved": ("qpn = 0x12", "qpn = 1", "qps[1].qpn", "out of range 2..16777215"),
    "psn_24bit": ("cc_profile = \"c\"", "cc_profile = \"c\"\nstart_psn = 0x1000000",
                  "qps[0].start_psn", "out of range"),
    "udp_qp_needs_peer_ip": ("peer_ipv6 = \"fd00::2\"\n", "",
                             "qps[2].peer_ipv6", "missing required key"),
    "udp_qp_peer_usid": ("peer_ipv6 = \"fd00::2\"\n", "peer_ipv6 = \"fd00::2\"\npeer_usid = 5\n",
                         "qps[2].peer_usid", "SRV6 profiles only"),
    "qp_missing_qpn": ("qpn = 0x12\n", "", "qps[1].qpn", "missing required key"),
    "too_many_qps": ("[[qps]]\nqpn = 0x13", "".join(f"[[qps]]\nqpn = {n}\npeer_qpn = 9\nev_profile = \"g\"\n\n"
                                                    for n in range(100, 106)) + "[[qps]]\nqpn = 0x13",
                     "qps", "9 QPs given, the hardware holds 8"),
    # addresses
    "mac_short": ("mac = \"02:00:00:00:00:01\"", "mac = \"02:00:00:00:00\"",
                  "nic.mac", "is not a MAC address"),
    "mac_hex": ("next_hop_mac = \"02:00:00:00:11:00\"", "next_hop_mac = \"02:00:00:00:11:zz\"",
                "ports[1].next_hop_mac", "is not a MAC address"),
    "mac_multicast": ("mac = \"02:00:00:00:00:01\"", "mac = \"01:00:5e:00:00:01\"",
                      "nic.mac", "multicast"),
    "ipv6_bad": ("ipv6 = \"fd00::1\"", "ipv6 = \"fd00::g\"", "nic.ipv6", "is not an IPv6 address"),
    "ipv6_v4": ("ipv6 = \"fd00::1\"", "ipv6 = \"10.0.0.1\"", "nic.ipv6", "is not an IPv6 address"),
    "peer_ipv6_bad": ("peer_ipv6 = \"fd00::2\"", "peer_ipv6 = \"fd00:::2\"",
                      "qps[2].peer_ipv6", "is not an IPv6 address"),
    "locator_not_32": ("\"fc00:0::/32\"", "\"fc00:0::/48\"", "nic.locator_block", "/48"),
    "locator_bad": ("\"fc00:0::/32\"", "\"fc00:zz::/32\"", "nic.locator_block", "not an IPv6 prefix"),
    "locator_int_wide": ("\"fc00:0::/32\"", "0x1FC000000", "nic.locator_block", "out of range"),
    "nic_usid_zero": ("usid = 0xE000", "usid = 0", "nic.usid", "non-zero 16-bit"),
    # nic scalars
    "pmtu": ("usid = 0xE000", "usid = 0xE000\npmtu = 1500", "nic.pmtu", "not a RoCE path MTU"),
    "dscp": ("usid = 0xE000", "usid = 0xE000\ndscp = 64", "nic.dscp", "out of range 0..63"),
    "trim_dscp_same": ("usid = 0xE000", "usid = 0xE000\ntrim_dscp = 26", "nic.trim_dscp", "equals nic.dscp"),
    "clock": ("usid = 0xE000", "usid = 0xE000\nclock_mhz = \"fast\"", "nic.clock_mhz", "must be a number"),
    # memory regions
    "mr_dup_rkey": ("rkey = 0x11", "rkey = 0x10", "memory_regions[1].rkey", "already used"),
    "mr_overlap": ("base = 0x20000", "base = 0x10800", "memory_regions[1].base", "overlaps memory_regions[0]"),
    "mr_len0": ("length = 0x1000\nrkey = 0x11", "length = 0\nrkey = 0x11",
                "memory_regions[1].length", "out of range"),
    "mr_host_end": ("base = 0x20000", "base = 0xFFFFF800", "memory_regions[1].length", "32-bit host"),
    # CC
    "cc_algorithm": ("base_rtt_ns = 9000", "algorithm = \"DCQCN\"", "cc_profiles.c.algorithm", "not one of NSCC"),
    "cc_min_gt_max": ("base_rtt_ns = 9000", "min_cwnd_bytes = 8192\nmax_cwnd_bytes = 4096",
                      "cc_profiles.c.min_cwnd_bytes", "> max_cwnd_bytes"),
    "cc_min_below_mtu": ("base_rtt_ns = 9000", "min_cwnd_bytes = 100",
                         "cc_profiles.c.min_cwnd_bytes", "below one packet"),
    "cc_gamma": ("base_rtt_ns = 9000", "gamma = 2.0", "cc_profiles.c.gamma", "out of range"),
    "cc_bool": ("base_rtt_ns = 9000", "disable_qa = 1", "cc_profiles.c.disable_qa", "must be a boolean"),
    # typo protection and types
    "typo_nic": ("usid = 0xE000", "usids = 0xE000", "nic.usids", "did you mean 'usid'"),
    "typo_top": ("[cc_profiles.c]", "[cc_profile.c]", "cc_profile", "did you mean 'cc_profiles'"),
    "typo_entry": ("{ ev = 1, port = 0, usids", "{ ev = 1, prt = 0, usids",
                   "ev_profiles.p0.entries[0].prt", "unknown key"),
    "typo_field": ("{ name = \"plane\", width = 1 }", "{ name = \"plane\", width = 1, maks = 1 }",
                   "ev_profiles.g.fields[1].maks", "did you mean 'mask'"),
    "typo_qp": ("peer = \"t1\"", "peer_name = \"t1\"", "qps[0].peer_name", "unknown key"),
    "typo_cc": ("base_rtt_ns = 9000", "base_rtt = 9000", "cc_profiles.c.base_rtt", "did you mean 'base_rtt_ns'"),
    "explicit_with_fields": ("type = \"explicit\"\nev_min_active = 2",
                             "type = \"explicit\"\nev_min_active = 2\nport_field = \"x\"",
                             "ev_profiles.p0.port_field", "unknown key"),
    "type_str_for_int": ("usid = 0xE000", "usid = 0xE000\npmtu = \"1024\"", "nic.pmtu", "must be an integer"),
    "type_bool_for_int": ("{ ev = 1, port = 0", "{ ev = true, port = 0",
                          "ev_profiles.p0.entries[0].ev", "must be an integer"),
    "type_float_for_int": ("qpn = 0x12", "qpn = 18.0", "qps[1].qpn", "must be an integer"),
    "type_name": ("name = \"t0\"", "name = 7", "nic.name", "must be a string"),
    "missing_nic_key": ("mac = \"02:00:00:00:00:01\"\n", "", "nic.mac", "missing required key"),
    "nic_not_table": ("[nic]\nname", "nic = 5\n[nicx]\nname", "nicx", "unknown key"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_refused(tmp_path, case):
    old, new, key, reason = BAD[case]
    refused(tmp_path, edit(old, new), key, reason)


def test_more_than_256_entries_in_total(tmp_path):
    """Two profiles of 200 entries each fit one by one but not together in the path table."""
    text = edit("entries = [{ ev = 0x3FFF, port = 0 }]", "entries = [{ ev = 0x3FFF, port = 0, copies = 200 }]")
    text = edit("ev_profile = \"g\"", "peer_ipv6 = \"fd00::2\"\nev_profile = \"u\"", text)  # g unused
    load_config(write(tmp_path, text))
    text = edit("copies = 2", "copies = 80", text)                          # p0: 83 + u: 200
    refused(tmp_path, text, "ev_profiles.u", "need 283 entries in total")


def test_srh_segment_memory_full(tmp_path):
    """128 distinct 24-uSID paths need 512 SRH words; the segment memory holds 256."""
    long = ", ".join(f"{{ base = {0x100 + i:#x}, terms = {{ spine = 0x10, plane = 1 }} }}" for i in range(23))
    text = edit("{ name = \"spine\", width = 3, min_val = 0, max_val = 7 }", "{ name = \"spine\", width = 6 }")
    text = edit("usids = [{ base = 0x1000, terms = { plane = 0x100 } },", f"usids = [{long},", text)
    text = edit("         { base = 0x2000, terms = { plane = 0x100, spine = 1 } },\n", "", text)
    text = edit("[[qps]]\nqpn = 0x11", "[[qpx]]\nqpn = 0x11", text)
    text = text.replace("[[qpx]]\nqpn = 0x11\npeer = \"t1\"\npeer_qpn = 0x21\nev_profile = \"p0\"\n"
                        "cc_profile = \"c\"\n", "")
    refused(tmp_path, text, "ev_profiles.g", "SRH segment memory full")


def test_ports_not_array(tmp_path):
    text = BASE.replace("[[ports]]\nid = 0\nnext_hop_mac = \"02:00:00:00:10:00\"\n", "")
    text = "ports = 3\n" + text.replace("[[ports]]\nid = 1\nnext_hop_mac = \"02:00:00:00:11:00\"\n", "")
    refused(tmp_path, text, "ports", "must be an array of tables")


def test_file_errors(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"nope\.toml: \(file\): cannot read"):
        load_config(missing)
    err = refused(tmp_path, "[nic\nname = 1", "(file)", "TOML syntax error")
    assert "line 1" in err.reason
    refused(tmp_path, "", "nic", "missing required key")
    with pytest.raises(ConfigError, match=r"^<string>: nic: missing"):
        loads_config("")


# --------------------------------------------------------------------------
# Generated EVs: mrc_ctl.h expansion, vectors worked by hand
# --------------------------------------------------------------------------
# mrc_ctl.h (struct mrc_ctl_ev_profile_attr): a field starts as init_val zero-filled to its
# width; for each set mask bit, from the most significant, the next most significant EV bit
# overwrites it; fields are concatenated, field 0 most significant.

def test_expand_odd_mask_over_init_val():
    """mask 0x0f0f over init_val 0xA5A5: the 8 EV bits land in bits 11..8 then 3..0.
    v = 0xC3 = 1100 0011: bits 11..8 <- 1100 (0xC), bits 3..0 <- 0011 (0x3); the unmasked
    nibbles keep init_val's 0xA and 0xA: 0xACA3."""
    f = EvField("f", 16, 0xA5A5, 0, 0xFF, 0x0F0F)
    assert f.bits == 8
    assert f.expand(0xC3) == 0xACA3
    assert f.expand(0x00) == 0xA0A0
    assert f.expand(0xFF) == 0xAFAF
    assert f.expand(0x5A) == 0xA5AA            # 0101 -> bits 11..8, 1010 -> bits 3..0


def test_expand_fixed_field():
    """init_val = the fixed value, min_val = max_val = mask = 0: no EV bit, always 0x7E."""
    f = EvField("fix", 8, 0x7E, 0, 0, 0)
    assert f.bits == 0 and f.values() == [0] and f.expand(0) == 0x7E


def test_expand_max_uses_every_mask_bit():
    """mask 0b1010 (2 set bits), init_val 0b0101, max_val 3 = every combination of the 2 bits:
    v = b1 b0 -> bit 3 <- b1, bit 1 <- b0."""
    f = EvField("f", 4, 0b0101, 0, 3, 0b1010)
    assert [f.expand(v) for v in f.values()] == [0b0101, 0b0111, 0b1101, 0b1111]


STEV_GEN = BASE.replace("[cc_profiles.c]", """[ev_format_profiles.tiers]
mode = "STEV"
fmt_fields = [8, 4, 4]

[ev_profiles.stev_gen]
format = "tiers"
type = "generated"
port_field = "plane"
fields = [
  { name = "t0", width = 8, init_val = 0xA0, mask = 0x0F, min_val = 0, max_val = 2 },
  { name = "fix", width = 4, init_val = 0x9, min_val = 0, max_val = 0, mask = 0 },
  { name = "plane", width = 2, max_val = 1 },
]

[cc_profiles.c]""")


def test_generated_stev_vectors(tmp_path):
    """Format fields 8 | 4 | 4; t0 = 0xA0 with v in its low nibble, a fixed 0x9, the plane
    right-aligned in a 4-bit format field; odometer with the last field fastest:
    EV = (0xA0|t0) << 8 | 0x9 << 4 | plane."""
    prof = load_config(write(tmp_path, STEV_GEN)).ev_profiles["stev_gen"]
    assert [(e.ev, e.port) for e in prof.entries] == [
        (0xA090, 0), (0xA091, 1), (0xA190, 0), (0xA191, 1), (0xA290, 0), (0xA291, 1)]
    assert [f.shift for f in prof.fields] == [8, 4, 0]


SRV6_GEN = BASE.replace("[cc_profiles.c]", """[ev_format_profiles.addr]
mode = "SRV6"
fmt_fields = [32, 16, 16]

[ev_profiles.srv6_gen]
format = "addr"
type = "generated"
port_field = "leaf"
tail_usids = [0xE001]
fields = [
  { name = "loc", width = 32, init_val = 0xFC000000, min_val = 0, max_val = 0, mask = 0 },
  { name = "leaf", width = 16, init_val = 0x1000, mask = 0x0100, max_val = 1 },
  { name = "spine", width = 16, init_val = 0x2000, mask = 0x0103, min_val = 3, max_val = 5 },
]

[cc_profiles.c]""")


def test_generated_srv6_vectors(tmp_path):
    """The SRv6 address form (no uSID templates): the expanded EV is locator | uSIDs.
    leaf: 0x1000 with v in bit 8 (0x1000 / 0x1100); spine: mask 0x0103, v = b2 b1 b0 ->
    bit 8 <- b2, bits 1..0 <- b1 b0: v = 3, 4, 5 -> 0x2003, 0x2100, 0x2101.  The path-table
    EV of an address-form entry is its index in the profile (mrcnic's choice)."""
    cfg = load_config(write(tmp_path, SRV6_GEN))
    prof = cfg.ev_profiles["srv6_gen"]
    got = [(e.ev, e.port, e.usids) for e in prof.entries]
    assert got == [(0, 0, (0x1000, 0x2003, 0xE001)), (1, 0, (0x1000, 0x2100, 0xE001)),
                   (2, 0, (0x1000, 0x2101, 0xE001)), (3, 1, (0x1100, 0x2003, 0xE001)),
                   (4, 1, (0x1100, 0x2100, 0xE001)), (5, 1, (0x1100, 0x2101, 0xE001))]
    # a locator other than nic.locator_block is refused
    refused(tmp_path, SRV6_GEN.replace("init_val = 0xFC000000", "init_val = 0xDEADCAFE"),
            "ev_profiles.srv6_gen.fields", "not nic.locator_block")


def test_generated_srv6_usid_terms(tmp_path):
    """mrcnic's uSID templates: the fields form the 32-bit EV, the terms use the expanded
    field values; spine with mask 0x5 over init_val 0x2: v = 0..3 -> 0b010, 0b011, 0b110, 0b111."""
    text = edit("{ name = \"spine\", width = 3, min_val = 0, max_val = 7 }",
                "{ name = \"spine\", width = 3, init_val = 0x2, mask = 0x5, max_val = 3 }")
    prof = load_config(write(tmp_path, text)).ev_profiles["g"]
    spines = [0b010, 0b011, 0b110, 0b111]
    assert [(e.ev, e.port) for e in prof.entries] == \
        [(s << 1 | p, p) for s in spines for p in (0, 1)]
    assert prof.entries[2].usids == (0x1000, 0x2003, 0xE001)
    assert prof.entries[7].usids == (0x1100, 0x2107, 0xE001)


def test_generated_ev_count_and_default_ports(tmp_path):
    """ev_count takes the first EVs of the enumeration; without port_field the EVs go round
    robin over the up ports (mrcnic's choice)."""
    text = STEV_GEN.replace('port_field = "plane"\n', 'ev_count = 4\n')
    prof = load_config(write(tmp_path, text)).ev_profiles["stev_gen"]
    assert [(e.ev, e.port) for e in prof.entries] == \
        [(0xA090, 0), (0xA091, 1), (0xA190, 0), (0xA191, 1)]


def test_generated_copies_weight_state(tmp_path):
    text = edit("port_field = \"plane\"", "port_field = \"plane\"\ncopies = 2\nweight = 3\nstate = 'DENIED'")
    text = edit("ev_profile = \"g\"", "ev_profile = \"p0\"", text)
    text = edit("type = \"generated\"", "type = \"generated\"\nev_min_active = 1", text)
    with pytest.raises(ConfigError, match="ev_profiles.g.ev_min_active: 1 exceeds the 0 GOOD"):
        load_config(write(tmp_path, text))
    text = edit("state = 'DENIED'", "state = 'GOOD'", text)
    cfg = load_config(write(tmp_path, text))
    entries = cfg.ev_profiles["g"].entries
    assert len(entries) == 32 and all(e.weight == 3 for e in entries)
    assert [e.ev for e in entries[:4]] == [0, 0, 1, 1]


# --------------------------------------------------------------------------
# Examples
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_examples_load(name):
    cfg = load_config(EXAMPLES / name)
    hw = compile_tables(cfg)
    assert hw.path_entries and len(hw.path_entries) == len(hw.path_encaps)
    check_tables(cfg, hw)


def test_expected_examples_present():
    assert {"two_nics.toml", "nic1.toml", "srh.toml", "stev.toml", "udp.toml"} <= \
        {p.name for p in EXAMPLES.glob("*.toml")}


def check_tables(cfg, hw):
    """Generic consistency of the hardware tables with the config and with mrcnic.wire."""
    # every dict is exactly a layout's fields: Layout.const accepts it, values round-trip
    for d, layout in ([(hw.globals, NicGlobals)] + [(e, PathEntry) for e in hw.path_entries]
                      + [(q, QpContext) for q in hw.qp_contexts] + [(q, RxQpContext) for q in hw.rx_qps]
                      + [(m, MemRegion) for m in hw.memory_regions]):
        assert set(d) == set(data.Layout.cast(layout).members), layout.__name__
        view = data.Layout.cast(layout).from_bits(layout.const(d).as_value().value)
        for k, v in d.items():
            got = getattr(view, k)
            assert (got.value if isinstance(got, Enum) else got) == v, (layout.__name__, k)
    assert hw.globals["src_mac"] == int(cfg.nic.mac.replace(":", ""), 16)
    assert hw.globals["pmtu_log2"] == cfg.nic.pmtu.bit_length() - 1
    assert len(hw.next_hop_mac) == len(cfg.ports)
    assert len(hw.segments) <= 256 and all(0 <= w < 1 << 128 for w in hw.segments)
    for i, (e, enc) in enumerate(zip(hw.path_entries, hw.path_encaps)):
        ev, port, usids = hw.expected_path(i)
        assert (e["ev"], e["port"]) == (ev, port) == (enc.ev, enc.port)
        assert ev < 1 << EV_BITS[enc.mode]
        carriers = enc.carriers()
        assert e["da"] == int(ipaddress.IPv6Address(carriers[0]))
        assert e["n_carriers"] == len(carriers)
        if enc.mode == "SRV6":
            assert carriers == wire.path_carriers(cfg.nic.locator_block, usids)
        if e["n_carriers"] > 1:
            words = hw.segments[e["seg_base"]:e["seg_base"] + e["n_carriers"]]
            assert words == [int(ipaddress.IPv6Address(c)) for c in reversed(carriers)]
            assert words[-1] == e["da"]
    for qp, ctx, rx in zip(cfg.qps, hw.qp_contexts, hw.rx_qps):
        prof = cfg.ev_profiles[qp.ev_profile]
        assert (ctx["profile_base"], ctx["profile_count"]) == hw.profile_ranges[qp.ev_profile]
        assert ctx["profile_count"] == len(prof.entries)
        assert ctx["mode"] == rx["mode"] == EvMode[prof.mode].value
        assert ctx["dest_qpn"] == qp.peer_qpn and rx["qpn"] == qp.qpn
        for j in range(ctx["profile_base"], ctx["profile_base"] + ctx["profile_count"]):
            enc = hw.path_encaps[j]
            assert enc.mode == prof.mode
            if prof.mode == "SRV6":
                assert enc.usids[-1] == ctx["peer_usid"]
            else:
                assert enc.dst_ip == qp.peer_ipv6 and ctx["peer_usid"] == 0


def test_two_nics_tables():
    cfg = load_config(EXAMPLES / "two_nics.toml")
    hw = compile_tables(cfg)
    assert len(cfg.ports) == 4 and len(hw.path_entries) == 128
    assert hw.qp_contexts == [dict(dest_qpn=0x21, start_psn=0, mode=EvMode.SRV6.value, profile_base=0,
                                   profile_count=128, peer_usid=0x0101, rkey_check=0)]
    assert hw.rx_qps == [dict(valid=1, qpn=0x11, mode=EvMode.SRV6.value, peer_qpn=0x21,
                              peer_usid=0x0101, start_psn=0)]
    per_plane = [sum(e["port"] == p for e in hw.path_entries) for p in range(4)]
    assert per_plane == [32] * 4
    assert sorted(e["ev"] for e in hw.path_entries) == list(range(128))
    assert not hw.segments
    for e in hw.path_entries:
        plane, spine = e["ev"] & 3, e["ev"] >> 2
        assert e["port"] == plane and e["state"] == EvState.GOOD.value and e["weight"] == 1
        usids = [0x1000 | plane << 8, 0x2000 | plane << 8 | spine, 0x1001 | plane << 8, 0x0101]
        assert e["n_carriers"] == 1
        assert e["da"] == int(ipaddress.IPv6Address(wire.usid_carrier(BLOCK, usids)))
    # the last field (plane) varies fastest: consecutive entries alternate planes
    assert [e["port"] for e in hw.path_entries[:8]] == [0, 1, 2, 3] * 2


def test_two_nics_are_peers():
    """nic0's frames, built from its tables, arrive at nic1's own DA with a valid ICRC."""
    c0, c1 = load_config(EXAMPLES / "two_nics.toml"), load_config(EXAMPLES / "nic1.toml")
    h0, h1 = compile_tables(c0), compile_tables(c1)
    assert c0.qps[0].peer_qpn == c1.qps[0].qpn and c1.qps[0].peer_qpn == c0.qps[0].qpn
    assert c0.nic.locator_block == c1.nic.locator_block
    rkeys = {m["rkey"] for m in h1.memory_regions}
    for idx in (0, 77, 127):
        enc = h0.path_encaps[idx]
        frame = wire.build_data_frame(src_mac=c0.nic.mac, dst_mac=c0.ports[enc.port].next_hop_mac,
                                      src_ip=c0.nic.ipv6, path=enc, qpn=h0.qp_contexts[0]["dest_qpn"],
                                      psn=idx, va=c1.memory_regions[0].va, rkey=min(rkeys),
                                      payload=bytes(range(64)), dscp=h0.globals["dscp"])
        pkt = Ether(frame)
        assert int(ipaddress.IPv6Address(pkt[IPv6].dst)) == h0.path_entries[idx]["da"]
        assert pkt[IPv6].fl == enc.ev & 0xFFFFF and pkt[UDP].sport == 0xC000 | enc.ev >> 20
        arrived = wire.arrival_form(frame, BLOCK)
        assert int(ipaddress.IPv6Address(Ether(arrived)[IPv6].dst)) == h1.local_da()
        assert wire.check_icrc(arrived)
    # the reverse direction mirrors it
    assert int(ipaddress.IPv6Address(h1.path_encaps[5].arrival_da())) == h0.local_da()


def test_srh_tables():
    cfg = load_config(EXAMPLES / "srh.toml")
    hw = compile_tables(cfg)
    base, count = hw.profile_ranges["long"]
    assert (base, count) == (0, 16)
    assert all(e["n_carriers"] == 2 for e in hw.path_entries[:16])
    ebase, ecount = hw.profile_ranges["explicit_long"]
    assert ecount == 4
    ex = hw.path_entries[ebase:ebase + ecount]
    assert [e["n_carriers"] for e in ex] == [2, 3, 3, 4]
    assert ex[1]["seg_base"] == ex[2]["seg_base"]               # copies share their segment list
    assert ex[3]["state"] == EvState.DENIED.value
    assert len(hw.segments) == 16 * 2 + 2 + 3 + 4
    for idx in range(len(hw.path_entries)):
        e, enc = hw.path_entries[idx], hw.path_encaps[idx]
        frame = wire.build_data_frame(src_mac=cfg.nic.mac, dst_mac=cfg.ports[e["port"]].next_hop_mac,
                                      src_ip=cfg.nic.ipv6, path=enc, qpn=0x21, psn=1, va=0, rkey=1,
                                      payload=b"x" * 5)
        pkt = Ether(frame)
        srh = pkt[IPv6ExtHdrSegmentRouting]
        n = e["n_carriers"]
        # the SRH Segment List on the wire, word by word, is the segment memory
        assert [int(ipaddress.IPv6Address(a)) for a in srh.addresses] == \
            hw.segments[e["seg_base"]:e["seg_base"] + n]
        assert srh.segleft == n - 1 and int(ipaddress.IPv6Address(pkt[IPv6].dst)) == e["da"]
        assert len(frame) == wire.header_length(n) + 8 + 4
        assert wire.check_icrc(frame, BLOCK)


def test_stev_tables():
    cfg = load_config(EXAMPLES / "stev.toml")
    hw = compile_tables(cfg)
    assert len(hw.path_entries) == 64 and hw.qp_contexts[0]["mode"] == EvMode.STEV.value
    peer = int(ipaddress.IPv6Address("fd00::2"))
    fls, sports = set(), set()
    for e, enc in zip(hw.path_entries, hw.path_encaps):
        assert e["da"] == peer and e["n_carriers"] == 1 and enc.usids == []
        assert e["port"] == e["ev"] & 1
        fls.add(enc.flow_label)
        sports.add(enc.sport)
    assert fls == {0, 1} and len(sports) == 32 and all(s & 0xC000 == 0xC000 for s in sports)
    assert [e["ev"] >> 21 for e in hw.path_entries[:4]] == [0, 0, 1, 1]   # min_val first, plane fastest
    assert hw.path_entries[0]["ev"] >> 1 & 0xFFFFF == 0                    # the fixed gap


def test_udp_tables():
    cfg = load_config(EXAMPLES / "udp.toml")
    hw = compile_tables(cfg)
    evs = [e["ev"] for e in hw.path_entries]
    assert evs == [0x1, 0x2, 0x1234, 0x3FFF, 0x3FFF, 0x3FFF, 0x2000]
    assert [e["weight"] for e in hw.path_entries] == [1, 2, 1, 1, 1, 1, 1]
    assert [e["state"] for e in hw.path_entries].count(EvState.DENIED.value) == 1
    assert hw.globals["pmtu_log2"] == 11
    assert hw.qp_contexts[0]["start_psn"] == 0xFFFFF0
    for enc in hw.path_encaps:
        assert enc.flow_label == 0 and enc.sport == 0xC000 | enc.ev


def test_admin_down_port_denies_entries(tmp_path):
    text = edit("next_hop_mac = \"02:00:00:00:11:00\"", "next_hop_mac = \"02:00:00:00:11:00\"\nadmin = \"down\"")
    text = edit("ev_min_active = 2", "ev_min_active = 1", text)
    hw = compile_tables(load_config(write(tmp_path, text)))
    assert hw.port_up == [True, False]
    good, denied = EvState.GOOD.value, EvState.DENIED.value
    base, count = hw.profile_ranges["p0"]
    assert [e["state"] for e in hw.path_entries[base:base + count]] == [good] + [denied] * 4
    base, count = hw.profile_ranges["g"]
    assert [e["state"] for e in hw.path_entries[base:base + count]] == [good, denied] * 8


def test_base_tables(tmp_path):
    cfg = load_config(write(tmp_path, BASE))
    hw = compile_tables(cfg)
    check_tables(cfg, hw)
    assert hw.profile_ranges == {"p0": (0, 5), "g": (5, 16), "u": (21, 1)}
    assert [e["state"] for e in hw.path_entries[:5]] == [0, 0, 0, 0, EvState.DENIED.value]
    assert hw.memory_regions == [dict(valid=1, rkey=0x10, va=0x1000, length=0x1000, base=0x10000),
                                 dict(valid=1, rkey=0x11, va=0x1000, length=0x1000, base=0x20000)]
    assert hw.next_hop_mac == [0x020000001000, 0x020000001100]
    assert hw.globals == dict(src_mac=0x020000000001, src_ip=int(ipaddress.IPv6Address("fd00::1")),
                              dscp=26, pmtu_log2=10)
    assert hw.trim_dscp == 46 and hw.local_usid == 0xE000
    assert hw.local_da() == int(ipaddress.IPv6Address("fc00:0:e000::"))


def test_shared_profile_shares_range(tmp_path):
    text = edit("ev_profile = \"g\"", "ev_profile = \"p0\"")
    hw = compile_tables(load_config(write(tmp_path, text)))
    assert hw.qp_contexts[0]["profile_base"] == hw.qp_contexts[1]["profile_base"] == 0
    assert hw.profile_ranges == {"p0": (0, 5), "u": (5, 1)}        # unused g is not laid out
    text = edit("peer_ipv6 = \"fd00::2\"\nev_profile = \"u\"",
                "peer_ipv6 = \"fd00::2\"\nev_profile = \"u\"\n\n[[qps]]\nqpn = 0x14\npeer_qpn = 5\n"
                "peer_ipv6 = \"fd00::3\"\nev_profile = \"u\"", text)
    refused(tmp_path, text, "qps[3].peer_ipv6", "share its destination address")


def test_too_many_memory_regions_refused(tmp_path):
    from mrcnic.config import ConfigError, MAX_REGIONS, load_config
    text = (EXAMPLES / "nic1.toml").read_text()
    extra = "".join(f"""
[[memory_regions]]
va = {0x1000_0000 * (k + 1):#x}
length = 0x1000
rkey = {0x900 + k:#x}
base = {0x0100_0000 + 0x10000 * k:#x}
""" for k in range(MAX_REGIONS))
    bad = tmp_path / "five.toml"
    bad.write_text(text + extra)
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert "five.toml" in str(err.value) and "memory_regions" in str(err.value)
    assert "hardware holds 4" in str(err.value)
