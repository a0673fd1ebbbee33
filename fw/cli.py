"""``mrcnic fw``: the firmware command line (a board over UART, a simulation over TCP).

Every command goes through :class:`mrcnic.fw.client.CsrClient` (names, fields and
legal values from the one register map) over a transport chosen by ``--target``;
whatever the OCP controller API covers goes through it
(:class:`mrcnic.fw.mrc_ctl.MrcCtlContext` on that client, ``docs/mrc-api.md``), the
same path as the weight agent: port admin states (``ports``), EV states and weights
(``ev deny/allow/set-weight``), EV probes (``ev probe``), EV events (``events``), the
``ctl``/``wr``/``mem`` commands and ``agent run``.  Register views the API does not
model stay on the register client: the ID block (``device``), next-hop MACs, the EV
lookup and ``ev list`` (path-table fields: DA, carriers), counters, ``cc`` (the NIC's
own NSCC fields and units) and ``provision``.

* ``uart:DEVICE[:BAUD]`` -- a board's ``UartAxilBridge`` (``mrcnic.fw.uart``, 8N1,
  default 115200 baud);
* ``tcp:HOST:PORT`` -- a simulation or model served by ``mrcnic.fw.tcp.CsrServer``.

EV profiles: with ``--config FILE`` (the TOML the NIC was provisioned from) the
profiles have their names and ``ev_min_active``; without it they are read back
from the NIC's transmit QP contexts (``txqp.profile_base/profile_count``), named
``qp<N>`` after the first QP using each range, with ``ev_min_active`` = 1 (the
hardware does not store the floor, so the last GOOD EV is protected only).

Output: rich tables for people, ``--json`` for scripts (``counters --watch
--json`` prints one JSON object per line).  Errors print one ``error:`` line and write
nothing (every check runs before the first register write), with the exit codes of
every ``mrcnic`` command (:mod:`mrcnic.clikit`): 2 for bad input (unknown EV or profile,
values out of range, a deny that would break ``ev_min_active``, a configuration the
NIC cannot hold, no ``--target``, an output file that cannot be written), 1 when the NIC
or the link fails the command (bus errors, no answer, a verify mismatch, no probe reply, an
agent error, a work request still pending), 130 on Ctrl-C.
Operations that read many table entries (``ev list``, ``ev deny/allow/...`` without
``--profile``) show a progress bar on stderr; table entries are read with one
multi-word read each where the transport has one (``read_burst``).
"""

import errno
import ipaddress
import json
import os
import sys
import time

import click

from ..clikit import OUT_FILE, SIZE
from ..regmap import REGMAP
from ..rtl.layouts import EvState
from .client import CsrClient, CsrValueError, pack_record
from .provision import VERIFY_TABLES, ProvisionError, apply_plan, provision_plan
from .transport import TransportError
from .uart import LinkError

__all__ = ["fw", "open_target", "parse_target"]


class FwError(click.ClickException):
    """A clear, user-facing error of an ``mrcnic fw`` command: bad input (exit status 2)."""

    exit_code = 2


class FwFailed(click.ClickException):
    """The NIC or the link failed the command (exit status 1)."""

    exit_code = 1


def _number(text: str, lo: int, hi: int):
    """``text`` as an int in ``lo..hi`` if it is ASCII digits only and in range, else None."""
    if not (text.isascii() and text.isdigit()) or len(text) > 10:
        return None
    value = int(text)
    return value if lo <= value <= hi else None


#: pyserial URL schemes that carry a HOST:PORT of their own
_NET_URLS = ("socket", "rfc2217")


def _host_port(text: str):
    """``HOST:PORT`` or ``[IPV6]:PORT`` -> (host, port), None if malformed (port 1..65535)."""
    host, sep, port = text.rpartition(":")
    port = _number(port, 1, 65535) if sep else None
    if port is None or not host or host.isspace() or "\x00" in host:
        return None
    if host.startswith("[") != host.endswith("]") or host in ("[]",):
        return None
    if ":" in host.strip("[]") and not host.startswith("["):
        return None
    return host, port


def parse_target(target: str):
    """``uart:DEVICE[:BAUD]`` -> ("uart", device, baud); ``tcp:HOST:PORT`` -> ("tcp", host, port).

    DEVICE may be a pyserial URL: ``uart:socket://HOST:PORT[:BAUD]`` and
    ``uart:rfc2217://HOST:PORT[:BAUD]`` (a TCP serial server such as ser2net; HOST may be
    ``[IPV6]``) keep PORT in the URL; any other URL (``loop://``, ``spy://DEV``) or a
    device path takes a trailing ``:BAUD``.  BAUD is 1..100000000 (default 115200), a
    PORT 1..65535, ASCII digits only.  Raises ``ValueError`` naming the target otherwise.
    """
    usage = f"bad target {target!r}: use uart:DEVICE[:BAUD] or tcp:HOST:PORT"
    kind, _, rest = target.partition(":")
    if kind == "uart" and rest.strip():
        scheme, url, where = rest.partition("://")
        if url and scheme in _NET_URLS:
            hp = _host_port(where)
            if hp is not None:                                  # scheme://HOST:PORT
                return ("uart", rest, 115200)
            head, _, tail = where.rpartition(":")
            hp, baud = _host_port(head), _number(tail, 1, 100_000_000)
            if hp is None or baud is None:
                raise ValueError(f"{usage} (a {scheme}:// URL needs HOST:PORT[:BAUD])")
            return ("uart", f"{scheme}://{head}", baud)
        head, sep, tail = rest.rpartition(":")
        if sep and tail.isdigit():
            baud = _number(tail, 1, 100_000_000)
            if baud is None or not head.strip():
                raise ValueError(f"{usage} (bad baud rate {tail!r})")
            return ("uart", head, baud)
        if sep and tail.startswith("-") and tail[1:].isdigit():
            raise ValueError(f"{usage} (bad baud rate {tail!r})")
        return ("uart", rest, 115200)
    if kind == "tcp":
        hp = _host_port(rest)
        if hp is not None:
            return ("tcp", hp[0].strip("[]"), hp[1])
    raise ValueError(usage)


def open_target(target: str, timeout: float | None = None):
    """The transport of a ``--target`` string (opened)."""
    kind, where, arg = parse_target(target)
    if kind == "uart":
        from .uart import UartTransport
        return UartTransport(where, arg, **({"timeout": timeout} if timeout else {}))
    from .tcp import TcpTransport
    return TcpTransport(where, arg, **({"timeout": timeout} if timeout else {}))


