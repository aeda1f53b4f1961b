"""The web UI's server side: the page and its assets (public, no secrets), /events
(token, content type, an event within a second of a new plan, shutdown not held up
by open streams), and the measured link rates in GET /links and /metrics."""

from __future__ import annotations

import re
import threading
import time
import warnings

import httpx
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from prometheus_client.parser import text_string_to_metric_families

from controller.config import build_topology, config_from_dict
from controller.northbound.api import create_app, serve
from controller.northbound.ui import STATIC_DIR
from controller.core.service import ControllerService
from controller.store.sqlite import JobStore

TOKEN = "ui-token-for-tests-0123"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make_service(tmp_path, api=None, clock=None):
    config = config_from_dict({
        "api": api or {},
        "topology": {"fattree": {"k": 4}},
        "planner": {"debounce_s": 0.0, "wait_s": 10.0},
    })
    kw = {"clock": clock} if clock is not None else {}
    return ControllerService(config, build_topology(config), store=JobStore(tmp_path / "jobs.sqlite"), **kw)


@pytest.fixture
def service(tmp_path):
    svc = make_service(tmp_path, api={"host": "0.0.0.0", "token": TOKEN, "insecure_http": True})
    svc.start()
    yield svc
    svc.close()


def test_page_and_assets_are_public_and_hold_no_secret(service):
    with TestClient(create_app(service, service.config), base_url="http://127.0.0.1") as c:
        page = c.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assets = re.findall(r'(?:src|href)="(/ui/[^"]+)"', page.text)
        assert sorted(assets) == ["/ui/app.css", "/ui/app.js"]
        for path in assets:
            r = c.get(path)
            assert r.status_code == 200, path
            assert TOKEN not in r.text
            assert "http://" not in r.text.replace('"http://www.w3.org/2000/svg"', "") and "https://" not in r.text
        assert c.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
        r = c.get("/ui/missing.js")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        assert c.get("/ui/%2e%2e/service.py").status_code == 404  # nothing outside the UI's directory
        assert TOKEN not in page.text
        # everything else still needs the token off loopback
        for path in ("/jobs", "/links", "/events"):
            assert c.get(path).status_code == 401, path


def test_ui_files_are_package_data():
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["controller.northbound"]
    files = {p.name for p in STATIC_DIR.iterdir()}
    assert {"index.html", "app.js", "app.css"} <= files
    for name in files:
        assert any(Path("ui", name).match(p) for p in patterns), name


def read_events(response, until, timeout=5.0):
    """(event, data) pairs of an SSE stream until `until(event)` says stop."""
    got = []
    event = None
    deadline = time.monotonic() + timeout
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            got.append((event, line[6:]))
            if until(event):
                return got
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"no such event within {timeout} s: {got}")


def test_events_need_the_token_and_report_a_new_plan_within_a_second(tmp_path):
    svc = make_service(tmp_path, api={"host": "127.0.0.1", "port": 0, "token": TOKEN})
    svc.start()
    server = serve(svc, svc.config)
    try:
        assert httpx.get(server.url + "/events", timeout=5).status_code == 401
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.stream("GET", server.url + "/events", headers=headers, timeout=5) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            lines = r.iter_lines()
            assert next(lines) == "event: hello"
            assert next(lines).startswith('data: {"generation":1')
            before = svc.served.summary().generation
            added = threading.Thread(target=svc.add_job, args=("host-0", ["host-1", "host-5"], 1e9))
            t0 = time.monotonic()
            added.start()
            events = read_events(_Lines(lines), lambda e: e == "plan")
            elapsed = time.monotonic() - t0
            added.join(10)
            assert events[-1][1] == f'{{"generation":{before + 1}}}'
            assert elapsed < 1.0, elapsed
        # an open stream does not hold up the server's stop
        with httpx.stream("GET", server.url + "/events", headers=headers, timeout=5) as r:
            next(r.iter_lines())
            t0 = time.monotonic()
            server.stop()
            assert time.monotonic() - t0 < 2.0
            assert not server.running
    finally:
        server.stop()
        svc.close()


class _Lines:
    """Adapts an iterator of lines to `read_events`' response argument."""

    def __init__(self, it) -> None:
        self.it = it

    def iter_lines(self):
        return self.it


