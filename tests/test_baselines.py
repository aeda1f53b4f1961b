"""Baselines: valid plans, table budgets, the SPT/Steiner definitions, greedy vs unicast."""

from __future__ import annotations

from collections import Counter

import pytest

from controller.algorithm import baselines, ilp
from controller.algorithm.model import Instance, Job, Link, Node, Topology
from controller.algorithm.network import Network
from controller.algorithm.pricing import Pricer
from controller.algorithm.topologies import GBIT, fat_tree, leaf_spine
from controller.algorithm.validate import plan_violations
from controller.algorithm.workload import WorkloadSpec, generate_jobs, reference_instance
from controller.planner import run

BASELINES = ("unicast", "spt", "steiner", "greedy")
MULTICAST = ("spt", "steiner", "greedy")


def irregular(group_capacity: int | None = None, entry_capacity: int | None = None) -> Topology:
    """Six switches in a ring with two chords; eight hosts, one of them dual-homed."""
    sw = [Node(f"s{i}", "switch", group_capacity, entry_capacity) for i in range(6)]
    hosts = [Node(f"h{i}", "host") for i in range(8)]
    links = [Link(f"s{i}", f"s{(i + 1) % 6}", 10 * GBIT) for i in range(6)]
    links += [Link("s0", "s3", 10 * GBIT), Link("s1", "s4", 5 * GBIT)]
    attach = ["s0", "s1", "s2", "s3", "s4", "s5", "s2", "s5"]
    links += [Link(h.id, s, 10 * GBIT) for h, s in zip(hosts, attach)]
    links.append(Link("h7", "s4", 10 * GBIT))  # h7 is dual-homed: hosts never forward
    return Topology(tuple(sw + hosts), tuple(links))


def irregular_instance(group_capacity: int | None = None, entry_capacity: int | None = None) -> Instance:
    topo = irregular(group_capacity, entry_capacity)
    jobs = (
        Job("a", "h0", ("h2", "h3", "h4", "h7"), 5 * GBIT),
        Job("b", "h1", ("h3", "h5", "h6"), 2 * GBIT),
        Job("c", "h7", ("h0", "h1", "h2", "h6"), 10 * GBIT),
        Job("d", "h4", ("h0", "h5", "h7"), 1 * GBIT),
    )
    return Instance(topo, jobs)


def leaf_spine_instance(group_capacity: int | None = None, entry_capacity: int | None = None, seed: int = 0) -> Instance:
    topo = leaf_spine(4, 3, 4, group_capacity=group_capacity, entry_capacity=entry_capacity)
    return Instance(topo, generate_jobs(topo, WorkloadSpec(8, 2, 8, seed=seed)))


def fat_tree_instance(group_capacity: int | None = None, entry_capacity: int | None = None, seed: int = 0) -> Instance:
    return reference_instance(4, 10, group_capacity, entry_capacity, seed=seed, min_workers=2, max_workers=10)


def all_instances(group_capacity: int | None = None, entry_capacity: int | None = None) -> list[Instance]:
    return [
        fat_tree_instance(group_capacity, entry_capacity, seed=0),
        fat_tree_instance(group_capacity, entry_capacity, seed=1),
        reference_instance(8, 12, group_capacity, entry_capacity, seed=2, min_workers=4, max_workers=16),
        leaf_spine_instance(group_capacity, entry_capacity),
        irregular_instance(group_capacity, entry_capacity),
    ]


INSTANCE_IDS = ["ft4-a", "ft4-b", "ft8", "leaf-spine", "irregular"]
BUDGETS = [(None, None), (0, None), (1, None), (2, 3), (None, 2)]


@pytest.mark.parametrize("algorithm", BASELINES)
@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: f"G{b[0]}-F{b[1]}")
def test_plans_are_valid(algorithm, budget):
    for inst, name in zip(all_instances(*budget), INSTANCE_IDS):
        p = run(inst, algorithm)
        assert plan_violations(inst, p) == [], (name, plan_violations(inst, p))
        assert p.algorithm == algorithm
        assert len(p.jobs) == len(inst.jobs)
        assert [jp.job.id for jp in p.jobs] == [j.id for j in inst.jobs]


