"""The OCP MRC 1.0 application API (``mrc.h``) in Python: QPs, RDMA Write work requests,
completions and the NIC's host memory, over the mrcnic register client.

``mrc.h`` is verbs-shaped (``mrc_post_send`` takes an ``ibv_send_wr``, ``mrc_poll_cq``
fills ``ibv_wc``); here the same calls take small dataclasses with the verbs field
names (:class:`IbvSendWr`, :class:`IbvWc`).  A failing call raises
:class:`~mrcnic.fw.mrc_ctl.MrcCtlError` with the errno ``mrc.h`` inherits from the
corresponding verbs call (EINVAL, ENOMEM, ENOTSUP, EIO).

On mrcnic the "host" is the board (docs/boards.md, "Board registers and host memory"):

* a work request is written into ``WR_DATA0..6`` (one ``WorkRequest``,
  ``rtl/layouts.py``) and handed to the NIC by ``WR_POST``; the source data must be
  in the NIC's host memory first (:class:`HostMemory`);
* receive completions (one per placed message, RDMA WRITE and Write-with-Immediate
  alike) are popped from ``CPL_DATA0/1``;
* send completions exist only on ``mrcnic sim --serve`` (``SCPL_DATA0/1``, the
  co-simulation's board model): a board does not connect them, polling its send CQ
  raises ENOTSUP -- wait for the receiver's completion instead;
* the host memory is a 32-bit word window at ``0x8000`` (16 KiB on a board); the
  co-simulation adds ``HOSTMEM_PAGE`` to reach all of its simulated host memory.

The same code runs against a board (``uart:``) and a served simulation (``tcp:``).
"""

from __future__ import annotations

import enum
import errno as _errno
import time
from dataclasses import dataclass, field

from ..boards.common import BOARD_REGS, HOSTMEM_BASE
from ..rtl.layouts import Completion, WorkRequest, WrOpcode
from .mrc_ctl import MrcCtlContext, MrcCtlError, _fail
from .transport import TransportError

__all__ = ["MrcContext", "MrcQp", "MrcQpAttr", "MrcQpAttrMask", "MrcDeviceAttr", "IbvSendWr",
           "IbvWc", "IbvWrOpcode", "IbvWcOpcode", "HostMemory", "BOARD", "pack_wr", "unpack_cpl"]

#: Board register name -> offset (docs/boards.md), with the co-simulation's extras.
BOARD = {name: off for off, (name, *_rest) in BOARD_REGS.items()}
BOARD.update(SCPL_DATA0=0x0838, SCPL_DATA1=0x083C, HOSTMEM_PAGE=0x08A0)
BOARD_MAGIC = 0x42524431
WINDOW = 0x8000                  #: bytes of host memory one window page shows


class IbvWrOpcode(enum.IntEnum):
    """``ibv_wr_opcode`` values ``mrc_post_send`` accepts (MRC: Write and Write-with-Imm only)."""
    IBV_WR_RDMA_WRITE = 0
    IBV_WR_RDMA_WRITE_WITH_IMM = 1


class IbvWcOpcode(enum.IntEnum):
    """``ibv_wc_opcode`` of mrcnic completions."""
    IBV_WC_RDMA_WRITE = 1
    IBV_WC_RECV_RDMA_WITH_IMM = 129


class MrcQpAttrMask(enum.IntFlag):
    """``enum mrc_qp_attr_mask``."""
    MRC_QP_MAX_WIMM = 1 << 0
    MRC_QP_MAX_WIMM_DEST = 1 << 1
    MRC_QP_MPR = 1 << 2
    MRC_QP_MPR_DEST = 1 << 3
    MRC_QP_DYNAMIC_MPR = 1 << 4
    MRC_QP_TIMEOUT = 1 << 5
    MRC_EV_PROFILE_ID = 1 << 6
    MRC_CC_PROFILE_ID = 1 << 7
    MRC_QP_HINT = 1 << 8
    MRC_QP_RETRY_CNT = 1 << 9
    MRC_QP_CAP = 1 << 10
    MRC_QP_VENDOR_CFG = 1 << 31


