"""Cold lp-rounding plans (max-concurrent): spt and steiner computed only where they could matter.

The pool starts from unicast and greedy; spt and steiner are computed only when
the rounded plan's λ is below the LP bound, so that λ is never below any
baseline's (the hypothesis property in test_properties.py checks that on random
instances; the instance here is one where the deferred baselines decide it).
"""

from __future__ import annotations

import numpy as np
import pytest

from controller.algorithm import baselines, headroom, lp_rounding, plan
from controller.algorithm.model import Instance, Job
from controller.algorithm.network import Network
from controller.algorithm.topologies import fat_tree
from controller.algorithm.workload import reference_instance


@pytest.fixture(autouse=True)
def _no_headroom(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the headroom stage (lp_rounding step 7): on `_deferred_matters` its moves
    free the bottleneck of the first round, which then meets the bound by itself; the
    deferral of the baselines is what these tests are about."""
    monkeypatch.setattr(headroom, "MAX_JOBS", 0)


def _deferred_matters() -> Instance:
    """Fat-tree k=4, one group per switch: spt's and steiner's λ (2/3, the LP bound)
    beat the plan rounded from the unicast and greedy columns (1/2)."""
    topo = fat_tree(4, group_capacity=1)
    jobs = (
        Job("a", "host-0", ("host-9", "host-8"), 10e9),
        Job("b", "host-0", ("host-6", "host-9", "host-8", "host-15", "host-12"), 5e9),
        Job("c", "host-4", ("host-2", "host-6", "host-0", "host-15"), 10e9),
    )
    return Instance(topo, jobs)


def test_lp_rounding_is_never_below_the_baselines_it_computes_only_below_the_bound() -> None:
    inst = _deferred_matters()
    lp = plan(inst, "lp-rounding")
    for name in ("unicast", "spt", "steiner", "greedy"):
        assert lp.lam >= plan(inst, name).lam * (1 - 1e-9), name
    assert lp.lam == pytest.approx(lp.lp_bound)
    assert any("a second round added" in n for n in lp.notes)


def test_spt_and_steiner_are_not_computed_when_the_bound_is_met(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    for name in ("spt", "steiner"):
        real = getattr(baselines, name)

        def counted(*a, _real=real, _name=name, **k):
            calls.append(_name)
            return _real(*a, **k)

        monkeypatch.setattr(baselines, name, counted)
    met = reference_instance(8, 25, group_capacity=16, seed=0)
    p = plan(met, "lp-rounding")
    assert p.lam >= p.lp_bound * (1 - 1e-9)
    assert calls == []
    below = _deferred_matters()
    plan(below, "lp-rounding")
    assert sorted(calls) == ["spt", "steiner"]


@pytest.mark.parametrize("k,jobs,groups", [(8, 50, 2), (8, 60, 16)])
def test_a_seeded_cold_plan_is_reproducible_with_or_without_the_second_process(k: int, jobs: int, groups: int) -> None:
    inst = reference_instance(k, jobs, group_capacity=groups, seed=3)
    runs = [lp_rounding.solve(Network(inst.topology), inst.jobs, "max-concurrent", seed=5, fork=f) for f in (False, True, False)]
    first = runs[0]
    for other in runs[1:]:
        assert other.structures == first.structures
        assert np.array_equal(other.rates, first.rates)
        assert other.lp_bound == first.lp_bound
        assert other.notes == first.notes
