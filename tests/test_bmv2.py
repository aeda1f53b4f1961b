"""End to end on BMv2: the real P4 program, real simple_switch_grpc switches, the real controller.

Runs only where `simple_switch_grpc` and p4c (`p4c-bm2-ss` or `p4c`) are on
PATH, and (for the fabric) as root with Mininet installed; skipped otherwise,
with the reason (in CI, where .ci/run installs BMv2 and p4c, such a skip is a
failure: tests/conftest.py). Marked `bmv2`: `pytest -m bmv2` runs only these.

1. p4c compiles p4src/mcast.p4, and the P4Info and BMv2 JSON it writes are
   byte for byte the committed p4src/build/mcast.p4info.txt and mcast.json.
2. A 2x2 leaf-spine of BMv2 switches in Mininet, the controller process
   (`python -m controller run`) with every switch on P4Runtime: the pipeline is
   installed; three jobs registered over the REST API, one multicast, one hybrid
   and one unicast (a leaf that may neither replicate nor forward multicast), are
   each delivered to every worker exactly once and to no other host; a
   controller restart writes nothing and delivery goes on; while the controller is
   down, hosts that flushed their neighbour tables still reach each other (ARP
   between known hosts is routed by the switches).
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
    from controller.southbound.p4runtime.p4info import P4Info

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
def _delivered(fab: Bmv2Fabric, job: dict, hosts: list[str], count: int = 100) -> dict[str, int]:
    """Datagrams each of `hosts` got when the PS sent `count` to each destination the
    REST answer gives it (its group if the job has a tree, and its own unicast copies)."""
    structure = job["structure"]
    group = job["group_address"] if structure["entries"] else None
    return fab.received(group, hosts, job["ps"], count, ps_copies=structure["ps_unicast"])


def test_jobs_are_delivered_on_a_bmv2_fabric(tmp_path):
    # 3 hosts per leaf (leaf-0: host-0..2, leaf-1: host-3..5); leaf-1 may neither
    # replicate nor forward multicast: a job within leaf-0 is multicast, one from
    # leaf-0 that also reaches leaf-1's hosts hybrid (unicast copies toward them), one
    # from leaf-1 unicast (the PS addresses every worker itself)
    budgets = "  switches: {leaf-1: {group_capacity: 0, entry_capacity: 0}}\n"
    with Bmv2Fabric(tmp_path, 50151, topology=budgets, hosts_per_leaf=3) as fab:
        url = fab.url
        everyone = [f"host-{n}" for n in range(6)]
        specs = {
            "j1": ("host-0", ["host-1", "host-3", "host-4"], "hybrid"),
            "j2": ("host-3", ["host-0", "host-1"], "unicast"),
            "j3": ("host-0", ["host-1", "host-2"], "multicast"),
        }
        jobs = {}
        for jid, (ps, workers, _) in specs.items():
            status, jobs[jid] = http("POST", f"{url}/jobs", {"id": jid, "ps": ps, "workers": workers, "demand": 1e8})
            assert status == 201, jobs[jid]
        for jid in specs:  # later registrations may re-plan earlier jobs
            jobs[jid] = http("GET", f"{url}/jobs/{jid}")[1]
        assert {jid: j["mode"] for jid, j in jobs.items()} == {jid: m for jid, (_, _, m) in specs.items()}, jobs
        time.sleep(2)  # the backend writes after the plan
        for jid, (ps, workers, _) in specs.items():
            got = _delivered(fab, jobs[jid], [h for h in everyone if h != ps])
            # every worker once per datagram (a few may be lost), every other host nothing
            assert all(95 <= got[w] <= 100 for w in workers), (jid, jobs[jid]["mode"], got)
            assert all(got[h] == 0 for h in everyone if h != ps and h not in workers), (jid, got)
        # a restart of the controller: reconciles, writes nothing, keeps delivering
        fab.stop_controller()
        # while it is down, hosts that forget their neighbours still resolve each
        # other: ARP between known hosts is routed by the switches (arp_routes)
        for h in everyone:
            fab.net.get(h).cmd("ip neigh flush all")
        for a, b in (("host-0", "host-4"), ("host-3", "host-1"), ("host-5", "host-2")):
            out = fab.net.get(a).cmd(f"ping -c 1 -W 2 {fab.net.get(b).IP()}")
            assert " 0% packet loss" in out, (a, b, out)
        fab.start_controller()
        time.sleep(5)
        text = fab.log.read_text().split("api listening on ")[-1]
        assert "pipeline installed" not in text and " updates" not in text, text[-3000:]
        got = _delivered(fab, jobs["j1"], ["host-1", "host-2", "host-3", "host-4", "host-5"])
        assert all(95 <= got[w] <= 100 for w in ["host-1", "host-3", "host-4"]) and got["host-2"] == got["host-5"] == 0, got
