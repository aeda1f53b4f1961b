"""Reading the controller's configuration file: typed, strict, YAML or JSON.

`load_config(path)` reads a YAML (``.yaml``/``.yml``) or JSON (``.json``) file
into the frozen dataclasses of `schema`. Like the instance reader, it is strict
(`strict.CONFIG`): an unknown key, a duplicate key, a missing required key or a
value of the wrong type is a `ConfigError` whose one-line message names the key
path, for example
``controller.yaml: topology.links[2].capacity: expected a number, got a string``.
Relative paths in the file (``store.path``, ``topology.instance``, the TLS files
``southbound.*.tls`` and ``api.tls``) are relative to
the directory of the config file. The format is documented in docs/controller.md;
docs/examples/controller.yaml is a working example.

`config_from_dict` also builds what the config describes (the topology, the host
table and every switch's southbound: `topology`, `inventory`), so a file that
loads also builds.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from controller.addressing.groups import GroupAddressPool
from controller.addressing.hosts import normalise_mac
from controller.algorithm import ALGORITHMS, OBJECTIVES
from controller.client.normwire import PORT_SPAN
from controller.config import api_guards
from controller.config.fields import (
    address, capacity, file_path, id_range, one_of, per_switch, port_stats_s, ports, server_tls, tls_files, url,
)
from controller.config.inventory import configured_switches, switch_backends
from controller.config.programs import PROGRAMS
from controller.config.schema import (
    ADMIT,
    BACKENDS,
    MIN_TOKEN_LENGTH,
    OFPG_MAX,
    OFPM_MAX,
    ApiConfig,
    Config,
    HOST_RULE_KEYS,
    MAX_HOSTS_PER_PORT,
    DiscoveryConfig,
    EtcdConfig,
    FatTreeSpec,
    HostConfig,
    LeafSpineSpec,
    LinkOverride,
    LldpConfig,
    MulticastConfig,
    OpenFlowSettings,
    P4RuntimeSettings,
    PlannerConfig,
    SouthboundConfig,
    StoreConfig,
    SwitchOverride,
    SwitchBackend,
    SwitchSouthbound,
    TlsFiles,
    TopologyConfig,
    is_loopback_host,
)
from controller.config.strict import CONFIG, ConfigError, parse_config_text, read_text
from controller.config.tenants import read_tenants
from controller.config.strict import key as _key
from controller.config.topology import build_topology, host_table

_fail = CONFIG.fail
_type_name = CONFIG.type_name
_mapping = CONFIG.mapping
_string = CONFIG.string
_integer = CONFIG.integer
_number = CONFIG.number
_boolean = CONFIG.boolean
MAX_PORT = 0xFFFFFF00  # the highest OpenFlow port number (OFPP_MAX)


def config_from_dict(data: Any, base_dir: str | Path = ".") -> Config:
    """A `Config` from parsed YAML/JSON; relative paths are taken from `base_dir`.

    Also builds the topology and the host table, so that every error (an unknown
    switch in an override, a host address given twice, ...) surfaces here.
    """
    base = Path(base_dir)
    raw = _mapping(data, "", optional=("api", "store", "planner", "multicast", "topology", "hosts", "southbound", "discovery"))
    store = StoreConfig()
    if "store" in raw:
        store = _read_store(raw["store"], "store", base)
    else:
        store = StoreConfig(base / store.path)
    if "topology" in raw and "discovery" in raw:
        if not isinstance(raw["discovery"], dict) or not raw["discovery"]:
            raise _fail("discovery", "applies only without a topology section (the controller then learns the "
                        f"network); with one, discovery takes only {', '.join(HOST_RULE_KEYS)}")
        for k in raw["discovery"]:
            if k not in HOST_RULE_KEYS:
                raise _fail(_key("discovery", str(k)), "applies only without a topology section (the controller then "
                            f"learns the network); with one, discovery takes only {', '.join(HOST_RULE_KEYS)}")
    config = Config(
        topology=_read_topology(raw["topology"], "topology", base) if "topology" in raw else None,
        discovery=_section(raw, "discovery", _read_discovery, DiscoveryConfig()),
        api=_read_api_transport(raw.get("api"), "api", base,
                                _read_api(raw["api"], "api", base) if "api" in raw else ApiConfig(), store),
        store=store,
        planner=_section(raw, "planner", _read_planner, PlannerConfig()),
        multicast=_section(raw, "multicast", _read_multicast, MulticastConfig()),
        hosts=_section(raw, "hosts", _read_hosts, {}),
        southbound=_read_southbound(raw["southbound"], "southbound", base) if "southbound" in raw else SouthboundConfig(),
    )
    if config.discovers:
        _check_discovery(config)
        _check_planned_class(config, configured_switches(config))
        return config
    topology = build_topology(config)
    host_table(config, topology)
    _check_planned_class(config, switch_backends(config, topology))
    for name, hc in config.hosts.items():
        if hc.switch is not None and hc.switch not in [topology.name(v) for v in topology.neighbors[topology.index[name]]]:
            raise _fail(f"hosts.{name}.switch", f"the topology does not attach host {name} to {hc.switch}")
    return config


def _check_planned_class(config: Config, backends: Mapping[str, SwitchBackend]) -> None:
    """`southbound.planned_dscp` only on an OpenFlow fabric: the P4 program has no
    DSCP rewrite (docs/p4.md), so a P4 switch could neither mark nor reset."""
    if config.southbound.planned_dscp is None:
        return
    # The class tells a job's streams apart by their UDP port, the group address
    # modulo PORT_SPAN (`client.normwire.port_for`). Addresses go lowest free first,
    # so the live ones lie within the pool's first max_jobs: distinct ports as long
    # as that many fit in one span.
    live = min(GroupAddressPool(config.multicast.group_pool).size, config.api.limits.max_jobs)
    if live > PORT_SPAN:
        raise _fail("southbound.planned_dscp", f"the planned class tells jobs apart by a UDP port from their group "
                    f"address modulo {PORT_SPAN}, and up to {live} jobs could hold addresses (multicast.group_pool, "
                    f"api.limits.max_jobs): set api.limits.max_jobs to at most {PORT_SPAN}")
    p4 = sorted(name for name, b in backends.items() if b.backend == "p4runtime")
    if p4:
        raise _fail("southbound.planned_dscp", f"the planned class needs OpenFlow switches only: {', '.join(p4[:3])}"
                    f"{' ...' if len(p4) > 3 else ''} {'is a P4Runtime switch' if len(p4) == 1 else 'are P4Runtime switches'}"
                    ", and the P4 program has no DSCP rewrite (docs/p4.md); leave it out")


def _section(data: dict, key: str, read: Callable[[Any, str], Any], default: Any) -> Any:
    return read(data[key], key) if key in data else default


def _read_api(value: Any, where: str, base: Path = Path(".")) -> ApiConfig:
    raw = _mapping(value, where, optional=("host", "port", "token", "token_env", "max_body_bytes", "max_demand", "max_weight",
                                           "tenants", "tokens_file", "allowed_hosts", "limits",
                                           "tls", "insecure_http"))  # these two: _read_api_transport
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
    tenants = read_tenants(raw, where, base, token)
    if token is None and not tenants and not is_loopback_host(host):
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
    ceilings = []
    for name, top in (("max_demand", 1e15), ("max_weight", 1e6)):
        value = _number(raw[name], _key(where, name)) if name in raw else getattr(d, name)
        if value > top:
            raise _fail(_key(where, name), f"must be at most {top:g}, got {value:g}")
        ceilings.append(float(value))
    return _with_guards(ApiConfig(host, port, token, limit, *ceilings, tenants=tenants), raw, where)


def _read_api_transport(value: Any, where: str, base: Path, api: ApiConfig, store: StoreConfig) -> ApiConfig:
    """`api.tls` (HTTPS) and `api.insecure_http` on top of the rest of `api`: off
    loopback the API speaks TLS unless the config accepts plain HTTP in so many
    words; with TLS, the URL an instance advertises to the others is https://."""
    raw = value if isinstance(value, dict) else {}  # _read_api has checked the section's shape
    tls = server_tls(raw["tls"], _key(where, "tls"), base) if "tls" in raw else None
    insecure = _boolean(raw["insecure_http"], _key(where, "insecure_http")) if "insecure_http" in raw else False
    if tls is not None and insecure:
        raise _fail(_key(where, "insecure_http"), "applies only without api.tls; give one or the other")
    if tls is None and not insecure and not api.is_loopback:
        raise _fail(
            _key(where, "tls"),
            f"required when api.host ({api.host}) is not a loopback address: the bearer token and the jobs' "
            "broadcast keys would cross the network in clear (set api.insecure_http: true to accept that risk)",
        )
    advertise = store.etcd.advertise_url
    if tls is not None and advertise is not None and not advertise.startswith("https://"):
        raise _fail("store.etcd.advertise_url", f"must be an https:// URL when api.tls is set, got {advertise!r}")
    return dataclasses.replace(api, tls=tls, insecure_http=insecure)