@pytest.mark.parametrize("algorithm", MULTICAST)
def test_plans_are_valid_max_sum(algorithm):
    for inst, name in zip(all_instances(1, None), INSTANCE_IDS):
        p = run(inst, algorithm, "max-sum")
        assert plan_violations(inst, p) == [], (name, plan_violations(inst, p))


@pytest.mark.parametrize("algorithm", MULTICAST)
def test_deterministic(algorithm):
    for inst in all_instances(1, None):
        net = Network(inst.topology)
        fn = getattr(baselines, algorithm)
        assert [s.key for s in fn(net, inst.jobs)] == [s.key for s in fn(Network(inst.topology), inst.jobs)]


def test_spt_is_rpf_tree_when_tables_unlimited():
    for inst, name in zip(all_instances(), INSTANCE_IDS):
        net = Network(inst.topology)
        pricer = Pricer(net, inst.jobs)
        for j, s in enumerate(baselines.spt(net, inst.jobs)):
            rpf = pricer.rpf_tree(j)
            assert s.branches == (), name
            assert set(s.tree) == set(rpf.edges()), name
            assert s.mode == "multicast"


def test_spt_falls_back_where_tables_are_full():
    inst = fat_tree_instance(1, None)
    net = Network(inst.topology)
    full = baselines.spt(net, inst.jobs)
    assert any(s.mode != "multicast" for s in full)
    assert any(s.groups for s in full)  # the budget is used, not ignored


@pytest.mark.parametrize("algorithm", MULTICAST)
def test_no_replication_without_groups(algorithm):
    for inst, name in zip(all_instances(0, None), INSTANCE_IDS):
        p = run(inst, algorithm)
        assert all(not jp.structure.groups for jp in p.jobs), name
        assert all(su.groups_used == 0 for su in p.switches), name
        assert plan_violations(inst, p) == []


@pytest.mark.parametrize("algorithm", MULTICAST)
def test_one_group_per_switch_is_respected(algorithm):
    used_any = False
    for inst, name in zip(all_instances(1, 2), INSTANCE_IDS):
        net = Network(inst.topology)
        structures = getattr(baselines, algorithm)(net, inst.jobs)
        groups = Counter(v for s in structures for v in s.groups)
        entries = Counter(v for s in structures for v in s.entries)
        assert all(n <= 1 for n in groups.values()), (name, groups)
        assert all(n <= 2 for n in entries.values()), (name, entries)
        used_any |= bool(groups)
    assert used_any  # the test is not vacuous: some switch does replicate


def test_entry_budget_zero_means_unicast():
    for inst, name in zip(all_instances(None, 0), INSTANCE_IDS):
        for algorithm in MULTICAST:
            p = run(inst, algorithm)
            assert all(jp.structure.mode == "unicast" for jp in p.jobs), (name, algorithm)


def _copies(s) -> int:
    return sum(c for _, c in s.copies)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_steiner_uses_no_more_copies_than_spt_on_fat_tree(seed):
    inst = reference_instance(4, 12, seed=seed, min_workers=2, max_workers=12)
    net = Network(inst.topology)
    st = baselines.steiner(net, inst.jobs)
    sp = baselines.spt(net, inst.jobs)
    for a, b in zip(st, sp):
        assert _copies(a) <= _copies(b)
    assert sum(map(_copies, st)) <= sum(map(_copies, sp))


def test_steiner_spreads_jobs_over_cores():
    inst = reference_instance(4, 16, seed=5, min_workers=4, max_workers=8)
    net = Network(inst.topology)
    cores = set(net.fabric.cores)
    used = Counter(v for s in baselines.steiner(net, inst.jobs) for v in s.entries if v in cores)
    assert len(used) >= 3


def test_steiner_on_irregular_graph_is_a_tree_and_no_worse_than_unicast():
    inst = irregular_instance()
    net = Network(inst.topology)
    st = baselines.steiner(net, inst.jobs)
    uni = baselines.unicast(net, inst.jobs)
    for s, u in zip(st, uni):
        assert s.mode == "multicast"
        assert _copies(s) <= _copies(u)
        # an arborescence: every node has at most one parent
        heads = [c for _, c in s.tree]
        assert len(heads) == len(set(heads))


