"""The model broadcast (controller/client/broadcast.py) on the emulated fabric:
link byte counters, NORM transfers between Mininet hosts, the TCP
baselines, and the REST API relay that lets a program on a host use
`controller.client`.

Used by tests/test_emulation_broadcast.py, mininet/broadcast_bench.py and
mininet/demo.py (which runs examples/broadcast_weights.py). Every process on a
host is started with the host's `popen` and recorded for the crash clean-up
(`OvsDaemon.record_pid`), like the emulation's traffic.
"""

from __future__ import annotations

import json
import math
import queue
import re
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from emu_fabric import RELAY_PORT
from emu_session import REPO

HERE = Path(__file__).resolve().parent
PEER = HERE / "norm_peer.py"
TCP_PEER = HERE / "tcp_peer.py"
RELAY = HERE / "emu_relay.py"
EXAMPLE = REPO / "examples" / "broadcast_weights.py"


# -- links ---------------------------------------------------------------------------------

_PORT = re.compile(r"port\s+(\S+?):\s*rx pkts=\d+, bytes=(\d+).*?\n\s*tx pkts=\d+, bytes=(\d+)", re.S)


def link_bytes(emu) -> int:
    """Bytes carried by every link so far, each direction once: what every switch
    port received (links into switches) plus what host-facing ports sent
    (links into hosts), from `ovs-ofctl dump-ports`."""
    fabric = emu.fabric
    total = 0
    for name in fabric.names:
        if name not in fabric.hosts and not fabric.names[name].startswith("h"):
            text = fabric.ofctl("dump-ports", name)
            for port, rx, tx in _PORT.findall(text):
                if port == "LOCAL":
                    continue
                total += int(rx)
                if fabric.neighbour.get((name, int(port))) in fabric.hosts:
                    total += int(tx)
    return total


_METER_BAND = re.compile(r"meter:(\d+) .*?bands:\s*0: packet_count:(\d+)", re.DOTALL)


def meter_drops(emu) -> dict[str, int]:
    """Packets dropped so far by the job meters of each switch (the drop band's
    count, from `ovs-ofctl meter-stats`), for the switches that have meters."""
    out = {}
    for name in emu.fabric.names:
        if name in emu.fabric.hosts or emu.fabric.names[name].startswith("h"):
            continue
        text = emu.fabric.ofctl("meter-stats", name)
        drops = sum(int(n) for _, n in _METER_BAND.findall(text))
        if "meter:" in text:
            out[name] = drops
    return out


# -- NORM transfers ----------------------------------------------------------------------------

def _popen(emu, host: str, argv: list[str], tag: str, **kw) -> subprocess.Popen:
    proc = emu.fabric.host(host).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       cwd=str(REPO), **kw)
    emu.ovs.record_pid(tag, proc.pid, str(argv[1]))
    return proc


def _last_json(proc: subprocess.Popen, timeout: float) -> dict:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return {"error": "PeerTimeout", "message": f"no answer within {timeout:g} s", "stderr": err[-2000:]}
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": "NoOutput", "stderr": err[-2000:]}


def hosts_map(emu) -> dict[str, str]:
    return {name: h.ip for name, h in emu.fabric.hosts.items()}


def job_key(emu, answer: dict) -> str | None:
    """The job's broadcast key (base64url): the POST's answer had it, a later GET's
    does not, so the emulation kept it (`JobState.auth_key`)."""
    job = emu.jobs.get(answer["id"])
    return answer.get("auth_key") or (job.auth_key if job is not None else None)


def start_norm_receivers(emu, answer: dict, workers: list[str], *, timeout: float = 120.0, objects: int = 1,
                         rx_options: dict | None = None) -> dict[str, subprocess.Popen]:
    procs = {}
    for w in workers:
        spec = {"role": "receive", "job": answer, "hosts": hosts_map(emu), "me": w, "timeout": timeout,
                "objects": objects, "finish": timeout, "options": (rx_options or {}).get(w, {}),
                "auth_key": job_key(emu, answer)}
        # after its objects each answers the PS until `finish_norm` says "stop" (the PS's send
        # returned) or the PS's sender went quiet: never before the PS has its confirmation
        procs[w] = _popen(emu, w, [emu.python, str(PEER), json.dumps(spec)], f"norm-rx-{answer['id']}-{w}",
                          stdin=subprocess.PIPE)
    for w, p in procs.items():
        line = p.stdout.readline()
        if not line.startswith('{"ready"'):
            raise RuntimeError(f"NORM receiver on {w} did not start: {line!r} {p.stderr.read()[-2000:]}")
    return procs


