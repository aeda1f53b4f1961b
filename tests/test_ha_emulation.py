"""Failover with real traffic (docs/ha.md): three controller instances on one etcd
store, the k=4 Mininet fat-tree of tests/test_emulation.py (Open vSwitch,
userspace datapath, 10 Mbit/s links, TX checksum offload off on the hosts), the
demo's six jobs streaming at their planned rates, and the leader SIGKILLed in the
middle of the stream.

Measured and checked:
- takeover: from the kill to the moment the new leader has every one of the 20
  switches' role replies (MASTER); goal <= 3 s;
- the jobs keep their group addresses; no switch's flows, groups or meters change
  (the new leader reads every switch back and finds nothing to do);
- loss per worker over the whole run (goal <= 1 %) and the longest gap;
- the new leader plans the same and the stream goes on;
- then the new leader is killed too while a client registers a job at the last
  instance, retrying with the same id through redirects, connection errors and
  503s: the job is stored exactly once and installed.

Numbers go to build/ha-emulation-report.json (docs/ha.md quotes them). Run as
root under `flock /tmp/emu.lock` (one emulation at a time on a host); skipped
with the reason without root, Open vSwitch, Mininet, os-ken or etcd.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "mininet"))

import emu_etcd  # noqa: E402
import ovs_daemon  # noqa: E402

_reason = ovs_daemon.emulation_unavailable() or emu_etcd.unavailable()
pytestmark = [
    pytest.mark.skipif(_reason is not None, reason=_reason or ""),
    pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning"),
]

TRAFFIC_S = 12.0
KILL_AT_S = 4.0
MAX_LOSS = 0.01
TAKEOVER_GOAL_S = 3.0


def _post(url: str, body: dict) -> tuple[int, dict, dict | None]:
    """POST without following redirects: (status, lower-case headers, JSON body)."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None

    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=5) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, json.loads(e.read() or b"null")


