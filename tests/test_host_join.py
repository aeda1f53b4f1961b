"""A learned network: ARP for a host not seen yet, and a host joining without a full plan.

With the service and a fake clock (no switch): an ARP request for an unseen
address makes the controller probe for it out of edge ports only, rate-limited;
once the target answers, the askers' answers are held until the plan with its routes; a new host joins without a planner call
and without moving a job; jobs waiting for it are then planned.
"""

from __future__ import annotations

import pytest

from controller import planner as planner_module
from controller.config import build_topology, config_from_dict
from controller.core import arp_unknown
from controller.core.host_join import grown_by_hosts
from controller.core.hosts import ARP_REPLY, ARP_REQUEST, ArpReply
from controller.core.service import ControllerService
from controller.southbound.openflow.entries import decode_cookie
from controller.southbound.openflow.manager import OpenFlowManager
from controller.southbound.p4runtime.packets import parse_arp
from controller.southbound.probes import arp_reply_frame
from controller.southbound.sync_queue import send_after_plan
from controller.store.sqlite import JobStore

SPINE, A, B = "of:0000000000000001", "of:000000000000000a", "of:000000000000000b"
LINK_ENDS = {(SPINE, 1), (SPINE, 2), (A, 1), (B, 2)}
MAC = "02:00:00:00:01:{:02x}"


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(incremental: bool = False):
    config = config_from_dict({
        "planner": {"debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 0.01, "link_hold_down_s": 0,
                    "incremental": incremental},
        "discovery": {"host_timeout_s": 30},
        "hosts": {"ps": {"ip": "10.1.0.1"}},
    })
    clock = FakeClock()
    service = ControllerService(config, None, clock, store=JobStore(":memory:"))
    service.openflow = OpenFlowManager(service).attach()
    for s in (SPINE, A, B):
        service.devices.connected(s)
    service.devices.report_limits(SPINE, port_speeds={1: 0, 2: 0})
    service.devices.report_limits(A, port_speeds={1: 0, 5: 0, 6: 0, 7: 0})
    service.devices.report_limits(B, port_speeds={2: 0, 5: 0, 6: 0})
    service.wiring.learn_link(SPINE, 1, A, 1)
    service.wiring.learn_link(SPINE, 2, B, 2)
    assert service.hosts.learn("10.1.0.1", MAC.format(1), A, 5) == "ps"
    assert service.hosts.learn("10.1.0.2", MAC.format(2), B, 5) == "10.1.0.2"
    assert service.planning.replan() is not None
    return service, clock


def ask(service, ip: str, target: str, where: tuple[str, int], op: int = ARP_REQUEST):
    n = int(ip.rsplit(".", 1)[1])
    return service.hosts.on_arp(*where, op=op, sender_ip=ip, sender_mac=MAC.format(n), target_ip=target,
                                routed=False)


def unicast_ips(service) -> dict[str, set[str]]:
    """Switch -> the addresses its desired unicast flows route."""
    out: dict[str, set[str]] = {}
    for sw, state in service.openflow.last.desired.items():
        out[sw] = {str(d[1]) for f in state.flows if (d := decode_cookie(f.cookie)) and d[0] == "unicast"}
    return out


def by_names(service, job_id: str) -> tuple:
    """A job's structure by node names, on the topology it was planned on."""
    status = service.jobs.status(job_id)
    jp, topo = status.planned, service.served.current.topology
    s = jp.structure
    edges = topo.edges
    return (sorted((topo.name(a), topo.name(b)) for a, b in s.tree),
            sorted((topo.name(a), topo.name(b)) for a, b in s.branches),
            sorted(((topo.name(edges[e].tail), topo.name(edges[e].head)), c) for e, c in s.copies),
            jp.rate)


