"""The REST API of the controller (FastAPI), JSON everywhere; OpenAPI at /openapi.json.

`create_app(service, config)` builds the app; `serve(service, config)` runs it with
uvicorn in a thread and returns an `ApiServer` that can be stopped.

Endpoints
    POST   /jobs          register a job; 201 with the job, its group address and its
                          planned rate, mode and structure once a plan includes it
                          (202 with ``"state": "pending"`` if no plan did within
                          `planner.wait_s`); 200 with the job as it is if a job with
                          this id and the same spec exists (a retry), 409 if its spec differs
    GET    /jobs          every job, in creation order
    GET    /jobs/{id}     one job (404 if unknown)
    DELETE /jobs/{id}     204 once a plan without the job is in place (404 if unknown)
    GET    /plan          the current plan, in the plan format of docs/architecture.md, Formats
    GET    /topology      the topology, in the topology format of docs/architecture.md, Formats
    GET    /hosts         every host's name, IPv4 and MAC address
    GET    /switches      per switch: connected, groups and entries used, budgets
    GET    /metrics       Prometheus text
    GET    /healthz       liveness (never needs the token); `role`: standalone, leader or follower
    GET    /cluster       several instances on one etcd store (docs/ha.md): this instance's
                          role, the leader (its instance id, API URL and term), the lease
    GET    /              the web UI, /ui/... its assets (no token: no secrets in them)
    GET    /events        server-sent events for the UI: a new plan, periodic ticks (ui.py)

Every 4xx and 5xx answer is ``{"error": {"code", "message", "field"}}``: FastAPI's
own validation errors, malformed JSON, unknown routes and methods included.
Request bodies are limited to `api.max_body_bytes` (413), checked against
Content-Length and against the bytes actually received. When `api.host` is not
a loopback address every endpoint except /healthz and the UI's static files requires
``Authorization: Bearer <api.token>`` (401 otherwise).

With several instances (`store.backend: etcd`, docs/ha.md) a follower serves
reads and answers every write (any method but GET, HEAD and OPTIONS) with 307 to
the same path at the leader's URL, or with 503 and ``Retry-After`` while no
leader is known. A write the store refuses because this instance has just lost
the leadership (or etcd did not answer) is also a 503 with ``Retry-After``: the
client retries with the same job id, which registers the job exactly once.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from controller.algorithm.model import Instance, JobPlan, Topology
from controller.config import Config
from controller.config.instance import instance_to_dict, plan_to_dict
from controller.core.errors import ServiceError, Unavailable
from controller.core.jobs import JOB_ID_PATTERN, JobStatus
from controller.core.served import PlanSummary
from controller.core.service import ControllerService
from controller.core.sources import fact_sources
from controller.store.base import StoreError
from controller.store.etcd import Fenced, StoreUnavailable
from controller.northbound.metrics import CONTENT_TYPE, make_registry, render
from controller.northbound.ui import add_ui, is_public

log = logging.getLogger(__name__)

# -- models ---------------------------------------------------------------------------

_HOST_FIELD = dict(min_length=1, max_length=255, description="A host name of the topology or a host's IPv4 address")


class JobRequest(BaseModel):
    """A job to register. Unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str | None = Field(None, pattern=JOB_ID_PATTERN, description="Job id; generated when absent")
    ps: str = Field(**_HOST_FIELD)
    workers: list[str] = Field(min_length=1, description="Worker hosts (names or IPv4 addresses), distinct, not the PS")
    demand: float = Field(gt=0, allow_inf_nan=False, description="The rate the job wants, bit/s")
    weight: float | None = Field(None, gt=0, allow_inf_nan=False, description="Weight (default 1)")


class EdgeOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    from_: str = Field(alias="from")
    to: str
    copies: int


class BranchOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    from_: str = Field(alias="from", description="The emitter: the PS, or a switch of the tree that rewrites a copy")
    to: str = Field(description="The worker the unicast copy is addressed to")


