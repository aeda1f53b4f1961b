"""The desired OpenFlow 1.3 state of every switch for a plan (docs/architecture.md).

This is the one place where a plan becomes flows, groups and meters, like Faucet's
`valve_of`: everything here is a frozen value, so that the state of a switch is a
set of entries and reconciling two states is a set difference (`reconcile`).

Pipeline: two tables; OpenFlow 1.3 drops what no flow of a table matches.

Table 0 (`TABLE_SOURCE`), who sent it. Every port is one of three kinds: an
edge port (a port of the topology's port map that leads to a host), a transit
port (one that leads to another switch), or a port the network does not know yet
(neither; LLDP has not classified it, no host was learned there). The source
guard: on an edge port, only a known host's IPv4 and ARP are forwarded.
- Known source, priority `PRIORITY_SOURCE_KNOWN`: per host h and switch port p
  that h is attached to, match in_port=p, eth_type=IPv4, ipv4_src=IP(h),
  eth_src=MAC(h) (learned, else configured) → go to table 1. For h's ARP
  (eth_type=ARP, arp_spa=IP(h), eth_src=MAC(h)): a copy to the controller (which
  answers requests for known hosts, as for any ARP) and go to table 1, which
  routes it to its target alone; the target answers too, and its answer comes
  back the same way. So ARP between known hosts keeps working while the
  controller is down or restarting. Hosts re-validate their ARP caches every few
  tens of seconds; were ARP handled by the controller alone, an outage longer
  than a host's probes (about 3 s on Linux) would cut that host's unicast traffic
  (seen: a PS's unicast copies to a worker lost 7% of a 10 s run across a
  controller restart). A host that does not answer ARP itself is still answered
  for by the controller while it runs.
- Transit, priority `PRIORITY_TRANSIT`: per port toward another switch, anything
  → go to table 1 (it was admitted at its edge switch already: packets from
  other switches are not checked again).
- The guard, per edge port p (`guard_flows`, cookie kind "guard"): priority
  `PRIORITY_SOURCE_UNKNOWN`, in_port=p and eth_type IPv4, or ARP → to the
  controller alone (a packet-in under the packet-in meter), NOT forwarded: a
  source whose address and MAC are not those of a host of p (a forged source, a
  new host, a known host at a new port or with a new MAC) never enters the
  fabric. The controller learns new hosts from the packet-in (a fresh host's
  first ARP, or the IPv4 of a host that never sends ARP), after which their
  packets match a known-source flow. Priority `PRIORITY_GUARD_DROP`, in_port=p →
  drop (any other EtherType). The packet counts of these three flows are p's
  guard drops (`guard_drops_from_stats`; /metrics
  `mcast_source_guard_drops_total{switch,port}`).
- Control, priority `PRIORITY_CONTROL`: any other ARP, and any other IPv4 →
  the controller alone: packets from a port that is neither an edge port nor a
  transit port. The controller learns hosts there; nothing is forwarded until
  the port is classified. (LLDP packet-ins are os-ken's own flow, priority
  0xFFFF, with its own cookie: LLDP is never guarded.)
- Everything else, priority 0 (`PRIORITY_SOURCE_MISS`) → drop.

This is a change (issue 22): an unknown source used to be forwarded while the
controller learned it (a copy to the controller and go to table 1), and the
table-miss went to table 1, so a port the controller did not know was not
checked at all. Now a host's packets enter the fabric only once the controller
has learned it (its first ARP; in a declared topology with configured MACs, at
once), and a new host cannot be learned while no controller runs. A forged
source is dropped at its edge port: the group's multicast flow at the PS's edge
switch matches in_port = the PS's port, and the guard stops anything at another
port carrying the PS's addresses before table 1; a rewritten unicast branch is
emitted only by a multicast flow of the job's tree (matching in_port = the
port toward its tree parent), so it too starts only from the PS's port.
(Forged datagrams reached workers before because the unknown-source copy made
the controller relocate the PS to the attacker's port, and the job's flows
followed it: that is the controller's host-move rule, core/hosts.py; the guard
makes sure no such packet is forwarded, the move rule decides what the
controller believes.)

Table 1 (`TABLE_FORWARD`), where it goes:
- Unicast routing, priority `PRIORITY_UNICAST`: for every host h, match
  eth_type=IPv4, ipv4_dst=IP(h) → output toward `UnicastRouting.next_hop(switch, h)`,
  the routing function the planner counts copies with; and ARP for h
  (eth_type=ARP, arp_tpa=IP(h)) the same way. ARP for anyone else reaches table 1
  only from a known host or another switch, and is dropped there (no flooding).
- Multicast, priority `PRIORITY_MULTICAST`, per job with rate > 0 and per switch v
  of its tree (`Structure.entries`): match eth_type=IPv4, in_port=port toward v's
  tree parent, ipv4_dst=the job's group address. If v replicates
  (`Structure.groups`) the flow sends to a group of type ALL with one bucket per
  output, else the single output's actions are in the flow. An output to a tree
  child is a plain Output (the multicast MAC is kept: workers join the group); an
  output to a unicast branch (emitter v, worker w) rewrites ipv4_dst and eth_dst to
  w's and outputs toward next_hop(v, w), after which the copy follows the unicast
  flows; if that port is the flow's in_port the output is `OFPP_IN_PORT`, since
  OpenFlow drops an output to the ingress port. Unicast copies emitted by the PS
  itself are addressed by the PS and need no entry. Buckets are ordered: tree
  children by port, then branches by worker name.
- Rate: at the PS's edge switch (the PS's tree child) the job's flow carries a
  Meter instruction; the meter (band DROP, kbit/s) polices the multicast stream
  to the planned rate. Unicast copies sent by the PS itself (pure unicast jobs,
  PS-emitted branches) match only the shared unicast flows and are not policed:
  the PS paces them at the rate the REST answer tells it.

Packet-ins: with `packet_in_pps` the switch also holds the virtual meter
OFPM_CONTROLLER (band DROP, packets/s), which caps everything it sends to the
controller (ARP, LLDP, the guard's packet-ins), as Faucet's `packetin_pps` does:
a host flooding from an address the controller cannot learn costs the
controller at most that rate per switch.

Ids and cookies:
- Group and meter ids are per switch and per job, from an `IdAllocation` that the
  caller keeps across plans (`translate` takes the previous one and returns the
  next): a job keeps its ids on a switch while it stays there; ids are allocated
  lowest-free-first, but an id released by this plan is not reused before the next
  one, so one diff never turns job A's group into job B's (make-before-break).
- A cookie encodes the owner, the kind of flow and an IPv4 address: the host's for
  unicast flows, the job's group address for multicast flows, so the controller
  can read flows back and attribute them to a job through its `GroupAddressPool`
  (`decode_cookie`). A flow's cookie is a function of its match, so a flow whose
  actions change keeps its cookie and can be modified in place.

Budgets: the planner never exceeds G(v) or F(v); `translate` checks both again and
raises ValueError rather than emit a state the switch must not hold.

The planned class (`planned_dscp`, off by default): the known-source IPv4 flows
reset the DSCP, the job's metered flow at the PS's edge switch sets it, and the
PS's unicast sessions and the workers' feedback get metered, marking flows of
their own at their edge ports (`openflow.planned`; they count against no budget).
"""


