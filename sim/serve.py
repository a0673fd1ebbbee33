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

import queue
import threading

from mrcnic.fw.transport import TransportError

__all__ = ["SimCsrBridge"]


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

    def __init__(self, transport, timeout: float = 30.0):
        self._axil, self.timeout = transport, timeout
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
        """Read one 32-bit register (blocks until the simulation has done it)."""
        return self._call(_Req("read", addr))

    def write32(self, addr: int, value: int) -> None:
        """Write one 32-bit register (blocks until the simulation has done it)."""
        self._call(_Req("write", addr, value))

    # ---- simulation side (called from the cocotb clock loop) -----------------------------
    def service(self):
        """Start the next queued access as a cocotb task, unless one is in flight."""
        if self._busy or self._q.empty():
            return
        import cocotb
        self._busy = True
        self._inflight = req = self._q.get_nowait()
        cocotb.start_soon(self._run(req))

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
