"""What the config's `topology` and `hosts` sections make: the planner's topology
and the host table.

`build_topology` turns the topology section (a §4 instance file without jobs,
read in the instance format, or a generated fat-tree or leaf-spine, with default
budgets and per-switch and per-link overrides) into the planner's `Topology`;
`explicit_capacities` says which of its links' capacities the config states;
`host_table` gives every host its IPv4 and MAC address (configured or default).
"""

from __future__ import annotations

import json

from controller.addressing.hosts import HostAddress, default_host_address, host_addresses
from controller.algorithm.model import Link, Node, Topology
from controller.algorithm.topologies import fat_tree, leaf_spine
from controller.config.instance import instance_from_dict
from controller.config.schema import UNLIMITED, Capacity, Config, TopologyConfig
from controller.config.strict import CONFIG, InputError

_fail = CONFIG.fail


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
    `controller.addressing.hosts` (10.0.0.n and MAC n for the n-th host)."""
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
