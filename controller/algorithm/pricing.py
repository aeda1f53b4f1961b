"""Pricing: the cheapest delivery structure of a job under given prices.

Prices are a weight per copy on every directed edge (`w_edge`), a price per
replicating switch (`alpha`) and a price per entry switch (`gamma`); an infinite
price forbids the resource. `Pricer.price` returns the best structure found, its
cost, and a lower bound on the cost of every structure of the job's family:

- on a recognised Clos fabric the family's base trees are the single-top up-down
  trees (one per core, or per aggregation/spine switch when the job does not
  leave its pod); a dynamic programme over the fabric's levels, vectorised over
  the cores of each group, finds the exact optimum, so the bound equals the cost;
- on any other graph the base trees are heuristics (the reverse-path tree of the
  shared routing, a Mehlhorn Steiner tree and a shortest-path tree under the
  prices) and the lower bound comes from a relaxation (docs/algorithm.md §4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra, minimum_spanning_tree

from .model import Job, Structure
from .network import Network
from .structures import BaseTree, base_tree_from_parents, best_pruning, structure_cost, unicast_structure

INF = math.inf


@dataclass(frozen=True)
class PriceResult:
    cost: float
    structure: Structure | None
    lower_bound: float


def _combine(children: list[tuple[float, float, int]], al: float) -> float:
    """Cost of a tree node's children given the node is in the tree.

    Each child is (cost if it stays in the tree, cost if its workers get unicast
    copies from this node, how many copies that is). The node replicates (pays
    `al`) unless it has a single output.
    """
    if len(children) == 1:
        a, b, n = children[0]
        return min(a, b + (al if n >= 2 else 0.0))
    return al + sum(min(a, b) for a, b, _ in children)


def _opt_alpha(al: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """al where mask else 0, without inf*0 = nan."""
    return np.where(mask, al, 0.0)


class _ClosJob:
    """Static index arrays of one job on a Clos fabric, built once per job."""

    def __init__(self, net: Network, ps: int, workers: list[int]) -> None:
        f = net.fabric
        assert f is not None
        ei = net.topo.edge_index
        rt = net.routing
        self.ps, self.workers = ps, workers
        self.e0 = e0 = f.host_edge[ps]
        self.p0 = p0 = f.edge_pod[e0]
        self.idx_h_e0 = ei[(ps, e0)]
        self.same_rack = [w for w in workers if f.host_edge[w] == e0]
        self.idx_same = np.array([ei[(e0, w)] for w in self.same_rack], dtype=np.int64)
        self.beyond = [w for w in workers if f.host_edge[w] != e0]
        self.route_h = np.concatenate([rt.path_edges(ps, w) for w in workers])
        self.route_e0 = (
            np.concatenate([rt.path_edges(e0, w) for w in self.beyond])
            if self.beyond
            else np.zeros(0, dtype=np.int64)
        )
        racks: dict[int, list[int]] = {}
        for w in self.beyond:
            racks.setdefault(f.host_edge[w], []).append(w)
        pod0 = [(e, ws) for e, ws in sorted(racks.items()) if f.edge_pod[e] == p0]
        remote = [(e, ws) for e, ws in sorted(racks.items()) if f.edge_pod[e] != p0]
        self.remote = bool(remote) and f.tiers == 3
        self.n_remote = sum(len(ws) for _, ws in remote)

        # Racks: per rack the worker edges, summed per rack with bincount.
        def rack_arrays(rs: list[tuple[int, list[int]]]):
            e = np.array([r for r, _ in rs], dtype=np.int64)
            n = np.array([len(ws) for _, ws in rs], dtype=float)
            rid = np.concatenate([[i] * len(ws) for i, (_, ws) in enumerate(rs)]).astype(np.int64) if rs else np.zeros(0, dtype=np.int64)
            idx = np.array([ei[(r, w)] for r, ws in rs for w in ws], dtype=np.int64)
            return e, n, rid, idx

        self.pod0_e, self.pod0_n, self.pod0_rid, self.pod0_idx = rack_arrays(pod0)
        self.rem_e, self.rem_n, self.rem_rid, self.rem_idx = rack_arrays(remote)
        # Options for the aggregation switch above e0: (a0, core data or None).
        self.options: list[dict] = []
        if self.remote:
            pods = sorted({f.edge_pod[e] for e, _ in remote})
            pod_pos = {p: i for i, p in enumerate(pods)}
            self.rem_pod = np.array([pod_pos[f.edge_pod[e]] for e, _ in remote], dtype=np.int64)
            self.n_pods = len(pods)
            self.pod_n = np.bincount(self.rem_pod, weights=self.rem_n, minlength=len(pods))
            self.pod_racks = np.bincount(self.rem_pod, minlength=len(pods))
            remote_workers = [w for _, ws in remote for w in ws]
            for cores in f.groups:
                row = f.core_agg[cores[0]]
                a0 = row[p0]
                aggs = np.array([row[p] for p in pods], dtype=np.int64)
                self.options.append(
                    {
                        "a0": a0,
                        "cores": np.array(cores, dtype=np.int64),
                        "aggs": aggs,
                        "rack_agg": aggs[self.rem_pod],
                        "idx_ae": np.array([ei[(row[f.edge_pod[e]], e)] for e, _ in remote], dtype=np.int64),
                        "idx_cp": np.array([[ei[(c, a)] for a in aggs] for c in cores], dtype=np.int64),
                        "idx_a0c": np.array([ei[(a0, c)] for c in cores], dtype=np.int64),
                        "route_a0": np.concatenate([rt.path_edges(a0, w) for w in remote_workers]),
                    }
                )
        elif self.beyond:
            for a0 in f.pod_aggs[p0]:
                self.options.append({"a0": a0, "cores": None})
        for opt in self.options:
            a0 = opt["a0"]
            opt["idx_e0a0"] = ei[(e0, a0)]
            opt["idx_a0e"] = np.array([ei[(a0, e)] for e in self.pod0_e], dtype=np.int64)

    def base_tree(self, net: Network, a0: int | None, core: int | None) -> BaseTree:
        f = net.fabric
        assert f is not None
        parent: dict[int, int] = {self.e0: self.ps}
        for w in self.workers:
            parent[w] = f.host_edge[w]
        if a0 is not None:
            parent[a0] = self.e0
            for e in self.pod0_e:
                parent[int(e)] = a0
            if core is not None:
                parent[core] = a0
                for e in self.rem_e:
                    agg = f.core_agg[core][f.edge_pod[int(e)]]
                    parent[agg] = core
                    parent[int(e)] = agg
        return base_tree_from_parents(self.ps, parent, self.workers)

    def price(self, w: np.ndarray, al: np.ndarray, ga: np.ndarray) -> tuple[float, tuple | None]:
        """Exact minimum cost over the family, and the base (a0, core) achieving it.

        The base is None when sending unicast copies from the PS is cheapest.
        """
        best_beyond, best_a0, best_core = INF, None, None
        if self.beyond:
            # A complete base even when every option is forbidden (then pruned).
            first = self.options[0]
            best_a0 = first["a0"]
            best_core = None if first["cores"] is None else int(first["cores"][0])
            pod0_S = np.bincount(self.pod0_rid, weights=w[self.pod0_idx], minlength=len(self.pod0_e))
            if self.remote:
                rem_S = np.bincount(self.rem_rid, weights=w[self.rem_idx], minlength=len(self.rem_e))
                multi_rack = self.pod_racks >= 2
                rem_e_multi = self.rem_n >= 2
            for opt in self.options:
                a0 = opt["a0"]
                kids: list[tuple[float, float, int]] = []
                core_choice = None
                if opt["cores"] is not None:
                    # Remote pods below each core of this group.
                    wae = w[opt["idx_ae"]]
                    er = self.rem_e
                    A_r = wae + ga[er] + rem_S + _opt_alpha(al[er], rem_e_multi)
                    B_r = self.rem_n * wae + rem_S
                    aggs = opt["aggs"]
                    al_rack_agg = al[opt["rack_agg"]]
                    single = ~multi_rack[self.rem_pod]
                    val_r = np.where(
                        single,
                        np.minimum(A_r, B_r + _opt_alpha(al_rack_agg, single & rem_e_multi)),
                        np.minimum(A_r, B_r),
                    )
                    T_in = ga[aggs] + np.bincount(self.rem_pod, weights=val_r, minlength=self.n_pods)
                    T_in = T_in + _opt_alpha(al[aggs], multi_rack)
                    U_in = np.bincount(self.rem_pod, weights=B_r, minlength=self.n_pods)
                    cores = opt["cores"]
                    W = w[opt["idx_cp"]]
                    A = W + T_in
                    B = W * self.pod_n + U_in
                    if self.n_pods >= 2:
                        core_val = ga[cores] + np.minimum(A, B).sum(axis=1) + al[cores]
                    else:
                        extra = _opt_alpha(al[cores], self.pod_n[0] >= 2)[:, None]
                        core_val = ga[cores] + np.minimum(A, B + extra).sum(axis=1)
                    A_c = w[opt["idx_a0c"]] + core_val
                    k = int(np.argmin(A_c))
                    core_choice = int(cores[k])
                    kids.append((float(A_c[k]), float(w[opt["route_a0"]].sum()), self.n_remote))
                if len(self.pod0_e):
                    wae = w[opt["idx_a0e"]]
                    e = self.pod0_e
                    A_r = wae + ga[e] + pod0_S + _opt_alpha(al[e], self.pod0_n >= 2)
                    B_r = self.pod0_n * wae + pod0_S
                    kids.extend(zip(A_r.tolist(), B_r.tolist(), self.pod0_n.astype(int).tolist()))
                val = w[opt["idx_e0a0"]] + ga[a0] + _combine(kids, float(al[a0]))
                if val < best_beyond:
                    best_beyond, best_a0, best_core = val, a0, core_choice
            e0_kids = [(float(x), float(x), 1) for x in w[self.idx_same]]
            e0_kids.append((best_beyond, float(w[self.route_e0].sum()), len(self.beyond)))
        else:
            e0_kids = [(float(x), float(x), 1) for x in w[self.idx_same]]
        e0 = self.e0
        tree_cost = float(w[self.idx_h_e0]) + float(ga[e0]) + _combine(e0_kids, float(al[e0]))
        uni_cost = float(w[self.route_h].sum())
        if uni_cost <= tree_cost:
            return uni_cost, None
        return tree_cost, (best_a0, best_core)


class Pricer:
    """Prices the jobs of one instance; caches per-job static data."""

    def __init__(self, net: Network, jobs: tuple[Job, ...]) -> None:
        self.net = net
        self.jobs = jobs
        self._nodes = [net.job_nodes(j) for j in jobs]
        self._clos: dict[int, _ClosJob] = {}
        self._rpf: dict[int, BaseTree] = {}
        self.exact = net.fabric is not None
        ei = net.topo.edge_index
        self._reverse = np.array([ei[(e.head, e.tail)] for e in net.topo.edges], dtype=np.int64)

    # -- shared ------------------------------------------------------------------
    def rpf_tree(self, j: int) -> BaseTree:
        """The reverse-path tree: routes from the workers toward the PS, reversed.

        This is the tree IP multicast (PIM-SM source trees) builds over the
        shared unicast routing.
        """
        tree = self._rpf.get(j)
        if tree is None:
            ps, workers = self._nodes[j]
            routing = self.net.routing
            parent: dict[int, int] = {}
            for w in workers:
                v = w
                while v != ps and v not in parent:
                    nxt = routing.next_hop(v, ps)
                    parent[v] = nxt
                    v = nxt
            tree = self._rpf[j] = base_tree_from_parents(ps, parent, workers)
        return tree

    def clos_job(self, j: int) -> _ClosJob:
        cj = self._clos.get(j)
        if cj is None:
            ps, workers = self._nodes[j]
            cj = self._clos[j] = _ClosJob(self.net, ps, workers)
        return cj

    def prune(self, j: int, base: BaseTree, w: np.ndarray, al: np.ndarray, ga: np.ndarray) -> tuple[float, Structure | None]:
        return best_pruning(self.net, base, set(self._nodes[j][1]), w, al, ga)

    # -- pricing -----------------------------------------------------------------
    def price(self, j: int, w: np.ndarray, al: np.ndarray, ga: np.ndarray, want: bool = True) -> PriceResult:
        """Cheapest structure of job j (exact on Clos) and a lower bound on all of them.

        With `want=False` the structure is not built (only cost and bound).
        """
        if self.exact:
            cj = self.clos_job(j)
            cost, base = cj.price(w, al, ga)
            s = None
            if want:
                if base is None:
                    s = unicast_structure(self.net, *self._nodes[j])
                else:
                    _, s = self.prune(j, cj.base_tree(self.net, *base), w, al, ga)
            return PriceResult(cost, s, cost)
        return self._price_graph(j, w, al, ga)

    def _price_graph(self, j: int, w: np.ndarray, al: np.ndarray, ga: np.ndarray) -> PriceResult:
        best_cost, best_s = INF, None
        for base in self._graph_bases(j, w, al, ga):
            cost, s = self.prune(j, base, w, al, ga)
            if cost < best_cost:
                best_cost, best_s = cost, s
        return PriceResult(best_cost, best_s, min(best_cost, self.lower_bound(j, w, al, ga)))

    def _graph_bases(self, j: int, w: np.ndarray, al: np.ndarray, ga: np.ndarray) -> list[BaseTree]:
        net = self.net
        topo = net.topo
        ps, workers = self._nodes[j]
        bases = [self.rpf_tree(j)]
        eps = 1e-9 * (float(w.max()) if len(w) and np.isfinite(w.max()) and w.max() > 0 else 1.0) + 1e-12
        # Shortest-path tree under the prices (hosts other than the PS not transited).
        csr = self._csr(w + eps, ps)
        _, pred = dijkstra(csr, indices=ps, return_predecessors=True)
        parent = {}
        ok = True
        for wk in workers:
            v = wk
            while v != ps and v not in parent:
                p = int(pred[v])
                if p < 0:
                    ok = False
                    break
                parent[v] = p
                v = p
        if ok:
            bases.append(base_tree_from_parents(ps, parent, workers))
        # Mehlhorn's Steiner tree with node prices folded into the edges entering a switch.
        g = nx.Graph()
        terminals = {ps, *workers}
        for e in topo.edges:
            if e.tail > e.head:
                continue
            if (not topo.is_switch(e.tail) and e.tail not in terminals) or (
                not topo.is_switch(e.head) and e.head not in terminals
            ):
                continue
            back = topo.edge_index[(e.head, e.tail)]
            fwd = topo.edge_index[(e.tail, e.head)]
            node_price = 0.0
            for v in (e.tail, e.head):
                if topo.is_switch(v):
                    node_price += 0.5 * min(float(ga[v]), 1e18)
            g.add_edge(e.tail, e.head, weight=0.5 * (float(w[fwd]) + float(w[back])) + eps + node_price)
        try:
            st = nx.algorithms.approximation.steiner_tree(g, list(terminals), weight="weight", method="mehlhorn")
        except (nx.NetworkXError, ValueError):
            st = None
        if st is not None and st.number_of_nodes():
            parent = {}
            for u, v in nx.bfs_edges(st, ps):
                parent[v] = u
            if all(wk in parent for wk in workers) and all(
                topo.is_switch(p) or p == ps for p in parent.values()
            ):
                bases.append(base_tree_from_parents(ps, parent, workers))
        return bases

    def _csr(self, weights: np.ndarray, ps: int) -> csr_matrix:
        net = self.net
        tails, heads = net.edge_tail, net.edge_head
        switch_mask = np.array([net.topo.is_switch(i) for i in range(net.n_nodes)])
        keep = switch_mask[tails] | (tails == ps)
        return csr_matrix((weights[keep], (tails[keep], heads[keep])), shape=(net.n_nodes, net.n_nodes))

    def lower_bound(self, j: int, w: np.ndarray, al: np.ndarray, ga: np.ndarray) -> float:
        """A lower bound on the cost of every structure of job j (any graph).

        A structure with no replicating switch delivers all workers but one by
        unicast copies from the PS; one with a replicating switch pays at least the
        cheapest switch's α+γ plus a Steiner arborescence, which costs at least
        half a metric-closure MST over the undirected min-weight graph and at least
        the farthest worker's shortest path. Distances are taken over all edges
        (hosts may be transited), which can only lower them.
        """
        net = self.net
        ps, workers = self._nodes[j]
        routing = net.routing
        n = net.n_nodes
        rc = np.array([float(w[routing.path_edges(ps, wk)].sum()) for wk in workers])
        tiny = 1e-300  # keeps zero-price edges as edges in scipy's sparse graphs
        directed = csr_matrix((w + tiny, (net.edge_tail, net.edge_head)), shape=(n, n))
        sp = dijkstra(directed, indices=ps)[workers]
        lb0 = float(rc.sum() - np.max(rc - sp))
        switches = np.array(net.topo.switches, dtype=np.int64)
        node_min = float(np.min(al[switches] + ga[switches])) if len(switches) else INF
        if not np.isfinite(node_min):
            return lb0
        und_w = np.minimum(w, w[self._reverse]) + tiny
        und = csr_matrix((und_w, (net.edge_tail, net.edge_head)), shape=(n, n))
        terms = [ps, *workers]
        dist = dijkstra(und, directed=False, indices=terms)[:, terms]
        mst = float(minimum_spanning_tree(csr_matrix(dist)).sum())
        lb_link = max(float(np.max(sp)), 0.5 * mst)
        return min(lb0, node_min + lb_link) - n * tiny * len(terms)
