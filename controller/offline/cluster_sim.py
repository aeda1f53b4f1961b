"""A cluster over time: a flow-level, event-driven simulation of a fabric under job arrivals and departures.

`simulate(topology, stream, settings, rng)` is pure (no files, sockets or
clocks; the placement draws from the `random.Random` passed in) and returns a
`SimResult`. The policy is the controller's own code, not a copy:

- with `settings.incremental` (the controller's `planner.incremental`), every
  change of the job set (a job starts, a job leaves) is planned by
  `planner.run_incremental` (`algorithm.admission.incremental`) on the served
  plan, as `core.planning` does for a change of jobs only (a delete included);
  `NotIncremental` falls back to a full plan. A re-optimisation is due
  `reoptimise_after_s` after an admission, or `debounce_s` after one whose λ is
  below `core.planning.ADMISSION_GUARD` × the last full plan's; it runs
  `planner.run` (warm-started from the served plan with `reoptimise_warm_start`)
  and `algorithm.admission.reoptimisation` decides, the very function
  `Planning._reoptimise` calls: within the churn budget, adopted only if it gains
  `reoptimise_min_gain`; an adopted one that the budget held back is followed by
  another `reoptimise_after_s` later;
- without it (the baselines: spt, greedy, unicast), every change is a full
  `planner.run` with `settings.algorithm`.

Jobs. A `JobSpec` arrives, waits in a queue until `workers + 1` hosts are free
(first fit in arrival order: a later, smaller job may start first), takes a
random PS and random workers among the free hosts, and holds them until it
leaves. Its demand is its PS's host link capacity. Each iteration is a broadcast
of the model at the rate the plan gives the job plus the compute time; when a
plan changes, the remaining iterations go on at the new rate (flow level: the
rate is the plan's, whether or not the job is sending at that instant). A job
leaves after its iterations; its JCT is departure − arrival (queueing included).

Measured: each job's JCT; the bits the fabric carries (Σ over directed links of
copies × model bits × iterations, the host links included); after every event
the tables in use against the budgets; the switch entries each new plan
rewrites (`entry_changes`: per switch and job, the replication entry added,
removed or changed; rates, hence meters, are not counted).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from controller import planner
from controller.algorithm import admission
from controller.algorithm.admission import NotIncremental
from controller.algorithm.model import Instance, Job, Plan, Structure, Topology
from controller.algorithm.validate import plan_violations
from controller.config.schema import PlannerConfig
from controller.core.planning import ADMISSION_GUARD
from controller.offline.cluster_workload import JobSpec

EPS_S = 1e-9


@dataclass(frozen=True)
class JobResult:
    id: str
    workers: int
    arrival_s: float
    start_s: float
    end_s: float
    min_duration_s: float  # iterations × (model / host link rate + compute): alone on the fabric, no queue

    @property
    def jct_s(self) -> float:
        return self.end_s - self.arrival_s


@dataclass(frozen=True)
class Sample:
    """The served plan right after one event."""

    time_s: float
    running: int
    queued: int
    lam: float
    groups_used: int
    group_budget: int  # Σ over switches with a finite group budget
    max_group_share: float  # the fullest switch's groups ÷ its budget
    entries_used: int
    entry_budget: int


@dataclass(frozen=True)
class SimResult:
    policy: str
    jobs: tuple[JobResult, ...]  # in arrival order
    samples: tuple[Sample, ...]
    fabric_bits: float
    entries_rewritten: int
    plans: int  # plans served
    full_plans: int  # full planner runs (re-optimisations included)
    reoptimisations: Mapping[str, int]  # adopted / kept
    end_s: float
    plan_seconds: float  # wall-clock time the planner took (its plans' runtime_s)
    violations: tuple[str, ...]  # `plan_violations` of every served plan (only with `check`)
    checked: int  # plans checked


@dataclass
class _Run:
    spec: JobSpec
    job: Job
    start_s: float
    remaining: float  # iterations
    rate: float = 0.0
    copies: int = 0  # Σ copies over the links of its structure

    def iteration_s(self) -> float:
        return self.spec.model_bits / self.rate + self.spec.compute_s if self.rate > 0 else math.inf


def entry_keys(plan: Plan) -> dict[tuple[int, str], tuple]:
    """Per (switch, job) of `plan`, what the switch's entry for the job does: its
    tree children and the workers it emits unicast copies to."""
    keys: dict[tuple[int, str], tuple] = {}
    for jp in plan.jobs:
        s: Structure = jp.structure
        for v in s.entries:
            children = tuple(sorted(c for p, c in s.tree if p == v))
            emitted = tuple(sorted(w for e, w in s.branches if e == v))
            keys[(v, jp.job.id)] = (children, emitted)
    return keys


def entry_changes(before: Mapping[tuple[int, str], tuple], after: Mapping[tuple[int, str], tuple]) -> int:
    """Entries added, removed or changed between two plans' `entry_keys`."""
    return sum(1 for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def host_rates(topology: Topology) -> dict[str, float]:
    """Each host's link capacity (the largest of its links)."""
    out: dict[str, float] = {}
    for link in topology.links:
        for end in (link.a, link.b):
            node = topology.nodes[topology.index[end]]
            if not node.is_switch:
                out[end] = max(out.get(end, 0.0), link.capacity)
    return out


def policy_name(settings: PlannerConfig) -> str:
    return f"{settings.algorithm} (incremental)" if settings.incremental else settings.algorithm


class _Cluster:
    """The state of one simulation (see the module docstring)."""

    def __init__(self, topology: Topology, settings: PlannerConfig, rng: random.Random, check: bool) -> None:
        self.topo = topology
        self.s = settings
        self.rng = rng
        self.check = check
        self.rates = host_rates(topology)
        self.free = sorted(self.rates)
        self.running: dict[str, _Run] = {}
        self.queue: list[JobSpec] = []
        self.done: list[JobResult] = []
        self.served: Plan | None = None
        self.keys: dict[tuple[int, str], tuple] = {}
        self.reopt_at: float | None = None
        self.full_lam = 0.0
        self.now = 0.0
        self.bits = 0.0
        self.rewritten = 0
        self.plans = self.full_plans = self.checked = 0
        self.plan_seconds = 0.0
        self.reopts = {"adopted": 0, "kept": 0}
        self.violations: list[str] = []
        self.samples: list[Sample] = []

    # -- jobs ---------------------------------------------------------------------------------
    def start_queued(self) -> bool:
        started = False
        for spec in list(self.queue):
            if spec.workers + 1 > len(self.free):
                continue
            hosts = self.rng.sample(self.free, spec.workers + 1)
            taken = set(hosts)
            self.free = [h for h in self.free if h not in taken]
            job = Job(spec.id, hosts[0], tuple(hosts[1:]), self.rates[hosts[0]])
            self.running[spec.id] = _Run(spec, job, self.now, float(spec.iterations))
            self.queue.remove(spec)
            started = True
        return started

    def advance(self, t: float) -> None:
        dt = t - self.now
        for run in self.running.values():
            it = run.iteration_s()
            if it < math.inf and dt > 0:
                done = min(run.remaining, dt / it)
                run.remaining -= done
                self.bits += done * run.spec.model_bits * run.copies
        self.now = t

    def next_departure(self) -> float:
        return min((self.now + r.remaining * r.iteration_s() for r in self.running.values()), default=math.inf)

    def depart(self) -> bool:
        gone = [jid for jid, r in self.running.items() if r.remaining * r.iteration_s() <= EPS_S]
        for jid in gone:
            run = self.running.pop(jid)
            self.free = sorted([*self.free, run.job.ps, *run.job.workers])
            self.done.append(JobResult(jid, run.spec.workers, run.spec.arrival_s, run.start_s, self.now,
                                       run.spec.min_duration_s(self.rates[run.job.ps])))
        return bool(gone)

    # -- plans --------------------------------------------------------------------------------
    def instance(self) -> Instance:
        return Instance(self.topo, tuple(r.job for r in self.running.values()))

    def full(self, inst: Instance, warm: bool) -> Plan:
        warm_from = (self.served, self.topo) if warm and self.served is not None else None
        plan = planner.run(inst, self.s.algorithm, self.s.objective, self.s.seed, warm_from=warm_from)
        self.full_plans += 1
        self.plan_seconds += plan.runtime_s
        self.full_lam = plan.lam
        return plan

    def replan(self) -> None:
        """A change of the job set, planned as the service plans it."""
        inst = self.instance()
        plan = None
        if self.s.incremental and self.served is not None:
            try:
                plan = planner.run_incremental(inst, self.served, self.topo, self.s.objective)
                self.plan_seconds += plan.runtime_s
            except NotIncremental:
                plan = None
        if plan is None:
            plan = self.full(inst, warm=False)
        self.install(inst, plan)
        if plan.algorithm == admission.ALGORITHM:
            after = self.s.debounce_s if plan.lam < ADMISSION_GUARD * self.full_lam else self.s.reoptimise_after_s
            self.reopt_at = self.now + after
        else:
            self.reopt_at = None

    def reoptimise(self) -> None:
        assert self.served is not None
        inst = self.instance()
        full = self.full(inst, warm=self.s.reoptimise_warm_start)
        budget = admission.churn_budget(len(inst.jobs), self.s.reoptimise_max_churn, self.s.reoptimise_max_churn_share)
        decided = admission.reoptimisation(inst, self.served, self.topo, full, self.s.objective,
                                           budget, self.s.reoptimise_min_gain)
        self.reopt_at = None
        self.reopts["adopted" if decided.adopted else "kept"] += 1
        if decided.adopted:
            self.install(inst, decided.plan)
            if decided.bounded:
                self.reopt_at = self.now + self.s.reoptimise_after_s

    def install(self, inst: Instance, plan: Plan) -> None:
        if self.check:
            self.checked += 1
            self.violations += [f"t={self.now:.3f} s: {v}" for v in plan_violations(inst, plan)]
        keys = entry_keys(plan)
        self.rewritten += entry_changes(self.keys, keys)
        self.keys = keys
        self.served = plan
        self.plans += 1
        for jp in plan.jobs:
            run = self.running[jp.job.id]
            run.rate = jp.rate
            run.copies = sum(c for _, c in jp.structure.copies)

    def sample(self) -> None:
        p = self.served
        switches = p.switches if p is not None else ()
        g_used = sum(s.groups_used for s in switches)
        g_budget = sum(s.group_capacity for s in switches if s.group_capacity is not None)
        shares = [s.groups_used / s.group_capacity for s in switches if s.group_capacity]
        self.samples.append(Sample(
            self.now, len(self.running), len(self.queue), p.lam if p is not None else 1.0, g_used, g_budget,
            max(shares, default=0.0), sum(s.entries_used for s in switches),
            sum(s.entry_capacity for s in switches if s.entry_capacity is not None)))


def simulate(topology: Topology, stream: tuple[JobSpec, ...], settings: PlannerConfig, rng: random.Random,
             check: bool = False) -> SimResult:
    """Run `stream` on `topology` under the planning policy `settings` until every
    job has left (see the module docstring). With `check`, every served plan is
    validated (`algorithm.validate.plan_violations`) and the violations returned."""
    c = _Cluster(topology, settings, rng, check)
    hosts = len(c.free)
    for spec in stream:
        if spec.workers + 1 > hosts:
            raise ValueError(f"job {spec.id}: {spec.workers} workers and a PS need more than the {hosts} hosts")
    if any(b.arrival_s < a.arrival_s for a, b in zip(stream, stream[1:])):
        raise ValueError("stream: arrivals must be in time order")
    i = 0
    while i < len(stream) or c.running or c.queue:
        t_arrival = stream[i].arrival_s if i < len(stream) else math.inf
        t_departure = c.next_departure()
        t_reopt = c.reopt_at if c.reopt_at is not None else math.inf
        t = min(t_arrival, t_departure, t_reopt)
        if t == math.inf:
            raise RuntimeError(f"the simulation stalled at t={c.now:.1f} s: {len(c.running)} jobs without a rate")
        c.advance(max(t, c.now))
        changed = c.depart()
        while i < len(stream) and stream[i].arrival_s <= c.now:
            c.queue.append(stream[i])
            i += 1
        changed = c.start_queued() or changed
        if changed:
            c.replan()
        elif c.reopt_at is not None and c.now >= c.reopt_at:
            c.reoptimise()
        c.sample()
    by_arrival = {spec.id: n for n, spec in enumerate(stream)}
    jobs = tuple(sorted(c.done, key=lambda r: by_arrival[r.id]))
    return SimResult(policy_name(settings), jobs, tuple(c.samples), c.bits, c.rewritten, c.plans, c.full_plans,
                     dict(c.reopts), c.now, c.plan_seconds, tuple(c.violations), c.checked)


def baseline_settings(algorithm: str, seed: int = 0) -> PlannerConfig:
    """A controller planning every change in full with `algorithm` (no admission)."""
    return PlannerConfig(algorithm=algorithm, incremental=False, seed=seed)


def controller_settings(reoptimise_after_s: float, max_churn: int = 0, min_gain: float = 0.01,
                        seed: int = 0) -> PlannerConfig:
    """The controller with `planner.incremental` (lp-rounding, admission between re-optimisations),
    its churn budget `max_churn` jobs alone (0: no limit), as a config that sets
    `planner.reoptimise_max_churn` without the share."""
    return dataclasses.replace(PlannerConfig(), algorithm="lp-rounding", incremental=True, seed=seed,
                               reoptimise_after_s=reoptimise_after_s, reoptimise_max_churn=max_churn,
                               reoptimise_min_gain=min_gain, reoptimise_max_churn_share=0.0)
