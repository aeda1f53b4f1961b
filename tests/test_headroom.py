"""The headroom stage (controller/algorithm/headroom.py): rates held, tables and links
kept, no job's alone rate lowered, and on the iteration bench's fabric every job's
structure at the full rate of a core link."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.algorithm import baselines, headroom, plan
from controller.algorithm.model import Instance, Job, Link, Topology
from controller.algorithm.network import Network
from controller.algorithm.pricing import Pricer
from controller.algorithm.rates import allocate, assemble_plan
from controller.algorithm.topologies import fat_tree
from controller.algorithm.validate import plan_violations
from tests.test_properties import fat_tree_instances, graph_instances, leaf_spine_instances
from tests.test_traffic import baseline_start


def alone_rates(net: Network, jobs, structures) -> np.ndarray:
    return np.array([headroom.alone_rate(net, job, s) for job, s in zip(jobs, structures)])


def check_stage(inst: Instance, start: str, use_pricer: bool, objective: str = "max-concurrent") -> None:
    """Run the stage on `start`'s plan with every baseline's structures as candidates
    (and, with `use_pricer`, the family or the priced structures)."""
    net, jobs, cur, rates, pools = baseline_start(inst, start, objective)
    new, new_rates = headroom.raise_headroom(net, jobs, cur, rates, pools, Pricer(net, jobs) if use_pricer else None)
    assert len(new) == len(jobs)
    assert np.all(new_rates >= rates), "a job's rate was lowered"
    d = np.array([j.demand for j in jobs])
    assert np.all(new_rates <= d * (1 + 1e-12))
    before, after = alone_rates(net, jobs, cur), alone_rates(net, jobs, new)
    assert np.all(after >= before * (1 - 1e-9)), "a job's alone rate was lowered"
    if any(a is not b for a, b in zip(new, cur)):
        assert np.any(after > before * (1 + 1e-9)), "jobs moved for no gain"
    if not use_pricer:
        for j, s in enumerate(new):
            assert s.key in {c.key for c in [cur[j], *pools[j]]}, "a structure from outside the candidates"
    p = assemble_plan(net, jobs, new, new_rates, "stage", objective, 0.0)
    assert plan_violations(inst, p) == []  # links and tables within budget, every worker reached
    if jobs:
        assert p.lam >= float(np.min(rates / d)) * (1 - 1e-12)


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(inst=fat_tree_instances(max_jobs=8, max_workers=8), start=st.sampled_from(["unicast", "greedy", "spt"]),
       use_pricer=st.booleans())
def test_stage_on_fat_trees(inst: Instance, start: str, use_pricer: bool) -> None:
    check_stage(inst, start, use_pricer)


@SETTINGS
@given(inst=leaf_spine_instances(), start=st.sampled_from(["unicast", "greedy", "spt"]), use_pricer=st.booleans())
def test_stage_on_leaf_spines(inst: Instance, start: str, use_pricer: bool) -> None:
    check_stage(inst, start, use_pricer)


@SETTINGS
@given(inst=graph_instances(), start=st.sampled_from(["unicast", "greedy", "spt"]))
def test_stage_on_graphs(inst: Instance, start: str) -> None:
    """No Clos fabric: the candidates are the priced ones."""
    check_stage(inst, start, True)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=fat_tree_instances(max_jobs=5, max_workers=5))
def test_stage_under_max_sum_rates(inst: Instance) -> None:
    check_stage(inst, "unicast", True, "max-sum")


# -- the iteration bench's fabric (mininet/emu_iterations.py: FabricSpec, layout) ----------------

HOST, EDGE_AGG, AGG_CORE = 9e6, 4.5e6, 2.25e6  # 10 / 5 / 2.5 Mbit/s x the planner's share 0.9


def bench_instance(core_groups: tuple[int, ...] = (2, 2, 0, 0), n_jobs: int = 6) -> Instance:
    """The k=4 fat-tree of the iteration benchmark (oversubscribed tiers, group budget 2 on
    edge and aggregation switches, `core_groups` on core-0..3) and its job layout: job i's
    PS in pod i mod 4, two workers in each of the next two pods, one under each edge
    switch; every demand capped at the PS's link, as the controller caps it."""
    base = fat_tree(4, HOST, group_capacity=2)
    nodes = tuple(dataclasses.replace(n, group_capacity=core_groups[int(n.id.split("-")[1])])
                  if n.id.startswith("core-") else n for n in base.nodes)

    def capacity(link: Link) -> float:
        kinds = {link.a.split("-")[0], link.b.split("-")[0]}
        return {frozenset(("edge", "agg")): EDGE_AGG, frozenset(("agg", "core")): AGG_CORE}.get(frozenset(kinds), HOST)

    topo = Topology(nodes, tuple(Link(link.a, link.b, capacity(link)) for link in base.links))
    jobs = []
    for i in range(n_jobs):
        p = i % 4
        workers = []
        for q in ((p + 1) % 4, (p + 2) % 4):
            workers += [f"host-{4 * q + i % 2}", f"host-{4 * q + 2 + (i // 2) % 2}"]
        jobs.append(Job(f"job{i}", f"host-{4 * p + 2 * (i // 4)}", tuple(workers), HOST))
    return Instance(topo, tuple(jobs))


