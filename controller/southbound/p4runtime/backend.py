"""The P4Runtime backend: many P4 switches from one controller process (docs/p4.md).

`P4RuntimeBackend` (all P4 switches; one `connection.SwitchConnection` each)
receives the core's plans (`on_plan`, registered with `service.planning`):
- one keeper thread per switch connects, arbitrates, installs the pipeline
  (`pipeline`), reports `service.devices.connected`, waits for the stream to
  end, reports `disconnected`, and reconnects every `reconnect_s`. No Read or
  Write goes to a switch before its pipeline is in place (BMv2 crashed on a Read
  during SetForwardingPipelineConfig). When another client is primary (the
  stream's MasterArbitrationUpdate says "Is backup", or a Write is refused with
  PERMISSION_DENIED) the switch is reported once (`service.devices.not_primary`,
  `stats.not_primary`), not written to and planned around; the stream stays
  open as a backup, so the switch's next arbitration update makes us primary
  again at once (then it is read back and repaired), and arbitration is also
  retried on a new stream after a back-off doubling from `reconnect_s` to
  `arbitration_retry_s`;
- each plan is translated once, in the planning thread, for the switches whose
  actual state is known (`translate`: the planner's routing on the topology
  without the down links; one translation per program, with its table sizes and
  CPU port); a switch read back later is translated then, after the group and
  replica ids found on it are adopted (`translate.seed_ids`), so a restarted
  controller changes nothing on a switch that is right;
- one worker thread reconciles: it reads back every switch whose state is
  unknown (wildcard reads), diffs, and writes only the difference in ordered
  batches (`reconcile.steps`: make, switch, break; every batch's answer arrives
  before the next batch is sent, on every switch);
- per update: ALREADY_EXISTS on an insert is retried as a modify, NOT_FOUND on a
  modify as an insert, NOT_FOUND on a delete is done; RESOURCE_EXHAUSTED (the
  spec's answer for a full table or replication engine) and UNKNOWN (BMv2's) on
  a multicast entry or group are capacity signals: `service.devices.table_full(
  switch, "entry" | "group", job)` lowers the budget and re-plans. Any failure
  stops that switch's remaining batches (so nothing is broken before it is
  made) and the switch is read back and repaired, at most `MAX_RETRIES` times
  in a row;
- LLDP, hosts' packets and host probes are `packet_io`'s; `packet_in_pps`
  configures every switch's packet-in meter; `job_counters` reads the multicast
  entries' direct counters, `guard_drops` the source guard's per port (/metrics).
"""

from __future__ import annotations

import ipaddress
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from controller.config.programs import DEFAULT_PROGRAM, program as program_named
from controller.core.service import ControllerService
from controller.core.updates import BackendReport, PlanUpdate, TranslationInputs
from controller.southbound.liveness import LinkLiveness
from controller.southbound.p4runtime import entities as p4_state
from controller.southbound.p4runtime import reconcile as p4_reconcile
from controller.southbound.p4runtime import translate as p4_translate
from controller.southbound.p4runtime.codec import counter_reads, counters_from, guard_counter_reads, guard_drops_from, state_from_entities, to_update, wildcard_reads
from controller.southbound.p4runtime.connection import (
    ALREADY_EXISTS,
    CAPACITY_CODES,
    COUNTER_TIMEOUT_S,
    MAX_RETRIES,
    NOT_FOUND,
    NotPrimary,
    P4RuntimeError,
    SwitchConnection,
    UpdateResult,
    code_name,
)
from controller.southbound.p4runtime.entities import MCAST_TABLE, Exact, MulticastGroup, P4SwitchState, TableEntry, describe
from controller.southbound.p4runtime.p4info import P4Info
from controller.southbound.p4runtime.packet_io import PacketIO
from controller.southbound.p4runtime.failover import port_neighbours
from controller.southbound.p4runtime.fast_failover import FastFailover
from controller.southbound.p4runtime.packets import LinkTracker
from controller.southbound.p4runtime.pipeline import P4SwitchSpec, Pipeline, make_pipeline
from controller.southbound.p4runtime.reconcile import Delete, Insert, Modify, P4Op, diff_switch, steps
from controller.southbound.p4runtime.translate import P4Ids, seed_ids
from controller.southbound.periodic import every
from controller.southbound.probes import host_loop, probe_loop, probe_sender
from controller.southbound.sync_queue import after_sync, run_worker

