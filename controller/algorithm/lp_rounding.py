"""`lp-rounding`: the project's planner (Zhan & Xu's LP relaxation and randomized rounding).

1. Column generation on the master LP (`master_lp`) with `Pricer` as the pricing
   oracle. Every iteration also yields a Lagrangian bound from the duals and the
   pricer's lower bounds, valid over the whole structure family; the best one is
   `lp_bound`.
2. Randomized rounding: each job draws a structure with probability x_jt; the
   best of several draws (and the LP's most likely choice) is kept.
3. Repair: where a switch table is over capacity, the jobs that lose least move to
   structures that do not use it (`rounding.repair`).
4. Local search on the bottleneck (`rounding.local_search`; only the polish
   once the LP bound is met).
5. The baselines' plans are candidates, so the result is never worse than any
   of them. A cold max-concurrent plan seeds the pool with the unicast and
   greedy plans; only when the plan's λ is below the LP bound (no plan can beat
   one that meets it) does a second round add spt, steiner and the first priced
   columns (`_solve_lazy`). A max-sum plan seeds the pool with all four
   baselines and the first priced columns.
6. Traffic (`traffic.reduce_traffic`): with every rate held, jobs move to
   structures with fewer link crossings; rates then only rise.
7. Headroom (`headroom.raise_headroom`): with every rate held, jobs move to
   structures that let them go faster alone (a broadcasting job whose phases
   leave the others idle); rates then only rise.

A warm start (`warm`: an earlier plan's columns on the same topology) replaces
step 5's baselines by the earlier plan's structures and columns, and skips
steps 2–4 when those structures already meet the LP bound.
Deterministic for a given seed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from controller.algorithm import baselines, headroom, parallel, traffic
from controller.algorithm.master_lp import LPSolution, MasterLP
from controller.algorithm.admission import same_topology
from controller.algorithm.model import Instance, Job, Plan, Solution, Structure, Topology
from controller.algorithm.network import Network
from controller.algorithm.pricing import Pricer
from controller.algorithm.rates import allocate, concurrent_lambda, demand_load
from controller.algorithm.rounding import BOUND_MET, Selection, local_search, objective_value, repair
from controller.algorithm.structures import unicast_structure

MAX_ITERATIONS = 40
GAP_TOLERANCE = 1e-4
DRAWS = 12
#: The baselines' rate allocations take ~0.2 s each at k=32 / 1000 jobs, ~2 ms at
#: k=16 / 200: a second fork for them pays only on large instances.
LATE_FORK_WORK = 8000


def _pricing_inputs(net: Network, sol: LPSolution) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-copy edge price for unit demand, and node prices; zero-capacity tables forbidden."""
    w_unit = sol.y / net.capacity
    alpha = sol.alpha.copy()
    gamma = sol.gamma.copy()
    alpha[net.group_cap == 0] = math.inf
    gamma[net.entry_cap == 0] = math.inf
    return w_unit, alpha, gamma


def column_generation(
    net: Network, jobs: tuple[Job, ...], objective: str, pricer: Pricer, lp: MasterLP
) -> tuple[LPSolution, float]:
    """Grow the pool until the LP is optimal over the family (or the bound is tight).

    Returns the last LP solution and the best Lagrangian bound: an upper bound on
    λ (max-concurrent) or on Σ weight·rate (max-sum) over the whole family.
    """
    finite_g = np.isfinite(net.group_cap)
    finite_f = np.isfinite(net.entry_cap)
    best_bound = math.inf
    # A lower bound on μ over the whole family; it lets the LP leave out edge rows
    # that cannot bind, and enters the Lagrangian bound for the slack Σ y < 1.
    floor = host_link_floor(net, jobs) if objective != "max-sum" else 0.0
    sol = lp.solve(floor)
    for _ in range(MAX_ITERATIONS):
        w_unit, alpha, gamma = _pricing_inputs(net, sol)
        table_term = float(np.dot(sol.alpha[finite_g], net.group_cap[finite_g]) + np.dot(sol.gamma[finite_f], net.entry_cap[finite_f]))
        added = 0
        lb_total = 0.0
        for j, job in enumerate(jobs):
            if objective != "max-sum" and sol.pi[j] <= 1e-12:
                # π_j is the cost of a column in use; 0 means a free structure exists,
                # so no column can price below it and the exact minimum is 0.
                continue
            w = pricer.edge_prices(job.demand, w_unit)
            res = pricer.price(j, w, alpha, gamma, want=False)
            lb = res.lower_bound
            if objective == "max-sum":
                lb_total += max(0.0, job.weight * job.demand - lb)
                gain = max(0.0, job.weight * job.demand - res.cost) - sol.pi[j]
                improving = gain > 1e-9 * job.weight * job.demand
            else:
                lb_total += lb
                improving = res.cost - sol.pi[j] < -1e-9
            if improving:
                s = pricer.realise(j, res, w, alpha, gamma)
                if s is not None and lp.add(j, s):
                    added += 1
        if objective == "max-sum":
            bound = float(sol.y.sum()) + table_term + lb_total
            best_bound = min(best_bound, bound)
            gap = (best_bound - sol.value) / max(best_bound, 1e-300)
        else:
            dual = lb_total - table_term + max(0.0, 1.0 - float(sol.y.sum())) * floor
            bound = 1.0 / dual if dual > 0 else math.inf
            best_bound = min(best_bound, bound)
            floor = max(floor, dual)
            lam_lp = 1.0 / sol.value if sol.value > 0 else math.inf
            gap = (lam_lp - best_bound) / max(lam_lp, 1e-300) if math.isfinite(lam_lp) else 0.0
            gap = abs(gap)
        if added == 0 or gap <= GAP_TOLERANCE:
            break
        sol = lp.solve(floor)
    if objective != "max-sum":
        best_bound = min(best_bound, 1.0)
    return sol, best_bound