def test_leader_killed_mid_stream(tmp_path):
    import demo
    from emu_session import Emulation, poll

    report: dict = {}
    with Emulation("ha-test", REPO / "build" / "emu-ha-test", bw_mbit=demo.BW_MBIT, group_capacity=demo.GROUPS,
                   switch_group_capacity=demo.core_budgets(), ha_instances=3, lease_ttl_s=2,
                   # full plans (planner.incremental: false), as the figures in docs/ha.md were measured.
                   # With admission (and the restored structures, core.served_store) the first takeover
                   # changed no entry in two runs, but the late job's flows did not match its structure
                   # within 20 s in one run (the other run's outcome was lost; not investigated: docs/ha.md)
                   planner={"incremental": False}) as emu:
        names = [emu.fabric.topology.name(v) for v in emu.fabric.topology.switches]
        leader = emu.ctl
        term = emu.cluster_status(leader)["term"]
        for jid, ps, workers, demand in demo.JOBS:
            emu.add_job(jid, ps, workers, demand)
        emu.converge(timeout=60)
        before = {n: emu.owned_entries(n) for n in names}
        addresses = {j["id"]: j["group_address"] for j in leader.get("/jobs")["jobs"]}
        plan_before = {j["id"]: (j["mode"], j["rate"]) for j in leader.get("/plan")["jobs"]}

        run = emu.start_traffic(TRAFFIC_S)
        t_start = time.monotonic()
        time.sleep(KILL_AT_S)
        killed_at = time.time()
        leader.kill()
        new = emu.find_leader([c for c in emu.ctls if c is not leader], timeout=15)
        st = poll(lambda: emu.cluster_status(new)["last_takeover"], 10, "the takeover record", 0.05)
        takeover_s = st["mastered_at"] - killed_at
        report["takeover"] = {"kill_to_all_masters_s": round(takeover_s, 3),
                              "kill_to_elected_s": round(st["elected_at"] - killed_at, 3),
                              "switches_mastered": st["switches_mastered"], "term_before": term,
                              "term_after": st["term"], "steps_s": {k: st[k] for k in ("reload_s", "mastership_s", "first_plan_s")}}
        time.sleep(max(0.0, t_start + TRAFFIC_S + 1.0 - time.monotonic()))
        m = emu.measure(run)
        # the new leader has read every switch back by now
        poll(lambda: new.log_text().count("read back") >= len(names), 20, "every switch read back by the new leader", 0.3)
        after = {n: emu.owned_entries(n) for n in names}
        changed = sorted(n for n in names if after[n] != before[n])
        sent = [ln for ln in new.log_text().splitlines() if "operations" in ln and "sent" in ln]
        addresses_after = {j["id"]: j["group_address"] for j in new.get("/jobs")["jobs"]}
        plan_after = {j["id"]: (j["mode"], j["rate"]) for j in new.get("/plan")["jobs"]}
        report["loss"] = {jid: j["loss"] for jid, j in m["jobs"].items()}
        report["max_gap_s"] = {jid: max(w["max_gap_s"] or 0 for w in j["workers"].values()) for jid, j in m["jobs"].items()}
        report["sender_behind_s"] = {jid: j["skipped_s"] for jid, j in m["jobs"].items()}
        report["kill_at_s"] = KILL_AT_S
        report["gap_at_s"] = {jid: max((w["max_gap_s"] or 0, w["gap_at_s"]) for w in j["workers"].values())[1]
                              for jid, j in m["jobs"].items()}
        report["goodput_share"] = {jid: j["measured_bps"] / j["planned_bps"] for jid, j in m["jobs"].items()}
        report["switches_changed"] = changed
        report["operations_sent_by_new_leader"] = sent
        report["dups"] = sum(j["dups"] for j in m["jobs"].values())
        out = REPO / "build" / "ha-emulation-report.json"
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report, indent=2))

        assert st["term"] > term and st["switches_mastered"] == len(names), st
        assert addresses_after == addresses
        assert plan_after == plan_before
        assert not changed, f"switches whose entries changed across the failover: {changed}"
        assert not sent, sent
        for jid, j in m["jobs"].items():
            for w, ws in j["workers"].items():
                assert ws["dups"] == 0
                assert ws["loss"] <= MAX_LOSS, f"{jid}: {w} lost {ws['loss']:.2%} across the failover"
        assert takeover_s <= TAKEOVER_GOAL_S, report["takeover"]

        # a second takeover: the new leader killed too, while a client registers a job
        # at the last instance (a follower until it wins): retried with the same id, it
        # lands exactly once and is installed
        last = next(c for c in emu.ctls if c not in (leader, new))
        new.kill()
        answers, landed = [], None
        deadline = time.monotonic() + 20
        body = {"id": "late", "ps": "host-3", "workers": ["host-6", "host-9"], "demand": 1e6}
        while landed is None and time.monotonic() < deadline:
            url = last.url
            for _ in range(3):
                try:
                    status, headers, answer = _post(url + "/jobs", body)
                except OSError as e:  # the dead leader's URL
                    answers.append(type(e).__name__)
                    break
                answers.append(status)
                if status == 307:
                    url = headers["location"].rsplit("/jobs", 1)[0]
                    continue
                if status in (200, 201, 202):
                    landed = answer
                else:
                    assert status == 503 and headers.get("retry-after"), (status, answer)
                break
            time.sleep(0.1)
        assert landed is not None, answers
        assert emu.find_leader([last], timeout=10) is last
        report["registration_during_second_takeover"] = {"answers": answers}
        out.write_text(json.dumps(report, indent=2) + "\n")
        assert [j["id"] for j in last.get("/jobs")["jobs"]].count("late") == 1
        poll(lambda: last.get("/jobs/late")["state"] == "planned", 20, "the late job planned", 0.2)
        late = last.get("/jobs/late")
        report["registration_during_second_takeover"]["mode"] = late["mode"]
        out.write_text(json.dumps(report, indent=2) + "\n")
        group = late["group_address"]
        # its multicast flows on exactly the switches of its structure (none if it is unicast; its tree's
        # flows: cookie kind 2, fast failover's backup flows are kind 6)
        poll(lambda: sorted(n for n in names if any(f"nw_dst={group}" in f and f.startswith("cookie=0x4d4302")
                                                    for f in emu.owned_entries(n)["flows"]))
             == sorted(late["structure"]["entries"]), 20, "the late job's flows on its switches", 0.3)
