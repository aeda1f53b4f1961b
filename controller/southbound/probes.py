"""The controller's host probes, the same frame for both backends.

A job may name a host that has not sent anything yet. The controller then asks
for it as ONOS's host probing does: an ARP request out of every edge port of
every switch (sent as a packet-out, never flooded through the fabric). Pure:
bytes out.
"""

from __future__ import annotations

import ipaddress

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
