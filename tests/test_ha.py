"""Several controller instances on one etcd store (docs/ha.md), without switches:
the election, the REST API of followers (307 to the leader, 503 with Retry-After
without one), /cluster and the metrics, takeover after SIGKILL and after a clean
stop, the old leader frozen past its lease (SIGSTOP) and resumed, and a job
registered at a follower during a takeover landing exactly once.

Each test starts its own etcd (tests/etcd_helper.py) and controller processes
(`python -m controller run`, this worktree's package); they declare a 2x2
leaf-spine whose switches never connect, so the leader plans but writes nothing.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mininet"))
import etcd_helper  # noqa: E402
from emu_controller import ControllerProcess  # noqa: E402

if etcd_helper.unavailable():
    pytest.skip(etcd_helper.unavailable(), allow_module_level=True)
try:
    import os_ken  # noqa: F401
except ImportError:
    pytest.skip("os-ken is not installed (the controller opens its OpenFlow listener)", allow_module_level=True)

TTL = 2
# planner.incremental on (the default): jobs are admitted one by one, and a new leader
# restores the structures its predecessor served (core.served_store, docs/ha.md); no
# re-optimisation during a test (reoptimise_after_s): the takeover is what is compared
CONFIG = """\
api: {{host: 127.0.0.1, port: 0}}
store:
  backend: etcd
  etcd: {{endpoints: ["{etcd}"], prefix: "{prefix}", lease_ttl_s: {ttl}}}
planner: {{debounce_s: 0.05, max_delay_s: 0.2, wait_s: 10, reoptimise_after_s: 3600}}
topology:
  leaf_spine: {{leaves: 2, spines: 2, hosts_per_leaf: 2}}
