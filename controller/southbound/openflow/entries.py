"""The OpenFlow 1.3 vocabulary of this controller: tables, priorities, cookies and
the frozen entries (flows, groups, meters) a switch holds.

Everything here is a frozen value, so that the state of a switch is a set of
entries and reconciling two states is a set difference (`openflow.reconcile`);
`openflow.translate` makes them from a plan.

Cookies: a cookie encodes the owner, the kind of flow and an IPv4 address: the
host's for unicast flows, the job's group address for multicast flows, so the
controller can read flows back and attribute them to a job (`decode_cookie`). A
flow's cookie is a function of its match, so a flow whose actions change keeps
its cookie and can be modified in place.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Union

from controller.config import OFPG_MAX, OFPM_MAX  # noqa: F401 - the group and meter id bounds, as the config checks them

TABLE_SOURCE = 0
TABLE_FORWARD = 1
PRIORITY_PLANNED = 350  # a host's planned packets, metered and marked (`openflow.planned`)
PRIORITY_SOURCE_KNOWN = 300
PRIORITY_TRANSIT = 250
PRIORITY_SOURCE_UNKNOWN = 200
PRIORITY_CONTROL = 100
PRIORITY_GUARD_DROP = 10  # an edge port's catch-all drop (the source guard)
PRIORITY_SOURCE_MISS = 0
PRIORITY_UNICAST = 1000
PRIORITY_MULTICAST = 2000
ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
IP_PROTO_UDP = 17

OFPP_IN_PORT = 0xFFFFFFF8  # send back out of the port the packet came in on
OFPP_CONTROLLER = 0xFFFFFFFD  # a packet-in to the controller
OFPP_MAX = 0xFFFFFF00  # physical ports are 1 .. OFPP_MAX
OFPM_CONTROLLER = 0xFFFFFFFE  # the virtual meter of the packets sent to the controller


# Cookie layout: bits 63..48 owner tag, bits 47..40 kind, bits 31..0 an IPv4 address.
COOKIE_OWNER = 0x4D43 << 48  # "MC"
COOKIE_OWNER_MASK = 0xFFFF << 48
COOKIE_KIND_UNICAST = 1
COOKIE_KIND_MULTICAST = 2
COOKIE_KIND_CONTROL = 3  # the source table's own flows; the "address" is an EtherType (0 for the miss)
COOKIE_KIND_SOURCE = 4  # a known host's source flow; the address is the host's
COOKIE_KIND_GUARD = 5  # an edge port's source-guard flow (not forwarded); the "address" is an EtherType (0: any)
COOKIE_KIND_BACKUP = 6  # a job's backup flow (`openflow.failover`); the address is the job's group address
COOKIE_KIND_PLANNED = 7  # a job's planned-class flow (`openflow.planned`); the address is the job's group address
_COOKIE_KINDS = {
    COOKIE_KIND_UNICAST: "unicast",
    COOKIE_KIND_MULTICAST: "multicast",
    COOKIE_KIND_CONTROL: "control",
    COOKIE_KIND_SOURCE: "source",
    COOKIE_KIND_GUARD: "guard",
    COOKIE_KIND_BACKUP: "backup",
    COOKIE_KIND_PLANNED: "planned",
}
COOKIE_KIND_MASK = 0xFF << 40

MATCH_FIELDS = ("in_port", "eth_type", "eth_src", "eth_dst", "ipv4_src", "ipv4_dst", "arp_spa", "arp_tpa",
                "ip_proto", "udp_src", "udp_dst")
SET_FIELDS = ("eth_dst", "ipv4_dst", "ip_dscp")



# -- cookies ------------------------------------------------------------------------------
def make_cookie(kind: int, address: str | ipaddress.IPv4Address) -> int:
    if kind not in _COOKIE_KINDS:
        raise ValueError(f"unknown cookie kind {kind}")
    return COOKIE_OWNER | (kind << 40) | int(ipaddress.IPv4Address(address))


def is_owned_cookie(cookie: int) -> bool:
    """True for the cookies of entries this module produces. The controller should
    reconcile only flows it owns (and leave e.g. its LLDP packet-in flow alone)."""
    return cookie & COOKIE_OWNER_MASK == COOKIE_OWNER


def decode_cookie(cookie: int) -> tuple[str, ipaddress.IPv4Address] | None:
    """("unicast", host IP), ("multicast" or "backup", group address), ...; None if not ours."""
    if not is_owned_cookie(cookie):
        return None
    kind = _COOKIE_KINDS.get((cookie >> 40) & 0xFF)
    if kind is None:
        return None
    return kind, ipaddress.IPv4Address(cookie & 0xFFFFFFFF)


# -- actions ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Output:
    """Output to a port (an integer; `OFPP_IN_PORT` for the ingress port,
    `OFPP_CONTROLLER` for a packet-in)."""

    port: int

    def __post_init__(self) -> None:
        if not (1 <= self.port <= OFPP_MAX or self.port in (OFPP_IN_PORT, OFPP_CONTROLLER)):
            raise ValueError(f"invalid output port {self.port}")


@dataclass(frozen=True)
class SetField:
    """Rewrite a header field: `eth_dst` (MAC string), `ipv4_dst` (dotted string)
    or `ip_dscp` (an integer 0..63: the planned class, `openflow.planned`)."""

    field: str
    value: str | int

    def __post_init__(self) -> None:
        if self.field not in SET_FIELDS:
            raise ValueError(f"SetField supports {', '.join(SET_FIELDS)}, not {self.field!r}")
        if (self.field == "ip_dscp") != (isinstance(self.value, int) and not isinstance(self.value, bool)):
            raise ValueError(f"SetField {self.field}: ip_dscp takes an integer, the others a string, not {self.value!r}")
        if self.field == "ip_dscp" and not 0 <= int(self.value) <= 63:
            raise ValueError(f"SetField ip_dscp: a DSCP is 0..63, not {self.value}")


@dataclass(frozen=True)
class GroupAction:
    group_id: int


@dataclass(frozen=True)
class Meter:
    """The OFPIT_METER instruction; it comes first in a flow's actions."""

    meter_id: int


