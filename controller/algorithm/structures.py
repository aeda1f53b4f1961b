"""Delivery structures: building them, costing them, and pruning base trees.

The structure family (docs/algorithm.md §2): a structure of job j is a base tree B
(an arborescence from the PS whose leaves are the workers) and a rooted subtree
T' of B; a worker that is a leaf of T' gets the multicast stream, every other
worker gets a unicast copy from its deepest ancestor in T' (the PS if none),
routed by the shared unicast routing. `best_pruning` finds the cheapest T' of a
base tree exactly, by dynamic programming over the tree.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .model import Structure
from .network import Network

INF = math.inf


def make_structure(
    net: Network, tree: list[tuple[int, int]], branches: list[tuple[int, int]]
) -> Structure:
    """Derive copies, groups and entries from a multicast tree and unicast branches."""
    copies: Counter[int] = Counter()
    outputs: Counter[int] = Counter()
    ei = net.topo.edge_index
    entries = set()
    for parent, child in tree:
        copies[ei[(parent, child)]] += 1
        outputs[parent] += 1
        if net.topo.is_switch(child):
            entries.add(child)
    for emitter, worker in branches:
        for e in net.routing.path_edges(emitter, worker):
            copies[int(e)] += 1
        outputs[emitter] += 1
    groups = frozenset(v for v, o in outputs.items() if o >= 2 and net.topo.is_switch(v))
    return Structure(
        tree=tuple(sorted(tree)),
        branches=tuple(sorted(branches)),
        copies=tuple(sorted(copies.items())),
        groups=groups,
        entries=frozenset(entries),
    )


def unicast_structure(net: Network, ps: int, workers: list[int]) -> Structure:
    """The PS sends one copy per worker along unicast routes; no table is used."""
    return make_structure(net, [], [(ps, w) for w in workers])


def structure_cost(s: Structure, w_edge: np.ndarray, alpha: np.ndarray, gamma: np.ndarray) -> float:
    """Σ copies·w_edge + Σ_groups α + Σ_entries γ."""
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


def best_pruning(
    net: Network,
    base: BaseTree,
    workers: set[int],
    w_edge: np.ndarray,
    alpha: np.ndarray,
    gamma: np.ndarray,
) -> tuple[float, Structure | None]:
    """The cheapest structure of the family on base tree `base` (exact DP).

    Cost = Σ_e w_edge[e]·copies(e) + Σ_{v replicating} alpha[v] + Σ_{v in tree} gamma[v].
    Returns (inf, None) when every pruning is forbidden (an infinite price).
    """
    topo = net.topo
    ei = topo.edge_index
    routing = net.routing
    children = base.children
    below: dict[int, list[int]] = {}

    order: list[int] = []
    stack = [base.root]
    while stack:
        v = stack.pop()
        order.append(v)
        stack.extend(children.get(v, ()))
    for v in reversed(order):
        if v in workers and v not in children:
            below[v] = [v]
        else:
            acc: list[int] = []
            for c in children.get(v, ()):
                acc.extend(below[c])
            below[v] = acc

    def unicast_cost(x: int, ws: list[int]) -> float:
        return float(sum(w_edge[routing.path_edges(x, w)].sum() for w in ws))

    # in_tree[v]: cost of v's subtree given v is in T' (excluding the edge into v).
    in_tree: dict[int, float] = {}
    choice: dict[int, tuple[bool, ...]] = {}  # per child: True = child in T'
    for v in reversed(order):
        kids = children.get(v, ())
        if not kids:
            in_tree[v] = 0.0  # a worker leaf
            continue
        opts = []
        for c in kids:
            a = float(w_edge[ei[(v, c)]]) + in_tree[c]
            b = unicast_cost(v, below[c])
            opts.append((a, b, len(below[c])))
        is_switch = topo.is_switch(v)
        al = float(alpha[v]) if is_switch else 0.0
        ga = float(gamma[v]) if is_switch else 0.0
        if len(kids) == 1:
            a, b, n = opts[0]
            b_total = b + (al if n >= 2 else 0.0)
            if a <= b_total:
                in_tree[v], choice[v] = ga + a, (True,)
            else:
                in_tree[v], choice[v] = ga + b_total, (False,)
        else:
            picks = tuple(a <= b for a, b, _ in opts)
            in_tree[v] = ga + al + sum(min(a, b) for a, b, _ in opts)
            choice[v] = picks
    cost = in_tree[base.root]
    if cost == INF:
        return INF, None

    tree: list[tuple[int, int]] = []
    branches: list[tuple[int, int]] = []
    stack = [base.root]
    while stack:
        v = stack.pop()
        for c, pick in zip(children.get(v, ()), choice.get(v, ())):
            if pick:
                tree.append((v, c))
                stack.append(c)
            else:
                branches.extend((v, w) for w in below[c])
    return cost, make_structure(net, tree, branches)
