"""The OCP MRC 1.0 controller API (``mrc_ctl.h``) in Python, over the mrcnic register client.

Names, attribute structures, attribute masks and the error contract follow
``mrc_ctl.h`` (opencomputeproject/OCP-Multipath-Reliable-Connection, control API
1.0.1): every call is a method of :class:`MrcCtlContext` named as the C function
(``ctx.mrc_ctl_modify_ev_profile(ev_profile_id, attr, attr_mask)``), attribute
structures are dataclasses with the header's field names, and a failing call
raises :class:`MrcCtlError`, an ``OSError`` whose ``errno`` is the header's
(``E2BIG``, ``EINVAL``, ``ENOENT``, ``EIO``, ``EPERM``, ``EBUSY``, ``ENOTSUP``,
``ETIMEDOUT``).  Register bus errors become ``EIO``.  What the hardware cannot
do raises the header's error; nothing is a silent no-op.

How the calls map onto mrcnic (docs/mrc-api.md has the full table):

* an **EV profile** is a contiguous range of path-table entries
  (``txqp.profile_base/profile_count`` of the QPs using it); the profiles found in
  the NIC (provisioned by ``mrcnic fw provision``) are adopted ONLINE with ids
  1, 2, ... in path-table order (or named by a loaded configuration);
* OFFLINE = every entry of the range DENIED in the hardware (a QP using the profile
  sends nothing new until it is ONLINE again; mrcnic allows it, the header's EBUSY
  is not raised), ONLINE = the entries written with their states;
* **EV Format profiles** and **CC profiles** are firmware objects; a CC profile's
  NSCC parameters are written into the ``cc`` entry of each QP it is attached to
  (adopted: CC profile ``q + 1`` is QP ``q``'s entry);
* an EV is ``MrcCtlEv(val, port)``: ``val`` the 32-bit wire EV (path-table ``ev``),
  ``port`` **1-based** as in the header (hardware port = ``port - 1``); SRV6 entries
  may carry ``usids`` (mrcnic's extension) when a replacement changes the path;
* **EV events** come from the NIC's ``EV_EVENT`` queue (16 deep); the hardware
  does not count dropped events, so ``drop_count`` is 0 and
  ``MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT`` is not advertised;
* **EV probes** (``mrc_ctl_ep_batch_send_wait``, ``MRC_CTL_EP_OP_EV_PROBE``) use
  ``EV_PROBE_REQ`` on the path entry holding the requested EV; the RTT is the
  NIC's measurement (``adj_svc_time`` = 0).  ``MRC_CTL_EP_OP_PORT_STATUS_UPDATE``
  raises ``ENOTSUP``.  The NIC tracks one probe at a time: a batch is sent one request
  after the other, each waiting up to ``rsp_timeout`` for its response.

mrcnic's extensions (the header has no weights, no per-EV counters and no notion of
copies), in the header's vocabulary and error contract:

* ``MrcCtlEvOpEntry.index`` / ``MrcCtlEpReq.index``: one path-table entry (one copy of an
  EV) instead of every copy; ``MrcCtlEvOpEntry.weight``: filled in by QUERY_EV_STATE /
  QUERY_EV_ARRAY (the NIC's value for an ONLINE profile);
* :meth:`MrcCtlContext.mrc_ctl_modify_ev_weight` (weights) and
  :meth:`MrcCtlContext.mrc_ctl_query_ev_counters` (the ``evcnt`` table);
* :attr:`MrcCtlContext.ep_stale_rsp`: probe replies popped that answered no request
  (left over from earlier probes or another controller's).

The weight agent (:mod:`mrcnic.fw.agent`) and ``mrcnic fw`` reach the EVs, ports and
probes of the NIC through these calls only.
"""

from __future__ import annotations

import enum
import errno as _errno
import time
from dataclasses import dataclass, field
from typing import Callable

from ..rtl.layouts import EvState as HwEvState
from .client import CsrClient
from .transport import TransportError

__all__ = [
    "MrcCtlError", "MrcCtlContext", "MrcCtlProfileState", "MrcCtlAttrOpt", "MrcCtlEvFmtMode",
    "MrcCtlEvMode", "MrcCtlEvState", "MrcCtlEvOp", "MrcCtlEvFieldsOp", "MrcCtlEvFmtOp",
    "MrcCtlEvProfileAttrMask", "MrcCtlEvFmtProfileAttrMask", "MrcCtlCcProfileAttrMask",
    "MrcCtlPortAttrMask", "MrcCtlPortAdminState", "MrcCtlEpOpType", "MRC_CTL_EV_OP_F_ALL_COPIES",
    "MrcCtlEv", "MrcCtlEvField", "MrcCtlEvFmtField", "MrcCtlEvOpEntry", "MrcCtlDeviceAttr",
    "MrcCtlDeviceEvAttr", "MrcCtlDeviceCcAttr", "MrcCtlPortAttr", "MrcCtlEvFmtProfileAttr",
    "MrcCtlEvProfileAttr", "MrcCtlCcProfileAttr", "MrcCtlCcNsccCfg", "MrcCtlEvEvent",
    "MrcCtlEpReq", "MrcCtlEpRsp", "MrcCtlEvCounters", "MrcCtlEvOpArgs", "MRC_CTL_EV_UNPOPULATED",
    "NSCC_ALGORITHM", "load_config_profiles",
]

#: ``device_attr.cc.algorithms``: the one algorithm mrcnic implements.
NSCC_ALGORITHM = "uet-1.0-nscc"


class MrcCtlError(OSError):
    """A ``mrc_ctl.h`` call failed: ``err.errno`` is the header's errno.

    ``partial`` (EV operations) is how many entries succeeded before the failing one
    (the header's per-entry success rule); ``required`` (E2BIG on a query) the array
    size needed; ``rsp`` (probe timeout) the responses received.
    """

    def __init__(self, code: int, msg: str, **extra):
        super().__init__(code, f"{_errno.errorcode.get(code, code)}: {msg}")
        self.partial = extra.get("partial")
        self.required = extra.get("required")
        self.rsp = extra.get("rsp")


def _fail(code, msg, **extra):
    raise MrcCtlError(code, msg, **extra)


# --------------------------------------------------------------------------
# Enumerations (mrc_ctl.h values)
# --------------------------------------------------------------------------
class MrcCtlProfileState(enum.IntEnum):
    """``enum mrc_ctl_profile_state``."""
    MRC_CTL_PROFILE_INIT = 0
    MRC_CTL_PROFILE_OFFLINE = 1
    MRC_CTL_PROFILE_ONLINE = 2


INIT, OFFLINE, ONLINE = MrcCtlProfileState


class MrcCtlAttrOpt(enum.IntFlag):
    """``enum mrc_ctl_attr_opt``."""
    MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE = 1 << 0
    MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE = 1 << 1
    MRC_CTL_OPT_CAP_EV_EVENT = 1 << 2
    MRC_CTL_OPT_CAP_EV_EXPLICIT_RANGE = 1 << 3
    MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT = 1 << 4
    MRC_CTL_OPT_CAP_EP_OP_EV_PROBE = 1 << 5


class MrcCtlEvFmtMode(enum.IntFlag):
    """``enum mrc_ctl_ev_fmt_mode``."""
    MRC_CTL_EV_FMT_MODE_STEV = 1 << 0
    MRC_CTL_EV_FMT_MODE_SRV6 = 1 << 1
    MRC_CTL_EV_FMT_MODE_UDP = 1 << 2


_FMT_NAME = {MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_STEV: "STEV",
             MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_SRV6: "SRV6",
             MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_UDP: "UDP"}
_FMT_OF = {v: k for k, v in _FMT_NAME.items()}


class MrcCtlEvMode(enum.IntFlag):
    """``enum mrc_ctl_ev_mode``."""
    MRC_CTL_EV_MODE_AUTO = 1 << 0
    MRC_CTL_EV_MODE_EXP = 1 << 1
    MRC_CTL_EV_MODE_GEN = 1 << 2


class MrcCtlEvState(enum.IntFlag):
    """``enum mrc_ctl_ev_state``."""
    MRC_CTL_EV_GOOD = 1 << 0
    MRC_CTL_EV_ASSUMED_BAD = 1 << 1
    MRC_CTL_EV_DENIED = 1 << 2
    MRC_CTL_EV_UNKNOWN = 1 << 31


_STATE_OF_HW = {HwEvState.GOOD: MrcCtlEvState.MRC_CTL_EV_GOOD,
                HwEvState.ASSUMED_BAD: MrcCtlEvState.MRC_CTL_EV_ASSUMED_BAD,
                HwEvState.DENIED: MrcCtlEvState.MRC_CTL_EV_DENIED}
_HW_OF_STATE = {v: k for k, v in _STATE_OF_HW.items()}


class MrcCtlEvOp(enum.IntEnum):
    """``enum mrc_ctl_ev_op``."""
    MRC_CTL_EV_OP_REPLACE_EV = 0
    MRC_CTL_EV_OP_MODIFY_EV_STATE = 1
    MRC_CTL_EV_OP_QUERY_EV_STATE = 2
    MRC_CTL_EV_OP_QUERY_EV_ARRAY = 3


class MrcCtlEvFieldsOp(enum.IntEnum):
    """``enum mrc_ctl_ev_fields_op``."""
    MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS = 0
    MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS = 1


class MrcCtlEvFmtOp(enum.IntEnum):
    """``enum mrc_ctl_ev_fmt_op``."""
    MRC_CTL_EV_FMT_OP_MODIFY_FIELDS = 0
    MRC_CTL_EV_FMT_OP_QUERY_FIELDS = 1


class MrcCtlEvFmtProfileAttrMask(enum.IntFlag):
    """``enum mrc_ctl_ev_fmt_profile_attr_mask``."""
    MRC_CTL_EV_FMT_PROFILE_STATE = 1 << 0
    MRC_CTL_EV_FMT_PROFILE_CUR_STATE = 1 << 1
    MRC_CTL_EV_FMT_PROFILE_MODE = 1 << 2
    MRC_CTL_EV_FMT_PROFILE_OP = 1 << 3
    MRC_CTL_EV_FMT_VENDOR_CFG = 1 << 31