@dataclass(frozen=True)
class Drop:
    """No output: an empty instruction list on the wire."""


@dataclass(frozen=True)
class GotoTable:
    """The OFPIT_GOTO_TABLE instruction; it comes last in a flow's actions (after
    the apply-actions, as OpenFlow 1.3 executes them)."""

    table_id: int


Action = Union[Output, SetField, GroupAction, Meter, Drop, GotoTable]


# -- entries ----------------------------------------------------------------------------
def _match_key(item: tuple[str, object]) -> str:
    return item[0]


@dataclass(frozen=True)
class FlowEntry:
    """A flow: `match` is a tuple of (field, value) pairs sorted by field name.

    A flow is identified on a switch by `key` = (table_id, priority, match), as
    OpenFlow's strict modify and delete identify it.
    """

    table_id: int
    priority: int
    match: tuple[tuple[str, object], ...]
    actions: tuple[Action, ...]
    cookie: int = 0

    def __post_init__(self) -> None:
        match = tuple(sorted(self.match, key=_match_key))
        names = [f for f, _ in match]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate match field in {match}")
        bad = [f for f in names if f not in MATCH_FIELDS]
        if bad:
            raise ValueError(f"unsupported match fields {bad}")
        object.__setattr__(self, "match", match)
        object.__setattr__(self, "actions", tuple(self.actions))

    @property
    def key(self) -> tuple[int, int, tuple[tuple[str, object], ...]]:
        return (self.table_id, self.priority, self.match)

    def matched(self, name: str) -> object | None:
        for f, v in self.match:
            if f == name:
                return v
        return None


@dataclass(frozen=True)
class GroupEntry:
    """A group; `buckets` is a tuple of action tuples, one per bucket. A
    fast-failover group ("ff") has one `watch_ports` entry per bucket: the switch
    uses the first bucket whose watched port is live; other types have none."""

    group_id: int
    type: str = "all"
    buckets: tuple[tuple[Action, ...], ...] = ()
    watch_ports: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.type not in ("all", "indirect", "select", "ff"):
            raise ValueError(f"unknown group type {self.type!r}")
        object.__setattr__(self, "buckets", tuple(tuple(b) for b in self.buckets))
        object.__setattr__(self, "watch_ports", tuple(self.watch_ports))
        if self.type == "ff" and len(self.watch_ports) != len(self.buckets):
            raise ValueError(f"group {self.group_id}: a fast-failover group needs one watch port per bucket")
        if self.type != "ff" and self.watch_ports:
            raise ValueError(f"group {self.group_id}: only a fast-failover group has watch ports")
        if any(not 1 <= p <= OFPP_MAX for p in self.watch_ports):
            raise ValueError(f"group {self.group_id}: watch ports must be physical ports, got {self.watch_ports}")


@dataclass(frozen=True)
class MeterEntry:
    """A meter with one DROP band: `rate` and `burst` in kbit/s and kbit (`unit`
    "kbps": a job's meter) or in packets/s and packets ("pktps": the packet-in
    meter)."""

    meter_id: int
    rate: int
    burst: int
    unit: str = "kbps"

    def __post_init__(self) -> None:
        if self.unit not in ("kbps", "pktps"):
            raise ValueError(f"meter unit must be kbps or pktps, not {self.unit!r}")


@dataclass(frozen=True)
class SwitchState:
    """The flows, groups and meters of one switch, as frozen sets."""

    flows: frozenset[FlowEntry] = frozenset()
    groups: frozenset[GroupEntry] = frozenset()
    meters: frozenset[MeterEntry] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "flows", frozenset(self.flows))
        object.__setattr__(self, "groups", frozenset(self.groups))
        object.__setattr__(self, "meters", frozenset(self.meters))
        for what, items, key in (
            ("flow", self.flows, lambda f: f.key),
            ("group", self.groups, lambda g: g.group_id),
            ("meter", self.meters, lambda m: m.meter_id),
        ):
            keys = [key(x) for x in items]
            if len(set(keys)) != len(keys):
                raise ValueError(f"two {what} entries with the same identity")

    @classmethod
    def _checked_by_caller(
        cls, flows: frozenset[FlowEntry], groups: frozenset[GroupEntry], meters: frozenset[MeterEntry]
    ) -> SwitchState:
        """A state whose identities the caller has checked (`translate` checks the
        job-independent part once per `BaseFlows` and the jobs' part each time)."""
        state = object.__new__(cls)
        object.__setattr__(state, "flows", flows)
        object.__setattr__(state, "groups", groups)
        object.__setattr__(state, "meters", meters)
        return state

    def flow_table(self) -> dict[tuple, FlowEntry]:
        return {f.key: f for f in self.flows}

    def group_table(self) -> dict[int, GroupEntry]:
        return {g.group_id: g for g in self.groups}

    def meter_table(self) -> dict[int, MeterEntry]:
        return {m.meter_id: m for m in self.meters}
