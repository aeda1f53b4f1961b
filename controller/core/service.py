"""The controller service: jobs in, plans and desired switch state out (docs/architecture.md).

`ControllerService` sits between the northbound (REST) and the southbounds
(OpenFlow, P4Runtime). It is the planning loop, and composes two parts:

- `network` (`controller.network_view.NetworkView`): the network, declared or
  learned: topology, port map, hosts and MACs, link state and hold-downs, switch
  state, reported limits, learned budgets and link capacities;
- `job_registry` (`controller.job_registry.JobRegistry`): the registered jobs,
  their validation, their store (`JobStore`) and multicast group addresses
  (`GroupAddressPool`), and the jobs waiting for hosts of a learned network.

The service itself owns the change accounting and the debounce, the re-planning
(worker thread or `poll`), the current plan, the translation to the desired
state of every switch and the `on_plan` callbacks, the OpenFlow group and meter
ids (kept in the store), and the statistics. Its methods about the network and
the jobs delegate to the two parts (callers may use the parts directly). It
knows nothing of HTTP or of os-ken.

Job changes
    `add_job` validates a job (every host known, workers non-empty and distinct,
    the PS not among them, demand and weight positive and finite, a well-formed
    id that is not taken), gives it a group address, stores it, and marks a
    change; `delete_job` removes it and marks a change. A rejected request
    changes nothing: validation happens before any write, and the address is
    given back if the store refuses the job. A deleted job's address goes back to
    the pool only once a plan without the job is in place, so one plan never
    hands it to a new job (the pool's make-before-break rule).

Re-planning (debounced)
    Changes are coalesced: a re-plan starts once no change has arrived for
    `planner.debounce_s`, or `planner.max_delay_s` after the first unplanned
    change, whichever is first; it covers every change made before it starts.
    Two ways to drive it:
    - `start()` runs one plan at once and then a worker thread that waits on a
      condition variable and re-plans when the debounce says so (the controller);
    - without `start()`, nothing happens by itself: `poll()` re-plans if the
      debounce (read from the injectable `clock`) says it is due, and `replan()`
      re-plans now. Tests drive the service this way, deterministically.
    A change's caller can wait for "the plan that includes my change":
    `add_job`/`delete_job` with `wait=True` wait at most `planner.wait_s` (with the
    worker running), or re-plan inline (without it).

After each plan
    The desired state of every switch is computed with
    `southbound.openflow.state.translate` (ports from `default_port_map`,
    corrected by `learn_port`/`learn_host`; host addresses from the config, MACs
    as learned), kept,
    and handed with the operations from the previous desired state to every
    callback in `on_plan`, before the requests waiting for the plan are answered
    (callbacks run in the re-planning thread: they should be quick, and must not
    call `replan`). The group and meter ids are stored too, so that a
    restarted controller computes the same desired state and reconciles the
    switches instead of rebuilding them.

Links down
    `link_down(a, b)` / `link_up(a, b)` (node names, either order) keep a set of
    down links; each change is an ordinary change (debounced re-plan; an up only
    once the link's hold-down has ended, see "Hold-down"). A plan is
    made on the topology minus the down links (same nodes, so the node indices
    and the full port map still apply); multicast trees and unicast routes both
    come from it. Its edge indices are then renumbered to the full topology's, so
    everything reading the plan (the API) keeps using `topology`. If the down
    links leave some host unable to reach another, no plan is made: the last plan
    and desired state stay, and the failure is counted and kept in `last_error`
    (shown by /healthz) until a link comes back.

Hold-down (a flapping link does not thrash the planner)
    Going down is acted on at once (a debounced re-plan without the link). Coming
    up is not trusted at once: the link stays out of the plan ("held down") until
    it has stayed up for its hold-down; going down meanwhile cancels the wait,
    which starts afresh when it next comes up. The end of a hold-down is a change
    made at that moment (debounced like any other, so links that come up together
    rejoin in one re-plan), and `_due_in` counts it as a due time, so the worker
    wakes for it with no other event, and `stats().pending` (/healthz
    `replan_pending`) is true while a link is held down. While a link is held
    down, its downs and ups change nothing the planner sees: no re-plan at all.
    Each link's hold-down starts at `planner.link_hold_down_s`. A flap, a down
    while the link is held down or less than `planner.link_hold_down_max_s` after
    it rejoined the plan, doubles it, up to `link_hold_down_max_s`; a down after
    the link has been in the plan for `link_hold_down_max_s` starts again from
    the base. Flaps are counted (`stats().link_flaps`). With
    `link_hold_down_s: 0` a link rejoins at once (flaps are still counted).

For the southbounds, the service offers (most of them delegated to `network`): `switch_connected`,
`switch_disconnected`, `learn_port` (LLDP: a port leads to a neighbour; the port
map keeps one port per link end and swaps on conflict), `learn_host` (a host's ARP, or
IPv4 from an unknown source: its port and MAC), `host_by_ip` / `host_mac` (proxy ARP),
`set_host_mac`, `link_down`, `link_up`,
`link_at` (the neighbour behind a port), `switch_links`, `ops_for` (the operations
that bring a switch from its actual state to the desired one),
`count_openflow_error` and `table_full` (a switch refused an entry because its
group, flow or meter table is full: a lower group/entry budget is learned for it,
kept until restart, and every later plan is made with it; see `table_full`).
The service is thread-safe: one lock (an RLock, shared with `network` and
`job_registry`) guards its state and theirs; planning runs outside it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from controller import planner
from controller.algorithm.admission import NotIncremental, same_topology, within_churn
from controller.algorithm.model import Instance, Job, JobPlan, Plan, Topology
from controller.algorithm.network import Network
from controller.config import Config
from controller.core.port_rates import PortRates, link_rates
from controller.core.jobs import (
    JOB_ID_PATTERN,
    DuplicateJob,
    InvalidJob,
    JobRegistry,
    JobStatus,
    ServiceError,
    Unavailable,
    UnknownJob,
)
from controller.core.network_view import (
    DISCOVERED_STATE_KEY,
    LEARNED_STATE_KEY,
    MISSING_LINK_GRACE_S,
    ArpAnswer,
    HostsCutOff,
    NetworkView,
    SwitchLimits,
    SwitchStatus,
    UnexpectedHost,
)
from controller.addressing.hosts import HostAddress
from controller.southbound.openflow.state import OFPM_CONTROLLER, Ids, SwitchState, Translation, translate
from controller.southbound.ids import IdAllocation
from controller.addressing.ports import PortMap
from controller.southbound.openflow.reconcile import Op, diff, diff_switch
from controller.store.sqlite import JobStore
from controller.store.factory import open_store

log = logging.getLogger(__name__)

IDS_STATE_KEY = "openflow_ids"


# -- views ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TranslationInputs:
    """What the current desired state was translated from: the planning network
    (the topology without the down links), the plan on it (before renumbering to
    the full topology), the port map and the learned host MACs. Every southbound
    backend translates from the same inputs, so they agree."""

    network: Network
    plan: Plan
    ports: PortMap
    host_macs: Mapping[str, str]


@dataclass(frozen=True)
class PlanUpdate:
    """What `on_plan` callbacks receive: the new plan and desired state, and the
    operations that turn the previous desired state into it, per switch."""

    generation: int
    plan: Plan
    desired: Mapping[str, SwitchState]
    ops: Mapping[str, list[Op]]


# An admission whose λ is below this share of the last full plan's brings the
# re-optimisation forward to the next pause in job changes (`planner.debounce_s`
# without one) instead of `planner.reoptimise_after_s` later: with tight tables
# admission alone can serve far less than a full plan would (docs/planning-time.md).
ADMISSION_GUARD = 0.9


@dataclass(frozen=True)
class PlanSummary:
    """The plan being served, as a job's answer and GET /plan describe it: its
    generation, algorithm, λ and LP bound (None: not computed for this job set
    yet, e.g. an incremental plan before the next full plan), and its churn:
    jobs of the previous plan whose structure it changed, and OpenFlow entries
    it added, changed or removed."""

    generation: int
    algorithm: str
    lam: float
    lp_bound: float | None
    churn_jobs: int
    entries_written: int
    computed_at: float | None = None  # Unix time the plan was installed


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
    openflow_errors: int
    last_error: str | None
    table_full_errors: int = 0
    p4runtime_errors: int = 0
    p4runtime_not_primary: int = 0
    packet_ins: Mapping[str, int] = field(default_factory=dict)  # kind ("arp", "ipv4") -> count
    switches: tuple[SwitchStatus, ...] = field(default=())
    link_flaps: int = 0  # downs of a link held down or back in the plan for less than link_hold_down_max_s
    # churn: jobs of the previous plan whose structure the last plan changed, and
    # the OpenFlow entries (flows, groups, meters) it added, changed or removed
    churn_jobs: int = 0
    churn_jobs_total: int = 0
    entries_written: int = 0
    entries_written_total: int = 0
    incremental_plans: int = 0  # plans made by admission (planner.incremental)
    algorithm: str | None = None  # what made the served plan
    reoptimisations: Mapping[str, int] = field(default_factory=dict)  # "adopted" / "kept" -> count


# -- the service ------------------------------------------------------------------------------


class ControllerService:
    """The planning loop over `network` (NetworkView) and `job_registry` (JobRegistry):
    changes, re-plans, the current plan and the desired switch state.

    `topology` is the planner's topology (`config.build_topology(config)`);
    `clock` is read for the debounce and the link hold-down only (monotonic seconds); `store` defaults to
    the SQLite file of `config.store.path`; `id_factory` names jobs posted
    without an id.
    """

    def __init__(
        self,
        config: Config,
        topology: Topology | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        store: JobStore | None = None,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        self.config = config
        self.discovers = config.discovers
        if topology is None and not self.discovers:
            raise ValueError("a topology is needed when the config declares one (config.build_topology)")
        self._clock = clock
        self._owns_store = store is None
        self._store = store if store is not None else open_store(config.store)
        self._settings = config.planner

        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._plan_lock = threading.Lock()  # one re-plan at a time

        self._plan: Plan | None = None
        self._generation = 0
        self._plan_at: float | None = None  # when the served plan was installed (Unix time)
        try:
            # the network: topology, wiring, hosts, link and switch state, budgets
            self.network = NetworkView(
                config, topology, clock, lock=self._lock, store=self._store, mark_change=self._mark_change,
                wake=self._cond.notify_all, current_plan=lambda: (self._plan, self._generation),
            )
            # the jobs: validated with the network's hosts, stored, with their group addresses
            self.job_registry = JobRegistry(
                config, self.network, self._store, clock, lock=self._lock,
                mark_change=lambda: self._mark_change(jobs_only=True),  # jobs only: admitted with planner.incremental
                id_factory=id_factory,
            )
            self._ids = self._load_ids()
        except BaseException:
            if self._owns_store:
                self._store.close()
            raise

        self._plan_topology: Topology | None = None  # the topology the current plan is on
        self._inputs: TranslationInputs | None = None
        self._planned: dict[str, JobPlan] = {}
        self._desired: dict[str, SwitchState] = {}

        # change accounting: a plan "covers" every change counted before it started
        now = clock()
        self._changes = 1  # the start itself: the first plan installs the unicast routes
        self._covered = 0
        self._first_change: float | None = now
        self._last_change = now - self._settings.debounce_s  # due at once

        self._replans = 0
        self._failures = 0
        # a change of the network since the last plan (else only jobs changed:
        # with planner.incremental they are admitted without a full plan)
        self._network_changed = True
        # a job registered or deleted since the last plan (with no change of the
        # network either, only the translation's inputs changed: ports, MACs)
        self._jobs_changed = False
        self._reoptimise_at: float | None = None  # a full plan is due then (after incremental ones)
        self._full_lam = 0.0  # λ of the last full plan computed (adopted or not): the admissions' yardstick
        # the last translation: its job-independent flows, job entries and switch states are reused
        self._translation: Translation | None = None
        self._churn = (0, 0)  # (jobs whose structure changed, entries written) by the last plan
        self._churn_jobs_total = 0
        self._entries_written_total = 0
        self._incremental_plans = 0
        self._reoptimisations = {"adopted": 0, "kept": 0}
        self._plan_seconds_total = 0.0
        self._openflow_errors = 0
        self._p4runtime_errors = 0
        self._packet_ins: dict[str, int] = {"arp": 0, "ipv4": 0}
        self._last_error: str | None = None
        if self.discovers:
            self.network.restore_discovered()
            self.job_registry.restart_waits()  # a restart restarts their wait

        self.on_plan: list[Callable[[PlanUpdate], None]] = []
        self.port_rates = PortRates()  # per (switch, port): counters and rates (port statistics)
        # callables giving {(job, switch): (packets, bytes)} per job and switch (the
        # P4Runtime backend's direct counters), read at /metrics scrape time
        self.counter_sources: list[Callable[[], Mapping[tuple[str, str], tuple[int, int]]]] = []
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.cluster = None  # controller.ha.Cluster when several instances share an etcd store

    @property
    def topology(self) -> Topology:
        """The topology planned on (`network.topology`: the learned one changes)."""
        return self.network.topology

    @property
    def hosts(self) -> dict[str, HostAddress]:
        """Host name -> its address (`network.hosts`)."""
        return self.network.hosts

    # -- start-up -----------------------------------------------------------------------

    def _load_ids(self) -> Ids:
        """The ids of the last translation (ids outside the configured ranges are
        given new ones at the next plan)."""
        (g_first, g_last), (m_first, m_last) = self.config.southbound.openflow.group_ids, self.config.southbound.openflow.meter_ids
        fresh = Ids(IdAllocation(g_last, {}, g_first), IdAllocation(m_last, {}, m_first))
        raw = self._store.get_state(IDS_STATE_KEY)
        if raw is None:
            return fresh
        try:
            return Ids(
                IdAllocation(g_last, _id_table(raw["groups"]), g_first),
                IdAllocation(m_last, _id_table(raw["meters"]), m_first),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            log.warning("stored OpenFlow ids are unreadable; starting with fresh ones")
            return fresh

    def reload_from_store(self, leading: bool) -> None:
        """Load the jobs, the OpenFlow ids and the learned network or wiring again
        from the store, which another controller instance wrote (docs/ha.md): a
        follower keeping up (`leading` False: nothing is written back) or a new
        leader taking over. A re-plan follows (if the planning loop runs)."""
        with self._lock:
            self.job_registry.reload(store_changes=leading)
            self._ids = self._load_ids()
            self._translation = None  # its ids are those of the last translation, now reloaded
            self.network.reload()
            self._jobs_changed = True

    def owns_group(self, group_id: int) -> bool:
        """True if OpenFlow group `group_id` is the controller's (`southbound.openflow.group_ids`)."""
        return self._ids.groups.owns(group_id)

    def owns_meter(self, meter_id: int) -> bool:
        """True if OpenFlow meter `meter_id` is the controller's: in
        `southbound.openflow.meter_ids`, or the packet-in meter while it is on."""
        if meter_id == OFPM_CONTROLLER:
            return self.config.southbound.openflow.packet_in_pps > 0
        return self._ids.meters.owns(meter_id)

    def start(self) -> None:
        """Plan once now, then re-plan in a worker thread as changes arrive."""
        with self._lock:
            if self._thread is not None:
                return
            self._stopping = False
        self.replan()
        thread = threading.Thread(target=self._run, name="replan", daemon=True)
        with self._lock:
            self._thread = thread
        thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker thread (a plan in progress is finished first)."""
        with self._cond:
            thread, self._thread = self._thread, None
            self._stopping = True
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout)

    def close(self) -> None:
        """Stop, and close the store if the service opened it."""
        self.stop()
        if self._owns_store:
            self._store.close()

    def __enter__(self) -> ControllerService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._thread is not None

    # -- the jobs (delegated to `self.job_registry`, the `JobRegistry`) ---------------------------

    def resolve_host(self, value: object, field: str) -> str:
        return self.job_registry.resolve_host(value, field)

    def validate_job(
        self,
        ps: object,
        workers: object,
        demand: object,
        weight: object = 1.0,
        job_id: object = None,
    ) -> Job:
        return self.job_registry.validate_job(ps, workers, demand, weight, job_id)

    def probe_targets(self) -> list[str]:
        return self.job_registry.probe_targets()

    def job_for_address(self, address: str) -> str | None:
        return self.job_registry.job_for_address(address)

    def group_addresses(self) -> dict[str, str]:
        return self.job_registry.group_addresses()

    # -- job changes ---------------------------------------------------------------------------

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
    ) -> tuple[JobStatus, bool]:
        """`add_job`, also saying whether the job is new. With `existing_ok`, a
        job registered under `job_id` with the same spec is answered as it is
        (False: nothing changed, nothing waited for); a different spec is still a
        `DuplicateJob`."""
        job = self.job_registry.validate_job(ps, workers, demand, 1.0 if weight is None else weight, job_id)
        new_id, target = self.job_registry.add(job, new_id=job_id is None, existing_ok=existing_ok)
        if target is None:
            return self.job(new_id), False
        if wait:
            self.wait_for(target)
        return self.job(new_id), True

    def delete_job(self, job_id: str, *, wait: bool = True) -> None:
        """Remove a job; with `wait`, return once a plan without it is in place
        (or after `planner.wait_s`)."""
        target = self.job_registry.delete(job_id)
        if wait:
            self.wait_for(target)

    def _mark_change(self, at: float | None = None, jobs_only: bool = False, translation_only: bool = False) -> int:
        """Count a change (lock held), made now or at time `at` (the end of a
        hold-down, noticed later); `jobs_only` for a job registered or deleted,
        `translation_only` for what changes switch entries but not the plan (a
        learned port or MAC: the served plan is translated again, nobody moves);
        anything else is a change of the network. Returns the count a plan must
        cover."""
        now = self._clock() if at is None else at
        if jobs_only:
            self._jobs_changed = True
        elif not translation_only:
            self._network_changed = True
        self._changes += 1
        self._last_change = max(self._last_change, now)
        if self._first_change is None:
            self._first_change = now
        self._cond.notify_all()
        return self._changes

    # -- facts from the southbounds (the network's: see below) --------------------------------

    def translation_inputs(self) -> TranslationInputs | None:
        """The inputs of the current desired state (None before the first plan)."""
        with self._lock:
            return self._inputs

    def ops_for(self, switch: str, actual: SwitchState) -> list[Op]:
        """The make-before-break operations from `actual` (the owned entries read
        from the switch, or remembered) to the desired state of `switch`."""
        with self._lock:
            if switch not in self._desired and self.discovers:
                return []  # not in the plan yet (just learned): nothing to reconcile against
            desired = self._desired.get(switch, SwitchState())
        return diff_switch(desired, actual)

    def count_openflow_error(self, n: int = 1) -> None:
        with self._lock:
            self._openflow_errors += n

    def count_p4runtime_error(self, n: int = 1) -> None:
        """A P4Runtime switch refused an update (counted apart from OpenFlow errors)."""
        with self._lock:
            self._p4runtime_errors += n

    def count_packet_in(self, kind: str) -> None:
        """A host's packet reached the controller: "arp", or "ipv4" (an unknown-source copy)."""
        with self._lock:
            self._packet_ins[kind] = self._packet_ins.get(kind, 0) + 1

    def job_counters(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(job, switch) -> (packets, bytes) from every counter source (a failing one
        is logged and left out)."""
        out: dict[tuple[str, str], tuple[int, int]] = {}
        for source in list(self.counter_sources):
            try:
                out.update(source())
            except Exception:  # noqa: BLE001 - a scrape must not fail for one source
                log.exception("counter source %r failed", source)
        return out

    def job_for_group_id(self, switch: str, group_id: int) -> str | None:
        """The job whose replication group on `switch` has id `group_id` (by the current ids)."""
        with self._lock:
            for job, gid in self._ids.groups.by_switch.get(switch, {}).items():
                if gid == group_id:
                    return job
        return None

    # -- the network (delegated to `self.network`, the `NetworkView`) ----------------------------
    # Callers may as well use `service.network` directly; these keep the service's API.

    def host_name(self, ip: str) -> str:
        return self.network.host_name(ip)

    def waiting_nodes(self) -> list[str]:
        return self.network.waiting_nodes()

    def parallel_links(self) -> list[tuple[tuple[str, int], tuple[str, int]]]:
        return self.network.parallel_links()

    def edge_ports(self, switch: str) -> list[int]:
        return self.network.edge_ports(switch)

    def learn_port(self, switch: str, port: int, neighbour: str) -> bool:
        return self.network.learn_port(switch, port, neighbour)

    def learn_link(self, a: str, port_a: int, b: str, port_b: int) -> bool:
        return self.network.learn_link(a, port_a, b, port_b)

    def discovered_links(self) -> dict[tuple[str, str], int]:
        return self.network.discovered_links()

    def missing_links(self, grace_s: float = MISSING_LINK_GRACE_S) -> list[tuple[str, str]]:
        return self.network.missing_links(grace_s)

    def unexpected_links(self) -> list[tuple[str, int, str]]:
        return self.network.unexpected_links()

    def unexpected_hosts(self) -> list[UnexpectedHost]:
        return self.network.unexpected_hosts()

    def unexpected_switch(self, name: str) -> None:
        self.network.unexpected_switch(name)

    def unexpected_switches(self) -> list[str]:
        return self.network.unexpected_switches()

    def port_map(self) -> PortMap:
        return self.network.port_map()

    def topology_and_ports(self) -> tuple[Topology, PortMap]:
        return self.network.topology_and_ports()

    def host_by_ip(self, ip: str) -> str | None:
        return self.network.host_by_ip(ip)

    def host_mac(self, host: str) -> str:
        return self.network.host_mac(host)

    def host_ports(self, host: str) -> tuple[tuple[str, int], ...]:
        return self.network.host_ports(host)

    def arp_answer(self, host: str) -> ArpAnswer:
        return self.network.arp_answer(host)

    def learn_host(self, ip: str, mac: str, switch: str, port: int) -> str | None:
        return self.network.learn_host(ip, mac, switch, port)

    def set_host_mac(self, host: str, mac: str) -> None:
        self.network.set_host_mac(host, mac)

    def switch_connected(self, switch: str) -> None:
        self.network.switch_connected(switch)

    def switch_disconnected(self, switch: str) -> None:
        self.network.switch_disconnected(switch)
        self.port_rates.forget(switch)

    # -- measured load (OpenFlow port statistics) ----------------------------------------------
    def port_counters(self, switch: str, samples: Iterable[tuple[int, int, int]], at: float | None = None) -> None:
        """Record a switch's port counters: (port, rx_bytes, tx_bytes) per port, read at
        `at` (the service clock by default)."""
        at = self._clock() if at is None else at
        for port, rx, tx in samples:
            self.port_rates.update(switch, port, rx, tx, at)

    def link_rates(self) -> dict[tuple[str, str], tuple[float | None, float | None]]:
        """Per link (a, b) of the topology: measured (a→b, b→a) bit/s, None where no end
        reported a rate recently (3 polling intervals, at least 10 s)."""
        topology, ports = self.network.topology_and_ports()
        rates = self.port_rates.rates(self._clock(), max(10.0, 3 * self.config.southbound.openflow.port_stats_s))
        if not rates:
            return {}
        index = topology.index

        def port_of(node: str, other: str) -> int | None:
            return ports.get((index[node], index[other])) if topology.is_switch(index[node]) else None

        return link_rates(((link.a, link.b) for link in topology.links), port_of, rates)

    def switch_not_primary(self, switch: str, count: bool = True) -> None:
        self.network.switch_not_primary(switch, count)

    def packet_in_meter_refused(self, switch: str) -> None:
        self.network.packet_in_meter_refused(switch)

    def backend(self, switch: str) -> str:
        return self.network.backend(switch)

    def link_down(self, a: str, b: str) -> bool:
        return self.network.link_down(a, b)

    def link_up(self, a: str, b: str) -> bool:
        return self.network.link_up(a, b)

    def links_held_down(self) -> dict[tuple[str, str], float]:
        return self.network.links_held_down()

    def link_at(self, switch: str, port: int) -> str | None:
        return self.network.link_at(switch, port)

    def switch_links(self, switch: str) -> list[str]:
        return self.network.switch_links(switch)

    def links_down(self) -> list[tuple[str, str]]:
        return self.network.links_down()

    def _planning_topology(self, *args: object, **kwargs: object) -> tuple[Topology, Network]:
        return self.network.planning_topology(*args, **kwargs)  # type: ignore[arg-type]

    def table_full(self, switch: str, table: str, job: str | None = None) -> int | None:
        return self.network.table_full(switch, table, job)

    def report_limits(
        self,
        switch: str,
        *,
        max_groups: int | None = None,
        max_entries: int | None = None,
        port_speeds: Mapping[int, int] | None = None,
        source: str = "switch",
    ) -> bool:
        return self.network.report_limits(
            switch, max_groups=max_groups, max_entries=max_entries, port_speeds=port_speeds, source=source
        )

    def reported_limits(self) -> dict[str, SwitchLimits]:
        return self.network.reported_limits()

    def link_capacities(self) -> dict[tuple[str, str], tuple[float, str]]:
        return self.network.link_capacities()

    def learned_budgets(self) -> dict[str, dict[str, int]]:
        return self.network.learned_budgets()

    # -- planning ----------------------------------------------------------------------------

    def _due_in(self, now: float) -> float | None:
        """Seconds until a re-plan is due (<= 0: due) or, sooner, until a hold-down
        ends (the caller should look again then); None if nothing is pending.
        Releases the links whose hold-down has ended (lock held)."""
        self.network.release_holds(now)
        hold_ends = self.network.hold_ends()
        if self._covered >= self._changes:
            wake = [t for t in (hold_ends, self._reoptimise_at) if t is not None]
            return None if not wake else min(wake) - now
        if self._settings.incremental and not self._network_changed and self._inputs is not None:
            return 0.0  # jobs only: admitted at once, no debounce
        deadline = self._last_change + self._settings.debounce_s
        if self._first_change is not None:
            deadline = min(deadline, self._first_change + self._settings.max_delay_s)
        if hold_ends is not None:
            deadline = min(deadline, hold_ends)
        return deadline - now

    def replan_due(self) -> bool:
        with self._lock:
            delay = self._due_in(self._clock())
        return delay is not None and delay <= 0

    def poll(self) -> PlanUpdate | None:
        """Re-plan if the debounce says it is due (for callers without `start()`)."""
        return self.replan() if self.replan_due() else None

    def wait_for(self, target: int, timeout: float | None = None) -> bool:
        """Wait until a plan covers change number `target`; True if one does.

        With the worker running this waits at most `timeout` (default
        `planner.wait_s`); without it, it re-plans now, in the caller's thread.
        """
        timeout = self._settings.wait_s if timeout is None else timeout
        if not self.running:
            with self._lock:
                covered = self._covered >= target
            if not covered:
                self.replan()
        with self._cond:
            return self._cond.wait_for(lambda: self._covered >= target or self._stopping, timeout) and (
                self._covered >= target
            )

    def replan(self) -> PlanUpdate | None:
        """Plan every job now and install the result; None if planning failed
        (the previous plan stays; the error is logged and kept in `stats()`)."""
        with self._plan_lock:
            with self._lock:
                now = self._clock()
                snap = self.network.snapshot(now)  # releases the ended hold-downs first
                target = self._changes
                pending = self._covered < target
                # jobs only changed since the last plan: admit them (planner.incremental);
                # nothing changed but a re-optimisation is due: a full plan, kept if it gains
                previous_inputs = self._inputs
                incremental = (self._settings.incremental and pending and not self._network_changed
                               and previous_inputs is not None)
                reoptimising = (not pending and self._reoptimise_at is not None and now >= self._reoptimise_at
                                and previous_inputs is not None)
                retranslate = (pending and not self._network_changed and not self._jobs_changed
                               and previous_inputs is not None)
                self._network_changed = self._jobs_changed = False
                self._first_change = None
                full, hosts = snap.topology, snap.hosts
                # a job waits (unplanned) while one of its hosts is not in the network
                jobs = self.job_registry.plannable()
                groups = self.job_registry.addresses()
                ports, macs, ids = snap.ports, snap.host_macs, self._ids
            s = self._settings
            try:
                topo, net = self.network.planning_topology(snap.down, snap.learned, snap.reported, ports, full)
                plan = None
                if retranslate:  # only ports or MACs were learned: the served plan, translated again
                    assert previous_inputs is not None
                    served = previous_inputs.plan
                    if same_topology(topo, previous_inputs.network.topo) and \
                            [jp.job for jp in served.jobs] == list(jobs):
                        plan = served
                if plan is None and incremental:
                    assert previous_inputs is not None
                    try:
                        plan = planner.run_incremental(Instance(topo, jobs), previous_inputs.plan,
                                                       previous_inputs.network.topo, s.objective)
                    except NotIncremental as e:
                        log.info("jobs changed, but a full plan is needed: %s", e)
                if plan is None:
                    # a re-optimisation starts from the served plan's columns (same topology only)
                    warm = ((previous_inputs.plan, previous_inputs.network.topo)
                            if reoptimising and s.reoptimise_warm_start and previous_inputs is not None else None)
                    plan = planner.run(Instance(topo, jobs), s.algorithm, s.objective, s.seed, warm_from=warm)
                    with self._cond:
                        self._full_lam = plan.lam
                bounded = False
                if reoptimising:
                    assert previous_inputs is not None
                    served = previous_inputs.plan
                    if same_topology(topo, previous_inputs.network.topo):
                        full_plan = plan
                        plan = within_churn(Instance(topo, jobs), served, plan, s.objective, s.reoptimise_max_churn)
                        bounded = plan is not full_plan
                    gain = s.reoptimise_min_gain
                    better = (plan.lam > served.lam * (1 + gain) + 1e-12
                              or plan.throughput > served.throughput * (1 + gain) + 1e-9)
                    with self._cond:
                        self._reoptimise_at = None
                        self._reoptimisations["adopted" if better else "kept"] += 1
                    if not better:
                        # the served plan stays; the full plan's LP bound is its job set's
                        self._keep_bound(plan.lp_bound)
                        log.info("re-optimisation: the full plan (λ %.4g, %.4g bit/s) gains less than %.0f%% over "
                                 "the served one (λ %.4g, %.4g bit/s): kept the served plan",
                                 plan.lam, plan.throughput, 100 * gain, served.lam, served.throughput)
                        return None
                    log.info("re-optimisation: λ %.4g -> %.4g, throughput %.4g -> %.4g bit/s: adopted",
                             served.lam, plan.lam, served.throughput, plan.throughput)
                tr = translate(
                    net, plan, ports, hosts, groups, macs, ids,
                    self.config.southbound.openflow.packet_in_pps, snap.no_meter, previous=self._translation,
                )
                planned_on_net = plan
                if net.topo is not full:
                    plan = _on_full_topology(plan, net.topo, full)
            except Exception as e:  # noqa: BLE001 - a failed plan must not stop the controller
                if isinstance(e, HostsCutOff):  # an expected state of the network, not a bug
                    log.warning("re-plan of %d jobs not possible: %s", len(jobs), e)
                else:
                    log.exception("re-plan of %d jobs failed", len(jobs))
                with self._cond:
                    self._covered = max(self._covered, target)
                    self._failures += 1
                    self._last_error = f"{type(e).__name__}: {e}"
                    self._network_changed = True  # the next plan is a full one
                    self._cond.notify_all()
                return None
            churned = _churn(previous_inputs, net, planned_on_net)
            with self._cond:
                previous = self._desired
                self._plan, self._desired, self._ids = plan, tr.state, tr.ids
                self._translation = tr
                self._plan_topology = full
                self._inputs = TranslationInputs(net, planned_on_net, ports, macs)
                self._planned = {jp.job.id: jp for jp in plan.jobs}
                # addresses of jobs deleted before this plan go back to the pool now
                self.job_registry.release_addresses(j.id for j in jobs)
                self._generation += 1
                self._plan_at = time.time()  # wall clock: shown to people (GET /plan computed_at)
                self._replans += 1
                self._plan_seconds_total += plan.runtime_s
                self._last_error = None
                update = PlanUpdate(self._generation, plan, tr.state, diff(tr.state, previous))
                written = sum(len(ops) for ops in update.ops.values())
                self._churn = (churned, written)
                self._churn_jobs_total += churned
                self._entries_written_total += written
                if plan.algorithm == "incremental":
                    self._incremental_plans += 1
                    self._reoptimise_at = self._clock() + s.reoptimise_after_s
                    if plan.lam < ADMISSION_GUARD * self._full_lam:
                        # a poor admission (tight tables): re-optimise once registrations pause for
                        # the debounce time (each admission pushes it back), not in the middle of a burst
                        self._reoptimise_at = self._clock() + s.debounce_s
                elif bounded:  # the churn budget held some moves back: try again later
                    self._reoptimise_at = self._clock() + s.reoptimise_after_s
                else:
                    self._reoptimise_at = None
            try:
                self._store.put_state(IDS_STATE_KEY, {"groups": _id_json(tr.ids.groups), "meters": _id_json(tr.ids.meters)})
            except Exception:  # noqa: BLE001 - the plan stands; only a restart would renumber
                log.exception("cannot store the OpenFlow ids")
            try:
                self.network.save(snap)
            except Exception:  # noqa: BLE001 - the plan stands; a restart would learn again
                log.exception("cannot store the learned ports and MACs")
            # the southbound hears of the plan before the waiting requests are answered
            for callback in list(self.on_plan):
                try:
                    callback(update)
                except Exception:  # noqa: BLE001 - one bad listener must not stop the others
                    log.exception("on_plan callback %r failed", callback)
            with self._cond:
                self._covered = max(self._covered, target)
                self._cond.notify_all()
        return update

    def _keep_bound(self, lp_bound: float | None) -> None:
        """Give the served plan the LP bound of its job set (a full plan of the same
        jobs, not adopted, computed it)."""
        with self._cond:
            if self._plan is None or self._inputs is None or lp_bound is None:
                return
            self._plan = dataclasses.replace(self._plan, lp_bound=lp_bound)
            self._inputs = dataclasses.replace(self._inputs, plan=dataclasses.replace(self._inputs.plan, lp_bound=lp_bound))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    delay = self._due_in(self._clock())
                    if delay is not None and delay <= 0:
                        break
                    self._cond.wait(delay)
                if self._stopping:
                    return
            try:
                self.replan()
            except Exception as e:  # noqa: BLE001 - keep the worker alive
                log.exception("re-plan failed")
                with self._cond:
                    self._covered = self._changes
                    self._failures += 1
                    self._last_error = f"{type(e).__name__}: {e}"
                    self._cond.notify_all()

    # -- views ------------------------------------------------------------------------------

    def jobs(self) -> list[JobStatus]:
        """Every registered job, in creation order."""
        with self._lock:
            return self.job_registry.statuses(self._planned, self._plan_topology)

    def job(self, job_id: str) -> JobStatus:
        with self._lock:
            return self.job_registry.status(job_id, self._planned, self._plan_topology)

    def plan(self) -> Plan | None:
        with self._lock:
            return self._plan

    def plan_summary(self) -> PlanSummary | None:
        """The plan being served (None before the first)."""
        return self.served_plan()[2]

    def served_plan(self) -> tuple[Plan | None, Topology | None, PlanSummary | None]:
        """The plan being served, the topology its indices refer to and its summary, together."""
        with self._lock:
            if self._plan is None:
                return None, None, None
            summary = PlanSummary(self._generation, self._plan.algorithm, self._plan.lam, self._plan.lp_bound,
                                  *self._churn, computed_at=self._plan_at)
            return self._plan, self._plan_topology, summary

    def plan_on_topology(self) -> tuple[Plan | None, Topology | None]:
        """The current plan and the topology its indices refer to (the network can
        change after it was made, when it is learned)."""
        with self._lock:
            return self._plan, self._plan_topology

    def planned_jobs(self) -> tuple[Job, ...]:
        """The jobs of the current plan (its instance is these on `topology`)."""
        with self._lock:
            return tuple(jp.job for jp in self._plan.jobs) if self._plan is not None else ()

    def desired_state(self) -> dict[str, SwitchState]:
        with self._lock:
            return dict(self._desired)

    def switches(self) -> list[SwitchStatus]:
        with self._lock:
            return self.network.switch_statuses(self._plan, self._desired)

    def stats(self) -> Stats:
        switches = tuple(self.switches())
        with self._lock:
            plan = self._plan
            return Stats(
                jobs=len(self.job_registry),
                generation=self._generation,
                # a link held down rejoins in a re-plan of its own, due without any other event
                pending=self._covered < self._changes or self.network.hold_ends() is not None,
                lam=plan.lam if plan is not None else None,
                throughput=plan.throughput if plan is not None else None,
                plan_seconds=plan.runtime_s if plan is not None else None,
                replans=self._replans,
                replan_failures=self._failures,
                plan_seconds_total=self._plan_seconds_total,
                openflow_errors=self._openflow_errors,
                last_error=self._last_error,
                table_full_errors=self.network.table_full_errors,
                p4runtime_errors=self._p4runtime_errors,
                p4runtime_not_primary=self.network.p4runtime_not_primary,
                packet_ins=dict(self._packet_ins),
                switches=switches,
                link_flaps=self.network.flaps,
                churn_jobs=self._churn[0],
                churn_jobs_total=self._churn_jobs_total,
                entries_written=self._churn[1],
                entries_written_total=self._entries_written_total,
                incremental_plans=self._incremental_plans,
                algorithm=plan.algorithm if plan is not None else None,
                reoptimisations=dict(self._reoptimisations),
            )


# -- helpers ------------------------------------------------------------------------------------



def _churn(previous: TranslationInputs | None, net: Network, plan: Plan) -> int:
    """Jobs of the previous plan that are in `plan` (made on `net`) with another
    structure (on another planning topology, every job they share)."""
    if previous is None:
        return 0
    before = {jp.job.id: jp.structure for jp in previous.plan.jobs}
    if not same_topology(previous.network.topo, net.topo):
        return sum(1 for jp in plan.jobs if jp.job.id in before)
    return sum(1 for jp in plan.jobs if jp.job.id in before and before[jp.job.id] != jp.structure)


def _on_full_topology(plan: Plan, reduced: Topology, full: Topology) -> Plan:
    """`plan` (made on `reduced`, the full topology minus the down links: the
    same nodes) with its edge indices renumbered to those of `full`, so that
    everything reading the plan (the API, /plan) can keep using `full`."""
    index = full.edge_index
    remap = [index[(e.tail, e.head)] for e in reduced.edges]
    jobs = tuple(
        dataclasses.replace(
            jp,
            structure=dataclasses.replace(
                jp.structure, copies=tuple(sorted((remap[e], c) for e, c in jp.structure.copies))
            ),
        )
        for jp in plan.jobs
    )
    # the columns stay on the planning network's plan (the warm start's), not on this copy
    return dataclasses.replace(plan, jobs=jobs, columns=())



def _id_json(alloc: IdAllocation) -> dict[str, dict[str, int]]:
    return {sw: dict(jobs) for sw, jobs in alloc.by_switch.items()}


def _id_table(raw: object) -> dict[str, dict[str, int]]:
    if not isinstance(raw, dict):
        raise TypeError("expected an object")
    out: dict[str, dict[str, int]] = {}
    for sw, jobs in raw.items():
        if not isinstance(sw, str) or not isinstance(jobs, dict):
            raise TypeError("expected switch -> {job: id}")
        table: dict[str, int] = {}
        for job, i in jobs.items():
            if not isinstance(job, str) or isinstance(i, bool) or not isinstance(i, int) or i < 1:
                raise ValueError("bad id")
            table[job] = i
        out[sw] = table
    return out


