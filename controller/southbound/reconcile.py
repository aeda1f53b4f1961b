"""What both backends' reconciliation shares: desired against actual, key by key.

A backend keeps each switch's state as tables of frozen entries keyed by their
identity. `table_ops` compares one table of the desired state with the actual
one (make what is missing, change what differs, break what is extra),
`per_switch` runs a backend's diff over every switch, `execute` applies one
operation to a model table (a strict model of a switch: inserting what exists,
or changing or removing what does not, is an `InconsistentOp`), and
`ordered_batches` groups operations into the batches a backend sends in turn.
The order of the batches (make-before-break, and dependencies within a phase)
is each backend's own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, MutableMapping
from typing import Literal, TypeVar

K = TypeVar("K", bound=Hashable)
E = TypeVar("E")
S = TypeVar("S")
O = TypeVar("O")


class InconsistentOp(ValueError):
    """An operation that the switch would refuse, or that would break a reference."""


def table_ops(
    want: Mapping[K, E],
    have: Mapping[K, E],
    make: Callable[[E], O],
    change: Callable[[E], O],
    remove: Callable[[E], O],
) -> list[O]:
    """The operations that turn table `have` into `want` (entries by key): make the
    missing ones, change the ones that differ, remove the extra ones."""
    ops = [make(want[k]) for k in want.keys() - have.keys()]
    ops += [change(want[k]) for k in want.keys() & have.keys() if want[k] != have[k]]
    ops += [remove(have[k]) for k in have.keys() - want.keys()]
    return ops


def per_switch(
    desired: Mapping[str, S], actual: Mapping[str, S], diff_switch: Callable[[S, S], list[O]], empty: S
) -> dict[str, list[O]]:
    """Per switch, the operations from `actual` to `desired` (switches with none are
    left out). A switch missing from one side counts as `empty` there."""
    out: dict[str, list[O]] = {}
    for sw in sorted(set(desired) | set(actual)):
        ops = diff_switch(desired.get(sw, empty), actual.get(sw, empty))
        if ops:
            out[sw] = ops
    return out


def execute(table: MutableMapping[K, E], key: K, entry: E, kind: Literal["make", "change", "remove"], name: str) -> None:
    """Apply one operation (`name`, for messages) to a model table."""
    if kind == "make":
        if key in table:
            raise InconsistentOp(f"{name}: {key} already exists")
        table[key] = entry
    elif kind == "change":
        if key not in table:
            raise InconsistentOp(f"{name}: {key} does not exist")
        table[key] = entry
    else:
        if key not in table:
            raise InconsistentOp(f"{name}: {key} does not exist")
        del table[key]


def ordered_batches(ops_by_switch: Mapping[str, list[O]], step: Callable[[O], Hashable]) -> dict:
    """The operations grouped by `step(op)`: step -> switch -> its operations of
    that step, in order (the caller sends the steps in its own order)."""
    out: dict = {}
    for sw, ops in ops_by_switch.items():
        for op in ops:
            out.setdefault(step(op), {}).setdefault(sw, []).append(op)
    return out
