"""The exact optimum over the structure family, as an integer program (small instances).

Every structure of every job is enumerated and one is chosen per job by a
mixed-integer program solved with HiGHS (`scipy.optimize.milp`).

Structures of job j (`job_structures`): for every Clos base tree of the job
(`baselines.clos_base_choices`: one per core, or per aggregation switch / spine
of the PS's pod for jobs that stay in it, or the same-rack tree) every rooted
subtree T' of it and, for every worker that is not a leaf of T', its copy from
its deepest ancestor in T' or from the PS — the family that
`structures.best_pruning` and `Pricer.price` optimise over — built with
`make_structure` and deduplicated by `Structure.key`, plus pure unicast.
Combinations that another one dominates (no more copies on any edge, no more
groups or entries) are not built: a node of T' other than the PS with no output,
a copy from the PS to a worker whose PS route crosses its ancestor v while v
replicates anyway, and a worker leaf cut and served from its parent (the same
as keeping it).

Model, after exact reductions (`_reduce`: zero-capacity tables, edges and tables
that can never bind, dominated structures):
- max-concurrent: binary x_jt with Σ_t x_jt = 1, Σ x_jt over the structures that
  replicate at v ≤ G(v), over those with an entry at v ≤ F(v), and
  Σ d_j·m_t(e)/c(e)·x_jt ≤ μ on every edge; minimise μ (≥ 1, since
  λ = min(1, 1/μ) does not see μ below 1). Among the optimal plans, a
  coordinate descent then lowers the total load (`_tie_break`), which gives the
  max-min filling more to hand out.
- max-sum: rate variables f_jt = d_j·y_jt with y_jt ≤ x_jt (tightened to what the
  structure alone can carry) and link rows Σ m_t(e)·f_jt ≤ c(e); maximise
  Σ weight_j·f_jt.

`Solution.lp_bound` is the optimum of the LP relaxation of that model:
min(1, 1/μ_LP) for max-concurrent, the bound on Σ weight·rate (bit/s) for
max-sum; an upper bound on the integer optimum. When the best baseline plan (or
an LP-diving plan) already reaches it, that plan is optimal and the integer
program is skipped.

Limits (`PlanningError` beyond them): the topology must be a recognised Clos
fabric (fat-tree or leaf-spine), since on other graphs the family (every
arborescence) is not enumerable; at most `MAX_JOBS` = 40 jobs; at most
`MAX_STRUCTURES` = 64 000 structures over all jobs, counted before any is built
(before deduplication; every k=4 fat-tree instance with ≤ 8 jobs of ≤ 6 workers
fits); and HiGHS must prove optimality within `NODE_LIMIT` = 5 000
branch-and-bound nodes (deterministic) and `TIME_LIMIT_S` = 120 s.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import csr_matrix, hstack, identity, vstack

from controller.algorithm import baselines
from controller.algorithm.baselines import clos_base_choices
from controller.algorithm.model import Job, PlanningError, Solution, Structure
from controller.algorithm.network import Network
from controller.algorithm.pricing import Pricer
from controller.algorithm.rates import max_sum_rates
from controller.algorithm.structures import BaseTree, make_structure, unicast_structure

MAX_JOBS = 40
MAX_STRUCTURES = 64_000
MIP_REL_GAP = 1e-9
NODE_LIMIT = 5_000
TIME_LIMIT_S = 120.0


# -- enumeration -----------------------------------------------------------------------


def _below(base: BaseTree) -> dict[int, tuple[int, ...]]:
    """The workers (leaves) below every node of `base`."""
    children = base.children
    out: dict[int, tuple[int, ...]] = {}

    def walk(v: int) -> tuple[int, ...]:
        kids = children.get(v, ())
        out[v] = (v,) if not kids else tuple(w for c in kids for w in walk(c))
        return out[v]

    walk(base.root)
    return out


def count_subtrees(base: BaseTree) -> int:
    """Structures of the family on `base`, before dominance filtering (see `_subtrees`)."""
    children = base.children
    root = base.root
    below = _below(base)

    def inside(v: int) -> int:  # choices below v, given v in T'
        n = 1
        for c in children.get(v, ()):
            if c not in children:
                n *= 1 if v == root else 2  # worker leaf: kept, or a copy from the PS
            else:
                n *= inside(c) + (1 if v == root else 2 ** len(below[c]))
        return n if v == root else n - 1  # minus the dead end (no output at v)

    return inside(root)


def _subtrees(
    base: BaseTree, below: dict[int, tuple[int, ...]], through: set[tuple[int, int]], v: int
) -> list[tuple[tuple, tuple]]:
    """All (tree edges, unicast branches) of the subtree of `v`, given that v is in T'.

    Each child of v stays in T' or is cut; each worker of a cut child takes its copy
    from v or from the PS (a worker leaf kept is the same as a copy from v). Two
    kinds of combination are left out because another one dominates them (no more
    copies on any edge, no more groups or entries), so the optimum is unchanged:
    a node of T' other than the PS with no output, and a copy from the PS to a
    worker whose PS route crosses v (`through`) while v replicates anyway.
    """
    children = base.children
    root = base.root
    # per combination: tree edges, branches, outputs of v, PS copies through v
    combos: list[tuple[tuple, tuple, int, int]] = [((), (), 0, 0)]
    for c in children.get(v, ()):
        opts: list[tuple[tuple, tuple, int, int]]
        if c not in children:  # a worker leaf
            opts = [(((v, c),), (), 1, 0)]
            if v != root:
                opts.append(((), ((root, c),), 0, int((v, c) in through)))
        else:
            opts = [(((v, c),) + te, br, 1, 0) for te, br in _subtrees(base, below, through, c)]
            ws = below[c]
            if v == root:
                opts.append(((), tuple((root, w) for w in ws), len(ws), 0))
            else:
                for pick in itertools.product((True, False), repeat=len(ws)):
                    br = tuple((v if mine else root, w) for mine, w in zip(pick, ws))
                    n_ps = sum(1 for mine, w in zip(pick, ws) if not mine and (v, w) in through)
                    opts.append(((), br, sum(pick), n_ps))
        combos = [
            (t1 + t2, b1 + b2, o1 + o2, p1 + p2) for t1, b1, o1, p1 in combos for t2, b2, o2, p2 in opts
        ]
    if v == root:
        return [(te, br) for te, br, _, _ in combos]
    return [(te, br) for te, br, out, n_ps in combos if out >= 1 and not (out >= 2 and n_ps)]


def job_bases(net: Network, pricer: Pricer, j: int) -> list[BaseTree]:
    """The Clos base trees of job j (`baselines.clos_base_choices`)."""
    cj = pricer.clos_job(j)
    ps, workers = net.job_nodes(pricer.jobs[j])
    return [cj.base_tree(net, a0, core) for a0, core in clos_base_choices(net, ps, workers)]


def count_structures(net: Network, pricer: Pricer, j: int) -> int:
    """An upper bound on how many structures `job_structures` builds for job j."""
    return 1 + sum(count_subtrees(b) for b in job_bases(net, pricer, j))


def job_structures(net: Network, pricer: Pricer, j: int) -> list[Structure]:
    """The structures of job j's family on a Clos fabric, deduplicated by key.

    Pure unicast comes first, then the structures of each base tree in order;
    dominated combinations are left out (`_subtrees`).
    """
    ps, workers = net.job_nodes(pricer.jobs[j])
    uni = unicast_structure(net, ps, workers)
    out = [uni]
    seen = {uni.key}
    through = {(v, w) for w in workers for v in net.routing.path(ps, w)[1:-1]}
    for base in job_bases(net, pricer, j):
        below = _below(base)
        for tree, branches in _subtrees(base, below, through, base.root):
            key = (tuple(sorted(tree)), tuple(sorted(branches)))
            if key in seen:
                continue
            seen.add(key)
            out.append(make_structure(net, list(tree), list(branches)))
    return out


def enumerate_structures(net: Network, jobs: tuple[Job, ...]) -> list[list[Structure]]:
    """All structures of every job; raises PlanningError beyond the module's limits."""
    size = f"{len(net.topo.nodes)} nodes, {len(net.topo.links)} links, {len(jobs)} jobs"
    if net.fabric is None:
        raise PlanningError(
            "ilp needs a recognised Clos fabric (fat-tree or leaf-spine): on a general graph "
            f"the structure family is not enumerable (instance: {size})"
        )
    if len(jobs) > MAX_JOBS:
        raise PlanningError(f"ilp is limited to {MAX_JOBS} jobs; this instance has {len(jobs)} ({size})")
    pricer = Pricer(net, jobs)
    total = 0
    for j in range(len(jobs)):
        total += count_structures(net, pricer, j)
        if total > MAX_STRUCTURES:
            break
    if total > MAX_STRUCTURES:
        total = sum(count_structures(net, pricer, j) for j in range(len(jobs)))
        raise PlanningError(
            f"ilp is limited to {MAX_STRUCTURES} enumerated structures; this instance has "
            f"{total} ({size})"
        )
    return [job_structures(net, pricer, j) for j in range(len(jobs))]


