"""The OpenFlow translation, tested by where packets go (Faucet's fakeoftable idea).

Plans of lp-rounding, spt and unicast on a small fat-tree, a leaf-spine and a
general graph, all with tight group budgets (so multicast, hybrid and unicast
structures all occur), are translated to switch states; the tracer then checks
that every job's stream reaches exactly its workers, once each, that unicast
routing delivers between every pair of hosts along the planner's routes, that
multicast entries and groups sit exactly where the structures say, and that
re-planning reconciles make-before-break.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections import Counter
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.core.updates import TranslationInputs
from controller.algorithm.model import Instance, Job, Link, Node, Topology
from controller.algorithm.network import Network
from controller.algorithm.topologies import fat_tree, leaf_spine
from controller.algorithm.wire import wire_rate
from controller.southbound.layout import meter_burst_bits
from controller.algorithm.workload import WorkloadSpec, generate_jobs, reference_instance
from controller.planner import run
from controller.addressing.groups import AddressPoolExhausted, GroupAddressPool, group_mac
from controller.addressing.hosts import HostAddress, host_addresses
from controller.southbound.openflow.entries import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    OFPP_CONTROLLER,
    OFPP_IN_PORT,
    PRIORITY_CONTROL,
    PRIORITY_GUARD_DROP,
    PRIORITY_MULTICAST,
    PRIORITY_SOURCE_KNOWN,
    PRIORITY_SOURCE_MISS,
    PRIORITY_SOURCE_UNKNOWN,
    PRIORITY_TRANSIT,
    PRIORITY_UNICAST,
    TABLE_FORWARD,
    TABLE_SOURCE,
    FlowEntry,
    GotoTable,
    GroupAction,
    GroupEntry,
    Meter,
    MeterEntry,
    Drop,
    Output,
    SetField,
    SwitchState,
    decode_cookie,
)
from controller.southbound.openflow.translate import meter_for_rate, multicast_flows, translate
from controller.southbound.ids import IdAllocation
from controller.addressing.ports import default_port_map
from controller.southbound.openflow.reconcile import (
    AddFlow,
    AddGroup,
    AddMeter,
    DeleteFlow,
    DeleteGroup,
    DeleteMeter,
    InconsistentOp,
    ModifyFlow,
    apply,
    apply_all,
    diff,
    phases,
)
from controller.southbound.openflow.tracer import LoopError, Packet, TraceError, trace, trace_all

ALGORITHMS = ("lp-rounding", "spt", "unicast")
KINDS = ("fat-tree", "leaf-spine", "graph")


# -- instances and translations ---------------------------------------------------------------
def ring_graph(group_capacity: int) -> Topology:
    """Six switches in a ring with one chord, two hosts each: not a Clos fabric."""
    nodes = [Node(f"s{i}", "switch", group_capacity, None) for i in range(6)]
    links = [Link(f"s{i}", f"s{(i + 1) % 6}", 1e10) for i in range(6)] + [Link("s0", "s3", 1e10)]
    for i in range(6):
        for k in range(2):
            nodes.append(Node(f"h{i}{k}", "host"))
            links.append(Link(f"s{i}", f"h{i}{k}", 1e10))
    return Topology(tuple(nodes), tuple(links))


@lru_cache(maxsize=None)
def instance(kind: str, seed: int = 1) -> Instance:
    if kind == "fat-tree":
        return reference_instance(4, 10, group_capacity=2, seed=seed, min_workers=2, max_workers=8)
    if kind == "leaf-spine":
        topo = leaf_spine(4, 2, 4, group_capacity=1)
        return Instance(topo, generate_jobs(topo, WorkloadSpec(6, 2, 7, seed=seed + 2)))
    topo = ring_graph(group_capacity=1)
    return Instance(topo, generate_jobs(topo, WorkloadSpec(6, 2, 6, seed=seed + 4)))


@lru_cache(maxsize=None)
def plan_of(kind: str, algorithm: str):
    return run(instance(kind), algorithm)


@dataclasses.dataclass
class Ctx:
    inst: Instance
    net: Network
    plan: object
    ports: dict
    addrs: dict
    groups: dict
    state: dict
    pool: GroupAddressPool
    ids: object


def translated(inst: Instance, plan, pool: GroupAddressPool | None = None, ids=None) -> Ctx:
    net = Network(inst.topology)
    ports = default_port_map(inst.topology)
    addrs = host_addresses(inst.topology)
    pool = pool or GroupAddressPool()
    groups = pool.sync(jp.job.id for jp in plan.jobs)
    tr = translate(TranslationInputs(net, plan, ports, addrs, groups), ids=ids)
    return Ctx(inst, net, plan, ports, addrs, groups, tr.state, pool, tr.ids)


@lru_cache(maxsize=None)
def ctx_of(kind: str, algorithm: str) -> Ctx:
    return translated(instance(kind), plan_of(kind, algorithm))


CASES = [(k, a) for k in KINDS for a in ALGORITHMS]


def job_deliveries(c: Ctx, state: dict, jp, settled: bool = True) -> tuple[Counter, list[str]]:
    """Hosts reached by a job's stream (multicast from the PS plus the unicast copies
    the PS emits itself), and a list of problems with the copies' headers/drops."""
    topo = c.inst.topology
    job = jp.job
    gip = str(c.groups[job.id])
    problems: list[str] = []
    got: Counter = Counter()
    ps_ip, ps_mac = c.addrs[job.ps].ip, c.addrs[job.ps].mac
    res = trace_all(state, topo, c.ports, job.ps, Packet(gip, group_mac(gip), ipv4_src=ps_ip, eth_src=ps_mac))
    if not jp.structure.tree or jp.rate <= 0:
        # The PS sends nothing to the group. In a settled state no switch forwards
        # such a packet; during a re-plan the entries of the job's next tree may.
        if settled and (res.deliveries or len(res.drops) != 1):
            problems.append(f"a group packet of a job without a tree was not dropped at once: {res}")
        res = dataclasses.replace(res, deliveries=(), drops=())
    sent = [res]
    ps = topo.index[job.ps]
    for emitter, w in jp.structure.branches:
        if emitter == ps:
            wa = c.addrs[topo.name(w)]
            pkt = Packet(wa.ip, wa.mac, ipv4_src=ps_ip, eth_src=ps_mac)
            sent.append(trace_all(state, topo, c.ports, job.ps, pkt))
    for r in sent:
        for d in r.deliveries:
            got[d.host] += 1
            mine = c.addrs[d.host]
            if (d.ipv4_dst, d.eth_dst) not in ((gip, group_mac(gip)), (mine.ip, mine.mac)):
                problems.append(f"{d.host} got a copy addressed to {d.ipv4_dst}/{d.eth_dst}")
        problems += [f"copy dropped at {x.switch}: {x.reason}" for x in r.drops if jp.rate > 0]
        problems += [f"a copy went to the controller at {x.switch}: the PS's source is known" for x in r.to_controller]
    return got, problems


