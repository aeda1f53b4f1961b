"""Containment of a planner failure: which changed jobs make the planner fail (issue 23).

A registration can still break the planner whatever the API refuses (a solver's
"Model error" on numbers it cannot take). Without containment one such job leaves
every job without a plan, and after a restart there is no plan at all. When a
plan round raises from the planner, `isolate` finds the job(s) responsible:

- the suspects are the jobs of the round that the last good plan (the served one)
  does not hold as they are now (`suspects`): added since, or none at all before
  the first plan. The other jobs were planned before, so they are trusted;
- the round is planned again without the suspects. If that fails too, the
  failure is not theirs (a topology problem, say): `isolate` gives None and the
  caller keeps the served plan, as without containment;
- else the suspects, oldest first, are bisected: the shortest prefix whose
  addition makes the planner fail ends with a culprit, whose reason is the
  planner's error (`short_error`). The plan of the trusted jobs and the prefix
  before the culprit is the one served. The suspects after the culprit are
  tried once more, all together: if they plan, they are in; if not, they are
  left out of this round (`Isolation.left_out`), and the caller marks a change so
  that the next round finds the next culprit among them.

Bounded: one failed round costs at most 2 + ceil(log2 k) extra planner calls
for k suspects (one without the suspects, the bisection, one for the rest):
O(log n), and one culprit found per failed round at least.

Pure: it only calls the `attempt` function it is given (one plan of a job
set, raising what the planner raises).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from controller.algorithm.model import Job

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_REASON = 240  # characters of the planner's error kept as a job's reason


def short_error(e: BaseException) -> str:
    """The planner's error as a job's reason: type and first line, at most `MAX_REASON` characters."""
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    reason = f"{type(e).__name__}: {first}" if first else type(e).__name__
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"


def suspects(jobs: Iterable[Job], planned: Mapping[str, Job] | None, planned_as: Callable[[Job, Job], bool]) -> set[str]:
    """The ids of `jobs` the last good plan does not hold as they are now (`planned`:
    job id -> the job as that plan holds it; None: no plan yet, every job is a suspect)."""
    if planned is None:
        return {j.id for j in jobs}
    return {j.id for j in jobs if j.id not in planned or not planned_as(planned[j.id], j)}


@dataclass(frozen=True)
class Isolation(Generic[T]):
    """What `isolate` found: the culprits (job id -> reason), the jobs planned
    without them and their plan (what `attempt` returned), the suspects left out
    of this round (neither planned nor blamed yet), and the planner calls made."""

    culprits: dict[str, str]
    jobs: tuple[Job, ...]
    made: T
    left_out: tuple[Job, ...]
    calls: int


def max_calls(k: int) -> int:
    """The most planner calls `isolate` makes for `k` suspects (see the module docstring)."""
    return 0 if k == 0 else 2 + math.ceil(math.log2(k))


def isolate(jobs: tuple[Job, ...], suspected: set[str], attempt: Callable[[tuple[Job, ...]], T],
            error: Exception) -> Isolation[T] | None:
    """Find the culprit(s) of a planner failure on `jobs` (`error`), bisecting the
    `suspected` ones (see the module docstring; `jobs` in creation order).
    None if the failure is not theirs: planning without any suspect fails too,
    or there is no suspect."""
    trusted = tuple(j for j in jobs if j.id not in suspected)
    rest = [j for j in jobs if j.id in suspected]
    if not rest:
        return None
    calls = 1
    try:
        made = attempt(trusted)
    except Exception as e:  # noqa: BLE001 - whatever the planner raises
        log.info("planning without the %d changed jobs fails too (%s): not theirs", len(rest), short_error(e))
        return None
    good = list(trusted)
    # invariant: attempt(good) gave `made`; attempt(good + rest) raised `error`
    lo, hi = 0, len(rest)  # good + rest[:lo] plans, good + rest[:hi] fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        calls += 1
        try:
            made = attempt((*good, *rest[:mid]))
            lo = mid
        except Exception as e:  # noqa: BLE001
            hi, error = mid, e
    culprit = rest[hi - 1]
    culprits = {culprit.id: short_error(error)}
    good += rest[:lo]
    rest = rest[hi:]
    left_out: tuple[Job, ...] = ()
    if rest:
        calls += 1
        try:
            made = attempt((*good, *rest))
            good += rest
        except Exception:  # noqa: BLE001 - another culprit among them: the next round finds it
            left_out = tuple(rest)
    return Isolation(culprits, tuple(good), made, left_out, calls)