def host_link_floor(net: Network, jobs: tuple[Job, ...]) -> float:
    """A lower bound on the congestion μ of every plan: a single-homed host's link
    carries at least one copy of every job it sends (as PS) or receives (as worker)."""
    load = np.zeros(net.n_edges)
    topo = net.topo
    ei = topo.edge_index
    for job in jobs:
        ps, workers = net.job_nodes(job)
        for h, out in [(ps, True)] + [(w, False) for w in workers]:
            nb = topo.neighbors[h]
            if len(nb) == 1:
                e = ei[(h, nb[0])] if out else ei[(nb[0], h)]
                load[e] += job.demand
    return float(np.max(load / net.capacity)) if len(load) else 0.0


def beta_of(net: Network, jobs: tuple[Job, ...], lp: MasterLP, sol: LPSolution, objective: str) -> float | None:
    """Smallest ratio over resources of capacity to one job's largest use at the LP optimum."""
    lam = 1.0 / sol.value if objective != "max-sum" and sol.value > 0 else 1.0
    lam = min(lam, 1.0)
    peak = np.zeros(net.n_edges)
    group_used = np.zeros(net.n_nodes, dtype=bool)
    entry_used = np.zeros(net.n_nodes, dtype=bool)
    for j, pool in enumerate(lp.columns):
        for s, xv in zip(pool, sol.x[j]):
            if xv <= 1e-9:
                continue
            if s.copies:
                np.maximum.at(peak, s.edge_array, lam * jobs[j].demand * s.copy_array)
            for v in s.groups:
                group_used[v] = True
            for v in s.entries:
                entry_used[v] = True
    ratios = []
    used = peak > 0
    if used.any():
        ratios.append(float(np.min(net.capacity[used] / peak[used])))
    g = group_used & np.isfinite(net.group_cap)
    if g.any():
        ratios.append(float(np.min(net.group_cap[g])))
    f = entry_used & np.isfinite(net.entry_cap)
    if f.any():
        ratios.append(float(np.min(net.entry_cap[f])))
    return min(ratios) if ratios else None


def warm_columns(instance: Instance, previous: Plan, previous_topology: Topology) -> list[tuple[Structure, ...]] | None:
    """Per job of `instance`, the columns `previous` holds for it (its chosen
    structure first), or () for a job it does not plan unchanged; None when the
    topology changed, so that structures' node and edge indices mean other things."""
    if not same_topology(instance.topology, previous_topology):
        return None
    columns = previous.columns
    if len(columns) != len(previous.jobs):  # a plan without columns (or with its jobs filtered)
        columns = tuple((jp.structure,) for jp in previous.jobs)
    by_job = {jp.job: cols or (jp.structure,) for jp, cols in zip(previous.jobs, columns)}
    return [by_job.get(job, ()) for job in instance.jobs]


