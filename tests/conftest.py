"""Hypothesis profiles for the test suite.

`make test` (and so CI) uses the default profile, derandomized: every run tries the
same examples, so a landing is never refused by an example that a previous run did not
try. To look for new counterexamples, run with random examples and a seed of your
choice (a failing seed reproduces exactly):

    HYPOTHESIS_PROFILE=explore .venv/bin/python -m pytest -q --hypothesis-seed=N
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
