"""Measured link rates from port counters (controller/link_rates.py): deltas,
wraparound and resets, staleness, and the mapping of ports onto link directions."""

from __future__ import annotations

import pytest

from controller.core.port_rates import PortRate, PortRates, counter_delta, link_rates


def test_counter_delta():
    assert counter_delta(100, 350) == 250
    assert counter_delta(2**64 - 10, 5) == 15  # wrapped around
    assert counter_delta(1_000_000, 10) is None  # reset (a restarted switch or port)
    assert counter_delta(2**32 - 1, 3, bits=32) == 4


def test_rates_from_samples():
    r = PortRates()
    assert r.update("s1", 1, 0, 0, at=10.0) is None  # a first sample has no rate
    rate = r.update("s1", 1, 1_000, 2_000, at=12.0)
    assert rate == PortRate(rx_bps=4_000.0, tx_bps=8_000.0, at=12.0)
    assert r.rates(now=12.0, max_age=5)[("s1", 1)] == rate
    assert r.rates(now=30.0, max_age=5) == {}  # stale
    assert r.update("s1", 1, 2_000, 3_000, at=13.0).tx_bps == 8_000.0
    # a reset drops the rate until the next sample
    assert r.update("s1", 1, 10, 10, at=14.0) is None
    assert ("s1", 1) not in r.rates(now=14.0, max_age=5)
    assert r.update("s1", 1, 10 + 125, 10, at=15.0).rx_bps == 1_000.0
    # a sample not later than the previous gives none
    assert r.update("s1", 1, 500, 500, at=15.0) is None


def test_wraparound_rate():
    r = PortRates()
    r.update("s", 2, 2**64 - 100, 0, at=0.0)
    assert r.update("s", 2, 900, 0, at=1.0).rx_bps == 8_000.0


def test_forget_switch():
    r = PortRates()
    r.update("a", 1, 0, 0, 0.0)
    r.update("a", 1, 10, 10, 1.0)
    r.update("b", 1, 0, 0, 0.0)
    r.update("b", 1, 10, 10, 1.0)
    r.forget("a")
    assert set(r.rates(1.0, 10)) == {("b", 1)}
    assert r.update("a", 1, 20, 20, 2.0) is None  # starts again from a first sample


def test_link_mapping_prefers_the_senders_tx_and_falls_back_to_the_receivers_rx():
    ports = {("s1", "s2"): 3, ("s2", "s1"): 7, ("s1", "h1"): 1}
    rates = {("s1", 3): PortRate(rx_bps=10.0, tx_bps=20.0, at=0), ("s2", 7): PortRate(rx_bps=19.0, tx_bps=11.0, at=0),
             ("s1", 1): PortRate(rx_bps=5.0, tx_bps=6.0, at=0)}
    out = link_rates([("s1", "s2"), ("h1", "s1"), ("s2", "h2")], lambda a, b: ports.get((a, b)), rates)
    assert out[("s1", "s2")] == (20.0, 11.0)
    assert out[("h1", "s1")] == (5.0, 6.0)  # the host has no counters: the switch's rx and tx
    assert out[("s2", "h2")] == (None, None)  # s2 reported no rate on a port towards h2
    # only one end measured: that end gives both directions
    del rates[("s1", 3)]
    assert link_rates([("s1", "s2")], lambda a, b: ports.get((a, b)), rates)[("s1", "s2")] == (19.0, 11.0)


def test_rate_units_are_bits():
    r = PortRates()
    r.update("s", 1, 0, 0, 0.0)
    assert r.update("s", 1, 125_000_000, 0, 1.0).rx_bps == pytest.approx(1e9)


def test_openflow_app_polls_port_stats_and_feeds_the_service():
    """The os-ken app's handler and request, on wire-format messages (no switch)."""
    pytest.importorskip("os_ken")
    import struct
    from types import SimpleNamespace

    from os_ken.ofproto import ofproto_parser
    from os_ken.ofproto import ofproto_v1_3 as ofp
    from os_ken.ofproto import ofproto_v1_3_parser as parser

    from controller.config import build_topology, config_from_dict
    from controller.core.service import ControllerService
    from controller.southbound.openflow.app import MulticastOFCtl
    from controller.southbound.openflow.channel import Switch as _Switch
    from controller.store.sqlite import JobStore

    now = [100.0]
    config = config_from_dict({"topology": {"fattree": {"k": 4}}})
    service = ControllerService(config, build_topology(config), lambda: now[0], store=JobStore(":memory:"))
    app = MulticastOFCtl.detached(service)  # the handlers only, without os-ken's app manager
    dpid = {name: i for i, name in app._dpids.items()}
    sent = []
    dp = SimpleNamespace(id=dpid["edge-0-0"], ofproto=ofp, ofproto_parser=parser, send_msg=lambda m: sent.append(m) or True)
    dp.set_xid = lambda m: setattr(m, "xid", 40 + len(sent))
    app._switches[dp.id] = _Switch("edge-0-0", dp)
    app._switches[dpid["edge-0-1"]] = _Switch("edge-0-1", dp, connected=False)
    assert app.ask_port_stats() == 1  # connected switches only
    assert isinstance(sent[0], parser.OFPPortStatsRequest) and sent[0].port_no == ofp.OFPP_ANY

    def reply(xid, stats, more=False):
        body = b"".join(struct.pack(ofp.OFP_PORT_STATS_PACK_STR, port, 0, 0, rx, tx, *([0] * 8), 1, 0)
                        for port, rx, tx in stats)
        flags = ofp.OFPMPF_REPLY_MORE if more else 0
        mp = struct.pack(ofp.OFP_MULTIPART_REPLY_PACK_STR, ofp.OFPMP_PORT_STATS, flags)
        data = struct.pack(ofp.OFP_HEADER_PACK_STR, ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY,
                           ofp.OFP_HEADER_SIZE + len(mp) + len(body), xid) + mp + body
        msg = ofproto_parser.msg(dp, ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY, len(data), xid, data)
        assert isinstance(msg, parser.OFPPortStatsReply)
        app._port_stats(SimpleNamespace(msg=msg))

    topology, ports = service.wiring.topology_and_ports()
    up = ports[(topology.index["edge-0-0"], topology.index["agg-0-0"])]
    reply(1, [(up, 0, 0), (ofp.OFPP_LOCAL, 0, 0)])
    now[0] += 2
    reply(2, [(up, 1_000, 250_000_000)], more=True)  # nothing until the last part
    assert service.load.link_rates() == {}
    reply(2, [(ofp.OFPP_LOCAL, 5, 5)])
    rates = service.load.link_rates()
    a_to_b, b_to_a = rates.get(("edge-0-0", "agg-0-0")) or rates[("agg-0-0", "edge-0-0")][::-1]
    assert (a_to_b, b_to_a) == (1e9, 4_000.0)
    service.devices.disconnected("edge-0-0")  # its counters may restart: forgotten
    assert service.load.link_rates() == {}
