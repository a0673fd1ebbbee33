"""CsrNic: one :class:`~mrcnic.rtl.nic.MRCNic` behind its CSR bank -- the NIC as the firmware sees it.

::

    s_axil (AXI4-Lite 16/32) ──► CsrBank ──┬─► NIC settings, port next hops ──────────► MRCNic config inputs
                                           ├─► table writes ──┬─► MRCNic table ports
                                           │                  └─► shadows (read back through TBL_CMD READ)
                                           ├─► cc + rel tables ──► RelQpConfig per QP ──► MRCNic rel_w_*
                                           ├─► EV_STATE_SET / EV_WEIGHT_SET ──► path-entry read-modify-write
                                           ├─► EV_PROBE_REQ ──► MRCNic.probe_req ; probe_reply ──► EV_PROBE_*
                                           ├─◄ EV events (16-deep queue), per-EV counters (evcnt table)
                                           └─◄ counters, drop counters, IRQ_STATUS ──► irq
    MRCNic.m_axis_p<i> ──► PortAdminGate (PORT_ADMIN.up[i]) ──► m_axis_p<i>

Used by the board tops (``boards/common.py``, behind the UART bridge) and by
the co-simulation (``sim/cosim.py``, behind cocotbext-axi's ``AxiLiteMaster``),
so a simulated NIC and a board are programmed by the same firmware through
the same registers (``mrcnic.regmap``, ``docs/register-map.md``).

Sources: OCP MRC 1.0 controller API (EV profiles, EV states, EV events, EV
probes, CC profiles, port admin state), ARM IHI 0022E (AXI4-Lite).
"""

from amaranth.hdl import C, Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..regmap import build_regmap
from .axi import Axi4LiteSignature, Axi4Signature
from .axis import AxiStreamSignature
from .csr import CsrBank
from .ev_counters import READ_LATENCY as EV_READ_LATENCY
from .layouts import (
    Completion,
    EvEvent,
    EvEventReason,
    EvState,
    PathEntry,
    WorkRequest,
)
from .nic import MRCNic
from .nscc import NsccConfig
from .params import NicParams
from .port_admin import PortAdminGate
from .reliability import RelQpConfig, RelQpParams
from .rx_parser import CNT_RD_LATENCY, N_REASONS, DropReason

__all__ = ["CsrNic", "STATS", "EVENT_DEPTH", "TIED_OFF", "TBL_WORD_LATENCY"]

#: Cycles from a serial read step of the bank to its word on ``tbl_rd_word`` (address
#: register, block RAM, its output register, the merge register).
TBL_WORD_LATENCY = 4

EVENT_DEPTH = 16    #: EV events queued behind ``EV_EVENT`` (more are counted in ``events_lost``)

#: Writable tables whose shadows share one 32-bit memory (``seg`` has one of its own).
SHARED_SHADOWS = ("path", "txqp", "rxqp", "mr", "cc", "rel")

#: What the ``EV_EVENT`` queue keeps of an :class:`~mrcnic.rtl.layouts.EvEvent`.
_EvHead = data.StructLayout({"index": 8, "state": EvState, "reason": EvEventReason})

#: MRCNic counters passed through unchanged (32-bit each; see :class:`~mrcnic.rtl.nic.MRCNic`).
STATS = ("wr_refused", "data_frames", "ack_frames", "acks_received", "placed_bytes", "duplicates",
         "out_of_window", "acks_sent", "accepted", "retransmits", "timeouts", "trim_nacks",
         "ecn_echoes", "clean_acks", "probes_sent", "probe_replies", "ev_events", "evcnt_dropped")

#: Register-map features with no NIC-core source yet (they read 0).
TIED_OFF = (
    "RX_NACKS, TX_RD_ERRORS: read 0 (the core does not count them separately)",
    "MRCNic.avoid (external ECN steering hook): 0; sender reliability steers by itself",
)


