"""The network as the controller learns it from the wire, when the config declares none.

Pure: facts in, a planner `Topology` out; no sockets, clock or files. The
OpenFlow app reports what it sees (a datapath connecting, an LLDP link, a host's
ARP or IPv4 at a port) through `ControllerService`, which keeps one
`DiscoveredNetwork`, stores it (`to_json`) so that a restarted controller starts
from the network it knew, and plans on `build(...)`'s topology.

Facts and names:
- A switch is named by its backend's convention: `of:<16 hex digits>` for an
  OpenFlow datapath id (`openflow_name`), unless the config names it.
- A link end (switch, port) leads to a (switch, port) of another switch (LLDP
  reports both ends). A switch pair carries at most one link in the planner's
  model: of parallel links, the one on the lowest port of the lexically first
  switch is used and the others are listed by `parallel_links`.
- A host is located at a (switch, port) that is no switch-to-switch link end,
  with its IPv4 and MAC address; its name is the configured one for its
  address, else the address itself. One host per port: a new address at a port
  replaces the host that was there; a known address at a new port moves. (This
  is the mechanism; `core.hosts` decides when a move or a replacement is taken:
  only once the old place is confirmed gone, never for a pinned host.)

While the network is being learned it may fall into pieces (a switch whose
links LLDP has not reported yet, with its hosts). The planner's topology is the
largest piece (most hosts, then most switches, then the first name); the rest
waits, listed by `outside`, and jobs naming its hosts wait with them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from controller.algorithm.model import Link, Node, Topology

from controller.addressing.hosts import HostAddress, normalise_mac

End = tuple[str, int]  # (switch name, port number)


@dataclass(frozen=True)
class DiscoveredHost:
    name: str
    ip: str
    mac: str
    switch: str
    port: int


@dataclass(frozen=True)
class DiscoveredTopology:
    """What `DiscoveredNetwork.build` gives the planner: the topology (nodes sorted by
    name), the port of every switch's link end by node names, and the hosts'
    addresses."""

    topology: Topology
    ports: dict[tuple[str, str], int]
    addresses: dict[str, HostAddress]


class DiscoveredNetwork:
    """Switches, switch-to-switch links and hosts learned so far. Every
    `add_*`/`locate_*` method returns True if the network changed."""

    def __init__(self) -> None:
        self.switches: set[str] = set()
        self._peer: dict[End, End] = {}  # both directions of every link
        self.hosts: dict[str, DiscoveredHost] = {}  # by IPv4 address

    # -- facts ----------------------------------------------------------------------------
    def add_switch(self, name: str) -> bool:
        if name in self.switches:
            return False
        self.switches.add(name)
        return True

    def add_link(self, a: str, port_a: int, b: str, port_b: int) -> bool:
        """LLDP: port `port_a` of switch `a` reaches port `port_b` of switch `b`.
        A host located at either end was a guess made before LLDP spoke: it goes
        (it is located again at its real port by its next packet)."""
        if a == b:
            raise ValueError(f"a link from switch {a} to itself (ports {port_a}, {port_b})")
        for s in (a, b):
            if s not in self.switches:
                raise ValueError(f"unknown switch {s!r}")
        ea, eb = (a, port_a), (b, port_b)
        if self._peer.get(ea) == eb and self._peer.get(eb) == ea:
            return False
        for end in (ea, eb):
            old = self._peer.pop(end, None)
            if old is not None:
                self._peer.pop(old, None)
        self._peer[ea], self._peer[eb] = eb, ea
        for ip, h in list(self.hosts.items()):
            if (h.switch, h.port) in (ea, eb):
                del self.hosts[ip]
        return True

    def remove_link_end(self, switch: str, port: int) -> bool:
        """The link at (switch, port) is gone from the wire (the port was deleted)."""
        peer = self._peer.pop((switch, port), None)
        if peer is None:
            return False
        self._peer.pop(peer, None)
        return True

    def is_link_end(self, switch: str, port: int) -> bool:
        return (switch, port) in self._peer

    def peer(self, switch: str, port: int) -> End | None:
        return self._peer.get((switch, port))

    def check_place(self, ip: str, switch: str, port: int) -> str:
        """`ip` in its normal form, if a host with that address could be at (switch,
        port); else ValueError: the switch is unknown, the port is a
        switch-to-switch link end, or the address is not a unicast IPv4 address."""
        if switch not in self.switches:
            raise ValueError(f"unknown switch {switch!r}")
        if self.is_link_end(switch, port):
            raise ValueError(f"{switch} port {port} leads to another switch, not to a host")
        addr = ipaddress.IPv4Address(ip)
        if addr.is_multicast or addr.is_unspecified or addr.is_loopback or addr == ipaddress.IPv4Address("255.255.255.255"):
            raise ValueError(f"{ip} is not a host address")
        return str(addr)

    def locate_host(self, name: str, ip: str, mac: str, switch: str, port: int) -> bool:
        """A packet from `ip`/`mac` entered `switch` at `port`. Raises ValueError
        if that port is a switch-to-switch link end, the switch is unknown, or
        the address is not a unicast IPv4 address."""
        addr = self.check_place(ip, switch, port)
        host = DiscoveredHost(name, addr, normalise_mac(mac), switch, port)
        if self.hosts.get(host.ip) == host:
            return False
        for other_ip, h in list(self.hosts.items()):
            if other_ip != host.ip and ((h.switch, h.port) == (switch, port) or h.name == name):
                del self.hosts[other_ip]
        self.hosts[host.ip] = host
        return True

    def forget_host(self, ip: str) -> bool:
        """The host with address `ip` is gone (silent too long, or replaced). True if it was known."""
        return self.hosts.pop(ip, None) is not None

    def host_at(self, switch: str, port: int) -> DiscoveredHost | None:
        return next((h for h in self.hosts.values() if (h.switch, h.port) == (switch, port)), None)

    # -- views ----------------------------------------------------------------------------
    def main_component(self) -> set[str]:
        """The switches and host names of the largest connected piece (see the module docstring)."""
        adj: dict[str, set[str]] = {s: set() for s in self.switches}
        for ea, eb in self._peer.items():
            adj[ea[0]].add(eb[0])
        for h in self.hosts.values():
            adj.setdefault(h.name, set()).add(h.switch)
            adj[h.switch].add(h.name)
        hosts = {h.name for h in self.hosts.values()}
        best: tuple[int, int, str] | None = None
        best_nodes: set[str] = set()
        seen: set[str] = set()
        for start in sorted(adj):
            if start in seen:
                continue
            comp, stack = {start}, [start]
            while stack:
                for w in adj[stack.pop()]:
                    if w not in comp:
                        comp.add(w)
                        stack.append(w)
            seen |= comp
            n_hosts = len(comp & hosts)
            key = (-n_hosts, -(len(comp) - n_hosts), min(comp))
            if best is None or key < best:
                best, best_nodes = key, comp
        return best_nodes

    def outside(self) -> set[str]:
        """Switches and hosts learned but not connected to the main piece yet."""
        return (self.switches | {h.name for h in self.hosts.values()}) - self.main_component()

    def links(self) -> dict[frozenset[str], tuple[End, End]]:
        """The link the planner uses between each pair of switches: its two ends,
        the lexically first switch's first."""
        out: dict[frozenset[str], tuple[End, End]] = {}
        for ea in sorted(self._peer):
            eb = self._peer[ea]
            if ea[0] > eb[0]:
                continue
            out.setdefault(frozenset((ea[0], eb[0])), (ea, eb))
        return out

    def parallel_links(self) -> list[tuple[End, End]]:
        """Link ends between a pair of switches that `links` does not use."""
        used = {ends for ends in self.links().values()}
        return [(ea, self._peer[ea]) for ea in sorted(self._peer)
                if ea[0] < self._peer[ea][0] and (ea, self._peer[ea]) not in used]

    def build(
        self,
        capacity: Callable[[str, int], float],
        budgets: Mapping[str, tuple[int | None, int | None]] | None = None,
    ) -> DiscoveredTopology:
        """The planner's topology of the main piece of what was learned
        (`main_component`). `capacity(switch, port)` gives
        a link end's capacity in bit/s (a link takes the smaller of its two ends;
        a host link its switch end's); `budgets` gives (groups, entries) per switch
        (absent: unlimited)."""
        budgets = budgets or {}
        keep = self.main_component()
        hosts = sorted((h for h in self.hosts.values() if h.name in keep), key=lambda h: h.name)
        nodes = [Node(s, "switch", *budgets.get(s, (None, None))) for s in sorted(self.switches & keep)]
        nodes += [Node(h.name, "host") for h in hosts]
        links: list[Link] = []
        ports: dict[tuple[str, str], int] = {}
        for (ea, eb) in self.links().values():
            if ea[0] not in keep:
                continue
            links.append(Link(ea[0], eb[0], min(capacity(*ea), capacity(*eb))))
            ports[(ea[0], eb[0])] = ea[1]
            ports[(eb[0], ea[0])] = eb[1]
        for h in hosts:
            links.append(Link(h.switch, h.name, capacity(h.switch, h.port)))
            ports[(h.switch, h.name)] = h.port
        addresses = {h.name: HostAddress(h.ip, h.mac) for h in hosts}
        return DiscoveredTopology(Topology(tuple(nodes), tuple(links)), ports, addresses)

    # -- storage --------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "switches": sorted(self.switches),
            "links": [[ea[0], ea[1], eb[0], eb[1]] for ea, eb in sorted(self._peer.items()) if ea < eb],
            "hosts": [[h.name, h.ip, h.mac, h.switch, h.port] for h in sorted(self.hosts.values(), key=lambda h: h.ip)],
        }

    @classmethod
    def from_json(cls, data: object) -> DiscoveredNetwork:
        """The network `to_json` wrote; raises ValueError for anything else."""
        if not isinstance(data, dict):
            raise ValueError("a learned network is a JSON object")
        net = cls()
        try:
            for s in data.get("switches", []):
                net.add_switch(str(s))
            for a, pa, b, pb in data.get("links", []):
                net.add_link(str(a), int(pa), str(b), int(pb))
            for name, ip, mac, sw, port in data.get("hosts", []):
                net.locate_host(str(name), str(ip), str(mac), str(sw), int(port))
        except (TypeError, ValueError) as e:
            raise ValueError(f"not a stored learned network: {e}") from None
        return net