def start_norm_sender(emu, answer: dict, data: Path, *, timeout: float = 120.0, objects: int = 1,
                      options: dict | None = None) -> subprocess.Popen:
    spec = {"role": "send", "job": answer, "hosts": hosts_map(emu), "data": str(data), "timeout": timeout,
            "objects": objects, "options": options or {}, "auth_key": job_key(emu, answer)}
    return _popen(emu, answer["ps"], [emu.python, str(PEER), json.dumps(spec)], f"norm-tx-{answer['id']}")


def stop(receiver: subprocess.Popen) -> None:
    """Tell a receiver (`start_norm_receivers`) it may leave: the line "stop" on its stdin."""
    if receiver.stdin is not None and not receiver.stdin.closed:
        try:
            receiver.stdin.write("stop\n")
            receiver.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it ended already


def finish_norm(sender: subprocess.Popen, receivers: dict[str, subprocess.Popen], timeout: float = 180.0) -> dict:
    """{"sender": outcome, "workers": {w: outcome}, "completion_s": last worker's
    completion of the last object after the sender started (None unless all
    completed), "objects_s": each object's, from its `send` to the last worker
    holding it checked (None where some worker did not)}."""
    sent = _last_json(sender, timeout)
    for p in receivers.values():  # the PS has every confirmation it will get: the workers may leave
        stop(p)
    got = {w: _last_json(p, timeout) for w, p in receivers.items()}
    done = [r["results"][-1].get("done_at") for r in got.values() if r.get("results")]
    completion = None
    if sent.get("start_at") and len(done) == len(got) and all(done):
        completion = max(done) - sent["start_at"]
    per_object = []
    for k, start in enumerate(sent.get("starts", [])):
        at = [r["results"][k].get("done_at") for r in got.values() if len(r.get("results", [])) > k]
        per_object.append(max(at) - start if len(at) == len(got) and all(at) else None)
    return {"sender": sent, "workers": got, "completion_s": completion, "objects_s": per_object}


