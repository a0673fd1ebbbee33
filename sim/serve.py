"""Serving a co-simulated NIC's CSR bank on TCP (``mrcnic sim --serve``).

The firmware reaches a simulated NIC exactly as it reaches a board: framed
register requests (``docs/uart-protocol.md``) over ``tcp:HOST:PORT`` instead of
a UART.  Inside the simulator process:

* :class:`SimCsrBridge` is the register backend of a
  :class:`~mrcnic.fw.tcp.CsrServer` (its threads call ``read32``/``write32``):
  each request is queued and the calling thread waits for the answer;
* the co-simulation's clock loop calls :meth:`SimCsrBridge.service` every
  cycle: when a request is waiting and none is in flight, it starts a cocotb
  task that performs it with the NIC's cocotbext-axi ``AxiLiteMaster`` and hands
  the value (or the AXI error, as a :class:`~mrcnic.fw.transport.TransportError`)
  back to the waiting thread.

So the register accesses take simulated time (about 5 clocks each, one at a
time) and the NIC keeps running between them.  A request the simulation does
not answer within ``timeout`` wall seconds (the simulator stopped) raises
``TransportError``; after :meth:`SimCsrBridge.fail_pending` (end of the run)
every request raises it at once.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from collections import deque
from pathlib import Path

from mrcnic.fw.transport import SLVERR, TransportError

__all__ = ["SimCsrBridge", "SimBoard", "serve_nics", "SIM_BOARD_EXTRA"]

#: Registers of the co-simulation's board model beyond a board's (docs/boards.md): send
#: completions (not connected on the boards) and a page register that moves the 32 KiB
#: host-memory window over the simulated host memory (a board has 16 KiB, no page).
SIM_BOARD_EXTRA = {
    0x0838: ("SCPL_DATA0", "RO", "head send Completion bits 31:0 (0 when none)"),
    0x083C: ("SCPL_DATA1", "RO", "head send Completion bits 59:32, bit 31 = valid; reading pops it"),
    0x08A0: ("HOSTMEM_PAGE", "RW", "host-memory window page: window byte address = "
                                   "page * 0x8000 + (offset - 0x8000)"),
}


class _Req:
    __slots__ = ("op", "addr", "value", "done", "result", "error")

    def __init__(self, op, addr, value=0):
        self.op, self.addr, self.value = op, addr, value
        self.done = threading.Event()
        self.result, self.error = None, None


class SimCsrBridge:
    """Thread-safe register backend that executes on a cocotb async transport.

    Parameters
    ----------
    transport : mrcnic.fw.transport.AxiLiteTransport
        The NIC's CSR bus in the simulation (async ``read32``/``write32``).
    timeout : float
        Wall seconds a server thread waits for the simulation to answer.

    Attributes
    ----------
    ops : int
        Register accesses executed so far.
    """

    def __init__(self, transport, timeout: float = 30.0, board: "SimBoard | None" = None):
        self._axil, self.timeout, self.board = transport, timeout, board
        self._q: queue.Queue[_Req] = queue.Queue()
        self._busy = False
        self._inflight = None
        self._closed = None         # why requests are refused (set by fail_pending)
        self.ops = 0

    # ---- server-thread side (blocking) ---------------------------------------------------
    def _call(self, req: _Req):
        if self._closed:
            raise TransportError(req.op, req.addr, detail=self._closed)
        self._q.put(req)
        if self._closed:                # the run ended while queueing: do not wait for it
            self.fail_pending(self._closed)
        if not req.done.wait(self.timeout):
            raise TransportError(req.op, req.addr, detail="the simulation did not answer")
        if req.error is not None:
            raise req.error
        return req.result

    def read32(self, addr: int) -> int:
        """Read one 32-bit register (blocks until the simulation has done it); board
        registers (``board``) answer at once, its host-memory window (``0x8000..``) at the
        simulation's next :meth:`service` (the memory is read through the simulator's
        handles, which only the simulation's thread may touch)."""
        if self.board is not None and self.board.handles(addr):
            if self._closed:
                raise TransportError("read", addr, detail=self._closed)
            if self.board.is_memory(addr):
                return self._call(_Req("memread", addr))
            return self.board.read32(addr)
        return self._call(_Req("read", addr))

    def write32(self, addr: int, value: int) -> None:
        """Write one 32-bit register (blocks until the simulation has done it)."""
        if self.board is not None and self.board.handles(addr):
            if self._closed:
                raise TransportError("write", addr, detail=self._closed)
            if self.board.is_memory(addr):
                return self._call(_Req("memwrite", addr, value))
            return self.board.write32(addr, value)
        self._call(_Req("write", addr, value))

    # ---- simulation side (called from the cocotb clock loop) -----------------------------
    def service(self):
        """Do the queued host-memory accesses at once (no simulated time) and start the
        next register access as a cocotb task, unless one is in flight."""
        while not self._busy:
            try:
                req = self._q.get_nowait()
            except queue.Empty:
                return
            if req.op in ("memread", "memwrite"):
                self._memory(req)
                continue
            import cocotb
            self._busy = True
            self._inflight = req
            cocotb.start_soon(self._run(req))

    def _memory(self, req: _Req):
        """A host-memory window access of the board model, in the simulation's thread."""
        try:
            if req.op == "memread":
                req.result = self.board.read32(req.addr)
            else:
                self.board.write32(req.addr, req.value)
        except TransportError as exc:
            req.error = exc
        except Exception as exc:        # noqa: BLE001 - answered, never raised into the loop
            req.error = TransportError(req.op, req.addr, detail=f"simulation: {exc}")
        finally:
            req.done.set()

    async def _run(self, req: _Req):
        try:
            if req.op == "read":
                req.result = await self._axil.read32(req.addr)
            else:
                await self._axil.write32(req.addr, req.value)
        except TransportError as exc:
            req.error = exc
        except Exception as exc:        # noqa: BLE001 - e.g. X bits on rdata: an error, not a crash
            req.error = TransportError(req.op, req.addr, detail=f"simulation: {exc}")
        finally:
            self.ops += 1
            self._busy = False
            self._inflight = None
            req.done.set()

    def fail_pending(self, why: str = "the simulation ended"):
        """Answer every queued request, and one in flight, with a TransportError (at the
        end of the run); every later request fails at once with ``why``."""
        self._closed = why
        pending = [self._inflight] if self._inflight is not None else []
        while True:
            try:
                pending.append(self._q.get_nowait())
            except queue.Empty:
                break
        for req in pending:
            if not req.done.is_set():
                req.error = TransportError(req.op, req.addr, detail=why)
                req.done.set()


