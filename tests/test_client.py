"""The client library (`controller.client`) and `python -m controller jobs`, against
the real REST API served by uvicorn in a thread on an ephemeral port (urllib
needs a socket), with a ControllerService on a k=4 fat-tree and no switches."""

from __future__ import annotations

import io
import json
import socket
import urllib.error
import urllib.request

import pytest
from rich.console import Console

from controller.app.cli import main
from controller.client import ApiError, Client, Conflict, NotFound, Unauthorized, Unreachable, WaitTimeout, decode_key, encode_key
from controller.config import build_topology, config_from_dict
from controller.northbound.api import serve
from controller.core.service import ControllerService
from controller.store.sqlite import JobStore

TOKEN = "s3cret-token-for-tests"
WORKERS = ["host-1", "host-4", "host-9"]


def start(tmp_path, planner=None, api=None):
    config = config_from_dict(
        {
            "api": {"port": 0, **(api or {})},
            "topology": {"fattree": {"k": 4}, "group_capacity": 2, "entry_capacity": 6},
            "planner": planner or {"debounce_s": 0.0, "wait_s": 10.0},
        }
    )
    service = ControllerService(config, build_topology(config), store=JobStore(tmp_path / "jobs.sqlite"))
    service.start()
    return service, serve(service, config)


@pytest.fixture
def server(tmp_path):
    service, srv = start(tmp_path)
    yield srv
    srv.stop()
    service.close()


@pytest.fixture
def slow_server(tmp_path):
    """Plans 1 s after a change, and POST /jobs waits only 50 ms for it: the job is pending at first."""
    # full plans after a 1 s debounce (admission would plan at once): a job stays pending for a while
    service, srv = start(tmp_path, {"debounce_s": 1.0, "max_delay_s": 1.0, "wait_s": 0.05, "incremental": False})
    yield srv
    srv.stop()
    service.close()


def fast(url, **kw):
    """A client whose back-off does not sleep (the tests count attempts, not seconds)."""
    return Client(url, sleep=lambda s: None, **kw)


class Opener:
    """Wraps urllib's opener: `faults` maps a method to what its next attempts meet
    (`"drop"`: the request reaches the controller but the answer is lost;
    an int: the controller answers that HTTP status instead). Records every attempt."""

    def __init__(self, **faults):
        self.real = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.faults = {k: list(v) for k, v in faults.items()}
        self.attempts = []

    def open(self, request, timeout=None):
        self.attempts.append(request.get_method())
        pending = self.faults.get(request.get_method())
        fault = pending.pop(0) if pending else None
        if fault == "drop":
            self.real.open(request, timeout=timeout).read()  # done at the controller...
            raise ConnectionResetError("connection reset by peer")  # ...but the answer never arrives
        if isinstance(fault, int):
            body = json.dumps({"error": {"code": "unavailable", "message": "try later", "field": None}}).encode()
            raise urllib.error.HTTPError(request.full_url, fault, "fault", {}, io.BytesIO(body))
        return self.real.open(request, timeout=timeout)


# -- the library --------------------------------------------------------------------------------


def test_register_waits_for_the_plan_and_answers_its_group_and_rate(server):
    client = fast(server.url)
    job = client.register("host-0", WORKERS, 1e9, weight=2)
    assert job.state == "planned" and job.planned
    assert job.id.startswith("job-") and len(job.id) == 36  # client-chosen
    assert job.group_address.startswith("239.") and job.rate > 0 and job.mode in ("multicast", "hybrid", "unicast")
    assert job.workers == tuple(WORKERS) and job.weight == 2.0 and job.structure is not None
    assert client.get(job.id) == job
    assert [j.id for j in client.list()] == [job.id]
    assert client.health()["jobs"] == 1


def test_hosts_maps_names_to_addresses_for_the_broadcast(server):
    hosts = fast(server.url).hosts()
    assert len(hosts) == 16 and hosts["host-0"] == "10.0.0.1" and hosts["host-15"] == "10.0.0.16"


