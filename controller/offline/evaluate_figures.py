"""The figures of `python -m controller evaluate` and their paragraphs of docs/evaluation.md.

Everything here reads the CSV rows (dicts of strings, `evaluate.COLUMNS`) and nothing
else, so the figures and the page can be redrawn from a CSV alone. Each figure answers
one question; `draw_all` draws the ones the suite has data for (PNG, matplotlib's Agg
backend) and returns one markdown section per figure: the image, what was run, what it
shows and the numbers that matter, computed from the rows.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from controller.offline.report import loglog_exponent

ORDER = ("lp-rounding", "unicast", "spt", "steiner", "greedy", "ilp")
STYLE = {  # one colour and one marker per algorithm, the same in every figure
    "lp-rounding": ("#d62728", "o"),
    "unicast": ("#7f7f7f", "x"),
    "spt": ("#1f77b4", "s"),
    "steiner": ("#2ca02c", "^"),
    "greedy": ("#ff7f0e", "D"),
    "ilp": ("#000000", "*"),
}
VARIANTS = (("0", "full bisection (every link 10 Gbit/s)"), ("1", "oversubscribed core (core links 5 Gbit/s)"))
HOST_TIERS = frozenset({"host uplink", "host downlink"})
TIE = 1e-6  # relative tolerance for "equal"
QUALITY_GOAL = 0.97
TIME_GOALS = ((1.0, "1 s goal: k=16, 200 jobs"), (10.0, "10 s goal: k=32, 1000 jobs"))
MEMORY_GOAL_MIB = 2048.0


# -- reading rows -------------------------------------------------------------------------------


def num(row: dict, column: str) -> float | None:
    text = row.get(column, "")
    if text in ("", None):
        return None
    try:
        return float(text)
    except ValueError:
        return None


@dataclass
class Stat:
    x: float
    mean: float
    lo: float
    hi: float
    n: int


def series(rows: Sequence[dict], x: Callable[[dict], float], y: Callable[[dict], float | None]) -> dict[str, list[Stat]]:
    """Per algorithm, the mean and the min–max over seeds of y at every x."""
    groups: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        value = y(r)
        if value is None or not math.isfinite(value):
            continue
        groups[r["algorithm"]][x(r)].append(value)
    out: dict[str, list[Stat]] = {}
    for algorithm in sorted(groups, key=_algo_rank):
        out[algorithm] = [
            Stat(xv, statistics.fmean(vs), min(vs), max(vs), len(vs)) for xv, vs in sorted(groups[algorithm].items())
        ]
    return out


def _algo_rank(name: str) -> tuple[int, str]:
    return (ORDER.index(name) if name in ORDER else len(ORDER), name)


def sweep_rows(rows: Sequence[dict], prefix: str, variant: str | None = None) -> list[dict]:
    return [
        r for r in rows
        if (r["sweep"] == prefix) and (variant is None or r["oversubscribed"] == variant)
    ]


def variants_of(rows: Sequence[dict]) -> list[tuple[str, str]]:
    present = {r["oversubscribed"] for r in rows}
    return [(v, label) for v, label in VARIANTS if v in present]


def seeds_text(rows: Sequence[dict]) -> str:
    seeds = sorted({int(r["seed"]) for r in rows})
    if not seeds:
        return "no seeds"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 1:
        return f"seeds {seeds[0]}–{seeds[-1]}"
    return "seed" + ("s " if len(seeds) > 1 else " ") + ", ".join(map(str, seeds))


def values_text(values) -> str:
    vals = sorted(set(values))
    return "{" + ", ".join("∞" if v is None else f"{v:g}" for v in vals) + "}"


def fmt(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def pct(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:.{digits}f}%"


# -- drawing helpers ------------------------------------------------------------------------------


def _plt():
    # matplotlib only when a figure is drawn: it is the slowest import of the project
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "font.size": 11,
            "axes.titlesize": 12,
            "axes.labelsize": 11,
            "legend.fontsize": 10,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "figure.dpi": 110,
            "savefig.dpi": 110,
        }
    )
    return plt


def _dodge(xs: Sequence[float], i: int, count: int, log: bool, span: float = 0.05) -> list[float]:
    """Spread the algorithms' markers a little around each x so that ties stay visible."""
    shift = (i - (count - 1) / 2) * span
    if log:
        return [x * 2**shift if x > 0 else x + shift for x in xs]
    return [x + shift for x in xs]


def plot_series(ax, data: dict[str, list[Stat]], log_x: bool, span: float = 0.05, suffix: str = "",
                linestyle: str = "-") -> None:
    count = len(data)
    for i, (algorithm, stats) in enumerate(data.items()):
        colour, marker = STYLE.get(algorithm, ("#9467bd", "v"))
        xs = _dodge([s.x for s in stats], i, count, log_x, span)
        ys = [s.mean for s in stats]
        err = [[s.mean - s.lo for s in stats], [s.hi - s.mean for s in stats]]
        lp = algorithm == "lp-rounding"
        ax.errorbar(
            xs, ys, yerr=err, label=algorithm + suffix, color=colour, marker=marker, linestyle=linestyle,
            linewidth=2.4 if lp else 1.4, markersize=7 if lp else 6, capsize=3,
            zorder=5 if lp else 3, markerfacecolor=colour if lp else "none",
        )


