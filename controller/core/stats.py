"""The numbers /metrics and /healthz show: what the planning loop counts, and the
`Stats` record the service composes from every part of the core."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.core.devices import SwitchStatus


@dataclass
class PlanCounters:
    """What the planning loop counts (written with the core's lock held)."""

    replans: int = 0
    failures: int = 0
    plan_seconds_total: float = 0.0
    churn_jobs_total: int = 0
    entries_written_total: int = 0
    incremental_plans: int = 0  # plans made by admission (planner.incremental)
    host_joins: int = 0  # hosts that joined a learned network with the served plan carried over
    reoptimisations: dict[str, int] = field(default_factory=lambda: {"adopted": 0, "kept": 0})
    last_error: str | None = None
    failed_jobs: int = 0  # jobs failed because the planner failed with them (core.culprits)
    rate_updates: int = 0  # served plans published again at new phase rates (core.phases)


@dataclass(frozen=True)
class Stats:
    """Numbers for /metrics and /healthz."""

    jobs: int
    generation: int
    pending: bool
    lam: float | None
    throughput: float | None
    plan_seconds: float | None
    replans: int
    replan_failures: int
    plan_seconds_total: float
    last_error: str | None
    table_full_errors: int = 0
    backend_errors: Mapping[str, int] = field(default_factory=dict)  # backend -> refused messages or updates
    p4runtime_not_primary: int = 0
    packet_ins: Mapping[str, int] = field(default_factory=dict)  # kind ("arp", "ipv4") -> count
    refusals: Mapping[str, int] = field(default_factory=dict)  # what the controller refused from the wire, by kind
    switches: tuple[SwitchStatus, ...] = field(default=())
    link_flaps: int = 0  # downs of a link held down or back in the plan for less than link_hold_down_max_s
    # churn: jobs of the previous plan whose structure the last plan changed, and
    # the entries the backends' translations added, changed or removed (in all, and per backend)
    churn_jobs: int = 0
    churn_jobs_total: int = 0
    entries_written: int = 0
    entries_written_total: int = 0
    entries_by_backend: Mapping[str, int] = field(default_factory=dict)
    incremental_plans: int = 0  # plans made by admission (planner.incremental)
    host_joins: int = 0  # hosts that joined a learned network with the served plan carried over
    algorithm: str | None = None  # what made the served plan
    reoptimisations: Mapping[str, int] = field(default_factory=dict)  # "adopted" / "kept" -> count
    planner_failed_jobs: int = 0  # jobs failed because the planner failed with them (core.culprits)
    rate_updates: int = 0  # served plans published again at new phase rates (core.phases)

    @property
    def openflow_errors(self) -> int:
        return self.backend_errors.get("openflow", 0)

    @property
    def p4runtime_errors(self) -> int:
        return self.backend_errors.get("p4runtime", 0)
