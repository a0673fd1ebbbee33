"""The co-simulation's host memory in the testbench's HDL: an AXI4 subordinate with the
handshakes of :class:`mrcnic.sim.fastaxiram.AxiRamOneTask`, cycle for cycle.

``mrcnic sim`` gives every NIC a host memory on its ``m_axi`` port.  The Python models
(:mod:`mrcnic.sim.fastaxiram`) wake at every clock edge while the memory is busy, which
caps the co-simulation's speed; this one is simulated by the simulator itself:

* :class:`HostMemAxi` (Amaranth, Verilog module :data:`HOSTMEM_MODULE`): the AXI4 side.
  At every rising edge it does what ``AxiRamOneTask`` does at that edge (see its
  docstring), in the same order: phase A, the five channel models (the AR, AW and W sinks
  take a beat when their ``ready`` and ``valid`` are high and drive ``ready = not full``,
  queues 2 deep; the R and B sources drive their next queued beat, or ``valid = 0``, when
  their beat was taken or ``valid`` is low); phase B, the read process (takes the next AR
  when the previous burst's last beat is queued, queues R beats while the R queue has
  room) and the write process (queues the previous burst's B when the B queue has room,
  takes the next AW, consumes W beats, writing the memory).  Both processes run to their
  next wait within one edge, as the Python loops do (up to two W beats written and two R
  beats queued per edge).  ``rresp``/``bresp`` are OKAY (the Python model's SLVERR needs a
  write past the end of the memory, which its address wrap never makes).
* the storage, :func:`ram_verilog` (module :data:`RAM_MODULE`, hand-written Verilog: an
  Amaranth ``Memory`` of millions of words would carry its zero initial contents word by
  word through RTLIL and Verilog): ``mem``, ``2**AW`` 64-bit words in rows of
  :data:`ROW_WORDS` (Python moves a row per simulator call), addresses wrapping modulo its
  size as the Python model's do; two byte-enabled write ports and one read
  port; and ``dirty``, one bit per 4 KiB page, set by every write of the NIC.
* :class:`HdlHostMem` (Python, inside the cocotb test): the memory as a
  :class:`cocotbext.axi.memory.Memory` (``size``/``read``/``write``) through the
  simulator's handles of ``mem`` and ``dirty`` (a backdoor: no clock, no per-cycle work).
  It keeps a copy of what Python wrote, which is the memory's content in every page the NIC
  never wrote, and reads the pages the NIC wrote from ``mem``.

Differences from ``AxiRamOneTask``, none of which the co-simulation meets:

* a read beat's data is read from ``mem`` at the edge that puts the beat on R (one
  non-transparent read port); the Python model reads it up to three edges earlier, when it
  queues the beat (or the one before).  They differ only if the NIC writes an address it
  reads within those edges (the co-simulation's source and destination buffers never
  overlap);
* only what the NIC issues is modelled: INCR bursts of the full data width (``*size`` = 3)
  within a 4 KiB page, ``wlast`` on each burst's last beat.  Anything else (where the
  Python model asserts, or would use other sizes and burst types) sets the sticky output
  ``err``, which the co-simulation checks at the end of the run.
"""

from __future__ import annotations

import mmap
from pathlib import Path

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mrcnic.rtl.axi import Axi4Signature

__all__ = ["HostMemAxi", "HdlHostMem", "HOSTMEM_MODULE", "RAM_MODULE", "PAGE_BYTES",
           "ROW_WORDS", "ROW_BYTES", "hostmem_verilog", "ram_verilog", "ram_address_bits"]

HOSTMEM_MODULE = "mrcnic_hostmem"      #: Verilog module of :class:`HostMemAxi`
RAM_MODULE = "mrcnic_hostmem_ram"      #: Verilog module of the storage (:func:`ram_verilog`)
ADDR_WIDTH, DATA_WIDTH, ID_WIDTH = 32, 64, 4   #: the NIC's ``m_axi`` (CsrNic)
LANES = DATA_WIDTH // 8
WORD_BITS = ADDR_WIDTH - 3             #: word address width of the ports to the storage
PAGE_BYTES = 4096                      #: the granule of the ``dirty`` map
_PW = 9                                #: log2(words per page)
ROW_WORDS = 8                          #: 64-bit words per storage row (one GPI access)
_RW_BITS = 3                           #: log2(ROW_WORDS)
ROW_BYTES = ROW_WORDS * LANES          #: bytes per storage row (a page holds 64)
_INCR = 0b01


