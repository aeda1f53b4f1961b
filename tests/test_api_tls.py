"""HTTPS on the REST API (`api.tls`, docs/security.md "TLS on the API"): the API
over TLS with a trustme CA, the client verifying it (`ca_file`, `--ca-file`,
$MCAST_CA_FILE), the config refusing plain HTTP off loopback unless
`api.insecure_http`, the client refusing to send its token over http:// off
loopback, and the redirects of a follower (docs/ha.md): the follower redirects
only to a leader URL a live member advertises, and the client follows only such
URLs, never sending its token anywhere else."""

from __future__ import annotations

import dataclasses
import http.server
import json
import ssl
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import etcd_helper  # noqa: E402
import tls_helper  # noqa: E402

from controller.app import cli as app_cli  # noqa: E402
from controller.client import Client, InsecureTransport, RedirectRefused, Unreachable, UntrustedCertificate  # noqa: E402
from controller.client.errors import ApiError  # noqa: E402
from controller.config import ConfigError, ServerTls, build_topology, config_from_dict, load_config  # noqa: E402
from controller.core.service import ControllerService  # noqa: E402
from controller.northbound.api import create_app, serve  # noqa: E402
from controller.store.sqlite import JobStore  # noqa: E402

TOKEN = "s3cret-token-for-tls-tests"
TOPOLOGY = {"fattree": {"k": 4}, "group_capacity": 2, "entry_capacity": 6}
PLANNER = {"debounce_s": 0.0, "wait_s": 10.0}
TLS = {"cert": "api.crt", "key": "api.key"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    """api.{crt,key} and api-ca.crt from one CA (for 127.0.0.1 and localhost)."""
    d = tmp_path_factory.mktemp("api-certs")
    tls_helper.pem_files(tls_helper.new_ca(), d, "api")
    return d


def tls_config(certs: Path, **api):
    return config_from_dict({"api": {"port": 0, "token": TOKEN, "tls": TLS, **api}, "topology": TOPOLOGY,
                             "planner": PLANNER}, certs)


@pytest.fixture(scope="module")
def https_server(certs, tmp_path_factory):
    config = tls_config(certs)
    service = ControllerService(config, build_topology(config),
                                store=JobStore(tmp_path_factory.mktemp("tls-store") / "jobs.sqlite"))
    service.start()
    server = serve(service, config)
    yield server
    server.stop()
    service.close()


def no_sleep(seconds: float) -> None:
    pass


# -- the config -------------------------------------------------------------------------


def test_tls_paths_are_relative_to_the_config_file(certs):
    cfg = certs / "controller.yaml"
    cfg.write_text("api: {host: 0.0.0.0, token: " + TOKEN + ", tls: {cert: api.crt, key: api.key}}\n"
                   "topology: {fattree: {k: 4}}\n")
    c = load_config(cfg)
    assert c.api.tls == ServerTls(certs / "api.crt", certs / "api.key") and c.api.scheme == "https"


def test_off_loopback_plain_http_is_refused_unless_the_config_accepts_it():
    base = {"host": "0.0.0.0", "token": TOKEN}
    with pytest.raises(ConfigError, match=r"^api\.tls: required when api\.host \(0\.0\.0\.0\) is not a loopback"):
        config_from_dict({"api": base, "topology": TOPOLOGY})
    c = config_from_dict({"api": {**base, "insecure_http": True}, "topology": TOPOLOGY})
    assert c.api.tls is None and c.api.insecure_http and c.api.scheme == "http"
    # loopback needs neither
    assert config_from_dict({"topology": TOPOLOGY}).api.tls is None


def test_the_app_refuses_plain_http_off_loopback_too(tmp_path):
    """A config built in code, past the reader, still cannot serve plain HTTP off loopback."""
    config = config_from_dict({"topology": TOPOLOGY})
    config = dataclasses.replace(config, api=dataclasses.replace(config.api, host="0.0.0.0", token=TOKEN))
    service = ControllerService(config, build_topology(config), store=JobStore(tmp_path / "jobs.sqlite"))
    try:
        with pytest.raises(ValueError, match="api.tls is required"):
            create_app(service, config)
    finally:
        service.close()


@pytest.mark.parametrize(
    "api, where, message",
    [
        ({"tls": {"cert": "api.crt"}}, "api.tls.key", "missing required key"),
        ({"tls": {"cert": "api.crt", "key": "api.key", "ca": "api-ca.crt"}}, "api.tls.ca", "unknown key"),
        ({"tls": {"cert": "nope.crt", "key": "api.key"}}, "api.tls.cert", "cannot read"),
        ({"tls": {"cert": "api.key", "key": "api.key"}}, "api.tls.cert", "holds no PEM certificate"),
        ({"tls": {"cert": "api.crt", "key": "other.key"}}, "api.tls.key", "is not the private key of"),
        ({"tls": TLS, "insecure_http": True}, "api.insecure_http", "applies only without api.tls"),
        ({"insecure_http": "yes"}, "api.insecure_http", "expected a boolean"),
    ],
)
def test_bad_api_tls_is_refused_naming_the_key(certs, api, where, message):
    tls_helper.pem_files(tls_helper.new_ca(), certs, "other")
    with pytest.raises(ConfigError, match=rf"^{where.replace('.', '[.]')}: .*{message}"):
        config_from_dict({"api": api, "topology": TOPOLOGY}, certs)


def test_with_tls_the_advertised_url_must_be_https(certs):
    store = {"backend": "etcd", "etcd": {"advertise_url": "http://10.0.0.7:8080"}}
    with pytest.raises(ConfigError, match=r"^store\.etcd\.advertise_url: must be an https:// URL when api\.tls"):
        config_from_dict({"api": {"tls": TLS}, "store": store, "topology": TOPOLOGY}, certs)
    store["etcd"]["advertise_url"] = "https://10.0.0.7:8443"
    assert config_from_dict({"api": {"tls": TLS}, "store": store, "topology": TOPOLOGY}, certs).api.tls is not None


# -- the API over TLS ---------------------------------------------------------------------


def test_the_api_speaks_https_only_with_tls_1_2_at_least(https_server):
    assert https_server.url.startswith("https://127.0.0.1:")
    assert https_server._server.config.ssl.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(Unreachable):  # plain HTTP to the TLS port gets no answer
        Client(https_server.url.replace("https://", "http://"), retries=0, timeout=3).health()


def test_the_client_with_the_ca_file_registers_and_lists(https_server, certs):
    client = Client(https_server.url, TOKEN, ca_file=str(certs / "api-ca.crt"), sleep=no_sleep)
    job = client.register("host-0", ["host-1", "host-5"], 1e9, job_id="over-tls")
    assert job.planned and job.auth_key is not None
    assert [j.id for j in client.list()] == ["over-tls"]
    assert client.delete("over-tls") is True


def test_the_client_without_the_ca_refuses_the_certificate_at_once(https_server):
    slept: list[float] = []
    client = Client(https_server.url, TOKEN, sleep=slept.append)  # the system's CAs: trustme's is not among them
    with pytest.raises(UntrustedCertificate, match="certificate did not verify .*--ca-file"):
        client.list()
    assert slept == []  # not retried: it would fail again


def test_a_ca_file_that_does_not_load_is_a_clear_error(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(ValueError, match=r"ca_file .*ca\.pem: cannot load CA certificates"):
        Client("https://127.0.0.1:1", TOKEN, ca_file=str(bad))


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = app_cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_verifies_with_ca_file_or_the_environment(https_server, certs, capsys, monkeypatch):
    monkeypatch.setenv("MCAST_CONTROLLER_TOKEN", TOKEN)
    monkeypatch.delenv("MCAST_CA_FILE", raising=False)
    code, out, err = run_cli(capsys, "jobs", "list", "--url", https_server.url, "--json", "--retries", "0")
    assert code == 1 and "certificate did not verify" in err and out == ""
    code, out, err = run_cli(capsys, "jobs", "list", "--url", https_server.url, "--json",
                             "--ca-file", str(certs / "api-ca.crt"))
    assert code == 0 and json.loads(out) == {"jobs": []}
    monkeypatch.setenv("MCAST_CA_FILE", str(certs / "api-ca.crt"))
    code, out, err = run_cli(capsys, "jobs", "list", "--url", https_server.url, "--json")
    assert code == 0 and json.loads(out) == {"jobs": []}


# -- the token only over https or to loopback ----------------------------------------------------


class Recorder:
    """A tiny HTTP server on a loopback port that records every request (method,
    path, Authorization header) and answers `status` (GET /cluster: `members`)."""

    def __init__(self, status: int = 404, members: list[str] | None = None, redirect: str | None = None) -> None:
        outer = self
        self.requests: list[tuple[str, str, str | None]] = []
        self.cluster_reads = 0
        self.members = members
        self.redirect = redirect

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command == "GET" and self.path == "/cluster" and outer.members is not None:
                    outer.cluster_reads += 1
                    body = json.dumps({"backend": "etcd", "role": "follower",
                                       "members": [{"instance": u, "url": u} for u in outer.members]}).encode()
                    self.send_response(200)
                else:
                    outer.requests.append((self.command, self.path, self.headers.get("Authorization")))
                    body = b'{"error": {"code": "test", "message": "recorded", "field": null}}'
                    self.send_response(307 if outer.redirect else status)
                    if outer.redirect:
                        self.send_header("Location", outer.redirect + self.path)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class CountingOpener:
    """An opener that counts what it is asked to open (and opens nothing)."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    def open(self, request, timeout=None):  # noqa: ANN001, ANN201
        self.opened.append(request.full_url)
        raise OSError("this opener opens nothing")


def test_the_token_is_never_sent_over_http_off_loopback():
    opener = CountingOpener()
    with pytest.raises(InsecureTransport, match=r"refusing to send the token over http:// to 192\.0\.2\.1"):
        Client("http://192.0.2.1:1", TOKEN, opener=opener, retries=0).list()
    assert opener.opened == []  # refused before connecting
    for url in ("http://127.0.0.1:1", "http://127.8.9.10:1", "http://[::1]:1", "http://localhost:1",
                "https://192.0.2.1:1"):
        Client(url, TOKEN)  # loopback, or https: allowed
    Client("http://192.0.2.1:1")  # no token, nothing to leak


def test_a_redirect_to_http_off_loopback_does_not_carry_the_token():
    """Even to an advertised member: the token goes over http:// to loopback only."""
    far = "http://192.0.2.1:1"
    follower = Recorder(members=[far], redirect=far)
    try:
        slept: list[float] = []
        with pytest.raises(InsecureTransport, match="192.0.2.1"):
            Client(follower.url, TOKEN, sleep=slept.append).list()
        assert [r[0] for r in follower.requests] == ["GET"]  # the one request that was redirected
    finally:
        follower.close()


def test_a_redirect_back_to_the_given_url_needs_no_membership():
    """A standalone controller lists no members; a redirect to its own URL is still
    followed (the token goes there anyway), up to the hop limit."""
    server = Recorder(members=None)
    server.redirect = server.url
    try:
        with pytest.raises(ApiError) as info:
            Client(server.url, TOKEN, retries=0, sleep=no_sleep).list()
        assert info.value.status == 307
        from controller.client.client import MAX_REDIRECTS

        assert [r[1] for r in server.requests] == ["/jobs"] * (MAX_REDIRECTS + 1)  # never /cluster
    finally:
        server.close()


def test_the_member_set_is_cached_and_asked_again_before_a_refusal():
    leader = Recorder(status=404)
    follower = Recorder(members=[], redirect=leader.url)
    try:
        follower.members = [follower.url]
        client = Client(follower.url, TOKEN, retries=0, sleep=no_sleep)
        with pytest.raises(RedirectRefused):
            client.list()
        assert follower.cluster_reads == 1 and leader.requests == []  # read once, not twice in a row
        follower.members = [follower.url, leader.url]  # the leader joined
        with pytest.raises(ApiError) as info:
            client.list()
        assert info.value.status == 404 and follower.cluster_reads == 2  # the cached set missed it: asked again
        assert leader.requests == [("GET", "/jobs", f"Bearer {TOKEN}")]
        with pytest.raises(ApiError):
            client.list()
        assert follower.cluster_reads == 2  # now known: the cached set is enough
    finally:
        follower.close()
        leader.close()


# -- redirects (docs/ha.md) -------------------------------------------------------------


needs_etcd = pytest.mark.skipif(bool(etcd_helper.unavailable()), reason=str(etcd_helper.unavailable()))


class Follower:
    """One controller instance in this process on a private etcd, a follower: the
    leader key is written first, naming `leader_url` under the instance id `rogue`
    (so this instance never wins)."""

    def __init__(self, tmp_path: Path, leader_url: str, api: dict | None = None, base: Path | None = None) -> None:
        from controller.app.cluster import Cluster
        from controller.store.etcd import EtcdClient, put

        self.etcd = etcd_helper.EtcdServer(tmp_path).start()
        self.prefix = f"/tls-{uuid.uuid4().hex[:8]}/"
        self.client = EtcdClient([self.etcd.url])
        self.client.txn([], [put(self.prefix + "leader", json.dumps({"instance": "rogue", "url": leader_url}))])
        config = config_from_dict({
            "api": {"port": 0, "token": TOKEN, **(api or {})}, "topology": TOPOLOGY, "planner": PLANNER,
            "store": {"backend": "etcd", "etcd": {"endpoints": [self.etcd.url], "prefix": self.prefix}},
        }, base or tmp_path)
        self.service = self.server = self.cluster = None
        try:
            self.service = ControllerService(config, build_topology(config))
            self.service.cluster = self.cluster = Cluster(self.service, self.service.store, config, None)
            self.server = serve(self.service, config)
            self.cluster.url = self.cluster.election.url = self.server.url
            self.cluster.start()
            self.wait(lambda: self.cluster.status()["members"] and self.cluster.election.leader is not None,
                      "the follower to see itself as a member and the leader key")
        except BaseException:
            self.stop()
            raise

    def announce(self, instance: str, url: str) -> None:
        """A members record (what an instance writes for itself), without a lease."""
        from controller.store.etcd import put

        self.client.txn([], [put(self.prefix + "members/" + instance, json.dumps({"instance": instance, "url": url}))])
        self.wait(lambda: self.cluster.election.is_member(instance, url), f"{url} to be a member")

    @staticmethod
    def wait(check, what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        if self.server is not None:
            self.server.stop()
        if self.service is not None:
            self.service.close()
        self.etcd.stop()


@needs_etcd
def test_a_follower_does_not_redirect_to_a_leader_no_member_advertises(tmp_path):
    elsewhere = Recorder()
    follower = Follower(tmp_path, elsewhere.url)
    try:
        status = follower.cluster.status()
        assert status["role"] == "follower" and status["leader"]["url"] == elsewhere.url
        assert status["members"] == [{"instance": follower.cluster.instance, "url": follower.server.url}]
        client = Client(follower.server.url, TOKEN, retries=1, sleep=no_sleep)
        with pytest.raises(ApiError) as info:
            client.register("host-0", ["host-1"], 1e9, job_id="not-elsewhere")
        assert info.value.status == 503 and info.value.code == "no_leader"
        assert elsewhere.requests == []
        listed = client._request("GET", "/cluster")[1]["members"]
        assert [m["url"] for m in listed] == [follower.server.url]
        # once the URL is a member's, the follower redirects there and the client follows
        follower.announce("rogue", elsewhere.url)
        with pytest.raises(ApiError, match="recorded"):
            client.register("host-0", ["host-1"], 1e9, job_id="to-a-member")
        assert elsewhere.requests == [("POST", "/jobs", f"Bearer {TOKEN}")]
    finally:
        follower.stop()
        elsewhere.close()


@needs_etcd
def test_the_client_does_not_follow_a_redirect_to_a_url_the_cluster_does_not_advertise(tmp_path, monkeypatch):
    """The follower's own check switched off (as on an instance that lacks it): its
    307 names `elsewhere`, and the client, which asks /cluster, refuses to go there."""
    elsewhere = Recorder()
    follower = Follower(tmp_path, elsewhere.url)
    try:
        monkeypatch.setattr(follower.cluster, "leader_url", lambda: follower.cluster.election.leader.url)
        client = Client(follower.server.url, TOKEN, retries=2, sleep=no_sleep)
        with pytest.raises(RedirectRefused, match=rf"redirected to {elsewhere.url}/jobs, which no member"):
            client.register("host-0", ["host-1"], 1e9, job_id="not-elsewhere")
        assert elsewhere.requests == []  # nothing at all, the token least of all
    finally:
        follower.stop()
        elsewhere.close()


@needs_etcd
def test_the_client_does_not_follow_a_redirect_from_https_to_http(tmp_path, certs):
    elsewhere = Recorder()
    follower = Follower(tmp_path, elsewhere.url, api={"tls": TLS}, base=certs)
    try:
        assert follower.server.url.startswith("https://")
        follower.announce("rogue", elsewhere.url)  # a member, but over http://
        client = Client(follower.server.url, TOKEN, retries=1, sleep=no_sleep, ca_file=str(certs / "api-ca.crt"))
        with pytest.raises(RedirectRefused, match="it leaves https://"):
            client.register("host-0", ["host-1"], 1e9, job_id="downgrade")
        assert elsewhere.requests == []
        members = client._request("GET", "/cluster")[1]["members"]
        assert {m["url"] for m in members} == {follower.server.url, elsewhere.url}
    finally:
        follower.stop()
        elsewhere.close()
