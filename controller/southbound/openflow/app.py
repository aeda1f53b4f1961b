"""The OpenFlow 1.3 app (os-ken): connects switches to the service and sends operations.

Thin, like Faucet's faucet.py: the handlers find the switch and hand over; what to
install is decided by the service (`ControllerService.ops_for`) and the translation
(`openflow.state`). This module only converts between the frozen entries of
`openflow.state` and os-ken messages, and sends them.

Network learning:
- dpid: the n-th switch of the topology (`topology.switches` order, n from 0) has
  datapath id n + 1. A datapath with another id is logged and ignored.
- ports: the service's port map starts as `openflow.state.default_port_map` (links
  numbered 1, 2, ... per switch in the order of `topology.links`, as Mininet
  numbers the ports of links added in that order) and is corrected as ports are
  learned: switch-to-switch links from os-ken's LLDP discovery
  (`os_ken.topology.switches` with observe-links; its `EventLinkAdd`), host ports
  and MACs from the hosts' ARP packets (the ARP → controller flow of
  `openflow.state`), both through `service.learn_port` / `service.learn_host`.
  ARP requests for a known host are answered here (proxy ARP); nothing is flooded.
  A link LLDP finds that the topology lacks is logged, never used.

Threads: os-ken 4.x's hub is native threads. Handlers run in os-ken's event
thread and never block: they record facts and queue work. One worker thread
(`_work`) does everything that waits: it reads a switch's entries back
(flow, group-desc and meter-config multipart requests; only flows whose cookie is
ours), asks the service for the operations, and sends them phase by phase
(`reconcile.phases`) with a barrier after each phase, waiting for every barrier
reply before the next phase, so new downstream entries exist before upstream
ones redirect traffic. Plan updates (from the service's worker thread) only queue
a "sync every connected switch" item.

Links: a port-status message (reason DELETE, or state LINK_DOWN / config
PORT_DOWN) is mapped to its link through the service's port map; the link is
down while either of its ends is reported down or either of its switches is
disconnected (`service.link_down` / `link_up`, which re-plan around it). The
ports of a reconnecting switch are not read back: an end reported down before
the disconnect stays down until its next port-status.

The actual state of a switch is remembered after each batch (`reconcile.apply`
of the sent operations); an error reply, a barrier timeout or an inconsistency
makes the app read the switch back before the next batch. Error replies are
matched to the sent message by xid, logged with the switch and the entry, and
counted (`service.count_openflow_error`). A "table full" error
(`table_full_kind`: out of groups or buckets, a multicast flow refused with
TABLE_FULL, out of meters) is also reported to `service.table_full` with the
job of the refused entry, which lowers that switch's budget and re-plans.

Limits: on connect the app asks each switch for its port descriptions
(OFPMP_PORT_DESC), its group features (OFPMP_GROUP_FEATURES) and, with
`southbound.openflow.table_features` on, its table features
(OFPMP_TABLE_FEATURES), and hands what they say to
`service.report_limits`: the speed of each port (`curr_speed`, else `max_speed`,
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

import collections
import ipaddress
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib.packet import arp, ether_types, ethernet, ipv4, packet
from os_ken.ofproto import ofproto_v1_3
from os_ken.topology import event as topo_event

from controller.southbound.openflow.state import (
    COOKIE_OWNER,
    COOKIE_OWNER_MASK,
    Drop,
    FlowEntry,
    GotoTable,
    GroupAction,
    GroupEntry,
    Meter,
    MeterEntry,
    OFPM_CONTROLLER,
    TABLE_FORWARD,
    Output,
    SetField,
    SwitchState,
    decode_cookie,
    is_owned_cookie,
)
from controller.southbound.openflow.reconcile import (
    AddFlow,
    AddGroup,
    AddMeter,
    DeleteFlow,
    DeleteGroup,
    DeleteMeter,
    InconsistentOp,
    ModifyFlow,
    ModifyGroup,
    ModifyMeter,
    Op,
    apply,
    phases,
)
from controller.southbound.probes import arp_probe
from controller.southbound.sync_queue import batches
from controller.config import configured_switches, switch_backends
from controller.core.discovered import openflow_name

log = logging.getLogger("controller.ofctl")

BARRIER_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 5.0
MAX_TRACKED_XIDS = 100_000
MAX_RETRIES = 3

_GROUP_TYPES = {"all": 0, "select": 1, "indirect": 2, "ff": 3}  # OFPGT_*
_GROUP_TYPE_NAMES = {v: k for k, v in _GROUP_TYPES.items()}


def switch_dpids(topology, config=None) -> dict[int, str]:
    """dpid -> switch name of a declared topology: the datapath id `config` gives
    a switch (`southbound.switches.NAME.dpid`), else n + 1 for the n-th switch
    (from 0). (In a learned network a datapath is named `of:<dpid in 16 hex
    digits>` instead: `learned_dpids`.)"""
    if config is None:
        return {i + 1: topology.name(v) for i, v in enumerate(topology.switches)}
    return {b.dpid: name for name, b in switch_backends(config, topology).items() if b.dpid is not None}


def learned_dpids(topology) -> dict[int, str]:
    """dpid -> switch name for the `of:` switches of a learned network."""
    out = {}
    for v in topology.switches:
        name = topology.name(v)
        if name.startswith("of:"):
            out[int(name[3:], 16)] = name
    return out


# -- entries <-> os-ken messages ------------------------------------------------------------------
def _of_actions(parser, actions: Sequence) -> list:
    out = []
    for a in actions:
        if isinstance(a, Output):
            out.append(parser.OFPActionOutput(a.port))
        elif isinstance(a, SetField):
            out.append(parser.OFPActionSetField(**{a.field: a.value}))
        elif isinstance(a, GroupAction):
            out.append(parser.OFPActionGroup(a.group_id))
        elif isinstance(a, (Meter, Drop, GotoTable)):
            continue
        else:
            raise ValueError(f"cannot encode action {a!r}")
    return out


def _instructions(dp, flow: FlowEntry) -> list:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    inst = []
    for a in flow.actions:
        if isinstance(a, Meter):
            inst.append(parser.OFPInstructionMeter(a.meter_id, ofp.OFPIT_METER))
    acts = _of_actions(parser, flow.actions)
    if acts:
        inst.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, acts))
    for a in flow.actions:
        if isinstance(a, GotoTable):
            inst.append(parser.OFPInstructionGotoTable(a.table_id))
    return inst


def _match(dp, flow: FlowEntry):
    return dp.ofproto_parser.OFPMatch(**dict(flow.match))


def op_message(dp, op: Op):
    """The os-ken message that executes `op` on datapath `dp`."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if isinstance(op, (AddFlow, ModifyFlow)):
        # OFPFC_ADD replaces an entry of the same table, priority and match atomically
        # and also updates its cookie (MODIFY_STRICT would keep the old cookie).
        f = op.flow
        return parser.OFPFlowMod(
            dp,
            cookie=f.cookie,
            table_id=f.table_id,
            command=ofp.OFPFC_ADD,
            priority=f.priority,
            match=_match(dp, f),
            instructions=_instructions(dp, f),
        )
    if isinstance(op, DeleteFlow):
        f = op.flow
        return parser.OFPFlowMod(
            dp,
            table_id=f.table_id,
            command=ofp.OFPFC_DELETE_STRICT,
            priority=f.priority,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
            match=_match(dp, f),
        )
    if isinstance(op, (AddGroup, ModifyGroup, DeleteGroup)):
        g = op.group
        command = {AddGroup: ofp.OFPGC_ADD, ModifyGroup: ofp.OFPGC_MODIFY, DeleteGroup: ofp.OFPGC_DELETE}[type(op)]
        buckets = [] if isinstance(op, DeleteGroup) else [parser.OFPBucket(actions=_of_actions(parser, b)) for b in g.buckets]
        return parser.OFPGroupMod(dp, command=command, type_=_GROUP_TYPES[g.type], group_id=g.group_id, buckets=buckets)
    if isinstance(op, (AddMeter, ModifyMeter, DeleteMeter)):
        m = op.meter
        command = {AddMeter: ofp.OFPMC_ADD, ModifyMeter: ofp.OFPMC_MODIFY, DeleteMeter: ofp.OFPMC_DELETE}[type(op)]
        bands = [] if isinstance(op, DeleteMeter) else [parser.OFPMeterBandDrop(rate=m.rate, burst_size=m.burst)]
        unit = ofp.OFPMF_PKTPS if m.unit == "pktps" else ofp.OFPMF_KBPS
        return parser.OFPMeterMod(dp, command=command, flags=unit | ofp.OFPMF_BURST, meter_id=m.meter_id, bands=bands)
    raise ValueError(f"unknown operation {op!r}")


