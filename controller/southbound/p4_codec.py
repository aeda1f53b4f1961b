"""P4 state values <-> P4Runtime protobufs, every id resolved by name from the P4Info.

`to_entity` turns a `p4_state` value (table entry, multicast group, profile
member) into a `p4.v1.Entity`; `from_entity` reads one back (what a wildcard
Read returns); `to_update` wraps an operation. Values are written as canonical
byte strings (`p4info.encode`); read back, padded strings are accepted too.
Replicas are written with `egress_port` (the port as a number, which every BMv2
understands) and read back from `egress_port` or the newer `port` bytes.

`wildcard_reads` are the entities of a Read that returns everything this
controller owns on a switch: every table entry of its tables, every member of
its action profile, every multicast group.
"""

from __future__ import annotations

from p4.v1 import p4runtime_pb2

from .p4_state import (
    ECMP_PROFILE,
    ActionCall,
    Delete,
    Entity,
    Exact,
    Insert,
    Lpm,
    Modify,
    MulticastGroup,
    P4Op,
    P4SwitchState,
    ProfileMember,
    Replica,
    TableEntry,
)
from .p4info import P4Info, decode, encode


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


def to_entity(p4info: P4Info, x: Entity) -> p4runtime_pb2.Entity:
    """The P4Runtime entity of a table entry, multicast group or profile member."""
    ent = p4runtime_pb2.Entity()
    if isinstance(x, TableEntry):
        t = p4info.table(x.table)
        te = ent.table_entry
        te.table_id = t.id
        given = dict(x.match)
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
                    raise ValueError(f"{x.table} {name}: prefix length {m.prefix_len} (a /0 is no match field)")
                fm.lpm.value = encode(m.value, f.bitwidth)
                fm.lpm.prefix_len = m.prefix_len
            else:
                raise ValueError(f"{x.table} {name}: a {type(m).__name__} value for a {f.match_kind} field")
        if x.member_id is not None:
            te.action.action_profile_member_id = x.member_id
        else:
            te.action.action.CopyFrom(_action(p4info, x.action))
        return ent
    if isinstance(x, MulticastGroup):
        mg = ent.packet_replication_engine_entry.multicast_group_entry
        mg.multicast_group_id = x.group_id
        for r in x.replicas:
            mg.replicas.add(egress_port=r.port, instance=r.instance)
        return ent
    if isinstance(x, ProfileMember):
        m = ent.action_profile_member
        m.action_profile_id = p4info.profile(x.profile).id
        m.member_id = x.member_id
        m.action.CopyFrom(_action(p4info, x.action))
        return ent
    raise TypeError(f"not a P4 entity: {x!r}")


def from_entity(p4info: P4Info, ent: p4runtime_pb2.Entity) -> Entity:
    """The value of an entity read from a switch; ValueError for what this
    controller never writes (ternary fields, action sets, clone sessions, ...)."""
    kind = ent.WhichOneof("entity")
    if kind == "table_entry":
        te = ent.table_entry
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
        which = te.action.WhichOneof("type")
        if which == "action":
            return TableEntry(t.name, tuple(match), action=_action_from(p4info, te.action.action))
        if which == "action_profile_member_id":
            return TableEntry(t.name, tuple(match), member_id=te.action.action_profile_member_id)
        raise ValueError(f"{t.name}: entry with a {which} action")
    if kind == "packet_replication_engine_entry":
        pre = ent.packet_replication_engine_entry
        if pre.WhichOneof("type") != "multicast_group_entry":
            raise ValueError("a clone session")
        mg = pre.multicast_group_entry
        replicas = []
        for r in mg.replicas:
            port = r.egress_port if r.WhichOneof("port_kind") != "port" else int.from_bytes(r.port, "big")
            replicas.append(Replica(port, r.instance))
        return MulticastGroup(mg.multicast_group_id, tuple(replicas))
    if kind == "action_profile_member":
        m = ent.action_profile_member
        return ProfileMember(p4info.profile_by_id(m.action_profile_id).name, m.member_id, _action_from(p4info, m.action))
    raise ValueError(f"unexpected entity {kind}")


_UPDATE_TYPES = {Insert: p4runtime_pb2.Update.INSERT, Modify: p4runtime_pb2.Update.MODIFY, Delete: p4runtime_pb2.Update.DELETE}


def to_update(p4info: P4Info, op: P4Op) -> p4runtime_pb2.Update:
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
        out.append(ent)
    ent = p4runtime_pb2.Entity()
    ent.action_profile_member.action_profile_id = p4info.profile(ECMP_PROFILE).id
    out.append(ent)
    ent = p4runtime_pb2.Entity()
    ent.packet_replication_engine_entry.multicast_group_entry.SetInParent()  # group id 0: every group
    out.append(ent)
    return out


def state_from_entities(p4info: P4Info, entities) -> tuple[P4SwitchState, list[str]]:
    """The state made of read-back entities, and a note for each one not understood
    (left out of the state: never deleted, never counted)."""
    entries, groups, members, notes = [], [], [], []
    for ent in entities:
        try:
            x = from_entity(p4info, ent)
        except ValueError as e:
            notes.append(str(e))
            continue
        (entries if isinstance(x, TableEntry) else groups if isinstance(x, MulticastGroup) else members).append(x)
    return P4SwitchState(frozenset(entries), frozenset(groups), frozenset(members)), notes
