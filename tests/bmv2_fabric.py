"""Shared set-up of the BMv2 tests: p4c, a Mininet leaf-spine of BMv2 switches in a
private network namespace, the real controller process, hosts' traffic.

Not a test module: tests/test_bmv2.py and tests/test_bmv2_parity.py import it.
`Bmv2Fabric` is a context manager: it compiles the program, builds the 2x2
leaf-spine (2 hosts per leaf; host-n is 10.0.0.(n+1) with MAC 00:..:(n+1), the
controller's default addresses, unless `macs` gives a host another MAC), turns
TX checksum offload off on every host (BMv2 forwards what the veth hands it),
starts the controller with every switch on P4Runtime and waits until every
switch is connected.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
P4C = shutil.which("p4c-bm2-ss") or shutil.which("p4c")
SWITCH = shutil.which("simple_switch_grpc")
SKIP_REASON = "simple_switch_grpc / p4c not found on PATH"


def compile_program(out: Path, root: Path = REPO) -> tuple[Path, Path]:
    """p4c on ROOT/p4src/mcast.p4 as `make p4` runs it (from ROOT, the source named
    relatively: the JSON records that name); ROOT is the repository unless a test
    compiles a changed copy. Returns (BMv2 JSON, P4Info) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, p4info_path = out / "mcast.json", out / "mcast.p4info.txt"
    if P4C.endswith("p4c-bm2-ss"):
        cmd = [P4C, "--arch", "v1model", "-o", str(json_path), "--p4runtime-files", str(p4info_path)]
    else:
        cmd = [P4C, "--target", "bmv2", "--arch", "v1model", "-o", str(out), "--p4runtime-files", str(p4info_path)]
    subprocess.run([*cmd, "p4src/mcast.p4"], check=True, capture_output=True, text=True, cwd=root)
    return json_path, p4info_path


def private_netns():
    sys.path.insert(0, str(REPO / "mininet"))
    from emu_netns import private_netns as netns

    return netns()


