"""Demands the fabric can carry (issue 23): a registration's demand and weight have
ceilings (`api.max_demand`, `api.max_weight`: 422 naming the field), and a demand
above what the PS's access link carries is planned as that link's payload capacity (its capacity less
the headers the meters count, `wire.payload_capacity`)
(`planning.effective_jobs`), so no single registration, whatever its numbers,
stops planning or takes more from the other jobs than one asking for exactly
what its host can send."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.algorithm.model import Job
from controller.algorithm.wire import payload_capacity
from controller.config import build_topology, config_from_dict
from controller.core.errors import InvalidJob
from controller.core.planning import effective_jobs
from controller.core.service import ControllerService
from controller.store.sqlite import JobStore

LINK = 1e9  # every link of the fat-tree below
# jobs that contend with each other and with the hostile one (from host-0) for links and groups:
# without the cap, a hostile demand of 10 x LINK already cuts two of them from 444 to 74 Mbit/s
ORDINARY = [("host-1", ["host-4", "host-9", "host-13"], 0.9e9), ("host-2", ["host-5", "host-12", "host-14"], 0.8e9),
            ("host-3", ["host-7", "host-8"], 0.9e9), ("host-6", ["host-10", "host-11"], 0.7e9)]


def service(objective: str = "max-concurrent", store: JobStore | None = None) -> ControllerService:
    config = config_from_dict({
        "topology": {"fattree": {"k": 4, "capacity": LINK}, "group_capacity": 1},
        "planner": {"debounce_s": 0, "max_delay_s": 0, "wait_s": 0.01, "objective": objective, "seed": 7},
    })
    return ControllerService(config, build_topology(config), lambda: 1000.0, store=store or JobStore(":memory:"))


def with_jobs(svc: ControllerService, hostile: tuple[float, float] | None) -> dict[str, float]:
    """Plan the ordinary jobs and (if given) a hostile one (demand, weight) from host-0;
    the planned rate of every ordinary job."""
    for i, (ps, workers, demand) in enumerate(ORDINARY):
        svc.add_job(ps, workers, demand, job_id=f"ok-{i}", wait=False)
    if hostile is not None:
        svc.add_job("host-0", ["host-5", "host-10", "host-15"], hostile[0], hostile[1], job_id="hostile", wait=False)
    update = svc.planning.replan()
    assert update is not None and svc.planning.counters.last_error is None
    return {jp.job.id: jp.rate for jp in update.plan.jobs if jp.job.id.startswith("ok-")}


@pytest.mark.parametrize("demand, weight, code, field", [
    (1e300, 1.0, "demand_too_large", "demand"),
    (1e25, 1.0, "demand_too_large", "demand"),
    (1e12 * 1.0001, 1.0, "demand_too_large", "demand"),
    (1e9, 1e30, "weight_too_large", "weight"),
    (1e9, 1000.5, "weight_too_large", "weight"),
])
def test_a_demand_or_weight_beyond_its_ceiling_is_refused_and_changes_nothing(demand, weight, code, field):
    svc = service()
    with pytest.raises(InvalidJob) as e:
        svc.add_job("host-0", ["host-5"], demand, weight, job_id="big", wait=False)
    assert (e.value.code, e.value.field) == (code, field)
    assert "api.max_" in e.value.message
    assert svc.jobs.statuses() == []


def test_the_ceilings_are_configurable_and_checked():
    config = config_from_dict({"topology": {"fattree": {"k": 4}}, "api": {"max_demand": 5e9, "max_weight": 2}})
    svc = ControllerService(config, build_topology(config), lambda: 1000.0, store=JobStore(":memory:"))
    svc.add_job("host-0", ["host-5"], 5e9, 2, job_id="at-the-ceiling", wait=False)
    with pytest.raises(InvalidJob, match=r"api\.max_demand \(5e\+09"):
        svc.add_job("host-0", ["host-6"], 5.1e9, job_id="above", wait=False)
    from controller.config.strict import ConfigError

    with pytest.raises(ConfigError, match=r"api\.max_demand: must be at most"):
        config_from_dict({"api": {"max_demand": 1e300}})
    with pytest.raises(ConfigError, match=r"api\.max_weight"):
        config_from_dict({"api": {"max_weight": -1}})


def test_a_demand_above_the_ps_link_is_planned_as_that_link():
    svc = service()
    svc.add_job("host-0", ["host-5", "host-10"], 1e12, job_id="greedy", wait=False)
    update = svc.planning.replan()
    (jp,) = update.plan.jobs
    # the link's payload: its capacity less the headers the meters count (1440 of every 1514 bytes)
    assert jp.job.demand == pytest.approx(payload_capacity(LINK)) and jp.rate <= payload_capacity(LINK) * (1 + 1e-12)
    status = svc.jobs.status("greedy")
    assert status.job.demand == 1e12  # what was asked is kept and shown
    assert status.planned is not None and status.planned.job.demand == pytest.approx(payload_capacity(LINK))


def test_effective_jobs_caps_only_what_the_link_cannot_carry():
    topo = build_topology(config_from_dict({"topology": {"fattree": {"k": 4, "capacity": LINK}}}))
    jobs = (Job("a", "host-0", ("host-1",), 0.3e9), Job("b", "host-0", ("host-1",), 3e12), Job("c", "ghost", ("x",), 1e20))
    assert effective_jobs(jobs, topo) == (jobs[0], Job("b", "host-0", ("host-1",), LINK), jobs[2])


def test_a_stored_job_above_todays_ceiling_is_kept_and_planned_as_its_link(tmp_path):
    # stored before the ceiling existed (or before it was lowered): the controller still starts
    store = JobStore(tmp_path / "jobs.sqlite")
    store.add(Job("old", "host-0", ("host-5",), 1e300), "239.1.0.1")
    svc = service(store=store)
    update = svc.planning.replan()
    assert svc.planning.counters.last_error is None
    assert [jp.job.demand for jp in update.plan.jobs] == [pytest.approx(payload_capacity(LINK))]
    assert svc.jobs.status("old").planned is not None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(demand=st.floats(1.0, 1e12), weight=st.floats(1e-3, 1000.0),
       objective=st.sampled_from(["max-concurrent", "max-sum"]))
def test_no_registration_stops_planning_or_takes_more_than_its_link_allows(demand, weight, objective):
    hostile = with_jobs(service(objective), (demand, weight))
    capped = with_jobs(service(objective), (min(demand, LINK), weight))
    assert hostile == capped