# -- exact reductions ------------------------------------------------------------------------


@dataclass
class _Columns:
    """The integer program's columns after the exact reductions (see `_reduce`)."""

    structures: list[Structure]
    job_of: np.ndarray  # column -> job
    A_shared: csr_matrix  # shared relevant edges × columns: d·m/c
    peak: np.ndarray  # per column: see `_reduce` (max-concurrent: ≤ μ; max-sum: rate ≤ 1/peak)
    A_tab: csr_matrix  # binding tables × columns: 1 if the column uses the table
    b_tab: np.ndarray  # the tables' capacities
    util: np.ndarray  # per column: Σ_e d·m/c over all edges (for the tie-break)
    features: list[np.ndarray]  # per job: its columns' footprints (rows)
    shared: np.ndarray  # edge indices of A_shared's rows
    private: np.ndarray  # relevant edges used by one job only (max-concurrent)
    tables: list[tuple[str, int]]  # ("groups"/"entries", switch) of A_tab's rows
    theta: float  # max-concurrent: μ ≥ theta
    objective: str


def _load_matrix(net: Network, job: Job, structures: list[Structure]) -> csr_matrix:
    """Structures × edges: d·m(e)/c(e)."""
    rows, cols, vals = [], [], []
    for i, s in enumerate(structures):
        if s.copies:
            rows.append(np.full(len(s.copies), i))
            cols.append(s.edge_array)
            vals.append(job.demand * s.copy_array / net.capacity[s.edge_array])
    if not rows:
        return csr_matrix((len(structures), net.n_edges))
    return csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(len(structures), net.n_edges)
    )