def _with_guards(api: ApiConfig, raw: dict, where: str) -> ApiConfig:
    """`api.allowed_hosts` and `api.limits` (config/api_guards.py) added to `api`."""
    hosts = api_guards.allowed_hosts(raw["allowed_hosts"], _key(where, "allowed_hosts")) if "allowed_hosts" in raw else None
    limits = api_guards.api_limits(raw["limits"], _key(where, "limits")) if "limits" in raw else api.limits
    return dataclasses.replace(api, allowed_hosts=hosts, limits=limits)


def _read_planner(value: Any, where: str) -> PlannerConfig:
    keys = ("algorithm", "objective", "seed", "debounce_s", "max_delay_s", "wait_s", "link_hold_down_s", "link_hold_down_max_s",
            "incremental", "reoptimise_after_s", "reoptimise_min_gain", "reoptimise_max_churn", "reoptimise_warm_start",
            "reoptimise_max_churn_share", "phase_rates", "broadcast_ttl_s", "broadcast_idle_share")
    raw = _mapping(value, where, optional=keys)
    d = PlannerConfig()
    algorithm = one_of(raw.get("algorithm", d.algorithm), _key(where, "algorithm"), "algorithm", ALGORITHMS)
    objective = one_of(raw.get("objective", d.objective), _key(where, "objective"), "objective", OBJECTIVES)
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
    # admission places jobs with greedy's candidates: on by default only for the default
    # algorithm; a file that picks another (a baseline) gets that algorithm's plans
    incremental = _boolean(raw.get("incremental", d.incremental and algorithm == d.algorithm), _key(where, "incremental"))
    reopt = _number(raw.get("reoptimise_after_s", d.reoptimise_after_s), _key(where, "reoptimise_after_s"), positive=False)
    gain = _number(raw.get("reoptimise_min_gain", d.reoptimise_min_gain), _key(where, "reoptimise_min_gain"), positive=False)
    if gain < 0:
        raise _fail(_key(where, "reoptimise_min_gain"), f"must be >= 0, got {gain}")
    if reopt < 0:
        raise _fail(_key(where, "reoptimise_after_s"), f"must be >= 0, got {reopt}")
    churn = _integer(raw.get("reoptimise_max_churn", d.reoptimise_max_churn), _key(where, "reoptimise_max_churn"), 0)
    warm = _boolean(raw.get("reoptimise_warm_start", d.reoptimise_warm_start), _key(where, "reoptimise_warm_start"))
    share = _churn_share(raw, where, d)
    phases = _boolean(raw.get("phase_rates", d.phase_rates), _key(where, "phase_rates"))
    ttl = _number(raw.get("broadcast_ttl_s", d.broadcast_ttl_s), _key(where, "broadcast_ttl_s"), positive=True)
    if ttl > 3600:
        raise _fail(_key(where, "broadcast_ttl_s"), f"must be at most 3600 s, got {ttl}")
    idle = _number(raw.get("broadcast_idle_share", d.broadcast_idle_share), _key(where, "broadcast_idle_share"),
                   positive=False)
    if not 0 <= idle <= 1:
        raise _fail(_key(where, "broadcast_idle_share"), f"must be a share of the planned rate within [0, 1], got {idle}")
    return PlannerConfig(algorithm, objective, seed, debounce, max_delay, wait, hold, hold_max, incremental, reopt, gain,
                         churn, warm, share, phases, ttl, idle)


