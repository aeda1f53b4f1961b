"""The `southbound` section of the controller config: per-switch backend selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.config import (
    ConfigError,
    P4RuntimeSettings,
    build_topology,
    config_from_dict,
    switch_backends,
)
from controller.southbound.p4runtime.pipeline import p4_switches


def leaf_spine(**southbound) -> dict:
    data = {"topology": {"leaf_spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": 2}}}
    if southbound:
        data["southbound"] = southbound
    return data


def backends(data, base="."):
    config = config_from_dict(data, base)
    return switch_backends(config, build_topology(config))


def test_default_is_openflow_everywhere():
    got = backends(leaf_spine())
    assert {b.backend for b in got.values()} == {"openflow"} and len(got) == 4
    assert all(b.address is None and b.device_id is None for b in got.values())


def test_p4runtime_switches_get_addresses_and_device_ids_by_position(tmp_path):
    got = backends(
        leaf_spine(
            backend="p4runtime",
            p4runtime={"host": "10.1.0.1", "base_port": 9559, "p4info": "x/p4info.txt", "election_id": 7},
            switches={"leaf-0": {"address": "10.2.0.1:50051", "device_id": 0}, "spine-1": {"backend": "openflow"}},
        ),
        tmp_path,
    )
    # topology order: spine-0, spine-1, leaf-0, leaf-1
    assert got["spine-0"].address == "10.1.0.1:9559" and got["spine-0"].device_id == 1
    assert got["spine-1"].backend == "openflow" and got["spine-1"].address is None
    assert (got["leaf-0"].address, got["leaf-0"].device_id) == ("10.2.0.1:50051", 0)
    assert (got["leaf-1"].address, got["leaf-1"].device_id) == ("10.1.0.1:9562", 4)
    config = config_from_dict(leaf_spine(backend="p4runtime", p4runtime={"p4info": "x/p4info.txt"}), tmp_path)
    assert config.southbound.p4runtime.p4info == tmp_path / "x" / "p4info.txt"
    assert config.southbound.p4runtime.device_config == P4RuntimeSettings().device_config
    assert P4RuntimeSettings().p4info.name == "mcast.p4info.txt" and P4RuntimeSettings().p4info.exists()
    specs = p4_switches(config, build_topology(config))
    assert sorted(specs) == ["leaf-0", "leaf-1", "spine-0", "spine-1"]


def test_one_p4_switch_in_an_openflow_fabric():
    got = backends(leaf_spine(switches={"leaf-1": {"backend": "p4runtime"}}))
    assert [n for n, b in got.items() if b.backend == "p4runtime"] == ["leaf-1"]
    assert got["leaf-1"].address == "127.0.0.1:50054" and got["leaf-1"].device_id == 4


def test_p4_switch_limits_are_reported_to_the_service_with_their_source():
    from controller.core.service import ControllerService
    from controller.southbound.p4runtime.pipeline import TARGET_MAX_GROUPS, report_p4_limits
    from controller.store.sqlite import JobStore

    data = leaf_spine(switches={"leaf-1": {"backend": "p4runtime"}, "leaf-0": {"backend": "p4runtime"}})
    data["topology"]["entry_capacity"] = 100000
    data["topology"]["switches"] = {"leaf-0": {"entry_capacity": 7, "group_capacity": 40000}}
    config = config_from_dict(data)
    service = ControllerService(config, build_topology(config), store=JobStore(":memory:"))
    report_p4_limits(service, config)
    st = {s.id: s for s in service.devices.statuses()}
    one, zero = st["leaf-1"], st["leaf-0"]
    assert (one.entry_capacity, one.entry_capacity_source, one.configured_entry_capacity) == (4096, "p4info", 100000)
    assert (one.group_capacity, one.group_capacity_source) == (TARGET_MAX_GROUPS, "p4info") == (32767, "p4info")
    assert (zero.entry_capacity, zero.entry_capacity_source) == (7, "config")
    assert (zero.group_capacity, zero.group_capacity_source, zero.configured_group_capacity) == (32767, "p4info", 40000)
    assert st["spine-0"].group_capacity_source is None and st["spine-0"].reported_group_capacity is None
    service.close()


def test_each_p4_switch_runs_its_program_and_its_limits_come_from_that_program_s_p4info():
    from controller.core.service import ControllerService
    from controller.southbound.p4runtime.start import load_backend
    from controller.southbound.p4runtime.pipeline import p4_switches, report_p4_limits
    from controller.config.programs import PROGRAMS
    from controller.store.sqlite import JobStore

    # every P4 switch runs Tofino 1 (its committed P4Info, no device config) but leaf-1, on Tofino 2
    data = leaf_spine(backend="p4runtime", p4runtime={"program": "tofino"}, switches={"leaf-1": {"program": "tofino2"}})
    config = config_from_dict(data)
    s = config.southbound.p4runtime
    assert (s.program, s.p4info, s.device_config) == ("tofino", PROGRAMS["tofino"].p4info, None)
    topo = build_topology(config)
    specs = p4_switches(config, topo)
    assert {n: sp.program for n, sp in specs.items()} == {
        "leaf-0": "tofino", "leaf-1": "tofino2", "spine-0": "tofino", "spine-1": "tofino"}
    service = ControllerService(config, topo, store=JobStore(":memory:"))
    report_p4_limits(service, config)
    st = {x.id: x for x in service.devices.statuses()}
    assert (st["leaf-0"].entry_capacity, st["leaf-0"].group_capacity) == (139264, 65535)  # tna/sizes.p4; 64K MGIDs
    assert (st["leaf-1"].entry_capacity, st["leaf-1"].group_capacity) == (277504, 65535)
    assert st["leaf-0"].entry_capacity_source == "p4info"
    service.close()
    backend = load_backend(specs, s.p4info, s.device_config, program=s.program)
    assert backend.pipeline_of("leaf-0").cpu_port == 192 and backend.pipeline_of("leaf-1").cpu_port == 0
    assert backend.pipeline_of("leaf-0").device_config == b"" and backend.pipeline_of("leaf-1").limits.multicast_entries == 277504
    # the default program is BMv2's, with its JSON
    v1 = config_from_dict(leaf_spine(backend="p4runtime")).southbound.p4runtime
    assert (v1.program, v1.p4info.name, v1.device_config.name) == ("v1model", "mcast.p4info.txt", "mcast.json")


@pytest.mark.parametrize(
    "southbound, where",
    [
        ({"backend": "tofino"}, "southbound.backend: unknown backend 'tofino'; choose from openflow, p4runtime"),
        ({"colour": 1}, "southbound.colour: unknown key"),
        ({"p4runtime": {"base_port": 70000}}, "southbound.p4runtime.base_port: must be within [1, 65535]"),
        ({"p4runtime": {"election_id": 0}}, "southbound.p4runtime.election_id: must be within"),
        ({"p4runtime": {"lldp_interval_s": 5, "lldp_timeout_s": 5}}, "southbound.p4runtime.lldp_timeout_s: must be > the LLDP interval"),
        ({"p4runtime": {"lldp_timeout_s": "10"}}, "southbound.p4runtime.lldp_timeout_s: expected a number, got a string"),
        ({"switches": {"leaf-9": {"backend": "p4runtime"}}}, "southbound.switches.leaf-9: not a switch of the topology"),
        ({"switches": {"host-0": {"backend": "p4runtime"}}}, "southbound.switches.host-0: not a switch of the topology"),
        ({"switches": {"leaf-0": {"address": "10.0.0.1:5"}}}, "southbound.switches.leaf-0.address: only a p4runtime switch"),
        (
            {"backend": "p4runtime", "switches": {"leaf-0": {"address": "10.0.0.1"}}},
            "southbound.switches.leaf-0.address: expected HOST:PORT with a port in 1..65535, got '10.0.0.1'",
        ),
        (
            {"backend": "p4runtime", "switches": {"leaf-0": {"device_id": -1}}},
            "southbound.switches.leaf-0.device_id: must be within",
        ),
        (
            {"backend": "p4runtime", "switches": {"leaf-0": {"address": "h:1", "device_id": 1}, "leaf-1": {"address": "h:1", "device_id": 1}}},
            "southbound.switches.leaf-1: same address h:1 and device id 1 as leaf-0",
        ),
        ({"backend": "p4runtime", "p4runtime": {"base_port": 65534}}, "southbound.p4runtime.base_port: switch leaf-0 would listen on port 65536"),
        ({"switches": ["leaf-0"]}, "southbound.switches: expected a mapping of switch names, got a list"),
        ({"openflow": {"packet_in_pps": -1}}, "southbound.openflow.packet_in_pps: must be within"),
        ({"openflow": {"packet_in_pps": 1.5}}, "southbound.openflow.packet_in_pps: expected an integer"),
        ({"p4runtime": {"packet_in_pps": -1}}, "southbound.p4runtime.packet_in_pps: must be within [0, 1000000], got -1"),
        ({"p4runtime": {"packet_in_pps": 2_000_000}}, "southbound.p4runtime.packet_in_pps: must be within [0, 1000000]"),
        ({"p4runtime": {"packet_in_pps": "1k"}}, "southbound.p4runtime.packet_in_pps: expected an integer, got a string"),
        ({"p4runtime": {"packet_in": 5}}, "southbound.p4runtime.packet_in: unknown key"),
        ({"p4runtime": {"arbitration_retry_s": 0}}, "southbound.p4runtime.arbitration_retry_s: must be > 0"),
        ({"p4runtime": {"arbitration_retry_s": "30s"}}, "southbound.p4runtime.arbitration_retry_s: expected a number, got a string"),
        ({"openflow": {"packet_in": 5}}, "southbound.openflow.packet_in: unknown key (allowed: packet_in_pps, group_ids, meter_ids, table_features, port_stats_s, tls, fast_failover)"),
        ({"openflow": {"group_ids": 5}}, "southbound.openflow.group_ids: expected [first, last], got a number"),
        ({"openflow": {"group_ids": [1, 2, 3]}}, "southbound.openflow.group_ids: expected [first, last], got a list of 3"),
        ({"openflow": {"group_ids": [0, 9]}}, "southbound.openflow.group_ids[0]: must be within"),
        ({"openflow": {"meter_ids": [9, 5]}}, "southbound.openflow.meter_ids: last (5) is below first (9)"),
        ({"openflow": {"meter_ids": [1, 4294967295]}}, "southbound.openflow.meter_ids[1]: must be within"),
        ({"p4runtime": {"program": "tofino3"}}, "southbound.p4runtime.program: unknown P4 program 'tofino3'; choose from v1model, tofino, tofino2"),
        ({"p4runtime": {"program": 1}}, "southbound.p4runtime.program: expected a string, got a number"),
        (
            {"backend": "p4runtime", "switches": {"leaf-0": {"program": "bmv2"}}},
            "southbound.switches.leaf-0.program: unknown P4 program 'bmv2'; choose from v1model, tofino, tofino2",
        ),
        ({"switches": {"leaf-0": {"program": "tofino"}}}, "southbound.switches.leaf-0.program: only a p4runtime switch runs a P4 program"),
    ],
)
def test_mistakes_name_their_key(southbound, where):
    with pytest.raises(ConfigError) as e:
        config_from_dict(leaf_spine(**southbound))
    assert str(e.value).startswith(where), str(e.value)


def test_openflow_id_ranges_default_to_everything():
    from controller.southbound.openflow.entries import OFPG_MAX, OFPM_MAX

    of = config_from_dict(leaf_spine()).southbound.openflow
    assert (of.group_ids, of.meter_ids) == ((1, OFPG_MAX), (1, OFPM_MAX))
    of = config_from_dict(leaf_spine(openflow={"group_ids": [100, 199], "meter_ids": [7, 7]})).southbound.openflow
    assert (of.group_ids, of.meter_ids) == ((100, 199), (7, 7))


def test_openflow_packet_in_cap_defaults_to_1000_and_0_turns_it_off():
    assert config_from_dict(leaf_spine()).southbound.openflow.packet_in_pps == 1000
    assert config_from_dict(leaf_spine(openflow={"packet_in_pps": 0})).southbound.openflow.packet_in_pps == 0
    assert config_from_dict(leaf_spine(openflow={"packet_in_pps": 250})).southbound.openflow.packet_in_pps == 250


def test_p4runtime_packet_in_cap_defaults_to_1000_and_0_turns_it_off():
    assert config_from_dict(leaf_spine()).southbound.p4runtime.packet_in_pps == 1000
    assert config_from_dict(leaf_spine(p4runtime={"packet_in_pps": 0})).southbound.p4runtime.packet_in_pps == 0
    p4 = config_from_dict(leaf_spine(p4runtime={"packet_in_pps": 250}, openflow={"packet_in_pps": 7})).southbound
    assert (p4.p4runtime.packet_in_pps, p4.openflow.packet_in_pps) == (250, 7)


def test_p4runtime_arbitration_back_off_defaults_to_30_s_and_reaches_the_backend(monkeypatch):
    from types import SimpleNamespace

    from controller.config import Inventory, build_topology
    from controller.southbound.p4runtime import start as p4runtime_client

    assert config_from_dict(leaf_spine()).southbound.p4runtime.arbitration_retry_s == 30.0
    config = config_from_dict(leaf_spine(backend="p4runtime", p4runtime={"arbitration_retry_s": 4}))
    assert config.southbound.p4runtime.arbitration_retry_s == 4.0
    seen = {}

    class Started:
        def attach(self, service):
            seen["attached"] = service

    def load_backend(specs, p4info, device_config, **kwargs):
        seen.update(kwargs)
        return Started()

    monkeypatch.setattr(p4runtime_client, "load_backend", load_backend)
    service = SimpleNamespace(inventory=Inventory.of(config, build_topology(config)))
    p4runtime_client.start_backend(service, config)
    assert seen["arbitration_retry_s"] == 4.0 and seen["attached"] is service


def test_the_example_in_docs_p4_loads(tmp_path):
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "p4.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.DOTALL).group(1)
    from controller.config import parse_config_text

    config = config_from_dict(parse_config_text(block, "yaml"), tmp_path)
    got = switch_backends(config, build_topology(config))
    assert {b.backend for b in got.values()} == {"p4runtime"} and len(got) == 20
    assert got["core-0"].address == "127.0.0.1:50051" and got["core-0"].device_id == 1


def test_a_switch_whose_program_the_backend_was_not_given_is_refused_at_start():
    from controller.southbound.p4runtime.backend import P4RuntimeBackend
    from controller.southbound.p4runtime.connection import P4RuntimeError
    from controller.southbound.p4runtime.pipeline import P4SwitchSpec, make_pipeline
    from controller.southbound.p4runtime.p4info import P4Info
    from controller.config.programs import PROGRAMS, program

    v1 = P4Info.load(PROGRAMS["v1model"].p4info)
    with pytest.raises(P4RuntimeError, match="runs program 'tofino', which the backend was not given"):
        P4RuntimeBackend([P4SwitchSpec("leaf-0", "127.0.0.1:1", 1, "tofino")], v1, b"{}")
    tofino = make_pipeline(P4Info.load(PROGRAMS["tofino"].p4info), b"", "tofino")
    backend = P4RuntimeBackend([P4SwitchSpec("leaf-0", "127.0.0.1:1", 1, "tofino"), P4SwitchSpec("leaf-1", "127.0.0.1:2", 2)],
                               v1, b"{}", pipelines={"tofino": tofino})
    assert backend.pipeline_of("leaf-0") is tofino and backend.pipeline_of("leaf-1").cpu_port == 255
    with pytest.raises(ValueError, match="unknown P4 program 'tofino3'"):
        program("tofino3")