def pareto(features: np.ndarray, order_key: np.ndarray | None = None) -> list[int]:
    """Indices (ascending) of the rows that no other row dominates (≤ everywhere).

    Of identical rows the one first in (row sum, `order_key`, index) order is kept.
    """
    n = len(features)
    if n <= 1:
        return list(range(n))
    key = np.zeros(n) if order_key is None else order_key
    order = np.lexsort((np.arange(n), key, features.sum(axis=1)))
    front = np.empty_like(features)
    kept: list[int] = []
    for i in order.tolist():
        f = features[i]
        if kept and bool(np.any(np.all(front[: len(kept)] <= f, axis=1))):
            continue
        front[len(kept)] = f
        kept.append(i)
    return sorted(kept)


def _feasible(net: Network, ss: list[Structure]) -> list[Structure]:
    """The structures that use no group or entry table of capacity 0."""
    return [
        s
        for s in ss
        if not any(net.group_cap[v] == 0 for v in s.groups) and not any(net.entry_cap[v] == 0 for v in s.entries)
    ]


def _chunks(L: csr_matrix, size: int = 2048):
    for start in range(0, L.shape[0], size):
        yield start, L[start : start + size].toarray()


def _within(loads: list[csr_matrix], ub: float) -> list[np.ndarray]:
    """Per job, the structures that can be in a plan of congestion ≤ ub.

    A structure is out when its own load plus the least load every other job must
    put on some edge exceeds ub. Two rounds (the least loads grow as structures go).
    """
    keep = [np.ones(L.shape[0], dtype=bool) for L in loads]
    limit = ub * (1 + 1e-9) + 1e-12
    for _ in range(2):
        least = [np.asarray(L[k].min(axis=0).todense()).ravel() if k.any() else np.zeros(L.shape[1]) for L, k in zip(loads, keep)]
        total = np.sum(least, axis=0)
        for j, L in enumerate(loads):
            others = total - least[j]
            for start, dense in _chunks(L):
                over = np.max(dense + others[None, :], axis=1) > limit
                keep[j][start : start + len(dense)] &= ~over
    return keep


