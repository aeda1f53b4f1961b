"""Training iterations with real bytes on an oversubscribed emulated fabric
(docs/emulation.md, "Training iterations on an oversubscribed fabric").

`--jobs` jobs (default 6) train at once for `--iterations` iterations each
(default 3): the PS broadcasts a model of `--mb` MB (default 2) to its 4
workers, every worker checks its SHA-256, the workers compute (`--compute`
seconds of sleep, default 1), then every worker uploads a gradient of
`--grad-fraction` x the model (default 0.25) to the PS over TCP. Broadcast
policies, one emulation (one controller run) each, on the same hosts:

  lp-rounding, spt, greedy, unicast   NORM along the plan of the controller
                                      run with that `planner.algorithm`
                                      (unicast: the PS sends one NORM
                                      session per worker)
  tcp-parallel                        one TCP connection from the PS per worker
  tcp-chain                           a pipelined TCP chain PS -> w1 -> ... -> w4

The fabric (mininet/emu_iterations.FabricSpec): the k=4 fat-tree, hosts at
10 Mbit/s, edge->aggregation 5, aggregation->core 2.5 (`--full-bisection`: all
10), group budget 2 on edge and aggregation switches, 0 on core switches; the
controller's config states the same capacities (`topology.links`).

Writes build/iteration-bench.json and build/iteration-bench.md and prints the
table. Run as root, e.g. `make iteration-bench`; `--lock FILE` takes an
exclusive flock on FILE around each policy's emulation only (other emulations on
the machine wait between policies, not for the whole run). `--phase-rates`: every
NORM broadcast is announced to the controller as its job's broadcasting phase, the PS
going at the rate the controller answers (emu_iterations.phase); off by default. `--quick`: 2 jobs,
1 iteration, a 0.25 MB model, lp-rounding and tcp-chain (the smoke test,
tests/test_iteration_bench.py).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emu_broadcast as eb  # noqa: E402
import emu_iterations as ei  # noqa: E402
from emu_session import REPO, Emulation  # noqa: E402
from ovs_daemon import emulation_unavailable  # noqa: E402

DEMAND = 1e9  # more than a host link: the planner gives each job what the fabric allows (capped to the PS's link)


@contextlib.contextmanager
def locked(path: str | None) -> Iterator[None]:
    if path is None:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def p99(values: list[float]) -> float | None:
    """Nearest-rank 99th percentile (with fewer than 100 values: the largest)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(0.99 * len(s)) - 1)]


def mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def run_policy(policy: str, fabric: ei.FabricSpec, jobs: list[ei.JobSpec], model: Path, grad: Path,
               args: argparse.Namespace) -> dict[str, Any]:
    algorithm = policy if policy in ei.NORM_POLICIES else "lp-rounding"
    asked = time.monotonic()
    # incremental: false: the jobs are registered together at the start and the benchmark compares the
    # algorithms' full plans; with the default (admission), lp-rounding's first plan would be admission's.
    with locked(args.lock):
        t0 = time.monotonic()  # the emulation's own time, not the wait for the lock
        load_before = uptime()
        with Emulation(f"iter-{policy}", REPO / "build" / f"emu-iter-{policy}", bw_mbit=fabric.host_mbit,
                       group_capacity=fabric.groups, switch_group_capacity=fabric.core_budgets(),
                       planner={"algorithm": algorithm, "incremental": False}, links=fabric.links(),
                       southbound=None if args.planned_class is None else {"planned_dscp": args.planned_class}) as emu:
            setup_s = time.monotonic() - t0
            if policy in ei.NORM_POLICIES:
                for j in jobs:
                    emu.add_job(j.id, j.ps, list(j.workers), DEMAND)
            # every policy alike: the jobs' hosts have met before the first broadcast (rendezvous)
            met = ei.rendezvous(emu, jobs) if args.rendezvous else {}
            if policy in ei.NORM_POLICIES:
                time.sleep(1.0)  # a host's first packets may change the plan's translation (its learned MAC)
                emu.converge(timeout=60)
            tos, sized = None, 0
            if args.priority_dscp is not None:  # the experiment: NORM's packets in a strict-priority class
                sized = ei.prioritise(emu, args.priority_dscp, args.queue_ms)
                tos = args.priority_dscp << 2
            elif args.planned_class is not None:  # the controller marks (the hosts do not): the same queues
                sized = ei.prioritise(emu, args.planned_class, args.queue_ms)
            elif args.queue_ms is not None:
                sized = ei.size_queues(emu, args.queue_ms)
            drops_before = eb.meter_drops(emu)
            kinds_before = ei.meter_drops_by_kind(emu)
            jobs_run, link_bytes, took = ei.run_jobs(emu, policy, jobs, model, grad, iterations=args.iterations,
                                                 compute_s=args.compute, timeout=args.timeout, tos=tos,
                                                 keep_sessions=args.keep_sessions,
                                                 phased=args.phase_rates and policy in ei.NORM_POLICIES,
                                                 stagger_s=args.stagger, fabric=fabric)
            drops = sum(eb.meter_drops(emu).values()) - sum(drops_before.values())
            by_kind = {k: n - kinds_before[k] for k, n in ei.meter_drops_by_kind(emu).items()}
        emulation_s = time.monotonic() - t0
        load_after = uptime()
    result = summarise([r.as_dict() for r in jobs_run], args.iterations)
    result.update({
        "policy": policy, "algorithm": algorithm if policy in ei.NORM_POLICIES else None,
        "norm_sessions": "kept" if args.keep_sessions else "per iteration", "priority_dscp": args.priority_dscp,
        "planned_class": args.planned_class, "phase_rates": args.phase_rates, "queue_ms": args.queue_ms,
        "link_bytes": link_bytes, "meter_drops": drops, "meter_drops_by_kind": by_kind, "rendezvous_s": met,
        "queues_changed": sized, "run_s": took, "setup_s": setup_s, "emulation_s": emulation_s,
        "lock_wait_s": t0 - asked, "uptime_before": load_before, "uptime_after": load_after,
    })
    return result


# A policy's settings, the same in every run of it (pool keeps them once) ...
SETTINGS = ("policy", "algorithm", "norm_sessions", "priority_dscp", "planned_class", "phase_rates", "queue_ms")
# ... and what each run measured besides its iterations (pool keeps one value per run, in "by_run").
PER_RUN = ("link_bytes", "meter_drops", "rendezvous_s", "queues_changed", "run_s", "setup_s", "emulation_s",
           "lock_wait_s", "uptime_before", "uptime_after")


def summarise(jobs: list[dict[str, Any]], iterations: int) -> dict[str, Any]:
    """Broadcast, iteration and upload statistics over every iteration of `jobs`
    (RunResult.as_dict()s: one run's, or several runs' pooled)."""
    its = [it for j in jobs for it in j["iterations"]]
    bcast = [it["broadcast_s"] for it in its if it["broadcast_s"] is not None]
    iters = [it["iteration_s"] for it in its if it["iteration_s"] is not None]
    ups = [it["upload_s"] for it in its if it["upload_s"] is not None]
    complete = bool(jobs) and all(j["error"] is None and len(j["iterations"]) == iterations for j in jobs)
    return {
        "all_verified": complete and all(it["verified"] and all(it["verified"].values()) for it in its),
        "errors": {j["id"]: j["error"] for j in jobs if j["error"]},
        "broadcast_mean_s": mean(bcast), "broadcast_max_s": max(bcast, default=None),
        "iteration_mean_s": mean(iters), "iteration_p99_s": p99(iters),
        "upload_mean_s": mean(ups), "upload_max_s": max(ups, default=None),
        "job_completion_s": {j["id"]: j["completion_s"] for j in jobs},
        "jobs": jobs,
    }


