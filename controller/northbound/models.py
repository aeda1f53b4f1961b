"""The JSON the REST API answers and accepts, as pydantic models: they validate
request bodies and give the OpenAPI schema (/openapi.json) its shapes. The
answers themselves are built by `northbound.api`'s conversions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from controller.core.jobs import JOB_ID_PATTERN

_HOST_FIELD = dict(min_length=1, max_length=255, description="A host name of the topology or a host's IPv4 address")


class JobRequest(BaseModel):
    """A job to register. Unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str | None = Field(None, pattern=JOB_ID_PATTERN, description="Job id; generated when absent")
    ps: str = Field(**_HOST_FIELD)
    workers: list[str] = Field(min_length=1, description="Worker hosts (names or IPv4 addresses), distinct, not the PS")
    demand: float = Field(gt=0, allow_inf_nan=False, description="The rate the job wants, bit/s")
    weight: float | None = Field(None, gt=0, allow_inf_nan=False, description="Weight (default 1)")
    auth_key: str | None = Field(
        None, max_length=128,
        description="The job's broadcast key: base64url of 32 random bytes (the client library makes one); "
        "made by the controller when absent. Returned only to the registration that created the job",
    )


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
    demand: float = Field(description="The demand registered, bit/s")
    effective_demand: float | None = Field(
        None, description="The demand planned, bit/s: the registered one, capped to what the PS's link carries "
        "(null while no plan includes the job)")
    weight: float
    group_address: str | None = Field(
        description="The job's IPv4 multicast group: the PS sends to it, workers join it (null once the job "
        "failed: its address went back to the pool)")
    state: Literal["planned", "pending", "failed"] = Field(
        description="'pending' until a plan includes the job; 'failed' if its hosts were never found or the "
        "planner failed with it (`error`): it is not planned until deleted"
    )
    error: str | None = Field(default=None, description="Why the job failed (state 'failed')")
    missing_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts of the job the controller has not located yet (learned network only): it waits for them",
    )
    rate: float | None = Field(description="The rate in bit/s the PS sends at now: the planned rate, or for a job "
                               "that announces its broadcasts (PUT /jobs/{id}/broadcasting) its phase's rate")
    planned_rate: float | None = Field(None, description="The planned rate in bit/s: what the job gets whenever it "
                                       "broadcasts, whatever the other jobs do")
    broadcasting: bool | None = Field(None, description="For a job that announces its broadcasts: broadcasting now "
                                      "(true) or idle (false); null for a job that never announced one")
    mode: Literal["multicast", "hybrid", "unicast"] | None
    structure: StructureOut | None
    plan: PlanSummaryOut | None = Field(None, description="The plan being served when this answer was made (null before the first)")


class BroadcastRequest(BaseModel):
    """A job's client says its PS starts (or goes on with) a broadcast, or ended one."""

    model_config = ConfigDict(extra="forbid")

    active: StrictBool = Field(description="true: broadcasting now (renew within planner.broadcast_ttl_s while "
                               "it lasts); false: the broadcast is over")


class JobCreatedOut(JobOut):
    auth_key: str | None = Field(
        None,
        description="The job's broadcast key (base64url, 32 bytes), only in the answer to the POST that created "
        "the job (201/202), or to a retry (200) that carried the same key; never in any other answer",
    )


class JobList(BaseModel):
    """A page of the jobs (northbound.paging)."""

    jobs: list[JobOut]
    next: str | None = Field(description="The path of the next page; null on the last one")


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
    jobs: list[PlanJobOut] = Field(description="A page of the plan's jobs (northbound.paging)")
    switches: list[PlanSwitchOut]
    next: str | None = Field(None, description="The path of the next page of jobs (of this generation); null on the last one")
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
    groups: int = Field(0, description="Groups in the switch's desired OpenFlow state: the plan's replication groups "
                        "(groups_used) and fast failover's (0 for a P4Runtime switch)")
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


class RefusedSwitchOut(BaseModel):
    switch: str
    why: str


class SwitchList(BaseModel):
    switches: list[SwitchOut]
    unexpected: list[str] = Field(
        default_factory=list, description="Switches that connected with an id the declared topology does not give "
        "(of:<dpid>; ignored, never programmed)")
    refused: list[RefusedSwitchOut] = Field(
        default_factory=list, description="Switches refused (southbound.admit: declared, or a second connection "
        "claiming a connected datapath id), with why; never planned")


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
    store_records_skipped: int = Field(
        default=0, description="Job records read back from the store and refused as invalid (logged, never planned)")


class ClusterLeader(BaseModel):
    instance: str
    url: str | None
    term: int


class ClusterMember(BaseModel):
    instance: str
    url: str


class ClusterOut(BaseModel):
    backend: Literal["sqlite", "etcd"]
    role: Literal["standalone", "leader", "follower"]
    instance: str | None = None
    url: str | None = None
    term: int | None = Field(default=None, description="this instance's term while it leads")
    leader: ClusterLeader | None = None
    lease_ttl_s: int | None = None
    last_takeover: dict | None = Field(default=None, description="this instance's last takeover: term, Unix time, seconds per step")
    members: list[ClusterMember] = Field(
        default_factory=list, description="every live instance (its id and advertised API URL), as last read from etcd; "
        "a follower redirects writes, and the client follows redirects, only to these URLs")


