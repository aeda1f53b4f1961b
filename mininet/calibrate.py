"""Measure what a datapath (userspace Open vSwitch or BMv2) sustains on this machine.

Owns the calibration that sizes the emulation's links and job demands: one UDP
stream (1400-byte payload, paced by emu_traffic.py) from host-0 to `--dst` of a
k=4 fat-tree (host-15: across 5 switches, edge, aggregation, core, aggregation,
edge; host-1: through its one edge switch), at increasing rates, with links of
1000 Mbit/s so that tc is not the limit, on `--backend` ovs (default) or p4
(BMv2 simple_switch_grpc). For each rate it prints the offered rate, the
goodput, the datagrams per second and the loss; the highest rate with loss <= 1%
is what the datapath sustains (with everything else this machine is running at
the time).

    sudo .venv/bin/python mininet/calibrate.py [--rates 5,10,20,40,80] [--seconds 5]
    sudo .venv/bin/python mininet/calibrate.py --backend p4 --dst host-1 --rates 2,5,10,20

Writes build/calibration.json (or --out) as well.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emu_session import PAYLOAD, REPO, Emulation, JobState


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="5,10,20,40,80", help="offered rates in Mbit/s, comma-separated")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--backend", choices=("ovs", "p4"), default="ovs")
    p.add_argument("--dst", default="host-15", help="receiver (host-15: 5 switches; host-1: one switch)")
    p.add_argument("--out", default=str(REPO / "build" / "calibration.json"))
    args = p.parse_args(argv)
    rates = [float(x) * 1e6 for x in args.rates.split(",")]
    signal.signal(signal.SIGTERM, _interrupt)  # tear down on `kill` as on Ctrl-C
    rows = []
    with Emulation("calibrate", REPO / "build" / "emu-calibrate", bw_mbit=1000, backend=args.backend) as emu:
        src, dst = "host-0", args.dst
        crossed = _switches_crossed(emu.fabric.topology, src, dst)
        # a sender and receiver outside the controller's jobs: plain unicast routing
        job = JobState("calibration", src, [dst], 0.0, 29999)
        h = emu.fabric.hosts[src]
        out = emu.workdir / "traffic" / "send-calibration.json"
        job.sender = emu.fabric.host(src).popen(
            [emu.python, str(emu_traffic_path()), "send", "--job", job.id, "--ip", h.ip, "--port", str(job.port),
             "--size", str(PAYLOAD), "--share", "1.0", "--out", str(out), "--deadline", "600"],
            stdin=subprocess.PIPE,
        )
        job.sender.out = out
        job.answer = {"rate": 0.0, "mode": "unicast", "group_address": "239.255.255.1",
                      "structure": {"edges": [], "groups": [], "entries": []}}
        emu.jobs[job.id] = job
        emu.join(dst, job.id, "239.255.255.1", job.port)
        job.dsts = [emu.fabric.hosts[dst].ip]
        job.ps_copies = [dst]
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for rate in rates:
            job.answer["rate"] = rate
            m = emu.run_traffic(args.seconds)["jobs"][job.id]
            w = m["workers"][dst]
            offered = m["ticks"] * PAYLOAD * 8 / m["duration_s"]
            pps = w["received"] / m["duration_s"]
            rows.append({"target_bps": rate, "offered_bps": offered, "goodput_bps": w["goodput_bps"], "loss": w["loss"],
                         "datagrams_per_s": pps, "max_delay_s": w["max_delay_s"], "sender_skipped_s": m["skipped_s"]})
            print(f"target {rate / 1e6:6.1f} Mbit/s  offered {offered / 1e6:6.2f}  goodput {w['goodput_bps'] / 1e6:6.2f}  "
                  f"({pps:6.0f} datagrams/s)  loss {w['loss']:.2%}  max delay {w['max_delay_s'] or 0:.3f} s  "
                  f"sender behind {m['skipped_s']:.2f} s", flush=True)
    ok = [r for r in rows if r["loss"] <= 0.01]
    best = max(ok, key=lambda r: r["goodput_bps"]) if ok else None
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "backend": args.backend, "src": src, "dst": dst, "payload_bytes": PAYLOAD, "switches_crossed": crossed,
        "rows": rows, "sustained_bps": best["goodput_bps"] if best else None,
        "sustained_datagrams_per_s": best["datagrams_per_s"] if best else None,
    }, indent=2) + "\n")
    if best:
        print(f"sustained with loss <= 1% ({args.backend}): {best['goodput_bps'] / 1e6:.1f} Mbit/s of UDP payload, "
              f"{best['datagrams_per_s']:.0f} datagrams/s, through {crossed} switch(es)")
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _switches_crossed(topology, src: str, dst: str) -> int:
    """Switches on a shortest path from host `src` to host `dst` (the unicast routes' length)."""
    from collections import deque

    start, goal = topology.index[src], topology.index[dst]
    dist = {start: 0}
    todo = deque([start])
    while todo:
        v = todo.popleft()
        for n in topology.neighbors[v]:
            if n not in dist:
                dist[n] = dist[v] + 1
                todo.append(n)
    return dist[goal] - 1


def emu_traffic_path() -> Path:
    return Path(__file__).resolve().parent / "emu_traffic.py"


if __name__ == "__main__":
    sys.exit(main())