def check_all_jobs_delivered(c: Ctx, state: dict, plan, settled: bool = True) -> None:
    for jp in plan.jobs:
        got, problems = job_deliveries(c, state, jp, settled)
        assert not problems, (jp.job.id, problems)
        if jp.rate > 0:
            assert got == Counter(jp.job.workers), (jp.job.id, jp.structure.mode)


# -- delivery ---------------------------------------------------------------------------------
def test_the_plans_cover_tree_hybrid_and_unicast_structures():
    modes = {jp.structure.mode for k, a in CASES for jp in plan_of(k, a).jobs}
    assert modes == {"multicast", "hybrid", "unicast"}
    assert any(ctx_of(k, a).state[s].groups for k, a in CASES for s in ctx_of(k, a).state)


@pytest.mark.parametrize("kind,algorithm", CASES)
def test_each_job_reaches_exactly_its_workers_once(kind, algorithm):
    c = ctx_of(kind, algorithm)
    assert all(jp.rate > 0 for jp in c.plan.jobs)
    check_all_jobs_delivered(c, c.state, c.plan)


@pytest.mark.parametrize("kind,algorithm", CASES)
def test_multicast_entries_groups_and_meters_match_the_structures(kind, algorithm):
    c = ctx_of(kind, algorithm)
    topo = c.inst.topology
    idx = topo.index
    for jp in c.plan.jobs:
        gip = str(c.groups[jp.job.id])
        s = jp.structure
        parent = {child: p for p, child in s.tree}
        at: dict[int, FlowEntry] = {}
        for name, sw_state in c.state.items():
            for f in multicast_flows(sw_state):
                if decode_cookie(f.cookie) == ("multicast", ipaddress.IPv4Address(gip)):
                    assert f.matched("ipv4_dst") == gip
                    assert idx[name] not in at
                    at[idx[name]] = f
        assert set(at) == set(s.entries)
        replicating = set()
        for v, f in at.items():
            st = c.state[topo.name(v)]
            assert f.priority == PRIORITY_MULTICAST > PRIORITY_UNICAST
            assert f.matched("in_port") == c.ports[(v, parent[v])]
            gids = [a.group_id for a in f.actions if isinstance(a, GroupAction)]
            if gids:
                replicating.add(v)
                assert gids[0] in st.group_table()
                assert st.group_table()[gids[0]].type == "all"
                assert len(st.group_table()[gids[0]].buckets) >= 2
            meters = [a.meter_id for a in f.actions if isinstance(a, Meter)]
            if parent[v] == idx[jp.job.ps]:
                assert len(meters) == 1
                assert st.meter_table()[meters[0]] == meter_for_rate(meters[0], jp.rate)
                assert st.meter_table()[meters[0]].rate * 1000 <= wire_rate(jp.rate)  # its frames: headers reserved
            else:
                assert meters == []
        assert replicating == set(s.groups)
    for name, st in c.state.items():
        cap = topo.nodes[idx[name]].group_capacity
        assert cap is None or len(st.groups) <= cap
        used = {a.group_id for f in st.flows for a in f.actions if isinstance(a, GroupAction)}
        assert used == set(st.group_table())  # no group without a flow using it
        used_m = {a.meter_id for f in st.flows for a in f.actions if isinstance(a, Meter)}
        assert used_m == set(st.meter_table())


@pytest.mark.parametrize("kind", KINDS)
def test_unicast_pingall_follows_the_planner_routes(kind):
    c = ctx_of(kind, "spt")
    topo = c.inst.topology
    hosts = [topo.name(h) for h in topo.hosts]
    for a in hosts:
        for b in hosts:
            if a == b:
                continue
            pkt = Packet(c.addrs[b].ip, c.addrs[b].mac, ipv4_src=c.addrs[a].ip, eth_src=c.addrs[a].mac)
            res = trace_all(c.state, topo, c.ports, a, pkt)
            assert [d.host for d in res.deliveries] == [b] and not res.drops, (a, b, res)
            assert not res.to_controller, (a, b, res)
            route = c.net.routing.path(topo.index[a], topo.index[b])
            assert res.deliveries[0].hops == tuple(topo.name(v) for v in route[1:-1])


def test_a_unicast_branch_whose_route_goes_back_up_uses_in_port():
    """Hand-made hybrid structure on a leaf-spine: spine-0 receives the stream from
    leaf-0 and emits a unicast copy to a worker on leaf-0 — back out of its in-port."""
    topo = leaf_spine(2, 2, 2)
    net = Network(topo)
    idx = topo.index
    ps, w_same, w_other = idx["host-0"], idx["host-1"], idx["host-2"]
    leaf0, leaf1 = idx["leaf-0"], idx["leaf-1"]
    spine = net.routing.next_hop(leaf0, w_other)
    assert net.routing.next_hop(spine, w_same) == leaf0
    from controller.algorithm.structures import make_structure

    s = make_structure(net, [(ps, leaf0), (leaf0, spine), (spine, leaf1), (leaf1, w_other)], [(spine, w_same)])
    job = Job("j", "host-0", ("host-1", "host-2"), 1e9)
    base = run(Instance(topo, (job,)), "unicast")
    plan = dataclasses.replace(base, jobs=(dataclasses.replace(base.jobs[0], structure=s),))
    c = translated(Instance(topo, (job,)), plan)
    group = next(iter(c.state[topo.name(spine)].groups))
    assert any(Output(OFPP_IN_PORT) in b for b in group.buckets)
    check_all_jobs_delivered(c, c.state, plan)


