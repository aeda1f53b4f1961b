"""`python -m controller evaluate`: the paper-style simulation, its figures and its page.

A *suite* is a list of sweeps over the reference workloads (docs/architecture.md, Reference workloads). A sweep
is a list of points (k, jobs, G, workers per job, core variant); every point is
planned for every seed, and a *case* (one point, one seed) builds its instance
once and runs every algorithm of the sweep on it. Each case gives one CSV row per
algorithm with λ, aggregate throughput, λ / LP bound, total link load, downstream
traffic, tables used and run time (columns: `COLUMNS`).

The sweep `regimes` (figure 8, `evaluate_regimes`) plans instead the regimes where
planning matters (`controller.algorithm.regimes`: fat-trees at several core
oversubscriptions and a production-shaped Clos, mixed budgets, core switches
without groups); its points name their fabric, core ratio and budgets (`Point`,
the CSV's last columns `REGIME_KEY`), and it has its own number of seeds. A CSV
written before those columns is upgraded in place (`upgrade_csv`).

- Cases run in a process pool (`--workers`, default `os.cpu_count()`); the
  planner itself stays single-process. Sweeps marked *timed* (run time and memory)
  run one case at a time, each in a freshly forked process, so that their run time
  is not shared with another case and their peak RSS is their own.
- Rows are appended to `OUT/evaluation-SUITE.csv` as cases finish, and flushed: an
  interrupted sweep loses at most the running cases, and a rerun skips every case
  whose rows are already in the CSV (`KEY` names a row).
- Then the figures are drawn from the whole CSV (`evaluate_figures.py`) into
  `OUT/figures/`, and the page (default: docs/evaluation.md for `paper`,
  `OUT/evaluation.md` otherwise) is regenerated from the same rows.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import math
import os
import platform
import shlex
import signal
import sys
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from controller import planner
from controller.algorithm.model import Instance, PlanningError
from controller.algorithm.regimes import regime_instance
from controller.algorithm.workload import reference_instance
from controller.arguments import EXIT_FAILED, EXIT_OK, note, positive_int
from controller.config.instance import InputError
from controller.offline.report import (
    commit_text,
    fmt_duration,
    lambda_bottleneck,
    load_average,
    md_table,
    package_versions,
    page_head,
    write_atomically,
)

BASELINES = ("unicast", "spt", "steiner", "greedy")
PAPER_ALGORITHMS = ("lp-rounding", *BASELINES)
OBJECTIVE = "max-concurrent"
DEFAULT_WORKERS = "4-32"  # the generator's default worker range (docs/architecture.md, Reference workloads)
EXIT_INTERRUPTED = 130
MIB = 1024**2
PACKAGES = ("numpy", "scipy", "highspy", "networkx", "matplotlib")  # versions on the page

# One row per (instance, algorithm, seed). KEY identifies a row for resuming.
BASE_KEY = ("suite", "sweep", "k", "jobs", "groups", "workers", "oversubscribed", "algorithm", "seed")
# The regime of the instance (fabric, core oversubscription, budgets): added after the other columns, so that a
# CSV written before them (LEGACY_COLUMNS) is read with the values of the reference workloads (`upgrade_csv`).
REGIME_KEY = ("fabric", "core_ratio", "budgets")
KEY = BASE_KEY + REGIME_KEY
LEGACY_COLUMNS = BASE_KEY + (
    "hosts",
    "lambda",
    "throughput_bps",
    "lp_bound",
    "lp_bound_ref",
    "lambda_over_lp",
    "link_load_bps",
    "downstream_copies",
    "unicast_copies",
    "downstream_saving_pct",
    "groups_used",
    "entries_used",
    "full_group_tables",
    "multicast_jobs",
    "hybrid_jobs",
    "unicast_jobs",
    "lambda_bound_by",
    "runtime_s",
    "peak_rss_mib",
    "case_rss_mib",
    "kappa",
    "beta",
    "finished_utc",
)
COLUMNS = LEGACY_COLUMNS + REGIME_KEY


# -- suites ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    k: int
    jobs: int
    groups: int | None  # G on every switch; None = unlimited
    workers: str = DEFAULT_WORKERS  # "A-B" (drawn uniformly) or "W" (every job has W workers)
    oversubscribed: bool = False
    # the regimes (algorithm/regimes.py); the defaults are the reference workloads
    fabric: str = "fat-tree"  # regimes.FABRICS: "fat-tree" (k-ary), "clos" (production-shaped, k unused)
    core_ratio: float | None = None  # core oversubscription; None: 2 if oversubscribed else 1
    budgets: str = "uniform"  # "uniform" (G on every switch) or "mixed" (cores 0, others drawn)

    @property
    def worker_range(self) -> tuple[int, int]:
        lo, _, hi = self.workers.partition("-")
        return int(lo), int(hi or lo)

    @property
    def ratio(self) -> float:
        if self.core_ratio is not None:
            return self.core_ratio
        return 2.0 if self.oversubscribed else 1.0

    @property
    def reference(self) -> bool:
        """A reference workload (docs/architecture.md), not one of the regimes."""
        return self.fabric == "fat-tree" and self.core_ratio is None and self.budgets == "uniform"


@dataclass(frozen=True)
class Sweep:
    id: str
    figure: str  # which figure draws it (see evaluate_figures.FIGURES)
    description: str
    points: tuple[Point, ...]
    algorithms: tuple[str, ...] = PAPER_ALGORITHMS
    timed: bool = False  # one case at a time, each in a fresh process (run time, memory)
    seeds: int | None = None  # its own number of seeds (None: the suite's); --seeds overrides both


@dataclass(frozen=True)
class Suite:
    name: str
    seeds: int
    sweeps: tuple[Sweep, ...]
    about: str


def _both(points: Iterable[Point]) -> tuple[Point, ...]:
    """Every point in the full-bisection and the oversubscribed-core variant."""
    pts = list(points)
    return tuple(Point(p.k, p.jobs, p.groups, p.workers, over) for over in (False, True) for p in pts)


def _hosts(k: int) -> int:
    return k**3 // 4


def _scale_jobs(k: int) -> int:
    """Jobs in proportion to hosts, k=32 (8192 hosts) having the 1000 jobs of the 10 s goal."""
    return max(4, round(_hosts(k) * 1000 / 8192))


def _set_text(values: Iterable[int]) -> str:
    return "{" + ", ".join(map(str, values)) + "}"


def _scale_k_sweep(ks: tuple[int, ...], groups: int, algorithms: tuple[str, ...]) -> Sweep:
    """Timed: run time and memory against k, the jobs in proportion to the hosts."""
    return Sweep("scale-k", "runtime", f"G={groups}, k ∈ {_set_text(ks)}, jobs ≈ 0.12 × hosts",
                 tuple(Point(k, _scale_jobs(k), groups) for k in ks), algorithms, timed=True)


def _scale_jobs_sweep(sweep_id: str, k: int, jobs: tuple[int, ...], groups: int, algorithms: tuple[str, ...],
                      jobs_text: str | None = None) -> Sweep:
    """Timed: run time and memory against the number of jobs at one k."""
    return Sweep(sweep_id, "runtime", f"k={k}, G={groups}, jobs ∈ {jobs_text or _set_text(jobs)}",
                 tuple(Point(k, j, groups) for j in jobs), algorithms, timed=True)


def _regimes_sweep(k: int, jobs: int, ratios: tuple[int, ...], clos: str, clos_jobs: int, seeds: int | None) -> Sweep:
    """Where planning matters (figure 8): a k-ary fat-tree at each core oversubscription of `ratios`
    and the Clos `clos`, all with mixed budgets (algorithm/regimes.py)."""
    points = tuple(Point(k, jobs, None, DEFAULT_WORKERS, r > 1, "fat-tree", float(r), "mixed") for r in ratios)
    points += (Point(0, clos_jobs, None, DEFAULT_WORKERS, False, clos, 1.0, "mixed"),)
    return Sweep("regimes", "regimes",
                 f"mixed budgets; fat-tree k={k}, {jobs} jobs, core oversubscription ∈ "
                 f"{{{', '.join(f'{r}:1' for r in ratios)}}}; {clos}, {clos_jobs} jobs",
                 points, seeds=seeds)


PAPER_G = 8  # the fixed, tight group capacity of figures 1 and 3
SCALE_G = 16  # G of the timed sweeps (as in `bench`)

SMOKE = Suite(
    "smoke",
    seeds=2,
    about="tiny instances (k=4 and k=8, a 9-rack Clos), every figure, for the test suite; ilp included where it fits",
    sweeps=(
        Sweep("jobs", "lambda-vs-jobs", "k=4, G=2, jobs ∈ {2, 4, 8}",
              _both(Point(4, j, 2) for j in (2, 4, 8))),
        Sweep("groups", "lambda-vs-groups", "k=4, 6 jobs, G ∈ {0, 1, 2, 4}",
              _both(Point(4, 6, g) for g in (0, 1, 2, 4))),
        Sweep("workers", "throughput-vs-workers", "k=4, 6 jobs, G=2, workers per job ∈ {2, 4, 8}; ilp where it fits",
              _both(Point(4, 6, 2, str(w)) for w in (2, 4, 8)), (*PAPER_ALGORITHMS, "ilp")),
        _scale_k_sweep((4, 8), 4, ("lp-rounding",)),
        _scale_jobs_sweep("scale-jobs", 4, (4, 8), 4, ("lp-rounding",)),
        _regimes_sweep(4, 6, (1, 2, 4), "clos-tiny", 6, None),
    ),
)

PAPER = Suite(
    "paper",
    seeds=3,
    about="the figures of docs/evaluation.md: fat-tree k=16 (1024 hosts) sweeps, lp-rounding's run time up to k=32, "
          "and the regimes where planning matters (k=8 fat-tree at 1:1 to 4:1, a production-shaped Clos, mixed budgets)",
    sweeps=(
        Sweep("jobs", "lambda-vs-jobs", f"k=16, G={PAPER_G}, jobs ∈ {{25, 50, 100, 200, 400, 800}}",
              _both(Point(16, j, PAPER_G) for j in (25, 50, 100, 200, 400, 800))),
        Sweep("groups", "lambda-vs-groups", "k=16, 200 jobs, G ∈ {0, 2, 4, …, 1024}",
              _both(Point(16, 200, g) for g in (0, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))),
        Sweep("workers", "throughput-vs-workers", f"k=16, 200 jobs, G={PAPER_G}, workers per job ∈ {{2, 4, …, 128}}",
              _both(Point(16, 200, PAPER_G, str(w)) for w in (2, 4, 8, 16, 32, 64, 128))),
        _scale_k_sweep((4, 8, 16, 32), SCALE_G, ("lp-rounding",)),
        _scale_jobs_sweep("scale-jobs", 16, (50, 100, 200, 400, 800), SCALE_G, ("lp-rounding",)),
        _regimes_sweep(8, 80, (1, 2, 4), "clos", 150, 5),
    ),
)

SCALE = Suite(
    "scale",
    seeds=3,
    about="run time and peak memory of every algorithm (ilp aside) as k and the number of jobs grow",
    sweeps=(
        _scale_k_sweep((4, 8, 16, 32), SCALE_G, PAPER_ALGORITHMS),
        _scale_jobs_sweep("scale-jobs", 16, (50, 100, 200, 400, 800, 1600), SCALE_G, PAPER_ALGORITHMS,
                          "{50, 100, …, 1600}"),
        _scale_jobs_sweep("scale-jobs-k32", 32, (250, 500, 1000, 2000), SCALE_G, PAPER_ALGORITHMS),
    ),
)

SUITES = {s.name: s for s in (SMOKE, PAPER, SCALE)}


# -- cases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    suite: str
    sweep: str
    point: Point
    seed: int
    algorithms: tuple[str, ...]  # the ones still missing from the CSV
    timed: bool
    lp_bound_ref: float | None = None  # from the CSV, when lp-rounding's row is already there

    @property
    def label(self) -> str:
        p = self.point
        g = "∞" if p.groups is None else p.groups
        core = ", oversubscribed" if p.oversubscribed else ""
        if not p.reference:
            fabric = p.fabric if p.fabric != "fat-tree" else f"k={p.k}, core {p.ratio:g}:1"
            return f"{self.sweep}: {fabric}, {p.jobs} jobs, {p.budgets} budgets, workers {p.workers}, seed {self.seed}"
        return f"{self.sweep}: k={p.k}, {p.jobs} jobs, G={g}, workers {p.workers}{core}, seed {self.seed}"

    @property
    def cost(self) -> float:
        """A rough relative cost, to start the long cases first."""
        lo, hi = self.point.worker_range
        return self.point.jobs * (lo + hi) * math.log2(max(self.point.k, 2)) * len(self.algorithms)


def key_of(suite: str, sweep: str, point: Point, algorithm: str, seed: int) -> tuple[str, ...]:
    return (
        suite,
        sweep,
        str(point.k),
        str(point.jobs),
        "" if point.groups is None else str(point.groups),
        point.workers,
        "1" if point.oversubscribed else "0",
        algorithm,
        str(seed),
        point.fabric,
        f"{point.ratio:g}",
        point.budgets,
    )


def row_key(row: dict) -> tuple[str, ...]:
    return tuple(row[c] for c in KEY)


# Refusals (ilp above its size limit) leave no row, so ilp never keeps a case open.
OPTIONAL = frozenset({"ilp"})


def sweep_seeds(sweep: Sweep, seeds: int, override: bool) -> int:
    """The seeds of `sweep`: its own when it has them and --seeds did not say (`override`), else `seeds`."""
    return seeds if override or sweep.seeds is None else sweep.seeds


def plan_cases(suite: Suite, seeds: int, done: dict[tuple, dict], override: bool = False) -> list[Case]:
    cases: list[Case] = []
    for sweep in suite.sweeps:
        for point in sweep.points:
            for seed in range(sweep_seeds(sweep, seeds, override)):
                missing = tuple(
                    a for a in sweep.algorithms if key_of(suite.name, sweep.id, point, a, seed) not in done
                )
                if not [a for a in missing if a not in OPTIONAL]:
                    continue
                ref = done.get(key_of(suite.name, sweep.id, point, "lp-rounding", seed))
                ref_bound = _float(ref.get("lp_bound")) if ref else None
                cases.append(Case(suite.name, sweep.id, point, seed, missing, sweep.timed, ref_bound))
    return cases


def _float(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    return float(text)


# -- running one case (in a worker process) -----------------------------------------------


def _rss_bytes(field_name: str) -> float | None:
    """VmRSS / VmHWM of this process (Linux), else None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if field_name == "VmHWM":
        try:
            import resource

            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return rss if sys.platform == "darwin" else rss * 1024
        except (ImportError, OSError):
            return None
    return None


