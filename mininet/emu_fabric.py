"""The emulated fabric: a Mininet network built from the controller's own topology.

Owns the mapping between the planner's world and Mininet's:
- `write_config` writes the controller config (JSON) for a k-ary fat-tree or a
  leaf-spine with link bandwidths in Mbit/s and per-switch group budgets. The
  planner's link capacity is `PLANNER_SHARE` of the emulated bandwidth: the
  planner counts the stream's bits, the link (tc htb) carries Ethernet/IP/UDP
  headers as well and is not exact.
- `Fabric` reads that config back with the controller's own functions
  (`build_topology`, `host_table`, `default_port_map`, `switch_dpids`), so the
  two agree by construction: switch n (0-based, `topology.switches` order) is
  Mininet switch `s{n+1}` with datapath id n+1; its ports are numbered as the
  controller's default port map says; host n is `h{n+1}` with the IP and MAC of
  the host table; every link is a TCLink of capacity / PLANNER_SHARE.
  `names` maps topology names (core-0, agg-1-0, host-3, ...) to Mininet names.
- Two backends (`BACKENDS`). "ovs": Open vSwitch bridges with the userspace
  datapath, OpenFlow 1.3, fail mode secure, a remote controller on 127.0.0.1.
  "p4": BMv2 simple_switch_grpc switches (mininet/bmv2.py) running
  p4src/mcast.p4, which the controller installs and programs over P4Runtime;
  switch n listens on 127.0.0.1:base_port+n with device id n+1, as the
  config's `southbound.p4runtime` defaults say (`switch_backends`). Host
  interfaces have TX checksum offload off (both datapaths would forward UDP with
  bad checksums, which the receiving kernel drops). ARP is answered by the
  controller (proxy ARP, which also teaches it where each host is);
  `static_arp=True` fills the hosts' ARP tables instead, for comparison.
- `trace` follows a packet through what is actually installed: the flows and
  groups read from Open vSwitch with ovs-ofctl (`SwitchTables`), or the P4
  entries read from BMv2 over P4Runtime (a read-only client, `P4Reader`) through
  the model of mcast.p4 (`p4runtime.tracer.p4_trace`): which hosts get a job's stream,
  and how. `usage` and `unicast_routes` read the switches the same way.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

PLANNER_SHARE = 0.9
# the port emu_broadcast.ApiRelay listens on inside every host (it forwards to the
# API's own port): the API must answer the Host header 127.0.0.1:RELAY_PORT too
RELAY_PORT = 8080
BACKENDS = ("ovs", "p4")
# The BMv2 switches run at this niceness, ahead of the hosts' senders and receivers,
# the controller and the tests. A real switch forwards in its own silicon whatever
# the controller does; here 20 simple_switch_grpc processes share 2 cores with the
# rest and need most of them at the demo's rates, and a controller starting up
# (seconds of one core) or a busy test runner took their CPU: the workers lost
# datagrams that the network, as planned, would have delivered.
SWITCH_NICE = -10
# a fast-failover backup flow's cookie: the controller's owner tag "MC" (0x4d43), then
# the kind 6 (`backup`, controller/southbound/openflow/entries.py)
BACKUP_COOKIE = "cookie=0x4d4306"
P4_BASE_PORT = 50051  # gRPC port of switch 0; the controller config's default


def write_config(
    path: str | Path,
    *,
    fattree_k: int | None = 4,
    leaf_spine: tuple[int, int, int] | None = None,
    bw_mbit: float = 20.0,
    group_capacity: int | str = "unlimited",
    switch_group_capacity: dict[str, int] | None = None,
    store: str | Path = "jobs.sqlite",
    api_port: int = 0,
    planner: dict[str, Any] | None = None,
    backend: str = "ovs",
    p4_base_port: int = P4_BASE_PORT,
    lldp_interval_s: float = 1.0,
    lldp_timeout_s: float = 3.0,
    store_section: dict[str, Any] | None = None,
    tls: Any = None,
    links: list[dict[str, Any]] | None = None,
    openflow: dict[str, Any] | None = None,
    p4runtime: dict[str, Any] | None = None,
    southbound: dict[str, Any] | None = None,
) -> Path:
    """Write a controller config for an emulated fabric; returns its path.

    `leaf_spine` = (leaves, spines, hosts_per_leaf) replaces the fat-tree.
    `switch_group_capacity` gives single switches (topology names) their own budget.
    `store_section` replaces the store section (HA: an etcd store, docs/ha.md).
    `tls` (an `emu_tls.Pki`) puts the backend's southbound on TLS (docs/security.md).
    `links` ({"a", "b", "capacity"} each, bit/s as the planner counts them) become
    `topology.links`: those links get their own capacity, in the config and so in
    Mininet (`Fabric`: capacity / PLANNER_SHARE), e.g. an oversubscribed fabric.
    `openflow` adds keys to `southbound.openflow` (e.g. {"fast_failover": True}),
    `p4runtime` to `southbound.p4runtime` (backend "p4"), `southbound` to
    `southbound` (e.g. {"planned_dscp": 46}, the planned class).
    `backend` "p4" puts every switch on P4Runtime (switch n at 127.0.0.1:p4_base_port+n,
    device id n+1; LLDP every `lldp_interval_s`, a link unseen for `lldp_timeout_s` is down).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    capacity = bw_mbit * 1e6 * PLANNER_SHARE
    if leaf_spine is not None:
        leaves, spines, hosts = leaf_spine
        topo: dict[str, Any] = {"leaf_spine": {"leaves": leaves, "spines": spines, "hosts_per_leaf": hosts, "capacity": capacity}}
    else:
        topo = {"fattree": {"k": int(fattree_k), "capacity": capacity}}
    topo["group_capacity"] = group_capacity
    if switch_group_capacity:
        topo["switches"] = {name: {"group_capacity": g} for name, g in switch_group_capacity.items()}
    if links:
        topo["links"] = [dict(link) for link in links]
    config = {
        # the session is the API's only client: a run of many jobs is not held to api.limits.rate
        "api": {"host": "127.0.0.1", "port": api_port, "limits": {"rate": "6000/minute"},
                "allowed_hosts": ["localhost", "127.0.0.1", f"127.0.0.1:{RELAY_PORT}"]},
        "store": store_section if store_section is not None else {"path": str(store)},
        "planner": dict({"debounce_s": 0.05, "max_delay_s": 0.3, "wait_s": 20}, **(planner or {})),
        "topology": topo,
    }
    if backend == "p4":
        config["southbound"] = {
            "backend": "p4runtime",
            "p4runtime": {"host": "127.0.0.1", "base_port": p4_base_port, "lldp_timeout_s": lldp_timeout_s},
            "lldp": {"interval_s": lldp_interval_s},
        }
    if openflow:
        config.setdefault("southbound", {}).setdefault("openflow", {}).update(openflow)
    if p4runtime:
        config.setdefault("southbound", {}).setdefault("p4runtime", {}).update(p4runtime)
    if southbound:
        config.setdefault("southbound", {}).update(southbound)
    if tls is not None:
        files = {"cert": str(tls.controller_cert), "key": str(tls.controller_key), "ca": str(tls.ca)}
        section = "p4runtime" if backend == "p4" else "openflow"
        southbound = config.setdefault("southbound", {})
        southbound.setdefault(section, {})["tls"] = files
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(config, indent=2) + "\n")
    return p


