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

try:                    # expression node types, to find constant bits (an optimisation only)
    from amaranth.hdl._ast import Concat, Slice
except ImportError:     # pragma: no cover - other Amaranth versions: no folding through Cat
    Concat = Slice = ()

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


def _bits(value, width):
    """``value``'s first ``width`` bits: an int (0 or 1) for a constant bit, else a 1-bit Value.

    Looks through ``Const``, ``Cat`` and slices, so that the constant parts of
    an argument (a zero state, zero-padded data) are folded at elaboration.
    """
    if isinstance(value, Const):
        return [(value.value >> i) & 1 if i < len(value) else 0 for i in range(width)]
    if isinstance(value, Concat):
        out = []
        for part in value.parts:
            out += _bits(part, len(part))
        return (out + [0] * width)[:width]
    if isinstance(value, Slice):
        inner = _bits(value.value, value.stop)
        return (inner[value.start:value.stop] + [0] * width)[:width]
    n = len(value)
    return [value[i] if i < n else 0 for i in range(width)]


@lru_cache(maxsize=None)
def _plan(nbytes: int, live: int):
    """A shared XOR network for the CRC-32 update over the inputs in ``live``.

    Inputs are numbered data bits ``0 .. 8*nbytes-1`` then state bits; ``live``
    is the mask of the non-constant ones.  Returns ``(groups, rows)``: each
    group is the XOR of four inputs or earlier groups of one level (input
    indices first, group ``k`` is index ``n_in + k``); each row lists the
    inputs and groups whose XOR is that CRC output bit (constant inputs left
    out).  Greedy common-subexpression extraction for 4-input LUTs: a group
    is a whole LUT shared by the outputs that contain all four of its terms,
    and four terms of one level make one term of the next, so no output's
    LUT depth grows (64-bit data: 298 -> about 200 LUT4; state and data:
    434 -> about 265).
    """
    width = 8 * nbytes
    n_in = width + 32
    rows = []
    for smask, dmask in _masks(nbytes):
        full = dmask | smask << width
        rows.append({b for b in range(n_in) if (full & live) >> b & 1})
    level = [0] * n_in
    groups = []
    while True:
        occ = {}
        for oi, row in enumerate(rows):
            for v in row:
                occ[v] = occ.get(v, 0) | 1 << oi
        best, best_g = 1, None
        for lv in sorted({level[v] for v in occ}):
            cand = sorted(v for v in occ if level[v] == lv and occ[v] & (occ[v] - 1))
            for ia, a in enumerate(cand):
                for ib in range(ia + 1, len(cand)):
                    mab = occ[a] & occ[cand[ib]]
                    if mab.bit_count() <= best:
                        continue
                    for ic in range(ib + 1, len(cand)):
                        mabc = mab & occ[cand[ic]]
                        if mabc.bit_count() <= best:
                            continue
                        for d in cand[ic + 1:]:
                            n = (mabc & occ[d]).bit_count()
                            if n > best:
                                best, best_g = n, (a, cand[ib], cand[ic], d)
        if best_g is None:
            break
        k = n_in + len(groups)
        groups.append(best_g)
        level.append(level[best_g[0]] + 1)
        for row in rows:
            if row.issuperset(best_g):
                row.difference_update(best_g)
                row.add(k)
    return tuple(groups), tuple(tuple(sorted(r)) for r in rows)


def crc32_update(state, data, nbytes: int):
    """Next CRC register after ``nbytes`` bytes of ``data`` (bytes in lane order).

    ``state`` is the 32-bit register (unreflected, as kept between words,
    initial value :data:`CRC32_INIT`); returns a 32-bit ``Cat`` expression.
    Each output bit is the XOR of ``state`` and ``data`` bits under the
    library's constant masks; constant bits of either argument (``Const``,
    ``Cat`` of constants, slices of those) are folded, and the XORs of the
    remaining bits are shared between output bits (see :func:`_plan`): the
    same function, a smaller network after synthesis.
    """
    width = 8 * nbytes
    d_bits = _bits(data, width)
    s_bits = _bits(state, 32)
    inputs = d_bits + s_bits
    live = sum(1 << i for i, b in enumerate(inputs) if not isinstance(b, int))
    const = sum(1 << i for i, b in enumerate(inputs) if isinstance(b, int) and b)
    groups, rows = _plan(nbytes, live)
    terms = list(inputs)
    for g in groups:
        terms.append(Cat(*[terms[v] for v in g]).xor())
    out = []
    for (smask, dmask), row in zip(_masks(nbytes), rows):
        inv = ((dmask | smask << width) & const).bit_count() & 1
        bit = Cat(*[terms[v] for v in row]).xor() if row else Const(0, 1)
        out.append(bit ^ inv if inv else bit)
    return Cat(*out)


def crc32_final(state):
    """The CRC value (as ``zlib.crc32`` returns it) from a register ``state``."""
    return Cat(*[state[i] for i in range(32)][::-1]) ^ 0xFFFFFFFF
