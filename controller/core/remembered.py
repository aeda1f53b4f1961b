"""What the wire taught the controller, kept in the store across restarts (and
shared by the instances of a cluster, docs/ha.md).

Two records, so that a restarted controller plans what the switches already hold
and reconciles them instead of rebuilding them:
- a declared topology's *observed wiring*: the port map the last plan was
  translated with (which of its link ends the wire confirmed) and the hosts'
  MACs seen in their packets (key "learned_network", its name since the first
  release). What does not fit the configured topology is dropped whole;
- the *discovered network* (no topology in the config, `core.discovered`).

`Remembered` owns both records: it reads them, checks them against the
topology, and writes them only when they changed. `Wiring` and `Hosts` take
what it restores; the planning loop saves what each plan was made with.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from controller.addressing.hosts import normalise_mac
from controller.addressing.ports import PortMap, check_port_map
from controller.algorithm.model import Topology
from controller.core.discovered import DiscoveredNetwork
from controller.store.base import Store

log = logging.getLogger(__name__)

WIRING_STATE_KEY = "learned_network"
DISCOVERED_STATE_KEY = "discovered_network"


@dataclass(frozen=True)
class ObservedWiring:
    """A declared topology's wiring as the wire showed it: the port map, its ends
    the wire confirmed (`seen`) and the hosts' MACs."""

    ports: dict[tuple[int, int], int]
    seen: dict[tuple[int, int], int]
    host_macs: dict[str, str]


class Remembered:
    """Reads and writes the two records (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._saved_wiring: object = None
        self._saved_inputs: tuple | None = None  # (ports, seen, MACs, topology) of the last save
        self._saved_discovered: object = None

    def forget(self) -> None:
        """Write the next record even if it looks unchanged (another instance may
        have written the store since: docs/ha.md)."""
        self._saved_inputs = None

    # -- a declared topology -------------------------------------------------------------------
    def restore_wiring(self, topology: Topology, ports: PortMap) -> ObservedWiring | None:
        """The wiring learned before a restart, if it fits `topology` (whose default
        port map is `ports`: the same link ends); None otherwise (logged)."""
        raw = self._store.get_state(WIRING_STATE_KEY)
        if raw is None:
            return None
        kind = {n.id: n.kind for n in topology.nodes}
        try:
            restored: dict[tuple[int, int], int] = {}
            seen: dict[tuple[int, int], int] = {}
            for sw, nb, port, confirmed in raw["ports"]:
                key = (topology.index[sw], topology.index[nb])
                if isinstance(port, bool) or not isinstance(port, int):
                    raise TypeError(f"port {port!r}")
                restored[key] = port
                if confirmed:
                    seen[key] = port
            if set(restored) != set(ports):
                raise ValueError("the link ends differ from the topology's")
            check_port_map(topology, restored)
            macs = {}
            for host, mac in raw["host_macs"].items():
                if kind.get(host) != "host":
                    raise ValueError(f"{host!r} is no host")
                macs[host] = normalise_mac(mac)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            log.warning("the stored learned ports and MACs do not fit the topology (%s): starting from the config", e)
            return None
        log.info("restored %d learned link ends and %d host MACs", len(seen), len(macs))
        return ObservedWiring(restored, seen, macs)

    def save_wiring(
        self, ports: PortMap, seen: frozenset[tuple[int, int]], macs: Mapping[str, str], topology: Topology
    ) -> None:
        """Keep the port map (`seen`: its ends confirmed by the wire) and MACs a plan
        was translated with (only when they changed)."""
        if self._saved_inputs is not None:  # the common case: nothing learned since the last plan
            p0, seen0, macs0, topo0 = self._saved_inputs
            if ports is p0 and topology is topo0 and seen == seen0 and macs == macs0:
                return
        names = [n.id for n in topology.nodes]
        value = {  # in node-index order (cheap to sort: 110,592 link ends at k=48, for every plan that learned one)
            "ports": [[names[v], names[nb], p, (v, nb) in seen] for (v, nb), p in sorted(ports.items())],
            "host_macs": dict(sorted(macs.items())),
        }
        if value != self._saved_wiring:
            self._store.put_state(WIRING_STATE_KEY, value)
            self._saved_wiring = value
        self._saved_inputs = (ports, seen, dict(macs), topology)

    # -- a discovered network ------------------------------------------------------------------
    def restore_discovered(self) -> DiscoveredNetwork:
        """The network discovered before a restart; an empty one if there is none."""
        raw = self._store.get_state(DISCOVERED_STATE_KEY)
        if raw is None:
            return DiscoveredNetwork()
        try:
            net = DiscoveredNetwork.from_json(raw)
        except ValueError as e:
            log.warning("the stored learned network cannot be used (%s): learning it again", e)
            return DiscoveredNetwork()
        log.info("restored the learned network: %d switches, %d links, %d hosts",
                 len(net.switches), len(net.links()), len(net.hosts))
        self._saved_discovered = net.to_json()
        return net

    def save_discovered(self, discovered: object) -> None:
        """Keep the discovered network a plan was made on (its JSON), if it changed."""
        if discovered != self._saved_discovered:
            self._store.put_state(DISCOVERED_STATE_KEY, discovered)
            self._saved_discovered = discovered
