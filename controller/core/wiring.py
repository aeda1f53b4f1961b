"""The wiring: the switches, links and hosts the network is made of, and its ports.

`Wiring` owns the network the planner plans on:
- the topology: the declared one (`config.build_topology`), or, when the config
  declares none, the one discovered on the wire (`core.discovered`: switches,
  LLDP links, located hosts), adopted whenever it changes; its `Network` and
  host table (names, addresses, default MACs);
- the port map (`addressing.ports.default_port_map`, corrected by `learn_port`
  and by hosts' packets), the link ends the wire confirmed, the links seen on
  the wire but absent from the topology (`unexpected_links`); a discovered
  network's switches and hosts that are not connected to its main piece yet.

The rule of the edge: LLDP (`learn_link`, and `learn_port` towards a switch)
never makes a switch link of a port where a host has been seen (a discovered
network's host records; with a declared topology, a port the port map gives to a
host whose packets were seen there: the default port map alone is a guess, which
LLDP corrects) or of a port declared as an edge port (`southbound.switches.NAME.edge_ports`,
or the port a configured host is pinned to, `hosts.NAME.{switch,port}`):
refused, counted as `lldp_edge_port` and logged (`Counters.refused`).

It knows nothing of link state, switch limits, hosts' MACs or jobs (`links`,
`devices`, `hosts`, `jobs`). Every change the planner must see is counted in
`Changes`; the lock is `Changes.lock`, shared by the whole core.
"""

from __future__ import annotations

import logging

from controller.addressing.hosts import HostAddress
from controller.addressing.ports import MAX_PORT, PortMap, check_port_map, check_switch_ports, default_port_map
from controller.algorithm.model import Topology
from controller.algorithm.network import Network
from controller.config import UNLIMITED, Config, host_table
from controller.core.changes import Changes
from controller.core.counters import Counters
from controller.core.discovered import DiscoveredNetwork, DiscoveredTopology

log = logging.getLogger(__name__)

MAX_UNEXPECTED = 1000  # stray hosts, switches and links kept for GET /hosts, /switches, /links (the rest only counted)


