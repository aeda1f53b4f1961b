"""The restricted master LP of column generation, solved with HiGHS through scipy.

Columns are delivery structures. Two objectives share the column pool:

max-concurrent (congestion form; λ = 1/μ):
    min μ  s.t.  Σ_{j,t} d_j m_t(e)/c(e) x_jt − μ ≤ 0     (every edge e; dual y_e ≥ 0)
                 Σ_{j,t: v ∈ R_t} x_jt ≤ G(v)              (dual α_v ≥ 0)
                 Σ_{j,t: v ∈ U_t} x_jt ≤ F(v)              (dual γ_v ≥ 0)
                 Σ_t x_jt = 1                              (dual π_j)
max-sum (rates as fractions f_jt of demand):
    max Σ w_j d_j f_jt  s.t.  Σ d_j m_t(e)/c(e) f_jt ≤ 1,  f_jt ≤ x_jt,  the table rows,  Σ_t x_jt = 1.

In both, a structure t of job j has the same price under the duals:
cost_j(t) = Σ_e y_e d_j m_t(e)/c(e) + Σ_{v∈R_t} α_v + Σ_{v∈U_t} γ_v, which is what
`Pricer.price` minimises. Edges and switches that no column touches have no row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from controller.algorithm.model import Job, Structure
from controller.algorithm.network import Network


@dataclass(frozen=True)
class LPSolution:
    value: float  # μ (max-concurrent) or Σ w d f (max-sum)
    x: list[np.ndarray]  # per job, weight of each of its columns
    y: np.ndarray  # per edge (0 where no row), dual of the normalised link row
    alpha: np.ndarray  # per node
    gamma: np.ndarray  # per node
    pi: np.ndarray  # per job


class MasterLP:
    """A growing pool of columns per job and the LP over them."""

    def __init__(self, net: Network, jobs: tuple[Job, ...], objective: str) -> None:
        self.net = net
        self.jobs = jobs
        self.objective = objective
        self.columns: list[list[Structure]] = [[] for _ in jobs]
        self._keys: list[set] = [set() for _ in jobs]
        self.demand = np.array([j.demand for j in jobs], dtype=float)
        self.weight = np.array([j.weight for j in jobs], dtype=float)

    def add(self, j: int, s: Structure) -> bool:
        """Add a column for job j; False if it is already in the pool."""
        if s.key in self._keys[j]:
            return False
        self._keys[j].add(s.key)
        self.columns[j].append(s)
        return True

    def max_loads(self) -> np.ndarray:
        """Per edge, Σ_j max_t d_j m_t(e)/c(e) over the pool: the most any x can load it."""
        net = self.net
        keys, vals = [], []
        for j, pool in enumerate(self.columns):
            for s in pool:
                if s.copies:
                    keys.append(j * net.n_edges + s.edge_array)
                    vals.append(self.demand[j] * s.copy_array / net.capacity[s.edge_array])
        if not keys:
            return np.zeros(net.n_edges)
        k = np.concatenate(keys)
        v = np.concatenate(vals)
        order = np.argsort(k, kind="stable")
        k, v = k[order], v[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        peak = np.maximum.reduceat(v, starts)
        return np.bincount(k[starts] % net.n_edges, weights=peak, minlength=net.n_edges)

    def solve(self, mu_floor: float = 0.0) -> LPSolution:
        """Solve over the pool. `mu_floor` must be a lower bound on the optimal μ
        (max-concurrent); edge rows that no choice of x can load beyond it are left
        out (they cannot bind) and μ ≥ mu_floor is imposed instead."""
        net = self.net
        cols = [(j, s) for j, pool in enumerate(self.columns) for s in pool]
        n = len(cols)
        group_rows: dict[int, int] = {}
        entry_rows: dict[int, int] = {}
        keep = None
        if self.objective != "max-sum" and mu_floor > 0:
            keep = self.max_loads() > mu_floor * (1 + 1e-9)
        # one row per edge of the columns (the kept ones), in order of first appearance
        used = [s.edge_array for _, s in cols if s.copies]
        all_edges = np.concatenate(used) if used else np.zeros(0, dtype=np.int64)
        if keep is not None:
            all_edges = all_edges[keep[all_edges]]
        edges, first = np.unique(all_edges, return_index=True)
        row_edges = edges[np.argsort(first)]
        edge_rows: dict[int, int] = dict(zip(row_edges.tolist(), range(len(row_edges))))
        row_of = np.full(net.n_edges, -1, dtype=np.int64)
        row_of[row_edges] = np.arange(len(row_edges))
        finite_g, finite_f = np.isfinite(net.group_cap).tolist(), np.isfinite(net.entry_cap).tolist()
        for _, s in cols:
            # sorted: the row order must not depend on a frozenset's iteration order,
            # which differs for an equal set built another way (or unpickled), and a
            # degenerate LP's optimal vertex depends on the row order
            for v in sorted(s.groups):
                if finite_g[v]:
                    group_rows.setdefault(v, len(group_rows))
            for v in sorted(s.entries):
                if finite_f[v]:
                    entry_rows.setdefault(v, len(entry_rows))
        ne, ng, nf = len(edge_rows), len(group_rows), len(entry_rows)
        cap = net.capacity
        r_idx, c_idx, vals = [], [], []
        for ci, (j, s) in enumerate(cols):
            if s.copies:
                if keep is None:
                    ea, ca = s.edge_array, s.copy_array
                else:
                    mask = keep[s.edge_array]
                    ea, ca = s.edge_array[mask], s.copy_array[mask]
                rows = row_of[ea]
                r_idx.append(rows)
                c_idx.append(np.full(len(rows), ci))
                vals.append(self.demand[j] * ca / cap[ea])
            g = [ne + group_rows[v] for v in sorted(s.groups) if v in group_rows]
            g += [ne + ng + entry_rows[v] for v in sorted(s.entries) if v in entry_rows]
            if g:
                r_idx.append(np.array(g))
                c_idx.append(np.full(len(g), ci))
                vals.append(np.ones(len(g)))
        rows = np.concatenate(r_idx) if r_idx else np.zeros(0, int)
        cidx = np.concatenate(c_idx) if c_idx else np.zeros(0, int)
        data = np.concatenate(vals) if vals else np.zeros(0)
        m_ub = ne + ng + nf
        job_of = np.array([j for j, _ in cols], dtype=np.int64)
        b_tables = np.array(
            [net.group_cap[v] for v in group_rows] + [net.entry_cap[v] for v in entry_rows], dtype=float
        )
        nj = len(self.jobs)
        if self.objective == "max-sum":
            # variables: f (n), x (n); rows: edges (f), tables (x), f - x <= 0
            link_part = (rows < ne)
            A_ub = coo_matrix(
                (
                    np.concatenate([data[link_part], data[~link_part], np.ones(n), -np.ones(n)]),
                    (
                        np.concatenate([rows[link_part], rows[~link_part], m_ub + np.arange(n), m_ub + np.arange(n)]),
                        np.concatenate([cidx[link_part], n + cidx[~link_part], np.arange(n), n + np.arange(n)]),
                    ),
                ),
                shape=(m_ub + n, 2 * n),
            ).tocsr()
            b_ub = np.concatenate([np.ones(ne), b_tables, np.zeros(n)])
            A_eq = coo_matrix((np.ones(n), (job_of, n + np.arange(n))), shape=(nj, 2 * n)).tocsr()
            scale = float(self.demand.max()) if nj else 1.0
            c = np.concatenate([-(self.weight * self.demand)[job_of] / scale, np.zeros(n)])
            res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=np.ones(nj), bounds=(0, 1), method=self._method(n))
            self._check(res)
            x_all = res.x[n:]
            value = -res.fun * scale
            dual_scale = scale
        else:
            # variables: x (n), mu (1)
            A_ub = coo_matrix(
                (np.concatenate([data, -np.ones(ne)]), (np.concatenate([rows, np.arange(ne)]), np.concatenate([cidx, np.full(ne, n)]))),
                shape=(m_ub, n + 1),
            ).tocsr()
            b_ub = np.concatenate([np.zeros(ne), b_tables])
            A_eq = coo_matrix((np.ones(n), (job_of, np.arange(n))), shape=(nj, n + 1)).tocsr()
            c = np.zeros(n + 1)
            c[n] = 1.0
            bounds = [(0, None)] * n + [(mu_floor, None)]
            res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=np.ones(nj), bounds=bounds, method=self._method(n))
            self._check(res)
            x_all = res.x[:n]
            value = float(res.x[n])
            dual_scale = 1.0
        marg = -np.asarray(res.ineqlin.marginals) * dual_scale
        y = np.zeros(net.n_edges)
        alpha = np.zeros(net.n_nodes)
        gamma = np.zeros(net.n_nodes)
        if ne:
            y[np.fromiter(edge_rows.keys(), dtype=np.int64, count=ne)] = np.maximum(marg[:ne], 0)
        for v, r in group_rows.items():
            alpha[v] = max(marg[ne + r], 0.0)
        for v, r in entry_rows.items():
            gamma[v] = max(marg[ne + ng + r], 0.0)
        pi = np.asarray(res.eqlin.marginals) * dual_scale
        if self.objective == "max-sum":
            pi = -pi
        x: list[np.ndarray] = []
        pos = 0
        for pool in self.columns:
            x.append(np.clip(x_all[pos : pos + len(pool)], 0, None))
            pos += len(pool)
        return LPSolution(value, x, y, alpha, gamma, pi)

    @staticmethod
    def _method(n_columns: int) -> str:
        # The master LP is highly degenerate near its optimum: on large pools HiGHS'
        # interior point (with crossover, so duals stay basic) beats dual simplex
        # several times over; on small ones simplex is quicker.
        return "highs-ipm" if n_columns > 1500 else "highs-ds"

    @staticmethod
    def _check(res) -> None:
        if res.status != 0:
            raise RuntimeError(f"master LP failed: {res.message}")