def _reduce(
    net: Network,
    jobs: tuple[Job, ...],
    per_job: list[list[Structure]],
    loads: list[csr_matrix],
    objective: str,
    theta: float = 1.0,
) -> _Columns:
    """Exact reductions of the enumerated columns: neither objective's optimum changes.

    `loads[j]` is structures × edges, d·m/c, of `per_job[j]` (structures that use a
    table of capacity 0 must already be gone).

    - max-concurrent, with μ ≥ θ (θ ≥ 1 is a lower bound on the optimal μ, and
      λ = min(1, 1/μ) does not see μ below 1): an edge whose load can never exceed
      θ (Σ_j max_t d·m/c ≤ θ) never limits; the others are *relevant*. A relevant
      edge that only one job's structures use (*private*) limits that job alone:
      its structures are summarised by their peak load on such edges, max(θ, ·).
    - max-sum: a structure alone carries at most u_t = min(1, 1/max_e d·m/c) of its
      demand, so with y_t ≤ u_t·x_t the private edges never limit, and an edge
      with Σ_j max_t u_t·d·m/c ≤ 1 never does; the peak is max(1, max_e d·m/c).
    - A table that at most `capacity` jobs can use never binds.
    - Of the structures of a job, one whose footprint (loads on shared relevant
      edges, peak, use of binding tables) another one's footprint does not exceed
      is dominated and dropped (`pareto`): swapping it for its dominator breaks no
      constraint and lowers no rate. Among equal footprints the structure with the
      least total load is kept.
    """
    alone = [np.asarray(L.max(axis=1).todense()).ravel() if L.shape[0] else np.zeros(0) for L in loads]
    if objective == "max-concurrent":
        reach = np.vstack([np.asarray(L.max(axis=0).todense()).ravel() for L in loads])  # jobs × edges
        relevant = reach.sum(axis=0) > theta * (1 + 1e-12)
    else:
        u = [np.minimum(1.0, 1.0 / np.maximum(a, 1e-300)) for a in alone]
        reach = np.vstack(
            [np.asarray(L.multiply(uj[:, None]).max(axis=0).todense()).ravel() for L, uj in zip(loads, u)]
        )
        relevant = reach.sum(axis=0) > 1.0 + 1e-12
    users = (reach > 0).sum(axis=0)
    shared = np.flatnonzero(relevant & (users >= 2))
    private = np.flatnonzero(relevant & (users == 1)) if objective == "max-concurrent" else np.zeros(0, dtype=np.int64)
    tables: list[tuple[str, int]] = []
    caps: list[float] = []
    for attr, cap in (("groups", net.group_cap), ("entries", net.entry_cap)):
        count: dict[int, int] = {}
        for ss in per_job:
            for v in set().union(*(getattr(s, attr) for s in ss)) if ss else ():
                count[v] = count.get(v, 0) + 1
        for v in sorted(count):
            if count[v] > cap[v]:
                tables.append((attr, v))
                caps.append(float(cap[v]))
    kept_structures: list[Structure] = []
    job_of: list[int] = []
    shared_blocks, peaks, tab_blocks, utils, features = [], [], [], [], []
    for j, (ss, L) in enumerate(zip(per_job, loads)):
        Ls = L[:, shared].toarray()
        if objective == "max-concurrent":
            pk = np.asarray(L[:, private].max(axis=1).todense()).ravel() if len(private) else np.zeros(len(ss))
            pk = np.maximum(pk, theta)
        else:
            pk = np.maximum(alone[j], 1.0)
        tb = np.array([[v in getattr(s, attr) for attr, v in tables] for s in ss], dtype=float).reshape(len(ss), len(tables))
        feat = np.hstack([Ls, pk[:, None], tb])
        util = np.asarray(L.sum(axis=1)).ravel()
        keep = pareto(feat, util)
        kept_structures.extend(ss[i] for i in keep)
        job_of.extend([j] * len(keep))
        shared_blocks.append(Ls[keep])
        peaks.append(pk[keep])
        tab_blocks.append(tb[keep])
        utils.append(util[keep])
        features.append(feat[keep])
    return _Columns(
        structures=kept_structures,
        job_of=np.array(job_of, dtype=np.int64),
        A_shared=csr_matrix(np.vstack(shared_blocks).T),
        peak=np.concatenate(peaks),
        A_tab=csr_matrix(np.vstack(tab_blocks).T),
        b_tab=np.array(caps),
        util=np.concatenate(utils),
        features=features,
        shared=shared,
        private=private,
        tables=tables,
        theta=theta,
        objective=objective,
    )


