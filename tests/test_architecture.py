"""The shape of controller/ (docs/architecture.md, "Packages" and "Contracts").

- the import contracts of pyproject.toml ([tool.importlinter]), checked with
  import-linter: the layers, the algorithm layer alone, a core that imports no
  backend and not the northbound, backends independent of each other, a
  northbound that does not import the southbound, a standard-library client, and
  no import cycle anywhere;
- no module outside algorithm/ and offline/ longer than 700 lines, and at most six
  modules at controller/'s root;
- every package says in its `__init__` docstring what it owns and what it may import.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "controller"
MAX_LINES = 700
MAX_ROOT_MODULES = 6


def test_the_import_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if lint is None:
        pytest.fail("lint-imports is missing: `make setup` installs import-linter (the test extra)")
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's package, whatever is installed
    run = subprocess.run([lint, "--no-cache"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout, run.stdout


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_outside_the_algorithm_and_offline_is_longer_than_700_lines():
    long = {str(p.relative_to(REPO)): n for p in _modules()
            if p.relative_to(PACKAGE).parts[0] not in ("algorithm", "offline")
            and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_at_most_six_modules_at_the_root():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


def test_every_package_says_what_it_owns_and_what_it_may_import():
    silent = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        if init.parent == PACKAGE:
            continue  # the root: the map is docs/architecture.md
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if "import" not in doc.lower() or len(doc) < 80:
            silent.append(str(init.relative_to(REPO)))
    assert silent == []
