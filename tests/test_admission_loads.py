"""Admissions one after another (controller/algorithm/loads.py): only the jobs that
share an edge with a job that came or went get their rates filled again, on what
the others leave; the arrays each plan carries for the next admission
(`Plan.loads`) equal those made afresh from its jobs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import planner
from controller.algorithm.admission import incremental, place
from controller.algorithm.baselines import greedy
from controller.algorithm.loads import kept_occupancy, loads_of
from controller.algorithm.model import Instance
from controller.algorithm.network import Network
from controller.algorithm.rates import concurrent_lambda, demand_load, table_counts
from controller.algorithm.topologies import fat_tree, leaf_spine
from controller.algorithm.validate import plan_violations
from controller.algorithm.workload import WorkloadSpec, generate_jobs

TOL = 1e-9


def topology(kind: str, groups: int | None, entries: int | None):
    if kind == "fat-tree":
        return fat_tree(4, group_capacity=groups, entry_capacity=entries)
    return leaf_spine(4, 2, 4, group_capacity=groups, entry_capacity=entries)


def same_arrays(a, b) -> bool:
    return (a.position == b.position and all(np.array_equal(getattr(a, f), getattr(b, f))
                                              for f in ("indptr", "edges", "copies", "owner", "demands", "groups",
                                                        "entries"))
            and np.allclose(a.rates, b.rates, rtol=0, atol=0))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["fat-tree", "leaf-spine"]),
    groups=st.sampled_from([None, 1, 2, 4]),
    entries=st.sampled_from([None, 2, 4]),
    n_first=st.integers(0, 8),
    steps=st.lists(st.tuples(st.integers(0, 2), st.lists(st.integers(0, 30), max_size=2)), min_size=1, max_size=6),
    seed=st.integers(0, 10_000),
    algorithm=st.sampled_from(["lp-rounding", "greedy"]),
)
def test_admissions_one_after_another_keep_links_tables_and_the_rates_of_unrelated_jobs(
    kind, groups, entries, n_first, steps, seed, algorithm
):
    topo = topology(kind, groups, entries)
    net = Network(topo)
    pool = generate_jobs(topo, WorkloadSpec(n_first + 2 * len(steps), 2, 6, seed=seed))
    jobs = list(pool[:n_first])
    fresh = iter(pool[n_first:])
    served = planner.run(Instance(topo, tuple(jobs)), algorithm)
    for added, leaving in steps:
        gone = {jobs[i % len(jobs)].id for i in leaving} if jobs else set()
        jobs = [j for j in jobs if j.id not in gone] + [j for _, j in zip(range(added), fresh)]
        inst = Instance(topo, tuple(jobs))
        plan = incremental(inst, served, topo, "max-concurrent", net=net)
        assert plan_violations(inst, plan) == []  # links, tables, reachability, λ = min rate/demand
        before = {jp.job.id: jp for jp in served.jobs}
        new = [jp for jp in plan.jobs if jp.job.id not in before]
        changed = {e for jp in new for e, _ in jp.structure.copies}
        changed |= {e for jp in served.jobs if jp.job.id in gone for e, _ in jp.structure.copies}
        for jp in plan.jobs:
            was = before.get(jp.job.id)
            if was is None:
                continue
            assert jp.structure == was.structure  # nobody moves
            if not changed & {e for e, _ in jp.structure.copies}:
                assert jp.rate == was.rate, f"{jp.job.id} shares no edge with the change but its rate changed"
            if not new:
                assert jp.rate >= was.rate * (1 - TOL), f"{jp.job.id} got slower when jobs only left"
        structures = [jp.structure for jp in plan.jobs]
        conc = concurrent_lambda(net.capacity, demand_load(net, inst.jobs, structures))
        assert plan.lam >= min(served.lam, conc) * (1 - TOL), (plan.lam, served.lam, conc)
        # the arrays carried to the next admission are those of this plan's jobs
        assert plan.loads is not None and plan.loads.jobs is plan.jobs
        assert same_arrays(plan.loads, loads_of(dataclasses.replace(plan, loads=None), net))
        served = plan


def test_only_the_neighbours_of_a_new_job_are_filled_again_on_a_large_fabric():
    """k=8, 60 jobs planned in full, one admitted: the jobs that share no edge with
    it keep their rates exactly, λ is at least a full max-min fill's, and its
    deletion gives the others back at least their rates before it came."""
    topo = fat_tree(8, group_capacity=4)
    net = Network(topo)
    jobs = generate_jobs(topo, WorkloadSpec(61, 3, 7, seed=8))
    full = planner.run(Instance(topo, jobs[:60]), "lp-rounding")
    plan = incremental(Instance(topo, jobs), full, topo, "max-concurrent", net=net)
    edges = {e for e, _ in plan.jobs[-1].structure.copies}
    touched = [i for i, jp in enumerate(full.jobs) if edges & {e for e, _ in jp.structure.copies}]
    assert 0 < len(touched) < 60
    assert all(plan.jobs[i].rate == full.jobs[i].rate for i in range(60) if i not in touched)
    structures = [jp.structure for jp in plan.jobs]
    assert plan.lam >= concurrent_lambda(net.capacity, demand_load(net, jobs, structures)) * (1 - TOL)
    back = incremental(Instance(topo, jobs[:60]), plan, topo, "max-concurrent", net=net)
    assert plan_violations(Instance(topo, jobs[:60]), back) == []
    assert all(b.rate >= a.rate * (1 - TOL) for a, b in zip(plan.jobs, back.jobs))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["fat-tree", "leaf-spine"]),
    groups=st.sampled_from([None, 1, 2]),
    n_first=st.integers(0, 10),
    leaving=st.lists(st.integers(0, 30), max_size=3),
    seed=st.integers(0, 10_000),
)
def test_new_jobs_are_placed_on_the_carried_occupancy_as_on_the_kept_jobs_counted_again(
    kind, groups, n_first, leaving, seed
):
    # the admission hands greedy the kept jobs' load and tables from the previous plan's
    # arrays (`kept_occupancy`) instead of the jobs: the same numbers to the last bit, so
    # the same structures as greedy counting the kept jobs itself
    topo = topology(kind, groups, None)
    net = Network(topo)
    pool = generate_jobs(topo, WorkloadSpec(n_first + 3, 2, 6, seed=seed))
    served = planner.run(Instance(topo, tuple(pool[:n_first])), "greedy")
    before = loads_of(served, net)
    gone = sorted({i % n_first for i in leaving}) if n_first else []
    kept = [jp for p, jp in enumerate(served.jobs) if p not in gone]
    occupied = kept_occupancy(before, gone, net.n_edges)
    assert np.array_equal(occupied.load, demand_load(net, tuple(jp.job for jp in kept), [jp.structure for jp in kept]))
    assert np.array_equal(occupied.groups, table_counts([jp.structure for jp in kept], "group_array", net.n_nodes))
    assert np.array_equal(occupied.entries, table_counts([jp.structure for jp in kept], "entry_array", net.n_nodes))
    new = tuple(pool[n_first:])
    counted = greedy(net, new, placed=[(jp.job, jp.structure) for jp in kept])
    assert greedy(net, new, occupied=occupied) == counted
    assert place(net, occupied, new) == counted


def test_greedy_takes_the_placed_jobs_or_their_occupancy_not_both():
    topo = topology("fat-tree", None, None)
    net = Network(topo)
    jobs = generate_jobs(topo, WorkloadSpec(2, 2, 4, seed=3))
    first = greedy(net, jobs[:1])
    occupied = kept_occupancy(loads_of(planner.run(Instance(topo, jobs[:1]), "greedy"), net), [], net.n_edges)
    with pytest.raises(ValueError, match="not both"):
        greedy(net, jobs[1:], placed=[(jobs[0], first[0])], occupied=occupied)
