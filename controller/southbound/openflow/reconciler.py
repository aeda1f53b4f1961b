"""Bringing OpenFlow switches to their desired state: read back, diff, send in phases.

One worker thread (`Reconciler.run`) does everything that waits: for each
switch whose actual state is unknown it reads the owned entries back (flow,
group-desc and meter-config multipart requests; only flows whose cookie is
ours, groups and meters in the configured id ranges), asks the manager for the
make-before-break operations, and sends them phase by phase
(`reconcile.phases`) with a barrier after each phase, waiting for every barrier
reply before the next phase, so new downstream entries exist before upstream
ones redirect traffic. The actual state is remembered after each batch
(`reconcile.apply`); an error reply, a barrier timeout or an inconsistency
makes it unknown, and the switch is read back and repaired at once, at most
`MAX_RETRIES` times in a row (a switch that keeps refusing waits for the next
plan or reconnect). With several instances only the leader writes, only as the
master of the switch, and only while its lease is valid by the local clock.
"""

from __future__ import annotations

import logging
import queue

from controller.southbound.openflow.channel import Channel, Switch
from controller.southbound.openflow.entries import COOKIE_OWNER, COOKIE_OWNER_MASK, SwitchState, is_owned_cookie
from controller.southbound.openflow.manager import OpenFlowManager
from controller.southbound.openflow.messages import (
    describe_op,
    flow_from_stats,
    group_from_stats,
    meter_from_stats,
    op_message,
)
from controller.southbound.openflow.reconcile import InconsistentOp, Op, apply, phases
from controller.southbound.openflow.roles import Roles
from controller.southbound.sync_queue import run_worker

log = logging.getLogger("controller.ofctl")

BARRIER_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 5.0
MAX_RETRIES = 3


