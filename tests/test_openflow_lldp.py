"""The OpenFlow app's own signed LLDP probes (southbound.openflow.app with
southbound.lldp), driven through its handlers with fake datapaths: the LLDP →
controller flow, which ports probes go out of, a probe handed back teaching a
link, forged ones refused and counted."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

pytest.importorskip("os_ken")

from os_ken.ofproto import ofproto_v1_3 as ofp  # noqa: E402
from os_ken.ofproto import ofproto_v1_3_parser as parser  # noqa: E402

from controller.config import build_topology, config_from_dict  # noqa: E402
from controller.core.service import ControllerService  # noqa: E402
from controller.southbound import lldp  # noqa: E402
from controller.southbound.openflow.app import (  # noqa: E402
    LLDP_COOKIE,
    LLDP_PRIORITY,
    MulticastOFCtl,
)
from controller.southbound.openflow.channel import Switch  # noqa: E402
from controller.southbound.openflow.manager import OpenFlowManager  # noqa: E402
from controller.store.sqlite import JobStore  # noqa: E402


def fake_dp(dpid: int) -> SimpleNamespace:
    dp = SimpleNamespace(id=dpid, ofproto=ofp, ofproto_parser=parser, sent=[])
    dp.send_msg = lambda m: dp.sent.append(m) or True
    dp.set_xid = lambda m: setattr(m, "xid", len(dp.sent) + 1)
    return dp


def declared():
    config = config_from_dict({
        "topology": {"leaf_spine": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2}},
        "planner": {"debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 0.01, "link_hold_down_s": 0},
    })
    service = ControllerService(config, build_topology(config), lambda: 1000.0, store=JobStore(":memory:"))
    app = MulticastOFCtl.detached(service, OpenFlowManager(service))
    dps = {}
    for dpid, name in app._dpids.items():
        dps[name] = fake_dp(dpid)
        app._switches[dpid] = Switch(name, dps[name])
    return service, app, dps


def packet_in(app, dp, port: int, data: bytes) -> None:
    app._packet_in(SimpleNamespace(msg=SimpleNamespace(datapath=dp, data=data, match={"in_port": port}, cookie=LLDP_COOKIE)))


def test_each_switch_gets_the_lldp_flow_on_connect():
    _, app, dps = declared()
    dp = dps["leaf-0"]
    app._features(SimpleNamespace(msg=SimpleNamespace(datapath=dp)))
    [mod] = [m for m in dp.sent if isinstance(m, parser.OFPFlowMod)]
    assert (mod.cookie, mod.priority, mod.table_id) == (LLDP_COOKIE, LLDP_PRIORITY, 0)
    assert mod.match["eth_type"] == lldp.ETH_LLDP
    [action] = mod.instructions[0].actions
    assert action.port == ofp.OFPP_CONTROLLER


def test_declared_probes_go_out_of_switch_ports_and_teach_the_wiring():
    service, app, dps = declared()
    wiring, topo = service.wiring, service.wiring.topology
    idx = topo.index
    sent = app.send_lldp()
    uplinks = {name: sorted(p for (v, nb), p in wiring.port_map().items()
                            if topo.name(v) == name and topo.is_switch(nb)) for name in dps}
    assert sent == sum(len(p) for p in uplinks.values()) == 8
    for name, dp in dps.items():
        outs = [m for m in dp.sent if isinstance(m, parser.OFPPacketOut)]
        assert sorted(m.actions[0].port for m in outs) == uplinks[name]
        for m in outs:
            assert lldp.parse_lldp(m.data) == (name, m.actions[0].port)
    # leaf-0's probe out of its port to spine-0 arrives at spine-1 (the map had them swapped)
    leaf_port = wiring.port_map()[(idx["leaf-0"], idx["spine-0"])]
    probe = next(m.data for m in dps["leaf-0"].sent if isinstance(m, parser.OFPPacketOut) and m.actions[0].port == leaf_port)
    spine1_port = wiring.port_map()[(idx["spine-1"], idx["leaf-0"])]
    packet_in(app, dps["spine-1"], spine1_port, probe)
    assert wiring.link_at("leaf-0", leaf_port) == "spine-1"
    assert service.counters.refusals() == {}


def test_forged_probes_change_no_link_and_are_counted():
    service, app, dps = declared()
    wiring, idx = service.wiring, service.wiring.topology.index
    before = wiring.port_map()
    leaf_port = before[(idx["leaf-0"], idx["spine-0"])]
    spine1_port = before[(idx["spine-1"], idx["leaf-0"])]
    forged = {
        "lldp_unsigned": lldp.lldp_frame("leaf-0", leaf_port),
        "lldp_bad_signature": lldp.ProbeSigner(b"not the controller's secret").frame("leaf-0", leaf_port),
        "lldp_stale": app.signer.frame("leaf-0", leaf_port, now=time.time() - 3600),
    }
    for frame in forged.values():
        packet_in(app, dps["spine-1"], spine1_port, frame)
    genuine = app.signer.frame("leaf-0", leaf_port)
    spine0_port = before[(idx["spine-0"], idx["leaf-0"])]
    packet_in(app, dps["spine-0"], spine0_port, genuine)  # where it really arrives: accepted
    packet_in(app, dps["spine-1"], spine1_port, genuine)  # the same probe replayed elsewhere
    assert wiring.port_map() == before
    assert service.counters.refusals() == {**dict.fromkeys(forged, 1), "lldp_replayed": 1}
    assert ("leaf-0", "spine-0") in wiring.observed_ports()


def test_a_discovered_network_probes_its_ports_but_not_where_hosts_were_seen():
    config = config_from_dict({"planner": {"debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 0.01}})
    service = ControllerService(config, None, lambda: 1000.0, store=JobStore(":memory:"))
    app = MulticastOFCtl.detached(service, OpenFlowManager(service))
    dps = {n: fake_dp(n) for n in (10, 11)}
    for dpid, dp in dps.items():
        app._features(SimpleNamespace(msg=SimpleNamespace(datapath=dp)))
    names = {dpid: app._dpids[dpid] for dpid in dps}
    for dpid, dp in dps.items():
        body = [SimpleNamespace(port_no=p, curr_speed=1_000_000, max_speed=0) for p in (1, 2, 3, ofp.OFPP_LOCAL)]
        app._port_desc(SimpleNamespace(msg=SimpleNamespace(datapath=dp, xid=99, body=body, flags=0)))
    outs = {dpid: [m for m in dp.sent if isinstance(m, parser.OFPPacketOut)] for dpid, dp in dps.items()}
    assert {dpid: sorted(m.actions[0].port for m in o) for dpid, o in outs.items()} == {10: [1, 2, 3], 11: [1, 2, 3]}
    # 10:1 - 11:2 is a link; a host speaks at 10:3
    probe = next(m.data for m in outs[10] if m.actions[0].port == 1)
    packet_in(app, dps[11], 2, probe)
    assert service.wiring.is_link_end(names[10], 1) and service.wiring.is_link_end(names[11], 2)
    service.hosts.learn("10.0.0.5", "02:00:00:00:00:05", names[10], 3)
    for dp in dps.values():
        dp.sent.clear()
    app.send_lldp()
    assert sorted(m.actions[0].port for m in dps[10].sent) == [1, 2]
    assert sorted(m.actions[0].port for m in dps[11].sent) == [1, 2, 3]
    # a probe relayed by the host at 10:3 never makes it a link
    probe = next(m.data for m in dps[11].sent if m.actions[0].port == 3)
    packet_in(app, dps[10], 3, probe)
    assert not service.wiring.is_link_end(names[10], 3)
    assert service.counters.refusals() == {"lldp_edge_port": 1}