def test_a_pending_job_is_waited_for_until_planned(slow_server):
    client = fast(slow_server.url)
    pending = client.register("host-0", WORKERS, 1e9, job_id="slow", wait=False)
    assert pending.state == "pending" and pending.rate is None and pending.mode is None
    planned = Client(slow_server.url).wait_planned("slow", timeout=10, poll=0.05)
    assert planned.state == "planned" and planned.rate > 0
    assert Client(slow_server.url).register("host-2", ["host-3"], 1e9, timeout=10, poll=0.05).state == "planned"


def test_a_wait_that_times_out_leaves_the_job_registered(slow_server):
    client = Client(slow_server.url)
    with pytest.raises(WaitTimeout) as info:
        client.register("host-0", WORKERS, 1e9, job_id="late", timeout=0.1, poll=0.02)
    assert info.value.job.id == "late" and info.value.job.state == "pending"
    assert [j.id for j in client.list()] == ["late"]


def test_delete_and_unknown_ids(server):
    client = fast(server.url)
    job = client.register("host-0", WORKERS, 1e9)
    assert client.delete(job.id) is True
    assert client.list() == []
    with pytest.raises(NotFound) as info:
        client.get(job.id)
    assert (info.value.status, info.value.code, info.value.field) == (404, "not_found", "id")
    with pytest.raises(NotFound):
        client.delete(job.id)
    assert client.delete(job.id, missing_ok=True) is False


def test_the_context_manager_deletes_the_job_also_on_an_exception(server):
    client = fast(server.url)
    with client.job("host-0", WORKERS, 1e9) as job:
        assert [j.id for j in client.list()] == [job.id] and job.planned
    assert client.list() == []
    with pytest.raises(RuntimeError, match="training crashed"):
        with client.job("host-0", WORKERS, 1e9, job_id="crashes"):
            assert [j.id for j in client.list()] == ["crashes"]
            raise RuntimeError("training crashed")
    assert client.list() == []


def test_the_context_manager_deletes_a_job_whose_plan_never_came(slow_server):
    client = Client(slow_server.url)
    with pytest.raises(WaitTimeout):
        with client.job("host-0", WORKERS, 1e9, timeout=0.05):
            pytest.fail("entered without a plan")
    assert client.list() == []


def test_a_registration_whose_answer_was_lost_is_retried_into_one_job(server):
    opener = Opener(POST=["drop", "drop"])
    job = fast(server.url, opener=opener).register("host-0", WORKERS, 1e9)
    assert opener.attempts[:3] == ["POST"] * 3  # two lost answers, then the existing job (200)
    assert job.planned
    jobs = fast(server.url).list()
    assert [j.id for j in jobs] == [job.id]
    # the retry carried the same key: the registrant has the job's key; a listing never does
    assert job.auth_key is not None and len(job.auth_key) == 32 and jobs[0].auth_key is None


def test_the_job_handle_carries_its_key_and_only_the_registrant_s(server):
    client = fast(server.url)
    key = bytes(range(32))
    job = client.register("host-0", WORKERS, 1e9, job_id="keyed", auth_key=key)
    assert job.auth_key == key and key.hex() not in repr(job) and "auth_key" not in job.raw
    assert client.get("keyed").auth_key is None  # GET never answers it
    assert client.get("keyed").with_key(encode_key(key)).auth_key == key  # a worker gets it out of band
    # someone else registering the same id and spec gets the job, not its key
    assert fast(server.url).register("host-0", WORKERS, 1e9, job_id="keyed").auth_key is None
    assert decode_key(encode_key(key)) == key
    with pytest.raises(ValueError):
        decode_key(encode_key(key[:31]))
    with pytest.raises(ValueError):
        client.register("host-0", WORKERS, 1e9, auth_key=b"short")


def test_a_delete_whose_answer_was_lost_is_success(server):
    client = fast(server.url)
    job = client.register("host-0", WORKERS, 1e9)
    opener = Opener(DELETE=["drop"])
    assert fast(server.url, opener=opener).delete(job.id) is True
    assert opener.attempts == ["DELETE", "DELETE"]  # the retry met 404: the first attempt did it
    assert client.list() == []


