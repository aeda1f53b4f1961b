"""The P4Runtime backend against the in-process protocol test harness (one server per switch).

The service is driven without its worker thread (replan() by hand) and the
backend's `connect`/`sync` are called directly, so the tests are deterministic;
one test runs the backend's own threads (reconnect after the stream drops).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import grpc
import pytest
from p4.v1 import p4runtime_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from p4runtime_test_server import P4RuntimeTestServer  # noqa: E402

from controller.algorithm.wire import wire_rate
from controller.config import build_topology, config_from_dict  # noqa: E402
from controller.core.service import ControllerService  # noqa: E402
from controller.southbound.p4runtime import entities as ps  # noqa: E402
from controller.southbound.p4runtime import reconcile as p4_reconcile  # noqa: E402
from controller.southbound.p4runtime.codec import state_from_entities, to_update  # noqa: E402
from controller.southbound.lldp import ProbeSigner, lldp_frame, parse_lldp  # noqa: E402
from controller.southbound.p4runtime.p4info import DEFAULT_P4INFO, P4Info  # noqa: E402
from controller.config.programs import PROGRAMS  # noqa: E402
from controller.southbound.p4runtime.backend import P4RuntimeBackend
from controller.southbound.p4runtime.connection import P4RuntimeError, SwitchConnection
from controller.southbound.p4runtime.pipeline import P4SwitchSpec
from controller.store.sqlite import JobStore  # noqa: E402

P4INFO = P4Info.load(DEFAULT_P4INFO)
DEVICE_CONFIG = b'{"program": "stands in for the BMv2 JSON"}'
# The programs the backend drives: v1model (BMv2) and the Tofino P4Infos, which have
# no device config here (the compiler's binary is not committed): the harness then
# takes the P4Info alone, and answers full tables as the specification says
PROGRAM_NAMES = tuple(PROGRAMS)


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Fabric:
    """A 2x2 leaf-spine of harness servers, a service and a backend."""

    def __init__(self, mode: str | None = None, max_groups: int | None = None, group_capacity: int = 4,
                 program: str = "v1model", hosts_per_leaf: int = 2, switches: dict | None = None,
                 server_credentials: grpc.ServerCredentials | None = None) -> None:
        self.program = program
        self.p4info = P4INFO if program == "v1model" else P4Info.load(PROGRAMS[program].p4info)
        self.device_config = DEVICE_CONFIG if program == "v1model" else b""
        mode = mode or ("bmv2" if program == "v1model" else "spec")
        self.config = config_from_dict(
            {
                "topology": {
                    "leaf_spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": hosts_per_leaf},
                    "group_capacity": group_capacity,
                    **({"switches": switches} if switches else {}),
                },
                "planner": {"algorithm": "spt"},
                "southbound": {"backend": "p4runtime"},  # the addresses: the harness servers below
            }
        )
        self.topo = build_topology(self.config)
        self.service = ControllerService(self.config, self.topo, store=JobStore(":memory:"))
        self.servers: dict[str, P4RuntimeTestServer] = {}
        self.specs = []
        for i, v in enumerate(self.topo.switches):
            name = self.topo.name(v)
            server = P4RuntimeTestServer(device_id=i + 1, mode=mode, max_groups=max_groups,
                                         needs_device_config=program == "v1model")
            self.specs.append(P4SwitchSpec(name, server.start(server_credentials), i + 1, program))
            self.servers[name] = server
        self.clock = Clock()
        self.backend = self.new_backend()
        self.service.planning.replan()

    def new_backend(self, **kw) -> P4RuntimeBackend:
        b = P4RuntimeBackend(self.specs, self.p4info, self.device_config, program=self.program,
                             lldp_interval_s=0, lldp_timeout_s=15, clock=self.clock, **kw)
        b.attach(self.service, start=False)
        return b

    def replace_backend(self, **kw) -> P4RuntimeBackend:
        """Shut the fabric's backend down and attach a new one (threads not running)."""
        self.backend.shutdown()
        self.backend = self.new_backend(**kw)
        return self.backend

    def running_backend(self, **kw) -> P4RuntimeBackend:
        """Replace the fabric's backend by a new one with its own threads running
        (connect loops, reconnects), attached to the same service."""
        backend = P4RuntimeBackend(self.specs, self.p4info, self.device_config, program=self.program,
                                   lldp_interval_s=0, lldp_timeout_s=15,
                                   clock=self.clock, **kw)
        self.backend.shutdown()
        self.backend = backend
        backend.attach(self.service, start=True)
        return backend

    def connect_all(self, backend=None) -> None:
        backend = backend or self.backend
        for name in self.servers:
            assert backend.connect(name), name

    def actual(self, name: str) -> ps.P4SwitchState:
        s = self.servers[name]
        ents = []
        for t, rows in s.entries.items():
            for key, te in rows.items():
                e = p4runtime_pb2.Entity(table_entry=te)
                if (t, key) in s.entry_meters:
                    e.table_entry.meter_config.CopyFrom(s.entry_meters[(t, key)])
                ents.append(e)
        ents += [p4runtime_pb2.Entity(action_profile_member=m) for m in s.members.values()]
        for g in s.groups.values():
            e = p4runtime_pb2.Entity()
            e.packet_replication_engine_entry.multicast_group_entry.CopyFrom(g)
            ents.append(e)
        for c in s.clones.values():
            e = p4runtime_pb2.Entity()
            e.packet_replication_engine_entry.clone_session_entry.CopyFrom(c)
            ents.append(e)
        for (mid, index), config in s.meter_cells.items():
            ents.append(p4runtime_pb2.Entity(meter_entry=p4runtime_pb2.MeterEntry(meter_id=mid, index={"index": index}, config=config)))
        state, notes = state_from_entities(self.p4info, ents)
        assert notes == []
        return state

    def desired(self) -> dict[str, ps.P4SwitchState]:
        return self.backend.desired(list(self.servers))

    def updates(self) -> int:
        return sum(len(s.updates) for s in self.servers.values())

    def close(self) -> None:
        self.backend.shutdown()
        for s in self.servers.values():
            s.stop()
        self.service.close()


