"""Whether a link is up, as one backend sees it: both its switches connected and
neither of its ends reported dead.

A backend learns that a switch disconnected, or that a link end died (OpenFlow:
a port-status message; P4Runtime: no LLDP probe seen for a while), and tells
`LinkLiveness`, which decides the link's state from all of these and reports it
to the core (`Links.down` / `Links.up`, which re-plan around it). Both backends
use it, so a link is judged the same way whoever programs its switches.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from controller.core.service import ControllerService

log = logging.getLogger(__name__)


class LinkLiveness:
    """Switches gone and dead link ends, turned into links down and up.

    `dead_end(switch, neighbour)` says whether the backend sees that link end as
    dead (besides its switch being gone)."""

    def __init__(self, service: ControllerService, dead_end: Callable[[str, str], bool]) -> None:
        self._service = service
        self._dead_end = dead_end
        self._lock = threading.Lock()
        self._gone: set[str] = set()  # switches that disconnected: their links are down

    def switch_gone(self, switch: str) -> None:
        """`switch` disconnected: a switch the controller cannot reach is treated as
        failed, and its links are planned around."""
        with self._lock:
            self._gone.add(switch)
        self.update_switch(switch)

    def switch_back(self, switch: str) -> None:
        """`switch` connected again: its links are up again (unless an end is dead)."""
        with self._lock:
            if switch not in self._gone:
                return
            self._gone.discard(switch)
        self.update_switch(switch)

    def is_gone(self, switch: str) -> bool:
        with self._lock:
            return switch in self._gone

    def update_switch(self, switch: str) -> None:
        """Report the state of every link of `switch`."""
        for peer in self._service.wiring.neighbours(switch):
            self.update(switch, peer)

    def update(self, a: str, b: str) -> None:
        """Report the state of the link a - b to the core."""
        index = self._service.wiring.topology.index
        if a not in index or b not in index:
            return  # a discovered switch not in the planned piece yet
        with self._lock:
            gone = a in self._gone or b in self._gone
        down = gone or self._dead_end(a, b) or self._dead_end(b, a)
        try:
            if down:
                self._service.links.down(a, b)
            else:
                self._service.links.up(a, b)
        except ValueError as e:
            log.warning("link %s - %s: %s", a, b, e)
