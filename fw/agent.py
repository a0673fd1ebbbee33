"""The firmware's weight manager: EV quarantine, probe-driven restore, ECN weight control.

:class:`WeightAgent` is the controller side of the OCP MRC 1.0 EV state machine
(``mrc_ctl.h`` vocabulary: EV profiles, EV states GOOD / ASSUMED_BAD / DENIED,
EV events, EV probes, weights).  Every access to the NIC goes through the
controller API :class:`~mrcnic.fw.mrc_ctl.MrcCtlContext` (``fw/mrc_ctl.py``,
``docs/mrc-api.md``), the same path as ``mrcnic fw``:

* EV profiles and their entries: the profiles the context adopted from the NIC
  (the QPs' ``txqp.profile_base/profile_count``), each entry read with
  ``mrc_ctl_query_ev_profile`` QUERY_EV_STATE (state and weight);
* states: ``mrc_ctl_modify_ev_profile`` MODIFY_EV_STATE; weights and per-EV
  counters: mrcnic's extensions ``mrc_ctl_modify_ev_weight`` /
  ``mrc_ctl_query_ev_counters``; every operation names its path-table entry
  (``MrcCtlEvOpEntry.index``: one copy of an EV, as the NIC reports it);
* EV events: ``mrc_ctl_poll_ev_event``; EV probes: ``mrc_ctl_ep_batch_send_wait``
  (``MRC_CTL_EP_OP_EV_PROBE``, one request, ETIMEDOUT = no reply).

The context sits on the register client (:class:`~mrcnic.fw.client.CsrClient`), so
the agent runs the same against a board (UART), a simulation (TCP) or the
in-process model (:class:`~mrcnic.fw.transport.LoopbackTransport`).  Each period
costs the same register accesses as raw register calls would: the API reads an
entry's EV once, then keeps it.

What the NIC does by itself (``rtl/reliability.py``): an ACK timeout makes the
entry ASSUMED_BAD (EV event ACK_TIMEOUT), unless ``ev_min_active`` holds it GOOD
(EV event MIN_ACTIVE); its own prober may make an ASSUMED_BAD entry GOOD again
(EV event PROBE_OK).  It never changes a DENIED entry (nor one of weight 0).

What the agent adds, once per control period (:meth:`WeightAgent.step`):

1. **Events.**  Every queued EV event is polled.  An ACK_TIMEOUT on a managed
   entry *quarantines* it: MODIFY_EV_STATE DENIED at once, so the NIC's own
   probe cannot put a flapping path back into use, and one failure is counted.
   The ``deny_after``-th failure of an entry DENIES it for good (action
   ``denied``): the agent no longer probes it; only an operator ``ev allow``
   brings it back.  PROBE_OK / ACK_TIMEOUT events of an entry that is already
   DENIED were queued before the agent's DENIED write (the NIC never changes a
   DENIED entry) and are counted as stale.  MIN_ACTIVE is logged (``held``).
2. **Operator changes.**  The path entry of every entry the agent keeps out of
   use (quarantined, denied, or DENIED by the operator) is read back: if it is no
   longer DENIED, an operator ran ``ev allow`` (action ``allowed``; the entry is
   managed again with its failure count reset).
3. **Probes.**  Each quarantined entry gets one EV probe (``mrc_ctl_ep_batch_send_wait``
   on that entry, sent with the first QP whose EV profile holds it), which waits up
   to ``probe_timeout_s`` for its reply (the NIC tracks one controller probe at a
   time, so probes are sent one after another; stale replies are drained first and
   counted).  ``restore_after`` consecutive replies restore the
   entry (action ``restored`` with the RTT); a probe without reply resets the
   streak.
4. **Congestion.**  The per-EV counters (``mrc_ctl_query_ev_counters``) of the next
   ``evcnt_per_period`` profile entries (round robin) are read; on an
   active entry with at least ``min_packets`` new packets whose ECN-echo ratio
   (delta ``ecn_echoes`` / delta ``packets``) exceeds ``ecn_threshold`` the
   weight is halved (minimum 1, action ``ecn_halve``); after ``quiet_periods``
   periods without that, the weight grows by 1 toward its baseline (action
   ``ecn_raise``).  DENIED entries' weights are never touched: the path entry is
   read before each weight write, and an entry found DENIED is left to the
   operator (action ``operator_denied``); a weight found changed by the operator
   is adopted as the new baseline (action ``operator_weight``).

**Order of the writes (no half-applied change).**  State and weight are separate
calls (one register write each).  Quarantine and deny are one MODIFY_EV_STATE DENIED.
A restore sets the weight (baseline) *first*, then MODIFY_EV_STATE GOOD: the entry is
never in use with a stale weight, and if the second write fails the entry is
still DENIED (still out of use) with its baseline weight.  The agent's own
record of an entry changes only after all its writes succeeded; a popped event
stays pending until its action is done.  So after an :class:`AgentError`, calling
:meth:`~WeightAgent.step` again resumes where it stopped.

Limitations: the baseline weights are the path table's weights when the agent
starts (an agent restarted while weights are ECN-reduced takes the reduced
weights as baseline); an operator ``ev deny`` of an entry the agent has
quarantined cannot be told from the agent's own DENIED and is undone by a
successful restore; an agent restarted takes the entries its predecessor had
DENIED for operator denies (``ev allow`` them); EV events dropped by a full NIC
event queue are not seen (entries found ASSUMED_BAD at start are quarantined).

**Every EV failing at once.**  The agent takes out of use only entries the NIC
itself made ASSUMED_BAD (ACK_TIMEOUT events, or found so at start); the NIC's
``ev_min_active`` floor keeps the last GOOD EVs of a profile GOOD (MIN_ACTIVE
events, logged ``held``), so the agent does not deny below the floor.  One
exception: an ACK_TIMEOUT followed, in the same period, by the NIC's own
PROBE_OK still quarantines the entry (flap protection) although the NIC may have
counted it GOOD when it let other entries fail; its probes restore it after
``restore_after`` periods if the path works.
"""

