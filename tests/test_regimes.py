"""The fabrics of the regimes where planning matters (controller/algorithm/regimes.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from controller.algorithm.fabric import recognise_clos
from controller.algorithm.model import Topology
from controller.algorithm.regimes import (
    MIXED_CHOICES,
    SHAPES,
    ClosShape,
    mixed_budgets,
    production_clos,
    regime_instance,
)
from controller.algorithm.topologies import GBIT, fat_tree, leaf_spine


def _same(a: Topology, b: Topology) -> bool:
    return (a.nodes, a.links) == (b.nodes, b.links)  # Topology compares by identity


def test_the_production_clos_has_three_pods_and_119_racks_of_2_to_8_hosts():
    topo = production_clos(SHAPES["clos"], seed=0)
    fabric = recognise_clos(topo)
    assert fabric is not None and fabric.tiers == 3
    assert len(fabric.pod_edges) == 3
    assert sorted(len(e) for e in fabric.pod_edges) == [39, 40, 40]
    racks = Counter(fabric.host_edge.values())
    assert len(racks) == 119
    assert min(racks.values()) >= 2 and max(racks.values()) <= 8
    assert len(set(racks.values())) > 3  # racks of several sizes, not one
    # every ToR reaches each of its pod's 4 aggregation switches; 4 planes of 4 cores
    assert all(len(aggs) == 4 for aggs in fabric.pod_aggs)
    assert len(fabric.cores) == 16 and len(fabric.groups) == 4
    # the same seed gives the same fabric
    assert _same(production_clos(SHAPES["clos"], seed=0), topo)
    assert not _same(production_clos(SHAPES["clos"], seed=1), topo)


def test_mixed_budgets_give_cores_no_groups_and_others_a_drawn_budget():
    topo = mixed_budgets(fat_tree(8, 10 * GBIT, 2.0, group_capacity=1000), seed=3)
    cores = [n for n in topo.nodes if n.id.startswith("core-")]
    others = [n for n in topo.nodes if n.is_switch and not n.id.startswith("core-")]
    assert cores and all(n.group_capacity == 0 for n in cores)
    assert {n.group_capacity for n in others} == set(MIXED_CHOICES)  # 64 switches draw every choice
    assert all(n.group_capacity is None for n in topo.nodes if not n.is_switch)
    assert _same(mixed_budgets(fat_tree(8), seed=3), mixed_budgets(fat_tree(8), seed=3))
    assert not _same(mixed_budgets(fat_tree(8), seed=3), mixed_budgets(fat_tree(8), seed=4))


def test_regime_instances_are_seeded_and_keep_the_oversubscription():
    a = regime_instance("fat-tree", 10, seed=1, k=4, core_ratio=4.0)
    again = regime_instance("fat-tree", 10, seed=1, k=4, core_ratio=4.0)
    assert _same(a.topology, again.topology) and a.jobs == again.jobs
    core_caps = {ln.capacity for ln in a.topology.links if ln.b.startswith("core-")}
    assert core_caps == {2.5 * GBIT}
    assert len(a.jobs) == 10
    clos = regime_instance("clos-tiny", 5, seed=2)
    assert len(clos.jobs) == 5 and recognise_clos(clos.topology).tiers == 3
    uniform = regime_instance("fat-tree", 4, k=4, budgets="uniform", group_capacity=7)
    assert {n.group_capacity for n in uniform.topology.nodes if n.is_switch} == {7}


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: regime_instance("torus", 4), "fabric"),
        (lambda: regime_instance("fat-tree", 4, k=4, budgets="odd"), "budgets"),
        (lambda: regime_instance("clos-tiny", 4, core_ratio=2.0), "core_ratio"),
        (lambda: ClosShape(pods=1), "pods"),
        (lambda: ClosShape(pods=3, racks=2), "racks"),
        (lambda: ClosShape(min_hosts=5, max_hosts=4), "min_hosts"),
        (lambda: ClosShape(core_link=0), "core_link"),
        (lambda: mixed_budgets(fat_tree(4), 0, choices=()), "choices"),
        (lambda: mixed_budgets(leaf_spine(4, 2, 2), 0), "three-tier"),
    ],
)
def test_bad_regime_inputs_name_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()
