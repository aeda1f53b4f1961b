"""The headroom stage: with every rate held, structures that let each job go faster alone.

A job with phase-aware rates (`phases`) broadcasts in bursts, and while the other
jobs are idle it is raised into the capacity they leave, up to what its own
structure allows: its *alone rate*, min over its links of capacity / copies (two
copies of its stream on one link halve it), at most its demand. Max-concurrent
planning does not see it: among plans of the same λ and the same rates, one may
send two unicast copies of a job over the same narrow core link while another
structure, or another split of the table slots between jobs, would carry the job
at the full rate of that link.

This stage runs after the traffic stage. It picks one structure per job from
the job's candidates (its current one, its columns, the baselines', and its
whole structure family where that is small, else structures priced for it),
holding every job's rate: every link carries the jobs at their held rates within
its capacity and every switch table keeps within its budget, so λ and every rate
stay where they were (the max-min fill then raises rates into what the moves
freed, as the traffic stage does). Among those plans it maximises the sum over
jobs of alone rate / the highest alone rate among the job's candidates, then
takes the fewest link crossings; no job's alone rate is lowered, but total
copies may rise. It is a small integer programme over the candidates (HiGHS,
bounded by a node limit, so the result is deterministic); where it would be
large (`MAX_JOBS`, `MAX_COLUMNS`) or finds nothing better the plan is unchanged.

Pure: the network, jobs, structures, rates and candidates in; structures and
rates out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from controller.algorithm import ilp
from controller.algorithm.model import Job, Structure
from controller.algorithm.network import Network
from controller.algorithm.pricing import Pricer
from controller.algorithm.rates import copy_matrix
from controller.algorithm.traffic import copies_of, raise_rates

#: Plans of more jobs skip the stage, and above this many candidate structures in
#: all it does not run either: its pricing and integer programme would cost more
#: than the plan's other stages.
MAX_JOBS = 16
MAX_COLUMNS = 8000
#: Per job and price variant, re-pricings after a structure whose bottleneck link
#: carries several of its copies (that link then priced out of reach).
ROUNDS = 3
#: The per-copy price of a link re-priced that way.
AVOID = 1e6
#: Up to this many structures in all, every job's whole family is a candidate.
ENUMERATE = 8000
#: Pseudo-random link prices per job and table price (`priced_candidates`).
VARIANTS = 3
#: Branch-and-bound nodes HiGHS may explore (deterministic, unlike a time limit).
NODE_LIMIT = 200
#: An alone rate counts as higher only above this relative margin.
REL = 1e-9
#: HiGHS' rows are checked to this relative tolerance; the plan it picks is then
#: checked exactly, up to float rounding (`FLOAT`: the same sums in another order).
TOLERANCE = 1e-9
FLOAT = 1e-12


def alone_rate(net: Network, job: Job, s: Structure) -> float:
    """The rate `s` allows job `job` on an otherwise empty network: min over its links
    of capacity / copies, at most the job's demand (the demand when `s` crosses no link)."""
    if not s.copies:
        return job.demand
    return float(min(job.demand, np.min(net.capacity[s.edge_array] / s.copy_array)))


def raise_headroom(
    net: Network,
    jobs: tuple[Job, ...],
    structures: Sequence[Structure],
    rates: np.ndarray,
    pools: Sequence[Sequence[Structure]],
    pricer: Pricer | None = None,
) -> tuple[list[Structure], np.ndarray]:
    """Structures with higher alone rates (none lower), every rate held;
    and the rates, raised by the max-min fill where the moves freed capacity.

    `pools[j]` are job j's alternative structures (any order, repeats allowed). A
    job moves only to a candidate with a higher alone rate; the jobs that cannot
    gain keep their structure but may move to free a table slot or link capacity
    for one that can, to a candidate with an alone rate no lower than their own.

    With a `pricer`, every job's candidates also include its whole structure family
    where that is small (a Clos fabric, at most `ENUMERATE` structures in all:
    `ilp.job_structures`), else structures priced for it (`priced_candidates`).
    Plans of more than `MAX_JOBS` jobs are returned as they are.
    """
    cur = list(structures)
    r = np.asarray(rates, dtype=float)
    if not cur or len(cur) > MAX_JOBS:
        return cur, r
    alone_now = [alone_rate(net, job, s) for job, s in zip(jobs, cur)]
    if all(a >= job.demand for a, job in zip(alone_now, jobs)):
        return cur, r  # every job at its demand alone already: no candidate can do better
    if pricer is not None:
        family = _small_family(net, pricer)
        if family is not None:
            pools = [[*pool, *fam] for pool, fam in zip(pools, family)]
        else:
            pools = [[*pool, *priced_candidates(net, cur, j, pricer, r)] for j, pool in enumerate(pools)]
    options: list[list[tuple[Structure, float]]] = []  # per job, (candidate, its alone rate)
    gains = False
    for j, (job, s) in enumerate(zip(jobs, cur)):
        seen = {s.key}
        opts = [(s, alone_now[j])]
        for t in pools[j]:
            if t.key not in seen:
                seen.add(t.key)
                a = alone_rate(net, job, t)
                if a >= alone_now[j] * (1 - REL):
                    opts.append((t, a))
        gains |= any(a > alone_now[j] * (1 + REL) for _, a in opts)
        options.append(opts)
    if not gains or sum(len(o) for o in options) > MAX_COLUMNS:
        return cur, r
    chosen = _choose(net, jobs, r, options, alone_now)
    if chosen is None or all(c is s for c, s in zip(chosen, cur)):
        return cur, r
    return chosen, raise_rates(net, jobs, chosen, r)


