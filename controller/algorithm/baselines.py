"""Baseline planners: unicast, shortest-path-tree, Steiner-tree and greedy multicast.

Each takes a `Network` and the jobs and returns the chosen structures, one per job
in job order; `plan` in `controller.algorithm` turns them into plans with the
shared rate allocation. All of them are pure and deterministic, and none of them
ever exceeds a switch's group or entry table: they place jobs one at a time and
forbid (infinite price) the tables that are already full, so where a switch has
no room left a job falls back to unicast copies (from a switch above it or from
the PS).

Every structure built here is in the planner's structure family (a base tree
pruned by `best_pruning`, or pure unicast): on a recognised Clos fabric the base
trees used are single-top trees (`clos_base_choices`; the reverse-path tree of
the d-mod-k routing is one of them), on other graphs any arborescence from the PS.
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from controller.algorithm.model import Job, Structure
from controller.algorithm.network import Network
from controller.algorithm.pricing import Pricer
from controller.algorithm.rates import demand_load, table_counts
from controller.algorithm.structures import BaseTree, base_tree_from_parents, structure_cost, unicast_structure

INF = math.inf

#: Greedy: the exponent η of the congestion price exp(η · utilisation).
GREEDY_ETA = 4.0


def unicast(net: Network, jobs: tuple[Job, ...]) -> list[Structure]:
    """Every PS sends one copy per worker along unicast routes."""
    nodes = [net.job_nodes(j) for j in jobs]
    net.routing.host_routes([(ps, w) for ps, workers in nodes for w in workers])  # all at once
    return [unicast_structure(net, ps, workers) for ps, workers in nodes]


# -- shared helpers ------------------------------------------------------------------


@dataclass(frozen=True)
class Occupancy:
    """What jobs already placed hold, for `greedy` to place more on: per edge their
    load at full demand, per node the groups and entries their structures use
    (`admission` carries these with the plan, `loads.kept_occupancy`)."""

    load: np.ndarray
    groups: np.ndarray
    entries: np.ndarray


class _TableUsage:
    """Groups and entries used so far on every switch, against its capacities."""

    def __init__(self, net: Network) -> None:
        self.net = net
        self.groups = np.zeros(net.n_nodes)
        self.entries = np.zeros(net.n_nodes)

    def add(self, s: Structure) -> None:
        for v in s.groups:
            self.groups[v] += 1
        for v in s.entries:
            self.entries[v] += 1

    def add_all(self, structures: Sequence[Structure]) -> None:
        """`add` of every structure of `structures`, counted in one pass (an admission
        counts every kept job's; the same counts)."""
        self.groups += table_counts(structures, "group_array", self.net.n_nodes)
        self.entries += table_counts(structures, "entry_array", self.net.n_nodes)

    def remove(self, s: Structure) -> None:
        for v in s.groups:
            self.groups[v] -= 1
        for v in s.entries:
            self.entries[v] -= 1

    def within_budgets(self) -> bool:
        return bool(np.all(self.groups <= self.net.group_cap) and np.all(self.entries <= self.net.entry_cap))

    def forbidden(self) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, gamma): inf where the group (entry) table is full, 0 elsewhere."""
        al = np.where(self.groups >= self.net.group_cap, INF, 0.0)
        ga = np.where(self.entries >= self.net.entry_cap, INF, 0.0)
        return al, ga

    def scarcity(self, eta: float) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, gamma): inf where full, (1/cap)·exp(η·used/cap) where finite, 0 if unlimited.

        The price is the job's share of the table times the same exponential
        congestion factor as the links, so a copy on a link and a slot in a table
        are priced in the same unit (fraction of the resource).
        """
        return self._scarce(self.groups, self.net.group_cap, eta), self._scarce(
            self.entries, self.net.entry_cap, eta
        )

    def rescore(self, prices: tuple[np.ndarray, np.ndarray], s: Structure, eta: float) -> None:
        """`prices` (from `scarcity(eta)`) brought up to date after `add(s)`: only the
        switches s uses change, to the values `scarcity` would give."""
        for price, used, cap, nodes in (
            (prices[0], self.groups, self.net.group_cap, s.groups),
            (prices[1], self.entries, self.net.entry_cap, s.entries),
        ):
            if nodes:
                idx = np.fromiter(nodes, dtype=np.int64, count=len(nodes))
                price[idx] = self._scarce(used[idx], cap[idx], eta)

    @staticmethod
    def _scarce(used: np.ndarray, cap: np.ndarray, eta: float) -> np.ndarray:
        finite = np.isfinite(cap)
        safe = np.where(finite & (cap > 0), cap, 1.0)
        price = np.where(finite, np.exp(np.minimum(eta * used / safe, 50.0)) / safe, 0.0)
        return np.where(used >= cap, INF, price)


