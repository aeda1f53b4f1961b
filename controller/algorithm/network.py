"""`Network`: a topology with the derived facts every algorithm needs.

It bundles the topology, its recognised Clos roles (if any), the shared unicast
routing and the per-switch table capacities as arrays, so that each algorithm
builds them once per instance. It is pure: no I/O, no clock.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from controller.algorithm.fabric import ClosFabric, recognise_clos
from controller.algorithm.model import Job, Topology
from controller.algorithm.routing import UnicastRouting


class Network:
    """Derived, cached views of one topology."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.fabric: ClosFabric | None = recognise_clos(topo)
        self.routing = UnicastRouting(topo, self.fabric)
        n = len(topo.nodes)
        self.group_cap = np.full(n, np.inf)
        self.entry_cap = np.full(n, np.inf)
        for i, node in enumerate(topo.nodes):
            if node.is_switch:
                if node.group_capacity is not None:
                    self.group_cap[i] = node.group_capacity
                if node.entry_capacity is not None:
                    self.entry_cap[i] = node.entry_capacity
        self.capacity = topo.capacity
        self.n_nodes = n
        self.n_edges = len(topo.edges)
        # Memo of pure per-job computations (pricing data), shared by every
        # algorithm that runs on this network; keyed by (what, PS, workers, ...).
        self.memo: dict[tuple, object] = {}

    @cached_property
    def edge_tail(self) -> np.ndarray:
        return np.array([e.tail for e in self.topo.edges], dtype=np.int64)

    @cached_property
    def edge_head(self) -> np.ndarray:
        return np.array([e.head for e in self.topo.edges], dtype=np.int64)

    @property
    def kind(self) -> str:
        if self.fabric is None:
            return "graph"
        return "fat-tree" if self.fabric.tiers == 3 else "leaf-spine"

    def job_nodes(self, job: Job) -> tuple[int, list[int]]:
        idx = self.topo.index
        return idx[job.ps], [idx[w] for w in job.workers]

    def kappa(self) -> int:
        """Number of constrained resources: directed edges plus finite switch tables."""
        finite = np.isfinite(self.group_cap).sum() + np.isfinite(self.entry_cap).sum()
        return int(self.n_edges + finite)
