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
- rates (max-concurrent): the new jobs and the kept jobs that share an edge with
  a job that came or went are filled again, max-min fair, on what the other jobs
  leave of those edges; every other job keeps its rate (`loads.refilled`: with
  jobs only added λ is at least that of a max-min fill of every job, with jobs
  only gone nobody gets slower, and a job that shares no edge with the change
  costs nothing). Max-sum: the rate LP over every job again
  (`rates.allocate`). Either way no link is exceeded; only rates change for kept
  jobs. The plan keeps its jobs as arrays (`Plan.loads`) for the next admission,
  so that it passes over every job as little as it can.

The result is a `Plan` (algorithm "incremental"). Its LP bound is the previous
plan's when every job of that plan is kept unchanged and the objective is
max-concurrent: restricting any fractional plan of more jobs to the old ones
gives one of the old jobs with the same λ, so an upper bound on λ of the old job
set bounds the new one too. Otherwise (a job gone or changed, or max-sum, whose
optimum can only grow with more jobs) it has none until the next full plan
computes the LP of the whole job set. Pure: no clock, no I/O (the caller
measures `runtime_s`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from controller.algorithm.baselines import GREEDY_ETA, Occupancy, _TableUsage, greedy
from controller.algorithm.loads import carried, kept_occupancy, kept_tables, loads_of, matched, refilled, switches_after
from controller.algorithm.model import Instance, Job, JobPlan, Plan, Structure, Topology
from controller.algorithm.network import Network
from controller.algorithm.rates import allocate, assemble_plan, demand_load

ALGORITHM = "incremental"
_STRUCTURE = operator.attrgetter("structure")


class NotIncremental(ValueError):
    """The previous plan cannot be kept as it is (another topology, or its tables
    no longer fit the budgets): plan in full instead."""


def same_topology(a: Topology, b: Topology) -> bool:
    """True if `a` and `b` have the same nodes (with their budgets) and links, in
    the same order, so that node and edge indices mean the same in both."""
    return a is b or (a.nodes == b.nodes and a.links == b.links)


def check_fits(net: Network, groups: np.ndarray, entries: np.ndarray) -> None:
    """Raise NotIncremental if the jobs kept, holding `groups` and `entries` per
    node, exceed a table on their own."""
    over = np.flatnonzero((groups > net.group_cap) | (entries > net.entry_cap))
    if len(over):
        raise NotIncremental(f"switch {net.topo.name(int(over[0]))}: the kept jobs need more table entries than its "
                             "budget")


def place(net: Network, occupied: Occupancy, new: Sequence[Job], eta: float = GREEDY_ETA) -> list[Structure]:
    """Structures for the `new` jobs (in their order) on what the jobs already
    placed leave (`occupied`: their load at full demand and their tables;
    `baselines.greedy` with them placed). Raises NotIncremental if the placed jobs
    alone exceed a table."""
    check_fits(net, occupied.groups, occupied.entries)
    if not new:
        return []
    return greedy(net, tuple(new), eta, occupied=occupied)


def incremental(instance: Instance, previous: Plan, previous_topology: Topology, objective: str,
                net: Network | None = None) -> Plan:
    """The plan of `instance` that keeps every unchanged job of `previous` (made on
    `previous_topology`) on its structure and places the others; raises
    NotIncremental when the topologies differ or the kept jobs no longer fit.
    `net`: the Network of `instance.topology` if the caller has it (building one
    recognises the fabric again: about a third of an admission at k=16)."""
    if not same_topology(instance.topology, previous_topology):
        raise NotIncremental("the topology changed since the previous plan")
    if net is None or net.topo is not instance.topology:
        net = Network(instance.topology)
    before = loads_of(previous, net)
    old = previous.jobs
    source, relabelled = matched(before, instance.jobs)
    new = [i for i, p in enumerate(source) if p < 0] if -1 in source else []
    kept = len(instance.jobs) - len(new)
    gone = sorted(set(range(len(old))).difference(source)) if kept < len(old) else []
    placed: dict[int, Structure] = {}
    if new:  # placed on what the kept jobs hold, counted from the previous plan's arrays
        occupied = kept_occupancy(before, gone, net.n_edges)
        tables = occupied.groups, occupied.entries
        placed = dict(zip(new, place(net, occupied, [instance.jobs[i] for i in new])))
    else:
        tables = kept_tables(before, gone)
        check_fits(net, *tables)
    after = carried(before, np.asarray(source, dtype=np.int64), instance.jobs, placed, tables)
    if objective == "max-sum":  # the LP over every job
        structures = [old[p].structure if p >= 0 else placed[i] for i, p in enumerate(source)]
        rates = allocate(net, instance.jobs, structures, objective)
    else:
        rates = refilled(net, before, gone, after, new)
    # each kept job's part of the plan as it was, but for a new rate or another (equal) Job object
    jobs = [old[p] for p in source] if old else [None] * len(source)
    values = rates.tolist()
    for i in sorted({*relabelled, *np.flatnonzero(rates != after.rates).tolist()}.difference(new)):
        jobs[i] = JobPlan(instance.jobs[i], values[i], jobs[i].structure)
    for i, s in placed.items():
        jobs[i] = JobPlan(instance.jobs[i], values[i], s)
    plan_jobs = tuple(jobs)
    # the kept jobs carry their columns on, for the next warm-started full plan
    carried_columns = [previous.columns[p] for p in source] if len(previous.columns) == len(old) and old else []
    structures = list(map(_STRUCTURE, plan_jobs))
    columns = [c if c and (c[0] is s or c[0] == s) else (s,)
               for c, s in itertools.zip_longest(carried_columns, structures, fillvalue=())]
    for i, s in placed.items():
        columns[i] = (s,)
    note = f"incremental: {len(new)} placed, {kept} kept, {len(old) - kept} gone"
    # only jobs added: the previous bound still bounds λ (see the module docstring)
    bound = previous.lp_bound if objective != "max-sum" and kept == len(old) else None
    return Plan(
        algorithm=ALGORITHM,
        objective=objective,
        lam=float(np.min(rates / after.demands)) if len(plan_jobs) else 1.0,
        throughput=float(rates.sum()),
        lp_bound=bound,
        kappa=net.kappa(),
        beta=None,
        runtime_s=0.0,
        jobs=plan_jobs,
        switches=switches_after(net, previous.switches, before, after),
        notes=(note,),
        columns=tuple(columns),
        loads=dataclasses.replace(after, jobs=plan_jobs, rates=rates),
    )


def churn_budget(jobs: int, max_churn: int, max_churn_share: float) -> int:
    """The jobs a re-optimisation of `jobs` jobs may move to new structures (0: no
    limit; `within_churn`'s `max_moves`): the smaller of `max_churn` (0: no count
    limit) and `max_churn_share` of the jobs rounded up, at least 1 (0: no share
    limit). Raises ValueError for a negative count or a share outside [0, 1]."""
    if max_churn < 0:
        raise ValueError(f"max_churn must be >= 0, got {max_churn}")
    if not 0.0 <= max_churn_share <= 1.0:
        raise ValueError(f"max_churn_share must be within [0, 1], got {max_churn_share}")
    limits = [max_churn] if max_churn > 0 else []
    if max_churn_share > 0:
        limits.append(max(1, math.ceil(max_churn_share * jobs - 1e-9)))
    return min(limits, default=0)


def within_churn(instance: Instance, served: Plan, full: Plan, objective: str, max_moves: int) -> Plan:
    """The re-optimised plan to serve when at most `max_moves` jobs may change
    structure (0: no limit). `served` and `full` plan the same jobs on
    `instance.topology`; if the full plan moves no more jobs than allowed it is
    returned as it is.

    Otherwise the served structures are kept and moves to full-plan structures
    are taken one at a time, up to `max_moves`: each round takes, among the moves
    that keep every switch's tables within budget, the one giving the largest
    concurrent λ at full demand, ties broken by the lowest congestion potential
    Σ exp(η·load/capacity) (a move that relieves a bottleneck other jobs share
    counts before λ itself rises), then by job id. A move need not gain on its
    own: with tight tables a job often takes its new structure only after another
    has left the slots it needs. The search ends when no move fits. Rates are
    allocated again and the full plan's LP bound (the same job set) is kept. The
    caller decides whether the result gains enough to replace the served plan."""
    old = {jp.job.id: jp for jp in served.jobs}
    new = {jp.job.id: jp for jp in full.jobs}
    if set(old) != set(new) or {jp.job for jp in served.jobs} != {jp.job for jp in full.jobs}:
        raise ValueError("the served and the full plan have different jobs")
    moved = sorted(jid for jid in new if new[jid].structure != old[jid].structure)
    if max_moves <= 0 or len(moved) <= max_moves:
        return full
    net = Network(instance.topology)
    jobs = instance.jobs
    chosen = {jid: jp.structure for jid, jp in old.items()}
    cap = net.capacity
    load = demand_load(net, jobs, [chosen[j.id] for j in jobs])
    # each candidate's change of the full-demand load, one row per moved job
    delta = np.zeros((len(moved), net.n_edges))
    for i, jid in enumerate(moved):
        d = old[jid].job.demand
        for s, sign in ((new[jid].structure, 1.0), (old[jid].structure, -1.0)):
            if s.copies:
                np.add.at(delta[i], s.edge_array, sign * d * s.copy_array)
    usage = _TableUsage(net)
    for st in chosen.values():
        usage.add(st)

    def potential(x: np.ndarray) -> np.ndarray:
        return np.exp(GREEDY_ETA * x / cap).sum(axis=-1)

    open_ = list(range(len(moved)))
    taken = 0
    while taken < max_moves and open_:
        loads = load + delta[open_]
        with np.errstate(divide="ignore"):
            ratio = np.where(loads > 0, cap / np.where(loads > 0, loads, 1.0), np.inf)
        lams = np.minimum(1.0, ratio.min(axis=1))
        pots = potential(loads)
        best = None
        for k in sorted(range(len(open_)), key=lambda k: (-lams[k], pots[k], moved[open_[k]])):
            jid = moved[open_[k]]
            usage.remove(old[jid].structure)
            usage.add(new[jid].structure)
            if usage.within_budgets():
                best = k
                break
            usage.remove(new[jid].structure)
            usage.add(old[jid].structure)
        if best is None:
            break
        i = open_.pop(best)
        chosen[moved[i]] = new[moved[i]].structure
        load = load + delta[i]
        taken += 1
    structures = [chosen[j.id] for j in jobs]
    rates = allocate(net, jobs, structures, objective)
    note = f"re-optimisation within churn: {taken} of {len(moved)} moved jobs took their new structure"
    # the full plan's columns stay the warm start, each job's served structure first
    full_columns = dict(zip((jp.job.id for jp in full.jobs), full.columns))
    columns = tuple((s, *(c for c in full_columns.get(j.id, ()) if c != s)) for j, s in zip(jobs, structures))
    return assemble_plan(net, jobs, structures, rates, full.algorithm, objective, full.runtime_s,
                         lp_bound=full.lp_bound, beta=full.beta, notes=(*full.notes, note), columns=columns)


@dataclass(frozen=True)
class Reoptimisation:
    """What a re-optimisation decides (`reoptimisation`)."""

    plan: Plan  # the full plan, kept within the churn budget
    bounded: bool  # the churn budget held some of the full plan's moves back
    adopted: bool  # it gains enough over the served plan to replace it


def reoptimisation(instance: Instance, served: Plan, served_topology: Topology, full: Plan, objective: str,
                   max_churn: int, min_gain: float) -> Reoptimisation:
    """The re-optimisation decision, the controller's (`core.planning`) and the
    cluster simulation's alike: the `full` plan of `instance` is kept within the
    churn budget (`within_churn`, `max_churn` moves; only when `served` was made on
    the same topology, `served_topology`) and adopted only if it raises λ or the
    aggregate throughput by more than `min_gain` (relative) over `served`."""
    plan, bounded = full, False
    if same_topology(instance.topology, served_topology):
        plan = within_churn(instance, served, full, objective, max_churn)
        bounded = plan is not full
    adopted = (plan.lam > served.lam * (1 + min_gain) + 1e-12
               or plan.throughput > served.throughput * (1 + min_gain) + 1e-9)
    return Reoptimisation(plan, bounded, adopted)
