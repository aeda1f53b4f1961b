"""The controller's host probes, the same for both backends.

A job may name a host that has not sent anything yet. The controller then asks
for it as ONOS's host probing does: an ARP request out of every edge port of
every switch (sent as a packet-out, never flooded through the fabric).
`arp_probe` is the frame, `send_probes` sends it through a backend's packet-out,
and `probe_loop` is the loop both backends run in a discovered network. The
same probe goes out when a host asks for an address the controller has not seen
(`core.hosts.Hosts.on_arp`); `arp_reply_frame` is the answer the controller then
sends the asker on the found host's behalf.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Iterable

from controller.southbound.periodic import every

log = logging.getLogger(__name__)

# the source of the controller's ARP probes: a locally administered unicast MAC
PROBE_MAC = "0e:00:00:00:00:01"
_ETH_ARP = b"\x08\x06"
MIN_FRAME = 60  # the shortest Ethernet frame, without its FCS


def arp_probe(ip: str) -> bytes:
    """An ARP request for `ip` from the controller: sender address 0.0.0.0 (an ARP
    probe, RFC 5227), so that no host caches anything from it. The host that has
    `ip` answers to PROBE_MAC, and the switch hands the answer to the controller
    (an unknown host's ARP matches no known-source entry)."""
    me = bytes.fromhex(PROBE_MAC.replace(":", ""))
    arp = (
        b"\x00\x01\x08\x00\x06\x04\x00\x01"  # Ethernet, IPv4, request
        + me
        + bytes(4)  # sender 0.0.0.0
        + bytes(6)
        + ipaddress.IPv4Address(ip).packed
    )
    frame = b"\xff" * 6 + me + _ETH_ARP + arp
    return frame + bytes(max(0, MIN_FRAME - len(frame)))  # padded as a NIC would


def send_probes(
    ips: Iterable[str],
    switches: Iterable[str],
    edge_ports: Callable[[str], Iterable[int]],
    send: Callable[[str, int, bytes], None],
) -> int:
    """One ARP probe per address out of every edge port (`edge_ports(switch)`) of
    every switch of `switches` (`send(switch, port, frame)`); the frames sent."""
    frames = [arp_probe(ip) for ip in ips]
    if not frames:
        return 0
    sent = 0
    for switch in sorted(switches):
        for port in edge_ports(switch):
            for frame in frames:
                send(switch, port, frame)
                sent += 1
    return sent


def probe_loop(stop: threading.Event, interval: float, targets: Callable[[], list[str]],
               probe: Callable[[list[str]], int]) -> None:
    """Every `interval` seconds until `stop`, probe for `targets()` (the hosts that
    waiting jobs name and that were never seen); a failed round is logged."""
    every(stop, interval, lambda: probe(targets()), "host probing failed", log)


def probe_sender(packet_out: Callable[[str, int, bytes], None]) -> Callable[[str, int, str], None]:
    """What a backend registers in `service.hosts.probe_senders`: send an ARP probe
    for `ip` out of one (switch, port) (the old place of a host a claim is about;
    `packet_out` skips the switches that are not the backend's)."""
    return lambda switch, port, ip: packet_out(switch, port, arp_probe(ip))


def host_loop(stop: threading.Event, interval: float, tick: Callable[[], None]) -> None:
    """Every `interval` seconds until `stop`, `tick()` (`Hosts.tick`: settle the
    claims about hosts, forget the silent ones); a failed round is logged."""
    every(stop, interval, tick, "host tick failed", log)


def arp_reply_frame(asker_ip: str, asker_mac: str, target_ip: str, target_mac: str) -> bytes:
    """An ARP reply to `asker_ip` / `asker_mac`: "`target_ip` is at `target_mac`",
    from `target_mac` (sent by the controller on the target's behalf)."""
    asker, target = (bytes.fromhex(m.replace(":", "")) for m in (asker_mac, target_mac))
    arp = (
        b"\x00\x01\x08\x00\x06\x04\x00\x02"  # Ethernet, IPv4, reply
        + target
        + ipaddress.IPv4Address(target_ip).packed
        + asker
        + ipaddress.IPv4Address(asker_ip).packed
    )
    frame = asker + target + _ETH_ARP + arp
    return frame + bytes(max(0, MIN_FRAME - len(frame)))
