"""A tiny pcapng writer: one interface per tap, nanosecond timestamps, packet comments.

Scapy's ``RawPcapNgWriter`` (2.8) writes interface names and comments but only
microsecond timestamps, too coarse for a simulation whose frames are nanoseconds apart,
so mrcnic writes the few blocks it needs itself (pcapng, draft-ietf-opsawg-pcapng):

* one Section Header Block (byte-order magic ``0x1A2B3C4D``, version 1.0,
  ``shb_userappl`` = "mrcnic sim");
* one Interface Description Block per tap: link type 1 (Ethernet, frames without FCS),
  ``if_name`` = the tap's name (``"p2.leaf0->p2.spine6"``: the link and its direction,
  as the topology names the nodes), ``if_description``, ``if_tsresol`` = 9 (ns);
* one Enhanced Packet Block per frame: interface id, 64-bit timestamp in ns, the frame,
  and an ``opt_comment`` per note ("trimmed ...", "dropped ...").

Little-endian throughout; every block and option padded to 32 bits.  Wireshark, tshark
and Scapy (``rdpcap``) read the result; tshark shows the interface as
``frame.interface_name`` and the notes as ``frame.comment`` (``pkt_comment`` in 3.x).
"""

from __future__ import annotations

import struct
from pathlib import Path

__all__ = ["PcapNgWriter"]

_SHB, _IDB, _EPB = 0x0A0D0D0A, 0x00000001, 0x00000006
_LINKTYPE_ETHERNET = 1


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def _options(opts: list[tuple[int, bytes]]) -> bytes:
    if not opts:
        return b""
    out = b"".join(struct.pack("<HH", code, len(v)) + _pad(v) for code, v in opts)
    return out + struct.pack("<HH", 0, 0)           # opt_endofopt


def _block(kind: int, body: bytes) -> bytes:
    total = 12 + len(body)
    return struct.pack("<II", kind, total) + body + struct.pack("<I", total)


class PcapNgWriter:
    """Write frames to a pcapng file, each on a named interface, with optional comments.

    Parameters
    ----------
    path : str or Path
        The file (overwritten).
    application : str
        Written as the section's ``shb_userappl``.

    Use as a context manager, or call :meth:`close`.  Interfaces are declared on first
    use (:meth:`interface`) or up front, in the order they should get their ids.
    """

    def __init__(self, path, application: str = "mrcnic sim"):
        self._fh = open(Path(path), "wb")
        self._ifaces: dict[str, int] = {}
        body = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)       # magic, v1.0, length unknown
        body += _options([(4, application.encode())])         # shb_userappl
        self._fh.write(_block(_SHB, body))

    def interface(self, name: str, description: str = "", snaplen: int = 0) -> int:
        """The id of interface ``name``, declared (an IDB) the first time it is named."""
        if name in self._ifaces:
            return self._ifaces[name]
        opts = [(2, name.encode())]                            # if_name
        if description:
            opts.append((3, description.encode()))             # if_description
        opts.append((9, bytes([9])))                           # if_tsresol: 10^-9 s
        body = struct.pack("<HHI", _LINKTYPE_ETHERNET, 0, snaplen) + _options(opts)
        self._fh.write(_block(_IDB, body))
        self._ifaces[name] = len(self._ifaces)
        return self._ifaces[name]

    def write(self, iface: str, t_ns: int, frame: bytes, comments=()) -> None:
        """One frame seen on tap ``iface`` at ``t_ns`` (ns), with ``comments`` (strings)."""
        ifid = self.interface(iface)
        t = int(t_ns)
        body = struct.pack("<IIIII", ifid, t >> 32, t & 0xFFFFFFFF, len(frame), len(frame))
        body += _pad(bytes(frame))
        body += _options([(1, c.encode()) for c in comments])  # opt_comment
        self._fh.write(_block(_EPB, body))

    def close(self) -> None:
        """Flush and close the file."""
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
