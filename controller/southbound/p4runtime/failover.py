"""Fast failover on P4 switches (BMv2's mcast.p4): the entities of a plan's backups (issue 26).

`algorithm.backups.choose_backups` picks, for a tree edge u -> v, a switch w that
stands in for v (see there for the design and what it covers; the OpenFlow
backend uses the same choice). P4Runtime 1.4.1's multicast `Replica` has no
backup replica and v1model tells the program nothing of a port's state, so the
program judges a port itself, by what it last received there:

- every packet that comes in from a port toward another switch stamps register
  `port_seen[port]` with its arrival time; the controller sends a heartbeat
  frame (`ETH_HEARTBEAT`) every `heartbeat_interval_s` out of the far end of
  every watched link (`heartbeat_ends`: v's port toward u), which the switch
  drops after stamping;
- on u, a `multicast_failover` entry with the key of the job's `multicast`
  entry names the port toward v (`watch`), the silence that means "down"
  (`timeout`, microseconds) and the backup: where u replicates, a second
  multicast group (owner "job/ff/v" in `P4Ids.groups`): the job's group with
  the replica toward v moved to the port toward w (`failover_to_group`); where
  u sends to v alone, the port toward w (`failover_to_port`). While packets
  keep coming in from v, u sends exactly as before; once the port has been
  silent for the timeout, u sends the job to w on its own, per packet, and
  counts it in `failover_packets[port]`; when the port hears again, the primary.
  Its first backup packet after the port was last heard is reported to the
  controller (a CPU copy turned into an `ETH_HEARTBEAT` frame whose source MAC
  is the silence in microseconds: `p4runtime.fast_failover`);
- on w, a `multicast` entry matching the stream where it comes in from u,
  sending to v's tree children (a multicast group, owner "job/detour/u", if two
  or more outputs; v's unicast branches as rewritten replicas, as v emits them)
  or to the one output; nothing reaches it while u's port toward v is live;
- on each child c of v, a second `multicast` entry matching the stream where
  it comes in from w, with the action of c's own entry.

The table budgets are `choose_backups`'s (u: one group; w: one entry and a
group if it replicates; each child: one entry): the failover entry is in its
own table (FAILOVER_TABLE_SIZE), not in F(v). One backup per (job, u): the
failover table has one entry per key, so a second protected edge of the same
job at the same u is left to the re-plan.

After a link goes down the controller re-plans without it (LLDP timeout) and
translates again; backups that no longer apply are removed by the ordinary diff.
`failovers_at(state, port)` counts, for a port gone down, the jobs the switch
fails over by itself and those only the re-plan repairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.addressing.ports import PortMap
from controller.algorithm.backups import Backup
from controller.algorithm.model import Topology
from controller.algorithm.routing import UnicastRouting
from controller.southbound.ids import IdAllocation, detour_owner, ff_owner
from controller.southbound.p4runtime.entities import (
    ETH_HEARTBEAT,
    F_EGRESS_RID,
    F_INGRESS_PORT,
    F_IPV4_DST,
    FAILOVER_TABLE,
    FAILOVER_TO_GROUP,
    FAILOVER_TO_PORT,
    MCAST_EGRESS_PORT,
    MCAST_TABLE,
    REWRITE_TABLE,
    REWRITE_TO_UNICAST,
    SET_MCAST_GROUP,
    UNICAST_COPY,
    ActionCall,
    Exact,
    MulticastGroup,
    P4SwitchState,
    Replica,
    TableEntry,
)

MAX_TIMEOUT_US = (1 << 48) - 1


def usable_backups(backups: Iterable[Backup]) -> tuple[Backup, ...]:
    """The first backup of each (job, upstream switch): the failover table holds one
    entry per job's key on a switch (module docstring)."""
    seen: set[tuple[str, int]] = set()
    out = []
    for b in backups:
        if (b.job_id, b.upstream) not in seen:
            seen.add((b.job_id, b.upstream))
            out.append(b)
    return tuple(out)


