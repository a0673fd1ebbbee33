"""TCP transport: the framed protocol of ``docs/uart-protocol.md`` over a socket.

* :class:`TcpTransport` is the client (``mrcnic fw --target tcp:HOST:PORT``).
* :class:`CsrServer` serves a register backend (anything with ``read32`` /
  ``write32``, e.g. :class:`~mrcnic.fw.transport.LoopbackTransport` or a running
  simulation; a :class:`~mrcnic.fw.client.CsrClient` is accepted too, its
  transport is used) on localhost, in a background thread, with the bridge's
  rules: bad frames are answered BAD_FRAME / BAD_CHECKSUM and never executed,
  a ``TransportError`` from the backend becomes its AXI response (SLVERR), any
  other backend exception SLVERR too (the connection stays up).
  Requests of all connections are executed one at a time (a lock);
  :meth:`CsrServer.stop` also closes the open connections.

Example::

    with CsrServer(LoopbackTransport()) as srv:          # port chosen by the OS
        c = CsrClient(TcpTransport(*srv.address))
        c.write("NIC_USID", 0x20)
"""

import socket
import socketserver
import threading

from .transport import SLVERR, TransportError
from .uart import Cmd, FramedTransport, LinkError, Request, RequestDecoder, Status, encode_response

__all__ = ["TcpTransport", "CsrServer", "serve"]


class TcpTransport(FramedTransport):
    """Blocking register access over TCP (framed protocol; tags, timeouts, retries).

    Parameters
    ----------
    host, port
        The server (``mrcnic sim --serve``, :class:`CsrServer`).
    timeout : float
        Seconds to wait for each response (also the connect timeout).
    retries : int
        Re-sends after a timeout or a frame error.
    """

    def __init__(self, host: str, port: int, timeout: float = 2.0, retries: int = 1):
        if not (isinstance(timeout, (int, float)) and 0 < timeout < float("inf")):
            raise ValueError(f"timeout must be > 0 seconds (finite), not {timeout!r}")
        super().__init__(timeout, retries)
        try:
            self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        except OSError as exc:
            raise LinkError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise LinkError(f"connection lost: {exc}") from None

    def _recv(self, timeout: float) -> bytes:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return b""
        except OSError as exc:
            raise LinkError(f"connection lost: {exc}") from None
        if not data:
            raise LinkError("the server closed the connection")
        return data

    def close(self):
        self.sock.close()


def _execute(backend, lock, req: Request) -> bytes:
    words, status = [], Status.OK
    with lock:
        try:
            if req.cmd == Cmd.WRITE:
                backend.write32(req.addr, req.data)
            else:
                for k in range(req.length):
                    words.append(backend.read32((req.addr + 4 * k) & 0xFFFF))
        except Exception as exc:    # noqa: BLE001 - any backend failure is a bus error, not a crash
            status = (exc.resp or SLVERR) if isinstance(exc, TransportError) else SLVERR
            if req.cmd == Cmd.READ:
                words += [0] * (req.length - len(words))
    return encode_response(req.tag, req.cmd, status, words)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        srv = self.server
        with srv.conns_lock:
            if srv.closed:
                return
            srv.conns.add(self.request)
        try:
            self._serve(srv)
        finally:
            with srv.conns_lock:
                srv.conns.discard(self.request)

    def _serve(self, srv):
        dec = RequestDecoder()
        self.request.settimeout(srv.frame_timeout)
        while True:
            try:
                data = self.request.recv(4096)
            except socket.timeout:
                if dec.timeout():
                    srv.stats["timeouts"] += 1
                continue
            except OSError:
                return
            if not data:
                return
            for ev in dec.feed(data):
                if srv.closed:
                    return                  # stopped: nothing more is executed
                if isinstance(ev, Request):
                    srv.stats["frames"] += 1
                    out = _execute(srv.backend, srv.lock, ev)
                else:
                    tag, cmd, status = ev
                    srv.stats["bad_frames" if status == Status.BAD_FRAME else "bad_checksums"] += 1
                    out = encode_response(tag, cmd, status)
                try:
                    self.request.sendall(out)
                except OSError:
                    return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class CsrServer:
    """Serve a register backend over TCP in a background thread.

    Parameters
    ----------
    backend
        Object with ``read32(addr) -> int`` and ``write32(addr, value)`` raising
        :class:`~mrcnic.fw.transport.TransportError` on a bus error (or a
        ``CsrClient``, whose ``transport`` is used).
    host : str
        Address to bind (default 127.0.0.1: local only).
    port : int
        TCP port; 0 lets the OS choose (see :attr:`address`).
    frame_timeout : float
        Seconds of silence after which a partial frame is dropped.

    Attributes
    ----------
    address : (host, port)
        Where the server listens.
    stats : dict
        ``frames``, ``bad_frames``, ``bad_checksums``, ``timeouts`` (like the bridge counters).
    """

    def __init__(self, backend, host: str = "127.0.0.1", port: int = 0, frame_timeout: float = 0.5):
        backend = getattr(backend, "transport", backend)
        if not (callable(getattr(backend, "read32", None)) and callable(getattr(backend, "write32", None))):
            raise ValueError("backend must provide read32(addr) and write32(addr, value)")
        if not (isinstance(frame_timeout, (int, float)) and 0 < frame_timeout < float("inf")):
            raise ValueError(f"frame_timeout must be > 0 seconds, not {frame_timeout!r}")
        self._srv = _Server((host, port), _Handler)
        self._srv.backend, self._srv.lock = backend, threading.Lock()
        self._srv.conns, self._srv.closed = set(), False
        self._srv.conns_lock = threading.Lock()
        self._srv.frame_timeout = frame_timeout
        self._srv.stats = self.stats = dict(frames=0, bad_frames=0, bad_checksums=0, timeouts=0)
        self.address = self._srv.server_address[:2]
        self._thread = None

    def start(self) -> "CsrServer":
        self._thread = threading.Thread(target=self._srv.serve_forever, name="mrcnic-csr-server",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stop listening and close every open connection (their clients see the
        connection closed; no request is executed after this returns, except one
        already running in the backend)."""
        self._srv.shutdown()
        self._srv.server_close()
        with self._srv.conns_lock:
            self._srv.closed = True
            conns = list(self._srv.conns)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def serve(backend, host: str = "127.0.0.1", port: int = 5791):
    """Serve ``backend`` in the foreground until interrupted (Ctrl-C)."""
    srv = CsrServer(backend, host, port)
    try:
        srv._srv.serve_forever()
    finally:
        srv._srv.server_close()
