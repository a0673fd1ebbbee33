"""CRC-32 (Ethernet / RoCE ICRC polynomial) updates over a variable number of bytes.

:class:`amaranth.lib.crc.Processor` takes one fixed-width word per clock; a
64-bit datapath also has to fold in the 4-byte tail of a frame.  These helpers
build the same parallel XOR network as the library, from the library's own
matrices (``Parameters._matrices``), for any whole number of bytes, as
combinational expressions to use inside a pipeline stage.

Byte order: byte 0 (the first on the wire) is ``data[0:8]``, as in AXI-Stream.
Bit order, init and final XOR follow CRC-32/ISO-HDLC (``zlib.crc32``).
Source: IEEE 802.3 clause 3.2.9; IBTA RoCEv2 annex A17.3.3 (ICRC).
"""

from functools import lru_cache

from amaranth.hdl import Cat
from amaranth.lib.crc import catalog

__all__ = ["CRC32_INIT", "crc32_update", "crc32_final"]

CRC32_INIT = 0xFFFFFFFF


@lru_cache(maxsize=None)
def _matrices(nbytes: int):
    return catalog.CRC32_ETHERNET(data_width=8 * nbytes)._matrices()


@lru_cache(maxsize=None)
def _masks(nbytes: int):
    """Per output bit: (state mask, data mask) whose XOR-reduction gives that bit.

    The data mask is in lane order (bit b of ``data``); the library's
    matrices take the word MSB first, so word bit j is data bit 8*nbytes-1-j.
    """
    f, g = _matrices(nbytes)
    width = 8 * nbytes
    out = []
    for i in range(32):
        smask = sum(1 << j for j in range(32) if f[j][i])
        dmask = sum(1 << (width - 1 - j) for j in range(width) if g[j][i])
        out.append((smask, dmask))
    return tuple(out)


def crc32_update(state, data, nbytes: int):
    """Next CRC register after ``nbytes`` bytes of ``data`` (bytes in lane order).

    ``state`` is the 32-bit register (unreflected, as kept between words,
    initial value :data:`CRC32_INIT`); returns a 32-bit ``Cat`` expression.
    Each output bit is the XOR-reduction of ``state`` and ``data`` under a
    constant mask: the same XOR network after synthesis, and word-wide
    operations (fast) in an event-driven simulator.
    """
    data = data[:8 * nbytes]
    bits = [(state & smask).xor() ^ (data & dmask).xor() for smask, dmask in _masks(nbytes)]
    return Cat(*bits)


def crc32_final(state):
    """The CRC value (as ``zlib.crc32`` returns it) from a register ``state``."""
    return Cat(*[state[i] for i in range(32)][::-1]) ^ 0xFFFFFFFF
