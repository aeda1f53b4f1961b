"""Training iterations with real bytes on the emulated fabric (mininet/iteration_bench.py).

Owns the pieces of one policy's run: the fabric (`FabricSpec`: per-tier link
bandwidths and group budgets, as `topology.links` and per-switch budgets of the
controller's config, so the controller plans on the capacities Mininet emulates),
the jobs' placement (`layout`), and one job's iterations (`run_job`):

  1. broadcast: the PS sends the model (a file of random bytes) to every worker,
     over NORM along the controller's plan (the job's sessions kept open across its
     iterations, emu_broadcast.NormPeers; or new ones per broadcast, norm_transfer's
     pieces) or over TCP (emu_broadcast.tcp_parallel_start / tcp_chain_start); every
     worker's SHA-256 must equal the model's. With `phased` (iteration_bench's
     --phase-rates) a NORM broadcast is announced to the controller as the job's
     broadcasting phase (`phase`), its PS going at the rate the controller answers;
  2. compute: `compute_s` of sleep;
  3. upload: every worker sends its gradient (`grad_bytes` of random bytes) to the
     PS over TCP at once (mininet/tcp_peer.py, one connection per worker): the
     same for every policy.

Times are CLOCK_MONOTONIC, one clock for every namespace of the machine:
broadcast = the PS's sender start -> the last worker holding the verified model;
upload = the first worker's send -> the PS holding every gradient. Each job
runs in a thread of its own (Mininet's `popen` is a plain `subprocess.Popen` of
`mnexec`, safe from several threads), so the jobs' iterations overlap as they
would in a cluster: all start together, then drift apart.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import math
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import emu_broadcast as eb
from controller.client.phases import Announcement
from emu_fabric import PLANNER_SHARE
from emu_session import REPO

NORM_POLICIES = ("lp-rounding", "spt", "greedy", "unicast")  # planner.algorithm of the controller's run
TCP_POLICIES = ("tcp-parallel", "tcp-chain")
POLICIES = NORM_POLICIES + TCP_POLICIES
TCP_PEER = Path(__file__).resolve().parent / "tcp_peer.py"
# a broadcasting job (`phase`) re-announces itself this often: the controller forgets an
# announcement after planner.broadcast_ttl_s (10 s by default), and each answer carries the
# job's current rate, which other jobs' phases change
PHASE_RENEW_S = 0.5
PHASE_REQUEST_S = 5.0  # at most this long per announcement (the next one replaces a late one)


@dataclass(frozen=True)
class FabricSpec:
    """A k=4 fat-tree with one bandwidth per tier (Mbit/s, as Mininet emulates it)
    and group budgets of edge/aggregation and of core switches (`core_groups`: one
    for every core switch, or one each, core-0 first: mixed budgets)."""

    host_mbit: float = 10.0
    edge_agg_mbit: float = 5.0
    agg_core_mbit: float = 2.5
    groups: int = 2
    core_groups: int | tuple[int, ...] = 0
    k: int = 4

    def __post_init__(self) -> None:
        for name in ("host_mbit", "edge_agg_mbit", "agg_core_mbit"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        cores = (self.k // 2) ** 2
        each = self.core_groups if isinstance(self.core_groups, tuple) else (self.core_groups,)
        if isinstance(self.core_groups, tuple) and len(each) != cores:
            raise ValueError(f"core_groups needs one budget per core switch ({cores}), got {len(each)}")
        for name, values in (("groups", (self.groups,)), ("core_groups", each)):
            if any(v < 0 for v in values):
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")

    def links(self) -> list[dict[str, Any]]:
        """`topology.links` overrides: every edge-aggregation and aggregation-core
        link at its tier's capacity (the planner's share of the emulated bandwidth,
        emu_fabric.PLANNER_SHARE). Empty when every tier runs at the host links' rate."""
        from controller.algorithm.topologies import fat_tree

        host = self.link_bps("host", "edge")
        return [{"a": link.a, "b": link.b, "capacity": bps} for link in fat_tree(self.k, 1.0).links
                if (bps := self.link_bps(link.a, link.b)) != host]

    def link_bps(self, a: str, b: str) -> float:
        """The planner's capacity of the link between switches or hosts `a` and `b`
        (named as the fat-tree names them), bit/s: its tier's rate x PLANNER_SHARE."""
        kinds = frozenset((a.split("-")[0], b.split("-")[0]))
        mbit = {frozenset(("edge", "agg")): self.edge_agg_mbit,
                frozenset(("agg", "core")): self.agg_core_mbit}.get(kinds, self.host_mbit)
        return mbit * 1e6 * PLANNER_SHARE

    def alone_bps(self, structure: dict[str, Any]) -> float | None:
        """The highest rate a job's structure (a REST answer's `structure`) allows when
        the job is alone on the fabric: min over its links of capacity / copies (a
        link that carries two copies of the job's stream halves it); None without
        links."""
        edges = structure.get("edges") or []
        if not edges:
            return None
        return min(self.link_bps(e["from"], e["to"]) / e["copies"] for e in edges)

    def core_budgets(self) -> dict[str, int]:
        cores = range((self.k // 2) ** 2)
        if isinstance(self.core_groups, tuple):
            return {f"core-{i}": self.core_groups[i] for i in cores}
        return {f"core-{i}": self.core_groups for i in cores}


def full_bisection(host_mbit: float = 10.0, groups: int = 2, core_groups: int | tuple[int, ...] = 0) -> FabricSpec:
    return FabricSpec(host_mbit, host_mbit, host_mbit, groups, core_groups)


@dataclass(frozen=True)
class JobSpec:
    id: str
    ps: str
    workers: tuple[str, ...]


def layout(n_jobs: int, k: int = 4) -> list[JobSpec]:
    """`n_jobs` jobs (1..8) on the k=4 fat-tree's 16 hosts: job i's PS is in pod
    i mod 4 (host 4p for the first four, 4p+2 for the next four); its 4 workers
    are 2 in each of the next two pods, one under each edge switch. Every job
    crosses the core; hosts are shared between jobs (a host is a worker of up to
    three jobs and perhaps a PS)."""
    if not 1 <= n_jobs <= 8 or k != 4:
        raise ValueError(f"jobs must be 1..8 on the k=4 fat-tree, got {n_jobs}")
    out = []
    for i in range(n_jobs):
        p = i % 4
        ps = 4 * p + 2 * (i // 4)
        workers = []
        for q in ((p + 1) % 4, (p + 2) % 4):
            workers += [f"host-{4 * q + (i % 2)}", f"host-{4 * q + 2 + (i // 2) % 2}"]
        out.append(JobSpec(f"job{i}", f"host-{ps}", tuple(workers)))
    return out


@dataclass
class Iteration:
    broadcast_s: float | None
    compute_s: float
    upload_s: float | None
    iteration_s: float | None  # broadcast + compute + upload
    wall_s: float  # the iteration as the job's thread lived it, process starts included
    verified: dict[str, bool]
    error: str | None = None
    # NORM: where the broadcast's time went (`broadcast_detail`): the sender's rounds and
    # round-trip estimate, each worker's first events and completion, s after the sender's start
    detail: dict[str, Any] | None = None


@dataclass
class JobRun:
    id: str
    ps: str
    workers: list[str]
    mode: str | None = None  # NORM: the plan's mode
    planned_bps: float | None = None
    alone_bps: float | None = None  # NORM: the most its structure allows alone on the fabric (FabricSpec.alone_bps)
    iterations: list[Iteration] = field(default_factory=list)
    completion_s: float | None = None  # from the policy's start to the job's last gradient
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _popen(emu, host: str, argv: list[str], tag: str) -> subprocess.Popen:
    proc = emu.fabric.host(host).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    emu.ovs.record_pid(tag, proc.pid, str(argv[1]))
    return proc


def _answer(proc: subprocess.Popen, timeout: float) -> dict:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return {"error": f"no answer within {timeout:g} s", "stderr": err[-1000:]}
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": "no output", "stderr": err[-1000:]}


def upload(emu, job: JobSpec, index: int, grad: Path, timeout: float) -> tuple[float | None, str | None]:
    """Every worker sends `grad` to the PS at once; (seconds, error). An empty `grad`
    (`--grad-fraction 0`): no upload, (0.0, None)."""
    size = grad.stat().st_size
    if size == 0:
        return 0.0, None
    ps_ip = emu.fabric.hosts[job.ps].ip
    rx, tx = {}, {}
    for n, w in enumerate(job.workers):
        port = 16000 + 10 * index + n
        rx[w] = _popen(emu, job.ps, [emu.python, str(TCP_PEER), "recv", "--port", str(port), "--size", str(size),
                                     "--timeout", str(timeout)], f"grad-rx-{job.id}-{n}")
    for w, p in rx.items():
        if p.stdout.readline().strip() != "ready":
            return None, f"gradient receiver for {w} did not start: {p.stderr.read()[-500:]}"
    for n, w in enumerate(job.workers):
        tx[w] = _popen(emu, w, [emu.python, str(TCP_PEER), "send", "--data", str(grad), "--to",
                                f"{ps_ip}:{16000 + 10 * index + n}", "--timeout", str(timeout)], f"grad-tx-{job.id}-{n}")
    sent = {w: _answer(p, timeout) for w, p in tx.items()}
    got = {w: _answer(p, timeout) for w, p in rx.items()}
    bad = [w for w in job.workers if not got[w].get("ok") or got[w].get("sha256") != sent[w].get("sha256")]
    if bad:
        return None, f"gradients of {bad} did not arrive intact: {[got[w] for w in bad]}"
    return max(g["done_at"] for g in got.values()) - min(s["start_at"] for s in sent.values()), None


def broadcast_detail(r: dict[str, Any]) -> dict[str, Any]:
    """From `emu_broadcast.finish_norm`'s answer: the sender's watermark rounds and
    final round-trip estimate, and per worker the times (s after the sender's start)
    of its first NORM events (norm_peer's `first`: the sender seen, the object new,
    its first data) and of holding the verified object; `rates_applied`: the rates the
    sender took during its send ([s after its start, bit/s], norm_peer's `rates`)."""
    sent = r["sender"]
    start = sent.get("start_at")
    report = sent.get("report") or {}
    out: dict[str, Any] = {"rounds": report.get("rounds", sent.get("rounds")),
                           "grtt_s": report.get("grtt_s", sent.get("grtt_s")),
                           "sessions": [{"address": a, "workers": ws, "multicast": m}
                                        for a, ws, m, _ in report.get("sessions", [])],
                           "sender": {}, "workers": {}}
    if start is None:
        return out
    out["sender"] = {k.lower(): round(t - start, 4) for k, t in sent.get("first", {}).items()}
    if sent.get("rates"):
        out["rates_applied"] = [[round(t - start, 4), bps] for t, bps in sent["rates"]]
    for w, g in r["workers"].items():
        res = (g.get("results") or [{}])[-1]
        first = res.get("first", {})
        out["workers"][w] = {
            "done_s": res["done_at"] - start if res.get("done_at") else None,
            **{k.lower(): round(t - start, 4) for k, t in first.items()}}
    return out


_HTB_RATE = re.compile(r"class htb 5:1 root .*?rate (\d+(?:\.\d+)?)([KMG]?)bit")


def _shaped(emu):
    """(interface, its htb rate in bit/s) for every shaped end of every emulated link."""
    for link in emu.fabric.net.links:
        for intf in (link.intf1, link.intf2):
            m = _HTB_RATE.search(intf.node.cmd(f"tc class show dev {intf.name}"))
            if m is not None:
                yield intf, int(float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)])


def queue_packets(bps: int, queue_ms: float | None) -> int:
    """The FIFO length, in full frames, of a link queue holding `queue_ms` of `bps`
    (at least 4 frames); None: Linux's default for the veths, 1000 packets."""
    if queue_ms is None:
        return 1000
    return max(4, math.ceil(bps * queue_ms / 1e3 / (1514 * 8)))


def _tc(intf, commands: list[str]) -> None:
    out = "".join(intf.node.cmd(c) for c in commands)
    errors = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("Warning")]
    if errors:
        raise RuntimeError(f"tc on {intf.name}: {' '.join(errors)}")


