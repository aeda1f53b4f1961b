"""End to end on Open vSwitch: the planned class (`southbound.planned_dscp`) with real packets.

The source-guard test's fabric (tests/test_source_guard_ovs.py: a declared 2x2
leaf-spine, three hosts per leaf, on a private userspace OVS), the real
controller with `planned_dscp: 46`, and a job j1: PS host-0 (leaf-0), workers
host-1 (leaf-0), host-3 and host-4 (leaf-1). Each host sends UDP from an
ordinary socket with the TOS byte it chooses, and a raw capture at the receiver
reads the TOS byte each datagram arrived with:

- planned with spt (a multicast tree): the PS's datagrams to the group, on the
  job's port, arrive marked (DSCP 46, TOS 184) though sent with TOS 0;
- planned with unicast (the PS addresses every worker): the PS's datagrams to a
  worker on the job's port arrive marked; on another port, sent with DSCP 46,
  they arrive with 0;
- both: a worker's datagrams from the job's port to the PS (its NACKs and ACKs)
  arrive marked; a host outside the job sending DSCP 46 to the PS from the job's
  port, or to anyone, arrives with 0, and so does a worker's DSCP 46 to another
  host;
- a restarted controller reads the marking flows and meters back as it wrote
  them (nothing rewritten).

Skipped, with the reason, when not root or Open vSwitch or os-ken is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ovs_helper  # noqa: E402
from test_openflow_ovs import WAIT_S, Controller, _free_port, _poll  # noqa: E402
from test_source_guard_ovs import Fabric  # noqa: E402

from controller.client.normwire import port_for  # noqa: E402

_reason = ovs_helper.openflow_unavailable()
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")

CONFIG = """\
api: {{host: 127.0.0.1, port: 0}}
store: {{path: {store}}}
planner: {{algorithm: {algorithm}, debounce_s: 0.05, max_delay_s: 0.2, wait_s: 10}}
topology:
  leaf_spine: {{leaves: 2, spines: 2, hosts_per_leaf: 3}}
southbound:
  planned_dscp: 46
"""
PS, WORKERS, OUTSIDER, BYSTANDER = "host-0", ("host-1", "host-3", "host-4"), "host-2", "host-5"
MARKED = 46 << 2  # the TOS byte of DSCP 46

# the TOS bytes of the UDP datagrams an interface receives, by their tag (the payload's
# first word), until a line on stdin (then printed as JSON)
CAPTURE = r"""
import json, select, socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0800))
s.bind(("eth0", 0))
print("ready", flush=True)
seen = {}
while True:
    r, _, _ = select.select([s, sys.stdin], [], [], 0.5)
    if sys.stdin in r:
        break
    if s in r:
        frame = s.recv(65535)
        ihl = (frame[14] & 15) * 4
        if len(frame) > 14 + ihl + 8 and frame[23] == 17:
            tag = frame[14 + ihl + 8:].split(b" ")[0].decode(errors="replace")
            seen.setdefault(tag, set()).add(frame[15])
print(json.dumps({k: sorted(v) for k, v in seen.items()}), flush=True)
"""

# SRC_IP DST PORT SPORT TOS TAG COUNT: datagrams from an ordinary socket bound to SRC_IP:SPORT
SEND = r"""
import socket, sys, time
src, dst, port, sport, tos, tag, count = sys.argv[1:8]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(tos))
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(src))
s.bind((src, int(sport)))
for i in range(int(count)):
    s.sendto(f"{tag} {i} ".encode().ljust(100, b"x"), (dst, int(port)))
    time.sleep(0.02)
