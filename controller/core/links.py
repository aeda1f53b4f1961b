"""The links' state: down, held down after a flap, missing, and their capacities.

`Links` owns:
- the links that are down (a port down at either end, a switch gone) and, for a
  link that came up again, its hold-down: a flapping link does not thrash the
  planner. Going down is acted on at once (a debounced re-plan without the
  link). Coming up is not trusted at once: the link stays out of the plan ("held
  down") until it has stayed up for its hold-down; going down meanwhile cancels
  the wait, which starts afresh when it next comes up. The end of a hold-down is
  a change made at that moment (debounced like any other, so links that come up
  together rejoin in one re-plan), and the planning loop counts it as a due
  time, so the worker wakes for it with no other event. While a link is held
  down, its downs and ups change nothing the planner sees. Each link's hold-down
  starts at `planner.link_hold_down_s`. A flap, a down while the link is held
  down or less than `planner.link_hold_down_max_s` after it rejoined the plan,
  doubles it, up to `link_hold_down_max_s`; a down after the link has been in
  the plan for `link_hold_down_max_s` starts again from the base. Flaps are
  counted (`flaps`). With `link_hold_down_s: 0` a link rejoins at once;
- the declared links between two switches that LLDP never reported (`missing`);
- each link's capacity: the configured one if the config states it, else the
  smaller of the speeds its switch ends report for their ports, else the
  config's default (`capacity`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

from controller.addressing.ports import PortMap
from controller.algorithm.model import Link, Topology
from controller.algorithm.network import Network
from controller.algorithm.wire import payload_capacity
from controller.config import Config, explicit_capacities
from controller.core.changes import Changes
from controller.core.devices import BudgetState, Devices, SwitchLimits
from controller.core.errors import HostsCutOff
from controller.core.wiring import Wiring

log = logging.getLogger(__name__)

MISSING_LINK_GRACE_S = 15.0  # LLDP speaks about every second per port: a link unseen this long is missing

LinkKey = frozenset[str]  # a link by its two node names


class Links:
    """Link state, hold-downs and capacities (see the module docstring)."""

    def __init__(self, config: Config, wiring: Wiring, devices: Devices, changes: Changes) -> None:
        self.config = config
        self.discovers = config.discovers
        self._settings = config.planner
        self._wiring = wiring
        self._devices = devices
        self._changes = changes
        self._lock = changes.lock
        self._clock = changes.clock
        self._down: set[LinkKey] = set()
        # link -> when its hold-down ends; its current hold-down (grows while it
        # flaps); when it last rejoined the plan
        self._held: dict[LinkKey, float] = {}
        self._hold: dict[LinkKey, float] = {}
        self._rejoined: dict[LinkKey, float] = {}
        self.flaps = 0
        self._missing_logged: set[tuple[str, str]] = set()
        self._payload: tuple[Topology, Topology, Network] | None = None  # (full, planning topology, network)
        # links whose capacity the config states (the others take their switch ports' speeds)
        self._explicit = explicit_capacities(config, wiring.topology)

    # -- down and up ------------------------------------------------------------------------------
    def _key(self, a: str, b: str) -> LinkKey:
        key = frozenset((a, b))
        if key not in self._wiring.links:
            raise ValueError(f"no link between {a!r} and {b!r}")
        return key

    def down(self, a: str, b: str) -> bool:
        """The link between nodes `a` and `b` is down: plan without it (a debounced
        re-plan; none if it was held down, so not in the plan anyway). True if this
        changed anything."""
        key = self._key(a, b)
        with self._lock:
            if key in self._down:
                return False
            now = self._clock()
            held = self._held.pop(key, None) is not None
            s = self._settings
            rejoined = self._rejoined.pop(key, None)
            flap = held or (rejoined is not None and now - rejoined < s.link_hold_down_max_s)
            if flap:
                self.flaps += 1
                self._hold[key] = min(2 * self._hold.get(key, s.link_hold_down_s), s.link_hold_down_max_s)
            else:
                self._hold[key] = s.link_hold_down_s
            hold = self._hold[key]
            self._down.add(key)
            if not held:
                self._changes.mark()
        if flap:
            log.warning("link %s - %s down (flapping: held down for %g s when it comes up)", a, b, hold)
        else:
            log.warning("link %s - %s down", a, b)
        return True

    def up(self, a: str, b: str) -> bool:
        """The link between nodes `a` and `b` is up again: it rejoins the plan once
        its hold-down ends (at once with `link_hold_down_s: 0`), a debounced re-plan.
        True if this changed anything."""
        key = self._key(a, b)
        with self._lock:
            if key not in self._down:
                return False
            self._down.discard(key)
            now = self._clock()
            hold = self._hold.get(key, self._settings.link_hold_down_s)
            if hold > 0:
                self._held[key] = now + hold
                self._changes.wake()  # the worker must wake when the hold-down ends
            else:
                self._rejoined[key] = now
                self._changes.mark()
        if hold > 0:
            log.warning("link %s - %s up: held down for %g s before it rejoins the plan", a, b, hold)
        else:
            log.warning("link %s - %s up", a, b)
        return True

    def release_holds(self, now: float) -> None:
        """Links whose hold-down has ended by `now` rejoin the plan: a change made
        when the hold-down ended (lock held)."""
        for key, until in sorted(self._held.items(), key=lambda kv: kv[1]):
            if until > now:
                break
            del self._held[key]
            self._rejoined[key] = until
            self._changes.mark(until)
            log.warning("link %s - %s rejoins the plan: up for its hold-down of %g s", *sorted(key), self._hold[key])

    def hold_ends(self) -> float | None:
        """When the first hold-down ends (lock held); None if no link is held down."""
        return min(self._held.values(), default=None)

    def out_of_plan(self) -> frozenset[LinkKey]:
        """The links the next plan leaves out: down or held down (lock held). A link
        no longer in the topology (a discovered network changed) is forgotten."""
        links = self._wiring.links
        self._down = {k for k in self._down if k in links}
        return frozenset(self._down) | frozenset(k for k in self._held if k in links)

    def planning_topology(
        self,
        down: frozenset[LinkKey] = frozenset(),
        budgets: BudgetState | None = None,
        ports: PortMap | None = None,
        full: Topology | None = None,
    ) -> tuple[Topology, Network]:
        """The topology `full` (default: the current one) without the links `down`
        (same nodes, so the same indices and the full port map still apply), with
        each switch's budgets the smallest of the configured, reported and
        table-full ones (`budgets`, default: none reported or learned), each link's
        capacity as `capacity` says (`ports`: the port map, default the current
        one) less the frames' headers (`wire.payload_capacity`: jobs' rates are
        payload rates, their meters police them with the headers), and its
        Network. Raises HostsCutOff if a host cannot reach every other host
        without the down links."""
        budgets = budgets if budgets is not None else BudgetState({}, {}, {})
        if full is None or ports is None:
            current, current_ports = self._wiring.topology_and_ports()
            full = current if full is None else full
            ports = current_ports if ports is None else ports
        if not down and not budgets.table_full_groups and not budgets.table_full_entries and not budgets.reported:
            cached = self._payload
            if cached is None or cached[0] is not full:
                topo = dataclasses.replace(full, links=tuple(dataclasses.replace(link, capacity=payload_capacity(
                    link.capacity)) for link in full.links))
                cached = self._payload = (full, topo, Network(topo))
            return cached[1], cached[2]
        nodes = []
        for n in full.nodes:
            if n.id in budgets.table_full_groups or n.id in budgets.table_full_entries or n.id in budgets.reported:
                (g, _), (f, _) = Devices.budgets(n, budgets)
                n = dataclasses.replace(n, group_capacity=g, entry_capacity=f)
            nodes.append(n)
        links = tuple(
            Link(link.a, link.b, payload_capacity(self.capacity(link, ports, budgets.reported, full)[0]))
            for link in full.links
            if frozenset((link.a, link.b)) not in down
        )
        topo = Topology(tuple(nodes), links)
        hosts = topo.hosts
        if hosts:
            seen = {hosts[0]}
            stack = [hosts[0]]
            while stack:
                v = stack.pop()
                for w in topo.neighbors[v]:
                    if w not in seen:
                        seen.add(w)
                        stack.append(w)
            cut = [topo.name(h) for h in hosts if h not in seen]
            if cut:
                names = ", ".join("-".join(sorted(k)) for k in sorted(down, key=sorted))
                raise HostsCutOff(
                    f"with links {names} down, hosts {', '.join(cut[:5])} are unreachable; keeping the last plan"
                )
        return topo, Network(topo)

    def held_down(self) -> dict[tuple[str, str], float]:
        """(a, b) sorted -> seconds left of its hold-down, for every link up again
        but not yet back in the plan."""
        with self._lock:
            now = self._clock()
            self.release_holds(now)
            return {tuple(sorted(k)): until - now for k, until in sorted(self._held.items(), key=lambda kv: sorted(kv[0]))}

    def links_down(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(tuple(sorted(k)) for k in self._down if k in self._wiring.links)

    # -- what the wire does not show ------------------------------------------------------------
    def missing(self, grace_s: float = MISSING_LINK_GRACE_S) -> list[tuple[str, str]]:
        """Declared links between two switches that have both been connected for
        `grace_s` seconds, and that LLDP has not reported from either end: the wire
        differs from the config (a cable missing or plugged elsewhere). Each is
        logged once. None in a discovered network."""
        if self.discovers:
            return []
        since_of = self._devices.connected_since()
        with self._lock:
            now = self._clock()
            seen = set(self._wiring.ports_snapshot()[1])
            topo = self._wiring.topology
            out = []
            for link in topo.links:
                a, b = topo.index[link.a], topo.index[link.b]
                if not (topo.is_switch(a) and topo.is_switch(b)):
                    continue
                if len({self._devices.backend(x) for x in (link.a, link.b)}) > 1:
                    continue  # each backend reads its own LLDP probes only: such a link is never seen
                since = [since_of.get(x) for x in (link.a, link.b)]
                if any(t is None or now - t < grace_s for t in since):
                    continue
                if (a, b) in seen or (b, a) in seen:
                    continue
                pair = tuple(sorted((link.a, link.b)))
                out.append(pair)
                if pair not in self._missing_logged:
                    self._missing_logged.add(pair)
                    log.warning("link %s - %s of the topology not seen by LLDP from either end %.0f s after both "
                                "switches connected: check its cabling (GET /links: missing)", *pair, grace_s)
            return sorted(out)

    # -- capacities -----------------------------------------------------------------------------
    def capacity(
        self, link: Link, ports: PortMap, reported: Mapping[str, SwitchLimits], topology: Topology
    ) -> tuple[float, str]:
        """(capacity, source) of a link: the configured one ("config") if the
        config states it (`config.explicit_capacities`); else the smaller of the
        speeds its switch ends report for their ports ("port"; an end that reports
        0 or nothing is left out; a host link: its switch end's); else the
        config's default ("config")."""
        if frozenset((link.a, link.b)) in self._explicit:
            return link.capacity, "config"
        index = topology.index
        speeds = []
        for x, y in ((link.a, link.b), (link.b, link.a)):
            rep = reported.get(x)
            port = ports.get((index[x], index[y])) if rep is not None else None
            if port is not None and rep.port_speeds.get(port, 0) > 0:
                speeds.append(rep.port_speeds[port])
        if not speeds:
            return link.capacity, "config"
        return float(min(speeds)), "port"

    def capacities(self) -> dict[tuple[str, str], tuple[float, str]]:
        """(a, b) of every link of the topology -> (the capacity plans use, its
        source: "config" or "port")."""
        topo, ports = self._wiring.topology_and_ports()
        reported = self._devices.limits()
        return {(link.a, link.b): self.capacity(link, ports, reported, topo) for link in topo.links}
