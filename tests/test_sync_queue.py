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


def test_a_then_item_runs_after_the_sync_of_what_was_queued_before_it():
    import threading

    from controller.southbound.sync_queue import after_sync, run_worker

    log = []
    for first in (("plan", 1), None):
        q: queue.Queue = queue.Queue()
        done = threading.Event()
        if first is not None:
            q.put(first)
        after_sync(q)(lambda: (log.append("held packet"), done.set()))
        t = threading.Thread(target=run_worker, args=(q, lambda: False, lambda targets: log.append(("sync", targets)),
                                                      "test"))
        t.start()
        assert done.wait(5)
        q.put(None)
        t.join(5)
    # one batch: the sync, then the held packet; a batch of only held packets syncs nothing
    assert log == [("sync", None), "held packet", "held packet"]
