"""P4 state values <-> P4Runtime protobufs, every id resolved by name from the P4Info.

`to_entity` turns a `p4runtime.entities` value (table entry, multicast group, profile
member) into a `p4.v1.Entity`; `from_entity` reads one back (what a wildcard
Read returns); `to_update` wraps an operation. Values are written as canonical
byte strings (`p4info.encode`); read back, padded strings are accepted too.
Replicas are written with `egress_port` (the port as a number, which every BMv2
understands) and read back from `egress_port` or the newer `port` bytes.

Meters: a `DirectMeter` (the configuration of a table entry's direct meter) is
written as a `DirectMeterEntry` and a `Meter` (a cell of an indirect meter) as a
`MeterEntry`, both by MODIFY (P4Runtime has no insert for them): an insert or
modify sends the config, a delete sends none, which resets the meter to
unconfigured (BMv2: everything green). Read back, a table entry read with
`meter_config` requested carries its direct meter's config (none when
unconfigured). Units are the meter's (bytes or packets per second and bytes or
packets of burst: what the P4Info's unit says; PI and BMv2 take them so).
Clone sessions are `CloneSessionEntry`s of the packet replication engine.

`wildcard_reads` are the entities of a Read that returns everything this
controller owns on a switch: every table entry of its tables (the multicast
table's with their meter configs), every member of its action profile, every
multicast group and clone session, every cell of its indirect meters.
`counter_reads` reads the direct counters of the multicast table;
`guard_counter_reads` every cell of the source guard's drop counter (one per
ingress port), which `guard_drops_from` turns into port -> packets refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from p4.v1 import p4runtime_pb2

from controller.southbound.p4runtime.entities import (
    ECMP_PROFILE,
    GUARD_COUNTER,
    MCAST_TABLE,
    PACKET_IN_METER,
    ActionCall,
    CloneSession,
    DirectMeter,
    Entity,
    Exact,
    Lpm,
    Meter,
    MeterConfig,
    MulticastGroup,
    P4SwitchState,
    ProfileMember,
    Replica,
    TableEntry,
)
from controller.southbound.p4runtime.reconcile import Delete, Insert, Modify, P4Op
from controller.southbound.p4runtime.p4info import P4Info, decode, encode


def _action(p4info: P4Info, call: ActionCall) -> p4runtime_pb2.Action:
    info = p4info.action(call.name)
    given = dict(call.params)
    if set(given) != {p.name for p in info.params}:
        raise ValueError(f"action {call.name}: parameters {sorted(given)}, the P4Info has {[p.name for p in info.params]}")
    msg = p4runtime_pb2.Action(action_id=info.id)
    for p in info.params:
        msg.params.add(param_id=p.id, value=encode(given[p.name], p.bitwidth))
    return msg


def _action_from(p4info: P4Info, msg: p4runtime_pb2.Action) -> ActionCall:
    info = p4info.action_by_id(msg.action_id)
    by_id = {p.id: p for p in info.params}
    values = {}
    for p in msg.params:
        if p.param_id not in by_id:
            raise ValueError(f"action {info.name}: unknown parameter id {p.param_id}")
        values[p.param_id] = decode(p.value, by_id[p.param_id].bitwidth)
    return ActionCall(info.name, tuple((p.name, values[p.id]) for p in info.params if p.id in values))


def _match(p4info: P4Info, table: str, match, te: p4runtime_pb2.TableEntry) -> None:
    """Fill `te`'s table id and match fields."""
    t = p4info.table(table)
    te.table_id = t.id
    given = dict(match)
    for name in given:
        t.field(name)  # raises for a field the table lacks
    for f in t.fields:  # in the P4Info's order, as p4c-based clients send them
        if f.name not in given:
            continue
        name, m = f.name, given[f.name]
        fm = te.match.add(field_id=f.id)
        if isinstance(m, Exact) and f.match_kind == "exact":
            fm.exact.value = encode(m.value, f.bitwidth)
        elif isinstance(m, Lpm) and f.match_kind == "lpm":
            if not 0 < m.prefix_len <= f.bitwidth:
                raise ValueError(f"{table} {name}: prefix length {m.prefix_len} (a /0 is no match field)")
            fm.lpm.value = encode(m.value, f.bitwidth)
            fm.lpm.prefix_len = m.prefix_len
        else:
            raise ValueError(f"{table} {name}: a {type(m).__name__} value for a {f.match_kind} field")


def _match_from(p4info: P4Info, te: p4runtime_pb2.TableEntry) -> tuple[str, tuple]:
    """(table name, match) of a read-back table entry."""
    t = p4info.table_by_id(te.table_id)
    fields = {f.id: f for f in t.fields}
    match = []
    for fm in te.match:
        f = fields.get(fm.field_id)
        if f is None:
            raise ValueError(f"{t.name}: unknown match field id {fm.field_id}")
        which = fm.WhichOneof("field_match_type")
        if which == "exact":
            match.append((f.name, Exact(decode(fm.exact.value, f.bitwidth))))
        elif which == "lpm":
            match.append((f.name, Lpm(decode(fm.lpm.value, f.bitwidth), fm.lpm.prefix_len)))
        else:
            raise ValueError(f"{t.name}: {which} match on {f.name}")
    return t.name, tuple(match)


