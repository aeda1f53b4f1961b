"""The job registry: the registered jobs and their group addresses (docs/architecture.md).

`JobRegistry` owns the jobs: their validation (`validate_job`: every host known,
workers non-empty and distinct, the PS not among them, demand and weight
positive, finite and within `api.max_demand` / `api.max_weight`, at most
`api.limits.max_workers` workers, a well-formed id; at most `api.limits.max_jobs`
jobs, checked in `add` under the lock), the `JobStore` they are kept in (loaded
at start-up, each with its stored group address given back), their multicast
group addresses (`GroupAddressPool`: a deleted job's address goes back to the
pool only once a plan without it is in place, `release_addresses`), and, in a
learned network, the jobs waiting for hosts not located yet.

Failed jobs stay registered, unplanned, until their owner deletes them: a job
whose hosts were never found within `discovery.host_timeout_s`
(`check_waiting`), or one the planner failed with (`fail`, called by planning:
`core.culprits`). A failed job is never planned again (it would break planning
again); its group address goes back to the pool like a deleted job's once a plan
without it is in place (`release_addresses`; stored as none, the status shows
none). A planner failure is also kept in the store's state table
(`FAILED_STATE_KEY`: job id -> reason, only registered jobs), so a restart does
not plan a known-bad job again: it comes back failed, without an address. A
host timeout is not kept: a restart waits for the hosts again (as for every
job), the job getting an address back. It knows nothing of plans or switches.

Host names and addresses are resolved with `Wiring.node_kind` and
`Hosts.by_ip` / `Hosts.name_for`. Every job change is counted in `Changes`
(kind "jobs": admitted without a full plan with `planner.incremental`); the
registry shares the core's lock. A job's status is read together with the
served plan (`ServedPlan`), so an answer never mixes two plan generations.

Every job has a broadcast key (`auth_key`, 32 random bytes: its NORM objects are
authenticated with it, controller/client/broadcast.py): the registrant's, or one
made here. `add` gives it back only to the registration that created the job,
and to a retry of it that carries the same key; nothing else (answers, lists,
plans, metrics, logs) ever shows it.

Every job has an owner (`StoredJob.tenant`: a tenant's name, None for the
admin's). The job changes and views take the `Principal` asking (`core.tenants`,
the admin by default): a tenant sees, changes and deletes only its own jobs
(another's job is "no job with id", as if it did not exist), and its
registrations are held to its quotas (`check_quota`) under the lock that also
covers the store write.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hmac
import ipaddress
import itertools
import logging
import math
import operator
import re
import secrets
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from controller.addressing.groups import AddressPoolExhausted, GroupAddressPool
from controller.algorithm.model import Job, JobPlan, Topology
from controller.config import Config
from controller.core.changes import Changes
from controller.core.errors import DuplicateJob, InvalidJob, ServiceError, Unavailable, UnknownJob
from controller.core.hosts import Hosts
from controller.core.served import PlanSummary, Served, ServedPlan
from controller.core.tenants import ADMIN, Principal, check_quota, may_see
from controller.core.wiring import Wiring
from controller.store.base import DuplicateGroupAddress, DuplicateJobId, Store, StoredJob, StoreError
from controller.store.records import JOB_ID_PATTERN  # one rule for the API and the stores

log = logging.getLogger(__name__)
_JOB, _GROUP_ADDRESS = operator.attrgetter("job"), operator.attrgetter("group_address")

_JOB_ID_RE = re.compile(JOB_ID_PATTERN)
AUTH_KEY_BYTES = 32
FAILED_STATE_KEY = "failed_jobs"  # the store's state: job id -> why the planner failed with it
_B64URL_RE = re.compile(r"^[A-Za-z0-9_-]+={0,2}$")


def decode_auth_key(value: object) -> bytes:
    """A job key from the API: base64url (padding optional) of exactly 32 bytes,
    or `InvalidJob` naming the field `auth_key`."""
    if not isinstance(value, str) or not _B64URL_RE.fullmatch(value):
        raise InvalidJob("auth_key must be base64url text", "auth_key", "invalid_auth_key")
    try:
        key = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise InvalidJob("auth_key must be base64url text", "auth_key", "invalid_auth_key") from None
    if len(key) != AUTH_KEY_BYTES:
        raise InvalidJob(f"auth_key must decode to exactly {AUTH_KEY_BYTES} bytes, not {len(key)}",
                         "auth_key", "invalid_auth_key")
    return key


def encode_auth_key(key: bytes) -> str:
    """A job key as the API answers it: base64url without padding."""
    return base64.urlsafe_b64encode(key).rstrip(b"=").decode("ascii")


def planned_as(planned: Job, registered: Job) -> bool:
    """Whether `planned` (a job of a plan) is `registered` as planning saw it: the
    same job, its demand perhaps capped to its PS's link (`planning.effective_jobs`)."""
    return planned.demand <= registered.demand and dataclasses.replace(registered, demand=planned.demand) == planned


