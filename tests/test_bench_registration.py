"""`python -m controller bench-registration --quick`: the registration benchmark runs
against a real controller process and reports numbers that make sense."""

from __future__ import annotations

import re

from controller.app.cli import main


def test_quick_registration_bench_reports_both_modes(capsys):
    assert main(["bench-registration", "--quick", "--both"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.match(r"\| (true|false) \|", line)]
    assert len(rows) == 2, out
    cells = {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[2:-1]] for row in rows}
    for mode, (start, seq, churn, conc, planned, lam) in cells.items():
        p50, p99 = (float(x) for x in seq.split(" / "))
        assert 0 < p50 <= p99 < 60, (mode, seq)
        assert planned == "6/6", (mode, planned)
        served, full = (float(x) for x in lam.split(" / "))
        assert 0 < served <= 1 and 0 < full <= 1
    # admission moves no running job; a full plan per registration may
    assert cells["true"][2] == "0.0 / 0"


def test_quick_admission_quality_reports_served_against_full(capsys):
    from controller.offline.admission_quality import measure_one

    assert main(["bench-admission", "--quick"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| all |") or line.startswith("| k=4")]
    assert len(rows) == 3, out  # all, and G=1 and G=4
    row = measure_one(4, 6, 1, 0)
    # admission never does better than the LP bound allows, and the full plan is the reference
    assert 0 < row.tail and 0 < row.all and row.full > 0
    assert row.tail <= 1 and row.all <= 1