# (with no core groups at all, no plan of the structure family gives every job that rate:
# a single-top tree cannot replicate at its core, and an integer programme over the whole
# family at the same λ leaves one job at half of it)
@pytest.mark.parametrize("core_groups", [(2, 2, 0, 0), (2, 2, 2, 2)])
def test_bench_fabric_every_job_at_a_core_links_rate_alone(core_groups: tuple[int, ...]) -> None:
    """Every job of the benchmark crosses the 2.25 Mbit/s core links; lp-rounding's plan
    lets each one go at that rate when the others are idle (no two copies of a job on
    one core link), with λ and the rates of the plan without the stage."""
    inst = bench_instance(core_groups)
    net = Network(inst.topology)
    p = plan(inst, "lp-rounding")
    assert plan_violations(inst, p) == []
    alone = alone_rates(net, inst.jobs, [jp.structure for jp in p.jobs])
    assert np.allclose(alone, AGG_CORE), alone
    without = _without_stage(inst)
    assert p.lam >= without.lam * (1 - 1e-12)
    assert np.all(np.array([jp.rate for jp in p.jobs]) >= np.array([jp.rate for jp in without.jobs]) * (1 - 1e-9))


def test_bench_fabric_without_the_stage_one_job_is_halved() -> None:
    """The stage's reason: with mixed core budgets the plan it starts from sends two
    copies of job3 over one core link (half that link's rate when alone)."""
    inst = bench_instance((2, 2, 0, 0))
    net = Network(inst.topology)
    p = _without_stage(inst)
    alone = alone_rates(net, inst.jobs, [jp.structure for jp in p.jobs])
    assert alone.min() == pytest.approx(AGG_CORE / 2)


def _without_stage(inst: Instance):
    old = headroom.MAX_JOBS
    headroom.MAX_JOBS = 0
    try:
        return plan(inst, "lp-rounding")
    finally:
        headroom.MAX_JOBS = old


def test_more_jobs_than_the_limit_are_left_as_they_are() -> None:
    inst = bench_instance((2, 2, 0, 0))
    net = Network(inst.topology)
    jobs = inst.jobs * 3  # 18 > MAX_JOBS
    jobs = tuple(dataclasses.replace(j, id=f"{j.id}-{n}") for n, j in enumerate(jobs))
    cur = baselines.unicast(net, jobs)
    rates = allocate(net, jobs, cur, "max-concurrent")
    assert len(jobs) > headroom.MAX_JOBS
    new, new_rates = headroom.raise_headroom(net, jobs, cur, rates, [baselines.greedy(net, jobs)[j:j + 1] for j in range(len(jobs))],
                                             Pricer(net, jobs))
    assert all(a is b for a, b in zip(new, cur)) and np.array_equal(new_rates, rates)


def test_priced_candidates_reach_every_worker_and_avoid_a_doubled_bottleneck() -> None:
    """Without the family (ENUMERATE 0) the priced candidates are real structures of the
    job, and for job3 of the bench one of them has no two copies on a core link."""
    inst = bench_instance((2, 2, 0, 0))
    net = Network(inst.topology)
    cur = [jp.structure for jp in _without_stage(inst).jobs]
    rates = allocate(net, inst.jobs, cur, "max-concurrent")
    cands = headroom.priced_candidates(net, cur, 3, Pricer(net, inst.jobs), rates)
    assert cands
    job = inst.jobs[3]
    for s in cands:
        one = assemble_plan(net, (job,), [s], np.array([0.0]), "probe", "max-concurrent", 0.0)
        assert plan_violations(Instance(inst.topology, (job,)), one) == []
    assert max(headroom.alone_rate(net, job, s) for s in cands) == pytest.approx(AGG_CORE)
