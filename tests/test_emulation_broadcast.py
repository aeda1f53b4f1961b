"""Model broadcast over NORM on the emulated k=4 fat-tree (Open vSwitch, userspace
datapath, the real controller; mininet/emu_session.py), with 1 % random loss on
some links. This machine's kernel has no netem (TCLink's `loss=` fails with
"Specified qdisc kind is unknown"), so a lossy link is a user-space relay
between the two ends (mininet/lossy_link.py) that drops 1 % of the frames in
each direction at random.

One emulation for the module: links of 10 Mbit/s, one group per aggregation and
edge switch and none per core switch (as the demo), so that the plan has
multicast, hybrid and unicast jobs, switch-rewritten unicast branches and
PS-addressed workers. Five jobs' PSs (one of each kind) broadcast a 2 MB object with
controller.client.broadcast (mininet/norm_peer.py on the hosts); every worker
must return exactly the PS's bytes (SHA-256), and the PS must have every
worker's confirmation. Then a worker's link goes down for a second in the
middle of a transfer: it is repaired (or the broadcast reports it), and no
worker ever returns other bytes. Numbers go to build/emulation-broadcast-report.json.

First, on an emulation of its own (no loss, no group budget, as
mininet/broadcast_bench.py), an 8 MB object to 7 workers, three times on one
session: the median object within PLAN_BOUND × the time it takes at the
planned (payload) rate, every object within OUTLIER_BOUND ×: bounds for this
2-core machine under other sessions' load; at moderate load the objects take
1.02-1.03 × (docs/emulation.md, "NORM at the plan, second attempt").

Skipped, with the reason, when not root, when Open vSwitch, Mininet or os-ken is
missing, or when Debian's libnorm1 is not installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "mininet"))  # scripts, not a package (it would shadow mininet)

import ovs_daemon  # noqa: E402

from controller.client import norm  # noqa: E402

_reason = ovs_daemon.emulation_unavailable() or (None if norm.available() else
                                                  "libnorm1 is not installed (apt-get install libnorm1)")
pytestmark = [
    pytest.mark.skipif(_reason is not None, reason=_reason or ""),
    pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning"),
]

# (id, PS, workers, demand): the demo's six jobs and two more. With the demo's
# budgets the full plan has every kind of delivery: multicast jobs, hybrid jobs with
# unicast branches rewritten by switches, a hybrid job with a tree and a worker the
# PS addresses itself, and a unicast job (pair). Which job gets which kind follows
# the planner (in-process on 2026-12-02: resnet hybrid with branches at agg-0-0 and
# host-1 addressed by its PS, bert, llama and solo hybrid with switch branches, moe
# hybrid with workers its PS addresses, gpt and vit multicast, pair unicast; before
# the cold plan's deferred baselines, bert was multicast and solo PS-addressed), so
# the jobs that broadcast are chosen from the plan (`broadcasting`), one of each kind.
JOBS = [
    ("resnet", "host-0", ["host-1", "host-5", "host-9", "host-13"], 3e6),
    ("bert", "host-4", ["host-6", "host-7", "host-12"], 3e6),
    ("moe", "host-3", ["host-7", "host-11", "host-15"], 2e6),
    ("gpt", "host-8", ["host-2", "host-3", "host-10", "host-11"], 2.5e6),
    ("vit", "host-14", ["host-12", "host-15", "host-0"], 2.5e6),
    ("llama", "host-9", ["host-1", "host-6", "host-13", "host-14"], 2e6),
    ("solo", "host-2", ["host-10", "host-14"], 2e6),
    ("pair", "host-6", ["host-7"], 2e6),
]
BROADCASTERS = 5  # jobs that broadcast at once (the others only shape the plan)
SIZE = 2_000_000
LOSS_PCT = 1.0
# 1 % loss both ways on a core uplink of every pod and on some worker access links
# (each through a relay: mininet/lossy_link.py)
LOSSY = [("agg-0-0", "core-0"), ("agg-1-0", "core-0"), ("agg-2-1", "core-2"), ("agg-3-1", "core-3"),
         ("edge-0-0", "host-1"), ("edge-1-1", "host-7"), ("edge-2-1", "host-10"), ("edge-3-1", "host-15")]
REPORT: dict = {}
# an 8 MB object to 7 workers, three times on one session: the median object within PLAN_BOUND
# times the time it takes at the planned (payload) rate, every one within OUTLIER_BOUND times.
# Measured with the payload plan (docs/emulation.md, "NORM at the plan, second attempt"): the
# bench 1.018-1.033 at load 3.5-4.5; this test 1.026-1.107 with a busy loop on a core, and
# 1.019, 1.330, 2.400 in one run at load 6 (not explained: no meter drops). The bounds are what
# such load allows, with margin; they catch a broadcast that stalls, not the 1.05 goal
RATE_JOB = ("rate", "host-0", ["host-1", "host-2", "host-5", "host-6", "host-9", "host-12", "host-15"])
RATE_OBJECTS = 3
PLAN_BOUND = 2.2
OUTLIER_BOUND = 3.0


def test_8mb_to_7_workers_each_object_near_the_planned_rate_time(tmp_path):
    # its own emulation (before the module's lossy one starts: one at a time), torn down here
    import emu_broadcast
    from emu_session import Emulation

    data = os.urandom(8_000_000)
    path = tmp_path / "8mb.bin"
    path.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    jid, ps, workers = RATE_JOB
    load_before = os.getloadavg()
    with Emulation("norm-rate", REPO / "build" / "emu-norm-rate", bw_mbit=10.0) as e:
        e.add_job(jid, ps, workers, 1e9)
        e.converge(timeout=60)
        answer = e.jobs[jid].answer
        before = emu_broadcast.meter_drops(e)
        receivers = emu_broadcast.start_norm_receivers(e, answer, workers, objects=RATE_OBJECTS)
        sender = emu_broadcast.start_norm_sender(e, answer, path, objects=RATE_OBJECTS)
        r = emu_broadcast.finish_norm(sender, receivers)
        drops = {sw: n - before.get(sw, 0) for sw, n in emu_broadcast.meter_drops(e).items()}
    planned_s = len(data) * 8 / answer["rate"]
    REPORT["rate"] = {"mode": answer["mode"], "rate": answer["rate"], "planned_s": planned_s,
                      "objects_s": r["objects_s"], "ratios": [t and t / planned_s for t in r["objects_s"]],
                      "meter_drops": drops, "load_before": load_before, "load": os.getloadavg()}
    # the links' 9 Mbit/s for the planner less the headers: a payload rate, metered with them
    assert answer["mode"] == "multicast" and answer["rate"] == pytest.approx(9e6 * 1440 / 1514), answer
    assert "error" not in r["sender"], r["sender"]
    for w, got in r["workers"].items():
        assert len(got["results"]) == RATE_OBJECTS, (w, got)
        assert all(x["ok"] and x["sha256"] == sha for x in got["results"]), (w, got)
    assert len(r["objects_s"]) == RATE_OBJECTS and all(r["objects_s"]), r["objects_s"]
    assert sorted(r["objects_s"])[RATE_OBJECTS // 2] <= PLAN_BOUND * planned_s, REPORT["rate"]
    assert max(r["objects_s"]) <= OUTLIER_BOUND * planned_s, REPORT["rate"]


@pytest.fixture(scope="module")
def emu():
    import demo
    from emu_session import Emulation

    t0 = time.monotonic()
    with Emulation("norm-test", REPO / "build" / "emu-norm-test", bw_mbit=demo.BW_MBIT, group_capacity=demo.GROUPS,
                   switch_group_capacity=demo.core_budgets(), lossy={link: LOSS_PCT for link in LOSSY},
                   # full plans: the jobs were chosen so that the full plan has every kind of delivery;
                   # admission (the default) places them with greedy's candidates, all hybrid here
                   planner={"incremental": False}) as e:
        REPORT["setup_s"] = time.monotonic() - t0
        for jid, ps, workers, demand in JOBS:
            e.add_job(jid, ps, workers, demand)
        e.converge(timeout=60)  # the switches deliver every job's final plan
        yield e
    REPORT["relays"] = e.fabric.relay_stats()  # what each lossy link forwarded and dropped
    REPORT["module_s"] = time.monotonic() - t0
    out = REPO / "build" / "emulation-broadcast-report.json"
    out.write_text(json.dumps(REPORT, indent=2) + "\n")


@pytest.fixture(scope="module")
def blob(tmp_path_factory):
    data = os.urandom(SIZE)
    path = tmp_path_factory.mktemp("norm-emu") / "object.bin"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def _summary(result: dict) -> dict:
    return {"completion_s": result["completion_s"],
            "sender": {k: result["sender"].get(k) for k in ("error", "message", "report")},
            "workers": {w: r.get("results", r) for w, r in result["workers"].items()}}


def kinds_of(answers: dict) -> dict[str, tuple[str, bool, bool]]:
    """Each job's (mode, a worker its PS addresses itself, a unicast branch a switch emits)."""
    return {jid: (a["mode"], bool(a["structure"]["ps_unicast"]),
                  any(b["from"] != a["ps"] for b in a["structure"]["branches"])) for jid, a in answers.items()}


