"""The controller's configuration file: typed, strict, YAML or JSON.

`load_config(path)` reads a YAML (``.yaml``/``.yml``) or JSON (``.json``) file
into frozen dataclasses. Like the instance reader, it is strict: an unknown key,
a duplicate key, a missing required key or a value of the wrong type is a
`ConfigError` whose one-line message names the key path, for example
``controller.yaml: topology.links[2].capacity: expected a number, got a string``.
Relative paths in the file (``store.path``, ``topology.instance``) are relative to
the directory of the config file. The format is documented in docs/controller.md;
docs/examples/controller.yaml is a working example.

Until LLDP discovery exists the topology (and so every link capacity and every
switch budget G, F) comes from here: a §4 instance file without jobs, or a
generated fat-tree or leaf-spine, with default budgets and per-switch and per-link
overrides. `build_topology` turns that into the planner's `Topology`;
`host_table` gives every host its IPv4 and MAC address (configured or default).
`load_config` calls both, so a file that loads also builds.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from controller.algorithm import ALGORITHMS, OBJECTIVES
from controller.algorithm.model import Link, Node, Topology
from controller.algorithm.topologies import fat_tree, leaf_spine
from controller.config.instance import InputError, instance_from_dict
from controller.addressing.groups import GroupAddressPool
from controller.config.programs import DEFAULT_PROGRAM, PROGRAMS
from controller.addressing.hosts import HostAddress, default_host_address, host_addresses, normalise_mac

UNLIMITED = "unlimited"
# the largest group and meter ids OpenFlow 1.3 allows (OFPG_MAX, OFPM_MAX): the
# bounds of southbound.openflow.group_ids and meter_ids
OFPG_MAX = 0xFFFFFF00
OFPM_MAX = 0xFFFF0000
# A table budget: a count, or "unlimited".
Capacity = int | Literal["unlimited"]

MIN_TOKEN_LENGTH = 16


class ConfigError(InputError):
    """A bad configuration; the message is one line that starts with the key path."""


# -- sections ---------------------------------------------------------------------


@dataclass(frozen=True)
class ApiConfig:
    """The REST API. Bound to a non-loopback address it requires `token`."""

    host: str = "127.0.0.1"
    port: int = 8080  # 0: an ephemeral port (tests)
    token: str | None = field(default=None, repr=False)
    max_body_bytes: int = 64 * 1024

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
    """

    endpoints: tuple[str, ...] = ("http://127.0.0.1:2379",)
    prefix: str = "/mcast-controller/"
    lease_ttl_s: int = 2
    timeout_s: float = 1.0
    advertise_url: str | None = None


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

    With `incremental`, a change of jobs only is planned at once by admission
    (`algorithm.admission`: the other jobs keep their structures), and a full plan
    runs `reoptimise_after_s` after the last such change; it replaces the served
    plan only if it raises λ or the aggregate throughput by `reoptimise_min_gain`
    (relative), moving at most `reoptimise_max_churn` jobs to new structures (0:
    no limit; `algorithm.admission.within_churn`); while a re-optimisation is
    adopted that could not move every job it wanted to, another follows
    `reoptimise_after_s` later. Changes of the network always get a full plan.
    With `reoptimise_warm_start` a re-optimisation on an unchanged topology starts
    from the served plan's columns (`lp_rounding.solve`, `warm`) instead of the
    baselines' plans.
    """

    algorithm: str = "lp-rounding"
    objective: str = "max-concurrent"
    seed: int = 0
    debounce_s: float = 0.2
    max_delay_s: float = 2.0
    wait_s: float = 10.0
    link_hold_down_s: float = 2.0
    link_hold_down_max_s: float = 30.0
    incremental: bool = False
    reoptimise_after_s: float = 5.0
    reoptimise_min_gain: float = 0.01
    reoptimise_max_churn: int = 0
    reoptimise_warm_start: bool = True


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


@dataclass(frozen=True)
class LinkOverride:
    a: str
    b: str
    capacity: float


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
    ip: str
    mac: str | None = None  # None: the default MAC of the host's position


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
    unless one is given).
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


@dataclass(frozen=True)
class OpenFlowSettings:
    """Settings of every OpenFlow switch: `packet_in_pps` caps what a switch sends
    to the controller (its OFPM_CONTROLLER meter), 0 for no cap; `group_ids` and
    `meter_ids` are the (first, last) ids the controller allocates and owns: it
    reconciles only the groups and meters in them (OpenFlow 1.3 groups and meters
    carry no cookie), so other applications may use the rest."""

    packet_in_pps: int = 1000
    group_ids: tuple[int, int] = (1, OFPG_MAX)
    meter_ids: tuple[int, int] = (1, OFPM_MAX)
    table_features: bool = False  # ask switches for OFPMP_TABLE_FEATURES (F(v) from max_entries)
    # seconds between port statistics requests (measured link rates: GET /links, the UI); 0: off
    port_stats_s: float = 2.0


@dataclass(frozen=True)
class SwitchSouthbound:
    """One switch's southbound: None leaves the default in place."""

    backend: str | None = None
    address: str | None = None
    device_id: int | None = None
    dpid: int | None = None  # openflow only
    ports: tuple[int, ...] | None = None  # p4runtime only: its ports in a learned network
    program: str | None = None  # p4runtime only: the data plane it runs (p4runtime.programs)


