"""Delivery structures: building them, costing them, and pruning base trees.

The structure family (docs/algorithm.md §2): a structure of job j is a base tree B
(an arborescence from the PS whose leaves are the workers) and a rooted subtree
T' of B; a worker that is a leaf of T' gets the multicast stream, every other
worker gets a unicast copy, emitted by its deepest ancestor in T' or by the PS
itself, routed by the shared unicast routing. `best_pruning` finds the cheapest
such structure on a base tree exactly, by dynamic programming over the tree.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from controller.algorithm.model import Structure
from controller.algorithm.network import Network

INF = math.inf


def make_structure(
    net: Network, tree: list[tuple[int, int]], branches: list[tuple[int, int]]
) -> Structure:
    """Derive copies, groups and entries from a multicast tree and unicast branches."""
    ei = net.topo.edge_index
    is_switch = _switch_mask(net)
    path_edges = net.routing.path_edges
    parts = [np.array([ei[pc] for pc in tree], dtype=np.int64)]
    parts += [path_edges(emitter, worker) for emitter, worker in branches]
    edges, counts = np.unique(np.concatenate(parts), return_counts=True)
    outputs: Counter[int] = Counter(map(itemgetter(0), tree))
    outputs.update(map(itemgetter(0), branches))
    groups = frozenset(v for v, o in outputs.items() if o >= 2 and is_switch[v])
    s = Structure(
        tree=tuple(sorted(tree)),
        branches=tuple(sorted(branches)),
        copies=tuple(zip(edges.tolist(), counts.tolist())),
        groups=groups,
        entries=frozenset(c for _, c in tree if is_switch[c]),
    )
    # the cached arrays of `copies`, which would otherwise be rebuilt from its tuples
    s.__dict__["edge_array"] = edges
    s.__dict__["copy_array"] = counts.astype(float)
    return s


def _switch_mask(net: Network) -> list[bool]:
    """is_switch of every node, as a list (memoised on the network)."""
    mask = net.memo.get(("switch-mask",))
    if mask is None:
        topo = net.topo
        mask = net.memo[("switch-mask",)] = [topo.is_switch(i) for i in range(len(topo.nodes))]
    return mask


def unicast_structure(net: Network, ps: int, workers: list[int]) -> Structure:
    """The PS sends one copy per worker along unicast routes; no table is used.

    Memoised on the network (structures are immutable): the baselines, the pricer
    and the planner's candidates all ask for the same job's unicast structure.
    """
    key = ("unicast", ps, tuple(workers))
    s = net.memo.get(key)
    if s is None:
        s = net.memo[key] = make_structure(net, [], [(ps, w) for w in workers])
    return s


def structure_cost(s: Structure, w_edge: np.ndarray, alpha: np.ndarray, gamma: np.ndarray) -> float:
    """Σ copies·w_edge + Σ_groups α + Σ_entries γ (`w_edge`: an array, or anything
    indexed like one, as `pricing.EdgePrices`)."""
    cost = float(np.dot(w_edge[s.edge_array], s.copy_array)) if s.copies else 0.0
    cost += sum(float(alpha[v]) for v in s.groups)
    cost += sum(float(gamma[v]) for v in s.entries)
    return cost


@dataclass(frozen=True)
class BaseTree:
    """An arborescence from the PS, as children lists, pruned to the workers."""

    root: int
    children: dict[int, tuple[int, ...]]

    def edges(self) -> list[tuple[int, int]]:
        return [(p, c) for p, cs in self.children.items() for c in cs]


def base_tree_from_parents(root: int, parent: dict[int, int], workers: list[int]) -> BaseTree:
    """Keep the paths from `root` to the workers of a parent map; drop the rest."""
    keep: dict[int, set[int]] = {}
    for w in workers:
        v = w
        while v != root:
            p = parent[v]
            kids = keep.setdefault(p, set())
            if v in kids:
                break
            kids.add(v)
            v = p
    return BaseTree(root, {p: tuple(sorted(cs)) for p, cs in keep.items()})


class PreparedBase:
    """A base tree with the static data of its pruning DP: post-order, tree-edge
    indices, and the route edges of every possible unicast copy (from each tree node
    to each worker below it, and from the PS to each worker), concatenated so that
    one `bincount` prices them all."""

    def __init__(self, net: Network, base: BaseTree, workers: set[int]) -> None:
        topo = net.topo
        ei = topo.edge_index
        routing = net.routing
        children = base.children
        self.root = base.root
        order: list[int] = []
        stack = [base.root]
        while stack:
            v = stack.pop()
            order.append(v)
            stack.extend(children.get(v, ()))
        below: dict[int, list[int]] = {}
        for v in reversed(order):
            if v not in children:
                if v not in workers:
                    raise ValueError(f"base tree leaf {topo.name(v)} is not a worker")
                below[v] = [v]
            else:
                acc: list[int] = []
                for c in children[v]:
                    acc.extend(below[c])
                below[v] = acc
        self.below = below
        self.workers = below[base.root]
        wpos = {w: i for i, w in enumerate(self.workers)}
        # pair p: a unicast copy from node v to worker w; pairs of one cut are contiguous
        seg: list[np.ndarray] = []
        seg_id: list[np.ndarray] = []
        pair_worker: list[int] = []
        cut_start: list[int] = []
        for w in self.workers:  # pairs 0..n-1: from the PS
            arr = routing.path_edges(base.root, w)
            seg.append(arr)
            seg_id.append(np.full(len(arr), len(pair_worker), dtype=np.int64))
            pair_worker.append(wpos[w])
        # internal nodes in post-order: (node, is_switch, [(child, tree edge, cut id)])
        self.internal: list[tuple[int, bool, list[tuple[int, int, int]]]] = []
        cut = 0
        for v in reversed(order):
            kids = children.get(v)
            if not kids:
                continue
            rows = []
            for c in kids:
                cut_start.append(len(pair_worker))
                for w in below[c]:
                    arr = routing.path_edges(v, w)
                    seg.append(arr)
                    seg_id.append(np.full(len(arr), len(pair_worker), dtype=np.int64))
                    pair_worker.append(wpos[w])
                rows.append((c, ei[(v, c)], cut))
                cut += 1
            self.internal.append((v, topo.is_switch(v), rows))
        self.n_workers = len(self.workers)
        self.n_pairs = len(pair_worker)
        self.n_cuts = cut
        self.pair_edges = np.concatenate(seg)
        self.pair_ids = np.concatenate(seg_id)
        self.pair_worker = np.array(pair_worker, dtype=np.int64)
        self.cut_start = np.array(cut_start, dtype=np.int64)
        self.cut_of_pair = np.repeat(np.arange(cut), np.diff(np.append(self.cut_start, self.n_pairs)))


def best_pruning(
    net: Network,
    base: PreparedBase,
    w_edge: np.ndarray,
    alpha: np.ndarray,
    gamma: np.ndarray,
) -> tuple[float, Structure | None]:
    """The cheapest structure of the family on base tree `base` (exact DP).

    Cost = Σ_e w_edge[e]·copies(e) + Σ_{v replicating} alpha[v] + Σ_{v in tree} gamma[v].
    For a node v in T', each child either stays in T' (one output of v) or is cut;
    a cut child's workers each get a unicast copy from v (one output each) or from
    the PS (no output of v: the PS host replicates for free). A switch with two or
    more outputs replicates. g(v), the cost of v's subtree given v ∈ T', is
    γ_v + min(α_v + Σ_c best_c, Σ_c fromPS_c + min_c(one_c − fromPS_c)), the second
    term being the cheapest way to give v a single output. Returns (inf, None) when
    every structure is forbidden. O(tree size + total length of the routes).
    """
    pair_cost = np.bincount(base.pair_ids, weights=w_edge[base.pair_edges], minlength=base.n_pairs)
    n = base.n_workers
    P = pair_cost[:n]  # from the PS, per worker
    u = pair_cost[n:]
    P_pair = P[base.pair_worker[n:]]
    cuts = base.cut_of_pair
    cut_best = np.bincount(cuts, weights=np.minimum(u, P_pair), minlength=base.n_cuts).tolist()
    cut_ps = np.bincount(cuts, weights=P_pair, minlength=base.n_cuts).tolist()
    diff = u - P_pair
    cut_one_delta = np.minimum.reduceat(diff, base.cut_start - n).tolist() if base.n_cuts else []
    g: dict[int, float] = {}
    decision: dict[int, tuple] = {}
    for v, is_switch, rows in base.internal:
        best_sum = 0.0
        ps_sum = 0.0
        one_gain = INF
        one_child = -1
        per_child = []
        for idx, (c, e, k) in enumerate(rows):
            a = float(w_edge[e]) + g.get(c, 0.0)
            best = min(a, cut_best[k])
            one = min(a, cut_ps[k] + cut_one_delta[k])
            best_sum += best
            ps_sum += cut_ps[k]
            gain = one - cut_ps[k]
            if gain < one_gain:
                one_gain, one_child = gain, idx
            per_child.append((a, k))
        if not is_switch:  # the PS: replicates for free
            g[v] = best_sum
            decision[v] = ("all", per_child)
            continue
        unrestricted = float(alpha[v]) + best_sum
        single = ps_sum + one_gain
        if unrestricted < single:
            g[v] = float(gamma[v]) + unrestricted
            decision[v] = ("all", per_child)
        else:
            g[v] = float(gamma[v]) + single
            decision[v] = ("one", per_child, one_child)
    cost = g[base.root]
    if cost == INF:
        return INF, None

    root = base.root
    tree: list[tuple[int, int]] = []
    branches: list[tuple[int, int]] = []
    rows_of = {v: rows for v, _, rows in base.internal}
    starts = base.cut_start.tolist() + [base.n_pairs]

    def cut_workers(v: int, c: int, k: int, mode: str) -> None:
        ws = base.below[c]
        lo = starts[k] - n
        if mode == "best":
            for i, w in enumerate(ws):
                branches.append((v if u[lo + i] <= P_pair[lo + i] else root, w))
        else:  # exactly one copy from v: the worker that gains most
            pick = int(np.argmin(diff[lo : lo + len(ws)]))
            for i, w in enumerate(ws):
                branches.append((v if i == pick else root, w))

    stack = [root]
    while stack:
        v = stack.pop()
        if v not in decision:
            continue
        d = decision[v]
        for idx, ((c, _e, k), (a, _k)) in enumerate(zip(rows_of[v], d[1])):
            if d[0] == "all":
                if a <= cut_best[k]:
                    tree.append((v, c))
                    stack.append(c)
                else:
                    cut_workers(v, c, k, "best")
            elif idx == d[2]:
                if a <= cut_ps[k] + cut_one_delta[k]:
                    tree.append((v, c))
                    stack.append(c)
                else:
                    cut_workers(v, c, k, "one")
            else:
                branches.extend((root, w) for w in base.below[c])
    return cost, make_structure(net, tree, branches)