def pool(runs: list[dict[str, Any]], iterations: int) -> dict[str, Any]:
    """One policy's result over several runs (run_policy's dicts, in run order): the
    statistics over every iteration of every run, each run's mean broadcast, the
    mean link bytes per run, the slowest completion of each job, the policy's
    settings (SETTINGS; runs that differ in them are refused) and each run's own
    measures (PER_RUN, in "by_run")."""
    settings = {k: runs[0].get(k) for k in SETTINGS}
    for r in runs[1:]:
        if {k: r.get(k) for k in SETTINGS} != settings:
            raise ValueError(f"runs of one policy with different settings: {settings} and "
                             f"{ {k: r.get(k) for k in SETTINGS} }")
    by_run = [{k: r.get(k) for k in PER_RUN} for r in runs]
    if len(runs) == 1:
        return {**runs[0], "runs": 1, "broadcast_mean_by_run_s": [runs[0]["broadcast_mean_s"]], "by_run": by_run}
    jobs = [{**j, "run": n} for n, r in enumerate(runs, 1) for j in r["jobs"]]
    out = summarise(jobs, iterations)
    out["all_verified"] = all(r["all_verified"] for r in runs)
    out["errors"] = {f"run{n}:{k}": v for n, r in enumerate(runs, 1) for k, v in r["errors"].items()}
    done: dict[str, list[float | None]] = {}
    for j in jobs:
        done.setdefault(j["id"], []).append(j["completion_s"])
    out["job_completion_s"] = {k: (None if None in v else max(v)) for k, v in done.items()}
    out.update(settings)
    out.update({
        "runs": len(runs), "by_run": by_run,
        "broadcast_mean_by_run_s": [r["broadcast_mean_s"] for r in runs],
        "link_bytes": statistics.fmean(r["link_bytes"] for r in runs),
        "meter_drops": sum(r["meter_drops"] for r in runs),
        "meter_drops_by_kind": {k: sum(r.get("meter_drops_by_kind", {}).get(k, 0) for r in runs)
                                for k in ("multicast", "unicast", "feedback")},
        "emulation_s": sum(r["emulation_s"] for r in runs), "lock_wait_s": sum(r["lock_wait_s"] for r in runs),
        "uptime_before": runs[0]["uptime_before"], "uptime_after": runs[-1]["uptime_after"],
    })
    return out


def goals(results: dict[str, dict], full: bool) -> dict[str, Any]:
    """The issue's goals, measured: not tuned, only stated."""
    m = {p: r["broadcast_mean_s"] for p, r in results.items() if r["all_verified"]}
    out: dict[str, Any] = {}
    lp = m.get("lp-rounding")
    if lp is None:
        return {"note": "lp-rounding did not complete with every digest verified: no goal can be judged"}
    if not full:
        others = {p: m[p] for p in ("spt", "unicast", "tcp-parallel", "tcp-chain") if p in m}
        if others:
            best = min(others, key=others.get)
            ratio = others[best] / lp
            out["lp_vs_best_other"] = {"best": best, "best_mean_s": others[best], "lp_mean_s": lp,
                                       "ratio": ratio, "goal": ">= 1.5", "met": ratio >= 1.5}
        if "greedy" in m:
            out["lp_vs_greedy"] = {"greedy_mean_s": m["greedy"], "lp_mean_s": lp, "goal": "lp <= greedy",
                                   "met": lp <= m["greedy"]}
    elif "tcp-chain" in m:
        rel = lp / m["tcp-chain"] - 1
        # within 5 % of the chain's, or faster: a broadcast quicker than the chain's is no miss
        out["lp_vs_tcp_chain"] = {"chain_mean_s": m["tcp-chain"], "lp_mean_s": lp, "relative": rel,
                                  "goal": "at most 5 % above", "met": rel <= 0.05}
    return out


def _f(v: float | None, unit: str = " s") -> str:
    return "—" if v is None else f"{v:.2f}{unit}"


def phase_summary(job: dict[str, Any]) -> str:
    """`--phase-rates`: the rates a job's PS was set to over its broadcasts (Mbit/s, the
    lowest and highest) and the announcements that failed; "" for a job without phases."""
    phases = [it["detail"]["phase"] for it in job["iterations"] if (it.get("detail") or {}).get("phase")]
    if not phases:
        return ""
    rates = [bps for ph in phases for _, bps in ph["rates"]]
    span = f"{min(rates) / 1e6:.2f}..{max(rates) / 1e6:.2f} Mbit/s" if rates else "never answered"
    return f"; phase rates {span}, {sum(ph['failed'] for ph in phases)} failed announcements"


