"""End to end on BMv2: the real P4 program, real simple_switch_grpc switches, the real controller.

Runs only where `simple_switch_grpc` and p4c (`p4c-bm2-ss` or `p4c`) are on
PATH, and (for the fabric) as root with Mininet installed; skipped otherwise,
with the reason (in CI, where .ci/run installs BMv2 and p4c, such a skip is a
failure: tests/conftest.py). Marked `bmv2`: `pytest -m bmv2` runs only these.

1. p4c compiles p4src/mcast.p4, and the P4Info and BMv2 JSON it writes are
   byte for byte the committed p4src/build/mcast.p4info.txt and mcast.json.
2. A 2x2 leaf-spine of BMv2 switches in Mininet, the controller process
   (`python -m controller run`) with every switch on P4Runtime: the pipeline is
   installed, a job registered over the REST API is delivered by multicast to
   every worker and to no other host, a second job under a tight group budget
   (hybrid or unicast delivery) too, and a controller restart writes nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
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

pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.skipif(not (P4C and SWITCH), reason="simple_switch_grpc / p4c not found on PATH"),
]


def compile_program(out: Path) -> tuple[Path, Path]:
    """p4c on p4src/mcast.p4 as `make p4` runs it (from the repository root, the
    source named relatively: the JSON records that name)."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, p4info_path = out / "mcast.json", out / "mcast.p4info.txt"
    if P4C.endswith("p4c-bm2-ss"):
        cmd = [P4C, "--arch", "v1model", "-o", str(json_path), "--p4runtime-files", str(p4info_path)]
    else:
        cmd = [P4C, "--target", "bmv2", "--arch", "v1model", "-o", str(out), "--p4runtime-files", str(p4info_path)]
    subprocess.run([*cmd, "p4src/mcast.p4"], check=True, capture_output=True, text=True, cwd=REPO)
    return json_path, p4info_path


def summary(path: Path) -> dict:
    from controller.southbound.p4info import P4Info

    info = P4Info.load(path)
    return {
        "tables": sorted((t.name, t.id, t.size, t.implementation_id, tuple(t.fields), t.action_ids) for t in info.tables()),
        "actions": sorted((a.name, a.id, a.params) for a in info.actions()),
        "profiles": sorted((p.name, p.id, p.size, p.with_selector) for p in info.profiles()),
        "headers": sorted(
            (c.preamble.name, c.preamble.id, tuple((m.id, m.name, m.bitwidth) for m in c.metadata))
            for c in info.message.controller_packet_metadata
        ),
    }


def test_p4c_writes_the_committed_p4info_and_json(tmp_path):
    device_json, p4info = compile_program(tmp_path)
    committed = REPO / "p4src" / "build"
    assert summary(p4info) == summary(committed / "mcast.p4info.txt")
    assert p4info.read_text() == (committed / "mcast.p4info.txt").read_text(), "run `make p4` and commit p4src/build/"
    assert device_json.read_text() == (committed / "mcast.json").read_text(), "run `make p4` and commit p4src/build/"


# -- the fabric ---------------------------------------------------------------------------------------
def _private_netns():
    sys.path.insert(0, str(REPO / "mininet"))
    from emu_netns import private_netns

    return private_netns()


def _mininet():
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


RECEIVER = """
import socket, struct, sys, time
group, port, me = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", port))
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, struct.pack("4s4s", socket.inet_aton(group), socket.inet_aton(me)))
s.settimeout(0.5)
n, end = 0, time.time() + float(sys.argv[4])
while time.time() < end:
    try:
        s.recv(2048)
        n += 1
    except socket.timeout:
        pass
print(n, flush=True)
"""

SENDER = """
import socket, sys, time  # noqa: E401
group, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 8)
for i in range(count):
    s.sendto(b"x" * 200, (group, port))
    time.sleep(0.005)
"""