def clos_base_choices(net: Network, ps: int, workers: list[int]) -> list[tuple[int | None, int | None]]:
    """Every (a0, core) for `_ClosJob.base_tree`: the Clos base trees of a job.

    One per core (3-tier jobs with a worker outside the PS's pod; a0 is the
    core's aggregation switch in the PS's pod), one per aggregation switch /
    spine of the PS's pod (jobs that stay in it), or the single same-rack tree
    (None, None) when every worker shares the PS's rack. Cores come in the
    fabric's group order, as in `_ClosJob.options`.
    """
    f = net.fabric
    assert f is not None
    e0 = f.host_edge[ps]
    p0 = f.edge_pod[e0]
    if all(f.host_edge[w] == e0 for w in workers):
        return [(None, None)]
    if f.tiers == 3 and any(f.edge_pod[f.host_edge[w]] != p0 for w in workers):
        return [(f.core_agg[c][p0], c) for group in f.groups for c in group]
    return [(a, None) for a in f.pod_aggs[p0]]


def _spt_fallback(net: Network, pricer: Pricer, j: int, usage: _TableUsage) -> Structure:
    """The reverse-path tree, pruned to the fewest copies where tables are full."""
    al, ga = usage.forbidden()
    tree = pricer.rpf_tree(j)
    switches = np.array([v for v in tree.children if net.topo.is_switch(v)], dtype=np.int64)
    # The pruning only looks at the tree's own switches: while none of them is full
    # the answer is the job's unconstrained one, computed once per network.
    free = not (np.isinf(al[switches]).any() or np.isinf(ga[switches]).any())
    key = ("spt-unconstrained", *net.job_nodes(pricer.jobs[j])[:1], tuple(net.job_nodes(pricer.jobs[j])[1]))
    if free and key in net.memo:
        return net.memo[key]
    _, s = pricer.prune(j, tree, np.ones(net.n_edges), al, ga, key="rpf")
    s = s if s is not None else unicast_structure(net, *net.job_nodes(pricer.jobs[j]))
    if free:
        net.memo[key] = s
    return s


# -- shortest-path tree ----------------------------------------------------------------


def spt(net: Network, jobs: tuple[Job, ...]) -> list[Structure]:
    """Shortest-path-tree multicast, as IP multicast (PIM-SM source trees) builds it.

    Each job's base tree is the reverse-path tree of the shared unicast routing
    (`Pricer.rpf_tree`). Jobs are placed in order; a job whose tree crosses a
    switch with no group (or entry) left falls back to unicast copies there: the
    structure is the pruning of the tree with the fewest copies (`best_pruning`
    with one unit per copy, an infinite price at full tables and none elsewhere).
    With unlimited tables it is the full reverse-path tree.
    """
    pricer = Pricer(net, jobs)
    usage = _TableUsage(net)
    out: list[Structure] = []
    for j in range(len(jobs)):
        s = _spt_fallback(net, pricer, j, usage)
        usage.add(s)
        out.append(s)
    return out


# -- Steiner tree --------------------------------------------------------------------


