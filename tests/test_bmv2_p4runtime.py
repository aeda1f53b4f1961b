"""The P4Runtime backend against the real server: bare simple_switch_grpc processes (no Mininet).

Runs where `simple_switch_grpc` and p4c are on PATH (skipped otherwise, with the
reason; in CI such a skip is a failure: tests/conftest.py). Marked `bmv2`.
Each switch is started `--no-p4` on a free loopback port in a process group of
its own and killed by the fixture's finaliser; its log is in pytest's tmp dir.

1. What BMv2 answers when a table or the replication engine is full (codes and
   messages, per update), and the controller learning the entry budget from it
   end to end: a real service and backend, a program whose multicast table holds
   4 entries (compiled into a temp dir with MCAST_TABLE_SIZE 4) while the P4Info
   the backend is given and the configured budget say more.
2. Arbitration: a second client with a higher election id takes over; the
   backend logs it once, counts it, stops writing, shows the switch as not ours
   (GET /switches, /metrics), re-arbitrates with a back-off, and is primary
   again (and repairs the switch) when the other client lowers its id or leaves.
3. The switch process killed and started again on the same port: the backend
   reconnects, installs the pipeline and every entry again; the time is measured.
4. TLS with client authentication (`--grpc-server-ssl
   --grpc-server-with-client-auth`, `southbound.p4runtime.tls`): a controller
   certificate from another CA is refused, the right one programs the switch.

docs/p4.md ("What BMv2 answers") records what these tests saw.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import grpc
import pytest
from p4.v1 import p4runtime_pb2

from controller.config import build_topology, config_from_dict
from controller.core.service import ControllerService
from controller.southbound.p4runtime import entities as ps
from controller.southbound.p4runtime import reconcile as p4_reconcile
from controller.southbound.p4runtime.codec import to_update, wildcard_reads
from controller.southbound.p4runtime.p4info import P4Info
from controller.southbound.p4runtime.connection import TABLES, NotPrimary, SwitchConnection
from controller.southbound.p4runtime.backend import P4RuntimeBackend
from controller.southbound.p4runtime.pipeline import p4_switches, pipeline_cookie
from controller.store.sqlite import JobStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bmv2_fabric import P4C, REPO, SKIP_REASON, SWITCH, compile_program  # noqa: E402

BUILD = REPO / "p4src" / "build"
SMALL_TABLE = 4  # multicast entries the test program holds

pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.skipif(not (P4C and SWITCH), reason=SKIP_REASON),
]

UNKNOWN, PERMISSION_DENIED, OUT_OF_RANGE = (grpc.StatusCode.UNKNOWN.value[0], grpc.StatusCode.PERMISSION_DENIED.value[0],
                                            grpc.StatusCode.OUT_OF_RANGE.value[0])


# -- switches and programs ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bmv2:
    """One simple_switch_grpc without a program, on a free loopback port."""

    def __init__(self, log_dir: Path, device_id: int = 1, tls: dict | None = None) -> None:
        """`tls`: {cert, key, ca} (tests/tls_helper.py): serve over TLS and require a
        client certificate the CA signs (--grpc-server-with-client-auth)."""
        self.tls = tls
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.device_id = device_id
        self.log_path = log_dir / f"bmv2-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> float:
        """Start it; returns the seconds until its gRPC port accepts connections."""
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [SWITCH, "--no-p4", "--device-id", str(self.device_id), "--log-level", "warn", "--",
                 "--grpc-server-addr", self.address, "--cpu-port", "255", *self._tls_args()],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise AssertionError(f"simple_switch_grpc exited: {self.log_path.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return time.monotonic() - t0
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"simple_switch_grpc did not listen on {self.address}")

    def _tls_args(self) -> list[str]:
        if self.tls is None:
            return []
        return ["--grpc-server-ssl", "--grpc-server-cacert", str(self.tls["ca"]), "--grpc-server-cert", str(self.tls["cert"]),
                "--grpc-server-key", str(self.tls["key"]), "--grpc-server-with-client-auth"]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def bmv2(tmp_path):
    started: list[Bmv2] = []

    def start(device_id: int = 1, tls: dict | None = None) -> Bmv2:
        sw = Bmv2(tmp_path, device_id, tls)
        started.append(sw)
        sw.start()
        return sw

    yield start
    for sw in started:
        sw.kill()


@pytest.fixture(scope="module")
def small_program(tmp_path_factory) -> tuple[Path, Path]:
    """The program compiled with MCAST_TABLE_SIZE = SMALL_TABLE (a temp copy of
    p4src/; the committed program is not touched): (BMv2 JSON, P4Info)."""
    out = tmp_path_factory.mktemp("small-p4")
    src = out / "p4src"
    shutil.copytree(REPO / "p4src", src, ignore=shutil.ignore_patterns("build"))
    sizes = (src / "sizes.p4").read_text()
    sizes, n = re.subn(r"#define MCAST_TABLE_SIZE \d+", f"#define MCAST_TABLE_SIZE {SMALL_TABLE}", sizes)
    assert n == 1
    (src / "sizes.p4").write_text(sizes)
    json_path, p4info_path = compile_program(out, root=out)
    assert P4Info.load(p4info_path).table(ps.MCAST_TABLE).size == SMALL_TABLE
    return json_path, p4info_path


COMMITTED_P4INFO = P4Info.load(BUILD / "mcast.p4info.txt")
COMMITTED_JSON = (BUILD / "mcast.json").read_bytes()


def mcast_entry(i: int, port: int = 2) -> ps.TableEntry:
    match = ((ps.F_INGRESS_PORT, ps.Exact(1)), (ps.F_IPV4_DST, ps.Exact(ps.ip_int(f"239.1.{i // 256}.{i % 256}"))))
    return ps.TableEntry(ps.MCAST_TABLE, match, ps.ActionCall(ps.MCAST_EGRESS_PORT, (("port", port),)))


def group(gid: int, instances: int = 1) -> ps.MulticastGroup:
    return ps.MulticastGroup(gid, tuple(ps.Replica(1 + i, i) for i in range(instances)))


def wait_for(condition, timeout: float = 20.0, step: float = 0.05) -> float:
    """Poll until `condition()`; returns the seconds it took."""
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(step)
    return time.monotonic() - t0


# -- 1. full tables ------------------------------------------------------------------------------------
def test_what_bmv2_answers_when_the_table_or_the_replication_engine_is_full(bmv2, small_program):
    device_json, p4info_path = small_program
    info = P4Info.load(p4info_path)
    sw = bmv2()
    conn = SwitchConnection("s1", sw.address, sw.device_id, 1, info)
    assert conn.connect(10)
    try:
        assert conn.pipeline_cookie() is None  # --no-p4: nothing installed
        assert conn.set_pipeline(device_json.read_bytes(), pipeline_cookie(info, device_json.read_bytes()))
        # the multicast table (size 4): the 5th and 6th inserts of one Write are refused, each
        # with UNKNOWN "Error when adding match entry to target"
        res = conn.write([to_update(info, p4_reconcile.Insert(mcast_entry(i))) for i in range(6)])
        assert [r.code for r in res] == [0] * SMALL_TABLE + [UNKNOWN] * 2
        assert {r.message for r in res[SMALL_TABLE:]} == {"Error when adding match entry to target"}
        # the Write as a whole: UNKNOWN with an empty message (the details carry the rest)
        with pytest.raises(grpc.RpcError) as e:
            conn._stub.Write(p4runtime_pb2.WriteRequest(device_id=1, election_id=conn._election,
                                                        updates=[to_update(info, p4_reconcile.Insert(mcast_entry(9)))]), timeout=10)
        assert (e.value.code(), e.value.details()) == (grpc.StatusCode.UNKNOWN, "")
        # group ids: 1..32767
        res = conn.write([to_update(info, p4_reconcile.Insert(group(g))) for g in (32767, 32768)])
        assert [(r.code, r.message) for r in res] == [(0, ""), (OUT_OF_RANGE, "Group id value is too high")]
        # the replication engine holds 4096 nodes (one per group and replica instance): 5000
        # one-node groups in one Write, 4096 in all fit; the 905 refusals each say UNKNOWN "Error
        # when creating multicast group in target" (about 35 KB of status details: more than
        # gRPC's default 16 KiB metadata limit, which SwitchConnection raises)
        res = conn.write([to_update(info, p4_reconcile.Insert(group(g))) for g in range(1, 5000)])
        refused = [(g, r) for g, r in zip(range(1, 5000), res) if not r.ok]
        assert len(refused) == 5000 - 1 - 4095
        assert refused[0][0] == 4096  # 4095 here + group 32767
        assert {(r.code, r.message) for _, r in refused} == {(UNKNOWN, "Error when creating multicast group in target")}
        # a node is per (group, instance): after freeing 4 nodes, a group of 3 instances fits and
        # a second does not; and adding an instance to a group (a modify) is refused likewise
        assert all(r.ok for r in conn.write([to_update(info, p4_reconcile.Delete(group(g))) for g in range(1, 5)]))
        res = conn.write([to_update(info, p4_reconcile.Insert(group(g, 3))) for g in (1, 2)])
        assert [(r.code, r.message) for r in res] == [(0, ""), (UNKNOWN, "Error when modifying multicast group in target")]
        res = conn.write([to_update(info, p4_reconcile.Modify(group(5, 3)))])
        assert [(r.code, r.message) for r in res] == [(UNKNOWN, "Error when modifying multicast group in target")]
        groups = conn.read([p4runtime_pb2.Entity(packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(
            multicast_group_entry=p4runtime_pb2.MulticastGroupEntry()))])
        assert len(groups) == 4096 - 4 + 1  # a refused insert leaves no empty group behind
    finally:
        conn.close()


def _service(address: str, budget: int, **planner) -> ControllerService:
    """A 1-leaf, 1-spine fabric (4 hosts on leaf-0); leaf-0 is the P4Runtime switch at
    `address`, its configured group and entry budgets `budget`."""
    config = config_from_dict(
        {
            "topology": {"leaf_spine": {"leaves": 1, "spines": 1, "hosts_per_leaf": 4},
                         "group_capacity": budget, "entry_capacity": budget},
            "planner": {"algorithm": "spt", "debounce_s": 0.05, "max_delay_s": 0.2, **planner},
            "southbound": {"backend": "openflow",
                           "switches": {"leaf-0": {"backend": "p4runtime", "address": address, "device_id": 1}}},
        }
    )
    return ControllerService(config, build_topology(config), store=JobStore(":memory:"))


def _backend(service, p4info: P4Info, device_config: bytes, **kw) -> P4RuntimeBackend:
    backend = P4RuntimeBackend(p4_switches(service.config, service.wiring.topology).values(), p4info, device_config,
                               lldp_interval_s=0, **kw)
    backend.attach(service, start=True)
    return backend


def _in_sync(backend: P4RuntimeBackend, service, name: str = "leaf-0") -> bool:
    """The switch, read back, is the desired state of the current plan (nothing pending)."""
    if service.stats().pending or not backend.connected(name) or not backend._queue.empty():
        return False
    with backend._sync_lock:
        try:
            return backend.read_state(name) == backend.desired([name]).get(name)
        except Exception:  # noqa: BLE001 - not connected right now
            return False


@pytest.mark.parametrize("at_once", [False, True], ids=["one-by-one", "at-once"])
def test_a_full_multicast_table_on_bmv2_lowers_the_entry_budget_end_to_end(bmv2, small_program, caplog, at_once):
    """The backend is given the committed P4Info (size 4096) and the program holds 4;
    the configured budget is 8. Six jobs are registered one by one (the 5th job's
    entry is refused by BMv2, UNKNOWN) or all at once (the inserts beyond 4 in one
    Write are refused): the budget learned is 4 in one step, the plan is re-run
    within it and the switch ends up exactly in the new plan's state (no job
    half-programmed)."""
    caplog.set_level(logging.INFO, logger="controller")
    device_json, _ = small_program
    sw = bmv2()
    service = _service(sw.address, budget=8)
    backend = _backend(service, COMMITTED_P4INFO, device_json.read_bytes(), reconnect_s=0.2)
    service.start()
    leaf = service.wiring.topology.index["leaf-0"]
    try:
        wait_for(lambda: _in_sync(backend, service))
        jobs = [f"j{i}" for i in range(6)]
        t0 = time.monotonic()
        for i, job in enumerate(jobs):
            ps_host = f"host-{i % 4}"
            service.add_job(ps_host, [f"host-{k}" for k in range(4) if f"host-{k}" != ps_host], 1e8, job_id=job,
                            wait=not at_once)
            if not at_once:
                wait_for(lambda: _in_sync(backend, service), timeout=30)
        wait_for(lambda: _in_sync(backend, service), timeout=30)
        print(f"\n{'at once' if at_once else 'one by one'}: every job in place {time.monotonic() - t0:.3f} s after the "
              f"first was registered; {backend.stats.errors} refusals, {backend.stats.writes} Writes")
        # each insert beyond the table refused once (the 5th job's; at once: the 5th and 6th
        # in one Write, or one per plan if the jobs came in two plans); the refused plan
        # is not retried, the re-plan repairs
        assert backend.stats.capacity_errors == backend.stats.errors
        assert backend.stats.errors == 1 if not at_once else 1 <= backend.stats.errors <= 2
        assert service.devices.table_full_budgets()["entries"] == {"leaf-0": SMALL_TABLE}
        learned = [r.getMessage() for r in caplog.records if "entry budget learned" in r.getMessage()]
        assert learned and learned[-1].split("entry budget learned: ")[1].startswith(f"{SMALL_TABLE} ")
        refusals = [r.getMessage() for r in caplog.records if "refused Insert McastIngress.multicast" in r.getMessage()]
        assert len(refusals) == backend.stats.errors
        assert all("UNKNOWN: Error when adding match entry to target" in m for m in refusals), refusals
        plan = service.served.plan()
        assert {jp.job.id for jp in plan.jobs} == set(jobs)  # every job still planned
        with_entry = {jp.job.id for jp in plan.jobs if leaf in jp.structure.entries}
        assert len(with_entry) == SMALL_TABLE
        # what the switch holds, read back: exactly the multicast entries of the jobs the plan
        # gives an entry on leaf-0, each with its group where it replicates; nothing else
        with backend._sync_lock:
            actual = backend.read_state("leaf-0")
            assert actual == backend.desired(["leaf-0"])["leaf-0"]
        addresses = service.jobs.group_addresses()
        held = {str(ipaddress.IPv4Address(e.matched(ps.F_IPV4_DST).value)) for e in actual.in_table(ps.MCAST_TABLE)}
        assert held == {addresses[j] for j in with_entry}
        gids = {g.group_id for g in actual.groups}
        used = {dict(e.action.params)["group"] for e in actual.in_table(ps.MCAST_TABLE) if e.action.name == ps.SET_MCAST_GROUP}
        assert gids == used
        switch = next(s for s in service.devices.statuses() if s.id == "leaf-0")
        # the configured budget stays; the effective one is what the table taught
        assert (switch.configured_entry_capacity, switch.learned_entry_capacity) == (8, SMALL_TABLE)
        assert (switch.entry_capacity, switch.entry_capacity_source) == (SMALL_TABLE, "table_full")
    finally:
        backend.shutdown()
        service.close()


# -- 2. arbitration --------------------------------------------------------------------------------------
def _stream_arbitrate(conn: SwitchConnection, election_id: int) -> None:
    """Send a new MasterArbitrationUpdate on an open stream (another election id)."""
    conn.election_id = election_id
    conn._requests.put(p4runtime_pb2.StreamMessageRequest(arbitration=p4runtime_pb2.MasterArbitrationUpdate(
        device_id=conn.device_id, election_id=conn._election)))


def _switch_json(client) -> dict:
    return next(s for s in client.get("/switches").json()["switches"] if s["id"] == "leaf-0")


def _metric(client, name: str, switch: str | None = None) -> float:
    pattern = rf"^{name}(\{{switch=\"{switch}\"\}})? (\S+)$" if switch else rf"^{name}(_total)? (\S+)$"
    m = re.search(pattern, client.get("/metrics").text, re.M)
    assert m, name
    return float(m.group(2))


def test_another_primary_takes_over_and_gives_back_the_switch(bmv2, caplog):
    caplog.set_level(logging.INFO, logger="controller")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    from controller.northbound.api import create_app

    sw = bmv2()
    service = _service(sw.address, budget=8)
    backend = _backend(service, COMMITTED_P4INFO, COMMITTED_JSON, election_id=10, reconnect_s=0.2, arbitration_retry_s=1.0)
    attempts = []
    connect = backend.connect
    backend.connect = lambda name: attempts.append(time.monotonic()) or connect(name)
    service.start()
    other = None
    try:
        with TestClient(create_app(service, service.config), base_url="http://127.0.0.1") as client:
            wait_for(lambda: _in_sync(backend, service))
            service.add_job("host-0", ["host-1", "host-2", "host-3"], 1e8, job_id="j1")
            wait_for(lambda: _in_sync(backend, service))
            assert _switch_json(client)["connected"] and not _switch_json(client)["other_primary"]
            ours = backend._switches["leaf-0"].conn

            # another client, election id 20: primary now
            other = SwitchConnection("leaf-0", sw.address, 1, 20, COMMITTED_P4INFO)
            assert other.connect(10)
            wait_for(lambda: backend.stats.not_primary == 1, timeout=10)
            # the switch refuses the old primary's writes: PERMISSION_DENIED "Not primary"
            with pytest.raises(grpc.RpcError) as refused:
                ours._stub.Write(p4runtime_pb2.WriteRequest(device_id=1, election_id=ours._election, updates=[]), timeout=5)
            assert (refused.value.code(), refused.value.details()) == (grpc.StatusCode.PERMISSION_DENIED, "Not primary")
            with pytest.raises(NotPrimary, match="PERMISSION_DENIED: Not primary"):
                ours.write([to_update(COMMITTED_P4INFO, p4_reconcile.Insert(mcast_entry(1)))])
            # shown as not ours
            body = _switch_json(client)
            assert body["connected"] is False and body["other_primary"] is True, body
            assert _metric(client, "mcast_switch_other_primary", "leaf-0") == 1
            assert _metric(client, "mcast_switch_connected", "leaf-0") == 0
            assert _metric(client, "mcast_p4runtime_not_primary") == 1
            # the backend writes nothing while the other client is primary: a new job is
            # planned, but the switch does not get it (the other client wipes an entry too)
            before = other.read(wildcard_reads(COMMITTED_P4INFO, TABLES))
            mine = [e for e in before if e.HasField("table_entry") and e.table_entry.table_id == COMMITTED_P4INFO.table(ps.MCAST_TABLE).id]
            assert len(mine) == 1
            other._stub.Write(p4runtime_pb2.WriteRequest(device_id=1, election_id=other._election, updates=[
                p4runtime_pb2.Update(type=p4runtime_pb2.Update.DELETE, entity=mine[0])]), timeout=10)
            service.add_job("host-1", ["host-0", "host-2"], 1e8, job_id="j2")
            t_backoff = time.monotonic()
            time.sleep(3.0)
            after = other.read(wildcard_reads(COMMITTED_P4INFO, TABLES))
            assert len(after) == len(before) - 1  # only the other client's delete
            # logged once, however many re-arbitrations; those back off (0.2, 0.4, 0.8, 1, 1 s)
            lost = [r for r in caplog.records if "another P4Runtime client is primary" in r.getMessage()]
            assert len(lost) == 1 and lost[0].levelno == logging.ERROR, [r.getMessage() for r in lost]
            assert "election id 20; ours is 10" in lost[0].getMessage()
            retries = [t for t in attempts if t > t_backoff]
            print(f"\n{len(retries)} re-arbitrations in 3 s while the other client was primary")
            assert 2 <= len(retries) <= 6, retries
            assert backend.stats.not_primary == 1 and service.stats().p4runtime_not_primary == 1

            # the other client lowers its id below ours: the switch tells our backup stream at
            # once; the backend is primary again, reads the switch back and repairs it
            t0 = time.monotonic()
            _stream_arbitrate(other, 5)
            wait_for(lambda: backend.connected("leaf-0"), timeout=10)
            regained = time.monotonic() - t0
            wait_for(lambda: _in_sync(backend, service), timeout=10)
            repaired = time.monotonic() - t0
            assert _switch_json(client)["connected"] and not _switch_json(client)["other_primary"]
            assert _metric(client, "mcast_switch_other_primary", "leaf-0") == 0
            print(f"\nprimary again {regained:.3f} s after the other client lowered its id; switch repaired after {repaired:.3f} s")
            assert any("primary again" in r.getMessage() for r in caplog.records)

            # it takes over again, then goes away: primary again
            _stream_arbitrate(other, 30)
            wait_for(lambda: not backend.connected("leaf-0"), timeout=10)
            assert backend.stats.not_primary == 2 and _metric(client, "mcast_p4runtime_not_primary") == 2
            t0 = time.monotonic()
            other.close()
            other = None
            wait_for(lambda: backend.connected("leaf-0"), timeout=10)
            print(f"primary again {time.monotonic() - t0:.3f} s after the other client closed its stream")
            wait_for(lambda: _in_sync(backend, service), timeout=10)
            assert backend.stats.errors == 0  # no write was refused on the way
    finally:
        if other is not None:
            other.close()
        backend.shutdown()
        service.close()


# -- 3. the switch restarts -----------------------------------------------------------------------------
def test_the_backend_reinstalls_everything_after_the_switch_process_restarts(bmv2):
    sw = bmv2()
    service = _service(sw.address, budget=8)
    backend = _backend(service, COMMITTED_P4INFO, COMMITTED_JSON)  # the defaults: reconnect_s=1, connect_timeout_s=5
    service.start()
    try:
        wait_for(lambda: _in_sync(backend, service))
        for i in range(3):
            service.add_job(f"host-{i}", [f"host-{k}" for k in range(4) if k != i], 1e8, job_id=f"j{i}")
        wait_for(lambda: _in_sync(backend, service))
        with backend._sync_lock:
            before = backend.read_state("leaf-0")
        assert len(before.in_table(ps.MCAST_TABLE)) == 3 and before.groups
        times = []
        for down_s in (0.0, 3.0, 8.0):
            sw.kill()
            wait_for(lambda: not next(s for s in service.devices.statuses() if s.id == "leaf-0").connected, timeout=10)
            time.sleep(down_s)
            t0 = time.monotonic()
            listening = sw.start()
            wait_for(lambda: backend.connected("leaf-0"), timeout=30)
            connected = time.monotonic() - t0
            wait_for(lambda: _in_sync(backend, service), timeout=30, step=0.02)
            restored = time.monotonic() - t0
            with backend._sync_lock:
                assert backend.read_state("leaf-0") == before  # the same entries, groups and members again
            assert backend._switches["leaf-0"].conn.pipeline_cookie() == backend.cookie
            times.append((down_s, listening, connected, restored))
        for down_s, listening, connected, restored in times:
            print(f"\nswitch down {down_s:.0f} s, then: listening after {listening:.3f} s, primary with the pipeline "
                  f"after {connected:.3f} s, every entry back after {restored:.3f} s")
            assert restored < 15
    finally:
        backend.shutdown()
        service.close()


def test_tls_with_client_auth_only_the_controller_s_certificate_programs_bmv2(bmv2, tmp_path):
    """simple_switch_grpc --grpc-server-ssl --grpc-server-with-client-auth, and the
    backend started from a config with `southbound.p4runtime.tls` (start_backend):
    a controller certificate from another CA is refused (the switch stays empty and
    not connected); the one the switch's CA signs connects and programs it."""
    import tls_helper

    from controller.config import TlsFiles
    from controller.southbound.p4runtime.connection import P4RuntimeError, tls_credentials
    from controller.southbound.p4runtime.reader import P4Reader
    from controller.southbound.p4runtime.start import start_backend

    ca, rogue_ca = tls_helper.new_ca(), tls_helper.new_ca()
    sw = bmv2(tls=tls_helper.pem_files(ca, tmp_path / "switch", "leaf-0"))
    ours = tls_helper.pem_files(ca, tmp_path / "ctl", "controller")
    rogue = tls_helper.pem_files(rogue_ca, tmp_path / "rogue", "controller")
    rogue["ca"] = ours["ca"]  # it trusts the switch: only the switch can refuse it

    def service(tls: dict) -> ControllerService:
        config = config_from_dict({
            "topology": {"leaf_spine": {"leaves": 1, "spines": 1, "hosts_per_leaf": 2}},
            "planner": {"algorithm": "spt", "debounce_s": 0.05, "max_delay_s": 0.2},
            "southbound": {"backend": "openflow", "p4runtime": {"tls": {k: str(v) for k, v in tls.items()},
                                                               "lldp_interval_s": 0},
                           "switches": {"leaf-0": {"backend": "p4runtime", "address": sw.address, "device_id": 1}}},
        })
        svc = ControllerService(config, build_topology(config), store=JobStore(":memory:"))
        svc.start()
        return svc

    svc = service(rogue)
    backend = start_backend(svc, svc.config)
    try:
        time.sleep(4)  # a few connection attempts
        assert not backend.connected("leaf-0")
        assert not next(s for s in svc.devices.statuses() if s.id == "leaf-0").connected
    finally:
        backend.shutdown()
        svc.close()
    # no pipeline was installed (a Read with the right certificate is refused for want of one)
    with P4Reader(sw.address, 1, COMMITTED_P4INFO, credentials=tls_credentials(TlsFiles(**ours))) as reader:
        with pytest.raises(P4RuntimeError, match="FAILED_PRECONDITION: No forwarding pipeline"):
            reader.read_state(timeout=5)
    svc = service(ours)
    backend = start_backend(svc, svc.config)
    try:
        wait_for(lambda: _in_sync(backend, svc), 30)
        state = backend.read_state("leaf-0")
        assert state.in_table(ps.LPM_TABLE)  # the unicast routes are on the switch
        assert next(s for s in svc.devices.statuses() if s.id == "leaf-0").connected
    finally:
        backend.shutdown()
        svc.close()