def port_neighbours(topo: Topology, ports: PortMap, switch: str) -> dict[int, str]:
    """`switch`'s ports toward other switches -> the switch each leads to (`translate.seed_ids`)."""
    v = topo.index.get(switch)
    return {p: topo.name(b) for (a, b), p in ports.items() if a == v and topo.is_switch(b)}


def heartbeat_ends(topo: Topology, ports: PortMap, backups: Iterable[Backup]) -> frozenset[tuple[str, int]]:
    """(switch, port) every heartbeat goes out of: v's port toward u for every
    protected edge u -> v, so that u hears it on the port it watches."""
    return frozenset((topo.name(b.primary), ports[(b.primary, b.upstream)]) for b in usable_backups(backups))


def heartbeat_frame(src_mac: bytes = b"\x02\x00\x00\x00\x00\x01") -> bytes:
    """A heartbeat: an Ethernet frame of ethertype ETH_HEARTBEAT, padded to 60 bytes
    (the receiving switch only notes when it came, and drops it)."""
    frame = b"\x01\x80\xc2\x00\x00\x0e" + src_mac + ETH_HEARTBEAT.to_bytes(2, "big")
    return frame + bytes(60 - len(frame))


@dataclass
class BackupEntities:
    """What backups add to the switches: table entries and groups per switch index,
    and the keys of the `multicast` entries among them (idle while the primary lives)."""

    entries: dict[int, list[TableEntry]]
    groups: dict[int, list[MulticastGroup]]
    idle: dict[int, set[tuple]]