def _warm_seeds(
    net: Network, jobs: tuple[Job, ...], pricer: Pricer, warm: Sequence[Sequence[Structure]]
) -> tuple[dict[str, list[Structure]], list[tuple[int, Structure | None]]]:
    """The starting pool of a warm start: the candidate plans unicast and the
    previous plan's structures (so the result is never worse than it), then (job,
    column) for its other columns and, for a job it did not plan, the first priced
    column, as a cold start has."""
    unicast_s = [unicast_structure(net, *net.job_nodes(j)) for j in jobs]
    previous = [cols[0] if cols else u for cols, u in zip(warm, unicast_s)]
    unit = np.zeros(net.n_nodes)
    more: list[tuple[int, Structure | None]] = []
    for j, (job, cols) in enumerate(zip(jobs, warm)):
        if cols:
            more.extend((j, c) for c in cols[1:])
        else:
            more.append((j, pricer.price(j, pricer.edge_prices(job.demand, net.capacity, divide=True), unit, unit).structure))
    return {"unicast": unicast_s, "previous": previous}, more


def solve(
    net: Network,
    jobs: tuple[Job, ...],
    objective: str,
    seed: int = 0,
    fork: bool | None = None,
    warm: Sequence[Sequence[Structure]] | None = None,
) -> Solution:
    """Plan `jobs`. With `fork` (default: where it pays, `parallel.worth_forking`) part
    of the independent work runs in a forked child process; the plan is the same.

    With `warm` (per job, the columns of an earlier plan on the same topology, its
    chosen structure first: `warm_columns`), the pool starts from those columns
    instead of the baselines' plans: no spt, steiner or greedy is computed, and the
    earlier plan's structures are the candidate the result must beat.
    """
    if not jobs:
        return Solution([], lp_bound=1.0 if objective != "max-sum" else 0.0)
    pricer = Pricer(net, jobs)
    lp = MasterLP(net, jobs, objective)
    if warm is not None:
        candidates, owned = _warm_seeds(net, jobs, pricer, warm)
        for structures in candidates.values():
            for j, s in enumerate(structures):
                lp.add(j, s)
        for j, s in owned:
            if s is not None:
                lp.add(j, s)
        return _solve_from_pool(_Pool(net, jobs, objective, seed, pricer, lp, candidates, fork_late=False))
    if objective != "max-sum":
        return _solve_lazy(net, jobs, objective, seed, pricer, lp, fork)
    work = sum(len(j.workers) for j in jobs)
    fork_late = fork if fork is not None else parallel.worth_forking(work, LATE_FORK_WORK)
    if fork is None:
        fork = parallel.worth_forking(work)
    if fork and net.fabric is not None:
        # every job's pricing index, built once here and shared by both processes
        for j in range(len(jobs)):
            pricer.clos_job(j)

    def side() -> tuple[list[Structure], list[Structure | None]]:
        return baselines.steiner(net, jobs), _first_priced(net, jobs, pricer)

    def main() -> tuple[list[Structure], list[Structure], list[Structure]]:
        # greedy after spt: it reuses spt's memoised fallback structures
        return baselines.unicast(net, jobs), baselines.spt(net, jobs), baselines.greedy(net, jobs)

    # Independent work: steiner and the first priced columns in a forked child (when
    # it pays), unicast, spt and greedy here; the columns enter the pool in the same
    # order either way, so the plan does not depend on the fork.
    (steiner_s, priced), (unicast_s, spt_s, greedy_s) = parallel.both(side, main, fork)
    candidates: dict[str, list[Structure]] = {"unicast": unicast_s, "spt": spt_s, "steiner": steiner_s, "greedy": greedy_s}
    for structures in candidates.values():
        for j, s in enumerate(structures):
            lp.add(j, s)
    for j, s in enumerate(priced):
        if s is not None:
            lp.add(j, s)
    return _solve_from_pool(_Pool(net, jobs, objective, seed, pricer, lp, candidates, fork_late))


def _first_priced(net: Network, jobs: tuple[Job, ...], pricer: Pricer) -> list[Structure | None]:
    """Per job, the structure priced at unit link prices and free tables (its fewest copies)."""
    unit = np.zeros(net.n_nodes)
    return [pricer.price(j, pricer.edge_prices(job.demand, net.capacity, divide=True), unit, unit).structure for j, job in enumerate(jobs)]


