"""GET /jobs and GET /plan in pages (issue 25, northbound.paging): a bounded default
and a hard maximum, a `next` link until the last page, a cursor that neither
repeats nor skips a job when others are deleted between pages, a page of /plan
of one generation (409 plan_changed otherwise), clear 400s on bad parameters,
tenant scoping kept, the client library following `next`, and the parameters in
the OpenAPI."""

from __future__ import annotations

import pytest

from controller.client import Client
from controller.config.tenants import token_sha256
from controller.northbound import paging
from controller.northbound.api import serve
from rest_helper import SMALL_SWITCHES, api_client, api_config
from rest_helper import make_service as service_of

ADMIN = "admin-token-of-some-length"
TOKEN_A = "token-of-tenant-a-0123456789"
TOKEN_B = "token-of-tenant-b-0123456789"


def make_service(tmp_path, api=None):
    return service_of(tmp_path, api_config({"port": 0, **(api or {})}, SMALL_SWITCHES))


@pytest.fixture
def service(tmp_path):
    svc = make_service(tmp_path)
    for i in range(7):
        svc.add_job(f"host-{i}", [f"host-{(i + 5) % 16}"], 1e8, job_id=f"j{i}", wait=False)
    svc.start()
    yield svc
    svc.close()


def ids(page):
    return [j["id"] for j in page["jobs"]]


def follow(client, path, headers=None):
    pages = [client.get(path, headers=headers).json()]
    while pages[-1]["next"] is not None:
        pages.append(client.get(pages[-1]["next"], headers=headers).json())
    return pages


def test_jobs_come_in_pages_with_a_next_link_until_the_last(client):
    pages = follow(client, "/jobs?limit=3")
    assert [ids(p) for p in pages] == [["j0", "j1", "j2"], ["j3", "j4", "j5"], ["j6"]]
    assert pages[-1]["next"] is None
    assert ids(client.get("/jobs").json()) == [f"j{i}" for i in range(7)]  # the default page holds them all


def test_the_cursor_neither_repeats_nor_skips_when_jobs_go_between_pages(client, service):
    first = client.get("/jobs?limit=3").json()
    service.delete_job("j1", wait=False)  # before the cursor
    service.delete_job("j2", wait=False)  # the cursor's own job
    second = client.get(first["next"]).json()
    assert ids(first) == ["j0", "j1", "j2"] and ids(second) == ["j3", "j4", "j5"]


def test_the_default_page_and_the_maximum_are_bounded(client):
    assert paging.MAX_LIMIT >= paging.DEFAULT_LIMIT > 0
    assert client.get(f"/jobs?limit={paging.MAX_LIMIT}").status_code == 200
    r = client.get(f"/jobs?limit={paging.MAX_LIMIT + 1}")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_query" and r.json()["error"]["field"] == "limit"


@pytest.mark.parametrize("path, field", [
    ("/jobs?limit=0", "limit"), ("/jobs?limit=-1", "limit"), ("/jobs?limit=x", "limit"), ("/jobs?limit=1.5", "limit"),
    ("/jobs?after=-1", "after"), ("/jobs?after=abc", "after"),
    ("/plan?limit=0", "limit"), ("/plan?offset=-1", "offset"), ("/plan?offset=z", "offset"),
    ("/plan?generation=-3", "generation"), ("/plan?limit=99999999999999999999", "limit"),
])
def test_bad_paging_parameters_are_a_400_naming_the_parameter(client, path, field):
    r = client.get(path)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_query" and r.json()["error"]["field"] == field


def test_the_plan_comes_in_pages_of_one_generation(client, service):
    whole = client.get("/plan").json()
    pages = follow(client, "/plan?limit=2")
    assert [j for p in pages for j in p["jobs"]] == whole["jobs"] and len(pages) == 4
    assert all(p["generation"] == whole["generation"] and p["switches"] == whole["switches"] for p in pages)
    assert f"generation={whole['generation']}" in pages[0]["next"]
    service.delete_job("j0")  # a new plan: the next page of the old one is refused
    r = client.get(pages[0]["next"])
    assert r.status_code == 409 and r.json()["error"]["code"] == "plan_changed"
    assert r.json()["error"]["field"] == "generation"


def test_a_tenant_pages_through_its_own_jobs_only(tmp_path):
    tenants = {"team-a": {"token_sha256": token_sha256(TOKEN_A)}, "team-b": {"token_sha256": token_sha256(TOKEN_B)}}
    svc = make_service(tmp_path, {"token": ADMIN, "tenants": tenants})
    svc.start()
    try:
        with api_client(svc) as c:
            for i in range(6):
                token = TOKEN_A if i % 2 == 0 else TOKEN_B
                body = {"id": f"t{i}", "ps": f"host-{i}", "workers": [f"host-{i + 8}"], "demand": 1e8}
                assert c.post("/jobs", json=body, headers={"Authorization": f"Bearer {token}"}).status_code in (201, 202)
            a = {"Authorization": f"Bearer {TOKEN_A}"}
            pages = follow(c, "/jobs?limit=2", a)
            assert [ids(p) for p in pages] == [["t0", "t2"], ["t4"]]
            plan_pages = follow(c, "/plan?limit=1", a)
            assert [ids(p) for p in plan_pages] == [["t0"], ["t2"], ["t4"]]
            admin = follow(c, "/jobs?limit=4", {"Authorization": f"Bearer {ADMIN}"})
            assert [j for p in admin for j in ids(p)] == [f"t{i}" for i in range(6)]
    finally:
        svc.close()


def test_the_client_library_follows_next(service):
    server = serve(service, service.config)
    try:
        client = Client(server.url)
        assert [j.id for j in client.list()] == [f"j{i}" for i in range(7)]
        assert [j.id for j in client.list(page_size=2)] == [f"j{i}" for i in range(7)]  # 4 pages, followed
    finally:
        server.stop()


def test_paging_is_in_the_openapi(client):
    spec = client.get("/openapi.json").json()
    params = {p["name"]: p for p in spec["paths"]["/jobs"]["get"]["parameters"]}
    assert params["limit"]["schema"]["maximum"] == paging.MAX_LIMIT and params["limit"]["schema"]["default"] == paging.DEFAULT_LIMIT
    assert "after" in params
    assert {p["name"] for p in spec["paths"]["/plan"]["get"]["parameters"]} == {"limit", "offset", "generation"}
    assert "next" in spec["components"]["schemas"]["JobList"]["properties"]
    assert "next" in spec["components"]["schemas"]["PlanOut"]["properties"]


def test_a_new_plan_is_served_at_once_though_the_last_one_was_converted_once(client, service):
    """/plan converts the served plan once, however many pages are asked of it; a
    new plan (here: a job deleted) is the next answer's."""
    before = client.get("/plan?limit=2").json()
    assert client.get(before["next"]).status_code == 200  # a second page of the same conversion
    service.delete_job("j0")
    after = client.get("/plan").json()
    assert after["generation"] > before["generation"]
    assert "j0" not in ids(after) and len(ids(after)) == 6