class CsrNic(wiring.Component):
    """An MRC NIC with its register interface: :class:`MRCNic` + :class:`CsrBank` + glue.

    Parameters
    ----------
    params : NicParams
        All of the parameters below in one checked set (:class:`~mrcnic.rtl.params.NicParams`),
        instead of the keywords (a keyword given as well must agree with it); passed to the
        core.  ``self.params`` is the set in use either way.
    ports, qps, paths, window : int
        As :class:`~mrcnic.rtl.nic.MRCNic` (planes, QP contexts, path-table
        entries, receive SACK window in PSNs); ``ports`` defaults to 2 here.
    clock_mhz : int
        Core clock reported in ``ID_CLOCK_MHZ`` (MHz, 1..1023, default 125).
    regions : int
        Memory regions reported in ``ID_MAX_REGIONS`` (1..16, default 4; the core holds 4).
    shared_parser : bool
        One receive parser for all planes (:class:`~mrcnic.rtl.nic.MRCNic`); board tops.
    plane_guard : int
        ACK timeouts that make the NIC avoid a whole plane (0 = off;
        :class:`~mrcnic.rtl.plane_guard.PlaneGuard`), as :class:`~mrcnic.rtl.nic.MRCNic`.
    clk_ns : int
        The core clock's period in ns (8 at 125 MHz, 16 at 62.5 MHz), for the sender
        reliability's RTT and timeout clock, as :class:`~mrcnic.rtl.nic.MRCNic`.

    Attributes
    ----------
    s_axil : In(Axi4LiteSignature(16, 32))
        The CSR bank (register map ``self.regmap``; unknown offsets answer SLVERR).
    s_wr, recv_cpl, send_cpl, m_axi : as MRCNic
        Work requests in; receive and send completions out; AXI4 host memory.
    s_axis_p<i>, m_axis_p<i> : In/Out(AxiStreamSignature(64))
        Plane i.  A plane whose ``PORT_ADMIN.up`` bit is 0 sends nothing: its
        frames are consumed and dropped whole (:class:`PortAdminGate`).  The
        reset value of ``PORT_ADMIN`` is 0: provision the NIC first.
    irq : Out(1)
        OR of ``IRQ_STATUS & IRQ_ENABLE``.
    ev_tap, ev_tap_valid : Out(EvEvent), Out(1)
        Every EV event as it enters the ``EV_EVENT`` queue (a one-cycle
        valid), for logs and simulation reports; the firmware pops the queue.
    events_lost : Out(32)
        EV events that found the ``EV_EVENT`` queue full (:data:`EVENT_DEPTH`).
    <stat> : Out(32)
        The :data:`STATS` counters of the core; ``no_path`` Out(1).
    cwnd : Out(ArrayLayout(32, qps))
        NSCC window of each QP, bytes.
    drops_p<i> : Out(ArrayLayout(32, N_REASONS))
        Per-reason drop counters of plane i's parser (also summed over planes
        in ``RX_DROP_*``).

    Register semantics (all table writes also go to a shadow memory, so every
    writable table reads back what was written):

    * the CSR bank runs its table window word-serially (``CsrBank(table_serial=True)``):
      the shadows are 32-bit block RAMs, one word per cycle (``seg``: 1024 words;
      the other writable tables share one memory, a power-of-two region each).  A
      WRITE stores the record in ``data_words`` cycles (the shadows and the core's tables
      take each word from a register of the bank's serial write, one cycle later); a READ
      answers about ``READ_LATENCY`` + 12 cycles after its command (every word read passes
      :data:`TBL_WORD_LATENCY` registers: no block-RAM output feeds logic);
    * ``path`` entries go to every path-table copy of the core (the record is
      collected from the serial write and written whole the cycle after its last
      word); ``EV_STATE_SET`` is the core's state-only update (``pt_st_*``, the
      cycle after the command); ``EV_WEIGHT_SET`` reads the shadow entry word by
      word, changes the weight and writes the entry whole (about 11 cycles; the bank holds
      the next write meanwhile).  Indices >= ``paths`` are ignored.  The EV state
      lives in a separate 2-bit memory that also follows the core's own state
      changes (sender reliability's ASSUMED_BAD / GOOD), so a read shows the state
      the NIC uses and a weight change never writes back a stale state;
    * ``cc`` (NSCC parameters) of a QP applies at once (its window restarts at
      ``init_cwnd``, its PSN state is kept); ``rel`` (``RelQpParams``) is joined
      with the QP's ``cc`` entry (read back from its shadow) into its
      ``RelQpConfig`` and written to sender reliability about 11 cycles after the
      command (this resets the QP's PSN state: only while idle);
    * ``EV_PROBE_REQ`` hands ``{qp, index}`` to the core (held until taken; an
      index >= ``paths`` is ignored: no probe, no reply);
      the reply, if the path works, is the head of ``EV_PROBE_STATUS`` /
      ``EV_PROBE_RTT`` (reading RTT pops it);
    * ``evcnt`` reads the core's per-EV counters;
    * ``RX_DROP_<reason>`` is the sum over planes of the reason's counters and
      ``RX_ACCEPTED`` the sum of the parsers' accepted counters (every kind), read
      from the parsers' counter block RAM and added when the register is read
      (``CsrBank(external=...)``; such a read answers ``ext_latency`` = 20 cycles later
      than other registers; each counter word is exact at one instant of the read);
    * ``IRQ_STATUS``: ev_event (queue not empty), probe_reply (reply waiting),
      rx_drop (a parser drop counter moved), wr_refused (a work request was
      refused).
    """

    def __init__(self, *, ports: "int | None" = None, qps: "int | None" = None,
                 paths: "int | None" = None, window: "int | None" = None,
                 clock_mhz: "int | None" = None, regions: "int | None" = None,
                 shared_parser: "bool | None" = None, plane_guard: "int | None" = None,
                 clk_ns: "int | None" = None, params: "NicParams | None" = None):
        # every parameter checked once (NicParams); the core and its blocks get the set
        p = NicParams.of(params, defaults={"ports": 2}, ports=ports, qps=qps, paths=paths,
                         window=window, clock_mhz=clock_mhz, regions=regions,
                         shared_parser=shared_parser, plane_guard=plane_guard, clk_ns=clk_ns)
        self.params = p
        self.core = MRCNic(params=p)
        ports, qps = p.ports, p.qps
        self.ports, self.qps, self.paths, self.window = ports, qps, p.paths, p.window
        self.regmap = build_regmap(ports=ports, clock_mhz=p.clock_mhz, window=p.window,
                                   regions=p.regions, paths=p.paths, qps=qps)
        members = {
            "s_axil": In(Axi4LiteSignature(16, 32)),
            "s_wr": In(stream.Signature(WorkRequest)),
            "recv_cpl": Out(stream.Signature(Completion)),
            "send_cpl": Out(stream.Signature(Completion)),
            "m_axi": Out(Axi4Signature(32, 64, 4)),
            "irq": Out(1),
            "ev_tap": Out(EvEvent), "ev_tap_valid": Out(1), "events_lost": Out(32),
            "no_path": Out(1),
            "cwnd": Out(data.ArrayLayout(32, qps)),
        }
        members.update({name: Out(32) for name in STATS})
        for i in range(ports):
            members[f"s_axis_p{i}"] = In(AxiStreamSignature(p.data_width))
            members[f"m_axis_p{i}"] = Out(AxiStreamSignature(p.data_width))
            members[f"drops_p{i}"] = Out(data.ArrayLayout(32, N_REASONS))
        #: cycles from a read's rd_stb to the bank's sample of RX_DROP_* / RX_ACCEPTED
        self.ext_latency = CNT_RD_LATENCY * self._rx_layout()[2] + 2
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.nic = nic = self.core
        external = [f"RX_DROP_{r.name}" for r in DropReason] + ["RX_ACCEPTED"]
        m.submodules.csr = csr = CsrBank(self.regmap, table_read_latency=EV_READ_LATENCY,
                                         table_serial=True,
                                         table_word_latency=TBL_WORD_LATENCY,
                                         external=external, ext_latency=self.ext_latency)
        wiring.connect(m, wiring.flipped(self.s_axil), csr.s_axil)
        wiring.connect(m, wiring.flipped(self.s_wr), nic.s_wr)
        wiring.connect(m, nic.recv_cpl, wiring.flipped(self.recv_cpl))
        wiring.connect(m, nic.send_cpl, wiring.flipped(self.send_cpl))
        wiring.connect(m, nic.m_axi, wiring.flipped(self.m_axi))
        for p in range(self.ports):
            gate = PortAdminGate()
            m.submodules[f"admin{p}"] = gate
            wiring.connect(m, getattr(nic, f"m_axis_p{p}"), gate.s_axis)
            wiring.connect(m, gate.m_axis, wiring.flipped(getattr(self, f"m_axis_p{p}")))
            m.d.comb += gate.up.eq(csr.port_admin_up[p])
            wiring.connect(m, wiring.flipped(getattr(self, f"s_axis_p{p}")),
                           getattr(nic, f"s_axis_p{p}"))
            m.d.comb += getattr(self, f"drops_p{p}").eq(getattr(nic, f"drops_p{p}"))
        m.d.comb += [getattr(self, name).eq(getattr(nic, name)) for name in STATS]
        m.d.comb += [self.no_path.eq(nic.no_path), self.cwnd.eq(nic.cwnd)]

        self._settings(m, csr, nic)
        self._tables(m, csr, nic)
        self._events_and_probes(m, csr, nic)
        self._counters(m, csr, nic)
        return m

    # ---- NIC-wide settings ---------------------------------------------------------------
    def _settings(self, m, csr, nic):
        m.d.comb += [
            nic.globals.src_mac.eq(Cat(csr.nic_src_mac_lo, csr.nic_src_mac_hi)),
            nic.globals.src_ip.eq(Cat(csr.nic_src_ip0, csr.nic_src_ip1, csr.nic_src_ip2,
                                      csr.nic_src_ip3)),
            nic.globals.dscp.eq(csr.nic_dscp_data),
            nic.globals.pmtu_log2.eq(csr.nic_pmtu_log2),
            nic.own_usid.eq(csr.nic_usid), nic.locator_block.eq(csr.nic_locator),
            nic.own_ip.eq(nic.globals.src_ip), nic.trim_dscp.eq(csr.nic_dscp_trim),
            nic.ack_every.eq(csr.nic_ack_every), nic.ack_timeout.eq(csr.nic_ack_timeout),
            nic.avoid.eq(0),
        ]
        for p in range(self.ports):
            m.d.comb += nic.next_hop_mac[p].eq(Cat(getattr(csr, f"port{p}_nh_mac_lo"),
                                                   getattr(csr, f"port{p}_nh_mac_hi")))

    # ---- tables: core writes, word-serial shadows, path / rel sequencer ------------------
    def _regions(self):
        """Word regions of the shared shadow memory: {table: (base, entry bits, word bits)};
        and its depth.  Each region is a power of two, aligned to its size."""
        out, base = {}, 0
        tabs = []
        for name in SHARED_SHADOWS:
            t = self.regmap.table(name)
            wbits = (t.words - 1).bit_length()
            ebits = (t.depth - 1).bit_length()
            tabs.append((1 << (wbits + ebits), name, ebits, wbits))
        for size, name, ebits, wbits in sorted(tabs, key=lambda x: -x[0]):
            out[name] = (base, ebits, wbits)
            base += size
        return out, 1 << (base - 1).bit_length()

    def _tables(self, m, csr, nic):
        rm = self.regmap
        nw = rm.data_words
        tid = {t.name: t.id.value for t in rm.tables}
        for t, port in (("seg", "seg"), ("txqp", "qp"), ("rxqp", "rxqp"), ("mr", "mr")):
            m.d.comb += [getattr(nic, f"{port}_w_en").eq(getattr(csr, f"{t}_w_en")),
                         getattr(nic, f"{port}_w_addr").eq(getattr(csr, f"{t}_addr")),
                         getattr(nic, f"{port}_w_data").eq(getattr(csr, f"{t}_w_data"))]
        m.d.comb += [nic.evcnt_rd_en.eq(csr.evcnt_rd_en), nic.evcnt_rd_addr.eq(csr.evcnt_addr),
                     # a CC profile change applies at once and keeps the QP's PSN state
                     nic.cc_w_en.eq(csr.cc_w_en), nic.cc_w_addr.eq(csr.cc_addr),
                     nic.cc_w_data.eq(csr.cc_w_data)]

        # -- memories: seg (its own), the other writable tables (regions), EV states ----
        seg_t = rm.table("seg")
        seg_wb = (seg_t.words - 1).bit_length()
        # no_rw_check: a word read in the cycle it is written is never used (the bank does
        # not read during a write command; the weight RMW writes a word it read earlier),
        # so Yosys adds no collision logic after these block RAMs.
        seg_mem = Memory(shape=32, depth=seg_t.depth << seg_wb, init=[],
                         attrs={"no_rw_check": 1})
        m.submodules.shadow_seg = seg_mem
        regions, depth = self._regions()
        mem = Memory(shape=32, depth=depth, init=[], attrs={"no_rw_check": 1})
        m.submodules.shadow = mem
        st_mem = Memory(shape=EvState, depth=self.paths, init=[])
        m.submodules.shadow_state = st_mem
        # asynchronous read ports with explicit read registers (``seg_rd``, ``sh_rd``, below):
        # Yosys honours no_rw_check only when it merges such a register into the port; a
        # synchronous non-transparent port gets read-first emulation (a bypass multiplexer
        # behind the block RAM, so its output register could not be folded into the EBR)
        seg_wp, seg_rp = seg_mem.write_port(), seg_mem.read_port(domain="comb")
        wp, rp = mem.write_port(), mem.read_port(domain="comb")
        st_wp = st_mem.write_port()
        st_rp = st_mem.read_port(transparent_for=(st_wp,))
        abits = (depth - 1).bit_length()
        pbits = (self.paths - 1).bit_length()

        def shadow_addr(tab, idx, word):
            """Word address in the shared memory of word ``word`` of entry ``idx`` of ``tab``."""
            a = Signal(abits)
            with m.Switch(tab):
                for name, (base, ebits, wbits) in regions.items():
                    with m.Case(tid[name]):
                        m.d.comb += a.eq(base | Cat(word[:wbits], idx[:ebits]))
            return a

        # -- the sequencer: EV_WEIGHT_SET read-modify-write, rel + cc join ---------------
        seq = Signal(2)             # 0 idle, 1 weight RMW of a path entry, 2 rel join (reads cc)
        seq_idx = Signal(8)
        seq_weight = Signal(8)
        seq_word = Signal(range(nw + 1))
        seq_rd = Signal()           # a sequencer read step this cycle (words 0 .. nw - 1)
        with m.If(seq_rd):
            m.d.sync += seq_word.eq(seq_word + 1)
            with m.If(seq_word == nw - 1):
                m.d.sync += seq_rd.eq(0)
        with m.If(csr.ev_weight_set_stb & (csr.ev_weight_set_index < self.paths)):
            m.d.sync += [seq.eq(1), seq_rd.eq(1), seq_idx.eq(csr.ev_weight_set_index),
                         seq_weight.eq(csr.ev_weight_set_weight), seq_word.eq(0)]
        with m.If(csr.rel_w_en):
            m.d.sync += [seq.eq(2), seq_rd.eq(1), seq_idx.eq(csr.rel_addr), seq_word.eq(0)]

        # -- read side: a word read moves through 4 register stages (TBL_WORD_LATENCY) ----
        # stage 0: this cycle's (table, entry, word), a bank read step or a sequencer read;
        # 1: the memories' read addresses (flip-flops); 2: the block RAMs' outputs;
        # 3: their output registers (taken straight from the EBRs: folded into them as
        # REGMODE OUTREG), the EV state and the evcnt word; 4: the word (-> tbl_rd_word)
        r_tab, r_idx, r_word = Signal(3), Signal(8), Signal(range(nw + 1))
        with m.If(seq_rd):
            m.d.comb += [r_tab.eq(Mux(seq == 1, tid["path"], tid["cc"])), r_idx.eq(seq_idx),
                         r_word.eq(seq_word)]
        with m.Else():
            m.d.comb += [r_tab.eq(csr.tbl_sel), r_idx.eq(csr.path_addr), r_word.eq(csr.tbl_word)]
        ra, seg_ra = Signal(abits), Signal(len(seg_rp.addr))
        m.d.sync += [ra.eq(shadow_addr(r_tab, r_idx, r_word)),
                     seg_ra.eq(Cat(r_word[:seg_wb], r_idx))]
        m.d.comb += [
            rp.addr.eq(ra),
            seg_rp.addr.eq(seg_ra),
            st_rp.en.eq(1), st_rp.addr.eq(r_idx[:pbits]),
        ]
        # the block RAMs' read registers (stage 2), without reset like the EBR's own (a reset
        # there keeps the output register from being folded, boards/ebr_outreg.py)
        sh_rd, seg_rd = Signal(32, reset_less=True), Signal(32, reset_less=True)
        m.d.sync += [sh_rd.eq(rp.data), seg_rd.eq(seg_rp.data)]
        tab = [r_tab] + [Signal(3, name=f"r_tab{i}") for i in (1, 2)]
        wrd = [r_word] + [Signal(range(nw + 1), name=f"r_word{i}") for i in (1, 2)]
        cap = [seq_rd] + [Signal(name=f"seq_cap{i}") for i in (1, 2, 3, 4)]
        st = [None, st_rp.data, Signal(EvState, name="st2"), Signal(EvState, name="st3")]
        m.d.sync += [tab[i].eq(tab[i - 1]) for i in (1, 2)]
        m.d.sync += [wrd[i].eq(wrd[i - 1]) for i in (1, 2)]
        m.d.sync += [cap[i].eq(cap[i - 1]) for i in (1, 2, 3, 4)]
        m.d.sync += [st[i].eq(st[i - 1]) for i in (2, 3)]
        lay = PathEntry.as_shape()
        st_w, st_lsb = divmod(lay["state"].offset, 32)
        wt_w, wt_lsb = divmod(lay["weight"].offset, 32)
        assert st_w == wt_w and wt_lsb + 8 <= 32, "state and weight must share a word"
        rp_q, seg_q, ev_q = Signal(32), Signal(32), Signal(32)
        is_ev3, is_seg3, path_ws3, rmw3, last3 = (Signal(name=n) for n in (
            "is_ev3", "is_seg3", "path_ws3", "rmw3", "last3"))
        path_ws2 = (tab[2] == tid["path"]) & (wrd[2] == st_w)
        m.d.sync += [
            rp_q.eq(sh_rd), seg_q.eq(seg_rd),             # the EBR output registers
            ev_q.eq(nic.evcnt_rd_data.as_value().word_select(wrd[2][:3], 32)),
            is_ev3.eq(tab[2] == tid["evcnt"]), is_seg3.eq(tab[2] == tid["seg"]),
            path_ws3.eq(path_ws2), rmw3.eq(path_ws2 & cap[2] & (seq == 1)),
            last3.eq(wrd[2] == nw - 1),
        ]
        # stage 4: the word read 4 cycles ago, EV state (and an RMW's weight) merged
        merged = Signal(32)
        m.d.comb += merged.eq(Mux(is_seg3, seg_q, rp_q))
        with m.If(path_ws3):
            m.d.comb += merged[st_lsb:st_lsb + 2].eq(st[3])
        with m.If(rmw3):
            m.d.comb += merged[wt_lsb:wt_lsb + 8].eq(seq_weight)
        word, last4, wb = Signal(32), Signal(), Signal()
        m.d.sync += [word.eq(Mux(is_ev3, ev_q, merged)), last4.eq(last3), wb.eq(rmw3)]
        seq_cap = cap[4]
        m.d.comb += csr.tbl_rd_word.eq(word)

        # -- the bank's serial write words, registered once (table writes are not timed) --
        w_word, w_idx = Signal(32), Signal(8)
        w_path, w_path_last, w_other, w_seg = (Signal(name=n) for n in (
            "w_path", "w_path_last", "w_other", "w_seg"))
        w_addr, w_seg_addr = Signal(abits), Signal(len(seg_wp.addr))
        is_path = csr.tbl_w_step & (csr.tbl_sel == tid["path"])
        m.d.sync += [
            w_word.eq(csr.tbl_w_word), w_idx.eq(csr.path_addr),
            w_path.eq(is_path), w_path_last.eq(is_path & (csr.tbl_word == nw - 1)),
            w_other.eq(csr.tbl_w_step & (csr.tbl_sel != tid["seg"])),
            w_seg.eq(csr.tbl_w_step & (csr.tbl_sel == tid["seg"])),
            w_addr.eq(shadow_addr(csr.tbl_sel, csr.path_addr, csr.tbl_word)),
            w_seg_addr.eq(Cat(csr.tbl_word[:seg_wb], csr.seg_addr)),
        ]

        # -- staging: the record collected word by word (path writes, RMW, cc for rel) -----
        staging = Signal(32 * nw)
        with m.If(w_path):
            m.d.sync += staging.eq(Cat(staging[32:], w_word))
        with m.Elif(seq_cap):
            m.d.sync += staging.eq(Cat(staging[32:], word))
        pt_pend, pt_rmw, rel_go = Signal(), Signal(), Signal()
        pt_idx = Signal(8)
        m.d.sync += rel_go.eq(0)
        with m.If(w_path_last):
            m.d.sync += [pt_pend.eq(1), pt_rmw.eq(0), pt_idx.eq(w_idx)]
        with m.If(seq_cap & last4):
            m.d.sync += [seq.eq(0), pt_pend.eq(seq == 1), pt_rmw.eq(1), rel_go.eq(seq == 2),
                         pt_idx.eq(seq_idx)]
        m.d.comb += csr.busy.eq((seq != 0) | pt_pend)
        # the state of the sequencer's entry until its write (fresh at the write)
        with m.If(seq != 0):
            m.d.comb += st_rp.addr.eq(seq_idx[:pbits])
        with m.Elif(pt_pend):
            m.d.comb += st_rp.addr.eq(pt_idx[:pbits])

        # -- shadow writes: the bank's serial words; the RMW's new word 1 ----------------
        with m.If(wb):
            m.d.comb += [wp.en.eq(1),
                         wp.addr.eq(shadow_addr(C(tid["path"], 3), seq_idx, C(st_w, 3))),
                         wp.data.eq(word)]
        with m.Else():
            m.d.comb += [wp.en.eq(w_other), wp.addr.eq(w_addr), wp.data.eq(w_word)]
        m.d.comb += [seg_wp.en.eq(w_seg), seg_wp.addr.eq(w_seg_addr), seg_wp.data.eq(w_word)]

        # -- the core's path tables and sender reliability --------------------------------
        # The state copy follows the core's EV state changes one cycle later (from
        # flip-flops: the core's choice stays out of pt_go and the copy's write port).  A
        # whole-entry write waits for a cycle without such a delayed change (the copy has one
        # write port), so an EV_WEIGHT_SET writes the state the entry has now (the copy,
        # read through its transparent port, has every change but the previous cycle's, and
        # a change in the previous cycle holds the write back; a change of the same entry in
        # the write's own cycle wins in the core's tables and reaches the copy next cycle).
        entry = Signal(PathEntry)
        m.d.comb += [entry.eq(staging[:PathEntry.as_shape().size]),
                     entry.state.eq(Mux(pt_rmw, st_rp.data, staging[lay["state"].offset:][:2]))]
        cst_en, cst_addr, cst_state = Signal(), Signal(pbits), Signal(EvState)
        m.d.sync += [cst_en.eq(nic.ev_st_en & (nic.ev_st_addr < self.paths)),
                     cst_addr.eq(nic.ev_st_addr[:pbits]), cst_state.eq(nic.ev_st_state)]
        pt_go = Signal()
        m.d.comb += pt_go.eq(pt_pend & ~cst_en)
        with m.If(pt_go):
            m.d.sync += pt_pend.eq(0)
        m.d.comb += [
            nic.pt_w_en.eq(pt_go), nic.pt_w_addr.eq(pt_idx), nic.pt_w_data.eq(entry),
            nic.pt_st_en.eq(csr.ev_state_set_stb & (csr.ev_state_set_index < self.paths)),
            nic.pt_st_addr.eq(csr.ev_state_set_index), nic.pt_st_state.eq(csr.ev_state_set_state),
        ]
        with m.If(pt_go):
            m.d.comb += [st_wp.en.eq(1), st_wp.addr.eq(pt_idx), st_wp.data.eq(entry.state)]
        with m.Else():
            m.d.comb += [st_wp.en.eq(cst_en), st_wp.addr.eq(cst_addr), st_wp.data.eq(cst_state)]
        cfg = Signal(RelQpConfig)
        nparams = RelQpParams.as_shape().size
        m.d.comb += [cfg.as_value()[:nparams].eq(csr.rel_w_data.as_value()),
                     cfg.nscc.eq(staging[:NsccConfig.as_shape().size]),
                     nic.rel_w_en.eq(rel_go), nic.rel_w_addr.eq(seq_idx),
                     nic.rel_w_data.eq(cfg)]

    # ---- EV events and probes ------------------------------------------------------------
    def _events_and_probes(self, m, csr, nic):
        ev = nic.ev_event
        # only the fields EV_EVENT shows are queued (13 bits); an event is taken into a
        # register first (always ready) and enters the queue the cycle after, so the core's
        # valid logic ends at a flip-flop, not at the queue's level counter
        m.submodules.ev_fifo = evf = fifo.SyncFIFOBuffered(width=_EvHead.size, depth=EVENT_DEPTH)
        head = _EvHead(evf.r_data)
        evq_valid, evq = Signal(), Signal(EvEvent)
        m.d.sync += [evq_valid.eq(ev.valid), evq.eq(ev.payload)]
        m.d.comb += [
            ev.ready.eq(1),
            evf.w_en.eq(evq_valid),
            evf.w_data.eq(Cat(evq.index, evq.state, evq.reason)),
            self.ev_tap.eq(evq), self.ev_tap_valid.eq(evq_valid),
            # an empty FIFO's r_data is undefined (X in simulation): read 0 then
            csr.ev_event_index.eq(Mux(evf.r_rdy, head.index, 0)),
            csr.ev_event_state.eq(Mux(evf.r_rdy, head.state, 0)),
            csr.ev_event_reason.eq(Mux(evf.r_rdy, head.reason, 0)),
            csr.ev_event_valid.eq(evf.r_rdy),
            csr.ev_event_count.eq(evf.level), evf.r_en.eq(csr.ev_event_rd_stb),
            csr.irq_status_ev_event_set.eq(evf.r_rdy),
        ]
        with m.If(evq_valid & ~evf.w_rdy):
            m.d.sync += self.events_lost.eq(self.events_lost + 1)

        req = nic.probe_req
        with m.If(csr.ev_probe_req_stb & (csr.ev_probe_req_index < self.paths)):
            m.d.sync += [req.valid.eq(1), req.payload.index.eq(csr.ev_probe_req_index),
                         req.payload.qp.eq(csr.ev_probe_req_qp)]
        with m.Elif(req.ready):
            m.d.sync += req.valid.eq(0)
        rep = nic.probe_reply
        m.d.comb += [
            csr.ev_probe_status_index.eq(Mux(rep.valid, rep.payload.index, 0)),
            csr.ev_probe_status_valid.eq(rep.valid),
            csr.ev_probe_rtt.eq(Mux(rep.valid, rep.payload.rtt_ns, 0)),
            rep.ready.eq(csr.ev_probe_rtt_rd_stb),
            csr.irq_status_probe_reply_set.eq(rep.valid),
        ]

    # ---- counters and interrupts ---------------------------------------------------------
    def _counters(self, m, csr, nic):
        # RX_DROP_<reason> (the reason's counters of every plane, added) and RX_ACCEPTED (the
        # three kinds, added) are read from the receive parsers' counter block RAM
        # (MRCNic.rxcnt_rd_*, one word per request, CNT_RD_LATENCY cycles): at the read's
        # rd_stb the words to add are planned (first word, step, count), then one request
        # every CNT_RD_LATENCY cycles, each answer added into ``ext_acc`` as it comes; the
        # bank samples ext_rd_data _EXT_WORDS * CNT_RD_LATENCY + 2 cycles after rd_stb.
        shared, n_drop, words = self._rx_layout()
        acc_word = self.regmap["RX_ACCEPTED"].offset >> 2
        ext_acc = Signal(32)
        left = Signal(range(words + 1))         # requests still to make
        outst = Signal()                        # a request is waiting for its answer
        tmr = Signal(range(CNT_RD_LATENCY))     # cycles since the last request (mod latency)
        cur = Signal(6)                         # counter word of the next request
        is_acc = Signal()
        m.d.comb += [nic.rxcnt_rd_addr.eq(cur), csr.ext_rd_data.eq(ext_acc)]
        # "the read is RX_ACCEPTED", compared from the bus address every cycle: at rd_stb
        # (the cycle after the AR handshake) it is the read's (no compare behind rd_addr)
        acc = Signal()
        m.d.sync += acc.eq(self.s_axil.araddr[2:] == acc_word)
        with m.If(csr.rd_stb):
            reason = csr.rd_addr[:(N_REASONS - 1).bit_length()]
            m.d.sync += [ext_acc.eq(0), outst.eq(0), tmr.eq(0), is_acc.eq(acc),
                         cur.eq(Mux(acc, n_drop, reason)),
                         left.eq(Mux(acc, 3, self.ports if shared else 1))]
        with m.Else():
            m.d.sync += tmr.eq(Mux(tmr == CNT_RD_LATENCY - 1, 0, tmr + 1))
            with m.If(tmr == 0):
                with m.If(outst):
                    m.d.sync += ext_acc.eq(ext_acc + nic.rxcnt_rd_data)
                m.d.sync += outst.eq(left != 0)
                with m.If(left != 0):
                    m.d.comb += nic.rxcnt_rd_stb.eq(1)
                    m.d.sync += [left.eq(left - 1),
                                 cur.eq(cur + Mux(is_acc, 1, N_REASONS if shared else 0))]
        cpl_count = Signal(32)
        with m.If(self.recv_cpl.valid & self.recv_cpl.ready):
            m.d.sync += cpl_count.eq(cpl_count + 1)
        refused_d = Signal()
        m.d.sync += refused_d.eq(nic.wr_refused[0])
        # the core's counters are flip-flops and enter the bank's read multiplexer as they
        # are; TX_PACKETS is a sum over planes and enters from a register of its own (its
        # adder stays out of the multiplexer's cycle: it reads as of the previous cycle)
        m.d.sync += csr.tx_packets.eq(nic.data_frames)
        m.d.comb += [
            csr.rx_duplicates.eq(nic.duplicates),
            csr.rx_out_of_window.eq(nic.out_of_window), csr.rx_acks.eq(nic.acks_sent),
            csr.tx_wr_refused.eq(nic.wr_refused), csr.tx_retransmits.eq(nic.retransmits),
            csr.rx_completions.eq(cpl_count), csr.rx_nacks.eq(0), csr.tx_rd_errors.eq(0),
            csr.irq_status_wr_refused_set.eq(refused_d != nic.wr_refused[0]),
            csr.irq_status_rx_drop_set.eq(nic.rx_drop_stb),
            self.irq.eq(csr.irq),
        ]

    def _rx_layout(self):
        """(one shared parser, drop words per plane block, words added per external read)."""
        shared = self.params.shared                             # as RxPipeline
        n_drop = self.ports * N_REASONS if shared else N_REASONS
        return shared, n_drop, max(3, self.ports if shared else 1)