if TYPE_CHECKING:
    import grpc

log = logging.getLogger("controller.p4runtime")


@dataclass
class _Switch:
    spec: P4SwitchSpec
    conn: SwitchConnection | None = None
    actual: P4SwitchState | None = None  # None: unknown, read it back first
    retries: int = 0
    failed: bool = False  # a batch failed in this sync: its later batches are not sent
    ready: bool = False  # primary with our pipeline: reads and writes may go (never during SetForwardingPipelineConfig)
    not_primary: bool = False  # another client is primary (reported once until we are primary again)
    backoff: float = 0.0  # the wait before the next arbitration retry while another client is primary
    stale: bool = False  # the switch differed from the remembered state: read it back after this sync
    replanning: bool = False  # a refusal taught the service a lower budget: its re-plan repairs the switch

    @property
    def usable(self) -> bool:
        return self.ready and self.conn is not None and self.conn.usable


@dataclass
class BackendStats:
    errors: int = 0  # updates refused (after retries as modify/insert)
    capacity_errors: int = 0  # of those, RESOURCE_EXHAUSTED / UNKNOWN on a multicast entry or group
    writes: int = 0  # Write RPCs sent
    updates: int = 0  # updates sent
    not_primary: int = 0  # times a switch was found to have another primary client
    lldp_mismatches: set = field(default_factory=set)  # (switch, port, seen neighbour, expected)



