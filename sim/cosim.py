"""Co-simulation: RTL MRCNics (cocotb + Icarus) across the Python fabric model.

Two halves, as in the other runners of ``mrcnic.sim``:

* :func:`run_cosim` (plain Python, used by ``mrcnic sim`` and the tests):
  resolves a scenario (:mod:`mrcnic.sim.scenarios`), writes a job file, builds
  :class:`CosimTop` -- K :class:`~mrcnic.rtl.csr_nic.CsrNic` instances (an
  MRCNic behind its CSR bank), ports prefixed ``n<k>_`` -- and runs the cocotb test below on it with
  :func:`mrcnic.sim.rtlsim.run_rtl`, tailing a progress file for a rich
  progress bar; then it writes the report (:mod:`mrcnic.sim.report`).
* ``run_cosim_job`` (inside the simulator): one 8 ns clock for every NIC; per NIC
  a host memory -- by default in the simulation top's HDL (:mod:`mrcnic.sim.hostmem_hdl`,
  read and written by Python through a backdoor), or ``hostmem="python"``: a cocotbext-axi
  ``AxiRam`` model (:class:`~mrcnic.sim.fastaxiram.AxiRamOneTask`), the same cycle for
  cycle --, an ``AxiLiteMaster`` on its CSR bank through which the firmware's
  provisioning (:mod:`mrcnic.fw.provision`)
  programs it from the NIC's configuration, one ``AxiStreamSink`` per plane output and one
  ``AxiStreamSource`` per plane input; the :class:`~mrcnic.sim.fabric.Fabric`
  in between.

Time synchronisation
--------------------
The simulator's time is the only clock; the fabric is a discrete-event model
that is never ahead of it.  A frame leaving a NIC is handed to
``fabric.send(host, plane, frame, now)`` in the time step its last beat is taken
(the NIC's MAC is store-and-forward: the frame starts on the wire when it is
complete).  At the rising edges it wakes at, the main loop runs the fabric up to
the current time (``fabric.advance(now)``) and queues every delivered frame into the
destination NIC's plane port, which feeds it in at one beat per clock from the next
edge on.  It wakes at the first edge a frame can reach a host
(``fabric.next_delivery_bound_ns()``: the fabric's hops in between need no edge of
their own, as no frame a NIC sends later can overtake them).
So a frame reaches its NIC at the first edge at or after its arrival (less than one
clock, 8 ns, late), frames are never reordered by the coupling, and time-outs in the
RTL see the fabric's delays.

The NIC Verilog is generated once per parameter set and source version and
cached (``$MRCNIC_CACHE`` or ``~/.cache/mrcnic``): converting one NIC takes
about a minute, the two-to-four-NIC top instantiates the same module.
"""

from __future__ import annotations

import gc
import json
import logging
import mmap
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from amaranth.hdl import Cat, ClockSignal, Instance, Module, ResetSignal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from mrcnic.interrupt import sigterm_as_interrupt

__all__ = ["CosimTop", "run_cosim", "run_clock_only", "nic_verilog", "NIC_MODULE", "NIC_GBPS", "CLK_NS",
           "ideal_times", "COSIM_QPS", "COSIM_PATHS"]

NIC_MODULE = "mrcnic_nic"   #: Verilog module name of the cached CsrNic
#: a served run's CSR bridge starts the next queued access within this many clocks
SERVE_POLL_CYCLES = 16
CLK_NS = 8                  #: clock period, ns (125 MHz)
NIC_GBPS = 64 / CLK_NS      #: one 64-bit beat per clock: 8 Gb/s over all planes of a NIC
COSIM_QPS = 4               #: QP contexts of the co-simulated NICs (MAX_QPS when one needs more)
MAX_QPS = 8                 #: the most a co-simulated NIC can have (``mrcnic.rtl.layouts.MAX_QPS``)
COSIM_PATHS = 128           #: largest path table of the co-simulated NICs (entries)
REPO = Path(__file__).resolve().parents[1]
_GUARD = 64                 #: guard bytes checked on each side of every destination range
FAULT_TIME_LIMIT = 50.0     #: time limit (x ideal_ns) of a run with random faults, at least
HOSTMEMS = ("hdl", "python")  #: host memory models of a run (:func:`resolve_hostmem`)
FRAMEPORTS = ("hdl", "python")  #: plane-port frame hand-offs of a run (:func:`resolve_frameports`)
_ACK_BYTES = 102            #: ACK frame: Eth 14 + IPv6 40 + UDP 8 + BTH 12 + AETH 4 + SACK 20 + ICRC 4


# --------------------------------------------------------------------------
# The simulation top
# --------------------------------------------------------------------------
def nic_verilog(ports: int = 4, qps: int = COSIM_QPS, paths: int = COSIM_PATHS) -> Path:
    """Verilog of ``CsrNic(ports, qps, paths)`` as module :data:`NIC_MODULE`, from the build
    cache (:func:`mrcnic.sim.rtlsim.cached_verilog`: keyed by the parameters, the Amaranth
    and Yosys versions and every source the NIC is made of); converted on a miss."""
    from mrcnic.rtl.csr_nic import CsrNic

    from .rtlsim import cached_verilog

    nic = CsrNic(ports=ports, qps=qps, paths=paths)
    path = cached_verilog(nic, NIC_MODULE, f"CsrNic-p{ports}-q{qps}-t{paths}")
    nic._MustUse__silence = nic.core._MustUse__silence = True   # a cache hit never elaborates
    return path


class CosimTop(wiring.Component):
    """Simulation-only top: ``nics`` CsrNic instances side by side, nothing between them.

    Every port of NIC *k* appears as ``n<k>_<port>`` (same member, same width
    and direction as on :class:`~mrcnic.rtl.csr_nic.CsrNic`); ``clk``/``rst`` are
    shared.  The NICs are instances of the Verilog module :data:`NIC_MODULE`
    (from :func:`nic_verilog`), so the top converts in a moment.  The fabric
    between them is the Python model, driven from cocotb.

    With ``hostmem_size``, each NIC's ``m_axi`` is not a port: it is connected inside the
    top to the NIC's host memory in HDL (:mod:`mrcnic.sim.hostmem_hdl`: an instance
    ``n<k>_hm`` of :data:`~mrcnic.sim.hostmem_hdl.HOSTMEM_MODULE`, the AXI4 side, and
    ``n<k>_ram`` of :data:`~mrcnic.sim.hostmem_hdl.RAM_MODULE`, ``hostmem_size`` bytes of
    storage); ``n<k>_hostmem_err`` is its ``err``.

    Parameters
    ----------
    nics : int
        Number of NICs, 1..16.
    ports, qps, paths : int
        CsrNic parameters (must match the Verilog module built with them).
    hostmem_size : int, optional
        Bytes of HDL host memory per NIC (a power of two); None: ``m_axi`` ports, for a
        host memory in Python.
    frameports : bool
        The plane ports' frame hand-off in HDL (:mod:`mrcnic.sim.frameport_hdl`): each
        ``s_axis_p<i>`` is driven inside the top by an instance ``n<k>_rx<i>`` of
        :data:`~mrcnic.sim.frameport_hdl.INJECT_MODULE`, each ``m_axis_p<i>`` drained by
        ``n<k>_tx<i>`` of :data:`~mrcnic.sim.frameport_hdl.CAPTURE_MODULE`, whose ``done``
        is the top's output ``n<k>_tx_done_p<i>``; the ports' signals keep their names
        (``n<k>_m_axis_p<i>__tdata`` ...) as nets of the top.  False: they are ports, for
        the Python stream models.

    ``wake_any`` is high while any NIC's ``recv_cpl.valid``, ``send_cpl.valid`` or
    ``ev_tap_valid`` is, or (``frameports``) any ``n<k>_tx_done_p<i>``: the events the
    co-simulation's loop must see at their edge (one signal to watch and read).
    """

    def __init__(self, nics: int, ports: int = 4, qps: int = COSIM_QPS, paths: int = COSIM_PATHS,
                 hostmem_size: int | None = None, frameports: bool = False):
        from mrcnic.rtl.csr_nic import CsrNic

        if not 1 <= nics <= 16:
            raise ValueError(f"nics must be 1..16, not {nics}")
        self.nics = nics
        self.ports, self.qps, self.paths = ports, qps, paths
        self.hostmem_size = hostmem_size
        self.frameports = bool(frameports)
        if hostmem_size is not None:
            from .hostmem_hdl import ram_address_bits
            self.ram_aw = ram_address_bits(hostmem_size)
        nic = CsrNic(ports=ports, qps=qps, paths=paths)
        nic._MustUse__silence = True          # only its signature is used here
        nic.core._MustUse__silence = True
        self.nic_signature = nic.signature
        members = {f"n{k}_{name}": member for k in range(nics)
                   for name, member in self.nic_signature.members.items()
                   if not self._internal((name,))}
        if hostmem_size is not None:
            members.update({f"n{k}_hostmem_err": wiring.Out(1) for k in range(nics)})
        if self.frameports:
            members.update({f"n{k}_tx_done_p{i}": wiring.Out(1)
                            for k in range(nics) for i in range(ports)})
        members["wake_any"] = wiring.Out(1)
        super().__init__(members)

    def _internal(self, path) -> bool:
        """The NIC port ``path`` is connected inside the top (the HDL host memory's, the HDL
        frame hand-off's)."""
        if self.frameports and path[0].startswith(("s_axis_p", "m_axis_p")):
            return True
        return self.hostmem_size is not None and path[0] == "m_axi"

    def input_names(self) -> list[str]:
        """Verilog names of every input of the top except ``clk``/``rst``."""
        return [f"n{k}_" + "__".join(path) for k in range(self.nics)
                for path, member in self.nic_signature.members.flatten()
                if member.is_port and member.flow == In and not self._internal(path)]

    def sources(self) -> list[Path]:
        """The Verilog files of the modules the top instantiates (build cache; the NIC's is
        converted on a miss)."""
        out = [nic_verilog(ports=self.ports, qps=self.qps, paths=self.paths)]
        if self.hostmem_size is not None:
            from .hostmem_hdl import hostmem_verilog, ram_verilog
            out += [hostmem_verilog(), ram_verilog()]
        if self.frameports:
            from .frameport_hdl import frameport_verilog
            out.append(frameport_verilog())
        return out

    def hier_blocks(self) -> tuple[str, ...]:
        """Modules Verilator builds as hierarchical blocks: the NIC, whose compiled library
        ccache then shares between tops of any NIC count, memory size and frame-port mode
        (:func:`~mrcnic.sim.rtlsim.build_sim`)."""
        return (NIC_MODULE,)

    def elaborate(self, platform):
        from amaranth.hdl import Signal

        m = Module()
        wake = []
        for k in range(self.nics):
            kw, hm, streams = {}, {}, {}
            for path, member in self.nic_signature.members.flatten():
                if not member.is_port:
                    continue
                name = "__".join(path)
                if self._internal(path):
                    obj = Signal(member.shape, name=f"n{k}_{name}")
                    if path[0] == "m_axi":
                        # the host memory's side of m_axi: ports axi__<member>, flipped
                        hm[("o_" if member.flow == In else "i_") + "axi__"
                           + "__".join(path[1:])] = obj
                    else:    # a plane port's stream member, flipped for the frame hand-off
                        streams.setdefault(path[0], {})[
                            ("o_" if member.flow == In else "i_") + path[1]] = obj
                else:
                    obj = getattr(self, f"n{k}_{path[0]}")
                    for p in path[1:]:
                        obj = getattr(obj, p)
                kw[("i_" if member.flow == In else "o_") + name] = obj
            m.submodules[f"nic{k}"] = Instance(NIC_MODULE, i_clk=ClockSignal(),
                                               i_rst=ResetSignal(), **kw)
            wake += [kw["o_recv_cpl__valid"], kw["o_send_cpl__valid"], kw["o_ev_tap_valid"]]
            if self.hostmem_size is not None:
                from .hostmem_hdl import (DATA_WIDTH, HOSTMEM_MODULE, LANES, RAM_MODULE,
                                          WORD_BITS)
                ram = {}
                for p in (0, 1):
                    ram.update({f"we{p}": Signal(LANES, name=f"n{k}_hm_we{p}"),
                                f"wa{p}": Signal(WORD_BITS, name=f"n{k}_hm_wa{p}"),
                                f"wd{p}": Signal(DATA_WIDTH, name=f"n{k}_hm_wd{p}")})
                ram.update(re=Signal(name=f"n{k}_hm_re"),
                           ra=Signal(WORD_BITS, name=f"n{k}_hm_ra"),
                           rd=Signal(DATA_WIDTH, name=f"n{k}_hm_rd"))
                m.submodules[f"n{k}_hm"] = Instance(
                    HOSTMEM_MODULE, i_clk=ClockSignal(), i_rst=ResetSignal(),
                    o_err=getattr(self, f"n{k}_hostmem_err"), i_rd=ram["rd"],
                    **{f"o_{n}": v for n, v in ram.items() if n != "rd"}, **hm)
                m.submodules[f"n{k}_ram"] = Instance(
                    RAM_MODULE, p_AW=self.ram_aw, i_clk=ClockSignal(), o_rd=ram["rd"],
                    **{f"i_{n}": v for n, v in ram.items() if n != "rd"})
            if self.frameports:
                from .frameport_hdl import CAPTURE_MODULE, INJECT_MODULE
                for i in range(self.ports):
                    m.submodules[f"n{k}_rx{i}"] = Instance(
                        INJECT_MODULE, i_clk=ClockSignal(), i_rst=ResetSignal(),
                        **streams[f"s_axis_p{i}"])
                    m.submodules[f"n{k}_tx{i}"] = Instance(
                        CAPTURE_MODULE, i_clk=ClockSignal(), i_rst=ResetSignal(),
                        o_done=getattr(self, f"n{k}_tx_done_p{i}"), **streams[f"m_axis_p{i}"])
                    wake.append(getattr(self, f"n{k}_tx_done_p{i}"))
        m.d.comb += self.wake_any.eq(Cat(*wake).any())
        return m