class Wiring:
    """The topology, its ports and, without a declared topology, the discovered network.

    `topology` None means the config declares none: the network is discovered."""

    def __init__(self, config: Config, topology: Topology | None, changes: Changes,
                 counters: Counters | None = None) -> None:
        self.config = config
        self.discovers = config.discovers
        self._changes = changes
        self._counters = counters if counters is not None else Counters()
        edge: dict[str, set[int]] = {name: set(sw.edge_ports) for name, sw in config.southbound.switches.items()}
        for hc in config.hosts.values():  # a pinned host's port is an edge port
            if hc.pinned is not None:
                edge.setdefault(hc.pinned[0], set()).add(hc.pinned[1])
        self._edge_ports = {name: frozenset(ports) for name, ports in edge.items() if ports}
        self._lock = changes.lock
        if topology is None:
            if not self.discovers:
                raise ValueError("a topology is needed when the config declares one (config.build_topology)")
            topology = Topology((), ())
        self._set_topology(topology, {} if self.discovers else host_table(config, topology))
        self._ports: PortMap = default_port_map(topology)
        self._seen: dict[tuple[int, int], int] = {}  # link ends confirmed by the wire (LLDP, a host's packet)
        self._unexpected: set[tuple[str, int, str]] = set()
        self.discovered: DiscoveredNetwork | None = None
        if self.discovers:
            self.discovered = DiscoveredNetwork()
            self._adopt()

    def _set_topology(self, topology: Topology, addresses: dict[str, HostAddress]) -> None:
        self.topology = topology
        self.network = Network(topology)
        self.addresses: dict[str, HostAddress] = addresses  # host name -> its address
        self.host_by_ip = {a.ip: name for name, a in addresses.items()}
        self._kind = {n.id: n.kind for n in topology.nodes}
        self.links = frozenset(frozenset((link.a, link.b)) for link in topology.links)

    # -- lookups ------------------------------------------------------------------------------
    def node_kind(self, name: str) -> str | None:
        """"host" or "switch" for a node of the topology, else None."""
        return self._kind.get(name)

    def neighbours(self, node: str) -> list[str]:
        """The neighbours of `node` in the topology (none for a discovered switch
        that is not connected to the planned network yet)."""
        topo = self.topology
        v = topo.index.get(node)
        if v is None:
            if self.discovers:
                return []
            raise KeyError(node)
        return [topo.name(nb) for nb in topo.neighbors[v]]

    def port_map(self) -> PortMap:
        with self._lock:
            return dict(self._ports)

    def topology_and_ports(self) -> tuple[Topology, PortMap]:
        """The current topology and its port map, consistently."""
        with self._lock:
            return self.topology, dict(self._ports)

    def link_at(self, switch: str, port: int) -> str | None:
        """The node at the other end of port `port` of `switch` (by the port map), or None."""
        v = self.topology.index.get(switch)
        if v is None:
            return None
        with self._lock:
            ports = self._ports
        for (sw, nb), p in ports.items():
            if sw == v and p == port:
                return self.topology.name(nb)
        return None

    def host_ports(self, host: str) -> tuple[tuple[str, int], ...]:
        """(switch, port) of every link of `host`, by the port map."""
        topo = self.topology
        h = topo.index[host]
        with self._lock:
            ports = self._ports
        return tuple((topo.name(v), ports[(v, h)]) for v in topo.neighbors[h] if (v, h) in ports)

    def observed_ports(self) -> dict[tuple[str, str], int]:
        """(switch, neighbour) -> port, for every link end the wire confirmed."""
        with self._lock:
            return {(self.topology.name(v), self.topology.name(nb)): p for (v, nb), p in self._seen.items()}

    def unexpected_links(self) -> list[tuple[str, int, str]]:
        """(switch, port, neighbour) seen on the wire but absent from the topology."""
        with self._lock:
            return sorted(self._unexpected)

    def waiting_nodes(self) -> list[str]:
        """Discovered switches and hosts not connected to the planned network yet."""
        with self._lock:
            return sorted(self.discovered.outside()) if self.discovered is not None else []

    def parallel_links(self) -> list[tuple[tuple[str, int], tuple[str, int]]]:
        """Discovered links between switch pairs that already have one (unused by plans)."""
        with self._lock:
            return self.discovered.parallel_links() if self.discovered is not None else []

    def is_link_end(self, switch: str, port: int) -> bool:
        """True if the discovered network knows (switch, port) as a switch-to-switch link end."""
        with self._lock:
            return self.discovered is not None and self.discovered.is_link_end(switch, port)

    def knows_switch(self, switch: str) -> bool:
        """A switch of the topology, or a discovered one (waiting to join the planned piece)."""
        if self._kind.get(switch) == "switch":
            return True
        with self._lock:
            return self.discovered is not None and switch in self.discovered.switches

    # -- what a plan reads ----------------------------------------------------------------------
    def ports_snapshot(self) -> tuple[PortMap, frozenset[tuple[int, int]]]:
        """The port map and its confirmed ends (lock held)."""
        return self._ports, frozenset(self._seen)

    def discovered_json(self) -> object:
        """The discovered network as stored (None with a declared topology; lock held)."""
        return self.discovered.to_json() if self.discovered is not None else None

    # -- facts from the backends ----------------------------------------------------------------
    def _host_end(self, switch: str, port: int) -> str | None:
        """Why (switch, port) can never be a switch link's end, or None (lock held):
        a declared edge port, or a port where a host has been seen."""
        if port in self._edge_ports.get(switch, ()):
            return "declared an edge port"
        if self.discovered is not None:
            host = self.discovered.host_at(switch, port)
            return None if host is None else f"host {host.name} was seen there"
        v = self.topology.index.get(switch)
        for (sw, nb), p in self._seen.items():  # the default map is a guess: only what the wire confirmed
            if sw == v and p == port and self._kind.get(self.topology.name(nb)) == "host":
                return f"host {self.topology.name(nb)} was seen there"
        return None

    def is_host_end(self, switch: str, port: int) -> bool:
        """True if (switch, port) may never be a switch link's end: a declared edge
        port, or a port where a host has been seen (no LLDP probe goes out of it)."""
        with self._lock:
            return self._host_end(switch, port) is not None

    def _refuse_edge(self, ends: tuple[tuple[str, int], ...], peer: str) -> bool:
        """True (and counted, logged) if one of `ends` may not be a switch link's end."""
        with self._lock:
            why = next(((sw, port, w) for sw, port in ends if (w := self._host_end(sw, port)) is not None), None)
        if why is None:
            return False
        sw, port, reason = why
        self._counters.refused("lldp_edge_port", switch=sw, port=port,
                               why=f"an LLDP probe would make it a link to {peer}, but it is {reason}")
        return True

    def learn_port(self, switch: str, port: int, neighbour: str) -> bool:
        """Port `port` of `switch` leads to `neighbour` (seen by LLDP, or a host's
        packet). The port map keeps one port per link end: if the map had given
        `port` to another neighbour, that neighbour takes this link's old port (a
        swap), so the map stays complete and learning converges on the real
        wiring. Returns True if the map changed (a "translation" change: the
        served plan is translated again, nobody moves, unless a capacity taken
        from a port's speed changes with it);
        False if it was known, or if the topology has no such link (logged and
        kept in `unexpected_links`)."""
        v = self.topology.index.get(switch)
        nb = self.topology.index.get(neighbour)
        if v is None or self._kind.get(switch) != "switch":
            raise ValueError(f"unknown switch {switch!r}")
        if nb is None:
            raise ValueError(f"unknown node {neighbour!r}")
        if self._kind.get(neighbour) == "switch" and self._refuse_edge(((switch, port),), neighbour):
            return False
        if not 1 <= port <= MAX_PORT:  # before anything is written: nothing half-learned
            raise ValueError(f"{switch}: invalid port number {port}")
        with self._lock:
            if (v, nb) not in self._ports:
                key = (switch, port, neighbour)
                if key not in self._unexpected and len(self._unexpected) < MAX_UNEXPECTED:
                    self._unexpected.add(key)
                    log.warning("%s port %d leads to %s, a link the topology does not have: ignored", switch, port, neighbour)
                return False
            self._seen[(v, nb)] = port
            old = self._ports[(v, nb)]
            if old == port:
                return False
            ports = dict(self._ports)
            other = next((n for (s, n), p in ports.items() if s == v and p == port), None)
            ports[(v, nb)] = port
            if other is not None:
                ports[(v, other)] = old
                if self._seen.get((v, other)) == port:  # the swapped neighbour's end is a guess again
                    del self._seen[(v, other)]
            check_switch_ports(self.topology, ports, v)  # a swap of v's ports: the others are as they were
            self._ports = ports
            # the planner plans on nodes and links, not ports: the served plan is
            # translated again, unless a link's capacity follows its new port's speed
            # (the planning loop sees the planning topology change and plans in full)
            self._changes.mark(kind="translation")
        log.info("%s port %d leads to %s (was port %d)", switch, port, neighbour, old)
        return True

    def learn_link(self, a: str, port_a: int, b: str, port_b: int) -> bool:
        """LLDP: port `port_a` of switch `a` reaches port `port_b` of switch `b`.
        In a discovered network this adds (or rewires) the link; with a declared
        topology it teaches `a`'s port (`learn_port`). True if anything changed;
        False (counted, logged) if either end is a host's or an edge port."""
        if self._refuse_edge(((a, port_a), (b, port_b)), f"{b} port {port_b}"):
            return False
        if not self.discovers:
            return self.learn_port(a, port_a, b)
        with self._lock:
            assert self.discovered is not None
            if not self.discovered.add_link(a, port_a, b, port_b):
                return False
            self._discovered_changed()
        log.info("link %s port %d - %s port %d learned", a, port_a, b, port_b)
        return True

    def add_switch(self, switch: str) -> bool:
        """A discovered network: a switch seen for the first time joins it. True if new."""
        with self._lock:
            assert self.discovered is not None
            if not self.discovered.add_switch(switch):
                return False
            self._discovered_changed()
        log.info("switch %s joined the learned network", switch)
        return True

    def locate_host(self, name: str, ip: str, mac: str, switch: str, port: int) -> bool:
        """A discovered network: the host `name` (`ip`, `mac`) is at (switch, port).
        True if the network changed; ValueError if that cannot be a host's place."""
        with self._lock:
            assert self.discovered is not None
            if not self.discovered.locate_host(name, ip, mac, switch, port):
                return False
            self._discovered_changed()
        return True

    def confirmed_host_port(self, switch: str, host: str) -> int | None:
        """A declared topology: the port of `switch` where `host`'s packets were seen, or None."""
        v, h = self.topology.index.get(switch), self.topology.index.get(host)
        with self._lock:
            return self._seen.get((v, h)) if v is not None and h is not None else None

    def confirmed_host_at(self, switch: str, port: int) -> str | None:
        """A declared topology: the host whose packets were seen at (switch, port), or None."""
        v = self.topology.index.get(switch)
        with self._lock:
            for (sw, nb), p in self._seen.items():
                if sw == v and p == port and self._kind.get(self.topology.name(nb)) == "host":
                    return self.topology.name(nb)
        return None

    def forget_host(self, ip: str) -> bool:
        """The host with address `ip` is gone: a discovered network forgets it (a
        re-plan); a declared topology forgets only where its packets were seen
        (its port is a guess again). True if anything changed."""
        with self._lock:
            if self.discovered is not None:
                if not self.discovered.forget_host(ip):
                    return False
                self._discovered_changed()
                return True
            host = self.host_by_ip.get(ip)
            h = self.topology.index.get(host) if host is not None else None
            ends = [k for k in self._seen if k[1] == h]
            for k in ends:
                del self._seen[k]
            return bool(ends)

    # -- the discovered network ---------------------------------------------------------------
    def _discovered_topology(self, net: DiscoveredNetwork) -> DiscoveredTopology:
        d = self.config.discovery

        def budget(value: object) -> int | None:
            return None if value is None or value == UNLIMITED else int(value)  # type: ignore[arg-type]

        limits = (budget(d.group_capacity), budget(d.entry_capacity))
        # the default capacity; the ports' reported speeds replace it (`links.capacity`)
        return net.build(lambda sw, port: d.link_capacity, {s: limits for s in net.switches})

    def _adopt(self) -> None:
        """Plan on the discovered network (lock held, or in __init__): its topology,
        host table and port map."""
        assert self.discovered is not None
        dt = self._discovered_topology(self.discovered)
        topo = dt.topology
        idx = topo.index
        self._set_topology(topo, dict(dt.addresses))
        self._ports = {(idx[a], idx[b]): p for (a, b), p in dt.ports.items()}
        self._seen = dict(self._ports)

    def _discovered_changed(self) -> None:
        """The discovered network changed (lock held): plan on it."""
        self._adopt()
        self._changes.mark()

    # -- a restart, or another instance's writes (docs/ha.md) ----------------------------------
    def use_discovered(self, net: DiscoveredNetwork) -> None:
        """Plan on `net`, the network discovered before a restart (or by another
        instance), so that the first plan installs what the switches already hold."""
        with self._lock:
            self.discovered = net
            self._adopt()
            self._changes.mark()

    def use_observed(self, ports: PortMap, seen: dict[tuple[int, int], int]) -> None:
        """A declared topology: the port map (and its confirmed ends) the wire
        showed before a restart (or to another instance)."""
        with self._lock:
            check_port_map(self.topology, ports)
            self._ports, self._seen = dict(ports), dict(seen)
            self._changes.mark()