@pytest.fixture(params=PROGRAM_NAMES)
def fabric(request):
    f = Fabric(program=request.param)
    yield f
    f.close()


def test_connect_installs_the_pipeline_once_and_syncs_exactly_the_desired_state(fabric):
    fabric.connect_all()
    fabric.backend.sync(None)
    for name, server in fabric.servers.items():
        assert server.pipeline_commits == 1 and server.cookie == fabric.backend.cookie
        assert server.device_config == fabric.device_config
    desired = fabric.desired()
    for name in fabric.servers:
        assert fabric.actual(name) == desired[name] and desired[name].in_table(ps.LPM_TABLE)
        # the source check's copies go to the program's CPU port (BMv2 255, Tofino 192, Tofino 2 0)
        cpu = {"v1model": 255, "tofino": 192, "tofino2": 0}[fabric.program]
        assert fabric.actual(name).clones == {ps.CloneSession(ps.CPU_CLONE_SESSION, (ps.Replica(cpu, 0),))}
    assert {s.id for s in fabric.service.devices.statuses() if s.connected} == set(fabric.servers)
    # a job: multicast entries and groups appear, only the difference is written
    before = fabric.updates()
    fabric.service.add_job("host-0", ["host-1", "host-2", "host-3"], 1e9, job_id="j1")
    fabric.backend.sync(None)
    desired = fabric.desired()
    for name in fabric.servers:
        assert fabric.actual(name) == desired[name]
    assert sum(len(st.groups) for st in desired.values()) >= 2
    written = fabric.updates() - before
    meters = [m for st in desired.values() for m in st.meters if isinstance(m, ps.DirectMeter)]
    assert len(meters) == 1  # the PS's edge switch polices the job
    assert written == sum(len(st.in_table(ps.MCAST_TABLE)) + len(st.groups) for st in desired.values()) + 1
    # nothing changed: nothing written
    before = fabric.updates()
    fabric.backend.sync(None)
    assert fabric.updates() == before and fabric.backend.stats.errors == 0


def test_a_restarted_controller_writes_nothing_and_keeps_the_pipeline(fabric):
    fabric.connect_all()
    fabric.service.add_job("host-0", ["host-1", "host-2", "host-3"], 1e9, job_id="j1")
    fabric.service.add_job("host-2", ["host-0", "host-3"], 1e9, job_id="j2")
    fabric.backend.sync(None)
    fabric.backend.shutdown()
    before = fabric.updates()
    # a new backend: fresh ids; it reads every switch back and adopts the ids there
    again = fabric.new_backend()
    fabric.connect_all(again)
    again.sync(None)
    assert fabric.updates() == before
    assert all(s.pipeline_commits == 1 for s in fabric.servers.values())
    again.shutdown()


def test_job_changes_are_written_make_before_break(fabric):
    fabric.connect_all()
    fabric.service.add_job("host-0", ["host-1", "host-2", "host-3"], 1e9, job_id="j1")
    fabric.backend.sync(None)
    old = {n: fabric.actual(n) for n in fabric.servers}
    marks = {n: len(s.updates) for n, s in fabric.servers.items()}
    fabric.service.delete_job("j1")
    fabric.service.add_job("host-3", ["host-0", "host-1"], 1e9, job_id="j2")
    fabric.backend.sync(None)
    for name, server in fabric.servers.items():
        # replaying what the switch received, in order, never leaves a dangling reference
        state = old[name]
        for u in server.updates[marks[name]:]:
            ent = p4runtime_pb2.Entity()
            ent.CopyFrom(u.entity)
            if ent.HasField("direct_meter_entry"):  # a MODIFY: a config, or a reset (the meter's delete)
                dm = ent.direct_meter_entry
                if dm.HasField("config"):
                    m = next(iter(state_from_entities(fabric.p4info, [ent])[0].meters))
                    state = p4_reconcile.apply([(p4_reconcile.Modify if m.key in {k[1:] for k in state.meter_table()} else p4_reconcile.Insert)(m)], state)
                else:
                    gone = next(m for m in state.meters if to_update(fabric.p4info, p4_reconcile.Delete(m)) == u)
                    state = p4_reconcile.apply([p4_reconcile.Delete(gone)], state)
                continue
            deleted_entry = u.type == p4runtime_pb2.Update.DELETE and ent.HasField("table_entry")
            if deleted_entry:  # a delete carries the match only: find the entry it names
                ent.table_entry.action.action_profile_member_id = 0
            x = state_from_entities(fabric.p4info, [ent])[0]
            entity = next(iter((*x.entries, *x.groups, *x.members)))
            if deleted_entry:
                entity = state.entry_table()[entity.key]
            op = {p4runtime_pb2.Update.INSERT: p4_reconcile.Insert, p4runtime_pb2.Update.MODIFY: p4_reconcile.Modify, p4runtime_pb2.Update.DELETE: p4_reconcile.Delete}[u.type]
            state = p4_reconcile.apply([op(entity)], state)
        assert state == fabric.actual(name)
    assert fabric.backend.stats.errors == 0