def warm_up() -> None:
    """Plan a tiny instance with every algorithm, so that lazy imports (scipy's HiGHS,
    networkx' algorithms) are paid once per process, as in a long-running controller,
    and not by the first timed plan."""
    tiny = reference_instance(4, 2, group_capacity=2, seed=1)
    for algorithm in (*PAPER_ALGORITHMS, "ilp"):
        try:
            planner.run(tiny, algorithm, OBJECTIVE, 0)
        except PlanningError:
            pass


def _init_worker() -> None:
    # Ctrl-C reaches the whole process group: the parent handles it and ends the pool.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A worker writes nothing to stderr (it is forked while the parent's progress bar may
    # hold the stream); what goes wrong is returned to the parent.
    warnings.simplefilter("ignore")
    warm_up()


def _guarded(item: tuple[int, Case]) -> tuple[int, list[dict], str | None]:
    """run_case, with an unexpected failure returned as text instead of ending the sweep."""
    index, case = item
    try:
        return index, run_case(case), None
    except Exception as e:  # noqa: BLE001 - reported by the parent, the case is left for a rerun
        return index, [], f"{type(e).__name__}: {e}"


def build_instance(p: Point, seed: int) -> Instance:
    """The instance of point `p` for `seed`: a reference workload, or one of the regimes."""
    lo, hi = p.worker_range
    if p.reference:
        return reference_instance(p.k, p.jobs, group_capacity=p.groups, seed=seed, oversubscribed=p.oversubscribed,
                                  min_workers=lo, max_workers=hi)
    return regime_instance(p.fabric, p.jobs, seed, k=p.k, core_ratio=p.ratio, budgets=p.budgets,
                           group_capacity=p.groups, min_workers=lo, max_workers=hi)


