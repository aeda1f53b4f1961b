"""End to end: the controller learns real wiring and hosts, and reconciles a reconnecting switch.

The 2x2 leaf-spine of tests/test_openflow_ovs.py, on a private userspace Open
vSwitch, but wired differently from the default port map the controller starts
with: leaf-0's two uplinks are swapped, spine-0's two downlinks are swapped and
leaf-1's two host ports are swapped. The hosts are network namespaces joined to
their leaf by veth pairs, with MAC addresses that are not the configured ones.

The test checks, with real packets:
- LLDP (os-ken's topology app) finds every switch-to-switch link and the
  controller adopts the real ports (GET /links);
- hosts are learned from their ARP (GET /hosts: port and MAC), ARP requests are
  answered by the controller (proxy ARP); a host with ARP turned off is learned
  from its IPv4 packets instead; and every host pings every other one
  through the controller's unicast routes;
- a switch that loses its controller while its entries are tampered with (one of
  the controller's flows deleted, a stray one with the controller's cookie added,
  a stray group added) is reconciled when it reconnects: its flows and groups are
  exactly the desired ones again, and the pings work again;
- a restarted controller restores the learned ports and MACs from its store and
  sends nothing to any switch;
- a host flooding from an address no config names is forwarded, and the copies
  its switch sends to the controller are held to the packet-in meter's rate;
- a group and a meter outside the controller's id ranges (another application's)
  survive every reconciliation.

Skipped, with the reason, when not root, or Open vSwitch, os-ken or ping is missing.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ovs_helper  # noqa: E402
from test_openflow_ovs import CONFIG, WAIT_S, Controller, _entries, _free_port, _poll  # noqa: E402

_reason = ovs_helper.openflow_unavailable()
if _reason is None and (shutil.which("ping") is None or shutil.which("ip") is None):
    _reason = "ping or ip is missing (apt-get install iputils-ping iproute2)"
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")

PACKET_IN_PPS = 50

# (switch, neighbour) -> the port it is really on, where that differs from default_port_map
MISWIRED = {
    ("leaf-0", "spine-0"): 2, ("leaf-0", "spine-1"): 1,
    ("spine-0", "leaf-0"): 2, ("spine-0", "leaf-1"): 1,
    ("leaf-1", "host-2"): 4, ("leaf-1", "host-3"): 3,
}


def test_controller_learns_wiring_and_hosts_and_reconciles_a_reconnecting_switch(tmp_path):
    t0 = time.monotonic()
    from controller.config import build_topology, host_table, load_config
    from controller.addressing.ports import default_port_map

    cfg = tmp_path / "controller.yaml"
    # a low cap on packet-ins, so that the flood at the end can show it; group and
    # meter ids from 1 to 99, so that 500 is another application's
    cfg.write_text(
        CONFIG.format(store=tmp_path / "jobs.sqlite")
        + f"southbound: {{openflow: {{packet_in_pps: {PACKET_IN_PPS}, group_ids: [1, 99], meter_ids: [1, 99]}}}}\n"
    )
    config = load_config(cfg)
    topo = build_topology(config)
    addresses = host_table(config, topo)
    switches = [topo.name(v) for v in topo.switches]
    hosts = [topo.name(h) for h in topo.hosts]
    tag = uuid.uuid4().hex[:5]
    bridge = {name: f"md{tag}s{i}" for i, name in enumerate(switches)}
    ns = {name: f"md{tag}{name}" for name in hosts}
    mac = {name: f"02:00:00:00:0a:{i:02x}" for i, name in enumerate(hosts)}  # not the configured MACs
    wired = {(topo.name(a), topo.name(b)): p for (a, b), p in default_port_map(topo).items()}
    wired.update(MISWIRED)
    of_port = _free_port()

    ovs = ovs_helper.OvsInstance()
    ctl = Controller(cfg, of_port, tmp_path / "controller.log")
    try:
        ovs.start()
        for i, name in enumerate(switches):
            ovs.add_bridge(bridge[name], dpid=i + 1, controller=f"tcp:127.0.0.1:{of_port}")
        for link in topo.links:
            if link.a in hosts or link.b in hosts:
                sw, h = (link.a, link.b) if link.b in hosts else (link.b, link.a)
                ovs.add_host(bridge[sw], wired[(sw, h)], ns[h], addresses[h].ip, mac[h])
            else:
                ovs.add_patch(bridge[link.a], wired[(link.a, link.b)], bridge[link.b], wired[(link.b, link.a)])
        # another application's group and meter, outside the controller's id ranges
        foreign = "leaf-1"
        ovs.ofctl("add-group", bridge[foreign], "group_id=500,type=all,bucket=output:1")
        ovs.ofctl("add-meter", bridge[foreign], "meter=500,kbps,bands=type=drop,rate=1000")
        ctl.start()

        # -- LLDP: every switch-to-switch link found, on its real ports ------------------
        def links_learned():
            _, body = ctl.request("GET", "/links")
            for link in body["links"]:
                for end, other in ((link["a"], link["b"]), (link["b"], link["a"])):
                    if end["node"] in switches and other["node"] in switches:
                        assert end["discovered"], f"{end['node']} -> {other['node']} not discovered yet"
                        assert end["port"] == wired[(end["node"], other["node"])], link
            assert body["unexpected"] == [], body["unexpected"]
            return True

        _poll(links_learned, WAIT_S, "LLDP to find every link on its real port")

        # -- one host never sends ARP (ARP off, static neighbours): it must be learned
        # from its IPv4 packets (the source table's unknown-source copy)
        quiet = "host-3"
        # (host-0 answers its pings and may ask for its MAC before it is learned: the
        # controller then passes the request to it rather than guess the configured MAC)
        r = ovs.host_run(ns[quiet], "ip", "link", "set", "eth0", "arp", "off")
        assert r.returncode == 0, r.stderr
        for other in hosts:
            if other != quiet:
                r = ovs.host_run(ns[quiet], "ip", "neigh", "replace", addresses[other].ip, "lladdr", mac[other],
                                 "dev", "eth0", "nud", "permanent")
                assert r.returncode == 0, (other, r.stderr)

        # -- ARP: every other host announces itself (an ARP for an unused address) and is learned
        def hosts_learned(which: list[str]):
            for h in which:
                if h != quiet:
                    ovs.host_run(ns[h], "ping", "-c", "1", "-W", "0.2", "10.255.255.254")
            _, body = ctl.request("GET", "/hosts")
            for entry in body["hosts"]:
                h = entry["id"]
                if h not in which:
                    continue
                assert entry["learned"], f"{h} not learned yet"
                assert (entry["port"], entry["mac"]) == (wired[(entry["switch"], h)], mac[h]), entry
            return True

        _poll(lambda: hosts_learned([h for h in hosts if h != quiet]), WAIT_S, "every host to be learned from its ARP")
        _, body = ctl.request("GET", "/hosts")
        assert not {e["id"]: e for e in body["hosts"]}[quiet]["learned"], "the quiet host sent no ARP"

        def quiet_learned():
            ovs.host_run(ns[quiet], "ping", "-c", "1", "-W", "0.5", addresses["host-0"].ip)
            return hosts_learned([quiet])

        _poll(quiet_learned, WAIT_S, "the host without ARP to be learned from its IPv4 packets")

        def pingall() -> bool:
            failed = [
                f"{a}->{b}"
                for a in hosts
                for b in hosts
                if a != b and ovs.host_run(ns[a], "ping", "-c", "1", "-W", "1", addresses[b].ip).returncode != 0
            ]
            assert not failed, f"ping failed: {', '.join(failed)}"
            return True

        _poll(pingall, WAIT_S, "every host to ping every other host (proxy ARP, unicast routes)")
        for h in hosts:  # the controller answered every ARP request with the learned MAC
            neigh = ovs.host_run(ns[h], "ip", "neigh", "show", "dev", "eth0").stdout
            for other in hosts:
                if other != h and addresses[other].ip + " " in neigh:
                    assert mac[other] in neigh, f"{h}: {neigh}"

        # -- a switch loses its controller and is tampered with; it is reconciled ----------
        sw = "leaf-1"
        before = _entries(ovs, bridge[sw])
        # (pointed at a port nobody listens on: `del-controller` would make OVS flush the flows)
        ovs.set_controller(bridge[sw], f"tcp:127.0.0.1:{_free_port()}")
        _poll(lambda: not {s["id"]: s for s in ctl.request("GET", "/switches")[1]["switches"]}[sw]["connected"],
              WAIT_S, f"{sw} to be seen disconnected")
        ovs.ofctl("del-flows", bridge[sw], "--strict", f"priority=1000,ip,nw_dst={addresses['host-0'].ip}")
        ovs.ofctl("add-flow", bridge[sw], "cookie=0x4d430200ef01ff01,priority=2000,ip,nw_dst=239.1.255.1,actions=drop")
        ovs.ofctl("add-group", bridge[sw], "group_id=77,type=all,bucket=output:1")
        tampered = _entries(ovs, bridge[sw])
        assert tampered["flows"] != before["flows"] and tampered["groups"] != before["groups"]
        assert len(tampered["flows"]) == len(before["flows"]), "one flow deleted, one added"
        ovs.set_controller(bridge[sw], f"tcp:127.0.0.1:{of_port}")

        def reconciled():
            now = _entries(ovs, bridge[sw])
            assert now == before, f"{sw}: {now['flows']}"
            return True

        _poll(reconciled, WAIT_S, f"{sw} to be reconciled after reconnecting")
        _poll(pingall, WAIT_S, "the pings to work again after the reconnect")

        # -- a controller restart keeps what was learned: nothing is sent to any switch -
        before = {name: _entries(ovs, bridge[name]) for name in switches}
        assert ctl.stop() == 0, ctl.log.read_text()
        ctl.log = tmp_path / "controller-2.log"
        ctl.start()
        _poll(lambda: all(f"switch {name}: read back" in ctl.log.read_text() for name in switches),
              WAIT_S, "the restarted controller to read every switch back")
        time.sleep(0.5)  # any (wrong) operations would be sent right after the read-back
        text = ctl.log.read_text()
        assert " sent " not in text, f"the restarted controller changed a switch:\n{text}"
        assert {name: _entries(ovs, bridge[name]) for name in switches} == before
        _, body = ctl.request("GET", "/hosts")
        assert all(e["learned"] and e["mac"] == mac[e["id"]] for e in body["hosts"]), body
        _poll(pingall, WAIT_S, "the pings to work after the controller restart")

        # -- a flood from an address no config names: forwarded, and its copies to the
        # controller held to the switch's packet-in meter
        def ipv4_packet_ins() -> int:
            _, text = ctl.request_text("/metrics")
            m = re.search(r'^mcast_packet_ins_total\{kind="ipv4"\} ([0-9.e+]+)$', text, re.MULTILINE)
            assert m, text
            return int(float(m.group(1)))

        stray, flooder = "10.99.0.9", "host-1"
        r = ovs.host_run(ns[flooder], "ip", "addr", "add", f"{stray}/32", "dev", "eth0")
        assert r.returncode == 0, r.stderr
        before_flood = ipv4_packet_ins()
        flood = (
            "import socket, sys, time\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"s.bind(('{stray}', 0))\n"
            "n, end = 0, time.time() + 2.0\n"
            "while time.time() < end:\n"  # about 20,000 datagrams/s: a flood, not a CPU hog
            "    for _ in range(200):\n"
            f"        s.sendto(b'x' * 64, ('{addresses['host-0'].ip}', 9))\n"
            "    n += 200\n"
            "    time.sleep(0.01)\n"
            "print(n)\n"
        )
        r = ovs.host_run(ns[flooder], sys.executable, "-c", flood, timeout=30)
        assert r.returncode == 0, r.stderr
        sent = int(r.stdout)
        time.sleep(1.0)  # what the switch queued reaches the controller
        copies = ipv4_packet_ins() - before_flood
        # 2 s at the cap, one burst, and the packets of a second's slack
        assert 0 < copies <= PACKET_IN_PPS * 3 + max(10, PACKET_IN_PPS // 10), (copies, sent)
        assert sent > 10 * copies, (copies, sent)
        # reconciled at every start, reconnect and plan, the foreign group and meter stay
        e = _entries(ovs, bridge[foreign])
        assert [g for g in e["groups"] if g.startswith("group_id=500,")], e["groups"]
        assert [m for m in e["meters"] if m.startswith("meter=500 ")], e["meters"]
        assert ctl.stop() == 0, ctl.log.read_text()
    finally:
        ctl.stop()
        ovs.stop()
    assert time.monotonic() - t0 < 120