class _Ctx:
    """Lazily opened link, loaded config and cached reads of one command."""

    def __init__(self, target, config, as_json, timeout):
        self.target, self.config_path, self.as_json, self.timeout = target, config, as_json, timeout
        self._client = self._cfg = self._ctl = None

    @property
    def client(self) -> CsrClient:
        if self._client is None:
            if not self.target:
                raise FwError("no target: give --target uart:DEVICE[:BAUD] | tcp:HOST:PORT "
                              "(or set MRCNIC_TARGET)")
            self._client = CsrClient(open_target(self.target, self.timeout))
        return self._client

    @property
    def ctl(self):
        """The controller API (``mrc_ctl.h``) on the NIC, created once per command (with
        ``--config`` its profiles have the configuration's names)."""
        if self._ctl is None:
            from .mrc_ctl import MrcCtlContext
            self._ctl = MrcCtlContext(self.client, self.cfg[0] if self.cfg is not None else None)
        return self._ctl

    def ctl_profile(self, prof, index: int) -> int:
        """The API's EV profile id of the command's profile ``prof`` (holding path-table
        entry ``index``)."""
        ctl = self.ctl
        for pid, p in ctl.ev_profiles.items():
            if p.base is not None and (p.base, p.size) == (prof["base"], prof["count"]):
                return pid
        pid, _ = ctl.profile_of_index(index)
        if pid is None:
            raise FwError(f"path-table entry {index} is in no EV profile of the NIC")
        return pid

    def progress(self, total: int, label: str):
        """A transient progress bar on stderr (people only: not with --json, not for a few
        items); returns ``(context manager, advance())``."""
        import contextlib
        if self.as_json or total < 8:
            return contextlib.nullcontext(), lambda: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
        bar = Progress("[progress.description]{task.description}", BarColumn(),
                       MofNCompleteColumn(), TimeElapsedColumn(),
                       console=Console(stderr=True), transient=True)
        task = bar.add_task(label, total=total)
        return bar, lambda: bar.advance(task)

    @property
    def cfg(self):
        if self._cfg is None and self.config_path:
            from ..config import compile_tables, load_config
            cfg = load_config(self.config_path)
            self._cfg = (cfg, compile_tables(cfg))
        return self._cfg

    # -- output -------------------------------------------------------------------------
    def console(self):
        from mrcnic.clikit import console
        return console()

    def emit(self, obj, table_fn):
        if self.as_json:
            click.echo(json.dumps(obj, indent=2, default=str))
        else:
            self.console().print(table_fn())

    # -- EV profiles ----------------------------------------------------------------------
    def profiles(self) -> dict:
        """{name: dict(base, count, ev_min_active)} from --config or the NIC's QP contexts."""
        if self.cfg is not None:
            cfg, hw = self.cfg
            qp_of = {}
            for q, qp in enumerate(cfg.qps):
                qp_of.setdefault(qp.ev_profile, q)
            return {name: dict(base=b, count=n, ev_min_active=cfg.ev_profiles[name].ev_min_active,
                               qp=qp_of.get(name, 0))
                    for name, (b, n) in hw.profile_ranges.items()}
        out, seen = {}, set()
        for q in range(self.client.read("ID_MAX_QPS")):
            ctx = self.client.read_table("txqp", q)
            rng = (ctx["profile_base"], ctx["profile_count"])
            if ctx["profile_count"] and rng not in seen:
                seen.add(rng)
                out[f"qp{q}"] = dict(base=rng[0], count=rng[1], ev_min_active=1, qp=q)
        return out

    def profile(self, name):
        profs = self.profiles()
        if name not in profs:
            raise FwError(f"unknown EV profile {name!r} (profiles: {', '.join(profs) or 'none'})")
        return profs[name]

    def entries(self, prof) -> list:
        """Path-table entries of a profile, each with its ``index`` (cached per command)."""
        key = (prof["base"], prof["count"])
        cache = self.__dict__.setdefault("_entries", {})
        if key in cache:
            return cache[key]
        out = []
        bar, advance = self.progress(prof["count"], f"reading path entries {prof['base']}.."
                                                    f"{prof['base'] + prof['count'] - 1}")
        with bar:
            for i in range(prof["base"], prof["base"] + prof["count"]):
                e = self.client.read_table("path", i)
                e["index"] = i
                out.append(e)
                advance()
        cache[key] = out
        return out

    def resolve_ev(self, ev: int, profile: str | None):
        """(profile name, profile, its entries, indices of EV ``ev``) or FwError."""
        profs = {profile: self.profile(profile)} if profile else self.profiles()
        hits = []
        for name, prof in profs.items():
            entries = self.entries(prof)
            idx = [e["index"] for e in entries if e["ev"] == ev]
            if idx:
                hits.append((name, prof, entries, idx))
        if not hits:
            known = sorted({e["ev"] for p in profs.values() for e in self.entries(p)})
            shown = ", ".join(f"{v:#x}" for v in known[:16]) + (" ..." if len(known) > 16 else "")
            where = f"profile {profile}" if profile else f"any EV profile ({', '.join(profs) or 'none'})"
            raise FwError(f"unknown EV {ev:#x}: not in {where}; EVs: {shown or 'none'}")
        if len(hits) > 1:
            raise FwError(f"EV {ev:#x} is in profiles {', '.join(h[0] for h in hits)}: "
                          "choose one with --profile")
        return hits[0]


class _IntType(click.ParamType):
    """An integer, decimal or ``0x...``; with ``bits``: 0..2^bits-1."""
    name = "INT"

    def __init__(self, bits: int | None = None):
        self.bits = bits

    def convert(self, value, param, ctx):
        if not isinstance(value, int):
            try:
                value = int(value, 0)
            except ValueError:
                self.fail(f"{value!r} is not an integer (decimal or 0x...)", param, ctx)
        if self.bits is not None and not 0 <= value < 1 << self.bits:
            self.fail(f"{value:#x} is out of range 0..{(1 << self.bits) - 1:#x} "
                      f"({self.bits} bits)", param, ctx)
        return value


INT = _IntType()
U16, U32, U64 = _IntType(16), _IntType(32), _IntType(64)


class _SecondsType(click.types.FloatParamType):
    """A finite number of seconds >= 0."""
    name = "SECONDS"

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        if not 0 <= value < float("inf"):           # also refuses nan
            self.fail(f"{value} is not a finite number of seconds >= 0", param, ctx)
        return value


SECONDS = _SecondsType()


def _guard(fn):
    """Turn firmware / link / config errors into one clear message: bad input exits 2,
    a link or bus failure 1 (module docstring)."""
    import functools

    from ..config import ConfigError
    from .mrc_ctl import MrcCtlError

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except MrcCtlError as exc:
            # the API's bus error, no answer, a NIC still busy with the previous work request
            # (ENOMEM) are the NIC's failure; its other errnos: bad input
            if exc.errno in (errno.EIO, errno.ETIMEDOUT, errno.ENOMEM):
                raise FwFailed(str(exc)) from None
            raise FwError(str(exc)) from None
        except (CsrValueError, ConfigError) as exc:
            raise FwError(str(exc)) from None
        except (TransportError, LinkError) as exc:
            raise FwFailed(f"{exc}") from None
        except ValueError as exc:
            raise FwError(str(exc)) from None
        except OSError as exc:          # an input or output file (paths are checked first)
            raise FwError(f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)) from None
    return wrapper


