"""Logic-depth report of a synthesised ECP5 netlist: which register-to-register paths are long.

Usage::

    python -m mrcnic.boards.paths NETLIST.json [--budget-ns 8] [--top 30] [--hop-ns 0.7]

``NETLIST.json`` is Yosys ``synth_ecp5`` output (``write_json``): ``build/<board>/top.json``
after ``mrcnic build`` or ``<dir>/<block>/top.json`` after ``python -m mrcnic.boards.fmax``.
The report takes seconds where place and route of the whole NIC takes an hour, and it sees
what an out-of-context Fmax run cannot: paths that cross block boundaries (a ready/valid
chain through three blocks, a raw block-RAM output feeding the next block's logic).

Delay model (ECP5 speed 6, rounded): every LUT4 / CCU2C / distributed-RAM input pays one
routed hop (``--hop-ns``, default 0.7 ns, a congested chip's typical net) plus the cell
(LUT4 0.3 ns; CCU2C 0.45 ns in, 0.06 ns per carry cell along the chain; DPR16X4 read
0.6 ns); a flip-flop launches at 0.45 ns, a DP16KD read at 5.8 ns without and 1.0 ns with
its output register (``REGMODE`` OUTREG); setup is 0.15 ns (+0.2 ns clock enable,
+0.3 ns local set/reset).  This is a ranking of logic depth, not timing sign-off:
nextpnr's routed report is the authority (``mrcnic build``'s JSON).  All clocks are
treated as one (an asynchronous FIFO's crossing shows up as a path).

Each report row groups the endpoints over the budget by start register (net name, with
the Amaranth hierarchy) and endpoint source line, and shows the worst path's nets.  Exit
status: 0 when nothing is over the budget, 1 when something is, 2 for an unreadable
netlist.
"""

import argparse
import collections
import json
import re
import sys

__all__ = ["DelayModel", "Endpoint", "analyse", "groups", "main"]


class DelayModel:
    """Cell and routing delays in ps (ECP5 speed 6, rounded; see the module docstring).

    Parameters
    ----------
    hop : int
        One routed net, ps (0.7 ns: a typical net in a full chip; 0.4 ns: an empty one).
    """

    FF_CQ, SETUP, CE_EXTRA, LSR_EXTRA = 450, 150, 200, 300
    LUT = 300
    CCU_IN, CCU_CARRY, CCU_CIN_S = 450, 60, 350
    EBR_CQ = {"NOREG": 5800, "OUTREG": 1000}
    DPR_READ = 600

    def __init__(self, hop: int = 700):
        if hop < 0:
            raise ValueError(f"hop must be >= 0 ps, not {hop}")
        self.hop = hop


Endpoint = collections.namedtuple("Endpoint", "ps levels cell pin path")
Endpoint.__doc__ = """A register input: estimated arrival incl. setup (ps), LUT/carry levels on
the worst path, the sink cell's name and pin, and the path as ``[(arrival ps, net name)]``
from its start register."""


def _top_module(netlist):
    for mod in netlist["modules"].values():
        flag = str(mod.get("attributes", {}).get("top", "0"))
        if int(flag, 2 if set(flag) <= {"0", "1"} else 10):
            return mod
    raise ValueError("no top module in the netlist (expected Yosys write_json output)")


def _net_names(top):
    """bit -> shortest user net name ``name[i]`` (Yosys-internal ``$`` names skipped)."""
    names = {}
    for name, net in top["netnames"].items():
        if name.startswith("$"):
            continue
        for i, bit in enumerate(net["bits"]):
            if isinstance(bit, int) and (bit not in names or len(name) < len(names[bit][0])):
                names[bit] = (name, i)
    return {b: f"{n}[{i}]" for b, (n, i) in names.items()}