def learned_config(fabric_config: str | Path, path: str | Path) -> Path:
    """The controller config of a learned network (no `topology`) for the fabric
    `fabric_config` describes (`write_config`): what a user who declares nothing of
    the network but its switches writes. Names are the fabric's, so REST answers
    and traces agree with `Fabric`: every switch is listed under `southbound.switches`
    with its datapath id (Open vSwitch) or its P4Runtime address, device id and ports;
    every host under `hosts` with its address only (a name for an address: no MAC,
    no place, so hosts are located and their MACs learned from the wire, and a
    claim to move one is confirmed first, `core.host_moves`); switches are admitted only if listed (`southbound.admit: declared`, the
    default when switches are listed). Link capacities and group budgets are the
    fabric's (`discovery`). Returns `path`."""
    from controller.config import build_topology, host_table, load_config, switch_backends
    from controller.addressing.ports import default_port_map

    declared = json.loads(Path(fabric_config).read_text())
    config = load_config(Path(fabric_config))
    topo = build_topology(config)
    addresses = host_table(config, topo)
    ports = default_port_map(topo)
    backends = switch_backends(config, topo)
    switches: dict[str, dict[str, Any]] = {}
    for i, v in enumerate(topo.switches):
        name = topo.name(v)
        b = backends[name]
        if b.backend == "p4runtime":
            switches[name] = {"address": b.address, "device_id": b.device_id,
                              "ports": sorted(p for (s, _), p in ports.items() if s == v)}
        else:
            switches[name] = {"dpid": i + 1}
    capacity = min(link.capacity for link in topo.links)
    groups = declared["topology"].get("group_capacity", "unlimited")
    southbound = dict(declared.get("southbound", {}), switches=switches)
    out = {
        "api": declared["api"], "store": declared["store"], "planner": declared["planner"],
        "discovery": {"link_capacity": capacity, "group_capacity": groups, "probe_interval_s": 1.0},
        "hosts": {topo.name(h): {"ip": addresses[topo.name(h)].ip} for h in topo.hosts},
        "southbound": southbound,
    }
    p = Path(path)
    p.write_text(json.dumps(out, indent=2) + "\n")
    return p


