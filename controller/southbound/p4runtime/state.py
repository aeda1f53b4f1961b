"""The desired P4 state of every P4Runtime switch for a plan, and its reconciliation.

The P4 counterpart of `openflow.state` + `reconcile` (docs/architecture.md), for the
program p4src/mcast.p4. Everything here is a frozen value and pure (no
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
- Source check, per host h and the port p of a switch it is attached to: a
  `host_ports` entry p -> copy_to_cpu and a `known_sources` entry (p, IP(h),
  MAC(h)) -> known_source (MAC learned, else configured): IPv4 from a host port
  that is not its host's is copied to the CPU by clone session
  `CPU_CLONE_SESSION` (one replica: `CPU_PORT`), which every switch holds.
- ARP, per host h and its port p: a `known_arp_sources` entry (p, IP(h), MAC(h))
  -> known_source; per switch v and host h it reaches: an `arp_routes` entry
  IP(h) -> set_egress_port(port toward h). A known host's ARP is routed to its
  target and cloned to the CPU; ARP from another switch is routed; any other
  ARP goes to the CPU alone. So ARP between known hosts works while the
  controller is down (as in the OpenFlow pipeline).
- With `packet_in_pps` > 0, cell 0 of the packet-in meter (`packet_in_meter_config`).

Ids: multicast group ids and replica ids are per switch and per job (per (job,
worker) for replica ids) from `IdAllocation`s kept across plans, exactly like
OpenFlow group ids: stable while a job stays, lowest free first, never reused
within one update (`P4Ids`).

Budgets: the planner keeps within G(v) and F(v); `translate` checks both again,
and also the P4 table sizes (`P4Limits`, read from the P4Info), and raises
ValueError rather than emit a state the switch cannot hold.

Reconciliation: `diff_switch` gives inserts, modifies and deletes; `steps`
splits them into ordered batches. A P4Runtime server may apply the updates of
one Write in any order, so every batch holds only independent updates and the
next batch is sent after the previous one's answer:

  make:   members (and clone sessions, meter cells), rewrite entries, groups,
          then the other table entries, then direct meter configurations
  switch: the same order, modified in place
  break:  direct meter configurations (reset), table entries, groups, rewrite
          entries, members

so no entry ever names a missing member or group and no replica a missing
rewrite. `apply` is a strict model of a switch executing operations.
"""

from __future__ import annotations

import ipaddress
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Union

from controller.algorithm.model import Plan
from controller.algorithm.network import Network

from controller.addressing.hosts import HostAddress, normalise_mac
from controller.southbound.layout import host_addressing, job_layouts
from controller.southbound.ids import IdAllocation
from controller.addressing.ports import PortMap, check_port_map
from controller.southbound.openflow.reconcile import InconsistentOp

# Every P4 name the backend uses; ids come from the P4Info (p4info.P4Info).
MCAST_TABLE = "McastIngress.multicast"
LPM_TABLE = "McastIngress.ipv4_lpm"
REWRITE_TABLE = "McastEgress.replica_rewrite"
HOST_PORTS_TABLE = "McastIngress.host_ports"
KNOWN_SOURCES_TABLE = "McastIngress.known_sources"
KNOWN_ARP_SOURCES_TABLE = "McastIngress.known_arp_sources"
ARP_ROUTES_TABLE = "McastIngress.arp_routes"
ECMP_PROFILE = "McastIngress.ecmp_selector"
JOB_METER = "McastIngress.job_meter"  # direct, on the multicast table (bytes)
JOB_COUNTER = "McastIngress.job_counter"  # direct, on the multicast table (packets and bytes)
PACKET_IN_METER = "McastIngress.packet_in_meter"  # indirect, one cell (packets)
SET_MCAST_GROUP = "McastIngress.set_mcast_group"
SET_EGRESS_PORT = "McastIngress.set_egress_port"  # the ECMP members' action
MCAST_EGRESS_PORT = "McastIngress.mcast_egress_port"
UNICAST_COPY = "McastIngress.unicast_copy"
MCAST_DROP = "McastIngress.mcast_drop"
COPY_TO_CPU = "McastIngress.copy_to_cpu"
KNOWN_SOURCE = "McastIngress.known_source"
REWRITE_TO_UNICAST = "McastEgress.rewrite_to_unicast"
F_INGRESS_PORT = "standard_metadata.ingress_port"
F_IPV4_DST = "hdr.ipv4.dstAddr"
F_IPV4_SRC = "hdr.ipv4.srcAddr"
F_ETH_SRC = "hdr.ethernet.srcAddr"
F_ARP_SPA = "hdr.arp.spa"
F_ARP_TPA = "hdr.arp.tpa"
F_EGRESS_RID = "standard_metadata.egress_rid"
PACKET_IN = "packet_in"
PACKET_OUT = "packet_out"
PACKET_IN_PORT = "ingress_port"
PACKET_OUT_PORT = "egress_port"
CPU_PORT = 255  # CPU_PORT_NUMBER of p4src/sizes.p4 (simple_switch_grpc --cpu-port); Tofino's: p4runtime.programs
CPU_CLONE_SESSION = 100  # CPU_CLONE_SESSION of p4src/sizes.p4: source-check copies to the CPU port