def markdown(report: dict[str, Any]) -> str:
    w = report["workload"]
    fab = report["fabric"]
    started = "together" if not w.get("stagger_s") else f"over {w['stagger_s']:g} s"
    lines = [
        f"# Training iterations ({'full bisection' if report['full_bisection'] else 'oversubscribed'} k=4 fat-tree)",
        "",
        (f"{w['jobs']} jobs x {w['iterations']} iterations, {w.get('runs', 1)} run(s) per policy; model {w['model_bytes']:,} bytes to 4 workers each; "
         f"compute {w['compute_s']:g} s; gradient {w['grad_bytes']:,} bytes per worker; jobs started "
         f"{started}. Links: hosts "
         f"{fab['host_mbit']:g}, edge-agg {fab['edge_agg_mbit']:g}, agg-core {fab['agg_core_mbit']:g} Mbit/s; "
         f"groups {fab['groups']} (edge, agg), {fab['core_groups']} (core). Phase-aware rates: "
         f"{'on' if report.get('phase_rates') else 'off'}. Load before/after: "
         f"{report['uptime_before']} / {report['uptime_after']}."),
        "",
        ("| policy | broadcast mean | each run's broadcast mean | broadcast max | iteration mean | iteration p99 | "
         "upload mean | slowest job | link bytes per run | all verified |"),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p, r in report["policies"].items():
        done = [v for v in r["job_completion_s"].values() if v is not None]
        slowest = max(done) if len(done) == len(r["job_completion_s"]) else None
        each = ", ".join(_f(v) for v in r["broadcast_mean_by_run_s"])
        lines.append(f"| {p} | {_f(r['broadcast_mean_s'])} | {each} | {_f(r['broadcast_max_s'])} | {_f(r['iteration_mean_s'])} | "
                     f"{_f(r['iteration_p99_s'])} | {_f(r['upload_mean_s'])} | {_f(slowest)} | "
                     f"{r['link_bytes'] / 1e6:.1f} MB | {r['all_verified']} |")
    lines += ["", "Per job (NORM policies: the plan's mode and rate; broadcast time of each iteration):", ""]
    for p, r in report["policies"].items():
        for j in r["jobs"]:
            alone = f" (alone: {j['alone_bps'] / 1e6:.2f})" if j.get("alone_bps") else ""
            plan = f"{j['mode']} {j['planned_bps'] / 1e6:.2f} Mbit/s{alone}, " if j["mode"] else ""
            its = ", ".join(_f(it["broadcast_s"]) for it in j["iterations"])
            run = f" run {j['run']}" if "run" in j else ""
            lines.append(f"- {p}{run} {j['id']} ({j['ps']} -> {', '.join(j['workers'])}): {plan}broadcasts {its}; "
                         f"done at {_f(j['completion_s'])}" + phase_summary(j)
                         + (f"; error: {j['error']}" if j["error"] else ""))
    lines += ["", "Goals (every run pooled): " + json.dumps(report["goals"])]
    if len(report.get("goals_by_run", [])) > 1:
        lines += ["", "Goals, run by run: " + json.dumps(report["goals_by_run"])]
    return "\n".join(lines) + "\n"


def _core_groups(text: str) -> int | tuple[int, ...]:
    """`--core-groups`: one budget (every core switch), or 4 (core-0 to core-3), each 0..64."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or N,N,N,N, got {text!r}") from None
    if len(values) not in (1, 4) or not all(0 <= v <= 64 for v in values):
        raise argparse.ArgumentTypeError(f"expected one budget or one per core switch (4), each 0..64, got {text!r}")
    return values[0] if len(values) == 1 else values


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=6, help="jobs training at once, 1..8 (default 6)")
    p.add_argument("--iterations", type=int, default=3, help="iterations per job (default 3)")
    p.add_argument("--mb", type=float, default=2.0, help="model size, MB (default 2)")
    p.add_argument("--grad-fraction", type=float, default=0.25,
                   help="gradient size / model size (default 0.25; 0: no upload, the broadcasts alone)")
    p.add_argument("--compute", type=float, default=1.0, help="compute time per iteration, s (default 1)")
    p.add_argument("--policies", default=",".join(ei.POLICIES), help=f"comma-separated, of {', '.join(ei.POLICIES)}")
    p.add_argument("--full-bisection", action="store_true", help="every link at the host links' rate")
    p.add_argument("--timeout", type=float, default=180.0, help="per transfer, s (default 180)")
    p.add_argument("--quick", action="store_true", help="smoke: 2 jobs, 1 iteration, 0.25 MB, lp-rounding and tcp-chain")
    p.add_argument("--runs", type=int, default=1, help="repeat every policy this many times, interleaved (default 1)")
    p.add_argument("--priority-dscp", type=int, default=None,
                   help="experiment: NORM's peers mark their packets with this DSCP (0..63) and every emulated "
                        "link queues it ahead of the rest (strict priority); no edge resets hosts' DSCP")
    p.add_argument("--planned-class", type=int, default=None, metavar="DSCP",
                   help="the controller marks the planned traffic with this DSCP (0..63, southbound.planned_dscp) and "
                        "resets every other packet's at its edge; the hosts mark nothing; every emulated link queues "
                        "that DSCP ahead of the rest, as with --priority-dscp")
    p.add_argument("--queue-ms", type=float, default=None,
                   help="every emulated link's queue holds this many ms of its rate (at least 4 frames) instead of "
                        "the veths' default 1000 packets (4.8 s at 2.5 Mbit/s)")
    p.add_argument("--no-rendezvous", dest="rendezvous", action="store_false",
                   help="skip the workers' ping of their PS before the first iteration (to see its effect)")
    p.add_argument("--sessions-per-iteration", dest="keep_sessions", action="store_false",
                   help="start new NORM processes (sessions) for every broadcast instead of keeping each job's open "
                        "across its iterations (to see the difference)")
    p.add_argument("--phase-rates", action="store_true",
                   help="NORM policies: each broadcast is announced to the controller as its job's broadcasting "
                        "phase (PUT /jobs/{id}/broadcasting, renewed every 0.5 s), the PS going at the rate the "
                        "controller answers (raised into capacity idle jobs leave); needs the kept sessions")
    p.add_argument("--core-groups", type=_core_groups, default=0, metavar="N[,N,N,N]",
                   help="group budget of every core switch, or of each (core-0 first: mixed budgets); "
                        "default 0: a core switch cannot replicate")
    p.add_argument("--stagger", type=float, default=0.0, metavar="S",
                   help="job i of n starts i*S/n seconds after the first (default 0: all at once)")
    p.add_argument("--lock", help="flock this file around each policy's emulation (e.g. /tmp/emu.lock)")
    p.add_argument("--out", default=str(REPO / "build" / "iteration-bench"), help="report path without .json/.md")
    args = p.parse_args(argv)
    if args.quick:
        args.jobs, args.iterations, args.mb, args.policies = 2, 1, 0.25, "lp-rounding,tcp-chain"
    args.policies = [x.strip() for x in args.policies.split(",") if x.strip()]
    bad = [x for x in args.policies if x not in ei.POLICIES]
    if bad or not args.policies:
        p.error(f"--policies: unknown {bad or 'none given'}; choose from {', '.join(ei.POLICIES)}")
    if not 1 <= args.jobs <= 8:
        p.error(f"--jobs must be 1..8, got {args.jobs}")
    if args.iterations < 1:
        p.error(f"--iterations must be >= 1, got {args.iterations}")
    if not args.mb > 0 or not 0 <= args.grad_fraction <= 1:
        p.error("--mb must be > 0 and --grad-fraction in [0, 1] (0: no upload)")
    if not 1 <= args.runs <= 20:
        p.error(f"--runs must be 1..20, got {args.runs}")
    for name, dscp in (("--priority-dscp", args.priority_dscp), ("--planned-class", args.planned_class)):
        if dscp is not None and not 0 <= dscp <= 63:
            p.error(f"{name} must be 0..63, got {dscp}")
    if args.priority_dscp is not None and args.planned_class is not None:
        p.error("--planned-class and --priority-dscp: one or the other (who marks: the controller, or the hosts)")
    if args.phase_rates and not args.keep_sessions:
        p.error("--phase-rates needs the kept sessions (not --sessions-per-iteration): the PS's rate changes mid-send")
    if args.queue_ms is not None and not 0 < args.queue_ms <= 10_000:
        p.error(f"--queue-ms must be in (0, 10000], got {args.queue_ms}")
    if args.compute < 0:
        p.error(f"--compute must be >= 0, got {args.compute}")
    if not 0 <= args.stagger <= 600:
        p.error(f"--stagger must be within 0..600 s, got {args.stagger}")
    return args


def data_paths(out: Path) -> tuple[Path, Path]:
    """The model's and the gradient's files of the run whose report is `out` (without
    .json/.md): beside the report, so that two benchmarks at once (another --out) never
    rewrite each other's model while it is sent (seen with one shared file: every worker
    of every job of the running policy failed the digest check)."""
    return out.with_name(out.name + "-model.bin"), out.with_name(out.name + "-grad.bin")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    reason = emulation_unavailable()
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    fabric = (ei.full_bisection(core_groups=args.core_groups) if args.full_bisection
              else ei.FabricSpec(core_groups=args.core_groups))
    jobs = ei.layout(args.jobs)
    (REPO / "build").mkdir(exist_ok=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    model, grad = data_paths(out)
    model.write_bytes(os.urandom(int(args.mb * 1e6)))
    grad.write_bytes(os.urandom(int(args.mb * 1e6 * args.grad_fraction)))  # empty: no upload
    report: dict[str, Any] = {
        "full_bisection": args.full_bisection, "quick": args.quick, "queue_ms": args.queue_ms,
        "phase_rates": args.phase_rates,
        "fabric": {"host_mbit": fabric.host_mbit, "edge_agg_mbit": fabric.edge_agg_mbit,
                   "agg_core_mbit": fabric.agg_core_mbit, "groups": fabric.groups, "core_groups": fabric.core_groups},
        "workload": {"jobs": args.jobs, "iterations": args.iterations, "runs": args.runs, "stagger_s": args.stagger,
                     "model_bytes": model.stat().st_size,
                     "grad_bytes": grad.stat().st_size, "compute_s": args.compute,
                     "placement": [{"id": j.id, "ps": j.ps, "workers": list(j.workers)} for j in jobs]},
        "uptime_before": uptime(), "policies": {},
    }
    t0 = time.monotonic()
    by_policy: dict[str, list[dict[str, Any]]] = {p: [] for p in args.policies}
    report["runs"] = []
    total = args.runs * len(args.policies)
    for n in range(1, total + 1):
        run, policy = divmod(n - 1, len(args.policies))
        policy = args.policies[policy]  # runs interleaved: every policy once, then again, so load drifts hit all
        r = run_policy(policy, fabric, jobs, model, grad, args)
        by_policy[policy].append(r)
        if policy == args.policies[0]:
            report["runs"].append({})
        report["runs"][-1][policy] = {k: r[k] for k in ("all_verified", "broadcast_mean_s", "iteration_mean_s",
                                                          "upload_mean_s", "link_bytes", "uptime_before")}
        print(json.dumps({"run": run + 1, **{k: r[k] for k in ("policy", "all_verified", "broadcast_mean_s",
                                                                 "iteration_mean_s", "upload_mean_s", "link_bytes",
                                                                 "emulation_s", "errors")}}), flush=True)
        # after every policy, so that a run cut short keeps what it measured
        report["policies"] = {p: pool(rs, args.iterations) for p, rs in by_policy.items() if rs}
        report["complete"] = n == total
        report["uptime_after"] = uptime()
        report["total_s"] = time.monotonic() - t0
        report["goals"] = goals(report["policies"], args.full_bisection)
        report["goals_by_run"] = [goals(rr, args.full_bisection) for rr in report["runs"]]
        out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    md = markdown(report)
    out.with_suffix(".md").write_text(md)
    print(md)
    print(f"report: {out.with_suffix('.json')}, {out.with_suffix('.md')} ({report['total_s']:.0f} s)")
    return 0 if all(r["all_verified"] for r in report["policies"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
