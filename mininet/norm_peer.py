"""One side of a NORM broadcast in its own process (and network namespace or
Mininet host): `python mininet/norm_peer.py JSON` where JSON gives the role
("send" or "receive"), the job (as the controller answers it), the hosts and
options (`auth_key`: the job's broadcast key, base64url, if the job's answer
does not carry it; `insecure`: no key, as before keys). Refusals are logged to
stderr. A receiver prints {"ready": true} once its session is open; after its
objects it answers the PS for `linger` seconds, or with `finish` (seconds, at
most) until the line "stop" comes on its stdin or the PS's sender goes quiet
(`Receiver.finish`). Both print
one JSON line at the end: the outcome (digest and size of what was received,
or the error's class and message; the sender's report), with CLOCK_MONOTONIC
times (`start_at`, `done_at`: one clock for every namespace of the machine), and the
process's peak memory (`maxrss_kb`).
With "serve": true a peer stays open across objects, as a training job's sessions do
(mininet/emu_iterations.py): it prints {"ready": true}, then the sender sends one object
for every line "send" on its stdin and prints that object's outcome as a line, until
"quit" or the end of stdin, and a line "rate <bit/s>" sets the job's payload rate at once,
even during a send (`Commands`, `Sender.set_rate`); a receiver prints each object's outcome as a line when it
has it, until "stop". Used by tests/test_broadcast.py, tests/test_emulation_broadcast.py,
mininet/broadcast_bench.py and mininet/emu_iterations.py."""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for `controller`

from controller.client import Job, decode_key  # noqa: E402
from controller.client import broadcast as bc  # noqa: E402


def stop_on_stdin() -> threading.Event:
    """An event set when a line "stop" arrives on stdin (the harness sends it once the
    PS's send has returned: every confirmation is in)."""
    stop = threading.Event()

    def read() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                stop.set()
                return

    threading.Thread(target=read, daemon=True).start()
    return stop


def watch_first_events(peer: bc.Sender | bc.Receiver) -> dict[str, float]:
    """{event name: CLOCK_MONOTONIC time of its first occurrence} for the NORM events
    of a Sender or Receiver (the sender seen, the object announced, its first data,
    the round-trip estimate updated, ...), filled as they are read: where a slow
    object's time went (the harness clears it after each object)."""
    first: dict[str, float] = {}
    next_event = peer.instance.next_event

    def traced(timeout):  # noqa: ANN001, ANN202 - as norm.Instance.next_event
        ev = next_event(timeout)
        if ev is not None:
            first.setdefault(ev.name, time.monotonic())
        return ev

    peer.instance.next_event = traced
    return first


