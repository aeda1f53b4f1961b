"""The ARP-spoofing attack of issue 22, on Open vSwitch: a host claims another host's address.

A controller whose config declares no topology learns a 4x2 leaf-spine (random
datapath ids, ports, addresses and MACs: `test_openflow_learned.scrambled`). A
job streams from a PS on one leaf to workers on two others. A host on a fourth
leaf sends 20 gratuitous ARP replies claiming the PS's address with its own MAC,
during the job's delivery. The controller probes the PS at its place, the PS
answers, and the claim is refused:
- `GET /hosts` is unchanged (the PS stays where it is, with its MAC);
- the job is delivered exactly (every worker each datagram, nobody else any)
  during and after the attack;
- /metrics counts the refusal: `mcast_refused_total{kind="host_move_refused"}` > 0.

Skipped, with the reason, when not root, or Open vSwitch, os-ken, ping or
ethtool is missing. Run under `flock /tmp/emu.lock`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ovs_helper  # noqa: E402
from test_openflow_learned import CONFIG, HOST_TIMEOUT_S, Net, scrambled  # noqa: E402
from test_openflow_ovs import WAIT_S, Controller, _free_port, _poll  # noqa: E402

import shutil  # noqa: E402

_reason = ovs_helper.openflow_unavailable()
if _reason is None and any(shutil.which(t) is None for t in ("ping", "ip", "ethtool")):
    _reason = "ping, ip or ethtool is missing (apt-get install iputils-ping iproute2 ethtool)"
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")

# 20 gratuitous ARP replies "`ip` is at my MAC", 0.1 s apart, broadcast out of eth0
SPOOF = """
import socket, sys, time
ip, mac, n = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", "")), int(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
addr = socket.inet_aton(ip)
arp = b"\\x00\\x01\\x08\\x00\\x06\\x04\\x00\\x02" + mac + addr + b"\\xff" * 6 + addr
frame = b"\\xff" * 6 + mac + b"\\x08\\x06" + arp
frame += bytes(60 - len(frame))
for _ in range(n):
    s.send(frame)
    time.sleep(0.1)
print("sent", n, flush=True)
"""


def refused(text: str, kind: str) -> float:
    m = re.search(r'^mcast_refused_total\{kind="%s"\} ([0-9.e+]+)$' % kind, text, re.M)
    return float(m.group(1)) if m else 0.0


def test_a_host_spoofing_another_hosts_address_moves_nothing(tmp_path):
    cfg = tmp_path / "controller.yaml"
    dpid, links, hosts = scrambled("leaf-spine", seed=11)
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

        def hosts_learned():
            net.announce(net.ns)
            _, body = ctl.request("GET", "/hosts")
            got = {h["ip"]: (h["switch"], h["port"], h["mac"]) for h in body["hosts"]}
            assert got == {ip: (*net.where[ip], net.mac[ip]) for ip in net.ns}, set(got) ^ set(net.ns)
            return True

        _poll(hosts_learned, WAIT_S, "every host to be learned")
        _poll(net.pingall, WAIT_S, "every host to ping every other host")
        _, before = ctl.request("GET", "/hosts")

        by_leaf: dict[str, list[str]] = {}
        for sw, _, ip, _ in hosts:
            by_leaf.setdefault(sw, []).append(ip)
        leaves = sorted(by_leaf)
        assert len(leaves) == 4, by_leaf
        ps = by_leaf[leaves[0]][0]
        workers = [by_leaf[leaves[1]][0], by_leaf[leaves[2]][0], by_leaf[leaves[2]][1]]
        attacker = by_leaf[leaves[3]][0]
        status, job = ctl.request("POST", "/jobs", {"id": "a", "ps": ps, "workers": workers, "demand": 5e6})
        assert status == 201 and job["state"] == "planned", job
        group = job["group_address"]
        others = [ip for ip in net.ns if ip != ps]

        def exact(tag: str) -> bool:
            counts = net.deliver(group, ps, tag, others)
            assert all(counts[w] == 40 for w in workers), counts
            assert all(counts[ip] == 0 for ip in others if ip not in workers), counts
            return True

        _poll(lambda: exact("warm"), WAIT_S, "the job to reach exactly its workers")

        # the attack, while the job streams
        spoof = subprocess.Popen(["ip", "netns", "exec", net.ns[attacker], sys.executable, "-c", SPOOF, ps,
                                  net.mac[attacker], "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert exact("during")
            out, err = spoof.communicate(timeout=30)
            assert spoof.returncode == 0 and "sent 20" in out, err
        finally:
            if spoof.poll() is None:
                spoof.kill()
        assert exact("after")

        _, after = ctl.request("GET", "/hosts")
        assert after["hosts"] == before["hosts"], (before, after)
        _, metrics = ctl.request_text("/metrics")
        assert refused(metrics, "host_move_refused") + refused(metrics, "arp_spoof") > 0, \
            [line for line in metrics.splitlines() if "refused" in line]
        print("refused:", {k: refused(metrics, k) for k in ("host_move_refused", "arp_spoof", "host_port_full")},
              file=sys.stderr)
        assert ctl.request("DELETE", "/jobs/a")[0] == 204
    except BaseException:
        print(ctl.log_text()[-6000:], file=sys.stderr)
        raise
    finally:
        ctl.stop()
        ovs.stop()
