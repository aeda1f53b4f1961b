"""Runs a planning algorithm and stamps the plan with its wall-clock run time.

The algorithm layer reads no clock; this thin wrapper is where time is measured,
for the CLI, the benchmarks, the simulation and the controller alike.
"""

from __future__ import annotations

import dataclasses
import time

from controller.algorithm import plan
from controller.algorithm.model import Instance, Plan, Topology


def run(
    instance: Instance,
    algorithm: str,
    objective: str = "max-concurrent",
    seed: int = 0,
    warm_from: tuple[Plan, Topology] | None = None,
) -> Plan:
    start = time.perf_counter()
    result = plan(instance, algorithm, objective, seed, warm_from)
    return dataclasses.replace(result, runtime_s=time.perf_counter() - start)


def run_incremental(instance: Instance, previous: Plan, previous_topology: Topology, objective: str) -> Plan:
    """`algorithm.admission.incremental`, timed (raises its NotIncremental)."""
    from controller.algorithm.admission import incremental

    start = time.perf_counter()
    result = incremental(instance, previous, previous_topology, objective)
    return dataclasses.replace(result, runtime_s=time.perf_counter() - start)
