"""The planner's data model: topology, jobs, delivery structures and plans.

Everything here is an immutable dataclass. Nodes are named by string ids in the
public fields; the topology also numbers nodes and directed edges so that the
algorithms can work on integer indices and numpy arrays. A `Structure` stores its
multicast tree and its unicast branches; copy counts, replicating switches and
entry switches are derived from those by `controller.algorithm.structures`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np

NodeKind = Literal["switch", "host"]
Mode = Literal["multicast", "hybrid", "unicast"]


@dataclass(frozen=True)
class Node:
    """A switch or a host. Table capacities are `None` for unlimited."""

    id: str
    kind: NodeKind
    group_capacity: int | None = None
    entry_capacity: int | None = None

    @property
    def is_switch(self) -> bool:
        return self.kind == "switch"


@dataclass(frozen=True)
class Link:
    """A bidirectional link with `capacity` bit/s in each direction."""

    a: str
    b: str
    capacity: float


@dataclass(frozen=True)
class Edge:
    """One direction of a link, by node index."""

    tail: int
    head: int
    capacity: float


@dataclass(frozen=True, eq=False)
class Topology:
    """A network: nodes and bidirectional links. Validated by `validate_topology`."""

    nodes: tuple[Node, ...]
    links: tuple[Link, ...]

    @cached_property
    def index(self) -> dict[str, int]:
        return {n.id: i for i, n in enumerate(self.nodes)}

    @cached_property
    def edges(self) -> tuple[Edge, ...]:
        idx = self.index
        out: list[Edge] = []
        for link in self.links:
            a, b = idx[link.a], idx[link.b]
            out.append(Edge(a, b, link.capacity))
            out.append(Edge(b, a, link.capacity))
        return tuple(out)

    @cached_property
    def edge_index(self) -> dict[tuple[int, int], int]:
        return {(e.tail, e.head): i for i, e in enumerate(self.edges)}

    @cached_property
    def capacity(self) -> np.ndarray:
        return np.array([e.capacity for e in self.edges], dtype=float)

    @cached_property
    def neighbors(self) -> tuple[tuple[int, ...], ...]:
        nb: list[list[int]] = [[] for _ in self.nodes]
        for e in self.edges:
            nb[e.tail].append(e.head)
        return tuple(tuple(sorted(n, key=lambda i: self.nodes[i].id)) for n in nb)

    @cached_property
    def switches(self) -> tuple[int, ...]:
        return tuple(i for i, n in enumerate(self.nodes) if n.is_switch)

    @cached_property
    def hosts(self) -> tuple[int, ...]:
        return tuple(i for i, n in enumerate(self.nodes) if not n.is_switch)

    def is_switch(self, i: int) -> bool:
        return self.nodes[i].kind == "switch"

    def name(self, i: int) -> str:
        return self.nodes[i].id


@dataclass(frozen=True)
class Job:
    """A training job: its PS pushes `demand` bit/s to every worker."""

    id: str
    ps: str
    workers: tuple[str, ...]
    demand: float
    weight: float = 1.0


@dataclass(frozen=True, eq=False)
class Instance:
    """A topology and the jobs that share it."""

    topology: Topology
    jobs: tuple[Job, ...]


@dataclass(frozen=True)
class Structure:
    """How one job's stream is delivered.

    `tree` holds the multicast arborescence as (parent, child) node-index pairs,
    rooted at the PS; `branches` holds the unicast copies as (emitter, worker)
    pairs: the emitter (the PS or a switch in the tree) rewrites a copy to the
    worker's address and it follows the unicast route. `copies` are
    (edge index, count) pairs, sorted; `groups` are the switches that replicate
    (two or more outputs) and `entries` every switch of the tree.
    """

    tree: tuple[tuple[int, int], ...]
    branches: tuple[tuple[int, int], ...]
    copies: tuple[tuple[int, int], ...]
    groups: frozenset[int]
    entries: frozenset[int]
    declared_mode: Mode | None = None  # set when read from a plan file (no tree there)

    @property
    def mode(self) -> Mode:
        if self.declared_mode is not None:
            return self.declared_mode
        if not self.branches:
            return "multicast"
        if not self.entries:
            return "unicast"
        return "hybrid"

    @cached_property
    def edge_array(self) -> np.ndarray:
        return np.array([e for e, _ in self.copies], dtype=np.int64)

    @cached_property
    def copy_array(self) -> np.ndarray:
        return np.array([c for _, c in self.copies], dtype=float)

    @cached_property
    def group_array(self) -> np.ndarray:
        """`groups` as an array (counting tables over many structures in one bincount)."""
        return np.fromiter(self.groups, np.int64, len(self.groups))

    @cached_property
    def entry_array(self) -> np.ndarray:
        """`entries` as an array."""
        return np.fromiter(self.entries, np.int64, len(self.entries))

    @property
    def key(self) -> tuple:
        return (self.tree, self.branches)


@dataclass(frozen=True)
class JobPlan:
    """A job's chosen structure and its allocated rate in bit/s."""

    job: Job
    rate: float
    structure: Structure