def _small_family(net: Network, pricer: Pricer) -> list[list[Structure]] | None:
    """Every job's structure family (`ilp.job_structures`) if the fabric is a
    recognised Clos and the families hold at most `ENUMERATE` structures in all."""
    if net.fabric is None:
        return None
    total = 0
    for j in range(len(pricer.jobs)):
        total += ilp.count_structures(net, pricer, j)
        if total > ENUMERATE:
            return None
    return [ilp.job_structures(net, pricer, j) for j in range(len(pricer.jobs))]


def priced_candidates(net: Network, cur: Sequence[Structure], j: int, pricer: Pricer, r: np.ndarray) -> list[Structure]:
    """Job j's structures priced at 1 / capacity per copy of a link (so a narrow link
    costs more), that price raised by the link's load at the held rates `r` (a
    full link costs double), and `VARIANTS` times at that price scaled by a
    pseudo-random factor in [1, 2) per link (seeded by j: equal-cost structures
    through other cores come up); each under three table prices: every table
    free (but those of capacity 0), the full ones forbidden (job j's own slots
    free), and the full ones and job j's own replicating switches forbidden (a
    structure that gives its group slots up to another job). After each
    structure whose bottleneck link carries two or more of its copies, that link
    is priced out of reach and the job priced again (`ROUNDS` times at most)."""
    zero_g = np.where(net.group_cap == 0, np.inf, 0.0)
    zero_f = np.where(net.entry_cap == 0, np.inf, 0.0)
    groups = np.bincount(np.array([v for s in cur for v in s.groups], dtype=np.int64), minlength=net.n_nodes)
    entries = np.bincount(np.array([v for s in cur for v in s.entries], dtype=np.int64), minlength=net.n_nodes)
    own_g = np.zeros(net.n_nodes, dtype=np.int64)
    own_g[list(cur[j].groups)] = 1
    own_f = np.zeros(net.n_nodes, dtype=np.int64)
    own_f[list(cur[j].entries)] = 1
    full_g = np.where(groups - own_g >= net.group_cap, np.inf, zero_g)
    full_f = np.where(entries - own_f >= net.entry_cap, np.inf, zero_f)
    give_up = full_g.copy()
    give_up[own_g > 0] = np.inf
    unit = 1.0 / net.capacity
    load = copy_matrix(net, list(cur)) @ r
    rng = np.random.default_rng(j)
    prices = [unit, unit * (1 + load / net.capacity)]
    prices += [unit * rng.uniform(1.0, 2.0, net.n_edges) for _ in range(VARIANTS)]
    out: list[Structure] = []
    seen: set = set()
    for alpha, gamma in ((zero_g, zero_f), (full_g, full_f), (give_up, full_f)):
        for w in prices:
            for _ in range(ROUNDS):
                s = pricer.price(j, w, alpha, gamma).structure
                if s is None:
                    break
                if s.key not in seen:
                    seen.add(s.key)
                    out.append(s)
                if not s.copies:
                    break
                ratio = net.capacity[s.edge_array] / s.copy_array
                narrow = ratio <= ratio.min() * (1 + REL)
                if not (s.copy_array[narrow] > 1).any():
                    break
                w = w.copy()
                w[s.edge_array[narrow]] = AVOID
    return out