class NormPeers:
    """A job's NORM peers kept open across broadcasts (norm_peer's "serve" mode), as a
    training job keeps its sessions between iterations: `send()` once per object, then
    `close()`. Each process's output lines are read by a thread of their own into a
    queue, so that every wait has a deadline. `set_rate` may be called from another
    thread while `send` waits (a heartbeat of the job's broadcasting phase)."""

    def __init__(self, emu, answer: dict, workers: list[str], data: Path, *, timeout: float = 120.0,
                 options: dict | None = None, rx_options: dict | None = None) -> None:
        self.timeout = timeout
        self.lines: dict[str, queue.Queue] = {}
        self.errors: dict[str, deque[str]] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self._stdin = threading.Lock()  # one line at a time on the PS's stdin (send, set_rate: two threads)
        key, hosts = job_key(emu, answer), hosts_map(emu)
        try:
            for w in workers:
                spec = {"role": "receive", "job": answer, "hosts": hosts, "me": w, "serve": True,
                        "options": (rx_options or {}).get(w, {}), "auth_key": key}
                self._start(emu, w, w, spec, f"norm-rx-{answer['id']}-{w}")
            for w in workers:
                self._ready(w)
            spec = {"role": "send", "job": answer, "hosts": hosts, "data": str(data), "timeout": timeout,
                    "serve": True, "options": options or {}, "auth_key": key}
            self._start(emu, answer["ps"], "ps", spec, f"norm-tx-{answer['id']}")
            self._ready("ps")
        except BaseException:
            self.close()
            raise
        self.workers = list(workers)

    def _start(self, emu, host: str, name: str, spec: dict, tag: str) -> None:
        proc = _popen(emu, host, [emu.python, str(PEER), json.dumps(spec)], tag, stdin=subprocess.PIPE)
        lines: queue.Queue = queue.Queue()

        def read() -> None:
            for line in proc.stdout:
                if line.startswith("{"):
                    lines.put(json.loads(line))
            lines.put(None)  # the process ended

        errors: deque[str] = deque(maxlen=40)

        def drain() -> None:  # its stderr, so that a chatty peer never blocks on a full pipe
            for line in proc.stderr:
                errors.append(line)

        threading.Thread(target=read, name=f"norm-peer-{tag}", daemon=True).start()
        threading.Thread(target=drain, name=f"norm-peer-err-{tag}", daemon=True).start()
        self.procs[name], self.lines[name], self.errors[name] = proc, lines, errors

    def _next(self, name: str, deadline: float) -> dict:
        try:
            line = self.lines[name].get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return {"error": "PeerTimeout", "message": f"{name}: no answer in time"}
        if line is None:
            self.lines[name].put(None)
            return {"error": "PeerEnded", "message": f"{name}: the process ended",
                    "stderr": "".join(self.errors[name])[-2000:]}
        return line

    def _ready(self, name: str) -> None:
        line = self._next(name, time.monotonic() + 60.0)
        if line != {"ready": True}:
            raise RuntimeError(f"NORM peer {name} did not start: {line}")

    def send(self) -> dict:
        """One object: the answer `finish_norm` gives for one object ({"sender": outcome,
        "workers": {w: {"results": [outcome]}}, "completion_s": ...})."""
        deadline = time.monotonic() + self.timeout + 60
        with self._stdin:
            tx = self.procs["ps"]
            tx.stdin.write("send\n")
            tx.stdin.flush()
        sent = self._next("ps", deadline)
        if "error" in sent:  # the workers may still hold it: wait for them no longer than the sender did
            deadline = min(deadline, time.monotonic() + 5.0)
        got = {w: {"results": [self._next(w, deadline)]} for w in self.workers}
        done = [g["results"][0].get("done_at") for g in got.values()]
        completion = max(done) - sent["start_at"] if sent.get("start_at") and all(done) else None
        return {"sender": sent, "workers": got, "completion_s": completion}

    def set_rate(self, bps: float) -> None:
        """The job's payload rate is now `bps` (bit/s): the PS's Sender goes at it at once,
        also during a send (norm_peer's line "rate <bps>", `Sender.set_rate`). ValueError
        unless finite and > 0; nothing if the PS's process has ended (its send's answer
        says so)."""
        if not math.isfinite(bps) or bps <= 0:
            raise ValueError(f"a rate must be finite and positive, not {bps!r}")
        with self._stdin:
            try:
                self.procs["ps"].stdin.write(f"rate {float(bps)!r}\n")
                self.procs["ps"].stdin.flush()
            except (BrokenPipeError, OSError, ValueError):  # ValueError: its stdin closed (`close`)
                pass

    def close(self) -> None:
        for name, proc in self.procs.items():
            if proc.stdin is not None and not proc.stdin.closed:
                try:
                    proc.stdin.write("quit\n" if name == "ps" else "stop\n")
                    proc.stdin.close()
                except (BrokenPipeError, OSError):
                    pass
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def norm_transfer(emu, answer: dict, data: Path, *, timeout: float = 120.0, during=None, **kw) -> dict:
    receivers = start_norm_receivers(emu, answer, list(answer["workers"]), timeout=timeout,
                                     rx_options=kw.get("rx_options"))
    sender = start_norm_sender(emu, answer, data, timeout=timeout, options=kw.get("options"))
    if during:
        during(sender)
    return finish_norm(sender, receivers, timeout + 60)


# -- TCP baselines -------------------------------------------------------------------------------

def tcp_parallel_start(emu, ps: str, workers: list[str], data: Path, port: int = 15000) -> tuple:
    """(b): the PS sends the object to every worker at once, one TCP connection
    each. Returns what `tcp_finish` takes."""
    hosts = emu.fabric.hosts
    rx = {w: _popen(emu, w, [emu.python, str(TCP_PEER), "recv", "--port", str(port), "--size",
                             str(data.stat().st_size)], f"tcp-rx-{port}-{w}") for w in workers}
    for w, p in rx.items():
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"TCP receiver on {w} did not start: {p.stderr.read()[-2000:]}")
    tx = _popen(emu, ps, [emu.python, str(TCP_PEER), "send", "--data", str(data),
                          "--to", ",".join(f"{hosts[w].ip}:{port}" for w in workers)], f"tcp-tx-{port}-{ps}")
    return tx, rx


