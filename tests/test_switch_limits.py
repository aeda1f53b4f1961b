"""The budgets a switch reports about itself (`ControllerService.report_limits`):
the effective G(v), F(v) is the smallest of the configured budget, the reported
limit and the budget learned from table-full errors; GET /switches says which."""

from __future__ import annotations

import pytest

from controller.algorithm.wire import payload_capacity
from controller.config import build_topology, config_from_dict
from controller.core.devices import BudgetState
from controller.core.service import ControllerService
from controller.store.sqlite import JobStore


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_service(topology_extra=None):
    topo = {"fattree": {"k": 4}}
    topo.update(topology_extra or {})
    config = config_from_dict({"topology": topo, "planner": {"debounce_s": 0.2, "max_delay_s": 1.0}})
    clock = FakeClock()
    service = ControllerService(config, build_topology(config), clock, store=JobStore(":memory:"))
    return service, clock


def status(service, switch):
    return {s.id: s for s in service.devices.statuses()}[switch]


def planned_groups(service, switch):
    v = service.wiring.topology.index[switch]
    return sum(1 for jp in service.served.plan().jobs if v in jp.structure.groups)


def add_jobs(service):
    for i, ps in enumerate(("host-0", "host-1", "host-2", "host-3")):
        service.add_job(ps, ["host-4", "host-8", "host-12", "host-13"], 1e9, job_id=f"j{i}", wait=False)


def test_without_config_the_switch_limit_is_the_budget_and_the_planner_keeps_within_it():
    service, clock = make_service()
    add_jobs(service)
    service.planning.replan()
    busiest = max(service.wiring.topology.switches, key=lambda v: planned_groups(service, service.wiring.topology.name(v)))
    name = service.wiring.topology.name(busiest)
    used = planned_groups(service, name)
    assert used >= 2
    st = status(service, name)
    assert (st.group_capacity, st.group_capacity_source) == (None, None)
    assert service.devices.report_limits(name, max_groups=1, max_entries=1000)
    st = status(service, name)
    assert (st.group_capacity, st.group_capacity_source, st.reported_group_capacity) == (1, "switch", 1)
    assert (st.entry_capacity, st.entry_capacity_source, st.configured_entry_capacity) == (1000, "switch", None)
    # one ordinary, debounced change
    assert not service.planning.replan_due()
    clock.now += 0.2
    assert service.planning.poll() is not None
    assert planned_groups(service, name) <= 1
    # the same report again changes nothing
    assert not service.devices.report_limits(name, max_groups=1, max_entries=1000)
    assert not service.planning.replan_due()


def test_a_configured_budget_below_the_switch_limit_wins_and_above_it_does_not():
    service, _ = make_service({"group_capacity": 5, "switches": {"edge-0-0": {"group_capacity": 2}}})
    service.devices.report_limits("edge-0-0", max_groups=4096)
    service.devices.report_limits("edge-0-1", max_groups=3)
    a, b = status(service, "edge-0-0"), status(service, "edge-0-1")
    assert (a.group_capacity, a.group_capacity_source, a.configured_group_capacity, a.reported_group_capacity) == (
        2, "config", 2, 4096,
    )
    assert (b.group_capacity, b.group_capacity_source, b.configured_group_capacity) == (3, "switch", 5)
    topo, _ = service.links.planning_topology(frozenset(), BudgetState(service.devices.limits(), {}, {}))
    assert topo.nodes[topo.index["edge-0-0"]].group_capacity == 2
    assert topo.nodes[topo.index["edge-0-1"]].group_capacity == 3


def test_table_full_learning_stays_below_the_reported_limit():
    service, _ = make_service()
    add_jobs(service)
    service.planning.replan()
    name = max((service.wiring.topology.name(v) for v in service.wiring.topology.switches), key=lambda s: planned_groups(service, s))
    used = planned_groups(service, name)
    service.devices.report_limits(name, max_groups=used)
    learned = service.devices.table_full(name, "group", None)
    assert learned == used - 1
    st = status(service, name)
    assert (st.group_capacity, st.group_capacity_source, st.learned_group_capacity) == (used - 1, "table_full", used - 1)
    # a later, lower report wins over the learned budget
    service.devices.report_limits(name, max_groups=0)
    st = status(service, name)
    assert (st.group_capacity, st.group_capacity_source) == (0, "switch")


def test_p4info_source_and_unknown_switch():
    service, _ = make_service()
    service.devices.report_limits("core-0", max_groups=32767, max_entries=1024, source="p4info")
    st = status(service, "core-0")
    assert (st.group_capacity_source, st.entry_capacity_source) == ("p4info", "p4info")
    with pytest.raises(ValueError):
        service.devices.report_limits("host-0", max_groups=1)


# -- the os-ken app: what the switch says, parsed by os-ken, reaches the service ------------


def _wire_reply(ofp, mp_type: int, body: bytes, xid: int, more: bool = False) -> bytes:
    import struct

    flags = ofp.OFPMPF_REPLY_MORE if more else 0
    mp = struct.pack(ofp.OFP_MULTIPART_REPLY_PACK_STR, mp_type, flags)
    length = ofp.OFP_HEADER_SIZE + len(mp) + len(body)
    return struct.pack(ofp.OFP_HEADER_PACK_STR, ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY, length, xid) + mp + body


