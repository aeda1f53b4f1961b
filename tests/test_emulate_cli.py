"""mininet/emulate.py: argument checks, the job generator, and one small run on a leaf-spine.

The run (a 2x2 leaf-spine with 2 hosts per leaf, 3 random jobs, 2 s of traffic,
as a subprocess) is skipped, with the reason, when not root or Open vSwitch,
Mininet or os-ken is missing; the rest needs nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "mininet"))  # scripts, not a package (it would shadow mininet)

import emulate  # noqa: E402
import ovs_daemon  # noqa: E402

SCRIPT = REPO / "mininet" / "emulate.py"


def _run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--fattree", "3"], "even k"),
        (["--leaf-spine", "2,2"], "LEAVES,SPINES,HOSTS_PER_LEAF"),
        (["--leaf-spine", "2,0,1"], "LEAVES,SPINES,HOSTS_PER_LEAF"),
        (["--fattree", "4", "--leaf-spine", "2,2,2"], "not allowed with"),
        (["--bw", "0"], "must be positive"),
        (["--max-workers", "1"], "--max-workers >= 2"),
        (["--group-capacity", "-1"], "--group-capacity must be >= 0"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(args, message):
    r = _run(*args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_random_jobs_are_seeded_and_well_formed():
    hosts = [f"host-{i}" for i in range(8)]
    jobs = emulate.random_jobs(hosts, 20, 4, 1e6, seed=3)
    assert jobs == emulate.random_jobs(hosts, 20, 4, 1e6, seed=3)
    assert jobs != emulate.random_jobs(hosts, 20, 4, 1e6, seed=4)
    for jid, ps, workers, demand in jobs:
        assert ps in hosts and ps not in workers and 2 <= len(workers) <= 4 and len(set(workers)) == len(workers)
        assert demand == 1e6
    assert len({j[0] for j in jobs}) == 20


_reason = ovs_daemon.emulation_unavailable()


@pytest.mark.skipif(_reason is not None, reason=_reason or "")
def test_a_leaf_spine_with_random_jobs_delivers_them():
    r = _run("--leaf-spine", "2,2,2", "--jobs", "3", "--seconds", "2", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every worker received its job: True; duplicates: 0; datagrams at hosts outside a job: 0" in " ".join(r.stdout.split())
    assert r.stdout.count("POST /jobs") == 3