@pytest.mark.parametrize("mode", ["bmv2", "spec"])
def test_a_full_replication_engine_is_a_capacity_signal(mode):
    """The switch holds one group but the config says four: the refusal (UNKNOWN
    from BMv2, RESOURCE_EXHAUSTED per the spec) lowers the budget and re-plans."""
    f = Fabric(mode=mode, max_groups=1)
    try:
        f.connect_all()
        f.service.add_job("host-0", ["host-1", "host-2", "host-3"], 1e9, job_id="j1")
        f.service.add_job("host-1", ["host-0", "host-2", "host-3"], 1e9, job_id="j2")
        f.backend.sync(None)
        assert f.backend.stats.capacity_errors >= 1
        learned = f.service.devices.table_full_budgets()["groups"]
        assert learned and all(v <= 1 for v in learned.values())
        f.service.planning.replan()
        while not f.backend._queue.empty():  # the repair reads queued by the refusal
            f.backend._queue.get_nowait()
        f.backend.sync(None)
        errors = f.backend.stats.errors
        f.backend.sync(None)
        assert f.backend.stats.errors == errors
        desired = f.desired()
        for name, server in f.servers.items():
            assert len(server.groups) <= 1
            assert f.actual(name) == desired[name]
        # both jobs still planned and installed (as hybrid or unicast where the group is missing)
        assert {jp.job.id for jp in f.service.served.plan().jobs} == {"j1", "j2"}
    finally:
        f.close()


def test_a_refused_multicast_entry_lowers_the_entry_budget_and_other_errors_only_count(fabric):
    fabric.connect_all()
    fabric.backend.sync(None)
    mcast = fabric.p4info.table(ps.MCAST_TABLE).id
    leaf = "leaf-0"
    fabric.servers[leaf].refuse(
        lambda u: u.type == p4runtime_pb2.Update.INSERT and u.entity.table_entry.table_id == mcast,
        grpc.StatusCode.UNKNOWN,
    )
    fabric.service.add_job("host-0", ["host-1", "host-2"], 1e9, job_id="j1")
    fabric.backend.sync(None)
    assert fabric.backend.stats.capacity_errors == 1
    assert fabric.service.devices.table_full_budgets()["entries"] == {leaf: 0}
    # an error that says nothing about capacity: counted, read back, repaired
    lpm = fabric.p4info.table(ps.LPM_TABLE).id
    spine = "spine-0"
    fabric.servers[spine].entries[lpm].clear()  # someone wiped the routes behind our back
    fabric.servers[spine].refuse(lambda u: u.entity.table_entry.table_id == lpm, grpc.StatusCode.INVALID_ARGUMENT)
    fabric.backend._switches[spine].actual = None
    fabric.backend.sync({spine})
    assert fabric.backend.stats.errors == 2 and fabric.backend.stats.capacity_errors == 1
    stats = fabric.service.stats()
    assert (stats.p4runtime_errors, stats.openflow_errors) == (2, 0)  # /metrics: mcast_p4runtime_errors
    assert {s.backend for s in stats.switches} == {"p4runtime"}
    assert all(s.flows == 0 and s.meters == 0 for s in stats.switches)
    assert fabric.backend._switches[spine].actual is None
    fabric.backend.sync({spine})  # the repair
    assert fabric.actual(spine) == fabric.desired()[spine]


