"""``mrcnic replay``: feed the frames of a pcap into the RTL receive path.

Frames are delivered as the fabric would deliver them: a uSID destination
address is shifted to its arrival form and an SRH gets Segments Left 0
(``mrcnic.wire.arrival_form``; ``raw=True`` feeds the bytes untouched).  The
plane of each frame is taken from a pcapng interface named ``plane<N>``, from
a file name ending in ``-p<N>.pcap`` (as ``mrcnic send`` writes them), or is 0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["run_replay", "load_frames"]


def load_frames(path, default_plane: int = 0) -> list[tuple[int, bytes]]:
    """[(plane, frame bytes)] of a pcap/pcapng file; raises ``ValueError`` if unreadable."""
    from scapy.utils import rdpcap

    try:
        packets = rdpcap(str(path))
    except (OSError, Exception) as exc:       # scapy raises Scapy_Exception for bad files
        raise ValueError(f"{path}: cannot read as pcap/pcapng ({exc})") from exc
    match = re.search(r"-p(\d+)\.pcap(ng)?$", str(path))
    plane = int(match.group(1)) if match else default_plane
    out = []
    for pkt in packets:
        iface = getattr(pkt, "sniffed_on", None) or ""
        m = re.fullmatch(r"plane(\d+)", str(iface))
        raw = getattr(pkt, "original", None)          # the captured bytes, not a rebuild
        out.append((int(m.group(1)) if m else plane, bytes(raw if raw is not None else pkt)))
    return out


def run_replay(config, pcaps, *, out=None, json_path=None, raw=False, build_dir=None,
               waves=False) -> dict:
    """Replay ``pcaps`` into the receive path of the NIC described by ``config``.

    Returns a report: per input frame its parser verdict and its final fate (placed,
    discarded by the tracker as a duplicate or out of window, trimmed, ...: ``fate``,
    :func:`mrcnic.sim.rx_tb.frame_fate`), the memory ranges written,
    the completions raised, and the ACK frames sent (also written to ``out``).
    """
    from mrcnic import wire
    from mrcnic.config import compile_tables, load_config

    from .rx_tb import RxJob, run_rx
    from .send import write_pcaps

    tables = compile_tables(load_config(config))
    frames = []
    for p in pcaps:
        frames += load_frames(p)
    if not frames:
        raise ValueError("no frames to replay")
    ports = len(tables.next_hop_mac)
    fed = []
    for plane, frame in frames:
        if plane >= ports:
            raise ValueError(f"a frame is on plane {plane}, but {config} has {ports} ports")
        if not raw:
            try:
                frame = wire.arrival_form(frame, tables.locator_block)
            except Exception:       # not IPv6 or malformed: the parser will judge it as is
                pass
        fed.append((plane, frame))
    result = run_rx(RxJob(str(config), frames=fed), build_dir, waves=waves)
    ranges = _ranges(sorted(result.writes))
    report = dict(
        config=str(config), frames=len(fed),
        verdicts=[dict(index=i, plane=p, length=len(f), verdict=v,
                       fate=(result.fates[i] if i < len(result.fates) else v))
                  for i, ((p, f), v) in enumerate(zip(fed, result.verdicts))],
        writes=[dict(addr=lo, length=hi - lo) for lo, hi in ranges],
        bytes_written=len(result.writes),
        rewritten_bytes=sum(1 for v in result.writes.values() if v > 1),
        completions=result.completions, acks=len(result.acks), drops=result.drops,
        counters=result.counters, build_dir=result.build_dir)
    if out:
        report["pcaps"] = write_pcaps([(p, f, i, i) for i, (p, f) in enumerate(result.acks)], out)
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2))
    return report


def _ranges(addrs):
    out = []
    for a in addrs:
        if out and out[-1][1] == a:
            out[-1][1] = a + 1
        else:
            out.append([a, a + 1])
    return out
