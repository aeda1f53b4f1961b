"""A job the planner fails with leaves the plan (issue 23, core.culprits): it becomes
failed with the planner's error, its group address goes back to the pool (and the
store), the other jobs keep being planned, and a restart does not plan it again.
A job failed by the host timeout releases its address too."""

from __future__ import annotations

import time

import pytest

from controller import planner
from controller.config import build_topology, config_from_dict
from controller.core import culprits
from controller.core.jobs import FAILED_STATE_KEY
from controller.core.service import ControllerService
from controller.southbound.openflow.manager import OpenFlowManager
from controller.store.sqlite import JobStore

POISON = "poison"  # a job with this marker in its id makes the planner fail
ERROR = "Model error: the solver cannot take this instance"


def poisoned(real):
    """`real` (a planner function), failing when a marked job is in its instance."""
    calls = []

    def run(instance, *args, **kwargs):
        calls.append(tuple(j.id for j in instance.jobs))
        if any(POISON in j.id for j in instance.jobs):
            raise RuntimeError(ERROR)
        return real(instance, *args, **kwargs)

    run.calls = calls
    return run


@pytest.fixture
def poison(monkeypatch):
    full, admit = poisoned(planner.run), poisoned(planner.run_incremental)
    monkeypatch.setattr(planner, "run", full)
    monkeypatch.setattr(planner, "run_incremental", admit)
    return full, admit