def backup_entities(
    topo: Topology,
    routing: UnicastRouting,
    ports: PortMap,
    ips: Mapping[str, int],
    macs: Mapping[str, int],
    group_ip: Mapping[str, int],
    entries: Mapping[int, Iterable[TableEntry]],
    groups: Mapping[int, Iterable[MulticastGroup]],
    backups: Iterable[Backup],
    group_ids: IdAllocation,
    replica_ids: IdAllocation,
    branch_key,
    timeout_us: int,
) -> BackupEntities:
    """The entities `backups` add (module docstring), given the jobs' own `entries`
    and `groups` per switch index, each job's group address (`group_ip`, an int),
    and the allocations holding the backups' group ids (`ids.ff_owner`, `ids.detour_owner`) and the
    replica ids of (job, worker) (`branch_key(job, worker)`). Only the switches
    of `entries` get theirs (a translation of some switches). Raises ValueError for a backup that does not
    fit the job's entries or a timeout outside 1..2^48-1 microseconds."""
    if not 1 <= timeout_us <= MAX_TIMEOUT_US:
        raise ValueError(f"fast-failover timeout {timeout_us} us outside 1..{MAX_TIMEOUT_US}")
    out = BackupEntities({}, {}, {})
    for b in usable_backups(backups):
        u, v, w = b.upstream, b.primary, b.detour
        gip = group_ip[b.job_id]
        uname, vname, wname = topo.name(u), topo.name(v), topo.name(w)

        def own(x: int) -> TableEntry:
            for e in entries[x]:
                if e.table == MCAST_TABLE and e.matched(F_IPV4_DST) == Exact(gip):
                    return e
            raise ValueError(f"backup of job {b.job_id}: no multicast entry of the job on {topo.name(x)}")

        if u in entries:  # u: the failover entry (and its backup group)
            e_u = own(u)
            p_uv, p_uw = ports[(u, v)], ports[(u, w)]
            params = dict(e_u.action.params) if e_u.action else {}
            if e_u.action is not None and e_u.action.name == MCAST_EGRESS_PORT and params.get("port") == p_uv:
                action = ActionCall(FAILOVER_TO_PORT, (("watch", p_uv), ("timeout", timeout_us), ("port", p_uw)))
            elif e_u.action is not None and e_u.action.name == SET_MCAST_GROUP:
                group = next((g for g in groups.get(u, ()) if g.group_id == params.get("group")), None)
                if group is None or Replica(p_uv, 0) not in group.replicas:
                    raise ValueError(f"backup of job {b.job_id}: {uname} does not replicate toward {vname}")
                if Replica(p_uw, 0) in group.replicas:
                    raise ValueError(f"backup of job {b.job_id}: {uname} already sends the tree toward {wname}")
                gid = group_ids.get(uname, ff_owner(b.job_id, vname))
                reps = tuple(Replica(p_uw, 0) if r == Replica(p_uv, 0) else r for r in group.replicas)
                out.groups.setdefault(u, []).append(MulticastGroup(gid, reps))
                action = ActionCall(FAILOVER_TO_GROUP, (("watch", p_uv), ("timeout", timeout_us), ("group", gid)))
            else:
                raise ValueError(f"backup of job {b.job_id}: {uname} does not send toward {vname}")
            out.entries.setdefault(u, []).append(TableEntry(FAILOVER_TABLE, e_u.match, action))
        if w in entries:  # w: stands in for v
            kids = sorted(ports[(w, c)] for c in b.children)
            branches = [(ports[(w, routing.next_hop(w, x))], topo.name(x)) for x in sorted(b.branches, key=topo.name)]
            ew = out.entries.setdefault(w, [])
            if b.detour_groups:
                reps_w = [Replica(p, 0) for p in kids]
                for port, xname in branches:
                    rid = replica_ids.get(wname, branch_key(b.job_id, xname))
                    reps_w.append(Replica(port, rid))
                    ew.append(TableEntry(REWRITE_TABLE, ((F_EGRESS_RID, Exact(rid)),), ActionCall(
                        REWRITE_TO_UNICAST, (("ipv4_dst", ips[xname]), ("eth_dst", macs[xname])))))
                gid = group_ids.get(wname, detour_owner(b.job_id, uname))
                out.groups.setdefault(w, []).append(MulticastGroup(gid, tuple(reps_w)))
                detour = ActionCall(SET_MCAST_GROUP, (("group", gid),))
            elif kids:
                detour = ActionCall(MCAST_EGRESS_PORT, (("port", kids[0]),))
            else:
                port, xname = branches[0]
                detour = ActionCall(UNICAST_COPY, (("port", port), ("ipv4_dst", ips[xname]), ("eth_dst", macs[xname])))
            ew.append(TableEntry(MCAST_TABLE, ((F_INGRESS_PORT, Exact(ports[(w, u)])), (F_IPV4_DST, Exact(gip))), detour))
            out.idle.setdefault(w, set()).add(ew[-1].key)
        for c in b.children:  # each child of v: the stream also where it comes in from w
            if c in entries:
                extra = TableEntry(MCAST_TABLE, ((F_INGRESS_PORT, Exact(ports[(c, w)])), (F_IPV4_DST, Exact(gip))),
                                   own(c).action)
                out.entries.setdefault(c, []).append(extra)
                out.idle.setdefault(c, set()).add(extra.key)
    return out


def failovers_at(state: P4SwitchState, port: int, idle: frozenset[tuple] = frozenset()) -> tuple[int, int]:
    """For `port` of a switch in `state` going down: (the jobs the switch fails
    over by itself: a failover entry watching the port; the jobs whose stream
    leaves through the port with no such entry: only a re-plan repairs them).
    `idle` are the keys of backup entries (`BackupEntities.idle`): they carry
    nothing while the primaries live, and are not counted."""
    groups = state.group_table()
    watched = {e.key[1] for e in state.in_table(FAILOVER_TABLE)
               if e.action is not None and dict(e.action.params).get("watch") == port}
    cut = set()
    for e in state.in_table(MCAST_TABLE):
        if e.action is None or e.key[1] in watched or e.key in idle:
            continue
        params = dict(e.action.params)
        if e.action.name in (MCAST_EGRESS_PORT, UNICAST_COPY) and params.get("port") == port:
            cut.add(e.key[1])
        elif e.action.name == SET_MCAST_GROUP:
            g = groups.get(params.get("group", -1))
            if g is not None and any(r.port == port for r in g.replicas):
                cut.add(e.key[1])
    return len(watched), len(cut)
