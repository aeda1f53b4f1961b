"""Where lp-rounding's time goes: per-phase timings of one plan, for docs/performance.md.

`PHASES_CHILD` runs in a fresh interpreter (like bench's speed cases): it wraps
the planner's stages and its main operations with timers, plans one reference
instance with the second process switched off (so that every stage's time is
measured where it runs, in one process), and prints the timings as JSON.
`phases_section` renders them. Stages partition the run time (what is left is
"other"); operations cut across stages (pricing runs in the baselines, the
column generation, the repair and the local search) and overlap each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from controller.offline.report import md_table, run_snippet

PHASES_CHILD = r"""
import json, sys, time
from collections import defaultdict
params = json.loads(sys.argv[1])
from controller import planner
from controller.algorithm import baselines, headroom, lp_rounding, parallel, pricing, rounding, structures, traffic
from controller.algorithm.workload import reference_instance

wall = defaultdict(float)
calls = defaultdict(int)
def timed(owner, name, label):
    f = getattr(owner, name)
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            wall[label] += time.perf_counter() - t
            calls[label] += 1
    setattr(owner, name, g)

STAGES = [
    (baselines, "spt", "stage: spt baseline"),
    (baselines, "steiner", "stage: steiner baseline"),
    (baselines, "greedy", "stage: greedy baseline"),
    (lp_rounding, "column_generation", "stage: column generation (master LP + pricing)"),
    (lp_rounding, "repair", "stage: rounding draws' table repair"),
    (lp_rounding, "local_search", "stage: local search (bottleneck moves + polish)"),
    (lp_rounding, "_value_after_allocation", "stage: rate allocation (plan + baselines)"),
    (traffic, "reduce_traffic", "stage: traffic (rates held, fewer link crossings)"),
    (headroom, "raise_headroom", "stage: headroom (rates held, faster alone)"),
]
OPS = [
    (lp_rounding.MasterLP, "solve", "op: master LP solves (HiGHS)"),
    (rounding, "_polish", "op: polish sweep (in local search)"),
    (pricing._ClosJob, "price", "op: pricing DP (Clos)"),
    (pricing._ClosJob, "build", "op: building priced structures (Clos)"),
    (pricing._ClosJob, "__init__", "op: per-job pricing index (Clos)"),
    (pricing, "make_structure", "op: make_structure (in building)"),
]
# spt/steiner/greedy are looked up on the baselines module at call time
for owner, name, label in STAGES + OPS:
    timed(owner, name, label)
parallel.worth_forking = lambda *a, **k: False
planner.run(reference_instance(4, 2, group_capacity=2, seed=1), "lp-rounding", "max-concurrent", 0)
wall.clear(); calls.clear()
instance = reference_instance(params["k"], params["jobs"], group_capacity=params["groups"], seed=params["seed"])
plan = planner.run(instance, "lp-rounding", "max-concurrent", params["seed"])
print(json.dumps({"total": plan.runtime_s, "wall": wall, "calls": calls}))
"""


def run_phases(k: int, jobs: int, groups: int, timeout_s: float, root: Path, seed: int = 0) -> dict:
    """Time the phases of one plan in a fresh interpreter; {"error": ...} on failure."""
    return run_snippet(PHASES_CHILD, {"k": k, "jobs": jobs, "groups": groups, "seed": seed}, timeout_s, root)


def phases_table(result: dict) -> list[tuple[str, str, str, str]]:
    """Rows (what, calls, seconds, share of the run time): stages, other, then operations."""
    total = float(result["total"])
    wall, calls = result["wall"], result["calls"]
    rows = []
    stages = {k: v for k, v in wall.items() if k.startswith("stage: ")}
    for label, secs in sorted(stages.items(), key=lambda kv: -kv[1]):
        rows.append((label.removeprefix("stage: "), str(calls[label]), f"{secs:.3f}", f"{100 * secs / total:.0f}%"))
    other = total - sum(stages.values())
    rows.append(("other (network, unicast structures, draws, β)", "—", f"{other:.3f}", f"{100 * other / total:.0f}%"))
    rows.append(("**run time**", "", f"**{total:.3f}**", "100%"))
    for label, secs in sorted(((k, v) for k, v in wall.items() if k.startswith("op: ")), key=lambda kv: -kv[1]):
        rows.append(("· " + label.removeprefix("op: "), str(calls[label]), f"{secs:.3f}", f"{100 * secs / total:.0f}%"))
    return rows


def phases_section(cases: Sequence[tuple[int, int, dict]], groups: int, forked_note: str) -> str:
    """The markdown section: one table per (k, jobs, result)."""
    parts = [
        "## 5. Where the time goes",
        "",
        f"One plan per case (G={groups}, seed 0) in a fresh subprocess, with timers around the stages of "
        "`lp-rounding` and its main operations (controller/offline/phases.py), and the second process switched "
        "off so that every stage is timed where it runs. Stages (upper rows) partition the run time; the "
        "operations (rows marked ·) cut across the stages and overlap each other. The timers add a little "
        "overhead; this is one run on a machine that other work may share. " + forked_note,
        "",
    ]
    for k, jobs, result in cases:
        parts.append(f"### k={k}, {jobs} jobs")
        parts.append("")
        if "error" in result:
            parts.append(f"Failed: {result['error']}.")
        else:
            parts.append(md_table(("stage or operation", "calls", "s", "share"), phases_table(result)))
        parts.append("")
    return "\n".join(parts).rstrip()
