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

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..regmap import build_regmap
from .axi import Axi4LiteSignature, Axi4Signature
from .axis import AxiStreamSignature
from .csr import CsrBank
from .layouts import MAX_PATHS, Completion, EvEvent, EvState, PathEntry, WorkRequest
from .nic import MRCNic
from .port_admin import PortAdminGate
from .reliability import RelQpConfig, RelQpParams
from .rx_parser import N_REASONS, DropReason

__all__ = ["CsrNic", "STATS", "EVENT_DEPTH", "TIED_OFF"]

EVENT_DEPTH = 16    #: EV events queued behind ``EV_EVENT`` (more are counted in ``events_lost``)

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
    ports, qps, paths, window : int
        As :class:`~mrcnic.rtl.nic.MRCNic` (planes, QP contexts, path-table
        entries, receive SACK window in PSNs).
    clock_mhz : int
        Core clock reported in ``ID_CLOCK_MHZ``.
    regions : int
        Memory regions reported in ``ID_MAX_REGIONS`` (the core holds 4).

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

    * ``path`` entries go to every path-table copy of the core; ``EV_STATE_SET``
      / ``EV_WEIGHT_SET`` read the shadow entry, change one field and write it
      back (3 cycles; the bus answers after 2, so back-to-back commands are
      safe); indices >= ``paths`` are ignored;
    * ``cc`` (NSCC parameters) of a QP applies at once (its window restarts at
      ``init_cwnd``, its PSN state is kept); ``rel`` (``RelQpParams``) is joined
      with the QP's ``cc`` entry into its ``RelQpConfig`` and written to sender
      reliability the cycle after (this resets the QP's PSN state: only while idle);
    * ``EV_PROBE_REQ`` hands ``{qp, index}`` to the core (held until taken; an
      index >= ``paths`` is ignored: no probe, no reply);
      the reply, if the path works, is the head of ``EV_PROBE_STATUS`` /
      ``EV_PROBE_RTT`` (reading RTT pops it);
    * ``evcnt`` reads the core's per-EV counters;
    * ``IRQ_STATUS``: ev_event (queue not empty), probe_reply (reply waiting),
      rx_drop (a parser drop counter moved), wr_refused (a work request was
      refused).
    """

    def __init__(self, *, ports: int = 2, qps: int = 2, paths: int = MAX_PATHS,
                 window: int = 256, clock_mhz: int = 125, regions: int = 4):
        self.core = MRCNic(ports=ports, qps=qps, paths=paths, window=window)  # checks parameters
        self.ports, self.qps, self.paths, self.window = ports, qps, paths, window
        self.regmap = build_regmap(ports=ports, clock_mhz=clock_mhz, window=window,
                                   regions=regions, paths=paths, qps=qps)
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
            members[f"s_axis_p{i}"] = In(AxiStreamSignature(64))
            members[f"m_axis_p{i}"] = Out(AxiStreamSignature(64))
            members[f"drops_p{i}"] = Out(data.ArrayLayout(32, N_REASONS))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.nic = nic = self.core
        m.submodules.csr = csr = CsrBank(self.regmap, table_read_latency=1)
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
        self._path_table(m, csr, nic)
        self._reliability(m, csr, nic)
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

    # ---- simple tables: straight through + shadow for read-back --------------------------
    def _shadow(self, m, csr, t):
        """A read-back shadow of table ``t`` (written with it, read by TBL_CMD READ)."""
        table = self.regmap.table(t)
        mem = Memory(shape=getattr(csr, f"{t}_w_data").shape(), depth=table.depth, init=[])
        m.submodules[f"shadow_{t}"] = mem
        wp = mem.write_port()
        rp = mem.read_port(transparent_for=())
        idx = getattr(csr, f"{t}_addr")[:max(1, (table.depth - 1).bit_length())]
        m.d.comb += [wp.en.eq(getattr(csr, f"{t}_w_en")), wp.addr.eq(idx),
                     wp.data.eq(getattr(csr, f"{t}_w_data")),
                     rp.addr.eq(idx), rp.en.eq(getattr(csr, f"{t}_rd_en")),
                     getattr(csr, f"{t}_rd_data").eq(rp.data)]

    def _tables(self, m, csr, nic):
        for t, port in (("seg", "seg"), ("txqp", "qp"), ("rxqp", "rxqp"), ("mr", "mr")):
            m.d.comb += [getattr(nic, f"{port}_w_en").eq(getattr(csr, f"{t}_w_en")),
                         getattr(nic, f"{port}_w_addr").eq(getattr(csr, f"{t}_addr")),
                         getattr(nic, f"{port}_w_data").eq(getattr(csr, f"{t}_w_data"))]
        for t in ("seg", "txqp", "rxqp", "mr", "cc", "rel"):
            self._shadow(m, csr, t)
        m.d.comb += [nic.evcnt_rd_en.eq(csr.evcnt_rd_en), nic.evcnt_rd_addr.eq(csr.evcnt_addr),
                     csr.evcnt_rd_data.eq(nic.evcnt_rd_data)]

    # ---- path table: shadow + read-modify-write for EV_STATE_SET / EV_WEIGHT_SET ---------
    def _path_table(self, m, csr, nic):
        """Shadow of the path table for reads and read-modify-writes.  The EV state lives in
        a separate 2-bit memory that also follows the core's own state changes (sender
        reliability's ASSUMED_BAD / GOOD), so a read shows the state the NIC uses and a
        weight change never writes back a stale state."""
        mem = Memory(shape=PathEntry, depth=self.paths, init=[])
        m.submodules.shadow_path = mem
        wp = mem.write_port()
        rp = mem.read_port(transparent_for=())
        st_mem = Memory(shape=EvState, depth=self.paths, init=[])
        m.submodules.shadow_state = st_mem
        st_wp = st_mem.write_port()
        st_rp = st_mem.read_port(transparent_for=(st_wp,))
        ab = (self.paths - 1).bit_length()
        rmw_idx, rmw_kind, rmw_val = Signal(8), Signal(), Signal(8)
        rmw = Signal(2)     # 0 idle, 1 reading, 2 data ready
        entry = Signal(PathEntry)
        with m.If(csr.ev_state_set_stb):
            m.d.sync += [rmw_idx.eq(csr.ev_state_set_index), rmw_kind.eq(0),
                         rmw_val.eq(csr.ev_state_set_state), rmw.eq(1)]
        with m.Elif(csr.ev_weight_set_stb):
            m.d.sync += [rmw_idx.eq(csr.ev_weight_set_index), rmw_kind.eq(1),
                         rmw_val.eq(csr.ev_weight_set_weight), rmw.eq(1)]
        with m.Elif(rmw == 1):
            m.d.sync += rmw.eq(2)
        with m.Elif(rmw == 2):
            m.d.sync += rmw.eq(0)
        addr = Mux(rmw != 0, rmw_idx, csr.path_addr)
        current = Signal(PathEntry)
        m.d.comb += [
            rp.en.eq(1), rp.addr.eq(addr), st_rp.en.eq(1), st_rp.addr.eq(addr),
            current.eq(rp.data), current.state.eq(st_rp.data),
            csr.path_rd_data.eq(current),
            entry.eq(current),
        ]
        with m.If(rmw_kind):
            m.d.comb += entry.weight.eq(rmw_val)
        with m.Else():
            m.d.comb += entry.state.eq(rmw_val[:2])
        in_range = rmw_idx[ab:] == 0
        w_en, w_addr, w_data = Signal(), Signal(8), Signal(PathEntry)
        with m.If(rmw == 2):
            # a whole-entry write from the controller: the core also clears sender
            # reliability's ASSUMED_BAD mark of the entry (a DENIED entry stays DENIED)
            m.d.comb += [w_en.eq(in_range), w_addr.eq(rmw_idx), w_data.eq(entry)]
        with m.Else():
            m.d.comb += [w_en.eq(csr.path_w_en), w_addr.eq(csr.path_addr),
                         w_data.eq(csr.path_w_data)]
        m.d.comb += [wp.en.eq(w_en), wp.addr.eq(w_addr), wp.data.eq(w_data),
                     nic.pt_w_en.eq(w_en), nic.pt_w_addr.eq(w_addr), nic.pt_w_data.eq(w_data),
                     nic.pt_st_en.eq(0)]
        # the state copy: the controller's writes win over the core's change in the same cycle
        with m.If(w_en):
            m.d.comb += [st_wp.en.eq(1), st_wp.addr.eq(w_addr), st_wp.data.eq(w_data.state)]
        with m.Else():
            m.d.comb += [st_wp.en.eq(nic.ev_st_en & (nic.ev_st_addr[ab:] == 0)),
                         st_wp.addr.eq(nic.ev_st_addr), st_wp.data.eq(nic.ev_st_state)]

    # ---- sender reliability: cc + rel -> RelQpConfig -------------------------------------
    def _reliability(self, m, csr, nic):
        cur = [Signal(RelQpConfig, name=f"relcfg{q}") for q in range(self.qps)]
        go, go_addr = Signal(), Signal(3)
        nparams = RelQpParams.as_shape().size
        m.d.sync += go.eq(0)
        for q, c in enumerate(cur):
            with m.If(csr.cc_w_en & (csr.cc_addr == q)):
                m.d.sync += c.nscc.eq(csr.cc_w_data)
            with m.If(csr.rel_w_en & (csr.rel_addr == q)):
                m.d.sync += [c.as_value()[:nparams].eq(csr.rel_w_data.as_value()), go.eq(1),
                             go_addr.eq(q)]
        m.d.comb += [nic.rel_w_en.eq(go), nic.rel_w_addr.eq(go_addr),
                     nic.rel_w_data.eq(Array(cur)[go_addr]),
                     # a CC profile change applies at once and keeps the QP's PSN state
                     nic.cc_w_en.eq(csr.cc_w_en), nic.cc_w_addr.eq(csr.cc_addr),
                     nic.cc_w_data.eq(csr.cc_w_data)]

    # ---- EV events and probes ------------------------------------------------------------
    def _events_and_probes(self, m, csr, nic):
        m.submodules.ev_fifo = evf = fifo.SyncFIFOBuffered(width=EvEvent.as_shape().size,
                                                          depth=EVENT_DEPTH)
        ev = nic.ev_event
        head = EvEvent(evf.r_data)
        m.d.comb += [
            ev.ready.eq(1),
            evf.w_en.eq(ev.valid), evf.w_data.eq(ev.payload),
            self.ev_tap.eq(ev.payload), self.ev_tap_valid.eq(ev.valid),
            # an empty FIFO's r_data is undefined (X in simulation): read 0 then
            csr.ev_event_index.eq(Mux(evf.r_rdy, head.index, 0)),
            csr.ev_event_state.eq(Mux(evf.r_rdy, head.state, 0)),
            csr.ev_event_reason.eq(Mux(evf.r_rdy, head.reason, 0)),
            csr.ev_event_valid.eq(evf.r_rdy),
            csr.ev_event_count.eq(evf.level), evf.r_en.eq(csr.ev_event_rd_stb),
            csr.irq_status_ev_event_set.eq(evf.r_rdy),
        ]
        with m.If(ev.valid & ~evf.w_rdy):
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
        drop_any = Signal()
        for r in DropReason:
            total = Signal(32, name=f"drop_{r.name.lower()}")
            m.d.sync += total.eq(sum(getattr(nic, f"drops_p{p}")[int(r)]
                                     for p in range(self.ports)))
            m.d.comb += getattr(csr, f"rx_drop_{r.name.lower()}").eq(total)
        totals_d = Signal(32)
        all_drops = Signal(32)
        m.d.comb += all_drops.eq(sum(getattr(nic, f"drops_p{p}")[int(r)]
                                     for p in range(self.ports) for r in DropReason))
        m.d.sync += totals_d.eq(all_drops)
        m.d.comb += drop_any.eq(totals_d != all_drops)
        cpl_count = Signal(32)
        with m.If(self.recv_cpl.valid & self.recv_cpl.ready):
            m.d.sync += cpl_count.eq(cpl_count + 1)
        refused_d = Signal(32)
        m.d.sync += refused_d.eq(nic.wr_refused)
        m.d.comb += [
            csr.rx_accepted.eq(nic.accepted), csr.rx_duplicates.eq(nic.duplicates),
            csr.rx_out_of_window.eq(nic.out_of_window), csr.rx_completions.eq(cpl_count),
            csr.rx_acks.eq(nic.acks_sent), csr.rx_nacks.eq(0),
            csr.tx_wr_refused.eq(nic.wr_refused), csr.tx_rd_errors.eq(0),
            csr.tx_packets.eq(nic.data_frames), csr.tx_retransmits.eq(nic.retransmits),
            csr.irq_status_wr_refused_set.eq(refused_d != nic.wr_refused),
            csr.irq_status_rx_drop_set.eq(drop_any),
            self.irq.eq(csr.irq),
        ]
