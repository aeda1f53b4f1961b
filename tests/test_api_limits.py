"""The REST API's limits (controller/northbound/limits.py, docs/security.md, "Limits"):
writes per client (`api.limits.rate`, with a bounded memory of clients), open
/events streams and requests in flight (429), uvicorn's connection backstop (a
plain-text 503), and the caps on jobs (429, atomic with the store write) and on
workers per job (422; stored jobs are loaded whatever their size). Every cap is
tried at its value and one over."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import warnings

import httpx
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient warns about httpx
    from fastapi.testclient import TestClient

from controller.config import ConfigError, build_topology, config_from_dict
from controller.core.errors import ServiceError
from controller.core.service import ControllerService
from controller.northbound.api import create_app, serve
from controller.northbound.limits import RateLimit
from controller.store.sqlite import JobStore

TOKEN = "limits-test-token-0123456789"
HOSTS = [f"host-{i}" for i in range(16)]


def make_service(tmp_path, limits=None, api=None) -> ControllerService:
    config = config_from_dict({"api": {"port": 0, **(api or {}), "limits": limits or {}},
                               "topology": {"fattree": {"k": 4}}, "planner": {"debounce_s": 0.0, "wait_s": 10.0}})
    return ControllerService(config, build_topology(config), store=JobStore(tmp_path / "jobs.sqlite"))


def job(i: int, workers: int = 2) -> dict:
    return {"id": f"j{i}", "ps": "host-0", "workers": HOSTS[1:1 + workers], "demand": 1e9}


def assert_error(r, status: int, code: str, field: str | None = None) -> None:
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code and r.json()["error"]["field"] == field, r.text


@pytest.fixture
def started():
    made = []

    def start(tmp_path, limits=None, api=None):
        svc = make_service(tmp_path, limits, api)
        svc.start()
        made.append(svc)
        return svc

    yield start
    for svc in made:
        svc.close()


# -- the rate of writes -----------------------------------------------------------------------


def test_writes_beyond_the_rate_are_refused_with_retry_after(tmp_path, started):
    svc = started(tmp_path, {"rate": "3/minute"})
    with TestClient(create_app(svc, svc.config), base_url="http://127.0.0.1") as c:
        assert c.post("/jobs", json=job(0)).status_code == 201
        assert c.post("/jobs", json=job(0)).status_code == 200  # a retry counts as well
        assert c.delete("/jobs/j0").status_code == 204
        r = c.post("/jobs", json=job(1))
        assert_error(r, 429, "rate_limited")
        assert 1 <= int(r.headers["retry-after"]) <= 60
        assert c.get("/jobs").status_code == 200  # reads are not rate limited
        assert [s.job.id for s in svc.jobs.statuses()] == []
    # another address has a budget of its own
    with TestClient(create_app(svc, svc.config), base_url="http://127.0.0.1", client=("10.0.0.1", 1)) as c:
        app = c.app
    with TestClient(app, base_url="http://127.0.0.1", client=("10.0.0.2", 1)) as c:
        assert c.post("/jobs", json=job(2)).status_code == 201


def test_broadcast_announcements_have_a_budget_per_job_apart_from_the_writes(tmp_path, started):
    svc = started(tmp_path, {"rate": "2/minute", "announce_rate": "3/minute"})
    with TestClient(create_app(svc, svc.config), base_url="http://127.0.0.1") as c:
        assert c.post("/jobs", json=job(0)).status_code == 201
        assert c.post("/jobs", json=job(1)).status_code == 201
        put = lambda j: c.put(f"/jobs/j{j}/broadcasting", json={"active": True})  # noqa: E731
        assert [put(0).status_code for _ in range(3)] == [200] * 3  # not the writes' budget (2, spent)
        r = put(0)
        assert_error(r, 429, "rate_limited")
        assert "announce_rate" in r.json()["error"]["message"] and int(r.headers["retry-after"]) >= 1
        assert put(1).status_code == 200  # another job: a budget of its own
        assert_error(c.post("/jobs", json=job(2)), 429, "rate_limited")  # and the writes' is spent
        # a job's path does not escape into the writes' budget or another's
        assert_error(c.put("/jobs/j0/broadcasting/x", json={"active": True}), 429, "rate_limited")


def test_without_a_token_made_up_credentials_do_not_buy_a_budget(tmp_path, started):
    svc = started(tmp_path, {"rate": "2/minute"})
    with TestClient(create_app(svc, svc.config), base_url="http://127.0.0.1") as c:
        codes = [c.post("/jobs", json=job(i), headers={"Authorization": f"Bearer made-up-{i}"}).status_code
                 for i in range(4)]
    assert codes == [201, 201, 429, 429]


def test_with_a_token_the_key_is_the_checked_token(tmp_path, started):
    svc = started(tmp_path, {"rate": "2/minute"}, {"host": "0.0.0.0", "token": TOKEN, "insecure_http": True})
    app = create_app(svc, svc.config)
    good = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(app, base_url="http://127.0.0.1", client=("10.0.0.1", 1)) as c:
        for i in range(5):  # refused by the token guard: they use no budget
            assert_error(c.post("/jobs", json=job(i), headers={"Authorization": "Bearer wrong-wrong-wrong"}), 401,
                         "unauthorized")
        assert c.post("/jobs", json=job(0), headers=good).status_code == 201
    with TestClient(app, base_url="http://127.0.0.1", client=("10.0.0.2", 1)) as c:  # same token, other address
        assert c.post("/jobs", json=job(1), headers=good).status_code == 201
        assert_error(c.post("/jobs", json=job(2), headers=good), 429, "rate_limited")


def test_the_limiter_remembers_a_bounded_number_of_clients():
    async def ok(scope, receive, send):
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    limiter = RateLimit(ok, "2/minute", max_keys=3, keyed_by_token=False)
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def hit(address):
        sent.clear()
        await limiter({"type": "http", "method": "POST", "path": "/jobs", "headers": [], "client": (address, 1)},
                      receive, send)
        return sent[0]["status"]

    async def run():
        statuses = [await hit("10.0.0.1") for _ in range(3)]
        for i in range(1000):  # a hostile client from many addresses
            await hit(f"10.1.{i // 256}.{i % 256}")
        return statuses

    assert asyncio.run(run()) == [204, 204, 429]
    assert len(limiter.keys) == 3
    storage = limiter.limiter.storage
    assert len(storage.events) <= 3 and len(storage.storage) <= 3


@pytest.mark.parametrize("rate, error", [
    ("lots", "api.limits.rate: expected a rate like '60/minute'"),
    ("0/minute", "api.limits.rate: the amount must be between 1 and 100000"),
    ("1000000/second", "api.limits.rate: the amount must be between 1 and 100000"),
    (60, "api.limits.rate: expected a string"),
])
@pytest.mark.parametrize("name", ["rate", "announce_rate"])
def test_a_bad_rate_is_refused_at_load(rate, error, name):
    with pytest.raises(ConfigError) as info:
        config_from_dict({"api": {"limits": {name: rate}}, "topology": {"fattree": {"k": 4}}})
    assert str(info.value).startswith(error.replace("limits.rate", f"limits.{name}")), str(info.value)


def test_limits_config_is_checked():
    config = config_from_dict({"api": {"limits": {"rate": "10 per second", "max_jobs": 5}}, "topology": {"fattree": {"k": 4}}})
    assert config.api.limits.rate == "10 per second" and config.api.limits.max_jobs == 5
    assert config.api.limits.max_workers == 1024  # the defaults stay
    for limits, error in (({"max_connections": 95}, "api.limits.max_connections: must be at least max_in_flight + "
                           "max_event_streams (96)"), ({"max_jobs": 0}, "api.limits.max_jobs: must be within"),
                          ({"burst": 1}, "api.limits.burst: unknown key")):
        with pytest.raises(ConfigError) as info:
            config_from_dict({"api": {"limits": limits}, "topology": {"fattree": {"k": 4}}})
        assert str(info.value).startswith(error), str(info.value)


# -- jobs and workers -------------------------------------------------------------------------


def test_jobs_beyond_max_jobs_are_refused(tmp_path, started):
    svc = started(tmp_path, {"max_jobs": 2})
    with TestClient(create_app(svc, svc.config), base_url="http://127.0.0.1") as c:
        assert c.post("/jobs", json=job(0)).status_code == 201
        assert c.post("/jobs", json=job(1)).status_code == 201
        r = c.post("/jobs", json=job(2))
        assert_error(r, 429, "too_many_jobs")
        assert "api.limits.max_jobs" in r.json()["error"]["message"]
        assert c.post("/jobs", json=job(1)).status_code == 200  # a retry of a registered job is no new job
        assert c.delete("/jobs/j0").status_code == 204
        assert c.post("/jobs", json=job(2)).status_code == 201
    assert sorted(s.job.id for s in svc.jobs.statuses()) == ["j1", "j2"]
    assert sorted(sj.job.id for sj in svc.jobs._store.jobs()) == ["j1", "j2"]


def test_max_jobs_holds_under_concurrent_registrations(tmp_path):
    svc = make_service(tmp_path, {"max_jobs": 3})  # not started: registrations do not wait for plans
    outcomes: list[str] = []

    def register(i: int) -> None:
        try:
            svc.add_job("host-0", HOSTS[1:3], 1e9, job_id=f"c{i}", wait=False)
            outcomes.append("ok")
        except ServiceError as e:
            outcomes.append(e.code)

    threads = [threading.Thread(target=register, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(outcomes) == ["ok"] * 3 + ["too_many_jobs"] * 9
    assert len(svc.jobs._store.jobs()) == 3 and len(svc.jobs) == 3
    svc.close()


def test_workers_beyond_max_workers_are_refused_naming_the_field(tmp_path, started):
    svc = started(tmp_path, {"max_workers": 3})
    with TestClient(create_app(svc, svc.config), base_url="http://127.0.0.1") as c:
        assert c.post("/jobs", json=job(0, workers=3)).status_code == 201
        r = c.post("/jobs", json=job(1, workers=4))
        assert_error(r, 422, "too_many_workers", "workers")
        assert "api.limits.max_workers (3)" in r.json()["error"]["message"]
        # the cap is checked before the hosts are: 6,000 made-up workers are refused cheaply
        body = {"id": "big", "ps": "host-0", "workers": [f"w{i}" for i in range(6000)], "demand": 1e9}
        assert_error(c.post("/jobs", json=body), 422, "too_many_workers", "workers")


def test_stored_jobs_above_max_workers_are_loaded(tmp_path):
    svc = make_service(tmp_path)
    svc.add_job("host-0", HOSTS[1:6], 1e9, job_id="wide", wait=False)
    svc.close()
    svc = make_service(tmp_path, {"max_workers": 3, "max_jobs": 1})
    assert [s.job.id for s in svc.jobs.statuses()] == ["wide"]  # kept: lowering a cap refuses no stored job
    with pytest.raises(ServiceError) as info:
        svc.add_job("host-0", HOSTS[1:3], 1e9, job_id="more", wait=False)
    assert info.value.code == "too_many_jobs"
    svc.close()


# -- streams, requests in flight, connections (a real uvicorn) --------------------------------


def hello(response):
    """The stream's line iterator, past its first event (keep it: once collected it closes the stream)."""
    lines = response.iter_lines()
    assert next(lines) == "event: hello"
    return lines


