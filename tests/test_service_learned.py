"""The service on a learned network (no topology in the config): facts in, plans out, with a fake clock."""

from __future__ import annotations

import pytest

from controller.config import config_from_dict
from controller.core.service import ControllerService
from controller.core.errors import InvalidJob
from controller.core.devices import SwitchLimits
from controller.southbound.openflow.manager import OpenFlowManager
from controller.store.sqlite import JobStore


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(path=":memory:", clock=None, **discovery):
    config = config_from_dict({
        "planner": {"debounce_s": 0.0, "max_delay_s": 0.0, "wait_s": 0.01, "link_hold_down_s": 0},
        "discovery": {"host_timeout_s": 30, **discovery},
        "hosts": {"ps": {"ip": "10.1.0.1"}},
    })
    clock = clock or FakeClock()
    service = ControllerService(config, None, clock, store=JobStore(path))
    service.openflow = OpenFlowManager(service).attach()  # what the OpenFlow backend makes of each plan
    return service, clock


def build_line(service):
    """s-a (port 1) -- (port 2) s-b; hosts: 10.1.0.1 (named ps) at s-a:5, 10.1.0.2 at s-b:6."""
    for s in ("of:000000000000000a", "of:000000000000000b"):
        service.devices.connected(s)
    service.wiring.learn_link("of:000000000000000a", 1, "of:000000000000000b", 2)
    assert service.hosts.learn("10.1.0.1", "02:00:00:00:01:01", "of:000000000000000a", 5) == "ps"
    assert service.hosts.learn("10.1.0.2", "02:00:00:00:01:02", "of:000000000000000b", 6) == "10.1.0.2"


def test_an_empty_network_grows_from_facts_and_is_planned():
    service, _ = make()
    assert service.config.discovers and not service.wiring.topology.nodes
    assert service.planning.replan() is not None  # an empty plan: nothing to program yet
    build_line(service)
    topo = service.wiring.topology
    assert {topo.name(v) for v in topo.switches} == {"of:000000000000000a", "of:000000000000000b"}
    assert {topo.name(h) for h in topo.hosts} == {"ps", "10.1.0.2"}
    ports = service.wiring.port_map()
    assert ports[(topo.index["of:000000000000000a"], topo.index["of:000000000000000b"])] == 1
    assert ports[(topo.index["of:000000000000000b"], topo.index["10.1.0.2"])] == 6
    assert service.hosts.mac("10.1.0.2") == "02:00:00:00:01:02"
    status = service.add_job("10.1.0.1", ["10.1.0.2"], 1e9, job_id="j", wait=False)
    assert status.job.ps == "ps" and status.missing_hosts == ()
    update = service.planning.replan()
    assert update is not None and service.jobs.status("j").planned is not None
    assert set(service.openflow.last.desired) == {"of:000000000000000a", "of:000000000000000b"}


def test_a_job_naming_unseen_hosts_waits_then_is_planned():
    service, _ = make()
    build_line(service)
    status = service.add_job("ps", ["10.1.0.2", "10.1.0.3"], 1e9, job_id="j", wait=False)
    assert status.missing_hosts == ("10.1.0.3",) and status.planned is None
    assert service.jobs.probe_targets() == ["10.1.0.3"]
    service.planning.replan()
    assert service.jobs.status("j").planned is None  # still waiting
    service.devices.connected("of:000000000000000c")
    service.wiring.learn_link("of:000000000000000c", 3, "of:000000000000000a", 4)
    service.hosts.learn("10.1.0.3", "02:00:00:00:01:03", "of:000000000000000c", 1)
    assert service.jobs.probe_targets() == []
    service.planning.replan()
    assert service.jobs.status("j").planned is not None and service.jobs.status("j").error is None