# --------------------------------------------------------------------------
# Python side
# --------------------------------------------------------------------------
def _frame_len(payload: int, n_carriers: int = 1) -> int:
    from mrcnic import wire

    return wire.header_length(n_carriers) + payload + wire.roce_pad(payload) + wire.ICRC_LEN


def ideal_times(sc: dict, tables: list, pmtu: int) -> dict:
    """``ideal_ns`` and ``base_rtt_ns`` of a resolved scenario.

    ``ideal_ns`` = the wire bytes (:func:`~mrcnic.sim.fabric.wire_bytes`) of every
    data frame at the full rate of the NIC that moves them (each NIC: the lower of
    :data:`NIC_GBPS` and its planes x host link rate; with several NICs the
    busiest sender or receiver sets it) plus one base RTT: a full data frame
    out and an ACK back, store-and-forward over host link, leaf, spine, leaf
    (serialisation at each hop, link latencies, switch latencies).  It is the
    contract's reference time, not a bound: the NIC moves frame bytes at one beat
    per clock without the 24 preamble/FCS/IFG bytes ``wire_bytes`` counts, and a
    receive completion needs no ACK back, so a run may end slightly under it.

    ``lower_bound_ns`` is a true lower bound of ``completion_ns``: the later of (a) the
    busiest sender's frames at one 64-bit beat per clock, then the smallest data frame
    one way to the receiver, and (b) the busiest NIC's wire bytes over all its host
    links, then that frame's last three hops; RTL latencies only add to it.
    """
    from .fabric import wire_bytes

    fab, topo = sc["fabric"], sc["topology"]
    host_rate = fab.get("host_rate_gbps") or fab["rate_gbps"]
    rate = min(NIC_GBPS, topo["planes"] * host_rate)
    size = sc["size"]
    n_pkts = -(-size // pmtu)
    load = {}
    for t in sc["transfers"]:
        carriers = tables[t["src"]].path_entries[0]["n_carriers"]
        wb = sum(wire_bytes(_frame_len(min(pmtu, size - i * pmtu), carriers))
                 for i in range(n_pkts))
        load[("tx", t["src"])] = load.get(("tx", t["src"]), 0) + wb
        load[("rx", t["dst"])] = load.get(("rx", t["dst"]), 0) + wb
    transfer_ns = max(load.values()) * 8 / rate
    hops = [host_rate, fab["rate_gbps"], fab["rate_gbps"], host_rate]
    lat = 2 * fab["host_latency_ns"] + 2 * fab["latency_ns"] + 3 * fab["switch_latency_ns"]
    rtt = base_rtt_ns(sc, pmtu)
    # the true lower bound (docstring)
    beats = {}
    for t in sc["transfers"]:
        carriers = tables[t["src"]].path_entries[0]["n_carriers"]
        beats[t["src"]] = beats.get(t["src"], 0) + sum(
            -(-_frame_len(min(pmtu, size - i * pmtu), carriers) // 8) for i in range(n_pkts))
    smallest = wire_bytes(_frame_len(min(pmtu, size - (n_pkts - 1) * pmtu)))
    ser = [smallest * 8 / r for r in hops]
    lower = max(max(beats.values()) * CLK_NS + sum(ser) + lat,
                max(load.values()) * 8 / (topo["planes"] * host_rate) + sum(ser[1:]) + lat)
    return dict(ideal_ns=transfer_ns + rtt, base_rtt_ns=rtt, transfer_ns=transfer_ns,
                sender_gbps=rate, lower_bound_ns=lower)


def base_rtt_ns(sc: dict, pmtu: int) -> float:
    """The fabric's base RTT in ns: a full data frame (``pmtu`` payload) out and an ACK back,
    store-and-forward over host link, leaf, spine, leaf (serialisation at each hop, link and
    switch latencies), empty queues."""
    from .fabric import wire_bytes

    fab = sc["fabric"]
    host_rate = fab.get("host_rate_gbps") or fab["rate_gbps"]
    hops = [host_rate, fab["rate_gbps"], fab["rate_gbps"], host_rate]
    lat = 2 * fab["host_latency_ns"] + 2 * fab["latency_ns"] + 3 * fab["switch_latency_ns"]
    return (sum(wire_bytes(_frame_len(pmtu)) * 8 / r for r in hops)
            + sum(wire_bytes(_ACK_BYTES) * 8 / r for r in hops) + 2 * lat)


def run_limits(sc: dict, ideal_ns: float) -> dict:
    """``{"time_limit", "stall_ns"}`` of a scenario: its own values, else derived from the
    senders' first ACK timeout (RTO = 1.024 us x 2^ack_timeout_exp, the scenario's
    ``reliability`` or :data:`mrcnic.config.RELIABILITY_DEFAULTS`): a run may take its
    ideal time plus three RTOs (``time_limit`` = max(4, (ideal + 3 x RTO) / ideal), in
    x ``ideal_ns``) and counts as stalled after max(100 us, 3 x RTO) with nothing sent or
    in flight (ns), so that a packet lost to a link failure is always retransmitted
    before the run gives up."""
    from mrcnic.config import RELIABILITY_DEFAULTS

    exp = (sc.get("reliability") or {}).get("ack_timeout_exp",
                                             RELIABILITY_DEFAULTS["ack_timeout_exp"])
    rto_ns = float(1024 << exp)
    limit = sc.get("time_limit")
    if limit is None:
        limit = max(4.0, (ideal_ns + 3 * rto_ns) / ideal_ns)
    stall = sc.get("stall_ns")
    if stall is None:
        stall = max(100_000.0, 3 * rto_ns)
    return dict(time_limit=limit, stall_ns=float(stall))


def _resolve(sc: dict):
    """(config texts, HwTables per NIC, NicConfig per NIC) of a scenario."""
    from mrcnic.config import compile_tables, loads_config

    from .scenarios import fabric_defaults, make_configs
    from .topology import ClosTopology

    stride = _stride(sc["size"])
    if sc.get("configs"):
        from mrcnic.resources import resource_text
        texts = [resource_text(c) for c in sc["configs"]]     # package data (examples/...)
        sources = [str(c) for c in sc["configs"]]
    else:
        topo = ClosTopology(**sc["topology"])
        n_in = max(sum(1 for t in sc["transfers"] if t["dst"] == k) for k in range(len(sc["nics"])))
        # RTO, probe interval and NSCC window from the fabric; the scenario's own keys win
        pmtu = 1024
        host_rate = sc["fabric"].get("host_rate_gbps") or sc["fabric"]["rate_gbps"]
        dflt = fabric_defaults(sc, base_rtt_ns(sc, pmtu),
                               min(NIC_GBPS, sc["topology"]["planes"] * host_rate), pmtu)
        rel = {**dflt["reliability"], **(sc.get("reliability") or {})}
        if "probe_interval" not in (sc.get("reliability") or {}):   # once per effective RTO
            rel["probe_interval"] = max(2000, (1024 << rel["ack_timeout_exp"]) // CLK_NS)
        sc["reliability"] = rel
        sc["cc"] = sc.get("cc") or dflt["cc"]
        lb = {k: sc[k] for k in ("ev_format", "ev_min_active", "seed") if k in sc}
        texts = make_configs(topo, sc["nics"], sc["transfers"], sc["evs"],
                             region_bytes=max(1, n_in) * stride, pmtu=pmtu, cc=sc["cc"],
                             **lb)      # load-balancing mode (sim/scenario_file.py)
        sources = [f"<{sc['name']}:nic{k}>" for k in range(len(texts))]
    cfgs = [loads_config(t, s) for t, s in zip(texts, sources)]
    return texts, [compile_tables(c) for c in cfgs], cfgs


def resolve_hostmem(name: str | None = None) -> str:
    """The host memory model of a run: ``name``, else ``$MRCNIC_COSIM_HOSTMEM``, else
    ``"python"`` when ``$MRCNIC_COSIM_AXIRAM`` chooses a Python model, else ``"hdl"``."""
    name = name or os.environ.get("MRCNIC_COSIM_HOSTMEM") or \
        ("python" if os.environ.get("MRCNIC_COSIM_AXIRAM") else "hdl")
    if name not in HOSTMEMS:
        raise ValueError(f"host memory must be one of {', '.join(HOSTMEMS)}, not {name!r}")
    return name


def resolve_frameports(name: str | None = None) -> str:
    """The plane ports' frame hand-off of a run: ``name``, else ``$MRCNIC_COSIM_FRAMEPORTS``,
    else ``"hdl"`` (:mod:`mrcnic.sim.frameport_hdl`); ``"python"``: cocotbext-axi's stream
    models (:mod:`mrcnic.sim.fastaxis`).  Both give the same run, cycle for cycle."""
    name = name or os.environ.get("MRCNIC_COSIM_FRAMEPORTS") or "hdl"
    if name not in FRAMEPORTS:
        raise ValueError(f"frame ports must be one of {', '.join(FRAMEPORTS)}, not {name!r}")
    return name


def _mem_size(cfgs: list, wrs: list) -> int:
    """Bytes of host memory per NIC: every memory region and source buffer, rounded up to a
    power of two, at least 1 MiB."""
    top = max([mr.base + mr.length for c in cfgs for mr in c.memory_regions]
              + [w["local_addr"] + w["length"] for w in wrs])
    return 1 << max(20, (top + 4096 - 1).bit_length())


def _stride(size: int) -> int:
    """Spacing of transfers in memory: the size rounded up to 4 KiB, plus 4 KiB of guard."""
    return -(-size // 4096) * 4096 + 4096


def _transfers(sc: dict, cfgs: list) -> list[dict]:
    """Work requests of the scenario: QP index at the source, addresses, rkey, seed."""
    from .scenarios import SRC_BASE

    stride = _stride(sc["size"])
    out = []
    slot = {}
    for i, t in enumerate(sc["transfers"]):
        src, dst = cfgs[t["src"]], cfgs[t["dst"]]
        if sc.get("configs"):
            qp = i                              # files: transfer i uses the source's i-th QP
        else:
            from .scenarios import _qpn
            qp = next(j for j, q in enumerate(src.qps) if q.qpn == _qpn(i, 0))
        mr = dst.memory_regions[0]
        n = slot.get(t["dst"], 0)
        slot[t["dst"]] = n + 1
        if (n + 1) * stride > mr.length:
            raise ValueError(f"transfer {i}: {sc['size']} bytes do not fit nic{t['dst']}'s "
                             f"memory region ({mr.length} bytes)")
        out.append(dict(src=t["src"], dst=t["dst"], qp=qp, local_addr=SRC_BASE + i * stride,
                        remote_va=mr.va + n * stride, dst_addr=mr.base + n * stride,
                        rkey=mr.rkey, length=sc["size"], seed=1000 + i))
    return out


def _progress_loop(progress_file: Path, total: int | None, done: threading.Event, label: str,
                   port_file: Path | None = None, simulator: str = "verilator"):
    """The progress of a run on stderr: a live bar on a terminal; otherwise (a log, a pipe)
    plain lines: the build, the start of the run, then one line every 30 s."""
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    from mrcnic.clikit import console

    tty = sys.stderr.isatty()
    building = f"building the {simulator} model (first run only, then cached)..."

    def say(text):
        if not tty:
            print(f"{label}: {text}", file=sys.stderr, flush=True)
    say(building)
    said_at = None
    # fits 80 columns: a short bar, the time relative to the run's start as in the report
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=16), DownloadColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                  console=console(stderr=True), disable=not tty) as bar:
        task = bar.add_task(label, total=total, info=building)
        pos = 0
        while not done.is_set():
            time.sleep(0.5)
            if port_file is not None and port_file.exists():
                addr = json.loads(port_file.read_text())
                listing = ", ".join(f"nic{x['nic']} tcp:{x['host']}:{x['port']}"
                                    for x in addr.get("nics", [addr]))
                bar.console.print(f"[bold green]serving the NICs' CSR banks: {listing} "
                                  f"(mrcnic fw --target tcp:{addr['host']}:{addr['port']} ...)[/]"
                                  "  (Ctrl-C stops)")
                port_file = None
            if not progress_file.exists():
                continue
            with open(progress_file) as fh:
                fh.seek(pos)
                chunk = fh.read()
            if not chunk.endswith("\n"):
                chunk = chunk[:chunk.rfind("\n") + 1]
            pos += len(chunk.encode())
            for line in chunk.splitlines():
                p = json.loads(line)
                info = (f"t={p['t_rel_ns'] / 1000:.1f}us cpl {p['cpl']}/{p['cpl_expected']}"
                        f" {p['cycles_per_s'] / 1000:.1f}k cyc/s")
                bar.update(task, completed=min(p["placed"], total or p["placed"]), info=info)
                if said_at is None or time.monotonic() - said_at >= 30:
                    said_at = time.monotonic()
                    of = f" of {total}" if total else ""
                    say(f"running: {p['placed']}{of} bytes placed, {info}")


def run_cosim(scenario, *, size: int | None = None, test: bool = False, json_path=None,
              pcap=None, plot=None, waves: bool = False, build_dir=None,
              progress: bool = False, serve: int | None = None, serve_time_us: float | None = None,
              serve_nic: int = 0, simulator: str | None = None, faults: str | None = None,
              seed: int = 0, harness_bug: str | None = None, hostmem: str | None = None,
              frameports: str | None = None) -> dict:
    """Run a scenario: RTL NICs across the fabric model; return the report (a dict).

    Parameters
    ----------
    scenario : str or dict
        A built-in name (:data:`mrcnic.sim.scenarios.SCENARIOS`) or a scenario dict.
    size : int, optional
        Bytes per transfer (default: the scenario's ``size``, ``test_size`` with ``test``).
    json_path, pcap, plot : path, optional
        Write the JSON report, the fabric capture (pcapng, one interface per link direction),
        the per-plane throughput plot (PNG).
    waves : bool
        Dump an FST waveform (``<build_dir>/sim/mrcnic_cosim.fst``).
    build_dir : path, optional
        Where to build and run (a new temporary directory by default).
    progress : bool
        Show a rich progress bar (bytes placed at the receivers).
    serve : int, optional
        Keep the NICs alive and serve NIC ``serve_nic``'s CSR bank on
        ``tcp:127.0.0.1:<serve>`` (0: a free port; the address is in
        ``<build_dir>/serve.json`` and printed with ``progress``) for
        ``mrcnic fw --target tcp:...``.  The scenario's transfers are posted
        again each time they complete (``report["rounds"]``), until
        ``serve_time_us`` of simulated time, or until ``<build_dir>/serve.stop``
        exists (checked every 4096 cycles), or until the process is stopped.
    simulator : str, optional
        ``"verilator"`` or ``"icarus"`` (default ``$MRCNIC_SIM``, else Verilator); the
        report is the same under both but for its wall-clock fields (``sim``).
    faults : str, optional
        A fault spec (:func:`mrcnic.sim.faults.parse_spec`): random faults drawn from
        ``seed`` (:func:`mrcnic.sim.faults.draw`; ``report["faults"]``).
    seed : int
        The fault seed (the same scenario, size, spec and seed replay a run exactly).
    harness_bug : str, optional
        A deliberately broken harness (:data:`mrcnic.sim.invariants.HARNESS_BUGS`), to show
        that the invariants (``report["invariants"]``, ``report["verdict"]``) catch it.
    hostmem : str, optional
        The NICs' host memory: ``"hdl"`` (in the simulation top, :mod:`mrcnic.sim.hostmem_hdl`)
        or ``"python"`` (:class:`~mrcnic.sim.fastaxiram.AxiRamOneTask`, or the model
        ``$MRCNIC_COSIM_AXIRAM`` names); default ``$MRCNIC_COSIM_HOSTMEM``, else ``"python"``
        when ``$MRCNIC_COSIM_AXIRAM`` is set, else ``"hdl"``.  Both give the same report
        (``report["sim"]["hostmem"]`` names it) and the same pcap.
    frameports : str, optional
        The plane ports' frame hand-off: ``"hdl"`` (:mod:`mrcnic.sim.frameport_hdl`) or
        ``"python"`` (:mod:`mrcnic.sim.fastaxis`); default ``$MRCNIC_COSIM_FRAMEPORTS``,
        else ``"hdl"``.  Both give the same report (``report["sim"]["frameports"]`` names
        it) and the same pcap.

    Raises
    ------
    ValueError
        Unknown scenario, bad size, a configuration error.
    AssertionError
        The simulation itself failed (see ``<build_dir>/sim/sim.log``).
    mrcnic.sim.simulators.SimulatorMissing
        The simulator, or a tool it needs (g++, make), is not installed.
    """
    from mrcnic.config import PMTUS

    from . import report as report_mod
    from .rtlsim import run_rtl
    from .scenarios import get_scenario

    from .simulators import resolve, simulator_env

    simulator = resolve(simulator)
    simulator_env(simulator)             # a missing tool: one clear error before any work
    if isinstance(scenario, str):
        sc = get_scenario(scenario, size=size, test=test)
    else:
        sc = dict(scenario)
        sc.setdefault("name", "custom")
        if size is not None:
            sc["size"] = size
    if faults:
        from .faults import draw, parse_spec
        from .topology import ClosTopology
        drawn = draw(parse_spec(faults), seed, ClosTopology(**sc["topology"]))
        sc["faults"] = drawn
        sc["failures"] = list(sc.get("failures", [])) + drawn["failures"]
        # a small transfer whose PSN is lost again and again recovers by ACK timeouts that
        # dwarf its ideal time: under faults only a run still incomplete after
        # FAULT_TIME_LIMIT x ideal (or stalled) counts as a hang
        sc["time_limit"] = max(sc.get("time_limit") or 0.0, FAULT_TIME_LIMIT)
    if harness_bug:
        from .invariants import HARNESS_BUGS
        if harness_bug not in HARNESS_BUGS:
            raise ValueError(f"unknown harness bug {harness_bug!r} ({', '.join(HARNESS_BUGS)})")
        sc["harness_bug"] = harness_bug
    texts, tables, cfgs = _resolve(sc)
    ports = sc["topology"]["planes"]
    for k, tb in enumerate(tables):
        if len(tb.next_hop_mac) != ports:
            raise ValueError(f"nic{k} has {len(tb.next_hop_mac)} ports, the topology {ports} planes")
        if len(tb.path_entries) > COSIM_PATHS or len(tb.rx_qps) > MAX_QPS:
            raise ValueError(f"nic{k} needs {len(tb.path_entries)} path entries and "
                             f"{len(tb.rx_qps)} QPs; the co-simulated NIC holds at most "
                             f"{COSIM_PATHS} and {MAX_QPS}")
    # COSIM_QPS QP contexts, or MAX_QPS when a NIC needs more (an 8:1 incast): the same NIC
    # as before for every scenario that fits in COSIM_QPS, so their results do not move
    qps = COSIM_QPS if max(len(tb.rx_qps) for tb in tables) <= COSIM_QPS else MAX_QPS
    pmtu = cfgs[0].nic.pmtu
    times = ideal_times(sc, tables, pmtu)
    sc.update(run_limits(sc, times["ideal_ns"]))
    wrs = _transfers(sc, cfgs)
    build_dir = Path(build_dir or tempfile.mkdtemp(prefix="mrcnic-sim-"))
    build_dir.mkdir(parents=True, exist_ok=True)
    job_file, out_file = build_dir / "job.json", build_dir / "result.json"
    progress_file = build_dir / "progress.jsonl"
    progress_file.unlink(missing_ok=True)
    out_file.unlink(missing_ok=True)         # never read a report of an earlier run
    port_file = build_dir / "serve.json"
    port_file.unlink(missing_ok=True)
    stop_file = build_dir / "serve.stop"     # ends a served run; Ctrl-C / SIGTERM end any run
    stop_file.unlink(missing_ok=True)
    if serve is not None and not 0 <= serve <= 65535:
        raise ValueError(f"serve port must be 0..65535, not {serve}")
    if serve is not None and not 0 <= serve_nic < len(sc["nics"]):
        raise ValueError(f"serve_nic must be 0..{len(sc['nics']) - 1}, not {serve_nic}")
    if serve_time_us is not None and not 0 < serve_time_us < float("inf"):
        raise ValueError(f"serve_time_us must be > 0 us, not {serve_time_us}")
    if serve:
        _check_port_free(serve)
    # the smallest path table that holds every NIC's entries: a smaller NIC simulates faster
    paths = max(16, 1 << (max(len(tb.path_entries) for tb in tables) - 1).bit_length())
    hostmem = resolve_hostmem(hostmem)
    frameports = resolve_frameports(frameports)
    mem_size = _mem_size(cfgs, wrs)
    top = CosimTop(len(sc["nics"]), ports=ports, qps=qps, paths=paths,
                   hostmem_size=mem_size if hostmem == "hdl" else None,
                   frameports=frameports == "hdl")
    job = dict(scenario=sc, configs=texts, wrs=wrs, times=times, inputs=top.input_names(),
               pmtu_log2=PMTUS[pmtu], pcap=str(Path(pcap).resolve()) if pcap else None,
               progress=str(progress_file), stop_file=str(stop_file),
               hostmem=hostmem, mem_size=mem_size, frameports=frameports,
               serve=None if serve is None else dict(
                   port=serve, nic=serve_nic, port_file=str(port_file),
                   time_ns=None if serve_time_us is None else serve_time_us * 1000.0))
    job_file.write_text(json.dumps(job))
    def simulate():
        # in the worker thread with the rest of the build: the main thread stays free for
        # Ctrl-C (a Yosys conversion in it would hold off the signal until it returns)
        run_rtl(top, toplevel="mrcnic_cosim", test_module="mrcnic.sim.cosim",
                testcase="run_cosim_job", build_dir=build_dir / "sim", env={"job": str(job_file), "out": str(out_file)},
                waves=waves, quiet=True, sources=top.sources(), simulator=simulator,
                public_ports_only=True,
                # a hierarchical block's internals are not in the waves: flat with waves
                hier_blocks=() if waves else top.hier_blocks())

    t0 = time.monotonic()
    if progress:
        done, err = threading.Event(), []

        def worker():
            try:
                simulate()
            except BaseException as exc:       # noqa: BLE001 - re-raised below
                err.append(exc)
            finally:
                done.set()
        th = threading.Thread(target=worker, daemon=True)
        th.start()
        total = len(wrs) * sc["size"] if serve is None else None
        try:
            with sigterm_as_interrupt():
                _progress_loop(progress_file, total, done, f"mrcnic sim {sc['name']}",
                               port_file if serve is not None else None, simulator)
        except KeyboardInterrupt:
            # Ctrl-C (it reached the simulator too) or SIGTERM (to this process only): the
            # stop file ends the run within 4096 clocks, the report is written as usual
            # (``interrupted``) and the simulator exits: no Icarus process is left behind
            print("interrupted: stopping the simulation ...", file=sys.stderr)
            stop_file.write_text("interrupted")
            running = progress_file.exists() and progress_file.stat().st_size > 0
            if not done.wait(10.0 if running else 0.5):
                # still building or starting (the stop file is read only once the run
                # loop is on), or stuck: stop the compiler / simulator processes, no report
                from mrcnic.interrupt import stop_children
                stop_children(grace_s=0.5)
                done.wait(0.5)          # a worker still inside an in-process Yosys is left
            if not out_file.exists():
                top._MustUse__silence = True     # never elaborated: no warning about it
                print("interrupted before the run started: no report written", file=sys.stderr)
                raise KeyboardInterrupt from None
        th.join()
        if err:
            exc = err[0]
            if isinstance(exc, SystemExit):
                raise AssertionError(f"the simulation failed (see {build_dir / 'sim'})")
            raise exc
    else:
        simulate()
    rep = json.loads(out_file.read_text())
    rep["sim"]["wall_s"] = round(time.monotonic() - t0, 2)
    rep["sim"]["simulator"] = simulator
    rep["sim"]["paths"] = paths
    rep["sim"]["hostmem"] = hostmem
    rep["sim"]["frameports"] = frameports
    rep["sim"]["mem_size"] = mem_size
    rep["build_dir"] = str(build_dir)
    if waves:
        rep["waves"] = str(build_dir / "sim" / "mrcnic_cosim.fst")
    report_mod.annotate(rep, served=serve is not None, stop_file=stop_file,
                        lower_bound_ns=times["lower_bound_ns"])
    if serve is None and rep.get("send_completions") is not None:
        from .flows import flow_stats       # per-flow FCT / throughput, per-link load
        rep["flows"] = flow_stats(rep, sc)
    if plot:        # the throughput plot, and beside it <stem>-fct.png, <stem>-links.png
        p = Path(plot)
        extra = ("-fct.png", "-links.png") if rep.get("flows") else ()
        rep["plots"] = [str(p)] + [str(p.with_name(p.stem + s)) for s in extra]
    if json_path:
        report_mod.write_json(rep, json_path)
    if plot:
        report_mod.plot_throughput(rep, plot)
        if rep.get("flows"):
            from .flows import plot_fct_cdf, plot_link_load
            plot_fct_cdf({sc["name"]: [f["fct_ns"] for f in rep["flows"]["flows"]]},
                         rep["plots"][1], f"{sc['name']}: FCT CDF")
            plot_link_load(rep["flows"], sc, rep["plots"][2], f"{sc['name']}: fabric link load")
    return rep


def run_clock_only(nics: int = 2, *, ports: int = 4, paths: int = COSIM_PATHS,
                   cycles: int = 200_000, simulator: str | None = None, build_dir=None,
                   hostmem_size: int | None = None, frameports: bool = False) -> dict:
    """Simulate the co-simulation top (:class:`CosimTop`, the same build as :func:`run_cosim`
    with these parameters; ``hostmem_size``: with the HDL host memory of that size, as
    ``report["sim"]["mem_size"]`` of a run with ``hostmem="hdl"``) with only its clock
    running: every input held at 0 after reset, no Python between the first and the last of
    ``cycles`` clocks.

    Returns ``{cycles, wall_s, cycles_per_s, simulator}`` (wall seconds of the clocked part
    only): the simulator's speed on this design, the bound a harness can approach.
    Raises like :func:`run_cosim`.
    """
    from .rtlsim import run_rtl
    from .simulators import resolve

    simulator = resolve(simulator)
    build_dir = Path(build_dir or tempfile.mkdtemp(prefix="mrcnic-clock-"))
    build_dir.mkdir(parents=True, exist_ok=True)
    out = build_dir / "clock.json"
    top = CosimTop(nics, ports=ports, paths=paths, hostmem_size=hostmem_size,
                   frameports=frameports)
    run_rtl(top, toplevel="mrcnic_cosim", test_module="mrcnic.sim.cosim", testcase="clock_only",
            build_dir=build_dir / "sim", quiet=True, sources=top.sources(), simulator=simulator,
            public_ports_only=True, hier_blocks=top.hier_blocks(),
            env={"cycles": cycles, "inputs": top.input_names(), "out": str(out)})
    rep = json.loads(out.read_text())
    rep["simulator"] = simulator
    return rep


# --------------------------------------------------------------------------
# cocotb side
# --------------------------------------------------------------------------
try:
    import cocotb
    from cocotb.triggers import ClockCycles, Event, First, RisingEdge, Timer
    from cocotb.utils import get_sim_time
except ImportError:          # pragma: no cover - cocotb is a dependency
    cocotb = None

_OP_ACK, _OP_PROBE = 0x11, 0xC0
_DATA_OPS = (0x0A, 0x0B)


def _classify(f: bytes):
    """(opcode, ev, dqpn, psn, ecn, dscp, sack_ev, sack_flags) of a RoCEv2/IPv6 frame, or None.

    A quick positional parse (wire format v1: Ethernet, IPv6, optional SRH, UDP,
    BTH, AETH + MRCSack for ACKs); the EV is rebuilt as SRV6/STEV carry it.
    """
    from mrcnic import wire_format as wf

    udp = wf.udp_offset(f)
    if udp is None or len(f) < udp + wf.UDP.length + wf.BTH.length:
        return None
    ip, bth = wf.ETHERNET.length, udp + wf.UDP.length
    tc, flow = wf.IPV6["tc"].read(f, ip), wf.IPV6["fl"].read(f, ip)
    sport = wf.UDP["sport"].read(f, udp)
    op, dqpn, psn = (wf.BTH[name].read(f, bth) for name in ("opcode", "dqpn", "psn"))
    sack_ev = flags = 0
    sack = bth + wf.BTH.length + wf.AETH.length        # MRCSack after BTH / AETH
    if op == _OP_ACK and wf.MRCSACK["flags"].read(f, sack) is not None:
        sack_ev, flags = wf.MRCSACK["ev"].read(f, sack), wf.MRCSACK["flags"].read(f, sack)
    return op, ((sport & 0xFFF) << 20) | flow, dqpn, psn, tc & 3, tc >> 2, sack_ev, flags


def _timer_or_rise_class():
    """:class:`_EdgeAfterTimerOrRise`, made on first use (it subclasses a cocotb internal)."""
    from cocotb import simulator
    from cocotb._gpi_triggers import GPITrigger
    from cocotb.utils import get_sim_steps

    class _EdgeAfterTimerOrRise(GPITrigger):
        """One trigger that fires at the first rising edge of ``clk`` after ``ns`` nanoseconds
        or after a rising edge of ``signal``, whichever is first: what
        ``await First(Timer(ns), RisingEdge(signal)); await RisingEdge(clk)`` does, without
        the task ``First`` starts per trigger and without waking the waiting task twice
        (three GPI callbacks: the one of timer and rise that fires first removes the other
        and registers the edge's)."""

        def __init__(self, ns: float, signal, clk):
            super().__init__()
            self._steps = get_sim_steps(ns, "ns", round_mode="round") or 1
            self._signal, self._clk = signal._handle, clk._handle
            self._other = None

        def _prime(self):
            self._cbhdl = simulator.register_timed_callback(self._steps, self._fire, 0)
            self._other = simulator.register_value_change_callback(
                self._signal, self._fire, simulator.RISING, 1)

        def _fire(self, which):
            # the callback that fired is gone; remove the other one, wait for the edge
            other = self._other if which == 0 else self._cbhdl
            self._other = None
            other.deregister()
            self._cbhdl = simulator.register_value_change_callback(
                self._clk, self._edge, simulator.RISING, 2)

        def _edge(self, _which):
            self._cbhdl = None
            self._react()

        def _unprime(self):
            for h in (self._cbhdl, self._other):
                if h is not None:
                    h.deregister()
            self._cbhdl = self._other = None

    return _EdgeAfterTimerOrRise


class _EdgeWaker:
    """Wakes the co-simulation's main loop at the clock edges it must see, and only those.

    :meth:`plan` names the next edge due (the first rising edge at or after a time, in ns);
    :meth:`next_edge` sleeps until then in one ``Timer``, and wakes earlier, at the next
    edge, when a watched port signal (a completion or EV event ``valid``) rises or
    ``sent_event`` is set (a NIC sent a frame).  While a watched signal is high every edge
    is seen, so back-to-back events are never missed.  What the loop reads at an edge is
    what it read when it woke every clock; it only skips the edges where it did nothing.
    One watcher task per watched signal sets ``sent_event`` when the signal rises, so the
    sleep waits on two triggers (``First`` makes a task per trigger, at every sleep).  With
    ``sent_event`` None (nothing else sends: the HDL frame ports), ``watched`` is one
    signal and the sleep to the edge is one trigger on it, the time and the clock
    (:func:`_timer_or_rise_class`).
    """

    def __init__(self, clk, watched, sent_event, every_cycle: bool = False):
        from .fastsig import bit_reader

        self.watched, self.sent_event = watched, sent_event
        self.high = [bit_reader(s) for s in watched]
        self.clk, self.edge = clk, RisingEdge(clk)
        self.every_cycle = every_cycle
        self.target = None          # the next edge due (ns), or None: the next edge
        self.timer_or_rise = None
        if sent_event is None:
            if len(watched) != 1:
                raise ValueError("without sent_event the waker watches exactly one signal")
            self.timer_or_rise = _timer_or_rise_class()
        elif not every_cycle:
            for s in watched:
                cocotb.start_soon(self._watch(RisingEdge(s)))

    async def _watch(self, rise):
        while True:
            await rise
            self.sent_event.set()

    def plan(self, now: float, due: float):
        """The loop, at the edge at ``now`` (ns), next needs the first edge at or after
        ``due`` (ns)."""
        if self.every_cycle or any(h() for h in self.high):
            self.target = None
            return
        k = max(1, -(-(due - now) // CLK_NS))
        while k > 1 and now + (k - 1) * CLK_NS >= due:      # float rounding: the first edge
            k -= 1
        while now + k * CLK_NS < due:
            k += 1
        self.target = now + k * CLK_NS

    async def next_edge(self) -> float:
        """Sleep to the planned edge, or to the edge after a wake-up (see the class);
        return the edge's time (ns)."""
        target, self.target = self.target, None
        if target is not None:
            gap = target - get_sim_time(unit="ns")
            if gap > CLK_NS:
                if self.timer_or_rise is not None:
                    await self.timer_or_rise(gap - CLK_NS / 2, self.watched[0], self.clk)
                    return get_sim_time(unit="ns")
                else:
                    self.sent_event.clear()
                    await First(Timer(gap - CLK_NS / 2, unit="ns"), self.sent_event.wait())
        await self.edge
        return get_sim_time(unit="ns")


class _Nic:
    """One co-simulated NIC: its memory, plane sources/sinks and its CSR bank (firmware client)."""

    def __init__(self, dut, k: int, host: int, ports: int, cfg, tables, mem_size: int,
                 hostmem: str = "python", frameports: str = "python"):
        from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam, AxiStreamBus

        from mrcnic.fw.client import AsyncCsrClient
        from mrcnic.fw.transport import AxiLiteTransport

        from .fastaxiram import AxiRamFast, AxiRamOneTask
        from .fastaxis import AxiStreamSinkFast, AxiStreamSourceFast

        self.dut, self.k, self.host, self.ports = dut, k, host, ports
        self.cfg, self.tables = cfg, tables
        self.pre = f"n{k}_"
        # host memory: an anonymous mmap (pages allocated when touched) instead of
        # cocotbext-axi's SparseMemory, whose 4 KiB-block dictionary cost most of each
        # beat's read.  AxiRamOneTask: AxiRam's handshakes cycle for cycle from one coroutine
        # (mrcnic.sim.fastaxiram); MRCNIC_COSIM_AXIRAM=cocotbext runs cocotbext-axi's own
        # AxiRam, =fast its seven tasks made cheaper per beat (references: same results)
        # hostmem "hdl": the memory is in the simulation top (mrcnic.sim.hostmem_hdl), this
        # is its backdoor (no Python per clock)
        if hostmem == "hdl":
            from .hostmem_hdl import HdlHostMem
            self.mem = HdlHostMem(getattr(dut, f"n{k}_ram"), mem_size)
            self.hostmem_err = getattr(dut, f"n{k}_hostmem_err")
        else:
            ram = dict(cocotbext=AxiRam, fast=AxiRamFast).get(
                os.environ.get("MRCNIC_COSIM_AXIRAM"), AxiRamOneTask)
            self.mem = ram(AxiBus.from_prefix(dut, f"n{k}_m_axi", bus_separator="__"),
                           dut.clk, dut.rst, size=mem_size, mem=mmap.mmap(-1, mem_size))
            self.hostmem_err = None
        # plane ports: frameports "hdl": the frame hand-off in the simulation top
        # (mrcnic.sim.frameport_hdl, Python once per frame); "python": cocotbext-axi's
        # stream source / sink (mrcnic.sim.fastaxis, Python at every beat)
        self.hdl_ports = frameports == "hdl"
        if self.hdl_ports:
            from .frameport_hdl import HdlFrameSink, HdlFrameSource
            self.sources = [HdlFrameSource(getattr(dut, f"n{k}_rx{i}")) for i in range(ports)]
            self.sinks = [HdlFrameSink(getattr(dut, f"n{k}_tx{i}"),
                                       self.sig(f"m_axis_p{i}__tdata"),
                                       self.sig(f"m_axis_p{i}__tkeep"),
                                       self.sig(f"tx_done_p{i}")) for i in range(ports)]
        else:
            self.sources = [AxiStreamSourceFast(
                AxiStreamBus.from_prefix(dut, f"n{k}_s_axis_p{i}", bus_separator="__"),
                dut.clk, dut.rst) for i in range(ports)]
            self.sinks = [AxiStreamSinkFast(
                AxiStreamBus.from_prefix(dut, f"n{k}_m_axis_p{i}", bus_separator="__"),
                dut.clk, dut.rst) for i in range(ports)]
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"n{k}_s_axil", bus_separator="__"),
                                  dut.clk, dut.rst)
        self.csr = AsyncCsrClient(AxiLiteTransport(self.axil))
        # no per-frame / per-burst log lines from cocotbext-axi (loggers cocotb.<top>.<bus>)
        logging.getLogger(f"cocotb.{dut._name}").setLevel(logging.WARNING)
        self.cpl_valid = self.sig("recv_cpl__valid")
        self.cpl_payload = self.sig("recv_cpl__payload")
        self.sig("recv_cpl__ready").value = 1
        self.sig("send_cpl__ready").value = 1
        from cocotb.triggers import Lock
        self.wr_lock = Lock()       # s_wr is shared with the served board model (sim/serve.py)

    def sig(self, name):
        return getattr(self.dut, self.pre + name)

    def deliver(self, plane: int, frame: bytes):
        """Queue ``frame`` for the NIC's plane input ``plane`` (from the next edge on)."""
        if self.hdl_ports:
            self.sources[plane].send_nowait(frame)
        else:
            from cocotbext.axi import AxiStreamFrame
            self.sources[plane].send_nowait(AxiStreamFrame(frame))

    async def program(self, ack_every: int, ack_timeout: int, rel_overrides: dict):
        """Provision the NIC through its CSR bank, as ``mrcnic fw provision`` does on a board
        (:func:`mrcnic.fw.provision.provision_plan`), with the scenario's ACK coalescing and
        sender-reliability overrides."""
        from mrcnic.fw.provision import apply_plan_async, provision_plan

        ident = await self.csr.identity()
        plan = provision_plan(self.cfg, self.tables, ident, rel_overrides=rel_overrides,
                              ack=(ack_every, ack_timeout))
        await apply_plan_async(self.csr, plan)
        await ClockCycles(self.dut.clk, 8)

    async def post(self, wrs: list):
        """Hand the work requests to ``s_wr`` one after the other (valid held until ready)."""
        from mrcnic.rtl.layouts import WorkRequest, WrOpcode

        from .tb import pack

        valid, payload, ready = self.sig("s_wr__valid"), self.sig("s_wr__payload"), \
            self.sig("s_wr__ready")
        await self.wr_lock.acquire()
        for i, wr in wrs:
            payload.value = pack(WorkRequest, dict(
                qp=wr["qp"], opcode=WrOpcode.WRITE, wr_id=i, local_addr=wr["local_addr"],
                remote_va=wr["remote_va"], rkey=wr["rkey"], length=wr["length"], imm=0))
            valid.value = 1
            while True:
                await RisingEdge(self.dut.clk)
                if int(ready.value):
                    break
        valid.value = 0
        self.wr_lock.release()

    def counters(self) -> dict:
        """The core's counters (:data:`mrcnic.rtl.csr_nic.STATS`), read from its ports."""
        from mrcnic.rtl.csr_nic import STATS
        return {n: int(self.sig(n).value) for n in STATS}

    def drops(self) -> dict:
        from mrcnic.rtl.rx_parser import DropReason
        total = {r.name: 0 for r in DropReason}
        for i in range(self.ports):
            raw = int(self.sig(f"drops_p{i}").value)
            for r in DropReason:
                total[r.name] += raw >> (32 * r.value) & 0xFFFFFFFF
        return total


class _Observer:
    """Counts what the NICs send and receive, frame by frame, per EV."""

    def __init__(self, trim_dscp: int):
        self.trim_dscp = trim_dscp
        self.per_ev = {}
        self.seen = set()
        self.data_sent = self.retx = self.acks = self.trim_nacks = self.ecn_echoes = 0
        self.probes = self.probe_replies = 0
        self.data_bytes_plane = {}
        self.last_ns = 0.0
        self.first_failure_ns = None

    def _ev(self, ev):
        e = self.per_ev.get(ev)
        if e is None:
            e = self.per_ev[ev] = dict(packets=0, bytes=0, retransmissions=0, delivered=0,
                                       ecn_marked=0, trimmed=0, acks=0, ecn_echoes=0,
                                       trim_nacks=0, probes=0, probe_replies=0,
                                       sent_after_failure=0, first_ns=None, last_ns=None)
        return e

    def sent(self, k, plane, frame, now):
        c = _classify(frame)
        if c is None:
            return
        op, ev, dqpn, psn, _, _, sack_ev, flags = c
        self.last_ns = now
        if op in _DATA_OPS:
            e = self._ev(ev)
            e["packets"] += 1
            if self.first_failure_ns is not None and now >= self.first_failure_ns:
                e["sent_after_failure"] += 1
            e["bytes"] += len(frame)
            e["plane"] = plane
            if e["first_ns"] is None:
                e["first_ns"] = now
            e["last_ns"] = now
            self.data_sent += 1
            self.data_bytes_plane[plane] = self.data_bytes_plane.get(plane, 0) + len(frame)
            key = (k, dqpn, psn)
            if key in self.seen:
                self.retx += 1
                e["retransmissions"] += 1
            self.seen.add(key)
        elif op == _OP_ACK:
            self.acks += 1
            e = self._ev(sack_ev)
            e["acks"] += 1
            if flags & 0x01:
                self.ecn_echoes += 1
                e["ecn_echoes"] += 1
            if flags & 0x02:
                self.trim_nacks += 1
                e["trim_nacks"] += 1
            if flags & 0x04:
                self.probe_replies += 1
                e["probe_replies"] += 1
        elif op == _OP_PROBE:
            self.probes += 1
            self._ev(ev)["probes"] += 1

    def delivered(self, frame):
        c = _classify(frame)
        if c is None:
            return
        op, ev, _, _, ecn, dscp, _, _ = c
        if op in _DATA_OPS:
            e = self._ev(ev)
            e["delivered"] += 1
            if ecn == 3:
                e["ecn_marked"] += 1
            if dscp == self.trim_dscp:
                e["trimmed"] += 1


def _fabric_for(sc: dict, pcap: str | None = "hosts"):
    """(topology, fabric) of a scenario; ``pcap``: the links tapped (Fabric's ``pcap``)."""
    from .fabric import Fabric
    from .topology import ClosTopology

    topo = ClosTopology(**sc["topology"])
    fabric = Fabric(topo, pcap=pcap, **sc["fabric"])
    for s in sc.get("slow_links", []):
        a, b = s["link"]
        for port in (fabric.port(a, b), fabric.port(b, a)):
            port.rate_gbps = float(s["rate_gbps"])
    return topo, fabric


def _schedule_failures(fabric, sc, t0, ideal):
    out = []
    for f in sc.get("failures", []):
        at = t0 + f["at"] * ideal
        target = f["target"]
        fn = getattr(fabric, f["action"])
        if isinstance(target, list):
            fn(at, *target)
        else:
            fn(at, target)
        out.append(dict(action=f["action"], target=target, at_ns=at))
    return out


def _background(sc, topo, t0, ideal):
    """[(next_ns, period_ns, stop_ns, host, plane, frame)] of the background flows."""
    from mrcnic import wire

    from .fabric import wire_bytes

    flows = []
    for i, b in enumerate(sc.get("background", [])):
        path = next(p for p in topo.paths(b["src_host"], b["dst_host"])
                    if p.plane == b["plane"] and p.spine == b["spine"])
        enc = wire.PathEncap(ev=topo.ev_of(path.plane, path.spine), port=path.plane,
                             mode="SRV6", block=topo.block, usids=list(path.usids))
        frame = wire.build_data_frame(
            src_mac=topo.host_mac(b["src_host"]), dst_mac="02:00:00:00:ff:ff",
            src_ip=topo.host_ip(b["src_host"]), path=enc, qpn=0xFFFFF0 + i, psn=0,
            va=0, rkey=0, payload=bytes(b["payload_bytes"]))
        period = wire_bytes(len(frame)) * 8 / b["rate_gbps"]
        flows.append([t0 + b["from"] * ideal, period, t0 + b["to"] * ideal,
                      b["src_host"], b["plane"], frame])
    return flows


def _check_port_free(port: int, host: str = "127.0.0.1"):
    """ValueError now (before the build) if ``host:port`` cannot be bound by the CSR server."""
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # as CsrServer binds
        s.bind((host, port))
    except OSError as exc:
        raise ValueError(f"cannot serve on {host}:{port}: {exc.strerror or exc} "
                         "(use another --serve port, or 0 for a free one)") from None
    finally:
        s.close()


def _start_serving(nics, serve: dict):
    """Serve every NIC's CSR bank, board registers and host memory on TCP
    (:func:`mrcnic.sim.serve.serve_nics`); returns (bridge, server)."""
    from .serve import serve_nics
    # the server threads wait for the simulation's thread at every register and host-memory
    # access: hand the interpreter over every 0.2 ms instead of every 5 ms
    sys.setswitchinterval(2e-4)
    return serve_nics(nics, serve)


if cocotb is not None:
    @cocotb.test()
    async def run_cosim_job(dut):
        """Execute the job named by ``MRCNIC_JOB``; write the report to ``MRCNIC_OUT``."""
        from mrcnic.config import compile_tables, loads_config
        from mrcnic.rtl.layouts import Completion, EvEvent

        from .rtlsim import tb_param
        from .tb import start, unpack

        job = json.loads(Path(tb_param("job")).read_text())
        sc, times = job["scenario"], job["times"]
        ideal = times["ideal_ns"]
        cfgs = [loads_config(t, f"nic{k}") for k, t in enumerate(job["configs"])]
        tables = [compile_tables(c) for c in cfgs]
        ports = sc["topology"]["planes"]
        # --pcap: every link tapped (one pcapng interface per link direction); else none
        topo, fabric = _fabric_for(sc, pcap="all" if job.get("pcap") else None)
        if sc.get("faults"):                # seeded random faults (sim/faults.py)
            from .faults import FaultInjector
            fabric.faults = FaultInjector(sc["faults"], fabric)
        wrs = job["wrs"]
        mem_size = _mem_size(cfgs, wrs)
        hostmem = job.get("hostmem", "python")
        if job.get("mem_size", mem_size) != mem_size:
            raise AssertionError(f"host memory of {job['mem_size']} bytes, the job needs {mem_size}")

        await start(dut, job["inputs"])
        # GPI's debug messages (one per handle made, thousands for the HDL memories' words)
        # are filtered in C below WARNING instead of in Python
        logging.getLogger("gpi").setLevel(logging.WARNING)
        nics = [_Nic(dut, k, h, ports, cfgs[k], tables[k], mem_size, hostmem,
                     job.get("frameports", "python"))
                for k, h in enumerate(sc["nics"])]
        nic_of_host = {h: k for k, h in enumerate(sc["nics"])}
        for coro in [cocotb.start_soon(n.program(sc["ack_every"], sc["ack_timeout"],
                                                 sc.get("reliability", {})))
                     for n in nics]:
            await coro

        # Source data (random, seeded) and destination ranges pre-filled with its complement,
        # so an untouched byte never looks delivered; guard bands around each range.
        datas = []
        for w in wrs:
            data = random.Random(w["seed"]).randbytes(w["length"])
            datas.append(data)
            nics[w["src"]].mem.write(w["local_addr"], data)
            dst = nics[w["dst"]].mem
            dst.write(w["dst_addr"] - _GUARD, b"\x5a" * _GUARD)
            dst.write(w["dst_addr"], bytes(b ^ 0xFF for b in data))
            dst.write(w["dst_addr"] + w["length"], b"\x5a" * _GUARD)

        from mrcnic.config import rel_qp_configs

        from .invariants import RunChecker
        checker = RunChecker(wrs, datas, cfgs, [rel_qp_configs(c, t) for c, t in zip(cfgs, tables)],
                             sc.get("harness_bug"))
        mems = [n.mem for n in nics]
        checker.snapshot(mems)
        # with faults, a run also waits for every send completion (a lost last ACK is
        # recovered by the sender's timeout, after the receiver completed)
        wait_tx = bool(sc.get("faults") or sc.get("harness_bug")) and not job.get("serve")
        checker.check_tx = wait_tx
        obs = _Observer(tables[0].trim_dscp)

        sent_event = Event()        # a NIC sent a frame: the fabric's next event may be sooner

        def sent(nic, plane, frame, now):
            obs.sent(nic.k, plane, frame, now)
            fabric.send(nic.host, plane, frame, now)

        async def pump(nic, plane):
            sink = nic.sinks[plane]
            while True:
                frame = bytes((await sink.recv()).tdata)
                sent(nic, plane, frame, get_sim_time(unit="ns"))
                sent_event.set()

        hdl_ports = nics[0].hdl_ports
        if hdl_ports:
            # the HDL frame hand-off: the main loop reads the frames that end at an edge
            # after everything else it does there, as the pumps did (they ran after it)
            tx_done = [(n, p, s, s.done) for n in nics for p, s in enumerate(n.sinks)]

            drained_at = [None]

            def drain_tx(now):
                """Hand the frames whose last beat this edge takes to the fabric (once per
                edge)."""
                if drained_at[0] == now:
                    return
                drained_at[0] = now
                for n, p, s, done in tx_done:
                    if done():
                        sent(n, p, s.frame(), now)

            async def drain_cycles(count):
                """``count`` clocks with the frames sent in them handed to the fabric."""
                drain_tx(get_sim_time(unit="ns"))
                edge = RisingEdge(dut.clk)
                for _ in range(count):
                    await edge
                    drain_tx(get_sim_time(unit="ns"))
        else:
            for n in nics:
                for p in range(ports):
                    cocotb.start_soon(pump(n, p))

            async def drain_cycles(count):
                await ClockCycles(dut.clk, count)

        serve = job.get("serve")
        bridge = server = None
        if serve:
            bridge, server = _start_serving(nics, serve)

        def post_round():
            for k, n in enumerate(nics):
                mine = [(i, w) for i, w in enumerate(wrs) if w["src"] == k]
                if mine:
                    cocotb.start_soon(n.post(mine))

        t0 = get_sim_time(unit="ns")
        post_round()
        rounds = 1
        failures = _schedule_failures(fabric, sc, t0, ideal)
        obs.first_failure_ns = min((f["at_ns"] for f in failures), default=None)
        bg = _background(sc, topo, t0, ideal)
        bg_sent = 0
        limit = t0 + sc["time_limit"] * ideal + sc["linger_ns"]
        if serve:
            limit = t0 + serve["time_ns"] if serve.get("time_ns") else float("inf")
        receivers = sorted({w["dst"] for w in wrs})
        expected = {k: sum(1 for w in wrs if w["dst"] == k) for k in receivers}
        completions, events, cwnd = [], [], []
        send_cpls = []
        # The run allocates many short-lived objects per clock (cocotb triggers, values);
        # keep the collector off the long-lived ones (fabric, tables, memories).
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 50, 100)
        done_at = None
        first_round_ns = None       # served runs: when the first round's last message completed
        stall_ns = sc["stall_ns"]             # run_limits
        stalled = False
        # Ctrl-C: end the run cleanly at the next clock (Icarus would otherwise stop at its
        # interactive prompt and hang the run)
        interrupted = []
        signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
        prog = open(job["progress"], "a")
        wall0 = time.monotonic()
        profile = None
        if os.environ.get("MRCNIC_COSIM_PROFILE"):      # the run loop's Python, profiled
            import cProfile
            profile = cProfile.Profile()
            profile.enable()
        cycles = 0
        # Python wakes only at the clock edges where something happens (see _EdgeWaker):
        # a frame due at a NIC or a background frame due, a frame sent by a NIC, a completion or EV
        # event on a NIC's ports, every 256th cycle (cwnd samples, progress, stall check),
        # the end of the run, and in a served run every SERVE_POLL_CYCLES-th cycle (its CSR
        # bridge starts the next queued access).  MRCNIC_COSIM_POLL=1 wakes at every clock
        # (to check that both give the same result).
        # every port event the loop must see at its edge, ORed in the top (CosimTop.wake_any)
        watched = [dut.wake_any]
        waker = _EdgeWaker(dut.clk, watched, None if hdl_ports else sent_event,
                           every_cycle=os.environ.get("MRCNIC_COSIM_POLL") == "1")
        # the ports read at every wake-up, read through mrcnic.sim.fastsig
        from .fastsig import bit_reader, reader
        cpl_high = [(k, bit_reader(nics[k].cpl_valid)) for k in receivers]
        send_cpl_high = [(n, bit_reader(n.sig("send_cpl__valid"))) for n in nics]
        ev_high = [(n, bit_reader(n.sig("ev_tap_valid"))) for n in nics]
        placed_bytes = [reader(nics[k].sig("placed_bytes")) for k in receivers]
        any_event = bit_reader(dut.wake_any)
        loop_py_s, perf = 0.0, time.perf_counter     # wall seconds in the loop's own Python
        # the fabric's events between NIC arrivals (hops, queues) need no edge of their own:
        # the loop sleeps to the first time a frame can reach a host (a look-ahead of at
        # least one link's propagation delay); MRCNIC_COSIM_LOOKAHEAD=0 wakes at every
        # fabric event instead (the same run, to check that both agree)
        next_fabric_due = fabric.next_delivery_bound_ns \
            if os.environ.get("MRCNIC_COSIM_LOOKAHEAD", "1") != "0" else fabric.next_event_ns
        while True:
            now = await waker.next_edge()
            t_wake = perf()
            event = any_event()         # a completion, EV event or frame end at this edge
            if not cycles:
                first_edge = now
            cycles = int(round((now - first_edge) / CLK_NS)) + 1
            nxt = fabric.next_event_ns()
            if (nxt is not None and nxt <= now) or fabric.has_pending_deliveries():
                for d in fabric.advance(now):
                    k = nic_of_host.get(d.host)
                    if k is None:
                        continue                     # background sink host: no NIC
                    obs.delivered(d.frame_bytes)
                    nics[k].deliver(d.plane, d.frame_bytes)
            for flow in bg:
                while flow[0] <= now and flow[0] < flow[2]:
                    fabric.send(flow[3], flow[4], flow[5], now)
                    flow[0] += flow[1]
                    bg_sent += 1
            for k, high in cpl_high if event else ():
                if high():
                    c = unpack(Completion, int(nics[k].cpl_payload.value))
                    if serve or checker.rx_completion(k, int(c["qp"]), now, mems):
                        completions.append(dict(nic=k, qp=int(c["qp"]), psn=int(c["psn"]),
                                                t_ns=now))
            for n, high in send_cpl_high if event else ():
                if high():
                    c = unpack(Completion, int(n.sig("send_cpl__payload").value))
                    send_cpls.append(dict(nic=n.k, qp=int(c["qp"]), psn=int(c["psn"]), t_ns=now))
                    checker.tx_completion(n.k, int(c["qp"]))
            for n, high in ev_high if event else ():
                if high():
                    e = unpack(EvEvent, int(n.sig("ev_tap").value))
                    events.append(dict(nic=n.k, t_ns=now, index=int(e["index"]),
                                       ev=int(e["ev"]), state=_name(e["state"]),
                                       reason=_name(e["reason"]), rtt_ns=int(e["rtt_ns"])))
            if cycles & 255 == 0:
                for n in nics:
                    cwnd.append(dict(nic=n.k, t_ns=now, cwnd=int(n.sig("cwnd").value)
                                     & 0xFFFFFFFF))
            if cycles & 2047 == 0:
                placed = sum(r() for r in placed_bytes)
                wall = time.monotonic() - wall0
                prog.write(json.dumps(dict(t_ns=now, t_rel_ns=now - t0, cycles=cycles,
                                           placed=placed,
                                           cpl=len(completions),
                                           cpl_expected=sum(expected.values()) * rounds,
                                           cycles_per_s=cycles / max(wall, 1e-9))) + "\n")
                prog.flush()
            if interrupted:
                break
            if bridge is not None:
                bridge.service()
            # the stop file: the end of a served run, or the parent's Ctrl-C / SIGTERM
            if cycles & 4095 == 0 and os.path.exists(job["stop_file"]):
                with open(job["stop_file"]) as fh:
                    if bridge is None or fh.read().strip() == "interrupted":
                        interrupted.append(True)
                break
            if done_at is None and all(
                    sum(1 for c in completions if c["nic"] == k) >= expected[k] * rounds
                    for k in receivers) and (not wait_tx or min(checker.tx_cpl) >= 1):
                if serve:               # serving: the scenario's transfers again, until stopped
                    if first_round_ns is None:      # the completion reported: round 1's
                        first_round_ns = max(c["t_ns"] for c in completions)
                    rounds += 1
                    post_round()
                else:
                    done_at = now
            if (done_at is not None and now >= done_at + sc["linger_ns"]) or now >= limit:
                break
            if done_at is None and not serve and cycles & 255 == 0 \
                    and fabric.next_event_ns() is None and now - max(obs.last_ns, t0) > stall_ns:
                stalled = True          # nothing sent or in flight for stall_ns: give up
                break
            # the next edge Python must see (the waker also wakes on frames and port events)
            due = [limit, first_edge + (((cycles >> 8) + 1) << 8) * CLK_NS - CLK_NS]
            if bridge is not None:
                due.append(now + SERVE_POLL_CYCLES * CLK_NS)
            if hdl_ports:
                backlog = False
                for n in nics:
                    for src in n.sources:
                        if src.backlog:
                            src.refill()
                            backlog = backlog or src.waiting()
                if event:
                    drain_tx(now)
                if backlog:
                    due.append(now)             # the next edge: the backlog refilled
            nxt = next_fabric_due()
            if nxt is not None:
                due.append(nxt)
            due += [flow[0] for flow in bg if flow[0] < flow[2]]
            if done_at is not None:
                due.append(done_at + sc["linger_ns"])
            waker.plan(now, min(due))
            loop_py_s += perf() - t_wake
        wall = time.monotonic() - wall0
        if profile is not None:
            profile.disable()
            profile.dump_stats(os.environ["MRCNIC_COSIM_PROFILE"])
        end_ns = get_sim_time(unit="ns")
        prog.write(json.dumps(dict(
            t_ns=end_ns, t_rel_ns=end_ns - t0, cycles=cycles,
            cpl=len(completions),
            placed=sum(nics[k].counters()["placed_bytes"] for k in receivers),
            cpl_expected=sum(expected.values()) * rounds, cycles_per_s=cycles / max(wall, 1e-9))) + "\n")
        prog.close()
        gc.unfreeze()
        if server is not None:
            server.stop()
            bridge.fail_pending()

        # ---- invariants (sim/invariants.py) ----------------------------------------------
        if fabric.faults is not None and not serve and not interrupted:
            # frames already handed to a NIC get through its parser before they are
            # accounted (a corrupted frame delivered in the last clocks is still counted)
            for _ in range(200):
                if all(s.idle() for n in nics for s in n.sources):
                    break
                await drain_cycles(64)
            await drain_cycles(256)
        invariants = None
        if not serve:
            injected = fabric.faults.counters() if fabric.faults is not None else None
            invariants = checker.finish(
                mems, complete=done_at is not None, stalled=stalled,
                limit_hit=done_at is None and not stalled and not interrupted,
                conservation=fabric.conservation(), injected=injected,
                nic_drops=[n.drops() for n in nics], hosts=[n.host for n in nics],
                events=events)

        # the HDL host memory models only the AXI transfers the NIC makes (hostmem_hdl)
        bad = [n.k for n in nics if n.hostmem_err is not None and n.hostmem_err.value == 1]
        if bad:
            raise AssertionError(f"nic{bad[0]}'s m_axi made a transfer the HDL host memory does "
                                 "not model (mrcnic.sim.hostmem_hdl: INCR, full width, within "
                                 "4 KiB, wlast on the last beat); run with hostmem='python'")

        # ---- memory check ---------------------------------------------------------------
        posted = delivered = mismatched = 0
        per_transfer = []
        for w, data in zip(wrs, datas):
            got = nics[w["dst"]].mem.read(w["dst_addr"], w["length"])
            ok = sum(1 for a, b in zip(got, data) if a == b)
            untouched = sum(1 for a, b in zip(got, data) if a == b ^ 0xFF and a != b)
            bad = w["length"] - ok - untouched
            guards = nics[w["dst"]].mem.read(w["dst_addr"] - _GUARD, _GUARD) + \
                nics[w["dst"]].mem.read(w["dst_addr"] + w["length"], _GUARD)
            outside = sum(1 for b in guards if b != 0x5A)
            posted += w["length"]
            delivered += ok
            mismatched += bad + outside
            per_transfer.append(dict(src=w["src"], dst=w["dst"], bytes=w["length"],
                                     delivered=ok, mismatched=bad, written_outside=outside,
                                     missing=untouched))
        nic_counters = [n.counters() for n in nics]
        nic_drops = [n.drops() for n in nics]
        fc = fabric.counters()
        end = get_sim_time(unit="ns")
        bin_ns = max(250.0, (end - t0) / 400)
        thr = fabric.throughput(bin_ns, end_ns=end)
        spine_of = {}
        for tb in tables:
            for enc in tb.path_encaps:
                for u in enc.usids:
                    node = topo.node_of_usid(u)
                    if node and topo.nodes[node]["kind"] == "spine":
                        spine_of.setdefault(enc.ev, node)
        per_ev = {}
        for ev, e in sorted(obs.per_ev.items()):
            e = dict(e, spine=spine_of.get(ev))
            per_ev[f"{ev:#x}"] = e
        bad_evs = {(e["nic"], e["index"]) for e in events if e["state"] == "ASSUMED_BAD"}
        last_cpl = max((c["t_ns"] for c in completions), default=None)
        rep = dict(
            scenario=sc["name"], description=sc.get("description", ""), planes=ports,
            evs=tables[wrs[0]["src"]].qp_contexts[wrs[0]["qp"]]["profile_count"],
            nics=len(nics), size=sc["size"], transfers=per_transfer,
            complete=done_at is not None or rounds > 1, stalled=stalled, rounds=rounds,
            interrupted=bool(interrupted),
            csr_ops=bridge.ops if bridge is not None else 0,
            bytes_posted=posted, bytes_delivered=delivered, bytes_mismatched=mismatched,
            packets_sent=obs.data_sent, retransmissions=obs.retx,
            trimmed=fc["trimmed"], ecn_marked=fc["ecn_marked"],
            trim_nacks=obs.trim_nacks, ecn_echoes=obs.ecn_echoes, acks_sent=obs.acks,
            probes_sent=obs.probes, probe_replies=obs.probe_replies,
            evs_assumed_bad=len(bad_evs), ev_events=events,
            completion_ns=((last_cpl - t0) if done_at is not None else
                           (first_round_ns - t0) if first_round_ns is not None else None),
            ideal_ns=ideal, base_rtt_ns=times["base_rtt_ns"],
            sender_gbps=times["sender_gbps"],
            per_plane_bytes=fc["per_plane_bytes"],
            per_plane_data_bytes=[obs.data_bytes_plane.get(p, 0) for p in range(ports)],
            failures=[dict(f, t_ns=f["time_ns"], t_rel_ns=f["time_ns"] - t0)
                      for f in fc["failures"]],
            failures_planned=failures,
            per_ev=per_ev,
            drops=dict(fabric=fc["drops"], nic=_sum_dicts(nic_drops)),
            nic_counters=nic_counters, nic_drops=nic_drops,
            fabric_ports=fc["ports"], background_frames=bg_sent,
            faults=None if not sc.get("faults") else dict(
                sc["faults"], injected=fabric.faults.counters()),
            invariants=invariants, harness_bug=sc.get("harness_bug"),
            verdict=None if invariants is None else
            ("pass" if all(v["ok"] for v in invariants.values()) else "fail"),
            conservation=fabric.conservation(),
            completions=completions, send_completions=send_cpls, cwnd=cwnd,
            throughput=dict(bin_ns=bin_ns, t0_ns=t0, t_ns=thr["t_ns"], planes=thr["planes"]),
            sim=dict(cycles=cycles, t0_ns=t0, end_ns=end, cocotb_wall_s=round(wall, 2),
                     loop_python_s=round(loop_py_s, 3),
                     cycles_per_s=round(cycles / max(wall, 1e-9), 1)),
        )
        if job.get("pcap"):
            rep["pcap"] = job["pcap"]
            rep["pcap_frames"] = fabric.write_pcap(job["pcap"])
        Path(tb_param("out")).write_text(json.dumps(rep, default=str))


if cocotb is not None:
    @cocotb.test()
    async def clock_only(dut):
        """Reset, then ``MRCNIC_CYCLES`` clocks with nothing else running; write the wall time."""
        from cocotb.triggers import Timer

        from .rtlsim import tb_param
        from .tb import start

        cycles = tb_param("cycles")
        await start(dut, tb_param("inputs"))
        wall0 = time.monotonic()
        await Timer(cycles * CLK_NS, unit="ns")
        wall = time.monotonic() - wall0
        Path(tb_param("out")).write_text(json.dumps(dict(
            cycles=cycles, wall_s=round(wall, 3), cycles_per_s=round(cycles / max(wall, 1e-9), 1))))


def _name(v):
    return v.name if hasattr(v, "name") else str(v)


def _sum_dicts(ds: list) -> dict:
    out = {}
    for d in ds:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out
