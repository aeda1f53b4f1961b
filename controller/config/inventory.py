"""Which southbound programs each switch.

`switch_backends` resolves every switch of a declared topology, `configured_switches`
the switches a config without topology lists (a learned network).
"""

from __future__ import annotations

from controller.algorithm.model import Topology
from controller.config.schema import Config, SwitchBackend, SwitchSouthbound
from controller.config.strict import CONFIG

_fail = CONFIG.fail


def switch_backends(config: Config, topology: Topology) -> dict[str, SwitchBackend]:
    """Switch name -> its resolved southbound, for every switch of `topology`.

    A p4runtime switch gets its configured address and device id, or
    `p4runtime.host`:`base_port` + n and device id n + 1 (n: its position among
    the switches, from 0); an openflow switch its configured datapath id, or n + 1.
    Raises ConfigError for an override naming no switch, a port beyond 65535, two
    switches sharing an address and device id, or two sharing a datapath id.
    """
    names = [topology.name(v) for v in topology.switches]
    for name in config.southbound.switches:
        if name not in names:
            raise _fail(f"southbound.switches.{name}", "not a switch of the topology")
    return _resolve_backends(config, names)


def configured_switches(config: Config) -> dict[str, SwitchBackend]:
    """In a learned network (no topology): the switches the config names, in the
    order it lists them (`southbound.switches`), with their resolved southbound:
    P4Runtime targets to connect to, and OpenFlow datapaths given a name by their
    datapath id. Positions for the defaults of `switch_backends` are the list's."""
    return _resolve_backends(config, list(config.southbound.switches))


def _resolve_backends(config: Config, names: list[str]) -> dict[str, SwitchBackend]:
    sb = config.southbound
    out: dict[str, SwitchBackend] = {}
    seen: dict[tuple[str, int], str] = {}
    dpids: dict[int, str] = {}
    for n, name in enumerate(names):
        o = sb.switches.get(name, SwitchSouthbound())
        backend = o.backend or sb.backend
        if backend != "p4runtime":
            dpid = o.dpid if o.dpid is not None else n + 1
            other = dpids.setdefault(dpid, name)
            if other != name:
                at = f"southbound.switches.{name if o.dpid is not None else other}.dpid"
                raise _fail(at, f"datapath id {dpid} is also that of switch {name if o.dpid is None else other}"
                            " (by default the n-th switch, from 0, has datapath id n + 1)")
            out[name] = SwitchBackend(name, backend, dpid=dpid)
            continue
        address = o.address
        if address is None:
            port = sb.p4runtime.base_port + n
            if port > 65535:
                raise _fail("southbound.p4runtime.base_port", f"switch {name} would listen on port {port} (> 65535)")
            address = f"{sb.p4runtime.host}:{port}"
        device_id = o.device_id if o.device_id is not None else n + 1
        other = seen.setdefault((address, device_id), name)
        if other != name:
            raise _fail(f"southbound.switches.{name}", f"same address {address} and device id {device_id} as {other}")
        ports = o.ports if o.ports is not None else sb.p4runtime.ports
        out[name] = SwitchBackend(name, backend, address, device_id, ports=ports,
                                  program=o.program or sb.p4runtime.program)
    return out