def analyse(netlist: dict, model: DelayModel = None) -> list:
    """Every register input of ``netlist`` (Yosys JSON, ECP5 cells) with its estimated arrival.

    Register inputs: TRELLIS_FF DI/CE/LSR, DP16KD address/data/enable pins, DPR16X4 write
    pins.  Path starts: flip-flop Q, DP16KD DO, top-level inputs (0 ps).  Combinational
    loops (which Yosys would have reported) are cut where found.

    Returns
    -------
    list of :data:`Endpoint`, slowest first.

    Raises
    ------
    ValueError
        The netlist has no top module.
    """
    model = model or DelayModel()
    top = _top_module(netlist)
    cells = top["cells"]
    names = _net_names(top)
    driver = {}
    for cname, cell in cells.items():
        for pin, direction in cell["port_directions"].items():
            if direction == "output":
                for bit in cell["connections"][pin]:
                    if isinstance(bit, int):
                        driver[bit] = (cname, pin)

    arrival = {}                           # bit -> (ps, levels, previous bit)

    def inputs_of(bit):
        """The input bits a driven net depends on, and how each adds delay."""
        cname, pin = driver[bit]
        cell = cells[cname]
        kind, conn = cell["type"], cell["connections"]
        if kind == "LUT4":
            return [(conn[p][0], model.hop + model.LUT, 1) for p in "ABCD"]
        if kind == "CCU2C":
            ins = [conn[p][0] for p in ("A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1")]
            carry = model.CCU_CARRY if pin == "COUT" else model.CCU_CIN_S
            return ([(b, model.hop + model.CCU_IN, 1) for b in ins]
                    + [(conn["CIN"][0], carry, 0)])
        if kind == "TRELLIS_DPR16X4":
            return [(b, model.hop + model.DPR_READ, 1) for b in conn.get("RAD", [])]
        return None                        # a start point

    def start_time(bit):
        if bit not in driver:
            return 0
        cname, pin = driver[bit]
        cell = cells[cname]
        if cell["type"] == "DP16KD":
            side = "B" if pin.startswith("DOB") else "A"
            return model.EBR_CQ.get(cell["parameters"].get(f"REGMODE_{side}", "NOREG"), 5800)
        if cell["type"] == "TRELLIS_FF":
            return model.FF_CQ
        return 0

    visiting = set()

    def resolve(root):
        """Fill ``arrival`` for ``root`` and everything it depends on (iterative DFS)."""
        stack = [root]
        while stack:
            bit = stack[-1]
            if bit in arrival:
                stack.pop()
                continue
            deps = inputs_of(bit) if bit in driver else None
            if deps is None:
                arrival[bit] = (start_time(bit), 0, None)
                stack.pop()
                continue
            todo = [b for b, _, _ in deps if isinstance(b, int) and b not in arrival]
            if todo and bit not in visiting:
                visiting.add(bit)
                stack.extend(todo)
                continue
            best = (0, 0, None)
            for b, add, lv in deps:
                if isinstance(b, int):
                    ps, levels, _ = arrival.get(b, (0, 0, None))     # a loop is cut here
                    if ps + add > best[0]:
                        best = (ps + add, levels + lv, b)
            arrival[bit] = best
            stack.pop()

    def path(bit):
        out = []
        while bit is not None:
            ps, _, prev = arrival[bit]
            out.append((ps, names.get(bit, f"${bit}")))
            bit = prev
        return out[::-1]

    ends = []
    for cname, cell in cells.items():
        kind, conn = cell["type"], cell["connections"]
        if kind == "TRELLIS_FF":
            pins = [("DI", 0), ("CE", model.CE_EXTRA), ("LSR", model.LSR_EXTRA)]
        elif kind == "DP16KD":
            pins = [(p, model.CE_EXTRA) for p in conn
                    if p.startswith(("AD", "DI", "WE", "CE", "OCE", "CS"))]
        elif kind == "TRELLIS_DPR16X4":
            pins = [(p, model.CE_EXTRA) for p in ("WAD", "DI", "WRE")]
        else:
            continue
        for pin, extra in pins:
            for bit in conn.get(pin, []):
                if not isinstance(bit, int):
                    continue
                resolve(bit)
                ps, levels, _ = arrival[bit]
                ends.append(Endpoint(ps + model.hop + model.SETUP + extra, levels, cname, pin,
                                     bit))
    ends.sort(key=lambda e: -e.ps)
    return [e._replace(path=path(e.path)) for e in ends]


def _src_line(cell):
    src = cell.get("attributes", {}).get("src", "")
    hit = re.search(r"((?:rtl|boards)/\w+\.py:\d+)", src)
    if hit:
        return hit.group(1)
    hit = re.search(r"(\w+\.py:\d+)", src)
    return hit.group(1) if hit else "?"


def groups(ends, netlist, budget_ps: int) -> list:
    """Endpoints over ``budget_ps`` grouped by (start register, endpoint source line).

    Returns
    -------
    list of ``(worst Endpoint, count, start register name, endpoint source line)``,
    slowest group first.
    """
    cells = _top_module(netlist)["cells"]
    out = {}
    for e in ends:
        if e.ps <= budget_ps:
            break
        start = e.path[0][1].split("[")[0] if e.path else "?"
        start = re.sub(r"(_DO[AB]?\d+|_TRELLIS_FF_Q.*|_LUT4.*|_CCU2C.*)$", "", start)
        key = (start, _src_line(cells[e.cell]))
        if key in out:
            out[key][1] += 1
        else:
            out[key] = [e, 1, *key]
    return sorted((tuple(v) for v in out.values()), key=lambda g: -g[0].ps)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mrcnic.boards.paths",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("netlist", help="Yosys synth_ecp5 JSON (build/<board>/top.json)")
    ap.add_argument("--budget-ns", type=float, default=8.0, help="clock period (125 MHz: 8)")
    ap.add_argument("--top", type=int, default=30, help="groups to print")
    ap.add_argument("--hop-ns", type=float, default=0.7, help="delay of one routed net")
    a = ap.parse_args(argv)
    try:
        with open(a.netlist) as f:
            netlist = json.load(f)
        ends = analyse(netlist, DelayModel(hop=int(a.hop_ns * 1000)))
    except (OSError, ValueError, KeyError) as exc:
        ap.exit(2, f"mrcnic.boards.paths: {a.netlist}: {exc}\n")
    budget = int(a.budget_ns * 1000)
    over = [e for e in ends if e.ps > budget]
    print(f"{len(ends)} register inputs; {len(over)} over {a.budget_ns} ns "
          f"(estimate: {a.hop_ns} ns per routed net)")
    for e, count, start, line in groups(ends, netlist, budget)[:a.top]:
        cell = _top_module(netlist)["cells"][e.cell]["type"]
        print(f"{e.ps / 1000:6.2f} ns {e.levels:2d} levels x{count:<4d} {start} -> "
              f"{cell}.{e.pin} @ {line}")
        nets = [n.split("[")[0] for _, n in e.path]
        print("      " + " > ".join(dict.fromkeys(nets)))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
