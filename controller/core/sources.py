"""Where every node and link of the planned topology comes from (GET /topology?sources=true).

A node comes from the config (a declared topology), from its backend's
connection (a discovered switch) or from its packets (a discovered host); a
link from the config, LLDP or a host's packets; each switch end's port from the
wire or the default port map; each budget and capacity from the config, the
switch, the P4 program or a table-full error. Read from `Wiring`, `Devices`
and `Links` at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.core.devices import Devices
from controller.core.links import Links
from controller.core.wiring import Wiring


@dataclass(frozen=True)
class NodeSource:
    """Where a node of the planned topology comes from: `source` is "config" (a
    declared topology), "openflow" / "p4runtime" (a discovered switch, from its
    connection) or "arp_ipv4" (a discovered host, from its packets); for a switch,
    where its effective budgets come from ("config", "switch", "p4info",
    "table_full"; None: unlimited)."""

    id: str
    source: str
    group_capacity_source: str | None = None
    entry_capacity_source: str | None = None


@dataclass(frozen=True)
class LinkSource:
    """Where a link of the planned topology comes from: `source` is "config",
    "lldp" (a discovered switch-to-switch link) or "arp_ipv4" (a discovered host's
    link); each switch end's port and where it comes from ("lldp", "arp_ipv4", or
    "default": the declared topology's default port map, not confirmed by the
    wire; a host end has none); the capacity's source ("config" or "port")."""

    a: str
    b: str
    source: str
    a_port: int | None
    a_port_source: str | None
    b_port: int | None
    b_port_source: str | None
    capacity_source: str


def fact_sources(wiring: Wiring, devices: Devices, links: Links) -> tuple[list[NodeSource], list[LinkSource]]:
    """Where every node and link of the planned topology comes from."""
    discovers = wiring.discovers
    with wiring._lock:  # one consistent view of the core's parts
        topo = wiring.topology
        ports, seen = wiring.ports_snapshot()
        budgets = devices.budget_state()
    nodes = []
    for node in topo.nodes:
        if node.kind == "host":
            nodes.append(NodeSource(node.id, "arp_ipv4" if discovers else "config"))
            continue
        (_, g_src), (_, f_src) = Devices.budgets(node, budgets)
        source = devices.backend(node.id) if discovers else "config"
        nodes.append(NodeSource(node.id, source, g_src, f_src))
    out = []
    for link in topo.links:
        a, b = topo.index[link.a], topo.index[link.b]
        host_link = not (topo.is_switch(a) and topo.is_switch(b))
        learned_kind = "arp_ipv4" if host_link else "lldp"
        ends: list = []
        for x, y in ((a, b), (b, a)):
            if not topo.is_switch(x):
                ends += [None, None]
                continue
            ends += [ports.get((x, y)), learned_kind if (x, y) in seen else "default"]
        _, cap_src = links.capacity(link, ports, budgets.reported, topo)
        out.append(LinkSource(link.a, link.b, learned_kind if discovers else "config", *ends, cap_src))
    return nodes, out