def run_case(case: Case) -> list[dict]:
    """Build the case's instance once, plan it with each of its algorithms, and return
    one CSV row per plan (a refusal gives no row)."""
    rss_start = _rss_bytes("VmRSS")
    p = case.point
    instance = build_instance(p, case.seed)
    topo = instance.topology
    plans = {}
    for algorithm in case.algorithms:
        try:
            plans[algorithm] = planner.run(instance, algorithm, OBJECTIVE, case.seed)
        except PlanningError:
            continue  # ilp above its size limit: no row
    peak = _rss_bytes("VmHWM")

    def copies(plan) -> int:
        return int(sum(c for jp in plan.jobs for _, c in jp.structure.copies))

    unicast = plans.get("unicast") or planner.run(instance, "unicast", OBJECTIVE, case.seed)
    unicast_copies = copies(unicast)
    ref = plans["lp-rounding"].lp_bound if "lp-rounding" in plans else case.lp_bound_ref
    finished = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows = []
    for algorithm, plan in plans.items():
        load = 0.0
        for jp in plan.jobs:
            load += jp.rate * sum(c for _, c in jp.structure.copies)
        down = copies(plan)
        modes = [jp.structure.mode for jp in plan.jobs]
        bound_by = lambda_bottleneck(instance, plan)
        row = dict(zip(KEY, key_of(case.suite, case.sweep, p, algorithm, case.seed)))
        row.update(
            hosts=len(topo.hosts),
            **{"lambda": plan.lam},
            throughput_bps=plan.throughput,
            lp_bound=plan.lp_bound,
            lp_bound_ref=ref,
            lambda_over_lp=(plan.lam / ref) if ref else None,
            link_load_bps=load,
            downstream_copies=down,
            unicast_copies=unicast_copies,
            downstream_saving_pct=100.0 * (1 - down / unicast_copies) if unicast_copies else None,
            groups_used=sum(s.groups_used for s in plan.switches),
            entries_used=sum(s.entries_used for s in plan.switches),
            full_group_tables=sum(
                1 for s in plan.switches if s.group_capacity is not None and s.groups_used >= s.group_capacity
            ),
            multicast_jobs=modes.count("multicast"),
            hybrid_jobs=modes.count("hybrid"),
            unicast_jobs=modes.count("unicast"),
            lambda_bound_by=";".join(sorted(bound_by)),
            runtime_s=plan.runtime_s,
            peak_rss_mib=(peak / MIB) if (case.timed and peak) else None,
            case_rss_mib=((peak - rss_start) / MIB) if (case.timed and peak and rss_start) else None,
            kappa=plan.kappa,
            beta=plan.beta if plan.beta is None or np.isfinite(plan.beta) else None,
            finished_utc=finished,
        )
        rows.append(row)
    return rows


