"""Reconciliation: the operations that turn a switch's actual state into the desired one.

`diff(desired, actual)` produces, per switch, only the difference, ordered
make-before-break (like Faucet's `valve_of` orders a batch):

1. make:   add and modify meters, add groups, add flows;
2. switch: modify groups, then modify flows (a flow with the same table, priority
           and match but new actions or cookie is modified in place, so its traffic
           moves atomically);
3. break:  delete flows, then delete groups, then delete meters.

A group that points to another group (a replication group with a fast-failover
group in a bucket, `openflow.failover`) is added after the groups it points to
and deleted before them.

So no flow ever refers to a missing group or meter and no packet of a job that
stays finds its entries gone. Across switches, `phases` splits the operations into
these three phases; a controller that sends phase k to every switch and waits for
the barrier replies before phase k+1 has every new downstream entry in place
before any upstream entry redirects traffic to it.

`apply(ops, actual)` is a strict model of a switch executing the operations (like
Faucet's `fakeoftable`): it raises `InconsistentOp` where a real switch would refuse
an operation or silently remove flows (adding an entry that exists, modifying or
deleting one that does not, a flow referring to a missing group or meter,
deleting a group or meter that a flow still uses).

The controller should pass as `actual` only the entries it owns (flows whose
cookie satisfies `openflow.entries.is_owned_cookie`), so that entries installed by
someone else, such as an LLDP packet-in flow, are left alone.

Sending the operations: AddFlow = OFPFC_ADD; ModifyFlow = OFPFC_MODIFY_STRICT (or
OFPFC_ADD, which replaces an entry of the same match and priority atomically and
also updates the cookie); DeleteFlow = OFPFC_DELETE_STRICT; groups and meters
with OFPGC_/OFPMC_ ADD, MODIFY, DELETE.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Union

from controller.southbound.openflow.entries import FlowEntry, GroupAction, GroupEntry, Meter, MeterEntry, SwitchState
from controller.southbound.reconcile import InconsistentOp, execute, ordered_batches, per_switch, table_ops


@dataclass(frozen=True)
class AddMeter:
    meter: MeterEntry


@dataclass(frozen=True)
class ModifyMeter:
    meter: MeterEntry


@dataclass(frozen=True)
class DeleteMeter:
    meter: MeterEntry


@dataclass(frozen=True)
class AddGroup:
    group: GroupEntry


@dataclass(frozen=True)
class ModifyGroup:
    group: GroupEntry


@dataclass(frozen=True)
class DeleteGroup:
    group: GroupEntry


@dataclass(frozen=True)
class AddFlow:
    flow: FlowEntry


@dataclass(frozen=True)
class ModifyFlow:
    flow: FlowEntry


@dataclass(frozen=True)
class DeleteFlow:
    flow: FlowEntry


Op = Union[AddMeter, ModifyMeter, DeleteMeter, AddGroup, ModifyGroup, DeleteGroup, AddFlow, ModifyFlow, DeleteFlow]

PHASE_MAKE, PHASE_SWITCH, PHASE_BREAK = 0, 1, 2
# (phase, rank within the phase) of each kind of operation
_ORDER: dict[type, tuple[int, int]] = {
    AddMeter: (PHASE_MAKE, 0),
    ModifyMeter: (PHASE_MAKE, 1),
    AddGroup: (PHASE_MAKE, 2),
    AddFlow: (PHASE_MAKE, 3),
    ModifyGroup: (PHASE_SWITCH, 0),
    ModifyFlow: (PHASE_SWITCH, 1),
    DeleteFlow: (PHASE_BREAK, 0),
    DeleteGroup: (PHASE_BREAK, 1),
    DeleteMeter: (PHASE_BREAK, 2),
}


def phase(op: Op) -> int:
    return _ORDER[type(op)][0]


def _flow_sort(f: FlowEntry) -> tuple:
    return (f.table_id, -f.priority, repr(f.match))


def diff_switch(desired: SwitchState, actual: SwitchState) -> list[Op]:
    """The operations that turn `actual` into `desired` on one switch, make-before-break."""
    if desired == actual:
        return []  # the common case on a large fabric: most switches do not change
    ops: list[Op] = []
    # only the entries that differ are keyed (a switch holds thousands of unicast
    # routes, shared by both sides; the set differences use the stored hashes)
    for want_set, have_set, ident, add, modify, delete in (
        (desired.meters, actual.meters, _meter_id, AddMeter, ModifyMeter, DeleteMeter),
        (desired.groups, actual.groups, _group_id, AddGroup, ModifyGroup, DeleteGroup),
        (desired.flows, actual.flows, _flow_key, AddFlow, ModifyFlow, DeleteFlow),
    ):
        want = {ident(x): x for x in want_set - have_set}
        have = {ident(x): x for x in have_set - want_set}
        ops += table_ops(want, have, add, modify, delete)
    return sorted(ops, key=_op_sort)


def _meter_id(m) -> int:
    return m.meter_id


def _group_id(g) -> int:
    return g.group_id


def _flow_key(f) -> tuple:
    return f.key


def _op_sort(op: Op) -> tuple:
    rank = _ORDER[type(op)]
    if isinstance(op, (AddFlow, ModifyFlow, DeleteFlow)):
        ident: tuple = _flow_sort(op.flow)
    elif isinstance(op, (AddGroup, ModifyGroup, DeleteGroup)):
        # a group may point to another (a fast-failover group in a replication
        # group's bucket): add the ones pointed to first, delete them last
        chains = any(isinstance(a, GroupAction) for b in op.group.buckets for a in b)
        ident = (int(chains) if isinstance(op, AddGroup) else int(not chains), op.group.group_id)
    else:
        ident = (op.meter.meter_id,)
    return rank + ident


def diff(desired: Mapping[str, SwitchState], actual: Mapping[str, SwitchState]) -> dict[str, list[Op]]:
    """Per switch, the operations from `actual` to `desired` (switches with none are
    left out). A switch missing from one side counts as empty there."""
    return per_switch(desired, actual, diff_switch, SwitchState())


def phases(ops_by_switch: Mapping[str, list[Op]]) -> list[dict[str, list[Op]]]:
    """The operations split into the make, switch and break phases (in that order);
    each phase maps switch -> its operations of that phase, in order."""
    batches = ordered_batches(ops_by_switch, phase)
    return [batches.get(p, {}) for p in (PHASE_MAKE, PHASE_SWITCH, PHASE_BREAK)]


# -- the switch model ------------------------------------------------------------------------
def _references(actions: Iterable) -> tuple[set[int], set[int]]:
    groups, meters = set(), set()
    for a in actions:
        if isinstance(a, GroupAction):
            groups.add(a.group_id)
        elif isinstance(a, Meter):
            meters.add(a.meter_id)
    return groups, meters


def dangling_references(state: SwitchState) -> list[str]:
    """Descriptions of every reference in `state` to a group or meter it lacks."""
    group_ids = {g.group_id for g in state.groups}
    meter_ids = {m.meter_id for m in state.meters}
    problems = []
    for f in state.flows:
        g, m = _references(f.actions)
        for gid in sorted(g - group_ids):
            problems.append(f"flow {f.match} refers to missing group {gid}")
        for mid in sorted(m - meter_ids):
            problems.append(f"flow {f.match} refers to missing meter {mid}")
    for grp in state.groups:
        for bucket in grp.buckets:
            g, m = _references(bucket)
            for gid in sorted(g - group_ids):
                problems.append(f"group {grp.group_id} refers to missing group {gid}")
            for mid in sorted(m - meter_ids):
                problems.append(f"group {grp.group_id} refers to missing meter {mid}")
    return problems


def apply(ops: Iterable[Op], actual: SwitchState) -> SwitchState:
    """The state of a switch in state `actual` after executing `ops` in order.

    Raises InconsistentOp at the first operation that adds an entry that exists,
    modifies or deletes one that does not, or leaves a reference to a missing group
    or meter (including deleting a group or meter still in use).
    """
    flows = actual.flow_table()
    groups = actual.group_table()
    meters = actual.meter_table()
    for op in ops:
        if isinstance(op, (AddFlow, ModifyFlow, DeleteFlow)):
            table, k, entry = flows, op.flow.key, op.flow
        elif isinstance(op, (AddGroup, ModifyGroup, DeleteGroup)):
            table, k, entry = groups, op.group.group_id, op.group
        elif isinstance(op, (AddMeter, ModifyMeter, DeleteMeter)):
            table, k, entry = meters, op.meter.meter_id, op.meter
        else:
            raise InconsistentOp(f"unknown operation {op!r}")
        name = type(op).__name__
        execute(table, k, entry, "make" if name.startswith("Add") else "change" if name.startswith("Modify") else "remove", name)
        state = SwitchState(frozenset(flows.values()), frozenset(groups.values()), frozenset(meters.values()))
        problems = dangling_references(state)
        if problems:
            raise InconsistentOp(f"after {name}: {problems[0]}")
    return SwitchState(frozenset(flows.values()), frozenset(groups.values()), frozenset(meters.values()))


def apply_all(ops_by_switch: Mapping[str, list[Op]], actual: Mapping[str, SwitchState]) -> dict[str, SwitchState]:
    """`apply` on every switch; switches without operations keep their state."""
    empty = SwitchState()
    out = dict(actual)
    for sw, ops in ops_by_switch.items():
        out[sw] = apply(ops, actual.get(sw, empty))
    return out