def _table(title, columns, rows):
    from rich.table import Table
    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="left" if c in ("register", "field", "profile", "state",
                                                 "reason", "DA", "MAC", "admin", "description", "what",
                                                 "note") else "right")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


def _mac(v):
    return ":".join(f"{(v >> (8 * (5 - i))) & 0xFF:02x}" for i in range(6))


def _state(v):
    return EvState(v).name


# ----------------------------------------------------------------------------------------
@click.group("fw")
@click.option("--target", default=None, envvar="MRCNIC_TARGET", metavar="TARGET",
              help="uart:DEVICE[:BAUD] (board) or tcp:HOST:PORT (simulation). Env: MRCNIC_TARGET.")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The NIC's config (TOML): EV profile names and ev_min_active.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.option("--timeout", type=float, default=None,
              help="Seconds to wait for each response [default: 0.5 over uart, 2.0 over tcp].")
@click.pass_context
def fw(ctx, target, config_path, as_json, timeout):
    """Firmware: manage a NIC through its CSR bank (docs/register-map.md)."""
    if target is not None:
        try:
            parse_target(target)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--target")
    if timeout is not None and not 0 < timeout < float("inf"):
        raise click.BadParameter(f"{timeout} is not a positive number of seconds",
                                 param_hint="--timeout")
    ctx.obj = _Ctx(target, config_path, as_json, timeout)


@fw.command()
@click.pass_obj
@_guard
def device(obj):
    """Identity and capabilities (ID block)."""
    ident = obj.client.identity()
    ver = obj.client.decode("ID_VERSION", ident["ID_VERSION"])
    data = dict(ident, version=f"{ver['major']}.{ver['minor']}")
    obj.emit(data, lambda: _table(f"mrcnic CSR bank v{data['version']} at {obj.target}",
                                  ("register", "value", "description"),
                                  [(n, f"{v:#x}" if n == "ID_MAGIC" else
                                    data["version"] if n == "ID_VERSION" else v,
                                    REGMAP[n].doc.replace("``", "`")) for n, v in ident.items()]))


# ---- ports ------------------------------------------------------------------------------
def _ports_state(obj):
    """Admin state (mrc_ctl_query_port; 1-based there) and next-hop MAC (a register the API
    does not model) of every port, 0-based."""
    from .mrc_ctl import MrcCtlPortAdminState
    c, ctl = obj.client, obj.ctl
    rows = []
    for p in range(ctl.n_ports):
        up = ctl.mrc_ctl_query_port(p + 1).port_admin_state == \
            MrcCtlPortAdminState.MRC_CTL_PORT_ADMIN_ENABLED
        mac = c.read(f"PORT{p}_NH_MAC_HI") << 32 | c.read(f"PORT{p}_NH_MAC_LO")
        rows.append(dict(port=p, admin="up" if up else "down", next_hop_mac=_mac(mac)))
    return rows


@fw.group(invoke_without_command=True)
@click.pass_context
def ports(ctx):
    """Planes: admin state and next-hop MACs; `ports enable|disable P`."""
    if ctx.invoked_subcommand is None:
        _show_ports(ctx.obj)


@_guard
def _show_ports(obj):
    rows = _ports_state(obj)
    obj.emit(rows, lambda: _table("ports", ("port", "admin", "MAC"),
                                  [(r["port"], r["admin"], r["next_hop_mac"]) for r in rows]))


def _set_port(obj, port, up):
    """mrc_ctl_modify_port of 0-based ``port`` (the header's port ``port + 1``)."""
    from .mrc_ctl import MrcCtlPortAdminState, MrcCtlPortAttr, MrcCtlPortAttrMask
    ctl = obj.ctl
    n = ctl.n_ports
    if not 0 <= port < n:
        raise FwError(f"port {port} does not exist (ports 0..{n - 1})")
    state = MrcCtlPortAdminState.MRC_CTL_PORT_ADMIN_ENABLED if up else \
        MrcCtlPortAdminState.MRC_CTL_PORT_ADMIN_DISABLED
    ctl.mrc_ctl_modify_port(port + 1, MrcCtlPortAttr(state), MrcCtlPortAttrMask.MRC_CTL_PORT_ADMIN_STATE)
    _show_ports(obj)


@ports.command("enable")
@click.argument("port", type=INT)
@click.pass_obj
@_guard
def ports_enable(obj, port):
    """Set plane PORT administratively up."""
    _set_port(obj, port, True)


@ports.command("disable")
@click.argument("port", type=INT)
@click.pass_obj
@_guard
def ports_disable(obj, port):
    """Set plane PORT administratively down (it sends nothing)."""
    _set_port(obj, port, False)


# ---- EVs --------------------------------------------------------------------------------
@fw.group()
def ev():
    """EV profiles: list, weights, deny/allow, probes."""


def _ev_rows(entries):
    return [dict(index=e["index"], ev=e["ev"], port=e["port"], state=_state(e["state"]),
                 weight=e["weight"], carriers=e["n_carriers"],
                 da=str(ipaddress.IPv6Address(e["da"]))) for e in entries]


@ev.command("list")
@click.argument("profile", required=False)
@click.pass_obj
@_guard
def ev_list(obj, profile):
    """Entries (EV, port, state, weight, DA) of PROFILE (default: every profile)."""
    profs = {profile: obj.profile(profile)} if profile else obj.profiles()
    data = {name: dict(prof, entries=_ev_rows(obj.entries(prof))) for name, prof in profs.items()}

    def render():
        from rich.console import Group
        tables = []
        for name, p in data.items():
            good = len({(r["ev"], r["port"]) for r in p["entries"] if r["state"] == "GOOD"})
            tables.append(_table(
                f"EV profile {name}: entries {p['base']}..{p['base'] + p['count'] - 1}, "
                f"{good} GOOD EVs, ev_min_active {p['ev_min_active']}",
                ("index", "EV", "port", "state", "weight", "carriers", "DA"),
                [(r["index"], f"{r['ev']:#x}", r["port"], r["state"], r["weight"], r["carriers"],
                  r["da"]) for r in p["entries"]]))
        return Group(*tables) if tables else "no EV profile"
    obj.emit(data, render)


_profile_opt = click.option("--profile", default=None, help="EV profile holding the EV.")


def _op_entries(entries, idx, **kw):
    """MrcCtlEvOpEntry of each path-table entry in ``idx`` (``index``: that copy only)."""
    from .mrc_ctl import MrcCtlEv, MrcCtlEvOpEntry
    return [MrcCtlEvOpEntry(MrcCtlEv(e["ev"], e["port"] + 1), index=e["index"], **kw)
            for e in entries if e["index"] in idx]


def _set_ev_state(obj, prof, entries, idx, state):
    """mrc_ctl_modify_ev_profile MODIFY_EV_STATE of the entries ``idx`` of ``prof``."""
    from .mrc_ctl import MrcCtlEvOp, MrcCtlEvOpArgs, MrcCtlEvProfileAttr
    from .mrc_ctl import MrcCtlEvProfileAttrMask as M
    obj.ctl.mrc_ctl_modify_ev_profile(obj.ctl_profile(prof, idx[0]), MrcCtlEvProfileAttr(
        ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_MODIFY_EV_STATE,
                             _op_entries(entries, idx, state=state))), M.MRC_CTL_EV_PROFILE_EV_OP)


