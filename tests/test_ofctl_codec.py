"""The OpenFlow app's codec: entries → os-ken messages → entries (as read back).

Pure: os-ken's message classes are built and read, nothing is sent. The OVS tests
check the same against a real switch; these pin the cases one by one.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("os_ken")

from os_ken.ofproto import ofproto_v1_3 as ofp  # noqa: E402
from os_ken.ofproto import ofproto_v1_3_parser as parser  # noqa: E402

from controller.southbound.openflow import entries as st  # noqa: E402
from controller.southbound.openflow import translate as of_translate  # noqa: E402
from controller.southbound.openflow.messages import flow_from_stats, meter_from_stats, op_message  # noqa: E402
from controller.southbound.openflow.reconcile import AddFlow, AddMeter  # noqa: E402

DP = SimpleNamespace(ofproto=ofp, ofproto_parser=parser)


def test_reserved_numbers_are_the_openflow_ones():
    assert (st.OFPP_CONTROLLER, st.OFPP_IN_PORT) == (ofp.OFPP_CONTROLLER, ofp.OFPP_IN_PORT)
    assert (st.OFPM_CONTROLLER, st.OFPM_MAX, st.OFPG_MAX) == (ofp.OFPM_CONTROLLER, ofp.OFPM_MAX, ofp.OFPG_MAX)


def _read_back(flow: st.FlowEntry) -> st.FlowEntry:
    msg = op_message(DP, AddFlow(flow))
    stat = SimpleNamespace(match=msg.match, instructions=msg.instructions, table_id=msg.table_id,
                           priority=msg.priority, cookie=msg.cookie)
    return flow_from_stats(stat)


@pytest.mark.parametrize(
    "flow",
    [
        # the source table: pass on, copy to the controller and pass on, the miss
        st.FlowEntry(st.TABLE_SOURCE, st.PRIORITY_SOURCE_KNOWN,
                     (("in_port", 3), ("eth_type", 0x0800), ("ipv4_src", "10.0.0.1"), ("eth_src", "02:00:00:00:00:01")),
                     (st.GotoTable(st.TABLE_FORWARD),), 7),
        st.FlowEntry(st.TABLE_SOURCE, st.PRIORITY_SOURCE_UNKNOWN, (("in_port", 3), ("eth_type", 0x0800)),
                     (st.Output(st.OFPP_CONTROLLER), st.GotoTable(st.TABLE_FORWARD)), 8),
        st.FlowEntry(st.TABLE_SOURCE, st.PRIORITY_SOURCE_MISS, (), (st.GotoTable(st.TABLE_FORWARD),), 9),
        # forwarding: a metered group, a rewrite, a drop
        st.FlowEntry(st.TABLE_FORWARD, st.PRIORITY_MULTICAST,
                     (("eth_type", 0x0800), ("in_port", 1), ("ipv4_dst", "239.1.0.1")),
                     (st.Meter(4), st.GroupAction(2)), 10),
        st.FlowEntry(st.TABLE_FORWARD, st.PRIORITY_MULTICAST,
                     (("eth_type", 0x0800), ("in_port", 2), ("ipv4_dst", "239.1.0.2")),
                     (st.SetField("ipv4_dst", "10.0.0.5"), st.SetField("eth_dst", "02:00:00:00:00:05"),
                      st.Output(st.OFPP_IN_PORT)), 11),
        st.FlowEntry(st.TABLE_FORWARD, st.PRIORITY_MULTICAST,
                     (("eth_type", 0x0800), ("in_port", 2), ("ipv4_dst", "239.1.0.3")), (st.Drop(),), 12),

        # the planned class (openflow.planned): reset, mark after a meter, UDP ports matched
        st.FlowEntry(st.TABLE_SOURCE, st.PRIORITY_SOURCE_KNOWN,
                     (("in_port", 3), ("eth_type", 0x0800), ("ipv4_src", "10.0.0.1"), ("eth_src", "02:00:00:00:00:01")),
                     (st.SetField("ip_dscp", 0), st.GotoTable(st.TABLE_FORWARD)), 13),
        st.FlowEntry(st.TABLE_SOURCE, st.PRIORITY_PLANNED,
                     (("in_port", 3), ("eth_type", 0x0800), ("ipv4_src", "10.0.0.1"), ("eth_src", "02:00:00:00:00:01"),
                      ("ipv4_dst", "10.0.0.2"), ("ip_proto", 17), ("udp_dst", 32769)),
                     (st.Meter(5), st.SetField("ip_dscp", 46), st.GotoTable(st.TABLE_FORWARD)), 14),
        st.FlowEntry(st.TABLE_SOURCE, st.PRIORITY_PLANNED,
                     (("in_port", 4), ("eth_type", 0x0800), ("ipv4_src", "10.0.0.2"), ("eth_src", "02:00:00:00:00:02"),
                      ("ipv4_dst", "10.0.0.1"), ("ip_proto", 17), ("udp_src", 32769)),
                     (st.Meter(6), st.SetField("ip_dscp", 46), st.GotoTable(st.TABLE_FORWARD)), 15),
        st.FlowEntry(st.TABLE_FORWARD, st.PRIORITY_MULTICAST,
                     (("eth_type", 0x0800), ("in_port", 1), ("ipv4_dst", "239.1.0.4")),
                     (st.Meter(4), st.SetField("ip_dscp", 46), st.GroupAction(2)), 16),
    ],
)
def test_flows_read_back_as_they_were_written(flow):
    assert _read_back(flow) == flow
    msg = op_message(DP, AddFlow(flow))
    msg.datapath = SimpleNamespace(ofproto=ofp, ofproto_parser=parser, id=1)
    msg.serialize()  # and encodes (the planned class's fields among them)
    assert len(msg.buf) > 48


def test_goto_table_is_the_last_instruction():
    flow = st.FlowEntry(st.TABLE_SOURCE, 200, (("in_port", 3),), (st.Output(st.OFPP_CONTROLLER), st.GotoTable(1)))
    kinds = [type(i).__name__ for i in op_message(DP, AddFlow(flow)).instructions]
    assert kinds == ["OFPInstructionActions", "OFPInstructionGotoTable"]


@pytest.mark.parametrize("meter", [of_translate.meter_for_rate(3, 2.5e6), of_translate.packet_in_meter(1000)])
def test_meters_read_back_with_their_unit(meter):
    msg = op_message(DP, AddMeter(meter))
    unit = ofp.OFPMF_PKTPS if meter.unit == "pktps" else ofp.OFPMF_KBPS
    assert msg.flags == unit | ofp.OFPMF_BURST and msg.meter_id == meter.meter_id
    stat = SimpleNamespace(meter_id=msg.meter_id, flags=msg.flags, bands=msg.bands)
    assert meter_from_stats(stat) == meter


def test_packet_in_meter_is_the_controller_meter():
    m = of_translate.packet_in_meter(1000)
    assert (m.meter_id, m.rate, m.burst, m.unit) == (ofp.OFPM_CONTROLLER, 1000, 100, "pktps")
    assert of_translate.packet_in_meter(20).burst == 10
    with pytest.raises(ValueError):
        of_translate.packet_in_meter(0)
    with pytest.raises(ValueError, match="unit"):
        st.MeterEntry(1, 1, 1, "bps")
