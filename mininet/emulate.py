"""Bring up an emulated fabric of your choice under the controller, optionally with jobs and traffic.

Owns the command line for ad-hoc emulation (`make demo` is the fixed scenario):
a k-ary fat-tree (`--fattree K`, K even) or a leaf-spine (`--leaf-spine
LEAVES,SPINES,HOSTS_PER_LEAF`), links of `--bw` Mbit/s, `--group-capacity`
groups per switch, Open vSwitch (userspace datapath) and the real controller in
a private network namespace (emu_session.Emulation). With `--jobs N` it
registers N seeded random jobs over REST (a PS and 2..`--max-workers` workers
each, `--demand` bit/s), waits until the switches deliver every job exactly,
streams `--seconds` of UDP and prints per job the mode, planned rate, measured
goodput of the slowest worker, loss and duplicates. Then `--cli` opens the
Mininet CLI (the controller's REST API is at the printed URL inside that
namespace: `py` commands in the CLI can reach it), else it tears down.

`--backend p4` builds it of BMv2 simple_switch_grpc switches programmed over
P4Runtime instead of Open vSwitch (simple_switch_grpc on PATH; BMv2 forwards far
fewer packets: keep --bw and --demand low, docs/emulation.md).

Run as root, e.g.:
    .venv/bin/python mininet/emulate.py --leaf-spine 2,2,2 --jobs 3
    .venv/bin/python mininet/emulate.py --fattree 4 --group-capacity 2 --jobs 6 --cli
Exit status 0 when every worker of every job received its stream with no
duplicates and nothing reached a host outside a job; 1 otherwise; 2 for bad
arguments or a machine that cannot run the emulation.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emu_session import REPO, Emulation
from demo import p4_unavailable
from ovs_daemon import unavailable


def _leaf_spine(text: str) -> tuple[int, int, int]:
    try:
        parts = tuple(int(x) for x in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"expected LEAVES,SPINES,HOSTS_PER_LEAF (positive integers), got {text!r}")
    return parts  # type: ignore[return-value]


def _fattree(text: str) -> int:
    try:
        k = int(text)
    except ValueError:
        k = 0
    if k < 2 or k % 2:
        raise argparse.ArgumentTypeError(f"a fat-tree needs an even k >= 2, got {text!r}")
    return k


def random_jobs(hosts: list[str], n: int, max_workers: int, demand: float, seed: int) -> list[tuple]:
    """n jobs (id, ps, workers, demand): a random PS and 2..max_workers other hosts each."""
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        ps = rng.choice(hosts)
        others = [h for h in hosts if h != ps]
        k = rng.randint(min(2, len(others)), min(max_workers, len(others)))
        jobs.append((f"job-{i}", ps, sorted(rng.sample(others, k), key=hosts.index), demand))
    return jobs


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--fattree", type=_fattree, default=None, metavar="K", help="k-ary fat-tree (default: k=4)")
    shape.add_argument("--leaf-spine", type=_leaf_spine, default=None, metavar="L,S,H", help="leaves, spines, hosts per leaf")
    p.add_argument("--bw", type=float, default=10.0, help="link bandwidth in Mbit/s (default 10)")
    p.add_argument("--group-capacity", type=int, default=None, help="groups per switch (default: unlimited)")
    p.add_argument("--jobs", type=int, default=0, help="random jobs to register and stream (default 0)")
    p.add_argument("--max-workers", type=int, default=4, help="at most this many workers per job (default 4)")
    p.add_argument("--demand", type=float, default=2e6, help="demand of every job in bit/s (default 2e6)")
    p.add_argument("--seconds", type=float, default=5.0, help="traffic duration (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cli", action="store_true", help="open the Mininet CLI before tearing down")
    p.add_argument("--backend", choices=("ovs", "p4"), default="ovs",
                   help="ovs: Open vSwitch over OpenFlow (default); p4: BMv2 over P4Runtime")
    args = p.parse_args(argv)
    if args.bw <= 0 or args.demand <= 0 or args.seconds <= 0 or args.jobs < 0 or args.max_workers < 2:
        p.error("--bw, --demand and --seconds must be positive, --jobs >= 0, --max-workers >= 2")
    if args.group_capacity is not None and args.group_capacity < 0:
        p.error("--group-capacity must be >= 0")
    reason = unavailable() if args.backend == "ovs" else p4_unavailable()
    if reason:
        print(f"error: the emulation {reason}", file=sys.stderr)
        return 2
    from rich.console import Console
    from rich.table import Table

    console = Console()
    signal.signal(signal.SIGTERM, _interrupt)
    fattree = None if args.leaf_spine else (args.fattree or 4)
    groups = "unlimited" if args.group_capacity is None else args.group_capacity
    try:
        with Emulation("emulate", REPO / "build" / "emu-emulate", fattree_k=fattree, leaf_spine=args.leaf_spine,
                       bw_mbit=args.bw, group_capacity=groups, backend=args.backend) as emu:
            shape_text = f"k={fattree} fat-tree" if fattree else "leaf-spine {},{},{}".format(*args.leaf_spine)
            console.print(f"[bold]{shape_text}[/]: {len(emu.fabric.topology.switches)} switches, "
                          f"{len(emu.fabric.hosts)} hosts, links {args.bw:g} Mbit/s, groups per switch: {groups}; "
                          f"controller {emu.ctl.url} (log {emu.ctl.log})")
            console.print("names (topology → Mininet): " + ", ".join(f"{a}={b}" for a, b in emu.fabric.names.items()))
            ok = True
            if args.jobs:
                hosts = [emu.fabric.topology.name(h) for h in emu.fabric.topology.hosts]
                for jid, ps, workers, demand in random_jobs(hosts, args.jobs, args.max_workers, args.demand, args.seed):
                    ans = emu.add_job(jid, ps, workers, demand)
                    console.print(f"POST /jobs {jid}: {ps} → {', '.join(workers)}: {ans['mode']}, "
                                  f"{(ans['rate'] or 0) / 1e6:.2f} Mbit/s")
                emu.converge(timeout=60)
                m = emu.run_traffic(args.seconds)
                table = Table(title="Jobs: planned vs measured (slowest worker)")
                for col in ("job", "mode", "planned Mbit/s", "measured Mbit/s", "loss", "dups"):
                    table.add_column(col)
                for jid, j in m["jobs"].items():
                    table.add_row(jid, j["mode"], f"{j['planned_bps'] / 1e6:.2f}", f"{j['measured_bps'] / 1e6:.2f}",
                                  f"{j['loss']:.2%}", str(j["dups"]))
                console.print(table)
                delivered = all(w["received"] > 0 for j in m["jobs"].values() for w in j["workers"].values())
                dups = sum(j["dups"] for j in m["jobs"].values())
                ok = delivered and dups == 0 and not m["strays"]
                console.print(f"every worker received its job: {delivered}; duplicates: {dups}; "
                              f"datagrams at hosts outside a job: {sum(s['packets'] for s in m['strays'])}")
            if args.cli:
                from mininet.cli import CLI

                CLI(emu.fabric.net)
    except KeyboardInterrupt:
        console.print("interrupted: torn down")
        return 130
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
