"""Traffic for the emulation: a paced UDP sender (the PS) and a counting receiver (a worker).

Runs inside Mininet hosts (`host.popen([python, this_file, "send" | "recv", ...])`),
standard library only, so that it starts fast. Each datagram carries a header:

    magic "MCEM" | run (u16) | job tag (16 bytes) | seq (u64) | send time (f64, CLOCK_MONOTONIC)

padded to `--size` bytes of UDP payload. All hosts share one kernel, hence one
monotonic clock: receivers can compute one-way delays and first-packet times
against times taken by the demo or test process.

Sender (`send`): idle until a command line arrives on stdin (JSON):
  {"cmd": "start", "run": R, "dsts": [ADDR, ...], "rate": BPS, "duration": S}
      a new run: seq from 0; every tick one datagram to each destination (the
      job's group address, and/or workers' addresses for unicast copies the PS
      sends itself), ticks paced so that each destination gets Ethernet frames
      at `rate * --share` bit/s, headers included. A job's rate is a payload
      rate and the controller's meter polices frames at rate x 1514/1440
      (`controller.algorithm.wire`), so these frames stay under the meter by the
      share and that factor together (about 8 % at the default share)
  {"cmd": "update", "dsts": [...], "rate": BPS}   same run and seq, new destinations/rate
  {"cmd": "stop"}    end the run;   {"cmd": "exit"}   end the process
  {"cmd": "report", "token": T}   write the report now, tagged T
If the sender falls more than `MAX_LAG_S` behind its schedule (CPU starved) it
skips ahead rather than burst, so the meter never sees a burst it must drop:
a starved sender shows as lower goodput, not as loss.

Receiver (`recv`): one per host, for the whole run; commands on stdin:
  {"cmd": "join", "job": J, "group": G, "port": P}   bind UDP port P (one socket
      per job; it takes datagrams to the group and to the host's own address,
      since a hybrid job gets some workers unicast copies rewritten by a switch)
      and join G on the host's interface
  {"cmd": "report", "token": T}   write the report now, tagged T;  {"cmd": "exit"}
It counts per (job tag, run): datagrams, distinct seqs, duplicates, bytes,
first/last arrival, the longest gap between arrivals and the largest one-way
delay. Every host joins every job's group, so a host outside a job that gets
its datagrams shows up. Both roles write their report as JSON to `--out`
(atomically, every `REPORT_EVERY_S`, on "report" and at exit).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import time

MAGIC = b"MCEM"
HEADER = struct.Struct("!4sH16sQd")
FRAME_OVERHEAD = 14 + 20 + 8  # Ethernet, IPv4, UDP headers: what a meter counts besides the payload
MAX_LAG_S = 0.02
REPORT_EVERY_S = 0.25


def tag_bytes(job: str) -> bytes:
    return job.encode()[:16].ljust(16, b"\0")


def tag_text(tag: bytes) -> str:
    return tag.rstrip(b"\0").decode(errors="replace")


def write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


# -- sender --------------------------------------------------------------------------------
def run_sender(args: argparse.Namespace) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(args.ip))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 8)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
    sock.bind((args.ip, 0))
    tag = tag_bytes(args.job)
    pad = b"\0" * (args.size - HEADER.size)
    stdin = sys.stdin.buffer
    buf = b""
    runs: list[dict] = []
    cur: dict | None = None
    seq = 0
    next_t = 0.0
    interval = 0.0
    last_report = 0.0
    deadline = time.monotonic() + args.deadline
    stdin_open = True
    token = None

    def report() -> None:
        write_json(args.out, {"job": args.job, "ip": args.ip, "size": args.size, "share": args.share, "runs": runs,
                              "token": token})

    report()
    while time.monotonic() < deadline:
        now = time.monotonic()
        if cur is not None and now >= cur["end_at"]:
            cur["stopped"] = now
            cur = None
        wait = 0.05 if cur is None else max(0.0, min(next_t - now, 0.05))
        if stdin_open:
            ready, _, _ = select.select([stdin], [], [], wait)
        else:
            ready = []
            time.sleep(wait)
        if ready:
            chunk = os.read(stdin.fileno(), 65536)
            if not chunk:
                stdin_open = False  # the parent went away: finish the current run, then exit
                if cur is None:
                    break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                cmd = json.loads(line)
                now = time.monotonic()
                kind = cmd["cmd"]
                if kind == "report":
                    token = cmd.get("token")
                    report()
                    continue
                if kind == "exit":
                    if cur is not None:
                        cur["stopped"] = now
                    report()
                    return 0
                if kind == "stop":
                    if cur is not None:
                        cur["stopped"] = now
                    cur = None
                elif kind == "start":
                    if cur is not None:
                        cur["stopped"] = now
                    cur = {"run": int(cmd["run"]), "dsts": list(cmd["dsts"]), "rate": float(cmd["rate"]),
                           "started": now, "end_at": now + float(cmd["duration"]), "stopped": None,
                           "ticks": 0, "sent": 0, "skipped_s": 0.0, "updates": []}
                    runs.append(cur)
                    seq = 0
                    interval = (args.size + FRAME_OVERHEAD) * 8 / (cur["rate"] * args.share)
                    next_t = now
                elif kind == "update" and cur is not None:
                    cur["dsts"] = list(cmd["dsts"])
                    cur["rate"] = float(cmd.get("rate", cur["rate"]))
                    cur["updates"].append({"at": now, "dsts": cur["dsts"], "rate": cur["rate"]})
                    interval = (args.size + FRAME_OVERHEAD) * 8 / (cur["rate"] * args.share)
            report()
            continue
        if cur is None:
            if not stdin_open:
                break
            continue
        now = time.monotonic()
        if now < next_t:
            continue
        if now - next_t > MAX_LAG_S:  # starved: skip ahead instead of bursting
            cur["skipped_s"] += now - next_t
            next_t = now
        hdr = HEADER.pack(MAGIC, cur["run"], tag, seq, time.monotonic())
        data = hdr + pad
        for dst in cur["dsts"]:
            try:
                sock.sendto(data, (dst, args.port))
                cur["sent"] += 1
            except OSError:
                pass  # e.g. ENOBUFS: that datagram is lost, the receivers will count it
        cur["ticks"] += 1
        seq += 1
        next_t += interval
        if now - last_report > REPORT_EVERY_S:
            last_report = now
            report()
    if cur is not None:
        cur["stopped"] = time.monotonic()
    report()
    return 0


# -- receiver ---------------------------------------------------------------------------------
def run_receiver(args: argparse.Namespace) -> int:
    by_fd: dict[int, socket.socket] = {}
    socket_job: dict[int, str] = {}
    listened: dict[str, dict] = {}
    stats: dict[tuple[str, int], dict] = {}
    seen: dict[tuple[str, int], set[int]] = {}
    stdin = sys.stdin.buffer
    buf = b""
    token = None
    stop = False

    def on_signal(signum, frame) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def join(job: str, group: str, port: int) -> None:
        if job in listened:
            return
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind(("", port))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + socket.inet_aton(args.ip))
        s.setblocking(False)
        by_fd[s.fileno()] = s
        socket_job[s.fileno()] = job
        listened[job] = {"group": group, "port": port, "joined": time.monotonic()}

    def report() -> None:
        out = [dict(st, job=job, run=run) for (job, run), st in stats.items()]
        write_json(args.out, {"ip": args.ip, "listened": listened, "streams": out, "at": time.monotonic(), "token": token})

    report()
    deadline = time.monotonic() + args.deadline
    last_report = time.monotonic()
    stdin_open = True
    while not stop and time.monotonic() < deadline:
        fds = list(by_fd) + ([stdin.fileno()] if stdin_open else [])
        ready, _, _ = select.select(fds, [], [], 0.1)
        for fd in ready:
            if fd == stdin.fileno():
                chunk = os.read(fd, 65536)
                if not chunk:
                    stdin_open = False  # the parent went away
                    stop = True
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    cmd = json.loads(line)
                    if cmd["cmd"] == "join":
                        join(cmd["job"], cmd["group"], int(cmd["port"]))
                    elif cmd["cmd"] == "report":
                        token = cmd.get("token")
                    elif cmd["cmd"] == "exit":
                        stop = True
                report()
                continue
            s = by_fd[fd]
            while True:
                try:
                    data, (src, _port) = s.recvfrom(65535)
                except BlockingIOError:
                    break
                now = time.monotonic()
                if len(data) < HEADER.size:
                    continue
                magic, run, tag, seq, sent_at = HEADER.unpack_from(data)
                if magic != MAGIC:
                    continue
                key = (tag_text(tag), run)
                st = stats.get(key)
                if st is None:
                    st = stats[key] = {"packets": 0, "unique": 0, "dups": 0, "bytes": 0, "first": now, "last": now,
                                       "first_sent": sent_at, "max_gap": 0.0, "gap_at": None, "max_delay": 0.0,
                                       "max_seq": -1, "socket_job": socket_job[fd], "src": src}
                    seen[key] = set()
                st["packets"] += 1
                if seq in seen[key]:
                    st["dups"] += 1
                else:
                    seen[key].add(seq)
                    st["unique"] += 1
                    st["bytes"] += len(data)
                gap = now - st["last"]
                if gap > st["max_gap"]:
                    st["max_gap"], st["gap_at"] = gap, st["last"]
                st["last"] = now
                st["max_seq"] = max(st["max_seq"], seq)
                st["max_delay"] = max(st["max_delay"], now - sent_at)
        if time.monotonic() - last_report > REPORT_EVERY_S:
            last_report = time.monotonic()
            report()
    report()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("send", help="the PS: paced UDP to the job's group (or unicast copies)")
    s.add_argument("--job", required=True)
    s.add_argument("--ip", required=True, help="this host's address (multicast interface)")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--size", type=int, default=1400, help="UDP payload bytes per datagram")
    s.add_argument("--share", type=float, default=0.97, help="send frames at this fraction of the planned rate")
    s.add_argument("--deadline", type=float, default=600, help="exit after this many seconds whatever happens")
    s.add_argument("--out", required=True)
    r = sub.add_parser("recv", help="a worker: join groups, count per job")
    r.add_argument("--ip", required=True)
    r.add_argument("--deadline", type=float, default=600)
    r.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if args.role == "send":
        if args.size < HEADER.size or args.size > 1472:
            p.error(f"--size must be {HEADER.size}..1472")
        return run_sender(args)
    return run_receiver(args)


if __name__ == "__main__":
    sys.exit(main())