def _parsed(dp, data: bytes):
    import struct

    from os_ken.ofproto import ofproto_parser

    version, msg_type, length, xid = struct.unpack_from(dp.ofproto.OFP_HEADER_PACK_STR, data)
    return ofproto_parser.msg(dp, version, msg_type, length, xid, data)


def _port(ofp, port_no: int, curr_kbps: int, max_kbps: int) -> bytes:
    import struct

    return struct.pack(
        ofp.OFP_PORT_PACK_STR, port_no, b"\x02\x00\x00\x00\x00\x01", b"p%d" % port_no, 0, 0, 0, 0, 0, 0, curr_kbps, max_kbps
    )


def test_openflow_app_reports_port_speeds_max_groups_and_forward_table_entries():
    pytest.importorskip("os_ken")
    import struct
    from types import SimpleNamespace

    from os_ken.ofproto import ofproto_v1_3 as ofp
    from os_ken.ofproto import ofproto_v1_3_parser as parser

    from controller.southbound.openflow.app import MulticastOFCtl
    from controller.southbound.openflow.entries import TABLE_FORWARD

    service, _ = make_service()
    app = MulticastOFCtl.detached(service)  # the handlers only, without os-ken's app manager
    dpid = {name: i for i, name in app._dpids.items()}
    dp = SimpleNamespace(id=dpid["edge-0-0"], ofproto=ofp, ofproto_parser=parser)

    # port descriptions: curr_speed, else max_speed (kbit/s); 0 where neither; LOCAL left out
    body = _port(ofp, 1, 10_000_000, 0) + _port(ofp, 2, 0, 1_000_000) + _port(ofp, 3, 0, 0) + _port(ofp, ofp.OFPP_LOCAL, 10, 10)
    msg = _parsed(dp, _wire_reply(ofp, ofp.OFPMP_PORT_DESC, body, 7))
    assert isinstance(msg, parser.OFPPortDescStatsReply)
    app._port_desc(SimpleNamespace(msg=msg))
    assert service.devices.limits()["edge-0-0"].port_speeds == {1: 10_000_000_000, 2: 1_000_000_000, 3: 0}

    # group features: max_groups of type ALL (the first of the four)
    body = struct.pack(ofp.OFP_GROUP_FEATURES_PACK_STR, 0xF, 0x7, 4096, 1, 2, 3, 0, 0, 0, 0)
    msg = _parsed(dp, _wire_reply(ofp, ofp.OFPMP_GROUP_FEATURES, body, 8))
    assert isinstance(msg, parser.OFPGroupFeaturesStatsReply)
    app._group_features(SimpleNamespace(msg=msg))
    assert service.devices.limits()["edge-0-0"].max_groups == 4096

    # table features in two parts: nothing is reported before the last one;
    # max_entries of the forwarding table, not of table 0
    def tf(table_id, max_entries):
        return parser.OFPTableFeaturesStats(table_id, b"t%d" % table_id, 0, 0, 0, max_entries, []).serialize()

    first = _parsed(dp, _wire_reply(ofp, ofp.OFPMP_TABLE_FEATURES, tf(0, 500), 9, more=True))
    last = _parsed(dp, _wire_reply(ofp, ofp.OFPMP_TABLE_FEATURES, tf(TABLE_FORWARD, 1234) + tf(2, 99), 9))
    assert isinstance(first, parser.OFPTableFeaturesStatsReply)
    app._table_features(SimpleNamespace(msg=first))
    assert service.devices.limits()["edge-0-0"].max_entries is None
    app._table_features(SimpleNamespace(msg=last))
    assert service.devices.limits()["edge-0-0"].max_entries == 1234
    st = status(service, "edge-0-0")
    assert (st.group_capacity, st.group_capacity_source, st.entry_capacity, st.entry_capacity_source) == (
        4096, "switch", 1234, "switch",
    )

    # on connect the app asks for all three
    sent = []
    dp2 = SimpleNamespace(id=dpid["edge-0-1"], ofproto=ofp, ofproto_parser=parser, send_msg=lambda m: sent.append(m) or True)
    dp2.set_xid = lambda m: setattr(m, "xid", len(sent) + 100)
    app.ask_limits(dp2)  # table features are off by default
    assert [type(m) for m in sent] == [parser.OFPPortDescStatsRequest, parser.OFPGroupFeaturesStatsRequest]
    sent.clear()
    on = config_from_dict({"topology": {"fattree": {"k": 4}}, "southbound": {"openflow": {"table_features": True}}})
    assert on.southbound.openflow.table_features
    app.service = ControllerService(on, build_topology(on), FakeClock(), store=JobStore(":memory:"))
    app.ask_limits(dp2)
    assert [type(m) for m in sent] == [
        parser.OFPPortDescStatsRequest, parser.OFPGroupFeaturesStatsRequest, parser.OFPTableFeaturesStatsRequest,
    ]
    assert sent[2].body == []  # asks; a body would set the tables


