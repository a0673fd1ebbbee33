"""Run the RTL transmit pipeline (``rtl/tx.py``) on work requests; collect the frames.

Two halves:

* :func:`run_tx` (plain Python, used by tests, ``mrcnic send`` and
  ``mrcnic bench tx``): builds :class:`~mrcnic.rtl.tx.TxPipeline`, runs the
  cocotb test below on it with Icarus, and returns a :class:`TxResult`.
* :class:`TxTb` and the cocotb test ``run_tx_job`` (run inside the simulator):
  program the NIC tables from the configuration file, fill host memory
  (cocotbext-axi ``AxiRamRead``), post the work requests, and record every
  frame on every plane with its cycle numbers.

Host memory layout of a job: each work request's source bytes are written at
its ``local_addr`` before traffic starts.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TxJob", "TxResult", "run_tx", "TxTb"]


@dataclass
class TxJob:
    """What to send: a config file and a list of work requests.

    Each work request is a dict with ``qp`` (index into ``[[qps]]``),
    ``opcode`` ("WRITE" | "WRITE_IMM"), ``local_addr``, ``remote_va``, ``rkey``,
    ``data`` (bytes, the source payload), optional ``imm`` and ``wr_id``.
    ``updates`` are path-table changes applied while traffic runs:
    ``{"after_frames": n, "index": i, "state": "GOOD|ASSUMED_BAD|DENIED"}`` or
    ``{"after_frames": n, "index": i, "weight": w}``.
    """
    config: str
    wrs: list = field(default_factory=list)
    updates: list = field(default_factory=list)
    backpressure: bool = False
    max_cycles: int = 2_000_000


@dataclass
class TxResult:
    """Frames the NIC sent: ``frames`` = list of (plane, bytes, first_cycle, last_cycle).

    ``beats`` counts output beats on all planes, ``cycles`` the clock cycles
    from the first output beat to the last, inclusive; ``wr_refused`` the
    refused work requests.
    """
    frames: list
    beats: int
    cycles: int
    wr_refused: int
    build_dir: str = ""

    @property
    def efficiency(self) -> float:
        """Output beats per cycle over the run (1.0 = no idle cycle)."""
        return self.beats / self.cycles if self.cycles else 0.0


def run_tx(job: TxJob, build_dir=None, waves: bool = False, ports: int | None = None) -> TxResult:
    """Simulate the transmit pipeline on ``job``; raise on a testbench failure."""
    from mrcnic.config import compile_tables, load_config
    from mrcnic.rtl.tx import TxPipeline

    from .rtlsim import run_rtl

    tables = compile_tables(load_config(job.config))
    n_ports = ports or len(tables.next_hop_mac)
    build_dir = Path(build_dir or tempfile.mkdtemp(prefix="mrcnic-tx-"))
    build_dir.mkdir(parents=True, exist_ok=True)
    job_file, out_file = build_dir / "job.json", build_dir / "tx-result.json"
    wrs = [dict(w, data=w["data"].hex()) for w in job.wrs]
    job_file.write_text(json.dumps(dict(config=str(Path(job.config).resolve()), wrs=wrs,
                                        updates=job.updates, backpressure=job.backpressure,
                                        max_cycles=job.max_cycles, ports=n_ports)))
    run_rtl(TxPipeline(ports=n_ports), toplevel="mrcnic_tx", test_module="mrcnic.sim.tx_tb",
            build_dir=build_dir / "sim", env={"job": str(job_file), "out": str(out_file)},
            waves=waves, quiet=True, cache_key=f"tx-p{n_ports}")
    res = json.loads(out_file.read_text())
    return TxResult(frames=[(p, bytes.fromhex(f), a, b) for p, f, a, b in res["frames"]],
                    beats=res["beats"], cycles=res["cycles"], wr_refused=res["wr_refused"],
                    build_dir=str(build_dir))


# --------------------------------------------------------------------------
# cocotb side
# --------------------------------------------------------------------------
try:
    import cocotb
    from cocotb.triggers import ClockCycles, RisingEdge
except ImportError:          # pragma: no cover - cocotb is a dependency
    cocotb = None


class TxTb:
    """Testbench for :class:`~mrcnic.rtl.tx.TxPipeline` (Corundum-style TB class).

    Owns the clock, host memory (``AxiRamRead`` on ``m_axi``), one
    ``AxiStreamSink`` per plane, the work-request driver, and a beat monitor.
    """

    def __init__(self, dut, ports: int, backpressure: bool = False):
        import random

        from cocotbext.axi import AxiRamRead, AxiReadBus, AxiStreamBus, AxiStreamSink

        from .tb import StreamSource

        self.dut, self.ports = dut, ports
        self.mem = AxiRamRead(AxiReadBus.from_prefix(dut, "m_axi", bus_separator="__"),
                              dut.clk, dut.rst, size=1 << 32)
        self.sinks = [AxiStreamSink(AxiStreamBus.from_prefix(dut, f"m_axis_p{i}",
                                                             bus_separator="__"),
                                    dut.clk, dut.rst) for i in range(ports)]
        if backpressure:
            rng = random.Random(5)
            for s in self.sinks:
                s.set_pause_generator(iter(lambda: rng.random() < 0.2, None))
        self.wr = StreamSource(dut, "s_wr", dut.clk)
        self.frames = []              # (plane, bytes, first_cycle, last_cycle)
        self.beats = 0
        self.first_beat = self.last_beat = None
        self.cycle = 0
        self._starts = [None] * ports
        cocotb.start_soon(self._monitor())

    def inputs(self):
        names = ["s_wr__valid", "s_wr__payload", "globals", "next_hop_mac", "pt_w_en",
                 "pt_w_addr", "pt_w_data", "pt_st_en", "pt_st_addr", "pt_st_state", "seg_w_en",
                 "seg_w_addr", "seg_w_data", "qp_w_en", "qp_w_addr", "qp_w_data", "avoid"]
        return names

    async def _monitor(self):
        dut = self.dut
        valids = [getattr(dut, f"m_axis_p{i}__tvalid") for i in range(self.ports)]
        readys = [getattr(dut, f"m_axis_p{i}__tready") for i in range(self.ports)]
        lasts = [getattr(dut, f"m_axis_p{i}__tlast") for i in range(self.ports)]
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            for i in range(self.ports):
                v, r = valids[i].value, readys[i].value
                if v.is_resolvable and r.is_resolvable and int(v) and int(r):
                    self.beats += 1
                    if self.first_beat is None:
                        self.first_beat = self.cycle
                    self.last_beat = self.cycle
                    if self._starts[i] is None:
                        self._starts[i] = self.cycle
                    if int(lasts[i].value):
                        self._ends_append(i)

    def _ends_append(self, plane):
        self.frames.append([plane, None, self._starts[plane], self.cycle])
        self._starts[plane] = None

    async def program(self, tables):
        """Write globals, next hops, path table, SRH segments and QP contexts from ``tables``."""
        from mrcnic.rtl.layouts import NicGlobals, PathEntry, QpContext

        from .tb import pack

        dut = self.dut
        dut.globals.value = pack(NicGlobals, tables.globals)
        dut.next_hop_mac.value = sum(mac << (48 * i) for i, mac in enumerate(tables.next_hop_mac))
        for i, entry in enumerate(tables.path_entries):
            dut.pt_w_en.value, dut.pt_w_addr.value = 1, i
            dut.pt_w_data.value = pack(PathEntry, entry)
            await RisingEdge(dut.clk)
        dut.pt_w_en.value = 0
        for i, word in enumerate(tables.segments):
            dut.seg_w_en.value, dut.seg_w_addr.value, dut.seg_w_data.value = 1, i, word
            await RisingEdge(dut.clk)
        dut.seg_w_en.value = 0
        for i, ctx in enumerate(tables.qp_contexts):
            dut.qp_w_en.value, dut.qp_w_addr.value = 1, i
            dut.qp_w_data.value = pack(QpContext, ctx)
            await RisingEdge(dut.clk)
        dut.qp_w_en.value = 0
        await ClockCycles(dut.clk, 8)

    def post(self, wr: dict):
        """Queue one work request (see :class:`TxJob`); its data goes to host memory first."""
        from mrcnic.rtl.layouts import WorkRequest, WrOpcode

        from .tb import pack

        self.mem.write(wr["local_addr"], wr["data"])
        self.wr.send(pack(WorkRequest, dict(
            qp=wr["qp"], opcode=WrOpcode[wr.get("opcode", "WRITE")], wr_id=wr.get("wr_id", 0),
            local_addr=wr["local_addr"], remote_va=wr["remote_va"], rkey=wr["rkey"],
            length=len(wr["data"]), imm=wr.get("imm", 0))))

    async def set_state(self, index: int, state: str):
        from mrcnic.rtl.layouts import EvState
        dut = self.dut
        dut.pt_st_en.value, dut.pt_st_addr.value = 1, index
        dut.pt_st_state.value = EvState[state].value
        await RisingEdge(dut.clk)
        dut.pt_st_en.value = 0

    async def set_weight(self, tables, index: int, weight: int):
        from mrcnic.rtl.layouts import PathEntry

        from .tb import pack
        entry = dict(tables.path_entries[index], weight=weight)
        tables.path_entries[index] = entry
        dut = self.dut
        dut.pt_w_en.value, dut.pt_w_addr.value = 1, index
        dut.pt_w_data.value = pack(PathEntry, entry)
        await RisingEdge(dut.clk)
        dut.pt_w_en.value = 0


if cocotb is not None:
    @cocotb.test()
    async def run_tx_job(dut):
        """Execute the job file named by ``MRCNIC_JOB``; write results to ``MRCNIC_OUT``."""
        from mrcnic.config import compile_tables, load_config

        from .rtlsim import tb_param
        from .tb import start

        job = json.loads(Path(tb_param("job")).read_text())
        tables = compile_tables(load_config(job["config"]))
        tb = TxTb(dut, job["ports"], job["backpressure"])
        await start(dut, tb.inputs())
        await tb.program(tables)
        for wr in job["wrs"]:
            tb.post(dict(wr, data=bytes.fromhex(wr["data"])))
        updates = sorted(job["updates"], key=lambda u: u["after_frames"])
        expected = sum(-(-len(bytes.fromhex(w["data"])) // (1 << tables.globals["pmtu_log2"]))
                       for w in job["wrs"])
        idle = 0
        for _ in range(job["max_cycles"]):
            await RisingEdge(dut.clk)
            while updates and len(tb.frames) >= updates[0]["after_frames"]:
                u = updates.pop(0)
                if "state" in u:
                    await tb.set_state(u["index"], u["state"])
                else:
                    await tb.set_weight(tables, u["index"], u["weight"])
            done = len(tb.frames) >= expected and tb.wr.empty()
            idle = idle + 1 if done or int(dut.no_path.value) else 0
            if idle > 200:
                break
        # Pull frame bytes out of the sinks, plane by plane, in arrival order.
        per_plane = {i: [] for i in range(tb.ports)}
        for i, sink in enumerate(tb.sinks):
            while not sink.empty():
                per_plane[i].append(bytes(sink.recv_nowait().tdata))
        frames = []
        for plane, _, first, last in tb.frames:
            frames.append([plane, per_plane[plane].pop(0).hex(), first, last])
        cycles = (tb.last_beat - tb.first_beat + 1) if tb.beats else 0
        Path(tb_param("out")).write_text(json.dumps(dict(
            frames=frames, beats=tb.beats, cycles=cycles,
            wr_refused=int(dut.wr_refused.value))))
