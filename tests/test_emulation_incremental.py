"""End to end with real traffic and `planner.incremental`: a seventh job joins the
demo's six without touching them (Mininet, Open vSwitch).

The demo's fabric (mininet/demo.py: k=4 fat-tree, 10 Mbit/s links, one group per
aggregation and edge switch, none per core switch) and its six jobs, under a
controller with `planner.incremental: true` (re-optimisation an hour later, so
that only admissions run here). While the six jobs send at their planned rates,
a seventh registers: its answer comes from admission, every switch entry of the
six jobs (flows, groups, meters) stays as it was, the seventh is delivered to
its workers, and the six lose at most 1 % of their datagrams. Measured numbers
go to build/emulation-incremental-report.json.

Skipped, with the reason, when not root or when Open vSwitch, Mininet or os-ken
is missing.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "mininet"))  # scripts, not a package (it would shadow mininet)

import ovs_daemon  # noqa: E402

_reason = ovs_daemon.emulation_unavailable()
pytestmark = [
    pytest.mark.skipif(_reason is not None, reason=_reason or ""),
    pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning"),
]

SEVENTH = ("mlp", "host-5", ["host-10", "host-2"], 1e6)
MAX_LOSS = 0.01


TREE_COOKIE = "cookie=0x4d4302"  # the controller's owner tag, then kind 2: a tree's flow (6: a backup's)


def _of_job(entries: dict[str, list[str]], group: str) -> dict[str, set[str]]:
    """The entries of one switch that belong to the job with multicast group `group`:
    its flows (matching the group address: its tree's and fast failover's backup
    flows), the groups they use (and the groups those chain to: a fast-failover
    group in a bucket) and the meters they use."""
    flows = {f for f in entries["flows"] if f"nw_dst={group}" in f}
    gids = {g for f in flows for g in re.findall(r"group:(\d+)", f)}
    by_id = {g.split(":", 1)[0]: g for g in entries["groups"]}
    todo = list(gids)
    while todo:  # chained groups
        for g in re.findall(r"group:(\d+)", by_id.get(todo.pop(), "")):
            if g not in gids:
                gids.add(g)
                todo.append(g)
    mids = {m for f in flows for m in re.findall(r"meter:(\d+)", f)}
    return {
        "flows": flows,
        "groups": {g for g in entries["groups"] if g.split(":", 1)[0] in gids},
        "meters": {m for m in entries["meters"] if any(re.search(rf"\bmeter={mid}\b", m) for mid in mids)},
    }


def _quiet(emu, still_s: float = 3.0, timeout: float = 60.0) -> None:
    """Wait until no re-plan is pending and the plan generation has not moved for `still_s`."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        h = emu.ctl.get("/healthz")
        if h["replan_pending"] or h["plan_generation"] != last:
            last, since = h["plan_generation"], time.monotonic()
        elif time.monotonic() - since >= still_s:
            return
        time.sleep(0.2)
    raise AssertionError("the controller kept re-planning")


def test_a_seventh_job_is_admitted_without_touching_the_six_running_ones():
    import demo
    from emu_session import Emulation

    report: dict = {}
    with Emulation("incr", REPO / "build" / "emu-incremental", bw_mbit=demo.BW_MBIT, group_capacity=demo.GROUPS,
                   switch_group_capacity=demo.core_budgets(),
                   planner={"incremental": True, "reoptimise_after_s": 3600}) as emu:
        for jid, ps, workers, demand in demo.JOBS:
            emu.add_job(jid, ps, workers, demand)
        # a poor admission brings a re-optimisation forward to the first pause: let it
        # (and any re-plan after learned ports) finish before the six are recorded
        _quiet(emu)
        emu.converge(timeout=60)
        report["generation_before"] = emu.ctl.get("/healthz")["plan_generation"]
        topo = emu.fabric.topology
        names = [topo.name(v) for v in topo.switches]
        before = {n: emu.owned_entries(n) for n in names}
        rates = {jid: job.answer["rate"] for jid, job in emu.jobs.items()}

        run = emu.start_traffic(10.0)
        time.sleep(3.0)
        jid, ps, workers, demand = SEVENTH
        t0 = time.monotonic()
        answer = emu.add_job(jid, ps, workers, demand)
        report["post_s"] = time.monotonic() - t0
        assert answer["plan"]["algorithm"] == "incremental", answer["plan"]
        emu.converge([jid], timeout=30)
        time.sleep(8.0)
        m = emu.measure(run)

        after = {n: emu.owned_entries(n) for n in names}
        health = emu.ctl.get("/healthz")
        report["generation_after"] = health["plan_generation"]
        emu.refresh()
        group = answer["group_address"]
        changed = {}
        for n in names:
            new = _of_job(after[n], group)
            for kind in ("flows", "groups", "meters"):
                rest = set(after[n][kind]) - new[kind]
                if rest != set(before[n][kind]):
                    changed.setdefault(n, {})[kind] = sorted(rest ^ set(before[n][kind]))
        report.update({
            "answer_plan": answer["plan"], "churn_jobs": health["churn_jobs"], "six_changed": changed,
            "loss": {j: m["jobs"][j]["loss"] for j in rates},
            "seventh_switches": sorted(n for n in names if any(f.startswith(TREE_COOKIE)
                                                                   for f in _of_job(after[n], group)["flows"])),
            "seventh_backup_switches": sorted(n for n in names if any(not f.startswith(TREE_COOKIE)
                                                                      for f in _of_job(after[n], group)["flows"])),
        })
        (REPO / "build" / "emulation-incremental-report.json").write_text(json.dumps(report, indent=2) + "\n")

        assert health["plan_algorithm"] == "incremental" and health["churn_jobs"] == 0, health
        # λ held: nobody's rate changed, so no meter of the six had to change either
        assert {j: emu.jobs[j].answer["rate"] for j in rates} == rates
        if answer["structure"]["entries"]:
            assert report["seventh_switches"] == sorted(answer["structure"]["entries"]), report["seventh_switches"]
        assert not changed, f"entries of the six running jobs changed: {changed}"
        for j in rates:
            for w, st in m["jobs"][j]["workers"].items():
                assert st["loss"] <= MAX_LOSS, f"{j}: {w} lost {st['loss']:.2%} while the seventh job was admitted"
        got = emu.run_traffic(4.0, [jid])["jobs"][jid]
        assert all(st["received"] > 0 and st["dups"] == 0 for st in got["workers"].values()), got
