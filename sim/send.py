"""``mrcnic send``: one RDMA WRITE through the RTL transmit path, frames to pcap."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

__all__ = ["run_send", "write_pcaps"]

CLK_NS = 8


def write_pcaps(frames, out: str) -> list[str]:
    """Write ``frames`` [(plane, bytes, first_cycle, last_cycle)] to ``out`` and ``out``-p<plane>.

    Timestamps are the first-beat cycle times 8 ns (125 MHz).  Returns the paths written.
    """
    from scapy.utils import PcapWriter

    out = Path(out)
    paths = [out]
    planes = sorted({f[0] for f in frames})
    writers = {None: PcapWriter(str(out), linktype=1, sync=False)}
    for p in planes:
        path = out.with_name(f"{out.stem}-p{p}{out.suffix or '.pcap'}")
        writers[p] = PcapWriter(str(path), linktype=1, sync=False)
        paths.append(path)
    for plane, frame, first, _ in sorted(frames, key=lambda f: f[2]):
        pkt = Ether(frame)
        pkt.time = first * CLK_NS * 1e-9
        writers[None].write(pkt)
        writers[plane].write(pkt)
    for w in writers.values():
        w.close()
    return [str(p) for p in paths]


def run_send(config, *, qp: int, size: int, out=None, peer_config=None, va=None, rkey=None,
             imm=None, seed: int = 1, json_path=None, waves: bool = False, build_dir=None) -> dict:
    """Simulate one RDMA WRITE of ``size`` random bytes on QP index ``qp``; return a summary.

    Raises ``ValueError`` (with the reason) for a bad size, QP index or config.
    """
    from mrcnic.config import load_config

    from .tx_tb import TxJob, run_tx

    cfg = load_config(config)
    if not 0 <= qp < len(cfg.qps):
        raise ValueError(f"--qp {qp}: {config} has {len(cfg.qps)} QP(s) in [[qps]] (0-based index)")
    if not 1 <= size <= 1 << 31:
        raise ValueError(f"--size {size}: must be 1..{1 << 31} bytes")
    for name, value, bits in (("--va", va, 64), ("--rkey", rkey, 32), ("--imm", imm, 32)):
        if value is not None and not 0 <= value < 1 << bits:
            raise ValueError(f"{name} {value:#x}: must fit {bits} bits (0..{(1 << bits) - 1:#x})")
    if va is None or rkey is None:
        region = load_config(peer_config).memory_regions[0] if peer_config else None
        va = va if va is not None else (region.va if region else 0)
        rkey = rkey if rkey is not None else (region.rkey if region else 0)
    data = random.Random(seed).randbytes(size)
    wr = dict(qp=qp, local_addr=0, remote_va=va, rkey=rkey, data=data)
    if imm is not None:
        wr.update(opcode="WRITE_IMM", imm=imm)
    result = run_tx(TxJob(str(config), wrs=[wr]), build_dir, waves=waves)
    per_plane = defaultdict(lambda: {"frames": 0, "wire_bytes": 0, "evs": set()})
    for plane, frame, _, _ in result.frames:
        pkt = Ether(frame)
        row = per_plane[plane]
        row["frames"] += 1
        row["wire_bytes"] += len(frame)
        row["evs"].add(pkt[IPv6].fl | (pkt[UDP].sport & 0xFFF) << 20)
    summary = dict(config=str(config), qp=qp, bytes=size, frames=len(result.frames),
                   wr_refused=result.wr_refused, cycles=result.cycles, beats=result.beats,
                   build_dir=result.build_dir,
                   per_plane={p: dict(r, evs=len(r["evs"])) for p, r in per_plane.items()})
    if out:
        summary["pcaps"] = write_pcaps(result.frames, out)
    if json_path:
        Path(json_path).write_text(json.dumps(summary, indent=2))
    if result.wr_refused:
        raise ValueError(f"the NIC refused the work request (wr_refused={result.wr_refused})")
    return summary