def arp_reply(dp, port: int, request, mac: str):
    """A packet-out answering ARP `request` (which came in on `port`): `request.dst_ip`
    is at `mac`."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    reply = packet.Packet()
    reply.add_protocol(ethernet.ethernet(dst=request.src_mac, src=mac, ethertype=ether_types.ETH_TYPE_ARP))
    reply.add_protocol(
        arp.arp(opcode=arp.ARP_REPLY, src_mac=mac, src_ip=request.dst_ip, dst_mac=request.src_mac, dst_ip=request.src_ip)
    )
    reply.serialize()
    return parser.OFPPacketOut(
        datapath=dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
        actions=[parser.OFPActionOutput(port)], data=reply.data,
    )


def table_full_kind(ofp, err_type: int, code: int, op: Op | None) -> str | None:
    """"group", "entry" or "meter" if error (`err_type`, `code`) for operation `op`
    says that table is full; None otherwise. A flow counts only if it is a
    multicast one (its cookie says so)."""
    if err_type == ofp.OFPET_GROUP_MOD_FAILED and code in (ofp.OFPGMFC_OUT_OF_GROUPS, ofp.OFPGMFC_OUT_OF_BUCKETS):
        return "group"
    if err_type == ofp.OFPET_METER_MOD_FAILED and code == ofp.OFPMMFC_OUT_OF_METERS:
        return "meter"
    if err_type == ofp.OFPET_FLOW_MOD_FAILED and code == ofp.OFPFMFC_TABLE_FULL:
        if isinstance(op, (AddFlow, ModifyFlow)):
            decoded = decode_cookie(op.flow.cookie)
            if decoded is not None and decoded[0] == "multicast":
                return "entry"
    return None


def _job_of(service, switch: str, table: str, op: Op | None) -> str | None:
    """The job whose entry `op` on `switch` was refused (None if not known)."""
    try:
        if table == "group" and isinstance(op, (AddGroup, ModifyGroup)):
            return service.job_for_group_id(switch, op.group.group_id)
        if table == "entry" and isinstance(op, (AddFlow, ModifyFlow)):
            decoded = decode_cookie(op.flow.cookie)
            return service.job_for_address(str(decoded[1])) if decoded else None
    except Exception:  # noqa: BLE001 - best effort: an unknown job only makes the budget coarser
        log.exception("cannot find the job of %r", op)
    return None


def describe_op(op: Op) -> str:
    if isinstance(op, (AddFlow, ModifyFlow, DeleteFlow)):
        return f"{type(op).__name__} priority={op.flow.priority} match={dict(op.flow.match)} actions={op.flow.actions}"
    if isinstance(op, (AddGroup, ModifyGroup, DeleteGroup)):
        return f"{type(op).__name__} group_id={op.group.group_id}"
    return f"{type(op).__name__} meter_id={op.meter.meter_id} rate={op.meter.rate} {op.meter.unit}"


def _from_of_actions(actions) -> list:
    out = []
    for a in actions:
        name = type(a).__name__
        if name == "OFPActionOutput":
            out.append(Output(a.port))
        elif name == "OFPActionGroup":
            out.append(GroupAction(a.group_id))
        elif name == "OFPActionSetField":
            key, value = a.key, a.value
            if key == "eth_dst":
                value = str(value).lower()
            out.append(SetField(key, str(value)))
        else:
            raise ValueError(f"unsupported action {a}")
    return out


def _match_value(name: str, value):
    if isinstance(value, tuple):  # masked: not something this controller installs
        raise ValueError(f"masked match field {name}={value}")
    if name in ("eth_src", "eth_dst"):
        return str(value).lower()
    if name in ("ipv4_src", "ipv4_dst", "arp_spa", "arp_tpa"):
        return str(ipaddress.IPv4Address(value))
    return int(value)


def flow_from_stats(stat) -> FlowEntry:
    """A FlowEntry from an OFPFlowStats (raises ValueError for what we never install)."""
    match = tuple((k, _match_value(k, v)) for k, v in stat.match.items())
    actions: list = []
    goto: GotoTable | None = None
    for inst in stat.instructions:
        name = type(inst).__name__
        if name == "OFPInstructionMeter":
            actions.insert(0, Meter(inst.meter_id))
        elif name == "OFPInstructionActions":
            actions.extend(_from_of_actions(inst.actions))
        elif name == "OFPInstructionGotoTable":
            goto = GotoTable(inst.table_id)
        else:
            raise ValueError(f"unsupported instruction {inst}")
    if goto is not None:
        actions.append(goto)
    elif not any(not isinstance(a, Meter) for a in actions):
        actions.append(Drop())
    return FlowEntry(stat.table_id, stat.priority, match, tuple(actions), stat.cookie)


def group_from_stats(stat) -> GroupEntry:
    return GroupEntry(
        stat.group_id,
        _GROUP_TYPE_NAMES.get(stat.type, "all"),
        tuple(tuple(_from_of_actions(b.actions)) for b in stat.buckets),
    )


def meter_from_stats(stat) -> MeterEntry:
    drops = [b for b in stat.bands if type(b).__name__ == "OFPMeterBandDrop"]
    if len(drops) != 1 or len(stat.bands) != 1:
        # not a meter this controller makes: a rate of 0 makes reconcile modify it
        return MeterEntry(stat.meter_id, 0, 0)
    unit = "pktps" if stat.flags & ofproto_v1_3.OFPMF_PKTPS else "kbps"
    return MeterEntry(stat.meter_id, drops[0].rate, drops[0].burst_size, unit)


# -- limits: what a switch says about itself ------------------------------------------------------
def port_speeds(ofp, ports) -> dict[int, int]:
    """Port number -> bit/s from OFPMP_PORT_DESC bodies (or port-status descs):
    `curr_speed`, else `max_speed` (kbit/s); 0 where the port says neither.
    Reserved ports (LOCAL, CONTROLLER, ...) are left out."""
    out = {}
    for p in ports:
        if p.port_no > ofp.OFPP_MAX:
            continue
        out[p.port_no] = 1000 * (p.curr_speed or p.max_speed or 0)
    return out


def limits_from_reply(ofp, kind: str, bodies: Sequence) -> dict:
    """The keyword arguments of `service.report_limits` for the collected bodies of
    one multipart reply: `kind` "port_desc", "group_features" or "table_features"."""
    if kind == "port_desc":
        return {"port_speeds": port_speeds(ofp, bodies)}
    if kind == "group_features":
        for b in bodies:
            return {"max_groups": b.max_groups[ofp.OFPGT_ALL]}
        return {}
    if kind == "table_features":
        for b in bodies:
            if b.table_id == TABLE_FORWARD:
                return {"max_entries": b.max_entries}
        return {}
    raise ValueError(f"unknown reply kind {kind!r}")


# -- per-switch bookkeeping ------------------------------------------------------------------------
@dataclass
class _Switch:
    name: str
    dp: object
    actual: SwitchState | None = None  # None: unknown, read it back first
    connected: bool = True
    retries: int = 0  # consecutive batches that ended in an error
    master_term: int | None = None  # HA: the term in which the switch confirmed us as its master


@dataclass
class _Pending:
    """A multipart request or barrier waiting for its reply."""

    event: threading.Event = field(default_factory=threading.Event)
    bodies: list = field(default_factory=list)
    error: str | None = None


class MulticastOFCtl(app_manager.OSKenApp):
    """The os-ken app. `attach(service)` must be called before switches connect."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    # HA defaults (also for instances the tests make without __init__)
    _ha = False
    _term: int | None = None
    _known_term = 0
    refused_not_master = 0
    stale_role = 0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.service = None
        self._dpids: dict[int, str] = {}
        self._switches: dict[int, _Switch] = {}
        self._lock = threading.Lock()
        self._sent: collections.OrderedDict[int, tuple[str, str, Op | None]] = collections.OrderedDict()
        self._pending: dict[int, _Pending] = {}
        self._queue: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._stopping = False
        self._attached = threading.Event()
        self.errors = 0
        # why each link is down: the link ends (switch, neighbour) reported down by
        # port status, and the switches that are disconnected; a link is up when
        # none of its ends is down and both of its switches (if any) are connected
        self._ends_down: set[tuple[str, str]] = set()
        self._gone: set[str] = set()
        # parts of multipart replies about limits, until their last part: (dpid, xid, kind) -> bodies
        self._limit_parts: dict[tuple[int, int, str], list] = {}
        self._prober: threading.Thread | None = None
        self._stop_probing = threading.Event()  # also stops the port statistics poller
        self._stats_poller: threading.Thread | None = None
        # parts of port statistics replies, until their last part: (dpid, xid) -> bodies
        self._stats_parts: dict[tuple[int, int], list] = {}
        # HA (several instances, docs/ha.md): role requests; None/False when this is the
        # only instance (no role request: the switch keeps us EQUAL, as before)
        self._ha = False
        self._term: int | None = None  # the term this instance leads in; None: a follower
        self._known_term = 0  # the largest term seen (the generation id of role requests)
        self.refused_not_master = 0  # writes a switch refused because we were not its master
        self.stale_role = 0  # role requests a switch refused as stale (a newer leader exists)

    # -- life cycle ------------------------------------------------------------------------
    def attach(self, service) -> None:
        self.service = service
        self._ha = getattr(service, "cluster", None) is not None
        if service.discovers:  # learned of:<dpid> names, and the names the config gives datapaths
            self._dpids = learned_dpids(service.topology)
            self._dpids.update({b.dpid: name for name, b in configured_switches(service.config).items()
                                if b.backend == "openflow"})
        else:
            self._dpids = switch_dpids(service.topology, service.config)
        service.on_plan.append(self._on_plan)
        self._worker = threading.Thread(target=self._work, name="ofctl-sender", daemon=True)
        self._worker.start()
        if service.discovers:
            self._prober = threading.Thread(target=self._probe_loop, name="ofctl-prober", daemon=True)
            self._prober.start()
        if service.config.southbound.openflow.port_stats_s > 0:
            self._stats_poller = threading.Thread(target=self._port_stats_loop, name="ofctl-port-stats", daemon=True)
            self._stats_poller.start()
        self._attached.set()

    def shutdown(self, timeout: float = 5.0) -> None:
        self._stopping = True
        self._stop_probing.set()
        self._queue.put(None)
        if self._worker is not None:
            self._worker.join(timeout)
        if self.service is not None and self._on_plan in self.service.on_plan:
            self.service.on_plan.remove(self._on_plan)

    # -- handlers: record and hand over -------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev) -> None:
        dp = ev.msg.datapath
        # the listener opens before `attach` runs: a switch that is that quick waits for it
        if not self._attached.wait(30):
            log.error("datapath %016x connected but no service is attached", dp.id)
            return
        name = self._dpids.get(dp.id)
        if name is None and self.service.discovers:
            name = self._dpids[dp.id] = openflow_name(dp.id)
        if name is None:
            self.service.unexpected_switch(openflow_name(dp.id))
            return
        if self.service.backend(name) != "openflow":
            log.warning("datapath %016x connected over OpenFlow, but switch %s is configured for %s; ignored",
                        dp.id, name, self.service.backend(name))
            return
        log.info("switch %s connected (dpid %016x)", name, dp.id)
        with self._lock:
            self._switches[dp.id] = _Switch(name, dp)
        self.service.switch_connected(name)
        if name in self._gone:  # it was connected before: its links are up again
            self._gone.discard(name)
            for peer in self.service.switch_links(name):
                self._update_link(name, peer)
        try:
            self.ask_limits(dp)
        except Exception:  # noqa: BLE001 - a handler must not raise; the budgets stay the configured ones
            log.exception("switch %s: cannot ask for its limits", name)
        if self._ha and self._term is None:
            self._send_role(dp, slave=True)  # a follower: read-only on this switch
        self._queue.put(("sync", dp.id))  # a leader claims the switch first (sync)

    def ask_limits(self, dp) -> None:
        """Ask a switch for its port descriptions, group features and table features
        (the replies go to `_limits_reply`)."""
        parser = dp.ofproto_parser
        reqs = [parser.OFPPortDescStatsRequest(dp, 0), parser.OFPGroupFeaturesStatsRequest(dp, 0)]
        if self.service.config.southbound.openflow.table_features:
            reqs.append(parser.OFPTableFeaturesStatsRequest(dp, 0, []))  # an empty body asks, it does not set
        for req in reqs:
            dp.set_xid(req)
            with self._lock:
                self._sent[req.xid] = (self._dpids.get(dp.id, f"dpid {dp.id}"), type(req).__name__, None)
            if not dp.send_msg(req):
                log.warning("datapath %016x: cannot ask for its limits (connection closed)", dp.id)
                return

    def _limits_reply(self, msg, kind: str) -> None:
        """Collect one part of a reply about limits; on the last part, report them."""
        dp = msg.datapath
        name = self._dpids.get(dp.id)
        if name is None or self.service is None:
            return
        key = (dp.id, msg.xid, kind)
        body = msg.body if isinstance(msg.body, list) else [msg.body]
        with self._lock:
            parts = self._limit_parts.setdefault(key, [])
            parts.extend(body)
            if msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
                return
            del self._limit_parts[key]
        try:
            limits = limits_from_reply(dp.ofproto, kind, parts)
            if limits:
                self.service.report_limits(name, **limits)
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
    def _send_role(self, dp, slave: bool, term: int | None = None) -> int | None:
        """Send a role request (SLAVE, or MASTER with generation id `term`); its xid."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        if term is None:
            cluster = getattr(self.service, "cluster", None)
            leader = cluster.election.leader if cluster is not None else None
            self.follow_term(leader.term if leader is not None else 0)
        gen = self._known_term if term is None else term
        req = parser.OFPRoleRequest(dp, ofp.OFPCR_ROLE_SLAVE if slave else ofp.OFPCR_ROLE_MASTER, gen)
        dp.set_xid(req)
        with self._lock:
            self._sent[req.xid] = (self._dpids.get(dp.id, f"dpid {dp.id}"), f"role request {'SLAVE' if slave else 'MASTER'} gen {gen}", None)
        if not dp.send_msg(req):
            return None
        return req.xid

    def _claim(self, switches: list[_Switch], term: int, timeout: float = 2.0) -> list[str]:
        """Become master of `switches` with generation id `term` (role requests sent
        together, replies awaited together); the names of those that confirmed."""
        waits = []
        for sw in switches:
            ofp, parser = sw.dp.ofproto, sw.dp.ofproto_parser
            req = parser.OFPRoleRequest(sw.dp, ofp.OFPCR_ROLE_MASTER, term)
            try:
                waits.append((sw, self._request(sw, req, f"role request MASTER gen {term}"), req.xid))
            except ConnectionError as e:
                log.error("%s", e)
        confirmed = []
        deadline = time.monotonic() + timeout
        for sw, pending, xid in waits:
            ok = pending.event.wait(max(0.0, deadline - time.monotonic()))
            self._done(xid)
            if not ok or pending.error or not pending.bodies:
                log.error("switch %s: not master in term %d (%s)", sw.name, term, pending.error or "no role reply")
                continue
            reply = pending.bodies[0]
            if reply.role != sw.dp.ofproto.OFPCR_ROLE_MASTER:
                log.error("switch %s: role reply %d, not MASTER, in term %d", sw.name, reply.role, term)
                continue
            with self._lock:
                sw.master_term = term
                sw.actual = None  # another instance programmed it: read it back before any write
            confirmed.append(sw.name)
        return confirmed

    def take_mastership(self, term: int) -> list[str]:
        """This instance leads in `term`: become master of every connected switch
        (later ones are claimed as they connect); the switches that confirmed."""
        with self._lock:
            self._term = term
            self._known_term = max(self._known_term, term)
            switches = [sw for sw in self._switches.values() if sw.connected]
        t0 = time.monotonic()
        confirmed = self._claim(switches, term)
        log.info("term %d: master of %d of %d switches in %.3f s", term, len(confirmed), len(switches), time.monotonic() - t0)
        self._queue.put(("sync", None))
        return confirmed

    def release_mastership(self, term: int) -> None:
        """No longer the leader: send SLAVE role requests (the switches refuse our writes)."""
        with self._lock:
            if self._term == term:
                self._term = None
            switches = list(self._switches.values())
            for sw in switches:
                sw.master_term = None
        for sw in switches:
            try:
                self._send_role(sw.dp, slave=True, term=term)
            except Exception:  # noqa: BLE001
                log.exception("switch %s: cannot send the SLAVE role request", sw.name)

    def follow_term(self, term: int) -> None:
        """The leader's term as a follower sees it (generation id of its SLAVE requests)."""
        with self._lock:
            self._known_term = max(self._known_term, term)

    @set_ev_cls(ofp_event.EventOFPRoleReply, MAIN_DISPATCHER)
    def _role_reply(self, ev) -> None:
        with self._lock:
            pending = self._pending.get(ev.msg.xid)
        if pending is not None:
            pending.bodies.append(ev.msg)
            pending.event.set()

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
            sw.connected = False
        log.info("switch %s disconnected", sw.name)
        self.service.switch_disconnected(sw.name)
        if not self._stopping:
            # a switch the controller cannot reach is treated as failed: plan around it
            self._gone.add(sw.name)
            for peer in self.service.switch_links(sw.name):
                self._update_link(sw.name, peer)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev) -> None:
        msg = ev.msg
        dp = msg.datapath
        ofp = dp.ofproto
        name = self._dpids.get(dp.id)
        if name is None or self.service is None:
            return
        desc = msg.desc
        if msg.reason != ofp.OFPPR_DELETE and desc.port_no <= ofp.OFPP_MAX:
            try:
                said = self.service.reported_limits().get(name)
                speeds = dict(said.port_speeds) if said is not None else {}
                speeds.update(port_speeds(ofp, [desc]))
                self.service.report_limits(name, port_speeds=speeds)
            except Exception:  # noqa: BLE001 - a handler must not raise
                log.exception("switch %s: cannot record the speed of port %d", name, desc.port_no)
        peer = self.service.link_at(name, desc.port_no)
        if peer is None:
            return
        down = (
            msg.reason == ofp.OFPPR_DELETE
            or bool(desc.state & ofp.OFPPS_LINK_DOWN)
            or bool(desc.config & ofp.OFPPC_PORT_DOWN)
        )
        log.info("switch %s: port %d (to %s) %s", name, desc.port_no, peer, "down" if down else "up")
        end = (name, peer)
        if down:
            self._ends_down.add(end)
        else:
            self._ends_down.discard(end)
        self._update_link(name, peer)

    def _update_link(self, a: str, b: str) -> None:
        """Tell the service whether the link a - b is down (runs in os-ken's event thread)."""
        down = (a, b) in self._ends_down or (b, a) in self._ends_down or a in self._gone or b in self._gone
        try:
            if down:
                self.service.link_down(a, b)
            else:
                self.service.link_up(a, b)
        except ValueError as e:
            log.warning("link %s - %s: %s", a, b, e)

    def _reply(self, msg) -> None:
        with self._lock:
            pending = self._pending.get(msg.xid)
        if pending is None:
            return
        body = msg.body if isinstance(msg.body, list) else [msg.body]
        pending.bodies.extend(body)
        if not (msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE):
            pending.event.set()

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _flow_stats(self, ev) -> None:
        self._reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPGroupDescStatsReply, MAIN_DISPATCHER)
    def _group_desc(self, ev) -> None:
        self._reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPMeterConfigStatsReply, MAIN_DISPATCHER)
    def _meter_config(self, ev) -> None:
        self._reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier(self, ev) -> None:
        with self._lock:
            pending = self._pending.get(ev.msg.xid)
        if pending is not None:
            pending.event.set()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _error(self, ev) -> None:
        msg = ev.msg
        with self._lock:
            sent = self._sent.get(msg.xid)
            sw = self._switches.get(msg.datapath.id)
            if sw is not None:
                sw.actual = None  # the remembered state is wrong now: read it back
            pending = self._pending.get(msg.xid)
        switch, what, op = sent if sent else (sw.name if sw else f"dpid {msg.datapath.id}", "unknown message", None)
        ofp = msg.datapath.ofproto
        if self._ha and msg.type == ofp.OFPET_BAD_REQUEST and msg.code == ofp.OFPBRC_IS_SLAVE:
            # HA: a write while the switch has another master (os-ken's LLDP packet-outs
            # on a follower; a deposed leader's late writes)
            self.refused_not_master += 1
            (log.warning if self._term is not None else log.debug)(
                "switch %s refused %s: this instance is not its master (term %s)", switch, what, self._term)
            if pending is not None:
                pending.error = "not master"
                pending.event.set()
            return
        if self._ha and msg.type == ofp.OFPET_ROLE_REQUEST_FAILED:
            self.stale_role += 1
            log.warning("switch %s refused %s (code %d): a newer leader holds it", switch, what, msg.code)
            if self._term is None and "SLAVE" in what and self.stale_role <= 100:
                # a follower that did not know the leader's term yet: again, with the newest one known
                threading.Timer(0.5, self._send_role, (msg.datapath, True)).start()
            if pending is not None:
                pending.error = "role request refused as stale" if msg.code == ofp.OFPRRFC_STALE else f"role request failed, code {msg.code}"
                pending.event.set()
            return
        log.error("OpenFlow error from %s (type %d, code %d, xid %d) for %s", switch, msg.type, msg.code, msg.xid, what)
        self.errors += 1
        self.service.count_openflow_error()
        packet_in_meter = isinstance(op, (AddMeter, ModifyMeter)) and op.meter.meter_id == OFPM_CONTROLLER
        if packet_in_meter:  # not a job's meter: no table to call full
            try:
                self.service.packet_in_meter_refused(switch)
            except Exception:  # noqa: BLE001 - a handler must not raise
                log.exception("switch %s: cannot report the refused packet-in meter", switch)
        table = None if packet_in_meter else table_full_kind(msg.datapath.ofproto, msg.type, msg.code, op)
        if table is not None and (sent or sw is not None):
            try:
                self.service.table_full(switch, table, _job_of(self.service, switch, table, op))
            except Exception:  # noqa: BLE001 - a handler must not raise
                log.exception("switch %s: cannot report the full %s table", switch, table)
        if pending is not None:
            pending.error = f"type {msg.type} code {msg.code}"
            pending.event.set()

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev) -> None:
        """A host's ARP (the ARP → controller flow, or a copy from a known host's
        ARP flow, which the switches route to its target themselves) or a copy of
        IPv4 whose source the switch did not know (the unknown-source flow): learn
        where the host is and its MAC. An ARP request for a known host is answered
        by the controller (proxy ARP) or, while that host's MAC is unknown and the
        switches did not route the request, passed on to that host alone
        (`service.arp_answer`); a reply the switches did not route is delivered to
        the host it answers."""
        msg = ev.msg
        dp = msg.datapath
        name = self._dpids.get(dp.id)
        if name is None or self.service is None:
            return
        try:
            pkt = packet.Packet(msg.data)
        except Exception:  # noqa: BLE001 - a malformed frame from the wire
            return
        in_port = msg.match["in_port"]
        req = pkt.get_protocol(arp.arp)
        if req is None:
            ip, eth = pkt.get_protocol(ipv4.ipv4), pkt.get_protocol(ethernet.ethernet)
            if ip is not None and eth is not None:
                self.service.count_packet_in("ipv4")
                # the switch forwarded the packet itself; this copy is for learning only
                try:
                    self.service.learn_host(ip.src, eth.src, name, in_port)
                except ValueError as e:
                    log.warning("switch %s port %d: IPv4 from %s: %s", name, in_port, ip.src, e)
            return  # LLDP is os-ken's (topology.switches)
        self.service.count_packet_in("arp")
        # a copy from a known host's ARP flow: the switches route the packet itself
        routed = decode_cookie(msg.cookie) == ("source", ipaddress.IPv4Address(req.src_ip))
        try:
            self.service.learn_host(req.src_ip, req.src_mac, name, in_port)
        except ValueError as e:
            log.warning("switch %s port %d: ARP from %s: %s", name, in_port, req.src_ip, e)
        if req.dst_ip == req.src_ip:
            return  # a gratuitous announcement: learned from, nothing to answer
        if req.opcode == arp.ARP_REPLY:
            # a host answering a request the controller passed on: to the asker
            asker = self.service.host_by_ip(req.dst_ip)
            if asker is not None and not routed:
                self._packet_out(self.service.host_ports(asker), msg.data, (name, in_port))
            return
        if req.opcode != arp.ARP_REQUEST:
            return
        target = self.service.host_by_ip(req.dst_ip)
        if target is None:
            return  # not a host we know: no flooding through the fabric
        answer = self.service.arp_answer(target)
        if answer.mac is not None:
            dp.send_msg(arp_reply(dp, in_port, req, answer.mac))
        elif not routed:  # its MAC is not known: ask the host itself (it answers the asker)
            self._packet_out(answer.ask, msg.data, (name, in_port))

    def _packet_out(self, ends, data: bytes, came_from: tuple[str, int]) -> None:
        """Send frame `data` out of every (switch, port) of `ends` but the one it came from."""
        by_name = {n: d for d, n in self._dpids.items()}
        for sw_name, port in ends:
            if (sw_name, port) == came_from:
                continue
            with self._lock:
                sw = self._switches.get(by_name.get(sw_name))
            if sw is None or not sw.connected:
                continue
            ofp, parser = sw.dp.ofproto, sw.dp.ofproto_parser
            sw.dp.send_msg(parser.OFPPacketOut(
                datapath=sw.dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                actions=[parser.OFPActionOutput(port)], data=data,
            ))

    @set_ev_cls(topo_event.EventLinkAdd)
    def _link_add(self, ev) -> None:
        """LLDP found a link: learn the port of each end (`service.learn_port`)."""
        src, dst = ev.link.src, ev.link.dst
        a, b = self._dpids.get(src.dpid), self._dpids.get(dst.dpid)
        if a is None or b is None or self.service is None:
            return
        try:
            self.service.learn_link(a, src.port_no, b, dst.port_no)
        except ValueError as e:
            log.warning("LLDP link %s:%d -> %s:%d: %s", a, src.port_no, b, dst.port_no, e)

    # -- port statistics (measured link rates) -------------------------------------------------
    def _port_stats_loop(self) -> None:
        """Every `southbound.openflow.port_stats_s`, ask every connected switch for the
        counters of all its ports (the replies go to `_port_stats`)."""
        interval = self.service.config.southbound.openflow.port_stats_s
        while not self._stop_probing.wait(interval):
            try:
                self.ask_port_stats()
            except Exception:  # noqa: BLE001 - the poller must survive one bad round
                log.exception("port statistics request failed")

    def ask_port_stats(self) -> int:
        """Send one OFPPortStatsRequest (all ports) to every connected switch; how many were sent."""
        with self._lock:
            switches = [sw for sw in self._switches.values() if sw.connected]
        sent = 0
        for sw in switches:
            ofp, parser = sw.dp.ofproto, sw.dp.ofproto_parser
            try:
                self._send(sw, parser.OFPPortStatsRequest(sw.dp, 0, ofp.OFPP_ANY), "OFPPortStatsRequest")
                sent += 1
            except ConnectionError as e:
                log.debug("%s", e)
        return sent

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _port_stats(self, ev) -> None:
        msg = ev.msg
        dp = msg.datapath
        name = self._dpids.get(dp.id)
        if name is None or self.service is None:
            return
        key = (dp.id, msg.xid)
        with self._lock:
            parts = self._stats_parts.setdefault(key, [])
            parts.extend(msg.body)
            if msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
                return
            del self._stats_parts[key]
        samples = [(st.port_no, st.rx_bytes, st.tx_bytes) for st in parts if st.port_no <= dp.ofproto.OFPP_MAX]
        self.service.port_counters(name, samples)  # timed by the service clock

    # -- host probing (learned network) ----------------------------------------------------------
    def _probe_loop(self) -> None:
        """Every `discovery.probe_interval_s`, ask for the hosts that waiting jobs name
        and that were never seen: an ARP probe out of every edge port of every
        connected switch (never flooded through the fabric), as ONOS's host probing does."""
        interval = self.service.config.discovery.probe_interval_s
        while not self._stop_probing.wait(interval):
            try:
                self.probe(self.service.probe_targets())
            except Exception:  # noqa: BLE001 - the prober must survive one bad round
                log.exception("host probing failed")

    def probe(self, ips: Sequence[str]) -> int:
        """Send one ARP probe per address out of every edge port; the number of frames sent."""
        if not ips:
            return 0
        frames = [arp_probe(ip) for ip in ips]
        with self._lock:
            switches = [sw for sw in self._switches.values() if sw.connected]
        sent = 0
        for sw in switches:
            ofp, parser = sw.dp.ofproto, sw.dp.ofproto_parser
            for port in self.service.edge_ports(sw.name):
                for data in frames:
                    sw.dp.send_msg(parser.OFPPacketOut(
                        datapath=sw.dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                        actions=[parser.OFPActionOutput(port)], data=data,
                    ))
                    sent += 1
        log.debug("probed for %s: %d frames", ", ".join(ips), sent)
        return sent

    # -- from the service's worker thread -----------------------------------------------------------
    def _on_plan(self, update) -> None:
        self._queue.put(("plan", update.generation))

    # -- the worker ---------------------------------------------------------------------------------
    def _work(self) -> None:
        for targets in batches(self._queue, lambda: self._stopping):
            try:
                self.sync(targets)
            except Exception:  # noqa: BLE001 - the worker must survive one bad batch
                log.exception("sending operations failed")

    def _send(self, sw: _Switch, msg, what: str, op: Op | None = None) -> int:
        dp = sw.dp
        if msg.xid is None:
            dp.set_xid(msg)
        with self._lock:
            self._sent[msg.xid] = (sw.name, what, op)
            while len(self._sent) > MAX_TRACKED_XIDS:
                self._sent.popitem(last=False)
        if not dp.send_msg(msg):
            raise ConnectionError(f"switch {sw.name}: connection closed")
        return msg.xid

    def _request(self, sw: _Switch, msg, what: str) -> _Pending:
        pending = _Pending()
        sw.dp.set_xid(msg)
        with self._lock:
            self._pending[msg.xid] = pending
        self._send(sw, msg, what)
        return pending

    def _done(self, xid: int) -> None:
        with self._lock:
            self._pending.pop(xid, None)

    def read_state(self, sw: _Switch) -> SwitchState:
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
        waits = [(r, self._request(sw, r, type(r).__name__)) for r in reqs]
        try:
            for r, p in waits:
                if not p.event.wait(READ_TIMEOUT_S):
                    raise TimeoutError(f"switch {sw.name}: no reply to {type(r).__name__}")
                if p.error:
                    raise ConnectionError(f"switch {sw.name}: {type(r).__name__} failed: {p.error}")
        finally:
            for r, _ in waits:
                self._done(r.xid)
        flows, groups, meters = [], [], []
        for stat in waits[0][1].bodies:
            if not is_owned_cookie(stat.cookie):
                continue
            try:
                flows.append(flow_from_stats(stat))
            except ValueError as e:
                log.warning("switch %s: owned flow not understood (%s); it stays", sw.name, e)
        # groups and meters carry no cookie: ours are those with our ids
        groups = [group_from_stats(s) for s in waits[1][1].bodies if self.service.owns_group(s.group_id)]
        meters = [meter_from_stats(s) for s in waits[2][1].bodies if self.service.owns_meter(s.meter_id)]
        return SwitchState(frozenset(flows), frozenset(groups), frozenset(meters))

    def sync(self, dpids: set[int] | None) -> None:
        """Bring the given switches (None: every connected one) to their desired state."""
        if self.service.plan() is None:
            return  # no plan yet (or only failed ones): never reconcile against "nothing"
        with self._lock:
            targets = [sw for dpid, sw in self._switches.items() if dpids is None or dpid in dpids]
            term = self._term
        if self._ha:  # several instances: only the leader writes, and only as master (docs/ha.md)
            cluster = getattr(self.service, "cluster", None)
            if term is None or (cluster is not None and not cluster.may_write(term)):
                return
            unclaimed = [sw for sw in targets if sw.master_term != term and sw.connected]
            if unclaimed:
                self._claim(unclaimed, term)
            targets = [sw for sw in targets if sw.master_term == term]
        ops_by_switch: dict[str, list[Op]] = {}
        by_name: dict[str, _Switch] = {}
        for sw in targets:
            try:
                if sw.actual is None:
                    sw.actual = self.read_state(sw)
                    log.info(
                        "switch %s: read back %d owned flows, %d groups, %d meters",
                        sw.name, len(sw.actual.flows), len(sw.actual.groups), len(sw.actual.meters),
                    )
                ops = self.service.ops_for(sw.name, sw.actual)
            except Exception as e:  # noqa: BLE001
                log.error("switch %s: cannot read its state: %r", sw.name, e)
                sw.actual = None
                continue
            if ops:
                ops_by_switch[sw.name] = ops
                by_name[sw.name] = sw
        if not ops_by_switch:
            return
        cluster = getattr(self.service, "cluster", None) if self._ha else None
        for number, batch in enumerate(phases(ops_by_switch)):
            if cluster is not None and not cluster.may_write(term):
                # the lease may have expired (this process was frozen?): write nothing more
                log.warning("term %s: the lease is not known to be valid (a frozen process?): "
                            "phase %d and those after it not sent", term, number)
                for sw in by_name.values():
                    sw.actual = None
                return
            barriers = []
            for name, ops in batch.items():
                sw = by_name[name]
                try:
                    for op in ops:
                        self._send(sw, op_message(sw.dp, op), describe_op(op), op)
                    barrier = sw.dp.ofproto_parser.OFPBarrierRequest(sw.dp)
                    barriers.append((sw, self._request(sw, barrier, "barrier"), barrier.xid))
                except ConnectionError as e:
                    log.error("%s", e)
                    sw.actual = None
            for sw, pending, xid in barriers:
                ok = pending.event.wait(BARRIER_TIMEOUT_S)
                self._done(xid)
                if not ok:
                    log.error("switch %s: no barrier reply in phase %d within %.0f s", sw.name, number, BARRIER_TIMEOUT_S)
                    sw.actual = None
        for name, ops in ops_by_switch.items():
            sw = by_name[name]
            with self._lock:
                if sw.actual is None:  # an error or a timeout: read it back next time
                    continue
                try:
                    sw.actual = apply(ops, sw.actual)
                except InconsistentOp as e:
                    log.warning("switch %s: remembered state inconsistent (%s); reading it back next time", name, e)
                    sw.actual = None
            log.info("switch %s: sent %d operations", name, len(ops))
        # An error or a timeout made the remembered state unknown: read the switch
        # back and repair it now, at most MAX_RETRIES times in a row (a switch that
        # keeps refusing waits for the next plan or reconnect).
        for name, sw in by_name.items():
            if sw.actual is not None:
                sw.retries = 0
            elif sw.connected and not self._stopping and sw.retries < MAX_RETRIES:
                sw.retries += 1
                log.info("switch %s: reading it back to repair (attempt %d)", name, sw.retries)
                self._queue.put(("retry", sw.dp.id))