# (table, action, parameters) and (table, match fields) the backend writes: the
# test of the P4 program checks every one against the P4Info and mcast.p4.
USED_ACTIONS: dict[str, tuple[str, ...]] = {
    SET_MCAST_GROUP: ("group",),
    SET_EGRESS_PORT: ("port",),
    MCAST_EGRESS_PORT: ("port",),
    UNICAST_COPY: ("port", "ipv4_dst", "eth_dst"),
    MCAST_DROP: (),
    REWRITE_TO_UNICAST: ("ipv4_dst", "eth_dst"),
    COPY_TO_CPU: (),
    KNOWN_SOURCE: (),
}
USED_TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    MCAST_TABLE: ((F_INGRESS_PORT, "exact"), (F_IPV4_DST, "exact")),
    LPM_TABLE: ((F_IPV4_DST, "lpm"),),
    REWRITE_TABLE: ((F_EGRESS_RID, "exact"),),
    HOST_PORTS_TABLE: ((F_INGRESS_PORT, "exact"),),
    KNOWN_SOURCES_TABLE: ((F_INGRESS_PORT, "exact"), (F_IPV4_SRC, "exact"), (F_ETH_SRC, "exact")),
    KNOWN_ARP_SOURCES_TABLE: ((F_INGRESS_PORT, "exact"), (F_ARP_SPA, "exact"), (F_ETH_SRC, "exact")),
    ARP_ROUTES_TABLE: ((F_ARP_TPA, "exact"),),
}
USED_PACKET_METADATA = {PACKET_IN: (PACKET_IN_PORT,), PACKET_OUT: (PACKET_OUT_PORT,)}
# meters: name -> (unit in the P4Info, direct table or None)
USED_METERS: dict[str, tuple[str, str | None]] = {JOB_METER: ("BYTES", MCAST_TABLE), PACKET_IN_METER: ("PACKETS", None)}
USED_DIRECT_COUNTERS: dict[str, str] = {JOB_COUNTER: MCAST_TABLE}

# A job meter's burst is the traffic of JOB_METER_BURST_S seconds at its rate, at
# least JOB_METER_MIN_BURST bytes (ten 1500-byte frames), so that a PS sending at
# its planned rate with some jitter loses nothing.
JOB_METER_BURST_S = 0.1
JOB_METER_MIN_BURST = 15000

MAX_GROUP_ID = 0xFFFF  # v1model's mcast_grp is 16 bits; 0 means "no group"
MAX_INSTANCE = 0xFFFF  # egress_rid is 16 bits; 0 marks a plain tree replica
MAX_PORT = 0x1FF  # 9-bit ports


# -- values -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Exact:
    value: int


@dataclass(frozen=True)
class Lpm:
    value: int
    prefix_len: int


Match = Union[Exact, Lpm]


