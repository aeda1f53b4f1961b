"""The desired P4 state of every P4Runtime switch for a plan.

The P4 counterpart of `openflow.translate` (docs/architecture.md), for the
program p4src/mcast.p4 (`p4runtime.entities` are its values; reconciling them
is `p4runtime.reconcile`). Everything here is a frozen value and pure (no
protobuf, no sockets): the state of a switch is five sets (table entries,
multicast groups of the packet replication engine, action-profile members, meter
configurations, clone sessions), and reconciling two states is a set difference
ordered make-before-break.
`p4runtime.codec` turns these values into P4Runtime protobufs and back.

Per switch:
- Unicast: one action-profile member per egress port used by a route
  (`ECMP_PROFILE`, member id = the port, action `set_egress_port(port)`), and
  for every host h an `ipv4_lpm` entry `IP(h)/32 -> member` of the port toward
  `UnicastRouting.next_hop(switch, h)`: the routing function the planner counts
  copies with. Routes use members only: the routing picks one path per
  destination, and a selector group would hash flows over paths the plan does
  not count (docs/p4.md).
- Multicast, per job with rate > 0 and per switch v of its tree: a `multicast`
  entry matching (ingress port toward v's tree parent, the job's group address):
  * v replicates (`Structure.groups`): action `set_mcast_group(g)`, g the job's
    group id on v, and multicast group g with one replica per output: a tree
    child is (its port, instance 0); a unicast branch to worker w is (port toward
    next_hop(v, w), instance r) with r the branch's replica id on v, and the
    egress `replica_rewrite` entry `r -> rewrite_to_unicast(IP(w), MAC(w))`;
  * else one tree child: `set_egress_port(port)`; one branch:
    `unicast_copy(port, IP(w), MAC(w))`; nothing: `drop`.
  At the PS's edge switch (`JobLayout.metered`) the entry's direct meter is
  configured to the job's planned rate (`job_meter_config`); elsewhere it stays
  unconfigured (everything passes).
- The source guard, per host h and the port p of a switch it is attached to: a
  `host_ports` entry p -> copy_to_cpu and a `known_sources` entry (p, IP(h),
  MAC(h)) -> known_source (MAC learned, else configured); per port q toward
  another switch a `switch_ports` entry q -> transit. IPv4 from any port that is
  not in `switch_ports` (an edge port, or one not classified yet) and is not a
  known host's (port, address, MAC) goes to the CPU alone (under the packet-in
  meter) and is never forwarded; the program counts it in
  `source_guard_drops[port]` (read by `codec.guard_counter_reads`). Known ARP
  is copied to the CPU by clone session `CPU_CLONE_SESSION` (one replica:
  `CPU_PORT`), which every switch holds. (Issue 22: an unknown source used to be
  forwarded while it was copied to the CPU, and a port that was not a host port
  was not checked.)
- ARP, per host h and its port p: a `known_arp_sources` entry (p, IP(h), MAC(h))
  -> known_source; per switch v and host h it reaches: an `arp_routes` entry
  IP(h) -> set_egress_port(port toward h). A known host's ARP is routed to its
  target and cloned to the CPU; ARP from another switch is routed; any other
  ARP goes to the CPU alone (counted by the guard when its sender is not a
  known host's). So ARP between known hosts works while the
  controller is down (as in the OpenFlow pipeline).
- With `packet_in_pps` > 0, cell 0 of the packet-in meter (`packet_in_meter_config`).

Ids: multicast group ids and replica ids are per switch and per job (per (job,
worker) for replica ids) from `IdAllocation`s kept across plans, exactly like
OpenFlow group ids: stable while a job stays, lowest free first, never reused
within one update (`P4Ids`).

Budgets: the planner keeps within G(v) and F(v); `translate` checks both again,
and also the P4 table sizes (`P4Limits`, read from the P4Info), and raises
ValueError rather than emit a state the switch cannot hold.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controller.addressing.ports import check_port_map
from controller.algorithm.backups import Backup
from controller.algorithm.wire import wire_rate
from controller.core.updates import TranslationInputs
from controller.southbound.ids import IdAllocation, detour_owner, ff_owner
from controller.southbound.layout import host_addressing, host_attachments, job_layouts, meter_burst_bits
from controller.southbound.p4runtime import failover
from controller.southbound.p4runtime.entities import (
    ARP_ROUTES_TABLE,
    COPY_TO_CPU,
    CPU_CLONE_SESSION,
    CPU_PORT,
    ECMP_PROFILE,
    FAILOVER_TABLE,
    FAILOVER_TO_GROUP,
    F_ARP_SPA,
    F_ARP_TPA,
    F_EGRESS_RID,
    F_ETH_SRC,
    F_INGRESS_PORT,
    F_IPV4_DST,
    F_IPV4_SRC,
    HOST_PORTS_TABLE,
    KNOWN_ARP_SOURCES_TABLE,
    KNOWN_SOURCE,
    KNOWN_SOURCES_TABLE,
    LPM_TABLE,
    MAX_GROUP_ID,
    MAX_INSTANCE,
    MCAST_DROP,
    MCAST_EGRESS_PORT,
    MCAST_TABLE,
    PACKET_IN_METER,
    REWRITE_TABLE,
    REWRITE_TO_UNICAST,
    SET_EGRESS_PORT,
    SET_MCAST_GROUP,
    SWITCH_PORTS_TABLE,
    TRANSIT,
    UNICAST_COPY,
    ActionCall,
    CloneSession,
    DirectMeter,
    Exact,
    Lpm,
    Meter,
    MeterConfig,
    MulticastGroup,
    P4SwitchState,
    ProfileMember,
    Replica,
    TableEntry,
    ip_int,
    mac_int,
)

# -- ids and limits -----------------------------------------------------------------------------
@dataclass(frozen=True)
class P4Ids:
    """Multicast group ids (per switch, per job) and replica ids (per switch, per
    `branch_key(job, worker)`), kept across plans."""

    groups: IdAllocation = field(default_factory=lambda: IdAllocation(MAX_GROUP_ID))
    replicas: IdAllocation = field(default_factory=lambda: IdAllocation(MAX_INSTANCE))


def branch_key(job: str, worker: str) -> str:
    return f"{job}\x1f{worker}"  # \x1f never occurs in a job id or a host name


@dataclass(frozen=True)
class P4Limits:
    """Table sizes of the program (from the P4Info); None: not checked."""

    multicast_entries: int | None = None
    routes: int | None = None
    rewrites: int | None = None
    members: int | None = None
    host_ports: int | None = None
    known_sources: int | None = None
    known_arp_sources: int | None = None
    arp_routes: int | None = None
    switch_ports: int | None = None
    failover: int | None = None  # the fast-failover table (None: not checked, or no such table)


@dataclass(frozen=True)
class P4Translation:
    state: dict[str, P4SwitchState]
    ids: P4Ids
    # switch -> keys of its backup `multicast` entries (idle while the primaries live: `failover.failovers_at`)
    idle: dict[str, frozenset[tuple]] = field(default_factory=dict)


def job_meter_config(rate_bps: float) -> MeterConfig:
    """The job meter of a job planned at `rate_bps` (payload): its frames' rate,
    `wire.wire_rate(rate_bps)` (bit/s of Ethernet frames, as OpenFlow meters
    count), in bytes/s rounded down (at least 1), so the meter never lets a job's
    frames exceed it; its burst is `layout.meter_burst_bits` (as OpenFlow's), in bytes."""
    rate = max(1, int(wire_rate(rate_bps) // 8))
    burst = math.ceil(meter_burst_bits(rate * 8) / 8)
    return MeterConfig(rate, burst, rate, burst)


def packet_in_meter_config(pps: int) -> MeterConfig:
    """The packet-in meter: at most `pps` packets/s to the CPU port (bursts of a
    tenth of a second, at least 10 packets), as OpenFlow's OFPM_CONTROLLER."""
    if pps < 1:
        raise ValueError(f"packet-in rate must be at least 1 packet/s, got {pps}")
    burst = max(10, pps // 10)
    return MeterConfig(pps, burst, pps, burst)


# -- translation --------------------------------------------------------------------------------
def translate(
    inputs: TranslationInputs,
    ids: P4Ids | None = None,
    limits: P4Limits = P4Limits(),
    switches: Iterable[str] | None = None,
    packet_in_pps: int = 0,
    cpu_port: int = CPU_PORT,
    backups: tuple[Backup, ...] = (),
    failover_timeout_us: int = 0,
) -> P4Translation:
    """The desired P4 state of the switches `switches` (None: every switch of the
    planning network) for the plan of `inputs`, and the updated ids. Inputs as
    `openflow.translate.translate`;
    `packet_in_pps` > 0 configures every switch's packet-in meter (0: no cap);
    `cpu_port` is the program's CPU port, the clone session's replica (BMv2's
    255 by default; `p4runtime.programs`). `backups` (`algorithm.backups`) add
    their fast-failover entities (`p4runtime.failover`), judging a watched port
    down after `failover_timeout_us` of silence.
    Raises ValueError for missing or inconsistent inputs and for a switch that
    would need more groups, multicast entries or table entries than it holds."""
    net, plan, ports, group_addresses = inputs.network, inputs.plan, inputs.ports, inputs.group_addresses
    topo = net.topo
    routing = net.routing
    check_port_map(topo, ports)
    wanted = set(topo.name(v) for v in topo.switches) if switches is None else set(switches)
    unknown = sorted(wanted - {topo.name(v) for v in topo.switches})
    if unknown:
        raise ValueError(f"not switches of the topology: {', '.join(unknown)}")
    ip_text, mac_text = host_addressing(topo, inputs.hosts, inputs.host_macs)
    ips = {name: ip_int(ip) for name, ip in ip_text.items()}
    macs = {name: mac_int(mac) for name, mac in mac_text.items()}

    mine = [v for v in topo.switches if topo.name(v) in wanted]
    entries: dict[int, set[TableEntry]] = {v: set() for v in mine}
    groups: dict[int, set[MulticastGroup]] = {v: set() for v in mine}
    members: dict[int, set[ProfileMember]] = {v: set() for v in mine}
    meters: dict[int, set[DirectMeter | Meter]] = {v: set() for v in mine}

    # source check: a host port copies IPv4 to the CPU unless it carries the
    # address and MAC of the host there; the copies go by the clone session
    for hname, v, port in host_attachments(topo, ports, entries):
        entries[v].add(TableEntry(HOST_PORTS_TABLE, ((F_INGRESS_PORT, Exact(port)),), ActionCall(COPY_TO_CPU)))
        for table, src_field in ((KNOWN_SOURCES_TABLE, F_IPV4_SRC), (KNOWN_ARP_SOURCES_TABLE, F_ARP_SPA)):
            entries[v].add(
                TableEntry(
                    table,
                    ((F_INGRESS_PORT, Exact(port)), (src_field, Exact(ips[hname])), (F_ETH_SRC, Exact(macs[hname]))),
                    ActionCall(KNOWN_SOURCE),
                )
            )
    for v in mine:
        for u in topo.neighbors[v]:
            if topo.is_switch(u):
                entries[v].add(TableEntry(SWITCH_PORTS_TABLE, ((F_INGRESS_PORT, Exact(ports[(v, u)])),),
                                          ActionCall(TRANSIT)))
    if packet_in_pps > 0:
        for v in mine:
            meters[v].add(Meter(PACKET_IN_METER, 0, packet_in_meter_config(packet_in_pps)))

    for v in mine:
        for h in topo.hosts:
            if not routing.reachable(v, h):
                continue  # down links cut v off from h: no route
            port = ports[(v, routing.next_hop(v, h))]
            members[v].add(ProfileMember(ECMP_PROFILE, port, ActionCall(SET_EGRESS_PORT, (("port", port),))))
            entries[v].add(TableEntry(LPM_TABLE, ((F_IPV4_DST, Lpm(ips[topo.name(h)], 32)),), member_id=port))
            entries[v].add(TableEntry(ARP_ROUTES_TABLE, ((F_ARP_TPA, Exact(ips[topo.name(h)])),),
                                      ActionCall(SET_EGRESS_PORT, (("port", port),))))

    layouts = job_layouts(net, plan, group_addresses)

    want_groups: dict[str, list[str]] = defaultdict(list)
    want_replicas: dict[str, list[str]] = defaultdict(list)
    for lay in layouts:
        for v in lay.replicating:
            if v in entries:
                want_groups[topo.name(v)].append(lay.job_id)
                for w in lay.branches[v]:
                    want_replicas[topo.name(v)].append(branch_key(lay.job_id, topo.name(w)))
    backups = failover.usable_backups(backups)
    replicating = {(lay.job_id, v) for lay in layouts for v in lay.replicating}
    for b in backups:
        if b.upstream in entries and (b.job_id, b.upstream) in replicating:
            want_groups[topo.name(b.upstream)].append(ff_owner(b.job_id, topo.name(b.primary)))
        if b.detour in entries and b.detour_groups:
            want_groups[topo.name(b.detour)].append(detour_owner(b.job_id, topo.name(b.upstream)))
            for x in b.branches:
                want_replicas[topo.name(b.detour)].append(branch_key(b.job_id, topo.name(x)))
    ids = ids or P4Ids()
    new_ids = P4Ids(ids.groups.update(want_groups), ids.replicas.update(want_replicas))

    for lay in layouts:
        gip = ip_int(lay.group_ip)
        for v in sorted(lay.switches):
            if v not in entries:
                continue
            name = topo.name(v)
            in_port = ports[(v, lay.parent[v])]
            children = sorted(ports[(v, c)] for c in lay.children[v])
            branches = [(ports[(v, routing.next_hop(v, w))], topo.name(w)) for w in sorted(lay.branches[v], key=topo.name)]
            if v in lay.replicating:
                gid = new_ids.groups.get(name, lay.job_id)
                replicas = [Replica(p, 0) for p in children]
                for port, wname in branches:
                    rid = new_ids.replicas.get(name, branch_key(lay.job_id, wname))
                    replicas.append(Replica(port, rid))
                    entries[v].add(
                        TableEntry(
                            REWRITE_TABLE,
                            ((F_EGRESS_RID, Exact(rid)),),
                            ActionCall(REWRITE_TO_UNICAST, (("ipv4_dst", ips[wname]), ("eth_dst", macs[wname]))),
                        )
                    )
                groups[v].add(MulticastGroup(gid, tuple(replicas)))
                action = ActionCall(SET_MCAST_GROUP, (("group", gid),))
            elif children:
                action = ActionCall(MCAST_EGRESS_PORT, (("port", children[0]),))
            elif branches:
                port, wname = branches[0]
                action = ActionCall(UNICAST_COPY, (("port", port), ("ipv4_dst", ips[wname]), ("eth_dst", macs[wname])))
            else:
                action = ActionCall(MCAST_DROP)
            match = ((F_INGRESS_PORT, Exact(in_port)), (F_IPV4_DST, Exact(gip)))
            entries[v].add(TableEntry(MCAST_TABLE, match, action))
            if v in lay.metered:
                meters[v].add(DirectMeter(MCAST_TABLE, match, job_meter_config(lay.rate)))

    idle: dict[str, frozenset[tuple]] = {}
    if backups:
        extra = failover.backup_entities(
            topo, routing, ports, ips, macs, {lay.job_id: ip_int(lay.group_ip) for lay in layouts}, entries, groups,
            backups, new_ids.groups, new_ids.replicas, branch_key, failover_timeout_us)
        for v, es in extra.entries.items():
            entries[v].update(es)
        for v, gs in extra.groups.items():
            groups[v].update(gs)
        idle = {topo.name(v): frozenset(keys) for v, keys in extra.idle.items()}

    state: dict[str, P4SwitchState] = {}
    for v in mine:
        node = topo.nodes[v]
        clones = {CloneSession(CPU_CLONE_SESSION, (Replica(cpu_port, 0),))}
        st = P4SwitchState(frozenset(entries[v]), frozenset(groups[v]), frozenset(members[v]), frozenset(meters[v]), clones)
        n_groups = len(st.groups)
        n_mcast = len(st.in_table(MCAST_TABLE))
        checks = (
            ("groups", n_groups, node.group_capacity),
            ("multicast entries", n_mcast, node.entry_capacity),
            ("multicast entries", n_mcast, limits.multicast_entries),
            ("unicast routes", len(st.in_table(LPM_TABLE)), limits.routes),
            ("replica rewrites", len(st.in_table(REWRITE_TABLE)), limits.rewrites),
            ("action-profile members", len(st.members), limits.members),
            ("host ports", len(st.in_table(HOST_PORTS_TABLE)), limits.host_ports),
            ("known sources", len(st.in_table(KNOWN_SOURCES_TABLE)), limits.known_sources),
            ("known ARP sources", len(st.in_table(KNOWN_ARP_SOURCES_TABLE)), limits.known_arp_sources),
            ("ARP routes", len(st.in_table(ARP_ROUTES_TABLE)), limits.arp_routes),
            ("switch ports", len(st.in_table(SWITCH_PORTS_TABLE)), limits.switch_ports),
            ("fast-failover entries", len(st.in_table(FAILOVER_TABLE)), limits.failover),
        )
        for what, used, cap in checks:
            if cap is not None and used > cap:
                raise ValueError(f"switch {node.id}: {used} {what} needed, capacity {cap}")
        state[node.id] = st
    return P4Translation(state, new_ids, idle)


def seed_ids(
    ids: P4Ids,
    switch: str,
    actual: P4SwitchState,
    job_of_address: Mapping[int, str],
    host_of_ip: Mapping[int, str],
    neighbours: Mapping[int, str] | None = None,
) -> P4Ids:
    """`ids` with the group and replica ids found on `switch` adopted, if `ids`
    holds none for it yet: after a controller restart the switch keeps its ids
    and reconciliation changes nothing. `job_of_address` maps a group address
    (as an int) to its job, `host_of_ip` a host IP to the host; `neighbours`
    the switch's ports to the switches they lead to, for fast failover's groups
    (a backup group named by a failover entry's watched port; a detour's group
    by the port its stream comes in on: `ids.ff_owner`, `ids.detour_owner`)."""
    if switch in ids.groups.by_switch or switch in ids.replicas.by_switch:
        return ids
    groups: dict[str, int] = {}
    backup: dict[str, int] = {}  # fast failover's groups, by owner
    job_of_gid: dict[int, str] = {}
    for e in actual.in_table(MCAST_TABLE):
        dst = e.matched(F_IPV4_DST)
        job = job_of_address.get(dst.value) if isinstance(dst, Exact) else None
        if job is not None and e.action is not None and e.action.name == SET_MCAST_GROUP:
            gid = dict(e.action.params).get("group")
            if gid is not None and gid not in groups.values():
                groups[job] = gid
            upstream = (neighbours or {}).get(e.matched(F_INGRESS_PORT).value)
            if gid is not None and upstream is not None:  # perhaps a detour's (w is never in the job's tree)
                backup[detour_owner(job, upstream)] = gid
                job_of_gid.setdefault(gid, job)
    for e in actual.in_table(FAILOVER_TABLE):
        dst = e.matched(F_IPV4_DST)
        job = job_of_address.get(dst.value) if isinstance(dst, Exact) else None
        params = dict(e.action.params) if e.action is not None else {}
        primary = (neighbours or {}).get(params.get("watch", -1))
        if job is not None and primary is not None and e.action.name == FAILOVER_TO_GROUP:
            backup[ff_owner(job, primary)] = params["group"]
            job_of_gid.setdefault(params["group"], job)
    job_of_gid.update({gid: job for job, gid in groups.items()})
    groups.update(backup)
    rewrite_to: dict[int, str] = {}
    for e in actual.in_table(REWRITE_TABLE):
        rid = e.matched(F_EGRESS_RID)
        if isinstance(rid, Exact) and e.action is not None and e.action.name == REWRITE_TO_UNICAST:
            host = host_of_ip.get(dict(e.action.params).get("ipv4_dst", -1))
            if host is not None:
                rewrite_to[rid.value] = host
    replicas: dict[str, int] = {}
    for g in actual.groups:
        job = job_of_gid.get(g.group_id)
        for r in g.replicas:
            if job is not None and r.instance in rewrite_to:
                replicas.setdefault(branch_key(job, rewrite_to[r.instance]), r.instance)
    by_groups = dict(ids.groups.by_switch)
    by_replicas = dict(ids.replicas.by_switch)
    if groups:
        by_groups[switch] = dict(sorted(groups.items()))
    if replicas and len(set(replicas.values())) == len(replicas):
        by_replicas[switch] = dict(sorted(replicas.items()))
    return P4Ids(IdAllocation(ids.groups.limit, by_groups), IdAllocation(ids.replicas.limit, by_replicas))