KINDS = {  # every kind of delivery, as the broadcasting jobs must cover them
    "multicast": lambda k: k[0] == "multicast",
    "hybrid, PS-addressed worker": lambda k: k[0] == "hybrid" and k[1],
    "hybrid, switch branch": lambda k: k[0] == "hybrid" and k[2],
    "unicast": lambda k: k[0] == "unicast",
}


def pick_broadcasting(answers: dict) -> list[str]:
    """One job of each kind (the first in JOBS order not yet picked), then others in
    JOBS order up to BROADCASTERS; a kind no job has is left out (the test says so)."""
    kinds = kinds_of(answers)
    order = [jid for jid, *_ in JOBS]
    picked: list[str] = []
    for has in KINDS.values():
        jid = next((j for j in order if j not in picked and has(kinds[j])), None)
        if jid is not None:
            picked.append(jid)
    picked += [j for j in order if j not in picked][:max(0, BROADCASTERS - len(picked))]
    return picked


@pytest.fixture(scope="module")
def broadcasting(emu) -> list[str]:
    return pick_broadcasting({jid: j.answer for jid, j in emu.jobs.items()})


def test_the_plan_has_every_kind_of_delivery(emu, broadcasting):
    answers = {jid: j.answer for jid, j in emu.jobs.items()}
    REPORT["plan"] = {jid: {"mode": a["mode"], "rate": a["rate"], "ps_unicast": a["structure"]["ps_unicast"],
                            "branches": a["structure"]["branches"]} for jid, a in answers.items()}
    REPORT["broadcasting"] = broadcasting
    kinds = kinds_of(answers)
    # the plan has every kind, and the jobs that broadcast cover them all
    missing = [name for name, has in KINDS.items() if not any(has(kinds[j]) for j in broadcasting)]
    assert not missing, (missing, kinds)
    assert len(broadcasting) == BROADCASTERS, broadcasting


