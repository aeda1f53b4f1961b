"""Phase-aware rates through the REST API (PUT /jobs/{id}/broadcasting, core/phases.py):
the answers, the meters the OpenFlow backend is given, expiry, tenants, bad input."""

from __future__ import annotations

import time

import pytest

from controller.algorithm.wire import wire_rate
from controller.config import config_from_dict
from controller.config import ConfigError
from controller.config.tenants import token_sha256
from controller.core.errors import NotPlanned, UnknownJob
from controller.southbound.openflow.manager import OpenFlowManager
from rest_helper import FAT_TREE, api_client, make_service

TOKEN_A = "token-of-tenant-a-0123456789"
TOKEN_B = "token-of-tenant-b-0123456789"
# two jobs whose models go down the same links to host-4 and host-5: the plan halves them
JOB_A = {"id": "a", "ps": "host-0", "workers": ["host-4", "host-5"], "demand": 1e12}
JOB_B = {"id": "b", "ps": "host-8", "workers": ["host-4", "host-5"], "demand": 1e12}


def config(**planner):
    return config_from_dict({
        "api": {"tenants": {"team-a": {"token_sha256": token_sha256(TOKEN_A)},
                            "team-b": {"token_sha256": token_sha256(TOKEN_B)}}},
        "topology": FAT_TREE,
        "planner": {"debounce_s": 0.0, "wait_s": 10.0, **planner},
    })


def auth(token):
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def make(tmp_path):
    made = []

    def start(**planner):
        svc = make_service(tmp_path, config(**planner))
        svc.openflow = OpenFlowManager(svc).attach()
        svc.start()
        made.append(svc)
        return svc

    yield start
    for svc in made:
        svc.close()


def two_jobs(c):
    a = c.post("/jobs", json=JOB_A, headers=auth(TOKEN_A))
    b = c.post("/jobs", json=JOB_B, headers=auth(TOKEN_B))
    assert a.status_code == b.status_code == 201, (a.text, b.text)
    # as planned together (a's answer came before b was admitted)
    return c.get("/jobs/a", headers=auth(TOKEN_A)).json(), c.get("/jobs/b", headers=auth(TOKEN_B)).json()


def announce(c, job_id, active, token):
    return c.put(f"/jobs/{job_id}/broadcasting", json={"active": active}, headers=auth(token))


def meter_kbps(svc) -> set[int]:
    """The meter rates (kbit/s) the OpenFlow backend wants on its switches."""
    return {m.rate for st in svc.openflow.last.desired.values() for m in st.meters if m.unit == "kbps"}


