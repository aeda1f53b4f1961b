"""The hosts: where each is, its MAC, and the one decision about a host's packet.

`Hosts` owns what the controller knows of the hosts beyond the topology's host
table (`Wiring.addresses`): the MACs seen in their packets (a declared topology;
a discovered network keeps them in its host records), the hosts seen where the
declared topology has none (`unexpected`), and the decisions both backends take
when a host's packet reaches the controller:

- `learn`: a packet from IPv4 `ip` / MAC `mac` entered (switch, port). With a
  declared topology a known host attached to that switch teaches its port and
  MAC; an unknown address or a host at another switch is logged once and kept
  in `unexpected`. In a discovered network the host is located where its packet
  came in (`Wiring.locate_host`).
- `on_ipv4`: a copy of IPv4 whose source the switch did not know: counted and
  learned from.
- `on_arp`: an ARP packet: counted and learned from, then answered by proxy ARP
  (`arp_answer`), passed on to the one host it asks for while that host's MAC is
  unknown, or, for a reply to a request passed on, delivered to the asker;
  never flooded through the fabric. In a learned network a request from a known
  host for an address no host has makes the controller probe for it out of every
  edge port of every switch (an ARP probe, as packet-outs; ONOS's proxy ARP
  floods the request to the edge ports), at most once a second per target and
  within a per-port budget (`core.arp_unknown`): the target answers the probe,
  is learned, and the controller answers the askers (`ArpAction.replies`). An answer that involves a host that has just
  joined (its first packet) is held until the plan with its unicast routes is
  on the switches (`ArpAction.after_change`), so that the asker's first packet
  finds its route. The backend sends what the returned `ArpAction` says.

A host join in a learned network is remembered (at most `MAX_JOINS`, the oldest
forgotten first) until the plan that covers it; the time from the host's first
packet to that plan is observed as `Counters.host_joined("planned", s)`.

Every change is counted in `Changes` (a learned port or MAC changes only the
translation: the served plan is translated again, nobody moves).
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from controller.addressing.hosts import HostAddress, normalise_mac
from controller.config import Config
from controller.core.arp_unknown import UnknownTargets
from controller.core.changes import Changes
from controller.core.counters import Counters
from controller.core.devices import Devices
from controller.core.wiring import MAX_UNEXPECTED, Wiring

log = logging.getLogger(__name__)

ARP_REQUEST = 1
ARP_REPLY = 2
MAX_STRAYS = 10_000  # stray packets remembered so that each is logged once (the oldest is forgotten first)
MAX_JOINS = 10_000  # hosts that joined and wait for their plan (the oldest is forgotten first)


@dataclass(frozen=True)
class UnexpectedHost:
    """A host seen on the wire that the declared topology does not place there:
    `reason` is "unknown_address" (no configured host has `ip`) or "elsewhere"
    (a configured host, seen at a switch the topology does not attach it to).
    Never used by plans."""

    ip: str
    mac: str
    switch: str
    port: int
    reason: str


@dataclass(frozen=True)
class ArpAnswer:
    """How the controller answers an ARP request for a known host: with `mac`, or,
    when the MAC is neither learned nor declared in the config, by passing the
    request on to the host itself at `ask` ((switch, port) where it is attached),
    whose reply teaches its MAC and is delivered to the asker (`Wiring.host_ports`)."""

    mac: str | None
    ask: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class ArpReply:
    """An ARP reply the controller sends on a host's behalf out of (switch, port):
    "`target_ip` is at `target_mac`", to `asker_ip` / `asker_mac`."""

    switch: str
    port: int
    asker_ip: str
    asker_mac: str
    target_ip: str
    target_mac: str


@dataclass(frozen=True)
class ArpAction:
    """What a backend sends for an ARP packet that reached the controller (`on_arp`):
    a reply "the target is at `reply_mac`" out of the port the request came in on,
    and/or the original frame (with `probe`: an ARP probe for that address,
    `southbound.probes.arp_probe`) out of every (switch, port) of `forward_to`, and
    the `replies` to askers elsewhere."""

    reply_mac: str | None = None
    forward_to: tuple[tuple[str, int], ...] = ()
    probe: str | None = None
    replies: tuple[ArpReply, ...] = ()
    # send only once change `after_change` is covered and the plan covering it is on
    # the switches (a host involved has just joined: its routes come with that plan)
    after_change: int | None = None
    joined_at: float | None = None  # that host's first packet (`Changes.clock`), for the measure


class Hosts:
    """Hosts' MACs, stray hosts, and the host-learning decision (see the module docstring)."""

    def __init__(self, config: Config, wiring: Wiring, devices: Devices, changes: Changes, counters: Counters) -> None:
        self.config = config
        self.discovers = config.discovers
        self._wiring = wiring
        self._devices = devices
        self._changes = changes
        self._counters = counters
        self._lock = changes.lock
        # the names the config gives to host addresses (a discovered network)
        self._names = {hc.ip: name for name, hc in config.hosts.items()} if self.discovers else {}
        self._macs: dict[str, str] = {}  # a declared topology: MACs seen in hosts' packets
        self._unexpected: dict[str, UnexpectedHost] = {}  # by address (declared topology)
        self._strays: collections.OrderedDict[tuple, None] = collections.OrderedDict()  # logged once each
        self._unknown_targets = UnknownTargets(changes.clock, counters)
        # host -> (change count, first packet's time): joined, its plan not yet made
        self._joins: collections.OrderedDict[str, tuple[int, float]] = collections.OrderedDict()

    # -- lookups ------------------------------------------------------------------------------
    @property
    def addresses(self) -> dict[str, HostAddress]:
        """Host name -> its address (the topology's host table)."""
        return self._wiring.addresses

    def by_ip(self, ip: str) -> str | None:
        """The name of the host with IPv4 address `ip` in the topology, or None."""
        return self._wiring.host_by_ip.get(str(ip))

    def name_for(self, ip: str) -> str:
        """The name a host with IPv4 address `ip` has in a discovered network: the
        configured one, else the address itself."""
        return self._names.get(ip, ip)

    def mac(self, host: str) -> str:
        """The host's MAC: learned from its packets, else configured (or default)."""
        with self._lock:
            return self._macs.get(host) or self._wiring.addresses[host].mac

    def macs(self) -> dict[str, str]:
        """Host -> the MAC its packets showed (a discovered network: every located
        host's) (lock held)."""
        if self.discovers:
            return {name: a.mac for name, a in self._wiring.addresses.items()}
        return dict(self._macs)

    def ports(self, host: str) -> tuple[tuple[str, int], ...]:
        """(switch, port) of every link of `host`."""
        return self._wiring.host_ports(host)

    def unexpected(self) -> list[UnexpectedHost]:
        """Hosts seen where the declared topology has none (never in a discovered network)."""
        with self._lock:
            return sorted(self._unexpected.values(), key=lambda h: h.ip)

    def edge_ports(self, switch: str) -> list[int]:
        """Ports of `switch` (as its port description lists them) that lead to no
        other switch, as far as the discovered network knows: where hosts are looked for."""
        limits = self._devices.limits().get(switch)
        ports = sorted(limits.port_speeds) if limits is not None else []
        return [p for p in ports if not self._wiring.is_link_end(switch, p)]

    def arp_answer(self, host: str) -> ArpAnswer:
        """How to answer an ARP request for `host` (see `ArpAnswer`). A default MAC
        (the n-th host's 00:00:00:00:00:nn) is a guess, so it is never given out: an
        asker that got a wrong MAC would keep it until it asks again, and a silent
        host would never be reached."""
        with self._lock:
            if self.discovers:  # a discovered host's MAC is the one its packets showed
                located = self._wiring.addresses.get(host)
                learned = located.mac if located is not None else None
            else:
                learned = self._macs.get(host)
        if learned is not None:
            return ArpAnswer(learned)
        declared = self.config.hosts.get(host)
        if declared is not None and declared.mac is not None:
            return ArpAnswer(self._wiring.addresses[host].mac)
        return ArpAnswer(None, self.ports(host))

    # -- facts --------------------------------------------------------------------------------
    def set_mac(self, host: str, mac: str) -> None:
        """A learned MAC for a host of a declared topology (used in the rewrites of
        unicast branches)."""
        if self._wiring.node_kind(host) != "host":
            raise ValueError(f"unknown host {host!r}")
        mac = normalise_mac(mac)
        with self._lock:
            if self._macs.get(host) != mac:
                self._macs[host] = mac
                self._changes.mark(kind="translation")

    def use_macs(self, macs: Mapping[str, str]) -> None:
        """The MACs learned before a restart (or by another instance)."""
        with self._lock:
            self._macs = dict(macs)

    def learn(self, ip: str, mac: str, switch: str, port: int) -> str | None:
        """A packet from IPv4 `ip` / MAC `mac` entered `switch` on `port`: learn
        where the host is and its MAC (see the module docstring). Returns the
        host's name, or None if the packet taught nothing."""
        ip = str(ip)
        if self.discovers:
            return self._locate(ip, mac, switch, port)
        host = self.by_ip(ip)
        if host is None:
            self._unexpected_host(UnexpectedHost(ip, mac, switch, port, "unknown_address"))
            self._note_stray(("unknown-ip", ip, switch), "%s port %d: packet from unknown address %s (not a configured host)", switch, port, ip)
            return None
        attached = self._wiring.neighbours(host)
        if switch not in attached:
            self._unexpected_host(UnexpectedHost(ip, mac, switch, port, "elsewhere"))
            self._note_stray(("moved", host, switch), "host %s (%s) seen at %s port %d, but the topology attaches it to %s", host, ip, switch, port, ", ".join(attached))
            return None
        with self._lock:
            self._unexpected.pop(ip, None)  # where the topology says, now
        self._wiring.learn_port(switch, port, host)
        self.set_mac(host, mac)
        return host

    def _locate(self, ip: str, mac: str, switch: str, port: int) -> str | None:
        """`learn` in a discovered network: the host is where its packet came in."""
        name = self.name_for(ip)
        with self._lock:
            discovered = self._wiring.discovered
            assert discovered is not None
            moved = discovered.hosts.get(ip)
            try:
                changed = self._wiring.locate_host(name, ip, mac, switch, port)
            except ValueError as e:
                self._note_stray(("not-a-host", ip, switch, port), "%s port %d: packet from %s not taken as a host: %s",
                                 switch, port, ip, e)
                return None
        if changed:
            if moved is not None and (moved.switch, moved.port) != (switch, port):
                log.info("host %s (%s) moved from %s port %d to %s port %d", name, ip, moved.switch, moved.port, switch, port)
            else:
                log.info("host %s (%s, %s) at %s port %d", name, ip, mac, switch, port)
        return name

    def on_ipv4(self, ip: str, mac: str, switch: str, port: int) -> None:
        """A copy of an IPv4 packet whose source the switch did not know (the switch
        forwarded the packet itself; this copy is for learning only)."""
        self._counters.packet_in("ipv4")
        try:
            self._learn_joining(ip, mac, switch, port)
        except ValueError as e:
            log.warning("switch %s port %d: IPv4 from %s: %s", switch, port, ip, e)

    def on_arp(
        self, switch: str, port: int, *, op: int, sender_ip: str, sender_mac: str, target_ip: str, routed: bool
    ) -> ArpAction:
        """An ARP packet from (switch, port) reached the controller. `routed`: the
        switches forward this packet to its target themselves (a known host's ARP
        for a known host), so it is never passed on. Returns what to send."""
        self._counters.packet_in("arp")
        try:
            self._learn_joining(sender_ip, sender_mac, switch, port)
        except ValueError as e:
            log.warning("switch %s port %d: ARP from %s: %s", switch, port, sender_ip, e)
        came_from = (switch, port)
        if target_ip == sender_ip:
            return ArpAction()  # a gratuitous announcement: learned from, nothing to answer
        if op == ARP_REPLY:
            # a host answering a request the controller passed on (to the asker), or
            # a probe for it (the controller answers those who asked for it)
            replies = self._answer_askers(sender_ip, came_from)
            asker = self.by_ip(target_ip)
            ends = () if asker is None or routed else tuple(e for e in self.ports(asker) if e != came_from)
            if not ends and not replies:
                return ArpAction()
            return self._held(ArpAction(forward_to=ends, replies=replies), self.by_ip(sender_ip), asker)
        if op != ARP_REQUEST:
            return ArpAction()
        target = self.by_ip(target_ip)
        if target is None:
            return self._unknown_target(sender_ip, sender_mac, target_ip, came_from)
        answer = self.arp_answer(target)
        if answer.mac is not None:
            return self._held(ArpAction(reply_mac=answer.mac), target, self.by_ip(sender_ip))
        if routed:
            return ArpAction()
        # its MAC is not known: ask the host itself (it answers the asker)
        return ArpAction(forward_to=tuple(e for e in answer.ask if e != came_from))

    # -- hosts not seen yet, hosts joining ---------------------------------------------------------
    def _unknown_target(self, sender_ip: str, sender_mac: str, target_ip: str, came_from: tuple[str, int]) -> ArpAction:
        """A request for an address no host has: in a learned network, from a known
        host, an ARP probe for it out of every edge port of every switch but
        `came_from`, within the rate limit (`core.arp_unknown`), and the asker
        remembered for the answer; else dropped (a declared topology knows every
        host; an unknown asker could not be answered)."""
        if not self.discovers or self.by_ip(sender_ip) is None:
            return ArpAction()
        try:
            target = ipaddress.IPv4Address(target_ip)
            mac = normalise_mac(sender_mac)
        except ValueError:
            return ArpAction()
        if target.is_multicast or target.is_unspecified or target.is_loopback or target.is_link_local:
            return ArpAction()
        with self._lock:
            self._unknown_targets.remember(str(target), (*came_from, str(sender_ip), mac))
            if not self._unknown_targets.allow(str(target), *came_from):
                return ArpAction()
            switches = sorted(s for s in self._devices.limits() if self._wiring.knows_switch(s))
        return ArpAction(forward_to=tuple((sw, p) for sw in switches for p in self.edge_ports(sw)
                                          if (sw, p) != came_from), probe=str(target))

    def _answer_askers(self, ip: str, came_from: tuple[str, int]) -> tuple[ArpReply, ...]:
        """Replies to the hosts that asked for `ip` while it was unknown, now that it
        answered: with the MAC the controller knows for it (none if it was not learned)."""
        with self._lock:
            askers = self._unknown_targets.answered(str(ip))
        host = self.by_ip(str(ip)) if askers else None
        mac = self.arp_answer(host).mac if host is not None else None
        if mac is None:
            return ()
        return tuple(ArpReply(sw, port, asker_ip, asker_mac, str(ip), mac)
                     for sw, port, asker_ip, asker_mac in askers if (sw, port) != came_from)

    def _learn_joining(self, ip: str, mac: str, switch: str, port: int) -> str | None:
        """`learn`, noting a host that joins a learned network (see the module docstring)."""
        if not self.discovers:
            return self.learn(ip, mac, switch, port)
        before = self.by_ip(str(ip))
        host = self.learn(ip, mac, switch, port)
        if host is None or before is not None or self.by_ip(str(ip)) != host:
            return host
        with self._lock:
            count, since = self._changes.count, self._changes.clock()
            self._joins[host] = (count, since)
            self._joins.move_to_end(host)
            while len(self._joins) > MAX_JOINS:
                self._joins.popitem(last=False)
        self._changes.when_covered(
            count, lambda: self._counters.host_joined("planned", self._changes.clock() - since))
        return host

    def _held(self, action: ArpAction, *hosts: str | None) -> ArpAction:
        """`action`, held until the plan of the latest of `hosts` that joined and is
        not planned yet (see `ArpAction.after_change`)."""
        with self._lock:
            covered = self._changes.covered
            while self._joins and next(iter(self._joins.values()))[0] <= covered:  # in order of joining
                self._joins.popitem(last=False)
            waits = [self._joins[h] for h in hosts if h is not None and h in self._joins]
        if not waits:
            return action
        count, since = max(waits)
        return dataclasses.replace(action, after_change=count, joined_at=since)

    # -- strays (bounded) ------------------------------------------------------------------------
    def _unexpected_host(self, stray: UnexpectedHost) -> None:
        with self._lock:
            if stray.ip in self._unexpected or len(self._unexpected) < MAX_UNEXPECTED:
                self._unexpected[stray.ip] = stray

    def _note_stray(self, key: tuple, message: str, *args: object) -> None:
        with self._lock:
            if key in self._strays:
                return
            self._strays[key] = None
            while len(self._strays) > MAX_STRAYS:
                self._strays.popitem(last=False)
        log.warning(message, *args)
