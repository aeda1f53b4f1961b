"""The strict JSON readers and writers of controller.config.instance (docs/architecture.md, Formats)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from controller import planner
from controller.algorithm.network import Network
from controller.algorithm.rates import allocate, assemble_plan
from controller.algorithm.structures import make_structure
from controller.config.instance import (
    InputError,
    dump_json,
    instance_from_dict,
    instance_to_dict,
    plan_from_dict,
    plan_to_dict,
    read_instance,
    read_plans,
    write_instance,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fattree4.json"


def tiny() -> dict:
    """s1 - s2; h1, h2 on s1; h3 on s2. nodes[0..4] = s1 s2 h1 h2 h3, links[0..3]."""
    return {
        "topology": {
            "nodes": [
                {"id": "s1", "kind": "switch", "group_capacity": 2, "entry_capacity": 8},
                {"id": "s2", "kind": "switch"},
                {"id": "h1", "kind": "host"},
                {"id": "h2", "kind": "host"},
                {"id": "h3", "kind": "host"},
            ],
            "links": [
                {"a": "s1", "b": "s2", "capacity": 1e10},
                {"a": "s1", "b": "h1", "capacity": 1e10},
                {"a": "s1", "b": "h2", "capacity": 1e10},
                {"a": "s2", "b": "h3", "capacity": 1e10},
            ],
        },
        "jobs": [
            {"id": "j1", "ps": "h1", "workers": ["h2", "h3"], "demand": 1e9},
            {"id": "j2", "ps": "h3", "workers": ["h1"], "demand": 2e9, "weight": 2.0},
        ],
    }


# -- reading and round trips ----------------------------------------------------------


def test_read_example_instance():
    inst = read_instance(EXAMPLE)
    assert len(inst.topology.switches) == 20
    assert len(inst.topology.hosts) == 16
    assert [j.id for j in inst.jobs] == ["train-000", "train-001", "train-002"]
    job = inst.jobs[0]
    assert (job.ps, job.workers, job.demand) == ("host-10", ("host-6", "host-11", "host-0"), 1e9)
    core = inst.topology.nodes[inst.topology.index["core-0"]]
    assert (core.group_capacity, core.entry_capacity) == (2, 64)
    assert Network(inst.topology).kind == "fat-tree"


def test_example_round_trips_exactly():
    data = json.loads(EXAMPLE.read_text())
    assert instance_to_dict(read_instance(EXAMPLE)) == data


def test_instance_round_trip_through_a_file(tmp_path):
    data = tiny()
    inst = instance_from_dict(data)
    assert inst.jobs[1].weight == 2.0 and inst.jobs[0].weight == 1.0
    assert inst.topology.nodes[1].group_capacity is None
    path = tmp_path / "inst.json"
    write_instance(inst, path)
    assert json.loads(path.read_text()) == data  # absent capacities and weight 1 stay absent
    again = read_instance(path)
    assert again.jobs == inst.jobs
    assert again.topology.nodes == inst.topology.nodes
    assert again.topology.links == inst.topology.links


def test_integers_are_read_as_numbers():
    data = tiny()
    data["topology"]["links"][0]["capacity"] = 10_000_000_000
    data["jobs"][0]["demand"] = 1
    inst = instance_from_dict(data)
    assert inst.topology.links[0].capacity == 1e10
    assert inst.jobs[0].demand == 1.0


def multicast_plan(inst):
    """A hand-built plan: j1 as a multicast tree replicating at s1, j2 as unicast."""
    net = Network(inst.topology)
    i = inst.topology.index
    s1, s2, h1, h2, h3 = (i[n] for n in ("s1", "s2", "h1", "h2", "h3"))
    structures = [
        make_structure(net, [(h1, s1), (s1, h2), (s1, s2), (s2, h3)], []),
        make_structure(net, [], [(h3, h1)]),
    ]
    rates = allocate(net, inst.jobs, structures, "max-concurrent")
    return assemble_plan(net, inst.jobs, structures, rates, "hand", "max-concurrent", 0.5, 0.9, 2.5)


def test_plan_round_trip_keeps_structures():
    inst = instance_from_dict(tiny())
    plan = multicast_plan(inst)
    data = plan_to_dict(plan, inst.topology)
    j1 = data["jobs"][0]
    assert j1["mode"] == "multicast" and j1["groups"] == ["s1"] and j1["entries"] == ["s1", "s2"]
    assert {(e["from"], e["to"], e["copies"]) for e in j1["edges"]} == {
        ("h1", "s1", 1),
        ("s1", "h2", 1),
        ("s1", "s2", 1),
        ("s2", "h3", 1),
    }
    assert data["switches"][0] == {
        "id": "s1", "groups_used": 1, "group_capacity": 2, "entries_used": 1, "entry_capacity": 8
    }
    assert data["switches"][1] == {"id": "s2", "groups_used": 0, "entries_used": 1}
    back = plan_from_dict(json.loads(dump_json(data)), inst)
    assert plan_to_dict(back, inst.topology) == data
    for old, new in zip(plan.jobs, back.jobs):
        assert new.job is inst.jobs[inst.jobs.index(old.job)]
        assert new.rate == old.rate
        s, t = old.structure, new.structure
        assert (t.copies, t.groups, t.entries, t.mode) == (s.copies, s.groups, s.entries, s.mode)
        assert t.tree == () and t.branches == () and t.declared_mode == s.mode
    assert (back.lam, back.lp_bound, back.beta, back.kappa) == (plan.lam, 0.9, 2.5, plan.kappa)


def test_unicast_plan_round_trip_on_the_example(tmp_path):
    inst = read_instance(EXAMPLE)
    plan = planner.run(inst, "unicast")
    data = plan_to_dict(plan, inst.topology)
    assert list(data) == [
        "algorithm", "objective", "lambda", "throughput", "lp_bound", "kappa", "beta", "runtime_s", "jobs", "switches"
    ]
    assert data["lp_bound"] is None and data["beta"] is None
    path = tmp_path / "plans.json"
    path.write_text(dump_json({"plans": [data, data]}))
    plans = read_plans(path, inst)
    assert len(plans) == 2
    assert plan_to_dict(plans[1], inst.topology) == data
    assert [jp.structure.copies for jp in plans[0].jobs] == [jp.structure.copies for jp in plan.jobs]
    single = tmp_path / "plan.json"
    single.write_text(dump_json(data))
    assert plan_to_dict(read_plans(single, inst)[0], inst.topology) == data


# -- instance errors: one per rule, with the exact location -----------------------------


def _set(path, value):
    def mutate(d):
        *parents, last = path
        target = d
        for key in parents:
            target = target[key]
        target[last] = value

    return mutate


def _delete(path):
    def mutate(d):
        *parents, last = path
        target = d
        for key in parents:
            target = target[key]
        del target[last]

    return mutate


def _append(path, value):
    def mutate(d):
        target = d
        for key in path:
            target = target[key]
        target.append(value)

    return mutate


def _both(*mutations):
    def mutate(d):
        for m in mutations:
            m(d)

    return mutate


NODES = ("topology", "nodes")
LINKS = ("topology", "links")

INSTANCE_ERRORS = {
    "unknown top-level field": (_set(("extra",), 1), "top level: unknown field 'extra'"),
    "unknown node field": (_set((*NODES, 0, "colour"), "red"), "topology.nodes[0]: unknown field 'colour'"),
    "unknown link field": (_set((*LINKS, 2, "latency"), 1), "topology.links[2]: unknown field 'latency'"),
    "unknown job field": (_set(("jobs", 1, "priority"), 1), "jobs[1]: unknown field 'priority'"),
    "missing jobs": (_delete(("jobs",)), "top level: missing field 'jobs'"),
    "missing links": (_delete((*LINKS[:1], "links")), "topology: missing field 'links'"),
    "missing node kind": (_delete((*NODES, 3, "kind")), "topology.nodes[3]: missing field 'kind'"),
    "missing demand": (_delete(("jobs", 0, "demand")), "jobs[0]: missing field 'demand'"),
    "capacity as string": (
        _set((*LINKS, 1, "capacity"), "10G"),
        "topology.links[1].capacity: expected a number, got a string",
    ),
    "demand as boolean": (_set(("jobs", 0, "demand"), True), "jobs[0].demand: expected a number, got a boolean"),
    "group capacity as boolean": (
        _set((*NODES, 0, "group_capacity"), False),
        "topology.nodes[0].group_capacity: expected an integer, got a boolean",
    ),
    "group capacity as fraction": (
        _set((*NODES, 0, "group_capacity"), 2.5),
        "topology.nodes[0].group_capacity: expected an integer, got a number",
    ),
    "negative entry capacity": (
        _set((*NODES, 0, "entry_capacity"), -1),
        "topology.nodes[0].entry_capacity: must be a non-negative integer, got -1",
    ),
    "host with a table capacity": (
        _set((*NODES, 2, "group_capacity"), 4),
        "topology.nodes[2].group_capacity: only switches have table capacities",
    ),
    "unknown node kind": (_set((*NODES, 1, "kind"), "router"), "topology.nodes[1].kind: must be 'switch' or 'host', got \"router\""),
    "workers not an array": (_set(("jobs", 0, "workers"), "h2"), "jobs[0].workers: expected an array, got a string"),
    "node id not a string": (_set((*NODES, 1, "id"), 7), "topology.nodes[1].id: expected a string, got a number"),
    "jobs not an array": (_set(("jobs",), {}), "jobs: expected an array, got an object"),
    "duplicate node id": (
        _append(NODES, {"id": "s1", "kind": "switch"}),
        "topology.nodes[5].id: duplicate node id 's1' (also topology.nodes[0])",
    ),
    "duplicate job id": (
        _set(("jobs", 1, "id"), "j1"),
        "jobs[1].id: duplicate job id 'j1' (also jobs[0])",
    ),
    "link to unknown node": (_set((*LINKS, 3, "b"), "h99"), "topology.links[3].b: unknown node 'h99'"),
    "self-loop": (_set((*LINKS, 0, "b"), "s1"), "topology.links[0]: self-loop on 's1'"),
    "duplicate link": (
        _append(LINKS, {"a": "h2", "b": "s1", "capacity": 1e9}),
        "topology.links[4]: duplicate link between 'h2' and 's1' (also topology.links[2])",
    ),
    "link between two hosts": (
        _append(LINKS, {"a": "h1", "b": "h3", "capacity": 1e9}),
        "topology.links[4]: link between two hosts 'h1' and 'h3'",
    ),
    "host with no link": (
        _append(NODES, {"id": "h4", "kind": "host"}),
        "topology.nodes[5]: host 'h4' has no link",
    ),
    "host cut off": (
        _both(
            _append(NODES, {"id": "h4", "kind": "host"}),
            _append(NODES, {"id": "s3", "kind": "switch"}),
            _append(LINKS, {"a": "s3", "b": "h4", "capacity": 1e9}),
        ),
        "topology: disconnected: host 'h4' cannot be reached from host 'h1' through switches",
    ),
    "switch cut off": (
        _append(NODES, {"id": "s3", "kind": "switch"}),
        "topology: disconnected: switch 's3' cannot be reached from host 'h1' through switches",
    ),
    "switch reachable only through a host": (
        _both(
            _append(NODES, {"id": "s3", "kind": "switch"}),
            _append(LINKS, {"a": "s3", "b": "h3", "capacity": 1e9}),
        ),
        "topology: disconnected: switch 's3' cannot be reached from host 'h1' through switches",
    ),
    "unknown worker": (_set(("jobs", 0, "workers", 1), "h99"), "jobs[0].workers[1]: unknown host 'h99'"),
    "unknown ps": (_set(("jobs", 1, "ps"), "h99"), "jobs[1].ps: unknown host 'h99'"),
    "switch as ps": (_set(("jobs", 0, "ps"), "s2"), "jobs[0].ps: 's2' is a switch, not a host"),
    "switch as worker": (_set(("jobs", 0, "workers", 0), "s1"), "jobs[0].workers[0]: 's1' is a switch, not a host"),
    "ps among its workers": (
        _set(("jobs", 0, "workers"), ["h2", "h1"]),
        "jobs[0].workers[1]: the PS 'h1' is listed among its own workers",
    ),
    "worker listed twice": (
        _set(("jobs", 0, "workers"), ["h2", "h3", "h2"]),
        "jobs[0].workers[2]: worker 'h2' listed twice (also jobs[0].workers[0])",
    ),
    "empty worker list": (_set(("jobs", 1, "workers"), []), "jobs[1].workers: empty worker list"),
    "zero capacity": (_set((*LINKS, 1, "capacity"), 0), "topology.links[1].capacity: must be a positive number, got 0"),
    "negative capacity": (
        _set((*LINKS, 1, "capacity"), -1),
        "topology.links[1].capacity: must be a positive number, got -1",
    ),
    "negative demand": (_set(("jobs", 1, "demand"), -5e8), "jobs[1].demand: must be a positive number, got -500000000.0"),
    "zero weight": (_set(("jobs", 0, "weight"), 0), "jobs[0].weight: must be a positive number, got 0"),
    "NaN capacity": (_set((*LINKS, 0, "capacity"), float("nan")), "topology.links[0].capacity: must be a finite number, got nan"),
    "infinite demand": (_set(("jobs", 0, "demand"), float("inf")), "jobs[0].demand: must be a finite number, got inf"),
}


@pytest.mark.parametrize("mutate, message", INSTANCE_ERRORS.values(), ids=INSTANCE_ERRORS.keys())
def test_instance_error_names_its_place(mutate, message):
    data = tiny()
    mutate(data)
    with pytest.raises(InputError) as err:
        instance_from_dict(data)
    assert str(err.value) == message


def test_the_unmodified_tiny_instance_is_valid():
    # the error cases above are single changes to this instance
    instance_from_dict(tiny())


def test_instance_must_be_an_object():
    with pytest.raises(InputError, match=r"^top level: expected an object, got an array$"):
        instance_from_dict([])


# -- file errors --------------------------------------------------------------------


def test_unreadable_file_is_named(tmp_path):
    path = tmp_path / "missing.json"
    with pytest.raises(InputError) as err:
        read_instance(path)
    assert str(err.value) == f"{path}: cannot read: No such file or directory"


def test_not_json_gives_line_and_column(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n "topology": {,\n}\n')
    with pytest.raises(InputError) as err:
        read_instance(path)
    assert str(err.value).startswith(f"{path}: not JSON: ")
    assert str(err.value).endswith("(line 2, column 15)")


def test_not_an_object_is_named(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(InputError) as err:
        read_instance(path)
    assert str(err.value) == f"{path}: expected a JSON object, got an array"


def test_errors_in_a_file_name_the_file(tmp_path):
    data = tiny()
    data["jobs"][0]["workers"][1] = "h99"
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        read_instance(path)
    assert str(err.value) == f"{path}: jobs[0].workers[1]: unknown host 'h99'"


# -- plan errors --------------------------------------------------------------------


def _plan_data():
    inst = instance_from_dict(tiny())
    return inst, plan_to_dict(multicast_plan(inst), inst.topology)


PLAN_ERRORS = {
    "unknown field": (_set(("notes",), []), "top level: unknown field 'notes'"),
    "missing field": (_delete(("kappa",)), "top level: missing field 'kappa'"),
    "unknown job": (_set(("jobs", 1, "id"), "j9"), "jobs[1].id: unknown job 'j9'"),
    "duplicate job": (_set(("jobs", 1, "id"), "j1"), "jobs[1].id: duplicate job id 'j1' (also jobs[0])"),
    "unknown node on an edge": (_set(("jobs", 0, "edges", 2, "to"), "x"), "jobs[0].edges[2].to: unknown node 'x'"),
    "edge that is not a link": (
        _set(("jobs", 0, "edges", 0), {"from": "h1", "to": "h2", "copies": 1}),
        "jobs[0].edges[0]: no link from 'h1' to 'h2'",
    ),
    "zero copies": (_set(("jobs", 0, "edges", 0, "copies"), 0), "jobs[0].edges[0].copies: must be a positive integer, got 0"),
    "fractional copies": (
        _set(("jobs", 0, "edges", 0, "copies"), 1.5),
        "jobs[0].edges[0].copies: expected an integer, got a number",
    ),
    "host as group": (_set(("jobs", 0, "groups"), ["h1"]), "jobs[0].groups[0]: 'h1' is a host, not a switch"),
    "unknown entry": (_set(("jobs", 0, "entries", 1), "s9"), "jobs[0].entries[1]: unknown node 's9'"),
    "negative rate": (_set(("jobs", 1, "rate"), -1), "jobs[1].rate: must be a non-negative number, got -1"),
    "bad mode": (_set(("jobs", 0, "mode"), "broadcast"), "jobs[0].mode: must be one of multicast, hybrid, unicast, got \"broadcast\""),
    "lambda as string": (_set(("lambda",), "high"), "lambda: expected a number, got a string"),
    "NaN throughput": (_set(("throughput",), float("nan")), "throughput: must be a finite number, got nan"),
    "unknown switch": (_set(("switches", 1, "id"), "s9"), "switches[1].id: unknown node 's9'"),
    "capacity of another instance": (
        _set(("switches", 0, "group_capacity"), 5),
        "switches[0].group_capacity: 5 does not match the instance's 2",
    ),
}


@pytest.mark.parametrize("mutate, message", PLAN_ERRORS.values(), ids=PLAN_ERRORS.keys())
def test_plan_error_names_its_place(mutate, message):
    inst, data = _plan_data()
    plan_from_dict(copy.deepcopy(data), inst)  # valid before the change
    mutate(data)
    with pytest.raises(InputError) as err:
        plan_from_dict(data, inst)
    assert str(err.value) == message


def test_plan_list_errors_name_the_plan_and_the_file(tmp_path):
    inst, data = _plan_data()
    bad = copy.deepcopy(data)
    bad["jobs"][0]["edges"][1]["from"] = "nowhere"
    path = tmp_path / "plans.json"
    path.write_text(json.dumps({"plans": [data, bad]}))
    with pytest.raises(InputError) as err:
        read_plans(path, inst)
    assert str(err.value) == f"{path}: plans[1].jobs[0].edges[1].from: unknown node 'nowhere'"