QM = MrcQpAttrMask


@dataclass
class MrcDeviceAttr:
    """``struct mrc_device_attr``: ``max_wimm``/``max_wimm_dest`` (completion FIFO depth),
    ``max_mpr`` (SACK window in units of 128 PSNs), ``cap`` (``MRC_DEVICE_CAP_TRIM_NACK``)."""
    mrc_protocol_version: int = 1
    max_wimm: int = 0
    max_wimm_dest: int = 0
    max_mpr: int = 0
    mpr_resolution: int = 0
    dynamic_mpr: int = 0
    max_qp_hint: int = 0
    cap: int = 0


@dataclass
class MrcQpAttr:
    """``struct mrc_qp_attr`` (flattened: ``mpr``, ``mpr_dest``, ``dynamic_mpr``,
    ``max_wimm``, ``max_wimm_dest``, ``timeout``, ``ev_profile_id``, ``cc_profile_id``,
    ``linear_cnt``, ``exp_cnt``, ``cap``)."""
    mpr: int = 0
    mpr_dest: int = 0
    dynamic_mpr: int = 0
    max_wimm: int = 0
    max_wimm_dest: int = 0
    timeout: int = 0
    ev_profile_id: int = 0
    cc_profile_id: int = 0
    linear_cnt: int = 0
    exp_cnt: int = 0
    cap: int = 0


@dataclass
class IbvSendWr:
    """The ``ibv_send_wr`` fields ``mrc_post_send`` uses: one scatter/gather element
    (``local_addr``, ``length``: host-memory byte address, 8-byte aligned), the RDMA
    ``remote_addr`` and ``rkey``, ``imm_data`` for Write-with-Immediate."""
    wr_id: int
    opcode: IbvWrOpcode
    local_addr: int
    length: int
    remote_addr: int
    rkey: int
    imm_data: int = 0


@dataclass
class IbvWc:
    """The ``ibv_wc`` fields of an mrcnic completion (``qp_num`` is the QP index, ``psn``
    the message's last PSN: the hardware completion carries no ``wr_id``)."""
    qp_num: int
    opcode: IbvWcOpcode
    psn: int
    wc_flags: int = 0            #: IBV_WC_WITH_IMM (2) when imm_data is valid
    imm_data: int = 0
    status: int = 0              #: IBV_WC_SUCCESS


def pack_wr(qp: int, wr: IbvSendWr) -> int:
    """The ``WorkRequest`` bits of ``wr`` on QP ``qp`` (values checked: EINVAL)."""
    from .client import CsrValueError, pack_record
    if wr.opcode not in tuple(IbvWrOpcode):
        _fail(_errno.EINVAL, f"opcode {wr.opcode!r}: MRC allows RDMA Write and Write-with-Imm only")
    if wr.local_addr % 8:
        _fail(_errno.EINVAL, f"local_addr {wr.local_addr:#x} is not 8-byte aligned")
    if not 1 <= wr.length <= 1 << 31:
        _fail(_errno.EINVAL, f"length {wr.length} (1..2^31)")
    if not 0 <= wr.wr_id <= 0xFFFF:
        _fail(_errno.EINVAL, f"wr_id {wr.wr_id}: the hardware carries 16 bits (0..65535)")
    try:
        return pack_record(WorkRequest, dict(
            qp=qp, opcode=WrOpcode(int(wr.opcode)), wr_id=wr.wr_id,
            local_addr=wr.local_addr, remote_va=wr.remote_addr, rkey=wr.rkey, length=wr.length,
            imm=wr.imm_data), "WorkRequest")
    except CsrValueError as e:
        _fail(_errno.EINVAL, str(e))


def unpack_cpl(bits: int) -> IbvWc:
    """An ``IbvWc`` of a ``Completion`` value."""
    from .client import unpack_record
    c = unpack_record(Completion, bits)
    if c["has_imm"]:
        return IbvWc(c["qp"], IbvWcOpcode.IBV_WC_RECV_RDMA_WITH_IMM, c["psn"], 2, c["imm"])
    return IbvWc(c["qp"], IbvWcOpcode.IBV_WC_RDMA_WRITE, c["psn"])


