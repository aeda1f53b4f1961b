"""Port maps: which port of a switch leads to which neighbour.

A port map is keyed by (switch node index, neighbour node index) of a topology
and gives the port number on the switch. The controller starts from
`default_port_map` and corrects it with what the wire shows (LLDP, hosts'
packets); every backend programs its switches from the same map.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from controller.algorithm.model import Topology

# (switch node index, neighbour node index) -> port number on the switch
PortMap = Mapping[tuple[int, int], int]

# the largest physical port number (OpenFlow 1.3's OFPP_MAX; P4 targets' ports are
# far smaller, and their translation checks its own width)
MAX_PORT = 0xFFFFFF00


def default_port_map(topology: Topology) -> dict[tuple[int, int], int]:
    """A deterministic stand-in for the ports the controller learns by LLDP: every
    switch numbers its links 1, 2, ... in the order of `topology.links` (as Mininet
    numbers the ports of links added in that order)."""
    idx = topology.index
    ports: dict[tuple[int, int], int] = {}
    count: dict[int, int] = defaultdict(int)
    for link in topology.links:
        a, b = idx[link.a], idx[link.b]
        for u, v in ((a, b), (b, a)):
            if topology.is_switch(u):
                count[u] += 1
                ports[(u, v)] = count[u]
    return ports


def check_port_map(topology: Topology, ports: PortMap) -> None:
    """Every link end at a switch has a port, and no two share one."""
    missing = [
        f"{topology.name(e.tail)}->{topology.name(e.head)}"
        for e in topology.edges
        if topology.is_switch(e.tail) and (e.tail, e.head) not in ports
    ]
    if missing:
        raise ValueError(f"port map has no port for {', '.join(sorted(missing)[:10])}")
    seen: dict[tuple[int, int], int] = {}
    for (sw, nb), port in ports.items():
        if not 1 <= port <= MAX_PORT:
            raise ValueError(f"{topology.name(sw)}: invalid port number {port}")
        other = seen.setdefault((sw, port), nb)
        if other != nb:
            raise ValueError(
                f"{topology.name(sw)}: port {port} leads to both {topology.name(other)} and {topology.name(nb)}"
            )


def check_switch_ports(topology: Topology, ports: PortMap, switch: int) -> None:
    """`check_port_map` for one switch's ports only (a change confined to them, as a
    swap of two of its ports: every other switch's are as they were). Scans the
    map once, without the per-link work: at k=48 (110,592 link ends) the whole
    check takes about 0.3 s, under the core's lock, for every port learned."""
    seen: dict[int, int] = {}
    for (sw, nb), port in ports.items():
        if sw != switch:
            continue
        if not 1 <= port <= MAX_PORT:
            raise ValueError(f"{topology.name(sw)}: invalid port number {port}")
        other = seen.setdefault(port, nb)
        if other != nb:
            raise ValueError(
                f"{topology.name(sw)}: port {port} leads to both {topology.name(other)} and {topology.name(nb)}"
            )
