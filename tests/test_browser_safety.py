"""Browser safety of the REST API (controller/northbound/browser.py, docs/security.md,
"Browser safety"), in-process with the TestClient: a foreign Host header is refused
before anything runs (DNS rebinding), a write must be application/json (a page of
another origin can send text/plain, a form or multipart without a CORS preflight),
and the answers carry the headers that keep the web view out of frames and every
answer out of caches and MIME sniffing. tests/test_ui_browser_safety.py does the
same from a real Chromium."""

from __future__ import annotations

import pytest

from controller.config import ConfigError, config_from_dict
from controller.core.service import ControllerService
from controller.northbound.browser import allowed_hosts, is_json, split_host
from rest_helper import api_client, api_config
from rest_helper import make_service as service_of

JOB = {"ps": "host-0", "workers": ["host-1", "host-2"], "demand": 1e9}


def make_service(tmp_path, api=None) -> ControllerService:
    return service_of(tmp_path, api_config(api))


@pytest.fixture
def service(tmp_path):
    svc = make_service(tmp_path)
    svc.start()
    yield svc
    svc.close()


def assert_error(r, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code, r.text


def job_ids(service) -> list[str]:
    return [s.job.id for s in service.jobs.statuses()]


# -- the Host allowlist -----------------------------------------------------------------------

FOREIGN = ["evil.example", "evil.example:80", "localhost.evil.example", "127.0.0.1.nip.io", "127.0.0.2",
           "localhost:9999", "[::2]", "", "localhost:80:80", "[::1", "bad host"]


@pytest.mark.parametrize("host", FOREIGN)
def test_a_foreign_host_is_refused_before_anything_runs(client, service, host):
    assert client.post("/jobs", json={**JOB, "id": "victim"}).status_code == 201
    r = client.post("/jobs", json={**JOB, "id": "rebound"}, headers={"Host": host})
    assert_error(r, 400, "host_not_allowed")
    assert_error(client.delete("/jobs/victim", headers={"Host": host}), 400, "host_not_allowed")
    for path in ("/jobs", "/healthz", "/", "/ui/app.js", "/events"):
        assert_error(client.get(path, headers={"Host": host}), 400, "host_not_allowed")
    assert job_ids(service) == ["victim"]  # nothing registered, nothing deleted


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:80", "localhost", "LocalHost:80", "localhost.", "[::1]",
                                  "[::1]:80"])
def test_the_loopback_names_are_served_with_or_without_the_port(client, host):
    # the TestClient's server is 127.0.0.1 port 80
    assert client.get("/healthz", headers={"Host": host}).status_code == 200


def test_configured_allowed_hosts_replace_the_defaults(tmp_path):
    svc = make_service(tmp_path, api={"allowed_hosts": ["ctl.example", "other.example:8443"]})
    with api_client(svc, base_url="http://ctl.example") as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/healthz", headers={"Host": "ctl.example:80"}).status_code == 200
        assert c.get("/healthz", headers={"Host": "other.example:8443"}).status_code == 200
        for host in ("other.example", "other.example:80", "localhost", "127.0.0.1", "ctl.example:81"):
            assert_error(c.get("/healthz", headers={"Host": host}), 400, "host_not_allowed")
    svc.close()


def test_the_default_allowlist_and_host_parsing():
    config = config_from_dict({"api": {"host": "::1"}, "topology": {"fattree": {"k": 4}}})
    assert allowed_hosts(config.api) == ("localhost", "127.0.0.1", "[::1]", "[::1]")
    config = config_from_dict({"api": {"host": "0.0.0.0", "token": "t" * 20, "insecure_http": True}, "topology": {"fattree": {"k": 4}}})
    assert allowed_hosts(config.api)[-1] == "0.0.0.0"
    assert split_host("[::1]:8080") == ("[::1]", 8080) and split_host("Example.ORG.") == ("example.org", None)
    assert split_host("a:b") is None and split_host("[::1]x") is None and split_host(":80") is None


@pytest.mark.parametrize("hosts, error", [
    ([], "api.allowed_hosts: must list at least one host name"),
    ("localhost", "api.allowed_hosts: expected a list"),
    (["a b"], "api.allowed_hosts[0]: expected a host name"),
    (["::1"], "api.allowed_hosts[0]: expected a host name"),
    (["*"], "api.allowed_hosts[0]: expected a host name"),
    (["[::1"], "api.allowed_hosts[0]: expected a host name"),
    (["http://ctl.example"], "api.allowed_hosts[0]: expected a host name"),
])
def test_bad_allowed_hosts_are_refused_at_load(hosts, error):
    with pytest.raises(ConfigError) as info:
        config_from_dict({"api": {"allowed_hosts": hosts}, "topology": {"fattree": {"k": 4}}})
    assert str(info.value).startswith(error), str(info.value)


# -- JSON only --------------------------------------------------------------------------------

