"""`python -m controller bench`: the benchmark that writes docs/performance.md.

It is a command, not a timed test: it runs the planner on the reference workloads
(docs/architecture.md, Reference workloads) and writes one markdown page with seven sections (and keeps an eighth):

1. quality: λ / LP bound of lp-rounding over a set of instances (goal: median ≥ 0.97);
2. lp-rounding against the baselines at tight tables (λ, aggregate throughput,
   groups used, and which links bound λ), with full-bisection and oversubscribed cores;
3. speed on this machine (goals: k=16 with 200 jobs ≤ 0.5 s, k=32 with 1000 jobs
   ≤ 5 s and ≤ 2 GiB peak memory), each case in a fresh subprocess;
4. growth of the run time with k and with the number of jobs;
5. where the time goes: the stages of one plan per speed case (`phases`);
6. registering a job against the controller process with `planner.incremental`
   (`registration.measure`: one registration at k=16 with 200 jobs, goals p50 ≤
   50 ms, p99 ≤ 200 ms and no running job moved; 300 concurrent ones at k=8);
7. a re-optimisation after admissions, cold and warm-started (`warm`);
8. many tenants at once (`load`): not run here (a minute of locust), written by
   `python -m controller bench-load --into docs/performance.md` and kept as it is.

The page records the machine and the exact command, and is only ever written by
this command. `--quick` runs the same code on tiny sizes (for the test suite);
`--skip-large` leaves out k=32. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import shlex
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from controller import planner
from controller.algorithm.model import PlanningError
from controller.algorithm.regimes import SHAPES, production_clos
from controller.algorithm.workload import reference_instance
from controller.arguments import EXIT_OK, note, positive_int
from controller.config.instance import InputError
from controller.offline.load import LOAD_TITLE
from controller.offline.phases import phases_section, run_phases
from controller.offline.registration import measure
from controller.offline.report import (
    commit_text,
    fmt_duration,
    lambda_bottleneck,
    load_average,
    loglog_exponent,
    md_table,
    package_versions,
    page_head,
    page_section,
    project_root,
    run_snippet,
    with_section,
    write_atomically,
)
from controller.offline.warm import run_warm, warm_section

DEFAULT_OUT = "docs/performance.md"
BASELINES = ("unicast", "spt", "steiner", "greedy")
OBJECTIVE = "max-concurrent"
QUALITY_GOAL = 0.97
GIB = 1024**3
MIB = 1024**2
LARGE_K = 32  # --skip-large leaves out every case with k >= LARGE_K
PACKAGES = ("numpy", "scipy", "highspy", "networkx")  # versions on the page


# -- sizes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpeedCase:
    k: int  # the fat-tree's k; 0 for a Clos of `regimes.SHAPES` (`fabric`)
    jobs: int
    time_goal_s: float | None  # None: reported, not judged
    memory_goal_bytes: float | None = None
    repeats: int = 1  # fresh processes; the median run time is reported
    fabric: str = "fat-tree"  # or a name of `regimes.SHAPES`
    workers: tuple[int, int] | None = None  # (min, max) workers per job; None: the reference workload's
    phases: bool = True  # also in §5 (fat-trees only)
    ratio_goal: float | None = None  # least λ / LP bound, judged when set

    @property
    def label(self) -> str:
        if self.fabric == "fat-tree":
            return f"k={self.k}, {self.jobs} jobs"
        spread = f" of {self.workers[0]}–{self.workers[1]} workers" if self.workers else ""
        return f"{self.fabric}, {self.jobs} jobs{spread}"

    @property
    def hosts(self) -> int:
        if self.fabric == "fat-tree":
            return hosts_of(self.k)
        return sum(1 for n in production_clos(SHAPES[self.fabric]).nodes if not n.is_switch)


@dataclass(frozen=True)
class Sizes:
    name: str
    default_seeds: int
    quality: tuple[tuple[int, tuple[int, ...]], ...]  # (k, job counts)
    quality_groups: tuple[int, ...]
    compare_k: int
    compare_jobs: int
    compare_groups: tuple[int, ...]
    speed_groups: int  # G on every switch for §3 and §4
    speed: tuple[SpeedCase, ...]
    growth: tuple[tuple[int, int], ...]  # §4, growth with k: (k, jobs)
    growth_jobs_k: int
    growth_jobs: tuple[int, ...]
    child_timeout_s: float
    goals_judged: bool
    # §6: (k, G, preloaded jobs, sequential registrations, concurrent ones)
    registration: tuple[tuple[int, int, int, int, int], ...] = ()
    # §7: (k, running jobs, G, jobs admitted before the re-optimisation)
    warm: tuple[tuple[int, int, int, int], ...] = ()


FULL = Sizes(
    name="full",
    default_seeds=3,
    quality=((8, (25, 50, 100)), (16, (50, 100, 200))),
    quality_groups=(2, 8, 32, 128),
    compare_k=16,
    compare_jobs=200,
    compare_groups=(4, 16, 64),
    speed_groups=16,
    speed=(
        SpeedCase(16, 200, 0.5, None, repeats=5),
        SpeedCase(32, 1000, 5.0, 2 * GIB, repeats=3),
        SpeedCase(48, 5000, 30.0, 8 * GIB, phases=False, ratio_goal=0.99),
        SpeedCase(0, 150, 3.0, None, repeats=3, fabric="clos-850", workers=(2, 160), phases=False),
    ),
    growth=((8, 100), (16, 200), (24, 500), (32, 1000), (48, 5000)),
    growth_jobs_k=16,
    growth_jobs=(50, 100, 200, 400, 800),
    child_timeout_s=1800.0,
    goals_judged=True,
    registration=((16, 16, 200, 20, 0), (8, 16, 0, 0, 300), (48, 16, 5000, 20, 0)),
    warm=((16, 200, 16, 5), (16, 200, 2, 5), (32, 1000, 16, 5)),
)

QUICK = Sizes(
    name="quick",
    default_seeds=1,
    quality=((4, (4, 8)),),
    quality_groups=(2, 8),
    compare_k=4,
    compare_jobs=8,
    compare_groups=(2, 4),
    speed_groups=4,
    speed=(SpeedCase(4, 4, None), SpeedCase(8, 16, None), SpeedCase(0, 4, None, fabric="clos-tiny", workers=(2, 6), phases=False)),
    growth=((4, 4), (8, 16)),
    growth_jobs_k=4,
    growth_jobs=(4, 8, 16),
    child_timeout_s=300.0,
    goals_judged=False,
    registration=((4, 2, 5, 3, 6),),
    warm=((4, 6, 2, 2),),
)


def hosts_of(k: int) -> int:
    return k**3 // 4


def switches_of(k: int) -> int:
    return 5 * k * k // 4


# -- results ----------------------------------------------------------------------------


@dataclass
class QualityRow:
    k: int
    jobs: int
    groups: int
    seed: int
    lam: float
    lp_bound: float | None
    runtime_s: float

    @property
    def ratio(self) -> float | None:
        if self.lp_bound is None:
            return None
        if self.lp_bound <= 0:
            return 1.0 if self.lam <= 0 else math.inf
        return self.lam / self.lp_bound


@dataclass
class CompareRow:
    oversubscribed: bool
    groups: int
    seed: int
    algorithm: str
    lam: float | None = None  # None: the algorithm refused
    lp_bound: float | None = None
    throughput: float = 0.0
    groups_used: int = 0
    full_tables: int = 0
    modes: Counter = field(default_factory=Counter)
    bottleneck: Counter = field(default_factory=Counter)
    runtime_s: float = 0.0
    refusal: str | None = None


@dataclass
class ChildResult:
    runtimes_s: list[float] = field(default_factory=list)
    peak_rss_bytes: float | None = None
    rss_before_plan_bytes: float | None = None
    lam: float | None = None
    lp_bound: float | None = None
    error: str | None = None

    @property
    def runtime_s(self) -> float | None:
        return statistics.median(self.runtimes_s) if self.runtimes_s else None


# -- measuring ----------------------------------------------------------------------------


CHILD = r"""
import json, sys, time
params = json.loads(sys.argv[1])
try:
    import resource
