"""End to end with real traffic on BMv2: the demo's fat-tree, its jobs and faults, over P4Runtime.

The counterpart of tests/test_emulation.py for P4 switches. One emulation
(mininet/emu_session.py, backend "p4") is shared by the whole module: 20 BMv2
simple_switch_grpc switches running p4src/mcast.p4 as a Mininet k=4 fat-tree in a
private network namespace, the real controller process programming them over
P4Runtime, the demo's six jobs at the demo's BMv2 rates (mininet/demo.py,
P4_SCALE of the Open vSwitch demo's), one group per aggregation and edge switch
and none per core switch. Everything the tests check on the switches is read
from them over P4Runtime (a read-only client) and followed through the model of
mcast.p4 (controller/southbound/p4runtime/tracer.py). Tests run in file order:

1. steady traffic: every worker gets its stream once at >= 90% of its planned
   rate with loss <= 1%, nobody else gets anything, no switch holds more groups
   or multicast entries than its budget;
2. a link taken down during traffic (both veth ends, Mininet's configLinkStatus):
   BMv2 reports no port status over P4Runtime (the stream has no such message),
   so the controller notices it by the LLDP timeout, re-plans around it, and
   delivery resumes. Seen with this BMv2: while one of its ports is down, a
   switch reads no packet on any port (it still sends), so every link of both
   switches times out and the re-plan avoids both; workers may get duplicates;
3. a simple_switch_grpc killed (SIGKILL) and started again during traffic: the
   controller installs the pipeline and its entries again, delivery resumes
   (the trees move around the dead switch and back: a datagram in flight may
   arrive twice, which is recorded, not failed);
4. the controller SIGKILLed during traffic and started again: it writes nothing
   (its log, its P4Runtime error counter, the switches' entries read back) and
   no worker loses more than 1%;
5. deleting the jobs leaves no multicast entry, group or rewrite (the unicast
   routes stay).

During a fault the senders follow their jobs' plans as a polling PS would
(`Emulation.follow`); a datagram in flight while trees move may arrive twice
then, which is recorded; after the link-down and the switch restart a short
clean run must show no duplicates and loss <= 1% again. The longest gap at the
workers is each fault's outage as they see it; the numbers go to build/emulation-bmv2-test-report.json (docs/emulation.md quotes
them). Marked `bmv2`; skipped, with the reason, when not root or when
simple_switch_grpc, p4c or Mininet is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "mininet"))  # scripts, not a package (it would shadow mininet)

_reason = None
if os.geteuid() != 0:
    _reason = "needs root (Mininet creates network devices)"
elif shutil.which("simple_switch_grpc") is None:
    _reason = "simple_switch_grpc not found on PATH"
elif not (shutil.which("p4c-bm2-ss") or shutil.which("p4c")):
    _reason = "p4c not found on PATH"
else:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        _reason = "Mininet is not installed (make setup installs it)"

pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.skipif(_reason is not None, reason=_reason or ""),
    pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning"),
]

TRAFFIC_S = 6.0
RATE_SHARE = 0.9
MAX_LOSS = 0.01
MEASURED: dict = {}


@pytest.fixture(scope="module")
def emu():
    import demo
    from emu_session import Emulation

    t0 = time.monotonic()
    with Emulation("test-bmv2", REPO / "build" / "emu-test-bmv2", backend="p4",
                   bw_mbit=demo.BW_MBIT * demo.P4_SCALE, group_capacity=demo.GROUPS,
                   switch_group_capacity=demo.core_budgets(), lldp_interval_s=demo.LLDP_INTERVAL_S,
                   lldp_timeout_s=demo.LLDP_TIMEOUT_S) as e:
        MEASURED["setup_s"] = time.monotonic() - t0
        MEASURED["timings_s"] = dict(e.timings)
        MEASURED["scale"] = demo.P4_SCALE
        try:
            yield e
        finally:
            MEASURED["module_s"] = time.monotonic() - t0
            out = REPO / "build" / "emulation-bmv2-test-report.json"
            out.write_text(json.dumps(MEASURED, indent=2) + "\n")


@pytest.fixture(scope="module")
def jobs(emu):
    import demo

    for jid, ps, workers, demand in demo.scaled_jobs(demo.P4_SCALE):
        emu.add_job(jid, ps, workers, demand)
    t0 = time.monotonic()
    emu.converge(timeout=60)
    MEASURED["jobs_delivered_s"] = time.monotonic() - t0
    return emu.jobs


def _names(emu) -> list[str]:
    topo = emu.fabric.topology
    return [topo.name(v) for v in topo.switches]


def _state(emu, name: str):
    """What a switch holds, as comparable sets (read over P4Runtime)."""
    st = emu.fabric.p4_state(name)
    return (st.entries, st.groups, st.members)


def _gap(m: dict, job_ids) -> dict[str, float]:
    return {j: max(st["max_gap_s"] or 0 for st in m["jobs"][j]["workers"].values()) for j in job_ids}


def _resumed(m: dict, job_ids, dups_allowed: bool = False) -> None:
    """Every worker of these jobs kept receiving until its sender stopped (and, unless
    `dups_allowed`, got no datagram twice)."""
    for j in job_ids:
        for w, st in m["jobs"][j]["workers"].items():
            assert st["received"] > 0, f"{j}: {w} got nothing"
            assert st["last_arrival_s"] > m["jobs"][j]["duration_s"] - 1.0, f"{j}: {w} stopped receiving: {st}"
            assert dups_allowed or st["dups"] == 0, f"{j}: {w} got {st['dups']} datagrams twice"


# -- steady traffic ------------------------------------------------------------------------------
SENDER_SLACK = 0.02  # a sender more than this share of the run behind its schedule: run it again
SENDER_LAG_MAX = 0.25  # a run in which a sender stayed this far behind measures nothing
STEADY_ATTEMPTS = 4  # runs at most, until one whose senders kept their schedule


def test_every_worker_gets_its_planned_rate_and_no_switch_is_over_budget(emu, jobs):
    # A PS that cannot keep its sending schedule (the 20 BMv2 switches and the hosts
    # share 2 CPUs) skips ahead rather than bursting: for that share of the run it
    # sent nothing, which measures the host's CPU, not the network. Up to
    # STEADY_ATTEMPTS runs; the one whose senders kept their schedule best is kept,
    # and each worker's goodput is held against the planned rate over the time its
    # sender did send. (CI, stop 35, three runs then: the best one's slowest sender
    # 15 % behind, load average 5.4, and a worker lost 2 % in one 0.24 s gap; the
    # loss message now names every run's lag and load.)
    usage: list = []
    runs = []
    for attempt in range(STEADY_ATTEMPTS):
        run = emu.start_traffic(TRAFFIC_S)
        time.sleep(TRAFFIC_S / 2)
        usage += emu.switch_usage()  # read over P4Runtime while the traffic flows
        time.sleep(TRAFFIC_S / 2 + 1.0)
        m = emu.measure(run)
        behind = max(j["skipped_s"] / j["duration_s"] for j in m["jobs"].values())
        MEASURED.setdefault("steady_runs_behind_schedule_share", []).append(behind)
        runs.append((behind, m, os.getloadavg()[0]))
        if behind <= SENDER_SLACK:
            break
    usage += emu.switch_usage()
    behind, m, _ = min(runs, key=lambda r: r[0])
    lags = ", ".join(f"{b:.1%} (load {load:.1f})" for b, _, load in runs)
    assert behind <= SENDER_LAG_MAX, f"every run's senders fell behind their schedule (best: {behind:.0%} of the run)"
    MEASURED["steady"] = {jid: {k: j[k] for k in ("mode", "planned_bps", "measured_bps", "loss", "dups", "ps_copies",
                                                  "skipped_s")}
                          for jid, j in m["jobs"].items()}
    assert not m["strays"], f"hosts outside a job received its datagrams: {m['strays']}"
    for jid, j in m["jobs"].items():
        on_schedule = 1.0 - j["skipped_s"] / j["duration_s"]  # the share of the run its PS sent
        for w, st in j["workers"].items():
            assert st["dups"] == 0, f"{jid}: {w} received {st['dups']} datagrams twice"
            assert st["goodput_bps"] >= RATE_SHARE * j["planned_bps"] * on_schedule, (
                f"{jid} ({j['mode']}): {w} measured {st['goodput_bps'] / 1e6:.2f} Mbit/s of "
                f"{j['planned_bps'] / 1e6:.2f} planned (its sender sent {on_schedule:.0%} of the run)")
            assert st["loss"] <= MAX_LOSS, f"{jid}: {w} lost {st['loss']:.2%}: {_why(j, w)}; runs behind: {lags}"
    modes = {jid: j["mode"] for jid, j in m["jobs"].items()}
    assert set(modes.values()) - {"multicast"}, f"the budget should force some job off multicast: {modes}"
    assert not emu.over_budget(usage), f"switches over a budget: {emu.over_budget(usage)}"
    assert any(u["groups_used"] for u in usage), "no switch replicates at all"


# -- faults -----------------------------------------------------------------------------------------
def _clean_run(emu, what: str, seconds: float = 5.0, attempts: int = 3) -> dict:
    """After a fault: once the network has settled, a short run in which every worker
    gets its stream with loss <= 1% and no duplicates, and nobody else gets any.

    A run during which the controller made a new plan measured the trees moving,
    not the settled network: it is recorded (MEASURED["clean_runs_replanned"]) and
    run again, at most `attempts` runs in all."""
    for _ in range(attempts):
        _settled(emu)
        generation = emu.ctl.get("/healthz")["plan_generation"]
        m = emu.run_traffic(seconds)
        replanned = emu.ctl.get("/healthz")["plan_generation"] != generation
        if not replanned:
            break
        MEASURED.setdefault("clean_runs_replanned", []).append(what)
    assert not replanned, f"the controller re-planned during each of {attempts} runs {what}"
    for jid, j in m["jobs"].items():
        for w, st in j["workers"].items():
            assert st["received"] > 0 and st["dups"] == 0, f"{jid}: {w} {what}: {st}"
            assert st["loss"] <= MAX_LOSS, f"{jid}: {w} lost {st['loss']:.2%} {what}: {_why(j, w)}"
    assert not m["strays"], m["strays"]
    return {jid: j["loss"] for jid, j in m["jobs"].items()}


def _why(job: dict, worker: str) -> str:
    """What a failed loss check saw: the worker's longest gap and when, its sender's lag, the load."""
    st = job["workers"][worker]
    at = f"{st['gap_at_s']:.2f}" if st["gap_at_s"] is not None else "?"
    return (f"longest gap {st['max_gap_s'] or 0:.3f} s at {at} s of {job['duration_s']:.1f} s, via {st['via']}, "
            f"sender {job['skipped_s']:.2f} s behind its schedule, load average {os.getloadavg()[0]:.1f}")


def _plan_links(emu, job_id: str) -> set[frozenset[str]]:
    plan = emu.ctl.get("/plan")
    jp = next(j for j in plan["jobs"] if j["id"] == job_id)
    return {frozenset((e["from"], e["to"])) for e in jp["edges"]}


def _link_up(emu, a: str, b: str) -> bool:
    for link in emu.ctl.get("/links")["links"]:
        if {link["a"]["node"], link["b"]["node"]} == {a, b}:
            return link["up"]
    raise AssertionError(f"no link {a} - {b}")


def test_link_down_is_noticed_by_lldp_replanned_and_delivery_resumes(emu, jobs):
    from emu_session import poll

    emu.converge(timeout=60)
    a, b, affected = emu.tree_link("agg", "core")
    log_offset = len(emu.ctl.log_text())
    duration = 14.0
    t_start = time.monotonic()
    run = emu.start_traffic(duration)
    time.sleep(3.0)
    t_down = time.monotonic()
    emu.fabric.link_status(a, b, "down")
    try:
        poll(lambda: not _link_up(emu, a, b), 30, f"the controller to see {a}-{b} down", 0.05)
        t_noticed = time.monotonic() - t_down
        poll(lambda: all(frozenset((a, b)) not in _plan_links(emu, j) for j in affected), 30,
             f"a plan that avoids {a}-{b}", 0.05)
        t_replanned = time.monotonic() - t_down
        emu.converge(timeout=30)
        for j in emu.jobs:
            emu.update_traffic(j)  # the PS's own unicast copies may have changed
        t_converged = time.monotonic() - t_down
        # later re-plans (more links time out, below): the PSs follow them
        changes = emu.follow(t_start + duration - 2.0)
        # BMv2 (libpcap) stops reading packets on every port of a switch while one of its
        # ports is down: LLDP then times out every link of both switches, not just this one
        seen_down = sorted("-".join(sorted((x["a"]["node"], x["b"]["node"])))
                           for x in emu.ctl.get("/links")["links"] if not x["up"])
        changes += emu.follow(t_start + duration + 1.0)
        m = emu.measure(run)
    finally:
        emu.fabric.link_status(a, b, "up")
    log = emu.ctl.log_text()[log_offset:]
    by_lldp = bool(re.search(rf"link ({a} - {b}|{b} - {a}): no LLDP probe seen", log))
    MEASURED["link_down"] = {
        "link": [a, b], "mininet": [emu.fabric.names[a], emu.fabric.names[b]], "affected": affected,
        "noticed_s": t_noticed, "noticed_by_lldp_timeout": by_lldp, "replanned_s": t_replanned,
        "switches_deliver_s": t_converged, "links_seen_down": seen_down,
        "senders_redirected": [(round(t - t_down, 2), j) for t, j in changes], "max_gap_s": _gap(m, affected),
        "loss": {j: m["jobs"][j]["loss"] for j in affected}, "dups": {j: m["jobs"][j]["dups"] for j in m["jobs"]},
    }
    assert by_lldp, f"the controller log does not say the link timed out:\n{log[-3000:]}"
    # duplicates are possible here: the BMv2 switches at both ends stop reading packets on
    # every port while one is down, and what they read late meets the next plan's entries
    _resumed(m, affected, dups_allowed=True)
    assert not m["strays"]
    # the link comes back: LLDP sees it again and it is planned with again
    t_up = time.monotonic()
    poll(lambda: _link_up(emu, a, b), 30, f"the controller to see {a}-{b} up again", 0.2)
    MEASURED["link_down"]["seen_up_again_s"] = time.monotonic() - t_up
    MEASURED["link_down"]["loss_after"] = _clean_run(emu, "after the link came back")


def test_bmv2_killed_and_restarted_gets_its_pipeline_and_entries_back(emu, jobs):
    from emu_session import poll

    _settled(emu)
    usage = {u["id"]: u for u in emu.switch_usage()}
    name = next(n for n, u in usage.items() if n.startswith("agg") and u["groups_used"])
    before = _state(emu, name)
    through = [j for j, job in emu.jobs.items() if any(name in (e["from"], e["to"]) for e in job.answer["structure"]["edges"])]
    duration = 14.0
    t_start = time.monotonic()
    run = emu.start_traffic(duration)
    time.sleep(2.0)
    t0 = time.monotonic()
    emu.fabric.restart_switch(name)  # SIGKILL, then a fresh simple_switch_grpc: no pipeline, no entries
    t_started = time.monotonic() - t0

    def reconnected() -> bool:
        sw = {s["id"]: s for s in emu.ctl.get("/switches")["switches"]}[name]
        assert sw["connected"], f"{name} not connected again yet"
        emu.fabric.p4_state(name)  # answers a Read: the pipeline is in
        return True

    poll(reconnected, 60, f"{name} to be connected with its pipeline", 0.1)
    t_reconnected = time.monotonic() - t0
    emu.converge(timeout=60)
    t_delivers = time.monotonic() - t0
    for j in emu.jobs:
        emu.update_traffic(j)

    def refilled() -> bool:
        # what the controller plans for it now (the plan may have moved while it was gone)
        u = {x["id"]: x for x in emu.switch_usage()}[name]
        assert (u["groups_used"], u["multicast_flows"]) == (u["controller_groups_used"], u["controller_entries_used"]), u
        assert emu.fabric.unicast_routes(name) == len(emu.fabric.hosts), f"{name}: unicast routes missing"
        return True

    poll(refilled, 60, f"{name} to hold its unicast routes, groups and multicast entries again", 0.2)
    t_refilled = time.monotonic() - t0
    # the plan moves back once LLDP sees its links again: the PSs follow it
    changes = emu.follow(t_start + duration + 1.0)
    same = _state(emu, name) == before
    m = emu.measure(run)
    MEASURED["switch_restart"] = {
        "switch": name, "mininet": emu.fabric.names[name], "jobs_through_it": through,
        "process_restarted_s": t_started, "reconnected_with_pipeline_s": t_reconnected,
        "switches_deliver_s": t_delivers, "refilled_s": t_refilled, "same_entries_as_before": same,
        "senders_redirected": [(round(t - t0, 2), j) for t, j in changes],
        "max_gap_s": _gap(m, list(m["jobs"])), "loss": {j: m["jobs"][j]["loss"] for j in m["jobs"]},
        "dups": {j: m["jobs"][j]["dups"] for j in m["jobs"]},
    }
    # a datagram in flight while the trees move (away from the dead switch and back) can meet
    # an old tree at one switch and the new one at the next: duplicates are possible here
    _resumed(m, list(m["jobs"]), dups_allowed=True)
    assert not m["strays"]
    MEASURED["switch_restart"]["loss_after"] = _clean_run(emu, "after the switch restart")


def _settled(emu) -> None:
    """Every link up again (LLDP) and back in the plan (its hold-down over: a link up
    again but still held down rejoins the plan, and the trees move, when the
    hold-down ends), no re-plan pending, the switches deliver the plan."""
    from emu_session import poll

    def links_in_plan() -> bool:
        links = emu.ctl.get("/links")["links"]
        out = [x for x in links if not x["up"] or x["held_down_s"] is not None]
        assert not out, f"{len(out)} links down or held down"
        return True

    poll(links_in_plan, 60, "every link up and out of its hold-down", 0.2)
    poll(lambda: not emu.ctl.get("/healthz")["replan_pending"], 30, "no re-plan pending", 0.2)
    emu.converge(timeout=60)


def test_controller_killed_and_restarted_writes_nothing(emu, jobs):
    names = _names(emu)
    _settled(emu)  # after the faults before: the links are back, the switches hold the plan
    time.sleep(1.0)
    emu.converge(timeout=60)
    before = {n: _state(emu, n) for n in names}
    jobs_before = {j["id"]: j["group_address"] for j in emu.ctl.get("/jobs")["jobs"]}
    duration = 10.0
    # As in the steady test, a run whose senders fell behind their schedule measured
    # the CPU (CI, 2026-12-03: a sender 8 % behind, load average 12.8, a worker lost
    # 2 % in a 0.3 s gap): the kill and restart are done again, up to
    # STEADY_ATTEMPTS times, and the loss is judged on the run whose senders kept
    # their schedule best. Every restart must write nothing.
    runs = []
    offset = None
    for attempt in range(STEADY_ATTEMPTS):
        t_start = time.monotonic()
        run = emu.start_traffic(duration)
        time.sleep(2.0)
        emu.ctl.kill()  # SIGKILL: no clean shutdown
        time.sleep(1.0)
        if offset is None:
            offset = len(emu.ctl.log_text())
        t0 = time.monotonic()
        emu.ctl.start()
        emu.ovs.record_pid("controller", emu.ctl.pid, str(emu.ctl.config))
        emu.ctl.wait_connected(len(names), timeout=60)
        reconnected = time.monotonic() - t0
        time.sleep(max(0.0, t_start + duration + 1.0 - time.monotonic()))
        m = emu.measure(run)
        behind = max(j["skipped_s"] / j["duration_s"] for j in m["jobs"].values())
        runs.append((behind, m, reconnected, os.getloadavg()[0]))
        if behind <= SENDER_SLACK:
            break
    behind, m, reconnected, _ = min(runs, key=lambda r: r[0])
    lags = ", ".join(f"{b:.1%} (load {load:.1f})" for b, _, _, load in runs)
    log = emu.ctl.log_text()[offset:]
    after = {n: _state(emu, n) for n in names}
    changed = [n for n in names if after[n] != before[n]]
    with urllib.request.urlopen(emu.ctl.url + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    errors = re.search(r"^mcast_p4runtime_errors(?:_total)?\s+(\S+)", metrics, re.M)
    writes = re.findall(r"switch (\S+): (\d+) updates", log)
    installs = re.findall(r"switch (\S+): primary .*pipeline installed", log)
    MEASURED["controller_restart"] = {
        "restarts": len(runs), "runs_behind_schedule_share": [r[0] for r in runs],
        "reconnected_s": reconnected, "switches_changed": changed, "updates_logged": writes,
        "pipelines_installed": installs, "p4runtime_errors": float(errors.group(1)) if errors else None,
        "loss": {jid: j["loss"] for jid, j in m["jobs"].items()},
        "max_gap_s": max(st["max_gap_s"] or 0 for j in m["jobs"].values() for st in j["workers"].values()),
    }
    assert {j["id"]: j["group_address"] for j in emu.ctl.get("/jobs")["jobs"]} == jobs_before
    assert not installs, f"the restarted controller installed the pipeline again on {installs}"
    assert not writes, f"the restarted controller wrote to the switches: {writes}"
    assert not changed, f"the restarted controller changed {changed}"
    assert errors and float(errors.group(1)) == 0, "P4Runtime errors after the restart"
    for jid, j in m["jobs"].items():
        for w, st in j["workers"].items():
            assert st["loss"] <= MAX_LOSS, (f"{jid}: {w} lost {st['loss']:.2%} across the controller restart: "
                                            f"{_why(j, w)}; runs behind: {lags}")
            assert st["dups"] == 0


# -- deletion -----------------------------------------------------------------------------------------
def test_deleting_the_jobs_leaves_no_multicast_state(emu, jobs):
    from emu_session import poll

    for jid in list(emu.jobs):
        emu.delete_job(jid)
    t0 = time.monotonic()
    poll(lambda: not emu.multicast_leftovers(), 30, "every multicast entry, group and rewrite to go", 0.3)
    MEASURED["clean_after_delete_s"] = time.monotonic() - t0
    n_hosts = len(emu.fabric.hosts)
    for name in _names(emu):
        assert emu.fabric.unicast_routes(name) == n_hosts, f"{name}: unicast routes gone"
