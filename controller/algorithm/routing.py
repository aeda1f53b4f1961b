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

    def host_routes(self, pairs: list[tuple[int, int]]) -> None:
        """Cache `path_edges(s, d)` for pairs (s, d) of hosts, computed together on a
        Clos fabric: the hops of `_clos_path` (up to the pivot's aggregation switch in
        the source's pod, over the pivot to the destination's pod) as arrays over the
        pairs, their edges found by one sorted search. Elsewhere (or from a switch)
        the routes are left to `path_edges`."""
        f = self.fabric
        topo = self.topo
        if f is None:
            return
        cache = self._path_edges
        pairs = [(a, b) for a, b in pairs if (a, b) not in cache and not topo.is_switch(a)]
        if not pairs:
            return
        t = self._clos_tables()
        src = np.array([a for a, _ in pairs], dtype=np.int64)
        d = np.array([b for _, b in pairs], dtype=np.int64)
        e0 = t["host_edge"][src]
        p0 = t["edge_pod"][e0]
        ew = t["host_edge"][d]
        pw = t["edge_pod"][ew]
        down = t["host_down"][d]
        pivot = np.array([self.pivot(b) for _, b in pairs], dtype=np.int64)
        same_rack = ew == e0
        same_pod = pw == p0
        if f.tiers == 2:
            agg1 = agg2 = pivot  # the spine
        else:
            rows = t["core_row"][pivot]
            agg1 = t["core_agg"][rows, p0]
            agg2 = t["core_agg"][rows, pw]
        # per pair, its route's edges in the first 2, 4 or 6 columns
        hops = np.stack([
            t["host_up"][src],
            np.where(same_rack, down, self._edge_ids(e0, agg1)),
            np.where(same_pod, self._edge_ids(agg1, ew), self._edge_ids(agg1, pivot)),
            np.where(same_pod, down, self._edge_ids(pivot, agg2)),
            self._edge_ids(agg2, ew),
            down,
        ], axis=1)
        hops.flags.writeable = False  # the cached routes are views of its rows
        length = np.where(same_rack, 2, np.where(same_pod, 4, 6)).tolist()
        for i, pair in enumerate(pairs):
            cache[pair] = hops[i, : length[i]]

    def _clos_tables(self) -> dict[str, np.ndarray]:
        """Per-node arrays of a Clos fabric for `host_routes` (built once)."""
        t = self.__dict__.get("_tables")
        if t is None:
            f = self.fabric
            assert f is not None
            topo = self.topo
            n = len(topo.nodes)
            ei = topo.edge_index
            host_edge = np.full(n, -1, dtype=np.int64)
            host_up = np.full(n, -1, dtype=np.int64)
            host_down = np.full(n, -1, dtype=np.int64)
            for h, e in f.host_edge.items():
                host_edge[h] = e
                host_up[h] = ei[(h, e)]
                host_down[h] = ei[(e, h)]
            edge_pod = np.full(n, -1, dtype=np.int64)
            for e, p in f.edge_pod.items():
                edge_pod[e] = p
            core_row = np.full(n, -1, dtype=np.int64)
            for i, c in enumerate(f.cores):
                core_row[c] = i
            core_agg = np.array([f.core_agg[c] for c in f.cores], dtype=np.int64).reshape(len(f.cores), len(f.pod_edges))
            keys = np.array([e.tail * n + e.head for e in topo.edges], dtype=np.int64)
            order = np.argsort(keys, kind="stable")
            t = self._tables = {
                "host_edge": host_edge, "host_up": host_up, "host_down": host_down, "edge_pod": edge_pod, "core_row": core_row,
                "core_agg": core_agg, "keys": keys[order], "edge_of_key": order, "n": np.int64(n),
            }
        return t

    def _edge_ids(self, tails: np.ndarray, heads: np.ndarray) -> np.ndarray:
        """Edge indices of the directed pairs (tails[i], heads[i]); pairs that are not
        edges give some index, which `host_routes` does not use."""
        t = self._clos_tables()
        keys = t["keys"]
        pos = np.searchsorted(keys, tails * t["n"] + heads).clip(max=len(keys) - 1)
        return t["edge_of_key"][pos]

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