def _churn_share(raw: dict, where: str, d: PlannerConfig) -> float:
    """`planner.reoptimise_max_churn_share`, a share in [0, 1]. A file that sets
    `reoptimise_max_churn` without it keeps the meaning it had before the share
    existed (that count alone, 0: no limit): its share is 0."""
    if "reoptimise_max_churn_share" not in raw:
        return 0.0 if "reoptimise_max_churn" in raw else d.reoptimise_max_churn_share
    where_share = _key(where, "reoptimise_max_churn_share")
    share = _number(raw["reoptimise_max_churn_share"], where_share, positive=False)
    if share > 1:
        raise _fail(where_share, f"must be a share of the jobs within [0, 1], got {share}")
    return share


def _read_multicast(value: Any, where: str) -> MulticastConfig:
    raw = _mapping(value, where, optional=("group_pool",))
    pool = _string(raw.get("group_pool", MulticastConfig.group_pool), _key(where, "group_pool"))
    try:
        GroupAddressPool(pool)
    except ValueError as e:
        raise _fail(_key(where, "group_pool"), str(e)) from None
    return MulticastConfig(pool)


def _read_topology(value: Any, where: str, base: Path) -> TopologyConfig:
    keys = ("instance", "fattree", "leaf_spine", "group_capacity", "entry_capacity", "switches", "links")
    raw = _mapping(value, where, optional=keys)
    sources = [k for k in ("instance", "fattree", "leaf_spine") if k in raw]
    if len(sources) != 1:
        got = "none" if not sources else ", ".join(sources)
        raise _fail(where, f"give exactly one of instance, fattree, leaf_spine (got {got})")
    instance = fattree = spine = None
    if "instance" in raw:
        instance = file_path(raw["instance"], _key(where, "instance"), base)
    if "fattree" in raw:
        at = _key(where, "fattree")
        ft = _mapping(raw["fattree"], at, ("k",), ("capacity", "core_oversubscription"))
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
            ("leaves", "spines", "hosts_per_leaf"),
            ("capacity", "uplink_capacity"),
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
        k: capacity(raw[k], _key(where, k)) if k in raw else None for k in ("group_capacity", "entry_capacity")
    }
    switches: dict[str, SwitchOverride] = {}
    if "switches" in raw:
        for name, spec, s_at in per_switch(raw["switches"], _key(where, "switches"), ("group_capacity", "entry_capacity")):
            switches[name] = SwitchOverride(
                **{k: capacity(spec[k], _key(s_at, k)) for k in ("group_capacity", "entry_capacity") if k in spec}
            )
    links: list[LinkOverride] = []
    if "links" in raw:
        at = _key(where, "links")
        if not isinstance(raw["links"], list):
            raise _fail(at, f"expected a list, got {_type_name(raw['links'])}")
        for i, spec in enumerate(raw["links"]):
            l_at = f"{at}[{i}]"
            spec = _mapping(spec, l_at, ("a", "b", "capacity"))
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
        spec = _mapping(spec, at, ("ip",), ("mac", "switch", "port"))
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
        if ("switch" in spec) != ("port" in spec):
            raise _fail(_key(at, "switch" if "port" in spec else "port"),
                        "switch and port go together: the host is pinned to that port of that switch")
        switch = _string(spec["switch"], _key(at, "switch")) if "switch" in spec else None
        port = _integer(spec["port"], _key(at, "port"), 1, MAX_PORT) if "port" in spec else None
        out[name] = HostConfig(str(ip), mac, switch, port)
    pinned: dict[tuple[str, int], str] = {}
    for name, hc in out.items():
        if hc.pinned is not None and pinned.setdefault(hc.pinned, name) != name:
            raise _fail(_key(_key(where, name), "port"), f"{hc.switch} port {hc.port} is also host "
                        f"{pinned[hc.pinned]}'s (a port holds at most {MAX_HOSTS_PER_PORT} host)")
    return out


