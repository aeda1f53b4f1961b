"""P4Runtime mastership of the HA leader (docs/ha.md), on the P4Runtime test
harness (tests/p4runtime_test_server.py: primary by the highest election id,
writes of any other client refused with PERMISSION_DENIED, as BMv2 does).

The leader of term 5 programs a 2x2 leaf-spine of harness switches through
`run._P4Mastership` (the P4Runtime backend started with election id = term); a new
leader of term 9 takes over: it becomes primary on every switch, finds the state
already right and writes nothing (no pipeline commit, no update), and the old
leader's writes are refused. This is the harness, not BMv2 (not installed here).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from p4runtime_test_server import P4RuntimeTestServer  # noqa: E402

pytest.importorskip("p4.v1.p4runtime_pb2")
from p4.v1 import p4runtime_pb2  # noqa: E402

from controller.config import build_topology, config_from_dict  # noqa: E402
from controller.app.run import _P4Mastership  # noqa: E402
from controller.core.service import ControllerService  # noqa: E402
from controller.store.sqlite import JobStore  # noqa: E402


def wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_new_leader_is_primary_writes_nothing_and_old_leader_is_refused():
    servers = {}
    try:
        names = ["leaf-0", "leaf-1", "spine-0", "spine-1"]
        for i, name in enumerate(names):
            servers[name] = P4RuntimeTestServer(device_id=i + 1, mode="bmv2")
        addresses = {name: s.start() for name, s in servers.items()}
        config = config_from_dict({
            "topology": {"leaf_spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": 2}, "group_capacity": 4},
            "planner": {"algorithm": "spt"},
            "southbound": {"backend": "p4runtime", "switches": {
                name: {"address": addresses[name], "device_id": i + 1} for i, name in enumerate(names)}},
        })
        topo = build_topology(config)
        assert sorted(topo.name(v) for v in topo.switches) == sorted(names)
        store = JobStore(":memory:")  # both instances read the same jobs (here: one store object)
        old_service = ControllerService(config, topo, store=store)
        old_service.add_job("host-0", ["host-1", "host-2", "host-3"], 1e9, job_id="j1")
        old_service.planning.replan()
        old = _P4Mastership(old_service, config)
        old.take_mastership(5)
        wait(lambda: all(s.connected for s in old_service.devices.statuses()), 10, "the old leader primary everywhere")
        wait(lambda: all(s.entries for s in servers.values()), 10, "the old leader's entries")
        time.sleep(0.5)
        updates = {n: len(s.updates) for n, s in servers.items()}
        commits = {n: s.pipeline_commits for n, s in servers.items()}
        assert all(c == 1 for c in commits.values())

        new_service = ControllerService(config, topo, store=store)
        new_service.planning.replan()
        new = _P4Mastership(new_service, config)
        new.take_mastership(9)
        wait(lambda: all(s.connected for s in new_service.devices.statuses()), 10, "the new leader primary everywhere")
        wait(lambda: all(s.primary is not None and s.primary.election == (0, 9) for s in servers.values()), 5,
             "election id 9 primary on every switch")
        time.sleep(1.0)  # its first sync has run
        assert {n: len(s.updates) for n, s in servers.items()} == updates  # nothing written
        assert {n: s.pipeline_commits for n, s in servers.items()} == commits  # the pipeline kept
        # the old leader (term 5) is refused. As a backup it re-arbitrates on a new
        # stream every 1 s and more (its connection is None, or closed, in between:
        # CI, 2026-12-03, read None), so the write is made on whichever stream it holds
        codes = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and grpc.StatusCode.PERMISSION_DENIED not in codes:
            conn = old.backend._switches["leaf-0"].conn
            stub = None if conn is None else conn._stub
            if stub is None:
                time.sleep(0.05)
                continue
            try:
                stub.Write(p4runtime_pb2.WriteRequest(device_id=1, election_id=conn._election, updates=[]), timeout=2)
            except grpc.RpcError as refused:
                codes.append(refused.code())
            except ValueError:  # "Cannot invoke RPC on closed channel": the keeper closed it meanwhile
                continue
            else:
                raise AssertionError("the old leader's write was accepted")
        assert codes and codes[-1] == grpc.StatusCode.PERMISSION_DENIED, codes
        assert set(codes) <= {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.CANCELLED,
                              grpc.StatusCode.UNAVAILABLE}, codes  # refused, or a stream closed under us
        old.release_mastership(5)
        assert old.backend is None
        new.release_mastership(9)
        old_service.close()
        new_service.close()
    finally:
        for s in servers.values():
            s.stop()