def status_of(url: str) -> int:
    """The status of a GET, without reading an endless body."""
    with httpx.stream("GET", url, timeout=5) as r:
        if r.status_code != 200:
            r.read()
        return r.status_code


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_event_streams_are_capped_and_given_back_when_the_client_goes_away(tmp_path, started):
    svc = started(tmp_path, {"max_event_streams": 2})
    server = serve(svc, svc.config)
    try:
        url = server.url + "/events"
        with httpx.stream("GET", url, timeout=5) as a, httpx.stream("GET", url, timeout=5) as b:
            kept = [hello(a), hello(b)]
            with httpx.stream("GET", url, timeout=5) as r:
                assert r.status_code == 429  # before reading: an open stream never ends
                r.read()
                assert_error(r, 429, "too_many_event_streams")
                assert r.headers["retry-after"] == "1"
            assert httpx.get(server.url + "/jobs", timeout=5).status_code == 200  # other requests still pass
            time.sleep(0.5)  # the two streams are still open, still counted
            assert status_of(url) == 429
            assert next(kept[0]) in ("", "data: {\"generation\":1,\"tick_s\":3.0}")
        # both clients went away: their slots come back (ui.py notices within a poll)

        def opens() -> bool:
            with httpx.stream("GET", url, timeout=5) as c, httpx.stream("GET", url, timeout=5) as d:
                return c.status_code == 200 and d.status_code == 200
        assert wait_for(opens)
    finally:
        server.stop()


