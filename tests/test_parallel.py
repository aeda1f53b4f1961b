"""The forked second process of lp-rounding: same results, failures recovered."""

from __future__ import annotations

import os

import numpy as np
import pytest

from controller.algorithm import lp_rounding, parallel
from controller.algorithm.network import Network
from controller.algorithm.workload import reference_instance

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")


@needs_fork
def test_background_runs_in_a_child_and_its_result_comes_back() -> None:
    parent = os.getpid()
    child_pid, here = parallel.both(os.getpid, lambda: os.getpid(), fork=True)
    assert here == parent
    assert child_pid != parent
    big = np.arange(300_000, dtype=float)  # more than a pipe buffer
    got, _ = parallel.both(lambda: big * 2, lambda: None, fork=True)
    assert np.array_equal(got, big * 2)


@needs_fork
def test_a_failing_child_is_recomputed_here() -> None:
    parent = os.getpid()

    def background() -> int:
        if os.getpid() != parent:
            raise RuntimeError("only in the child")
        return 7

    assert parallel.both(background, lambda: 3, fork=True) == (7, 3)


@needs_fork
def test_a_child_that_hangs_is_killed_and_its_work_done_here(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    parent = os.getpid()
    monkeypatch.setattr(parallel, "CHILD_TIMEOUT_S", 0.5)

    def background() -> int:
        if os.getpid() != parent:
            time.sleep(3600)  # as if blocked on a lock another thread held at the fork
        return 11

    start = time.monotonic()
    assert parallel.both(background, lambda: 5, fork=True) == (11, 5)
    assert time.monotonic() - start < 10


@needs_fork
def test_a_failing_foreground_raises_and_reaps_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    forked: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)

    def boom() -> None:
        raise ValueError("foreground")

    with pytest.raises(ValueError, match="foreground"):
        parallel.both(lambda: 1, boom, fork=True)
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(forked[0], os.WNOHANG)  # already reaped: no child left behind


def test_without_fork_both_run_here_in_order() -> None:
    order: list[str] = []
    out = parallel.both(lambda: order.append("b") or 1, lambda: order.append("f") or 2, fork=False)
    assert out == (1, 2) and order == ["b", "f"]


@needs_fork
@pytest.mark.parametrize("objective", ["max-concurrent", "max-sum"])
def test_lp_rounding_plans_the_same_with_and_without_the_fork(objective: str) -> None:
    inst = reference_instance(8, 40, group_capacity=4, seed=3)
    plans = []
    for fork in (False, True):
        sol = lp_rounding.solve(Network(inst.topology), inst.jobs, objective, seed=1, fork=fork)
        plans.append(([s.key for s in sol.structures], sol.lp_bound, sol.rates.tolist()))
    assert plans[0] == plans[1]
