"""Fast failover on OpenFlow 1.3 switches: the entries of a plan's backups (issue 26).

`algorithm.backups.choose_backups` picks, for a tree edge u -> v, a switch w that
stands in for v (see there for the design and what it covers). Here each
`Backup` becomes entries, added to the job's own (`translate` applies them with
`backup_patches`, with `southbound.openflow.fast_failover` on):

- on u, a fast-failover group (type "ff") of two buckets: output toward v
  (watch_port: that port), then output toward w (watch_port: that port). Where
  u's flow output toward v, it now points to this group; where u replicates,
  the bucket of its replication group toward v does (a group chained in a
  group). While the port toward v is live the switch sends exactly as before;
  when it goes down the switch moves the branch to w on its own, at once;
- on w, a flow matching the job's group address where it comes in from u
  (cookie kind "backup"), sending to v's tree children (a replication group if
  two or more outputs) and emitting v's unicast branches as v does. Nothing
  reaches it while u's port toward v is live;
- on each child c of v, a second flow (cookie kind "backup") matching the
  stream where it comes in from w, with the actions of c's own flow (the same
  replication group).

Group ids come from the same allocation as the jobs' (`group_owners`: owners
"job/ff/v" on u, "job/detour/u" on w). After a link goes down the controller
re-plans without it and translates again: backups that no longer apply are
removed by the ordinary diff (a backup flow that becomes a tree flow keeps its
match and is modified in place).

`failovers_at(state, port)` counts, for a port that went down, the jobs the
switch moved to a backup by itself and the jobs whose branch on that port only
the controller's re-plan repairs (/metrics `mcast_failovers_total{by}`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from controller.addressing.ports import PortMap
from controller.algorithm.backups import Backup
from controller.algorithm.model import Topology
from controller.algorithm.routing import UnicastRouting
from controller.southbound.ids import IdAllocation, detour_owner, ff_owner
from controller.southbound.openflow.entries import (
    COOKIE_KIND_BACKUP,
    ETH_TYPE_IPV4,
    OFPP_IN_PORT,
    PRIORITY_MULTICAST,
    TABLE_FORWARD,
    Action,
    FlowEntry,
    GroupAction,
    GroupEntry,
    Output,
    SetField,
    SwitchState,
    decode_cookie,
    make_cookie,
)


class _JobEntries(Protocol):
    """What a backup needs of its job's own entries (`translate.JobEntries`)."""

    group_ip: str
    flows: dict[int, FlowEntry]
    groups: dict[int, GroupEntry]


def group_owners(topo: Topology, backups: tuple[Backup, ...]) -> dict[str, list[str]]:
    """Switch name -> the id owners of the backups' groups on it."""
    out: dict[str, list[str]] = {}
    for b in backups:
        out.setdefault(topo.name(b.upstream), []).append(ff_owner(b.job_id, topo.name(b.primary)))
        if b.detour_groups:
            out.setdefault(topo.name(b.detour), []).append(detour_owner(b.job_id, topo.name(b.upstream)))
    return out


@dataclass
class SwitchPatch:
    """What backups change on one switch: flows and groups replaced (by key and
    id) and added."""

    flows: dict[tuple, FlowEntry] = field(default_factory=dict)
    groups: dict[int, GroupEntry] = field(default_factory=dict)

    def apply(self, flows: set[FlowEntry], groups: set[GroupEntry]) -> tuple[set[FlowEntry], set[GroupEntry]]:
        """`flows` and `groups` with this patch applied."""
        out_flows = {f for f in flows if f.key not in self.flows} | set(self.flows.values())
        out_groups = {g for g in groups if g.group_id not in self.groups} | set(self.groups.values())
        return out_flows, out_groups


def _swap(actions: tuple[Action, ...], port: int, gid: int) -> tuple[Action, ...]:
    return tuple(GroupAction(gid) if a == Output(port) else a for a in actions)