def test_events_tick(tmp_path, monkeypatch):
    from controller.northbound import ui

    monkeypatch.setattr(ui, "TICK_S", 0.3)  # a quicker tick for the test
    svc = make_service(tmp_path, api={"host": "127.0.0.1", "port": 0})
    svc.start()
    server = serve(svc, svc.config)
    try:
        with httpx.stream("GET", server.url + "/events", timeout=5) as r:
            events = read_events(r, lambda e: e == "tick", timeout=3)
            assert [e for e, _ in events] == ["hello", "tick"]
    finally:
        server.stop()
        svc.close()


# -- measured rates ----------------------------------------------------------------------------


def test_measured_rates_in_links_and_metrics(tmp_path):
    clock = Clock()
    svc = make_service(tmp_path, clock=clock)
    svc.planning.replan()
    topology, ports = svc.wiring.topology_and_ports()
    idx = topology.index
    p_edge_agg = ports[(idx["edge-0-0"], idx["agg-0-0"])]
    p_edge_host = ports[(idx["edge-0-0"], idx["host-0"])]
    p_agg_edge = ports[(idx["agg-0-0"], idx["edge-0-0"])]
    svc.load.record("edge-0-0", [(p_edge_agg, 0, 0), (p_edge_host, 0, 0)])
    svc.load.record("agg-0-0", [(p_agg_edge, 0, 0)])
    clock.t += 2.0
    # edge-0-0 sends 500 MB towards agg-0-0 and receives 250 MB from it in 2 s; host-0 sent 100 MB
    svc.load.record("edge-0-0", [(p_edge_agg, 250_000_000, 500_000_000), (p_edge_host, 100_000_000, 0)])
    svc.load.record("agg-0-0", [(p_agg_edge, 499_000_000, 251_000_000)])

    with TestClient(create_app(svc, svc.config), base_url="http://127.0.0.1") as c:
        links = {frozenset((lk["a"]["node"], lk["b"]["node"])): lk for lk in c.get("/links").json()["links"]}
        up = links[frozenset(("edge-0-0", "agg-0-0"))]
        rate = {(up["a"]["node"], up["b"]["node"]): up["rate_bps"]["a_to_b"],
                (up["b"]["node"], up["a"]["node"]): up["rate_bps"]["b_to_a"]}
        # each direction from its sender's tx counter
        assert rate[("edge-0-0", "agg-0-0")] == pytest.approx(2e9)
        assert rate[("agg-0-0", "edge-0-0")] == pytest.approx(1.004e9)
        access = links[frozenset(("edge-0-0", "host-0"))]
        host_to_edge = access["rate_bps"]["a_to_b"] if access["a"]["node"] == "host-0" else access["rate_bps"]["b_to_a"]
        assert host_to_edge == pytest.approx(4e8)  # the switch's rx: the host has no counters
        assert links[frozenset(("edge-1-0", "agg-1-0"))]["rate_bps"] is None

        families = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
        samples = {(s.labels["a"], s.labels["b"]): s.value for s in families["mcast_link_rate_bps"].samples}
        assert samples[("edge-0-0", "agg-0-0")] == pytest.approx(2e9)
        assert samples[("host-0", "edge-0-0")] == pytest.approx(4e8)
        assert ("edge-1-0", "agg-1-0") not in samples

        clock.t += 60  # stale rates are dropped, not shown as current
        assert all(lk["rate_bps"] is None for lk in c.get("/links").json()["links"])
    svc.close()


def test_port_stats_setting_is_validated():
    from controller.config import ConfigError

    base = {"topology": {"fattree": {"k": 4}}}
    assert config_from_dict(base).southbound.openflow.port_stats_s == 2.0
    assert config_from_dict({**base, "southbound": {"openflow": {"port_stats_s": 0}}}).southbound.openflow.port_stats_s == 0
    for bad, message in ((0.1, "at least 0.5"), (-1, ">= 0"), ("2", "expected a number"), (True, "expected a number")):
        with pytest.raises(ConfigError, match=re.escape(message)) as e:
            config_from_dict({**base, "southbound": {"openflow": {"port_stats_s": bad}}})
        assert "southbound.openflow.port_stats_s" in str(e.value)
