"""The source guard (issue 22), on the desired state of both backends, by tracing
packets through it (`openflow.tracer`, `p4runtime.tracer`):

- a host that forges the PS's address and MAC and sends to the job's group (the
  issue's attack), or to a worker as if it were the PS's unicast copy, reaches
  no one: the copy stops at the attacker's edge port (to the controller alone
  on OpenFlow, to the CPU on P4) and is counted there;
- forged random sources reach no one either, from any host of the fabric;
- the real PS's stream still reaches exactly its workers;
- a rewritten unicast branch starts only from the job's tree: a packet to the
  group from a switch port that is not the tree parent's is dropped;
- the drop counts per port (`guard_drops_from_stats` on OpenFlow flow stats).

The Mininet tests with real packets are tests/test_source_guard_ovs.py and
tests/test_source_guard_bmv2.py.
"""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

import pytest
from test_southbound_translation import KINDS, ctx_of

from controller.addressing.groups import group_mac
from controller.southbound.openflow.entries import OFPP_CONTROLLER, PRIORITY_SOURCE_UNKNOWN, TABLE_SOURCE, Output
from controller.southbound.openflow.tracer import Packet, trace_all
from controller.southbound.openflow.translate import GUARD_COOKIE, guard_drops_from_stats
from controller.southbound.p4runtime import entities as ps
from controller.southbound.p4runtime import translate as p4_translate
from controller.southbound.p4runtime.tracer import Pkt, p4_trace_guarded
from controller.core.updates import TranslationInputs

ALGORITHMS = ("lp-rounding", "spt")


def tree_jobs(c):
    return [jp for jp in c.plan.jobs if jp.structure.tree and jp.rate > 0]


def by_tree(c, jp) -> set[str]:
    """The workers the PS's multicast stream reaches (not those it sends unicast copies itself)."""
    topo = c.inst.topology
    own = {topo.name(w) for emitter, w in jp.structure.branches if emitter == topo.index[jp.job.ps]}
    return set(jp.job.workers) - own


def attackers(c, job) -> list[str]:
    """Every host but the job's PS, those on the PS's switch first."""
    topo = c.inst.topology
    edge = topo.neighbors[topo.index[job.ps]][0]
    hosts = [topo.name(h) for h in topo.hosts if topo.name(h) != job.ps]
    return sorted(hosts, key=lambda h: (topo.neighbors[topo.index[h]][0] != edge, h))


def edge_port(c, host: str) -> tuple[str, int]:
    topo = c.inst.topology
    h = topo.index[host]
    v = topo.neighbors[h][0]
    return topo.name(v), c.ports[(v, h)]


def p4_state(c):
    return p4_translate.translate(TranslationInputs(c.net, c.plan, c.ports, c.addrs, c.groups)).state


def random_source(rng: random.Random) -> tuple[str, str]:
    ip = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    mac = "02:" + ":".join(f"{rng.randrange(256):02x}" for _ in range(5))
    return ip, mac


# -- OpenFlow ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_openflow_a_forged_ps_source_reaches_no_worker_and_the_real_ps_does(kind, algorithm):
    c = ctx_of(kind, algorithm)
    topo = c.inst.topology
    jobs = tree_jobs(c)
    assert jobs
    for jp in jobs:
        job = jp.job
        gip = str(c.groups[job.id])
        ps_ip, ps_mac = c.addrs[job.ps].ip, c.addrs[job.ps].mac
        real = trace_all(c.state, topo, c.ports, job.ps, Packet(gip, group_mac(gip), ipv4_src=ps_ip, eth_src=ps_mac))
        assert {d.host for d in real.deliveries} == by_tree(c, jp), job.id
        for attacker in attackers(c, job)[:4]:
            at = edge_port(c, attacker)
            for pkt in (
                Packet(gip, group_mac(gip), ipv4_src=ps_ip, eth_src=ps_mac),  # the group, as the PS
                Packet(gip, group_mac(gip), ipv4_src=ps_ip, eth_src=c.addrs[attacker].mac),  # its own MAC
                *(Packet(c.addrs[w].ip, c.addrs[w].mac, ipv4_src=ps_ip, eth_src=ps_mac) for w in job.workers[:2]),
            ):
                res = trace_all(c.state, topo, c.ports, attacker, pkt)
                assert not res.deliveries, (job.id, attacker, pkt, res.deliveries)
                # stopped at the attacker's own port, one packet-in from there (to learn from)
                assert [(p.switch, p.in_port) for p in res.to_controller] == [at]


@pytest.mark.parametrize("kind", KINDS)
def test_openflow_random_sources_reach_no_one(kind):
    c = ctx_of(kind, "lp-rounding")
    topo = c.inst.topology
    rng = random.Random(7)
    hosts = [topo.name(h) for h in topo.hosts]
    jobs = tree_jobs(c)
    for i in range(300):
        attacker = rng.choice(hosts)
        ip, mac = random_source(rng)
        jp = jobs[i % len(jobs)]
        gip = str(c.groups[jp.job.id])
        dst = rng.choice((Packet(gip, group_mac(gip), ipv4_src=ip, eth_src=mac),
                          Packet(c.addrs[rng.choice(hosts)].ip, "ff:ff:ff:ff:ff:ff", ipv4_src=ip, eth_src=mac),
                          Packet(c.addrs[rng.choice(hosts)].ip, "ff:ff:ff:ff:ff:ff", 0x0806, ip, mac)))
        res = trace_all(c.state, topo, c.ports, attacker, dst)
        assert not res.deliveries, (attacker, dst)
        assert [(p.switch, p.in_port) for p in res.to_controller] == [edge_port(c, attacker)]