@ev.command("set-weight")
@click.argument("ev_value", metavar="EV", type=INT)
@click.argument("weight", type=INT)
@_profile_opt
@click.pass_obj
@_guard
def ev_set_weight(obj, ev_value, weight, profile):
    """Set the weight (decisions per round) of every copy of EV (mrc_ctl_modify_ev_weight)."""
    f = REGMAP["EV_WEIGHT_SET"].field("weight")
    if not f.legal(weight):
        raise FwError(f"weight {weight} out of range 0..{(1 << f.width) - 1}")
    name, prof, entries, idx = obj.resolve_ev(ev_value, profile)
    obj.ctl.mrc_ctl_modify_ev_weight(obj.ctl_profile(prof, idx[0]),
                                     _op_entries(entries, idx, weight=weight))
    _report(obj, "set-weight", name, ev_value, idx, weight=weight)


def _report(obj, action, profile, ev_value, idx, **extra):
    data = dict(action=action, profile=profile, ev=ev_value, entries=idx, **extra)
    obj.emit(data, lambda: f"{action}: EV {ev_value:#x} of profile {profile}, entries "
                           f"{', '.join(map(str, idx))}"
                           + "".join(f", {k} {v}" for k, v in extra.items()))


@ev.command("deny")
@click.argument("ev_value", metavar="EV", type=INT)
@_profile_opt
@click.pass_obj
@_guard
def ev_deny(obj, ev_value, profile):
    """Mark EV DENIED (never used for data); refused if it would break ev_min_active."""
    from .mrc_ctl import MrcCtlEvState, MrcCtlPortAdminState
    name, prof, entries, idx = obj.resolve_ev(ev_value, profile)
    cand = [e for e in entries if e["state"] == EvState.GOOD.value and e["index"] not in idx]
    up = {p for p in {e["port"] for e in cand}
          if obj.ctl.mrc_ctl_query_port(p + 1).port_admin_state
          == MrcCtlPortAdminState.MRC_CTL_PORT_ADMIN_ENABLED}
    good = {(e["ev"], e["port"]) for e in cand if e["port"] in up}
    if len(good) < prof["ev_min_active"]:
        raise FwError(f"denying EV {ev_value:#x} would leave {len(good)} GOOD EVs in profile {name}, "
                      f"below its ev_min_active {prof['ev_min_active']}; nothing changed")
    _set_ev_state(obj, prof, entries, idx, MrcCtlEvState.MRC_CTL_EV_DENIED)
    _report(obj, "deny", name, ev_value, idx, good_evs_left=len(good))


@ev.command("allow")
@click.argument("ev_value", metavar="EV", type=INT)
@_profile_opt
@click.pass_obj
@_guard
def ev_allow(obj, ev_value, profile):
    """Return EV to GOOD (every copy)."""
    from .mrc_ctl import MrcCtlEvState
    name, prof, entries, idx = obj.resolve_ev(ev_value, profile)
    _set_ev_state(obj, prof, entries, idx, MrcCtlEvState.MRC_CTL_EV_GOOD)
    _report(obj, "allow", name, ev_value, idx)


@ev.command("probe")
@click.argument("ev_value", metavar="EV", type=INT)
@_profile_opt
@click.option("--wait", type=SECONDS, default=1.0, show_default=True,
              help="Seconds to wait for the probe replies.")
@click.pass_obj
@_guard
def ev_probe(obj, ev_value, profile, wait):
    """Send an EV probe on each {EV, port} of EV and print the RTTs (ns)
    (mrc_ctl_ep_batch_send_wait: one probe after the other, each waiting up to the wait time)."""
    from .mrc_ctl import MrcCtlEpOpType, MrcCtlEpReq, MrcCtlError, MrcCtlEv
    name, prof, entries, idx = obj.resolve_ev(ev_value, profile)
    by_port = {}
    for e in entries:
        if e["index"] in idx:
            by_port.setdefault(e["port"], e["index"])
    want = set(by_port.values())
    ctl = obj.ctl
    pid = obj.ctl_profile(prof, min(want))
    fmt = ctl.ev_fmt_mode_of(pid) or 0
    req = [MrcCtlEpReq(i, None, None, fmt, MrcCtlEv(ev_value, port + 1), index=i)
           for port, i in sorted(by_port.items(), key=lambda pi: pi[1])]
    stale = ctl.ep_stale_rsp
    try:
        rsp = ctl.mrc_ctl_ep_batch_send_wait(0, MrcCtlEpOpType.MRC_CTL_EP_OP_EV_PROBE, req,
                                             round(wait * 1e9))
    except MrcCtlError as exc:
        if exc.errno != errno.ETIMEDOUT:
            raise
        rsp = exc.rsp
    replies = [dict(index=r.req_id, rtt_ns=r.rtt, requested=True) for r in rsp]
    missing = sorted(want - {r["index"] for r in replies})
    data = dict(profile=name, ev=ev_value, replies=replies, missing=missing,
                other_replies=ctl.ep_stale_rsp - stale)
    obj.emit(data, lambda: _table(f"EV probe {ev_value:#x} ({name})", ("index", "RTT ns", "note"),
                                  [(r["index"], r["rtt_ns"], "") for r in replies]
                                  + [(i, "-", "no reply") for i in missing]
                                  + ([("", "", f"{data['other_replies']} replies of other probes "
                                              "dropped")] if data["other_replies"] else [])))
    if missing and not replies:
        raise FwFailed(f"no probe reply for EV {ev_value:#x} within {wait} s (wall clock; a "
                      "simulated NIC needs more: --wait 30)")


# ---- events / counters ------------------------------------------------------------------
@fw.command()
@click.option("--max", "limit", type=int, default=4096, show_default=True,
              help="Stop after this many events.")
@click.pass_obj
@_guard
def events(obj, limit):
    """Pop and print the queued EV events (mrc_ctl_poll_ev_event)."""
    from .mrc_ctl import MrcCtlEvState
    hw = {MrcCtlEvState.MRC_CTL_EV_GOOD: "GOOD", MrcCtlEvState.MRC_CTL_EV_ASSUMED_BAD: "ASSUMED_BAD",
          MrcCtlEvState.MRC_CTL_EV_DENIED: "DENIED"}
    ctl, out = obj.ctl, []
    while len(out) < limit:
        got = ctl.mrc_ctl_poll_ev_event(1)
        if not got:
            break
        e = got[0]
        out.append(dict(index=e.index, ev=e.ev.val, state=hw[e.state], reason=e.reason.name))
    obj.emit(out, lambda: _table(f"{len(out)} EV events", ("index", "EV", "state", "reason"),
                                 [(r["index"], f"{r['ev']:#x}", r["state"], r["reason"])
                                  for r in out]))


