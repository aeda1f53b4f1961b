"""The controller's configuration, and the formats it reads from outside.

The package owns:

- `strict`: the one strict reader of untrusted JSON/YAML values (`InputError`,
  `ConfigError`, the typed field reads, the parsers that refuse duplicate keys);
- `schema`: the config's frozen dataclasses, defaults and limits;
- `load`: `load_config` and `config_from_dict`, the config file's section
  readers (with `fields`, the config's own kinds of value);
- `topology`: what the config's `topology` and `hosts` sections make (the
  planner's topology, the link capacities it states, the host table);
- `inventory`: which southbound programs each switch, resolved once (`Inventory`);
- `instance`: the JSON instance and plan formats (docs/architecture.md, Formats);
- `programs`: the data-plane programs a P4Runtime switch may run.
- `tenants`: the API's tenants (`api.tenants`, `api.tokens_file`) and minting their tokens.

The topology comes from the config's `topology` section (a §4 instance file
without jobs, or a generated fat-tree or leaf-spine, with default budgets and
per-switch and per-link overrides); a config without one has the controller
learn the network (LLDP discovery), within the limits of its `discovery` section.

It may import only `controller.algorithm`, `controller.addressing` and its own
modules; its modules import each other directly, never through this package.
The names below are re-exported for the rest of the controller.
"""

from controller.config.inventory import Inventory, configured_switches, switch_backends
from controller.config.load import config_from_dict, load_config
from controller.config.schema import (
    BACKENDS,
    MAX_P4_PORT,
    MIN_PORT_STATS_S,
    MIN_TOKEN_LENGTH,
    OFPG_MAX,
    OFPM_MAX,
    UNLIMITED,
    ApiConfig,
    Capacity,
    Config,
    DiscoveryConfig,
    EtcdConfig,
    FatTreeSpec,
    HostConfig,
    LeafSpineSpec,
    LinkOverride,
    MulticastConfig,
    OpenFlowSettings,
    P4RuntimeSettings,
    ServerTls,
    TlsFiles,
    PlannerConfig,
    SouthboundConfig,
    StoreConfig,
    SwitchBackend,
    SwitchOverride,
    SwitchSouthbound,
    TenantConfig,
    TopologyConfig,
    is_loopback_host,
)
from controller.config.strict import ConfigError, InputError, parse_config_text
from controller.config.topology import build_topology, explicit_capacities, host_table

__all__ = [
    "BACKENDS",
    "MAX_P4_PORT",
    "MIN_PORT_STATS_S",
    "MIN_TOKEN_LENGTH",
    "OFPG_MAX",
    "OFPM_MAX",
    "UNLIMITED",
    "ApiConfig",
    "Capacity",
    "Config",
    "ConfigError",
    "DiscoveryConfig",
    "EtcdConfig",
    "FatTreeSpec",
    "HostConfig",
    "InputError",
    "Inventory",
    "LeafSpineSpec",
    "LinkOverride",
    "MulticastConfig",
    "OpenFlowSettings",
    "P4RuntimeSettings",
    "ServerTls",
    "TlsFiles",
    "PlannerConfig",
    "SouthboundConfig",
    "StoreConfig",
    "SwitchBackend",
    "SwitchOverride",
    "SwitchSouthbound",
    "TenantConfig",
    "TopologyConfig",
    "build_topology",
    "config_from_dict",
    "configured_switches",
    "explicit_capacities",
    "host_table",
    "is_loopback_host",
    "load_config",
    "parse_config_text",
    "switch_backends",
]