TEXT_JOB = '{"id": "csrf", "ps": "host-0", "workers": ["host-1"], "demand": 1e9}'


@pytest.mark.parametrize("content_type", [
    "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/json; charset=latin-1", "application/json-patch+json", "application/jsonx", "", None,
])
def test_a_write_that_is_not_json_is_refused(client, service, content_type):
    headers = {} if content_type is None else {"Content-Type": content_type}
    r = client.post("/jobs", content=TEXT_JOB.encode(), headers=headers)
    assert_error(r, 415, "unsupported_media_type")
    assert job_ids(service) == []


def test_a_form_post_is_refused(client, service):
    assert_error(client.post("/jobs", data={"id": "csrf", "ps": "host-0", "workers": "host-1"}), 415,
                 "unsupported_media_type")
    assert_error(client.post("/jobs", files={"f": ("job.json", TEXT_JOB)}), 415, "unsupported_media_type")
    assert job_ids(service) == []


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON;Charset=\"UTF-8\""])
def test_json_writes_pass(client, service, content_type):
    r = client.post("/jobs", content=TEXT_JOB.encode(), headers={"Content-Type": content_type})
    assert r.status_code == 201, r.text
    assert client.delete("/jobs/csrf").status_code == 204  # a DELETE has no body: no type needed
    assert_error(client.request("DELETE", "/jobs/csrf", content=b"x", headers={"Content-Type": "text/plain"}), 415,
                 "unsupported_media_type")


def test_the_guard_holds_whatever_the_app_accepts():
    """JsonOnly in front of an app that takes any body (as FastAPI before 0.132 did with text/plain)."""
    import asyncio

    from controller.northbound.browser import JsonOnly

    async def accepts_anything(scope, receive, send):
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def status(content_type: bytes | None, body: bytes = b"{}", method: str = "POST") -> int:
        sent = []
        headers = [(b"content-length", str(len(body)).encode())]
        if content_type is not None:
            headers.append((b"content-type", content_type))

        async def send(message):
            sent.append(message)

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        asyncio.run(JsonOnly(accepts_anything)({"type": "http", "method": method, "path": "/jobs", "headers": headers},
                                               receive, send))
        return sent[0]["status"]

    assert status(b"text/plain") == 415 and status(b"application/x-www-form-urlencoded") == 415
    assert status(None) == 415 and status(b"multipart/form-data; boundary=x") == 415
    assert status(b"text/plain", method="PUT") == 415 and status(b"text/plain", method="PATCH") == 415
    assert status(b"application/json") == 201 and status(None, b"", "DELETE") == 201
    assert status(b"text/plain", method="GET") == 201  # reads are not its business


def test_is_json():
    assert is_json("application/json") and is_json("application/json;charset=utf-8")
    assert not is_json("application/json; charset=utf-8; x=y") and not is_json("text/json")


# -- headers ----------------------------------------------------------------------------------


def test_the_web_view_cannot_be_framed(client):
    for path in ("/", "/ui/app.js", "/ui/app.css"):
        r = client.get(path)
        assert r.status_code == 200
        policy = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "default-src 'self'" in policy and "'unsafe-inline'" not in policy
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers.get_list("x-content-type-options") == ["nosniff"]


def test_the_page_loads_nothing_inline(client):
    """What the policy's script-src and style-src 'self' need: no inline scripts, styles or handlers."""
    page = client.get("/").text
    assert "<style" not in page and " style=" not in page and " on" not in page.replace(" only", "")
    assert all('src="/ui/' in tag for tag in page.split("<script")[1:])


@pytest.mark.parametrize("method, path", [("GET", "/jobs"), ("GET", "/healthz"), ("GET", "/plan"), ("GET", "/metrics"),
                                          ("GET", "/nowhere"), ("POST", "/jobs"), ("GET", "/openapi.json")])
def test_api_answers_are_never_cached_or_sniffed(client, method, path):
    r = client.request(method, path, json={} if method == "POST" else None)
    assert r.headers.get_list("cache-control") == ["no-store"], path
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"


def test_refusals_carry_the_headers_too(client):
    r = client.get("/healthz", headers={"Host": "evil.example"})
    assert r.status_code == 400 and r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["cache-control"] == "no-store"


def test_restricted_config_still_serves_the_api(tmp_path):
    """A token off loopback with allowed_hosts: both rules apply, the Host first."""
    svc = make_service(tmp_path, api={"host": "0.0.0.0", "token": "t" * 20, "allowed_hosts": ["ctl.example"], "insecure_http": True})
    with api_client(svc, base_url="http://ctl.example") as c:
        assert_error(c.get("/jobs"), 401, "unauthorized")
        assert_error(c.get("/jobs", headers={"Host": "0.0.0.0"}), 400, "host_not_allowed")
        assert c.get("/jobs", headers={"Authorization": "Bearer " + "t" * 20}).status_code == 200
    svc.close()

