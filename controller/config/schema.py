"""The configuration's values: frozen dataclasses, one per section of the config
file (docs/controller.md), their defaults, and the constants the readers check
against. `load` fills them from a file; nothing here reads or checks input.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from controller.algorithm.model import Link
from controller.config.programs import DEFAULT_PROGRAM

UNLIMITED = "unlimited"
# the largest group and meter ids OpenFlow 1.3 allows (OFPG_MAX, OFPM_MAX): the
# bounds of southbound.openflow.group_ids and meter_ids
OFPG_MAX = 0xFFFFFF00
OFPM_MAX = 0xFFFF0000
# A table budget: a count, or "unlimited".
Capacity = int | Literal["unlimited"]

MIN_TOKEN_LENGTH = 16
MAX_P4_PORT = 511  # a 9-bit port number (v1model and TNA)
MIN_PORT_STATS_S = 0.5  # faster polling loads the switches and the controller for no better picture


# -- sections ---------------------------------------------------------------------


@dataclass(frozen=True)
class TenantConfig:
    """One tenant of the API (`api.tenants`, `api.tokens_file`): its name, the
    sha256 (hex) of its bearer token (never the token) and its quotas, each None
    for no limit: jobs registered at once, their total demand (bit/s), workers
    per job."""

    name: str
    token_sha256: str = field(repr=False)
    max_jobs: int | None = None
    max_demand: float | None = None
    max_workers: int | None = None


@dataclass(frozen=True)
class ServerTls:
    """TLS on the REST API (`api.tls`): the server's certificate chain and private
    key (PEM). The reader checks that both exist and that the key is the certificate's."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class ApiLimits:
    """What the REST API lets clients use (docs/security.md, "Limits"): `rate`
    mutating requests per client (the `limits` library's format, e.g.
    "60/minute"; a client is its bearer token, or its address), with at most
    `rate_keys` clients remembered; `max_in_flight` requests being answered at
    once and `max_event_streams` open /events streams (429 beyond either);
    `max_connections` for uvicorn (a plain-text 503 beyond it);
    `max_jobs` registered jobs (429) and `max_workers` workers per job (422).
    Broadcast announcements (`PUT /jobs/{id}/broadcasting`, renewed every half
    second or so while a broadcast lasts) do not count against `rate`: each job of
    each client has `announce_rate` of them."""

    rate: str = "60/minute"
    announce_rate: str = "10/second"
    rate_keys: int = 4096
    max_in_flight: int = 64
    max_event_streams: int = 32
    max_connections: int = 256
    max_jobs: int = 10000
    max_workers: int = 1024


@dataclass(frozen=True)
class ApiConfig:
    """The REST API. Bound to a non-loopback address it requires `token` or
    `tenants`, and
    `tls` (HTTPS) unless `insecure_http` accepts plain HTTP.
    `max_demand` (bit/s) and `max_weight` bound what one registration may ask
    for: beyond them it is refused (422)."""

    host: str = "127.0.0.1"
    port: int = 8080  # 0: an ephemeral port (tests)
    token: str | None = field(default=None, repr=False)
    max_body_bytes: int = 64 * 1024
    max_demand: float = 1e12  # 1 Tbit/s: more than any host link carries today
    max_weight: float = 1000.0
    # tenants (docs/controller.md, Tenants): each known by the sha256 of its token only
    tenants: tuple[TenantConfig, ...] = ()
    # HTTPS (docs/security.md, "TLS on the API"); None: plain HTTP, which off loopback
    # needs `insecure_http` (the token and the jobs' broadcast keys would cross in clear)
    tls: ServerTls | None = None
    insecure_http: bool = False

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"
    # the Host header values served (a name, or NAME:PORT); None: the loopback
    # names and `host` (docs/security.md, "Browser safety")
    allowed_hosts: tuple[str, ...] | None = None
    limits: ApiLimits = ApiLimits()

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)


