"""Link hold-down: a link that flaps does not thrash the planner.

Down is acted on at once; up is trusted only after the link has stayed up for its
hold-down, which doubles while the link flaps (up to `link_hold_down_max_s`) and
starts again from the base once the link has been in the plan for that long.
Driven with a fake clock and `poll()` (no worker thread), except one test that
checks that the real worker wakes up when a hold-down ends.
"""

from __future__ import annotations

import time

from test_service import FakeClock, _links_used, _unicast_ports, make_service, openflow


def _service_with_a_used_link(**planner):
    """A service with one job planned; (a, b): a switch link its plan uses, and
    port_ab: a's port to b, which some unicast route uses while the link is in the plan."""
    clock = FakeClock()
    service, _, plans = make_service(clock=clock, **planner)
    topo = service.wiring.topology
    service.add_job("host-0", ["host-4", "host-8", "host-12"], 1e9, job_id="j", wait=False)
    service.planning.replan()
    used = sorted(sorted(k) for k in _links_used(service, service.served.plan()) if all(topo.index[n] in topo.switches for n in k))
    a, b = used[0]
    port_ab = service.wiring.port_map()[(topo.index[a], topo.index[b])]
    assert port_ab in _unicast_ports(openflow(service).desired_state()[a])
    return service, clock, plans, (a, b), port_ab


def _in_plan(service, link, port_ab) -> bool:
    a, _ = link
    return frozenset(link) in _links_used(service, service.served.plan()) or port_ab in _unicast_ports(openflow(service).desired_state()[a])


def test_down_is_acted_on_at_once_and_up_waits_for_the_hold_down():
    service, clock, plans, (a, b), port_ab = _service_with_a_used_link()  # default hold-down: 2 s
    assert service.links.down(a, b)
    clock.now += 0.2  # only the debounce
    assert service.planning.poll() is not None and not _in_plan(service, (a, b), port_ab)
    assert service.links.held_down() == {}

    t_up = clock.now
    assert service.links.up(b, a) and not service.links.up(a, b)  # the same link, already up
    assert service.links.links_down() == [] and service.links.held_down() == {(a, b): 2.0}
    assert not service.planning.replan_due()  # coming up changes nothing the planner sees yet,
    assert service.stats().pending  # but a re-plan is to come without any other event (/healthz replan_pending)
    clock.now = t_up + 1.5
    assert service.links.held_down() == {(a, b): 0.5}
    assert service.planning.poll() is None
    # a re-plan for another reason during the hold-down still leaves the link out
    service.add_job("host-1", ["host-5"], 1e9, job_id="k", wait=False)
    assert service.planning.replan() is not None and not _in_plan(service, (a, b), port_ab)
    n = len(plans)
    # the end of the hold-down is a change made when it ended: debounced like any other
    clock.now = t_up + 2.0
    assert service.links.held_down() == {} and service.stats().pending
    assert service.planning.poll() is None
    clock.now = t_up + 2.2
    assert service.planning.poll() is not None and len(plans) == n + 1
    assert _in_plan(service, (a, b), port_ab)
    assert service.stats().link_flaps == 0


def test_a_flap_during_the_hold_down_restarts_it_without_any_re_plan():
    service, clock, plans, (a, b), port_ab = _service_with_a_used_link(link_hold_down_s=2, link_hold_down_max_s=30)
    service.links.down(a, b)
    clock.now += 0.2
    assert service.planning.poll() is not None
    n = len(plans)
    t_up = clock.now
    service.links.up(a, b)
    clock.now = t_up + 1.0
    assert service.links.down(a, b)  # down while held down: a flap, the link is not in the plan anyway
    assert not service.stats().pending
    clock.now = t_up + 1.5
    service.links.up(a, b)  # its hold-down starts again, doubled: 4 s from now
    assert service.links.held_down() == {(a, b): 4.0}
    for t in (2.0, 2.2, 3.0, 5.0, 5.4):  # the first hold-down would have ended at 2.0
        clock.now = t_up + t
        assert service.planning.poll() is None, t
    assert len(plans) == n  # no re-plan while the link flapped
    assert service.stats().pending
    clock.now = t_up + 5.5 + 0.2
    assert service.planning.poll() is not None and _in_plan(service, (a, b), port_ab)
    assert service.stats().link_flaps == 1 and not service.stats().pending


