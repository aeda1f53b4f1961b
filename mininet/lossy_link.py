"""A link with random loss, in user space: copies Ethernet frames between two
interfaces of a relay node and drops each one with probability `--loss` %.

Why: Mininet's TCLink `loss=` needs the kernel's netem qdisc, and this
machine's kernel has no netem (nor tbf, red, tc actions or iptables): tc
answers "Specified qdisc kind is unknown". So an emulated lossy link a–b is
a–relay–b (mininet/emu_fabric.py, `lossy=`), both halves at the link's
bandwidth, with this process in the relay's namespace. It forwards every frame
as it is (LLDP, ARP, IPv4), each direction on its own, in the order received.

    lossy_link.py --a IFACE --b IFACE --loss 1.0 [--seed N] [--out stats.json]

Writes {"forwarded": {"a>b", "b>a"}, "dropped": {...}} to --out every second and on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import sys
import threading
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--loss", type=float, required=True, help="percent of frames dropped, each direction")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    socks = {}
    for name in (args.a, args.b):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind((name, 0))
        socks[name] = s
    stats = {"forwarded": {"a>b": 0, "b>a": 0}, "dropped": {"a>b": 0, "b>a": 0}}
    p_drop = args.loss / 100.0

    def pump(src: str, dst: str, key: str, seed: int | None) -> None:
        rng = random.Random(seed)
        rx, tx = socks[src], socks[dst]
        while True:
            try:
                frame, addr = rx.recvfrom(65535)
            except OSError:
                return
            if addr[2] == PACKET_OUTGOING:  # what this relay (or the kernel) sent on src
                continue
            if rng.random() < p_drop:
                stats["dropped"][key] += 1
                continue
            try:
                tx.send(frame)
                stats["forwarded"][key] += 1
            except OSError:  # the other side is down: the frame is lost, as on a cable
                stats["dropped"][key] += 1

    def stop(*_: object) -> None:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(stats, f)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    base = args.seed if args.seed is not None else None
    threads = [threading.Thread(target=pump, args=(args.a, args.b, "a>b", base), daemon=True),
               threading.Thread(target=pump, args=(args.b, args.a, "b>a", None if base is None else base + 1),
                                daemon=True)]
    for t in threads:
        t.start()
    print("ready", flush=True)
    try:
        while True:  # the counts so far, every second (and at the end)
            time.sleep(1.0)
            if args.out:
                with open(args.out + ".tmp", "w") as f:
                    json.dump(stats, f)
                os.replace(args.out + ".tmp", args.out)
    except KeyboardInterrupt:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
