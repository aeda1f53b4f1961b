"""The REST API of the controller (FastAPI), JSON everywhere; OpenAPI at /openapi.json.

`create_app(service, config)` builds the app; `serve(service, config)` runs it with
uvicorn in a thread and returns an `ApiServer` that can be stopped.

Endpoints
    POST   /jobs          register a job; 201 with the job, its group address and its
                          planned rate, mode and structure once a plan includes it
                          (202 with ``"state": "pending"`` if no plan did within
                          `planner.wait_s`); 200 with the job as it is if a job with
                          this id and the same spec exists (a retry), 409 if its spec differs;
                          `auth_key` (the job's broadcast key) only in a 201/202, and in
                          a 200 whose request carried that same key, never elsewhere
    GET    /jobs          the jobs, in creation order, a page at a time (`?limit=&after=`,
                          `next`: paging.py)
    GET    /jobs/{id}     one job (404 if unknown)
    PUT    /jobs/{id}/broadcasting  {"active": true|false}: the job's PS starts (renews) or
                          ended a broadcast; 200 with the job at its phase's rate
                          (`rate`), once the switches were given it (core.phases;
                          409 not_planned for a job no plan serves)
    DELETE /jobs/{id}     204 once a plan without the job is in place (404 if unknown)
    GET    /plan          the current plan, in the plan format of docs/architecture.md, Formats,
                          its jobs a page at a time (`?limit=&offset=&generation=`, `next`)
    GET    /topology      the topology, in the topology format of docs/architecture.md, Formats
                          (serialised once per topology: 5.9 MB at k=48)
    GET    /hosts         every host's name, IPv4 and MAC address
    GET    /switches      per switch: connected, groups and entries used, budgets
    GET    /metrics       Prometheus text
    GET    /healthz       liveness (never needs the token); `role`: standalone, leader or follower
    GET    /cluster       several instances on one etcd store (docs/ha.md): this instance's
                          role, the leader (its instance id, API URL and term), the lease,
                          the members (every live instance's id and advertised API URL)
    GET    /              the web UI, /ui/... its assets (no token: no secrets in them)
    GET    /events        server-sent events for the UI: a new plan, periodic ticks (ui.py)

Every 4xx and 5xx answer is ``{"error": {"code", "message", "field"}}``: FastAPI's
own validation errors, malformed JSON, unknown routes and methods included.
Request bodies are limited to `api.max_body_bytes` (413), checked against
Content-Length and against the bytes actually received. A Host header outside
`api.allowed_hosts` is refused (400), a write whose body is not application/json
too (415), and `api.limits` caps writes per client, requests in flight, event
streams, jobs and workers per job (429, or 422 for workers): browser.py, limits.py. When `api.host` is not
a loopback address every endpoint except /healthz and the UI's static files requires
``Authorization: Bearer <api.token>`` (401 otherwise). With `api.tls` the API
speaks HTTPS only (TLS 1.2 at least); off loopback without it the controller does
not start unless the config says `api.insecure_http` (docs/security.md).

Tenants (`api.tenants`, docs/controller.md): the bearer token names the principal
(middleware.Guard), the admin (`api.token`) or a tenant. A tenant's /jobs, /jobs/{id}
and /plan show only its own jobs (another tenant's job is a 404, an id another
tenant holds a 409 that says nothing of it), its registrations are held to its
quotas (429 quota_jobs / quota_demand, 403 quota_workers), and /metrics is the
admin's only (403 admin_only). /topology, /hosts, /links, /switches are the shared
fabric and /events carries plan generations only: every principal reads them.

With several instances (`store.backend: etcd`, docs/ha.md) a follower serves
reads and answers every write (any method but GET, HEAD and OPTIONS) with 307 to
the same path at the leader's URL, or with 503 and ``Retry-After`` while no
leader is known or the leader's URL is not one a live member advertises. A
write the store refuses because this instance has just lost the leadership (or
etcd did not answer) is also a 503 with ``Retry-After``: the client retries with
the same job id, which registers the job exactly once.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from controller.algorithm.model import Instance, JobPlan, Plan, Topology
from controller.config import Config, ServerTls
from controller.config.instance import instance_to_dict, plan_to_dict
from controller.core.errors import ServiceError, Unavailable
from controller.core.jobs import JobStatus, decode_auth_key, encode_auth_key
from controller.core.served import PlanSummary
from controller.core.service import ControllerService
from controller.core.sources import fact_sources
from controller.core.tenants import Principal
from controller.store.base import StoreError, StoreFull
from controller.store.etcd import Fenced, StoreUnavailable
from controller.northbound.browser import add_browser_safety
from controller.northbound.errors import service_status, validation_response, error_response
from controller.northbound.limits import add_rate_limit, add_request_caps
from controller.northbound.metrics import CONTENT_TYPE, make_registry, render
from controller.northbound.middleware import RETRY_AFTER_S, FollowerGate, Guard
from controller.northbound.paging import DEFAULT_LIMIT, MAX_LIMIT, check_generation, page_after, page_offset
from controller.northbound.models import (
    BroadcastRequest,
    ClusterOut,
    ErrorBody,
    Health,
    HostList,
    JobList,
    JobCreatedOut,
    JobOut,
    JobRequest,
    LinkList,
    PlanOut,
    SwitchList,
    TopologyOut,
)
from controller.northbound.ui import add_ui

log = logging.getLogger(__name__)

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
        "effective_demand": jp.job.demand if jp is not None else None,
        "weight": j.weight,
        "group_address": status.group_address,
        "state": "failed" if status.error is not None else "planned" if jp is not None else "pending",
        "error": status.error,
        "missing_hosts": list(status.missing_hosts),
        "rate": status.rate,
        "planned_rate": jp.rate if jp is not None else None,
        "broadcasting": status.broadcasting,
        "mode": jp.structure.mode if jp is not None else None,
        "structure": structure,
        "plan": summary_json(summary),
    }


def _json(data: Any, status: int = 200, headers: dict | None = None) -> Response:
    """JSON without NaN or Infinity (the standard has neither)."""
    body = json.dumps(data, allow_nan=False, separators=(",", ":")).encode()
    return Response(body, status, headers=headers, media_type="application/json")


def principal_of(request: Request) -> Principal:
    """The request's principal, as the Guard found it (never guessed: none is an error)."""
    principal = getattr(request.state, "principal", None)
    if not isinstance(principal, Principal):
        raise RuntimeError(f"no principal for {request.url.path}: the Guard must run before the app")
    return principal


