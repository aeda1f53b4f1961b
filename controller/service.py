"""The controller service: jobs in, plans and desired switch state out (docs/architecture.md).

`ControllerService` sits between the northbound (REST) and the southbound
(OpenFlow): it owns the registered jobs (persisted in the `JobStore`), their
multicast group addresses (`GroupAddressPool`), the current plan and the desired
state of every switch. It knows nothing of HTTP or of os-ken.

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

For the OpenFlow app, the service offers: `switch_connected`,
`switch_disconnected`, `learn_port` (LLDP: a port leads to a neighbour; the port
map keeps one port per link end and swaps on conflict), `learn_host` (a host's ARP, or
IPv4 from an unknown source: its port and MAC), `host_by_ip` / `host_mac` (proxy ARP),
`set_host_mac`, `link_down`, `link_up`,
`link_at` (the neighbour behind a port), `switch_links`, `ops_for` (the operations
that bring a switch from its actual state to the desired one),
`count_openflow_error` and `table_full` (a switch refused an entry because its
group, flow or meter table is full: a lower group/entry budget is learned for it,
kept until restart, and every later plan is made with it; see `table_full`).
The service is thread-safe: one lock guards its state; planning runs outside it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from . import planner
from .algorithm.admission import NotIncremental, same_topology
from .algorithm.model import Instance, Job, JobPlan, Link, Node, Plan, Topology
from .algorithm.network import Network
from .config import UNLIMITED, Config, explicit_capacities, host_table, switch_backends
from .learned_network import LearnedNetwork, LearnedTopology
from .southbound.addresses import AddressPoolExhausted, GroupAddressPool, HostAddress, normalise_mac
from .southbound.openflow.state import (
    OFPM_CONTROLLER,
    IdAllocation,
    Ids,
    PortMap,
    SwitchState,
    check_port_map,
    default_port_map,
    translate,
)
from .southbound.reconcile import Op, diff, diff_switch
from .store import DuplicateGroupAddress, DuplicateJobId, JobStore, StoredJob, StoreError

log = logging.getLogger(__name__)

JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"
_JOB_ID_RE = re.compile(JOB_ID_PATTERN)
IDS_STATE_KEY = "openflow_ids"
LEARNED_STATE_KEY = "learned_network"
DISCOVERED_STATE_KEY = "discovered_network"
MISSING_LINK_GRACE_S = 15.0  # LLDP speaks about every second per port: a link unseen this long is missing  # the LearnedNetwork, when the config declares no topology


# -- errors ---------------------------------------------------------------------------


class ServiceError(Exception):
    """A refused request: a machine-readable `code`, a message and the offending `field`."""

    code = "bad_request"

    def __init__(self, message: str, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code


class HostsCutOff(ValueError):
    """The links that are down leave some host unable to reach another: no plan."""


class InvalidJob(ServiceError):
    """The job is malformed: code is one of invalid_id, unknown_host, empty_workers,
    duplicate_worker, ps_among_workers, invalid_demand, invalid_weight."""

    code = "invalid_job"


class DuplicateJob(ServiceError):
    code = "duplicate_id"


class UnknownJob(ServiceError):
    code = "not_found"


class Unavailable(ServiceError):
    """The service cannot do it now (no group address left, no plan yet)."""

    code = "unavailable"


# -- views ------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobStatus:
    """A registered job, its group address, and its part of the current plan
    (None while no plan includes this job as it is now)."""

    job: Job
    group_address: str
    seq: int
    planned: JobPlan | None
    # hosts of the job the controller has not located yet (learned network only):
    # the job waits for them, unplanned
    missing_hosts: tuple[str, ...] = ()
    # the topology `planned` refers to (its node and edge indices)
    topology: Topology | None = None
    # why the job failed (hosts never found within `discovery.host_timeout_s`); it
    # stays registered, unplanned, until deleted
    error: str | None = None


@dataclass(frozen=True)
class SwitchStatus:
    id: str
    connected: bool
    groups_used: int
    group_capacity: int | None
    entries_used: int
    entry_capacity: int | None
    flows: int
    meters: int
    learned_group_capacity: int | None = None
    learned_entry_capacity: int | None = None
    backend: str = "openflow"
    other_primary: bool = False  # P4Runtime: reachable, but another client is primary (not ours to program)
    # where the budgets come from: `group_capacity`/`entry_capacity` above are the
    # effective ones, min(configured, reported, learned); the source is the one
    # that set it ("config", "switch", "p4info", "table_full"; None: unlimited)
    configured_group_capacity: int | None = None
    configured_entry_capacity: int | None = None
    reported_group_capacity: int | None = None
    reported_entry_capacity: int | None = None
    group_capacity_source: str | None = None
    entry_capacity_source: str | None = None
    reported_port_speeds: Mapping[int, int] = field(default_factory=dict)  # port -> bit/s, as reported


@dataclass(frozen=True)
class SwitchLimits:
    """What a switch said about its own limits (`report_limits`); None: not said.

    `max_groups`: the groups of type ALL it holds (OpenFlow: OFPMP_GROUP_FEATURES);
    `max_entries`: the entries of the table holding the multicast flows (OpenFlow:
    OFPMP_TABLE_FEATURES of TABLE_FORWARD); `port_speeds`: port -> bit/s (OpenFlow:
    OFPMP_PORT_DESC curr_speed, else max_speed; 0: the port did not say);
    `source`: "switch" (OpenFlow) or "p4info" (a P4 program's sizes)."""

    max_groups: int | None = None
    max_entries: int | None = None
    port_speeds: Mapping[int, int] = field(default_factory=dict)
    source: str = "switch"


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
class ArpAnswer:
    """How the controller answers an ARP request for a known host: with `mac`, or,
    when the MAC is neither learned nor declared in the config, by passing the
    request on to the host itself at `ask` ((switch, port) where it is attached),
    whose reply teaches its MAC and is delivered to the asker (`host_ports`)."""

    mac: str | None
    ask: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class PlanUpdate:
    """What `on_plan` callbacks receive: the new plan and desired state, and the
    operations that turn the previous desired state into it, per switch."""

    generation: int
    plan: Plan
    desired: Mapping[str, SwitchState]
    ops: Mapping[str, list[Op]]


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
    """Jobs, group addresses, the current plan and the desired switch state.

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
        # the learned network (no topology in the config): its facts, and the names
        # the config gives to host addresses
        self._learned_net: LearnedNetwork | None = None
        self._host_names = {hc.ip: name for name, hc in config.hosts.items()} if self.discovers else {}
        self._saved_discovered: object = None
        self._waiting_since: dict[str, float] = {}  # job -> when it was registered (learned network)
        self._failed: dict[str, str] = {}  # job -> why it failed
        if topology is None:
            if not self.discovers:
                raise ValueError("a topology is needed when the config declares one (config.build_topology)")
            topology = Topology((), ())
        self.topology = topology
        self.network = Network(topology)
        self.hosts: dict[str, HostAddress] = {} if self.discovers else host_table(config, topology)
        self._host_by_ip = {addr.ip: name for name, addr in self.hosts.items()}
        self._kind = {n.id: n.kind for n in topology.nodes}
        self._clock = clock
        self._owns_store = store is None
        self._store = store if store is not None else JobStore(config.store.path)
        self._id_factory = id_factory or (lambda: f"job-{uuid.uuid4().hex[:12]}")
        self._settings = config.planner

        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._plan_lock = threading.Lock()  # one re-plan at a time

        self._pool = GroupAddressPool(config.multicast.group_pool)
        self._jobs: dict[str, StoredJob] = {}
        try:
            self._restore_jobs()
            self._ids = self._load_ids()
        except BaseException:
            if self._owns_store:
                self._store.close()
            raise

        self._ports: PortMap = default_port_map(topology)
        self._learned_ports: dict[tuple[int, int], int] = {}  # link ends seen by LLDP or ARP
        self._unexpected: set[tuple[str, int, str]] = set()
        self._strays: set[tuple] = set()  # stray packets already logged
        self._host_macs: dict[str, str] = {}
        if not self.discovers:
            self._restore_learned()
        self._saved_learned: object = None
        self._connected: set[str] = set()
        self._connected_since: dict[str, float] = {}  # switch -> when it (last) connected
        self._missing_logged: set[tuple[str, str]] = set()
        self._other_primary: set[str] = set()  # P4Runtime switches another client is primary for
        self._p4runtime_not_primary = 0
        self._links = frozenset(frozenset((link.a, link.b)) for link in topology.links)
        self._down: set[frozenset[str]] = set()  # links that are down, by node-name pair
        # hold-down (see the module docstring): link -> when its hold-down ends; its
        # current hold-down (grows while it flaps); when it last rejoined the plan
        self._held: dict[frozenset[str], float] = {}
        self._hold: dict[frozenset[str], float] = {}
        self._rejoined: dict[frozenset[str], float] = {}
        self._flaps = 0
        self._plan: Plan | None = None
        self._plan_topology: Topology | None = None  # the topology the current plan is on
        self._inputs: TranslationInputs | None = None
        self._planned: dict[str, JobPlan] = {}
        self._desired: dict[str, SwitchState] = {}
        self._generation = 0
        self._refused_in_plan: dict[tuple[str, str], tuple[int, frozenset[str]]] = {}  # table_full: per plan

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
        self._reoptimise_at: float | None = None  # a full plan is due then (after incremental ones)
        self._churn = (0, 0)  # (jobs whose structure changed, entries written) by the last plan
        self._churn_jobs_total = 0
        self._entries_written_total = 0
        self._incremental_plans = 0
        self._reoptimisations = {"adopted": 0, "kept": 0}
        self._plan_seconds_total = 0.0
        self._openflow_errors = 0
        self._p4runtime_errors = 0
        self._packet_ins: dict[str, int] = {"arp": 0, "ipv4": 0}
        self._no_packet_in_meter: set[str] = set()  # switches that refused OFPM_CONTROLLER
        self._table_full_errors = 0
        self._backends = {} if self.discovers else {name: b.backend for name, b in switch_backends(config, topology).items()}
        self._last_error: str | None = None
        # budgets learned from "table full" errors (switch -> budget); only ever lowered
        self._learned_groups: dict[str, int] = {}
        self._learned_entries: dict[str, int] = {}
        # what each switch reported about its limits (report_limits)
        self._reported: dict[str, SwitchLimits] = {}
        # links whose capacity the config states (the others take their switch ports' speeds)
        self._explicit = explicit_capacities(config, topology)
        if self.discovers:
            self._learned_net = self._restore_discovered()
            self._adopt(self._learned_net)
            self._waiting_since = {j: clock() for j in self._jobs}  # a restart restarts their wait

        self.on_plan: list[Callable[[PlanUpdate], None]] = []
        # callables giving {(job, switch): (packets, bytes)} per job and switch (the
        # P4Runtime backend's direct counters), read at /metrics scrape time
        self.counter_sources: list[Callable[[], Mapping[tuple[str, str], tuple[int, int]]]] = []
        self._thread: threading.Thread | None = None
        self._stopping = False

    # -- start-up -----------------------------------------------------------------------

    def _restore_jobs(self) -> None:
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
                valid = self.validate_job(j.ps, list(j.workers), j.demand, j.weight, j.id)
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
        pool = self._pool
        wanted: dict[ipaddress.IPv4Address, str] = {}
        for sj in stored:
            if sj.group_address is None:
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
            held = sj.job.id in pool
            address = str(pool.address(sj.job.id))
            if not held:
                changed[sj.job.id] = address
                log.warning("job %s: group address %s not restorable, now %s", sj.job.id, sj.group_address, address)
            self._jobs[sj.job.id] = StoredJob(sj.job, address, sj.seq)
        if changed:
            self._store.set_group_addresses(changed)

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

    def owns_group(self, group_id: int) -> bool:
        """True if OpenFlow group `group_id` is the controller's (`southbound.openflow.group_ids`)."""
        return self._ids.groups.owns(group_id)

    def owns_meter(self, meter_id: int) -> bool:
        """True if OpenFlow meter `meter_id` is the controller's: in
        `southbound.openflow.meter_ids`, or the packet-in meter while it is on."""
        if meter_id == OFPM_CONTROLLER:
            return self.config.southbound.openflow.packet_in_pps > 0
        return self._ids.meters.owns(meter_id)

    # -- the learned network (no topology in the config) -------------------------------------

    def _restore_discovered(self) -> LearnedNetwork:
        """The network learned before a restart, so that the first plan after it
        installs what the switches already hold; an empty one if there is none."""
        raw = self._store.get_state(DISCOVERED_STATE_KEY)
        if raw is None:
            return LearnedNetwork()
        try:
            net = LearnedNetwork.from_json(raw)
        except ValueError as e:
            log.warning("the stored learned network cannot be used (%s): learning it again", e)
            return LearnedNetwork()
        log.info("restored the learned network: %d switches, %d links, %d hosts",
                 len(net.switches), len(net.links()), len(net.hosts))
        self._saved_discovered = net.to_json()
        return net

    def _learned_topology(self, net: LearnedNetwork) -> LearnedTopology:
        d = self.config.discovery

        def budget(value: object) -> int | None:
            return None if value is None or value == UNLIMITED else int(value)  # type: ignore[arg-type]

        limits = (budget(d.group_capacity), budget(d.entry_capacity))
        # the default capacity; the ports' reported speeds replace it (`_link_capacity`)
        return net.build(lambda sw, port: d.link_capacity, {s: limits for s in net.switches})

    def _adopt(self, net: LearnedNetwork) -> None:
        """Make the learned network the one planned on (lock held, or in __init__):
        the topology, its host table, port map and link set; a re-plan follows."""
        lt = self._learned_topology(net)
        topo = lt.topology
        idx = topo.index
        self.topology = topo
        self.network = Network(topo)
        self.hosts = dict(lt.addresses)
        self._host_by_ip = {a.ip: name for name, a in self.hosts.items()}
        self._kind = {n.id: n.kind for n in topo.nodes}
        self._ports = {(idx[a], idx[b]): p for (a, b), p in lt.ports.items()}
        self._learned_ports = dict(self._ports)
        self._links = frozenset(frozenset((link.a, link.b)) for link in topo.links)
        self._down = {k for k in self._down if k in self._links}
        self._backends = {topo.name(v): "openflow" for v in topo.switches}
        self._host_macs = {name: a.mac for name, a in self.hosts.items()}

    def _learned_changed(self) -> None:
        """The learned network changed (lock held): plan on it."""
        assert self._learned_net is not None
        self._adopt(self._learned_net)
        self._mark_change()

    def host_name(self, ip: str) -> str:
        """The name of the host with IPv4 address `ip` in a learned network: the
        configured one, else the address itself."""
        return self._host_names.get(ip, ip)

    def waiting_nodes(self) -> list[str]:
        """Learned switches and hosts not connected to the planned network yet."""
        with self._lock:
            return sorted(self._learned_net.outside()) if self._learned_net is not None else []

    def parallel_links(self) -> list[tuple[tuple[str, int], tuple[str, int]]]:
        """Learned links between switch pairs that already have one (unused by plans)."""
        with self._lock:
            return self._learned_net.parallel_links() if self._learned_net is not None else []

    def _restore_learned(self) -> None:
        """The port map and host MACs learned before a restart, so that the first plan
        after it installs what the switches already hold (LLDP, ARP and IPv4 go on
        correcting them). What does not fit the configured topology is dropped whole."""
        raw = self._store.get_state(LEARNED_STATE_KEY)
        if raw is None:
            return
        topo = self.topology
        try:
            ports: dict[tuple[int, int], int] = {}
            learned: dict[tuple[int, int], int] = {}
            for sw, nb, port, seen in raw["ports"]:
                key = (topo.index[sw], topo.index[nb])
                if isinstance(port, bool) or not isinstance(port, int):
                    raise TypeError(f"port {port!r}")
                ports[key] = port
                if seen:
                    learned[key] = port
            if set(ports) != set(self._ports):
                raise ValueError("the link ends differ from the topology's")
            check_port_map(topo, ports)
            macs = {}
            for host, mac in raw["host_macs"].items():
                if self._kind.get(host) != "host":
                    raise ValueError(f"{host!r} is no host")
                macs[host] = normalise_mac(mac)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            log.warning("the stored learned ports and MACs do not fit the topology (%s): starting from the config", e)
            return
        self._ports, self._learned_ports, self._host_macs = ports, learned, macs
        log.info("restored %d learned link ends and %d host MACs", len(learned), len(macs))

    def _save_learned(
        self, ports: PortMap, seen: frozenset[tuple[int, int]], macs: Mapping[str, str], topo: Topology
    ) -> None:
        """Keep the port map (`seen`: its ends learned from the wire) and MACs a plan
        was translated with (only when they changed)."""
        name = topo.name
        value = {
            "ports": sorted([name(v), name(nb), p, (v, nb) in seen] for (v, nb), p in ports.items()),
            "host_macs": dict(sorted(macs.items())),
        }
        if value == self._saved_learned:
            return
        self._store.put_state(LEARNED_STATE_KEY, value)
        self._saved_learned = value

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

    # -- validation ------------------------------------------------------------------------

    def resolve_host(self, value: object, field: str) -> str:
        """The host name for `value`, a host name of the topology or a host's IPv4 address."""
        if not isinstance(value, str) or not value:
            raise InvalidJob(f"{field}: expected a host name or an IPv4 address", field, "unknown_host")
        kind = self._kind.get(value)
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
        name = self._host_by_ip.get(str(ip))
        if name is None and self.discovers:
            if ip.is_multicast or ip.is_unspecified or ip.is_loopback or ip == ipaddress.IPv4Address("255.255.255.255"):
                raise InvalidJob(f"{ip} is not a host address", field, "unknown_host")
            return self.host_name(str(ip))  # not seen yet: the job waits for it
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
    ) -> Job:
        """A `Job` with host names resolved, or `InvalidJob` naming the field."""
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
        return Job(job_id if job_id is not None else "", ps_name, tuple(names), float(demand), float(weight))

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
        job = self.validate_job(ps, workers, demand, 1.0 if weight is None else weight, job_id)
        with self._lock:
            if job_id is None:
                job_id = self._id_factory()
                while job_id in self._jobs:
                    job_id = self._id_factory()
                job = Job(job_id, job.ps, job.workers, job.demand, job.weight)
            if job.id in self._jobs:
                raise DuplicateJob(f"a job with id {job.id!r} exists", "id")
            held = job.id in self._pool  # deleted, and its address not yet released
            try:
                address = str(self._pool.address(job.id))
            except AddressPoolExhausted as e:
                raise Unavailable(str(e), None, "pool_exhausted") from None
            try:
                stored = self._store.add(job, address)
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
            target = self._mark_change(jobs_only=True)
        if wait:
            self.wait_for(target)
        return self.job(job.id)

    def delete_job(self, job_id: str, *, wait: bool = True) -> None:
        """Remove a job; with `wait`, return once a plan without it is in place
        (or after `planner.wait_s`)."""
        with self._lock:
            if job_id not in self._jobs:
                raise UnknownJob(f"no job with id {job_id!r}", "id")
            self._store.delete(job_id)
            del self._jobs[job_id]
            self._waiting_since.pop(job_id, None)
            self._failed.pop(job_id, None)
            target = self._mark_change(jobs_only=True)
        if wait:
            self.wait_for(target)

    def _mark_change(self, at: float | None = None, jobs_only: bool = False) -> int:
        """Count a change (lock held), made now or at time `at` (the end of a
        hold-down, noticed later); `jobs_only` for a job registered or deleted
        (anything else is a change of the network). Returns the count a plan
        must cover."""
        now = self._clock() if at is None else at
        if not jobs_only:
            self._network_changed = True
        self._changes += 1
        self._last_change = max(self._last_change, now)
        if self._first_change is None:
            self._first_change = now
        self._cond.notify_all()
        return self._changes

    # -- facts from the OpenFlow app ------------------------------------------------------------

    def learn_port(self, switch: str, port: int, neighbour: str) -> bool:
        """Port `port` of `switch` leads to `neighbour` (seen by LLDP, or a host's
        ARP). The port map keeps one port per link end: if the map had given `port`
        to another neighbour, that neighbour takes this link's old port (a swap),
        so the map stays complete and learning converges on the real wiring.
        Returns True if the map changed (a re-plan follows); False if it was known,
        or if the topology has no such link (logged and kept in `unexpected_links`)."""
        v = self.topology.index.get(switch)
        nb = self.topology.index.get(neighbour)
        if v is None or self._kind.get(switch) != "switch":
            raise ValueError(f"unknown switch {switch!r}")
        if nb is None:
            raise ValueError(f"unknown node {neighbour!r}")
        with self._lock:
            if (v, nb) not in self._ports:
                key = (switch, port, neighbour)
                if key not in self._unexpected:
                    self._unexpected.add(key)
                    log.warning("%s port %d leads to %s, a link the topology does not have: ignored", switch, port, neighbour)
                return False
            self._learned_ports[(v, nb)] = port
            old = self._ports[(v, nb)]
            if old == port:
                return False
            ports = dict(self._ports)
            other = next((n for (s, n), p in ports.items() if s == v and p == port), None)
            ports[(v, nb)] = port
            if other is not None:
                ports[(v, other)] = old
            check_port_map(self.topology, ports)
            self._ports = ports
            self._mark_change()
        log.info("%s port %d leads to %s (was port %d)", switch, port, neighbour, old)
        return True

    def learn_link(self, a: str, port_a: int, b: str, port_b: int) -> bool:
        """LLDP: port `port_a` of switch `a` reaches port `port_b` of switch `b`.
        In a learned network this adds (or rewires) the link; with a declared
        topology it teaches `a`'s port (`learn_port`). True if anything changed."""
        if not self.discovers:
            return self.learn_port(a, port_a, b)
        with self._lock:
            assert self._learned_net is not None
            if not self._learned_net.add_link(a, port_a, b, port_b):
                return False
            self._learned_changed()
        log.info("link %s port %d - %s port %d learned", a, port_a, b, port_b)
        return True

    def discovered_links(self) -> dict[tuple[str, str], int]:
        """(switch, neighbour) -> port, for every link end learned so far."""
        with self._lock:
            return {(self.topology.name(v), self.topology.name(nb)): p for (v, nb), p in self._learned_ports.items()}

    def missing_links(self, grace_s: float = MISSING_LINK_GRACE_S) -> list[tuple[str, str]]:
        """Declared links between two OpenFlow switches that have both been
        connected for `grace_s` seconds, and that LLDP has not reported from either
        end: the wire differs from the config (a cable missing or plugged
        elsewhere). Each is logged once. None in a learned network."""
        if self.discovers:
            return []
        with self._lock:
            now = self._clock()
            seen = set(self._learned_ports)
            topo = self.topology
            out = []
            for link in topo.links:
                a, b = topo.index[link.a], topo.index[link.b]
                if not (topo.is_switch(a) and topo.is_switch(b)):
                    continue
                if any(self._backends.get(x) != "openflow" for x in (link.a, link.b)):
                    continue  # P4 links have their own liveness (docs/p4.md)
                since = [self._connected_since.get(x) for x in (link.a, link.b)]
                if any(t is None or now - t < grace_s for t in since):
                    continue
                if (a, b) in seen or (b, a) in seen:
                    continue
                pair = tuple(sorted((link.a, link.b)))
                out.append(pair)
                if pair not in self._missing_logged:
                    self._missing_logged.add(pair)
                    log.warning("link %s - %s of the topology not seen by LLDP from either end %.0f s after both "
                                "switches connected: check its cabling (GET /links: missing)", *pair, grace_s)
            return sorted(out)

    def unexpected_links(self) -> list[tuple[str, int, str]]:
        """(switch, port, neighbour) seen on the wire but absent from the topology."""
        with self._lock:
            return sorted(self._unexpected)

    def translation_inputs(self) -> TranslationInputs | None:
        """The inputs of the current desired state (None before the first plan)."""
        with self._lock:
            return self._inputs

    def port_map(self) -> PortMap:
        with self._lock:
            return dict(self._ports)

    def host_by_ip(self, ip: str) -> str | None:
        return self._host_by_ip.get(str(ip))

    def host_mac(self, host: str) -> str:
        """The host's MAC: learned from its packets, else configured (or default)."""
        with self._lock:
            return self._host_macs.get(host) or self.hosts[host].mac

    def host_ports(self, host: str) -> tuple[tuple[str, int], ...]:
        """(switch, port) of every link of `host`, by the port map."""
        h = self.topology.index[host]
        with self._lock:
            ports = self._ports
        return tuple((self.topology.name(v), ports[(v, h)]) for v in self.topology.neighbors[h] if (v, h) in ports)

    def arp_answer(self, host: str) -> ArpAnswer:
        """How to answer an ARP request for `host` (see `ArpAnswer`). A default MAC
        (the n-th host's 00:00:00:00:00:nn) is a guess, so it is never given out: an
        asker that got a wrong MAC would keep it until it asks again, and a silent
        host would never be reached."""
        with self._lock:
            learned = self._host_macs.get(host)
        if learned is not None:
            return ArpAnswer(learned)
        declared = self.config.hosts.get(host)
        if declared is not None and declared.mac is not None:
            return ArpAnswer(self.hosts[host].mac)
        return ArpAnswer(None, self.host_ports(host))

    def learn_host(self, ip: str, mac: str, switch: str, port: int) -> str | None:
        """A packet from IPv4 `ip` / MAC `mac` entered `switch` on `port` (an ARP
        packet-in, or a copy of IPv4 whose source the switch did not know). If `ip` is a known host attached to `switch`, its port and MAC
        are learned (a re-plan follows a change) and its name is returned; an
        unknown address or a host at an unexpected switch is logged once, and
        None is returned (addresses come from the config: see docs/controller.md)."""
        if self.discovers:
            return self._locate_host(str(ip), mac, switch, port)
        host = self._host_by_ip.get(str(ip))
        if host is None:
            self._note_stray(("unknown-ip", str(ip), switch), "%s port %d: packet from unknown address %s (not a configured host)", switch, port, ip)
            return None
        attached = self.switch_links(host)
        if switch not in attached:
            self._note_stray(("moved", host, switch), "host %s (%s) seen at %s port %d, but the topology attaches it to %s", host, ip, switch, port, ", ".join(attached))
            return None
        self.learn_port(switch, port, host)
        self.set_host_mac(host, mac)
        return host

    def _locate_host(self, ip: str, mac: str, switch: str, port: int) -> str | None:
        """`learn_host` in a learned network: the host is where its packet came in."""
        name = self.host_name(ip)
        with self._lock:
            assert self._learned_net is not None
            try:
                moved = self._learned_net.hosts.get(ip)
                changed = self._learned_net.locate_host(name, ip, mac, switch, port)
            except ValueError as e:
                self._note_stray(("not-a-host", ip, switch, port), "%s port %d: packet from %s not taken as a host: %s",
                                 switch, port, ip, e)
                return None
            if changed:
                self._learned_changed()
        if changed:
            if moved is not None and (moved.switch, moved.port) != (switch, port):
                log.info("host %s (%s) moved from %s port %d to %s port %d", name, ip, moved.switch, moved.port, switch, port)
            else:
                log.info("host %s (%s, %s) at %s port %d", name, ip, mac, switch, port)
        return name

    def _note_stray(self, key: tuple, message: str, *args: object) -> None:
        with self._lock:
            if key in self._strays:
                return
            self._strays.add(key)
        log.warning(message, *args)

    def set_host_mac(self, host: str, mac: str) -> None:
        """A learned MAC for a host (used in the rewrites of unicast branches)."""
        if self._kind.get(host) != "host":
            raise ValueError(f"unknown host {host!r}")
        mac = normalise_mac(mac)
        with self._lock:
            if self._host_macs.get(host) != mac:
                self._host_macs[host] = mac
                self._mark_change()

    def switch_connected(self, switch: str) -> None:
        """`switch` is connected (and can be programmed). In a learned network a
        switch seen for the first time joins it."""
        if self.discovers:
            with self._lock:
                assert self._learned_net is not None
                if self._learned_net.add_switch(switch):
                    self._learned_changed()
                    log.info("switch %s joined the learned network", switch)
        elif self._kind.get(switch) != "switch":
            raise ValueError(f"unknown switch {switch!r}")
        with self._lock:
            if switch not in self._connected:
                self._connected_since[switch] = self._clock()
            self._connected.add(switch)
            self._other_primary.discard(switch)

    def switch_disconnected(self, switch: str) -> None:
        with self._lock:
            self._connected.discard(switch)
            self._connected_since.pop(switch, None)
            self._other_primary.discard(switch)

    def switch_not_primary(self, switch: str, count: bool = True) -> None:
        """P4Runtime: the switch answers, but another client is primary for it, so
        this controller does not program it: shown as not connected, with
        `other_primary` (GET /switches, /metrics); `count` adds one to
        `p4runtime_not_primary`. Until `switch_connected` or `switch_disconnected`."""
        if self._kind.get(switch) != "switch":
            raise ValueError(f"unknown switch {switch!r}")
        with self._lock:
            self._connected.discard(switch)
            self._other_primary.add(switch)
            if count:
                self._p4runtime_not_primary += 1

    def _link_key(self, a: str, b: str) -> frozenset[str]:
        key = frozenset((a, b))
        if key not in self._links:
            raise ValueError(f"no link between {a!r} and {b!r}")
        return key

    def link_down(self, a: str, b: str) -> bool:
        """The link between nodes `a` and `b` is down: plan without it (a debounced
        re-plan; none if it was held down, so not in the plan anyway). True if this
        changed anything."""
        key = self._link_key(a, b)
        with self._lock:
            if key in self._down:
                return False
            now = self._clock()
            held = self._held.pop(key, None) is not None
            s = self._settings
            rejoined = self._rejoined.pop(key, None)
            flap = held or (rejoined is not None and now - rejoined < s.link_hold_down_max_s)
            if flap:
                self._flaps += 1
                self._hold[key] = min(2 * self._hold.get(key, s.link_hold_down_s), s.link_hold_down_max_s)
            else:
                self._hold[key] = s.link_hold_down_s
            hold = self._hold[key]
            self._down.add(key)
            if not held:
                self._mark_change()
        if flap:
            log.warning("link %s - %s down (flapping: held down for %g s when it comes up)", a, b, hold)
        else:
            log.warning("link %s - %s down", a, b)
        return True

    def link_up(self, a: str, b: str) -> bool:
        """The link between nodes `a` and `b` is up again: it rejoins the plan once
        its hold-down ends (at once with `link_hold_down_s: 0`), a debounced re-plan.
        True if this changed anything."""
        key = self._link_key(a, b)
        with self._lock:
            if key not in self._down:
                return False
            self._down.discard(key)
            now = self._clock()
            hold = self._hold.get(key, self._settings.link_hold_down_s)
            if hold > 0:
                self._held[key] = now + hold
                self._cond.notify_all()  # the worker must wake when the hold-down ends
            else:
                self._rejoined[key] = now
                self._mark_change()
        if hold > 0:
            log.warning("link %s - %s up: held down for %g s before it rejoins the plan", a, b, hold)
        else:
            log.warning("link %s - %s up", a, b)
        return True

    def _release_holds(self, now: float) -> None:
        """Links whose hold-down has ended by `now` rejoin the plan: a change made
        when the hold-down ended (lock held)."""
        for key, until in sorted(self._held.items(), key=lambda kv: kv[1]):
            if until > now:
                break
            del self._held[key]
            self._rejoined[key] = until
            self._mark_change(until)
            log.warning("link %s - %s rejoins the plan: up for its hold-down of %g s", *sorted(key), self._hold[key])

    def links_held_down(self) -> dict[tuple[str, str], float]:
        """(a, b) sorted -> seconds left of its hold-down, for every link up again
        but not yet back in the plan."""
        with self._lock:
            now = self._clock()
            self._release_holds(now)
            return {tuple(sorted(k)): until - now for k, until in sorted(self._held.items(), key=lambda kv: sorted(kv[0]))}

    def link_at(self, switch: str, port: int) -> str | None:
        """The node at the other end of port `port` of `switch` (by the port map), or None."""
        v = self.topology.index.get(switch)
        if v is None:
            return None
        with self._lock:
            ports = self._ports
        for (sw, nb), p in ports.items():
            if sw == v and p == port:
                return self.topology.name(nb)
        return None

    def switch_links(self, switch: str) -> list[str]:
        """The neighbours of `switch` in the topology (none for a learned switch
        that is not connected to the planned network yet)."""
        topo = self.topology
        v = topo.index.get(switch)
        if v is None:
            if self.discovers:
                return []
            raise KeyError(switch)
        return [topo.name(nb) for nb in topo.neighbors[v]]

    def links_down(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(tuple(sorted(k)) for k in self._down)

    def _planning_topology(
        self,
        down: frozenset[frozenset[str]],
        learned: tuple[Mapping[str, int], Mapping[str, int]] = ({}, {}),
        reported: Mapping[str, SwitchLimits] | None = None,
        ports: PortMap | None = None,
        full: Topology | None = None,
    ) -> tuple[Topology, Network]:
        """The topology without the down links (same nodes, so the same indices
        and the full port map still apply), with each switch's budgets the smallest
        of the configured, the reported (`report_limits`) and the learned
        (`table_full`) ones, each link's capacity as `_link_capacity` says (ports:
        the port map, default the current one), and its Network. Raises ValueError if a host cannot
        reach every other host without the down links."""
        groups, entries = learned
        reported = reported or {}
        full = self.topology if full is None else full
        if not down and not groups and not entries and not reported:
            return full, (self.network if full is self.topology else Network(full))
        nodes = []
        for n in full.nodes:
            if n.id in groups or n.id in entries or n.id in reported:
                (g, _), (f, _) = self._budgets(n, reported.get(n.id), groups, entries)
                n = dataclasses.replace(n, group_capacity=g, entry_capacity=f)
            nodes.append(n)
        nodes = tuple(nodes)
        ports = self._ports if ports is None else ports
        links = tuple(
            Link(link.a, link.b, self._link_capacity(link, ports, reported, full)[0])
            for link in full.links
            if frozenset((link.a, link.b)) not in down
        )
        topo = Topology(nodes, links)
        hosts = topo.hosts
        if hosts:
            seen = {hosts[0]}
            stack = [hosts[0]]
            while stack:
                v = stack.pop()
                for w in topo.neighbors[v]:
                    if w not in seen:
                        seen.add(w)
                        stack.append(w)
            cut = [topo.name(h) for h in hosts if h not in seen]
            if cut:
                links = ", ".join("-".join(sorted(k)) for k in sorted(down, key=sorted))
                raise HostsCutOff(
                    f"with links {links} down, hosts {', '.join(cut[:5])} are unreachable; keeping the last plan"
                )
        return topo, Network(topo)

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

    def packet_in_meter_refused(self, switch: str) -> None:
        """`switch` refused its packet-in meter (OFPM_CONTROLLER; some OpenFlow
        switches have no such meter): it is left out of that switch's desired state
        from the next plan on, so that the rest of the switch converges; what the
        switch sends to the controller is then not capped. Until restart."""
        if self._kind.get(switch) != "switch":
            raise ValueError(f"unknown switch {switch!r}")
        with self._lock:
            if switch in self._no_packet_in_meter:
                return
            self._no_packet_in_meter.add(switch)
            self._mark_change()
        log.warning("switch %s refused the packet-in meter: what it sends to the controller is not capped", switch)

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

    def backend(self, switch: str) -> str:
        """"openflow" or "p4runtime": the southbound that programs `switch` (config
        `southbound`; a learned network is made of OpenFlow switches)."""
        if self.discovers:
            return "openflow"
        return self._backends[switch]

    def job_for_group_id(self, switch: str, group_id: int) -> str | None:
        """The job whose replication group on `switch` has id `group_id` (by the current ids)."""
        with self._lock:
            for job, gid in self._ids.groups.by_switch.get(switch, {}).items():
                if gid == group_id:
                    return job
        return None

    def job_for_address(self, address: str) -> str | None:
        """The job holding multicast group address `address`."""
        with self._lock:
            for job, sj in self._jobs.items():
                if sj.group_address == str(address):
                    return job
        return None

    def table_full(self, switch: str, table: str, job: str | None = None) -> int | None:
        """Switch `switch` refused an entry of `job` because its `table` is full
        ("group": out of groups or buckets; "entry": the flow table refused a
        multicast flow; "meter": out of meters).

        For "group"/"entry" the switch's budget G(v)/F(v) is lowered to the number
        of groups/entries the current plan gives it for jobs other than `job` and
        the jobs refused there before under the same plan (several refusals in one
        batch lower it once, to what fits; with `job` unknown: one less than the
        plan uses there), never above the
        configured budget and never above a budget learned before; the change
        triggers an ordinary (debounced) re-plan that keeps within it. Learned
        budgets are kept until restart. A full meter table is only counted: the
        planner does not model meters. Returns the learned budget, or None.
        """
        if self._kind.get(switch) != "switch":
            raise ValueError(f"unknown switch {switch!r}")
        if table not in ("group", "entry", "meter"):
            raise ValueError(f"unknown table {table!r}")
        v = self.topology.index[switch]
        node = self.topology.nodes[v]
        with self._lock:
            self._table_full_errors += 1
            if table == "meter":
                log.error("switch %s: meter table full (job %s); meters are not planned, nothing re-planned", switch, job)
                return None
            learned = self._learned_groups if table == "group" else self._learned_entries
            configured = node.group_capacity if table == "group" else node.entry_capacity
            holders = [
                jp.job.id
                for jp in (self._plan.jobs if self._plan is not None else ())
                if v in (jp.structure.groups if table == "group" else jp.structure.entries)
            ]
            gen, refused = self._refused_in_plan.get((switch, table), (None, frozenset()))
            if gen != self._generation:
                refused = frozenset()
            if job is not None:
                refused = refused | {job}
                self._refused_in_plan[(switch, table)] = (self._generation, refused)
                budget = sum(1 for h in holders if h not in refused)
            else:
                budget = max(len(holders) - 1, 0)
            rep = self._reported.get(switch)
            said = None if rep is None else (rep.max_groups if table == "group" else rep.max_entries)
            for limit in (configured, said, learned.get(switch)):
                if limit is not None:
                    budget = min(budget, limit)
            if learned.get(switch) == budget:
                return budget
            learned[switch] = budget
            self._mark_change()
        log.error(
            "switch %s: %s table full (job %s); %s budget learned: %d (configured %s); re-planning",
            switch, table, job, "group" if table == "group" else "entry", budget, configured,
        )
        return budget

    def report_limits(
        self,
        switch: str,
        *,
        max_groups: int | None = None,
        max_entries: int | None = None,
        port_speeds: Mapping[int, int] | None = None,
        source: str = "switch",
    ) -> bool:
        """Record what `switch` reported about its limits (the arguments given
        replace what it said before; None keeps it). A change is an ordinary
        change (one debounced re-plan); True if anything changed."""
        learned = self._learned_net is not None and switch in self._learned_net.switches
        if self._kind.get(switch) != "switch" and not learned:
            raise ValueError(f"unknown switch {switch!r}")
        with self._lock:
            old = self._reported.get(switch, SwitchLimits(source=source))
            new = SwitchLimits(
                old.max_groups if max_groups is None else max_groups,
                old.max_entries if max_entries is None else max_entries,
                dict(old.port_speeds) if port_speeds is None else dict(port_speeds),
                source,
            )
            if new == old and switch in self._reported:
                return False
            self._reported[switch] = new
            self._mark_change()
        log.info(
            "switch %s reports max groups %s, max entries %s, port speeds %s (bit/s)",
            switch, new.max_groups, new.max_entries, dict(sorted(new.port_speeds.items())),
        )
        return True

    def reported_limits(self) -> dict[str, SwitchLimits]:
        """Switch -> what it reported about its limits (`report_limits`)."""
        with self._lock:
            return dict(self._reported)

    def _budgets(
        self, node: Node, reported: SwitchLimits | None, groups: Mapping[str, int], entries: Mapping[str, int]
    ) -> tuple[tuple[int | None, str | None], tuple[int | None, str | None]]:
        """((G, its source), (F, its source)) of a switch: the smallest of the
        configured budget, the reported limit and the budget learned from table-full
        errors (a tie goes to the first of these)."""
        src = reported.source if reported is not None else "switch"
        g = _smallest(
            ("config", node.group_capacity),
            (src, reported.max_groups if reported is not None else None),
            ("table_full", groups.get(node.id)),
        )
        f = _smallest(
            ("config", node.entry_capacity),
            (src, reported.max_entries if reported is not None else None),
            ("table_full", entries.get(node.id)),
        )
        return g, f

    def _link_capacity(
        self, link: Link, ports: PortMap, reported: Mapping[str, SwitchLimits], full: Topology | None = None
    ) -> tuple[float, str]:
        """(capacity, source) of a link: the configured one ("config") if the
        config states it (`config.explicit_capacities`); else the smaller of the
        speeds its switch ends report for their ports ("port"; an end that reports
        0 or nothing is left out; a host link: its switch end's); else the
        config's default ("config")."""
        if frozenset((link.a, link.b)) in self._explicit:
            return link.capacity, "config"
        index = (self.topology if full is None else full).index
        speeds = []
        for x, y in ((link.a, link.b), (link.b, link.a)):
            rep = reported.get(x)
            port = ports.get((index[x], index[y])) if rep is not None else None
            if port is not None and rep.port_speeds.get(port, 0) > 0:
                speeds.append(rep.port_speeds[port])
        if not speeds:
            return link.capacity, "config"
        return float(min(speeds)), "port"

    def link_capacities(self) -> dict[tuple[str, str], tuple[float, str]]:
        """(a, b) of every link of `topology` -> (the capacity plans use, its source:
        "config" or "port")."""
        with self._lock:
            ports, reported, topo = dict(self._ports), dict(self._reported), self.topology
        return {(link.a, link.b): self._link_capacity(link, ports, reported, topo) for link in topo.links}

    def learned_budgets(self) -> dict[str, dict[str, int]]:
        """{"groups": {switch: G}, "entries": {switch: F}} learned from table-full errors."""
        with self._lock:
            return {"groups": dict(self._learned_groups), "entries": dict(self._learned_entries)}

    # -- planning ----------------------------------------------------------------------------

    def _due_in(self, now: float) -> float | None:
        """Seconds until a re-plan is due (<= 0: due) or, sooner, until a hold-down
        ends (the caller should look again then); None if nothing is pending.
        Releases the links whose hold-down has ended (lock held)."""
        self._release_holds(now)
        hold_ends = min(self._held.values(), default=None)
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
                self._release_holds(now)
                target = self._changes
                pending = self._covered < target
                # jobs only changed since the last plan: admit them (planner.incremental);
                # nothing changed but a re-optimisation is due: a full plan, kept if it gains
                previous_inputs = self._inputs
                incremental = (self._settings.incremental and pending and not self._network_changed
                               and previous_inputs is not None)
                reoptimising = (not pending and self._reoptimise_at is not None and now >= self._reoptimise_at
                                and previous_inputs is not None)
                self._network_changed = False
                self._first_change = None
                full, hosts = self.topology, self.hosts
                # a job waits (unplanned) while one of its hosts is not in the network
                self._check_waiting()
                jobs = tuple(sj.job for sj in self._jobs.values() if not self._missing(sj.job) and sj.job.id not in self._failed)
                groups = {sj.job.id: sj.group_address for sj in self._jobs.values()}
                ports, macs, ids = self._ports, dict(self._host_macs), self._ids
                discovered = self._learned_net.to_json() if self._learned_net is not None else None
                seen = frozenset(self._learned_ports)
                down = frozenset(self._down) | frozenset(self._held)  # held down: out of the plan too
                learned = (dict(self._learned_groups), dict(self._learned_entries))
                reported = dict(self._reported)
                no_meter = frozenset(self._no_packet_in_meter)
            s = self._settings
            try:
                topo, net = self._planning_topology(down, learned, reported, ports, full)
                plan = None
                if incremental:
                    assert previous_inputs is not None
                    try:
                        plan = planner.run_incremental(Instance(topo, jobs), previous_inputs.plan,
                                                       previous_inputs.network.topo, s.objective)
                    except NotIncremental as e:
                        log.info("jobs changed, but a full plan is needed: %s", e)
                if plan is None:
                    plan = planner.run(Instance(topo, jobs), s.algorithm, s.objective, s.seed)
                if reoptimising:
                    assert previous_inputs is not None
                    served = previous_inputs.plan
                    gain = s.reoptimise_min_gain
                    better = (plan.lam > served.lam * (1 + gain) + 1e-12
                              or plan.throughput > served.throughput * (1 + gain) + 1e-9)
                    with self._cond:
                        self._reoptimise_at = None
                        self._reoptimisations["adopted" if better else "kept"] += 1
                    if not better:
                        log.info("re-optimisation: the full plan (λ %.4g, %.4g bit/s) gains less than %.0f%% over "
                                 "the served one (λ %.4g, %.4g bit/s): kept the served plan",
                                 plan.lam, plan.throughput, 100 * gain, served.lam, served.throughput)
                        return None
                    log.info("re-optimisation: λ %.4g -> %.4g, throughput %.4g -> %.4g bit/s: adopted",
                             served.lam, plan.lam, served.throughput, plan.throughput)
                tr = translate(
                    net, plan, ports, hosts, groups, macs, ids,
                    self.config.southbound.openflow.packet_in_pps, no_meter,
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
                self._plan_topology = full
                self._inputs = TranslationInputs(net, planned_on_net, ports, macs)
                self._planned = {jp.job.id: jp for jp in plan.jobs}
                # addresses of jobs deleted before this plan go back to the pool now
                self._pool.sync(set(self._jobs) | {j.id for j in jobs})
                self._generation += 1
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
                else:
                    self._reoptimise_at = None
            try:
                self._store.put_state(IDS_STATE_KEY, {"groups": _id_json(tr.ids.groups), "meters": _id_json(tr.ids.meters)})
            except Exception:  # noqa: BLE001 - the plan stands; only a restart would renumber
                log.exception("cannot store the OpenFlow ids")
            try:
                if discovered is not None:
                    if discovered != self._saved_discovered:
                        self._store.put_state(DISCOVERED_STATE_KEY, discovered)
                        self._saved_discovered = discovered
                else:
                    self._save_learned(ports, seen, macs, full)
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

    def _missing(self, job: Job) -> tuple[str, ...]:
        """The hosts of `job` that are not in the network (lock held)."""
        return tuple(h for h in (job.ps, *job.workers) if self._kind.get(h) != "host")

    def _check_waiting(self) -> None:
        """Fail the jobs that have waited longer than `discovery.host_timeout_s` for
        hosts never found (lock held). A failed job is not planned until deleted."""
        if not self.discovers:
            return
        timeout = self.config.discovery.host_timeout_s
        now = self._clock()
        for job_id, since in list(self._waiting_since.items()):
            sj = self._jobs.get(job_id)
            if sj is None or job_id in self._failed:
                continue
            missing = self._missing(sj.job)
            if not missing:
                continue
            if now - since >= timeout:
                self._failed[job_id] = (
                    f"hosts {', '.join(missing)} not found within {timeout:g} s (asked for by ARP from every "
                    "edge port): check their addresses and that they are up, then post the job again"
                )
                log.warning("job %s failed: %s", job_id, self._failed[job_id])

    def _host_ip(self, name: str) -> str:
        """The IPv4 address of a host name of a learned network (configured, or the address itself)."""
        hc = self.config.hosts.get(name)
        return hc.ip if hc is not None else name

    def probe_targets(self) -> list[str]:
        """IPv4 addresses of the hosts that waiting jobs name and that were never
        seen: the southbound asks for them (ARP) out of every edge port."""
        with self._lock:
            self._check_waiting()
            out = {
                self._host_ip(h)
                for sj in self._jobs.values() if sj.job.id not in self._failed
                for h in self._missing(sj.job)
            }
            return sorted(out)

    def edge_ports(self, switch: str) -> list[int]:
        """Ports of `switch` (as its port description lists them) that lead to no
        other switch, as far as the learned network knows."""
        with self._lock:
            rep = self._reported.get(switch)
            ports = sorted(rep.port_speeds) if rep is not None else []
            net = self._learned_net
            return [p for p in ports if net is None or not net.is_link_end(switch, p)]

    def _status(self, sj: StoredJob) -> JobStatus:
        planned = self._planned.get(sj.job.id)
        if planned is not None and planned.job != sj.job:
            planned = None  # planned before it was deleted and posted again
        self._check_waiting()
        return JobStatus(sj.job, sj.group_address or "", sj.seq, planned, self._missing(sj.job), self._plan_topology,
                         self._failed.get(sj.job.id))

    def jobs(self) -> list[JobStatus]:
        """Every registered job, in creation order."""
        with self._lock:
            return [self._status(sj) for sj in self._jobs.values()]

    def job(self, job_id: str) -> JobStatus:
        with self._lock:
            sj = self._jobs.get(job_id)
            if sj is None:
                raise UnknownJob(f"no job with id {job_id!r}", "id")
            return self._status(sj)

    def plan(self) -> Plan | None:
        with self._lock:
            return self._plan

    def plan_on_topology(self) -> tuple[Plan | None, Topology | None]:
        """The current plan and the topology its indices refer to (the network can
        change after it was made, when it is learned)."""
        with self._lock:
            return self._plan, self._plan_topology

    def topology_and_ports(self) -> tuple[Topology, PortMap]:
        """The current topology and its port map, consistently."""
        with self._lock:
            return self.topology, dict(self._ports)

    def planned_jobs(self) -> tuple[Job, ...]:
        """The jobs of the current plan (its instance is these on `topology`)."""
        with self._lock:
            return tuple(jp.job for jp in self._plan.jobs) if self._plan is not None else ()

    def desired_state(self) -> dict[str, SwitchState]:
        with self._lock:
            return dict(self._desired)

    def group_addresses(self) -> dict[str, str]:
        with self._lock:
            return {j: sj.group_address or "" for j, sj in self._jobs.items()}

    def switches(self) -> list[SwitchStatus]:
        with self._lock:
            usage = {su.id: su for su in self._plan.switches} if self._plan is not None else {}
            out = []
            for v in self.topology.switches:
                node = self.topology.nodes[v]
                su = usage.get(node.id)
                st = self._desired.get(node.id, SwitchState())
                rep = self._reported.get(node.id)
                (g, g_src), (f, f_src) = self._budgets(node, rep, self._learned_groups, self._learned_entries)
                out.append(
                    SwitchStatus(
                        node.id,
                        node.id in self._connected,
                        su.groups_used if su else 0,
                        g,
                        su.entries_used if su else 0,
                        f,
                        len(st.flows) if self._backends.get(node.id) == "openflow" else 0,
                        sum(1 for m in st.meters if m.meter_id != OFPM_CONTROLLER)
                        if self._backends.get(node.id) == "openflow"
                        else 0,
                        self._learned_groups.get(node.id),
                        self._learned_entries.get(node.id),
                        self._backends.get(node.id, "openflow"),
                        node.id in self._other_primary,
                        node.group_capacity,
                        node.entry_capacity,
                        rep.max_groups if rep is not None else None,
                        rep.max_entries if rep is not None else None,
                        g_src,
                        f_src,
                        dict(rep.port_speeds) if rep is not None else {},
                    )
                )
            return out

    def stats(self) -> Stats:
        switches = tuple(self.switches())
        with self._lock:
            plan = self._plan
            return Stats(
                jobs=len(self._jobs),
                generation=self._generation,
                # a link held down rejoins in a re-plan of its own, due without any other event
                pending=self._covered < self._changes or bool(self._held),
                lam=plan.lam if plan is not None else None,
                throughput=plan.throughput if plan is not None else None,
                plan_seconds=plan.runtime_s if plan is not None else None,
                replans=self._replans,
                replan_failures=self._failures,
                plan_seconds_total=self._plan_seconds_total,
                openflow_errors=self._openflow_errors,
                last_error=self._last_error,
                table_full_errors=self._table_full_errors,
                p4runtime_errors=self._p4runtime_errors,
                p4runtime_not_primary=self._p4runtime_not_primary,
                packet_ins=dict(self._packet_ins),
                switches=switches,
                link_flaps=self._flaps,
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
    return dataclasses.replace(plan, jobs=jobs)



def _smallest(*candidates: tuple[str, int | None]) -> tuple[int | None, str | None]:
    """(the smallest value, its source) of the (source, value) pairs whose value is
    not None; a tie goes to the first; (None, None) when none has a value."""
    best: tuple[int | None, str | None] = (None, None)
    for source, value in candidates:
        if value is not None and (best[0] is None or value < best[0]):
            best = (value, source)
    return best


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


