"""The controller at data-centre scale (issue 25): a declared k=48 fat-tree (2,880
switches, 27,648 hosts) in one process: the core (ControllerService) and the REST
API (serve()), with no switch connected and a few jobs (the planner's cold plan of
thousands of jobs at k=48 is another matter, docs/performance.md).

Checks that it starts (and how long that takes, written to build/scale-k48.json),
that GET /topology answers within 1 s, that /jobs and /plan answer in bounded
pages, and, in headless Chromium (as tests/test_ui_browser.py), that the web view
stays usable: each pod one node until opened, the selected job's tree still
shown; its load time is measured and bounded.

The OpenFlow backend is not attached: its translation of a k=48 plan holds a
unicast route per host on every switch (2 x 27,648 x 2,880 = 159 million flow
entries, about 69 GB), which does not fit in this machine's memory; the process
with the OpenFlow backend refuses such a fabric at start, saying so (tested here;
docs/controller.md, "The controller at k=48").
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from controller.config import build_topology, config_from_dict
from controller.core.service import ControllerService
from controller.northbound.api import serve
from controller.store.sqlite import JobStore

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
BUILD = Path(__file__).parents[1] / "build"
K = 48
PODS, SWITCHES, HOSTS = K, 5 * K * K // 4, K ** 3 // 4
PER_POD = K * K // 4  # hosts per pod
# jobs across pods (host-n is in pod n // PER_POD)
JOBS = {
    "span": ("host-0", ["host-1", "host-30", f"host-{PER_POD + 3}", f"host-{5 * PER_POD + 7}", f"host-{40 * PER_POD}"]),
    "pod0": ("host-2", ["host-3", "host-40", "host-100"]),
    "two": (f"host-{3 * PER_POD}", [f"host-{9 * PER_POD + 1}", f"host-{9 * PER_POD + 2}"]),
}
START_BOUND_S = 120.0  # measured ~5 s on 2 idle cores (docs/performance.md); a loaded machine is slower
PAGE_BOUND_S = 30.0  # the page's load, measured ~4 s idle


def _record(**values) -> None:
    BUILD.mkdir(exist_ok=True)
    path = BUILD / "scale-k48.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(values)
    path.write_text(json.dumps(data, indent=1))


@pytest.fixture(scope="module")
def k48(tmp_path_factory):
    t0 = time.monotonic()
    config = config_from_dict({
        "api": {"host": "127.0.0.1", "port": 0},
        "topology": {"fattree": {"k": K}, "group_capacity": 16},
        "planner": {"debounce_s": 0.0, "wait_s": 120.0},
    })
    service = ControllerService(config, build_topology(config),
                                store=JobStore(tmp_path_factory.mktemp("k48") / "jobs.sqlite"))
    for job_id, (ps, workers) in JOBS.items():
        service.add_job(ps, workers, 1e9, job_id=job_id, wait=False)
    service.start()  # the first plan covers them
    server = serve(service, config)
    start_s = time.monotonic() - t0
    _record(k=K, jobs=len(JOBS), start_s=round(start_s, 2),
            maxrss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), load=os.getloadavg())
    yield server, service, start_s
    server.stop()
    service.close()


def get(server, path: str) -> httpx.Response:
    r = httpx.get(server.url + path, timeout=60)
    r.raise_for_status()
    return r


def test_the_controller_starts_with_a_k48_fat_tree(k48):
    server, service, start_s = k48
    assert start_s < START_BOUND_S
    health = get(server, "/healthz").json()
    assert health["jobs"] == len(JOBS) and health["plan_generation"] >= 1 and health["last_error"] is None
    assert all(j["state"] == "planned" for j in get(server, "/jobs").json()["jobs"])


def test_topology_answers_within_a_second(k48):
    server, _, _ = k48
    times = []
    for _ in range(3):  # from the request to the whole body received (5.9 MB), not its decoding
        t = time.monotonic()
        raw = get(server, "/topology").content
        times.append(time.monotonic() - t)
    body = json.loads(raw)
    kinds = [n["kind"] for n in body["nodes"]]
    assert kinds.count("switch") == SWITCHES and kinds.count("host") == HOSTS
    _record(topology_s=[round(t, 3) for t in times], topology_bytes=len(raw), load_at_topology=os.getloadavg())
    # the best of three: the machine is shared, and one answer delayed by another
    # process's burst says nothing of the controller (the 1 s goal of issue 25)
    assert min(times) < 1.0, times


def test_jobs_and_plan_come_in_bounded_pages(k48):
    server, _, _ = k48
    first = get(server, "/jobs?limit=2").json()
    second = get(server, first["next"]).json()
    assert [j["id"] for j in first["jobs"] + second["jobs"]] == list(JOBS) and second["next"] is None
    plan = get(server, "/plan?limit=1").json()
    assert len(plan["jobs"]) == 1 and plan["next"] is not None and len(plan["switches"]) == SWITCHES


def test_the_openflow_backend_refuses_a_fabric_it_cannot_hold(tmp_path):
    """`python -m controller run` with the OpenFlow backend on a declared k=48 fat-tree
    exits at once, saying why, instead of growing to ~69 GB of unicast flow entries."""
    config = tmp_path / "k48.yaml"
    config.write_text(f"api: {{host: 127.0.0.1, port: 0}}\nstore: {{path: {tmp_path / 'jobs.sqlite'}}}\n"
                      f"topology: {{fattree: {{k: {K}}}, group_capacity: 16}}\n")
    with socket.socket() as probe:  # a free port (never listened on: the run stops before)
        probe.bind(("127.0.0.1", 0))
        of_port = probe.getsockname()[1]
    t = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "controller", "run", "--config", str(config), "--of-port", str(of_port)],
                          capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[1],
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "the OpenFlow backend would hold 159,252,480 unicast flow entries" in done.stderr
    assert "api listening" not in done.stderr
    _record(openflow_refused_s=round(time.monotonic() - t, 2))


def test_the_openflow_limit_is_the_fabric_size(monkeypatch):
    from controller.southbound.openflow import manager

    config = config_from_dict({"topology": {"fattree": {"k": 4}}})
    service = ControllerService(config, build_topology(config), store=JobStore(":memory:"))
    try:
        assert manager.unicast_flows(20, 16) == 640
        monkeypatch.setattr(manager, "MAX_UNICAST_FLOWS", 639)
        with pytest.raises(manager.TooLarge, match="640 unicast flow entries"):
            manager.OpenFlowManager(service).attach()
        monkeypatch.setattr(manager, "MAX_UNICAST_FLOWS", 640)
        manager.OpenFlowManager(service).attach().detach()
    finally:
        service.close()


# -- the web view ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def test_the_web_view_collapses_pods_and_still_shows_the_selected_tree(k48, browser):
    server, _, _ = k48
    page = browser.new_page(viewport={"width": 1600, "height": 900}, bypass_csp=True)  # see test_ui_browser.py
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    t0 = time.monotonic()
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url.split("?")[0].rsplit("/", 1)[-1]))
    page.goto(server.url + "/")
    page.wait_for_function("window.__firstDrawMs !== undefined", timeout=int(PAGE_BOUND_S * 1000) * 2)
    load_s = time.monotonic() - t0
    first_draw_ms = page.evaluate("window.__firstDrawMs")
    # collapsed: one node per pod, the core tier (576 switches) one node, no switch or host drawn
    pods = page.eval_on_selector_all("#nodes g.node.pod", "gs => gs.map(g => g.dataset.pod)")
    assert len(pods) == PODS + 1 and sum(p.startswith("pod ") for p in pods) == PODS
    assert page.locator("#nodes g.node.switch").count() == 0 and page.locator("#nodes g.node.host").count() == 0
    assert page.locator("svg#fabric *").count() < 2000
    assert page.locator("#jobs tbody tr").count() == len(JOBS)

    # the selected job: its tree between the pods (and the core) it crosses
    t1 = time.monotonic()
    page.click('#jobs tbody tr[data-job="span"]')
    page.wait_for_selector('#job-overlay[data-job="span"]')
    select_s = time.monotonic() - t1
    ends = {frozenset(e) for e in page.eval_on_selector_all(
        "#job-overlay line.job-edge", "ls => ls.map(l => [l.dataset.from, l.dataset.to])")}
    crossed = {"pod 0", "pod 1", "pod 5", "pod 40"}
    assert {p for e in ends for p in e} == crossed | {"core tier"}, ends
    page.screenshot(path=str(BUILD / "ui-k48.png"))

    # open pod 0: its 48 switches and 576 hosts are drawn, the job's tree inside it too
    t2 = time.monotonic()
    page.click('#nodes g.node.pod[data-pod="pod 0"]')
    page.wait_for_selector("#nodes g.node.host")
    open_s = time.monotonic() - t2
    assert page.locator("#nodes g.node.switch").count() == K and page.locator("#nodes g.node.host").count() == PER_POD
    inside = page.eval_on_selector_all("#job-overlay line.job-edge", "ls => ls.map(l => [l.dataset.from, l.dataset.to])")
    assert ["host-0", "edge-0-0"] in inside or ["edge-0-0", "host-1"] in inside, inside
    page.screenshot(path=str(BUILD / "ui-k48-pod0.png"))
    page.click('#nodes g.node.pod[data-pod="pod 0"]')  # closed again
    page.wait_for_function("document.querySelectorAll('#nodes g.node.host').length === 0")
    # a tick (every 3 s) reads the switches again, but not the 17 MB of /links
    asked.clear()
    page.wait_for_timeout(7000)
    assert "switches" in asked and "links" not in asked, asked
    assert errors == []
    _record(page_load_s=round(load_s, 2), first_draw_ms=round(first_draw_ms), select_s=round(select_s, 2),
            open_pod_s=round(open_s, 2), load_at_page=os.getloadavg())
    assert load_s < PAGE_BOUND_S, (load_s, first_draw_ms)
    page.close()