def size_queues(emu, queue_ms: float) -> int:
    """`--queue-ms`: every emulated link's queue (the FIFO under each end's htb class,
    Mininet's 5:1) holds `queue_ms` of the link's rate (`queue_packets`) instead of the
    veth's default 1000 packets (4.8 s at 2.5 Mbit/s). Returns the interfaces changed,
    each read back (RuntimeError if one does not hold its new FIFO)."""
    n = 0
    for intf, bps in _shaped(emu):
        limit = queue_packets(bps, queue_ms)
        _tc(intf, [f"tc qdisc replace dev {intf.name} parent 5:1 handle 10: pfifo limit {limit}"])
        if not re.search(rf"qdisc pfifo 10: parent 5:1 limit {limit}p", intf.node.cmd(f"tc qdisc show dev {intf.name}")):
            raise RuntimeError(f"tc on {intf.name}: no pfifo of {limit} packets under 5:1")
        n += 1
    return n


def prioritise(emu, dscp: int, queue_ms: float | None = None) -> int:
    """An experiment (`--priority-dscp`), not the production design: every emulated
    link's queue (each end's htb class, Mininet's 5:1 at the link's rate) is split in
    two htb classes, 5:10 for packets whose DSCP is `dscp` (the link's whole rate,
    priority 0) and 5:20 for everything else (1 % of the rate assured, the rest only
    what 5:10 leaves: priority 1), each a 1000-packet FIFO: strict priority but for
    that 1 %. (This kernel has htb and u32 but no prio qdisc.) The NORM peers mark
    their own packets (`Sender`/`Receiver` `tos`), and no edge resets a host's DSCP,
    so any host could claim the class here; or (`--planned-class`) the controller
    marks the planned traffic at its edge and resets the rest
    (`southbound.planned_dscp`), the hosts marking nothing. Each FIFO holds `queue_packets(rate,
    queue_ms)`. Returns the number of interfaces changed."""
    n = 0
    for intf, bps in _shaped(emu):
        dev = f"dev {intf.name}"
        limit = queue_packets(bps, queue_ms)
        _tc(intf, [
            f"tc class add {dev} parent 5:1 classid 5:10 htb rate {bps}bit prio 0 quantum 1514",
            f"tc class add {dev} parent 5:1 classid 5:20 htb rate {max(8000, bps // 100)}bit ceil {bps}bit "
            "prio 1 quantum 1514",
            f"tc qdisc add {dev} parent 5:10 handle 11: pfifo limit {limit}",
            f"tc qdisc add {dev} parent 5:20 handle 12: pfifo limit {limit}",
            f"tc filter add {dev} parent 5: protocol ip prio 1 u32 match ip tos {dscp << 2} 0xfc flowid 5:10",
            f"tc filter add {dev} parent 5: protocol all prio 2 u32 match u32 0 0 flowid 5:20"])
        n += 1
    return n


