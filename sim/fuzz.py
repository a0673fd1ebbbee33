"""``mrcnic fuzz``: fuzzed frames through the RTL receive path (``sim/rx_tb.py``).

Each chunk is one simulation of the receive pipeline (:func:`mrcnic.sim.rx_tb.run_rx`,
streaming mode, frames back to back on random planes) with nic1 of the examples
(``examples/nic1.toml``) as the receiver: one valid 32 KiB RDMA WRITE (32 frames at PSN 0..31)
interleaved with ``chunk`` mutants.  Mutants are made from small valid frames of the same QP
whose PSNs lie half the PSN space away (so a mutant that is still valid, a flip in an
ICRC-masked field, is never placed: out of window) and are: one layer's fields replaced by
Scapy's random values, truncations, random bytes, 1-3 bit flips, and SRH frames whose Hdr
Ext Len is cut or padded (TLV overruns) or that carry random TLVs after their segment list
with consistent lengths and ICRC (the parser's TLV walk decides).

Checked per chunk: the run ends (no hang: the testbench's cycle limit is a failure), every
host byte written is a byte of the valid message, written once, equal to its source (so
nothing is written outside the region, nor any mutant placed), one completion, and every
mutant is either dropped by a parser (counted under a reason) or accepted as a still-valid
frame that the tracker then never places: ``drops + accepted - valid == mutants``.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

__all__ = ["run_fuzz", "mutants", "random_tlv_area", "CHUNK"]

CHUNK = 25_000          #: mutants per simulation
_MAC = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:10:00", src_ip="fd00::1")


def _setup():
    from mrcnic.config import compile_tables, loads_config
    from mrcnic.resources import resource_text

    tx = compile_tables(loads_config(resource_text("examples/two_nics.toml"), "two_nics.toml"))
    rx = compile_tables(loads_config(resource_text("examples/nic1.toml"), "nic1.toml"))
    return tx, rx


def _srh_path(tx, k: int):
    """A path of 8 uSIDs (a DA carrier plus a 2-segment SRH) to the receiver, on plane ``k``."""
    from mrcnic import wire

    enc = tx.path_encaps[k % len(tx.path_encaps)]
    return wire.PathEncap(ev=enc.ev, port=enc.port, mode="SRV6", block=enc.block,
                          usids=list(enc.usids[:-1]) * 3 + [enc.usids[-1]])


def _frames(tx, rx, data: bytes, pmtu: int, start_psn: int = 0, offset: int = 0,
            srh: bool = False):
    """(plane, arrival-form frame) of an RDMA WRITE of ``data`` at the region's VA + offset
    (every other frame over an SRH path with ``srh``)."""
    from mrcnic import wire

    mr = rx.memory_regions[0]
    qpn = rx.rx_qps[0]["qpn"]
    n = -(-len(data) // pmtu)
    out = []
    for i in range(n):
        enc = tx.path_encaps[i % len(tx.path_encaps)]
        if srh and i % 2:
            enc = _srh_path(tx, i)
        f = wire.build_data_frame(**_MAC, path=enc, qpn=qpn, psn=(start_psn + i) & 0xFFFFFF,
                                  va=mr["va"] + offset + i * pmtu, rkey=mr["rkey"],
                                  payload=data[i * pmtu:(i + 1) * pmtu], last=i == n - 1)
        out.append((enc.port, wire.arrival_form(f, tx.locator_block)))
    return out


def mutants(rng: random.Random, base_frames: list, n: int) -> list:
    """``n`` damaged frames from ``base_frames`` (see the module docstring)."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.packet import fuzz

    out = []
    for k in range(n):
        frame = rng.choice(base_frames)
        kind = k % 5
        if kind == 0:
            pkt = Ether(frame)
            layer = pkt.getlayer(rng.choice([IPv6, "UDP", BTH, "RETH"]))
            if layer is None:
                out.append(frame[:rng.randrange(1, len(frame))])
                continue
            fz = fuzz(type(layer)())
            for fld in type(layer).fields_desc:
                if fld.name != "icrc" and rng.random() < 0.5:
                    setattr(layer, fld.name, getattr(fz, fld.name))
            try:
                frame = bytes(pkt)
            except Exception:           # noqa: BLE001 - an unbuildable fuzz: random bytes
                frame = rng.randbytes(rng.randrange(14, 200))
        elif kind == 1:
            frame = frame[:rng.randrange(1, len(frame))]
        elif kind == 2:
            frame = rng.randbytes(rng.randrange(1, 300))
        elif kind == 3:
            b = bytearray(frame)
            for _ in range(rng.randrange(1, 4)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
            frame = bytes(b)
        else:
            frame = _srh_mutant(rng, frame)
        out.append(frame)
    return out


def _srh_mutant(rng, frame: bytes) -> bytes:
    """An SRH frame whose Hdr Ext Len or TLV area is damaged (or a bit flip without SRH)."""
    from mrcnic import wire_format as wf

    b = bytearray(frame)
    srh = wf.ETHERNET.length + wf.IPV6.length           # the SRH follows the IPv6 header
    ext = srh + wf.SRH_FIXED["len"].byte                # SRH Hdr Ext Len
    if len(b) > srh + wf.SRH_FIXED["type"].byte and \
            wf.IPV6["nh"].read(b, wf.ETHERNET.length) == wf.NH_ROUTING:
        choice = rng.randrange(4)
        if choice == 3:                                 # random TLVs, lengths and ICRC right
            from mrcnic import wire
            return wire.srh_add_tlvs(frame, random_tlv_area(rng))
        if choice == 0:
            b[ext] = rng.randrange(256)                 # Hdr Ext Len anywhere
        elif choice == 1:
            b[ext] = max(0, b[ext] - 1 - rng.randrange(2))  # too short for the segments
        else:
            b[ext] += 1 + rng.randrange(2)              # TLV room claimed past the list
        return bytes(b)
    i = rng.randrange(len(b))
    b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def random_tlv_area(rng) -> bytes:
    """8..48 bytes (whole 8-byte words) of random SRH TLVs: Pad1, PadN, HMAC-sized (type 5),
    any type and length; about half end on a PadN that fills the word exactly, the others
    are cut at a word boundary (so some TLVs run past the SRH)."""
    area = bytearray()
    for _ in range(rng.randrange(1, 4)):
        n = rng.choice([0, 1, 4, 6, rng.randrange(40)])
        area += rng.choice([b"\x00", bytes([4, n]) + bytes(n), bytes([5, 38]) + bytes(38),
                            bytes([rng.randrange(1, 256), n]) + rng.randbytes(n)])
    if rng.random() < 0.5 and -len(area) % 8 >= 2:
        area += bytes([4, -len(area) % 8 - 2]) + bytes(-len(area) % 8 - 2)
    return bytes(area[:len(area) - len(area) % 8]) or bytes([4, 6]) + bytes(6)


def run_fuzz(frames: int = 100_000, *, seed: int = 1, chunk: int = CHUNK,
             simulator: str | None = None, build_dir=None) -> dict:
    """Fuzz the receive path with ``frames`` mutants (in chunks of ``chunk`` per simulation).

    Returns a report: ``frames, chunks, accepted, dropped (by reason), placed_exact,
    completions, wall_s, problems (list of text), verdict ("pass"/"fail")``.  ``simulator``
    as ``$MRCNIC_SIM`` (the receive harness's build is cached).  A testbench failure (a
    hang reaches its cycle limit) is a problem, not an exception.  ``build_dir`` (default: a
    temporary folder, removed when every chunk passed) holds one ``chunk<i>`` folder per
    simulation.
    """
    import os

    from .rx_tb import RxJob, run_rx

    if simulator:
        os.environ["MRCNIC_SIM"] = simulator
    tx, rx = _setup()
    mr = rx.memory_regions[0]
    from mrcnic.resources import example
    cfg = str(example("nic1.toml"))
    t0 = time.monotonic()
    root = Path(build_dir or tempfile.mkdtemp(prefix="mrcnic-fuzz-"))
    problems, drops = [], {}
    accepted = placed = cpls = done = 0
    nchunks = -(-frames // chunk)
    for c in range(nchunks):
        n = min(chunk, frames - done)
        rng = random.Random(seed * 1_000_003 + c)
        random.seed(seed * 1_000_003 + c)        # Scapy's fuzz() draws from the global RNG
        data = rng.randbytes(32 * 1024)
        valid = _frames(tx, rx, data, 1024)
        seeds = [f for _, f in _frames(tx, rx, rng.randbytes(64 * 16), 64,
                                       start_psn=0x800000, offset=len(data), srh=True)]
        seq = [(rng.randrange(len(tx.next_hop_mac)), m) for m in mutants(rng, seeds, n)]
        for k, pf in enumerate(valid):
            seq.insert((k + 1) * len(seq) // (len(valid) + 1), pf)
        bdir = root / f"chunk{c}"
        try:
            r = run_rx(RxJob(cfg, frames=seq, verdicts=False, max_cycles=40 * len(seq) + 200_000),
                       bdir)
        except AssertionError as exc:
            problems.append(f"chunk {c}: the simulation failed or hung ({exc})")
            done += n
            continue
        lo = mr["base"]
        want = set(range(lo, lo + len(data)))
        if set(r.writes) != want:
            problems.append(f"chunk {c}: {len(set(r.writes) - want)} bytes written outside the "
                            f"message, {len(want - set(r.writes))} missing")
        if set(r.writes.values()) - {1}:
            problems.append(f"chunk {c}: a byte written more than once")
        base = r.counters["mem_base"]
        if r.memory[lo - base:lo - base + len(data)] != data:
            problems.append(f"chunk {c}: the placed message differs from its source")
        else:
            placed += 1
        if len(r.completions) != 1:
            problems.append(f"chunk {c}: {len(r.completions)} completions")
        dropped = sum(r.drops.values())
        acc = r.counters["accepted"]
        if dropped + acc - len(valid) != n:
            problems.append(f"chunk {c}: {dropped} dropped + {acc} accepted - {len(valid)} "
                            f"valid != {n} mutants")
        for k, v in r.drops.items():
            drops[k] = drops.get(k, 0) + v
        accepted += acc - len(valid)
        cpls += len(r.completions)
        done += n
    if build_dir is None and not problems:
        import shutil
        shutil.rmtree(root, ignore_errors=True)      # kept (with its logs) when a chunk failed
    return dict(frames=done, chunks=nchunks, chunk=chunk, seed=seed, accepted=accepted,
                dropped=sum(drops.values()), drops=drops, placed_exact=placed,
                completions=cpls, wall_s=round(time.monotonic() - t0, 1), problems=problems,
                verdict="pass" if not problems else "fail")