def _read_store(value: Any, where: str, base: Path) -> StoreConfig:
    raw = _mapping(value, where, optional=("path", "backend", "etcd"))
    d = StoreConfig()
    path = file_path(raw["path"], _key(where, "path"), base) if "path" in raw else base / d.path
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
        e = _mapping(raw["etcd"], at, optional=("endpoints", "prefix", "lease_ttl_s", "timeout_s", "advertise_url",
                                                "tls", "user", "password_env", "password_file"))
        endpoints = etcd.endpoints
        if "endpoints" in e:
            items = e["endpoints"]
            if isinstance(items, str):
                items = [items]
            if not isinstance(items, list) or not items:
                raise _fail(_key(at, "endpoints"), f"expected a non-empty list of URLs, got {_type_name(e['endpoints'])}")
            endpoints = tuple(url(u, f"{_key(at, 'endpoints')}[{i}]") for i, u in enumerate(items))
        prefix = etcd.prefix
        if "prefix" in e:
            prefix = _string(e["prefix"], _key(at, "prefix"))
            if not prefix.endswith("/"):
                raise _fail(_key(at, "prefix"), f"must end with '/', got {prefix!r}")
        ttl = _integer(e["lease_ttl_s"], _key(at, "lease_ttl_s"), 2, 3600) if "lease_ttl_s" in e else etcd.lease_ttl_s
        timeout = _number(e["timeout_s"], _key(at, "timeout_s")) if "timeout_s" in e else etcd.timeout_s
        if timeout >= ttl:
            raise _fail(_key(at, "timeout_s"), f"must be below lease_ttl_s ({ttl}), got {timeout}")
        advertise = url(e["advertise_url"], _key(at, "advertise_url")) if "advertise_url" in e else None
        etcd = EtcdConfig(endpoints, prefix, ttl, timeout, advertise, *_read_etcd_access(e, at, endpoints, base))
    return StoreConfig(path, backend, etcd)


