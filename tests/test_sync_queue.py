"""The southbound workers' queue: bursts coalesce into one sync; a plan syncs every switch."""

from __future__ import annotations

import queue

from controller.southbound.sync_queue import batches


def test_bursts_coalesce_plans_sync_everything_and_none_stops():
    q: queue.Queue = queue.Queue()
    out = []
    for item in (("sync", "a"), ("retry", "b"), ("sync", "a")):
        q.put(item)
    it = batches(q, lambda: False)
    out.append(next(it))
    q.put(("sync", "c"))
    q.put(("plan", 7))
    out.append(next(it))
    q.put(("sync", "d"))
    q.put(None)
    assert out == [{"a", "b"}, None]
    assert list(it) == []  # the stop ends the worker, the queued "d" is dropped with it


def test_stopping_ends_the_worker_at_its_next_wake_up():
    q: queue.Queue = queue.Queue()
    q.put(("sync", "a"))
    assert list(batches(q, lambda: True)) == []
