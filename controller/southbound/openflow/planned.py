"""The planned class on OpenFlow switches (`southbound.planned_dscp`; docs/controller.md,
"The planned class"): the controller marks the planned traffic at its edge and
nothing else, so that the fabric's queues can serve it first.

Which packets are planned is `southbound.planned.job_streams`' decision; this
module turns it into entries at each host's edge port. With the option set
(`translate(planned_dscp=...)`):

- every known-source IPv4 flow (table 0) sets the DSCP to 0 before table 1
  (`reset_actions`): a host cannot claim the class by marking its own packets;
- "multicast": the job's flow at the PS's edge switch (table 1) already carries
  the job's meter; its actions set the DSCP after it (`translate._job_entries`),
  so only what the meter passes is marked;
- "unicast": per worker the PS addresses itself, at the PS's edge port, table 0,
  priority `PRIORITY_PLANNED` (above the known-source flows): in_port, eth_src
  and ipv4_src of the PS, ipv4_dst of the worker, UDP to the job's port -> a
  meter of its own at the job's rate (`meter_for_rate`, the headers' factor the
  planner reserved, as for the multicast meter), set the DSCP, go to table 1.
  These copies were not policed before: they matched only the shared unicast
  flows (and still do when the option is off);
- "feedback": per worker, at the worker's edge port, table 0, the same priority:
  in_port, eth_src and ipv4_src of the worker, ipv4_dst of the PS, UDP from
  the job's port -> a meter of `FEEDBACK_KBPS` (per worker and job), set the
  DSCP, go to table 1.

A meter's DROP band drops what exceeds it (Open vSwitch has no DSCP-remark
band): a PS sending above its plan, or a worker flooding its PS from the job's
port, loses the excess instead of taking the class from others.

Fragments: a NORM segment larger than the MTU (`segment`, not the client's
default) leaves as IP fragments, and only the first carries the UDP header:
the multicast stream's flow matches no port and marks them all, the unicast
and feedback flows match the first fragment alone (the others are reset to 0
and go as best effort).

Budgets: none of these entries counts against a switch's multicast budgets
(G(v), F(v)), which the planner fills and `translate` checks: like the
known-source flows they are edge entries, one or two per (job, host) at the
host's own switch. Their meters come from the same id allocation as the jobs'
(owners `unicast_owner`, `feedback_owner`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping

from controller.addressing.ports import PortMap
from controller.algorithm.model import JobPlan, Topology
from controller.southbound.ids import IdAllocation
from controller.southbound.openflow.entries import (
    COOKIE_KIND_PLANNED,
    ETH_TYPE_IPV4,
    IP_PROTO_UDP,
    PRIORITY_PLANNED,
    TABLE_FORWARD,
    TABLE_SOURCE,
    Action,
    FlowEntry,
    GotoTable,
    Meter,
    MeterEntry,
    SetField,
    make_cookie,
)
from controller.southbound.planned import PlannedStream, job_streams

# A worker's NACKs and ACKs to one PS: a few 50-300-byte packets per repair round
# and watermark (NORM suppresses duplicate NACKs and answers each ACK request once).
# 64 kbit/s is 8 kB/s, 50-150 such packets a second, with a burst of ten full
# frames: far above a receiver's feedback, and a flooding worker adds at most that
# to the class per job it works for.
FEEDBACK_KBPS = 64
FEEDBACK_BURST_KB = 120


def reset_actions(dscp: int | None) -> tuple[Action, ...]:
    """The actions of a known-source IPv4 flow: go to table 1, after resetting
    the DSCP to 0 when the planned class is on (`dscp` not None)."""
    if dscp is None:
        return (GotoTable(TABLE_FORWARD),)
    return (SetField("ip_dscp", 0), GotoTable(TABLE_FORWARD))


def unicast_owner(job_id: str, worker: str) -> str:
    """The meter id owner of a job's unicast session to `worker` (at the PS's switch)."""
    return f"{job_id}/planned/{worker}"


def feedback_owner(job_id: str, worker: str) -> str:
    """The meter id owner of `worker`'s feedback to its job's PS (at the worker's switch)."""
    return f"{job_id}/feedback/{worker}"


def feedback_meter(meter_id: int) -> MeterEntry:
    return MeterEntry(meter_id, FEEDBACK_KBPS, FEEDBACK_BURST_KB)


def _edges(topo: Topology, ports: PortMap, keep: frozenset[int], host: str) -> list[tuple[int, int]]:
    """(switch, port) of every link of `host` to a switch of `keep`."""
    h = topo.index[host]
    return sorted((v, ports[(v, h)]) for v in topo.neighbors[h] if v in keep)


def _owner(s: PlannedStream) -> str | None:
    if s.kind == "unicast":
        assert s.receiver is not None
        return unicast_owner(s.job_id, s.receiver)
    if s.kind == "feedback":
        return feedback_owner(s.job_id, s.sender)
    return None  # the multicast stream: the job's own meter


def wanted_meters(
    topo: Topology, ports: PortMap, keep: frozenset[int], jp: JobPlan, group_ip: str, ips: Mapping[str, str]
) -> dict[str, list[str]]:
    """Switch name -> the meter owners of one job's planned streams there."""
    out: dict[str, list[str]] = defaultdict(list)
    for s in job_streams(topo, jp, group_ip, ips):
        owner = _owner(s)
        if owner is not None:
            for v, _ in _edges(topo, ports, keep, s.sender):
                out[topo.name(v)].append(owner)
    return out


def job_marks(
    topo: Topology,
    ports: PortMap,
    keep: frozenset[int],
    ips: Mapping[str, str],
    macs: Mapping[str, str],
    jp: JobPlan,
    group_ip: str,
    dscp: int,
    meters: IdAllocation,
    meter_for_rate: Callable[[int, float], MeterEntry],
) -> tuple[dict[int, frozenset[FlowEntry]], dict[int, frozenset[MeterEntry]], tuple[tuple[int, str, int], ...]]:
    """One job's planned-class flows and meters by switch index (the unicast and
    feedback streams; the multicast stream is marked on the job's own flow), and
    their meter ids as (switch, owner, id). `meter_for_rate(id, rate)` is the
    job meter's (`translate.meter_for_rate`)."""
    flows: dict[int, set[FlowEntry]] = defaultdict(set)
    out_meters: dict[int, set[MeterEntry]] = defaultdict(set)
    ids: list[tuple[int, str, int]] = []
    cookie = make_cookie(COOKIE_KIND_PLANNED, group_ip)
    for s in job_streams(topo, jp, group_ip, ips):
        owner = _owner(s)
        if owner is None:
            continue
        for v, port in _edges(topo, ports, keep, s.sender):
            mid = meters.get(topo.name(v), owner)
            ids.append((v, owner, mid))
            if s.kind == "unicast":
                assert s.rate is not None and s.udp_dst is not None
                out_meters[v].add(meter_for_rate(mid, s.rate))
                transport: tuple[tuple[str, object], ...] = (("udp_dst", s.udp_dst),)
            else:
                assert s.udp_src is not None
                out_meters[v].add(feedback_meter(mid))
                transport = (("udp_src", s.udp_src),)
            match = (("in_port", port), ("eth_type", ETH_TYPE_IPV4), ("eth_src", macs[s.sender]), ("ipv4_src", s.src),
                     ("ipv4_dst", s.dst), ("ip_proto", IP_PROTO_UDP)) + transport
            flows[v].add(FlowEntry(TABLE_SOURCE, PRIORITY_PLANNED, match,
                                   (Meter(mid), SetField("ip_dscp", dscp), GotoTable(TABLE_FORWARD)), cookie))
    return ({v: frozenset(f) for v, f in flows.items()}, {v: frozenset(m) for v, m in out_meters.items()},
            tuple(sorted(ids)))