def test_5xx_is_retried_with_back_off_and_4xx_is_not(server):
    slept = []
    opener = Opener(POST=[503, 502])
    client = Client(server.url, opener=opener, sleep=slept.append, backoff=0.5)
    assert client.register("host-0", WORKERS, 1e9).planned
    assert opener.attempts[:3] == ["POST"] * 3 and len(slept) == 2
    assert 0.25 <= slept[0] <= 0.5 and 0.5 <= slept[1] <= 1.0  # doubling, with jitter
    opener.attempts.clear()
    with pytest.raises(ApiError) as info:
        client.register("host-0", ["host-0"], 1e9)
    assert opener.attempts == ["POST"]
    assert (info.value.status, info.value.code, info.value.field) == (422, "ps_among_workers", "workers[0]")
    opener = Opener(GET=[503] * 3)
    with pytest.raises(ApiError) as info:
        fast(server.url, opener=opener, retries=2).list()
    assert info.value.status == 503 and info.value.message == "try later" and len(opener.attempts) == 3


def test_an_unreachable_controller(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    slept = []
    client = Client(f"http://127.0.0.1:{port}", retries=2, sleep=slept.append)
    with pytest.raises(Unreachable, match="after 3 attempts"):
        client.list()
    assert len(slept) == 2
    with pytest.raises(ValueError):
        Client("127.0.0.1:8080")


def test_identical_re_registration_and_a_different_spec_under_the_same_id(server):
    client = fast(server.url)
    first = client.register("host-0", WORKERS, 1e9, job_id="mine")
    assert client.register("host-0", list(reversed(WORKERS)), 1e9, job_id="mine") == first
    with pytest.raises(Conflict) as info:
        client.register("host-0", WORKERS, 2e9, job_id="mine")
    assert info.value.status == 409 and info.value.code == "duplicate_id" and "different demand" in info.value.message
    assert client.get("mine").demand == 1e9


def test_the_token_off_loopback(tmp_path, monkeypatch):
    service, srv = start(tmp_path, api={"host": "0.0.0.0", "token": TOKEN, "insecure_http": True})
    try:
        url = f"http://127.0.0.1:{srv.port}"
        with pytest.raises(Unauthorized) as info:
            fast(url).list()
        assert info.value.code == "unauthorized"
        with pytest.raises(Unauthorized):
            fast(url, token="wrong-token-of-some-length").list()
        client = fast(url, token=TOKEN)
        assert client.register("host-0", WORKERS, 1e9).planned
        assert TOKEN not in repr(client)
        # the CLI reads it from the environment
        assert main(["jobs", "list", "--url", url, "--json"]) == 2
        assert main(["jobs", "list", "--url", url, "--token-env", "TEST_MCAST_TOKEN", "--json"]) == 2
        monkeypatch.setenv("TEST_MCAST_TOKEN", TOKEN)
        assert main(["jobs", "list", "--url", url, "--token-env", "TEST_MCAST_TOKEN", "--json"]) == 0
        monkeypatch.setenv("MCAST_CONTROLLER_TOKEN", TOKEN)  # the default variable
        assert main(["jobs", "list", "--url", url, "--json"]) == 0
    finally:
        srv.stop()
        service.close()


# -- the CLI ------------------------------------------------------------------------------------


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_add_list_show_delete_as_json(server, capsys):
    url = ["--url", server.url, "--json"]
    code, out, _ = run_cli(capsys, "jobs", "add", "host-0", *WORKERS, "--demand", "1G", "--id", "cli-1", *url)
    assert code == 0
    job = json.loads(out)
    assert job["id"] == "cli-1" and job["state"] == "planned" and job["demand"] == 1e9
    code, out, _ = run_cli(capsys, "jobs", "list", *url)
    assert code == 0 and [j["id"] for j in json.loads(out)["jobs"]] == ["cli-1"]
    code, out, _ = run_cli(capsys, "jobs", "show", "cli-1", *url)
    assert code == 0 and json.loads(out)["group_address"] == job["group_address"]
    code, out, _ = run_cli(capsys, "jobs", "delete", "cli-1", *url)
    assert code == 0 and json.loads(out) == {"jobs": [{"id": "cli-1", "deleted": True}]}
    code, out, _ = run_cli(capsys, "jobs", "list", *url)
    assert json.loads(out) == {"jobs": []}


def test_cli_add_writes_the_job_key_for_the_launcher(server, capsys, tmp_path):
    path = tmp_path / "job.key"
    code, out, _ = run_cli(capsys, "jobs", "add", "host-0", *WORKERS, "--demand", "1G", "--id", "cli-k",
                           "--url", server.url, "--json", "--key-file", str(path))
    assert code == 0 and "auth_key" not in out  # the JSON shown never has it; the file does
    assert len(decode_key(path.read_text().strip())) == 32 and path.stat().st_mode & 0o777 == 0o600


def test_cli_tables(server, capsys, monkeypatch):
    monkeypatch.setattr("rich.console.Console", lambda *a, **kw: Console(**{"width": 200, **kw}))
    code, out, err = run_cli(capsys, "jobs", "add", "host-0", *WORKERS, "--demand", "500M", "--id", "tab", "--url", server.url)
    assert code == 0
    assert "group address" in out and "239." in out and "planned" in out and "500 Mbit/s" in out
    code, out, _ = run_cli(capsys, "jobs", "list", "--url", server.url)
    assert code == 0 and "tab" in out and "host-1, host-4, host-9" in out
    code, out, _ = run_cli(capsys, "jobs", "show", "tab", "--url", server.url)
    assert code == 0 and "PS unicast to" in out and "entries at" in out
    code, _, err = run_cli(capsys, "jobs", "delete", "tab", "--url", server.url)
    assert code == 0 and "tab: deleted" in err


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["add", "host-0", "host-1", "--demand", "fast"], 2, "expected a positive rate"),
        (["add", "host-0", "host-1", "--demand", "-5"], 2, "expected a positive rate"),
        (["add", "host-0"], 2, "required"),
        (["add", "host-0", "host-99", "--demand", "1G"], 2, "unknown host 'host-99'"),
        (["add", "host-0", "host-1", "--demand", "1G", "--id", "bad id"], 2, "invalid_id"),
        (["show", "nope"], 2, "404 not_found (id): no job with id 'nope'"),
        (["delete", "nope"], 2, "no job with id 'nope'"),
        (["frobnicate"], 2, "invalid choice"),
    ],
)
def test_cli_bad_inputs(server, capsys, argv, code, message):
    got, out, err = run_cli(capsys, "jobs", *argv, "--url", server.url)
    assert got == code and message in err and err.startswith(("error:", "usage:")), err
    assert out == ""