def _plain_log_y(ax) -> None:
    """Log y axis labelled 0.01, 0.02, 0.05, 0.1, … instead of powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # loaded by _plt() already

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="png")
    import matplotlib.pyplot as plt  # loaded by _plt() already

    plt.close(fig)


def _image(path: Path, doc: Path, alt: str) -> str:
    rel = os.path.relpath(path, doc.parent).replace(os.sep, "/")
    return f"![{alt}]({rel})"


def _figure_head(ctx: Context, fig, filename: str, heading: str, alt: str) -> list[str]:
    """Save `fig` as `filename` in the figures directory; the first lines of its
    section: the heading and the image (alt text `alt`)."""
    path = ctx.figures_dir / filename
    _save(fig, path)
    return [heading, "", _image(path, ctx.doc, alt), ""]


# -- comparisons for the text -----------------------------------------------------------------------


def standing(data: dict[str, list[Stat]], higher_is_better: bool = True) -> tuple[int, Counter, list[str]]:
    """Where lp-rounding's mean is strictly best (count), tied best (count per algorithm it
    ties with, under the key "" for the number of points) and behind (text per point)."""
    lp = {s.x: s.mean for s in data.get("lp-rounding", [])}
    best_strict = 0
    ties: Counter = Counter()
    behind: list[str] = []
    sign = 1 if higher_is_better else -1
    for x, ours in lp.items():
        others = {a: next((s.mean for s in st if s.x == x), None) for a, st in data.items() if a != "lp-rounding"}
        others = {a: v for a, v in others.items() if v is not None}
        if not others:
            continue
        top_algo, top = max(others.items(), key=lambda kv: sign * kv[1])
        scale = max(abs(top), abs(ours), 1e-300)
        if sign * (ours - top) > TIE * scale:
            best_strict += 1
        elif abs(ours - top) <= TIE * scale:
            ties[""] += 1
            ties.update(a for a, v in others.items() if abs(v - ours) <= TIE * scale)
        else:
            behind.append(f"{_x_text(x)}: {top_algo} by {abs(top - ours) / scale:.1%}")
    return best_strict, ties, behind


def _x_text(x: float) -> str:
    return f"{x:g}"


def host_bound_share(rows: Sequence[dict], algorithm: str = "lp-rounding") -> tuple[int, int]:
    """(instances where `algorithm`'s λ is bound by host links only, instances)."""
    mine = [r for r in rows if r["algorithm"] == algorithm and r.get("lambda_bound_by")]
    host = sum(1 for r in mine if set(r["lambda_bound_by"].split(";")) <= HOST_TIERS)
    return host, len(mine)


def per_instance_compare(rows: Sequence[dict], column: str, baseline: str) -> tuple[int, int, int]:
    """lp-rounding against `baseline` instance by instance: (higher, equal, lower)."""
    by_instance: dict[tuple, dict[str, float]] = defaultdict(dict)
    for r in rows:
        v = num(r, column)
        if v is not None:
            inst = tuple(r[c] for c in ("sweep", "k", "jobs", "groups", "workers", "oversubscribed", "seed"))
            by_instance[inst][r["algorithm"]] = v
    hi = eq = lo = 0
    for vals in by_instance.values():
        if "lp-rounding" not in vals or baseline not in vals:
            continue
        a, b = vals["lp-rounding"], vals[baseline]
        scale = max(abs(a), abs(b), 1e-300)
        if a - b > TIE * scale:
            hi += 1
        elif b - a > TIE * scale:
            lo += 1
        else:
            eq += 1
    return hi, eq, lo


def head_to_head(rows: Sequence[dict], column: str) -> str:
    parts = []
    for b in ORDER[1:]:
        h, e, l = per_instance_compare(rows, column, b)
        if h + e + l:
            parts.append(f"{b} {h}/{e}/{l}")
    return "; ".join(parts)


def at_x(data: dict[str, list[Stat]], x: float) -> dict[str, float]:
    return {a: s.mean for a, st in data.items() for s in st if s.x == x}


def means_text(values: dict[str, float], f: Callable[[float], str]) -> str:
    return ", ".join(f"{a} {f(v)}" for a, v in sorted(values.items(), key=lambda kv: _algo_rank(kv[0])))


# -- the figures ---------------------------------------------------------------------------------------


@dataclass
class Context:
    suite: object  # evaluate.Suite
    rows: list[dict]
    figures_dir: Path
    doc: Path
    command: str
    runs: list[dict] | None = None  # the runs log (evaluate.read_runs), for when the rows were computed

    def reference_sweeps(self) -> list[str]:
        """The untimed sweeps of the reference workloads (figures 1-5); not the regimes of figure 8."""
        return [s.id for s in self.suite.sweeps if not s.timed and s.figure != "regimes"]

    def sweep(self, sweep_id: str):
        return next((s for s in self.suite.sweeps if s.id == sweep_id), None)

    def ran(self, sweep_id: str) -> str:
        sweep = self.sweep(sweep_id)
        rows = sweep_rows(self.rows, sweep_id)
        algos = sorted({r["algorithm"] for r in rows}, key=_algo_rank)
        desc = sweep.description if sweep else sweep_id
        return f"`{self.command}`, sweep `{sweep_id}` ({desc}; {', '.join(algos)}; {seeds_text(rows)})"


def _variant_panels(plt, ctx: Context, rows: list[dict], title: str):
    variants = variants_of(rows)
    fig, axes = plt.subplots(1, len(variants), figsize=(6.2 * len(variants), 4.8), sharey=True, squeeze=False)
    fig.suptitle(title)
    return fig, list(zip(axes[0], variants))


def _sweep_figure(ctx: Context, sweep_id: str, title: str):
    """The rows of sweep `sweep_id`, and a figure with one panel per core variant
    titled `title`, whose {k}, {jobs} and {groups} are the sweep's values; None when
    the sweep has no rows."""
    rows = sweep_rows(ctx.rows, sweep_id)
    if not rows:
        return None
    values = {
        "k": values_text(int(r["k"]) for r in rows)[1:-1],
        "jobs": values_text(int(r["jobs"]) for r in rows)[1:-1],
        "groups": values_text(int(r["groups"]) for r in rows if r["groups"])[1:-1],
    }
    fig, panels = _variant_panels(_plt(), ctx, rows, title.format(**values))
    return rows, fig, panels


def _variant_section(ctx: Context, fig, filename: str, heading: str, alt: str, intro: str,
                     variant_lines: list[str]) -> str:
    """The section of a figure with one panel per core variant: the image, `intro`
    and a paragraph per variant (`_variant_text`)."""
    text = [*_figure_head(ctx, fig, filename, heading, alt), intro, "", *[t + "\n" for t in variant_lines]]
    return "\n".join(text).rstrip()


def _legend(ax, loc: str = "best", own: bool = False) -> None:
    """One legend on `ax` with every algorithm drawn in any panel of its figure (only
    those of `ax` itself with `own`)."""
    handles: dict[str, object] = {}
    for other in [ax] if own else ax.figure.axes:
        for handle, label in zip(*other.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    order = sorted(handles, key=lambda label: _algo_rank(label.split(" ")[0]))
    many = len(order) > 7
    ax.legend([handles[label] for label in order], order, loc=loc, framealpha=0.9,
              ncol=2 if many else 1, fontsize=8 if many else None)


def same_plan(rows: Sequence[dict]) -> Counter:
    """Per baseline, the instances where lp-rounding's plan has exactly the baseline's λ,
    throughput, downstream traffic and table use (its final choice was that candidate)."""
    columns = ("lambda", "throughput_bps", "downstream_copies", "groups_used", "entries_used")
    by_instance: dict[tuple, dict[str, tuple]] = defaultdict(dict)
    for r in rows:
        inst = tuple(r[c] for c in ("sweep", "k", "jobs", "groups", "workers", "oversubscribed", "seed"))
        by_instance[inst][r["algorithm"]] = tuple(r[c] for c in columns)
    out: Counter = Counter()
    for plans in by_instance.values():
        if "lp-rounding" not in plans:
            continue
        out["instances"] += 1
        for b in ORDER[1:]:
            if plans.get(b) == plans["lp-rounding"]:
                out[b] += 1
                break
    return out


def bound_tiers(rows: Sequence[dict], algorithm: str) -> str:
    """The link tiers that most often bound `algorithm`'s λ in `rows`."""
    tiers: Counter = Counter()
    for r in rows:
        if r["algorithm"] == algorithm and r.get("lambda_bound_by"):
            tiers.update(r["lambda_bound_by"].split(";"))
    return " and ".join(t for t, _ in tiers.most_common(2)) or "—"


def _variant_text(rows: list[dict], data_by_variant: dict[str, dict[str, list[Stat]]], x_name: str,
                  metric: str, f: Callable[[float], str], column: str, x_column: str,
                  prefix: dict[str, str] | None = None) -> list[str]:
    out = []
    for v, label in VARIANTS:
        data = data_by_variant.get(v)
        if not data:
            continue
        xs = sorted({s.x for st in data.values() for s in st})
        strict, ties, behind = standing(data)
        total = len(data.get("lp-rounding", []))
        first, last = xs[0], xs[-1]
        line = (
            f"*{label.split(' (')[0].capitalize()}:* " + (prefix or {}).get(v, "") +
            f"At {x_name} = {first:g} the means of {metric} are "
            f"{means_text(at_x(data, first), f)}; at {x_name} = {last:g} they are {means_text(at_x(data, last), f)}. "
            f"lp-rounding's mean is the highest alone at {strict} of {total} points and tied for the highest at "
            f"{ties['']}"
        )
        partners = [(a, n) for a, n in ties.items() if a]
        if partners:
            line += " (" + ", ".join(f"with {a} at {n}" for a, n in sorted(partners, key=lambda t: _algo_rank(t[0]))) + ")"
        if behind:
            line += f"; it is behind at {len(behind)} ({'; '.join(behind)})"
        line += "."
        vrows = [r for r in rows if r["oversubscribed"] == v]
        at_last = [r for r in vrows if float(r[x_column]) == last]
        line += (f" At {x_name} = {last:g} λ is bound mostly by these links: " + "; ".join(
            f"{a}: {bound_tiers(at_last, a)}" for a in sorted({r['algorithm'] for r in at_last}, key=_algo_rank)
            if a != "unicast") + ".")
        line += (f" Instance by instance, lp-rounding's {metric} against each baseline is higher/equal/lower: "
                 f"{head_to_head(vrows, column)}.")
        host, n = host_bound_share(vrows)
        if n:
            line += (f" lp-rounding's λ is bound by host links only (a PS uplink or a busy worker's downlink, which "
                     f"no tree can relieve) in {host} of its {n} instances.")
        same = same_plan(vrows)
        copied = [(b, same[b]) for b in ORDER[1:] if same[b]]
        if copied:
            line += (" Its plan is identical in λ, throughput, traffic and table use to " +
                     ", ".join(f"{b}'s in {n}" for b, n in copied) +
                     f" of {same['instances']} instances: lp-rounding also evaluates the baselines' plans and "
                     "keeps the best by (λ, throughput) (docs/algorithm.md §5, step 4), so there its own rounded "
                     "plan was no better, and its traffic stage (step 5) found no structure with fewer copies "
                     "that fits.")
        out.append(line)
    return out


def _plot_variants(panels, rows: list[dict], x: Callable[[dict], float], y: Callable[[dict], float | None],
                    xlabel: str) -> dict:
    """One log–log panel per core variant (full bisection, oversubscribed) of y over x;
    returns variant -> the plotted series."""
    by_variant = {}
    for ax, (v, label) in panels:
        data = series([r for r in rows if r["oversubscribed"] == v], x, y)
        by_variant[v] = data
        plot_series(ax, data, log_x=True)
        ax.set_xscale("log", base=2)
        _plain_log_y(ax)
        xs = sorted({s.x for st in data.values() for s in st})
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.set_title(label)
        ax.set_xlabel(xlabel)
    return by_variant


def fig_lambda_vs_jobs(ctx: Context) -> str | None:
    opened = _sweep_figure(ctx, "jobs", "λ vs number of jobs (fat-tree k={k}, G={groups} on every switch)")
    if opened is None:
        return None
    rows, fig, panels = opened
    by_variant = _plot_variants(panels, rows, lambda r: float(r["jobs"]), lambda r: num(r, "lambda"), "number of jobs")
    panels[0][0].set_ylabel("λ: share of its demand every job gets (log)")
    _legend(panels[0][0])
    return _variant_section(
        ctx, fig, "fig1-lambda-vs-jobs.png", "## Figure 1. How does λ fall as jobs are added?", "λ vs number of jobs",
        f"Run by {ctx.ran('jobs')}. Both core variants are shown. On the full-bisection fat-tree the best λ is "
        "usually set by host links (a worker's downlink carries one copy of each of its jobs, a PS's uplink one "
        "copy per replication it does itself, whatever the tree), so the best algorithms can only tie there; "
        "the oversubscribed core makes the choice of core and of replication points matter, and the fixed, small "
        "G makes the tables fill as jobs are added. Where lp-rounding ties, it is with a plan that is already "
        "optimal for λ: the host links allow no more.",
        _variant_text(rows, by_variant, "jobs", "λ", lambda v: f"{v:.4f}", "lambda", "jobs"),
    )


def fig_lambda_vs_groups(ctx: Context) -> str | None:
    opened = _sweep_figure(ctx, "groups", "λ vs replication groups per switch (fat-tree k={k}, {jobs} jobs)")
    if opened is None:
        return None
    rows, fig, panels = opened
    by_variant = {}
    for ax, (v, label) in panels:
        data = series([r for r in rows if r["oversubscribed"] == v], lambda r: float(r["groups"]), lambda r: num(r, "lambda"))
        by_variant[v] = data
        plot_series(ax, data, log_x=True)
        ax.set_xscale("symlog", base=2, linthresh=1, linscale=0.5)
        xs = sorted({s.x for st in data.values() for s in st})
        ax.set_xticks(xs, [f"{x:g}" for x in xs], rotation=45 if len(xs) > 6 else 0)
        ax.set_xlim(-0.4, max(xs) * 1.4)
        ax.set_title(label)
        ax.set_xlabel("G: replication groups on every switch")
        ax.set_ylim(bottom=0)
    panels[0][0].set_ylabel("λ: share of its demand every job gets")
    _legend(panels[0][0])
    notes: dict[str, str] = {}
    for v, label in VARIANTS:
        data = by_variant.get(v)
        if not data or "lp-rounding" not in data:
            continue
        lp = data["lp-rounding"]
        top = lp[-1].mean
        parts = []
        for a, st in data.items():
            if a == "unicast":
                continue
            best = st[-1].mean
            r = next((s.x for s in st if s.mean >= 0.99 * best), None)
            parts.append(f"{a} G={r:g}" if r is not None else a)
        notes[v] = (
            f"Reaching 99% of its own λ at the largest G takes {', '.join(parts)}; lp-rounding's λ is "
            f"{top:.4f} at G = {lp[-1].x:g}. "
        )
    return _variant_section(
        ctx, fig, "fig2-lambda-vs-groups.png", "## Figure 2. How many replication groups per switch does multicast need?",
        "λ vs per-switch group capacity G",
        f"Run by {ctx.ran('groups')}. The x axis is linear between 0 and 1 and logarithmic above. Both core "
        "variants are shown for the reason given under figure 1: with full bisection the host links cap λ as soon "
        "as the tables allow multicast at all; with the oversubscribed core, which core each job's tree uses and "
        "where it replicates decide λ.",
        _variant_text(rows, by_variant, "G", "λ", lambda v: f"{v:.4f}", "lambda", "groups", notes),
    )


def fig_throughput_vs_workers(ctx: Context) -> str | None:
    opened = _sweep_figure(ctx, "workers", "Aggregate throughput vs workers per job (fat-tree k={k}, {jobs} jobs, G={groups})")
    if opened is None:
        return None
    rows, fig, panels = opened
    by_variant = _plot_variants(panels, rows, lambda r: float(r["workers"]),
                                 lambda r: (num(r, "throughput_bps") or 0.0) / 1e9, "workers per job (every job the same)")
    panels[0][0].set_ylabel("aggregate throughput Σ r_j (Gbit/s, log)")
    _legend(panels[0][0])
    return _variant_section(
        ctx, fig, "fig3-throughput-vs-workers.png", "## Figure 3. What aggregate throughput do the jobs get as they grow wider?",
        "aggregate throughput vs workers per job",
        f"Run by {ctx.ran('workers')}. Every job has exactly the number of workers on the x axis. Aggregate "
        "throughput is Σ r_j after max-min filling; lp-rounding maximises λ (the `max-concurrent` objective) and "
        "only then fills spare capacity, so a baseline whose λ is lower can still reach a higher sum, by giving "
        "more to the jobs that are not on a bottleneck.",
        _variant_text(rows, by_variant, "workers", "aggregate throughput (Gbit/s)", lambda v: f"{v:.1f}", "throughput_bps",
                      "workers"),
    )


def fig_traffic(ctx: Context) -> str | None:
    sources = [(sid, x, xl) for sid, x, xl in (
        ("groups", "groups", "G: replication groups on every switch (" + _fixed(ctx.rows, "groups", "jobs") + " jobs)"),
        ("workers", "workers", "workers per job (G=" + _fixed(ctx.rows, "workers", "groups") + ")"),
    ) if sweep_rows(ctx.rows, sid)]
    if not sources:
        return None
    plt = _plt()
    all_rows = [r for sid, _, _ in sources for r in sweep_rows(ctx.rows, sid)]
    variants = variants_of(all_rows)
    fig, axes = plt.subplots(len(variants), len(sources), figsize=(6.2 * len(sources), 4.3 * len(variants)),
                             squeeze=False, sharey="row")
    fig.suptitle("Downstream traffic saved over unicast (bytes on all links per byte of model pushed)")
    summary: dict[tuple[str, str], dict[str, list[Stat]]] = {}
    for i, (v, label) in enumerate(variants):
        for j, (sid, col, xlabel) in enumerate(sources):
            ax = axes[i][j]
            rows = [r for r in sweep_rows(ctx.rows, sid, v) if r["algorithm"] != "unicast"]
            data = series(rows, lambda r, c=col: float(r[c]), lambda r: num(r, "downstream_saving_pct"))
            summary[(sid, v)] = data
            plot_series(ax, data, log_x=True)
            if col == "groups":
                ax.set_xscale("symlog", base=2, linthresh=1, linscale=0.5)
                xs = sorted({s.x for st in data.values() for s in st})
                ax.set_xlim(-0.4, max(xs) * 1.4 if xs else 2)
            else:
                ax.set_xscale("log", base=2)
                xs = sorted({s.x for st in data.values() for s in st})
            ax.set_xticks(xs, [f"{x:g}" for x in xs], rotation=45 if len(xs) > 8 else 0)
            ax.axhline(0, color=STYLE["unicast"][0], linestyle=":", linewidth=1.2, label="unicast (0%)")
            ax.set_title(f"{label}\nvs {xlabel.split(':')[0].split(' (')[0]}", fontsize=11)
            ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel("traffic saved vs unicast (%)")
    _legend(axes[0][0])
    lines = []
    most = points = 0
    for (sid, v), data in summary.items():
        label = dict(VARIANTS)[v].split(" (")[0]
        if not data:
            continue
        xs = sorted({s.x for st in data.values() for s in st})
        lo_x = next((x for x in xs if x > 0), xs[0])
        hi_x = xs[-1]
        x_name = "G" if sid == "groups" else "workers per job"
        line = (f"*{label.capitalize()}, against {x_name}:* mean saving over unicast at {x_name} = {lo_x:g}: "
                f"{means_text(at_x(data, lo_x), pct)}; at {x_name} = {hi_x:g}: {means_text(at_x(data, hi_x), pct)}.")
        strict, ties, _ = standing({a: st for a, st in data.items() if a != "ilp"})
        most += strict + ties[""]
        points += len(data.get("lp-rounding", []))
        rel = [(b, _relative_traffic(sweep_rows(ctx.rows, sid, v), b)) for b in ("spt", "steiner")]
        rel = [(b, x) for b, x in rel if x is not None]
        if rel:
            line += (" lp-rounding's downstream traffic against " +
                     ", ".join(f"{b}'s: {x:+.1f}%" for b, x in rel) + " (mean over instances).")
        lines.append(line)
    lp_rows = [r for r in all_rows if r["algorithm"] == "lp-rounding"]
    savings = [num(r, "downstream_saving_pct") for r in lp_rows if num(r, "downstream_saving_pct") is not None]
    spread = f"{min(savings):.1f}% to {max(savings):.1f}%" if savings else "—"
    vs_spt = _relative_traffic(all_rows, "spt")
    sweeps = ctx.reference_sweeps()
    compared = [(b, compare_traffic(ctx.rows, b, sweeps)) for b in ("spt", "steiner", "greedy")]
    compared = [(b, c) for b, c in compared if c.instances]
    why = (
        f"lp-rounding saves the most (alone or tied) at {most} of {points} points. It maximises λ, then aggregate "
        "throughput; its last stage (docs/algorithm.md §5, step 5) holds every job's rate and moves jobs to the "
        "structures with the fewest link crossings that still fit every link and table."
    )
    if compared:
        why += (
            f" Over the {distinct_instances(ctx.rows, sweeps)} distinct instances of figures 1–3 (both core "
            "variants), instance by instance: " +
            "; ".join(f"against {b}, {traffic_by_lambda_text(b, c)}" for b, c in compared) + "."
        )
    if any(c.tie_higher for _, c in compared):
        why += (
            " Where it still carries more at equal λ, its traffic stage found no structure with fewer copies "
            "that fits at its rates, which are higher than the baseline's (the throughput above); the stage is a "
            "local search over candidate structures, not an exact minimum, and it never lowers a job's rate to "
            "save traffic."
        )
    related = (
        "The authors of the implemented paper report, in related work, a 14.5–35.8% saving in traffic of another "
        "system over the state of the art. That is a saving against a multicast baseline; the comparable number "
        "here is lp-rounding against spt (the source trees IP multicast builds)"
    )
    if vs_spt is not None:
        related += (f": over all instances of this figure lp-rounding carries {abs(vs_spt):.1f}% "
                    f"{'less' if vs_spt < 0 else 'more'} traffic than spt on average")
        if vs_spt >= 0:
            related += (", so this evaluation does not reproduce a traffic saving over a multicast baseline; "
                        "lp-rounding's gain is in λ and aggregate throughput (figures 1–3), paid for in part with "
                        "traffic")
        else:
            related += ", so its gain in λ and aggregate throughput (figures 1–3) comes with a small traffic saving"
    related += "."
    text = [
        *_figure_head(ctx, fig, "fig4-traffic-vs-unicast.png",
                      "## Figure 4. How much downstream traffic does multicast save over unicast?",
                      "downstream traffic saving over unicast"),
        f"Run by {', and '.join(ctx.ran(sid) for sid, _, _ in sources)} (the same cases as figures 2 and 3, "
        "both core variants). Downstream traffic is D = Σ_j Σ_e m_j(e), every job pushing one byte of model "
        "(PS uplinks included, demands not weighted); the saving is 1 − D / D_unicast on the same instance. "
        f"Over all these instances lp-rounding saves {spread} of unicast's traffic.",
        "",
        *[t + "\n" for t in lines],
        why,
        "",
        related,
    ]
    return "\n".join(text).rstrip()


def _fixed(rows: Sequence[dict], sweep: str, column: str) -> str:
    """The value(s) of `column` in a sweep, as text ("200", or "100/200")."""
    values = sorted({r[column] for r in rows if r["sweep"] == sweep}, key=lambda t: float(t) if t else math.inf)
    return "/".join(v or "∞" for v in values)


def _relative_traffic(rows: Sequence[dict], baseline: str) -> float | None:
    """Mean over instances of D_lp / D_baseline − 1, in %."""
    by_instance: dict[tuple, dict[str, float]] = defaultdict(dict)
    for r in rows:
        d = num(r, "downstream_copies")
        if d:
            by_instance[tuple(r[c] for c in ("k", "jobs", "groups", "workers", "oversubscribed", "seed"))][r["algorithm"]] = d
    ratios = [v["lp-rounding"] / v[baseline] - 1 for v in by_instance.values() if "lp-rounding" in v and baseline in v]
    return 100 * statistics.fmean(ratios) if ratios else None


INSTANCE = ("k", "jobs", "groups", "workers", "oversubscribed", "seed")  # a sweep's point may recur in another


@dataclass(frozen=True)
class TrafficCompare:
    """lp-rounding's downstream traffic against a baseline's, split by how their λ compare.

    Relative figures are means over instances of lp/baseline − 1, in %.
    """

    instances: int
    ties: int  # λ equal (within TIE)
    tie_traffic: float | None
    tie_higher: int  # of the ties, those where lp-rounding carries more
    tie_worst: float | None  # the largest excess among them
    tie_throughput: float | None
    higher: int  # lp-rounding's λ higher
    higher_lambda: float | None
    higher_traffic: float | None
    lower: int


def distinct_instances(rows: Sequence[dict], sweeps: Sequence[str]) -> int:
    return len({tuple(r[c] for c in INSTANCE) for r in rows if r["sweep"] in sweeps})


def compare_traffic(rows: Sequence[dict], baseline: str, sweeps: Sequence[str]) -> TrafficCompare:
    """lp-rounding against `baseline` on the distinct instances of `sweeps`."""
    by_instance: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        if r["sweep"] in sweeps:
            by_instance[tuple(r[c] for c in INSTANCE)][r["algorithm"]] = r
    ties: list[tuple[float, float]] = []
    higher: list[tuple[float, float]] = []
    lower = 0
    for plans in by_instance.values():
        a, b = plans.get("lp-rounding"), plans.get(baseline)
        if a is None or b is None:
            continue
        la, lb, da, db = num(a, "lambda"), num(b, "lambda"), num(a, "downstream_copies"), num(b, "downstream_copies")
        if la is None or lb is None or not da or not db:
            continue
        traffic = 100 * (da / db - 1)
        if abs(la - lb) <= TIE * max(la, lb, 1e-300):
            ta, tb = num(a, "throughput_bps"), num(b, "throughput_bps")
            ties.append((traffic, 100 * (ta / tb - 1) if ta and tb else math.nan))
        elif la > lb:
            higher.append((traffic, 100 * (la / lb - 1) if lb > 0 else math.inf))
        else:
            lower += 1

    def mean(xs: Sequence[float]) -> float | None:
        finite = [x for x in xs if math.isfinite(x)]
        return statistics.fmean(finite) if finite else None

    worse = [t for t, _ in ties if t > 100 * TIE]
    return TrafficCompare(
        instances=len(ties) + len(higher) + lower,
        ties=len(ties),
        tie_traffic=mean([t for t, _ in ties]),
        tie_higher=len(worse),
        tie_worst=max(worse) if worse else None,
        tie_throughput=mean([u for _, u in ties]),
        higher=len(higher),
        higher_lambda=mean([u for _, u in higher]),
        higher_traffic=mean([t for t, _ in higher]),
        lower=lower,
    )


def _signed(x: float, up: str, down: str) -> str:
    if x == 0:
        return f"0% {up}"
    if abs(x) < 0.05:  # would print as 0.0%
        return f"{abs(x):.2g}% {up if x > 0 else down}"
    return f"{abs(x):.1f}% {up if x > 0 else down}"


def traffic_by_lambda_text(baseline: str, c: TrafficCompare) -> str:
    """How lp-rounding's traffic compares with `baseline`'s where λ ties and where it is higher."""
    parts = []
    if c.ties:
        tie = f"where λ ties ({c.ties} of {c.instances}) it carries {_signed(c.tie_traffic or 0.0, 'more', 'less')} traffic"
        tie += (f" (more in {c.tie_higher} of them, at most {c.tie_worst:.1f}% more)" if c.tie_higher
                else " (more in none of them)")
        if c.tie_throughput is not None:
            tie += f" at {_signed(c.tie_throughput, 'higher', 'lower')} aggregate throughput"
        parts.append(tie)
    if c.higher:
        parts.append(f"where its λ is higher ({c.higher}, by {c.higher_lambda:.1f}% on average) it carries "
                     f"{_signed(c.higher_traffic or 0.0, 'more', 'less')} traffic")
    if c.lower:
        parts.append(f"its λ is lower in {c.lower}")
    return ", ".join(parts) if parts else "no instance in common"


def fig_lp_ratio(ctx: Context) -> str | None:
    sweeps = ctx.reference_sweeps()
    rows = [r for r in ctx.rows if r["sweep"] in sweeps and num(r, "lambda_over_lp") is not None]
    lp = [r for r in rows if r["algorithm"] == "lp-rounding"]
    if not lp:
        return None
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12.4, 4.8))
    fig.suptitle("How close is λ to the LP bound? (λ / lp-rounding's LP bound on the same instance)")
    ratios = sorted(num(r, "lambda_over_lp") for r in lp)
    lo = min(0.9, math.floor(min(ratios) * 50) / 50)
    bins = [lo + i * (1.0 - lo) / 20 for i in range(21)]
    bins[-1] = 1.0 + 1e-9
    counts, edges, _ = ax1.hist([min(x, 1.0) for x in ratios], bins=bins, color=STYLE["lp-rounding"][0], edgecolor="white")
    for c, left, right in zip(counts, edges[:-1], edges[1:]):
        if c:
            ax1.annotate(f"{int(c)}", xy=((left + right) / 2, c), ha="center", va="bottom", fontsize=9)
    ax1.set_ylim(0, max(counts) * 1.12)
    ax1.axvline(QUALITY_GOAL, color="black", linestyle="--", linewidth=1.2, label=f"median goal {QUALITY_GOAL}")
    ax1.set_xlabel("λ / LP bound (1 = the fractional optimum)")
    ax1.set_ylabel("instances")
    ax1.set_title(f"lp-rounding, {len(ratios)} instances")
    ax1.legend(loc="upper left")
    by_algo: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_algo[r["algorithm"]].append(num(r, "lambda_over_lp"))
    for algorithm in sorted(by_algo, key=_algo_rank):
        vals = sorted(by_algo[algorithm])
        colour, _ = STYLE.get(algorithm, ("#9467bd", "v"))
        n = len(vals)
        ax2.step(vals, [(i + 1) / n for i in range(n)], where="post", color=colour,
                 linewidth=2.4 if algorithm == "lp-rounding" else 1.4, label=f"{algorithm} ({n})")
    ax2.axvline(QUALITY_GOAL, color="black", linestyle="--", linewidth=1.2)
    ax2.set_xlim(0, 1.02)
    ax2.set_ylim(0, 1.02)
    ax2.set_xlabel("λ / LP bound")
    ax2.set_ylabel("share of instances with λ / LP ≤ x")
    ax2.set_title("every algorithm (cumulative distribution)")
    ax2.legend(loc="upper left")
    worst = min(lp, key=lambda r: num(r, "lambda_over_lp"))
    med = statistics.median(ratios)
    at_one = sum(1 for x in ratios if x >= 1 - 1e-3)
    meets = sum(1 for x in ratios if x >= QUALITY_GOAL)
    tenth = ratios[max(0, math.ceil(0.1 * len(ratios)) - 1)]
    others = ", ".join(
        f"{a} {statistics.median(v):.3f}" for a, v in sorted(by_algo.items(), key=lambda kv: _algo_rank(kv[0])) if a != "lp-rounding"
    )
    over = "oversubscribed" if worst["oversubscribed"] == "1" else "full bisection"
    g = worst["groups"] or "∞"
    text = [
        *_figure_head(ctx, fig, "fig5-lambda-over-lp.png", "## Figure 5. How close does lp-rounding come to the fractional limit?",
                      "distribution of λ / LP bound"),
        f"All instances of sweeps {', '.join(f'`{s}`' for s in sweeps)} of `{ctx.command}`. The LP bound is the "
        "value of the LP relaxation over the whole structure family (docs/algorithm.md §4), an upper bound on "
        "λ of any plan, fractional or integral, so λ / LP is a certificate: the plan is at least that close to "
        "the optimum. Every algorithm's λ is divided by the bound lp-rounding computed on the same instance.",
        "",
        f"lp-rounding: median λ/LP {med:.3f}, 10th percentile {tenth:.3f}, minimum {min(ratios):.3f}; "
        f"{at_one} of {len(ratios)} instances within 0.1% of the bound and {meets} ({meets / len(ratios):.0%}) at "
        f"or above {QUALITY_GOAL}. The worst is sweep `{worst['sweep']}`, k={worst['k']}, {worst['jobs']} jobs, "
        f"G={g}, workers {worst['workers']}, {over}, seed {worst['seed']}. Medians of the others: {others}. "
        "Where lp-rounding stays below 1 the gap is the price of integrality (one structure per job) and of hard "
        "tables (the LP may split a job across structures and share a table entry fractionally); the bound does "
        "not say how much of the gap an exact solver would close.",
    ]
    return "\n".join(text)