# -- budgets and consistency -------------------------------------------------------------------
def test_translation_refuses_more_groups_than_the_budget():
    c = ctx_of("fat-tree", "spt")
    busiest = max(len(st.groups) for st in c.state.values())
    assert busiest >= 1
    tight = fat_tree(4, group_capacity=busiest - 1)
    with pytest.raises(ValueError, match="groups"):
        translate(TranslationInputs(Network(tight), c.plan, c.ports, c.addrs, c.groups))


def test_translation_refuses_a_structure_whose_groups_disagree_with_its_tree():
    c = ctx_of("fat-tree", "spt")
    jp = next(jp for jp in c.plan.jobs if jp.structure.groups)
    bad = dataclasses.replace(jp, structure=dataclasses.replace(jp.structure, groups=frozenset()))
    plan = dataclasses.replace(c.plan, jobs=(bad,))
    with pytest.raises(ValueError, match="groups"):
        translate(TranslationInputs(c.net, plan, c.ports, c.addrs, c.groups))


def test_an_incremental_translation_checks_a_changed_port_map_and_sees_one_changed_in_place():
    # the base flows are reused while the port map equals the one they were made from
    # (the check ran then); a map changed since, even the same dict changed in place,
    # is checked again and gives new flows
    c = ctx_of("fat-tree", "spt")
    ports = dict(c.ports)
    first = translate(TranslationInputs(c.net, c.plan, ports, c.addrs, c.groups))
    (sw, a), (_, b) = [end for end in sorted(ports) if end[0] == next(iter(sorted(ports)))[0]][:2]
    clash = {**ports, (sw, b): ports[(sw, a)]}
    with pytest.raises(ValueError, match="leads to both"):
        translate(TranslationInputs(c.net, c.plan, clash, c.addrs, c.groups), ids=first.ids, previous=first)
    ports[(sw, a)], ports[(sw, b)] = ports[(sw, b)], ports[(sw, a)]  # a swap, in the very dict translated
    again = translate(TranslationInputs(c.net, c.plan, ports, c.addrs, c.groups), ids=first.ids, previous=first)
    fresh = translate(TranslationInputs(c.net, c.plan, ports, c.addrs, c.groups), ids=first.ids)
    assert again.state == fresh.state
    assert again.state != first.state


def test_translation_needs_a_group_address_for_every_job():
    c = ctx_of("leaf-spine", "spt")
    groups = dict(c.groups)
    groups.pop(c.plan.jobs[0].job.id)
    with pytest.raises(ValueError, match="group address"):
        translate(TranslationInputs(c.net, c.plan, c.ports, c.addrs, groups))


def test_packet_in_cap_is_a_meter_on_every_switch_and_off_by_default():
    from controller.southbound.openflow.entries import OFPM_CONTROLLER
    from controller.southbound.openflow.translate import packet_in_meter

    c = ctx_of("leaf-spine", "spt")
    assert all(OFPM_CONTROLLER not in s.meter_table() for s in c.state.values())
    capped = translate(TranslationInputs(c.net, c.plan, c.ports, c.addrs, c.groups), packet_in_pps=300).state
    for name, s in capped.items():
        assert s.meter_table()[OFPM_CONTROLLER] == packet_in_meter(300)
        assert s.meters - {packet_in_meter(300)} == c.state[name].meters and s.flows == c.state[name].flows


def test_translation_is_deterministic_and_cookies_attribute_flows():
    c = ctx_of("fat-tree", "lp-rounding")
    again = translate(TranslationInputs(c.net, c.plan, c.ports, c.addrs, c.groups)).state
    assert again == c.state
    for sw_state in c.state.values():
        for f in sw_state.flows:
            kind, addr = decode_cookie(f.cookie)
            if kind == "multicast":
                assert c.pool.job_of(addr) is not None
            elif kind == "control":
                assert f.table_id == TABLE_SOURCE and (f.matched("eth_type") or 0) == int(addr)
            elif kind == "source":
                assert f.table_id == TABLE_SOURCE and (f.matched("ipv4_src") or f.matched("arp_spa")) == str(addr)
            elif kind == "guard":
                assert f.table_id == TABLE_SOURCE and (f.matched("eth_type") or 0) == int(addr)
                assert f.matched("in_port") is not None
            else:
                assert kind == "unicast" and (f.matched("ipv4_dst") or f.matched("arp_tpa")) == str(addr)


# -- reconciliation ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,algorithm", CASES)
def test_diff_of_identical_states_is_empty(kind, algorithm):
    c = ctx_of(kind, algorithm)
    assert diff(c.state, c.state) == {}
    first = diff(c.state, {})
    assert all(isinstance(op, (AddFlow, AddGroup, AddMeter)) for ops in first.values() for op in ops)
    assert apply_all(first, {}) == c.state


def changed_jobs(inst: Instance, seed: int) -> tuple[Job, ...]:
    """Keep every other job (one of them with a new demand), add three new ones."""
    kept = list(inst.jobs[::2])
    kept[0] = dataclasses.replace(kept[0], demand=kept[0].demand / 2)
    new = generate_jobs(inst.topology, WorkloadSpec(3, 2, 6, seed=seed))
    return tuple(kept) + tuple(dataclasses.replace(j, id=f"new-{j.id}") for j in new)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("algorithm", ("lp-rounding", "spt"))
