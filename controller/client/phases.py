"""A broadcast announced to the controller for as long as it lasts (phase-aware rates).

While a job's PS pushes a model, the controller may raise the job's rate into
what idle jobs leave, and lowers it again when others start (docs/controller.md,
"Phase-aware rates"); an idle job that announces its phases is policed at a small
share of its plan. `Announcement` is the PS's side:

    with Announcement(lambda active: client.broadcasting(job.id, active).rate, sender.set_rate):
        sender.send(model)

On entry it announces the broadcast and applies the answered rate; a thread
renews the announcement every `renew_s` (the controller forgets one not renewed
within its `planner.broadcast_ttl_s`) and applies every change of rate; on exit
it announces the end. The sender's rate is set before the first byte and after
every answer, so it follows the meter (a rate lowered by another job's start is
applied within `renew_s`; meanwhile the meter drops the excess and NORM repairs
it). A failed announcement never fails the broadcast: the last rate is kept and
the failure counted (`failures`, the last one in `error`). That holds for the
closing one too: the controller then still counts the job as broadcasting (until
its announcement expires) and polices it so, and the idle sender sends nothing.
Standard library only.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

RENEW_S = 0.5


class Announcement:
    """See the module docstring. `announce(active)` tells the controller and returns
    the job's rate now (bit/s, payload); `set_rate(bps)` applies it to the sender.
    `rates`: (seconds since entry, rate) for every rate applied, `entered_at` the
    clock then; `failures`: the announcements that failed (no answer, an error, or
    an answer without a finite positive rate)."""

    def __init__(self, announce: Callable[[bool], float | None], set_rate: Callable[[float], None], *,
                 renew_s: float = RENEW_S, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < renew_s <= 60:
            raise ValueError(f"renew_s must be within (0, 60] s, not {renew_s}")
        self._announce = announce
        self._set_rate = set_rate
        self.renew_s = renew_s
        self._clock = clock
        self.entered_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.rate: float | None = None
        self.rates: list[tuple[float, float]] = []
        self.failures = 0
        self.error: str | None = None

    def __enter__(self) -> Announcement:
        self.entered_at = self._clock()
        self._stop.clear()
        self._tell(True)
        self._thread = threading.Thread(target=self._renew, name="broadcast-announcement", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._tell(False)

    def _renew(self) -> None:
        while not self._stop.wait(self.renew_s):
            self._tell(True)

    def _tell(self, active: bool) -> None:
        """One announcement; its answered rate applied if it changed."""
        try:
            rate = self._announce(active)
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
                raise ValueError(f"the controller answered no usable rate ({rate!r})")
        except Exception as e:  # noqa: BLE001 - the broadcast goes on at the last rate
            with self._lock:
                self.failures += 1
                first, self.error = self.error is None, f"{type(e).__name__}: {e}"
            # the first failure a warning; the others (every renewal while the controller
            # is away, say) only counted
            log.log(logging.WARNING if first else logging.DEBUG, "broadcast announcement (%s) failed: %s",
                    "start" if active else "end", self.error)
            return
        rate = float(rate)
        with self._lock:
            if rate == self.rate:
                return
            self.rate = rate
            self.rates.append((self._clock() - self.entered_at, rate))
        self._set_rate(rate)