@dataclass
class _ScalePanels:
    """The two log–log panels of a timed metric: vs k (left) and vs jobs (right)."""

    fig: object
    ax_k: object
    ax_jobs: object
    rows: list[dict]
    k_rows: list[dict]
    j_rows: list[dict]
    k_data: dict  # algorithm -> points along k
    jobs_data: list[tuple[int, dict]]  # (k, algorithm -> points along jobs)
    jobs_at: dict[int, int]  # k -> jobs of the k sweep


def _scale_panels(ctx: Context, column: str, title: str, k_tick: Callable[[float, dict[int, int]], str]) -> _ScalePanels | None:
    """Plot `column` of the timed sweeps on both panels; None when no row has it.
    The caller adds goals, labels, legends and saves."""
    timed = {s.id for s in ctx.suite.sweeps if s.timed}
    rows = [r for r in ctx.rows if r["sweep"] in timed and num(r, column) is not None]
    if not rows:
        return None
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12.4, 4.8), sharey=True)
    fig.suptitle(title)
    k_rows = [r for r in rows if r["sweep"].startswith("scale-k")]
    j_rows = [r for r in rows if r["sweep"].startswith("scale-jobs")]
    k_data: dict = {}
    jobs_at: dict[int, int] = {}
    if k_rows:
        k_data = series(k_rows, lambda r: float(r["k"]), lambda r: num(r, column))
        plot_series(ax1, k_data, log_x=True, span=0.03)
        xs = sorted({s.x for st in k_data.values() for s in st})
        ax1.set_xscale("log", base=2)
        jobs_at = {int(r["k"]): int(r["jobs"]) for r in k_rows}
        ax1.set_xticks(xs, [k_tick(x, jobs_at) for x in xs])
        ax1.set_xlabel("fat-tree k (jobs ≈ 0.12 × hosts)")
    ax1.set_title("vs k")
    j_ks = sorted({int(r["k"]) for r in j_rows})
    jobs_data = []
    for i, k_value in enumerate(j_ks):
        sub = [r for r in j_rows if int(r["k"]) == k_value]
        data = series(sub, lambda r: float(r["jobs"]), lambda r: num(r, column))
        plot_series(ax2, data, log_x=True, span=0.03, suffix=f" (k={k_value})" if len(j_ks) > 1 else "",
                    linestyle=("-", "--", ":", "-.")[i % 4])
        jobs_data.append((k_value, data))
    if j_rows:
        ax2.set_xscale("log", base=2)
        xs = sorted({float(r["jobs"]) for r in j_rows})
        ax2.set_xticks(xs, [f"{x:g}" for x in xs])
    ax2.set_title("vs jobs")
    for ax in (ax1, ax2):
        _plain_log_y(ax)
    return _ScalePanels(fig, ax1, ax2, rows, k_rows, j_rows, k_data, jobs_data, jobs_at)


