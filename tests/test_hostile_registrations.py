"""Hostile registrations over the REST API (issue 23): absurd demands and weights
are refused with a 422 naming the field, or contained (a job the planner fails
with becomes failed, its address released); after each, an ordinary job
registered next is planned within 1 s and no earlier job's rate is lowered:
every rate is the one of the same registrations without the hostile one."""

from __future__ import annotations

import time
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient warns about httpx
    from fastapi.testclient import TestClient

from controller import planner
from controller.config import build_topology, config_from_dict
from controller.core.service import ControllerService
from controller.northbound.api import create_app
from controller.southbound.openflow.manager import OpenFlowManager
from controller.store.sqlite import JobStore

LINK = 1e9
# earlier jobs that contend with each other and with the hostile one (from host-0) for links and groups
EARLIER = [("host-1", ["host-4", "host-9", "host-13"], 0.9e9), ("host-2", ["host-5", "host-12", "host-14"], 0.8e9),
           ("host-3", ["host-7", "host-8"], 0.9e9)]
NEXT = ("host-6", ["host-10", "host-11", "host-0"], 0.7e9)
HOSTILE = '{"id": "hostile", "ps": "host-0", "workers": ["host-5", "host-10", "host-15"], "demand": %s, "weight": %s}'
POISON = "poison"  # with this id, the planner fails (the containment case)


def make_service(path) -> ControllerService:
    config = config_from_dict({
        "topology": {"fattree": {"k": 4, "capacity": LINK}, "group_capacity": 1},
        "planner": {"debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 10.0, "seed": 7},
    })
    service = ControllerService(config, build_topology(config), store=JobStore(path))
    service.openflow = OpenFlowManager(service).attach()
    service.start()
    return service


def body(i: int, spec: tuple) -> dict:
    ps, workers, demand = spec
    return {"id": f"job-{i}", "ps": ps, "workers": workers, "demand": demand}


def rates(client) -> dict[str, float]:
    return {j["id"]: j["rate"] for j in client.get("/jobs").json()["jobs"] if j["state"] == "planned"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, float]:
    """The rates of the earlier jobs and the next one, registered without any hostile one."""
    service = make_service(tmp_path_factory.mktemp("reference") / "jobs.sqlite")
    try:
        with TestClient(create_app(service, service.config), base_url="http://127.0.0.1") as client:
            for i, spec in enumerate([*EARLIER, NEXT]):
                assert client.post("/jobs", json=body(i, spec)).status_code == 201
            return rates(client)
    finally:
        service.close()


@pytest.fixture
def client(tmp_path, monkeypatch):
    def poisoned(real):
        def run(instance, *args, **kwargs):  # the planner fails on a job named POISON
            if any(j.id == POISON for j in instance.jobs):
                raise RuntimeError("Model error: infeasible bounds")
            return real(instance, *args, **kwargs)

        return run

    # the full planner and admission (planner.incremental, the default) alike
    monkeypatch.setattr(planner, "run", poisoned(planner.run))
    monkeypatch.setattr(planner, "run_incremental", poisoned(planner.run_incremental))
    service = make_service(tmp_path / "jobs.sqlite")
    try:
        with TestClient(create_app(service, service.config), base_url="http://127.0.0.1") as c:
            yield c
    finally:
        service.close()


REFUSED = [
    ("1e300", "1", "demand", "demand_too_large"),
    ("1e25", "1", "demand", "demand_too_large"),
    ("NaN", "1", "demand", None),
    ("Infinity", "1", "demand", None),
    ("-Infinity", "1", "demand", None),
    ("1e999", "1", "demand", None),  # inf once parsed
    ("1e9", "NaN", "weight", None),
    ("1e9", "1e999", "weight", None),
    ("1e9", "1e30", "weight", "weight_too_large"),
    ("-1e9", "1", "demand", None),
    ("0", "1", "demand", None),
    ("1e9", "-1", "weight", None),
    ("1e9", "0", "weight", None),
    ("1e-320", "1", "demand", None),  # a subnormal: positive, accepted or refused, never breaking the plan
]


def register_earlier(client) -> dict[str, float]:
    for i, spec in enumerate(EARLIER):
        assert client.post("/jobs", json=body(i, spec)).status_code == 201
    before = rates(client)
    assert set(before) == {f"job-{i}" for i in range(len(EARLIER))}
    return before


def register_next_within_1s(client) -> None:
    t0 = time.monotonic()
    answer = client.post("/jobs", json=body(len(EARLIER), NEXT))
    elapsed = time.monotonic() - t0
    assert answer.status_code == 201 and answer.json()["state"] == "planned", answer.text
    assert elapsed < 1.0, f"the next job took {elapsed:.2f} s to be planned"


def assert_no_rate_lowered(now: dict[str, float], before: dict[str, float]) -> None:
    for job, rate in before.items():
        assert now[job] >= rate * (1 - 1e-9), (job, now[job], rate)


@pytest.mark.parametrize("demand, weight, field, code", REFUSED)
def test_a_hostile_registration_is_refused_or_contained(client, reference, demand, weight, field, code):
    before = register_earlier(client)
    answer = client.post("/jobs", content=HOSTILE % (demand, weight), headers={"content-type": "application/json"})
    if answer.status_code == 422:
        error = answer.json()["error"]
        assert error["field"] == field, error
        assert code is None or error["code"] == code, error
        assert [j["id"] for j in client.get("/jobs").json()["jobs"]] == list(before)
    else:  # accepted (a tiny positive demand): planned, and harmless to the others
        assert answer.status_code == 201 and float(demand) > 0 and code is None, answer.text
    health = client.get("/healthz").json()
    assert health["last_error"] is None, health
    assert_no_rate_lowered(rates(client), before)
    if answer.status_code == 201:
        client.delete("/jobs/hostile")
    register_next_within_1s(client)
    now = rates(client)
    assert now == pytest.approx(reference, rel=1e-6)


def test_a_registration_the_planner_fails_with_is_contained(client, reference):
    before = register_earlier(client)
    answer = client.post("/jobs", json={"id": POISON, "ps": "host-0", "workers": ["host-5", "host-10", "host-15"],
                                        "demand": 1e9})
    assert answer.status_code == 202, answer.text  # stored, and no plan includes it
    job = client.get(f"/jobs/{POISON}").json()
    assert job["state"] == "failed" and "Model error: infeasible bounds" in job["error"], job
    assert job["group_address"] is None and job["rate"] is None
    assert_no_rate_lowered(rates(client), before)
    register_next_within_1s(client)
    now = rates(client)
    assert now == pytest.approx(reference, rel=1e-6)
    addresses = [j["group_address"] for j in client.get("/jobs").json()["jobs"] if j["id"] != POISON]
    assert len(set(addresses)) == len(addresses) and None not in addresses
    health = client.get("/healthz").json()
    assert health["last_error"] is None, health
    assert client.delete(f"/jobs/{POISON}").status_code == 204  # its owner deletes it
    assert client.get(f"/jobs/{POISON}").status_code == 404
