"""The work queue of a southbound's sync worker: queued items coalesced into one sync.

Items are ("plan", generation) — every connected switch must be synced — or
(kind, switch) for one switch; None asks the worker to stop. Whatever is queued
when the worker wakes is served by one sync, so a burst of plans or reconnects
costs one pass over the switches.

("then", callable) items are run after the sync of the batch they came with
(`after_sync`): a packet-out that must follow the entries of a plan queued
before it (an ARP answer held until the routes of a host that just joined are
on the switches, `core.hosts.ArpAction.after_change`). The queue is the
backend's, unbounded as before; a "then" item is queued only once per held
answer, and held answers are bounded in the core (`core.changes`).
`send_after_plan` is how both backends send an answer the core holds.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Iterator

from controller.core.changes import Changes
from controller.core.counters import Counters

log = logging.getLogger(__name__)

THEN = "then"


def batches(q: queue.Queue, stopping: Callable[[], bool], thens: list | None = None) -> Iterator[set | None]:
    """Per wake-up, the switches to sync (None: every one, since a plan came);
    ends at a None item or once `stopping()` is true. The callables of the
    batch's ("then", callable) items are appended to `thens` (if given) before it
    is yielded; a batch of only such items yields an empty set."""
    while True:
        item = q.get()
        if item is None or stopping():
            return
        items = [item]
        while True:
            try:
                nxt = q.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                return
            items.append(nxt)
        syncs = [it for it in items if it[0] != THEN]
        if thens is not None:
            thens.extend(fn for kind, fn in items if kind == THEN)
        yield None if any(kind == "plan" for kind, _ in syncs) else {target for _, target in syncs}


def after_sync(q: queue.Queue) -> Callable[[Callable[[], None]], None]:
    """`then(fn)`: run `fn` in the worker once everything queued before it is synced."""
    return lambda fn: q.put((THEN, fn))


def run_worker(q: queue.Queue, stopping: Callable[[], bool], sync: Callable[[set | None], None], what: str) -> None:
    """A backend's sync worker: `sync` every batch (`batches`) until stopped, then
    run the batch's "then" callables; a failed batch or callable is logged (`what`
    failed) and the worker goes on."""
    thens: list[Callable[[], None]] = []
    for targets in batches(q, stopping, thens):
        try:
            if targets is None or targets:
                sync(targets)
        except Exception:  # noqa: BLE001 - the worker must survive one bad batch
            log.exception("%s failed", what)
        run, thens[:] = list(thens), []
        for fn in run:
            try:
                fn()
            except Exception:  # noqa: BLE001 - one held packet must not stop the worker
                log.exception("%s: a packet held for the sync failed", what)


def send_after_plan(changes: Changes, counters: Counters, then: Callable[[Callable[[], None]], None],
                    after_change: int | None, joined_at: float | None, send: Callable[[], None]) -> None:
    """Both backends' way of sending an answer the core holds (`core.hosts.ArpAction`):
    `send()` now if `after_change` is None; else once change `after_change` is
    covered by a plan (`Changes.when_covered`) and that plan's sync is done (`then`,
    the backend's `after_sync`), observing the host join as "installed"."""
    if after_change is None:
        send()
        return

    def release() -> None:
        send()
        if joined_at is not None:
            counters.host_joined("installed", changes.clock() - joined_at)

    changes.when_covered(after_change, lambda: then(release))
