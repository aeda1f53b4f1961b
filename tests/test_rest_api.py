"""The REST API (FastAPI TestClient, in-process): every error case, the happy
paths, the §4 plan, budgets, metrics, the token, and a real uvicorn start/stop
on 127.0.0.1 with an ephemeral port."""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from collections import defaultdict

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.algorithm.validate import plan_violations
from controller.config.instance import instance_from_dict, plan_from_dict
from controller.northbound.api import create_app, serve
from controller.southbound.openflow.manager import OpenFlowManager
from rest_helper import SMALL_SWITCHES, api_client, api_config, make_service

TOKEN = "s3cret-token-for-tests"
MAX_BODY = 4096


def make_config(api=None):
    return api_config(api or {"max_body_bytes": MAX_BODY}, SMALL_SWITCHES)


@pytest.fixture
def service(tmp_path):
    svc = make_service(tmp_path, make_config())
    svc.openflow = OpenFlowManager(svc).attach()  # the backend whose entries the answers count
    svc.start()  # the real worker thread; debounce 0 keeps the tests quick
    yield svc
    svc.close()


def job_body(i=0, **kw):
    body = {"ps": f"host-{i}", "workers": [f"host-{(i + k) % 16}" for k in (1, 4, 9)], "demand": 1e9}
    body.update(kw)
    return body


def assert_error(response, status, code, field=None):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "field"}, body
    assert body["error"]["code"] == code, body
    assert body["error"]["field"] == field, body
    assert body["error"]["message"]


# -- errors -------------------------------------------------------------------------------------

BAD_JOBS = [
    (job_body(ps="host-99"), 422, "unknown_host", "ps"),
    (job_body(ps="10.99.0.1"), 422, "unknown_host", "ps"),
    (job_body(ps="edge-0-0"), 422, "unknown_host", "ps"),
    (job_body(workers=["host-1", "nowhere"]), 422, "unknown_host", "workers[1]"),
    (job_body(workers=[]), 422, "empty_workers", "workers"),
    (job_body(workers=["host-1", "host-2", "host-1"]), 422, "duplicate_worker", "workers[2]"),
    (job_body(workers=["host-1", "10.0.0.2"]), 422, "duplicate_worker", "workers[1]"),
    (job_body(workers=["host-1", "host-0"]), 422, "ps_among_workers", "workers[1]"),
    (job_body(demand=0), 422, "invalid_demand", "demand"),
    (job_body(demand=-1e9), 422, "invalid_demand", "demand"),
    (job_body(demand="1e9"), 422, "invalid_demand", "demand"),
    (job_body(demand=True), 422, "invalid_demand", "demand"),
    (job_body(weight=-1), 422, "invalid_weight", "weight"),
    (job_body(id="no spaces please"), 422, "invalid_id", "id"),
    (job_body(id="abc\n"), 422, "invalid_id", "id"),
    (job_body(colour="red"), 422, "unknown_field", "colour"),
    ({"workers": ["host-1"], "demand": 1e9}, 422, "missing_field", "ps"),
    (job_body(workers=["host-1", 5]), 422, "invalid_value", "workers[1]"),
    (job_body(id="taken"), 409, "duplicate_id", "id"),
]


@pytest.mark.parametrize("body, status, code, field", BAD_JOBS)
def test_bad_jobs_are_refused_and_change_nothing(client, service, body, status, code, field):
    assert client.post("/jobs", json=job_body(5, id="taken")).status_code == 201
    before = (client.get("/jobs").json(), client.get("/plan").json()["jobs"], service.jobs.group_addresses())
    assert_error(client.post("/jobs", json=body), status, code, field)
    after = (client.get("/jobs").json(), client.get("/plan").json()["jobs"], service.jobs.group_addresses())
    assert after == before


@pytest.mark.parametrize(
    "content, headers, status, code",
    [
        (b'{"ps": "host-0", "workers": ["host-1"], ', {"content-type": "application/json"}, 400, "invalid_json"),
        (b"", {"content-type": "application/json"}, 400, "invalid_json"),
        (b'{"ps": "host-0", "workers": ["host-1"], "demand": NaN}', {"content-type": "application/json"}, 422, "invalid_demand"),
        (b'["host-0"]', {"content-type": "application/json"}, 422, "invalid_type"),
        (b'{"ps": "host-0", "workers": ["host-1"], "demand": 1}', {"content-type": "text/plain"}, 415, "unsupported_media_type"),
    ],
)
def test_bodies_that_are_not_a_json_job(client, content, headers, status, code):
    field = "demand" if code == "invalid_demand" else None
    assert_error(client.post("/jobs", content=content, headers=headers), status, code, field)
    assert client.get("/jobs").json() == {"jobs": [], "next": None}


