"""A byte relay between TCP and unix sockets, so that a program on an emulated
host reaches the controller's REST API as `http://127.0.0.1:PORT`.

Mininet hosts live in network namespaces of their own: the controller's API on
127.0.0.1 of the emulation's namespace is not reachable from them. The file
system is shared, so a unix socket is: one relay in the emulation's namespace
(`--listen unix:PATH --to tcp:127.0.0.1:API_PORT`), and one in each host that
needs the API (`--listen tcp:127.0.0.1:8080 --to unix:PATH`). The controller
sees connections from its own loopback (no token needed, as for the demo's own
REST calls). Used by mininet/demo.py for examples/broadcast_weights.py.

Exits after `--deadline` seconds, or when its standard input closes (the parent
went away).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time


def endpoint(text: str) -> tuple[int, object]:
    kind, _, where = text.partition(":")
    if kind == "unix":
        return socket.AF_UNIX, where
    if kind == "tcp":
        host, _, port = where.rpartition(":")
        return socket.AF_INET, (host, int(port))
    raise SystemExit(f"error: {text!r}: unix:PATH or tcp:HOST:PORT")


def pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (dst, src):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(listen: str, to: str) -> socket.socket:
    family, where = endpoint(listen)
    to_family, to_where = endpoint(to)
    srv = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_UNIX:
        if os.path.exists(where):
            os.unlink(where)
    else:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(where)
    srv.listen(64)

    def accept() -> None:
        while True:
            try:
                a, _ = srv.accept()
            except OSError:
                return
            b = socket.socket(to_family, socket.SOCK_STREAM)
            try:
                b.connect(to_where)
            except OSError:
                a.close()
                b.close()
                continue
            threading.Thread(target=pump, args=(a, b), daemon=True).start()
            threading.Thread(target=pump, args=(b, a), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", required=True)
    p.add_argument("--to", required=True)
    p.add_argument("--deadline", type=float, default=3600.0)
    args = p.parse_args()
    serve(args.listen, args.to)
    print("ready", flush=True)
    end = time.monotonic() + args.deadline

    def watch_stdin() -> None:
        try:
            sys.stdin.buffer.read()
        except OSError:
            pass
        os._exit(0)

    threading.Thread(target=watch_stdin, daemon=True).start()
    while time.monotonic() < end:
        time.sleep(1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
