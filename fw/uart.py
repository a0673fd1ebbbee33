"""The UART control-plane protocol (host side) and its pyserial transport.

Frames (``docs/uart-protocol.md``; hardware: ``mrcnic.rtl.uart_bridge``)::

    request   A5 | TAG | CMD | LEN | ADDR (2, LE) | DATA (4, LE; WRITE only) | CRC
    response  5A | TAG | CMD | LEN | DATA (4*LEN, LE)                | STATUS | CRC

CRC-8/SMBUS (poly 0x07, init 0) over every byte after the sync byte.  ``CMD``
0x01 READ (``LEN`` words at ADDR, ADDR+4, ...), 0x02 WRITE (``LEN`` = 1).
``STATUS`` 0 OK, 2 SLVERR, 3 DECERR (the AXI4-Lite response), 0x10 BAD_FRAME,
0x11 BAD_CHECKSUM.

This module holds the codec (no I/O: :func:`encode_request`,
:class:`ResponseDecoder`, and for servers :class:`RequestDecoder` /
:func:`encode_response`), the transport core shared with TCP
(:class:`FramedTransport`: tags, timeouts, retries, errors) and
:class:`UartTransport` (pyserial).
"""

import enum
import time
from typing import NamedTuple

from .transport import TransportError

__all__ = ["Cmd", "Status", "SYNC_REQUEST", "SYNC_RESPONSE", "MAX_BURST", "crc8",
           "Request", "Response", "encode_request", "encode_response", "RequestDecoder",
           "ResponseDecoder", "LinkError", "FramedTransport", "UartTransport"]

SYNC_REQUEST = 0xA5
SYNC_RESPONSE = 0x5A
MAX_BURST = 255


class Cmd(enum.IntEnum):
    """Request commands."""
    READ = 0x01
    WRITE = 0x02


class Status(enum.IntEnum):
    """Response status: the AXI4-Lite response, or a frame error (nothing was done)."""
    OK = 0x00
    SLVERR = 0x02
    DECERR = 0x03
    BAD_FRAME = 0x10
    BAD_CHECKSUM = 0x11


def _crc_table():
    table = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = ((c << 1) ^ 0x07) & 0xFF if c & 0x80 else (c << 1) & 0xFF
        table.append(c)
    return table


_CRC = _crc_table()


def crc8(data) -> int:
    """CRC-8/SMBUS of ``data`` (bytes): poly 0x07, init 0, no reflection (check 0xF4)."""
    c = 0
    for b in data:
        c = _CRC[c ^ b]
    return c


class Request(NamedTuple):
    """A decoded request frame."""
    tag: int
    cmd: int
    length: int
    addr: int
    data: int | None


class Response(NamedTuple):
    """A decoded response frame: ``words`` are the LEN data words (ints)."""
    tag: int
    cmd: int
    status: int
    words: tuple


def encode_request(cmd, addr: int, *, tag: int = 0, data: int | None = None,
                   length: int = 1) -> bytes:
    """The bytes of one request frame (values checked, ``ValueError`` otherwise)."""
    cmd = Cmd(cmd)
    if not 0 <= addr < 1 << 16:
        raise ValueError(f"address {addr:#x} is not a 16-bit byte address")
    if not 0 <= tag < 256:
        raise ValueError(f"tag {tag} is not a byte")
    if cmd is Cmd.WRITE:
        if length != 1:
            raise ValueError("a WRITE carries exactly one word")
        if data is None or not 0 <= data < 1 << 32:
            raise ValueError(f"write data {data!r} is not a 32-bit value")
        body = bytes([tag, cmd, 1]) + addr.to_bytes(2, "little") + data.to_bytes(4, "little")
    else:
        if not 1 <= length <= MAX_BURST:
            raise ValueError(f"burst length {length} is not 1..{MAX_BURST} words")
        body = bytes([tag, cmd, length]) + addr.to_bytes(2, "little")
    return bytes([SYNC_REQUEST]) + body + bytes([crc8(body)])