@dataclass(frozen=True)
class HostInfo:
    name: str  # topology name
    mn: str  # Mininet name
    ip: str
    mac: str


class Fabric:
    """The Mininet network of a controller config (see the module docstring)."""

    def __init__(self, config_path: str | Path, of_port: int, *, static_arp: bool = False,
                 backend: str = "ovs", log_dir: str | Path | None = None,
                 lossy: dict[tuple[str, str], float] | None = None, extra_of_ports: tuple[int, ...] = (),
                 switch_tls: tuple[Path, Path, Path] | None = None,
                 switch_sockets: Callable[[], AbstractContextManager] = contextlib.nullcontext) -> None:
        from controller.config import build_topology, host_table, load_config, switch_backends
        from controller.addressing.ports import default_port_map

        self.config_path = Path(config_path)
        self.config = load_config(self.config_path)
        self.topology = build_topology(self.config)
        self.addresses = host_table(self.config, self.topology)
        self.ports = default_port_map(self.topology)
        self.of_port = of_port
        self.extra_of_ports = tuple(extra_of_ports)  # HA: every switch connects to every instance
        # TLS (cert, key, ca) of the switches: BMv2 serves P4Runtime with it; Open vSwitch's is the
        # daemon's `set-ssl` (the caller's), and its controller targets are then ssl:
        self.switch_tls = switch_tls
        self.static_arp = static_arp
        t = self.topology
        self.names: dict[str, str] = {}
        for i, v in enumerate(t.switches):
            self.names[t.name(v)] = f"s{i + 1}"
        for i, h in enumerate(t.hosts):
            self.names[t.name(h)] = f"h{i + 1}"
        self.topo_name = {mn: name for name, mn in self.names.items()}
        self.hosts = {
            t.name(h): HostInfo(t.name(h), self.names[t.name(h)], self.addresses[t.name(h)].ip, self.addresses[t.name(h)].mac)
            for h in t.hosts
        }
        self.by_ip = {h.ip: h.name for h in self.hosts.values()}
        # (switch name, port) -> neighbour name, for tracing
        self.neighbour = {(t.name(s), p): t.name(n) for (s, n), p in self.ports.items()}
        self.port_to = {(t.name(s), t.name(n)): p for (s, n), p in self.ports.items()}
        self.down_ports: set[tuple[str, int]] = set()  # (switch, port) of the links `link_status` took down
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.backend = backend
        self.log_dir = Path(log_dir) if log_dir is not None else self.config_path.parent / "bmv2"
        # P4: switch name -> (P4Runtime address, device id), from the config as the controller reads it
        self.p4_address: dict[str, tuple[str, int]] = {}
        if backend == "p4":
            for name, b in switch_backends(self.config, t).items():
                if b.backend != "p4runtime":
                    raise ValueError(f"{config_path}: switch {name} is not on P4Runtime")
                self.p4_address[name] = (b.address, b.device_id)
        self._readers: dict = {}
        self.net = None
        # links with random loss (topology names -> percent): a–relay–b, the relay running
        # lossy_link.py (this kernel has no netem for TCLink's loss=)
        self.lossy = {frozenset(k): float(v) for k, v in (lossy or {}).items()}
        self.relays: dict[frozenset, tuple[str, Any]] = {}  # link -> (relay's Mininet name, process)
        # held while switches start or restart, when they open their ports' sockets
        # (the emulation's `emu_sockbuf.SendBuffer.raised`: why, there)
        self.switch_sockets = switch_sockets

    # -- Mininet ------------------------------------------------------------------------------
    def start(self) -> None:
        """Build and start the Mininet network (for "ovs", Open vSwitch must be
        running and activated, see ovs_daemon; for "p4", simple_switch_grpc must be
        on PATH)."""
        with self.switch_sockets():
            self._start()

    def _start(self) -> None:
        from mininet.link import TCLink
        from mininet.net import Mininet
        from mininet.node import OVSSwitch, RemoteController

        t = self.topology
        if self.backend == "p4":
            from bmv2 import BMv2Switch, fabric_ports  # mininet/bmv2.py (this folder is on sys.path)

            switch: Any = BMv2Switch
            self.log_dir.mkdir(parents=True, exist_ok=True)
            # the config's addresses are what bmv2.fabric_ports gives for its base port
            names = [t.name(v) for v in t.switches]
            base = self.config.southbound.p4runtime.base_port
            expected = {n: (f"127.0.0.1:{port}", dev) for n, (port, dev) in fabric_ports(names, base).items()}
            if expected != self.p4_address:
                raise ValueError(f"{self.config_path}: P4Runtime addresses {self.p4_address} are not "
                                 f"bmv2.fabric_ports' {expected}")
        else:
            switch = partial(OVSSwitch, datapath="user", protocols="OpenFlow13", failMode="secure", reconnectms=1000)
        net = Mininet(topo=None, switch=switch, link=TCLink, controller=None, build=False,
                      autoSetMacs=False, autoStaticArp=False, waitConnected=False)
        self.net = net
        if self.backend == "ovs":
            class Remote(RemoteController):
                def checkListening(self) -> None:
                    """Not Mininet's telnet probe of the port: the controller process said it
                    listens (emu_controller), and over TLS the probe is a handshake the
                    controller refuses, counts and logs (`switch_tls`) at every start."""

            protocol = "ssl" if self.switch_tls is not None else "tcp"
            net.addController("c0", controller=Remote, ip="127.0.0.1", port=self.of_port, protocol=protocol)
            for n, port in enumerate(self.extra_of_ports, 1):
                net.addController(f"c{n}", controller=Remote, ip="127.0.0.1", port=port, protocol=protocol)
        for i, v in enumerate(t.switches):
            name = t.name(v)
            if self.backend == "p4":
                address, device_id = self.p4_address[name]
                host, port = address.rsplit(":", 1)
                if host not in ("127.0.0.1", "localhost"):
                    raise ValueError(f"{name}: a BMv2 switch of the emulation listens on 127.0.0.1, not {address}")
                net.addSwitch(self.names[name], dpid=f"{i + 1:016x}", grpc_port=int(port), device_id=device_id,
                              log_dir=str(self.log_dir), tls=self.switch_tls, nice=SWITCH_NICE)
            else:
                net.addSwitch(self.names[name], dpid=f"{i + 1:016x}")
        for h in self.hosts.values():
            net.addHost(h.mn, ip=f"{h.ip}/8", mac=h.mac)
        for link in t.links:
            a, b = t.index[link.a], t.index[link.b]
            opts: dict[str, Any] = {"bw": link.capacity / PLANNER_SHARE / 1e6}
            if t.is_switch(a):
                opts["port1"] = self.ports[(a, b)]
            if t.is_switch(b):
                opts["port2"] = self.ports[(b, a)]
            key = frozenset((link.a, link.b))
            if key in self.lossy:
                relay = f"x{len(self.relays) + 1}"
                net.addHost(relay, ip=None)
                bw = opts["bw"]
                net.addLink(self.names[link.a], relay, bw=bw, **({"port1": opts["port1"]} if "port1" in opts else {}))
                net.addLink(relay, self.names[link.b], bw=bw, **({"port2": opts["port2"]} if "port2" in opts else {}))
                self.relays[key] = (relay, None)
                continue
            net.addLink(self.names[link.a], self.names[link.b], **opts)
        net.build()
        net.start()
        relays = [(key, mn) for key, (mn, _) in self.relays.items()]
        for mn in [h.mn for h in self.hosts.values()] + [mn for _, mn in relays]:
            node = net.get(mn)
            for intf in node.intfList():
                if intf.name != "lo":
                    node.cmd(f"ethtool -K {intf.name} tx off")
            # no IPv6 chatter (router solicitations) in the counters and traces
            node.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
        for key, mn in relays:
            node = net.get(mn)
            a, b = (i.name for i in node.intfList() if i.name != "lo")
            out = self.config_path.parent / f"lossy-{mn}.json"
            proc = node.popen([sys.executable, str(Path(__file__).resolve().parent / "lossy_link.py"), "--a", a,
                               "--b", b, "--loss", str(self.lossy[key]), "--out", str(out)],
                              stdout=subprocess.PIPE, text=True)
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the lossy link relay {mn} did not start")
            self.relays[key] = (mn, proc)
        if self.static_arp:
            net.staticArp()

    def relay_stats(self) -> dict[str, dict]:
        """What each lossy link's relay forwarded and dropped so far ("a–b" ->
        stats), from the file each relay rewrites every second."""
        out = {}
        for key, (mn, _) in self.relays.items():
            path = self.config_path.parent / f"lossy-{mn}.json"
            if path.exists():
                out["–".join(sorted(key))] = json.loads(path.read_text())
        return out

    def stop(self) -> None:
        for key, (mn, proc) in list(self.relays.items()):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
            self.relays[key] = (mn, None)
        for r in self._readers.values():
            r.close()
        self._readers.clear()
        if self.net is not None:
            net, self.net = self.net, None
            net.stop()

    def host(self, name: str):
        """The Mininet host of a topology host name."""
        return self.net.get(self.names[name])

    def switch_pids(self) -> dict[str, int]:
        """Mininet's shells (hosts and switches) by Mininet name, to record for a crash clean-up."""
        return {n.name: n.pid for n in self.net.hosts + self.net.switches}

    def link_status(self, a: str, b: str, status: str) -> None:
        """`link a b up|down` of Mininet's CLI, with topology names."""
        self.net.configLinkStatus(self.names[a], self.names[b], status)
        ends = {(s, self.port_to[(s, o)]) for s, o in ((a, b), (b, a)) if (s, o) in self.port_to}  # switch ends
        if status == "down":
            self.down_ports |= ends
        else:
            self.down_ports -= ends

    def port_status(self, switch: str, neighbour: str, status: str) -> None:
        """Take one end of the link switch - neighbour down or up (its interface on
        `switch`): the far end loses its carrier, so the link is down both ways,
        but only `switch` has a port administratively down (with this BMv2, a
        switch with a port down reads no packet on any port: tests/test_emulation_bmv2.py)."""
        node = self.net.get(self.names[switch])
        (mine, theirs), = node.connectionsTo(self.net.get(self.names[neighbour]))
        mine.ifconfig(status)
        ends = {(s, self.port_to[(s, o)]) for s, o in ((switch, neighbour), (neighbour, switch)) if (s, o) in self.port_to}
        if status == "down":
            self.down_ports |= ends
        else:
            self.down_ports -= ends

    def restart_switch(self, name: str) -> None:
        """Restart a switch with empty tables. Open vSwitch: delete its bridge
        (tables and connection go with it), then create it again from scratch with
        the same ports and controller. BMv2: SIGKILL its simple_switch_grpc and
        start a new one on the same ports (no pipeline, no entries)."""
        sw = self.net.get(self.names[name])
        with self.switch_sockets():
            if self.backend == "p4":
                sw.restart()
                return
            sw.cmd("ovs-vsctl", "del-br", sw.name)  # waits until ovs-vswitchd has removed it
            sw.start(self.net.controllers)

    # -- reading switches ----------------------------------------------------------------------
    def ofctl(self, command: str, switch: str, *args: str) -> str:
        """ovs-ofctl -O OpenFlow13 COMMAND on a switch (topology name)."""
        r = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", command, self.names[switch], *args],
                           check=False, capture_output=True, text=True, timeout=15)
        if r.returncode != 0:
            raise RuntimeError(f"ovs-ofctl {command} {self.names[switch]}: {r.stderr.strip()}")
        return r.stdout

    def tables(self, switch: str) -> SwitchTables:
        t = SwitchTables.parse(self.ofctl("dump-flows", switch), self.ofctl("dump-groups", switch),
                               self.ofctl("dump-meters", switch))
        t.down = {p for s, p in self.down_ports if s == switch}  # what its fast-failover groups watch
        return t

    def p4_state(self, switch: str):
        """What BMv2 switch `switch` (topology name) holds, read over P4Runtime
        (`p4runtime.state.P4SwitchState`); RuntimeError if it does not answer."""
        from controller.southbound.p4runtime.connection import tls_credentials
        from controller.southbound.p4runtime.reader import P4Reader

        if switch not in self._readers:
            address, device_id = self.p4_address[switch]
            credentials = tls_credentials(self.config.southbound.p4runtime.tls)  # the controller's certificate
            self._readers[switch] = P4Reader(address, device_id, credentials=credentials)
        state, _notes = self._readers[switch].read_state(timeout=5.0)
        return state

    def read(self, switch: str):
        """What the switch holds: `SwitchTables` (ovs) or a `P4SwitchState` (p4)."""
        return self.p4_state(switch) if self.backend == "p4" else self.tables(switch)

    def usage(self, switch: str, state=None) -> dict[str, int]:
        """Per switch, read from it: groups, multicast entries (flows of priority
        2000 / entries of the multicast table), meters (OpenFlow only; the P4
        program has none) and replica rewrites (P4 only). On OpenFlow, groups and
        multicast entries include fast failover's, also counted apart:
        `ff_groups` (type FF) and `backup_flows` (cookie kind `backup`)."""
        state = self.read(switch) if state is None else state
        if self.backend == "p4":
            from controller.southbound.p4runtime import entities as ps

            return {"groups_used": len(state.groups), "multicast_flows": len(state.in_table(ps.MCAST_TABLE)),
                    "meters": 0, "rewrites": len(state.in_table(ps.REWRITE_TABLE)), "ff_groups": 0, "backup_flows": 0}
        return {"groups_used": len(state.groups), "multicast_flows": len(state.multicast_flows()),
                "meters": len(state.meters), "rewrites": 0, "ff_groups": len(state.watch),
                "backup_flows": sum(1 for ln in state.multicast_flows() if ln.startswith(BACKUP_COOKIE))}

    def unicast_routes(self, switch: str) -> int:
        """How many unicast routes the switch holds (OpenFlow: priority-1000 IPv4
        flows; P4: entries of the LPM table)."""
        if self.backend == "p4":
            from controller.southbound.p4runtime import entities as ps

            return len(self.p4_state(switch).in_table(ps.LPM_TABLE))
        return self.ofctl("dump-flows", switch).count("priority=1000,ip,")

    def trace(self, ps: str, dst_ip: str, tables: dict | None = None) -> Counter:
        """Follow one datagram from host `ps` to `dst_ip` through the installed
        flows and groups (or P4 entries). Returns a Counter of (host, "multicast" |
        "unicast" | "stray") deliveries: "unicast" when the copy reaches the host
        whose address it carries, "stray" when a host gets a copy addressed to
        another unicast address. `tables` caches what was read."""
        tables = {} if tables is None else tables
        if self.backend == "p4":
            return self._p4_trace(ps, dst_ip, tables)
        t = self.topology
        edge = t.name(next(iter(t.neighbors[t.index[ps]])))
        todo = [(edge, self.port_to[(edge, ps)], dst_ip)]
        out: Counter = Counter()
        steps = 0
        while todo:
            steps += 1
            if steps > 10_000:
                raise RuntimeError(f"trace from {ps} to {dst_ip} does not end (a forwarding loop?)")
            sw, in_port, ip = todo.pop()
            if sw not in tables:
                tables[sw] = self.tables(sw)
            for port, new_ip in tables[sw].forward(in_port, ip):
                nb = self.neighbour.get((sw, port))
                if nb is None:
                    raise RuntimeError(f"{sw}: output to port {port}, which has no link")
                if nb in self.hosts:
                    if new_ip == self.hosts[nb].ip:
                        out[(nb, "unicast")] += 1
                    elif ipaddress.IPv4Address(new_ip).is_multicast:
                        out[(nb, "multicast")] += 1
                    else:
                        out[(nb, "stray")] += 1
                else:
                    todo.append((nb, self.port_to[(nb, sw)], new_ip))
        return out

    def _p4_trace(self, ps: str, dst_ip: str, states: dict) -> Counter:
        from controller.southbound.p4runtime import entities as p4s
        from controller.addressing.groups import group_mac
        from controller.southbound.p4runtime.tracer import Pkt, p4_trace

        t = self.topology
        for v in t.switches:  # p4_trace may visit any switch: read them all (once per call)
            name = t.name(v)
            if name not in states:
                states[name] = self.p4_state(name)
        addr = ipaddress.IPv4Address(dst_ip)
        mac = group_mac(dst_ip) if addr.is_multicast else self.hosts[self.by_ip[dst_ip]].mac
        deliveries, _drops = p4_trace(states, t, self.ports, ps, Pkt(p4s.ip_int(dst_ip), p4s.mac_int(mac)),
                                      frozenset(self.down_ports))
        out: Counter = Counter()
        for host, dst, _eth in deliveries:
            ip = str(ipaddress.IPv4Address(dst))
            if ip == self.hosts[host].ip:
                out[(host, "unicast")] += 1
            elif ipaddress.IPv4Address(dst).is_multicast:
                out[(host, "multicast")] += 1
            else:
                out[(host, "stray")] += 1
        return out