def _http(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read()
            return r.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _start_controller(config: Path, log: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller", "run", "--config", str(config)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "a"), text=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        text = log.read_text()
        if "api listening on " in text:
            url = text.split("api listening on ")[-1].split()[0]
            return proc, url
        if proc.poll() is not None:
            raise AssertionError(f"controller exited: {text[-2000:]}")
        time.sleep(0.2)
    proc.terminate()
    raise AssertionError(f"controller did not start: {log.read_text()[-2000:]}")


def _received(net, group: str, hosts: list[str], sender: str, count: int = 100) -> dict[str, int]:
    procs = {}
    for h in hosts:
        node = net.get(h)
        procs[h] = node.popen([sys.executable, "-c", RECEIVER, group, "5001", node.IP(), "6"], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    ps = net.get(sender)
    ps.cmd(f"ip route replace 224.0.0.0/4 dev {ps.defaultIntf().name}")
    ps.popen([sys.executable, "-c", SENDER, group, "5001", str(count)]).wait(60)
    return {h: int(p.communicate(timeout=30)[0].strip() or 0) for h, p in procs.items()}


def test_jobs_are_delivered_on_a_bmv2_fabric(tmp_path):
    bmv2 = _mininet()
    from mininet.net import Mininet

    from controller.algorithm.topologies import leaf_spine

    device_json, p4info = compile_program(tmp_path / "build")
    topo = leaf_spine(2, 2, 2)
    switches = [topo.name(v) for v in topo.switches]
    ports = bmv2.fabric_ports(switches, base_port=50151)
    netns = _private_netns()  # the veths, the switches' ports and 127.0.0.1 go with it
    netns.__enter__()
    net = Mininet(controller=None, autoSetMacs=False)
    for n, h in enumerate(topo.hosts, start=1):
        net.addHost(topo.name(h), ip=f"10.0.0.{n}/8", mac=f"00:00:00:00:00:{n:02x}")
    for name in switches:
        grpc_port, device_id = ports[name]
        net.addSwitch(name, cls=bmv2.BMv2Switch, grpc_port=grpc_port, device_id=device_id, dpid=f"{device_id:016x}",
                      log_dir=str(tmp_path))
    for link in topo.links:  # in topology order: Mininet numbers ports as the default port map says
        net.addLink(link.a, link.b)
    config = tmp_path / "controller.yaml"
    config.write_text(
        "api: {port: 0}\n"
        f"store: {{path: {tmp_path / 'jobs.sqlite'}}}\n"
        "planner: {algorithm: spt, debounce_s: 0.05, max_delay_s: 0.2}\n"
        "topology:\n  leaf_spine: {leaves: 2, spines: 2, hosts_per_leaf: 2}\n"
        "  switches: {leaf-1: {group_capacity: 0}}\n"
        "southbound:\n  backend: p4runtime\n"
        f"  p4runtime: {{p4info: {p4info}, device_config: {device_json}, base_port: 50151, lldp_interval_s: 1, lldp_timeout_s: 5}}\n"
    )
    log = tmp_path / "controller.log"
    proc = None
    try:
        net.start()
        for host in net.hosts:  # BMv2 forwards what the veth hands it: no checksum offload
            for intf in host.intfList():
                host.cmd(f"ethtool -K {intf.name} tx off")
        proc, url = _start_controller(config, log)
        deadline = time.time() + 60
        while time.time() < deadline:
            status, body = _http("GET", f"{url}/switches")
            if status == 200 and all(s["connected"] for s in body["switches"]):
                break
            time.sleep(0.5)
        assert all(s["connected"] for s in body["switches"]), body
        # a tree job: host-0 -> host-1 (same leaf), host-2, host-3 (other leaf, which may not replicate)
        status, job = _http("POST", f"{url}/jobs", {"id": "j1", "ps": "host-0", "workers": ["host-1", "host-2", "host-3"], "demand": 1e8})
        assert status == 201, job
        time.sleep(2)  # the backend writes after the plan
        got = _received(net, job["group_address"], ["host-1", "host-2", "host-3"], "host-0")
        assert all(n >= 95 for n in got.values()), (job["mode"], got)
        # host-2 is not a worker of this job: it gets nothing
        status, job2 = _http("POST", f"{url}/jobs", {"id": "j2", "ps": "host-3", "workers": ["host-0", "host-1"], "demand": 1e8})
        assert status == 201, job2
        time.sleep(2)
        got = _received(net, job2["group_address"], ["host-0", "host-1", "host-2"], "host-3")
        assert got["host-0"] >= 95 and got["host-1"] >= 95 and got["host-2"] == 0, (job2["mode"], got)
        # a restart of the controller: reconciles, writes nothing, keeps delivering
        proc.terminate()
        proc.wait(30)
        proc, url = _start_controller(config, log)
        time.sleep(5)
        text = log.read_text().split("api listening on ")[-1]
        assert "pipeline installed" not in text and " updates" not in text, text[-3000:]
        got = _received(net, job["group_address"], ["host-1", "host-2", "host-3"], "host-0")
        assert all(n >= 95 for n in got.values()), got
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        net.stop()
        netns.__exit__(None, None, None)
