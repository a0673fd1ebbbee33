"""Provisioning: the register and table writes that program a NIC from its configuration file.

The plan is plain data, so the same writes go to a board (``mrcnic fw provision``
over UART), to a simulated NIC (``sim/cosim.py`` through cocotbext-axi's
``AxiLiteMaster``) and to the register model in the tests::

    plan = provision_plan(cfg, compile_tables(cfg), client.identity())
    apply_plan(client, plan)            # CsrClient; AsyncCsrClient: await apply_plan_async

Order: every port administratively down, NIC settings, path table, SRH
segments, QP contexts, memory regions, CC profiles (``cc``), sender
reliability (``rel``), then the configured port admin state -- so no frame
leaves before every table holds its final value.

Sources: OCP MRC 1.0 controller API (EV profiles, CC profiles, port admin
state); ``docs/config.md``; ``docs/register-map.md``.
"""

from __future__ import annotations

from ..regmap import REGMAP
from .client import _Ops, pack_record

__all__ = ["ProvisionError", "provision_plan", "apply_plan", "apply_plan_async", "VERIFY_TABLES"]

#: Tables read back by ``verify`` (``rxqp`` is write-only in its valid bit semantics; ``evcnt``
#: is read only).
VERIFY_TABLES = ("path", "seg", "txqp", "mr", "cc", "rel")


class ProvisionError(ValueError):
    """The configuration does not fit the NIC (capability registers) or holds an illegal value."""


def _rel_params(rel: dict) -> dict:
    return {k: v for k, v in rel.items() if k != "nscc"}


def provision_plan(cfg, hw, ident: dict, *, rel_overrides: dict | None = None,
                   ack: tuple[int, int] | None = None) -> list[tuple]:
    """The writes that program ``cfg`` (checked against the device's ID registers).

    Parameters
    ----------
    cfg : mrcnic.config.NicConfig
        The loaded configuration.
    hw : mrcnic.config.HwTables
        ``compile_tables(cfg)``.
    ident : dict
        ``client.identity()`` (``ID_*`` register values).
    rel_overrides : dict, optional
        ``RelQpConfig`` fields to override in every QP's ``rel`` record (e.g.
        ``ack_timeout_exp``, ``probe_interval`` in cycles).
    ack : (int, int), optional
        ``NIC_ACK`` (every N packets, timeout T cycles); untouched when None.

    Returns
    -------
    list of ("reg", name, value) and ("table", name, index, record)

    Raises
    ------
    ProvisionError
        The NIC cannot hold the configuration (ports, path entries, QPs,
        regions, segment words) or a record field is out of range; nothing is
        written then.
    """
    from ..config import rel_qp_configs
    caps = [("ports", max(p.id for p in cfg.ports) + 1, "ID_PORTS"),
            ("path-table entries", len(hw.path_entries), "ID_PATH_DEPTH"),
            ("QPs", len(cfg.qps), "ID_MAX_QPS"),
            ("memory regions", len(hw.memory_regions), "ID_MAX_REGIONS"),
            ("SRH segment words", len(hw.segments), "ID_SEG_DEPTH")]
    for what, need, reg in caps:
        if need > ident[reg]:
            raise ProvisionError(f"{cfg.source}: needs {need} {what}, the NIC has "
                                 f"{ident[reg]} ({reg})")
    g = hw.globals
    plan = [("reg", "PORT_ADMIN", 0),
            ("reg", "NIC_SRC_MAC_LO", g["src_mac"] & 0xFFFFFFFF),
            ("reg", "NIC_SRC_MAC_HI", g["src_mac"] >> 32)]
    plan += [("reg", f"NIC_SRC_IP{i}", (g["src_ip"] >> (32 * i)) & 0xFFFFFFFF) for i in range(4)]
    plan += [("reg", "NIC_DSCP", g["dscp"] | hw.trim_dscp << 8),
             ("reg", "NIC_PMTU_LOG2", g["pmtu_log2"]),
             ("reg", "NIC_USID", hw.local_usid),
             ("reg", "NIC_LOCATOR", hw.locator_block)]
    if ack is not None:
        plan.append(("reg", "NIC_ACK", (ack[0] & 0xFF) | (ack[1] & 0xFFFF) << 16))
    for p, mac in enumerate(hw.next_hop_mac):
        plan += [("reg", f"PORT{p}_NH_MAC_LO", mac & 0xFFFFFFFF),
                 ("reg", f"PORT{p}_NH_MAC_HI", mac >> 32)]
    plan += [("table", "path", i, e) for i, e in enumerate(hw.path_entries)]
    plan += [("table", "seg", i, s) for i, s in enumerate(hw.segments)]
    nq, nr = ident["ID_MAX_QPS"], ident["ID_MAX_REGIONS"]
    empty_tx = dict(dest_qpn=0, start_psn=0, mode=0, profile_base=0, profile_count=0, peer_usid=0,
                    rkey_check=0)
    plan += [("table", "txqp", q, hw.qp_contexts[q] if q < len(hw.qp_contexts) else empty_tx)
             for q in range(nq)]
    plan += [("table", "rxqp", q, hw.rx_qps[q] if q < len(hw.rx_qps) else dict(valid=0))
             for q in range(nq)]
    plan += [("table", "mr", i, hw.memory_regions[i] if i < len(hw.memory_regions)
              else dict(valid=0)) for i in range(nr)]
    rels = rel_qp_configs(cfg, hw, **(rel_overrides or {}))
    plan += [("table", "cc", q, rel["nscc"]) for q, rel in enumerate(rels)]
    plan += [("table", "rel", q, _rel_params(rel)) for q, rel in enumerate(rels)]
    plan.append(("reg", "PORT_ADMIN", sum(1 << p for p, up in enumerate(hw.port_up) if up)))
    # check every write now, with the client's own checks (register names and field
    # values, table indices within the client's register map, record fields): nothing
    # is written if anything is wrong
    ops = _Ops(None)
    for item in plan:
        try:
            if item[0] == "table":
                pack_record(REGMAP.table(item[1]).layout, item[3], f"{item[1]}[{item[2]}]")
                next(ops._write_table(item[1], item[2], item[3]))
            else:
                next(ops._write(item[1], item[2]))
        except ValueError as e:
            raise ProvisionError(f"{cfg.source}: {e}") from None
    return plan


def apply_plan(client, plan: list[tuple]) -> None:
    """Write ``plan`` with a blocking :class:`~mrcnic.fw.client.CsrClient` (bus errors raise)."""
    for item in plan:
        if item[0] == "reg":
            client.write(item[1], item[2])
        else:
            client.write_table(item[1], item[2], item[3])


async def apply_plan_async(client, plan: list[tuple]) -> None:
    """Write ``plan`` with an :class:`~mrcnic.fw.client.AsyncCsrClient` (cocotb)."""
    for item in plan:
        if item[0] == "reg":
            await client.write(item[1], item[2])
        else:
            await client.write_table(item[1], item[2], item[3])
