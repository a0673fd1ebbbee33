"""Cycle-accurate throughput benchmarks of the RTL datapaths (``mrcnic bench``).

Performance is reported in beats and cycles, never in wall-clock time: the
simulation counts every 64-bit beat accepted on the outputs and the clock
cycles from the first beat to the last.  Efficiency = beats / cycles; 1.0
means back-to-back frames with no idle cycle, SRv6/SRH insertion included.
The exception is :func:`bench_sim`, which measures the simulator itself: NIC
clock cycles per wall second.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

__all__ = ["PAYLOADS", "bench_tx", "bench_rx", "bench_sim", "BENCH_CONFIG", "CLOCK_CYCLES"]

PAYLOADS = (64, 256, 1024, 4096)   #: payload bytes per packet (4096 = the largest path MTU)

#: A NIC with 4 planes, path MTU 4096, one QP whose 4 paths fit one uSID carrier
#: and one whose 4 paths need an SRH (8 uSIDs = 2 carriers).
BENCH_CONFIG = """
[nic]
name = "bench"
mac = "02:00:00:00:00:01"
ipv6 = "fd00::1"
usid = 0xE000
locator_block = "fc00:0::/32"
pmtu = 4096

[[ports]]
id = 0
next_hop_mac = "02:00:00:00:10:00"
[[ports]]
id = 1
next_hop_mac = "02:00:00:00:11:00"
[[ports]]
id = 2
next_hop_mac = "02:00:00:00:12:00"
[[ports]]
id = 3
next_hop_mac = "02:00:00:00:13:00"

[[memory_regions]]
va = 0x10000000
length = 0x10000000
rkey = 0x42
base = 0

[ev_format_profiles.srv6]
mode = "SRV6"

[ev_profiles.plain]
format = "srv6"
type = "explicit"
ev_min_active = 1
entries = [
  { ev = 0, port = 0, usids = [0x1000, 0x2000, 0x1001, 0xE001] },
  { ev = 1, port = 1, usids = [0x1100, 0x2100, 0x1101, 0xE001] },
  { ev = 2, port = 2, usids = [0x1200, 0x2200, 0x1201, 0xE001] },
  { ev = 3, port = 3, usids = [0x1300, 0x2300, 0x1301, 0xE001] },
]

[ev_profiles.srh]
format = "srv6"
type = "explicit"
ev_min_active = 1
entries = [
  { ev = 0x10, port = 0, usids = [0x1000, 0x2000, 0x3000, 0x2010, 0x3010, 0x2020, 0x1001, 0xE001] },
  { ev = 0x11, port = 1, usids = [0x1100, 0x2100, 0x3100, 0x2110, 0x3110, 0x2120, 0x1101, 0xE001] },
  { ev = 0x12, port = 2, usids = [0x1200, 0x2200, 0x3200, 0x2210, 0x3210, 0x2220, 0x1201, 0xE001] },
  { ev = 0x13, port = 3, usids = [0x1300, 0x2300, 0x3300, 0x2310, 0x3310, 0x2320, 0x1301, 0xE001] },
]

[[qps]]
qpn = 0x11
peer = "peer"
peer_qpn = 0x21
peer_usid = 0xE001
ev_profile = "plain"