class StructureOut(BaseModel):
    edges: list[EdgeOut] = Field(description="Directed edges the job's stream crosses, with copy counts")
    groups: list[str] = Field(description="Switches where the job replicates (uses a group)")
    entries: list[str] = Field(description="Switches that forward the job's multicast packets (use an entry)")
    branches: list[BranchOut] = Field(description="Unicast copies: who emits each and to which worker")
    ps_unicast: list[str] = Field(
        description="Workers the PS itself sends a unicast copy to (at `rate`); the PS also sends to "
        "`group_address` when `entries` is not empty"
    )


class ChurnOut(BaseModel):
    jobs: int = Field(description="Jobs of the previous plan whose structure this plan changed")
    entries_written: int = Field(description="Switch entries the backends' translations of this plan added, changed or removed")
    entries_by_backend: dict[str, int] = Field(default_factory=dict, description="entries_written per backend (openflow, p4runtime)")


class PlanSummaryOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    generation: int
    algorithm: str
    lambda_: float = Field(alias="lambda")
    lp_bound: float | None = Field(description="The LP bound of this job set; null until a full plan computed it")
    churn: ChurnOut


class JobOut(BaseModel):
    id: str
    ps: str
    workers: list[str]
    demand: float
    weight: float
    group_address: str = Field(description="The job's IPv4 multicast group: the PS sends to it, workers join it")
    state: Literal["planned", "pending", "failed"] = Field(
        description="'pending' until a plan includes the job; 'failed' if its hosts were never found (`error`)"
    )
    error: str | None = Field(default=None, description="Why the job failed (state 'failed')")
    missing_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts of the job the controller has not located yet (learned network only): it waits for them",
    )
    rate: float | None = Field(description="Planned rate in bit/s: the PS sends at this rate")
    mode: Literal["multicast", "hybrid", "unicast"] | None
    structure: StructureOut | None
    plan: PlanSummaryOut | None = Field(None, description="The plan being served when this answer was made (null before the first)")


class JobList(BaseModel):
    jobs: list[JobOut]


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None


class ErrorBody(BaseModel):
    error: ErrorDetail


class PlanJobOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    rate: float
    mode: Literal["multicast", "hybrid", "unicast"]
    edges: list[EdgeOut]
    groups: list[str]
    entries: list[str]


class PlanSwitchOut(BaseModel):
    """A switch's table use; an absent capacity means unlimited."""

    id: str
    groups_used: int
    group_capacity: int = Field(None, description="Absent: unlimited")  # type: ignore[assignment]
    entries_used: int
    entry_capacity: int = Field(None, description="Absent: unlimited")  # type: ignore[assignment]


class PlanOut(BaseModel):
    """The plan format of docs/architecture.md, Formats."""

    model_config = ConfigDict(populate_by_name=True)

    algorithm: str
    objective: str
    lambda_: float = Field(alias="lambda")
    throughput: float
    lp_bound: float | None
    kappa: int
    beta: float | None
    runtime_s: float
    jobs: list[PlanJobOut]
    switches: list[PlanSwitchOut]
    generation: int | None = Field(None, description="The controller's plan generation")
    computed_at: float | None = Field(None, description="When the controller installed this plan (Unix time, seconds)")
    churn: ChurnOut | None = None


class NodeSourceOut(BaseModel):
    id: str
    source: Literal["config", "openflow", "p4runtime", "arp_ipv4"] = Field(
        description="config: the declared topology; openflow / p4runtime: a learned switch, from its connection; "
        "arp_ipv4: a learned host, from its packets")
    group_capacity_source: Literal["config", "switch", "p4info", "table_full"] | None = None
    entry_capacity_source: Literal["config", "switch", "p4info", "table_full"] | None = None


class LinkSourceOut(BaseModel):
    a: str
    b: str
    source: Literal["config", "lldp", "arp_ipv4"]
    a_port: int | None
    a_port_source: Literal["lldp", "arp_ipv4", "default"] | None = Field(
        description="lldp / arp_ipv4: seen on the wire; default: the declared topology's default port map; null: a host end")
    b_port: int | None
    b_port_source: Literal["lldp", "arp_ipv4", "default"] | None
    capacity_source: Literal["config", "port"]


