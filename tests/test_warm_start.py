"""Warm-started re-optimisation (lp_rounding.solve with `warm`): the pool starts from
the served plan's columns, no baseline is computed, and the result is valid and never
worse than the served plan; a changed topology falls back to a cold start."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import planner
from controller.algorithm import baselines
from controller.algorithm.admission import incremental
from controller.algorithm.model import Instance
from controller.algorithm.topologies import fat_tree, leaf_spine
from controller.algorithm.validate import plan_violations
from controller.algorithm.workload import WorkloadSpec, generate_jobs
from controller.config import ConfigError, config_from_dict

REL = 1e-9


def topology(kind: str, groups: int | None):
    if kind == "fat-tree":
        return fat_tree(4, group_capacity=groups)
    return leaf_spine(4, 2, 4, group_capacity=groups)


def served_plan(topo, n_full: int, n_new: int, seed: int):
    """A full plan of the first jobs, then the rest admitted one by one (as the
    service serves them between re-optimisations)."""
    jobs = generate_jobs(topo, WorkloadSpec(n_full + n_new, 2, 7, seed=seed))
    served = planner.run(Instance(topo, jobs[:n_full]), "lp-rounding", seed=seed)
    for i in range(n_full, n_full + n_new):
        served = incremental(Instance(topo, jobs[: i + 1]), served, topo, "max-concurrent")
    return Instance(topo, jobs), served


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["fat-tree", "leaf-spine"]),
    groups=st.sampled_from([None, 1, 2, 4]),
    n_full=st.integers(1, 8),
    n_new=st.integers(0, 4),
    seed=st.integers(0, 10_000),
)
def test_a_warm_start_is_valid_never_worse_than_the_served_plan_and_certified(kind, groups, n_full, n_new, seed):
    instance, served = served_plan(topology(kind, groups), n_full, n_new, seed)
    warm = planner.run(instance, "lp-rounding", seed=seed, warm_from=(served, instance.topology))
    assert plan_violations(instance, warm) == []
    assert warm.lam >= served.lam * (1 - REL)
    if warm.lam <= served.lam * (1 + REL):
        assert warm.throughput >= served.throughput * (1 - 1e-6)
    # both LP bounds are upper bounds on any plan of these jobs
    cold = planner.run(instance, "lp-rounding", seed=seed)
    for bound in (warm.lp_bound, cold.lp_bound):
        assert bound is not None and max(warm.lam, cold.lam) <= bound * (1 + 1e-6)
    # the columns go on: the chosen structure first
    assert [c[0] for c in warm.columns] == [jp.structure for jp in warm.jobs]


def test_a_warm_start_computes_no_baseline(monkeypatch):
    instance, served = served_plan(fat_tree(4, group_capacity=2), 6, 2, seed=3)

    def refuse(*args, **kwargs):
        raise AssertionError("a baseline was computed")

    for name in ("spt", "steiner", "greedy"):
        monkeypatch.setattr(baselines, name, refuse)
    warm = planner.run(instance, "lp-rounding", warm_from=(served, instance.topology))
    assert plan_violations(instance, warm) == []
    with pytest.raises(AssertionError, match="a baseline was computed"):
        planner.run(instance, "lp-rounding")


def test_a_changed_topology_gets_a_cold_start():
    instance, served = served_plan(fat_tree(4, group_capacity=2), 6, 2, seed=4)
    other = Instance(fat_tree(4, group_capacity=3), instance.jobs)
    warm = planner.run(other, "lp-rounding", warm_from=(served, instance.topology))
    cold = planner.run(other, "lp-rounding")
    assert [jp.structure for jp in warm.jobs] == [jp.structure for jp in cold.jobs]
    assert warm.lam == cold.lam


def test_columns_go_through_admission_and_a_changed_job_starts_afresh():
    topo = fat_tree(4, group_capacity=2)
    jobs = generate_jobs(topo, WorkloadSpec(8, 2, 6, seed=7))
    full = planner.run(Instance(topo, jobs[:6]), "lp-rounding")
    assert all(len(c) >= 1 for c in full.columns) and sum(len(c) for c in full.columns) > len(full.columns)
    admitted = incremental(Instance(topo, jobs), full, topo, "max-concurrent")
    by_id = dict(zip((jp.job.id for jp in full.jobs), full.columns))
    for jp, cols in zip(admitted.jobs, admitted.columns):
        if jp.job.id in by_id:
            assert cols == by_id[jp.job.id]
        else:
            assert cols == (jp.structure,)


@pytest.mark.parametrize("warm_start", [True, False])
def test_the_service_warm_starts_its_reoptimisations_only(monkeypatch, warm_start):
    from controller.config import build_topology
    from controller.core.service import ControllerService
    from controller.store.sqlite import JobStore

    seen = []
    run = planner.run

    def recording_run(instance, algorithm, objective="max-concurrent", seed=0, warm_from=None):
        seen.append(warm_from is not None)
        return run(instance, algorithm, objective, seed, warm_from)

    monkeypatch.setattr(planner, "run", recording_run)
    config = config_from_dict({
        "topology": {"fattree": {"k": 4}, "group_capacity": 2},
        "planner": {"debounce_s": 0.2, "max_delay_s": 1.0, "incremental": True, "reoptimise_after_s": 5.0,
                    "link_hold_down_s": 0, "reoptimise_warm_start": warm_start},
    })
    now = [1000.0]
    service = ControllerService(config, build_topology(config), lambda: now[0], store=JobStore(":memory:"))
    service.planning.replan()  # the first plan (no jobs): full, cold
    for job in generate_jobs(fat_tree(4, group_capacity=2), WorkloadSpec(6, 3, 8, seed=5)):
        service.add_job(job.ps, list(job.workers), job.demand, job_id=job.id, wait=False)
        assert service.planning.replan().plan.algorithm == "incremental"
    now[0] += 5.0
    assert service.planning.replan_due()
    update = service.planning.replan()
    assert update is not None or service.stats().reoptimisations["kept"] == 1
    assert seen == [False, warm_start], seen


def test_reoptimise_warm_start_must_be_a_boolean():
    with pytest.raises(ConfigError, match="reoptimise_warm_start"):
        config_from_dict({"topology": {"fattree": {"k": 4}}, "planner": {"reoptimise_warm_start": "yes"}})
    assert config_from_dict({"topology": {"fattree": {"k": 4}}}).planner.reoptimise_warm_start is True