def _features_of(net: Network, job: Job, s: Structure, cols: _Columns) -> np.ndarray:
    """The footprint of a structure in the terms of `_reduce`."""
    L = _load_matrix(net, job, [s])
    if cols.objective == "max-concurrent":
        pk = max(cols.theta, float(L[:, cols.private].max()) if len(cols.private) else 0.0)
    else:
        pk = max(1.0, float(L.max()))
    tb = [float(v in getattr(s, attr)) for attr, v in cols.tables]
    return np.concatenate([L[:, cols.shared].toarray().ravel(), [pk], tb])


# -- the integer program -----------------------------------------------------------------


@dataclass
class _Model:
    """min c·z s.t. A_ub z ≤ b_ub, A_eq z = b_eq, lower ≤ z ≤ upper; the first n columns are x."""

    n: int
    c: np.ndarray
    A_ub: csr_matrix
    b_ub: np.ndarray
    A_eq: csr_matrix
    b_eq: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    integrality: np.ndarray
    scale: float  # max-sum: objective = −Σ weight·rate / scale


def _model(cols: _Columns, jobs: tuple[Job, ...], objective: str) -> _Model:
    n = len(cols.structures)
    J = len(jobs)
    job_of = cols.job_of
    A_job = csr_matrix((np.ones(n), (job_of, np.arange(n))), shape=(J, n))
    A_tab, b_tab = cols.A_tab, cols.b_tab
    A_sh = cols.A_shared
    T, E = A_tab.shape[0], A_sh.shape[0]
    scale = 1.0
    if objective == "max-concurrent":
        # Columns x (n), μ ≥ θ. Shared edges: Σ d·m/c·x ≤ μ; private edges, per job:
        # Σ_t peak_t·x_t ≤ μ (exactly the chosen structure's peak).
        jobs_p = sorted(set(job_of[cols.peak > cols.theta].tolist()))
        sel = np.flatnonzero(np.isin(job_of, jobs_p))
        P = csr_matrix((cols.peak[sel], (np.searchsorted(jobs_p, job_of[sel]), sel)), shape=(len(jobs_p), n))
        c = np.zeros(n + 1)
        c[n] = 1.0
        A_ub = vstack(
            [
                hstack([A_tab, csr_matrix((T, 1))]),
                hstack([A_sh, csr_matrix(-np.ones((E, 1)))]),
                hstack([P, csr_matrix(-np.ones((len(jobs_p), 1)))]),
            ]
        )
        b_ub = np.concatenate([b_tab, np.zeros(E + len(jobs_p))])
        A_eq = hstack([A_job, csr_matrix((J, 1))])
        lower = np.concatenate([np.zeros(n), [cols.theta]])
        upper = np.concatenate([np.ones(n), [np.inf]])
        integrality = np.concatenate([np.ones(n), [0.0]])
    else:
        # Columns x (n), y (n) with rate f_t = d·y_t: Σ m·f/c ≤ 1 on shared edges and
        # y_t ≤ u_t·x_t with u_t = 1/peak_t (what structure t alone can carry).
        value = np.array([jobs[j].weight * jobs[j].demand for j in job_of], dtype=float)
        scale = float(value.max()) if n and value.max() > 0 else 1.0
        c = np.concatenate([np.zeros(n), -value / scale])
        link_x = csr_matrix((-1.0 / cols.peak, (np.arange(n), np.arange(n))), shape=(n, n))
        eye = identity(n, format="csr")
        A_ub = vstack([hstack([A_tab, csr_matrix((T, n))]), hstack([csr_matrix((E, n)), A_sh]), hstack([link_x, eye])])
        b_ub = np.concatenate([b_tab, np.ones(E), np.zeros(n)])
        A_eq = hstack([A_job, csr_matrix((J, n))])
        lower = np.zeros(2 * n)
        upper = np.ones(2 * n)
        integrality = np.concatenate([np.ones(n), np.zeros(n)])
    return _Model(n, c, A_ub.tocsr(), b_ub, A_eq.tocsr(), np.ones(J), lower, upper, integrality, scale)


