"""The controller service: the core's facade (docs/architecture.md).

`ControllerService` builds the parts of the core and joins them; callers use the
parts directly:

- `wiring` (`core.wiring.Wiring`): the topology, declared or discovered, and its
  port map;
- `devices` (`core.devices.Devices`): the switches, their backends, connection
  state and limits (reported, learned from table-full errors, effective);
- `links` (`core.links.Links`): links down and held down, missing links, capacities;
- `hosts` (`core.hosts.Hosts`): hosts' MACs and the one host-learning decision
  both backends call (ARP, unknown-source IPv4);
- `jobs` (`core.jobs.JobRegistry`): the registered jobs, their group addresses,
  their store, their status against the served plan;
- `planning` (`core.planning.Planning`): the debounced planning loop; the
  backends subscribe to its `on_plan` and receive a `PlanUpdate` per plan;
- `served` (`core.served.ServedPlan`): the plan being served;
- `load` (`core.port_rates.LinkLoad`): measured link load; `counters`
  (`core.counters.Counters`): what the backends count.

The service itself only does what joins several parts: a job's registration
and deletion that wait for the plan that includes them (`register_job`,
`add_job`, `delete_job`), the statistics (`stats`), and reloading everything from
the store that another instance wrote (`reload_from_store`, docs/ha.md). It
knows nothing of HTTP, of os-ken or of P4Runtime: the backends are attached by
the process (`controller.app.run`).

Thread safety: one re-entrant lock (`changes.lock`) guards the state of every
part; planning runs outside it; the served plan is an immutable record swapped
whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from controller.algorithm.model import Topology
from controller.config import Config, Inventory
from controller.core.changes import Changes
from controller.core.counters import Counters
from controller.core.devices import Devices
from controller.core.hosts import Hosts
from controller.core.jobs import JobRegistry, JobStatus
from controller.core.links import Links
from controller.core.planning import Planning
from controller.core.port_rates import LinkLoad
from controller.core.remembered import Remembered
from controller.core.errors import NotPlanned
from controller.core.served import PlanSummary, ServedPlan
from controller.core.served_store import ServedStore
from controller.core.stats import Stats
from controller.core.tenants import ADMIN, Principal
from controller.core.wiring import Wiring
from controller.store.base import Store
from controller.store.factory import open_store


class ClusterRole(Protocol):
    """This instance's place in a cluster of instances sharing an etcd store
    (`controller.app.cluster.Cluster`, docs/ha.md), as the API, the metrics and
    the backends read it."""

    instance: str

    @property
    def leading(self) -> bool: ...

    def status(self) -> dict: ...

    def may_write(self, term: int) -> bool: ...

    def leader_url(self) -> str | None: ...

    def leader_term(self) -> int | None: ...


class ControllerService:
    """The core's parts, joined (see the module docstring).

    `topology` is the declared topology (`config.build_topology(config)`), None
    when the config declares none (the network is discovered); `clock` is read
    for the debounce and the link hold-down only (monotonic seconds); `store`
    defaults to the store `config.store` names; `id_factory` names jobs posted
    without an id.
    """

    def __init__(
        self,
        config: Config,
        topology: Topology | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        store: Store | None = None,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        self.config = config
        if topology is None and not config.discovers:
            raise ValueError("a topology is needed when the config declares one (config.build_topology)")
        self._owns_store = store is None
        self.store: Store = store if store is not None else open_store(config.store)
        # HA: this instance's role among several (app.run attaches it; None: the only instance)
        self.cluster: ClusterRole | None = None
        try:
            self.changes = Changes(clock, config.planner.debounce_s)
            self.served = ServedPlan()
            self.counters = Counters(clock)
            self.remembered = Remembered(self.store)
            # which backend each switch uses: said once, here, for every part and backend
            self.inventory = Inventory.of(config, topology)
            self.wiring = Wiring(config, topology, self.changes, self.counters)
            self.load = LinkLoad(clock, config.southbound.openflow.port_stats_s, self.wiring.topology_and_ports)
            self.devices = Devices(config, self.inventory, self.wiring, self.changes, self.served, self.load,
                                   self.counters)
            self.links = Links(config, self.wiring, self.devices, self.changes)
            self.hosts = Hosts(config, self.wiring, self.devices, self.changes, self.counters)
            self._restore_wiring()
            # the jobs: validated with the network's hosts, stored, with their group addresses
            self.jobs = JobRegistry(config, self.wiring, self.hosts, self.changes, self.served, self.store,
                                    id_factory=id_factory)
            if config.discovers:
                self.jobs.restart_waits()  # a restart restarts their wait
            jobs = self.jobs
            self.hosts.in_use = lambda: {h for j in jobs.plannable() for h in (j.ps, *j.workers)}
            self.planning = Planning(config, self.changes, self.served, self.wiring, self.devices, self.links,
                                     self.hosts, self.jobs, self.remembered, ServedStore(self.store, config.api.limits.max_jobs))
        except BaseException:
            if self._owns_store:
                self.store.close()
            raise

    def _restore_wiring(self) -> None:
        """What the wire taught before a restart (or another instance): the
        discovered network, or a declared topology's ports and MACs."""
        if self.config.discovers:
            self.wiring.use_discovered(self.remembered.restore_discovered())
            self.hosts.apply_pins()  # pinned hosts come from the config, not the store
            return
        topology, ports = self.wiring.topology_and_ports()
        observed = self.remembered.restore_wiring(topology, ports)
        if observed is not None:
            self.wiring.use_observed(observed.ports, observed.seen)
            self.hosts.use_macs(observed.host_macs)

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Plan once now, then re-plan in a worker thread as changes arrive."""
        self.planning.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the planning worker (a plan in progress is finished first)."""
        self.planning.stop(timeout)

    def close(self) -> None:
        """Stop, and close the store if the service opened it."""
        self.planning.stop()
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> ControllerService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reload_from_store(self, leading: bool) -> None:
        """Load the jobs and the discovered network, or a declared topology's
        observed wiring, again from the store, which another controller instance
        wrote (docs/ha.md): a follower keeping up (`leading` False: nothing is
        written back) or a new leader taking over. A re-plan follows (if the
        planning loop runs): a new leader's restores the structures its
        predecessor served (`core.served_store`)."""
        with self.changes.lock:
            self.jobs.reload(store_changes=leading)
            self.remembered.forget()
            self._restore_wiring()
            if leading:
                self.planning.restore_next()
            self.changes.mark()

    # -- jobs: a registration waits for the plan that includes it -----------------------------------
    def add_job(
        self,
        ps: object,
        workers: object,
        demand: object,
        weight: object = 1.0,
        job_id: str | None = None,
        *,
        wait: bool = True,
    ) -> JobStatus:
        """Register a job; with `wait`, return once a plan includes it (or after
        `planner.wait_s`; then `planned` is None)."""
        return self.register_job(ps, workers, demand, weight, job_id, wait=wait)[0]

    def register_job(
        self,
        ps: object,
        workers: object,
        demand: object,
        weight: object = 1.0,
        job_id: str | None = None,
        *,
        wait: bool = True,
        existing_ok: bool = False,
        auth_key: bytes | None = None,
        principal: Principal = ADMIN,
    ) -> tuple[JobStatus, bool, bytes | None]:
        """`add_job`, also saying whether the job is new, and its key for the
        registrant (`JobRegistry.add`: the job's key when this call created it,
        or is a retry carrying the same `auth_key`; else None). With
        `existing_ok`, a job registered under `job_id` with the same spec is
        answered as it is (False: nothing changed, nothing waited for); a
        different spec is still a `DuplicateJob`. The job belongs to `principal`
        (`core.tenants`: its quotas apply; the admin by default)."""
        job = self.jobs.validate_job(ps, workers, demand, 1.0 if weight is None else weight, job_id)
        new_id, target, key = self.jobs.add(job, new_id=job_id is None, existing_ok=existing_ok, auth_key=auth_key,
                                            principal=principal)
        if target is not None and wait:
            self.planning.wait_for(target)
        return self.jobs.answer(new_id, principal)[0], target is not None, key

    def delete_job(self, job_id: str, *, wait: bool = True, principal: Principal = ADMIN) -> None:
        """Remove a job `principal` may see; with `wait`, return once a plan without it
        is in place (or after `planner.wait_s`)."""
        target = self.jobs.delete(job_id, principal)
        if wait:
            self.planning.wait_for(target)

    def announce_broadcast(self, job_id: str, broadcasting: bool, *,
                           principal: Principal = ADMIN) -> tuple[JobStatus, PlanSummary | None]:
        """A job's client starts, renews or ends a broadcast (`core.phases`); the job's
        status at the rates that follow, once the backends have them. `UnknownJob`
        for a job `principal` may not see, `NotPlanned` for one no plan serves."""
        status, _ = self.jobs.answer(job_id, principal)
        if status.planned is None:
            raise NotPlanned(f"job {job_id} is not planned: it has no rate to raise or lower", "id")
        self.planning.announce(job_id, broadcasting)
        return self.jobs.answer(job_id, principal)

    # -- statistics ------------------------------------------------------------------------------
    def stats(self) -> Stats:
        """Numbers for /metrics and /healthz, from every part."""
        switches = tuple(self.devices.statuses())
        served = self.served.current
        plan = served.plan if served is not None else None
        with self.changes.lock:
            c = self.planning.counters
            pending = self.planning.pending
            return Stats(
                jobs=len(self.jobs),
                generation=served.generation if served is not None else 0,
                pending=pending,
                lam=plan.lam if plan is not None else None,
                throughput=plan.throughput if plan is not None else None,
                plan_seconds=plan.runtime_s if plan is not None else None,
                replans=c.replans,
                replan_failures=c.failures,
                plan_seconds_total=c.plan_seconds_total,
                last_error=c.last_error,
                table_full_errors=self.devices.table_full_errors,
                backend_errors=self.counters.errors(),
                p4runtime_not_primary=self.devices.not_primary_count,
                packet_ins=self.counters.packet_ins(),
                refusals=self.counters.refusals(),
                switches=switches,
                link_flaps=self.links.flaps,
                churn_jobs=served.churn_jobs if served is not None else 0,
                churn_jobs_total=c.churn_jobs_total,
                entries_written=sum(served.written.values()) if served is not None else 0,
                entries_written_total=c.entries_written_total,
                entries_by_backend=dict(served.written) if served is not None else {},
                incremental_plans=c.incremental_plans,
                algorithm=plan.algorithm if plan is not None else None,
                reoptimisations=dict(c.reoptimisations),
                planner_failed_jobs=c.failed_jobs,
                rate_updates=c.rate_updates,
            )
