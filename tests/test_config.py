"""The controller config: the documented example loads; every mistake names its key path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.config import (
    ConfigError,
    SwitchBackend,
    build_topology,
    config_from_dict,
    host_table,
    is_loopback_host,
    load_config,
)

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "controller.yaml"


def minimal(**sections) -> dict:
    data = {"topology": {"fattree": {"k": 4}}}
    data.update(sections)
    return data


def test_example_loads_and_builds():
    config = load_config(EXAMPLE)
    topo = build_topology(config)
    assert len(topo.hosts) == 16 and len(topo.switches) == 20
    node = {n.id: n for n in topo.nodes}
    assert node["core-0"].group_capacity == 2  # per-switch override
    assert node["core-1"].group_capacity == 4  # default
    assert node["core-1"].entry_capacity is None  # 'unlimited'
    caps = {frozenset((l.a, l.b)): l.capacity for l in topo.links}
    assert caps[frozenset(("core-0", "agg-0-0"))] == 5e9
    assert caps[frozenset(("core-1", "agg-0-0"))] == 10e9
    assert config.api.host == "127.0.0.1" and config.api.token is None
    assert config.store.path == EXAMPLE.parent / "controller-jobs.sqlite"
    assert host_table(config, topo)["host-0"].ip == "10.0.0.1"


def test_defaults():
    config = config_from_dict(minimal())
    assert config.api.port == 8080 and config.api.max_body_bytes == 65536
    assert config.planner.algorithm == "lp-rounding" and config.multicast.group_pool == "239.1.0.0/16"
    assert all(n.group_capacity is None for n in build_topology(config).nodes)
    assert (config.planner.link_hold_down_s, config.planner.link_hold_down_max_s) == (2.0, 30.0)


def test_link_hold_down_keys():
    planner = config_from_dict(minimal(planner={"link_hold_down_s": 0})).planner
    assert (planner.link_hold_down_s, planner.link_hold_down_max_s) == (0.0, 30.0)  # 0: off
    # a base above the default maximum raises the maximum with it, as max_delay_s follows debounce_s
    planner = config_from_dict(minimal(planner={"link_hold_down_s": 60})).planner
    assert (planner.link_hold_down_s, planner.link_hold_down_max_s) == (60.0, 60.0)
    planner = config_from_dict(minimal(planner={"link_hold_down_s": 1, "link_hold_down_max_s": 8})).planner
    assert (planner.link_hold_down_s, planner.link_hold_down_max_s) == (1.0, 8.0)


@pytest.mark.parametrize(
    "data, where",
    [
        (minimal(colour="red"), "colour: unknown key"),
        (minimal(api={"hots": "127.0.0.1"}), "api.hots: unknown key"),
        (minimal(api={"port": "8080"}), "api.port: expected an integer, got a string"),
        (minimal(api={"port": 70000}), "api.port: must be within"),
        (minimal(api={"port": True}), "api.port: expected an integer, got a boolean"),
        (minimal(planner={"debounce_s": -1}), "planner.debounce_s: must be >= 0"),
        (minimal(planner={"algorithm": "magic"}), "planner.algorithm: unknown algorithm"),
        (minimal(planner={"link_hold_down_s": -0.5}), "planner.link_hold_down_s: must be >= 0, got -0.5"),
        (minimal(planner={"link_hold_down_s": "2s"}), "planner.link_hold_down_s: expected a number, got a string"),
        (minimal(planner={"link_hold_down_max_s": 1}), "planner.link_hold_down_max_s: must be >= link_hold_down_s (2.0), got 1.0"),
        (minimal(planner={"link_hold_down_s": 5, "link_hold_down_max_s": 4}), "planner.link_hold_down_max_s: must be >= link_hold_down_s (5.0)"),
        (minimal(planner={"link_hold_down_max_s": float("inf")}), "planner.link_hold_down_max_s: must be finite"),
        (minimal(multicast={"group_pool": "10.0.0.0/8"}), "multicast.group_pool: "),
        (minimal(multicast={"group_pool": "224.0.0.0/16"}), "multicast.group_pool: "),
        (minimal(multicast={"group_pool": "not a net"}), "multicast.group_pool: "),
        ({"topology": {"fattree": {"k": 3}}}, "topology.fattree.k: must be even"),
        ({"topology": {"fattree": {"k": 4}, "leaf_spine": {"leaves": 1, "spines": 1, "hosts_per_leaf": 1}}}, "topology: give exactly one"),
        ({"topology": {"fattree": {"k": 4, "capacity": "10e9"}}}, "topology.fattree.capacity: expected a number, got a string '10e9' (YAML"),
        ({"topology": {"fattree": {"k": 4}, "group_capacity": -1}}, "topology.group_capacity: must be >= 0"),
        ({"topology": {"fattree": {"k": 4}, "group_capacity": "lots"}}, "topology.group_capacity: expected a non-negative integer or 'unlimited'"),
        ({"topology": {"fattree": {"k": 4}, "switches": {"core-9": {"group_capacity": 1}}}}, "topology.switches.core-9: unknown switch"),
        ({"topology": {"fattree": {"k": 4}, "switches": {"core-0": {"groups": 1}}}}, "topology.switches.core-0.groups: unknown key"),
        (
            {"topology": {"fattree": {"k": 4}, "links": [{"a": "core-0", "b": "agg-0-0", "capacity": 1}, {"a": "core-0", "b": "agg-0-0", "capacity": 1}, {"a": "core-0", "b": "edge-0-0", "capacity": 1}]}},
            "topology.links[1]: link 'core-0'-'agg-0-0' overridden twice",
        ),
        (
            {"topology": {"fattree": {"k": 4}, "links": [{"a": "core-0", "b": "agg-0-0", "capacity": 1}, {"a": "core-0", "b": "agg-1-0", "capacity": 1}, {"a": "core-0", "b": "agg-0-0", "capacity": "x"}]}},
            "topology.links[2].capacity: expected a number",
        ),
        ({"topology": {"fattree": {"k": 4}, "links": [{"a": "core-0", "b": "edge-0-0", "capacity": 1}]}}, "topology.links[0]: no link between"),
        (minimal(hosts={"host-99": {"ip": "10.9.9.9"}}), "hosts.host-99: not a host of the topology"),
        (minimal(hosts={"host-0": {"ip": "10.0.0.999"}}), "hosts.host-0.ip: not an IPv4 address"),
        (minimal(hosts={"host-0": {"ip": "10.0.0.2"}}), "hosts: hosts host-0 and host-1 have the same IP"),
        (minimal(hosts={"host-0": {"ip": "10.1.0.1", "mac": "01:00:00:00:00:01"}}), "hosts.host-0.mac: 01:00:00:00:00:01 is a multicast MAC"),
        (minimal(api={"host": "0.0.0.0"}), "api.token: required when api.host (0.0.0.0) is not a loopback address"),
        (minimal(api={"token": "short"}), "api.token: must be at least 16 characters"),
        (minimal(southbound={"switches": {"core-0": {"dpid": 0}}}), "southbound.switches.core-0.dpid: must be within [1, "),
        (minimal(southbound={"switches": {"core-0": {"backend": "p4runtime", "dpid": 5}}}),
         "southbound.switches.core-0.dpid: only an openflow switch has a datapath id"),
        (minimal(southbound={"switches": {"core-1": {"dpid": 1}}}),
         "southbound.switches.core-1.dpid: datapath id 1 is also that of switch core-0"),
        (minimal(planner={"incremental": "yes"}), "planner.incremental: expected a boolean, got a string"),
        (minimal(planner={"reoptimise_min_gain": -0.1}), "planner.reoptimise_min_gain: must be >= 0"),
        (minimal(planner={"reoptimise_after_s": -1}), "planner.reoptimise_after_s: must be >= 0"),
        (minimal(planner={"reoptimise_max_churn": -1}), "planner.reoptimise_max_churn: must be"),
        (minimal(planner={"reoptimise_max_churn": 1.5}), "planner.reoptimise_max_churn: expected an integer"),
        ({"discovery": {"link_capacity": 0}}, "discovery.link_capacity: must be > 0"),
        ({"discovery": {"group_capacity": -2}}, "discovery.group_capacity: must be >= 0"),
        ({"discovery": {"links": 1}}, "discovery.links: unknown key"),
        ({"discovery": {"host_timeout_s": 0}}, "discovery.host_timeout_s: must be > 0"),
        ({"discovery": {"probe_interval_s": "1"}}, "discovery.probe_interval_s: expected a number"),
        (minimal(discovery={}), "discovery: applies only without a topology section"),
        ({"southbound": {"backend": "p4runtime"}}, "southbound.switches: with backend p4runtime and no topology"),
        ({"southbound": {"switches": {"s1": {"backend": "openflow"}}}},
         "southbound.switches.s1: without a topology section an OpenFlow switch is named by its datapath id"),
        ({"southbound": {"switches": {"of:1": {"dpid": 1}}}}, "southbound.switches.of:1: names starting with of:"),
        ({"southbound": {"switches": {"s1": {"dpid": 1, "ports": [1]}}}},
         "southbound.switches.s1.ports: only a p4runtime switch lists its ports"),
        ({"southbound": {"backend": "p4runtime", "switches": {"s1": {"ports": []}}}},
         "southbound.switches.s1.ports: must list at least one port"),
        ({"southbound": {"backend": "p4runtime", "switches": {"s1": {"ports": [1, 2, 1]}}}},
         "southbound.switches.s1.ports: port 1 is listed twice"),
        ({"southbound": {"backend": "p4runtime", "switches": {"s1": {"ports": [512]}}}},
         "southbound.switches.s1.ports[0]: must be within [0, 511]"),
        ({"southbound": {"p4runtime": {"ports": "1-4"}}}, "southbound.p4runtime.ports: expected a list of port numbers"),
        ({"southbound": {"backend": "p4runtime", "switches": {"a": {"address": "h:1", "device_id": 1},
                                                              "b": {"address": "h:1", "device_id": 1}}}},
         "southbound.switches.b: same address h:1 and device id 1 as a"),
        ({"hosts": {"a": {"ip": "10.0.0.1"}, "b": {"ip": "10.0.0.1"}}}, "hosts.b.ip: 10.0.0.1 is also the address of host a"),
        ([], "top level: expected a mapping, got a list"),
    ],
)
def test_errors_name_the_key_path(data, where):
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert str(info.value).startswith(where), str(info.value)


def test_openflow_switches_take_their_configured_datapath_ids():
    from controller.config import switch_backends

    config = config_from_dict(minimal(southbound={"switches": {"core-0": {"dpid": 0xABC}, "agg-0-0": {"dpid": 0x77}}}))
    backends = switch_backends(config, build_topology(config))
    assert backends["core-0"].dpid == 0xABC and backends["agg-0-0"].dpid == 0x77
    assert backends["core-1"].dpid == 2  # the default: position + 1
    assert len({b.dpid for b in backends.values()}) == 20


def test_no_topology_means_the_network_is_learned():
    config = config_from_dict({})
    assert config.discovers and config.topology is None
    assert config.discovery.link_capacity == 10e9 and config.discovery.group_capacity is None
    assert (config.discovery.host_timeout_s, config.discovery.probe_interval_s) == (60.0, 1.0)
    config = config_from_dict({"discovery": {"link_capacity": 1e9, "group_capacity": 8, "entry_capacity": "unlimited"},
                               "hosts": {"ps": {"ip": "10.1.0.1"}}})
    assert (config.discovery.link_capacity, config.discovery.group_capacity) == (1e9, 8)
    assert config.hosts["ps"].ip == "10.1.0.1"
    assert not config_from_dict(minimal()).discovers
    with pytest.raises(ValueError, match="declares no topology"):
        build_topology(config)


def test_a_learned_network_names_the_switches_the_config_lists():
    from controller.config import configured_switches

    config = config_from_dict({"southbound": {
        "backend": "p4runtime",
        "p4runtime": {"base_port": 50100, "ports": [3, 1, 2]},
        "switches": {"leaf-a": {"address": "10.9.0.1:9559", "device_id": 7, "ports": [5, 4]},
                     "leaf-b": {},
                     "spine": {"backend": "openflow", "dpid": 0xAB}},
    }})
    assert config.discovers
    got = configured_switches(config)
    assert got["leaf-a"] == SwitchBackend("leaf-a", "p4runtime", "10.9.0.1:9559", 7, ports=(4, 5), program="v1model")
    # the defaults of a declared topology, by position in the list
    assert got["leaf-b"] == SwitchBackend("leaf-b", "p4runtime", "127.0.0.1:50101", 2, ports=(1, 2, 3), program="v1model")
    assert got["spine"] == SwitchBackend("spine", "openflow", dpid=0xAB)
    assert configured_switches(config_from_dict({})) == {}


def test_inventory_of_a_declared_topology():
    from controller.config import Inventory, switch_backends

    config = config_from_dict(minimal(southbound={"switches": {"core-0": {"backend": "p4runtime"},
                                                               "agg-0-0": {"dpid": 0x77}}}))
    topology = build_topology(config)
    inventory = Inventory.of(config, topology)
    assert inventory == Inventory.of(config)  # the topology built from the config when not given
    assert not inventory.learned
    assert dict(inventory.switches) == switch_backends(config, topology)
    assert list(inventory.switches) == [topology.name(v) for v in topology.switches]
    assert inventory.backend("core-0") == "p4runtime" and inventory.backend("core-1") == "openflow"
    with pytest.raises(KeyError):
        inventory.backend("no-such-switch")
    assert inventory.dpids[0x77] == "agg-0-0" and inventory.dpids[2] == "core-1"
    assert len(inventory.dpids) == 19 and "core-0" not in inventory.dpids.values()
    assert dict(inventory.p4runtime) == {"core-0": SwitchBackend("core-0", "p4runtime", "127.0.0.1:50051", 1,
                                                                 ports=tuple(range(1, 17)), program="v1model")}
    assert inventory.uses("openflow") and inventory.uses("p4runtime")
    with pytest.raises(ValueError, match="unknown backend 'ovs'"):
        inventory.uses("ovs")
    only_p4 = Inventory.of(config_from_dict(minimal(southbound={"backend": "p4runtime"})))
    assert only_p4.uses("p4runtime") and not only_p4.uses("openflow") and only_p4.dpids == {}
    assert len(only_p4.p4runtime) == 20
    with pytest.raises(TypeError):
        inventory.switches["core-1"] = inventory.switches["core-0"]  # read-only


def test_inventory_of_a_learned_network():
    from controller.config import Inventory

    config = config_from_dict({"southbound": {
        "backend": "p4runtime",
        "switches": {"leaf-a": {"address": "10.9.0.1:9559"}, "spine": {"backend": "openflow", "dpid": 0xAB}},
    }})
    inventory = Inventory.of(config, None)
    assert inventory.learned and list(inventory.switches) == ["leaf-a", "spine"]
    assert inventory.backend("leaf-a") == "p4runtime" and inventory.backend("spine") == "openflow"
    # a switch the config does not list is a datapath that connected: OpenFlow
    assert inventory.backend("of:00000000000000ff") == "openflow"
    assert dict(inventory.dpids) == {0xAB: "spine"} and list(inventory.p4runtime) == ["leaf-a"]
    assert inventory.uses("openflow") and inventory.uses("p4runtime")  # spine is OpenFlow
    p4_only = Inventory.of(config_from_dict({"southbound": {"backend": "p4runtime", "switches": {"leaf-a": {}}}}))
    assert p4_only.uses("p4runtime") and not p4_only.uses("openflow")  # no datapath may connect
    default = Inventory.of(config_from_dict({}))
    assert default.switches == {} and default.dpids == {} and default.p4runtime == {}
    assert default.uses("openflow") and not default.uses("p4runtime")  # any datapath may connect
    assert default.backend("of:0000000000000001") == "openflow"


def test_token_from_environment(monkeypatch):
    monkeypatch.setenv("MCAST_TEST_TOKEN", "t" * 20)
    config = config_from_dict(minimal(api={"host": "0.0.0.0", "token_env": "MCAST_TEST_TOKEN", "insecure_http": True}))
    assert config.api.token == "t" * 20 and not config.api.is_loopback
    monkeypatch.delenv("MCAST_TEST_TOKEN")
    with pytest.raises(ConfigError, match=r"^api\.token_env: environment variable MCAST_TEST_TOKEN is not set"):
        config_from_dict(minimal(api={"host": "0.0.0.0", "token_env": "MCAST_TEST_TOKEN"}))


def test_loopback_hosts():
    assert is_loopback_host("127.0.0.1") and is_loopback_host("localhost") and is_loopback_host("::1")
    assert not is_loopback_host("0.0.0.0") and not is_loopback_host("10.0.0.1") and not is_loopback_host("example.org")


def test_files_yaml_json_and_their_errors(tmp_path):
    good = tmp_path / "c.json"
    good.write_text(json.dumps(minimal(store={"path": "db/jobs.sqlite"})))
    assert load_config(good).store.path == tmp_path / "db" / "jobs.sqlite"

    dup = tmp_path / "dup.yaml"
    dup.write_text("topology:\n  fattree: {k: 4}\napi: {port: 1}\napi: {port: 2}\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml: line 4: duplicate key 'api'"):
        load_config(dup)
    dup_json = tmp_path / "dup.json"
    dup_json.write_text('{"topology": {"fattree": {"k": 4}}, "api": {}, "api": {}}')
    with pytest.raises(ConfigError, match=r"duplicate key 'api'"):
        load_config(dup_json)
    bad = tmp_path / "bad.yaml"
    bad.write_text("topology: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not YAML"):
        load_config(bad)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("topology:\n  fattree: {k: 4}\n  links:\n    - {a: core-0, b: agg-0-0, capacity: 10e9}\n")
    with pytest.raises(ConfigError, match=r"wrong\.yaml: topology\.links\[0\]\.capacity: expected a number, got a string '10e9'"):
        load_config(wrong)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_instance_source(tmp_path):
    inst = {
        "topology": {
            "nodes": [{"id": "s", "kind": "switch", "group_capacity": 3}, {"id": "a", "kind": "host"}, {"id": "b", "kind": "host"}],
            "links": [{"a": "s", "b": "a", "capacity": 1e9}, {"a": "s", "b": "b", "capacity": 1e9}],
        }
    }
    (tmp_path / "topo.json").write_text(json.dumps(inst))
    config = config_from_dict({"topology": {"instance": "topo.json", "entry_capacity": 7}}, tmp_path)
    node = build_topology(config).nodes[0]
    assert (node.group_capacity, node.entry_capacity) == (3, 7)  # the file's G kept, default F applied

    inst["jobs"] = [{"id": "j", "ps": "a", "workers": ["b"], "demand": 1}]
    (tmp_path / "with-jobs.json").write_text(json.dumps(inst))
    with pytest.raises(ConfigError, match=r"^topology\.instance \(.*with-jobs\.json\): holds 1 jobs"):
        config_from_dict({"topology": {"instance": "with-jobs.json"}}, tmp_path)
    inst["jobs"] = []
    inst["topology"]["links"][0]["capacity"] = -1
    (tmp_path / "bad.json").write_text(json.dumps(inst))
    with pytest.raises(ConfigError, match=r"^topology\.instance \(.*bad\.json\): topology\.links\[0\]\.capacity"):
        config_from_dict({"topology": {"instance": "bad.json"}}, tmp_path)


def test_store_backend_etcd_keys():
    c = config_from_dict(minimal(store={"backend": "etcd", "etcd": {
        "endpoints": ["http://10.0.0.5:2379/", "https://etcd-b:2379"], "prefix": "/prod/mcast/",
        "lease_ttl_s": 3, "timeout_s": 1.5, "advertise_url": "http://10.0.0.7:8080"}}))
    assert c.store.backend == "etcd"
    assert c.store.etcd.endpoints == ("http://10.0.0.5:2379", "https://etcd-b:2379")
    assert (c.store.etcd.prefix, c.store.etcd.lease_ttl_s, c.store.etcd.timeout_s) == ("/prod/mcast/", 3, 1.5)
    assert c.store.etcd.advertise_url == "http://10.0.0.7:8080"
    d = config_from_dict(minimal(store={"backend": "etcd"}))
    assert d.store.etcd.endpoints == ("http://127.0.0.1:2379",) and d.store.etcd.lease_ttl_s == 2
    assert config_from_dict(minimal()).store.backend == "sqlite"  # the default stays SQLite


@pytest.mark.parametrize("store, where, message", [
    ({"backend": "redis"}, "store.backend", "expected 'sqlite' or 'etcd'"),
    ({"backend": "etcd", "path": "x.sqlite"}, "store.path", "applies only to store.backend sqlite"),
    ({"etcd": {}}, "store.etcd", "applies only with store.backend: etcd"),
    ({"backend": "etcd", "etcd": {"endpoints": []}}, "store.etcd.endpoints", "non-empty list"),
    ({"backend": "etcd", "etcd": {"endpoints": ["127.0.0.1:2379"]}}, r"store.etcd.endpoints\[0\]", "http:// or https:// URL"),
    ({"backend": "etcd", "etcd": {"prefix": "/x"}}, "store.etcd.prefix", "must end with '/'"),
    ({"backend": "etcd", "etcd": {"lease_ttl_s": 1}}, "store.etcd.lease_ttl_s", "must be >= 2|within"),
    ({"backend": "etcd", "etcd": {"lease_ttl_s": 2, "timeout_s": 2}}, "store.etcd.timeout_s", "below lease_ttl_s"),
    ({"backend": "etcd", "etcd": {"leader": 1}}, "store.etcd.leader", "unknown key"),
])
def test_store_etcd_errors(store, where, message):
    with pytest.raises(ConfigError, match=f"{where}: .*({message})"):
        config_from_dict(minimal(store=store))