def fig_runtime(ctx: Context) -> str | None:
    p = _scale_panels(ctx, "runtime_s", "Planner run time (wall clock, one process, log–log)",
                      lambda x, jobs_at: f"{x:g}\n({jobs_at[int(x)]} jobs)")
    if p is None:
        return None
    lines = []
    for a, st in p.k_data.items():
        slope = loglog_exponent([s.x for s in st if s.x >= 8], [s.mean for s in st if s.x >= 8])
        lines.append(f"{a}: " + ", ".join(f"k={s.x:g} ({p.jobs_at[int(s.x)]} jobs) {s.mean:.3g} s" for s in st)
                     + (f"; run time grows like k^{slope:.2f} from k=8 on (hosts grow like k³)" if slope else ""))
    for k_value, data in p.jobs_data:
        for a, st in data.items():
            slope = loglog_exponent([s.x for s in st], [s.mean for s in st])
            lines.append(f"{a}, k={k_value}: " + ", ".join(f"{s.x:g} jobs {s.mean:.3g} s" for s in st)
                         + (f"; grows like jobs^{slope:.2f}" if slope else ""))
    if p.j_rows:
        ks = values_text(int(r["k"]) for r in p.j_rows)
        p.ax_jobs.set_xlabel(f"number of jobs (k={ks[1:-1]})")
    for ax in (p.ax_k, p.ax_jobs):
        for value, label in TIME_GOALS:
            ax.axhline(value, color="black", linestyle="--" if value == 1 else "-.", linewidth=1.1)
            ax.annotate(label, xy=(0.01, value), xycoords=("axes fraction", "data"), fontsize=9,
                        va="top" if value > 1 else "bottom", xytext=(0, -2 if value > 1 else 2), textcoords="offset points")
    p.ax_k.set_ylabel("run time (s, log)")
    _legend(p.ax_k, "lower right", own=bool(p.k_rows))
    if len(p.jobs_data) > 1 or not p.k_rows:
        _legend(p.ax_jobs, "best", own=True)
    goals = []
    for k_value, jobs, goal in ((16, 200, 1.0), (32, 1000, 10.0)):
        vals = [num(r, "runtime_s") for r in p.rows if r["algorithm"] == "lp-rounding" and int(r["k"]) == k_value and int(r["jobs"]) == jobs]
        if vals:
            mean = statistics.fmean(vals)
            goals.append(f"lp-rounding at k={k_value} with {jobs} jobs: mean {mean:.2f} s over {len(vals)} runs "
                         f"(min {min(vals):.2f}, max {max(vals):.2f}); goal ≤ {goal:g} s "
                         f"{'met' if mean <= goal else 'not met'}.")
    timed = [s for s in ctx.suite.sweeps if s.timed]
    text = [
        *_figure_head(ctx, p.fig, "fig6-runtime.png", "## Figure 6. How does the planner's run time grow?",
                      "run time vs k and vs jobs"),
        f"Run by {'; '.join(ctx.ran(s.id) for s in timed)}. These cases are timed: each runs alone, in a "
        "freshly forked process that has already planned a tiny warm-up instance (so lazy imports are not "
        "timed), one case at a time, so no other case of the sweep competes for the cores; other programs on "
        f"this {os.cpu_count()}-CPU machine may. The dashed lines mark the goals: 1 s for k=16 with 200 jobs, "
        "10 s for k=32 with 1000 jobs.",
        "",
        *[f"- {line}" for line in lines],
        "",
        " ".join(goals) if goals else "The goal sizes are not in this suite.",
    ]
    return "\n".join(text)


