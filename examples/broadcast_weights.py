"""Broadcast a model's weights from the PS to its workers every iteration, over
NORM at the rate the controller planned (controller.client.broadcast).

Run one PS and one process per worker, each on its own host, all pointing at
the controller's REST API:

    # the launcher makes the job's broadcast key and gives it to the PS and every worker
    export MCAST_JOB_KEY=$(python -c 'from controller.client import encode_key, new_key; print(encode_key(new_key()))')
    # on each worker (start them first; they wait for the job to be registered)
    python examples/broadcast_weights.py worker --controller http://127.0.0.1:8080 \\
        --job-id weights-1 --me host-5 --iterations 3
    # on the PS: registers the job (with the key), broadcasts, deletes the job
    python examples/broadcast_weights.py ps --controller http://127.0.0.1:8080 \\
        --job-id weights-1 --ps host-0 --workers host-1,host-5,host-9 --demand 5M --iterations 3

The PS signs every object with the key and the workers accept only the PS's
objects signed with it (controller/client/broadcast.py); the controller gives
the key to the registrant only, so the launcher hands it out (`$MCAST_JOB_KEY`
or `--key`).

The weights are a float32 numpy array (`--mb` megabytes) that changes every
iteration in a way both sides can compute (a seeded generator), so each worker
checks more than the transport's digest: the array it loads equals the one the
PS sent. Every line printed is one JSON object (an iteration, or the summary).
`make demo` runs this on the emulated k=4 fat-tree (mininet/demo.py).

The PS announces each broadcast to the controller for as long as it lasts
(`controller.client.phases.Announcement`, docs/controller.md "Phase-aware
rates"): it announces itself idle once registered, then while it sends its rate
may rise into what idle jobs leave; between broadcasts it is policed at a small
share of its plan. `--no-announce` keeps the planned rate throughout. A failed
announcement never fails the broadcast.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.client import Client, ClientError, NotFound, decode_key  # noqa: E402
from controller.client.broadcast import BroadcastError, Receiver, Sender  # noqa: E402
from controller.client.phases import Announcement  # noqa: E402


def weights(iteration: int, n: int) -> np.ndarray:
    """The model after `iteration` steps (deterministic, so a worker can check it)."""
    return np.random.default_rng(1000 + iteration).standard_normal(n, dtype=np.float32)


def to_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def from_bytes(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def rate(text: str) -> float:
    units = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
    return float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def run_ps(args: argparse.Namespace) -> int:
    client = Client(args.controller, token=args.token)
    n = int(args.mb * 1e6) // 4
    workers = [w for w in args.workers.split(",") if w]
    with client.job(args.ps, workers, args.demand, job_id=args.job_id, auth_key=args.key) as job:
        hosts = client.hosts()
        say(event="registered", job=job.id, mode=job.mode, rate_bps=job.rate, group=job.group_address,
            ps_unicast=list(job.ps_unicast))
        if args.announce:  # phased from now on: until a job's first announcement its whole plan stays reserved
            try:
                client.broadcasting(job.id, False)
            except ClientError as e:  # not fatal: the first broadcast's announcement makes it phased anyway
                say(event="announce_failed", message=str(e))
        time.sleep(args.start_delay)  # let the workers open their sessions (late ones are repaired anyway)
        tx = Sender(job, hosts, parity=args.parity, auto_parity=args.auto_parity)
        try:
            for i in range(args.iterations):
                fresh = client.get(job.id).with_key(job.auth_key)  # a re-plan may have changed the mode, plan
                # or PS copies (a GET never carries the key: the registrant's is kept); the rate of the
                # moment (`rate`) follows the phases, which the announcement applies to the sender
                if (fresh.planned_rate, fresh.mode, fresh.ps_unicast) != (job.planned_rate, job.mode, job.ps_unicast):
                    tx.close()
                    job, tx = fresh, Sender(fresh, hosts, parity=args.parity, auto_parity=args.auto_parity)
                payload = to_bytes(weights(i, n))
                if args.announce:
                    with Announcement(lambda active: client.broadcasting(job.id, active).rate, tx.set_rate) as phase:
                        report = tx.send(payload, timeout=args.timeout)
                    applied, failures = [bps for _, bps in phase.rates], phase.failures
                else:
                    report, applied, failures = tx.send(payload, timeout=args.timeout), [], 0
                say(event="sent", iteration=i, bytes=len(payload), seconds=round(report.seconds, 3),
                    goodput_bps=len(payload) * 8 / report.seconds, planned_bps=job.planned_rate,
                    rates_bps=applied, announce_failures=failures,
                    confirmed=[w for s in report.sessions for w in s.acked])
        except BroadcastError as e:
            say(event="error", error=type(e).__name__, message=str(e))
            return 1
        finally:
            tx.close()
    say(event="deleted", job=args.job_id)
    return 0


def run_worker(args: argparse.Namespace) -> int:
    client = Client(args.controller, token=args.token)
    deadline = time.monotonic() + args.timeout
    while True:  # the PS registers the job; wait for it, then for its plan
        try:
            job = client.wait_planned(args.job_id, timeout=max(0.1, deadline - time.monotonic())).with_key(args.key)
            break
        except NotFound:
            if time.monotonic() > deadline:
                say(event="error", error="NotFound", message=f"job {args.job_id} never registered")
                return 1
            time.sleep(0.2)
    n = int(args.mb * 1e6) // 4
    ok = True
    with Receiver(job, client.hosts(), me=args.me) as rx:
        say(event="listening", job=job.id, me=args.me, port=rx.port, direct=rx.direct)
        for i in range(args.iterations):
            t0 = time.monotonic()
            try:
                a = from_bytes(rx.receive(timeout=args.timeout))
            except BroadcastError as e:  # corrupt or incomplete: reported, never used
                say(event="error", iteration=i, error=type(e).__name__, message=str(e))
                ok = False
                continue
            same = bool(a.shape == (n,) and np.array_equal(a, weights(i, n)))
            ok &= same
            say(event="received", iteration=i, me=args.me, bytes=a.nbytes, seconds=round(time.monotonic() - t0, 3),
                weights_equal=same)
        # Before leaving, keep confirming the last object to the PS until it is done: it deletes
        # the job once every worker confirmed (a fixed linger is only a guess at how long NORM's
        # acknowledgement requests take to reach a worker on a loaded fabric).
        ps_done = threading.Event()
        threading.Thread(target=watch_deleted, args=(client, args.job_id, ps_done), daemon=True).start()
        if not rx.finish(args.linger, ps_done):
            say(event="linger_timeout", seconds=args.linger)
        ps_done.set()  # ends the watcher
    return 0 if ok else 1


def watch_deleted(client: Client, job_id: str, done: threading.Event, poll: float = 0.5) -> None:
    """Set `done` once the job is gone from the controller (the PS deletes it after its last
    send returned, i.e. after every worker confirmed), or once someone else set it."""
    while not done.wait(poll):
        try:
            client.get(job_id)
        except NotFound:
            done.set()
        except ClientError:  # the controller unreachable for a moment: ask again; finish's bound holds
            continue


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("role", choices=("ps", "worker"))
    p.add_argument("--controller", default="http://127.0.0.1:8080")
    p.add_argument("--token", default=None)
    p.add_argument("--job-id", required=True)
    p.add_argument("--ps", help="the PS host (role ps)")
    p.add_argument("--workers", default="", help="comma-separated worker hosts (role ps)")
    p.add_argument("--demand", type=rate, default=5e6, help="bit/s, e.g. 5M (role ps)")
    p.add_argument("--me", help="this worker's host (role worker)")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--mb", type=float, default=4.0, help="size of the weights in MB (default 4)")
    p.add_argument("--parity", type=int, default=16, help="NORM repair segments per 64-segment block")
    p.add_argument("--auto-parity", type=int, default=0, help="of which sent proactively")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--start-delay", type=float, default=1.0)
    p.add_argument("--no-announce", dest="announce", action="store_false",
                   help="do not announce the broadcasts to the controller (role ps): keep the planned rate")
    p.add_argument("--linger", type=float, default=60.0,
                   help="at most this many seconds answering the PS after the last object (role worker; "
                        "it stops earlier once the PS deleted the job)")
    p.add_argument("--key", default=os.environ.get("MCAST_JOB_KEY"),
                   help="the job's broadcast key, base64url of 32 bytes (default $MCAST_JOB_KEY)")
    args = p.parse_args(argv)
    if not args.key:
        p.error("the job's broadcast key is needed (--key or $MCAST_JOB_KEY): the launcher makes one and "
                "gives it to the PS and to every worker")
    try:
        args.key = decode_key(args.key)
    except ValueError as e:
        p.error(f"--key: {e}")
    if args.role == "ps" and not (args.ps and args.workers):
        p.error("role ps needs --ps and --workers")
    if args.role == "worker" and not args.me:
        p.error("role worker needs --me")
    return run_ps(args) if args.role == "ps" else run_worker(args)


if __name__ == "__main__":
    sys.exit(main())
