"""Fast failover on OpenFlow (issue 26): the backup choice, its entries, and where packets go.

Pure: the backup choice (`algorithm.backups`) on a leaf-spine, its translation
(`openflow.failover` through `openflow.translate`), traced with links down
(`openflow.tracer`), the re-plan's make-before-break cleanup under the strict
switch model (`openflow.reconcile.apply`), the counts of failovers, the codec
of fast-failover groups and the config key. tests/test_emulation_failover.py
runs the same on Open vSwitch in Mininet.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from types import SimpleNamespace

import pytest

from controller.addressing.groups import GroupAddressPool, group_mac
from controller.addressing.hosts import host_addresses
from controller.addressing.ports import default_port_map
from controller.algorithm.backups import Backup, choose_backups
from controller.algorithm.model import Instance, Job, Node, Topology
from controller.algorithm.network import Network
from controller.algorithm.topologies import leaf_spine
from controller.core.counters import Counters
from controller.core.updates import TranslationInputs
from controller.planner import run
from controller.southbound.openflow.entries import GroupAction, GroupEntry, Output, SwitchState, decode_cookie
from controller.southbound.openflow.failover import failovers_at
from controller.southbound.openflow.reconcile import InconsistentOp, apply, diff, diff_switch, phases
from controller.southbound.openflow.tracer import Packet, trace_all
from controller.southbound.openflow.translate import translate

JOB = Job("j1", "host-0", ("host-1", "host-2", "host-3", "host-4"), 1e9)


def fabric(groups: int | None = None, entries: dict[str, int] | None = None, drop: tuple[str, str] | None = None) -> Topology:
    """A 3-leaf, 2-spine leaf-spine (two hosts per leaf); `entries` caps single
    switches' multicast entries; `drop` leaves a link out (a link down)."""
    t = leaf_spine(3, 2, 2, group_capacity=groups)
    nodes = tuple(dataclasses.replace(n, entry_capacity=(entries or {}).get(n.id, n.entry_capacity)) for n in t.nodes)
    links = tuple(link for link in t.links if drop is None or {link.a, link.b} != set(drop))
    return Topology(nodes, links)


def planned(topo: Topology, jobs=(JOB,)):
    return run(Instance(topo, tuple(jobs)), "spt")


@dataclasses.dataclass
class Setup:
    topo: Topology
    net: Network
    plan: object
    ports: dict
    addrs: dict
    groups: dict
    backups: tuple[Backup, ...]
    tr: object


PORTS = default_port_map(fabric())  # the ports stay when a link goes down


def setup(topo: Topology, *, failover: bool = True, previous=None, jobs=(JOB,)) -> Setup:
    net = Network(topo)
    plan = planned(topo, jobs)
    ports = _ports_of(topo)
    addrs = host_addresses(topo)
    groups = GroupAddressPool().sync(jp.job.id for jp in plan.jobs)
    backups = choose_backups(topo, net.routing, plan) if failover else ()
    tr = translate(TranslationInputs(net, plan, ports, addrs, groups), ids=previous.ids if previous else None,
                   previous=previous, backups=backups)
    return Setup(topo, net, plan, ports, addrs, groups, backups, tr)


def _ports_of(topo: Topology) -> dict:
    """The full fabric's port numbers, on the links `topo` still has."""
    full = fabric()
    out = {}
    for (a, b), p in PORTS.items():
        an, bn = full.name(a), full.name(b)
        ia, ib = topo.index[an], topo.index[bn]
        if ib in topo.neighbors[ia]:
            out[(ia, ib)] = p
    return out


def down_ports(s: Setup, a: str, b: str) -> frozenset[tuple[str, int]]:
    ia, ib = s.topo.index[a], s.topo.index[b]
    return frozenset({(a, PORTS[(ia, ib)]), (b, PORTS[(ib, ia)])})


def delivered(s: Setup, state, down=frozenset()) -> tuple[Counter, list]:
    gip = str(s.groups["j1"])
    ps = s.addrs["host-0"]
    res = trace_all(state, s.topo, s.ports, "host-0", Packet(gip, group_mac(gip), ipv4_src=ps.ip, eth_src=ps.mac),
                    down=down)
    return Counter(d.host for d in res.deliveries), list(res.drops)


