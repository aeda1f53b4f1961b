"""The traffic stage (controller/algorithm/traffic.py): rates held, tables and links kept, copies down."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.algorithm import baselines, lp_rounding, plan, traffic
from controller.algorithm.model import Instance, Job, Link, Node, Topology
from controller.algorithm.network import Network
from controller.algorithm.rates import allocate, assemble_plan
from controller.algorithm.structures import make_structure
from controller.algorithm.topologies import leaf_spine
from controller.algorithm.validate import plan_violations
from tests.test_properties import fat_tree_instances, graph_instances, leaf_spine_instances

GBIT = 1e9


def total_copies(structures) -> int:
    return sum(traffic.copies_of(s) for s in structures)


def baseline_start(inst: Instance, start: str, objective: str = "max-concurrent"):
    """(network, jobs, `start`'s structures, their rates, per job every baseline's
    structure): where a stage that holds rates starts from."""
    net = Network(inst.topology)
    jobs = inst.jobs
    builders = {"unicast": baselines.unicast, "spt": baselines.spt, "steiner": baselines.steiner,
                "greedy": baselines.greedy}
    cands = {name: b(net, jobs) for name, b in builders.items()}
    cur = cands[start]
    rates = allocate(net, jobs, cur, objective)
    return net, jobs, cur, rates, [[c[j] for c in cands.values()] for j in range(len(jobs))]


def check_stage(inst: Instance, start: str, objective: str = "max-concurrent") -> None:
    """Run the stage on `start`'s plan with every baseline's structures as candidates."""
    net, jobs, cur, rates, pools = baseline_start(inst, start, objective)
    new, new_rates = traffic.reduce_traffic(net, jobs, cur, rates, pools)
    assert len(new) == len(jobs)
    assert np.all(new_rates >= rates), "a job's rate was lowered"
    d = np.array([j.demand for j in jobs])
    assert np.all(new_rates <= d * (1 + 1e-12))
    assert total_copies(new) <= total_copies(cur), "traffic went up"
    for j, s in enumerate(new):
        assert s.key in {c.key for c in [cur[j], *pools[j]]}, "a structure from outside the candidates"
    p = assemble_plan(net, jobs, new, new_rates, "stage", objective, 0.0)
    assert plan_violations(inst, p) == []  # links and tables within budget, every worker reached
    if jobs:
        assert p.lam >= float(np.min(rates / d))


SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(inst=fat_tree_instances(max_jobs=8, max_workers=8), start=st.sampled_from(["unicast", "greedy", "spt"]))
def test_stage_on_fat_trees(inst: Instance, start: str) -> None:
    check_stage(inst, start)


@SETTINGS
@given(inst=leaf_spine_instances(), start=st.sampled_from(["unicast", "greedy"]))
def test_stage_on_leaf_spines(inst: Instance, start: str) -> None:
    check_stage(inst, start)


@SETTINGS
@given(inst=graph_instances(), start=st.sampled_from(["unicast", "greedy"]))
def test_stage_on_graphs(inst: Instance, start: str) -> None:
    check_stage(inst, start)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=fat_tree_instances(max_jobs=5, max_workers=5))
def test_stage_under_max_sum_rates(inst: Instance) -> None:
    check_stage(inst, "unicast", "max-sum")


def test_unicast_moves_to_the_tree() -> None:
    """Unicast copies with room to spare: every job takes its tree, rates unchanged."""
    topo = leaf_spine(2, 1, 4)
    jobs = (Job("a", "host-0", ("host-4", "host-5", "host-6"), 1 * GBIT),
            Job("b", "host-1", ("host-5", "host-7"), 1 * GBIT))
    net = Network(topo)
    cur = baselines.unicast(net, jobs)
    rates = allocate(net, jobs, cur, "max-concurrent")
    tree = baselines.spt(net, jobs)
    new, new_rates = traffic.reduce_traffic(net, jobs, cur, rates, [[t] for t in tree])
    assert [s.key for s in new] == [s.key for s in tree]
    assert total_copies(new) == 6 + 5 < total_copies(cur) == 12 + 8
    assert np.array_equal(new_rates, rates)


def test_a_full_group_table_is_swapped_to_the_job_that_saves_more() -> None:
    """G=1: job b (2 workers behind leaf-1) holds leaf-1's only group; job a (3 workers
    there) saves more with it than b loses, so b gives it up."""
    topo = leaf_spine(3, 1, 4, group_capacity=1)
    a = Job("a", "host-0", ("host-4", "host-5", "host-6"), 1 * GBIT)
    b = Job("b", "host-8", ("host-5", "host-7"), 1 * GBIT)
    net = Network(topo)
    jobs = (a, b)
    placed = baselines.spt(net, (b, a))  # b first: it takes the group
    cur = [placed[1], placed[0]]
    leaf1 = topo.index["leaf-1"]
    assert leaf1 in cur[1].groups and leaf1 not in cur[0].groups
    rates = allocate(net, jobs, cur, "max-concurrent")
    # with a placed first, b falls back to copies from the spine (one more copy than
    # its tree); a's tree saves two over its own fallback
    other = baselines.spt(net, (a, b))
    assert traffic.copies_of(other[1]) - traffic.copies_of(cur[1]) < traffic.copies_of(cur[0]) - traffic.copies_of(other[0])
    pools = [[other[0], baselines.unicast(net, (a,))[0]], [other[1], baselines.unicast(net, (b,))[0]]]
    new, new_rates = traffic.reduce_traffic(net, jobs, cur, rates, pools)
    assert leaf1 in new[0].groups and leaf1 not in new[1].groups
    assert total_copies(new) < total_copies(cur)
    assert np.all(new_rates >= rates)
    assert plan_violations(Instance(topo, jobs), assemble_plan(net, jobs, new, new_rates, "t", "max-concurrent", 0.0)) == []


def test_a_candidate_through_a_saturated_link_is_refused() -> None:
    """Job a (unicast from h0 to h1 and h2) could save a copy by replicating at s1,
    but s1→s2 is saturated by job b: it only takes the tree that replicates at s0."""
    nodes = tuple(Node(f"s{i}", "switch") for i in range(3)) + tuple(Node(f"h{i}", "host") for i in range(3))
    links = (Link("s0", "s1", 10 * GBIT), Link("s1", "s2", 9 * GBIT), Link("s0", "s2", 10 * GBIT),
             *(Link(f"s{i}", f"h{i}", 10 * GBIT) for i in range(3)))
    topo = Topology(nodes, links)
    jobs = (Job("a", "h0", ("h1", "h2"), 1 * GBIT), Job("b", "h1", ("h2",), 9 * GBIT))
    net = Network(topo)
    i = topo.index
    cur = baselines.unicast(net, jobs)
    rates = allocate(net, jobs, cur, "max-concurrent")
    assert list(rates) == [1 * GBIT, 9 * GBIT]
    via_s1 = make_structure(net, [(i["h0"], i["s0"]), (i["s0"], i["s1"]), (i["s1"], i["h1"]),
                                  (i["s1"], i["s2"]), (i["s2"], i["h2"])], [])
    at_s0 = make_structure(net, [(i["h0"], i["s0"]), (i["s0"], i["s1"]), (i["s1"], i["h1"]),
                                 (i["s0"], i["s2"]), (i["s2"], i["h2"])], [])
    assert traffic.copies_of(via_s1) == traffic.copies_of(at_s0) == 5 < traffic.copies_of(cur[0]) == 6
    new, new_rates = traffic.reduce_traffic(net, jobs, cur, rates, [[via_s1], []])
    assert [s.key for s in new] == [s.key for s in cur]
    new, new_rates = traffic.reduce_traffic(net, jobs, cur, rates, [[via_s1, at_s0], []])
    assert new[0].key == at_s0.key
    assert np.all(new_rates >= rates)


def test_raise_rates_never_lowers_and_fills() -> None:
    topo = leaf_spine(2, 1, 2)
    jobs = (Job("a", "host-0", ("host-2",), 10 * GBIT), Job("b", "host-1", ("host-3",), 10 * GBIT))
    net = Network(topo)
    s = baselines.unicast(net, jobs)
    start = np.array([1 * GBIT, 3 * GBIT])
    r = traffic.raise_rates(net, jobs, s, start)
    assert np.all(r >= start)
    # they share leaf-0→spine (10 Gbit/s): both grow by the same share of demand
    assert r.sum() == pytest.approx(10 * GBIT)
    assert r[1] - r[0] == pytest.approx(2 * GBIT)


def test_lp_rounding_uses_the_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner's plan carries no more copies than without the stage, at rates no lower."""
    from controller.algorithm.topologies import fat_tree
    from controller.algorithm.workload import WorkloadSpec, generate_jobs

    topo = fat_tree(4, group_capacity=2, core_oversubscription=2.0)
    inst = Instance(topo, generate_jobs(topo, WorkloadSpec(10, 2, 8, seed=5)))
    with_stage = plan(inst, "lp-rounding")
    monkeypatch.setattr(lp_rounding.traffic, "reduce_traffic", lambda net, jobs, s, r, pools, pricer=None: (list(s), r))
    without = plan(inst, "lp-rounding")
    copies = [sum(c for jp in p.jobs for _, c in jp.structure.copies) for p in (with_stage, without)]
    assert copies[0] <= copies[1]
    assert with_stage.lam >= without.lam
    assert all(x.rate >= y.rate for x, y in zip(with_stage.jobs, without.jobs))
    assert plan_violations(inst, with_stage) == []
