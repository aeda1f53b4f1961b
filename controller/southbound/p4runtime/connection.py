"""One P4Runtime switch: a gRPC channel, its stream with primary election, its
pipeline, Reads, Writes that report every update's outcome, and packet-out.

Uses the `p4runtime` protobuf bindings with grpcio directly (one channel and one
stream per switch, no global state), not p4runtime-shell, which keeps one client
per process and exits the process when a handshake fails.

`SwitchConnection`: the StreamChannel with primary election
(`MasterArbitrationUpdate` with the configured election id; the switch must
answer OK, i.e. this controller is primary); the forwarding pipeline
(`GetForwardingPipelineConfig` for the cookie, and `SetForwardingPipelineConfig`
VERIFY_AND_COMMIT with the P4Info and the device config only when the cookie
differs, so a controller restart does not wipe the switch); wildcard Reads;
Writes that report the outcome of every update (the `p4.v1.Error` list in the
status details); packet-out.

TLS (`southbound.p4runtime.tls`, docs/security.md): `tls_credentials` reads the
three PEM files once (the only place that reads them) into gRPC channel
credentials; a `SwitchConnection` given them opens a secure channel that presents
the controller's client certificate and accepts only a server certificate the CA
signs for the host of the switch's address. Without them the channel is plain TCP.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import grpc
from google.rpc import status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller.config import TlsFiles

from controller.southbound.p4runtime import entities as p4_state
from controller.southbound.p4runtime.entities import PACKET_IN, PACKET_IN_PORT, PACKET_OUT, PACKET_OUT_PORT
from controller.southbound.p4runtime.p4info import P4Info, encode

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


def tls_credentials(tls: TlsFiles | None) -> grpc.ChannelCredentials | None:
    """The channel credentials of `southbound.p4runtime.tls` (None: plain TCP): the CA
    that must sign the switches' server certificates, and the controller's client
    certificate and key."""
    if tls is None:
        return None
    try:
        return grpc.ssl_channel_credentials(
            root_certificates=tls.ca.read_bytes(), private_key=tls.key.read_bytes(), certificate_chain=tls.cert.read_bytes()
        )
    except OSError as e:
        raise P4RuntimeError(f"southbound.p4runtime.tls: cannot read {e.filename}: {e.strerror}") from None


def open_channel(address: str, credentials: grpc.ChannelCredentials | None, options=CHANNEL_OPTIONS) -> grpc.Channel:
    """A channel to `address`: TLS with `credentials`, else plain TCP."""
    if credentials is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, credentials, options=options)


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
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.name = name
        self.credentials = credentials  # None: plain TCP (`tls_credentials`)
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
        self._channel = open_channel(self.address, self.credentials)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self.close()
            if self.credentials is not None:
                raise P4RuntimeError(f"switch {self.name}: no P4Runtime server at {self.address}, or the TLS handshake "
                                     "failed (a server certificate the CA of southbound.p4runtime.tls does not sign "
                                     "for this host, or our client certificate refused)") from None
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


