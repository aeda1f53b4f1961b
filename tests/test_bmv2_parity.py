"""On BMv2: the P4 data plane does what the OpenFlow pipeline does (docs/p4.md).

One 2x2 leaf-spine of BMv2 switches (tests/bmv2_fabric.py) and the real
controller with every switch on P4Runtime and a packet-in cap of
PACKET_IN_PPS, shared by the checks of this module, in order:

(a) a host with ARP turned off (static neighbours), whose MAC is not the
    configured one, is learned from its first IPv4 packets (the source check's
    copy to the CPU), after which its IPv4 passes without copies;
(c) a PS sending at exactly its planned rate loses at most 1% at every worker,
    and the job's direct counters (/metrics) match what the receivers counted;
(b) a PS sending at twice its planned rate is held to what its meter passes (the
    planned rate of frames and one burst, ± 10%) at every worker by the meter at
    its edge switch;
(d) a flood of IPv4 from an address no config names into a host port is
    not forwarded (the source guard, issue 22: it used to be), the copies the
    controller receives are held to the cap, and the guard's drops at that port
    are in /metrics (`mcast_source_guard_drops_total`).

Marked `bmv2`; skipped like tests/test_bmv2.py without BMv2, p4c, root or Mininet.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from controller.southbound.p4runtime.translate import job_meter_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bmv2_fabric import P4C, SKIP_REASON, SWITCH, Bmv2Fabric, http, metric, metrics, poll  # noqa: E402

pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.skipif(not (P4C and SWITCH), reason=SKIP_REASON),
]

PACKET_IN_PPS = 50
QUIET, QUIET_MAC = "host-3", "00:00:00:00:aa:04"  # configured: 00:00:00:00:00:04
FRAME = 1000  # bytes of Ethernet frame per datagram: 958 of payload + UDP, IPv4, Ethernet headers
PAYLOAD = FRAME - 42


@pytest.fixture(scope="module")
def fab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("parity")
    with Bmv2Fabric(tmp, 50251, southbound=f", packet_in_pps: {PACKET_IN_PPS}", macs={QUIET: QUIET_MAC}) as f:
        yield f


def mac_of(n: int) -> str:
    return f"00:00:00:00:00:{n:02x}"


def ipv4_packet_ins(url: str) -> int:
    return int(metric(metrics(url), "mcast_packet_ins_total", kind="ipv4") or 0)


def hosts(url: str) -> dict[str, dict]:
    status, body = http("GET", f"{url}/hosts")
    assert status == 200, body
    return {h["id"]: h for h in body["hosts"]}


def test_a_host_without_arp_is_learned_from_its_ipv4(fab):
    node = fab.net.get(QUIET)
    intf = node.defaultIntf().name
    node.cmd(f"ip link set {intf} arp off")
    for n in range(1, 4):
        node.cmd(f"ip neigh replace 10.0.0.{n} lladdr {mac_of(n)} dev {intf} nud permanent")
    assert not hosts(fab.url)[QUIET]["learned"], "the quiet host has sent nothing yet"
    before = ipv4_packet_ins(fab.url)
    fab.send(QUIET, "10.0.0.1", 3, size=64, pps=10, port=5009)

    def learned():
        h = hosts(fab.url)[QUIET]
        assert h["learned"] and h["mac"] == QUIET_MAC, h
        return h

    h = poll(learned, 20, "the host without ARP to be learned from its IPv4")
    assert (h["switch"], h["port"]) == ("leaf-1", 4), h
    assert ipv4_packet_ins(fab.url) > before
    # its (port, address, MAC) is now a known source: its IPv4 passes without a copy

    def silent():
        mark = ipv4_packet_ins(fab.url)
        fab.send(QUIET, "10.0.0.1", 20, size=64, pps=100, port=5009)
        time.sleep(0.5)
        return ipv4_packet_ins(fab.url) == mark

    poll(silent, 20, "the learned host's IPv4 to pass without copies to the controller")


def _job_counters(url: str, job: str) -> dict[str, tuple[float, float]]:
    text = metrics(url)
    out = {}
    for sw in ("leaf-0", "leaf-1", "spine-0", "spine-1"):
        p = metric(text, "mcast_job_packets_total", job=job, switch=sw)
        if p is not None:
            out[sw] = (p, metric(text, "mcast_job_bytes_total", job=job, switch=sw))
    return out


def test_a_job_is_policed_at_its_planned_rate_and_counted(fab):
    status, job = http("POST", f"{fab.url}/jobs", {"id": "j1", "ps": "host-0", "workers": ["host-1", "host-2", "host-3"], "demand": 1.6e6})
    assert status == 201, job

    def planned():
        status, j = http("GET", f"{fab.url}/jobs/j1")
        assert status == 200 and j["rate"], j
        return j

    job = poll(planned, 20, "the job to be planned")
    rate_pps = job["rate"] / 8 / FRAME
    assert 150 <= rate_pps <= 200, job  # the planner gives the demand: 200 frames/s
    workers = ["host-1", "host-2", "host-3"]
    poll(lambda: "leaf-0" in _job_counters(fab.url, "j1"), 20, "the job's entries and counters")
    time.sleep(1.0)  # every switch written

    # (c) at exactly the planned rate: at most 1% lost, and the counters say what arrived
    count = int(rate_pps * 4)
    before = _job_counters(fab.url, "j1")
    procs = fab.receive(workers, job["group_address"], 4 + 3)
    time.sleep(1.0)
    sent, seconds = fab.send("host-0", job["group_address"], count, size=PAYLOAD, pps=rate_pps)
    got = fab.counts(procs)
    time.sleep(0.5)
    after = _job_counters(fab.url, "j1")
    print(f"at the planned rate ({rate_pps:.1f} frames/s): sent {sent} in {seconds:.2f} s, received {got}")
    print(f"counters: before {before}, after {after}")
    assert all(n >= 0.99 * sent for n in got.values()), (sent, got)
    delta = {sw: (after[sw][0] - before[sw][0], after[sw][1] - before[sw][1]) for sw in after}
    assert abs(delta["leaf-0"][0] - sent) <= 0.01 * sent, (delta, sent)  # what the PS sent, at its edge
    assert abs(delta["leaf-0"][0] - got["host-1"]) <= 0.01 * sent, (delta, got)
    assert abs(delta["leaf-1"][0] - got["host-2"]) <= 0.01 * sent and abs(delta["leaf-1"][0] - got["host-3"]) <= 0.01 * sent, (delta, got)
    for sw, (packets, octets) in delta.items():
        assert abs(octets - packets * FRAME) <= 0.01 * packets * FRAME, (sw, packets, octets)

    # (b) at twice the planned rate: the PS's edge switch holds it to the planned rate
    time.sleep(0.5)  # the meter's bucket fills again
    count = int(2 * rate_pps * 4)
    procs = fab.receive(workers, job["group_address"], 4 + 3)
    time.sleep(1.0)
    sent, seconds = fab.send("host-0", job["group_address"], count, size=PAYLOAD, pps=2 * rate_pps)
    got = fab.counts(procs)
    # what the job meter passes: its rate (the plan's frames, headers reserved) for the
    # time, plus one burst (`layout.meter_burst_bits`: 48,448 bytes, about 6 % of the 4 s)
    meter = job_meter_config(job["rate"])
    expected = (meter.cir * seconds + meter.cburst) / FRAME
    print(f"at twice the planned rate: sent {sent} in {seconds:.2f} s, expected {expected:.0f} through the meter "
          f"({meter}), received {got}")
    assert all(abs(n - expected) <= 0.1 * expected for n in got.values()), (expected, got)


def test_a_flood_from_an_unknown_source_is_dropped_counted_and_its_copies_capped(fab):
    # issue 22: the source guard drops what it used to forward (got == sent before)
    stray, flooder = "10.99.0.9", fab.net.get("host-1")
    intf = flooder.defaultIntf().name
    flooder.cmd(f"ip addr add {stray}/32 dev {intf}")
    flooder.cmd(f"ip neigh replace 10.0.0.1 lladdr {mac_of(1)} dev {intf} nud permanent")
    seconds_planned, pps = 3.0, 1000
    before = ipv4_packet_ins(fab.url)
    drops_before = metric(metrics(fab.url), "mcast_source_guard_drops_total", switch="leaf-0", port="4") or 0
    procs = fab.receive(["host-0"], "-", seconds_planned + 4, port=5002)
    time.sleep(1.0)
    sent, seconds = fab.send("host-1", "10.0.0.1", int(seconds_planned * pps), size=64, pps=pps, port=5002, src=stray)
    got = fab.counts(procs)["host-0"]
    time.sleep(1.0)  # what the switch queued reaches the controller
    copies = ipv4_packet_ins(fab.url) - before
    drops = (metric(metrics(fab.url), "mcast_source_guard_drops_total", switch="leaf-0", port="4") or 0) - drops_before
    print(f"flood: sent {sent} in {seconds:.2f} s, host-0 received {got}, the controller got {copies} copies "
          f"(cap {PACKET_IN_PPS}/s), the guard counted {drops:.0f} at leaf-0 port 4")
    assert got == 0, (sent, got)  # not forwarded
    assert drops >= sent, (drops, sent)
    # the time of the flood at the cap, one burst, and a second's slack
    assert 0 < copies <= PACKET_IN_PPS * (seconds + 1) + max(10, PACKET_IN_PPS // 10), (copies, sent)
    assert sent > 5 * copies, (copies, sent)
