"""The plan being served: one immutable record, swapped whole after each plan.

Every reader (a job's answer, GET /plan, /switches, /metrics, `devices.table_full`)
takes `ServedPlan.current` once and reads everything from that record, so no
answer mixes two plan generations. Only the planning loop writes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from controller.algorithm.model import JobPlan, Plan, Topology
from controller.algorithm.phases import applied
from controller.core.updates import PlanUpdate, SwitchEntries, TranslationInputs


@dataclass(frozen=True)
class PlanSummary:
    """The plan being served, as a job's answer and GET /plan describe it: its
    generation, algorithm, λ and LP bound (None: not computed for this job set
    yet, e.g. an incremental plan before the next full plan), and its churn:
    jobs of the previous plan whose structure it changed, and the entries the
    backends' translations added, changed or removed (in all, and per backend)."""

    generation: int
    algorithm: str
    lam: float
    lp_bound: float | None
    churn_jobs: int
    entries_written: int
    computed_at: float | None = None  # Unix time the plan was installed
    entries_by_backend: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Served:
    """One served plan: `plan` on `topology` (the full topology, what the API
    reads), the `inputs` the backends translated it from, when it was installed
    (Unix time), the jobs whose structure it changed, and what each backend
    reported (`written`: backend -> entries; `switch_entries`). `rates`: the
    phased jobs' rates now (`core.phases`; the others at their planned rates),
    `broadcasting` those of them broadcasting: what the switches police, where
    `plan` keeps the planned rates (what the planning loop plans from)."""

    generation: int
    plan: Plan
    topology: Topology
    inputs: TranslationInputs
    computed_at: float
    churn_jobs: int
    written: Mapping[str, int] = field(default_factory=dict)
    switch_entries: Mapping[str, SwitchEntries] = field(default_factory=dict)
    rates: Mapping[str, float] = field(default_factory=dict)
    broadcasting: frozenset[str] = frozenset()

    def update(self) -> PlanUpdate:
        """What the backends translate: this plan at the rates the switches police now
        (`rates` applied, on the full topology and on the planning network alike)."""
        if not self.rates:
            return PlanUpdate(self.generation, self.plan, self.inputs)
        return PlanUpdate(self.generation, applied(self.plan, self.rates),
                          dataclasses.replace(self.inputs, plan=applied(self.inputs.plan, self.rates)))

    @cached_property
    def planned(self) -> Mapping[str, JobPlan]:
        """Job id -> its part of the plan (over the positions an admission keeps with
        its plan, `Plan.loads`: a registration's answer then passes over no job)."""
        loads = self.plan.loads
        if loads is not None and loads.jobs is self.plan.jobs:
            return _ByPosition(loads.position, self.plan.jobs)
        return {jp.job.id: jp for jp in self.plan.jobs}

    def summary(self) -> PlanSummary:
        return PlanSummary(
            self.generation, self.plan.algorithm, self.plan.lam, self.plan.lp_bound, self.churn_jobs,
            sum(self.written.values()), self.computed_at, dict(self.written),
        )

    def with_lp_bound(self, lp_bound: float) -> Served:
        """This record with the LP bound of its job set (computed by a full plan of
        the same jobs that was not adopted)."""
        return dataclasses.replace(
            self, plan=dataclasses.replace(self.plan, lp_bound=lp_bound),
            inputs=dataclasses.replace(self.inputs, plan=dataclasses.replace(self.inputs.plan, lp_bound=lp_bound)),
        )


class ServedPlan:
    """Holds the served plan (`current`, None before the first plan)."""

    def __init__(self) -> None:
        self.current: Served | None = None

    def plan(self) -> Plan | None:
        served = self.current
        return served.plan if served is not None else None

    def summary(self) -> PlanSummary | None:
        """The plan being served (None before the first)."""
        served = self.current
        return served.summary() if served is not None else None

    def view(self) -> tuple[Plan | None, Topology | None, PlanSummary | None]:
        """The plan, the topology its indices refer to and its summary, together."""
        served = self.current
        if served is None:
            return None, None, None
        return served.plan, served.topology, served.summary()


class _ByPosition(Mapping[str, JobPlan]):
    """Job id -> its part of the plan, read through a map of job id -> position."""

    def __init__(self, position: Mapping[str, int], jobs: tuple[JobPlan, ...]) -> None:
        self._position, self._jobs = position, jobs

    def __getitem__(self, job_id: str) -> JobPlan:
        return self._jobs[self._position[job_id]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._position)

    def __len__(self) -> int:
        return len(self._position)

