"""Topology builders: k-ary fat-tree and leaf-spine, with uniform capacities.

Names follow one scheme (core-i, agg-p-i, edge-p-i, host-n; spine-i, leaf-i) so
that generated instances are readable; nothing in the planner depends on them.
"""

from __future__ import annotations

from controller.algorithm.model import Link, Node, Topology

GBIT = 1e9


def _switch(name: str, group_capacity: int | None, entry_capacity: int | None) -> Node:
    return Node(name, "switch", group_capacity, entry_capacity)


def _attach_hosts(nodes: list[Node], links: list[Link], switch: str, count: int, first: int, capacity: float) -> int:
    """Add hosts host-`first`, host-`first + 1`, … (`count` of them), each linked to
    `switch`; returns the number of the next host."""
    for n in range(first, first + count):
        h = f"host-{n}"
        nodes.append(Node(h, "host"))
        links.append(Link(switch, h, capacity))
    return first + count


def fat_tree(
    k: int,
    capacity: float = 10 * GBIT,
    core_oversubscription: float = 1.0,
    group_capacity: int | None = None,
    entry_capacity: int | None = None,
) -> Topology:
    """The k-ary fat-tree of Al-Fares et al.: k pods, k²/4 cores, k³/4 hosts.

    Core links carry `capacity / core_oversubscription`.
    """
    if k < 2 or k % 2:
        raise ValueError(f"fat-tree arity k must be an even number >= 2, got {k}")
    if core_oversubscription < 1:
        raise ValueError("core_oversubscription must be >= 1")
    half = k // 2
    nodes: list[Node] = []
    links: list[Link] = []
    cores = [f"core-{i}" for i in range(half * half)]
    nodes += [_switch(c, group_capacity, entry_capacity) for c in cores]
    host = 0
    for p in range(k):
        aggs = [f"agg-{p}-{i}" for i in range(half)]
        edges = [f"edge-{p}-{i}" for i in range(half)]
        nodes += [_switch(a, group_capacity, entry_capacity) for a in aggs]
        nodes += [_switch(e, group_capacity, entry_capacity) for e in edges]
        for i, a in enumerate(aggs):
            for j in range(half):
                links.append(Link(a, cores[i * half + j], capacity / core_oversubscription))
            for e in edges:
                links.append(Link(e, a, capacity))
        for e in edges:
            host = _attach_hosts(nodes, links, e, half, host, capacity)
    return Topology(tuple(nodes), tuple(links))


def leaf_spine(
    leaves: int,
    spines: int,
    hosts_per_leaf: int,
    capacity: float = 10 * GBIT,
    uplink_capacity: float | None = None,
    group_capacity: int | None = None,
    entry_capacity: int | None = None,
) -> Topology:
    """A two-tier Clos: every leaf connects to every spine."""
    if leaves < 1 or spines < 1 or hosts_per_leaf < 1:
        raise ValueError("leaf-spine needs at least one leaf, one spine and one host per leaf")
    up = capacity if uplink_capacity is None else uplink_capacity
    nodes = [_switch(f"spine-{i}", group_capacity, entry_capacity) for i in range(spines)]
    links: list[Link] = []
    host = 0
    for li in range(leaves):
        leaf = f"leaf-{li}"
        nodes.append(_switch(leaf, group_capacity, entry_capacity))
        for si in range(spines):
            links.append(Link(leaf, f"spine-{si}", up))
        host = _attach_hosts(nodes, links, leaf, hosts_per_leaf, host, capacity)
    return Topology(tuple(nodes), tuple(links))
