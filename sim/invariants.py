"""Invariants the co-simulation harness checks in every run (``report["invariants"]``).

Checked by the harness from what it sees (host memory, completion ports, fabric
counters), not from the NICs' own counters alone:

``memory``           every destination range equals its source byte for byte.
``memory_outside``   nothing else in any NIC's host memory changed (whole memory compared
                     with a snapshot taken after the buffers were filled).
``completions``      exactly one receive completion per message, raised after its last
                     byte was in memory (the range is compared when the completion is seen),
                     and exactly one send completion per message at its sender.
``no_hang``          the run ended by completing, not by the stall or time limit (with
                     random faults the time limit is at least ``FAULT_TIME_LIMIT`` = 50 x
                     ``ideal_ns``, :mod:`mrcnic.sim.cosim`).
``drops_accounted``  every frame sent into the fabric was delivered, dropped under a named
                     reason or is still in the fabric (:meth:`Fabric.conservation`), and
                     every corrupted frame handed to a NIC was dropped by it (its parser's
                     drop counters rose by exactly the number of corrupted frames).
``ev_state``         no EV profile ever had fewer than ``ev_min_active`` entries not
                     ASSUMED_BAD (replayed from the EV events, in order).

A **harness bug** (``harness_bug``, for tests that prove the checker has teeth) makes the
harness itself misbehave: ``corrupt-byte`` flips one placed byte after the first receive
completion, ``drop-completion`` hides the first receive completion from the run,
``stray-write`` writes one byte outside every posted range at the end.
"""

from __future__ import annotations

__all__ = ["RunChecker", "HARNESS_BUGS", "verdict"]

HARNESS_BUGS = ("corrupt-byte", "drop-completion", "stray-write")


def verdict(invariants: dict) -> str:
    """``"pass"`` when every invariant holds, else ``"fail"``."""
    return "pass" if all(v["ok"] for v in invariants.values()) else "fail"


