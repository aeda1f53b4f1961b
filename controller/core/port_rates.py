"""Measured link load: per-(switch, port) byte counters turned into per-link rates.

Owns `PortRates`, the last counter sample and the last rate of every switch port,
`link_rates`, which maps port rates onto the links of the topology (bit/s, each
direction), and `LinkLoad`, the two over the current topology. The OpenFlow southbound feeds it with port statistics
(`southbound.openflow.port_stats_s`); P4 switches have no port counters in the
program, so their ports never get a rate (nothing is estimated in their place).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from controller.addressing.ports import PortMap
from controller.algorithm.model import Topology

COUNTER_BITS = 64  # OpenFlow 1.3 port counters (ofp_port_stats rx_bytes / tx_bytes)
# A counter that went down from within this much of its top wrapped around; one that
# went down from lower was reset (a switch or port restart): no rate from that sample.
_WRAP_WINDOW = 2**40


def counter_delta(previous: int, current: int, bits: int = COUNTER_BITS) -> int | None:
    """Bytes counted between two samples of a `bits`-bit counter; None after a reset."""
    if current >= previous:
        return current - previous
    top = 2**bits
    if previous >= top - _WRAP_WINDOW:
        return current + top - previous
    return None


@dataclass(frozen=True)
class PortRate:
    """A port's rates over its last two samples (bit/s), and when the later one was taken."""

    rx_bps: float
    tx_bps: float
    at: float


class PortRates:
    """The counters and rates of every (switch, port), thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: dict[tuple[str, int], tuple[float, int, int]] = {}  # (at, rx_bytes, tx_bytes)
        self._rates: dict[tuple[str, int], PortRate] = {}

    def update(self, switch: str, port: int, rx_bytes: int, tx_bytes: int, at: float) -> PortRate | None:
        """Record a sample taken at `at` (monotonic seconds); the new rate, or None for
        a first sample, a reset counter or a sample not later than the previous one."""
        key = (switch, port)
        with self._lock:
            previous = self._samples.get(key)
            self._samples[key] = (at, rx_bytes, tx_bytes)
            if previous is None:
                return None
            t0, rx0, tx0 = previous
            drx, dtx = counter_delta(rx0, rx_bytes), counter_delta(tx0, tx_bytes)
            if at <= t0 or drx is None or dtx is None:
                self._rates.pop(key, None)  # a reset: no rate until the next sample
                return None
            rate = PortRate(8 * drx / (at - t0), 8 * dtx / (at - t0), at)
            self._rates[key] = rate
            return rate

    def forget(self, switch: str) -> None:
        """Drop a switch's samples (it disconnected: its counters may restart)."""
        with self._lock:
            for key in [k for k in self._samples if k[0] == switch]:
                del self._samples[key]
                self._rates.pop(key, None)

    def rates(self, now: float, max_age: float) -> dict[tuple[str, int], PortRate]:
        """The rates measured at most `max_age` seconds before `now`."""
        with self._lock:
            return {k: r for k, r in self._rates.items() if now - r.at <= max_age}


def link_rates(
    links: Iterable[tuple[str, str]],
    port_of: Callable[[str, str], int | None],
    rates: Mapping[tuple[str, int], PortRate],
) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    """Per link (a, b): (bit/s from a to b, bit/s from b to a), None where no end measured.

    `port_of(node, neighbour)` is the port of switch `node` towards `neighbour` (None
    when `node` is a host). a→b is what a's port sends, else what b's port receives.
    """
    out: dict[tuple[str, str], tuple[float | None, float | None]] = {}
    for a, b in links:
        ra = rates.get((a, p)) if (p := port_of(a, b)) is not None else None
        rb = rates.get((b, p)) if (p := port_of(b, a)) is not None else None
        a_to_b = ra.tx_bps if ra is not None else rb.rx_bps if rb is not None else None
        b_to_a = rb.tx_bps if rb is not None else ra.rx_bps if ra is not None else None
        out[(a, b)] = (a_to_b, b_to_a)
    return out


class LinkLoad:
    """The measured load of the topology's links: the backends record their
    switches' port counters (`record`), GET /links and the web view read
    `link_rates`. `clock` is monotonic seconds; a rate older than three polling
    intervals (at least 10 s) is not shown."""

    def __init__(self, clock: Callable[[], float], poll_s: float,
                 topology_and_ports: Callable[[], tuple[Topology, PortMap]]) -> None:
        self.ports = PortRates()
        self._clock = clock
        self._max_age = max(10.0, 3 * poll_s)
        self._topology_and_ports = topology_and_ports

    def record(self, switch: str, samples: Iterable[tuple[int, int, int]], at: float | None = None) -> None:
        """A switch's port counters: (port, rx_bytes, tx_bytes) per port, read at
        `at` (the clock by default)."""
        at = self._clock() if at is None else at
        for port, rx, tx in samples:
            self.ports.update(switch, port, rx, tx, at)

    def forget(self, switch: str) -> None:
        self.ports.forget(switch)

    def link_rates(self) -> dict[tuple[str, str], tuple[float | None, float | None]]:
        """Per link (a, b) of the topology: measured (a→b, b→a) bit/s, None where no
        end reported a rate recently."""
        topology, ports = self._topology_and_ports()
        rates = self.ports.rates(self._clock(), self._max_age)
        if not rates:
            return {}
        index = topology.index

        def port_of(node: str, other: str) -> int | None:
            return ports.get((index[node], index[other])) if topology.is_switch(index[node]) else None

        return link_rates(((link.a, link.b) for link in topology.links), port_of, rates)
