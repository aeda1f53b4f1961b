"""`rates.level_fill`, the event-driven max-min filling of `max_min_fill` (every job
from the same share λ of its demand), gives `rates.progressive_fill`'s rates: on
random copy matrices (some edges shared by many jobs, some saturating at once,
some jobs on no edge) and on real plans of a fat-tree."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse import csc_matrix

from controller.algorithm.model import Instance
from controller.algorithm.network import Network
from controller.algorithm.rates import (concurrent_lambda, copy_matrix, demand_load, level_fill, max_min_fill,
                                        progressive_fill)
from controller.algorithm.topologies import fat_tree
from controller.algorithm.workload import WorkloadSpec, generate_jobs
from controller import planner


def random_case(seed: int) -> tuple[csc_matrix, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    edges, jobs = int(rng.integers(5, 60)), int(rng.integers(1, 40))
    dense = (rng.random((edges, jobs)) < rng.uniform(0.05, 0.5)) * rng.integers(1, 4, (edges, jobs))
    if jobs > 2:
        dense[:, 0] = 0  # a job on no edge: it reaches its demand
    d = rng.choice([1e9, 2e9, 5e9, 1e10], jobs) * rng.uniform(0.5, 1.5, jobs)
    capacity = rng.choice([1e10, 4e10, 1e11], edges).astype(float)
    if seed % 3 == 0:
        capacity[: edges // 2] = 1e10  # many edges of one capacity: ties
    return csc_matrix(dense.astype(float)), d, capacity


@pytest.mark.parametrize("seed", range(60))
def test_level_fill_equals_progressive_fill_on_random_cases(seed):
    A, d, capacity = random_case(seed)
    load = A @ d
    lam = concurrent_lambda(capacity, load)
    want = progressive_fill(A, d, capacity, lam * d)
    got = level_fill(A, d, capacity, lam)
    assert np.allclose(got, want, rtol=1e-7, atol=0), (got, want)
    assert np.all(A @ got <= capacity * (1 + 1e-9))


@pytest.mark.parametrize("k,n", [(4, 12), (8, 60)])
def test_level_fill_equals_progressive_fill_on_plans(k, n):
    topo = fat_tree(k, group_capacity=4)
    jobs = tuple(generate_jobs(topo, WorkloadSpec(n, 3, 7, seed=k)))
    plan = planner.run(Instance(topo, jobs), "greedy")
    net = Network(topo)
    structures = [jp.structure for jp in plan.jobs]
    d = np.array([j.demand for j in jobs])
    lam = concurrent_lambda(net.capacity, demand_load(net, jobs, structures))
    A = copy_matrix(net, structures)
    want = progressive_fill(A, d, net.capacity, lam * d)
    assert np.allclose(level_fill(A, d, net.capacity, lam), want, rtol=1e-7, atol=0)
    assert np.allclose(max_min_fill(net, jobs, structures, lam), np.minimum(want, d), rtol=1e-7)
    assert lam < 1 and (want < d * (1 - 1e-6)).any() and (want > lam * d * (1 + 1e-6)).any()  # the fill did something
