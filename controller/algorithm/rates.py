"""Rate allocation on chosen structures, and assembling the plan.

Max-concurrent: λ = min(1, min_e c(e)/load(e)) with load at full demand, then
max-min fair progressive filling (each unfrozen job grows in proportion to its
demand until an edge saturates or it reaches its demand). Max-sum: an LP that
maximises Σ weight·rate with rate ≤ demand.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csc_matrix

from controller.algorithm.model import Job, JobPlan, Plan, Structure, SwitchUsage
from controller.algorithm.network import Network

REL_TOL = 1e-9
_EDGE_ARRAY, _COPY_ARRAY, _DEMAND = (operator.attrgetter(a) for a in ("edge_array", "copy_array", "demand"))


def copy_matrix(net: Network, structures: list[Structure]) -> csc_matrix:
    """E × J matrix of copy counts."""
    rows, cols, vals = [], [], []
    for j, s in enumerate(structures):
        rows.append(s.edge_array)
        cols.append(np.full(len(s.copies), j, dtype=np.int64))
        vals.append(s.copy_array)
    if not structures:
        return csc_matrix((net.n_edges, 0))
    return csc_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(net.n_edges, len(structures)),
    )


def table_counts(structures: Sequence[Structure], which: str, nodes: int) -> np.ndarray:
    """How many of `structures` use each node's group table (`which` "group_array") or
    entry table ("entry_array"), in one bincount."""
    arrays = list(map(operator.attrgetter(which), structures))
    if not arrays:
        return np.zeros(nodes, dtype=np.int64)
    return np.bincount(np.concatenate(arrays), minlength=nodes)


def demand_load(net: Network, jobs: tuple[Job, ...], structures: list[Structure]) -> np.ndarray:
    """Load on every edge if every job ran at its full demand."""
    if not structures:
        return np.zeros(net.n_edges)
    # the sums, in job order, of adding them one by one, in one bincount; each
    # copy's demand × count as one product over all of them (the same products),
    # the arrays gathered by builtins (an admission at k=48 passes 5,000 jobs here)
    edge_arrays = list(map(_EDGE_ARRAY, structures))
    lengths = np.fromiter(map(len, edge_arrays), np.int64, len(edge_arrays))
    demands = np.fromiter(map(_DEMAND, jobs), float, len(edge_arrays))
    weights = np.repeat(demands, lengths) * np.concatenate(list(map(_COPY_ARRAY, structures)))
    return np.bincount(np.concatenate(edge_arrays), weights=weights, minlength=net.n_edges).astype(float)


def concurrent_lambda(capacity: np.ndarray, load: np.ndarray) -> float:
    """Largest λ ≤ 1 with λ·load ≤ capacity."""
    used = load > 0
    if not used.any():
        return 1.0
    return float(min(1.0, np.min(capacity[used] / load[used])))


def progressive_fill(A: csc_matrix, d: np.ndarray, capacity: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Max-min fair progressive filling from the rates `start`.

    Every job below its demand `d` and with no copy on a saturated link (residual
    capacity ≤ REL_TOL of its capacity) grows in proportion to its demand until a
    link it crosses saturates or it reaches its demand; repeated until no job can
    grow. `A` is the E × J copy matrix. A job that reaches its demand is set to it
    exactly; the rates may exceed the capacities by float rounding, which each
    caller takes out in its own way.
    """
    AT = A.T.tocsr()
    r = start.copy()
    residual = capacity - A @ r
    active = r < d * (1 - REL_TOL)
    while active.any():
        saturated = residual <= REL_TOL * capacity
        if saturated.any():
            # jobs with a copy on a saturated edge: Aᵀ·[saturated] > 0 (copy counts are
            # non-negative), a product instead of slicing rows out of the CSC matrix
            active &= ~(AT @ saturated.astype(float) > 0)
            if not active.any():
                break
        u = A @ np.where(active, d, 0.0)
        pos = u > 0
        t_edge = np.min(residual[pos] / u[pos]) if pos.any() else np.inf
        t_job = np.min((d[active] - r[active]) / d[active])
        t = max(0.0, min(t_edge, t_job))
        r = np.where(active, r + t * d, r)
        residual = residual - t * u
        done = active & (r >= d * (1 - REL_TOL))
        r = np.where(done, np.minimum(r, d), r)
        active &= ~done
        if t == 0.0 and not done.any():
            break  # only float noise left
    return r