@dataclass(frozen=True)
class EtcdConfig:
    """The etcd cluster of `store.backend: etcd` (docs/ha.md).

    `endpoints` are `http://HOST:PORT` client URLs (the v3 gRPC gateway, /v3/...),
    tried in turn; every key lives under `prefix`. The leader holds a lease of
    `lease_ttl_s` seconds, renewed every third of it; `timeout_s` bounds one
    request to etcd. `advertise_url` is the API URL this instance announces to the
    others (for their 307 redirects); by default the URL the API listens on.

    `tls` (https:// endpoints): etcd's certificate is verified against `tls.ca`
    and the controller sends `tls.cert` (its key `tls.key`) as its client
    certificate. `user` and `password` (read from `password_env` or
    `password_file`): etcd's own authentication (docs/ha.md); the password is
    never shown in a repr or log.
    """

    endpoints: tuple[str, ...] = ("http://127.0.0.1:2379",)
    prefix: str = "/mcast-controller/"
    lease_ttl_s: int = 2
    timeout_s: float = 1.0
    advertise_url: str | None = None
    tls: TlsFiles | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class StoreConfig:
    path: Path = Path("controller-jobs.sqlite")
    backend: str = "sqlite"  # or "etcd": shared by several instances, one leader (docs/ha.md)
    etcd: EtcdConfig = EtcdConfig()


@dataclass(frozen=True)
class PlannerConfig:
    """How and when to re-plan.

    Job changes are coalesced: a re-plan starts once no change has arrived for
    `debounce_s` seconds, or `max_delay_s` after the first unplanned change,
    whichever comes first. `POST /jobs` and `DELETE /jobs/{id}` wait at most
    `wait_s` for the plan that includes their change.

    A link that comes up again rejoins the plan only after a hold-down of
    `link_hold_down_s` seconds (0: at once); a link that keeps flapping has its
    hold-down doubled on each flap, up to `link_hold_down_max_s`
    (`ControllerService`, "Links down").

    With `incremental` (the default with the default `algorithm`; a file that
    names another algorithm gets `incremental: false` unless it sets it, since
    admission places jobs with greedy's candidates, not that algorithm's), a
    change of jobs only is planned at once by
    admission (`algorithm.admission`: the other jobs keep their structures), and a
    full plan runs `reoptimise_after_s` after the last such change; it replaces the
    served plan only if it raises λ or the aggregate throughput by
    `reoptimise_min_gain` (relative), moving at most the churn budget of jobs to
    new structures (`algorithm.admission.churn_budget`, `within_churn`): the
    smaller of `reoptimise_max_churn` jobs (0: no count limit) and
    `reoptimise_max_churn_share` of the jobs, rounded up (0: no share limit); a
    file that sets `reoptimise_max_churn` without the share gets the count alone,
    as before the share existed (config/load.py). While a re-optimisation is
    adopted that could not move every job it wanted to, another follows
    `reoptimise_after_s` later. Changes of the network always get a full plan.
    With `reoptimise_warm_start` a re-optimisation on an unchanged topology starts
    from the served plan's columns (`lp_rounding.solve`, `warm`) instead of the
    baselines' plans.

    With `phase_rates`, a job whose client announces its broadcasts
    (`PUT /jobs/{id}/broadcasting`, `core.phases`) is policed at
    `broadcast_idle_share` of its planned rate while idle and at its planned rate
    or more while broadcasting: the broadcasting jobs share what the idle ones
    leave (`algorithm.phases`). An announcement holds `broadcast_ttl_s` unless
    renewed. Off: announcements are answered with the planned rate, nothing
    changes on the switches.
    """

    algorithm: str = "lp-rounding"
    objective: str = "max-concurrent"
    seed: int = 0
    debounce_s: float = 0.2
    max_delay_s: float = 2.0
    wait_s: float = 10.0
    link_hold_down_s: float = 2.0
    link_hold_down_max_s: float = 30.0
    incremental: bool = True
    reoptimise_after_s: float = 5.0
    reoptimise_min_gain: float = 0.01
    reoptimise_max_churn: int = 0
    reoptimise_warm_start: bool = True
    reoptimise_max_churn_share: float = 0.05  # of the jobs planned, per re-optimisation (docs/planning-time.md)
    phase_rates: bool = True
    broadcast_ttl_s: float = 10.0
    broadcast_idle_share: float = 0.05


