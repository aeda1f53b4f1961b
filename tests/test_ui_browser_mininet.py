"""The web UI on the emulated fat-tree with traffic: headless Debian Chromium
(Playwright, executable /usr/bin/chromium) against the real controller process on
Open vSwitch + Mininet (mininet/emu_session.py, the demo's jobs and budgets).

While every job sends at its planned rate, the page must show every switch and host,
the job list, a selected job's tree (exactly the plan's edges), measured load that is
non-zero on every link of that tree (OpenFlow port statistics, also in GET /links),
and a job registered through the page in GET /jobs and on the page. Screenshots go to
build/ (ui-mininet.png).

Skipped, with the reason, when not root or when Open vSwitch, Mininet, os-ken,
Playwright or Chromium is missing. It starts Open vSwitch and Mininet: never run it
next to another emulation test.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "mininet"))  # scripts, not a package (it would shadow mininet)

import ovs_daemon  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
_reason = ovs_daemon.emulation_unavailable()
if _reason is None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _reason = "playwright is not installed (pip install -e '.[test]')"
if _reason is None and not Path(CHROMIUM).exists():
    _reason = f"{CHROMIUM} not found (apt-get install chromium)"
pytestmark = [
    pytest.mark.skipif(_reason is not None, reason=_reason or ""),
    pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning"),
]

TRAFFIC_S = 30.0


@pytest.fixture(scope="module")
def emu():
    import demo
    from emu_session import Emulation

    with Emulation("ui", REPO / "build" / "emu-ui", bw_mbit=demo.BW_MBIT, group_capacity=demo.GROUPS,
                   switch_group_capacity=demo.core_budgets()) as e:
        for jid, ps, workers, demand in demo.JOBS:
            e.add_job(jid, ps, workers, demand)
        e.converge(timeout=60)
        yield e


def test_page_shows_measured_load_on_the_selected_tree(emu):
    from playwright.sync_api import sync_playwright

    url = emu.ctl.url
    status, topology = emu.ctl.request("GET", "/topology")
    assert status == 200
    status, plan = emu.ctl.request("GET", "/plan")
    chosen = max(plan["jobs"], key=lambda j: len(j["edges"]))
    emu.start_traffic(TRAFFIC_S)
    try:
        time.sleep(8)  # a few port statistics rounds (southbound.openflow.port_stats_s, 2 s) under traffic
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 900}, bypass_csp=True)
            page.goto(url + "/")
            page.wait_for_selector("#nodes g.node.switch")
            ids = set(page.eval_on_selector_all("#nodes g.node", "gs => gs.map(g => g.dataset.id)"))
            assert ids == {n["id"] for n in topology["nodes"]}
            assert page.locator("#jobs tbody tr").count() == len(plan["jobs"])
            page.click(f'#jobs tbody tr[data-job="{chosen["id"]}"]')
            page.wait_for_selector(f'#job-overlay[data-job="{chosen["id"]}"]')
            drawn = page.eval_on_selector_all("#job-overlay line.job-edge", "ls => ls.map(l => [l.dataset.from, l.dataset.to])")
            assert sorted(map(tuple, drawn)) == sorted((e["from"], e["to"]) for e in chosen["edges"])
            # measured load on every link of the tree: in the REST API and drawn
            tree = {frozenset((e["from"], e["to"])) for e in chosen["edges"]}
            page.wait_for_selector("#links line.link.measured", state="attached", timeout=15_000)  # a vertical line has no area
            _, links = emu.ctl.request("GET", "/links")
            for lk in links["links"]:
                if frozenset((lk["a"]["node"], lk["b"]["node"])) in tree:
                    assert lk["rate_bps"] and max(lk["rate_bps"]["a_to_b"] or 0, lk["rate_bps"]["b_to_a"] or 0) > 0, lk
            rates = page.eval_on_selector_all(
                "#links line.link", "ls => ls.map(l => [l.dataset.a, l.dataset.b, +(l.dataset.rate || 0)])")
            on_tree = [r for a, b, r in rates if frozenset((a, b)) in tree]
            assert len(on_tree) == len(tree) and all(r > 0 for r in on_tree), on_tree
            (REPO / "build").mkdir(exist_ok=True)
            page.screenshot(path=str(REPO / "build" / "ui-mininet.png"))

            # a job registered through the page
            page.fill('#job-form input[name="ps"]', "host-14")
            page.fill('#job-form input[name="workers"]', "host-15, host-1")
            page.fill('#job-form input[name="demand"]', "1e6")
            page.click("#job-form button[type=submit]")
            page.wait_for_function(f"document.querySelectorAll('#jobs tbody tr').length === {len(plan['jobs']) + 1}")
            _, jobs = emu.ctl.request("GET", "/jobs")
            assert any(j["ps"] == "host-14" and j["workers"] == ["host-15", "host-1"] for j in jobs["jobs"])
            browser.close()
    finally:
        for jid in emu.jobs:
            emu.stop_traffic(jid)
