"""The switches: which backend programs each, whether it is connected, what it can hold.

`Devices` owns, per switch:
- its backend (`config.inventory`: the config says it once) and whether it is
  connected (and programmable) or, over P4Runtime, controlled by another client;
- the switches that connected but are not in the declared topology (never programmed);
- admission (`southbound.admit`, `Config.admit`): in a learned network with
  `admit: declared`, a switch the config does not list is refused (`refuse`):
  listed with why (GET /switches `refused`; at most `MAX_REFUSED`, the oldest
  forgotten first), counted (`switch_refused`), never joins the network;
- its limits: what it reported (`report_limits`: OpenFlow group and table
  features and port speeds, a P4 program's sizes), the budgets learned from
  table-full errors (`table_full`: kept until restart, only ever lowered), and
  the effective budgets every plan keeps within: the smallest of the
  configured, reported and learned ones (`budgets`), with where each comes from.

In a discovered network a switch seen for the first time joins it
(`Wiring.add_switch`). Every change the planner must see is counted in
`Changes`; `table_full` reads the served plan (`ServedPlan`) to learn how many
groups or entries the refusing switch held.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.algorithm.model import Node
from controller.config import Config, Inventory
from controller.core.changes import Changes
from controller.core.counters import Counters
from controller.core.port_rates import LinkLoad
from controller.core.served import ServedPlan
from controller.core.wiring import MAX_UNEXPECTED, Wiring

MAX_REFUSED = 1000  # refused switches listed (GET /switches), the oldest forgotten first

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SwitchStatus:
    id: str
    connected: bool
    groups_used: int
    group_capacity: int | None
    entries_used: int
    entry_capacity: int | None
    flows: int
    meters: int
    learned_group_capacity: int | None = None
    learned_entry_capacity: int | None = None
    backend: str = "openflow"
    other_primary: bool = False  # P4Runtime: reachable, but another client is primary (not ours to program)
    # where the budgets come from: `group_capacity`/`entry_capacity` above are the
    # effective ones, min(configured, reported, learned); the source is the one
    # that set it ("config", "switch", "p4info", "table_full"; None: unlimited)
    configured_group_capacity: int | None = None
    configured_entry_capacity: int | None = None
    reported_group_capacity: int | None = None
    reported_entry_capacity: int | None = None
    group_capacity_source: str | None = None
    entry_capacity_source: str | None = None
    reported_port_speeds: Mapping[int, int] = field(default_factory=dict)  # port -> bit/s, as reported
    groups: int = 0  # groups in the desired state: the plan's and fast failover's (OpenFlow)


@dataclass(frozen=True)
class SwitchLimits:
    """What a switch said about its own limits (`report_limits`); None: not said.

    `max_groups`: the groups of type ALL it holds (OpenFlow: OFPMP_GROUP_FEATURES);
    `max_entries`: the entries of the table holding the multicast flows (OpenFlow:
    OFPMP_TABLE_FEATURES of TABLE_FORWARD); `port_speeds`: port -> bit/s (OpenFlow:
    OFPMP_PORT_DESC curr_speed, else max_speed; 0: the port did not say);
    `source`: "switch" (OpenFlow) or "p4info" (a P4 program's sizes)."""

    max_groups: int | None = None
    max_entries: int | None = None
    port_speeds: Mapping[int, int] = field(default_factory=dict)
    source: str = "switch"


Budget = tuple[int | None, str | None]  # (the budget, where it comes from); (None, None): unlimited


@dataclass(frozen=True)
class BudgetState:
    """What the budgets of a plan are made from, read at once (lock held)."""

    reported: Mapping[str, SwitchLimits]
    table_full_groups: Mapping[str, int]
    table_full_entries: Mapping[str, int]


class Devices:
    """Switch state and limits (see the module docstring)."""

    def __init__(
        self, config: Config, inventory: Inventory, wiring: Wiring, changes: Changes, served: ServedPlan, load: LinkLoad,
        counters: Counters | None = None,
    ) -> None:
        self.config = config
        self._counters = counters if counters is not None else Counters()
        self._refused: collections.OrderedDict[str, str] = collections.OrderedDict()  # switch -> why
        self.discovers = config.discovers
        self._wiring = wiring
        self._changes = changes
        self._lock = changes.lock
        self._served = served
        self._load = load
        self.inventory = inventory
        self._connected: set[str] = set()
        self._connected_since: dict[str, float] = {}  # switch -> when it (last) connected
        self._other_primary: set[str] = set()  # P4Runtime switches another client is primary for
        self.not_primary_count = 0
        self._unexpected: set[str] = set()  # switches that connected but are not declared
        self._reported: dict[str, SwitchLimits] = {}
        # budgets learned from "table full" errors (switch -> budget); only ever lowered
        self._full_groups: dict[str, int] = {}
        self._full_entries: dict[str, int] = {}
        self._refused_in_plan: dict[tuple[str, str], tuple[int, frozenset[str]]] = {}
        self.table_full_errors = 0

    # -- lookups ------------------------------------------------------------------------------
    def backend(self, switch: str) -> str:
        """"openflow" or "p4runtime": the southbound that programs `switch`
        (`Inventory.backend`: in a discovered network a switch the config does not
        list is an OpenFlow datapath)."""
        return self.inventory.backend(switch)

    def is_switch(self, switch: str) -> bool:
        """A switch of the topology, a discovered one, or one the config lists."""
        return self._wiring.knows_switch(switch) or (self.discovers and switch in self.inventory.switches)

    def is_connected(self, switch: str) -> bool:
        with self._lock:
            return switch in self._connected

    def connected_since(self) -> dict[str, float]:
        """Switch -> when it (last) connected (clock seconds), for every connected switch."""
        with self._lock:
            return dict(self._connected_since)

    def limits(self) -> dict[str, SwitchLimits]:
        """Switch -> what it reported about its limits (`report_limits`)."""
        with self._lock:
            return dict(self._reported)

    def table_full_budgets(self) -> dict[str, dict[str, int]]:
        """{"groups": {switch: G}, "entries": {switch: F}} learned from table-full errors."""
        with self._lock:
            return {"groups": dict(self._full_groups), "entries": dict(self._full_entries)}

    def budget_state(self) -> BudgetState:
        """What a plan's budgets are made from (lock held)."""
        return BudgetState(dict(self._reported), dict(self._full_groups), dict(self._full_entries))

    def unexpected_switches(self) -> list[str]:
        with self._lock:
            return sorted(self._unexpected)

    def admits(self, switch: str) -> bool:
        """True if `switch` may join: `southbound.admit` is "any", or the config
        declares it (a declared topology's switch, or one `southbound.switches` lists)."""
        if self.config.admit == "any":
            return True
        return self._wiring.node_kind(switch) == "switch" or switch in self.inventory.switches

    def refuse(self, switch: str, why: str, kind: str = "switch_refused") -> None:
        """A switch was refused (`why`): listed (GET /switches `refused`), counted as
        `kind` and logged; never joins the network, never programmed."""
        with self._lock:
            self._refused.pop(switch, None)
            self._refused[switch] = why
            while len(self._refused) > MAX_REFUSED:
                self._refused.popitem(last=False)
        self._counters.refused(kind, switch=switch, why=why)

    def refused_switches(self) -> list[dict[str, str]]:
        """[{switch, why}] of the switches refused (the most recent `MAX_REFUSED`)."""
        with self._lock:
            return [{"switch": s, "why": w} for s, w in sorted(self._refused.items())]

    # -- facts from the backends ----------------------------------------------------------------
    def connected(self, switch: str) -> None:
        """`switch` is connected (and can be programmed). In a discovered network a
        switch seen for the first time joins it."""
        if self.discovers:
            if not self.admits(switch):
                raise ValueError(f"switch {switch!r} is not admitted (southbound.admit: declared)")
            self._wiring.add_switch(switch)
        elif self._wiring.node_kind(switch) != "switch":
            raise ValueError(f"unknown switch {switch!r}")
        with self._lock:
            if switch not in self._connected:
                self._connected_since[switch] = self._changes.clock()
            self._connected.add(switch)
            self._other_primary.discard(switch)

    def disconnected(self, switch: str) -> None:
        with self._lock:
            self._connected.discard(switch)
            self._connected_since.pop(switch, None)
            self._other_primary.discard(switch)
        self._load.forget(switch)

    def not_primary(self, switch: str, count: bool = True) -> None:
        """P4Runtime: the switch answers, but another client is primary for it, so
        this controller does not program it: shown as not connected, with
        `other_primary` (GET /switches, /metrics); `count` adds one to
        `not_primary_count`. Until `connected` or `disconnected`."""
        if not self.is_switch(switch):
            raise ValueError(f"unknown switch {switch!r}")
        with self._lock:
            self._connected.discard(switch)
            self._other_primary.add(switch)
            if count:
                self.not_primary_count += 1

    def unexpected(self, name: str) -> None:
        """A switch connected that the declared topology does not have (an OpenFlow
        datapath id no declared switch is given): logged once, listed, never programmed."""
        with self._lock:
            if name in self._unexpected or len(self._unexpected) >= MAX_UNEXPECTED:
                return
            self._unexpected.add(name)
        log.warning("switch %s connected, but the topology has no switch with its id (southbound.switches.NAME.dpid, "
                    "else switch index + 1): ignored (GET /switches: unexpected)", name)

    def report_limits(
        self,
        switch: str,
        *,
        max_groups: int | None = None,
        max_entries: int | None = None,
        port_speeds: Mapping[int, int] | None = None,
        source: str = "switch",
    ) -> bool:
        """Record what `switch` reported about its limits (the arguments given
        replace what it said before; None keeps it). A change is an ordinary
        change (one debounced re-plan); True if anything changed."""
        if not self.is_switch(switch):
            raise ValueError(f"unknown switch {switch!r}")
        with self._lock:
            old = self._reported.get(switch, SwitchLimits(source=source))
            new = SwitchLimits(
                old.max_groups if max_groups is None else max_groups,
                old.max_entries if max_entries is None else max_entries,
                dict(old.port_speeds) if port_speeds is None else dict(port_speeds),
                source,
            )
            if new == old and switch in self._reported:
                return False
            self._reported[switch] = new
            self._changes.mark()
        log.info(
            "switch %s reports max groups %s, max entries %s, port speeds %s (bit/s)",
            switch, new.max_groups, new.max_entries, dict(sorted(new.port_speeds.items())),
        )
        return True

    def port_speed(self, switch: str, port: int, speed_bps: int) -> None:
        """A port's speed changed (an OpenFlow port-status message): recorded with
        the speeds the switch reported for its other ports."""
        with self._lock:
            said = self._reported.get(switch)
            speeds = dict(said.port_speeds) if said is not None else {}
        speeds[port] = speed_bps
        self.report_limits(switch, port_speeds=speeds)

    def table_full(self, switch: str, table: str, job: str | None = None) -> int | None:
        """Switch `switch` refused an entry of `job` because its `table` is full
        ("group": out of groups or buckets; "entry": the flow table refused a
        multicast flow; "meter": out of meters).

        For "group"/"entry" the switch's budget G(v)/F(v) is lowered to the number
        of groups/entries the served plan gives it for jobs other than `job` and
        the jobs refused there before under the same plan (several refusals in one
        batch lower it once, to what fits; with `job` unknown: one less than the
        plan uses there), never above the configured budget and never above a
        budget learned before; the change triggers an ordinary (debounced) re-plan
        that keeps within it. Learned budgets are kept until restart. A full meter
        table is only counted: the planner does not model meters. Returns the
        learned budget, or None.
        """
        topology = self._wiring.topology
        if self._wiring.node_kind(switch) != "switch":
            raise ValueError(f"unknown switch {switch!r}")
        if table not in ("group", "entry", "meter"):
            raise ValueError(f"unknown table {table!r}")
        v = topology.index[switch]
        node = topology.nodes[v]
        with self._lock:
            self.table_full_errors += 1
            if table == "meter":
                log.error("switch %s: meter table full (job %s); meters are not planned, nothing re-planned", switch, job)
                return None
            served = self._served.current
            plan, generation = (served.plan, served.generation) if served is not None else (None, 0)
            learned = self._full_groups if table == "group" else self._full_entries
            configured = node.group_capacity if table == "group" else node.entry_capacity
            holders = [
                jp.job.id
                for jp in (plan.jobs if plan is not None else ())
                if v in (jp.structure.groups if table == "group" else jp.structure.entries)
            ]
            gen, refused = self._refused_in_plan.get((switch, table), (None, frozenset()))
            if gen != generation:
                refused = frozenset()
            if job is not None:
                refused = refused | {job}
                self._refused_in_plan[(switch, table)] = (generation, refused)
                budget = sum(1 for h in holders if h not in refused)
            else:
                budget = max(len(holders) - 1, 0)
            rep = self._reported.get(switch)
            said = None if rep is None else (rep.max_groups if table == "group" else rep.max_entries)
            for limit in (configured, said, learned.get(switch)):
                if limit is not None:
                    budget = min(budget, limit)
            if learned.get(switch) == budget:
                return budget
            learned[switch] = budget
            self._changes.mark()
        log.error(
            "switch %s: %s table full (job %s); %s budget learned: %d (configured %s); re-planning",
            switch, table, job, "group" if table == "group" else "entry", budget, configured,
        )
        return budget

    # -- budgets --------------------------------------------------------------------------------
    @staticmethod
    def budgets(node: Node, state: BudgetState) -> tuple[Budget, Budget]:
        """((G, its source), (F, its source)) of a switch: the smallest of the
        configured budget, the reported limit and the budget learned from table-full
        errors (a tie goes to the first of these)."""
        reported = state.reported.get(node.id)
        src = reported.source if reported is not None else "switch"
        g = _smallest(
            ("config", node.group_capacity),
            (src, reported.max_groups if reported is not None else None),
            ("table_full", state.table_full_groups.get(node.id)),
        )
        f = _smallest(
            ("config", node.entry_capacity),
            (src, reported.max_entries if reported is not None else None),
            ("table_full", state.table_full_entries.get(node.id)),
        )
        return g, f

    def statuses(self) -> list[SwitchStatus]:
        """Every switch of the topology: its state, budgets (effective, and where
        they come from) and what the served plan gives it."""
        served = self._served.current
        with self._lock:
            topology = self._wiring.topology
            state = self.budget_state()
            connected, other_primary = set(self._connected), set(self._other_primary)
        usage = {su.id: su for su in served.plan.switches} if served is not None else {}
        entries = served.switch_entries if served is not None else {}
        out = []
        for v in topology.switches:
            node = topology.nodes[v]
            su = usage.get(node.id)
            held = entries.get(node.id)
            rep = state.reported.get(node.id)
            (g, g_src), (f, f_src) = self.budgets(node, state)
            out.append(
                SwitchStatus(
                    node.id,
                    node.id in connected,
                    su.groups_used if su else 0,
                    g,
                    su.entries_used if su else 0,
                    f,
                    held.flows if held is not None else 0,
                    held.meters if held is not None else 0,
                    state.table_full_groups.get(node.id),
                    state.table_full_entries.get(node.id),
                    self.backend(node.id),
                    node.id in other_primary,
                    node.group_capacity,
                    node.entry_capacity,
                    rep.max_groups if rep is not None else None,
                    rep.max_entries if rep is not None else None,
                    g_src,
                    f_src,
                    dict(rep.port_speeds) if rep is not None else {},
                    groups=held.groups if held is not None else 0,
                )
            )
        return out


def _smallest(*candidates: tuple[str, int | None]) -> Budget:
    """(the smallest value, its source) of the (source, value) pairs whose value is
    not None; a tie goes to the first; (None, None) when none has a value."""
    best: Budget = (None, None)
    for source, value in candidates:
        if value is not None and (best[0] is None or value < best[0]):
            best = (value, source)
    return best