_COUNTERS = [r.name for b in REGMAP.blocks if b.name == "CNT" for r in b.registers] + [
    "EV_EVENT_COUNT", "RO_WRITE_ATTEMPTS"]


def _read_counters(c):
    names = [n for n in _COUNTERS if n in REGMAP]
    return {n: c.read(n) for n in names}


@fw.command()
@click.option("--watch", is_flag=True, help="Repeat every --interval seconds, with deltas.")
@click.option("--interval", type=float, default=1.0, show_default=True)
@click.option("--count", type=int, default=0, help="With --watch: stop after N samples (0 = Ctrl-C).")
@click.pass_obj
@_guard
def counters(obj, watch, interval, count):
    """NIC counters (RX drops by reason, RX/TX totals)."""
    c, prev, n = obj.client, None, 0
    try:
        while True:
            cur = _read_counters(c)
            delta = {k: (v - prev[k]) & 0xFFFFFFFF for k, v in cur.items()} if prev else None
            if obj.as_json:
                click.echo(json.dumps(dict(counters=cur, delta=delta) if watch else cur,
                                      indent=None if watch else 2))
            else:
                cols = ("register", "value") + (("delta",) if delta else ())
                rows = [(k, v) + ((delta[k],) if delta else ()) for k, v in cur.items()]
                obj.console().print(_table(f"counters ({obj.target})", cols, rows))
            n += 1
            if not watch or (count and n >= count):
                return
            prev = cur
            time.sleep(interval)
    except KeyboardInterrupt:
        return


# ---- weight manager ---------------------------------------------------------------------
@fw.group()
def agent():
    """The weight manager (fw/agent.py): EV quarantine, probe restore, ECN weights."""


_ACTION_STYLE = {"quarantine": "yellow", "denied": "bold red", "restored": "green",
                 "allowed": "green", "ecn_halve": "magenta", "ecn_raise": "cyan",
                 "held": "blue", "operator_denied": "blue", "operator_weight": "blue",
                 "start": "bold"}


def _action_line(rec):
    from rich.markup import escape
    head = f"{rec['t_s']:10.3f} s  [{_ACTION_STYLE.get(rec['action'], 'white')}]" \
           f"{rec['action']:<15}[/]"
    if rec["index"] is not None:
        head += f" entry {rec['index']:>3}  EV {rec['ev']:#x}"
    rest = "  ".join(f"{k} {v}" for k, v in rec.items() if k not in ("t_s", "action", "index", "ev"))
    return head + ("  " + escape(rest) if rest else "")


@agent.command("run")
@click.option("--period", type=float, default=0.05, show_default=True,
              help="Control period, seconds.")
@click.option("--probe-timeout", type=float, default=0.02, show_default=True,
              help="Seconds to wait for each EV probe reply.")
@click.option("--duration", type=float, default=None,
              help="Stop after S seconds (default: run until Ctrl-C).")
@click.option("--periods", type=int, default=None, help="Stop after N control periods.")
@click.option("--restore-after", type=int, default=2, show_default=True,
              help="Consecutive probe replies that restore a quarantined EV.")
@click.option("--deny-after", type=int, default=3, show_default=True,
              help="Failures after which an EV is DENIED for good.")
@click.option("--ecn-threshold", type=float, default=0.2, show_default=True,
              help="ECN-echo ratio per period above which the weight is halved.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), default=None,
              help="Append every action to FILE as JSON lines.")
@click.pass_obj
@_guard
def agent_run(obj, period, probe_timeout, duration, periods, restore_after, deny_after,
              ecn_threshold, log_path):
    """Run the weight manager: one line per action (--json: JSON lines), a summary at the end.
    It acts through the controller API (mrc_ctl.h), as every other command.

    Every period: pop the EV events (ACK_TIMEOUT -> the EV is set DENIED and probed),
    probe the quarantined EVs (replies -> GOOD with the configured weight), halve the
    weight of ECN-marked EVs and raise it back slowly.  Ctrl-C stops cleanly.
    """
    from .agent import AgentError, WeightAgent
    if periods is not None and periods < 0:
        raise FwError(f"--periods must be >= 0, not {periods}")
    console = None if obj.as_json else obj.console()

    def show(rec):
        if obj.as_json:
            click.echo(json.dumps(rec))
        else:
            console.print(_action_line(rec), highlight=False)

    client = obj.client
    try:
        a = WeightAgent(client, period_s=period, probe_timeout_s=probe_timeout,
                        restore_after=restore_after, deny_after=deny_after,
                        ecn_threshold=ecn_threshold, log=log_path, on_action=show)
    except OSError as exc:
        raise FwError(f"cannot open the log {log_path}: {exc.strerror or exc}") from None
    interrupted, error = False, None
    try:
        a.run(duration_s=duration, max_periods=periods)
    except KeyboardInterrupt:
        interrupted = True
    except AgentError as exc:
        error = str(exc)
    finally:
        a.close()
    summary = dict(a.summary(), interrupted=interrupted, error=error)
    if obj.as_json:
        click.echo(json.dumps(dict(summary=summary)))
    else:
        console.print(_table(
            f"agent summary ({obj.target}){' - interrupted' if interrupted else ''}",
            ("what", "value"),
            [(k, json.dumps(v) if isinstance(v, (dict, list)) else v)
             for k, v in summary.items() if v is not None]))
    if error:
        raise FwFailed(error)


# ---- congestion control -----------------------------------------------------------------
@fw.group()
def cc():
    """CC profiles (NSCC parameters) of the QPs."""


def _cc_fields():
    from amaranth.lib import data
    return [n for n, _ in data.Layout.cast(REGMAP.table("cc").layout)]


@cc.command("show")
@click.argument("qp", type=INT, required=False)
@click.pass_obj
@_guard
def cc_show(obj, qp):
    """NSCC parameters of QP (default: every QP)."""
    c = obj.client
    nq = c.read("ID_MAX_QPS")
    if qp is not None and not 0 <= qp < nq:
        raise FwError(f"QP {qp} does not exist (QPs 0..{nq - 1})")
    qps = [qp] if qp is not None else list(range(nq))
    data = {q: c.read_table("cc", q) for q in qps}
    fields = _cc_fields()
    obj.emit({str(q): v for q, v in data.items()},
             lambda: _table("CC profiles (NSCC)", ("field",) + tuple(f"QP {q}" for q in qps),
                            [(f,) + tuple(data[q][f] for q in qps) for f in fields]))


@cc.command("set")
@click.argument("qp", type=INT)
@click.argument("assignments", nargs=-1, metavar="FIELD=VALUE...")
@click.option("--profile", "cc_profile", default=None,
              help="Load the named [cc_profiles] entry of --config first.")