def _mehlhorn_base(net: Network, ps: int, workers: list[int]) -> BaseTree | None:
    """Mehlhorn's Steiner tree over the switches and the job's hosts, hop weights.

    Oriented from the PS and pruned to the workers. Hosts never forward, so the
    tree is oriented by a breadth-first search from the PS that does not expand
    other hosts; a worker cut off that way (the tree went through a multi-homed
    host) is reattached by a shortest path over switches from the part already
    reached. None when some worker cannot be reached at all.
    """
    topo = net.topo
    if not workers:
        return None
    terminals = {ps, *workers}
    g = nx.Graph()
    g.add_nodes_from(sorted(terminals))
    idx = topo.index
    for link in topo.links:
        a, b = idx[link.a], idx[link.b]
        if all(topo.is_switch(v) or v in terminals for v in (a, b)):
            g.add_edge(a, b, weight=1)
    try:
        st = nx.algorithms.approximation.steiner_tree(g, sorted(terminals), weight="weight", method="mehlhorn")
    except (nx.NetworkXError, ValueError, KeyError):
        return None
    adj: dict[int, set[int]] = {}
    for u, v in st.edges():
        adj.setdefault(u, set()).add(v)
        adj.setdefault(v, set()).add(u)
    while True:
        parent = _orient(topo, adj, ps)
        missing = {w for w in workers if w not in parent and w != ps}
        if not missing:
            return base_tree_from_parents(ps, parent, workers)
        path = _path_to_missing(topo, {ps, *parent} - (set(topo.hosts) - {ps}), missing)
        if path is None:
            return None
        for u, v in zip(path, path[1:]):
            adj.setdefault(u, set()).add(v)
            adj.setdefault(v, set()).add(u)


def _orient(topo, adj: dict[int, set[int]], ps: int) -> dict[int, int]:
    """BFS parents from the PS over `adj`, expanding only the PS and switches."""
    parent: dict[int, int] = {}
    queue = deque([ps])
    seen = {ps}
    while queue:
        v = queue.popleft()
        if v != ps and not topo.is_switch(v):
            continue
        for u in sorted(adj.get(v, ()), key=topo.name):
            if u not in seen:
                seen.add(u)
                parent[u] = v
                queue.append(u)
    return parent


def _path_to_missing(topo, sources: set[int], targets: set[int]) -> list[int] | None:
    """A shortest path (hops) from `sources` to one of `targets`, transiting switches only."""
    prev: dict[int, int | None] = {v: None for v in sources}
    queue = deque(sorted(sources, key=topo.name))
    while queue:
        v = queue.popleft()
        for u in topo.neighbors[v]:
            if u in prev:
                continue
            prev[u] = v
            if u in targets:
                path = [u]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return path[::-1]
            if topo.is_switch(u):
                queue.append(u)
    return None


def steiner(net: Network, jobs: tuple[Job, ...]) -> list[Structure]:
    """Steiner-tree multicast (KMB-style) with the same unicast fallback as `spt`.

    On a general graph: Mehlhorn's 2-approximation of the minimum-hop Steiner tree
    (networkx `steiner_tree(method="mehlhorn")`) over the switches plus the job's
    own hosts, oriented from the PS and pruned to the workers; a worker that the
    tree reaches only through another host (hosts never forward) is reattached by
    a shortest path over switches. If no Steiner tree can be built the
    reverse-path tree is used instead.

    On a recognised Clos fabric the minimum-hop Steiner tree is a single-top tree,
    so the base trees are the Clos base trees (`clos_base_choices`). The job takes
    the one whose fallback pruning (fewest copies, full tables forbidden) has the
    fewest copies; with unlimited tables that is the base tree with the fewest
    edges, and all cores of a job tie. Ties are broken deterministically per job:
    the candidates are tried in their fixed order rotated to start at
    CRC-32(job id) mod (number of candidates), and the first one that reaches the
    minimum wins, so that jobs spread over the cores instead of piling on one.
    """
    pricer = Pricer(net, jobs)
    usage = _TableUsage(net)
    ones = np.ones(net.n_edges)
    out: list[Structure] = []
    for j, job in enumerate(jobs):
        al, ga = usage.forbidden()
        s: Structure | None = None
        if net.fabric is not None:
            cj = pricer.clos_job(j)
            target, _ = cj.price(ones, al, ga)
            bases = clos_base_choices(net, *net.job_nodes(job))
            start = zlib.crc32(job.id.encode()) % len(bases)
            best = INF
            for i in range(len(bases)):
                a0, core = bases[(start + i) % len(bases)]
                cost, cand = pricer.prune(j, cj.base_tree(net, a0, core), ones, al, ga, key=(a0, core))
                if cand is not None and cost < best:
                    best, s = cost, cand
                if best <= target:
                    break
        else:
            ps, workers = net.job_nodes(job)
            base = _mehlhorn_base(net, ps, workers) or pricer.rpf_tree(j)
            _, s = pricer.prune(j, base, ones, al, ga)
        if s is None:
            s = unicast_structure(net, *net.job_nodes(job))
        usage.add(s)
        out.append(s)
    return out


# -- greedy ----------------------------------------------------------------------------


