"""`python -m controller bench-registration --quick`: the registration benchmark runs
against a real controller process and reports numbers that make sense."""

from __future__ import annotations

import re

from controller.cli import main


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