def make(path, *, incremental=True):
    config = config_from_dict({
        "topology": {"fattree": {"k": 4}, "group_capacity": 2, "entry_capacity": 6},
        "planner": {"debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 10.0, "incremental": incremental},
    })
    service = ControllerService(config, build_topology(config), store=JobStore(path))
    service.openflow = OpenFlowManager(service).attach()
    return service


def add(service, i, job_id, demand=1e9):
    return service.add_job(f"host-{i}", [f"host-{(i + k) % 16}" for k in (1, 4, 9)], demand, job_id=job_id)


def rates(service):
    return {s.job.id: s.planned.rate for s in service.jobs.statuses() if s.planned is not None}


@pytest.mark.parametrize("incremental", [True, False])
def test_the_culprit_fails_its_address_is_released_and_the_others_are_planned(tmp_path, poison, incremental):
    service = make(tmp_path / "jobs.sqlite", incremental=incremental)
    service.start()
    try:
        for i in range(3):
            add(service, i, f"ok-{i}")
        before = rates(service)
        assert set(before) == {"ok-0", "ok-1", "ok-2"}
        stored = []
        store_add = service.store.add
        service.store.add = lambda *a, **kw: stored.append(store_add(*a, **kw)) or stored[-1]
        status = add(service, 3, f"{POISON}-3")
        address = stored[0].group_address
        assert address is not None  # held while registered, until the plan without it
        assert status == service.jobs.status(f"{POISON}-3")  # add_job's answer: the plan without it
        assert status.error is not None and ERROR in status.error and status.planned is None
        assert status.group_address is None  # released: in the registry, the pool and the store
        assert service.store.get(f"{POISON}-3").group_address is None
        assert f"{POISON}-3" not in service.jobs._pool
        stats = service.stats()
        assert stats.last_error is None and stats.planner_failed_jobs == 1 and stats.generation >= 4
        after = rates(service)
        assert set(after) == set(before) and all(after[j] >= before[j] - 1e-6 for j in before)
        # the next ordinary job is planned within 1 s, and gets the released address (lowest free first)
        t0 = time.monotonic()
        nxt = add(service, 5, "next")
        elapsed = time.monotonic() - t0
        assert nxt.planned is not None and elapsed < 1.0, elapsed
        assert nxt.group_address == address
        assert service.jobs.status(f"{POISON}-3").error is not None
    finally:
        service.close()


def test_a_failed_job_is_not_planned_again_in_later_rounds(tmp_path, poison):
    service = make(tmp_path / "jobs.sqlite")
    service.start()
    try:
        add(service, 0, "ok-0")
        add(service, 3, f"{POISON}-3")
        n = len(poison[0].calls) + len(poison[1].calls)
        add(service, 5, "next")
        service.delete_job("ok-0")
        service.planning.replan()
        tried = (poison[0].calls + poison[1].calls)[n:] if n else []
        assert tried and not [c for c in tried if f"{POISON}-3" in c]
    finally:
        service.close()


def test_several_culprits_and_good_jobs_in_one_round(tmp_path, poison):
    service = make(tmp_path / "jobs.sqlite", incremental=False)
    for i, job_id in enumerate(["a", f"{POISON}-1", "b", "c", f"{POISON}-2", "d"]):
        service.add_job(f"host-{i}", [f"host-{(i + k) % 16}" for k in (1, 4, 9)], 1e9, job_id=job_id, wait=False)
    assert service.planning.replan() is not None  # no worker: one round for all six
    assert service.planning.pending  # one culprit found per round: the rest is left for the next
    assert service.jobs.status(f"{POISON}-1").error is not None and service.jobs.status("a").planned is not None
    assert service.jobs.status(f"{POISON}-2").error is None and service.jobs.status("d").planned is None
    service.planning.replan()
    assert not service.planning.pending
    statuses = {s.job.id: s for s in service.jobs.statuses()}
    assert {j for j, s in statuses.items() if s.error is not None} == {f"{POISON}-1", f"{POISON}-2"}
    assert {j for j, s in statuses.items() if s.planned is not None} == {"a", "b", "c", "d"}
    assert service.stats().planner_failed_jobs == 2


def test_a_restart_does_not_plan_a_known_bad_job_again(tmp_path, poison):
    path = tmp_path / "jobs.sqlite"
    service = make(path)
    service.start()
    add(service, 0, "ok-0")
    add(service, 3, f"{POISON}-3")
    reason = service.jobs.status(f"{POISON}-3").error
    service.close()
    assert service.store.get_state(FAILED_STATE_KEY) == {f"{POISON}-3": reason}
    n = len(poison[0].calls) + len(poison[1].calls)
    again = make(path)
    again.start()
    try:
        status = again.jobs.status(f"{POISON}-3")
        assert status.error == reason and status.group_address is None and status.planned is None
        assert again.jobs.status("ok-0").planned is not None and again.stats().last_error is None
        assert not [c for c in (poison[0].calls + poison[1].calls)[n:] if f"{POISON}-3" in c]
        again.delete_job(f"{POISON}-3")  # the owner deletes it: the failure is forgotten
        assert again.store.get_state(FAILED_STATE_KEY) == {}
    finally:
        again.close()


def test_a_failure_with_no_changed_job_keeps_the_served_plan(tmp_path, monkeypatch):
    service = make(tmp_path / "jobs.sqlite", incremental=False)
    add(service, 0, "ok-0")
    assert service.planning.replan() is not None
    generation = service.stats().generation

    def broken(*args, **kwargs):
        raise RuntimeError("the topology is broken")

    monkeypatch.setattr(planner, "run", broken)
    service.changes.mark()  # a network change: a full plan of the same, unchanged jobs
    assert service.planning.replan() is None
    stats = service.stats()
    assert stats.generation == generation and "the topology is broken" in stats.last_error
    assert service.jobs.status("ok-0").error is None and service.jobs.status("ok-0").planned is not None


def test_isolate_is_bounded_by_log_n_calls():
    from controller.algorithm.model import Job

    jobs = tuple(Job(f"j{i}", "a", ("b",), 1.0, 1.0) for i in range(64))
    bad = {"j17"}
    calls = []

    def attempt(js):
        calls.append(len(js))
        if any(j.id in bad for j in js):
            raise ValueError("no")
        return len(js)

    found = culprits.isolate(jobs, {j.id for j in jobs[8:]}, attempt, ValueError("no"))
    assert found is not None and set(found.culprits) == bad and found.left_out == ()
    assert {j.id for j in found.jobs} == {j.id for j in jobs} - bad and found.made == 63
    assert found.calls == len(calls) <= culprits.max_calls(56) == 8
    assert culprits.isolate(jobs, set(), attempt, ValueError("no")) is None  # no suspect: not contained


def test_a_host_timeout_failed_job_releases_its_address(tmp_path):
    class Clock:
        t = 1000.0

        def __call__(self):
            return self.t

    clock = Clock()
    config = config_from_dict({
        "planner": {"debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 0.01, "link_hold_down_s": 0},
        "discovery": {"host_timeout_s": 30},
        "hosts": {"ps": {"ip": "10.1.0.1"}},
    })
    service = ControllerService(config, None, clock, store=JobStore(tmp_path / "jobs.sqlite"))
    service.openflow = OpenFlowManager(service).attach()
    for s in ("of:000000000000000a", "of:000000000000000b"):
        service.devices.connected(s)
    service.wiring.learn_link("of:000000000000000a", 1, "of:000000000000000b", 2)
    service.hosts.learn("10.1.0.1", "02:00:00:00:01:01", "of:000000000000000a", 5)
    service.hosts.learn("10.1.0.2", "02:00:00:00:01:02", "of:000000000000000b", 6)
    service.add_job("ps", ["10.1.0.2", "10.9.9.9"], 1e9, job_id="ghost", wait=False)
    service.planning.replan()
    address = service.jobs.status("ghost").group_address
    assert address is not None
    clock.t += 31
    assert service.jobs.status("ghost").error is not None  # failed: a change is marked for its release
    assert service.planning.replan() is not None
    status = service.jobs.status("ghost")
    assert status.group_address is None and service.store.get("ghost").group_address is None
    assert "ghost" not in service.jobs._pool
    ok = service.add_job("ps", ["10.1.0.2"], 1e9, job_id="ok", wait=False)
    assert ok.group_address == address  # the released address is handed out again
    service.planning.replan()
    assert service.jobs.status("ok").planned is not None