"""


def free_port() -> int:
    return etcd_helper.free_port()


def poll(check, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (AssertionError, OSError, ValueError) as e:
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def request(url: str, method: str = "GET", body: dict | None = None, timeout: float = 10) -> tuple[int, dict | None, dict]:
    """(status, JSON body, headers); redirects are not followed."""
    data = json.dumps(body).encode() if body is not None else None

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with opener.open(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None, dict(r.headers)
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw else None, dict(e.headers)


class Cluster:
    def __init__(self, tmp_path: Path, n: int) -> None:
        self.etcd = etcd_helper.EtcdServer(tmp_path).start()
        prefix = f"/ha-{uuid.uuid4().hex[:8]}/"
        cfg = tmp_path / "controller.yaml"
        cfg.write_text(CONFIG.format(etcd=self.etcd.url, prefix=prefix, ttl=TTL))
        self.ctls = [ControllerProcess(cfg, free_port(), tmp_path / f"controller-{i}.log") for i in range(n)]
        try:
            for c in self.ctls:
                c.start(60)
        except BaseException:
            self.stop()
            raise

    def status(self, c) -> dict:
        return request(c.url + "/cluster", timeout=2)[1]

    def alive(self):
        return [c for c in self.ctls if c.proc is not None and c.proc.poll() is None]

    def leader(self, among=None, timeout: float = 15.0):
        """The one instance that says it leads, once every other one agrees."""
        def check():
            among_ = among or self.alive()
            st = {c: self.status(c) for c in among_}
            leaders = [c for c, s in st.items() if s["role"] == "leader"]
            if len(leaders) != 1:
                return None
            lead = leaders[0]
            term = st[lead]["term"]
            if all(s["leader"] and s["leader"]["term"] == term and s["leader"]["url"] == lead.url for s in st.values()):
                return lead
            return None
        return poll(check, timeout, "one leader that every instance agrees on")

    def stop(self) -> None:
        for c in self.ctls:
            if c.proc is not None and c.proc.poll() is None:
                try:
                    os.kill(c.proc.pid, signal.SIGCONT)
                except OSError:
                    pass
            c.stop()
        self.etcd.stop()


@pytest.fixture
def cluster3(tmp_path):
    cl = Cluster(tmp_path, 3)
    yield cl
    cl.stop()


def job_body(job_id: str, ps: str = "host-0", workers=("host-1", "host-2", "host-3")) -> dict:
    return {"id": job_id, "ps": ps, "workers": list(workers), "demand": 1e9}


def metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_one_leader_followers_redirect_and_serve_reads(cluster3):
    leader = cluster3.leader()
    followers = [c for c in cluster3.ctls if c is not leader]
    term = cluster3.status(leader)["term"]
    assert term > 0
    # /healthz and the metrics say the role
    assert request(leader.url + "/healthz")[1]["role"] == "leader"
    assert {request(f.url + "/healthz")[1]["role"] for f in followers} == {"follower"}
    assert metric(leader.url, "mcast_ha_leader") == 1 and all(metric(f.url, "mcast_ha_leader") == 0 for f in followers)
    assert all(metric(c.url, "mcast_ha_term") == term for c in cluster3.ctls)
    # every instance lists every instance as a member, with its advertised URL
    urls = {c.url for c in cluster3.ctls}
    for c in cluster3.ctls:
        poll(lambda c=c: {m["url"] for m in cluster3.status(c)["members"]} == urls, 5, "every member listed")

    status, body, _ = request(leader.url + "/jobs", "POST", job_body("a"))
    assert status == 201, body
    address = body["group_address"]
    # a write at a follower: 307 to the same path at the leader, nothing stored by the follower
    status, body, headers = request(followers[0].url + "/jobs?x=1", "POST", job_body("b"))
    assert status == 307 and body["error"]["code"] == "not_leader"
    assert headers["location"] == leader.url + "/jobs?x=1"
    status, _, headers = request(followers[1].url + "/jobs/a", "DELETE")
    assert status == 307 and headers["location"] == leader.url + "/jobs/a"
    # following the redirect registers the job once
    status, body, _ = request(headers["location"].replace("/jobs/a", "/jobs"), "POST", job_body("b"))
    assert status == 201
    # the followers read the jobs from the store: same ids, order and addresses
    want = [(j["id"], j["group_address"]) for j in request(leader.url + "/jobs")[1]["jobs"]]
    assert want[0] == ("a", address) and [i for i, _ in want] == ["a", "b"]
    for f in followers:
        poll(lambda f=f: [(j["id"], j["group_address"]) for j in request(f.url + "/jobs")[1]["jobs"]] == want,
             5, "the follower to show the leader's jobs")
    # the client library follows a follower's redirect to the leader, a member the cluster advertises
    from controller.client import Client

    job = Client(followers[0].url).register("host-0", ["host-3"], 1e9, job_id="c", wait=False)
    assert job.id == "c" and [j["id"] for j in request(leader.url + "/jobs")[1]["jobs"]] == ["a", "b", "c"]


def test_takeover_after_sigkill_keeps_jobs_and_addresses(cluster3):
    leader = cluster3.leader()
    term = cluster3.status(leader)["term"]
    addresses = {}
    for i in range(4):  # admitted one by one (incremental plans), each to every other host
        workers = [f"host-{(i + k) % 4}" for k in (1, 2, 3)]
        status, body, _ = request(leader.url + "/jobs", "POST", job_body(f"j{i}", ps=f"host-{i}", workers=workers))
        assert status == 201, body
        addresses[f"j{i}"] = body["group_address"]
    plan_before = request(leader.url + "/plan")[1]
    assert plan_before["algorithm"] == "incremental"
    t0 = time.monotonic()
    leader.kill()
    rest = cluster3.alive()
    new = cluster3.leader(rest, timeout=TTL + 8)
    takeover = time.monotonic() - t0
    st = cluster3.status(new)
    assert st["term"] > term
    # the lease runs out after at most TTL s; etcd checks leases every 0.5 s, a
    # follower polls every 0.2 s: the bound is TTL + 1.5 s
    assert takeover <= TTL + 1.5, takeover
    print(f"takeover after SIGKILL: {takeover:.2f} s (lease TTL {TTL} s); steps {st['last_takeover']}")
    jobs = request(new.url + "/jobs")[1]["jobs"]
    assert {j["id"]: j["group_address"] for j in jobs} == addresses
    poll(lambda: all(j["state"] == "planned" for j in request(new.url + "/jobs")[1]["jobs"]), 10, "every job planned")
    plan_after = request(new.url + "/plan")[1]
    # the new leader restored its predecessor's structures (core.served_store): no job moved, same rates
    assert plan_after["algorithm"] == "incremental"
    strip = lambda p: sorted((j["id"], j["mode"], j["rate"], json.dumps(j["edges"], sort_keys=True)) for j in p["jobs"])  # noqa: E731
    assert strip(plan_after) == strip(plan_before)
    # the new leader takes writes; the remaining follower redirects to it
    status, body, _ = request(new.url + "/jobs", "POST", job_body("late"))
    assert status == 201 and body["group_address"] not in addresses.values()
    other = next(c for c in rest if c is not new)
    status, _, headers = request(other.url + "/jobs", "POST", job_body("late2"))
    assert status == 307 and headers["location"] == new.url + "/jobs"
    # the killed instance's members record went with its lease
    assert {m["url"] for m in cluster3.status(other)["members"]} == {c.url for c in rest}


def test_clean_stop_hands_over_at_once_and_a_job_posted_meanwhile_lands_once(tmp_path):
    cl = Cluster(tmp_path, 2)
    try:
        leader = cl.leader()
        follower = next(c for c in cl.ctls if c is not leader)
        t0 = time.monotonic()
        leader.stop()  # SIGTERM: the lease is revoked, the follower wins at once
        assert cl.leader([follower], timeout=5) is follower
        handover = time.monotonic() - t0
        print(f"handover after SIGTERM: {handover:.2f} s")
        assert handover < TTL  # not waiting for the lease to run out
        # a registration at the (new) leader, retried as a client would: once
        for _ in range(3):
            status, body, _ = request(follower.url + "/jobs", "POST", job_body("once"))
            assert status in (200, 201), body
        assert [j["id"] for j in request(follower.url + "/jobs")[1]["jobs"]].count("once") == 1
    finally:
        cl.stop()


def test_registration_during_takeover_is_retryable_and_lands_exactly_once(cluster3):
    """A client registers a job at a follower while the leader is killed: every
    answer is a redirect, a retryable 503 or a connection error until the new
    leader takes it; the job is stored once."""
    leader = cluster3.leader()
    follower = next(c for c in cluster3.ctls if c is not leader)
    leader.kill()
    answers = []
    deadline = time.monotonic() + TTL + 10
    landed = None
    while time.monotonic() < deadline and landed is None:
        url = follower.url + "/jobs"
        for _ in range(3):  # follow at most a few redirects
            try:
                status, body, headers = request(url, "POST", job_body("during"), timeout=3)
            except OSError as e:  # the dead leader's URL
                answers.append(type(e).__name__)
                break
            answers.append(status)
            if status == 307:
                url = headers["location"]
                continue
            if status == 503:
                assert headers.get("retry-after") == "1", headers
            elif status in (200, 201, 202):
                landed = status
            else:
                raise AssertionError(f"not a retryable answer: {status} {body}")
            break
        time.sleep(0.1)
    assert landed in (201, 202), answers
    assert set(answers) <= {307, 503, 201, 202, "URLError", "ConnectionRefusedError", "RemoteDisconnected"}, answers
    new = cluster3.leader(cluster3.alive())
    ids = [j["id"] for j in request(new.url + "/jobs")[1]["jobs"]]
    assert ids.count("during") == 1
    print(f"answers during the takeover: {answers}")


def test_old_leader_frozen_past_its_lease_steps_down_and_cannot_write(cluster3):
    """SIGSTOP the leader for longer than its lease: another instance takes over;
    resumed (SIGCONT), the old leader finds its lease gone and becomes a follower;
    what it held stays consistent (same jobs, same addresses, one leader)."""
    leader = cluster3.leader()
    status, body, _ = request(leader.url + "/jobs", "POST", job_body("kept"))
    assert status == 201
    term = cluster3.status(leader)["term"]
    os.kill(leader.proc.pid, signal.SIGSTOP)
    try:
        others = [c for c in cluster3.ctls if c is not leader]
        new = cluster3.leader(others, timeout=TTL + 8)
        new_term = cluster3.status(new)["term"]
        assert new_term > term
        status, body2, _ = request(new.url + "/jobs", "POST", job_body("during-freeze"))
        assert status == 201
    finally:
        os.kill(leader.proc.pid, signal.SIGCONT)
    # resumed: it steps down within a keep-alive period and follows the new leader
    def stepped_down() -> bool:
        st = cluster3.status(leader)
        return st["role"] == "follower" and (st["leader"] or {}).get("term") == new_term

    t0 = time.monotonic()
    poll(stepped_down, 5, "the old leader to step down")
    print(f"the resumed old leader follows term {new_term} after {time.monotonic() - t0:.2f} s")
    assert cluster3.leader() is new
    assert "stepping down" in leader.log_text()
    status, _, headers = request(leader.url + "/jobs", "POST", job_body("after"))
    assert status == 307 and headers["location"] == new.url + "/jobs"
    want = {"kept": body["group_address"], "during-freeze": body2["group_address"]}
    for c in cluster3.ctls:
        poll(lambda c=c: {j["id"]: j["group_address"] for j in request(c.url + "/jobs")[1]["jobs"]} == want,
             5, "every instance to show the same jobs")


def test_unreachable_etcd_is_a_clear_start_up_error(tmp_path):
    import subprocess

    cfg = tmp_path / "controller.yaml"
    cfg.write_text(CONFIG.format(etcd=f"http://127.0.0.1:{free_port()}", prefix="/x/", ttl=TTL))
    repo = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "controller", "run", "--config", str(cfg), "--of-port", str(free_port())],
                       cwd=repo, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "cannot open the job store: no etcd endpoint answered" in r.stderr, r.stderr
    assert "Eventlet is deprecated" not in r.stderr