except ImportError:
    resource = None

def peak_rss():
    # Linux: VmHWM, the peak RSS of this process's own address space. ru_maxrss is not
    # used there because Linux carries the parent's RSS over fork and exec into it.
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if resource is None:
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024

from controller import planner
from controller.algorithm.workload import reference_instance
if params["fabric"] == "fat-tree":
    instance = reference_instance(
        params["k"], params["jobs"], group_capacity=params["groups"], seed=params["seed"],
        oversubscribed=params["oversubscribed"],
    )
else:
    from controller.algorithm.regimes import regime_instance
    low, high = params["workers"]
    instance = regime_instance(
        params["fabric"], params["jobs"], seed=params["seed"], budgets="uniform", group_capacity=params["groups"],
        min_workers=low, max_workers=high,
    )
# Warm-up on a tiny instance: lazy imports (scipy's HiGHS, networkx' algorithms) are
# paid once per process, as in a long-running controller, not by the timed plan.
planner.run(reference_instance(4, 2, group_capacity=2, seed=1), params["algorithm"], params["objective"], 0)
before = peak_rss()
plan = planner.run(instance, params["algorithm"], params["objective"], params["seed"])
print(json.dumps({
    "runtime_s": plan.runtime_s, "peak_rss_bytes": peak_rss(), "rss_before_plan_bytes": before,
    "lambda": plan.lam, "lp_bound": plan.lp_bound,
}))
"""


def run_child(
    k: int, jobs: int, groups: int, timeout_s: float, seed: int = 0, fabric: str = "fat-tree",
    workers: tuple[int, int] | None = None,
) -> dict:
    """Plan one reference instance (or, for a `fabric` of `regimes.SHAPES`, that Clos
    with G on every switch and jobs of `workers` (min, max) workers) with lp-rounding
    in a fresh interpreter; its own measurement of run time and peak RSS, as a dict
    (or {"error": ...})."""
    params = {
        "fabric": fabric,
        "workers": workers,
        "k": k,
        "jobs": jobs,
        "groups": groups,
        "seed": seed,
        "oversubscribed": False,
        "algorithm": "lp-rounding",
        "objective": OBJECTIVE,
    }
    return run_snippet(CHILD, params, timeout_s, project_root())


# -- the benchmark --------------------------------------------------------------------------


@dataclass
class Case:
    label: str
    run: Callable[[], None]


@dataclass
class Bench:
    sizes: Sizes
    seeds: int
    skip_large: bool
    quality: list[QualityRow] = field(default_factory=list)
    compare: list[CompareRow] = field(default_factory=list)
    children: dict[tuple[str, int, int, int], ChildResult] = field(default_factory=dict)
    phases: list[tuple[int, int, dict]] = field(default_factory=list)
    registration: list[tuple[tuple[int, int, int, int, int], dict]] = field(default_factory=list)
    warm: list[tuple[int, int, int, int, dict]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def kept(self, k: int) -> bool:
        return not (self.skip_large and k >= LARGE_K)

    # Sections 1 and 2 run in this process; 3 and 4 in fresh subprocesses.

    def cases(self) -> list[Case]:
        out: list[Case] = []
        s = self.sizes
        for k, job_counts in s.quality:
            for jobs in job_counts:
                for groups in s.quality_groups:
                    for seed in range(self.seeds):
                        out.append(Case(f"§1 quality: k={k}, {jobs} jobs, G={groups}, seed {seed}",
                                        self._quality_case(k, jobs, groups, seed)))
        cache: dict[tuple, object] = {}

        def instance(groups: int, over: bool, seed: int):
            key = (groups, over, seed)
            if key not in cache:
                cache.clear()  # one instance at a time: the cases run in order
                cache[key] = reference_instance(
                    s.compare_k, s.compare_jobs, group_capacity=groups, seed=seed, oversubscribed=over
                )
            return cache[key]

        for over in (False, True):
            for groups in s.compare_groups:
                for seed in range(self.seeds):
                    for algorithm in ("lp-rounding", *BASELINES):
                        core = "oversubscribed core" if over else "full bisection"
                        label = f"§2 {algorithm}: k={s.compare_k}, {s.compare_jobs} jobs, G={groups}, {core}, seed {seed}"
                        out.append(Case(label, self._compare_case(instance, over, groups, seed, algorithm)))
        planned: set[tuple[int, int]] = set()
        for case in s.speed:
            if not self.kept(case.k):
                self.skipped.append(f"§3: k={case.k} with {case.jobs} jobs")
                continue
            for r in range(case.repeats):
                out.append(Case(f"§3 speed: {case.label}, G={s.speed_groups} (run {r + 1}/{case.repeats})",
                                self._child_case(case.k, case.jobs, case.fabric, case.workers)))
            if case.fabric == "fat-tree":
                planned.add((case.k, case.jobs))
        for case in s.speed:
            if self.kept(case.k) and case.phases:
                out.append(Case(f"§5 phases: k={case.k}, {case.jobs} jobs, G={s.speed_groups}", self._phases_case(case.k, case.jobs)))
        for reg in s.registration:
            k, groups, preload, repeat, concurrent = reg
            out.append(Case(f"§6 registration: k={k}, G={groups}, {preload} jobs preloaded, {repeat} sequential, "
                            f"{concurrent} concurrent", self._registration_case(reg)))
        for k, jobs, groups, admitted in s.warm:
            if not self.kept(k):
                self.skipped.append(f"§7: k={k} with {jobs} jobs")
                continue
            out.append(Case(f"§7 warm start: k={k}, {jobs} + {admitted} jobs, G={groups}",
                            self._warm_case(k, jobs, groups, admitted)))
        growth = list(s.growth)
        growth += [(s.growth_jobs_k, jobs) for jobs in s.growth_jobs]
        for k, jobs in growth:
            if not self.kept(k):
                self.skipped.append(f"§4: k={k} with {jobs} jobs")
                continue
            if (k, jobs) not in planned:
                planned.add((k, jobs))
                out.append(Case(f"§4 growth: k={k}, {jobs} jobs, G={s.speed_groups}", self._child_case(k, jobs)))
        return out

    def _quality_case(self, k: int, jobs: int, groups: int, seed: int) -> Callable[[], None]:
        def run() -> None:
            instance = reference_instance(k, jobs, group_capacity=groups, seed=seed)
            p = planner.run(instance, "lp-rounding", OBJECTIVE, seed)
            self.quality.append(QualityRow(k, jobs, groups, seed, p.lam, p.lp_bound, p.runtime_s))

        return run

    def _compare_case(self, instance, over: bool, groups: int, seed: int, algorithm: str) -> Callable[[], None]:
        def run() -> None:
            inst = instance(groups, over, seed)
            row = CompareRow(over, groups, seed, algorithm)
            try:
                p = planner.run(inst, algorithm, OBJECTIVE, seed)
            except PlanningError as e:
                row.refusal = str(e)
            else:
                row.lam, row.lp_bound, row.throughput, row.runtime_s = p.lam, p.lp_bound, p.throughput, p.runtime_s
                row.groups_used = sum(sw.groups_used for sw in p.switches)
                row.full_tables = sum(
                    1 for sw in p.switches if sw.group_capacity is not None and sw.groups_used >= sw.group_capacity
                )
                row.modes = Counter(jp.structure.mode for jp in p.jobs)
                row.bottleneck = lambda_bottleneck(inst, p)
            self.compare.append(row)

        return run

    def _child_case(
        self, k: int, jobs: int, fabric: str = "fat-tree", workers: tuple[int, int] | None = None
    ) -> Callable[[], None]:
        def run() -> None:
            key = (fabric, k, jobs, self.sizes.speed_groups)
            result = self.children.setdefault(key, ChildResult())
            if result.error is not None:
                return  # a failed or timed-out case is not retried
            got = run_child(k, jobs, self.sizes.speed_groups, self.sizes.child_timeout_s, fabric=fabric, workers=workers)
            if "error" in got:
                result.error = got["error"]
                return
            result.runtimes_s.append(got["runtime_s"])
            for name in ("peak_rss_bytes", "rss_before_plan_bytes"):
                if got.get(name) is not None:
                    setattr(result, name, max(getattr(result, name) or 0, got[name]))
            result.lam, result.lp_bound = got["lambda"], got["lp_bound"]

        return run

    def _registration_case(self, reg: tuple[int, int, int, int, int]) -> Callable[[], None]:
        def run() -> None:
            k, groups, preload, repeat, concurrent = reg
            bare = k >= BARE_REGISTRATION_K
            with tempfile.TemporaryDirectory() as tmp:
                got = measure(k, groups, preload, repeat, concurrent, 32, True, Path(tmp), southbound=not bare,
                              compare=not bare)
            self.registration.append((reg, got))

        return run

    def _phases_case(self, k: int, jobs: int) -> Callable[[], None]:
        def run() -> None:
            got = run_phases(k, jobs, self.sizes.speed_groups, self.sizes.child_timeout_s, project_root())
            self.phases.append((k, jobs, got))

        return run

    def _warm_case(self, k: int, jobs: int, groups: int, admitted: int) -> Callable[[], None]:
        def run() -> None:
            got = run_warm(k, jobs, groups, admitted, self.sizes.child_timeout_s, project_root())
            self.warm.append((k, jobs, groups, admitted, got))

        return run

    def child(self, k: int, jobs: int, fabric: str = "fat-tree") -> ChildResult | None:
        return self.children.get((fabric, k, jobs, self.sizes.speed_groups))


def run_cases(cases: Sequence[Case]) -> None:
    """Run the cases in order, with a rich progress bar on stderr (plain lines when
    stderr is not a terminal)."""
    from rich.console import Console  # rich only once the bench runs, not on every command's start-up path

    console = Console(stderr=True)
    if console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            task = progress.add_task("bench", total=len(cases))
            for case in cases:
                progress.update(task, description=case.label)
                case.run()
                progress.advance(task)
            progress.update(task, description="bench: done")
        return
    for i, case in enumerate(cases, 1):
        start = time.perf_counter()
        case.run()
        console.print(f"[{i}/{len(cases)}] {case.label} ({time.perf_counter() - start:.2f} s)", highlight=False, soft_wrap=True)


# -- rendering --------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "—"
    if math.isinf(value):
        return "∞"
    return f"{value:.{digits}f}"


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.3f}" if seconds < 10 else f"{seconds:.1f}"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation between order statistics."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def verdict(met: bool) -> str:
    return "**Goal met.**" if met else "**Goal not met.**"


def command_line(args: argparse.Namespace) -> str:
    parts = ["python", "-m", "controller", "bench"]
    if args.quick:
        parts.append("--quick")
    parts += ["--out", args.out]
    if args.seeds is not None:
        parts += ["--seeds", str(args.seeds)]
    if args.skip_large:
        parts.append("--skip-large")
    return shlex.join(parts)


def machine_section(args: argparse.Namespace, bench: Bench, started: datetime.datetime, elapsed_s: float, load: str) -> str:
    skipped = "; ".join(bench.skipped) if bench.skipped else "none"
    sizes = "quick (tiny sizes for the test suite; the goals are not judged)" if bench.sizes.name == "quick" else "full"
    rows = [
        ("date", started.strftime("%Y-%m-%d %H:%M UTC")),
        ("CPUs (`os.cpu_count()`)", str(os.cpu_count())),
        ("platform", platform.platform()),
        ("machine / processor", f"{platform.machine()} / {platform.processor() or '—'}"),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("packages", package_versions(PACKAGES)),
        ("load average at start (1, 5, 15 min)", load),
        ("commit", commit_text()),
        ("sizes", sizes),
        ("seeds per setting (§1, §2)", str(bench.seeds)),
        ("skipped", f"{skipped}" + (" (`--skip-large`)" if bench.skipped else "")),
        ("bench run time", fmt_duration(elapsed_s)),
    ]
    return md_table(("", ""), [(a, b) for a, b in rows], right=(False, False))


def quality_section(bench: Bench) -> str:
    s = bench.sizes
    rows = [r for r in bench.quality if r.ratio is not None]
    missing = len(bench.quality) - len(rows)
    ks = ", ".join(f"k={k} with {', '.join(map(str, jobs))} jobs" for k, jobs in s.quality)
    parts = [
        "## 1. Quality on the reference workloads",
        "",
        f"λ of `lp-rounding` divided by the LP bound it reports (the LP relaxation's optimum, an upper "
        f"bound on any plan's λ), on fat-trees {ks}; G ∈ {{{', '.join(map(str, s.quality_groups))}}} "
        f"replication groups on every switch, F unlimited; {seed_range(bench.seeds)}. "
        f"Goal: median ≥ {QUALITY_GOAL}.",
        "",
    ]
    if not rows:
        parts.append("No instance had an LP bound; nothing to report.")
        return "\n".join(parts)

    def summary(label: str, ratios: list[float]) -> tuple[str, ...]:
        return (
            label,
            str(len(ratios)),
            fmt(statistics.median(ratios)),
            fmt(min(ratios)),
            fmt(percentile(ratios, 10)),
            f"{sum(r >= QUALITY_GOAL for r in ratios) / len(ratios):.0%}",
        )

    table = [summary("all", [r.ratio for r in rows])]
    for k, _ in s.quality:
        table.append(summary(f"k={k}", [r.ratio for r in rows if r.k == k]))
    parts.append(md_table(("instances", "count", "median λ/LP", "min", "10th percentile", f"≥ {QUALITY_GOAL}"), table, right=(False, True, True, True, True, True)))
    parts.append("")
    med = statistics.median(r.ratio for r in rows)
    worst = min(rows, key=lambda r: r.ratio)
    if s.name == "quick":
        parts.append(f"Median λ/LP = {med:.3f} (quick sizes: the goal is not judged).")
    else:
        parts.append(f"{verdict(med >= QUALITY_GOAL)} The median λ/LP is {med:.3f} (goal ≥ {QUALITY_GOAL}).")
    parts.append(
        f"The worst instance is k={worst.k}, {worst.jobs} jobs, G={worst.groups}, seed {worst.seed}: "
        f"λ/LP = {worst.ratio:.3f}."
    )
    if missing:
        parts.append(f"{missing} plan(s) reported no LP bound and are left out.")
    parts += ["", "By setting (over the seeds):", ""]
    detail = []
    for k, job_counts in s.quality:
        for jobs in job_counts:
            for groups in s.quality_groups:
                sel = [r for r in rows if (r.k, r.jobs, r.groups) == (k, jobs, groups)]
                if not sel:
                    continue
                detail.append(
                    (
                        str(k),
                        str(jobs),
                        str(groups),
                        fmt(statistics.median(r.lam for r in sel), 4),
                        fmt(statistics.median(r.ratio for r in sel)),
                        fmt(min(r.ratio for r in sel)),
                        fmt_time(statistics.median(r.runtime_s for r in sel)),
                    )
                )
    parts.append(md_table(("k", "jobs", "G", "median λ", "median λ/LP", "min λ/LP", "median run time s"), detail))
    return "\n".join(parts)


def compare_values(ours: float, theirs: float, tol: float = 1e-6) -> str:
    """'higher', 'equal' or 'lower': `ours` against `theirs`, equal within a relative `tol`."""
    if ours > theirs * (1 + tol) and ours - theirs > 1e-12:
        return "higher"
    if theirs > ours * (1 + tol) and theirs - ours > 1e-12:
        return "lower"
    return "equal"


def seed_range(seeds: int) -> str:
    return "seed 0" if seeds == 1 else f"seeds 0–{seeds - 1}"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def compare_section(bench: Bench) -> str:
    s = bench.sizes
    parts = [
        "## 2. lp-rounding against the baselines at tight tables",
        "",
        f"Fat-tree k={s.compare_k}, {s.compare_jobs} jobs, G ∈ {{{', '.join(map(str, s.compare_groups))}}} on every "
        f"switch, F unlimited; {'means over ' if bench.seeds > 1 else ''}{seed_range(bench.seeds)}. λ/LP divides by lp-rounding's LP bound on the "
        "same instance; 'vs lp-rounding' is the aggregate throughput Σ r_j relative to lp-rounding's. "
        "'groups' is the number of replication groups used over all switches, 'full' the number of switches whose "
        "group table is full, 'modes' the jobs delivered by multicast / hybrid / unicast.",
        "",
        "On the chosen structures λ = min over links of capacity / Σ demand·copies: switch tables constrain the "
        "structures, not the rates, so λ is always bound by links, and tables bound it indirectly by forcing "
        "unicast copies. 'λ bound by' names the tiers of the links that attain that minimum (host uplink = a "
        "PS's link into its edge switch).",
    ]
    for over in (False, True):
        rows = [r for r in bench.compare if r.oversubscribed == over]
        if not rows:
            continue
        title = "Oversubscribed core (core links at half capacity)" if over else "Full bisection"
        parts += ["", f"### {title}", ""]
        table = []
        lam_cmp: dict[str, Counter] = {b: Counter() for b in BASELINES}
        tput_cmp: dict[str, Counter] = {b: Counter() for b in BASELINES}
        ties = host_bound_ties = 0
        lp_bottlenecks: Counter = Counter()
        for groups in s.compare_groups:
            by_alg = {}
            for algorithm in ("lp-rounding", *BASELINES):
                sel = [r for r in rows if r.groups == groups and r.algorithm == algorithm]
                by_alg[algorithm] = sel
            lp_rows = {r.seed: r for r in by_alg["lp-rounding"] if r.lam is not None}
            for algorithm, sel in by_alg.items():
                ok = [r for r in sel if r.lam is not None]
                if not ok:
                    reason = sel[0].refusal if sel else "not run"
                    table.append((str(groups), algorithm, "refused", "—", "—", "—", "—", "—", "—", reason or "—", "—"))
                    continue
                ratios = [r.lam / lp_rows[r.seed].lp_bound for r in ok if r.seed in lp_rows and lp_rows[r.seed].lp_bound]
                rel = [r.throughput / lp_rows[r.seed].throughput for r in ok if r.seed in lp_rows and lp_rows[r.seed].throughput > 0]
                modes = Counter()
                bottleneck = Counter()
                for r in ok:
                    modes.update(r.modes)
                    bottleneck.update(r.bottleneck)
                if algorithm == "lp-rounding":
                    lp_bottlenecks.update(bottleneck)
                else:
                    for r in ok:
                        ref = lp_rows.get(r.seed)
                        if ref is None:
                            continue
                        outcome = compare_values(ref.lam, r.lam)
                        lam_cmp[algorithm][outcome] += 1
                        tput_cmp[algorithm][compare_values(ref.throughput, r.throughput)] += 1
                        if outcome == "equal":
                            ties += 1
                            host_bound_ties += bool(ref.bottleneck) and all(c.startswith("host") for c in ref.bottleneck)
                n = len(ok)
                table.append(
                    (
                        str(groups),
                        algorithm,
                        fmt(_mean([r.lam for r in ok]), 4),
                        fmt(_mean(ratios)) if ratios else "—",
                        f"{_mean([r.throughput for r in ok]) / 1e9:.1f}",
                        f"{_mean(rel):.1%}" if rel else "—",
                        f"{_mean([r.groups_used for r in ok]):.0f}",
                        f"{_mean([r.full_tables for r in ok]):.0f}",
                        "/".join(f"{modes[m] / n:.0f}" for m in ("multicast", "hybrid", "unicast")),
                        ", ".join(name for name, _ in bottleneck.most_common(3)) or "—",
                        fmt_time(_mean([r.runtime_s for r in ok])),
                    )
                )
        parts.append(
            md_table(
                ("G", "algorithm", "λ", "λ/LP", "Σ r Gbit/s", "vs lp-rounding", "groups", "full", "modes m/h/u", "λ bound by", "run time s"),
                table,
                right=(True, False, True, True, True, True, True, True, True, False, True),
            )
        )
        parts.append("")
        head_to_head = [
            (
                b,
                "/".join(str(lam_cmp[b][o]) for o in ("higher", "equal", "lower")),
                "/".join(str(tput_cmp[b][o]) for o in ("higher", "equal", "lower")),
            )
            for b in BASELINES
            if sum(lam_cmp[b].values())
        ]
        if head_to_head:
            parts += [
                "lp-rounding against each baseline, instance by instance (lp-rounding higher / equal / lower; "
                "equal within a relative 10⁻⁶):",
                "",
                md_table(("baseline", "λ", "aggregate throughput"), head_to_head, right=(False, True, True)),
                "",
            ]
            bound = ", ".join(f"{name} ({count} links)" for name, count in lp_bottlenecks.most_common(3))
            parts.append(
                f"lp-rounding's λ is bound by {bound or '—'} (the links attaining the minimum, summed over the "
                "settings and seeds)."
            )
            if ties:
                parts.append(
                    f"Of the {ties} ties in λ, {host_bound_ties} have lp-rounding's λ bound by host links only (a "
                    "PS's uplink or a busy worker's downlink), which no choice of tree or replication point can "
                    "relieve; there the aggregate throughput shows what each algorithm makes of the remaining capacity."
                )
    return "\n".join(parts)


def _rss(result: ChildResult | None) -> str:
    if result is None or result.peak_rss_bytes is None:
        return "—"
    return f"{result.peak_rss_bytes / MIB:.0f}"


def speed_section(bench: Bench) -> str:
    s = bench.sizes
    parts = [
        "## 3. Speed on this machine",
        "",
        f"Run time of `lp-rounding` (`runtime_s`, the wall-clock time of `controller.planner.run`; generating the "
        f"instance is not included) with G={s.speed_groups} on every switch, seed 0. Each run is a fresh "
        "`python -c` subprocess that first plans a tiny instance (so that lazy imports, paid once by a "
        "long-running controller, are not timed), then reports its own time and peak RSS: the whole process, interpreter, "
        "imports and instance included. On Linux the peak RSS is `VmHWM` from `/proc/self/status`, because "
        "`getrusage(RUSAGE_SELF).ru_maxrss` there also counts the parent's RSS carried over fork and exec (the "
        "benchmark's own process, which has run §1 and §2); elsewhere it is `ru_maxrss`. Where a case ran "
        "more than once, the median time is shown. The Clos cases are the production-shaped Clos of "
        "`controller/algorithm/regimes.py` (`SHAPES`: clos-850 is 3 pods of 163 racks of 2–8 hosts in all, each "
        "top-of-rack switch linked to its pod's 4 aggregation switches, those to 4 cores each) with G on every "
        "switch and jobs of the given numbers of workers (a PS and workers on random hosts, demands from the "
        "reference workload's).",
        "",
    ]
    table = []
    verdicts = []
    for case in s.speed:
        label = case.label
        if not bench.kept(case.k):
            table.append((label, str(case.hosts), "skipped", "—", "—", "—", "—", "—"))
            verdicts.append(f"{label} was skipped (`--skip-large`): its goals are not judged.")
            continue
        r = bench.child(case.k, case.jobs, case.fabric)
        runs = len(r.runtimes_s) if r else 0
        time_goal = f"≤ {case.time_goal_s:g} s" if case.time_goal_s is not None else "—"
        mem_goal = f"≤ {case.memory_goal_bytes / GIB:g} GiB" if case.memory_goal_bytes is not None else "—"
        if r is None or r.runtime_s is None:
            error = r.error if r else "not run"
            table.append((label, str(case.hosts), f"failed: {error}", "0", time_goal, "—", mem_goal, "—"))
            if case.time_goal_s is not None and s.goals_judged:
                verdicts.append(f"{verdict(False)} {label} did not finish: {error}.")
            continue
        time_met = case.time_goal_s is None or r.runtime_s <= case.time_goal_s
        mem_met = case.memory_goal_bytes is None or (r.peak_rss_bytes is not None and r.peak_rss_bytes <= case.memory_goal_bytes)
        spread = f" (runs {min(r.runtimes_s):.3f}–{max(r.runtimes_s):.3f})" if runs > 1 else ""
        table.append(
            (
                label,
                str(case.hosts),
                fmt_time(r.runtime_s) + spread,
                str(runs),
                time_goal + (f" {'met' if time_met else 'not met'}" if s.goals_judged and case.time_goal_s else ""),
                _rss(r),
                mem_goal + (f" {'met' if mem_met else 'not met'}" if s.goals_judged and case.memory_goal_bytes else ""),
                fmt(r.lam / r.lp_bound if r.lp_bound else None),
            )
        )
        if not s.goals_judged:
            continue
        if case.time_goal_s is not None:
            verdicts.append(
                f"{verdict(time_met)} {label} planned in {r.runtime_s:.2f} s "
                f"(goal ≤ {case.time_goal_s:g} s)."
            )
        if case.ratio_goal is not None:
            ratio = r.lam / r.lp_bound if r.lam is not None and r.lp_bound else None
            verdicts.append(
                f"{verdict(ratio is not None and ratio >= case.ratio_goal)} Its λ was {fmt(ratio)} of its LP bound "
                f"(goal ≥ {case.ratio_goal:g})."
            )
        if case.memory_goal_bytes is not None:
            peak = "unknown" if r.peak_rss_bytes is None else f"{r.peak_rss_bytes / GIB:.2f} GiB"
            verdicts.append(
                f"{verdict(mem_met)} Its peak RSS was {peak} (goal ≤ {case.memory_goal_bytes / GIB:g} GiB"
                + (f"; {r.rss_before_plan_bytes / MIB:.0f} MiB before planning)." if r.rss_before_plan_bytes else ").")
            )
    parts.append(md_table(("case", "hosts", "run time s", "runs", "time goal", "peak RSS MiB", "memory goal", "λ/LP"), table, right=(False, True, True, True, False, True, False, True)))
    parts.append("")
    if not s.goals_judged:
        verdicts.insert(0, "Quick sizes: these cases stand in for the goal sizes, and the goals are not judged.")
    if os.cpu_count() and os.cpu_count() <= 2:
        verdicts.append(
            f"This machine has {os.cpu_count()} CPU(s); other work running at the same time shows up in these times."
        )
    parts.append("\n".join(verdicts))
    return "\n".join(parts)


def growth_section(bench: Bench) -> str:
    s = bench.sizes
    parts = [
        "## 4. Growth",
        "",
        f"Run time of `lp-rounding` as the instance grows, G={s.speed_groups}, seed 0, each in a fresh subprocess "
        "as in §3 (cases that §3 ran are reused). The exponent is the slope of a least-squares fit of "
        "log(run time) against log(size).",
        "",
        "### Against k",
        "",
    ]
    sizes, jobs_seen, times = [], [], []
    table = []
    for k, jobs in s.growth:
        if not bench.kept(k):
            table.append((str(k), str(hosts_of(k)), str(switches_of(k)), str(jobs), "skipped", "—", "—"))
            continue
        r = bench.child(k, jobs)
        t = r.runtime_s if r else None
        ratio = fmt(r.lam / r.lp_bound) if r and r.lam is not None and r.lp_bound else "—"
        shown = fmt_time(t) if t is not None else f"failed: {r.error if r else 'not run'}"
        table.append((str(k), str(hosts_of(k)), str(switches_of(k)), str(jobs), shown, _rss(r), ratio))
        if t is not None:
            sizes.append(hosts_of(k))
            jobs_seen.append(jobs)
            times.append(t)
    parts.append(md_table(("k", "hosts", "switches", "jobs", "run time s", "peak RSS MiB", "λ/LP"), table))
    parts.append("")
    by_hosts = loglog_exponent(sizes, times)
    by_jobs = loglog_exponent(jobs_seen, times)
    if by_hosts is not None and by_jobs is not None:
        parts.append(
            f"Over these cases run time grows like (hosts)^{by_hosts:.2f} and like (jobs)^{by_jobs:.2f} "
            "(least-squares slopes of log run time against log size; hosts and jobs grow together here)."
        )
    else:
        parts.append("Too few points for a fit.")
    parts += ["", f"### Against jobs (k={s.growth_jobs_k})", ""]
    table = []
    js, times = [], []
    for jobs in s.growth_jobs:
        if not bench.kept(s.growth_jobs_k):
            table.append((str(jobs), "skipped", "—"))
            continue
        r = bench.child(s.growth_jobs_k, jobs)
        t = r.runtime_s if r else None
        table.append((str(jobs), fmt_time(t) if t is not None else f"failed: {r.error if r else 'not run'}", _rss(r)))
        if t is not None:
            js.append(jobs)
            times.append(t)
    parts.append(md_table(("jobs", "run time s", "peak RSS MiB"), table))
    parts.append("")
    slope = loglog_exponent(js, times)
    parts.append(f"Run time grows like jobs^{slope:.2f}." if slope is not None else "Too few points for a fit.")
    return "\n".join(parts)


# §6 from this arity on runs the controller with --no-southbound and no full plan to compare
# with: the OpenFlow backend refuses a k=48 fat-tree (docs/controller.md, "The controller at k=48")
BARE_REGISTRATION_K = 48


def registration_section(bench: Bench) -> str:
    """§6: job registration against the controller process (`registration.measure`)."""
    lines = [
        "## 6. Registering a job against the controller process",
        "",
        "`python -m controller run` on a generated fat-tree with no switch connected (plans and desired states "
        "are computed, nothing is sent), `planner.incremental: true`, the jobs preloaded in its store; over REST: "
        "each sequential `POST /jobs` answered once a plan includes the job (then deleted), the running jobs each "
        "one moved (`/healthz` `churn_jobs`), concurrent registrations from 32 clients, and the λ served against "
        "a full lp-rounding plan of the same jobs (controller/offline/registration.py; "
        "`python -m controller bench-registration --both` compares with full plans per registration). "
        "Goals at k=16 with 200 jobs and at k=48 with 5,000 jobs: p50 ≤ 50 ms, p99 ≤ 200 ms, no running job moved. "
        f"From k={BARE_REGISTRATION_K} on (`bench-registration --k48`) the controller runs with `--no-southbound`: "
        "the core and the API, no backend (the OpenFlow backend refuses such a fabric: docs/controller.md, "
        "\"The controller at k=48\"), and no full plan is made for the λ comparison.",
        "",
    ]
    rows = []
    verdicts = []
    for (k, groups, preload, repeat, concurrent), m in bench.registration:
        seq = "–" if m["seq_p50"] is None else f"{m['seq_p50'] * 1000:.0f} / {m['seq_p99'] * 1000:.0f}"
        conc = "–" if m["conc_p50"] is None else f"{m['conc_p50'] * 1000:.0f} / {m['conc_p99'] * 1000:.0f}"
        rows.append([f"k={k}, G={groups}", str(preload), str(repeat), seq, f"{m['churn_mean']:.1f} / {m['churn_max']}",
                     str(concurrent), conc, f"{m['planned']}/{m['concurrent']}",
                     f"{m['lam_served']:.4g} / " + ("–" if m["lam_full"] is None else f"{m['lam_full']:.4g}")])
        if bench.sizes.goals_judged and k in (16, 48) and m["seq_p50"] is not None:
            met = m["seq_p50"] <= 0.05 and m["seq_p99"] <= 0.2 and m["churn_max"] == 0
            verdicts.append(f"k={k}: p50 {m['seq_p50'] * 1000:.0f} ms, p99 {m['seq_p99'] * 1000:.0f} ms, "
                            f"at most {m['churn_max']} running jobs moved. {verdict(met)}")
    lines.append(md_table(["fabric", "preloaded", "sequential", "one registration p50 / p99 ms",
                           "jobs moved (mean / max)", "concurrent", "concurrent p50 / p99 ms", "planned",
                           "λ served / full plan"], rows))
    if verdicts:
        lines += ["", *verdicts]
    return "\n".join(lines)


def render(args: argparse.Namespace, bench: Bench, started: datetime.datetime, elapsed_s: float, load: str) -> str:
    header = [
        *page_head("Planner performance", "`python -m controller bench` (controller/offline/bench.py)", command_line(args)),
        machine_section(args, bench, started, elapsed_s, load),
    ]
    forked = (
        "In §3 and §4 the planner also uses a second process when the load average leaves a CPU idle "
        "(controller/algorithm/parallel.py): on large instances (Σ workers ≥ 8000) the candidate plans' rate "
        "allocations run in a forked child during the local search (and for max-sum plans steiner and the first "
        "priced columns run in a child while spt and greedy run in the planner's process); the plan is the same. "
        "The greedy stage includes building every job's pricing index (Clos), which the later stages reuse. A cold max-concurrent plan computes the spt and steiner baselines only when its plan from "
        "the unicast and greedy columns is below the LP bound (no plan can beat one that meets it; a second "
        "round then adds them to the pool), so their stages are absent where the bound is met."
    )
    sections = [
        quality_section(bench),
        compare_section(bench),
        speed_section(bench),
        growth_section(bench),
        phases_section(bench.phases, bench.sizes.speed_groups, forked),
        registration_section(bench),
        warm_section(bench.warm),
    ]
    return "\n".join(header) + "\n\n" + "\n\n".join(sections) + "\n"


# -- the command ----------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists() and out.is_dir():
        raise InputError(f"--out {args.out}: is a directory")
    if not out.parent.is_dir():
        raise InputError(f"--out {args.out}: directory {str(out.parent)!r} does not exist")
    if not os.access(out.parent, os.W_OK):
        raise InputError(f"--out {args.out}: directory {str(out.parent)!r} is not writable")
    sizes = QUICK if args.quick else FULL
    seeds = args.seeds if args.seeds is not None else sizes.default_seeds
    bench = Bench(sizes, seeds, args.skip_large)
    load = load_average()
    started = datetime.datetime.now(datetime.timezone.utc)
    start = time.perf_counter()
    run_cases(bench.cases())
    elapsed = time.perf_counter() - start
    page = render(args, bench, started, elapsed, load)
    # §8 is written by `bench-load --into` (controller/offline/load.py): kept as it is
    kept = page_section(out.read_text(encoding="utf-8"), LOAD_TITLE) if out.exists() else None
    write_atomically(out, with_section(page, LOAD_TITLE, kept) if kept is not None else page)
    note(f"wrote {args.out} in {fmt_duration(elapsed)}")
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmark the planner and write docs/performance.md")
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds, for the test suite); goals not judged")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="FILE", help=f"markdown file to write (default: {DEFAULT_OUT})")
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"seeds per setting in §1 and §2 (default: {FULL.default_seeds}, or {QUICK.default_seeds} with --quick)",
    )
    p.add_argument("--skip-large", action="store_true", help=f"leave out k={LARGE_K} (the doc says what was skipped)")
    p.set_defaults(run=cmd_bench)