@pytest.fixture
def planner_calls(monkeypatch):
    calls = {"run": 0, "run_incremental": 0}
    for name in calls:
        real = getattr(planner_module, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(planner_module, name, counting)
    return calls


# -- ARP for an address no host has ------------------------------------------------------------

def test_a_request_for_an_unseen_address_goes_out_of_edge_ports_only():
    service, _ = make()
    action = ask(service, "10.1.0.1", "10.1.0.9", (A, 5))
    assert action.reply_mac is None and action.after_change is None
    assert action.probe == "10.1.0.9"  # an ARP probe for it ...
    assert set(action.forward_to) == {(A, 6), (A, 7), (B, 5), (B, 6)}  # ... out of every edge port but the asker's
    assert not set(action.forward_to) & LINK_ENDS  # never toward another switch
    # the target answers the probe: it is learned, and the controller answers the asker
    reply = ask(service, "10.1.0.9", "0.0.0.0", (B, 6), op=ARP_REPLY)
    assert reply.forward_to == ()
    assert reply.replies == (ArpReply(A, 5, "10.1.0.1", MAC.format(1), "10.1.0.9", MAC.format(9)),)
    assert service.hosts.by_ip("10.1.0.9") == "10.1.0.9"
    assert ask(service, "10.1.0.9", "0.0.0.0", (B, 6), op=ARP_REPLY).replies == ()  # answered once


def test_the_answer_frame_is_an_arp_reply_from_the_target_to_the_asker():
    frame = arp_reply_frame("10.1.0.1", MAC.format(1), "10.1.0.9", MAC.format(9))
    req = parse_arp(frame)
    assert (req.op, req.sender_ip, req.sender_mac, req.target_ip) == (ARP_REPLY, "10.1.0.9", MAC.format(9), "10.1.0.1")
    assert frame[:6] == bytes.fromhex(MAC.format(1).replace(":", "")) and len(frame) == 60


def test_an_unseen_address_is_passed_on_at_most_once_a_second():
    service, clock = make()
    assert ask(service, "10.1.0.1", "10.1.0.9", (A, 5)).forward_to
    for _ in range(5):
        clock.t += 0.1
        assert ask(service, "10.1.0.1", "10.1.0.9", (A, 5)).forward_to == ()
        assert ask(service, "10.1.0.2", "10.1.0.9", (B, 5)).forward_to == ()  # per target, whoever asks
    assert service.counters.refusals()[arp_unknown.LIMITED] == 10
    # both askers get the answer, the one held back too
    replies = ask(service, "10.1.0.9", "0.0.0.0", (B, 6), op=ARP_REPLY).replies
    assert {(r.switch, r.port, r.asker_ip) for r in replies} == {(A, 5, "10.1.0.1"), (B, 5, "10.1.0.2")}
    clock.t += 0.55
    assert ask(service, "10.1.0.1", "10.1.0.8", (A, 5)).forward_to
    assert ask(service, "10.1.0.1", "10.1.0.8", (A, 5)).forward_to == ()
    clock.t += 1.0
    assert ask(service, "10.1.0.1", "10.1.0.8", (A, 5)).forward_to


def test_one_port_asking_for_many_unseen_addresses_is_held_to_its_budget():
    service, clock = make()
    burst = int(arp_unknown.PORT_BURST)
    passed = [bool(ask(service, "10.1.0.1", f"10.2.{i // 200}.{i % 200 + 1}", (A, 5)).forward_to)
              for i in range(burst + 10)]
    assert passed == [True] * burst + [False] * 10
    assert ask(service, "10.1.0.2", "10.3.0.1", (B, 5)).forward_to  # another port has its own budget
    clock.t += 1.0 / arp_unknown.PORT_RATE
    assert ask(service, "10.1.0.1", "10.3.0.2", (A, 5)).forward_to
    assert ask(service, "10.1.0.1", "10.3.0.3", (A, 5)).forward_to == ()
    assert service.counters.refusals()[arp_unknown.LIMITED] == 11


def test_the_rate_limiter_tables_are_bounded(monkeypatch):
    monkeypatch.setattr(arp_unknown, "MAX_TARGETS", 8)
    monkeypatch.setattr(arp_unknown, "MAX_PORTS", 4)
    service, clock = make()
    limiter = arp_unknown.UnknownTargets(clock, service.counters)
    for i in range(50):
        assert limiter.allow(f"10.9.0.{i + 1}", A, i)
    assert len(limiter._targets) == 8 and len(limiter._ports) == 4
    assert not limiter.allow("10.9.0.50", A, 49)  # the newest are remembered
    assert limiter.allow("10.9.0.1", A, 0)  # the oldest were forgotten


def test_no_request_is_passed_on_for_non_host_addresses_or_in_a_declared_topology():
    service, _ = make()
    for target in ("224.0.0.5", "0.0.0.0", "127.0.0.1", "169.254.1.1"):
        assert ask(service, "10.1.0.1", target, (A, 5)).forward_to == ()
    config = config_from_dict({"topology": {"leaf_spine": {"leaves": 2, "spines": 1, "hosts_per_leaf": 1}}})
    declared = ControllerService(config, build_topology(config), store=JobStore(":memory:"))
    h = sorted(declared.wiring.addresses)[0]
    sw, port = declared.hosts.ports(h)[0]
    ip = declared.wiring.addresses[h].ip
    assert declared.hosts.on_arp(sw, port, op=ARP_REQUEST, sender_ip=ip, sender_mac=MAC.format(1),
                                 target_ip="10.77.0.1", routed=False).forward_to == ()


def test_the_answer_of_a_host_that_just_joined_waits_for_the_plan_with_its_routes():
    service, clock = make()
    ask(service, "10.1.0.1", "10.1.0.9", (A, 5))
    clock.t += 0.002
    reply = ask(service, "10.1.0.9", "0.0.0.0", (B, 6), op=ARP_REPLY)
    assert reply.after_change is not None and reply.joined_at == clock.t
    sent, queued = [], []
    send_after_plan(service.changes, service.counters, queued.append, reply.after_change, reply.joined_at,
                    lambda: sent.append([(r.switch, r.port) for r in reply.replies]))
    assert sent == [] and queued == []  # no plan yet
    clock.t += 0.05
    service.planning.replan()
    assert "10.1.0.9" in unicast_ips(service)[A]  # the plan has its routes ...
    assert sent == [] and len(queued) == 1  # ... and the answer waits for the backend's sync
    queued[0]()
    assert sent == [[(A, 5)]]
    assert service.counters.host_joins()["installed"][1] == 1
    assert service.counters.host_join_quantile("installed", 0.5) == pytest.approx(0.05)
    assert service.counters.host_join_quantile("planned", 0.99) == pytest.approx(0.05)
    # once planned, answers for it go at once
    assert ask(service, "10.1.0.2", "10.1.0.9", (B, 5)).after_change is None


# -- a host join without a full plan -----------------------------------------------------------

def test_a_new_host_joins_without_a_planner_call_and_no_job_moves(planner_calls):
    service, clock = make()
    service.add_job("ps", ["10.1.0.2"], 1e9, job_id="j", wait=False)
    service.planning.replan()
    before, generation = by_names(service, "j"), service.served.current.generation
    calls = dict(planner_calls)
    # "10.1.0.10" sorts before "10.1.0.2" and "ps": node and edge indices shift
    for i, (ip, where) in enumerate((("10.1.0.10", (A, 6)), ("10.1.0.3", (B, 6)), ("10.1.0.4", (A, 7)))):
        service.hosts.learn(ip, MAC.format(10 + i), *where)
        clock.t += 0.01
        update = service.planning.replan()
        assert update is not None and update.generation == generation + i + 1
        assert planner_calls == calls  # no planner call at all
        assert by_names(service, "j") == before  # the job kept its structure and rate
        assert all(ip in ips for ips in unicast_ips(service).values())  # its routes, on every switch
    assert service.planning.counters.host_joins == 3
    assert service.planning.counters.churn_jobs_total == 0
    topo = service.served.current.topology
    assert {topo.name(h) for h in topo.hosts} == {"ps", "10.1.0.2", "10.1.0.10", "10.1.0.3", "10.1.0.4"}
    # the carried plan is the plan of the grown network: a full plan there agrees
    assert service.jobs.status("j").planned.structure == service.served.current.plan.jobs[0].structure


def test_anything_else_than_hosts_joining_is_still_a_full_plan(planner_calls):
    service, _ = make()
    service.add_job("ps", ["10.1.0.2"], 1e9, job_id="j", wait=False)
    service.planning.replan()
    n = planner_calls["run"]
    service.devices.connected("of:000000000000000c")
    service.wiring.learn_link(SPINE, 3, "of:000000000000000c", 1)  # a switch joins
    service.planning.replan()
    assert planner_calls["run"] == n + 1


def test_jobs_waiting_for_a_host_are_planned_once_it_joins(planner_calls):
    for incremental in (True, False):
        service, _ = make(incremental=incremental)
        service.add_job("ps", ["10.1.0.2"], 1e9, job_id="j", wait=False)
        service.planning.replan()
        before = by_names(service, "j")
        status = service.add_job("ps", ["10.1.0.2", "10.1.0.3"], 1e9, job_id="w", wait=False)
        assert status.missing_hosts == ("10.1.0.3",)
        service.planning.replan()
        assert service.jobs.status("w").planned is None
        calls = dict(planner_calls)
        service.hosts.learn("10.1.0.3", MAC.format(3), B, 6)
        service.planning.replan()
        assert service.jobs.status("w").planned is not None and service.jobs.status("w").error is None
        if incremental:  # admitted: the other job kept, one admission, no full plan
            assert planner_calls["run"] == calls["run"]
            assert planner_calls["run_incremental"] == calls["run_incremental"] + 1
            assert by_names(service, "j") == before
        else:  # as before: a full plan
            assert planner_calls["run"] == calls["run"] + 1


def test_grown_by_hosts_accepts_only_new_hosts_on_known_switches():
    service, _ = make()
    old = service.served.current.inputs.network.topo
    service.hosts.learn("10.1.0.3", MAC.format(3), B, 6)
    new, _ = service.links.planning_topology()  # as the planner sees it (payload capacities), as `old`
    assert grown_by_hosts(old, new) == ("10.1.0.3",)
    assert grown_by_hosts(new, new) is None and grown_by_hosts(new, old) is None
    import dataclasses

    from controller.algorithm.model import Link, Node, Topology
    slower = Topology(new.nodes, tuple(dataclasses.replace(link, capacity=link.capacity / 2) if link.a == SPINE else link
                                       for link in new.links))
    assert grown_by_hosts(old, slower) is None  # a capacity changed too
    switch = Topology(new.nodes + (Node("of:00000000000000ff", "switch"),),
                      new.links + (Link(SPINE, "of:00000000000000ff", 1e10),))
    assert grown_by_hosts(old, switch) is None  # a switch joined
    far = Topology(old.nodes + (Node("h", "host"), Node("s", "switch")), old.links + (Link("s", "h", 1e10),))
    assert grown_by_hosts(old, far) is None


def test_a_proxy_answer_to_a_host_that_just_joined_waits_for_its_plan():
    service, _ = make()
    first = ask(service, "10.1.0.7", "10.1.0.2", (A, 6))  # a new host asks for a known, planned one
    assert first.reply_mac == MAC.format(2) and first.after_change is not None  # its own route is not out yet
    service.planning.replan()
    assert ask(service, "10.1.0.7", "10.1.0.2", (A, 6)).after_change is None  # planned: at once
    assert ask(service, "10.1.0.2", "10.1.0.7", (B, 5)).after_change is None


# -- a declared topology: a host seen at another port than the default port map's ---------------

@pytest.mark.parametrize("incremental", [False, True])
def test_a_declared_host_learned_at_another_port_is_translated_not_planned(planner_calls, incremental):
    """A declared fat-tree: the port map's place of a host is a guess; a host's first
    packet at another port of its switch corrects it. The planner plans nodes and
    links, not ports, so that is no full plan: the served plan is translated again
    (the host's routes now point at its real port), no job moves, no planner call."""
    config = config_from_dict({
        "topology": {"fattree": {"k": 4}, "group_capacity": 4},
        "planner": {"debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 0.01, "incremental": incremental},
    })
    service = ControllerService(config, build_topology(config), FakeClock(), store=JobStore(":memory:"))
    service.openflow = OpenFlowManager(service).attach()
    service.add_job("host-0", ["host-5", "host-9", "host-13"], 1e9, job_id="j", wait=False)
    assert service.planning.replan() is not None
    before, generation = by_names(service, "j"), service.served.current.generation
    calls = dict(planner_calls)
    topo = service.wiring.topology
    edge = service.wiring.neighbours("host-1")[0]
    ports, _ = service.wiring.ports_snapshot()
    guessed = ports[(topo.index[edge], topo.index["host-1"])]
    other = next(p for (v, n), p in ports.items() if v == topo.index[edge] and topo.name(n) == "host-0")
    assert other != guessed
    mac = service.wiring.addresses["host-1"].mac
    assert service.hosts.learn(service.wiring.addresses["host-1"].ip, mac, edge, other) == "host-1"
    update = service.planning.replan()
    assert update is not None and update.generation == generation + 1
    assert planner_calls == calls  # no planner call: the served plan, translated again
    assert by_names(service, "j") == before
    assert service.planning.counters.churn_jobs_total == 0
    # the translation follows the learned port: host-1's unicast route on its edge switch leaves by it
    desired = service.openflow.desired_state()[edge]
    ip = service.wiring.addresses["host-1"].ip
    route = [f for f in desired.flows if ("ipv4_dst", ip) in f.match and decode_cookie(f.cookie)[0] == "unicast"]
    assert route and all(any(getattr(a, "port", None) == other for a in f.actions) for f in route)


def test_a_learned_port_swaps_within_its_switch_and_a_bad_port_changes_nothing():
    """learn_port checks only the switch whose ports it swapped (the whole map is
    110,592 link ends at k=48); the map stays a valid port map, and a port number
    out of range is refused before anything is written."""
    from controller.addressing.ports import check_port_map

    config = config_from_dict({"topology": {"fattree": {"k": 4}}, "planner": {"debounce_s": 0.0}})
    service = ControllerService(config, build_topology(config), FakeClock(), store=JobStore(":memory:"))
    wiring, topo = service.wiring, service.wiring.topology
    ports, seen = wiring.ports_snapshot()
    edge = wiring.neighbours("host-1")[0]
    theirs = ports[(topo.index[edge], topo.index["host-0"])]
    assert wiring.learn_port(edge, theirs, "host-1")
    after, _ = wiring.ports_snapshot()
    check_port_map(topo, after)
    assert after[(topo.index[edge], topo.index["host-1"])] == theirs
    assert after[(topo.index[edge], topo.index["host-0"])] == ports[(topo.index[edge], topo.index["host-1"])]
    assert {k: p for k, p in after.items() if k[0] != topo.index[edge]} == \
        {k: p for k, p in ports.items() if k[0] != topo.index[edge]}
    for bad in (0, -1, 0xFFFFFF01):
        with pytest.raises(ValueError, match="invalid port number"):
            wiring.learn_port(edge, bad, "host-2")
        assert wiring.ports_snapshot() == (after, wiring.ports_snapshot()[1])
        assert (topo.index[edge], topo.index["host-2"]) not in wiring.ports_snapshot()[1]