class HostMemory:
    """The NIC's host memory through the board's word window (``0x8000..``).

    ``read(addr, length)`` / ``write(addr, data)`` take host byte addresses (the
    addresses of ``WorkRequest.local_addr`` and ``MemRegion.base``); words are little
    endian.  Beyond what the window reaches (a board: 16 KiB; the co-simulation:
    ``HOSTMEM_PAGE`` pages over all of it) raises EINVAL.
    """

    def __init__(self, transport):
        self.t = transport
        self.words = self.t.read32(BOARD["HOSTMEM_WORDS"])
        try:
            self.t.read32(BOARD["HOSTMEM_PAGE"])
            self.paged = True
        except TransportError:
            self.paged = False
        self.size = self.words * 4 if self.paged else min(self.words * 4, WINDOW)
        self._page = None

    def check(self, addr: int, length: int) -> None:
        """EINVAL unless ``length`` bytes at ``addr`` are all reachable (nothing is read)."""
        if addr < 0 or length < 0 or addr + length > self.size:
            _fail(_errno.EINVAL, f"host memory {addr:#x}..{addr + length:#x} is beyond the "
                                 f"{self.size} bytes reachable")

    def _window(self, addr) -> int:
        page = addr // WINDOW
        if self.paged and page != self._page:
            self.t.write32(BOARD["HOSTMEM_PAGE"], page)
            self._page = page
        return HOSTMEM_BASE + addr % WINDOW

    def read(self, addr: int, length: int) -> bytes:
        """``length`` bytes of host memory at ``addr``."""
        self.check(addr, length)
        lo, hi = addr & ~3, (addr + length + 3) & ~3
        out = bytearray()
        a = lo
        while a < hi:
            n = min((hi - a) // 4, (WINDOW - a % WINDOW) // 4, 255)
            w = self._window(a)
            if hasattr(self.t, "read_burst"):
                words = self.t.read_burst(w, n)
            else:
                words = [self.t.read32(w + 4 * k) for k in range(n)]
            for v in words:
                out += int(v).to_bytes(4, "little")
            a += 4 * n
        return bytes(out[addr - lo: addr - lo + length])

    def write(self, addr: int, data: bytes) -> None:
        """Write ``data`` into host memory at ``addr`` (read-modify-write of partial words)."""
        self.check(addr, len(data))
        lo, hi = addr & ~3, (addr + len(data) + 3) & ~3
        buf = bytearray(hi - lo)
        if lo != addr:
            buf[0:4] = self.read(lo, 4)
        if hi != addr + len(data):
            buf[-4:] = self.read(hi - 4, 4)
        buf[addr - lo: addr - lo + len(data)] = data
        for k in range(0, len(buf), 4):
            self.t.write32(self._window(lo + k), int.from_bytes(buf[k:k + 4], "little"))


class MrcContext:
    """An MRC application context (``mrc_create_context``) on one NIC, with its controller
    context (:class:`~mrcnic.fw.mrc_ctl.MrcCtlContext`) for the profile ids.

    Parameters
    ----------
    ctl : MrcCtlContext
        The NIC's controller context (it owns the register client).
    """

    def __init__(self, ctl: MrcCtlContext):
        self.ctl = ctl
        self.client = ctl.client
        self.t = ctl.client.transport
        try:
            magic = self.t.read32(BOARD["BOARD_MAGIC"])
        except TransportError:
            magic = None
        self.board = magic == BOARD_MAGIC
        self._mem = None

    def _need_board(self, what):
        if not self.board:
            _fail(_errno.ENOTSUP, f"{what}: no board registers at 0x0800 (BOARD_MAGIC); a "
                                  "board top or `mrcnic sim --serve` provides them")

    @property
    def mem(self) -> HostMemory:
        """The host memory (:class:`HostMemory`)."""
        self._need_board("host memory")
        if self._mem is None:
            with self.ctl._bus():
                self._mem = HostMemory(self.t)
        return self._mem

    def mrc_query_device(self) -> MrcDeviceAttr:
        """``mrc_query_device``."""
        with self.ctl._bus():
            window = self.client.read("ID_WINDOW")
        return MrcDeviceAttr(mrc_protocol_version=1, max_wimm=16, max_wimm_dest=16,
                             max_mpr=max(1, window // 128), mpr_resolution=max(1, window // 128),
                             dynamic_mpr=0, max_qp_hint=0, cap=1)     # MRC_DEVICE_CAP_TRIM_NACK

    def qp(self, index: int) -> "MrcQp":
        """The QP at ``index`` of the NIC (``mrc_create_qp`` is the configuration file's
        ``[[qps]]``: mrcnic's QPs are provisioned, not created at run time)."""
        nq = self.ctl.ident["ID_MAX_QPS"]
        if not 0 <= index < nq:
            _fail(_errno.EINVAL, f"QP {index} does not exist (0..{nq - 1})")
        return MrcQp(self, index)

    def wait_post_slot(self, wait: float = 5.0, period: float = 0.02) -> None:
        """Wait up to ``wait`` s until the NIC has taken the previous work request (the
        board's ``WR_DATA`` registers are free again); ENOMEM if it is still pending."""
        self._need_board("work requests")
        deadline = time.monotonic() + wait
        with self.ctl._bus():
            while self.t.read32(BOARD["BOARD_STATUS"]) & 0x100:
                if time.monotonic() >= deadline:
                    _fail(_errno.ENOMEM, "the previous work request is still pending (the NIC "
                                         "has not taken it)")
                time.sleep(period)

    # ---- completions ---------------------------------------------------------------------
    def _poll(self, regs, num_entries):
        out = []
        with self.ctl._bus():
            while len(out) < num_entries:
                lo = self.t.read32(BOARD[regs + "0"])
                hi = self.t.read32(BOARD[regs + "1"])        # pops the head
                if not hi >> 31:
                    break
                out.append(unpack_cpl((hi & 0x0FFFFFFF) << 32 | lo))
        return out

    def mrc_poll_cq(self, cq: str, num_entries: int) -> list:
        """``mrc_poll_cq``: ``cq`` is ``"recv"`` (placed messages) or ``"send"`` (send
        completions: the co-simulation only; ENOTSUP on a board)."""
        self._need_board("completions")
        if num_entries < 0:
            _fail(_errno.EINVAL, "num_entries < 0")
        if cq == "recv":
            return self._poll("CPL_DATA", num_entries)
        if cq == "send":
            try:
                return self._poll("SCPL_DATA", num_entries)
            except MrcCtlError as e:
                if e.errno == _errno.EIO:
                    _fail(_errno.ENOTSUP, "send completions are not connected on this board "
                                          "(poll the receiver's CQ)")
                raise
        _fail(_errno.EINVAL, f"cq {cq!r}: 'recv' or 'send'")

    def wait_cq(self, cq: str, count: int = 1, timeout: float = 10.0, period: float = 0.05) -> list:
        """Poll ``cq`` until ``count`` completions arrived (ETIMEDOUT with ``err.rsp``)."""
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            out += self.mrc_poll_cq(cq, count - len(out))
            if len(out) >= count:
                break
            if time.monotonic() >= deadline:
                _fail(_errno.ETIMEDOUT, f"{len(out)} of {count} completions", rsp=out)
            time.sleep(period)
        return out


class MrcQp:
    """One mrcnic QP (``struct mrc_qp``): query/modify its MRC attributes, post WRs."""

    def __init__(self, ctx: MrcContext, index: int):
        self.ctx, self.index = ctx, index

    def mrc_get_qpn(self) -> int:
        """``mrc_get_qpn``: the QPN (``rxqp.qpn``)."""
        with self.ctx.ctl._bus():
            return self.ctx.client.read_table("rxqp", self.index)["qpn"]

    def mrc_query_qp(self, mrc_attr_mask: int = -1) -> MrcQpAttr:
        """``mrc_query_qp`` (MRC attributes)."""
        ctl = self.ctx.ctl
        with ctl._bus():
            rel = ctl.client.read_table("rel", self.index)
            window = ctl.client.read("ID_WINDOW")
        cc = next((pid for pid, p in ctl.cc_profiles.items() if self.index in p.qps), 0)
        return MrcQpAttr(mpr=window // 128, mpr_dest=window // 128, dynamic_mpr=0,
                         max_wimm=16, max_wimm_dest=16, timeout=rel["ack_timeout_exp"],
                         ev_profile_id=ctl._qp_profile.get(self.index, 0), cc_profile_id=cc,
                         linear_cnt=rel["retry_count"], exp_cnt=0, cap=0)

    def mrc_modify_qp(self, attr: MrcQpAttr, mrc_attr_mask: int) -> None:
        """``mrc_modify_qp`` (MRC attributes): TIMEOUT and RETRY_CNT (linear count; the
        exponential stage is fixed in hardware: ``exp_cnt`` must be 0) into the QP's
        ``rel`` entry, EV/CC profile ids (:meth:`MrcCtlContext.attach_qp`); MPR, WIMM and
        DYNAMIC_MPR only at the hardware's values; QP hints and vendor data: EINVAL."""
        mask = QM(mrc_attr_mask)
        ctl = self.ctx.ctl
        cur = self.mrc_query_qp()
        for bit, name in ((QM.MRC_QP_MPR, "mpr"), (QM.MRC_QP_MPR_DEST, "mpr_dest"),
                          (QM.MRC_QP_MAX_WIMM, "max_wimm"), (QM.MRC_QP_MAX_WIMM_DEST, "max_wimm_dest"),
                          (QM.MRC_QP_DYNAMIC_MPR, "dynamic_mpr")):
            if mask & bit and getattr(attr, name) != getattr(cur, name):
                _fail(_errno.EINVAL, f"{name} is fixed by the hardware at {getattr(cur, name)}")
        if mask & (QM.MRC_QP_HINT | QM.MRC_QP_VENDOR_CFG | QM.MRC_QP_CAP):
            _fail(_errno.EINVAL, "QP hints, capabilities and vendor data are not supported")
        rel_update = {}
        if mask & QM.MRC_QP_TIMEOUT:
            if not 0 <= attr.timeout <= 20:
                _fail(_errno.EINVAL, f"timeout {attr.timeout}: mrcnic supports 0..20 "
                                     "(1.024 us x 2^t)")
            rel_update["ack_timeout_exp"] = attr.timeout
        if mask & QM.MRC_QP_RETRY_CNT:
            if not 0 <= attr.linear_cnt <= 7 or attr.exp_cnt:
                _fail(_errno.EINVAL, "linear_cnt 0..7 and exp_cnt 0 (the exponential stage is "
                                     "the hardware's)")
            rel_update["retry_count"] = attr.linear_cnt
        if rel_update:
            with ctl._bus():
                rel = ctl.client.read_table("rel", self.index)
                rel.update(rel_update)
                ctl.client.write_table("rel", self.index, rel)
        if mask & (QM.MRC_EV_PROFILE_ID | QM.MRC_CC_PROFILE_ID):
            ctl.attach_qp(self.index,
                          attr.ev_profile_id if mask & QM.MRC_EV_PROFILE_ID else None,
                          attr.cc_profile_id if mask & QM.MRC_CC_PROFILE_ID else None)

    def mrc_post_send(self, wr: IbvSendWr, wait: float = 5.0) -> None:
        """``mrc_post_send``: one RDMA Write / Write-with-Immediate (ENOMEM when the
        previous work request is still not taken after ``wait`` s)."""
        ctx = self.ctx
        ctx._need_board("work requests")
        bits = pack_wr(self.index, wr)
        ctx.wait_post_slot(wait)
        with ctx.ctl._bus():
            for i in range(7):
                ctx.t.write32(BOARD[f"WR_DATA{i}"], (bits >> (32 * i)) & 0xFFFFFFFF)
            ctx.t.write32(BOARD["WR_POST"], 1)
