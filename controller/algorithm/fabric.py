"""Recognition of Clos fabrics (3-tier fat-trees and 2-tier leaf-spines) from the graph.

The planner has fast paths for these structures: exact pricing over single-top
up-down trees and d-mod-k unicast routing. Recognition looks only at adjacency,
never at node names (names are used only to order nodes deterministically).

A 3-tier fabric: every host hangs off one edge switch; edge and aggregation
switches form pods, each a complete bipartite graph; every core switch has exactly
one aggregation neighbour in every pod. A leaf-spine is the same with a single
pod and no cores: leaves (edge) and spines (aggregation), complete bipartite.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from controller.algorithm.model import Topology


@dataclass(frozen=True, eq=False)
class ClosFabric:
    """Roles of the switches in a recognised Clos fabric, by node index.

    `tops` are the switches that a single-top multicast tree is rooted at: the
    cores of a 3-tier fabric, the spines of a leaf-spine. `core_agg[c][p]` is the
    aggregation switch of pod `p` adjacent to core `c`. Cores with the same
    aggregation neighbour in every pod form a group; `groups` lists them.
    """

    tiers: int  # 2 (leaf-spine) or 3 (fat-tree)
    host_edge: dict[int, int]  # host -> its edge switch
    edge_pod: dict[int, int]  # edge switch -> pod number
    agg_pod: dict[int, int]  # aggregation switch -> pod number
    pod_edges: tuple[tuple[int, ...], ...]
    pod_aggs: tuple[tuple[int, ...], ...]
    cores: tuple[int, ...]
    core_agg: dict[int, tuple[int, ...]]  # core -> aggregation switch per pod
    groups: tuple[tuple[int, ...], ...]  # cores grouped by identical core_agg rows
    core_group: dict[int, int]

    @property
    def tops(self) -> tuple[int, ...]:
        return self.cores if self.tiers == 3 else self.pod_aggs[0]

    def pivot(self, dest_name: str) -> int:
        """The top switch that all routes toward host `dest_name` cross (d-mod-k)."""
        h = zlib.crc32(dest_name.encode())
        if self.tiers == 2:
            spines = self.pod_aggs[0]
            return spines[h % len(spines)]
        group = self.groups[h % len(self.groups)]
        return group[(h // len(self.groups)) % len(group)]


def recognise_clos(topo: Topology) -> ClosFabric | None:
    """Return the Clos roles of `topo`, or None if it is not a fat-tree or leaf-spine."""
    nb = topo.neighbors
    host_edge: dict[int, int] = {}
    for h in topo.hosts:
        if len(nb[h]) != 1 or not topo.is_switch(nb[h][0]):
            return None
        host_edge[h] = nb[h][0]
    edges = set(host_edge.values())
    if not edges:
        return None
    level2 = {u for e in edges for u in nb[e] if topo.is_switch(u)} - edges
    if not level2:
        return None
    level3 = set(topo.switches) - edges - level2
    for e in edges:
        if any(topo.is_switch(u) and u not in level2 for u in nb[e]):
            return None
    for a in level2:
        if any(not topo.is_switch(u) or u not in edges and u not in level3 for u in nb[a]):
            return None
    for c in level3:
        if any(u not in level2 for u in nb[c]):
            return None

    # Pods: connected components of the edge/aggregation bipartite graph.
    pod_of: dict[int, int] = {}
    pods: list[tuple[list[int], list[int]]] = []
    order = sorted(edges | level2, key=topo.name)
    for start in order:
        if start in pod_of:
            continue
        pid = len(pods)
        es, ags, stack = [], [], [start]
        pod_of[start] = pid
        while stack:
            v = stack.pop()
            (es if v in edges else ags).append(v)
            for u in nb[v]:
                if u in pod_of or u not in edges and u not in level2:
                    continue
                pod_of[u] = pid
                stack.append(u)
        pods.append((sorted(es, key=topo.name), sorted(ags, key=topo.name)))
    for es, ags in pods:
        if not es or not ags:
            return None
        for e in es:
            if sum(1 for u in nb[e] if u in level2) != len(ags):
                return None

    if not level3:
        if len(pods) != 1:
            return None
        tiers = 2
    else:
        tiers = 3
        if len(pods) < 2:
            return None
    core_agg: dict[int, tuple[int, ...]] = {}
    for c in sorted(level3, key=topo.name):
        row = [-1] * len(pods)
        for a in nb[c]:
            p = pod_of[a]
            if row[p] != -1:
                return None
            row[p] = a
        if -1 in row:
            return None
        core_agg[c] = tuple(row)
    by_row: dict[tuple[int, ...], list[int]] = {}
    for c, row in core_agg.items():
        by_row.setdefault(row, []).append(c)
    groups = tuple(tuple(cs) for cs in sorted(by_row.values(), key=lambda cs: topo.name(cs[0])))
    core_group = {c: gi for gi, cs in enumerate(groups) for c in cs}
    return ClosFabric(
        tiers=tiers,
        host_edge=host_edge,
        edge_pod={e: pod_of[e] for e in edges},
        agg_pod={a: pod_of[a] for a in level2},
        pod_edges=tuple(tuple(es) for es, _ in pods),
        pod_aggs=tuple(tuple(ags) for _, ags in pods),
        cores=tuple(sorted(level3, key=topo.name)),
        core_agg=core_agg,
        groups=groups,
        core_group=core_group,
    )
