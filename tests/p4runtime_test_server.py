"""A P4Runtime protocol test harness: an in-process gRPC P4Runtime server for the tests.

It is not a data plane: no packet is forwarded. It implements the protocol the
backend speaks, strictly, against the P4Info it is given:

- StreamChannel: primary election by election id (the highest is primary and
  is answered OK "Is primary", the others ALREADY_EXISTS "Is backup", every
  stream told again when the primary changes; an id held by another stream is
  refused with INVALID_ARGUMENT "Election id already exists"; a Write or
  SetForwardingPipelineConfig from any other client PERMISSION_DENIED "Not
  primary": BMv2's answers), packet-out from the primary only (recorded, metadata checked), and
  `send_packet_in` to the primary;
- SetForwardingPipelineConfig (VERIFY, VERIFY_AND_COMMIT; a commit clears every
  entry, as BMv2 does) and GetForwardingPipelineConfig (cookie or all); a config
  without a device config is refused (INVALID_ARGUMENT, as BMv2) unless the
  server is made with `needs_device_config=False`, which stands in for a switch
  whose binary is loaded otherwise (the Tofino tests: the protocol allows a
  P4Info-only config);
- Write (only the primary's election id; CONTINUE_ON_ERROR) of table entries,
  action-profile members and multicast groups, every entity validated against
  the P4Info: ids, match kinds, bit widths, LPM prefix bits, exact fields
  present, actions allowed by the table, parameters complete, direct vs
  profile-based tables, member references, replica uniqueness;
- capacities: table `size`, action-profile `size`, and a multicast-group budget
  `max_groups`; a full table or replication engine is refused with UNKNOWN
  and BMv2's own messages (`mode="bmv2"`: "Error when adding match entry to
  target", "Error when creating multicast group in target", as
  tests/test_bmv2_p4runtime.py saw simple_switch_grpc answer) or
  RESOURCE_EXHAUSTED (`mode="spec"`); in bmv2 mode a group id above 32767 is
  OUT_OF_RANGE "Group id value is too high", as on BMv2;
- a failed Write answers UNKNOWN (with an empty message, as BMv2) with one
  `p4.v1.Error` per update in the status details (google.rpc.Status), as the
  specification says;
- wildcard Read of table entries (one table or all), members and groups;
- meters and counters as BMv2 (PI) handles them: a table entry's direct meter
  config is written with the entry (`meter_config`; a MODIFY without one keeps
  it) or by a `DirectMeterEntry` MODIFY (without a config: reset to
  unconfigured), dropped with the entry, and read back with the entry when the
  Read asks for `meter_config`; `MeterEntry` MODIFY of an indirect meter's cell
  (config or reset) and wildcard Read per meter (every cell, its config if set);
  direct counters read by a wildcard `DirectCounterEntry` Read (their values are
  set by the test: `count`); clone sessions (insert, modify, delete, read).

Every Write update is kept in `updates` so that tests can check what was sent.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from google.protobuf import any_pb2
from google.rpc import status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

OK = 0
CODES = {c.value[0]: c for c in grpc.StatusCode}


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Stream:
    out: queue.Queue = field(default_factory=queue.Queue)
    election: tuple[int, int] | None = None
    abort: tuple[grpc.StatusCode, str] | None = None


def _value(data: bytes, bitwidth: int, what: str) -> int:
    if not data:
        raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{what}: empty byte string")
    value = int.from_bytes(data, "big")
    if len(data) > (bitwidth + 7) // 8 or value >> bitwidth:
        raise _Refused(grpc.StatusCode.OUT_OF_RANGE, f"{what}: {data.hex()} does not fit in {bitwidth} bits")
    return value


class _Pipeline:
    """Indices over a P4Info, built from the protobuf itself (not from the code under test)."""

    def __init__(self, info: p4info_pb2.P4Info) -> None:
        self.info = info
        self.tables = {t.preamble.id: t for t in info.tables}
        self.actions = {a.preamble.id: a for a in info.actions}
        self.profiles = {p.preamble.id: p for p in info.action_profiles}
        self.direct_meters = {m.direct_table_id: m for m in info.direct_meters}  # table id -> meter
        self.direct_counters = {c.direct_table_id: c for c in info.direct_counters}
        self.meters = {m.preamble.id: m for m in info.meters}
        self.headers = {c.preamble.name: c for c in info.controller_packet_metadata}
        if not self.tables or not self.actions:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "P4Info without tables or actions")

    def check_action(self, action: p4runtime_pb2.Action, allowed: set[int], where: str) -> None:
        a = self.actions.get(action.action_id)
        if a is None:
            raise _Refused(grpc.StatusCode.NOT_FOUND, f"{where}: unknown action id {action.action_id}")
        if action.action_id not in allowed:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: action {a.preamble.name} not allowed here")
        params = {p.id: p for p in a.params}
        seen = set()
        for p in action.params:
            spec = params.get(p.param_id)
            if spec is None or p.param_id in seen:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: bad parameter id {p.param_id}")
            seen.add(p.param_id)
            _value(p.value, spec.bitwidth, f"{where}: {a.preamble.name}.{spec.name}")
        if seen != set(params):
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: {a.preamble.name} needs every parameter")

    def entry_actions(self, table: p4info_pb2.Table) -> set[int]:
        return {r.id for r in table.action_refs if r.scope != p4info_pb2.ActionRef.DEFAULT_ONLY}


class P4RuntimeTestServer(p4runtime_pb2_grpc.P4RuntimeServicer):
    """See the module doc. `start()` returns the address ("127.0.0.1:PORT")."""

    def __init__(self, device_id: int = 1, mode: str = "bmv2", max_groups: int | None = None,
                 needs_device_config: bool = True) -> None:
        if mode not in ("bmv2", "spec"):
            raise ValueError("mode is 'bmv2' or 'spec'")
        self.needs_device_config = needs_device_config
        self.device_id = device_id
        self.mode = mode
        self.max_groups = max_groups
        self.lock = threading.RLock()
        self.pipeline: _Pipeline | None = None
        self.cookie: int | None = None
        self.device_config = b""
        self.pipeline_commits = 0
        self.entries: dict[int, dict[tuple, p4runtime_pb2.TableEntry]] = {}
        self.members: dict[tuple[int, int], p4runtime_pb2.ActionProfileMember] = {}
        self.groups: dict[int, p4runtime_pb2.MulticastGroupEntry] = {}
        self.clones: dict[int, p4runtime_pb2.CloneSessionEntry] = {}
        self.entry_meters: dict[tuple[int, tuple], p4runtime_pb2.MeterConfig] = {}  # (table id, key) -> config
        self.entry_counters: dict[tuple[int, tuple], tuple[int, int]] = {}  # (table id, key) -> (packets, bytes)
        self.meter_cells: dict[tuple[int, int], p4runtime_pb2.MeterConfig] = {}  # (meter id, index) -> config
        self.updates: list[p4runtime_pb2.Update] = []
        self.packet_outs: list[tuple[bytes, dict[str, int]]] = []
        self.refusals: list[tuple[Callable[[p4runtime_pb2.Update], bool], grpc.StatusCode]] = []
        self._streams: list[_Stream] = []
        self._server: grpc.Server | None = None
        self.address = ""

    # -- life cycle ----------------------------------------------------------------------------
    def start(self, credentials: grpc.ServerCredentials | None = None) -> str:
        """Serve on an ephemeral port: over TLS with `credentials`
        (`grpc.ssl_server_credentials`, e.g. requiring client certificates), else plain TCP."""
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self, self._server)
        if credentials is None:
            port = self._server.add_insecure_port("127.0.0.1:0")
        else:
            port = self._server.add_secure_port("127.0.0.1:0", credentials)
        self._server.start()
        self.address = f"127.0.0.1:{port}"
        return self.address

    def stop(self) -> None:
        self.drop_streams()
        if self._server is not None:
            self._server.stop(0).wait(5)

    def drop_streams(self) -> None:
        """End every stream (the switch "restarts" its P4Runtime sessions, keeping its state)."""
        with self.lock:
            streams, self._streams = self._streams, []
        for s in streams:
            s.abort = (grpc.StatusCode.UNAVAILABLE, "stream dropped by the test")
            s.out.put(None)

    # -- helpers for tests -----------------------------------------------------------------------
    def refuse(self, predicate: Callable[[p4runtime_pb2.Update], bool], code: grpc.StatusCode) -> None:
        """Refuse the next update for which `predicate` is true with `code` (once)."""
        with self.lock:
            self.refusals.append((predicate, code))

    def table_entries(self, name: str) -> list[p4runtime_pb2.TableEntry]:
        with self.lock:
            tid = next(t.preamble.id for t in self.pipeline.info.tables if t.preamble.name == name)
            return list(self.entries.get(tid, {}).values())

    def count(self, table: str, match: dict[str, int], packets: int, octets: int) -> None:
        """Set the direct counter of the exact-match entry `match` (field name -> value) of `table`."""
        with self.lock:
            t = next(t for t in self.pipeline.info.tables if t.preamble.name == table)
            ids = {f.name: f.id for f in t.match_fields}
            key = tuple(sorted((ids[n], v, None) for n, v in match.items()))
            if key not in self.entries.get(t.preamble.id, {}):
                raise KeyError(f"{table}: no entry {match}")
            self.entry_counters[(t.preamble.id, key)] = (packets, octets)

    def meter_configs(self, name: str) -> dict:
        """Meter `name`'s configs: cell index -> config (indirect), or entry key -> config (direct)."""
        with self.lock:
            info = self.pipeline.info
            direct = next((m for m in info.direct_meters if m.preamble.name == name), None)
            if direct is not None:
                return {k: c for (t, k), c in self.entry_meters.items() if t == direct.direct_table_id}
            mid = next(m.preamble.id for m in info.meters if m.preamble.name == name)
            return {i: c for (m, i), c in self.meter_cells.items() if m == mid}

    @property
    def primary(self) -> _Stream | None:
        with self.lock:
            live = [s for s in self._streams if s.election is not None]
            return max(live, key=lambda s: s.election) if live else None

    def send_packet_in(self, payload: bytes, ingress_port: int) -> None:
        with self.lock:
            header = self.pipeline.headers["packet_in"]
            meta = next(m for m in header.metadata if m.name == "ingress_port")
            msg = p4runtime_pb2.StreamMessageResponse()
            msg.packet.payload = payload
            msg.packet.metadata.add(metadata_id=meta.id, value=ingress_port.to_bytes(2, "big"))
            primary = self.primary
        if primary is not None:
            primary.out.put(msg)

    # -- stream -------------------------------------------------------------------------------------
    def StreamChannel(self, request_iterator, context):
        stream = _Stream()
        with self.lock:
            self._streams.append(stream)

        def read() -> None:
            try:
                for req in request_iterator:
                    self._stream_request(stream, req)
            except Exception:  # noqa: BLE001 - the client went away
                pass
            finally:
                stream.out.put(None)

        threading.Thread(target=read, daemon=True).start()
        context.add_callback(lambda: stream.out.put(None))
        try:
            while True:
                msg = stream.out.get()
                if msg is None:
                    break
                yield msg
        finally:
            with self.lock:
                was_primary = self.primary is stream
                if stream in self._streams:
                    self._streams.remove(stream)
            if was_primary:
                self._announce()
        if stream.abort is not None:
            context.abort(*stream.abort)

    def _stream_request(self, stream: _Stream, req: p4runtime_pb2.StreamMessageRequest) -> None:
        kind = req.WhichOneof("update")
        if kind == "arbitration":
            arb = req.arbitration
            if arb.device_id != self.device_id:
                stream.abort = (grpc.StatusCode.NOT_FOUND, f"no device {arb.device_id}")
                stream.out.put(None)
                return
            election = (arb.election_id.high, arb.election_id.low)
            with self.lock:
                if any(s is not stream and s.election == election for s in self._streams):
                    stream.abort = (grpc.StatusCode.INVALID_ARGUMENT, "Election id already exists")  # as BMv2
                    stream.out.put(None)
                    return
                stream.election = election
            self._announce()
        elif kind == "packet":
            with self.lock:
                if self.primary is not stream or self.pipeline is None:
                    return  # only the primary's packet-outs are taken
                header = self.pipeline.headers["packet_out"]
                widths = {m.id: (m.name, m.bitwidth) for m in header.metadata}
                meta = {}
                for m in req.packet.metadata:
                    name, width = widths[m.metadata_id]  # KeyError: the test fails loudly
                    meta[name] = _value(m.value, width, f"packet_out.{name}")
                if set(meta) != {n for n, _ in widths.values()}:
                    raise AssertionError(f"packet-out without every metadata field: {sorted(meta)}")
                self.packet_outs.append((req.packet.payload, meta))

    def _announce(self) -> None:
        """Tell every stream whether it is primary."""
        with self.lock:
            primary = self.primary
            streams = [s for s in self._streams if s.election is not None]
        for s in streams:
            msg = p4runtime_pb2.StreamMessageResponse()
            msg.arbitration.device_id = self.device_id
            msg.arbitration.election_id.high, msg.arbitration.election_id.low = primary.election
            if s is primary:  # BMv2's messages
                msg.arbitration.status.code = OK
                msg.arbitration.status.message = "Is primary"
            else:
                msg.arbitration.status.code = grpc.StatusCode.ALREADY_EXISTS.value[0]
                msg.arbitration.status.message = "Is backup"
            s.out.put(msg)

    def _check_primary(self, device_id: int, election, context) -> None:
        if device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {device_id}")
        primary = self.primary
        if primary is None or (election.high, election.low) != primary.election:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "Not primary")  # as BMv2

    # -- pipeline -----------------------------------------------------------------------------------
    def SetForwardingPipelineConfig(self, request, context):
        self._check_primary(request.device_id, request.election_id, context)
        A = p4runtime_pb2.SetForwardingPipelineConfigRequest
        if request.action not in (A.VERIFY, A.VERIFY_AND_COMMIT):
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "only VERIFY and VERIFY_AND_COMMIT")
        try:
            pipeline = _Pipeline(request.config.p4info)
        except _Refused as e:
            context.abort(e.code, e.message)
        if not request.config.p4_device_config and self.needs_device_config:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no device config")
        if request.action == A.VERIFY_AND_COMMIT:
            with self.lock:
                self.pipeline = pipeline
                self.device_config = request.config.p4_device_config
                self.cookie = request.config.cookie.cookie if request.config.HasField("cookie") else None
                self.entries, self.members, self.groups = {}, {}, {}
                self.clones, self.entry_meters, self.entry_counters, self.meter_cells = {}, {}, {}, {}
                self.pipeline_commits += 1
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request, context):
        if request.device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {request.device_id}")
        with self.lock:
            if self.pipeline is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline")
            resp = p4runtime_pb2.GetForwardingPipelineConfigResponse()
            if self.cookie is not None:
                resp.config.cookie.cookie = self.cookie
            if request.response_type == p4runtime_pb2.GetForwardingPipelineConfigRequest.ALL:
                resp.config.p4info.CopyFrom(self.pipeline.info)
                resp.config.p4_device_config = self.device_config
            return resp

    def Capabilities(self, request, context):
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version="1.4.1")

    # -- write ----------------------------------------------------------------------------------------
    def Write(self, request, context):
        self._check_primary(request.device_id, request.election_id, context)
        if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "only CONTINUE_ON_ERROR")
        with self.lock:
            if self.pipeline is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline")
            errors = []
            for u in request.updates:
                self.updates.append(u)
                try:
                    self._refusal(u)
                    self._update(u)
                    errors.append(p4runtime_pb2.Error(canonical_code=OK))
                except _Refused as e:
                    errors.append(p4runtime_pb2.Error(canonical_code=e.code.value[0], message=e.message))
        if all(e.canonical_code == OK for e in errors):
            return p4runtime_pb2.WriteResponse()
        status = status_pb2.Status(code=grpc.StatusCode.UNKNOWN.value[0], message="")
        for e in errors:
            packed = any_pb2.Any()
            packed.Pack(e)
            status.details.append(packed)
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(grpc.StatusCode.UNKNOWN, "")

    def _refusal(self, u) -> None:
        for i, (pred, code) in enumerate(self.refusals):
            if pred(u):
                del self.refusals[i]
                raise _Refused(code, "refused by the test")

    def _full(self, what: str, bmv2_message: str) -> _Refused:
        if self.mode == "bmv2":
            return _Refused(grpc.StatusCode.UNKNOWN, bmv2_message)
        return _Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{what}: table full")

    def _update(self, u: p4runtime_pb2.Update) -> None:
        if u.type not in (p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.MODIFY, p4runtime_pb2.Update.DELETE):
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "update type unspecified")
        kind = u.entity.WhichOneof("entity")
        if kind == "table_entry":
            self._table_entry(u.type, u.entity.table_entry)
        elif kind == "action_profile_member":
            self._member(u.type, u.entity.action_profile_member)
        elif kind == "packet_replication_engine_entry" and u.entity.packet_replication_engine_entry.HasField(
            "multicast_group_entry"
        ):
            self._group(u.type, u.entity.packet_replication_engine_entry.multicast_group_entry)
        elif kind == "packet_replication_engine_entry" and u.entity.packet_replication_engine_entry.HasField(
            "clone_session_entry"
        ):
            self._clone(u.type, u.entity.packet_replication_engine_entry.clone_session_entry)
        elif kind == "direct_meter_entry":
            self._direct_meter(u.type, u.entity.direct_meter_entry)
        elif kind == "meter_entry":
            self._meter_cell(u.type, u.entity.meter_entry)
        else:
            raise _Refused(grpc.StatusCode.UNIMPLEMENTED, f"entity {kind} not supported by the harness")

    def _key(self, table: p4info_pb2.Table, te: p4runtime_pb2.TableEntry) -> tuple:
        fields = {m.id: m for m in table.match_fields}
        key = []
        seen = set()
        for fm in te.match:
            f = fields.get(fm.field_id)
            if f is None or fm.field_id in seen:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{table.preamble.name}: bad field id {fm.field_id}")
            seen.add(fm.field_id)
            which = fm.WhichOneof("field_match_type")
            where = f"{table.preamble.name}.{f.name}"
            if f.match_type == p4info_pb2.MatchField.EXACT and which == "exact":
                key.append((f.id, _value(fm.exact.value, f.bitwidth, where), None))
            elif f.match_type == p4info_pb2.MatchField.LPM and which == "lpm":
                value, plen = _value(fm.lpm.value, f.bitwidth, where), fm.lpm.prefix_len
                if not 0 < plen <= f.bitwidth:
                    raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: prefix length {plen}")
                if value & ((1 << (f.bitwidth - plen)) - 1):
                    raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: bits beyond the prefix are set")
                key.append((f.id, value, plen))
            else:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: a {which} match for a {f.match_type} field")
        missing = [f.name for f in table.match_fields if f.match_type == p4info_pb2.MatchField.EXACT and f.id not in seen]
        if missing:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{table.preamble.name}: exact fields missing: {missing}")
        return tuple(sorted(key))

    def _table_entry(self, op: int, te: p4runtime_pb2.TableEntry) -> None:
        p = self.pipeline
        table = p.tables.get(te.table_id)
        if table is None:
            raise _Refused(grpc.StatusCode.NOT_FOUND, f"unknown table id {te.table_id}")
        name = table.preamble.name
        if te.is_default_action:
            raise _Refused(grpc.StatusCode.UNIMPLEMENTED, "default entries are not used by the controller")
        if te.priority:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{name}: priority on a table without ternary/range fields")
        key = self._key(table, te)
        rows = self.entries.setdefault(te.table_id, {})
        if op == p4runtime_pb2.Update.DELETE:
            if key not in rows:
                raise _Refused(grpc.StatusCode.NOT_FOUND, f"{name}: no such entry")
            del rows[key]
            self.entry_meters.pop((te.table_id, key), None)
            self.entry_counters.pop((te.table_id, key), None)
            return
        if te.HasField("meter_config"):
            if te.table_id not in p.direct_meters:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{name}: a meter config for a table without a direct meter")
            self._check_config(te.meter_config, name)
        which = te.action.WhichOneof("type")
        if table.implementation_id:
            if which != "action_profile_member_id":
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{name}: an indirect table needs a member (got {which})")
            if (table.implementation_id, te.action.action_profile_member_id) not in self.members:
                raise _Refused(grpc.StatusCode.NOT_FOUND, f"{name}: member {te.action.action_profile_member_id} does not exist")
        else:
            if which != "action":
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{name}: a direct table needs an action (got {which})")
            p.check_action(te.action.action, p.entry_actions(table), name)
        if op == p4runtime_pb2.Update.INSERT:
            if key in rows:
                raise _Refused(grpc.StatusCode.ALREADY_EXISTS, f"{name}: entry exists")
            if len(rows) >= table.size:
                raise self._full(f"match entry to {name}", "Error when adding match entry to target")
        elif key not in rows:
            raise _Refused(grpc.StatusCode.NOT_FOUND, f"{name}: no such entry")
        stored = p4runtime_pb2.TableEntry()
        stored.CopyFrom(te)
        stored.ClearField("meter_config")
        stored.ClearField("counter_data")
        rows[key] = stored
        if te.HasField("meter_config"):
            self.entry_meters[(te.table_id, key)] = te.meter_config
        if op == p4runtime_pb2.Update.INSERT:
            self.entry_counters[(te.table_id, key)] = (0, 0)

    @staticmethod
    def _check_config(c: p4runtime_pb2.MeterConfig, where: str) -> None:
        if c.cir > c.pir or min(c.cir, c.cburst, c.pir, c.pburst) <= 0:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: bad meter config {c}")

    def _direct_meter(self, op: int, dm: p4runtime_pb2.DirectMeterEntry) -> None:
        if op != p4runtime_pb2.Update.MODIFY:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "a direct meter entry is only modified")
        table = self.pipeline.tables.get(dm.table_entry.table_id)
        if table is None or table.preamble.id not in self.pipeline.direct_meters:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"table id {dm.table_entry.table_id} has no direct meter")
        key = self._key(table, dm.table_entry)
        if key not in self.entries.get(table.preamble.id, {}):
            raise _Refused(grpc.StatusCode.NOT_FOUND, f"{table.preamble.name}: no such entry")
        if dm.HasField("config"):
            self._check_config(dm.config, table.preamble.name)
            self.entry_meters[(table.preamble.id, key)] = dm.config
        else:
            self.entry_meters.pop((table.preamble.id, key), None)

    def _meter_cell(self, op: int, me: p4runtime_pb2.MeterEntry) -> None:
        if op != p4runtime_pb2.Update.MODIFY:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "a meter entry is only modified")
        meter = self.pipeline.meters.get(me.meter_id)
        if meter is None:
            raise _Refused(grpc.StatusCode.NOT_FOUND, f"unknown meter id {me.meter_id}")
        if not 0 <= me.index.index < meter.size:
            raise _Refused(grpc.StatusCode.OUT_OF_RANGE, f"{meter.preamble.name}: no cell {me.index.index}")
        if me.HasField("config"):
            self._check_config(me.config, meter.preamble.name)
            self.meter_cells[(me.meter_id, me.index.index)] = me.config
        else:
            self.meter_cells.pop((me.meter_id, me.index.index), None)

    def _clone(self, op: int, c: p4runtime_pb2.CloneSessionEntry) -> None:
        if not 0 < c.session_id < 32768:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"clone session id {c.session_id}")
        if op == p4runtime_pb2.Update.DELETE:
            if self.clones.pop(c.session_id, None) is None:
                raise _Refused(grpc.StatusCode.NOT_FOUND, f"clone session {c.session_id} does not exist")
            return
        if op == p4runtime_pb2.Update.INSERT and c.session_id in self.clones:
            raise _Refused(grpc.StatusCode.ALREADY_EXISTS, f"clone session {c.session_id} exists")
        if op == p4runtime_pb2.Update.MODIFY and c.session_id not in self.clones:
            raise _Refused(grpc.StatusCode.NOT_FOUND, f"clone session {c.session_id} does not exist")
        if not c.replicas or len({(r.egress_port, r.instance) for r in c.replicas}) != len(c.replicas):
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"clone session {c.session_id}: no or repeated replicas")
        stored = p4runtime_pb2.CloneSessionEntry()
        stored.CopyFrom(c)
        self.clones[c.session_id] = stored

    def _member(self, op: int, m: p4runtime_pb2.ActionProfileMember) -> None:
        p = self.pipeline
        prof = p.profiles.get(m.action_profile_id)
        if prof is None:
            raise _Refused(grpc.StatusCode.NOT_FOUND, f"unknown action profile id {m.action_profile_id}")
        key = (m.action_profile_id, m.member_id)
        if op == p4runtime_pb2.Update.DELETE:
            if key not in self.members:
                raise _Refused(grpc.StatusCode.NOT_FOUND, f"member {m.member_id} does not exist")
            for rows in self.entries.values():
                for te in rows.values():
                    if te.action.WhichOneof("type") == "action_profile_member_id" and te.action.action_profile_member_id == m.member_id:
                        raise _Refused(grpc.StatusCode.FAILED_PRECONDITION, f"member {m.member_id} is in use")
            del self.members[key]
            return
        allowed = set()
        for tid in prof.table_ids:
            allowed |= p.entry_actions(p.tables[tid])
        p.check_action(m.action, allowed, prof.preamble.name)
        if op == p4runtime_pb2.Update.INSERT:
            if key in self.members:
                raise _Refused(grpc.StatusCode.ALREADY_EXISTS, f"member {m.member_id} exists")
            if sum(1 for k in self.members if k[0] == m.action_profile_id) >= prof.size:
                raise self._full(f"member to {prof.preamble.name}", f"Error when adding member to {prof.preamble.name} (not seen on BMv2)")
        elif key not in self.members:
            raise _Refused(grpc.StatusCode.NOT_FOUND, f"member {m.member_id} does not exist")
        stored = p4runtime_pb2.ActionProfileMember()
        stored.CopyFrom(m)
        self.members[key] = stored

    def _group(self, op: int, g: p4runtime_pb2.MulticastGroupEntry) -> None:
        if self.mode == "bmv2" and g.multicast_group_id > 0x7FFF:
            raise _Refused(grpc.StatusCode.OUT_OF_RANGE, "Group id value is too high")
        if not 0 < g.multicast_group_id <= 0xFFFF:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"multicast group id {g.multicast_group_id}")
        if op == p4runtime_pb2.Update.DELETE:
            if g.multicast_group_id not in self.groups:
                raise _Refused(grpc.StatusCode.NOT_FOUND, f"group {g.multicast_group_id} does not exist")
            del self.groups[g.multicast_group_id]
            return
        seen = set()
        for r in g.replicas:
            port = r.egress_port if r.WhichOneof("port_kind") != "port" else _value(r.port, 32, "replica port")
            if not 0 <= port < 511 or r.instance > 0xFFFF or (port, r.instance) in seen:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"group {g.multicast_group_id}: bad or repeated replica {port}/{r.instance}")
            seen.add((port, r.instance))
        if op == p4runtime_pb2.Update.INSERT:
            if g.multicast_group_id in self.groups:
                raise _Refused(grpc.StatusCode.ALREADY_EXISTS, f"group {g.multicast_group_id} exists")
            if self.max_groups is not None and len(self.groups) >= self.max_groups:
                raise self._full("multicast group", "Error when creating multicast group in target")
        elif g.multicast_group_id not in self.groups:
            raise _Refused(grpc.StatusCode.NOT_FOUND, f"group {g.multicast_group_id} does not exist")
        stored = p4runtime_pb2.MulticastGroupEntry()
        stored.CopyFrom(g)
        self.groups[g.multicast_group_id] = stored

    # -- read -------------------------------------------------------------------------------------------
    def Read(self, request, context):
        if request.device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {request.device_id}")
        with self.lock:
            if self.pipeline is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline")
            out = []
            for ent in request.entities:
                kind = ent.WhichOneof("entity")
                if kind == "table_entry":
                    tid = ent.table_entry.table_id
                    if tid and tid not in self.pipeline.tables:
                        context.abort(grpc.StatusCode.NOT_FOUND, f"unknown table id {tid}")
                    for t, rows in self.entries.items():
                        if tid in (0, t):
                            for key, te in rows.items():
                                e = p4runtime_pb2.Entity(table_entry=te)
                                config = self.entry_meters.get((t, key))
                                if ent.table_entry.HasField("meter_config") and config is not None:
                                    e.table_entry.meter_config.CopyFrom(config)
                                out.append(e)
                elif kind == "action_profile_member":
                    pid, mid = ent.action_profile_member.action_profile_id, ent.action_profile_member.member_id
                    out += [
                        p4runtime_pb2.Entity(action_profile_member=m)
                        for (p, i), m in self.members.items()
                        if pid in (0, p) and mid in (0, i)
                    ]
                elif kind == "packet_replication_engine_entry" and ent.packet_replication_engine_entry.HasField(
                    "clone_session_entry"
                ):
                    sid = ent.packet_replication_engine_entry.clone_session_entry.session_id
                    for i, c in self.clones.items():
                        if sid in (0, i):
                            e = p4runtime_pb2.Entity()
                            e.packet_replication_engine_entry.clone_session_entry.CopyFrom(c)
                            out.append(e)
                elif kind == "packet_replication_engine_entry":
                    gid = ent.packet_replication_engine_entry.multicast_group_entry.multicast_group_id
                    for i, g in self.groups.items():
                        if gid in (0, i):
                            e = p4runtime_pb2.Entity()
                            e.packet_replication_engine_entry.multicast_group_entry.CopyFrom(g)
                            out.append(e)
                elif kind == "meter_entry":
                    meter = self.pipeline.meters.get(ent.meter_entry.meter_id)
                    if meter is None:
                        context.abort(grpc.StatusCode.NOT_FOUND, f"unknown meter id {ent.meter_entry.meter_id}")
                    for i in range(meter.size):
                        e = p4runtime_pb2.Entity()
                        e.meter_entry.meter_id = meter.preamble.id
                        e.meter_entry.index.index = i
                        config = self.meter_cells.get((meter.preamble.id, i))
                        if config is not None:
                            e.meter_entry.config.CopyFrom(config)
                        out.append(e)
                elif kind == "direct_counter_entry":
                    tid = ent.direct_counter_entry.table_entry.table_id
                    if tid not in self.pipeline.direct_counters or ent.direct_counter_entry.table_entry.match:
                        context.abort(grpc.StatusCode.UNIMPLEMENTED, "the harness reads every direct counter of a table")
                    for key, te in self.entries.get(tid, {}).items():
                        e = p4runtime_pb2.Entity()
                        e.direct_counter_entry.table_entry.table_id = tid
                        e.direct_counter_entry.table_entry.match.extend(te.match)
                        packets, octets = self.entry_counters.get((tid, key), (0, 0))
                        e.direct_counter_entry.data.packet_count = packets
                        e.direct_counter_entry.data.byte_count = octets
                        out.append(e)
                else:
                    context.abort(grpc.StatusCode.UNIMPLEMENTED, f"reading {kind} is not supported by the harness")
        yield p4runtime_pb2.ReadResponse(entities=out)