def tcp_chain_start(emu, ps: str, workers: list[str], data: Path, port: int = 15001) -> tuple:
    """(c): a pipelined chain PS -> w1 -> w2 -> ... (ring-style broadcast): each
    worker forwards every chunk to the next as it arrives."""
    hosts = emu.fabric.hosts
    procs = {}
    for i in reversed(range(len(workers))):  # the last first: each forwards to one already listening
        w = workers[i]
        argv = [emu.python, str(TCP_PEER), "recv", "--port", str(port), "--size", str(data.stat().st_size)]
        if i + 1 < len(workers):
            argv += ["--forward", f"{hosts[workers[i + 1]].ip}:{port}"]
        procs[w] = _popen(emu, w, argv, f"tcp-rx-{port}-{w}")
        if procs[w].stdout.readline().strip() != "ready":
            raise RuntimeError(f"TCP receiver on {w} did not start: {procs[w].stderr.read()[-2000:]}")
    tx = _popen(emu, ps, [emu.python, str(TCP_PEER), "send", "--data", str(data),
                          "--to", f"{hosts[workers[0]].ip}:{port}"], f"tcp-tx-{port}-{ps}")
    return tx, {w: procs[w] for w in workers}


def tcp_finish(started: tuple, timeout: float = 600.0) -> dict:
    return _tcp_finish(started[0], started[1], timeout)


def _tcp_finish(tx: subprocess.Popen, rx: dict[str, subprocess.Popen], timeout: float) -> dict:
    sent = _last_json(tx, timeout)
    got = {w: _last_json(p, timeout) for w, p in rx.items()}
    ok = all(g.get("ok") and g.get("sha256") == sent.get("sha256") for g in got.values())
    completion = max(g["done_at"] for g in got.values()) - sent["start_at"] if ok and "start_at" in sent else None
    return {"sender": sent, "workers": got, "completion_s": completion, "intact": ok}


# -- the REST API from a host -------------------------------------------------------------------

class ApiRelay:
    """`url_for(host)`: an http://127.0.0.1:PORT on that host that reaches the
    controller's REST API (emu_relay.py, through a unix socket)."""

    def __init__(self, emu, port: int = RELAY_PORT) -> None:
        self.emu = emu
        self.port = port
        self.sock = emu.rundir / "api.sock"
        api_port = int(emu.ctl.url.rsplit(":", 1)[1])
        self.procs = [self._start(None, f"unix:{self.sock}", f"tcp:127.0.0.1:{api_port}", "relay-api")]
        self.hosts: set[str] = set()

    def _start(self, host: str | None, listen: str, to: str, tag: str) -> subprocess.Popen:
        argv = [self.emu.python, str(RELAY), "--listen", listen, "--to", to]
        if host is None:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        else:
            proc = self.emu.fabric.host(host).popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.emu.ovs.record_pid(tag, proc.pid, str(RELAY))
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the API relay {listen} -> {to} did not start")
        return proc

    def url_for(self, host: str) -> str:
        if host not in self.hosts:
            self.procs.append(self._start(host, f"tcp:127.0.0.1:{self.port}", f"unix:{self.sock}", f"relay-{host}"))
            self.hosts.add(host)
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.procs.clear()


def run_example(emu, relay: ApiRelay, job_id: str, ps: str, workers: list[str], demand: float, *,
                iterations: int = 3, mb: float = 4.0, timeout: float = 120.0) -> dict[str, Any]:
    """examples/broadcast_weights.py: its workers, then its PS, each on its own
    host and using controller.client through the relay. Returns every process's
    JSON lines and exit status."""
    from controller.client import encode_key, new_key

    # the launcher makes the job's key and hands it to the PS (which registers the job with it)
    # and to the workers: the controller never gives it to anyone but the registrant
    common = ["--job-id", job_id, "--iterations", str(iterations), "--mb", str(mb), "--timeout", str(timeout),
              "--key", encode_key(new_key())]
    procs = {}
    for w in workers:
        procs[w] = _popen(emu, w, [emu.python, str(EXAMPLE), "worker", "--controller", relay.url_for(w),
                                   "--me", w, *common], f"example-{w}")
    procs[ps] = _popen(emu, ps, [emu.python, str(EXAMPLE), "ps", "--controller", relay.url_for(ps), "--ps", ps,
                                 "--workers", ",".join(workers), "--demand", str(demand), *common], f"example-{ps}")
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    for host, p in procs.items():
        try:
            stdout, stderr = p.communicate(timeout=max(1.0, timeout * (iterations + 1) - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        out[host] = {"rc": p.returncode, "lines": [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")],
                     "stderr": stderr[-2000:]}
    return out