class SourcesOut(BaseModel):
    network: Literal["config", "learned"]
    nodes: list[NodeSourceOut]
    links: list[LinkSourceOut]


class NodeOut(BaseModel):
    id: str
    kind: Literal["switch", "host"]
    group_capacity: int = Field(None, description="Absent: unlimited")  # type: ignore[assignment]
    entry_capacity: int = Field(None, description="Absent: unlimited")  # type: ignore[assignment]


class LinkOut(BaseModel):
    a: str
    b: str
    capacity: float = Field(description="bit/s in each direction")


class ParallelLinkOut(BaseModel):
    a: str
    a_port: int
    b: str
    b_port: int


class TopologyOut(BaseModel):
    """The topology format of docs/architecture.md, Formats; with `?sources=true`,
    `sources` too (then it is no longer an instance file's topology)."""

    nodes: list[NodeOut]
    links: list[LinkOut]
    sources: SourcesOut | None = Field(None, description="Only with ?sources=true: where each fact comes from")


class HostOut(BaseModel):
    id: str
    ip: str
    mac: str = Field(description="Learned from the host's ARP packets, else configured (or the default)")
    switch: str = Field(description="The switch the topology attaches the host to")
    port: int = Field(description="Its port on that switch (learned, or the default port map's)")
    learned: bool = Field(description="True once the host's ARP was seen at that switch")


class LinkEndOut(BaseModel):
    node: str
    port: int | None = Field(description="The port on a switch end (null for a host end)")
    discovered: bool = Field(description="Port learned from the wire (LLDP, or a host's ARP)")


class LinkRateOut(BaseModel):
    a_to_b: float | None = Field(description="bit/s from end a to end b (null: not measured)")
    b_to_a: float | None = Field(description="bit/s from end b to end a (null: not measured)")


class LinkStatusOut(BaseModel):
    a: LinkEndOut
    b: LinkEndOut
    capacity: float = Field(description="bit/s in each direction, as plans use it")
    capacity_source: Literal["config", "port"] = Field(
        "config", description="config: the config states it (or gives only a default and no switch end reports a "
        "speed); port: the smaller of the speeds the switch ends report for their ports"
    )
    up: bool
    rate_bps: LinkRateOut | None = Field(
        None, description="Measured load, bit/s in each direction, from OpenFlow port statistics "
        "(southbound.openflow.port_stats_s); null when no end of the link reported recently (P4 switches never do)"
    )
    held_down_s: float | None = Field(
        None, description="Seconds left of the hold-down of a link that came up again and is not yet back in the "
        "plan (planner.link_hold_down_s); null when the link is in the plan or down"
    )


class UnexpectedLinkOut(BaseModel):
    switch: str
    port: int
    neighbour: str


class LinkList(BaseModel):
    links: list[LinkStatusOut]
    unexpected: list[UnexpectedLinkOut] = Field(description="Links seen by LLDP that the topology does not have (ignored)")
    missing: list[list[str]] = Field(
        default_factory=list,
        description="Declared links between connected OpenFlow switches that LLDP has not seen from either end",
    )
    source: Literal["config", "learned"] = Field(
        description="Where the topology comes from: the config's topology section, or learned from the switches"
    )
    waiting: list[str] = Field(
        default_factory=list,
        description="Learned switches and hosts not connected to the planned network yet (their links not seen)",
    )
    parallel_links: list[ParallelLinkOut] = Field(
        default_factory=list, description="Learned links between switches that already have one (not used)"
    )


class UnexpectedHostOut(BaseModel):
    ip: str
    mac: str
    switch: str
    port: int
    reason: Literal["unknown_address", "elsewhere"] = Field(
        description="unknown_address: no configured host has this address; elsewhere: a configured host seen at a "
        "switch the topology does not attach it to")


class HostList(BaseModel):
    hosts: list[HostOut]
    unexpected: list[UnexpectedHostOut] = Field(
        default_factory=list, description="Hosts seen where the declared topology has none (ignored by plans; "
        "always empty in a learned network)")