def _solve_lp(m: _Model, size: str, lower: np.ndarray | None = None, upper: np.ndarray | None = None, strict: bool = True):
    lower = m.lower if lower is None else lower
    upper = m.upper if upper is None else upper
    res = linprog(
        m.c,
        A_ub=m.A_ub if m.A_ub.shape[0] else None,
        b_ub=m.b_ub if m.A_ub.shape[0] else None,
        A_eq=m.A_eq,
        b_eq=m.b_eq,
        bounds=np.column_stack([lower, upper]),
        method="highs",
    )
    if res.status != 0 and strict:
        raise PlanningError(f"ilp: the LP relaxation failed ({res.message}; {size})")
    return res


def _solve_milp(m: _Model, size: str):
    cons = [LinearConstraint(m.A_eq, m.b_eq, m.b_eq)]
    if m.A_ub.shape[0]:
        cons.append(LinearConstraint(m.A_ub, -np.inf, m.b_ub))
    res = milp(
        m.c,
        constraints=cons,
        integrality=m.integrality,
        bounds=Bounds(m.lower, m.upper),
        options={"mip_rel_gap": MIP_REL_GAP, "node_limit": NODE_LIMIT, "time_limit": TIME_LIMIT_S},
    )
    if res.status != 0 or res.x is None:
        raise PlanningError(
            f"ilp: the integer program was not solved to optimality within the limits of "
            f"{NODE_LIMIT} branch-and-bound nodes and {TIME_LIMIT_S:g} s ({res.message}; {size})"
        )
    return res


def _pick(cols: _Columns, x: np.ndarray, n_jobs: int) -> np.ndarray:
    """The column chosen for every job."""
    n = len(cols.structures)
    x = x[:n]
    return np.array([int(np.flatnonzero(cols.job_of == j)[np.argmax(x[cols.job_of == j])]) for j in range(n_jobs)])


def _congestion(cols: _Columns, chosen: np.ndarray) -> float:
    """max(θ, μ) of one column per job, in the model's terms."""
    mu = cols.theta
    if cols.A_shared.shape[0]:
        mu = max(mu, float(np.asarray(cols.A_shared[:, chosen].sum(axis=1)).max()))
    return max(mu, float(cols.peak[chosen].max()))


