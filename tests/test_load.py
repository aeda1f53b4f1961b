"""`python -m controller bench-load --quick`: tenants registering and deleting jobs at
once (locust) against the real controller process, with no failed request."""

from __future__ import annotations

import importlib.util
import json

import pytest

from controller.app.cli import main
from controller.offline.load import measure
from controller.offline.report import project_root

# not imported here: locust monkey-patches the standard library (gevent) when imported
pytestmark = pytest.mark.skipif(importlib.util.find_spec("locust") is None,
                                reason="locust is not installed (pip install -e '.[test]')")


def test_quick_load_has_no_failures_and_reports_latencies(capsys):
    assert main(["bench-load", "--quick"]) == 0
    report = json.loads((project_root() / "build" / "load-report.json").read_text())
    by_name = {e["name"]: e for e in report["endpoints"]}
    assert set(by_name) == {"POST /jobs", "DELETE /jobs/{id}"}
    post, delete = by_name["POST /jobs"], by_name["DELETE /jobs/{id}"]
    # 8 tenants, one cycle a second for 8 s: at least a few cycles each, every one answered
    assert post["requests"] >= 8 * 4 and post["failures"] == 0 and delete["failures"] == 0
    assert abs(post["requests"] - delete["requests"]) <= 8
    assert 0 < post["p50_ms"] <= post["p99_ms"] <= post["max_ms"] * 1.1 + 10
    assert "| POST /jobs |" in capsys.readouterr().out


def test_refused_requests_are_counted_as_failures(tmp_path):
    """The load test can fail: users presenting tokens the controller does not know
    are refused (401), and every request is a failure."""
    report = measure(4, 2, 3.0, 1.0, 3, tmp_path, presented=["not-a-tenant-token-at-all-000000"])
    assert report.endpoints and report.failures == sum(e.requests for e in report.endpoints) > 0


def test_the_load_section_replaces_its_own_section_only():
    from controller.offline.load import LOAD_TITLE, EndpointLoad, LoadReport, load_section
    from controller.offline.report import page_section, with_section

    report = LoadReport(8, 50, 60.0, 3.0, 3, (EndpointLoad("POST /jobs", 1000, 0, 690.0, 1400.0, 1455.0),), 0)
    section = load_section(report, "python -m controller bench-load --into p.md", "2026-12-02 05:17 UTC", "4.1", "4.0")
    assert section.startswith(f"## {LOAD_TITLE}\n") and "| POST /jobs | 1000 | 0 | 690 | 1400 | 1455 |" in section
    assert "No request failed." in section
    page = "# P\n\n## 7. Before\n\ntext\n"
    once = with_section(page, LOAD_TITLE, section)
    assert once.startswith(page.rstrip("\n")) and page_section(once, LOAD_TITLE) == section.rstrip("\n")
    failed = load_section(LoadReport(8, 50, 60.0, 3.0, 3, (EndpointLoad("POST /jobs", 10, 2, 1, 2, 3),), 1),
                          "cmd", "d", "1", "1")
    twice = with_section(once + "\n## 9. After\n\nmore\n", LOAD_TITLE, failed)
    assert "**2 requests failed.**" in twice and "No request failed." not in twice
    assert "## 7. Before\n\ntext" in twice and twice.rstrip().endswith("## 9. After\n\nmore")
