"""Counts of what the backends saw: host packets that reached the controller,
updates the switches refused, what the controller itself refused from the wire (a
forged probe, a spoofed host, a rogue switch: `refused`); and the sources of
per-job data-plane counters.

The backends count here by name (`backend_error("openflow")`, `refused(kind)`),
and register the sources of what their switches count themselves: per-job
packets (`job_counter_sources`) and the source guard's drops per port
(`guard_drop_sources`), read at scrape time;
/metrics and /healthz read it. The core knows the names, not the backends.
Failovers (`failover(by)`, issue 26): a tree link went down and a job's stream
was moved to a backup by the switch ("data_plane") or waits for the re-plan
("controller").

A refusal is also logged, at most once per (kind, switch, port) per
`REFUSAL_LOG_EVERY_S` (`refused(..., switch=, port=, why=)`): a host flooding forged
frames must not flood the log. The rate limiter remembers at most
`MAX_LOGGED_REFUSALS` keys, the oldest forgotten first.

Host joins in a learned network are measured (`host_joined(stage, seconds)`, /metrics
`mcast_host_join_seconds{stage}`, a histogram with `JOIN_BUCKETS`): from the host's
first packet to the plan with its unicast routes handed to the backends
("planned"), and to that plan acknowledged by the switches, seen when an ARP
answer held for it is sent ("installed"). The last `MAX_JOIN_SAMPLES` samples
of each stage are kept for their quantiles (`host_join_quantile`).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

REFUSAL_LOG_EVERY_S = 60.0
MAX_JOIN_SAMPLES = 1024
JOIN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)  # seconds (upper bounds)
MAX_LOGGED_REFUSALS = 10_000

# (job, switch) -> (packets, bytes): a backend's per-job counters, read at scrape time
JobCounterSource = Callable[[], Mapping[tuple[str, str], tuple[int, int]]]
# (switch, port) -> packets the data plane's source guard refused there (issue 22),
# read from the switches at scrape time: one entry per switch port at most
GuardDropSource = Callable[[], Mapping[tuple[str, int], int]]


class Counters:
    """Thread-safe event counts (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._packet_ins: dict[str, int] = {"arp": 0, "ipv4": 0}
        self._errors: dict[str, int] = {}
        self._refused: dict[str, int] = {}
        self._logged: collections.OrderedDict[tuple, float] = collections.OrderedDict()
        # stage -> (per-bucket counts (the last: above every bound), count, sum)
        self._joins: dict[str, tuple[list[int], int, float]] = {}
        self._join_samples: dict[str, collections.deque[float]] = {}
        # callables giving {(job, switch): (packets, bytes)} (the P4Runtime backend's
        # direct counters), read at /metrics scrape time
        self.job_counter_sources: list[JobCounterSource] = []
        # callables giving {(switch, port): packets} the source guard dropped (both
        # backends: OpenFlow guard flows' stats, the P4 guard counter), read at scrape time
        self.guard_drop_sources: list[GuardDropSource] = []
        self._failovers: dict[str, int] = {}  # by -> jobs moved off a link that went down (`failover`)
        self._repairs: list[float] = [0, 0.0, 0.0]  # failover repairs measured by a switch: count, sum, longest (s)

    def failover(self, by: str, n: int = 1) -> None:
        """`n` jobs' streams lost a link of their tree: `by` "data_plane" (a
        fast-failover group moved them to a backup) or "controller" (no backup:
        the re-plan repairs them)."""
        if by not in ("data_plane", "controller"):
            raise ValueError(f"failover by must be data_plane or controller, not {by!r}")
        with self._lock:
            self._failovers[by] = self._failovers.get(by, 0) + n

    def failovers(self) -> dict[str, int]:
        """By ("data_plane", "controller") -> the failovers counted."""
        with self._lock:
            return {"data_plane": 0, "controller": 0, **self._failovers}

    def failover_repair(self, seconds: float) -> None:
        """A switch failed over in the data plane and measured `seconds` from the
        last packet heard on the watched port to the first packet its backup carried
        (P4: `p4runtime.fast_failover`)."""
        if not seconds >= 0:
            raise ValueError(f"a repair time must be a number of seconds >= 0, not {seconds!r}")
        with self._lock:
            self._repairs[0] += 1
            self._repairs[1] += seconds
            self._repairs[2] = max(self._repairs[2], seconds)

    def failover_repairs(self) -> tuple[int, float, float]:
        """(repairs measured, their sum in seconds, the longest)."""
        with self._lock:
            return int(self._repairs[0]), self._repairs[1], self._repairs[2]

    def packet_in(self, kind: str) -> None:
        """A host's packet reached the controller: "arp", or "ipv4" (an unknown-source copy)."""
        with self._lock:
            self._packet_ins[kind] = self._packet_ins.get(kind, 0) + 1

    def backend_error(self, backend: str, n: int = 1) -> None:
        """A switch of `backend` refused `n` messages or updates."""
        with self._lock:
            self._errors[backend] = self._errors.get(backend, 0) + n

    def refused(self, kind: str, n: int = 1, *, switch: str | None = None, port: int | None = None,
                why: str = "") -> None:
        """The controller refused `n` things of `kind` (a forged LLDP probe, a spoofed
        host, a rogue switch, ...) at (`switch`, `port`): counted (/metrics
        `mcast_refused_total{kind}`) and logged with `why`, at most once per (kind,
        switch, port) per REFUSAL_LOG_EVERY_S."""
        now = self._clock()
        key = (kind, switch, port)
        with self._lock:
            self._refused[kind] = self._refused.get(kind, 0) + n
            last = self._logged.get(key)
            if last is not None and now - last < REFUSAL_LOG_EVERY_S:
                return
            self._logged[key] = now
            self._logged.move_to_end(key)
            while len(self._logged) > MAX_LOGGED_REFUSALS:
                self._logged.popitem(last=False)
        where = f"{switch} port {port}" if port is not None else (switch or "the controller")
        log.warning("refused (%s) at %s%s", kind, where, f": {why}" if why else "")

    def host_joined(self, stage: str, seconds: float) -> None:
        """A host's join reached `stage` ("planned", "installed") `seconds` after its first packet."""
        with self._lock:
            buckets, n, total = self._joins.get(stage) or ([0] * (len(JOIN_BUCKETS) + 1), 0, 0.0)
            buckets[next((i for i, b in enumerate(JOIN_BUCKETS) if seconds <= b), len(JOIN_BUCKETS))] += 1
            self._joins[stage] = (buckets, n + 1, total + seconds)
            self._join_samples.setdefault(stage, collections.deque(maxlen=MAX_JOIN_SAMPLES)).append(seconds)

    def host_join_quantile(self, stage: str, q: float) -> float | None:
        """The `q` quantile (nearest rank) of the last samples of `stage`; None without any."""
        with self._lock:
            samples = sorted(self._join_samples.get(stage, ()))
        if not samples:
            return None
        return samples[min(len(samples) - 1, max(0, int(-(-q * len(samples) // 1)) - 1))]

    def host_joins(self) -> dict[str, tuple[list[int], int, float]]:
        """Stage -> (non-cumulative counts per bucket of JOIN_BUCKETS, then above them; count; sum)."""
        with self._lock:
            return {k: (list(b), n, t) for k, (b, n, t) in self._joins.items()}

    def refusals(self) -> dict[str, int]:
        """Kind -> how many the controller refused."""
        with self._lock:
            return dict(self._refused)

    def packet_ins(self) -> dict[str, int]:
        with self._lock:
            return dict(self._packet_ins)

    def errors(self) -> dict[str, int]:
        """Backend -> the messages or updates its switches refused."""
        with self._lock:
            return dict(self._errors)

    def job_counters(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(job, switch) -> (packets, bytes) from every source (a failing one is
        logged and left out)."""
        return _merged(self.job_counter_sources, "counter")

    def guard_drops(self) -> dict[tuple[str, int], int]:
        """(switch, port) -> packets the data plane's source guard refused there,
        from every source (a failing one is logged and left out)."""
        return _merged(self.guard_drop_sources, "guard drop")


def _merged(sources: list[Callable[[], Mapping[K, V]]], what: str) -> dict[K, V]:
    """What every source gives, merged in order; a source that raises is logged
    ("<what> source ... failed") and left out: a scrape must not fail for one source."""
    out: dict[K, V] = {}
    for source in list(sources):
        try:
            out.update(source())
        except Exception:  # noqa: BLE001 - a scrape must not fail for one source
            log.exception("%s source %r failed", what, source)
    return out
