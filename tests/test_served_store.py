"""A restart or a takeover keeps every admitted job's structure (issue 25,
`core.served_store`): the served structures are stored after each plan, the first
plan restores them; hostile or stale records are dropped and their jobs admitted
afresh, never a crash. Both stores (SQLite, and etcd where it is installed)."""

from __future__ import annotations

import logging
import random
import sys
import uuid
from pathlib import Path

import pytest

from controller import planner
from controller.algorithm.model import Instance
from controller.algorithm.validate import plan_violations
from controller.config import build_topology, config_from_dict
from controller.core.served_store import NETWORK_KEY, SERVED_PREFIX
from controller.core.service import ControllerService
from controller.store.sqlite import JobStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_store import etcd_server  # noqa: E402,F401 - the module's private etcd (skipped where it is missing)

CONFIG = {"topology": {"fattree": {"k": 4}, "group_capacity": 2},
          "planner": {"incremental": True, "link_hold_down_s": 0, "debounce_s": 0.05, "wait_s": 10.0}}


@pytest.fixture(params=["sqlite", "etcd"])
def open_store(request, tmp_path):
    """open_store(): the test's store, opened again (another process's view) on each call."""
    if request.param == "sqlite":
        return lambda: JobStore(tmp_path / "jobs.sqlite")
    from controller.store.etcd import EtcdClient, EtcdJobStore

    server = request.getfixturevalue("etcd_server")
    prefix = f"/served-{uuid.uuid4().hex[:8]}/"
    return lambda: EtcdJobStore(EtcdClient([server.url]), prefix)


def service(store, max_jobs: int | None = None, **planner_settings) -> ControllerService:
    settings = {**CONFIG, "planner": {**CONFIG["planner"], **planner_settings}}
    if max_jobs is not None:
        settings["api"] = {"limits": {"max_jobs": max_jobs}}
    config = config_from_dict(settings)
    return ControllerService(config, build_topology(config), store=store)


def admit(svc: ControllerService, n: int = 8, seed: int = 1) -> None:
    """`n` jobs of 3 workers each, admitted one by one (incremental plans)."""
    rng = random.Random(seed)
    for i in range(n):
        hosts = rng.sample([f"host-{h}" for h in range(16)], 4)
        svc.add_job(hosts[0], hosts[1:], 1e9, job_id=f"j{i}", wait=False)
        assert svc.planning.replan().plan.algorithm == "incremental"


def structures(svc: ControllerService) -> dict:
    return {jp.job.id: jp.structure.key for jp in svc.served.current.plan.jobs}


def full_plan_moves(svc: ControllerService, before: dict) -> int:
    """How many jobs a plan from scratch of the same jobs would move (what a restart did before)."""
    served = svc.served.current
    full = planner.run(Instance(served.inputs.network.topo, tuple(jp.job for jp in served.inputs.plan.jobs)),
                       "lp-rounding", "max-concurrent", 0)
    return sum(before[jp.job.id] != jp.structure.key for jp in full.jobs)


def test_a_restart_keeps_every_structure(open_store):
    first = service(open_store())
    first.planning.replan()
    admit(first)
    before = structures(first)
    plan_before = first.served.current.plan
    first.store.close()
    again = service(open_store())
    update = again.planning.replan()
    assert structures(again) == before  # no job moved
    assert [jp.rate for jp in update.plan.jobs] == [jp.rate for jp in plan_before.jobs]
    assert "0 placed, 8 kept" in update.plan.notes[0] and again.stats().churn_jobs == 0
    # without the restore this test fails: a plan from scratch moves jobs here
    assert full_plan_moves(again, before) > 0
    # a change of the network that leaves the planning topology as it was (switches connecting
    # and reporting limits that change no budget, after a restart) moves no job either
    again.changes.mark()
    assert again.planning.replan().plan.algorithm == "incremental" and structures(again) == before
    # the restored plan is admitted into: a new job moves nobody
    again.add_job("host-0", ["host-5", "host-10"], 1e9, job_id="late", wait=False)
    again.planning.replan()
    assert {j: s for j, s in structures(again).items() if j != "late"} == before
    again.store.close()