def level_fill(A: csc_matrix, d: np.ndarray, capacity: np.ndarray, lam: float) -> np.ndarray:
    """`progressive_fill(A, d, capacity, lam * d)` when every job starts at the same
    share `lam` of its demand (as `max_min_fill` starts them), computed by events.

    Then every job still growing is at one common level x (its rate x·d): a used
    edge e saturates at the level (capacity − load of its frozen jobs) / (Σ copies ×
    demand of its growing jobs), and filling is a sequence of events: the edge with
    the lowest such level saturates, its growing jobs freeze at that level, and the
    levels of the edges those jobs cross are updated; at level 1 every job left
    reaches its demand. An event costs an argmin over the used edges and the
    frozen jobs' own edges, where a step of `progressive_fill` costs several
    passes over all edges and jobs (k=48 with 5,000 jobs: about 1,000 steps, 4 s
    in all; here about 0.1 s). Equal to `progressive_fill`'s rates up to float
    rounding (edges saturating at levels within `REL_TOL` may be taken one by one)."""
    r = np.asarray(d, dtype=float).copy()  # a job no saturated edge stops reaches its demand
    if A.shape[1] == 0 or lam >= 1.0:
        return lam * r  # nobody grows
    by_edge = A.tocsr()
    used = np.flatnonzero(np.diff(by_edge.indptr))
    by_edge = by_edge[used]  # rows: the edges some job crosses
    by_job = by_edge.tocsc()
    by_edge.sort_indices()
    by_job.sort_indices()
    cap = np.asarray(capacity, dtype=float)[used]
    growth = by_edge @ r  # Σ copies × demand of the growing jobs, per edge
    frozen_load = np.zeros(len(used))
    growing = np.diff(by_edge.indptr).astype(np.int64)  # growing jobs per edge
    with np.errstate(divide="ignore", invalid="ignore"):
        level = np.where(growth > 0, cap / growth, np.inf)
    active = np.ones(A.shape[1], dtype=bool)
    x = max(lam, 0.0)
    while True:
        e = int(np.argmin(level))
        at = float(level[e])
        if not at < 1.0:
            break
        x = max(x, at)
        level[e] = np.inf
        jobs = by_edge.indices[by_edge.indptr[e]:by_edge.indptr[e + 1]]
        jobs = jobs[active[jobs]]
        if not len(jobs):
            continue
        active[jobs] = False
        r[jobs] = x * d[jobs]
        # the entries of their columns, job after job (the sums below in the order of freezing them one by one)
        first, count = by_job.indptr[jobs], by_job.indptr[jobs + 1] - by_job.indptr[jobs]
        at_entry = np.repeat(first - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
        edges, copies, owner = by_job.indices[at_entry], by_job.data[at_entry], np.repeat(jobs, count)
        np.add.at(frozen_load, edges, copies * r[owner])
        np.add.at(growth, edges, -(copies * d[owner]))
        np.add.at(growing, edges, -1)
        edges = np.unique(edges)
        with np.errstate(divide="ignore", invalid="ignore"):
            level[edges] = np.where(growing[edges] > 0,
                                    np.maximum(x, (cap[edges] - frozen_load[edges]) / growth[edges]), np.inf)
    return r


def refill(A: csc_matrix, d: np.ndarray, capacity: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rates of the jobs of `A` (E × J copy counts over some edges) on
    `capacity` (what other jobs leave of those edges; negative float noise counts
    as 0): from `start` by `progressive_fill` (they only grow), or with None from 0
    by `level_fill`. At most the demands `d`, and scaled down if float rounding put
    an edge over `capacity` (as `max_min_fill`)."""
    capacity = np.maximum(np.asarray(capacity, dtype=float), 0.0)
    if A.shape[1] == 0:
        return np.zeros(0)
    r = level_fill(A, d, capacity, 0.0) if start is None else progressive_fill(A, d, capacity, start)
    return scaled_within(A, np.minimum(r, d), capacity)


def max_min_fill(net: Network, jobs: tuple[Job, ...], structures: list[Structure], lam: float) -> np.ndarray:
    """Start every job at λ·demand and fill spare capacity max-min fairly (`level_fill`)."""
    d = np.array([j.demand for j in jobs], dtype=float)
    A = copy_matrix(net, structures)
    r = level_fill(A, d, net.capacity, lam)
    return _within_capacity(net, A, np.minimum(r, d))


def max_sum_rates(net: Network, jobs: tuple[Job, ...], structures: list[Structure]) -> np.ndarray:
    """Rates maximising Σ weight·rate subject to links and rate ≤ demand."""
    d = np.array([j.demand for j in jobs], dtype=float)
    wts = np.array([j.weight for j in jobs], dtype=float)
    A = copy_matrix(net, structures)
    used = np.asarray(A.sum(axis=1)).ravel() > 0
    scale = d.max() if len(d) else 1.0
    res = linprog(
        -wts * d / scale,
        A_ub=(A[used] @ _diag(d)) / net.capacity[used][:, None],
        b_ub=np.ones(int(used.sum())),
        bounds=[(0, 1)] * len(d),
        method="highs",
    )
    if res.status != 0:
        raise RuntimeError(f"rate LP failed: {res.message}")
    return _within_capacity(net, A, np.clip(res.x, 0, 1) * d + 0.0)  # + 0.0: no -0.0


def _diag(v: np.ndarray) -> csc_matrix:
    n = len(v)
    return csc_matrix((v, (np.arange(n), np.arange(n))), shape=(n, n))


def _within_capacity(net: Network, A: csc_matrix, r: np.ndarray) -> np.ndarray:
    """Remove floating-point excess so that Σ rate·copies ≤ capacity holds exactly."""
    return scaled_within(A, r, net.capacity)


def scaled_within(A: csc_matrix, r: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """`r` scaled down, if need be, so that A·r ≤ `capacity` on every edge it loads."""
    load = A @ r
    used = load > 0
    if used.any():
        ratio = float(np.min(capacity[used] / load[used]))
        if ratio < 1.0:
            r = r * ratio
    return r


def switch_usage(net: Network, groups: np.ndarray, entries: np.ndarray) -> tuple[SwitchUsage, ...]:
    """Every switch's tables: `groups` and `entries` used (per node) against its budgets."""
    topo = net.topo
    return tuple(
        SwitchUsage(
            topo.name(v),
            int(groups[v]),
            topo.nodes[v].group_capacity,
            int(entries[v]),
            topo.nodes[v].entry_capacity,
        )
        for v in topo.switches
    )


def assemble_plan(
    net: Network,
    jobs: tuple[Job, ...],
    structures: list[Structure],
    rates: np.ndarray,
    algorithm: str,
    objective: str,
    runtime_s: float,
    lp_bound: float | None = None,
    beta: float | None = None,
    notes: tuple[str, ...] = (),
    columns: tuple[tuple[Structure, ...], ...] = (),
) -> Plan:
    groups = table_counts(structures, "group_array", net.n_nodes)
    entries = table_counts(structures, "entry_array", net.n_nodes)
    switches = switch_usage(net, groups, entries)
    d = np.array([j.demand for j in jobs], dtype=float)
    lam = float(np.min(rates / d)) if len(jobs) else 1.0
    return Plan(
        algorithm=algorithm,
        objective=objective,
        lam=lam,
        throughput=float(rates.sum()),
        lp_bound=lp_bound,
        kappa=net.kappa(),
        beta=beta,
        runtime_s=runtime_s,
        jobs=tuple(JobPlan(j, float(r), s) for j, r, s in zip(jobs, rates, structures)),
        switches=switches,
        notes=notes,
        columns=columns,
    )


def allocate(net: Network, jobs: tuple[Job, ...], structures: list[Structure], objective: str) -> np.ndarray:
    """Rates for the chosen structures under `objective`."""
    if objective == "max-sum":
        return max_sum_rates(net, jobs, structures)
    lam = concurrent_lambda(net.capacity, demand_load(net, jobs, structures))
    return max_min_fill(net, jobs, structures, lam)