@dataclass(frozen=True)
class MulticastConfig:
    group_pool: str = "239.1.0.0/16"


@dataclass(frozen=True)
class FatTreeSpec:
    """`capacity_given`: the file states `capacity` (the links keep it); without it
    the capacity is a default that the switches' port speeds replace
    (`explicit_capacities`)."""

    k: int
    capacity: float = 10e9
    core_oversubscription: float = 1.0
    capacity_given: bool = False


@dataclass(frozen=True)
class LeafSpineSpec:
    leaves: int
    spines: int
    hosts_per_leaf: int
    capacity: float = 10e9
    uplink_capacity: float | None = None  # given: the leaf-spine links keep it
    capacity_given: bool = False  # as FatTreeSpec


@dataclass(frozen=True)
class SwitchOverride:
    """Budgets of one switch; None leaves the default in place."""

    group_capacity: Capacity | None = None
    entry_capacity: Capacity | None = None


# a link of the topology (`topology.links`: its ends, either order) with the capacity the config gives it
LinkOverride = Link


@dataclass(frozen=True)
class TopologyConfig:
    """Exactly one of `instance`, `fattree`, `leaf_spine`.

    `group_capacity` / `entry_capacity` are the defaults of every switch whose
    budget the source leaves open (None: keep the source's, unlimited if it has
    none); `switches` and `links` override single switches and links.
    """

    instance: Path | None = None
    fattree: FatTreeSpec | None = None
    leaf_spine: LeafSpineSpec | None = None
    group_capacity: Capacity | None = None
    entry_capacity: Capacity | None = None
    switches: Mapping[str, SwitchOverride] = field(default_factory=dict)
    links: tuple[LinkOverride, ...] = ()


@dataclass(frozen=True)
class HostConfig:
    """A configured host (`hosts.NAME`): its address, perhaps its MAC and, both or
    neither, the switch and port it is pinned to (never moved by what the wire shows)."""

    ip: str
    mac: str | None = None  # None: the default MAC of the host's position (a learned one in a learned network)
    switch: str | None = None  # with `port`: pinned there
    port: int | None = None

    @property
    def pinned(self) -> tuple[str, int] | None:
        """(switch, port) the host is pinned to, or None."""
        return (self.switch, self.port) if self.switch is not None and self.port is not None else None


@dataclass(frozen=True)
class TlsFiles:
    """TLS on a southbound (`southbound.openflow.tls`, `southbound.p4runtime.tls`;
    docs/security.md): the controller's certificate and private key (PEM), and the
    CA certificates (PEM) that the switches' certificates must be signed by. The
    reader checks that the files exist, that the key matches the certificate and
    that the CA file holds certificates."""

    cert: Path
    key: Path
    ca: Path


BACKENDS = ("openflow", "p4runtime")
_P4SRC_BUILD = Path(__file__).resolve().parents[2] / "p4src" / "build"


