"""The work queue of a southbound's sync worker: queued items coalesced into one sync.

Items are ("plan", generation) — every connected switch must be synced — or
(kind, switch) for one switch; None asks the worker to stop. Whatever is queued
when the worker wakes is served by one sync, so a burst of plans or reconnects
costs one pass over the switches.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)


def batches(q: queue.Queue, stopping: Callable[[], bool]) -> Iterator[set | None]:
    """Per wake-up, the switches to sync (None: every one, since a plan came);
    ends at a None item or once `stopping()` is true."""
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
        yield None if any(kind == "plan" for kind, _ in items) else {target for _, target in items}


def run_worker(q: queue.Queue, stopping: Callable[[], bool], sync: Callable[[set | None], None], what: str) -> None:
    """A backend's sync worker: `sync` every batch (`batches`) until stopped; a
    failed batch is logged (`what` failed) and the worker goes on."""
    for targets in batches(q, stopping):
        try:
            sync(targets)
        except Exception:  # noqa: BLE001 - the worker must survive one bad batch
            log.exception("%s failed", what)
