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



def test_quick_registration_bench_without_a_backend(capsys, tmp_path):
    """`--no-southbound` (as `--k48` runs, at tiny size): the controller process with
    no backend attached still plans and answers each registration, and no backend
    writes an entry (with the OpenFlow backend, each registration writes some);
    `--no-compare` makes no full plan."""
    from controller.offline.registration import measure

    bare = measure(4, 2, 5, 3, 0, 1, None, tmp_path / "bare", southbound=False, compare=False)
    assert bare["entries_written"] == [0, 0, 0] and bare["churn_max"] == 0 and bare["lam_full"] is None
    with_openflow = measure(4, 2, 5, 3, 0, 1, None, tmp_path / "openflow", compare=False)
    assert min(with_openflow["entries_written"]) > 0
    assert main(["bench-registration", "--quick", "--no-southbound", "--no-compare"]) == 0
    out = capsys.readouterr().out
    assert "no backend (--no-southbound)" in out
    rows = [line for line in out.splitlines() if line.startswith("| default (true) |")]
    assert len(rows) == 1, out
    start, seq, churn, conc, planned, lam = [c.strip() for c in rows[0].split("|")[2:-1]]
    p50, p99 = (float(x) for x in seq.split(" / "))
    assert 0 < p50 <= p99 < 60 and churn == "0.0 / 0" and planned == "6/6", rows
    served, full = lam.split(" / ")
    assert 0 < float(served) <= 1 and full == "–"
