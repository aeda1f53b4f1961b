"""The seeded reference workload generator (docs/architecture.md, Reference workloads).

One generator for the simulation, the benchmarks and the tests: each job's PS is a
random host, its workers a random set of other hosts (optionally skewed toward the
PS's rack), its demand drawn from a fixed set. Deterministic for a given seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from controller.algorithm.model import Instance, Job, Topology
from controller.algorithm.topologies import GBIT, fat_tree

DEMANDS = (1 * GBIT, 2 * GBIT, 5 * GBIT, 10 * GBIT)


@dataclass(frozen=True)
class WorkloadSpec:
    jobs: int
    min_workers: int = 4
    max_workers: int = 32
    demands: tuple[float, ...] = DEMANDS
    rack_locality: float = 0.0  # probability that a worker is drawn from the PS's rack first
    seed: int = 0


def generate_jobs(topo: Topology, spec: WorkloadSpec) -> tuple[Job, ...]:
    if spec.jobs < 0:
        raise ValueError("number of jobs must be >= 0")
    if not 1 <= spec.min_workers <= spec.max_workers:
        raise ValueError("need 1 <= min_workers <= max_workers")
    if not 0.0 <= spec.rack_locality <= 1.0:
        raise ValueError("rack_locality must be within [0, 1]")
    rng = random.Random(spec.seed)
    hosts = [n.id for n in topo.nodes if not n.is_switch]
    if len(hosts) < 2:
        raise ValueError("the topology needs at least two hosts")
    rack: dict[str, str] = {}
    for link in topo.links:
        if link.b in hosts and link.a not in hosts:
            rack.setdefault(link.b, link.a)
        elif link.a in hosts and link.b not in hosts:
            rack.setdefault(link.a, link.b)
    by_rack: dict[str, list[str]] = {}
    for h in hosts:
        by_rack.setdefault(rack.get(h, h), []).append(h)
    jobs = []
    width = len(str(max(spec.jobs - 1, 0)))
    for n in range(spec.jobs):
        ps = rng.choice(hosts)
        count = min(rng.randint(spec.min_workers, spec.max_workers), len(hosts) - 1)
        workers: list[str] = []
        chosen = {ps}
        local = [h for h in by_rack[rack.get(ps, ps)] if h != ps]
        rng.shuffle(local)
        while len(workers) < count:
            if local and rng.random() < spec.rack_locality:
                h = local.pop()
            else:
                h = rng.choice(hosts)
            if h in chosen:
                continue
            chosen.add(h)
            workers.append(h)
        jobs.append(Job(f"job-{n:0{width}d}", ps, tuple(workers), rng.choice(spec.demands)))
    return tuple(jobs)


def reference_instance(
    k: int,
    jobs: int,
    group_capacity: int | None = None,
    entry_capacity: int | None = None,
    seed: int = 0,
    oversubscribed: bool = False,
    min_workers: int = 4,
    max_workers: int = 32,
    rack_locality: float = 0.0,
    capacity: float = 10 * GBIT,
) -> Instance:
    """A fat-tree k with `jobs` generated jobs: the reference workload of docs/architecture.md, Reference workloads."""
    topo = fat_tree(k, capacity, 2.0 if oversubscribed else 1.0, group_capacity, entry_capacity)
    spec = WorkloadSpec(jobs, min_workers, max_workers, DEMANDS, rack_locality, seed)
    return Instance(topo, generate_jobs(topo, spec))
