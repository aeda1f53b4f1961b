"""The cluster simulation (controller/offline/cluster_sim.py): a tiny fabric, a few dozen jobs, seconds."""

from __future__ import annotations

import random
import statistics
from collections import defaultdict
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.algorithm import admission
from controller.algorithm.model import Instance
from controller.algorithm.regimes import mixed_budgets
from controller.algorithm.topologies import fat_tree
from controller.offline import cluster_sim
from controller.offline.cluster_sim import (
    baseline_settings,
    controller_settings,
    entry_changes,
    entry_keys,
    simulate,
)
from controller.offline.cluster_workload import JobSpec, arrival_stream, jobs_per_hour_for

# k=4 (16 hosts), core links at a quarter of the 10 Gbit/s host links, two groups per switch
TOPO = fat_tree(4, core_oversubscription=4.0, group_capacity=2)
HOSTS = 16
MAX_WORKERS = 7
POLICIES = {
    "lp-rounding": controller_settings(reoptimise_after_s=30.0),
    "spt": baseline_settings("spt"),
    "greedy": baseline_settings("greedy"),
    "unicast": baseline_settings("unicast"),
}


@pytest.fixture(scope="module")
def stream() -> tuple[JobSpec, ...]:
    s = arrival_stream(random.Random(3), hours=1.0, jobs_per_hour=36.0, max_workers=MAX_WORKERS)
    assert 20 <= len(s) <= 60  # a few dozen jobs
    return s


@pytest.fixture(scope="module")
def results(stream):
    return {name: simulate(TOPO, stream, st, random.Random(5), check=True) for name, st in POLICIES.items()}


def test_every_job_completes(stream, results) -> None:
    for name, r in results.items():
        assert [j.id for j in r.jobs] == [s.id for s in stream], name
        assert all(j.end_s >= j.start_s >= j.arrival_s for j in r.jobs), name


def test_jct_is_at_least_the_job_alone_on_the_fabric(stream, results) -> None:
    by_id = {s.id: s for s in stream}
    for name, r in results.items():
        for j in r.jobs:
            assert j.min_duration_s == pytest.approx(by_id[j.id].min_duration_s(10e9))
            assert j.jct_s >= j.min_duration_s * (1 - 1e-9), (name, j)
        # a shared, oversubscribed fabric: some job is slower than alone
        assert any(j.jct_s > 1.01 * j.min_duration_s for j in r.jobs), name


def test_no_served_plan_breaks_a_table_budget_or_a_link_capacity(results) -> None:
    for name, r in results.items():
        assert r.checked == r.plans > 0, name
        assert r.violations == (), name
        for s in r.samples:
            assert s.groups_used <= s.group_budget and s.max_group_share <= 1.0, name


def test_the_check_reports_a_broken_plan(stream, monkeypatch) -> None:
    """The guard above can fail: a plan whose rates exceed a link is reported."""
    real = cluster_sim.planner.run

    def doubled(*args, **kwargs):
        plan = real(*args, **kwargs)
        return cluster_sim.dataclasses.replace(
            plan, jobs=tuple(cluster_sim.dataclasses.replace(jp, rate=jp.rate * 4) for jp in plan.jobs))

    monkeypatch.setattr(cluster_sim.planner, "run", doubled)
    r = simulate(TOPO, stream[:10], POLICIES["unicast"], random.Random(5), check=True)
    assert r.violations


def test_lp_rounding_beats_unicast_on_an_oversubscribed_fabric(results) -> None:
    lp = statistics.mean(j.jct_s for j in results["lp-rounding"].jobs)
    uni = statistics.mean(j.jct_s for j in results["unicast"].jobs)
    assert lp <= uni
    assert results["lp-rounding"].fabric_bits < results["unicast"].fabric_bits


def test_the_simulation_calls_the_controllers_reoptimisation_decision(stream, monkeypatch) -> None:
    calls = []
    real = admission.reoptimisation

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(admission, "reoptimisation", counted)
    r = simulate(TOPO, stream, POLICIES["lp-rounding"], random.Random(5))
    assert len(calls) == sum(r.reoptimisations.values()) > 0
    assert r.full_plans >= len(calls)


def test_the_same_seed_gives_the_same_run(stream) -> None:
    a = simulate(TOPO, stream[:15], POLICIES["greedy"], random.Random(9))
    b = simulate(TOPO, stream[:15], POLICIES["greedy"], random.Random(9))
    assert a.jobs == b.jobs and a.fabric_bits == b.fabric_bits and a.entries_rewritten == b.entries_rewritten


