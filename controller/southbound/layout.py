"""What both switch translations (OpenFlow, P4Runtime) need from a plan, backend-free.

`host_addressing` checks and gathers every host's IPv4 and MAC address (learned
MACs win); `job_layouts` checks every job's group address and turns each job's
structure into a `JobLayout`: its tree as parent/children maps, the unicast
branches its switches emit, and which switches replicate or meter. The
backends (`openflow.translate`, `p4runtime.translate`) turn layouts into their own entries;
`meter_burst_bits` is the burst of every job meter, in both.
"""

from __future__ import annotations

import ipaddress
import math
from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass

from controller.algorithm.model import JobPlan, Plan, Topology
from controller.algorithm.network import Network

from controller.addressing.hosts import HostAddress, normalise_mac
from controller.addressing.ports import PortMap
from controller.algorithm.wire import ETHERNET_HEADER, MTU


# A job meter's burst: METER_BURST_S of its frames' rate, and at least
# METER_MIN_BURST_FRAMES frames of MTU bytes. A sender paced at its plan on a busy
# host runs late and catches up with a burst, and a software switch takes a queue's
# packets in batches (Open vSwitch's userspace datapath up to 32 per poll): at a
# low rate those bursts are packets, not time. With ten frames (the earlier
# minimum) the meters of the iteration benchmark (1.1 and 2.2 Mbit/s) dropped 80
# packets in two runs, each a NORM repair round; with this rule, none
# (docs/emulation.md, "The meters' burst"). The planner's rates are averages: a
# burst of this size waits in a queue, and over any longer time the meter holds
# the job to its rate.
METER_BURST_S = 0.1
METER_MIN_BURST_FRAMES = 32


def meter_burst_bits(frame_rate_bps: float) -> int:
    """The burst, in bits of frames, of a job meter policing `frame_rate_bps`
    (`wire_rate` of the plan): `METER_BURST_S` of that rate, at least
    `METER_MIN_BURST_FRAMES` frames of MTU bytes with their Ethernet header."""
    if not frame_rate_bps > 0:
        raise ValueError(f"a meter's rate must be > 0 bit/s, got {frame_rate_bps!r}")
    frames = METER_MIN_BURST_FRAMES * (MTU + ETHERNET_HEADER) * 8
    return max(frames, math.ceil(frame_rate_bps * METER_BURST_S))


def host_addressing(
    topo: Topology, addresses: Mapping[str, HostAddress], host_macs: Mapping[str, str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """(host -> IPv4, host -> MAC) for every host of `topo`; a MAC in `host_macs`
    (learned) overrides the configured one. Raises ValueError for a host without
    an address or a MAC given for an unknown host."""
    ips: dict[str, str] = {}
    macs: dict[str, str] = {}
    for h in topo.hosts:
        name = topo.name(h)
        addr = addresses.get(name)
        if addr is None:
            raise ValueError(f"no address for host {name}")
        ips[name] = addr.ip
        macs[name] = addr.mac
    for name, mac in (host_macs or {}).items():
        if name not in macs:
            raise ValueError(f"MAC given for unknown host {name}")
        macs[name] = normalise_mac(mac)
    return ips, macs


@dataclass
class JobLayout:
    """One job's tree as the translation needs it (node indices)."""

    job_id: str
    rate: float
    group_ip: str
    parent: dict[int, int]
    children: dict[int, list[int]]
    branches: dict[int, list[int]]  # switch emitter -> workers
    switches: set[int]
    replicating: set[int]
    metered: set[int]


def job_layout(net: Network, jp: JobPlan, group_ip: str) -> JobLayout | None:
    """The layout of one job's plan, checked against its structure; None if the
    switches carry nothing for it (rate 0, or a pure unicast job whose PS sends
    every copy itself). Raises ValueError for a structure that is not a tree from
    the PS, or whose entries/groups disagree with the tree."""
    topo = net.topo
    job, s = jp.job, jp.structure
    if jp.rate <= 0:
        return None
    if not s.tree and not s.branches and job.workers:
        raise ValueError(f"job {job.id}: its structure has no tree (a plan read from a file cannot be translated)")
    if not s.tree:
        return None  # pure unicast: the PS sends every copy itself
    ps = topo.index[job.ps]
    parent: dict[int, int] = {}
    children: dict[int, list[int]] = defaultdict(list)
    for p, c in s.tree:
        if c in parent or c == ps:
            raise ValueError(f"job {job.id}: its tree is not an arborescence from the PS ({topo.name(c)})")
        if p != ps and not topo.is_switch(p):
            raise ValueError(f"job {job.id}: host {topo.name(p)} cannot forward in its tree")
        parent[c] = p
        children[p].append(c)
    for v in list(children):
        if v != ps and v not in parent:
            raise ValueError(f"job {job.id}: tree node {topo.name(v)} is not reached from the PS")
    switches = {c for c in parent if topo.is_switch(c)}
    branches: dict[int, list[int]] = defaultdict(list)
    for emitter, worker in s.branches:
        if emitter == ps:
            continue
        if emitter not in switches:
            raise ValueError(f"job {job.id}: unicast branch emitted by {topo.name(emitter)}, not a switch of its tree")
        branches[emitter].append(worker)
    if switches != set(s.entries):
        raise ValueError(f"job {job.id}: the switches of its tree differ from its entries")
    replicating = {v for v in switches if len(children[v]) + len(branches[v]) >= 2}
    if replicating != set(s.groups):
        raise ValueError(f"job {job.id}: its replicating switches differ from its groups")
    metered = {c for c in children[ps] if topo.is_switch(c)}
    return JobLayout(job.id, jp.rate, group_ip, parent, children, branches, switches, replicating, metered)



def group_ip_of(job_id: str, group_addresses: Mapping[str, str | ipaddress.IPv4Address], seen: dict[str, str]) -> str:
    """The group address of a job, checked: given, multicast, and not another
    job's (`seen`: address -> job, filled in as jobs are checked)."""
    if job_id not in group_addresses:
        raise ValueError(f"job {job_id} has no group address")
    gip = ipaddress.IPv4Address(group_addresses[job_id])
    if not gip.is_multicast:
        raise ValueError(f"group address {gip} of job {job_id} is not multicast")
    other = seen.setdefault(str(gip), job_id)
    if other != job_id:
        raise ValueError(f"jobs {other} and {job_id} have the same group address {gip}")
    return str(gip)


def job_layouts(
    net: Network, plan: Plan, group_addresses: Mapping[str, str | ipaddress.IPv4Address]
) -> list[JobLayout]:
    """The layouts of the plan's jobs that the switches carry, in plan order.
    Raises ValueError for a job without a group address, an address that is not
    multicast, or two jobs sharing one."""
    layouts: list[JobLayout] = []
    seen: dict[str, str] = {}
    for jp in plan.jobs:
        lay = job_layout(net, jp, group_ip_of(jp.job.id, group_addresses, seen))
        if lay is not None:
            layouts.append(lay)
    return layouts


def host_attachments(topo: Topology, ports: PortMap, switches: Collection[int]) -> Iterator[tuple[str, int, int]]:
    """(host name, switch index, port) of every link from a switch of `switches`
    to a host: where each host's packets come in (both translations check its
    source there)."""
    for h in topo.hosts:
        name = topo.name(h)
        for v in topo.neighbors[h]:
            if v in switches:
                yield name, v, ports[(v, h)]