class Reconciler:
    """The sync worker of the OpenFlow app (see the module docstring). `switches`
    is the app's dpid -> `Switch` map, guarded by `channel.lock`."""

    def __init__(self, switches: dict[int, Switch], channel: Channel, manager: OpenFlowManager, roles: Roles) -> None:
        self._switches = switches
        self._channel = channel
        self._manager = manager
        self._roles = roles
        self.queue: queue.Queue = queue.Queue()
        self.stopping = False

    def sync_all(self) -> None:
        """Sync every connected switch soon (a new desired state, a new term)."""
        self.queue.put(("plan", None))

    def sync_switch(self, dpid: int, why: str = "sync") -> None:
        """Sync switch `dpid` soon (it connected, or must be repaired)."""
        self.queue.put((why, dpid))

    def stop(self) -> None:
        self.stopping = True
        self.queue.put(None)

    def run(self) -> None:
        run_worker(self.queue, lambda: self.stopping, self.sync, "sending operations")

    def read_state(self, sw: Switch) -> SwitchState:
        """The owned flows, groups and meters of a switch, read back (flows by their
        cookie, groups and meters by the configured id ranges)."""
        dp = sw.dp
        ofp, parser = dp.ofproto, dp.ofproto_parser
        reqs = [
            parser.OFPFlowStatsRequest(
                dp, table_id=ofp.OFPTT_ALL, cookie=COOKIE_OWNER, cookie_mask=COOKIE_OWNER_MASK
            ),
            parser.OFPGroupDescStatsRequest(dp, 0),
            parser.OFPMeterConfigStatsRequest(dp, 0, ofp.OFPM_ALL),
        ]
        waits = [(r, self._channel.request(sw, r, type(r).__name__)) for r in reqs]
        try:
            for r, p in waits:
                if not p.event.wait(READ_TIMEOUT_S):
                    raise TimeoutError(f"switch {sw.name}: no reply to {type(r).__name__}")
                if p.error:
                    raise ConnectionError(f"switch {sw.name}: {type(r).__name__} failed: {p.error}")
        finally:
            for r, _ in waits:
                self._channel.done(r.xid)
        flows = []
        for stat in waits[0][1].bodies:
            if not is_owned_cookie(stat.cookie):
                continue
            try:
                flows.append(flow_from_stats(stat))
            except ValueError as e:
                log.warning("switch %s: owned flow not understood (%s); it stays", sw.name, e)
        # groups and meters carry no cookie: ours are those with our ids
        groups = [group_from_stats(s) for s in waits[1][1].bodies if self._manager.owns_group(s.group_id)]
        meters = [meter_from_stats(s) for s in waits[2][1].bodies if self._manager.owns_meter(s.meter_id)]
        return SwitchState(frozenset(flows), frozenset(groups), frozenset(meters))

    def sync(self, dpids: set[int] | None) -> None:
        """Bring the given switches (None: every connected one) to their desired state."""
        if not self._manager.has_plan():
            return  # no plan yet (or only failed ones): never reconcile against "nothing"
        roles = self._roles
        with self._channel.lock:
            targets = [sw for dpid, sw in self._switches.items() if dpids is None or dpid in dpids]
        term = roles.term
        if roles.ha:  # several instances: only the leader writes, and only as master (docs/ha.md)
            if term is None or not roles.may_write(term):
                return
            unclaimed = [sw for sw in targets if sw.master_term != term and sw.connected]
            if unclaimed:
                roles.claim(unclaimed, term)
            targets = [sw for sw in targets if sw.master_term == term]
        ops_by_switch: dict[str, list[Op]] = {}
        by_name: dict[str, Switch] = {}
        for sw in targets:
            try:
                if sw.actual is None:
                    sw.actual = self.read_state(sw)
                    log.info(
                        "switch %s: read back %d owned flows, %d groups, %d meters",
                        sw.name, len(sw.actual.flows), len(sw.actual.groups), len(sw.actual.meters),
                    )
                ops = self._manager.ops_for(sw.name, sw.actual)
            except Exception as e:  # noqa: BLE001
                log.error("switch %s: cannot read its state: %r", sw.name, e)
                sw.actual = None
                continue
            if ops:
                ops_by_switch[sw.name] = ops
                by_name[sw.name] = sw
        if not ops_by_switch:
            return
        for number, batch in enumerate(phases(ops_by_switch)):
            if roles.ha and not roles.may_write(term):
                # the lease may have expired (this process was frozen?): write nothing more
                log.warning("term %s: the lease is not known to be valid (a frozen process?): "
                            "phase %d and those after it not sent", term, number)
                for sw in by_name.values():
                    sw.actual = None
                return
            self._send_phase(number, batch, by_name)
        self._remember(ops_by_switch, by_name)

    def _send_phase(self, number: int, batch: dict[str, list[Op]], by_name: dict[str, Switch]) -> None:
        """Send one phase to every switch, then a barrier each, and wait for them all."""
        barriers = []
        for name, ops in batch.items():
            sw = by_name[name]
            try:
                for op in ops:
                    self._channel.send(sw, op_message(sw.dp, op), describe_op(op), op)
                barrier = sw.dp.ofproto_parser.OFPBarrierRequest(sw.dp)
                barriers.append((sw, self._channel.request(sw, barrier, "barrier"), barrier.xid))
            except ConnectionError as e:
                log.error("%s", e)
                sw.actual = None
        for sw, pending, xid in barriers:
            ok = pending.event.wait(BARRIER_TIMEOUT_S)
            self._channel.done(xid)
            if not ok:
                log.error("switch %s: no barrier reply in phase %d within %.0f s", sw.name, number, BARRIER_TIMEOUT_S)
                sw.actual = None

    def _remember(self, ops_by_switch: dict[str, list[Op]], by_name: dict[str, Switch]) -> None:
        """The actual state after the batches; a switch whose state became unknown is
        read back and repaired now, at most MAX_RETRIES times in a row."""
        for name, ops in ops_by_switch.items():
            sw = by_name[name]
            with self._channel.lock:
                if sw.actual is None:  # an error or a timeout: read it back next time
                    continue
                try:
                    sw.actual = apply(ops, sw.actual)
                except InconsistentOp as e:
                    log.warning("switch %s: remembered state inconsistent (%s); reading it back next time", name, e)
                    sw.actual = None
            log.info("switch %s: sent %d operations", name, len(ops))
        for name, sw in by_name.items():
            if sw.actual is not None:
                sw.retries = 0
            elif sw.connected and not self.stopping and sw.retries < MAX_RETRIES:
                sw.retries += 1
                log.info("switch %s: reading it back to repair (attempt %d)", name, sw.retries)
                self.sync_switch(sw.dp.id, "retry")