class SwitchOut(BaseModel):
    id: str
    connected: bool = Field(description="Connected over OpenFlow, or over P4Runtime as the primary client")
    groups_used: int
    group_capacity: int | None = Field(description="The effective group budget G(v): the smallest of the configured, reported and learned ones (null: unlimited)")
    entries_used: int
    entry_capacity: int | None = Field(description="The effective entry budget F(v), as group_capacity (null: unlimited)")
    backend: Literal["openflow", "p4runtime"] = Field(description="The southbound that programs the switch (config `southbound`)")
    flows: int = Field(description="Flows in the switch's desired OpenFlow state (0 for a P4Runtime switch)")
    meters: int = Field(description="Job meters in the switch's desired OpenFlow state (the packet-in meter not counted; 0 for a P4Runtime switch)")
    learned_group_capacity: int | None = Field(
        None, description="Group budget learned from an OpenFlow 'out of groups/buckets' error (null: none; kept until restart)"
    )
    learned_entry_capacity: int | None = Field(
        None, description="Entry budget learned from an OpenFlow 'table full' error for a multicast flow (null: none)"
    )
    other_primary: bool = Field(
        False, description="P4Runtime: the switch answers but another client is primary for it, so the controller "
        "does not program it (connected is false); it re-arbitrates periodically"
    )
    configured_group_capacity: int | None = Field(None, description="Group budget from the config (null: none)")
    configured_entry_capacity: int | None = Field(None, description="Entry budget from the config (null: none)")
    reported_group_capacity: int | None = Field(
        None, description="Groups (type ALL) the switch says it holds: OpenFlow OFPMP_GROUP_FEATURES, or the P4 "
        "target's group-id range (null: not reported)"
    )
    reported_entry_capacity: int | None = Field(
        None, description="Entries of the multicast forwarding table the switch says it holds: OpenFlow "
        "OFPMP_TABLE_FEATURES max_entries, or the P4Info table size (null: not reported)"
    )
    group_capacity_source: Literal["config", "switch", "p4info", "table_full"] | None = Field(
        None, description="Where the effective group_capacity (the smallest of configured, reported, learned) "
        "comes from (null: unlimited)"
    )
    entry_capacity_source: Literal["config", "switch", "p4info", "table_full"] | None = Field(
        None, description="Where the effective entry_capacity comes from (null: unlimited)"
    )
    reported_port_speeds: dict[str, int] = Field(
        default_factory=dict, description="Port number -> speed in bit/s, as the switch reports it (OpenFlow "
        "OFPMP_PORT_DESC and port status: curr_speed, else max_speed; 0: the port states none)"
    )


class SwitchList(BaseModel):
    switches: list[SwitchOut]
    unexpected: list[str] = Field(
        default_factory=list, description="Switches that connected with an id the declared topology does not give "
        "(of:<dpid>; ignored, never programmed)")


class Health(BaseModel):
    status: Literal["ok"]
    jobs: int
    plan_generation: int
    replan_pending: bool
    last_error: str | None
    plan_algorithm: str | None = Field(
        default=None, description="What made the served plan: the configured algorithm, or 'incremental' (admission)"
    )
    churn_jobs: int = Field(default=0, description="Jobs of the previous plan whose structure the last plan changed")
    entries_written: int = Field(default=0, description="Switch entries the backends' translations of the last plan added, changed or removed")
    role: Literal["standalone", "leader", "follower"] = Field(
        default="standalone", description="standalone (SQLite store), or leader / follower of several instances (docs/ha.md)")


class ClusterLeader(BaseModel):
    instance: str
    url: str | None
    term: int


class ClusterOut(BaseModel):
    backend: Literal["sqlite", "etcd"]
    role: Literal["standalone", "leader", "follower"]
    instance: str | None = None
    url: str | None = None
    term: int | None = Field(default=None, description="this instance's term while it leads")
    leader: ClusterLeader | None = None
    lease_ttl_s: int | None = None
    last_takeover: dict | None = Field(default=None, description="this instance's last takeover: term, Unix time, seconds per step")


# -- errors ----------------------------------------------------------------------------

_STATUS = {"duplicate_id": 409, "not_found": 404}