def greedy(
    net: Network, jobs: tuple[Job, ...], eta: float = GREEDY_ETA, placed: Sequence[tuple[Job, Structure]] = (),
    occupied: Occupancy | None = None,
) -> list[Structure]:
    """A table-aware greedy heuristic.

    Jobs are placed one at a time in decreasing order of demand × number of
    workers (stable: ties keep job order). With `load` the links' load so far (at
    full demand) and u = load/capacity, job j is priced with

    - w_edge = d_j / c(e) · exp(η·u(e)) per copy (η = `GREEDY_ETA`),
    - alpha(v) = exp(η·g(v)/G(v)) / G(v) per replicating switch, where g(v) is the
      groups used so far; infinite when the table is full, 0 when unlimited,
    - gamma(v) likewise for the entry table,

    and three candidates are compared: the cheapest structure under these prices
    (`Pricer.price`, exact on Clos), the `spt` fallback structure under the current
    tables, and pure unicast. The job takes the candidate that gives the smallest
    maximum link utilisation after adding it; ties go to the lower price, then to
    the earlier candidate. Every candidate respects the tables, so no table is
    ever exceeded. On a Clos, where the priced structure is the cheapest of a
    family that holds the other two, they are only built when the priced one
    raises the maximum utilisation (otherwise neither can score lower; up to
    floating-point rounding of equal prices, where the earlier code could pick
    the spt structure by a last-digit difference).

    `placed` are jobs already placed on their structures (incremental admission,
    `admission.place`): their load and table slots count from the start, and
    they are not moved; the structures returned are those of `jobs`.
    `occupied`, instead of `placed`: what they hold, counted already (an
    admission into a plan of 5,000 jobs counted them again in about 15 ms).
    """
    if placed and occupied is not None:
        raise ValueError("greedy: give the placed jobs or their occupancy, not both")
    pricer = Pricer(net, jobs)
    usage = _TableUsage(net)
    cap = net.capacity
    if occupied is None:
        usage.add_all([s for _, s in placed])
        load = demand_load(net, tuple(job for job, _ in placed), [s for _, s in placed])
    else:
        usage.groups += occupied.groups
        usage.entries += occupied.entries
        load = np.array(occupied.load, dtype=float)  # a copy: greedy adds to it
    chosen: list[Structure | None] = [None] * len(jobs)
    order = sorted(range(len(jobs)), key=lambda j: -jobs[j].demand * len(jobs[j].workers))
    # utilisation, its congestion factor and its maximum, updated on the edges a
    # placed job loads (elementwise, the values of recomputing them on every edge)
    util = load / cap
    factor = np.exp(np.minimum(eta * util, 50.0))
    top = float(np.max(util)) if len(util) else 0.0
    al, ga = usage.scarcity(eta)
    for j in order:
        job = jobs[j]
        d = job.demand
        w = pricer.edge_prices(d, cap, factor, divide=True)
        # the maximum utilisation after adding s: its edges only grow, so it is the
        # larger of today's maximum and the maximum over s's edges (an edge appears
        # once in s.copies)
        def peak_of(s: Structure) -> float:
            if not s.copies:
                return top
            e = s.edge_array
            return max(top, float(np.max((load[e] + d * s.copy_array) / cap[e])))

        priced = pricer.price(j, w, al, ga).structure
        if priced is not None and pricer.exact and peak_of(priced) <= top:
            # on a Clos the priced structure is the cheapest of the family, which holds
            # the other two candidates; when it leaves the maximum as it is, neither can
            # score lower (their peak is at least today's maximum, their price at least
            # its), so they are not built
            best = priced
        else:
            candidates: list[Structure] = [] if priced is None else [priced]
            candidates.append(_spt_fallback(net, pricer, j, usage))
            candidates.append(unicast_structure(net, *net.job_nodes(job)))
            best = min(candidates, key=lambda s: (peak_of(s), structure_cost(s, w, al, ga)))
        if best.copies:
            e = best.edge_array
            np.add.at(load, e, d * best.copy_array)
            util[e] = load[e] / cap[e]
            factor[e] = np.exp(np.minimum(eta * util[e], 50.0))
            top = max(top, float(np.max(util[e])))
        usage.add(best)
        usage.rescore((al, ga), best, eta)
        chosen[j] = best
    return [s for s in chosen if s is not None]
