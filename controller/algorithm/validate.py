"""An independent checker of plans against their instance (docs/architecture.md, Formats).

It uses only the plan's copy counts, groups and entries and the instance, the way
an outside tool would; tests run it on every plan of every algorithm.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from controller.algorithm.model import Instance, Plan

REL_TOL = 1e-7


@dataclass(frozen=True)
class Violation:
    """One broken rule: its text, and what it is about (a job's id, an edge
    index, a switch's node index: None when it is not about one)."""

    text: str
    job: str | None = None
    edge: int | None = None
    switch: int | None = None


def plan_violations(instance: Instance, plan: Plan) -> list[str]:
    """Every way in which `plan` breaks a rule of docs/architecture.md, Formats; empty when valid."""
    return [v.text for v in violations(instance, plan)]


def violations(instance: Instance, plan: Plan) -> list[Violation]:
    """`plan_violations`, each with what it is about."""
    topo = instance.topology
    problems: list[Violation] = []
    by_id = {jp.job.id: jp for jp in plan.jobs}
    if sorted(by_id) != sorted(j.id for j in instance.jobs) or len(by_id) != len(plan.jobs):
        problems.append(Violation("the plan's jobs are not exactly the instance's jobs"))
    load: dict[int, float] = defaultdict(float)
    groups: dict[int, int] = defaultdict(int)
    entries: dict[int, int] = defaultdict(int)
    ratios = []
    for job in instance.jobs:
        jp = by_id.get(job.id)
        if jp is None:
            continue
        s = jp.structure
        if jp.rate < 0 or jp.rate > job.demand * (1 + REL_TOL):
            problems.append(Violation(f"{job.id}: rate {jp.rate} outside [0, demand {job.demand}]", job=job.id))
        ratios.append(jp.rate / job.demand)
        adj: dict[int, list[int]] = defaultdict(list)
        for e, c in s.copies:
            if c < 1:
                problems.append(Violation(f"{job.id}: edge {e} with {c} copies", job=job.id))
            edge = topo.edges[e]
            adj[edge.tail].append(edge.head)
            load[e] += jp.rate * c
        seen = {topo.index[job.ps]}
        stack = [topo.index[job.ps]]
        while stack:
            v = stack.pop()
            if v != topo.index[job.ps] and not topo.is_switch(v):
                continue
            for u in adj[v]:
                if u not in seen:
                    seen.add(u)
                    stack.append(u)
        for w in job.workers:
            if topo.index[w] not in seen:
                problems.append(Violation(f"{job.id}: worker {w} not reachable from the PS over the plan's edges", job=job.id))
        if not s.groups <= s.entries:
            problems.append(Violation(f"{job.id}: a replicating switch without an entry", job=job.id))
        for v in s.groups:
            groups[v] += 1
        for v in s.entries:
            entries[v] += 1
    for e, x in load.items():
        cap = topo.edges[e].capacity
        if x > cap * (1 + REL_TOL):
            edge = topo.edges[e]
            problems.append(Violation(f"edge {topo.name(edge.tail)}->{topo.name(edge.head)}: load {x:.6g} > "
                                      f"capacity {cap:.6g}", edge=e))
    for v in topo.switches:
        node = topo.nodes[v]
        if node.group_capacity is not None and groups[v] > node.group_capacity:
            problems.append(Violation(f"switch {node.id}: {groups[v]} groups > capacity {node.group_capacity}", switch=v))
        if node.entry_capacity is not None and entries[v] > node.entry_capacity:
            problems.append(Violation(f"switch {node.id}: {entries[v]} entries > capacity {node.entry_capacity}",
                                      switch=v))
    for su in plan.switches:
        v = topo.index[su.id]
        if su.groups_used != groups[v] or su.entries_used != entries[v]:
            problems.append(Violation(f"switch {su.id}: reported usage does not match the jobs", switch=v))
    if ratios and abs(min(ratios) - plan.lam) > 1e-9 * max(1.0, plan.lam):
        problems.append(Violation(f"lambda {plan.lam} is not min rate/demand {min(ratios)}"))
    return problems