def test_the_harness_validates_entities_against_the_p4info(fabric):
    fabric.connect_all()
    conn = fabric.backend._switches["leaf-0"].conn
    mcast = fabric.p4info.table(ps.MCAST_TABLE)
    good = ps.TableEntry(
        ps.MCAST_TABLE,
        ((ps.F_INGRESS_PORT, ps.Exact(3)), (ps.F_IPV4_DST, ps.Exact(ps.ip_int("239.1.0.9")))),
        ps.ActionCall(ps.MCAST_EGRESS_PORT, (("port", 4),)),
    )
    from controller.southbound.p4runtime.codec import to_update

    def update(mutate):
        u = to_update(fabric.p4info, p4_reconcile.Insert(good))
        mutate(u)
        return conn.write([u])[0]

    assert update(lambda u: u.entity.table_entry.match[0].exact.__setattr__("value", b"\x02\x00")).code == grpc.StatusCode.OUT_OF_RANGE.value[0]
    assert update(lambda u: u.entity.table_entry.match.pop()).code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert update(lambda u: u.entity.table_entry.__setattr__("table_id", 99)).code == grpc.StatusCode.NOT_FOUND.value[0]
    bad_action = fabric.p4info.action(ps.REWRITE_TO_UNICAST).id
    assert update(lambda u: u.entity.table_entry.action.action.__setattr__("action_id", bad_action)).code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    lpm = fabric.p4info.table(ps.LPM_TABLE)
    direct = to_update(fabric.p4info, p4_reconcile.Insert(good))
    direct.entity.table_entry.table_id = lpm.id
    assert conn.write([direct])[0].code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert mcast.size == {"v1model": 4096, "tofino": 139264, "tofino2": 277504}[fabric.program]  # sizes.p4, tna/sizes.p4
    ok = conn.write([to_update(fabric.p4info, p4_reconcile.Insert(good)), to_update(fabric.p4info, p4_reconcile.Insert(good))])
    assert [r.code for r in ok] == [0, grpc.StatusCode.ALREADY_EXISTS.value[0]], ok


