"""The P4Runtime backend: many P4 switches from one controller process (docs/architecture.md).

Uses the `p4runtime` protobuf bindings with grpcio directly (one channel and one
stream per switch, no global state), not p4runtime-shell, which keeps one client
per process and exits the process when a handshake fails.

`SwitchConnection` (one switch): a gRPC channel; the StreamChannel with primary
election (`MasterArbitrationUpdate` with the configured election id; the
switch must answer OK, i.e. this controller is primary); the forwarding
pipeline (`GetForwardingPipelineConfig` for the cookie, and
`SetForwardingPipelineConfig` VERIFY_AND_COMMIT with the P4Info and the BMv2
JSON only when the cookie differs, so a controller restart does not wipe the
switch); wildcard Reads; Writes that report the outcome of every update
(the `p4.v1.Error` list in the status details); packet-out.

`P4RuntimeBackend` (all P4 switches) attaches to `ControllerService` through
`service.on_plan`, like the OpenFlow app:
- one keeper thread per switch connects, arbitrates, installs the pipeline,
  reports `switch_connected`, waits for the stream to end, reports
  `switch_disconnected`, and reconnects every `reconnect_s`. No Read or Write
  goes to a switch before its pipeline is in place (BMv2 crashed on a Read
  during SetForwardingPipelineConfig). When another client is primary (the
  stream's MasterArbitrationUpdate says "Is backup", or a Write is refused
  with PERMISSION_DENIED) the switch is reported once (`service.switch_not_primary`,
  `stats.not_primary`), not written to and planned around; the stream stays
  open as a backup, so the switch's next arbitration update makes us primary
  again at once (then it is read back and repaired), and arbitration is also
  retried on a new stream after a back-off doubling from `reconnect_s` to
  `arbitration_retry_s`;
- one worker thread reconciles: for each switch whose state is unknown it reads
  everything back (wildcard reads) and adopts the group and replica ids found
  there (`p4runtime.state.seed_ids`); it translates the current plan for the switches
  it knows (`p4runtime.state.translate`, the planner's routing on the topology without
  the down links), diffs, and writes only the difference in ordered batches
  (`p4runtime.state.steps`: make, switch, break; every batch's answer arrives before
  the next batch is sent, on every switch);
- per update: ALREADY_EXISTS on an insert is retried as a modify, NOT_FOUND on
  a modify as an insert, NOT_FOUND on a delete is done; RESOURCE_EXHAUSTED (the
  spec's answer for a full table or replication engine) and UNKNOWN (BMv2's) on
  a multicast entry or group are capacity signals: `service.table_full(switch,
  "entry" | "group", job)` lowers the budget and re-plans. Any failure stops
  that switch's remaining batches (so nothing is broken before it is made) and
  the switch is read back and repaired, at most `MAX_RETRIES` times in a row;
- the packet-in of an LLDP probe reports a link; a link between two P4 switches
  not seen for `lldp_timeout_s` is reported down (`service.link_down`), and up
  again when seen; a link whose ports disagree with the port map is logged and
  kept in `lldp_mismatches`. ARP requests for known hosts are answered, or passed
  on to that host alone while its MAC is unknown (`service.arp_answer`); ARP
  replies to known hosts are delivered to them.
  IPv4 packet-ins are the program's source-check copies: counted and learned
  from (`service.learn_host`), as the OpenFlow app does;
- `packet_in_pps` configures every switch's packet-in meter; `job_counters`
  reads the multicast entries' direct counters (the service's
  `counter_sources`, exported in /metrics).

Ports are the service's port map, as for the OpenFlow app: the default one
corrected by what LLDP probes (`service.learn_port`) and hosts' ARP
(`service.learn_host`) show. The desired state is translated from the service's
`translation_inputs()` (the planning network without down links, the plan on it,
the port map and learned MACs), the inputs of the OpenFlow translation too.

Each switch runs one program (`P4SwitchSpec.program`: `v1model` on BMv2,
`tofino`, `tofino2`; `p4runtime.programs`), driven through its own `Pipeline`:
its P4Info (every name the backend uses checked when the backend starts), device
config, cookie, table sizes and CPU port. A Tofino program without a device
config installs its P4Info alone: the P4Runtime protocol allows it and the test
server accepts it, a real Tofino switch needs its binary (docs/p4.md, "Tofino").
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.rpc import status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller.algorithm.model import Topology

from controller.southbound.p4runtime import state as p4_state
from controller.southbound.p4runtime.codec import counter_reads, counters_from, state_from_entities, to_update, wildcard_reads
from controller.southbound.p4runtime.packets import (
    ARP_REPLY,
    ETH_ARP,
    ETH_IPV4,
    ETH_LLDP,
    LinkTracker,
    arp_reply,
    lldp_frame,
    parse_arp,
    parse_ipv4_source,
    parse_lldp,
)
from controller.southbound.p4runtime.state import (
    HOST_PORTS_TABLE,
    KNOWN_SOURCES_TABLE,
    LPM_TABLE,
    MCAST_TABLE,
    PACKET_IN,
    PACKET_IN_PORT,
    PACKET_OUT,
    PACKET_OUT_PORT,
    REWRITE_TABLE,
    Delete,
    Exact,
    Insert,
    Modify,
    MulticastGroup,
    P4Ids,
    P4Limits,
    P4Op,
    P4SwitchState,
    TableEntry,
    diff_switch,
    seed_ids,
    steps,
)
from controller.southbound.p4runtime.p4info import P4Info, P4InfoError, encode
from controller.config.programs import DEFAULT_PROGRAM, PROGRAMS, program as program_named
from controller.southbound.sync_queue import batches
from controller.addressing.hosts import normalise_mac
from controller.southbound.probes import arp_probe

log = logging.getLogger("controller.p4runtime")

OK, UNKNOWN, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, RESOURCE_EXHAUSTED = 0, 2, 5, 6, 7, 8
CAPACITY_CODES = (RESOURCE_EXHAUSTED, UNKNOWN)
MAX_RETRIES = 3
RPC_TIMEOUT_S = 10.0
PIPELINE_TIMEOUT_S = 60.0  # BMv2 takes a few seconds to load a program
# A refused Write carries one p4.v1.Error per update in its trailing metadata: with
# gRPC's default limit (16 KiB) a batch of a few hundred refusals arrives as a
# client-side RESOURCE_EXHAUSTED for the whole batch instead (seen on BMv2).
CHANNEL_OPTIONS = (
    ("grpc.max_metadata_size", 64 << 20),
    ("grpc.absolute_max_metadata_size", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
    # while a switch is down, connect() waits `connect_timeout_s` for the channel: try
    # about every second (gRPC's default back-off grows 1, 1.6, 2.6, ... s, which
    # left gaps of up to 3.4 s after a restarted switch was listening again)
    ("grpc.initial_reconnect_backoff_ms", 1000),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
COUNTER_TIMEOUT_S = 2.0  # a counter read at scrape time waits no longer per switch
TABLES = tuple(p4_state.USED_TABLES)  # every table the backend writes, so every one it reads back


class P4RuntimeError(RuntimeError):
    """A switch could not be reached, did not make us primary, or refused a request."""


class NotPrimary(P4RuntimeError):
    """Another client is primary for the device: it refuses our writes (PERMISSION_DENIED)."""


@dataclass(frozen=True)
class UpdateResult:
    """The outcome of one update of a Write: a canonical gRPC code (0: OK) and a message."""

    code: int
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code == OK


def code_name(code: int) -> str:
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c.name
    return str(code)


def write_results(err: grpc.RpcError, n: int) -> list[UpdateResult]:
    """The outcome of each of the `n` updates of a failed Write, from the
    `p4.v1.Error` details of its status (the whole batch's code if there are none)."""
    code = err.code().value[0] if err.code() is not None else UNKNOWN
    message = err.details() or ""
    details = None
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            details = status_pb2.Status.FromString(value)
    if details is None or len(details.details) != n:
        return [UpdateResult(code, message)] * n
    out = []
    for anything in details.details:
        e = p4runtime_pb2.Error()
        if not anything.Unpack(e):
            out.append(UpdateResult(code, message))
        else:
            out.append(UpdateResult(e.canonical_code, e.message))
    return out


# -- one switch ------------------------------------------------------------------------------------
class SwitchConnection:
    """A P4Runtime session with one device: stream, primary election, RPCs."""

    def __init__(
        self,
        name: str,
        address: str,
        device_id: int,
        election_id: int,
        p4info: P4Info,
        on_packet: Callable[[str, int, bytes], None] | None = None,
    ) -> None:
        self.name = name
        self.address = address
        self.device_id = device_id
        self.election_id = election_id
        self.p4info = p4info
        self.on_packet = on_packet
        self._channel: grpc.Channel | None = None
        self._stub: p4runtime_pb2_grpc.P4RuntimeStub | None = None
        self._requests: queue.Queue = queue.Queue()
        self._arbitration: queue.Queue = queue.Queue()
        self._reader: threading.Thread | None = None
        self.closed = threading.Event()  # set when the stream ends
        # primary election, as the switch's latest MasterArbitrationUpdate (or a
        # PERMISSION_DENIED) says; `changed` is set on every change and on close
        self.primary = False
        self.primary_election_id: int | None = None
        self.changed = threading.Event()
        pin = p4info.packet_header(PACKET_IN)
        self._in_port_id = pin.field(PACKET_IN_PORT).id
        pout = p4info.packet_header(PACKET_OUT)
        self._out_fields = [(m.id, m.bitwidth, m.name == PACKET_OUT_PORT) for m in pout.fields]
        pout.field(PACKET_OUT_PORT)  # raises if absent

    @property
    def _election(self) -> p4runtime_pb2.Uint128:
        return p4runtime_pb2.Uint128(high=self.election_id >> 64, low=self.election_id & (2**64 - 1))

    def connect(self, timeout: float = 5.0, backup_ok: bool = False) -> bool:
        """Open the channel and the stream, and become primary; P4RuntimeError if not.
        With `backup_ok`, a switch that has another primary (it answers ALREADY_EXISTS,
        "Is backup") leaves the stream open as a backup and False is returned; the
        stream then follows the switch's arbitration updates (`primary`, `changed`)."""
        self._channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self.close()
            raise P4RuntimeError(f"switch {self.name}: no P4Runtime server at {self.address}") from None
        self._stub = p4runtime_pb2_grpc.P4RuntimeStub(self._channel)
        responses = self._stub.StreamChannel(iter(self._requests.get, None))
        self._reader = threading.Thread(target=self._read_stream, args=(responses,), name=f"p4rt-{self.name}", daemon=True)
        self._reader.start()
        self._requests.put(
            p4runtime_pb2.StreamMessageRequest(
                arbitration=p4runtime_pb2.MasterArbitrationUpdate(device_id=self.device_id, election_id=self._election)
            )
        )
        try:
            update = self._arbitration.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise P4RuntimeError(f"switch {self.name}: no arbitration answer within {timeout:.0f} s") from None
        if update is None:
            self.close()
            raise P4RuntimeError(f"switch {self.name}: the stream closed during arbitration")
        if update.status.code == OK:
            return True
        if update.status.code == ALREADY_EXISTS and backup_ok:
            return False
        self.close()
        raise NotPrimary(
            f"switch {self.name}: not primary (election id {self.election_id}; the switch says "
            f"{code_name(update.status.code)}: {update.status.message})"
        )

    def _note_arbitration(self, update: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        primary = update.status.code == OK
        eid = (update.election_id.high << 64) | update.election_id.low
        if (primary, eid) != (self.primary, self.primary_election_id):
            self.primary, self.primary_election_id = primary, eid
            self.changed.set()

    def _refused_as_backup(self) -> None:
        if self.primary:
            self.primary = False
            self.changed.set()

    def _read_stream(self, responses) -> None:
        try:
            for msg in responses:
                kind = msg.WhichOneof("update")
                if kind == "arbitration":
                    self._note_arbitration(msg.arbitration)
                    self._arbitration.put(msg.arbitration)
                elif kind == "packet":
                    port = None
                    for m in msg.packet.metadata:
                        if m.metadata_id == self._in_port_id:
                            port = int.from_bytes(m.value, "big")
                    if port is not None and self.on_packet is not None:
                        try:
                            self.on_packet(self.name, port, msg.packet.payload)
                        except Exception:  # noqa: BLE001 - one bad packet must not end the stream
                            log.exception("switch %s: packet-in handler failed", self.name)
                elif kind == "error":
                    log.error("switch %s: stream error %s", self.name, msg.error)
        except grpc.RpcError as e:
            if not self.closed.is_set():
                log.warning("switch %s: stream ended: %s", self.name, e.code())
        finally:
            self._arbitration.put(None)
            self.closed.set()
            self.changed.set()

    def close(self) -> None:
        self._requests.put(None)
        self.closed.set()
        self.changed.set()
        if self._channel is not None:
            self._channel.close()

    @property
    def alive(self) -> bool:
        return self._stub is not None and not self.closed.is_set()

    @property
    def usable(self) -> bool:
        """Alive and primary: the switch takes our writes and packet-outs."""
        return self.alive and self.primary

    # -- RPCs -------------------------------------------------------------------------------------
    def pipeline_cookie(self) -> int | None:
        """The cookie of the installed pipeline, or None if none is installed."""
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id, response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.COOKIE_ONLY
        )
        try:
            resp = self._stub.GetForwardingPipelineConfig(req, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                return None  # no pipeline yet
            raise P4RuntimeError(f"switch {self.name}: GetForwardingPipelineConfig: {e.code().name}: {e.details()}") from None
        return resp.config.cookie.cookie if resp.config.HasField("cookie") else None

    def set_pipeline(self, device_config: bytes, cookie: int) -> bool:
        """Install the pipeline unless one with `cookie` is installed; True if it was installed."""
        if self.pipeline_cookie() == cookie:
            return False
        config = p4runtime_pb2.ForwardingPipelineConfig(p4info=self.p4info.message, p4_device_config=device_config)
        config.cookie.cookie = cookie
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            election_id=self._election,
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
            config=config,
        )
        try:
            self._stub.SetForwardingPipelineConfig(req, timeout=PIPELINE_TIMEOUT_S)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.PERMISSION_DENIED:
                self._refused_as_backup()
                raise NotPrimary(f"switch {self.name}: SetForwardingPipelineConfig: {e.details()}") from None
            raise P4RuntimeError(f"switch {self.name}: SetForwardingPipelineConfig: {e.code().name}: {e.details()}") from None
        return True

    def read(self, entities: Iterable[p4runtime_pb2.Entity], timeout: float = RPC_TIMEOUT_S) -> list[p4runtime_pb2.Entity]:
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id, entities=list(entities))
        try:
            return [e for resp in self._stub.Read(req, timeout=timeout) for e in resp.entities]
        except grpc.RpcError as e:
            raise P4RuntimeError(f"switch {self.name}: Read: {e.code().name}: {e.details()}") from None

    def write(self, updates: list[p4runtime_pb2.Update]) -> list[UpdateResult]:
        """Send one Write; the outcome of every update, in order."""
        if not updates:
            return []
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id, election_id=self._election, updates=updates)
        try:
            self._stub.Write(req, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise P4RuntimeError(f"switch {self.name}: Write: {e.code().name}: {e.details()}") from None
            if e.code() == grpc.StatusCode.PERMISSION_DENIED:  # BMv2: "Not primary"
                self._refused_as_backup()
                raise NotPrimary(f"switch {self.name}: Write refused: PERMISSION_DENIED: {e.details()}") from None
            return write_results(e, len(updates))
        return [UpdateResult(OK)] * len(updates)

    def packet_out(self, payload: bytes, port: int) -> None:
        msg = p4runtime_pb2.PacketOut(payload=payload)
        for mid, width, is_port in self._out_fields:
            msg.metadata.add(metadata_id=mid, value=encode(port if is_port else 0, width))
        self._requests.put(p4runtime_pb2.StreamMessageRequest(packet=msg))


# -- all switches ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class P4SwitchSpec:
    """Where a P4 switch's P4Runtime server is, and the program it runs (`p4runtime.programs`)."""

    name: str
    address: str
    device_id: int
    program: str = DEFAULT_PROGRAM
    ports: tuple[int, ...] = ()  # in a learned network: where LLDP and host probes go out


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


def pipeline_cookie(p4info: P4Info, device_config: bytes) -> int:
    """A 64-bit cookie identifying the P4Info and device config together."""
    digest = hashlib.sha256(p4info.message.SerializeToString(deterministic=True) + b"\0" + device_config).digest()
    return int.from_bytes(digest[:8], "big")


def check_names(p4info: P4Info) -> None:
    """Every name the backend writes resolves in `p4info`, as the backend uses it
    (match kinds, parameters, meter units and tables); P4InfoError otherwise."""
    for table, fields in p4_state.USED_TABLES.items():
        for name, _ in fields:
            p4info.table(table).field(name)
    for action, params in p4_state.USED_ACTIONS.items():
        for p in params:
            p4info.action(action).param(p)
    for name, (unit, table) in p4_state.USED_METERS.items():
        m = p4info.meter(name)
        on = p4info.table(table).id if table else 0
        if (m.unit, m.direct_table_id) != (unit, on):
            raise P4InfoError(f"meter {name}: unit {m.unit} on table id {m.direct_table_id}, the backend needs {unit} on {table}")
    for name, table in p4_state.USED_DIRECT_COUNTERS.items():
        if p4info.counter(name).direct_table_id != p4info.table(table).id:
            raise P4InfoError(f"counter {name} is not the direct counter of {table}")
    p4info.profile(p4_state.ECMP_PROFILE)
    for header, fields in p4_state.USED_PACKET_METADATA.items():
        for name in fields:
            p4info.packet_header(header).field(name)


def p4_table_limits(p4info: P4Info) -> P4Limits:
    """The table sizes the translation keeps within, from the P4Info."""
    return P4Limits(
        p4info.table(MCAST_TABLE).size or None,
        p4info.table(LPM_TABLE).size or None,
        p4info.table(REWRITE_TABLE).size or None,
        p4info.profile(p4_state.ECMP_PROFILE).size or None,
        p4info.table(HOST_PORTS_TABLE).size or None,
        p4info.table(KNOWN_SOURCES_TABLE).size or None,
        p4info.table(p4_state.KNOWN_ARP_SOURCES_TABLE).size or None,
        p4info.table(p4_state.ARP_ROUTES_TABLE).size or None,
    )


@dataclass(frozen=True)
class Pipeline:
    """One program as the backend drives it on a switch: P4Info, device config (b""
    for none: SetForwardingPipelineConfig then carries the P4Info alone), cookie,
    table sizes and CPU port."""

    program: str
    p4info: P4Info
    device_config: bytes
    cookie: int
    limits: P4Limits
    cpu_port: int


def make_pipeline(p4info: P4Info, device_config: bytes, program: str = DEFAULT_PROGRAM) -> Pipeline:
    """The pipeline of `program` with this P4Info and device config; P4InfoError
    if the P4Info lacks a name the backend uses, ValueError for an unknown program."""
    check_names(p4info)
    return Pipeline(program, p4info, device_config, pipeline_cookie(p4info, device_config),
                    p4_table_limits(p4info), program_named(program).cpu_port)


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
    ) -> None:
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
        self.service = None
        self.stats = BackendStats()
        self.links = LinkTracker(lldp_timeout_s)
        self._ids = P4Ids()
        self._lock = threading.RLock()
        self._sync_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._gone: set[str] = set()  # switches that disconnected: their links are down

    # -- life cycle ----------------------------------------------------------------------------
    def attach(self, service, start: bool = True) -> None:
        """Subscribe to the service's plans; with `start`, run the threads."""
        if not service.discovers:  # a learned network: the switches join it as they connect
            topo = service.topology
            unknown = sorted(n for n in self._switches if topo.index.get(n) not in topo.switches)
            if unknown:
                raise ValueError(f"P4Runtime switches not in the topology: {', '.join(unknown)}")
        self.service = service
        service.on_plan.append(self._on_plan)
        service.counter_sources.append(self.job_counters)
        if start:
            self._spawn(self._work, "p4rt-sync")
            for name in self._switches:
                self._spawn(lambda n=name: self._keep(n), f"p4rt-keep-{name}")
            if self.lldp_interval_s > 0:
                self._spawn(self._lldp_loop, "p4rt-lldp")
            if service.discovers:
                self._spawn(self._probe_loop, "p4rt-probe")

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
        if self.service is not None and self._on_plan in self.service.on_plan:
            self.service.on_plan.remove(self._on_plan)
        if self.service is not None and self.job_counters in self.service.counter_sources:
            self.service.counter_sources.remove(self.job_counters)

    def connected(self, name: str) -> bool:
        """Connected and primary: the controller programs the switch."""
        sw = self._switches[name]
        return sw.usable

    def _on_plan(self, update) -> None:
        self._queue.put(("plan", None))

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
        conn = SwitchConnection(name, sw.spec.address, sw.spec.device_id, self.election_id, pipe.p4info, self._packet_in)
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
        self.service.switch_connected(name)
        if self.service.discovers:
            self.report_limits(name)
        if name in self._gone:
            self._gone.discard(name)
            self._update_links_of(name)
        self._queue.put(("sync", name))
        return True

    def _not_primary(self, name: str, conn: SwitchConnection) -> None:
        """Another client is primary for switch `name` (the stream says so, or a
        write was refused with PERMISSION_DENIED): stop writing to it, report it
        as not ours (`service.switch_not_primary`: GET /switches, /metrics) and
        plan around its links, as for a disconnected switch. Logged and counted
        once until we are primary again."""
        sw = self._switches[name]
        with self._lock:
            first = not sw.not_primary
            sw.not_primary, sw.actual, sw.ready = True, None, False
            if first:
                self.stats.not_primary += 1
                sw.backoff = self.reconnect_s
        self.service.switch_not_primary(name, count=first)
        if first:
            other = conn.primary_election_id
            log.error(
                "switch %s: another P4Runtime client is primary (election id %s; ours is %d): not writing to it; "
                "waiting as a backup, re-arbitrating after %g s, backing off to every %g s",
                name, "unknown" if other is None else other, self.election_id, self.reconnect_s, self.arbitration_retry_s,
            )
        if name not in self._gone and not self._stopping.is_set():
            self._gone.add(name)
            self.links.forget(name)
            self._update_links_of(name)

    def disconnected(self, name: str) -> None:
        """Switch `name`'s stream ended: report it and plan around its links."""
        sw = self._switches[name]
        with self._lock:
            if sw.conn is not None:
                sw.conn.close()
            sw.conn, sw.actual, sw.ready = None, None, False
        self.service.switch_disconnected(name)
        if not self._stopping.is_set():
            log.warning("switch %s disconnected", name)
            self._gone.add(name)
            self.links.forget(name)
            self._update_links_of(name)

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
    def _update_links_of(self, name: str) -> None:
        for peer in self.service.switch_links(name):
            self._update_link(name, peer)

    def report_limits(self, name: str) -> None:
        """Tell the service what switch `name` can hold (the groups its target
        accepts, the multicast table's size in the P4Info) and, in a learned
        network, its ports (with no speed: P4Runtime does not say one, so links
        take `discovery.link_capacity` unless the config states theirs)."""
        spec = self._switches[name].spec
        self.service.report_limits(
            name, max_groups=program_named(spec.program).max_groups,
            max_entries=self._pipelines[spec.program].limits.multicast_entries,
            port_speeds={p: 0 for p in spec.ports} if spec.ports else None, source="p4info",
        )

    def _update_link(self, a: str, b: str) -> None:
        down = a in self._gone or b in self._gone
        index = self.service.topology.index
        if a not in index or b not in index:
            return  # a learned switch not in the planned piece yet
        for x, y in ((a, b), (b, a)):
            port = self.service.port_map().get((index[x], index[y]))
            if port is not None and self.links.is_dead(x, port):
                down = True
        try:
            if down:
                self.service.link_down(a, b)
            else:
                self.service.link_up(a, b)
        except ValueError as e:
            log.warning("link %s - %s: %s", a, b, e)

    def send_lldp(self) -> int:
        """An LLDP probe out of every switch-facing port of every connected switch
        (in a learned network: out of every port the config lists for it); returns
        how many."""
        topo = self.service.topology
        n = 0
        with self._lock:
            conns = {name: sw.conn for name, sw in self._switches.items() if sw.usable}
        if self.service.discovers:
            for name, conn in sorted(conns.items()):
                for port in self._switches[name].spec.ports:
                    conn.packet_out(lldp_frame(name, port), port)
                    n += 1
            return n
        for (v, nb), port in sorted(self.service.port_map().items()):
            name = topo.name(v)
            if name in conns and topo.is_switch(nb):
                conns[name].packet_out(lldp_frame(name, port), port)
                n += 1
        return n

    def expire_links(self) -> list[tuple[str, str]]:
        """Report links not seen by LLDP for the timeout as down; returns them."""
        out = []
        for src, _, dst, _ in self.links.expire(self.clock()):
            log.warning("link %s - %s: no LLDP probe seen for %.0f s", src, dst, self.links.timeout_s)
            self._update_link(src, dst)
            out.append((src, dst))
        return out

    def _lldp_loop(self) -> None:
        while not self._stopping.wait(self.lldp_interval_s):
            try:
                self.send_lldp()
                self.expire_links()
            except Exception:  # noqa: BLE001 - keep probing
                log.exception("LLDP round failed")

    def _packet_in(self, switch: str, port: int, payload: bytes) -> None:
        if len(payload) < 14:
            return
        ethertype = int.from_bytes(payload[12:14], "big")
        if ethertype == ETH_LLDP:
            probe = parse_lldp(payload)
            if probe is None or probe[0] not in self._switches:
                return
            src, src_port = probe
            if self.service.discovers:  # a link of the learned network: add it, and it is alive
                try:
                    self.service.learn_link(src, src_port, switch, port)
                except ValueError as e:
                    log.warning("LLDP %s:%d -> %s:%d: %s", src, src_port, switch, port, e)
                if self.links.observe(src, src_port, switch, port, self.clock()):
                    log.info("link %s - %s: LLDP probes seen again", src, switch)
                    self._update_link(src, switch)
                return
            # learn both ends (a miswired port swaps with the one the map had; a
            # link the topology lacks is only recorded by the service)
            for a_sw, a_port, b_sw in ((src, src_port, switch), (switch, port, src)):
                try:
                    self.service.learn_port(a_sw, a_port, b_sw)
                except ValueError as e:
                    log.warning("LLDP %s:%d -> %s: %s", a_sw, a_port, b_sw, e)
            expected = self.service.link_at(src, src_port)
            back = self.service.link_at(switch, port)
            if expected != switch or back != src:
                fact = (src, src_port, switch, port)
                if fact not in self.stats.lldp_mismatches:
                    self.stats.lldp_mismatches.add(fact)
                    log.warning(
                        "LLDP: %s port %d reaches %s port %d, but the port map says %s port %d leads to %s "
                        "and %s port %d to %s", src, src_port, switch, port, src, src_port, expected, switch, port, back,
                    )
                return
            if self.links.observe(src, src_port, switch, port, self.clock()):
                log.info("link %s - %s: LLDP probes seen again", src, switch)
                self._update_link(src, switch)
        elif ethertype == ETH_IPV4:
            # a source-check copy: the switch forwarded the packet itself; this copy
            # is for learning only (as the OpenFlow app learns from its table 0 copies)
            src = parse_ipv4_source(payload)
            if src is None:
                return
            self.service.count_packet_in("ipv4")
            ip, mac = src
            try:
                self.service.learn_host(ip, mac, switch, port)
            except ValueError as e:
                log.warning("switch %s port %d: IPv4 from %s: %s", switch, port, ip, e)
        elif ethertype == ETH_ARP:
            req = parse_arp(payload)
            if req is None:
                return
            self.service.count_packet_in("arp")
            # a known host's ARP for a known host is routed by the switches
            # themselves (arp_routes); this is the copy: learn, answer, never pass on
            routed = self._known_source(switch, port, req.sender_ip, req.sender_mac) and (
                self.service.host_by_ip(req.target_ip) is not None)
            try:
                self.service.learn_host(req.sender_ip, req.sender_mac, switch, port)
            except ValueError as e:
                log.warning("switch %s port %d: ARP from %s: %s", switch, port, req.sender_ip, e)
            if req.target_ip == req.sender_ip:
                return  # a gratuitous announcement: learned from, nothing to answer
            if req.op == ARP_REPLY:
                # a host answering a request the controller passed on: to the asker
                asker = self.service.host_by_ip(req.target_ip)
                if asker is not None and not routed:
                    self._packet_out(self.service.host_ports(asker), payload, (switch, port))
                return
            target = self.service.host_by_ip(req.target_ip)
            if target is None:
                return  # unknown: no answer, no flooding
            answer = self.service.arp_answer(target)
            if answer.mac is not None:
                self._packet_out(((switch, port),), arp_reply(req, answer.mac), None)
            elif not routed:  # its MAC is not known: ask the host itself (it answers the asker)
                self._packet_out(answer.ask, payload, (switch, port))

    # -- host probing (learned network) ------------------------------------------------------------
    def _probe_loop(self) -> None:
        """Every `discovery.probe_interval_s`, ask for the hosts that waiting jobs name
        and that were never seen (as the OpenFlow app does)."""
        interval = self.service.config.discovery.probe_interval_s
        while not self._stopping.wait(interval):
            try:
                self.probe(self.service.probe_targets())
            except Exception:  # noqa: BLE001 - the prober must survive one bad round
                log.exception("host probing failed")

    def probe(self, ips: Iterable[str]) -> int:
        """One ARP probe per address out of every edge port of every connected
        switch (never flooded through the fabric); the number of frames sent."""
        frames = [arp_probe(ip) for ip in ips]
        if not frames:
            return 0
        with self._lock:
            conns = {name: sw.conn for name, sw in self._switches.items() if sw.usable}
        sent = 0
        for name, conn in sorted(conns.items()):
            for port in self.service.edge_ports(name):
                for frame in frames:
                    conn.packet_out(frame, port)
                    sent += 1
        return sent

    def _known_source(self, switch: str, port: int, ip: str, mac: str) -> bool:
        """True if (switch, port, ip, mac) is a known host's, as the switch's
        known-source entries say (the host there, with the MAC the service has)."""
        host = self.service.host_by_ip(ip)
        if host is None or (switch, port) not in self.service.host_ports(host):
            return False
        try:
            return self.service.host_mac(host) == normalise_mac(mac)
        except ValueError:
            return False

    def _packet_out(self, ends, frame: bytes, came_from: tuple[str, int] | None) -> None:
        """Send `frame` out of every (switch, port) of `ends` but the one it came from."""
        for sw_name, port in ends:
            if (sw_name, port) == came_from:
                continue
            with self._lock:
                sw = self._switches.get(sw_name)
                conn = sw.conn if sw is not None and sw.usable else None
            if conn is not None:
                conn.packet_out(frame, port)

    # -- reconciliation ------------------------------------------------------------------------
    def _work(self) -> None:
        for targets in batches(self._queue, lambda: self._stopping.is_set()):
            try:
                self.sync(targets)
            except Exception:  # noqa: BLE001 - the worker must survive one bad batch
                log.exception("P4Runtime sync failed")

    def read_state(self, name: str) -> P4SwitchState:
        conn = self._switches[name].conn
        if conn is None:
            raise P4RuntimeError(f"switch {name}: not connected")
        p4info = self.pipeline_of(name).p4info
        entities = conn.read(wildcard_reads(p4info, TABLES))
        state, notes = state_from_entities(p4info, entities)
        for note in notes:
            log.warning("switch %s: read back an entity this controller does not write (%s); left alone", name, note)
        return state

    def job_counters(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(job, switch) -> (packets, bytes) that matched the job's multicast entry
        on that switch (its direct counter), read now from every switch we program
        (primary with its pipeline in place: never during SetForwardingPipelineConfig,
        which BMv2 does not survive; a switch that does not answer within
        COUNTER_TIMEOUT_S is left out). At the PS's edge switch this counts what the
        PS sent, before the job's meter."""
        with self._lock:
            conns = {n: sw.conn for n, sw in self._switches.items() if sw.usable}
        jobs = {int(ipaddress.IPv4Address(a)): j for j, a in self.service.group_addresses().items() if a}
        out: dict[tuple[str, str], tuple[int, int]] = {}
        for name, conn in sorted(conns.items()):
            p4info = self.pipeline_of(name).p4info
            try:
                entities = conn.read(counter_reads(p4info), timeout=COUNTER_TIMEOUT_S)
            except P4RuntimeError as e:
                log.warning("%s", e)
                continue
            for (_, match), value in counters_from(p4info, entities).items():
                dst = dict(match).get(p4_state.F_IPV4_DST)
                job = jobs.get(dst.value) if isinstance(dst, Exact) else None
                if job is not None:
                    packets, octets = out.get((job, name), (0, 0))
                    out[(job, name)] = (packets + value[0], octets + value[1])
        return out

    def desired(self, names: Iterable[str]) -> dict[str, P4SwitchState]:
        """The desired state of switches `names` for the current plan (updates the ids)."""
        service = self.service
        inputs = service.translation_inputs()
        if inputs is None:
            return {}
        plan = inputs.plan  # on the planning network, as the OpenFlow translation sees it
        # a learned switch outside the planned piece has no desired state yet: left alone
        names = [n for n in names if n in inputs.network.topo.index]
        addresses = service.group_addresses()
        # a job deleted since this plan was made has no address any more: its
        # entries go now rather than at the next plan
        plan_jobs = tuple(jp for jp in plan.jobs if addresses.get(jp.job.id))
        if len(plan_jobs) != len(plan.jobs):
            plan = dataclasses.replace(plan, jobs=plan_jobs)
        # one translation per program: its table sizes and CPU port (ids carry over)
        by_program: dict[str, list[str]] = {}
        for name in names:
            sw = self._switches.get(name)  # not ours: translate names it in its error
            by_program.setdefault(sw.spec.program if sw else self.pipeline.program, []).append(name)
        out: dict[str, P4SwitchState] = {}
        for program, group in sorted(by_program.items()):
            pipe = self._pipelines[program]
            tr = p4_state.translate(
                inputs.network, plan, inputs.ports, service.hosts, addresses, inputs.host_macs,
                ids=self._ids, limits=pipe.limits, switches=group, packet_in_pps=self.packet_in_pps,
                cpu_port=pipe.cpu_port,
            )
            self._ids = tr.ids
            out.update(tr.state)
        return out

    def sync(self, names: set[str] | None) -> None:
        """Bring switches `names` (None: every connected one) to their desired state."""
        if self.service.plan() is None:
            return  # no plan yet: never reconcile against "nothing"
        with self._sync_lock:
            self._sync(names)

    def _sync(self, names: set[str] | None) -> None:
        with self._lock:
            targets = [
                sw for n, sw in self._switches.items()
                if sw.usable and (names is None or n in names)
            ]
        addresses = {int(ipaddress.IPv4Address(a)): j for j, a in self.service.group_addresses().items() if a}
        hosts = {int(ipaddress.IPv4Address(a.ip)): h for h, a in self.service.hosts.items()}
        for sw in targets:
            if sw.actual is None:
                try:
                    sw.actual = self.read_state(sw.spec.name)
                except P4RuntimeError as e:
                    log.error("%s", e)
                    continue
                log.info(
                    "switch %s: read back %d table entries, %d groups, %d members, %d meter configs, %d clone sessions",
                    sw.spec.name, len(sw.actual.entries), len(sw.actual.groups), len(sw.actual.members),
                    len(sw.actual.meters), len(sw.actual.clones),
                )
                self._ids = seed_ids(self._ids, sw.spec.name, sw.actual, addresses, hosts)
        with self._lock:
            known = [n for n, sw in self._switches.items() if sw.actual is not None]
        try:
            desired = self.desired(known)
        except ValueError as e:
            log.error("cannot translate the plan for the P4 switches: %s", e)
            return
        ops_by_switch: dict[str, list[P4Op]] = {}
        for sw in targets:
            if sw.actual is None or sw.spec.name not in self.service.topology.index:
                continue  # (a learned switch not in the planned piece yet: nothing to reconcile against)
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
                sw.actual = p4_state.apply(ops, sw.actual)
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
        self.service.count_p4runtime_error()
        log.error("switch %s refused %s %s: %s: %s", switch, type(op).__name__, describe(op.entity), code_name(res.code), res.message)
        table = capacity_table(op, res.code)
        if table is None:
            return
        self.stats.capacity_errors += 1
        job = self._job_of(switch, op)
        try:
            before = self.service.learned_budgets()
            self.service.table_full(switch, table, job)
            if self.service.learned_budgets() != before:  # a re-plan follows (and a sync with it)
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
                return self.service.job_for_address(str(ipaddress.IPv4Address(dst.value)))
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


def describe(x) -> str:
    if isinstance(x, TableEntry):
        return f"{x.table} {dict(x.match)} -> {x.action or f'member {x.member_id}'}"
    if isinstance(x, MulticastGroup):
        return f"multicast group {x.group_id} ({len(x.replicas)} replicas)"
    if isinstance(x, p4_state.DirectMeter):
        return f"the meter of {x.table} {dict(x.match)}: {x.config}"
    if isinstance(x, p4_state.Meter):
        return f"meter {x.meter}[{x.index}]: {x.config}"
    if isinstance(x, p4_state.CloneSession):
        return f"clone session {x.session_id} ({len(x.replicas)} replicas)"
    return f"member {x.member_id} of {x.profile}"


def read_device_config(program: str, path: str | Path | None) -> bytes:
    """The device config of a switch running `program` from `path`: BMv2's JSON for
    v1model (required: an error naming `make p4` without it); for a Tofino program
    what its P4Runtime server expects (the compiler's binary in its packaging), or
    b"" when none is given (the pipeline then carries the P4Info alone)."""
    if path is None:
        if program_named(program).device_config is None:
            return b""
        raise P4RuntimeError("no device config (BMv2 JSON) given: run `make p4` where p4c is installed")
    path = Path(path)
    try:
        return path.read_bytes()
    except OSError as e:
        raise P4RuntimeError(
            f"{path}: cannot read the device config ({e.strerror or e}); `make p4` builds it where p4c is installed"
        ) from None


def load_backend(
    switches: Mapping[str, P4SwitchSpec] | Iterable[P4SwitchSpec],
    p4info_path: str | Path,
    device_config_path: str | Path | None,
    program: str = DEFAULT_PROGRAM,
    **kwargs,
) -> P4RuntimeBackend:
    """A backend from files: the P4Info (text) and the device config of `program`
    (`read_device_config`); a switch running another program gets that program's
    committed P4Info and default device config (`p4runtime.programs`)."""
    specs = list(switches.values()) if isinstance(switches, Mapping) else list(switches)
    p4info = P4Info.load(p4info_path)
    device_config = read_device_config(program, device_config_path)
    pipelines = {}
    for other in sorted({sp.program for sp in specs} - {program}):
        files = program_named(other)
        pipelines[other] = make_pipeline(P4Info.load(files.p4info), read_device_config(other, files.device_config), other)
    return P4RuntimeBackend(specs, p4info, device_config, program=program, pipelines=pipelines, **kwargs)


# -- the controller process ---------------------------------------------------------------------------
def p4_switches(config, topology: Topology) -> dict[str, P4SwitchSpec]:
    """The P4Runtime switches of the config (`config.switch_backends`; in a learned
    network the ones it lists, `config.configured_switches`), as specs."""
    from controller.config import configured_switches, switch_backends

    backends = configured_switches(config) if config.discovers else switch_backends(config, topology)
    return {
        name: P4SwitchSpec(name, b.address, b.device_id, b.program or DEFAULT_PROGRAM, b.ports)
        for name, b in backends.items()
        if b.backend == "p4runtime"
    }


# The multicast group ids BMv2 (simple_switch_grpc) accepts: 1..32767; it refuses
# 32768 and above (docs/p4.md, "What BMv2 answers"), although v1model's mcast_grp
# is 16 bits (p4_state.MAX_GROUP_ID). Each program's is in `p4runtime.programs`.
TARGET_MAX_GROUPS = PROGRAMS["v1model"].max_groups


def p4_limits(config, topology: Topology) -> dict[str, tuple[int, int]]:
    """P4 switch -> (the groups its program's target accepts, the multicast table's
    size in its P4Info): what a P4 switch can hold, its G(v) and F(v) limits."""
    specs = p4_switches(config, topology)
    s = config.southbound.p4runtime
    sizes: dict[str, int] = {}
    out = {}
    for name, spec in specs.items():
        if spec.program not in sizes:
            path = s.p4info if spec.program == s.program else program_named(spec.program).p4info
            sizes[spec.program] = P4Info.load(path).table(MCAST_TABLE).size
        out[name] = (program_named(spec.program).max_groups, sizes[spec.program])
    return out


def report_p4_limits(service, config) -> None:
    """Tell the service what each P4 switch can hold (`p4_limits`), as limits the
    switch reported with source "p4info": the effective budgets are then the
    smallest of these, the configured and the learned ones (GET /switches shows
    which)."""
    if config.discovers:
        return  # a learned switch joins when it connects; the backend reports it then
    for name, (groups, entries) in p4_limits(config, service.topology).items():
        service.report_limits(name, max_groups=groups, max_entries=entries, source="p4info")


def start_backend(service, config, election_id: int | None = None) -> P4RuntimeBackend | None:
    """Start the backend for the config's P4Runtime switches (None if there are none).
    `election_id` replaces the configured one (HA: the leader's term, docs/ha.md)."""
    specs = p4_switches(config, service.topology)
    if not specs:
        return None
    s = config.southbound.p4runtime
    backend = load_backend(
        specs, s.p4info, s.device_config, program=s.program,
        election_id=s.election_id if election_id is None else election_id, lldp_interval_s=s.lldp_interval_s, lldp_timeout_s=s.lldp_timeout_s,
        packet_in_pps=s.packet_in_pps, arbitration_retry_s=s.arbitration_retry_s,
    )
    backend.attach(service)
    return backend