def _tie_break(cols: _Columns, chosen: np.ndarray, mu: float) -> np.ndarray:
    """Keep the congestion at most μ and lower the total load, one job at a time.

    Coordinate descent over the jobs in order (at most three sweeps): a job moves
    to the structure with the least total d·m/c over all edges whose loads keep
    μ and whose tables stay within capacity given the other jobs. Every such plan
    has the optimal λ; this only spends less capacity off the bottleneck, which
    the max-min filling then hands out.
    """
    A = cols.A_shared.tocsc()
    T = cols.A_tab.tocsc()
    limit = mu * (1 + 1e-9) + 1e-12
    load = np.asarray(A[:, chosen].sum(axis=1)).ravel()
    tab = np.asarray(T[:, chosen].sum(axis=1)).ravel()
    chosen = chosen.copy()
    for _ in range(3):
        changed = False
        for j, t0 in enumerate(chosen.tolist()):
            idx = np.flatnonzero(cols.job_of == j)
            base = load - A[:, [t0]].toarray().ravel()
            base_tab = tab - T[:, [t0]].toarray().ravel()
            ok = cols.peak[idx] <= limit
            ok &= np.all(A[:, idx].toarray() + base[:, None] <= limit, axis=0)
            ok &= np.all(T[:, idx].toarray() + base_tab[:, None] <= cols.b_tab[:, None] + 1e-9, axis=0)
            cand = idx[ok]
            if not len(cand):
                continue
            t1 = int(cand[np.lexsort((cand, cols.util[cand]))[0]])
            if cols.util[t1] < cols.util[t0] - 1e-12:
                chosen[j] = t1
                load = base + A[:, [t1]].toarray().ravel()
                tab = base_tab + T[:, [t1]].toarray().ravel()
                changed = True
        if not changed:
            break
    return chosen


def _dive(m: _Model, cols: _Columns, n_jobs: int, x: np.ndarray, size: str):
    """LP diving: fix the most decided job to its likeliest structure, re-solve, repeat.

    At most one LP per job. Returns (columns, objective value) of the integer
    solution reached, or None if a fixing makes the LP infeasible.
    """
    lower, upper = m.lower.copy(), m.upper.copy()
    fixed = np.zeros(n_jobs, dtype=bool)
    job_of = cols.job_of
    n = m.n
    while True:
        xs = x[:n]
        frac = [(float(xs[job_of == j].max()), j) for j in range(n_jobs) if not fixed[j]]
        if all(v >= 1 - 1e-9 for v, _ in frac):
            break
        _, j = max(frac)
        idx = np.flatnonzero(job_of == j)
        t = int(idx[np.argmax(xs[idx])])
        upper[idx] = 0.0
        upper[t] = lower[t] = 1.0
        fixed[j] = True
        res = _solve_lp(m, size, lower, upper, strict=False)
        if res.status != 0:
            return None
        x = res.x
        if fixed.all():
            break
    chosen = _pick(cols, x, n_jobs)
    lower, upper = m.lower.copy(), m.upper.copy()
    upper[:n] = 0.0
    upper[chosen] = lower[chosen] = 1.0
    res = _solve_lp(m, size, lower, upper, strict=False)
    if res.status != 0:
        return None
    return chosen, float(res.fun)


def _incumbent(net: Network, jobs: tuple[Job, ...], cols: _Columns, objective: str, scale: float):
    """The best baseline plan, each structure replaced by a column that dominates it.

    Returns (columns, the model's objective value), or None when some baseline
    structure has no dominating column (it would not be in the family).
    """
    best = None
    for builder in (baselines.unicast, baselines.spt, baselines.steiner, baselines.greedy):
        plan = builder(net, jobs)
        chosen = []
        for j, s in enumerate(plan):
            idx = np.flatnonzero(cols.job_of == j)
            ok = np.all(cols.features[j] <= _features_of(net, jobs[j], s, cols) + 1e-12, axis=1)
            if not ok.any():
                return None
            k = np.flatnonzero(ok)
            chosen.append(int(idx[k[np.lexsort((k, cols.util[idx[k]]))[0]]]))
        ch = np.array(chosen)
        if objective == "max-concurrent":
            value = _congestion(cols, ch)
        else:
            rates = max_sum_rates(net, jobs, [cols.structures[t] for t in ch])
            value = -float(sum(job.weight * r for job, r in zip(jobs, rates))) / scale
        if best is None or value < best[1] - 1e-12:
            best = (ch, value)
    return best


