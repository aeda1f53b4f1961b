"""The traffic stage: with every job's rate held, deliver with the fewest link crossings.

`lp_rounding` maximises λ and then aggregate throughput; among the many plans that
reach them (λ is usually set by host links no tree relieves) its polish keeps one
that spreads load, not one that carries little. This stage runs last. It moves
jobs, one at a time, to candidate structures with fewer copies (fewer link
crossings) wherever every link still carries the job at its current rate and
every switch table keeps within its budget; then the max-min fill raises rates
into whatever the moves freed (rates are never lowered). Since a move only ever
lowers its job's copy count, total traffic (Σ copies, and Σ rate·copies at the
held rates) never rises, and λ and every rate stay at least where they were.

Pure and deterministic: the candidates are tried in a fixed order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.algorithm.model import Job, Structure
from controller.algorithm.network import Network
from controller.algorithm.pricing import Pricer
from controller.algorithm.rates import copy_matrix, progressive_fill

#: Moves are judged at the held rates; a link that gains load must keep this
#: relative headroom, so that float rounding never pushes it over capacity.
HEADROOM = 1e-9
#: Passes over the jobs: a move frees capacity that may let an earlier job move.
MAX_PASSES = 3
#: Swaps tried per job and pass (each scans the holders of one full table slot).
SWAP_TRIES = 2
#: The pricing weight of a copy on a link without room for it: any structure that
#: avoids such links is cheaper.
BLOCKED = 1e6


def copies_of(s: Structure) -> int:
    """Link crossings of one unit of the job's stream (Σ_e m(e))."""
    return int(s.copy_array.sum()) if s.copies else 0


def reduce_traffic(
    net: Network,
    jobs: tuple[Job, ...],
    structures: Sequence[Structure],
    rates: np.ndarray,
    pools: Sequence[Sequence[Structure]],
    pricer: Pricer | None = None,
) -> tuple[list[Structure], np.ndarray]:
    """Structures with no more copies in total, and rates no lower per job.

    `pools[j]` are job j's alternative structures (any order, repeats allowed).
    A job moves to a candidate with fewer copies when it fits at its held rate;
    where the candidate needs a table slot that is full, a job holding that slot
    may give it up for one of its own candidates if the pair's copies still
    drop (a swap). With a `pricer`, the jobs still above their fewest-copy
    candidate then ask it for the fewest-copy structure that avoids full links
    and tables (`_priced_moves`). Returns the new structures and their rates: the held `rates`
    raised by the max-min fill (`raise_rates`).
    """
    r = np.asarray(rates, dtype=float)
    if not structures:
        return list(structures), r
    st = _State(net, list(structures), r, pools)
    if not any(st.better(j) for j in range(len(st.cur))):
        return st.cur, r
    moved = False
    for _ in range(MAX_PASSES):
        # the largest possible saving (at the held rate) first; ties in job order
        order = sorted(
            (j for j in range(len(st.cur)) if st.better(j)),
            key=lambda j: (-r[j] * (st.n[j] - st.better(j)[0][0]), j),
        )
        progress = False
        for j in order:
            if st.improve(j):
                progress = moved = True
        if not progress:
            break
    if pricer is not None:
        moved |= _priced_moves(st, pricer)
    if not moved:
        return st.cur, r
    return st.cur, raise_rates(net, jobs, st.cur, r)


def _priced_moves(st: _State, pricer: Pricer) -> bool:
    """For every job above its fewest-copy candidate (that one is blocked), price one
    unit per copy, `BLOCKED` per copy on a link without room for one at the job's
    rate, and forbid full tables: the cheapest structure in the family is then
    (nearly: a link the job crosses may not take more copies than now) the one
    with the fewest copies that fits. Moves where it saves copies."""
    net = st.net
    moved = False
    full: tuple[np.ndarray, np.ndarray] | None = None  # the full tables, until a move
    for j in range(len(st.cur)):
        if st.n[j] <= st.options[j][0][0]:
            continue
        old = st.cur[j]
        # a link is open to the job if it has room for one more copy at its rate or
        # the job already crosses it (as many copies as now always fit)
        w = np.where(st.limit - st.load >= st.r[j], 1.0, BLOCKED)
        w[old.edge_array] = 1.0
        if full is None:
            full = (
                np.where(np.array(st.groups) >= net.group_cap, np.inf, 0.0),
                np.where(np.array(st.entries) >= net.entry_cap, np.inf, 0.0),
            )
        alpha, gamma = full[0].copy(), full[1].copy()
        for v in old.groups:  # the job's own slots are free to it
            alpha[v] = np.inf if st.groups[v] - 1 >= st.group_cap[v] else 0.0
        for v in old.entries:
            gamma[v] = np.inf if st.entries[v] - 1 >= st.entry_cap[v] else 0.0
        # the cost alone first (cheap): build the structure only if it saves copies
        res = pricer.price(j, w, alpha, gamma, want=False)
        if not res.cost < st.n[j] - 0.5:
            continue
        s = pricer.realise(j, res, w, alpha, gamma)
        if s is None or copies_of(s) >= st.n[j] or any(s.key == t.key for _, t in st.options[j]):
            continue
        st.add_option(j, s)
        if st.improve(j):
            moved = True
            full = None
    return moved


