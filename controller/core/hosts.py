"""The hosts: where each is, its MAC, and the one decision about a host's packet.

`Hosts` owns what the controller knows of the hosts beyond the topology's host
table (`Wiring.addresses`): the MACs seen in their packets (a declared topology;
a discovered network keeps them in its host records), the hosts seen where the
declared topology has none (`unexpected`), and the decisions both backends take
when a host's packet reaches the controller:

- `learn`: a packet from IPv4 `ip` / MAC `mac` entered (switch, port). With a
  declared topology only a known host attached to that switch may teach its port
  and MAC; an unknown address or a host at another switch is logged once and kept
  in `unexpected`. In a discovered network the host is located where its packet
  came in (`Wiring.locate_host`). Either way, by these rules:
  - a pinned host (`hosts.NAME.{switch,port}`) is taken at its place only; its
    address claimed anywhere else, or with another MAC than a configured one
    (`hosts.NAME.mac`, enforced for a pinned host and in a discovered network),
    is refused (`arp_spoof`). Its port is held for it: another address there is
    refused (`host_port_full`). It is located on its first packet at its place
    (not before: a port that never spoke may have nothing behind it).
  - a known host seen at a new place or with a new MAC does not move at once: a
    claim (`core.host_moves`) is recorded, an ARP probe for it goes out of its
    old place (`probe_senders`, one per backend), and the move is applied by
    `tick` once `discovery.move_confirm_s` passed without a packet from it at its
    old place with its old MAC; such a packet refuses the claim
    (`host_move_refused`). A claim made while the host was heard from at its
    place within `move_confirm_s` is refused at once.
  - a port holds one host (`discovery.max_hosts_per_port`, at most
    `MAX_HOSTS_PER_PORT` = 1: several hosts behind one port would each be
    credited with the port's capacity, and a job's group would output to the port
    once per host). A new address at a port that holds a host is the same kind
    of claim against that host (`host_port_full` if it answers).
  - a learned host silent for `discovery.host_idle_s` (not pinned, not named by
    a planned job) is probed the same way and forgotten if it does not answer
    (a discovered network only; a declared topology's hosts stay). "Heard from"
    means any of its packets that reached the controller from its place with its
    MAC: its ARP (on OpenFlow the known-source rule copies every ARP of a known
    host to the controller; on P4Runtime too), an unknown-source IPv4 copy, an
    answer to a probe. A host that only receives, or that keeps talking to
    neighbours it resolved before, is not heard from: it is probed after
    `host_idle_s` and stays if it answers.
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
translation: the served plan is translated again, nobody moves). Every refusal is
counted and logged, rate-limited, by `Counters.refused`.

Bounds (the oldest dropped first): pending claims `host_moves.MAX_PENDING`, hosts
heard from `host_moves.MAX_HEARD`, strays logged once `MAX_STRAYS`, unexpected
hosts `wiring.MAX_UNEXPECTED`, hosts of a discovered network `MAX_LEARNED_HOSTS`
(beyond it the longest silent learned host is forgotten; if every one is pinned or
named by a job, the new one is refused: `host_table_full`). A port holding one
host, the learned hosts are also bounded by the admitted switches' ports.
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from controller.addressing.hosts import HostAddress, normalise_mac
from controller.config import Config, HostConfig
from controller.core.arp_unknown import UnknownTargets
from controller.core.changes import Changes
from controller.core.counters import Counters
from controller.core.devices import Devices
from controller.core.host_moves import IDLE, MOVE, PORT_FULL, Claim, MoveTable, Place
from controller.core.wiring import MAX_UNEXPECTED, Wiring

log = logging.getLogger(__name__)

ARP_REQUEST = 1
ARP_REPLY = 2
MAX_STRAYS = 10_000  # stray packets remembered so that each is logged once (the oldest is forgotten first)
MAX_LEARNED_HOSTS = 10_000  # hosts of a discovered network (beyond: the longest silent learned host is forgotten)
ARP_SPOOF = "arp_spoof"  # a packet claiming a configured host's address against the config
HOST_TABLE_FULL = "host_table_full"  # a new host while MAX_LEARNED_HOSTS are learned and none may go
HOST_UNKNOWN = "host_unknown"  # a declared topology: a packet from an address that is no host of it
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
        self._clock = changes.clock
        self._rules = config.discovery
        self._moves = MoveTable()
        # configured hosts by address, and the ports pinned ones hold
        self._configured: dict[str, HostConfig] = {hc.ip: hc for hc in config.hosts.values()}
        self._pinned_ports = {hc.pinned: name for name, hc in config.hosts.items() if hc.pinned is not None}
        # send(switch, port, ip): an ARP probe for `ip` out of one port; each backend registers one
        self.probe_senders: list[Callable[[str, int, str], None]] = []
        # the names of the hosts jobs name (never forgotten for silence); set by the service
        self.in_use: Callable[[], set[str]] = set
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
        where the host is and its MAC, by the rules of the module docstring.
        Returns the host's name, or None if the packet taught nothing (refused,
        stray, or a claim waiting for its confirmation)."""
        ip = str(ip)
        if self.discovers:
            name = self.name_for(ip)
            try:
                return self._decide(name, ip, Place(switch, port, normalise_mac(mac)))
            except ValueError as e:
                self._note_stray(("not-a-host", ip, switch, port), "%s port %d: packet from %s not taken as a host: %s",
                                 switch, port, ip, e)
                return None
        host = self.by_ip(ip)
        if host is None:
            self._unexpected_host(UnexpectedHost(ip, mac, switch, port, "unknown_address"))
            self._counters.refused(HOST_UNKNOWN, switch=switch, port=port,
                                   why=f"packet from {ip}, not a host of the declared topology")
            return None
        attached = self._wiring.neighbours(host)
        if switch not in attached:
            self._unexpected_host(UnexpectedHost(ip, mac, switch, port, "elsewhere"))
            self._counters.refused(ARP_SPOOF, switch=switch, port=port,
                                   why=f"host {host} ({ip}) claimed here, but the topology attaches it to {', '.join(attached)}")
            return None
        with self._lock:
            self._unexpected.pop(ip, None)  # where the topology says, now
        return self._decide(host, ip, Place(switch, port, normalise_mac(mac)))

    # -- the host rules (module docstring) -------------------------------------------------------
    def _place_of(self, ip: str, switch: str) -> Place | None:
        """Where the host `ip` is known to be (lock held): a discovered network's
        record; with a declared topology, its port on `switch` if its packets were
        seen there, with its learned MAC. None: not known yet."""
        if self.discovers:
            h = self._wiring.discovered.hosts.get(ip) if self._wiring.discovered is not None else None
            return None if h is None else Place(h.switch, h.port, h.mac)
        host = self.by_ip(ip)
        port = self._wiring.confirmed_host_port(switch, host) if host is not None else None
        mac = self._macs.get(host) if host is not None else None
        return None if port is None or mac is None else Place(switch, port, mac)

    def _occupant(self, ip: str, place: Place) -> str | None:
        """The address of another host known at `place`'s port (lock held), or None."""
        if self.discovers:
            h = self._wiring.discovered.host_at(place.switch, place.port) if self._wiring.discovered is not None else None
            return h.ip if h is not None and h.ip != ip else None
        host = self._wiring.confirmed_host_at(place.switch, place.port)
        other = self._wiring.addresses[host].ip if host is not None else None
        return other if other != ip else None

    def _apply(self, name: str, ip: str, place: Place, now: float) -> bool:
        """Learn that `name` (`ip`) is at `place` (lock held). True if it is there
        now, False if refused (`host_table_full`); ValueError if `place` cannot be
        a host's."""
        if not self.discovers:
            self._wiring.learn_port(place.switch, place.port, name)
            self.set_mac(name, place.mac)
            self._moves.heard(ip, now)
            return True
        net = self._wiring.discovered
        assert net is not None
        if ip not in net.hosts and not self._make_room(now):
            self._refuse(HOST_TABLE_FULL, place, f"{ip}: {len(net.hosts)} hosts learned, none may be forgotten")
            return False
        if self._wiring.locate_host(name, ip, place.mac, place.switch, place.port):
            log.info("host %s (%s, %s) at %s port %d", name, ip, place.mac, place.switch, place.port)
        self._moves.heard(ip, now)
        return True

    def _make_room(self, now: float) -> bool:
        """Room for one more host in a discovered network (lock held): at
        MAX_LEARNED_HOSTS, forget the longest silent learned host that is neither
        pinned nor named by a job. False if there is none to forget."""
        net = self._wiring.discovered
        assert net is not None
        if len(net.hosts) < MAX_LEARNED_HOSTS:
            return True
        in_use = self.in_use()
        for ip in [*self._moves.silent_since(now + 1), *(ip for ip in net.hosts if self._moves.last_heard(ip) is None)]:
            h = net.hosts.get(ip)
            if h is not None and not self._is_pinned(ip) and h.name not in in_use:
                log.warning("%d hosts learned: forgetting %s (%s), the longest silent", len(net.hosts), h.name, ip)
                self._forget(ip)
                return True
        return False

    def _is_pinned(self, ip: str) -> bool:
        cfg = self._configured.get(ip)
        return cfg is not None and cfg.pinned is not None

    def _forget(self, ip: str) -> None:
        self._moves.forget(ip)
        self._wiring.forget_host(ip)

    def _refuse(self, kind: str, place: Place, why: str) -> None:
        self._counters.refused(kind, switch=place.switch, port=place.port, why=why)

    def _decide(self, name: str, ip: str, place: Place) -> str | None:
        """`learn`'s rules, after the declared topology's own checks."""
        now = self._clock()
        probe: Claim | None = None
        with self._lock:
            if self._wiring.discovered is not None:  # ValueError before any claim is made
                self._wiring.discovered.check_place(ip, place.switch, place.port)
            cfg = self._configured.get(ip)
            if cfg is not None and cfg.mac is not None and place.mac != cfg.mac and (self.discovers or cfg.pinned):
                self._refuse(ARP_SPOOF, place, f"{ip} claimed with MAC {place.mac}; the config gives {cfg.mac}")
                return None
            if cfg is not None and cfg.pinned is not None:
                if (place.switch, place.port) != cfg.pinned:
                    self._refuse(ARP_SPOOF, place, f"{ip} claimed here; the config pins it to {cfg.switch} port {cfg.port}")
                    return None
                return name if self._apply(name, ip, place, now) else None  # a pinned host at its place
            owner = self._pinned_ports.get((place.switch, place.port))
            if owner is not None:
                self._refuse(PORT_FULL, place, f"{ip} claimed this port, which the config gives to {owner}")
                return None
            current = self._place_of(ip, place.switch)
            if current == place:  # heard from where it is: any claim against it is refused
                self._moves.heard(ip, now)
                claim = self._moves.resolve(ip)
                if claim is not None and claim.kind != IDLE:
                    assert claim.new is not None
                    self._refuse(claim.kind, claim.new, f"{claim.new_ip} claimed {claim.new.switch} port "
                                 f"{claim.new.port} ({claim.new.mac}), but {ip} answered at its place")
                return name
            if current is not None:  # the address's own host must be confirmed gone first
                if self._moves.heard_within(ip, now, self._rules.move_confirm_s):
                    self._refuse(MOVE, place, f"{ip} ({place.mac}) claimed here, but was heard at {current.switch} port "
                                 f"{current.port} ({current.mac}) lately")
                    return None
                probe = Claim(MOVE, ip, current, ip, place, now)
            else:
                probe = self._port_claim(ip, place, now)
                if probe is None:  # a new host at a free port
                    return name if self._apply(name, ip, place, now) else None
                if self._moves.heard_within(probe.ip, now, self._rules.move_confirm_s):
                    self._refuse(PORT_FULL, place, f"{ip} ({place.mac}) claimed the port of {probe.ip}, heard there lately")
                    return None
            if not self._moves.claim(probe):
                probe = None  # a claim about that host is pending already
        if probe is not None:
            log.info("%s (%s) claimed at %s port %d: asking %s at %s port %d first", ip, place.mac, place.switch,
                     place.port, probe.ip, probe.old.switch, probe.old.port)
            self._send_probes([probe])
        return None

    def _port_claim(self, ip: str, place: Place, now: float) -> Claim | None:
        """A claim against the host holding `place`'s port, for `ip` to take it
        (lock held); None if the port is free."""
        occupant = self._occupant(ip, place)
        if occupant is None:
            return None
        old = self._place_of(occupant, place.switch)
        assert old is not None
        return Claim(PORT_FULL, occupant, old, ip, place, now)

    def apply_pins(self) -> int:
        """A discovered network restored from the store (or another instance's):
        the config's pins win over it. Drop every stored host that contradicts one
        (a pinned address elsewhere or with another MAC than the configured one, or
        another address at a pinned port); the pinned host is located again by its
        next packet at its place. Returns how many were dropped."""
        net = self._wiring.discovered
        if net is None:
            return 0
        dropped = 0
        with self._lock:
            for ip, h in list(net.hosts.items()):
                cfg = self._configured.get(ip)
                owner = self._pinned_ports.get((h.switch, h.port))
                wrong = (owner is not None and self.config.hosts[owner].ip != ip) or (cfg is not None and (
                    (cfg.pinned is not None and cfg.pinned != (h.switch, h.port))
                    or (cfg.mac is not None and cfg.mac != h.mac)))
                if wrong:
                    log.warning("stored host %s (%s) at %s port %d contradicts the config's pins: dropped",
                                h.name, ip, h.switch, h.port)
                    self._forget(ip)
                    dropped += 1
        return dropped

    def tick(self, now: float | None = None) -> None:
        """Resolve the claims whose host stayed silent for `discovery.move_confirm_s`
        (applied), probe again for those still pending, and in a discovered network
        ask the hosts silent for `discovery.host_idle_s` whether they are there
        (forgotten if not). Driven by the backends' host loop; `now` defaults to the clock."""
        now = self._clock() if now is None else now
        with self._lock:
            for claim in self._moves.due(now, self._rules.move_confirm_s):
                self._settle(claim, now)
            if self.discovers and self._rules.host_idle_s > 0:
                self._ask_idle(now)
            probes = self._moves.claims()
        self._send_probes(probes)

    def _settle(self, claim: Claim, now: float) -> None:
        """`claim`'s host did not answer in time (lock held): apply it, if the
        network is still as it was when the claim was made."""
        if self._place_of(claim.ip, claim.old.switch) != claim.old:
            return  # moved, replaced or forgotten meanwhile
        if claim.kind == IDLE:
            log.info("host %s forgotten: silent for %.0f s and no answer at %s port %d", self.name_for(claim.ip),
                     self._rules.host_idle_s, claim.old.switch, claim.old.port)
            self._forget(claim.ip)
            return
        assert claim.new is not None and claim.new_ip is not None
        if claim.kind == PORT_FULL:
            log.info("host %s at %s port %d did not answer: %s takes the port", claim.ip, claim.old.switch,
                     claim.old.port, claim.new_ip)
            self._forget(claim.ip)
            if self._place_of(claim.new_ip, claim.new.switch) is not None:
                return  # a known host elsewhere: its next packet there is a move to confirm
        else:
            log.info("host %s moved from %s port %d (%s) to %s port %d (%s): no answer at its old place",
                     claim.ip, claim.old.switch, claim.old.port, claim.old.mac, claim.new.switch, claim.new.port,
                     claim.new.mac)
        if claim.kind == MOVE and (holder := self._port_claim(claim.new_ip, claim.new, now)) is not None:
            self._moves.claim(holder)  # its new port holds a host: that one is asked next (probed by `tick`)
            return
        if self._occupant(claim.new_ip, claim.new) is None:
            name = self.name_for(claim.new_ip) if self.discovers else self.by_ip(claim.new_ip)
            if name is not None:
                try:
                    self._apply(name, claim.new_ip, claim.new, now)
                except ValueError as e:  # the port turned out to lead to a switch meanwhile
                    log.warning("%s not located at %s port %d: %s", claim.new_ip, claim.new.switch, claim.new.port, e)

    def _ask_idle(self, now: float) -> None:
        """Claim IDLE against every learned host silent for `host_idle_s` that is
        neither pinned nor named by a job (lock held)."""
        net = self._wiring.discovered
        assert net is not None
        for ip in net.hosts:
            if self._moves.last_heard(ip) is None:  # restored from the store: heard from at the restart
                self._moves.heard(ip, now)
        in_use: set[str] | None = None
        for ip in self._moves.silent_since(now - self._rules.host_idle_s):
            h = net.hosts.get(ip)
            if h is None:
                self._moves.forget(ip)
                continue
            in_use = self.in_use() if in_use is None else in_use
            if self._is_pinned(ip) or h.name in in_use or self._moves.pending(ip) is not None:
                continue
            if len(self._moves) >= self._moves.max_pending // 2:
                break  # the rest next time: half the table stays for moves, and no claim pushes out another
            self._moves.claim(Claim(IDLE, ip, Place(h.switch, h.port, h.mac), None, None, now))

    def _send_probes(self, claims: list[Claim]) -> None:
        """An ARP probe for each claim's host out of its old place, through every
        backend's sender (each sends only to its own switches)."""
        for claim in claims:
            for send in list(self.probe_senders):
                try:
                    send(claim.old.switch, claim.old.port, claim.ip)
                except Exception:  # noqa: BLE001 - one backend's failure must not stop the others
                    log.exception("probe for %s at %s port %d failed", claim.ip, claim.old.switch, claim.old.port)

    def pending_claims(self) -> list[Claim]:
        """The claims waiting for their confirmation, the oldest first."""
        with self._lock:
            return self._moves.claims()

    def on_ipv4(self, ip: str, mac: str, switch: str, port: int) -> None:
        """A copy of an IPv4 packet whose source the switch did not know (the switch
        forwarded the packet itself; this copy is for learning only)."""
        self._counters.packet_in("ipv4")
        try:
            place = Place(switch, port, normalise_mac(mac))
            with self._lock:
                occupant = self._occupant(str(ip), place)
            if occupant is not None:
                # An IPv4 source is no claim on a port another host holds: a host that
                # really replaced it ARPs first. Without this rule a flood of random
                # sources from a host's own port starts claims whose probe answers the
                # flood itself can crowd out of the packet-in meter.
                self._refuse(PORT_FULL, place, f"IPv4 from {ip} ({place.mac}) on the port of {occupant}: "
                                               "only ARP can claim an occupied port")
                return
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
        sender: str | None = None  # the host the sender is, if `learn` took its word
        try:
            sender = self._learn_joining(sender_ip, sender_mac, switch, port)
        except ValueError as e:
            log.warning("switch %s port %d: ARP from %s: %s", switch, port, sender_ip, e)
        came_from = (switch, port)
        if target_ip == sender_ip:
            return ArpAction()  # a gratuitous announcement: learned from, nothing to answer
        if op == ARP_REPLY:
            # a host answering a request the controller passed on (to the asker), or a
            # probe for it (the controller answers those who asked for it); only if it
            # is the host it claims to be (a refused or pending claim is not passed on)
            if sender is None:
                return ArpAction()
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
            self._unexpected.pop(stray.ip, None)
            self._unexpected[stray.ip] = stray
            while len(self._unexpected) > MAX_UNEXPECTED:  # the oldest forgotten first
                del self._unexpected[next(iter(self._unexpected))]

    def _note_stray(self, key: tuple, message: str, *args: object) -> None:
        with self._lock:
            if key in self._strays:
                return
            self._strays[key] = None
            while len(self._strays) > MAX_STRAYS:
                self._strays.popitem(last=False)
        log.warning(message, *args)
