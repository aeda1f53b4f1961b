"""`make demo-ha`: three controller instances on one etcd store, the leader killed
mid-stream (docs/ha.md).

Starts etcd (a private data directory in the run's work directory), Open vSwitch
(userspace datapath) and three controller processes sharing the etcd store, each
with its own REST API and OpenFlow port; builds the Mininet k=4 fat-tree of
`make demo` (20 switches, 16 hosts, 10 Mbit/s links, one group per aggregation
and edge switch, none per core switch), every switch connected to all three
instances; registers the demo's six jobs at the leader, streams UDP from every PS
at its planned rate, SIGKILLs the leader in the middle of the stream, and prints:
the takeover (kill -> a new leader holding every switch), per job the planned
rate, goodput, loss and longest gap at the workers, the switches whose entries
changed, and a job registered at a follower (307 to the new leader). Writes
build/demo-ha-report.json. Needs root, Open vSwitch, Mininet, os-ken and etcd.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import demo  # noqa: E402 - the jobs, rates and budgets of `make demo`
import emu_etcd  # noqa: E402
import ovs_daemon  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instances", type=int, default=3)
    p.add_argument("--seconds", type=float, default=12.0, help="length of the stream")
    p.add_argument("--kill-at", type=float, default=4.0, help="seconds into the stream when the leader is killed")
    p.add_argument("--lease-ttl", type=int, default=2)
    args = p.parse_args(argv)
    reason = ovs_daemon.emulation_unavailable() or emu_etcd.unavailable()
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    from emu_session import Emulation, poll

    out = REPO / "build" / "demo-ha-report.json"
    report: dict = {"instances": args.instances, "lease_ttl_s": args.lease_ttl}
    with Emulation("demo-ha", REPO / "build" / "emu-demo-ha", bw_mbit=demo.BW_MBIT, group_capacity=demo.GROUPS,
                   switch_group_capacity=demo.core_budgets(), ha_instances=args.instances,
                   lease_ttl_s=args.lease_ttl) as emu:
        names = [emu.fabric.topology.name(v) for v in emu.fabric.topology.switches]
        leader = emu.ctl
        term = emu.cluster_status(leader)["term"]
        print(f"{args.instances} instances, etcd at {emu.etcd.url}; leader {leader.url} (term {term})")
        for c in emu.ctls:
            print(f"  {c.url}: {emu.cluster_status(c)['role']}")
        for jid, ps, workers, demand in demo.JOBS:
            emu.add_job(jid, ps, workers, demand)
        emu.converge(timeout=60)
        before = {n: emu.owned_entries(n) for n in names}
        print(f"{len(demo.JOBS)} jobs registered and installed; streaming {args.seconds:.0f} s, "
              f"the leader is killed after {args.kill_at:.0f} s")
        run = emu.start_traffic(args.seconds)
        t_start = time.monotonic()
        time.sleep(args.kill_at)
        killed_at = time.time()
        leader.kill()
        new = emu.find_leader([c for c in emu.ctls if c is not leader], timeout=15)
        st = poll(lambda: emu.cluster_status(new)["last_takeover"], 10, "the takeover record", 0.05)
        takeover = st["mastered_at"] - killed_at
        print(f"SIGKILL {leader.url}: {new.url} leads (term {st['term']}) and holds "
              f"{st['switches_mastered']} of {len(names)} switches {takeover:.2f} s after the kill")
        follower = next((c for c in emu.ctls if c not in (leader, new)), None)
        if follower is not None:
            status, body = follower.request("POST", "/jobs", {"id": "late", "ps": "host-3", "workers": ["host-6"], "demand": 1e6})
            print(f"POST /jobs at the follower {follower.url}: {status} ({(body or {}).get('error', {}).get('message', '')})")
            report["post_at_follower"] = status
        time.sleep(max(0.0, t_start + args.seconds + 1.0 - time.monotonic()))
        m = emu.measure(run)
        poll(lambda: new.log_text().count("read back") >= len(names), 20, "every switch read back", 0.3)
        after = {n: emu.owned_entries(n) for n in names}
        changed = sorted(n for n in names if after[n] != before[n])
        print(f"{'job':8} {'mode':10} {'planned':>9} {'goodput':>9} {'loss':>7} {'max gap':>8} {'PS behind':>9}")
        for jid, j in m["jobs"].items():
            gap = max(w["max_gap_s"] or 0 for w in j["workers"].values())
            print(f"{jid:8} {j['mode']:10} {j['planned_bps'] / 1e6:8.2f}M {j['measured_bps'] / 1e6:8.2f}M "
                  f"{j['loss']:7.2%} {gap * 1000:6.0f}ms {j['skipped_s']:8.2f}s")
        print(f"switches whose flows, groups or meters changed across the failover: {changed or 'none'}")
        report.update({
            "takeover_s": round(takeover, 3), "elected_s": round(st["elected_at"] - killed_at, 3),
            "switches_mastered": st["switches_mastered"], "switches": len(names),
            "terms": [term, st["term"]], "switches_changed": changed,
            "jobs": {jid: {"mode": j["mode"], "planned_bps": j["planned_bps"], "measured_bps": j["measured_bps"],
                           "loss": j["loss"], "max_gap_s": max(w["max_gap_s"] or 0 for w in j["workers"].values()),
                           "gap_at_s": max((w["gap_at_s"] or 0, w["max_gap_s"] or 0) for w in j["workers"].values())[0],
                           "sender_behind_s": j["skipped_s"]}
                     for jid, j in m["jobs"].items()},
        })
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
