"""The planning layer: pure functions from an instance to a plan.

`plan(instance, algorithm, objective, seed)` is the entry point; callers go
through `controller.planner.run`, which also measures `runtime_s`. Nothing in this
package does I/O, reads a clock, or keeps global state: the same inputs give the
same plan.
"""

from __future__ import annotations

from . import baselines
from .model import Instance, Plan, PlanningError
from .network import Network
from .rates import allocate, assemble_plan

ALGORITHMS = ("lp-rounding", "unicast", "spt", "steiner", "greedy", "ilp")
OBJECTIVES = ("max-concurrent", "max-sum")


def plan(instance: Instance, algorithm: str, objective: str = "max-concurrent", seed: int = 0) -> Plan:
    """Plan `instance` with `algorithm`; raises PlanningError when it refuses."""
    if algorithm not in ALGORITHMS:
        raise PlanningError(f"unknown algorithm {algorithm!r}; choose from {', '.join(ALGORITHMS)}")
    if objective not in OBJECTIVES:
        raise PlanningError(f"unknown objective {objective!r}; choose from {', '.join(OBJECTIVES)}")
    net = Network(instance.topology)
    jobs = instance.jobs
    if algorithm == "unicast":
        structures = baselines.unicast(net, jobs)
    else:
        raise PlanningError(f"algorithm {algorithm!r} is not available yet")
    rates = allocate(net, jobs, structures, objective)
    return assemble_plan(net, jobs, structures, rates, algorithm, objective, 0.0)
