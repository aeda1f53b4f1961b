"""Measure the model broadcast (docs/emulation.md, "Model broadcast over NORM"):
an object of `--mb` MB (default 8) from a PS to 7 workers on the emulated k=4
fat-tree (Open vSwitch, links of `--bw` Mbit/s, unlimited group budgets so that
every job gets a multicast tree), three ways:

  (a) NORM over the planned tree (controller.client.broadcast, at the planned rate)
  (b) TCP from the PS to each worker, all 7 connections at once
  (c) a pipelined TCP chain PS -> w1 -> ... -> w7 (ring-style broadcast)

first for one job, then for 4 such jobs at once. For each: completion time (from
the sender's start to the last worker holding every byte, CLOCK_MONOTONIC across
the hosts), whether every worker's SHA-256 matched, and the bytes carried by all
links (every switch port's rx bytes plus host-facing ports' tx bytes, from
`ovs-ofctl dump-ports` before and after). For NORM also the planned rate and the
time the object takes at that rate.

Run as root, one emulation at a time:
    flock /tmp/emu.lock .venv/bin/python mininet/broadcast_bench.py
Writes build/broadcast-bench.json and prints the tables.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emu_broadcast as eb  # noqa: E402
from emu_session import REPO, Emulation  # noqa: E402
from ovs_daemon import unavailable  # noqa: E402

ONE = ("one", "host-0", ["host-1", "host-2", "host-5", "host-6", "host-9", "host-12", "host-15"])
# 4 PSs, one per pod; each job's 7 workers are 7 of the 8 odd hosts (2 per pod)
FOUR = [(f"job{k}", f"host-{4 * k}", [f"host-{(4 * k + 1 + 2 * i) % 16}" for i in range(7)]) for k in range(4)]


def quiet(emu, seconds: float = 1.0) -> int:
    time.sleep(seconds)
    return eb.link_bytes(emu)


def run_norm(emu, jobs, data: Path, options: dict | None = None, objects: int = 1) -> dict:
    before = quiet(emu)
    meters = eb.meter_drops(emu)
    receivers = {jid: eb.start_norm_receivers(emu, emu.jobs[jid].answer, emu.jobs[jid].workers, timeout=600,
                                              objects=objects) for jid, _, _ in jobs}
    senders = {jid: eb.start_norm_sender(emu, emu.jobs[jid].answer, data, timeout=600, options=options,
                                         objects=objects) for jid, _, _ in jobs}
    results = {jid: eb.finish_norm(senders[jid], receivers[jid], 700) for jid, _, _ in jobs}
    after = quiet(emu)
    dropped = {sw: n - meters.get(sw, 0) for sw, n in eb.meter_drops(emu).items() if n - meters.get(sw, 0)}
    size = data.stat().st_size
    sha = hashlib.sha256(data.read_bytes()).hexdigest()
    out = {}
    for jid, r in results.items():
        rate = emu.jobs[jid].answer["rate"]
        intact = all(len(g.get("results", [])) == objects and all(x.get("ok") and x["sha256"] == sha
                                                                   for x in g["results"])
                     for g in r["workers"].values())
        # one object: from the sender's start to the last worker holding it; several (one session):
        # each object from its send() to the last worker holding it
        first = r["objects_s"][0] if r["objects_s"] else r["completion_s"]
        out[jid] = {"completion_s": first, "objects_s": r["objects_s"], "intact": intact, "planned_bps": rate,
                    "planned_s": size * 8 / rate, "sender_error": r["sender"].get("message"),
                    "mode": emu.jobs[jid].answer["mode"]}
    return {"jobs": out, "link_bytes": after - before, "meter_drops": dropped, "options": options or {},
            "completion_s": max((j["completion_s"] or float("inf")) for j in out.values())}


def run_tcp(emu, jobs, data: Path, kind: str) -> dict:
    before = quiet(emu)
    start = eb.tcp_parallel_start if kind == "parallel" else eb.tcp_chain_start
    started = {jid: start(emu, ps, workers, data, port=15000 + k) for k, (jid, ps, workers) in enumerate(jobs)}
    results = {jid: eb.tcp_finish(s) for jid, s in started.items()}
    after = quiet(emu)
    out = {jid: {"completion_s": r["completion_s"], "intact": r["intact"]} for jid, r in results.items()}
    return {"jobs": out, "link_bytes": after - before,
            "completion_s": max((j["completion_s"] or float("inf")) for j in out.values())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=8.0)
    p.add_argument("--bw", type=float, default=10.0, help="link bandwidth, Mbit/s (default 10, as the demo)")
    p.add_argument("--demand", type=float, default=1e9, help="each job's demand, bit/s (default: more than a link)")
    p.add_argument("--out", default=str(REPO / "build" / "broadcast-bench.json"))
    p.add_argument("--methods", default="norm,tcp_parallel,tcp_chain",
                   help="comma-separated subset of norm, tcp_parallel, tcp_chain (default: all three)")
    p.add_argument("--cases", default="one,four", help="comma-separated subset of one, four (default: both)")
    p.add_argument("--segment", type=int, help="NORM segment (bytes; default: the Sender's, the most the MTU fits)")
    p.add_argument("--rate-share", type=float, help="NORM segments at this share of the (payload) plan (default: the Sender's)")
    p.add_argument("--grtt", type=float, help="NORM's first GRTT estimate, s (default: the Sender's)")
    p.add_argument("--backoff", type=float, help="NORM's NACK backoff factor (default: the Sender's)")
    p.add_argument("--objects", type=int, default=1,
                   help="NORM only: objects per run, one after the other on one session (default 1)")
    p.add_argument("--repeat", type=int, default=1, help="run each method this many times per case (default 1)")
    args = p.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    cases = [c for c in args.cases.split(",") if c]
    if not methods or set(methods) - {"norm", "tcp_parallel", "tcp_chain"}:
        p.error(f"--methods: choose from norm, tcp_parallel, tcp_chain, not {args.methods!r}")
    if not cases or set(cases) - {"one", "four"}:
        p.error(f"--cases: choose from one, four, not {args.cases!r}")
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.objects < 1:
        p.error("--objects must be at least 1")
    options = {k: v for k, v in (("segment", args.segment), ("rate_share", args.rate_share), ("grtt", args.grtt),
                                          ("backoff", args.backoff))
               if v is not None}
    reason = unavailable()
    if reason:
        print(f"error: {reason}")
        return 2
    size = int(args.mb * 1e6)
    (REPO / "build").mkdir(exist_ok=True)
    data = REPO / "build" / "broadcast-bench.bin"
    data.write_bytes(os.urandom(size))
    report: dict = {"mb": args.mb, "bytes": size, "bw_mbit": args.bw, "objects": args.objects,
                    "load_before": os.getloadavg()}
    t0 = time.monotonic()
    with Emulation("norm-bench", REPO / "build" / "emu-norm-bench", bw_mbit=args.bw) as emu:
        for label, jobs in (("one", [ONE]), ("four", FOUR)):
            if label not in cases:
                continue
            for jid, ps, workers in jobs:
                emu.add_job(jid, ps, workers, args.demand)
            emu.converge(timeout=60)
            report[label] = {
                "plan": {jid: {"mode": emu.jobs[jid].answer["mode"], "rate": emu.jobs[jid].answer["rate"]}
                         for jid, _, _ in jobs},
            }
            for method in methods:
                runs = [run_norm(emu, jobs, data, options, args.objects) if method == "norm" else
                        run_tcp(emu, jobs, data, method.removeprefix("tcp_")) for _ in range(args.repeat)]
                # the first run's numbers, and every run's when there are several
                report[label][method] = dict(runs[0], runs=runs) if args.repeat > 1 else runs[0]
            print(json.dumps({label: {k: (v if k == "plan" else {"completion_s": v["completion_s"],
                                                                  "link_bytes": v["link_bytes"]})
                                      for k, v in report[label].items()}}), flush=True)
            for jid, _, _ in jobs:
                emu.delete_job(jid)
    report["total_s"] = time.monotonic() - t0
    report["load_after"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for label in cases:
        r = report[label]
        print(f"\n{label} job(s), {args.mb:g} MB to 7 workers each:")
        print("| method | completion | link bytes | every byte intact |")
        for k in methods:
            for m in r[k].get("runs", [r[k]]):
                ok = all(j["intact"] for j in m["jobs"].values())
                print(f"| {k} | {m['completion_s']:.2f} s | {m['link_bytes'] / 1e6:.1f} MB | {ok} |")
        for m in r["norm"].get("runs", [r["norm"]]) if "norm" in r else []:
            for jid, j in m["jobs"].items():
                took = "did not complete" if j["completion_s"] is None else \
                    f"took {j['completion_s']:.3f} s ({j['completion_s'] / j['planned_s']:.3f}x)"
                print(f"  NORM {jid}: {j['mode']}, planned {j['planned_bps'] / 1e6:.2f} Mbit/s -> "
                      f"{j['planned_s']:.3f} s at that rate; {took}")
                if len(j["objects_s"]) > 1:
                    print("    each object on the open session: " + ", ".join(
                        "-" if t is None else f"{t:.3f} s ({t / j['planned_s']:.3f}x)" for t in j["objects_s"]))
            print(f"  meter drops: {m['meter_drops'] or 'none'}")
    print(f"\nreport: {args.out} ({report['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
