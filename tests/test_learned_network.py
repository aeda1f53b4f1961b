"""The learned network (controller/learned_network.py): facts from the wire to a planner topology."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.algorithm.network import Network
from controller.core.discovered import DiscoveredNetwork
from controller.southbound.openflow.names import openflow_name
from controller.addressing.ports import check_port_map


def tree() -> DiscoveredNetwork:
    """s1 (root) with s2 on port 1 and s3 on port 2; two hosts under each leaf."""
    net = DiscoveredNetwork()
    for s in ("s1", "s2", "s3"):
        net.add_switch(s)
    net.add_link("s1", 1, "s2", 3)
    net.add_link("s3", 3, "s1", 2)
    for i, (sw, port) in enumerate((("s2", 1), ("s2", 2), ("s3", 1), ("s3", 2)), start=1):
        net.locate_host(f"10.0.0.{i}", f"10.0.0.{i}", f"02:00:00:00:00:0{i}", sw, port)
    return net


def test_openflow_names_follow_the_of_convention():
    assert openflow_name(1) == "of:0000000000000001"
    assert openflow_name(0xABCDEF0123456789) == "of:abcdef0123456789"


def test_build_gives_a_topology_with_the_real_ports():
    lt = tree().build(lambda sw, port: 1e9)
    topo = lt.topology
    assert [n.id for n in topo.nodes] == ["s1", "s2", "s3", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert len(topo.links) == 6
    assert lt.ports[("s1", "s2")] == 1 and lt.ports[("s2", "s1")] == 3
    assert lt.ports[("s1", "s3")] == 2 and lt.ports[("s3", "s1")] == 3
    assert lt.ports[("s3", "10.0.0.4")] == 2
    ports = {(topo.index[a], topo.index[b]): p for (a, b), p in lt.ports.items()}
    check_port_map(topo, ports)
    assert Network(topo).routing.path(topo.index["10.0.0.1"], topo.index["10.0.0.4"])
    assert lt.addresses["10.0.0.3"].mac == "02:00:00:00:00:03"


def test_capacity_is_the_smaller_end_and_budgets_apply():
    speeds = {("s1", 1): 1e9, ("s2", 3): 10e9}
    lt = tree().build(lambda sw, port: speeds.get((sw, port), 5e9), {"s2": (4, 100)})
    cap = {frozenset((link.a, link.b)): link.capacity for link in lt.topology.links}
    assert cap[frozenset(("s1", "s2"))] == 1e9
    assert cap[frozenset(("s2", "10.0.0.1"))] == 5e9
    s2 = lt.topology.nodes[lt.topology.index["s2"]]
    assert (s2.group_capacity, s2.entry_capacity) == (4, 100)
    s1 = lt.topology.nodes[lt.topology.index["s1"]]
    assert (s1.group_capacity, s1.entry_capacity) == (None, None)


def test_a_host_never_sits_on_a_switch_link_and_lldp_evicts_a_guess():
    net = tree()
    with pytest.raises(ValueError, match="leads to another switch"):
        net.locate_host("10.0.0.9", "10.0.0.9", "02:00:00:00:00:09", "s1", 1)
    # a host seen at s1 port 5 before LLDP said that port leads to a switch
    net.add_switch("s4")
    assert net.locate_host("10.0.0.9", "10.0.0.9", "02:00:00:00:00:09", "s1", 5)
    assert net.add_link("s1", 5, "s4", 1)
    assert "10.0.0.9" not in net.hosts and net.peer("s4", 1) == ("s1", 5)


def test_hosts_move_and_a_port_holds_one_host():
    net = tree()
    assert not net.locate_host("10.0.0.1", "10.0.0.1", "02:00:00:00:00:01", "s2", 1)  # known: no change
    assert net.locate_host("10.0.0.1", "10.0.0.1", "02:00:00:00:00:01", "s3", 5)  # moved
    assert net.hosts["10.0.0.1"].switch == "s3" and net.host_at("s2", 1) is None
    assert net.locate_host("10.0.0.7", "10.0.0.7", "02:00:00:00:00:07", "s3", 5)  # another address at that port
    assert "10.0.0.1" not in net.hosts and net.host_at("s3", 5).ip == "10.0.0.7"
    for bad in ("239.1.0.1", "0.0.0.0", "127.0.0.1", "255.255.255.255", "not-an-ip"):
        with pytest.raises(ValueError):
            net.locate_host(bad, bad, "02:00:00:00:00:07", "s3", 6)
    with pytest.raises(ValueError, match="unknown switch"):
        net.locate_host("10.0.0.8", "10.0.0.8", "02:00:00:00:00:08", "s9", 1)


def test_a_rewired_port_drops_its_old_link_and_parallel_links_are_listed():
    net = tree()
    net.add_switch("s4")
    assert net.add_link("s1", 1, "s4", 2)  # s1 port 1 now leads to s4, not s2
    assert net.peer("s2", 3) is None and net.peer("s1", 1) == ("s4", 2)
    assert net.add_link("s1", 7, "s4", 3)  # a second s1-s4 link
    assert set(net.links()) == {frozenset(("s1", "s3")), frozenset(("s1", "s4"))}
    assert net.links()[frozenset(("s1", "s4"))] == (("s1", 1), ("s4", 2))
    assert net.parallel_links() == [(("s1", 7), ("s4", 3))]
    assert not net.add_link("s4", 3, "s1", 7)  # the other direction of a known link
    assert net.remove_link_end("s4", 3) and net.peer("s1", 7) is None
    with pytest.raises(ValueError, match="itself"):
        net.add_link("s1", 8, "s1", 9)
    with pytest.raises(ValueError, match="unknown switch"):
        net.add_link("s1", 8, "s9", 9)


def test_only_the_largest_piece_is_planned_on():
    net = tree()
    net.add_switch("s9")  # no link yet, one host
    net.locate_host("10.0.0.9", "10.0.0.9", "02:00:00:00:00:09", "s9", 1)
    lt = net.build(lambda sw, port: 1e9)
    assert "s9" not in lt.topology.index and "10.0.0.9" not in lt.addresses
    assert net.outside() == {"s9", "10.0.0.9"}
    net.add_link("s9", 2, "s1", 4)
    assert "10.0.0.9" in net.build(lambda sw, port: 1e9).topology.index and net.outside() == set()
    lone = DiscoveredNetwork()
    for s in ("b", "a"):
        lone.add_switch(s)
    assert lone.main_component() == {"a"}  # a tie goes to the first name


def test_json_round_trip_and_bad_input():
    net = tree()
    again = DiscoveredNetwork.from_json(net.to_json())
    assert again.to_json() == net.to_json()
    for bad in ([], {"switches": ["s1"], "links": [["s1", 1, "s2"]]}, {"hosts": [["h", "10.0.0.1", "x", "s1", 1]]}):
        with pytest.raises(ValueError):
            DiscoveredNetwork.from_json(bad)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(1, 4), st.integers(0, 4), st.integers(1, 4)), max_size=25),
       st.lists(st.tuples(st.integers(1, 30), st.integers(0, 4), st.integers(1, 6)), max_size=20))
def test_any_sequence_of_facts_builds_a_consistent_topology(links, hosts):
    net = DiscoveredNetwork()
    for i in range(5):
        net.add_switch(f"s{i}")
    facts = [("link", x) for x in links] + [("host", x) for x in hosts]
    for kind, x in facts:
        if kind == "link":
            a, pa, b, pb = x
            if a != b:
                net.add_link(f"s{a}", pa, f"s{b}", pb)
        else:
            n, sw, port = x
            try:
                net.locate_host(f"10.0.1.{n}", f"10.0.1.{n}", f"02:00:00:00:01:{n:02x}", f"s{sw}", port)
            except ValueError:
                assert net.is_link_end(f"s{sw}", port)
    lt = net.build(lambda sw, port: 1e9)
    topo = lt.topology
    ports = {(topo.index[a], topo.index[b]): p for (a, b), p in lt.ports.items()}
    check_port_map(topo, ports)  # one port per link end, no port used twice on a switch
    if topo.hosts:  # one piece: every host reaches every other
        Network(topo)
        assert not net.outside() & set(topo.index)
    for h in net.hosts.values():
        assert not net.is_link_end(h.switch, h.port)
    assert DiscoveredNetwork.from_json(net.to_json()).to_json() == net.to_json()