_FIELD = re.compile(r"([a-z_]+)=([^,\s]+)")


@dataclass
class SwitchTables:
    """The OpenFlow tables of one switch as ovs-ofctl prints them (what `trace` needs)."""

    flows: list[tuple[int, dict[str, str], list[str]]]  # priority, match, actions
    groups: dict[int, list[list[str]]]  # group id -> buckets' actions
    meters: list[str]
    flow_lines: list[str]
    # group id -> the watch port of each bucket (fast-failover groups only), and the ports that are down
    watch: dict[int, list[int]] = field(default_factory=dict)
    down: set[int] = field(default_factory=set)

    @staticmethod
    def _actions(text: str) -> list[str]:
        # split on commas outside of brackets / parentheses
        out, depth, cur = [], 0, ""
        for ch in text:
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            if ch == "," and depth == 0:
                out.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            out.append(cur)
        return [a.strip() for a in out if a.strip()]

    @classmethod
    def parse(cls, flows_text: str, groups_text: str, meters_text: str) -> SwitchTables:
        flows = []
        lines = []
        for line in flows_text.splitlines():
            line = line.strip()
            if "actions=" not in line or line.startswith("OFPST"):
                continue
            lines.append(line)
            head, actions = line.split("actions=", 1)
            match = dict(_FIELD.findall(head))
            for word in head.replace(",", " ").split():
                if "=" not in word:
                    match[word] = ""  # ip, arp, ...
            flows.append((int(match.get("priority", "32768")), match, cls._actions(actions)))
        flows.sort(key=lambda f: -f[0])
        groups: dict[int, list[list[str]]] = {}
        watch: dict[int, list[int]] = {}
        for line in groups_text.splitlines():
            line = line.strip()
            m = re.match(r"group_id=(\d+),", line)
            if not m:
                continue
            buckets = []
            ports = []
            for part in line.split("bucket=")[1:]:
                acts = part.split("actions=", 1)[1] if "actions=" in part else ""
                buckets.append(cls._actions(acts.rstrip(",")))
                w = re.search(r"watch_port:(\d+)", part)
                ports.append(int(w.group(1)) if w else 0)
            groups[int(m.group(1))] = buckets
            if re.search(r"type=(ff|fast_failover),", line):
                watch[int(m.group(1))] = ports
        # the jobs' meters; the controller's packet-in meter (meter=controller) is not one
        meters = [ln.strip() for ln in meters_text.splitlines()
                  if ln.strip().startswith("meter=") and not ln.strip().startswith("meter=controller")]
        return cls(flows, groups, meters, lines, watch)

    def multicast_flows(self, priority: int = 2000) -> list[str]:
        return [ln for ln in self.flow_lines if f"priority={priority}," in ln]

    def forward(self, in_port: int, ip: str) -> list[tuple[int, str]]:
        """(output port, destination IP after rewrites) of an IPv4 datagram to `ip`
        arriving on `in_port`: the highest-priority matching flow of the forwarding
        table (none: dropped). The source table before it sends every IPv4
        datagram on to the forwarding table unchanged (at most with a copy to the
        controller), so the trace starts there."""
        from controller.southbound.openflow.entries import TABLE_FORWARD

        for _prio, match, actions in self.flows:
            if int(match.get("table", "0")) != TABLE_FORWARD:
                continue
            if "ip" not in match and match.get("dl_type") != "0x0800":
                continue
            if "in_port" in match and int(match["in_port"]) != in_port:
                continue
            if "nw_dst" in match and match["nw_dst"] != ip:
                continue
            return self._apply(actions, in_port, ip)
        return []

    def _apply(self, actions: list[str], in_port: int, ip: str) -> list[tuple[int, str]]:
        out = []
        for a in actions:
            if a.startswith("set_field:") and a.endswith("->ip_dst"):
                ip = a[len("set_field:"):-len("->ip_dst")]
            elif a.startswith("mod_nw_dst:"):
                ip = a[len("mod_nw_dst:"):]
            elif a.startswith("output:"):
                out.append((int(a[len("output:"):]), ip))
            elif a.isdigit():
                out.append((int(a), ip))
            elif a in ("IN_PORT", "in_port", "output:IN_PORT"):
                out.append((in_port, ip))
            elif a.startswith("group:"):
                gid = int(a[len("group:"):])
                buckets = self.groups.get(gid, [])
                if gid in self.watch:  # fast failover: the first bucket whose watched port is live
                    buckets = [b for b, w in zip(buckets, self.watch[gid]) if w not in self.down][:1]
                for bucket in buckets:
                    out.extend(self._apply(bucket, in_port, ip))
            # meter:N, set_field eth_dst: no effect on where it goes
        return out
