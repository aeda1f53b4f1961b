"""A plan's jobs as arrays (`model.PlanLoads`), carried from one admission to the next.

An admission (`admission.incremental`) into a plan holding thousands of jobs
used to pass over every job's structure several times (its tables, its load at
full demand, the copy matrix) and to fill every job's rate again, max-min fair
(`rates.level_fill`): about 0.3 s at k=48 with 5,000 jobs, for a job that shares
links with a few dozen others. Here:

- `loads_of`: the previous plan's arrays, kept with it (made from its jobs once
  when it has none: after a full plan, a restore, a carried-over plan);
- `carried`: the new plan's arrays, in its job order: the kept jobs' columns
  gathered from the previous arrays, the placed ones' appended, the tables
  counted again only for the jobs that came or went; every rate the previous
  one (0 for a new job);
- `refilled`: the rates of the jobs that share an edge with a job that came or
  went (its neighbours) filled again together with the new jobs (`rates.refill`),
  on what the other jobs leave of those edges at their unchanged rates.

Every other job keeps its rate, so no link can go over its capacity: the jobs
filled again share only what the others leave. With a new job, they are filled
from 0, max-min fair among themselves. An edge of a job that came or went
carries only jobs filled again (all its kept jobs are neighbours), so it fills
at a share of the demands of at least its capacity over its load at full
demand, the concurrent λ of the new job set or more; any other edge held the
neighbours on it at their rates before, so it fills at no lower share than the
smallest of theirs. So λ (the smallest share of any job) is at least the
smaller of the previous plan's λ and the concurrent λ of the new job set: with
jobs only added, at least the λ of a max-min fill of every job, which starts
there. With jobs only gone, the neighbours grow from their rates into what the
gone ones freed (`rates.progressive_fill`): nobody gets slower. The full
max-min fill of every job runs again at the next full plan (the
re-optimisation after admissions).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence

import numpy as np
from scipy.sparse import csc_matrix

from controller.algorithm.baselines import Occupancy
from controller.algorithm.model import Job, Plan, PlanLoads, Structure, SwitchUsage
from controller.algorithm.network import Network
from controller.algorithm.rates import refill, switch_usage, table_counts


def loads_of(plan: Plan, net: Network) -> PlanLoads:
    """The arrays of `plan` (made on `net`'s topology): the ones kept with it if they
    describe its jobs, else made from them."""
    kept = plan.loads
    if kept is not None and kept.jobs is plan.jobs and len(kept.groups) == net.n_nodes:
        return kept
    structures = [jp.structure for jp in plan.jobs]
    rates = np.fromiter((jp.rate for jp in plan.jobs), float, len(plan.jobs))
    demands = np.fromiter((jp.job.demand for jp in plan.jobs), float, len(plan.jobs))
    indptr, edges, copies = _columns(structures)
    return PlanLoads(
        jobs=plan.jobs,
        position={jp.job.id: i for i, jp in enumerate(plan.jobs)},
        indptr=indptr,
        edges=edges,
        copies=copies,
        owner=np.repeat(np.arange(len(structures), dtype=np.int64), np.diff(indptr)),
        rates=rates,
        demands=demands,
        groups=table_counts(structures, "group_array", net.n_nodes),
        entries=table_counts(structures, "entry_array", net.n_nodes),
    )


def matched(before: PlanLoads, jobs: Sequence[Job]) -> tuple[list[int], list[int]]:
    """For each of `jobs`, its position in `before` if it is a job there (the same id
    and spec), else -1; and the positions (in `jobs`) of those matched to an equal
    but other Job object. In passes of builtins over the jobs: usually each is the
    very object the previous plan holds (`core.planning` keeps them)."""
    if not before.jobs:
        return [-1] * len(jobs), []
    source = list(map(before.position.get, [j.id for j in jobs], itertools.repeat(-1)))
    olds = [before.jobs[p].job for p in source]  # -1: the last one, not this job (told apart below)
    relabelled = []
    for i in itertools.compress(range(len(jobs)), map(operator.is_not, olds, jobs)):
        if source[i] >= 0 and olds[i] == jobs[i]:
            relabelled.append(i)
        else:
            source[i] = -1
    return source, relabelled


def switches_after(net: Network, switches: tuple[SwitchUsage, ...], before: PlanLoads, after: PlanLoads
                   ) -> tuple[SwitchUsage, ...]:
    """The switch usage of `after`'s plan: that of `before`'s (`switches`), with the
    switches whose tables changed made again (all of them if `switches` does not
    list the switches of `net` in order)."""
    order = net.topo.switches
    name = net.topo.name
    if (len(switches) != len(order) or not order or switches[0].id != name(order[0])
            or switches[-1].id != name(order[-1])):
        return switch_usage(net, after.groups, after.entries)
    changed = np.flatnonzero((before.groups != after.groups) | (before.entries != after.entries))
    if not len(changed):
        return switches
    at = np.searchsorted(np.asarray(order), changed)
    out = list(switches)
    for v, k in zip(changed.tolist(), at.tolist()):
        node = net.topo.nodes[v]
        if k >= len(order) or order[k] != v or out[k].id != node.id:
            return switch_usage(net, after.groups, after.entries)
        out[k] = SwitchUsage(node.id, int(after.groups[v]), node.group_capacity, int(after.entries[v]),
                             node.entry_capacity)
    return tuple(out)


def kept_tables(before: PlanLoads, gone: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(groups, entries) per node of the jobs of `before` but those at the positions `gone`."""
    groups, entries = before.groups.copy(), before.entries.copy()
    for p in gone:
        s = before.jobs[p].structure
        np.subtract.at(groups, s.group_array, 1)
        np.subtract.at(entries, s.entry_array, 1)
    return groups, entries


def kept_occupancy(before: PlanLoads, gone: Sequence[int], n_edges: int) -> Occupancy:
    """What the jobs of `before` but those at the positions `gone` hold: their load
    at full demand per edge (`n_edges` of them) and their tables (`kept_tables`),
    for `baselines.greedy` to place new jobs on. The load is `rates.demand_load`'s
    of those jobs in their order, to the last bit: the same products, summed in
    the same order (a gone job's adds 0)."""
    demands = before.demands
    if len(gone):
        demands = demands.copy()
        demands[list(gone)] = 0.0
    load = np.bincount(before.edges, weights=demands[before.owner] * before.copies, minlength=n_edges)
    groups, entries = kept_tables(before, gone)
    return Occupancy(load.astype(float, copy=False), groups, entries)


def carried(before: PlanLoads, source: np.ndarray, jobs: Sequence[Job], placed: dict[int, Structure],
            tables: tuple[np.ndarray, np.ndarray]) -> PlanLoads:
    """The arrays of the plan of `jobs` in which job i is job `source[i]` of `before`
    (same structure and rate) or, where `source[i]` is -1, a new job on
    `placed[i]` at rate 0; `tables`: the kept jobs' (groups, entries) per node
    (`kept_tables`). Its `jobs` is empty until the plan's tuple is made."""
    kept = source >= 0
    lengths = np.zeros(len(source), dtype=np.int64)
    lengths[kept] = np.diff(before.indptr)[source[kept]]
    for i, s in placed.items():
        lengths[i] = len(s.copies)
    indptr = np.zeros(len(source) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    edges = np.empty(int(indptr[-1]), dtype=np.int64)
    copies = np.empty(int(indptr[-1]), dtype=float)
    # the kept jobs' entries, column after column: entry t of kept job i is entry
    # (before.indptr[source[i]] - indptr[i]) + (its place here) of `before`
    at = _entries(indptr[:-1][kept], lengths[kept])
    shift = np.repeat(before.indptr[:-1][source[kept]] - indptr[:-1][kept], lengths[kept])
    edges[at] = before.edges[at + shift]
    copies[at] = before.copies[at + shift]
    rates = np.zeros(len(source))
    rates[kept] = before.rates[source[kept]]
    demands = np.zeros(len(source))
    demands[kept] = before.demands[source[kept]]
    groups, entries = tables[0].copy(), tables[1].copy()
    for i, s in placed.items():
        demands[i] = jobs[i].demand
        edges[indptr[i]:indptr[i + 1]] = s.edge_array
        copies[indptr[i]:indptr[i + 1]] = s.copy_array
        np.add.at(groups, s.group_array, 1)
        np.add.at(entries, s.entry_array, 1)
    n = len(before.jobs)
    if len(source) >= n and np.array_equal(source[:n], np.arange(n)):  # jobs only appended: the positions stay
        position = dict(before.position)
        position.update((jobs[i].id, i) for i in range(n, len(jobs)))
    else:
        position = {j.id: i for i, j in enumerate(jobs)}
    return PlanLoads(
        jobs=(),
        position=position,
        indptr=indptr,
        edges=edges,
        copies=copies,
        owner=np.repeat(np.arange(len(source), dtype=np.int64), lengths),
        rates=rates,
        demands=demands,
        groups=groups,
        entries=entries,
    )


def refilled(net: Network, before: PlanLoads, gone: Sequence[int], after: PlanLoads, new: Sequence[int]) -> np.ndarray:
    """The rates of `after`'s jobs (`carried` from `before` without the jobs at the
    positions `gone`, with the jobs at its positions `new` placed): its rates,
    but those of the new jobs and of the kept jobs sharing an edge with a new or a
    gone one, filled again (see the module docstring)."""
    rates = after.rates.copy()
    changed = np.zeros(net.n_edges, dtype=bool)
    for p in gone:
        changed[before.edges[before.indptr[p]:before.indptr[p + 1]]] = True
    for i in new:
        changed[after.edges[after.indptr[i]:after.indptr[i + 1]]] = True
    is_new = np.zeros(len(rates), dtype=bool)
    is_new[list(new)] = True
    neighbours = np.unique(after.owner[changed[after.edges] & ~is_new[after.owner]])
    jobs = np.union1d(neighbours, np.asarray(new, dtype=np.int64))  # sorted: the fill's job order
    if not len(jobs):
        return rates
    in_sub = np.zeros(len(rates), dtype=bool)
    in_sub[jobs] = True
    mine = in_sub[after.owner]
    used, row = np.unique(after.edges[mine], return_inverse=True)
    A = csc_matrix((after.copies[mine], (row, np.searchsorted(jobs, after.owner[mine]))),
                   shape=(len(used), len(jobs)))
    on = np.zeros(net.n_edges, dtype=bool)
    on[used] = True
    others = on[after.edges] & ~mine  # the other jobs' copies on those edges, at their rates
    fixed = np.bincount(after.edges[others], weights=after.copies[others] * rates[after.owner[others]],
                        minlength=net.n_edges)[used]
    start = None if len(new) else rates[jobs]  # jobs only gone: the neighbours grow from their rates
    rates[jobs] = refill(A, after.demands[jobs], net.capacity[used] - fixed, start)
    return rates


def _columns(structures: Sequence[Structure]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, edges, copies) of `structures`, one column each."""
    indptr = np.zeros(len(structures) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(s.copies) for s in structures), np.int64, len(structures)), out=indptr[1:])
    if not structures:
        return indptr, np.zeros(0, dtype=np.int64), np.zeros(0)
    return (indptr, np.concatenate([s.edge_array for s in structures]).astype(np.int64, copy=False),
            np.concatenate([s.copy_array for s in structures]))


def _entries(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions starts[k] .. starts[k] + lengths[k] - 1, for every k in turn."""
    total = int(lengths.sum())
    return np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(total, dtype=np.int64)
