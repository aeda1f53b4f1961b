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

Speed: everything but the room depends only on a job's structure, the topology
and the routing (`job_candidates`), so a backend keeps each job's candidates
between plans (`BackupCandidates`, passed to `choose_backups`): an admission
then computes the new job's, not every job's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass

from controller.algorithm.model import JobPlan, Plan, Structure, Topology
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


def job_candidates(
    topo: Topology, routing: UnicastRouting, jp: JobPlan, allowed: frozenset[int]
) -> tuple[tuple[Backup, ...], ...]:
    """For each tree edge of one job (in node order) that could have a backup,
    the backups that would protect it, in the order `choose_backups` tries them:
    everything but the tables' room and the detours taken, so the same job
    structure on the same topology and routing gives the same candidates (a
    caller may keep them between plans, `BackupCandidates`)."""
    s = jp.structure
    if not s.tree:
        return ()
    children: dict[int, list[int]] = defaultdict(list)
    for p, c in s.tree:
        children[p].append(c)
    parent = {c: p for p, c in s.tree}
    branches: dict[int, list[int]] = defaultdict(list)
    for emitter, worker in s.branches:
        branches[emitter].append(worker)
    in_tree = set(parent) | set(children)
    limit = len(topo.nodes) + 1
    out: list[tuple[Backup, ...]] = []
    for u, v in sorted(s.tree):
        if u not in allowed or v not in allowed or not topo.is_switch(u) or not topo.is_switch(v):
            continue
        kids = sorted(children[v])
        if not kids and not branches[v]:
            continue
        if any(not topo.is_switch(c) or c not in allowed for c in kids):
            continue  # hosts below v: single-homed, nobody else reaches them
        edge: list[Backup] = []
        for w in sorted(topo.neighbors[u]):
            if w == v or w in in_tree or w not in allowed or not topo.is_switch(w):
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
            edge.append(Backup(jp.job.id, u, v, w, tuple(kids), tuple(sorted(branches[v]))))
        if edge:
            out.append(tuple(edge))
    return tuple(out)


class BackupCandidates:
    """Each job's `job_candidates`, kept between plans: computed again only for
    a job whose structure changed, or for every job when the topology, the
    routing or the allowed switches are other objects than last time. A
    registration that adds one job to 200 then computes one job's candidates,
    not 200. Memory: one entry per job of the last plan."""

    def __init__(self) -> None:
        # the objects themselves, compared by identity (held, so never another's id)
        self._key: tuple[Topology, UnicastRouting, frozenset[int]] | None = None
        self._jobs: dict[str, tuple[Structure, tuple[tuple[Backup, ...], ...]]] = {}

    def __call__(self, topo: Topology, routing: UnicastRouting, jp: JobPlan,
                 allowed: frozenset[int]) -> tuple[tuple[Backup, ...], ...]:
        if self._key is None or self._key[0] is not topo or self._key[1] is not routing or self._key[2] != allowed:
            self._key, self._jobs = (topo, routing, allowed), {}
        jid = jp.job.id
        held = self._jobs.get(jid)
        if held is not None and (held[0] is jp.structure or held[0] == jp.structure):
            return held[1]
        out = job_candidates(topo, routing, jp, allowed)
        self._jobs[jid] = (jp.structure, out)
        return out

    def forget_except(self, job_ids: Collection[str]) -> None:
        """Drop the jobs not in `job_ids` (those of the plan just made)."""
        keep = set(job_ids)
        self._jobs = {j: v for j, v in self._jobs.items() if j in keep}


def choose_backups(
    topo: Topology,
    routing: UnicastRouting,
    plan: Plan,
    switches: Collection[int] | None = None,
    candidates: BackupCandidates | None = None,
) -> tuple[Backup, ...]:
    """The backups of `plan`'s tree edges that fit in the tables left (see the
    module docstring), on the switches of `switches` only (None: every switch).
    Deterministic: the same inputs give the same backups. `candidates`, if
    given, keeps each job's candidates between calls (the same result)."""
    allowed = frozenset(topo.switches if switches is None else switches)
    used_groups, used_entries = table_use(topo, plan)

    def room(v: int, groups: int, entries: int) -> bool:
        node = topo.nodes[v]
        if node.group_capacity is not None and used_groups[v] + groups > node.group_capacity:
            return False
        return node.entry_capacity is None or used_entries[v] + entries <= node.entry_capacity

    out: list[Backup] = []
    for jp in plan.jobs:
        if jp.rate <= 0 or not jp.structure.tree:
            continue
        edges = candidates(topo, routing, jp, allowed) if candidates is not None else \
            job_candidates(topo, routing, jp, allowed)
        detours_from: set[tuple[int, int]] = set()  # (w, u): w holds one entry per job and upstream port
        for edge in edges:
            for b in edge:
                u, w = b.upstream, b.detour
                if (w, u) in detours_from:
                    continue
                if not (room(u, 1, 0) and room(w, b.detour_groups, 1) and all(room(c, 0, 1) for c in b.children)):
                    continue
                used_groups[u] += 1
                used_groups[w] += b.detour_groups
                used_entries[w] += 1
                for c in b.children:
                    used_entries[c] += 1
                detours_from.add((w, u))
                out.append(b)
                break
    if candidates is not None:
        candidates.forget_except([jp.job.id for jp in plan.jobs])
    return tuple(out)