def in_family(net: Network, pricer: Pricer, j: int, s) -> bool:
    """Whether `s` is a structure of job j's family on some Clos base tree.

    A rooted subtree T' of the base tree (tree edges from the PS down), every worker
    a leaf of T' or served by exactly one unicast copy from the PS or from its
    deepest ancestor in T'.
    """
    ps, workers = net.job_nodes(pricer.jobs[j])
    emitters: dict[int, list[int]] = {}
    for x, w in s.branches:
        emitters.setdefault(w, []).append(x)
    for base in ilp.job_bases(net, pricer, j):
        parent = {c: p for p, cs in base.children.items() for c in cs}
        edges = set(base.edges())
        if not set(s.tree) <= edges:
            continue
        nodes = {ps} | {c for _, c in s.tree}
        if any(p not in nodes for p, _ in s.tree):
            continue
        ok = set(emitters) <= set(workers)
        for w in workers:
            kept = (parent[w], w) in s.tree
            em = emitters.get(w, [])
            if kept:
                ok &= not em
                continue
            anc = parent[w]
            while anc not in nodes:
                anc = parent[anc]
            ok &= len(em) == 1 and em[0] in (ps, anc)
        if ok:
            return True
    return False


@pytest.mark.parametrize("algorithm", MULTICAST)
def test_clos_structures_are_in_the_family(algorithm):
    """On Clos fabrics every baseline structure is in the family of the LP and the ILP."""
    for inst in (
        fat_tree_instance(1, None, seed=3),
        fat_tree_instance(None, None, seed=4),
        fat_tree_instance(2, 3, seed=5),
        leaf_spine_instance(1),
    ):
        net = Network(inst.topology)
        pricer = Pricer(net, inst.jobs)
        for j, s in enumerate(getattr(baselines, algorithm)(net, inst.jobs)):
            assert in_family(net, pricer, j, s), (inst.jobs[j], s)


def test_in_family_rejects_outsiders():
    """The membership check itself can fail."""
    inst = fat_tree_instance(None, None, seed=4)
    net = Network(inst.topology)
    pricer = Pricer(net, inst.jobs)
    s = baselines.spt(net, inst.jobs)[0]
    assert in_family(net, pricer, 0, s)
    ps, workers = net.job_nodes(inst.jobs[0])
    from controller.algorithm.structures import make_structure

    # a copy from a switch that is not the worker's deepest ancestor in T'
    e0 = net.fabric.host_edge[ps]
    bad = make_structure(net, [(ps, e0)], [(e0, w) for w in workers[:-1]] + [(workers[0], workers[-1])])
    assert not in_family(net, pricer, 0, bad)


def contended_instance() -> Instance:
    # Small group tables, many wide jobs: tables and links both bind.
    return reference_instance(4, 14, group_capacity=2, seed=11, min_workers=4, max_workers=12)


def test_greedy_beats_unicast_on_contended_instance():
    inst = contended_instance()
    g = run(inst, "greedy")
    u = run(inst, "unicast")
    assert g.lam >= u.lam * (1 - 1e-9)
    assert g.lam > u.lam  # multicast does help here


def test_greedy_not_worse_than_unicast_on_several_instances():
    for seed in range(6):
        inst = reference_instance(4, 10, group_capacity=seed % 3, seed=seed, min_workers=2, max_workers=10)
        assert run(inst, "greedy").lam >= run(inst, "unicast").lam * (1 - 1e-9)
    inst = leaf_spine_instance(1, seed=3)
    assert run(inst, "greedy").lam >= run(inst, "unicast").lam * (1 - 1e-9)


def test_greedy_respects_tables_on_fat_tree_k4_tight():
    topo = fat_tree(4, group_capacity=1, entry_capacity=3)
    inst = Instance(topo, generate_jobs(topo, WorkloadSpec(12, 3, 10, seed=9)))
    p = run(inst, "greedy")
    assert plan_violations(inst, p) == []
    assert max(su.groups_used for su in p.switches) <= 1
    assert max(su.entries_used for su in p.switches) <= 3
