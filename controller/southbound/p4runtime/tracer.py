"""A model of how p4src/mcast.p4 forwards, over P4 switch states (`p4runtime.entities`).

`p4_trace(state, topology, ports, start_host, packet)` sends `packet` from a host
and follows every copy through the entries of the switches it reaches, the way
mcast.p4 processes it (the P4 counterpart of `openflow.tracer`):

- IPv4 to 224.0.0.0/4: the multicast table, exact on (ingress port, group
  address); a miss drops. `set_mcast_group` replicates to the group's replicas:
  a replica with an instance (replica id) is rewritten by the egress rewrite
  table entry of that id and may go back out of its ingress port; a plain
  replica (instance 0) is pruned at the ingress port. `set_egress_port` sends
  one copy on, `unicast_copy` one rewritten copy;
- the source guard first (a packet with a source, `Pkt.src` and `Pkt.eth_src`):
  from a port without a `switch_ports` entry, a packet whose (ingress port,
  source address, source MAC) has no `known_sources` entry goes to the CPU
  alone (`to_cpu`) and is counted in `guard_drops` by (switch, port); a packet
  without a source is not checked (the emulation's traces of the PS's own
  stream, mininet/emu_fabric.py);
- other IPv4: the longest matching prefix of the LPM table, through its action
  profile member (the egress port); a miss drops; never back out of the
  ingress port.

- fast failover (`p4runtime.failover`): `down` names the (switch, port) ends of
  links that are down: nothing goes out of them, and a `multicast_failover`
  entry watching such a port sends the packet to its backup instead (the
  switch has heard nothing there for the timeout: the state after it).

Returns (deliveries, drops): deliveries are (host, ipv4_dst, eth_dst) of every
copy a host receives, drops (switch, why) (the guard's: why "source guard
port N"). `p4_trace_guarded` also returns the guard's drops by (switch, port). A loop or a reference to a missing
group, member or rewrite is a `TraceError`. `state` maps switch names to
`P4SwitchState`s: the translation's desired state (tests) or what was read
back from the switches (the emulation, mininet/emu_fabric.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.southbound.p4runtime import entities as ps


@dataclass(frozen=True)
class Pkt:
    """The headers the program forwards on: IPv4 and Ethernet destination, as integers."""

    dst: int
    eth_dst: int
    src: int | None = None
    eth_src: int | None = None


class TraceError(AssertionError):
    """A forwarding loop, or an entry that refers to something the switch lacks."""


def p4_trace(state, topo, ports, start: str, pkt: Pkt, down: frozenset[tuple[str, int]] = frozenset()):
    """(deliveries: [(host, ipv4_dst, eth_dst)], drops: [(switch, why)]); see the module docstring."""
    deliveries, drops, _ = p4_trace_guarded(state, topo, ports, start, pkt, down)
    return deliveries, drops


def _guarded(st, in_port: int, p: Pkt) -> bool:
    """True if the source guard of a switch in state `st` refuses `p` arriving on `in_port`."""
    if p.src is None or p.eth_src is None:
        return False
    entries = st.entry_table()
    if (ps.SWITCH_PORTS_TABLE, ((ps.F_INGRESS_PORT, ps.Exact(in_port)),)) in entries:
        return False
    key = (ps.KNOWN_SOURCES_TABLE, tuple(sorted(((ps.F_INGRESS_PORT, ps.Exact(in_port)), (ps.F_IPV4_SRC, ps.Exact(p.src)),
                                                 (ps.F_ETH_SRC, ps.Exact(p.eth_src))), key=lambda m: m[0])))
    return key not in entries


def p4_trace_guarded(state, topo, ports, start: str, pkt: Pkt, down: frozenset[tuple[str, int]] = frozenset()):
    """`p4_trace`, and the guard's drops: {(switch, ingress port): packets}."""
    guard: dict[tuple[str, int], int] = {}
    idx = topo.index
    peer = {(sw, p): nb for (sw, nb), p in ports.items()}
    deliveries, drops = [], []
    h = idx[start]
    (first,) = topo.neighbors[h]
    stack = [(first, ports[(first, h)], pkt, frozenset())]
    while stack:
        v, in_port, p, seen = stack.pop()
        here = (v, in_port, p)
        if here in seen:
            raise TraceError(f"loop at {topo.name(v)}")
        seen = seen | {here}
        st = state[topo.name(v)]
        out: list[tuple[int, Pkt, bool]] = []  # (port, packet, may go back out of in_port)
        if _guarded(st, in_port, p):
            drops.append((topo.name(v), f"source guard port {in_port}"))
            guard[(topo.name(v), in_port)] = guard.get((topo.name(v), in_port), 0) + 1
            continue

        if p.dst >> 28 == 0xE:
            hit = st.entry_table().get(
                (ps.MCAST_TABLE, ((ps.F_IPV4_DST, ps.Exact(p.dst)), (ps.F_INGRESS_PORT, ps.Exact(in_port))))
            )
            if hit is None:
                drops.append((topo.name(v), "multicast miss"))
                continue
            a, args = hit.action.name, dict(hit.action.params)
            ff = st.entry_table().get((ps.FAILOVER_TABLE, hit.match))
            if ff is not None and (topo.name(v), dict(ff.action.params)["watch"]) in down:
                backup = dict(ff.action.params)
                a, args = ((ps.SET_MCAST_GROUP, {"group": backup["group"]}) if ff.action.name == ps.FAILOVER_TO_GROUP
                           else (ps.MCAST_EGRESS_PORT, {"port": backup["port"]}))
            if a == ps.SET_MCAST_GROUP:
                group = st.group_table().get(args["group"])
                if group is None:
                    raise TraceError(f"{topo.name(v)}: missing group {args['group']}")
                rewrites = {e.match[0][1].value: e for e in st.in_table(ps.REWRITE_TABLE)}
                for r in group.replicas:
                    if r.instance:
                        e = rewrites.get(r.instance)
                        if e is None:
                            raise TraceError(f"{topo.name(v)}: replica {r} without rewrite")
                        rw = dict(e.action.params)
                        out.append((r.port, Pkt(rw["ipv4_dst"], rw["eth_dst"]), True))
                    else:
                        out.append((r.port, p, False))
            elif a == ps.MCAST_EGRESS_PORT:
                out.append((args["port"], p, False))
            elif a == ps.UNICAST_COPY:
                out.append((args["port"], Pkt(args["ipv4_dst"], args["eth_dst"]), True))
            else:
                drops.append((topo.name(v), "drop action"))
        else:
            best = None
            for e in st.in_table(ps.LPM_TABLE):
                m = e.match[0][1]
                if p.dst >> (32 - m.prefix_len) == m.value >> (32 - m.prefix_len):
                    if best is None or m.prefix_len > best.match[0][1].prefix_len:
                        best = e
            if best is None:
                drops.append((topo.name(v), "no route"))
                continue
            member = st.member_table().get((ps.ECMP_PROFILE, best.member_id))
            if member is None:
                raise TraceError(f"{topo.name(v)}: missing member {best.member_id}")
            out.append((dict(member.action.params)["port"], p, False))
        for port, q, back in out:
            if port == in_port and not back:
                drops.append((topo.name(v), "pruned at the ingress port"))
                continue
            if (topo.name(v), port) in down:
                drops.append((topo.name(v), f"port {port} down"))
                continue
            nb = peer.get((v, port))
            if nb is None:
                raise TraceError(f"{topo.name(v)}: port {port} leads nowhere")
            if topo.is_switch(nb):
                stack.append((nb, ports[(nb, v)], q, seen))
            else:
                deliveries.append((topo.name(nb), q.dst, q.eth_dst))
    return deliveries, drops, guard