from __future__ import annotations

import dataclasses
import ipaddress
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.addressing.ports import PortMap, check_port_map
from controller.algorithm.backups import Backup
from controller.algorithm.model import JobPlan, Topology
from controller.algorithm.network import Network
from controller.algorithm.wire import wire_rate
from controller.core.updates import TranslationInputs
from controller.southbound.ids import IdAllocation
from controller.southbound.layout import (
    JobLayout,
    group_ip_of,
    host_addressing,
    host_attachments,
    job_layout,
    meter_burst_bits,
)
from controller.southbound.openflow.failover import backup_patches, group_owners
from controller.southbound.openflow import planned as pclass
from controller.southbound.openflow.entries import (
    COOKIE_KIND_CONTROL,
    COOKIE_KIND_GUARD,
    COOKIE_KIND_MULTICAST,
    COOKIE_KIND_SOURCE,
    COOKIE_KIND_UNICAST,
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    OFPG_MAX,
    OFPM_CONTROLLER,
    OFPM_MAX,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    PRIORITY_CONTROL,
    PRIORITY_GUARD_DROP,
    PRIORITY_MULTICAST,
    PRIORITY_SOURCE_KNOWN,
    PRIORITY_SOURCE_MISS,
    PRIORITY_SOURCE_UNKNOWN,
    PRIORITY_TRANSIT,
    PRIORITY_UNICAST,
    TABLE_FORWARD,
    TABLE_SOURCE,
    Action,
    Drop,
    FlowEntry,
    GotoTable,
    GroupAction,
    GroupEntry,
    Meter,
    MeterEntry,
    Output,
    SetField,
    SwitchState,
    decode_cookie,
    make_cookie,
)