def test_a_job_broadcasting_alone_gets_what_the_idle_one_leaves_and_its_meter_follows(make):
    svc = make()
    with api_client(svc) as c:
        a, b = two_jobs(c)
        planned = a["planned_rate"]
        assert a["rate"] == planned and a["broadcasting"] is None and b["planned_rate"] == pytest.approx(planned)
        writes = svc.stats().entries_written
        r = announce(c, "a", True, TOKEN_A)
        assert r.status_code == 200, r.text
        on = r.json()
        # b never announced: a keeps its planned share
        assert on["rate"] == pytest.approx(planned) and on["broadcasting"] is True
        assert announce(c, "b", False, TOKEN_B).status_code == 200  # b is phased now, and idle
        on = c.get("/jobs/a", headers=auth(TOKEN_A)).json()
        idle = c.get("/jobs/b", headers=auth(TOKEN_B)).json()
        assert idle["rate"] == pytest.approx(0.05 * planned) and idle["broadcasting"] is False
        assert on["rate"] == pytest.approx(2 * planned - 0.05 * planned, rel=1e-6)
        assert on["planned_rate"] == planned and on["plan"]["generation"] == a["plan"]["generation"]
        assert int(wire_rate(on["rate"]) // 1000) in meter_kbps(svc)
        assert int(wire_rate(idle["rate"]) // 1000) in meter_kbps(svc)
        # the plan's own churn and writes are not the rate change's
        assert svc.stats().entries_written == writes
        assert svc.planning.counters.rate_updates >= 2
        # both broadcasting: both at their plans
        both = announce(c, "b", True, TOKEN_B).json()
        assert both["rate"] == pytest.approx(planned)
        assert c.get("/jobs/a", headers=auth(TOKEN_A)).json()["rate"] == pytest.approx(planned)
        assert int(wire_rate(planned) // 1000) in meter_kbps(svc)


def test_an_announcement_not_renewed_expires(make):
    svc = make(broadcast_ttl_s=0.3)
    with api_client(svc) as c:
        a, _ = two_jobs(c)
        planned = a["planned_rate"]
        announce(c, "a", True, TOKEN_A)
        assert announce(c, "b", True, TOKEN_B).json()["rate"] == pytest.approx(planned)
        time.sleep(0.4)
        # a did not renew: idle at the next look, and b gets its share
        assert announce(c, "b", True, TOKEN_B).json()["rate"] == pytest.approx(2 * planned - 0.05 * planned, rel=1e-6)
        assert c.get("/jobs/a", headers=auth(TOKEN_A)).json()["broadcasting"] is False


def test_a_new_plan_keeps_the_phases(make):
    svc = make()
    with api_client(svc) as c:
        a, _ = two_jobs(c)
        announce(c, "b", False, TOKEN_B)
        boosted = announce(c, "a", True, TOKEN_A).json()["rate"]
        assert boosted > 1.5 * a["planned_rate"]
        other = c.post("/jobs", json={"id": "c", "ps": "host-12", "workers": ["host-13"], "demand": 1e9},
                       headers=auth(TOKEN_A))
        assert other.status_code == 201
        after = c.get("/jobs/a", headers=auth(TOKEN_A)).json()
        assert after["plan"]["generation"] > a["plan"]["generation"]
        assert after["rate"] == pytest.approx(boosted) and after["broadcasting"] is True


def test_only_the_owner_announces_and_bad_requests_are_refused(make):
    svc = make()
    with api_client(svc) as c:
        two_jobs(c)
        r = announce(c, "a", True, TOKEN_B)  # another tenant's job: as if it did not exist
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        assert announce(c, "nope", True, TOKEN_A).status_code == 404
        for body in ({"active": "yes"}, {"active": 1}, {}, {"active": True, "rate": 1e12}):
            r = c.put("/jobs/a/broadcasting", json=body, headers=auth(TOKEN_A))
            assert r.status_code == 422, (body, r.text)
        assert c.get("/jobs/a", headers=auth(TOKEN_A)).json()["broadcasting"] is None  # nothing half-applied
        assert svc.planning.counters.rate_updates == 0


def test_a_job_not_planned_has_no_phase(tmp_path):
    svc = make_service(tmp_path, config())  # not started: nothing plans the job
    try:
        svc.register_job("host-0", ["host-4"], 1e9, job_id="p", wait=False)
        with pytest.raises(NotPlanned):
            svc.announce_broadcast("p", True)
        with pytest.raises(UnknownJob):
            svc.announce_broadcast("q", True)
    finally:
        svc.close()


def test_with_phase_rates_off_an_announcement_changes_nothing(make):
    svc = make(phase_rates=False)
    with api_client(svc) as c:
        a, _ = two_jobs(c)
        announce(c, "b", False, TOKEN_B)
        r = announce(c, "a", True, TOKEN_A).json()
        assert r["rate"] == a["planned_rate"] and r["broadcasting"] is None
        assert svc.planning.counters.rate_updates == 0


@pytest.mark.parametrize("planner, message", [
    ({"broadcast_ttl_s": 0}, r"planner\.broadcast_ttl_s"),
    ({"broadcast_ttl_s": 7200}, r"planner\.broadcast_ttl_s: must be at most 3600"),
    ({"broadcast_idle_share": 1.5}, r"planner\.broadcast_idle_share: must be a share"),
    ({"broadcast_idle_share": -0.1}, r"planner\.broadcast_idle_share"),
    ({"phase_rates": "yes"}, r"planner\.phase_rates"),
])
def test_bad_phase_settings_are_refused(planner, message):
    with pytest.raises(ConfigError, match=message):
        config(**planner)


def test_concurrent_announcements_coalesce_into_few_publishes(make, monkeypatch):
    import threading

    import controller.core.phases as phases

    computed = []
    real = phases.phase_rates
    monkeypatch.setattr(phases, "phase_rates", lambda *a, **kw: computed.append(1) or real(*a, **kw))
    svc = make()
    with api_client(svc) as c:
        two_jobs(c)
    published = []

    def slow_backend(update):
        published.append(update)
        time.sleep(0.05)  # a backend busy translating: announcements pile up meanwhile

    svc.planning.on_plan.append(slow_backend)
    svc.announce_broadcast("b", False)
    published.clear()
    computed.clear()
    flips = [i % 2 == 0 for i in range(20)]  # a on, off, on, ...: each one changes the rates
    threads = [threading.Thread(target=svc.announce_broadcast, args=("a", on)) for on in flips]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= len(published) <= 5, f"{len(published)} publishes for 20 announcements"
    assert len(computed) <= 5, f"the rates computed {len(computed)} times for 20 announcements"
    # the last publish is at the phases as they ended up (whichever announcement came last)
    rates = {jp.job.id: jp.rate for jp in published[-1].plan.jobs}
    status = svc.jobs.status("a")
    assert rates["a"] == pytest.approx(status.rate) and status.broadcasting in (True, False)
