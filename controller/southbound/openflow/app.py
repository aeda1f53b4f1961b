"""The OpenFlow 1.3 app (os-ken): the shim between os-ken and the core.

Thin, like Faucet's faucet.py: the handlers decode an event, find the switch and
hand over. What to install is decided by the manager (`openflow.manager`:
translation, desired state, operations); facts go to the core's parts
(`service.devices`, `.wiring`, `.links`, `.hosts`); the sync worker
(`openflow.reconciler`), the channel (`openflow.channel`: xids, replies) and the
roles of several instances (`openflow.roles`) do the rest. Entries become os-ken
messages in `openflow.messages`.

Admission: in a learned network with `southbound.admit: declared`, a datapath
the config does not name is refused (`service.devices.refuse`: listed in GET
/switches `refused`, counted as `switch_refused`, never joins the network). A
second connection from another address claiming a datapath id that is
connected is refused: counted as `switch_duplicate`, logged, its connection
closed; the first keeps working. A connection from the first one's address is
the switch itself reconnecting (a restart whose old connection os-ken has not
declared dead yet): it replaces the old one, as before.

Network learning:
- dpid: the n-th switch of the topology (`topology.switches` order, n from 0) has
  datapath id n + 1. A datapath with another id is logged and ignored.
- ports: the core's port map starts as `addressing.ports.default_port_map` (links
  numbered 1, 2, ... per switch in the order of `topology.links`, as Mininet
  numbers the ports of links added in that order) and is corrected as ports are
  learned: switch-to-switch links from the controller's own signed LLDP probes
  (`southbound.lldp`; below), host ports
  and MACs from the hosts' ARP packets (the ARP → controller flow of
  `openflow.translate`), through `service.wiring.learn_link` and the core's one
  host-learning decision (`service.hosts.on_arp`, `on_ipv4`), whose answer (proxy
  ARP, or the request passed on to the one host it asks for) is sent here;
  nothing is flooded.
  A link LLDP finds that the topology lacks is logged, never used.

LLDP: on connect each switch gets an LLDP → controller flow in table 0
(`LLDP_PRIORITY`, above every other; cookie `LLDP_COOKIE`, not the planner's
owner tag, so reconciliation leaves it alone; under the packet-in meter like
every packet-in). Every `southbound.lldp.interval_s` (one setting for
the LLDP rounds of both backends; and at once when a switch's port description
arrives, or a port comes up) a signed probe goes out of every
switch-facing port of a declared topology (by the port map), or, in a
discovered network, out of every port of the switch's port description except
ports where hosts were seen and declared edge ports. A probe handed back as a
packet-in is verified (`lldp.receive`: refused ones are dropped, counted and
logged) and becomes `service.wiring.learn_link`, which applies the rule of the
edge. A follower of a cluster sends none (its switches would refuse them).
Bounded: the ports remembered per switch are those of its port description and
port-status messages (a switch has at most `MAX_PORTS_PER_SWITCH`).

The source guard's drops (`guard_drops`, a source of `service.counters`, read at
/metrics scrape time): a flow-statistics request for the guard flows of table 0
(cookie kind "guard", `openflow.translate.guard_flows`) to every connected
switch, their packet counts summed per port.

Threads: os-ken 4.x's hub is native threads. Handlers run in os-ken's event
thread and never block: they record facts and queue work. One worker thread
(`openflow.reconciler`) does everything that waits: reading switches back and
sending the operations phase by phase. A new desired state (the manager
translated a plan, in the core's planning thread) only queues a "sync every
connected switch" item.

Links: a port-status message (reason DELETE, or state LINK_DOWN / config
PORT_DOWN) is mapped to its link through the service's port map; the link is
down while either of its ends is reported down or either of its switches is
disconnected (`southbound.liveness`: `service.links.down` / `up`, which re-plan
around it). The
ports of a reconnecting switch are not read back: an end reported down before
the disconnect stays down until its next port-status.

Errors: an error reply makes the switch's remembered state unknown (it is read
back before the next batch). Error replies are matched to the sent message by
xid, logged with the switch and the entry, and counted
(`service.counters.backend_error("openflow")`). A "table full" error
(`messages.table_full_kind`: out of groups or buckets, a multicast flow refused
with TABLE_FULL, out of meters) is also reported to `service.devices.table_full`
with the job of the refused entry, which lowers that switch's budget and re-plans.

Limits: on connect the app asks each switch for its port descriptions
(OFPMP_PORT_DESC), its group features (OFPMP_GROUP_FEATURES) and, with
`southbound.openflow.table_features` on, its table features
(OFPMP_TABLE_FEATURES), and hands what they say to
`service.devices.report_limits`: the speed of each port (`curr_speed`, else `max_speed`,
kbit/s, as bit/s), `max_groups` of type ALL, and `max_entries` of
`TABLE_FORWARD`, the table of the multicast flows (`limits_from_reply`). A
port-status message updates its port's speed. Multipart replies are collected
until the last part (no OFPMPF_REPLY_MORE). Table features are off by default:
Open vSwitch answers for all 254 tables, every one listing its match fields,
actions and next tables, and on the 20-switch Mininet fat-tree (tests/
test_emulation.py) asking every switch at once delayed the flow-stats replies
past READ_TIMEOUT_S until the switches dropped and reconnected, over and over.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Sequence

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib.packet import arp, ethernet, ipv4, packet
from os_ken.ofproto import ofproto_v1_3

from controller.core.service import ControllerService
from controller.southbound import lldp
from controller.southbound.liveness import LinkLiveness
from controller.southbound.openflow.channel import Channel, Switch
from controller.southbound.openflow.entries import COOKIE_KIND_MASK, COOKIE_OWNER_MASK, OFPM_CONTROLLER, decode_cookie
from controller.southbound.openflow.manager import OpenFlowManager
from controller.southbound.openflow.messages import (
    arp_reply,
    limits_from_reply,
    port_speeds,
    table_full_kind,
)
from controller.southbound.openflow.names import datapath_names, openflow_name
from controller.southbound.openflow.reconcile import (
    AddFlow,
    AddGroup,
    AddMeter,
    ModifyFlow,
    ModifyGroup,
    ModifyMeter,
    Op,
)
from controller.southbound.openflow.reconciler import Reconciler
from controller.southbound.openflow.roles import Roles
from controller.southbound.openflow.translate import GUARD_COOKIE, guard_drops_from_stats
from controller.southbound.periodic import every
from controller.southbound.probes import (
    arp_probe,
    arp_reply_frame,
    host_loop,
    probe_loop,
    probe_sender,
    send_probes,
)
from controller.southbound.sync_queue import after_sync, send_after_plan

log = logging.getLogger("controller.ofctl")

LLDP_PRIORITY = 0xFFFF
LLDP_COOKIE = 0x4C4C << 48 | lldp.ETH_LLDP  # "LL": not the planner's cookie owner (never reconciled)
MAX_PORTS_PER_SWITCH = 4096
GUARD_STATS_TIMEOUT_S = 2.0  # a /metrics scrape waits at most this long for the guard flows' statistics


def _peer_ip(dp) -> str | None:
    """The IP address a datapath connected from (None if unknown)."""
    address = getattr(dp, "address", None)
    return address[0] if address else None


class MulticastOFCtl(app_manager.OSKenApp):
    """The os-ken app. `attach(service, manager)` must be called before switches
    connect (`controller.app.run` does it); `detached(...)` gives the handlers
    alone, without os-ken's app manager and without threads (tests, tools)."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._init_state()

    def _init_state(self) -> None:
        self.service: ControllerService | None = None
        self.manager: OpenFlowManager | None = None
        self.channel = Channel()
        self._lock = self.channel.lock  # guards `_switches` too
        self._dpids: dict[int, str] = {}
        self._switches: dict[int, Switch] = {}
        self._attached = threading.Event()
        self._stop = threading.Event()  # stops the prober and the port statistics poller
        self.errors = 0
        # the link ends (switch, neighbour) reported down by port status
        self._ends_down: set[tuple[str, str]] = set()
        self.roles = Roles(self.channel, None)
        self.reconciler: Reconciler | None = None
        self.liveness: LinkLiveness | None = None
        self.signer: lldp.ProbeSigner | None = None
        self._of_ports: dict[int, set[int]] = {}  # dpid -> its ports (port description, port status)

    @classmethod
    def detached(cls, service: ControllerService, manager: OpenFlowManager | None = None) -> MulticastOFCtl:
        """The handlers only, attached to `service` with no thread started and no
        os-ken app manager."""
        app = cls.__new__(cls)
        app._init_state()
        app.attach(service, manager or OpenFlowManager(service), start=False)
        return app

    # -- life cycle ------------------------------------------------------------------------
    def attach(self, service: ControllerService, manager: OpenFlowManager, start: bool = True) -> None:
        """Work for `service`, with `manager` deciding what the switches hold; with
        `start`, run the sync worker, the port statistics poller and (in a
        discovered network) the host prober."""
        self.service, self.manager = service, manager
        self.roles.cluster = service.cluster
        self._dpids = datapath_names(service.inventory, service.wiring.topology)
        self.reconciler = Reconciler(self._switches, self.channel, manager, self.roles)
        self.liveness = LinkLiveness(service, lambda a, b: (a, b) in self._ends_down)
        self.signer = lldp.signer_for(service)
        manager.on_change.append(self.reconciler.sync_all)
        service.hosts.probe_senders.append(probe_sender(lambda sw, port, frame: self._packet_out(((sw, port),), frame)))
        service.counters.guard_drop_sources.append(self.guard_drops)
        if start:
            self._spawn(self.reconciler.run, "ofctl-sender")
            self._spawn(lambda: host_loop(self._stop, service.config.discovery.probe_interval_s, service.hosts.tick),
                        "ofctl-hosts")
            if service.config.discovers:
                self._spawn(lambda: probe_loop(self._stop, service.config.discovery.probe_interval_s,
                                               service.jobs.probe_targets, self.probe), "ofctl-prober")
            if service.config.southbound.openflow.port_stats_s > 0:
                self._spawn(self._port_stats_loop, "ofctl-port-stats")
            if service.config.southbound.lldp.interval_s > 0:
                self._spawn(self._lldp_loop, "ofctl-lldp")
        self._attached.set()

    def _spawn(self, target, name: str) -> None:
        threading.Thread(target=target, name=name, daemon=True).start()

    def shutdown(self, timeout: float = 5.0) -> None:  # noqa: ARG002 - the threads are daemons
        self._stop.set()
        if self.reconciler is not None:
            self.reconciler.stop()
        if self.manager is not None and self.reconciler is not None and self.reconciler.sync_all in self.manager.on_change:
            self.manager.on_change.remove(self.reconciler.sync_all)

    def _name(self, dp) -> str | None:
        """The switch a datapath is, once attached."""
        return self._dpids.get(dp.id) if self.service is not None else None

    def _connected_switches(self) -> list[Switch]:
        with self._lock:
            return [sw for sw in self._switches.values() if sw.connected]

    # -- switches come and go ---------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev) -> None:
        dp = ev.msg.datapath
        # the listener opens before `attach` runs: a switch that is that quick waits for it
        if not self._attached.wait(30):
            log.error("datapath %016x connected but no service is attached", dp.id)
            return
        devices = self.service.devices
        name = self._dpids.get(dp.id)
        if name is None and self.service.config.discovers:
            learned = openflow_name(dp.id)
            if not devices.admits(learned):
                devices.refuse(learned, f"datapath {dp.id:016x} is not declared (southbound.admit: declared)")
                return
            name = self._dpids[dp.id] = learned
        if name is None:
            devices.unexpected(openflow_name(dp.id))
            return
        if devices.backend(name) != "openflow":
            log.warning("datapath %016x connected over OpenFlow, but switch %s is configured for %s; ignored",
                        dp.id, name, devices.backend(name))
            return
        sw = Switch(name, dp)
        with self._lock:
            first = self._switches.get(dp.id)
            # the switch itself reconnecting (from its management address) replaces its
            # stale connection, which os-ken has not declared dead yet
            duplicate = (first is not None and first.connected and first.dp is not dp
                         and _peer_ip(first.dp) != _peer_ip(dp))
            if not duplicate:
                self._switches[dp.id] = sw
        if duplicate:
            self.service.counters.refused(
                "switch_duplicate", switch=name,
                why=f"a second connection claims datapath {dp.id:016x}, which is connected: closed")
            try:
                dp.close()
            except Exception:  # noqa: BLE001 - a handler must not raise
                log.exception("switch %s: cannot close the second connection", name)
            return
        log.info("switch %s connected (dpid %016x)", name, dp.id)
        devices.connected(name)
        self.liveness.switch_back(name)  # it was connected before: its links are up again
        try:
            self.install_lldp_flow(dp)
        except Exception:  # noqa: BLE001 - a handler must not raise
            log.exception("switch %s: cannot install the LLDP flow", name)
        try:
            self.ask_limits(dp)
        except Exception:  # noqa: BLE001 - a handler must not raise; the budgets stay the configured ones
            log.exception("switch %s: cannot ask for its limits", name)
        if self.roles.ha and self.roles.term is None:
            self.roles.demote(sw)  # a follower: read-only on this switch
        self.reconciler.sync_switch(dp.id)  # a leader claims the switch first (sync)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def _dead(self, ev) -> None:
        dp = ev.datapath
        if dp is None or dp.id is None:
            return
        with self._lock:
            sw = self._switches.get(dp.id)
            if sw is None or sw.dp is not dp:
                return
            del self._switches[dp.id]
            self._of_ports.pop(dp.id, None)
            sw.connected = False
        log.info("switch %s disconnected", sw.name)
        self.service.devices.disconnected(sw.name)
        if not self._stop.is_set():
            # a switch the controller cannot reach is treated as failed: plan around it
            self.liveness.switch_gone(sw.name)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev) -> None:
        msg = ev.msg
        dp = msg.datapath
        ofp = dp.ofproto
        name = self._name(dp)
        if name is None:
            return
        desc = msg.desc
        if desc.port_no <= ofp.OFPP_MAX:
            gone = msg.reason == ofp.OFPPR_DELETE
            self._note_ports(dp.id, [desc.port_no], gone=gone)
            live = not gone and not desc.state & ofp.OFPPS_LINK_DOWN and not desc.config & ofp.OFPPC_PORT_DOWN
            if live and self.service.config.southbound.lldp.interval_s > 0:
                try:
                    self.send_lldp(only=dp.id, port=desc.port_no)  # a port that came up: its link now
                except Exception:  # noqa: BLE001 - a handler must not raise
                    log.exception("switch %s: cannot probe port %d", name, desc.port_no)
        if msg.reason != ofp.OFPPR_DELETE and desc.port_no <= ofp.OFPP_MAX:
            try:
                self.service.devices.port_speed(name, desc.port_no, port_speeds(ofp, [desc])[desc.port_no])
            except Exception:  # noqa: BLE001 - a handler must not raise
                log.exception("switch %s: cannot record the speed of port %d", name, desc.port_no)
        peer = self.service.wiring.link_at(name, desc.port_no)
        if peer is None:
            return
        down = (
            msg.reason == ofp.OFPPR_DELETE
            or bool(desc.state & ofp.OFPPS_LINK_DOWN)
            or bool(desc.config & ofp.OFPPC_PORT_DOWN)
        )
        log.info("switch %s: port %d (to %s) %s", name, desc.port_no, peer, "down" if down else "up")
        if down:
            if (name, peer) not in self._ends_down and self.manager is not None:
                self.manager.port_down(name, desc.port_no)  # the failovers it causes (openflow.failover)
            self._ends_down.add((name, peer))
        else:
            self._ends_down.discard((name, peer))
        self.liveness.update(name, peer)

    def _link_add(self, ev) -> None:
        """A link (`ev.link`: src and dst with dpid and port_no, as os-ken's topology
        events carry them): learn the port of each end (`wiring.learn_link`)."""
        src, dst = ev.link.src, ev.link.dst
        a, b = self._dpids.get(src.dpid), self._dpids.get(dst.dpid)
        if a is None or b is None or self.service is None:
            return
        self._learn_link(a, src.port_no, b, dst.port_no)

    def _learn_link(self, a: str, port_a: int, b: str, port_b: int) -> None:
        try:
            self.service.wiring.learn_link(a, port_a, b, port_b)
        except ValueError as e:
            log.warning("LLDP link %s:%d -> %s:%d: %s", a, port_a, b, port_b, e)

    # -- LLDP: signed probes (southbound.lldp) ------------------------------------------------
    def install_lldp_flow(self, dp) -> None:
        """The LLDP → controller flow of table 0 (see the module docstring)."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        actions = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
        mod = parser.OFPFlowMod(
            datapath=dp, cookie=LLDP_COOKIE, table_id=0, priority=LLDP_PRIORITY,
            match=parser.OFPMatch(eth_type=lldp.ETH_LLDP),
            instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)],
        )
        dp.set_xid(mod)
        self.channel.note(mod.xid, self._dpids.get(dp.id, f"dpid {dp.id}"), "the LLDP flow")
        dp.send_msg(mod)

    def _note_ports(self, dpid: int, ports, gone: bool = False) -> None:
        with self._lock:
            known = self._of_ports.setdefault(dpid, set())
            for p in ports:
                if gone:
                    known.discard(p)
                elif len(known) < MAX_PORTS_PER_SWITCH:
                    known.add(p)

    def lldp_ports(self, name: str, dpid: int) -> list[int]:
        """The ports of switch `name` that LLDP probes go out of (`lldp.probe_ports`)."""
        with self._lock:
            ports = tuple(self._of_ports.get(dpid, ()))
        return lldp.probe_ports(self.service, name, ports)

    def send_lldp(self, only: int | None = None, port: int | None = None) -> int:
        """A signed probe out of every LLDP port of every connected switch (`only`:
        of that datapath alone; `port`: out of that port alone, if it is one); how
        many were sent. None from a follower."""
        if self.roles.ha and self.roles.term is None:
            return 0
        sent = 0
        for sw in self._connected_switches():
            if only is not None and sw.dp.id != only:
                continue
            ofp, parser = sw.dp.ofproto, sw.dp.ofproto_parser
            for out in self.lldp_ports(sw.name, sw.dp.id):
                if port is not None and out != port:
                    continue
                if not sw.dp.send_msg(parser.OFPPacketOut(
                        datapath=sw.dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                        actions=[parser.OFPActionOutput(out)], data=self.signer.frame(sw.name, out))):
                    break
                sent += 1
        return sent

    def _lldp_loop(self) -> None:
        every(self._stop, self.service.config.southbound.lldp.interval_s, self.send_lldp, "LLDP round failed", log)

    def _lldp_in(self, name: str, in_port: int, data: bytes) -> None:
        """A probe handed back by switch `name` (in on `in_port`): verified, then a link."""
        probe = lldp.receive(self.service, self.signer, name, in_port, data)
        if probe is None or probe.switch not in self._dpids.values():
            return
        self._learn_link(probe.switch, probe.port, name, in_port)

    # -- limits: what a switch says about itself ------------------------------------------------
    def ask_limits(self, dp) -> None:
        """Ask a switch for its port descriptions, group features and table features
        (the replies go to `_limits_reply`)."""
        parser = dp.ofproto_parser
        reqs = [parser.OFPPortDescStatsRequest(dp, 0), parser.OFPGroupFeaturesStatsRequest(dp, 0)]
        if self.service.config.southbound.openflow.table_features:
            reqs.append(parser.OFPTableFeaturesStatsRequest(dp, 0, []))  # an empty body asks, it does not set
        for req in reqs:
            dp.set_xid(req)
            self.channel.note(req.xid, self._dpids.get(dp.id, f"dpid {dp.id}"), type(req).__name__)
            if not dp.send_msg(req):
                log.warning("datapath %016x: cannot ask for its limits (connection closed)", dp.id)
                return

    def _limits_reply(self, msg, kind: str) -> None:
        """Collect one part of a reply about limits; on the last part, report them."""
        dp = msg.datapath
        name = self._name(dp)
        if name is None:
            return
        parts = self.channel.collect((dp.id, msg.xid, kind), msg)
        if parts is None:
            return
        if kind == "port_desc":
            try:
                self._note_ports(dp.id, [p.port_no for p in parts if p.port_no <= dp.ofproto.OFPP_MAX])
                if self.service.config.southbound.lldp.interval_s > 0:
                    self.send_lldp(only=dp.id)  # a switch just connected: its links now, not in a round
            except Exception:  # noqa: BLE001 - a handler must not raise
                log.exception("switch %s: cannot probe its ports", name)
        try:
            limits = limits_from_reply(dp.ofproto, kind, parts)
            if limits:
                self.service.devices.report_limits(name, **limits)
        except Exception:  # noqa: BLE001 - a handler must not raise
            log.exception("switch %s: cannot use its %s reply", name, kind)

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _port_desc(self, ev) -> None:
        self._limits_reply(ev.msg, "port_desc")

    @set_ev_cls(ofp_event.EventOFPGroupFeaturesStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _group_features(self, ev) -> None:
        self._limits_reply(ev.msg, "group_features")

    @set_ev_cls(ofp_event.EventOFPTableFeaturesStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _table_features(self, ev) -> None:
        self._limits_reply(ev.msg, "table_features")

    # -- HA: mastership of the switches (docs/ha.md) --------------------------------------------------
    def take_mastership(self, term: int) -> list[str]:
        """This instance leads in `term`: become master of every connected switch
        (later ones are claimed as they connect); the switches that confirmed."""
        self.manager.reload()  # the ids the last leader stored
        confirmed = self.roles.take(term, self._connected_switches())
        self.reconciler.sync_all()
        return confirmed

    def release_mastership(self, term: int) -> None:
        """No longer the leader: send SLAVE role requests (the switches refuse our writes)."""
        with self._lock:
            switches = list(self._switches.values())
        self.roles.release(term, switches)

    def follow_term(self, term: int) -> None:
        """The leader's term as a follower sees it (generation id of its SLAVE requests)."""
        self.roles.follow(term)

    @set_ev_cls(ofp_event.EventOFPRoleReply, MAIN_DISPATCHER)
    def _role_reply(self, ev) -> None:
        self.channel.answered(ev.msg.xid, ev.msg)

    # -- replies and errors -------------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _flow_stats(self, ev) -> None:
        self.channel.reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPGroupDescStatsReply, MAIN_DISPATCHER)
    def _group_desc(self, ev) -> None:
        self.channel.reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPMeterConfigStatsReply, MAIN_DISPATCHER)
    def _meter_config(self, ev) -> None:
        self.channel.reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier(self, ev) -> None:
        self.channel.answered(ev.msg.xid)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _error(self, ev) -> None:
        msg = ev.msg
        sent = self.channel.what(msg.xid)
        with self._lock:
            sw = self._switches.get(msg.datapath.id)
            if sw is not None:
                sw.actual = None  # the remembered state is wrong now: read it back
        pending = self.channel.waiting(msg.xid)
        switch, what, op = sent if sent else (sw.name if sw else f"dpid {msg.datapath.id}", "unknown message", None)
        if self.roles.refused(msg, switch, what, pending):
            return
        log.error("OpenFlow error from %s (type %d, code %d, xid %d) for %s", switch, msg.type, msg.code, msg.xid, what)
        self.errors += 1
        self.service.counters.backend_error("openflow")
        packet_in_meter = isinstance(op, (AddMeter, ModifyMeter)) and op.meter.meter_id == OFPM_CONTROLLER
        if packet_in_meter:  # not a job's meter: no table to call full
            try:
                self.manager.packet_in_meter_refused(switch)
            except Exception:  # noqa: BLE001 - a handler must not raise
                log.exception("switch %s: cannot report the refused packet-in meter", switch)
        table = None if packet_in_meter else table_full_kind(msg.datapath.ofproto, msg.type, msg.code, op)
        if table is not None and (sent or sw is not None):
            try:
                self.service.devices.table_full(switch, table, self._job_of(switch, table, op))
            except Exception:  # noqa: BLE001 - a handler must not raise
                log.exception("switch %s: cannot report the full %s table", switch, table)
        if pending is not None:
            pending.error = f"type {msg.type} code {msg.code}"
            pending.event.set()

    def _job_of(self, switch: str, table: str, op: Op | None) -> str | None:
        """The job whose entry `op` on `switch` was refused (None if not known)."""
        try:
            if table == "group" and isinstance(op, (AddGroup, ModifyGroup)):
                return self.manager.job_of_group(switch, op.group.group_id)
            if table == "entry" and isinstance(op, (AddFlow, ModifyFlow)):
                decoded = decode_cookie(op.flow.cookie)
                return self.manager.job_of_address(str(decoded[1])) if decoded else None
        except Exception:  # noqa: BLE001 - best effort: an unknown job only makes the budget coarser
            log.exception("cannot find the job of %r", op)
        return None

    # -- hosts' packets -----------------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev) -> None:
        """A host's ARP (the ARP → controller flow, or a copy from a known host's
        ARP flow, which the switches route to its target themselves) or a copy of
        IPv4 whose source the switch did not know (the unknown-source flow): the
        core learns where the host is and its MAC, and decides the answer to an
        ARP (`service.hosts.on_arp`), which is sent from here."""
        msg = ev.msg
        dp = msg.datapath
        name = self._name(dp)
        if name is None:
            return
        try:
            pkt = packet.Packet(msg.data)
        except Exception:  # noqa: BLE001 - a malformed frame from the wire
            return
        in_port = msg.match["in_port"]
        if msg.data[12:14] == lldp.ETH_LLDP.to_bytes(2, "big"):
            self._lldp_in(name, in_port, bytes(msg.data))
            return
        hosts = self.service.hosts
        req = pkt.get_protocol(arp.arp)
        if req is None:
            ip, eth = pkt.get_protocol(ipv4.ipv4), pkt.get_protocol(ethernet.ethernet)
            if ip is not None and eth is not None:
                hosts.on_ipv4(ip.src, eth.src, name, in_port)
            return
        # a copy from a known host's ARP flow: the switches route the packet itself
        routed = decode_cookie(msg.cookie) == ("source", ipaddress.IPv4Address(req.src_ip))
        action = hosts.on_arp(name, in_port, op=req.opcode, sender_ip=req.src_ip, sender_mac=req.src_mac,
                              target_ip=req.dst_ip, routed=routed)
        data = msg.data

        def send() -> None:
            if action.reply_mac is not None:
                dp.send_msg(arp_reply(dp, in_port, req, action.reply_mac))
            self._packet_out(action.forward_to, arp_probe(action.probe) if action.probe else data)
            for r in action.replies:
                self._packet_out(((r.switch, r.port),), arp_reply_frame(r.asker_ip, r.asker_mac, r.target_ip, r.target_mac))

        # held (a host that just joined) until the plan with its routes is on the switches
        send_after_plan(self.service.changes, self.service.counters, after_sync(self.reconciler.queue),
                        action.after_change, action.joined_at, send)

    def _packet_out(self, ends: Sequence[tuple[str, int]], data: bytes) -> None:
        """Send frame `data` out of every (switch, port) of `ends`."""
        by_name = {n: d for d, n in self._dpids.items()}
        for sw_name, port in ends:
            with self._lock:
                sw = self._switches.get(by_name.get(sw_name))
            if sw is None or not sw.connected:
                continue
            ofp, parser = sw.dp.ofproto, sw.dp.ofproto_parser
            sw.dp.send_msg(parser.OFPPacketOut(
                datapath=sw.dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                actions=[parser.OFPActionOutput(port)], data=data,
            ))

    def probe(self, ips: Sequence[str]) -> int:
        """One ARP probe per address out of every edge port of every connected
        switch (never flooded through the fabric); the number of frames sent."""
        switches = {sw.name: sw for sw in self._connected_switches()}
        sent = send_probes(ips, switches, self.service.hosts.edge_ports,
                           lambda name, port, frame: self._packet_out(((name, port),), frame))
        if sent:
            log.debug("probed for %s: %d frames", ", ".join(ips), sent)
        return sent

    def guard_drops(self) -> dict[tuple[str, int], int]:
        """(switch, port) -> packets the source guard's flows refused (their flow
        statistics, `translate.guard_drops_from_stats`), asked of every connected
        switch now (at /metrics scrape time); a switch that does not answer within
        GUARD_STATS_TIMEOUT_S is left out."""
        waits = []
        for sw in self._connected_switches():
            req = sw.dp.ofproto_parser.OFPFlowStatsRequest(sw.dp, table_id=0, cookie=GUARD_COOKIE,
                                                           cookie_mask=COOKIE_OWNER_MASK | COOKIE_KIND_MASK)
            try:
                waits.append((sw.name, req, self.channel.request(sw, req, "OFPFlowStatsRequest (source guard)")))
            except ConnectionError as e:
                self.channel.done(req.xid)
                log.debug("%s", e)
        out: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + GUARD_STATS_TIMEOUT_S
        for name, req, pending in waits:
            try:
                if pending.event.wait(max(0.0, deadline - time.monotonic())) and not pending.error:
                    out.update(((name, port), n) for port, n in guard_drops_from_stats(pending.bodies).items())
            finally:
                self.channel.done(req.xid)
        return out

    # -- port statistics (measured link rates) -------------------------------------------------
    def _port_stats_loop(self) -> None:
        """Every `southbound.openflow.port_stats_s`, ask every connected switch for the
        counters of all its ports (the replies go to `_port_stats`)."""
        every(self._stop, self.service.config.southbound.openflow.port_stats_s, self.ask_port_stats,
              "port statistics request failed", log)

    def ask_port_stats(self) -> int:
        """Send one OFPPortStatsRequest (all ports) to every connected switch; how many were sent."""
        sent = 0
        for sw in self._connected_switches():
            ofp, parser = sw.dp.ofproto, sw.dp.ofproto_parser
            try:
                self.channel.send(sw, parser.OFPPortStatsRequest(sw.dp, 0, ofp.OFPP_ANY), "OFPPortStatsRequest")
                sent += 1
            except ConnectionError as e:
                log.debug("%s", e)
        return sent

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _port_stats(self, ev) -> None:
        msg = ev.msg
        dp = msg.datapath
        name = self._name(dp)
        if name is None:
            return
        parts = self.channel.collect((dp.id, msg.xid), msg)
        if parts is None:
            return
        samples = [(st.port_no, st.rx_bytes, st.tx_bytes) for st in parts if st.port_no <= dp.ofproto.OFPP_MAX]
        self.service.load.record(name, samples)  # timed by the core's clock
