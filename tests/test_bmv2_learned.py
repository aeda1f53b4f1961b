"""End to end on BMv2, with no topology in the controller's config: the controller
learns a network of P4Runtime switches and delivers jobs named by IPv4 address.

The fabric: a 2x2 leaf-spine of simple_switch_grpc switches in Mininet whose
names, device ids, host addresses, MACs and port order follow no convention of
the controller's. The config lists the switches (name, gRPC address, device
id; their ports are the default 1..16) and nothing else about the network.

- every switch and every switch-to-switch link is learned (LLDP through
  packet-out / packet-in), with the ports of both ends; each switch's budgets
  come from the P4Info (source "p4info");
- hosts are learned from their ARP and ping each other;
- a job registered by address is delivered to its workers exactly once and to
  no other host;
- a job naming a host that has sent nothing yet waits (pending, missing_hosts)
  while the controller probes every edge port; the host answers the probe, the
  job is planned and delivered; a job naming an address nobody has fails after
  `discovery.host_timeout_s`, naming it;
- after the jobs are deleted, no switch holds a multicast entry or group.

Runs where simple_switch_grpc and p4c are on PATH, as root with Mininet
(tests/bmv2_fabric.py); marked `bmv2`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bmv2_fabric import (  # noqa: E402
    P4C,
    SKIP_REASON,
    SWITCH,
    Bmv2Fabric,
    compile_program,
    http,
    mininet_bmv2,
    poll,
    private_netns,
)

pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.skipif(not (P4C and SWITCH), reason=SKIP_REASON),
]

BASE_PORT = 50251
# switch -> (device id, {port: peer}): uplinks on odd ports, hosts on the others
SWITCHES = {
    "tor-east": (11, {4: "spine-y", 1: "spine-x"}),
    "tor-west": (12, {2: "spine-x", 5: "spine-y"}),
    "spine-x": (21, {3: "tor-west", 2: "tor-east"}),
    "spine-y": (22, {1: "tor-east", 4: "tor-west"}),
}
# host -> (switch, port, ip, mac)
HOSTS = {
    "h1": ("tor-east", 2, "192.168.7.21", "0a:11:00:00:07:21"),
    "h2": ("tor-east", 5, "192.168.7.34", "0a:11:00:00:07:34"),
    "h3": ("tor-west", 1, "192.168.9.5", "0a:12:00:00:09:05"),
    "h4": ("tor-west", 3, "192.168.9.77", "0a:12:00:00:09:77"),
    "quiet": ("tor-west", 7, "192.168.9.200", "0a:12:00:00:09:c8"),  # sends nothing until probed
}
HOST_TIMEOUT_S = 8


class LearnedBmv2Fabric(Bmv2Fabric):
    """The fabric above and a controller whose config has no topology."""

    def __enter__(self) -> LearnedBmv2Fabric:
        bmv2 = mininet_bmv2()
        from mininet.net import Mininet

        device_json, p4info = compile_program(self.tmp_path / "build")
        self._netns = private_netns()
        self._netns.__enter__()
        try:
            self.net = net = Mininet(controller=None, autoSetMacs=False)
            for name, (sw, port, ip, mac) in HOSTS.items():
                net.addHost(name, ip=f"{ip}/16", mac=mac)
            for n, (name, (device_id, _)) in enumerate(SWITCHES.items()):
                net.addSwitch(name, cls=bmv2.BMv2Switch, grpc_port=BASE_PORT + n, device_id=device_id,
                              dpid=f"{device_id:016x}", log_dir=str(self.tmp_path))
            done = set()
            for a, (_, peers) in SWITCHES.items():
                for pa, b in peers.items():
                    if frozenset((a, b)) not in done:
                        done.add(frozenset((a, b)))
                        pb = next(p for p, x in SWITCHES[b][1].items() if x == a)
                        net.addLink(a, b, port1=pa, port2=pb)
            for name, (sw, port, _, _) in HOSTS.items():
                net.addLink(name, sw, port2=port)
            switches = "".join(
                f"    {name}: {{address: '127.0.0.1:{BASE_PORT + n}', device_id: {device_id}}}\n"
                for n, (name, (device_id, _)) in enumerate(SWITCHES.items())
            )
            self.config.write_text(
                "api: {port: 0}\n"
                f"store: {{path: {self.tmp_path / 'jobs.sqlite'}}}\n"
                "planner: {algorithm: spt, debounce_s: 0.05, max_delay_s: 0.2}\n"
                f"discovery: {{host_timeout_s: {HOST_TIMEOUT_S}, probe_interval_s: 1}}\n"
                "hosts: {ps: {ip: 192.168.7.21}}\n"
                "southbound:\n  backend: p4runtime\n"
                f"  p4runtime: {{p4info: {p4info}, device_config: {device_json}, lldp_interval_s: 1, lldp_timeout_s: 5}}\n"
                f"  switches:\n{switches}"
            )
            self.start_network()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def ip(self, host: str) -> str:
        return HOSTS[host][2]


def _switch_links(url: str) -> set[tuple[tuple[str, int], tuple[str, int]]]:
    status, body = http("GET", f"{url}/links")
    assert status == 200, body
    out = set()
    for link in body["links"]:
        a, b = link["a"], link["b"]
        if a["node"] in SWITCHES and b["node"] in SWITCHES:
            out.add(tuple(sorted(((a["node"], a["port"]), (b["node"], b["port"])))))
    return out


def test_a_controller_without_topology_learns_bmv2_switches_and_delivers_jobs(tmp_path):
    wire = {tuple(sorted(((a, pa), (b, next(p for p, x in SWITCHES[b][1].items() if x == a)))))
            for a, (_, peers) in SWITCHES.items() for pa, b in peers.items()}
    with LearnedBmv2Fabric(tmp_path, BASE_PORT) as fab:
        url = fab.url
        poll(lambda: _switch_links(url) == wire, 30, "every switch-to-switch link, with both ports")
        status, switches = http("GET", f"{url}/switches")
        got = {s["id"]: s for s in switches["switches"]}
        assert set(got) == set(SWITCHES) and all(s["connected"] and s["backend"] == "p4runtime" for s in got.values())
        assert all(s["entry_capacity_source"] == "p4info" for s in got.values()), got

        talkers = ["h1", "h2", "h3", "h4"]
        for h in talkers:  # an ARP for an address nobody has: it reaches the controller
            fab.net.get(h).cmd("ping -c 1 -W 0.2 192.168.255.254")

        def hosts_learned():
            body = http("GET", f"{url}/hosts")[1]
            return {h["ip"]: (h["switch"], h["port"]) for h in body["hosts"]}

        where = {HOSTS[h][2]: HOSTS[h][:2] for h in talkers}
        poll(lambda: hosts_learned() == where, 20, "every talking host located")
        failed = [f"{a}->{b}" for a in talkers for b in talkers
                  if a != b and " 0% packet loss" not in fab.net.get(a).cmd(f"ping -c 1 -W 2 {fab.ip(b)}")]
        assert not failed, failed

        # by address (h1 is also named "ps" by the config): exact membership
        body = {"id": "near", "ps": "ps", "workers": [fab.ip("h2"), fab.ip("h3")], "demand": 1e8}
        status, job = http("POST", f"{url}/jobs", body)
        assert status == 201 and job["state"] == "planned", job
        time.sleep(2)
        got = fab.received(job["group_address"], ["h2", "h3", "h4"], "h1")
        assert 95 <= got["h2"] <= 100 and 95 <= got["h3"] <= 100 and got["h4"] == 0, got

        # a quiet host: probed, located, planned, delivered; a ghost: fails
        status, job = http("POST", f"{url}/jobs", {"id": "late", "ps": fab.ip("h3"),
                                                    "workers": [fab.ip("quiet"), fab.ip("h1")], "demand": 1e8})
        assert status in (201, 202), job
        status, ghost = http("POST", f"{url}/jobs", {"id": "ghost", "ps": fab.ip("h4"),
                                                      "workers": ["192.168.9.250"], "demand": 1e8})
        assert ghost["state"] == "pending" and ghost["missing_hosts"] == ["192.168.9.250"], ghost
        job = poll(lambda: (j := http("GET", f"{url}/jobs/late")[1])["state"] == "planned" and j, 20,
                   "the quiet host to answer the probe")
        assert hosts_learned()[fab.ip("quiet")] == HOSTS["quiet"][:2]
        time.sleep(2)
        got = fab.received(job["group_address"], ["quiet", "h1", "h2", "h4"], "h3")
        assert 95 <= got["quiet"] <= 100 and 95 <= got["h1"] <= 100 and got["h2"] == got["h4"] == 0, got
        ghost = poll(lambda: (j := http("GET", f"{url}/jobs/ghost")[1])["state"] == "failed" and j,
                     HOST_TIMEOUT_S + 10, "the ghost job to fail")
        assert "192.168.9.250" in ghost["error"], ghost

        for jid in ("near", "late", "ghost"):
            assert http("DELETE", f"{url}/jobs/{jid}")[0] == 204
        body = http("GET", f"{url}/switches")[1]
        assert all(s["groups_used"] == 0 and s["entries_used"] == 0 for s in body["switches"]), body