def spec_differences(registered: Job, job: Job) -> list[str]:
    """The fields of the spec where `job` differs from `registered` (both validated,
    so host names are resolved: an IPv4 address and its host's name are the same).
    The workers' order does not matter: it does not change the plan's groups."""
    differs = []
    if registered.ps != job.ps:
        differs.append("ps")
    if set(registered.workers) != set(job.workers):
        differs.append("workers")
    if registered.demand != job.demand:
        differs.append("demand")
    if registered.weight != job.weight:
        differs.append("weight")
    return differs


# -- views ------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobStatus:
    """A registered job, its group address, and its part of the current plan
    (None while no plan includes this job as it is now)."""

    job: Job
    group_address: str | None  # None: a failed job, its address released
    seq: int
    planned: JobPlan | None
    # hosts of the job the controller has not located yet (learned network only):
    # the job waits for them, unplanned
    missing_hosts: tuple[str, ...] = ()
    # the topology `planned` refers to (its node and edge indices)
    topology: Topology | None = None
    # why the job failed (hosts never found within `discovery.host_timeout_s`, or
    # the planner failed with it); it stays registered, unplanned, until deleted
    error: str | None = None
    # the rate its switches police now: the planned one, or its phase's (`core.phases`)
    rate: float | None = None
    # a phased job: broadcasting now or not; None: it never announced a phase
    broadcasting: bool | None = None


# -- the registry ---------------------------------------------------------------------------


