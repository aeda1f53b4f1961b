"""Rate allocation on chosen structures, and assembling the plan.

Max-concurrent: λ = min(1, min_e c(e)/load(e)) with load at full demand, then
max-min fair progressive filling (each unfrozen job grows in proportion to its
demand until an edge saturates or it reaches its demand). Max-sum: an LP that
maximises Σ weight·rate with rate ≤ demand.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csc_matrix

from controller.algorithm.model import Job, JobPlan, Plan, Structure, SwitchUsage
from controller.algorithm.network import Network

REL_TOL = 1e-9


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


def demand_load(net: Network, jobs: tuple[Job, ...], structures: list[Structure]) -> np.ndarray:
    """Load on every edge if every job ran at its full demand."""
    load = np.zeros(net.n_edges)
    for job, s in zip(jobs, structures):
        if s.copies:
            np.add.at(load, s.edge_array, job.demand * s.copy_array)
    return load


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


def max_min_fill(net: Network, jobs: tuple[Job, ...], structures: list[Structure], lam: float) -> np.ndarray:
    """Start every job at λ·demand and fill spare capacity max-min fairly."""
    d = np.array([j.demand for j in jobs], dtype=float)
    A = copy_matrix(net, structures)
    r = progressive_fill(A, d, net.capacity, lam * d)
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
    load = A @ r
    used = load > 0
    if used.any():
        ratio = float(np.min(net.capacity[used] / load[used]))
        if ratio < 1.0:
            r = r * ratio
    return r


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
    topo = net.topo
    groups = np.zeros(net.n_nodes, dtype=np.int64)
    entries = np.zeros(net.n_nodes, dtype=np.int64)
    for s in structures:
        for v in s.groups:
            groups[v] += 1
        for v in s.entries:
            entries[v] += 1
    switches = tuple(
        SwitchUsage(
            topo.name(v),
            int(groups[v]),
            topo.nodes[v].group_capacity,
            int(entries[v]),
            topo.nodes[v].entry_capacity,
        )
        for v in topo.switches
    )
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
