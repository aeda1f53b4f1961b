"""Browser safety in a real browser (headless Debian Chromium via Playwright, as in
tests/test_ui_browser.py): the controller on 127.0.0.1 with no token (the default
loopback setup), and a page served from another origin (another port on
127.0.0.1) that tries to register or delete a job by every way a page has:

- fetch() with a JSON body: needs a CORS preflight, which the API never grants;
- fetch() in no-cors mode with a text/plain body (no preflight): refused, 415;
- a DELETE: never without a preflight;
- HTML form posts (text/plain with a JSON-looking body, urlencoded): 415;
- the web view in an iframe (to trick a click on its buttons): not displayed
  (X-Frame-Options and the policy's frame-ancestors), its form not reachable;
- DNS rebinding: the attacker's name resolved to 127.0.0.1
  (--host-resolver-rules), so its page is same-origin with the API: refused by
  the Host allowlist, 400.

After each, the API itself says that nothing was registered or deleted. The web
view itself still works under its Content-Security-Policy (no violation reported).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import threading
import time
from pathlib import Path

import httpx
import pytest

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")

from controller.config import build_topology, config_from_dict  # noqa: E402
from controller.core.service import ControllerService  # noqa: E402
from controller.northbound.api import serve  # noqa: E402
from controller.store.sqlite import JobStore  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
EVIL = "evil.example"

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} not found (apt-get install chromium)")


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM,
                              args=["--no-sandbox", f"--host-resolver-rules=MAP {EVIL} 127.0.0.1"])
        yield b
        b.close()


@pytest.fixture
def controller(tmp_path):
    config = config_from_dict({"api": {"host": "127.0.0.1", "port": 0}, "topology": {"fattree": {"k": 4}, "group_capacity": 4},
                               "planner": {"debounce_s": 0.0, "wait_s": 30.0}})
    service = ControllerService(config, build_topology(config), store=JobStore(tmp_path / "jobs.sqlite"))
    service.add_job("host-0", ["host-1", "host-2"], 1e9, job_id="victim", wait=False)
    service.start()
    server = serve(service, config)
    yield server
    server.stop()
    service.close()


@pytest.fixture
def attacker(tmp_path):
    """An http.server on another port of 127.0.0.1: another origin. Yields (its URL, its directory)."""
    root = tmp_path / "attacker"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    server.server_close()


def job_ids(api: str) -> list[str]:
    return [j["id"] for j in httpx.get(api + "/jobs", timeout=30).json()["jobs"]]


def page_of(root: Path, name: str, body: str) -> str:
    (root / name).write_text(f"<!doctype html><html><body>{body}</body></html>")
    return name


def attempt(page, script: str) -> str:
    """Run `script` (an async function body) in the page; what it returned, or the error it threw."""
    return page.evaluate(f"async () => {{ try {{ {script} }} catch (e) {{ return 'threw ' + e.name; }} }}")


def test_a_page_of_another_origin_cannot_register_or_delete_by_fetch(browser, controller, attacker):
    origin, root = attacker
    api = controller.url
    page = browser.new_page()
    page.goto(f"{origin}/{page_of(root, 'fetch.html', '<p>hello</p>')}")
    job = json.dumps({"id": "by-fetch", "ps": "host-3", "workers": ["host-4"], "demand": 1e9})
    # JSON: a preflight first, which the API never answers with CORS headers
    got = attempt(page, f"""const r = await fetch("{api}/jobs", {{method: "POST",
        headers: {{"Content-Type": "application/json"}}, body: {json.dumps(job)}}}); return "status " + r.status;""")
    assert got == "threw TypeError", got
    # text/plain needs no preflight: sent, and refused by the API (the page cannot read the 415)
    for content_type in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded"):
        got = attempt(page, f"""const r = await fetch("{api}/jobs", {{method: "POST", mode: "no-cors",
            headers: {{"Content-Type": "{content_type}"}}, body: {json.dumps(job)}}}); return r.type;""")
        assert got == "opaque", got
    for mode in ("cors", "no-cors"):
        got = attempt(page, f"""const r = await fetch("{api}/jobs/victim", {{method: "DELETE", mode: "{mode}"}});
            return "status " + r.status;""")
        assert got == "threw TypeError", got
    assert job_ids(api) == ["victim"]
    page.close()


def test_a_page_of_another_origin_cannot_register_by_form(browser, controller, attacker):
    origin, root = attacker
    api = controller.url
    # the classic text/plain trick: the body reads as JSON once name=value are joined by "="
    name = '{"id": "by-form", "ps": "host-3", "workers": ["host-4"], "demand": 1e9, "x": "'
    forms = f"""
      <iframe name="sink"></iframe>
      <form id="plain" action="{api}/jobs" method="POST" enctype="text/plain" target="sink">
        <input type="hidden" name='{name}' value='"}}'></form>
      <form id="urlencoded" action="{api}/jobs" method="POST" target="sink">
        <input type="hidden" name="id" value="by-form-2"><input type="hidden" name="ps" value="host-3"></form>
      <form id="multipart" action="{api}/jobs" method="POST" enctype="multipart/form-data" target="sink">
        <input type="hidden" name="id" value="by-form-3"></form>"""
    page = browser.new_page()
    seen: list[tuple[str, int]] = []
    page.on("response", lambda r: seen.append((r.request.method, r.status)) if r.url == f"{api}/jobs" else None)
    page.goto(f"{origin}/{page_of(root, 'forms.html', forms)}")
    for form in ("plain", "urlencoded", "multipart"):
        with page.expect_response(f"{api}/jobs"):
            page.evaluate(f"document.getElementById('{form}').submit()")
    assert seen == [("POST", 415)] * 3, seen  # sent, and refused
    assert job_ids(api) == ["victim"]
    page.close()


def test_the_web_view_cannot_be_framed(browser, controller, attacker):
    origin, root = attacker
    api = controller.url
    page = browser.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    frame_page = page_of(root, "frame.html", f'<iframe id="view" src="{api}/" width="800" height="600"></iframe>')
    page.goto(f"{origin}/{frame_page}")
    page.wait_for_timeout(1500)
    [frame] = [f for f in page.frames if f != page.main_frame]
    # blocked: an error page, where the web view's form (its Register button) is not
    assert frame.query_selector("#job-form") is None and frame.query_selector("button") is None
    assert any("frame-ancestors" in text or "X-Frame-Options" in text for text in console), console
    assert job_ids(api) == ["victim"]
    page.close()


def test_dns_rebinding_is_refused_by_the_host_allowlist(browser, controller):
    api = controller.url
    rebound = f"http://{EVIL}:{controller.port}"  # the attacker's name, now resolving to 127.0.0.1
    page = browser.new_page()
    first = page.goto(rebound + "/")
    assert first.status == 400 and first.json()["error"]["code"] == "host_not_allowed"
    job = json.dumps({"id": "rebound", "ps": "host-3", "workers": ["host-4"], "demand": 1e9})
    # same-origin now: nothing stops the browser from sending, the API refuses
    got = attempt(page, f"""const r = await fetch("/jobs", {{method: "POST",
        headers: {{"Content-Type": "application/json"}}, body: {json.dumps(job)}}});
        return r.status + " " + (await r.json()).error.code;""")
    assert got == "400 host_not_allowed", got
    got = attempt(page, """const r = await fetch("/jobs/victim", {method: "DELETE"}); return String(r.status);""")
    assert got == "400", got
    got = attempt(page, """const r = await fetch("/jobs"); return String(r.status);""")
    assert got == "400", got  # nor can it read anything
    assert job_ids(api) == ["victim"]
    page.close()


def test_the_web_view_works_under_its_policy(browser, controller):
    api = controller.url
    page = browser.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(api + "/")
    page.wait_for_selector('#jobs tbody tr[data-job="victim"]')
    page.wait_for_selector("#nodes g.node")
    page.fill('#job-form input[name="ps"]', "host-5")
    page.fill('#job-form input[name="workers"]', "host-6, host-7")
    page.fill('#job-form input[name="demand"]', "1e9")
    page.click("#job-form button[type=submit]")
    page.wait_for_selector("#jobs tbody tr:nth-child(2)")  # not wait_for_function: the policy forbids its eval
    assert len(job_ids(api)) == 2  # the page's own registration passes every guard
    page.wait_for_selector("#switches .bar i")
    # the styles the page sets (job colours, table use) take effect under style-src 'self'
    # (each update redraws the table: a swatch found just before a redraw is detached,
    # and a detached element has no computed style; look again then)
    for _ in range(20):
        colour = page.eval_on_selector("#jobs .swatch", "e => e.isConnected ? getComputedStyle(e).backgroundColor : null")
        if colour is not None:
            break
        time.sleep(0.05)
    assert colour not in (None, "", "rgba(0, 0, 0, 0)"), colour
    assert page.eval_on_selector("#switches .bar i", "e => e.style.width").endswith("%")
    assert not errors and not [t for t in console if "Content Security Policy" in t or "Refused" in t], console
    page.close()
