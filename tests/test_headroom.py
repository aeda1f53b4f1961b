"""The headroom stage (controller/algorithm/headroom.py): rates held, tables and links
kept, no job's alone rate lowered, and on the iteration bench's fabric every job's
structure at the full rate of a core link."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.algorithm import baselines, headroom, plan
from controller.algorithm.model import Instance, Job, Link, Node, Topology
from controller.algorithm.network import Network
from controller.algorithm.pricing import Pricer
from controller.algorithm.rates import allocate, assemble_plan
from controller.algorithm.structures import make_structure
from controller.algorithm.topologies import fat_tree
from controller.algorithm.validate import plan_violations
from tests.test_properties import fat_tree_instances, graph_instances, leaf_spine_instances
from tests.test_traffic import baseline_start

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mininet"))  # scripts, not a package
import emu_iterations as ei  # noqa: E402


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

SPEC = ei.FabricSpec()
HOST, AGG_CORE = SPEC.link_bps("host-0", "edge-0-0"), SPEC.link_bps("agg-0-0", "core-0")  # 9 and 2.25 Mbit/s


def bench_instance(core_groups: tuple[int, ...] = (2, 2, 0, 0), n_jobs: int = 6) -> Instance:
    """The k=4 fat-tree of the iteration benchmark as its controller plans it (each
    tier's capacity and the group budgets of `FabricSpec`, `core_groups` on core-0..3)
    and its job layout (`emu_iterations.layout`); every demand capped at the PS's link,
    as the controller caps it."""
    spec = dataclasses.replace(SPEC, core_groups=core_groups)
    base = fat_tree(4, HOST, group_capacity=spec.groups)
    budgets = spec.core_budgets()
    nodes = tuple(dataclasses.replace(n, group_capacity=budgets[n.id]) if n.id in budgets else n for n in base.nodes)
    topo = Topology(nodes, tuple(Link(link.a, link.b, spec.link_bps(link.a, link.b)) for link in base.links))
    return Instance(topo, tuple(Job(j.id, j.ps, j.workers, HOST) for j in ei.layout(n_jobs)))


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
    greedy = baselines.greedy(net, jobs)
    new, new_rates = headroom.raise_headroom(net, jobs, cur, rates, [[s] for s in greedy],
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


def test_no_job_is_slowed_alone_to_speed_up_another() -> None:
    """One group slot at switch s, wanted by both jobs: a with it goes at 1 Gbit/s alone
    (0.75 without: two copies on its 1.5 Gbit/s host link), b without it at 0.5 (two
    copies on its 1 Gbit/s link). Giving the slot to b would raise the sum of the alone
    rates relative to each job's best (0.75 + 1 > 1 + 0.5) and fits at the held rates,
    but it slows a down alone: the stage leaves the plan as it is."""
    g = 1e9
    topo = Topology(
        (Node("s", "switch", 1), Node("h0", "host"), Node("h1", "host"), Node("h2", "host"), Node("h3", "host")),
        (Link("h0", "s", 1.5 * g), Link("h3", "s", g), Link("s", "h1", g), Link("s", "h2", g)),
    )
    net = Network(topo)
    jobs = (Job("a", "h0", ("h1", "h2"), g), Job("b", "h3", ("h1", "h2"), g))
    i = topo.index
    multicast = [make_structure(net, [(i[ps], i["s"]), (i["s"], i["h1"]), (i["s"], i["h2"])], [])
                 for ps in ("h0", "h3")]
    unicast = baselines.unicast(net, jobs)
    cur = [multicast[0], unicast[1]]
    rates = allocate(net, jobs, cur, "max-concurrent")
    alone = alone_rates(net, jobs, cur)
    assert list(alone / g) == [1.0, 0.5]
    assert list(alone_rates(net, jobs, [unicast[0], multicast[1]]) / g) == [0.75, 1.0]  # the trade on offer
    new, new_rates = headroom.raise_headroom(net, jobs, cur, rates, [[unicast[0]], [multicast[1]]])
    assert [s.key for s in new] == [s.key for s in cur] and np.array_equal(new_rates, rates)