def mininet_bmv2():
    """mininet/bmv2.py as a module; skips when not root or without Mininet."""
    if os.geteuid() != 0:
        pytest.skip("Mininet needs root")
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        pytest.skip("Mininet is not installed")
    spec = importlib.util.spec_from_file_location("bmv2_switch", REPO / "mininet" / "bmv2.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Counts UDP datagrams on a port for a while (joining `group` unless it is "-");
# prints the count and the bytes of payload.
RECEIVER = """
import socket, struct, sys, time
group, port, me = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind(("", port))
if group != "-":
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, struct.pack("4s4s", socket.inet_aton(group), socket.inet_aton(me)))
s.settimeout(0.5)
n, end = 0, time.time() + float(sys.argv[4])
while time.time() < end:
    try:
        s.recv(4096)
        n += 1
    except socket.timeout:
        pass
print(n, flush=True)
"""

# Sends `count` datagrams of `size` bytes to group:port, `pps` per second on an
# absolute schedule (a late packet is sent at once, so the average rate holds);
# prints how many it sent and how long that took.
SENDER = """
import socket, sys, time
dst, port, count, size, pps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
src = sys.argv[6] if len(sys.argv) > 6 else ""
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 8)
if src:
    s.bind((src, 0))
payload = b"x" * size
start = time.time()
for i in range(count):
    delay = start + i / pps - time.time()
    if delay > 0:
        time.sleep(delay)
    s.sendto(payload, (dst, port))
print(count, time.time() - start, flush=True)
"""


def http(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read()
            return r.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def metrics(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        return r.read().decode()


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of sample `name{labels}` (labels in any order), None if absent."""
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'([a-z_]+)="([^"]*)"', m.group(2) or ""))
        if got == labels:
            return float(m.group(3))
    return None


def start_controller(config: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """Start the controller, appending to `log`; (process, API URL) once this
    process (not an earlier one that wrote to the same log) listens."""
    earlier = log.read_text().count("api listening on ") if log.exists() else 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller", "run", "--config", str(config)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "a"), text=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        text = log.read_text()
        if text.count("api listening on ") > earlier:
            url = text.split("api listening on ")[-1].split()[0]
            return proc, url
        if proc.poll() is not None:
            raise AssertionError(f"controller exited: {text[-2000:]}")
        time.sleep(0.2)
    proc.terminate()
    raise AssertionError(f"controller did not start: {log.read_text()[-2000:]}")


def poll(condition, timeout: float, what: str, every: float = 0.5):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            result = condition()
            if result:
                return result
        except AssertionError as e:
            last = e
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}: {last}")


class Bmv2Fabric:
    """The 2x2 leaf-spine of BMv2 switches (`hosts_per_leaf` hosts on each leaf) and
    the controller; see the module doc.
    `southbound` is extra YAML for the `southbound.p4runtime` mapping, `topology`
    extra lines for the topology section."""

    def __init__(self, tmp_path: Path, base_port: int, southbound: str = "", topology: str = "",
                 macs: dict[str, str] | None = None, hosts_per_leaf: int = 2) -> None:
        self.tmp_path = tmp_path
        self.hosts_per_leaf = hosts_per_leaf
        self.base_port = base_port
        self.southbound = southbound
        self.topology_extra = topology
        self.macs = macs or {}
        self.net = None
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.log = tmp_path / "controller.log"
        self.config = tmp_path / "controller.yaml"
        self._netns = None

    def __enter__(self) -> Bmv2Fabric:
        bmv2 = mininet_bmv2()
        from mininet.net import Mininet

        from controller.algorithm.topologies import leaf_spine

        device_json, p4info = compile_program(self.tmp_path / "build")
        topo = leaf_spine(2, 2, self.hosts_per_leaf)
        self.topo = topo
        switches = [topo.name(v) for v in topo.switches]
        ports = bmv2.fabric_ports(switches, base_port=self.base_port)
        self._netns = private_netns()  # the veths, the switches' ports and 127.0.0.1 go with it
        self._netns.__enter__()
        try:
            self.net = net = Mininet(controller=None, autoSetMacs=False)
            for n, h in enumerate(topo.hosts, start=1):
                name = topo.name(h)
                net.addHost(name, ip=f"10.0.0.{n}/8", mac=self.macs.get(name, f"00:00:00:00:00:{n:02x}"))
            for name in switches:
                grpc_port, device_id = ports[name]
                net.addSwitch(name, cls=bmv2.BMv2Switch, grpc_port=grpc_port, device_id=device_id,
                              dpid=f"{device_id:016x}", log_dir=str(self.tmp_path))
            for link in topo.links:  # in topology order: Mininet numbers ports as the default port map says
                net.addLink(link.a, link.b)
            self.config.write_text(
                "api: {port: 0}\n"
                f"store: {{path: {self.tmp_path / 'jobs.sqlite'}}}\n"
                "planner: {algorithm: spt, debounce_s: 0.05, max_delay_s: 0.2}\n"
                f"topology:\n  leaf_spine: {{leaves: 2, spines: 2, hosts_per_leaf: {self.hosts_per_leaf}}}\n"
                f"{self.topology_extra}"
                "southbound:\n  backend: p4runtime\n"
                f"  p4runtime: {{p4info: {p4info}, device_config: {device_json}, base_port: {self.base_port}, "
                f"lldp_interval_s: 1, lldp_timeout_s: 5{self.southbound}}}\n"
            )
            self.start_network()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def start_network(self) -> None:
        """Start Mininet (every host without TX checksum offload: BMv2 forwards what
        the veth hands it) and then the controller."""
        self.net.start()
        for host in self.net.hosts:
            for intf in host.intfList():
                host.cmd(f"ethtool -K {intf.name} tx off")
        self.start_controller()

    def start_controller(self) -> None:
        self.proc, self.url = start_controller(self.config, self.log)

        def connected():
            status, body = http("GET", f"{self.url}/switches")
            return status == 200 and all(s["connected"] for s in body["switches"])

        poll(connected, 60, "every switch to connect")

    def stop_controller(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def __exit__(self, *exc) -> None:
        try:
            self.stop_controller()
            if self.net is not None:
                self.net.stop()
        finally:
            if self._netns is not None:
                self._netns.__exit__(None, None, None)
                self._netns = None

    # -- traffic ----------------------------------------------------------------------------------
    def receive(self, hosts: list[str], group: str, seconds: float, port: int = 5001) -> dict[str, subprocess.Popen]:
        """Start a receiver on each of `hosts` (joining `group`, or "-" for unicast)."""
        procs = {}
        for h in hosts:
            node = self.net.get(h)
            procs[h] = node.popen([sys.executable, "-c", RECEIVER, group, str(port), node.IP(), str(seconds)],
                                  stdout=subprocess.PIPE, text=True)
        return procs

    @staticmethod
    def counts(procs: dict[str, subprocess.Popen]) -> dict[str, int]:
        return {h: int(p.communicate(timeout=60)[0].strip() or 0) for h, p in procs.items()}

    def send(self, host: str, dst: str, count: int, size: int = 200, pps: float = 200.0, port: int = 5001,
             src: str = "") -> tuple[int, float]:
        """(datagrams sent, seconds it took)."""
        node = self.net.get(host)
        if 224 <= int(dst.split(".")[0]) <= 239:
            node.cmd(f"ip route replace 224.0.0.0/4 dev {node.defaultIntf().name}")
        p = node.popen([sys.executable, "-c", SENDER, dst, str(port), str(count), str(size), str(pps), src],
                       stdout=subprocess.PIPE, text=True)
        out, _ = p.communicate(timeout=count / pps + 60)
        n, seconds = out.split()
        return int(n), float(seconds)

    def received(self, group: str, hosts: list[str], sender: str, count: int = 100,
                 ps_copies: list[str] = ()) -> dict[str, int]:
        """What each of `hosts` receives when `sender` sends `count` datagrams to each
        of its job's destinations: `group` (None: the job has no tree) and the
        unicast address of every host in `ps_copies` (the workers the PS addresses
        itself, `structure.ps_unicast` of the REST answer)."""
        dsts = ([group] if group else []) + [self.net.get(h).IP() for h in ps_copies]
        procs = self.receive(hosts, group or "-", 4 + 0.5 * len(dsts))
        time.sleep(1.0)
        for dst in dsts:
            self.send(sender, dst, count)
        return self.counts(procs)