def test_entry_changes_counts_added_removed_and_changed_entries(stream) -> None:
    from controller import planner
    from controller.algorithm.model import Job

    jobs = (Job("a", "host-0", ("host-5", "host-9", "host-13"), 10e9), Job("b", "host-1", ("host-6", "host-10"), 10e9))
    plan = planner.run(Instance(TOPO, jobs), "spt")
    keys = entry_keys(plan)
    assert keys and entry_changes(keys, keys) == 0
    assert entry_changes({}, keys) == len(keys) == sum(len(jp.structure.entries) for jp in plan.jobs)
    only_a = planner.run(Instance(TOPO, jobs[:1]), "spt")
    assert entry_changes(keys, entry_keys(only_a)) == len(plan.jobs[1].structure.entries)


def test_bad_streams_are_refused(stream) -> None:
    big = JobSpec("huge", 0.0, HOSTS, 1e9, 10, 0.1)
    with pytest.raises(ValueError, match="huge"):
        simulate(TOPO, (big,), POLICIES["unicast"], random.Random(0))
    with pytest.raises(ValueError, match="time order"):
        simulate(TOPO, (stream[1], stream[0]), POLICIES["unicast"], random.Random(0))


def test_arrival_stream_is_seeded_and_bounded() -> None:
    a = arrival_stream(random.Random(1), 2.0, 50.0, 8)
    assert a == arrival_stream(random.Random(1), 2.0, 50.0, 8)
    assert all(1 <= s.workers <= 8 and s.iterations >= 1 and 0 < s.arrival_s < 7200 for s in a)
    wide = arrival_stream(random.Random(2), 10.0, 100.0, 512)
    assert 0.85 < statistics.mean(s.workers <= 8 for s in wide) < 0.97  # most jobs small …
    assert max(s.workers for s in wide) >= 64  # … a few very large
    with pytest.raises(ValueError, match="hours"):
        arrival_stream(random.Random(1), 0.0, 50.0, 8)
    with pytest.raises(ValueError, match="load"):
        jobs_per_hour_for(1.5, 16, 7)


def test_the_service_takes_the_same_reoptimisation_decision(monkeypatch) -> None:
    """One copy: `Planning._reoptimise` decides through `admission.reoptimisation` too."""
    from controller.config import build_topology, config_from_dict
    from controller.core.service import ControllerService
    from controller.store.sqlite import JobStore

    calls = []
    real = admission.reoptimisation

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(admission, "reoptimisation", counted)
    now = [1000.0]
    config = config_from_dict({"topology": {"fattree": {"k": 4}, "group_capacity": 2},
                               "planner": {"incremental": True, "reoptimise_after_s": 5.0, "link_hold_down_s": 0}})
    service = ControllerService(config, build_topology(config), lambda: now[0], store=JobStore(":memory:"))
    service.planning.replan()
    for jid, ps, workers in (("a", "host-0", ["host-5", "host-9"]), ("b", "host-2", ["host-6", "host-13"])):
        service.add_job(ps, workers, 1e9, job_id=jid, wait=False)
        service.planning.replan()
    assert not calls
    now[0] += 5.0
    service.planning.replan()
    assert len(calls) == 1 and sum(service.stats().reoptimisations.values()) == 1


def test_the_section_is_spliced_into_the_page_once() -> None:
    from controller.offline.cluster_report import MARK_BEGIN, MARK_END, marked_block, splice

    page = "# Evaluation\n\nfigures\n"
    once = splice(page, "## A cluster over time\nold")
    twice = splice(once, "## A cluster over time\nnew")
    assert twice.count(MARK_BEGIN) == twice.count(MARK_END) == 1
    assert twice.startswith(page.rstrip("\n")) and "new" in twice and "old" not in twice
    assert marked_block(twice).startswith(MARK_BEGIN) and "new" in marked_block(twice)
    assert marked_block(page) == ""


def test_the_quick_command_writes_its_figures_and_section(tmp_path) -> None:
    from controller.app.cli import main

    (tmp_path / "evaluation-quick.md").write_text("# Evaluation\n\nkept\n", encoding="utf-8")
    assert main(["simulate-cluster", "--quick", "--workers", "1", "--out", str(tmp_path)]) == 0
    page = (tmp_path / "evaluation-quick.md").read_text(encoding="utf-8")
    assert "kept" in page and "## A cluster over time" in page and "| fat-tree k=4, 4:1 | lp-rounding |" in page
    for name in ("cluster-quick-jct-cdf.png", "cluster-quick-occupancy.png"):
        assert (tmp_path / "figures" / name).stat().st_size > 1000


