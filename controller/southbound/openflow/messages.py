"""Entries <-> os-ken messages, and what a switch's replies say (pure but for os-ken's classes).

`op_message` turns a reconcile operation (`openflow.reconcile`) into the os-ken
message that executes it; `flow_from_stats`, `group_from_stats`,
`meter_from_stats` turn what a switch reports back into frozen entries
(`openflow.entries`); `table_full_kind` reads an error as a full table;
`limits_from_reply` reads port descriptions, group and table features as the
limits the core records (`Devices.report_limits`); `arp_reply` builds a proxy-ARP
answer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from os_ken.lib.packet import arp, ether_types, ethernet, packet
from os_ken.ofproto import ofproto_v1_3

from controller.southbound.openflow.entries import (
    TABLE_FORWARD,
    Drop,
    FlowEntry,
    GotoTable,
    GroupAction,
    GroupEntry,
    Meter,
    MeterEntry,
    Output,
    SetField,
    decode_cookie,
)
from controller.southbound.openflow.reconcile import (
    AddFlow,
    AddGroup,
    AddMeter,
    DeleteFlow,
    DeleteGroup,
    DeleteMeter,
    ModifyFlow,
    ModifyGroup,
    ModifyMeter,
    Op,
)

_GROUP_TYPES = {"all": 0, "select": 1, "indirect": 2, "ff": 3}  # OFPGT_*
_GROUP_TYPE_NAMES = {v: k for k, v in _GROUP_TYPES.items()}


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
    if isinstance(op, (AddFlow, ModifyFlow, DeleteFlow)):
        f = op.flow
        entry = {"table_id": f.table_id, "priority": f.priority, "match": _match(dp, f)}
        if isinstance(op, DeleteFlow):
            return parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE_STRICT, out_port=ofp.OFPP_ANY,
                                     out_group=ofp.OFPG_ANY, **entry)
        # OFPFC_ADD replaces an entry of the same table, priority and match atomically
        # and also updates its cookie (MODIFY_STRICT would keep the old cookie).
        return parser.OFPFlowMod(dp, cookie=f.cookie, command=ofp.OFPFC_ADD, instructions=_instructions(dp, f), **entry)
    if isinstance(op, (AddGroup, ModifyGroup, DeleteGroup)):
        g = op.group
        command = {AddGroup: ofp.OFPGC_ADD, ModifyGroup: ofp.OFPGC_MODIFY, DeleteGroup: ofp.OFPGC_DELETE}[type(op)]
        watch = g.watch_ports or (ofp.OFPP_ANY,) * len(g.buckets)  # watch_port matters to "ff" groups only
        buckets = [] if isinstance(op, DeleteGroup) else [
            parser.OFPBucket(watch_port=w, actions=_of_actions(parser, b)) for w, b in zip(watch, g.buckets)]
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
            if decoded is not None and decoded[0] in ("multicast", "backup"):
                return "entry"
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
            out.append(SetField(key, int(value) if key == "ip_dscp" else str(value)))
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
    kind = _GROUP_TYPE_NAMES.get(stat.type, "all")
    return GroupEntry(
        stat.group_id,
        kind,
        tuple(tuple(_from_of_actions(b.actions)) for b in stat.buckets),
        tuple(int(b.watch_port) for b in stat.buckets) if kind == "ff" else (),
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


