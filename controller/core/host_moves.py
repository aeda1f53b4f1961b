"""Confirmed host moves: what the wire claims about a host is taken only once its
old place is confirmed gone (as ONOS's host-move tracking does).

Pure bookkeeping, no lock, no clock of its own (`now` is passed in); `core.hosts`
holds it under the core's lock and decides.

- `heard`: when each host was last heard from at its place, with its MAC (any of
  its packets that reached the controller: ARP, whose known-source copies reach
  the controller on both backends, an unknown-source IPv4 copy, an answer to a
  probe). At most `MAX_HEARD` hosts, the longest silent forgotten first.
- `pending`: a claim waiting for its confirmation: the host `ip` was last at
  `old`, and the wire claims `new` (a known host at a new place or with a new
  MAC: `host_move_refused` if the old place answers; a new address at a port the
  host `ip` holds: `host_port_full`; a host silent for `discovery.host_idle_s`:
  `idle`, forgotten if it does not answer). The controller sends an ARP probe
  for `ip` out of the old place; a packet from `ip` at the old place with the old
  MAC before `confirm_s` has passed refuses the claim; silence applies it. One
  claim per host at a time; at most `MAX_PENDING` claims, the oldest dropped
  first (a dropped claim is simply not applied: the wire may claim again).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

MAX_PENDING = 1024  # claims waiting for their confirmation (the oldest dropped first)
MAX_HEARD = 65_536  # hosts whose last packet time is kept (the longest silent forgotten first)

MOVE = "host_move_refused"  # a known host claimed at a new place or with a new MAC
PORT_FULL = "host_port_full"  # a new address at a port that holds a host
IDLE = "idle"  # a silent host: is it still there?


@dataclass(frozen=True)
class Place:
    """Where a host is: a switch's port, and the MAC its packets show."""

    switch: str
    port: int
    mac: str


@dataclass(frozen=True)
class Claim:
    """A pending claim about the host `ip` (see the module docstring): `kind`, the
    host's `old` place (where the probe goes), and what would be learned if it is
    gone: `new_ip` at `new` (None for `IDLE`)."""

    kind: str
    ip: str
    old: Place
    new_ip: str | None
    new: Place | None
    since: float

    def due(self, now: float, confirm_s: float) -> bool:
        return now - self.since >= confirm_s


class MoveTable:
    """The last time each host was heard from, and the pending claims (see the module docstring)."""

    def __init__(self, max_pending: int = MAX_PENDING, max_heard: int = MAX_HEARD) -> None:
        self.max_pending = max_pending
        self.max_heard = max_heard
        self._heard: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._pending: collections.OrderedDict[str, Claim] = collections.OrderedDict()

    # -- heard from ----------------------------------------------------------------------------
    def heard(self, ip: str, now: float) -> None:
        """The host `ip` spoke from its place with its MAC at `now`."""
        self._heard[ip] = now
        self._heard.move_to_end(ip)
        while len(self._heard) > self.max_heard:
            self._heard.popitem(last=False)

    def last_heard(self, ip: str) -> float | None:
        return self._heard.get(ip)

    def heard_within(self, ip: str, now: float, seconds: float) -> bool:
        last = self._heard.get(ip)
        return last is not None and now - last < seconds

    def silent_since(self, before: float) -> list[str]:
        """Hosts last heard before `before` (the longest silent first)."""
        out = []
        for ip, t in self._heard.items():
            if t >= before:
                break
            out.append(ip)
        return out

    def forget(self, ip: str) -> None:
        self._heard.pop(ip, None)
        self._pending.pop(ip, None)

    # -- claims ---------------------------------------------------------------------------------
    def pending(self, ip: str) -> Claim | None:
        return self._pending.get(ip)

    def claims(self) -> list[Claim]:
        """Pending claims, the oldest first."""
        return list(self._pending.values())

    def claim(self, claim: Claim) -> bool:
        """Record `claim` unless one about the same host is pending; True if recorded."""
        if claim.ip in self._pending:
            return False
        self._pending[claim.ip] = claim
        while len(self._pending) > self.max_pending:
            self._pending.popitem(last=False)
        return True

    def resolve(self, ip: str) -> Claim | None:
        """The claim about `ip`, removed (its host answered, or it is applied)."""
        return self._pending.pop(ip, None)

    def due(self, now: float, confirm_s: float) -> list[Claim]:
        """The claims whose host stayed silent for `confirm_s`, removed."""
        out = [c for c in self._pending.values() if c.due(now, confirm_s)]
        for c in out:
            del self._pending[c.ip]
        return out

    def __len__(self) -> int:
        return len(self._pending)
