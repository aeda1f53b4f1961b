"""The planned class (`southbound.planned_dscp`): which packets are planned
(`southbound.planned`), the OpenFlow entries that mark them and reset everything
else (`openflow.planned`), traced through the translated tables, and the config.

The same with real packets through Open vSwitch: tests/test_planned_class_ovs.py.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import pytest

from controller.addressing.groups import GroupAddressPool, group_mac
from controller.addressing.hosts import host_addresses
from controller.addressing.ports import default_port_map
from controller.algorithm.model import Instance
from controller.algorithm.network import Network
from controller.algorithm.workload import reference_instance
from controller.client.broadcast import port_for
from controller.client.normwire import PORT_SPAN
from controller.config.load import config_from_dict
from controller.config.strict import ConfigError
from controller.core.updates import TranslationInputs
from controller.planner import run
from controller.southbound.openflow import planned as pclass
from controller.southbound.openflow.entries import (
    PRIORITY_PLANNED,
    PRIORITY_SOURCE_KNOWN,
    TABLE_SOURCE,
    Meter,
    SetField,
    decode_cookie,
)
from controller.southbound.openflow.tracer import Packet, trace_all
from controller.southbound.openflow.translate import meter_for_rate, translate
from controller.southbound.planned import job_streams

DSCP = 46


@dataclasses.dataclass
class Ctx:
    inst: Instance
    plan: object
    ports: dict
    addrs: dict
    groups: dict
    state: dict
    off: dict  # the same plan without the class


@lru_cache(maxsize=None)
def ctx(algorithm: str = "lp-rounding") -> Ctx:
    # tight group budgets: multicast, hybrid and unicast structures all occur
    inst = reference_instance(4, 10, group_capacity=2, seed=1, min_workers=2, max_workers=8)
    plan = run(inst, algorithm)
    net = Network(inst.topology)
    ports, addrs = default_port_map(inst.topology), host_addresses(inst.topology)
    groups = {j: str(a) for j, a in GroupAddressPool().sync(jp.job.id for jp in plan.jobs).items()}
    inputs = TranslationInputs(net, plan, ports, addrs, groups)
    on = translate(inputs, planned_dscp=DSCP)
    off = translate(inputs)
    return Ctx(inst, plan, ports, addrs, groups, on.state, off.state)


def udp(c: Ctx, src: str, dst_ip: str, dst_mac: str, *, sport: int = 40000, dport: int = 40001,
        dscp: int = 0) -> Packet:
    a = c.addrs[src]
    return Packet(dst_ip, dst_mac, ipv4_src=a.ip, eth_src=a.mac, ip_proto=17, udp_src=sport, udp_dst=dport,
                  ip_dscp=dscp)


def to_host(c: Ctx, src: str, dst: str, **kw) -> Packet:
    return udp(c, src, c.addrs[dst].ip, c.addrs[dst].mac, **kw)


def delivered(c: Ctx, state: dict, src: str, packet: Packet) -> dict[str, set[int]]:
    """Host -> the DSCPs of the copies it got."""
    res = trace_all(state, c.inst.topology, c.ports, src, packet)
    assert not res.to_controller, res
    out: dict[str, set[int]] = {}
    for d in res.deliveries:
        out.setdefault(d.host, set()).add(d.ip_dscp)
    return out


def modes(c: Ctx) -> set[str]:
    return {jp.structure.mode for jp in c.plan.jobs}


# -- the decision ------------------------------------------------------------------------------
ALGORITHMS = ("lp-rounding", "unicast")  # trees with PS-addressed branches (hybrid), and pure unicast jobs


def test_the_plans_have_hybrid_and_unicast_jobs():
    assert "hybrid" in modes(ctx("lp-rounding")) and modes(ctx("unicast")) == {"unicast"}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_job_streams_are_the_ps_streams_and_every_workers_feedback(algorithm):
    c = ctx(algorithm)
    topo = c.inst.topology
    ips = {h: a.ip for h, a in c.addrs.items()}
    for jp in c.plan.jobs:
        gip, job = c.groups[jp.job.id], jp.job
        streams = job_streams(topo, jp, gip, ips)
        ps = topo.index[job.ps]
        direct = sorted(topo.name(w) for e, w in jp.structure.branches if e == ps)
        port = port_for(gip)
        kinds = [s.kind for s in streams]
        assert kinds == ["multicast"] * bool(jp.structure.tree) + ["unicast"] * len(direct) \
            + ["feedback"] * len(set(job.workers))
        for s in streams:
            if s.kind == "multicast":
                assert (s.src, s.dst, s.udp_dst, s.rate) == (ips[job.ps], gip, port, jp.rate)
            elif s.kind == "unicast":
                assert s.sender == job.ps and s.receiver in direct and s.dst == ips[s.receiver]
                assert (s.src, s.udp_src, s.udp_dst, s.rate) == (ips[job.ps], None, port, jp.rate)
            else:
                assert s.sender in job.workers and s.receiver == job.ps
                assert (s.src, s.dst, s.udp_src, s.udp_dst) == (ips[s.sender], ips[job.ps], port, None)
        assert job_streams(topo, dataclasses.replace(jp, rate=0.0), gip, ips) == ()


def test_a_dscp_is_0_to_63():
    assert SetField("ip_dscp", 0).value == 0 and SetField("ip_dscp", 63).value == 63
    for bad in (True, 4.0):
        with pytest.raises(ValueError, match="ip_dscp"):
            SetField("ip_dscp", bad)
    with pytest.raises(ValueError, match="ip_dscp"):
        SetField("ip_dscp", "46")
    with pytest.raises(ValueError, match="0..63"):
        SetField("ip_dscp", 64)


# -- the OpenFlow entries, traced -------------------------------------------------------------
def test_off_by_default_nothing_is_marked_or_reset():
    c = ctx()
    for st in c.off.values():
        for f in st.flows:
            assert not any(isinstance(a, SetField) and a.field == "ip_dscp" for a in f.actions), f
            assert f.priority != PRIORITY_PLANNED


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_hosts_own_dscp_is_reset_at_its_edge(algorithm):
    c = ctx(algorithm)
    hosts = sorted(c.addrs)
    for src, dst in ((hosts[0], hosts[5]), (hosts[3], hosts[12]), (hosts[7], hosts[1])):
        forged = to_host(c, src, dst, dscp=DSCP)
        assert delivered(c, c.state, src, forged) == {dst: {0}}
        assert delivered(c, c.off, src, forged) == {dst: {DSCP}}  # without the class: as the host sent it
    # every known-source IPv4 flow resets the DSCP (ARP has none)
    known = [f for st in c.state.values() for f in st.flows if f.priority == PRIORITY_SOURCE_KNOWN]
    ipv4 = [f for f in known if f.matched("eth_type") == 0x0800]
    assert ipv4 and all(f.actions[0] == SetField("ip_dscp", 0) for f in ipv4)


def test_the_ps_multicast_stream_is_marked_after_its_meter():
    c = ctx()
    n = 0
    for jp in c.plan.jobs:
        if not jp.structure.tree:
            continue
        gip, ps = c.groups[jp.job.id], jp.job.ps
        got = delivered(c, c.state, ps, udp(c, ps, gip, group_mac(gip), dport=port_for(gip)))
        assert got and all(d == {DSCP} for d in got.values()), got
        n += 1
        # the mark is on the metered flow, after the meter
        metered = [f for st in c.state.values() for f in st.flows
                   if f.matched("ipv4_dst") == gip and any(isinstance(a, Meter) for a in f.actions)]
        assert len(metered) == 1
        acts = metered[0].actions
        assert isinstance(acts[0], Meter) and acts[1] == SetField("ip_dscp", DSCP)
    assert n


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_ps_unicast_sessions_are_metered_and_marked_and_nothing_else_of_the_ps(algorithm):
    c = ctx(algorithm)
    topo = c.inst.topology
    n = 0
    for jp in c.plan.jobs:
        ps, gip = jp.job.ps, c.groups[jp.job.id]
        direct = {topo.name(w) for e, w in jp.structure.branches if e == topo.index[ps]}
        for w in jp.job.workers:
            session = to_host(c, ps, w, dport=port_for(gip))
            want = DSCP if w in direct else 0  # a worker on the tree gets no unicast session
            assert delivered(c, c.state, ps, session) == {w: {want}}, (jp.job.id, w)
            # another port, or TCP, from the PS to the same worker: not planned
            assert delivered(c, c.state, ps, to_host(c, ps, w, dport=port_for(gip) ^ 1, dscp=DSCP)) == {w: {0}}
            assert delivered(c, c.state, ps, dataclasses.replace(session, ip_proto=6)) == {w: {0}}
            n += w in direct
    assert n, "the plan has no PS-addressed unicast session"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_workers_feedback_is_marked_only_toward_its_ps(algorithm):
    c = ctx(algorithm)
    hosts = sorted(c.addrs)
    for jp in c.plan.jobs:
        ps, port = jp.job.ps, port_for(c.groups[jp.job.id])
        for w in jp.job.workers:
            assert delivered(c, c.state, w, to_host(c, w, ps, sport=port)) == {ps: {DSCP}}
            other = next(h for h in hosts if h not in (ps, w))
            assert delivered(c, c.state, w, to_host(c, w, other, sport=port, dscp=DSCP)) == {other: {0}}
            assert delivered(c, c.state, w, to_host(c, w, ps, sport=port ^ 1, dscp=DSCP)) == {ps: {0}}
        outsider = next(h for h in hosts if h != ps and h not in jp.job.workers
                        and not any(h in j.job.workers and j.job.ps == ps for j in c.plan.jobs))
        assert delivered(c, c.state, outsider, to_host(c, outsider, ps, sport=port, dscp=DSCP)) == {ps: {0}}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_marking_flows_sit_at_their_senders_port_with_its_addresses(algorithm):
    c = ctx(algorithm)
    topo = c.inst.topology
    by_group = {gip: jp for jp in c.plan.jobs for gip in [c.groups[jp.job.id]]}
    flows = [(name, f) for name, st in c.state.items() for f in st.flows if f.priority == PRIORITY_PLANNED]
    assert flows
    for name, f in flows:
        kind, gip = decode_cookie(f.cookie)
        assert kind == "planned" and f.table_id == TABLE_SOURCE
        jp = by_group[str(gip)]
        m = dict(f.match)
        sender = next(h for h, a in c.addrs.items() if a.ip == m["ipv4_src"])
        assert m["eth_src"] == c.addrs[sender].mac and m["ip_proto"] == 17
        assert (topo.index[name], m["in_port"]) == next(
            (v, c.ports[(v, topo.index[sender])]) for v in topo.neighbors[topo.index[sender]])
        mid = f.actions[0].meter_id
        meter = c.state[name].meter_table()[mid]
        if "udp_dst" in m:  # the PS's unicast session
            assert sender == jp.job.ps and m["udp_dst"] == port_for(str(gip))
            assert meter == meter_for_rate(mid, jp.rate)
        else:  # a worker's feedback, only toward its PS
            assert sender in jp.job.workers and m["ipv4_dst"] == c.addrs[jp.job.ps].ip
            assert m["udp_src"] == port_for(str(gip)) and meter == pclass.feedback_meter(mid)
        assert f.actions[1:] == (SetField("ip_dscp", DSCP), f.actions[2]) and len(f.actions) == 3


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_class_costs_no_multicast_budget(algorithm):
    c = ctx(algorithm)
    unmark = SetField("ip_dscp", DSCP), SetField("ip_dscp", 0)

    def plain(f):  # without the marks and resets, and any meter id (the class's meters take ids too)
        return dataclasses.replace(f, actions=tuple(Meter(0) if isinstance(a, Meter) else a
                                                    for a in f.actions if a not in unmark))
    for name in c.state:
        on, off = c.state[name], c.off[name]
        # the same flows but the marks, the resets and the class's own; the same groups
        assert {plain(f) for f in on.flows if f.priority != PRIORITY_PLANNED} == {plain(f) for f in off.flows}, name
        assert on.groups == off.groups
    # a plan at its budgets translates with the class on as well as off (the edge entries count against neither)
    topo = c.inst.topology
    full = dataclasses.replace(topo, nodes=tuple(
        dataclasses.replace(n, entry_capacity=sum(1 for jp in c.plan.jobs if topo.index[n.id] in jp.structure.entries))
        if n.kind == "switch" else n for n in topo.nodes))
    inputs = TranslationInputs(Network(full), c.plan, c.ports, c.addrs, c.groups)
    translate(inputs)
    translate(inputs, planned_dscp=DSCP)


# -- the config ------------------------------------------------------------------------------------
def test_the_config_option_is_off_by_default_and_checked():
    topo = {"topology": {"fattree": {"k": 4}}}
    assert config_from_dict(topo).southbound.planned_dscp is None
    assert config_from_dict({**topo, "southbound": {"planned_dscp": None}}).southbound.planned_dscp is None
    assert config_from_dict({**topo, "southbound": {"planned_dscp": 46}}).southbound.planned_dscp == 46
    for bad, why in ((64, r"within \[0, 63\]"), (-1, r"within \[0, 63\]"), ("ef", "integer"), (True, "integer")):
        with pytest.raises(ConfigError, match=f"southbound.planned_dscp: .*{why}"):
            config_from_dict({**topo, "southbound": {"planned_dscp": bad}})


def test_the_config_refuses_the_class_with_p4_switches():
    with pytest.raises(ConfigError, match="planned_dscp: .*P4Runtime switches.*no DSCP rewrite"):
        config_from_dict({"topology": {"fattree": {"k": 4}}, "southbound": {"backend": "p4runtime", "planned_dscp": 46}})
    one = {"topology": {"fattree": {"k": 4}}, "southbound": {"planned_dscp": 46, "switches": {"edge-0-0": {
        "backend": "p4runtime"}}}}
    with pytest.raises(ConfigError, match="edge-0-0 is a P4Runtime switch"):
        config_from_dict(one)
    learned = {"southbound": {"planned_dscp": 46, "switches": {"p1": {
        "backend": "p4runtime", "address": "127.0.0.1:50051", "device_id": 1, "ports": [1]}}}}
    with pytest.raises(ConfigError, match="p1 is a P4Runtime switch"):
        config_from_dict(learned)
    del one["southbound"]["planned_dscp"]
    config_from_dict(one)  # a mixed fabric without the class


def test_the_config_refuses_the_class_when_two_jobs_could_share_a_port():
    """The class's flows tell jobs apart by `port_for(group)`, the address modulo
    PORT_SPAN: with more possible jobs than that, two could share a port."""
    topo = {"topology": {"fattree": {"k": 4}}, "southbound": {"planned_dscp": 46}}
    wide = {**topo, "multicast": {"group_pool": "239.0.0.0/15"}, "api": {"limits": {"max_jobs": PORT_SPAN + 1}}}
    with pytest.raises(ConfigError, match=f"planned_dscp: .*api.limits.max_jobs to at most {PORT_SPAN}"):
        config_from_dict(wide)
    config_from_dict({**wide, "api": {"limits": {"max_jobs": PORT_SPAN}}})  # at most a span of jobs: fine
    config_from_dict({**wide, "southbound": {}})  # without the class the port does not matter
    narrow = {**wide, "multicast": {"group_pool": "239.1.0.0/17"}}  # 32,766 usable addresses
    config_from_dict(narrow)


def test_a_span_of_lowest_free_addresses_has_distinct_ports():
    """What the guard above relies on: the pool hands out its lowest free
    addresses, so PORT_SPAN live jobs, after any churn, hold distinct ports."""
    pool = GroupAddressPool("239.0.0.0/15")
    ids = [f"j{i}" for i in range(PORT_SPAN)]
    for j in ids:
        pool.address(j)
    for j in ids[::7]:
        pool.release(j)
    for j in ids[::7]:
        pool.address(j + "-again")
    ports = {port_for(str(pool.address(j))) for j in ids if j in pool} | {
        port_for(str(pool.address(j + "-again"))) for j in ids[::7]}
    assert len(ports) == PORT_SPAN
