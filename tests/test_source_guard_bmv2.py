"""End to end on BMv2: the P4 program's source guard (issue 22) with real packets.

The 2x2 leaf-spine of BMv2 switches of tests/bmv2_fabric.py with three hosts per
leaf (host-n is 10.0.0.(n+1), MAC 00:00:00:00:00:(n+1)), the real controller on
P4Runtime, and a job j1: PS host-0 on leaf-0, workers host-1 (leaf-0), host-3
and host-4 (leaf-1). host-2, on the PS's leaf, attacks with raw frames
(tests/forge.py; tagged payloads), as tests/test_source_guard_ovs.py does on
Open vSwitch:

- a flood from 20,000 random source addresses and MACs to the group and to a
  worker, while the PS streams: nothing forged reaches any host, the job is
  delivered during and after, the program's `source_guard_drops` counter at the
  attacker's port is in /metrics, and the controller's RSS grows by a bounded
  amount (printed with -s);
- the issue's attack (500 datagrams to the group with the PS's address as the
  source, with the attacker's MAC and with the PS's, and 500 to a worker as the
  PS) with the controller stopped: the switches keep their entries, so this is
  the program alone; nothing reaches a worker, the PS's stream does.

Marked `bmv2`; skipped like tests/test_bmv2.py without BMv2, p4c, root or Mininet.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bmv2_fabric import P4C, SKIP_REASON, SWITCH, Bmv2Fabric, http, metric, metrics, poll  # noqa: E402
from forge import FORGER, RECEIVER, SENDER, cpu_s, rss_kib  # noqa: E402

from controller.addressing.groups import group_mac  # noqa: E402

pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.skipif(not (P4C and SWITCH), reason=SKIP_REASON),
]

PORT = 5009
FLOOD = 20_000
FLOOD_PPS = 1500  # one BMv2 switch forwards about 3,000 frames/s on this machine (docs/p4.md)
FORGED = 500
PS, WORKERS, ATTACKER, BYSTANDER = "host-0", ("host-1", "host-3", "host-4"), "host-2", "host-5"
ATTACKER_PORT = 5  # leaf-0's port to host-2 (the default port map of leaf_spine(2, 2, 3))
RSS_GROWTH_LIMIT_KIB = 64 * 1024


def receivers(fab, hosts, group: str, seconds: float) -> dict[str, subprocess.Popen]:
    procs = {}
    for h in hosts:
        node = fab.net.get(h)
        procs[h] = node.popen([sys.executable, "-c", RECEIVER, str(PORT), group, node.IP(), str(seconds)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for p in procs.values():
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    return procs


def counts(procs) -> dict[str, dict[str, int]]:
    return {h: json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for h, p in procs.items()}


def stream(fab, group: str, tag: str, count: int, pps: float) -> subprocess.Popen:
    node = fab.net.get(PS)
    node.cmd(f"ip route replace 224.0.0.0/4 dev {node.defaultIntf().name}")
    return node.popen([sys.executable, "-c", SENDER, group, str(PORT), node.IP(), tag, str(count), str(pps)],
                      stdout=subprocess.PIPE, text=True)


def forge(fab, *args: str) -> tuple[int, float]:
    node = fab.net.get(ATTACKER)
    p = node.popen([sys.executable, "-c", FORGER, node.defaultIntf().name, *args], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return int(out.split()[0]), float(out.split()[1])


def guard_drops(url: str) -> float:
    return metric(metrics(url), "mcast_source_guard_drops_total", switch="leaf-0", port=str(ATTACKER_PORT)) or 0.0


@pytest.fixture(scope="module")
def fab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guard")
    with Bmv2Fabric(tmp, 50351, southbound=", packet_in_pps: 200", hosts_per_leaf=3) as f:
        yield f


def test_forged_sources_never_reach_a_worker_on_bmv2(fab):
    ip = {h: fab.net.get(h).IP() for h in (PS, *WORKERS, ATTACKER, BYSTANDER)}
    mac = {h: fab.net.get(h).MAC() for h in ip}
    for h in ip:  # every host speaks once (ARP): the controller learns it
        fab.net.get(h).cmd(f"ping -c 1 -W 1 {ip[PS] if h != PS else ip['host-1']}")
    status, job = http("POST", f"{fab.url}/jobs", {"id": "j1", "ps": PS, "workers": list(WORKERS), "demand": 5e6})
    assert status in (200, 201), job
    group = job["group_address"]
    gmac = group_mac(group)
    hosts = [*WORKERS, BYSTANDER]
    n_try = iter(range(1000))

    def delivered():
        tag = f"warm{next(n_try)}"
        procs = receivers(fab, hosts, group, 3)
        stream(fab, group, tag, 50, 100).communicate(timeout=30)
        got = counts(procs)
        assert all(got[w].get(tag, 0) == 50 for w in WORKERS) and not got[BYSTANDER], got
        return True

    poll(delivered, 60, "the job to be delivered to exactly its workers", every=0.2)

    # -- a flood from 20,000 random sources while the PS streams ------------------------------
    drops_before = guard_drops(fab.url)
    rss_before = rss_kib(fab.proc.pid)
    cpu_before = cpu_s(fab.proc.pid)
    _, hosts_before = http("GET", f"{fab.url}/hosts")
    seconds_flood = FLOOD / FLOOD_PPS
    procs = receivers(fab, hosts, group, seconds_flood + 8)
    s = stream(fab, group, "during", int(100 * (seconds_flood + 3)), 100)
    time.sleep(1.0)
    sent, seconds = forge(fab, f"{group},{ip['host-3']}", f"{gmac},{mac['host-3']}", str(PORT), "flood", str(FLOOD),
                          str(FLOOD_PPS), "random", "22")
    during = int(s.communicate(timeout=120)[0].split()[0])
    got = counts(procs)
    time.sleep(1.0)
    rss_after = rss_kib(fab.proc.pid)
    cpu = cpu_s(fab.proc.pid) - cpu_before
    drops = guard_drops(fab.url) - drops_before
    _, hosts_after = http("GET", f"{fab.url}/hosts")
    print(f"flood: {sent} frames from random sources in {seconds:.1f} s; the PS sent {during}; received {got}; "
          f"guard drops at leaf-0 port {ATTACKER_PORT}: {drops:.0f}; controller RSS {rss_before} KiB -> {rss_after} KiB "
          f"(+{rss_after - rss_before} KiB), controller CPU {cpu:.1f} s")
    assert all(not c.get("flood") for c in got.values()), got
    assert all(got[w].get("during", 0) >= 0.9 * during for w in WORKERS), got
    assert not got[BYSTANDER], got
    assert drops >= sent, (drops, sent)
    assert rss_after - rss_before <= RSS_GROWTH_LIMIT_KIB, (rss_before, rss_after)
    assert [(h["id"], h.get("switch"), h.get("port")) for h in hosts_after["hosts"]] == \
        [(h["id"], h.get("switch"), h.get("port")) for h in hosts_before["hosts"]]
    poll(delivered, 60, "the job to be delivered after the flood", every=0.2)

    # -- the attack, on the program alone: the PS's address as the source ---------------
    fab.stop_controller()
    procs = receivers(fab, hosts, group, 12)
    s = stream(fab, group, "alone", 400, 100)
    time.sleep(0.5)
    forged = {
        "forged_ps_attacker_mac": (group, gmac, ip[PS], mac[ATTACKER]),
        "forged_ps_ps_mac": (group, gmac, ip[PS], mac[PS]),
        "forged_unicast": (ip["host-3"], mac["host-3"], ip[PS], mac[PS]),
    }
    for tag, (dst, dmac, src, smac) in forged.items():
        forge(fab, dst, dmac, str(PORT), tag, str(FORGED), "500", src, smac)
    s.communicate(timeout=60)
    got = counts(procs)
    print(f"the issue's attack, controller stopped: {FORGED} of each of {sorted(forged)}; received {got}")
    assert all(not c.get(tag) for c in got.values() for tag in forged), got
    assert all(got[w].get("alone", 0) >= 0.99 * 400 for w in WORKERS), got
    # the counter counted them: read once the controller is back
    fab.start_controller()
    poll(lambda: guard_drops(fab.url) - drops_before >= sent + len(forged) * FORGED, 30, "the guard's count to include the attack")
