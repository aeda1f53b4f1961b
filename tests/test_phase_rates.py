"""Phase-aware rates (controller/algorithm/phases.py): unit and property tests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import planner
from controller.algorithm.model import Instance, Job
from controller.algorithm.network import Network
from controller.algorithm.phases import applied, phase_rates
from controller.algorithm.rates import copy_matrix
from controller.algorithm.topologies import fat_tree, leaf_spine
from controller.algorithm.validate import plan_violations
from controller.algorithm.workload import WorkloadSpec, generate_jobs

TOL = 1e-9


def _loads(net: Network, plan, rates: dict[str, float]) -> np.ndarray:
    """Every edge's load when each job sends at its rate here (else its planned one)."""
    A = copy_matrix(net, [jp.structure for jp in plan.jobs])
    return A @ np.array([rates.get(jp.job.id, jp.rate) for jp in plan.jobs])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["fat-tree", "leaf-spine"]),
    groups=st.sampled_from([None, 1, 2]),
    n=st.integers(1, 10),
    seed=st.integers(0, 10_000),
    algorithm=st.sampled_from(["lp-rounding", "spt", "greedy", "unicast"]),
    phased_bits=st.integers(0, 2**10 - 1),
    on_bits=st.integers(0, 2**10 - 1),
    idle_share=st.sampled_from([0.0, 0.05, 0.5, 1.0]),
)
def test_no_link_over_capacity_and_every_broadcasting_job_at_least_its_plan(
    kind, groups, n, seed, algorithm, phased_bits, on_bits, idle_share
):
    topo = (fat_tree(4, group_capacity=groups) if kind == "fat-tree"
            else leaf_spine(4, 2, 4, group_capacity=groups))
    jobs = generate_jobs(topo, WorkloadSpec(n, 2, 6, seed=seed))
    instance = Instance(topo, jobs)
    plan = planner.run(instance, algorithm)
    net = Network(topo)
    ids = [jp.job.id for jp in plan.jobs]
    phased = {j for i, j in enumerate(ids) if phased_bits >> i & 1}
    on = {j for i, j in enumerate(ids) if on_bits >> i & 1}
    rates = phase_rates(net, plan, phased, on, idle_share)
    assert set(rates) == {jp.job.id for jp in plan.jobs if jp.job.id in phased and jp.rate > 0}
    load = _loads(net, plan, rates)
    assert np.all(load <= net.capacity * (1 + TOL)), "a link over its capacity"
    for jp in plan.jobs:
        if jp.job.id not in rates:
            continue
        r = rates[jp.job.id]
        if jp.job.id in on:
            assert r >= min(jp.rate, jp.job.demand) * (1 - TOL), "a broadcasting job below its plan"
            assert r <= jp.job.demand * (1 + TOL), "a job above its demand"
        else:
            assert r == pytest.approx(idle_share * jp.rate)
    # the plan with these rates is a valid plan of the same instance (tables, reachability, links);
    # its λ, the plan's, is no longer min rate/demand
    assert [v for v in plan_violations(instance, applied(plan, rates)) if not v.startswith("lambda ")] == []


def _two_jobs_sharing_a_link():
    """Two jobs whose PSs share nothing but whose workers sit behind one 10 Mbit/s link:
    the plan gives each 5 Mbit/s there."""
    topo = leaf_spine(2, 1, 2, capacity=10e6)
    hosts = [topo.name(v) for v in topo.hosts]
    # leaf 0 holds hosts 0, 1; leaf 1 holds hosts 2, 3: both jobs send from leaf 0 to leaf 1
    jobs = (Job("a", hosts[0], (hosts[2],), demand=100e6), Job("b", hosts[1], (hosts[3],), demand=100e6))
    plan = planner.run(Instance(topo, jobs), "lp-rounding")
    return Network(topo), plan


def test_a_job_broadcasting_alone_takes_what_an_idle_phased_job_leaves():
    net, plan = _two_jobs_sharing_a_link()
    assert [jp.rate for jp in plan.jobs] == pytest.approx([5e6, 5e6])
    rates = phase_rates(net, plan, {"a", "b"}, {"a"}, 0.05)
    assert rates == pytest.approx({"a": 9.75e6, "b": 0.25e6})
    both = phase_rates(net, plan, {"a", "b"}, {"a", "b"}, 0.05)
    assert both == pytest.approx({"a": 5e6, "b": 5e6})


def test_a_job_that_announces_nothing_keeps_its_planned_share():
    net, plan = _two_jobs_sharing_a_link()
    # b never announces: a broadcasting alone gets no more than its plan
    assert phase_rates(net, plan, {"a"}, {"a"}, 0.05) == pytest.approx({"a": 5e6})
    # and a job announcing "broadcasting" all along cannot push an unannounced one below its plan
    assert phase_rates(net, plan, {"a"}, {"a", "b"}, 0.05) == pytest.approx({"a": 5e6})


def test_a_bad_idle_share_is_refused():
    net, plan = _two_jobs_sharing_a_link()
    with pytest.raises(ValueError, match="idle_share"):
        phase_rates(net, plan, {"a"}, set(), 1.5)
