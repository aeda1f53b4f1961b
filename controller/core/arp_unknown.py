"""ARP requests for an address no known host has, in a learned network: how often
one may be passed on.

A host's ARP request for an address the controller has not seen is passed on out
of every edge port of every switch (`core.hosts.Hosts.on_arp`; packet-outs, never
a flood through the fabric), as ONOS's proxy ARP floods such requests to the edge
ports: the target answers, is learned, and its answer reaches the asker. One
request then costs one packet-out per edge port, so a hostile host must not be
able to turn it into an amplifier. `UnknownTargets.allow` says whether one more
request may be passed on:

- per target address, at most one every `TARGET_INTERVAL_S` (1 s);
- per ingress (switch, port), a token bucket of `PORT_BURST` (32) requests,
  refilled at `PORT_RATE` (10) per second: a host cycling through addresses
  costs at most that;
- the tables are bounded: at most `MAX_TARGETS` (4096) targets and `MAX_PORTS`
  (4096) ports are remembered, the oldest forgotten first (a forgotten target may
  be passed on again before its interval ends; a forgotten port starts with a
  full bucket).

Every request held back is counted as `arp_unknown_target_limited`
(`Counters.refused`, logged at most once per port per minute).

What goes out is an ARP probe for the target (`southbound.probes.arp_probe`:
sender 0.0.0.0, the controller's MAC), not the asker's frame: the target's answer
comes back to the controller whatever the data plane does with ARP for known
hosts, and the controller answers the askers itself. So the askers are
remembered per target (`remember`, also those held back by the limit, which get
the answer too), at most `MAX_ASKERS` (8) per target for `ASK_TTL_S` (3 s), in
the same table of at most `MAX_TARGETS` targets; `answered(target)` hands them
over once the target answers. Pure apart from the injected clock; the caller
holds the core's lock.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from controller.core.counters import Counters

TARGET_INTERVAL_S = 1.0
PORT_BURST = 32.0
PORT_RATE = 10.0
MAX_TARGETS = 4096
MAX_PORTS = 4096
MAX_ASKERS = 8
ASK_TTL_S = 3.0
LIMITED = "arp_unknown_target_limited"


class UnknownTargets:
    """The rate limit of passed-on ARP requests (see the module docstring)."""

    def __init__(self, clock: Callable[[], float], counters: Counters) -> None:
        self._clock = clock
        self._counters = counters
        self._targets: collections.OrderedDict[str, float] = collections.OrderedDict()  # ip -> last passed on
        self._ports: collections.OrderedDict[tuple[str, int], tuple[float, float]] = collections.OrderedDict()
        self._askers: collections.OrderedDict[str, list[tuple[float, tuple]]] = collections.OrderedDict()

    def remember(self, target_ip: str, asker: tuple) -> None:
        """`asker` waits for `target_ip`'s answer (the newest MAX_ASKERS, for ASK_TTL_S)."""
        now = self._clock()
        waiting = [(t, a) for t, a in self._askers.get(target_ip, []) if now - t < ASK_TTL_S and a != asker]
        _put(self._askers, target_ip, [*waiting, (now, asker)][-MAX_ASKERS:], MAX_TARGETS)

    def answered(self, target_ip: str) -> list[tuple]:
        """The askers waiting for `target_ip` (forgotten now)."""
        now = self._clock()
        return [a for t, a in self._askers.pop(target_ip, []) if now - t < ASK_TTL_S]

    def allow(self, target_ip: str, switch: str, port: int) -> bool:
        """True if a request for `target_ip` from (switch, port) may be passed on now
        (and it is then accounted); False: held back and counted."""
        now = self._clock()
        last = self._targets.get(target_ip)
        if last is not None and now - last < TARGET_INTERVAL_S:
            return self._limited(switch, port, f"a request for {target_ip} was passed on {now - last:.2f} s ago")
        tokens, at = self._ports.get((switch, port), (PORT_BURST, now))
        tokens = min(PORT_BURST, tokens + (now - at) * PORT_RATE)
        if tokens < 1.0:
            return self._limited(switch, port, f"more than {PORT_RATE:g} requests per second for unknown addresses")
        _put(self._ports, (switch, port), (tokens - 1.0, now), MAX_PORTS)
        _put(self._targets, target_ip, now, MAX_TARGETS)
        return True

    def _limited(self, switch: str, port: int, why: str) -> bool:
        self._counters.refused(LIMITED, switch=switch, port=port, why=f"ARP request not passed on: {why}")
        return False


def _put(table: collections.OrderedDict, key: object, value: object, bound: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > bound:
        table.popitem(last=False)
