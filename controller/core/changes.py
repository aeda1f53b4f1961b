"""The change accounting: what every part of the core reports, and the planning loop reads.

A change is anything the plan depends on: a job registered or deleted, a link
down or up, a switch's limits, a learned port or MAC. Each part of the core
(`wiring`, `devices`, `links`, `hosts`, `jobs`) marks its changes here, and the
planning loop (`planning`) covers them: a plan covers every change counted
before it started. So no part calls up into the planning loop; each only counts.

One re-entrant lock (`Changes.lock`) guards the state of the whole core; its
condition variable (`Changes.cond`) wakes the planning worker and the requests
waiting for a plan. The kind of change decides how the next plan is made:
- "network": the topology, its state or its limits changed: a full plan;
- "jobs": only jobs changed: admitted incrementally with `planner.incremental`;
- "translation": only what the backends translate with changed (a learned port
  or MAC): the served plan is translated again, nobody moves (if the planning
  topology changed after all, a link's capacity taken from its new port's
  speed, the planning loop plans as for a change of the network).
(A host that joins a learned network is marked "network"; the planning loop
sees that the topology only grew by hosts and keeps the served plan,
`core.planning` "A host join".)

`when_covered(target, fn)` runs `fn` once a plan (or a failed attempt) covers
change `target`, after the plan was handed to the backends: how an ARP answer
waits for the routes of a host that just joined (`core.hosts.ArpAction`). At most
`MAX_WAITING` callbacks wait; past that the oldest is run at once (its answer
goes out early rather than never).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Literal

log = logging.getLogger(__name__)

ChangeKind = Literal["network", "jobs", "translation"]
MAX_WAITING = 4096  # callbacks waiting for a plan (`when_covered`)


class Changes:
    """Counts changes (see the module docstring). `clock` is monotonic seconds."""

    def __init__(self, clock: Callable[[], float], debounce_s: float) -> None:
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.clock = clock
        now = clock()
        self.count = 1  # the start itself: the first plan installs the unicast routes
        self.covered = 0
        self.first: float | None = now  # the first change not yet planned
        self.last = now - debounce_s  # the latest change (due at once)
        # a change of the network since the last plan (else only jobs changed: with
        # planner.incremental they are admitted without a full plan)
        self.network_changed = True
        # a job registered or deleted since the last plan (with no change of the
        # network either, only the translation's inputs changed: ports, MACs)
        self.jobs_changed = False
        self._waiting: list[tuple[int, Callable[[], None]]] = []  # (target, fn), oldest first

    def mark(self, at: float | None = None, kind: ChangeKind = "network") -> int:
        """Count a change made now or at time `at` (the end of a hold-down, noticed
        later); returns the count a plan must cover. Takes the lock."""
        with self.cond:
            now = self.clock() if at is None else at
            if kind == "jobs":
                self.jobs_changed = True
            elif kind == "network":
                self.network_changed = True
            self.count += 1
            self.last = max(self.last, now)
            if self.first is None:
                self.first = now
            self.cond.notify_all()
            return self.count

    def wake(self) -> None:
        """Wake the planning worker (a due time changed without a change)."""
        with self.cond:
            self.cond.notify_all()

    @property
    def pending(self) -> bool:
        """Some change is not covered by a plan yet."""
        return self.covered < self.count

    def cover(self, target: int) -> None:
        """A plan (or a failed attempt) covers every change up to `target`; the
        callbacks waiting for it run (outside the lock)."""
        with self.cond:
            self.covered = max(self.covered, target)
            self.cond.notify_all()
            due = [fn for t, fn in self._waiting if t <= self.covered]
            self._waiting = [(t, fn) for t, fn in self._waiting if t > self.covered]
        _run(due)

    def when_covered(self, target: int, fn: Callable[[], None]) -> None:
        """Run `fn` once change `target` is covered (now, in this thread, if it is)."""
        with self.cond:
            if self.covered < target:
                self._waiting.append((target, fn))
                if len(self._waiting) <= MAX_WAITING:
                    return
                fn = self._waiting.pop(0)[1]
        _run([fn])


def _run(fns: list[Callable[[], None]]) -> None:
    for fn in fns:
        try:
            fn()
        except Exception:  # noqa: BLE001 - a waiting callback must not break the planning loop
            log.exception("a callback waiting for a plan failed")