def _config(c: MeterConfig) -> p4runtime_pb2.MeterConfig:
    return p4runtime_pb2.MeterConfig(cir=c.cir, cburst=c.cburst, pir=c.pir, pburst=c.pburst)


def _config_from(c: p4runtime_pb2.MeterConfig) -> MeterConfig:
    return MeterConfig(c.cir, c.cburst, c.pir, c.pburst)


def _direct_meter_of(p4info: P4Info, table: str) -> None:
    tid = p4info.table(table).id
    if not any(m.direct_table_id == tid for m in p4info.message.direct_meters):
        raise ValueError(f"table {table} has no direct meter")


def _add_replicas(entry, replicas) -> None:
    """The replicas of a multicast group or clone session entry."""
    for r in replicas:
        entry.replicas.add(egress_port=r.port, instance=r.instance)


def to_entity(p4info: P4Info, x: Entity, with_config: bool = True) -> p4runtime_pb2.Entity:
    """The P4Runtime entity of a table entry, multicast group, profile member,
    meter configuration (without its config if not `with_config`: a reset) or
    clone session."""
    ent = p4runtime_pb2.Entity()
    if isinstance(x, TableEntry):
        te = ent.table_entry
        _match(p4info, x.table, x.match, te)
        if x.member_id is not None:
            te.action.action_profile_member_id = x.member_id
        else:
            te.action.action.CopyFrom(_action(p4info, x.action))
        return ent
    if isinstance(x, MulticastGroup):
        mg = ent.packet_replication_engine_entry.multicast_group_entry
        mg.multicast_group_id = x.group_id
        _add_replicas(mg, x.replicas)
        return ent
    if isinstance(x, ProfileMember):
        m = ent.action_profile_member
        m.action_profile_id = p4info.profile(x.profile).id
        m.member_id = x.member_id
        m.action.CopyFrom(_action(p4info, x.action))
        return ent
    if isinstance(x, DirectMeter):
        _direct_meter_of(p4info, x.table)
        dm = ent.direct_meter_entry
        _match(p4info, x.table, x.match, dm.table_entry)
        if with_config:
            dm.config.CopyFrom(_config(x.config))
        return ent
    if isinstance(x, Meter):
        info = p4info.meter(x.meter)
        if info.direct_table_id or not 0 <= x.index < info.size:
            raise ValueError(f"meter {x.meter} has no cell {x.index}")
        me = ent.meter_entry
        me.meter_id = info.id
        me.index.index = x.index
        if with_config:
            me.config.CopyFrom(_config(x.config))
        return ent
    if isinstance(x, CloneSession):
        cs = ent.packet_replication_engine_entry.clone_session_entry
        cs.session_id = x.session_id
        _add_replicas(cs, x.replicas)
        return ent
    raise TypeError(f"not a P4 entity: {x!r}")


def from_entity(p4info: P4Info, ent: p4runtime_pb2.Entity) -> Entity:
    """The value of an entity read from a switch; ValueError for what this
    controller never writes (ternary fields, action sets, an unconfigured meter, ...)."""
    kind = ent.WhichOneof("entity")
    if kind == "table_entry":
        te = ent.table_entry
        name, match = _match_from(p4info, te)
        which = te.action.WhichOneof("type")
        if which == "action":
            return TableEntry(name, match, action=_action_from(p4info, te.action.action))
        if which == "action_profile_member_id":
            return TableEntry(name, match, member_id=te.action.action_profile_member_id)
        raise ValueError(f"{name}: entry with a {which} action")
    if kind == "packet_replication_engine_entry":
        pre = ent.packet_replication_engine_entry
        which = pre.WhichOneof("type")
        group = pre.multicast_group_entry if which == "multicast_group_entry" else pre.clone_session_entry
        replicas = []
        for r in group.replicas:
            port = r.egress_port if r.WhichOneof("port_kind") != "port" else int.from_bytes(r.port, "big")
            replicas.append(Replica(port, r.instance))
        if which == "multicast_group_entry":
            return MulticastGroup(group.multicast_group_id, tuple(replicas))
        return CloneSession(group.session_id, tuple(replicas))
    if kind == "direct_meter_entry":
        dm = ent.direct_meter_entry
        if not dm.HasField("config"):
            raise ValueError("an unconfigured direct meter")
        name, match = _match_from(p4info, dm.table_entry)
        return DirectMeter(name, match, _config_from(dm.config))
    if kind == "meter_entry":
        me = ent.meter_entry
        if not me.HasField("config"):
            raise ValueError("an unconfigured meter")
        return Meter(p4info.meter_by_id(me.meter_id).name, me.index.index, _config_from(me.config))
    if kind == "action_profile_member":
        m = ent.action_profile_member
        return ProfileMember(p4info.profile_by_id(m.action_profile_id).name, m.member_id, _action_from(p4info, m.action))
    raise ValueError(f"unexpected entity {kind}")


