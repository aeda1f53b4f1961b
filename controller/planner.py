"""Runs a planning algorithm and stamps the plan with its wall-clock run time.

The algorithm layer reads no clock; this thin wrapper is where time is measured,
for the CLI, the benchmarks, the simulation and the controller alike.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import ParamSpec

from controller.algorithm import plan
from controller.algorithm.admission import incremental
from controller.algorithm.model import Plan

P = ParamSpec("P")


def _timed(algorithm: Callable[P, Plan]) -> Callable[P, Plan]:
    """`algorithm`, its plan's `runtime_s` the wall-clock time the call took."""

    @functools.wraps(algorithm)
    def timed(*args: P.args, **kwargs: P.kwargs) -> Plan:
        start = time.perf_counter()
        result = algorithm(*args, **kwargs)
        return dataclasses.replace(result, runtime_s=time.perf_counter() - start)

    return timed


#: `algorithm.plan(instance, algorithm, objective="max-concurrent", seed=0, warm_from=None)`, timed
run = _timed(plan)
#: `algorithm.admission.incremental(instance, previous, previous_topology, objective)`, timed
#: (raises its NotIncremental)
run_incremental = _timed(incremental)
