"""End to end: a controller whose config declares no topology learns the network.

A private userspace Open vSwitch (tests/ovs_helper.py) gets Mininet's `tree`
topology of depth 2 and fanout 3 (a root switch, three leaf switches, three
hosts per leaf), built the way nobody would number it for the controller: datapath
ids that are not 1..n, switch-to-switch links and hosts on scattered port
numbers, host addresses outside 10.0.0.0/24 and MACs of no pattern. The config
has no `topology` section. The test checks, with real packets:
- every switch is learned under its `of:<dpid>` name and every link on its
  real ports (LLDP); every host at its real port (its ARP), named by its address;
- every host pings every other one;
- a job registered with IPv4 addresses, one of whose workers has not sent a
  packet yet, waits (`pending`, `missing_hosts`) while the controller asks for
  that host (ARP probes out of every edge port); the host answers, is located,
  and the job is planned and delivered with exact membership (every worker gets
  each datagram once, no other host gets any);
- a job naming an address no host has fails after `discovery.host_timeout_s`,
  naming it, and the other job is not disturbed;
- a switch added while the controller runs joins, with its host, and a job
  reaches it;
- deleting the jobs leaves no group and no multicast flow.

Skipped, with the reason, when not root, or Open vSwitch, os-ken, ping or
ethtool is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ovs_helper  # noqa: E402
from test_openflow_ovs import WAIT_S, Controller, _entries, _free_port, _poll  # noqa: E402

_reason = ovs_helper.openflow_unavailable()
if _reason is None and any(shutil.which(t) is None for t in ("ping", "ip", "ethtool")):
    _reason = "ping, ip or ethtool is missing (apt-get install iputils-ping iproute2 ethtool)"
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")

CONFIG = """\
api: {{host: 127.0.0.1, port: 0}}
store: {{path: {store}}}
planner: {{debounce_s: 0.05, max_delay_s: 0.3, wait_s: 10}}
discovery: {{host_timeout_s: {timeout}, probe_interval_s: 0.5}}
"""
HOST_TIMEOUT_S = 6
ROOT, LEAVES = "root", ("la", "lb", "lc")
DPID = {"root": 0x00A1_0000_0000_0F00, "la": 0x0000_0000_0000_0007, "lb": 0x00B2_C300_0000_0001,
        "lc": 0x0000_0000_1234_5678, "ld": 0x0000_0000_00FF_0042}
UPLINK = {"la": (9, 3), "lb": (4, 12), "lc": (2, 5), "ld": (17, 8)}  # leaf -> (root port, leaf port)
HOST_PORTS = (6, 1, 10)  # the three hosts of a leaf, on these ports
GROUP_PORT = 5007
RECEIVER = """
import json, socket, sys, time
group, ip, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", %d))
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + socket.inet_aton(ip))
s.settimeout(0.2)
print("ready", flush=True)
seen = {}
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        data = s.recv(2048)
    except socket.timeout:
        continue
    tag = data.split(b" ")[0].decode()
    seen[tag] = seen.get(tag, 0) + 1
print(json.dumps(seen), flush=True)
""" % GROUP_PORT
SENDER = """
import socket, sys, time
group, ip, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ip))
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 8)
for i in range(n):
    s.sendto(f"{tag} {i}".encode(), (group, %d))
    time.sleep(0.01)