@dataclass(frozen=True)
class ActionCall:
    """An action by name with its parameters as (name, value) pairs, in P4 order."""

    name: str
    params: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class TableEntry:
    """A table entry: `match` is (field name, Exact | Lpm) pairs sorted by name; the
    entry runs either `action` (a direct table) or the profile member `member_id`.
    It is identified on a switch by `key` = (table, match), as P4Runtime does."""

    table: str
    match: tuple[tuple[str, Match], ...]
    action: ActionCall | None = None
    member_id: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "match", tuple(sorted(self.match, key=lambda m: m[0])))
        if (self.action is None) == (self.member_id is None):
            raise ValueError(f"table entry of {self.table} needs exactly one of an action and a member")

    @property
    def key(self) -> tuple[str, tuple[tuple[str, Match], ...]]:
        return (self.table, self.match)

    def matched(self, name: str) -> Match | None:
        for f, v in self.match:
            if f == name:
                return v
        return None


@dataclass(frozen=True)
class Replica:
    port: int
    instance: int = 0


@dataclass(frozen=True)
class MulticastGroup:
    """A multicast group of the packet replication engine; replicas are a set
    (kept sorted so that equal groups compare equal)."""

    group_id: int
    replicas: tuple[Replica, ...]

    def __post_init__(self) -> None:
        reps = tuple(sorted(set(self.replicas), key=lambda r: (r.port, r.instance)))
        if len(reps) != len(self.replicas):
            raise ValueError(f"multicast group {self.group_id} lists a replica twice")
        if not 1 <= self.group_id <= MAX_GROUP_ID:
            raise ValueError(f"multicast group id {self.group_id} outside 1..{MAX_GROUP_ID}")
        object.__setattr__(self, "replicas", reps)


@dataclass(frozen=True)
class ProfileMember:
    profile: str
    member_id: int
    action: ActionCall

    @property
    def key(self) -> tuple[str, int]:
        return (self.profile, self.member_id)


@dataclass(frozen=True)
class MeterConfig:
    """A two-rate three-colour meter's rates and bursts in the meter's unit (per
    second; BMv2 drops what turns red): P4Runtime's MeterConfig."""

    cir: int
    cburst: int
    pir: int
    pburst: int

    def __post_init__(self) -> None:
        if min(self.cir, self.cburst, self.pir, self.pburst) < 1:
            raise ValueError(f"meter rates and bursts must be at least 1: {self}")


@dataclass(frozen=True)
class DirectMeter:
    """The configuration of the direct meter of table entry (`table`, `match`). An
    entry without one is unconfigured (everything green); the entry must exist."""

    table: str
    match: tuple[tuple[str, Match], ...]
    config: MeterConfig

    def __post_init__(self) -> None:
        object.__setattr__(self, "match", tuple(sorted(self.match, key=lambda m: m[0])))

    @property
    def key(self) -> tuple[str, tuple[tuple[str, Match], ...]]:
        return (self.table, self.match)


@dataclass(frozen=True)
class Meter:
    """The configuration of cell `index` of the indirect meter `meter`."""

    meter: str
    index: int
    config: MeterConfig