[[qps]]
qpn = 0x12
peer = "peer"
peer_qpn = 0x22
peer_usid = 0xE001
ev_profile = "srh"
"""


def bench_tx(packets: int = 48, payloads=PAYLOADS, build_dir=None) -> list[dict]:
    """Measure the transmit pipeline: one row per (payload, SRH or not).

    Each case posts ``packets`` back-to-back single-packet RDMA WRITEs of
    ``payload`` bytes; all cases run in one simulation, one after another,
    and each is measured from its first output beat to its last.  Returns
    rows ``{payload, srh, frames, frame_bytes, beats, cycles, efficiency}``.
    """
    from .tx_tb import TxJob, run_tx

    build_dir = Path(build_dir or tempfile.mkdtemp(prefix="mrcnic-bench-"))
    build_dir.mkdir(parents=True, exist_ok=True)
    cfg = build_dir / "bench.toml"
    cfg.write_text(BENCH_CONFIG)
    rng = random.Random(0)
    cases, wrs, addr = [], [], 0
    for payload in payloads:
        for srh in (False, True):
            cases.append((payload, srh))
            for _ in range(packets):
                wrs.append(dict(qp=int(srh), local_addr=addr, remote_va=0x10000000 + addr,
                                rkey=0x42, data=rng.randbytes(payload)))
                addr += (payload + 7) & ~7
    result = run_tx(TxJob(str(cfg), wrs=wrs, max_cycles=4_000_000), build_dir / "tx")
    frames = sorted(result.frames, key=lambda f: f[2])
    if len(frames) != len(wrs):
        raise RuntimeError(f"bench: expected {len(wrs)} frames, the NIC sent {len(frames)}")
    rows = []
    for k, (payload, srh) in enumerate(cases):
        group = frames[k * packets:(k + 1) * packets]
        beats = sum(-(-len(f[1]) // 8) for f in group)
        cycles = group[-1][3] - group[0][2] + 1
        rows.append(dict(payload=payload, srh=srh, frames=len(group),
                         frame_bytes=len(group[0][1]), beats=beats, cycles=cycles,
                         efficiency=round(beats / cycles, 4)))
    return rows


def bench_rx(packets: int = 48, payloads=PAYLOADS, build_dir=None) -> list[dict]:
    """Measure the receive pipeline: back-to-back valid frames on one plane.

    For each payload size, ``packets`` RDMA WRITE frames (nic0 -> nic1 of
    ``examples/``) are offered back to back on plane 0; the row reports the
    input beats and the cycles from the first input beat to the last
    (efficiency 1.0 = the receiver never deasserted ``tready``), and checks
    that every frame was accepted and every byte placed once.
    """
    from mrcnic import wire
    from mrcnic.config import compile_tables, load_config

    from .rx_tb import RxJob, run_rx

    from mrcnic.resources import example
    tx = compile_tables(load_config(example("two_nics.toml")))
    rx_cfg = example("nic1.toml")
    rx = compile_tables(load_config(rx_cfg))
    mr = rx.memory_regions[0]
    rng = random.Random(1)
    frames, psn, offset = [], 0, 0
    for payload in payloads:
        for _ in range(packets):
            enc = tx.path_encaps[psn % len(tx.path_encaps)]
            f = wire.build_data_frame(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:10:00",
                                      src_ip="fd00::1", path=enc, qpn=rx.rx_qps[0]["qpn"],
                                      psn=psn, va=mr["va"] + offset, rkey=mr["rkey"],
                                      payload=rng.randbytes(payload), last=False)
            frames.append((0, wire.arrival_form(f, tx.locator_block)))
            psn, offset = psn + 1, offset + payload
    if offset > mr["length"]:
        raise ValueError("bench_rx: the memory region is too small for this many packets")
    result = run_rx(RxJob(str(rx_cfg), frames=frames, verdicts=False),
                    Path(build_dir or tempfile.mkdtemp(prefix="mrcnic-bench-")) / "rx")
    if len(result.frame_cycles) != len(frames) or len(result.writes) != offset:
        raise RuntimeError(f"bench rx: {len(result.frame_cycles)} of {len(frames)} frames "
                           f"taken, {len(result.writes)} of {offset} bytes placed")
    rows = []
    for k, payload in enumerate(payloads):
        group = result.frame_cycles[k * packets:(k + 1) * packets]
        size = len(frames[k * packets][1])
        beats = packets * -(-size // 8)
        cycles = group[-1][1] - group[0][0] + 1
        rows.append(dict(payload=payload, srh=False, frames=packets, frame_bytes=size,
                         beats=beats, cycles=cycles, efficiency=round(beats / cycles, 4)))
    return rows


#: clock-only cycles per simulator (about 10 s each on a 2-core machine)
CLOCK_CYCLES = {"verilator": 200_000, "icarus": 5_000}


def bench_sim(simulators=None, *, scenario: str = "default", clock_cycles: int | None = None,
              cold: bool = True, build_dir=None, progress=None) -> dict:
    """Simulation speed of the main job, in NIC clock cycles per wall second.

    For each simulator (default: all of :data:`mrcnic.sim.simulators.SIMULATORS`), in one run:

    * ``clock_cps``: the 2-NIC co-simulation top (:class:`~mrcnic.sim.cosim.CosimTop`,
      the build ``scenario`` uses) with only its clock running, ``clock_cycles`` cycles
      (default :data:`CLOCK_CYCLES` of the simulator; :func:`~mrcnic.sim.cosim.run_clock_only`);
    * ``scenario_cps``: ``mrcnic sim --scenario <scenario>`` itself (its report's
      ``sim.cycles_per_s``, from reset release to the end), and its wall time ``sim_wall_s``;
    * ``harness``: ``scenario_cps / clock_cps`` (1.0 = the harness costs nothing; the
      NICs moving traffic also simulate slower than idle ones);
    * ``python_share``: the share of the scenario's run loop wall time spent in the loop's
      own Python (``loop_python_s``, the report's ``sim.loop_python_s``), the rest being the
      simulator;
    * ``build_cold_s``: compiling the simulation model from scratch (generated Verilog from
      the cache, no compiled-model cache, no ccache; skipped with ``cold=False``), and
      ``build_cached_s``: the same build found in the build cache.

    Returns ``{scenario, rows: [...], verilator_over_icarus, commit}`` (the ratio of
    ``scenario_cps``, when both ran; the git commit of the sources, when in a checkout).  ``progress(text)`` is called before each step.
    Raises like :func:`mrcnic.sim.cosim.run_cosim`.
    """
    from .cosim import CosimTop, run_clock_only, run_cosim
    from .rtlsim import build_sim, write_verilog
    from .scenarios import get_scenario
    from .simulators import SIMULATORS, resolve, simulator_env

    simulators = [resolve(s) for s in (simulators or SIMULATORS)]
    for s in simulators:
        simulator_env(s)                  # a missing tool: one line before any work
    say = progress or (lambda text: None)
    root = Path(build_dir or tempfile.mkdtemp(prefix="mrcnic-bench-sim-"))
    sc = get_scenario(scenario)
    ports, nics = sc["topology"]["planes"], len(sc["nics"])
    rows = []
    for sim in simulators:
        d = root / sim
        rep = None
        say(f"{sim}: {scenario} scenario")
        rep = run_cosim(scenario, simulator=sim, build_dir=d / "scenario")
        paths = rep["sim"].get("paths", 128)
        n = clock_cycles or CLOCK_CYCLES[sim]
        say(f"{sim}: clock only, {n} cycles")
        # the same top as the scenario's: with its HDL host memory, when it had one
        # and HDL frame ports, when it had them
        mem = rep["sim"]["mem_size"] if rep["sim"].get("hostmem") == "hdl" else None
        fp = rep["sim"].get("frameports") == "hdl"
        clk = run_clock_only(nics, ports=ports, paths=paths, cycles=n, simulator=sim,
                             hostmem_size=mem, frameports=fp, build_dir=d / "clock")
        top = CosimTop(nics, ports=ports, paths=paths, hostmem_size=mem, frameports=fp)
        srcs = [write_verilog(top, "mrcnic_cosim", d / "build"), *top.sources()]
        cold_s = None
        if cold:
            say(f"{sim}: cold build")
            _, cold_s, _ = build_sim(srcs, toplevel="mrcnic_cosim", build_dir=d / "cold",
                                     simulator=sim, quiet=True, public_ports_only=True,
                                     hier_blocks=top.hier_blocks(), cache=False)
        say(f"{sim}: cached build")
        _, cached_s, hit = build_sim(srcs, toplevel="mrcnic_cosim", build_dir=d / "cached",
                                     simulator=sim, quiet=True, public_ports_only=True,
                                     hier_blocks=top.hier_blocks())
        rows.append(dict(
            simulator=sim, hostmem=rep["sim"].get("hostmem"),
            frameports=rep["sim"].get("frameports"),
            clock_cycles=clk["cycles"], clock_cps=clk["cycles_per_s"],
            scenario_cycles=rep["sim"]["cycles"], scenario_cps=rep["sim"]["cycles_per_s"],
            harness=round(rep["sim"]["cycles_per_s"] / clk["cycles_per_s"], 3),
            loop_python_s=rep["sim"].get("loop_python_s"),
            python_share=(round(rep["sim"]["loop_python_s"] / rep["sim"]["cocotb_wall_s"], 3)
                          if rep["sim"].get("loop_python_s") is not None
                          and rep["sim"]["cocotb_wall_s"] else None),
            sim_wall_s=rep["sim"]["wall_s"], complete=rep["complete"],
            build_cold_s=None if cold_s is None else round(cold_s, 1),
            build_cached_s=round(cached_s, 2), cached=hit))
    by = {r["simulator"]: r for r in rows}
    ratio = (round(by["verilator"]["scenario_cps"] / by["icarus"]["scenario_cps"], 2)
             if {"verilator", "icarus"} <= set(by) else None)
    return dict(scenario=scenario, rows=rows, verilator_over_icarus=ratio,
                commit=_git_commit(), build_dir=str(root))


def _git_commit() -> str | None:
    """``git describe --always --dirty`` of the sources, or None outside a checkout."""
    import subprocess

    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                             text=True, cwd=Path(__file__).resolve().parent, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