def fig_memory(ctx: Context) -> str | None:
    p = _scale_panels(ctx, "peak_rss_mib", "Peak memory of the planning process (RSS, log–log)",
                      lambda x, jobs_at: f"{x:g}")
    if p is None:
        return None
    lines = [f"{a}: " + ", ".join(f"k={s.x:g} {s.mean:.0f} MiB" for s in st) for a, st in p.k_data.items()]
    for k_value, data in p.jobs_data:
        for a, st in data.items():
            lines.append(f"{a}, k={k_value}: " + ", ".join(f"{s.x:g} jobs {s.mean:.0f} MiB" for s in st))
    if p.j_rows:
        p.ax_jobs.set_xlabel("number of jobs")
    for ax in (p.ax_k, p.ax_jobs):
        ax.axhline(MEMORY_GOAL_MIB, color="black", linestyle="--", linewidth=1.1)
        ax.annotate("2 GiB goal: k=32, 1000 jobs", xy=(0.01, MEMORY_GOAL_MIB), xycoords=("axes fraction", "data"),
                    va="top", fontsize=9, xytext=(0, -2), textcoords="offset points")
    p.ax_k.set_ylabel("peak RSS (MiB, log)")
    _legend(p.ax_k, "center right", own=bool(p.k_rows))
    if len(p.jobs_data) > 1 or not p.k_rows:
        _legend(p.ax_jobs, "center right", own=True)
    base = [num(r, "peak_rss_mib") - (num(r, "case_rss_mib") or 0) for r in p.rows]
    text = [
        *_figure_head(ctx, p.fig, "fig7-memory.png", "## Figure 7. How does the planner's memory grow?",
                      "peak RSS vs k and vs jobs"),
        f"The same timed cases as figure 6. Peak RSS is `VmHWM` of the forked process that planned the case: the "
        f"interpreter, numpy, scipy and networkx (about {statistics.median(base):.0f} MiB before the instance is "
        "built), the instance and the plan. The dashed line is the 2 GiB goal for k=32 with 1000 jobs.",
        "",
        *[f"- {line}" for line in lines],
    ]
    return "\n".join(text)


FIGURES: tuple[Callable[[Context], str | None], ...] = (
    fig_lambda_vs_jobs,
    fig_lambda_vs_groups,
    fig_throughput_vs_workers,
    fig_traffic,
    fig_lp_ratio,
    fig_runtime,
    fig_memory,
)


def draw_all(suite, rows: list[dict], figures_dir: Path, doc: Path, command: str,
             runs: list[dict] | None = None,
             more: Sequence[Callable[[Context], str | None]] = ()) -> list[str]:
    """Draw every figure the rows allow, FIGURES then `more` (figures of modules that build
    on this one: evaluate_regimes); one markdown section per figure drawn."""
    ctx = Context(suite, [r for r in rows if r["suite"] == suite.name], figures_dir, doc, command, runs)
    sections = []
    for figure in (*FIGURES, *more):
        section = figure(ctx)
        if section:
            sections.append(section)
    return sections