def _solve_lazy(
    net: Network, jobs: tuple[Job, ...], objective: str, seed: int, pricer: Pricer, lp: MasterLP, fork: bool | None
) -> Solution:
    """A cold max-concurrent plan whose spt and steiner baselines are computed only
    where they could matter.

    The pool starts from the unicast and greedy plans: greedy's structures let the
    LP start close to its optimum (column generation finds the rest), and with its
    plan a candidate, λ is never below greedy's. When that plan meets the LP bound
    (an upper bound on λ of every plan in the structure family, the baselines'
    plans included), no baseline can beat it on λ and spt and steiner are not
    computed. Otherwise (tight tables, mostly) a second round runs as a cold plan
    always did: the spt and steiner structures and the first priced columns join
    the pool (which keeps the columns generated so far), column generation,
    rounding and local search run again with all four baselines as candidates,
    and the better of the two rounds is kept; λ is then never below any
    baseline's.

    With `fork` (default: where it pays, on large instances) the candidate plans'
    rate allocations run in a forked child during the local search; the plan is
    the same.
    """
    work = sum(len(j.workers) for j in jobs)
    fork_late = fork if fork is not None else parallel.worth_forking(work, LATE_FORK_WORK)
    # greedy runs here: in a forked child (while this process built the pricing
    # indexes) it took longer than here, copying pages on write and building its
    # own indexes (k=16 / 200: 0.69 s against 0.67 s; k=32 / 1000: 5.2 s against 4.3 s)
    seeds = {"unicast": baselines.unicast(net, jobs), "greedy": baselines.greedy(net, jobs)}
    for structures in seeds.values():
        for j, s in enumerate(structures):
            lp.add(j, s)

    first = _solve_from_pool(_Pool(net, jobs, objective, seed, pricer, lp, seeds, fork_late))
    first_val = _value_of_rates(jobs, first.rates)
    if first_val[0] >= first.lp_bound * (1 - BOUND_MET):
        return first
    # below the bound: a second round with every baseline in the pool and as a candidate
    more = {"spt": baselines.spt(net, jobs), "steiner": baselines.steiner(net, jobs)}
    for structures in more.values():
        for j, s in enumerate(structures):
            lp.add(j, s)
    for j, s in enumerate(_first_priced(net, jobs, pricer)):
        if s is not None:
            lp.add(j, s)
    second = _solve_from_pool(_Pool(net, jobs, objective, seed, pricer, lp, {**seeds, **more}, fork_late))
    note = "below the LP bound from the unicast and greedy columns: a second round added spt's, steiner's and the first priced columns"
    if _better(first_val, _value_of_rates(jobs, second.rates)):
        return dataclasses.replace(first, notes=(*first.notes, note + "; the first round's plan was kept"))
    return dataclasses.replace(second, lp_bound=min(first.lp_bound, second.lp_bound), notes=(note, *second.notes))


def _value_of_rates(jobs: tuple[Job, ...], rates: np.ndarray | None) -> tuple[float, float]:
    """(λ, aggregate throughput) of max-concurrent rates."""
    assert rates is not None
    return float(np.min(rates / np.array([j.demand for j in jobs]))), float(rates.sum())


@dataclass(frozen=True)
class _Pool:
    """A seeded column pool and what the stages after it need: the jobs on their
    network, the objective and seed, the pricer, the master LP holding the pool,
    the `candidates` plans (by name) whose structures seeded it, and whether the
    candidates' rate allocations run in a forked child (`LATE_FORK_WORK`)."""

    net: Network
    jobs: tuple[Job, ...]
    objective: str
    seed: int
    pricer: Pricer
    lp: MasterLP
    candidates: dict[str, list[Structure]]
    fork_late: bool


def _solve_from_pool(pool: _Pool) -> Solution:
    """Column generation, rounding, local search and traffic from a seeded pool;
    the result is never worse than any of the `candidates` plans."""
    net, jobs, objective, lp, candidates = pool.net, pool.jobs, pool.objective, pool.lp, pool.candidates
    sol, bound = column_generation(net, jobs, objective, pool.pricer, lp)
    beta = beta_of(net, jobs, lp, sol, objective)

    previous = candidates.get("previous")
    if previous is not None and objective != "max-sum" and _lambda_of(net, jobs, previous) >= bound * (1 - 1e-9):
        # a warm start whose served plan already meets the LP bound: no rounding can
        # raise λ, so its structures stay (the traffic stage below may still move some)
        chosen, notes = previous, ["warm start: the previous plan's λ meets the LP bound, its structures were kept"]
        _, rates = _value_after_allocation(net, jobs, chosen, objective)
    else:
        chosen, rates, notes = _round(pool, sol, bound)
    # last stage: the same rates (or higher) with fewer link crossings
    job_pools = [[*lp.columns[j], *(c[j] for c in candidates.values())] for j in range(len(jobs))]
    chosen, rates = traffic.reduce_traffic(net, jobs, chosen, rates, job_pools, pool.pricer)
    # and with every rate held, the structures that let jobs go fastest alone (phases)
    chosen, rates = headroom.raise_headroom(net, jobs, chosen, rates, job_pools, pool.pricer)
    columns = tuple((s, *(c for c in lp.columns[j] if c != s)) for j, s in enumerate(chosen))
    return Solution(chosen, lp_bound=bound, beta=beta, notes=tuple(notes), rates=rates, columns=columns)


