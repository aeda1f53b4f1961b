"""The budgets a switch reports about itself (`ControllerService.report_limits`):
the effective G(v), F(v) is the smallest of the configured budget, the reported
limit and the budget learned from table-full errors; GET /switches says which."""

from __future__ import annotations

import pytest

from controller.config import build_topology, config_from_dict
from controller.service import ControllerService
from controller.store import JobStore


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_service(topology_extra=None):
    topo = {"fattree": {"k": 4}}
    topo.update(topology_extra or {})
    config = config_from_dict({"topology": topo, "planner": {"debounce_s": 0.2, "max_delay_s": 1.0}})
    clock = FakeClock()
    service = ControllerService(config, build_topology(config), clock, store=JobStore(":memory:"))
    return service, clock


def status(service, switch):
    return {s.id: s for s in service.switches()}[switch]


def planned_groups(service, switch):
    v = service.topology.index[switch]
    return sum(1 for jp in service.plan().jobs if v in jp.structure.groups)


def add_jobs(service):
    for i, ps in enumerate(("host-0", "host-1", "host-2", "host-3")):
        service.add_job(ps, ["host-4", "host-8", "host-12", "host-13"], 1e9, job_id=f"j{i}", wait=False)


def test_without_config_the_switch_limit_is_the_budget_and_the_planner_keeps_within_it():
    service, clock = make_service()
    add_jobs(service)
    service.replan()
    busiest = max(service.topology.switches, key=lambda v: planned_groups(service, service.topology.name(v)))
    name = service.topology.name(busiest)
    used = planned_groups(service, name)
    assert used >= 2
    st = status(service, name)
    assert (st.group_capacity, st.group_capacity_source) == (None, None)
    assert service.report_limits(name, max_groups=1, max_entries=1000)
    st = status(service, name)
    assert (st.group_capacity, st.group_capacity_source, st.reported_group_capacity) == (1, "switch", 1)
    assert (st.entry_capacity, st.entry_capacity_source, st.configured_entry_capacity) == (1000, "switch", None)
    # one ordinary, debounced change
    assert not service.replan_due()
    clock.now += 0.2
    assert service.poll() is not None
    assert planned_groups(service, name) <= 1
    # the same report again changes nothing
    assert not service.report_limits(name, max_groups=1, max_entries=1000)
    assert not service.replan_due()


def test_a_configured_budget_below_the_switch_limit_wins_and_above_it_does_not():
    service, _ = make_service({"group_capacity": 5, "switches": {"edge-0-0": {"group_capacity": 2}}})
    service.report_limits("edge-0-0", max_groups=4096)
    service.report_limits("edge-0-1", max_groups=3)
    a, b = status(service, "edge-0-0"), status(service, "edge-0-1")
    assert (a.group_capacity, a.group_capacity_source, a.configured_group_capacity, a.reported_group_capacity) == (
        2, "config", 2, 4096,
    )
    assert (b.group_capacity, b.group_capacity_source, b.configured_group_capacity) == (3, "switch", 5)
    topo, _ = service._planning_topology(frozenset(), ({}, {}), service.reported_limits())
    assert topo.nodes[topo.index["edge-0-0"]].group_capacity == 2
    assert topo.nodes[topo.index["edge-0-1"]].group_capacity == 3


def test_table_full_learning_stays_below_the_reported_limit():
    service, _ = make_service()
    add_jobs(service)
    service.replan()
    name = max((service.topology.name(v) for v in service.topology.switches), key=lambda s: planned_groups(service, s))
    used = planned_groups(service, name)
    service.report_limits(name, max_groups=used)
    learned = service.table_full(name, "group", None)
    assert learned == used - 1
    st = status(service, name)
    assert (st.group_capacity, st.group_capacity_source, st.learned_group_capacity) == (used - 1, "table_full", used - 1)
    # a later, lower report wins over the learned budget
    service.report_limits(name, max_groups=0)
    st = status(service, name)
    assert (st.group_capacity, st.group_capacity_source) == (0, "switch")


def test_p4info_source_and_unknown_switch():
    service, _ = make_service()
    service.report_limits("core-0", max_groups=32767, max_entries=1024, source="p4info")
    st = status(service, "core-0")
    assert (st.group_capacity_source, st.entry_capacity_source) == ("p4info", "p4info")
    with pytest.raises(ValueError):
        service.report_limits("host-0", max_groups=1)