_METER_OF_FLOW = re.compile(r"cookie=0x4d430([27])\S*.*?meter:(\d+)")


def meter_drops_by_kind(emu) -> dict[str, int]:
    """Packets the meters dropped so far, by what they police: "multicast" (a job's
    stream at its PS's edge switch), and with the planned class (`--planned-class`)
    "unicast" (the PS's sessions to its workers) and "feedback" (the workers' NACKs
    and ACKs), from `ovs-ofctl dump-flows` (which flow uses which meter) and
    `meter-stats` of every switch."""
    out = {"multicast": 0, "unicast": 0, "feedback": 0}
    for name in emu.fabric.names:
        if name in emu.fabric.hosts or emu.fabric.names[name].startswith("h"):
            continue
        kinds = {}
        for line in emu.fabric.ofctl("dump-flows", name).splitlines():
            m = _METER_OF_FLOW.search(line)
            if m:
                dst = "tp_dst=" in line or "udp_dst=" in line  # the PS's session: to the job's port
                kinds[int(m.group(2))] = "multicast" if m.group(1) == "2" else "unicast" if dst else "feedback"
        for mid, n in eb._METER_BAND.findall(emu.fabric.ofctl("meter-stats", name)):
            if int(mid) in kinds:
                out[kinds[int(mid)]] += int(n)
    return out


