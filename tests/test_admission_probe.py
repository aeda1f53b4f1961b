"""Issue 25: the admission probe at the default config. A k=16 fat-tree (G=16)
holding 200 jobs, then 20 registrations one by one against the controller process
(`bench-registration`, `registration.measure` with the planner section empty):
no other job moved by the plan that answered, and the latencies bounded.

The issue's goal is p50 <= 50 ms and p99 <= 200 ms. On this 2-core machine the
probe measured p50 57-64 ms / p99 183-197 ms at load 2-3 and p50 87 / p99 333 ms
at load 4-6 when admission became the default (docs/planning-time.md, "Why
admission is the default"), and p50 32-45 ms / p99 113-141 ms at load 1-2 on
2026-12-02 (`bench-registration --no-compare --repeat 40`, docs/performance.md
§6): the goal is met on a quiet machine, and CI shares the cores with the
suite's own processes. So the test asserts what separates admission from a full re-plan on a
loaded machine (p50 <= 150 ms, p99 <= 600 ms: with `planner.incremental: false`
the same probe measured p50 ~3 s, p99 ~5 s) and prints every latency; the goal
itself is measured by `python -m controller bench-registration` and reported in
the docs, not asserted here.

Timed against a real process on a shared machine: the message of a failure gives
every latency and the load average, so a loaded machine can be told from a slow
controller. With `planner.incremental: false` the same probe fails (about 1 s per
registration, ~150 jobs moved each)."""

from __future__ import annotations

import os

from controller.config.schema import PlannerConfig
from controller.offline.registration import measure

P50_S = 0.150  # the goal is 0.050: see the module docstring
P99_S = 0.600  # the goal is 0.200


def test_default_config_admits_each_registration_fast_and_moves_nobody(tmp_path):
    assert PlannerConfig().incremental, "the probe is about the default config: admission"
    m = measure(16, 16, 200, 20, 0, 32, None, tmp_path)
    seen = (f"latencies ms {[round(x * 1000) for x in m['seq_s']]}, jobs moved {m['churn']}, "
            f"load average {os.getloadavg()}")
    assert len(m["seq_s"]) == 20, seen
    assert m["churn_max"] == 0, seen  # no running job moved at any answer
    assert m["seq_p50"] <= P50_S, seen
    assert m["seq_p99"] <= P99_S, seen
    assert m["lam_served"] >= 0.9 * m["lam_full"], seen  # and the served plan stays a good one


def test_settle_takes_what_survives_out_of_the_collector():
    import gc

    from controller.app import heap

    kept = [[i] for i in range(1000)]  # noqa: F841 - alive across the call
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        heap.settle()
        assert gc.get_freeze_count() >= 1000
    finally:
        gc.unfreeze()