import enum as py_enum
import errno
import json
import math
import os
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass

from ..rtl.layouts import EvEventReason
from .client import CsrClient
from .mrc_ctl import (MRC_CTL_EV_UNPOPULATED, MrcCtlContext, MrcCtlEpOpType, MrcCtlEpReq,
                      MrcCtlError, MrcCtlEvOp, MrcCtlEvOpArgs, MrcCtlEvOpEntry,
                      MrcCtlEvProfileAttr, MrcCtlEvProfileAttrMask, MrcCtlEvState)

__all__ = ["WeightAgent", "AgentError", "EntryStatus", "EntryState", "MAX_EVENTS_PER_STEP"]

MAX_EVENTS_PER_STEP = 1024   #: EV events popped per period at most (the rest wait a period)
_M32 = 0xFFFFFFFF
_GOOD, _BAD, _DENIED = (MrcCtlEvState.MRC_CTL_EV_GOOD, MrcCtlEvState.MRC_CTL_EV_ASSUMED_BAD,
                        MrcCtlEvState.MRC_CTL_EV_DENIED)
_EV_OP = MrcCtlEvProfileAttrMask.MRC_CTL_EV_PROFILE_EV_OP


class AgentError(IOError):
    """A bus or link error while the agent acted; the message names the action,
    the entry and the underlying error (``__cause__``): the API's
    :class:`~mrcnic.fw.mrc_ctl.MrcCtlError` (``EIO`` for a bus error), or a
    :class:`~mrcnic.fw.uart.LinkError` / socket error of the link."""


class EntryStatus(str, py_enum.Enum):
    """The agent's view of one path-table entry."""
    ACTIVE = "active"              #: in use (GOOD) or left to the NIC
    QUARANTINED = "quarantined"    #: DENIED by the agent, probed every period
    DENIED = "denied"              #: DENIED for good by the agent (deny_after failures)
    OPERATOR = "operator"          #: DENIED by the operator: not managed until allowed