def test_cli_conflict_missing_ok_and_unreachable(server, capsys):
    base = ["--url", server.url, "--json"]
    assert run_cli(capsys, "jobs", "add", "host-0", "host-1", "--demand", "1G", "--id", "x", *base)[0] == 0
    code, _, err = run_cli(capsys, "jobs", "add", "host-0", "host-1", "--demand", "2G", "--id", "x", *base)
    assert code == 2 and "409 duplicate_id" in err and "different demand" in err
    code, out, _ = run_cli(capsys, "jobs", "delete", "x", "gone", "--missing-ok", *base)
    assert code == 0 and json.loads(out) == {"jobs": [{"id": "x", "deleted": True}, {"id": "gone", "deleted": False}]}
    code, out, err = run_cli(capsys, "jobs", "delete", "gone", *base)
    assert code == 2 and json.loads(out) == {"jobs": []} and "no job with id 'gone'" in err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out, err = run_cli(capsys, "jobs", "list", "--url", f"http://127.0.0.1:{port}", "--retries", "0")
    assert code == 1 and err.startswith("error:") and "no answer after 1 attempt:" in err
    code, _, err = run_cli(capsys, "jobs", "list", "--url", "ftp://x")
    assert code == 2 and "not an http(s) URL" in err


def test_cli_add_that_is_not_planned_in_time_exits_1(slow_server, capsys):
    code, out, err = run_cli(capsys, "jobs", "add", "host-0", "host-1", "--demand", "1G", "--wait", "0.05",
                             "--url", slow_server.url, "--json")
    assert code == 1 and "still pending" in err
    assert json.loads(out)["state"] == "pending"  # the job as last seen; it stays registered



