"""`python -m controller evaluate`: the smoke suite writes a well-formed CSV, every figure
and the page; a rerun recomputes nothing; bad input exits 2 with one `error:` line."""

from __future__ import annotations

import csv
import json
import re
import struct
import time
from pathlib import Path

import pytest

from controller.app.cli import main
from controller.offline.evaluate import COLUMNS, KEY, LEGACY_COLUMNS, OPTIONAL, REGIME_KEY, SMOKE, sweep_seeds

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIGURES = (
    "fig1-lambda-vs-jobs.png",
    "fig2-lambda-vs-groups.png",
    "fig3-throughput-vs-workers.png",
    "fig4-traffic-vs-unicast.png",
    "fig5-lambda-over-lp.png",
    "fig6-runtime.png",
    "fig7-memory.png",
    "fig8-regimes.png",
)


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    assert data.rstrip(b"\x00").endswith(b"IEND\xaeB`\x82"), f"{path.name} is truncated"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("evaluate")
    start = time.perf_counter()
    code = main(["evaluate", "--suite", "smoke", "--out", str(out), "--workers", "2"])
    first_s = time.perf_counter() - start
    assert code == 0
    return out, first_s


def test_smoke_csv_has_the_columns_and_one_row_per_instance_algorithm_seed(smoke):
    out, first_s = smoke
    assert first_s < 60
    header, rows = read_csv(out / "evaluation-smoke.csv")
    assert tuple(header) == COLUMNS
    keys = [tuple(r[c] for c in KEY) for r in rows]
    assert len(keys) == len(set(keys)), "a row was written twice"
    required = sum(
        len(sweep.points) * sweep_seeds(sweep, SMOKE.seeds, False) * len([a for a in sweep.algorithms if a not in OPTIONAL])
        for sweep in SMOKE.sweeps
    )
    optional = [r for r in rows if r["algorithm"] in OPTIONAL]
    assert len(rows) - len(optional) == required
    assert optional, "ilp fits some k=4 instances of the smoke suite"
    for r in rows:
        assert r["suite"] == "smoke"
        lam = float(r["lambda"])
        assert 0 < lam <= 1 + 1e-9
        assert float(r["throughput_bps"]) > 0 and float(r["link_load_bps"]) > 0
        assert float(r["runtime_s"]) >= 0
        assert int(r["downstream_copies"]) > 0 and int(r["unicast_copies"]) > 0
        assert 0 <= int(r["groups_used"]) <= int(r["entries_used"])
        if r["groups"] == "0":
            assert int(r["groups_used"]) == 0
        # λ never exceeds lp-rounding's LP bound on the same instance (an upper bound over the family)
        assert float(r["lambda_over_lp"]) <= 1 + 1e-6
        if r["algorithm"] == "unicast":
            assert float(r["downstream_saving_pct"]) == 0.0
            assert int(r["groups_used"]) == 0 and int(r["entries_used"]) == 0
        sweep = next(s for s in SMOKE.sweeps if s.id == r["sweep"])
        if sweep.timed:
            assert float(r["peak_rss_mib"]) > 0
        else:
            assert r["peak_rss_mib"] == ""


def test_smoke_draws_every_figure_as_a_real_png(smoke):
    out, _ = smoke
    for name in FIGURES:
        path = out / "figures" / name
        assert path.exists(), name
        assert path.stat().st_size > 20_000, f"{name} is suspiciously small"
        width, height = png_size(path)
        assert width >= 600 and height >= 400, (name, width, height)


def test_smoke_page_is_written_into_the_out_directory(smoke):
    out, _ = smoke
    page = (out / "evaluation.md").read_text(encoding="utf-8")
    assert page.startswith("# Evaluation")
    assert re.search(r"^python -m controller evaluate --suite smoke --out \S+ --workers 2$", page, re.M)
    headings = re.findall(r"^## Figure (\d+)\.", page, re.M)
    assert headings == [str(i) for i in range(1, len(FIGURES) + 1)]
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    assert len(images) == len(FIGURES)
    for rel in images:
        assert (out / rel).exists(), rel
    for name in ("lp-rounding", "unicast", "spt", "steiner", "greedy"):
        assert name in page