def names(topo: Topology, b: Backup) -> tuple:
    return (topo.name(b.upstream), topo.name(b.primary), topo.name(b.detour), tuple(topo.name(c) for c in b.children))


# -- the choice ---------------------------------------------------------------------------------
def test_a_leaf_to_spine_edge_gets_the_other_spine_and_downward_edges_get_none():
    s = setup(fabric())
    tree = {(s.topo.name(a), s.topo.name(b)) for a, b in s.plan.jobs[0].structure.tree}
    spine = next(b for a, b in tree if a == "leaf-0" and b.startswith("spine"))
    other = "spine-1" if spine == "spine-0" else "spine-0"
    assert [names(s.topo, b) for b in s.backups] == [("leaf-0", spine, other, ("leaf-1", "leaf-2"))]


def test_backups_go_only_where_the_tables_have_room():
    # one group per switch: leaf-0 replicates (host-1 and the spine), no room for its fast-failover group
    assert setup(fabric(groups=1)).backups == ()
    # two: room on leaf-0 (its group and the fast-failover group) and on the other spine (its replication)
    assert len(setup(fabric(groups=2)).backups) == 1
    # leaf-2 holds one multicast entry, its capacity: no room for the stream coming in from the other spine
    assert setup(fabric(entries={"leaf-2": 1})).backups == ()
    assert len(setup(fabric(entries={"leaf-2": 2})).backups) == 1


def test_the_translation_holds_the_backups_within_capacity():
    s = setup(fabric(groups=2))
    for name, st in s.tr.state.items():
        node = s.topo.nodes[s.topo.index[name]]
        assert len(st.groups) <= node.group_capacity, name
    # a backup that does not fit is refused, not half-applied
    tight = Topology(tuple(dataclasses.replace(n, group_capacity=1) if n.id == "leaf-0" else n for n in s.topo.nodes),
                     s.topo.links)
    with pytest.raises(ValueError, match="leaf-0: 2 groups needed, capacity 1"):
        translate(TranslationInputs(Network(tight), s.plan, s.ports, s.addrs, s.groups), backups=s.backups)


# -- where packets go ----------------------------------------------------------------------------
def test_with_the_protected_link_down_the_switch_delivers_exactly_on_its_own():
    s = setup(fabric())
    workers = Counter(JOB.workers)
    got, drops = delivered(s, s.tr.state)
    assert got == workers and not drops  # as before: the backups carry nothing while the link is up
    b = s.backups[0]
    cut = down_ports(s, s.topo.name(b.upstream), s.topo.name(b.primary))
    got, drops = delivered(s, s.tr.state, cut)
    assert got == workers, got  # every worker once, nobody else
    assert not drops, drops
    # without the backups the same failure cuts the workers below the spine off until a re-plan
    plain = setup(fabric(), failover=False)
    got, _ = delivered(plain, plain.tr.state, cut)
    assert got == Counter({"host-1": 1})


def test_a_downward_link_is_not_covered_and_left_to_the_replan():
    s = setup(fabric())
    spine = s.topo.name(s.backups[0].primary)
    got, _ = delivered(s, s.tr.state, down_ports(s, spine, "leaf-2"))
    assert got == Counter({"host-1": 1, "host-2": 1, "host-3": 1})  # host-4 waits for the re-plan


def test_the_replan_removes_the_backups_make_before_break():
    s = setup(fabric())
    b = s.backups[0]
    up, spine = s.topo.name(b.upstream), s.topo.name(b.primary)
    cut = down_ports(s, up, spine)
    after = setup(fabric(drop=(up, spine)), previous=s.tr)
    assert after.backups == ()  # the only other spine is the one in use now
    ops = diff(after.tr.state, s.tr.state)
    state = dict(s.tr.state)
    for batch in phases(ops):  # every phase on every switch, the link down all along
        for sw, sw_ops in batch.items():
            state[sw] = apply(sw_ops, state[sw])
        got, drops = delivered(after, state, cut)
        assert got == Counter(JOB.workers), got
    assert state == after.tr.state
    assert not [g for st in state.values() for g in st.groups if g.type == "ff"]
    assert not [f for st in state.values() for f in st.flows if (decode_cookie(f.cookie) or ("",))[0] == "backup"]
    # the detour's flows became the tree's: modified in place, not deleted and added
    kinds = Counter(type(op).__name__ for sw_ops in ops.values() for op in sw_ops)
    assert kinds["ModifyFlow"] >= 3, kinds