def test_a_host_that_never_answers_fails_its_job_after_the_timeout_and_nothing_else():
    service, clock = make()
    build_line(service)
    service.add_job("ps", ["10.1.0.2"], 1e9, job_id="ok", wait=False)
    service.add_job("ps", ["10.1.0.2", "10.9.9.9"], 1e9, job_id="ghost", wait=False)
    service.planning.replan()
    clock.t += 29
    assert service.jobs.status("ghost").error is None and service.jobs.probe_targets() == ["10.9.9.9"]
    clock.t += 2
    err = service.jobs.status("ghost").error
    assert err is not None and "10.9.9.9" in err and "30 s" in err
    assert service.jobs.probe_targets() == []  # not asked for any more
    service.planning.replan()
    assert service.jobs.status("ok").planned is not None and service.jobs.status("ghost").planned is None
    # failed stays failed, even if the host turns up later; deleting it is the way out
    service.devices.connected("of:000000000000000c")
    service.wiring.learn_link("of:000000000000000c", 3, "of:000000000000000a", 4)
    service.hosts.learn("10.9.9.9", "02:00:00:00:09:09", "of:000000000000000c", 1)
    service.planning.replan()
    assert service.jobs.status("ghost").error is not None and service.jobs.status("ghost").planned is None
    service.delete_job("ghost", wait=False)
    service.add_job("ps", ["10.9.9.9"], 1e9, job_id="ghost", wait=False)
    service.planning.replan()
    assert service.jobs.status("ghost").planned is not None


def test_job_hosts_are_addresses_or_configured_names():
    service, _ = make()
    with pytest.raises(InvalidJob, match="not a host address"):
        service.jobs.validate_job("239.1.0.1", ["10.1.0.2"], 1e9)
    with pytest.raises(InvalidJob, match="unknown host"):
        service.jobs.validate_job("nobody", ["10.1.0.2"], 1e9)
    job = service.jobs.validate_job("10.1.0.1", ["10.1.0.2"], 1e9)
    assert job.ps == "ps"  # the configured name of that address


def test_edge_ports_leave_out_link_ends_and_a_new_piece_waits_for_its_link():
    service, _ = make()
    build_line(service)
    service.devices.report_limits("of:000000000000000a", port_speeds={1: 0, 5: 10_000_000_000, 7: 0})
    assert service.hosts.edge_ports("of:000000000000000a") == [5, 7]
    # a switch with a host but no link yet is not planned on; its host is "missing"
    service.devices.connected("of:000000000000000d")
    service.devices.report_limits("of:000000000000000d", port_speeds={1: 0, 2: 0})  # not planned on yet, but known
    assert service.hosts.edge_ports("of:000000000000000d") == [1, 2]
    service.hosts.learn("10.1.0.4", "02:00:00:00:01:04", "of:000000000000000d", 1)
    assert "of:000000000000000d" not in service.wiring.topology.index
    assert service.add_job("ps", ["10.1.0.4"], 1e9, job_id="j", wait=False).missing_hosts == ("10.1.0.4",)
    service.wiring.learn_link("of:000000000000000d", 2, "of:000000000000000b", 9)
    assert service.jobs.status("j").missing_hosts == ()


def test_the_learned_network_survives_a_restart(tmp_path):
    path = tmp_path / "jobs.sqlite"
    service, _ = make(path)
    build_line(service)
    service.add_job("ps", ["10.1.0.2"], 1e9, job_id="j", wait=False)
    service.planning.replan()
    first = service.openflow.last
    service.close()
    again, _ = make(path)
    assert {again.wiring.topology.name(v) for v in again.wiring.topology.switches} == {"of:000000000000000a", "of:000000000000000b"}
    again.planning.replan()
    second = again.openflow.last
    assert second.desired == first.desired  # a restarted controller installs what the switches hold
    again.close()


def test_port_speeds_set_learned_link_capacities():
    service, _ = make(link_capacity=1e9)
    build_line(service)
    caps = service.links.capacities()
    assert caps[("of:000000000000000a", "of:000000000000000b")] == (1e9, "config")
    service.devices.report_limits("of:000000000000000a", port_speeds={1: 25_000_000_000})
    service.devices.report_limits("of:000000000000000b", port_speeds={2: 40_000_000_000})
    assert service.links.capacities()[("of:000000000000000a", "of:000000000000000b")] == (25e9, "port")
    assert isinstance(service.devices.limits()["of:000000000000000a"], SwitchLimits)


