"""CSR bank: the AXI4-Lite subordinate generated from the register map (``mrcnic.regmap``).

The one description in ``mrcnic/regmap.py`` gives every register, field,
reset value and legal value; this module turns it into hardware, the firmware
client (``mrcnic.fw.client``) and ``docs/register-map.md`` are generated from
the same description, so none of them can disagree on an address.

FPGA cost notes (ECP5): register writes load each byte lane straight from the
bus word (the lane strobe is the flip-flop's clock enable, no per-bit merge);
RW registers read back from a copy in 32-bit distributed RAM written alongside
them (one read port instead of a multiplexer over all their flip-flops; the serial
table window takes its ``TBL_DATA`` words from it too); the other registers are
read by decoding a registered word address through a binary multiplexer tree on the
address bits that tell them apart (unmapped words are don't-care in the tree, and
answer 0 through a separate full decode), registered below its top levels.  With
``table_serial`` the table window moves one 32-bit word per cycle, so the
tables behind it can live in 32-bit block RAM and ``TBL_DATA*`` has one shared
load path instead of a record-wide multiplexer per table.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
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
    write executes two cycles after both are present (the first registers that
    a write is going, so the address decode has its own cycle) and ``bvalid`` follows
    one cycle later (a table command answers after the entry has moved, see
    below).  A read is accepted only while no complete write is waiting to
    execute; the read address is registered, the register is sampled in the
    next cycle (``ext_latency`` cycles later with ``external`` registers,
    default :attr:`EXT_LATENCY` = 2) and ``rvalid`` follows two cycles after the
    sample (3 cycles after the AR handshake, 3 + ``ext_latency`` with ``external``).  Responses hold until ``bready`` /
    ``rready``.  Address bits 1:0 are ignored; byte strobes are honoured.
    For the first 16..64 cycles after reset (the depth of the RW readback copy,
    which is rewritten with the reset values meanwhile) no transaction is
    accepted (``awready``, ``wready``, ``arready`` low).

    * unknown address: SLVERR (resp 2, ``rdata`` 0) on read and write, nothing changes;
    * write to an RO register: OKAY, ignored, ``RO_WRITE_ATTEMPTS`` += 1;
    * write with an illegal value in a field that lists its values (enum,
      range): SLVERR, nothing changes, no strobe;
    * ``TBL_CMD`` with an index >= the table's depth, a WRITE to a read-only
      table, or an undefined op: SLVERR, no strobe.

    Table window, parallel (default): a WRITE pulses ``<t>_w_en`` with the
    record on ``<t>_w_data`` and answers one cycle later; a READ pulses
    ``<t>_rd_en``, captures ``<t>_rd_data`` into ``TBL_DATA*``
    ``table_read_latency`` cycles after the pulse and then answers.

    Table window, serial (``table_serial=True``; the ``<t>_rd_data`` ports are
    replaced by one 32-bit word port): a WRITE pulses ``<t>_w_en`` (the record
    is on ``<t>_w_data`` as before) and, from that same cycle on, steps
    ``tbl_word`` through 0 .. ``data_words`` - 1, one word per cycle, with
    ``tbl_w_step`` high for the words the table has and ``tbl_w_word`` =
    that ``TBL_DATA`` word with the bits above the record width cleared
    (``data_words`` + 2 cycles to ``bvalid``).  A READ pulses ``<t>_rd_en``;
    ``table_read_latency`` + 1 cycles after the pulse it starts stepping
    ``tbl_word`` through the words (``tbl_r_step`` high) and loads ``tbl_rd_word`` one cycle after each
    step (``table_word_latency`` cycles after it) into that ``TBL_DATA`` word (a
    synchronous memory read port addressed by ``tbl_word`` fits); words beyond the
    table's record are loaded with 0.
    While ``busy`` is high no write executes (the AW/W latches wait, and so
    does a read behind a waiting write), so the keeper of the tables can finish
    work that follows a command.

    Parameters
    ----------
    regmap : RegMap
        The description (default :data:`mrcnic.regmap.REGMAP`).
    table_read_latency : int
        Cycles from ``<t>_rd_en`` high to ``<t>_rd_data`` valid (1..16; 1 =
        an ``amaranth.lib.memory`` synchronous read port enabled by ``rd_en``).
        In serial mode: cycles from ``<t>_rd_en`` high to the first word step.
    table_serial : bool
        Serial table window (see above).
    table_word_latency : int
        Serial mode: cycles from a read step to its word on ``tbl_rd_word`` (1 = a
        synchronous memory read port addressed by ``tbl_word``; 2..4 = more registers).
    external : iterable of str
        Names of RO registers read through the shared ``ext_rd_data`` port
        instead of ports of their own (for a keeper that computes the value
        of the register being read, e.g. a sum of counters).
    ext_latency : int
        With ``external``: cycles from ``rd_stb`` to the sample of ``ext_rd_data``
        (2..64, default :attr:`EXT_LATENCY`); it lengthens every read.

    Attributes
    ----------
    s_axil : In(Axi4LiteSignature(16, 32))
        AXI4-Lite subordinate (Verilog ``s_axil__awaddr`` ...).
    <reg>_<field> : Out(width)
        RW, WO and CMD fields (registered; RW/WO reset to the field's reset).
        A field named ``value`` is just ``<reg>``.  Names are lower case.
    <reg>_<field> : In(width)
        RO fields (sampled in the read's sample cycle), except ``const``/``internal``
        registers, which have no ports, and ``external`` ones.
    <reg>_stb : Out(1)
        CMD registers: one-cycle strobe the cycle after the write; the fields
        hold the written values from that cycle on.
    <reg>_rd_stb : Out(1)
        RO registers marked pop (``read_strobe``): one-cycle pulse in the
        cycle the register's value is sampled (pop the queue behind it: the
        sampled value is the head before the pop); from a flip-flop.
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
        Parallel mode only: the entry read; captured into ``TBL_DATA*``
        ``table_read_latency`` cycles after ``<t>_rd_en``.
    tbl_sel : Out(3)
        Serial mode: the selected table (``TBL_SELECT``).
    tbl_word : Out(range(data_words))
        Serial mode: word index of the current step (0 when idle).
    tbl_w_step, tbl_w_word : Out(1), Out(32)
        Serial mode: store ``tbl_w_word`` as word ``tbl_word`` of entry
        ``<t>_addr`` of table ``tbl_sel``.
    tbl_r_step : Out(1)
        Serial mode: a read step (the word is loaded from ``tbl_rd_word`` next cycle).
    tbl_rd_word : In(32)
        Serial mode: word ``tbl_word`` of the read step ``table_word_latency`` cycles ago.
    busy : In(1)
        Serial mode: hold off the next write while high.
    rd_addr : Out(14)
        With ``external``: word address (byte offset / 4) of the register
        being read, valid from the cycle after the AR handshake to ``rvalid``.
    rd_stb : Out(1)
        With ``external``: high in the first cycle of ``rd_addr`` (the cycle after the
        AR handshake; every read, of any register), from a flip-flop.
    ext_rd_data : In(32)
        With ``external``: value of the ``external`` register at ``rd_addr``,
        sampled ``ext_latency`` cycles after the ``rd_stb`` cycle (the keeper may
        register ``ext_latency`` times).
    irq : Out(1)
        OR of ``IRQ_STATUS & IRQ_ENABLE`` (fields matched by name).
    """

    def __init__(self, regmap: RegMap = REGMAP, table_read_latency: int = 1, *,
                 table_serial: bool = False, table_word_latency: int = 1, external=(),
                 ext_latency: int = 2):
        if not isinstance(regmap, RegMap):
            raise ValueError(f"regmap must be a mrcnic.regmap.RegMap, not {type(regmap).__name__}")
        if not (isinstance(table_read_latency, int) and 1 <= table_read_latency <= 16):
            raise ValueError(f"table_read_latency must be 1..16 cycles, not {table_read_latency!r}")
        if table_word_latency not in (1, 2, 3, 4):
            raise ValueError(f"table_word_latency must be 1..4 cycles, not {table_word_latency!r}")
        if regmap.addr_width != 16 or regmap.data_width != 32:
            raise ValueError("CsrBank supports 16-bit addresses and 32-bit data only")
        if regmap.tables:
            for name in ("TBL_SELECT", "TBL_INDEX", "TBL_CMD"):
                if name not in regmap or not regmap[name].internal:
                    raise ValueError(f"a map with tables needs the internal register {name}")
            for t in regmap.tables:
                if t.depth > 256:
                    raise ValueError(f"table {t.name}: depth {t.depth} > 256")
        elif table_serial:
            raise ValueError("table_serial needs a map with tables")
        external = frozenset(external)
        if not (isinstance(ext_latency, int) and 2 <= ext_latency <= 64):
            raise ValueError(f"ext_latency must be 2..64 cycles, not {ext_latency!r}")
        for name in sorted(external):
            if name not in regmap:
                raise ValueError(f"external register {name} is not in the map")
            r = regmap[name]
            if r.access is not Access.RO or r.internal or r.const or r.read_strobe:
                raise ValueError(f"external register {name} must be a plain RO register")
        self.regmap, self.table_read_latency = regmap, table_read_latency
        self.table_serial, self.external = bool(table_serial), external
        self.table_word_latency = table_word_latency
        self.ext_latency = ext_latency
        members = {"s_axil": In(Axi4LiteSignature(regmap.addr_width, regmap.data_width))}
        for r in regmap.registers:
            if r.internal or r.const or r.name in external:
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
            if not table_serial:
                members[f"{t.name}_rd_data"] = In(_shape(t))
            if t.writable:
                members[f"{t.name}_w_en"] = Out(1)
                members[f"{t.name}_w_data"] = Out(_shape(t))
        if table_serial:
            members.update({
                "tbl_sel": Out(3), "tbl_word": Out(range(regmap.data_words)),
                "tbl_w_step": Out(1), "tbl_w_word": Out(32), "tbl_r_step": Out(1),
                "tbl_rd_word": In(32), "busy": In(1),
            })
        if external:
            members["rd_addr"] = Out(regmap.addr_width - 2)
            members["rd_stb"] = Out(1)
            members["ext_rd_data"] = In(32)
        self._irq = "IRQ_STATUS" in regmap and "IRQ_ENABLE" in regmap
        if self._irq:
            members["irq"] = Out(1)
        super().__init__(members)

    # ------------------------------------------------------------------------------------
    def elaborate(self, platform):
        m = Module()
        rm, axil = self.regmap, self.s_axil
        abits = rm.addr_width - 2

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
            if r.name in self.external:
                return None
            return getattr(self, r.port_name(f))

        def readback(r):
            if r.const:
                return Const(r.reset, 32)
            if r.name == "RO_WRITE_ATTEMPTS" and r.internal:
                return ro_writes
            if r.name in self.external:
                return self.ext_rd_data
            if r.access in (Access.WO, Access.CMD):
                return Const(0, 32)
            v = Const(0, 32)
            for f in r.fields:
                s = src(r, f)
                if s is not None:
                    v = v | (Value.cast(s).as_unsigned() << f.lsb)
            return v[:32]

        # ---- strobes default low ---------------------------------------------------------
        for r in rm.registers:
            if r.access is Access.CMD and not r.internal:
                m.d.sync += getattr(self, r.name.lower() + "_stb").eq(0)
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

        # ---- RW readback shadow -----------------------------------------------------------
        # RW registers read back from a 32-bit distributed-RAM copy written alongside them
        # (one read port instead of a multiplexer over all their flip-flops); the copy also
        # gives the serial table window its TBL_DATA word.  It holds each register's value
        # (reserved bits 0); after reset it is rewritten with the reset values, one word a
        # cycle, while the bank accepts no transaction.
        self._shadow = sh = self._shadow_plan(m)
        if sh is not None:
            shm = sh["mem"]
            sh_w, sh_r = shm.write_port(granularity=8), shm.read_port(domain="comb")
            depth = shm.depth
            init_busy = Signal(init=1, name="sh_init_busy")
            init_cnt = Signal(range(depth), name="sh_init_cnt")
            with m.If(init_busy):
                m.d.sync += init_cnt.eq(init_cnt + 1)
                with m.If(init_cnt == depth - 1):
                    m.d.sync += init_busy.eq(0)
            # read address (registered): the read's register, or the serial write's TBL_DATA word
            raddr = Signal(range(depth), name="sh_raddr")
            m.d.comb += sh_r.addr.eq(raddr)
            sh.update(we=Signal(name="sh_we"), rd_data=sh_r.data, init_busy=init_busy,
                      idx_r=raddr, hit_r=Signal(name="sh_hit_r"),
                      w=sh_w, r=sh_r, init_cnt=init_cnt)

        # ---- table window ----------------------------------------------------------------
        tw = None
        if rm.tables:
            sel = store["TBL_SELECT", "table"]
            index = store["TBL_INDEX", "value"]
            words = Cat(*(store[f"TBL_DATA{i}", "value"] for i in range(rm.data_words)))
            for t in rm.tables:
                m.d.comb += getattr(self, f"{t.name}_addr").eq(index)
                if t.writable:
                    m.d.comb += getattr(self, f"{t.name}_w_data").eq(words[:t.width])
            tw = {"wait": Signal(range(self.table_read_latency + 1), name="tbl_wait"), "shadow": sh,
                  "oob": Signal(name="tbl_oob")}
            # TBL_INDEX >= the selected table's depth (a flag per table: the high index bits
            # set, no compare), registered: TBL_SELECT / TBL_INDEX change only in a WRITE
            # state, and BRESP and IDLE lie between it and the cycle _table_cmd's decision
            # is registered in, so the flag is current there (and its compare stays off
            # the decision's path)
            m.d.sync += tw["oob"].eq(Cat(*((sel == t.id.value) & (index >= t.depth)
                                           for t in rm.tables if t.depth < 256)).any())

        # ---- AW / W latches --------------------------------------------------------------
        aw_full, w_full = Signal(), Signal()
        aw_addr = Signal(rm.addr_width)
        w_data, w_strb = Signal(32), Signal(4)
        closed = sh["init_busy"] if sh is not None else Const(0)   # shadow being initialised
        m.d.comb += [axil.awready.eq(~aw_full & ~closed), axil.wready.eq(~w_full & ~closed)]
        with m.If(axil.awvalid & axil.awready):
            m.d.sync += [aw_addr.eq(axil.awaddr), aw_full.eq(1)]
        with m.If(axil.wvalid & axil.wready):
            m.d.sync += [w_data.eq(axil.wdata), w_strb.eq(axil.wstrb), w_full.eq(1)]
        bmask = Cat(*(b.replicate(8) for b in w_strb))

        # ---- read side: registered word address, mux tree, separate full decode ----------
        ar_word = Signal(abits)
        # with external registers: ext_latency more cycles (rd_addr to the sample)
        rd_wait = Signal(range(self.ext_latency + 1))
        sample = Signal()                   # this cycle samples the register at ar_word
        mapped = {r.offset >> 2: r for r in rm.registers}
        # the tree in two registered stages: its subtrees (sample cycle), then its top
        # RD_SPLIT levels (next cycle); the RW shadow word joins at the top
        in_tree = [(w, readback(r)) for w, r in sorted(mapped.items())
                   if sh is None or r.name not in sh["index"]]
        groups, top = self._mux_split(ar_word, in_tree, self.RD_SPLIT)
        grp_q = [Signal(32, name=f"rd_grp{i}") for i in range(len(groups))]
        sh_q = Signal(32, name="rd_sh")
        hit_q = Signal(name="rd_hit")
        rvalue = top(grp_q)
        if sh is not None:
            rvalue = Mux(sh["hit_r"], sh_q, rvalue)
        # "a register at this word": per group of 16 words a registered flag, their OR the
        # cycle after (a flat compare against every word is too deep): in the sample cycle and
        # the next, or with external registers in the two READ cycles that wait (hit_q is
        # then a flip-flop and the READ2 multiplexer is shallower)
        rd_hit_grp = self._hit_groups(ar_word, mapped, "rd_hitg")
        rd_hit_q = Signal(len(rd_hit_grp), name="rd_hit_grp")
        if not self.external:
            m.d.comb += hit_q.eq(rd_hit_q.any())
        # pop strobes from flip-flops, set the cycle before the sample: at the AR handshake
        # (from araddr), or with external registers in the last READ cycle that waits
        pops = [r for r in rm.registers if r.read_strobe]
        for r in pops:
            m.d.sync += getattr(self, r.name.lower() + "_rd_stb").eq(0)
        if self.external:
            m.d.comb += self.rd_addr.eq(ar_word)
            m.d.sync += self.rd_stb.eq(0)

        write_ready = aw_full & w_full
        aw_hit = Signal(len(rm.registers))  # WRITE state: register i is addressed (one-hot)
        aw_hit_grp = Signal(len(rd_hit_grp), name="aw_hit_grp")
        self._ok_regs = []                  # legality of the waiting write, registered
        if rm.tables and self.table_serial:
            self._serial_logic(m, sel, store, tw, w_data)
        if sh is not None:
            self._shadow_ports(m, sh, aw_addr, w_data, w_strb, tw)
        if self.table_serial:
            write_ready = write_ready & ~self.busy

        def sh_index(word):
            """Index in the RW readback copy of the register at ``word`` (don't care else)."""
            ws = sorted(sh["index"].items(), key=lambda kv: kv[1])
            return self._mux_tree(word, [(rm[n].offset >> 2, Const(i, len(sh["idx_r"])))
                                         for n, i in ws])

        # "the word is in the copy": per group of 16 words a flag, from araddr at the AR
        # handshake; their OR (hit_r) in the sample cycle
        sh_words = [rm[n].offset >> 2 for n in sh["index"]] if sh is not None else []
        sh_hit_grp = Signal(max(1, len({w >> 4 for w in sh_words})), name="sh_hit_grp")
        # The copy's read address (idx_r) is set from araddr at the AR handshake, or, with
        # external registers (whose wait cycles leave time), from the registered ar_word in
        # the READ cycles that wait.
        with m.FSM():
            with m.State("IDLE"):
                if rm.tables and self.table_serial:     # word 0 of a serial table write
                    m.d.sync += sh["idx_r"].eq(sh["tbl_base"])      # (a read overrides)
                with m.If(write_ready):
                    m.next = "WRITE"        # decode aw_addr in its own cycle (timing)
                    m.d.sync += aw_hit.eq(Cat(*(aw_addr[2:] == r.offset >> 2
                                                for r in rm.registers)))
                    m.d.sync += aw_hit_grp.eq(self._hit_groups(aw_addr[2:], mapped, "aw_hitg"))
                with m.Elif(~(aw_full & w_full) & ~closed):
                    m.d.comb += axil.arready.eq(1)
                    with m.If(axil.arvalid):
                        m.d.sync += [ar_word.eq(axil.araddr[2:]),
                                     rd_wait.eq(self.ext_latency if self.external else 0)]
                        if self.external:
                            m.d.sync += self.rd_stb.eq(1)
                        if not self.external:
                            m.d.sync += [getattr(self, r.name.lower() + "_rd_stb").eq(
                                axil.araddr[2:] == r.offset >> 2) for r in pops]
                        if sh is not None and not self.external:
                            m.d.sync += sh["idx_r"].eq(sh_index(axil.araddr[2:]))
                        if sh is not None:
                            m.d.sync += sh_hit_grp.eq(self._hit_groups(
                                axil.araddr[2:], sh_words, "sh_hitg"))
                        m.next = "READ"
            with m.State("WRITE"):
                m.d.sync += [aw_full.eq(0), w_full.eq(0), axil.bvalid.eq(1),
                             axil.bresp.eq(OKAY)]
                if rm.tables and self.table_serial:     # word 1 of a serial table write
                    m.d.sync += sh["idx_r"].eq(sh["tbl_base"] | 1)
                m.next = "BRESP"
                for i, r in enumerate(rm.registers):     # one-hot: no priority chain
                    with m.If(aw_hit[i]):
                        self._write(m, r, src, store, w_data, w_strb, bmask,
                                    ro_writes, w1c_clear, tw)
                with m.If(~aw_hit_grp.any()):      # no register at aw_addr
                    m.d.sync += axil.bresp.eq(SLVERR)
            with m.State("READ"):
                with m.If(rd_wait != 0):
                    m.d.sync += rd_wait.eq(rd_wait - 1)
                    if sh is not None:      # the RW copy's word, from the registered address
                        m.d.sync += sh["idx_r"].eq(sh_index(ar_word))
                    if self.external:       # (ext_latency >= 2 wait cycles)
                        m.d.sync += [rd_hit_q.eq(rd_hit_grp), hit_q.eq(rd_hit_q.any())]
                    with m.If(rd_wait == 1):        # the cycle before the sample
                        m.d.sync += [getattr(self, r.name.lower() + "_rd_stb").eq(
                            ar_word == r.offset >> 2) for r in pops]
                with m.Else():
                    m.d.comb += sample.eq(1)
                    m.d.sync += [g.eq(self._mux_tree(ar_word, ents)) for g, ents in zip(grp_q, groups)]
                    if not self.external:
                        m.d.sync += rd_hit_q.eq(rd_hit_grp)
                    if sh is not None:
                        m.d.sync += [sh_q.eq(sh["rd_data"]), sh["hit_r"].eq(sh_hit_grp.any())]
                    m.next = "READ2"
            with m.State("READ2"):
                m.d.sync += [axil.rvalid.eq(1),
                             axil.rresp.eq(Mux(hit_q, OKAY, SLVERR)),
                             axil.rdata.eq(Mux(hit_q, rvalue, 0))]
                m.next = "RRESP"
            with m.State("RRESP"):
                with m.If(axil.rready):
                    m.d.sync += axil.rvalid.eq(0)
                    m.next = "IDLE"
            with m.State("BRESP"):
                with m.If(axil.bready):
                    m.d.sync += axil.bvalid.eq(0)
                    m.next = "IDLE"
            if rm.tables and not self.table_serial:
                self._parallel_states(m, sel, store, tw)
            elif rm.tables:
                self._serial_states(m, tw)

        # the legality of the write waiting in the AW/W latches, one cycle before it executes
        # (its inputs -- the latched data and strobes, the register's value -- only change
        # in the WRITE state)
        m.d.sync += self._ok_regs
        if self._irq:
            st, en = rm["IRQ_STATUS"], rm["IRQ_ENABLE"]
            names = {f.name for f in st.fields} & {f.name for f in en.fields}
            m.d.comb += self.irq.eq(Cat(*(getattr(self, st.port_name(st.field(n))) &
                                          getattr(self, en.port_name(en.field(n)))
                                          for n in sorted(names))).any())
        return m

    def _shadow_plan(self, m):
        """The RW registers kept in the readback shadow, their word index, and the memory."""
        rm = self.regmap
        regs = [r for r in rm.registers if r.access is Access.RW and r.name not in self.external]
        tbl = [r for r in regs if r.internal and r.name.startswith("TBL_DATA")]
        if not self.table_serial:       # the parallel window loads TBL_DATA* all at once
            regs = [r for r in regs if r not in tbl]
            tbl = []
        if not regs:
            return None
        others = [r for r in regs if r not in tbl]
        nwp = 1 << (len(tbl) - 1).bit_length() if tbl else 0    # TBL_DATA* block, aligned
        depth = max(16, 1 << (len(others) + nwp - 1).bit_length())
        base = depth - nwp
        index = {r.name: i for i, r in enumerate(others)}
        index.update({f"TBL_DATA{k}": base + k for k in range(len(tbl))})
        init = [0] * depth
        for r in regs:
            init[index[r.name]] = sum(f.reset << f.lsb for f in r.fields) & 0xFFFFFFFF
        m.submodules.rw_shadow = mem = Memory(shape=32, depth=depth, init=init)
        return {"mem": mem, "index": index, "tbl_base": Const(base % depth, range(depth)),
                "init": init}

    def _shadow_ports(self, m, sh, aw_addr, w_data, w_strb, tw):
        """Write port (bus writes, serial TBL_DATA loads, the reset init) and read address."""
        rm, sh_w = self.regmap, sh["w"]
        depth = sh["mem"].depth
        ws = sorted(sh["index"].items(), key=lambda kv: kv[1])
        idx_w = self._mux_tree(aw_addr[2:], [(rm[n].offset >> 2, Const(i, range(depth)))
                                              for n, i in ws])
        mask_w = self._mux_tree(aw_addr[2:], [(rm[n].offset >> 2, Const(rm[n].mask, 32))
                                               for n, _ in ws])
        ld = tw["ld"] if tw is not None and "ld" in tw else Const(0)
        bus = tw["tbl_d"] if tw is not None and "tbl_d" in tw else w_data   # = w_data unless ld
        addr, data, en = idx_w, bus & mask_w, Mux(sh["we"], w_strb, 0)
        if "ld" in (tw or {}):
            addr = Mux(ld, sh["tbl_base"] | tw["ld_k"], addr)
            data = Mux(ld, bus, data)
            en = Mux(ld, 0xF, en)
        rom = self._mux_tree(sh["init_cnt"], [(i, Const(v, 32)) for i, v in enumerate(sh["init"])])
        # the write is registered (it lands one cycle after the register's own write: no read
        # of the shadow comes that early, a response handshake lies between)
        m.d.sync += [
            sh_w.addr.eq(Mux(sh["init_busy"], sh["init_cnt"], addr)),
            sh_w.data.eq(Mux(sh["init_busy"], rom, data)),
            sh_w.en.eq(Mux(sh["init_busy"], 0xF, en)),
        ]


    #: levels of the read multiplexer tree in the second (registered) read stage
    RD_SPLIT = 3

    #: With ``external`` registers: default cycles from ``rd_addr`` valid (the cycle after
    #: the AR handshake) to the sample of ``ext_rd_data`` (room for a registered select and
    #: a registered sum in the keeper); see ``ext_latency``.
    EXT_LATENCY = 2

    @staticmethod
    def _mux_split(addr, entries, levels):
        """The tree of :meth:`_mux_tree` cut below its top ``levels`` levels: returns the
        entry lists of the subtrees and ``top(values)``, the top levels over the subtrees'
        (registered) values in that order."""
        if levels == 0 or len(entries) == 1:
            return [entries], lambda vals: vals[0]
        for b in reversed(range(len(addr))):
            ones = [e for e in entries if e[0] >> b & 1]
            zeros = [e for e in entries if not e[0] >> b & 1]
            if ones and zeros:
                g1, t1 = CsrBank._mux_split(addr, ones, levels - 1)
                g0, t0 = CsrBank._mux_split(addr, zeros, levels - 1)
                n1 = len(g1)
                return g1 + g0, (lambda vals, b=b, t1=t1, t0=t0, n1=n1:
                                 Mux(addr[b], t1(vals[:n1]), t0(vals[n1:])))
        raise AssertionError("two registers at one word address")

    @staticmethod
    def _mux_tree(addr, entries):
        """A binary multiplexer tree over the address bits that separate ``entries``
        (``(word, value)`` pairs); words not listed are don't-care."""
        if len(entries) == 1:
            return Value.cast(entries[0][1])
        for b in reversed(range(len(addr))):
            ones = [e for e in entries if e[0] >> b & 1]
            zeros = [e for e in entries if not e[0] >> b & 1]
            if ones and zeros:
                return Mux(addr[b], CsrBank._mux_tree(addr, ones), CsrBank._mux_tree(addr, zeros))
        raise AssertionError("two registers at one word address")

    # ---- table window states ------------------------------------------------------------
    def _parallel_states(self, m, sel, store, tw):
        rm, axil, wait = self.regmap, self.s_axil, tw["wait"]
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

    def _serial_logic(self, m, sel, store, tw, w_data):
        """Serial window: word counter, word masks and the TBL_DATA load (outside the FSM)."""
        rm = self.regmap
        nw = rm.data_words
        wcnt = Signal(range(nw), name="tbl_wcnt")
        cap, cap_k = Signal(name="tbl_cap"), Signal(range(nw), name="tbl_cap_k")
        # the selected table's word count, last word index and the record bits of its last
        # word, registered from TBL_SELECT (a TBL_CMD write comes at least two cycles after
        # the TBL_SELECT write it depends on): word wcnt's mask is all ones before the last
        # word, ``last_mask`` at it, 0 beyond (a compare of wcnt, not a table lookup)
        t_words = Signal(range(nw + 1), name="tbl_words")     # words of the selected table
        last_k = Signal(range(nw), name="tbl_last_k")
        last_mask = Signal(32, name="tbl_last_mask")
        with m.Switch(sel):
            for t in rm.tables:
                with m.Case(t.id.value):
                    k = t.words - 1
                    m.d.sync += [t_words.eq(t.words), last_k.eq(k),
                                 last_mask.eq(((1 << t.width) - 1) >> 32 * k & 0xFFFFFFFF)]
            with m.Default():
                m.d.sync += [t_words.eq(0), last_k.eq(0), last_mask.eq(0)]
        w_mask = Signal(32, name="tbl_w_mask")
        w_ok = Signal(name="tbl_w_ok")
        m.d.comb += [w_mask.eq(Mux(wcnt < last_k, 0xFFFFFFFF, Mux(wcnt == last_k, last_mask, 0))),
                     w_ok.eq(wcnt < t_words)]
        # TBL_DATA word wcnt for a serial write: read from the RW shadow one cycle ahead
        # into a register (its read address runs a word ahead of wcnt, see TWSTEP)
        sh_wq = Signal(32, name="tbl_sh_word")
        m.d.sync += sh_wq.eq(tw["shadow"]["rd_data"])
        m.d.comb += [
            self.tbl_sel.eq(sel), self.tbl_word.eq(wcnt),
            self.tbl_w_word.eq(sh_wq & w_mask),
        ]
        # serial load of TBL_DATA: the word read table_word_latency cycles after its step
        # (0 beyond the record).  Bus writes and loads share one data input (tbl_d).
        tbl_d = Signal(32, name="tbl_d")
        cap_ok = Signal(name="tbl_cap_ok")          # the step's word is in the record
        m.d.sync += cap.eq(0)
        step_q, step_k, step_ok = cap, cap_k, cap_ok    # the step, one cycle later
        for i in range(2, self.table_word_latency + 1):
            c, k, ok = (Signal(name=f"tbl_cap{i}"), Signal(range(nw), name=f"tbl_cap{i}_k"),
                        Signal(name=f"tbl_cap{i}_ok"))
            m.d.sync += [c.eq(cap), k.eq(cap_k), ok.eq(cap_ok)]
            cap, cap_k, cap_ok = c, k, ok
        m.d.comb += tbl_d.eq(Mux(cap, Mux(cap_ok, self.tbl_rd_word, 0), w_data))
        # each TBL_DATA byte lane has one load enable (a bus write's strobe, set in the WRITE
        # state by _write, or the serial load of its word) and one data input (tbl_d): the
        # flip-flops' clock enable, no multiplexer in front of them
        lane_we = [Signal(4, name=f"tbl_data{k}_we") for k in range(nw)]
        for k in range(nw):
            ld_k = cap & (cap_k == k)
            for lane in range(4):
                with m.If(lane_we[k][lane] | ld_k):
                    m.d.sync += store[f"TBL_DATA{k}", "value"][8 * lane:8 * lane + 8].eq(
                        tbl_d[8 * lane:8 * lane + 8])
        tw.update(wcnt=wcnt, w_ok=w_ok, cap=step_q, cap_k=step_k, cap_ok=step_ok, t_words=t_words,
                  tbl_d=tbl_d, lane_we=lane_we,
                  ld=cap, ld_k=cap_k,
                  tail=Signal(range(self.table_word_latency), name="tbl_tail"))

    def _serial_states(self, m, tw):
        rm, axil, wait = self.regmap, self.s_axil, tw["wait"]
        nw = rm.data_words
        wcnt, cap, cap_k, t_words = tw["wcnt"], tw["cap"], tw["cap_k"], tw["t_words"]
        with m.State("TWSTEP"):
            m.d.comb += self.tbl_w_step.eq(tw["w_ok"])
            sh = tw["shadow"]
            m.d.sync += sh["idx_r"].eq(sh["tbl_base"] | (wcnt + 2)[:len(wcnt)])
            m.d.sync += wcnt.eq(wcnt + 1)
            with m.If(wcnt == nw - 1):
                m.d.sync += [wcnt.eq(0), axil.bvalid.eq(1)]
                m.next = "BRESP"
        with m.State("TWAIT"):
            with m.If(wait == 0):
                m.next = "TRSTEP"
            with m.Else():
                m.d.sync += wait.eq(wait - 1)
        tail = tw["tail"]           # cycles until the last word is loaded
        with m.State("TRSTEP"):
            m.d.comb += self.tbl_r_step.eq(1)
            m.d.sync += [cap.eq(1), cap_k.eq(wcnt), tw["cap_ok"].eq(wcnt < t_words),
                         wcnt.eq(wcnt + 1)]
            with m.If(wcnt == nw - 1):
                m.d.sync += [wcnt.eq(0), tail.eq(self.table_word_latency - 1)]
                m.next = "TRLAST"
        with m.State("TRLAST"):
            with m.If(tail == 0):
                m.d.sync += axil.bvalid.eq(1)
                m.next = "BRESP"
            with m.Else():
                m.d.sync += tail.eq(tail - 1)

    # ---- writes ---------------------------------------------------------------------------
    def _write(self, m, r, src, store, w_data, w_strb, bmask, ro_writes, w1c_clear, tw):
        """Statements of a write of ``w_data`` (byte strobes ``w_strb``) to register ``r``."""
        axil = self.s_axil
        if r.access is Access.RO:
            m.d.sync += ro_writes.eq(ro_writes + 1)
            return
        if r.access is Access.W1C:
            clear = w_data & bmask
            for f in r.fields:
                m.d.comb += w1c_clear[r.name, f.name].eq(clear[f.lsb:f.lsb + f.width])
            return
        # legality: only fields that restrict their values need the merged new value
        ok = Const(1)
        for f in r.fields:
            if f.enum is None and f.values is None:
                continue
            old = Const(0, f.width) if r.access is Access.CMD else Value.cast(src(r, f))
            lanes = bmask[f.lsb:f.lsb + f.width]
            new = (old & ~lanes) | (w_data[f.lsb:f.lsb + f.width] & lanes)
            ok = ok & self._legal(f, new)
        if r.name == "TBL_CMD" and r.internal:      # registers its decision (with ok) itself
            new_op = w_data[:2] & bmask[:2]
            self._table_cmd(m, new_op, ok, store, tw)
            return
        if not (isinstance(ok, Const) and ok.value == 1):
            ok_q = Signal(name=f"ok_{r.name.lower()}")
            self._ok_regs.append(ok_q.eq(ok))
            ok = ok_q
        with m.If(ok):
            for f in r.fields:
                dst = src(r, f)
                if r.access is Access.CMD:
                    # a command's unwritten bytes are 0 (its fields are not storage)
                    m.d.sync += dst.eq((w_data & bmask)[f.lsb:f.lsb + f.width])
                    continue
                # storage: each byte lane of the field loads from the bus when strobed
                bus = w_data
                if tw is not None and "lane_we" in tw and r.name.startswith("TBL_DATA"):
                    # serial TBL_DATA: the lane enables of _serial_logic (tbl_d = w_data now)
                    assert f.lsb == 0 and f.width == 32
                    m.d.comb += tw["lane_we"][int(r.name[8:])].eq(w_strb)
                    continue
                for lane in range(4):
                    lo, hi = max(f.lsb, 8 * lane), min(f.lsb + f.width, 8 * lane + 8)
                    if lo >= hi:
                        continue
                    with m.If(w_strb[lane]):
                        m.d.sync += dst[lo - f.lsb:hi - f.lsb].eq(bus[lo:hi])
            if self._shadow is not None and r.name in self._shadow["index"]:
                m.d.comb += self._shadow["we"].eq(1)
            if r.access is Access.CMD:
                m.d.sync += getattr(self, r.name.lower() + "_stb").eq(1)
        with m.Else():
            m.d.sync += axil.bresp.eq(SLVERR)

    @staticmethod
    def _hit_groups(word, mapped, name):
        """Per group of 16 word addresses holding a register: ``word`` is one of them."""
        groups = {}
        for w in mapped:
            groups.setdefault(w >> 4, 0)
            groups[w >> 4] |= 1 << (w & 15)
        flags = []
        for g, bits in sorted(groups.items()):
            with_lo = Const(bits, 16).bit_select(word[:4], 1)
            flags.append((word[4:] == g) & with_lo)
        return Cat(*flags)

    @staticmethod
    def _legal(f, value):
        if f.enum is not None:
            ok = Const(0)
            for mbr in f.enum:
                ok = ok | (value == mbr.value)
            return ok
        if f.values is not None:
            return (value >= f.values.start) & (value < f.values.stop)
        return Const(1)

    def _table_cmd(self, m, op, ok, store, tw):
        """A TBL_CMD write (WRITE state).  What it does is decided the cycle before, while
        the write waits in the AW/W latches (its data, TBL_SELECT and TBL_INDEX do not change
        then: they change only in a WRITE state, and IDLE lies between two), into flip-flops:
        the WRITE state's response and next state then depend on flip-flops only."""
        axil, rm, wait = self.s_axil, self.regmap, tw["wait"]
        sel = store["TBL_SELECT", "table"]
        known = Cat(*(sel == t.id.value for t in rm.tables)).any()
        writable = Cat(*(sel == t.id.value for t in rm.tables if t.writable)).any()
        go = ok & (op != TableOp.NOP.value) & known & ~tw["oob"]
        is_wr = op == TableOp.WRITE.value
        do_wr, do_rd, do_err = (Signal(name=n) for n in ("tbl_do_wr", "tbl_do_rd", "tbl_do_err"))
        self._ok_regs += [
            do_wr.eq(go & is_wr & writable),
            do_rd.eq(go & ~is_wr),
            do_err.eq(~ok | ((op != TableOp.NOP.value) & (~known | tw["oob"] |
                                                         (is_wr & ~writable)))),
        ]
        with m.If(do_err):
            m.d.sync += axil.bresp.eq(SLVERR)
        with m.If(do_wr):
            with m.Switch(sel):
                for t in rm.tables:
                    if t.writable:
                        with m.Case(t.id.value):
                            m.d.sync += getattr(self, f"{t.name}_w_en").eq(1)
            if self.table_serial:
                m.d.sync += axil.bvalid.eq(0)
                m.next = "TWSTEP"
        with m.If(do_rd):
            with m.Switch(sel):
                for t in rm.tables:
                    with m.Case(t.id.value):
                        m.d.sync += getattr(self, f"{t.name}_rd_en").eq(1)
            m.d.sync += [wait.eq(self.table_read_latency), axil.bvalid.eq(0)]
            m.next = "TWAIT"
