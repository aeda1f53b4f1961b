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
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra, minimum_spanning_tree

from controller.algorithm.model import Job, Structure
from controller.algorithm.network import Network
from controller.algorithm.structures import BaseTree, PreparedBase, base_tree_from_parents, best_pruning, make_structure, unicast_structure

INF = math.inf


@dataclass(frozen=True)
class PriceResult:
    cost: float
    structure: Structure | None
    lower_bound: float
    base: object = None  # on Clos fabrics: the (a0, core) base tree of the optimum, or None for unicast
    # on Clos fabrics: the DP values `_ClosJob.build` reuses to build the structure at the same prices
    kept: dict | None = field(default=None, compare=False, repr=False)


class EdgePrices:
    """Per-copy edge prices `scale · a · b` (or `scale / a · b` with `divide`), each
    element computed, in that order, only where it is read.

    On a Clos fabric the pricing reads the prices of a job's own edges only, so a
    price vector built for one job (its demand times a shared array) need not be
    computed on every edge of a large fabric: indexing gives the values the full
    array would hold, bit for bit. `full()` is that array.
    """

    __slots__ = ("scale", "a", "b", "divide")

    def __init__(self, scale: float, a: np.ndarray, b: np.ndarray | None = None, divide: bool = False) -> None:
        self.scale, self.a, self.b, self.divide = scale, a, b, divide

    def __getitem__(self, idx: int | slice | np.ndarray) -> np.ndarray | np.floating:
        v = self.scale / self.a[idx] if self.divide else self.scale * self.a[idx]
        return v if self.b is None else v * self.b[idx]

    def __len__(self) -> int:
        return len(self.a)

    def full(self) -> np.ndarray:
        return self[slice(None)]


def _node(gamma: float, alpha: float, unres: np.ndarray, one: np.ndarray, zero: np.ndarray) -> float:
    """g(v) of `best_pruning` for one node from its children's three options."""
    return gamma + min(alpha + float(unres.sum()), float(zero.sum()) + float((one - zero).min()))


