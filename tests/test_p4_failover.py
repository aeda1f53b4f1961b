"""Fast failover on P4 (issue 26): the translation of backups for mcast.p4, where packets go.

Pure: the backups (`algorithm.backups`, shared with OpenFlow) on a 3-leaf,
2-spine leaf-spine, turned into mcast.p4's entities (`p4runtime.failover`
through `p4runtime.translate`), traced with links down (`p4runtime.tracer`,
`down`), the re-plan's cleanup under the strict switch model
(`p4runtime.reconcile.apply`), the failover counts, the protobufs, the program's
names, the runtime's heartbeats and reports, and the config keys.
tests/test_emulation_p4_failover.py runs it on BMv2 in Mininet.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from types import SimpleNamespace

import pytest

from controller.addressing.groups import GroupAddressPool, group_mac
from controller.addressing.hosts import host_addresses
from controller.addressing.ports import default_port_map
from controller.algorithm.backups import Backup, choose_backups
from controller.algorithm.model import Instance, Job, Topology
from controller.algorithm.network import Network
from controller.algorithm.topologies import leaf_spine
from controller.config import config_from_dict
from controller.config.strict import ConfigError
from controller.core.counters import Counters
from controller.core.updates import TranslationInputs
from controller.planner import run
from controller.southbound.p4runtime import entities as ps
from controller.southbound.p4runtime import failover as ff
from controller.southbound.p4runtime import reconcile as p4_reconcile
from controller.southbound.p4runtime.codec import from_entity, to_entity
from controller.southbound.p4runtime.fast_failover import FastFailover
from controller.southbound.p4runtime.p4info import DEFAULT_P4INFO, P4Info
from controller.southbound.p4runtime.pipeline import has_failover, make_pipeline
from controller.southbound.p4runtime.tracer import Pkt, p4_trace
from controller.southbound.p4runtime.translate import P4Limits, translate

JOB = Job("j1", "host-0", ("host-1", "host-2", "host-3", "host-4"), 1e9)
TIMEOUT_US = 60_000


def fabric(groups: int | None = None, drop: tuple[str, str] | None = None) -> Topology:
    t = leaf_spine(3, 2, 2, group_capacity=groups)
    return Topology(t.nodes, tuple(link for link in t.links if drop is None or {link.a, link.b} != set(drop)))


FULL = fabric()
PORTS = default_port_map(FULL)  # the ports stay when a link goes down


def ports_of(topo: Topology) -> dict:
    out = {}
    for (a, b), p in PORTS.items():
        ia, ib = topo.index[FULL.name(a)], topo.index[FULL.name(b)]
        if ib in topo.neighbors[ia]:
            out[(ia, ib)] = p
    return out


@dataclasses.dataclass
class Setup:
    topo: Topology
    plan: object
    ports: dict
    addrs: dict
    groups: dict
    backups: tuple[Backup, ...]
    tr: object


def setup(topo: Topology, *, failover: bool = True, ids=None, limits: P4Limits = P4Limits()) -> Setup:
    net = Network(topo)
    plan = run(Instance(topo, (JOB,)), "spt")
    ports, addrs = ports_of(topo), host_addresses(topo)
    groups = GroupAddressPool().sync(jp.job.id for jp in plan.jobs)
    backups = choose_backups(topo, net.routing, plan) if failover else ()
    tr = translate(TranslationInputs(net, plan, ports, addrs, groups), ids=ids, limits=limits, backups=backups,
                   failover_timeout_us=TIMEOUT_US)
    return Setup(topo, plan, ports, addrs, groups, backups, tr)


def down_ports(a: str, b: str) -> frozenset[tuple[str, int]]:
    ia, ib = FULL.index[a], FULL.index[b]
    return frozenset({(a, PORTS[(ia, ib)]), (b, PORTS[(ib, ia)])})


def delivered(s: Setup, state, down=frozenset()) -> tuple[Counter, list]:
    gip = str(s.groups["j1"])
    got, drops = p4_trace(state, s.topo, s.ports, "host-0", Pkt(ps.ip_int(gip), ps.mac_int(group_mac(gip))), down)
    return Counter(h for h, _, _ in got), drops


def the_backup(s: Setup) -> tuple[str, str, str]:
    (b,) = s.backups
    return s.topo.name(b.upstream), s.topo.name(b.primary), s.topo.name(b.detour)


# -- the translation ----------------------------------------------------------------------------
def test_the_backup_becomes_a_failover_entry_a_detour_and_entries_on_the_children():
    s = setup(fabric())
    up, spine, other = the_backup(s)
    assert up == "leaf-0"
    u, v, w = (s.topo.index[n] for n in (up, spine, other))
    st = s.tr.state[up]
    (fo,) = st.in_table(ps.FAILOVER_TABLE)
    own = next(e for e in st.in_table(ps.MCAST_TABLE) if e.key[1] == fo.key[1])  # the job's entry's key
    assert own.action.name == ps.SET_MCAST_GROUP  # leaf-0 replicates: host-1 and the spine
    params = dict(fo.action.params)
    assert fo.action.name == ps.FAILOVER_TO_GROUP and params["watch"] == PORTS[(u, v)] and params["timeout"] == TIMEOUT_US
    groups = st.group_table()
    primary, backup = groups[dict(own.action.params)["group"]], groups[params["group"]]
    assert {r.port for r in primary.replicas} - {r.port for r in backup.replicas} == {PORTS[(u, v)]}
    assert {r.port for r in backup.replicas} - {r.port for r in primary.replicas} == {PORTS[(u, w)]}
    # the other spine: the stream where it comes in from leaf-0, to leaf-1 and leaf-2
    (detour,) = s.tr.state[other].in_table(ps.MCAST_TABLE)
    assert detour.matched(ps.F_INGRESS_PORT) == ps.Exact(PORTS[(w, u)])
    (dg,) = s.tr.state[other].groups
    assert {r.port for r in dg.replicas} == {PORTS[(w, s.topo.index[c])] for c in ("leaf-1", "leaf-2")}
    for child in ("leaf-1", "leaf-2"):
        c = s.topo.index[child]
        entries = s.tr.state[child].in_table(ps.MCAST_TABLE)
        assert len(entries) == 2 and len({e.action for e in entries}) == 1  # the same action from either spine
        assert {e.matched(ps.F_INGRESS_PORT) for e in entries} == {ps.Exact(PORTS[(c, v)]), ps.Exact(PORTS[(c, w)])}
    assert s.tr.idle == {other: frozenset({detour.key}),
                         **{c: frozenset(e.key for e in s.tr.state[c].in_table(ps.MCAST_TABLE)
                                         if e.matched(ps.F_INGRESS_PORT) == ps.Exact(PORTS[(s.topo.index[c], w)]))
                            for c in ("leaf-1", "leaf-2")}}
    # without fast failover: none of it
    plain = setup(fabric(), failover=False)
    assert not any(st.in_table(ps.FAILOVER_TABLE) for st in plain.tr.state.values())
    assert sum(len(st.entries) for st in s.tr.state.values()) == sum(len(st.entries) for st in plain.tr.state.values()) + 4


def test_a_single_output_upstream_fails_over_to_a_port():
    # host-2 (leaf-1) -> host-4 (leaf-2): leaf-1 sends to the spine alone
    job = Job("j1", "host-2", ("host-4", "host-5"), 1e9)
    topo = fabric()
    net = Network(topo)
    plan = run(Instance(topo, (job,)), "spt")
    backups = choose_backups(topo, net.routing, plan)
    assert [(topo.name(b.upstream)) for b in backups] == ["leaf-1"]
    groups = GroupAddressPool().sync(["j1"])
    tr = translate(TranslationInputs(net, plan, ports_of(topo), host_addresses(topo), groups), backups=backups,
                   failover_timeout_us=TIMEOUT_US)
    (fo,) = tr.state["leaf-1"].in_table(ps.FAILOVER_TABLE)
    b = backups[0]
    assert fo.action == ps.ActionCall(ps.FAILOVER_TO_PORT, (("watch", PORTS[(b.upstream, b.primary)]), ("timeout", TIMEOUT_US),
                                                            ("port", PORTS[(b.upstream, b.detour)])))
    assert not tr.state["leaf-1"].groups  # no backup group where nothing replicates


def test_the_translation_refuses_what_does_not_fit_and_a_bad_timeout():
    s = setup(fabric())
    with pytest.raises(ValueError, match="fast-failover entries needed, capacity 0"):
        setup(fabric(), limits=P4Limits(failover=0))
    with pytest.raises(ValueError, match="timeout 0 us"):
        translate(TranslationInputs(Network(s.topo), s.plan, s.ports, s.addrs, s.groups), backups=s.backups)
    # the budget: one group per switch leaves no room for leaf-0's backup group
    assert setup(fabric(groups=1)).backups == ()


def test_a_backup_that_does_not_fit_the_job_s_entries_is_refused():
    s = setup(fabric())
    up, spine, other = the_backup(s)
    ix = s.topo.index
    net = Network(s.topo)

    def with_backup(b: Backup):
        return translate(TranslationInputs(net, s.plan, s.ports, s.addrs, s.groups), backups=(b,),
                         failover_timeout_us=TIMEOUT_US)

    kids = (ix["leaf-1"], ix["leaf-2"])
    with pytest.raises(ValueError, match=f"{up} does not replicate toward {other}"):
        with_backup(Backup("j1", ix[up], ix[other], ix[spine], kids, ()))  # the edge is not the tree's
    with pytest.raises(ValueError, match=f"{up} already sends the tree toward host-1"):
        with_backup(Backup("j1", ix[up], ix[spine], ix["host-1"], kids, ()))  # the detour is a tree child
    with pytest.raises(ValueError, match=f"no multicast entry of the job on {other}"):
        with_backup(Backup("j1", ix[other], ix["leaf-1"], ix["leaf-2"], (), ()))  # not on the tree


def test_a_second_protected_edge_of_a_job_at_one_switch_is_left_to_the_replan():
    b1 = Backup("j1", 0, 1, 2, (3,), ())
    b2 = Backup("j1", 0, 4, 2, (5,), ())
    b3 = Backup("j2", 0, 4, 2, (5,), ())
    assert ff.usable_backups((b1, b2, b3)) == (b1, b3)


# -- where packets go ----------------------------------------------------------------------------
def test_with_the_protected_link_down_the_switch_delivers_exactly_on_its_own():
    s = setup(fabric())
    workers = Counter(JOB.workers)
    got, drops = delivered(s, s.tr.state)
    assert got == workers and not drops  # the backups carry nothing while the port is heard
    up, spine, _ = the_backup(s)
    cut = down_ports(up, spine)
    got, drops = delivered(s, s.tr.state, cut)
    assert got == workers and not drops, (got, drops)  # every worker once, nobody else
    plain = setup(fabric(), failover=False)
    got, _ = delivered(plain, plain.tr.state, cut)
    assert got == Counter({"host-1": 1})  # without: cut off until the re-plan


def test_a_downward_link_is_not_covered_and_left_to_the_replan():
    s = setup(fabric())
    _, spine, _ = the_backup(s)
    got, _ = delivered(s, s.tr.state, down_ports(spine, "leaf-2"))
    assert got == Counter({"host-1": 1, "host-2": 1, "host-3": 1})


def test_the_replan_removes_the_backups_make_before_break():
    s = setup(fabric())
    up, spine, _ = the_backup(s)
    cut = down_ports(up, spine)
    after = setup(fabric(drop=(up, spine)), ids=s.tr.ids)
    assert after.backups == ()  # the only other spine carries the tree now
    ops = p4_reconcile.diff(after.tr.state, s.tr.state)
    state = dict(s.tr.state)
    for batch in p4_reconcile.steps(ops):  # every batch on every switch, the link down all along
        for sw, sw_ops in batch.items():
            state[sw] = p4_reconcile.apply(sw_ops, state[sw])
        got, _ = delivered(after, state, cut)
        assert got == Counter(JOB.workers), got
    assert state == after.tr.state
    assert not any(st.in_table(ps.FAILOVER_TABLE) for st in state.values())


# -- counting, heartbeats, reports ---------------------------------------------------------------
def test_failovers_at_counts_the_switch_and_the_replan_and_not_the_idle_backups():
    s = setup(fabric())
    up, spine, other = the_backup(s)
    u, v, w = (s.topo.index[n] for n in (up, spine, other))
    assert ff.failovers_at(s.tr.state[up], PORTS[(u, v)]) == (1, 0)
    assert ff.failovers_at(s.tr.state[spine], PORTS[(v, s.topo.index["leaf-2"])]) == (0, 1)
    leaf2 = s.topo.index["leaf-2"]
    assert ff.failovers_at(s.tr.state[other], PORTS[(w, leaf2)], s.tr.idle[other]) == (0, 0)
    assert ff.failovers_at(s.tr.state[other], PORTS[(w, leaf2)]) == (0, 1)  # the guard: idle entries left out


def test_heartbeats_go_out_of_the_far_end_of_every_watched_link():
    s = setup(fabric())
    up, spine, _ = the_backup(s)
    assert ff.heartbeat_ends(s.topo, s.ports, s.backups) == {(spine, PORTS[(FULL.index[spine], FULL.index[up])])}
    frame = ff.heartbeat_frame()
    assert len(frame) == 60 and frame[12:14] == ps.ETH_HEARTBEAT.to_bytes(2, "big")


class _Conn:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, int]] = []

    def packet_out(self, frame: bytes, port: int) -> None:
        self.sent.append((frame, port))


def test_the_runtime_beats_counts_and_records_reports():
    s = setup(fabric())
    up, spine, other = the_backup(s)
    counters = Counters()
    wiring = SimpleNamespace(topology_and_ports=lambda: (s.topo, s.ports))
    service = SimpleNamespace(counters=counters, wiring=wiring)
    conns = {spine: _Conn()}
    rt = FastFailover(service, lambda: conns, 0.02, 0.06)
    assert rt.timeout_us == 60_000
    rt.translated(s.topo, s.ports, s.backups, s.tr.idle, s.tr.state)
    assert rt.beat() == 1 and conns[spine].sent == [(ff.heartbeat_frame(), PORTS[(FULL.index[spine], FULL.index[up])])]
    rt.link_down(up, spine, s.tr.state)
    rt.link_down(other, "leaf-2", s.tr.state)  # idle backups only: nothing counted
    rt.link_down(spine, "leaf-2", s.tr.state)
    assert counters.failovers() == {"data_plane": 1, "controller": 1}
    # both ends are counted, whichever timed out first
    rt.link_down(spine, up, s.tr.state)
    rt.link_down("leaf-2", spine, s.tr.state)
    assert counters.failovers() == {"data_plane": 2, "controller": 2}
    rt.link_down(spine, up, {spine: s.tr.state[spine]})  # the leaf's state unknown: its end not counted
    assert counters.failovers() == {"data_plane": 2, "controller": 2}
    # a new translation without backups: the other spine's entries are no longer idle ones
    plain = setup(fabric(), failover=False)
    rt.translated(s.topo, s.ports, (), plain.tr.idle, plain.tr.state)
    assert rt.beat() == 0  # no watched link left: no heartbeat
    rt.link_down(other, "leaf-2", s.tr.state)
    assert counters.failovers() == {"data_plane": 2, "controller": 3}
    report = bytes(6) + (42_500).to_bytes(6, "big") + ps.ETH_HEARTBEAT.to_bytes(2, "big")
    rt.report(up, 3, report)
    rt.report(up, 3, report[:10])  # too short: ignored
    assert counters.failover_repairs() == (1, 0.0425, 0.0425)
    with pytest.raises(ValueError, match="shorter than the timeout"):
        FastFailover(service, lambda: conns, 0.06, 0.06)
    stop = threading.Event()
    stop.set()
    rt.loop(stop)  # returns at once when stopping


# -- protobufs, the program, the config ----------------------------------------------------------
def test_failover_entities_read_back_to_the_same_values():
    s = setup(fabric())
    up, _, _ = the_backup(s)
    info = P4Info.load(DEFAULT_P4INFO)
    for x in [*s.tr.state[up].in_table(ps.FAILOVER_TABLE), *s.tr.state[up].groups]:
        assert from_entity(info, to_entity(info, x)) == x


def test_the_bmv2_program_fails_over_and_the_tofino_program_does_not():
    assert has_failover(P4Info.load(DEFAULT_P4INFO))
    from controller.config.programs import PROGRAMS

    for name in ("tofino", "tofino2"):
        info = P4Info.load(PROGRAMS[name].p4info)
        assert not has_failover(info)
        assert not make_pipeline(info, b"", name).failover
    assert ps.FAILOVER_TABLE not in make_pipeline(P4Info.load(PROGRAMS["tofino"].p4info), b"", "tofino").tables
    assert ps.FAILOVER_TABLE in make_pipeline(P4Info.load(DEFAULT_P4INFO), b"").tables


def test_a_program_whose_names_differ_is_refused_by_both_name_checks():
    """check_names (every program) and has_failover (a program with the failover
    table) share one check of match fields and action parameters: a renamed one
    is a P4InfoError from either, naming it."""
    from controller.southbound.p4runtime.p4info import P4InfoError
    from controller.southbound.p4runtime.pipeline import check_names

    def renamed(kind: str, owner: str, old: str) -> P4Info:
        message = type(P4Info.load(DEFAULT_P4INFO).message)()
        message.CopyFrom(P4Info.load(DEFAULT_P4INFO).message)
        item = next(x for x in getattr(message, kind) if x.preamble.name == owner)
        part = next(x for x in (item.match_fields if kind == "tables" else item.params) if x.name == old)
        part.name = old + "_renamed"
        return P4Info(message)

    with pytest.raises(P4InfoError, match="no match field 'hdr.ipv4.dstAddr'"):
        check_names(renamed("tables", ps.LPM_TABLE, ps.F_IPV4_DST))
    with pytest.raises(P4InfoError, match="no parameter 'port'"):
        check_names(renamed("actions", ps.SET_EGRESS_PORT, "port"))
    with pytest.raises(P4InfoError, match="no parameter 'watch'"):
        has_failover(renamed("actions", ps.FAILOVER_TO_PORT, "watch"))
    with pytest.raises(P4InfoError, match="no match field"):
        has_failover(renamed("tables", ps.FAILOVER_TABLE, ps.F_INGRESS_PORT))
    check_names(renamed("actions", ps.FAILOVER_TO_PORT, "watch"))  # failover names are has_failover's
    # the match kind too: an LPM route table matched exactly would take no prefix
    message = type(P4Info.load(DEFAULT_P4INFO).message)()
    message.CopyFrom(P4Info.load(DEFAULT_P4INFO).message)
    lpm = next(t for t in message.tables if t.preamble.name == ps.LPM_TABLE)
    next(f for f in lpm.match_fields if f.name == ps.F_IPV4_DST).match_type = 2  # EXACT
    with pytest.raises(P4InfoError, match="is matched exact, the backend writes lpm"):
        check_names(P4Info(message))


def config(**p4):
    return config_from_dict({"topology": {"leaf_spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": 1}},
                             "southbound": {"backend": "p4runtime", "p4runtime": p4}}, ".")


def test_the_config_keys():
    p4 = config(fast_failover=True, heartbeat_interval_s=0.01, failover_timeout_s=0.05).southbound.p4runtime
    assert (p4.fast_failover, p4.heartbeat_interval_s, p4.failover_timeout_s) == (True, 0.01, 0.05)
    assert not config().southbound.p4runtime.fast_failover  # off by default
    with pytest.raises(ConfigError, match="failover_timeout_s"):
        config(heartbeat_interval_s=0.05, failover_timeout_s=0.05)
    with pytest.raises(ConfigError, match="fast_failover"):
        config(fast_failover=3)


def test_metrics_show_the_switches_repair_reports(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from controller.config import build_topology
    from controller.core.service import ControllerService
    from controller.northbound.metrics import make_registry, render
    from controller.store.sqlite import JobStore

    c = config(fast_failover=True)
    svc = ControllerService(c, build_topology(c), store=JobStore(tmp_path / "jobs.sqlite"))
    try:
        svc.counters.failover_repair(0.0612)
        svc.counters.failover_repair(0.0715)
        with pytest.raises(ValueError, match="seconds >= 0"):
            svc.counters.failover_repair(float("nan"))
        families = {f.name: f for f in text_string_to_metric_families(render(make_registry(svc)).decode())}
        samples = {s.name: s.value for s in families["mcast_failover_repair_seconds"].samples}
        assert samples == {"mcast_failover_repair_seconds_count": 2, "mcast_failover_repair_seconds_sum": pytest.approx(0.1327)}
        assert families["mcast_failover_repair_seconds_max"].samples[0].value == pytest.approx(0.0715)
    finally:
        svc.close()


def test_a_restarted_controller_adopts_the_backup_groups_it_finds():
    from controller.southbound.p4runtime.translate import P4Ids, seed_ids

    # ids that differ from a fresh allocation's: another job first, then removed
    other = Job("j0", "host-2", ("host-4", "host-5"), 1e9)
    topo = fabric()
    net = Network(topo)
    pool = GroupAddressPool()
    groups = pool.sync(["j0", "j1"])
    ports, addrs = ports_of(topo), host_addresses(topo)

    def tr(jobs, ids):
        plan = run(Instance(topo, jobs), "spt")
        return translate(TranslationInputs(net, plan, ports, addrs, groups), ids=ids,
                         backups=choose_backups(topo, net.routing, plan), failover_timeout_us=TIMEOUT_US)

    first = tr((other, JOB), None)
    installed = tr((JOB,), first.ids).state  # what the switches hold
    ids = P4Ids()
    job_of = {ps.ip_int(str(a)): j for j, a in groups.items()}
    host_of = {ps.ip_int(a.ip): h for h, a in addrs.items()}
    for name, st in installed.items():
        ids = seed_ids(ids, name, st, job_of, host_of, ff.port_neighbours(topo, ports, name))
    assert tr((JOB,), ids).state == installed


@pytest.mark.parametrize("program", ["v1model", "tofino"])
def test_the_backend_installs_backups_beats_and_restarts_without_writing(program):
    """Over P4Runtime (the protocol test server, tests/test_p4_runtime.py's
    harness fabric): the backups are written and read back, the heartbeat goes
    out of the spine toward the watched leaf port, a restarted backend adopts
    what it finds and writes nothing; the Tofino program gets no backups."""
    from test_p4_runtime import Fabric

    f = Fabric(program=program)
    try:
        backend = f.replace_backend(fast_failover=(0.02, 0.06))
        f.connect_all()
        # ids a fresh allocation would not give: another job's first, then gone
        f.service.add_job("host-0", ["host-1", "host-3"], 1e9, job_id="j0")
        backend.sync(None)
        f.service.add_job("host-0", ["host-1", "host-2", "host-3"], 1e9, job_id="j1")
        backend.sync(None)
        f.service.delete_job("j0")
        backend.sync(None)
        desired = f.desired()
        for name in f.servers:
            assert f.actual(name) == desired[name], name
        failover = {name: st.in_table(ps.FAILOVER_TABLE) for name, st in desired.items() if st.in_table(ps.FAILOVER_TABLE)}
        if program == "v1model":
            (fo,) = failover["leaf-0"]
            watched = dict(fo.action.params)["watch"]
            spine = next(f.topo.name(b) for (a, b), p in f.service.wiring.topology_and_ports()[1].items()
                         if f.topo.name(a) == "leaf-0" and p == watched)
            assert backend.failover.beat() == 1
            deadline = time.monotonic() + 10
            while not f.servers[spine].packet_outs and time.monotonic() < deadline:
                time.sleep(0.01)  # the stream delivers it
            (frame, meta), = f.servers[spine].packet_outs
            assert frame == ff.heartbeat_frame() and f.topo.name(
                next(b for (a, b), p in f.service.wiring.topology_and_ports()[1].items()
                     if f.topo.name(a) == spine and p == meta["egress_port"])) == "leaf-0"
        else:
            assert failover == {} and backend.failover.beat() == 0
        backend.shutdown()
        before = f.updates()
        again = f.new_backend(fast_failover=(0.02, 0.06))
        f.connect_all(again)
        again.sync(None)
        assert f.updates() == before  # the backups' group ids adopted too
        again.shutdown()
    finally:
        f.close()


@pytest.mark.parametrize("capable", [True, False])
def test_start_backend_passes_the_settings_and_warns_when_no_program_fails_over(monkeypatch, caplog, capable):
    from controller.config import Inventory, build_topology
    from controller.southbound.p4runtime import start

    c = config(fast_failover=True, heartbeat_interval_s=0.01, failover_timeout_s=0.05)
    seen = {}

    class Started:
        def pipeline_of(self, name: str):
            seen.setdefault("asked", []).append(name)
            return SimpleNamespace(failover=capable)

        def attach(self, service):
            seen["attached"] = service

    def load_backend(specs, p4info, device_config, **kwargs):
        seen.update(kwargs)
        return Started()

    monkeypatch.setattr(start, "load_backend", load_backend)
    service = SimpleNamespace(inventory=Inventory.of(c, build_topology(c)))
    with caplog.at_level("WARNING", logger="controller.p4runtime"):
        start.start_backend(service, c)
    assert seen["fast_failover"] == (0.01, 0.05) and seen["attached"] is service
    assert set(seen["asked"]) <= {"leaf-0", "leaf-1", "spine-0", "spine-1"} and seen["asked"]  # by switch name
    assert ("no P4 switch runs a program with a failover table" in caplog.text) is not capable


def test_a_dying_link_is_counted_once_before_it_is_reported(monkeypatch):
    # the ends of a link time out rounds apart (each end is the last probe its far
    # switch read); the failovers are counted when the first end times out and
    # before the report that starts the re-plan (which replaces the plan counted in)
    from controller.southbound import lldp
    from controller.southbound.p4runtime.packet_io import PacketIO
    from controller.southbound.p4runtime.packets import LinkTracker

    monkeypatch.setattr(lldp, "signer_for", lambda service: None)
    events: list[tuple] = []
    liveness = SimpleNamespace(update=lambda a, b: events.append(("report", a, b)))
    now = [0.0]
    links = LinkTracker(3.0)
    io = PacketIO(SimpleNamespace(), ("a", "b"), dict, lambda sw: (), links, liveness, set(), lambda: now[0])
    dying = lambda a, b: events.append(("count", a, b))  # noqa: E731
    links.observe("a", 1, "b", 2, 0.0)
    links.observe("b", 2, "a", 1, 0.5)
    now[0] = 3.2  # a's end times out first
    assert io.expire_links(dying) == [("a", "b")]
    assert events == [("count", "a", "b"), ("report", "a", "b")]
    now[0] = 3.7  # then b's: the link was down already, not counted again
    events.clear()
    assert io.expire_links(dying) == [("b", "a")]
    assert events == [("report", "b", "a")]
    links.observe("a", 1, "b", 2, 10.0)  # alive again, then both ends in one round: counted once
    links.observe("b", 2, "a", 1, 10.0)
    now[0] = 13.5
    events.clear()
    assert io.expire_links(dying) == [("a", "b"), ("b", "a")]
    assert events == [("count", "a", "b"), ("report", "a", "b"), ("report", "b", "a")]
