"""The SQLite job store: add/list/delete, persistence, refusals that store nothing."""

from __future__ import annotations

import threading

import pytest

from controller.algorithm.model import Job
from controller.store import DuplicateGroupAddress, DuplicateJobId, JobStore, StoreError


def job(i: int, **kw) -> Job:
    return Job(kw.get("id", f"job-{i}"), kw.get("ps", "h0"), kw.get("workers", (f"h{i + 1}", f"h{i + 2}")), kw.get("demand", 1e9 * (i + 1)), kw.get("weight", 1.0))


def test_add_list_get_delete(tmp_path):
    with JobStore(tmp_path / "jobs.sqlite") as store:
        a = store.add(job(1), "239.1.0.1")
        b = store.add(job(2, weight=2.5), "239.1.0.2")
        c = store.add(job(3))  # no address yet
        assert [s.job for s in store.jobs()] == [job(1), job(2, weight=2.5), job(3)]
        assert a.seq < b.seq < c.seq
        assert store.get("job-2").group_address == "239.1.0.2" and store.get("job-3").group_address is None
        assert store.get("nope") is None
        assert store.delete("job-2") is True
        assert store.delete("job-2") is False
        assert [s.job.id for s in store.jobs()] == ["job-1", "job-3"]
        assert len(store) == 2


def test_persists_across_reopen_and_keeps_order(tmp_path):
    path = tmp_path / "sub" / "jobs.sqlite"  # the directory is created
    with JobStore(path) as store:
        for i in range(5):
            store.add(job(i), f"239.1.0.{i + 1}")
        store.delete("job-0")
        store.put_state("ids", {"groups": {"s1": {"job-1": 1}}})
    with JobStore(path) as store:
        assert [s.job for s in store.jobs()] == [job(i) for i in range(1, 5)]
        assert [s.group_address for s in store.jobs()] == [f"239.1.0.{i + 1}" for i in range(1, 5)]
        assert store.get_state("ids") == {"groups": {"s1": {"job-1": 1}}}
        # sequence numbers are never reused, so creation order survives deletes
        new = store.add(job(0), "239.1.0.1")
        assert new.seq > max(s.seq for s in store.jobs()[:-1])
        assert store.jobs()[-1].job.id == "job-0"


def test_duplicates_are_refused_and_store_nothing(tmp_path):
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.add(job(1), "239.1.0.1")
        with pytest.raises(DuplicateJobId):
            store.add(job(1, workers=("h9",)), "239.1.0.9")
        with pytest.raises(DuplicateGroupAddress):
            store.add(job(2), "239.1.0.1")
        assert [s.job for s in store.jobs()] == [job(1)]
        assert store.get("job-2") is None


def test_failed_insert_leaves_nothing(tmp_path):
    """A constraint that fails inside the transaction rolls the whole insert back,
    and the store stays usable."""
    with JobStore(tmp_path / "jobs.sqlite") as store:
        with pytest.raises(ValueError):
            store.add(job(1, demand=-5.0), "239.1.0.1")  # CHECK (demand > 0)
        assert store.jobs() == []
        # the address was not taken by the failed insert
        store.add(job(2), "239.1.0.1")
        assert [s.job.id for s in store.jobs()] == ["job-2"]


def test_set_group_addresses_is_atomic(tmp_path):
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.add(job(1), "239.1.0.1")
        store.add(job(2), "239.1.0.2")
        store.add(job(3), "239.1.0.3")
        store.set_group_addresses({"job-1": "239.1.0.2", "job-2": "239.1.0.1"})  # a swap
        assert [s.group_address for s in store.jobs()] == ["239.1.0.2", "239.1.0.1", "239.1.0.3"]
        with pytest.raises(DuplicateGroupAddress):
            store.set_group_addresses({"job-1": "239.1.0.9", "job-2": "239.1.0.3"})
        assert [s.group_address for s in store.jobs()] == ["239.1.0.2", "239.1.0.1", "239.1.0.3"]


def test_concurrent_adds_from_threads(tmp_path):
    with JobStore(tmp_path / "jobs.sqlite") as store:
        errors: list[Exception] = []

        def worker(t: int) -> None:
            try:
                for i in range(5):
                    store.add(job(0, id=f"t{t}-{i}"), f"239.1.{t}.{i + 1}")
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        assert len(store) == 20


def test_not_a_database(tmp_path):
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not an sqlite file at all" * 100)
    with pytest.raises(StoreError, match="cannot open the job store"):
        JobStore(path)
