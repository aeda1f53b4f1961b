"""Reading and writing instances and plans in the JSON formats of docs/architecture.md, Formats.

The readers are strict (`strict.JSON`), like the config's: an unknown field, a missing
field, a value of the wrong type or a reference to something that does not exist
is an `InputError` whose one-line message starts with the place, for example
``jobs[3].workers[1]: unknown host 'h99'``. The readers return the immutable
dataclasses of `controller.algorithm.model`; the algorithm layer itself does no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from controller.algorithm.model import (
    Instance,
    Job,
    JobPlan,
    Link,
    Node,
    Plan,
    Structure,
    SwitchUsage,
    Topology,
)
from controller.config.strict import JSON, InputError, parse_json, read_text
from controller.config.strict import item as _item
from controller.config.strict import key as _field

MODES = ("multicast", "hybrid", "unicast")

# the strict reader of the JSON formats (`strict.JSON`), by this module's names
_fail = JSON.fail
_json_type = JSON.type_name
_object = JSON.mapping  # (value, where, required fields, optional fields)
_array = JSON.array
_string = JSON.string
_number = JSON.number
_count = JSON.integer


def _optional_number(value: Any, where: str) -> float | None:
    return None if value is None else _number(value, where, positive=False)


# -- instances ----------------------------------------------------------------------


def instance_from_dict(data: Any) -> Instance:
    """Build and validate an `Instance` from the instance JSON of docs/architecture.md, Formats."""
    data = _object(data, "", ("topology", "jobs"))
    topology = _topology_from_dict(data["topology"], "topology")
    jobs = _jobs_from_list(data["jobs"], "jobs", topology)
    return Instance(topology, jobs)


def _topology_from_dict(value: Any, where: str) -> Topology:
    value = _object(value, where, ("nodes", "links"))
    nodes_at = _field(where, "nodes")
    links_at = _field(where, "links")
    nodes: list[Node] = []
    node_at: dict[str, str] = {}
    for i, raw in enumerate(_array(value["nodes"], nodes_at)):
        at = _item(nodes_at, i)
        raw = _object(raw, at, ("id", "kind"), ("group_capacity", "entry_capacity"))
        node_id = _string(raw["id"], _field(at, "id"))
        if node_id in node_at:
            raise _fail(_field(at, "id"), f"duplicate node id {node_id!r} (also {node_at[node_id]})")
        node_at[node_id] = at
        kind = raw["kind"]
        if kind not in ("switch", "host"):
            raise _fail(_field(at, "kind"), f"must be 'switch' or 'host', got {json.dumps(kind)}")
        caps = {}
        for key in ("group_capacity", "entry_capacity"):
            if key in raw:
                if kind == "host":
                    raise _fail(_field(at, key), "only switches have table capacities")
                caps[key] = _count(raw[key], _field(at, key))
        nodes.append(Node(node_id, kind, **caps))

    kind_of = {n.id: n.kind for n in nodes}
    links: list[Link] = []
    link_at: dict[frozenset[str], str] = {}
    adjacent: dict[str, list[str]] = {n.id: [] for n in nodes}
    for i, raw in enumerate(_array(value["links"], links_at)):
        at = _item(links_at, i)
        raw = _object(raw, at, ("a", "b", "capacity"))
        ends = []
        for key in ("a", "b"):
            name = _string(raw[key], _field(at, key))
            if name not in kind_of:
                raise _fail(_field(at, key), f"unknown node {name!r}")
            ends.append(name)
        a, b = ends
        if a == b:
            raise _fail(at, f"self-loop on {a!r}")
        pair = frozenset(ends)
        if pair in link_at:
            raise _fail(at, f"duplicate link between {a!r} and {b!r} (also {link_at[pair]})")
        link_at[pair] = at
        if kind_of[a] == "host" and kind_of[b] == "host":
            raise _fail(at, f"link between two hosts {a!r} and {b!r}")
        capacity = _number(raw["capacity"], _field(at, "capacity"), positive=True)
        links.append(Link(a, b, capacity))
        adjacent[a].append(b)
        adjacent[b].append(a)

    for node in nodes:
        if node.kind == "host" and not adjacent[node.id]:
            raise _fail(node_at[node.id], f"host {node.id!r} has no link")
    _check_connected(nodes, adjacent, kind_of, where)
    return Topology(tuple(nodes), tuple(links))


def _check_connected(
    nodes: list[Node], adjacent: dict[str, list[str]], kind_of: dict[str, str], where: str
) -> None:
    """Every node must be reachable from the first host with only switches in between."""
    if not nodes:
        return
    start = next((n.id for n in nodes if n.kind == "host"), nodes[0].id)
    seen = {start}
    stack = [start]
    while stack:
        v = stack.pop()
        if v != start and kind_of[v] == "host":
            continue  # hosts do not forward
        for u in adjacent[v]:
            if u not in seen:
                seen.add(u)
                stack.append(u)
    for node in nodes:
        if node.id not in seen:
            raise _fail(
                where,
                f"disconnected: {node.kind} {node.id!r} cannot be reached from host {start!r} through switches",
            )


def _jobs_from_list(value: Any, where: str, topology: Topology) -> tuple[Job, ...]:
    kind_of = {n.id: n.kind for n in topology.nodes}
    jobs: list[Job] = []
    job_at: dict[str, str] = {}

    def host(name: Any, at: str) -> str:
        name = _string(name, at)
        if name not in kind_of:
            raise _fail(at, f"unknown host {name!r}")
        if kind_of[name] != "host":
            raise _fail(at, f"{name!r} is a switch, not a host")
        return name

    for i, raw in enumerate(_array(value, where)):
        at = _item(where, i)
        raw = _object(raw, at, ("id", "ps", "workers", "demand"), ("weight",))
        job_id = _string(raw["id"], _field(at, "id"))
        if job_id in job_at:
            raise _fail(_field(at, "id"), f"duplicate job id {job_id!r} (also {job_at[job_id]})")
        job_at[job_id] = at
        ps = host(raw["ps"], _field(at, "ps"))
        workers_at = _field(at, "workers")
        workers: list[str] = []
        for k, name in enumerate(_array(raw["workers"], workers_at)):
            w_at = _item(workers_at, k)
            w = host(name, w_at)
            if w == ps:
                raise _fail(w_at, f"the PS {ps!r} is listed among its own workers")
            if w in workers:
                raise _fail(w_at, f"worker {w!r} listed twice (also {_item(workers_at, workers.index(w))})")
            workers.append(w)
        if not workers:
            raise _fail(workers_at, "empty worker list")
        demand = _number(raw["demand"], _field(at, "demand"), positive=True)
        extra = {}
        if "weight" in raw:
            extra["weight"] = _number(raw["weight"], _field(at, "weight"), positive=True)
        jobs.append(Job(job_id, ps, tuple(workers), demand, **extra))
    return tuple(jobs)


def instance_to_dict(instance: Instance) -> dict:
    """The instance JSON of `instance`; absent capacities and weight 1 are omitted."""
    nodes = []
    for n in instance.topology.nodes:
        node: dict[str, Any] = {"id": n.id, "kind": n.kind}
        if n.group_capacity is not None:
            node["group_capacity"] = n.group_capacity
        if n.entry_capacity is not None:
            node["entry_capacity"] = n.entry_capacity
        nodes.append(node)
    links = [{"a": l.a, "b": l.b, "capacity": l.capacity} for l in instance.topology.links]
    jobs = []
    for j in instance.jobs:
        job: dict[str, Any] = {"id": j.id, "ps": j.ps, "workers": list(j.workers), "demand": j.demand}
        if j.weight != 1.0:
            job["weight"] = j.weight
        jobs.append(job)
    return {"topology": {"nodes": nodes, "links": links}, "jobs": jobs}


# -- plans --------------------------------------------------------------------------


def plan_to_dict(plan: Plan, topology: Topology) -> dict:
    """The plan JSON of docs/architecture.md, Formats (`notes` are not part of it)."""
    name = topology.name
    jobs = []
    for jp in plan.jobs:
        s = jp.structure
        edges = []
        for e, count in s.copies:
            edge = topology.edges[e]
            edges.append({"from": name(edge.tail), "to": name(edge.head), "copies": int(count)})
        jobs.append(
            {
                "id": jp.job.id,
                "rate": jp.rate,
                "mode": s.mode,
                "edges": edges,
                "groups": sorted(name(v) for v in s.groups),
                "entries": sorted(name(v) for v in s.entries),
            }
        )
    switches = []
    for su in plan.switches:
        sw: dict[str, Any] = {"id": su.id, "groups_used": su.groups_used}
        if su.group_capacity is not None:
            sw["group_capacity"] = su.group_capacity
        sw["entries_used"] = su.entries_used
        if su.entry_capacity is not None:
            sw["entry_capacity"] = su.entry_capacity
        switches.append(sw)
    return {
        "algorithm": plan.algorithm,
        "objective": plan.objective,
        "lambda": plan.lam,
        "throughput": plan.throughput,
        "lp_bound": _finite_or_none(plan.lp_bound),
        "kappa": plan.kappa,
        "beta": _finite_or_none(plan.beta),
        "runtime_s": plan.runtime_s,
        "jobs": jobs,
        "switches": switches,
    }


def _finite_or_none(x: float | None) -> float | None:
    """JSON has no infinity: an unbounded certificate value is written as null."""
    return None if x is None or not math.isfinite(x) else x


PLAN_FIELDS = ("algorithm", "objective", "lambda", "throughput", "lp_bound", "kappa", "beta", "runtime_s", "jobs", "switches")
# what the controller adds to the plan it serves (GET /plan); read and ignored here
PLAN_OPTIONAL_FIELDS = ("generation", "computed_at", "churn", "next")  # what GET /plan adds


def plan_from_dict(data: Any, instance: Instance, where: str = "") -> Plan:
    """Read a plan (docs/architecture.md, Formats) of `instance`; `where` prefixes error locations.

    A plan file carries no multicast tree: the structures have empty `tree` and
    `branches` and keep the file's mode in `declared_mode`.
    """
    topo = instance.topology
    data = _object(data, where, PLAN_FIELDS, PLAN_OPTIONAL_FIELDS)
    job_by_id = {j.id: j for j in instance.jobs}
    jobs_at = _field(where, "jobs")
    job_plans: list[JobPlan] = []
    seen_jobs: dict[str, str] = {}
    for i, raw in enumerate(_array(data["jobs"], jobs_at)):
        at = _item(jobs_at, i)
        raw = _object(raw, at, ("id", "rate", "mode", "edges", "groups", "entries"))
        job_id = _string(raw["id"], _field(at, "id"))
        if job_id not in job_by_id:
            raise _fail(_field(at, "id"), f"unknown job {job_id!r}")
        if job_id in seen_jobs:
            raise _fail(_field(at, "id"), f"duplicate job id {job_id!r} (also {seen_jobs[job_id]})")
        seen_jobs[job_id] = at
        rate = _number(raw["rate"], _field(at, "rate"), positive=False)
        mode = raw["mode"]
        if mode not in MODES:
            raise _fail(_field(at, "mode"), f"must be one of {', '.join(MODES)}, got {json.dumps(mode)}")
        structure = Structure(
            tree=(),
            branches=(),
            copies=_plan_edges(raw["edges"], _field(at, "edges"), topo),
            groups=_switch_set(raw["groups"], _field(at, "groups"), topo),
            entries=_switch_set(raw["entries"], _field(at, "entries"), topo),
            declared_mode=mode,
        )
        job_plans.append(JobPlan(job_by_id[job_id], rate, structure))
    return Plan(
        algorithm=_string(data["algorithm"], _field(where, "algorithm")),
        objective=_string(data["objective"], _field(where, "objective")),
        lam=_number(data["lambda"], _field(where, "lambda"), positive=False),
        throughput=_number(data["throughput"], _field(where, "throughput"), positive=False),
        lp_bound=_optional_number(data["lp_bound"], _field(where, "lp_bound")),
        kappa=_count(data["kappa"], _field(where, "kappa")),
        beta=_optional_number(data["beta"], _field(where, "beta")),
        runtime_s=_number(data["runtime_s"], _field(where, "runtime_s"), positive=False),
        jobs=tuple(job_plans),
        switches=_switch_usage(data["switches"], _field(where, "switches"), topo),
    )


def _node(value: Any, at: str, topo: Topology, *, switch: bool = False) -> int:
    name = _string(value, at)
    if name not in topo.index:
        raise _fail(at, f"unknown node {name!r}")
    v = topo.index[name]
    if switch and not topo.is_switch(v):
        raise _fail(at, f"{name!r} is a host, not a switch")
    return v


def _plan_edges(value: Any, where: str, topo: Topology) -> tuple[tuple[int, int], ...]:
    copies: dict[int, int] = {}
    for k, raw in enumerate(_array(value, where)):
        at = _item(where, k)
        raw = _object(raw, at, ("from", "to", "copies"))
        tail = _node(raw["from"], _field(at, "from"), topo)
        head = _node(raw["to"], _field(at, "to"), topo)
        e = topo.edge_index.get((tail, head))
        if e is None:
            raise _fail(at, f"no link from {topo.name(tail)!r} to {topo.name(head)!r}")
        if e in copies:
            raise _fail(at, f"edge {topo.name(tail)!r} -> {topo.name(head)!r} listed twice")
        copies[e] = _count(raw["copies"], _field(at, "copies"), minimum=1)
    return tuple(sorted(copies.items()))


def _switch_set(value: Any, where: str, topo: Topology) -> frozenset[int]:
    out: set[int] = set()
    for k, raw in enumerate(_array(value, where)):
        at = _item(where, k)
        v = _node(raw, at, topo, switch=True)
        if v in out:
            raise _fail(at, f"switch {topo.name(v)!r} listed twice")
        out.add(v)
    return frozenset(out)


def _switch_usage(value: Any, where: str, topo: Topology) -> tuple[SwitchUsage, ...]:
    out: list[SwitchUsage] = []
    seen: set[int] = set()
    for k, raw in enumerate(_array(value, where)):
        at = _item(where, k)
        raw = _object(raw, at, ("id", "groups_used", "entries_used"), ("group_capacity", "entry_capacity"))
        v = _node(raw["id"], _field(at, "id"), topo, switch=True)
        if v in seen:
            raise _fail(_field(at, "id"), f"switch {topo.name(v)!r} listed twice")
        seen.add(v)
        node = topo.nodes[v]
        caps = {}
        for key in ("group_capacity", "entry_capacity"):
            cap = _count(raw[key], _field(at, key)) if key in raw else None
            if cap != getattr(node, key):
                expected = "unlimited" if getattr(node, key) is None else getattr(node, key)
                got = "absent (unlimited)" if cap is None else cap
                raise _fail(_field(at, key), f"{got} does not match the instance's {expected}")
            caps[key] = cap
        out.append(
            SwitchUsage(
                node.id,
                _count(raw["groups_used"], _field(at, "groups_used")),
                caps["group_capacity"],
                _count(raw["entries_used"], _field(at, "entries_used")),
                caps["entry_capacity"],
            )
        )
    return tuple(out)


def plans_from_json(data: Any, instance: Instance) -> list[Plan]:
    """One plan object, or ``{"plans": [plan, ...]}``, as a list of plans."""
    if isinstance(data, dict) and "plans" in data:
        data = _object(data, "", ("plans",))
        return [plan_from_dict(p, instance, _item("plans", i)) for i, p in enumerate(_array(data["plans"], "plans"))]
    return [plan_from_dict(data, instance)]


def plans_to_json(plans: Iterable[Plan], topology: Topology) -> dict:
    return {"plans": [plan_to_dict(p, topology) for p in plans]}


# -- files --------------------------------------------------------------------------


def _load_json(path: str | Path) -> Any:
    text = read_text(path)
    data = _in_file(path, lambda: parse_json(text, unique_keys=False))
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object, got {_json_type(data)}")
    return data


def _in_file(path: str | Path, read):
    try:
        return read()
    except InputError as e:
        raise InputError(f"{path}: {e}") from None


def read_instance(path: str | Path) -> Instance:
    data = _load_json(path)
    return _in_file(path, lambda: instance_from_dict(data))


def read_plans(path: str | Path, instance: Instance) -> list[Plan]:
    """Plans of `instance` from a file holding one plan or ``{"plans": [...]}``."""
    data = _load_json(path)
    return _in_file(path, lambda: plans_from_json(data, instance))


def dump_json(data: Any) -> str:
    """The project's JSON text: strict (no NaN/Infinity), one space indent, final newline."""
    return json.dumps(data, indent=1, allow_nan=False) + "\n"


def write_json(data: Any, path: str | Path) -> None:
    text = dump_json(data)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot write: {e.strerror or e}") from None


def write_instance(instance: Instance, path: str | Path) -> None:
    write_json(instance_to_dict(instance), path)
