"""Run the RTL receive pipeline (``rtl/rx.py``) on frames; report verdicts, writes, ACKs.

* :class:`RxHarness`: ``RxPipeline`` plus a ``SprayScheduler`` holding the
  receiving NIC's path table, so its ACKs have reverse paths (simulation top).
* :func:`run_rx` (plain Python, used by tests, ``mrcnic replay`` and ``mrcnic
  bench rx``): builds the harness, runs the cocotb test below, returns an
  :class:`RxResult`.
* :class:`RxTb` and ``run_rx_job`` (inside the simulator): program the tables
  from the configuration, feed frames on their planes, watch the AXI4 write
  channel byte by byte, collect completions and ACK frames.

In ``verdicts`` mode frames go in one at a time and each gets its verdict
(accepted, or the drop reason whose counter moved); otherwise they stream
back to back (line rate, for fuzzing and benchmarks).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from mrcnic.rtl.layouts import PathEntry
from mrcnic.rtl.rx import RxPipeline
from mrcnic.rtl.spray import SprayScheduler

__all__ = ["RxHarness", "RxJob", "RxResult", "run_rx", "frame_fate"]


class RxHarness(wiring.Component):
    """Simulation top: :class:`RxPipeline` + a spray scheduler for the ACKs' reverse paths.

    Ports are those of :class:`RxPipeline` (minus the spray interface) plus
    the path-table write port ``pt_w_en``/``pt_w_addr``/``pt_w_data``.
    """

    def __init__(self, ports: int = 4, shared_parser: bool = False):
        self._ports = ports
        self._rx = RxPipeline(ports=ports, shared_parser=shared_parser)
        members = {name: member for name, member in self._rx.signature.members.items()
                   if name not in ("spray_req", "spray_decision", "probe")}
        members.update({"pt_w_en": In(1), "pt_w_addr": In(8), "pt_w_data": In(PathEntry)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.rx = rx = self._rx
        m.submodules.spray = spray = SprayScheduler()
        wiring.connect(m, rx.spray_req, spray.req)
        wiring.connect(m, spray.decision, rx.spray_decision)
        m.d.comb += rx.probe.valid.eq(0)          # no sender side here: no probes to send
        m.d.comb += [spray.w_en.eq(self.pt_w_en), spray.w_addr.eq(self.pt_w_addr),
                     spray.w_data.eq(self.pt_w_data), spray.st_en.eq(0), spray.avoid.eq(0)]
        for name, member in self.signature.members.items():
            if name.startswith("pt_w_") or name == "probe":
                continue
            ours, theirs = getattr(self, name), getattr(rx, name)
            if member.is_port and member.flow == In:
                m.d.comb += theirs.eq(ours)
            elif member.is_port:
                m.d.comb += ours.eq(theirs)
            elif member.flow == In:
                wiring.connect(m, wiring.flipped(ours), theirs)
            else:
                wiring.connect(m, theirs, wiring.flipped(ours))
        return m


@dataclass
class RxJob:
    """Frames to receive: [(plane, bytes)], a config, and how to feed them."""
    config: str
    frames: list = field(default_factory=list)
    verdicts: bool = True
    gap: int = 0                 # idle cycles between frames in streaming mode
    max_cycles: int = 3_000_000
    shared_parser: bool = False  # one RxParser behind a PlaneMux (the board configuration)


@dataclass
class RxResult:
    """What the receiver did.

    ``verdicts``: per input frame "accepted" or "dropped:<REASON>" (verdicts mode);
    ``cpl_counts``: completions raised so far, after each input frame (verdicts mode);
    ``writes``: host byte address -> times written; ``memory``: {addr: bytes} of
    written ranges; ``completions``: list of dicts; ``acks``: [(plane, bytes)];
    ``drops``: reason -> count; ``in_beats``/``in_cycles``: input beats and the
    cycles from the first to the last input beat.
    """
    verdicts: list
    cpl_counts: list
    writes: dict
    memory: bytes
    completions: list
    acks: list
    drops: dict
    counters: dict
    in_beats: int
    in_cycles: int
    frame_cycles: list = field(default_factory=list)
    build_dir: str = ""
    plane_drops: list = field(default_factory=list)   # per plane: reason -> count
    #: per input frame (verdicts mode) its final fate: "placed N bytes", "duplicate",
    #: "out of window", "trimmed", "ACK", "probe", "accepted, nothing placed" or
    #: "dropped:<REASON>" (see :func:`frame_fate`)
    fates: list = field(default_factory=list)


def run_rx(job: RxJob, build_dir=None, waves: bool = False) -> RxResult:
    """Simulate the receive pipeline on ``job``; raise on a testbench failure."""
    from mrcnic.config import compile_tables, load_config

    from .rtlsim import run_rtl

    tables = compile_tables(load_config(job.config))
    ports = len(tables.next_hop_mac)
    build_dir = Path(build_dir or tempfile.mkdtemp(prefix="mrcnic-rx-"))
    build_dir.mkdir(parents=True, exist_ok=True)
    job_file, out_file = build_dir / "job.json", build_dir / "rx-result.json"
    job_file.write_text(json.dumps(dict(
        config=str(Path(job.config).resolve()), frames=[(p, f.hex()) for p, f in job.frames],
        verdicts=job.verdicts, gap=job.gap, max_cycles=job.max_cycles, ports=ports)))
    shared = job.shared_parser
    run_rtl(RxHarness(ports=ports, shared_parser=shared), toplevel="mrcnic_rx",
            test_module="mrcnic.sim.rx_tb",
            build_dir=build_dir / "sim", env={"job": str(job_file), "out": str(out_file)},
            waves=waves, quiet=True, cache_key=f"rx-p{ports}" + ("-shared" if shared else ""))
    r = json.loads(out_file.read_text())
    return RxResult(verdicts=r["verdicts"], cpl_counts=r["cpl_counts"], writes={int(k): v for k, v in r["writes"].items()},
                    memory=bytes.fromhex(r["memory"]), completions=r["completions"],
                    acks=[(p, bytes.fromhex(f)) for p, f in r["acks"]], drops=r["drops"],
                    counters=r["counters"], in_beats=r["in_beats"],
                    frame_cycles=r["frame_cycles"], in_cycles=r["in_cycles"],
                    build_dir=str(build_dir), plane_drops=r["plane_drops"],
                    fates=r.get("fates", []))


def frame_fate(verdict: str, frame: bytes, deltas: dict, trim_dscp: int) -> str:
    """The final fate of one frame fed in verdicts mode.

    ``verdict`` the parser's ("accepted" or "dropped:<REASON>"); ``deltas`` how the
    receiver's counters moved while the frame was handled (``placed_bytes``,
    ``duplicates``, ``out_of_window``); ``trim_dscp`` the NIC's trim DSCP.  A frame the
    parser accepted can still be discarded by the SACK tracker (a duplicate, or outside the
    receive window) or, trimmed, be NACKed and never placed.
    """
    if verdict != "accepted":
        return verdict
    if deltas.get("duplicates"):
        return "duplicate: discarded by the tracker"
    if deltas.get("out_of_window"):
        return "out of window: discarded by the tracker"
    if deltas.get("placed_bytes"):
        return f"placed {deltas['placed_bytes']} bytes"
    from mrcnic import wire, wire_format as wf

    tc = wf.layout().field("ipv6", "tc").read(frame)           # DSCP << 2 | ECN
    bth = wf.bth_offset(frame)
    op = None if bth is None else wf.BTH["opcode"].read(frame, bth)
    if op in wf.DATA_OPCODES and tc >> 2 == trim_dscp:
        return "trimmed: NACKed, not placed"
    if op == wire.OP_ACK:
        return "ACK: consumed by the sender side"
    if op == wire.OP_PROBE:
        return "probe: answered"
    return "accepted, nothing placed"


# --------------------------------------------------------------------------
# cocotb side
# --------------------------------------------------------------------------
try:
    import cocotb
    from cocotb.triggers import ClockCycles, RisingEdge
except ImportError:          # pragma: no cover
    cocotb = None

MEM_SIZE = 1 << 24            #: host memory modelled (16 MiB from address 0)


class RxTb:
    """Testbench for :class:`RxHarness`: memory, plane sources, ACK sinks, monitors."""

    def __init__(self, dut, ports: int):
        from cocotbext.axi import (AxiRamWrite, AxiStreamBus, AxiStreamSink, AxiStreamSource,
                                   AxiWriteBus)

        from .tb import StreamSink

        self.dut, self.ports = dut, ports
        self.mem = AxiRamWrite(AxiWriteBus.from_prefix(dut, "m_axi", bus_separator="__"),
                               dut.clk, dut.rst, size=MEM_SIZE)
        self.sources = [AxiStreamSource(AxiStreamBus.from_prefix(dut, f"s_axis_p{i}",
                                                                 bus_separator="__"),
                                        dut.clk, dut.rst) for i in range(ports)]
        self.sinks = [AxiStreamSink(AxiStreamBus.from_prefix(dut, f"m_axis_p{i}",
                                                             bus_separator="__"),
                                    dut.clk, dut.rst) for i in range(ports)]
        self.cpl = StreamSink(dut, "cpl", dut.clk)
        self.ack_rx = StreamSink(dut, "ack_rx", dut.clk)
        self.writes = {}
        self.in_beats = 0
        self.frame_cycles = []        # (first, last) input cycle of each frame, in order
        self.first_in = self.last_in = None
        self.cycle = 0
        cocotb.start_soon(self._watch_writes())
        cocotb.start_soon(self._watch_inputs())

    @staticmethod
    def inputs(ports):
        names = ["own_usid", "locator_block", "own_ip", "trim_dscp", "globals", "next_hop_mac",
                 "ack_every", "ack_timeout", "qp_w_en", "qp_w_addr", "qp_w_data", "ackq_w_en",
                 "ackq_w_addr", "ackq_w_data", "mr_w_en", "mr_w_addr", "mr_w_data", "pt_w_en",
                 "pt_w_addr", "pt_w_data", "cpl__ready", "ack_rx__ready"]
        return names

    async def _watch_inputs(self):
        dut = self.dut
        vs = [getattr(dut, f"s_axis_p{i}__tvalid") for i in range(self.ports)]
        rs = [getattr(dut, f"s_axis_p{i}__tready") for i in range(self.ports)]
        ls = [getattr(dut, f"s_axis_p{i}__tlast") for i in range(self.ports)]
        starts = [None] * self.ports
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            for i, (v, r) in enumerate(zip(vs, rs)):
                if v.value.is_resolvable and r.value.is_resolvable and int(v.value) and int(r.value):
                    self.in_beats += 1
                    self.first_in = self.first_in or self.cycle
                    self.last_in = self.cycle
                    starts[i] = starts[i] or self.cycle
                    if int(ls[i].value):
                        self.frame_cycles.append((starts[i], self.cycle))
                        starts[i] = None

    async def _watch_writes(self):
        """Count every byte the AXI4 W channel writes (by AW address and strobes)."""
        dut = self.dut
        bursts = []
        addr = None
        while True:
            await RisingEdge(dut.clk)
            if int(dut.m_axi__awvalid.value) and int(dut.m_axi__awready.value):
                bursts.append(int(dut.m_axi__awaddr.value))
            if int(dut.m_axi__wvalid.value) and int(dut.m_axi__wready.value):
                if addr is None:
                    addr = bursts.pop(0)
                strb = int(dut.m_axi__wstrb.value)
                for lane in range(8):
                    if strb >> lane & 1:
                        self.writes[addr + lane] = self.writes.get(addr + lane, 0) + 1
                addr += 8
                if int(dut.m_axi__wlast.value):
                    addr = None

    async def program(self, tables):
        from mrcnic.rtl.layouts import MemRegion, NicGlobals, PathEntry, QpContext, RxQpContext

        from .tb import pack

        dut = self.dut
        dut.own_usid.value = tables.local_usid
        dut.locator_block.value = tables.locator_block
        dut.own_ip.value = tables.globals["src_ip"]
        dut.trim_dscp.value = tables.trim_dscp
        dut.globals.value = pack(NicGlobals, tables.globals)
        dut.next_hop_mac.value = sum(mac << (48 * i) for i, mac in enumerate(tables.next_hop_mac))
        dut.ack_every.value = 4
        dut.ack_timeout.value = 256
        for i, e in enumerate(tables.path_entries):
            dut.pt_w_en.value, dut.pt_w_addr.value = 1, i
            dut.pt_w_data.value = pack(PathEntry, e)
            await RisingEdge(dut.clk)
        dut.pt_w_en.value = 0
        for i, (rxq, txq) in enumerate(zip(tables.rx_qps, tables.qp_contexts)):
            dut.qp_w_en.value, dut.qp_w_addr.value = 1, i
            dut.qp_w_data.value = pack(RxQpContext, rxq)
            dut.ackq_w_en.value, dut.ackq_w_addr.value = 1, i
            dut.ackq_w_data.value = pack(QpContext, txq)
            await RisingEdge(dut.clk)
        dut.qp_w_en.value = dut.ackq_w_en.value = 0
        for i, mr in enumerate(tables.memory_regions[:4]):
            dut.mr_w_en.value, dut.mr_w_addr.value = 1, i
            dut.mr_w_data.value = pack(MemRegion, mr)
            await RisingEdge(dut.clk)
        dut.mr_w_en.value = 0
        await ClockCycles(dut.clk, 8)

    def drops(self, planes=None):
        """Dropped frames per reason name, summed over ``planes`` (default: all)."""
        from mrcnic.rtl.rx_parser import DropReason
        total = {r.name: 0 for r in DropReason}
        for i in range(self.ports) if planes is None else planes:
            raw = int(getattr(self.dut, f"drops_p{i}").value)
            for r in DropReason:
                total[r.name] += raw >> (32 * r.value) & 0xFFFFFFFF
        return total


if cocotb is not None:
    @cocotb.test()
    async def run_rx_job(dut):
        """Execute the job file named by ``MRCNIC_JOB``; write results to ``MRCNIC_OUT``."""
        from mrcnic.config import compile_tables, load_config
        from mrcnic.rtl.layouts import Completion

        from .rtlsim import tb_param
        from .tb import start, unpack

        job = json.loads(Path(tb_param("job")).read_text())
        tables = compile_tables(load_config(job["config"]))
        ports = job["ports"]
        await start(dut, RxTb.inputs(ports))
        tb = RxTb(dut, ports)
        await tb.program(tables)
        frames = [(p, bytes.fromhex(f)) for p, f in job["frames"]]
        verdicts, cpl_counts = [], []

        # busy: a frame offered, or a host-memory write in progress (a store-and-forward
        # frame is placed after its last beat: a 4 KiB payload takes 512+ cycles more)
        busy_sigs = [getattr(dut, f"s_axis_p{i}__tvalid") for i in range(ports)] + [
            dut.m_axi__awvalid, dut.m_axi__wvalid]

        async def settle(limit=400):
            quiet = 0
            for _ in range(limit):
                await RisingEdge(dut.clk)
                busy = any(int(s.value) for s in busy_sigs)
                quiet = 0 if busy else quiet + 1
                if quiet > 60:
                    return

        fates = []

        def ctr():
            return {n: int(getattr(dut, n).value)
                    for n in ("placed_bytes", "duplicates", "out_of_window")}

        if job["verdicts"]:
            for plane, frame in frames:
                before, acc_before = tb.drops(), int(dut.accepted.value)
                c_before = ctr()
                await tb.sources[plane % ports].send(frame)
                await settle()
                # Wait for the verdict, then for the writes and completion it causes.
                for _ in range(2000):
                    if int(dut.accepted.value) != acc_before or tb.drops() != before:
                        break
                    await RisingEdge(dut.clk)
                await ClockCycles(dut.clk, 200)
                after, acc_after = tb.drops(), int(dut.accepted.value)
                moved = [k for k in after if after[k] != before[k]]
                verdicts.append("accepted" if acc_after > acc_before else
                                ("dropped:" + moved[0]) if moved else "lost")
                cpl_counts.append(len(tb.cpl.items))
                c_after = ctr()
                fates.append(frame_fate(verdicts[-1], frame,
                                        {k: c_after[k] - c_before[k] for k in c_after},
                                        tables.trim_dscp))
        else:
            for plane, frame in frames:
                await tb.sources[plane % ports].send(frame)
                if job["gap"]:
                    await ClockCycles(dut.clk, job["gap"])
            for _ in range(job["max_cycles"]):
                await RisingEdge(dut.clk)
                if all(s.empty() for s in tb.sources) and not any(
                        int(getattr(dut, f"s_axis_p{i}__tvalid").value) for i in range(ports)):
                    break
        await settle(4000)
        await ClockCycles(dut.clk, 600)          # let coalesced ACKs (ack_timeout) go out
        acks = []
        for i, sink in enumerate(tb.sinks):
            while not sink.empty():
                acks.append([i, bytes(sink.recv_nowait().tdata).hex()])
        lo = min(tb.writes) if tb.writes else 0
        hi = max(tb.writes) + 1 if tb.writes else 0
        memory = tb.mem.read(lo, hi - lo) if hi > lo else b""
        completions = [{k: (v.value if hasattr(v, "value") else v)
                        for k, v in unpack(Completion, c).items()} for c in tb.cpl.items]
        counters = dict(placed_bytes=int(dut.placed_bytes.value),
                        duplicates=int(dut.duplicates.value),
                        out_of_window=int(dut.out_of_window.value),
                        acks_sent=int(dut.acks_sent.value), acks_received=len(tb.ack_rx.items),
                        accepted=int(dut.accepted.value),
                        mem_base=lo)
        Path(tb_param("out")).write_text(json.dumps(dict(
            verdicts=verdicts, fates=fates, cpl_counts=cpl_counts,
            writes={str(k): v for k, v in tb.writes.items()},
            memory=memory.hex(), completions=completions, acks=acks, drops=tb.drops(),
            plane_drops=[tb.drops([i]) for i in range(tb.ports)],
            counters=counters, in_beats=tb.in_beats, frame_cycles=tb.frame_cycles,
            in_cycles=(tb.last_in - tb.first_in + 1) if tb.in_beats else 0)))