def test_replanning_is_make_before_break(kind, algorithm):
    old = translated(instance(kind), plan_of(kind, algorithm))
    inst2 = Instance(old.inst.topology, changed_jobs(old.inst, seed=7))
    plan2 = run(inst2, algorithm)
    new = translated(inst2, plan2, pool=old.pool, ids=old.ids)
    ops = diff(new.state, old.state)
    assert ops
    # one switch at a time, op by op: `apply` raises on any dangling reference
    for sw, sw_ops in ops.items():
        st = old.state[sw]
        for op in sw_ops:
            st = apply([op], st)
        assert st == new.state[sw]
    # network-wide phases: old jobs intact after "make", new jobs exact after "switch"
    make, switch, brk = phases(ops)
    state = apply_all(make, old.state)
    check_all_jobs_delivered(old, state, old.plan, settled=False)
    state = apply_all(switch, state)
    check_all_jobs_delivered(new, state, plan2, settled=False)
    state = apply_all(brk, state)
    assert state == new.state
    check_all_jobs_delivered(new, state, plan2)
    # kept jobs keep their group address and, where they still replicate, their group id
    kept = {jp.job.id for jp in plan2.jobs} & {jp.job.id for jp in old.plan.jobs}
    assert kept
    for j in kept:
        assert old.groups[j] == new.groups[j]
        for sw, by_job in new.ids.groups.by_switch.items():
            if j in by_job and j in old.ids.groups.by_switch.get(sw, {}):
                assert by_job[j] == old.ids.groups.by_switch[sw][j]


def test_breaking_before_making_is_caught_by_the_switch_model():
    c = ctx_of("fat-tree", "spt")
    sw, st = next((sw, st) for sw, st in c.state.items() if st.groups)
    gone = SwitchState(frozenset(f for f in st.flows if not any(isinstance(a, GroupAction) for a in f.actions)))
    ops = diff({sw: gone}, {sw: st})[sw]
    assert any(isinstance(op, DeleteGroup) for op in ops) and any(isinstance(op, DeleteFlow) for op in ops)
    assert apply(ops, st) == gone
    groups_first = sorted(ops, key=lambda op: not isinstance(op, DeleteGroup))
    with pytest.raises(InconsistentOp, match="missing group"):
        apply(groups_first, st)
    with pytest.raises(InconsistentOp, match="does not exist"):
        apply(ops, gone)


def test_a_job_meter_polices_its_frames_with_a_100_ms_burst_of_at_least_32_frames():
    # the planned rate is a payload rate: the meter polices the frames, 1514/1440 of it
    # (headers the planner reserved on every link), rounded down to kbit/s; the burst
    # (`layout.meter_burst_bits`, as P4's) is 100 ms of that, at least 32 frames of 1514
    # bytes (387,584 bits): a paced sender on a loaded machine catches up in bursts,
    # and a software switch takes its packets in batches
    assert meter_for_rate(3, 1440e3) == MeterEntry(3, 1514, 388)
    assert meter_for_rate(1, 9e6) == MeterEntry(1, 9462, 947)
    assert meter_for_rate(1, 1e9) == MeterEntry(1, 1_051_388, 105_139)
    assert meter_for_rate(1, 10.0) == MeterEntry(1, 1, 388)


def test_the_meter_burst_rule_is_one_for_both_backends():
    # at least 32 full frames, else 100 ms of the rate; refused for no rate
    assert meter_burst_bits(1.0) == meter_burst_bits(3.8e6) == 32 * 1514 * 8
    assert meter_burst_bits(3.9e6) == 390_000
    assert meter_burst_bits(1e9) == 100_000_000
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="must be > 0"):
            meter_burst_bits(bad)
    from controller.southbound.p4runtime.translate import job_meter_config
    for rate in (1e3, 1.07e6, 2.2e6, 9e6, 4e8):
        of, p4 = meter_for_rate(1, rate), job_meter_config(rate)
        # the same burst in each backend's unit (kbit rounded up; bytes rounded up)
        assert abs(of.burst * 1000 - p4.cburst * 8) < 1000 + 8 * 8, (rate, of, p4)


def test_new_actions_on_the_same_match_are_a_modify():
    match = (("eth_type", 0x0800), ("ipv4_dst", "239.1.0.1"), ("in_port", 1))
    a = SwitchState(frozenset({FlowEntry(TABLE_FORWARD, PRIORITY_MULTICAST, match, (Output(2),), 5)}))
    b = SwitchState(
        frozenset({FlowEntry(TABLE_FORWARD, PRIORITY_MULTICAST, match, (GroupAction(1),), 5)}),
        frozenset({GroupEntry(1, "all", ((Output(2),), (Output(3),)))}),
        frozenset({MeterEntry(1, 1000, 120)}),
    )
    ops = diff({"s": b}, {"s": a})["s"]
    assert [type(op).__name__ for op in ops] == ["AddMeter", "AddGroup", "ModifyFlow"]
    back = diff({"s": a}, {"s": b})["s"]
    assert [type(op) for op in back] == [ModifyFlow, DeleteGroup, DeleteMeter]
    assert apply(back, apply(ops, a)) == a


@pytest.mark.parametrize("kind", KINDS)
def test_deleting_every_job_leaves_no_multicast_state(kind):
    c = translated(instance(kind), plan_of(kind, "lp-rounding"))
    empty_plan = run(Instance(c.inst.topology, ()), "lp-rounding")
    after = translated(c.inst, empty_plan, pool=c.pool, ids=c.ids)
    assert len(c.pool) == 0
    for sw_state in after.state.values():
        assert not sw_state.groups and not sw_state.meters and not multicast_flows(sw_state)
        assert {f.priority for f in sw_state.flows} <= {
            PRIORITY_UNICAST, PRIORITY_CONTROL, PRIORITY_SOURCE_MISS, PRIORITY_SOURCE_KNOWN, PRIORITY_SOURCE_UNKNOWN,
            PRIORITY_TRANSIT, PRIORITY_GUARD_DROP,
        }
    ops = diff(after.state, c.state)
    assert all(isinstance(op, (DeleteFlow, DeleteGroup, DeleteMeter)) for o in ops.values() for op in o)
    assert apply_all(ops, c.state) == after.state


# -- tracer ----------------------------------------------------------------------------------------
def two_switch_line():
    topo = Topology(
        (Node("s1", "switch"), Node("s2", "switch"), Node("a", "host"), Node("b", "host")),
        (Link("s1", "s2", 1e9), Link("s1", "a", 1e9), Link("s2", "b", 1e9)),
    )
    return topo, default_port_map(topo)  # s1: 1->s2, 2->a; s2: 1->s1, 2->b


def flow(match, actions, priority=PRIORITY_UNICAST):
    return FlowEntry(TABLE_SOURCE, priority, tuple(match.items()), tuple(actions))