def error_response(status: int, code: str, message: str, field: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "field": field}}, status, headers=headers)


def _service_status(e: ServiceError) -> int:
    if isinstance(e, Unavailable):
        return 503
    if e.code in _STATUS:
        return _STATUS[e.code]
    if e.code == "store_refused":
        return 409
    return 422


def _field_of(loc: tuple | list) -> str | None:
    parts = list(loc)
    if parts and parts[0] == "body":
        parts = parts[1:]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or None


# pydantic error on a field -> the code the service gives for the same mistake
_FIELD_CODES = {"id": "invalid_id", "demand": "invalid_demand", "weight": "invalid_weight"}


def _validation_response(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {"type": "invalid", "loc": ("body",), "msg": "invalid request"}
    kind, loc = first.get("type", ""), tuple(first.get("loc", ()))
    field = _field_of(loc)
    if kind == "json_invalid":
        return error_response(400, "invalid_json", "the request body is not valid JSON")
    if loc == ("body",):
        if kind == "missing":
            return error_response(400, "invalid_json", "the request body is empty; expected a JSON object")
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if not (ctype == "application/json" or ctype.endswith("+json")):
            return error_response(
                415, "unsupported_media_type", "the request body must be JSON (Content-Type: application/json)"
            )
        return error_response(422, "invalid_type", "the request body must be a JSON object")
    if kind == "extra_forbidden":
        return error_response(422, "unknown_field", f"unknown field {field!r}", field)
    if kind == "missing":
        return error_response(422, "missing_field", f"missing field {field!r}", field)
    top = loc[1] if len(loc) > 1 and loc[0] == "body" else None
    if top == "workers" and kind == "too_short":
        return error_response(422, "empty_workers", "a job needs at least one worker", field)
    code = _FIELD_CODES.get(top, "invalid_value")
    if code in ("invalid_demand", "invalid_weight"):
        return error_response(422, code, f"{top} must be a positive finite number", field)
    if code == "invalid_id":
        return error_response(422, code, f"a job id must match {JOB_ID_PATTERN}", field)
    message = first.get("msg", "invalid value")
    return error_response(422, code, f"{field}: {message}" if field else message, field)


# -- the guard: token and body size ---------------------------------------------------------

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
RETRY_AFTER_S = "1"


class _FollowerGate:
    """Pure ASGI middleware (several instances, docs/ha.md): on a follower, a write
    goes to the leader (307, same path and query) or, with no leader, is refused
    with a retryable 503."""

    def __init__(self, app: ASGIApp, cluster) -> None:
        self.app = app
        self.cluster = cluster

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method", "GET") in SAFE_METHODS or self.cluster.leading:
            await self.app(scope, receive, send)
            return
        leader = self.cluster.leader_url()
        if leader is None:
            await error_response(503, "no_leader", "no controller instance leads right now (an election is under way); retry",
                                 headers={"Retry-After": RETRY_AFTER_S})(scope, receive, send)
            return
        target = leader + scope.get("path", "/")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        await error_response(307, "not_leader", f"this instance is a follower; the leader is {leader}",
                             headers={"Location": target})(scope, receive, send)


class _Guard:
    """Pure ASGI middleware: bearer token (if any), then the body size limit.

    The body is read here, counted, and replayed to the app, so a body that is
    larger than announced (or has no Content-Length) is refused as well.
    """

    OPEN_PATHS = frozenset({"/healthz"})

    def __init__(self, app: ASGIApp, token: str | None, max_body: int) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body = max_body

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        path = scope.get("path", "")
        if self.token is not None and path not in self.OPEN_PATHS and not is_public(path):
            given = headers.get("authorization", b"")
            scheme, _, credential = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(credential.strip(), self.token):
                await error_response(
                    401, "unauthorized", "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
                )(scope, receive, send)
                return
        length = headers.get("content-length")
        if length is not None:
            try:
                announced = int(length)
            except ValueError:
                await error_response(400, "bad_request", "invalid Content-Length")(scope, receive, send)
                return
            if announced > self.max_body:
                await self._too_large(scope, receive, send)
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_body:
                await self._too_large(scope, receive, send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: dict, receive: Callable, send: Callable) -> None:
        await error_response(
            413, "body_too_large", f"the request body is larger than {self.max_body} bytes"
        )(scope, receive, send)


# -- conversions -----------------------------------------------------------------------------


def _edges(jp: JobPlan, topology: Topology) -> list[dict]:
    out = []
    for e, count in jp.structure.copies:
        edge = topology.edges[e]
        out.append({"from": topology.name(edge.tail), "to": topology.name(edge.head), "copies": int(count)})
    return out


def summary_json(summary: PlanSummary | None) -> dict[str, Any] | None:
    if summary is None:
        return None
    return {"generation": summary.generation, "algorithm": summary.algorithm, "lambda": summary.lam,
            "lp_bound": summary.lp_bound, "churn": _churn_json(summary)}


def _churn_json(summary: PlanSummary) -> dict[str, Any]:
    return {"jobs": summary.churn_jobs, "entries_written": summary.entries_written,
            "entries_by_backend": dict(summary.entries_by_backend)}


def job_json(status: JobStatus, summary: PlanSummary | None = None) -> dict[str, Any]:
    """The JSON of a job (`JobOut`), with the served plan's `summary`."""
    j, jp, topology = status.job, status.planned, status.topology
    structure = None
    if jp is not None and topology is not None:
        s = jp.structure
        structure = {
            "edges": _edges(jp, topology),
            "groups": sorted(topology.name(v) for v in s.groups),
            "entries": sorted(topology.name(v) for v in s.entries),
            "branches": [
                {"from": topology.name(e), "to": topology.name(w)}
                for e, w in sorted(s.branches, key=lambda b: (topology.name(b[1]), topology.name(b[0])))
            ],
            "ps_unicast": sorted(topology.name(w) for e, w in s.branches if topology.name(e) == j.ps),
        }
    return {
        "id": j.id,
        "ps": j.ps,
        "workers": list(j.workers),
        "demand": j.demand,
        "weight": j.weight,
        "group_address": status.group_address,
        "state": "failed" if status.error is not None else "planned" if jp is not None else "pending",
        "error": status.error,
        "missing_hosts": list(status.missing_hosts),
        "rate": jp.rate if jp is not None else None,
        "mode": jp.structure.mode if jp is not None else None,
        "structure": structure,
        "plan": summary_json(summary),
    }


def _json(data: Any, status: int = 200, headers: dict | None = None) -> Response:
    """JSON without NaN or Infinity (the standard has neither)."""
    body = json.dumps(data, allow_nan=False, separators=(",", ":")).encode()
    return Response(body, status, headers=headers, media_type="application/json")


# -- the app ----------------------------------------------------------------------------------

_ERRORS = {
    400: {"model": ErrorBody, "description": "Malformed request"},
    401: {"model": ErrorBody, "description": "Missing or wrong bearer token"},
    413: {"model": ErrorBody, "description": "Body too large"},
    415: {"model": ErrorBody, "description": "Body is not JSON"},
    422: {"model": ErrorBody, "description": "Invalid job"},
}


def create_app(service: ControllerService, config: Config) -> FastAPI:
    """The FastAPI app serving `service` with the API settings of `config`."""
    api = config.api
    if not api.is_loopback and not api.token:
        raise ValueError(f"api.host {api.host} is not a loopback address: a token is required")
    app = FastAPI(
        title="mcast-controller",
        version="0.1.0",
        description="Registers distributed-training jobs and plans their multicast (see docs/controller.md).",
        docs_url=None,
        redoc_url=None,
    )
    registry = make_registry(service)
    app.state.service = service

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(_service_status(exc), exc.code, exc.message, exc.field)

    @app.exception_handler(StoreError)
    async def _store_error(request: Request, exc: StoreError) -> JSONResponse:
        if isinstance(exc, (Fenced, StoreUnavailable)):  # lost the leadership, or etcd is away: retry
            code = "not_leader" if isinstance(exc, Fenced) else "store_unavailable"
            return error_response(503, code, str(exc), headers={"Retry-After": RETRY_AFTER_S})
        log.error("store error on %s %s: %s", request.method, request.url.path, exc)
        return error_response(500, "store_error", str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_response(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_response(500, "internal", "internal error; see the controller log")

    @app.post(
        "/jobs",
        status_code=201,
        response_model=JobOut,
        responses={200: {"model": JobOut, "description": "A job with this id and the same spec exists: it, as it is"}, 202: {"model": JobOut, "description": "Stored, but no plan includes it yet"}, 409: {"model": ErrorBody}, 503: {"model": ErrorBody}, **_ERRORS},
    )
    def post_job(body: JobRequest) -> Response:
        registered, created = service.register_job(body.ps, body.workers, body.demand, body.weight, body.id,
                                                   existing_ok=True)
        status, summary = service.jobs.answer(registered.job.id)  # the job and its plan, of one generation
        # 200: the same job was registered already (a retry whose answer was lost)
        code = 200 if not created else 201 if status.planned is not None else 202
        return _json(job_json(status, summary), code, headers={"Location": f"/jobs/{status.job.id}"})

    @app.get("/jobs", response_model=JobList, responses=_ERRORS)
    def get_jobs() -> Response:
        statuses, summary = service.jobs.answers()
        return _json({"jobs": [job_json(s, summary) for s in statuses]})

    @app.get("/jobs/{job_id}", response_model=JobOut, responses={404: {"model": ErrorBody}, **_ERRORS})
    def get_job(job_id: str) -> Response:
        return _json(job_json(*service.jobs.answer(job_id)))

    @app.delete("/jobs/{job_id}", status_code=204, responses={404: {"model": ErrorBody}, **_ERRORS})
    def delete_job(job_id: str) -> Response:
        service.delete_job(job_id)
        return Response(status_code=204)

    @app.get("/plan", response_model=PlanOut, responses={503: {"model": ErrorBody}, **_ERRORS})
    def get_plan() -> Response:
        plan, topology, summary = service.served.view()
        if plan is None or topology is None or summary is None:
            raise Unavailable("no plan has been computed yet", None, "no_plan")
        return _json({**plan_to_dict(plan, topology), "generation": summary.generation,
                      "computed_at": summary.computed_at, "churn": _churn_json(summary)})

    @app.get("/topology", response_model=TopologyOut, responses=_ERRORS)
    def get_topology(sources: bool = False) -> Response:
        topology, _ = service.wiring.topology_and_ports()
        out = instance_to_dict(Instance(topology, ()))["topology"]
        if sources:
            nodes, links = fact_sources(service.wiring, service.devices, service.links)
            out["sources"] = {
                "network": "learned" if service.config.discovers else "config",
                "nodes": [dataclasses.asdict(n) for n in nodes],
                "links": [dataclasses.asdict(link) for link in links],
            }
        return _json(out)

    @app.get("/hosts", response_model=HostList, responses=_ERRORS)
    def get_hosts() -> Response:
        wiring, hosts = service.wiring, service.hosts
        topology, ports = wiring.topology_and_ports()
        learned = wiring.observed_ports()
        out = []
        for h, a in hosts.addresses.items():
            sw = wiring.neighbours(h)[0]
            port = ports[(topology.index[sw], topology.index[h])]
            out.append(
                {"id": h, "ip": a.ip, "mac": hosts.mac(h), "switch": sw, "port": port, "learned": (sw, h) in learned}
            )
        unexpected = [dataclasses.asdict(h) for h in hosts.unexpected()]
        return _json({"hosts": out, "unexpected": unexpected})

    @app.get("/links", response_model=LinkList, responses=_ERRORS)
    def get_links() -> Response:
        wiring, links_ = service.wiring, service.links
        topology, ports = wiring.topology_and_ports()
        learned = wiring.observed_ports()
        down = set(links_.links_down())
        held = links_.held_down()

        def end(node: str, other: str) -> dict:
            if not topology.is_switch(topology.index[node]):
                return {"node": node, "port": None, "discovered": (other, node) in learned}
            port = ports[(topology.index[node], topology.index[other])]
            return {"node": node, "port": port, "discovered": (node, other) in learned}

        capacities = links_.capacities()
        rates = service.load.link_rates()

        def rate(a: str, b: str) -> dict | None:
            measured = rates.get((a, b))
            return None if measured is None or measured == (None, None) else {"a_to_b": measured[0], "b_to_a": measured[1]}

        links = [
            {
                "a": end(link.a, link.b),
                "b": end(link.b, link.a),
                "capacity": capacities[(link.a, link.b)][0],
                "capacity_source": capacities[(link.a, link.b)][1],
                "up": tuple(sorted((link.a, link.b))) not in down,
                "rate_bps": rate(link.a, link.b),
                "held_down_s": held.get(tuple(sorted((link.a, link.b)))),
            }
            for link in topology.links
        ]
        unexpected = [{"switch": s, "port": p, "neighbour": n} for s, p, n in wiring.unexpected_links()]
        parallel = [{"a": a, "a_port": pa, "b": b, "b_port": pb} for (a, pa), (b, pb) in wiring.parallel_links()]
        return _json({"links": links, "unexpected": unexpected, "missing": [list(p) for p in links_.missing()],
                      "source": "learned" if service.config.discovers else "config",
                      "waiting": wiring.waiting_nodes(), "parallel_links": parallel})

    @app.get("/switches", response_model=SwitchList, responses=_ERRORS)
    def get_switches() -> Response:
        return _json({"switches": [dataclasses.asdict(s) for s in service.devices.statuses()],
                      "unexpected": service.devices.unexpected_switches()})

    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}, **_ERRORS},
    )
    def get_metrics() -> Response:
        return Response(render(registry), media_type=CONTENT_TYPE)

    @app.get("/healthz", response_model=Health)
    def get_health() -> Response:
        st = service.stats()
        return _json(
            {
                "status": "ok",
                "jobs": st.jobs,
                "plan_generation": st.generation,
                "replan_pending": st.pending,
                "last_error": st.last_error,
                "plan_algorithm": st.algorithm,
                "churn_jobs": st.churn_jobs,
                "entries_written": st.entries_written,
                "role": _role(service),
            }
        )

    @app.get("/cluster", response_model=ClusterOut)
    def get_cluster() -> Response:
        cluster = service.cluster
        if cluster is None:
            return _json({"backend": "sqlite", "role": "standalone"})
        return _json(cluster.status())

    app.state.closing = threading.Event()  # set by ApiServer.stop: ends the /events streams
    add_ui(app, service, app.state.closing)
    if service.cluster is not None:
        app.add_middleware(_FollowerGate, cluster=service.cluster)  # inside the guard: the token first
    app.add_middleware(_Guard, token=api.token, max_body=api.max_body_bytes)
    return app