def test_a_takeover_keeps_every_structure(open_store):
    """Two instances on one store: the follower reloads and leads (`reload_from_store`,
    as `app.cluster` does), and its first plan moves no job."""
    leader, follower = service(open_store()), service(open_store())
    leader.planning.replan()
    follower.planning.replan()  # the follower once led (its own, older plan), then followed
    admit(leader)
    before = structures(leader)
    follower.reload_from_store(leading=False)
    follower.reload_from_store(leading=True)
    update = follower.planning.replan()
    assert update.plan.algorithm == "incremental" and structures(follower) == before
    assert full_plan_moves(follower, before) > 0
    # the new leader writes only what changes: one admission, one record
    follower.add_job("host-0", ["host-5"], 1e9, job_id="late", wait=False)
    follower.planning.replan()
    assert set(follower.store.state_items(SERVED_PREFIX)) == {SERVED_PREFIX + j for j in [*before, "late"]}
    leader.store.close()
    follower.store.close()


def test_writes_only_what_changed():
    store = JobStore(":memory:")
    svc = service(store)
    svc.planning.replan()  # no jobs: the network's digest only
    assert store.get_state(NETWORK_KEY) is not None and store.state_items(SERVED_PREFIX) == {}
    written = []
    put = store.put_states
    store.put_states = lambda values: (written.append(sorted(values)), put(values))  # type: ignore[method-assign]
    admit(svc, 3)
    assert written == [[SERVED_PREFIX + "j0"], [SERVED_PREFIX + "j1"], [SERVED_PREFIX + "j2"]]
    before = structures(svc)
    svc.planning.replan()  # nothing pending: a full plan; only the jobs it moved are written
    moved = sorted(SERVED_PREFIX + j for j, s in structures(svc).items() if s != before[j])
    assert written[3:] == ([moved] if moved else [])
    del written[3:]
    svc.delete_job("j1", wait=False)
    svc.planning.replan()
    assert written[3:] == [[SERVED_PREFIX + "j1"]] and store.get_state(SERVED_PREFIX + "j1") is None


def test_incremental_off_stores_but_plans_in_full(tmp_path):
    path = tmp_path / "jobs.sqlite"
    svc = service(JobStore(path), incremental=False)
    svc.planning.replan()
    svc.add_job("host-0", ["host-5"], 1e9, job_id="a", wait=False)
    assert svc.planning.replan().plan.algorithm == "lp-rounding"
    assert set(svc.store.state_items(SERVED_PREFIX)) == {SERVED_PREFIX + "a"}  # current if it is turned on
    svc.store.close()
    again = service(JobStore(path), incremental=False)
    assert again.planning.replan().plan.algorithm == "lp-rounding"  # a full plan, nothing restored
    again.store.close()


def tree_record(ps, workers, tree, branches=(), mode="multicast"):
    return {"ps": ps, "workers": list(workers), "mode": mode, "tree": [list(p) for p in tree],
            "branches": [list(b) for b in branches]}


# host-0 -> edge-0-0 -> {host-1, agg-0-0 -> edge-0-1 -> {host-2, host-3}}: groups at both edge switches
TREE = [("host-0", "edge-0-0"), ("edge-0-0", "host-1"), ("edge-0-0", "agg-0-0"), ("agg-0-0", "edge-0-1"),
        ("edge-0-1", "host-2"), ("edge-0-1", "host-3")]
MEMBERS = ("host-0", ("host-1", "host-2", "host-3"))


