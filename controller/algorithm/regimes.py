"""Fabrics where planning matters: oversubscribed cores, mixed table budgets, a production-shaped Clos.

The reference workloads (`workload.py`) put the same group budget G on every
switch of a fat-tree whose only oversubscription is a 2:1 core. Real fabrics
differ in two ways that make the choice of trees matter (docs/evaluation.md,
"Where does the choice of trees matter?"):

- *mixed budgets*: switches of several hardware generations hold different numbers
  of replication groups, and core switches often none (`mixed_budgets`: core
  switches 0, every other switch one of `MIXED_CHOICES`, drawn per switch);
- *irregular, oversubscribed pods*: racks of a few hosts to a full rack, pods of
  different sizes, uplinks thinner than the hosts below them (`production_clos`).

`regime_instance` builds one instance of a regime with the reference jobs
(`workload.generate_jobs`). Pure and deterministic for a given seed, like the
rest of this package; the planner recognises both fabrics as Clos
(`fabric.recognise_clos`) and uses its fast paths on them.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from controller.algorithm.fabric import recognise_clos
from controller.algorithm.model import Instance, Link, Node, Topology
from controller.algorithm.topologies import GBIT, fat_tree
from controller.algorithm.workload import DEMANDS, WorkloadSpec, generate_jobs

#: the group budgets a non-core switch draws from under mixed budgets (a switch without groups included)
MIXED_CHOICES: tuple[int, ...] = (0, 2, 8, 64)
BUDGETS = ("uniform", "mixed")


@dataclass(frozen=True)
class ClosShape:
    """The production-shaped Clos: `racks` racks spread over `pods` pods (as evenly as
    possible), each rack a top-of-rack switch with `min_hosts`..`max_hosts` hosts
    (drawn per rack), linked to each of its pod's `aggs` aggregation switches;
    aggregation switch i of every pod linked to the `cores_per_agg` cores of plane i."""

    pods: int = 3
    racks: int = 119
    min_hosts: int = 2
    max_hosts: int = 8
    aggs: int = 4
    cores_per_agg: int = 4
    host_capacity: float = 10 * GBIT
    rack_uplink: float = 10 * GBIT  # per ToR-aggregation link: 4 x 10 against up to 8 x 10 below (2:1)
    core_link: float = 40 * GBIT  # per aggregation-core link: 4 x 40 against up to 40 x 10 below (2.5:1)

    def __post_init__(self) -> None:
        if self.pods < 2:
            raise ValueError(f"pods: a three-tier Clos needs at least 2, got {self.pods}")
        if self.racks < self.pods:
            raise ValueError(f"racks: at least one per pod ({self.pods}), got {self.racks}")
        if not 1 <= self.min_hosts <= self.max_hosts:
            raise ValueError(f"min_hosts/max_hosts: need 1 <= min_hosts <= max_hosts, got {self.min_hosts}, {self.max_hosts}")
        if self.aggs < 1 or self.cores_per_agg < 1:
            raise ValueError("aggs and cores_per_agg must be >= 1")
        for name in ("host_capacity", "rack_uplink", "core_link"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")


#: the Clos fabrics by name: the production-shaped one (3 pods, 119 racks of 2-8 hosts), a larger one
#: of the same shape (163 racks: 849 hosts, the planner's speed goal, docs/performance.md) and a tiny one for tests
SHAPES: dict[str, ClosShape] = {
    "clos": ClosShape(),
    "clos-850": ClosShape(racks=163),
    "clos-tiny": ClosShape(pods=3, racks=9, aggs=2, cores_per_agg=2),
}
FABRICS = ("fat-tree", *SHAPES)


def production_clos(shape: ClosShape = ClosShape(), seed: int = 0, group_capacity: int | None = None) -> Topology:
    """The production-shaped Clos of `shape`; the rack sizes are drawn from `seed`.
    Names: core-P-i (plane P), agg-p-i, tor-p-r, host-n."""
    rng = random.Random(seed)
    nodes: list[Node] = []
    links: list[Link] = []
    cores = [[f"core-{plane}-{i}" for i in range(shape.cores_per_agg)] for plane in range(shape.aggs)]
    nodes += [Node(c, "switch", group_capacity) for plane in cores for c in plane]
    host = 0
    for p in range(shape.pods):
        racks = shape.racks // shape.pods + (1 if p < shape.racks % shape.pods else 0)
        aggs = [f"agg-{p}-{i}" for i in range(shape.aggs)]
        nodes += [Node(a, "switch", group_capacity) for a in aggs]
        for plane, a in enumerate(aggs):
            links += [Link(a, c, shape.core_link) for c in cores[plane]]
        for r in range(racks):
            tor = f"tor-{p}-{r}"
            nodes.append(Node(tor, "switch", group_capacity))
            links += [Link(tor, a, shape.rack_uplink) for a in aggs]
            for _ in range(rng.randint(shape.min_hosts, shape.max_hosts)):
                nodes.append(Node(f"host-{host}", "host"))
                links.append(Link(tor, f"host-{host}", shape.host_capacity))
                host += 1
    return Topology(tuple(nodes), tuple(links))


def mixed_budgets(topo: Topology, seed: int, choices: tuple[int, ...] = MIXED_CHOICES) -> Topology:
    """`topo` with core switches at 0 groups and every other switch at one of `choices`
    (drawn per switch, in node order, from `seed`); entry budgets unchanged.
    ValueError if `topo` is not a three-tier Clos (no core to tell apart)."""
    if not choices or any(c < 0 for c in choices):
        raise ValueError(f"choices: need at least one budget, none negative, got {choices}")
    fabric = recognise_clos(topo)
    if fabric is None or fabric.tiers != 3:
        raise ValueError("mixed budgets need a three-tier Clos (core switches)")
    cores = set(fabric.cores)
    rng = random.Random(seed)
    nodes = []
    for i, n in enumerate(topo.nodes):
        if n.is_switch:
            n = dataclasses.replace(n, group_capacity=0 if i in cores else rng.choice(choices))
        nodes.append(n)
    return Topology(tuple(nodes), topo.links)


def regime_instance(
    fabric: str,
    jobs: int,
    seed: int = 0,
    k: int = 8,
    core_ratio: float = 1.0,
    budgets: str = "mixed",
    group_capacity: int | None = None,
    min_workers: int = 4,
    max_workers: int = 32,
) -> Instance:
    """One instance of a regime: a k-ary fat-tree whose core links carry 10 Gbit/s /
    `core_ratio` (`fabric` "fat-tree") or the Clos `SHAPES[fabric]`, its racks drawn
    from seed 0 so that every seed plans the same fabric (`k` unused); table
    budgets `group_capacity` on every switch ("uniform") or `mixed_budgets` drawn
    from `seed` ("mixed"); the reference jobs drawn from `seed`."""
    if fabric not in FABRICS:
        raise ValueError(f"fabric: choose from {', '.join(FABRICS)}, got {fabric!r}")
    if budgets not in BUDGETS:
        raise ValueError(f"budgets: choose from {', '.join(BUDGETS)}, got {budgets!r}")
    if fabric == "fat-tree":
        topo = fat_tree(k, 10 * GBIT, core_ratio, group_capacity)
    else:
        if core_ratio != 1.0:
            raise ValueError("core_ratio: the production-shaped Clos has its own oversubscription (ClosShape)")
        topo = production_clos(SHAPES[fabric], 0, group_capacity)
    if budgets == "mixed":
        topo = mixed_budgets(topo, seed)
    return Instance(topo, generate_jobs(topo, WorkloadSpec(jobs, min_workers, max_workers, DEMANDS, 0.0, seed)))