def _round(pool: _Pool, sol: LPSolution, bound: float) -> tuple[list[Structure], np.ndarray, list[str]]:
    """Randomized rounding of the LP solution, repair and local search; then the
    best of that and the `candidates` plans: structures, rates and notes."""
    net, jobs, objective, pricer, candidates = pool.net, pool.jobs, pool.objective, pool.pricer, pool.candidates
    rng = np.random.default_rng(pool.seed)
    draws: list[list[int]] = [[int(np.argmax(x)) for x in sol.x]]
    # each job draws column i with probability x_ji / Σ x_j: the draw of
    # `rng.choice(len(x), p=p)` (one uniform u per job, taken in job order, and the
    # first column whose normalised cumulative probability exceeds u), without its
    # per-call overhead
    cdfs = []
    for x in sol.x:
        p = x / x.sum() if x.sum() > 0 else np.full(len(x), 1.0 / len(x))
        cdf = p.cumsum()
        cdf /= cdf[-1]
        cdfs.append(cdf)
    for _ in range(DRAWS):
        u = rng.random(len(cdfs)).tolist()
        draws.append([int(cdf.searchsorted(v, side="right")) for cdf, v in zip(cdfs, u)])
    best: Selection | None = None
    best_val: tuple = ()
    for pick in draws:
        sel = Selection(net, jobs, pool.lp.columns, pick)
        repair(sel, pricer)
        # max-concurrent: lowest (max utilisation, Σ utilisation²); max-sum: highest Σ w·r
        val = (-objective_value(sel, objective),) if objective == "max-sum" else sel.key()
        if best is None or val < best_val:
            best, best_val = sel, val
    assert best is not None
    early: dict[str, tuple[tuple[float, float], np.ndarray]] = {}
    if pool.fork_late and objective != "max-sum":
        # the baselines' rate allocations (max-min filling, no LP: a forked child must
        # not use HiGHS' thread pool) run in a child during the local search; which
        # of them are needed is only known after it, so the child does them all
        early, _ = parallel.both(
            lambda: {name: _value_after_allocation(net, jobs, ss, objective) for name, ss in candidates.items()},
            lambda: local_search(best, pricer, objective, bound),
            True,
        )
    else:
        local_search(best, pricer, objective, bound)

    chosen = best.structures()
    notes: list[str] = []
    final, rates = _value_after_allocation(net, jobs, chosen, objective)
    for name, structures in candidates.items():
        if objective != "max-sum" and _lambda_of(net, jobs, structures) < final[0] * (1 - 1e-6):
            # after max-min filling, min r_j/d_j is at most λ = min_e c(e)/load(e) (the
            # jobs on the bottleneck stay at λ·d_j), so these structures cannot win:
            # skip their (costly) rate allocation
            continue
        val, val_rates = early[name] if name in early else _value_after_allocation(net, jobs, structures, objective)
        if _better(val, final):
            chosen, final, rates = structures, val, val_rates
            what = "the previous plan's structures" if name == "previous" else f"the {name} baseline's structures"
            notes.append(f"{what} beat the rounded solution and were kept")
    return chosen, rates, notes


def _value_after_allocation(
    net: Network, jobs: tuple[Job, ...], structures: list[Structure], objective: str
) -> tuple[tuple[float, float], np.ndarray]:
    """(objective, aggregate throughput) after rate allocation, and the rates."""
    rates = allocate(net, jobs, structures, objective)
    if objective == "max-sum":
        return (float(np.dot(rates, [j.weight for j in jobs])), float(rates.sum())), rates
    return (float(np.min(rates / np.array([j.demand for j in jobs]))), float(rates.sum())), rates


def _lambda_of(net: Network, jobs: tuple[Job, ...], structures: list[Structure]) -> float:
    """λ = min(1, min_e c(e)/load(e)) of the structures at full demand."""
    return concurrent_lambda(net.capacity, demand_load(net, jobs, structures))


def _better(a: tuple[float, float], b: tuple[float, float], rel: float = 1e-12) -> bool:
    """a beats b: a higher objective, or the same objective and more throughput."""
    if a[0] > b[0] * (1 + rel) + 1e-300:
        return True
    return a[0] >= b[0] * (1 - rel) and a[1] > b[1] * (1 + rel)
