"""Which packets of which host are planned traffic: the decision behind the
controller's priority class (`southbound.planned_dscp`, docs/controller.md,
"The planned class"), backend-free so that every backend marks the same packets.

A job with rate > 0 owns, on the wire (the client's NORM sessions,
`controller.client.broadcast`; their ports checked by a capture in
tests/test_broadcast.py):
- "multicast": the PS's stream to the job's group address (a job with a tree):
  UDP to the job's port (`port_for(group)`), from an ephemeral port;
- "unicast": the PS's session to each worker it addresses itself (the plan's
  branches emitted by the PS, the client's `ps_unicast`): UDP from the PS to
  the worker's address, to the job's port, from an ephemeral port;
- "feedback": every worker's NACKs and ACKs, unicast UDP to the PS, from the
  job's port (the client's receivers send from it) to whichever port the PS's
  session sends from.

Everything else a host sends is not planned. `job_streams` lists a job's
streams; a backend decides how to police and mark each (the OpenFlow one:
`openflow.planned`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.algorithm.model import JobPlan, Topology
from controller.client.normwire import port_for

STREAM_KINDS = ("multicast", "unicast", "feedback")


@dataclass(frozen=True)
class PlannedStream:
    """One planned stream of a job: the packets host `sender` sends with IPv4
    source `src` and destination `dst`, UDP, to port `udp_dst` ("multicast",
    "unicast") or from port `udp_src` ("feedback"). `rate` is the job's planned
    (payload) rate for the PS's streams, None for the workers' feedback."""

    job_id: str
    kind: str
    sender: str
    receiver: str | None  # the worker ("unicast"), the PS ("feedback"), None for the group
    src: str
    dst: str
    udp_src: int | None
    udp_dst: int | None
    rate: float | None

    def __post_init__(self) -> None:
        if self.kind not in STREAM_KINDS:
            raise ValueError(f"unknown planned stream kind {self.kind!r}")


def job_streams(topo: Topology, jp: JobPlan, group_ip: str, ips: Mapping[str, str]) -> tuple[PlannedStream, ...]:
    """The planned streams of one job (none at rate 0), in a fixed order: its
    multicast stream if it has a tree, the PS's unicast sessions by worker name,
    then every worker's feedback by worker name. `ips`: host name -> IPv4."""
    if jp.rate <= 0:
        return ()
    job, s = jp.job, jp.structure
    port = port_for(group_ip)
    ps_ip = ips[job.ps]
    out: list[PlannedStream] = []
    if s.tree:
        out.append(PlannedStream(job.id, "multicast", job.ps, None, ps_ip, group_ip, None, port, jp.rate))
    ps = topo.index[job.ps]
    direct = sorted({topo.name(w) for e, w in s.branches if e == ps})
    for w in direct:
        out.append(PlannedStream(job.id, "unicast", job.ps, w, ps_ip, ips[w], None, port, jp.rate))
    for w in sorted(set(job.workers)):
        out.append(PlannedStream(job.id, "feedback", w, job.ps, ips[w], ps_ip, port, None, None))
    return tuple(out)
