"""Backups for a plan's tree edges: which switch stands in for a tree child whose link fails.

Pure (topology and plan in, backups out), so that every backend makes the same
choice: the OpenFlow backend turns each `Backup` into a fast-failover group and
its detour's entries (`southbound.openflow.failover`); the P4 backend will reuse
the same choice.

The design (one-hop substitution, for leaf-spine and fat-tree fabrics): a tree
edge u -> v between two switches is protected when u has another switch
neighbour w that is not in the job's tree and is adjacent to every tree child of
v. When the port of u toward v goes down, u sends the job's stream to w instead,
and w replicates it to v's children (and emits v's unicast branches): the same
downstream subtree, reached without v. On a leaf-spine this covers every
leaf -> spine edge (another spine reaches the same leaves); on a fat-tree the
edge switch -> aggregation edges whose aggregation switch feeds only its pod,
and every aggregation -> core edge (another core of the same group reaches the
same aggregation switches). Not covered: an edge toward a switch with hosts
below it (a leaf, an edge switch: hosts are single-homed), a downward edge
(spine -> leaf, core -> aggregation: no other neighbour of the upper switch
reaches the lower one in one hop), and an edge whose child emits a unicast
branch through w or back through v. Those links are repaired by the re-plan,
as before.

Budgets: backups go only where the tables have room left after the plan
(`choose_backups`), so the planner's guarantee and its λ are untouched. A
backup costs, on u, one group (the fast-failover group; u's own flow or
replication group then points to it); on w, one entry, and one group if w
replicates (two or more outputs); on each child c of v, one entry (matching the
stream where it comes in from w; it reuses c's actions and group). Jobs are
taken in plan order and their edges in node order; an edge whose backup does
not fit is left unprotected.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass

from controller.algorithm.model import Plan, Topology
from controller.algorithm.routing import UnicastRouting


@dataclass(frozen=True)
class Backup:
    """The backup of one tree edge of one job: when `upstream`'s port toward
    `primary` goes down, `upstream` sends to `detour`, which forwards to
    `children` (the tree children of `primary`, all switches) and emits
    `branches` (the workers `primary` sends unicast copies to). Node indices."""

    job_id: str
    upstream: int
    primary: int
    detour: int
    children: tuple[int, ...]
    branches: tuple[int, ...]

    @property
    def detour_groups(self) -> int:
        """The groups the detour needs: one if it replicates."""
        return 1 if len(self.children) + len(self.branches) >= 2 else 0

    def switches(self) -> frozenset[int]:
        """Every switch whose entries this backup changes."""
        return frozenset((self.upstream, self.detour, *self.children))


def table_use(topo: Topology, plan: Plan) -> tuple[dict[int, int], dict[int, int]]:
    """(switch -> groups, switch -> multicast entries) the plan's jobs use, as the
    switches hold them: jobs with a positive rate and a tree."""
    groups: dict[int, int] = defaultdict(int)
    entries: dict[int, int] = defaultdict(int)
    for jp in plan.jobs:
        if jp.rate <= 0 or not jp.structure.tree:
            continue
        for v in jp.structure.groups:
            groups[v] += 1
        for v in jp.structure.entries:
            entries[v] += 1
    return groups, entries


def _route_avoids(routing: UnicastRouting, start: int, dest: int, u: int, v: int, limit: int) -> bool:
    """The unicast route from `start` to host `dest` never crosses the link u - v."""
    node = start
    for _ in range(limit):
        if node == dest:
            return True
        nxt = routing.next_hop(node, dest)
        if {node, nxt} == {u, v}:
            return False
        node = nxt
    return False


def choose_backups(
    topo: Topology,
    routing: UnicastRouting,
    plan: Plan,
    switches: Collection[int] | None = None,
) -> tuple[Backup, ...]:
    """The backups of `plan`'s tree edges that fit in the tables left (see the
    module docstring), on the switches of `switches` only (None: every switch).
    Deterministic: the same inputs give the same backups."""
    allowed = frozenset(topo.switches if switches is None else switches)
    used_groups, used_entries = table_use(topo, plan)

    def room(v: int, groups: int, entries: int) -> bool:
        node = topo.nodes[v]
        if node.group_capacity is not None and used_groups[v] + groups > node.group_capacity:
            return False
        return node.entry_capacity is None or used_entries[v] + entries <= node.entry_capacity

    out: list[Backup] = []
    limit = len(topo.nodes) + 1
    for jp in plan.jobs:
        s = jp.structure
        if jp.rate <= 0 or not s.tree:
            continue
        children: dict[int, list[int]] = defaultdict(list)
        for p, c in s.tree:
            children[p].append(c)
        parent = {c: p for p, c in s.tree}
        branches: dict[int, list[int]] = defaultdict(list)
        for emitter, worker in s.branches:
            branches[emitter].append(worker)
        in_tree = set(parent) | set(children)
        detours_from: set[tuple[int, int]] = set()  # (w, u): w holds one entry per job and upstream port
        for u, v in sorted(s.tree):
            if u not in allowed or v not in allowed or not topo.is_switch(u) or not topo.is_switch(v):
                continue
            kids = sorted(children[v])
            if not kids and not branches[v]:
                continue
            if any(not topo.is_switch(c) or c not in allowed for c in kids):
                continue  # hosts below v: single-homed, nobody else reaches them
            for w in sorted(topo.neighbors[u]):
                if w == v or w in in_tree or w not in allowed or not topo.is_switch(w) or (w, u) in detours_from:
                    continue
                if any(c not in topo.neighbors[w] for c in kids):
                    continue
                # a child re-emitting a unicast branch toward v or w would send it
                # the wrong way where the stream comes in from w
                if any(not routing.reachable(c, x) or routing.next_hop(c, x) in (v, w)
                       for c in kids for x in branches[c]):
                    continue
                if any(not routing.reachable(w, x) or routing.next_hop(w, x) == u
                       or not _route_avoids(routing, w, x, u, v, limit) for x in branches[v]):
                    continue
                b = Backup(jp.job.id, u, v, w, tuple(kids), tuple(sorted(branches[v])))
                if not (room(u, 1, 0) and room(w, b.detour_groups, 1) and all(room(c, 0, 1) for c in kids)):
                    continue
                used_groups[u] += 1
                used_groups[w] += b.detour_groups
                used_entries[w] += 1
                for c in kids:
                    used_entries[c] += 1
                detours_from.add((w, u))
                out.append(b)
                break
    return tuple(out)