def _nodes(gamma: np.ndarray, alpha: np.ndarray, unres: np.ndarray, one: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """`_node` for a batch of nodes; children along the last axis."""
    return gamma + np.minimum(alpha + unres.sum(axis=-1), zero.sum(axis=-1) + (one - zero).min(axis=-1))


def _nodes_same_zero(gamma: np.ndarray, alpha: np.ndarray, unres: np.ndarray, one: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """`_nodes` where every node's children have the same `zero` (a vector along the
    last axis): its sum is taken once instead of per node, the same value."""
    return gamma + np.minimum(alpha + unres.sum(axis=-1), zero.sum() + (one - zero).min(axis=-1))


def _seg_sum(values: np.ndarray, seg: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(seg, weights=values, minlength=n)


class _ClosIndex:
    """Edge indices of a Clos fabric as dense arrays, built once per network, so that
    per-job index arrays are numpy gathers instead of dictionary lookups."""

    def __init__(self, net: Network) -> None:
        f = net.fabric
        assert f is not None
        ei = net.topo.edge_index
        n_pods = len(f.pod_edges)
        self.core_row = {c: i for i, c in enumerate(f.cores)}
        self.core_down = np.array([[ei[(c, a)] for a in f.core_agg[c]] for c in f.cores], dtype=np.int64).reshape(len(f.cores), n_pods)
        self.edge_slot = {e: i for es in f.pod_edges for i, e in enumerate(es)}
        width_e = max(len(es) for es in f.pod_edges)
        # the aggregation switch of group g in pod p, and its slot in the pod
        self.group_aggs = [np.array(f.core_agg[cs[0]], dtype=np.int64) for cs in f.groups]
        slots = {a: i for ags in f.pod_aggs for i, a in enumerate(ags)}
        width_a = max(len(ags) for ags in f.pod_aggs)
        self.agg_slot = [np.array([slots[int(a)] for a in ga], dtype=np.int64) for ga in self.group_aggs]
        self.agg_edge = np.full((n_pods, width_a, width_e), -1, dtype=np.int64)
        for p, (es, ags) in enumerate(zip(f.pod_edges, f.pod_aggs)):
            for i, a in enumerate(ags):
                for k, e in enumerate(es):
                    self.agg_edge[p, i, k] = ei[(a, e)]
        # aggregation uplinks: the same position in every group when every aggregation
        # switch's cores are exactly one group and the groups have equal sizes
        sizes = {len(cs) for cs in f.groups}
        group_of = {c: set(cs) for cs in f.groups for c in cs}
        agg_cores = {a: {c for c in net.topo.neighbors[a] if c in f.core_group} for a in f.agg_pod}
        self.regular = f.tiers == 3 and len(sizes) == 1 and all(cs and cs == group_of[next(iter(cs))] for cs in agg_cores.values())
        self._n_groups = len(f.groups)
        self._size = sizes.pop() if sizes else 0
        self._names = net.topo
        self._groups, self._core_agg, self._ei = f.groups, f.core_agg, ei
        self._group_up: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._groups_up: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._uplink: dict[int, int] = {}  # `uplink_position` of each host asked for
        # per core group (rows) and pod (columns): its aggregation switch, and that switch's slot
        self.group_aggs_all = np.stack(self.group_aggs) if self.regular else None
        self.agg_slot_all = np.stack(self.agg_slot) if self.regular else None

    def group_up(self, gi: int, pod: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Core group gi seen from pod `pod`: its cores, their rows in `core_down`, and
        the edges from the pod's aggregation switch up to them (shared, read-only)."""
        key = (gi, pod)
        got = self._group_up.get(key)
        if got is None:
            cores = self._groups[gi]
            a0 = self._core_agg[cores[0]][pod]
            got = self._group_up[key] = (
                np.array(cores, dtype=np.int64),
                np.array([self.core_row[c] for c in cores], dtype=np.int64),
                np.array([self._ei[(a0, c)] for c in cores], dtype=np.int64),
            )
        return got

    def groups_up(self, pod: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`group_up` of every core group (rows) from `pod` on a regular fabric, and the
        groups' aggregation switches in that pod (shared, read-only)."""
        got = self._groups_up.get(pod)
        if got is None:
            ups = [self.group_up(gi, pod) for gi in range(self._n_groups)]
            got = self._groups_up[pod] = (
                self.group_aggs_all[:, pod], *(np.stack([u[i] for u in ups]) for i in range(3))
            )
        return got

    def uplink_position(self, dests: list[int]) -> np.ndarray:
        """Position within its group of the core an aggregation switch sends each dest to
        (the rule of `UnicastRouting.agg_uplink` on a regular fabric)."""
        import zlib

        known = self._uplink
        for d in dests:
            if d not in known:
                known[d] = (zlib.crc32(self._names.name(d).encode()) // self._n_groups) % self._size
        return np.array([known[d] for d in dests], dtype=np.int64)


def _clos_index(net: Network) -> _ClosIndex:
    ix = net.memo.get(("clos-index",))
    if ix is None:
        ix = net.memo[("clos-index",)] = _ClosIndex(net)
    return ix


class _ClosJob:
    """Static index arrays of one job on a Clos fabric, built once per job.

    `price` evaluates the DP of `structures.best_pruning` on every single-top base
    tree at once: subtrees below an aggregation switch do not depend on the core
    above it, and cores of one group share their aggregation switches, so the
    work per job is O(groups × workers) numpy operations.
    """

    def __init__(self, net: Network, ps: int, workers: list[int]) -> None:
        f = net.fabric
        assert f is not None
        ei = net.topo.edge_index
        rt = net.routing
        self.ps, self.workers = ps, workers
        self.e0 = e0 = f.host_edge[ps]
        self.p0 = p0 = f.edge_pod[e0]
        self.idx_h_e0 = ei[(ps, e0)]
        # Every worker's unicast route from the PS (P_w), summed per worker.
        routes = [rt.path_edges(ps, w) for w in workers]
        self.route_h = np.concatenate(routes)
        self.route_h_id = np.arange(len(workers)).repeat([len(r) for r in routes])
        self.n = len(workers)
        pos = {w: i for i, w in enumerate(workers)}
        same = [w for w in workers if f.host_edge[w] == e0]
        self.same = np.array([pos[w] for w in same], dtype=np.int64)
        self.idx_same = np.array([ei[(e0, w)] for w in same], dtype=np.int64)
        beyond = [w for w in workers if f.host_edge[w] != e0]
        self.beyond = beyond  # worker nodes outside the PS's rack
        self.beyond_pos = np.array([pos[w] for w in beyond], dtype=np.int64)
        if beyond:
            # routing is by destination, so a route from e0 is the PS's route without its first hop
            r = [routes[pos[w]][1:] for w in beyond]
            self.route_e0 = np.concatenate(r)
            self.route_e0_id = np.arange(len(beyond)).repeat([len(x) for x in r])
        # Racks (edge switches other than e0 with workers), workers sorted by pod then rack.
        racks: dict[int, list[int]] = {}
        for w in beyond:
            racks.setdefault(f.host_edge[w], []).append(w)
        rack_list = sorted(racks, key=lambda e: (f.edge_pod[e] != p0, f.edge_pod[e], e))
        self.rack_e = np.array(rack_list, dtype=np.int64)
        rw = [w for e in rack_list for w in racks[e]]
        self.rw = np.array([pos[w] for w in rw], dtype=np.int64)  # rack workers, grouped by rack
        self.rw_rack = np.arange(len(rack_list)).repeat([len(racks[e]) for e in rack_list])
        self.rw_idx_t = np.array([ei[(f.host_edge[w], w)] for w in rw], dtype=np.int64)
        self.rack_start = np.array(np.cumsum([0] + [len(racks[e]) for e in rack_list])[:-1], dtype=np.int64)
        self.n_racks = len(rack_list)
        self._in_pod0 = in_pod0 = np.array([f.edge_pod[e] == p0 for e in rack_list], dtype=bool)
        self.pod0_racks = np.nonzero(in_pod0)[0]
        self.rem_racks = np.nonzero(~in_pod0)[0]
        self.remote = len(self.rem_racks) > 0 and f.tiers == 3
        self.options: list[dict] = []
        if self.remote:
            rem_rw = ~in_pod0[self.rw_rack]  # the workers of remote racks
            self.rem_w = np.nonzero(rem_rw)[0]  # positions in rw of remote workers (contiguous, last)
            rem_rack_nodes = [rack_list[r] for r in self.rem_racks.tolist()]
            pods = sorted({f.edge_pod[e] for e in rem_rack_nodes})
            ppos = {p: i for i, p in enumerate(pods)}
            self.n_pods = len(pods)
            self.rack_pod = np.array([ppos[f.edge_pod[e]] for e in rem_rack_nodes], dtype=np.int64)
            rem_workers = [rw[i] for i in self.rem_w.tolist()]
            self.remw_pod = np.array([ppos[f.edge_pod[f.host_edge[w]]] for w in rem_workers], dtype=np.int64)
            self.pod_wstart = np.searchsorted(self.remw_pod, np.arange(self.n_pods))
            self.pod_rstart = np.searchsorted(self.rack_pod, np.arange(self.n_pods))
            self.remw_global = np.array([pos[w] for w in rem_workers], dtype=np.int64)
            ix = _clos_index(net)
            pods_arr = np.array(pods, dtype=np.int64)
            rack_slot = np.array([ix.edge_slot[e] for e in rem_rack_nodes], dtype=np.int64)
            rack_podn = pods_arr[self.rack_pod]
            # on a regular fabric an aggregation switch sends a packet for w to the core at
            # the same position in every group, so one position array serves all options
            up_regular = ix.uplink_position(rem_workers) if ix.regular else None
            if up_regular is not None:
                self._regular_options(net, ix, pods_arr, rack_podn, rack_slot, up_regular)
            for gi, cores in enumerate(f.groups if up_regular is None else ()):
                row = f.core_agg[cores[0]]
                a0 = row[p0]
                aggs = ix.group_aggs[gi][pods_arr]
                cores_arr, crow, idx_a0c = ix.group_up(gi, p0)
                if up_regular is None:
                    ra = [rt.path_edges(a0, w) for w in rem_workers]
                self.options.append(
                    {
                        "a0": a0,
                        "cores": cores_arr,
                        "aggs": aggs,
                        "idx_ae": ix.agg_edge[rack_podn, ix.agg_slot[gi][rack_podn], rack_slot],
                        "idx_cp": ix.core_down[crow][:, pods_arr],
                        "idx_a0c": idx_a0c,
                        "up_pos": up_regular,
                        "route_a0": np.concatenate(ra) if up_regular is None else None,
                        "route_a0_id": np.repeat(np.arange(len(ra)), [len(x) for x in ra]) if up_regular is None else None,
                    }
                )
        elif beyond:
            for a0 in f.pod_aggs[p0]:
                self.options.append({"a0": a0, "cores": None})
        for opt in self.options:
            if "idx_e0a0" in opt:  # `_regular_options` set them
                continue
            a0 = opt["a0"]
            opt["idx_e0a0"] = ei[(e0, a0)]
            opt["idx_a0e"] = np.array([ei[(a0, int(self.rack_e[r]))] for r in self.pod0_racks], dtype=np.int64)

    def _regular_options(self, net: Network, ix: _ClosIndex, pods_arr: np.ndarray, rack_podn: np.ndarray,
                         rack_slot: np.ndarray, up: np.ndarray) -> None:
        """The options of a job that leaves its pod on a regular fabric (one per core
        group), built at once as the stacked arrays of `_stack` (a few gathers instead
        of a loop over the groups); each option's arrays are views of its row."""
        ei = net.topo.edge_index
        p0 = self.p0
        a0s, cores, crow, idx_a0c = ix.groups_up(p0)
        n_groups = len(a0s)
        if len(self.pod0_racks):
            e_slots = np.array([ix.edge_slot[int(self.rack_e[r])] for r in self.pod0_racks], dtype=np.int64)
            idx_a0e = ix.agg_edge[p0, ix.agg_slot_all[:, p0][:, None], e_slots[None, :]]
        else:
            idx_a0e = None
        st = {
            "a0": a0s,
            "idx_e0a0": np.array([ei[(self.e0, a0)] for a0 in a0s.tolist()], dtype=np.int64),
            "idx_a0e": idx_a0e,
            "cores": cores,
            "aggs": ix.group_aggs_all[:, pods_arr],
            "idx_ae": ix.agg_edge[rack_podn[None, :], ix.agg_slot_all[:, rack_podn], rack_slot[None, :]],
            "idx_cp": ix.core_down[crow][:, :, pods_arr],
            "idx_a0c": idx_a0c,
            "up_pos": np.broadcast_to(up, (n_groups, len(up))),
        }
        self._stacked = st
        none = np.zeros(0, dtype=np.int64)
        for g, a0 in enumerate(a0s.tolist()):
            self.options.append(
                {
                    "a0": a0, "cores": cores[g], "aggs": st["aggs"][g], "idx_ae": st["idx_ae"][g], "idx_cp": st["idx_cp"][g],
                    "idx_a0c": idx_a0c[g], "up_pos": up, "route_a0": None, "route_a0_id": None,
                    "idx_e0a0": int(st["idx_e0a0"][g]), "idx_a0e": none if idx_a0e is None else idx_a0e[g],
                }
            )

    def base_tree(self, net: Network, a0: int | None, core: int | None) -> BaseTree:
        f = net.fabric
        assert f is not None
        parent: dict[int, int] = {self.e0: self.ps}
        for w in self.workers:
            parent[w] = f.host_edge[w]
        if a0 is not None:
            parent[a0] = self.e0
            for r in self.pod0_racks:
                parent[int(self.rack_e[r])] = a0
            if core is not None:
                parent[core] = a0
                for r in self.rem_racks:
                    e = int(self.rack_e[r])
                    agg = f.core_agg[core][f.edge_pod[e]]
                    parent[agg] = core
                    parent[e] = agg
        return base_tree_from_parents(self.ps, parent, self.workers)

    def _cut(self, u: np.ndarray, P: np.ndarray, start: np.ndarray, seg: np.ndarray, n: int):
        """Options of cut children: Σ min(u, P), Σ P + min(u − P) and Σ P per segment."""
        best = _seg_sum(np.minimum(u, P), seg, n)
        zero = _seg_sum(P, seg, n)
        one = zero + np.minimum.reduceat(u - P, start)
        return best, one, zero

    def _shared(self, w: np.ndarray, al: np.ndarray, ga: np.ndarray) -> dict:
        """Values that do not depend on the base tree: P_w and every rack's g(e)."""
        sh: dict = {"P": _seg_sum(w[self.route_h], self.route_h_id, self.n)}
        if self.beyond:
            P = sh["P"]
            t = w[self.rw_idx_t]
            Pr = P[self.rw]
            r_best, r_one, _ = self._cut(t, Pr, self.rack_start, self.rw_rack, self.n_racks)
            e = self.rack_e
            sh.update(t=t, Pr=Pr, g_rack=ga[e] + np.minimum(al[e] + r_best, r_one))
            static = self._static_shared()
            sh.update(static)
            if self.remote:
                rem_P = Pr[self.rem_w]
                sh.update(
                    rem_t=t[self.rem_w],
                    rem_P=rem_P,
                    pods_zero=_seg_sum(rem_P, self.remw_pod, self.n_pods),
                    P_rem=P[self.remw_global],
                )
        return sh

    def _static_shared(self) -> dict:
        """The price-independent index arrays of `_shared`, computed once per job."""
        st = self.__dict__.get("_static")
        if st is None:
            st = {}
            if self.remote:
                rr = self.rem_racks
                st.update(rem_local=self.rw_rack[self.rem_w] - rr[0], rem_start=self.rack_start[rr] - self.rack_start[rr[0]])
            p0r = self.pod0_racks
            if len(p0r):
                sel = self._in_pod0[self.rw_rack]  # the workers of racks in the PS's pod
                loc0 = np.searchsorted(p0r, self.rw_rack[sel])
                st.update(sel0=sel, loc0=loc0, s0=np.searchsorted(loc0, np.arange(len(p0r))))
            self._static = st
        return st

    def _option(self, opt: dict, sh: dict, w: np.ndarray, al: np.ndarray, ga: np.ndarray, core: int | None = None) -> dict:
        """DP values of one aggregation switch a0 above e0 (and, with remote pods,
        every core of its group, keeping the best or `core`): g(a0) plus what
        `build` needs."""
        a0 = opt["a0"]
        ov: dict = {"kids": []}  # per child of a0: (unres, one, zero)
        if opt["cores"] is not None:
            rr = self.rem_racks
            wae = w[opt["idx_ae"]]  # per remote rack, agg -> rack
            A_r = wae + sh["g_rack"][rr]
            u = wae[sh["rem_local"]] + sh["rem_t"]
            rem_P = sh["rem_P"]
            c_best, c_one, c_zero = self._cut(u, rem_P, sh["rem_start"], sh["rem_local"], len(rr))
            aggs = opt["aggs"]
            g_agg = ga[aggs] + np.minimum(
                al[aggs] + _seg_sum(np.minimum(A_r, c_best), self.rack_pod, self.n_pods),
                _seg_sum(c_zero, self.rack_pod, self.n_pods)
                + np.minimum.reduceat(np.minimum(A_r, c_one) - c_zero, self.pod_rstart),
            )
            cores = opt["cores"]
            W = w[opt["idx_cp"]]  # cores of the group (rows) x pods (columns)
            A_p = W + g_agg
            U = W[:, self.remw_pod] + u[None, :]  # a copy from the core to each remote worker
            pods_zero = sh["pods_zero"]
            p_best = np.add.reduceat(np.minimum(U, rem_P), self.pod_wstart, axis=1)
            p_one = pods_zero + np.minimum.reduceat(U - rem_P, self.pod_wstart, axis=1)
            g_core = _nodes_same_zero(ga[cores], al[cores], np.minimum(A_p, p_best), np.minimum(A_p, p_one), pods_zero)
            A_c = w[opt["idx_a0c"]] + g_core
            k = int(np.argmin(A_c)) if core is None else int(np.flatnonzero(cores == core)[0])
            if opt["up_pos"] is not None:
                up = opt["up_pos"]
                ua0 = w[opt["idx_a0c"]][up] + W[up, self.remw_pod] + u
            else:
                ua0 = _seg_sum(w[opt["route_a0"]], opt["route_a0_id"], len(sh["P_rem"]))
            P_rem = sh["P_rem"]
            zero = float(P_rem.sum())
            cut = (float(np.minimum(ua0, P_rem).sum()), zero + float((ua0 - P_rem).min()))
            a = float(A_c[k])
            ov["kids"].append((min(a, cut[0]), min(a, cut[1]), zero))
            ov.update(core=int(cores[k]), k=k, A_core=a, core_cut=cut, ua0=ua0, u=u, A_r=A_r, c_best=c_best,
                      c_one=c_one, g_agg=g_agg, A_p=A_p[k], p_best=p_best[k], p_one=p_one[k], U=U[k])
        else:
            ov["core"] = None
        if len(self.pod0_racks):
            p0r = self.pod0_racks
            wae = w[opt["idx_a0e"]]
            A_r0 = wae + sh["g_rack"][p0r]
            u0 = wae[sh["loc0"]] + sh["t"][sh["sel0"]]
            b0, o0, z0 = self._cut(u0, sh["Pr"][sh["sel0"]], self.rack_start[p0r], sh["loc0"], len(p0r))
            ov["kids"].extend(zip(np.minimum(A_r0, b0).tolist(), np.minimum(A_r0, o0).tolist(), z0.tolist()))
            ov.update(A_r0=A_r0, b0=b0, o0=o0, u0=u0)
        unres, one, zero = (np.array(x) for x in zip(*ov["kids"]))
        ov["val"] = float(w[opt["idx_e0a0"]]) + _node(float(ga[a0]), float(al[a0]), unres, one, zero)
        return ov

    def _stack(self) -> dict | None:
        """The options' index arrays stacked along a leading axis, when they all have
        the same shape (every regular fabric); None otherwise."""
        if hasattr(self, "_stacked"):
            return self._stacked
        opts = self.options
        st = None
        has_cores = opts[0]["cores"] is not None
        if has_cores:
            same = all(o["cores"] is not None and o["up_pos"] is not None and len(o["cores"]) == len(opts[0]["cores"]) for o in opts)
        else:
            same = all(o["cores"] is None for o in opts)
        if same:
            st = {
                "a0": np.array([o["a0"] for o in opts], dtype=np.int64),
                "idx_e0a0": np.array([o["idx_e0a0"] for o in opts], dtype=np.int64),
                "idx_a0e": np.stack([o["idx_a0e"] for o in opts]) if len(self.pod0_racks) else None,
            }
            if has_cores:
                st.update(
                    cores=np.stack([o["cores"] for o in opts]),
                    aggs=np.stack([o["aggs"] for o in opts]),
                    idx_ae=np.stack([o["idx_ae"] for o in opts]),
                    idx_cp=np.stack([o["idx_cp"] for o in opts]),
                    idx_a0c=np.stack([o["idx_a0c"] for o in opts]),
                    up_pos=np.stack([o["up_pos"] for o in opts]),
                )
        self._stacked = st
        return st

    def _price_stacked(self, st: dict, sh: dict, w: np.ndarray, al: np.ndarray, ga: np.ndarray, parts: dict | None = None):
        """`_option`'s value for every option at once (options along axis 0); with
        `parts`, it also receives the per-option arrays `_stacked_option` reads."""
        G = len(st["a0"])
        unres_k, one_k, zero_k = [], [], []
        best_core = None
        if "cores" in st:
            rem_P = sh["rem_P"]
            wae = w[st["idx_ae"]]  # G x R
            A_r = wae + sh["g_rack"][self.rem_racks]
            u = wae[:, sh["rem_local"]] + sh["rem_t"]  # G x Wr
            starts = sh["rem_start"]
            c_zero = np.add.reduceat(rem_P, starts)
            c_best = np.add.reduceat(np.minimum(u, rem_P), starts, axis=1)
            c_one = c_zero + np.minimum.reduceat(u - rem_P, starts, axis=1)
            aggs = st["aggs"]
            rs = self.pod_rstart
            g_agg = ga[aggs] + np.minimum(
                al[aggs] + np.add.reduceat(np.minimum(A_r, c_best), rs, axis=1),
                np.add.reduceat(c_zero, rs) + np.minimum.reduceat(np.minimum(A_r, c_one) - c_zero, rs, axis=1),
            )  # G x P
            W = w[st["idx_cp"]]  # G x m x P
            A_p = W + g_agg[:, None, :]
            U = W[:, :, self.remw_pod] + u[:, None, :]  # G x m x Wr
            pz = sh["pods_zero"]
            ws = self.pod_wstart
            p_best = np.add.reduceat(np.minimum(U, rem_P), ws, axis=2)
            p_one = pz + np.minimum.reduceat(U - rem_P, ws, axis=2)
            cores = st["cores"]
            g_core = _nodes_same_zero(ga[cores], al[cores], np.minimum(A_p, p_best), np.minimum(A_p, p_one), pz)
            wa0c = w[st["idx_a0c"]]
            A_c = wa0c + g_core  # G x m
            k = A_c.argmin(axis=1)
            a = A_c[np.arange(G), k]
            best_core = cores[np.arange(G), k]
            up = st["up_pos"]  # G x Wr
            rows = np.arange(G)[:, None]
            ua0 = wa0c[rows, up] + W[rows, up, self.remw_pod[None, :]] + u
            P_rem = sh["P_rem"]
            zero = float(P_rem.sum())
            cut_best = np.minimum(ua0, P_rem).sum(axis=1)
            cut_one = zero + (ua0 - P_rem).min(axis=1)
            unres_k.append(np.minimum(a, cut_best)[:, None])
            one_k.append(np.minimum(a, cut_one)[:, None])
            zero_k.append(np.array([zero]))
            if parts is not None:
                parts.update(zero=zero, k=k, a=a, best_core=best_core, cut_best=cut_best, cut_one=cut_one, ua0=ua0, u=u, A_r=A_r,
                             c_best=c_best, c_one=c_one, A_p=A_p, p_best=p_best, p_one=p_one, U=U)
        if st["idx_a0e"] is not None:
            p0r = self.pod0_racks
            wae0 = w[st["idx_a0e"]]  # G x R0
            A_r0 = wae0 + sh["g_rack"][p0r]
            Pr0 = sh["Pr"][sh["sel0"]]
            u0 = wae0[:, sh["loc0"]] + sh["t"][sh["sel0"]]
            s0 = sh["s0"]
            z0 = np.add.reduceat(Pr0, s0)
            b0 = np.add.reduceat(np.minimum(u0, Pr0), s0, axis=1)
            o0 = z0 + np.minimum.reduceat(u0 - Pr0, s0, axis=1)
            unres_k.append(np.minimum(A_r0, b0))
            one_k.append(np.minimum(A_r0, o0))
            zero_k.append(z0)
            if parts is not None:
                parts.update(A_r0=A_r0, b0=b0, o0=o0, u0=u0, z0=z0)
        a0 = st["a0"]
        # every option's children have the same `zero`: a0's cut children, one vector
        g_a0 = _nodes_same_zero(ga[a0], al[a0], np.concatenate(unres_k, axis=1), np.concatenate(one_k, axis=1), np.concatenate(zero_k))
        vals = w[st["idx_e0a0"]] + g_a0
        if parts is not None:
            parts["vals"] = vals
        return vals, best_core

    @staticmethod
    def _stacked_option(parts: dict, g: int) -> dict:
        """The values `_option` computes for option g (its cheapest core), read from
        `_price_stacked`'s `parts` instead of recomputed: the fields `build` uses."""
        ov: dict = {"kids": [], "core": None, "val": float(parts["vals"][g])}
        if "k" in parts:
            k = int(parts["k"][g])
            a = float(parts["a"][g])
            cut = (float(parts["cut_best"][g]), float(parts["cut_one"][g]))
            ov["kids"].append((min(a, cut[0]), min(a, cut[1]), parts["zero"]))
            ov.update(core=int(parts["best_core"][g]), A_core=a, core_cut=cut, ua0=parts["ua0"][g], u=parts["u"][g],
                      A_r=parts["A_r"][g], c_best=parts["c_best"][g], c_one=parts["c_one"][g], A_p=parts["A_p"][g, k],
                      p_best=parts["p_best"][g, k], p_one=parts["p_one"][g, k], U=parts["U"][g, k])
        if "A_r0" in parts:
            A_r0, b0, o0 = parts["A_r0"][g], parts["b0"][g], parts["o0"][g]
            ov["kids"].extend(zip(np.minimum(A_r0, b0).tolist(), np.minimum(A_r0, o0).tolist(), parts["z0"].tolist()))
            ov.update(A_r0=A_r0, b0=b0, o0=o0, u0=parts["u0"][g])
        return ov

    def _e0_parts(self, w: np.ndarray, sh: dict) -> tuple[list, np.ndarray, float, float, float]:
        """What e0's children cost apart from the subtree beyond it: its rack's workers
        as (unres, one, zero), the routes from e0 to the workers beyond its rack, and
        those workers cut below e0 (best, one, zero). Kept in `sh` (the values of one
        set of prices), so that `build` reuses what `price` computed."""
        got = sh.get("e0")
        if got is None:
            P = sh["P"]
            t0 = w[self.idx_same]
            P0 = P[self.same]
            kids = list(zip(np.minimum(t0, P0).tolist(), t0.tolist(), P0.tolist()))
            ue0 = np.zeros(0)
            cb = co = zb = 0.0
            if self.beyond:
                Pb = P[self.beyond_pos]
                ue0 = _seg_sum(w[self.route_e0], self.route_e0_id, len(self.beyond))
                cb, co, zb = float(np.minimum(ue0, Pb).sum()), float(Pb.sum() + (ue0 - Pb).min()), float(Pb.sum())
            got = sh["e0"] = (kids, ue0, cb, co, zb)
        return got

    def _e0_kids(self, w: np.ndarray, sh: dict, beyond: float) -> tuple[list, np.ndarray]:
        """e0's children: its rack's workers (leaves), then the subtree beyond it."""
        same, ue0, cb, co, zb = self._e0_parts(w, sh)
        kids = list(same)
        if self.beyond:
            kids.append((min(beyond, cb), min(beyond, co), zb))
        return kids, ue0

    def price(self, w: np.ndarray, al: np.ndarray, ga: np.ndarray, keep: dict | None = None) -> tuple[float, tuple | None]:
        """Exact minimum cost over the family, and the base (a0, core) achieving it.

        The base is None when unicast copies from the PS are cheapest, (None, None)
        for the one base tree of a job that stays in the PS's rack. `keep`, if
        given, receives the base-independent values ("sh") for `build` at the
        same prices and, where the tree's best option was found, that option's
        values ("ov"), so that `build` does not compute them again.
        """
        sh = self._shared(w, al, ga)
        if keep is not None:
            keep["sh"] = sh
        best_beyond, best_base = INF, (None, None)
        if self.beyond:
            first = self.options[0]  # a complete base even if every option is forbidden
            best_base = (first["a0"], None if first["cores"] is None else int(first["cores"][0]))
            stacked = self._stack()
            if stacked is not None:
                parts: dict | None = {} if keep is not None else None
                vals, cores = self._price_stacked(stacked, sh, w, al, ga, parts)
                g = int(vals.argmin())
                if vals[g] < best_beyond:
                    best_beyond = float(vals[g])
                    best_base = (self.options[g]["a0"], None if cores is None else int(cores[g]))
                    if parts is not None:
                        keep["ov"] = self._stacked_option(parts, g)
            else:
                for opt in self.options:
                    ov = self._option(opt, sh, w, al, ga)
                    if ov["val"] < best_beyond:
                        best_beyond, best_base = ov["val"], (opt["a0"], ov["core"])
                        if keep is not None:
                            keep["ov"] = ov
        kids, _ = self._e0_kids(w, sh, best_beyond)
        unres, one, zero = (np.array(x) for x in zip(*kids))
        tree_cost = float(w[self.idx_h_e0]) + _node(float(ga[self.e0]), float(al[self.e0]), unres, one, zero)
        all_ps = float(sh["P"].sum())
        if all_ps <= tree_cost:
            return all_ps, None
        return tree_cost, best_base

    def rpf_base(self, net: Network) -> tuple:
        """The (a0, core) of the reverse-path tree: d-mod-k routes toward the PS all
        cross the PS's pivot, so the tree is the single-top tree of that top."""
        f = net.fabric
        assert f is not None
        if not self.beyond:
            return (None, None)
        pivot = net.routing.pivot(self.ps)
        if f.tiers == 2:
            return (pivot, None)
        return (f.core_agg[pivot][self.p0], pivot if self.remote else None)

    def prune_on(self, net: Network, base: tuple, w: np.ndarray, al: np.ndarray, ga: np.ndarray) -> tuple[float, Structure | None]:
        """`best_pruning` on the base tree (a0, core), from the vectorised DP."""
        sh = self._shared(w, al, ga)
        a0, core = base
        ov = None
        if a0 is not None:
            opt = self._option_of(a0, core)
            ov = self._option(opt, sh, w, al, ga, core)
        kids, _ = self._e0_kids(w, sh, ov["val"] if ov else INF)
        unres, one, zero = (np.array(x) for x in zip(*kids))
        tree_cost = float(w[self.idx_h_e0]) + _node(float(ga[self.e0]), float(al[self.e0]), unres, one, zero)
        all_ps = float(sh["P"].sum())
        if all_ps <= tree_cost:
            return all_ps, unicast_structure(net, self.ps, self.workers)
        if tree_cost == INF:
            return INF, None
        return tree_cost, self.build(net, w, al, ga, base, sh, ov)

    def _option_of(self, a0: int, core: int | None) -> dict:
        """The first option with aggregation switch a0 (and core `core`, unless None)."""
        found = self.__dict__.get("_options_of")
        if found is None:
            found = self._options_of = {}
            for o in self.options:
                found.setdefault((o["a0"], None), o)
        opt = found.get((a0, core))
        if opt is None:
            opt = found[(a0, core)] = next(o for o in self.options if o["a0"] == a0 and core in o["cores"])
        return opt

    def _build_static(self) -> dict:
        """The price-independent lists and slices `build` walks, computed once per job."""
        bs = self.__dict__.get("_bstatic")
        if bs is None:
            bs = {"same": self.same.tolist()}
            if self.beyond:
                st = self._static_shared()
                bs.update(rw=self.rw.tolist(), rack_start=self.rack_start.tolist(),
                          rack_end=np.append(self.rack_start[1:], len(self.rw)).tolist())
                if len(self.pod0_racks):
                    loc0, rw0 = st["loc0"], self.rw[st["sel0"]]
                    # per rack of the PS's pod: its edge switch, its rack number, which of
                    # the pod's rack workers are its own, and their positions
                    bs["pod0"] = [(int(self.rack_e[r]), r, loc0 == i, rw0[loc0 == i]) for i, r in enumerate(self.pod0_racks.tolist())]
                if self.remote:
                    ws = self.pod_wstart.tolist() + [len(self.remw_pod)]
                    bs.update(rem_racks=self.rem_racks.tolist(), rack_e=self.rack_e.tolist(),
                              pod_rstart=self.pod_rstart.tolist() + [len(self.rem_racks)],
                              rem_start=st["rem_start"].tolist() + [len(st["rem_local"])],
                              pod_ws=[slice(ws[p], ws[p + 1]) for p in range(self.n_pods)])
            self._bstatic = bs
        return bs

    def build(self, net: Network, w: np.ndarray, al: np.ndarray, ga: np.ndarray, base: tuple,
              sh: dict | None = None, ov: dict | None = None) -> Structure:
        """The structure `price` found on `base`, rebuilt from the same DP values.

        Mirrors `best_pruning` on that base tree without building it: at every node
        of T' it takes the regime (replicate, or a single output) and each child's
        option (stay in T', or be cut with copies from the node and/or the PS).
        """
        f = net.fabric
        assert f is not None
        ps, e0 = self.ps, self.e0
        if sh is None:
            sh = self._shared(w, al, ga)
        P = sh["P"]
        workers = self.workers
        bs = self._build_static()
        tree: list[tuple[int, int]] = []
        branches: list[tuple[int, int]] = []

        def regime(v: int, kids) -> int:
            """-1: v replicates (every child its cheapest option); else the one child kept."""
            if len(kids) == 1:  # the general case below with one child, without the lists
                u, o, z = kids[0]
                return -1 if float(al[v]) + u < z + (o - z) else 0
            gains = [o - z for _, o, z in kids]
            kept = min(range(len(gains)), key=gains.__getitem__)
            if float(al[v]) + sum(u for u, _, _ in kids) < sum(z for _, _, z in kids) + gains[kept]:
                return -1
            return kept

        def cut(v: int, pos: np.ndarray, u: np.ndarray, mode: str) -> None:
            """Workers at positions `pos` (into self.workers), copies from v (route cost u) or the PS."""
            if mode == "zero":
                branches.extend((ps, workers[p]) for p in pos.tolist())
                return
            Pw = P[pos]
            if mode == "one":
                one = int((u - Pw).argmin())
                branches.extend((v if i == one else ps, workers[p]) for i, p in enumerate(pos.tolist()))
            else:
                branches.extend((v if pick else ps, workers[p]) for pick, p in zip((u <= Pw).tolist(), pos.tolist()))

        def child(v: int, c: int, mode: str, a: float, cut_best: float, cut_one: float, recurse, pos, u) -> None:
            """Child c of v under the parent's regime: 'best', 'one' (the kept child) or 'zero'."""
            if mode != "zero" and a <= (cut_best if mode == "best" else cut_one):
                tree.append((v, c))
                recurse()
            else:
                cut(v, pos, u, mode)

        if self.beyond:
            rack_start, rack_end, rw = bs["rack_start"], bs["rack_end"], bs["rw"]
            t_all, Pr_all = sh["t"].tolist(), sh["Pr"].tolist()

        def rack(e: int, r: int) -> None:
            lo, hi = rack_start[r], rack_end[r]
            if hi - lo == 1:  # one worker (the common case): `regime` with one child, inline
                tt, pp = t_all[lo], Pr_all[lo]
                if float(al[e]) + min(tt, pp) < pp + (tt - pp) and tt > pp:
                    branches.append((ps, workers[rw[lo]]))
                else:
                    tree.append((e, workers[rw[lo]]))
                return
            t, Pw = t_all[lo:hi], Pr_all[lo:hi]
            kept = regime(e, [(min(a, b), a, b) for a, b in zip(t, Pw)])
            for i in range(hi - lo):
                wk = workers[rw[lo + i]]
                if i == kept or (kept == -1 and t[i] <= Pw[i]):
                    tree.append((e, wk))
                else:
                    branches.append((ps, wk))

        tree.append((ps, e0))
        a0, core = base
        opt = None
        if a0 is not None:
            opt = self._option_of(a0, core)
            if ov is None:
                ov = self._option(opt, sh, w, al, ga, core)
        kids, ue0 = self._e0_kids(w, sh, ov["val"] if ov else INF)
        kept = regime(e0, kids)
        same = bs["same"]
        n_same = len(same)
        for i in range(n_same):
            mode = "best" if kept == -1 else ("one" if i == kept else "zero")
            if mode == "one" or (mode == "best" and kids[i][1] <= P[same[i]]):
                tree.append((e0, workers[same[i]]))
            else:
                branches.append((ps, workers[same[i]]))
        if not self.beyond:
            return make_structure(net, tree, branches)
        mode = "best" if kept == -1 else ("one" if kept == n_same else "zero")
        _, _, cb, co, _ = self._e0_parts(w, sh)

        def below_a0() -> None:
            a0_kept = regime(a0, ov["kids"])
            idx = 0
            if ov["core"] is not None:
                m = "best" if a0_kept == -1 else ("one" if a0_kept == 0 else "zero")
                child(a0, core, m, ov["A_core"], ov["core_cut"][0], ov["core_cut"][1], below_core, self.remw_global, ov["ua0"])
                idx = 1
            if len(self.pod0_racks):
                A_r0, b0, o0, u0 = ov["A_r0"].tolist(), ov["b0"].tolist(), ov["o0"].tolist(), ov["u0"]
                for i, (e, r, sel, pos) in enumerate(bs["pod0"]):
                    m = "best" if a0_kept == -1 else ("one" if a0_kept == idx + i else "zero")
                    child(a0, e, m, A_r0[i], b0[i], o0[i], lambda e=e, r=r: rack(e, r), pos, u0[sel])

        def below_core() -> None:
            pods_zero = sh["pods_zero"]
            unres = np.minimum(ov["A_p"], ov["p_best"])
            one = np.minimum(ov["A_p"], ov["p_one"])
            c_kept = regime(core, list(zip(unres.tolist(), one.tolist(), pods_zero.tolist())))
            A_p, p_best, p_one, U = ov["A_p"].tolist(), ov["p_best"].tolist(), ov["p_one"].tolist(), ov["U"]
            aggs = opt["aggs"].tolist()
            for p, ws in enumerate(bs["pod_ws"]):
                m = "best" if c_kept == -1 else ("one" if c_kept == p else "zero")
                agg = aggs[p]
                # `child`, inline: the pod's aggregation switch stays in the tree or its workers are cut
                if m != "zero" and A_p[p] <= (p_best[p] if m == "best" else p_one[p]):
                    tree.append((core, agg))
                    below_agg(p, agg)
                else:
                    cut(core, self.remw_global[ws], U[ws], m)

        def below_agg(p: int, agg: int) -> None:
            lo, hi = pod_rstart[p], pod_rstart[p + 1]
            kids = list(zip(rem_unres[lo:hi], rem_one[lo:hi], rem_zero[lo:hi]))
            a_kept = regime(agg, kids)
            u = ov["u"]
            for i in range(hi - lo):
                r_local = lo + i
                r = rem_racks[r_local]
                e = rack_e[r]
                m = "best" if a_kept == -1 else ("one" if a_kept == i else "zero")
                # `child`, inline: the rack stays in the tree or its workers are cut
                if m != "zero" and A_r_all[r_local] <= (cb_all[r_local] if m == "best" else co_all[r_local]):
                    tree.append((agg, e))
                    rack(e, r)
                else:
                    # the remote workers are grouped by rack: rack r_local's are one slice
                    ws = slice(rem_start[r_local], rem_start[r_local + 1])
                    cut(agg, self.remw_global[ws], u[ws], m)

        if self.remote:
            rem_racks, rack_e, pod_rstart, rem_start = bs["rem_racks"], bs["rack_e"], bs["pod_rstart"], bs["rem_start"]
            A_r_all, cb_all, co_all = ov["A_r"].tolist(), ov["c_best"].tolist(), ov["c_one"].tolist()
            rem_unres = np.minimum(ov["A_r"], ov["c_best"]).tolist()
            rem_one = np.minimum(ov["A_r"], ov["c_one"]).tolist()
            rem_zero = _seg_sum(sh["rem_P"], sh["rem_local"], len(self.rem_racks)).tolist()
        child(e0, a0, mode, ov["val"], cb, co, below_a0, self.beyond_pos, ue0)
        return make_structure(net, tree, branches)


class Pricer:
    """Prices the jobs of one instance; caches per-job static data."""

    def __init__(self, net: Network, jobs: tuple[Job, ...]) -> None:
        self.net = net
        self.jobs = jobs
        self._nodes = [net.job_nodes(j) for j in jobs]
        self._keys = [(ps, tuple(ws)) for ps, ws in self._nodes]
        self._switches = np.array(net.topo.switches, dtype=np.int64)
        self.exact = net.fabric is not None

    def edge_prices(self, scale: float, a: np.ndarray, b: np.ndarray | None = None, divide: bool = False) -> EdgePrices | np.ndarray:
        """The edge prices `scale · a · b` (`scale / a · b` with `divide`) for `price`,
        `realise` and `structure_cost`: computed where read on a Clos fabric
        (`EdgePrices`), as a full array elsewhere (the graph pricer reads every edge)."""
        prices = EdgePrices(scale, a, b, divide)
        return prices if self.exact else prices.full()

    def _reverse_edges(self) -> np.ndarray:
        """Per directed edge, the index of the opposite direction (general graphs only;
        built on first use, shared through the network's memo)."""
        rev = self.net.memo.get(("reverse-edges",))
        if rev is None:
            ei = self.net.topo.edge_index
            rev = self.net.memo[("reverse-edges",)] = np.array([ei[(e.head, e.tail)] for e in self.net.topo.edges], dtype=np.int64)
        return rev

    # -- shared ------------------------------------------------------------------
    def rpf_tree(self, j: int) -> BaseTree:
        """The reverse-path tree: routes from the workers toward the PS, reversed.

        This is the tree IP multicast (PIM-SM source trees) builds over the
        shared unicast routing.
        """
        mkey = ("rpf", *self._keys[j])
        tree = self.net.memo.get(mkey)
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
            tree = self.net.memo[mkey] = base_tree_from_parents(ps, parent, workers)
        return tree

    def clos_job(self, j: int) -> _ClosJob:
        key = ("clos", *self._keys[j])
        cj = self.net.memo.get(key)
        if cj is None:
            ps, workers = self._nodes[j]
            cj = self.net.memo[key] = _ClosJob(self.net, ps, workers)
        return cj

    def prepared(self, j: int, base: BaseTree, key: object = None) -> PreparedBase:
        """The DP data of a base tree; cached when `key` names it."""
        if key is not None:
            mkey = ("base", *self._keys[j], key)
            pb = self.net.memo.get(mkey)
            if pb is None:
                pb = self.net.memo[mkey] = PreparedBase(self.net, base, set(self._nodes[j][1]))
            return pb
        return PreparedBase(self.net, base, set(self._nodes[j][1]))

    def prune(self, j: int, base: BaseTree, w: np.ndarray, al: np.ndarray, ga: np.ndarray, key: object = None) -> tuple[float, Structure | None]:
        """The cheapest structure on a base tree. On Clos fabrics a base named by its
        (a0, core) key, or "rpf" for the reverse-path tree, takes the vectorised DP."""
        if self.exact and key is not None:
            cj = self.clos_job(j)
            if key == "rpf":
                key = cj.rpf_base(self.net)
            if isinstance(key, tuple):
                return cj.prune_on(self.net, key, w, al, ga)
        return best_pruning(self.net, self.prepared(j, base, key), w, al, ga)

    def realise(self, j: int, res: PriceResult, w: np.ndarray | EdgePrices, al: np.ndarray, ga: np.ndarray) -> Structure | None:
        """The structure of a result priced with want=False (same prices)."""
        if res.structure is not None or res.cost == INF:
            return res.structure
        if res.base is None:
            return unicast_structure(self.net, *self._nodes[j])
        kept = res.kept or {}
        return self.clos_job(j).build(self.net, w, al, ga, res.base, kept.get("sh"), kept.get("ov"))

    # -- pricing -----------------------------------------------------------------
    def price(self, j: int, w: np.ndarray | EdgePrices, al: np.ndarray, ga: np.ndarray, want: bool = True) -> PriceResult:
        """Cheapest structure of job j (exact on Clos) and a lower bound on all of them.

        With `want=False` the structure is not built (only cost and bound).
        """
        if self.exact:
            cj = self.clos_job(j)
            keep: dict = {}
            cost, base = cj.price(w, al, ga, keep)
            res = PriceResult(cost, None, cost, base, keep)
            if want:
                # as `realise`, reusing the values the pricing computed
                if cost == INF:
                    s = None
                elif base is None:
                    s = unicast_structure(self.net, *self._nodes[j])
                else:
                    s = cj.build(self.net, w, al, ga, base, keep["sh"], keep.get("ov"))
                res = PriceResult(cost, s, cost, base)
            return res
        return self._price_graph(j, w.full() if isinstance(w, EdgePrices) else w, al, ga)

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

        Cut a structure into copy segments, each starting at the PS or at a
        replicating switch and ending at a worker or at the next replicating switch;
        the link cost is the sum of the segments' costs. With no replicating switch
        (R = ∅) all workers but one get unicast copies from the PS. With R ≠ ∅ the
        structure pays min(α+γ) over the switches allowed to replicate (A), a
        segment from the PS into R, and for every worker either its unicast route
        from the PS or a shortest path from a switch of A; its link cost is also at
        least half a metric-closure MST (Steiner) and the farthest worker's shortest
        path. Distances are taken over all edges (hosts may be transited), which can
        only lower them. docs/algorithm.md §4 has the argument.
        """
        net = self.net
        ps, workers = self._nodes[j]
        routing = net.routing
        n = net.n_nodes
        rc = np.array([float(w[routing.path_edges(ps, wk)].sum()) for wk in workers])
        tiny = 1e-300  # keeps zero-price edges as edges in scipy's sparse graphs
        directed = csr_matrix((w + tiny, (net.edge_tail, net.edge_head)), shape=(n, n))
        from_ps = dijkstra(directed, indices=ps)
        sp = from_ps[workers]
        lb0 = float(rc.sum() - np.max(rc - sp))
        switches = self._switches
        node_cost = al[switches] + ga[switches]
        allowed = switches[np.isfinite(node_cost)]
        if not len(allowed):
            return lb0
        node_min = float(np.min(node_cost))
        reach = float(np.min(from_ps[allowed]))
        to_workers = dijkstra(directed.T.tocsr(), indices=workers)  # row i: distances to worker i
        conn = np.minimum(rc, to_workers[:, allowed].min(axis=1))
        und_w = np.minimum(w, w[self._reverse_edges()]) + tiny
        und = csr_matrix((und_w, (net.edge_tail, net.edge_head)), shape=(n, n))
        terms = [ps, *workers]
        dist = dijkstra(und, directed=False, indices=terms)[:, terms]
        mst = float(minimum_spanning_tree(csr_matrix(dist)).sum())
        lb_link = max(float(np.max(sp)), 0.5 * mst, reach + float(conn.sum()))
        return min(lb0, node_min + lb_link) - 4 * n * tiny * len(terms)
