"""`python -m controller bench-admission`: how good the served plan stays between re-optimisations.

With `planner.incremental` a registration is admitted into the served plan
(`algorithm.admission`) and the full planner runs only later. This command
measures, on the reference workloads (docs/architecture.md, "Reference
workloads"), the λ of the plan served between two re-optimisations against the
λ of a full `lp-rounding` plan of the same jobs:

- `tail`: a full plan of the first 90 % of the jobs, then the last 10 %
  admitted one by one (a burst of registrations after a re-optimisation);
- `guarded`: the `tail` sequence as the controller serves it: an admission
  whose λ is below `core.planning.ADMISSION_GUARD` (0.9) of the last full plan's is
  followed by a re-optimisation (a full plan, at most `reoptimise_max_churn` = 32
  jobs moved, adopted if it gains 1 %), as the controller runs it at the next
  pause in registrations; and the same with no churn limit;
- `all`: every job admitted one by one from an empty fabric (no re-optimisation
  at all: the worst case).

It is a command, not a timed test: pure planning in this process, no
controller and no switches. A progress bar goes to stderr; the table (markdown)
to stdout.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

from controller import planner
from controller.algorithm.admission import incremental, within_churn
from controller.algorithm.model import Instance
from controller.algorithm.workload import reference_instance
from controller.arguments import EXIT_OK

TAIL_SHARE = 0.1
MAX_CHURN = 32  # a churn budget an operator might set (planner.reoptimise_max_churn alone; docs/planning-time.md measures the default share)


@dataclass(frozen=True)
class QualityRow:
    k: int
    jobs: int
    groups: int
    seed: int
    full: float  # λ of the full plan of every job
    tail: float  # λ served after the last 10 % were admitted
    guarded: float  # the same, with the controller's re-optimisation after a poor admission (≤ 32 jobs moved)
    unlimited: float  # the same, with no churn limit on the re-optimisation
    all: float  # λ served after every job was admitted


def measure_one(k: int, jobs: int, groups: int, seed: int) -> QualityRow:
    """One reference instance: the full plan and the two admission sequences."""
    inst = reference_instance(k, jobs, group_capacity=groups, seed=seed)
    topo, all_jobs = inst.topology, inst.jobs
    full = planner.run(inst, "lp-rounding", seed=seed)
    head = len(all_jobs) - max(1, round(TAIL_SHARE * len(all_jobs)))
    served = planner.run(Instance(topo, all_jobs[:head]), "lp-rounding", seed=seed)
    for n in range(head + 1, len(all_jobs) + 1):
        served = incremental(Instance(topo, all_jobs[:n]), served, topo, "max-concurrent")
    tail = served.lam
    guarded = _guarded(topo, all_jobs, head, seed, MAX_CHURN)
    unlimited = _guarded(topo, all_jobs, head, seed, 0)
    served = planner.run(Instance(topo, ()), "lp-rounding", seed=seed)
    for n in range(1, len(all_jobs) + 1):
        served = incremental(Instance(topo, all_jobs[:n]), served, topo, "max-concurrent")
    return QualityRow(k, jobs, groups, seed, full.lam, tail, guarded, unlimited, served.lam)


def _guarded(topo, all_jobs, head: int, seed: int, max_churn: int) -> float:
    """λ served after the tail sequence when, as the controller does, an admission
    below ADMISSION_GUARD × the last full plan's λ is followed by a re-optimisation
    (at most `max_churn` jobs moved, 0: no limit; adopted if it gains 1 %)."""
    # the controller's own threshold; core.planning (~90 ms of imports: the config,
    # the store, the core) is imported only when this command runs
    from controller.core.planning import ADMISSION_GUARD

    served = planner.run(Instance(topo, all_jobs[:head]), "lp-rounding", seed=seed)
    full_lam = served.lam
    for n in range(head + 1, len(all_jobs) + 1):
        inst_n = Instance(topo, all_jobs[:n])
        admitted = incremental(inst_n, served, topo, "max-concurrent")
        if admitted.lam < ADMISSION_GUARD * full_lam:
            full = planner.run(inst_n, "lp-rounding", seed=seed)
            full_lam = full.lam
            best = within_churn(inst_n, admitted, full, "max-concurrent", max_churn)
            if best.lam > admitted.lam * 1.01 or best.throughput > admitted.throughput * 1.01:
                admitted = best
        served = admitted
    return served.lam


def sweep(quick: bool) -> list[tuple[int, int, int, int]]:
    """(k, jobs, G, seed) of the measured instances."""
    if quick:
        return [(4, 6, g, s) for g in (1, 4) for s in (0, 1)]
    sizes = [(8, 25), (8, 50), (8, 100), (16, 100), (16, 200)]
    return [(k, n, g, s) for k, n in sizes for g in (2, 8, 32) for s in (0, 1, 2)]


def run_sweep(cases: list[tuple[int, int, int, int]]) -> list[QualityRow]:
    # rich only once the sweep runs, not on every command's start-up path
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    rows = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("admission quality", total=len(cases))
        for k, n, g, s in cases:
            progress.update(task, description=f"k={k}, {n} jobs, G={g}, seed {s}")
            rows.append(measure_one(k, n, g, s))
            progress.advance(task)
    return rows


def _ratio(served: float, full: float) -> float:
    return served / full if full > 0 else 1.0


def render(rows: list[QualityRow]) -> str:
    """The markdown table: per setting over the seeds, and all instances."""
    groups: dict[tuple[int, int, int], list[QualityRow]] = {}
    for r in rows:
        groups.setdefault((r.k, r.jobs, r.groups), []).append(r)
    lines = ["| instances | count | tail: median / min λ served ÷ full | ≥ 0.9 | guarded (≤ 32 moved): median / min "
             "| ≥ 0.9 | guarded (no churn limit) | ≥ 0.9 | all admitted: median / min | ≥ 0.9 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def line(label: str, rs: list[QualityRow]) -> str:
        cells = []
        for xs in ([_ratio(r.tail, r.full) for r in rs], [_ratio(r.guarded, r.full) for r in rs],
                   [_ratio(r.unlimited, r.full) for r in rs], [_ratio(r.all, r.full) for r in rs]):
            ok = sum(1 for x in xs if x >= 0.9 - 1e-9)
            cells.append(f"{statistics.median(xs):.3f} / {min(xs):.3f} | {ok}/{len(rs)}")
        return f"| {label} | {len(rs)} | " + " | ".join(cells) + " |"

    lines.append(line("all", rows))
    for (k, n, g), rs in sorted(groups.items()):
        lines.append(line(f"k={k}, {n} jobs, G={g}", rs))
    return "\n".join(lines)


def cmd_admission(args: argparse.Namespace) -> int:
    rows = run_sweep(sweep(args.quick))
    print(f"λ of the plan served between re-optimisations ÷ λ of a full lp-rounding plan of the same jobs "
          f"(`python -m controller bench-admission{' --quick' if args.quick else ''}`); tail: the last "
          f"{TAIL_SHARE:.0%} of the jobs admitted after a full plan of the rest; guarded: the same with the "
          "controller's re-optimisation after an admission whose λ is below 0.9 of the last full plan's (moving at "
          "most 32 jobs, or any number); all admitted: every job admitted from an empty fabric\n")
    print(render(rows))
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("bench-admission", help="λ served between re-optimisations against a full plan (reference workloads)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds, for the test suite)")
    p.set_defaults(run=cmd_admission)