def test_an_incremental_translation_with_backups_equals_one_from_scratch():
    first = setup(fabric())
    second_job = Job("j2", "host-2", ("host-0", "host-5"), 1e9)
    inc = setup(fabric(), previous=first.tr, jobs=(JOB, second_job))
    scratch = setup(fabric(), jobs=(JOB, second_job))
    assert inc.backups == scratch.backups and len(inc.backups) >= 2
    # ids may differ (the incremental one keeps j1's); the entries, renumbered, are the same
    assert {sw: (len(st.flows), len(st.groups)) for sw, st in inc.tr.state.items()} == \
        {sw: (len(st.flows), len(st.groups)) for sw, st in scratch.tr.state.items()}
    assert inc.tr.state == translate(TranslationInputs(inc.net, inc.plan, inc.ports, inc.addrs, inc.groups),
                                     ids=first.tr.ids, backups=inc.backups).state


def test_chained_groups_are_added_first_and_deleted_last():
    s = setup(fabric())
    up = s.topo.name(s.backups[0].upstream)
    st = s.tr.state[up]
    assert any(isinstance(a, GroupAction) for g in st.groups for bk in g.buckets for a in bk)  # chained
    assert apply(diff_switch(st, SwitchState()), SwitchState()) == st
    assert apply(diff_switch(SwitchState(), st), st) == SwitchState()
    with pytest.raises(InconsistentOp):  # the other order leaves a reference to a missing group
        apply(list(reversed(diff_switch(SwitchState(), st))), st)


# -- hostile hosts ------------------------------------------------------------------------------------
def _backup_flows(state) -> list[tuple[str, object]]:
    return [(sw, f) for sw, st in state.items() for f in st.flows if (decode_cookie(f.cookie) or ("",))[0] == "backup"]


def test_backup_flows_match_only_the_port_from_the_upstream_or_the_detour_never_a_host_port():
    s = setup(fabric(), jobs=(JOB, Job("j2", "host-2", ("host-0", "host-5"), 1e9)))
    t, ports = s.topo, s.ports
    want: set[tuple[str, int]] = set()
    for b in s.backups:
        want.add((t.name(b.detour), ports[(b.detour, b.upstream)]))
        want |= {(t.name(c), ports[(c, b.detour)]) for c in b.children}
    host_ports = {(t.name(a), p) for (a, h), p in ports.items() if t.is_switch(a) and not t.is_switch(h)}
    got = {(sw, dict(f.match).get("in_port")) for sw, f in _backup_flows(s.tr.state)}
    assert len(s.backups) >= 2 and got == want, (got, want)
    assert not got & host_ports


def _wildcard_backups(state) -> dict:
    """`state` with the backup flows matching the stream on any port (what must never be)."""
    out = {}
    for sw, st in state.items():
        flows = {dataclasses.replace(f, match=tuple(kv for kv in f.match if kv[0] != "in_port"))
                 if (decode_cookie(f.cookie) or ("",))[0] == "backup" else f for f in st.flows}
        out[sw] = dataclasses.replace(st, flows=frozenset(flows))
    return out


def test_a_host_cannot_feed_a_job_through_its_backup_flows():
    # a tenant host below a child of the protected spine (leaf-1, leaf-2: they hold backup
    # flows) sends to the job's group with its own, valid source: nobody gets it, link up or down
    s = setup(fabric())
    gip = str(s.groups["j1"])
    b = s.backups[0]
    cut = down_ports(s, s.topo.name(b.upstream), s.topo.name(b.primary))
    below = ("host-2", "host-3", "host-4", "host-5")

    def injected(state, down=frozenset()) -> dict[str, Counter]:
        out = {}
        for h in below:
            a = s.addrs[h]
            res = trace_all(state, s.topo, s.ports, h, Packet(gip, group_mac(gip), ipv4_src=a.ip, eth_src=a.mac),
                            down=down)
            out[h] = Counter(d.host for d in res.deliveries)
        return out

    for down in (frozenset(), cut):
        assert not any(injected(s.tr.state, down).values()), down
    # the guard is the backup flows' in_port: matched on any port, the hosts' copies reach the workers
    assert any(injected(_wildcard_backups(s.tr.state)).values())