# ------------------------------------------------------------------------------------------
# The board model: board registers and host memory of a co-simulated NIC
# ------------------------------------------------------------------------------------------
class SimBoard:
    """The board registers (``0x0800..0x08FF``) and host-memory window (``0x8000..``) of
    ``boards/common.py`` ``BoardRegs``, modelled for one co-simulated NIC, so that the
    firmware posts work requests, polls completions and reads/writes host memory on
    ``mrcnic sim --serve`` exactly as on a board (docs/boards.md), plus
    :data:`SIM_BOARD_EXTRA` (send completions, a host-memory page).

    :meth:`read32` / :meth:`write32` run in a server thread for the board registers and in
    the simulation's thread for the host-memory window (the NIC's host memory, in no
    simulated time; :class:`SimCsrBridge` queues those accesses for its ``service``); the
    clock loop calls :meth:`sample` every cycle (completions into 16-entry FIFOs, as
    on a board) and :meth:`service` (a posted work request is handed to the NIC's
    ``s_wr`` stream by a cocotb task, under the NIC's ``wr_lock`` when it has one, so
    that it does not collide with the scenario's own posts).
    """

    MAGIC = 0x42524431
    #: A board's completion FIFO holds 16 and backpressures the NIC; the co-simulation ties
    #: the completion streams' ready high, so the model keeps up to this many instead.
    CPL_DEPTH = 4096

    def __init__(self, nic):
        from mrcnic.boards.common import BOARD_REGS
        self.nic = nic
        self.regs = {**BOARD_REGS, **SIM_BOARD_EXTRA}
        self.wr_data = [0] * 7
        self.pending = None            # the WorkRequest value waiting to be handed over
        self._posting = False
        self.page = 0
        self.cpl, self.scpl = deque(), deque()
        self.cpl_dropped = 0
        self.mem_size = nic.mem.size
        self._sig = {n: nic.sig(n) for n in ("recv_cpl__valid", "recv_cpl__payload",
                                             "send_cpl__valid", "send_cpl__payload",
                                             "s_wr__valid", "s_wr__payload", "s_wr__ready")}

    # ---- server-thread side -----------------------------------------------------------
    @staticmethod
    def handles(addr: int) -> bool:
        return addr >= 0x0800

    @staticmethod
    def is_memory(addr: int) -> bool:
        """The host-memory window (read and written through the simulator's handles)."""
        return addr >= 0x8000

    def _mem_addr(self, op, addr):
        a = self.page * 0x8000 + (addr - 0x8000)
        if a + 4 > self.mem_size:
            raise TransportError(op, addr, SLVERR, f"host memory ends at {self.mem_size:#x}")
        return a

    def read32(self, addr: int) -> int:
        if addr & 3:
            raise TransportError("read", addr, SLVERR, "unaligned")
        if addr >= 0x8000:
            return int.from_bytes(self.nic.mem.read(self._mem_addr("read", addr), 4), "little")
        name = self.regs.get(addr, (None,))[0]
        if name is None:
            raise TransportError("read", addr, SLVERR, "unmapped board address")
        if name == "BOARD_MAGIC":
            return self.MAGIC
        if name == "BOARD_STATUS":
            return 0b111 | (0x100 if self.pending is not None else 0) | min(len(self.cpl), 0xFFFF) << 16
        if name == "HOSTMEM_WORDS":
            return min(self.mem_size // 4, 0xFFFFFFFF)
        if name.startswith("WR_DATA"):
            return self.wr_data[int(name[7:])]
        if name == "HOSTMEM_PAGE":
            return self.page
        for fifo, pre in ((self.cpl, "CPL_DATA"), (self.scpl, "SCPL_DATA")):
            if name == pre + "0":
                return fifo[0] & 0xFFFFFFFF if fifo else 0
            if name == pre + "1":
                if not fifo:
                    return 0
                return (fifo.popleft() >> 32) & 0x0FFFFFFF | 1 << 31
        return 0                        # MAC / NIC counters of a board: not modelled

    def write32(self, addr: int, value: int) -> None:
        if addr & 3:
            raise TransportError("write", addr, SLVERR, "unaligned")
        value &= 0xFFFFFFFF
        if addr >= 0x8000:
            self.nic.mem.write(self._mem_addr("write", addr), value.to_bytes(4, "little"))
            return
        name, access = self.regs.get(addr, (None, None))[:2]
        if name is None:
            raise TransportError("write", addr, SLVERR, "unmapped board address")
        if name.startswith("WR_DATA"):
            self.wr_data[int(name[7:])] = value
        elif name == "HOSTMEM_PAGE":
            if value * 0x8000 >= self.mem_size:
                raise TransportError("write", addr, SLVERR, "page beyond the host memory")
            self.page = value
        elif name == "WR_POST":
            if self.pending is not None:
                raise TransportError("write", addr, SLVERR, "the previous work request is pending")
            self.pending = sum(w << (32 * i) for i, w in enumerate(self.wr_data))
        # RO registers: ignored, as on the AXI4-Lite bank

    # ---- clock-loop side ----------------------------------------------------------------
    def sample(self):
        """At every edge the NIC offers a completion (the co-simulation wakes at each: its
        ``valid`` is in ``CosimTop.wake_any``): queue it."""
        for fifo, pre in ((self.cpl, "recv_cpl"), (self.scpl, "send_cpl")):
            if int(self._sig[pre + "__valid"].value):
                if len(fifo) < self.CPL_DEPTH:
                    fifo.append(int(self._sig[pre + "__payload"].value))
                else:
                    self.cpl_dropped += 1

    def service(self):
        if self.pending is not None and not self._posting:
            import cocotb
            self._posting = True
            cocotb.start_soon(self._post(self.pending))

    async def _post(self, value):
        from cocotb.triggers import RisingEdge
        clk = self.nic.dut.clk
        lock = getattr(self.nic, "wr_lock", None)
        if lock is not None:
            await lock.acquire()
        try:
            self._sig["s_wr__payload"].value = value
            self._sig["s_wr__valid"].value = 1
            while True:
                await RisingEdge(clk)
                if int(self._sig["s_wr__ready"].value):
                    break
            self._sig["s_wr__valid"].value = 0
        finally:
            if lock is not None:
                lock.release()
            self.pending = None
            self._posting = False


class _Bridges:
    """Every served NIC's bridge, seen by the co-simulation as one (``service``, ``ops``,
    ``fail_pending``)."""

    def __init__(self, bridges):
        self.bridges = bridges

    @property
    def ops(self):
        return sum(b.ops for b in self.bridges)

    def service(self):
        for b in self.bridges:
            if b.board is not None:
                b.board.sample()
                b.board.service()
            b.service()

    def fail_pending(self, why: str = "the simulation ended"):
        for b in self.bridges:
            b.fail_pending(why)


class _Servers:
    def __init__(self, servers):
        self.servers = servers

    def stop(self):
        for s in self.servers:
            s.stop()


def serve_nics(nics, serve: dict):
    """Serve every co-simulated NIC's CSR bank, board registers and host memory on TCP.

    NIC ``serve["nic"]`` listens on ``serve["port"]`` (0: a free port); the others on
    the next ports in NIC order (``--serve 5791``: nic0 on 5791, nic1 on 5792), or a
    free port when that one is taken.  ``serve["port_file"]`` gets
    ``{host, port, nic, nics: [{nic, host, port}, ...]}`` once all listen.

    Returns (bridge, server) objects for the co-simulation loop.
    """
    from mrcnic.fw.tcp import CsrServer
    from mrcnic.fw.transport import AxiLiteTransport

    host = serve.get("host", "127.0.0.1")
    main, port = serve["nic"], serve.get("port", 0)
    order = [main] + [k for k in range(len(nics)) if k != main]
    bridges, servers, listing = {}, [], []
    for n, k in enumerate(order):
        b = SimCsrBridge(AxiLiteTransport(nics[k].axil), board=SimBoard(nics[k]))
        want = port + n if port else 0
        try:
            srv = CsrServer(b, host, want).start()
        except OSError:
            if n == 0:
                raise
            srv = CsrServer(b, host, 0).start()
        bridges[k] = b
        servers.append(srv)
        h, p = srv.address
        listing.append(dict(nic=k, host=h, port=p))
    listing.sort(key=lambda d: d["nic"])
    first = next(d for d in listing if d["nic"] == main)
    tmp = Path(serve["port_file"] + ".tmp")
    tmp.write_text(json.dumps(dict(host=first["host"], port=first["port"], nic=main, nics=listing)))
    os.replace(tmp, serve["port_file"])
    return _Bridges([bridges[k] for k in sorted(bridges)]), _Servers(servers)