@dataclass(frozen=True)
class P4RuntimeSettings:
    """Settings shared by every P4Runtime switch (docs/p4.md).

    A switch without its own `address` listens on `host`:`base_port` + n and has
    device id n + 1, n being its position among the topology's switches (from
    0), as mininet/bmv2.py starts BMv2 switches. `packet_in_pps` caps what one
    switch sends to the controller (its packet-in meter), 0 for no cap.
    `arbitration_retry_s` is the longest back-off between two arbitration
    attempts on a switch that another client controls. `program` is the data
    plane every P4 switch runs unless its own `program` says otherwise
    (`p4runtime.programs`); `p4info` and `device_config` are that program's
    files (default: the committed ones; a Tofino program has no device config
    unless one is given). `tls`: the controller connects to every switch over TLS
    with a client certificate (None: plain TCP). `fast_failover`: protect tree
    edges in the data plane where the tables have room; every watched link's
    far end sends a heartbeat every `heartbeat_interval_s`, and a switch fails a
    job over to its backup when its watched port has been silent for
    `failover_timeout_s` (docs/p4.md, "Fast failover").
    """

    p4info: Path = _P4SRC_BUILD / "mcast.p4info.txt"
    device_config: Path | None = _P4SRC_BUILD / "mcast.json"
    election_id: int = 1
    host: str = "127.0.0.1"
    base_port: int = 50051
    lldp_interval_s: float = 5.0
    lldp_timeout_s: float = 15.0
    packet_in_pps: int = 1000
    arbitration_retry_s: float = 30.0
    # In a learned network: the ports LLDP probes and host probes go out of.
    # P4Runtime does not list a target's ports, so the config says which exist.
    ports: tuple[int, ...] = tuple(range(1, 17))
    program: str = DEFAULT_PROGRAM
    tls: TlsFiles | None = None  # None: plain TCP (a WARNING at start)
    fast_failover: bool = False  # the backups of tree edges in the data plane (p4runtime.failover)
    heartbeat_interval_s: float = 0.02
    failover_timeout_s: float = 0.06


@dataclass(frozen=True)
class OpenFlowSettings:
    """Settings of every OpenFlow switch: `packet_in_pps` caps what a switch sends
    to the controller (its OFPM_CONTROLLER meter), 0 for no cap; `group_ids` and
    `meter_ids` are the (first, last) ids the controller allocates and owns: it
    reconciles only the groups and meters in them (OpenFlow 1.3 groups and meters
    carry no cookie), so other applications may use the rest. `tls`: the listener
    speaks TLS only and requires every switch's certificate to be signed by
    `tls.ca` (None: plain TCP). `fast_failover`: protect tree edges with
    fast-failover groups where the tables have room (docs/controller.md)."""

    packet_in_pps: int = 1000
    group_ids: tuple[int, int] = (1, OFPG_MAX)
    meter_ids: tuple[int, int] = (1, OFPM_MAX)
    table_features: bool = False  # ask switches for OFPMP_TABLE_FEATURES (F(v) from max_entries)
    # seconds between port statistics requests (measured link rates: GET /links, the UI); 0: off
    port_stats_s: float = 2.0
    tls: TlsFiles | None = None  # None: plain TCP (a WARNING at start)
    # fast-failover groups for the tree edges that have a backup within the table budgets
    # (openflow.failover); on by default: Open vSwitch has FF groups and group chaining
    fast_failover: bool = True


@dataclass(frozen=True)
class SwitchSouthbound:
    """One switch's southbound: None leaves the default in place."""

    backend: str | None = None
    address: str | None = None
    device_id: int | None = None
    dpid: int | None = None  # openflow only
    ports: tuple[int, ...] | None = None  # p4runtime only: its ports in a learned network
    program: str | None = None  # p4runtime only: the data plane it runs (p4runtime.programs)
    edge_ports: tuple[int, ...] = ()  # declared edge ports: never a switch link


@dataclass(frozen=True)
class LldpConfig:
    """How LLDP probes are signed (southbound.lldp): the HMAC secret, from the
    config (`secret`) or the environment variable `secret_env` names (read when
    the config is loaded); neither: None, and the controller keeps a random one in
    its store. A probe older than `max_age_s`, or from the future by more, is stale.
    `interval_s`: seconds between two rounds of probes, on both backends (0: none;
    `southbound.p4runtime.lldp_interval_s` is its older name)."""

    secret: str | None = None
    secret_env: str | None = None
    max_age_s: float = 30.0
    interval_s: float = 5.0


ADMIT = ("declared", "any")