def test_tracer_detects_a_forwarding_loop():
    topo, ports = two_switch_line()
    state = {"s1": SwitchState({flow({"ipv4_dst": "10.9.9.9", "in_port": 2}, [Output(1)]),
                                flow({"ipv4_dst": "10.9.9.9", "in_port": 1}, [Output(OFPP_IN_PORT)])}),
             "s2": SwitchState({flow({"ipv4_dst": "10.9.9.9"}, [Output(OFPP_IN_PORT)])})}
    with pytest.raises(LoopError):
        trace(state, topo, ports, "a", Packet("10.9.9.9", "00:00:00:00:09:09"))


def test_tracer_highest_priority_wins_and_unmatched_copies_drop():
    topo, ports = two_switch_line()
    pkt = Packet("10.0.0.4", "00:00:00:00:00:04")
    state = {"s1": SwitchState({flow({"ipv4_dst": "10.0.0.4"}, [Output(1)], 10),
                                flow({"eth_type": 0x0800}, [Output(2)], 5)}),
             "s2": SwitchState({flow({"ipv4_dst": "10.0.0.4"},
                                     [SetField("eth_dst", "00:00:00:00:00:44"), Output(2)])})}
    assert [(d.host, d.eth_dst, d.hops) for d in trace(state, topo, ports, "a", pkt)] == [
        ("b", "00:00:00:00:00:44", ("s1", "s2"))]
    res = trace_all(state, topo, ports, "a", Packet("10.0.0.5", "00:00:00:00:00:05"))
    # the low-priority flow sends it back to `a` through its own ingress port: dropped
    assert res.deliveries == () and [d.reason for d in res.drops] == ["output to the ingress port"]
    res = trace_all({"s1": state["s1"]}, topo, ports, "a", pkt)
    assert res.deliveries == () and res.drops[0].switch == "s2"


def test_tracer_refuses_a_flow_pointing_at_a_missing_group():
    topo, ports = two_switch_line()
    state = {"s1": SwitchState({flow({"ipv4_dst": "239.1.0.1"}, [GroupAction(7)])})}
    with pytest.raises(TraceError, match="missing group"):
        trace(state, topo, ports, "a", Packet("239.1.0.1", group_mac("239.1.0.1")))


# -- addresses and ids --------------------------------------------------------------------------------
def test_group_address_pool_is_stable_and_reuses_lowest_first():
    pool = GroupAddressPool("239.1.0.0/16")
    first = pool.sync(["b", "a", "c"])
    assert [str(first[j]) for j in "abc"] == ["239.1.0.1", "239.1.0.2", "239.1.0.3"]
    pool.release("a")
    pool.release("c")
    assert pool.address("b") == first["b"]
    assert str(pool.address("d")) == "239.1.0.1"
    assert str(pool.address("e")) == "239.1.0.3"
    assert str(pool.address("f")) == "239.1.0.4"
    assert pool.job_of("239.1.0.3") == "e" and pool.job_of("239.2.0.1") is None
    # a plan's sync hands an address freed by it out from the next sync on
    pool = GroupAddressPool("239.1.0.0/16")
    pool.sync(["a", "b"])
    assert {j: str(a) for j, a in pool.sync(["b", "c"]).items()} == {"b": "239.1.0.2", "c": "239.1.0.3"}
    assert str(pool.sync(["b", "c", "d"])["d"]) == "239.1.0.1"
    assert group_mac("239.1.0.3") == "01:00:5e:01:00:03"
    assert group_mac("239.129.0.3") == "01:00:5e:01:00:03"


def test_group_address_pool_limits():
    small = GroupAddressPool("239.9.9.0/30")
    assert small.size == 2
    small.sync(["x", "y"])
    with pytest.raises(AddressPoolExhausted, match="exhausted"):
        small.address("z")
    for bad in ("10.0.0.0/8", "224.0.0.0/16", "240.0.0.0/8", "239.1.0.0/33"):
        with pytest.raises(ValueError):
            GroupAddressPool(bad)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6)), max_size=40))
def test_group_address_pool_matches_a_lowest_free_model(ops):
    pool = GroupAddressPool("239.5.0.0/28")  # 14 usable addresses, enough for 7 jobs
    model: dict[str, int] = {}
    for allocate, n in ops:
        job = f"j{n}"
        if allocate:
            if job not in model:
                model[job] = min(set(range(1, 15)) - set(model.values()))
            assert int(pool.address(job)) - int(ipaddress.IPv4Address("239.5.0.0")) == model[job]
        else:
            model.pop(job, None)
            pool.release(job)
    assert {j: int(a) & 0xFF for j, a in pool.assignments().items()} == model


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(st.sampled_from(["s1", "s2"]), st.sets(st.sampled_from("abcdef"))),
                min_size=1, max_size=8))
def test_id_allocation_is_stable_unique_and_never_reuses_an_id_in_the_same_update(rounds):
    alloc = IdAllocation(limit=1000)
    for wanted in rounds:
        nxt = alloc.update(wanted)
        for sw, jobs in wanted.items():
            ids = nxt.by_switch.get(sw, {})
            assert set(ids) == set(jobs)
            assert len(set(ids.values())) == len(ids) and all(i >= 1 for i in ids.values())
            before = alloc.by_switch.get(sw, {})
            for j, i in ids.items():
                if j in before:
                    assert before[j] == i
                else:
                    assert i not in before.values()
        assert set(nxt.by_switch) == {sw for sw, jobs in wanted.items() if jobs}
        alloc = nxt


def test_id_allocation_stays_in_its_range():
    alloc = IdAllocation(limit=12, first=10)
    nxt = alloc.update({"s1": ["a", "b", "c"]})
    assert nxt.by_switch == {"s1": {"a": 10, "b": 11, "c": 12}} and nxt.first == 10
    with pytest.raises(ValueError, match="no free id in 10..12"):
        nxt.update({"s1": ["a", "b", "c", "d"]})
    # ids kept from an allocation with another range (the config changed) move into this one
    moved = IdAllocation(12, {"s1": {"a": 3, "b": 11}}, 10).update({"s1": ["a", "b"]})
    assert moved.by_switch == {"s1": {"a": 10, "b": 11}}
    assert [alloc.owns(i) for i in (9, 10, 12, 13)] == [False, True, True, False]
    with pytest.raises(ValueError, match="empty"):
        IdAllocation(limit=5, first=6)