@dataclass
class EntryState:
    """What the agent knows about one profile entry.

    ``baseline`` / ``weight``: configured and current weight (decisions per
    round); ``failures``: quarantines so far; ``streak``: consecutive answered
    probes; ``quiet``: periods without ECN congestion while below baseline;
    ``last_rtt_ns``: RTT of the last answered probe (ns); ``probes``: probes sent;
    ``qp``: the first QP whose EV profile holds the entry (its peer answers the probes).
    """
    index: int
    ev: int
    baseline: int
    weight: int
    qp: int = 0
    status: EntryStatus = EntryStatus.ACTIVE
    failures: int = 0
    streak: int = 0
    quiet: int = 0
    last_rtt_ns: int | None = None
    probes: int = 0


class WeightAgent:
    """Weight manager of one NIC (see the module notes for the control loop).

    Parameters
    ----------
    client : MrcCtlContext or CsrClient
        The NIC's controller context (``fw/mrc_ctl.py``), or its register client (any
        blocking transport), which :meth:`start` wraps into one
        (``MrcCtlContext(client)``: nothing is read before :meth:`start`).
    period_s : float
        Control period, seconds (> 0): :meth:`run` calls :meth:`step` this often.
    probe_timeout_s : float
        Seconds to wait for the reply of one EV probe (> 0); no reply in time =
        the path is still broken.
    restore_after : int
        Consecutive answered probes (one per period) that restore a quarantined
        entry (>= 1).
    deny_after : int
        Failures (quarantines) after which an entry is DENIED for good (>= 1).
    ecn_threshold : float
        ECN-echo ratio (echoes / packets in one period, 0..1) above which the
        weight is halved.
    min_packets : int
        Packets an entry must have sent in the period for the ratio to count (>= 1).
    quiet_periods : int
        Periods without congestion before a reduced weight grows by 1 (>= 1).
    evcnt_per_period : int
        Per-EV counter records read per period (round robin over the profile
        entries; each costs 9 register accesses), so a period stays short on a
        slow link (UART, simulation): with more entries than this, an entry's
        deltas span several periods.
    log : str, os.PathLike, file object or None
        JSON-lines event log: a path (opened for appending, closed by
        :meth:`close`) or a text file; every action is one JSON object per line.
    on_action : callable or None
        Called with each action record (a dict) as it happens (the CLI prints it).
    clock : callable
        Monotonic time source, seconds (tests pass a fake clock).
    sleep : callable
        ``sleep(seconds)``; it must advance ``clock``.

    Attributes
    ----------
    ctl : MrcCtlContext or None
        The controller API the agent acts through (None until :meth:`start` when a
        register client was given).
    client : CsrClient
        The register client under it.
    log : list of dict
        Every action, in order: ``{t_s, action, index, ev, ...detail}`` with
        ``t_s`` seconds since :meth:`start`.  Actions: ``start``, ``quarantine``,
        ``denied``, ``restored``, ``allowed``, ``held``, ``ecn_halve``,
        ``ecn_raise``, ``operator_denied``, ``operator_weight``.
    entries : dict
        {path-table index: :class:`EntryState`} of every EV-profile entry.
    profiles : dict
        {"qp<N>": (base, count)} of the transmit QP contexts with an EV profile.
    stats : collections.Counter
        periods, overruns, events, stale_events, unmanaged_events, probes,
        probe_replies, probes_lost, stale_replies.

    Raises
    ------
    ValueError
        A parameter out of range.
    AgentError
        From :meth:`start` / :meth:`step` / :meth:`run`: a bus or link error.
    """

    def __init__(self, client: MrcCtlContext | CsrClient, *, period_s: float = 0.05,
                 probe_timeout_s: float = 0.02, restore_after: int = 2, deny_after: int = 3,
                 ecn_threshold: float = 0.2, min_packets: int = 8, quiet_periods: int = 4,
                 evcnt_per_period: int = 16, log=None, on_action=None, clock=time.monotonic,
                 sleep=time.sleep):
        for name, v in (("period_s", period_s), ("probe_timeout_s", probe_timeout_s)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < math.inf:
                raise ValueError(f"{name} must be > 0 seconds (finite), not {v!r}")
        for name, v in (("restore_after", restore_after), ("deny_after", deny_after),
                        ("min_packets", min_packets), ("quiet_periods", quiet_periods),
                        ("evcnt_per_period", evcnt_per_period)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, not {v!r}")
        if (not isinstance(ecn_threshold, (int, float)) or isinstance(ecn_threshold, bool)
                or not 0 <= ecn_threshold <= 1):
            raise ValueError(f"ecn_threshold must be a ratio 0..1, not {ecn_threshold!r}")
        if isinstance(client, MrcCtlContext):
            self.ctl, self.client = client, client.client
        else:
            self.ctl, self.client = None, client
        self.period_s, self.probe_timeout_s = float(period_s), float(probe_timeout_s)
        self.restore_after, self.deny_after = restore_after, deny_after
        self.ecn_threshold, self.min_packets = float(ecn_threshold), min_packets
        self.quiet_periods, self.evcnt_per_period = quiet_periods, evcnt_per_period
        self._cc_pos = 0
        self.on_action, self.clock, self.sleep = on_action, clock, sleep
        self._poll_s = min(0.001, self.probe_timeout_s / 4)
        self._own_file = isinstance(log, (str, os.PathLike))
        self._log_file = open(log, "a", encoding="utf-8") if self._own_file else log
        self.log = []
        self.entries = {}
        self.profiles = {}
        self.stats = Counter()
        self._pending = deque()
        self._counters = {}
        self._pid = {}                  # path-table index -> EV profile id (the API's)
        self._ev = {}                   # path-table index -> MrcCtlEv (value, 1-based port)
        self._fmt = {}                  # EV profile id -> MrcCtlEvFmtMode (probe requests)
        self._t0 = None
        self._ready = False

    # -- life cycle ---------------------------------------------------------------------
    @property
    def started(self) -> bool:
        """True once :meth:`start` has completed (an interrupted start is redone)."""
        return self._ready

    def start(self):
        """Read the EV profiles (those of the QPs, adopted by the controller API) and each
        entry's state and weight (the baselines); quarantine entries found ASSUMED_BAD,
        leave entries found DENIED to the operator.  Profile entries beyond the NIC's path
        table (``ID_PATH_DEPTH``) are ignored.  After an :class:`AgentError` it can be
        called again (:meth:`step` does): entries it already quarantined stay the
        agent's own."""
        if self._t0 is None:
            self._t0 = self.clock()
        if self.ctl is None:
            self.ctl = self._hw("identify the NIC", None, MrcCtlContext, self.client)
        ctl = self.ctl
        depth = min(self.client.regmap.table("path").depth, ctl.depth)
        ranges, owner = {}, {}
        attached = sorted((ctl.qps_of(pid)[0], pid) for pid, p in ctl.ev_profiles.items()
                          if p.base is not None and ctl.qps_of(pid))
        for q, pid in attached:
            prof = ctl.ev_profiles[pid]
            ranges[f"qp{q}"] = (prof.base, prof.size)
            for i in range(prof.base, min(prof.base + prof.size, depth)):
                owner.setdefault(i, pid)
        self.profiles = ranges
        indices = sorted(owner)
        for i in indices:               # the API's profile of an entry (its EV events' too)
            pid = ctl.profile_of_index(i)[0]
            self._pid[i] = pid if ctl.qps_of(pid) else owner[i]
        for pid in set(self._pid.values()):
            self._fmt[pid] = self._hw(f"EV format of profile {pid}", None, ctl.ev_fmt_mode_of, pid)
        prev, self.entries = self.entries, {}
        found = {}
        for i in indices:
            e = self._hw(f"read path[{i}]", None, self._query, i, MRC_CTL_EV_UNPOPULATED)
            self._ev[i] = e.ev
            found[i] = e.state
            old = prev.get(i)
            if old is not None and old.status is not EntryStatus.ACTIVE:
                self.entries[i] = old       # quarantined by an interrupted start()
                continue
            self.entries[i] = EntryState(i, e.ev.val, e.weight, e.weight,
                                         qp=ctl.qps_of(self._pid[i])[0])
            if e.state == _DENIED:
                self.entries[i].status = EntryStatus.OPERATOR
        self._emit("start", None, entries=len(indices),
                   profiles={k: list(v) for k, v in ranges.items()},
                   operator_denied=[i for i, s in self.entries.items()
                                    if s.status is EntryStatus.OPERATOR])
        for i in indices:
            if found[i] == _BAD:
                self._quarantine(self.entries[i], cause="ASSUMED_BAD at start")
        self._ready = True
        return self

    def close(self):
        """Close the JSON-lines log if the agent opened it."""
        if self._own_file and self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the control period -------------------------------------------------------------
    def step(self):
        """One control period: events, operator changes, probes, congestion (in that order)."""
        if not self.started:
            self.start()
        self.stats["periods"] += 1
        while len(self._pending) < MAX_EVENTS_PER_STEP:
            # one event per call: an error loses no event already popped
            got = self._hw("poll EV events", None, self.ctl.mrc_ctl_poll_ev_event, 1)
            if not got:
                break
            self.stats["events"] += 1
            self._pending.append(got[0])
        while self._pending:
            self._handle_event(self._pending[0])
            self._pending.popleft()                 # only once its action is done
        self._check_operator()
        for st in list(self.entries.values()):
            if st.status is EntryStatus.QUARANTINED:
                self._probe_entry(st)
        self._congestion()

    def run(self, duration_s: float | None = None, max_periods: int | None = None) -> dict:
        """Call :meth:`step` every ``period_s`` until ``duration_s`` seconds have passed
        or ``max_periods`` periods ran (both None: until KeyboardInterrupt, which
        propagates between or inside periods).  A period that overruns starts the
        next one at once (``stats["overruns"]``).  Returns :meth:`summary`."""
        if duration_s is not None and not duration_s >= 0:
            raise ValueError(f"duration_s must be >= 0 seconds, not {duration_s!r}")
        if max_periods is not None and max_periods < 0:
            raise ValueError(f"max_periods must be >= 0, not {max_periods!r}")
        if not self.started:
            self.start()
        t0 = self.clock()
        end = None if duration_s is None else t0 + duration_s
        n, next_t = 0, t0
        while ((max_periods is None or n < max_periods)
               and (end is None or self.clock() < end - 1e-9)):
            self.step()
            n += 1
            next_t += self.period_s
            now = self.clock()
            if now > next_t:
                self.stats["overruns"] += 1
                next_t = now
            elif max_periods is None or n < max_periods:
                self.sleep((next_t if end is None else min(next_t, end)) - now)
        return self.summary()

    def summary(self) -> dict:
        """Counts of actions, probes and events; entries by status."""
        by = {s.value: [i for i, e in self.entries.items() if e.status is s] for s in EntryStatus}
        return dict(
            periods=self.stats["periods"], overruns=self.stats["overruns"],
            uptime_s=round(self.clock() - self._t0, 6) if self.started else 0.0,
            entries=len(self.entries),
            actions=dict(Counter(r["action"] for r in self.log)),
            quarantined=by["quarantined"], denied=by["denied"], operator_denied=by["operator"],
            reduced={i: [e.weight, e.baseline] for i, e in self.entries.items()
                     if e.status is EntryStatus.ACTIVE and e.weight < e.baseline},
            probes=dict(sent=self.stats["probes"], replies=self.stats["probe_replies"],
                        lost=self.stats["probes_lost"], stale=self.stats["stale_replies"]),
            events=dict(popped=self.stats["events"], stale=self.stats["stale_events"],
                        unmanaged=self.stats["unmanaged_events"]))

    # -- actions ------------------------------------------------------------------------
    def _handle_event(self, ev):
        """``ev``: an :class:`~mrcnic.fw.mrc_ctl.MrcCtlEvEvent` (``index``, ``reason``)."""
        st = self.entries.get(ev.index)
        if st is None:
            self.stats["unmanaged_events"] += 1
            return
        if ev.reason is EvEventReason.ACK_TIMEOUT:
            if st.status is EntryStatus.ACTIVE:
                self._quarantine(st, cause="ACK_TIMEOUT")
            else:                           # queued before our DENIED: same outage
                self.stats["stale_events"] += 1
        elif ev.reason is EvEventReason.MIN_ACTIVE:
            self._emit("held", st, failures=st.failures)
        elif ev.reason is EvEventReason.PROBE_OK and st.status is not EntryStatus.ACTIVE:
            self.stats["stale_events"] += 1
        # PROBE_OK of an active entry, CONTROLLER: nothing to do

    def _quarantine(self, st, cause):
        final = st.failures + 1 >= self.deny_after
        self._hw("deny" if final else "quarantine", st, self._set_state, st, _DENIED)
        st.failures += 1
        st.status = EntryStatus.DENIED if final else EntryStatus.QUARANTINED
        st.streak = st.quiet = 0
        self._emit("denied" if final else "quarantine", st, failures=st.failures, cause=cause)

    def _check_operator(self):
        for st in list(self.entries.values()):
            if st.status is EntryStatus.ACTIVE:
                continue
            e = self._hw("read back", st, self._query, st.index)
            if e.state == _DENIED:
                continue
            prev = st.status
            st.status, st.failures, st.streak, st.quiet = EntryStatus.ACTIVE, 0, 0, 0
            st.ev, st.weight = e.ev.val, e.weight
            self._emit("allowed", st, was=prev.value, weight=st.weight, baseline=st.baseline)
            if e.state == _BAD:
                self._quarantine(st, cause="ASSUMED_BAD after allow")

    def _probe_entry(self, st):
        c = self.ctl
        req = MrcCtlEpReq(st.index, None, None, self._fmt.get(self._pid[st.index]) or 0,
                          self._ev[st.index], index=st.index)
        stale = c.ep_stale_rsp
        try:
            rsp = self._hw("send a probe and wait for the probe replies", st,
                           c.mrc_ctl_ep_batch_send_wait, 0, MrcCtlEpOpType.MRC_CTL_EP_OP_EV_PROBE,
                           [req], round(self.probe_timeout_s * 1e9), sleep=self.sleep,
                           clock=self.clock, poll_s=self._poll_s)
            rtt = rsp[0].rtt
        except AgentError as exc:
            cause = exc.__cause__
            if not (isinstance(cause, MrcCtlError) and cause.errno == errno.ETIMEDOUT):
                raise
            rtt = None                  # sent, no reply in time
        finally:
            self.stats["stale_replies"] += c.ep_stale_rsp - stale
        st.probes += 1
        self.stats["probes"] += 1
        if rtt is None:
            self.stats["probes_lost"] += 1
            st.streak = 0
            return
        self.stats["probe_replies"] += 1
        st.last_rtt_ns = rtt
        if st.streak + 1 < self.restore_after:
            st.streak += 1
            return
        # weight first, then GOOD: never in use with a stale weight
        self._hw("restore weight", st, self._set_weight_hw, st, st.baseline)
        self._hw("restore state", st, self._set_state, st, _GOOD)
        st.status, st.weight, st.streak, st.quiet = EntryStatus.ACTIVE, st.baseline, 0, 0
        self._emit("restored", st, rtt_ns=rtt, weight=st.weight, failures=st.failures,
                   probes=self.restore_after)

    def _congestion(self):
        items = list(self.entries.items())
        n = min(len(items), self.evcnt_per_period)
        if not items:
            return
        start, self._cc_pos = self._cc_pos % len(items), (self._cc_pos + n) % len(items)
        for i, st in (items * 2)[start:start + n]:
            cnt = self._hw("read evcnt", st, self._ev_counters, st)
            prev, self._counters[i] = self._counters.get(i), cnt
            if prev is None or st.status is not EntryStatus.ACTIVE or st.weight == 0:
                st.quiet = 0
                continue
            pkts = (cnt.packets - prev.packets) & _M32
            ecn = (cnt.ecn_echoes - prev.ecn_echoes) & _M32
            if pkts >= self.min_packets and ecn / pkts > self.ecn_threshold:
                st.quiet = 0
                new = max(1, st.weight // 2)
                if new != st.weight:
                    self._set_weight(st, new, "ecn_halve", packets=pkts, ecn_echoes=ecn,
                                     ratio=round(ecn / pkts, 4))
            elif st.weight < st.baseline:
                st.quiet += 1
                if st.quiet >= self.quiet_periods:
                    st.quiet = 0
                    self._set_weight(st, st.weight + 1, "ecn_raise")
            else:
                st.quiet = 0

    def _set_weight(self, st, weight, action, **detail):
        """Write a weight to an active entry after checking it is still what the agent
        believes (not DENIED by the operator, weight not changed by the operator)."""
        e = self._hw("read back", st, self._query, st.index)
        if e.state == _DENIED:
            st.status = EntryStatus.OPERATOR
            self._emit("operator_denied", st, weight=e.weight)
            return
        if e.state != _GOOD:
            return                      # ASSUMED_BAD: its ACK_TIMEOUT event comes next period
        if e.weight != st.weight:
            st.weight = st.baseline = e.weight
            self._emit("operator_weight", st, weight=st.weight)
            return
        self._hw(action, st, self._set_weight_hw, st, weight)
        old, st.weight = st.weight, weight
        self._emit(action, st, weight=weight, old_weight=old, baseline=st.baseline, **detail)

    # -- the controller API calls ------------------------------------------------------
    def _op_entry(self, index, ev=None, **kw):
        return MrcCtlEvOpEntry(self._ev[index] if ev is None else ev, index=index, **kw)

    def _query(self, index, ev=None):
        """QUERY_EV_STATE of one path-table entry: the MrcCtlEvOpEntry with its EV, the
        NIC's state and weight."""
        attr = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_QUERY_EV_STATE,
                                                        [self._op_entry(index, ev)]))
        self.ctl.mrc_ctl_query_ev_profile(self._pid[index], attr, _EV_OP)
        return attr.ev_op.entries[0]

    def _set_state(self, st, state):
        """MODIFY_EV_STATE of the entry (GOOD or DENIED)."""
        self.ctl.mrc_ctl_modify_ev_profile(self._pid[st.index], MrcCtlEvProfileAttr(
            ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_MODIFY_EV_STATE,
                                 [self._op_entry(st.index, state=state)])), _EV_OP)

    def _set_weight_hw(self, st, weight):
        self.ctl.mrc_ctl_modify_ev_weight(self._pid[st.index],
                                          [self._op_entry(st.index, weight=weight)])

    def _ev_counters(self, st):
        return self.ctl.mrc_ctl_query_ev_counters(self._pid[st.index], [self._op_entry(st.index)])[0]

    # -- helpers ------------------------------------------------------------------------
    def _hw(self, what, st, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OSError as exc:      # MrcCtlError (EIO: bus error), LinkError, socket errors
            where = "" if st is None else f" of entry {st.index} (EV {st.ev:#x})"
            raise AgentError(f"agent: {what}{where} failed: {exc}") from exc

    def _emit(self, action, st, **detail):
        rec = dict(t_s=round(self.clock() - self._t0, 6), action=action,
                   index=None if st is None else st.index, ev=None if st is None else st.ev,
                   **detail)
        self.log.append(rec)
        if self._log_file is not None:
            self._log_file.write(json.dumps(rec) + "\n")
            self._log_file.flush()
        if self.on_action is not None:
            self.on_action(rec)

    def entry_table(self) -> list:
        """Every entry's :class:`EntryState` as a dict (for display)."""
        return [dict(asdict(e), status=e.status.value) for e in self.entries.values()]
