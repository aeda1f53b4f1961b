"""The host rules (core/hosts.py, core/host_moves.py): pinned hosts, confirmed moves,
one host per port, idle hosts forgotten, bounded tables. Driven through
ControllerService with a fake clock and a fake probe sender; no sleeping."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.config import ConfigError, build_topology, config_from_dict
from controller.core.host_moves import IDLE, MOVE, Claim, MoveTable, Place
from controller.core.service import ControllerService
from controller.store.sqlite import JobStore

A, B = "of:000000000000000a", "of:000000000000000b"
V_IP, V_MAC = "10.1.0.2", "02:00:00:00:01:02"  # the victim, at B port 6
X_MAC = "02:00:00:00:0e:0e"  # the attacker's MAC


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(path=":memory:", hosts=None, **discovery):
    config = config_from_dict({
        "planner": {"debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 0.01, "link_hold_down_s": 0},
        "discovery": {"host_timeout_s": 30, **discovery},
        "hosts": {"ps": {"ip": "10.1.0.1"}, **(hosts or {})},
    })
    clock = FakeClock()
    service = ControllerService(config, None, clock, store=JobStore(path))
    probes: list[tuple[str, int, str]] = []
    service.hosts.probe_senders.append(lambda sw, port, ip: probes.append((sw, port, ip)))
    return service, clock, probes


def build(service, clock):
    """A (port 1) -- (port 2) B; 10.1.0.1 (ps) at A:5, the victim at B:6; then quiet for a while."""
    for s in (A, B):
        service.devices.connected(s)
    service.wiring.learn_link(A, 1, B, 2)
    assert service.hosts.learn("10.1.0.1", "02:00:00:00:01:01", A, 5) == "ps"
    assert service.hosts.learn(V_IP, V_MAC, B, 6) == V_IP
    clock.t += 10  # nobody heard from lately


def where(service, ip=V_IP):
    h = service.wiring.discovered.hosts.get(ip)
    return None if h is None else (h.switch, h.port, h.mac)


def refused(service, kind):
    return service.counters.refusals().get(kind, 0)


# -- confirmed moves --------------------------------------------------------------------------------
def test_a_move_waits_for_its_confirmation_and_an_answer_from_the_old_place_refuses_it():
    service, clock, probes = make()
    build(service, clock)
    assert service.hosts.learn(V_IP, X_MAC, A, 7) is None  # the attacker's claim: not learned
    assert where(service) == (B, 6, V_MAC)
    assert probes == [(B, 6, V_IP)]  # asked at its old place
    clock.t += 1
    service.hosts.tick()
    assert where(service) == (B, 6, V_MAC) and probes[-1] == (B, 6, V_IP)  # still pending, asked again
    assert service.hosts.learn(V_IP, V_MAC, B, 6) == V_IP  # the victim answers from its place
    assert refused(service, "host_move_refused") == 1
    clock.t += 5
    service.hosts.tick()
    assert where(service) == (B, 6, V_MAC) and service.hosts.pending_claims() == []


def test_a_host_heard_from_lately_is_not_moved_and_no_probe_is_needed():
    service, clock, probes = make()
    build(service, clock)
    service.hosts.learn(V_IP, V_MAC, B, 6)
    clock.t += 1
    assert service.hosts.learn(V_IP, X_MAC, A, 7) is None
    assert refused(service, "host_move_refused") == 1 and probes == [] and service.hosts.pending_claims() == []


def test_a_host_confirmed_gone_moves_after_move_confirm_s():
    service, clock, probes = make(move_confirm_s=3)
    build(service, clock)
    assert service.hosts.learn(V_IP, "02:00:00:00:01:99", A, 7) is None
    clock.t += 2.9
    service.hosts.tick()
    assert where(service) == (B, 6, V_MAC)
    clock.t += 0.2
    service.hosts.tick()
    assert where(service) == (A, 7, "02:00:00:00:01:99")
    assert service.hosts.learn(V_IP, "02:00:00:00:01:99", A, 7) == V_IP  # its packets there are its own now
    assert refused(service, "host_move_refused") == 0
    assert service.hosts.ports(V_IP) == ((A, 7),)  # the planner's network follows


def test_a_new_mac_at_the_same_port_is_a_move_too():
    service, clock, probes = make()
    build(service, clock)
    assert service.hosts.learn(V_IP, X_MAC, B, 6) is None
    assert probes == [(B, 6, V_IP)] and where(service) == (B, 6, V_MAC)
    service.hosts.learn(V_IP, V_MAC, B, 6)
    assert refused(service, "host_move_refused") == 1 and where(service) == (B, 6, V_MAC)


def test_the_network_changing_under_a_claim_drops_it():
    service, clock, probes = make()
    build(service, clock)
    service.hosts.learn(V_IP, X_MAC, A, 7)
    service.wiring.forget_host(V_IP)  # gone meanwhile (e.g. forgotten)
    clock.t += 3
    service.hosts.tick()
    assert where(service) is None


# -- one host per port ------------------------------------------------------------------------------
def test_a_new_address_at_a_held_port_is_refused_while_the_host_there_answers():
    service, clock, probes = make()
    build(service, clock)
    assert service.hosts.learn("10.1.0.9", X_MAC, B, 6) is None
    assert probes == [(B, 6, V_IP)] and where(service, "10.1.0.9") is None
    service.hosts.learn(V_IP, V_MAC, B, 6)
    assert refused(service, "host_port_full") == 1
    clock.t += 3
    service.hosts.tick()
    assert where(service) == (B, 6, V_MAC) and where(service, "10.1.0.9") is None


def test_ipv4_from_a_new_address_at_a_held_port_makes_no_claim_only_arp_does():
    """A flood of random IPv4 sources from a host's own port starts no claim (no probe
    the flood could crowd out of the packet-in meter); the same address by ARP does."""
    service, clock, probes = make()
    build(service, clock)
    for i in range(50):
        service.hosts.on_ipv4(f"10.2.{i}.9", X_MAC, B, 6)
    assert probes == [] and service.hosts.pending_claims() == [] and refused(service, "host_port_full") == 50
    clock.t += 3
    service.hosts.tick()
    assert where(service) == (B, 6, V_MAC) and where(service, "10.2.0.9") is None
    service.hosts.on_arp(B, 6, op=1, sender_ip="10.1.0.9", sender_mac=X_MAC, target_ip="10.1.0.1", routed=False)
    assert probes == [(B, 6, V_IP)] and len(service.hosts.pending_claims()) == 1
    # on a free port an IPv4 source still teaches the controller a new host
    service.hosts.on_ipv4("10.1.0.7", "02:00:00:00:07:07", B, 7)
    assert where(service, "10.1.0.7") == (B, 7, "02:00:00:00:07:07")


def test_a_new_address_at_a_port_whose_host_spoke_lately_is_refused_at_once():
    service, clock, probes = make()
    build(service, clock)
    service.hosts.learn(V_IP, V_MAC, B, 6)
    clock.t += 1.5
    assert service.hosts.learn("10.1.0.9", X_MAC, B, 6) is None
    assert refused(service, "host_port_full") == 1 and probes == [] and service.hosts.pending_claims() == []


def test_a_new_address_takes_a_port_whose_host_is_confirmed_gone():
    service, clock, probes = make()
    build(service, clock)
    service.hosts.learn("10.1.0.9", X_MAC, B, 6)
    clock.t += 2
    service.hosts.tick()
    assert where(service) is None and where(service, "10.1.0.9") == (B, 6, X_MAC)
    assert refused(service, "host_port_full") == 0


def test_a_host_moving_onto_a_held_port_asks_itself_then_the_holder():
    service, clock, probes = make()
    build(service, clock)
    service.hosts.learn(V_IP, V_MAC, A, 5)  # ps's port
    assert probes == [(B, 6, V_IP)] and where(service) == (B, 6, V_MAC)  # is the victim still at its place?
    clock.t += 2
    service.hosts.tick()  # no: but A:5 holds ps, which is asked next
    assert where(service) == (B, 6, V_MAC) and probes[-1] == (A, 5, "10.1.0.1")
    clock.t += 2
    service.hosts.tick()  # ps is gone; the victim, still recorded at B:6, moves on its next packet there, confirmed
    assert where(service, "10.1.0.1") is None and where(service) == (B, 6, V_MAC)
    service.hosts.learn(V_IP, V_MAC, A, 5)
    clock.t += 2
    service.hosts.tick()
    assert where(service) == (A, 5, V_MAC)
    # and an answering holder keeps its port
    service.hosts.learn("10.1.0.9", X_MAC, A, 7)
    clock.t += 10
    service.hosts.learn(V_IP, V_MAC, A, 7)
    clock.t += 2
    service.hosts.tick()
    service.hosts.learn("10.1.0.9", X_MAC, A, 7)  # the holder answers
    assert refused(service, "host_port_full") == 1 and where(service) == (A, 5, V_MAC)


def test_more_than_one_host_per_port_is_refused_by_the_config():
    with pytest.raises(ConfigError, match="discovery.max_hosts_per_port: at most 1"):
        make(max_hosts_per_port=4)
    service, _, _ = make(max_hosts_per_port=1)
    assert service.config.discovery.max_hosts_per_port == 1


# -- idle hosts ---------------------------------------------------------------------------------------
def test_a_silent_host_is_asked_then_forgotten_unless_it_answers_or_a_job_names_it():
    service, clock, probes = make(host_idle_s=100)
    build(service, clock)  # heard 10 s ago
    clock.t += 85
    service.hosts.tick()
    assert probes == []
    clock.t += 10
    service.hosts.tick()
    assert sorted(probes) == [(A, 5, "10.1.0.1"), (B, 6, V_IP)]
    service.hosts.learn("10.1.0.1", "02:00:00:00:01:01", A, 5)  # ps answers; the victim does not
    clock.t += 2
    service.hosts.tick()
    assert where(service) is None and where(service, "10.1.0.1") is not None
    assert V_IP not in service.wiring.topology.index  # re-planned without it
    assert service.counters.refusals() == {}  # silence is no refusal
    # a host a planned job names stays, however silent
    service.hosts.learn(V_IP, V_MAC, B, 6)
    service.add_job("ps", [V_IP], 1e9, job_id="j", wait=False)
    clock.t += 1000
    service.hosts.tick()
    clock.t += 5
    service.hosts.tick()
    assert where(service) == (B, 6, V_MAC)


def test_host_idle_s_zero_never_forgets():
    service, clock, probes = make(host_idle_s=0)
    build(service, clock)
    clock.t += 10 ** 7
    service.hosts.tick()
    clock.t += 10
    service.hosts.tick()
    assert probes == [] and where(service) == (B, 6, V_MAC)


def test_hosts_restored_from_the_store_are_heard_from_at_the_restart(tmp_path):
    path = tmp_path / "jobs.sqlite"
    service, clock, _ = make(path, host_idle_s=100)
    build(service, clock)
    service.planning.replan()
    service.close()
    again, clock, probes = make(path, host_idle_s=100)
    assert where(again) == (B, 6, V_MAC)
    clock.t += 1
    again.hosts.tick()
    clock.t += 99.5
    again.hosts.tick()
    assert probes == []
    clock.t += 1
    again.hosts.tick()
    assert (B, 6, V_IP) in probes
    again.close()


# -- pinned hosts -------------------------------------------------------------------------------------
PINNED = {"victim": {"ip": V_IP, "mac": V_MAC, "switch": B, "port": 6}}


def test_a_pinned_host_is_taken_only_at_its_place_and_with_its_mac():
    service, clock, probes = make(hosts=PINNED, host_idle_s=100)
    for s in (A, B):
        service.devices.connected(s)
    service.wiring.learn_link(A, 1, B, 2)
    assert service.hosts.learn(V_IP, X_MAC, A, 7) is None  # elsewhere
    assert service.hosts.learn(V_IP, V_MAC, A, 7) is None  # elsewhere, with its MAC
    assert service.hosts.learn(V_IP, X_MAC, B, 6) is None  # its place, another MAC
    assert refused(service, "arp_spoof") == 3 and where(service) is None and probes == []
    assert service.hosts.learn(V_IP, V_MAC, B, 6) == "victim"
    assert where(service) == (B, 6, V_MAC)
    clock.t += 10
    assert service.hosts.learn(V_IP, X_MAC, A, 7) is None  # never a claim to confirm: refused outright
    assert service.hosts.learn("10.1.0.9", X_MAC, B, 6) is None  # its port is held
    assert refused(service, "arp_spoof") == 4 and refused(service, "host_port_full") == 1
    clock.t += 1000
    service.hosts.tick()
    clock.t += 10
    service.hosts.tick()
    assert where(service) == (B, 6, V_MAC) and probes == []  # never moved, never forgotten


def test_a_pinned_port_is_an_edge_port_and_a_configured_mac_is_enforced_in_a_learned_network():
    service, clock, _ = make(hosts={**PINNED, "other": {"ip": "10.1.0.3", "mac": "02:00:00:00:01:03"}})
    for s in (A, B):
        service.devices.connected(s)
    assert not service.wiring.learn_link(A, 1, B, 6)  # LLDP may not make B:6 a link end
    assert refused(service, "lldp_edge_port") == 1
    assert service.hosts.learn("10.1.0.3", X_MAC, A, 8) is None
    assert refused(service, "arp_spoof") == 1
    assert service.hosts.learn("10.1.0.3", "02:00:00:00:01:03", A, 8) == "other"


def test_pins_are_checked_by_the_config():
    def config(hosts, topology=None):
        data = {"hosts": hosts}
        if topology is not None:
            data["topology"] = topology
        return config_from_dict(data)

    with pytest.raises(ConfigError, match="hosts.v.port: switch and port go together"):
        config({"v": {"ip": "10.0.0.1", "switch": A}})
    with pytest.raises(ConfigError, match="hosts.v.switch: switch and port go together"):
        config({"v": {"ip": "10.0.0.1", "port": 3}})
    with pytest.raises(ConfigError, match="hosts.w.port: of:000000000000000a port 3 is also host v's"):
        config({"v": {"ip": "10.0.0.1", "switch": A, "port": 3}, "w": {"ip": "10.0.0.2", "switch": A, "port": 3}})
    with pytest.raises(ConfigError, match="hosts.v.switch: 'leaf' is neither"):
        config({"v": {"ip": "10.0.0.1", "switch": "leaf", "port": 3}})
    with pytest.raises(ConfigError, match="hosts.v.port: must be"):
        config({"v": {"ip": "10.0.0.1", "switch": A, "port": 0}})
    fattree = {"fattree": {"k": 4}}
    with pytest.raises(ConfigError, match="hosts.host-0.switch: the topology does not attach host host-0 to edge-1-0"):
        config({"host-0": {"ip": "10.0.0.1", "switch": "edge-1-0", "port": 1}}, fattree)
    c = config({"host-0": {"ip": "10.0.0.1", "switch": "edge-0-0", "port": 1}}, fattree)
    assert c.hosts["host-0"].pinned == ("edge-0-0", 1)
    with pytest.raises(ConfigError, match="discovery.link_capacity: applies only without a topology"):
        config_from_dict({"topology": fattree, "discovery": {"link_capacity": 1e9}})
    c = config_from_dict({"topology": fattree, "discovery": {"move_confirm_s": 5, "host_idle_s": 0}})
    assert (c.discovery.move_confirm_s, c.discovery.host_idle_s, c.discovery.max_hosts_per_port) == (5, 0, 1)
    assert config_from_dict({}).discovery.move_confirm_s == 2 and config_from_dict({}).discovery.host_idle_s == 3600


# -- a declared topology ------------------------------------------------------------------------------
def declared(**hosts):
    config = config_from_dict({"topology": {"fattree": {"k": 4}}, "hosts": hosts,
                               "planner": {"debounce_s": 0.0, "max_delay_s": 0.0}})
    clock = FakeClock()
    service = ControllerService(config, build_topology(config), clock, store=JobStore(":memory:"))
    probes: list = []
    service.hosts.probe_senders.append(lambda sw, port, ip: probes.append((sw, port, ip)))
    return service, clock, probes


def test_a_declared_topologys_host_moves_between_ports_only_once_confirmed():
    service, clock, probes = declared()
    sw = service.wiring.neighbours("host-0")[0]
    assert service.hosts.learn("10.0.0.1", "02:aa:00:00:00:01", sw, 9) == "host-0"  # first seen: taken
    clock.t += 10
    assert service.hosts.learn("10.0.0.1", X_MAC, sw, 8) is None  # another port and MAC: a claim
    assert probes == [(sw, 9, "10.0.0.1")] and service.hosts.ports("host-0") == ((sw, 9),)
    service.hosts.learn("10.0.0.1", "02:aa:00:00:00:01", sw, 9)
    assert service.counters.refusals() == {"host_move_refused": 1}
    clock.t += 10
    service.hosts.learn("10.0.0.1", "02:aa:00:00:00:07", sw, 8)
    clock.t += 2
    service.hosts.tick()
    assert service.hosts.ports("host-0") == ((sw, 8),) and service.hosts.mac("host-0") == "02:aa:00:00:00:07"


def test_a_declared_topologys_pinned_host_refuses_other_ports_and_macs():
    service, clock, probes = declared(**{"host-0": {"ip": "10.0.0.1", "mac": "02:aa:00:00:00:01",
                                                    "switch": "edge-0-0", "port": 1}})
    assert service.hosts.learn("10.0.0.1", "02:aa:00:00:00:01", "edge-0-0", 2) is None
    assert service.hosts.learn("10.0.0.1", X_MAC, "edge-0-0", 1) is None
    assert service.counters.refusals() == {"arp_spoof": 2} and probes == []
    assert service.hosts.learn("10.0.0.1", "02:aa:00:00:00:01", "edge-0-0", 1) == "host-0"


# -- bounded tables -----------------------------------------------------------------------------------
def test_move_table_bounds_drop_the_oldest_first():
    table = MoveTable(max_pending=3, max_heard=3)
    place = Place("s", 1, "02:00:00:00:00:01")
    for i in range(5):
        assert table.claim(Claim(MOVE, f"10.0.0.{i}", place, f"10.0.0.{i}", place, float(i)))
        table.heard(f"10.0.0.{i}", float(i))
    assert [c.ip for c in table.claims()] == ["10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert table.silent_since(100.0) == ["10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert not table.claim(Claim(IDLE, "10.0.0.4", place, None, None, 9.0))  # one claim per host


def test_hosts_table_of_a_learned_network_is_bounded(monkeypatch):
    import controller.core.hosts as hosts_module

    monkeypatch.setattr(hosts_module, "MAX_LEARNED_HOSTS", 3)
    service, clock, _ = make()
    build(service, clock)
    service.add_job("ps", [V_IP], 1e9, job_id="j", wait=False)
    for i in range(3, 8):
        clock.t += 1
        assert service.hosts.learn(f"10.1.0.{i}", f"02:00:00:00:02:0{i}", A, 10 + i) is not None
    net = service.wiring.discovered
    assert len(net.hosts) == 3
    assert {"10.1.0.1", V_IP} <= set(net.hosts)  # named by a planned job: kept
    assert "10.1.0.7" in net.hosts


def test_unexpected_hosts_are_bounded_oldest_first(monkeypatch):
    import controller.core.hosts as hosts_module

    monkeypatch.setattr(hosts_module, "MAX_UNEXPECTED", 3)
    service, _, _ = declared()
    sw = service.wiring.neighbours("host-0")[0]
    for i in range(5):
        service.hosts.learn(f"10.9.0.{i}", X_MAC, sw, 1)
    assert [h.ip for h in service.hosts.unexpected()] == ["10.9.0.2", "10.9.0.3", "10.9.0.4"]


# -- properties ---------------------------------------------------------------------------------------
PORTS = st.tuples(st.sampled_from([A, B]), st.integers(5, 9))
MACS = st.sampled_from([V_MAC, X_MAC, "02:00:00:00:0e:0f"])
EVENT = st.one_of(
    st.tuples(st.just("claim"), PORTS, MACS),
    st.tuples(st.just("wait"), st.floats(0.0, 3.0)),
    st.tuples(st.just("tick")),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(EVENT, max_size=30))
def test_property_a_host_that_answers_never_moves(events):
    service, clock, probes = make()
    build(service, clock)
    for event in events:
        if event[0] == "claim":
            (sw, port), mac = event[1], event[2]
            service.hosts.learn(V_IP, mac, sw, port)
        elif event[0] == "wait":
            clock.t += event[1]
        else:
            service.hosts.tick()
        while probes:  # the victim answers every probe at once
            sw, port, ip = probes.pop()
            if ip == V_IP:
                service.hosts.learn(V_IP, V_MAC, sw, port)
            elif ip == "10.1.0.1":
                service.hosts.learn(ip, "02:00:00:00:01:01", sw, port)
        assert where(service) == (B, 6, V_MAC)


@settings(max_examples=60, deadline=None)
@given(st.lists(EVENT, max_size=30))
def test_property_a_silent_host_moves_only_to_a_claim_older_than_move_confirm_s(events):
    service, clock, probes = make()
    build(service, clock)
    claims: list[tuple[float, tuple[str, int, str]]] = []
    before = where(service)
    for event in events:
        if event[0] == "claim":
            (sw, port), mac = event[1], event[2]
            service.hosts.learn(V_IP, mac, sw, port)
            claims.append((clock.t, (sw, port, mac)))
        elif event[0] == "wait":
            clock.t += event[1]
        else:
            service.hosts.tick()
        now = where(service)
        if now != before:
            assert event[0] == "tick", "moved without a tick (no confirmation)"
            assert any(place == now and clock.t - t >= 2.0 for t, place in claims), (now, claims, clock.t)
            before = now


@settings(max_examples=40, deadline=None)
@given(PORTS, MACS, st.floats(2.0, 100.0))
def test_property_a_host_confirmed_gone_moves(port, mac, wait):
    sw, p = port
    service, clock, _ = make()
    build(service, clock)
    service.hosts.learn(V_IP, mac, sw, p)
    clock.t += wait
    service.hosts.tick()
    if (sw, p) == (A, 5):  # ps's port: ps is asked next, then the victim's next packet is a claim
        clock.t += wait
        service.hosts.tick()
        assert where(service, "10.1.0.1") is None
        service.hosts.learn(V_IP, mac, sw, p)
        clock.t += wait
        service.hosts.tick()
    assert where(service) == (sw, p, mac if (sw, p) != (B, 6) or mac != V_MAC else V_MAC)


# -- the backends' part -------------------------------------------------------------------------------
def test_the_openflow_app_sends_the_probes_out_of_one_port():
    pytest.importorskip("os_ken")
    from controller.southbound.openflow.app import MulticastOFCtl
    from controller.southbound.probes import arp_probe

    service, clock, probes = make()
    app = MulticastOFCtl.detached(service)
    sent = []
    app._packet_out = lambda ends, frame: sent.append((tuple(ends), frame))
    build(service, clock)
    service.hosts.learn(V_IP, X_MAC, A, 7)
    assert sent == [(((B, 6),), arp_probe(V_IP))] and probes == [(B, 6, V_IP)]


def test_the_host_loop_ticks_until_stopped_and_survives_a_failure():
    import threading

    from controller.southbound.probes import host_loop

    stop = threading.Event()
    ticks: list[int] = []

    def tick() -> None:
        ticks.append(1)
        if len(ticks) == 1:
            raise RuntimeError("one bad round")
        if len(ticks) >= 3:
            stop.set()

    t = threading.Thread(target=host_loop, args=(stop, 0.001, tick))
    t.start()
    t.join(5)
    assert not t.is_alive() and len(ticks) == 3


def test_every_periodic_round_that_fails_is_logged_on_its_callers_logger_and_the_next_comes(caplog):
    # `southbound.periodic.every`: the loop of host_loop, probe_loop, the LLDP,
    # port statistics and heartbeat threads
    import logging
    import threading

    from controller.southbound.periodic import every

    stop = threading.Event()
    rounds: list[int] = []

    def work() -> None:
        rounds.append(1)
        if len(rounds) <= 2:
            raise RuntimeError("one bad round")
        stop.set()

    caplog.set_level(logging.ERROR)
    t = threading.Thread(target=every, args=(stop, 0.001, work, "LLDP round failed", logging.getLogger("controller.ofctl")))
    t.start()
    t.join(5)
    assert not t.is_alive() and len(rounds) == 3
    failed = [(r.name, r.getMessage(), r.exc_info[0]) for r in caplog.records]
    assert failed == [("controller.ofctl", "LLDP round failed", RuntimeError)] * 2
    every(stop, 0.001, work, "never", logging.getLogger("x"))  # returns at once once stopped
    assert len(rounds) == 3


# -- the store, ARP replies, a declared topology's strays ---------------------------------------------
def test_the_config_pins_win_over_the_stored_network(tmp_path):
    path = tmp_path / "jobs.sqlite"
    service, clock, _ = make(path)
    build(service, clock)
    service.hosts.learn("10.1.0.3", "02:00:00:00:01:03", A, 8)
    service.planning.replan()
    service.close()
    pins = {"victim": {"ip": V_IP, "mac": V_MAC, "switch": A, "port": 7},  # pinned elsewhere than stored
            "other": {"ip": "10.1.0.9", "switch": A, "port": 8}}  # 10.1.0.3 sits on its port
    again, clock, _ = make(path, hosts=pins)
    assert where(again) is None and where(again, "10.1.0.3") is None and where(again, "10.1.0.1") is not None
    assert again.hosts.learn(V_IP, V_MAC, A, 7) == "victim"
    again.close()


def test_a_forged_arp_reply_is_not_passed_on_to_the_asker():
    from controller.core.hosts import ARP_REPLY

    service, clock, _ = make()
    build(service, clock)
    forged = service.hosts.on_arp(A, 7, op=ARP_REPLY, sender_ip=V_IP, sender_mac=X_MAC, target_ip="10.1.0.1",
                                  routed=False)
    assert forged.forward_to == () and forged.reply_mac is None
    genuine = service.hosts.on_arp(B, 6, op=ARP_REPLY, sender_ip=V_IP, sender_mac=V_MAC, target_ip="10.1.0.1",
                                   routed=False)
    assert genuine.forward_to == ((A, 5),)


def test_a_declared_topologys_strays_are_counted():
    service, _, _ = declared()
    assert service.hosts.learn("10.0.0.1", X_MAC, "edge-1-0", 1) is None  # host-0 lives on edge-0-0
    assert service.hosts.learn("10.9.9.9", X_MAC, "edge-1-0", 2) is None
    assert service.counters.refusals() == {"arp_spoof": 1, "host_unknown": 1}
    assert {h.reason for h in service.hosts.unexpected()} == {"elsewhere", "unknown_address"}


def test_the_p4runtime_backend_probes_the_old_place_and_the_answer_refuses_the_move():
    pytest.importorskip("grpc")
    from test_p4_learned import HOSTS, LearnedP4Fabric
    from test_p4_runtime import _arp, wait_for

    from controller.southbound.probes import PROBE_MAC, arp_probe

    fab = LearnedP4Fabric()
    try:
        service = fab.service
        for name in fab.servers:
            assert fab.backend.connect(name), name
        assert fab.carry_lldp() == 4
        wait_for(lambda: len(service.wiring.topology.links) == 2)
        for ip, (sw, port, mac) in HOSTS.items():
            fab.announce(ip, sw, port, mac)
        wait_for(lambda: len(service.wiring.topology.hosts) == 3)
        victim, (vsw, vport, vmac) = "172.16.9.20", HOSTS["172.16.9.20"]
        fab.clock.now += 10
        before = len(fab.servers[vsw].packet_outs)
        fab.announce(victim, "leaf-a", 4, X_MAC)  # the forged claim, from another switch
        wait_for(lambda: any(p == arp_probe(victim) and m["egress_port"] == vport
                             for p, m in fab.servers[vsw].packet_outs[before:]))
        fab.servers[vsw].send_packet_in(_arp(2, vmac, victim, PROBE_MAC, "0.0.0.0"), vport)  # it answers
        wait_for(lambda: service.counters.refusals().get("host_move_refused") == 1)
        fab.clock.now += 5
        service.hosts.tick()
        h = service.wiring.discovered.hosts[victim]
        assert (h.switch, h.port, h.mac) == (vsw, vport, vmac)
    finally:
        fab.close()


def test_a_full_hosts_table_whose_hosts_may_not_go_refuses_a_new_one(monkeypatch):
    import controller.core.hosts as hosts_module

    monkeypatch.setattr(hosts_module, "MAX_LEARNED_HOSTS", 2)
    service, clock, _ = make()
    build(service, clock)
    service.add_job("ps", [V_IP], 1e9, job_id="j", wait=False)
    assert service.hosts.learn("10.1.0.3", "02:00:00:00:02:03", A, 8) is None
    assert refused(service, "host_table_full") == 1 and len(service.wiring.discovered.hosts) == 2


def test_a_claim_for_a_place_no_host_can_be_is_no_claim():
    service, clock, probes = make()
    build(service, clock)
    assert service.hosts.learn(V_IP, X_MAC, A, 1) is None  # A:1 leads to B
    assert service.hosts.learn("224.0.0.9", X_MAC, B, 6) is None  # not a host address, at a held port
    assert probes == [] and service.hosts.pending_claims() == []


def test_many_silent_hosts_are_asked_a_table_at_a_time_and_all_forgotten():
    service, clock, probes = make(host_idle_s=100)
    service.hosts._moves.max_pending = 8
    for s in (A, B):
        service.devices.connected(s)
    service.wiring.learn_link(A, 1, B, 2)
    for i in range(20):
        service.hosts.learn(f"10.2.0.{i}", f"02:00:00:00:03:{i:02x}", B, 10 + i)
    clock.t += 200
    for _ in range(12):
        service.hosts.tick()
        assert len(service.hosts.pending_claims()) <= 4  # half the table at most: moves keep the rest
        clock.t += 1
    assert service.wiring.discovered.hosts == {}