@dataclass(frozen=True)
class CloneSession:
    """A clone session of the packet replication engine (replicas as for a group)."""

    session_id: int
    replicas: tuple[Replica, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicas", tuple(sorted(set(self.replicas), key=lambda r: (r.port, r.instance))))


Entity = Union[TableEntry, MulticastGroup, ProfileMember, DirectMeter, Meter, CloneSession]


@dataclass(frozen=True)
class P4SwitchState:
    """The table entries, multicast groups, action-profile members, meter
    configurations (direct and indirect; an unconfigured meter is absent) and
    clone sessions of one switch."""

    entries: frozenset[TableEntry] = frozenset()
    groups: frozenset[MulticastGroup] = frozenset()
    members: frozenset[ProfileMember] = frozenset()
    meters: frozenset[DirectMeter | Meter] = frozenset()
    clones: frozenset[CloneSession] = frozenset()

    def __post_init__(self) -> None:
        for name in ("entries", "groups", "members", "meters", "clones"):
            object.__setattr__(self, name, frozenset(getattr(self, name)))
        for what, items in (
            ("table entries", self.entries), ("groups", self.groups), ("members", self.members),
            ("meters", self.meters), ("clone sessions", self.clones),
        ):
            keys = [identity(x) for x in items]
            if len(set(keys)) != len(keys):
                raise ValueError(f"two {what} with the same identity")

    def entry_table(self) -> dict[tuple, TableEntry]:
        return {e.key: e for e in self.entries}

    def group_table(self) -> dict[int, MulticastGroup]:
        return {g.group_id: g for g in self.groups}

    def member_table(self) -> dict[tuple[str, int], ProfileMember]:
        return {m.key: m for m in self.members}

    def in_table(self, table: str) -> list[TableEntry]:
        return [e for e in self.entries if e.table == table]

    def meter_table(self) -> dict[tuple, DirectMeter | Meter]:
        return {identity(m)[1:]: m for m in self.meters}

    def clone_table(self) -> dict[int, CloneSession]:
        return {c.session_id: c for c in self.clones}


def identity(x: Entity) -> tuple:
    """What identifies an entity on a switch (two with the same identity cannot coexist)."""
    if isinstance(x, TableEntry):
        return ("entry",) + x.key
    if isinstance(x, MulticastGroup):
        return ("group", x.group_id)
    if isinstance(x, DirectMeter):
        return ("meter", "direct") + x.key
    if isinstance(x, Meter):
        return ("meter", x.meter, x.index)
    if isinstance(x, CloneSession):
        return ("clone", x.session_id)
    return ("member",) + x.key


def ip_int(address: str | ipaddress.IPv4Address) -> int:
    return int(ipaddress.IPv4Address(address))


def mac_int(mac: str) -> int:
    return int(normalise_mac(mac).replace(":", ""), 16)


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


@dataclass(frozen=True)
class P4Translation:
    state: dict[str, P4SwitchState]
    ids: P4Ids


def job_meter_config(rate_bps: float) -> MeterConfig:
    """The job meter of a job planned at `rate_bps` (bit/s of Ethernet frames, as
    OpenFlow meters count): bytes/s rounded down (at least 1), so the meter never
    lets a job exceed its planned rate; burst per JOB_METER_BURST_S."""
    rate = max(1, int(rate_bps // 8))
    burst = max(JOB_METER_MIN_BURST, math.ceil(rate * JOB_METER_BURST_S))
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
    net: Network,
    plan: Plan,
    ports: PortMap,
    addresses: Mapping[str, HostAddress],
    group_addresses: Mapping[str, str | ipaddress.IPv4Address],
    host_macs: Mapping[str, str] | None = None,
    ids: P4Ids | None = None,
    limits: P4Limits = P4Limits(),
    switches: Iterable[str] | None = None,
    packet_in_pps: int = 0,
    cpu_port: int = CPU_PORT,
) -> P4Translation:
    """The desired P4 state of the switches `switches` (None: every switch of
    `net`) for `plan`, and the updated ids. Inputs as `openflow.state.translate`;
    `packet_in_pps` > 0 configures every switch's packet-in meter (0: no cap);
    `cpu_port` is the program's CPU port, the clone session's replica (BMv2's
    255 by default; `p4runtime.programs`).
    Raises ValueError for missing or inconsistent inputs and for a switch that
    would need more groups, multicast entries or table entries than it holds."""
    topo = net.topo
    routing = net.routing
    check_port_map(topo, ports)
    wanted = set(topo.name(v) for v in topo.switches) if switches is None else set(switches)
    unknown = sorted(wanted - {topo.name(v) for v in topo.switches})
    if unknown:
        raise ValueError(f"not switches of the topology: {', '.join(unknown)}")
    ip_text, mac_text = host_addressing(topo, addresses, host_macs)
    ips = {name: ip_int(ip) for name, ip in ip_text.items()}
    macs = {name: mac_int(mac) for name, mac in mac_text.items()}

    mine = [v for v in topo.switches if topo.name(v) in wanted]
    entries: dict[int, set[TableEntry]] = {v: set() for v in mine}
    groups: dict[int, set[MulticastGroup]] = {v: set() for v in mine}
    members: dict[int, set[ProfileMember]] = {v: set() for v in mine}
    meters: dict[int, set[DirectMeter | Meter]] = {v: set() for v in mine}

    # source check: a host port copies IPv4 to the CPU unless it carries the
    # address and MAC of the host there; the copies go by the clone session
    for h in topo.hosts:
        hname = topo.name(h)
        for v in topo.neighbors[h]:
            if v not in entries:
                continue
            port = ports[(v, h)]
            entries[v].add(TableEntry(HOST_PORTS_TABLE, ((F_INGRESS_PORT, Exact(port)),), ActionCall(COPY_TO_CPU)))
            for table, src_field in ((KNOWN_SOURCES_TABLE, F_IPV4_SRC), (KNOWN_ARP_SOURCES_TABLE, F_ARP_SPA)):
                entries[v].add(
                    TableEntry(
                        table,
                        ((F_INGRESS_PORT, Exact(port)), (src_field, Exact(ips[hname])), (F_ETH_SRC, Exact(macs[hname]))),
                        ActionCall(KNOWN_SOURCE),
                    )
                )
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
        )
        for what, used, cap in checks:
            if cap is not None and used > cap:
                raise ValueError(f"switch {node.id}: {used} {what} needed, capacity {cap}")
        state[node.id] = st
    return P4Translation(state, new_ids)


def seed_ids(
    ids: P4Ids,
    switch: str,
    actual: P4SwitchState,
    job_of_address: Mapping[int, str],
    host_of_ip: Mapping[int, str],
) -> P4Ids:
    """`ids` with the group and replica ids found on `switch` adopted, if `ids`
    holds none for it yet: after a controller restart the switch keeps its ids
    and reconciliation changes nothing. `job_of_address` maps a group address
    (as an int) to its job, `host_of_ip` a host IP to the host."""
    if switch in ids.groups.by_switch or switch in ids.replicas.by_switch:
        return ids
    groups: dict[str, int] = {}
    for e in actual.in_table(MCAST_TABLE):
        dst = e.matched(F_IPV4_DST)
        job = job_of_address.get(dst.value) if isinstance(dst, Exact) else None
        if job is not None and e.action is not None and e.action.name == SET_MCAST_GROUP:
            gid = dict(e.action.params).get("group")
            if gid is not None and gid not in groups.values():
                groups[job] = gid
    job_of_gid = {gid: job for job, gid in groups.items()}
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


# -- reconciliation -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Insert:
    entity: Entity


@dataclass(frozen=True)
class Modify:
    entity: Entity


@dataclass(frozen=True)
class Delete:
    entity: Entity


P4Op = Union[Insert, Modify, Delete]

PHASE_MAKE, PHASE_SWITCH, PHASE_BREAK = 0, 1, 2


def _rank(x: Entity) -> int:
    """Dependency rank: a lower rank is referenced by higher ones (a direct meter
    configures an entry: it is made after it and reset before it goes)."""
    if isinstance(x, (ProfileMember, Meter, CloneSession)):
        return 0
    if isinstance(x, DirectMeter):
        return 4
    if isinstance(x, TableEntry) and x.table == REWRITE_TABLE:
        return 1
    if isinstance(x, MulticastGroup):
        return 2
    return 3


def step_of(op: P4Op) -> tuple[int, int]:
    """(phase, batch within the phase) of an operation; batches run in this order."""
    rank = _rank(op.entity)
    if isinstance(op, Insert):
        return (PHASE_MAKE, rank)
    if isinstance(op, Modify):
        return (PHASE_SWITCH, rank)
    return (PHASE_BREAK, 4 - rank)


def _sort_key(op: P4Op) -> tuple:
    return step_of(op) + (repr(identity(op.entity)),)


def diff_switch(desired: P4SwitchState, actual: P4SwitchState) -> list[P4Op]:
    """The operations that turn `actual` into `desired`, in step order."""
    ops: list[P4Op] = []
    for want, have in (
        (desired.member_table(), actual.member_table()),
        (desired.group_table(), actual.group_table()),
        (desired.entry_table(), actual.entry_table()),
        (desired.meter_table(), actual.meter_table()),
        (desired.clone_table(), actual.clone_table()),
    ):
        ops += [Insert(want[k]) for k in want.keys() - have.keys()]
        ops += [Modify(want[k]) for k in want.keys() & have.keys() if want[k] != have[k]]
        ops += [Delete(have[k]) for k in have.keys() - want.keys()]
    return sorted(ops, key=_sort_key)


def diff(desired: Mapping[str, P4SwitchState], actual: Mapping[str, P4SwitchState]) -> dict[str, list[P4Op]]:
    """Per switch, the operations from `actual` to `desired` (switches with none left out)."""
    empty = P4SwitchState()
    out = {}
    for sw in sorted(set(desired) | set(actual)):
        ops = diff_switch(desired.get(sw, empty), actual.get(sw, empty))
        if ops:
            out[sw] = ops
    return out


def steps(ops_by_switch: Mapping[str, list[P4Op]]) -> list[dict[str, list[P4Op]]]:
    """The operations as ordered batches (make, switch, break; each by dependency
    rank); each batch maps switch -> its operations, which are independent of
    one another. Empty batches are left out."""
    batches: dict[tuple[int, int], dict[str, list[P4Op]]] = {}
    for sw, ops in ops_by_switch.items():
        for op in ops:
            batches.setdefault(step_of(op), {}).setdefault(sw, []).append(op)
    return [batches[k] for k in sorted(batches)]


def dangling_references(state: P4SwitchState) -> list[str]:
    """Every reference of `state` to a member, group or rewrite it lacks."""
    problems = []
    members = {m.member_id for m in state.members if m.profile == ECMP_PROFILE}
    groups = {g.group_id for g in state.groups}
    rids = {e.match[0][1].value for e in state.in_table(REWRITE_TABLE)}
    for e in state.entries:
        if e.member_id is not None and e.member_id not in members:
            problems.append(f"{e.table} entry {e.match} refers to missing member {e.member_id}")
        if e.action is not None and e.action.name == SET_MCAST_GROUP:
            gid = dict(e.action.params)["group"]
            if gid not in groups:
                problems.append(f"{e.table} entry {e.match} refers to missing group {gid}")
    for g in state.groups:
        for r in g.replicas:
            if r.instance and r.instance not in rids:
                problems.append(f"group {g.group_id} replica {r} has no rewrite entry")
    keys = {e.key for e in state.entries}
    for m in state.meters:
        if isinstance(m, DirectMeter) and m.key not in keys:
            problems.append(f"direct meter of {m.table} entry {m.match}, which is missing")
    return problems


def apply(ops: Iterable[P4Op], actual: P4SwitchState) -> P4SwitchState:
    """The state after executing `ops` in order; raises `reconcile.InconsistentOp` at
    the first operation that inserts an existing entity, modifies or deletes a
    missing one, or leaves a dangling reference."""
    tables: dict[str, dict] = {
        "entry": actual.entry_table(),
        "group": actual.group_table(),
        "member": actual.member_table(),
        "meter": actual.meter_table(),
        "clone": actual.clone_table(),
    }
    for op in ops:
        ident = identity(op.entity)
        table, k = tables[ident[0]], ident[1:] if len(ident) > 2 else ident[1]
        name = type(op).__name__
        if isinstance(op, Insert):
            if k in table:
                raise InconsistentOp(f"Insert: {ident} already exists")
            table[k] = op.entity
        elif isinstance(op, Modify):
            if k not in table:
                raise InconsistentOp(f"Modify: {ident} does not exist")
            table[k] = op.entity
        else:
            if k not in table:
                raise InconsistentOp(f"Delete: {ident} does not exist")
            del table[k]
        problems = dangling_references(_state(tables))
        if problems:
            raise InconsistentOp(f"after {name}: {problems[0]}")
    return _state(tables)


def _state(tables: Mapping[str, dict]) -> P4SwitchState:
    return P4SwitchState(
        frozenset(tables["entry"].values()), frozenset(tables["group"].values()), frozenset(tables["member"].values()),
        frozenset(tables["meter"].values()), frozenset(tables["clone"].values()),
    )
