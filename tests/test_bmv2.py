"""End to end on BMv2: the real P4 program, real simple_switch_grpc switches, the real controller.

Runs only where `simple_switch_grpc` and p4c (`p4c-bm2-ss` or `p4c`) are on
PATH, and (for the fabric) as root with Mininet installed; skipped otherwise,
with the reason (in CI, where .ci/run installs BMv2 and p4c, such a skip is a
failure: tests/conftest.py). Marked `bmv2`: `pytest -m bmv2` runs only these.

1. p4c compiles p4src/mcast.p4, and the P4Info and BMv2 JSON it writes are
   byte for byte the committed p4src/build/mcast.p4info.txt and mcast.json.
2. A 2x2 leaf-spine of BMv2 switches in Mininet, the controller process
   (`python -m controller run`) with every switch on P4Runtime: the pipeline is
   installed, a job registered over the REST API is delivered by multicast to
   every worker and to no other host, a second job under a tight group budget
   (hybrid or unicast delivery) too, and a controller restart writes nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bmv2_fabric import P4C, REPO, SKIP_REASON, SWITCH, Bmv2Fabric, compile_program, http  # noqa: E402

pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.skipif(not (P4C and SWITCH), reason=SKIP_REASON),
]


def summary(path: Path) -> dict:
    from controller.southbound.p4info import P4Info

    info = P4Info.load(path)
    return {
        "tables": sorted((t.name, t.id, t.size, t.implementation_id, tuple(t.fields), t.action_ids) for t in info.tables()),
        "actions": sorted((a.name, a.id, a.params) for a in info.actions()),
        "profiles": sorted((p.name, p.id, p.size, p.with_selector) for p in info.profiles()),
        "headers": sorted(
            (c.preamble.name, c.preamble.id, tuple((m.id, m.name, m.bitwidth) for m in c.metadata))
            for c in info.message.controller_packet_metadata
        ),
    }


def test_p4c_writes_the_committed_p4info_and_json(tmp_path):
    device_json, p4info = compile_program(tmp_path)
    committed = REPO / "p4src" / "build"
    assert summary(p4info) == summary(committed / "mcast.p4info.txt")
    assert p4info.read_text() == (committed / "mcast.p4info.txt").read_text(), "run `make p4` and commit p4src/build/"
    assert device_json.read_text() == (committed / "mcast.json").read_text(), "run `make p4` and commit p4src/build/"


# -- the fabric ---------------------------------------------------------------------------------------
def test_jobs_are_delivered_on_a_bmv2_fabric(tmp_path):
    with Bmv2Fabric(tmp_path, 50151, topology="  switches: {leaf-1: {group_capacity: 0}}\n") as fab:
        url = fab.url
        # a tree job: host-0 -> host-1 (same leaf), host-2, host-3 (other leaf, which may not replicate)
        status, job = http("POST", f"{url}/jobs", {"id": "j1", "ps": "host-0", "workers": ["host-1", "host-2", "host-3"], "demand": 1e8})
        assert status == 201, job
        time.sleep(2)  # the backend writes after the plan
        got = fab.received(job["group_address"], ["host-1", "host-2", "host-3"], "host-0")
        assert all(n >= 95 for n in got.values()), (job["mode"], got)
        # host-2 is not a worker of this job: it gets nothing
        status, job2 = http("POST", f"{url}/jobs", {"id": "j2", "ps": "host-3", "workers": ["host-0", "host-1"], "demand": 1e8})
        assert status == 201, job2
        time.sleep(2)
        got = fab.received(job2["group_address"], ["host-0", "host-1", "host-2"], "host-3")
        assert got["host-0"] >= 95 and got["host-1"] >= 95 and got["host-2"] == 0, (job2["mode"], got)
        # a restart of the controller: reconciles, writes nothing, keeps delivering
        fab.stop_controller()
        fab.start_controller()
        time.sleep(5)
        text = fab.log.read_text().split("api listening on ")[-1]
        assert "pipeline installed" not in text and " updates" not in text, text[-3000:]
        got = fab.received(job["group_address"], ["host-1", "host-2", "host-3"], "host-0")
        assert all(n >= 95 for n in got.values()), got