# -- counts ------------------------------------------------------------------------------------------
def test_failovers_count_the_jobs_moved_by_the_switch_and_those_left_to_the_replan():
    s = setup(fabric())
    b = s.backups[0]
    up, spine = s.topo.name(b.upstream), s.topo.name(b.primary)
    port = PORTS[(b.upstream, b.primary)]
    assert failovers_at(s.tr.state[up], port) == (1, 0)
    assert failovers_at(s.tr.state[up], PORTS[(b.upstream, b.detour)]) == (0, 0)  # the backup's own port
    assert failovers_at(s.tr.state[spine], PORTS[(b.primary, s.topo.index["leaf-1"])]) == (0, 1)
    plain = setup(fabric(), failover=False)
    assert failovers_at(plain.tr.state[up], port) == (0, 1)
    c = Counters()
    c.failover("data_plane", 2)
    c.failover("controller")
    assert c.failovers() == {"data_plane": 2, "controller": 1}
    with pytest.raises(ValueError, match="data_plane or controller"):
        c.failover("switch")


def test_a_fast_failover_group_has_one_watch_port_per_bucket():
    GroupEntry(1, "ff", ((Output(1),), (Output(2),)), (1, 2))
    with pytest.raises(ValueError, match="one watch port per bucket"):
        GroupEntry(1, "ff", ((Output(1),), (Output(2),)), (1,))
    with pytest.raises(ValueError, match="only a fast-failover group"):
        GroupEntry(1, "all", ((Output(1),),), (1,))


def test_a_fast_failover_group_reads_back_as_written():
    pytest.importorskip("os_ken")
    from os_ken.ofproto import ofproto_v1_3 as ofp
    from os_ken.ofproto import ofproto_v1_3_parser as parser

    from controller.southbound.openflow.messages import group_from_stats, op_message
    from controller.southbound.openflow.reconcile import AddGroup

    dp = SimpleNamespace(ofproto=ofp, ofproto_parser=parser)
    for g in (GroupEntry(7, "ff", ((Output(1),), (Output(2),)), (1, 2)),
              GroupEntry(8, "all", ((GroupAction(7),), (Output(3),)))):
        msg = op_message(dp, AddGroup(g))
        assert [b.watch_port for b in msg.buckets] == list(g.watch_ports or (ofp.OFPP_ANY,) * len(g.buckets))
        stat = SimpleNamespace(group_id=msg.group_id, type=msg.type, buckets=msg.buckets)
        assert group_from_stats(stat) == g


# -- the config key ------------------------------------------------------------------------------------
def test_fast_failover_is_a_boolean_key_of_the_openflow_southbound(tmp_path):
    from controller.config import load_config

    def cfg(value: str | None) -> object:
        p = tmp_path / "c.json"
        openflow = "{}" if value is None else '{"fast_failover": %s}' % value
        p.write_text('{"topology": {"leaf_spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": 1}},'
                     ' "southbound": {"openflow": %s}}' % openflow)
        return load_config(p)

    assert cfg(None).southbound.openflow.fast_failover is True  # on by default
    assert cfg(None).southbound.p4runtime.fast_failover is False  # the P4 backend's heartbeats cost BMv2 CPU
    assert cfg("true").southbound.openflow.fast_failover is True
    assert cfg("false").southbound.openflow.fast_failover is False
    with pytest.raises(Exception, match="fast_failover"):
        cfg('"yes"')


