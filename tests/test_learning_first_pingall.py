"""End to end, Open vSwitch: a fresh learned network passes pingall on its FIRST round.

No topology in the config; a private userspace Open vSwitch (tests/ovs_helper.py)
gets a leaf-spine (2 spines, 3 leaves, 6 hosts) or a k=4 fat-tree (20 switches,
16 hosts) with random datapath ids, ports, addresses and MACs
(`test_openflow_learned.scrambled`'s way). Once every switch and link is learned,
and before any host has sent anything, every host pings every other one once
(`ping -c 1 -W 1`, as Mininet's pingAll): no ping may fail. (It starts once every
switch holds the fabric's base flows: an ARP sent before that is lost on any
controller, and Linux asks again only a second later.) What makes it pass:
an ARP request for a host not seen yet is passed on out of the edge ports, its
answer is held until the plan with the new host's routes is on the switches, and
each host join is a cheap round (no planner call).

Prints the first round's loss and the p50/p99 of the time from a host's first
packet to its routes (/metrics `mcast_host_join_recent_seconds`: "planned", the
plan handed to the backend; "installed", the switches' barriers answered).
Skipped, with the reason, when not root, or Open vSwitch, os-ken, ping or ethtool
is missing.
"""

from __future__ import annotations

import random
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ovs_helper  # noqa: E402
from test_openflow_learned import CONFIG, HOST_TIMEOUT_S, Net  # noqa: E402
from test_openflow_ovs import WAIT_S, Controller, _entries, _free_port, _poll  # noqa: E402

_reason = ovs_helper.openflow_unavailable()
if _reason is None and any(shutil.which(t) is None for t in ("ping", "ip", "ethtool")):
    _reason = "ping, ip or ethtool is missing (apt-get install iputils-ping iproute2 ethtool)"
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")


def build(kind: str, seed: int):
    """(switch -> dpid, [(a, port, b, port)], [(switch, port, ip, mac)]) of a 3-leaf,
    2-spine leaf-spine with 2 hosts per leaf, or a k=4 fat-tree, scrambled."""
    from controller.algorithm.topologies import fat_tree, leaf_spine

    topo = fat_tree(4) if kind == "fat-tree" else leaf_spine(3, 2, 2)
    rnd = random.Random(seed)
    switches = [topo.name(v) for v in topo.switches]
    dpid = dict(zip(switches, rnd.sample(range(1, 1 << 48), len(switches))))
    free = {sw: rnd.sample(range(1, 60), 20) for sw in switches}
    links, hosts = [], []
    for n, link in enumerate(topo.links):
        a, b = link.a, link.b
        if a in dpid and b in dpid:
            links.append((a, free[a].pop(), b, free[b].pop()))
        else:
            sw = a if a in dpid else b
            ip = f"172.{20 + n % 8}.{rnd.randrange(256)}.{1 + n}"
            mac = "0a:" + ":".join(f"{rnd.randrange(256):02x}" for _ in range(5))
            hosts.append((sw, free[sw].pop(), ip, mac))
    return dpid, links, hosts


def join_quantiles(ctl) -> dict[tuple[str, str], float]:
    """(stage, quantile) -> seconds, from /metrics."""
    _, text = ctl.request_text("/metrics")
    pattern = r'^mcast_host_join_recent_seconds\{quantile="([0-9.]+)",stage="(\w+)"\} (\S+)$'
    return {(m[2], m[1]): float(m[3]) for m in re.finditer(pattern, text, re.M)}


def join_count(ctl, stage: str) -> int:
    _, text = ctl.request_text("/metrics")
    m = re.search(r'^mcast_host_join_seconds_count\{stage="%s"\} (\S+)$' % stage, text, re.M)
    return int(float(m[1])) if m else 0


@pytest.mark.parametrize("kind", ["leaf-spine", "fat-tree"])
def test_a_fresh_learned_network_passes_its_first_pingall(kind, tmp_path):
    cfg = tmp_path / "controller.yaml"
    dpid, links, hosts = build(kind, seed=5 if kind == "fat-tree" else 3)
    cfg.write_text(CONFIG.format(store=tmp_path / "jobs.sqlite", timeout=HOST_TIMEOUT_S))
    of_port = _free_port()
    ovs = ovs_helper.OvsInstance()
    ctl = Controller(cfg, of_port, tmp_path / "controller.log")
    try:
        ovs.start()
        net = Net(ovs, of_port)
        for sw, d in dpid.items():
            net.switch(sw, d)
        for a, pa, b, pb in links:
            net.link(a, pa, b, pb)
        for sw, port, ip, mac in hosts:
            net.host(sw, port, ip, mac)
        ctl.start()
        names = {net.name(sw) for sw in dpid}

        def links_learned():
            _, sw = ctl.request("GET", "/switches")
            assert {s["id"] for s in sw["switches"]} == names
            _, body = ctl.request("GET", "/links")
            got = {frozenset((ln["a"]["node"], ln["b"]["node"])) for ln in body["links"]
                   if ln["a"]["node"] in names and ln["b"]["node"] in names}
            assert got == set(net.links), set(net.links) ^ got
            return True

        _poll(links_learned, WAIT_S, "every switch and link to be learned")

        def programmed():  # the plan of the learned fabric is on every switch (ARP goes to the controller)
            for br in net.bridge.values():
                flows = _entries(ovs, br)["flows"]
                assert any("priority=100,arp" in f and "CONTROLLER" in f for f in flows), (br, flows)
            return True

        _poll(programmed, WAIT_S, "every switch to be programmed")
        _, body = ctl.request("GET", "/hosts")
        assert body["hosts"] == [], body  # nobody has spoken yet

        pairs = [(a, b) for a in net.ns for b in net.ns if a != b]
        failed = [f"{a}->{b}" for a, b in pairs
                  if ovs.host_run(net.ns[a], "ping", "-c", "1", "-W", "1", b).returncode != 0]
        q = join_quantiles(ctl)
        print(f"\n{kind}: first pingall lost {len(failed)}/{len(pairs)} ({100 * len(failed) / len(pairs):.1f} %); "
              f"host join p50/p99: planned {q.get(('planned', '0.5'))}/{q.get(('planned', '0.99'))} s, "
              f"installed {q.get(('installed', '0.5'))}/{q.get(('installed', '0.99'))} s "
              f"({join_count(ctl, 'planned')} planned, {join_count(ctl, 'installed')} installed samples)")
        assert not failed, f"first pingall: {len(failed)}/{len(pairs)} failed: {', '.join(failed[:8])}"
        assert join_count(ctl, "planned") == len(net.ns)  # every host joined once
        assert "the served plan kept" in ctl.log_text()  # joins without a full plan
    except BaseException:
        print(ctl.log_text()[-6000:], file=sys.stderr)
        raise
    finally:
        ctl.stop()
        ovs.stop()
