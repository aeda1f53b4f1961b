"""The one deterministic unicast routing function of the project.

`UnicastRouting.next_hop(v, dest)` is a function of the topology alone: the planner
uses it to count the copies that unicast branches put on each edge, and the
southbound uses it to program unicast forwarding, so a plan's copy counts are
what the data plane does. Routes are shortest paths (hop count); hosts are never
transited. Among equal-cost next hops:

- on a recognised Clos fabric, d-mod-k: every route toward host `w` that starts at a
  host or an edge switch crosses one top switch, `pivot(w)` (a hash of the host's
  name picks it), so that the routes from the hosts toward a host form a single-top
  in-tree; an aggregation switch not adjacent to the pivot uses the core at the
  pivot's position in its own group;
- elsewhere, the neighbour with the smallest CRC-32 of "dest|neighbour".
"""

from __future__ import annotations

import zlib
from collections import deque

import numpy as np

from controller.algorithm.fabric import ClosFabric
from controller.algorithm.model import Topology


class UnicastRouting:
    """Deterministic shortest-path next hops, with per-destination caches."""

    def __init__(self, topo: Topology, fabric: ClosFabric | None) -> None:
        self.topo = topo
        self.fabric = fabric
        self._dist: dict[int, dict[int, int]] = {}
        self._path_edges: dict[tuple[int, int], np.ndarray] = {}
        self._pivot: dict[int, int] = {}
        if fabric is not None:
            self._agg_cores = {
                a: tuple(c for c in topo.neighbors[a] if c in fabric.core_group)
                for a in fabric.agg_pod
            }

    # -- next hops -------------------------------------------------------------
    def next_hop(self, v: int, dest: int) -> int:
        """The neighbour of `v` that a packet for host `dest` is sent to."""
        if v == dest:
            raise ValueError("a packet at its destination has no next hop")
        if self.fabric is not None:
            return self._clos_next_hop(v, dest)
        return self._bfs_next_hop(v, dest)

    def reachable(self, v: int, dest: int) -> bool:
        """Whether a packet at switch `v` can reach host `dest` at all (links that
        are down can cut a switch off: it then has no next hop)."""
        if self.fabric is not None:
            return True  # a recognised Clos fabric is whole
        return v in self._distances(dest)

    def _clos_next_hop(self, v: int, dest: int) -> int:
        f = self.fabric
        assert f is not None
        if not self.topo.is_switch(v):
            return f.host_edge[v]
        e_w = f.host_edge[dest]
        if v == e_w:
            return dest
        p_w = f.edge_pod[e_w]
        pivot = self.pivot(dest)
        if v in f.edge_pod:
            p = f.edge_pod[v]
            if f.tiers == 2:
                return pivot
            return f.core_agg[pivot][p]
        if v in f.agg_pod:
            if f.agg_pod[v] == p_w:
                return e_w
            return self.agg_uplink(v, dest)
        return f.core_agg[v][p_w]

    def agg_uplink(self, agg: int, dest: int) -> int:
        """The core an aggregation switch sends a packet for `dest` (in another pod) to:
        the pivot if adjacent, else the core at the pivot's position in its own group."""
        cores = self._agg_cores[agg]
        pivot = self.pivot(dest)
        if pivot in cores:
            return pivot
        h = zlib.crc32(self.topo.name(dest).encode())
        assert self.fabric is not None
        return cores[(h // len(self.fabric.groups)) % len(cores)]

    def pivot(self, dest: int) -> int:
        p = self._pivot.get(dest)
        if p is None:
            assert self.fabric is not None
            p = self._pivot[dest] = self.fabric.pivot(self.topo.name(dest))
        return p

    def _distances(self, dest: int) -> dict[int, int]:
        d = self._dist.get(dest)
        if d is not None:
            return d
        topo = self.topo
        d = {dest: 0}
        queue = deque([dest])
        while queue:
            v = queue.popleft()
            if v != dest and not topo.is_switch(v):
                continue  # hosts are never transited
            for u in topo.neighbors[v]:
                if u not in d:
                    d[u] = d[v] + 1
                    queue.append(u)
        self._dist[dest] = d
        return d

    def _bfs_next_hop(self, v: int, dest: int) -> int:
        topo = self.topo
        d = self._distances(dest)
        if v not in d:
            raise ValueError(f"{topo.name(dest)} is unreachable from {topo.name(v)}")
        best, best_key = -1, None
        dname = topo.name(dest)
        for u in topo.neighbors[v]:
            if d.get(u) != d[v] - 1 or (u != dest and not topo.is_switch(u)):
                continue
            key = zlib.crc32(f"{dname}|{topo.name(u)}".encode())
            if best_key is None or key < best_key:
                best, best_key = u, key
        return best

    # -- paths -------------------------------------------------------------------
    def path(self, src: int, dest: int) -> list[int]:
        """Node sequence from `src` to host `dest` along next hops."""
        if self.fabric is not None:
            return self._clos_path(src, dest)
        nodes = [src]
        v = src
        limit = len(self.topo.nodes)
        while v != dest:
            v = self.next_hop(v, dest)
            nodes.append(v)
            if len(nodes) > limit:
                raise RuntimeError("routing loop")  # cannot happen on shortest paths
        return nodes

    def _clos_path(self, src: int, dest: int) -> list[int]:
        """`path` on a Clos fabric in closed form (the same hops as `next_hop`)."""
        f = self.fabric
        assert f is not None
        nodes = [src]
        v = src
        if not self.topo.is_switch(v):
            v = f.host_edge[v]
            nodes.append(v)
        e_w = f.host_edge[dest]
        if v != e_w:
            p_w = f.edge_pod[e_w]
            if v in f.edge_pod:
                pivot = self.pivot(dest)
                if f.tiers == 2:
                    nodes.append(pivot)
                else:
                    p = f.edge_pod[v]
                    nodes.append(f.core_agg[pivot][p])
                    if p != p_w:
                        nodes += [pivot, f.core_agg[pivot][p_w]]
            elif v in f.agg_pod:
                if f.agg_pod[v] != p_w:
                    c = self.agg_uplink(v, dest)
                    nodes += [c, f.core_agg[c][p_w]]
            else:
                nodes.append(f.core_agg[v][p_w])
            nodes.append(e_w)
        nodes.append(dest)
        return nodes

    def path_edges(self, src: int, dest: int) -> np.ndarray:
        """Directed edge indices of the route from `src` to host `dest` (cached)."""
        key = (src, dest)
        pe = self._path_edges.get(key)
        if pe is None:
            nodes = self.path(src, dest)
            ei = self.topo.edge_index
            pe = np.array([ei[(a, b)] for a, b in zip(nodes, nodes[1:])], dtype=np.int64)
            self._path_edges[key] = pe
        return pe