# -- link capacities: the config where it states them, else the ports' speeds ---------------


def _ls_service(section: dict, links=None):
    topo = {"leaf_spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": 1, **section}}
    if links:
        topo["links"] = links
    config = config_from_dict({"topology": topo})
    return ControllerService(config, build_topology(config), FakeClock(), store=JobStore(":memory:"))


def _report_all(service, bps_by_switch):
    """Every switch reports `bps_by_switch[switch]` for each of its ports."""
    ports = service.wiring.port_map()
    topo = service.wiring.topology
    for name, bps in bps_by_switch.items():
        v = topo.index[name]
        service.devices.report_limits(name, port_speeds={p: bps for (x, _), p in ports.items() if x == v})


def test_explicit_capacities_tell_given_from_default():
    from controller.config import explicit_capacities

    def explicit(section, links=None):
        s = _ls_service(section, links)
        return {tuple(sorted(k)) for k in explicit_capacities(s.config, s.wiring.topology)}

    assert explicit({}) == set()
    assert explicit({}, [{"a": "leaf-0", "b": "spine-1", "capacity": 1e9}]) == {("leaf-0", "spine-1")}
    assert explicit({"uplink_capacity": 4e10}) == {("leaf-0", "spine-0"), ("leaf-0", "spine-1"), ("leaf-1", "spine-0"), ("leaf-1", "spine-1")}
    assert len(explicit({"capacity": 1e9})) == 6
    config = config_from_dict({"topology": {"fattree": {"k": 4}}})
    assert explicit_capacities(config, build_topology(config)) == frozenset()
    config = config_from_dict({"topology": {"fattree": {"k": 4, "capacity": 1e9}}})
    assert len(explicit_capacities(config, build_topology(config))) == len(build_topology(config).links)


def test_link_capacity_is_the_ports_speed_where_the_config_gives_only_a_default():
    service = _ls_service({}, [{"a": "leaf-0", "b": "spine-1", "capacity": 3e9}])
    caps = service.links.capacities()
    assert all(src == "config" and c == 10e9 or c == 3e9 for c, src in caps.values())
    _report_all(service, {"leaf-0": 25_000_000_000, "spine-0": 40_000_000_000, "spine-1": 40_000_000_000})
    caps = service.links.capacities()
    assert caps[("leaf-0", "spine-0")] == (25e9, "port")  # the smaller end
    assert caps[("leaf-0", "spine-1")] == (3e9, "config")  # the override stays
    assert caps[("leaf-1", "spine-0")] == (40e9, "port")  # leaf-1 says nothing: the end that does
    assert caps[("leaf-0", "host-0")] == (25e9, "port")  # a host link: the switch end
    assert caps[("leaf-1", "host-1")] == (10e9, "config")  # nothing reported: the default
    # a switch that reports 0 (an OVS patch port): the default
    _report_all(service, {"leaf-1": 0})
    assert service.links.capacities()[("leaf-1", "host-1")] == (10e9, "config")
    # the planner plans with it
    topo, _ = service.links.planning_topology(frozenset(), BudgetState(service.devices.limits(), {}, {}))
    cap = {(link.a, link.b): link.capacity for link in topo.links}
    # less the headers the meters count (jobs' rates are payload rates)
    assert cap[("leaf-0", "spine-0")] == payload_capacity(25e9) and cap[("leaf-0", "spine-1")] == payload_capacity(3e9)


def test_a_stated_capacity_is_never_replaced_by_port_speeds():
    service = _ls_service({"capacity": 1e9})
    _report_all(service, {n: 10_000_000_000 for n in ("leaf-0", "leaf-1", "spine-0", "spine-1")})
    assert all(v == (1e9, "config") for v in service.links.capacities().values())


def test_a_slower_port_lowers_what_the_planner_gives_a_job():
    service = _ls_service({})
    service.planning.replan()
    service.add_job("host-0", ["host-1"], 40e9, job_id="j", wait=False)
    service.planning.replan()
    before = service.jobs.status("j").planned.rate
    _report_all(service, {n: 1_000_000_000 for n in ("leaf-0", "leaf-1", "spine-0", "spine-1")})
    service.planning.replan()
    after = service.jobs.status("j").planned.rate
    assert before > after and after <= 1e9 + 1


def test_reported_limits_in_metrics():
    from controller.northbound.metrics import make_registry, render

    service, _ = make_service({"group_capacity": 3})
    service.devices.report_limits("core-1", max_groups=4096, max_entries=77)
    text = render(make_registry(service)).decode()
    assert 'mcast_switch_reported_group_capacity{switch="core-1"} 4096.0' in text
    assert 'mcast_switch_reported_entry_capacity{switch="core-1"} 77.0' in text
    assert 'mcast_switch_reported_group_capacity{switch="core-0"}' not in text
    assert 'mcast_switch_group_capacity{switch="core-1"} 3.0' in text  # the configured budget is lower
    assert 'mcast_switch_entry_capacity{switch="core-1"} 77.0' in text