def test_the_body_s_exception_wins_over_a_failed_delete(server, caplog):
    opener = Opener(DELETE=[503])
    client = fast(server.url, opener=opener, retries=0)
    with pytest.raises(RuntimeError, match="training crashed"):
        with client.job("host-0", WORKERS, 1e9, job_id="left"):
            raise RuntimeError("training crashed")
    assert "job left may still be registered" in caplog.text
    assert [j.id for j in client.list()] == ["left"]


class Redirector:
    """A stand-in for a follower of a controller cluster: every request is answered
    with a 307 to `leader` (the same path), as the follower's REST API does, except
    GET /cluster, which lists itself and the leader as the cluster's members."""

    def __init__(self, leader: str | None = None) -> None:
        import http.server
        import threading

        outer = self
        self.seen: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _redirect(self) -> None:
                if self.command == "GET" and self.path == "/cluster":
                    members = [{"instance": str(i), "url": u} for i, u in enumerate({outer.url, outer.leader or outer.url})]
                    body = json.dumps({"backend": "etcd", "role": "follower", "members": members}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                outer.seen.append(self.command)
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self.send_response(307)
                self.send_header("Location", (outer.leader or outer.url) + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_DELETE = _redirect

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.leader = leader
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_follower_s_307_is_followed_with_the_same_method_and_body(server):
    follower = Redirector(server.url)
    try:
        client = fast(follower.url)
        job = client.register("host-0", WORKERS, 1e9, job_id="via-follower")
        assert job.id == "via-follower" and job.planned
        assert [j.id for j in Client(server.url).list()] == ["via-follower"]
        assert client.delete("via-follower") is True
        assert Client(server.url).list() == []
        assert follower.seen[:1] == ["POST"] and "DELETE" in follower.seen
    finally:
        follower.close()


def test_a_redirect_loop_ends_in_an_error_without_retrying_forever():
    loop = Redirector()  # redirects to itself
    slept = []
    try:
        with pytest.raises(ApiError) as info:
            Client(loop.url, retries=1, sleep=slept.append, backoff=0.01).list()
        assert info.value.status == 307
        # the first request and MAX_REDIRECTS redirects; a 3xx is not transient: no retry
        from controller.client.client import MAX_REDIRECTS

        assert len(loop.seen) == MAX_REDIRECTS + 1 and slept == []
    finally:
        loop.close()


def test_cli_table_in_a_pipe_keeps_every_id_on_one_line(server, capsys):
    # capsys is no terminal, as a pipe is not: rich would fold the table to 80 columns
    long_id = "retry-job-with-a-long-identifier-0123456789"
    code, _, _ = run_cli(capsys, "jobs", "add", "host-0", *WORKERS, "--demand", "500M", "--id", long_id,
                         "--url", server.url)
    assert code == 0
    code, out, _ = run_cli(capsys, "jobs", "list", "--url", server.url)
    assert code == 0
    row = [line for line in out.splitlines() if long_id in line]
    assert len(row) == 1 and "host-1, host-4, host-9" in row[0], out
    run_cli(capsys, "jobs", "delete", long_id, "--url", server.url)


def test_broadcasting_announces_a_phase_and_answers_its_rate(server):
    client = fast(server.url)
    a = client.register("host-0", ["host-4", "host-5"], 1e12, job_id="a")
    b = client.register("host-8", ["host-4", "host-5"], 1e12, job_id="b")
    a, b = client.get("a"), client.get("b")  # planned together
    assert a.broadcasting is None and a.rate == a.planned_rate
    idle = client.broadcasting("b", False)
    assert idle.broadcasting is False and idle.rate == pytest.approx(0.05 * b.planned_rate)
    on = client.broadcasting("a", True)
    assert on.broadcasting is True and on.rate > 1.5 * on.planned_rate
    with pytest.raises(NotFound):
        client.broadcasting("nope", True)
    assert client.broadcasting("a", False).rate == pytest.approx(0.05 * a.planned_rate)


def test_a_broadcast_not_planned_is_a_conflict(slow_server):
    client = fast(slow_server.url)
    job = client.register("host-0", WORKERS, 1e9, wait=False)
    assert job.state == "pending"
    with pytest.raises(Conflict) as raised:
        client.broadcasting(job.id, True)
    assert raised.value.code == "not_planned"
