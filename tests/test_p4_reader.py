"""The read-only P4Runtime client the emulation checks BMv2 with (controller/southbound/p4runtime/reader.py),
against the in-process protocol test harness.

It must read back exactly what the backend wrote (the same wildcard Read and codec),
while the controller's backend holds the primary role: no stream, no arbitration, no
write. Without a pipeline the switch refuses the Read, which is a P4RuntimeError.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from p4runtime_test_server import P4RuntimeTestServer  # noqa: E402
from test_p4_runtime import Fabric  # noqa: E402

from controller.southbound.p4runtime import entities as ps  # noqa: E402
from controller.southbound.p4runtime.reader import P4Reader  # noqa: E402
from controller.southbound.p4runtime.connection import P4RuntimeError  # noqa: E402


@pytest.fixture
def fabric():
    f = Fabric()
    yield f
    f.close()


def test_reads_back_what_the_backend_wrote_without_taking_the_primary_role(fabric):
    fabric.connect_all()
    fabric.service.add_job("host-0", ["host-1", "host-2", "host-3"], 1e9, job_id="j1")
    fabric.backend.sync(None)
    desired = fabric.desired()
    primaries = {name: s.primary for name, s in fabric.servers.items()}
    updates = fabric.updates()
    for spec in fabric.specs:
        with P4Reader(spec.address, spec.device_id) as reader:
            state, notes = reader.read_state()
        assert notes == []
        assert state == desired[spec.name]
    assert any(st.in_table(ps.MCAST_TABLE) for st in desired.values())
    # the reader wrote nothing and left the controller primary on every switch
    assert fabric.updates() == updates
    assert {name: s.primary for name, s in fabric.servers.items()} == primaries
    assert all(s.primary is not None for s in fabric.servers.values())


def test_a_switch_without_a_pipeline_is_a_p4runtime_error():
    server = P4RuntimeTestServer(device_id=7)
    address = server.start()
    try:
        with P4Reader(address, 7) as reader, pytest.raises(P4RuntimeError, match="FAILED_PRECONDITION"):
            reader.read_state(timeout=5)
    finally:
        server.stop()