# -- the CSV ---------------------------------------------------------------------------------


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return repr(value)
    return str(value)


def read_rows(path: Path) -> list[dict]:
    """The rows of an existing CSV (none when it does not exist); its header must be COLUMNS."""
    if not path.exists():
        return []
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None:
                return []
            legacy = tuple(reader.fieldnames) == LEGACY_COLUMNS
            if tuple(reader.fieldnames) != COLUMNS and not legacy:
                raise InputError(
                    f"{path}: its columns are not this version's ({', '.join(reader.fieldnames[:4])}, …); "
                    "move it away or choose another --out"
                )
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    rows = [r for r in rows if None not in r.values()]  # a line cut short by an interruption is dropped
    if legacy:  # written before the regimes: every row is a reference workload
        for r in rows:
            r.update(fabric="fat-tree", core_ratio="2" if r["oversubscribed"] == "1" else "1", budgets="uniform")
    return rows


def upgrade_csv(path: Path) -> bool:
    """Rewrite a CSV written before the regime columns (LEGACY_COLUMNS) with COLUMNS, the
    reference workloads' values in the new columns, so that new rows can be appended;
    True if it did. The file is replaced atomically: nothing is lost if this fails."""
    if not path.exists():
        return False
    with path.open(newline="", encoding="utf-8") as f:
        header = next(csv.reader(f), None)
    if header is None or tuple(header) != LEGACY_COLUMNS:
        return False
    rows = read_rows(path)
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(COLUMNS)
    writer.writerows([r[c] for c in COLUMNS] for r in rows)
    write_atomically(path, text.getvalue())
    return True


