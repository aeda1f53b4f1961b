"""The TCP baselines of mininet/broadcast_bench.py, one process per host.

    tcp_peer.py recv --port P --size N [--forward IP:PORT]
        prints "ready", accepts one connection, reads N bytes; with --forward it
        sends every chunk on to the next host as it arrives (a pipelined chain);
        prints {"ok", "bytes", "sha256", "done_at"} (CLOCK_MONOTONIC)
    tcp_peer.py send --data FILE --to IP:PORT[,IP:PORT...]
        sends the file to every destination at once (one connection and thread
        each); prints {"start_at", "end_at", "sha256"}
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import sys
import threading
import time
from pathlib import Path

CHUNK = 64 * 1024


def addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def recv(args: argparse.Namespace) -> int:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", args.port))
    srv.listen(1)
    print("ready", flush=True)
    srv.settimeout(args.timeout)
    conn, _ = srv.accept()
    conn.settimeout(args.timeout)
    fwd = None
    if args.forward:
        fwd = socket.create_connection(addr(args.forward), timeout=args.timeout)
    h = hashlib.sha256()
    n = 0
    while n < args.size:
        chunk = conn.recv(min(CHUNK, args.size - n))
        if not chunk:
            break
        n += len(chunk)
        h.update(chunk)
        if fwd:
            fwd.sendall(chunk)
    done = time.monotonic()
    if fwd:
        fwd.shutdown(socket.SHUT_WR)
        fwd.recv(1)  # the next host closes once it has everything
        fwd.close()
    conn.close()
    print(json.dumps({"ok": n == args.size, "bytes": n, "sha256": h.hexdigest(), "done_at": done}), flush=True)
    return 0


def send(args: argparse.Namespace) -> int:
    data = Path(args.data).read_bytes()
    dsts = [addr(t) for t in args.to.split(",")]
    socks = [socket.create_connection(d, timeout=args.timeout) for d in dsts]
    start = time.monotonic()

    def push(s: socket.socket) -> None:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
        s.close()

    threads = [threading.Thread(target=push, args=(s,)) for s in socks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"start_at": start, "end_at": time.monotonic(), "sha256": hashlib.sha256(data).hexdigest()}),
          flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="role", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--size", type=int, required=True)
    r.add_argument("--forward")
    r.add_argument("--timeout", type=float, default=600.0)
    s = sub.add_parser("send")
    s.add_argument("--data", required=True)
    s.add_argument("--to", required=True)
    s.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args()
    return recv(args) if args.role == "recv" else send(args)


if __name__ == "__main__":
    sys.exit(main())