def encode_response(tag: int, cmd: int, status: int, words=()) -> bytes:
    """The bytes of one response frame (server side, e.g. the TCP server)."""
    body = bytes([tag & 0xFF, cmd & 0xFF, len(words)])
    body += b"".join(int(w).to_bytes(4, "little") for w in words) + bytes([status])
    return bytes([SYNC_RESPONSE]) + body + bytes([crc8(body)])


class ResponseDecoder:
    """Incremental response parser: :meth:`feed` bytes, get complete :class:`Response` s.

    Bytes before a sync byte are skipped; a frame with a bad CRC is dropped (the
    parser resumes hunting one byte after its sync byte); ``dropped`` counts both.
    """

    def __init__(self):
        self.buf = bytearray()
        self.dropped = 0

    def reset(self):
        self.buf.clear()

    def feed(self, data) -> list:
        self.buf += data
        out = []
        while True:
            i = self.buf.find(SYNC_RESPONSE)
            if i < 0:
                self.dropped += len(self.buf) > 0
                self.buf.clear()
                return out
            if i:
                self.dropped += 1
                del self.buf[:i]
            if len(self.buf) < 4:
                return out
            n = 4 + 4 * self.buf[3] + 2
            if len(self.buf) < n:
                return out
            frame = bytes(self.buf[:n])
            if crc8(frame[1:-1]) != frame[-1]:
                self.dropped += 1
                del self.buf[:1]
                continue
            del self.buf[:n]
            words = tuple(int.from_bytes(frame[4 + 4 * k:8 + 4 * k], "little")
                          for k in range(frame[3]))
            out.append(Response(frame[1], frame[2], frame[-2], words))


class RequestDecoder:
    """Incremental request parser with the bridge's rules (for servers).

    :meth:`feed` returns a list of events: a :class:`Request` for a good frame,
    or ``(tag, cmd, Status.BAD_FRAME | Status.BAD_CHECKSUM)`` for a frame that
    must be answered with an error and not executed.  A BAD_FRAME (unknown
    command, illegal LEN) discards the rest of the buffered input (the hardware
    discards until the line is quiet).  :meth:`timeout` drops a partial frame.
    """

    def __init__(self):
        self.buf = bytearray()

    def timeout(self) -> bool:
        """Drop a partial frame; True if there was one."""
        had = SYNC_REQUEST in self.buf
        self.buf.clear()
        return had

    def feed(self, data) -> list:
        self.buf += data
        out = []
        while True:
            i = self.buf.find(SYNC_REQUEST)
            if i < 0:
                self.buf.clear()
                return out
            del self.buf[:i]
            if len(self.buf) < 4:
                return out
            tag, cmd, length = self.buf[1], self.buf[2], self.buf[3]
            if cmd not in (Cmd.READ, Cmd.WRITE) or (length != 1 if cmd == Cmd.WRITE else length == 0):
                out.append((tag, cmd, Status.BAD_FRAME))
                self.buf.clear()
                return out
            n = 7 + (4 if cmd == Cmd.WRITE else 0)
            if len(self.buf) < n:
                return out
            frame = bytes(self.buf[:n])
            del self.buf[:n]
            if crc8(frame[1:-1]) != frame[-1]:
                out.append((tag, cmd, Status.BAD_CHECKSUM))
                continue
            addr = int.from_bytes(frame[4:6], "little")
            data = int.from_bytes(frame[6:10], "little") if cmd == Cmd.WRITE else None
            out.append(Request(tag, cmd, length, addr, data))


class LinkError(IOError):
    """The link to the bridge failed: no (valid) answer in time, or the bridge
    answered BAD_FRAME / BAD_CHECKSUM after the retries."""


