"""Properties every plan of every algorithm must have, on small random instances.

Every worker reached; Σ rate·copies ≤ capacity; tables within capacity; λ is
min rate/demand; rate ≤ demand (all checked by `plan_violations`, an independent
checker); lp-rounding's λ ≤ its LP bound and ≥ every baseline's; where `ilp`
accepts the instance, ILP ≥ lp-rounding and LP bound ≥ ILP.
"""

from __future__ import annotations

import math

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.algorithm import ALGORITHMS
from controller.algorithm.model import Instance, Link, Node, PlanningError, Topology
from controller.algorithm.topologies import fat_tree, leaf_spine
from controller.algorithm.validate import plan_violations
from controller.algorithm.workload import WorkloadSpec, generate_jobs
from controller.planner import run

BASELINES = ("unicast", "spt", "steiner", "greedy")
TOL = 1e-7
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

capacities = st.sampled_from([None, 0, 1, 2, 4])
entry_capacities = st.sampled_from([None, None, 3, 8])


@st.composite
def fat_tree_instances(draw, max_jobs: int = 6, max_workers: int = 6) -> Instance:
    topo = fat_tree(4, group_capacity=draw(capacities), entry_capacity=draw(entry_capacities),
                    core_oversubscription=draw(st.sampled_from([1.0, 2.0])))
    spec = WorkloadSpec(draw(st.integers(1, max_jobs)), 1, draw(st.integers(1, max_workers)),
                        rack_locality=draw(st.sampled_from([0.0, 0.5])), seed=draw(st.integers(0, 10**6)))
    return Instance(topo, generate_jobs(topo, spec))


@st.composite
def leaf_spine_instances(draw) -> Instance:
    topo = leaf_spine(draw(st.integers(2, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 3)),
                      uplink_capacity=draw(st.sampled_from([None, 4e9])),
                      group_capacity=draw(capacities), entry_capacity=draw(entry_capacities))
    spec = WorkloadSpec(draw(st.integers(1, 5)), 1, 5, seed=draw(st.integers(0, 10**6)))
    return Instance(topo, generate_jobs(topo, spec))


@st.composite
def graph_instances(draw) -> Instance:
    seed = draw(st.integers(0, 10**6))
    n = draw(st.integers(3, 9))
    g = nx.connected_watts_strogatz_graph(n, 2 if n < 5 else 4, 0.4, seed=seed)
    rng = draw(st.randoms(use_true_random=False))
    nodes = [Node(f"s{i}", "switch", rng.choice([None, 0, 1, 2]), rng.choice([None, None, 4])) for i in g.nodes]
    links = [Link(f"s{a}", f"s{b}", rng.choice([1e9, 1e10, 4e10])) for a, b in g.edges]
    for h in range(draw(st.integers(2, 10))):
        nodes.append(Node(f"h{h}", "host"))
        links.append(Link(f"s{rng.randrange(n)}", f"h{h}", 1e10))
    topo = Topology(tuple(nodes), tuple(links))
    return Instance(topo, generate_jobs(topo, WorkloadSpec(draw(st.integers(1, 5)), 1, 5, seed=seed)))


def plans_for(inst: Instance, objective: str = "max-concurrent") -> dict:
    plans = {}
    for name in ALGORITHMS:
        try:
            plans[name] = run(inst, name, objective)
        except PlanningError:
            assert name == "ilp", f"{name} refused"
    return plans


def objective_value(plan) -> float:
    if plan.objective == "max-sum":
        return sum(jp.rate * jp.job.weight for jp in plan.jobs)
    return plan.lam


def check_all(inst: Instance, objective: str = "max-concurrent") -> dict:
    plans = plans_for(inst, objective)
    for name, plan in plans.items():
        assert plan_violations(inst, plan) == [], name
        assert 0 <= plan.lam <= 1 + TOL
        assert math.isclose(plan.throughput, sum(jp.rate for jp in plan.jobs), rel_tol=1e-9)
    ours = plans["lp-rounding"]
    value = objective_value(ours)
    assert ours.lp_bound is not None
    assert value <= ours.lp_bound * (1 + TOL) + TOL, "lp-rounding above its own bound"
    for name in BASELINES:
        assert value >= objective_value(plans[name]) * (1 - TOL), f"lp-rounding worse than {name}"
    if "ilp" in plans:
        exact = objective_value(plans["ilp"])
        assert exact >= value * (1 - 1e-6), "ILP below lp-rounding"
        assert ours.lp_bound >= exact * (1 - 1e-6), "LP bound below the ILP optimum"
    return plans