@dataclass(frozen=True)
class SouthboundConfig:
    """Which southbound programs each switch: `backend` for every switch, and
    per-switch overrides in `switches`. `admit`: which switches the controller
    adopts ("declared": only those the config lists; "any"); None: the default
    (`Config.admit`). `planned_dscp`: the DSCP (0..63) of the planned class, which
    the OpenFlow switches mark on the planned traffic at its edge and reset on
    everything else from a host (`southbound.planned`, `openflow.planned`); None:
    off. Refused with any P4Runtime switch."""

    backend: str = "openflow"
    p4runtime: P4RuntimeSettings = P4RuntimeSettings()
    switches: Mapping[str, SwitchSouthbound] = field(default_factory=dict)
    openflow: OpenFlowSettings = OpenFlowSettings()
    lldp: LldpConfig = LldpConfig()
    admit: str | None = None
    planned_dscp: int | None = None


@dataclass(frozen=True)
class SwitchBackend:
    """The resolved southbound of one switch (`switch_backends`)."""

    switch: str
    backend: str
    address: str | None = None  # p4runtime only
    device_id: int | None = None  # p4runtime only
    dpid: int | None = None  # openflow only: the datapath id this switch connects with
    ports: tuple[int, ...] = ()  # p4runtime only: its ports (LLDP and host probes in a learned network)
    program: str | None = None  # p4runtime only: the data plane it runs (p4runtime.programs)


@dataclass(frozen=True)
class DiscoveryConfig:
    """Settings of the network the controller learns when the config declares no
    `topology`: a link's capacity where its ports report no speed; upper limits on
    every learned switch's budgets (None: what the switch reports); how long a job
    waits for hosts that were never seen before it fails, and how often the
    controller asks for them (an ARP request out of every edge port).

    The host rules (core/hosts.py; also with a declared topology): how many hosts
    a port may hold (one: see `MAX_HOSTS_PER_PORT`), how long a learned host may
    stay silent before it is forgotten (0: never), and how long a host's old place
    has to answer a probe before a move away from it is applied."""

    link_capacity: float = 10e9
    group_capacity: Capacity | None = None
    entry_capacity: Capacity | None = None
    host_timeout_s: float = 60.0
    probe_interval_s: float = 1.0
    max_hosts_per_port: int = 1
    host_idle_s: float = 3600.0
    move_confirm_s: float = 2.0


# Hosts learned per port: one. Several hosts behind one port would be several host
# links sharing one physical port in the planner's model (each credited with the
# port's whole capacity) and two outputs to one port in a job's group (every host
# there receiving each packet twice); until the planner models a shared port, the
# limit stays 1 and `discovery.max_hosts_per_port` accepts no more.
MAX_HOSTS_PER_PORT = 1
# `discovery` keys that also apply to a declared topology
HOST_RULE_KEYS = ("max_hosts_per_port", "host_idle_s", "move_confirm_s")


@dataclass(frozen=True)
class Config:
    topology: TopologyConfig | None = None  # None: learn the network (discovery)
    api: ApiConfig = ApiConfig()
    store: StoreConfig = StoreConfig()
    planner: PlannerConfig = PlannerConfig()
    multicast: MulticastConfig = MulticastConfig()
    hosts: Mapping[str, HostConfig] = field(default_factory=dict)
    southbound: SouthboundConfig = SouthboundConfig()
    discovery: DiscoveryConfig = DiscoveryConfig()

    @property
    def discovers(self) -> bool:
        """True when the controller learns the network (no `topology` section)."""
        return self.topology is None

    @property
    def admit(self) -> str:
        """"declared" (only the switches the config declares are adopted) or "any":
        `southbound.admit`, by default "declared" whenever switches are declared (a
        topology, or `southbound.switches` listing any) and "any" otherwise."""
        if self.southbound.admit is not None:
            return self.southbound.admit
        return "declared" if self.topology is not None or self.southbound.switches else "any"


def is_loopback_host(host: str) -> bool:
    """True for 'localhost' and loopback IP literals (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
