"""The OpenFlow backend's manager: a plan in, the desired state of every OpenFlow
switch and the operations to reach it out. No os-ken here.

Like Faucet's valve, the manager is where the decisions are and the os-ken app
(`openflow.app`) only decodes events and sends what the manager returns:

- `on_plan` (registered with the core's planning loop) translates each
  `PlanUpdate` once, for the OpenFlow switches only (`translate.translate`, reusing
  the previous translation), keeps the desired state and the group and meter ids
  (stored, so that a restarted controller computes the same desired state and
  reconciles the switches instead of rebuilding them), and reports how many
  entries the new desired state writes (`BackendReport`);
- `ops_for(switch, actual)`: the make-before-break operations from a switch's
  actual state (read back, or remembered) to its desired one;
- which groups and meters are the controller's (`owns_group`, `owns_meter`: the
  configured id ranges; OpenFlow 1.3 groups and meters carry no cookie), and
  whose a refused group or flow was (`job_of_group`, `job_of_address`);
- `packet_in_meter_refused`: a switch without the packet-in meter gets none from
  then on (translated again at once; the app syncs it).

Listeners in `on_change` hear when the desired state changed (the app queues a
sync of every switch).

Size. The translation holds two unicast flow entries (IPv4 and ARP) per host on
every OpenFlow switch, about 435 bytes and 19 µs each (measured at k=16: 665,536
flows, 276 MB, 12.7 s). A declared topology that would need more than
`MAX_UNICAST_FLOWS` of them is refused at `attach` with `TooLarge` (the process
says so and exits) rather than growing until the machine runs out of memory: a
k=48 fat-tree (2,880 switches, 27,648 hosts) would need 159 million (about 69
GB). Aggregated routes (a prefix per pod and edge switch) are not implemented.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from controller.algorithm.backups import Backup, BackupCandidates, choose_backups
from controller.algorithm.model import Plan
from controller.core.service import ControllerService
from controller.core.updates import BackendReport, PlanUpdate, SwitchEntries, TranslationInputs
from controller.southbound.ids import IdAllocation
from controller.southbound.openflow.reconcile import Op, diff, diff_switch
from controller.southbound.openflow.entries import OFPM_CONTROLLER, SwitchState
from controller.southbound.openflow.failover import failovers_at
from controller.southbound.openflow.translate import Ids, Translation, translate

log = logging.getLogger(__name__)

BACKEND = "openflow"
IDS_STATE_KEY = "openflow_ids"
MAX_UNICAST_FLOWS = 10_000_000  # about 4.4 GB of desired state (k=24: 5.0 million; k=32: 21 million)


class TooLarge(ValueError):
    """The declared topology needs more unicast flow entries than MAX_UNICAST_FLOWS."""


def unicast_flows(switches: int, hosts: int) -> int:
    """The unicast flow entries of the translation: IPv4 and ARP per host on every switch."""
    return 2 * switches * hosts


@dataclass(frozen=True)
class OpenFlowPlan:
    """What the manager made of one plan: its generation, the plan as served, the
    desired state of every OpenFlow switch and, per switch, the operations from
    the previous desired state to it."""

    generation: int
    plan: Plan
    desired: Mapping[str, SwitchState]
    ops: Mapping[str, list[Op]]


class OpenFlowManager:
    """The desired state of the OpenFlow switches (see the module docstring)."""

    def __init__(self, service: ControllerService) -> None:
        self.service = service
        settings = service.config.southbound.openflow
        self.packet_in_pps = settings.packet_in_pps
        self.fast_failover = settings.fast_failover
        self.planned_dscp = service.config.southbound.planned_dscp  # the planned class (`openflow.planned`)
        self._group_ids, self._meter_ids = settings.group_ids, settings.meter_ids
        self._lock = threading.RLock()
        self._ids = self._load_ids()
        self._translation: Translation | None = None
        self._inputs: TranslationInputs | None = None
        self._desired: dict[str, SwitchState] = {}
        self._no_packet_in_meter: set[str] = set()  # switches that refused OFPM_CONTROLLER
        self._candidates = BackupCandidates()  # fast failover's, per job, kept between plans
        self.on_change: list[Callable[[], None]] = []  # the desired state changed (the app syncs)
        self.on_translated: list[Callable[[OpenFlowPlan], None]] = []  # each plan, translated
        self.last: OpenFlowPlan | None = None

    def attach(self) -> OpenFlowManager:
        """Receive the core's plans from now on (starting from the served one, if any).
        `TooLarge` if a declared topology needs more than MAX_UNICAST_FLOWS unicast
        flow entries (see the module docstring)."""
        if not self.service.config.discovers:
            topo = self.service.wiring.topology
            devices = self.service.devices
            switches = sum(1 for v in topo.switches if devices.backend(topo.name(v)) == BACKEND)
            need = unicast_flows(switches, len(topo.hosts))
            if need > MAX_UNICAST_FLOWS:
                raise TooLarge(
                    f"the OpenFlow backend would hold {need:,} unicast flow entries ({switches:,} OpenFlow switches x "
                    f"{len(topo.hosts):,} hosts x 2, about {need * 435 / 1e9:.0f} GB), more than its limit of "
                    f"{MAX_UNICAST_FLOWS:,}: routes aggregated per pod are not implemented (docs/controller.md, "
                    f"\"The controller at k=48\")")
        self.service.planning.on_plan.append(self.on_plan)
        served = self.service.served.current
        if served is not None:
            self.on_plan(served.update())
        return self

    def detach(self) -> None:
        if self.on_plan in self.service.planning.on_plan:
            self.service.planning.on_plan.remove(self.on_plan)

    # -- ids ---------------------------------------------------------------------------------------
    def _load_ids(self) -> Ids:
        """The ids of the last translation (ids outside the configured ranges are
        given new ones at the next plan)."""
        (g_first, g_last), (m_first, m_last) = self._group_ids, self._meter_ids
        fresh = Ids(IdAllocation(g_last, {}, g_first), IdAllocation(m_last, {}, m_first))
        raw = self.service.store.get_state(IDS_STATE_KEY)
        if raw is None:
            return fresh
        try:
            return Ids(
                IdAllocation(g_last, _id_table(raw["groups"]), g_first),
                IdAllocation(m_last, _id_table(raw["meters"]), m_first),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            log.warning("stored OpenFlow ids are unreadable; starting with fresh ones")
            return fresh

    def reload(self) -> None:
        """Take the ids from the store again (another instance wrote them: docs/ha.md)."""
        with self._lock:
            self._ids = self._load_ids()
            self._translation = None  # its ids are those of the last translation, now reloaded

    def owns_group(self, group_id: int) -> bool:
        """True if OpenFlow group `group_id` is the controller's (`southbound.openflow.group_ids`)."""
        with self._lock:
            return self._ids.groups.owns(group_id)

    def owns_meter(self, meter_id: int) -> bool:
        """True if OpenFlow meter `meter_id` is the controller's: in
        `southbound.openflow.meter_ids`, or the packet-in meter while it is on."""
        if meter_id == OFPM_CONTROLLER:
            return self.packet_in_pps > 0
        with self._lock:
            return self._ids.meters.owns(meter_id)

    def job_of_group(self, switch: str, group_id: int) -> str | None:
        """The job whose replication group on `switch` has id `group_id` (by the current ids)."""
        with self._lock:
            for job, gid in self._ids.groups.by_switch.get(switch, {}).items():
                if gid == group_id:
                    return job.split("/", 1)[0]  # a backup's group: "job/ff/..." (openflow.failover)
        return None

    def job_of_address(self, address: str) -> str | None:
        """The job holding group address `address` in the plan last translated."""
        with self._lock:
            inputs = self._inputs
        return inputs.job_of_address(address) if inputs is not None else None

    # -- plans -------------------------------------------------------------------------------------
    def _switches(self, inputs: TranslationInputs) -> frozenset[str]:
        """The OpenFlow switches of the planning network."""
        topo = inputs.network.topo
        devices = self.service.devices
        return frozenset(n for n in (topo.name(v) for v in topo.switches) if devices.backend(n) == BACKEND)

    def _translate(self, inputs: TranslationInputs) -> tuple[dict[str, SwitchState], dict[str, SwitchState]]:
        """Translate `inputs` (lock held); (the previous desired state, the new one)."""
        switches = self._switches(inputs)
        tr = translate(
            inputs, self._ids, self.packet_in_pps, frozenset(self._no_packet_in_meter), previous=self._translation,
            switches=switches, backups=self._backups(inputs, switches), planned_dscp=self.planned_dscp,
        )
        previous = self._desired
        self._translation, self._ids, self._inputs, self._desired = tr, tr.ids, inputs, tr.state
        return previous, tr.state

    def _backups(self, inputs: TranslationInputs, switches: frozenset[str]) -> tuple[Backup, ...]:
        """The plan's backups on the OpenFlow switches, with `fast_failover` on
        (`algorithm.backups`: only where the tables have room)."""
        if not self.fast_failover:
            return ()
        topo = inputs.network.topo
        return choose_backups(topo, inputs.network.routing, inputs.plan, {topo.index[n] for n in switches},
                              self._candidates)

    def port_down(self, switch: str, port: int) -> None:
        """A port of `switch` went down: count the jobs its fast-failover groups
        moved to a backup and those only a re-plan repairs (`failover.failovers_at`,
        /metrics `mcast_failovers_total`)."""
        with self._lock:
            state = self._desired.get(switch)
        if state is None:
            return
        moved, cut = failovers_at(state, port)
        self.service.counters.failover("data_plane", moved)
        self.service.counters.failover("controller", cut)
        if moved or cut:
            log.info("switch %s: port %d down: %d job(s) moved to a backup by the switch, %d left to the re-plan",
                     switch, port, moved, cut)

    def on_plan(self, update: PlanUpdate) -> BackendReport:
        """Translate a new plan for the OpenFlow switches (in the planning thread)."""
        with self._lock:
            previous, desired = self._translate(update.inputs)
            ids = self._ids
        ops = diff(desired, previous)
        written = sum(len(o) for o in ops.values())
        self.last = OpenFlowPlan(update.generation, update.plan, desired, ops)
        for listener in list(self.on_translated):
            listener(self.last)
        try:
            self.service.store.put_state(IDS_STATE_KEY, {"groups": _id_json(ids.groups), "meters": _id_json(ids.meters)})
        except Exception:  # noqa: BLE001 - the plan stands; only a restart would renumber
            log.exception("cannot store the OpenFlow ids")
        self._changed()
        return BackendReport(BACKEND, written, {
            sw: SwitchEntries(len(st.flows), sum(1 for m in st.meters if m.meter_id != OFPM_CONTROLLER), len(st.groups))
            for sw, st in desired.items()
        })

    def _changed(self) -> None:
        for listener in list(self.on_change):
            try:
                listener()
            except Exception:  # noqa: BLE001 - one bad listener must not stop the others
                log.exception("on_change listener %r failed", listener)

    def packet_in_meter_refused(self, switch: str) -> None:
        """`switch` refused its packet-in meter (OFPM_CONTROLLER; some OpenFlow
        switches have no such meter): it is left out of that switch's desired state
        from now on, so that the rest of the switch converges; what the switch
        sends to the controller is then not capped. Until restart."""
        with self._lock:
            if switch in self._no_packet_in_meter:
                return
            self._no_packet_in_meter.add(switch)
            if self._inputs is not None:
                self._translate(self._inputs)
        log.warning("switch %s refused the packet-in meter: what it sends to the controller is not capped", switch)
        self._changed()

    # -- reconciliation ------------------------------------------------------------------------------
    def has_plan(self) -> bool:
        """A plan has been translated (never reconcile a switch against "nothing")."""
        with self._lock:
            return self._inputs is not None

    def desired_state(self) -> dict[str, SwitchState]:
        """Switch -> its desired state, for every OpenFlow switch of the plan."""
        with self._lock:
            return dict(self._desired)

    def ops_for(self, switch: str, actual: SwitchState) -> list[Op]:
        """The make-before-break operations from `actual` (the owned entries read
        from the switch, or remembered) to the desired state of `switch`."""
        with self._lock:
            if switch not in self._desired and self.service.config.discovers:
                return []  # not in the plan yet (just discovered): nothing to reconcile against
            desired = self._desired.get(switch, SwitchState())
        return diff_switch(desired, actual)


def _id_json(alloc: IdAllocation) -> dict[str, dict[str, int]]:
    return {sw: dict(jobs) for sw, jobs in alloc.by_switch.items()}


def _id_table(raw: object) -> dict[str, dict[str, int]]:
    if not isinstance(raw, dict):
        raise TypeError("expected an object")
    out: dict[str, dict[str, int]] = {}
    for sw, jobs in raw.items():
        if not isinstance(sw, str) or not isinstance(jobs, dict):
            raise TypeError("expected switch -> {job: id}")
        table: dict[str, int] = {}
        for job, i in jobs.items():
            if not isinstance(job, str) or isinstance(i, bool) or not isinstance(i, int) or i < 1:
                raise ValueError("bad id")
            table[job] = i
        out[sw] = table
    return out
