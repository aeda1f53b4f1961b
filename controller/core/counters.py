"""Counts of what the backends saw: host packets that reached the controller, and
updates the switches refused; and the sources of per-job data-plane counters.

The backends count here by name (`backend_error("openflow")`); /metrics and
/healthz read it. The core knows the names, not the backends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

# (job, switch) -> (packets, bytes): a backend's per-job counters, read at scrape time
JobCounterSource = Callable[[], Mapping[tuple[str, str], tuple[int, int]]]


class Counters:
    """Thread-safe event counts (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._packet_ins: dict[str, int] = {"arp": 0, "ipv4": 0}
        self._errors: dict[str, int] = {}
        # callables giving {(job, switch): (packets, bytes)} (the P4Runtime backend's
        # direct counters), read at /metrics scrape time
        self.job_counter_sources: list[JobCounterSource] = []

    def packet_in(self, kind: str) -> None:
        """A host's packet reached the controller: "arp", or "ipv4" (an unknown-source copy)."""
        with self._lock:
            self._packet_ins[kind] = self._packet_ins.get(kind, 0) + 1

    def backend_error(self, backend: str, n: int = 1) -> None:
        """A switch of `backend` refused `n` messages or updates."""
        with self._lock:
            self._errors[backend] = self._errors.get(backend, 0) + n

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
        out: dict[tuple[str, str], tuple[int, int]] = {}
        for source in list(self.job_counter_sources):
            try:
                out.update(source())
            except Exception:  # noqa: BLE001 - a scrape must not fail for one source
                log.exception("counter source %r failed", source)
        return out
