"""`python -m controller bench`: the quick run writes a complete page; bad flags exit 2."""

from __future__ import annotations

import re

import pytest

from controller.app.cli import main

SECTIONS = (
    "## 1. Quality on the reference workloads",
    "## 2. lp-rounding against the baselines at tight tables",
    "## 3. Speed on this machine",
    "## 4. Growth",
)


def tables(text: str) -> list[list[list[str]]]:
    """The markdown tables of `text`, each as rows of cells (header and separator left out)."""
    found: list[list[list[str]]] = []
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if len(block) >= 3 and re.fullmatch(r"\|(:?-+:?\|)+", block[1]):
            found.append([[c.strip() for c in row.strip("|").split("|")] for row in block[2:]])
        block = []
    return found


def is_number(cell: str) -> bool:
    return re.fullmatch(r"-?\d+(\.\d+)?%?( \(runs [\d.]+–[\d.]+\))?", cell) is not None


@pytest.fixture(scope="module")
def quick_page(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("bench") / "performance.md"
    assert main(["bench", "--quick", "--out", str(out)]) == 0
    assert out.exists()
    return out.read_text(encoding="utf-8")


def test_quick_page_has_the_four_sections_in_order(quick_page):
    positions = [quick_page.find(s) for s in SECTIONS]
    assert all(p >= 0 for p in positions), positions
    assert positions == sorted(positions)


def test_quick_page_states_the_command_and_the_machine(quick_page):
    assert re.search(r"^python -m controller bench --quick --out \S+performance\.md$", quick_page, re.M)
    assert "os.cpu_count()" in quick_page and "Python" in quick_page and "UTC" in quick_page
    assert "goals are not judged" in quick_page


def test_quick_page_tables_are_numeric(quick_page):
    found = tables(quick_page)
    assert len(found) >= 6
    sections = re.split(r"^## ", quick_page, flags=re.M)[1:]
    for section in sections[:4]:
        section_tables = tables(section)
        assert section_tables, section.splitlines()[0]
        numeric = [cell for t in section_tables for row in t for cell in row if is_number(cell)]
        assert len(numeric) >= 3, section.splitlines()[0]
    # §1's summary: a median, a minimum and a 10th percentile, all ratios in [0, 1 + tolerance]
    summary = tables(sections[0])[0]
    all_row = next(row for row in summary if row[0] == "all")
    for cell in all_row[2:5]:
        assert 0.0 <= float(cell) <= 1.0 + 1e-6


def test_quick_page_compares_every_baseline(quick_page):
    section = quick_page.split(SECTIONS[1])[1].split(SECTIONS[2])[0]
    for name in ("lp-rounding", "unicast", "spt", "steiner", "greedy"):
        assert f"| {name} |" in section
    assert "Oversubscribed core" in section and "λ bound by" in section


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--no-such-flag"],
        ["bench", "--seeds", "0"],
        ["bench", "--seeds", "many"],
    ],
)
def test_bad_flags_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1


def test_unwritable_out_directory_exits_2_before_running(tmp_path, capsys):
    assert main(["bench", "--quick", "--out", str(tmp_path / "missing" / "p.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "does not exist" in err


def test_quick_page_measures_registration_against_the_controller_process(quick_page):
    section = quick_page.split("## 6. Registering a job against the controller process")[1].split("## 7.")[0]
    [table] = tables(section)
    [row] = table[1:] if table[0][0] == "fabric" else table
    p50, p99 = (float(x) for x in row[3].split(" / "))
    assert 0 < p50 <= p99 < 60_000
    assert row[4] == "0.0 / 0"  # admission moved nobody
    assert row[7] == "6/6"


def test_quick_page_compares_a_warm_started_reoptimisation_with_a_cold_one(quick_page):
    section = quick_page.split("## 7. Re-optimisation from a warm start")[1]
    [table] = tables(section)
    plans = {row[1]: row for row in table}
    assert set(plans) == {"served (admissions)", "cold", "warm"}, table
    served_lam = float(plans["served (admissions)"][3])
    for name in ("cold", "warm"):
        runtime, lam, bound = (float(x) for x in plans[name][2:5])
        assert runtime > 0 and lam <= bound * (1 + 1e-6)
    # the warm start never serves less than the plan it started from
    assert float(plans["warm"][3]) >= served_lam * (1 - 1e-6)
