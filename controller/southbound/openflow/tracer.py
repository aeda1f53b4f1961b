"""A packet tracer over switch states, in the spirit of Faucet's `fakeoftable`.

`trace(state, topology, ports, start_host, packet)` sends `packet` from a host and
follows every copy through the flow and group tables of the switches it reaches,
by OpenFlow 1.3 rules restricted to what `openflow.translate` emits:

- processing starts in table 0; in a table, among the flows whose every match
  field equals the packet's (and in_port the port it arrived on) the highest
  priority wins; two matching flows of the same priority are an error (OpenFlow
  leaves the choice undefined); no match drops the copy;
- actions run in order: SetField rewrites the copy, Output sends the copy as it is
  now, GroupAction hands a copy to every bucket of the group (type ALL), or to
  its first bucket whose watched port is live (type "ff", fast failover, also
  inside a bucket of an ALL group; `down` names the ports that are not), Meter
  only checks that the meter exists (rates are not modelled), Drop ends the copy,
  GotoTable (last) continues in a later table; Output to `OFPP_CONTROLLER` is a
  packet-in, recorded in `to_controller`;
- Output to a port in `down` drops the copy (the link is down);
- Output to the port the copy came in on is dropped, as OpenFlow does, unless it
  is `OFPP_IN_PORT`; an output crosses the link to the neighbour: a switch
  processes the copy, a host receives it (a `Delivery`, whatever its addresses:
  the caller decides whether the host should have it).

A copy that arrives at a (switch, in_port) it has already passed through with the
same headers is in a forwarding loop: `LoopError`. A reference to a missing group
or meter, or an output to a port the switch lacks, is a `TraceError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from controller.algorithm.model import Topology

from controller.southbound.openflow.entries import (
    ETH_TYPE_IPV4,
    ETH_TYPE_ARP,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    Drop,
    FlowEntry,
    GotoTable,
    GroupAction,
    Meter,
    Output,
    SetField,
    SwitchState,
)
from controller.addressing.ports import PortMap

MAX_COPIES = 100_000


class TraceError(RuntimeError):
    """The tables are inconsistent: missing group, meter or port, ambiguous match."""


class LoopError(TraceError):
    """A copy came back to where it had been, unchanged."""


@dataclass(frozen=True)
class Packet:
    """The headers the tables look at (strings for addresses). An ARP packet
    (`eth_type` 0x0806) keeps its sender and target protocol addresses in
    `ipv4_src` and `ipv4_dst`; flows see them as `arp_spa` and `arp_tpa`.
    `ip_proto`, `udp_src`, `udp_dst` and `ip_dscp`: the planned class's
    (`openflow.planned`)."""

    ipv4_dst: str
    eth_dst: str
    eth_type: int = ETH_TYPE_IPV4
    ipv4_src: str | None = None
    eth_src: str | None = None
    ip_proto: int | None = None
    udp_src: int | None = None
    udp_dst: int | None = None
    ip_dscp: int = 0


@dataclass(frozen=True)
class Delivery:
    """A copy received by `host`, with its destination headers and the switches it crossed."""

    host: str
    ipv4_dst: str
    eth_dst: str
    hops: tuple[str, ...]
    ip_dscp: int = 0


@dataclass(frozen=True)
class DroppedCopy:
    switch: str
    in_port: int
    packet: Packet
    reason: str


@dataclass(frozen=True)
class PacketIn:
    """A copy sent to the controller by `switch` (it arrived on `in_port`)."""

    switch: str
    in_port: int
    packet: Packet


@dataclass(frozen=True)
class TraceResult:
    deliveries: tuple[Delivery, ...]
    drops: tuple[DroppedCopy, ...]
    to_controller: tuple[PacketIn, ...] = ()


_ARP_FIELDS = {"arp_spa": "ipv4_src", "arp_tpa": "ipv4_dst"}


def _field(packet: Packet, name: str) -> object | None:
    is_arp = packet.eth_type == ETH_TYPE_ARP
    if name in _ARP_FIELDS:
        return getattr(packet, _ARP_FIELDS[name]) if is_arp else None
    if name in ("ipv4_src", "ipv4_dst", "ip_proto", "udp_src", "udp_dst") and is_arp:
        return None  # an ARP packet has no IPv4 header
    return getattr(packet, name)


def _matches(flow: FlowEntry, packet: Packet, in_port: int) -> bool:
    for name, value in flow.match:
        have = in_port if name == "in_port" else _field(packet, name)
        if have != value:
            return False
    return True


class _Tables:
    """Per-switch lookup structures of a state dict, built once per trace."""

    def __init__(self, state: Mapping[str, SwitchState]) -> None:
        self.flows: dict[tuple[str, int], list[FlowEntry]] = {}
        self.groups = {}
        self.meters = {}
        for sw, st in state.items():
            for f in sorted(st.flows, key=lambda f: -f.priority):
                self.flows.setdefault((sw, f.table_id), []).append(f)
            self.groups[sw] = st.group_table()
            self.meters[sw] = st.meter_table()

    def lookup(self, sw: str, table: int, packet: Packet, in_port: int) -> FlowEntry | None:
        best: FlowEntry | None = None
        for f in self.flows.get((sw, table), ()):
            if best is not None and f.priority < best.priority:
                break
            if _matches(f, packet, in_port):
                if best is not None:
                    raise TraceError(f"{sw}: two flows of priority {f.priority} match {packet} on port {in_port}")
                best = f
        return best


def trace_all(
    state: Mapping[str, SwitchState],
    topology: Topology,
    ports: PortMap,
    start_host: str,
    packet: Packet,
    max_copies: int = MAX_COPIES,
    down: frozenset[tuple[str, int]] = frozenset(),
) -> TraceResult:
    """Deliveries and drops of `packet` sent by `start_host` (see the module doc);
    `down`: the (switch, port) pairs whose link is down."""
    idx = topology.index
    if start_host not in idx or topology.is_switch(idx[start_host]):
        raise ValueError(f"{start_host!r} is not a host of the topology")
    h = idx[start_host]
    first = topology.neighbors[h]
    if len(first) != 1:
        raise ValueError(f"host {start_host} has {len(first)} links; the tracer needs exactly one")
    peer: dict[tuple[int, int], int] = {}
    for (sw, nb), port in ports.items():
        peer[(sw, port)] = nb
    tables = _Tables(state)
    deliveries: list[Delivery] = []
    drops: list[DroppedCopy] = []
    packet_ins: list[PacketIn] = []
    # work items: (switch index, in_port, packet, hops, states seen on this copy's way)
    stack = [(first[0], ports[(first[0], h)], packet, (topology.name(first[0]),), frozenset())]
    copies = 0

    while stack:
        v, in_port, pkt, hops, seen = stack.pop()
        copies += 1
        if copies > max_copies:
            raise TraceError(f"more than {max_copies} copies: runaway replication")
        sw = topology.name(v)
        here = (v, in_port, pkt)
        if here in seen:
            raise LoopError(f"loop: {pkt} came back to {sw} port {in_port} via {' > '.join(hops)}")
        seen = seen | {here}

        def process(table: int, p: Packet) -> None:
            flow = tables.lookup(sw, table, p, in_port)
            if flow is None:
                drops.append(DroppedCopy(sw, in_port, p, f"no flow of table {table} matches"))
                return
            p = run(flow.actions, p)
            goto = [a for a in flow.actions if isinstance(a, GotoTable)]
            if goto and p is not None:
                if goto[0].table_id <= table:
                    raise TraceError(f"{sw}: table {table} goes to table {goto[0].table_id}, not a later one")
                process(goto[0].table_id, p)

        def output(port: int, p: Packet) -> None:
            if port == OFPP_CONTROLLER:
                packet_ins.append(PacketIn(sw, in_port, p))
                return
            if port == OFPP_IN_PORT:
                port = in_port
            elif port == in_port:
                drops.append(DroppedCopy(sw, in_port, p, "output to the ingress port"))
                return
            if (sw, port) in down:
                drops.append(DroppedCopy(sw, in_port, p, f"port {port} is down"))
                return
            nb = peer.get((v, port))
            if nb is None:
                raise TraceError(f"{sw}: output to port {port}, which leads nowhere")
            if topology.is_switch(nb):
                stack.append((nb, ports[(nb, v)], p, hops + (topology.name(nb),), seen))
            else:
                deliveries.append(Delivery(topology.name(nb), p.ipv4_dst, p.eth_dst, hops, p.ip_dscp))

        def run(actions, p: Packet, depth: int = 0) -> Packet | None:
            """Apply `actions` to `p`; the packet as rewritten, or None if dropped."""
            for a in actions:
                if isinstance(a, SetField):
                    p = dataclasses.replace(p, **{a.field: a.value})
                elif isinstance(a, Output):
                    output(a.port, p)
                elif isinstance(a, GroupAction):
                    group = tables.groups[sw].get(a.group_id)
                    if group is None:
                        raise TraceError(f"{sw}: flow refers to missing group {a.group_id}")
                    if group.type == "ff" and depth <= 1:  # fast failover: the first live bucket
                        live = [b for b, w in zip(group.buckets, group.watch_ports) if (sw, w) not in down]
                        if live:
                            run(live[0], p, depth + 1)
                        else:
                            drops.append(DroppedCopy(sw, in_port, p, f"group {a.group_id}: no live bucket"))
                        continue
                    if group.type != "all" or depth > 0:
                        raise TraceError(f"{sw}: only groups of type ALL, and fast-failover groups in them, are modelled")
                    for bucket in group.buckets:
                        run(bucket, p, depth + 1)
                elif isinstance(a, Meter):
                    if a.meter_id not in tables.meters[sw]:
                        raise TraceError(f"{sw}: flow refers to missing meter {a.meter_id}")
                elif isinstance(a, Drop):
                    drops.append(DroppedCopy(sw, in_port, p, "drop action"))
                    return None
                elif isinstance(a, GotoTable):
                    if depth > 0:
                        raise TraceError(f"{sw}: a group bucket cannot go to a table")
                else:
                    raise TraceError(f"{sw}: unknown action {a!r}")
            return p

        process(0, pkt)
    return TraceResult(tuple(deliveries), tuple(drops), tuple(packet_ins))


def trace(
    state: Mapping[str, SwitchState],
    topology: Topology,
    ports: PortMap,
    start_host: str,
    packet: Packet,
) -> list[Delivery]:
    """Every copy of `packet` sent by `start_host` that reaches a host."""
    return list(trace_all(state, topology, ports, start_host, packet).deliveries)
