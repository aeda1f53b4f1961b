"""`python -m controller bench-registration`: job registration latency against the controller process.

It is a command, not a timed test. It starts `python -m controller run` on a
generated fat-tree with no switch connected (the controller plans and computes
every switch's desired state; nothing is sent), with `--preload` jobs already in
its job store (planned in one full plan at start), and measures over REST:

1. sequential: one more job registered (`POST /jobs`, which answers once a plan
   includes it) and deleted again, `--repeat` times: latency p50/p99, and the
   jobs of the running ones whose structure each registration changed
   (`/healthz` `churn_jobs`);
2. concurrent: `--concurrent` registrations from `--clients` threads at once:
   latency p50/p99 and how many were answered 201 (planned);
3. the λ served after the sequence against a full plan of the same jobs
   (`planner.run` in this process).

By default the config's `planner` section is empty: every planner key has its
default (`planner.incremental: true`, the documented churn budget and
re-optimisation timing), as a user who sets nothing gets it. `--incremental` or
`--full` set `planner.incremental` to true or false (with a short debounce and
no re-optimisation during the run, as the measurements of issue 12 were made);
`--both` runs both. `--quick` runs tiny sizes (seconds, for the test suite).
`--no-southbound` runs the controller without a backend (`run --no-southbound`:
the core and the API; the OpenFlow backend refuses a fabric whose unicast routes
it cannot hold, such as k=48), `--no-compare` skips the full plan of step 3.
`--k48` is issue 25's data-centre case: k=48 (G=16), 5,000 jobs preloaded, 20
sequential registrations, with both. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from controller.algorithm.model import Instance
from controller.algorithm.topologies import fat_tree
from controller.algorithm.workload import WorkloadSpec, generate_jobs
from controller.arguments import EXIT_OK, note, positive_int
from controller.config.schema import PlannerConfig
from controller.offline.launch import launch
from controller.planner import run as plan_full
from controller.store.sqlite import JobStore


def _request(url: str, method: str, body: dict | None = None, timeout: float = 120) -> tuple[int, dict | None]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, None


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _planner_section(incremental: bool | None) -> str:
    """The config's planner section: empty (every default) for None."""
    if incremental is None:
        return "planner: {}\n"
    return (f"planner: {{incremental: {'true' if incremental else 'false'}, debounce_s: 0.05, max_delay_s: 0.2, "
            "wait_s: 300, reoptimise_after_s: 3600, link_hold_down_s: 0}\n")


def measure(k: int, groups: int, preload: int, repeat: int, concurrent: int, clients: int,
            incremental: bool | None, workdir: Path, seed: int = 1, southbound: bool = True,
            compare: bool = True) -> dict:
    """Run the three measurements (see the module docstring); returns the numbers.
    `incremental` None: the planner section is left to its defaults. Without
    `southbound` the controller runs with `--no-southbound`; without `compare` no
    full plan is made for the λ comparison (`lam_full` None)."""
    topo = fat_tree(k, group_capacity=groups)
    jobs = generate_jobs(topo, WorkloadSpec(preload + repeat + concurrent, 3, 11, seed=seed))
    store = workdir / "jobs.sqlite"
    with JobStore(store) as js:
        for job in jobs[:preload]:
            js.add(job)
    config = workdir / "controller.yaml"
    config.write_text(
        # the benchmark is the only client: no rate limit or cap of api.limits may shape what it measures
        "api: {host: 127.0.0.1, port: 0, limits: {rate: 100000/minute, max_in_flight: 4096, max_connections: 8192, "
        "max_jobs: 1000000}}\n"
        f"store: {{path: {store}}}\n"
        + _planner_section(incremental) +
        f"topology: {{fattree: {{k: {k}}}, group_capacity: {groups}}}\n"
    )
    launched = launch(config, workdir / "controller.log", timeout_s=1800.0, southbound=southbound)
    url, start_s = launched.url, launched.start_s
    try:
        seq, churn, written = [], [], []  # latency, jobs moved, switch entries the backends wrote
        for job in jobs[preload:preload + repeat]:
            body = {"id": job.id, "ps": job.ps, "workers": list(job.workers), "demand": job.demand}
            t = time.perf_counter()
            status, _ = _request(f"{url}/jobs", "POST", body)
            seq.append(time.perf_counter() - t)
            if status != 201:
                raise RuntimeError(f"POST /jobs answered {status}")
            health = _request(f"{url}/healthz", "GET")[1]
            churn.append(health["churn_jobs"])
            written.append(health["entries_written"])
            _request(f"{url}/jobs/{job.id}", "DELETE")
        burst = jobs[preload + repeat:]

        def post(job) -> tuple[float, int]:
            t = time.perf_counter()
            status, _ = _request(f"{url}/jobs", "POST",
                                 {"id": job.id, "ps": job.ps, "workers": list(job.workers), "demand": job.demand})
            return time.perf_counter() - t, status

        with ThreadPoolExecutor(clients) as pool:
            results = list(pool.map(post, burst))
        conc = [r[0] for r in results]
        planned = sum(1 for r in results if r[1] == 201)
        served = _request(f"{url}/plan", "GET")[1]
        held = jobs[:preload] + burst
        full = plan_full(Instance(topo, tuple(held)), "lp-rounding") if compare else None
        return {
            "start_s": start_s, "seq_p50": _percentile(seq, 0.5) if seq else None,
            "seq_p99": _percentile(seq, 0.99) if seq else None,
            "churn_mean": statistics.fmean(churn) if churn else 0.0, "churn_max": max(churn, default=0),
            "conc_p50": _percentile(conc, 0.5) if conc else None, "conc_p99": _percentile(conc, 0.99) if conc else None,
            "planned": planned, "concurrent": len(burst), "lam_served": served["lambda"],
            "lam_full": full.lam if full is not None else None,
            "seq_s": seq, "churn": churn, "entries_written": written,
        }
    finally:
        launched.stop()


