"""End to end: the controller learns what Open vSwitch says about its limits.

A private OVS (tests/ovs_helper.py) gets the four switches of a 2x2 leaf-spine
(one host per leaf) as netdev bridges linked by patch ports; host-0 is a veth
port into a network namespace. leaf-1's forwarding table (TABLE_FORWARD, table 1)
is limited to 50 flows (Flow_Table flow_limit). The controller process asks every
switch on connect; GET /switches must then show what OVS reports: max_groups
4294967040 (0xffffff00) for groups of type ALL, max_entries 1000000 for an
unlimited table and 50 for leaf-1's, a veth port's speed (10 Gbit/s) and a patch
port's (0) — and leaf-0's configured group budget (2), below what OVS says,
still wins. The config gives no link capacity: the veth link takes the port's
speed (source "port"), the patch links the default (source "config").

Skipped, with the reason, when not root, when Open vSwitch or os-ken is missing.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "mininet"))  # scripts, not a package
import ovs_helper  # noqa: E402
from test_openflow_ovs import WAIT_S, Controller, _free_port, _poll  # noqa: E402

_reason = ovs_helper.openflow_unavailable()
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")

CONFIG = """\
api: {{host: 127.0.0.1, port: 0}}
store: {{path: {store}}}
planner: {{debounce_s: 0.05, max_delay_s: 0.2, wait_s: 10}}
southbound: {{openflow: {{table_features: true}}}}
topology:
  leaf_spine: {{leaves: 2, spines: 2, hosts_per_leaf: 1}}
  switches:
    leaf-0: {{group_capacity: 2}}
"""
OVS_MAX_GROUPS = 0xFFFFFF00  # ovs-ofctl -O OpenFlow13 dump-group-features: max_groups=0xffffff00
OVS_MAX_ENTRIES = 1_000_000  # ovs-ofctl -O OpenFlow13 dump-table-features: max_entries=1000000
VETH_BPS = 10_000_000_000  # ovs-ofctl -O OpenFlow13 dump-ports-desc: "speed: 10000 Mbps now" (netdev veth)
FLOW_LIMIT = 50


def test_controller_learns_what_ovs_reports_and_a_lower_configured_budget_wins(tmp_path):
    from controller.config import build_topology, load_config
    from controller.southbound.openflow.entries import TABLE_FORWARD
    from controller.addressing.ports import default_port_map

    cfg = tmp_path / "controller.yaml"
    cfg.write_text(CONFIG.format(store=tmp_path / "jobs.sqlite"))
    topo = build_topology(load_config(cfg))
    switches = [topo.name(v) for v in topo.switches]
    tag = uuid.uuid4().hex[:5]
    bridge = {name: f"mc{tag}s{i}" for i, name in enumerate(switches)}
    ports = default_port_map(topo)
    of_port = _free_port()
    host_port = ports[(topo.index["leaf-0"], topo.index["host-0"])]
    patch_port = ports[(topo.index["leaf-0"], topo.index["spine-0"])]

    ovs = ovs_helper.OvsInstance()
    ctl = Controller(cfg, of_port, tmp_path / "controller.log")
    try:
        ovs.start()
        for i, name in enumerate(switches):
            ovs.add_bridge(bridge[name], dpid=i + 1)
        ovs.vsctl(
            "--", "--id=@ft", "create", "Flow_Table", f"flow_limit={FLOW_LIMIT}",
            "--", "set", "Bridge", bridge["leaf-1"], f"flow_tables:{TABLE_FORWARD}=@ft",
        )
        for link in topo.links:
            a, b = topo.index[link.a], topo.index[link.b]
            if topo.is_switch(a) and topo.is_switch(b):
                ovs.add_patch(bridge[link.a], ports[(a, b)], bridge[link.b], ports[(b, a)])
        ovs.add_host(bridge["leaf-0"], host_port, f"mc{tag}h0", "10.0.0.1", "02:00:00:00:00:01")
        for name in switches:
            ovs.set_controller(bridge[name], f"tcp:127.0.0.1:{of_port}")
        ctl.start()

        def reported():
            _, body = ctl.request("GET", "/switches")
            sw = {s["id"]: s for s in body["switches"]}
            assert all(s["connected"] for s in sw.values()), sw
            assert all(s["reported_group_capacity"] is not None and s["reported_entry_capacity"] is not None
                       for s in sw.values()), sw
            assert all(s["reported_port_speeds"] for s in sw.values()), sw
            return sw

        sw = _poll(reported, WAIT_S, "every switch's reported limits")
        for name in ("spine-0", "spine-1"):
            s = sw[name]
            assert (s["group_capacity"], s["group_capacity_source"]) == (OVS_MAX_GROUPS, "switch"), s
            assert (s["entry_capacity"], s["entry_capacity_source"]) == (OVS_MAX_ENTRIES, "switch"), s
            assert (s["configured_group_capacity"], s["configured_entry_capacity"]) == (None, None), s
        # the configured budget, below what OVS says, wins
        s = sw["leaf-0"]
        assert (s["configured_group_capacity"], s["reported_group_capacity"]) == (2, OVS_MAX_GROUPS), s
        assert (s["group_capacity"], s["group_capacity_source"]) == (2, "config"), s
        # a veth port says 10 Gbit/s, a patch port nothing (0)
        assert s["reported_port_speeds"][str(host_port)] == VETH_BPS, s
        assert s["reported_port_speeds"][str(patch_port)] == 0, s
        # leaf-1's forwarding table holds at most FLOW_LIMIT flows: that is its entry budget
        s = sw["leaf-1"]
        assert (s["reported_entry_capacity"], s["entry_capacity"], s["entry_capacity_source"]) == (
            FLOW_LIMIT, FLOW_LIMIT, "switch",
        ), s
        # link capacities: the config gives only the default, so the ports' speeds
        # replace it where a switch states one (the veth), not where it says 0 (patch ports)
        _, body = ctl.request("GET", "/links")
        links = {(link["a"]["node"], link["b"]["node"]): link for link in body["links"]}
        assert (links[("leaf-0", "host-0")]["capacity"], links[("leaf-0", "host-0")]["capacity_source"]) == (VETH_BPS, "port")
        assert (links[("leaf-0", "spine-0")]["capacity"], links[("leaf-0", "spine-0")]["capacity_source"]) == (10e9, "config")
        # the plan keeps within the effective budgets
        status, job = ctl.request("POST", "/jobs", {"id": "j1", "ps": "host-0", "workers": ["host-1"], "demand": 1e9})
        assert status == 201, job
    finally:
        ctl.stop()
        ovs.stop()