class P4RuntimeBackend:
    """Keeps the P4 switches of `switches` in the desired state of the service's plan.

    `p4info` and `device_config` are the pipeline of `program`; a switch whose
    spec names another program runs the one `pipelines` gives for it."""

    def __init__(
        self,
        switches: Iterable[P4SwitchSpec],
        p4info: P4Info,
        device_config: bytes,
        *,
        election_id: int = 1,
        reconnect_s: float = 1.0,
        arbitration_retry_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        lldp_interval_s: float = 5.0,
        lldp_timeout_s: float = 15.0,
        packet_in_pps: int = 0,
        clock: Callable[[], float] = time.monotonic,
        program: str = DEFAULT_PROGRAM,
        pipelines: Mapping[str, Pipeline] | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        fast_failover: tuple[float, float] | None = None,
    ) -> None:
        """`fast_failover`: (heartbeat interval, timeout) in seconds to protect tree
        edges in the data plane (`p4runtime.fast_failover`), None not to."""
        # every name the backend writes must resolve now, not on the first write
        self.pipeline = make_pipeline(p4info, device_config, program)
        self._pipelines = {**(pipelines or {}), program: self.pipeline}
        self.p4info = p4info
        self.device_config = device_config
        self.cookie = self.pipeline.cookie
        self.election_id = election_id
        self.reconnect_s = reconnect_s
        self.arbitration_retry_s = max(arbitration_retry_s, reconnect_s)
        self.connect_timeout_s = connect_timeout_s
        self.credentials = credentials  # TLS to every switch (`connection.tls_credentials`); None: plain TCP
        self.lldp_interval_s = lldp_interval_s
        self.packet_in_pps = packet_in_pps
        self.clock = clock
        self.limits = self.pipeline.limits
        switches = list(switches)
        for spec in switches:
            if spec.program not in self._pipelines:
                raise P4RuntimeError(f"switch {spec.name} runs program {spec.program!r}, which the backend was not given")
        for pipe in self._pipelines.values():
            if not pipe.device_config and any(sp.program == pipe.program for sp in switches):
                log.warning("program %s has no device config: its switches get the P4Info alone"
                            " (SetForwardingPipelineConfig); a real %s switch needs the compiler's binary"
                            " as its device config (southbound.p4runtime.device_config; docs/p4.md)", pipe.program, pipe.program)
        self._switches = {s.name: _Switch(s) for s in switches}
        self.service: ControllerService | None = None
        self.stats = BackendStats()
        self.links = LinkTracker(lldp_timeout_s)
        self.liveness: LinkLiveness | None = None
        self.packets: PacketIO | None = None
        self._ids = P4Ids()
        self._lock = threading.RLock()
        self._sync_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        # the plan being translated (`on_plan`), and the desired state of the switches
        # translated for it (those whose actual state is known, or asked for)
        self._inputs: TranslationInputs | None = None
        self._desired: dict[str, P4SwitchState] = {}
        self._fast_failover = fast_failover
        self.failover: FastFailover | None = None

    # -- life cycle ----------------------------------------------------------------------------
    def attach(self, service: ControllerService, start: bool = True) -> None:
        """Receive the core's plans; with `start`, run the threads."""
        if not service.config.discovers:  # a discovered network: the switches join it as they connect
            topo = service.wiring.topology
            unknown = sorted(n for n in self._switches if topo.index.get(n) not in topo.switches)
            if unknown:
                raise ValueError(f"P4Runtime switches not in the topology: {', '.join(unknown)}")
        self.service = service
        if self._fast_failover is not None:
            self.failover = FastFailover(service, self._usable, *self._fast_failover)
        self.liveness = LinkLiveness(service, lambda a, b: self.packets.dead_end(a, b))
        self.packets = PacketIO(service, self._switches, self._usable, lambda n: self._switches[n].spec.ports,
                                self.links, self.liveness, self.stats.lldp_mismatches, self.clock,
                                after_sync(self._queue))
        service.planning.on_plan.append(self.on_plan)
        service.counters.job_counter_sources.append(self.job_counters)
        packets = self.packets
        service.hosts.probe_senders.append(probe_sender(lambda sw, port, frame: packets.send(sw, port, frame)))
        service.counters.guard_drop_sources.append(self.guard_drops)
        served = service.served.current
        if served is not None:  # attached after the first plan: start from the served one
            self.on_plan(served.update())
        if start:
            self._spawn(lambda: run_worker(self._queue, self._stopping.is_set, self.sync, "P4Runtime sync"), "p4rt-sync")
            for name in self._switches:
                self._spawn(lambda n=name: self._keep(n), f"p4rt-keep-{name}")
            if self.lldp_interval_s > 0:
                self._spawn(self._lldp_loop, "p4rt-lldp")
            if self.failover is not None:
                self._spawn(lambda: self.failover.loop(self._stopping), "p4rt-heartbeat")
            self._spawn(lambda: host_loop(self._stopping, service.config.discovery.probe_interval_s,
                                          service.hosts.tick), "p4rt-hosts")
            if service.config.discovers:
                self._spawn(lambda: probe_loop(self._stopping, service.config.discovery.probe_interval_s,
                                               service.jobs.probe_targets, self.packets.probe), "p4rt-probe")

    def _spawn(self, target, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def shutdown(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._queue.put(None)
        with self._lock:
            conns = [sw.conn for sw in self._switches.values() if sw.conn is not None]
        for c in conns:
            c.close()
        for t in self._threads:
            t.join(timeout)
        if self.service is not None and self.on_plan in self.service.planning.on_plan:
            self.service.planning.on_plan.remove(self.on_plan)
        if self.service is not None and self.job_counters in self.service.counters.job_counter_sources:
            self.service.counters.job_counter_sources.remove(self.job_counters)
        if self.service is not None and self.guard_drops in self.service.counters.guard_drop_sources:
            self.service.counters.guard_drop_sources.remove(self.guard_drops)

    def connected(self, name: str) -> bool:
        """Connected and primary: the controller programs the switch."""
        sw = self._switches[name]
        return sw.usable

    def on_plan(self, update: PlanUpdate) -> BackendReport:
        """A new plan (in the core's planning thread): translated at once for the
        switches whose actual state is known (the others are translated once read
        back, after their ids are adopted), then every switch is synced."""
        with self._lock:
            previous = self._desired
            self._inputs, self._desired = update.inputs, {}
            known = [n for n, sw in self._switches.items() if sw.actual is not None]
            try:
                desired = self._translate(known)
            except ValueError as e:
                log.error("cannot translate plan %d for the P4 switches: %s", update.generation, e)
                raise
        written = sum(len(diff_switch(st, previous.get(n, P4SwitchState()))) for n, st in desired.items())
        self._queue.put(("plan", None))
        return BackendReport("p4runtime", written)

    def pipeline_of(self, name: str) -> Pipeline:
        """The pipeline switch `name` runs."""
        return self._pipelines[self._switches[name].spec.program]

    # -- connections ---------------------------------------------------------------------------
    def connect(self, name: str) -> bool:
        """One attempt to connect switch `name` (arbitration, pipeline); True when
        primary. When another client is primary the stream stays open as a backup
        (`sw.conn`; reported by `_not_primary`) and False is returned."""
        sw = self._switches[name]
        pipe = self.pipeline_of(name)
        conn = SwitchConnection(name, sw.spec.address, sw.spec.device_id, self.election_id, pipe.p4info, self._packet_in,
                                self.credentials)
        try:
            primary = conn.connect(self.connect_timeout_s, backup_ok=True)
        except P4RuntimeError as e:
            log.warning("%s", e)
            conn.close()
            return False
        with self._lock:
            sw.conn, sw.actual, sw.retries, sw.ready = conn, None, 0, False
        if not primary:
            self._not_primary(name, conn)
            return False
        return self._primary(name, conn)

    def _primary(self, name: str, conn: SwitchConnection) -> bool:
        """We are primary on `conn`: install the pipeline if it is not ours, report
        the switch connected and queue a sync (which reads it back first)."""
        sw = self._switches[name]
        pipe = self.pipeline_of(name)
        try:
            installed = conn.set_pipeline(pipe.device_config, pipe.cookie)
        except NotPrimary:
            self._not_primary(name, conn)
            return False
        except P4RuntimeError as e:
            hint = "" if pipe.device_config else f" (program {pipe.program} was sent without a device config: configure one)"
            log.warning("%s%s", e, hint)
            with self._lock:
                sw.conn = None
            conn.close()
            return False
        log.info("switch %s: primary at %s (device %d, election id %d)%s", name, sw.spec.address, sw.spec.device_id,
                 self.election_id, "; pipeline installed" if installed else "; pipeline already in place")
        with self._lock:
            sw.actual, sw.retries, sw.backoff, sw.ready = None, 0, 0.0, True
            if sw.not_primary:
                sw.not_primary = False
                log.warning("switch %s: primary again; reading it back and repairing", name)
        self.service.devices.connected(name)
        if self.service.config.discovers:
            self.report_limits(name)
        self.liveness.switch_back(name)
        self._queue.put(("sync", name))
        return True

    def _not_primary(self, name: str, conn: SwitchConnection) -> None:
        """Another client is primary for switch `name` (the stream says so, or a
        write was refused with PERMISSION_DENIED): stop writing to it, report it
        as not ours (`service.devices.not_primary`: GET /switches, /metrics) and
        plan around its links, as for a disconnected switch. Logged and counted
        once until we are primary again."""
        sw = self._switches[name]
        with self._lock:
            first = not sw.not_primary
            sw.not_primary, sw.actual, sw.ready = True, None, False
            if first:
                self.stats.not_primary += 1
                sw.backoff = self.reconnect_s
        self.service.devices.not_primary(name, count=first)
        if first:
            other = conn.primary_election_id
            log.error(
                "switch %s: another P4Runtime client is primary (election id %s; ours is %d): not writing to it; "
                "waiting as a backup, re-arbitrating after %g s, backing off to every %g s",
                name, "unknown" if other is None else other, self.election_id, self.reconnect_s, self.arbitration_retry_s,
            )
        if not self.liveness.is_gone(name) and not self._stopping.is_set():
            self.links.forget(name)
            self.liveness.switch_gone(name)

    def disconnected(self, name: str) -> None:
        """Switch `name`'s stream ended: report it and plan around its links."""
        sw = self._switches[name]
        with self._lock:
            if sw.conn is not None:
                sw.conn.close()
            sw.conn, sw.actual, sw.ready = None, None, False
        self.service.devices.disconnected(name)
        if not self._stopping.is_set():
            log.warning("switch %s disconnected", name)
            self.links.forget(name)
            self.liveness.switch_gone(name)

    def _keep(self, name: str) -> None:
        """Connect switch `name` and keep it: reconnect every `reconnect_s` when the
        stream ends; while another client is primary, wait as a backup (the
        switch's arbitration update makes us primary again at once) and also
        re-arbitrate on a new stream after a back-off that doubles from
        `reconnect_s` to `arbitration_retry_s`."""
        sw = self._switches[name]
        while not self._stopping.is_set():
            self.connect(name)
            conn, retry = sw.conn, False
            while conn is not None and conn.alive and not self._stopping.is_set():
                conn.changed.clear()
                if conn.primary:
                    if sw.not_primary:  # promoted by the switch's arbitration update
                        self._primary(name, conn)
                        continue
                    conn.changed.wait()  # until demoted or closed
                    if conn.alive and not conn.primary and not self._stopping.is_set():
                        self._not_primary(name, conn)
                    continue
                if not sw.not_primary:  # demoted (a refused write) before the keeper saw it
                    self._not_primary(name, conn)
                    continue
                if conn.changed.wait(sw.backoff):
                    continue  # an arbitration update, or the stream ended
                # periodic retry: a new stream, arbitrated afresh
                sw.backoff = min(sw.backoff * 2, self.arbitration_retry_s)
                log.debug("switch %s: re-arbitrating", name)
                with self._lock:
                    sw.conn = None
                conn.close()
                conn, retry = None, True
            if self._stopping.is_set():
                return
            if conn is not None:  # the stream ended
                self.disconnected(name)
            if not retry:  # (a retry reconnects at once: the back-off was the wait)
                self._stopping.wait(self.reconnect_s)

    # -- links ---------------------------------------------------------------------------------
    def report_limits(self, name: str) -> None:
        """Tell the service what switch `name` can hold (the groups its target
        accepts, the multicast table's size in the P4Info) and, in a learned
        network, its ports (with no speed: P4Runtime does not say one, so links
        take `discovery.link_capacity` unless the config states theirs)."""
        spec = self._switches[name].spec
        self.service.devices.report_limits(
            name, max_groups=program_named(spec.program).max_groups,
            max_entries=self._pipelines[spec.program].limits.multicast_entries,
            port_speeds={p: 0 for p in spec.ports} if spec.ports else None, source="p4info",
        )

    def _lldp_loop(self) -> None:
        every(self._stopping, self.lldp_interval_s, self._lldp_round, "LLDP round failed", log)

    def _lldp_round(self) -> None:
        self.packets.send_lldp()
        ff = self.failover
        self.packets.expire_links(None if ff is None else lambda a, b: ff.link_down(a, b, self.desired((a, b))))

    def _packet_in(self, switch: str, port: int, payload: bytes) -> None:
        if self.failover is not None and payload[12:14] == p4_state.ETH_HEARTBEAT.to_bytes(2, "big"):
            self.failover.report(switch, port, payload)  # only a failover report reaches the CPU so (mcast.p4)
        elif self.packets is not None:
            self.packets.packet_in(switch, port, payload)

    def _usable(self) -> dict[str, SwitchConnection]:
        """Switch -> connection, for every switch we program now."""
        with self._lock:
            return {name: sw.conn for name, sw in self._switches.items() if sw.usable}

    # -- reconciliation ------------------------------------------------------------------------
    def read_state(self, name: str) -> P4SwitchState:
        conn = self._switches[name].conn
        if conn is None:
            raise P4RuntimeError(f"switch {name}: not connected")
        p4info = self.pipeline_of(name).p4info
        entities = conn.read(wildcard_reads(p4info, self.pipeline_of(name).tables))
        state, notes = state_from_entities(p4info, entities)
        for note in notes:
            log.warning("switch %s: read back an entity this controller does not write (%s); left alone", name, note)
        return state

    def _read_each(self, reads: Callable[[P4Info], list]) -> Iterator[tuple[str, P4Info, list, tuple[int, ...]]]:
        """(switch, P4Info, what `reads(p4info)` read from it, its ports) per usable switch (never
        during SetForwardingPipelineConfig, which BMv2 does not survive); one silent for COUNTER_TIMEOUT_S is left out."""
        with self._lock:
            conns = {n: (sw.conn, sw.spec.ports) for n, sw in self._switches.items() if sw.usable}
        for name, (conn, ports) in sorted(conns.items()):
            p4info = self.pipeline_of(name).p4info
            try:
                yield name, p4info, conn.read(reads(p4info), timeout=COUNTER_TIMEOUT_S), ports
            except P4RuntimeError as e:
                log.warning("%s", e)

    def job_counters(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(job, switch) -> (packets, bytes) that matched the job's multicast entry
        on that switch (its direct counter), read now (`_read_each`). At the PS's
        edge switch this counts what the PS sent, before the job's meter."""
        with self._lock:
            inputs = self._inputs
        addresses = inputs.group_addresses if inputs is not None else {}
        jobs = {int(ipaddress.IPv4Address(a)): j for j, a in addresses.items() if a}
        out: dict[tuple[str, str], tuple[int, int]] = {}
        for name, p4info, entities, _ in self._read_each(counter_reads):
            for (_, match), value in counters_from(p4info, entities).items():
                dst = dict(match).get(p4_state.F_IPV4_DST)
                job = jobs.get(dst.value) if isinstance(dst, Exact) else None
                if job is not None:
                    packets, octets = out.get((job, name), (0, 0))
                    out[(job, name)] = (packets + value[0], octets + value[1])
        return out

    def guard_drops(self) -> dict[tuple[str, int], int]:
        """(switch, port) -> packets the source guard refused (`source_guard_drops`), read now (`_read_each`)."""
        out: dict[tuple[str, int], int] = {}
        for name, p4info, entities, ports in self._read_each(guard_counter_reads):
            out.update(((name, port), n) for port, n in guard_drops_from(p4info, entities, ports).items())
        return out

    def _translate(self, names: Iterable[str]) -> dict[str, P4SwitchState]:
        """Translate the current plan for switches `names` (lock held): one
        translation per program, with its table sizes and CPU port (ids carry
        over); the result joins the desired state. ValueError if the plan does not
        fit a switch."""
        inputs = self._inputs
        if inputs is None:
            return {}
        # a discovered switch outside the planned piece has no desired state yet: left alone
        names = [n for n in names if n in inputs.network.topo.index]
        by_program: dict[str, list[str]] = {}
        for name in names:
            sw = self._switches.get(name)  # not ours: translate names it in its error
            by_program.setdefault(sw.spec.program if sw else self.pipeline.program, []).append(name)
        out: dict[str, P4SwitchState] = {}
        ff = self.failover
        backups = ff.backups(inputs, [n for n, sw in self._switches.items()
                                      if self._pipelines[sw.spec.program].failover]) if ff else ()
        for program, group in sorted(by_program.items()):
            pipe = self._pipelines[program]
            tr = p4_translate.translate(
                inputs, ids=self._ids, limits=pipe.limits, switches=group, packet_in_pps=self.packet_in_pps,
                cpu_port=pipe.cpu_port, backups=backups if pipe.failover else (),
                failover_timeout_us=ff.timeout_us if ff else 0)
            self._ids = tr.ids
            out.update(tr.state)
            if ff is not None:
                ff.translated(inputs.network.topo, inputs.ports, backups, tr.idle, group)
        self._desired.update(out)
        return out

    def desired(self, names: Iterable[str]) -> dict[str, P4SwitchState]:
        """The desired state of switches `names` for the current plan (those not
        translated for it yet are translated now, which allocates their ids)."""
        with self._lock:
            if self._inputs is None:
                return {}
            names = [n for n in names if n in self._inputs.network.topo.index]
            missing = [n for n in names if n not in self._desired]
            if missing:
                # translated together with every switch already translated: an id
                # allocation covers exactly the switches of its translation
                self._translate(sorted(set(self._desired) | set(missing)))
            return {n: self._desired[n] for n in names if n in self._desired}

    def sync(self, names: set[str] | None) -> None:
        """Bring switches `names` (None: every connected one) to their desired state."""
        with self._lock:
            if self._inputs is None:
                return  # no plan yet: never reconcile against "nothing"
        with self._sync_lock:
            self._sync(names)

    def _sync(self, names: set[str] | None) -> None:
        with self._lock:
            targets = [
                sw for n, sw in self._switches.items()
                if sw.usable and (names is None or n in names)
            ]
            inputs = self._inputs
        addresses = {int(ipaddress.IPv4Address(a)): j for j, a in inputs.group_addresses.items() if a}
        hosts = {int(ipaddress.IPv4Address(a.ip)): h for h, a in inputs.hosts.items()}
        for sw in targets:
            if sw.actual is None:
                try:
                    actual = self.read_state(sw.spec.name)
                except P4RuntimeError as e:
                    log.error("%s", e)
                    continue
                log.info(
                    "switch %s: read back %d table entries, %d groups, %d members, %d meter configs, %d clone sessions",
                    sw.spec.name, len(actual.entries), len(actual.groups), len(actual.members),
                    len(actual.meters), len(actual.clones),
                )
                with self._lock:
                    sw.actual = actual
                    self._ids = seed_ids(self._ids, sw.spec.name, actual, addresses, hosts,
                                         port_neighbours(inputs.network.topo, inputs.ports, sw.spec.name))
                    self._desired.pop(sw.spec.name, None)  # translated again, with the ids found on it
        with self._lock:
            known = [n for n, sw in self._switches.items() if sw.actual is not None]
        try:
            desired = self.desired(known)
        except ValueError as e:
            log.error("cannot translate the plan for the P4 switches: %s", e)
            return
        ops_by_switch: dict[str, list[P4Op]] = {}
        for sw in targets:
            if sw.actual is None or sw.spec.name not in self.service.wiring.topology.index:
                continue  # (a discovered switch not in the planned piece yet: nothing to reconcile against)
            sw.failed = sw.stale = sw.replanning = False
            ops = diff_switch(desired.get(sw.spec.name, P4SwitchState()), sw.actual)
            if ops:
                ops_by_switch[sw.spec.name] = ops
        for batch in steps(ops_by_switch):
            for name, ops in batch.items():
                sw = self._switches[name]
                if not sw.failed:
                    self._write(sw, ops)
        for name, ops in ops_by_switch.items():
            sw = self._switches[name]
            if sw.failed or sw.stale:
                sw.actual = None
                continue
            try:
                sw.actual = p4_reconcile.apply(ops, sw.actual)
            except Exception as e:  # noqa: BLE001 - an inconsistency: read it back
                log.warning("switch %s: remembered state inconsistent (%s); reading it back", name, e)
                sw.actual = None
            log.info("switch %s: %d updates", name, len(ops))
        for name in ops_by_switch:
            sw = self._switches[name]
            if sw.actual is not None:
                sw.retries = 0
            elif sw.replanning:  # retrying the same plan would be refused again
                log.info("switch %s: waiting for the re-plan within the learned budget to repair it", name)
            elif sw.usable and not self._stopping.is_set() and sw.retries < MAX_RETRIES:
                sw.retries += 1
                log.info("switch %s: reading it back to repair (attempt %d)", name, sw.retries)
                self._queue.put(("retry", name))

    def _write(self, sw: _Switch, ops: list[P4Op]) -> None:
        """Send one batch to one switch; retries inserts that exist as modifies and
        modifies of missing entities as inserts; marks the switch failed otherwise."""
        name = sw.spec.name
        p4info = self.pipeline_of(name).p4info
        try:
            results = sw.conn.write([to_update(p4info, op) for op in ops])
        except NotPrimary as e:  # reported once by the keeper (`_not_primary`)
            log.info("%s", e)
            sw.failed = True
            return
        except (P4RuntimeError, AttributeError) as e:
            log.error("switch %s: %s", name, e)
            sw.failed = True
            return
        self.stats.writes += 1
        self.stats.updates += len(ops)
        again: list[P4Op] = []
        for op, res in zip(ops, results):
            if res.ok:
                continue
            if isinstance(op, Insert) and res.code == ALREADY_EXISTS:
                again.append(Modify(op.entity))
            elif isinstance(op, Modify) and res.code == NOT_FOUND:
                again.append(Insert(op.entity))
            elif isinstance(op, Delete) and res.code == NOT_FOUND:
                continue  # already gone
            else:
                self._refused(name, op, res)
                sw.failed = True
        if again and not sw.failed:
            try:
                results = sw.conn.write([to_update(p4info, op) for op in again])
            except P4RuntimeError as e:
                log.error("switch %s: %s", name, e)
                sw.failed = True
                return
            self.stats.writes += 1
            self.stats.updates += len(again)
            for op, res in zip(again, results):
                if not res.ok:
                    self._refused(name, op, res)
                    sw.failed = True
            # the switch held something the remembered state did not: read it back afterwards
            sw.stale = True

    def _refused(self, switch: str, op: P4Op, res: UpdateResult) -> None:
        self.stats.errors += 1
        self.service.counters.backend_error("p4runtime")
        log.error("switch %s refused %s %s: %s: %s", switch, type(op).__name__, describe(op.entity), code_name(res.code), res.message)
        table = capacity_table(op, res.code)
        if table is None:
            return
        self.stats.capacity_errors += 1
        job = self._job_of(switch, op)
        try:
            devices = self.service.devices
            before = devices.table_full_budgets()
            devices.table_full(switch, table, job)
            if devices.table_full_budgets() != before:  # a re-plan follows (and a sync with it)
                self._switches[switch].replanning = True
        except Exception:  # noqa: BLE001 - reporting must not stop the batch
            log.exception("switch %s: cannot report the full %s table", switch, table)

    def _job_of(self, switch: str, op: P4Op) -> str | None:
        x = op.entity
        if isinstance(x, MulticastGroup):
            for job, gid in self._ids.groups.by_switch.get(switch, {}).items():
                if gid == x.group_id:
                    return job
            return None
        if isinstance(x, TableEntry):
            dst = x.matched(p4_state.F_IPV4_DST)
            if isinstance(dst, Exact):
                with self._lock:
                    inputs = self._inputs
                return inputs.job_of_address(str(ipaddress.IPv4Address(dst.value))) if inputs is not None else None
        return None


def capacity_table(op: P4Op, code: int) -> str | None:
    """"group" or "entry" if the refusal of `op` with `code` says the replication
    engine or the multicast table is full (RESOURCE_EXHAUSTED per the spec,
    UNKNOWN from BMv2); None otherwise."""
    if code not in CAPACITY_CODES or isinstance(op, Delete):
        return None
    x = op.entity
    if isinstance(x, MulticastGroup):
        return "group"
    if isinstance(x, TableEntry) and x.table == MCAST_TABLE and isinstance(op, Insert):
        return "entry"
    return None