def test_rerun_recomputes_nothing(smoke, capsys):
    out, _ = smoke
    csv_path = out / "evaluation-smoke.csv"
    before = csv_path.read_bytes()
    mtime = csv_path.stat().st_mtime_ns
    start = time.perf_counter()
    assert main(["evaluate", "--suite", "smoke", "--out", str(out), "--workers", "2"]) == 0
    elapsed = time.perf_counter() - start
    assert "nothing to run" in capsys.readouterr().err
    assert csv_path.read_bytes() == before and csv_path.stat().st_mtime_ns == mtime
    assert elapsed < 30  # redrawing only
    runs = json.loads((out / "evaluation-smoke-runs.json").read_text(encoding="utf-8"))
    assert len(runs) == 1 and not runs[0]["interrupted"]  # a redraw is not a run
    assert runs[0]["rows"] == len(read_csv(csv_path)[1])
    assert "nothing computed" in (out / "evaluation.md").read_text(encoding="utf-8")


def test_interrupted_sweep_resumes_with_the_missing_cases_only(smoke, tmp_path, capsys):
    out, _ = smoke
    header, rows = read_csv(out / "evaluation-smoke.csv")
    # keep every row but those of one case, and leave a line cut short, as Ctrl-C can
    dropped = ("groups", "1", "0")  # sweep, G, seed
    kept = [r for r in rows if (r["sweep"], r["groups"], r["seed"]) != dropped or r["oversubscribed"] == "1"]
    assert len(rows) - len(kept) == 5
    partial = tmp_path / "evaluation-smoke.csv"
    with partial.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(kept)
        f.write("smoke,groups,4,6")
    doc = tmp_path / "page.md"
    assert main(["evaluate", "--suite", "smoke", "--out", str(tmp_path), "--doc", str(doc), "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "1 cases to run" in err
    _, again = read_csv(partial)
    assert len(again) == len(rows)
    assert sorted(tuple(r[c] for c in KEY) for r in again) == sorted(tuple(r[c] for c in KEY) for r in rows)
    assert doc.exists() and not (tmp_path / "evaluation.md").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "--suite", "nope"],
        ["evaluate"],
        ["evaluate", "--suite", "smoke", "--workers", "0"],
        ["evaluate", "--suite", "smoke", "--seeds", "x"],
    ],
)
def test_bad_arguments_exit_2_with_one_error_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1