def test_body_size_limit(client):
    big = job_body(workers=[f"host-{i}" for i in range(1, 16)], id="x" * 10, pad="p" * MAX_BODY)
    # announced by Content-Length
    assert_error(client.post("/jobs", json=big), 413, "body_too_large")

    # not announced: a chunked body is counted as it arrives
    def chunks():
        yield b'{"ps": "host-0", "workers": ["host-1"], "demand": 1, "pad": "'
        for _ in range(MAX_BODY // 100 + 1):
            yield b"p" * 100
        yield b'"}'

    r = client.post("/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert_error(r, 413, "body_too_large")
    # a body just under the limit passes the size check (and fails as a job instead)
    assert_error(client.post("/jobs", json=job_body(pad="p" * (MAX_BODY - 200))), 422, "unknown_field", "pad")
    assert client.get("/jobs").json() == {"jobs": [], "next": None}


def test_unknown_ids_routes_and_methods(client):
    assert_error(client.get("/jobs/nope"), 404, "not_found", "id")
    assert_error(client.delete("/jobs/nope"), 404, "not_found", "id")
    assert_error(client.get("/no/such/route"), 404, "not_found")
    assert_error(client.put("/jobs"), 405, "method_not_allowed")


# -- happy paths ----------------------------------------------------------------------------------


def reaches_all_workers(body: dict) -> bool:
    adj = defaultdict(set)
    for e in body["structure"]["edges"]:
        adj[e["from"]].add(e["to"])
    seen, stack = {body["ps"]}, [body["ps"]]
    while stack:
        for nxt in adj[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return set(body["workers"]) <= seen


def test_post_returns_group_rate_mode_structure(client):
    r = client.post("/jobs", json=job_body(0, id="a", workers=["10.0.0.2", "host-5", "host-12"], weight=2))
    assert r.status_code == 201, r.text
    body = r.json()
    assert r.headers["location"] == "/jobs/a"
    assert body["id"] == "a" and body["ps"] == "host-0" and body["workers"] == ["host-1", "host-5", "host-12"]
    assert body["weight"] == 2 and body["state"] == "planned"
    assert ipaddress.IPv4Address(body["group_address"]) in ipaddress.IPv4Network("239.1.0.0/16")
    assert 0 < body["rate"] <= body["demand"]
    assert body["mode"] in ("multicast", "hybrid", "unicast")
    assert set(body["structure"]) == {"edges", "groups", "entries", "branches", "ps_unicast"}
    assert reaches_all_workers(body)
    r2 = client.post("/jobs", json=job_body(3))  # an id is generated
    assert r2.status_code == 201 and r2.json()["id"].startswith("job-")
    assert r2.json()["group_address"] != body["group_address"]
    again = client.get("/jobs/a").json()  # re-planned with job 2: its tree may have moved, its address not
    stable = ("id", "ps", "workers", "demand", "weight", "group_address", "state")
    assert {k: again[k] for k in stable} == {k: body[k] for k in stable}
    assert reaches_all_workers(again)
    assert [j["id"] for j in client.get("/jobs").json()["jobs"]] == ["a", r2.json()["id"]]


def test_delete_then_404_and_entries_gone(client, service):
    a = client.post("/jobs", json=job_body(0, id="a")).json()
    client.post("/jobs", json=job_body(6, id="b"))
    r = client.delete("/jobs/a")
    assert r.status_code == 204 and r.content == b""
    assert_error(client.get("/jobs/a"), 404, "not_found", "id")
    assert_error(client.delete("/jobs/a"), 404, "not_found", "id")
    assert [j["id"] for j in client.get("/plan").json()["jobs"]] == ["b"]
    # no desired flow of any switch still matches the deleted job's group address
    for state in service.openflow.desired_state().values():
        assert all(dict(f.match).get("ipv4_dst") != a["group_address"] for f in state.flows)


def test_plan_is_a_valid_section4_plan(client):
    for i in range(8):
        assert client.post("/jobs", json=job_body(i, id=f"j{i}", demand=1e9 * (1 + i % 3))).status_code == 201
    topology = client.get("/topology").json()
    jobs = [{k: j[k] for k in ("id", "ps", "workers", "demand")} for j in client.get("/jobs").json()["jobs"]]
    instance = instance_from_dict({"topology": topology, "jobs": jobs})
    plan = plan_from_dict(client.get("/plan").json(), instance)
    assert plan_violations(instance, plan) == []
    assert {jp.job.id for jp in plan.jobs} == {f"j{i}" for i in range(8)}
    assert {jp.structure.mode for jp in plan.jobs} >= {"multicast"}


def test_answers_and_the_plan_carry_the_plans_churn(client):
    first = client.post("/jobs", json=job_body(0, id="a")).json()
    plan = first["plan"]
    # admitted (planner.incremental, the default) into the start-up plan, keeping its LP bound
    assert plan["algorithm"] == "incremental" and plan["lp_bound"] >= plan["lambda"] > 0
    # the first job: nothing moved, its entries written
    assert plan["churn"]["jobs"] == 0 and plan["churn"]["entries_written"] > 0
    served = client.get("/plan").json()
    assert (served["generation"], served["churn"]) == (plan["generation"], plan["churn"])
    health = client.get("/healthz").json()
    assert (health["churn_jobs"], health["entries_written"]) == (0, plan["churn"]["entries_written"])
    second = client.post("/jobs", json=job_body(1, id="b")).json()["plan"]
    assert second["generation"] > plan["generation"]
    assert client.get("/jobs/a").json()["plan"] == second
    client.delete("/jobs/b")
    gone = client.get("/plan").json()
    assert gone["churn"]["entries_written"] > 0  # b's entries removed


def test_switches_within_budget(client):
    for i in range(10):
        client.post("/jobs", json=job_body(i, id=f"j{i}"))
    switches = client.get("/switches").json()["switches"]
    assert len(switches) == 20
    for sw in switches:
        assert sw["connected"] is False  # no southbound is attached in this test
        assert sw["group_capacity"] == 2 and sw["entry_capacity"] == 6
        assert 0 <= sw["groups_used"] <= sw["group_capacity"]
        assert 0 <= sw["entries_used"] <= sw["entry_capacity"]
        assert sw["flows"] >= 16  # one unicast route per host, at least
    assert sum(sw["groups_used"] for sw in switches) > 0
    plan = client.get("/plan").json()
    assert {s["id"]: s["groups_used"] for s in plan["switches"]} == {s["id"]: s["groups_used"] for s in switches}


def test_metrics_parse_as_prometheus_text(client):
    for i in range(3):
        client.post("/jobs", json=job_body(i, id=f"j{i}"))
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    value = {name: fam.samples[0].value for name, fam in families.items() if len(fam.samples) == 1}
    assert value["mcast_jobs"] == 3
    assert 0 < value["mcast_plan_lambda"] <= 1
    assert value["mcast_plan_seconds"] > 0
    assert value["mcast_replans"] >= 2  # counters lose _total in the family name
    assert value["mcast_openflow_errors"] == 0
    entries = {s.labels["switch"]: s.value for s in families["mcast_switch_entries_used"].samples}
    assert len(entries) == 20 and sum(entries.values()) > 0
    assert {s.value for s in families["mcast_switch_group_capacity"].samples} == {2}
    assert value["mcast_links"] == 48 and value["mcast_links_down"] == 0  # k=4: 16 host + 32 switch links
    assert value["mcast_link_ends_discovered"] == 0 and value["mcast_links_unexpected"] == 0
    assert value["mcast_p4runtime_errors"] == 0


def test_metrics_count_links_down_discovered_and_unexpected(client, service):
    service.wiring.learn_port("edge-0-0", 1, "agg-0-0")
    service.wiring.learn_port("edge-0-0", 9, "core-0")  # no such link
    service.links.down("edge-0-0", "agg-0-0")
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    value = {name: fam.samples[0].value for name, fam in families.items() if len(fam.samples) == 1}
    assert (value["mcast_links_down"], value["mcast_link_ends_discovered"], value["mcast_links_unexpected"]) == (1, 1, 1)


def test_topology_sources_of_a_declared_network(client, service):
    topo = client.get("/topology").json()
    assert set(topo) == {"nodes", "links"}
    sources = client.get("/topology?sources=1").json()["sources"]
    assert sources["network"] == "config"
    assert all(n["source"] == "config" for n in sources["nodes"])
    assert {(n["group_capacity_source"], n["entry_capacity_source"]) for n in sources["nodes"]
            if n["id"].startswith(("core", "agg", "edge"))} == {("config", "config")}
    links = {frozenset((ln["a"], ln["b"])): ln for ln in sources["links"]}
    assert {ln["source"] for ln in links.values()} == {"config"}
    assert all(ln["a_port_source"] in ("default", None) and ln["b_port_source"] in ("default", None) for ln in links.values())
    service.wiring.learn_port("edge-0-0", 1, "agg-0-0")  # LLDP confirmed one end
    ln = {frozenset((x["a"], x["b"])): x for x in client.get("/topology?sources=1").json()["sources"]["links"]}[
        frozenset(("edge-0-0", "agg-0-0"))]
    end = "a" if ln["a"] == "edge-0-0" else "b"
    assert (ln[f"{end}_port"], ln[f"{end}_port_source"]) == (1, "lldp")
    assert ln[f"{'b' if end == 'a' else 'a'}_port_source"] == "default"


def test_what_the_declared_topology_lacks_is_listed_and_counted_never_used(client, service):
    # an address no configured host has; a configured host at a switch the topology
    # does not attach it to; a datapath id no declared switch is given
    h0 = service.hosts.addresses["host-0"]
    home = service.wiring.neighbours("host-0")[0]
    other = next(service.wiring.topology.name(v) for v in service.wiring.topology.switches
                 if service.wiring.topology.name(v).startswith("edge") and service.wiring.topology.name(v) != home)
    assert service.hosts.learn("10.9.9.9", "02:00:00:00:09:09", home, 7) is None
    assert service.hosts.learn(h0.ip, "02:00:00:00:00:aa", other, 3) is None
    service.devices.unexpected("of:00000000000000ff")
    service.devices.unexpected("of:00000000000000ff")  # once
    hosts = client.get("/hosts").json()
    assert hosts["unexpected"] == [
        {"ip": h0.ip, "mac": "02:00:00:00:00:aa", "switch": other, "port": 3, "reason": "elsewhere"},
        {"ip": "10.9.9.9", "mac": "02:00:00:00:09:09", "switch": home, "port": 7, "reason": "unknown_address"},
    ]
    assert client.get("/switches").json()["unexpected"] == ["of:00000000000000ff"]
    assert {h["id"]: h["switch"] for h in hosts["hosts"]}["host-0"] == home  # not moved
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    value = {name: fam.samples[0].value for name, fam in families.items() if len(fam.samples) == 1}
    assert (value["mcast_hosts_unexpected"], value["mcast_switches_unexpected"]) == (2, 1)
    # seen where the topology says: no longer unexpected
    service.hosts.learn(h0.ip, "02:00:00:00:00:aa", home, 2)
    assert [h["ip"] for h in client.get("/hosts").json()["unexpected"]] == ["10.9.9.9"]


def test_healthz_and_openapi(client):
    h = client.get("/healthz").json()
    assert h["status"] == "ok" and h["plan_generation"] >= 1 and h["jobs"] == 0
    spec = client.get("/openapi.json").json()
    assert {"/jobs", "/jobs/{job_id}", "/plan", "/topology", "/switches", "/metrics", "/healthz"} <= set(spec["paths"])


# -- the token ---------------------------------------------------------------------------------------


def test_token_required_when_not_on_loopback(service):
    config = make_config(api={"host": "0.0.0.0", "token": TOKEN, "insecure_http": True})
    with api_client(service, config) as c:
        for headers in ({}, {"Authorization": "Bearer wrong-token-wrong-token"}, {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"}):
            r = c.post("/jobs", json=job_body(0, id="intruder"), headers=headers)
            assert_error(r, 401, "unauthorized")
            assert r.headers["www-authenticate"] == "Bearer"
            assert_error(c.get("/jobs", headers=headers), 401, "unauthorized")
            assert_error(c.delete("/jobs/x", headers=headers), 401, "unauthorized")
        assert service.jobs.statuses() == []
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert c.post("/jobs", json=job_body(0, id="ok"), headers=good).status_code == 201
        assert c.get("/jobs", headers=good).status_code == 200
        assert c.get("/healthz").status_code == 200  # liveness needs no token


def test_no_app_without_token_off_loopback(service):
    config = dataclasses.replace(make_config(), api=dataclasses.replace(make_config().api, host="10.0.0.1"))
    with pytest.raises(ValueError, match="token"):
        create_app(service, config)


# -- a real server ------------------------------------------------------------------------------------


def test_serve_starts_and_stops_on_an_ephemeral_port(service):
    config = dataclasses.replace(service.config, api=dataclasses.replace(service.config.api, port=0))
    server = serve(service, config)
    try:
        assert server.port > 0 and server.url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=server.url, trust_env=False, timeout=5) as http:
            assert http.get("/healthz").json()["status"] == "ok"
            r = http.post("/jobs", json=job_body(0, id="live"))
            assert r.status_code == 201 and r.json()["state"] == "planned"
    finally:
        server.stop()
    assert not server.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


# -- fuzzing from the OpenAPI description ---------------------------------------------------------------


def test_openapi_fuzz_no_server_errors(service):
    schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
    from hypothesis import HealthCheck, given, settings

    # schemathesis calls the app as http://testserver: the one name this app answers to
    api = dataclasses.replace(service.config.api, allowed_hosts=("testserver",))
    app = create_app(service, dataclasses.replace(service.config, api=api))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 9
    for operation in operations:

        @settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def check(case):
            response = case.call()
            assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:300]}"
            if response.status_code >= 400:
                assert set(response.json()) == {"error"}

        check()


def test_links_and_hosts_show_the_learned_wiring(client, service):
    links = client.get("/links").json()
    assert len(links["links"]) == len(service.wiring.topology.links) and links["unexpected"] == []
    assert all(link["up"] and not link["a"]["discovered"] and not link["b"]["discovered"] for link in links["links"])
    hosts = {h["id"]: h for h in client.get("/hosts").json()["hosts"]}
    h0 = hosts["host-0"]
    assert not h0["learned"] and h0["switch"] == service.wiring.neighbours("host-0")[0]
    # LLDP saw edge-0-0's first host port lead to an aggregation switch; a host ARPed
    sw = h0["switch"]
    agg = next(n for n in service.wiring.neighbours(sw) if not n.startswith("host"))
    service.wiring.learn_port(sw, h0["port"], agg)
    service.hosts.learn(h0["ip"], "02:00:00:00:00:aa", sw, 9)
    service.wiring.learn_port(sw, 5, "core-0")
    links = client.get("/links").json()
    [end] = [link["a"] for link in links["links"] if {link["a"]["node"], link["b"]["node"]} == {sw, agg}]
    assert end == {"node": sw, "port": h0["port"], "discovered": True}
    assert links["unexpected"] == [{"switch": sw, "port": 5, "neighbour": "core-0"}]
    h0 = {h["id"]: h for h in client.get("/hosts").json()["hosts"]}["host-0"]
    assert (h0["port"], h0["mac"], h0["learned"]) == (9, "02:00:00:00:00:aa", True)


def test_structure_tells_the_ps_whom_to_send_unicast_copies_to(client):
    # 12 jobs of 8 workers on a k=4 fat-tree with 2 groups per switch: some must be hybrid or unicast
    for i in range(12):
        ps = f"host-{i}"
        workers = [f"host-{(i + d) % 16}" for d in range(1, 9)]
        assert client.post("/jobs", json={"id": f"j{i}", "ps": ps, "workers": workers, "demand": 1e9}).status_code == 201
    jobs = client.get("/jobs").json()["jobs"]
    assert any(j["mode"] != "multicast" for j in jobs)
    for j in jobs:
        st = j["structure"]
        targets = [b["to"] for b in st["branches"]]
        assert len(targets) == len(set(targets)) and set(targets) <= set(j["workers"])
        assert st["ps_unicast"] == sorted(b["to"] for b in st["branches"] if b["from"] == j["ps"])
        assert (j["mode"] == "multicast") == (not st["branches"])
        # the PS's link carries one copy for the tree (if any) and one per worker it addresses itself
        [first] = [e for e in st["edges"] if e["from"] == j["ps"]]
        assert first["copies"] == (1 if st["entries"] else 0) + len(st["ps_unicast"])


# -- idempotent re-registration -----------------------------------------------------------------


def test_an_identical_registration_answers_the_existing_job(client, service):
    first = client.post("/jobs", json=job_body(0, id="again", weight=2))
    assert first.status_code == 201
    addresses = service.jobs.group_addresses()
    # the same spec, the workers as IPv4 addresses and in another order: the same job
    ip = {h["id"]: h["ip"] for h in client.get("/hosts").json()["hosts"]}
    ips = [ip[w] for w in reversed(first.json()["workers"])]
    again = client.post("/jobs", json=job_body(0, id="again", weight=2.0, workers=ips))
    assert again.status_code == 200, again.text
    assert again.headers["location"] == "/jobs/again"
    assert {k: again.json()[k] for k in ("id", "group_address", "rate", "mode", "state", "workers")} == {
        k: first.json()[k] for k in ("id", "group_address", "rate", "mode", "state", "workers")
    }
    assert [j["id"] for j in client.get("/jobs").json()["jobs"]] == ["again"]
    assert service.jobs.group_addresses() == addresses


@pytest.mark.parametrize("change, field", [({"demand": 2e9}, "demand"), ({"weight": 3}, "weight"), ({"ps": "host-7"}, "ps"), ({"workers": ["host-1"]}, "workers")])
def test_a_different_spec_under_a_taken_id_is_a_conflict(client, change, field):
    assert client.post("/jobs", json=job_body(0, id="taken", weight=2)).status_code == 201
    r = client.post("/jobs", json=job_body(0, id="taken", **{"weight": 2, **change}))
    assert_error(r, 409, "duplicate_id", "id")
    assert f"different {field}" in r.json()["error"]["message"]
    assert client.get("/jobs/taken").json()["demand"] == 1e9 and len(client.get("/jobs").json()["jobs"]) == 1


# -- the job's broadcast key (auth_key) ---------------------------------------------------------


def _key(n: int = 32, fill: int = 7) -> str:
    import base64

    return base64.urlsafe_b64encode(bytes([fill]) * n).rstrip(b"=").decode()


def _secret_free(text: str, key: str) -> bool:
    return "auth_key" not in text and key not in text


def test_the_key_is_given_once_to_the_registrant_and_never_again(client, caplog):
    caplog.set_level("DEBUG")
    # posted without a key: the controller makes one, and gives it in the 201 only
    first = client.post("/jobs", json=job_body(0, id="k1"))
    assert first.status_code in (201, 202), first.text
    made = first.json()["auth_key"]
    import base64

    assert len(base64.urlsafe_b64decode(made + "=" * (-len(made) % 4))) == 32
    # posted with a key: that key, in the answer that created the job
    mine = _key(fill=9)
    second = client.post("/jobs", json=job_body(1, id="k2", auth_key=mine))
    assert second.status_code in (201, 202) and second.json()["auth_key"] == mine
    # never in a list, a job, the plan, the metrics or the health
    for path in ("/jobs", "/jobs/k1", "/jobs/k2", "/plan", "/metrics", "/healthz"):
        r = client.get(path)
        assert r.status_code == 200, (path, r.text)
        assert _secret_free(r.text, made) and _secret_free(r.text, mine), path
    # a retry (same id, same spec) gets it back only if it carries the same key
    retry = client.post("/jobs", json=job_body(1, id="k2", auth_key=mine))
    assert retry.status_code == 200 and retry.json()["auth_key"] == mine
    for other in (job_body(1, id="k2"), job_body(1, id="k2", auth_key=_key(fill=1))):
        r = client.post("/jobs", json=other)
        assert r.status_code == 200 and _secret_free(r.text, mine), r.text
    r = client.post("/jobs", json=job_body(0, id="k1"))  # the controller's key: nobody gets it by asking again
    assert r.status_code == 200 and _secret_free(r.text, made)
    assert made not in caplog.text and mine not in caplog.text  # nor in any log line


@pytest.mark.parametrize("bad", [_key(31), _key(33), "not base64!", "", 5, _key() + "@"])
def test_a_malformed_key_is_a_422_naming_auth_key(client, bad):
    r = client.post("/jobs", json=job_body(0, id="kbad", auth_key=bad))
    assert_error(r, 422, "invalid_auth_key", "auth_key")
    assert client.get("/jobs").json()["jobs"] == []


def test_source_guard_drops_are_exported_per_switch_and_port(service, client):
    # issue 22: the backends register what their switches counted; a failing source is left out
    service.counters.guard_drop_sources.append(lambda: {("edge-0", 3): 7, ("edge-1", 12): 20001})

    def broken():
        raise RuntimeError("switch gone")

    service.counters.guard_drop_sources.append(broken)
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    samples = {(s.labels["switch"], s.labels["port"]): s.value for s in families["mcast_source_guard_drops"].samples
               if s.name == "mcast_source_guard_drops_total"}
    assert samples == {("edge-0", "3"): 7, ("edge-1", "12"): 20001}