def test_hostile_records_are_dropped_and_their_jobs_admitted_afresh(open_store, caplog):
    first = service(open_store())
    first.planning.replan()
    ps, workers = MEMBERS
    ids = ["ok", "types", "pairs", "unknown", "nolink", "members", "parents", "cycle", "twice", "mode", "text",
           "over1", "over2", "over3", "over4"]
    for jid in ids:
        first.add_job(ps, workers, 1e9, job_id=jid, wait=False)
    first.planning.replan()
    store = first.store
    bad_tree = [("host-0", "edge-0-0"), ("edge-0-0", "host-1"), ("edge-0-0", "agg-0-0"), ("agg-0-0", "edge-0-1"),
                ("edge-0-1", "host-2"), ("edge-0-1", "host-3"), ("edge-0-1", "agg-0-0")]
    records = {
        "ok": tree_record(ps, workers, TREE),
        "types": {"ps": ps, "workers": list(workers), "mode": "multicast", "tree": "edge-0-0", "branches": 5},
        "pairs": tree_record(ps, workers, [(1, 2)]),
        "unknown": tree_record(ps, workers, [("host-0", "switch-x"), ("switch-x", "host-1")]),
        "nolink": tree_record(ps, workers, [("host-0", "core-0"), ("core-0", "host-1")]),
        "members": tree_record("host-9", workers, TREE),
        "parents": tree_record(ps, workers, bad_tree),
        "cycle": tree_record(ps, workers, [*TREE, ("agg-1-0", "edge-1-0"), ("edge-1-0", "agg-1-0")]),
        "twice": tree_record(ps, workers, TREE, [("host-0", "host-1")], "hybrid"),
        "mode": tree_record(ps, workers, TREE, mode="unicast"),
        "text": ["not", "an", "object"],
        # with "ok", five jobs replicating at edge-0-0 and edge-0-1 (group budget 2): three too many
        **{f"over{i}": tree_record(ps, workers, TREE) for i in range(1, 5)},
        "gone": tree_record(ps, workers, TREE),  # no such job
    }
    store.put_states({SERVED_PREFIX + j: r for j, r in records.items()})
    store.close()
    again = service(open_store())
    with caplog.at_level(logging.INFO, logger="controller.core.served_store"):
        update = again.planning.replan()
    plan = update.plan
    assert plan_violations(Instance(update.inputs.network.topo, tuple(jp.job for jp in plan.jobs)), plan) == []
    assert sorted(jp.job.id for jp in plan.jobs) == sorted(ids)
    # kept: the valid one and the first over-budget ones that fit (in job order); the rest admitted afresh
    assert plan.notes[0].startswith("incremental: 13 placed, 2 kept")
    want = again.served.current.inputs.network.topo
    name = want.name
    got = {jp.job.id: sorted((name(a), name(b)) for a, b in jp.structure.tree) for jp in plan.jobs}
    assert got["ok"] == got["over1"] == sorted(TREE)
    text = caplog.text
    for why in ("expected a list", "expected pairs of node names", "no node 'switch-x'", "no link host-0 -> core-0",
                "PS or workers", "two parents", "not an arborescence", "exactly once", "mode 'unicast'", "expected an object",
                "switch edge-0-0: 5 groups > capacity 2", "over2, over3, over4", "'gone'"):
        assert why in text, why
    # the records are rewritten with what is served now; the gone job's record is deleted
    stored = again.store.state_items(SERVED_PREFIX)
    assert set(stored) == {SERVED_PREFIX + j for j in ids}
    again.store.close()


def test_records_of_another_network_give_a_full_plan(open_store):
    first = service(open_store())
    first.planning.replan()
    admit(first, 3)
    first.store.put_state(NETWORK_KEY, "0" * 64)
    first.store.close()
    again = service(open_store())
    assert again.planning.replan().plan.algorithm == "lp-rounding"
    again.store.close()


def test_a_store_that_fails_at_restore_gives_a_full_plan():
    store = JobStore(":memory:")
    svc = service(store)
    svc.planning.replan()
    admit(svc, 2)
    svc.planning.restore_next()

    def broken(prefix, after, limit):
        raise RuntimeError("the disk is gone")

    store.state_page = broken  # type: ignore[method-assign]
    assert svc.planning.replan().plan.algorithm == "lp-rounding"