@dataclass(frozen=True)
class SouthboundConfig:
    """Which southbound programs each switch: `backend` for every switch, and
    per-switch overrides in `switches`."""

    backend: str = "openflow"
    p4runtime: P4RuntimeSettings = P4RuntimeSettings()
    switches: Mapping[str, SwitchSouthbound] = field(default_factory=dict)
    openflow: OpenFlowSettings = OpenFlowSettings()


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
    controller asks for them (an ARP request out of every edge port)."""

    link_capacity: float = 10e9
    group_capacity: Capacity | None = None
    entry_capacity: Capacity | None = None
    host_timeout_s: float = 60.0
    probe_interval_s: float = 1.0


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


def is_loopback_host(host: str) -> bool:
    """True for 'localhost' and loopback IP literals (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# -- strict readers -----------------------------------------------------------------


def _key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where or 'top level'}: {message}")


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _mapping(value: Any, where: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
    if not isinstance(value, dict):
        raise _fail(where, f"expected a mapping, got {_type_name(value)}")
    for k in value:
        if not isinstance(k, str):
            raise _fail(where, f"keys must be strings, got {_type_name(k)} {k!r}")
        if k not in allowed:
            raise _fail(_key(where, k), f"unknown key (allowed: {', '.join(allowed)})")
    for k in required:
        if k not in value:
            raise _fail(_key(where, k), "missing required key")
    return value


def _per_switch(value: Any, at: str, allowed: tuple[str, ...]) -> Iterator[tuple[str, dict, str]]:
    """(name, its checked mapping, its key path) for a mapping of switch names."""
    if not isinstance(value, dict):
        raise _fail(at, f"expected a mapping of switch names, got {_type_name(value)}")
    for name, spec in value.items():
        if not isinstance(name, str) or not name:
            raise _fail(at, f"switch names must be non-empty strings, got {name!r}")
        s_at = _key(at, name)
        yield name, _mapping(spec, s_at, allowed), s_at


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _fail(where, f"expected a string, got {_type_name(value)}")
    if not value:
        raise _fail(where, "must not be empty")
    return value


def _integer(value: Any, where: str, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"expected an integer, got {_type_name(value)}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"within [{minimum}, {maximum}]"
        raise _fail(where, f"must be {bound}, got {value}")
    return value


def _number(value: Any, where: str, *, positive: bool = True) -> float:
    if isinstance(value, str):
        hint = ""
        try:
            float(value)
            hint = " (YAML reads 10e9 as a string: write 1.0e+10 or 10000000000)"
        except ValueError:
            pass
        raise _fail(where, f"expected a number, got a string {value!r}{hint}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(where, f"expected a number, got {_type_name(value)}")
    x = float(value)
    if not math.isfinite(x):
        raise _fail(where, f"must be finite, got {value}")
    if positive and x <= 0:
        raise _fail(where, f"must be > 0, got {value}")
    if not positive and x < 0:
        raise _fail(where, f"must be >= 0, got {value}")
    return x


def _capacity(value: Any, where: str) -> Capacity:
    if value == UNLIMITED:
        return UNLIMITED
    if isinstance(value, str):
        raise _fail(where, f"expected a non-negative integer or {UNLIMITED!r}, got {value!r}")
    return _integer(value, where, 0)


def _path(value: Any, where: str, base: Path) -> Path:
    p = Path(_string(value, where)).expanduser()
    return p if p.is_absolute() else base / p


def _section(data: dict, key: str, read: Callable[[Any, str], Any], default: Any) -> Any:
    return read(data[key], key) if key in data else default


def _read_api(value: Any, where: str) -> ApiConfig:
    raw = _mapping(value, where, ("host", "port", "token", "token_env", "max_body_bytes"))
    d = ApiConfig()
    host = _string(raw["host"], _key(where, "host")) if "host" in raw else d.host
    port = _integer(raw["port"], _key(where, "port"), 0, 65535) if "port" in raw else d.port
    if "token" in raw and "token_env" in raw:
        raise _fail(_key(where, "token_env"), "give either token or token_env, not both")
    token = None
    if "token" in raw:
        token = _string(raw["token"], _key(where, "token"))
    elif "token_env" in raw:
        name = _string(raw["token_env"], _key(where, "token_env"))
        token = os.environ.get(name)
        if not token:
            raise _fail(_key(where, "token_env"), f"environment variable {name} is not set or empty")
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise _fail(_key(where, "token"), f"must be at least {MIN_TOKEN_LENGTH} characters long")
    if token is None and not is_loopback_host(host):
        raise _fail(
            _key(where, "token"),
            f"required when api.host ({host}) is not a loopback address: otherwise any host on the "
            "fabric could register or delete jobs",
        )
    limit = (
        _integer(raw["max_body_bytes"], _key(where, "max_body_bytes"), 1, 16 * 1024 * 1024)
        if "max_body_bytes" in raw
        else d.max_body_bytes
    )
    return ApiConfig(host, port, token, limit)


def _read_planner(value: Any, where: str) -> PlannerConfig:
    keys = ("algorithm", "objective", "seed", "debounce_s", "max_delay_s", "wait_s", "link_hold_down_s", "link_hold_down_max_s",
            "incremental", "reoptimise_after_s", "reoptimise_min_gain", "reoptimise_max_churn", "reoptimise_warm_start")
    raw = _mapping(value, where, keys)
    d = PlannerConfig()
    algorithm = _string(raw.get("algorithm", d.algorithm), _key(where, "algorithm"))
    if algorithm not in ALGORITHMS:
        raise _fail(_key(where, "algorithm"), f"unknown algorithm {algorithm!r}; choose from {', '.join(ALGORITHMS)}")
    objective = _string(raw.get("objective", d.objective), _key(where, "objective"))
    if objective not in OBJECTIVES:
        raise _fail(_key(where, "objective"), f"unknown objective {objective!r}; choose from {', '.join(OBJECTIVES)}")
    seed = _integer(raw.get("seed", d.seed), _key(where, "seed"), 0)
    debounce = _number(raw.get("debounce_s", d.debounce_s), _key(where, "debounce_s"), positive=False)
    max_delay = _number(raw.get("max_delay_s", max(d.max_delay_s, debounce)), _key(where, "max_delay_s"), positive=False)
    if max_delay < debounce:
        raise _fail(_key(where, "max_delay_s"), f"must be >= debounce_s ({debounce}), got {max_delay}")
    wait = _number(raw.get("wait_s", d.wait_s), _key(where, "wait_s"), positive=True)
    hold = _number(raw.get("link_hold_down_s", d.link_hold_down_s), _key(where, "link_hold_down_s"), positive=False)
    hold_max = _number(
        raw.get("link_hold_down_max_s", max(d.link_hold_down_max_s, hold)), _key(where, "link_hold_down_max_s"), positive=False
    )
    if hold_max < hold:
        raise _fail(_key(where, "link_hold_down_max_s"), f"must be >= link_hold_down_s ({hold}), got {hold_max}")
    incremental = raw.get("incremental", d.incremental)
    if not isinstance(incremental, bool):
        raise _fail(_key(where, "incremental"), f"expected a boolean, got {_type_name(incremental)}")
    reopt = _number(raw.get("reoptimise_after_s", d.reoptimise_after_s), _key(where, "reoptimise_after_s"), positive=False)
    gain = _number(raw.get("reoptimise_min_gain", d.reoptimise_min_gain), _key(where, "reoptimise_min_gain"), positive=False)
    if gain < 0:
        raise _fail(_key(where, "reoptimise_min_gain"), f"must be >= 0, got {gain}")
    if reopt < 0:
        raise _fail(_key(where, "reoptimise_after_s"), f"must be >= 0, got {reopt}")
    churn = _integer(raw.get("reoptimise_max_churn", d.reoptimise_max_churn), _key(where, "reoptimise_max_churn"), 0)
    warm = raw.get("reoptimise_warm_start", d.reoptimise_warm_start)
    if not isinstance(warm, bool):
        raise _fail(_key(where, "reoptimise_warm_start"), f"expected a boolean, got {_type_name(warm)}")
    return PlannerConfig(algorithm, objective, seed, debounce, max_delay, wait, hold, hold_max, incremental, reopt, gain,
                         churn, warm)


def _read_multicast(value: Any, where: str) -> MulticastConfig:
    raw = _mapping(value, where, ("group_pool",))
    pool = _string(raw.get("group_pool", MulticastConfig.group_pool), _key(where, "group_pool"))
    try:
        GroupAddressPool(pool)
    except ValueError as e:
        raise _fail(_key(where, "group_pool"), str(e)) from None
    return MulticastConfig(pool)


def _read_topology(value: Any, where: str, base: Path) -> TopologyConfig:
    keys = ("instance", "fattree", "leaf_spine", "group_capacity", "entry_capacity", "switches", "links")
    raw = _mapping(value, where, keys)
    sources = [k for k in ("instance", "fattree", "leaf_spine") if k in raw]
    if len(sources) != 1:
        got = "none" if not sources else ", ".join(sources)
        raise _fail(where, f"give exactly one of instance, fattree, leaf_spine (got {got})")
    instance = fattree = spine = None
    if "instance" in raw:
        instance = _path(raw["instance"], _key(where, "instance"), base)
    if "fattree" in raw:
        at = _key(where, "fattree")
        ft = _mapping(raw["fattree"], at, ("k", "capacity", "core_oversubscription"), ("k",))
        k = _integer(ft["k"], _key(at, "k"), 2)
        if k % 2:
            raise _fail(_key(at, "k"), f"must be even, got {k}")
        cap = _number(ft.get("capacity", 10e9), _key(at, "capacity"))
        over = _number(ft.get("core_oversubscription", 1.0), _key(at, "core_oversubscription"))
        if over < 1:
            raise _fail(_key(at, "core_oversubscription"), f"must be >= 1, got {over}")
        fattree = FatTreeSpec(k, cap, over, "capacity" in ft)
    if "leaf_spine" in raw:
        at = _key(where, "leaf_spine")
        ls = _mapping(
            raw["leaf_spine"],
            at,
            ("leaves", "spines", "hosts_per_leaf", "capacity", "uplink_capacity"),
            ("leaves", "spines", "hosts_per_leaf"),
        )
        spine = LeafSpineSpec(
            _integer(ls["leaves"], _key(at, "leaves"), 1),
            _integer(ls["spines"], _key(at, "spines"), 1),
            _integer(ls["hosts_per_leaf"], _key(at, "hosts_per_leaf"), 1),
            _number(ls.get("capacity", 10e9), _key(at, "capacity")),
            _number(ls["uplink_capacity"], _key(at, "uplink_capacity")) if "uplink_capacity" in ls else None,
            "capacity" in ls,
        )
    defaults = {
        k: _capacity(raw[k], _key(where, k)) if k in raw else None for k in ("group_capacity", "entry_capacity")
    }
    switches: dict[str, SwitchOverride] = {}
    if "switches" in raw:
        for name, spec, s_at in _per_switch(raw["switches"], _key(where, "switches"), ("group_capacity", "entry_capacity")):
            switches[name] = SwitchOverride(
                **{k: _capacity(spec[k], _key(s_at, k)) for k in ("group_capacity", "entry_capacity") if k in spec}
            )
    links: list[LinkOverride] = []
    if "links" in raw:
        at = _key(where, "links")
        if not isinstance(raw["links"], list):
            raise _fail(at, f"expected a list, got {_type_name(raw['links'])}")
        for i, spec in enumerate(raw["links"]):
            l_at = f"{at}[{i}]"
            spec = _mapping(spec, l_at, ("a", "b", "capacity"), ("a", "b", "capacity"))
            links.append(
                LinkOverride(
                    _string(spec["a"], _key(l_at, "a")),
                    _string(spec["b"], _key(l_at, "b")),
                    _number(spec["capacity"], _key(l_at, "capacity")),
                )
            )
    return TopologyConfig(instance, fattree, spine, defaults["group_capacity"], defaults["entry_capacity"], switches, tuple(links))


def _read_hosts(value: Any, where: str) -> dict[str, HostConfig]:
    if not isinstance(value, dict):
        raise _fail(where, f"expected a mapping, got {_type_name(value)}")
    out: dict[str, HostConfig] = {}
    for name, spec in value.items():
        if not isinstance(name, str) or not name:
            raise _fail(where, f"host names must be non-empty strings, got {name!r}")
        at = _key(where, name)
        spec = _mapping(spec, at, ("ip", "mac"), ("ip",))
        ip_text = _string(spec["ip"], _key(at, "ip"))
        try:
            ip = ipaddress.IPv4Address(ip_text)
        except ValueError:
            raise _fail(_key(at, "ip"), f"not an IPv4 address: {ip_text!r}") from None
        if ip.is_multicast or ip.is_unspecified or ip == ipaddress.IPv4Address("255.255.255.255"):
            raise _fail(_key(at, "ip"), f"{ip} is not a unicast address")
        mac = None
        if "mac" in spec:
            try:
                mac = normalise_mac(_string(spec["mac"], _key(at, "mac")))
            except ValueError as e:
                raise _fail(_key(at, "mac"), str(e)) from None
            if int(mac[:2], 16) & 1:
                raise _fail(_key(at, "mac"), f"{mac} is a multicast MAC")
        out[name] = HostConfig(str(ip), mac)
    return out


def _address(value: Any, where: str) -> str:
    text = _string(value, where)
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise _fail(where, f"expected HOST:PORT with a port in 1..65535, got {text!r}")
    return text


def _program(value: Any, where: str) -> str:
    name = _string(value, where)
    if name not in PROGRAMS:
        raise _fail(where, f"unknown P4 program {name!r}; choose from {', '.join(PROGRAMS)}")
    return name


def _backend(value: Any, where: str) -> str:
    name = _string(value, where)
    if name not in BACKENDS:
        raise _fail(where, f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
    return name


MAX_P4_PORT = 511  # a 9-bit port number (v1model and TNA)


def _ports(value: Any, where: str) -> tuple[int, ...]:
    """A non-empty list of distinct port numbers (0..511), kept sorted."""
    if not isinstance(value, list):
        raise _fail(where, f"expected a list of port numbers, got {_type_name(value)}")
    if not value:
        raise _fail(where, "must list at least one port")
    ports = [_integer(p, f"{where}[{i}]", 0, MAX_P4_PORT) for i, p in enumerate(value)]
    dup = next((p for i, p in enumerate(ports) if p in ports[:i]), None)
    if dup is not None:
        raise _fail(where, f"port {dup} is listed twice")
    return tuple(sorted(ports))


def _id_range(value: Any, where: str, maximum: int) -> tuple[int, int]:
    if not isinstance(value, list):
        raise _fail(where, f"expected [first, last], got {_type_name(value)}")
    if len(value) != 2:
        raise _fail(where, f"expected [first, last], got a list of {len(value)}")
    first = _integer(value[0], f"{where}[0]", 1, maximum)
    last = _integer(value[1], f"{where}[1]", 1, maximum)
    if last < first:
        raise _fail(where, f"last ({last}) is below first ({first})")
    return first, last


MIN_PORT_STATS_S = 0.5  # faster polling loads the switches and the controller for no better picture


def _port_stats_s(value: Any, where: str) -> float:
    x = _number(value, where, positive=False)
    if 0 < x < MIN_PORT_STATS_S:
        raise _fail(where, f"must be 0 (no port statistics) or at least {MIN_PORT_STATS_S} s, got {value}")
    return x


def _read_southbound(value: Any, where: str, base: Path) -> SouthboundConfig:
    raw = _mapping(value, where, ("backend", "openflow", "p4runtime", "switches"))
    d = SouthboundConfig()
    of = d.openflow
    if "openflow" in raw:
        at = _key(where, "openflow")
        r = _mapping(raw["openflow"], at, ("packet_in_pps", "group_ids", "meter_ids", "table_features", "port_stats_s"))
        if "table_features" in r and not isinstance(r["table_features"], bool):
            raise _fail(_key(at, "table_features"), f"expected a boolean, got {_type_name(r['table_features'])}")
        of = OpenFlowSettings(
            _integer(r["packet_in_pps"], _key(at, "packet_in_pps"), 0, 1_000_000) if "packet_in_pps" in r else of.packet_in_pps,
            _id_range(r["group_ids"], _key(at, "group_ids"), OFPG_MAX) if "group_ids" in r else of.group_ids,
            _id_range(r["meter_ids"], _key(at, "meter_ids"), OFPM_MAX) if "meter_ids" in r else of.meter_ids,
            r.get("table_features", of.table_features),
            _port_stats_s(r["port_stats_s"], _key(at, "port_stats_s")) if "port_stats_s" in r else of.port_stats_s,
        )
    backend = _backend(raw["backend"], _key(where, "backend")) if "backend" in raw else d.backend
    p4 = d.p4runtime
    if "p4runtime" in raw:
        at = _key(where, "p4runtime")
        keys = (
            "p4info", "device_config", "election_id", "host", "base_port", "lldp_interval_s", "lldp_timeout_s",
            "packet_in_pps", "arbitration_retry_s", "ports", "program",
        )
        r = _mapping(raw["p4runtime"], at, keys)
        program = _program(r["program"], _key(at, "program")) if "program" in r else p4.program
        files = PROGRAMS[program]
        interval = (
            _number(r["lldp_interval_s"], _key(at, "lldp_interval_s"), positive=False)
            if "lldp_interval_s" in r
            else p4.lldp_interval_s
        )
        timeout = _number(r["lldp_timeout_s"], _key(at, "lldp_timeout_s")) if "lldp_timeout_s" in r else p4.lldp_timeout_s
        if interval and timeout <= interval:
            raise _fail(_key(at, "lldp_timeout_s"), f"must be > lldp_interval_s ({interval}), got {timeout}")
        p4 = P4RuntimeSettings(
            _path(r["p4info"], _key(at, "p4info"), base) if "p4info" in r else files.p4info,
            _path(r["device_config"], _key(at, "device_config"), base) if "device_config" in r else files.device_config,
            _integer(r["election_id"], _key(at, "election_id"), 1, 2**128 - 1) if "election_id" in r else p4.election_id,
            _string(r["host"], _key(at, "host")) if "host" in r else p4.host,
            _integer(r["base_port"], _key(at, "base_port"), 1, 65535) if "base_port" in r else p4.base_port,
            interval,
            timeout,
            _integer(r["packet_in_pps"], _key(at, "packet_in_pps"), 0, 1_000_000) if "packet_in_pps" in r else p4.packet_in_pps,
            (
                _number(r["arbitration_retry_s"], _key(at, "arbitration_retry_s"))
                if "arbitration_retry_s" in r
                else p4.arbitration_retry_s
            ),
            ports=_ports(r["ports"], _key(at, "ports")) if "ports" in r else p4.ports,
            program=program,
        )
    switches: dict[str, SwitchSouthbound] = {}
    if "switches" in raw:
        per_switch = ("backend", "address", "device_id", "dpid", "ports", "program")
        for name, spec, s_at in _per_switch(raw["switches"], _key(where, "switches"), per_switch):
            sb = SwitchSouthbound(
                _backend(spec["backend"], _key(s_at, "backend")) if "backend" in spec else None,
                _address(spec["address"], _key(s_at, "address")) if "address" in spec else None,
                _integer(spec["device_id"], _key(s_at, "device_id"), 0, 2**64 - 1) if "device_id" in spec else None,
                _integer(spec["dpid"], _key(s_at, "dpid"), 1, 2**64 - 1) if "dpid" in spec else None,
                _ports(spec["ports"], _key(s_at, "ports")) if "ports" in spec else None,
                _program(spec["program"], _key(s_at, "program")) if "program" in spec else None,
            )
            if (sb.backend or backend) != "p4runtime" and (sb.address is not None or sb.device_id is not None):
                key = "address" if sb.address is not None else "device_id"
                raise _fail(_key(s_at, key), "only a p4runtime switch has an address and a device id")
            if (sb.backend or backend) != "p4runtime" and sb.program is not None:
                raise _fail(_key(s_at, "program"), "only a p4runtime switch runs a P4 program")
            if (sb.backend or backend) != "openflow" and sb.dpid is not None:
                raise _fail(_key(s_at, "dpid"), "only an openflow switch has a datapath id")
            if (sb.backend or backend) != "p4runtime" and sb.ports is not None:
                raise _fail(_key(s_at, "ports"), "only a p4runtime switch lists its ports (OpenFlow switches describe theirs)")
            switches[name] = sb
    return SouthboundConfig(backend, p4, switches, of)


def switch_backends(config: Config, topology: Topology) -> dict[str, SwitchBackend]:
    """Switch name -> its resolved southbound, for every switch of `topology`.

    A p4runtime switch gets its configured address and device id, or
    `p4runtime.host`:`base_port` + n and device id n + 1 (n: its position among
    the switches, from 0); an openflow switch its configured datapath id, or n + 1.
    Raises ConfigError for an override naming no switch, a port beyond 65535, two
    switches sharing an address and device id, or two sharing a datapath id.
    """
    names = [topology.name(v) for v in topology.switches]
    for name in config.southbound.switches:
        if name not in names:
            raise _fail(f"southbound.switches.{name}", "not a switch of the topology")
    return _resolve_backends(config, names)


def configured_switches(config: Config) -> dict[str, SwitchBackend]:
    """In a learned network (no topology): the switches the config names, in the
    order it lists them (`southbound.switches`), with their resolved southbound:
    P4Runtime targets to connect to, and OpenFlow datapaths given a name by their
    datapath id. Positions for the defaults of `switch_backends` are the list's."""
    return _resolve_backends(config, list(config.southbound.switches))


def _resolve_backends(config: Config, names: list[str]) -> dict[str, SwitchBackend]:
    sb = config.southbound
    out: dict[str, SwitchBackend] = {}
    seen: dict[tuple[str, int], str] = {}
    dpids: dict[int, str] = {}
    for n, name in enumerate(names):
        o = sb.switches.get(name, SwitchSouthbound())
        backend = o.backend or sb.backend
        if backend != "p4runtime":
            dpid = o.dpid if o.dpid is not None else n + 1
            other = dpids.setdefault(dpid, name)
            if other != name:
                at = f"southbound.switches.{name if o.dpid is not None else other}.dpid"
                raise _fail(at, f"datapath id {dpid} is also that of switch {name if o.dpid is None else other}"
                            " (by default the n-th switch, from 0, has datapath id n + 1)")
            out[name] = SwitchBackend(name, backend, dpid=dpid)
            continue
        address = o.address
        if address is None:
            port = sb.p4runtime.base_port + n
            if port > 65535:
                raise _fail("southbound.p4runtime.base_port", f"switch {name} would listen on port {port} (> 65535)")
            address = f"{sb.p4runtime.host}:{port}"
        device_id = o.device_id if o.device_id is not None else n + 1
        other = seen.setdefault((address, device_id), name)
        if other != name:
            raise _fail(f"southbound.switches.{name}", f"same address {address} and device id {device_id} as {other}")
        ports = o.ports if o.ports is not None else sb.p4runtime.ports
        out[name] = SwitchBackend(name, backend, address, device_id, ports=ports,
                                  program=o.program or sb.p4runtime.program)
    return out


def config_from_dict(data: Any, base_dir: str | Path = ".") -> Config:
    """A `Config` from parsed YAML/JSON; relative paths are taken from `base_dir`.

    Also builds the topology and the host table, so that every error (an unknown
    switch in an override, a host address given twice, ...) surfaces here.
    """
    base = Path(base_dir)
    raw = _mapping(data, "", ("api", "store", "planner", "multicast", "topology", "hosts", "southbound", "discovery"))
    store = StoreConfig()
    if "store" in raw:
        store = _read_store(raw["store"], "store", base)
    else:
        store = StoreConfig(base / store.path)
    if "topology" in raw and "discovery" in raw:
        raise _fail("discovery", "applies only without a topology section (the controller then learns the network)")
    config = Config(
        topology=_read_topology(raw["topology"], "topology", base) if "topology" in raw else None,
        discovery=_section(raw, "discovery", _read_discovery, DiscoveryConfig()),
        api=_section(raw, "api", _read_api, ApiConfig()),
        store=store,
        planner=_section(raw, "planner", _read_planner, PlannerConfig()),
        multicast=_section(raw, "multicast", _read_multicast, MulticastConfig()),
        hosts=_section(raw, "hosts", _read_hosts, {}),
        southbound=_read_southbound(raw["southbound"], "southbound", base) if "southbound" in raw else SouthboundConfig(),
    )
    if config.discovers:
        _check_discovery(config)
        return config
    topology = build_topology(config)
    host_table(config, topology)
    switch_backends(config, topology)
    return config


def _url(value: Any, where: str) -> str:
    text = _string(value, where)
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _fail(where, f"expected an http:// or https:// URL with a host, got {text!r}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise _fail(where, f"bad port in {text!r}") from None
    return text.rstrip("/")


def _read_store(value: Any, where: str, base: Path) -> StoreConfig:
    raw = _mapping(value, where, ("path", "backend", "etcd"))
    d = StoreConfig()
    path = _path(raw["path"], _key(where, "path"), base) if "path" in raw else base / d.path
    backend = d.backend
    if "backend" in raw:
        backend = _string(raw["backend"], _key(where, "backend"))
        if backend not in ("sqlite", "etcd"):
            raise _fail(_key(where, "backend"), f"expected 'sqlite' or 'etcd', got {backend!r}")
    if backend == "etcd" and "path" in raw:
        raise _fail(_key(where, "path"), "applies only to store.backend sqlite (etcd keeps the store under store.etcd.prefix)")
    if backend == "sqlite" and "etcd" in raw:
        raise _fail(_key(where, "etcd"), "applies only with store.backend: etcd")
    etcd = EtcdConfig()
    if "etcd" in raw:
        at = _key(where, "etcd")
        e = _mapping(raw["etcd"], at, ("endpoints", "prefix", "lease_ttl_s", "timeout_s", "advertise_url"))
        endpoints = etcd.endpoints
        if "endpoints" in e:
            items = e["endpoints"]
            if isinstance(items, str):
                items = [items]
            if not isinstance(items, list) or not items:
                raise _fail(_key(at, "endpoints"), f"expected a non-empty list of URLs, got {_type_name(e['endpoints'])}")
            endpoints = tuple(_url(u, f"{_key(at, 'endpoints')}[{i}]") for i, u in enumerate(items))
        prefix = etcd.prefix
        if "prefix" in e:
            prefix = _string(e["prefix"], _key(at, "prefix"))
            if not prefix.endswith("/"):
                raise _fail(_key(at, "prefix"), f"must end with '/', got {prefix!r}")
        ttl = _integer(e["lease_ttl_s"], _key(at, "lease_ttl_s"), 2, 3600) if "lease_ttl_s" in e else etcd.lease_ttl_s
        timeout = _number(e["timeout_s"], _key(at, "timeout_s")) if "timeout_s" in e else etcd.timeout_s
        if timeout >= ttl:
            raise _fail(_key(at, "timeout_s"), f"must be below lease_ttl_s ({ttl}), got {timeout}")
        advertise = _url(e["advertise_url"], _key(at, "advertise_url")) if "advertise_url" in e else None
        etcd = EtcdConfig(endpoints, prefix, ttl, timeout, advertise)
    return StoreConfig(path, backend, etcd)


def _read_discovery(value: Any, where: str) -> DiscoveryConfig:
    raw = _mapping(value, where, ("link_capacity", "group_capacity", "entry_capacity", "host_timeout_s",
                                  "probe_interval_s"))
    d = DiscoveryConfig()
    return DiscoveryConfig(
        _number(raw["link_capacity"], _key(where, "link_capacity")) if "link_capacity" in raw else d.link_capacity,
        *(_capacity(raw[k], _key(where, k)) if k in raw else None for k in ("group_capacity", "entry_capacity")),
        *(_number(raw[k], _key(where, k)) if k in raw else getattr(d, k) for k in ("host_timeout_s", "probe_interval_s")),
    )


def _check_discovery(config: Config) -> None:
    """What a config without topology may say: hosts are named by address (or
    named here); OpenFlow datapaths that connect are learned, named of:<dpid>
    unless `southbound.switches.NAME.dpid` names one; P4Runtime targets are listed
    under `southbound.switches` (P4Runtime has no way for a switch to call the
    controller, so the controller has to know where to connect)."""
    sb = config.southbound
    for name, o in sb.switches.items():
        if (o.backend or sb.backend) == "openflow" and o.dpid is None:
            raise _fail(f"southbound.switches.{name}", "without a topology section an OpenFlow switch is named by "
                        "its datapath id: give `dpid` (or leave it out: it is then named of:<16 hex digits>)")
        if name.startswith("of:"):
            raise _fail(f"southbound.switches.{name}", "names starting with of: are those of learned OpenFlow datapaths")
    if sb.backend == "p4runtime" and not sb.switches:
        raise _fail("southbound.switches", "with backend p4runtime and no topology section, list the P4Runtime "
                    "targets here (address, device_id, ports): the controller connects to them")
    configured_switches(config)
    seen: dict[str, str] = {}
    for name, hc in config.hosts.items():
        other = seen.setdefault(hc.ip, name)
        if other != name:
            raise _fail(f"hosts.{name}.ip", f"{hc.ip} is also the address of host {other}")


# -- files ----------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses duplicate keys (PyYAML keeps the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise ConfigError(f"line {key_node.start_mark.line + 1}: unhashable key") from None
        if key in out:
            raise ConfigError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ConfigError(f"duplicate key {k!r}")
        out[k] = v
    return out


def parse_config_text(text: str, fmt: str) -> Any:
    """Parse `text` as 'yaml' or 'json' (duplicate keys are an error)."""
    if fmt == "json":
        try:
            return json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as e:
            raise ConfigError(f"not JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ConfigError(f"not YAML: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def load_config(path: str | Path) -> Config:
    """Read and validate a config file (JSON if it ends in .json, else YAML)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text") from None
    try:
        data = parse_config_text(text, "json" if p.suffix.lower() == ".json" else "yaml")
        return config_from_dict(data, p.resolve().parent)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None


# -- derived: topology and hosts ---------------------------------------------------------


def _budget(value: Capacity | None, current: int | None) -> int | None:
    if value is None:
        return current
    return None if value == UNLIMITED else value


def _base_topology(cfg: TopologyConfig) -> Topology:
    if cfg.fattree is not None:
        ft = cfg.fattree
        return fat_tree(ft.k, ft.capacity, ft.core_oversubscription)
    if cfg.leaf_spine is not None:
        ls = cfg.leaf_spine
        return leaf_spine(ls.leaves, ls.spines, ls.hosts_per_leaf, ls.capacity, ls.uplink_capacity)
    assert cfg.instance is not None
    where = f"topology.instance ({cfg.instance})"
    try:
        data = json.loads(cfg.instance.read_text(encoding="utf-8"))
    except OSError as e:
        raise _fail(where, f"cannot read: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(where, f"not a JSON instance: {e}") from None
    if isinstance(data, dict):
        jobs = data.setdefault("jobs", [])
        if jobs != []:
            n = len(jobs) if isinstance(jobs, list) else "some"
            raise _fail(where, f"holds {n} jobs; jobs come from the REST API and the job store, not the topology")
    try:
        return instance_from_dict(data).topology
    except InputError as e:
        raise _fail(where, str(e)) from None


def build_topology(config: Config) -> Topology:
    """The planner's topology: the configured source, then default budgets, then overrides."""
    cfg = config.topology
    if cfg is None:
        raise ValueError("the config declares no topology (the controller learns the network)")
    base = _base_topology(cfg)
    switch_names = {n.id for n in base.nodes if n.is_switch}
    for name in cfg.switches:
        if name not in switch_names:
            raise _fail(f"topology.switches.{name}", "unknown switch")
    nodes = []
    for n in base.nodes:
        if n.is_switch:
            g = _budget(cfg.group_capacity, n.group_capacity)
            e = _budget(cfg.entry_capacity, n.entry_capacity)
            o = cfg.switches.get(n.id)
            if o is not None:
                g = _budget(o.group_capacity, g)
                e = _budget(o.entry_capacity, e)
            n = Node(n.id, n.kind, g, e)
        nodes.append(n)
    link_at = {frozenset((l.a, l.b)): i for i, l in enumerate(base.links)}
    links = list(base.links)
    seen: dict[frozenset[str], int] = {}
    for i, o in enumerate(cfg.links):
        pair = frozenset((o.a, o.b))
        if pair not in link_at:
            raise _fail(f"topology.links[{i}]", f"no link between {o.a!r} and {o.b!r}")
        if pair in seen:
            raise _fail(f"topology.links[{i}]", f"link {o.a!r}-{o.b!r} overridden twice (also topology.links[{seen[pair]}])")
        seen[pair] = i
        j = link_at[pair]
        links[j] = Link(links[j].a, links[j].b, o.capacity)
    return Topology(tuple(nodes), tuple(links))


def explicit_capacities(config: Config, topology: Topology) -> frozenset[frozenset[str]]:
    """The links (node-name pairs) of `topology` whose capacity the config states:
    every link of an `instance` (its file gives each one), every link of a
    `fattree`/`leaf_spine` whose section gives `capacity`, a leaf-spine's
    leaf-to-spine links when it gives `uplink_capacity`, and every link in
    `links`. The others carry a default capacity, which the speeds the switches
    report for their ports replace (ControllerService: link capacities)."""
    cfg = config.topology
    if cfg is None:
        return frozenset()  # learned links take their ports' speeds
    pairs = [frozenset((link.a, link.b)) for link in topology.links]
    out: set[frozenset[str]] = {frozenset((o.a, o.b)) for o in cfg.links}
    if cfg.instance is not None:
        out.update(pairs)
    elif cfg.fattree is not None and cfg.fattree.capacity_given:
        out.update(pairs)
    elif cfg.leaf_spine is not None:
        if cfg.leaf_spine.capacity_given:
            out.update(pairs)
        elif cfg.leaf_spine.uplink_capacity is not None:
            out.update(
                pair for link, pair in zip(topology.links, pairs)
                if topology.is_switch(topology.index[link.a]) and topology.is_switch(topology.index[link.b])
            )
    return frozenset(out & set(pairs))


def host_table(config: Config, topology: Topology) -> dict[str, HostAddress]:
    """Host name -> IPv4 and MAC: the configured ones, else the defaults of
    `controller.southbound.addresses` (10.0.0.n and MAC n for the n-th host)."""
    position = {topology.name(h): n for n, h in enumerate(topology.hosts, start=1)}
    configured: dict[str, HostAddress] = {}
    for name, hc in config.hosts.items():
        if name not in position:
            raise _fail(f"hosts.{name}", "not a host of the topology")
        mac = hc.mac if hc.mac is not None else default_host_address(position[name]).mac
        configured[name] = HostAddress(hc.ip, mac)
    try:
        return host_addresses(topology, configured)
    except ValueError as e:
        raise _fail("hosts", str(e)) from None