def test_openflow_a_group_packet_from_a_switch_port_off_the_tree_is_dropped():
    # a copy that reached a switch of the tree from anywhere but its tree parent (a
    # rewritten branch included) is not forwarded: the multicast flow matches in_port
    c = ctx_of("fat-tree", "lp-rounding")
    topo = c.inst.topology
    checked = 0
    for jp in tree_jobs(c):
        gip = str(c.groups[jp.job.id])
        for v in jp.structure.entries:
            st = c.state[topo.name(v)]
            mine = [f for f in st.flows if f.matched("ipv4_dst") == gip]
            assert len(mine) == 1
            parents = {f.matched("in_port") for f in mine}
            others = [c.ports[(v, u)] for u in topo.neighbors[v] if c.ports[(v, u)] not in parents]
            for port in others:
                hits = [f for f in st.flows if f.table_id == 1 and f.matched("ipv4_dst") == gip
                        and f.matched("in_port") in (None, port)]
                assert not hits
                checked += 1
    assert checked


def test_openflow_guard_drops_are_read_from_the_flow_stats_per_port():
    c = ctx_of("leaf-spine", "spt")
    st = c.state["leaf-0"]  # a leaf: its host ports are guarded
    guard = [f for f in st.flows if f.cookie & ~0xFFFFFFFF == GUARD_COOKIE]
    assert len({f.matched("in_port") for f in guard}) == 4 and len(guard) == 12  # 4 hosts: IPv4, ARP, the rest
    assert guard and all(f.table_id == TABLE_SOURCE for f in guard)
    assert all(f.actions == (Output(OFPP_CONTROLLER),) for f in guard if f.priority == PRIORITY_SOURCE_UNKNOWN)
    stats = [SimpleNamespace(cookie=f.cookie, match=dict(f.match), packet_count=10 * f.matched("in_port") + 1) for f in guard]
    stats += [SimpleNamespace(cookie=f.cookie, match=dict(f.match), packet_count=99) for f in st.flows
              if f.cookie & ~0xFFFFFFFF != GUARD_COOKIE and f.matched("in_port") is not None]
    got = guard_drops_from_stats(stats)
    expected = Counter()
    for f in guard:
        expected[f.matched("in_port")] += 10 * f.matched("in_port") + 1
    assert got == dict(expected)


# -- P4 ----------------------------------------------------------------------------------------
def _pkt(dst_ip: str, dst_mac: str, src_ip: str, src_mac: str) -> Pkt:
    return Pkt(ps.ip_int(dst_ip), ps.mac_int(dst_mac), ps.ip_int(src_ip), ps.mac_int(src_mac))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_p4_a_forged_ps_source_reaches_no_worker_and_the_real_ps_does(kind, algorithm):
    c = ctx_of(kind, algorithm)
    topo = c.inst.topology
    state = p4_state(c)
    for jp in tree_jobs(c):
        job = jp.job
        gip = str(c.groups[job.id])
        ps_ip, ps_mac = c.addrs[job.ps].ip, c.addrs[job.ps].mac
        dels, _, guard = p4_trace_guarded(state, topo, c.ports, job.ps, _pkt(gip, group_mac(gip), ps_ip, ps_mac))
        assert {d[0] for d in dels} == by_tree(c, jp) and not guard, job.id
        for attacker in attackers(c, job)[:4]:
            at = edge_port(c, attacker)
            for pkt in (
                _pkt(gip, group_mac(gip), ps_ip, ps_mac),
                _pkt(gip, group_mac(gip), ps_ip, c.addrs[attacker].mac),
                *(_pkt(c.addrs[w].ip, c.addrs[w].mac, ps_ip, ps_mac) for w in job.workers[:2]),
            ):
                dels, _, guard = p4_trace_guarded(state, topo, c.ports, attacker, pkt)
                assert not dels, (job.id, attacker, pkt, dels)
                assert guard == {at: 1}


@pytest.mark.parametrize("kind", KINDS)
def test_p4_random_sources_reach_no_one_and_are_counted_at_their_port(kind):
    c = ctx_of(kind, "lp-rounding")
    topo = c.inst.topology
    state = p4_state(c)
    rng = random.Random(11)
    hosts = [topo.name(h) for h in topo.hosts]
    jobs = tree_jobs(c)
    counted: Counter = Counter()
    sent: Counter = Counter()
    for i in range(300):
        attacker = rng.choice(hosts)
        ip, mac = random_source(rng)
        gip = str(c.groups[jobs[i % len(jobs)].job.id])
        dst = rng.choice((_pkt(gip, group_mac(gip), ip, mac), _pkt(c.addrs[rng.choice(hosts)].ip, "ff:ff:ff:ff:ff:ff", ip, mac)))
        dels, _, guard = p4_trace_guarded(state, topo, c.ports, attacker, dst)
        assert not dels
        counted.update(guard)
        sent[edge_port(c, attacker)] += 1
    assert counted == sent


def test_p4_switch_ports_are_exactly_the_ports_toward_switches():
    c = ctx_of("leaf-spine", "spt")
    topo = c.inst.topology
    state = p4_state(c)
    for v in topo.switches:
        st = state[topo.name(v)]
        transit = {e.matched(ps.F_INGRESS_PORT).value for e in st.in_table(ps.SWITCH_PORTS_TABLE)}
        assert transit == {c.ports[(v, u)] for u in topo.neighbors[v] if topo.is_switch(u)}
        hosts = {e.matched(ps.F_INGRESS_PORT).value for e in st.in_table(ps.HOST_PORTS_TABLE)}
        assert hosts == {c.ports[(v, h)] for h in topo.neighbors[v] if not topo.is_switch(h)}
        assert not hosts & transit
        assert all(e.action == ps.ActionCall(ps.TRANSIT) for e in st.in_table(ps.SWITCH_PORTS_TABLE))
