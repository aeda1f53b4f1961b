"""A host join: the served plan carried onto a topology that only grew by hosts.

In a learned network every host that speaks for the first time adds a node and
a link to the topology. Nothing planned can use them yet (no job's structure
touches a new host), so re-planning every job for it would be waste and churn:
the planning loop (`core.planning`) instead carries the served plan over
(`carried_over`) when the new planning topology is the old one plus hosts, each
with its one link to a switch the old topology has, and nothing else changed
(`grown_by_hosts`: same switches with the same budgets, the same links with the
same capacities). The backends then translate the same jobs on the grown
network: the difference is the new hosts' unicast routes (and ARP routes,
known-source entries), which their reconcilers add.

Node and edge indices change (the topology's nodes are sorted by name), so every
structure is renumbered by names. Unicast routes are a function of the
topology (`algorithm.routing`), and a recognised Clos fabric can change with a
host joining; so each renumbered structure is derived again on the new network
(`make_structure`) and, if its copies differ, the plan is not carried over (the
caller makes a full plan, as for any other change). The LP's columns are not
carried (the next full plan starts cold). Pure.
"""

from __future__ import annotations

import dataclasses

from controller.algorithm.model import Plan, Structure, Topology
from controller.algorithm.network import Network
from controller.algorithm.structures import make_structure


def grown_by_hosts(old: Topology, new: Topology) -> tuple[str, ...] | None:
    """The hosts `new` adds to `old` if that is all it changes (each new host with
    links only to switches of `old`), else None (also when nothing was added)."""
    if old is new or len(new.nodes) <= len(old.nodes):  # nothing added: no pass over the nodes (every admission asks)
        return None
    old_nodes = set(old.nodes)
    if not old_nodes <= set(new.nodes):
        return None
    added = {n.id for n in new.nodes if n not in old_nodes}
    if any(n.kind != "host" for n in new.nodes if n.id in added):
        return None
    old_links = set(old.links)
    if not old_links <= set(new.links):
        return None
    switches = {n.id for n in old.nodes if n.kind == "switch"}
    for link in set(new.links) - old_links:
        ends = {link.a, link.b}
        host = ends & added
        if len(host) != 1 or not (ends - host) <= switches or len(ends - host) != 1:
            return None
    return tuple(sorted(added))


def carried_over(plan: Plan, old: Topology, net: Network) -> Plan | None:
    """`plan` (made on `old`) renumbered onto `net`'s topology, every job on the
    same structure with the same rate; None if a structure's copies would differ
    there (the unicast routes changed with the new hosts)."""
    new = net.topo
    index = new.index
    node = [index[n.id] for n in old.nodes]
    edge_index = new.edge_index
    edge = [edge_index[(node[e.tail], node[e.head])] for e in old.edges]

    def renumber(s: Structure) -> Structure:
        return Structure(
            tree=tuple(sorted((node[p], node[c]) for p, c in s.tree)),
            branches=tuple(sorted((node[e], node[w]) for e, w in s.branches)),
            copies=tuple(sorted((edge[e], c) for e, c in s.copies)),
            groups=frozenset(node[v] for v in s.groups),
            entries=frozenset(node[v] for v in s.entries),
            declared_mode=s.declared_mode,
        )

    jobs = []
    for jp in plan.jobs:
        s = renumber(jp.structure)
        if s.declared_mode is None:
            again = make_structure(net, list(s.tree), list(s.branches))
            if (again.copies, again.groups, again.entries) != (s.copies, s.groups, s.entries):
                return None
        jobs.append(dataclasses.replace(jp, structure=s))
    # the LP's columns (a later full plan's warm start) are dropped: their copies were
    # not checked against the new routes, and a warm start needs the same topology
    return dataclasses.replace(plan, jobs=tuple(jobs), columns=(), runtime_s=0.0)
