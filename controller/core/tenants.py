"""Tenants: who asks (`Principal`), what it may see, and its quotas (docs/controller.md, Tenants).

The northbound identifies the principal of a request (the admin token, a
tenant's token, or nobody on an open loopback API: the admin) and passes it to
the core as a plain argument. The core decides from it alone:

- `may_see`: a tenant sees, changes and deletes only the jobs it owns (a job's
  `StoredJob.tenant`); the admin sees every job;
- `check_quota`: a tenant's registration within its limits
  (`config.TenantConfig`: jobs, total demand, workers per job), else
  `QuotaExceeded` naming the limit. `JobRegistry.add` calls it under the core's
  lock, in the same critical section as the store write, so two concurrent
  registrations cannot both pass one quota.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controller.algorithm.model import Job
from controller.config.schema import TenantConfig
from controller.core.errors import ServiceError


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: a tenant by name, or the admin (`tenant` None)."""

    tenant: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.tenant is None

    def __str__(self) -> str:
        return "admin" if self.tenant is None else f"tenant {self.tenant}"


ADMIN = Principal(None)


class QuotaExceeded(ServiceError):
    """A tenant's registration over one of its limits: code quota_jobs,
    quota_demand (429: wait for a job to end) or quota_workers (403: never allowed)."""

    code = "quota"


def may_see(principal: Principal, owner: str | None) -> bool:
    """Whether `principal` may see (and change) a job owned by `owner` (None: the admin's)."""
    return principal.tenant is None or principal.tenant == owner


def check_quota(limits: TenantConfig, owned: Iterable[Job], job: Job) -> None:
    """Refuse `job` if, with the jobs the tenant already `owned`, it would exceed one of
    `limits` (None: no limit). Call it under the lock that also guards the store write."""
    if limits.max_workers is not None and len(job.workers) > limits.max_workers:
        raise QuotaExceeded(
            f"tenant {limits.name}: a job may have at most {limits.max_workers} workers (quota max_workers), "
            f"this one has {len(job.workers)}", "workers", "quota_workers")
    owned = list(owned)
    if limits.max_jobs is not None and len(owned) + 1 > limits.max_jobs:
        raise QuotaExceeded(
            f"tenant {limits.name}: at most {limits.max_jobs} jobs (quota max_jobs), {len(owned)} registered; "
            "delete one first", None, "quota_jobs")
    if limits.max_demand is not None:
        total = sum(j.demand for j in owned)
        if total + job.demand > limits.max_demand:
            raise QuotaExceeded(
                f"tenant {limits.name}: total demand at most {limits.max_demand:g} bit/s (quota max_demand), "
                f"{total:g} bit/s registered, this job asks for {job.demand:g}", "demand", "quota_demand")
