"""Which southbound programs each switch, resolved once.

`switch_backends` resolves every switch of a declared topology, `configured_switches`
the switches a config without topology lists (a learned network); `Inventory`
holds the result for one config and answers what the rest of the controller asks
of it: a switch's backend, the OpenFlow datapath ids, the P4Runtime switches, and
whether any switch uses a backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from controller.algorithm.model import Topology
from controller.config.schema import BACKENDS, Config, SwitchBackend, SwitchSouthbound
from controller.config.strict import CONFIG
from controller.config.topology import build_topology

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


@dataclass(frozen=True)
class Inventory:
    """The resolved southbound of a config's switches (`Inventory.of`).

    `switches`: with a declared topology every switch of it, in its order
    (`switch_backends`); in a learned network (`learned`: the config has no
    topology section) the switches the config lists, in its order
    (`configured_switches`). `dpids`: datapath id -> name of the OpenFlow switches
    among them (in a learned network a datapath the config does not name is
    called of:<dpid> instead). `p4runtime`: the P4Runtime switches among them.
    """

    switches: Mapping[str, SwitchBackend]
    learned: bool = False
    default_backend: str = "openflow"  # southbound.backend
    dpids: Mapping[int, str] = field(init=False, repr=False, compare=False)
    p4runtime: Mapping[str, SwitchBackend] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        switches = MappingProxyType(dict(self.switches))
        object.__setattr__(self, "switches", switches)
        dpids = {b.dpid: name for name, b in switches.items() if b.backend == "openflow" and b.dpid is not None}
        object.__setattr__(self, "dpids", MappingProxyType(dpids))
        p4 = {name: b for name, b in switches.items() if b.backend == "p4runtime"}
        object.__setattr__(self, "p4runtime", MappingProxyType(p4))

    @classmethod
    def of(cls, config: Config, topology: Topology | None = None) -> Inventory:
        """The inventory of `config`: of its declared topology (`topology`, built
        from the config when None), or, when the config has no topology section,
        of the switches it lists (a learned topology plays no part: what connects
        unlisted is an OpenFlow datapath). ConfigError as `switch_backends`."""
        if config.discovers:
            switches = configured_switches(config)
        else:
            switches = switch_backends(config, build_topology(config) if topology is None else topology)
        return cls(switches, config.discovers, config.southbound.backend)

    def backend(self, switch: str) -> str:
        """"openflow" or "p4runtime": the southbound that programs `switch`. In a
        learned network a switch the config does not list is an OpenFlow datapath
        (the controller learns no other: it has to be told where P4Runtime targets
        are); with a declared topology a name that is no switch of it is a KeyError."""
        b = self.switches.get(switch)
        if b is not None:
            return b.backend
        if self.learned:
            return "openflow"
        raise KeyError(switch)

    def uses(self, backend: str) -> bool:
        """Whether any switch may be programmed by `backend`: one of `switches`
        uses it, or, for "openflow", the network is learned with the default
        backend openflow (any datapath may connect)."""
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
        if backend == "openflow" and self.learned and self.default_backend == "openflow":
            return True
        return any(b.backend == backend for b in self.switches.values())