def _norm_options(tos: int | None) -> dict[str, int]:
    """Every NORM peer's options (Sender and Receiver alike): its TOS byte, if any."""
    return {} if tos is None else {"tos": tos}


def norm_peers(emu, job: JobSpec, model: Path, timeout: float, tos: int | None = None) -> eb.NormPeers:
    """The job's NORM sender and receivers, open until closed (`run_job`'s default: a
    training job keeps its sessions between iterations)."""
    opts = _norm_options(tos)
    return eb.NormPeers(emu, emu.jobs[job.id].answer, list(job.workers), model, timeout=timeout, options=opts,
                        rx_options={w: opts for w in job.workers})


def phase(emu, job_id: str, peers: eb.NormPeers, renew_s: float | None = None) -> Announcement:
    """A NORM job's broadcasting phase, for the time of one broadcast (`with phase(...)`
    around the send): the client library's `Announcement` (controller/client/phases.py:
    announced before the send, renewed every `renew_s`, PHASE_RENEW_S, each answered rate
    applied, the end announced and its rate applied), the PS's rate set through its kept
    process (`NormPeers.set_rate`), the controller asked as this emulation's driver asks it
    (`emu.ctl.request`, the bench's token). Only an answer 200 with a rate counts."""
    return Announcement(announcer(emu, job_id), peers.set_rate,
                        renew_s=PHASE_RENEW_S if renew_s is None else renew_s)