# the owner and kind bits of every guard flow's cookie (`guard_flows`)
GUARD_COOKIE = make_cookie(COOKIE_KIND_GUARD, "0.0.0.0")


# -- ids ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ids:
    """The group ids and meter ids of the jobs on every switch."""

    groups: IdAllocation = field(default_factory=lambda: IdAllocation(OFPG_MAX))
    meters: IdAllocation = field(default_factory=lambda: IdAllocation(OFPM_MAX))


@dataclass(frozen=True, eq=False)
class JobEntries:
    """One job's flows, groups and meters by switch index, and what they were
    made from (its plan, group address, layout and ids), so that the next
    `translate` reuses them while those stay the same."""

    jp: JobPlan
    group_ip: str
    layout: JobLayout | None
    ids: tuple[tuple[int, int | None, int | None], ...]  # (switch, group id, meter id)
    flows: dict[int, FlowEntry]
    groups: dict[int, GroupEntry]
    meters: dict[int, MeterEntry]
    # the planned class (`openflow.planned`): its flows and meters by switch, their meter ids
    marks: Mapping[int, frozenset[FlowEntry]] = field(default_factory=dict)
    mark_meters: Mapping[int, frozenset[MeterEntry]] = field(default_factory=dict)
    mark_ids: tuple[tuple[int, str, int], ...] = ()


@dataclass(frozen=True)
class Translation:
    """Desired state per switch name, and what the next `translate` reuses: the
    ids, the base flows and every job's entries (`previous=`)."""

    state: dict[str, SwitchState]
    ids: Ids
    base: BaseFlows | None = None
    jobs: Mapping[str, JobEntries] = field(default_factory=dict)
    backups: tuple[Backup, ...] = ()  # the fast-failover backups in `state` (`openflow.failover`)


@dataclass(frozen=True, eq=False)
class BaseFlows:
    """The flows and meters of every switch that do not depend on the jobs (source
    table, unicast and ARP routes, the packet-in meter), with what they were made
    from (`key`: compared with ==, never hashed; it holds its own copy of the port
    map and of the address maps): a large fabric has switches × hosts of them, so
    `translate` reuses them while the network, ports and addresses stay the same."""

    key: tuple
    flows: dict[int, frozenset[FlowEntry]]
    meters: dict[int, frozenset[MeterEntry]]

    def __post_init__(self) -> None:
        for v in self.flows:  # the same identity checks as SwitchState's, once
            SwitchState(self.flows[v], frozenset(), self.meters[v])


