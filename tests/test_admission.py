"""Incremental admission (controller/algorithm/admission.py): unit and property tests."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import planner
from controller.algorithm.admission import NotIncremental, incremental
from controller.algorithm.model import Instance, Job
from controller.algorithm.topologies import fat_tree, leaf_spine
from controller.algorithm.validate import plan_violations
from controller.algorithm.workload import WorkloadSpec, generate_jobs


def topology(kind: str, groups: int | None, entries: int | None):
    if kind == "fat-tree":
        return fat_tree(4, group_capacity=groups, entry_capacity=entries)
    return leaf_spine(4, 2, 4, group_capacity=groups, entry_capacity=entries)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["fat-tree", "leaf-spine"]),
    groups=st.sampled_from([None, 0, 1, 2]),
    entries=st.sampled_from([None, 1, 3]),
    n_before=st.integers(0, 8),
    n_new=st.integers(0, 4),
    gone=st.sets(st.integers(0, 7), max_size=3),
    seed=st.integers(0, 10_000),
    algorithm=st.sampled_from(["lp-rounding", "spt", "greedy"]),
)
def test_admission_keeps_every_other_job_and_never_exceeds_a_link_or_table(
    kind, groups, entries, n_before, n_new, gone, seed, algorithm
):
    topo = topology(kind, groups, entries)
    jobs = generate_jobs(topo, WorkloadSpec(n_before + n_new, 2, 6, seed=seed))
    before = Instance(topo, jobs[:n_before])
    previous = planner.run(before, algorithm)
    kept = tuple(j for i, j in enumerate(jobs[:n_before]) if i not in gone)
    after = Instance(topo, kept + jobs[n_before:])
    plan = incremental(after, previous, topo, "max-concurrent")
    assert plan_violations(after, plan) == []  # links, tables, reachability, every worker served
    old = {jp.job.id: jp.structure for jp in previous.jobs}
    for jp in plan.jobs:
        if jp.job.id in old:
            assert jp.structure == old[jp.job.id], f"job {jp.job.id} moved"
    assert [jp.job for jp in plan.jobs] == list(after.jobs)
    assert plan.algorithm == "incremental"
    if gone & set(range(n_before)) or previous.lp_bound is None:
        assert plan.lp_bound is None
    else:
        # only jobs added: the previous plan's bound is kept, and it still bounds λ,
        # that of a full plan of the new job set included
        assert plan.lp_bound == previous.lp_bound
        assert plan.lam <= plan.lp_bound * (1 + 1e-9)
        assert planner.run(after, "lp-rounding").lam <= plan.lp_bound * (1 + 1e-6)


def test_a_max_sum_admission_carries_no_bound():
    topo = fat_tree(4)
    jobs = generate_jobs(topo, WorkloadSpec(6, 2, 6, seed=2))
    full = planner.run(Instance(topo, jobs[:4]), "lp-rounding", "max-sum")
    assert full.lp_bound is not None
    assert incremental(Instance(topo, jobs), full, topo, "max-sum").lp_bound is None


def test_a_deleted_job_frees_its_capacity():
    topo = fat_tree(4)
    jobs = generate_jobs(topo, WorkloadSpec(10, 4, 8, seed=3))
    full = planner.run(Instance(topo, jobs), "lp-rounding")
    fewer = incremental(Instance(topo, jobs[2:]), full, topo, "max-concurrent")
    assert fewer.lam >= full.lam - 1e-9
    assert fewer.throughput >= sum(jp.rate for jp in full.jobs[2:]) - 1e-6  # nobody left is slower


def test_a_changed_job_is_placed_again_and_the_rest_stay():
    topo = leaf_spine(4, 2, 4, group_capacity=2)
    jobs = generate_jobs(topo, WorkloadSpec(6, 3, 6, seed=5))
    full = planner.run(Instance(topo, jobs), "lp-rounding")
    changed = dataclasses.replace(jobs[0], demand=jobs[0].demand * 2)
    plan = incremental(Instance(topo, (changed, *jobs[1:])), full, topo, "max-concurrent")
    assert plan.notes == ("incremental: 1 placed, 5 kept, 1 gone",)
    assert [jp.structure for jp in plan.jobs[1:]] == [jp.structure for jp in full.jobs[1:]]


def test_another_topology_or_budgets_that_no_longer_fit_are_refused():
    topo = fat_tree(4)
    jobs = generate_jobs(topo, WorkloadSpec(8, 4, 8, seed=1))
    full = planner.run(Instance(topo, jobs), "lp-rounding")
    with pytest.raises(NotIncremental, match="topology changed"):
        incremental(Instance(fat_tree(4, group_capacity=1), jobs), full, topo, "max-concurrent")
    # the same topology object but the caller passes budgets the kept jobs exceed
    used = max(su.groups_used for su in full.switches)
    assert used >= 1
    tight = fat_tree(4, group_capacity=used - 1)
    with pytest.raises(NotIncremental, match="budget"):
        incremental(Instance(tight, jobs), full, tight, "max-concurrent")


def test_admission_is_fast_and_as_good_as_a_full_plan_on_a_large_fabric():
    """k=16 fat-tree (G=16), 200 jobs planned in full, the 201st admitted: the
    admission keeps λ within 10% of a full plan of the 201 jobs (a plan quality
    check, not a timing test: the timing is in the benchmark)."""
    topo = fat_tree(16, group_capacity=16)
    jobs = generate_jobs(topo, WorkloadSpec(201, 3, 11, seed=1))
    full = planner.run(Instance(topo, jobs[:200]), "lp-rounding")
    inc = incremental(Instance(topo, jobs), full, topo, "max-concurrent")
    ref = planner.run(Instance(topo, jobs), "lp-rounding")
    assert plan_violations(Instance(topo, jobs), inc) == []
    assert inc.lam >= 0.9 * ref.lam, (inc.lam, ref.lam)


def test_new_job_ids_are_matched_by_id_and_content():
    topo = fat_tree(4)
    a = Job("a", "host-0", ("host-1", "host-5"), 1e9)
    b = Job("b", "host-2", ("host-9",), 1e9)
    full = planner.run(Instance(topo, (a,)), "spt")
    plan = incremental(Instance(topo, (b, a)), full, topo, "max-concurrent")
    assert [jp.job.id for jp in plan.jobs] == ["b", "a"]
    assert plan.jobs[1].structure == full.jobs[0].structure


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["fat-tree", "leaf-spine"]),
    groups=st.sampled_from([None, 1, 2]),
    entries=st.sampled_from([None, 2, 4]),
    n=st.integers(2, 9),
    seed=st.integers(0, 10_000),
    budget=st.integers(0, 5),
)
def test_a_reoptimisation_within_churn_moves_at_most_the_budget_and_stays_valid(kind, groups, entries, n, seed, budget):
    from controller.algorithm.admission import within_churn

    topo = topology(kind, groups, entries)
    jobs = generate_jobs(topo, WorkloadSpec(n, 2, 6, seed=seed))
    served = planner.run(Instance(topo, ()), "spt")
    for i in range(n):  # admitted one by one, as the controller serves them
        served = incremental(Instance(topo, jobs[: i + 1]), served, topo, "max-concurrent")
    full = planner.run(Instance(topo, jobs), "lp-rounding", seed=seed)
    inst = Instance(topo, jobs)
    got = within_churn(inst, served, full, "max-concurrent", budget)
    assert plan_violations(inst, got) == []
    old = {jp.job.id: jp.structure for jp in served.jobs}
    new = {jp.job.id: jp.structure for jp in full.jobs}
    changed = [jp.job.id for jp in got.jobs if jp.structure != old[jp.job.id]]
    assert all(jp.structure == new[jp.job.id] for jp in got.jobs if jp.job.id in changed)
    wanted = sum(1 for j in old if old[j] != new[j])
    if budget == 0 or wanted <= budget:
        assert got is full
    else:
        assert len(changed) <= budget
        assert got.lp_bound == full.lp_bound


def test_within_churn_refuses_plans_of_different_jobs():
    from controller.algorithm.admission import within_churn

    topo = fat_tree(4)
    jobs = generate_jobs(topo, WorkloadSpec(3, 2, 4, seed=1))
    a = planner.run(Instance(topo, jobs), "spt")
    b = planner.run(Instance(topo, jobs[:2]), "spt")
    with pytest.raises(ValueError, match="different jobs"):
        within_churn(Instance(topo, jobs), a, b, "max-concurrent", 1)