def test_every_worker_of_every_job_gets_every_byte_through_1pct_loss(emu, blob, broadcasting):
    import emu_broadcast

    # all broadcasting jobs at once, each at its planned rate
    jobs = {jid: emu.jobs[jid] for jid in broadcasting}
    meters = emu_broadcast.meter_drops(emu)
    receivers = {jid: emu_broadcast.start_norm_receivers(emu, j.answer, j.workers) for jid, j in jobs.items()}
    senders = {jid: emu_broadcast.start_norm_sender(emu, j.answer, blob[0]) for jid, j in jobs.items()}
    results = {jid: emu_broadcast.finish_norm(senders[jid], receivers[jid]) for jid in jobs}
    REPORT["transfers"] = {jid: _summary(r) for jid, r in results.items()}
    REPORT["meter_drops"] = {sw: n - meters.get(sw, 0) for sw, n in emu_broadcast.meter_drops(emu).items()}
    REPORT["load"] = os.getloadavg()
    for jid, r in results.items():
        job = emu.jobs[jid]
        assert "error" not in r["sender"], (jid, r["sender"])
        acked = sorted(w for s in r["sender"]["report"]["sessions"] for w in s[3])
        assert acked == sorted(job.workers), (jid, acked)
        for w, got in r["workers"].items():
            (res,) = got["results"]
            assert res["ok"] and res["sha256"] == blob[1] and res["size"] == SIZE, (jid, w, got)
        # at the planned rate: 2 MB at rate r takes 16e6 / r s; NORM's segments go at 0.995 of the
        # (payload) plan; repairs of the 1 % losses and the confirmation round come on top
        planned_s = SIZE * 8 / job.answer["rate"]
        REPORT["transfers"][jid]["planned_s"] = planned_s
        assert r["completion_s"] < 2.0 * planned_s + 3.0, (jid, r["completion_s"], planned_s)