@click.pass_obj
@_guard
def cc_set(obj, qp, assignments, cc_profile):
    """Change NSCC parameters of QP (read-modify-write of its cc table entry)."""
    from ..rtl.nscc import nscc_config
    c = obj.client
    if not assignments and not cc_profile:
        raise FwError("nothing to set: give FIELD=VALUE pairs and/or --profile NAME")
    nq = c.read("ID_MAX_QPS")
    if not 0 <= qp < nq:
        raise FwError(f"QP {qp} does not exist (QPs 0..{nq - 1})")
    fields = _cc_fields()
    updates = {}
    for a in assignments:
        key, eq, val = a.partition("=")
        if not eq:
            raise FwError(f"{a!r} is not FIELD=VALUE")
        if key not in fields:
            raise FwError(f"unknown NSCC field {key!r} (fields: {', '.join(fields)})")
        try:
            updates[key] = int(val, 0)
        except ValueError:
            raise FwError(f"{key}: {val!r} is not an integer") from None
    if cc_profile:
        if obj.cfg is None:
            raise FwError("--profile needs --config FILE")
        cfg, _ = obj.cfg
        if cc_profile not in cfg.cc_profiles:
            raise FwError(f"unknown CC profile {cc_profile!r} "
                          f"(profiles: {', '.join(cfg.cc_profiles) or 'none'})")
        rec = nscc_config(cfg.cc_profiles[cc_profile])
    else:
        rec = c.read_table("cc", qp)
    rec.update(updates)
    pack_record(REGMAP.table("cc").layout, rec, "cc")      # check every value before writing
    c.write_table("cc", qp, rec)
    obj.emit(dict(qp=qp, cc=rec), lambda: _table(f"CC profile of QP {qp} (written)",
                                                  ("field", "value"), list(rec.items())))


# ---- provisioning -----------------------------------------------------------------------
@fw.command()
@click.argument("config_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--dry-run", is_flag=True,
              help="Check and list the writes, write nothing; without --target the NIC's "
                   "capacities are those of the default build (ID registers' reset values).")
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Read every table entry back after writing.")
@click.pass_obj
@_guard
def provision(obj, config_file, dry_run, verify):
    """Program the NIC from a configuration file (docs/config.md)."""
    from ..config import compile_tables, load_config
    cfg = load_config(config_file)
    hw = compile_tables(cfg)
    if dry_run and not obj.target:
        # no NIC to ask: the default build's identity (the ID block's reset values)
        ident = {r.name: r.reset for b in REGMAP.blocks if b.name == "ID" for r in b.registers}
        c = None
    else:
        c = obj.client
        ident = c.identity()
    try:
        plan = provision_plan(cfg, hw, ident)
    except ProvisionError as exc:
        raise FwError(str(exc)) from None
    if not dry_run:
        apply_plan(c, plan)
        if verify:
            for item in plan:
                if item[0] == "table" and item[1] in VERIFY_TABLES:
                    got = c.read_table(item[1], item[2])
                    want = pack_record(REGMAP.table(item[1]).layout, item[3])
                    if pack_record(REGMAP.table(item[1]).layout, got) != want:
                        raise FwFailed(f"verify failed: {item[1]}[{item[2]}] reads back {got}")
    summary = {}
    for item in plan:
        key = item[1] if item[0] == "table" else "registers"
        summary[key] = summary.get(key, 0) + 1
    data = dict(config=config_file, dry_run=dry_run, writes=summary,
                checked_against="the default build (no --target)" if c is None else obj.target,
                profiles={n: dict(base=b, count=k) for n, (b, k) in hw.profile_ranges.items()})
    obj.emit(data, lambda: _table(f"{'would program' if dry_run else 'programmed'} {cfg.nic.name}",
                                  ("what", "writes"), list(summary.items())))


# ---- the OCP MRC APIs: controller (mrc_ctl.h) and application (mrc.h) ---------------------
def _mrc_guard(fn):
    """_guard (which also turns the APIs' errno errors into one clear message)."""
    return _guard(fn)


def _ctl(obj):
    return obj.ctl


def _app(obj):
    from .mrc import MrcContext
    return MrcContext(_ctl(obj))


