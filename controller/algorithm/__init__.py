"""The planning layer: pure functions from an instance to a plan.

`plan(instance, algorithm, objective, seed)` is the entry point; callers go
through `controller.planner.run`, which also measures `runtime_s`. Nothing in this
package does I/O, reads a clock, or keeps global state: the same inputs give the
same plan.

It owns the model (topology, jobs, structures, plans), the topologies and
workloads, the algorithms (lp-rounding, the baselines, ilp, admission), rate
allocation, plan validation and the backups of tree edges for fast failover
(`backups`). It imports nothing else of the project (numpy,
scipy and networkx only): it is the lowest layer, and every other package may
build on it.
"""

from __future__ import annotations

from controller.algorithm import baselines
from controller.algorithm.model import Instance, Plan, PlanningError, Solution, Topology
from controller.algorithm.network import Network
from controller.algorithm.rates import allocate, assemble_plan

ALGORITHMS = ("lp-rounding", "unicast", "spt", "steiner", "greedy", "ilp")
OBJECTIVES = ("max-concurrent", "max-sum")


def plan(
    instance: Instance,
    algorithm: str,
    objective: str = "max-concurrent",
    seed: int = 0,
    warm_from: tuple[Plan, Topology] | None = None,
) -> Plan:
    """Plan `instance` with `algorithm`; raises PlanningError when it refuses.

    `warm_from` (an earlier plan and the topology it was made on) warm-starts
    lp-rounding from that plan's columns where the topology is the same
    (`lp_rounding.warm_columns`); other algorithms, and a changed topology, ignore it.
    """
    if algorithm not in ALGORITHMS:
        raise PlanningError(f"unknown algorithm {algorithm!r}; choose from {', '.join(ALGORITHMS)}")
    if objective not in OBJECTIVES:
        raise PlanningError(f"unknown objective {objective!r}; choose from {', '.join(OBJECTIVES)}")
    net = Network(instance.topology)
    jobs = instance.jobs
    # lp_rounding and ilp (~20 ms of imports with their own modules) are imported on
    # first use, off the start-up path of the commands that do not plan with them
    if algorithm == "lp-rounding":
        from controller.algorithm import lp_rounding

        warm = lp_rounding.warm_columns(instance, *warm_from) if warm_from is not None else None
        sol = lp_rounding.solve(net, jobs, objective, seed, warm=warm)
    elif algorithm == "ilp":
        from controller.algorithm import ilp

        sol = ilp.solve(net, jobs, objective)
    else:
        builder = {
            "unicast": baselines.unicast,
            "spt": baselines.spt,
            "steiner": baselines.steiner,
            "greedy": baselines.greedy,
        }[algorithm]
        sol = Solution(builder(net, jobs))
    rates = sol.rates if sol.rates is not None else allocate(net, jobs, sol.structures, objective)
    return assemble_plan(
        net, jobs, sol.structures, rates, algorithm, objective, 0.0, sol.lp_bound, sol.beta, sol.notes, sol.columns
    )