class _State:
    """The current structures, their link loads at the held rates and their table use."""

    def __init__(
        self, net: Network, cur: list[Structure], r: np.ndarray, pools: Sequence[Sequence[Structure]]
    ) -> None:
        self.net = net
        self.cur = cur
        self.r = r
        self.n = [copies_of(s) for s in cur]
        self.limit = net.capacity * (1 - HEADROOM)
        self.load = copy_matrix(net, cur) @ r
        # table use and budgets as lists: the checks below touch a few switches each
        self.groups = [0] * net.n_nodes
        self.entries = [0] * net.n_nodes
        self.group_cap = net.group_cap.tolist()
        self.entry_cap = net.entry_cap.tolist()
        # the jobs that hold a group (entry) slot at each switch
        self.holders: dict[str, dict[int, set[int]]] = {"groups": {}, "entries": {}}
        for j, s in enumerate(cur):
            self._take(j, s, +1)
        self.scratch = np.zeros(net.n_edges)
        # per job, its distinct candidates by copies (stable), the current one included,
        # with their edges and copies concatenated so that one pass checks them all
        self.options: list[list[tuple[int, Structure]]] = []
        self._cat: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None] = []
        for j, pool in enumerate(pools):
            seen: set = set()
            opts = []
            for s in (cur[j], *pool):
                if s.key not in seen:
                    seen.add(s.key)
                    opts.append((copies_of(s), s))
            opts.sort(key=lambda t: t[0])
            self.options.append(opts)
            self._cat.append(None)

    def add_option(self, j: int, s: Structure) -> None:
        """One more candidate for job j."""
        self.options[j].append((copies_of(s), s))
        self.options[j].sort(key=lambda t: t[0])
        self._cat[j] = None

    def _take(self, j: int, s: Structure, sign: int) -> None:
        for table, nodes, used in (("groups", s.groups, self.groups), ("entries", s.entries, self.entries)):
            held = self.holders[table]
            for v in nodes:
                used[v] += sign
                if sign > 0:
                    held.setdefault(v, set()).add(j)
                else:
                    held[v].discard(j)

    def better(self, j: int) -> list[tuple[int, Structure]]:
        """Job j's candidates with fewer copies than its current structure, fewest first."""
        n = self.n[j]
        return [t for t in self.options[j] if t[0] < n]

    def link_ok(self, j: int) -> np.ndarray:
        """Per candidate of job j: does every link have room for it at j's rate?"""
        cat = self._cat[j]
        if cat is None:
            structs = [s for _, s in self.options[j]]
            edges = np.concatenate([s.edge_array for s in structs])
            counts = np.concatenate([s.copy_array for s in structs])
            seg = np.repeat(np.arange(len(structs)), [len(s.copies) for s in structs])
            cat = self._cat[j] = (edges, counts, seg)
        edges, counts, seg = cat
        old = self.cur[j]
        self.scratch[old.edge_array] = old.copy_array
        grow = counts - self.scratch[edges]
        self.scratch[old.edge_array] = 0.0
        bad = (grow > 0) & (self.load[edges] + self.r[j] * grow > self.limit[edges])
        return np.bincount(seg, weights=bad, minlength=len(self.options[j])) == 0

    def full_slots(self, j: int, alt: Structure) -> list[tuple[int, str]]:
        """The full table slots (switch, "groups" or "entries") job j's move to `alt` needs."""
        old = self.cur[j]
        used, cap = self.groups, self.group_cap
        out = [(v, "groups") for v in alt.groups if used[v] >= cap[v] and v not in old.groups]
        used, cap = self.entries, self.entry_cap
        out += [(v, "entries") for v in alt.entries if used[v] >= cap[v] and v not in old.entries]
        return out

    def improve(self, j: int) -> bool:
        """Move job j to its candidate with the fewest copies that fits (directly or
        by a swap for one full table slot); False if none does."""
        ok = self.link_ok(j)
        swaps = SWAP_TRIES
        for i, (n_alt, alt) in enumerate(self.options[j]):
            if n_alt >= self.n[j]:
                break
            if not ok[i]:
                continue
            slots = self.full_slots(j, alt)
            if not slots:
                self.move(j, alt)
                return True
            if swaps > 0 and len(slots) == 1:
                swaps -= 1
                if self.swap(j, alt, slots[0], self.n[j] - n_alt):
                    return True
        return False

    def move(self, j: int, alt: Structure) -> None:
        old = self.cur[j]
        rj = self.r[j]
        if old.copies:
            self.load[old.edge_array] -= rj * old.copy_array
        if alt.copies:
            self.load[alt.edge_array] += rj * alt.copy_array
        self._take(j, old, -1)
        self._take(j, alt, +1)
        self.cur[j] = alt
        self.n[j] = copies_of(alt)

    def swap(self, j: int, alt: Structure, slot: tuple[int, str], saving: int) -> bool:
        """Free `slot` for job j's move to `alt`: the holder whose own move costs the
        fewest extra copies (fewer than `saving`) gives it up. False if none can.

        The holder may take table slots job j gives up by its move (so j's slots
        count as free while holders are chosen); the pair is undone unless both
        moves keep every link and table within budget.
        """
        v, table = slot
        old = self.cur[j]
        self._take(j, old, -1)
        best: tuple[int, int, Structure] | None = None
        for b in sorted(self.holders[table].get(v, ())):
            if b == j:
                continue
            ok = None
            for i, (n_b, alt_b) in enumerate(self.options[b]):
                extra = n_b - self.n[b]
                if extra >= saving or (best is not None and extra >= best[0]):
                    break
                if alt_b is self.cur[b] or v in getattr(alt_b, table) or self.full_slots(b, alt_b):
                    continue
                if ok is None:
                    ok = self.link_ok(b)
                if ok[i]:
                    best = (extra, b, alt_b)
                    break
        self._take(j, old, +1)
        if best is None:
            return False
        _, b, alt_b = best
        old_b = self.cur[b]
        self.move(b, alt_b)
        i = next(i for i, (_, s) in enumerate(self.options[j]) if s is alt)
        if self.link_ok(j)[i] and not self.full_slots(j, alt):
            self.move(j, alt)
            if self._within_tables(alt_b):
                return True
            self.move(j, old)
        self.move(b, old_b)  # the pair does not fit: undo
        return False

    def _within_tables(self, s: Structure) -> bool:
        """Are the tables of `s`'s switches within budget?"""
        return all(self.groups[v] <= self.group_cap[v] for v in s.groups) and all(
            self.entries[v] <= self.entry_cap[v] for v in s.entries
        )


def raise_rates(net: Network, jobs: tuple[Job, ...], structures: Sequence[Structure], start: np.ndarray) -> np.ndarray:
    """Max-min fair progressive filling that starts from `start` (never below it).

    `rates.progressive_fill`, as `rates.max_min_fill` uses it, but from arbitrary
    rates; float excess is taken from the increments only, so the result is ≥
    `start` exactly.
    """
    d = np.array([j.demand for j in jobs], dtype=float)
    A = copy_matrix(net, list(structures))
    cap = net.capacity
    start = np.asarray(start, dtype=float)
    r = progressive_fill(A, d, cap, start)
    r = np.maximum(np.minimum(r, d), start)
    # take any float excess out of the increments, never out of `start`
    extra = r - start
    over = A @ r - cap
    bad = over > 0
    if bad.any() and extra.any():
        grown = A @ extra
        scale = np.ones_like(over)
        hit = bad & (grown > 0)
        scale[hit] = np.clip(1.0 - over[hit] / grown[hit], 0.0, 1.0)
        r = start + extra * float(scale.min())
    return r