def _pattern(spec: str, length: int) -> bytes:
    """Bytes of a pattern: ``seed:N`` (random, seeded), ``incr`` (byte i = i mod 256) or a
    byte value (``0xA5``); ``ValueError`` for any other ``spec``."""
    import random
    try:
        if spec.startswith("seed:"):
            return random.Random(int(spec[5:], 0)).randbytes(length)
        if spec == "incr":
            return (bytes(range(256)) * (length // 256 + 1))[:length]
        b = int(spec, 0)
        if 0 <= b <= 255:
            return bytes([b]) * length
    except ValueError:
        pass
    raise ValueError(f"{spec!r} is not a pattern: seed:N (N an integer), incr or a byte value "
                     "0..255 (0xA5)")


def _write_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (an ``OUT_FILE``, checked while parsing); FwError if the
    system refuses it all the same (a special file, a full disk)."""
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as exc:
        raise FwError(f"cannot write {path}: {exc.strerror or exc}") from None


class _PatternType(click.ParamType):
    """A ``--pattern`` (:func:`_pattern`), checked while the command line is parsed."""
    name = "PATTERN"

    def convert(self, value, param, ctx):
        try:
            _pattern(value, 0)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return value


PATTERN = _PatternType()


def _source_data(mem, addr: int, length: int, src_file=None, pattern=None) -> bytes | None:
    """The bytes to write at host memory ``addr``: the first ``length`` bytes of ``src_file``,
    or ``pattern``, or None (neither: nothing to write).  The range is checked against the
    host memory first (EINVAL), so no impossible size is read or generated."""
    mem.check(addr, length)
    if src_file:
        with open(src_file, "rb") as f:
            data = f.read(length)
        if len(data) < length:
            raise FwError(f"{src_file} holds {len(data)} bytes, {length} are needed")
        return data
    return None if pattern is None else _pattern(pattern, length)


@fw.group()
def ctl():
    """The controller API (mrc_ctl.h): device query and EV profiles as the header sees them."""


@ctl.command("device")
@click.pass_obj
@_mrc_guard
def ctl_device(obj):
    """mrc_ctl_query_device: EV/CC limits, algorithms, port mask, optional features."""
    import dataclasses

    from .mrc_ctl import MrcCtlAttrOpt
    d = _ctl(obj).mrc_ctl_query_device()
    data = dataclasses.asdict(d)
    data["opt_attr_names"] = [o.name for o in MrcCtlAttrOpt if d.opt_attr & o]
    rows = [(f"ev.{k}", v) for k, v in data["ev"].items()] + \
        [(f"cc.{k}", v) for k, v in data["cc"].items()] + \
        [("phy_port_mask", f"{d.phy_port_mask:#x}"), ("opt_attr", ", ".join(data["opt_attr_names"]))]
    obj.emit(data, lambda: _table("mrc_ctl_query_device", ("field", "value"), rows))


@ctl.command("profiles")
@click.option("--evs/--no-evs", default=False, help="Also list each profile's EV array.")
@click.pass_obj
@_mrc_guard
def ctl_profiles(obj, evs):
    """mrc_ctl_query_ev_profile of every EV profile (state, mode, count, fields, EVs)."""
    from .mrc_ctl import (MrcCtlEvFieldsOp, MrcCtlEvFieldsOpArgs, MrcCtlEvOp, MrcCtlEvOpArgs,
                          MrcCtlEvProfileAttr)
    from .mrc_ctl import MrcCtlEvProfileAttrMask as M
    c = _ctl(obj)
    out = {}
    for pid in sorted(c.ev_profiles):
        a = MrcCtlEvProfileAttr(ev_fields_op=MrcCtlEvFieldsOpArgs(
            MrcCtlEvFieldsOp.MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS, field_count=64))
        c.mrc_ctl_query_ev_profile(pid, a, M.MRC_CTL_EV_PROFILE_STATE | M.MRC_CTL_EV_PROFILE_MODE
                                   | M.MRC_CTL_EV_PROFILE_COUNT | M.MRC_CTL_EV_PROFILE_MIN_ACTIVE
                                   | M.MRC_CTL_EV_PROFILE_EV_FIELDS_OP)
        rec = dict(name=c.profile_names.get(pid), state=a.cur_profile_state.name,
                   ev_mode=a.ev_mode.name, ev_count=a.ev_count, ev_min_active=a.ev_min_active,
                   base=c.ev_profiles[pid].base, qps=c.qps_of(pid),
                   fields=[dict(width=f.width, init_val=f.init_val, min_val=f.min_val,
                                max_val=f.max_val, mask=f.mask) for f in a.ev_fields_op.fields])
        if evs:
            q = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_QUERY_EV_ARRAY,
                                                         entry_count=a.ev_count))
            c.mrc_ctl_query_ev_profile(pid, q, M.MRC_CTL_EV_PROFILE_EV_OP)
            rec["evs"] = [dict(val=e.ev.val, port=e.ev.port, state=e.state.name)
                          for e in q.ev_op.entries[:q.ev_op.entry_count]]
        out[str(pid)] = rec
    obj.emit(out, lambda: _table("EV profiles (mrc_ctl_query_ev_profile)",
                                 ("profile", "name", "state", "mode", "count", "min active", "QPs"),
                                 [(p, r["name"] or "", r["state"], r["ev_mode"], r["ev_count"],
                                   r["ev_min_active"], r["qps"]) for p, r in out.items()]))


@fw.group()
def wr():
    """Work requests (mrc.h mrc_post_send / mrc_poll_cq) through the board registers."""


POST_WAIT_S = 5.0       #: seconds ``wr post`` waits for the NIC to take the previous request


@wr.command("post")
@click.option("--qp", type=int, default=0, show_default=True, help="QP index.")
@click.option("--size", type=SIZE, required=True, help="Bytes to write (64k, 1MiB, ...).")
@click.option("--imm", type=U32, default=None, help="Write-with-Immediate with this value.")
@click.option("--local-addr", type=U32, default=0x0040_0000, show_default=True,
              help="Host-memory byte address of the source data (8-byte aligned).")
@click.option("--file", "src_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Source data from this file (its first --size bytes).")
@click.option("--pattern", type=PATTERN, default=None,
              help="Source data: seed:N, incr or a byte (0xA5) [default: seed:1].")
@click.option("--no-fill", is_flag=True, help="Post what is in host memory already.")
@click.option("--save", type=OUT_FILE, default=None,
              help="Write the source data to this file too (to compare with the receiver's).")
@click.option("--va", type=U64, default=None, help="Remote VA.")
@click.option("--rkey", type=U32, default=None, help="Remote rkey.")
@click.option("--peer-config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The receiver's config: its first memory region gives VA and rkey.")
@click.option("--offset", type=SIZE, default=None,
              help="Offset into the peer's region (with --peer-config, without --va) [default: 0].")
@click.option("--wr-id", type=U16, default=1, show_default=True)
@click.pass_obj
@_mrc_guard
def wr_post(obj, qp, size, imm, local_addr, src_file, pattern, no_fill, save, va, rkey,
            peer_config, offset, wr_id):
    """Fill host memory with the source data and post one RDMA WRITE (mrc_post_send).

    Everything is checked before anything is written: the options, the work request, the
    source range in host memory, and that the NIC has taken the previous work request
    (waits up to 5 s, then exit 1)."""
    from .mrc import IbvSendWr, IbvWrOpcode, pack_wr
    if sum(x is not None and x is not False for x in (src_file, pattern, no_fill or None)) > 1:
        raise FwError("give one of --file, --pattern, --no-fill")
    if no_fill and save:
        raise FwError("--save writes the source data, --no-fill has none: not both")
    if offset is not None and (peer_config is None or va is not None):
        raise FwError("--offset is into --peer-config's region: give --peer-config and no --va")
    if peer_config:
        from ..config import load_config
        regions = load_config(peer_config).memory_regions
        if not regions:
            raise FwError(f"{peer_config} has no memory region")
        mr = regions[0]
        offset = offset or 0
        if offset + size > mr.length:
            raise FwError(f"offset {offset} + size {size} exceeds the peer region ({mr.length} bytes)")
        va = mr.va + offset if va is None else va
        rkey = mr.rkey if rkey is None else rkey
    if va is None or rkey is None:
        raise FwError("give --va and --rkey, or --peer-config")
    op = IbvWrOpcode.IBV_WR_RDMA_WRITE if imm is None else IbvWrOpcode.IBV_WR_RDMA_WRITE_WITH_IMM
    wr = IbvSendWr(wr_id, op, local_addr, size, va, rkey, imm or 0)
    app = _app(obj)
    q = app.qp(qp)                                      # EINVAL: no such QP
    pack_wr(qp, wr)                                     # EINVAL: alignment, length, fields
    data = _source_data(app.mem, local_addr, size, src_file,
                        None if no_fill else pattern or "seed:1")
    app.wait_post_slot(POST_WAIT_S)                     # ENOMEM (exit 1): the NIC is busy
    if save:
        _write_file(save, data)
    if data is not None:
        app.mem.write(local_addr, data)
    q.mrc_post_send(wr)
    out = dict(qp=qp, opcode=op.name, size=size, local_addr=local_addr, va=va, rkey=rkey,
               imm=imm, wr_id=wr_id, filled=data is not None)
    obj.emit(out, lambda: _table("posted (mrc_post_send)", ("field", "value"),
                                 [(k, f"{v:#x}" if isinstance(v, int) and k in ("va", "rkey",
                                                                              "local_addr") else v)
                                  for k, v in out.items()]))


@wr.command("wait")
@click.option("--cq", type=click.Choice(["recv", "send"]), default="recv", show_default=True,
              help="recv: messages placed into this NIC's memory; send: this NIC's sent WRs "
                   "(the co-simulation only).")
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--wait", "wait_s", type=SECONDS, default=10.0, show_default=True,
              help="Wall-clock seconds (a simulation needs minutes for 64 KiB).")
@click.option("--imm", type=U32, default=None,
              help="Wait for a Write-with-Immediate completion with this value (other "
                   "completions are popped and listed as skipped).")
@click.pass_obj
@_mrc_guard
def wr_wait(obj, cq, count, wait_s, imm):
    """Wait for completions (mrc_poll_cq) and print them."""
    from .mrc_ctl import MrcCtlError
    app = _app(obj)
    if imm is None:
        wcs, skipped = app.wait_cq(cq, count, wait_s), []
    else:
        wcs, skipped = [], []
        deadline = time.monotonic() + wait_s
        while True:
            got = app.mrc_poll_cq(cq, count - len(wcs))     # never more than still needed
            for w in got:
                (wcs if w.wc_flags and w.imm_data == imm else skipped).append(w)
            if len(wcs) >= count:
                break
            if time.monotonic() >= deadline:
                raise MrcCtlError(errno.ETIMEDOUT, f"{len(wcs)} of {count} completions with imm {imm:#x} "
                                       f"within {wait_s} s ({len(skipped)} others popped)")
            if not got:
                time.sleep(0.05)

    def row(w, **extra):
        return dict(qp=w.qp_num, opcode=w.opcode.name, psn=w.psn,
                    imm=w.imm_data if w.wc_flags else None, **extra)
    out = [row(w) for w in wcs] + [row(w, skipped=True) for w in skipped]
    title = f"{len(wcs)} {cq} completions" + (f", {len(skipped)} skipped" if skipped else "")
    obj.emit(out, lambda: _table(title, ("qp", "opcode", "psn", "imm", "note"),
                                 [(r["qp"], r["opcode"], r["psn"], "" if r["imm"] is None
                                   else f"{r['imm']:#x}", "skipped" if r.get("skipped") else "")
                                  for r in out]))


@fw.group()
def mem():
    """The NIC's host memory through the board's window (0x8000..)."""


@mem.command("dump")
@click.argument("addr", type=INT)
@click.argument("length", type=SIZE)
@click.option("--out", type=OUT_FILE, default=None, help="Raw bytes to a file.")
@click.option("--compare", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Compare with this file (exit 1 if they differ, in bytes or in length).")
@click.pass_obj
@_mrc_guard
def mem_dump(obj, addr, length, out, compare):
    """Read LENGTH bytes of host memory at ADDR (hex dump, --out file, --compare)."""
    if compare:
        with open(compare, "rb") as f:
            ref = f.read(length + 1)                    # one more: a longer file differs too
        ref_len = os.path.getsize(compare) if os.path.isfile(compare) else len(ref)
    data = _app(obj).mem.read(addr, length)
    if out:
        _write_file(out, data)
    res = dict(addr=addr, length=length)
    if compare:
        diffs = [i for i, (a, b) in enumerate(zip(data, ref)) if a != b]
        diff = len(diffs) + abs(ref_len - length)
        first = diffs[0] if diffs else (min(ref_len, length) if diff else None)
        res.update(compared=compare, compared_length=ref_len, differing_bytes=diff,
                   first_difference=first)
    if obj.as_json:
        if not out and not compare:
            res["hex"] = data.hex()
        click.echo(json.dumps(res, indent=2))
    else:
        if not out and not compare:
            for i in range(0, len(data), 16):
                chunk = data[i:i + 16]
                click.echo(f"{addr + i:08x}  {chunk.hex(' ')}")
        if compare:
            click.echo(f"{length} bytes at {addr:#x} vs {compare} ({ref_len} bytes): "
                       + ("identical" if not res["differing_bytes"] else
                          f"{res['differing_bytes']} bytes differ (first at +{res['first_difference']})"))
    if compare and res["differing_bytes"]:
        raise FwFailed(f"host memory at {addr:#x} differs from {compare} in "
                       f"{res['differing_bytes']} bytes (LENGTH {length}, the file {ref_len} bytes)")


@mem.command("fill")
@click.argument("addr", type=INT)
@click.argument("length", type=SIZE)
@click.option("--pattern", type=PATTERN, default=None,
              help="seed:N, incr or a byte value [default: 0x00].")
@click.option("--file", "src_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Bytes from this file instead of a pattern.")
@click.pass_obj
@_mrc_guard
def mem_fill(obj, addr, length, pattern, src_file):
    """Write LENGTH bytes of host memory at ADDR from a pattern or a file."""
    if src_file and pattern is not None:
        raise FwError("give one of --file, --pattern")
    mem = _app(obj).mem
    data = _source_data(mem, addr, length, src_file, pattern or "0x00")
    mem.write(addr, data)
    obj.emit(dict(addr=addr, length=length), lambda: _table("host memory written", ("field", "value"),
                                                            [("addr", f"{addr:#x}"), ("length", length)]))


@ctl.command("load")
@click.argument("config_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--profile", "names", multiple=True, help="Only this EV profile (repeatable).")
@click.pass_obj
@_mrc_guard
def ctl_load(obj, config_file, names):
    """Create CONFIG_FILE's EV profiles in the NIC through mrc_ctl.h calls, bring them
    ONLINE and read them back (QUERY_EV_ARRAY): exit 1 unless the EVs are the file's."""
    from ..config import load_config
    from .mrc_ctl import MrcCtlEvOp, MrcCtlEvOpArgs, MrcCtlEvProfileAttr, load_config_profiles
    from .mrc_ctl import MrcCtlEvProfileAttrMask as M
    cfg = load_config(config_file)
    for n in names:
        if n not in cfg.ev_profiles:
            raise FwError(f"{config_file} has no EV profile {n!r} ({', '.join(cfg.ev_profiles)})")
    c = _ctl(obj)
    ids = load_config_profiles(c, cfg, list(names) or None)
    out = {}
    for name, pid in ids.items():
        q = MrcCtlEvProfileAttr(ev_op=MrcCtlEvOpArgs(MrcCtlEvOp.MRC_CTL_EV_OP_QUERY_EV_ARRAY,
                                                     entry_count=c.ev_profiles[pid].size))
        c.mrc_ctl_query_ev_profile(pid, q, M.MRC_CTL_EV_PROFILE_EV_OP)
        got = [(e.ev.val, e.ev.port) for e in q.ev_op.entries[:q.ev_op.entry_count]]
        want = [(e.ev, e.port + 1) for e in cfg.ev_profiles[name].entries]
        out[name] = dict(ev_profile_id=pid, base=c.ev_profiles[pid].base, ev_count=len(got),
                         mode=c.ev_profiles[pid].ev_mode.name, same_evs=got == want)
    obj.emit(out, lambda: _table(f"EV profiles of {config_file} created (mrc_ctl.h)",
                                 ("profile", "id", "mode", "base", "count", "read back"),
                                 [(n, r["ev_profile_id"], r["mode"], r["base"], r["ev_count"],
                                   "same EVs" if r["same_evs"] else "DIFFERENT")
                                  for n, r in out.items()]))
    bad = [n for n, r in out.items() if not r["same_evs"]]
    if bad:
        raise FwFailed(f"read back differs from {config_file}: {', '.join(bad)}")
