"""Issue 25: admission by default, and a re-optimisation's churn budget as a share
of the jobs (`planner.reoptimise_max_churn_share`, `admission.churn_budget`)."""

from __future__ import annotations

import pytest

from controller.algorithm.admission import churn_budget
from controller.config import ConfigError, build_topology, config_from_dict
from controller.core.service import ControllerService
from controller.southbound.openflow.manager import OpenFlowManager
from controller.store.sqlite import JobStore


def planner_of(**planner):
    return config_from_dict({"topology": {"fattree": {"k": 4}}, "planner": planner}).planner


def test_the_defaults_admit_and_bound_a_reoptimisation_to_a_share_of_the_jobs():
    p = config_from_dict({"topology": {"fattree": {"k": 4}}}).planner
    assert p.incremental is True
    assert (p.reoptimise_max_churn, p.reoptimise_max_churn_share) == (0, 0.05)
    assert churn_budget(200, p.reoptimise_max_churn, p.reoptimise_max_churn_share) == 10


def test_a_file_with_the_count_alone_keeps_its_old_meaning():
    # written before the share existed: the count alone, 0 still meaning no limit
    assert planner_of(reoptimise_max_churn=0).reoptimise_max_churn_share == 0.0
    assert churn_budget(200, 0, planner_of(reoptimise_max_churn=0).reoptimise_max_churn_share) == 0
    p = planner_of(reoptimise_max_churn=32)
    assert churn_budget(1000, p.reoptimise_max_churn, p.reoptimise_max_churn_share) == 32
    # both given: the smaller budget holds
    p = planner_of(reoptimise_max_churn=32, reoptimise_max_churn_share=0.1)
    assert churn_budget(100, p.reoptimise_max_churn, p.reoptimise_max_churn_share) == 10
    assert churn_budget(1000, p.reoptimise_max_churn, p.reoptimise_max_churn_share) == 32
    assert planner_of(reoptimise_max_churn_share=0).reoptimise_max_churn_share == 0.0
    assert planner_of(reoptimise_max_churn_share=1).reoptimise_max_churn_share == 1.0


@pytest.mark.parametrize("value, message", [
    (-0.1, "must be >= 0, got -0.1"),
    (1.5, "must be a share of the jobs within [0, 1], got 1.5"),
    ("5%", "expected a number, got a string"),
    (True, "expected a number, got a boolean"),
    (float("nan"), "must be finite"),
])
def test_a_bad_share_is_refused_naming_the_key(value, message):
    with pytest.raises(ConfigError) as e:
        planner_of(reoptimise_max_churn_share=value)
    assert "planner.reoptimise_max_churn_share" in str(e.value) and message in str(e.value), str(e.value)


@pytest.mark.parametrize("jobs, count, share, budget", [
    (200, 0, 0.05, 10), (201, 0, 0.05, 11), (7, 0, 0.25, 2), (3, 0, 0.05, 1), (0, 0, 0.05, 1),
    (200, 4, 0.05, 4), (200, 0, 0.0, 0), (200, 12, 0.0, 12), (20, 0, 1.0, 20),
])
def test_churn_budget_is_the_smaller_of_the_count_and_the_share_rounded_up(jobs, count, share, budget):
    assert churn_budget(jobs, count, share) == budget


@pytest.mark.parametrize("count, share", [(-1, 0.05), (0, -0.01), (0, 1.01)])
def test_churn_budget_refuses_what_the_config_refuses(count, share):
    with pytest.raises(ValueError):
        churn_budget(10, count, share)


def test_the_controller_moves_at_most_the_share_of_its_jobs():
    """The seven jobs of `WorkloadSpec(7, 3, 8, seed=8)` on the k=4 fat-tree with G=2
    (tests/test_service_incremental.py): the full plan moves four of them (links planned
    at their payload capacity, algorithm.wire); a share of 0.25 of seven jobs lets a
    re-optimisation move two (ceil(1.75))."""
    from controller.algorithm.topologies import fat_tree
    from controller.algorithm.workload import WorkloadSpec, generate_jobs

    now = [1000.0]
    config = config_from_dict({"topology": {"fattree": {"k": 4}, "group_capacity": 2}, "planner": {
        "debounce_s": 0.2, "max_delay_s": 1.0, "link_hold_down_s": 0, "reoptimise_max_churn_share": 0.25}})
    assert config.planner.incremental and config.planner.reoptimise_max_churn == 0
    service = ControllerService(config, build_topology(config), lambda: now[0], store=JobStore(":memory:"))
    OpenFlowManager(service).attach()
    service.planning.replan()
    for job in generate_jobs(fat_tree(4, group_capacity=2), WorkloadSpec(7, 3, 8, seed=8)):
        service.add_job(job.ps, list(job.workers), job.demand, job_id=job.id, wait=False)
        assert service.planning.replan().plan.algorithm == "incremental"
    served = service.served.plan()
    now[0] += 5.0
    update = service.planning.replan()
    assert update is not None, service.stats().reoptimisations
    before = {p.job.id: p.structure for p in served.jobs}
    moved = sum(1 for jp in update.plan.jobs if jp.structure != before[jp.job.id])
    assert moved == 2 == service.stats().churn_jobs
    assert "within churn: 2 of 4 moved jobs" in update.plan.notes[-1]  # the budget, not the plan, held it to 2


def test_admission_is_the_default_only_for_the_default_algorithm():
    # a baseline asked for by name is what plans every change, not admission's greedy candidates
    assert planner_of(algorithm="lp-rounding").incremental is True
    for algorithm in ("spt", "unicast", "greedy", "steiner", "ilp"):
        assert planner_of(algorithm=algorithm).incremental is False, algorithm
    assert planner_of(algorithm="spt", incremental=True).incremental is True
    assert planner_of(incremental=False).incremental is False