class RowWriter:
    """Appends rows to the CSV, writing the header first when the file is new or empty."""

    def __init__(self, path: Path) -> None:
        if path.exists():
            with path.open("r+b") as f:  # a last line cut short by an interruption is removed
                data = f.read()
                if data and not data.endswith(b"\n"):
                    f.truncate(data.rfind(b"\n") + 1)
        new = not path.exists() or path.stat().st_size == 0
        self.file = path.open("a", newline="", encoding="utf-8")
        self.rows = 0
        self.cases = 0
        self.writer = csv.writer(self.file)
        if new:
            self.writer.writerow(COLUMNS)
            self.file.flush()

    def write(self, rows: Sequence[dict]) -> None:
        for row in rows:
            self.writer.writerow([_cell(row.get(c)) for c in COLUMNS])
        self.file.flush()
        self.rows += len(rows)
        self.cases += 1
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()


# -- running a suite -----------------------------------------------------------------------------


def _pool(processes: int, fresh: bool):
    import multiprocessing as mp  # here, not on every command's start-up path

    methods = mp.get_all_start_methods()
    ctx = mp.get_context("fork" if "fork" in methods else None)
    return ctx.Pool(processes, initializer=_init_worker, maxtasksperchild=1 if fresh else None)


def run_suite(cases: list[Case], workers: int, writer: RowWriter) -> list[str]:
    """Run the cases, appending rows as they finish. Timed cases first, one at a time in a
    fresh process each; then the others in a pool of `workers`. Returns the failures (a
    failed case writes no row, so a rerun tries it again)."""
    from rich.console import Console  # rich only once a suite runs, not on every command's start-up path

    timed = [c for c in cases if c.timed]
    parallel = sorted((c for c in cases if not c.timed), key=lambda c: -c.cost)
    console = Console(stderr=True)
    failures: list[str] = []
    if not cases:
        return failures
    warm_up()  # forked workers inherit the imports
    progress = None
    if console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        progress.start()
        task = progress.add_task("evaluate", total=len(cases))
    done = 0

    def finished(case: Case, rows: list[dict], error: str | None, running: str) -> None:
        nonlocal done
        if error is None:
            writer.write(rows)
        else:
            failures.append(f"{case.label}: {error}")
            (progress.console if progress is not None else console).print(
                f"warning: {case.label} failed: {error}", highlight=False, markup=False, soft_wrap=True)
        done += 1
        if progress is not None:
            progress.update(task, advance=1, description=running)
        else:
            console.print(f"[{done}/{len(cases)}] {case.label}", highlight=False, soft_wrap=True)

    try:
        for case in timed:
            if progress is not None:
                progress.update(task, description=f"{case.label} (timed)")
            with _pool(1, fresh=True) as pool:
                _, rows, error = pool.apply(_guarded, ((0, case),))
            finished(case, rows, error, "")
        if parallel:
            processes = max(1, min(workers, len(parallel)))
            if progress is not None:
                progress.update(task, description=f"{len(parallel)} cases on {processes} process(es)")
            with _pool(processes, fresh=False) as pool:
                for index, rows, error in pool.imap_unordered(_guarded, list(enumerate(parallel))):
                    left = len(parallel) - (done + 1 - len(timed))
                    finished(parallel[index], rows, error, f"{left} cases left on {processes} process(es)")
        if progress is not None:
            progress.update(task, description="evaluate: done")
    finally:
        if progress is not None:
            progress.stop()
    return failures