""" % GROUP_PORT


def of_name(dpid: int) -> str:
    return f"of:{dpid:016x}"


class Net:
    """A network on a private OVS, and what the test knows about it (switches by
    their short name here; the controller names them `of:<dpid>`)."""

    def __init__(self, ovs: ovs_helper.OvsInstance, of_port: int) -> None:
        self.ovs, self.of_port = ovs, of_port
        tag = uuid.uuid4().hex[:4]
        self.tag = tag
        self.bridge: dict[str, str] = {}
        self.dpid: dict[str, int] = {}
        self.ns: dict[str, str] = {}  # host ip -> namespace
        self.where: dict[str, tuple[str, int]] = {}  # host ip -> (switch name, port)
        self.mac: dict[str, str] = {}
        self.links: dict[frozenset[str], dict[str, int]] = {}  # controller names -> {name: port}
        self.named: dict[str, str] = {}  # switches the config names (southbound.switches.NAME.dpid)

    def name(self, sw: str) -> str:
        return self.named.get(sw) or of_name(self.dpid[sw])

    def switch(self, sw: str, dpid: int) -> None:
        # bridge names stay short: OVS ports are named after them (15 characters at most)
        self.bridge[sw], self.dpid[sw] = f"ml{self.tag}s{len(self.bridge)}", dpid
        self.ovs.add_bridge(self.bridge[sw], dpid=dpid, controller=f"tcp:127.0.0.1:{self.of_port}")

    def link(self, a: str, pa: int, b: str, pb: int) -> None:
        self.ovs.add_patch(self.bridge[a], pa, self.bridge[b], pb)
        self.links[frozenset((self.name(a), self.name(b)))] = {self.name(a): pa, self.name(b): pb}

    def unlink(self, a: str, b: str) -> tuple[int, int]:
        ports = self.links.pop(frozenset((self.name(a), self.name(b))))
        pa, pb = ports[self.name(a)], ports[self.name(b)]
        self.ovs.vsctl("del-port", self.bridge[a], f"{self.bridge[a]}p{pa}", "--",
                       "del-port", self.bridge[b], f"{self.bridge[b]}p{pb}")
        return pa, pb

    def host(self, sw: str, port: int, ip: str, mac: str) -> None:
        self.ns[ip] = f"ml{self.tag}h{len(self.ns)}"
        self.mac[ip], self.where[ip] = mac, (self.name(sw), port)
        self.ovs.add_host(self.bridge[sw], port, self.ns[ip], ip, mac, prefix=8)
        r = self.ovs.host_run(self.ns[ip], "ethtool", "-K", "eth0", "tx", "off")
        assert r.returncode == 0, r.stderr

    def add_leaf(self, leaf: str, n: int) -> None:
        """A leaf of the tree under ROOT, with its three hosts."""
        self.switch(leaf, DPID[leaf])
        root_port, leaf_port = UPLINK[leaf]
        self.link(ROOT, root_port, leaf, leaf_port)
        for j, port in enumerate(HOST_PORTS):
            self.host(leaf, port, f"172.16.{n}.{20 + 7 * j}",
                      f"0a:{n:02x}:{j:02x}:5e:{(n * 37 + j) % 256:02x}:{(n * 11 + j * 5) % 256:02x}")

    def pingall(self) -> bool:
        """Every host pings every other one (AssertionError naming the failures)."""
        failed = [f"{a}->{b}" for a in self.ns for b in self.ns
                  if a != b and self.ovs.host_run(self.ns[a], "ping", "-c", "1", "-W", "1", b).returncode != 0]
        assert not failed, f"ping failed: {', '.join(failed[:8])}"
        return True

    def no_multicast_left(self) -> bool:
        """No bridge holds a group or a multicast flow (AssertionError naming one that does)."""
        for br in self.bridge.values():
            e = _entries(self.ovs, br)
            assert not e["groups"] and not [f for f in e["flows"] if "priority=2000" in f], (br, e)
        return True

    def announce(self, ips) -> None:
        """Each host ARPs for an address nobody has: its ARP reaches its switch."""
        for ip in ips:
            self.ovs.host_run(self.ns[ip], "ping", "-c", "1", "-W", "0.2", "172.31.255.254")

    def deliver(self, group: str, ps: str, tag: str, receivers, n: int = 40) -> dict[str, int]:
        """`ps` sends `n` datagrams tagged `tag` to `group`; how many each of `receivers` got."""
        procs = {}
        for ip in receivers:
            procs[ip] = subprocess.Popen(
                ["ip", "netns", "exec", self.ns[ip], sys.executable, "-c", RECEIVER, group, ip, "3.0"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for p in procs.values():
                assert p.stdout.readline().strip() == "ready", p.stderr.read()
            r = self.ovs.host_run(self.ns[ps], sys.executable, "-c", SENDER, group, ps, tag, str(n))
            assert r.returncode == 0, r.stderr
            out = {}
            for ip, p in procs.items():
                line, err = p.communicate(timeout=15)
                out[ip] = json.loads(line.strip().splitlines()[-1]).get(tag, 0)
            return out
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()


def test_a_controller_without_topology_learns_a_tree_and_delivers_jobs(tmp_path):
    cfg = tmp_path / "controller.yaml"
    cfg.write_text(CONFIG.format(store=tmp_path / "jobs.sqlite", timeout=HOST_TIMEOUT_S))
    of_port = _free_port()
    ovs = ovs_helper.OvsInstance()
    ctl = Controller(cfg, of_port, tmp_path / "controller.log")
    try:
        ovs.start()
        net = Net(ovs, of_port)
        net.switch(ROOT, DPID[ROOT])
        for n, leaf in enumerate(LEAVES, start=1):
            net.add_leaf(leaf, n)
        ctl.start()
        names = {of_name(DPID[s]) for s in (ROOT, *LEAVES)}

        # -- switches and links --------------------------------------------------------
        def links_learned():
            _, sw = ctl.request("GET", "/switches")
            assert {s["id"] for s in sw["switches"]} == names
            _, body = ctl.request("GET", "/links")
            got = {}
            for link in body["links"]:
                a, b = link["a"], link["b"]
                if a["node"] in names and b["node"] in names:
                    got[frozenset((a["node"], b["node"]))] = {a["node"]: a["port"], b["node"]: b["port"]}
            want = {frozenset((of_name(DPID[ROOT]), of_name(DPID[leaf]))):
                    {of_name(DPID[ROOT]): UPLINK[leaf][0], of_name(DPID[leaf]): UPLINK[leaf][1]} for leaf in LEAVES}
            assert got == want, got
            return True

        _poll(links_learned, WAIT_S, "every switch and link to be learned")

        # -- hosts (all but one, which stays silent for now) ------------------------------
        silent = "172.16.3.34"
        speaking = [ip for ip in net.ns if ip != silent]

        def hosts_learned(which):
            net.announce(which)
            _, body = ctl.request("GET", "/hosts")
            got = {h["ip"]: h for h in body["hosts"]}
            for ip in which:
                assert ip in got, f"{ip} not learned yet"
                h = got[ip]
                assert (h["id"], h["switch"], h["port"], h["mac"]) == (ip, *net.where[ip], net.mac[ip]), h
            return got

        got = _poll(lambda: hosts_learned(speaking), WAIT_S, "every speaking host to be learned")
        assert silent not in got

        # -- a job naming the silent host waits while the controller asks for it -----------
        # (the host ignores ARP requests at first, so the job is seen waiting; the
        # controller's probes find it as soon as it answers)
        def arp_ignore(level: int) -> None:
            r = ovs.host_run(net.ns[silent], "sysctl", "-qw", f"net.ipv4.conf.eth0.arp_ignore={level}")
            assert r.returncode == 0, r.stderr

        arp_ignore(8)
        ps, workers = "172.16.1.20", ["172.16.1.34", "172.16.2.27", silent]
        status, job = ctl.request("POST", "/jobs", {"id": "resnet", "ps": ps, "workers": workers, "demand": 5e6})
        assert status == 202, job
        assert job["state"] == "pending" and job["missing_hosts"] == [silent], job
        time.sleep(1.5)  # three rounds of probes, unanswered
        _, job = ctl.request("GET", "/jobs/resnet")
        assert job["state"] == "pending" and job["missing_hosts"] == [silent], job
        arp_ignore(0)

        def planned():
            _, j = ctl.request("GET", "/jobs/resnet")
            assert j["state"] == "planned" and j["missing_hosts"] == [], j
            return j

        job = _poll(planned, WAIT_S, "the job to be planned once the controller found its last host")
        group = job["group_address"]
        _, body = ctl.request("GET", "/hosts")
        found = {h["ip"]: h for h in body["hosts"]}[silent]
        assert (found["switch"], found["port"], found["mac"]) == (*net.where[silent], net.mac[silent]), found

        # -- a job naming an address nobody has fails after the timeout ---------------------
        status, ghost = ctl.request("POST", "/jobs", {"id": "ghost", "ps": ps, "workers": ["172.16.9.9"], "demand": 1e6})
        assert status in (200, 201, 202) and ghost["state"] == "pending", ghost

        def ghost_failed():
            _, j = ctl.request("GET", "/jobs/ghost")
            assert j["state"] == "failed" and "172.16.9.9" in j["error"], j
            return j

        _poll(ghost_failed, HOST_TIMEOUT_S + 5, "the job naming a host nobody has to fail")
        _, again = ctl.request("GET", "/jobs/resnet")
        assert again["state"] == "planned" and again["group_address"] == group, again
        assert ctl.request("DELETE", "/jobs/ghost")[0] == 204

        # -- unicast: every host pings every other one --------------------------------------
        _poll(net.pingall, WAIT_S, "every host to ping every other host")

        # -- multicast: exact membership ----------------------------------------------------
        others = [ip for ip in net.ns if ip != ps]

        def delivered(tag):
            counts = net.deliver(group, ps, tag, others)
            assert all(counts[w] == 40 for w in workers), counts
            assert all(counts[ip] == 0 for ip in others if ip not in workers), counts
            return counts

        n_try = iter(range(100))
        _poll(lambda: delivered(f"run{next(n_try)}"), WAIT_S, "the job's datagrams to reach exactly its workers")

        # -- a switch joins while the controller runs --------------------------------------
        net.add_leaf("ld", 4)
        newcomer = "172.16.4.20"
        new_name = of_name(DPID["ld"])

        def joined():
            _, sw = ctl.request("GET", "/switches")
            assert new_name in {s["id"] for s in sw["switches"]}
            return hosts_learned([newcomer])

        _poll(joined, WAIT_S, "the new switch and its host to be learned")
        status, job2 = ctl.request("POST", "/jobs", {"id": "bert", "ps": "172.16.2.20", "workers": [newcomer, ps],
                                                     "demand": 5e6})
        assert status in (200, 201, 202) and job2["state"] == "planned", job2
        others2 = [ip for ip in net.ns if ip != "172.16.2.20"]

        def delivered2(tag):
            counts = net.deliver(job2["group_address"], "172.16.2.20", tag, others2)
            assert counts[newcomer] == 40 and counts[ps] == 40, counts
            assert all(counts[ip] == 0 for ip in others2 if ip not in (newcomer, ps)), counts
            return counts

        n_try2 = iter(range(100))
        _poll(lambda: delivered2(f"b{next(n_try2)}"), WAIT_S, "the second job to reach the new switch's host")

        # -- nothing left after delete -------------------------------------------------------
        for jid in ("resnet", "bert"):
            status, _ = ctl.request("DELETE", f"/jobs/{jid}")
            assert status == 204

        _poll(net.no_multicast_left, WAIT_S, "every group and multicast flow to go")
    except BaseException:
        print(ctl.log_text()[-6000:], file=sys.stderr)
        raise
    finally:
        ctl.stop()
        ovs.stop()


def scrambled(kind: str, seed: int):
    """A fat-tree (k=4) or a 4x2 leaf-spine with 2 hosts per leaf, as the planner's
    generators build it, but with datapath ids, port numbers, host addresses and
    MACs drawn at random: (switch -> dpid, [(a, port, b, port)], [(switch, port, ip, mac)])."""
    import random

    from controller.algorithm.topologies import fat_tree, leaf_spine

    topo = fat_tree(4) if kind == "fat-tree" else leaf_spine(4, 2, 2)
    rnd = random.Random(seed)
    switches = [topo.name(v) for v in topo.switches]
    dpids = rnd.sample(range(1, 1 << 48), len(switches))
    dpid = dict(zip(switches, dpids))
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


@pytest.mark.parametrize("kind", ["fat-tree", "leaf-spine"])
def test_a_learned_fat_tree_or_leaf_spine_delivers_within_the_switches_budgets(kind, tmp_path):
    """No topology in the config, one group per switch (`discovery.group_capacity`),
    arbitrary datapath ids, ports and addresses: every switch, link and host
    learned, pingall, two jobs by address with exact membership and at most one
    group per switch; on the fat-tree a link of the first job's tree taken away
    (the job moves off it, still exact) and put back (learned again)."""
    cfg = tmp_path / "controller.yaml"
    dpid, links, hosts = scrambled(kind, seed=7 if kind == "fat-tree" else 11)
    named = {sw: f"sw-{sw}" for sw in list(dpid)[::3]}  # the config names every third datapath
    cfg.write_text(CONFIG.format(store=tmp_path / "jobs.sqlite", timeout=HOST_TIMEOUT_S).replace(
        "probe_interval_s: 0.5}", "probe_interval_s: 0.5, group_capacity: 1}")
        # admit: any: the datapaths the config does not name join too (the default with
        # named switches is `declared`, issue 22)
        + "southbound:\n  admit: any\n  switches:\n" + "".join(f"    {n}: {{dpid: {dpid[sw]}}}\n" for sw, n in named.items()))
    of_port = _free_port()
    ovs = ovs_helper.OvsInstance()
    ctl = Controller(cfg, of_port, tmp_path / "controller.log")
    try:
        ovs.start()
        net = Net(ovs, of_port)
        net.named = named
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
            got = {frozenset((ln["a"]["node"], ln["b"]["node"])): {ln["a"]["node"]: ln["a"]["port"], ln["b"]["node"]: ln["b"]["port"]}
                   for ln in body["links"] if ln["a"]["node"] in names and ln["b"]["node"] in names}
            assert got == net.links, set(net.links) ^ set(got)
            assert all(ln["up"] for ln in body["links"]), body
            return True

        _poll(links_learned, WAIT_S, "every switch and link to be learned")

        def hosts_learned():
            net.announce(net.ns)
            _, body = ctl.request("GET", "/hosts")
            got = {h["ip"]: (h["switch"], h["port"], h["mac"]) for h in body["hosts"]}
            assert got == {ip: (*net.where[ip], net.mac[ip]) for ip in net.ns}, set(got) ^ set(net.ns)
            return True

        _poll(hosts_learned, WAIT_S, "every host to be learned")

        _poll(net.pingall, WAIT_S, "every host to ping every other host")

        ips = list(net.ns)
        specs = [("a", ips[0], [ips[1], ips[5], ips[-1], ips[len(ips) // 2]]), ("b", ips[3], [ips[2], ips[6], ips[-3]])]
        groups = {}
        for jid, ps, workers in specs:
            status, job = ctl.request("POST", "/jobs", {"id": jid, "ps": ps, "workers": workers, "demand": 5e6})
            assert status == 201 and job["state"] == "planned", job
            groups[jid] = job["group_address"]

        def exact(jid, ps, workers, tag):
            others = [ip for ip in ips if ip != ps]
            counts = net.deliver(groups[jid], ps, tag, others)
            assert all(counts[w] == 40 for w in workers), (jid, counts)
            assert all(counts[ip] == 0 for ip in others if ip not in workers), (jid, counts)
            return True

        tags = iter(range(1000))
        for jid, ps, workers in specs:
            _poll(lambda: exact(jid, ps, workers, f"{jid}{next(tags)}"), WAIT_S, f"job {jid} to reach exactly its workers")
        for br in net.bridge.values():
            assert len(_entries(ovs, br)["groups"]) <= 1, (br, _entries(ovs, br)["groups"])

        if kind == "fat-tree":
            # take away a switch-to-switch link the first job's tree uses
            _, job = ctl.request("GET", "/jobs/a")
            by_name = {net.name(sw): sw for sw in dpid}
            used = [(e["from"], e["to"]) for e in job["structure"]["edges"] if e["from"] in by_name and e["to"] in by_name]
            assert used, job
            a, b = by_name[used[0][0]], by_name[used[0][1]]
            pa, pb = net.unlink(a, b)

            def moved():
                _, j = ctl.request("GET", "/jobs/a")
                edges = {(e["from"], e["to"]) for e in j["structure"]["edges"]}
                assert (net.name(a), net.name(b)) not in edges and (net.name(b), net.name(a)) not in edges, edges
                return True

            _poll(moved, WAIT_S, "the job to move off the link taken away")
            ps, workers = specs[0][1], specs[0][2]
            _poll(lambda: exact("a", ps, workers, f"a{next(tags)}"), WAIT_S, "the job to reach exactly its workers again")
            net.link(a, pa, b, pb)
            _poll(links_learned, WAIT_S, "the link put back to be learned and up again")

        for jid, _, _ in specs:
            assert ctl.request("DELETE", f"/jobs/{jid}")[0] == 204

        _poll(net.no_multicast_left, WAIT_S, "every group and multicast flow to go")
    except BaseException:
        print(ctl.log_text()[-6000:], file=sys.stderr)
        raise
    finally:
        ctl.stop()
        ovs.stop()
