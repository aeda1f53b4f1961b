"""`python -m controller simulate-cluster`: a cluster over time, its figures and its section of docs/evaluation.md.

For every fabric of `FABRICS` one seeded arrival stream (`cluster_workload`) is
run under every policy of `POLICIES` (`cluster_sim.simulate`), the cases in a
process pool (`--workers`). It draws the JCT CDFs and the group occupancy over
time into docs/figures/ and writes the section "A cluster over time" into
docs/evaluation.md, between `MARK_BEGIN` and `MARK_END` (the `evaluate`
command keeps that block when it rewrites the page). `--quick` runs a k=4
fabric for a handful of jobs and writes evaluation-quick.md and
cluster-quick-*.png instead (under `--out`; for the tests).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from controller.algorithm.model import Topology
from controller.algorithm.topologies import GBIT, fat_tree, leaf_spine
from controller.arguments import EXIT_OK, note, positive_int
from controller.offline.report import fmt_duration, md_table, write_atomically

if TYPE_CHECKING:
    from controller.offline.cluster_sim import SimResult

MARK_BEGIN = "<!-- simulate-cluster: begin -->"
MARK_END = "<!-- simulate-cluster: end -->"
LOAD = 0.7  # share of the hosts the arrivals would hold on an idle fabric
REOPTIMISE_AFTER_S = 60.0
SEED = 1
POLICIES = ("lp-rounding", "spt", "greedy", "unicast")
STYLE = {"lp-rounding": "#d62728", "spt": "#1f77b4", "greedy": "#ff7f0e", "unicast": "#7f7f7f"}


@dataclass(frozen=True)
class Fabric:
    name: str
    kind: str  # "fat-tree" (k, core oversubscription) or "leaf-spine" (32 leaves × 8 spines × 32 hosts, uplinks)
    size: int  # k, or the leaf uplinks' capacity in Gbit/s
    over: float  # core oversubscription (fat-tree)
    hosts: int
    groups: int  # G on every switch
    hours: float  # of arrivals (the run lasts until the last job leaves)

    def build(self) -> Topology:
        if self.kind == "fat-tree":
            return fat_tree(self.size, 10 * GBIT, self.over, self.groups)
        return leaf_spine(32, 8, 32, 10 * GBIT, self.size * GBIT, self.groups)


FABRICS = (
    *(Fabric(f"fat-tree k=16, {o}:1", "fat-tree", 16, o, 1024, 8, 1.0) for o in (1, 2, 4)),
    Fabric("leaf-spine 32×8, 2:1", "leaf-spine", 20, 1.0, 1024, 8, 1.0),
    *(Fabric(f"fat-tree k=32, {o}:1", "fat-tree", 32, o, 8192, 16, 0.1) for o in (1, 2, 4)),
)
QUICK = (Fabric("fat-tree k=4, 4:1", "fat-tree", 4, 4.0, 16, 2, 1.0),)


@dataclass(frozen=True)
class Case:
    fabric: Fabric
    policy: str


@dataclass(frozen=True)
class Outcome:
    fabric: str
    policy: str
    result: SimResult
    wall_s: float


def run_case(case: Case) -> Outcome:
    # the simulation (core.planning, ~90 ms of imports) only when a case runs, not on every command's start-up
    from controller.offline.cluster_sim import baseline_settings, controller_settings, simulate
    from controller.offline.cluster_workload import arrival_stream, jobs_per_hour_for

    f = case.fabric
    topo = f.build()
    max_workers = f.hosts - 1
    rate = jobs_per_hour_for(LOAD, f.hosts, max_workers)
    stream = arrival_stream(random.Random(SEED), f.hours, rate, max_workers)
    settings = (controller_settings(REOPTIMISE_AFTER_S, seed=SEED) if case.policy == "lp-rounding"
                else baseline_settings(case.policy, SEED))
    start = time.perf_counter()
    result = simulate(topo, stream, settings, random.Random(SEED + 1))
    return Outcome(f.name, case.policy, result, time.perf_counter() - start)


def _p(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _time_mean(r: SimResult, value: Callable) -> float:
    """Time-weighted mean of `value(sample)` over the run (a sample holds until the next)."""
    total = 0.0
    for a, b in zip(r.samples, r.samples[1:]):
        total += value(a) * (b.time_s - a.time_s)
    return total / r.end_s if r.end_s > 0 else 0.0


def table(outcomes: list[Outcome]) -> str:
    rows = []
    uni = {o.fabric: statistics.mean(j.jct_s for j in o.result.jobs) for o in outcomes if o.policy == "unicast"}
    for o in outcomes:
        r = o.result
        jct = [j.jct_s for j in r.jobs]
        mean = statistics.mean(jct)
        g_share = _time_mean(r, lambda s: s.groups_used / s.group_budget if s.group_budget else 0.0)
        rows.append([
            o.fabric, o.policy, str(len(jct)), f"{mean / 60:.1f}", f"{_p(jct, 0.99) / 3600:.2f}",
            f"{mean / uni[o.fabric]:.3f}" if o.fabric in uni else "",
            f"{statistics.mean(j.jct_s / j.min_duration_s for j in r.jobs):.2f}",
            f"{r.fabric_bits / 8e12:.1f}", f"{100 * g_share:.1f}", f"{max(s.max_group_share for s in r.samples):.2f}",
            f"{r.entries_rewritten / (r.end_s / 60):.1f}", f"{r.plans} / {r.full_plans}",
            f"{r.reoptimisations['adopted']} / {sum(r.reoptimisations.values())}", f"{o.wall_s:.0f}",
        ])
    return md_table(["fabric", "policy", "jobs", "mean JCT (min)", "p99 JCT (h)", "mean JCT ÷ unicast's",
                     "mean slowdown", "fabric TB", "groups used (time mean, %)", "fullest switch (peak)",
                     "entries rewritten / min", "plans / full", "re-opt. adopted / run", "wall s"], rows,
                    [False, False] + [True] * 12)


def draw(outcomes: list[Outcome], figures: Path, stem: str) -> tuple[Path, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fabrics = list(dict.fromkeys(o.fabric for o in outcomes))
    cols = min(4, len(fabrics))
    rows = (len(fabrics) + cols - 1) // cols
    paths = (figures / f"{stem}-jct-cdf.png", figures / f"{stem}-occupancy.png")
    for path, kind in zip(paths, ("cdf", "occupancy")):
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
        for ax, fab in zip(axes.flat, fabrics):
            for o in outcomes:
                if o.fabric != fab:
                    continue
                r = o.result
                if kind == "cdf":
                    xs = sorted(j.jct_s / 60 for j in r.jobs)
                    ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", color=STYLE[o.policy],
                            label=o.policy)
                    ax.set_xscale("log")
                    ax.set_xlabel("JCT (min)")
                    ax.set_ylabel("share of jobs")
                elif o.policy != "unicast":
                    ts = [s.time_s / 3600 for s in r.samples]
                    ys = [100 * s.groups_used / s.group_budget if s.group_budget else 0 for s in r.samples]
                    ax.step(ts, ys, where="post", color=STYLE[o.policy], label=o.policy, lw=0.9)
                    ax.set_xlabel("time (h)")
                    ax.set_ylabel("groups used (% of Σ budgets)")
            ax.set_title(fab, fontsize=10)
            ax.legend(fontsize=8)
        for ax in list(axes.flat)[len(fabrics):]:
            ax.set_visible(False)
        fig.tight_layout()
        figures.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        plt.close(fig)
    return paths


def splice(page: str, section: str) -> str:
    """`page` with its marked block replaced by `section` (appended if it has none)."""
    block = f"{MARK_BEGIN}\n{section.rstrip()}\n{MARK_END}\n"
    if MARK_BEGIN in page and MARK_END in page:
        head, rest = page.split(MARK_BEGIN, 1)
        return head + block + rest.split(MARK_END, 1)[1].lstrip("\n")
    return page.rstrip("\n") + "\n\n" + block


def marked_block(page: str) -> str:
    """The marked block of `page` (with its markers), or ""."""
    if MARK_BEGIN not in page or MARK_END not in page:
        return ""
    return MARK_BEGIN + page.split(MARK_BEGIN, 1)[1].split(MARK_END, 1)[0] + MARK_END + "\n"


def cmd_simulate(args: argparse.Namespace) -> int:
    fabrics = QUICK if args.quick else FABRICS
    cases = [Case(f, p) for f in fabrics for p in POLICIES]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        outcomes = list(pool.map(run_case, cases))
    elapsed = time.perf_counter() - start
    out = Path(args.out)
    stem = "cluster-quick" if args.quick else "cluster"
    cdf, occ = draw(outcomes, out / "figures", stem)
    from controller.offline.cluster_text import section

    text = section(fabrics, outcomes, table(outcomes), cdf.name, occ.name, elapsed, args,
                   load=LOAD, reoptimise_after_s=REOPTIMISE_AFTER_S, seed=SEED)
    doc = out / ("evaluation-quick.md" if args.quick else "evaluation.md")
    page = doc.read_text(encoding="utf-8") if doc.exists() else "# Evaluation\n"
    write_atomically(doc, splice(page, text))
    note(f"wrote {cdf}, {occ} and the section of {doc} in {fmt_duration(elapsed)}")
    print(table(outcomes))
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("simulate-cluster", help="a cluster over time: JCT under job arrivals and departures")
    p.add_argument("--quick", action="store_true", help="a k=4 fabric, a few dozen jobs (seconds, for the tests)")
    p.add_argument("--workers", type=positive_int, default=2, help="cases run in parallel (processes; default 2)")
    p.add_argument("--out", default="docs", metavar="DIR",
                   help="where evaluation.md and figures/ are (default docs)")
    p.set_defaults(run=cmd_simulate)
