"""The network view: everything the controller knows about the network (docs/architecture.md).

`NetworkView` owns the network the planner plans on and the facts the
southbounds report about it; it knows nothing of jobs, plans' making or HTTP:

- the topology: the declared one (`config.build_topology`), or, when the config
  declares none, the one learned from the wire (`LearnedNetwork`: switches,
  LLDP links, located hosts), adopted whenever it changes; its `Network` and
  host table (names, addresses, default MACs);
- the wiring: the port map (`default_port_map`, corrected by `learn_port` /
  `learn_host`), the link ends learned from the wire, the links seen on the wire
  but absent from the topology (`unexpected_links`) and the declared ones LLDP
  never reports (`missing_links`); the host MACs learned from their packets;
  both kept in the store so that a restarted controller plans what the switches
  already hold;
- link state: the links that are down and the links held down after coming up
  (the hold-down of a flapping link, see controller/service.py "Hold-down");
- switch state: connected, and (P4Runtime) another client primary;
- budgets and capacities: what switches report about their limits
  (`report_limits`), the budgets learned from table-full errors (`table_full`),
  the switches that refused the packet-in meter, each link's capacity (config or
  port speeds) and, from all of these, the planning topology
  (`planning_topology`: without the down links, with the effective budgets).

Every change the planner must see is reported through the `mark_change`
callback given by the owner (the `ControllerService`, which keeps the change
accounting and the debounce). The view shares the owner's lock (one RLock for
the whole service); methods whose name says "lock held" expect it taken.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.algorithm.model import Link, Node, Plan, Topology
from controller.algorithm.network import Network
from controller.config import UNLIMITED, Config, configured_switches, explicit_capacities, host_table, switch_backends
from controller.core.discovered import LearnedNetwork, LearnedTopology
from controller.addressing.hosts import HostAddress, normalise_mac
from controller.southbound.openflow.state import OFPM_CONTROLLER, SwitchState
from controller.addressing.ports import PortMap, check_port_map, default_port_map
from controller.store.sqlite import JobStore

log = logging.getLogger(__name__)

LEARNED_STATE_KEY = "learned_network"
DISCOVERED_STATE_KEY = "discovered_network"
MAX_UNEXPECTED = 1000  # stray hosts and switches kept for GET /hosts and /switches (the rest only counted)
MISSING_LINK_GRACE_S = 15.0  # LLDP speaks about every second per port: a link unseen this long is missing


class HostsCutOff(ValueError):
    """The links that are down leave some host unable to reach another: no plan."""


@dataclass(frozen=True)
class SwitchStatus:
    id: str
    connected: bool
    groups_used: int
    group_capacity: int | None
    entries_used: int
    entry_capacity: int | None
    flows: int
    meters: int
    learned_group_capacity: int | None = None
    learned_entry_capacity: int | None = None
    backend: str = "openflow"
    other_primary: bool = False  # P4Runtime: reachable, but another client is primary (not ours to program)
    # where the budgets come from: `group_capacity`/`entry_capacity` above are the
    # effective ones, min(configured, reported, learned); the source is the one
    # that set it ("config", "switch", "p4info", "table_full"; None: unlimited)
    configured_group_capacity: int | None = None
    configured_entry_capacity: int | None = None
    reported_group_capacity: int | None = None
    reported_entry_capacity: int | None = None
    group_capacity_source: str | None = None
    entry_capacity_source: str | None = None
    reported_port_speeds: Mapping[int, int] = field(default_factory=dict)  # port -> bit/s, as reported


@dataclass(frozen=True)
class SwitchLimits:
    """What a switch said about its own limits (`report_limits`); None: not said.

    `max_groups`: the groups of type ALL it holds (OpenFlow: OFPMP_GROUP_FEATURES);
    `max_entries`: the entries of the table holding the multicast flows (OpenFlow:
    OFPMP_TABLE_FEATURES of TABLE_FORWARD); `port_speeds`: port -> bit/s (OpenFlow:
    OFPMP_PORT_DESC curr_speed, else max_speed; 0: the port did not say);
    `source`: "switch" (OpenFlow) or "p4info" (a P4 program's sizes)."""

    max_groups: int | None = None
    max_entries: int | None = None
    port_speeds: Mapping[int, int] = field(default_factory=dict)
    source: str = "switch"


@dataclass(frozen=True)
class NodeSource:
    """Where a node of the planned topology comes from: `source` is "config" (a
    declared topology), "openflow" / "p4runtime" (a learned switch, from its
    connection) or "arp_ipv4" (a learned host, from its packets); for a switch,
    where its effective budgets come from ("config", "switch", "p4info",
    "table_full"; None: unlimited)."""

    id: str
    source: str
    group_capacity_source: str | None = None
    entry_capacity_source: str | None = None


@dataclass(frozen=True)
class LinkSource:
    """Where a link of the planned topology comes from: `source` is "config",
    "lldp" (a learned switch-to-switch link) or "arp_ipv4" (a learned host's
    link); each switch end's port and where it comes from ("lldp", "arp_ipv4", or
    "default": the declared topology's default port map, not confirmed by the
    wire; a host end has none); the capacity's source ("config" or "port")."""

    a: str
    b: str
    source: str
    a_port: int | None
    a_port_source: str | None
    b_port: int | None
    b_port_source: str | None
    capacity_source: str


@dataclass(frozen=True)
class UnexpectedHost:
    """A host seen on the wire that the declared topology does not place there:
    `reason` is "unknown_address" (no configured host has `ip`) or "elsewhere"
    (a configured host, seen at a switch the topology does not attach it to).
    Never used by plans."""

    ip: str
    mac: str
    switch: str
    port: int
    reason: str


@dataclass(frozen=True)
class ArpAnswer:
    """How the controller answers an ARP request for a known host: with `mac`, or,
    when the MAC is neither learned nor declared in the config, by passing the
    request on to the host itself at `ask` ((switch, port) where it is attached),
    whose reply teaches its MAC and is delivered to the asker (`host_ports`)."""

    mac: str | None
    ask: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class NetworkSnapshot:
    """What one re-plan reads from the network view, taken at once under the lock
    (`NetworkView.snapshot`), and written back after it (`NetworkView.save`)."""

    topology: Topology
    hosts: Mapping[str, HostAddress]
    ports: PortMap
    host_macs: Mapping[str, str]
    seen: frozenset[tuple[int, int]]  # link ends of `ports` learned from the wire
    down: frozenset[frozenset[str]]  # down or held down: out of the plan
    learned: tuple[Mapping[str, int], Mapping[str, int]]  # table-full budgets: groups, entries
    reported: Mapping[str, SwitchLimits]
    no_meter: frozenset[str]
    discovered: Any  # the learned network as JSON (None with a declared topology)


class NetworkView:
    """The topology, wiring, hosts, link and switch state, and budgets (see the module docstring).

    `lock` is the owner's (re-entrant) lock; `mark_change(at=None)` counts a
    change the planner must see (lock held) and returns its number; `wake()`
    wakes the re-planning worker (lock held: a hold-down's end is a due time);
    `current_plan()` gives (the current plan, its generation) (lock held), read
    by `table_full`. The store keeps the learned ports, MACs and network.
    """

    def __init__(
        self,
        config: Config,
        topology: Topology | None,
        clock: Callable[[], float],
        *,
        lock: Any,
        store: JobStore,
        mark_change: Callable[..., int],
        wake: Callable[[], None],
        current_plan: Callable[[], tuple[Plan | None, int]],
    ) -> None:
        self.config = config
        self.discovers = config.discovers
        self._lock = lock
        self._store = store
        self._mark_change = mark_change
        self._wake = wake
        self._current_plan = current_plan
        self._clock = clock
        self._settings = config.planner
        # the learned network (no topology in the config): its facts, and the names
        # the config gives to host addresses
        self._learned_net: LearnedNetwork | None = None
        self._host_names = {hc.ip: name for name, hc in config.hosts.items()} if self.discovers else {}
        self._saved_discovered: object = None
        if topology is None:
            if not self.discovers:
                raise ValueError("a topology is needed when the config declares one (config.build_topology)")
            topology = Topology((), ())
        self.topology = topology
        self.network = Network(topology)
        self.hosts: dict[str, HostAddress] = {} if self.discovers else host_table(config, topology)
        self._host_by_ip = {addr.ip: name for name, addr in self.hosts.items()}
        self._kind = {n.id: n.kind for n in topology.nodes}

        self._ports: PortMap = default_port_map(topology)
        self._learned_ports: dict[tuple[int, int], int] = {}  # link ends seen by LLDP or ARP
        self._unexpected: set[tuple[str, int, str]] = set()
        self._strays: set[tuple] = set()  # stray packets already logged
        self._unexpected_hosts: dict[str, UnexpectedHost] = {}  # by address (declared topology)
        self._unexpected_switches: set[str] = set()  # switches that connected but are not declared
        self._host_macs: dict[str, str] = {}
        if not self.discovers:
            self._restore_learned()
        self._saved_learned: object = None
        self._saved_inputs: tuple | None = None  # (ports, seen, MACs, topology) of the last save
        self._connected: set[str] = set()
        self._connected_since: dict[str, float] = {}  # switch -> when it (last) connected
        self._missing_logged: set[tuple[str, str]] = set()
        self._other_primary: set[str] = set()  # P4Runtime switches another client is primary for
        self.p4runtime_not_primary = 0
        self._links = frozenset(frozenset((link.a, link.b)) for link in topology.links)
        self._down: set[frozenset[str]] = set()  # links that are down, by node-name pair
        # hold-down (see controller/service.py): link -> when its hold-down ends; its
        # current hold-down (grows while it flaps); when it last rejoined the plan
        self._held: dict[frozenset[str], float] = {}
        self._hold: dict[frozenset[str], float] = {}
        self._rejoined: dict[frozenset[str], float] = {}
        self.flaps = 0
        self._refused_in_plan: dict[tuple[str, str], tuple[int, frozenset[str]]] = {}  # table_full: per plan
        self._no_packet_in_meter: set[str] = set()  # switches that refused OFPM_CONTROLLER
        self.table_full_errors = 0
        # a learned network: the switches the config names (P4Runtime targets, named datapaths)
        self._configured = {name: b.backend for name, b in configured_switches(config).items()} if self.discovers else {}
        self._backends = (
            dict(self._configured) if self.discovers
            else {name: b.backend for name, b in switch_backends(config, topology).items()}
        )
        # budgets learned from "table full" errors (switch -> budget); only ever lowered
        self._learned_groups: dict[str, int] = {}
        self._learned_entries: dict[str, int] = {}
        # what each switch reported about its limits (report_limits)
        self._reported: dict[str, SwitchLimits] = {}
        # links whose capacity the config states (the others take their switch ports' speeds)
        self._explicit = explicit_capacities(config, topology)

    # -- lookups ----------------------------------------------------------------------------

    def node_kind(self, name: str) -> str | None:
        """"host" or "switch" for a node of the topology, else None."""
        return self._kind.get(name)

    def host_name(self, ip: str) -> str:
        """The name of the host with IPv4 address `ip` in a learned network: the
        configured one, else the address itself."""
        return self._host_names.get(ip, ip)

    def host_by_ip(self, ip: str) -> str | None:
        return self._host_by_ip.get(str(ip))

    def backend(self, switch: str) -> str:
        """"openflow" or "p4runtime": the southbound that programs `switch` (config
        `southbound`; in a learned network a switch the config does not list is an
        OpenFlow datapath)."""
        if self.discovers:
            return self._configured.get(switch, "openflow")
        return self._backends[switch]

    def _is_switch(self, switch: str) -> bool:
        """A switch of the topology, or one of the learned network (waiting to join
        the planned piece), or one the config lists for it."""
        if self._kind.get(switch) == "switch":
            return True
        return self.discovers and (
            switch in self._configured or (self._learned_net is not None and switch in self._learned_net.switches))

    # -- the learned network (no topology in the config) -------------------------------------

    def restore_discovered(self) -> None:
        """Plan on the network learned before a restart (a learned network only), so
        that the first plan after it installs what the switches already hold."""
        self._learned_net = self._restore_discovered()
        self._adopt(self._learned_net)

    def _restore_discovered(self) -> LearnedNetwork:
        """The network learned before a restart; an empty one if there is none."""
        raw = self._store.get_state(DISCOVERED_STATE_KEY)
        if raw is None:
            return LearnedNetwork()
        try:
            net = LearnedNetwork.from_json(raw)
        except ValueError as e:
            log.warning("the stored learned network cannot be used (%s): learning it again", e)
            return LearnedNetwork()
        log.info("restored the learned network: %d switches, %d links, %d hosts",
                 len(net.switches), len(net.links()), len(net.hosts))
        self._saved_discovered = net.to_json()
        return net

    def _learned_topology(self, net: LearnedNetwork) -> LearnedTopology:
        d = self.config.discovery

        def budget(value: object) -> int | None:
            return None if value is None or value == UNLIMITED else int(value)  # type: ignore[arg-type]

        limits = (budget(d.group_capacity), budget(d.entry_capacity))
        # the default capacity; the ports' reported speeds replace it (`_link_capacity`)
        return net.build(lambda sw, port: d.link_capacity, {s: limits for s in net.switches})

    def _adopt(self, net: LearnedNetwork) -> None:
        """Make the learned network the one planned on (lock held, or in __init__):
        the topology, its host table, port map and link set; a re-plan follows."""
        lt = self._learned_topology(net)
        topo = lt.topology
        idx = topo.index
        self.topology = topo
        self.network = Network(topo)
        self.hosts = dict(lt.addresses)
        self._host_by_ip = {a.ip: name for name, a in self.hosts.items()}
        self._kind = {n.id: n.kind for n in topo.nodes}
        self._ports = {(idx[a], idx[b]): p for (a, b), p in lt.ports.items()}
        self._learned_ports = dict(self._ports)
        self._links = frozenset(frozenset((link.a, link.b)) for link in topo.links)
        self._down = {k for k in self._down if k in self._links}
        self._backends = {topo.name(v): self._configured.get(topo.name(v), "openflow") for v in topo.switches}
        self._host_macs = {name: a.mac for name, a in self.hosts.items()}

    def _learned_changed(self) -> None:
        """The learned network changed (lock held): plan on it."""
        assert self._learned_net is not None
        self._adopt(self._learned_net)
        self._mark_change()

    def waiting_nodes(self) -> list[str]:
        """Learned switches and hosts not connected to the planned network yet."""
        with self._lock:
            return sorted(self._learned_net.outside()) if self._learned_net is not None else []

    def parallel_links(self) -> list[tuple[tuple[str, int], tuple[str, int]]]:
        """Learned links between switch pairs that already have one (unused by plans)."""
        with self._lock:
            return self._learned_net.parallel_links() if self._learned_net is not None else []

    def edge_ports(self, switch: str) -> list[int]:
        """Ports of `switch` (as its port description lists them) that lead to no
        other switch, as far as the learned network knows."""
        with self._lock:
            rep = self._reported.get(switch)
            ports = sorted(rep.port_speeds) if rep is not None else []
            net = self._learned_net
            return [p for p in ports if net is None or not net.is_link_end(switch, p)]

    # -- the port map and host MACs kept over a restart ----------------------------------------

    def reload(self) -> None:
        """Take the learned network, or the port map and MACs, from the store again
        (written by another controller instance: docs/ha.md), then re-plan."""
        with self._lock:
            if self.discovers:
                self.restore_discovered()
            else:
                self._restore_learned()
            self._saved_inputs = None
            self._mark_change()

    def _restore_learned(self) -> None:
        """The port map and host MACs learned before a restart, so that the first plan
        after it installs what the switches already hold (LLDP, ARP and IPv4 go on
        correcting them). What does not fit the configured topology is dropped whole."""
        raw = self._store.get_state(LEARNED_STATE_KEY)
        if raw is None:
            return
        topo = self.topology
        try:
            ports: dict[tuple[int, int], int] = {}
            learned: dict[tuple[int, int], int] = {}
            for sw, nb, port, seen in raw["ports"]:
                key = (topo.index[sw], topo.index[nb])
                if isinstance(port, bool) or not isinstance(port, int):
                    raise TypeError(f"port {port!r}")
                ports[key] = port
                if seen:
                    learned[key] = port
            if set(ports) != set(self._ports):
                raise ValueError("the link ends differ from the topology's")
            check_port_map(topo, ports)
            macs = {}
            for host, mac in raw["host_macs"].items():
                if self._kind.get(host) != "host":
                    raise ValueError(f"{host!r} is no host")
                macs[host] = normalise_mac(mac)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            log.warning("the stored learned ports and MACs do not fit the topology (%s): starting from the config", e)
            return
        self._ports, self._learned_ports, self._host_macs = ports, learned, macs
        log.info("restored %d learned link ends and %d host MACs", len(learned), len(macs))

    def _save_learned(
        self, ports: PortMap, seen: frozenset[tuple[int, int]], macs: Mapping[str, str], topo: Topology
    ) -> None:
        """Keep the port map (`seen`: its ends learned from the wire) and MACs a plan
        was translated with (only when they changed)."""
        if self._saved_inputs is not None:  # the common case: nothing learned since the last plan
            p0, seen0, macs0, topo0 = self._saved_inputs
            if ports is p0 and topo is topo0 and seen == seen0 and macs == macs0:
                return
        name = topo.name
        value = {
            "ports": sorted([name(v), name(nb), p, (v, nb) in seen] for (v, nb), p in ports.items()),
            "host_macs": dict(sorted(macs.items())),
        }
        if value == self._saved_learned:
            self._saved_inputs = (ports, seen, dict(macs), topo)
            return
        self._store.put_state(LEARNED_STATE_KEY, value)
        self._saved_learned = value
        self._saved_inputs = (ports, seen, dict(macs), topo)

    # -- what a re-plan reads and writes back -------------------------------------------------

    def snapshot(self, now: float) -> NetworkSnapshot:
        """Everything a re-plan reads (lock held), after releasing the links whose
        hold-down has ended by `now`."""
        self.release_holds(now)
        return NetworkSnapshot(
            topology=self.topology,
            hosts=self.hosts,
            ports=self._ports,
            host_macs=dict(self._host_macs),
            seen=frozenset(self._learned_ports),
            down=frozenset(self._down) | frozenset(self._held),  # held down: out of the plan too
            learned=(dict(self._learned_groups), dict(self._learned_entries)),
            reported=dict(self._reported),
            no_meter=frozenset(self._no_packet_in_meter),
            discovered=self._learned_net.to_json() if self._learned_net is not None else None,
        )

    def save(self, snap: NetworkSnapshot) -> None:
        """Keep what a plan was made with, for a restart: the learned network, or the
        port map and host MACs of a declared topology (only when they changed)."""
        if snap.discovered is not None:
            if snap.discovered != self._saved_discovered:
                self._store.put_state(DISCOVERED_STATE_KEY, snap.discovered)
                self._saved_discovered = snap.discovered
        else:
            self._save_learned(snap.ports, snap.seen, snap.host_macs, snap.topology)

    # -- facts from the southbounds -----------------------------------------------------------

    def learn_port(self, switch: str, port: int, neighbour: str) -> bool:
        """Port `port` of `switch` leads to `neighbour` (seen by LLDP, or a host's
        ARP). The port map keeps one port per link end: if the map had given `port`
        to another neighbour, that neighbour takes this link's old port (a swap),
        so the map stays complete and learning converges on the real wiring.
        Returns True if the map changed (a re-plan follows); False if it was known,
        or if the topology has no such link (logged and kept in `unexpected_links`)."""
        v = self.topology.index.get(switch)
        nb = self.topology.index.get(neighbour)
        if v is None or self._kind.get(switch) != "switch":
            raise ValueError(f"unknown switch {switch!r}")
        if nb is None:
            raise ValueError(f"unknown node {neighbour!r}")
        with self._lock:
            if (v, nb) not in self._ports:
                key = (switch, port, neighbour)
                if key not in self._unexpected:
                    self._unexpected.add(key)
                    log.warning("%s port %d leads to %s, a link the topology does not have: ignored", switch, port, neighbour)
                return False
            self._learned_ports[(v, nb)] = port
            old = self._ports[(v, nb)]
            if old == port:
                return False
            ports = dict(self._ports)
            other = next((n for (s, n), p in ports.items() if s == v and p == port), None)
            ports[(v, nb)] = port
            if other is not None:
                ports[(v, other)] = old
            check_port_map(self.topology, ports)
            self._ports = ports
            self._mark_change(translation_only=True)
        log.info("%s port %d leads to %s (was port %d)", switch, port, neighbour, old)
        return True

    def learn_link(self, a: str, port_a: int, b: str, port_b: int) -> bool:
        """LLDP: port `port_a` of switch `a` reaches port `port_b` of switch `b`.
        In a learned network this adds (or rewires) the link; with a declared
        topology it teaches `a`'s port (`learn_port`). True if anything changed."""
        if not self.discovers:
            return self.learn_port(a, port_a, b)
        with self._lock:
            assert self._learned_net is not None
            if not self._learned_net.add_link(a, port_a, b, port_b):
                return False
            self._learned_changed()
        log.info("link %s port %d - %s port %d learned", a, port_a, b, port_b)
        return True

    def discovered_links(self) -> dict[tuple[str, str], int]:
        """(switch, neighbour) -> port, for every link end learned so far."""
        with self._lock:
            return {(self.topology.name(v), self.topology.name(nb)): p for (v, nb), p in self._learned_ports.items()}

    def missing_links(self, grace_s: float = MISSING_LINK_GRACE_S) -> list[tuple[str, str]]:
        """Declared links between two switches that have both been
        connected for `grace_s` seconds, and that LLDP has not reported from either
        end: the wire differs from the config (a cable missing or plugged
        elsewhere). Each is logged once. None in a learned network."""
        if self.discovers:
            return []
        with self._lock:
            now = self._clock()
            seen = set(self._learned_ports)
            topo = self.topology
            out = []
            for link in topo.links:
                a, b = topo.index[link.a], topo.index[link.b]
                if not (topo.is_switch(a) and topo.is_switch(b)):
                    continue
                if len({self._backends.get(x) for x in (link.a, link.b)}) > 1:
                    continue  # each backend reads its own LLDP probes only: such a link is never seen
                since = [self._connected_since.get(x) for x in (link.a, link.b)]
                if any(t is None or now - t < grace_s for t in since):
                    continue
                if (a, b) in seen or (b, a) in seen:
                    continue
                pair = tuple(sorted((link.a, link.b)))
                out.append(pair)
                if pair not in self._missing_logged:
                    self._missing_logged.add(pair)
                    log.warning("link %s - %s of the topology not seen by LLDP from either end %.0f s after both "
                                "switches connected: check its cabling (GET /links: missing)", *pair, grace_s)
            return sorted(out)

    def unexpected_links(self) -> list[tuple[str, int, str]]:
        """(switch, port, neighbour) seen on the wire but absent from the topology."""
        with self._lock:
            return sorted(self._unexpected)

    def port_map(self) -> PortMap:
        with self._lock:
            return dict(self._ports)

    def fact_sources(self) -> tuple[list[NodeSource], list[LinkSource]]:
        """Where every node and link of the planned topology comes from (GET /topology?sources=true)."""
        with self._lock:
            topo, ports, seen = self.topology, dict(self._ports), set(self._learned_ports)
            reported = dict(self._reported)
            groups, entries = dict(self._learned_groups), dict(self._learned_entries)
            backends = dict(self._backends)
        nodes = []
        for node in topo.nodes:
            if node.kind == "host":
                nodes.append(NodeSource(node.id, "arp_ipv4" if self.discovers else "config"))
                continue
            (_, g_src), (_, f_src) = self._budgets(node, reported.get(node.id), groups, entries)
            source = backends.get(node.id, "openflow") if self.discovers else "config"
            nodes.append(NodeSource(node.id, source, g_src, f_src))
        links = []
        for link in topo.links:
            a, b = topo.index[link.a], topo.index[link.b]
            host_link = not (topo.is_switch(a) and topo.is_switch(b))
            learned_kind = "arp_ipv4" if host_link else "lldp"
            ends = []
            for x, y in ((a, b), (b, a)):
                if not topo.is_switch(x):
                    ends += [None, None]
                    continue
                ends += [ports.get((x, y)), learned_kind if (x, y) in seen else "default"]
            _, cap_src = self._link_capacity(link, ports, reported, topo)
            links.append(LinkSource(link.a, link.b, learned_kind if self.discovers else "config", *ends, cap_src))
        return nodes, links

    def topology_and_ports(self) -> tuple[Topology, PortMap]:
        """The current topology and its port map, consistently."""
        with self._lock:
            return self.topology, dict(self._ports)

    def host_mac(self, host: str) -> str:
        """The host's MAC: learned from its packets, else configured (or default)."""
        with self._lock:
            return self._host_macs.get(host) or self.hosts[host].mac

    def host_ports(self, host: str) -> tuple[tuple[str, int], ...]:
        """(switch, port) of every link of `host`, by the port map."""
        h = self.topology.index[host]
        with self._lock:
            ports = self._ports
        return tuple((self.topology.name(v), ports[(v, h)]) for v in self.topology.neighbors[h] if (v, h) in ports)

    def arp_answer(self, host: str) -> ArpAnswer:
        """How to answer an ARP request for `host` (see `ArpAnswer`). A default MAC
        (the n-th host's 00:00:00:00:00:nn) is a guess, so it is never given out: an
        asker that got a wrong MAC would keep it until it asks again, and a silent
        host would never be reached."""
        with self._lock:
            learned = self._host_macs.get(host)
        if learned is not None:
            return ArpAnswer(learned)
        declared = self.config.hosts.get(host)
        if declared is not None and declared.mac is not None:
            return ArpAnswer(self.hosts[host].mac)
        return ArpAnswer(None, self.host_ports(host))

    def learn_host(self, ip: str, mac: str, switch: str, port: int) -> str | None:
        """A packet from IPv4 `ip` / MAC `mac` entered `switch` on `port` (an ARP
        packet-in, or a copy of IPv4 whose source the switch did not know). If `ip` is a known host attached to `switch`, its port and MAC
        are learned (a re-plan follows a change) and its name is returned; an
        unknown address or a host at an unexpected switch is logged once, and
        None is returned (addresses come from the config: see docs/controller.md)."""
        if self.discovers:
            return self._locate_host(str(ip), mac, switch, port)
        host = self._host_by_ip.get(str(ip))
        if host is None:
            self._unexpected_host(UnexpectedHost(str(ip), mac, switch, port, "unknown_address"))
            self._note_stray(("unknown-ip", str(ip), switch), "%s port %d: packet from unknown address %s (not a configured host)", switch, port, ip)
            return None
        attached = self.switch_links(host)
        if switch not in attached:
            self._unexpected_host(UnexpectedHost(str(ip), mac, switch, port, "elsewhere"))
            self._note_stray(("moved", host, switch), "host %s (%s) seen at %s port %d, but the topology attaches it to %s", host, ip, switch, port, ", ".join(attached))
            return None
        with self._lock:
            self._unexpected_hosts.pop(str(ip), None)  # where the topology says, now
        self.learn_port(switch, port, host)
        self.set_host_mac(host, mac)
        return host

    def _locate_host(self, ip: str, mac: str, switch: str, port: int) -> str | None:
        """`learn_host` in a learned network: the host is where its packet came in."""
        name = self.host_name(ip)
        with self._lock:
            assert self._learned_net is not None
            try:
                moved = self._learned_net.hosts.get(ip)
                changed = self._learned_net.locate_host(name, ip, mac, switch, port)
            except ValueError as e:
                self._note_stray(("not-a-host", ip, switch, port), "%s port %d: packet from %s not taken as a host: %s",
                                 switch, port, ip, e)
                return None
            if changed:
                self._learned_changed()
        if changed:
            if moved is not None and (moved.switch, moved.port) != (switch, port):
                log.info("host %s (%s) moved from %s port %d to %s port %d", name, ip, moved.switch, moved.port, switch, port)
            else:
                log.info("host %s (%s, %s) at %s port %d", name, ip, mac, switch, port)
        return name

    def _unexpected_host(self, stray: UnexpectedHost) -> None:
        with self._lock:
            if stray.ip in self._unexpected_hosts or len(self._unexpected_hosts) < MAX_UNEXPECTED:
                self._unexpected_hosts[stray.ip] = stray

    def unexpected_hosts(self) -> list[UnexpectedHost]:
        """Hosts seen where the declared topology has none (never in a learned network)."""
        with self._lock:
            return sorted(self._unexpected_hosts.values(), key=lambda h: h.ip)

    def unexpected_switch(self, name: str) -> None:
        """A switch connected that the declared topology does not have (an
        OpenFlow datapath id no declared switch is given): logged once, listed,
        never programmed."""
        with self._lock:
            if name in self._unexpected_switches or len(self._unexpected_switches) >= MAX_UNEXPECTED:
                return
            self._unexpected_switches.add(name)
        log.warning("switch %s connected, but the topology has no switch with its id (southbound.switches.NAME.dpid, "
                    "else switch index + 1): ignored (GET /switches: unexpected)", name)

    def unexpected_switches(self) -> list[str]:
        with self._lock:
            return sorted(self._unexpected_switches)

    def _note_stray(self, key: tuple, message: str, *args: object) -> None:
        with self._lock:
            if key in self._strays:
                return
            self._strays.add(key)
        log.warning(message, *args)

    def set_host_mac(self, host: str, mac: str) -> None:
        """A learned MAC for a host (used in the rewrites of unicast branches)."""
        if self._kind.get(host) != "host":
            raise ValueError(f"unknown host {host!r}")
        mac = normalise_mac(mac)
        with self._lock:
            if self._host_macs.get(host) != mac:
                self._host_macs[host] = mac
                self._mark_change(translation_only=True)

    # -- switch state --------------------------------------------------------------------------

    def switch_connected(self, switch: str) -> None:
        """`switch` is connected (and can be programmed). In a learned network a
        switch seen for the first time joins it."""
        if self.discovers:
            with self._lock:
                assert self._learned_net is not None
                if self._learned_net.add_switch(switch):
                    self._learned_changed()
                    log.info("switch %s joined the learned network", switch)
        elif self._kind.get(switch) != "switch":
            raise ValueError(f"unknown switch {switch!r}")
        with self._lock:
            if switch not in self._connected:
                self._connected_since[switch] = self._clock()
            self._connected.add(switch)
            self._other_primary.discard(switch)

    def switch_disconnected(self, switch: str) -> None:
        with self._lock:
            self._connected.discard(switch)
            self._connected_since.pop(switch, None)
            self._other_primary.discard(switch)

    def switch_not_primary(self, switch: str, count: bool = True) -> None:
        """P4Runtime: the switch answers, but another client is primary for it, so
        this controller does not program it: shown as not connected, with
        `other_primary` (GET /switches, /metrics); `count` adds one to
        `p4runtime_not_primary`. Until `switch_connected` or `switch_disconnected`."""
        if not self._is_switch(switch):
            raise ValueError(f"unknown switch {switch!r}")
        with self._lock:
            self._connected.discard(switch)
            self._other_primary.add(switch)
            if count:
                self.p4runtime_not_primary += 1

    def packet_in_meter_refused(self, switch: str) -> None:
        """`switch` refused its packet-in meter (OFPM_CONTROLLER; some OpenFlow
        switches have no such meter): it is left out of that switch's desired state
        from the next plan on, so that the rest of the switch converges; what the
        switch sends to the controller is then not capped. Until restart."""
        if not self._is_switch(switch):
            raise ValueError(f"unknown switch {switch!r}")
        with self._lock:
            if switch in self._no_packet_in_meter:
                return
            self._no_packet_in_meter.add(switch)
            self._mark_change(translation_only=True)
        log.warning("switch %s refused the packet-in meter: what it sends to the controller is not capped", switch)

    # -- link state and hold-down ------------------------------------------------------------------

    def _link_key(self, a: str, b: str) -> frozenset[str]:
        key = frozenset((a, b))
        if key not in self._links:
            raise ValueError(f"no link between {a!r} and {b!r}")
        return key

    def link_down(self, a: str, b: str) -> bool:
        """The link between nodes `a` and `b` is down: plan without it (a debounced
        re-plan; none if it was held down, so not in the plan anyway). True if this
        changed anything."""
        key = self._link_key(a, b)
        with self._lock:
            if key in self._down:
                return False
            now = self._clock()
            held = self._held.pop(key, None) is not None
            s = self._settings
            rejoined = self._rejoined.pop(key, None)
            flap = held or (rejoined is not None and now - rejoined < s.link_hold_down_max_s)
            if flap:
                self.flaps += 1
                self._hold[key] = min(2 * self._hold.get(key, s.link_hold_down_s), s.link_hold_down_max_s)
            else:
                self._hold[key] = s.link_hold_down_s
            hold = self._hold[key]
            self._down.add(key)
            if not held:
                self._mark_change()
        if flap:
            log.warning("link %s - %s down (flapping: held down for %g s when it comes up)", a, b, hold)
        else:
            log.warning("link %s - %s down", a, b)
        return True

    def link_up(self, a: str, b: str) -> bool:
        """The link between nodes `a` and `b` is up again: it rejoins the plan once
        its hold-down ends (at once with `link_hold_down_s: 0`), a debounced re-plan.
        True if this changed anything."""
        key = self._link_key(a, b)
        with self._lock:
            if key not in self._down:
                return False
            self._down.discard(key)
            now = self._clock()
            hold = self._hold.get(key, self._settings.link_hold_down_s)
            if hold > 0:
                self._held[key] = now + hold
                self._wake()  # the worker must wake when the hold-down ends
            else:
                self._rejoined[key] = now
                self._mark_change()
        if hold > 0:
            log.warning("link %s - %s up: held down for %g s before it rejoins the plan", a, b, hold)
        else:
            log.warning("link %s - %s up", a, b)
        return True

    def release_holds(self, now: float) -> None:
        """Links whose hold-down has ended by `now` rejoin the plan: a change made
        when the hold-down ended (lock held)."""
        for key, until in sorted(self._held.items(), key=lambda kv: kv[1]):
            if until > now:
                break
            del self._held[key]
            self._rejoined[key] = until
            self._mark_change(until)
            log.warning("link %s - %s rejoins the plan: up for its hold-down of %g s", *sorted(key), self._hold[key])

    def hold_ends(self) -> float | None:
        """When the first hold-down ends (lock held); None if no link is held down."""
        return min(self._held.values(), default=None)

    def links_held_down(self) -> dict[tuple[str, str], float]:
        """(a, b) sorted -> seconds left of its hold-down, for every link up again
        but not yet back in the plan."""
        with self._lock:
            now = self._clock()
            self.release_holds(now)
            return {tuple(sorted(k)): until - now for k, until in sorted(self._held.items(), key=lambda kv: sorted(kv[0]))}

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

    def switch_links(self, switch: str) -> list[str]:
        """The neighbours of `switch` in the topology (none for a learned switch
        that is not connected to the planned network yet)."""
        topo = self.topology
        v = topo.index.get(switch)
        if v is None:
            if self.discovers:
                return []
            raise KeyError(switch)
        return [topo.name(nb) for nb in topo.neighbors[v]]

    def links_down(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(tuple(sorted(k)) for k in self._down)

    # -- budgets and capacities ----------------------------------------------------------------

    def planning_topology(
        self,
        down: frozenset[frozenset[str]],
        learned: tuple[Mapping[str, int], Mapping[str, int]] = ({}, {}),
        reported: Mapping[str, SwitchLimits] | None = None,
        ports: PortMap | None = None,
        full: Topology | None = None,
    ) -> tuple[Topology, Network]:
        """The topology without the down links (same nodes, so the same indices
        and the full port map still apply), with each switch's budgets the smallest
        of the configured, the reported (`report_limits`) and the learned
        (`table_full`) ones, each link's capacity as `_link_capacity` says (ports:
        the port map, default the current one), and its Network. Raises ValueError if a host cannot
        reach every other host without the down links."""
        groups, entries = learned
        reported = reported or {}
        full = self.topology if full is None else full
        if not down and not groups and not entries and not reported:
            return full, (self.network if full is self.topology else Network(full))
        nodes = []
        for n in full.nodes:
            if n.id in groups or n.id in entries or n.id in reported:
                (g, _), (f, _) = self._budgets(n, reported.get(n.id), groups, entries)
                n = dataclasses.replace(n, group_capacity=g, entry_capacity=f)
            nodes.append(n)
        nodes = tuple(nodes)
        ports = self._ports if ports is None else ports
        links = tuple(
            Link(link.a, link.b, self._link_capacity(link, ports, reported, full)[0])
            for link in full.links
            if frozenset((link.a, link.b)) not in down
        )
        topo = Topology(nodes, links)
        hosts = topo.hosts
        if hosts:
            seen = {hosts[0]}
            stack = [hosts[0]]
            while stack:
                v = stack.pop()
                for w in topo.neighbors[v]:
                    if w not in seen:
                        seen.add(w)
                        stack.append(w)
            cut = [topo.name(h) for h in hosts if h not in seen]
            if cut:
                links = ", ".join("-".join(sorted(k)) for k in sorted(down, key=sorted))
                raise HostsCutOff(
                    f"with links {links} down, hosts {', '.join(cut[:5])} are unreachable; keeping the last plan"
                )
        return topo, Network(topo)

    def table_full(self, switch: str, table: str, job: str | None = None) -> int | None:
        """Switch `switch` refused an entry of `job` because its `table` is full
        ("group": out of groups or buckets; "entry": the flow table refused a
        multicast flow; "meter": out of meters).

        For "group"/"entry" the switch's budget G(v)/F(v) is lowered to the number
        of groups/entries the current plan gives it for jobs other than `job` and
        the jobs refused there before under the same plan (several refusals in one
        batch lower it once, to what fits; with `job` unknown: one less than the
        plan uses there), never above the
        configured budget and never above a budget learned before; the change
        triggers an ordinary (debounced) re-plan that keeps within it. Learned
        budgets are kept until restart. A full meter table is only counted: the
        planner does not model meters. Returns the learned budget, or None.
        """
        if self._kind.get(switch) != "switch":
            raise ValueError(f"unknown switch {switch!r}")
        if table not in ("group", "entry", "meter"):
            raise ValueError(f"unknown table {table!r}")
        v = self.topology.index[switch]
        node = self.topology.nodes[v]
        with self._lock:
            self.table_full_errors += 1
            if table == "meter":
                log.error("switch %s: meter table full (job %s); meters are not planned, nothing re-planned", switch, job)
                return None
            plan, generation = self._current_plan()
            learned = self._learned_groups if table == "group" else self._learned_entries
            configured = node.group_capacity if table == "group" else node.entry_capacity
            holders = [
                jp.job.id
                for jp in (plan.jobs if plan is not None else ())
                if v in (jp.structure.groups if table == "group" else jp.structure.entries)
            ]
            gen, refused = self._refused_in_plan.get((switch, table), (None, frozenset()))
            if gen != generation:
                refused = frozenset()
            if job is not None:
                refused = refused | {job}
                self._refused_in_plan[(switch, table)] = (generation, refused)
                budget = sum(1 for h in holders if h not in refused)
            else:
                budget = max(len(holders) - 1, 0)
            rep = self._reported.get(switch)
            said = None if rep is None else (rep.max_groups if table == "group" else rep.max_entries)
            for limit in (configured, said, learned.get(switch)):
                if limit is not None:
                    budget = min(budget, limit)
            if learned.get(switch) == budget:
                return budget
            learned[switch] = budget
            self._mark_change()
        log.error(
            "switch %s: %s table full (job %s); %s budget learned: %d (configured %s); re-planning",
            switch, table, job, "group" if table == "group" else "entry", budget, configured,
        )
        return budget

    def report_limits(
        self,
        switch: str,
        *,
        max_groups: int | None = None,
        max_entries: int | None = None,
        port_speeds: Mapping[int, int] | None = None,
        source: str = "switch",
    ) -> bool:
        """Record what `switch` reported about its limits (the arguments given
        replace what it said before; None keeps it). A change is an ordinary
        change (one debounced re-plan); True if anything changed."""
        if not self._is_switch(switch):
            raise ValueError(f"unknown switch {switch!r}")
        with self._lock:
            old = self._reported.get(switch, SwitchLimits(source=source))
            new = SwitchLimits(
                old.max_groups if max_groups is None else max_groups,
                old.max_entries if max_entries is None else max_entries,
                dict(old.port_speeds) if port_speeds is None else dict(port_speeds),
                source,
            )
            if new == old and switch in self._reported:
                return False
            self._reported[switch] = new
            self._mark_change()
        log.info(
            "switch %s reports max groups %s, max entries %s, port speeds %s (bit/s)",
            switch, new.max_groups, new.max_entries, dict(sorted(new.port_speeds.items())),
        )
        return True

    def reported_limits(self) -> dict[str, SwitchLimits]:
        """Switch -> what it reported about its limits (`report_limits`)."""
        with self._lock:
            return dict(self._reported)

    def _budgets(
        self, node: Node, reported: SwitchLimits | None, groups: Mapping[str, int], entries: Mapping[str, int]
    ) -> tuple[tuple[int | None, str | None], tuple[int | None, str | None]]:
        """((G, its source), (F, its source)) of a switch: the smallest of the
        configured budget, the reported limit and the budget learned from table-full
        errors (a tie goes to the first of these)."""
        src = reported.source if reported is not None else "switch"
        g = _smallest(
            ("config", node.group_capacity),
            (src, reported.max_groups if reported is not None else None),
            ("table_full", groups.get(node.id)),
        )
        f = _smallest(
            ("config", node.entry_capacity),
            (src, reported.max_entries if reported is not None else None),
            ("table_full", entries.get(node.id)),
        )
        return g, f

    def _link_capacity(
        self, link: Link, ports: PortMap, reported: Mapping[str, SwitchLimits], full: Topology | None = None
    ) -> tuple[float, str]:
        """(capacity, source) of a link: the configured one ("config") if the
        config states it (`config.explicit_capacities`); else the smaller of the
        speeds its switch ends report for their ports ("port"; an end that reports
        0 or nothing is left out; a host link: its switch end's); else the
        config's default ("config")."""
        if frozenset((link.a, link.b)) in self._explicit:
            return link.capacity, "config"
        index = (self.topology if full is None else full).index
        speeds = []
        for x, y in ((link.a, link.b), (link.b, link.a)):
            rep = reported.get(x)
            port = ports.get((index[x], index[y])) if rep is not None else None
            if port is not None and rep.port_speeds.get(port, 0) > 0:
                speeds.append(rep.port_speeds[port])
        if not speeds:
            return link.capacity, "config"
        return float(min(speeds)), "port"

    def link_capacities(self) -> dict[tuple[str, str], tuple[float, str]]:
        """(a, b) of every link of `topology` -> (the capacity plans use, its source:
        "config" or "port")."""
        with self._lock:
            ports, reported, topo = dict(self._ports), dict(self._reported), self.topology
        return {(link.a, link.b): self._link_capacity(link, ports, reported, topo) for link in topo.links}

    def learned_budgets(self) -> dict[str, dict[str, int]]:
        """{"groups": {switch: G}, "entries": {switch: F}} learned from table-full errors."""
        with self._lock:
            return {"groups": dict(self._learned_groups), "entries": dict(self._learned_entries)}

    def switch_statuses(self, plan: Plan | None, desired: Mapping[str, SwitchState]) -> list[SwitchStatus]:
        """Every switch of the topology: its state, budgets (effective, and where
        they come from) and what `plan` / `desired` give it (lock held)."""
        usage = {su.id: su for su in plan.switches} if plan is not None else {}
        out = []
        for v in self.topology.switches:
            node = self.topology.nodes[v]
            su = usage.get(node.id)
            st = desired.get(node.id, SwitchState())
            rep = self._reported.get(node.id)
            (g, g_src), (f, f_src) = self._budgets(node, rep, self._learned_groups, self._learned_entries)
            out.append(
                SwitchStatus(
                    node.id,
                    node.id in self._connected,
                    su.groups_used if su else 0,
                    g,
                    su.entries_used if su else 0,
                    f,
                    len(st.flows) if self._backends.get(node.id) == "openflow" else 0,
                    sum(1 for m in st.meters if m.meter_id != OFPM_CONTROLLER)
                    if self._backends.get(node.id) == "openflow"
                    else 0,
                    self._learned_groups.get(node.id),
                    self._learned_entries.get(node.id),
                    self._backends.get(node.id, "openflow"),
                    node.id in self._other_primary,
                    node.group_capacity,
                    node.entry_capacity,
                    rep.max_groups if rep is not None else None,
                    rep.max_entries if rep is not None else None,
                    g_src,
                    f_src,
                    dict(rep.port_speeds) if rep is not None else {},
                )
            )
        return out


def _smallest(*candidates: tuple[str, int | None]) -> tuple[int | None, str | None]:
    """(the smallest value, its source) of the (source, value) pairs whose value is
    not None; a tie goes to the first; (None, None) when none has a value."""
    best: tuple[int | None, str | None] = (None, None)
    for source, value in candidates:
        if value is not None and (best[0] is None or value < best[0]):
            best = (value, source)
    return best