# -- the page -------------------------------------------------------------------------------------


def command_line(args: argparse.Namespace) -> str:
    parts = ["python", "-m", "controller", "evaluate", "--suite", args.suite]
    if args.out_given:
        parts += ["--out", args.out]
    if args.doc_given:
        parts += ["--doc", args.doc]
    if args.seeds is not None:
        parts += ["--seeds", str(args.seeds)]
    if args.workers_given:
        parts += ["--workers", str(args.workers)]
    return shlex.join(parts)


@dataclass
class RunInfo:
    suite: Suite
    seeds: int
    command: str
    this_run: dict | None  # what this invocation computed (None: nothing, it only redrew)
    runs: list[dict]  # every invocation that computed rows, from the runs log
    total_rows: int
    csv_path: Path
    doc_path: Path
    override: bool = False  # --seeds given: it sets every sweep's seeds


def header(info: RunInfo) -> str:
    rel_csv = os.path.relpath(info.csv_path, info.doc_path.parent).replace(os.sep, "/")
    if info.this_run is None:
        this = "nothing computed: every row was already in the CSV; the figures and this page were redrawn from it"
    else:
        this = (f"{info.this_run['cases']} cases ({info.this_run['rows']} rows) in "
                f"{fmt_duration(info.this_run['elapsed_s'])}")
    rows = [
        ("suite", f"`{info.suite.name}`: {info.suite.about}"),
        ("seeds", f"{info.seeds} (0–{info.seeds - 1})" + "".join(
            f", sweep `{s.id}` {n} (0–{n - 1})" for s in info.suite.sweeps
            if (n := sweep_seeds(s, info.seeds, info.override)) != info.seeds)
         + "; each seed draws the workload and seeds the algorithms"),
        ("CPUs (`os.cpu_count()`)", str(os.cpu_count())),
        ("platform", platform.platform()),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("packages", package_versions(PACKAGES)),
        ("commit", commit_text()),
        ("rows", f"{info.total_rows} in [`{rel_csv}`]({rel_csv})"),
        ("this command", this),
    ]
    runs = [
        (
            r.get("started_utc", "—"),
            str(r.get("workers", "—")),
            str(r.get("cases", "—")),
            str(r.get("rows", "—")),
            fmt_duration(r["elapsed_s"]) if "elapsed_s" in r else "—",
            r.get("load", "—"),
            "interrupted" if r.get("interrupted") else
            (f"{r['failed_cases']} case(s) failed" if r.get("failed_cases") else "complete"),
        )
        for r in info.runs
    ]
    return "\n".join(
        [
            *page_head(
                "Evaluation",
                "`python -m controller evaluate` (controller/offline/evaluate.py, controller/offline/evaluate_figures.py)",
                info.command,
            ),
            md_table(("", ""), rows, right=(False, False)),
            "",
            "The runs that computed the rows (a rerun computes only the cases missing from the CSV):",
            "",
            md_table(("started", "worker processes", "cases", "rows", "run time", "load average at start", "status"), runs,
                     right=(False, True, True, True, True, False, False)) if runs else "(none recorded)",
            "",
            "Every case but those of sweep `regimes` (figure 8 says what they build) builds one reference instance (docs/architecture.md, Reference workloads: a k-ary fat-tree with 10 Gbit/s links; "
            "each job's PS a random host, its workers random other hosts, its demand drawn from "
            "{1, 2, 5, 10} Gbit/s; G replication groups on every switch, multicast entries unlimited) and plans "
            "it with every algorithm of its sweep, objective `max-concurrent`. In the *oversubscribed* variant "
            "core links carry half the capacity (5 Gbit/s, 2:1 at the core). Points are means over the seeds; "
            "error bars span the smallest to the largest value over the seeds.",
            "",
            "Definitions used in the figures and the CSV:",
            "",
            "- **λ**: every job receives at least λ × its demand (`lambda`).",
            "- **aggregate throughput**: Σ_j r_j after max-min filling of spare capacity (`throughput_bps`).",
            "- **λ / LP**: λ divided by the LP bound that lp-rounding reports on the *same instance* "
            "(`lp_bound_ref`), an upper bound on λ of any plan over the structure family, for every algorithm's row.",
            "- **total link load**: Σ_e Σ_j r_j · m_j(e) in bit/s, the traffic all links carry at the allocated "
            "rates (`link_load_bps`).",
            "- **downstream traffic**: D = Σ_j Σ_e m_j(e), the bytes that cross all links (PS uplinks included) "
            "when every job pushes one byte of model, unweighted by demand (`downstream_copies`); the saving over "
            "unicast is 1 − D / D_unicast on the same instance (`downstream_saving_pct`).",
            "- **run time**: the wall-clock time of `controller.planner.run` (instance generation excluded), after "
            "a warm-up plan in the same process; **peak RSS**: `VmHWM` of the process that planned the case.",
        ]
    )