class MrcCtlEvProfileAttrMask(enum.IntFlag):
    """``enum mrc_ctl_ev_profile_attr_mask``."""
    MRC_CTL_EV_PROFILE_STATE = 1 << 0
    MRC_CTL_EV_PROFILE_CUR_STATE = 1 << 1
    MRC_CTL_EV_PROFILE_MODE = 1 << 2
    MRC_CTL_EV_PROFILE_FMT_ID = 1 << 3
    MRC_CTL_EV_PROFILE_COUNT = 1 << 4
    MRC_CTL_EV_PROFILE_MIN_ACTIVE = 1 << 5
    MRC_CTL_EV_PROFILE_EVENT_MASK = 1 << 6
    MRC_CTL_EV_PROFILE_EV_OP = 1 << 7
    MRC_CTL_EV_PROFILE_EV_FIELDS_OP = 1 << 8
    MRC_CTL_EV_PROFILE_VENDOR_CFG = 1 << 31


class MrcCtlCcProfileAttrMask(enum.IntFlag):
    """``enum mrc_ctl_cc_profile_attr_mask``."""
    MRC_CTL_CC_PROFILE_STATE = 1 << 0
    MRC_CTL_CC_PROFILE_CUR_STATE = 1 << 1
    MRC_CTL_CC_PROFILE_ALGORITHM = 1 << 2
    MRC_CTL_CC_PROFILE_CONFIG = 1 << 3
    MRC_CTL_CC_PROFILE_VENDOR_CFG = 1 << 31


class MrcCtlPortAttrMask(enum.IntFlag):
    """``enum mrc_ctl_port_attr_mask``."""
    MRC_CTL_PORT_ADMIN_STATE = 1 << 0


class MrcCtlPortAdminState(enum.IntEnum):
    """``enum mrc_ctl_port_admin_state``."""
    MRC_CTL_PORT_ADMIN_DISABLED = 0
    MRC_CTL_PORT_ADMIN_ENABLED = 1


class MrcCtlEpOpType(enum.IntEnum):
    """``enum mrc_ctl_ep_op_type``."""
    MRC_CTL_EP_OP_EV_PROBE = 0
    MRC_CTL_EP_OP_PORT_STATUS_UPDATE = 1


#: ``enum mrc_ctl_ev_op_flags``: REPLACE_EV replaces every occurrence.
MRC_CTL_EV_OP_F_ALL_COPIES = 1 << 0

EPM = MrcCtlEvProfileAttrMask
FPM = MrcCtlEvFmtProfileAttrMask
CPM = MrcCtlCcProfileAttrMask


# --------------------------------------------------------------------------
# Attribute structures (mrc_ctl.h field names)
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class MrcCtlEv:
    """``struct mrc_ctl_ev``: ``val`` the 32-bit wire EV, ``port`` 1-based.  ``usids``:
    mrcnic's extension for SRV6 entries (the path; None = unchanged / not given)."""
    val: int = 0
    port: int = 0
    usids: tuple | None = None

    def key(self):
        return (self.val, self.port)


#: ``MRC_CTL_EV_UNPOPULATED``.
MRC_CTL_EV_UNPOPULATED = MrcCtlEv(0, 0)


@dataclass
class MrcCtlEvFmtField:
    """``struct mrc_ctl_ev_fmt_field``."""
    width: int = 0


@dataclass
class MrcCtlEvField:
    """``struct mrc_ctl_ev_field``."""
    width: int = 0
    init_val: int = 0
    min_val: int = 0
    max_val: int = 0
    mask: int = 0


@dataclass
class MrcCtlEvOpEntry:
    """``struct mrc_ctl_ev_op_entry``, plus two mrcnic extensions.

    ``index`` (None = the header's behaviour): the path-table entry the operation applies
    to, i.e. one copy of ``ev`` (the entry must be in the profile; ``ev`` must be the
    entry's, or ``MRC_CTL_EV_UNPOPULATED`` for whatever the entry holds, which a query then
    fills in).  ``weight``: the entry's weight (decisions per scheduling round, 0 = none),
    filled in by QUERY_EV_STATE / QUERY_EV_ARRAY and set by
    :meth:`MrcCtlContext.mrc_ctl_modify_ev_weight`.
    """
    ev: MrcCtlEv = MRC_CTL_EV_UNPOPULATED
    ev_new: MrcCtlEv = MRC_CTL_EV_UNPOPULATED
    state: MrcCtlEvState = MrcCtlEvState.MRC_CTL_EV_UNKNOWN
    flags: int = 0
    index: int | None = None
    weight: int | None = None


@dataclass
class MrcCtlDeviceEvAttr:
    """``mrc_ctl_device_attr.ev``."""
    ev_max_fmt_profiles: int = 0
    ev_max_profiles: int = 0
    ev_max_count: int = 0
    ev_free_count: int = 0
    ev_max_count_profile: int = 0
    ev_count_align: int = 0
    ev_max_width: int = 0
    ev_fmt_mode_mask: int = 0
    ev_mode_mask: int = 0
    ev_op_max_entries: int = 0


@dataclass
class MrcCtlDeviceCcAttr:
    """``mrc_ctl_device_attr.cc``."""
    cc_max_profiles: int = 0
    algorithms: list = field(default_factory=list)


@dataclass
class MrcCtlDeviceAttr:
    """``struct mrc_ctl_device_attr``."""
    mrc_ctl_protocol_version: int = 0
    ev: MrcCtlDeviceEvAttr = field(default_factory=MrcCtlDeviceEvAttr)
    cc: MrcCtlDeviceCcAttr = field(default_factory=MrcCtlDeviceCcAttr)
    phy_port_mask: int = 0
    opt_attr: int = 0


@dataclass
class MrcCtlPortAttr:
    """``struct mrc_ctl_port_attr``."""
    port_admin_state: MrcCtlPortAdminState = MrcCtlPortAdminState.MRC_CTL_PORT_ADMIN_DISABLED


@dataclass
class MrcCtlEvFmtOpArgs:
    """``mrc_ctl_ev_fmt_profile_attr.ev_fmt_op``."""
    op: MrcCtlEvFmtOp = MrcCtlEvFmtOp.MRC_CTL_EV_FMT_OP_QUERY_FIELDS
    fmt_fields: list = field(default_factory=list)
    fmt_field_count: int = 0


@dataclass
class MrcCtlEvFmtProfileAttr:
    """``struct mrc_ctl_ev_fmt_profile_attr``."""
    profile_state: MrcCtlProfileState = INIT
    cur_profile_state: MrcCtlProfileState = INIT
    ev_fmt_mode: MrcCtlEvFmtMode = MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_SRV6
    ev_fmt_op: MrcCtlEvFmtOpArgs = field(default_factory=MrcCtlEvFmtOpArgs)


@dataclass
class MrcCtlEvOpArgs:
    """``mrc_ctl_ev_profile_attr.ev_op``."""
    op: MrcCtlEvOp = MrcCtlEvOp.MRC_CTL_EV_OP_QUERY_EV_ARRAY
    entries: list = field(default_factory=list)
    entry_count: int = 0


@dataclass
class MrcCtlEvFieldsOpArgs:
    """``mrc_ctl_ev_profile_attr.ev_fields_op``."""
    op: MrcCtlEvFieldsOp = MrcCtlEvFieldsOp.MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS
    fields: list = field(default_factory=list)
    field_count: int = 0


@dataclass
class MrcCtlEvProfileAttr:
    """``struct mrc_ctl_ev_profile_attr``."""
    profile_state: MrcCtlProfileState = INIT
    cur_profile_state: MrcCtlProfileState = INIT
    ev_mode: MrcCtlEvMode = MrcCtlEvMode.MRC_CTL_EV_MODE_EXP
    ev_fmt_profile_id: int = 0
    ev_count: int = 0
    ev_min_active: int = 0
    ev_event_mask: int = 0
    ev_op: MrcCtlEvOpArgs = field(default_factory=MrcCtlEvOpArgs)
    ev_fields_op: MrcCtlEvFieldsOpArgs = field(default_factory=MrcCtlEvFieldsOpArgs)


@dataclass
class MrcCtlCcNsccCfg:
    """``struct mrc_ctl_cc_nscc_cfg`` (units of the header: bytes, ns).  mrcnic's NSCC
    uses base_rtt, target_delay, max_cwnd, eta, fi x fi_scale, max_md_jump and
    disable_qa; the others are kept (queried back) but the hardware has no use for them."""
    disable_qa: int = 0
    adjust_bytes_threshold: int = 32_768
    adjust_period_threshold: int = 10_000
    base_rtt: int = 10_000
    eta: float = 0.15
    fi: float = 5.0
    fi_scale: float = 0.25
    gamma: float = 0.8
    max_md_jump: float = 0.5
    max_cwnd: int = 262_144
    qa_gate: int = 3
    qa_threshold: int = 20_000
    target_delay: int = 5_000


@dataclass
class MrcCtlCcProfileAttr:
    """``struct mrc_ctl_cc_profile_attr``."""
    profile_state: MrcCtlProfileState = INIT
    cur_profile_state: MrcCtlProfileState = INIT
    algorithm: str | None = None
    cc_config: MrcCtlCcNsccCfg | None = None


@dataclass
class MrcCtlEvEvent:
    """``struct mrc_ctl_ev_event`` (1.0.1, with ``state``); ``index`` (the path-table
    entry, i.e. which copy) and ``reason`` (``EvEventReason``) are mrcnic's additions."""
    profile_id: int
    ev: MrcCtlEv
    drop_count: int
    state: MrcCtlEvState
    index: int | None = None
    reason: object = None


@dataclass
class MrcCtlEpReq:
    """``struct mrc_ctl_ep_req`` (EV probe): GIDs as IPv6 address strings or ints.
    ``index`` (mrcnic's extension, None = the first entry holding ``req_ev``): the
    path-table entry to probe, i.e. which copy of ``req_ev``."""
    req_id: int
    sgid: object = None
    dgid: object = None
    ev_fmt_mode: MrcCtlEvFmtMode = MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_SRV6
    req_ev: MrcCtlEv = MRC_CTL_EV_UNPOPULATED
    index: int | None = None