def solve(
    net: Network, jobs: tuple[Job, ...], objective: str = "max-concurrent", *, shortcut: bool = True
) -> Solution:
    """The exact optimum over the enumerated structure family (see the module docstring).

    With `shortcut` (the default) the integer program is skipped when the best
    baseline plan already reaches the LP bound (it is then optimal); tests turn it
    off to exercise the integer program. Raises PlanningError on a non-Clos
    topology, beyond `MAX_JOBS` jobs or `MAX_STRUCTURES` structures, or when
    HiGHS does not prove optimality within `NODE_LIMIT` nodes / `TIME_LIMIT_S`.
    """
    if objective not in ("max-concurrent", "max-sum"):
        raise PlanningError(f"ilp: unknown objective {objective!r}")
    per_job = enumerate_structures(net, jobs)
    if not jobs:
        return Solution(structures=[], lp_bound=1.0 if objective == "max-concurrent" else 0.0)
    n_raw = sum(len(ss) for ss in per_job)
    per_job = [_feasible(net, ss) for ss in per_job]
    loads = [_load_matrix(net, job, ss) for job, ss in zip(jobs, per_job)]
    cols = _reduce(net, jobs, per_job, loads, objective)
    m = _model(cols, jobs, objective)
    size = f"{len(jobs)} jobs, {n_raw} structures"
    lp = _solve_lp(m, f"{size}, {m.n} after exact reductions")
    z_lp = float(lp.fun)
    inc = _incumbent(net, jobs, cols, objective, m.scale) if shortcut else None
    enough = z_lp + 1e-9 * max(1.0, abs(z_lp))
    how = "a baseline reaches the LP bound"
    if shortcut and not (inc is not None and inc[1] <= enough):
        dove = _dive(m, cols, len(jobs), lp.x, size)
        if dove is not None and (inc is None or dove[1] < inc[1]):
            inc = dove
            how = "LP diving reaches the LP bound"
    if inc is not None and inc[1] <= enough:
        chosen, z = inc
    else:
        how = "integer program"
        if objective == "max-concurrent":
            # μ* ≥ z_LP, and μ* ≤ the incumbent's: reduce again with both.
            if inc is not None:
                keep = _within(loads, inc[1])
                per_job = [[s for s, k in zip(ss, kk) if k] for ss, kk in zip(per_job, keep)]
                loads = [L[kk] for L, kk in zip(loads, keep)]
            cols = _reduce(net, jobs, per_job, loads, objective, theta=max(1.0, z_lp * (1 - 1e-9)))
            m = _model(cols, jobs, objective)
            if inc is not None:
                m.upper[m.n] = inc[1] * (1 + 1e-9) + 1e-12  # μ ≤ the incumbent's: prunes the search
        res = _solve_milp(m, f"{size}, {m.n} after exact reductions")
        chosen, z = _pick(cols, res.x, len(jobs)), float(res.fun)
    if objective == "max-concurrent":
        if z > 1.0:
            chosen = _tie_break(cols, chosen, z)
        bound = min(1.0, 1.0 / z_lp)
        note = f"{n_raw} structures, {m.n} after exact reductions; optimal congestion {max(z, 1.0):.6g} ({how})"
    else:
        bound = -z_lp * m.scale
        note = f"{n_raw} structures, {m.n} after exact reductions; optimal Σ weight·rate {-z * m.scale:.6g} ({how})"
    return Solution(structures=[cols.structures[t] for t in chosen], lp_bound=bound, notes=(note,))