def announcer(emu, job_id: str) -> Callable[[bool], float | None]:
    """`announce(active)` for `job_id`: PUT /jobs/{id}/broadcasting as this emulation's
    driver asks the controller, the job's rate now answered; raises unless the answer is
    200 with a body."""
    path = f"/jobs/{job_id}/broadcasting"

    def announce(active: bool) -> float | None:
        if emu.ctl is None:
            raise ConnectionError("no controller (HA: no leader found)")
        try:
            status, body = emu.ctl.request("PUT", path, {"active": active}, timeout=PHASE_REQUEST_S)
        except (OSError, ValueError, http.client.HTTPException) as e:  # no answer, or not JSON
            raise ConnectionError(f"PUT {path}: {type(e).__name__}: {e}") from e
        if status != 200 or not isinstance(body, dict):
            raise RuntimeError(f"PUT {path}: {status} {str(body)[:200]}")
        return body.get("rate")

    return announce


def declare_phased(emu, jobs: list[JobSpec]) -> None:
    """Announce every job idle before its first broadcast, as a training job that announces
    its phases does once registered: a job that has not announced yet keeps its whole plan
    reserved (docs/controller.md, "Phase-aware rates"), so without this the first broadcasts
    of the jobs that start first could not use what the later ones leave."""
    for job in jobs:
        announcer(emu, job.id)(False)


def phase_detail(announced: Announcement, since: float) -> dict[str, Any]:
    """For `broadcast_detail`: {"rates": [[s after `since` (a monotonic time), bit/s], ...],
    "failed": the announcements that failed}."""
    shift = announced.entered_at - since
    return {"rates": [[round(t + shift, 4), bps] for t, bps in announced.rates], "failed": announced.failures}