def test_a_hybrid_tree_whose_spines_have_no_group_gets_a_detour_without_one():
    # no group on the spines: the spine of the tree forwards to one leaf, the rest is unicast
    t = fabric(groups=2)
    t = Topology(tuple(dataclasses.replace(n, group_capacity=0) if n.id.startswith("spine") else n for n in t.nodes),
                 t.links)
    s = setup(t)
    assert not s.plan.jobs[0].structure.groups & {t.index["spine-0"], t.index["spine-1"]}
    [b] = s.backups
    assert b.detour_groups == 0 and not s.tr.state[t.name(b.detour)].groups
    up, _ = delivered(s, s.tr.state)
    got, drops = delivered(s, s.tr.state, down_ports(s, t.name(b.upstream), t.name(b.primary)))
    assert got == up and not drops, (got, up, drops)  # the same workers get the group's copies
    assert set(up) <= set(JOB.workers) and max(up.values()) == 1 and len(up) >= 2, up


def test_a_detour_is_never_a_switch_of_the_tree_nor_shared_by_two_edges_from_one_switch():
    # a tree through two spines (by hand): leaf-0 -> spine-0 -> leaf-1, leaf-0 -> spine-1 -> leaf-2
    from controller.algorithm.structures import make_structure

    def two_spine_plan(topo: Topology):
        net = Network(topo)
        i = topo.index
        tree = [(i["host-0"], i["leaf-0"]), (i["leaf-0"], i["host-1"]), (i["leaf-0"], i["spine-0"]),
                (i["spine-0"], i["leaf-1"]), (i["leaf-1"], i["host-2"]), (i["leaf-1"], i["host-3"]),
                (i["leaf-0"], i["spine-1"]), (i["spine-1"], i["leaf-2"]), (i["leaf-2"], i["host-4"])]
        plan = planned(topo)
        jp = dataclasses.replace(plan.jobs[0], structure=make_structure(net, tree, []))
        return net, dataclasses.replace(plan, jobs=(jp,))

    net, plan = two_spine_plan(fabric())
    assert choose_backups(net.topo, net.routing, plan) == ()  # the only other spine is in the tree
    wide = leaf_spine(3, 3, 2)
    net, plan = two_spine_plan(wide)
    backups = choose_backups(wide, net.routing, plan)
    # spine-2 stands in for one of them: its entry matches the stream from leaf-0, once per job
    assert [names(wide, b) for b in backups] == [("leaf-0", "spine-0", "spine-2", ("leaf-1",))]
    ports = default_port_map(wide)
    addrs = host_addresses(wide)
    groups = GroupAddressPool().sync(["j1"])
    state = translate(TranslationInputs(net, plan, ports, addrs, groups), backups=backups).state
    gip, ps = str(groups["j1"]), addrs["host-0"]
    pkt = Packet(gip, group_mac(gip), ipv4_src=ps.ip, eth_src=ps.mac)
    for down in (frozenset(), frozenset({("leaf-0", ports[(wide.index["leaf-0"], wide.index["spine-0"])]),
                                         ("spine-0", ports[(wide.index["spine-0"], wide.index["leaf-0"])])})):
        res = trace_all(state, wide, ports, "host-0", pkt, down=down)
        assert Counter(d.host for d in res.deliveries) == Counter(JOB.workers) and not res.drops, down