def test_get_links_says_where_the_network_comes_from():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # starlette's TestClient warns about httpx
        from fastapi.testclient import TestClient

    from controller.northbound.api import create_app

    service, _ = make()
    build_line(service)
    service.devices.connected("of:000000000000000d")
    service.wiring.learn_link("of:000000000000000a", 7, "of:000000000000000b", 8)  # a second a-b link
    client = TestClient(create_app(service, service.config), base_url="http://127.0.0.1")
    topo = client.get("/topology").json()
    assert {n["id"] for n in topo["nodes"]} == {"of:000000000000000a", "of:000000000000000b", "ps", "10.1.0.2"}
    assert "sources" not in topo  # the instance format, unless asked
    service.devices.report_limits("of:000000000000000a", max_groups=3, port_speeds={1: 25_000_000_000})
    service.devices.report_limits("of:000000000000000b", port_speeds={2: 40_000_000_000})
    sources = client.get("/topology", params={"sources": "true"}).json()["sources"]
    assert sources["network"] == "learned"
    nodes = {n["id"]: n for n in sources["nodes"]}
    assert nodes["of:000000000000000a"] == {"id": "of:000000000000000a", "source": "openflow",
                                            "group_capacity_source": "switch", "entry_capacity_source": None}
    assert nodes["10.1.0.2"]["source"] == "arp_ipv4"
    links = {(ln["a"], ln["b"]): ln for ln in sources["links"]}
    ab = links[("of:000000000000000a", "of:000000000000000b")]
    assert (ab["source"], ab["a_port"], ab["a_port_source"], ab["b_port"], ab["capacity_source"]) == ("lldp", 1, "lldp", 2, "port")
    [host_link] = [ln for (a, b), ln in links.items() if "10.1.0.2" in (a, b)]
    assert host_link["source"] == "arp_ipv4" and 6 in (host_link["a_port"], host_link["b_port"])
    assert host_link["capacity_source"] == "config"
    assert client.get("/topology", params={"sources": "maybe"}).status_code == 422
    body = client.get("/links").json()
    assert body["source"] == "learned" and len(body["links"]) == 3
    assert body["waiting"] == ["of:000000000000000d"]
    assert body["parallel_links"] == [{"a": "of:000000000000000a", "a_port": 7, "b": "of:000000000000000b", "b_port": 8}]
    hosts = {h["id"]: h for h in client.get("/hosts").json()["hosts"]}
    assert (hosts["10.1.0.2"]["switch"], hosts["10.1.0.2"]["port"], hosts["10.1.0.2"]["learned"]) == (
        "of:000000000000000b", 6, True)
    job = client.post("/jobs", json={"id": "j", "ps": "10.1.0.1", "workers": ["10.1.0.7"], "demand": 1e9}).json()
    assert job["state"] == "pending" and job["missing_hosts"] == ["10.1.0.7"] and job["ps"] == "ps"


def test_get_topology_follows_the_network_through_its_cache():
    """GET /topology is serialised once per topology (k=48: 6 MB of JSON); a new
    host or switch makes a new topology, which the next answer shows."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from controller.northbound.api import create_app

    service, _ = make()
    build_line(service)
    client = TestClient(create_app(service, service.config), base_url="http://127.0.0.1")
    first = client.get("/topology")
    assert client.get("/topology").content == first.content  # the same topology: the same bytes
    assert service.hosts.learn("10.1.0.3", "02:00:00:00:01:03", "of:000000000000000b", 7) == "10.1.0.3"
    assert "10.1.0.3" in {n["id"] for n in client.get("/topology").json()["nodes"]}
    service.devices.connected("of:000000000000000c")
    service.wiring.learn_link("of:000000000000000b", 3, "of:000000000000000c", 1)
    after = client.get("/topology").json()
    assert "of:000000000000000c" in {n["id"] for n in after["nodes"]}
    assert any({ln["a"], ln["b"]} == {"of:000000000000000b", "of:000000000000000c"} for ln in after["links"])
