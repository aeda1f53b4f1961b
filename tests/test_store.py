"""The job store, SQLite and etcd: add/list/delete, persistence, refusals that store
nothing. Every test of the interface runs against both backends (`open_store`:
a store under a name, opened again under the same name after a close); etcd is a
private server this module starts (tests/etcd_helper.py), skipped where etcd is
missing."""

from __future__ import annotations

import threading
import uuid

import pytest

from controller.algorithm.model import Job
from controller.store.base import DuplicateGroupAddress, DuplicateJobId, StoreError
from controller.store.sqlite import JobStore
import etcd_helper


@pytest.fixture(scope="module")
def etcd_server(tmp_path_factory):
    reason = etcd_helper.unavailable()
    if reason:
        pytest.skip(reason)
    with etcd_helper.EtcdServer(tmp_path_factory.mktemp("etcd")) as server:
        yield server


@pytest.fixture(params=["sqlite", "etcd"])
def open_store(request, tmp_path):
    """open_store(name): the store called `name` of this test, on the backend of the
    parameter (SQLite: the file tmp_path/name; etcd: the prefix /test-<uuid>/name/)."""
    if request.param == "sqlite":
        return lambda name="jobs.sqlite": JobStore(tmp_path / name)
    from controller.store.etcd import EtcdClient, EtcdJobStore

    server = request.getfixturevalue("etcd_server")
    run = uuid.uuid4().hex[:8]
    return lambda name="jobs.sqlite": EtcdJobStore(EtcdClient([server.url]), f"/test-{run}/{name}/")


def job(i: int, **kw) -> Job:
    return Job(kw.get("id", f"job-{i}"), kw.get("ps", "h0"), kw.get("workers", (f"h{i + 1}", f"h{i + 2}")), kw.get("demand", 1e9 * (i + 1)), kw.get("weight", 1.0))


def test_add_list_get_delete(open_store):
    with open_store() as store:
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


def test_persists_across_reopen_and_keeps_order(open_store):
    path = "sub/jobs.sqlite"  # the directory is created
    with open_store(path) as store:
        for i in range(5):
            store.add(job(i), f"239.1.0.{i + 1}")
        store.delete("job-0")
        store.put_state("ids", {"groups": {"s1": {"job-1": 1}}})
    with open_store(path) as store:
        assert [s.job for s in store.jobs()] == [job(i) for i in range(1, 5)]
        assert [s.group_address for s in store.jobs()] == [f"239.1.0.{i + 1}" for i in range(1, 5)]
        assert store.get_state("ids") == {"groups": {"s1": {"job-1": 1}}}
        # sequence numbers are never reused, so creation order survives deletes
        new = store.add(job(0), "239.1.0.1")
        assert new.seq > max(s.seq for s in store.jobs()[:-1])
        assert store.jobs()[-1].job.id == "job-0"


def test_duplicates_are_refused_and_store_nothing(open_store):
    with open_store() as store:
        store.add(job(1), "239.1.0.1")
        with pytest.raises(DuplicateJobId):
            store.add(job(1, workers=("h9",)), "239.1.0.9")
        with pytest.raises(DuplicateGroupAddress):
            store.add(job(2), "239.1.0.1")
        assert [s.job for s in store.jobs()] == [job(1)]
        assert store.get("job-2") is None


def test_failed_insert_leaves_nothing(open_store):
    """A constraint that fails inside the transaction rolls the whole insert back,
    and the store stays usable."""
    with open_store() as store:
        with pytest.raises(ValueError):
            store.add(job(1, demand=-5.0), "239.1.0.1")  # CHECK (demand > 0)
        assert store.jobs() == []
        # the address was not taken by the failed insert
        store.add(job(2), "239.1.0.1")
        assert [s.job.id for s in store.jobs()] == ["job-2"]


def test_set_group_addresses_is_atomic(open_store):
    with open_store() as store:
        store.add(job(1), "239.1.0.1")
        store.add(job(2), "239.1.0.2")
        store.add(job(3), "239.1.0.3")
        store.set_group_addresses({"job-1": "239.1.0.2", "job-2": "239.1.0.1"})  # a swap
        assert [s.group_address for s in store.jobs()] == ["239.1.0.2", "239.1.0.1", "239.1.0.3"]
        with pytest.raises(DuplicateGroupAddress):
            store.set_group_addresses({"job-1": "239.1.0.9", "job-2": "239.1.0.3"})
        assert [s.group_address for s in store.jobs()] == ["239.1.0.2", "239.1.0.1", "239.1.0.3"]