def test_arbitration_only_the_highest_election_id_is_primary(fabric):
    fabric.connect_all()  # election id 1
    name, spec = "leaf-1", fabric.specs[-1]
    assert spec.name == name
    with pytest.raises(P4RuntimeError, match="Election id already exists|not primary|stream closed"):
        SwitchConnection(name, spec.address, spec.device_id, 1, fabric.p4info).connect(2)
    higher = SwitchConnection(name, spec.address, spec.device_id, 5, fabric.p4info)
    higher.connect(2)
    # the old primary's writes are refused now
    old = fabric.backend._switches[name].conn
    with pytest.raises(grpc.RpcError) as refused:
        old._stub.Write(
            p4runtime_pb2.WriteRequest(device_id=spec.device_id, election_id=old._election, updates=[]), timeout=2
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    higher.close()
    with pytest.raises(P4RuntimeError, match="no P4Runtime server"):
        SwitchConnection(name, "127.0.0.1:1", 1, 1, fabric.p4info).connect(0.5)


def test_lldp_probes_report_links_mismatches_and_timeouts(fabric):
    fabric.connect_all()
    fabric.backend.sync(None)
    # before any probe came back, every declared link is missing (once the grace is over)
    assert fabric.service.links.missing(grace_s=0) == sorted(
        tuple(sorted((link.a, link.b))) for link in fabric.topo.links
        if fabric.topo.is_switch(fabric.topo.index[link.a]) and fabric.topo.is_switch(fabric.topo.index[link.b]))
    assert fabric.service.links.missing() == []  # within the grace
    sent = fabric.backend.packets.send_lldp()
    assert sent == 8  # every leaf-spine link end
    wait_for(lambda: sum(len(s.packet_outs) for s in fabric.servers.values()) == 8)  # they travel on the streams
    idx = fabric.topo.index
    peer = {(fabric.topo.name(sw), p): fabric.topo.name(nb) for (sw, nb), p in fabric.service.wiring.port_map().items()}
    # the test is the wire: deliver every probe to the neighbour as a packet-in
    for name, server in fabric.servers.items():
        for payload, meta in server.packet_outs:
            assert parse_lldp(payload) == (name, meta["egress_port"])
            nb = peer[(name, meta["egress_port"])]
            in_port = fabric.service.wiring.port_map()[(idx[nb], idx[name])]
            fabric.servers[nb].send_packet_in(payload, in_port)
    deadline = time.time() + 5
    while len(fabric.backend.links.links()) < 8 and time.time() < deadline:
        time.sleep(0.02)
    assert len(fabric.backend.links.links()) == 8 and not fabric.backend.stats.lldp_mismatches
    assert len(fabric.service.wiring.observed_ports()) == 8  # every switch-to-switch link end learned
    assert fabric.service.links.missing(grace_s=0) == []
    # silence: every link times out and is planned around... except that would cut
    # hosts off; one link heard again stays up
    fabric.clock.now += 20
    fabric.servers["spine-0"].send_packet_in(fabric.backend.packets.signer.frame("leaf-0", 1), 1)
    fabric.servers["leaf-0"].send_packet_in(fabric.backend.packets.signer.frame("spine-0", 1), 1)
    links = fabric.backend.links
    wait_for(lambda: all(links._seen[k][2] == fabric.clock.now for k in (("leaf-0", 1), ("spine-0", 1))))
    down = fabric.backend.packets.expire_links()
    assert ("leaf-0", "spine-0") not in down and ("spine-1", "leaf-0") in down
    assert ["leaf-0", "spine-1"] in [list(x) for x in fabric.service.links.links_down()]
    assert ["leaf-0", "spine-0"] not in [list(x) for x in fabric.service.links.links_down()]
    # a probe between switches the topology does not link is a mismatch, never a link
    fabric.servers["spine-1"].send_packet_in(fabric.backend.packets.signer.frame("spine-0", 1), 1)
    wait_for(lambda: fabric.backend.stats.lldp_mismatches == {("spine-0", 1, "spine-1", 1)})
    assert ("spine-0", 1, "spine-1") in fabric.service.wiring.unexpected_links()
    # a probe showing leaf-0's port 1 wired to spine-1 (the map said spine-0) is learned:
    # leaf-0's two uplink ports swap in the service's port map
    before = fabric.service.wiring.link_at("leaf-0", 1)
    assert before == "spine-0"
    spine1_port = fabric.service.wiring.port_map()[(idx["spine-1"], idx["leaf-0"])]
    fabric.servers["spine-1"].send_packet_in(fabric.backend.packets.signer.frame("leaf-0", 1), spine1_port)
    wait_for(lambda: fabric.service.wiring.link_at("leaf-0", 1) == "spine-1")
    assert fabric.service.wiring.link_at("leaf-0", 2) == "spine-0"


def test_forged_lldp_probes_change_no_link_and_are_counted(fabric):
    fabric.connect_all()
    fabric.backend.sync(None)
    wiring, counters = fabric.service.wiring, fabric.service.counters
    before = wiring.port_map()
    spine1_port = before[(fabric.topo.index["spine-1"], fabric.topo.index["leaf-0"])]
    signer = fabric.backend.packets.signer
    # each would swap leaf-0's uplinks (as the signed one in the test above does)
    forged = {
        "lldp_unsigned": lldp_frame("leaf-0", 1),
        "lldp_bad_signature": ProbeSigner(b"not the controller's secret").frame("leaf-0", 1),
        "lldp_stale": signer.frame("leaf-0", 1, now=time.time() - 3600),
    }
    for frame in forged.values():
        fabric.servers["spine-1"].send_packet_in(frame, spine1_port)
    wait_for(lambda: all(counters.refusals().get(kind) == 1 for kind in forged))
    # a replay: a probe the controller sent and accepted, sent again from the wrong place
    genuine = signer.frame("spine-0", 1)
    assert parse_lldp(genuine) == ("spine-0", 1)
    fabric.servers["leaf-0"].send_packet_in(genuine, 1)
    wait_for(lambda: ("spine-0", 1) in fabric.backend.links.links())
    fabric.servers["spine-1"].send_packet_in(genuine, spine1_port)
    wait_for(lambda: counters.refusals().get("lldp_replayed") == 1)
    # another LLDP speaker's frame is ignored, not counted
    other = bytearray(lldp_frame("leaf-0", 1))
    other[17] ^= 0xFF
    fabric.servers["spine-1"].send_packet_in(bytes(other), spine1_port)
    time.sleep(0.2)
    assert wiring.port_map() == before and wiring.link_at("leaf-0", 1) == "spine-0"
    assert fabric.backend.links.links() == {("spine-0", 1): ("leaf-0", 1)}
    assert not fabric.backend.stats.lldp_mismatches
    assert counters.refusals() == {**dict.fromkeys(forged, 1), "lldp_replayed": 1}


def _arp(op: int, src_mac: str, src_ip: str, dst_mac: str, dst_ip: str) -> bytes:
    sm, dm = bytes.fromhex(src_mac.replace(":", "")), bytes.fromhex(dst_mac.replace(":", ""))
    eth_dst = b"\xff" * 6 if op == 1 else dm
    return (
        eth_dst + sm + b"\x08\x06" + b"\x00\x01\x08\x00\x06\x04" + op.to_bytes(2, "big") + sm
        + bytes(map(int, src_ip.split("."))) + (b"\x00" * 6 if op == 1 else dm) + bytes(map(int, dst_ip.split(".")))
    )


def test_arp_requests_for_known_hosts_are_answered_or_passed_to_the_host(fabric):
    fabric.connect_all()
    host0, host1 = fabric.service.hosts.addresses["host-0"], fabric.service.hosts.addresses["host-1"]
    leaf = fabric.servers["leaf-0"]
    p0, p1 = (dict(fabric.service.hosts.ports(h))["leaf-0"] for h in ("host-0", "host-1"))

    def next_out(n: int):
        deadline = time.time() + 5
        while len(leaf.packet_outs) < n and time.time() < deadline:
            time.sleep(0.02)
        assert len(leaf.packet_outs) == n, leaf.packet_outs
        return leaf.packet_outs[n - 1]

    # host-0 asks from a MAC the controller does not know (so the switch sent the
    # request to the CPU alone); host-1's MAC is neither learned nor configured:
    # the request goes to host-1 alone
    mac0 = "02:00:00:00:00:aa"
    req = _arp(1, mac0, host0.ip, "00:00:00:00:00:00", host1.ip)
    leaf.send_packet_in(req, p0)
    payload, meta = next_out(1)
    assert (payload, meta) == (req, {"egress_port": p1, "_pad": 0})
    assert fabric.service.hosts.mac("host-0") == mac0
    # host-1 answers host-0: the controller learns host-1 and delivers the reply
    real = "02:00:00:00:11:11"
    reply = _arp(2, real, host1.ip, mac0, host0.ip)
    leaf.send_packet_in(reply, p1)
    payload, meta = next_out(2)
    assert (payload, meta) == (reply, {"egress_port": p0, "_pad": 0})
    assert fabric.service.hosts.mac("host-1") == real
    # now the controller answers for host-1 itself, with the learned MAC (host-0 is
    # known now, so the switch also routed the request to host-1: this is its copy)
    leaf.send_packet_in(req, p0)
    payload, meta = next_out(3)
    assert meta == {"egress_port": p0, "_pad": 0}
    assert payload[:6] == bytes.fromhex(mac0.replace(":", "")) and payload[12:14] == b"\x08\x06"
    assert payload[20:22] == b"\x00\x02" and payload[22:28] == bytes.fromhex(real.replace(":", ""))
    # the copy of a routed request for a host whose MAC is unknown is not passed on
    # (the switches delivered it), nor is the copy of a routed reply
    host2 = fabric.service.hosts.addresses["host-2"]
    other = fabric.servers["leaf-1"]
    outs = (len(leaf.packet_outs), len(other.packet_outs))
    leaf.send_packet_in(_arp(1, mac0, host0.ip, "00:00:00:00:00:00", host2.ip), p0)
    leaf.send_packet_in(_arp(2, real, host1.ip, mac0, host0.ip), p1)
    time.sleep(0.5)
    assert (len(leaf.packet_outs), len(other.packet_outs)) == outs


def _ipv4(src_mac: str, src_ip: str, dst_ip: str) -> bytes:
    import ipaddress

    ip = bytes([0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]) + ipaddress.IPv4Address(src_ip).packed + ipaddress.IPv4Address(dst_ip).packed
    return bytes(6) + bytes.fromhex(src_mac.replace(":", "")) + b"\x08\x00" + ip + bytes(8)


def test_a_source_check_copy_teaches_the_host_and_its_known_source_entry(fabric):
    fabric.connect_all()
    fabric.backend.sync(None)
    leaf = fabric.servers["leaf-1"]
    port = dict(fabric.service.hosts.ports("host-3"))["leaf-1"]
    real = "02:00:00:00:33:33"
    leaf.send_packet_in(_ipv4(real, fabric.service.hosts.addresses["host-3"].ip, "10.0.0.1"), port)
    wait_for(lambda: fabric.service.hosts.mac("host-3") == real)
    assert ("leaf-1", "host-3") in fabric.service.wiring.observed_ports()
    # an address no config names: counted, not learned
    leaf.send_packet_in(_ipv4("02:00:00:00:99:99", "10.99.0.9", "10.0.0.1"), port)
    wait_for(lambda: fabric.service.stats().packet_ins.get("ipv4") == 2)
    assert fabric.service.hosts.mac("host-3") == real
    # the next sync writes host-3's (port, address, learned MAC) as a known source
    fabric.service.planning.replan()
    fabric.backend.sync(None)
    known = {
        (e.matched(ps.F_INGRESS_PORT).value, e.matched(ps.F_ETH_SRC).value)
        for e in fabric.actual("leaf-1").in_table(ps.KNOWN_SOURCES_TABLE)
    }
    assert (port, ps.mac_int(real)) in known and (port, ps.mac_int(fabric.service.hosts.addresses["host-3"].mac)) not in known


def test_meters_and_the_clone_session_are_reconciled_like_everything_else(fabric):
    fabric.backend.shutdown()
    fabric.backend = fabric.new_backend(packet_in_pps=100)
    fabric.connect_all()
    fabric.service.add_job("host-0", ["host-1", "host-2", "host-3"], 1.6e6, job_id="j1")
    fabric.backend.sync(None)
    rate = fabric.service.served.plan().jobs[0].rate
    cell = p4runtime_pb2.MeterConfig(cir=100, cburst=10, pir=100, pburst=10)
    for name, server in fabric.servers.items():
        assert server.meter_configs(ps.PACKET_IN_METER) == {0: cell}, name
        assert [c.session_id for c in server.clones.values()] == [ps.CPU_CLONE_SESSION], name
        assert fabric.actual(name) == fabric.desired()[name]
    job_meters = {n: s.meter_configs(ps.JOB_METER) for n, s in fabric.servers.items()}
    assert [n for n, m in job_meters.items() if m] == ["leaf-0"]  # the PS's edge switch only
    (config,) = job_meters["leaf-0"].values()
    assert config.cir == config.pir == int(wire_rate(rate) // 8)  # the job's frames: its payload rate with headers
    # a restarted controller reads the meters back and writes nothing
    fabric.backend.shutdown()
    before = fabric.updates()
    again = fabric.new_backend(packet_in_pps=100)
    fabric.connect_all(again)
    again.sync(None)
    assert fabric.updates() == before
    again.shutdown()
    # a new cap: one meter update per switch; no cap: the meters reset
    for pps, cells in ((200, {0: p4runtime_pb2.MeterConfig(cir=200, cburst=20, pir=200, pburst=20)}), (0, {})):
        b = fabric.new_backend(packet_in_pps=pps)
        fabric.connect_all(b)
        before = fabric.updates()
        b.sync(None)
        assert fabric.updates() - before == 4
        assert all(s.meter_configs(ps.PACKET_IN_METER) == cells for s in fabric.servers.values())
        b.shutdown()
    # the job goes: its meter is reset, then its entry deleted
    fabric.backend = fabric.new_backend()
    fabric.connect_all()
    fabric.service.delete_job("j1")
    fabric.backend.sync(None)
    assert all(not s.entry_meters for s in fabric.servers.values())
    leaf0 = fabric.servers["leaf-0"]
    kinds = [u.entity.WhichOneof("entity") for u in leaf0.updates[-8:]]
    assert kinds.index("direct_meter_entry") < len(kinds) - 1 - kinds[::-1].index("table_entry")
    assert fabric.backend.stats.errors == 0


def test_job_counters_are_read_from_the_switches_and_exported(fabric):
    from controller.northbound.metrics import make_registry, render

    fabric.connect_all()
    fabric.service.add_job("host-0", ["host-1", "host-2", "host-3"], 1e9, job_id="j1")
    fabric.backend.sync(None)
    group = ps.ip_int(fabric.service.jobs.group_addresses()["j1"])
    for name, server in fabric.servers.items():
        for te in server.table_entries(ps.MCAST_TABLE):
            port = int.from_bytes(te.match[0].exact.value, "big")
            server.count(ps.MCAST_TABLE, {ps.F_INGRESS_PORT: port, ps.F_IPV4_DST: group}, 7, 7000)
    counted = fabric.backend.job_counters()
    with_entries = {n for n, s in fabric.servers.items() if s.table_entries(ps.MCAST_TABLE)}
    assert counted == {("j1", n): (7, 7000) for n in with_entries} and "leaf-0" in with_entries
    text = render(make_registry(fabric.service)).decode()
    assert 'mcast_job_packets_total{job="j1",switch="leaf-0"} 7.0' in text
    assert 'mcast_job_bytes_total{job="j1",switch="leaf-0"} 7000.0' in text
    # a switch whose pipeline is not (yet) in place is not read: BMv2 crashed on a
    # Read during SetForwardingPipelineConfig
    fabric.backend._switches["leaf-0"].ready = False
    assert ("j1", "leaf-0") not in fabric.backend.job_counters()
    fabric.backend._switches["leaf-0"].ready = True
    assert ("j1", "leaf-0") in fabric.backend.job_counters()
    # a switch that is gone is left out, the others still count
    fabric.servers["leaf-1"].stop()
    wait_for(lambda: not fabric.backend._switches["leaf-1"].conn.alive)
    assert ("j1", "leaf-1") not in fabric.backend.job_counters()


def test_the_backend_reconnects_and_repairs_after_the_stream_drops():
    f = Fabric()
    backend = f.running_backend(reconnect_s=0.05, connect_timeout_s=2)
    try:
        deadline = time.time() + 10
        while not all(backend.connected(n) for n in f.servers) and time.time() < deadline:
            time.sleep(0.02)
        f.service.planning.replan()
        desired = f.desired()

        def settled() -> bool:
            return all(f.actual(n) == desired[n] for n in f.servers)

        while not settled() and time.time() < deadline:
            time.sleep(0.02)
        assert settled()
        before = f.updates()
        old = backend._switches["leaf-0"].conn
        f.servers["leaf-0"].drop_streams()
        assert old.closed.wait(5)  # the backend saw the stream end ...
        while not backend.connected("leaf-0") and time.time() < deadline:
            time.sleep(0.02)
        assert backend.connected("leaf-0") and backend._switches["leaf-0"].conn is not old  # ... and reconnected
        while f.service.links.links_down() and time.time() < deadline:
            time.sleep(0.02)
        assert f.service.links.links_down() == []  # up again with its switch
        wait_for(lambda: backend._switches["leaf-0"].actual is not None)  # read back
        with backend._sync_lock:  # that sync has finished
            assert f.updates() == before  # the switch kept its state: read back, nothing to write
        assert f.servers["leaf-0"].pipeline_commits == 1
    finally:
        f.close()


def test_a_write_refused_as_not_primary_stops_writes_until_arbitration_is_retried(caplog):
    """The switch refuses a Write with PERMISSION_DENIED while the stream has said
    nothing (here: the Write carries a stale election id): the backend reports the
    switch as not ours once, writes nothing more, and its periodic re-arbitration on
    a new stream makes it primary again and repairs the switch."""
    import logging

    caplog.set_level(logging.INFO, logger="controller")
    f = Fabric()
    backend = f.running_backend(reconnect_s=0.05, arbitration_retry_s=0.2, connect_timeout_s=2)
    try:
        wait_for(lambda: all(backend.connected(n) for n in f.servers))
        f.service.planning.replan()
        wait_for(lambda: all(f.actual(n) == f.desired()[n] for n in f.servers))
        name = "leaf-0"
        old = backend._switches[name].conn
        old.election_id = 99  # its Writes no longer carry the primary's election id
        f.service.add_job("host-0", ["host-1", "host-2", "host-3"], 1e9, job_id="j1")
        f.service.planning.replan()
        wait_for(lambda: backend.stats.not_primary == 1)
        status = next(s for s in f.service.devices.statuses() if s.id == name)
        assert status.other_primary or backend.connected(name)  # (it may already be primary again)
        # the retry: a new stream with our election id; primary again, then repaired
        wait_for(lambda: backend.connected(name) and backend._switches[name].conn is not old)
        wait_for(lambda: f.actual(name) == f.desired()[name])
        assert f.service.stats().p4runtime_not_primary == 1 and backend.stats.errors == 0
        lost = [r for r in caplog.records if "another P4Runtime client is primary" in r.getMessage()]
        assert len(lost) == 1
        assert any("primary again" in r.getMessage() for r in caplog.records)
    finally:
        f.close()


@pytest.mark.parametrize("program", PROGRAM_NAMES)
def test_the_bmv2_fabric_s_plans_are_written_and_read_back_for_every_program(program):
    """The jobs tests/test_bmv2.py delivers on BMv2 (leaf-1 may neither replicate nor
    forward multicast: a multicast, a hybrid and a unicast job), translated against
    each program's P4Info and written to the harness: every update accepted, every
    switch read back equal to its desired state, the budgets from that P4Info."""
    f = Fabric(program=program, hosts_per_leaf=3, switches={"leaf-1": {"group_capacity": 0, "entry_capacity": 0}})
    try:
        f.connect_all()
        specs = {
            "j1": ("host-0", ["host-1", "host-3", "host-4"], "hybrid"),
            "j2": ("host-3", ["host-0", "host-1"], "unicast"),
            "j3": ("host-0", ["host-1", "host-2"], "multicast"),
        }
        for jid, (src, workers, _) in specs.items():
            f.service.add_job(src, workers, 1e8, job_id=jid)
        f.backend.sync(None)
        assert {j: f.service.jobs.status(j).planned.structure.mode for j in specs} == {j: m for j, (_, _, m) in specs.items()}
        assert f.backend.stats.errors == 0 and f.backend.stats.updates > 0
        desired = f.desired()
        for name in f.servers:
            assert f.actual(name) == desired[name], name
        # j1 and j3 are multicast at leaf-0 (j1's copies to leaf-1 are unicast from the PS)
        assert len(desired["leaf-0"].in_table(ps.MCAST_TABLE)) == 2
        assert not desired["leaf-1"].in_table(ps.MCAST_TABLE) and not desired["leaf-1"].groups
        assert f.backend.limits.multicast_entries == f.p4info.table(ps.MCAST_TABLE).size
        assert f.backend.limits.multicast_entries == {"v1model": 4096, "tofino": 139264, "tofino2": 277504}[program]
        before = f.updates()
        f.backend.sync(None)  # nothing changed: nothing written
        assert f.updates() == before
    finally:
        f.close()


# -- TLS with client certificates (southbound.p4runtime.tls, docs/security.md) -----------------------
def test_tls_only_a_controller_with_a_certificate_of_the_switches_ca_programs_them(tmp_path):
    import tls_helper

    from controller.config import TlsFiles
    from controller.southbound.p4runtime.connection import tls_credentials

    ca, rogue_ca = tls_helper.new_ca(), tls_helper.new_ca()
    switch = tls_helper.pem_files(ca, tmp_path, "switch")
    server = grpc.ssl_server_credentials([(switch["key"].read_bytes(), switch["cert"].read_bytes())],
                                         root_certificates=switch["ca"].read_bytes(), require_client_auth=True)
    f = Fabric(server_credentials=server)
    try:
        mine = tls_helper.pem_files(ca, tmp_path, "controller")
        ours = tls_credentials(TlsFiles(**mine))
        rogue = tls_credentials(TlsFiles(**tls_helper.pem_files(rogue_ca, tmp_path, "rogue")))
        # a client certificate from another CA, and no TLS at all: refused, nothing programmed
        for credentials in (rogue, None):
            backend = f.replace_backend(credentials=credentials, connect_timeout_s=1)
            assert not any(backend.connect(name) for name in f.servers)
            backend.sync(None)
            assert all(s.pipeline_commits == 0 and not s.entries and not s.groups for s in f.servers.values())
            assert not any(s.connected for s in f.service.devices.statuses())
            assert not any(backend.connected(n) for n in f.servers)
        # our certificate, but trusting only another CA: the switch's server certificate is refused
        distrust = TlsFiles(mine["cert"], mine["key"], tls_helper.pem_files(rogue_ca, tmp_path, "other")["ca"])
        backend = f.replace_backend(credentials=tls_credentials(distrust), connect_timeout_s=1)
        assert not backend.connect("leaf-0") and f.servers["leaf-0"].pipeline_commits == 0
        # a client certificate the switches' CA signs: connected, primary, programmed
        backend = f.replace_backend(credentials=ours)
        f.connect_all(backend)
        backend.sync(None)
        desired = f.desired()
        for name, s in f.servers.items():
            assert s.pipeline_commits == 1 and f.actual(name) == desired[name] and desired[name].in_table(ps.LPM_TABLE)
        assert {s.id for s in f.service.devices.statuses() if s.connected} == set(f.servers)
    finally:
        f.close()