def test_repeated_flaps_grow_the_hold_down_up_to_the_maximum_and_it_decays():
    service, clock, plans, (a, b), _ = _service_with_a_used_link(link_hold_down_s=1, link_hold_down_max_s=5)

    def flap() -> float:
        """Down, then up 0.1 s later; the hold-down it gets."""
        service.links.down(a, b)
        clock.now += 0.1
        service.links.up(a, b)
        hold = service.links.held_down()[(a, b)]
        clock.now += 0.1
        return hold

    assert [flap() for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]  # the first down is no flap
    assert service.stats().link_flaps == 4
    clock.now += 5  # rejoins the plan
    assert service.links.held_down() == {}
    clock.now += 4.8  # back in the plan (since 0.1 s ago) for 4.9 s < link_hold_down_max_s: still a flap
    assert flap() == 5.0 and service.stats().link_flaps == 5
    clock.now += 5 + 5  # the hold-down, then 5 s in the plan: forgiven
    assert service.links.held_down() == {}
    assert flap() == 1.0 and service.stats().link_flaps == 5
    assert flap() == 2.0 and service.stats().link_flaps == 6


def test_zero_hold_down_is_the_old_behaviour():
    service, clock, plans, (a, b), port_ab = _service_with_a_used_link(link_hold_down_s=0)
    for _ in range(3):
        assert service.links.down(a, b)
        assert service.stats().pending
        clock.now += 0.2
        assert service.planning.poll() is not None and not _in_plan(service, (a, b), port_ab)
        assert service.links.up(a, b)
        assert service.links.held_down() == {} and service.stats().pending  # back at once
        clock.now += 0.2
        assert service.planning.poll() is not None and _in_plan(service, (a, b), port_ab)


def test_the_end_of_a_hold_down_is_a_due_time_of_the_planning_loop():
    service, clock, plans, (a, b), _ = _service_with_a_used_link()
    service.links.down(a, b)
    clock.now += 0.2
    service.planning.poll()
    service.links.up(a, b)
    clock.now += 0.5
    with service.changes.lock:  # what the worker waits for: the end of the hold-down, with nothing else pending
        assert service.planning.due_in(clock.now) == 1.5
    clock.now += 1.5
    with service.changes.lock:  # then the debounce of the change it makes
        assert abs(service.planning.due_in(clock.now) - 0.2) < 1e-9


def test_the_worker_re_plans_when_a_hold_down_ends_with_no_other_event(tmp_path):
    service, _, plans = make_service(
        tmp_path / "jobs.sqlite", clock=time.monotonic, debounce_s=0.05, max_delay_s=0.1, link_hold_down_s=0.3
    )
    service.start()
    try:
        assert len(plans) == 1
        service.links.down("edge-0-0", "agg-0-0")
        deadline = time.monotonic() + 5
        while len(plans) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(plans) == 2
        t_up = time.monotonic()
        service.links.up("edge-0-0", "agg-0-0")
        while len(plans) < 3 and time.monotonic() < t_up + 5:
            time.sleep(0.01)
        assert len(plans) == 3, "no re-plan after the hold-down ended"
        assert time.monotonic() - t_up >= 0.3 and service.links.held_down() == {}
    finally:
        service.close()


def test_links_and_metrics_show_the_hold_down():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # starlette's TestClient warns about httpx
        from fastapi.testclient import TestClient
    from prometheus_client.parser import text_string_to_metric_families

    from controller.northbound.api import create_app

    service, clock, _, (a, b), _ = _service_with_a_used_link()
    key = {a, b}

    def link() -> dict:
        [out] = [x for x in client.get("/links").json()["links"] if {x["a"]["node"], x["b"]["node"]} == key]
        return out

    def metrics() -> dict:
        families = text_string_to_metric_families(client.get("/metrics").text)
        return {s.name: s.value for f in families for s in f.samples if not s.labels}

    with TestClient(create_app(service, service.config), base_url="http://127.0.0.1") as client:
        links = client.get("/links").json()["links"]
        assert all(x["up"] and x["held_down_s"] is None for x in links)
        assert (metrics()["mcast_links_held_down"], metrics()["mcast_link_flaps_total"]) == (0, 0)
        service.links.down(a, b)
        assert (link()["up"], link()["held_down_s"]) == (False, None)
        service.links.up(a, b)
        clock.now += 0.5
        assert (link()["up"], link()["held_down_s"]) == (True, 1.5)
        assert metrics()["mcast_links_held_down"] == 1
        service.links.down(a, b)  # a flap
        service.links.up(a, b)
        assert link()["held_down_s"] == 4.0
        assert (metrics()["mcast_links_held_down"], metrics()["mcast_link_flaps_total"]) == (1, 1)
        clock.now += 4.0
        assert (link()["up"], link()["held_down_s"]) == (True, None)
        assert (metrics()["mcast_links_held_down"], metrics()["mcast_link_flaps_total"]) == (0, 1)
        spec = client.get("/openapi.json").json()
        assert "held_down_s" in spec["components"]["schemas"]["LinkStatusOut"]["properties"]
