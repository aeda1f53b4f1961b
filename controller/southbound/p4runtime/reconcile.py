"""Reconciling P4 switches: the operations that turn a switch's actual state into
the desired one, in ordered batches, and a strict model of a switch.

Reconciliation: `diff_switch` gives inserts, modifies and deletes; `steps`
splits them into ordered batches. A P4Runtime server may apply the updates of
one Write in any order, so every batch holds only independent updates and the
next batch is sent after the previous one's answer:

  make:   members (and clone sessions, meter cells), rewrite entries, groups,
          then the other table entries, then direct meter configurations
  switch: the same order, modified in place
  break:  direct meter configurations (reset), table entries, groups, rewrite
          entries, members

so no entry ever names a missing member or group and no replica a missing
rewrite. `apply` is a strict model of a switch executing operations.
"""


from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Union

from controller.southbound.p4runtime.entities import (
    ECMP_PROFILE,
    REWRITE_TABLE,
    SET_MCAST_GROUP,
    CloneSession,
    DirectMeter,
    Entity,
    Meter,
    MulticastGroup,
    P4SwitchState,
    ProfileMember,
    TableEntry,
    identity,
)
from controller.southbound.reconcile import InconsistentOp, execute, ordered_batches, per_switch, table_ops

# -- reconciliation -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Insert:
    entity: Entity


@dataclass(frozen=True)
class Modify:
    entity: Entity


@dataclass(frozen=True)
class Delete:
    entity: Entity


P4Op = Union[Insert, Modify, Delete]

PHASE_MAKE, PHASE_SWITCH, PHASE_BREAK = 0, 1, 2


def _rank(x: Entity) -> int:
    """Dependency rank: a lower rank is referenced by higher ones (a direct meter
    configures an entry: it is made after it and reset before it goes)."""
    if isinstance(x, (ProfileMember, Meter, CloneSession)):
        return 0
    if isinstance(x, DirectMeter):
        return 4
    if isinstance(x, TableEntry) and x.table == REWRITE_TABLE:
        return 1
    if isinstance(x, MulticastGroup):
        return 2
    return 3


def step_of(op: P4Op) -> tuple[int, int]:
    """(phase, batch within the phase) of an operation; batches run in this order."""
    rank = _rank(op.entity)
    if isinstance(op, Insert):
        return (PHASE_MAKE, rank)
    if isinstance(op, Modify):
        return (PHASE_SWITCH, rank)
    return (PHASE_BREAK, 4 - rank)


def _sort_key(op: P4Op) -> tuple:
    return step_of(op) + (repr(identity(op.entity)),)


def diff_switch(desired: P4SwitchState, actual: P4SwitchState) -> list[P4Op]:
    """The operations that turn `actual` into `desired`, in step order."""
    ops: list[P4Op] = []
    for want, have in (
        (desired.member_table(), actual.member_table()),
        (desired.group_table(), actual.group_table()),
        (desired.entry_table(), actual.entry_table()),
        (desired.meter_table(), actual.meter_table()),
        (desired.clone_table(), actual.clone_table()),
    ):
        ops += table_ops(want, have, Insert, Modify, Delete)
    return sorted(ops, key=_sort_key)


def diff(desired: Mapping[str, P4SwitchState], actual: Mapping[str, P4SwitchState]) -> dict[str, list[P4Op]]:
    """Per switch, the operations from `actual` to `desired` (switches with none left out)."""
    return per_switch(desired, actual, diff_switch, P4SwitchState())


def steps(ops_by_switch: Mapping[str, list[P4Op]]) -> list[dict[str, list[P4Op]]]:
    """The operations as ordered batches (make, switch, break; each by dependency
    rank); each batch maps switch -> its operations, which are independent of
    one another. Empty batches are left out."""
    batches = ordered_batches(ops_by_switch, step_of)
    return [batches[k] for k in sorted(batches)]


def dangling_references(state: P4SwitchState) -> list[str]:
    """Every reference of `state` to a member, group or rewrite it lacks."""
    problems = []
    members = {m.member_id for m in state.members if m.profile == ECMP_PROFILE}
    groups = {g.group_id for g in state.groups}
    rids = {e.match[0][1].value for e in state.in_table(REWRITE_TABLE)}
    for e in state.entries:
        if e.member_id is not None and e.member_id not in members:
            problems.append(f"{e.table} entry {e.match} refers to missing member {e.member_id}")
        if e.action is not None and e.action.name == SET_MCAST_GROUP:
            gid = dict(e.action.params)["group"]
            if gid not in groups:
                problems.append(f"{e.table} entry {e.match} refers to missing group {gid}")
    for g in state.groups:
        for r in g.replicas:
            if r.instance and r.instance not in rids:
                problems.append(f"group {g.group_id} replica {r} has no rewrite entry")
    keys = {e.key for e in state.entries}
    for m in state.meters:
        if isinstance(m, DirectMeter) and m.key not in keys:
            problems.append(f"direct meter of {m.table} entry {m.match}, which is missing")
    return problems


def apply(ops: Iterable[P4Op], actual: P4SwitchState) -> P4SwitchState:
    """The state after executing `ops` in order; raises `reconcile.InconsistentOp` at
    the first operation that inserts an existing entity, modifies or deletes a
    missing one, or leaves a dangling reference."""
    tables: dict[str, dict] = {
        "entry": actual.entry_table(),
        "group": actual.group_table(),
        "member": actual.member_table(),
        "meter": actual.meter_table(),
        "clone": actual.clone_table(),
    }
    for op in ops:
        ident = identity(op.entity)
        table, k = tables[ident[0]], ident[1:] if len(ident) > 2 else ident[1]
        name = type(op).__name__
        kind = "make" if isinstance(op, Insert) else "change" if isinstance(op, Modify) else "remove"
        try:
            execute(table, k, op.entity, kind, name)
        except InconsistentOp:
            raise InconsistentOp(f"{name}: {ident} {'already exists' if kind == 'make' else 'does not exist'}") from None
        problems = dangling_references(_state(tables))
        if problems:
            raise InconsistentOp(f"after {name}: {problems[0]}")
    return _state(tables)


def _state(tables: Mapping[str, dict]) -> P4SwitchState:
    return P4SwitchState(
        frozenset(tables["entry"].values()), frozenset(tables["group"].values()), frozenset(tables["member"].values()),
        frozenset(tables["meter"].values()), frozenset(tables["clone"].values()),
    )