def test_etcd_writes_many_records_in_bounded_transactions(etcd_server):
    """A full plan of thousands of jobs writes within etcd's default limits
    (`--max-txn-ops` 128, `--max-request-bytes` 1.5 MiB)."""
    from controller.store.etcd import TXN_BYTES, TXN_OPS, EtcdClient, EtcdJobStore

    store = EtcdJobStore(EtcdClient([etcd_server.url]), f"/served-{uuid.uuid4().hex[:8]}/")
    sizes = []
    txn = store.client.txn

    def counted(compare, success, failure=None):
        sizes.append((len(success), sum(len(str(op)) for op in success)))
        return txn(compare, success, failure)

    store.client.txn = counted  # type: ignore[method-assign]
    record = tree_record(*MEMBERS, TREE)
    big = {"ps": "host-0", "workers": ["w" * 200] * 1000}  # ~200 kB: a few per transaction
    values = {f"{SERVED_PREFIX}j{i}": record for i in range(300)}
    values.update({f"{SERVED_PREFIX}big{i}": big for i in range(6)})
    store.put_states(values)
    assert len(sizes) > 300 // TXN_OPS and max(n for n, _ in sizes) <= TXN_OPS <= 128
    assert max(b for _, b in sizes) < 1.5 * 2**20 and TXN_BYTES < 2**20
    assert store.state_items(SERVED_PREFIX) == values
    store.put_states({key: None for key in values})
    assert store.state_items(SERVED_PREFIX) == {}


@pytest.mark.parametrize("garbage_first", [False, True])
def test_restore_reads_at_most_max_jobs_records_in_pages(open_store, garbage_first, caplog):
    """A store with far more `served/` keys than jobs (garbage, or another writer's)
    is read in pages and at most `api.limits.max_jobs` records in all: never all of
    them. Records read of jobs that do not exist are deleted by the next save;
    records past the cap are not read, and their jobs are admitted afresh."""
    from controller.core.served_store import PAGE_RECORDS

    most = 20
    first = service(open_store(), max_jobs=most)
    first.planning.replan()
    admit(first)
    before = structures(first)
    prefix = "a" if garbage_first else "z"  # job ids are j0..j7: garbage keys sort before or after them
    record = tree_record(*MEMBERS, TREE)
    first.store.put_states({f"{SERVED_PREFIX}{prefix}{i:04d}": record for i in range(10 * PAGE_RECORDS)})
    first.store.close()
    store = open_store()
    pages = []
    page = store.state_page
    store.state_page = lambda prefix, after, limit: (pages.append(limit), page(prefix, after, limit))[1]  # type: ignore[method-assign]
    again = service(store, max_jobs=most)
    with caplog.at_level(logging.INFO, logger="controller.core.served_store"):
        update = again.planning.replan()
    read = sum(pages[:-1])  # the last call only asks whether more are stored
    assert read <= most and max(pages) <= PAGE_RECORDS, pages  # without the cap: 10 pages and more
    assert f"more than {most} served structures are stored" in caplog.text
    if garbage_first:  # the jobs' records were not read: nothing valid, a full plan
        assert update.plan.algorithm == "lp-rounding"
        deleted = most
    else:  # every job's record comes first: all kept, nobody moved
        assert structures(again) == before and "0 placed, 8 kept" in update.plan.notes[0]
        deleted = most - len(before)
    assert f"{deleted} stored structures dropped: no such job to plan" in caplog.text
    # the garbage records read are deleted: the next restart reads further
    left = again.store.state_items(SERVED_PREFIX)
    assert len(left) == len(before) + 10 * PAGE_RECORDS - deleted
    assert set(before) <= {k[len(SERVED_PREFIX):] for k in left}
    again.store.close()
