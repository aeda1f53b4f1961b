"""Tenants (issue 23): tokens map to tenants, stored as sha256 only; a tenant sees,
changes and deletes only its own jobs (REST and the `jobs` CLI: another's job is a
404), the admin sees everything; per-tenant quotas (jobs, total demand, workers per
job) at the limit and one over, atomic with the store write; both stores keep a
job's tenant, an older SQLite file is migrated."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient warns about httpx
    from fastapi.testclient import TestClient

from controller.algorithm.model import Job
from controller.app.cli import main
from controller.config import MIN_TOKEN_LENGTH, ConfigError, build_topology, config_from_dict, load_config
from controller.config.tenants import read_tenant_map, token_sha256
from controller.core.service import ControllerService
from controller.core.tenants import Principal, QuotaExceeded
from controller.northbound.api import create_app, serve
from controller.store.sqlite import JobStore
import etcd_helper

ADMIN_TOKEN = "admin-token-of-some-length"
TOKEN_A = "token-of-tenant-a-0123456789"
TOKEN_B = "token-of-tenant-b-0123456789"
W = ["host-1", "host-4", "host-9"]


def tenants(**quota_a):
    return {"team-a": {"token_sha256": token_sha256(TOKEN_A), **quota_a},
            "team-b": {"token_sha256": token_sha256(TOKEN_B)}}


def make_config(api):
    return config_from_dict({
        "api": {"port": 0, **api},
        "topology": {"fattree": {"k": 4}, "group_capacity": 2, "entry_capacity": 6},
        "planner": {"debounce_s": 0.0, "wait_s": 10.0},
    })


def make_service(tmp_path, api):
    config = make_config(api)
    return ControllerService(config, build_topology(config), store=JobStore(tmp_path / "jobs.sqlite"))


@pytest.fixture
def app_for(tmp_path):
    made = []

    def make(api):
        svc = make_service(tmp_path, api)
        svc.start()
        client = TestClient(create_app(svc, svc.config), base_url="http://127.0.0.1").__enter__()
        made.append((svc, client))
        return client

    yield make
    for svc, client in made:
        client.__exit__(None, None, None)
        svc.close()


def auth(token):
    return {"Authorization": f"Bearer {token}"}


def job(i=0, **kw):
    return {"ps": f"host-{i}", "workers": [f"host-{(i + k) % 16}" for k in (1, 4, 9)], "demand": 1e9, **kw}


def code_of(r):
    return r.json()["error"]["code"]


# -- the config -------------------------------------------------------------------------------------


def test_tenants_are_read_with_their_quotas_and_hashes_only():
    config = make_config({"token": ADMIN_TOKEN, "tenants": tenants(max_jobs=3, max_demand=4e10, max_workers=8)})
    a, b = config.api.tenants
    assert (a.name, a.max_jobs, a.max_demand, a.max_workers) == ("team-a", 3, 4e10, 8)
    assert (b.name, b.max_jobs, b.max_demand, b.max_workers) == ("team-b", None, None, None)
    assert a.token_sha256 == token_sha256(TOKEN_A) and TOKEN_A not in repr(config)
    assert token_sha256(TOKEN_A) not in repr(config)  # not even the hash in a log line


@pytest.mark.parametrize("entry, message", [
    ({"token": TOKEN_A}, r"^api\.tenants\.team-a\.token: a plaintext token is not accepted: give token_sha256"),
    ({"token_sha256": TOKEN_A}, r"^api\.tenants\.team-a\.token_sha256: expected the sha256 of the token"),
    ({"token_sha256": token_sha256(TOKEN_A).upper()}, r"^api\.tenants\.team-a\.token_sha256: expected the sha256"),
    ({"token_sha256": token_sha256(TOKEN_A), "max_jobs": 0}, r"^api\.tenants\.team-a\.max_jobs: must be >= 1"),
    ({"token_sha256": token_sha256(TOKEN_A), "max_demand": -1}, r"^api\.tenants\.team-a\.max_demand: must be > 0"),
    ({"token_sha256": token_sha256(TOKEN_A), "quota": 1}, r"^api\.tenants\.team-a\.quota: unknown key"),
])
def test_a_bad_tenant_entry_is_refused_naming_the_key(entry, message):
    with pytest.raises(ConfigError, match=message):
        make_config({"tenants": {"team-a": entry}})


@pytest.mark.parametrize("api, message", [
    ({"tenants": {"Team A": {"token_sha256": token_sha256(TOKEN_A)}}}, r"^api\.tenants\.Team A: a tenant name is"),
    ({"tenants": {"a": {"token_sha256": token_sha256(TOKEN_A)}, "b": {"token_sha256": token_sha256(TOKEN_A)}}},
     r"^api\.tenants\.b\.token_sha256: the same token as tenant a"),
    ({"token": TOKEN_A, "tenants": {"a": {"token_sha256": token_sha256(TOKEN_A)}}},
     r"^api\.tenants: tenant a has the admin token"),
    ({"tenants": {}, "tokens_file": "t.yaml"}, r"^api\.tokens_file: give either tenants or tokens_file"),
    ({"tokens_file": "/nonexistent/tokens.yaml"}, r"^api\.tokens_file: /nonexistent/tokens\.yaml: cannot read"),
])
def test_bad_tenant_settings_are_refused(api, message):
    with pytest.raises(ConfigError, match=message):
        make_config(api)


def test_the_tokens_file_is_relative_to_the_config_and_refuses_plaintext(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "tokens.yaml").write_text(f"team-a: {{token_sha256: {token_sha256(TOKEN_A)}, max_jobs: 2}}\n")
    (tmp_path / "conf" / "controller.yaml").write_text(
        "api: {tokens_file: tokens.yaml}\ntopology: {fattree: {k: 4}}\n")
    (a,) = load_config(tmp_path / "conf" / "controller.yaml").api.tenants
    assert (a.name, a.max_jobs) == ("team-a", 2)
    (tmp_path / "conf" / "tokens.yaml").write_text(f"team-a: {{token: {TOKEN_A}}}\n")
    with pytest.raises(ConfigError, match=r"api\.tokens_file: .*tokens\.yaml: team-a\.token: a plaintext token is not"):
        load_config(tmp_path / "conf" / "controller.yaml")


def test_tenants_alone_allow_a_non_loopback_api():
    assert make_config({"host": "0.0.0.0", "insecure_http": True, "tenants": tenants()}).api.token is None
    with pytest.raises(ConfigError, match=r"^api\.token: required"):
        make_config({"host": "0.0.0.0", "insecure_http": True})


def test_tenant_token_mints_a_token_and_its_config_line(capsys):
    import yaml

    assert main(["tenant-token", "team-c", "--max-jobs", "4", "--max-workers", "16"]) == 0
    out, err = capsys.readouterr()
    token, line = out.strip().splitlines()
    assert len(token) >= MIN_TOKEN_LENGTH and "shown once" in err
    (t,) = read_tenant_map(yaml.safe_load(line), "")
    assert (t.name, t.token_sha256, t.max_jobs, t.max_workers) == ("team-c", token_sha256(token), 4, 16)
    assert token not in line
    assert main(["tenant-token", "team-c"]) == 0
    assert capsys.readouterr().out.splitlines()[0] != token  # a new one every time
    assert main(["tenant-token", "Team C"]) == 2
    assert "a tenant name is" in capsys.readouterr().err


# -- isolation through REST ------------------------------------------------------------------------


def test_a_request_needs_a_valid_token_once_tenants_exist(app_for):
    c = app_for({"tenants": tenants()})  # loopback, no admin token: no one is admin
    assert c.get("/jobs").status_code == 401
    assert c.get("/jobs", headers=auth("nobody-s-token-0123456789")).status_code == 401
    assert c.get("/jobs", headers=auth(token_sha256(TOKEN_A))).status_code == 401  # the hash is no token
    assert c.get("/jobs", headers=auth(TOKEN_A)).status_code == 200
    assert c.get("/metrics", headers=auth(TOKEN_A)).status_code == 403
    assert c.get("/healthz").status_code == 200


def test_loopback_without_token_or_tenants_is_open_as_the_admin(app_for):
    c = app_for({})
    assert c.post("/jobs", json=job(0, id="x")).status_code == 201
    assert [j["id"] for j in c.get("/jobs").json()["jobs"]] == ["x"]
    assert c.get("/metrics").status_code == 200


def test_a_tenant_cannot_read_change_or_delete_another_tenants_job(app_for):
    c = app_for({"token": ADMIN_TOKEN, "tenants": tenants()})
    a, b, admin = auth(TOKEN_A), auth(TOKEN_B), auth(ADMIN_TOKEN)
    assert c.post("/jobs", json=job(0, id="a1"), headers=a).status_code == 201
    assert c.post("/jobs", json=job(5, id="b1"), headers=b).status_code == 201
    assert c.post("/jobs", json=job(10, id="root"), headers=admin).status_code == 201
    assert [j["id"] for j in c.get("/jobs", headers=a).json()["jobs"]] == ["a1"]
    assert [j["id"] for j in c.get("/jobs", headers=b).json()["jobs"]] == ["b1"]
    assert [j["id"] for j in c.get("/jobs", headers=admin).json()["jobs"]] == ["a1", "b1", "root"]
    # another tenant's job, and the admin's, do not exist for a tenant
    for other in ("a1", "root"):
        r = c.get(f"/jobs/{other}", headers=b)
        assert r.status_code == 404 and code_of(r) == "not_found"
        assert r.json()["error"]["message"] == f"no job with id {other!r}"  # as for an id never used
        assert c.delete(f"/jobs/{other}", headers=b).status_code == 404
    # the same id, with the same spec or another: a conflict that says nothing of a1
    for body in (job(0, id="a1"), job(3, id="a1", demand=5e9)):
        r = c.post("/jobs", json=body, headers=b)
        assert r.status_code == 409 and code_of(r) == "duplicate_id", r.text
        message = r.json()["error"]["message"]
        assert "taken" in message and "host-0" not in message and "demand" not in message
    assert c.get("/jobs/a1", headers=a).json()["demand"] == 1e9  # unharmed
    assert c.get("/jobs/a1", headers=a).json()["ps"] == "host-0"
    # the admin sees and deletes everyone's
    assert c.get("/jobs/b1", headers=admin).status_code == 200
    assert c.delete("/jobs/b1", headers=admin).status_code == 204
    assert c.delete("/jobs/a1", headers=a).status_code == 204
    assert [j["id"] for j in c.get("/jobs", headers=admin).json()["jobs"]] == ["root"]


def test_the_plan_shows_a_tenant_only_its_own_jobs(app_for):
    c = app_for({"token": ADMIN_TOKEN, "tenants": tenants()})
    a, b, admin = auth(TOKEN_A), auth(TOKEN_B), auth(ADMIN_TOKEN)
    c.post("/jobs", json=job(0, id="a1"), headers=a)
    c.post("/jobs", json=job(5, id="b1"), headers=b)
    assert [j["id"] for j in c.get("/plan", headers=a).json()["jobs"]] == ["a1"]
    assert [j["id"] for j in c.get("/plan", headers=b).json()["jobs"]] == ["b1"]
    assert sorted(j["id"] for j in c.get("/plan", headers=admin).json()["jobs"]) == ["a1", "b1"]
    assert c.get("/plan").status_code == 401
    assert c.get("/metrics", headers=a).status_code == 403
    assert code_of(c.get("/metrics", headers=a)) == "admin_only"
    assert c.get("/metrics", headers=admin).status_code == 200
    for shared in ("/topology", "/hosts", "/links", "/switches"):
        assert c.get(shared, headers=a).status_code == 200, shared


# -- quotas ------------------------------------------------------------------------------------------


def test_quota_of_jobs_at_the_limit_and_one_over(app_for):
    c = app_for({"tenants": tenants(max_jobs=2)})
    a, b = auth(TOKEN_A), auth(TOKEN_B)
    assert c.post("/jobs", json=job(0, id="a1"), headers=a).status_code == 201
    assert c.post("/jobs", json=job(1, id="a2"), headers=a).status_code == 201
    r = c.post("/jobs", json=job(2, id="a3"), headers=a)
    assert r.status_code == 429 and code_of(r) == "quota_jobs" and "max_jobs" in r.json()["error"]["message"]
    assert c.get("/jobs/a3", headers=a).status_code == 404  # nothing half-stored
    assert c.post("/jobs", json=job(2, id="b3"), headers=b).status_code == 201  # another tenant's count
    assert c.post("/jobs", json=job(0, id="a1"), headers=a).status_code == 200  # a retry is no new job
    assert c.delete("/jobs/a1", headers=a).status_code == 204
    assert c.post("/jobs", json=job(2, id="a3"), headers=a).status_code == 201


def test_quota_of_total_demand_at_the_limit_and_one_over(app_for):
    c = app_for({"tenants": tenants(max_demand=3e9)})
    a = auth(TOKEN_A)
    assert c.post("/jobs", json=job(0, id="a1", demand=1e9), headers=a).status_code == 201
    r = c.post("/jobs", json=job(1, id="a2", demand=2e9 + 1), headers=a)
    assert r.status_code == 429 and code_of(r) == "quota_demand" and r.json()["error"]["field"] == "demand"
    assert "max_demand" in r.json()["error"]["message"]
    assert c.post("/jobs", json=job(1, id="a2", demand=2e9), headers=a).status_code == 201  # exactly at it


def test_quota_of_workers_per_job_at_the_limit_and_one_over(app_for):
    c = app_for({"tenants": tenants(max_workers=3)})
    a = auth(TOKEN_A)
    assert c.post("/jobs", json=job(0, id="a1"), headers=a).status_code == 201  # 3 workers
    r = c.post("/jobs", json={**job(1, id="a2"), "workers": ["host-2", "host-5", "host-10", "host-11"]}, headers=a)
    assert r.status_code == 403 and code_of(r) == "quota_workers" and r.json()["error"]["field"] == "workers"
    assert "max_workers" in r.json()["error"]["message"]


def test_concurrent_registrations_cannot_both_pass_a_quota(tmp_path):
    svc = make_service(tmp_path, {"tenants": tenants(max_jobs=1)})
    try:
        slow_add = svc.store.add

        def add(*args, **kw):  # a slow store widens any window between the check and the write
            time.sleep(0.2)
            return slow_add(*args, **kw)

        svc.jobs._store.add = add
        outcomes = []

        def register(i):
            try:
                svc.register_job(f"host-{i}", [f"host-{i + 1}"], 1e9, job_id=f"c{i}", wait=False,
                                 principal=Principal("team-a"))
                outcomes.append("ok")
            except QuotaExceeded as e:
                outcomes.append(e.code)

        threads = [threading.Thread(target=register, args=(i,)) for i in (0, 2, 4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["ok", "quota_jobs", "quota_jobs"]
        assert len(svc.jobs.answers(Principal("team-a"))[0]) == 1
    finally:
        svc.close()


# -- isolation through the CLI -----------------------------------------------------------------------


def test_the_cli_with_a_tenants_token_sees_and_deletes_only_its_own(tmp_path, monkeypatch, capsys):
    svc = make_service(tmp_path, {"token": ADMIN_TOKEN, "tenants": tenants()})
    svc.start()
    srv = serve(svc, svc.config)
    try:
        monkeypatch.setenv("TOK_A", TOKEN_A)
        monkeypatch.setenv("TOK_B", TOKEN_B)
        monkeypatch.setenv("TOK_ADMIN", ADMIN_TOKEN)
        url = ["--url", srv.url, "--json"]
        assert main(["jobs", "add", "host-0", *W, "--demand", "1G", "--id", "a1", "--token-env", "TOK_A", *url]) == 0
        assert main(["jobs", "add", "host-5", "host-6", "--demand", "1G", "--id", "b1", "--token-env", "TOK_B", *url]) == 0
        capsys.readouterr()
        assert main(["jobs", "list", "--token-env", "TOK_B", *url]) == 0
        assert [j["id"] for j in json.loads(capsys.readouterr().out)["jobs"]] == ["b1"]
        assert main(["jobs", "show", "a1", "--token-env", "TOK_B", *url]) != 0
        assert "no job with id 'a1'" in capsys.readouterr().err
        assert main(["jobs", "delete", "a1", "--token-env", "TOK_B", *url]) != 0
        capsys.readouterr()
        assert main(["jobs", "list", "--token-env", "TOK_ADMIN", *url]) == 0
        assert [j["id"] for j in json.loads(capsys.readouterr().out)["jobs"]] == ["a1", "b1"]
        assert main(["jobs", "show", "a1", "--token-env", "TOK_A", *url]) == 0
    finally:
        srv.stop()
        svc.close()


# -- the stores keep the tenant ------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "etcd"])
def open_store(request, tmp_path):
    if request.param == "sqlite":
        return lambda: JobStore(tmp_path / "jobs.sqlite")
    reason = etcd_helper.unavailable()
    if reason:
        pytest.skip(reason)
    from controller.store.etcd import EtcdClient, EtcdJobStore

    server = etcd_helper.EtcdServer(tmp_path / "etcd").__enter__()
    request.addfinalizer(lambda: server.__exit__(None, None, None))
    prefix = f"/test-{uuid.uuid4().hex[:8]}/"
    return lambda: EtcdJobStore(EtcdClient([server.url]), prefix)


def test_both_stores_keep_a_jobs_tenant_through_reopen_and_address_changes(open_store):
    with open_store() as store:
        store.add(Job("a1", "h0", ("h1",), 1e9, 1.0), "239.1.0.1", b"k" * 32, "team-a")
        store.add(Job("r1", "h2", ("h3",), 1e9, 1.0), "239.1.0.2")
        store.set_group_addresses({"a1": "239.1.0.7"})
        assert store.get("a1").tenant == "team-a"
    with open_store() as store:
        assert {s.job.id: (s.tenant, s.group_address) for s in store.jobs()} == {
            "a1": ("team-a", "239.1.0.7"), "r1": (None, "239.1.0.2")}


def test_a_version_2_sqlite_file_is_migrated_and_its_jobs_are_the_admins(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, ps TEXT NOT NULL,
                           workers TEXT NOT NULL, demand REAL NOT NULL CHECK (demand > 0),
                           weight REAL NOT NULL CHECK (weight > 0), group_address TEXT UNIQUE, auth_key BLOB);
        CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO jobs (id, ps, workers, demand, weight, group_address, auth_key)
            VALUES ('old', 'host-0', '["host-1"]', 1e9, 1.0, '239.1.0.1', NULL);
        PRAGMA user_version = 2;
    """)
    conn.close()
    with JobStore(path) as store:
        (old,) = store.jobs()
        assert (old.job.id, old.tenant) == ("old", None)
        store.add(Job("new", "h0", ("h1",), 1e9, 1.0), "239.1.0.2", None, "team-a")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    conn.close()
    with JobStore(path) as store:
        assert {s.job.id: s.tenant for s in store.jobs()} == {"old": None, "new": "team-a"}