@dataclass
class MrcCtlEpRsp:
    """``struct mrc_ctl_ep_rsp``: ``rtt`` in ns, ``port`` 1-based."""
    req_id: int
    port: int
    rtt: int
    adj_svc_time: int = 0


@dataclass
class MrcCtlEvCounters:
    """mrcnic's extension: the per-EV counters of the NIC (``evcnt`` table, 32-bit, wrapping):
    data packets sent on the EV (new and retransmitted), clean ACKs, ECN echoes, trim
    NACKs, ACK timeouts and probes sent (:meth:`MrcCtlContext.mrc_ctl_query_ev_counters`)."""
    packets: int = 0
    clean_acks: int = 0
    ecn_echoes: int = 0
    trims: int = 0
    timeouts: int = 0
    probes: int = 0


# --------------------------------------------------------------------------
# Firmware-side objects
# --------------------------------------------------------------------------
@dataclass
class _Entry:
    ev: int
    port: int                 # 0-based hardware port
    state: HwEvState
    weight: int
    n_carriers: int = 1
    seg_base: int = 0
    da: int = 0

    def record(self, state=None):
        return dict(ev=self.ev, port=self.port, state=(state or self.state).value,
                    weight=self.weight, n_carriers=self.n_carriers, seg_base=self.seg_base,
                    da=self.da)


_UNREAD = object()


class _LazyEntries:
    """The entries of an adopted profile: each path-table entry is read when first needed
    (``read(index)`` -> :class:`_Entry`), so one entry's operation reads one entry."""

    def __init__(self, read: Callable, base: int, count: int):
        self._read, self._base = read, base
        self._items = [_UNREAD] * count

    def __len__(self):
        return len(self._items)

    def __getitem__(self, i):
        if self._items[i] is _UNREAD:
            self._items[i] = self._read(self._base + range(len(self._items))[i])
        return self._items[i]

    def __setitem__(self, i, value):
        self._items[i] = value

    def __iter__(self):
        return (self[i] for i in range(len(self._items)))

    def loaded(self, i) -> bool:
        return self._items[i] is not _UNREAD


@dataclass
class _EvProfile:
    state: MrcCtlProfileState = INIT
    ev_mode: MrcCtlEvMode | None = None
    fmt_id: int | None = None
    ev_count: int | None = None
    ev_min_active: int = 1
    ev_event_mask: int = int(MrcCtlEvState.MRC_CTL_EV_GOOD | MrcCtlEvState.MRC_CTL_EV_ASSUMED_BAD)
    fields: list | None = None
    base: int | None = None
    entries: list = field(default_factory=list)       # _Entry (None = unpopulated) / _LazyEntries

    @property
    def size(self) -> int:
        """Entries in the profile's range (without reading them)."""
        return len(self.entries)


@dataclass
class _FmtProfile:
    state: MrcCtlProfileState = INIT
    mode: MrcCtlEvFmtMode | None = None
    fmt_fields: list | None = None


@dataclass
class _CcProfile:
    state: MrcCtlProfileState = INIT
    algorithm: str | None = None
    cfg: MrcCtlCcNsccCfg | None = None
    qps: set = field(default_factory=set)


def _nscc_record(cfg: MrcCtlCcNsccCfg, min_cwnd: int = 4096) -> dict:
    """``cc`` table record (``NsccConfig``) of an NSCC configuration."""
    from ..config import CcProfile
    from ..rtl.nscc import nscc_config
    return nscc_config(CcProfile(
        base_rtt_ns=cfg.base_rtt, target_delay_ns=cfg.target_delay, max_cwnd_bytes=cfg.max_cwnd,
        min_cwnd_bytes=min(min_cwnd, cfg.max_cwnd), eta=cfg.eta, fi=cfg.fi, fi_scale=cfg.fi_scale,
        gamma=cfg.gamma, max_md_jump=cfg.max_md_jump, disable_qa=bool(cfg.disable_qa),
        qa_gate=cfg.qa_gate, qa_threshold_ns=cfg.qa_threshold,
        adjust_bytes_threshold=cfg.adjust_bytes_threshold,
        adjust_period_threshold_ns=cfg.adjust_period_threshold))


def _nscc_from_record(rec: dict) -> MrcCtlCcNsccCfg:
    """Best reading of an NSCC configuration from a ``cc`` record (fi_scale taken as 0.25)."""
    return MrcCtlCcNsccCfg(disable_qa=int(not rec["qa_enable"]), base_rtt=rec["base_rtt_ns"],
                           target_delay=rec["target_delay_ns"], max_cwnd=rec["max_cwnd"],
                           eta=rec["eta_q8"] / 256, max_md_jump=rec["md_q8"] / 256,
                           fi=rec["fi_bytes"] / 1024 / 0.25, fi_scale=0.25)