# -- the app ----------------------------------------------------------------------------------

_ERRORS = {
    400: {"model": ErrorBody, "description": "Malformed request"},
    401: {"model": ErrorBody, "description": "Missing or wrong bearer token"},
    413: {"model": ErrorBody, "description": "Body too large"},
    415: {"model": ErrorBody, "description": "Body is not JSON"},
    429: {"model": ErrorBody, "description": "Too many requests, jobs or event streams (api.limits)"},
    422: {"model": ErrorBody, "description": "Invalid job"},
}


# the paging parameters (paging.py); a bad one is a 400 naming it (errors.validation_response)
_LIMIT = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description=f"Items per page (at most {MAX_LIMIT})")
_AFTER = Query(None, ge=0, description="The cursor: the jobs after this one (as `next` gives it)")
_OFFSET = Query(0, ge=0, description="The plan's jobs from this index (as `next` gives it)")
_GENERATION = Query(None, ge=0, description="The plan generation of the first page (as `next` gives it): "
                    "409 plan_changed if it is no longer served")


def create_app(service: ControllerService, config: Config) -> FastAPI:
    """The FastAPI app serving `service` with the API settings of `config`."""
    api = config.api
    if not api.is_loopback and not api.token and not api.tenants:
        raise ValueError(f"api.host {api.host} is not a loopback address: a token is required")
    if not api.is_loopback and api.tls is None and not api.insecure_http:
        raise ValueError(f"api.host {api.host} is not a loopback address: api.tls is required (or api.insecure_http)")
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
        return error_response(service_status(exc), exc.code, exc.message, exc.field)

    @app.exception_handler(StoreError)
    async def _store_error(request: Request, exc: StoreError) -> JSONResponse:
        if isinstance(exc, StoreFull):  # the store's disk is full: nothing was written; retry once space returns
            log.error("store full on %s %s: %s", request.method, request.url.path, exc)
            return error_response(507, "insufficient_storage", str(exc), headers={"Retry-After": RETRY_AFTER_S})
        if isinstance(exc, (Fenced, StoreUnavailable)):  # lost the leadership, or etcd is away: retry
            code = "not_leader" if isinstance(exc, Fenced) else "store_unavailable"
            return error_response(503, code, str(exc), headers={"Retry-After": RETRY_AFTER_S})
        log.error("store error on %s %s: %s", request.method, request.url.path, exc)
        return error_response(500, "store_error", str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_response(request, exc)

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
        response_model=JobCreatedOut,
        responses={200: {"model": JobCreatedOut, "description": "A job with this id and the same spec exists: it, as it is"}, 202: {"model": JobCreatedOut, "description": "Stored, but no plan includes it yet"}, 409: {"model": ErrorBody}, 503: {"model": ErrorBody}, 507: {"model": ErrorBody}, **_ERRORS},
    )
    def post_job(body: JobRequest, request: Request) -> Response:
        who = principal_of(request)
        key = decode_auth_key(body.auth_key) if body.auth_key is not None else None
        registered, created, key = service.register_job(body.ps, body.workers, body.demand, body.weight, body.id,
                                                        existing_ok=True, auth_key=key, principal=who)
        status, summary = service.jobs.answer(registered.job.id, who)  # the job and its plan, of one generation
        # 200: the same job was registered already (a retry whose answer was lost)
        code = 200 if not created else 201 if status.planned is not None else 202
        answer = job_json(status, summary)
        if key is not None:  # the registrant's, in this answer only (JobRegistry.add)
            answer["auth_key"] = encode_auth_key(key)
        return _json(answer, code, headers={"Location": f"/jobs/{status.job.id}"})

    @app.get("/jobs", response_model=JobList, responses=_ERRORS)
    def get_jobs(request: Request, limit: int = _LIMIT, after: int | None = _AFTER) -> Response:
        statuses, summary = service.jobs.answers(principal_of(request))
        statuses = sorted(statuses, key=lambda s: s.seq)  # creation order: the cursor's
        page = page_after(statuses, [s.seq for s in statuses], limit, after, "/jobs")
        return _json({"jobs": [job_json(s, summary) for s in page.items], "next": page.next})

    @app.get("/jobs/{job_id}", response_model=JobOut, responses={404: {"model": ErrorBody}, **_ERRORS})
    def get_job(job_id: str, request: Request) -> Response:
        return _json(job_json(*service.jobs.answer(job_id, principal_of(request))))

    @app.put("/jobs/{job_id}/broadcasting", response_model=JobOut,
             responses={404: {"model": ErrorBody}, 409: {"model": ErrorBody, "description": "not_planned"}, **_ERRORS})
    def put_broadcasting(job_id: str, body: BroadcastRequest, request: Request) -> Response:
        return _json(job_json(*service.announce_broadcast(job_id, body.active, principal=principal_of(request))))

    @app.delete("/jobs/{job_id}", status_code=204, responses={404: {"model": ErrorBody}, **_ERRORS})
    def delete_job(job_id: str, request: Request) -> Response:
        service.delete_job(job_id, principal=principal_of(request))
        return Response(status_code=204)

    # the served plan in the plan format, converted once however many pages are asked of it (never changed)
    plan_cache: list[tuple[Plan, Topology, dict[str, Any]]] = []

    @app.get("/plan", response_model=PlanOut,
             responses={409: {"model": ErrorBody, "description": "plan_changed: `generation` is no longer served"},
                        503: {"model": ErrorBody}, **_ERRORS})
    def get_plan(request: Request, limit: int = _LIMIT, offset: int = _OFFSET,
                 generation: int | None = _GENERATION) -> Response:
        who = principal_of(request)
        plan, topology, summary = service.served.view()
        if plan is None or topology is None or summary is None:
            raise Unavailable("no plan has been computed yet", None, "no_plan")
        check_generation(generation, summary.generation)
        cached = plan_cache[0] if plan_cache else None
        if cached is None or cached[0] is not plan or cached[1] is not topology:  # converted once per plan
            cached = (plan, topology, plan_to_dict(plan, topology))
            plan_cache[:] = [cached]
        out = dict(cached[2])
        if not who.is_admin:  # a tenant's own jobs only (the switches' table use is the shared fabric's)
            mine = service.jobs.visible_ids(who)
            out["jobs"] = [j for j in out["jobs"] if j["id"] in mine]
        page = page_offset(out["jobs"], limit, offset, summary.generation, "/plan")
        return _json({**out, "jobs": page.items, "next": page.next, "generation": summary.generation,
                      "computed_at": summary.computed_at, "churn": _churn_json(summary)})

    # the serialised topology, kept while the topology is the same object (a network
    # change makes a new one): at k=48 (2,880 switches, 27,648 hosts) it is 5.9 MB of JSON
    topology_cache: list[tuple[Topology, bytes]] = []

    @app.get("/topology", response_model=TopologyOut, responses=_ERRORS)
    def get_topology(sources: bool = False) -> Response:
        topology, _ = service.wiring.topology_and_ports()
        cached = topology_cache[0] if topology_cache else None
        if not sources and cached is not None and cached[0] is topology:
            return Response(cached[1], media_type="application/json")
        out = instance_to_dict(Instance(topology, ()))["topology"]
        if not sources:
            answer = _json(out)
            topology_cache[:] = [(topology, answer.body)]
            return answer
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
                      "unexpected": service.devices.unexpected_switches(),
                      "refused": service.devices.refused_switches()})

    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}, **_ERRORS},
    )
    def get_metrics(request: Request) -> Response:
        if not principal_of(request).is_admin:
            raise ServiceError("/metrics is the admin's only (api.token)", None, "admin_only")
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
                "store_records_skipped": getattr(service.store, "skipped_records", 0),
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
        app.add_middleware(FollowerGate, cluster=service.cluster)  # inside the guard: the token first
    add_rate_limit(app, api.limits, keyed_by_token=api.token is not None or bool(api.tenants))  # inside the guard: proven principals
    app.add_middleware(Guard, token=api.token, max_body=api.max_body_bytes, tenants=api.tenants)
    add_request_caps(app, api.limits)
    add_browser_safety(app, api)  # outermost: the Host allowlist before anything else runs
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

    def __init__(self, app: FastAPI, host: str, port: int, log_level: str = "warning", tls: ServerTls | None = None, *,
                 limit_concurrency: int | None = None) -> None:
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
        self.scheme = "https" if tls is not None else "http"
        self._server = uvicorn.Server(
            uvicorn.Config(app, log_level=log_level, lifespan="off", access_log=False, timeout_graceful_shutdown=5,
                           limit_concurrency=limit_concurrency, **tls_options(tls))
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="rest-api", daemon=True
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

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
    return ApiServer(app, config.api.host, config.api.port, log_level, config.api.tls,
                     limit_concurrency=config.api.limits.max_connections).start()


def tls_options(tls: ServerTls | None) -> dict[str, Any]:
    """uvicorn's settings for HTTPS with `tls` (none without): the certificate
    chain and key, TLS 1.2 at least."""
    if tls is None:
        return {}

    def context(config: uvicorn.Config, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        ctx = default()
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        return ctx

    return {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key), "ssl_context_factory": context}