def test_host_addresses_defaults_and_overrides():
    topo = leaf_spine(2, 1, 2)
    addrs = host_addresses(topo)
    assert addrs["host-0"] == HostAddress("10.0.0.1", "00:00:00:00:00:01")
    assert addrs["host-3"] == HostAddress("10.0.0.4", "00:00:00:00:00:04")
    custom = host_addresses(topo, {"host-1": HostAddress("192.168.1.7", "02:AA:00:00:00:07")})
    assert custom["host-1"] == HostAddress("192.168.1.7", "02:aa:00:00:00:07")
    assert custom["host-0"] == addrs["host-0"]
    with pytest.raises(ValueError, match="same IP"):
        host_addresses(topo, {"host-1": HostAddress("10.0.0.1", "02:00:00:00:00:01")})
    with pytest.raises(ValueError, match="unknown hosts"):
        host_addresses(topo, {"leaf-0": HostAddress("10.9.0.1", "02:00:00:00:00:09")})
    with pytest.raises(ValueError):
        HostAddress("239.1.0.1", "02:00:00:00:00:01")


# -- a property over random small workloads ---------------------------------------------------------
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), cap=st.sampled_from([0, 1, 2, None]),
       algorithm=st.sampled_from(["spt", "unicast"]))
def test_random_fat_tree_workloads_deliver_exactly(seed, cap, algorithm):
    topo = fat_tree(4, group_capacity=cap)
    inst = Instance(topo, generate_jobs(topo, WorkloadSpec(5, 1, 6, rack_locality=0.3, seed=seed)))
    plan = run(inst, algorithm)
    c = translated(inst, plan)
    check_all_jobs_delivered(c, c.state, plan)
    for name, st_ in c.state.items():
        assert cap is None or len(st_.groups) <= cap


# -- the source table ------------------------------------------------------------------------------
def arp_request(c, a: str, b: str, eth_src: str | None = None) -> Packet:
    """The ARP request host `a` broadcasts for host `b`'s address."""
    return Packet(c.addrs[b].ip, "ff:ff:ff:ff:ff:ff", eth_type=ETH_TYPE_ARP, ipv4_src=c.addrs[a].ip,
                  eth_src=eth_src or c.addrs[a].mac)


@pytest.mark.parametrize("kind", KINDS)
def test_arp_between_known_hosts_stays_in_the_data_plane(kind):
    """A known host's ARP request reaches its target alone, along the unicast route,
    and the answer comes back the same way; the controller gets a copy of each (at
    the edge switch it came in at) and is not needed: hosts keep their ARP caches
    valid while the controller is down or restarting."""
    c = ctx_of(kind, "spt")
    topo = c.inst.topology
    hosts = [topo.name(h) for h in topo.hosts]
    for a in hosts[:3]:
        for b in hosts:
            if a == b:
                continue
            edge = topo.name(topo.neighbors[topo.index[a]][0])
            res = trace_all(c.state, topo, c.ports, a, arp_request(c, a, b))
            assert [d.host for d in res.deliveries] == [b] and not res.drops, (a, b, res)
            assert [p.switch for p in res.to_controller] == [edge], (a, b, res)
            offline = {sw: SwitchState(frozenset(FlowEntry(f.table_id, f.priority, f.match,
                                                           tuple(x for x in f.actions if x != Output(OFPP_CONTROLLER)),
                                                           f.cookie)
                                                 for f in st.flows), st.groups, st.meters)
                       for sw, st in c.state.items()}
            res = trace_all(offline, topo, c.ports, a, arp_request(c, a, b))
            assert [d.host for d in res.deliveries] == [b], ("without the controller", a, b, res)
            route = c.net.routing.path(topo.index[a], topo.index[b])
            assert res.deliveries[0].hops == tuple(topo.name(v) for v in route[1:-1])
            reply = Packet(c.addrs[a].ip, c.addrs[a].mac, eth_type=ETH_TYPE_ARP, ipv4_src=c.addrs[b].ip,
                           eth_src=c.addrs[b].mac)
            res = trace_all(c.state, topo, c.ports, b, reply)
            assert [d.host for d in res.deliveries] == [a] and len(res.to_controller) == 1, (b, a, res)


def test_arp_from_an_unknown_source_or_for_an_unknown_target_goes_to_the_controller_only():
    c = ctx_of("fat-tree", "spt")
    topo = c.inst.topology
    a, b = (topo.name(h) for h in topo.hosts[:2])
    edge = topo.name(topo.neighbors[topo.index[a]][0])
    port = c.ports[(topo.index[edge], topo.index[a])]
    # a MAC the controller has not learned: the controller learns it, and answers
    unknown = arp_request(c, a, b, eth_src="02:aa:00:00:00:01")
    res = trace_all(c.state, topo, c.ports, a, unknown)
    assert res.deliveries == () and [(p.switch, p.in_port) for p in res.to_controller] == [(edge, port)]
    # a known host asking for an address nobody has: dropped at its edge switch, never flooded
    stranger = Packet("10.77.0.1", "ff:ff:ff:ff:ff:ff", eth_type=ETH_TYPE_ARP, ipv4_src=c.addrs[a].ip,
                      eth_src=c.addrs[a].mac)
    res = trace_all(c.state, topo, c.ports, a, stranger)
    assert res.deliveries == () and [d.switch for d in res.drops] == [edge]
    assert [p.switch for p in res.to_controller] == [edge]  # which does not answer either (tests/test_service.py)