# --------------------------------------------------------------------------
# The context
# --------------------------------------------------------------------------
class MrcCtlContext:
    """An MRC controller context (``struct mrc_context`` of ``mrc_ctl.h``) on one NIC.

    Parameters
    ----------
    client : CsrClient
        The NIC's register client (UART, TCP to ``mrcnic sim --serve``, loopback).
    config : mrcnic.config.NicConfig, optional
        The configuration the NIC was provisioned from: its EV profiles and CC profiles
        are adopted under ids 1, 2, ... in the order of ``profile_ranges`` /
        ``cc_profiles``.  Without it the profiles are read from the QP contexts.
    lock : context manager, optional
        Held around every multi-access operation (table accesses share the indirect
        window: give the same lock to every controller of one NIC).
    """

    def __init__(self, client: CsrClient, config=None, lock=None, ident: dict | None = None):
        import contextlib
        self.client = client
        self.lock = lock or contextlib.nullcontext()
        self.config = config
        self.ev_profiles: dict[int, _EvProfile] = {}
        self.fmt_profiles: dict[int, _FmtProfile] = {}
        self.cc_profiles: dict[int, _CcProfile] = {}
        self.profile_names: dict[int, str] = {}
        self._qp_profile: dict[int, int] = {}        # QP -> EV profile id
        self._qp_mode: dict[int, int] = {}           # QP -> txqp.mode (0 SRV6, 1 STEV, 2 UDP)
        #: probe replies popped by :meth:`mrc_ctl_ep_batch_send_wait` that answered none of
        #: its requests (mrcnic's count; the header drops them silently)
        self.ep_stale_rsp = 0
        with self._bus():
            self.ident = ident if ident is not None else client.identity()
            self._adopt()

    # ---- helpers -----------------------------------------------------------------------
    def _bus(self):
        ctx = self

        class _Guard:
            def __enter__(self):
                ctx.lock.__enter__()

            def __exit__(self, et, ev, tb):
                ctx.lock.__exit__(et, ev, tb)
                if isinstance(ev, TransportError):
                    raise MrcCtlError(_errno.EIO, f"register access failed: {ev}") from ev
                return False
        return _Guard()

    @property
    def n_ports(self) -> int:
        return self.ident["ID_PORTS"]

    @property
    def depth(self) -> int:
        return self.ident["ID_PATH_DEPTH"]

    def _read_entry(self, index) -> _Entry:
        r = self.client.read_table("path", index)
        return _Entry(r["ev"], r["port"], HwEvState(r["state"]), r["weight"], r["n_carriers"],
                      r["seg_base"], r["da"])

    def _adopt(self):
        """The EV profiles (path-table ranges of the QPs) and CC entries found in the NIC."""
        nq = self.ident["ID_MAX_QPS"]
        ranges = {}
        for q in range(nq):
            ctx = self.client.read_table("txqp", q)
            self._qp_mode[q] = ctx["mode"]
            if ctx["profile_count"]:
                ranges.setdefault((ctx["profile_base"], ctx["profile_count"]), []).append(q)
        names = {}
        if self.config is not None:
            from ..config import compile_tables
            hw = compile_tables(self.config)
            names = {rng: n for n, rng in hw.profile_ranges.items()}
            cfg_fmt = {}
            for n, fp in self.config.ev_format_profiles.items():
                fid = len(self.fmt_profiles) + 1
                cfg_fmt[n] = fid
                self.fmt_profiles[fid] = _FmtProfile(ONLINE, _FMT_OF[fp.mode],
                                                     list(fp.fmt_fields) or [32 if fp.mode != "UDP"
                                                                             else 14])
        for pid, (rng, qps) in enumerate(sorted(ranges.items()), start=1):
            base, count = rng
            prof = _EvProfile(ONLINE, MrcCtlEvMode.MRC_CTL_EV_MODE_EXP, None, count, 1, base=base,
                              entries=_LazyEntries(self._read_entry, base, count))
            prof.ev_min_active = None           # read from rel[qps[0]] when first needed
            name = names.get(rng)
            if name is not None:
                cp = self.config.ev_profiles[name]
                prof.ev_mode = MrcCtlEvMode.MRC_CTL_EV_MODE_GEN if cp.type == "generated" \
                    else MrcCtlEvMode.MRC_CTL_EV_MODE_EXP
                prof.fmt_id = cfg_fmt.get(cp.format)
                if cp.fields:
                    prof.fields = [MrcCtlEvField(f.width, f.init_val, f.min_val, f.max_val, f.mask)
                                   for f in cp.fields]
                self.profile_names[pid] = name
            self.ev_profiles[pid] = prof
            for q in qps:
                self._qp_profile[q] = pid
        for q in range(nq):
            if q in self._qp_profile:         # its NSCC record is read when first needed
                self.cc_profiles[q + 1] = _CcProfile(ONLINE, NSCC_ALGORITHM, None, {q})

    def _min_active(self, pid, prof) -> int:
        if prof.ev_min_active is None:
            qps = self.qps_of(pid)
            prof.ev_min_active = self.client.read_table("rel", qps[0])["ev_min_active"] if qps else 1
        return prof.ev_min_active

    def _cc_cfg(self, cp) -> MrcCtlCcNsccCfg | None:
        if cp.cfg is None and cp.state is ONLINE and cp.qps:
            cp.cfg = _nscc_from_record(self.client.read_table("cc", min(cp.qps)))
        return cp.cfg

    def _profile(self, pid) -> _EvProfile:
        if pid not in self.ev_profiles:
            _fail(_errno.ENOENT, f"EV profile {pid} does not exist")
        return self.ev_profiles[pid]

    def profile_of_index(self, index: int):
        """(profile id, position) of path-table entry ``index``; (None, None) if none."""
        for pid, p in self.ev_profiles.items():
            if p.base is not None and p.base <= index < p.base + p.size:
                return pid, index - p.base
        return None, None

    def qps_of(self, pid) -> list:
        """QPs (0-based) whose EV profile is ``pid``."""
        return sorted(q for q, p in self._qp_profile.items() if p == pid)

    def _hw_port(self, port: int) -> int:
        if not 1 <= port <= self.n_ports:
            _fail(_errno.EINVAL, f"port {port} does not exist (ports 1..{self.n_ports}, 1-based)")
        return port - 1

    def _matches(self, prof: _EvProfile, ev: MrcCtlEv) -> list:
        hw = (ev.val, ev.port - 1)
        return [i for i, e in enumerate(prof.entries) if e is not None and (e.ev, e.port) == hw]

    def _select(self, prof: _EvProfile, ent: MrcCtlEvOpEntry) -> list:
        """Positions in ``prof`` an EV operation entry names: the one path-table entry
        ``ent.index`` (mrcnic's extension), else every copy of ``ent.ev``; ENOENT if none."""
        if ent.index is None:
            idx = self._matches(prof, ent.ev)
            if not idx:
                _fail(_errno.ENOENT, f"EV {ent.ev.val:#x} port {ent.ev.port} is not in the profile")
            return idx
        if prof.base is None or not prof.base <= ent.index < prof.base + prof.size:
            _fail(_errno.ENOENT, f"path-table entry {ent.index} is not in the profile")
        pos = ent.index - prof.base
        if ent.ev.key() != MRC_CTL_EV_UNPOPULATED.key():
            e = prof.entries[pos]
            if e is None or (e.ev, e.port) != (ent.ev.val, ent.ev.port - 1):
                _fail(_errno.ENOENT, f"path-table entry {ent.index} does not hold EV "
                                     f"{ent.ev.val:#x} port {ent.ev.port}")
        return [pos]

    def _live(self, prof: _EvProfile, pos: int):
        """Entry ``pos`` of ``prof`` with, for an ONLINE profile, the NIC's state and weight
        (one path-table read; an entry read for the first time is read once)."""
        ents = prof.entries
        if prof.state is not ONLINE or (isinstance(ents, _LazyEntries) and not ents.loaded(pos)):
            return ents[pos]
        e = ents[pos]
        if e is not None:
            r = self.client.read_table("path", prof.base + pos)
            e.state, e.weight = HwEvState(r["state"]), r["weight"]
        return e

    def _qp_fmt(self, q: int) -> str:
        """EV format of QP ``q`` (its ``txqp.mode``, read at adoption or once here)."""
        if q not in self._qp_mode:
            self._qp_mode[q] = self.client.read_table("txqp", q)["mode"]
        return ("SRV6", "STEV", "UDP")[self._qp_mode[q]]

    def ev_fmt_mode_of(self, ev_profile_id: int) -> MrcCtlEvFmtMode | None:
        """The EV format (``MrcCtlEvFmtMode``) of EV profile ``ev_profile_id``: its EV Format
        profile's mode, else the mode of the first QP using it; None if it has neither
        (mrcnic helper for building ``MrcCtlEpReq``; ENOENT for an unknown profile)."""
        prof = self._profile(ev_profile_id)
        with self._bus():
            name = self._mode_of(prof, ev_profile_id)
        return None if name is None else _FMT_OF[name]

    # ---- device / ports ----------------------------------------------------------------
    def mrc_ctl_query_device(self) -> MrcCtlDeviceAttr:
        """``mrc_ctl_query_device``: the NIC's MRC controller limits and features."""
        with self._bus():
            modes = self.client.read_fields("ID_EV_MODES")
        fmt_mask = (MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_SRV6 if modes["srv6"] else 0) \
            | (MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_STEV if modes["stev"] else 0) \
            | (MrcCtlEvFmtMode.MRC_CTL_EV_FMT_MODE_UDP if modes["udp"] else 0)
        used = sum(p.size for p in self.ev_profiles.values() if p.base is not None)
        O = MrcCtlAttrOpt
        return MrcCtlDeviceAttr(
            mrc_ctl_protocol_version=1,
            ev=MrcCtlDeviceEvAttr(
                ev_max_fmt_profiles=16, ev_max_profiles=self.ident["ID_MAX_QPS"],
                ev_max_count=self.depth, ev_free_count=self.depth - used,
                ev_max_count_profile=min(256, self.depth), ev_count_align=1, ev_max_width=32,
                ev_fmt_mode_mask=int(fmt_mask),
                ev_mode_mask=int(MrcCtlEvMode.MRC_CTL_EV_MODE_EXP | MrcCtlEvMode.MRC_CTL_EV_MODE_GEN),
                ev_op_max_entries=0),
            cc=MrcCtlDeviceCcAttr(cc_max_profiles=self.ident["ID_MAX_QPS"],
                                  algorithms=[NSCC_ALGORITHM]),
            phy_port_mask=((1 << self.n_ports) - 1) << 1,
            opt_attr=int(O.MRC_CTL_OPT_CAP_EV_EVENT | O.MRC_CTL_OPT_CAP_EP_OP_EV_PROBE
                         | O.MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE))

    def mrc_ctl_query_port(self, port_num: int, attr_mask: int = 1) -> MrcCtlPortAttr:
        """``mrc_ctl_query_port`` (``port_num`` 1-based)."""
        p = self._hw_port(port_num)
        if attr_mask & ~MrcCtlPortAttrMask.MRC_CTL_PORT_ADMIN_STATE:
            _fail(_errno.EINVAL, f"unknown port attribute bits {attr_mask:#x}")
        with self._bus():
            up = self.client.read_field("PORT_ADMIN", "up") >> p & 1
        return MrcCtlPortAttr(MrcCtlPortAdminState(up))

    def mrc_ctl_modify_port(self, port_num: int, attr: MrcCtlPortAttr, attr_mask: int = 1) -> None:
        """``mrc_ctl_modify_port``: the administrative state of a plane."""
        p = self._hw_port(port_num)
        if attr_mask & ~MrcCtlPortAttrMask.MRC_CTL_PORT_ADMIN_STATE:
            _fail(_errno.EINVAL, f"unknown port attribute bits {attr_mask:#x}")
        if not attr_mask:
            return
        if attr.port_admin_state not in tuple(MrcCtlPortAdminState):
            _fail(_errno.EINVAL, f"port_admin_state {attr.port_admin_state!r}")
        with self._bus():
            up = self.client.read_field("PORT_ADMIN", "up")
            up = up | 1 << p if attr.port_admin_state else up & ~(1 << p)
            self.client.write_field("PORT_ADMIN", "up", up)

    # ---- EV Format profiles -------------------------------------------------------------
    def mrc_ctl_modify_ev_fmt_profile(self, ev_fmt_profile_id: int, attr: MrcCtlEvFmtProfileAttr,
                                      attr_mask: int) -> None:
        """``mrc_ctl_modify_ev_fmt_profile``: INIT -> OFFLINE (MODE) -> ONLINE (MODIFY_FIELDS)."""
        fp = self.fmt_profiles.setdefault(ev_fmt_profile_id, _FmtProfile())
        if attr_mask & FPM.MRC_CTL_EV_FMT_VENDOR_CFG:
            _fail(_errno.EINVAL, "mrcnic has no vendor configuration")
        new_mode = fp.mode
        if attr_mask & FPM.MRC_CTL_EV_FMT_PROFILE_MODE:
            if fp.state is ONLINE:
                _fail(_errno.EINVAL, "MODE cannot change in ONLINE")
            try:
                new_mode = MrcCtlEvFmtMode(attr.ev_fmt_mode)
            except ValueError:
                new_mode = None
            if new_mode not in _FMT_NAME:
                _fail(_errno.EINVAL, f"ev_fmt_mode {attr.ev_fmt_mode!r} is not one mode")
        widths = fp.fmt_fields
        if attr_mask & FPM.MRC_CTL_EV_FMT_PROFILE_OP:
            op = attr.ev_fmt_op
            if op.op == MrcCtlEvFmtOp.MRC_CTL_EV_FMT_OP_MODIFY_FIELDS:
                if fp.state is ONLINE:
                    _fail(_errno.EINVAL, "MODIFY_FIELDS is not allowed in ONLINE")
                fields = op.fmt_fields[:op.fmt_field_count or len(op.fmt_fields)]
                widths = [f.width if isinstance(f, MrcCtlEvFmtField) else int(f) for f in fields]
                if not widths or any(w <= 0 for w in widths):
                    _fail(_errno.EINVAL, "format fields need widths >= 1")
                from ..config import FMT_MAX_BITS
                if new_mode is not None and sum(widths) > FMT_MAX_BITS[_FMT_NAME[new_mode]]:
                    _fail(_errno.E2BIG, f"{sum(widths)} bits of format fields, a "
                                        f"{_FMT_NAME[new_mode]} EV holds "
                                        f"{FMT_MAX_BITS[_FMT_NAME[new_mode]]}")
            else:
                op.fmt_fields = [MrcCtlEvFmtField(w) for w in (fp.fmt_fields or [])]
                op.fmt_field_count = len(op.fmt_fields)
        if attr_mask & FPM.MRC_CTL_EV_FMT_PROFILE_STATE:
            to = MrcCtlProfileState(attr.profile_state)
            if to is OFFLINE and fp.state is INIT and new_mode is None:
                _fail(_errno.EINVAL, "to OFFLINE requires MODE")
            if to is ONLINE:
                if fp.state is not OFFLINE and fp.state is not ONLINE:
                    _fail(_errno.EINVAL, f"{fp.state.name} -> ONLINE is not a transition")
                if not widths:
                    _fail(_errno.EINVAL, "to ONLINE requires MODIFY_FIELDS")
            if to is INIT and fp.state is ONLINE:
                _fail(_errno.EINVAL, "ONLINE -> INIT: go through OFFLINE")
            if to is not ONLINE and fp.state is ONLINE and any(
                    p.fmt_id == ev_fmt_profile_id and p.state is ONLINE
                    for p in self.ev_profiles.values()):
                _fail(_errno.EBUSY, "an ONLINE EV profile uses this EV Format profile")
            fp.state = to
        fp.mode, fp.fmt_fields = new_mode, widths

    def mrc_ctl_query_ev_fmt_profile(self, ev_fmt_profile_id: int, attr: MrcCtlEvFmtProfileAttr,
                                     attr_mask: int) -> MrcCtlEvFmtProfileAttr:
        """``mrc_ctl_query_ev_fmt_profile`` (QUERY_FIELDS: E2BIG with the count needed)."""
        fp = self.fmt_profiles.get(ev_fmt_profile_id)
        if fp is None:
            _fail(_errno.EINVAL, f"EV Format profile {ev_fmt_profile_id} does not exist")
        if attr_mask & (FPM.MRC_CTL_EV_FMT_PROFILE_STATE | FPM.MRC_CTL_EV_FMT_PROFILE_CUR_STATE):
            attr.profile_state = attr.cur_profile_state = fp.state
        if attr_mask & FPM.MRC_CTL_EV_FMT_PROFILE_MODE and fp.mode is not None:
            attr.ev_fmt_mode = fp.mode
        if attr_mask & FPM.MRC_CTL_EV_FMT_PROFILE_OP:
            op = attr.ev_fmt_op
            if op.op != MrcCtlEvFmtOp.MRC_CTL_EV_FMT_OP_QUERY_FIELDS:
                _fail(_errno.EINVAL, "only QUERY_FIELDS in a query")
            n = len(fp.fmt_fields or [])
            if op.fmt_field_count < n:
                op.fmt_field_count = n
                _fail(_errno.E2BIG, f"{n} format fields", required=n)
            op.fmt_fields = [MrcCtlEvFmtField(w) for w in fp.fmt_fields or []]
            op.fmt_field_count = n
        return attr

    # ---- EV profiles -------------------------------------------------------------------
    def _free_range(self, count: int) -> int:
        used = sorted((p.base, p.base + p.size) for p in self.ev_profiles.values()
                      if p.base is not None)
        start = 0
        for lo, hi in used:
            if lo - start >= count:
                return start
            start = max(start, hi)
        if self.depth - start >= count:
            return start
        _fail(_errno.E2BIG, f"no {count} free contiguous path-table entries "
                            f"(path table {self.depth})")

    def _generate(self, prof: _EvProfile) -> list:
        """The entries of a generated profile (mrc_ctl.h expansion, mrcnic.config rules)."""
        from ..config import ConfigError, EvFormatProfile, _fields, _Reader, expand_ev
        import itertools
        fp = self.fmt_profiles.get(prof.fmt_id)
        if fp is None or fp.state is not ONLINE:
            _fail(_errno.EINVAL, f"EV Format profile {prof.fmt_id} is not ONLINE")
        mode = _FMT_NAME[fp.mode]
        fmt = EvFormatProfile(f"id{prof.fmt_id}", mode, list(fp.fmt_fields or []))
        items = [dict(width=f.width, init_val=f.init_val, min_val=f.min_val, max_val=f.max_val,
                      mask=f.mask) for f in prof.fields or []]
        try:
            fields = _fields(_Reader("mrc_ctl"), {"fields": items}, "ev_fields", fmt)
        except ConfigError as e:
            # the array against the EV Format (field count, total width): E2BIG; a field: EINVAL
            code = _errno.E2BIG if "fmt_field" in e.reason else _errno.EINVAL
            _fail(code, f"{e.key}: {e.reason}")
        up = [p for p in range(self.n_ports)]
        entries = []
        for n, combo in enumerate(itertools.islice(
                itertools.product(*(f.values() for f in fields)), prof.ev_count)):
            ev = expand_ev(fields, list(combo), fmt.fmt_fields or None)
            if mode == "SRV6":
                _fail(_errno.EINVAL, "generated SRV6 profiles through the API: use the "
                                     "configuration file (mrcnic needs the paths' uSIDs)")
            entries.append(_Entry(ev & 0xFFFFFFFF, up[n % len(up)], HwEvState.GOOD, 1))
        if len(entries) < prof.ev_count:
            _fail(_errno.EINVAL, f"the fields generate {len(entries)} EVs, ev_count is "
                                 f"{prof.ev_count}")
        return entries

    def _write_range(self, prof: _EvProfile, offline: bool):
        for i, e in enumerate(prof.entries):
            if e is None:
                rec = dict(ev=0, port=0, state=HwEvState.DENIED.value, weight=0, n_carriers=1,
                           seg_base=0, da=0)
            else:
                rec = e.record(HwEvState.DENIED if offline else None)
            self.client.write_table("path", prof.base + i, rec)

    def mrc_ctl_modify_ev_profile(self, ev_profile_id: int, attr: MrcCtlEvProfileAttr,
                                  attr_mask: int) -> None:
        """``mrc_ctl_modify_ev_profile``: INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT,
        attributes and EV operations (per-entry success: an error reports ``partial``)."""
        mask = EPM(attr_mask)
        if mask & EPM.MRC_CTL_EV_PROFILE_EV_OP and mask & EPM.MRC_CTL_EV_PROFILE_EV_FIELDS_OP:
            _fail(_errno.EINVAL, "EV_OP and EV_FIELDS_OP are mutually exclusive")
        if mask & EPM.MRC_CTL_EV_PROFILE_VENDOR_CFG:
            _fail(_errno.EINVAL, "mrcnic has no vendor configuration")
        prof = self.ev_profiles.get(ev_profile_id)
        if prof is None:
            prof = self.ev_profiles[ev_profile_id] = _EvProfile()
        st = prof.state
        to = MrcCtlProfileState(attr.profile_state) if mask & EPM.MRC_CTL_EV_PROFILE_STATE else st
        configuring = st is INIT or (st is OFFLINE)
        with self._bus():
            if mask & EPM.MRC_CTL_EV_PROFILE_MODE:
                if not configuring:
                    _fail(_errno.EINVAL, "MODE changes in INIT/OFFLINE only")
                if attr.ev_mode not in (MrcCtlEvMode.MRC_CTL_EV_MODE_EXP,
                                        MrcCtlEvMode.MRC_CTL_EV_MODE_GEN):
                    _fail(_errno.EINVAL, f"ev_mode {attr.ev_mode!r}: mrcnic supports EXP and GEN")
                if st is OFFLINE and attr.ev_mode != prof.ev_mode:
                    _fail(_errno.EINVAL, "the mode of an OFFLINE profile stays (INIT first)")
                prof.ev_mode = MrcCtlEvMode(attr.ev_mode)
            if mask & EPM.MRC_CTL_EV_PROFILE_FMT_ID:
                if not configuring:
                    _fail(_errno.EINVAL, "FMT_ID changes in INIT/OFFLINE only")
                if attr.ev_fmt_profile_id not in self.fmt_profiles:
                    _fail(_errno.EINVAL, f"EV Format profile {attr.ev_fmt_profile_id} does not exist")
                prof.fmt_id = attr.ev_fmt_profile_id
            if mask & EPM.MRC_CTL_EV_PROFILE_COUNT:
                if st is not INIT and attr.ev_count != prof.ev_count:
                    _fail(_errno.EINVAL, "COUNT is set on INIT -> OFFLINE (mrcnic allocates the "
                                         "path-table range then)")
                if not 1 <= attr.ev_count <= min(256, self.depth):
                    _fail(_errno.E2BIG if attr.ev_count > 0 else _errno.EINVAL,
                          f"ev_count {attr.ev_count} (1..{min(256, self.depth)})")
                prof.ev_count = attr.ev_count
            if mask & EPM.MRC_CTL_EV_PROFILE_MIN_ACTIVE:
                if st is ONLINE and to is ONLINE:
                    _fail(_errno.EINVAL, "MIN_ACTIVE changes in INIT/OFFLINE only")
                if prof.ev_count and not 1 <= attr.ev_min_active <= prof.ev_count:
                    _fail(_errno.EINVAL, f"ev_min_active {attr.ev_min_active} (1..ev_count)")
                prof.ev_min_active = attr.ev_min_active
            if mask & EPM.MRC_CTL_EV_PROFILE_EVENT_MASK:
                ok = MrcCtlEvState.MRC_CTL_EV_GOOD | MrcCtlEvState.MRC_CTL_EV_ASSUMED_BAD
                if attr.ev_event_mask & ~ok:
                    _fail(_errno.EINVAL, "only MRC_CTL_EV_GOOD and MRC_CTL_EV_ASSUMED_BAD events")
                if st is ONLINE and to is ONLINE:
                    _fail(_errno.EINVAL, "EVENT_MASK in ONLINE needs "
                                         "MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE (not supported)")
                prof.ev_event_mask = int(attr.ev_event_mask)
            if mask & EPM.MRC_CTL_EV_PROFILE_EV_FIELDS_OP:
                fo = attr.ev_fields_op
                if fo.op == MrcCtlEvFieldsOp.MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS:
                    if not configuring:
                        _fail(_errno.EINVAL, "MODIFY_FIELDS in INIT/OFFLINE only")
                    if st is OFFLINE and prof.base is not None:
                        prof.fields = list(fo.fields[:fo.field_count or len(fo.fields)])
                        prof.entries = self._generate(prof)
                    else:
                        prof.fields = list(fo.fields[:fo.field_count or len(fo.fields)])
                else:
                    self._query_fields(prof, fo)
            # ---- state transition --------------------------------------------------------
            if to is not st:
                self._transition(ev_profile_id, prof, to)
            if mask & EPM.MRC_CTL_EV_PROFILE_EV_OP:
                self._ev_op(ev_profile_id, prof, attr.ev_op, modify=True)

    def _transition(self, pid, prof: _EvProfile, to):
        st = prof.state
        if (st, to) == (INIT, OFFLINE):
            if prof.ev_mode is None or prof.ev_count is None or prof.fmt_id is None:
                _fail(_errno.EINVAL, "to OFFLINE requires MODE, FMT_ID and COUNT")
            if prof.ev_mode == MrcCtlEvMode.MRC_CTL_EV_MODE_GEN:
                if not prof.fields:
                    _fail(_errno.EINVAL, "to OFFLINE requires MODIFY_FIELDS (generated mode)")
                entries = self._generate(prof)
            else:
                entries = [None] * prof.ev_count
            prof.base = self._free_range(prof.ev_count)
            prof.entries = entries
            self._write_range(prof, offline=True)
        elif (st, to) == (OFFLINE, ONLINE):
            if any(e is None for e in prof.entries):
                _fail(_errno.EINVAL, "explicit EVs still EV_UNPOPULATED: REPLACE_EV them first")
            self._write_range(prof, offline=False)
            for q in self.qps_of(pid):
                rel = self.client.read_table("rel", q)
                if rel["ev_min_active"] != self._min_active(pid, prof):
                    rel["ev_min_active"] = prof.ev_min_active
                    self.client.write_table("rel", q, rel)
        elif (st, to) == (ONLINE, OFFLINE):
            # keep the live states (the NIC's ASSUMED_BAD included), then deny every entry
            for i, e in enumerate(prof.entries):
                cur = self.client.read_table("path", prof.base + i)
                e.state = HwEvState(cur["state"])
                self.client.set_ev_state(prof.base + i, HwEvState.DENIED)
        elif (st, to) == (OFFLINE, INIT):
            if self.qps_of(pid):
                _fail(_errno.EBUSY, f"QPs {self.qps_of(pid)} use this EV profile")
            prof.entries = [None] * len(prof.entries)
            self._write_range(prof, offline=True)
            prof.base, prof.entries = None, []
        else:
            _fail(_errno.EINVAL, f"{st.name} -> {to.name} is not a transition "
                                 "(INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT)")
        prof.state = to

    def _query_fields(self, prof, fo):
        n = len(prof.fields or [])
        if fo.field_count < n:
            fo.field_count = n
            _fail(_errno.E2BIG, f"{n} fields", required=n)
        fo.fields = [MrcCtlEvField(f.width, f.init_val, f.min_val, f.max_val, f.mask)
                     for f in prof.fields or []]
        fo.field_count = n

    def _ev_op(self, pid, prof: _EvProfile, op: MrcCtlEvOpArgs, modify: bool):
        O = MrcCtlEvOp
        if prof.state is INIT:
            _fail(_errno.EINVAL, "EV operations need an OFFLINE or ONLINE profile")
        entries = op.entries[:op.entry_count] if op.entry_count else op.entries
        if op.op == O.MRC_CTL_EV_OP_QUERY_EV_ARRAY:
            n = len(prof.entries)
            if op.entry_count < n or len(op.entries) < n:
                if len(op.entries) < n:
                    op.entries.extend(MrcCtlEvOpEntry() for _ in range(n - len(op.entries)))
                if op.entry_count < n:
                    op.entry_count = n
                    _fail(_errno.E2BIG, f"the EV array holds {n} EVs", required=n)
            for i in range(n):
                e = self._live(prof, i)
                out = op.entries[i]
                out.index = None if prof.base is None else prof.base + i
                if e is None:
                    out.ev, out.state, out.weight = (MRC_CTL_EV_UNPOPULATED,
                                                     MrcCtlEvState.MRC_CTL_EV_UNKNOWN, None)
                    continue
                out.ev = MrcCtlEv(e.ev, e.port + 1)
                out.state, out.weight = _STATE_OF_HW[e.state], e.weight
            op.entry_count = n
            return
        if op.op == O.MRC_CTL_EV_OP_REPLACE_EV and not modify:
            _fail(_errno.EINVAL, "REPLACE_EV is not a query")
        if op.op == O.MRC_CTL_EV_OP_MODIFY_EV_STATE and not modify:
            _fail(_errno.EINVAL, "MODIFY_EV_STATE is not a query")
        for k, ent in enumerate(entries):
            try:
                self._ev_op_entry(prof, op.op, ent)
            except MrcCtlError as exc:
                exc.partial = k
                raise
            except TransportError as exc:
                raise MrcCtlError(_errno.EIO, f"register access failed: {exc}", partial=k) from exc

    def _ev_op_entry(self, prof: _EvProfile, op, ent: MrcCtlEvOpEntry):
        O = MrcCtlEvOp
        if op == O.MRC_CTL_EV_OP_REPLACE_EV:
            if prof.state is ONLINE:
                _fail(_errno.EINVAL, "REPLACE_EV on an ONLINE profile needs "
                                     "MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE: take it OFFLINE")
            new = ent.ev_new
            port = self._hw_port(new.port)
            if not 0 <= new.val < 1 << 32:
                _fail(_errno.EINVAL, f"EV {new.val:#x} is not a 32-bit value")
            if ent.index is not None:
                idx = self._select(prof, ent)
            elif ent.ev.key() == MRC_CTL_EV_UNPOPULATED.key():
                idx = [i for i, e in enumerate(prof.entries) if e is None]
            else:
                idx = self._matches(prof, ent.ev)
            if not idx:
                _fail(_errno.ENOENT, f"EV {ent.ev.val:#x} port {ent.ev.port} is not in the profile")
            if not ent.flags & MRC_CTL_EV_OP_F_ALL_COPIES:
                idx = idx[:1]
            state = _HW_OF_STATE.get(MrcCtlEvState(ent.state), HwEvState.GOOD) \
                if ent.state != MrcCtlEvState.MRC_CTL_EV_UNKNOWN else HwEvState.GOOD
            if state is HwEvState.ASSUMED_BAD:
                _fail(_errno.EINVAL, "ASSUMED_BAD is set by the NIC only")
            for i in idx:
                old = prof.entries[i]
                e = _Entry(new.val, port, state, old.weight if old else 1,
                           old.n_carriers if old else 1, old.seg_base if old else 0,
                           old.da if old else 0)
                if new.usids is not None:
                    self._set_path(e, new.usids)
                elif old is not None and old.port != port and self._mode_of(prof) == "SRV6":
                    _fail(_errno.EINVAL, "an SRV6 EV on another port needs its uSIDs (ev_new.usids)")
                elif old is None and self._mode_of(prof) == "SRV6":
                    _fail(_errno.EINVAL, "an SRV6 EV needs its uSIDs (ev_new.usids)")
                prof.entries[i] = e
                self.client.write_table("path", prof.base + i, e.record(HwEvState.DENIED))
            return
        if op not in (O.MRC_CTL_EV_OP_MODIFY_EV_STATE, O.MRC_CTL_EV_OP_QUERY_EV_STATE):
            _fail(_errno.EINVAL, f"EV operation {op!r}")
        idx = self._select(prof, ent)
        if op == O.MRC_CTL_EV_OP_MODIFY_EV_STATE:
            try:
                hw = _HW_OF_STATE[MrcCtlEvState(ent.state)]
            except (KeyError, ValueError):
                _fail(_errno.EINVAL, f"state {ent.state!r}")
            if hw is HwEvState.ASSUMED_BAD:
                _fail(_errno.EINVAL, "ASSUMED_BAD is set by the NIC only (GOOD or DENIED)")
            for i in idx:
                if prof.state is ONLINE:
                    self.client.set_ev_state(prof.base + i, hw)
                e = prof.entries[i]
                if e is None:
                    _fail(_errno.EINVAL, f"path-table entry {prof.base + i} is EV_UNPOPULATED")
                e.state = hw
        elif op == O.MRC_CTL_EV_OP_QUERY_EV_STATE:
            e = self._live(prof, idx[0])
            if e is None:
                ent.state, ent.weight = MrcCtlEvState.MRC_CTL_EV_UNKNOWN, None
                return
            if ent.ev.key() == MRC_CTL_EV_UNPOPULATED.key():
                ent.ev = MrcCtlEv(e.ev, e.port + 1)
            ent.state, ent.weight = _STATE_OF_HW[e.state], e.weight
        else:
            _fail(_errno.EINVAL, f"EV operation {op!r}")

    def _mode_of(self, prof, pid=None) -> str | None:
        fp = self.fmt_profiles.get(prof.fmt_id)
        if fp is not None and fp.mode is not None:
            return _FMT_NAME[fp.mode]
        if pid is None:
            pid = next((k for k, v in self.ev_profiles.items() if v is prof), None)
        for q in self.qps_of(pid):
            return self._qp_fmt(q)
        return None

    def _set_path(self, e: _Entry, usids):
        """DA (first carrier) of an SRV6 entry from its uSIDs (one carrier: up to 6 uSIDs)."""
        import ipaddress
        from .. import wire
        usids = list(usids)
        if not 1 <= len(usids) <= wire.USIDS_PER_CARRIER or not all(0 < u < 1 << 16 for u in usids):
            _fail(_errno.EINVAL, f"uSIDs {usids}: 1..{wire.USIDS_PER_CARRIER} non-zero 16-bit "
                                 "values (longer paths: the configuration file)")
        block = self.client.read("NIC_LOCATOR")
        e.da = int(ipaddress.IPv6Address(wire.path_carriers(block, usids)[0]))
        e.n_carriers, e.seg_base = 1, 0

    def mrc_ctl_query_ev_profile(self, ev_profile_id: int, attr: MrcCtlEvProfileAttr,
                                 attr_mask: int) -> MrcCtlEvProfileAttr:
        """``mrc_ctl_query_ev_profile``: attributes, QUERY_FIELDS, QUERY_EV_STATE,
        QUERY_EV_ARRAY (E2BIG with the size needed in ``entry_count``)."""
        mask = EPM(attr_mask)
        if mask & EPM.MRC_CTL_EV_PROFILE_EV_OP and mask & EPM.MRC_CTL_EV_PROFILE_EV_FIELDS_OP:
            _fail(_errno.EINVAL, "EV_OP and EV_FIELDS_OP are mutually exclusive")
        prof = self._profile(ev_profile_id)
        if mask & (EPM.MRC_CTL_EV_PROFILE_STATE | EPM.MRC_CTL_EV_PROFILE_CUR_STATE):
            attr.profile_state = attr.cur_profile_state = prof.state
        if mask & EPM.MRC_CTL_EV_PROFILE_MODE and prof.ev_mode is not None:
            attr.ev_mode = prof.ev_mode
        if mask & EPM.MRC_CTL_EV_PROFILE_FMT_ID:
            attr.ev_fmt_profile_id = prof.fmt_id or 0
        if mask & EPM.MRC_CTL_EV_PROFILE_COUNT:
            attr.ev_count = prof.size or (prof.ev_count or 0)
        if mask & EPM.MRC_CTL_EV_PROFILE_MIN_ACTIVE:
            with self._bus():
                attr.ev_min_active = self._min_active(ev_profile_id, prof)
        if mask & EPM.MRC_CTL_EV_PROFILE_EVENT_MASK:
            attr.ev_event_mask = prof.ev_event_mask
        with self._bus():
            if mask & EPM.MRC_CTL_EV_PROFILE_EV_FIELDS_OP:
                if attr.ev_fields_op.op != MrcCtlEvFieldsOp.MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS:
                    _fail(_errno.EINVAL, "only QUERY_FIELDS in a query")
                self._query_fields(prof, attr.ev_fields_op)
            if mask & EPM.MRC_CTL_EV_PROFILE_EV_OP:
                self._ev_op(ev_profile_id, prof, attr.ev_op, modify=False)
        return attr

    # ---- CC profiles -------------------------------------------------------------------
    def mrc_ctl_modify_cc_profile(self, cc_profile_id: int, attr: MrcCtlCcProfileAttr,
                                  attr_mask: int) -> None:
        """``mrc_ctl_modify_cc_profile``: INIT -> OFFLINE (ALGORITHM) -> ONLINE (CONFIG);
        CONFIG may change ONLINE (``MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE``): it is
        written into the ``cc`` entry of every QP attached."""
        mask = CPM(attr_mask)
        if mask & CPM.MRC_CTL_CC_PROFILE_VENDOR_CFG:
            _fail(_errno.EINVAL, "mrcnic has no vendor configuration")
        cp = self.cc_profiles.setdefault(cc_profile_id, _CcProfile())
        st = cp.state
        to = MrcCtlProfileState(attr.profile_state) if mask & CPM.MRC_CTL_CC_PROFILE_STATE else st
        if mask & CPM.MRC_CTL_CC_PROFILE_ALGORITHM:
            if st is ONLINE:
                _fail(_errno.EINVAL, "ALGORITHM cannot change ONLINE")
            if attr.algorithm != NSCC_ALGORITHM:
                _fail(_errno.EINVAL, f"algorithm {attr.algorithm!r}: mrcnic implements "
                                     f"{NSCC_ALGORITHM!r} only (CC cannot be disabled)")
            cp.algorithm = attr.algorithm
        with self._bus():
            cfg = self._cc_cfg(cp)
        if mask & CPM.MRC_CTL_CC_PROFILE_CONFIG:
            if not isinstance(attr.cc_config, MrcCtlCcNsccCfg):
                _fail(_errno.EINVAL, "cc_config must be an MrcCtlCcNsccCfg")
            try:
                from ..regmap import REGMAP
                from .client import pack_record
                pack_record(REGMAP.table("cc").layout, _nscc_record(attr.cc_config), "cc")
            except ValueError as e:
                _fail(_errno.EINVAL, str(e))
            cfg = attr.cc_config
        if to is not st:
            ok = {(INIT, OFFLINE), (OFFLINE, ONLINE), (ONLINE, OFFLINE), (OFFLINE, INIT)}
            if (st, to) not in ok:
                _fail(_errno.EINVAL, f"{st.name} -> {to.name} is not a transition")
            if to is OFFLINE and st is INIT and cp.algorithm is None:
                _fail(_errno.EINVAL, "to OFFLINE requires ALGORITHM")
            if to is ONLINE and cfg is None:
                _fail(_errno.EINVAL, "to ONLINE requires CONFIG")
            if st is ONLINE and cp.qps:
                _fail(_errno.EBUSY, f"QPs {sorted(cp.qps)} use this CC profile")
        cp.cfg, cp.state = cfg, to
        if cp.state is ONLINE and mask & CPM.MRC_CTL_CC_PROFILE_CONFIG:
            with self._bus():
                for q in sorted(cp.qps):
                    self.client.write_table("cc", q, _nscc_record(cfg))

    def mrc_ctl_query_cc_profile(self, cc_profile_id: int, attr: MrcCtlCcProfileAttr,
                                 attr_mask: int) -> MrcCtlCcProfileAttr:
        """``mrc_ctl_query_cc_profile``."""
        cp = self.cc_profiles.get(cc_profile_id)
        if cp is None:
            _fail(_errno.EINVAL, f"CC profile {cc_profile_id} does not exist")
        mask = CPM(attr_mask)
        if mask & (CPM.MRC_CTL_CC_PROFILE_STATE | CPM.MRC_CTL_CC_PROFILE_CUR_STATE):
            attr.profile_state = attr.cur_profile_state = cp.state
        if mask & CPM.MRC_CTL_CC_PROFILE_ALGORITHM:
            attr.algorithm = cp.algorithm
        if mask & CPM.MRC_CTL_CC_PROFILE_CONFIG:
            with self._bus():
                attr.cc_config = self._cc_cfg(cp)
        return attr

    def attach_qp(self, qp: int, ev_profile_id: int | None = None,
                  cc_profile_id: int | None = None) -> None:
        """Associate QP ``qp`` (0-based) with profiles: what ``mrc_modify_qp`` with
        ``MRC_EV_PROFILE_ID`` / ``MRC_CC_PROFILE_ID`` does (mrc.h); used by
        :class:`mrcnic.fw.mrc.MrcQp`.  The EV profile must be ONLINE, the CC one ONLINE."""
        with self._bus():
            if ev_profile_id is not None:
                prof = self._profile(ev_profile_id)
                if prof.state is not ONLINE:
                    _fail(_errno.EINVAL, f"EV profile {ev_profile_id} is not ONLINE")
                ctx = self.client.read_table("txqp", qp)
                self._qp_mode[qp] = ctx["mode"]
                rel = self.client.read_table("rel", qp)
                ctx.update(profile_base=prof.base, profile_count=prof.size)
                rel.update(profile_base=prof.base, profile_count=prof.size,
                           ev_min_active=self._min_active(ev_profile_id, prof))
                self.client.write_table("txqp", qp, ctx)
                self.client.write_table("rel", qp, rel)
                self._qp_profile[qp] = ev_profile_id
            if cc_profile_id is not None:
                cp = self.cc_profiles.get(cc_profile_id)
                if cp is None or cp.state is not ONLINE:
                    _fail(_errno.EINVAL, f"CC profile {cc_profile_id} is not ONLINE")
                for other in self.cc_profiles.values():
                    other.qps.discard(qp)
                cfg = self._cc_cfg(cp)
                cp.qps.add(qp)
                self.client.write_table("cc", qp, _nscc_record(cfg))

    # ---- EV weights and counters (mrcnic's extensions) ---------------------------------
    def mrc_ctl_modify_ev_weight(self, ev_profile_id: int, entries: list) -> None:
        """mrcnic's extension (``mrc_ctl.h`` has no weights): set the weight of EVs of a
        profile.  Each :class:`MrcCtlEvOpEntry` names an EV (``ev``: every copy, as
        MODIFY_EV_STATE) or one path-table entry (``index``) and carries its new ``weight``
        (decisions per scheduling round, 0 = none).  ONLINE: written to the NIC at once
        (``EV_WEIGHT_SET``; the state is not touched); OFFLINE: kept and written at ONLINE.
        Errors: ENOENT (no such profile, EV or entry), EINVAL (an INIT profile, a weight out
        of range), EIO; per-entry success: the error carries ``partial`` = entries done."""
        prof = self._profile(ev_profile_id)
        if prof.state is INIT:
            _fail(_errno.EINVAL, "EV weights need an OFFLINE or ONLINE profile")
        wmax = (1 << self.client.regmap["EV_WEIGHT_SET"].field("weight").width) - 1
        with self._bus():
            for k, ent in enumerate(entries):
                try:
                    w = ent.weight
                    if not isinstance(w, int) or isinstance(w, bool) or not 0 <= w <= wmax:
                        _fail(_errno.EINVAL, f"weight {w!r} (0..{wmax})")
                    for i in self._select(prof, ent):
                        if prof.entries[i] is None:
                            _fail(_errno.EINVAL, f"path-table entry {prof.base + i} is EV_UNPOPULATED")
                        if prof.state is ONLINE:
                            self.client.set_ev_weight(prof.base + i, w)
                        prof.entries[i].weight = w
                except MrcCtlError as exc:
                    exc.partial = k
                    raise
                except TransportError as exc:
                    raise MrcCtlError(_errno.EIO, f"register access failed: {exc}",
                                      partial=k) from exc

    def mrc_ctl_query_ev_counters(self, ev_profile_id: int, entries: list) -> list:
        """mrcnic's extension: the NIC's per-EV counters (``evcnt`` table), one
        :class:`MrcCtlEvCounters` per :class:`MrcCtlEvOpEntry` of ``entries``: the path-table
        entry ``index``, or the sum over every copy of ``ev`` (32-bit, wrapping).  Errors:
        ENOENT (no such profile, EV or entry), EINVAL (an INIT profile), EIO."""
        prof = self._profile(ev_profile_id)
        if prof.base is None:
            _fail(_errno.EINVAL, "an INIT profile has no EVs")
        names = list(MrcCtlEvCounters.__dataclass_fields__)
        out = []
        with self._bus():
            for ent in entries:
                tot = dict.fromkeys(names, 0)
                for i in self._select(prof, ent):
                    rec = self.client.read_table("evcnt", prof.base + i)
                    for n in names:
                        tot[n] = (tot[n] + rec[n]) & 0xFFFFFFFF
                out.append(MrcCtlEvCounters(**tot))
        return out

    # ---- EV events ---------------------------------------------------------------------
    def mrc_ctl_poll_ev_event(self, num_entries: int) -> list:
        """``mrc_ctl_poll_ev_event``: up to ``num_entries`` events from the NIC's queue, each
        ``MrcCtlEvEvent(profile_id, ev, drop_count=0, state)``; events whose state the
        profile's ``ev_event_mask`` does not monitor are consumed and not returned.  The EV
        of an event is the profile's (read once per entry, then known: one register read
        per event)."""
        if num_entries < 0:
            _fail(_errno.EINVAL, "num_entries < 0")
        out = []
        with self._bus():
            while len(out) < num_entries:
                ev = self.client.pop_event()
                if ev is None:
                    break
                pid, pos = self.profile_of_index(ev.index)
                prof = self.ev_profiles.get(pid)
                e = prof.entries[pos] if prof is not None else None
                if e is None:               # in no profile (or an unpopulated slot)
                    rec = self.client.read_table("path", ev.index)
                    val, port = rec["ev"], rec["port"]
                else:
                    val, port = e.ev, e.port
                state = _STATE_OF_HW[HwEvState(ev.state)]
                if prof is not None and state & ~MrcCtlEvState.MRC_CTL_EV_DENIED \
                        and not prof.ev_event_mask & state:
                    continue
                out.append(MrcCtlEvEvent(pid or 0, MrcCtlEv(val, port + 1), 0, state,
                                         ev.index, ev.reason))
        return out

    # ---- endpoint requests (EV probes) -------------------------------------------------
    def mrc_ctl_ep_batch_send_wait(self, req_tc: int, op_type: MrcCtlEpOpType, req: list,
                                   rsp_timeout: int, *, sleep: Callable = time.sleep,
                                   clock: Callable = time.monotonic,
                                   poll_s: float | None = None) -> list:
        """``mrc_ctl_ep_batch_send_wait`` for ``MRC_CTL_EP_OP_EV_PROBE``: probe each
        ``req[i].req_ev`` (found in an ONLINE EV profile used by a QP whose format matches
        ``ev_fmt_mode``; ``req[i].index``, mrcnic's extension, picks the copy) and return the
        responses in arrival order.  The NIC tracks one probe at a time, so the requests
        are sent one after the other, each waiting up to ``rsp_timeout`` ns of wall time for
        its response; stale replies (drained first, or answering no request) are dropped
        and counted in :attr:`ep_stale_rsp`.  ETIMEDOUT (``err.rsp`` = what arrived) when
        some are missing; ENOTSUP for other operations; EINVAL for an EV in no such profile
        or a ``req_tc`` other than 0 or the data DSCP (mrcnic sends probes with the NIC's
        DSCP).  ``sleep``, ``clock`` (seconds) and ``poll_s`` (seconds between polls,
        default min(0.01, rsp_timeout / 4)) are mrcnic's, for controllers with their own
        time source."""
        if op_type != MrcCtlEpOpType.MRC_CTL_EP_OP_EV_PROBE:
            _fail(_errno.ENOTSUP, f"{MrcCtlEpOpType(op_type).name} is not supported")
        if not rsp_timeout >= 0:
            _fail(_errno.EINVAL, f"rsp_timeout {rsp_timeout!r} < 0")
        ids = [r.req_id for r in req]
        if len(set(ids)) != len(ids):
            _fail(_errno.EINVAL, "req_id values must be unique")
        with self._bus():
            if req_tc:
                dscp = self.client.read_field("NIC_DSCP", "data")
                if req_tc != dscp:
                    _fail(_errno.EINVAL, f"req_tc {req_tc}: mrcnic probes use the data DSCP {dscp}")
            plan = []
            for r in req:
                want = _FMT_NAME.get(MrcCtlEvFmtMode(r.ev_fmt_mode))
                found = None
                for pid, prof in self.ev_profiles.items():
                    qps = self.qps_of(pid)
                    if prof.state is not ONLINE or not qps:
                        continue
                    if r.index is not None and not prof.base <= r.index < prof.base + prof.size:
                        continue
                    if want and self._qp_fmt(qps[0]) != want:
                        continue
                    if r.index is not None:
                        e = prof.entries[r.index - prof.base]
                        m = [r.index - prof.base] if e is not None and (
                            r.req_ev.key() == MRC_CTL_EV_UNPOPULATED.key()
                            or (e.ev, e.port) == (r.req_ev.val, r.req_ev.port - 1)) else []
                    else:
                        m = self._matches(prof, r.req_ev)
                    if m:
                        found = (prof.base + m[0], qps[0], prof.entries[m[0]].port + 1)
                        break
                if found is None:
                    where = "" if r.index is None else f" (entry {r.index})"
                    _fail(_errno.EINVAL, f"req {r.req_id}: EV {r.req_ev.val:#x} port {r.req_ev.port}"
                                         f"{where} is in no ONLINE profile of a QP", partial=len(plan))
                plan.append((r.req_id, *found))
            while self.client.pop_probe_reply() is not None:     # responses are not buffered
                self.ep_stale_rsp += 1
        poll = min(0.01, rsp_timeout / 4e9) if poll_s is None else poll_s
        out, missing = [], 0
        for rid, index, qp, port in plan:
            with self._bus():
                self.client.probe(index, qp)
            deadline = clock() + rsp_timeout / 1e9
            while True:
                with self._bus():
                    rep = self.client.pop_probe_reply()
                if rep is not None:
                    if rep.index == index:
                        out.append(MrcCtlEpRsp(rid, port, rep.rtt_ns, 0))
                        break
                    self.ep_stale_rsp += 1
                    continue
                now = clock()
                if now >= deadline:
                    missing += 1
                    break
                sleep(min(poll, deadline - now))
        if missing:
            _fail(_errno.ETIMEDOUT, f"{missing} of {len(plan)} probes unanswered", rsp=out)
        return out


