"""Training iterations with real bytes (mininet/iteration_bench.py,
mininet/emu_iterations.py; docs/emulation.md, "Training iterations on an
oversubscribed fabric").

The pure parts run everywhere: the oversubscribed fabric's link capacities reach
the controller's config (and so Mininet) as stated, the jobs' placement, the
percentile and the goals' verdicts. The smoke run (`--quick`: 2 jobs, 1
iteration, a 0.25 MB model, lp-rounding and the TCP chain, two emulations) needs
root, Open vSwitch, Mininet, os-ken and libnorm1, and is skipped with the reason
otherwise; it asserts that every worker of every job verified the model's digest
in every iteration, and that the report has its fields.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import time
import types
import urllib.error
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "mininet"))  # scripts, not a package (it would shadow mininet)

import emu_iterations as ei  # noqa: E402
import iteration_bench as ib  # noqa: E402
import ovs_daemon  # noqa: E402
from emu_fabric import PLANNER_SHARE, write_config  # noqa: E402

from controller.client import norm  # noqa: E402
from controller.config import build_topology, load_config  # noqa: E402

_reason = ovs_daemon.emulation_unavailable() or (None if norm.available() else
                                                  "libnorm1 is not installed (apt-get install libnorm1)")


def test_the_oversubscribed_fabric_is_what_the_controller_plans_on(tmp_path):
    spec = ei.FabricSpec()
    path = write_config(tmp_path / "c.json", bw_mbit=spec.host_mbit, group_capacity=spec.groups,
                        switch_group_capacity=spec.core_budgets(), links=spec.links())
    topo = build_topology(load_config(path))
    tiers: dict[frozenset[str], set[float]] = {}
    for link in topo.links:
        kinds = frozenset(n.split("-")[0] for n in (link.a, link.b))
        tiers.setdefault(kinds, set()).add(round(link.capacity / PLANNER_SHARE / 1e6, 6))
    assert tiers == {frozenset({"host", "edge"}): {10.0}, frozenset({"edge", "agg"}): {5.0},
                     frozenset({"agg", "core"}): {2.5}}
    budgets = {n.id: n.group_capacity for n in topo.nodes if n.is_switch}
    assert {b for s, b in budgets.items() if s.startswith("core")} == {0}
    assert {b for s, b in budgets.items() if not s.startswith("core")} == {2}
    assert ei.full_bisection().links() == []  # every tier at the host links' rate: no override


def test_a_structure_s_alone_rate_is_its_narrowest_link_over_its_copies():
    spec = ei.FabricSpec()
    assert spec.link_bps("agg-0-0", "core-1") == pytest.approx(2.5e6 * PLANNER_SHARE)
    assert spec.link_bps("edge-0-0", "agg-0-1") == pytest.approx(5e6 * PLANNER_SHARE)
    assert spec.link_bps("host-3", "edge-0-1") == pytest.approx(10e6 * PLANNER_SHARE)
    tree = {"edges": [{"from": "host-0", "to": "edge-0-0", "copies": 1}, {"from": "edge-0-0", "to": "agg-0-0", "copies": 1},
                      {"from": "agg-0-0", "to": "core-0", "copies": 1}]}
    assert spec.alone_bps(tree) == pytest.approx(2.5e6 * PLANNER_SHARE)
    doubled = {"edges": [*tree["edges"][:2], {"from": "agg-0-0", "to": "core-0", "copies": 2}]}
    assert spec.alone_bps(doubled) == pytest.approx(1.25e6 * PLANNER_SHARE)  # two copies on the core link
    three = {"edges": [{"from": "host-0", "to": "edge-0-0", "copies": 3}]}
    assert spec.alone_bps(three) == pytest.approx(10e6 / 3 * PLANNER_SHARE)
    assert spec.alone_bps({"edges": []}) is None
    assert ei.full_bisection().alone_bps(doubled) == pytest.approx(5e6 * PLANNER_SHARE)


def test_fabric_spec_refuses_bad_values():
    with pytest.raises(ValueError, match="agg_core_mbit"):
        ei.FabricSpec(agg_core_mbit=0)
    with pytest.raises(ValueError, match="core_groups"):
        ei.FabricSpec(core_groups=-1)


def test_layout_puts_two_workers_in_each_of_two_other_pods():
    jobs = ei.layout(8)
    assert len({j.ps for j in jobs}) == 8
    for j in jobs:
        pod = int(j.ps.split("-")[1]) // 4
        pods = [int(w.split("-")[1]) // 4 for w in j.workers]
        assert len(j.workers) == 4 and pod not in pods and sorted(set(pods)) == sorted({(pod + 1) % 4, (pod + 2) % 4})
    with pytest.raises(ValueError, match="jobs must be 1..8"):
        ei.layout(9)


def test_p99_and_goals():
    assert ib.p99([]) is None
    assert ib.p99([3.0, 1.0, 2.0]) == 3.0
    assert ib.p99([float(i) for i in range(1, 201)]) == 198.0

    def r(mean: float | None, ok: bool = True) -> dict:
        return {"broadcast_mean_s": mean, "all_verified": ok}

    g = ib.goals({"lp-rounding": r(10.0), "spt": r(20.0), "tcp-chain": r(14.0), "greedy": r(9.0)}, full=False)
    assert g["lp_vs_best_other"]["best"] == "tcp-chain" and not g["lp_vs_best_other"]["met"]
    assert not g["lp_vs_greedy"]["met"]
    g = ib.goals({"lp-rounding": r(10.0), "spt": r(20.0), "tcp-chain": r(16.0, ok=False)}, full=False)
    assert g["lp_vs_best_other"]["best"] == "spt" and g["lp_vs_best_other"]["met"]  # an unverified run is no baseline
    assert ib.goals({"lp-rounding": r(10.4), "tcp-chain": r(10.0)}, full=True)["lp_vs_tcp_chain"]["met"]
    assert not ib.goals({"lp-rounding": r(10.6), "tcp-chain": r(10.0)}, full=True)["lp_vs_tcp_chain"]["met"]
    assert ib.goals({"lp-rounding": r(9.0), "tcp-chain": r(10.0)}, full=True)["lp_vs_tcp_chain"]["met"]  # faster
    assert "note" in ib.goals({"lp-rounding": r(10.0, ok=False)}, full=False)


def _job(jid: str, bcasts: list[float | None], done: float | None = 30.0, error: str | None = None) -> dict:
    its = [{"broadcast_s": b, "iteration_s": None if b is None else b + 3.0, "upload_s": 2.0,
            "verified": {"w": b is not None}} for b in bcasts]
    return {"id": jid, "ps": "host-0", "workers": ["w"], "mode": None, "planned_bps": None,
            "iterations": its, "completion_s": done, "error": error}


def _run(jobs: list[dict], link_bytes: int, iterations: int = 2) -> dict:
    r = ib.summarise(jobs, iterations)
    r.update({"policy": "lp-rounding", "algorithm": "lp-rounding", "link_bytes": link_bytes, "run_s": 1.0,
              "setup_s": 1.0, "emulation_s": 10.0, "lock_wait_s": 0.0, "uptime_before": "a", "uptime_after": "b",
              "meter_drops": 3, "norm_sessions": "kept", "priority_dscp": None, "planned_class": 46,
              "phase_rates": True, "queue_ms": None, "rendezvous_s": {"j1": 0.1}, "queues_changed": 0})
    return r


def test_runs_are_pooled_over_every_iteration_and_each_run_kept():
    one = _run([_job("j1", [4.0, 6.0]), _job("j2", [5.0, 5.0], done=40.0)], 100)
    two = _run([_job("j1", [8.0, 10.0], done=50.0), _job("j2", [9.0, 9.0])], 300)
    assert one["broadcast_mean_s"] == 5.0 and two["broadcast_mean_s"] == 9.0 and one["all_verified"]
    p = ib.pool([one, two], 2)
    assert p["runs"] == 2 and p["broadcast_mean_by_run_s"] == [5.0, 9.0]
    assert p["broadcast_mean_s"] == 7.0  # over every iteration of both runs
    assert p["broadcast_max_s"] == 10.0 and p["iteration_p99_s"] == 13.0
    assert p["link_bytes"] == 200 and p["job_completion_s"] == {"j1": 50.0, "j2": 40.0}
    assert p["meter_drops"] == 6  # every run's
    assert p["all_verified"] and [j["run"] for j in p["jobs"]] == [1, 1, 2, 2]
    # the settings every run shares are kept, and each run's own measures
    assert p["planned_class"] == 46 and p["phase_rates"] is True and p["norm_sessions"] == "kept"
    assert [r["link_bytes"] for r in p["by_run"]] == [100, 300] and p["by_run"][0]["rendezvous_s"] == {"j1": 0.1}
    assert ib.pool([one], 2)["by_run"][0]["link_bytes"] == 100
    with pytest.raises(ValueError, match="different settings"):
        ib.pool([one, {**two, "phase_rates": False}], 2)
    assert ib.pool([one], 2)["broadcast_mean_by_run_s"] == [5.0]
    # one run with a failed worker, or a job that stopped early, spoils the pooled verdict
    bad = _run([_job("j1", [8.0, None]), _job("j2", [9.0], error="timeout", done=None)], 300)
    assert not bad["all_verified"] and bad["errors"] == {"j2": "timeout"}
    p = ib.pool([one, bad], 2)
    assert not p["all_verified"] and p["errors"] == {"run2:j2": "timeout"} and p["job_completion_s"]["j2"] is None


def test_bad_arguments_are_refused_naming_the_option(capsys):
    with pytest.raises(SystemExit):
        ib.parse(["--policies", "lp-rounding,ring"])
    assert "--policies" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ib.parse(["--jobs", "9"])
    assert "--jobs" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ib.parse(["--runs", "0"])
    assert "--runs" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ib.parse(["--grad-fraction", "-0.1"])
    assert "--grad-fraction" in capsys.readouterr().err
    assert ib.parse(["--grad-fraction", "0"]).grad_fraction == 0  # the broadcasts alone
    assert ib.parse([]).rendezvous and not ib.parse(["--no-rendezvous"]).rendezvous
    with pytest.raises(SystemExit):
        ib.parse(["--queue-ms", "0"])
    assert "--queue-ms" in capsys.readouterr().err
    assert ib.parse(["--planned-class", "46"]).planned_class == 46 and ib.parse([]).planned_class is None
    with pytest.raises(SystemExit):
        ib.parse(["--planned-class", "64"])
    assert "--planned-class" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # who marks: the controller or the hosts, not both
        ib.parse(["--planned-class", "46", "--priority-dscp", "46"])
    assert "one or the other" in capsys.readouterr().err


def test_phase_rates_are_off_unless_asked_and_need_kept_sessions(capsys):
    assert not ib.parse([]).phase_rates and ib.parse(["--phase-rates"]).phase_rates
    with pytest.raises(SystemExit):
        ib.parse(["--phase-rates", "--sessions-per-iteration"])
    assert "--phase-rates needs the kept sessions" in capsys.readouterr().err


def test_the_report_says_whether_rates_followed_the_phases():
    job = _job("j1", [4.0, 6.0])
    job["iterations"][0]["detail"] = {"phase": {"rates": [[-0.01, 8e6], [1.2, 6e6], [4.1, 4e6]], "failed": 1}}
    job["iterations"][1]["detail"] = {"phase": {"rates": [], "failed": 3}}
    job.update(mode="hybrid", planned_bps=1.07e6, alone_bps=2.25e6)
    assert ib.phase_summary(job) == "; phase rates 4.00..8.00 Mbit/s, 4 failed announcements"
    assert ib.phase_summary(_job("j2", [4.0])) == ""  # no phase (off, or a TCP policy)
    report = {"workload": {"jobs": 1, "iterations": 2, "model_bytes": 1, "grad_bytes": 1, "compute_s": 1.0},
              "fabric": {"host_mbit": 10, "edge_agg_mbit": 5, "agg_core_mbit": 2.5, "groups": 2, "core_groups": 0},
              "full_bisection": False, "uptime_before": "a", "uptime_after": "b", "phase_rates": True,
              "policies": {"lp-rounding": ib.pool([_run([job], 100)], 2)}, "goals": {}}
    md = ib.markdown(report)
    assert "Phase-aware rates: on." in md and "phase rates 4.00..8.00 Mbit/s, 4 failed announcements" in md
    assert "j1 (host-0 -> w): hybrid 1.07 Mbit/s (alone: 2.25), broadcasts" in md
    assert "Phase-aware rates: off." in ib.markdown({**report, "phase_rates": False})


def test_the_planned_class_reaches_the_controllers_config(tmp_path):
    path = write_config(tmp_path / "c.json", southbound={"planned_dscp": 46})
    assert load_config(path).southbound.planned_dscp == 46
    assert load_config(write_config(tmp_path / "d.json")).southbound.planned_dscp is None


def test_a_queue_holds_its_time_of_the_link_s_rate():
    assert ei.queue_packets(2_500_000, None) == 1000  # the veths' default
    assert ei.queue_packets(2_500_000, 50) == 11  # 50 ms of 2.5 Mbit/s: 10.3 full frames
    assert ei.queue_packets(10_000_000, 50) == 42
    assert ei.queue_packets(1_000_000, 1) == 4  # never fewer than 4 frames


def test_two_runs_never_share_their_model(tmp_path):
    a, b = ib.data_paths(tmp_path / "one"), ib.data_paths(tmp_path / "two")
    assert len({*a, *b}) == 4 and all(x.parent == tmp_path for x in (*a, *b))


def test_an_empty_gradient_is_no_upload(tmp_path):
    empty = tmp_path / "grad.bin"
    empty.write_bytes(b"")
    # no emulation is touched: nothing to send
    assert ei.upload(None, ei.layout(1)[0], 0, empty, 1.0) == (0.0, None)


def test_broadcast_detail_says_where_the_time_went():
    start = 100.0
    r = {"sender": {"start_at": start, "first": {"GRTT_UPDATED": 101.0, "TX_WATERMARK_COMPLETED": 105.0},
                    "report": {"rounds": 2, "grtt_s": 0.9, "sessions": [["239.1.0.1", ["w1"], True, ["w1"]],
                                                                          ["10.0.0.3", ["w2"], False, ["w2"]]]}},
         "workers": {"w1": {"results": [{"ok": True, "done_at": 104.5,
                                         "first": {"REMOTE_SENDER_NEW": 100.01, "RX_OBJECT_NEW": 101.3}}]},
                     "w2": {"error": "PeerTimeout"}}}
    d = ei.broadcast_detail(r)
    assert d["rounds"] == 2 and d["grtt_s"] == 0.9
    assert d["sessions"] == [{"address": "239.1.0.1", "workers": ["w1"], "multicast": True},
                             {"address": "10.0.0.3", "workers": ["w2"], "multicast": False}]
    assert d["sender"] == {"grtt_updated": 1.0, "tx_watermark_completed": 5.0}
    assert d["workers"]["w1"] == {"done_s": 4.5, "remote_sender_new": 0.01, "rx_object_new": 1.3}
    assert d["workers"]["w2"] == {"done_s": None}
    assert ei.broadcast_detail({"sender": {"error": "X"}, "workers": {}})["workers"] == {}


def test_the_harness_s_rate_line_is_what_a_serving_sender_reads(capsys):
    # emu_broadcast.NormPeers.set_rate writes the line norm_peer's Commands reads (no process:
    # a NormPeers with only the PS's stdin, fed to Commands with a Sender's set_rate recorded)
    import norm_peer

    ps_stdin = io.StringIO()
    peers = ei.eb.NormPeers.__new__(ei.eb.NormPeers)
    peers._stdin, peers.procs = threading.Lock(), {"ps": types.SimpleNamespace(stdin=ps_stdin)}
    peers.set_rate(4e6)
    peers.set_rate(12_345_678.9)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            peers.set_rate(bad)
    applied: list[float] = []
    sender = types.SimpleNamespace(set_rate=applied.append)
    commands = norm_peer.Commands(sender, io.StringIO(ps_stdin.getvalue() + "send\nrate x\nquit\nsend\n"))
    assert commands.next() is True and commands.next() is False  # the send after quit: never
    assert applied == [4e6, 12_345_678.9]
    assert [bps for _, bps in commands.take_rates()] == applied and commands.take_rates() == []
    assert "ignored 'rate x'" in capsys.readouterr().err
    ps_stdin.close()
    peers.set_rate(1e6)  # the PS's stdin closed (it ended): nothing, no error


class _Controller:
    """`emu.ctl` answering PUT /jobs/{id}/broadcasting from `answer(active, n)` (n: the how
    manyth announcement, from 1); an exception answered is raised. `renewed` is set at the
    fifth announcement."""

    def __init__(self, answer) -> None:
        self.answer, self.asked, self.renewed = answer, [], threading.Event()

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 30) -> tuple[int, object]:
        self.asked.append((method, path, body))
        if len(self.asked) >= 5:
            self.renewed.set()
        a = self.answer(body["active"], len(self.asked))
        if isinstance(a, Exception):
            raise a
        return a


class _Peers:
    """NormPeers' set_rate and send: the send lasts until the controller had five
    announcements, and its outcome is verified."""

    def __init__(self, ctl: _Controller) -> None:
        self.ctl, self.set, self.before_send = ctl, [], None

    def set_rate(self, bps: float) -> None:
        self.set.append(bps)

    def send(self) -> dict:
        self.before_send = list(self.set)
        start = time.monotonic()
        assert self.ctl.renewed.wait(10)
        return {"sender": {"start_at": start, "rates": [[start + 0.01, 8e6]],
                           "report": {"rounds": 1, "grtt_s": 0.01, "sessions": []}},
                "workers": {"w": {"results": [{"ok": True, "sha256": "abc", "done_at": time.monotonic()}]}},
                "completion_s": time.monotonic() - start}


def _phased(monkeypatch, answer) -> tuple[tuple, _Controller, _Peers]:
    monkeypatch.setattr(ei, "PHASE_RENEW_S", 0.01)
    ctl = _Controller(answer)
    peers = _Peers(ctl)
    job = ei.JobSpec("j1", "host-0", ("w",))
    out = ei.broadcast(types.SimpleNamespace(ctl=ctl), "lp-rounding", job, 0, Path("model"), "abc", 10.0,
                       peers=peers, phased=True)
    return out, ctl, peers


def test_a_phased_broadcast_goes_at_the_rate_the_controller_answers(monkeypatch):
    # announced before the send (boosted to 8 Mbit/s), renewed during it (an unanswered and a
    # refused renewal change nothing and are counted; then 6 Mbit/s: another job broadcasts),
    # announced over after it, and the sender set back to the planned rate
    def answer(active: bool, n: int):
        if not active:
            return 200, {"id": "j1", "rate": 4e6, "planned_rate": 4e6}
        if n == 2:
            return urllib.error.URLError("connection refused")
        if n == 3:
            return 500, {"error": "boom"}
        return 200, {"id": "j1", "rate": 8e6 if n == 1 else 6e6, "planned_rate": 4e6}

    (seconds, verified, error, detail), ctl, peers = _phased(monkeypatch, answer)
    assert error is None and verified == {"w": True} and seconds is not None
    assert peers.before_send == [8e6] and peers.set == [8e6, 6e6, 4e6]
    assert {(m, p) for m, p, _ in ctl.asked} == {("PUT", "/jobs/j1/broadcasting")}
    assert [b for _, _, b in ctl.asked][0] == {"active": True} and ctl.asked[-1][2] == {"active": False}
    assert sum(b == {"active": False} for _, _, b in ctl.asked) == 1
    phase = detail["phase"]
    assert phase["failed"] == 2 and [bps for _, bps in phase["rates"]] == [8e6, 6e6, 4e6]
    assert phase["rates"][0][0] <= 0 < phase["rates"][-1][0]  # s after the sender's start
    assert detail["rates_applied"] == [[0.01, 8e6]]  # what the sender reported taking


def test_a_failed_phase_never_stops_the_broadcast(monkeypatch):
    # every announcement after the first fails, the last one too: the sender keeps the last
    # rate answered (the controller, not told of the end, still polices the job as broadcasting
    # until the announcement expires)
    def boosted_once(active: bool, n: int):
        return (200, {"rate": 8e6, "planned_rate": 4e6}) if n == 1 else (503, "unavailable")

    (seconds, verified, error, detail), ctl, peers = _phased(monkeypatch, boosted_once)
    assert error is None and verified == {"w": True}
    assert peers.set == [8e6] and detail["phase"]["failed"] == len(ctl.asked) - 1
    assert ctl.asked[-1][2] == {"active": False}  # the end was announced, and failed
    # no answer ever (an unknown job, an answer without a valid rate): the rate is never touched
    for bad in ((404, {"error": "no such job"}), (200, {"rate": None, "planned_rate": 4e6}),
                (200, {"rate": float("inf"), "planned_rate": 4e6}), (200, "not json")):
        (_, verified, error, detail), ctl, peers = _phased(monkeypatch, lambda active, n: bad)
        assert error is None and verified == {"w": True} and peers.set == []
        assert detail["phase"] == {"rates": [], "failed": len(ctl.asked)} and len(ctl.asked) >= 6


def test_a_phased_broadcast_needs_kept_sessions():
    with pytest.raises(ValueError, match="kept sessions"):
        ei.broadcast(types.SimpleNamespace(ctl=None), "spt", ei.JobSpec("j1", "host-0", ("w",)), 0, Path("m"),
                     "abc", 1.0, phased=True)


@pytest.mark.skipif(_reason is not None, reason=_reason or "")
@pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning")
def test_quick_run_every_worker_verifies_every_model(tmp_path):
    out = tmp_path / "iteration-bench"
    rc = ib.main(["--quick", "--queue-ms", "50", "--phase-rates", "--out", str(out)])
    report = json.loads(out.with_suffix(".json").read_text())
    assert rc == 0, json.dumps(report, indent=1)[:4000]
    assert set(report["policies"]) == {"lp-rounding", "tcp-chain"}
    assert report["workload"]["jobs"] == 2 and report["workload"]["iterations"] == 1
    for policy, r in report["policies"].items():
        assert r["all_verified"] and not r["errors"], (policy, r["errors"])
        assert r["queue_ms"] == 50 and r["queues_changed"] == 96  # both ends of the k=4 fat-tree's 48 links
        for key in ("broadcast_mean_s", "iteration_mean_s", "iteration_p99_s", "upload_mean_s", "link_bytes"):
            assert r[key] is not None and r[key] > 0, (policy, key, r[key])
        # every job's model crossed at least one link per worker
        assert r["link_bytes"] >= sum(len(j["workers"]) for j in r["jobs"]) * report["workload"]["model_bytes"]
        assert len(r["jobs"]) == 2
        # every worker met its PS before the first broadcast (the rendezvous), and the ping was answered
        pairs = {f"{w}->{j['ps']}" for j in r["jobs"] for w in j["workers"]}
        assert set(r["rendezvous_s"]) == pairs and all(v is not None for v in r["rendezvous_s"].values()), \
            r["rendezvous_s"]
        for job in r["jobs"]:
            assert len(job["iterations"]) == 1 and job["completion_s"] > 0
            for it in job["iterations"]:
                assert sorted(it["verified"]) == sorted(job["workers"]) and all(it["verified"].values())
                if policy == "lp-rounding":  # NORM: where its time went, per worker
                    assert sorted(it["detail"]["workers"]) == sorted(job["workers"]) and it["detail"]["rounds"] >= 1
                    # its phase announced to the real controller: at least the planned rate while it
                    # broadcast (the other job may have been idle), the idle share once it ended
                    phase = it["detail"]["phase"]
                    assert phase["failed"] == 0 and len(phase["rates"]) >= 2, phase
                    assert phase["rates"][0][1] >= job["planned_bps"] * (1 - 1e-6), (phase, job["planned_bps"])
                    assert phase["rates"][-1][1] == pytest.approx(0.05 * job["planned_bps"]), phase
                assert it["broadcast_s"] > 0 and it["upload_s"] > 0
                assert it["iteration_s"] == pytest.approx(it["broadcast_s"] + it["compute_s"] + it["upload_s"])
    assert report["policies"]["lp-rounding"]["jobs"][0]["mode"] in ("multicast", "hybrid", "unicast")
    md = out.with_suffix(".md").read_text()
    assert "| policy | broadcast mean |" in md and "| lp-rounding |" in md and "| tcp-chain |" in md


def test_stagger_and_core_groups_are_checked(capsys):
    args = ib.parse(["--stagger", "15", "--core-groups", "2"])
    assert (args.stagger, args.core_groups) == (15.0, 2)
    assert (ib.parse([]).stagger, ib.parse([]).core_groups) == (0.0, 0)
    assert ib.parse(["--core-groups", "2,2,0,0"]).core_groups == (2, 2, 0, 0)
    assert ei.FabricSpec(core_groups=(2, 2, 0, 0)).core_budgets() == {"core-0": 2, "core-1": 2, "core-2": 0, "core-3": 0}
    with pytest.raises(ValueError, match="one budget per core switch"):
        ei.FabricSpec(core_groups=(2, 2))
    with pytest.raises(ValueError, match="core_groups must be >= 0"):
        ei.FabricSpec(core_groups=(2, 2, -1, 0))
    for bad, message in ((["--stagger", "-1"], "--stagger must be within"),
                         (["--core-groups", "65"], "each 0..64"), (["--core-groups", "2,2"], "one per core switch"),
                         (["--core-groups", "x"], "expected N or N,N,N,N")):
        with pytest.raises(SystemExit):
            ib.parse(bad)
        assert message in capsys.readouterr().err


def test_phased_jobs_are_declared_idle_before_any_broadcast():
    # a job that never announced keeps its whole plan reserved, so the bench declares every
    # phased job idle first; a refusal stops the run (the phases would not be what it reports)
    ctl = _Controller(lambda active, n: (200, {"rate": 1e5}))
    jobs = [ei.JobSpec("j1", "host-0", ("w",)), ei.JobSpec("j2", "host-4", ("v",))]
    ei.declare_phased(types.SimpleNamespace(ctl=ctl), jobs)
    assert ctl.asked == [("PUT", "/jobs/j1/broadcasting", {"active": False}),
                         ("PUT", "/jobs/j2/broadcasting", {"active": False})]
    refused = _Controller(lambda active, n: (409, {"error": "not_planned"}))
    with pytest.raises(RuntimeError, match="409"):
        ei.declare_phased(types.SimpleNamespace(ctl=refused), jobs)