def cmd_registration(args: argparse.Namespace) -> int:
    southbound, compare = not args.no_southbound, not args.no_compare
    if args.quick:
        k, groups, preload, repeat, concurrent, clients = 4, 2, 5, 3, 6, 3
    elif args.k48:
        k, groups, preload, repeat, concurrent, clients = 48, 16, 5000, 20, 0, 1
        southbound, compare = False, False
    else:
        k, groups, preload, repeat, concurrent, clients = args.k, args.groups, args.preload, args.repeat, args.concurrent, args.clients
    rows = []
    modes: list[bool | None] = [True, False] if args.both else [args.incremental]
    for incremental in modes:
        note(f"k={k}, {preload} jobs preloaded, planner.incremental={_mode(incremental)} ...")
        with tempfile.TemporaryDirectory() as tmp:
            m = measure(k, groups, preload, repeat, concurrent, clients, incremental, Path(tmp), southbound=southbound,
                        compare=compare)
        rows.append((incremental, m))
    print(f"k={k} fat-tree, G={groups}, {preload} jobs preloaded, {repeat} sequential registrations, "
          f"{concurrent} concurrent from {clients} clients"
          f"{'' if southbound else ', no backend (--no-southbound)'} (`{' '.join(sys.argv[1:])}`)\n")
    print("| planner.incremental | start s | one registration p50 / p99 s | jobs moved per registration (mean / max) "
          "| concurrent p50 / p99 s | planned | λ served / full plan |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for incremental, m in rows:
        conc = "–" if m["conc_p50"] is None else f"{m['conc_p50']:.3f} / {m['conc_p99']:.3f}"
        seq = "–" if m["seq_p50"] is None else f"{m['seq_p50']:.3f} / {m['seq_p99']:.3f}"
        print(f"| {_mode(incremental)} | {m['start_s']:.1f} | {seq} | "
              f"{m['churn_mean']:.1f} / {m['churn_max']} | {conc} | {m['planned']}/{m['concurrent']} | "
              f"{m['lam_served']:.4g} / {'–' if m['lam_full'] is None else format(m['lam_full'], '.4g')} |")
    return EXIT_OK


def _mode(incremental: bool | None) -> str:
    """The table's planner.incremental cell: the value set, or the default's."""
    if incremental is None:
        return f"default ({str(PlannerConfig().incremental).lower()})"
    return str(incremental).lower()


def register(sub) -> None:
    p = sub.add_parser("bench-registration", help="job registration latency against the controller process")
    p.add_argument("--k", type=positive_int, default=16, help="fat-tree arity (default 16)")
    p.add_argument("--groups", type=int, default=16, help="group capacity of every switch (default 16)")
    p.add_argument("--preload", type=int, default=200, help="jobs in the store at start (default 200)")
    p.add_argument("--repeat", type=int, default=20, help="sequential registrations measured (default 20)")
    p.add_argument("--concurrent", type=int, default=0, help="concurrent registrations after them (default 0)")
    p.add_argument("--clients", type=positive_int, default=32, help="threads for the concurrent ones (default 32)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--incremental", action="store_const", const=True, default=None,
                      help="planner.incremental: true, no re-optimisation during the run (default: every planner key "
                           "at its default)")
    mode.add_argument("--full", dest="incremental", action="store_const", const=False,
                      help="planner.incremental: false (a full plan per registration)")
    mode.add_argument("--both", action="store_true", help="measure with --incremental and with --full")
    p.add_argument("--no-southbound", action="store_true",
                   help="run the controller with --no-southbound: the core and the API, no backend (the OpenFlow "
                        "backend refuses a k=48 fabric: docs/controller.md)")
    p.add_argument("--no-compare", action="store_true", help="no full plan of the same jobs for the λ comparison")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny sizes (seconds, for the test suite)")
    size.add_argument("--k48", action="store_true",
                      help="issue 25's k=48 preset: 5,000 jobs preloaded (a cold plan of about a minute and 1-2 GiB), "
                           "20 sequential registrations, --no-southbound and --no-compare")
    p.set_defaults(run=cmd_registration)