def test_a_worker_cut_off_for_a_second_is_repaired_never_handed_bad_bytes(emu, blob):
    import emu_broadcast

    jid = "bert"
    job = emu.jobs[jid]
    victim = job.workers[0]
    edge = next(s for (s, n) in emu.fabric.port_to if n == victim)  # the victim's edge switch

    def cut(_sender):
        time.sleep(2.0)  # into the ~5.7 s object
        emu.fabric.link_status(edge, victim, "down")
        time.sleep(1.0)
        emu.fabric.link_status(edge, victim, "up")
        for intf in emu.fabric.host(victim).intfList():  # a link brought up keeps offload off
            if intf.name != "lo":
                emu.fabric.host(victim).cmd(f"ethtool -K {intf.name} tx off")

    r = emu_broadcast.norm_transfer(emu, job.answer, blob[0], during=cut)
    REPORT["cut_off"] = dict(_summary(r), victim=victim, link=[edge, victim])
    for w, got in r["workers"].items():
        for res in got.get("results", []):
            # never other bytes: a result is either exactly the object or an error
            assert (res["ok"] and res["sha256"] == blob[1]) or not res["ok"], (w, res)
    if "error" in r["sender"]:  # not repaired in time: the PS must name the victim
        assert r["sender"]["missing"] == [victim], r["sender"]
    else:
        assert all(got["results"][0]["ok"] for got in r["workers"].values()), r["workers"]


def test_the_lossy_links_dropped_about_1pct(emu):
    time.sleep(1.5)  # the relays write their counts every second
    stats = emu.fabric.relay_stats()
    REPORT["relays_live"] = stats
    assert len(stats) == len(LOSSY), stats
    frames = sum(n for st in stats.values() for n in st["forwarded"].values())
    dropped = sum(n for st in stats.values() for n in st["dropped"].values())
    # the transfers above crossed these links: about 1 % of their frames were dropped
    assert frames > 5000, stats
    assert 0.005 < dropped / (frames + dropped) < 0.02, (dropped, frames)


def test_the_example_registers_broadcasts_weights_and_deletes_its_job(emu):
    # examples/broadcast_weights.py on the hosts, with controller.client through the REST relay
    from emu_broadcast import ApiRelay, run_example

    relay = ApiRelay(emu)
    try:
        out = run_example(emu, relay, "example", "host-5", ["host-0", "host-8", "host-11"], 2e6,
                          iterations=2, mb=1.0, timeout=60)
    finally:
        relay.close()
    REPORT["example"] = {h: o["lines"] for h, o in out.items()}
    ps = out["host-5"]
    assert ps["rc"] == 0, ps
    events = [ln["event"] for ln in ps["lines"]]
    assert events[0] == "registered" and events.count("sent") == 2 and events[-1] == "deleted", ps["lines"]
    # each broadcast was announced (phase-aware rates): broadcasting at >= the plan, then the idle share
    for sent in (ln for ln in ps["lines"] if ln["event"] == "sent"):
        assert sent["announce_failures"] == 0 and len(sent["rates_bps"]) >= 2, sent
        assert sent["rates_bps"][0] >= sent["planned_bps"] > sent["rates_bps"][-1], sent
    for w in ("host-0", "host-8", "host-11"):
        got = [ln for ln in out[w]["lines"] if ln["event"] == "received"]
        assert out[w]["rc"] == 0 and len(got) == 2 and all(ln["weights_equal"] for ln in got), out[w]
    status, _ = emu.ctl.request("GET", "/jobs/example")
    assert status == 404  # deleted by the example
