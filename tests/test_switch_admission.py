"""Admitted switches (southbound.admit; core.devices, the OpenFlow app's handlers):
in a learned network with `admit: declared` a datapath the config does not name
is refused, listed with why and never planned; a second connection claiming a
connected datapath id is refused and closed, the first keeps working."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("os_ken")

from os_ken.ofproto import ofproto_v1_3 as ofp  # noqa: E402
from os_ken.ofproto import ofproto_v1_3_parser as parser  # noqa: E402

from controller.config import build_topology, config_from_dict  # noqa: E402
from controller.core.service import ControllerService  # noqa: E402
from controller.northbound.models import SwitchList  # noqa: E402
from controller.southbound.openflow.app import MulticastOFCtl  # noqa: E402
from controller.southbound.openflow.manager import OpenFlowManager  # noqa: E402
from controller.store.sqlite import JobStore  # noqa: E402


def fake_dp(dpid: int, ip: str = "10.0.0.1") -> SimpleNamespace:
    dp = SimpleNamespace(id=dpid, ofproto=ofp, ofproto_parser=parser, sent=[], closed=False, address=(ip, 40000))
    dp.send_msg = lambda m: dp.sent.append(m) or True
    dp.set_xid = lambda m: setattr(m, "xid", len(dp.sent) + 1)
    dp.close = lambda: setattr(dp, "closed", True)
    return dp


def connect(app, dp) -> None:
    app._features(SimpleNamespace(msg=SimpleNamespace(datapath=dp)))


def learned(southbound: dict):
    config = config_from_dict({"planner": {"debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 0.01},
                               "southbound": southbound})
    service = ControllerService(config, None, lambda: 1000.0, store=JobStore(":memory:"))
    return service, MulticastOFCtl.detached(service, OpenFlowManager(service))


def test_a_learned_network_with_declared_switches_refuses_the_others():
    service, app = learned({"switches": {"spine": {"dpid": 0xAB}}})
    assert service.config.admit == "declared"
    connect(app, fake_dp(0xAB))
    connect(app, rogue := fake_dp(0x66))
    assert service.devices.is_connected("spine")
    assert not service.devices.is_switch("of:0000000000000066")
    assert "of:0000000000000066" not in service.wiring.topology.index and not service.wiring.waiting_nodes()
    assert not [m for m in rogue.sent if isinstance(m, parser.OFPFlowMod)]  # never programmed
    refused = service.devices.refused_switches()
    assert [r["switch"] for r in refused] == ["of:0000000000000066"] and "not declared" in refused[0]["why"]
    assert service.counters.refusals() == {"switch_refused": 1}
    # GET /switches lists it
    SwitchList(switches=[], unexpected=[], refused=refused)
    with pytest.raises(ValueError):
        service.devices.connected("of:0000000000000066")


def test_admit_any_adopts_every_datapath():
    service, app = learned({"admit": "any", "switches": {"spine": {"dpid": 0xAB}}})
    connect(app, fake_dp(0x66))
    assert service.devices.is_connected("of:0000000000000066")
    assert service.devices.refused_switches() == [] and service.counters.refusals() == {}


def test_no_declared_switch_admits_any():
    service, app = learned({})
    assert service.config.admit == "any"
    connect(app, fake_dp(0x66))
    assert service.devices.is_connected("of:0000000000000066")


def test_a_second_connection_claiming_a_connected_datapath_is_refused():
    config = config_from_dict({"topology": {"leaf_spine": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1}}})
    service = ControllerService(config, build_topology(config), lambda: 1000.0, store=JobStore(":memory:"))
    app = MulticastOFCtl.detached(service, OpenFlowManager(service))
    first, second = fake_dp(1), fake_dp(1, ip="10.6.6.6")
    name = app._dpids[1]
    connect(app, first)
    connect(app, second)
    assert second.closed and not first.closed
    assert app._switches[1].dp is first and service.devices.is_connected(name)
    assert service.counters.refusals() == {"switch_duplicate": 1}
    # the refused connection's death does not touch the first one
    app._dead(SimpleNamespace(datapath=second))
    assert service.devices.is_connected(name) and app._switches[1].dp is first
    # once the first is gone, a new connection is welcome
    app._dead(SimpleNamespace(datapath=first))
    connect(app, third := fake_dp(1, ip="10.6.6.6"))
    assert not third.closed and app._switches[1].dp is third and service.devices.is_connected(name)
    # the switch reconnecting from its own address (a restart not yet noticed) replaces its old connection
    connect(app, fourth := fake_dp(1, ip="10.6.6.6"))
    assert not fourth.closed and app._switches[1].dp is fourth and service.devices.is_connected(name)
    app._dead(SimpleNamespace(datapath=third))  # the stale one's death is ignored
    assert service.devices.is_connected(name)
    assert service.counters.refusals() == {"switch_duplicate": 1}