class FramedTransport:
    """:class:`~mrcnic.fw.transport.Transport` over a byte pipe speaking the framed protocol.

    Subclasses implement ``_send(bytes)`` and ``_recv(timeout_s) -> bytes`` (b"" on
    timeout).  Each request gets a fresh tag; responses with another tag are
    stale and skipped.  No answer within ``timeout`` seconds, or BAD_CHECKSUM /
    BAD_FRAME (line noise), is retried ``retries`` times (a request that was
    not answered may have been executed: reads of pop registers and CMD writes
    are then repeated), then raises :class:`LinkError`.  SLVERR / DECERR raise
    :class:`~mrcnic.fw.transport.TransportError` at once.
    """

    def __init__(self, timeout: float = 0.5, retries: int = 2):
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 s, not {timeout}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, not {retries}")
        self.timeout, self.retries = timeout, retries
        self._tag = 0
        self._decoder = ResponseDecoder()

    def _send(self, data: bytes) -> None:           # pragma: no cover - abstract
        raise NotImplementedError

    def _recv(self, timeout: float) -> bytes:       # pragma: no cover - abstract
        raise NotImplementedError

    def transact(self, cmd, addr: int, data: int | None = None, length: int = 1) -> Response:
        """Send one request and return its response (status checked for frame errors only)."""
        last = "no answer"
        for _ in range(self.retries + 1):
            self._tag = (self._tag + 1) & 0xFF
            frame = encode_request(cmd, addr, tag=self._tag, data=data, length=length)
            self._decoder.reset()
            self._send(frame)
            deadline = time.monotonic() + self.timeout
            resp = None
            while resp is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for r in self._decoder.feed(self._recv(left)):
                    if r.tag == self._tag and r.cmd == int(cmd):
                        resp = r
                        break
            if resp is None:
                last = f"no answer within {self.timeout} s"
                continue
            if resp.status in (Status.BAD_CHECKSUM, Status.BAD_FRAME):
                last = f"bridge answered {Status(resp.status).name}"
                continue
            return resp
        raise LinkError(f"{Cmd(cmd).name} at 0x{addr:04X}: {last} "
                        f"(after {self.retries + 1} attempts)")

    def read_burst(self, addr: int, count: int) -> list:
        """Read ``count`` consecutive words at ``addr``, ``addr+4``, ... in one frame."""
        r = self.transact(Cmd.READ, addr, length=count)
        if r.status != Status.OK:
            raise TransportError("read", addr, r.status, f"burst of {count} words")
        return list(r.words)

    def read32(self, addr: int) -> int:
        r = self.transact(Cmd.READ, addr)
        if r.status != Status.OK:
            raise TransportError("read", addr, r.status)
        return r.words[0]

    def write32(self, addr: int, value: int) -> None:
        r = self.transact(Cmd.WRITE, addr, data=int(value) & 0xFFFFFFFF)
        if r.status != Status.OK:
            raise TransportError("write", addr, r.status)

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class UartTransport(FramedTransport):
    """The framed protocol over a serial port (pyserial): a board's ``UartAxilBridge``.

    Parameters
    ----------
    device : str
        Serial device (``/dev/ttyUSB0``, ``COM3``) or any pyserial URL.
    baud : int
        Bit rate, 8N1 (the bridge's ``baud`` parameter; default 115200).
    timeout, retries
        As :class:`FramedTransport`.
    """

    def __init__(self, device: str, baud: int = 115200, timeout: float = 0.5, retries: int = 2):
        super().__init__(timeout, retries)
        try:
            import serial
        except ImportError:                           # pragma: no cover
            raise LinkError("the UART transport needs pyserial (pip install pyserial)") from None
        try:
            self.port = serial.serial_for_url(device, baudrate=baud, bytesize=8, parity="N",
                                              stopbits=1, timeout=0.05)
        except (serial.SerialException, ValueError) as exc:
            raise LinkError(f"cannot open {device}: {exc}") from None
        self.port.reset_input_buffer()

    def _send(self, data: bytes) -> None:
        self.port.reset_input_buffer()
        self.port.write(data)
        self.port.flush()

    def _recv(self, timeout: float) -> bytes:
        self.port.timeout = min(timeout, 0.05)
        return self.port.read(max(1, self.port.in_waiting))

    def close(self):
        self.port.close()