def test_concurrent_adds_from_threads(open_store):
    with open_store() as store:
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


def test_the_job_key_is_kept_through_reopen_and_address_changes(open_store):
    key = bytes(range(32))
    with open_store() as store:
        store.add(job(1), "239.1.0.1", key)
        store.add(job(2), "239.1.0.2")  # no key (a job stored before keys existed)
        store.set_group_addresses({"job-1": "239.1.0.5"})
        assert "auth_key" not in repr(store.get("job-1")) and key.hex() not in repr(store.get("job-1"))
    with open_store() as store:
        assert {s.job.id: s.auth_key for s in store.jobs()} == {"job-1": key, "job-2": None}
        assert store.get("job-1").group_address == "239.1.0.5"


def test_a_version_1_file_is_migrated_and_keeps_its_jobs(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, ps TEXT NOT NULL,
                           workers TEXT NOT NULL, demand REAL NOT NULL CHECK (demand > 0),
                           weight REAL NOT NULL CHECK (weight > 0), group_address TEXT UNIQUE);
        CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO jobs (id, ps, workers, demand, weight, group_address)
            VALUES ('old', 'h0', '["h1", "h2"]', 1e9, 1.0, '239.1.0.1');
        PRAGMA user_version = 1;
    """)
    conn.close()
    with JobStore(path) as store:
        (old,) = store.jobs()
        assert (old.job, old.group_address, old.auth_key) == (Job("old", "h0", ("h1", "h2"), 1e9, 1.0), "239.1.0.1", None)
        store.add(job(5), "239.1.0.2", b"k" * 32)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    assert "auth_key" in [r[1] for r in conn.execute("PRAGMA table_info(jobs)")]
    conn.close()
    with JobStore(path) as store:
        assert {s.job.id: s.auth_key for s in store.jobs()} == {"old": None, "job-5": b"k" * 32}


# -- etcd only ----------------------------------------------------------------------------


def etcd_store(server, prefix):
    from controller.store.etcd import EtcdClient, EtcdJobStore

    return EtcdJobStore(EtcdClient([server.url]), prefix)


def test_etcd_unreachable_is_a_clear_error():
    from controller.store.etcd import EtcdClient, EtcdJobStore

    if etcd_helper.unavailable():
        pytest.skip(etcd_helper.unavailable())
    port = etcd_helper.free_port()  # nothing listens there
    with pytest.raises(StoreError, match="cannot open the job store.*no etcd endpoint answered"):
        EtcdJobStore(EtcdClient([f"http://127.0.0.1:{port}"], timeout=0.5), "/x/")


def test_etcd_second_endpoint_is_used_when_the_first_is_down(etcd_server):
    from controller.store.etcd import EtcdClient, EtcdJobStore

    dead = f"http://127.0.0.1:{etcd_helper.free_port()}"
    store = EtcdJobStore(EtcdClient([dead, etcd_server.url], timeout=0.5), f"/t-{uuid.uuid4().hex[:8]}/")
    store.add(job(1), "239.1.0.1")
    assert [s.job for s in store.jobs()] == [job(1)]


def test_etcd_two_instances_race_for_one_id_and_one_address(etcd_server):
    """Two store objects on the same prefix (two controller instances): of many
    concurrent adds of the same id, and of the same address under different ids,
    exactly one each succeeds."""
    prefix = f"/race-{uuid.uuid4().hex[:8]}/"
    stores = [etcd_store(etcd_server, prefix) for _ in range(2)]
    outcomes: list[str] = []
    lock = threading.Lock()

    def add(k: int, j: Job, address: str) -> None:
        try:
            stores[k % 2].add(j, address)
            result = "ok"
        except DuplicateJobId:
            result = "dup-id"
        except DuplicateGroupAddress:
            result = "dup-address"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=add, args=(k, job(1), f"239.1.0.{k + 1}")) for k in range(6)]
    threads += [threading.Thread(target=add, args=(k, job(0, id=f"other-{k}"), "239.1.9.9")) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 2, outcomes
    assert outcomes.count("dup-id") == 5 and outcomes.count("dup-address") == 5, outcomes
    ids = [s.job.id for s in stores[1].jobs()]
    assert ids.count("job-1") == 1 and sum(i.startswith("other-") for i in ids) == 1
    holder = stores[0].client.range(prefix + "addr/239.1.9.9")[0]
    assert [kv["value"] for kv in holder] == [i for i in ids if i.startswith("other-")]


def test_etcd_fence_refuses_the_writes_of_a_deposed_leader(etcd_server):
    from controller.store.etcd import Fenced, cmp_created, put

    prefix = f"/fence-{uuid.uuid4().hex[:8]}/"
    old, new = etcd_store(etcd_server, prefix), etcd_store(etcd_server, prefix)
    leader = prefix + "leader"
    ok, _, rev1 = old.client.txn([cmp_created(leader, 0)], [put(leader, "old")])
    assert ok
    old.fence(leader, rev1)
    old.add(job(1), "239.1.0.1")
    old.put_state("ids", {"a": 1})
    # the key is deleted (lease expired) and won by another instance
    old.client.post("kv/deleterange", {"key": __import__("base64").b64encode(leader.encode()).decode()})
    ok, _, rev2 = new.client.txn([cmp_created(leader, 0)], [put(leader, "new")])
    assert ok and rev2 > rev1
    new.fence(leader, rev2)
    for write in (lambda: old.add(job(2), "239.1.0.2"), lambda: old.put_state("ids", {"a": 2}),
                  lambda: old.delete("job-1"), lambda: old.set_group_addresses({"job-1": "239.1.0.7"})):
        with pytest.raises(Fenced):
            write()
    assert [(s.job.id, s.group_address) for s in new.jobs()] == [("job-1", "239.1.0.1")]
    assert new.get_state("ids") == {"a": 1}
    new.add(job(2), "239.1.0.2")
    assert new.delete("job-1") is True


def test_a_commit_that_fails_is_rolled_back_and_the_store_works_again(tmp_path):
    # another process keeps reading the file: the COMMIT cannot get its lock; the write is
    # refused as StoreUnavailable, rolled back, and the next write (the reader gone) succeeds
    import sqlite3

    from controller.store.base import StoreUnavailable

    path = tmp_path / "jobs.sqlite"
    store = JobStore(path, busy_timeout_s=0.2)
    store.add(job(0), "239.1.0.1")
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM jobs").fetchone() == (1,)  # a shared lock, held
    with pytest.raises(StoreUnavailable, match="busy"):
        store.add(job(1), "239.1.0.2")
    with pytest.raises(StoreUnavailable, match="busy"):
        store.delete("job-0")
    reader.execute("COMMIT")
    reader.close()
    assert [s.job.id for s in store.jobs()] == ["job-0"]  # nothing of the refused writes
    store.add(job(1), "239.1.0.2")
    assert store.delete("job-0")
    assert [s.job.id for s in store.jobs()] == ["job-1"]
    store.close()
    assert [s.job.id for s in JobStore(path).jobs()] == ["job-1"]


def test_state_pages_read_a_prefix_in_bounded_pages(open_store):
    """`state_page`: at most `limit` keys of the prefix, in key order, after a key;
    keys that share only part of the prefix, or sort just past it, are never given."""
    store = open_store()
    values = {f"served/j{i:03d}": {"n": i} for i in range(25)}
    store.put_states({**values, "served": 1, "served_network": "x", "serveda": 2, "server/j": 3, "served0": 4})
    pages, after = [], None
    while True:
        page = store.state_page("served/", after, 10)
        assert len(page) <= 10
        pages.append(page)
        if len(page) < 10:
            break
        after = page[-1][0]
    assert [len(p) for p in pages] == [10, 10, 5]
    assert [kv for p in pages for kv in p] == sorted(values.items())
    assert store.state_page("served/", "served/j009", 2) == [("served/j010", {"n": 10}), ("served/j011", {"n": 11})]
    assert store.state_page("served/", "a", 1) == [("served/j000", {"n": 0})]  # `after` before the prefix: from the first
    assert store.state_page("served/", "served/z", 5) == []
    with pytest.raises(ValueError):
        store.state_page("served/", None, 0)
    store.close()


def test_a_state_value_too_long_is_not_decoded_in_a_page(open_store):
    from controller.store.base import MAX_STATE_BYTES

    store = open_store()
    store.put_states({"p/long": "x" * (MAX_STATE_BYTES + 1), "p/text": "plain", "p/zjson": [1]})
    assert store.state_page("p/", None, 10) == [("p/long", ""), ("p/text", "plain"), ("p/zjson", [1])]
    store.close()
