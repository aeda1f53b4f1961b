"""Hypothesis profiles for the test suite.

`make test` (and so CI) uses the default profile, derandomized: every run tries the
same examples, so a landing is never refused by an example that a previous run did not
try. To look for new counterexamples, run with random examples and a seed of your
choice (a failing seed reproduces exactly):

    HYPOTHESIS_PROFILE=explore .venv/bin/python -m pytest -q --hypothesis-seed=N
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))



# In CI the P4 toolchains (BMv2 and p4c; the Tofino compiler) are installed by .ci/run:
# a `bmv2` or `tofino` test that skips there has not run at all, which must not pass as green.
CI_REQUIRED_MARKERS = ("bmv2", "tofino")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if not (report.skipped and os.environ.get("CI")):
        return
    for marker in CI_REQUIRED_MARKERS:
        if item.get_closest_marker(marker) is not None:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            report.outcome = "failed"
            report.longrepr = f"a {marker} test was skipped in CI (CI={os.environ['CI']}): {reason}"
            return


@pytest.fixture
def client(service):
    """A TestClient of the REST app of the test module's `service` fixture (a
    controller it has started), for the REST tests (tests/rest_helper.py); a
    module that defines its own `client` uses that instead."""
    from rest_helper import api_client  # here: the other tests do not import FastAPI

    with api_client(service) as c:
        yield c
