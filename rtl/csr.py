"""CSR bank: the AXI4-Lite subordinate generated from the register map (``mrcnic.regmap``).

The one description in ``mrcnic/regmap.py`` gives every register, field,
reset value and legal value; this module turns it into hardware, the firmware
client (``mrcnic.fw.client``) and ``docs/register-map.md`` are generated from
the same description, so none of them can disagree on an address.
"""

from amaranth.hdl import Cat, Const, Module, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..regmap import REGMAP, Access, RegMap, TableOp
from .axi import Axi4LiteSignature

__all__ = ["CsrBank", "OKAY", "SLVERR"]

OKAY = 0     #: AXI response: OKAY
SLVERR = 2   #: AXI response: subordinate error


def _shape(table):
    return table.layout if isinstance(table.layout, int) else data.Layout.cast(table.layout)


class CsrBank(wiring.Component):
    """AXI4-Lite control/status register bank built from a :class:`~mrcnic.regmap.RegMap`.

    Bus behaviour (ARM IHI 0022E, AXI4-Lite): one transaction at a time.
    AW and W are latched independently (they may arrive in any order or cycle;
    ``awready``/``wready`` are high while the respective latch is empty), the
    write executes in the cycle after both are present and ``bvalid`` follows
    one cycle later (a table READ command answers after the entry is loaded,
    ``table_read_latency`` + 2 cycles later).  A read is accepted only while no
    complete write is waiting; ``rvalid`` comes one cycle after the AR
    handshake.  Responses hold until ``bready`` / ``rready``.  Address bits
    1:0 are ignored; byte strobes are honoured.

    * unknown address: SLVERR (resp 2) on read and write, nothing changes;
    * write to an RO register: OKAY, ignored, ``RO_WRITE_ATTEMPTS`` += 1;
    * write with an illegal value in a field that lists its values (enum,
      range): SLVERR, nothing changes, no strobe;
    * ``TBL_CMD`` with an index >= the table's depth, a WRITE to a read-only
      table, or an undefined op: SLVERR, no strobe.

    Parameters
    ----------
    regmap : RegMap
        The description (default :data:`mrcnic.regmap.REGMAP`).
    table_read_latency : int
        Cycles from ``<t>_rd_en`` high to ``<t>_rd_data`` valid (1..8; 1 =
        an ``amaranth.lib.memory`` synchronous read port enabled by ``rd_en``).

    Attributes
    ----------
    s_axil : In(Axi4LiteSignature(16, 32))
        AXI4-Lite subordinate (Verilog ``s_axil__awaddr`` ...).
    <reg>_<field> : Out(width)
        RW, WO and CMD fields (registered; RW/WO reset to the field's reset).
        A field named ``value`` is just ``<reg>``.  Names are lower case.
    <reg>_<field> : In(width)
        RO fields (sampled at the AR handshake), except ``const``/``internal``
        registers, which have no ports.
    <reg>_stb : Out(1)
        CMD registers: one-cycle strobe the cycle after the write; the fields
        hold the written values from that cycle on.
    <reg>_rd_stb : Out(1)
        RO registers marked pop (``read_strobe``): one-cycle pulse the cycle
        after the register was read (pop the queue behind it).
    <reg>_<field>_set : In(width)
        W1C fields: set bits (level or pulse); set wins over a same-cycle clear.
        The status is the Out port ``<reg>_<field>``.
    <t>_addr : Out(8)
        Table ``<t>`` entry index (= ``TBL_INDEX``), for each table of the map.
    <t>_w_data : Out(record)
        The record in ``TBL_DATA*`` (writable tables).
    <t>_w_en : Out(1)
        One-cycle write strobe after ``TBL_CMD`` = WRITE (writable tables).
    <t>_rd_en : Out(1)
        One-cycle read strobe after ``TBL_CMD`` = READ.
    <t>_rd_data : In(record)
        The entry read; captured into ``TBL_DATA*`` ``table_read_latency``
        cycles after ``<t>_rd_en``.
    irq : Out(1)
        OR of ``IRQ_STATUS & IRQ_ENABLE`` (fields matched by name).
    """

    def __init__(self, regmap: RegMap = REGMAP, table_read_latency: int = 1):
        if not isinstance(regmap, RegMap):
            raise ValueError(f"regmap must be a mrcnic.regmap.RegMap, not {type(regmap).__name__}")
        if not (isinstance(table_read_latency, int) and 1 <= table_read_latency <= 8):
            raise ValueError(f"table_read_latency must be 1..8 cycles, not {table_read_latency!r}")
        if regmap.addr_width != 16 or regmap.data_width != 32:
            raise ValueError("CsrBank supports 16-bit addresses and 32-bit data only")
        if regmap.tables:
            for name in ("TBL_SELECT", "TBL_INDEX", "TBL_CMD"):
                if name not in regmap or not regmap[name].internal:
                    raise ValueError(f"a map with tables needs the internal register {name}")
            for t in regmap.tables:
                if t.depth > 256:
                    raise ValueError(f"table {t.name}: depth {t.depth} > 256")
        self.regmap, self.table_read_latency = regmap, table_read_latency
        members = {"s_axil": In(Axi4LiteSignature(regmap.addr_width, regmap.data_width))}
        for r in regmap.registers:
            if r.internal or r.const:
                continue
            for f in r.fields:
                port = r.port_name(f)
                if r.access in (Access.RW, Access.WO, Access.CMD):
                    members[port] = Out(f.width, init=f.reset)
                elif r.access is Access.RO:
                    members[port] = In(f.width)
                else:                                   # W1C
                    members[port] = Out(f.width, init=f.reset)
                    members[port + "_set"] = In(f.width)
            if r.access is Access.CMD:
                members[r.name.lower() + "_stb"] = Out(1)
            if r.read_strobe:
                members[r.name.lower() + "_rd_stb"] = Out(1)
        for t in regmap.tables:
            members[f"{t.name}_addr"] = Out(8)
            members[f"{t.name}_rd_en"] = Out(1)
            members[f"{t.name}_rd_data"] = In(_shape(t))
            if t.writable:
                members[f"{t.name}_w_en"] = Out(1)
                members[f"{t.name}_w_data"] = Out(_shape(t))
        self._irq = "IRQ_STATUS" in regmap and "IRQ_ENABLE" in regmap
        if self._irq:
            members["irq"] = Out(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        rm, axil = self.regmap, self.s_axil

        # Storage of internal registers (no ports) and the bank's own counter.
        store = {}
        for r in rm.registers:
            if r.internal and r.access in (Access.RW, Access.WO):
                for f in r.fields:
                    store[r.name, f.name] = Signal(f.width, init=f.reset,
                                                   name=f"{r.name.lower()}_{f.name}")
        ro_writes = Signal(32)
        w1c_clear = {}

        def src(r, f):
            """The signal holding (RW/WO/CMD/W1C) or providing (RO) field f of r."""
            if r.internal:
                return store.get((r.name, f.name))
            return getattr(self, r.port_name(f))

        def compose(parts):
            v = Const(0, 32)
            for f, s in parts:
                if s is not None:
                    v = v | (Value.cast(s).as_unsigned() << f.lsb)
            return v[:32]

        def readback(r):
            if r.const:
                return Const(r.reset, 32)
            if r.name == "RO_WRITE_ATTEMPTS" and r.internal:
                return ro_writes
            if r.access in (Access.WO, Access.CMD):
                return Const(0, 32)
            return compose((f, src(r, f)) for f in r.fields)

        def legal(f, value):
            if f.enum is not None:
                ok = Const(0)
                for mbr in f.enum:
                    ok = ok | (value == mbr.value)
                return ok
            if f.values is not None:
                return (value >= f.values.start) & (value < f.values.stop)
            return Const(1)

        # ---- strobes default low ---------------------------------------------------------
        for r in rm.registers:
            if r.access is Access.CMD and not r.internal:
                m.d.sync += getattr(self, r.name.lower() + "_stb").eq(0)
            if r.read_strobe:
                m.d.sync += getattr(self, r.name.lower() + "_rd_stb").eq(0)
        for t in rm.tables:
            m.d.sync += getattr(self, f"{t.name}_rd_en").eq(0)
            if t.writable:
                m.d.sync += getattr(self, f"{t.name}_w_en").eq(0)

        # ---- W1C status ------------------------------------------------------------------
        for r in rm.registers:
            if r.access is Access.W1C:
                for f in r.fields:
                    st = getattr(self, r.port_name(f))
                    clr = w1c_clear[r.name, f.name] = Signal(f.width, name=f"{r.port_name(f)}_clr")
                    st_set = getattr(self, r.port_name(f) + "_set")
                    m.d.sync += st.eq((st & ~clr) | st_set)

        # ---- table window ----------------------------------------------------------------
        if rm.tables:
            sel = store["TBL_SELECT", "table"]
            index = store["TBL_INDEX", "value"]
            words = Cat(*(store[f"TBL_DATA{i}", "value"] for i in range(rm.data_words)))
            for t in rm.tables:
                m.d.comb += getattr(self, f"{t.name}_addr").eq(index)
                if t.writable:
                    m.d.comb += getattr(self, f"{t.name}_w_data").eq(words[:t.width])
            wait = Signal(range(self.table_read_latency + 1))

        # ---- AW / W latches --------------------------------------------------------------
        aw_full, w_full = Signal(), Signal()
        aw_addr = Signal(rm.addr_width)
        w_data, w_strb = Signal(32), Signal(4)
        m.d.comb += [axil.awready.eq(~aw_full), axil.wready.eq(~w_full)]
        with m.If(axil.awvalid & ~aw_full):
            m.d.sync += [aw_addr.eq(axil.awaddr), aw_full.eq(1)]
        with m.If(axil.wvalid & ~w_full):
            m.d.sync += [w_data.eq(axil.wdata), w_strb.eq(axil.wstrb), w_full.eq(1)]
        bmask = Cat(*(b.replicate(8) for b in w_strb))

        with m.FSM():
            with m.State("IDLE"):
                with m.If(aw_full & w_full):
                    m.d.sync += [aw_full.eq(0), w_full.eq(0), axil.bvalid.eq(1),
                                 axil.bresp.eq(OKAY)]
                    m.next = "BRESP"
                    with m.Switch(aw_addr[2:]):
                        for r in rm.registers:
                            with m.Case(r.offset >> 2):
                                self._write(m, r, src, store, readback, legal, w_data, bmask,
                                            ro_writes, w1c_clear, wait if rm.tables else None)
                        with m.Default():
                            m.d.sync += axil.bresp.eq(SLVERR)
                with m.Else():
                    m.d.comb += axil.arready.eq(1)
                    with m.If(axil.arvalid):
                        m.d.sync += [axil.rvalid.eq(1), axil.rresp.eq(OKAY)]
                        m.next = "RRESP"
                        with m.Switch(axil.araddr[2:]):
                            for r in rm.registers:
                                with m.Case(r.offset >> 2):
                                    m.d.sync += axil.rdata.eq(readback(r))
                                    if r.read_strobe:
                                        m.d.sync += getattr(self, r.name.lower() + "_rd_stb").eq(1)
                            with m.Default():
                                m.d.sync += [axil.rdata.eq(0), axil.rresp.eq(SLVERR)]
            with m.State("RRESP"):
                with m.If(axil.rready):
                    m.d.sync += axil.rvalid.eq(0)
                    m.next = "IDLE"
            with m.State("BRESP"):
                with m.If(axil.bready):
                    m.d.sync += axil.bvalid.eq(0)
                    m.next = "IDLE"
            if rm.tables:
                with m.State("TWAIT"):
                    with m.If(wait == 0):
                        with m.Switch(sel):
                            for t in rm.tables:
                                with m.Case(t.id.value):
                                    rd = Value.cast(getattr(self, f"{t.name}_rd_data"))
                                    for i in range(rm.data_words):
                                        chunk = rd[32 * i:32 * i + 32] if 32 * i < t.width else 0
                                        m.d.sync += store[f"TBL_DATA{i}", "value"].eq(chunk)
                        m.d.sync += axil.bvalid.eq(1)
                        m.next = "BRESP"
                    with m.Else():
                        m.d.sync += wait.eq(wait - 1)

        if self._irq:
            st, en = rm["IRQ_STATUS"], rm["IRQ_ENABLE"]
            names = {f.name for f in st.fields} & {f.name for f in en.fields}
            m.d.comb += self.irq.eq(Cat(*(getattr(self, st.port_name(st.field(n))) &
                                          getattr(self, en.port_name(en.field(n)))
                                          for n in sorted(names))).any())
        return m

    def _write(self, m, r, src, store, readback, legal, w_data, bmask, ro_writes, w1c_clear, wait):
        """Statements of a write of ``w_data`` (byte mask ``bmask``) to register ``r``."""
        axil = self.s_axil
        if r.access is Access.RO:
            m.d.sync += ro_writes.eq(ro_writes + 1)
            return
        if r.access is Access.W1C:
            clear = w_data & bmask
            for f in r.fields:
                m.d.comb += w1c_clear[r.name, f.name].eq(clear[f.lsb:f.lsb + f.width])
            return
        if r.access is Access.CMD:
            old = Const(0, 32)
        else:
            old = Const(0, 32)
            for f in r.fields:
                old = old | (src(r, f).as_unsigned() << f.lsb)
            old = old[:32]
        new = Signal(32, name=f"{r.name.lower()}_new")
        m.d.comb += new.eq((old & ~bmask) | (w_data & bmask))
        ok = Const(1)
        for f in r.fields:
            ok = ok & legal(f, new[f.lsb:f.lsb + f.width])
        if r.name == "TBL_CMD" and r.internal:
            self._table_cmd(m, new[:2], ok, store, wait)
            return
        with m.If(ok):
            for f in r.fields:
                m.d.sync += src(r, f).eq(new[f.lsb:f.lsb + f.width])
            if r.access is Access.CMD:
                m.d.sync += getattr(self, r.name.lower() + "_stb").eq(1)
        with m.Else():
            m.d.sync += axil.bresp.eq(SLVERR)

    def _table_cmd(self, m, op, ok, store, wait):
        axil, rm = self.s_axil, self.regmap
        sel, index = store["TBL_SELECT", "table"], store["TBL_INDEX", "value"]
        with m.If(~ok):
            m.d.sync += axil.bresp.eq(SLVERR)
        with m.Elif(op != TableOp.NOP.value):
            with m.Switch(sel):
                for t in rm.tables:
                    with m.Case(t.id.value):
                        with m.If(index >= t.depth):
                            m.d.sync += axil.bresp.eq(SLVERR)
                        with m.Elif(op == TableOp.WRITE.value):
                            if t.writable:
                                m.d.sync += getattr(self, f"{t.name}_w_en").eq(1)
                            else:
                                m.d.sync += axil.bresp.eq(SLVERR)
                        with m.Else():
                            m.d.sync += [getattr(self, f"{t.name}_rd_en").eq(1),
                                         wait.eq(self.table_read_latency), axil.bvalid.eq(0)]
                            m.next = "TWAIT"
                with m.Default():
                    m.d.sync += axil.bresp.eq(SLVERR)
