"""End to end: a link goes down and up; the controller re-plans and reprograms OVS.

The same set-up as tests/test_openflow_ovs.py (a private userspace OVS with the
four switches of a 2x2 leaf-spine linked by patch ports, and the real controller
process). A job whose tree crosses a leaf-spine link is registered; both ends of
that link are deleted (the patch pair), so each bridge sends a port-status
DELETE; the test waits until GET /plan no
longer uses the link and the switches hold exactly the new plan's multicast
entries and no unicast route out of the dead ports. Then the patch pair is added
again (port-status ADD, state live) and the controller re-plans with the link.
Fast failover is on (the default): with every link up the job's leaf-0 - spine
edge has its backup (a FF group on leaf-0, a backup flow on the other spine and
one on leaf-1); with a spine link down there is none.

Skipped like tests/test_openflow_ovs.py when not root or OVS / os-ken is missing.
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ovs_helper
from test_openflow_ovs import (  # noqa: F401
    CONFIG,
    Controller,
    _entries,
    _free_port,
    _multicast,
    _poll,
    pytestmark,
)

WAIT_S = 15.0


def _plan_links(ctl, job_id: str) -> set[frozenset[str]]:
    status, plan = ctl.request("GET", "/plan")
    assert status == 200, plan
    jp = next(j for j in plan["jobs"] if j["id"] == job_id)
    return {frozenset((e["from"], e["to"])) for e in jp["edges"]}


def test_link_down_and_up_reprograms_ovs(tmp_path):
    t0 = time.monotonic()
    from controller.config import build_topology, load_config
    from controller.southbound.openflow.entries import PRIORITY_MULTICAST, PRIORITY_UNICAST
    from controller.addressing.ports import default_port_map

    cfg = tmp_path / "controller.yaml"
    cfg.write_text(CONFIG.format(store=tmp_path / "jobs.sqlite"))
    topo = build_topology(load_config(cfg))
    switches = [topo.name(v) for v in topo.switches]
    tag = uuid.uuid4().hex[:5]
    bridge = {name: f"mf{tag}s{i}" for i, name in enumerate(switches)}
    ports = default_port_map(topo)
    of_port = _free_port()

    ovs = ovs_helper.OvsInstance()
    ctl = Controller(cfg, of_port, tmp_path / "controller.log")
    try:
        ovs.start()
        for i, name in enumerate(switches):
            ovs.add_bridge(bridge[name], dpid=i + 1, controller=f"tcp:127.0.0.1:{of_port}")
        for link in topo.links:
            a, b = topo.index[link.a], topo.index[link.b]
            if topo.is_switch(a) and topo.is_switch(b):
                ovs.add_patch(bridge[link.a], ports[(a, b)], bridge[link.b], ports[(b, a)])
        ctl.start()

        def all_connected():
            status, body = ctl.request("GET", "/switches")
            return status == 200 and all(s["connected"] for s in body["switches"])

        _poll(all_connected, WAIT_S, "every switch to connect")

        # a job from a host of leaf-0 to hosts of both leaves: its tree crosses a spine
        status, job = ctl.request("POST", "/jobs", {"id": "j1", "ps": "host-0", "workers": ["host-1", "host-2", "host-3"], "demand": 1e9})
        assert status == 201, job
        group_ip = job["group_address"]
        used = [k for k in _plan_links(ctl, "j1") if all(topo.is_switch(topo.index[n]) for n in k)]
        assert used, "the job should cross a leaf-spine link"
        a, b = sorted(used[0])
        ia, ib = topo.index[a], topo.index[b]
        pa, pb = ports[(ia, ib)], ports[(ib, ia)]

        def matches_plan(protected: bool = True):
            """The plan's entries, and fast failover's (on by default): with every
            link up, leaf-0's edge to the tree's spine has a FF group and the other
            spine and leaf-1 a backup flow each; with a spine link down, the only
            other spine has no link to one leaf: no backup."""
            status, plan = ctl.request("GET", "/plan")
            assert status == 200, plan
            jp = next(j for j in plan["jobs"] if j["id"] == "j1")
            n_backups = 0
            for name in switches:
                e = _entries(ovs, bridge[name])
                mflows, backups, own, ff = _multicast(e)
                assert len(mflows) + len(backups) == len([f for f in e["flows"] if f"priority={PRIORITY_MULTICAST}" in f])
                assert len(mflows) == int(name in jp["entries"]), f"{name}: multicast flows {mflows} vs {jp['entries']}"
                if mflows:
                    assert f"nw_dst={group_ip}" in mflows[0], mflows
                assert len(own) == int(name in jp["groups"]), f"{name}: groups {e['groups']}"
                assert len(ff) == int(protected and name == "leaf-0"), f"{name}: fast-failover groups {ff}"
                n_backups += len(backups)
            assert n_backups == (2 if protected else 0), n_backups
            return True

        def unicast_out(name: str) -> set[int]:
            out = set()
            for f in _entries(ovs, bridge[name])["flows"]:
                if f"priority={PRIORITY_UNICAST}" in f:
                    out |= {int(p) for p in re.findall(r"output:(\d+)", f)}
            return out

        _poll(matches_plan, WAIT_S, "the job's entries")
        assert b.startswith("spine"), (a, b)
        assert pb in unicast_out(b)  # the spine's only way to the hosts of leaf a

        # -- the link goes down: both ends report it -----------------------------------
        # (`ovs-ofctl mod-port ... down` does not change a patch port of a userspace
        # bridge; deleting the patch pair makes both bridges send a port-status DELETE)
        ovs.vsctl("del-port", bridge[a], f"{bridge[a]}p{pa}", "--", "del-port", bridge[b], f"{bridge[b]}p{pb}")

        def avoided():
            assert frozenset((a, b)) not in _plan_links(ctl, "j1"), "the plan still uses the link"
            matches_plan(protected=False)
            assert pa not in unicast_out(a), f"{a}: unicast routes still use port {pa}"
            assert pb not in unicast_out(b), f"{b}: unicast routes still use port {pb}"
            return True

        _poll(avoided, WAIT_S, f"a plan and switch state without {a} - {b}")
        text = ctl.log.read_text()
        assert f"link {a} - {b} down" in text or f"link {b} - {a} down" in text, text
        _, health = ctl.request("GET", "/healthz")
        assert health["last_error"] is None, health

        # -- and up again: re-planned with the link available ----------------------------
        ovs.add_patch(bridge[a], pa, bridge[b], pb)  # port-status ADD on both bridges

        def restored():
            assert pb in unicast_out(b), "unicast routes not back on the link"
            return matches_plan()

        _poll(restored, WAIT_S, f"a re-plan with {a} - {b} up")
        text = ctl.log.read_text()
        assert f"link {a} - {b} up" in text or f"link {b} - {a} up" in text, text
        assert "OpenFlow error" not in text, text
        assert ctl.stop() == 0, ctl.log.read_text()
    finally:
        ctl.stop()
        ovs.stop()
    assert time.monotonic() - t0 < 40