def _read_etcd_access(e: dict, at: str, endpoints: tuple[str, ...], base: Path) -> tuple[TlsFiles | None, str | None, str | None]:
    """`store.etcd.tls`, `user` and its password (`password_env` or `password_file`)."""
    tls = tls_files(e["tls"], _key(at, "tls"), base) if "tls" in e else None
    for i, endpoint in enumerate(endpoints):  # without tls, https:// endpoints are verified against the system's CAs
        if tls is not None and not endpoint.startswith("https://"):
            raise _fail(f"{_key(at, 'endpoints')}[{i}]", f"{endpoint}: with store.etcd.tls every endpoint must be https://")
    if "password_env" in e and "password_file" in e:
        raise _fail(_key(at, "password_file"), "give either password_env or password_file, not both")
    user = None
    if "user" in e:
        user = _string(e["user"], _key(at, "user"))
        if not user or user != user.strip():
            raise _fail(_key(at, "user"), f"expected an etcd user name, got {user!r}")
    password = None
    if "password_env" in e:
        name = _string(e["password_env"], _key(at, "password_env"))
        password = os.environ.get(name)
        if not password:
            raise _fail(_key(at, "password_env"), f"environment variable {name} is not set or empty")
    elif "password_file" in e:
        where = _key(at, "password_file")
        path = file_path(e["password_file"], where, base)
        try:
            password = path.read_text().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as err:
            raise _fail(where, f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
        if not password:
            raise _fail(where, f"{path} is empty")
    if user is not None and password is None:
        raise _fail(_key(at, "user"), "needs password_env or password_file")
    if user is None and password is not None:
        raise _fail(_key(at, "user"), "required with password_env or password_file")
    return tls, user, password


def _read_discovery(value: Any, where: str) -> DiscoveryConfig:
    keys = ("link_capacity", "group_capacity", "entry_capacity", "host_timeout_s", "probe_interval_s") + HOST_RULE_KEYS
    raw = _mapping(value, where, optional=keys)
    d = DiscoveryConfig()
    per_port = d.max_hosts_per_port
    if "max_hosts_per_port" in raw:
        at = _key(where, "max_hosts_per_port")
        per_port = _integer(raw["max_hosts_per_port"], at, 1)
        if per_port > MAX_HOSTS_PER_PORT:
            raise _fail(at, f"at most {MAX_HOSTS_PER_PORT} for now, got {per_port}: hosts sharing one port would share "
                        "its capacity and receive a job's packets once per host, which the planner does not model")
    return DiscoveryConfig(
        _number(raw["link_capacity"], _key(where, "link_capacity")) if "link_capacity" in raw else d.link_capacity,
        *(capacity(raw[k], _key(where, k)) if k in raw else None for k in ("group_capacity", "entry_capacity")),
        *(_number(raw[k], _key(where, k)) if k in raw else getattr(d, k) for k in ("host_timeout_s", "probe_interval_s")),
        per_port,
        _number(raw["host_idle_s"], _key(where, "host_idle_s"), positive=False) if "host_idle_s" in raw else d.host_idle_s,
        _number(raw["move_confirm_s"], _key(where, "move_confirm_s")) if "move_confirm_s" in raw else d.move_confirm_s,
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
        if hc.switch is not None and not hc.switch.startswith("of:") and hc.switch not in sb.switches:
            raise _fail(f"hosts.{name}.switch", f"{hc.switch!r} is neither a learned OpenFlow datapath's name "
                        "(of:<16 hex digits>) nor a switch of southbound.switches")


def _read_southbound(value: Any, where: str, base: Path) -> SouthboundConfig:
    raw = _mapping(value, where, optional=("backend", "openflow", "p4runtime", "switches", "lldp", "admit", "planned_dscp"))
    d = SouthboundConfig()
    of = d.openflow
    if "openflow" in raw:
        at = _key(where, "openflow")
        r = _mapping(raw["openflow"], at, optional=("packet_in_pps", "group_ids", "meter_ids", "table_features", "port_stats_s",
                                                        "tls", "fast_failover"))
        features = _boolean(r["table_features"], _key(at, "table_features")) if "table_features" in r else of.table_features
        of = OpenFlowSettings(
            _integer(r["packet_in_pps"], _key(at, "packet_in_pps"), 0, 1_000_000) if "packet_in_pps" in r else of.packet_in_pps,
            id_range(r["group_ids"], _key(at, "group_ids"), OFPG_MAX) if "group_ids" in r else of.group_ids,
            id_range(r["meter_ids"], _key(at, "meter_ids"), OFPM_MAX) if "meter_ids" in r else of.meter_ids,
            features,
            port_stats_s(r["port_stats_s"], _key(at, "port_stats_s")) if "port_stats_s" in r else of.port_stats_s,
            tls_files(r["tls"], _key(at, "tls"), base) if "tls" in r else None,
            _boolean(r["fast_failover"], _key(at, "fast_failover")) if "fast_failover" in r else of.fast_failover,
        )
    backend = one_of(raw["backend"], _key(where, "backend"), "backend", BACKENDS) if "backend" in raw else d.backend
    p4 = d.p4runtime
    if "p4runtime" in raw:
        at = _key(where, "p4runtime")
        keys = (
            "p4info", "device_config", "election_id", "host", "base_port", "lldp_interval_s", "lldp_timeout_s",
            "packet_in_pps", "arbitration_retry_s", "ports", "program", "tls", "fast_failover",
            "heartbeat_interval_s", "failover_timeout_s",
        )
        r = _mapping(raw["p4runtime"], at, optional=keys)
        program = one_of(r["program"], _key(at, "program"), "P4 program", PROGRAMS) if "program" in r else p4.program
        files = PROGRAMS[program]
        interval = (
            _number(r["lldp_interval_s"], _key(at, "lldp_interval_s"), positive=False)
            if "lldp_interval_s" in r
            else p4.lldp_interval_s
        )
        timeout = _number(r["lldp_timeout_s"], _key(at, "lldp_timeout_s")) if "lldp_timeout_s" in r else p4.lldp_timeout_s
        # the timeout against the interval: `_one_lldp_interval` (the interval may be southbound.lldp's)
        p4 = P4RuntimeSettings(
            file_path(r["p4info"], _key(at, "p4info"), base) if "p4info" in r else files.p4info,
            file_path(r["device_config"], _key(at, "device_config"), base) if "device_config" in r else files.device_config,
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
            ports=ports(r["ports"], _key(at, "ports")) if "ports" in r else p4.ports,
            program=program,
            tls=tls_files(r["tls"], _key(at, "tls"), base) if "tls" in r else None,
            fast_failover=_boolean(r["fast_failover"], _key(at, "fast_failover")) if "fast_failover" in r else p4.fast_failover,
            heartbeat_interval_s=(_number(r["heartbeat_interval_s"], _key(at, "heartbeat_interval_s"))
                                  if "heartbeat_interval_s" in r else p4.heartbeat_interval_s),
            failover_timeout_s=(_number(r["failover_timeout_s"], _key(at, "failover_timeout_s"))
                                if "failover_timeout_s" in r else p4.failover_timeout_s),
        )
        if p4.failover_timeout_s <= p4.heartbeat_interval_s:
            raise _fail(_key(at, "failover_timeout_s"), f"must be longer than heartbeat_interval_s"
                        f" ({p4.heartbeat_interval_s} s), got {p4.failover_timeout_s} s")
    switches: dict[str, SwitchSouthbound] = {}
    if "switches" in raw:
        keys = ("backend", "address", "device_id", "dpid", "ports", "program", "edge_ports")
        for name, spec, s_at in per_switch(raw["switches"], _key(where, "switches"), keys):
            sb = SwitchSouthbound(
                one_of(spec["backend"], _key(s_at, "backend"), "backend", BACKENDS) if "backend" in spec else None,
                address(spec["address"], _key(s_at, "address")) if "address" in spec else None,
                _integer(spec["device_id"], _key(s_at, "device_id"), 0, 2**64 - 1) if "device_id" in spec else None,
                _integer(spec["dpid"], _key(s_at, "dpid"), 1, 2**64 - 1) if "dpid" in spec else None,
                ports(spec["ports"], _key(s_at, "ports")) if "ports" in spec else None,
                one_of(spec["program"], _key(s_at, "program"), "P4 program", PROGRAMS) if "program" in spec else None,
                ports(spec["edge_ports"], _key(s_at, "edge_ports")) if "edge_ports" in spec else (),
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
    lldp = _read_lldp(raw["lldp"], _key(where, "lldp")) if "lldp" in raw else LldpConfig()
    lldp, p4 = _one_lldp_interval(raw, where, lldp, p4)
    admit = one_of(raw["admit"], _key(where, "admit"), "admission", ADMIT) if "admit" in raw else None
    dscp = raw.get("planned_dscp")  # null: off, as when left out
    dscp = None if dscp is None else _integer(dscp, _key(where, "planned_dscp"), 0, 63)
    return SouthboundConfig(backend, p4, switches, of, lldp, admit, dscp)


def _one_lldp_interval(
    raw: Mapping[str, Any], where: str, lldp: LldpConfig, p4: P4RuntimeSettings
) -> tuple[LldpConfig, P4RuntimeSettings]:
    """The one LLDP interval of both backends: `southbound.lldp.interval_s`, or its
    older name `southbound.p4runtime.lldp_interval_s` (not both); kept in both
    places, so that either reads the same."""
    given_new = isinstance(raw.get("lldp"), Mapping) and "interval_s" in raw["lldp"]
    given_old = isinstance(raw.get("p4runtime"), Mapping) and "lldp_interval_s" in raw["p4runtime"]
    if given_new and given_old:
        raise _fail(_key(_key(where, "lldp"), "interval_s"),
                    f"give the LLDP interval once: {_key(_key(where, 'p4runtime'), 'lldp_interval_s')} is its older name")
    interval = lldp.interval_s if given_new else p4.lldp_interval_s
    if interval and p4.lldp_timeout_s <= interval:
        raise _fail(_key(_key(where, "p4runtime"), "lldp_timeout_s"),
                    f"must be > the LLDP interval ({interval}), got {p4.lldp_timeout_s}")
    return dataclasses.replace(lldp, interval_s=interval), dataclasses.replace(p4, lldp_interval_s=interval)


def _read_lldp(value: Any, where: str) -> LldpConfig:
    """southbound.lldp: the probes' secret (given, or from an environment variable,
    read now), their largest age and the interval between two rounds."""
    raw = _mapping(value, where, optional=("secret", "secret_env", "max_age_s", "interval_s"))
    if "secret" in raw and "secret_env" in raw:
        raise _fail(_key(where, "secret_env"), "give secret or secret_env, not both")
    secret, env = None, None
    if "secret" in raw:
        secret = _string(raw["secret"], _key(where, "secret"))
        at = _key(where, "secret")
    elif "secret_env" in raw:
        env = _string(raw["secret_env"], _key(where, "secret_env"))
        at = _key(where, "secret_env")
        secret = os.environ.get(env)
        if secret is None:
            raise _fail(at, f"the environment variable {env} is not set")
    if secret is not None and len(secret) < MIN_TOKEN_LENGTH:
        raise _fail(at, f"the secret must be at least {MIN_TOKEN_LENGTH} characters long")
    max_age = _number(raw["max_age_s"], _key(where, "max_age_s")) if "max_age_s" in raw else LldpConfig.max_age_s
    interval = (_number(raw["interval_s"], _key(where, "interval_s"), positive=False) if "interval_s" in raw
                else LldpConfig.interval_s)
    return LldpConfig(secret, env, max_age, interval)


def load_config(path: str | Path) -> Config:
    """Read and validate a config file (JSON if it ends in .json, else YAML)."""
    p = Path(path)
    text = read_text(p, ConfigError)
    try:
        data = parse_config_text(text, "json" if p.suffix.lower() == ".json" else "yaml")
        return config_from_dict(data, p.resolve().parent)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None