def slow_body(port: int) -> socket.socket:
    """A connection that announces a body and never sends it: a request held in flight."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
    return s


def test_requests_in_flight_are_capped(tmp_path, started):
    svc = started(tmp_path, {"max_in_flight": 2, "max_event_streams": 1, "max_connections": 10})
    server = serve(svc, svc.config)
    held = []
    try:
        held = [slow_body(server.port), slow_body(server.port)]
        assert wait_for(lambda: httpx.get(server.url + "/jobs", timeout=5).status_code == 429)
        r = httpx.get(server.url + "/jobs", timeout=5)
        assert_error(r, 429, "too_many_requests_in_flight")
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200  # liveness is never capped
        with httpx.stream("GET", server.url + "/events", timeout=5) as events:  # counted on their own
            assert next(events.iter_lines()) == "event: hello"
        held.pop().close()  # one client goes away: its slot comes back
        assert wait_for(lambda: httpx.get(server.url + "/jobs", timeout=5).status_code == 200)
    finally:
        for s in held:
            s.close()
        server.stop()


def test_uvicorn_limits_connections_as_a_backstop(tmp_path, started):
    svc = started(tmp_path, {"max_in_flight": 1, "max_event_streams": 1, "max_connections": 2})
    server = serve(svc, svc.config)
    held = []
    try:
        assert server._server.config.limit_concurrency == 2
        held = [slow_body(server.port), socket.create_connection(("127.0.0.1", server.port), timeout=5)]
        time.sleep(0.3)
        r = httpx.get(server.url + "/healthz", timeout=5)
        assert r.status_code == 503 and r.headers["content-type"].startswith("text/plain")  # uvicorn's own answer
        for s in held:
            s.close()
        held = []
        assert wait_for(lambda: httpx.get(server.url + "/healthz", timeout=5).status_code == 200)
    finally:
        for s in held:
            s.close()
        server.stop()


def test_with_tenants_each_tenant_has_a_budget_of_its_own(tmp_path, started):
    """Keyed by the principal the token proved: tenant A's writes do not use tenant
    B's budget, even from one address (no admin token configured)."""
    from controller.config.tenants import token_sha256

    a, b = "tenant-a-token-0123456789abc", "tenant-b-token-0123456789abc"
    svc = started(tmp_path, {"rate": "2/minute"}, {"tenants": {"team-a": {"token_sha256": token_sha256(a)},
                                                               "team-b": {"token_sha256": token_sha256(b)}}})
    with TestClient(create_app(svc, svc.config), base_url="http://127.0.0.1", client=("10.0.0.1", 1)) as c:
        for i in range(2):
            assert c.post("/jobs", json=job(i), headers={"Authorization": f"Bearer {a}"}).status_code == 201
        assert_error(c.post("/jobs", json=job(2), headers={"Authorization": f"Bearer {a}"}), 429, "rate_limited")
        assert c.post("/jobs", json=job(3), headers={"Authorization": f"Bearer {b}"}).status_code == 201
