"""The rule of the edge (core.wiring): LLDP never makes a switch link of a port
where a host has been seen, or of a declared edge port; refused, counted as
`lldp_edge_port`."""

from __future__ import annotations

from controller.config import build_topology, config_from_dict
from controller.core.service import ControllerService
from controller.store.sqlite import JobStore

A, B, C = "of:000000000000000a", "of:000000000000000b", "of:000000000000000c"


def learned(**southbound):
    config = config_from_dict({
        "planner": {"debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 0.01, "link_hold_down_s": 0},
        **({"southbound": southbound} if southbound else {}),
    })
    service = ControllerService(config, None, lambda: 1000.0, store=JobStore(":memory:"))
    return service


def test_a_discovered_network_never_links_a_port_where_a_host_was_seen():
    service = learned()
    for s in (A, B, C):
        service.devices.connected(s)
    wiring = service.wiring
    assert wiring.learn_link(A, 1, B, 2)
    assert service.hosts.learn("10.1.0.2", "02:00:00:00:01:02", B, 6) == "10.1.0.2"
    # a probe of A's port 3 relayed by the host at B:6 (or one from C relayed there)
    assert wiring.learn_link(A, 3, B, 6) is False
    assert wiring.learn_link(B, 6, C, 1) is False
    assert not wiring.is_link_end(B, 6) and not wiring.is_link_end(A, 3) and not wiring.is_link_end(C, 1)
    assert service.counters.refusals() == {"lldp_edge_port": 2}
    assert service.hosts.by_ip("10.1.0.2") is not None  # the host stays where it is
    # a real link elsewhere is still learned
    assert wiring.learn_link(B, 3, C, 1)
    assert service.counters.refusals() == {"lldp_edge_port": 2}


def test_a_declared_edge_port_is_never_a_link():
    service = learned(admit="any", switches={"edge": {"dpid": 10, "edge_ports": [4, 5]}})
    for s in ("edge", B):
        service.devices.connected(s)
    wiring = service.wiring
    assert wiring.learn_link("edge", 4, B, 1) is False
    assert wiring.learn_link(B, 2, "edge", 5) is False
    assert wiring.learn_link("edge", 1, B, 1)
    assert service.counters.refusals() == {"lldp_edge_port": 2}


def test_a_declared_topology_never_gives_a_port_where_a_host_was_seen_to_a_switch():
    config = config_from_dict({
        "topology": {"leaf_spine": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2}},
        "southbound": {"switches": {"leaf-1": {"edge_ports": [9]}}},
    })
    topo = build_topology(config)
    service = ControllerService(config, topo, lambda: 1000.0, store=JobStore(":memory:"))
    wiring = service.wiring
    idx = topo.index
    host = next(topo.name(n) for n in topo.neighbors[idx["leaf-0"]] if not topo.is_switch(n))
    host_port = wiring.port_map()[(idx["leaf-0"], idx[host])]
    spine_port = wiring.port_map()[(idx["leaf-0"], idx["spine-0"])]
    # the default map's host port is a guess until the host speaks there
    other = next(topo.name(n) for n in topo.neighbors[idx["leaf-1"]] if not topo.is_switch(n))
    other_port = wiring.port_map()[(idx["leaf-1"], idx[other])]
    assert wiring.learn_port("leaf-1", other_port, "spine-0") is True
    assert service.counters.refusals() == {}
    assert wiring.learn_port("leaf-0", host_port, host) is False  # host's packet: seen there
    before = wiring.port_map()
    assert wiring.learn_port("leaf-0", host_port, "spine-0") is False
    assert wiring.learn_link("leaf-0", host_port, "spine-1", 1) is False
    assert wiring.learn_link("spine-0", 1, "leaf-0", host_port) is False
    assert wiring.learn_link("leaf-1", 9, "spine-0", 2) is False
    assert wiring.port_map() == before
    assert service.counters.refusals() == {"lldp_edge_port": 4}
    # a swap between two switch ports is still learned
    other_uplink = wiring.port_map()[(idx["leaf-0"], idx["spine-1"])]
    assert wiring.learn_port("leaf-0", other_uplink, "spine-0") is True
    assert wiring.link_at("leaf-0", spine_port) == "spine-1"
    # a host's own port, taught by its packet, is not an LLDP link: never refused
    assert wiring.learn_port("leaf-0", host_port, host) is False
    assert service.counters.refusals() == {"lldp_edge_port": 4}