# -- the same guard over random streams and fabrics (hypothesis) ------------------------------------------

REL_TOL = 1e-6


@st.composite
def fabrics(draw):
    """A k=4 fat-tree (16 hosts), full bisection or oversubscribed, with small budgets:
    the same G (0-3) and F on every switch, or mixed (cores without groups)."""
    over = draw(st.sampled_from((1.0, 2.0, 4.0)))
    entries = draw(st.sampled_from((None, 2, 4, 8)))
    topo = fat_tree(4, core_oversubscription=over, group_capacity=draw(st.integers(0, 3)), entry_capacity=entries)
    if draw(st.booleans()):
        topo = mixed_budgets(topo, draw(st.integers(0, 99)), choices=(0, 1, 2))
    return topo


@st.composite
def streams(draw):
    """A few jobs in arrival order: gaps, sizes (the PS needs one more host), models,
    iterations and compute times drawn at random."""
    jobs, t = [], 0.0
    for n in range(draw(st.integers(1, 10))):
        t += draw(st.floats(0.0, 300.0, allow_nan=False))
        jobs.append(JobSpec(f"job-{n:02d}", t, draw(st.integers(1, HOSTS - 1)),
                            draw(st.sampled_from((1e6, 1e8, 8e8, 4.4e9))),
                            draw(st.integers(1, 40)), draw(st.floats(0.0, 0.5, allow_nan=False))))
    return tuple(jobs)


def _over_budget(topo, plan) -> list[str]:
    """Computed here from the plan's structures and the fabric drawn (`topo`), not by
    `plan_violations` on the simulation's instance: every directed link's load (rate x
    copies) against its capacity, every switch's replicating jobs and jobs with an
    entry against its budgets."""
    load: dict[int, float] = defaultdict(float)
    groups: dict[int, int] = defaultdict(int)
    entries: dict[int, int] = defaultdict(int)
    for jp in plan.jobs:
        for e, c in jp.structure.copies:
            load[e] += jp.rate * c
        for v in jp.structure.groups:
            groups[v] += 1
        for v in jp.structure.entries:
            entries[v] += 1
    out = [f"link {e}: {x:.6g} > {topo.edges[e].capacity:.6g}" for e, x in load.items()
           if x > topo.edges[e].capacity * (1 + REL_TOL)]
    for v, used in groups.items():
        cap = topo.nodes[v].group_capacity
        if cap is not None and used > cap:
            out.append(f"{topo.nodes[v].id}: {used} groups > {cap}")
    for v, used in entries.items():
        cap = topo.nodes[v].entry_capacity
        if cap is not None and used > cap:
            out.append(f"{topo.nodes[v].id}: {used} entries > {cap}")
    return out


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # 3-12 s
@given(topo=fabrics(), stream=streams(), placement=st.integers(0, 2**16),
       reoptimise_after_s=st.sampled_from((5.0, 30.0, 300.0)), max_churn=st.sampled_from((0, 2)))
def test_no_table_over_budget_and_no_link_over_capacity_at_any_instant(topo, stream, placement,
                                                                        reoptimise_after_s, max_churn) -> None:
    """The controller's policy (admission between re-optimisations) over random streams and
    fabrics: every plan it serves, hence the fabric between any two events, keeps every
    link within its capacity and every table within its budget."""
    served: list[tuple[Instance, object, float]] = []
    real = cluster_sim._Cluster.install

    def recorded(self, inst, plan):
        served.append((inst, plan, self.now))
        return real(self, inst, plan)

    settings_ = controller_settings(reoptimise_after_s=reoptimise_after_s, max_churn=max_churn)
    with mock.patch.object(cluster_sim._Cluster, "install", recorded):
        r = simulate(topo, stream, settings_, random.Random(placement), check=True)
    assert [j.id for j in r.jobs] == [s.id for s in stream]
    assert len(served) == r.plans == r.checked > 0
    assert r.violations == ()
    for inst, plan, now in served:
        assert sorted(jp.job.id for jp in plan.jobs) == sorted(j.id for j in inst.jobs), now
        assert _over_budget(topo, plan) == [], f"t={now:.3f} s"
    for s in r.samples:
        assert s.groups_used <= s.group_budget and s.max_group_share <= 1.0
        assert s.entry_budget == 0 or s.entries_used <= s.entry_budget
