"""A selection of one structure per job, with table repair and local search.

`Selection` keeps the link utilisation (load at full demand over capacity) and
the table usage of the current choice up to date as jobs change structure, so
that a candidate move is evaluated in one pass over the edges. Moves are compared
by (maximum utilisation, sum of squared utilisations): the first is 1/λ, the
second breaks ties between bottlenecks so that local search keeps making progress.
"""

from __future__ import annotations

import math

import numpy as np

from controller.algorithm.model import Job, Structure
from controller.algorithm.network import Network
from controller.algorithm.pricing import EdgePrices, Pricer
from controller.algorithm.rates import max_sum_rates
from controller.algorithm.structures import structure_cost

MAX_LOCAL_MOVES_PER_JOB = 3
REL = 1e-12
#: λ within this relative distance of an upper bound on λ meets the bound
BOUND_MET = 1e-9


class Selection:
    """One structure per job (an index into its column pool) and the loads it causes."""

    def __init__(self, net: Network, jobs: tuple[Job, ...], pools: list[list[Structure]], pick: list[int]) -> None:
        self.net = net
        self.jobs = jobs
        self.pools = pools
        self.cur: list[Structure] = [pools[j][i] for j, i in enumerate(pick)]
        self.d = np.array([j.demand for j in jobs], dtype=float)
        self.inv_cap = 1.0 / net.capacity
        self.util = np.zeros(net.n_edges)
        self.groups = np.zeros(net.n_nodes, dtype=np.int64)
        self.entries = np.zeros(net.n_nodes, dtype=np.int64)
        self._key: tuple[float, float] | None = None
        self._argmax = 0
        # arrays that depend only on the current loads and tables, reused until a move
        self._cache: dict[object, np.ndarray] = {}
        self._add_all()

    def _add_all(self) -> None:
        """`_apply(j, cur[j], +1)` for every job, in one pass: the same products,
        accumulated per edge in job order (bincount adds in input order)."""
        cur = self.cur
        with_copies = [j for j, s in enumerate(cur) if s.copies]
        if with_copies:
            edges = np.concatenate([cur[j].edge_array for j in with_copies])
            counts = np.concatenate([cur[j].copy_array for j in with_copies])
            d = np.repeat(self.d[with_copies], [len(cur[j].copies) for j in with_copies])
            self.util += np.bincount(edges, weights=d * counts * self.inv_cap[edges], minlength=len(self.util))
        n = len(self.groups)
        groups = [v for s in cur for v in s.groups]
        entries = [v for s in cur for v in s.entries]
        self.groups += np.bincount(np.array(groups, dtype=np.int64), minlength=n)
        self.entries += np.bincount(np.array(entries, dtype=np.int64), minlength=n)
        self._key = None
        self._cache.clear()

    def _apply(self, j: int, s: Structure, sign: int) -> None:
        if s.copies:
            np.add.at(self.util, s.edge_array, sign * self.d[j] * s.copy_array * self.inv_cap[s.edge_array])
        for v in s.groups:
            self.groups[v] += sign
        for v in s.entries:
            self.entries[v] += sign
        self._key = None
        self._cache.clear()

    def structures(self) -> list[Structure]:
        return list(self.cur)

    def key(self) -> tuple[float, float]:
        """(max utilisation, Σ utilisation²) of the current selection."""
        if self._key is None:
            u = self.util
            self._argmax = int(np.argmax(u)) if len(u) else 0
            self._key = (float(u[self._argmax]) if len(u) else 0.0, float(np.dot(u, u)))
        return self._key

    def bottleneck(self) -> int:
        self.key()
        return self._argmax

    def lam(self) -> float:
        m = self.key()[0]
        return 1.0 if m <= 1.0 else 1.0 / m

    def fits(self, j: int, s: Structure) -> bool:
        """Would job j on structure s keep every table within capacity?"""
        old = self.cur[j]
        net = self.net
        for v in s.groups:
            if self.groups[v] - (v in old.groups) + 1 > net.group_cap[v]:
                return False
        for v in s.entries:
            if self.entries[v] - (v in old.entries) + 1 > net.entry_cap[v]:
                return False
        return True

    def _delta(self, j: int, s: Structure):
        """Edges whose utilisation changes if job j moves to s, before and after."""
        old = self.cur[j]
        oe, se = old.edge_array, s.edge_array
        # the edges of either structure, sorted (an edge appears once in a structure's copies)
        edges = np.sort(np.concatenate([oe, se]))
        first = np.empty(len(edges), dtype=bool)
        first[:1] = True
        np.not_equal(edges[1:], edges[:-1], out=first[1:])
        edges = edges[first]
        # d_j / c(e) on the structures' edges only (the same products as on every edge);
        # on an edge of both, -old + new
        d, inv_cap = self.d[j], self.inv_cap
        change = np.zeros(len(edges))
        change[edges.searchsorted(oe)] = -old.copy_array * (d * inv_cap[oe])
        change[edges.searchsorted(se)] += s.copy_array * (d * inv_cap[se])
        before = self.util[edges]
        return edges, change, before, before + change

    def _key_after(self, edges, change, before, after) -> tuple[float, float, int]:
        cur_max, cur_sq = self.key()
        sq = cur_sq + float(np.dot(after, after) - np.dot(before, before))
        top = int(np.argmax(after))
        new_max, arg = (float(after[top]), int(edges[top])) if after[top] > cur_max else (cur_max, self._argmax)
        pos = np.searchsorted(edges, self._argmax)
        if pos < len(edges) and edges[pos] == self._argmax and change[pos] < 0:
            # the bottleneck may drop: find the new maximum in place, without a copy
            self.util[edges] = after
            arg = int(np.argmax(self.util))
            new_max = float(self.util[arg])
            self.util[edges] = before
        return new_max, sq, arg

    def key_if(self, j: int, s: Structure) -> tuple[float, float]:
        """(max utilisation, Σ utilisation²) if job j moved to s; touches only its edges."""
        if not self.cur[j].copies and not s.copies:
            return self.key()
        new_max, sq, _ = self._key_after(*self._delta(j, s))
        return new_max, sq

    def move(self, j: int, s: Structure) -> None:
        old = self.cur[j]
        if old.copies or s.copies:
            edges, change, before, after = self._delta(j, s)
            new_max, sq, arg = self._key_after(edges, change, before, after)
            self.util[edges] = after
            self._key, self._argmax = (new_max, sq), arg
        for v in old.groups:
            self.groups[v] -= 1
        for v in old.entries:
            self.entries[v] -= 1
        for v in s.groups:
            self.groups[v] += 1
        for v in s.entries:
            self.entries[v] += 1
        self.cur[j] = s
        self._cache.clear()
        if s not in self.pools[j]:
            self.pools[j].append(s)

    def saturated_prices(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Node prices that forbid tables job j cannot take one more entry of."""
        old = self.cur[j]
        net = self.net
        full = self._cache.get("full")
        if full is None:
            # with every job in place: the tables one more entry would overflow
            full = self._cache["full"] = (
                np.where(self.groups + 1 > net.group_cap, math.inf, 0.0),
                np.where(self.entries + 1 > net.entry_cap, math.inf, 0.0),
            )
        alpha, gamma = full[0].copy(), full[1].copy()
        # job j's own entries are freed by its move
        for v in old.groups:
            alpha[v] = math.inf if self.groups[v] > net.group_cap[v] else 0.0
        for v in old.entries:
            gamma[v] = math.inf if self.entries[v] > net.entry_cap[v] else 0.0
        return alpha, gamma

    def congestion_base(self, power: float) -> np.ndarray:
        """1e-3 + (u / max u)^power per edge, for `_congestion_prices`."""
        base = self._cache.get(("congestion", power))
        if base is None:
            u = self.util
            top = max(float(u.max(initial=0.0)), 1e-12)
            base = self._cache[("congestion", power)] = 1e-3 + (u / top) ** power
        return base


def _congestion_prices(sel: Selection, pricer: Pricer, j: int, power: float) -> EdgePrices | np.ndarray:
    """Edge prices for job j that grow steeply with utilisation (d_j / c(e) · base(e))."""
    return pricer.edge_prices(float(sel.d[j]), sel.inv_cap, sel.congestion_base(power))


def repair(sel: Selection, pricer: Pricer) -> None:
    """Bring every switch table within capacity, moving the jobs that lose least."""
    net = sel.net
    while True:
        over_g = np.nonzero(sel.groups > net.group_cap)[0]
        over_f = np.nonzero(sel.entries > net.entry_cap)[0]
        if len(over_g):
            v, table = int(over_g[0]), "groups"
        elif len(over_f):
            v, table = int(over_f[0]), "entries"
        else:
            return
        best = None
        for j, s in enumerate(sel.cur):
            if v not in getattr(s, table):
                continue
            for alt in sel.pools[j]:
                if v in getattr(alt, table) or not sel.fits(j, alt):
                    continue
                k = sel.key_if(j, alt)
                if best is None or k < best[0]:
                    best = (k, j, alt)
        if best is None:  # cannot happen: the unicast column is in every pool
            raise RuntimeError(f"no way to free a table entry at {net.topo.name(v)}")
        _, j, alt = best
        alpha, gamma = sel.saturated_prices(j)
        if table == "groups":
            alpha[v] = math.inf
        else:
            gamma[v] = math.inf
        priced = pricer.price(j, _congestion_prices(sel, pricer, j, 4.0), alpha, gamma).structure
        if priced is not None and sel.fits(j, priced) and sel.key_if(j, priced) < best[0]:
            alt = priced
        sel.move(j, alt)


def local_search(sel: Selection, pricer: Pricer, objective: str, bound: float = math.inf) -> None:
    """Move jobs off the bottleneck while (max utilisation, Σ utilisation²) decreases,
    then polish. With `bound` (an upper bound on λ, the LP's) met already, no move
    can raise λ: only the polish runs."""
    if objective == "max-sum":
        return
    at_bound = sel.lam() >= bound * (1 - BOUND_MET)
    budget = 0 if at_bound else MAX_LOCAL_MOVES_PER_JOB * len(sel.jobs)
    edge_sets = {}
    for _ in range(budget):
        cur_key = sel.key()
        if cur_key[0] <= 0:
            return
        e_star = sel.bottleneck()
        best = None
        for j, s in enumerate(sel.cur):
            es = edge_sets.get(id(s))
            if es is None:
                es = edge_sets[id(s)] = set(s.edge_array.tolist())
            if e_star not in es:
                continue
            alpha, gamma = sel.saturated_prices(j)
            priced = pricer.price(j, _congestion_prices(sel, pricer, j, 8.0), alpha, gamma).structure
            options = list(sel.pools[j])
            if priced is not None and priced not in options:
                options.append(priced)
            for alt in options:
                if alt is s or not sel.fits(j, alt):
                    continue
                k = sel.key_if(j, alt)
                if best is None or k < best[0]:
                    best = (k, j, alt)
        if best is None or not _improves(best[0], cur_key):
            break
        sel.move(best[1], best[2])
    _polish(sel, pricer)


def _improves(new: tuple[float, float], cur: tuple[float, float]) -> bool:
    return new[0] < cur[0] * (1 - REL) or (new[0] <= cur[0] * (1 + REL) and new[1] < cur[1] * (1 - REL))


def _polish(sel: Selection, pricer: Pricer) -> None:
    """One sweep over all jobs: keep λ, spread load (lower Σ utilisation²).

    The bottleneck is often a host link no structure avoids; spreading the rest of
    the load is what lets max-min filling give the other jobs more.
    """
    for j in range(len(sel.jobs)):
        cur_key = sel.key()
        alpha, gamma = sel.saturated_prices(j)
        w = _congestion_prices(sel, pricer, j, 1.0)
        options = list(sel.pools[j])
        res = pricer.price(j, w, alpha, gamma, want=False)
        # build the priced structure only if it beats the current one at these prices
        if res.cost < structure_cost(sel.cur[j], w, alpha, gamma) * (1 - 1e-9):
            priced = pricer.realise(j, res, w, alpha, gamma)
            if priced is not None and priced not in options:
                options.append(priced)
        best = None
        for alt in options:
            if alt is sel.cur[j] or not sel.fits(j, alt):
                continue
            k = sel.key_if(j, alt)
            if best is None or k < best[0]:
                best = (k, alt)
        if best is not None and _improves(best[0], cur_key):
            sel.move(j, best[1])


def objective_value(sel: Selection, objective: str) -> float:
    if objective == "max-sum":
        rates = max_sum_rates(sel.net, sel.jobs, sel.structures())
        return float(np.dot(rates, [j.weight for j in sel.jobs]))
    return sel.lam()