# -- the command -----------------------------------------------------------------------------------


def _writable_dir(path: Path, flag: str) -> None:
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path}: is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot create: {e.strerror or e}") from None
    if not os.access(path, os.W_OK):
        raise InputError(f"{flag} {path}: is not writable")


def default_out(suite: str) -> str:
    return "docs" if suite == "paper" else f"build/evaluate-{suite}"


def default_doc(suite: str, out: str) -> str:
    return "docs/evaluation.md" if suite == "paper" else str(Path(out) / "evaluation.md")


def cmd_evaluate(args: argparse.Namespace) -> int:
    suite = SUITES[args.suite]
    args.out_given = args.out is not None
    args.doc_given = args.doc is not None
    args.workers_given = args.workers is not None
    args.out = args.out if args.out is not None else default_out(suite.name)
    args.doc = args.doc if args.doc is not None else default_doc(suite.name, args.out)
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    seeds = args.seeds if args.seeds is not None else suite.seeds
    out = Path(args.out)
    doc = Path(args.doc)
    if doc.exists() and doc.is_dir():
        raise InputError(f"--doc {args.doc}: is a directory")
    _writable_dir(out, "--out")
    figures_dir = out / "figures"
    _writable_dir(figures_dir, "--out")
    if not doc.parent.is_dir():
        raise InputError(f"--doc {args.doc}: directory {str(doc.parent)!r} does not exist")
    csv_path = out / f"evaluation-{suite.name}.csv"
    if upgrade_csv(csv_path):
        note(f"{csv_path}: added the columns {', '.join(REGIME_KEY)} (the reference workloads' values)")
    rows = read_rows(csv_path)
    done = {row_key(r): r for r in rows}
    cases = plan_cases(suite, seeds, done, override=args.seeds is not None)
    runs_path = out / f"evaluation-{suite.name}-runs.json"
    runs = read_runs(runs_path)
    load = load_average()
    started = datetime.datetime.now(datetime.timezone.utc)
    start = time.perf_counter()
    if cases:
        note(f"evaluate {suite.name}: {len(cases)} cases to run, {len(rows)} rows already in {csv_path}")
    else:
        note(f"evaluate {suite.name}: nothing to run, all {len(rows)} rows are in {csv_path}")
    this_run = None
    failures: list[str] = []
    if cases:
        writer = RowWriter(csv_path)
        interrupted = False
        try:
            failures = run_suite(cases, workers, writer)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            writer.close()
            this_run = {
                "started_utc": started.strftime("%Y-%m-%d %H:%M UTC"),
                "command": command_line(args),
                "workers": workers,
                "cpus": os.cpu_count(),
                "cases": writer.cases,
                "rows": writer.rows,
                "elapsed_s": round(time.perf_counter() - start, 1),
                "load": load,
                "interrupted": interrupted,
                "failed_cases": len(failures),
            }
            runs.append(this_run)
            write_runs(runs_path, runs)
        if interrupted:
            note(f"interrupted: the finished cases are in {csv_path}; rerun the same command to resume")
            return EXIT_INTERRUPTED
    rows = read_rows(csv_path)
    # the figures' module (~15 ms to import) only when a page is drawn, not on every command's start-up
    from controller.offline import evaluate_figures, evaluate_regimes

    info = RunInfo(suite, seeds, command_line(args), this_run, runs, len(rows), csv_path, doc, args.seeds is not None)
    sections = evaluate_figures.draw_all(suite, rows, figures_dir, doc, info.command, runs, (evaluate_regimes.section,))
    # the section of `simulate-cluster` (its own command) stays as it was
    from controller.offline import cluster_report

    kept = cluster_report.marked_block(doc.read_text(encoding="utf-8")) if doc.exists() else ""
    write_atomically(doc, header(info) + "\n\n" + "\n\n".join(sections) + "\n" + (f"\n{kept}" if kept else ""))
    note(f"wrote {csv_path} ({len(rows)} rows), {len(sections)} figures in {figures_dir}, {doc} "
         f"in {fmt_duration(time.perf_counter() - start)}")
    if failures:
        note(f"{len(failures)} case(s) failed and wrote no rows (rerun to retry them): first: {failures[0]}")
        return EXIT_FAILED
    return EXIT_OK