@dataclass(frozen=True)
class SwitchUsage:
    id: str
    groups_used: int
    group_capacity: int | None
    entries_used: int
    entry_capacity: int | None


@dataclass(frozen=True, eq=False)
class PlanLoads:
    """A plan's jobs as arrays on its network, kept with the plan for the next
    admission (`algorithm.loads`), which then neither passes over every job's
    structure again nor fills every job's rate again. Describes exactly the plan
    whose `jobs` tuple is `jobs` (the same object: a plan made from another
    tuple, by `dataclasses.replace` say, has its loads made again).

    Job i (in `jobs` order) has the copies `copies[indptr[i]:indptr[i + 1]]` on
    the edges `edges[...]` (its structure's, in order; `owner` is i for each) and
    the rate `rates[i]` of its demand `demands[i]`; `groups` and `entries` count
    per node the jobs whose structure replicates there or has an entry there."""

    jobs: tuple[JobPlan, ...]
    position: dict[str, int]  # job id -> its index in `jobs`
    indptr: np.ndarray
    edges: np.ndarray
    copies: np.ndarray
    owner: np.ndarray
    rates: np.ndarray
    demands: np.ndarray
    groups: np.ndarray
    entries: np.ndarray


@dataclass(frozen=True)
class Plan:
    """The result of one algorithm on one instance (docs/architecture.md, Formats)."""

    algorithm: str
    objective: str
    lam: float
    throughput: float
    lp_bound: float | None
    kappa: int
    beta: float | None
    runtime_s: float
    jobs: tuple[JobPlan, ...]
    switches: tuple[SwitchUsage, ...]
    notes: tuple[str, ...] = field(default=())
    # lp-rounding only: per job (in job order) the structures its LP held, the
    # chosen one included; the warm start of a later plan on the same topology
    columns: tuple[tuple[Structure, ...], ...] = field(default=(), compare=False, repr=False)
    # admission only: the plan's jobs as arrays, for the next admission (`PlanLoads`)
    loads: PlanLoads | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Solution:
    """What an algorithm chooses: one structure per job (in job order), plus its certificate."""

    structures: list[Structure]
    lp_bound: float | None = None
    beta: float | None = None
    notes: tuple[str, ...] = ()
    # the rates `rates.allocate` gives these structures, when the algorithm computed them
    rates: np.ndarray | None = field(default=None, compare=False, repr=False)
    # per job, the column pool the LP ended with (lp-rounding), for `Plan.columns`
    columns: tuple[tuple[Structure, ...], ...] = field(default=(), compare=False, repr=False)


class PlanningError(ValueError):
    """An algorithm cannot plan this instance (for example `ilp` above its size limit)."""
