"""`python -m controller bench-load`: many tenants registering and deleting jobs at
once against the controller process, driven by locust (loadtest/locustfile.py).

It starts `python -m controller run` on loopback on a declared fat-tree (no
switch connected: the controller plans and computes every switch's desired
state, nothing is sent) with `--tenants` tenants, each with its own token, and
runs locust headless for `--duration` seconds with one user per tenant. Every
user registers a job of one PS and `--workers` workers and deletes it again,
once every `--pace` seconds. It prints the requests, the failures and the
latency p50/p99 per endpoint, and writes them to build/load-report.json. It
exits 1 if any request failed (an answer other than 201/202 to a POST, or 204
to a DELETE) or locust itself failed.

It is a command, not a timed test; `--quick` runs a short, small version for
the test suite.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from controller.algorithm.topologies import fat_tree
from controller.config.tenants import token_sha256
from controller.arguments import EXIT_FAILED, EXIT_OK, note, positive_int, positive_number
from controller.offline.launch import launch
from controller.offline.report import load_average, project_root, with_section, write_atomically

LOCUSTFILE = Path("loadtest") / "locustfile.py"
LOAD_TITLE = "8. Many tenants at once"


@dataclass(frozen=True)
class EndpointLoad:
    """One endpoint's numbers over the run (locust's statistics)."""

    name: str
    requests: int
    failures: int
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True)
class LoadReport:
    k: int
    tenants: int
    duration_s: float
    pace_s: float
    workers: int
    endpoints: tuple[EndpointLoad, ...]
    locust_exit: int

    @property
    def failures(self) -> int:
        return sum(e.failures for e in self.endpoints)


def tenant_tokens(count: int) -> dict[str, str]:
    """`count` tenants named t0, t1, ... each with a fresh random token."""
    return {f"t{i}": secrets.token_urlsafe(24) for i in range(count)}


def config_text(k: int, store: Path, tokens: dict[str, str], max_jobs: int) -> str:
    """The controller's config for the run: loopback, the tenants (hashes of their
    tokens only), incremental planning, a k-ary fat-tree."""
    tenants = ", ".join(f"{name}: {{token_sha256: {token_sha256(token)}, max_jobs: {max_jobs}}}"
                        for name, token in tokens.items())
    return (
        f"api: {{host: 127.0.0.1, port: 0, tenants: {{{tenants}}}}}\n"
        f"store: {{path: {store}}}\n"
        "planner: {incremental: true, debounce_s: 0.05, max_delay_s: 0.2, wait_s: 30, link_hold_down_s: 0}\n"
        f"topology: {{fattree: {{k: {k}}}, group_capacity: 16}}\n"
    )


def _read_stats(path: Path) -> tuple[EndpointLoad, ...]:
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["Name"] == "Aggregated":
                continue
            out.append(EndpointLoad(row["Name"], int(row["Request Count"]), int(row["Failure Count"]),
                                    float(row["50%"]), float(row["99%"]), float(row["Max Response Time"])))
    return tuple(out)


def measure(k: int, tenants: int, duration_s: float, pace_s: float, workers: int, workdir: Path,
            presented: list[str] | None = None) -> LoadReport:
    """One run (see the module docstring). `presented`: the tokens the users send
    (default the tenants' own; others are refused, 401, and counted as failures)."""
    tokens = tenant_tokens(tenants)
    config = workdir / "controller.yaml"
    config.write_text(config_text(k, workdir / "jobs.sqlite", tokens, max_jobs=4))
    topo = fat_tree(k)
    hosts = sorted(topo.name(h) for h in topo.hosts)
    targets = workdir / "targets.json"
    targets.write_text(json.dumps({"tokens": presented or list(tokens.values()), "hosts": hosts, "workers": workers}))
    targets.chmod(0o600)
    launched = launch(config, workdir / "controller.log")
    try:
        env = {**os.environ, "LOAD_TARGETS": str(targets), "LOAD_PACE_S": str(pace_s)}
        prefix = workdir / "locust"
        cmd = [sys.executable, "-m", "locust", "-f", str(project_root() / LOCUSTFILE), "--headless",
               "-u", str(tenants), "-r", str(tenants), "-t", f"{int(duration_s)}s", "--host", launched.url,
               "--csv", str(prefix), "--only-summary", "--stop-timeout", "30", "--loglevel", "WARNING"]
        done = subprocess.run(cmd, env=env, cwd=workdir, capture_output=True, text=True,
                              timeout=duration_s + 300)
        stats = prefix.with_name("locust_stats.csv")
        if not stats.exists():
            raise RuntimeError(f"locust wrote no statistics (exit {done.returncode}): {done.stderr[-2000:]}")
        return LoadReport(k, tenants, duration_s, pace_s, workers, _read_stats(stats), done.returncode)
    finally:
        launched.stop()


def load_section(report: LoadReport, command: str, date: str, load_before: str, load_after: str) -> str:
    """The markdown section `LOAD_TITLE` of docs/performance.md for `report`."""
    rows = "\n".join(f"| {e.name} | {e.requests} | {e.failures} | {e.p50_ms:.0f} | {e.p99_ms:.0f} | {e.max_ms:.0f} |"
                     for e in report.endpoints)
    return f"""## {LOAD_TITLE}

<!-- Written by `{command}` (controller/offline/load.py); `python -m controller bench` keeps it as it is. -->

{report.tenants} tenants, each with its own token (`api.tenants`, quota 4 jobs), register a job of one PS and
{report.workers} workers on a k={report.k} fat-tree and delete it again, one cycle every {report.pace_s:g} s each, for
{report.duration_s:.0f} s: locust, headless, one user per tenant, against `python -m controller run` on loopback
with no switch connected (plans and desired states are computed, nothing is sent), `planner.incremental: true`
and the default `api.limits` (60 writes a minute per tenant: a cycle every {report.pace_s:g} s is
{120 / report.pace_s:.0f}). A `POST /jobs` is answered once a plan includes the job; any answer but 201/202 to a
POST or 204 to a DELETE is a failure. Run on {date}; load average (1, 5, 15 min) {load_before} before and
{load_after} after (locust runs on the same 2 CPUs).

| endpoint | requests | failures | p50 ms | p99 ms | max ms |
|---|---:|---:|---:|---:|---:|
{rows}

{"No request failed." if report.failures == 0 else f"**{report.failures} requests failed.**"}
"""


def cmd_load(args: argparse.Namespace) -> int:
    if args.quick:
        k, tenants, duration, pace = 4, 8, 8.0, 1.0
    else:
        k, tenants, duration, pace = args.k, args.tenants, args.duration, args.pace
    note(f"k={k} fat-tree, {tenants} tenants for {duration:.0f} s, one register+delete each every {pace:g} s ...")
    before = load_average()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with tempfile.TemporaryDirectory() as tmp:
        report = measure(k, tenants, duration, pace, args.workers, Path(tmp))
    after = load_average()
    print(f"k={k} fat-tree, {tenants} tenants, {duration:.0f} s, one job of {args.workers} workers registered and "
          f"deleted per tenant every {pace:g} s (`{' '.join(sys.argv[1:])}`)\n")
    print("| endpoint | requests | failures | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for e in report.endpoints:
        print(f"| {e.name} | {e.requests} | {e.failures} | {e.p50_ms:.0f} | {e.p99_ms:.0f} | {e.max_ms:.0f} |")
    out = project_root() / "build" / "load-report.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(asdict(report), indent=2) + "\n")
    note(f"wrote {out}")
    if args.into is not None:
        page = Path(args.into)
        command = (f"python -m controller bench-load --k {k} --tenants {tenants} --duration {duration:g} "
                   f"--pace {pace:g} --workers {args.workers} --into {args.into}")
        write_atomically(page, with_section(page.read_text(encoding="utf-8"), LOAD_TITLE,
                                            load_section(report, command, date, before, after)))
        note(f"wrote section {LOAD_TITLE!r} of {page}")
    if report.failures or report.locust_exit != 0 or not report.endpoints:
        note(f"error: {report.failures} failed requests (locust exit {report.locust_exit})")
        return EXIT_FAILED
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("bench-load", help="many tenants registering and deleting jobs at once (locust)")
    p.add_argument("--k", type=positive_int, default=8, help="fat-tree arity (default 8)")
    p.add_argument("--tenants", type=positive_int, default=50, help="tenants, one locust user each (default 50)")
    p.add_argument("--duration", type=positive_number, default=60.0, help="seconds of load (default 60)")
    p.add_argument("--pace", type=positive_number, default=3.0,
                   help="seconds between one tenant's register+delete cycles (default 3: 40 writes a minute, under the default api.limits.rate of 60)")
    p.add_argument("--workers", type=positive_int, default=3, help="workers per job (default 3)")
    p.add_argument("--quick", action="store_true", help="k=4, 8 tenants, 8 s (for the test suite)")
    p.add_argument("--into", metavar="PAGE", help=f"also write the section {LOAD_TITLE!r} of this markdown page "
                                                   "(docs/performance.md), replacing it if it is there")
    p.set_defaults(run=cmd_load)
