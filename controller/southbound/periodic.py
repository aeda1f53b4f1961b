"""The backends' periodic threads (LLDP rounds, port statistics, host probes and
ticks, fast-failover heartbeats): one loop, `every`, whose round may fail without
ending the thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


def every(stop: threading.Event, interval: float, work: Callable[[], object], failed: str,
          log: logging.Logger) -> None:
    """Every `interval` seconds until `stop` is set, `work()`. A round that raises is
    logged on `log` (the message `failed`, with the traceback) and the next round
    comes as usual: a periodic thread must survive one bad round."""
    while not stop.wait(interval):
        try:
            work()
        except Exception:  # noqa: BLE001 - the loop must survive one bad round
            log.exception(failed)