def broadcast(emu, policy: str, job: JobSpec, index: int, model: Path, sha: str,
              timeout: float, tos: int | None = None,
              peers: eb.NormPeers | None = None, *, phased: bool = False) -> tuple[float | None, dict[str, bool],
                                                                                   str | None, dict[str, Any] | None]:
    """The model to every worker by `policy`; (seconds, {worker: digest verified}, error,
    NORM's `broadcast_detail` or None). `tos`: the NORM peers' IP TOS byte (`prioritise`).
    A NORM policy sends on `peers` (kept open) if given, else from new processes.
    `phased` (NORM on `peers` only; ignored by the TCP policies): the send is the job's
    broadcasting phase (`phase`), the PS's rate the controller's answer; the detail's
    "phase" has the rates set (s after the sender's start: negative, before it; after the
    phase's first announcement if the sender never started) and the failed announcements."""
    workers = list(job.workers)
    detail = None
    if policy in NORM_POLICIES:
        if phased and peers is None:
            raise ValueError("a phased broadcast needs the job's kept sessions (peers): its rate changes mid-send")
        announced = phase(emu, job.id, peers) if phased else None
        if peers is not None:
            with announced or contextlib.nullcontext():
                r = peers.send()
        else:
            answer = emu.jobs[job.id].answer
            opts = _norm_options(tos)
            receivers = eb.start_norm_receivers(emu, answer, workers, timeout=timeout,
                                                rx_options={w: opts for w in workers})
            sender = eb.start_norm_sender(emu, answer, model, timeout=timeout, options=opts)
            r = eb.finish_norm(sender, receivers, timeout + 60)
        verified = {w: bool(g.get("results") and g["results"][-1].get("ok") and g["results"][-1].get("sha256") == sha)
                    for w, g in r["workers"].items()}
        error = r["sender"].get("message") or r["sender"].get("error")
        detail = broadcast_detail(r)
        if announced is not None:
            detail["phase"] = phase_detail(announced, r["sender"].get("start_at") or announced.entered_at)
    else:
        start = eb.tcp_parallel_start if policy == "tcp-parallel" else eb.tcp_chain_start
        started = start(emu, job.ps, workers, model, port=(15000 if policy == "tcp-parallel" else 15100) + index)
        r = eb.tcp_finish(started, timeout)
        verified = {w: bool(g.get("ok") and g.get("sha256") == sha) for w, g in r["workers"].items()}
        error = r["sender"].get("error")
    if not all(verified.values()) and error is None:
        error = f"not verified at {sorted(w for w, ok in verified.items() if not ok)}"
    return (r["completion_s"] if all(verified.values()) else None), verified, error, detail


def run_job(emu, policy: str, job: JobSpec, index: int, model: Path, grad: Path, *, iterations: int, compute_s: float,
            t0: float, timeout: float, out: JobRun, tos: int | None = None, keep_sessions: bool = True,
            phased: bool = False, delay_s: float = 0.0) -> None:
    """The job's iterations, one after the other, into `out` (a thread's target:
    an exception is kept as `out.error`). A NORM policy's sessions stay open across the
    iterations (`keep_sessions`), else every broadcast starts new NORM processes.
    `phased`: every broadcast is announced to the controller as the job's broadcasting
    phase (`phase`; needs `keep_sessions`). `delay_s`: the job starts this long after
    `t0` (its sessions opened first), and its completion time counts from then."""
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    peers = None
    try:
        if policy in NORM_POLICIES and keep_sessions:
            peers = norm_peers(emu, job, model, timeout, tos)
        t0 += delay_s
        time.sleep(max(0.0, t0 - time.monotonic()))
        for _ in range(iterations):
            started = time.monotonic()
            b_s, verified, error, detail = broadcast(emu, policy, job, index, model, sha, timeout, tos, peers,
                                                     phased=phased)
            if error is not None:
                out.iterations.append(Iteration(b_s, compute_s, None, None, time.monotonic() - started, verified, error,
                                                detail))
                out.error = error
                return
            time.sleep(compute_s)
            u_s, error = upload(emu, job, index, grad, timeout)
            total = b_s + compute_s + u_s if b_s is not None and u_s is not None else None
            out.iterations.append(Iteration(b_s, compute_s, u_s, total, time.monotonic() - started, verified, error,
                                            detail))
            if error is not None:
                out.error = error
                return
        out.completion_s = time.monotonic() - t0
    except Exception as e:  # noqa: BLE001 - reported per job, the other jobs go on
        out.error = f"{type(e).__name__}: {e}"
    finally:
        if peers is not None:
            peers.close()