def peak_rss_kb() -> int | None:
    """This process's peak resident memory (kB): /proc's VmHWM, which starts afresh at
    exec (getrusage's ru_maxrss would count the forking parent's memory too)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


class Commands:
    """A serving sender's stdin, read by a thread of its own, so that a line "rate <bps>"
    sets the job's payload rate at once (`Sender.set_rate`), also during a send (the
    controller raised or lowered a broadcasting job's rate); a bad one is reported on
    stderr and ignored. "send" lines wait in a queue for `next`, in order; "quit" or the
    end of stdin ends the queue after what came before it."""

    def __init__(self, tx: bc.Sender, lines: Iterable[str] | None = None) -> None:
        self.tx = tx
        self._lines = sys.stdin if lines is None else lines  # tests give theirs
        self._sends: queue.Queue[bool] = queue.Queue()
        self._lock = threading.Lock()
        self._rates: list[list[float]] = []  # [CLOCK_MONOTONIC time, bit/s] set since `take_rates`
        threading.Thread(target=self._read, name="norm-peer-stdin", daemon=True).start()

    def _read(self) -> None:
        for line in self._lines:
            command = line.split()
            if command == ["quit"]:
                break
            if command == ["send"]:
                self._sends.put(True)
            elif command[:1] == ["rate"]:
                try:
                    if len(command) != 2:
                        raise ValueError("a rate line is `rate <bit/s>`")
                    with self._lock:
                        self.tx.set_rate(float(command[1]))
                        self._rates.append([time.monotonic(), float(command[1])])
                except (ValueError, bc.BroadcastError) as e:
                    print(f"norm_peer: ignored {line.strip()!r}: {e}", file=sys.stderr, flush=True)
        self._sends.put(False)

    def next(self) -> bool:
        """Waits for the next "send" (True), or the end (False)."""
        return self._sends.get()

    def take_rates(self) -> list[list[float]]:
        """The rates set since the last call ([[CLOCK_MONOTONIC time, bit/s]]), forgotten here."""
        with self._lock:
            out, self._rates = self._rates, []
        return out


def serve_sender(tx: bc.Sender, data: bytes, timeout: float) -> None:
    """One object per line "send" on stdin, its outcome printed as a line (with the rates
    set during its send, `rates`: [[CLOCK_MONOTONIC time, bit/s]]); lines "rate <bps>" apply
    at once, even mid-send (`Commands`); "quit" or the end of stdin ends it after the sends
    asked before. The sessions stay open between objects (the PS's round-trip estimate,
    its receivers' state and its buffers are kept)."""
    first = watch_first_events(tx)
    print(json.dumps({"ready": True}), flush=True)
    commands = Commands(tx)
    while commands.next():
        first.clear()
        commands.take_rates()  # those set between sends: the sender's rate before this one
        out: dict = {"start_at": time.monotonic()}
        try:
            r = tx.send(data, timeout=timeout)
            out["report"] = report_of(r)
        except bc.BroadcastError as e:
            out["error"], out["message"] = type(e).__name__, str(e)
            if isinstance(e, bc.BroadcastIncomplete):
                out["missing"] = list(e.report.missing)
        out["end_at"] = time.monotonic()
        out["first"] = dict(first)
        out["rates"] = commands.take_rates()
        print(json.dumps(out), flush=True)


def serve_receiver(rx: bc.Receiver, stop: threading.Event) -> None:
    """Each object's outcome printed as a line as soon as it is whole and checked,
    until `stop` (the line "stop" on stdin)."""
    first = watch_first_events(rx)
    print(json.dumps({"ready": True}), flush=True)
    while not stop.is_set():
        try:
            data = rx.receive(timeout=0.2)
        except bc.ReceiveTimeout:
            continue
        except bc.BroadcastError as e:
            print(json.dumps({"ok": False, "error": type(e).__name__, "message": str(e)}), flush=True)
            continue
        done = time.monotonic()
        print(json.dumps({"ok": True, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                          "done_at": done, "first": dict(first)}), flush=True)
        first.clear()


def report_of(r: bc.BroadcastReport) -> dict:
    return {"seconds": r.seconds, "tx_rate_bps": r.tx_rate_bps, "rounds": r.rounds, "grtt_s": r.grtt_s,
            "sessions": [[s.address, list(s.workers), s.multicast, list(s.acked)] for s in r.sessions]}


def main() -> int:
    spec = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    job = Job.from_json(spec["job"])
    if spec.get("auth_key"):
        job = job.with_key(decode_key(spec["auth_key"]))
    hosts = spec["hosts"]
    opts = dict(spec.get("options", {}))
    if spec.get("insecure"):
        opts["insecure"] = True
    out: dict = {"role": spec["role"]}
    try:
        if spec["role"] == "send":
            data = Path(spec["data"]).read_bytes()
            time.sleep(spec.get("delay", 0.0))
            with bc.Sender(job, hosts, **opts) as tx:
                if spec.get("serve"):
                    serve_sender(tx, data, spec.get("timeout", 60.0))
                    out["closed_at"] = time.monotonic()
                    out["maxrss_kb"] = peak_rss_kb()
                    print(json.dumps(out), flush=True)
                    return 0
                first = watch_first_events(tx)
                out["start_at"] = time.monotonic()
                if spec.get("lie"):
                    # signed with the job's key: an authenticated PS announcing the wrong digest
                    info = bc.make_info(hashlib.sha256(b"something else").digest(), len(data), job.id, tx.key,
                                        tx.next_seq())
                    tx.send_raw(data, info, timeout=spec.get("ack_timeout", 10.0))
                else:
                    out["starts"], out["ends"] = [], []   # each object's send(): called, returned
                    for k in range(spec.get("objects", 1)):
                        if k:
                            out["starts"].append(time.monotonic())
                        r = tx.send(data, timeout=spec.get("timeout", 60.0))
                        out["ends"].append(time.monotonic())
                    out["starts"].insert(0, out["start_at"])
                    out["end_at"] = time.monotonic()
                    out["first"] = first
                    out["report"] = report_of(r)
        else:
            with bc.Receiver(job, hosts, me=spec["me"], **opts) as rx:
                if spec.get("serve"):
                    serve_receiver(rx, stop_on_stdin())
                    out["closed_at"] = time.monotonic()
                    out["refused"] = [list(r) for r in rx.refused]
                    out["maxrss_kb"] = peak_rss_kb()
                    print(json.dumps(out), flush=True)
                    return 0
                first = watch_first_events(rx)
                print(json.dumps({"ready": True}), flush=True)
                results = []
                for _ in range(spec.get("objects", 1)):
                    t0 = time.monotonic()
                    try:
                        data = rx.receive(timeout=spec.get("timeout", 60.0))
                        done = time.monotonic()  # the object whole and checked (before this script hashes it)
                        results.append({"ok": True, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                                        "seconds": done - t0, "done_at": done, "first": dict(first)})
                        first.clear()
                    except bc.BroadcastError as e:
                        results.append({"ok": False, "error": type(e).__name__, "message": str(e)})
                if "finish" in spec:  # until the PS's sender went quiet, at most this long
                    out["finished"] = rx.finish(spec["finish"], stop_on_stdin())
                else:
                    rx.serve(spec.get("linger", 2.0))
                out["closed_at"] = time.monotonic()
                out["results"] = results
                out["refused"] = [list(r) for r in rx.refused]
    except bc.BroadcastError as e:
        out["error"] = type(e).__name__
        out["message"] = str(e)
        if isinstance(e, bc.BroadcastIncomplete):
            out["missing"] = list(e.report.missing)
            out["rounds"], out["grtt_s"] = e.report.rounds, e.report.grtt_s
    out["maxrss_kb"] = peak_rss_kb()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