"""


def captures(fab: Fabric, hosts) -> dict[str, subprocess.Popen]:
    procs = {h: subprocess.Popen(["ip", "netns", "exec", fab.ns[h], sys.executable, "-c", CAPTURE],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for h in hosts}
    for h, p in procs.items():
        assert p.stdout.readline().strip() == "ready", (h, p.stderr.read())
    return procs


def finish(procs) -> dict[str, dict[str, list[int]]]:
    out = {}
    for h, p in procs.items():
        line, err = p.communicate("stop\n", timeout=30)
        out[h] = json.loads(line.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("algorithm", ["spt", "unicast"])
def test_the_controller_marks_the_planned_traffic_and_resets_the_rest(tmp_path, algorithm):
    cfg = tmp_path / "controller.yaml"
    cfg.write_text(CONFIG.format(store=tmp_path / "jobs.sqlite", algorithm=algorithm))
    of_port = _free_port()
    ovs = ovs_helper.OvsInstance()
    ctl = Controller(cfg, of_port, tmp_path / "controller.log")
    try:
        ovs.start()
        fab = Fabric(ovs, of_port)
        ctl.start()

        def connected():
            _, body = ctl.request("GET", "/switches")
            assert all(s["connected"] for s in body["switches"]), body
            return True

        _poll(connected, WAIT_S, "every switch to connect")
        for h in sorted(fab.ns):  # every host speaks once (ARP): the controller learns it
            fab.ovs.host_run(fab.ns[h], "ping", "-c", "1", "-W", "1", fab.ip[PS if h != PS else "host-1"])
        status, job = ctl.request("POST", "/jobs", {"id": "j1", "ps": PS, "workers": list(WORKERS), "demand": 5e6})
        assert status in (200, 201), job
        group, port = job["group_address"], port_for(job["group_address"])
        n_try = iter(range(1000))

        def marked():
            n = next(n_try)
            # (sender, destination, destination port, source port, TOS sent, tag, who receives, TOS expected)
            sends = [
                (WORKERS[1], fab.ip[PS], 40000, port, 0, f"feedback{n}", PS, MARKED),
                (OUTSIDER, fab.ip[PS], 40000, port, MARKED, f"outsider{n}", PS, 0),
                (OUTSIDER, fab.ip[BYSTANDER], 40000, 40001, MARKED, f"forged{n}", BYSTANDER, 0),
                (WORKERS[1], fab.ip[BYSTANDER], 40000, port, MARKED, f"elsewhere{n}", BYSTANDER, 0),
                (PS, fab.ip[WORKERS[1]], port + 1, 40002, MARKED, f"otherport{n}", WORKERS[1], 0),
            ]
            if algorithm == "spt":
                sends.append((PS, group, port, 40003, 0, f"group{n}", WORKERS[1], MARKED))
            else:
                sends.append((PS, fab.ip[WORKERS[1]], port, 40003, 0, f"session{n}", WORKERS[1], MARKED))
            procs = captures(fab, (PS, WORKERS[1], BYSTANDER))
            for src, dst, dport, sport, tos, tag, _, _ in sends:
                fab.run(src, SEND, fab.ip[src], dst, str(dport), str(sport), str(tos), tag, "5")
            time.sleep(0.3)
            got = finish(procs)
            want = {tag: (rx, [tos]) for _, _, _, _, _, tag, rx, tos in sends}
            assert {tag: (rx, got[rx].get(tag)) for tag, (rx, _) in want.items()} == want, got
            return True

        _poll(marked, WAIT_S, "the planned class's marks and resets")
        dump = ovs.ofctl("dump-flows", fab.bridge[fab.at[PS][0]])
        assert "set_field:46->ip_dscp" in dump and "set_field:0->ip_dscp" in dump, dump

        # a restarted controller reads the marks back as it wrote them: nothing rewritten
        assert ctl.stop() == 0, ctl.log_text()[-3000:]
        ctl.log = tmp_path / "controller-2.log"
        ctl.start()
        names = sorted(fab.bridge)
        _poll(lambda: all(f"switch {n}: read back" in ctl.log.read_text() for n in names), WAIT_S,
              "the restarted controller to read every switch back")
        time.sleep(0.5)  # any (wrong) operations would be sent right after the read-back
        text = ctl.log.read_text()
        assert " sent " not in text and "not understood" not in text, text
        _poll(marked, WAIT_S, "the marks after the restart")
    except BaseException:
        print(ctl.log_text()[-6000:], file=sys.stderr)
        raise
    finally:
        ctl.stop()
        ovs.stop()