def read_runs(path: Path) -> list[dict]:
    """The log of the invocations that computed rows (JSON list); empty when absent."""
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InputError(f"{path}: expected a JSON list of runs")
    return data


def write_runs(path: Path, runs: list[dict]) -> None:
    write_atomically(path, json.dumps(runs, indent=1, ensure_ascii=False) + "\n")


def register(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="run a simulation sweep, draw its figures and write docs/evaluation.md",
        description="Run a sweep of the reference workloads with every algorithm and several seeds, "
        "append one CSV row per (instance, algorithm, seed), draw the figures and write the page. "
        "A rerun skips the rows already in the CSV.",
    )
    p.add_argument("--suite", required=True, choices=tuple(SUITES), help="smoke (< 1 min), paper (the figures), scale (run time and memory)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="directory of the CSV and figures/ (default: docs for paper, build/evaluate-SUITE otherwise)")
    p.add_argument("--doc", default=None, metavar="FILE",
                   help="markdown page to write (default: docs/evaluation.md for paper, DIR/evaluation.md otherwise)")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help=f"processes for the untimed cases (default: os.cpu_count() = {os.cpu_count()})")
    p.add_argument("--seeds", type=positive_int, default=None, metavar="N", help="seeds 0..N-1 per point (default: the suite's)")
    p.set_defaults(run=cmd_evaluate)
