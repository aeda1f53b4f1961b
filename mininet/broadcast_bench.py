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


def run_norm(emu, jobs, data: Path) -> dict:
    before = quiet(emu)
    receivers = {jid: eb.start_norm_receivers(emu, emu.jobs[jid].answer, emu.jobs[jid].workers, timeout=600)
                 for jid, _, _ in jobs}
    senders = {jid: eb.start_norm_sender(emu, emu.jobs[jid].answer, data, timeout=600) for jid, _, _ in jobs}
    results = {jid: eb.finish_norm(senders[jid], receivers[jid], 700) for jid, _, _ in jobs}
    after = quiet(emu)
    size = data.stat().st_size
    sha = hashlib.sha256(data.read_bytes()).hexdigest()
    out = {}
    for jid, r in results.items():
        rate = emu.jobs[jid].answer["rate"]
        intact = all(g.get("results") and g["results"][0].get("ok") and g["results"][0]["sha256"] == sha
                     for g in r["workers"].values())
        out[jid] = {"completion_s": r["completion_s"], "intact": intact, "planned_bps": rate,
                    "planned_s": size * 8 / rate, "sender_error": r["sender"].get("message"),
                    "mode": emu.jobs[jid].answer["mode"]}
    return {"jobs": out, "link_bytes": after - before,
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
    args = p.parse_args()
    reason = unavailable()
    if reason:
        print(f"error: {reason}")
        return 2
    size = int(args.mb * 1e6)
    (REPO / "build").mkdir(exist_ok=True)
    data = REPO / "build" / "broadcast-bench.bin"
    data.write_bytes(os.urandom(size))
    report: dict = {"mb": args.mb, "bytes": size, "bw_mbit": args.bw}
    t0 = time.monotonic()
    with Emulation("norm-bench", REPO / "build" / "emu-norm-bench", bw_mbit=args.bw) as emu:
        for label, jobs in (("one", [ONE]), ("four", FOUR)):
            for jid, ps, workers in jobs:
                emu.add_job(jid, ps, workers, args.demand)
            emu.converge(timeout=60)
            report[label] = {
                "plan": {jid: {"mode": emu.jobs[jid].answer["mode"], "rate": emu.jobs[jid].answer["rate"]}
                         for jid, _, _ in jobs},
                "norm": run_norm(emu, jobs, data),
                "tcp_parallel": run_tcp(emu, jobs, data, "parallel"),
                "tcp_chain": run_tcp(emu, jobs, data, "chain"),
            }
            print(json.dumps({label: {k: (v if k == "plan" else {"completion_s": v["completion_s"],
                                                                  "link_bytes": v["link_bytes"]})
                                      for k, v in report[label].items()}}), flush=True)
            for jid, _, _ in jobs:
                emu.delete_job(jid)
    report["total_s"] = time.monotonic() - t0
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for label in ("one", "four"):
        r = report[label]
        print(f"\n{label} job(s), {args.mb:g} MB to 7 workers each:")
        print("| method | completion | link bytes | every byte intact |")
        for k in ("norm", "tcp_parallel", "tcp_chain"):
            m = r[k]
            ok = all(j["intact"] for j in m["jobs"].values())
            print(f"| {k} | {m['completion_s']:.2f} s | {m['link_bytes'] / 1e6:.1f} MB | {ok} |")
        for jid, j in r["norm"]["jobs"].items():
            took = "did not complete" if j["completion_s"] is None else \
                f"took {j['completion_s']:.2f} s ({j['completion_s'] / j['planned_s']:.2f}x)"
            print(f"  NORM {jid}: {j['mode']}, planned {j['planned_bps'] / 1e6:.2f} Mbit/s -> {j['planned_s']:.2f} s "
                  f"at that rate; {took}")
    print(f"\nreport: {args.out} ({report['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