def meter_for_rate(meter_id: int, rate_bps: float) -> MeterEntry:
    """The meter of a job planned at `rate_bps` (payload): its frames' rate,
    `wire.wire_rate(rate_bps)` (the headers on top, as the planner reserved them),
    rounded down to whole kbit/s (at least 1), so that the meter never lets a job's
    frames exceed that; its burst is `layout.meter_burst_bits` (as P4's)."""
    rate_kbps = max(1, int(wire_rate(rate_bps) // 1000))
    return MeterEntry(meter_id, rate_kbps, math.ceil(meter_burst_bits(rate_kbps * 1000) / 1000))


def packet_in_meter(pps: int) -> MeterEntry:
    """The switch's OFPM_CONTROLLER meter: at most `pps` packets per second to the
    controller (bursts of a tenth of a second, at least 10 packets)."""
    if pps < 1:
        raise ValueError(f"packet-in rate must be at least 1 packet/s, got {pps}")
    return MeterEntry(OFPM_CONTROLLER, pps, max(10, pps // 10), "pktps")


def guard_flows(port: int) -> tuple[FlowEntry, ...]:
    """The source guard of edge port `port` (table 0, below its hosts' known-source
    flows): IPv4 and ARP from any other source go to the controller alone (it
    learns new hosts from them, under the packet-in meter) and are not forwarded;
    anything else is dropped. Their packet counts are the port's guard drops
    (`GUARD_COOKIE`, `guard_drops_from_stats`)."""
    return (
        FlowEntry(TABLE_SOURCE, PRIORITY_SOURCE_UNKNOWN, (("in_port", port), ("eth_type", ETH_TYPE_IPV4)),
                  (Output(OFPP_CONTROLLER),), make_cookie(COOKIE_KIND_GUARD, ipaddress.IPv4Address(ETH_TYPE_IPV4))),
        FlowEntry(TABLE_SOURCE, PRIORITY_SOURCE_UNKNOWN, (("in_port", port), ("eth_type", ETH_TYPE_ARP)),
                  (Output(OFPP_CONTROLLER),), make_cookie(COOKIE_KIND_GUARD, ipaddress.IPv4Address(ETH_TYPE_ARP))),
        FlowEntry(TABLE_SOURCE, PRIORITY_GUARD_DROP, (("in_port", port),), (Drop(),),
                  make_cookie(COOKIE_KIND_GUARD, ipaddress.IPv4Address(0))),
    )


def guard_drops_from_stats(stats) -> dict[int, int]:
    """Port -> packets its guard flows refused, from the OFPFlowStats of table 0
    (objects with `cookie`, `match` and `packet_count`; other flows are ignored)."""
    out: dict[int, int] = {}
    for st in stats:
        if st.cookie & ~0xFFFFFFFF != GUARD_COOKIE:
            continue
        port = st.match.get("in_port")
        if port is not None:
            out[int(port)] = out.get(int(port), 0) + int(st.packet_count)
    return out


# -- translation ------------------------------------------------------------------------------
def translate(
    inputs: TranslationInputs,
    ids: Ids | None = None,
    packet_in_pps: int = 0,
    no_packet_in_meter: frozenset[str] = frozenset(),
    base: BaseFlows | None = None,
    previous: Translation | None = None,
    switches: frozenset[str] | None = None,
    backups: tuple[Backup, ...] = (),
    planned_dscp: int | None = None,
) -> Translation:
    """The desired state of every switch of the planning network (`inputs.network`)
    for its plan (of the switches named in `switches`, if given: the OpenFlow ones
    of a fabric that also has P4 switches; the others get no state and no ids),
    and the updated ids.

    `inputs.hosts` gives every host's IP and MAC; `inputs.host_macs` overrides
    MACs (the ones the controller learned). `inputs.group_addresses` maps every
    job id of the plan to its multicast group. `ids` is the allocation the
    previous translation returned (None at the first). `packet_in_pps` > 0 gives
    every switch the packet-in meter (`packet_in_meter`), but those named in
    `no_packet_in_meter` (they refused it). Raises ValueError if an
    input is missing or inconsistent, or if a switch would need more groups or
    multicast entries than its capacity. State is keyed by switch name.

    `previous`, the previous translation, makes this one incremental (the result
    is the same either way): its base flows are reused if made from the same
    network, ports and addresses (`base` alone does the same), and then so are
    the entries of every job whose plan, group address and ids did not change,
    and the state of every switch that none of the changed jobs uses (the same
    object, so that a diff against it is immediate). An admission that adds one
    job to 200 on a k=16 fat-tree rebuilds a few switches instead of 320.

    `backups` (`algorithm.backups.choose_backups`, for the same plan) add their
    fast-failover groups and detour entries (`openflow.failover`); they count
    against the switches' capacities like the jobs' own.

    `planned_dscp` (0..63; None: off) marks the planned traffic with that DSCP
    and resets it on everything else from a host (`openflow.planned`).
    """
    net, plan, ports, group_addresses = inputs.network, inputs.plan, inputs.ports, inputs.group_addresses
    topo = net.topo
    ips, macs = host_addressing(topo, inputs.hosts, inputs.host_macs)
    keep = frozenset(v for v in topo.switches if switches is None or topo.name(v) in switches)
    # what the base flows are made from, compared (not hashed) with the previous base's:
    # the mappings as they are (an equality of dicts, not a sort: a third of an
    # admission's translation at k=16), the base holding copies of its own
    key = (topo.nodes, topo.links, ports, ips, macs, packet_in_pps, frozenset(no_packet_in_meter), keep, planned_dscp)
    if previous is not None and previous.base is not None:
        base = previous.base
    reuse = base is not None and base.key == key and previous is not None
    if base is None or base.key != key:
        check_port_map(topo, ports)  # a base made from the same map checked it already
        key = (*key[:2], dict(ports), *key[3:])
        base = _base_flows(net, ports, ips, macs, packet_in_pps, no_packet_in_meter, key, keep, planned_dscp)
    before: Mapping[str, JobEntries] = previous.jobs if reuse and previous is not None else {}

    # lay out every job (reusing unchanged layouts), then allocate ids, then emit entries
    layouts: dict[str, JobLayout | None] = {}
    gips: dict[str, str] = {}
    seen: dict[str, str] = {}
    for jp in plan.jobs:
        jid = jp.job.id
        gips[jid] = gip = group_ip_of(jid, group_addresses, seen)
        old = before.get(jid)
        if old is not None and old.group_ip == gip and (old.jp is jp or old.jp == jp):
            layouts[jid] = old.layout
        elif (old is not None and old.group_ip == gip and old.layout is not None and jp.rate > 0
              and old.jp.job == jp.job and old.jp.structure == jp.structure):
            layouts[jid] = dataclasses.replace(old.layout, rate=jp.rate)  # a new rate only
        else:
            layouts[jid] = _restricted(job_layout(net, jp, gip), keep)
    want_groups: dict[str, list[str]] = defaultdict(list)
    want_meters: dict[str, list[str]] = defaultdict(list)
    for jid, lay in layouts.items():
        if lay is not None:
            for v in lay.replicating:
                want_groups[topo.name(v)].append(jid)
            for v in lay.metered:
                want_meters[topo.name(v)].append(jid)
    for name, owners in group_owners(topo, backups).items():
        want_groups[name].extend(owners)
    if planned_dscp is not None:
        for jp in plan.jobs:
            for name, owners in pclass.wanted_meters(topo, ports, keep, jp, gips[jp.job.id], ips).items():
                want_meters[name].extend(owners)
    ids = ids or Ids()
    new_ids = Ids(ids.groups.update(want_groups), ids.meters.update(want_meters))

    jobs: dict[str, JobEntries] = {}
    touched: set[int] = set()
    for jp in plan.jobs:
        jid = jp.job.id
        lay = layouts[jid]
        job_ids = _job_ids(topo, lay, new_ids)
        old = before.get(jid)
        marks: tuple = ({}, {}, ())
        if planned_dscp is not None:
            marks = pclass.job_marks(topo, ports, keep, ips, macs, jp, gips[jid], planned_dscp, new_ids.meters,
                                     meter_for_rate)
        if old is not None and old.layout is lay and old.ids == job_ids and old.mark_ids == marks[2] and \
                (lay is not None or old.jp is jp or old.jp == jp):  # (a pure unicast job has no layout)
            jobs[jid] = old
            continue
        if old is not None and lay is not None and old.layout is not None and old.ids == job_ids and \
                old.layout.switches == lay.switches and old.jp.structure == jp.structure:
            # only the rate changed: the same flows and groups, new meters
            meters = {v: meter_for_rate(old.meters[v].meter_id, lay.rate) for v in old.meters}
            entries = JobEntries(jp, gips[jid], lay, job_ids, old.flows, old.groups, meters, *marks)
            touched.update(v for v in meters if meters[v] != old.meters[v])
        else:
            entries = _job_entries(net, ports, ips, macs, jp, gips[jid], lay, new_ids, job_ids, planned_dscp)
            entries = dataclasses.replace(entries, marks=marks[0], mark_meters=marks[1], mark_ids=marks[2])
            touched.update(entries.flows)
            touched.update(entries.groups)
            if old is not None:
                touched.update(old.flows)
                touched.update(old.groups)
        previous_marks = old.marks if old is not None else {}
        previous_mark_meters = old.mark_meters if old is not None else {}
        touched.update(v for v in entries.marks.keys() | previous_marks.keys()
                       if entries.marks.get(v) != previous_marks.get(v)
                       or entries.mark_meters.get(v) != previous_mark_meters.get(v))
        jobs[jid] = entries
    for jid, old in before.items():
        if jid not in jobs:
            touched.update(old.flows)
            touched.update(old.groups)
            touched.update(old.marks)
    if not reuse or previous is None:
        touched = set(keep)
    elif backups != previous.backups:  # a switch a backup changes is rebuilt whole
        for b in set(backups) ^ set(previous.backups):
            touched.update(b.switches())
    for b in backups:  # a backup follows its job's entries
        if touched & {b.upstream, *b.children}:
            touched.update(b.switches())
    # only the switches rebuilt below read patches: the backups that change one of them
    patching = tuple(b for b in backups if touched.intersection(b.switches()))
    patches = backup_patches(topo, net.routing, ports, ips, macs, jobs, patching, new_ids.groups) if patching else {}

    on_switch: dict[int, list[JobEntries]] = defaultdict(list)
    for entries in jobs.values():
        for v in entries.flows.keys() | entries.marks.keys():
            on_switch[v].append(entries)
    state: dict[str, SwitchState] = {}
    for v in sorted(keep):
        node = topo.nodes[v]
        if v not in touched:
            assert previous is not None
            state[node.id] = previous.state[node.id]
            continue
        flows = {e.flows[v] for e in on_switch[v] if v in e.flows}
        groups = {e.groups[v] for e in on_switch[v] if v in e.groups}
        meters = {e.meters[v] for e in on_switch[v] if v in e.meters}
        if v in patches:
            flows, groups = patches[v].apply(flows, groups)
        n_groups, n_entries = len(groups), len(flows)  # the planned class's edge entries count against neither
        for e in on_switch[v]:
            flows.update(e.marks.get(v, ()))
            meters.update(e.mark_meters.get(v, ()))
        if node.group_capacity is not None and n_groups > node.group_capacity:
            raise ValueError(f"switch {node.id}: {n_groups} groups needed, capacity {node.group_capacity}")
        if node.entry_capacity is not None and n_entries > node.entry_capacity:
            raise ValueError(f"switch {node.id}: {n_entries} multicast entries needed, capacity {node.entry_capacity}")
        # the jobs' flows (priority PRIORITY_MULTICAST) and meters (their ids) never
        # share an identity with the job-independent ones: check them alone
        mine = SwitchState(flows, groups, meters)
        if {m.meter_id for m in mine.meters} & {b.meter_id for b in base.meters[v]}:
            raise ValueError(f"switch {node.id}: a job meter has the id of the packet-in meter")
        state[node.id] = SwitchState._checked_by_caller(base.flows[v] | mine.flows, mine.groups,
                                                       base.meters[v] | mine.meters)
    return Translation(state, new_ids, base, jobs, tuple(backups))


def _restricted(lay: JobLayout | None, keep: frozenset[int]) -> JobLayout | None:
    """`lay` on the switches of `keep` only (the others are another backend's)."""
    if lay is None or lay.switches <= keep:
        return lay
    return dataclasses.replace(lay, switches=lay.switches & keep, replicating=lay.replicating & keep,
                               metered=lay.metered & keep)


def _job_ids(topo: Topology, lay: JobLayout | None, ids: Ids) -> tuple[tuple[int, int | None, int | None], ...]:
    """The (switch, group id, meter id) of a job on the switches where it has one."""
    if lay is None:
        return ()
    return tuple(
        (v, ids.groups.get(topo.name(v), lay.job_id) if v in lay.replicating else None,
         ids.meters.get(topo.name(v), lay.job_id) if v in lay.metered else None)
        for v in sorted(lay.replicating | lay.metered)
    )


def _base_flows(
    net: Network,
    ports: PortMap,
    ips: Mapping[str, str],
    macs: Mapping[str, str],
    packet_in_pps: int,
    no_packet_in_meter: frozenset[str],
    key: tuple,
    keep: frozenset[int],
    planned_dscp: int | None = None,
) -> BaseFlows:
    """The flows and meters of every switch of `keep` that do not depend on the
    jobs (see `BaseFlows`)."""
    topo = net.topo
    routing = net.routing
    switches = [v for v in topo.switches if v in keep]
    flows: dict[int, set[FlowEntry]] = {v: set() for v in switches}
    meters: dict[int, set[MeterEntry]] = {v: set() for v in switches}
    # table 0 (see the module docstring): a known host's IPv4 and ARP at its port
    # go on; anything else from an edge port is not forwarded (IPv4 and ARP go to
    # the controller alone, the rest is dropped), counted by its guard flow; a
    # port toward another switch passes everything; a port the network does not
    # know yet sends IPv4 and ARP to the controller and forwards nothing
    control = (
        FlowEntry(
            TABLE_SOURCE,
            PRIORITY_CONTROL,
            (("eth_type", ETH_TYPE_ARP),),
            (Output(OFPP_CONTROLLER),),
            make_cookie(COOKIE_KIND_CONTROL, ipaddress.IPv4Address(ETH_TYPE_ARP)),
        ),
        FlowEntry(
            TABLE_SOURCE,
            PRIORITY_CONTROL,
            (("eth_type", ETH_TYPE_IPV4),),
            (Output(OFPP_CONTROLLER),),
            make_cookie(COOKIE_KIND_CONTROL, ipaddress.IPv4Address(ETH_TYPE_IPV4)),
        ),
        FlowEntry(
            TABLE_SOURCE,
            PRIORITY_SOURCE_MISS,
            (),
            (Drop(),),
            make_cookie(COOKIE_KIND_CONTROL, ipaddress.IPv4Address(0)),
        ),
    )
    for v in switches:
        flows[v].update(control)
        if packet_in_pps > 0 and topo.name(v) not in no_packet_in_meter:
            meters[v].add(packet_in_meter(packet_in_pps))
    edge_ports: set[tuple[int, int]] = set()
    for name, v, port in host_attachments(topo, ports, keep):
        edge_ports.add((v, port))
        known: tuple[tuple[int, str, tuple[Action, ...]], ...] = (
            (ETH_TYPE_IPV4, "ipv4_src", pclass.reset_actions(planned_dscp)),
            (ETH_TYPE_ARP, "arp_spa", (Output(OFPP_CONTROLLER), GotoTable(TABLE_FORWARD))),
        )
        for eth_type, src_field, actions in known:
            flows[v].add(
                FlowEntry(
                    TABLE_SOURCE,
                    PRIORITY_SOURCE_KNOWN,
                    (("in_port", port), ("eth_type", eth_type), (src_field, ips[name]), ("eth_src", macs[name])),
                    actions,
                    make_cookie(COOKIE_KIND_SOURCE, ips[name]),
                )
            )
    for v, port in edge_ports:
        flows[v].update(guard_flows(port))

    for v in switches:
        for u in topo.neighbors[v]:
            if topo.is_switch(u):
                flows[v].add(
                    FlowEntry(
                        TABLE_SOURCE,
                        PRIORITY_TRANSIT,
                        (("in_port", ports[(v, u)]),),
                        (GotoTable(TABLE_FORWARD),),
                        make_cookie(COOKIE_KIND_CONTROL, ipaddress.IPv4Address(0)),
                    )
                )

    # table 1: unicast routing of IPv4 and ARP (none from a switch that down links cut off from the host);
    # one cookie and one pair of matches per host, shared by every switch (a large
    # fabric has switches × hosts of these flows)
    per_host = []
    for h in topo.hosts:
        ip = ips[topo.name(h)]
        cookie = make_cookie(COOKIE_KIND_UNICAST, ip)
        per_host.append((h, cookie, (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", ip)),
                         (("eth_type", ETH_TYPE_ARP), ("arp_tpa", ip))))
    outputs: dict[int, tuple[Action, ...]] = {}
    for v in switches:
        for h, cookie, ipv4_match, arp_match in per_host:
            if not routing.reachable(v, h):
                continue
            port = ports[(v, routing.next_hop(v, h))]
            out = outputs.get(port)
            if out is None:
                out = outputs[port] = (Output(port),)
            flows[v].add(FlowEntry(TABLE_FORWARD, PRIORITY_UNICAST, ipv4_match, out, cookie))
            flows[v].add(FlowEntry(TABLE_FORWARD, PRIORITY_UNICAST, arp_match, out, cookie))

    return BaseFlows(key, {v: frozenset(f) for v, f in flows.items()}, {v: frozenset(m) for v, m in meters.items()})


def _job_entries(
    net: Network,
    ports: PortMap,
    ips: Mapping[str, str],
    macs: Mapping[str, str],
    jp: JobPlan,
    group_ip: str,
    lay: JobLayout | None,
    ids: Ids,
    job_ids: tuple[tuple[int, int | None, int | None], ...],
    planned_dscp: int | None = None,
) -> JobEntries:
    """One job's multicast flows, groups and meters on every switch of its tree."""
    topo = net.topo
    routing = net.routing
    flows: dict[int, FlowEntry] = {}
    groups: dict[int, GroupEntry] = {}
    meters: dict[int, MeterEntry] = {}
    if lay is None:
        return JobEntries(jp, group_ip, lay, job_ids, flows, groups, meters)
    cookie = make_cookie(COOKIE_KIND_MULTICAST, lay.group_ip)
    for v in sorted(lay.switches):
        name = topo.name(v)
        in_port = ports[(v, lay.parent[v])]
        outputs: list[tuple[Action, ...]] = [
            (Output(ports[(v, c)]),) for c in sorted(lay.children[v], key=lambda c: ports[(v, c)])
        ]
        for w in sorted(lay.branches[v], key=topo.name):
            port = ports[(v, routing.next_hop(v, w))]
            if port == in_port:
                port = OFPP_IN_PORT  # OpenFlow drops an output to the ingress port
            wname = topo.name(w)
            outputs.append((SetField("ipv4_dst", ips[wname]), SetField("eth_dst", macs[wname]), Output(port)))
        actions: tuple[Action, ...] = ()
        if v in lay.metered:
            mid = ids.meters.get(name, lay.job_id)
            meters[v] = meter_for_rate(mid, lay.rate)
            actions = (Meter(mid),)
            if planned_dscp is not None:  # the planned class: what the meter passes (`openflow.planned`)
                actions += (SetField("ip_dscp", planned_dscp),)
        if v in lay.replicating:
            gid = ids.groups.get(name, lay.job_id)
            groups[v] = GroupEntry(gid, "all", tuple(outputs))
            actions += (GroupAction(gid),)
        elif outputs:
            actions += outputs[0]
        else:
            actions += (Drop(),)
        match = (("eth_type", ETH_TYPE_IPV4), ("in_port", in_port), ("ipv4_dst", lay.group_ip))
        flows[v] = FlowEntry(TABLE_FORWARD, PRIORITY_MULTICAST, match, actions, cookie)
    return JobEntries(jp, group_ip, lay, job_ids, flows, groups, meters)


def multicast_flows(state: SwitchState) -> list[FlowEntry]:
    """The flows of `state` that carry a job's multicast stream."""
    out = []
    for f in state.flows:
        decoded = decode_cookie(f.cookie)
        if decoded is not None and decoded[0] == "multicast":
            out.append(f)
    return out