def backup_patches(
    topo: Topology,
    routing: UnicastRouting,
    ports: PortMap,
    ips: Mapping[str, str],
    macs: Mapping[str, str],
    jobs: Mapping[str, _JobEntries],
    backups: tuple[Backup, ...],
    groups: IdAllocation,
) -> dict[int, SwitchPatch]:
    """Switch index -> the changes `backups` make to it (see the module docstring).
    `jobs` are the jobs' own entries, `groups` the allocation that holds the
    backups' group ids (`group_owners`). Raises ValueError for a backup that does
    not fit the job's entries."""
    patches: dict[int, SwitchPatch] = {}
    for b in backups:
        job = jobs.get(b.job_id)
        if job is None or b.upstream not in job.flows:
            raise ValueError(f"backup of job {b.job_id}: no entries of the job on {topo.name(b.upstream)}")
        u, v, w = b.upstream, b.primary, b.detour
        uname, wname = topo.name(u), topo.name(w)
        cookie = make_cookie(COOKIE_KIND_BACKUP, job.group_ip)
        # u: the branch toward v goes through a fast-failover group
        p_uv, p_uw = ports[(u, v)], ports[(u, w)]
        ff = groups.get(uname, ff_owner(b.job_id, topo.name(v)))
        pu = patches.setdefault(u, SwitchPatch())
        pu.groups[ff] = GroupEntry(ff, "ff", ((Output(p_uv),), (Output(p_uw),)), (p_uv, p_uw))
        flow = pu.flows.get(job.flows[u].key, job.flows[u])
        if Output(p_uv) in flow.actions:
            pu.flows[flow.key] = FlowEntry(flow.table_id, flow.priority, flow.match, _swap(flow.actions, p_uv, ff),
                                           flow.cookie)
        else:
            own = job.groups.get(u)
            if own is None:
                raise ValueError(f"backup of job {b.job_id}: {uname} does not send toward {topo.name(v)}")
            own = pu.groups.get(own.group_id, own)
            buckets = tuple(_swap(bk, p_uv, ff) if bk == (Output(p_uv),) else bk for bk in own.buckets)
            if buckets == own.buckets:
                raise ValueError(f"backup of job {b.job_id}: {uname} does not send toward {topo.name(v)}")
            pu.groups[own.group_id] = GroupEntry(own.group_id, own.type, buckets, own.watch_ports)
        # w: stands in for v
        outputs: list[tuple[Action, ...]] = [(Output(ports[(w, c)]),) for c in sorted(b.children, key=lambda c: ports[(w, c)])]
        for x in sorted(b.branches, key=topo.name):
            port = ports[(w, routing.next_hop(w, x))]
            xname = topo.name(x)
            outputs.append((SetField("ipv4_dst", ips[xname]), SetField("eth_dst", macs[xname]),
                            Output(OFPP_IN_PORT if port == ports[(w, u)] else port)))
        pw = patches.setdefault(w, SwitchPatch())
        actions: tuple[Action, ...]
        if b.detour_groups:
            gid = groups.get(wname, detour_owner(b.job_id, uname))
            pw.groups[gid] = GroupEntry(gid, "all", tuple(outputs))
            actions = (GroupAction(gid),)
        else:
            actions = outputs[0]
        match = (("eth_type", ETH_TYPE_IPV4), ("in_port", ports[(w, u)]), ("ipv4_dst", job.group_ip))
        detour = FlowEntry(TABLE_FORWARD, PRIORITY_MULTICAST, match, actions, cookie)
        pw.flows[detour.key] = detour
        # each child of v: the stream also where it comes in from w
        for c in b.children:
            own_flow = job.flows[c]
            match = tuple((k, ports[(c, w)] if k == "in_port" else val) for k, val in own_flow.match)
            extra = FlowEntry(TABLE_FORWARD, PRIORITY_MULTICAST, match, own_flow.actions, cookie)
            patches.setdefault(c, SwitchPatch()).flows[extra.key] = extra
    return patches


def failovers_at(state: SwitchState, port: int) -> tuple[int, int]:
    """For `port` of a switch in `state` going down: (the jobs whose stream the
    switch moves to a backup by itself: a fast-failover group whose first bucket
    watches the port, the jobs whose stream leaves through the port with no
    backup: only a re-plan repairs them). Backup flows (idle while the port is
    live) are not counted."""
    table = state.group_table()
    moved: set[int] = set()
    cut: set[int] = set()

    def walk(cookie: int, actions: tuple[Action, ...], depth: int) -> None:
        for a in actions:
            if isinstance(a, Output) and a.port == port:
                cut.add(cookie)
            elif isinstance(a, GroupAction) and depth < 4 and a.group_id in table:
                g = table[a.group_id]
                if g.type == "ff":
                    if g.watch_ports and g.watch_ports[0] == port:
                        moved.add(cookie)
                    continue  # the live bucket is the first one: not this port
                for bucket in g.buckets:
                    walk(cookie, bucket, depth + 1)

    for f in state.flows:
        decoded = decode_cookie(f.cookie)
        if decoded is not None and decoded[0] == "multicast":
            walk(f.cookie, f.actions, 0)
    return len(moved), len(cut - moved)