class JobRegistry:
    """The registered jobs, their group addresses and their store (see the module docstring).

    `id_factory` names jobs posted without an id. The stored jobs are loaded (and
    validated against the network) at once: a `StoreError` if they do not fit it.
    """

    def __init__(
        self,
        config: Config,
        wiring: Wiring,
        hosts: Hosts,
        changes: Changes,
        served: ServedPlan,
        store: Store,
        *,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        self.config = config
        self.discovers = config.discovers
        self._wiring = wiring
        self._hosts = hosts
        self._changes = changes
        self._served = served
        self._store = store
        self._clock = changes.clock
        self._lock = changes.lock
        self._id_factory = id_factory or (lambda: f"job-{uuid.uuid4().hex[:12]}")
        self._waiting_since: dict[str, float] = {}  # job -> when it was registered (learned network)
        self._failed: dict[str, str] = {}  # job -> why it failed
        self._kept_failures: dict[str, str] = {}  # the planner failures, as stored (FAILED_STATE_KEY)
        self._pool = GroupAddressPool(config.multicast.group_pool)
        self._jobs: dict[str, StoredJob] = {}
        self._tenants = {t.name: t for t in config.api.tenants}  # name -> its quotas
        # with several instances (etcd store) only the leader writes: it repairs
        # addresses when it takes over (`reload`), an instance starting up does not
        self._restore(store_changes=config.store.backend != "etcd")

    def restart_waits(self) -> None:
        """A restart restarts the wait of every job for its hosts (a learned network)."""
        self._waiting_since = {j: self._clock() for j in self._jobs}

    def __len__(self) -> int:
        return len(self._jobs)

    # -- start-up -----------------------------------------------------------------------

    def reload(self, store_changes: bool = True) -> None:
        """Load the jobs again from the store (another controller instance may have
        changed them: docs/ha.md), forgetting the ones held in memory; without
        `store_changes` nothing is written back (a follower)."""
        with self._lock:
            self._jobs = {}
            self._pool = GroupAddressPool(self.config.multicast.group_pool)
            self._failed = {}
            self._kept_failures = {}
            self._restore(store_changes)
            if self.discovers:
                self._waiting_since = {j: self._waiting_since.get(j, self._clock()) for j in self._jobs}

    def _restore(self, store_changes: bool = True) -> None:
        """Load the stored jobs and give each its stored group address back.

        The pool only hands out lowest-free addresses; to put it in the state
        "these jobs hold these addresses" it is filled with placeholders up to the
        highest stored address, and each placeholder is swapped for its job.
        A job whose address is missing, outside the pool or taken gets a new one.
        """
        stored = self._store.jobs()
        problems = []
        for sj in stored:
            j = sj.job
            try:
                # stored before a ceiling was lowered: kept (planning caps its demand to its PS's link)
                valid = self.validate_job(j.ps, list(j.workers), j.demand, j.weight, j.id, ceilings=False)
            except InvalidJob as e:
                problems.append(f"job {j.id!r}: {e.field}: {e.message}")
                continue
            if valid != j:
                problems.append(f"job {j.id!r}: its hosts resolve to {valid.ps} -> {', '.join(valid.workers)}")
        if problems:
            raise StoreError(
                f"{self._store.path}: stored jobs do not fit the configured topology ({'; '.join(problems[:5])}); "
                "fix the topology, or delete them from the store (docs/controller.md)"
            )
        kept = self._stored_failures({sj.job.id for sj in stored})
        self._kept_failures = dict(kept)
        self._failed.update(kept)
        pool = self._pool
        wanted: dict[ipaddress.IPv4Address, str] = {}
        for sj in stored:
            if sj.group_address is None or sj.job.id in kept:
                continue
            try:
                ip = ipaddress.IPv4Address(sj.group_address)
            except ValueError:
                continue
            net = pool.network
            usable = net.num_addresses <= 2 or ip not in (net.network_address, net.broadcast_address)
            if ip in net and usable and ip not in wanted:
                wanted[ip] = sj.job.id
        placeholder_of: dict[ipaddress.IPv4Address, str] = {}
        if wanted:
            top = max(wanted)
            n = 0
            while True:
                name = f"\x00restore-{n}"  # never a valid job id
                n += 1
                ip = pool.address(name)
                placeholder_of[ip] = name
                if ip >= top:
                    break
            for ip in sorted(wanted):
                pool.release(placeholder_of.pop(ip))
                got = pool.address(wanted[ip])
                if got != ip:  # the pool's lowest-free rule changed under us
                    raise RuntimeError(f"restoring group address {ip} of job {wanted[ip]} gave {got}")
            for name in placeholder_of.values():
                pool.release(name)
        changed: dict[str, str | None] = {}
        for sj in stored:
            if sj.job.id in kept:  # failed with the planner before the restart: no address
                if sj.group_address is not None:
                    changed[sj.job.id] = None
                self._jobs[sj.job.id] = StoredJob(sj.job, None, sj.seq, sj.auth_key)
                continue
            held = sj.job.id in pool
            address = str(pool.address(sj.job.id))
            if not held:
                changed[sj.job.id] = address
                log.warning("job %s: group address %s not restorable, now %s", sj.job.id, sj.group_address, address)
            self._jobs[sj.job.id] = dataclasses.replace(sj, group_address=address)
        if changed and store_changes:
            self._store.set_group_addresses(changed)

    def _stored_failures(self, registered: set[str]) -> dict[str, str]:
        """The planner failures kept in the store, of the `registered` jobs (anything
        else stored under `FAILED_STATE_KEY` is ignored)."""
        raw = self._store.get_state(FAILED_STATE_KEY)
        if not isinstance(raw, dict):
            return {}
        return {j: r for j, r in raw.items() if j in registered and isinstance(r, str)}

    # -- validation ------------------------------------------------------------------------

    def resolve_host(self, value: object, field: str) -> str:
        """The host name for `value`, a host name of the topology or a host's IPv4 address."""
        if not isinstance(value, str) or not value:
            raise InvalidJob(f"{field}: expected a host name or an IPv4 address", field, "unknown_host")
        kind = self._wiring.node_kind(value)
        if kind == "host":
            return value
        if kind == "switch":
            raise InvalidJob(f"{value!r} is a switch, not a host", field, "unknown_host")
        if self.discovers and value in self.config.hosts:
            return value  # a configured name, not located yet
        try:
            ip = ipaddress.IPv4Address(value)
        except ValueError:
            raise InvalidJob(f"unknown host {value!r}", field, "unknown_host") from None
        name = self._hosts.by_ip(str(ip))
        if name is None and self.discovers:
            if ip.is_multicast or ip.is_unspecified or ip.is_loopback or ip == ipaddress.IPv4Address("255.255.255.255"):
                raise InvalidJob(f"{ip} is not a host address", field, "unknown_host")
            return self._hosts.name_for(str(ip))  # not seen yet: the job waits for it
        if name is None:
            raise InvalidJob(f"no host has the IPv4 address {ip}", field, "unknown_host")
        return name

    def validate_job(
        self,
        ps: object,
        workers: object,
        demand: object,
        weight: object = 1.0,
        job_id: object = None,
        *,
        ceilings: bool = True,
    ) -> Job:
        """A `Job` with host names resolved, or `InvalidJob` naming the field. With
        `ceilings`, a demand above `api.max_demand`, a weight above `api.max_weight`
        or more workers than `api.limits.max_workers` is refused (`demand_too_large`,
        `weight_too_large`, `too_many_workers`); stored jobs are loaded without them."""
        if job_id is not None and (not isinstance(job_id, str) or not _JOB_ID_RE.fullmatch(job_id)):
            raise InvalidJob(
                "a job id is 1 to 64 letters, digits, '.', '_', ':' or '-', starting with a letter or digit",
                "id",
                "invalid_id",
            )
        ps_name = self.resolve_host(ps, "ps")
        if not isinstance(workers, (list, tuple)):
            raise InvalidJob("workers must be a list of hosts", "workers", "empty_workers")
        if not workers:
            raise InvalidJob("a job needs at least one worker", "workers", "empty_workers")
        most = self.config.api.limits.max_workers
        if ceilings and len(workers) > most:
            raise InvalidJob(f"{len(workers)} workers is more than api.limits.max_workers ({most})", "workers",
                             "too_many_workers")
        position: dict[str, int] = {}  # worker name -> its first index
        for i, w in enumerate(workers):
            at = f"workers[{i}]"
            name = self.resolve_host(w, at)
            if name == ps_name:
                raise InvalidJob(f"the PS {ps_name} is listed among its own workers", at, "ps_among_workers")
            if name in position:
                raise InvalidJob(
                    f"worker {name} is listed twice (also workers[{position[name]}])", at, "duplicate_worker"
                )
            position[name] = i
        names = list(position)
        for what, value, code in (("demand", demand, "invalid_demand"), ("weight", weight, "invalid_weight")):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InvalidJob(f"{what} must be a positive finite number (bit/s for demand)", what, code)
        api = self.config.api
        if ceilings and demand > api.max_demand:
            raise InvalidJob(f"demand {demand:g} bit/s is above api.max_demand ({api.max_demand:g} bit/s)",
                             "demand", "demand_too_large")
        if ceilings and weight > api.max_weight:
            raise InvalidJob(f"weight {weight:g} is above api.max_weight ({api.max_weight:g})", "weight",
                             "weight_too_large")
        return Job(job_id if job_id is not None else "", ps_name, tuple(names), float(demand), float(weight))

    # -- job changes ---------------------------------------------------------------------------

    def add(
        self, job: Job, new_id: bool = False, *, existing_ok: bool = False, auth_key: bytes | None = None,
        principal: Principal = ADMIN,
    ) -> tuple[str, int | None, bytes | None]:
        """Register `job` (validated), under a new id from `id_factory` if
        `new_id`: store it with a group address and its key (`auth_key`, or a
        random one) and mark a change. Returns (its id, the change count a plan
        must cover, its key). Nothing changes if it is refused.

        With `existing_ok`, a job already registered under `job.id` with the same
        spec (`same_spec`) is no error: nothing changes and the count is None. A
        retried registration whose first answer was lost thus finds its job; the
        key comes back only if the retry carries the same key (else None): the
        key is its registrant's, and no one else's.

        The job belongs to `principal` (a tenant's registration is held to its
        quotas: `QuotaExceeded`). An id another tenant holds is a `DuplicateJob`
        that says nothing of that job."""
        if auth_key is not None and len(auth_key) != AUTH_KEY_BYTES:
            raise InvalidJob(f"auth_key must be exactly {AUTH_KEY_BYTES} bytes", "auth_key", "invalid_auth_key")
        with self._lock:
            if new_id:
                job_id = self._id_factory()
                while job_id in self._jobs:
                    job_id = self._id_factory()
                job = Job(job_id, job.ps, job.workers, job.demand, job.weight)
            if job.id in self._jobs and not may_see(principal, self._jobs[job.id].tenant):
                raise DuplicateJob(f"the job id {job.id!r} is taken; choose another", "id")
            if job.id in self._jobs:
                differs = spec_differences(self._jobs[job.id].job, job)
                if not differs and existing_ok:
                    stored_key = self._jobs[job.id].auth_key
                    same = auth_key is not None and stored_key is not None and hmac.compare_digest(auth_key, stored_key)
                    return job.id, None, stored_key if same else None
                what = f"with a different {', '.join(differs)}" if differs else "with the same spec"
                raise DuplicateJob(f"a job with id {job.id!r} exists {what}", "id")
            most = self.config.api.limits.max_jobs
            if len(self._jobs) >= most:  # under the lock, before the store write: never one more
                raise ServiceError(f"{most} jobs are registered (api.limits.max_jobs); delete one first", None,
                                   "too_many_jobs")
            limits = self._tenants.get(principal.tenant) if principal.tenant is not None else None
            if limits is not None:  # under the lock, as the store write below: no two registrations pass at once
                check_quota(limits, (sj.job for sj in self._jobs.values() if sj.tenant == principal.tenant), job)
            held = job.id in self._pool  # deleted, and its address not yet released
            try:
                address = str(self._pool.address(job.id))
            except AddressPoolExhausted as e:
                raise Unavailable(str(e), None, "pool_exhausted") from None
            try:
                key = auth_key if auth_key is not None else secrets.token_bytes(AUTH_KEY_BYTES)
                stored = self._store.add(job, address, key, principal.tenant)
            except DuplicateJobId:
                raise DuplicateJob(f"a job with id {job.id!r} exists", "id") from None
            except (DuplicateGroupAddress, ValueError) as e:
                if not held:
                    self._pool.release(job.id)
                raise ServiceError(str(e), None, "store_refused") from None
            except BaseException:
                if not held:
                    self._pool.release(job.id)
                raise
            self._jobs[job.id] = stored
            if self.discovers:
                self._waiting_since[job.id] = self._clock()
            return job.id, self._changes.mark(kind="jobs"), key

    def delete(self, job_id: str, principal: Principal = ADMIN) -> int:
        """Remove a job (one `principal` may see) and mark a change; returns the change
        count a plan must cover. Its group address stays held until `release_addresses`."""
        with self._lock:
            if job_id not in self._jobs or not may_see(principal, self._jobs[job_id].tenant):
                raise UnknownJob(f"no job with id {job_id!r}", "id")
            self._store.delete(job_id)
            del self._jobs[job_id]
            self._waiting_since.pop(job_id, None)
            self._failed.pop(job_id, None)
            if self._kept_failures.pop(job_id, None) is not None:
                self._keep_failures()
            return self._changes.mark(kind="jobs")

    def fail(self, failures: dict[str, str]) -> None:
        """The planner failed with these jobs (job id -> the planner's error; lock
        held): they are failed, never planned again until deleted, and the failure
        is kept in the store for a restart. Their addresses go back to the pool
        with the next plan installed (`release_addresses`)."""
        failures = {j: r for j, r in failures.items() if j in self._jobs}
        for job_id, reason in failures.items():
            self._failed[job_id] = (f"the planner failed with this job ({reason}); it is not planned: "
                                    "delete it, and post a corrected job")
            self._kept_failures[job_id] = self._failed[job_id]
        if failures:
            self._keep_failures()

    def _keep_failures(self) -> None:
        """Store the planner failures (only registered jobs: bounded by them). A store
        that cannot take it is logged: the failures hold until a restart."""
        try:
            self._store.put_state(FAILED_STATE_KEY, dict(self._kept_failures))
        except (StoreError, ValueError, OSError):
            log.exception("cannot store the failed jobs %s", ", ".join(sorted(self._kept_failures)))

    # -- what a re-plan reads and writes back -------------------------------------------------

    def plannable(self) -> tuple[Job, ...]:
        """The jobs to plan (lock held): not waiting for a host, not failed."""
        self.check_waiting(mark=False)
        kind, failed = self._wiring.node_kind, self._failed
        if not self.discovers:  # a declared topology's hosts never go, and every job's were checked against it
            if not failed:  # by builtins: a re-plan at k=48 reads 5,000 jobs here
                return tuple(map(_JOB, self._jobs.values()))
            return tuple(sj.job for sj in self._jobs.values() if sj.job.id not in failed)
        return tuple(sj.job for sj in self._jobs.values()
                     if sj.job.id not in failed and kind(sj.job.ps) == "host"
                     and all(kind(h) == "host" for h in sj.job.workers))

    def addresses(self) -> dict[str, str | None]:
        """Job -> its group address, for every registered job (lock held)."""
        return dict(zip(self._jobs.keys(), map(_GROUP_ADDRESS, self._jobs.values())))  # keyed by job id

    def release_addresses(self, planned: Iterable[str]) -> None:
        """A plan of the jobs `planned` is in place (lock held): the addresses of jobs
        deleted or failed before it go back to the pool (a failed job's is stored as
        none first; if the store refuses, it stays held until the next plan)."""
        planned = set(planned)
        dropped = [j for j in self._failed
                   if j in self._jobs and j not in planned and self._jobs[j].group_address is not None]
        if dropped:
            try:
                self._store.set_group_addresses({j: None for j in dropped})
            except (StoreError, ValueError, OSError):
                log.exception("cannot release the group addresses of the failed jobs %s", ", ".join(dropped))
            else:
                for j in dropped:
                    self._jobs[j] = dataclasses.replace(self._jobs[j], group_address=None)
                log.info("failed jobs %s: group addresses released", ", ".join(dropped))
        held = itertools.compress(self._jobs.keys(), map(operator.is_not, map(_GROUP_ADDRESS, self._jobs.values()),
                                                         itertools.repeat(None)))
        self._pool.hold_exactly(planned.union(held))

    # -- waiting jobs (a learned network) ---------------------------------------------------------

    def missing(self, job: Job) -> tuple[str, ...]:
        """The hosts of `job` that are not in the network (lock held)."""
        return tuple(h for h in (job.ps, *job.workers) if self._wiring.node_kind(h) != "host")

    def check_waiting(self, mark: bool = True) -> None:
        """Fail the jobs that have waited longer than `discovery.host_timeout_s` for
        hosts never found (lock held). A failed job is not planned until deleted.
        With `mark`, a job failing marks a change: the plan that follows releases
        its address (a plan round itself calls this without)."""
        if not self.discovers:
            return
        timeout = self.config.discovery.host_timeout_s
        now = self._clock()
        for job_id, since in list(self._waiting_since.items()):
            sj = self._jobs.get(job_id)
            if sj is None or job_id in self._failed:
                continue
            missing = self.missing(sj.job)
            if not missing:
                continue
            if now - since >= timeout:
                self._failed[job_id] = (
                    f"hosts {', '.join(missing)} not found within {timeout:g} s (asked for by ARP from every "
                    "edge port): check their addresses and that they are up, then post the job again"
                )
                log.warning("job %s failed: %s", job_id, self._failed[job_id])
                if mark:
                    self._changes.mark(kind="jobs")

    def _host_ip(self, name: str) -> str:
        """The IPv4 address of a host name of a learned network (configured, or the address itself)."""
        hc = self.config.hosts.get(name)
        return hc.ip if hc is not None else name

    def probe_targets(self) -> list[str]:
        """IPv4 addresses of the hosts that waiting jobs name and that were never
        seen: the southbound asks for them (ARP) out of every edge port."""
        with self._lock:
            self.check_waiting()
            out = {
                self._host_ip(h)
                for sj in self._jobs.values() if sj.job.id not in self._failed
                for h in self.missing(sj.job)
            }
            return sorted(out)

    # -- views ------------------------------------------------------------------------------

    def _status(self, sj: StoredJob, served: Served | None) -> JobStatus:
        jp = served.planned.get(sj.job.id) if served is not None else None
        if jp is not None and not planned_as(jp.job, sj.job):
            jp = None  # planned before it was deleted and posted again
        self.check_waiting()
        rate = broadcasting = None
        if jp is not None and served is not None:
            rate = served.rates.get(sj.job.id, jp.rate)
            broadcasting = (sj.job.id in served.broadcasting) if sj.job.id in served.rates else None
        return JobStatus(sj.job, sj.group_address, sj.seq, jp, self.missing(sj.job),
                         served.topology if served is not None else None, self._failed.get(sj.job.id), rate,
                         broadcasting)

    def statuses(self) -> list[JobStatus]:
        """Every registered job, in creation order, with its part of the served plan."""
        return self.answers()[0]

    def status(self, job_id: str) -> JobStatus:
        """One job, as in `statuses`; `UnknownJob` if there is none."""
        return self.answer(job_id)[0]

    def answers(self, principal: Principal = ADMIN) -> tuple[list[JobStatus], PlanSummary | None]:
        """Every job `principal` may see: its status and the summary of the plan they
        were read against, together (one plan generation)."""
        with self._lock:
            served = self._served.current
            return ([self._status(sj, served) for sj in self._jobs.values() if may_see(principal, sj.tenant)],
                    served.summary() if served is not None else None)

    def answer(self, job_id: str, principal: Principal = ADMIN) -> tuple[JobStatus, PlanSummary | None]:
        """A job's status and the summary of the plan it was read against, together
        (`UnknownJob` if `principal` may not see it)."""
        with self._lock:
            sj = self._jobs.get(job_id)
            if sj is None or not may_see(principal, sj.tenant):
                raise UnknownJob(f"no job with id {job_id!r}", "id")
            served = self._served.current
            return self._status(sj, served), (served.summary() if served is not None else None)

    def visible_ids(self, principal: Principal) -> set[str]:
        """The ids of the jobs `principal` may see."""
        with self._lock:
            return {j for j, sj in self._jobs.items() if may_see(principal, sj.tenant)}

    def job_for_address(self, address: str) -> str | None:
        """The job holding multicast group address `address`."""
        with self._lock:
            for job, sj in self._jobs.items():
                if sj.group_address == str(address):
                    return job
        return None

    def group_addresses(self) -> dict[str, str]:
        with self._lock:
            return {j: sj.group_address or "" for j, sj in self._jobs.items()}