class RunChecker:
    """Collects what the invariants need during a run and judges them at the end.

    Parameters
    ----------
    wrs : list of dict
        The run's work requests (``src, dst, qp, dst_addr, length``; cosim ``_transfers``).
    datas : list of bytes
        Source data of each work request.
    cfgs : list of NicConfig
        Per NIC (to map a receive completion's QP index to its message).
    rel_qps : list of list of dict
        Per NIC, per QP: ``profile_base, profile_count, ev_min_active``.
    harness_bug : str or None
        One of :data:`HARNESS_BUGS` (a deliberately broken harness), or None.
    """

    def __init__(self, wrs, datas, cfgs, rel_qps, harness_bug: str | None = None):
        if harness_bug is not None and harness_bug not in HARNESS_BUGS:
            raise ValueError(f"unknown harness bug {harness_bug!r} ({', '.join(HARNESS_BUGS)})")
        self.wrs, self.datas, self.bug = wrs, datas, harness_bug
        self.rx_of = {}         # (dst nic, rx QP index) -> [transfer indices]
        for i, w in enumerate(wrs):
            peer = cfgs[w["src"]].qps[w["qp"]].peer_qpn
            j = next((j for j, q in enumerate(cfgs[w["dst"]].qps) if q.qpn == peer), None)
            self.rx_of.setdefault((w["dst"], j), []).append(i)
        self.rel_qps = rel_qps
        self.rx_cpl = [[] for _ in wrs]     # per transfer: (t_ns, memory matched then)
        self.tx_cpl = [0] * len(wrs)
        self.unmatched = []
        self.snap = None
        self.hidden = 0
        self.check_tx = True    #: judge send completions too (the run waited for them)

    # ---- during the run ---------------------------------------------------------------
    def snapshot(self, mems):
        """Keep a copy of every NIC's whole host memory (``AxiRam`` list), after the fill."""
        self.snap = [bytes(m.read(0, m.size)) for m in mems]

    def rx_completion(self, k: int, qp: int, t_ns: float, mems) -> bool:
        """A receive completion on NIC ``k``, QP index ``qp``, seen at ``t_ns``.  Returns
        False when the harness hides it (``drop-completion``), True otherwise."""
        if self.bug == "drop-completion" and not self.hidden:
            self.hidden += 1
            return False
        cands = self.rx_of.get((k, qp), [])
        # the first message of that QP not completed yet (else the last: a duplicate)
        i = next((i for i in cands if not self.rx_cpl[i]), cands[-1] if cands else None)
        if i is None:
            self.unmatched.append(dict(nic=k, qp=qp, t_ns=t_ns))
            return True
        w = self.wrs[i]
        ok = mems[w["dst"]].read(w["dst_addr"], w["length"]) == self.datas[i]
        self.rx_cpl[i].append((t_ns, ok))
        if self.bug == "corrupt-byte" and len(self.rx_cpl[i]) == 1 and i == 0:
            b = mems[w["dst"]].read(w["dst_addr"] + w["length"] // 2, 1)
            mems[w["dst"]].write(w["dst_addr"] + w["length"] // 2, bytes([b[0] ^ 0x01]))
        return True

    def tx_completion(self, k: int, qp: int):
        """A send completion on NIC ``k`` for its QP index ``qp``."""
        for i, w in enumerate(self.wrs):
            if w["src"] == k and w["qp"] == qp:
                self.tx_cpl[i] += 1
                return
        self.unmatched.append(dict(nic=k, qp=qp, send=True))

    # ---- at the end --------------------------------------------------------------------
    def finish(self, mems, *, complete: bool, stalled: bool, limit_hit: bool,
               conservation: dict, injected: dict | None, nic_drops: list, hosts: list,
               events: list) -> dict:
        """Judge every invariant; returns ``{name: {"ok": bool, "detail": str}}``.

        ``mems`` the NICs' ``AxiRam`` s; ``conservation`` :meth:`Fabric.conservation`;
        ``injected`` :meth:`FaultInjector.counters` or None; ``nic_drops`` per NIC
        ``{reason: count}``; ``hosts`` the host index of each NIC; ``events`` the EV events
        (``nic, index, state``) in order.
        """
        if self.bug == "stray-write":
            w = self.wrs[0]
            addr = w["dst_addr"] + w["length"] + 4096 + 17
            b = mems[w["dst"]].read(addr, 1)
            mems[w["dst"]].write(addr, bytes([b[0] ^ 0x80]))
        out = {}
        # memory: the destination ranges
        bad = []
        for i, (w, data) in enumerate(zip(self.wrs, self.datas)):
            got = mems[w["dst"]].read(w["dst_addr"], w["length"])
            if got != data:
                n = sum(1 for a, b in zip(got, data) if a != b)
                first = next(j for j, (a, b) in enumerate(zip(got, data)) if a != b)
                bad.append(f"transfer {i}: {n} bytes differ (first at offset {first})")
        out["memory"] = _inv(not bad, "; ".join(bad) or "every destination byte equals its source")
        # memory: nothing else changed
        diffs = []
        for k, m in enumerate(mems):
            now = bytearray(m.read(0, m.size))
            for w in self.wrs:
                if w["dst"] == k:
                    a = w["dst_addr"]
                    now[a:a + w["length"]] = self.snap[k][a:a + w["length"]]
            if bytes(now) != self.snap[k]:
                first = next(j for j in range(len(now)) if now[j] != self.snap[k][j])
                n = sum(1 for a, b in zip(now, self.snap[k]) if a != b)
                diffs.append(f"nic{k}: {n} bytes changed outside the posted ranges "
                             f"(first at {first:#x})")
        out["memory_outside"] = _inv(not diffs, "; ".join(diffs) or
                                     "host memory unchanged outside the posted ranges")
        # completions
        probs = []
        for i, c in enumerate(self.rx_cpl):
            if len(c) != 1:
                probs.append(f"transfer {i}: {len(c)} receive completions")
            elif not c[0][1]:
                probs.append(f"transfer {i}: receive completion before its last byte")
            if self.check_tx and self.tx_cpl[i] != 1:
                probs.append(f"transfer {i}: {self.tx_cpl[i]} send completions")
        if self.unmatched:
            probs.append(f"{len(self.unmatched)} completions of no posted message")
        out["completions"] = _inv(not probs, "; ".join(probs) or
                                  ("one receive and one send completion per message, "
                                   if self.check_tx else "one receive completion per message, ")
                                  + "after its last byte")
        # hang
        why = "stall detector" if stalled else "time limit" if limit_hit or not complete else ""
        out["no_hang"] = _inv(not why, f"run ended by the {why}" if why else
                              "run ended by completing")
        # drops accounted for
        probs = []
        if conservation["balance"]:
            probs.append(f"fabric: {conservation['balance']} frames unaccounted for "
                         f"({conservation})")
        corrupt = (injected or {}).get("corrupt_by_host", {})
        for k, h in enumerate(hosts):
            want = corrupt.get(h, corrupt.get(str(h), 0))
            got = sum(nic_drops[k].values())
            if got != want:
                probs.append(f"nic{k}: {got} frames dropped by the parser, {want} corrupted "
                             "frames delivered to it")
        out["drops_accounted"] = _inv(not probs, "; ".join(probs) or
                                      f"{conservation['dropped']} fabric drops by reason, "
                                      f"{sum(sum(d.values()) for d in nic_drops)} NIC drops = "
                                      "corrupted frames delivered")
        # EV state
        probs = []
        state = {}
        for e in events:
            state[e["nic"], e["index"]] = e["state"]
            for qi, q in enumerate(self.rel_qps[e["nic"]]):
                lo, n = q["profile_base"], q["profile_count"]
                if not lo <= e["index"] < lo + n:
                    continue
                bad_n = sum(1 for j in range(lo, lo + n)
                            if state.get((e["nic"], j)) == "ASSUMED_BAD")
                if n - bad_n < q["ev_min_active"]:
                    probs.append(f"nic{e['nic']} QP {qi}: {n - bad_n} EVs active at "
                                 f"{e['t_ns']:.0f} ns, ev_min_active {q['ev_min_active']}")
        out["ev_state"] = _inv(not probs, "; ".join(probs[:3]) or
                               "no profile below ev_min_active")
        return out


def _inv(ok: bool, detail: str) -> dict:
    return {"ok": bool(ok), "detail": detail}