@SETTINGS
@given(inst=fat_tree_instances())
def test_fat_tree_plans(inst: Instance) -> None:
    check_all(inst)


@SETTINGS
@given(inst=leaf_spine_instances())
def test_leaf_spine_plans(inst: Instance) -> None:
    check_all(inst)


@SETTINGS
@given(inst=graph_instances())
def test_general_graph_plans(inst: Instance) -> None:
    check_all(inst)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=fat_tree_instances(max_jobs=4, max_workers=4))
def test_max_sum_plans(inst: Instance) -> None:
    check_all(inst, "max-sum")


# -- edge cases -----------------------------------------------------------------

def test_no_groups_anywhere_means_no_replicating_switch() -> None:
    topo = fat_tree(4, group_capacity=0)
    inst = Instance(topo, generate_jobs(topo, WorkloadSpec(6, 2, 8, seed=3)))
    for name, plan in check_all(inst).items():
        assert all(not jp.structure.groups for jp in plan.jobs), name
        assert all(su.groups_used == 0 for su in plan.switches)


def test_unlimited_tables_give_full_multicast() -> None:
    topo = fat_tree(4)
    inst = Instance(topo, generate_jobs(topo, WorkloadSpec(4, 3, 8, seed=5)))
    plans = check_all(inst)
    assert all(jp.structure.mode == "multicast" for jp in plans["spt"].jobs)
    assert plans["lp-rounding"].lam >= plans["unicast"].lam


def test_workers_on_the_ps_edge_switch() -> None:
    topo = fat_tree(4, group_capacity=1)
    from controller.algorithm.model import Job

    # host-0 and host-1 share edge-0-0
    inst = Instance(topo, (Job("rack", "host-0", ("host-1",), 1e9), Job("rack2", "host-1", ("host-0",), 2e9)))
    plans = check_all(inst)
    for plan in plans.values():
        for jp in plan.jobs:
            used = {inst.topology.name(inst.topology.edges[e].head) for e, _ in jp.structure.copies}
            assert not any(n.startswith(("agg", "core")) for n in used), "left the rack needlessly"


def test_single_worker_job_is_one_path() -> None:
    topo = fat_tree(4, group_capacity=2)
    from controller.algorithm.model import Job

    inst = Instance(topo, (Job("one", "host-0", ("host-15",), 5e9),))
    for name, plan in check_all(inst).items():
        jp = plan.jobs[0]
        assert not jp.structure.groups, name
        assert all(c == 1 for _, c in jp.structure.copies), name
        assert jp.rate == pytest.approx(5e9)


def test_all_hosts_as_workers() -> None:
    topo = fat_tree(4, group_capacity=2)
    from controller.algorithm.model import Job

    hosts = [n.id for n in topo.nodes if not n.is_switch]
    inst = Instance(topo, (Job("all", hosts[0], tuple(hosts[1:]), 10e9), Job("all2", hosts[5], tuple(h for h in hosts if h != hosts[5]), 10e9)))
    plans = check_all(inst)
    assert plans["lp-rounding"].lam > plans["unicast"].lam


def test_tiny_link_capacity_is_respected() -> None:
    base = fat_tree(4, group_capacity=4)
    links = tuple(Link(l.a, l.b, 1e3) if {l.a, l.b} == {"edge-0-0", "host-0"} else l for l in base.links)
    topo = Topology(base.nodes, links)
    inst = Instance(topo, generate_jobs(topo, WorkloadSpec(5, 2, 6, seed=11)))
    plans = check_all(inst)
    for plan in plans.values():
        assert plan.lam >= 0
