"""Incremental planning: admit new jobs into a plan without touching the jobs it holds.

A full plan (lp-rounding) re-decides every job's structure; between two of them
a job that registers or leaves should cost milliseconds and move nobody else.
`incremental` takes the previous plan on the same topology and the new job set:

- a job of the previous plan that is still there, unchanged (same PS, workers,
  demand and weight), keeps its structure exactly;
- a job no longer there is dropped, and its links and table slots are free again;
- each new job is placed on what the kept ones leave, one at a time (largest
  demand × workers first), as `baselines.greedy` places jobs: three candidates
  (the cheapest structure of the family under congestion and table-scarcity
  prices, the reverse-path tree pruned to the tables left, pure unicast) and the
  one that keeps the largest link utilisation (at full demand) lowest. Every
  candidate respects the tables the kept jobs leave, so no table is exceeded;
- rates are allocated again over all jobs by the objective's usual allocation
  (`rates.allocate`), so no link is exceeded; only rates change for kept jobs.

The result is a `Plan` (algorithm "incremental") without an LP bound: the bound
needs the LP of the whole job set, which the next full plan computes. Pure: no
clock, no I/O (the caller measures `runtime_s`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .baselines import GREEDY_ETA, _TableUsage, greedy
from .model import Instance, Job, Plan, Structure, Topology
from .network import Network
from .rates import allocate, assemble_plan

ALGORITHM = "incremental"


class NotIncremental(ValueError):
    """The previous plan cannot be kept as it is (another topology, or its tables
    no longer fit the budgets): plan in full instead."""


def same_topology(a: Topology, b: Topology) -> bool:
    """True if `a` and `b` have the same nodes (with their budgets) and links, in
    the same order, so that node and edge indices mean the same in both."""
    return a is b or (a.nodes == b.nodes and a.links == b.links)


def place(
    net: Network, placed: Sequence[tuple[Job, Structure]], new: Sequence[Job], eta: float = GREEDY_ETA
) -> list[Structure]:
    """Structures for the `new` jobs (in their order) on what the `placed` jobs
    leave: their tables and their load at full demand (`baselines.greedy` with
    them placed). Raises NotIncremental if the placed jobs alone exceed a table."""
    usage = _TableUsage(net)
    for _, s in placed:
        usage.add(s)
    for v in net.topo.switches:
        if usage.groups[v] > net.group_cap[v] or usage.entries[v] > net.entry_cap[v]:
            raise NotIncremental(f"switch {net.topo.name(v)}: the kept jobs need more table entries than its budget")
    return greedy(net, tuple(new), eta, placed)


def incremental(instance: Instance, previous: Plan, previous_topology: Topology, objective: str) -> Plan:
    """The plan of `instance` that keeps every unchanged job of `previous` (made on
    `previous_topology`) on its structure and places the others; raises
    NotIncremental when the topologies differ or the kept jobs no longer fit."""
    if not same_topology(instance.topology, previous_topology):
        raise NotIncremental("the topology changed since the previous plan")
    net = Network(instance.topology)
    before = {jp.job.id: jp for jp in previous.jobs}
    kept: list[tuple[Job, Structure]] = []
    new: list[Job] = []
    for job in instance.jobs:
        jp = before.get(job.id)
        if jp is not None and jp.job == job:
            kept.append((job, jp.structure))
        else:
            new.append(job)
    placed = dict(zip((j.id for j in new), place(net, kept, new)))
    kept_by_id = {job.id: s for job, s in kept}
    structures = [kept_by_id[j.id] if j.id in kept_by_id else placed[j.id] for j in instance.jobs]
    rates = allocate(net, instance.jobs, structures, objective)
    note = f"incremental: {len(new)} placed, {len(kept)} kept, {len(before) - len(kept)} gone"
    return assemble_plan(net, instance.jobs, structures, rates, ALGORITHM, objective, 0.0, notes=(note,))