def test_a_restarted_controller_keeps_each_jobs_owner(tmp_path):
    api = {"token": ADMIN_TOKEN, "tenants": tenants()}
    svc = make_service(tmp_path, api)
    svc.register_job("host-0", W, 1e9, job_id="a1", wait=False, principal=Principal("team-a"))
    svc.close()
    svc = make_service(tmp_path, api)
    try:
        assert [s.job.id for s in svc.jobs.answers(Principal("team-a"))[0]] == ["a1"]
        assert svc.jobs.answers(Principal("team-b"))[0] == []
    finally:
        svc.close()


# -- the web view --------------------------------------------------------------------------------------


def test_the_web_view_shows_a_tenant_only_its_own_jobs(tmp_path):
    from pathlib import Path

    chromium = "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.skip(f"{chromium} not found (apt-get install chromium)")
    playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    svc = make_service(tmp_path, {"token": ADMIN_TOKEN, "tenants": tenants()})
    svc.register_job("host-0", W, 1e9, job_id="a1", wait=False, principal=Principal("team-a"))
    svc.register_job("host-5", ["host-6", "host-7"], 1e9, job_id="b1", wait=False, principal=Principal("team-b"))
    svc.register_job("host-10", ["host-11"], 1e9, job_id="root", wait=False)
    svc.start()
    srv = serve(svc, svc.config)
    try:
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            try:
                for token, expected in ((TOKEN_A, ["a1"]), (TOKEN_B, ["b1"]), (ADMIN_TOKEN, ["a1", "b1", "root"])):
                    page = browser.new_page()
                    page.goto(srv.url + "/")
                    page.wait_for_selector("#token-dialog[open]")  # with tenants, nothing without a token
                    assert page.locator("#jobs tbody tr").count() == 0
                    page.fill("#token-input", token)
                    page.click("#token-form button[type=submit]")
                    page.wait_for_selector("#nodes g.node.switch")
                    page.wait_for_function(f"document.querySelectorAll('#jobs tbody tr').length === {len(expected)}")
                    text = page.inner_text("#jobs tbody")
                    assert [j for j in ("a1", "b1", "root") if j in text.split()] == expected, text
                    page.close()
            finally:
                browser.close()
    finally:
        srv.stop()
        svc.close()