def test_unknown_source_is_not_forwarded_but_copied_to_the_controller_until_learned():
    # issue 22: the source guard drops what it used to forward while the controller learned
    c = ctx_of("fat-tree", "spt")
    topo = c.inst.topology
    a, b = (topo.name(h) for h in topo.hosts[:2])
    edge = topo.name(topo.neighbors[topo.index[a]][0])
    real_mac = "02:aa:00:00:00:01"  # not the configured one: a host the controller has not learned
    pkt = Packet(c.addrs[b].ip, c.addrs[b].mac, ipv4_src=c.addrs[a].ip, eth_src=real_mac)
    res = trace_all(c.state, topo, c.ports, a, pkt)
    assert not res.deliveries
    assert [(p.switch, p.in_port, p.packet) for p in res.to_controller] == [(edge, c.ports[(topo.index[edge], topo.index[a])], pkt)]
    # once the controller has learned the MAC, the switch knows the source
    learned = translate(TranslationInputs(c.net, c.plan, c.ports, c.addrs, c.groups, host_macs={a: real_mac})).state
    res = trace_all(learned, topo, c.ports, a, pkt)
    assert [d.host for d in res.deliveries] == [b] and not res.to_controller
    known = [f for f in learned[edge].flows if f.priority == PRIORITY_SOURCE_KNOWN and f.matched("ipv4_src") == c.addrs[a].ip]
    assert [f.matched("eth_src") for f in known] == [real_mac]
    # of the flows, only that host's source flow changed (group buckets that rewrite
    # to the host's MAC change too)
    changed = learned[edge].flows ^ c.state[edge].flows
    assert {f.matched("ipv4_src") or f.matched("arp_spa") for f in changed} == {c.addrs[a].ip}
    assert all(learned[s].flows == c.state[s].flows for s in c.state if s != edge)


def test_every_host_port_has_known_and_unknown_source_flows_and_switch_ports_transit_arp():
    c = ctx_of("leaf-spine", "spt")
    topo = c.inst.topology
    for v in topo.switches:
        st = c.state[topo.name(v)]
        host_ports = {c.ports[(v, h)] for h in topo.neighbors[v] if not topo.is_switch(h)}
        switch_ports = {c.ports[(v, u)] for u in topo.neighbors[v] if topo.is_switch(u)}
        for prio, eth_type in ((PRIORITY_SOURCE_KNOWN, ETH_TYPE_IPV4), (PRIORITY_SOURCE_KNOWN, ETH_TYPE_ARP),
                               (PRIORITY_SOURCE_UNKNOWN, ETH_TYPE_IPV4)):
            assert {f.matched("in_port") for f in st.flows
                    if f.priority == prio and f.matched("eth_type") == eth_type} == host_ports
        transit = [f for f in st.flows if f.priority == PRIORITY_TRANSIT]
        assert {f.matched("in_port") for f in transit} == switch_ports
        # issue 22: a transit port passes everything (it used to pass ARP, and the miss the rest)
        assert all(f.match == (("in_port", f.matched("in_port")),) and f.actions == (GotoTable(TABLE_FORWARD),)
                   for f in transit)
        # the guard of every host port: IPv4 and ARP to the controller alone, the rest dropped
        for prio, eth_type in ((PRIORITY_SOURCE_UNKNOWN, ETH_TYPE_IPV4), (PRIORITY_SOURCE_UNKNOWN, ETH_TYPE_ARP)):
            guard = [f for f in st.flows if f.priority == prio and f.matched("eth_type") == eth_type
                     and f.matched("in_port") is not None]
            assert {f.matched("in_port") for f in guard} == host_ports
            assert all(f.actions == (Output(OFPP_CONTROLLER),) for f in guard)
        drops = [f for f in st.flows if f.priority == PRIORITY_GUARD_DROP]
        assert {f.matched("in_port") for f in drops} == host_ports
        assert all(len(f.match) == 1 and f.actions == (Drop(),) for f in drops)
        # a port the network does not know: IPv4 and ARP to the controller alone, the rest dropped
        control = [f for f in st.flows if f.priority == PRIORITY_CONTROL]
        assert sorted(f.matched("eth_type") for f in control) == [ETH_TYPE_IPV4, ETH_TYPE_ARP]
        assert all(len(f.match) == 1 and f.actions == (Output(OFPP_CONTROLLER),) for f in control)
        miss = [f for f in st.flows if f.table_id == TABLE_SOURCE and f.priority == PRIORITY_SOURCE_MISS]
        assert len(miss) == 1 and miss[0].match == () and miss[0].actions == (Drop(),)


def test_tracer_goes_to_later_tables_only():
    topo, ports = two_switch_line()
    pkt = Packet("10.0.0.4", "00:00:00:00:00:04")
    fwd = FlowEntry(TABLE_FORWARD, PRIORITY_UNICAST, (("ipv4_dst", "10.0.0.4"),), (Output(1),))
    goto = FlowEntry(TABLE_SOURCE, 0, (), (SetField("eth_dst", "00:00:00:00:00:44"), GotoTable(TABLE_FORWARD)))
    state = {"s1": SwitchState({goto, fwd}), "s2": SwitchState({goto, FlowEntry(TABLE_FORWARD, 1, (), (Output(2),))})}
    # the rewrite of table 0 is seen by table 1 and by the receiver
    assert [(d.host, d.eth_dst) for d in trace(state, topo, ports, "a", pkt)] == [("b", "00:00:00:00:00:44")]
    back = FlowEntry(TABLE_FORWARD, 5, (), (GotoTable(TABLE_SOURCE),))
    with pytest.raises(TraceError, match="not a later one"):
        trace({"s1": SwitchState({goto, back})}, topo, ports, "a", pkt)
    # without table 1, the copy dropped in table 1
    res = trace_all({"s1": SwitchState({goto})}, topo, ports, "a", pkt)
    assert res.deliveries == () and [d.reason for d in res.drops] == ["no flow of table 1 matches"]


def test_a_switch_cut_off_by_down_links_gets_no_unicast_routes_and_the_rest_translates():
    """Every link of core-0 down (a switch that stops forwarding on all its ports, as BMv2
    does while one of its ports is down): no plan goes through it, so the translation
    gives it no route (it has no next hop) instead of failing the whole re-plan; the
    other switches keep a route to every host. Both backends."""
    from controller.southbound.p4runtime import entities as ps
    from controller.southbound.p4runtime import translate as p4_translate

    full = fat_tree(4)
    topo = Topology(full.nodes, tuple(link for link in full.links if "core-0" not in (link.a, link.b)))
    inst = Instance(topo, generate_jobs(topo, WorkloadSpec(4, 2, 5, seed=3)))
    plan = run(inst, "spt")
    net = Network(topo)
    ports = default_port_map(full)  # the full topology's ports, as the service keeps them
    addrs = host_addresses(topo)
    groups = GroupAddressPool().sync(jp.job.id for jp in plan.jobs)
    of = translate(TranslationInputs(net, plan, ports, addrs, groups))
    p4 = p4_translate.translate(TranslationInputs(net, plan, ports, addrs, groups))
    n_hosts = len(topo.hosts)
    for v in topo.switches:
        name = topo.name(v)
        routes = [f for f in of.state[name].flows if f.priority == PRIORITY_UNICAST and f.matched("ipv4_dst")]
        lpm = p4.state[name].in_table(ps.LPM_TABLE)
        want = 0 if name == "core-0" else n_hosts
        assert len(routes) == want and len(lpm) == want, (name, len(routes), len(lpm))


