"""Plan -> desired P4 state -> P4Runtime protobufs, and make-before-break reconciliation.

The desired state is checked two ways:
- exact protobufs for hand-made tree, hybrid and unicast plans on a 2x2
  leaf-spine (ids looked up in the P4Info message by name here, independently of
  the backend's helper; values as canonical byte strings);
- by where packets go: `p4_trace` follows a packet through the entries the way
  mcast.p4 processes it (multicast table keyed on ingress port and group address,
  replication with replica ids, egress rewrite by replica id, plain replicas
  pruned at their ingress port, LPM routes through profile members), on the
  same plans (fat-tree, leaf-spine, general graph; lp-rounding, spt, unicast)
  as the OpenFlow translation tests.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

import pytest
from google.protobuf import text_format
from p4.v1 import p4runtime_pb2
from test_southbound_translation import (
    ALGORITHMS,
    KINDS,
    changed_jobs,
    instance,
    plan_of,
)

from controller.algorithm.model import Instance, Job
from controller.algorithm.network import Network
from controller.algorithm.structures import make_structure
from controller.algorithm.topologies import fat_tree, leaf_spine
from controller.planner import run
from controller.core.updates import TranslationInputs
from controller.southbound.ids import IdAllocation
from controller.southbound.p4runtime import entities as ps
from controller.southbound.p4runtime import translate as p4_translate
from controller.southbound.p4runtime import reconcile as p4_reconcile
from controller.addressing.groups import GroupAddressPool, group_mac
from controller.addressing.hosts import host_addresses
from controller.addressing.ports import default_port_map
from controller.southbound.p4runtime.codec import (
    from_entity,
    state_from_entities,
    to_entity,
    to_update,
)
from controller.southbound.p4runtime.tracer import Pkt, p4_trace
from controller.southbound.p4runtime.p4info import DEFAULT_P4INFO, P4Info
from controller.southbound.openflow.reconcile import InconsistentOp

P4INFO = P4Info.load(DEFAULT_P4INFO)


@dataclass
class Ctx:
    inst: Instance
    net: Network
    plan: object
    ports: dict
    addrs: dict
    groups: dict
    state: dict
    ids: p4_translate.P4Ids
    pool: GroupAddressPool


def translated(inst, plan, pool=None, ids=None, limits=p4_translate.P4Limits(), **kw) -> Ctx:
    net = Network(inst.topology)
    ports = default_port_map(inst.topology)
    addrs = host_addresses(inst.topology)
    pool = pool or GroupAddressPool()
    groups = pool.sync(jp.job.id for jp in plan.jobs)
    macs = kw.pop("host_macs", None) or {}
    tr = p4_translate.translate(TranslationInputs(net, plan, ports, addrs, groups, host_macs=macs), ids=ids, limits=limits, **kw)
    return Ctx(inst, net, plan, ports, addrs, groups, tr.state, tr.ids, pool)


def check_delivery(c: Ctx, state, plan, settled: bool = True) -> None:
    """Every job of `plan` reaches exactly its workers, once each. While a re-plan
    is half done (`settled` False) a group packet of a job without a tree may
    already meet the entries of its next tree; it is not counted then."""
    topo = c.inst.topology
    for jp in plan.jobs:
        job = jp.job
        gip = ps.ip_int(c.groups[job.id])
        got: Counter = Counter()
        src = (ps.ip_int(c.addrs[job.ps].ip), ps.mac_int(c.addrs[job.ps].mac))  # the guard checks the PS's source
        dels, _ = p4_trace(state, topo, c.ports, job.ps, Pkt(gip, ps.mac_int(group_mac(c.groups[job.id])), *src))
        if not jp.structure.tree:
            assert not settled or not dels, job.id
            dels = []
        ps_idx = topo.index[job.ps]
        for emitter, w in jp.structure.branches:
            if emitter == ps_idx:
                wa = c.addrs[topo.name(w)]
                more, _ = p4_trace(state, topo, c.ports, job.ps, Pkt(ps.ip_int(wa.ip), ps.mac_int(wa.mac), *src))
                dels += more
        for host, dst, mac in dels:
            got[host] += 1
            mine = c.addrs[host]
            assert (dst, mac) in ((gip, ps.mac_int(group_mac(c.groups[job.id]))), (ps.ip_int(mine.ip), ps.mac_int(mine.mac))), (job.id, host)
        assert got == Counter(job.workers), (job.id, jp.structure.mode, got)


CASES = [(k, a) for k in KINDS for a in ALGORITHMS]


@pytest.mark.parametrize("kind,algorithm", CASES)
def test_each_job_reaches_exactly_its_workers_once(kind, algorithm):
    c = translated(instance(kind), plan_of(kind, algorithm))
    check_delivery(c, c.state, c.plan)
    topo = c.inst.topology
    for jp in c.plan.jobs:  # entries and groups sit exactly where the structure says
        gip = ps.ip_int(c.groups[jp.job.id])
        at = {
            topo.index[sw]
            for sw, st in c.state.items()
            for e in st.in_table(ps.MCAST_TABLE)
            if e.matched(ps.F_IPV4_DST) == ps.Exact(gip)
        }
        assert at == set(jp.structure.entries)
    for sw, st in c.state.items():
        cap = topo.nodes[topo.index[sw]].group_capacity
        assert cap is None or len(st.groups) <= cap
        assert p4_reconcile.dangling_references(st) == []


@pytest.mark.parametrize("kind", KINDS)
def test_unicast_routes_follow_the_planner_routes(kind):
    c = translated(instance(kind), plan_of(kind, "spt"))
    topo = c.inst.topology
    hosts = [topo.name(h) for h in topo.hosts]
    for a in hosts:
        for b in hosts:
            if a != b:
                src = (ps.ip_int(c.addrs[a].ip), ps.mac_int(c.addrs[a].mac))
                dels, drops = p4_trace(c.state, topo, c.ports, a, Pkt(ps.ip_int(c.addrs[b].ip), ps.mac_int(c.addrs[b].mac), *src))
                assert [d[0] for d in dels] == [b] and not drops, (a, b)


# -- exact protobufs -------------------------------------------------------------------------------------
def raw_ids() -> dict[str, int]:
    m = P4INFO.message
    out = {x.preamble.name: x.preamble.id for x in (*m.tables, *m.actions, *m.action_profiles)}
    return out


def hand_plan(topo, tree, branches, workers):
    """A plan whose one job has the given structure (node names)."""
    net = Network(topo)
    i = topo.index
    s = make_structure(net, [(i[a], i[b]) for a, b in tree], [(i[a], i[b]) for a, b in branches])
    job = Job("j", "host-0", tuple(workers), 1e9)
    base = run(Instance(topo, (job,)), "unicast")
    return Instance(topo, (job,)), dataclasses.replace(base, jobs=(dataclasses.replace(base.jobs[0], structure=s),))


def entity_text(c: Ctx, switch: str) -> dict[str, list[str]]:
    st = c.state[switch]
    out: dict[str, list[str]] = {"mcast": [], "groups": [], "rewrites": []}
    for e in sorted(st.in_table(ps.MCAST_TABLE), key=repr):
        out["mcast"].append(text_format.MessageToString(to_entity(P4INFO, e), as_one_line=True))
    for g in sorted(st.groups, key=lambda g: g.group_id):
        out["groups"].append(text_format.MessageToString(to_entity(P4INFO, g), as_one_line=True))
    for e in sorted(st.in_table(ps.REWRITE_TABLE), key=repr):
        out["rewrites"].append(text_format.MessageToString(to_entity(P4INFO, e), as_one_line=True))
    return out


def one_line(text: str) -> str:
    msg = p4runtime_pb2.Entity()
    text_format.Parse(text, msg)
    return text_format.MessageToString(msg, as_one_line=True)


GROUP_IP = r'\357\001\000\001'  # 239.1.0.1, the pool's first address


def mcast_entry(ids, in_port: int, action: str, params: list[tuple[int, str]]) -> str:
    ps_text = " ".join(f'params {{ param_id: {i} value: "{v}" }}' for i, v in params)
    return one_line(
        f"table_entry {{ table_id: {ids[ps.MCAST_TABLE]} "
        f'match {{ field_id: 1 exact {{ value: "\\{in_port:03o}" }} }} '
        f'match {{ field_id: 2 exact {{ value: "{GROUP_IP}" }} }} '
        f"action {{ action {{ action_id: {ids[action]} {ps_text} }} }} }}"
    )


def test_tree_plan_gives_exactly_these_protobufs():
    topo = leaf_spine(2, 2, 2)  # leaf-0: 1 spine-0, 2 spine-1, 3 host-0, 4 host-1; leaf-1 alike; spines: 1 leaf-0, 2 leaf-1
    inst, plan = hand_plan(
        topo,
        [("host-0", "leaf-0"), ("leaf-0", "host-1"), ("leaf-0", "spine-0"), ("spine-0", "leaf-1"), ("leaf-1", "host-2"), ("leaf-1", "host-3")],
        [],
        ["host-1", "host-2", "host-3"],
    )
    c = translated(inst, plan)
    ids = raw_ids()
    assert entity_text(c, "leaf-0") == {
        "mcast": [mcast_entry(ids, 3, ps.SET_MCAST_GROUP, [(1, r"\001")])],
        "groups": [one_line(
            "packet_replication_engine_entry { multicast_group_entry { multicast_group_id: 1 "
            "replicas { egress_port: 1 } replicas { egress_port: 4 } } }"
        )],
        "rewrites": [],
    }
    assert entity_text(c, "spine-0") == {"mcast": [mcast_entry(ids, 1, ps.MCAST_EGRESS_PORT, [(1, r"\002")])], "groups": [], "rewrites": []}
    leaf1 = entity_text(c, "leaf-1")
    assert leaf1["mcast"] == [mcast_entry(ids, 1, ps.SET_MCAST_GROUP, [(1, r"\001")])]
    assert leaf1["groups"] == [one_line(
        "packet_replication_engine_entry { multicast_group_entry { multicast_group_id: 1 "
        "replicas { egress_port: 3 } replicas { egress_port: 4 } } }"
    )]
    assert entity_text(c, "spine-1") == {"mcast": [], "groups": [], "rewrites": []}
    check_delivery(c, c.state, plan)


def test_hybrid_plan_gives_exactly_these_protobufs():
    """spine-0 gets the stream from leaf-0 and replicates: a tree copy to leaf-1 and
    a unicast copy to host-1, back out of its ingress port (replica id 1 + rewrite);
    leaf-1 emits the single branch to host-3 with unicast_copy (no group)."""
    topo = leaf_spine(2, 2, 2)
    inst, plan = hand_plan(
        topo,
        [("host-0", "leaf-0"), ("leaf-0", "spine-0"), ("spine-0", "leaf-1")],
        [("spine-0", "host-1"), ("leaf-1", "host-3")],
        ["host-1", "host-3"],
    )
    assert plan.jobs[0].structure.mode == "hybrid"
    c = translated(inst, plan)
    ids = raw_ids()
    assert entity_text(c, "leaf-0")["mcast"] == [mcast_entry(ids, 3, ps.MCAST_EGRESS_PORT, [(1, r"\001")])]
    spine = entity_text(c, "spine-0")
    assert spine["mcast"] == [mcast_entry(ids, 1, ps.SET_MCAST_GROUP, [(1, r"\001")])]
    assert spine["groups"] == [one_line(
        "packet_replication_engine_entry { multicast_group_entry { multicast_group_id: 1 "
        "replicas { egress_port: 1 instance: 1 } replicas { egress_port: 2 } } }"
    )]
    # host-1 is 10.0.0.2 / 00:00:00:00:00:02
    assert spine["rewrites"] == [one_line(
        f"table_entry {{ table_id: {ids[ps.REWRITE_TABLE]} match {{ field_id: 1 exact {{ value: \"\\001\" }} }} "
        f"action {{ action {{ action_id: {ids[ps.REWRITE_TO_UNICAST]} "
        'params { param_id: 1 value: "\\n\\000\\000\\002" } params { param_id: 2 value: "\\002" } } } }'
    )]
    # host-3 is 10.0.0.4 / 00:00:00:00:00:04, on leaf-1 port 4
    assert entity_text(c, "leaf-1")["mcast"] == [
        mcast_entry(ids, 1, ps.UNICAST_COPY, [(1, r"\004"), (2, r"\n\000\000\004"), (3, r"\004")])
    ]
    check_delivery(c, c.state, plan)


def test_unicast_plan_gives_routes_only():
    topo = leaf_spine(2, 2, 2)
    job = Job("j", "host-0", ("host-1", "host-2", "host-3"), 1e9)
    plan = run(Instance(topo, (job,)), "unicast")
    c = translated(Instance(topo, (job,)), plan)
    ids = raw_ids()
    for st in c.state.values():
        assert not st.groups and not st.in_table(ps.MCAST_TABLE) and not st.in_table(ps.REWRITE_TABLE)
    leaf0 = c.state["leaf-0"]
    route = next(e for e in leaf0.in_table(ps.LPM_TABLE) if e.matched(ps.F_IPV4_DST) == ps.Lpm(ps.ip_int("10.0.0.2"), 32))
    assert text_format.MessageToString(to_entity(P4INFO, route), as_one_line=True) == one_line(
        f"table_entry {{ table_id: {ids[ps.LPM_TABLE]} "
        'match { field_id: 1 lpm { value: "\\n\\000\\000\\002" prefix_len: 32 } } action { action_profile_member_id: 4 } }'
    )
    member = leaf0.member_table()[(ps.ECMP_PROFILE, 4)]
    assert text_format.MessageToString(to_entity(P4INFO, member), as_one_line=True) == one_line(
        f"action_profile_member {{ action_profile_id: {ids[ps.ECMP_PROFILE]} member_id: 4 "
        f'action {{ action_id: {ids[ps.SET_EGRESS_PORT]} params {{ param_id: 1 value: "\\004" }} }} }}'
    )
    l0 = topo.index["leaf-0"]
    used = {c.ports[(l0, c.net.routing.next_hop(l0, h))] for h in topo.hosts}
    assert len(leaf0.in_table(ps.LPM_TABLE)) == 4 and {m.member_id for m in leaf0.members} == used
    assert len(used) == 3  # host-0, host-1 and one uplink: the routing picks one path per destination
    check_delivery(c, c.state, plan)


@pytest.mark.parametrize("kind", KINDS)
def test_protobufs_read_back_to_the_same_state(kind):
    c = translated(instance(kind), plan_of(kind, "lp-rounding"))
    for st in c.state.values():
        ents = [to_entity(P4INFO, x) for x in (*st.entries, *st.groups, *st.members, *st.meters, *st.clones)]
        back, notes = state_from_entities(P4INFO, ents)
        assert back == st and notes == []
    # a delete names the entry by its match only
    e = next(iter(c.state[next(iter(c.state))].entries))
    upd = to_update(P4INFO, p4_reconcile.Delete(e))
    assert upd.type == p4runtime_pb2.Update.DELETE and not upd.entity.table_entry.HasField("action")
    assert from_entity(P4INFO, to_entity(P4INFO, e)) == e


# -- budgets -----------------------------------------------------------------------------------------
def test_translation_refuses_more_than_the_budgets_and_the_table_sizes():
    kind = "fat-tree"
    c = translated(instance(kind), plan_of(kind, "spt"))
    busiest = max(len(st.groups) for st in c.state.values())
    tight = fat_tree(4, group_capacity=busiest - 1)
    with pytest.raises(ValueError, match="groups needed"):
        p4_translate.translate(TranslationInputs(Network(tight), c.plan, c.ports, c.addrs, c.groups))
    most = max(len(st.in_table(ps.MCAST_TABLE)) for st in c.state.values())
    with pytest.raises(ValueError, match="multicast entries needed, capacity"):
        p4_translate.translate(TranslationInputs(c.net, c.plan, c.ports, c.addrs, c.groups), limits=p4_translate.P4Limits(multicast_entries=most - 1))
    with pytest.raises(ValueError, match="unicast routes needed"):
        p4_translate.translate(TranslationInputs(c.net, c.plan, c.ports, c.addrs, c.groups), limits=p4_translate.P4Limits(routes=15))


def test_translation_of_a_subset_of_switches():
    kind = "leaf-spine"
    c = translated(instance(kind), plan_of(kind, "spt"))
    tr = p4_translate.translate(TranslationInputs(c.net, c.plan, c.ports, c.addrs, c.groups), switches=["leaf-0", "spine-1"])
    assert set(tr.state) == {"leaf-0", "spine-1"} and tr.state["leaf-0"] == c.state["leaf-0"]
    assert set(tr.ids.groups.by_switch) <= {"leaf-0", "spine-1"}
    with pytest.raises(ValueError, match="not switches"):
        p4_translate.translate(TranslationInputs(c.net, c.plan, c.ports, c.addrs, c.groups), switches=["host-0"])


# -- reconciliation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("algorithm", ("lp-rounding", "spt"))
def test_replanning_is_make_before_break(kind, algorithm):
    old = translated(instance(kind), plan_of(kind, algorithm))
    inst2 = Instance(old.inst.topology, changed_jobs(old.inst, seed=7))
    plan2 = run(inst2, algorithm)
    new = translated(inst2, plan2, pool=old.pool, ids=old.ids)
    ops = p4_reconcile.diff(new.state, old.state)
    assert ops
    state = dict(old.state)
    checked = set()
    for batch in p4_reconcile.steps(ops):
        phase = p4_reconcile.step_of(next(iter(batch.values()))[0])[0]
        if phase > p4_reconcile.PHASE_MAKE and "make" not in checked:
            check_delivery(old, state, old.plan, settled=False)  # new entries in place, old jobs untouched
            checked.add("make")
        if phase == p4_reconcile.PHASE_BREAK and "switch" not in checked:
            check_delivery(new, state, plan2, settled=False)  # switched: the new plan is exact already
            checked.add("switch")
        for sw, sw_ops in batch.items():
            # the updates of one batch are independent: any order gives the same result
            assert p4_reconcile.apply(sw_ops, state[sw]) == p4_reconcile.apply(list(reversed(sw_ops)), state[sw])
            state[sw] = p4_reconcile.apply(sw_ops, state[sw])
    assert checked == {"make", "switch"}
    assert state == new.state
    check_delivery(new, state, plan2)


def test_breaking_before_making_is_caught_by_the_switch_model():
    c = translated(instance("fat-tree"), plan_of("fat-tree", "spt"))
    st = next(st for st in c.state.values() if st.groups and st.in_table(ps.MCAST_TABLE))
    routes_only = ps.P4SwitchState(frozenset(st.in_table(ps.LPM_TABLE)), frozenset(), st.members)
    ops = p4_reconcile.diff_switch(routes_only, st)
    assert p4_reconcile.apply(ops, st) == routes_only
    groups_first = sorted(ops, key=lambda op: not isinstance(op.entity, ps.MulticastGroup))
    with pytest.raises(InconsistentOp, match="missing group"):
        p4_reconcile.apply(groups_first, st)
    with pytest.raises(InconsistentOp, match="does not exist"):
        p4_reconcile.apply(ops, routes_only)
    member_first = [p4_reconcile.Delete(next(iter(st.members)))]
    with pytest.raises(InconsistentOp, match="missing member"):
        p4_reconcile.apply(member_first, st)


def test_seed_ids_adopts_the_ids_found_on_a_switch():
    topo = leaf_spine(2, 2, 2)
    inst, plan = hand_plan(
        topo,
        [("host-0", "leaf-0"), ("leaf-0", "spine-0"), ("spine-0", "leaf-1")],
        [("spine-0", "host-1"), ("leaf-1", "host-3")],
        ["host-1", "host-3"],
    )
    # ids as a long-running controller may have them: group 7 and replica 9 on spine-0
    first = p4_translate.P4Ids(
        IdAllocation(ps.MAX_GROUP_ID, {"spine-0": {"j": 7}}),
        IdAllocation(ps.MAX_INSTANCE, {"spine-0": {p4_translate.branch_key("j", "host-1"): 9}}),
    )
    c = translated(inst, plan, ids=first)
    on_switch = c.state["spine-0"]
    assert {g.group_id for g in on_switch.groups} == {7}
    addrs = {ps.ip_int(a): j for j, a in c.groups.items()}
    hosts = {ps.ip_int(a.ip): h for h, a in c.addrs.items()}
    seeded = p4_translate.seed_ids(p4_translate.P4Ids(), "spine-0", on_switch, addrs, hosts)
    assert seeded.groups.by_switch == {"spine-0": {"j": 7}}
    assert seeded.replicas.by_switch == {"spine-0": {p4_translate.branch_key("j", "host-1"): 9}}
    # a restarted controller computes the same state: nothing to write
    again = translated(inst, plan, ids=seeded)
    assert p4_reconcile.diff_switch(again.state["spine-0"], on_switch) == []
    # ids it already holds for the switch are kept
    assert p4_translate.seed_ids(seeded, "spine-0", ps.P4SwitchState(), addrs, hosts) is seeded


# -- source check, meters, counters, clone session -----------------------------------------------------
TREE = [("host-0", "leaf-0"), ("leaf-0", "host-1"), ("leaf-0", "spine-0"), ("spine-0", "leaf-1"), ("leaf-1", "host-2"), ("leaf-1", "host-3")]


def test_host_ports_get_the_source_check_and_every_switch_the_clone_session():
    topo = leaf_spine(2, 2, 2)
    inst, plan = hand_plan(topo, TREE, [], ["host-1", "host-2", "host-3"])
    c = translated(inst, plan, host_macs={"host-1": "02:00:00:00:00:aa"})
    for sw, st in c.state.items():
        assert st.clones == {ps.CloneSession(ps.CPU_CLONE_SESSION, (ps.Replica(ps.CPU_PORT, 0),))}, sw
        hp = {e.matched(ps.F_INGRESS_PORT).value for e in st.in_table(ps.HOST_PORTS_TABLE)}
        assert all(e.action == ps.ActionCall(ps.COPY_TO_CPU) for e in st.in_table(ps.HOST_PORTS_TABLE))
        known = {
            (e.matched(ps.F_INGRESS_PORT).value, e.matched(ps.F_IPV4_SRC).value, e.matched(ps.F_ETH_SRC).value)
            for e in st.in_table(ps.KNOWN_SOURCES_TABLE)
        }
        if sw.startswith("spine"):  # switch-to-switch ports never copy
            assert hp == set() and known == set(), sw
    leaf0 = c.state["leaf-0"]
    assert {e.matched(ps.F_INGRESS_PORT).value for e in leaf0.in_table(ps.HOST_PORTS_TABLE)} == {3, 4}
    known = {
        (e.matched(ps.F_INGRESS_PORT).value, e.matched(ps.F_IPV4_SRC).value, e.matched(ps.F_ETH_SRC).value)
        for e in leaf0.in_table(ps.KNOWN_SOURCES_TABLE)
    }
    # host-0 with its configured MAC, host-1 with the learned one
    assert known == {(3, ps.ip_int("10.0.0.1"), 0x01), (4, ps.ip_int("10.0.0.2"), 0x0200000000AA)}
    ids = raw_ids()
    entry = next(e for e in leaf0.in_table(ps.KNOWN_SOURCES_TABLE) if e.matched(ps.F_INGRESS_PORT) == ps.Exact(4))
    assert text_format.MessageToString(to_entity(P4INFO, entry), as_one_line=True) == one_line(
        f"table_entry {{ table_id: {ids[ps.KNOWN_SOURCES_TABLE]} "
        'match { field_id: 1 exact { value: "\\004" } } match { field_id: 2 exact { value: "\\n\\000\\000\\002" } } '
        'match { field_id: 3 exact { value: "\\002\\000\\000\\000\\000\\252" } } '
        f"action {{ action {{ action_id: {ids[ps.KNOWN_SOURCE]} }} }} }}"
    )
    clone = next(iter(leaf0.clones))
    assert text_format.MessageToString(to_entity(P4INFO, clone), as_one_line=True) == one_line(
        "packet_replication_engine_entry { clone_session_entry { session_id: 100 replicas { egress_port: 255 } } }"
    )
    with pytest.raises(ValueError, match="known sources needed"):
        translated(inst, plan, limits=p4_translate.P4Limits(known_sources=1))


def test_the_job_is_metered_at_the_ps_edge_only_and_the_packet_in_meter_everywhere():
    topo = leaf_spine(2, 2, 2)
    inst, plan = hand_plan(topo, TREE, [], ["host-1", "host-2", "host-3"])
    rate = plan.jobs[0].rate
    c = translated(inst, plan, packet_in_pps=250)
    mcast0 = next(iter(c.state["leaf-0"].in_table(ps.MCAST_TABLE)))
    cell = ps.Meter(ps.PACKET_IN_METER, 0, ps.MeterConfig(250, 25, 250, 25))
    assert c.state["leaf-0"].meters == {ps.DirectMeter(ps.MCAST_TABLE, mcast0.match, p4_translate.job_meter_config(rate)), cell}
    for sw in ("spine-0", "spine-1", "leaf-1"):
        assert c.state[sw].meters == {cell}, sw
    assert translated(inst, plan).state["leaf-1"].meters == frozenset()  # packet_in_pps 0: no cap
    ids = raw_ids()
    m = P4INFO.message
    meter_ids = {x.preamble.name: x.preamble.id for x in (*m.meters, *m.direct_meters)}
    dm = next(x for x in c.state["leaf-0"].meters if isinstance(x, ps.DirectMeter))
    cfg = p4_translate.job_meter_config(rate)
    # written as a MODIFY of the direct meter (P4Runtime has no insert for it); a delete is a reset
    assert text_format.MessageToString(to_update(P4INFO, p4_reconcile.Insert(dm)), as_one_line=True) == text_format.MessageToString(
        text_format.Parse(
            f"type: MODIFY entity {{ direct_meter_entry {{ table_entry {{ table_id: {ids[ps.MCAST_TABLE]} "
            'match { field_id: 1 exact { value: "\\003" } } match { field_id: 2 exact { value: "\\357\\001\\000\\001" } } } '
            f"config {{ cir: {cfg.cir} cburst: {cfg.cburst} pir: {cfg.pir} pburst: {cfg.pburst} }} }} }}",
            p4runtime_pb2.Update(),
        ),
        as_one_line=True,
    )
    reset = to_update(P4INFO, p4_reconcile.Delete(dm))
    assert reset.type == p4runtime_pb2.Update.MODIFY and not reset.entity.direct_meter_entry.HasField("config")
    up = to_update(P4INFO, p4_reconcile.Modify(cell))
    assert (up.type, up.entity.meter_entry.meter_id, up.entity.meter_entry.index.index) == (
        p4runtime_pb2.Update.MODIFY, meter_ids[ps.PACKET_IN_METER], 0)
    assert up.entity.meter_entry.config == p4runtime_pb2.MeterConfig(cir=250, cburst=25, pir=250, pburst=25)
    assert not to_update(P4INFO, p4_reconcile.Delete(cell)).entity.meter_entry.HasField("config")


def test_meter_configs_in_the_meters_units():
    # a job's frames: its planned (payload) rate times 1514/1440 (the headers the planner
    # reserved), in bytes per second rounded down; bursts of 0.1 s, at least 32 frames
    # of 1514 bytes (`layout.meter_burst_bits`, as OpenFlow's)
    assert p4_translate.job_meter_config(1.6e6) == ps.MeterConfig(210_277, 48_448, 210_277, 48_448)
    assert p4_translate.job_meter_config(1440 * 8 * 1000) == ps.MeterConfig(1_514_000, 151_400, 1_514_000, 151_400)
    assert p4_translate.job_meter_config(80_007) == ps.MeterConfig(10_514, 48_448, 10_514, 48_448)
    assert p4_translate.job_meter_config(1) == ps.MeterConfig(1, 48_448, 1, 48_448)
    assert p4_translate.packet_in_meter_config(1000) == ps.MeterConfig(1000, 100, 1000, 100)
    assert p4_translate.packet_in_meter_config(5) == ps.MeterConfig(5, 10, 5, 10)
    with pytest.raises(ValueError, match="at least 1 packet/s"):
        p4_translate.packet_in_meter_config(0)
    with pytest.raises(ValueError, match="at least 1"):
        ps.MeterConfig(0, 1, 1, 1)


def test_a_direct_meter_is_made_after_its_entry_and_reset_before_it_goes():
    topo = leaf_spine(2, 2, 2)
    inst, plan = hand_plan(topo, TREE, [], ["host-1", "host-2", "host-3"])
    c = translated(inst, plan)
    empty = translated(inst, dataclasses.replace(plan, jobs=()))
    full, bare = c.state["leaf-0"], empty.state["leaf-0"]
    make = p4_reconcile.diff_switch(full, bare)
    kinds = [type(op.entity).__name__ for op in make if not isinstance(op.entity, ps.TableEntry) or op.entity.table == ps.MCAST_TABLE]
    assert kinds.index("DirectMeter") > kinds.index("TableEntry")
    assert p4_reconcile.apply(make, bare) == full
    brk = p4_reconcile.diff_switch(bare, full)
    assert isinstance(brk[0].entity, ps.DirectMeter) and isinstance(brk[0], p4_reconcile.Delete)
    assert p4_reconcile.apply(brk, full) == bare
    entry_first = sorted(brk, key=lambda op: isinstance(op.entity, ps.DirectMeter))
    with pytest.raises(InconsistentOp, match="direct meter"):
        p4_reconcile.apply(entry_first, full)
    # a new rate: only the meter is modified
    faster = dataclasses.replace(plan, jobs=(dataclasses.replace(plan.jobs[0], rate=plan.jobs[0].rate / 2),))
    again = translated(inst, faster, pool=c.pool, ids=c.ids)
    ops = p4_reconcile.diff_switch(again.state["leaf-0"], full)
    assert [type(op).__name__ for op in ops] == ["Modify"] and isinstance(ops[0].entity, ps.DirectMeter)


def test_meters_clones_and_counters_read_back():
    topo = leaf_spine(2, 2, 2)
    inst, plan = hand_plan(topo, TREE, [], ["host-1", "host-2", "host-3"])
    st = translated(inst, plan, packet_in_pps=100).state["leaf-0"]
    ents = []
    for x in (*st.entries, *st.groups, *st.members, *st.clones):
        ents.append(to_entity(P4INFO, x))
    for m in st.meters:  # as a switch answers: a direct meter's config on its entry, a cell per meter entry
        if isinstance(m, ps.DirectMeter):
            e = next(e for e in ents if e.HasField("table_entry") and
                     from_entity(P4INFO, e) == next(x for x in st.entries if x.key == m.key))
            e.table_entry.meter_config.CopyFrom(to_entity(P4INFO, m).direct_meter_entry.config)
        else:
            ents.append(to_entity(P4INFO, m))
    unconfigured = p4runtime_pb2.Entity()
    unconfigured.meter_entry.meter_id = P4INFO.meter(ps.PACKET_IN_METER).id
    back, notes = state_from_entities(P4INFO, [*ents, unconfigured])
    assert back == st and notes == []
    # counters: (table, match) -> (packets, bytes)
    from controller.southbound.p4runtime.codec import counter_reads, counters_from

    (read,) = counter_reads(P4INFO)
    assert read.direct_counter_entry.table_entry.table_id == P4INFO.table(ps.MCAST_TABLE).id
    mcast = next(iter(st.in_table(ps.MCAST_TABLE)))
    answer = p4runtime_pb2.Entity()
    answer.direct_counter_entry.table_entry.CopyFrom(to_entity(P4INFO, mcast).table_entry)
    answer.direct_counter_entry.table_entry.ClearField("action")
    answer.direct_counter_entry.data.packet_count = 7
    answer.direct_counter_entry.data.byte_count = 7000
    assert counters_from(P4INFO, [answer]) == {mcast.key: (7, 7000)}


@pytest.mark.parametrize("program", ["v1model", "tofino", "tofino2"])
def test_the_hybrid_plan_is_accepted_and_read_back_against_every_program_s_p4info(program):
    """The hand-made hybrid plan above (a replica with instance 1 and its egress
    rewrite on spine-0, a unicast copy on leaf-1), translated with the program's
    table sizes and CPU port and written, batch by batch, to the protocol test
    harness holding that program's P4Info: every update accepted, every switch
    read back equal to its desired state."""
    from p4runtime_test_server import P4RuntimeTestServer

    from controller.southbound.p4runtime.connection import SwitchConnection
    from controller.southbound.p4runtime.pipeline import make_pipeline
    from controller.southbound.p4runtime.codec import wildcard_reads
    from controller.config.programs import PROGRAMS

    p4info = P4Info.load(PROGRAMS[program].p4info)
    pipe = make_pipeline(p4info, b"", program)
    topo = leaf_spine(2, 2, 2)
    inst, plan = hand_plan(
        topo,
        [("host-0", "leaf-0"), ("leaf-0", "spine-0"), ("spine-0", "leaf-1")],
        [("spine-0", "host-1"), ("leaf-1", "host-3")],
        ["host-1", "host-3"],
    )
    c = translated(inst, plan, limits=pipe.limits, cpu_port=pipe.cpu_port, packet_in_pps=100)
    assert c.state["spine-0"].in_table(ps.REWRITE_TABLE) and any(r.instance for g in c.state["spine-0"].groups for r in g.replicas)
    servers, conns = {}, {}
    try:
        for i, name in enumerate(sorted(c.state)):
            servers[name] = P4RuntimeTestServer(device_id=i + 1, mode="spec", needs_device_config=False)
            conns[name] = SwitchConnection(name, servers[name].start(), i + 1, 1, p4info)
            assert conns[name].connect(5.0)
            assert conns[name].set_pipeline(pipe.device_config, pipe.cookie)
        empty = ps.P4SwitchState(frozenset(), frozenset(), frozenset(), frozenset(), frozenset())
        for batch in p4_reconcile.steps({n: p4_reconcile.diff_switch(st, empty) for n, st in c.state.items()}):
            for name, ops in batch.items():
                results = conns[name].write([to_update(p4info, op) for op in ops])
                assert all(r.ok for r in results), (name, [r for r in results if not r.ok])
        for name, st in c.state.items():
            back, notes = state_from_entities(p4info, conns[name].read(wildcard_reads(p4info, tuple(ps.USED_TABLES))))
            assert back == st and not notes, name
            assert st.clones == {ps.CloneSession(ps.CPU_CLONE_SESSION, (ps.Replica(PROGRAMS[program].cpu_port, 0),))}
    finally:
        for conn in conns.values():
            conn.close()
        for server in servers.values():
            server.stop()
