"""Re-optimisation from a warm start against a cold full plan, for docs/performance.md §7.

`WARM_CHILD` runs in a fresh interpreter (like bench's speed cases): a full
lp-rounding plan of the first jobs of a reference instance, then `admitted` more
jobs admitted one by one (`algorithm.admission.incremental`, as the service
serves them between re-optimisations); then the re-optimisation of the whole job
set twice, cold (`planner.run`) and warm-started from the served plan
(`warm_from`), each timed, with its λ, LP bound, aggregate throughput and the
running jobs whose structure it would change. `warm_section` renders the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from controller.offline.report import md_table, run_snippet

WARM_CHILD = r"""
import json, sys
params = json.loads(sys.argv[1])
from controller import planner
from controller.algorithm.admission import incremental
from controller.algorithm.model import Instance
from controller.algorithm.workload import reference_instance

planner.run(reference_instance(4, 2, group_capacity=2, seed=1), "lp-rounding", "max-concurrent", 0)
k, n, extra = params["k"], params["jobs"], params["admitted"]
inst = reference_instance(k, n + extra, group_capacity=params["groups"], seed=params["seed"])
topo = inst.topology
served = planner.run(Instance(topo, inst.jobs[:n]), "lp-rounding", "max-concurrent", params["seed"])
for i in range(n, n + extra):
    served = incremental(Instance(topo, inst.jobs[: i + 1]), served, topo, "max-concurrent")
out = {"served": {"lambda": served.lam, "lp_bound": served.lp_bound, "throughput": served.throughput}}
for name, warm in (("cold", None), ("warm", (served, topo))):
    p = planner.run(inst, "lp-rounding", "max-concurrent", params["seed"], warm)
    moved = sum(1 for a, b in zip(served.jobs, p.jobs) if a.structure != b.structure)
    out[name] = {"runtime_s": p.runtime_s, "lambda": p.lam, "lp_bound": p.lp_bound, "throughput": p.throughput,
                 "moved": moved}
print(json.dumps(out))
"""


def run_warm(k: int, jobs: int, groups: int, admitted: int, timeout_s: float, root: Path, seed: int = 0) -> dict:
    """One cold and one warm re-optimisation in a fresh interpreter; {"error": ...} on failure."""
    params = {"k": k, "jobs": jobs, "groups": groups, "admitted": admitted, "seed": seed}
    return run_snippet(WARM_CHILD, params, timeout_s, root)


def warm_section(cases: Sequence[tuple[int, int, int, int, dict]]) -> str:
    """The markdown section: one row per (k, jobs, G, admitted, result) and start."""
    lines = [
        "## 7. Re-optimisation from a warm start",
        "",
        "With `planner.incremental`, a re-optimisation plans the whole job set again after admissions. Here a full "
        "lp-rounding plan of the first jobs of the reference instance (seed 0) is followed by more jobs admitted one "
        "by one; the re-optimisation then runs cold (the baselines' plans seed the LP, as a first plan does) and warm "
        "(`planner.reoptimise_warm_start`, the default: the served plan's LP columns seed it and no baseline is "
        "computed), each in the same fresh subprocess (controller/offline/warm.py). *Moved* counts the running jobs "
        "whose structure the re-optimised plan changes against the served one. The served plan's LP bound is the "
        "first full plan's, kept by admissions that only add jobs.",
        "",
    ]
    rows = []
    for k, jobs, groups, admitted, r in cases:
        case = f"k={k}, {jobs} + {admitted} jobs, G={groups}"
        if "error" in r:
            rows.append([case, "failed", r["error"], "", "", "", ""])
            continue
        sb = r["served"].get("lp_bound")
        rows.append([case, "served (admissions)", "–", f"{r['served']['lambda']:.4g}", "–" if sb is None else f"{sb:.4g}",
                     f"{r['served']['throughput']:.4g}", "–"])
        for name in ("cold", "warm"):
            p = r[name]
            bound = "–" if p["lp_bound"] is None else f"{p['lp_bound']:.4g}"
            rows.append([case, name, f"{p['runtime_s']:.3f}", f"{p['lambda']:.4g}", bound, f"{p['throughput']:.4g}",
                         str(p["moved"])])
    lines.append(md_table(["case", "plan", "run time s", "λ", "LP bound", "throughput bit/s", "moved"], rows))
    speedups = [
        f"k={k}, {jobs} + {admitted} jobs, G={groups}: the warm start took {r['warm']['runtime_s'] / r['cold']['runtime_s']:.2f} of the cold "
        f"run time, λ {r['warm']['lambda'] / r['cold']['lambda']:.3f} of the cold plan's."
        for k, jobs, groups, admitted, r in cases if "error" not in r and r["cold"]["runtime_s"] > 0 and r["cold"]["lambda"] > 0
    ]
    if speedups:
        lines += ["", *speedups]
    return "\n".join(lines)
