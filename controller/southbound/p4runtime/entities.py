"""The P4 vocabulary of this controller: every P4 name the backend uses, and the
frozen values a switch holds (table entries, multicast groups of the packet
replication engine, action-profile members, meter configurations, clone
sessions) as the five sets of a `P4SwitchState`.

Pure: no protobuf, no sockets. `p4runtime.codec` turns these values into
P4Runtime protobufs and back; `p4runtime.translate` makes them from a plan.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Union

from controller.addressing.hosts import normalise_mac

# Every P4 name the backend uses; ids come from the P4Info (p4info.P4Info).
MCAST_TABLE = "McastIngress.multicast"
LPM_TABLE = "McastIngress.ipv4_lpm"
REWRITE_TABLE = "McastEgress.replica_rewrite"
HOST_PORTS_TABLE = "McastIngress.host_ports"
SWITCH_PORTS_TABLE = "McastIngress.switch_ports"  # ports toward another switch: not guarded
KNOWN_SOURCES_TABLE = "McastIngress.known_sources"
KNOWN_ARP_SOURCES_TABLE = "McastIngress.known_arp_sources"
ARP_ROUTES_TABLE = "McastIngress.arp_routes"
ECMP_PROFILE = "McastIngress.ecmp_selector"
JOB_METER = "McastIngress.job_meter"  # direct, on the multicast table (bytes)
JOB_COUNTER = "McastIngress.job_counter"  # direct, on the multicast table (packets and bytes)
PACKET_IN_METER = "McastIngress.packet_in_meter"  # indirect, one cell (packets)
GUARD_COUNTER = "McastIngress.source_guard_drops"  # indirect, one cell per ingress port (packets)
SET_MCAST_GROUP = "McastIngress.set_mcast_group"
SET_EGRESS_PORT = "McastIngress.set_egress_port"  # the ECMP members' action
MCAST_EGRESS_PORT = "McastIngress.mcast_egress_port"
UNICAST_COPY = "McastIngress.unicast_copy"
MCAST_DROP = "McastIngress.mcast_drop"
COPY_TO_CPU = "McastIngress.copy_to_cpu"
KNOWN_SOURCE = "McastIngress.known_source"
TRANSIT = "McastIngress.transit"
REWRITE_TO_UNICAST = "McastEgress.rewrite_to_unicast"
# fast failover (`p4runtime.failover`): only a program that has these can fail over
# in the data plane (BMv2's mcast.p4; not the Tofino program: docs/p4.md)
FAILOVER_TABLE = "McastIngress.multicast_failover"
FAILOVER_TO_GROUP = "McastIngress.failover_to_group"
FAILOVER_TO_PORT = "McastIngress.failover_to_port"
FAILOVER_COUNTER = "McastIngress.failover_packets"  # indirect, one cell per watched port (packets)
ETH_HEARTBEAT = 0x88B5  # ETHERTYPE_HEARTBEAT of mcast.p4: stamps port_seen, never forwarded
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
    TRANSIT: (),
}
USED_TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    MCAST_TABLE: ((F_INGRESS_PORT, "exact"), (F_IPV4_DST, "exact")),
    LPM_TABLE: ((F_IPV4_DST, "lpm"),),
    REWRITE_TABLE: ((F_EGRESS_RID, "exact"),),
    HOST_PORTS_TABLE: ((F_INGRESS_PORT, "exact"),),
    SWITCH_PORTS_TABLE: ((F_INGRESS_PORT, "exact"),),
    KNOWN_SOURCES_TABLE: ((F_INGRESS_PORT, "exact"), (F_IPV4_SRC, "exact"), (F_ETH_SRC, "exact")),
    KNOWN_ARP_SOURCES_TABLE: ((F_INGRESS_PORT, "exact"), (F_ARP_SPA, "exact"), (F_ETH_SRC, "exact")),
    ARP_ROUTES_TABLE: ((F_ARP_TPA, "exact"),),
}
FAILOVER_ACTIONS: dict[str, tuple[str, ...]] = {
    FAILOVER_TO_GROUP: ("watch", "timeout", "group"),
    FAILOVER_TO_PORT: ("watch", "timeout", "port"),
}
FAILOVER_TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    FAILOVER_TABLE: ((F_INGRESS_PORT, "exact"), (F_IPV4_DST, "exact")),
}
USED_PACKET_METADATA = {PACKET_IN: (PACKET_IN_PORT,), PACKET_OUT: (PACKET_OUT_PORT,)}
# meters: name -> (unit in the P4Info, direct table or None)
USED_METERS: dict[str, tuple[str, str | None]] = {JOB_METER: ("BYTES", MCAST_TABLE), PACKET_IN_METER: ("PACKETS", None)}
USED_DIRECT_COUNTERS: dict[str, str] = {JOB_COUNTER: MCAST_TABLE}
# indirect counters: name -> (unit in the P4Info, cells)
USED_COUNTERS: dict[str, tuple[str, int]] = {GUARD_COUNTER: ("PACKETS", 512)}


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


def describe(x: Entity) -> str:
    """An entity for a log line."""
    if isinstance(x, TableEntry):
        return f"{x.table} {dict(x.match)} -> {x.action or f'member {x.member_id}'}"
    if isinstance(x, MulticastGroup):
        return f"multicast group {x.group_id} ({len(x.replicas)} replicas)"
    if isinstance(x, DirectMeter):
        return f"the meter of {x.table} {dict(x.match)}: {x.config}"
    if isinstance(x, Meter):
        return f"meter {x.meter}[{x.index}]: {x.config}"
    if isinstance(x, CloneSession):
        return f"clone session {x.session_id} ({len(x.replicas)} replicas)"
    return f"member {x.member_id} of {x.profile}"
