"""How a new plan relates to the served one: the jobs it moves (`churn`), and its
edges renumbered from the planning topology (the full one minus the down links)
to the full one (`edge_remap`, `on_full_topology`). Pure; the planning loop
(`core.planning`) calls them in its install step.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator

from controller.algorithm.admission import same_topology
from controller.algorithm.model import Plan, Topology
from controller.algorithm.network import Network
from controller.core.host_join import grown_by_hosts
from controller.core.updates import TranslationInputs

_JOB_ID, _STRUCTURE = (operator.attrgetter(a) for a in ("job.id", "structure"))


def churn(previous: TranslationInputs | None, net: Network, plan: Plan) -> int:
    """Jobs of the previous plan that are in `plan` (made on `net`) with another
    structure (on another planning topology, every job they share)."""
    if previous is None:
        return 0
    before = dict(zip(map(_JOB_ID, previous.plan.jobs), map(_STRUCTURE, previous.plan.jobs)))
    if not same_topology(previous.network.topo, net.topo):
        if grown_by_hosts(previous.network.topo, net.topo) is None:
            return sum(1 for jp in plan.jobs if jp.job.id in before)
        # only hosts joined: a job moved if its tree or branches changed, by node names
        old_name, new_name = previous.network.topo.name, net.topo.name

        def named(s, name) -> tuple:
            return (sorted((name(a), name(b)) for a, b in s.tree), sorted((name(a), name(b)) for a, b in s.branches))

        return sum(1 for jp in plan.jobs
                   if jp.job.id in before and named(before[jp.job.id], old_name) != named(jp.structure, new_name))
    # by builtins (an admission at k=48 keeps 5,000 structures, the same objects): only
    # the jobs whose structure is another object are compared
    was, now = list(map(before.get, map(_JOB_ID, plan.jobs))), list(map(_STRUCTURE, plan.jobs))
    other = itertools.compress(range(len(now)), map(operator.is_not, was, now))
    return sum(1 for i in other if was[i] is not None and was[i] != now[i])


def edge_remap(reduced: Topology, full: Topology) -> list[int] | None:
    """The index in `full` of each edge of `reduced` (the full topology minus the down
    links: the same nodes); None when they are the same indices (no link down: the
    planning topology differs from `full` only in its capacities)."""
    index = full.edge_index
    remap = [index[(e.tail, e.head)] for e in reduced.edges]
    return None if len(remap) == len(full.edges) and remap == list(range(len(remap))) else remap


def on_full_topology(plan: Plan, remap: list[int] | None) -> Plan:
    """`plan` (made on a reduced topology: the full one minus the down links) with its
    edge indices renumbered to those of the full topology (`edge_remap`; None: the
    same), so that everything reading the plan (the API, /plan) can keep using it."""
    if remap is None:  # the same edges: every job's structure as it is
        return dataclasses.replace(plan, columns=())
    jobs = tuple(
        dataclasses.replace(
            jp,
            structure=dataclasses.replace(
                jp.structure, copies=tuple(sorted((remap[e], c) for e, c in jp.structure.copies))
            ),
        )
        for jp in plan.jobs
    )
    # the columns stay on the planning network's plan (the warm start's), not on this copy, as do its
    # arrays for the next admission (`Plan.loads`: edge indices of the planning network)
    return dataclasses.replace(plan, jobs=jobs, columns=(), loads=None)