def ram_address_bits(size: int) -> int:
    """``AW`` (log2 of the words) of a host memory of ``size`` bytes (a power of two,
    at least 512 KiB: the 4 KiB dirty map needs at least two page-index bits above the
    in-page word index)."""
    if not isinstance(size, int) or size & (size - 1) or size < (LANES << (_PW + 7)):
        raise ValueError(f"host memory size must be a power of two >= 512 KiB, not {size}")
    return (size // LANES).bit_length() - 1


# --------------------------------------------------------------------------
# HDL: the AXI4 side
# --------------------------------------------------------------------------
class HostMemAxi(wiring.Component):
    """AXI4 subordinate with ``AxiRamOneTask``'s timing (module docstring), on the ports of
    the storage: ``we<i>``/``wa<i>``/``wd<i>`` (two write ports: byte enables, word
    address, data), ``re``/``ra``/``rd`` (one read port, data the edge after ``re``).
    ``err`` goes high (and stays) at an AXI transfer the model does not cover."""

    def __init__(self):
        super().__init__({
            "axi": In(Axi4Signature(ADDR_WIDTH, DATA_WIDTH, ID_WIDTH)),
            "we0": Out(LANES), "wa0": Out(WORD_BITS), "wd0": Out(DATA_WIDTH),
            "we1": Out(LANES), "wa1": Out(WORD_BITS), "wd1": Out(DATA_WIDTH),
            "re": Out(1), "ra": Out(WORD_BITS), "rd": In(DATA_WIDTH),
            "err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        axi = self.axi

        def regs(prefix, **widths):
            return {k: Signal(w, name=f"{prefix}_{k}") for k, w in widths.items()}

        def sel(c, a, b):
            return {k: Mux(c, a[k], b[k]) for k in a}

        def store(dst, src):
            m.d.sync += [dst[k].eq(src[k]) for k in dst]

        addr_f = dict(id=ID_WIDTH, addr=ADDR_WIDTH, len=8, size=3, burst=2)
        burst_f = dict(act=1, id=ID_WIDTH, addr=WORD_BITS, left=9)
        errs = []

        def bad_start(e):
            """The burst ``e`` (AR/AW fields) is one the model does not cover."""
            aligned = e["addr"][3:12]                  # (addr & 0xfff) // 8
            beats = e["len"] + 1
            return (e["size"] != 3) | (e["burst"] != _INCR) | (aligned + beats > 512)

        def new_burst(e):
            return dict(act=Const(1, 1), id=e["id"], addr=e["addr"][3:], left=e["len"] + 1)

        def queue_push(q, n, take, beat):
            """(entries, count) of a 2-deep queue after appending ``beat`` if ``take``."""
            e0 = sel(take & (n == 0), beat, q[0])
            e1 = sel(take & (n == 1), beat, q[1])
            return [e0, e1], n + take

        def queue_pop(q, n, take):
            return [sel(take, q[1], q[0]), q[1]], n - take

        def start_burst(go, cur, q, n):
            """A process step: with no burst active, take the next address beat from the
            queue ``q`` (``n`` entries) or stop (``go`` falls).  Returns go, cur, q, n."""
            need = go & ~cur["act"]
            start = need & (n != 0)
            errs.append(start & bad_start(q[0]))
            go = go & ~(need & (n == 0))
            cur = sel(start, new_burst(q[0]), cur)
            q, n = queue_pop(q, n, start)
            return go, cur, q, n

        def next_beat(go, cur):
            """The burst ``cur`` after one beat if ``go``."""
            return sel(go, dict(act=cur["left"] != 1, id=cur["id"], addr=cur["addr"] + 1,
                                left=cur["left"] - 1), cur)

        # ---- registers -------------------------------------------------------------
        arq = [regs(f"arq{i}", **addr_f) for i in range(2)]
        arq_n = Signal(range(3))
        awq = [regs(f"awq{i}", **addr_f) for i in range(2)]
        awq_n = Signal(range(3))
        wq = [regs(f"wq{i}", data=DATA_WIDTH, strb=LANES, last=1) for i in range(2)]
        wq_n = Signal(range(3))
        rq = [regs(f"rq{i}", id=ID_WIDTH, addr=WORD_BITS, last=1) for i in range(2)]
        rq_n = Signal(range(3))
        bq = [regs(f"bq{i}", id=ID_WIDTH) for i in range(2)]
        bq_n = Signal(range(3))
        rb = regs("rb", **burst_f)                     # the read burst under way
        wb = regs("wb", **burst_f)                     # the write burst under way
        pend = regs("pend", valid=1, id=ID_WIDTH)      # its B, waiting for room in bq
        arready, awready, wready = Signal(), Signal(), Signal()
        rvalid, rid, rlast = Signal(), Signal(ID_WIDTH), Signal()
        bvalid, bid = Signal(), Signal(ID_WIDTH)
        err = Signal()
        m.d.comb += [axi.arready.eq(arready), axi.awready.eq(awready), axi.wready.eq(wready),
                     axi.rvalid.eq(rvalid), axi.rid.eq(rid), axi.rlast.eq(rlast),
                     axi.rdata.eq(self.rd), axi.rresp.eq(0),
                     axi.bvalid.eq(bvalid), axi.bid.eq(bid), axi.bresp.eq(0),
                     self.err.eq(err)]

        # ---- phase A: the channel models, at the edge -------------------------------
        # AR, AW, W sinks: take the beat, then ready = the queue not full
        ar_in = dict(id=axi.arid, addr=axi.araddr, len=axi.arlen, size=axi.arsize,
                     burst=axi.arburst)
        aw_in = dict(id=axi.awid, addr=axi.awaddr, len=axi.awlen, size=axi.awsize,
                     burst=axi.awburst)
        w_in = dict(data=axi.wdata, strb=axi.wstrb, last=axi.wlast)
        ar_q, ar_n = queue_push(arq, arq_n, arready & axi.arvalid, ar_in)
        aw_q, aw_n = queue_push(awq, awq_n, awready & axi.awvalid, aw_in)
        w_q, w_n = queue_push(wq, wq_n, wready & axi.wvalid, w_in)
        m.d.sync += [arready.eq(ar_n < 2), awready.eq(aw_n < 2), wready.eq(w_n < 2)]
        # R source: its next beat (data from the read port) when taken or not valid
        r_go = ~rvalid | axi.rready
        r_pop = r_go & (rq_n != 0)
        with m.If(r_go):
            m.d.sync += rvalid.eq(rq_n != 0)
        with m.If(r_pop):
            m.d.sync += [rid.eq(rq[0]["id"]), rlast.eq(rq[0]["last"])]
        m.d.comb += [self.re.eq(r_pop), self.ra.eq(rq[0]["addr"])]
        r_q, r_n = queue_pop(rq, rq_n, r_pop)
        # B source
        b_go = ~bvalid | axi.bready
        b_pop = b_go & (bq_n != 0)
        with m.If(b_go):
            m.d.sync += bvalid.eq(bq_n != 0)
        with m.If(b_pop):
            m.d.sync += bid.eq(bq[0]["id"])
        b_q, b_n = queue_pop(bq, bq_n, b_pop)

        # ---- phase B: the read process, to its next wait ----------------------------
        # (each pass that does not stop queues one R beat: three passes cover the 2-deep
        # R queue; the third always stops)
        go = Const(1, 1)
        cur = dict(rb)
        for _ in range(3):
            go, cur, ar_q, ar_n = start_burst(go, cur, ar_q, ar_n)
            go = go & (r_n < 2)
            beat = dict(id=cur["id"], addr=cur["addr"], last=cur["left"] == 1)
            r_q, r_n = queue_push(r_q, r_n, go, beat)
            cur = next_beat(go, cur)
        store(rb, cur)
        for i in range(2):
            store(arq[i], ar_q[i])
            store(rq[i], r_q[i])
        m.d.sync += [arq_n.eq(ar_n), rq_n.eq(r_n)]

        # ---- phase B: the write process, to its next wait ---------------------------
        # (each pass that does not stop consumes one W beat: at most two, the W queue is
        # 2 deep; the third pass always stops)
        go = Const(1, 1)
        cur, p = dict(wb), dict(pend)
        ports = [(self.we0, self.wa0, self.wd0), (self.we1, self.wa1, self.wd1)]
        for i in range(3):
            has_p = go & p["valid"]
            go = go & ~(has_p & (b_n >= 2))
            push_b = has_p & go
            b_q, b_n = queue_push(b_q, b_n, push_b, dict(id=p["id"]))
            p = dict(valid=p["valid"] & ~push_b, id=p["id"])
            go, cur, aw_q, aw_n = start_burst(go, cur, aw_q, aw_n)
            go = go & (w_n != 0)
            beat = w_q[0]
            errs.append(go & (beat["last"] != (cur["left"] == 1)))
            if i < 2:
                we, wa, wd = ports[i]
                m.d.comb += [we.eq(Mux(go, beat["strb"], 0)), wa.eq(cur["addr"]),
                             wd.eq(beat["data"])]
            else:
                errs.append(go)                        # never: the W queue is empty by now
            w_q, w_n = queue_pop(w_q, w_n, go)
            done = go & (cur["left"] == 1)
            p = sel(done, dict(valid=Const(1, 1), id=cur["id"]), p)
            cur = next_beat(go, cur)
        store(wb, cur)
        store(pend, p)
        for i in range(2):
            store(awq[i], aw_q[i])
            store(wq[i], w_q[i])
            store(bq[i], b_q[i])
        m.d.sync += [awq_n.eq(aw_n), wq_n.eq(w_n), bq_n.eq(b_n)]
        with m.If(Cat(*errs).any()):
            m.d.sync += err.eq(1)
        return m


def hostmem_verilog() -> Path:
    """Verilog of :class:`HostMemAxi` as module :data:`HOSTMEM_MODULE` (build cache)."""
    from .rtlsim import cached_verilog

    hm = HostMemAxi()
    path = cached_verilog(hm, HOSTMEM_MODULE, "HostMemAxi")
    hm._MustUse__silence = True          # a cache hit never elaborates it
    return path


# --------------------------------------------------------------------------
# HDL: the storage
# --------------------------------------------------------------------------
def _ram_text() -> str:
    rb = _RW_BITS
    lines = [
        f"// {RAM_MODULE}: the co-simulation's host memory (mrcnic.sim.hostmem_hdl)",
        f"// mem: rows of {ROW_WORDS} 64-bit words (word i of a row in bits 64*i+63:64*i), so that",
        "// Python reads a row with one simulator call",
        f"module {RAM_MODULE} #(parameter AW = 22) (",
        "  input clk,",
        f"  input [{LANES - 1}:0] we0, input [{WORD_BITS - 1}:0] wa0, "
        f"input [{DATA_WIDTH - 1}:0] wd0,",
        f"  input [{LANES - 1}:0] we1, input [{WORD_BITS - 1}:0] wa1, "
        f"input [{DATA_WIDTH - 1}:0] wd1,",
        f"  input re, input [{WORD_BITS - 1}:0] ra, output reg [{DATA_WIDTH - 1}:0] rd);",
        # the metacomments make both arrays visible to cocotb under Verilator
        f"  reg [{ROW_WORDS * DATA_WIDTH - 1}:0] mem [0:(1 << (AW - {rb})) - 1]"
        " /*verilator public_flat_rw*/;",
        f"  reg [63:0] dirty [0:(1 << (AW - {_PW + 6})) - 1] /*verilator public_flat_rw*/;"
        "  // one bit per 4 KiB page the NIC wrote",
        "  integer i;",
        "  initial begin",
        "    rd = 0;",
        f"    for (i = 0; i < (1 << (AW - {rb})); i = i + 1) mem[i] = 0;",
        f"    for (i = 0; i < (1 << (AW - {_PW + 6})); i = i + 1) dirty[i] = 0;",
        "  end",
        "  always @(posedge clk) begin",
        f"    if (re) rd <= mem[ra[AW - 1:{rb}]][ra[{rb - 1}:0] * {DATA_WIDTH} +: {DATA_WIDTH}];",
    ]
    for p in (0, 1):
        for b in range(LANES):
            lines.append(f"    if (we{p}[{b}]) mem[wa{p}[AW - 1:{rb}]][wa{p}[{rb - 1}:0] * "
                         f"{DATA_WIDTH} + {8 * b} +: 8] <= wd{p}[{8 * b + 7}:{8 * b}];")
        lines.append(f"    if (|we{p}) dirty[wa{p}[AW - 1:{_PW + 6}]][wa{p}[{_PW + 5}:{_PW}]] "
                     "<= 1'b1;")
    lines += ["  end", "endmodule", ""]
    return "\n".join(lines)


def ram_verilog() -> Path:
    """The storage module's Verilog (:data:`RAM_MODULE`, parameter ``AW``), in the build
    cache under a name that hashes its text."""
    from .rtlsim import cached_text

    return cached_text(RAM_MODULE, _ram_text())


# --------------------------------------------------------------------------
# Python: the backdoor (inside the cocotb test)
# --------------------------------------------------------------------------
class HdlHostMem:
    """One NIC's HDL host memory as a cocotbext-axi ``Memory`` (``size``, ``read``,
    ``write``), read and written through the simulator's handles of the storage's ``mem``
    and ``dirty`` arrays (``ram``: the storage instance's cocotb handle), at once, in the
    current timestep.

    ``mem`` (this object's attribute, as on ``AxiRam``) is a copy of the memory as Python
    wrote it: the memory's content in every page whose ``dirty`` bit is clear (the HDL
    memory starts at zero, as the Python model's).  :meth:`read` takes the words of dirty
    pages from the HDL (refreshing the copy), :meth:`write` writes both.
    """

    def __init__(self, ram, size: int):
        self.size = size
        self.aw = ram_address_bits(size)
        self.mem = mmap.mmap(-1, size)
        self._rows = ram.mem._handle
        self._dirty = ram.dirty._handle
        self._rh, self._dh = {}, {}
        self._fmt = f"0{ROW_WORDS * DATA_WIDTH}b"

    def _row(self, i: int):
        """The GPI handle of storage row ``i`` (:data:`ROW_BYTES` bytes)."""
        h = self._rh.get(i)
        if h is None:
            h = self._rh[i] = self._rows.get_handle_by_index(i)
        return h

    def _dirty_word(self, i: int) -> int:
        h = self._dh.get(i)
        if h is None:
            h = self._dh[i] = self._dirty.get_handle_by_index(i)
        return int(h.get_signal_val_binstr(), 2)

    def _dirty_pages(self, lo: int, hi: int) -> list[int]:
        """The pages the NIC wrote among those holding bytes ``lo .. hi - 1``."""
        p0, p1 = lo // PAGE_BYTES, (hi - 1) // PAGE_BYTES
        out = []
        for wi in range(p0 >> 6, (p1 >> 6) + 1):
            bits = self._dirty_word(wi)
            while bits:
                b = (bits & -bits).bit_length() - 1
                bits &= bits - 1
                p = (wi << 6) | b
                if p0 <= p <= p1:
                    out.append(p)
        return out

    def _refresh(self, lo: int, hi: int):
        """Copy the rows holding ``lo .. hi - 1`` in pages the NIC wrote from the HDL (rows
        never cross a page; the HDL holds every byte Python wrote too)."""
        mem, rb = self.mem, ROW_BYTES
        for p in self._dirty_pages(lo, hi):
            a = max(lo, p * PAGE_BYTES) // rb
            b = -(-min(hi, (p + 1) * PAGE_BYTES) // rb)
            for r in range(a, b):
                v = int(self._row(r).get_signal_val_binstr(), 2)
                mem[r * rb:(r + 1) * rb] = v.to_bytes(rb, "little")

    def _check(self, address: int, length: int):
        if address < 0 or length < 0 or address + length > self.size:
            raise ValueError(f"host memory access {address:#x}+{length} outside "
                             f"0..{self.size:#x}")

    def read(self, address: int, length: int) -> bytes:
        self._check(address, length)
        if length:
            self._refresh(address, address + length)
        return self.mem[address:address + length]

    def write(self, address: int, data) -> None:
        data = bytes(data)
        self._check(address, len(data))
        if not data:
            return
        lo, hi = address, address + len(data)
        rb = ROW_BYTES
        # the partial rows at either end keep the HDL's other bytes
        self._refresh(lo // rb * rb, -(-hi // rb) * rb)
        self.mem[lo:hi] = data
        # GPI "no delay" (cocotb's _GPISetAction.NO_DELAY): the row holds the bytes at once,
        # so a read or a second write of the same row in this timestep sees them (a DEPOSIT,
        # 0, is applied later: a second write re-read the old row and lost the first)
        put = 3
        fmt, mem = self._fmt, self.mem
        for r in range(lo // rb, -(-hi // rb)):
            v = int.from_bytes(mem[r * rb:(r + 1) * rb], "little")
            self._row(r).set_signal_val_binstr(put, format(v, fmt))