def test_bad_paths_exit_2(tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("x")
    assert main(["evaluate", "--suite", "smoke", "--out", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and len(err.strip().splitlines()) == 1
    assert main(["evaluate", "--suite", "smoke", "--out", str(tmp_path), "--doc", str(tmp_path / "no" / "x.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --doc") and "does not exist" in err


def test_a_csv_with_other_columns_is_refused(tmp_path, capsys):
    (tmp_path / "evaluation-smoke.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    assert main(["evaluate", "--suite", "smoke", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "columns" in err


def test_traffic_is_compared_where_lambda_ties_and_where_it_is_higher():
    from controller.offline.evaluate_figures import compare_traffic, traffic_by_lambda_text

    def row(sweep, seed, algorithm, lam, copies, throughput=1e9, groups="8"):
        return {"sweep": sweep, "k": "16", "jobs": "200", "groups": groups, "workers": "4-32",
                "oversubscribed": "0", "seed": str(seed), "algorithm": algorithm, "lambda": str(lam),
                "downstream_copies": str(copies), "throughput_bps": str(throughput)}

    rows = [
        # a tie: 10% less traffic at 20% more throughput
        row("jobs", 0, "lp-rounding", 0.5, 90, 1.2e9), row("jobs", 0, "spt", 0.5, 100),
        # the same instance again in another sweep: counted once
        row("groups", 0, "lp-rounding", 0.5, 90, 1.2e9), row("groups", 0, "spt", 0.5, 100),
        # a tie with 5% more traffic
        row("jobs", 1, "lp-rounding", 0.25, 105), row("jobs", 1, "spt", 0.25, 100),
        # λ twice spt's, 20% more traffic
        row("jobs", 2, "lp-rounding", 0.4, 120), row("jobs", 2, "spt", 0.2, 100),
        # a timed sweep is left out
        row("scale-k", 0, "lp-rounding", 0.1, 1), row("scale-k", 0, "spt", 0.1, 100, groups="16"),
    ]
    c = compare_traffic(rows, "spt", ["jobs", "groups"])
    assert (c.instances, c.ties, c.higher, c.lower, c.tie_higher) == (3, 2, 1, 0, 1)
    assert c.tie_traffic == pytest.approx(-2.5)
    assert c.tie_worst == pytest.approx(5.0)
    assert c.tie_throughput == pytest.approx(10.0)
    assert c.higher_lambda == pytest.approx(100.0)
    assert c.higher_traffic == pytest.approx(20.0)
    text = traffic_by_lambda_text("spt", c)
    assert "where λ ties (2 of 3) it carries 2.5% less traffic (more in 1 of them, at most 5.0% more)" in text
    assert "where its λ is higher (1, by 100.0% on average) it carries 20.0% more traffic" in text


def test_a_rerun_keeps_the_section_of_simulate_cluster(smoke):
    """docs/evaluation.md also holds the section `simulate-cluster` writes; `evaluate` keeps it."""
    from controller.offline.cluster_report import MARK_BEGIN, MARK_END, splice

    out, _ = smoke
    page_path = out / "evaluation.md"
    page_path.write_text(splice(page_path.read_text(encoding="utf-8"), "## A cluster over time\nmeasured"),
                         encoding="utf-8")
    assert main(["evaluate", "--suite", "smoke", "--out", str(out), "--workers", "2"]) == 0
    page = page_path.read_text(encoding="utf-8")
    assert page.count(MARK_BEGIN) == page.count(MARK_END) == 1
    assert "## A cluster over time\nmeasured" in page
    assert page.index("## Figure 1.") < page.index(MARK_BEGIN)


# -- the regimes where planning matters (figure 8) ---------------------------------------------------------


def _regime_cells(page: str) -> dict[str, dict[str, str]]:
    """The table of figure 8 in `page`: regime label -> column header -> cell."""
    section = page[page.index("## Figure 8."):]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")]
    assert lines and lines[0].startswith("| regime |"), "figure 8 has no regime table"
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    table = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        table[cells[0]] = dict(zip(header, cells))
    return table


def test_smoke_covers_the_regimes_sweep(smoke):
    out, _ = smoke
    _, rows = read_csv(out / "evaluation-smoke.csv")
    regimes = [r for r in rows if r["sweep"] == "regimes"]
    assert {(r["fabric"], r["core_ratio"], r["budgets"]) for r in regimes} == {
        ("fat-tree", "1", "mixed"), ("fat-tree", "2", "mixed"), ("fat-tree", "4", "mixed"), ("clos-tiny", "1", "mixed")}
    assert {r["algorithm"] for r in regimes} == {"lp-rounding", "unicast", "spt", "steiner", "greedy"}
    # the reference sweeps keep the reference workloads' values in the new columns
    for r in rows:
        if r["sweep"] != "regimes":
            assert (r["fabric"], r["budgets"]) == ("fat-tree", "uniform")
            assert r["core_ratio"] == ("2" if r["oversubscribed"] == "1" else "1")
    # lp-rounding keeps the best of its own plan and the baselines' (docs/algorithm.md §5): never below one
    lam = {(r["fabric"], r["core_ratio"], r["seed"], r["algorithm"]): float(r["lambda"]) for r in regimes}
    for (fabric, ratio, seed, algorithm), value in lam.items():
        assert lam[(fabric, ratio, seed, "lp-rounding")] >= value * (1 - 1e-9), (fabric, ratio, seed, algorithm)


def test_the_page_has_the_regime_table_with_the_ratios_of_the_csv(smoke):
    """Every regime of the CSV is a row of figure 8's table; its λ is the mean over the seeds
    and lp / baseline the mean and the min over the seeds of the per-seed ratio, recomputed here."""
    out, _ = smoke
    page = (out / "evaluation.md").read_text(encoding="utf-8")
    table = _regime_cells(page)
    _, rows = read_csv(out / "evaluation-smoke.csv")
    lam: dict[tuple, dict[str, dict[str, float]]] = {}
    for r in rows:
        if r["sweep"] == "regimes":
            label = f"fat-tree k={r['k']}, core {r['core_ratio']}:1" if r["fabric"] == "fat-tree" else r["fabric"]
            lam.setdefault(label, {}).setdefault(r["algorithm"], {})[r["seed"]] = float(r["lambda"])
    assert set(table) == set(lam)
    for label, by_algo in lam.items():
        cells = table[label]
        for algorithm, by_seed in by_algo.items():
            assert cells[f"λ {algorithm}"] == f"{sum(by_seed.values()) / len(by_seed):.4f}"
        lp = by_algo["lp-rounding"]
        for baseline in ("unicast", "spt", "steiner", "greedy"):
            ratios = [lp[s] / by_algo[baseline][s] for s in lp]
            assert cells[f"lp / {baseline}"] == f"{sum(ratios) / len(ratios):.2f}× ({min(ratios):.2f}×)", (label, baseline)
    assert "Why the gap is wide here and narrow in figures 1–3" in page


def test_regime_ratios_are_the_mean_and_min_of_per_seed_ratios():
    from controller.offline.evaluate_regimes import regime_ratios, regime_table

    def row(seed, algorithm, lam):
        return {"sweep": "regimes", "fabric": "fat-tree", "core_ratio": "4", "budgets": "mixed", "k": "8",
                "jobs": "80", "hosts": "128", "seed": str(seed), "algorithm": algorithm, "lambda": str(lam)}

    rows = [row(0, "lp-rounding", 0.2), row(0, "greedy", 0.1), row(1, "lp-rounding", 0.3), row(1, "greedy", 0.3),
            row(2, "lp-rounding", 0.5), row(0, "spt", 0.0)]  # seed 2 has no greedy row; spt's λ is 0
    (stats,) = regime_ratios(rows).values()
    greedy = stats["greedy"]
    # the mean of 2.0 and 1.0 (seed 2 left out), not the ratio of the mean λs (0.25 / 0.2 = 1.25)
    assert (greedy.mean, greedy.min, greedy.max, greedy.seeds) == (pytest.approx(1.5), pytest.approx(1.0),
                                                                   pytest.approx(2.0), 2)
    assert stats["spt"].mean == float("inf")
    table = regime_table(rows)
    assert "| fat-tree k=8, core 4:1 | 128 | 80 | 3 | 0.3333 | 0.0000 | 0.2000 | ∞ (∞) | 1.50× (1.00×) |" in table


def test_a_csv_written_before_the_regime_columns_is_upgraded_and_only_the_regimes_run(smoke, tmp_path, capsys):
    out, _ = smoke
    _, rows = read_csv(out / "evaluation-smoke.csv")
    old = [r for r in rows if r["sweep"] != "regimes"]
    legacy = tmp_path / "evaluation-smoke.csv"
    with legacy.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(LEGACY_COLUMNS)
        w.writerows([r[c] for c in LEGACY_COLUMNS] for r in old)
    assert main(["evaluate", "--suite", "smoke", "--out", str(tmp_path), "--workers", "2"]) == 0
    err = capsys.readouterr().err
    assert "added the columns fabric, core_ratio, budgets" in err
    regime_cases = next(s for s in SMOKE.sweeps if s.id == "regimes")
    assert f"{len(regime_cases.points) * SMOKE.seeds} cases to run" in err
    header, again = read_csv(legacy)
    assert tuple(header) == COLUMNS
    assert sorted(tuple(r[c] for c in KEY) for r in again) == sorted(tuple(r[c] for c in KEY) for r in rows)
    before = {tuple(r[c] for c in KEY): r for r in old}
    for r in again:
        if tuple(r[c] for c in KEY) in before:
            assert r == before[tuple(r[c] for c in KEY)]  # every old row kept as it was, new columns filled
    assert REGIME_KEY == COLUMNS[-3:]
