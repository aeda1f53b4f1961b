"""P4Runtime switches in a learned network (no topology in the config), against the
in-process protocol test harness: the test is the wire between the harness
servers (it carries each LLDP packet-out to the peer port as a packet-in).

The wire: leaf-a port 3 - spine port 1, leaf-b port 4 - spine port 2; hosts at
leaf-a ports 1 and 2 and leaf-b port 1; 172.16.9.21 (at leaf-b port 2) answers
only the controller's probe. Every switch lists ports 1..4.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from p4runtime_test_server import P4RuntimeTestServer  # noqa: E402
from test_p4_runtime import DEVICE_CONFIG, P4INFO, Clock, _arp, wait_for  # noqa: E402

from controller.config import config_from_dict  # noqa: E402
from controller.core.service import ControllerService  # noqa: E402
from controller.southbound.p4runtime import entities as ps  # noqa: E402
from controller.southbound.p4runtime.backend import P4RuntimeBackend
from controller.southbound.p4runtime.pipeline import p4_switches
from controller.southbound.lldp import parse_lldp  # noqa: E402
from controller.southbound.probes import PROBE_MAC, arp_probe  # noqa: E402
from controller.store.sqlite import JobStore  # noqa: E402

WIRE = {("leaf-a", 3): ("spine", 1), ("leaf-b", 4): ("spine", 2)}
WIRE.update({b: a for a, b in list(WIRE.items())})
HOSTS = {  # ip -> (switch, port, mac)
    "172.16.5.10": ("leaf-a", 1, "02:00:00:00:05:10"),
    "172.16.5.11": ("leaf-a", 2, "02:00:00:00:05:11"),
    "172.16.9.20": ("leaf-b", 1, "02:00:00:00:09:20"),
}
LATE = ("172.16.9.21", "leaf-b", 2, "02:00:00:00:09:21")


class LearnedP4Fabric:
    def __init__(self) -> None:
        self.servers = {name: P4RuntimeTestServer(device_id=i + 1) for i, name in enumerate(("leaf-a", "leaf-b", "spine"))}
        switches = {name: {"address": s.start(), "device_id": i + 1, "ports": [1, 2, 3, 4]}
                    for i, (name, s) in enumerate(self.servers.items())}
        self.config = config_from_dict({
            "planner": {"algorithm": "spt", "debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 0.01, "link_hold_down_s": 0},
            "discovery": {"host_timeout_s": 30, "link_capacity": 1e9},
            "hosts": {"ps": {"ip": "172.16.5.10"}},
            "southbound": {"backend": "p4runtime", "switches": switches},
        })
        self.clock = Clock()
        self.start()

    def start(self) -> None:
        """A controller (service and backend) with an empty store."""
        self.service = ControllerService(self.config, None, self.clock, store=JobStore(":memory:"))
        self.backend = P4RuntimeBackend(p4_switches(self.config, None).values(), P4INFO, DEVICE_CONFIG,
                                        lldp_interval_s=0, lldp_timeout_s=15, clock=self.clock)
        self.backend.attach(self.service, start=False)

    def restart(self) -> None:
        self.backend.shutdown()
        self.service.close()
        self.start()

    def outs(self) -> int:
        return sum(len(s.packet_outs) for s in self.servers.values())

    def carry_lldp(self) -> int:
        """Send LLDP probes and carry every one that reaches a switch to its peer; the number carried."""
        before = {n: len(s.packet_outs) for n, s in self.servers.items()}
        sent = self.backend.packets.send_lldp()
        wait_for(lambda: self.outs() == sum(before.values()) + sent)
        carried = 0
        for name, server in self.servers.items():
            for payload, meta in server.packet_outs[before[name]:]:
                assert parse_lldp(payload) == (name, meta["egress_port"])
                peer = WIRE.get((name, meta["egress_port"]))
                if peer is not None and self.servers[peer[0]].pipeline is not None:  # (a switch without its program drops it)
                    self.servers[peer[0]].send_packet_in(payload, peer[1])
                    carried += 1
        return carried

    def announce(self, ip: str, switch: str, port: int, mac: str) -> None:
        self.servers[switch].send_packet_in(_arp(1, mac, ip, "00:00:00:00:00:00", ip), port)  # gratuitous

    def close(self) -> None:
        self.backend.shutdown()
        for s in self.servers.values():
            s.stop()
        self.service.close()


@pytest.fixture
def fab():
    f = LearnedP4Fabric()
    yield f
    f.close()


def test_p4_switches_of_a_learned_network_join_link_and_are_programmed(fab):
    service, backend = fab.service, fab.backend
    assert service.wiring.topology.nodes == ()
    for name in fab.servers:
        assert backend.connect(name), name
    # they joined as they connected, each with what its program holds and its listed ports
    joined = {service.wiring.topology.name(v) for v in service.wiring.topology.switches} | set(service.wiring.waiting_nodes())
    assert joined == {"leaf-a", "leaf-b", "spine"}
    limits = service.devices.limits()
    assert {n: (lim.max_entries, lim.source) for n, lim in limits.items()} == {
        n: (P4INFO.table(ps.MCAST_TABLE).size, "p4info") for n in fab.servers}
    assert all(sorted(lim.port_speeds) == [1, 2, 3, 4] for lim in limits.values())
    # LLDP out of every listed port; two links come back
    assert fab.carry_lldp() == 4
    wait_for(lambda: len(service.wiring.topology.links) == 2)
    assert service.wiring.observed_ports() == {("leaf-a", "spine"): 3, ("spine", "leaf-a"): 1,
                                          ("leaf-b", "spine"): 4, ("spine", "leaf-b"): 2}
    for ip, (sw, port, mac) in HOSTS.items():
        fab.announce(ip, sw, port, mac)
    wait_for(lambda: len(service.wiring.topology.hosts) == 3)
    assert {service.wiring.topology.name(h) for h in service.wiring.topology.hosts} == {"ps", "172.16.5.11", "172.16.9.20"}
    # the edge ports: the listed ones that lead to no switch
    assert [service.hosts.edge_ports(n) for n in ("leaf-a", "leaf-b", "spine")] == [[1, 2, 4], [1, 2, 3], [3, 4]]

    # a job by address, one worker never seen yet: pending while the controller probes
    status = service.add_job("172.16.5.10", ["172.16.5.11", "172.16.9.20", LATE[0]], 1e8, job_id="j", wait=False)
    assert status.missing_hosts == (LATE[0],)
    service.planning.replan()
    before = {n: len(s.packet_outs) for n, s in fab.servers.items()}
    assert backend.packets.probe(service.jobs.probe_targets()) == 3 + 3 + 2
    wait_for(lambda: fab.outs() == sum(before.values()) + 8)
    probes = {(n, meta["egress_port"]) for n, s in fab.servers.items() for payload, meta in s.packet_outs[before[n]:]
              if payload == arp_probe(LATE[0])}
    assert probes == {(n, p) for n in fab.servers for p in service.hosts.edge_ports(n)}  # never out of a link port
    late_ip, sw, port, mac = LATE
    fab.servers[sw].send_packet_in(_arp(2, mac, late_ip, PROBE_MAC, "0.0.0.0"), port)  # the probe's answer
    wait_for(lambda: service.jobs.probe_targets() == [])
    service.planning.replan()
    job = service.jobs.status("j")
    assert job.planned is not None and job.error is None and job.planned.rate > 0

    # the plan is written: every switch holds exactly its desired state
    backend.sync(None)
    desired = backend.desired(list(fab.servers))
    for name in fab.servers:
        got = backend.read_state(name)
        assert got == desired[name], name
    group = int.from_bytes(bytes(map(int, service.jobs.group_addresses()["j"].split("."))), "big")
    on = {n for n in fab.servers
          if any(e.table == ps.MCAST_TABLE and dict(e.match).get(ps.F_IPV4_DST) == ps.Exact(group)
                 for e in desired[n].entries)}
    assert on == {"leaf-a", "leaf-b", "spine"}

    # one link falls silent: down after the LLDP timeout, planned around
    fab.clock.now += 20
    fab.servers["spine"].send_packet_in(fab.backend.packets.signer.frame("leaf-a", 3), 1)
    fab.servers["leaf-a"].send_packet_in(fab.backend.packets.signer.frame("spine", 1), 3)
    time.sleep(0.3)
    down = backend.packets.expire_links()
    assert ("spine", "leaf-b") in down or ("leaf-b", "spine") in down
    assert service.links.links_down() == [("leaf-b", "spine")]


def test_a_learned_p4_switch_outside_the_planned_piece_is_left_alone(fab):
    # a programmed fabric, then a controller that starts from nothing and meets
    # leaf-b (still holding its entries) before it has seen leaf-b's link
    for name in fab.servers:
        assert fab.backend.connect(name)
    fab.carry_lldp()
    for ip, (sw, port, mac) in HOSTS.items():
        fab.announce(ip, sw, port, mac)
    wait_for(lambda: len(fab.service.wiring.topology.hosts) == 3)
    fab.service.planning.replan()
    fab.backend.sync(None)
    held = fab.backend.read_state("leaf-b")
    assert held.entries
    fab.restart()
    service, backend = fab.service, fab.backend
    for name in ("leaf-a", "spine"):
        assert backend.connect(name)
    fab.carry_lldp()
    wait_for(lambda: len(service.wiring.topology.links) == 1)
    fab.announce("172.16.5.10", "leaf-a", 1, "02:00:00:00:05:10")
    fab.announce("172.16.5.11", "leaf-a", 2, "02:00:00:00:05:11")
    wait_for(lambda: len(service.wiring.topology.hosts) == 2)
    assert backend.connect("leaf-b")  # joins, not linked to the others yet
    fab.announce("172.16.9.20", "leaf-b", 1, "02:00:00:00:09:20")
    wait_for(lambda: "172.16.9.20" in service.wiring.waiting_nodes())
    service.planning.replan()
    writes = len(fab.servers["leaf-b"].updates)
    backend.sync(None)
    # nothing to reconcile it against: untouched, not wiped
    assert len(fab.servers["leaf-b"].updates) == writes and backend.read_state("leaf-b") == held
    # its link is seen: it joins the planned network and is reconciled
    fab.carry_lldp()
    wait_for(lambda: "leaf-b" in service.wiring.topology.index)
    service.planning.replan()
    backend.sync(None)
    assert backend.read_state("leaf-b") == backend.desired(["leaf-b"])["leaf-b"]


def test_the_probe_frame_is_the_one_os_ken_builds():
    packet_lib = pytest.importorskip("os_ken.lib.packet")
    frame = packet_lib.packet.Packet()
    frame.add_protocol(packet_lib.ethernet.ethernet(dst="ff:ff:ff:ff:ff:ff", src=PROBE_MAC, ethertype=0x0806))
    frame.add_protocol(packet_lib.arp.arp(opcode=1, src_mac=PROBE_MAC, src_ip="0.0.0.0",
                                          dst_mac="00:00:00:00:00:00", dst_ip="10.1.2.3"))
    frame.serialize()
    assert arp_probe("10.1.2.3") == bytes(frame.data)


def test_an_arp_for_an_unseen_host_probes_the_edge_ports_and_the_asker_is_answered_after_the_plan(fab):
    """The P4Runtime backend sends what the core decides (issue 22): a known host's
    ARP for an unseen address becomes ARP probes out of the edge ports only; the
    target's answer is learned, and the asker's answer waits for the sync of the
    plan with the target's routes (the backend's queue), then goes out of the asker's port."""
    import queue as queue_module

    from controller.southbound.probes import arp_reply_frame

    service, backend = fab.service, fab.backend
    for name in fab.servers:
        assert backend.connect(name), name
    fab.carry_lldp()
    wait_for(lambda: len(service.wiring.topology.links) == 2)
    asker_ip, (sw, port, mac) = "172.16.5.10", HOSTS["172.16.5.10"]
    fab.announce(asker_ip, sw, port, mac)
    wait_for(lambda: service.hosts.by_ip(asker_ip) is not None)
    service.planning.replan()
    backend.sync(None)
    late_ip, late_sw, late_port, late_mac = LATE
    before = {n: len(s.packet_outs) for n, s in fab.servers.items()}
    fab.servers[sw].send_packet_in(_arp(1, mac, asker_ip, "00:00:00:00:00:00", late_ip), port)
    edge = {(n, p) for n in fab.servers for p in service.hosts.edge_ports(n)} - {(sw, port)}
    wait_for(lambda: fab.outs() == sum(before.values()) + len(edge))
    outs = {(n, meta["egress_port"]): payload for n, s in fab.servers.items() for payload, meta in s.packet_outs[before[n]:]}
    assert set(outs) == edge and all(p == arp_probe(late_ip) for p in outs.values())  # never out of a link port
    before = {n: len(s.packet_outs) for n, s in fab.servers.items()}
    fab.servers[late_sw].send_packet_in(_arp(2, late_mac, late_ip, PROBE_MAC, "0.0.0.0"), late_port)
    wait_for(lambda: service.hosts.by_ip(late_ip) == late_ip)
    time.sleep(0.2)
    assert fab.outs() == sum(before.values())  # the answer waits for the plan
    service.planning.replan()
    held = []
    while True:
        try:
            item = backend._queue.get_nowait()
        except queue_module.Empty:
            break
        if item[0] == "then":
            held.append(item[1])
    assert len(held) == 1
    backend.sync(None)  # what the worker does first: the target's routes go out
    held[0]()
    wait_for(lambda: fab.outs() == sum(before.values()) + 1)
    payload, meta = fab.servers[sw].packet_outs[-1]
    assert meta["egress_port"] == port and payload == arp_reply_frame(asker_ip, mac, late_ip, late_mac)
