"""The exact ILP: enumeration, brute-force agreement, refusals, LP bound, dominance over baselines."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.algorithm import ilp
from controller.algorithm.model import Instance, Job, PlanningError
from controller.algorithm.network import Network
from controller.algorithm.pricing import Pricer
from controller.algorithm.rates import concurrent_lambda, demand_load, max_sum_rates
from controller.algorithm.structures import make_structure, unicast_structure
from controller.algorithm.topologies import GBIT, fat_tree, leaf_spine
from controller.algorithm.validate import plan_violations
from controller.algorithm.workload import reference_instance
from controller.planner import run

from test_baselines import in_family, irregular_instance

TOL = 1e-7


# -- an independent enumeration of the family and of dominance ------------------------------


def full_family(net: Network, pricer: Pricer, j: int) -> list:
    """Every structure of job j: each rooted subtree of each base tree (by its switches)
    and, for each worker, every allowed way to reach it (kept, a copy from the PS, a
    copy from its deepest ancestor); duplicates and dead ends included."""
    ps, workers = net.job_nodes(pricer.jobs[j])
    out = {unicast_structure(net, ps, workers).key: unicast_structure(net, ps, workers)}
    for base in ilp.job_bases(net, pricer, j):
        parent = {c: p for p, cs in base.children.items() for c in cs}
        switches = [v for v in parent if net.topo.is_switch(v)]
        for mask in range(1 << len(switches)):
            nodes = {base.root} | {v for i, v in enumerate(switches) if mask >> i & 1}
            if any(parent[v] not in nodes for v in nodes if v != base.root):
                continue
            tree_edges = [(parent[v], v) for v in nodes if v != base.root]
            options = []
            for w in workers:
                anc = parent[w]
                while anc not in nodes:
                    anc = parent[anc]
                opts = [("branch", base.root)]
                if anc == parent[w]:
                    opts.append(("leaf", anc))
                if anc != base.root:
                    opts.append(("branch", anc))
                options.append(opts)
            for combo in itertools.product(*options):
                tree = list(tree_edges)
                branches = []
                for w, (kind, x) in zip(workers, combo):
                    (tree.append((x, w)) if kind == "leaf" else branches.append((x, w)))
                s = make_structure(net, tree, branches)
                out.setdefault(s.key, s)
    return list(out.values())


def footprint(net: Network, s) -> np.ndarray:
    f = np.zeros(net.n_edges + 2 * net.n_nodes)
    for e, c in s.copies:
        f[e] = c
    for v in s.groups:
        f[net.n_edges + v] = 1
    for v in s.entries:
        f[net.n_edges + net.n_nodes + v] = 1
    return f


def undominated(net: Network, structures: list) -> list:
    """Structures no other one dominates (first of equal footprints kept); O(n²)."""
    F = np.array([footprint(net, s) for s in structures])
    keep = []
    for i in range(len(F)):
        le = np.all(F <= F[i], axis=1)
        eq = np.all(F == F[i], axis=1)
        strictly = le & ~eq
        if strictly.any() or np.flatnonzero(eq)[0] != i:
            continue
        keep.append(structures[i])
    return keep


def tables_ok(net: Network, combo) -> bool:
    groups = np.zeros(net.n_nodes)
    entries = np.zeros(net.n_nodes)
    for s in combo:
        for v in s.groups:
            groups[v] += 1
        for v in s.entries:
            entries[v] += 1
    return bool(np.all(groups <= net.group_cap) and np.all(entries <= net.entry_cap))


def brute_force_lambda(net: Network, jobs, families) -> float:
    """max λ over every table-feasible combination (vectorised over the last job)."""
    cap = net.capacity
    loads = [np.array([demand_load(net, (job,), [s]) for s in fam]) for job, fam in zip(jobs, families)]
    G = [np.array([[v in s.groups for v in range(net.n_nodes)] for s in fam], dtype=float) for fam in families]
    F = [np.array([[v in s.entries for v in range(net.n_nodes)] for s in fam], dtype=float) for fam in families]
    gcap = np.where(np.isfinite(net.group_cap), net.group_cap, 1e18)
    fcap = np.where(np.isfinite(net.entry_cap), net.entry_cap, 1e18)
    best = 0.0
    for head in itertools.product(*[range(len(f)) for f in families[:-1]]):
        load = sum((loads[j][t] for j, t in enumerate(head)), np.zeros(net.n_edges))
        g = sum((G[j][t] for j, t in enumerate(head)), np.zeros(net.n_nodes))
        f = sum((F[j][t] for j, t in enumerate(head)), np.zeros(net.n_nodes))
        ok = np.all(G[-1] + g <= gcap, axis=1) & np.all(F[-1] + f <= fcap, axis=1)
        if not ok.any():
            continue
        mu = np.max((loads[-1][ok] + load) / cap, axis=1)
        best = max(best, float(min(1.0, 1.0 / mu.min())))
    return best


def tiny_instances() -> list[Instance]:
    """k=4 fat-trees and a leaf-spine with 2–3 small jobs whose tables and links bind."""
    t1 = fat_tree(4, group_capacity=1)
    t2 = fat_tree(4, group_capacity=1, entry_capacity=2)
    t3 = fat_tree(4, core_oversubscription=2.0, group_capacity=0, entry_capacity=1)
    ls = leaf_spine(3, 2, 2, group_capacity=1)
    t4 = fat_tree(4, entry_capacity=2)
    return [
        Instance(t1, (
            Job("a", "host-0", ("host-5", "host-9"), 10 * GBIT),
            Job("b", "host-0", ("host-6", "host-13"), 5 * GBIT),
            Job("c", "host-1", ("host-8", "host-12"), 10 * GBIT),
        )),
        Instance(t2, (
            Job("a", "host-0", ("host-2", "host-3", "host-9"), 10 * GBIT),
            Job("b", "host-1", ("host-3", "host-10", "host-11"), 5 * GBIT),
        )),
        Instance(t3, (
            Job("a", "host-0", ("host-4", "host-8"), 10 * GBIT),
            Job("b", "host-1", ("host-12", "host-2"), 10 * GBIT),
            Job("c", "host-5", ("host-9",), 1 * GBIT),
        )),
        Instance(ls, (
            Job("a", "host-0", ("host-2", "host-3", "host-5"), 10 * GBIT),
            Job("b", "host-1", ("host-4", "host-2"), 10 * GBIT),
            Job("c", "host-3", ("host-0", "host-5"), 5 * GBIT),
        )),
        Instance(t4, (  # two entries per switch cost λ here
            Job("a", "host-14", ("host-6", "host-2"), 10 * GBIT),
            Job("b", "host-15", ("host-8", "host-5", "host-9"), 2 * GBIT),
            Job("c", "host-15", ("host-11", "host-14", "host-3"), 1 * GBIT),
        )),
    ]


#: The topologies of `tiny_instances` without table limits.
UNLIMITED = [fat_tree(4), fat_tree(4), fat_tree(4, core_oversubscription=2.0), leaf_spine(3, 2, 2), fat_tree(4)]


@pytest.fixture(scope="module")
def tiny():
    """Per tiny instance: (instance, network, undominated full family per job)."""
    out = []
    for inst in tiny_instances():
        net = Network(inst.topology)
        pricer = Pricer(net, inst.jobs)
        out.append((inst, net, [undominated(net, full_family(net, pricer, j)) for j in range(len(inst.jobs))]))
    return out


# -- enumeration ----------------------------------------------------------------------------


@pytest.mark.parametrize("idx", range(5))
def test_enumeration_is_the_family_up_to_dominance(idx):
    inst = tiny_instances()[idx]
    net = Network(inst.topology)
    pricer = Pricer(net, inst.jobs)
    for j in range(len(inst.jobs)):
        mine = ilp.job_structures(net, pricer, j)
        assert len({s.key for s in mine}) == len(mine)  # deduplicated by key
        assert ilp.count_structures(net, pricer, j) >= len(mine)
        assert all(in_family(net, pricer, j, s) for s in mine)
        # every structure of the family is matched or dominated by an enumerated one
        F = np.array([footprint(net, s) for s in mine])
        for s in full_family(net, pricer, j):
            assert np.any(np.all(F <= footprint(net, s), axis=1)), s
        assert pricer.rpf_tree(j) in ilp.job_bases(net, pricer, j)


def test_count_matches_enumeration_on_a_job_with_no_pruning():
    # A same-rack job: the only base tree is PS -> e0 -> workers.
    topo = fat_tree(4)
    inst = Instance(topo, (Job("a", "host-0", ("host-1",), GBIT),))
    net = Network(topo)
    pricer = Pricer(net, inst.jobs)
    structures = ilp.job_structures(net, pricer, 0)
    # unicast; PS -> e0 -> host-1 (e0 kept); e0 cut is unicast again (deduplicated)
    assert len(structures) == 2
    assert ilp.count_structures(net, pricer, 0) == 3


# -- exactness -------------------------------------------------------------------------------


@pytest.mark.parametrize("idx", range(5))
@pytest.mark.parametrize("shortcut", [False, True])
def test_max_concurrent_equals_brute_force(tiny, idx, shortcut):
    inst, net, families = tiny[idx]
    best = brute_force_lambda(net, inst.jobs, families)
    sol = ilp.solve(net, inst.jobs, "max-concurrent", shortcut=shortcut)
    assert tables_ok(net, sol.structures)
    lam = concurrent_lambda(net.capacity, demand_load(net, inst.jobs, sol.structures))
    assert lam == pytest.approx(best, rel=TOL)
    assert sol.lp_bound >= lam * (1 - TOL)
    pricer = Pricer(net, inst.jobs)
    assert all(in_family(net, pricer, j, s) for j, s in enumerate(sol.structures))


def test_brute_force_instances_bind():
    """The tiny instances are not trivial: links bind, and tables cost λ somewhere."""
    lams = [run(inst, "ilp").lam for inst in tiny_instances()]
    assert max(lams) < 1.0
    free = [run(Instance(t, inst.jobs), "ilp").lam for t, inst in zip(UNLIMITED, tiny_instances())]
    assert all(f >= lam - 1e-9 for f, lam in zip(free, lams))
    assert any(f > lam + 1e-9 for f, lam in zip(free, lams))


@pytest.mark.parametrize("idx", [1, 2, 4])
@pytest.mark.parametrize("shortcut", [False, True])
def test_max_sum_equals_brute_force(tiny, idx, shortcut):
    inst, net, families = tiny[idx]
    weights = np.array([j.weight for j in inst.jobs])
    best = 0.0
    for combo in itertools.product(*families):
        if tables_ok(net, combo):
            best = max(best, float(weights @ max_sum_rates(net, inst.jobs, list(combo))))
    sol = ilp.solve(net, inst.jobs, "max-sum", shortcut=shortcut)
    assert tables_ok(net, sol.structures)
    value = float(weights @ max_sum_rates(net, inst.jobs, sol.structures))
    assert value == pytest.approx(best, rel=1e-6)
    assert sol.lp_bound >= value * (1 - 1e-6)


def test_pareto_keeps_exactly_the_undominated():
    inst = tiny_instances()[0]
    net = Network(inst.topology)
    pricer = Pricer(net, inst.jobs)
    ss = full_family(net, pricer, 0)
    F = np.array([footprint(net, s) for s in ss])
    kept = ilp.pareto(F)
    assert {ss[i].key for i in kept} == {s.key for s in undominated(net, ss)}


# -- refusals --------------------------------------------------------------------------------


def test_refuses_k16():
    inst = reference_instance(16, 4, seed=0)
    with pytest.raises(PlanningError, match=f"{ilp.MAX_STRUCTURES} enumerated structures"):
        run(inst, "ilp")


def test_refuses_too_many_jobs():
    inst = reference_instance(4, ilp.MAX_JOBS + 1, seed=0, min_workers=1, max_workers=1)
    with pytest.raises(PlanningError, match=f"{ilp.MAX_JOBS} jobs"):
        run(inst, "ilp")


def test_refuses_irregular_graph():
    inst = irregular_instance(1)
    with pytest.raises(PlanningError, match="Clos"):
        run(inst, "ilp")


def test_k4_eight_jobs_of_six_workers_is_fast():
    inst = reference_instance(4, 8, group_capacity=1, seed=3, min_workers=6, max_workers=6)
    p = run(inst, "ilp")
    assert plan_violations(inst, p) == []
    assert p.runtime_s < 15.0
    assert p.lp_bound >= p.lam * (1 - TOL)
    for name in ("unicast", "spt", "steiner", "greedy"):
        assert p.lam >= run(inst, name).lam * (1 - TOL)


# -- against the baselines -------------------------------------------------------------------


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n_jobs=st.integers(2, 6),
    max_workers=st.integers(2, 5),
    groups=st.sampled_from([None, 0, 1, 2]),
    entries=st.sampled_from([None, 2, 4]),
    oversubscribed=st.booleans(),
)
def test_ilp_dominates_baselines(seed, n_jobs, max_workers, groups, entries, oversubscribed):
    inst = reference_instance(
        4, n_jobs, groups, entries, seed=seed, oversubscribed=oversubscribed, min_workers=2, max_workers=max_workers
    )
    p = run(inst, "ilp")
    assert plan_violations(inst, p) == []
    assert p.lp_bound >= p.lam * (1 - TOL)
    assert p.lp_bound <= 1.0
    for name in ("unicast", "spt", "steiner", "greedy"):
        assert p.lam >= run(inst, name).lam * (1 - TOL), name
    # the integer program agrees with the shortcut
    net = Network(inst.topology)
    sol = ilp.solve(net, inst.jobs, shortcut=False)
    lam = concurrent_lambda(net.capacity, demand_load(net, inst.jobs, sol.structures))
    assert lam == pytest.approx(p.lam, rel=TOL)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 10_000), groups=st.sampled_from([0, 1, 2]))
def test_ilp_max_sum_dominates_baselines(seed, groups):
    inst = reference_instance(4, 4, groups, seed=seed, min_workers=2, max_workers=4)
    p = run(inst, "ilp", "max-sum")
    assert plan_violations(inst, p) == []
    assert p.lp_bound >= p.throughput * (1 - 1e-6)
    for name in ("unicast", "spt", "steiner", "greedy"):
        assert p.throughput >= run(inst, name, "max-sum").throughput * (1 - 1e-6), name


def test_leaf_spine_ilp_dominates_baselines():
    topo = leaf_spine(4, 3, 3, group_capacity=1)
    from controller.algorithm.workload import WorkloadSpec, generate_jobs

    inst = Instance(topo, generate_jobs(topo, WorkloadSpec(6, 2, 6, seed=3)))
    p = run(inst, "ilp")
    assert plan_violations(inst, p) == []
    for name in ("unicast", "spt", "steiner", "greedy"):
        assert p.lam >= run(inst, name).lam * (1 - TOL)