def _choose(
    net: Network, jobs: tuple[Job, ...], r: np.ndarray, options: list[list[tuple[Structure, float]]],
    alone_now: list[float],
) -> list[Structure] | None:
    """One option per job (each option a structure and its alone rate; option 0 is
    the current structure) that keeps every link within capacity at the held rates
    `r` and every table within budget, with the highest Σ alone rate / the job's
    best alone rate among its options, then the fewest copies; None if HiGHS finds
    no better plan within its node limit."""
    cols = [(j, s) for j, opts in enumerate(options) for s, _ in opts]
    n = len(cols)
    alone = np.array([a for opts in options for _, a in opts])
    best = np.zeros(len(jobs))
    np.maximum.at(best, [j for j, _ in cols], alone)
    of = best[[j for j, _ in cols]]
    share = np.divide(alone, of, out=np.zeros(n), where=of > 0)  # 0 where a job has only 0-rate candidates
    copies = np.array([copies_of(s) for _, s in cols], dtype=float)
    # minimised: the shares' sum negated, and at most 1e-6 in all for copies (a
    # tie-break below any gain in alone rate that counts)
    cost = -share + 1e-6 * copies / max(1.0, copies.sum())
    # rows: one structure per job; every link at the held rates; every finite table
    limit = _link_limit(net, [opts[0][0] for opts in options], r)
    links = copy_matrix(net, [s for _, s in cols]).tocoo()
    held = np.array([r[j] for j, _ in cols])
    row = [np.array([j for j, _ in cols]), links.row + len(jobs)]
    col = [np.arange(n), links.col]
    val = [np.ones(n), links.data * held[links.col]]
    lower = [np.ones(len(jobs)), np.full(net.n_edges, -np.inf)]
    upper = [np.ones(len(jobs)), limit * (1 + TOLERANCE)]
    offset = len(jobs) + net.n_edges
    for which, cap in (("groups", net.group_cap), ("entries", net.entry_cap)):
        finite = np.flatnonzero(np.isfinite(cap))
        row_of = {int(v): offset + k for k, v in enumerate(finite)}
        pairs = [(row_of[v], i) for i, (_, s) in enumerate(cols) for v in getattr(s, which) if v in row_of]
        if pairs:
            row.append(np.array([p[0] for p in pairs]))
            col.append(np.array([p[1] for p in pairs]))
            val.append(np.ones(len(pairs)))
        lower.append(np.full(len(finite), -np.inf))
        upper.append(cap[finite].astype(float))
        offset += len(finite)
    A = coo_matrix((np.concatenate(val), (np.concatenate(row), np.concatenate(col))), shape=(offset, n)).tocsr()
    res = milp(cost, constraints=LinearConstraint(A, np.concatenate(lower), np.concatenate(upper)),
               integrality=np.ones(n), bounds=Bounds(0, 1), options={"node_limit": NODE_LIMIT})
    if res.x is None:
        return None
    picked: dict[int, Structure] = {}
    for i, (j, s) in enumerate(cols):
        if res.x[i] > 0.5 and j not in picked:
            picked[j] = s
    if len(picked) != len(jobs):
        return None
    out = [picked[j] for j in range(len(jobs))]
    return out if _better_and_within(net, jobs, r, out, alone_now, limit) else None


def _link_limit(net: Network, cur: list[Structure], r: np.ndarray) -> np.ndarray:
    """What each link may carry at the held rates: its capacity (the held rates may
    fill a link exactly, as the rate allocation does), or its load now (`cur`) if
    that is higher by float rounding."""
    now = copy_matrix(net, cur) @ r
    return np.maximum(net.capacity, now)


def _better_and_within(
    net: Network, jobs: tuple[Job, ...], r: np.ndarray, out: list[Structure], alone_now: list[float],
    limit: np.ndarray,
) -> bool:
    """Does `out` raise some job's alone rate, lower none, and keep every link (at the
    held rates `r`) and table within budget, exactly (HiGHS works to tolerances)?"""
    after = [alone_rate(net, job, s) for job, s in zip(jobs, out)]
    if any(a < b * (1 - REL) for a, b in zip(after, alone_now)):
        return False
    if not any(a > b * (1 + REL) for a, b in zip(after, alone_now)):
        return False
    if np.any(copy_matrix(net, out) @ r > limit * (1 + FLOAT)):
        return False
    for which, cap in (("groups", net.group_cap), ("entries", net.entry_cap)):
        used = np.bincount(np.array([v for s in out for v in getattr(s, which)], dtype=np.int64), minlength=net.n_nodes)
        if np.any(used > cap):
            return False
    return True