def rendezvous(emu, jobs: list[JobSpec], timeout: float = 5.0) -> dict[str, float | None]:
    """Every worker exchanges one packet with its PS (a ping), all at once, before the
    first iteration, as a training job's processes meet before its first broadcast
    (torch.distributed's rendezvous, the workers' registration). {"worker->ps": seconds
    the ping took, None if it got no answer}.

    Why: without it a worker's first packet to its PS is NORM's first answer (a
    round-trip probe's answer, an ACK, a NACK) during the first broadcast, and needs
    an ARP resolution first: with every job starting at once this resolution took
    1-2.4 s in the emulation (the controller answers the fabric's ARP; docs/emulation.md,
    "Why the first multicast broadcast was slow"), NORM took those answers' delay for
    the round-trip time (its estimate grew to 0.4-1.2 s), and every repair round of that
    broadcast waited that long. The unicast policies never paid it: the PS's own ARP
    for the worker (its first unicast packet, or TCP's SYN) teaches the worker the
    PS's address."""
    procs = {}
    for job in jobs:
        ps_ip = emu.fabric.hosts[job.ps].ip
        for w in job.workers:
            if f"{w}->{job.ps}" not in procs:
                procs[f"{w}->{job.ps}"] = emu.fabric.host(w).popen(
                    ["ping", "-c", "1", "-W", str(max(1, int(timeout))), ps_ip],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: dict[str, float | None] = {}
    for key, proc in procs.items():
        try:
            text, _ = proc.communicate(timeout=timeout + 5)
        except subprocess.TimeoutExpired:
            proc.kill()
            text, _ = proc.communicate()
        rtt = [ln.split("time=")[1].split()[0] for ln in text.splitlines() if "time=" in ln]
        out[key] = float(rtt[0]) / 1000 if proc.returncode == 0 and rtt else None
    return out


def run_jobs(emu, policy: str, jobs: list[JobSpec], model: Path, grad: Path, *, iterations: int, compute_s: float,
             timeout: float, tos: int | None = None, keep_sessions: bool = True,
             phased: bool = False, stagger_s: float = 0.0,
             fabric: FabricSpec | None = None) -> tuple[list[JobRun], int, float]:
    """Every job's iterations at the same time (a thread each); (runs, link bytes, seconds).
    `phased`: every job announced idle first (`declare_phased`), then each broadcast
    announced as its job's broadcasting phase (`run_job`).
    `stagger_s`: job i of n starts i × stagger_s / n after the first (0: all at once), as
    jobs of a shared cluster start when they were submitted, not together.
    `fabric`: each NORM job's `alone_bps` is its structure's (`FabricSpec.alone_bps`)."""
    runs = []
    for spec in jobs:
        run = JobRun(spec.id, spec.ps, list(spec.workers))
        if policy in NORM_POLICIES:
            a = emu.jobs[spec.id].answer
            run.mode, run.planned_bps = a["mode"], a.get("planned_rate", a["rate"])
            if fabric is not None and "structure" in a:
                run.alone_bps = fabric.alone_bps(a["structure"])
        runs.append(run)
    if phased and policy in NORM_POLICIES:
        declare_phased(emu, jobs)
    time.sleep(1.0)  # the links quiet
    before = eb.link_bytes(emu)
    t0 = time.monotonic()
    threads = [threading.Thread(target=run_job, args=(emu, policy, spec, i, model, grad),
                                kwargs={"iterations": iterations, "compute_s": compute_s, "t0": t0,
                                        "timeout": timeout, "out": run, "tos": tos,
                                        "keep_sessions": keep_sessions, "phased": phased,
                                        "delay_s": i * stagger_s / len(jobs)}, daemon=True)
               for i, (spec, run) in enumerate(zip(jobs, runs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    time.sleep(1.0)
    return runs, eb.link_bytes(emu) - before, took