# -- incremental translation ------------------------------------------------------------------------
STEPS = st.lists(st.tuples(st.sampled_from(["add", "drop", "rate", "replan"]), st.integers(0, 10**6)),
                 min_size=1, max_size=6)


@dataclasses.dataclass
class Walk:
    """A k=4 fat-tree and its jobs for the incremental-translation properties."""

    topo: Topology
    net: Network
    ports: dict
    addrs: dict
    groups: dict
    pool_jobs: list


def _walk(seed: int, cap: int | None) -> Walk:
    topo = fat_tree(4, group_capacity=cap)
    pool_jobs = list(generate_jobs(topo, WorkloadSpec(10, 1, 6, rack_locality=0.3, seed=seed)))
    groups = {j: str(a) for j, a in GroupAddressPool().sync(j.id for j in pool_jobs).items()}
    return Walk(topo, Network(topo), default_port_map(topo), host_addresses(topo), groups, pool_jobs)


def _plans(w: Walk, seed: int, steps, algorithm: str, others: tuple[str, ...]):
    """The first plan (three jobs), then one plan per step: a job admitted (ids stay
    unique), one deleted, one re-rated, or all re-planned by one of `others`."""
    import random

    rnd = random.Random(seed)
    jobs = w.pool_jobs[:3]
    plan = run(Instance(w.topo, tuple(jobs)), algorithm)
    yield plan
    for action, n in steps:
        if action == "add" and len(jobs) < len(w.pool_jobs):
            jobs.append(next(j for j in w.pool_jobs if j not in jobs))
            plan = run(Instance(w.topo, tuple(jobs)), algorithm)
        elif action == "drop" and len(jobs) > 1:
            jobs.pop(n % len(jobs))
            plan = run(Instance(w.topo, tuple(jobs)), algorithm)
        elif action == "rate" and plan.jobs:
            i = n % len(plan.jobs)
            jp = plan.jobs[i]
            plan = dataclasses.replace(plan, jobs=plan.jobs[:i] + (dataclasses.replace(jp, rate=jp.rate * rnd.uniform(0.3, 2)),)
                                       + plan.jobs[i + 1:])
        else:
            plan = run(Instance(w.topo, tuple(jobs)), rnd.choice(others), seed=n)
        yield plan


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), cap=st.sampled_from([1, 2, None]), steps=STEPS, dscp=st.sampled_from([None, 46]))
def test_a_translation_from_the_previous_one_equals_one_from_scratch(seed, cap, steps, dscp):
    """Jobs admitted, deleted, re-rated and re-planned in any order: translating
    with `previous=` gives the same states and ids as translating from nothing,
    and a switch none of the changed jobs uses keeps its state object (with the
    planned class too: its edge entries are a job's)."""
    from controller.southbound.openflow.translate import translate

    w = _walk(seed, cap)
    plans = _plans(w, seed, steps, "spt", ("lp-rounding", "spt", "unicast"))
    prev = translate(TranslationInputs(w.net, next(plans), w.ports, w.addrs, w.groups), packet_in_pps=100,
                     planned_dscp=dscp)
    for plan in plans:
        inputs = TranslationInputs(w.net, plan, w.ports, w.addrs, w.groups)
        inc = translate(inputs, ids=prev.ids, packet_in_pps=100, previous=prev, planned_dscp=dscp)
        fresh = translate(inputs, ids=prev.ids, packet_in_pps=100, planned_dscp=dscp)
        assert inc.state == fresh.state
        assert inc.ids == fresh.ids
        changed = {jid for jid, e in inc.jobs.items() if prev.jobs.get(jid) is not e} | (set(prev.jobs) - set(inc.jobs))
        used = {w.topo.name(v) for jid in changed for e in (inc.jobs.get(jid), prev.jobs.get(jid)) if e is not None
                for v in (*e.flows, *e.meters, *e.marks)}
        for name in inc.state:
            if name not in used:
                assert inc.state[name] is prev.state[name], name
        prev = inc


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), cap=st.sampled_from([1, 2, 4, None]), steps=STEPS)
def test_with_backups_a_translation_from_the_previous_one_equals_one_from_scratch(seed, cap, steps):
    """The same with fast failover's backups: the backups chosen with each job's
    candidates kept between plans (`BackupCandidates`, as the backends keep them)
    are those chosen from nothing, and translating them with `previous=` (which
    builds only the entries of the backups on the switches it rebuilds) gives
    the same states and ids as translating from nothing."""
    from controller.algorithm.backups import BackupCandidates, choose_backups
    from controller.southbound.openflow.translate import translate

    w = _walk(seed, cap)
    kept = BackupCandidates()
    prev = None
    for plan in _plans(w, seed, steps, "lp-rounding", ("lp-rounding", "spt", "greedy")):
        backups = choose_backups(w.topo, w.net.routing, plan, None, kept)
        assert backups == choose_backups(w.topo, w.net.routing, plan)
        inputs = TranslationInputs(w.net, plan, w.ports, w.addrs, w.groups)
        if prev is None:
            prev = translate(inputs, packet_in_pps=100, backups=backups)
            continue
        inc = translate(inputs, ids=prev.ids, packet_in_pps=100, previous=prev, backups=backups)
        fresh = translate(inputs, ids=prev.ids, packet_in_pps=100, backups=backups)
        assert inc.state == fresh.state
        assert inc.ids == fresh.ids
        prev = inc