# -- the controller: the manager's backups, the count at a port down, the re-plan's cleanup --------------
def test_the_controller_installs_counts_and_cleans_up_backups(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from prometheus_client.parser import text_string_to_metric_families

    from controller.config import build_topology, config_from_dict
    from controller.core.service import ControllerService
    from controller.northbound.api import create_app
    from controller.southbound.openflow.manager import OpenFlowManager
    from controller.store.sqlite import JobStore

    config = config_from_dict({
        "topology": {"leaf_spine": {"leaves": 3, "spines": 2, "hosts_per_leaf": 2}},
        "planner": {"debounce_s": 0.0, "wait_s": 10.0},
        "southbound": {"openflow": {"fast_failover": True}},
    })
    svc = ControllerService(config, build_topology(config), store=JobStore(tmp_path / "jobs.sqlite"))
    svc.openflow = manager = OpenFlowManager(svc).attach()
    svc.start()
    try:
        with TestClient(create_app(svc, config), base_url="http://127.0.0.1") as client:
            r = client.post("/jobs", json={"id": "j1", "ps": "host-0", "workers": list(JOB.workers), "demand": 1e8})
            assert r.status_code == 201, r.text

            def ff(sw: str) -> list[GroupEntry]:
                return [g for g in manager.desired_state()[sw].groups if g.type == "ff"]

            [group] = ff("leaf-0")
            # GET /switches: groups_used is the plan's, groups the desired state's (the FF group too)
            leaf0 = {sw["id"]: sw for sw in client.get("/switches").json()["switches"]}["leaf-0"]
            assert leaf0["groups"] == len(manager.desired_state()["leaf-0"].groups) == leaf0["groups_used"] + 1, leaf0
            watched, backup = group.watch_ports
            topo, ports = svc.wiring.topology_and_ports()
            spine = next(topo.name(n) for (a, n), p in ports.items() if topo.name(a) == "leaf-0" and p == watched)
            manager.port_down("leaf-0", watched)
            manager.port_down("leaf-0", backup)  # the backup's own port: nothing moves
            families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
            counts = {s.labels["by"]: s.value for s in families["mcast_failovers"].samples}
            assert counts == {"data_plane": 1, "controller": 0}, counts
            generation = svc.served.current.generation
            svc.links.down("leaf-0", spine)
            deadline = time.monotonic() + 10
            while svc.served.current.generation == generation and time.monotonic() < deadline:
                time.sleep(0.05)
            assert svc.served.current.generation > generation
            assert not [sw for sw in manager.desired_state() if ff(sw)]  # no backup applies: the other spine carries the tree
    finally:
        svc.close()


def test_on_a_fat_tree_the_core_uplinks_and_pod_local_uplinks_are_covered():
    from controller.algorithm.topologies import fat_tree

    t = fat_tree(4)
    h = [t.name(x) for x in t.hosts]
    plan = planned(t, (Job("a", h[0], (h[2], h[5], h[9], h[13]), 1e9), Job("b", h[0], (h[2], h[3]), 1e9)))
    got = {(b.job_id, t.name(b.upstream), t.name(b.primary)): (t.name(b.detour), names(t, b)[3])
           for b in choose_backups(t, Network(t).routing, plan)}
    # a: aggregation -> core (another core of the group reaches the same aggregation switches); its
    # edge -> aggregation edge is not covered (the other aggregation switch does not reach that core)
    # b: edge -> aggregation whose aggregation switch feeds only its pod
    assert got == {("a", "agg-0-1", "core-2"): ("core-3", ("agg-1-1", "agg-2-1", "agg-3-1")),
                   ("b", "edge-0-0", "agg-0-1"): ("agg-0-0", ("edge-0-1",))}


def test_kept_candidates_follow_the_topology_the_routing_and_each_jobs_structure():
    """`BackupCandidates` keeps each job's candidates between plans: with a link
    down (another topology and routing) or a job's tree changed, the backups it
    gives are those chosen from nothing, never the ones kept from before."""
    from controller.algorithm.backups import BackupCandidates

    kept = BackupCandidates()
    whole = fabric()
    s = setup(whole)
    first = choose_backups(whole, s.net.routing, s.plan, None, kept)
    assert first == s.backups and first
    spine, other = next(names(whole, b)[1:3] for b in first)  # the spine the tree crosses, its backup
    # a link only the backup would use goes down: the same tree, no backup through it any more
    cut = fabric(drop=(other, "leaf-2"))
    net = Network(cut)
    plan = dataclasses.replace(s.plan, jobs=(s.plan.jobs[0],))  # the very structure the candidates were kept for
    fresh = choose_backups(cut, net.routing, plan)
    assert fresh != first
    assert choose_backups(cut, net.routing, plan, None, kept) == fresh
    # the tree's own link down: another tree
    cut = fabric(drop=("leaf-0", spine))
    net = Network(cut)
    plan = planned(cut)
    assert choose_backups(cut, net.routing, plan, None, kept) == choose_backups(cut, net.routing, plan)
    # back on the whole fabric, a second job in the plan: the first job's tree may move
    two = (JOB, Job("j2", "host-5", ("host-0", "host-2"), 1e9))
    net = Network(whole)
    plan = run(Instance(whole, two), "lp-rounding")
    assert choose_backups(whole, net.routing, plan, None, kept) == choose_backups(whole, net.routing, plan)