def load_config_profiles(ctx: MrcCtlContext, cfg, names=None) -> dict:
    """Create the EV profiles ``names`` (all by default) of configuration ``cfg`` in the NIC
    through the controller API, as a controller would from the header's calls, and bring
    them ONLINE: an EV Format profile per format (``fmt_fields``), then the EV profile --
    ``MRC_CTL_EV_MODE_GEN`` with the configuration's fields when the NIC can generate it
    (STEV/UDP, no ``port_field``, one copy: the API spreads generated EVs round robin over
    the ports), otherwise ``MRC_CTL_EV_MODE_EXP`` with one REPLACE_EV per entry (SRV6 with
    the entry's uSIDs).  Returns ``{name: ev_profile_id}``; the profiles are not attached
    to any QP.  Raises MrcCtlError (E2BIG when the path table has no room)."""
    from ..config import EV_BITS
    F = MrcCtlEvFmtProfileAttrMask
    out, fmt_ids = {}, {}
    next_fmt = max(ctx.fmt_profiles, default=0) + 1
    next_id = max(ctx.ev_profiles, default=0) + 1
    for name in names or list(cfg.ev_profiles):
        prof = cfg.ev_profiles[name]
        fp = cfg.ev_format_profiles[prof.format]
        if prof.format not in fmt_ids:
            fid, next_fmt = next_fmt, next_fmt + 1
            widths = list(fp.fmt_fields) or [EV_BITS[fp.mode]]
            ctx.mrc_ctl_modify_ev_fmt_profile(fid, MrcCtlEvFmtProfileAttr(
                profile_state=OFFLINE, ev_fmt_mode=_FMT_OF[fp.mode],
                ev_fmt_op=MrcCtlEvFmtOpArgs(MrcCtlEvFmtOp.MRC_CTL_EV_FMT_OP_MODIFY_FIELDS,
                                            [MrcCtlEvFmtField(w) for w in widths])),
                F.MRC_CTL_EV_FMT_PROFILE_STATE | F.MRC_CTL_EV_FMT_PROFILE_MODE
                | F.MRC_CTL_EV_FMT_PROFILE_OP)
            ctx.mrc_ctl_modify_ev_fmt_profile(fid, MrcCtlEvFmtProfileAttr(profile_state=ONLINE),
                                              F.MRC_CTL_EV_FMT_PROFILE_STATE)
            fmt_ids[prof.format] = fid
        pid, next_id = next_id, next_id + 1
        n = len(prof.entries)
        weights = {e.weight for e in prof.entries}
        gen = (prof.type == "generated" and prof.mode != "SRV6" and prof.port_field is None
               and weights == {1} and all(e.state == "GOOD" for e in prof.entries)
               and len({(e.ev, e.port) for e in prof.entries}) == n)
        attr = MrcCtlEvProfileAttr(
            profile_state=OFFLINE, ev_fmt_profile_id=fmt_ids[prof.format], ev_count=n,
            ev_min_active=prof.ev_min_active,
            ev_mode=MrcCtlEvMode.MRC_CTL_EV_MODE_GEN if gen else MrcCtlEvMode.MRC_CTL_EV_MODE_EXP)
        mask = (EPM.MRC_CTL_EV_PROFILE_STATE | EPM.MRC_CTL_EV_PROFILE_MODE
                | EPM.MRC_CTL_EV_PROFILE_FMT_ID | EPM.MRC_CTL_EV_PROFILE_COUNT
                | EPM.MRC_CTL_EV_PROFILE_MIN_ACTIVE)
        if gen:
            attr.ev_fields_op = MrcCtlEvFieldsOpArgs(
                MrcCtlEvFieldsOp.MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS,
                [MrcCtlEvField(f.width, f.init_val, f.min_val, f.max_val, f.mask) for f in prof.fields])
            mask |= EPM.MRC_CTL_EV_PROFILE_EV_FIELDS_OP
        ctx.mrc_ctl_modify_ev_profile(pid, attr, mask)
        if not gen:
            ops = [MrcCtlEvOpEntry(MRC_CTL_EV_UNPOPULATED,
                                   MrcCtlEv(e.ev, e.port + 1, tuple(e.usids) if e.usids else None),
                                   MrcCtlEvState.MRC_CTL_EV_DENIED if e.state == "DENIED"
                                   else MrcCtlEvState.MRC_CTL_EV_GOOD)
                   for e in prof.entries]
            ctx.mrc_ctl_modify_ev_profile(pid, MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(
                MrcCtlEvOp.MRC_CTL_EV_OP_REPLACE_EV, ops)), EPM.MRC_CTL_EV_PROFILE_EV_OP)
            for i, e in enumerate(prof.entries):
                ctx.ev_profiles[pid].entries[i].weight = e.weight
        ctx.mrc_ctl_modify_ev_profile(pid, MrcCtlEvProfileAttr(profile_state=ONLINE),
                                      EPM.MRC_CTL_EV_PROFILE_STATE)
        ctx.profile_names[pid] = name
        out[name] = pid
    return out