_UPDATE_TYPES = {Insert: p4runtime_pb2.Update.INSERT, Modify: p4runtime_pb2.Update.MODIFY, Delete: p4runtime_pb2.Update.DELETE}


def to_update(p4info: P4Info, op: P4Op) -> p4runtime_pb2.Update:
    """The update of one operation; a meter configuration is always a MODIFY (its
    delete a reset: MODIFY without a config)."""
    if isinstance(op.entity, (DirectMeter, Meter)):
        ent = to_entity(p4info, op.entity, with_config=not isinstance(op, Delete))
        return p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY, entity=ent)
    ent = to_entity(p4info, op.entity)
    if isinstance(op, Delete) and ent.WhichOneof("entity") == "table_entry":
        ent.table_entry.ClearField("action")  # a delete is identified by its match alone
    return p4runtime_pb2.Update(type=_UPDATE_TYPES[type(op)], entity=ent)


def wildcard_reads(p4info: P4Info, tables: tuple[str, ...]) -> list[p4runtime_pb2.Entity]:
    """The entities of one Read returning every entry of `tables`, every member of
    the ECMP profile and every multicast group."""
    out = []
    for name in tables:
        ent = p4runtime_pb2.Entity()
        ent.table_entry.table_id = p4info.table(name).id
        if name == MCAST_TABLE:
            ent.table_entry.meter_config.SetInParent()  # each entry with its direct meter's config
        out.append(ent)
    ent = p4runtime_pb2.Entity()
    ent.action_profile_member.action_profile_id = p4info.profile(ECMP_PROFILE).id
    out.append(ent)
    ent = p4runtime_pb2.Entity()
    ent.packet_replication_engine_entry.multicast_group_entry.SetInParent()  # group id 0: every group
    out.append(ent)
    ent = p4runtime_pb2.Entity()
    ent.packet_replication_engine_entry.clone_session_entry.SetInParent()  # session 0: every session
    out.append(ent)
    ent = p4runtime_pb2.Entity()
    ent.meter_entry.meter_id = p4info.meter(PACKET_IN_METER).id  # no index: every cell
    out.append(ent)
    return out


def counter_reads(p4info: P4Info) -> list[p4runtime_pb2.Entity]:
    """One Read of the direct counters of every multicast entry."""
    ent = p4runtime_pb2.Entity()
    ent.direct_counter_entry.table_entry.table_id = p4info.table(MCAST_TABLE).id
    return [ent]


def guard_counter_reads(p4info: P4Info) -> list[p4runtime_pb2.Entity]:
    """One Read of every cell of the source guard's drop counter."""
    ent = p4runtime_pb2.Entity()
    ent.counter_entry.counter_id = p4info.counter(GUARD_COUNTER).id  # no index: every cell
    return [ent]


def guard_drops_from(p4info: P4Info, entities, ports: Iterable[int] = ()) -> dict[int, int]:
    """Ingress port -> packets the source guard refused there, from read-back
    counter entries (cells at 0 are left out; with `ports`, only those ports:
    the switch's, so that /metrics has a bounded label set)."""
    only = frozenset(ports)
    counter_id = p4info.counter(GUARD_COUNTER).id
    out = {}
    for ent in entities:
        if ent.WhichOneof("entity") != "counter_entry" or ent.counter_entry.counter_id != counter_id:
            continue
        c = ent.counter_entry
        if c.data.packet_count and (not only or c.index.index in only):
            out[c.index.index] = c.data.packet_count
    return out


def counters_from(p4info: P4Info, entities) -> dict[tuple, tuple[int, int]]:
    """(table, match) -> (packets, bytes) of read-back direct counter entries."""
    out = {}
    for ent in entities:
        if ent.WhichOneof("entity") != "direct_counter_entry":
            continue
        dc = ent.direct_counter_entry
        name, match = _match_from(p4info, dc.table_entry)
        out[(name, tuple(sorted(match, key=lambda m: m[0])))] = (dc.data.packet_count, dc.data.byte_count)
    return out


def state_from_entities(p4info: P4Info, entities) -> tuple[P4SwitchState, list[str]]:
    """The state made of read-back entities, and a note for each one not understood
    (left out of the state: never deleted, never counted)."""
    found: dict[type, list] = {TableEntry: [], MulticastGroup: [], ProfileMember: [], Meter: [], CloneSession: []}
    notes = []
    for ent in entities:
        kind = ent.WhichOneof("entity")
        if kind == "meter_entry" and not ent.meter_entry.HasField("config"):
            continue  # an unconfigured meter cell: nothing to remember
        try:
            x = from_entity(p4info, ent)
            if kind == "table_entry" and ent.table_entry.HasField("meter_config"):
                found[Meter].append(DirectMeter(x.table, x.match, _config_from(ent.table_entry.meter_config)))
        except ValueError as e:
            notes.append(str(e))
            continue
        found[Meter if isinstance(x, DirectMeter) else type(x)].append(x)  # meters: direct ones too
    state = P4SwitchState(
        frozenset(found[TableEntry]), frozenset(found[MulticastGroup]), frozenset(found[ProfileMember]),
        frozenset(found[Meter]), frozenset(found[CloneSession]),
    )
    return state, notes