def _role(service) -> str:
    cluster = service.cluster
    if cluster is None:
        return "standalone"
    return "leader" if cluster.leading else "follower"


# -- serving -------------------------------------------------------------------------------------


class ApiServer:
    """uvicorn serving an app in a daemon thread. `port` is the bound port (useful
    with port 0); `stop()` shuts it down and waits for the thread."""

    def __init__(self, app: FastAPI, host: str, port: int, log_level: str = "warning") -> None:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        self._socket = socket.socket(family, kind, proto)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind(address)
        except OSError:
            self._socket.close()
            raise
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        self._closing: threading.Event | None = getattr(app.state, "closing", None)
        self._server = uvicorn.Server(
            uvicorn.Config(app, log_level=log_level, lifespan="off", access_log=False, timeout_graceful_shutdown=5)
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="rest-api", daemon=True
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 10.0) -> ApiServer:
        """Start serving; returns once uvicorn accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the REST API did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._closing is not None:
            self._closing.set()  # open /events streams end, else uvicorn would wait for them
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._socket.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()


def serve(service: ControllerService, config: Config, *, log_level: str = "warning") -> ApiServer:
    """Start the REST API for `service` on `config.api.host:port` in a thread."""
    app = create_app(service, config)
    return ApiServer(app, config.api.host, config.api.port, log_level).start()
