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

from amaranth.hdl import Cat, Const
from amaranth.lib.crc import catalog

__all__ = ["CRC32_INIT", "crc32_update", "crc32_final"]

CRC32_INIT = 0xFFFFFFFF


@lru_cache(maxsize=None)
def _matrices(nbytes: int):
    return catalog.CRC32_ETHERNET(data_width=8 * nbytes)._matrices()


def crc32_update(state, data, nbytes: int):
    """Next CRC register after ``nbytes`` bytes of ``data`` (bytes in lane order).

    ``state`` is the 32-bit register (unreflected, as kept between words,
    initial value :data:`CRC32_INIT`); returns a 32-bit ``Cat`` expression.
    """
    f, g = _matrices(nbytes)
    # The reflected-input CRC consumes each byte LSB first; the library's
    # matrices take the word MSB first, so feed bytes reversed bitwise.
    word = Cat(*[data[i] for i in range(8 * nbytes)][::-1])
    bits = []
    for i in range(32):
        bit = Const(0, 1)
        for j in range(32):
            if f[j][i]:
                bit = bit ^ state[j]
        for j in range(8 * nbytes):
            if g[j][i]:
                bit = bit ^ word[j]
        bits.append(bit)
    return Cat(*bits)


def crc32_final(state):
    """The CRC value (as ``zlib.crc32`` returns it) from a register ``state``."""
    return Cat(*[state[i] for i in range(32)][::-1]) ^ 0xFFFFFFFF
