"""The etcd election of controller.store.election in-process (docs/ha.md): one leader among
several candidates, terms that only grow, a resigning leader handing over at
once, and a leader that loses etcd stepping down within its lease."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import etcd_helper

if etcd_helper.unavailable():
    pytest.skip(etcd_helper.unavailable(), allow_module_level=True)

from controller.store.etcd import EtcdClient  # noqa: E402
from controller.store.election import Election  # noqa: E402


def wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def elected(self, term: int) -> None:
        with self.lock:
            self.events.append(("elected", term))

    def deposed(self, term: int) -> None:
        with self.lock:
            self.events.append(("deposed", term))


def candidates(url: str, n: int, key: str, ttl: int = 2):
    out = []
    for i in range(n):
        rec = Recorder()
        e = Election(EtcdClient([url], timeout=0.5), key, f"i{i}", f"http://i{i}", ttl,
                     on_elected=rec.elected, on_deposed=rec.deposed)
        out.append((e, rec))
    return out


def test_one_leader_terms_grow_and_resigning_hands_over(tmp_path):
    with etcd_helper.EtcdServer(tmp_path) as etcd:
        key = f"/el-{uuid.uuid4().hex[:6]}/leader"
        cands = candidates(etcd.url, 3, key)
        for e, _ in cands:
            e.start()
        try:
            terms = []
            alive = list(cands)
            for _ in range(3):
                wait(lambda: [e for e, _ in alive if e.leading], 5, "a leader")
                time.sleep(0.5)  # still exactly one, and every other one knows it
                leaders = [e for e, _ in alive if e.leading]
                assert len(leaders) == 1
                lead = leaders[0]
                wait(lambda: all(e.leader is not None and e.leader.term == lead.term for e, _ in alive), 2, "agreement")
                terms.append(lead.term)
                t0 = time.monotonic()
                lead.stop(resign=True)
                alive = [(e, r) for e, r in alive if e is not lead]
                if alive:
                    wait(lambda: any(e.leading for e, _ in alive), 2, "the next leader")
                    assert time.monotonic() - t0 < 1.5  # the revoked lease frees the key at once
            assert terms == sorted(terms) and len(set(terms)) == 3
            # each candidate's handlers ran in order: elected then deposed, same term
            for e, rec in cands:
                if rec.events:
                    assert rec.events == [("elected", rec.events[0][1]), ("deposed", rec.events[0][1])]
        finally:
            for e, _ in cands:
                e.stop()


def test_leader_without_etcd_steps_down_within_its_lease(tmp_path):
    with etcd_helper.EtcdServer(tmp_path) as etcd:
        (e, rec), = candidates(etcd.url, 1, f"/el-{uuid.uuid4().hex[:6]}/leader")
        e.start()
        try:
            wait(lambda: e.leading, 5, "the leader")
            term = e.term
            etcd.stop()  # etcd gone: no keep-alive can succeed
            t0 = time.monotonic()
            wait(lambda: not e.leading, 5, "the leader to step down")
            took = time.monotonic() - t0
            assert took <= 2 + 0.6, took  # the TTL (2 s) after the last renewal, at most
            wait(lambda: ("deposed", term) in rec.events, 2, "the deposed handler")
        finally:
            e.stop(resign=False)


def test_lease_validity_by_the_local_clock(tmp_path):
    """What the OpenFlow app asks before each phase of writes: a leader whose last
    confirmed renewal was sent a TTL ago or more may not write (a resumed frozen
    process finds this out before its next renewal)."""
    now = [1000.0]
    with etcd_helper.EtcdServer(tmp_path) as etcd:
        e = Election(EtcdClient([etcd.url], timeout=0.5), f"/el-{uuid.uuid4().hex[:6]}/leader", "i0", None, 2,
                     clock=lambda: now[0])
        e.start()
        try:
            wait(lambda: e.leading, 5, "the leader")
            e._stop.set()  # no more renewals, as in a frozen process (white box)
            e._thread.join(5)
            term = e.term
            assert e.lease_valid(term) and not e.lease_valid(term + 1)
            now[0] += 1.9
            assert e.lease_valid(term)
            now[0] += 0.2  # 2.1 s after the last renewal was sent: the TTL is over
            assert not e.lease_valid(term) and e.leading  # it still believes it leads
        finally:
            e.stop(resign=True)
