"""Packets the P4Runtime backend sends and receives through the CPU port, and link liveness.

Pure: bytes in, bytes or values out, and a clock passed in.

- LLDP probes are `controller.southbound.lldp`'s (shared with the OpenFlow
  backend: signed, verified); `ETH_LLDP` is re-exported here.
- ARP: `parse_arp` reads a request or a reply; `arp_reply` answers a request for a known host,
  so hosts on P4 switches resolve each other without flooding.
- IPv4: `parse_ipv4_source` reads the source address and MAC of a source-check
  copy (IPv4 from a host port whose source the switch did not know).
- `LinkTracker`: when each directed link (switch, port) -> (switch, port) was
  last seen by LLDP, and which links have not been seen for `timeout_s`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from controller.addressing.hosts import normalise_mac
from controller.southbound.lldp import ETH_LLDP

__all__ = ["ETH_ARP", "ETH_IPV4", "ETH_LLDP", "ArpMessage", "LinkTracker", "arp_reply", "parse_arp", "parse_ipv4_source"]

ETH_ARP = 0x0806
ETH_IPV4 = 0x0800


def _mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(normalise_mac(mac).replace(":", ""))


def _mac_str(data: bytes) -> str:
    return ":".join(f"{b:02x}" for b in data)


ARP_REQUEST = 1
ARP_REPLY = 2


@dataclass(frozen=True)
class ArpMessage:
    """An IPv4-over-Ethernet ARP request or reply (`op`)."""

    sender_mac: str
    sender_ip: str
    target_ip: str
    op: int = ARP_REQUEST


def parse_arp(frame: bytes) -> ArpMessage | None:
    """An ARP request or reply for IPv4 over Ethernet; None for anything else."""
    if len(frame) < 42 or int.from_bytes(frame[12:14], "big") != ETH_ARP:
        return None
    arp = frame[14:42]
    if arp[0:2] != b"\x00\x01" or arp[2:4] != b"\x08\x00" or arp[4] != 6 or arp[5] != 4:
        return None
    op = int.from_bytes(arp[6:8], "big")
    if op not in (ARP_REQUEST, ARP_REPLY):
        return None
    return ArpMessage(
        _mac_str(arp[8:14]), str(ipaddress.IPv4Address(arp[14:18])), str(ipaddress.IPv4Address(arp[24:28])), op
    )


def parse_ipv4_source(frame: bytes) -> tuple[str, str] | None:
    """(source IPv4, source MAC) of an IPv4 frame; None for anything else."""
    if len(frame) < 34 or int.from_bytes(frame[12:14], "big") != ETH_IPV4 or frame[14] >> 4 != 4:
        return None
    return str(ipaddress.IPv4Address(frame[26:30])), _mac_str(frame[6:12])


def arp_reply(request: ArpMessage, mac: str) -> bytes:
    """The ARP reply "target_ip is at `mac`" to the requester."""
    me, them = _mac_bytes(mac), _mac_bytes(request.sender_mac)
    arp = (
        b"\x00\x01\x08\x00\x06\x04\x00\x02"
        + me
        + ipaddress.IPv4Address(request.target_ip).packed
        + them
        + ipaddress.IPv4Address(request.sender_ip).packed
    )
    return them + me + ETH_ARP.to_bytes(2, "big") + arp


class LinkTracker:
    """Last LLDP sighting of every directed link (a, port_a) -> (b, port_b)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._seen: dict[tuple[str, int], tuple[str, int, float]] = {}
        self._dead: set[tuple[str, int]] = set()

    def observe(self, src: str, src_port: int, dst: str, dst_port: int, now: float) -> bool:
        """Record a probe of `src` port `src_port` received by `dst` on `dst_port`;
        True if this link had timed out (it is alive again)."""
        key = (src, src_port)
        self._seen[key] = (dst, dst_port, now)
        if key in self._dead:
            self._dead.discard(key)
            return True
        return False

    def expire(self, now: float) -> list[tuple[str, int, str, int]]:
        """The links that have just timed out: (src, src_port, dst, dst_port)."""
        out = []
        for key, (dst, dst_port, when) in self._seen.items():
            if key not in self._dead and now - when > self.timeout_s:
                self._dead.add(key)
                out.append((key[0], key[1], dst, dst_port))
        return sorted(out)

    def is_dead(self, src: str, src_port: int) -> bool:
        return (src, src_port) in self._dead

    def links(self) -> dict[tuple[str, int], tuple[str, int]]:
        """Every link seen: (src, src_port) -> (dst, dst_port)."""
        return {k: (d, p) for k, (d, p, _) in self._seen.items()}

    def forget(self, switch: str) -> None:
        """Drop what was seen from or to `switch` (it disconnected)."""
        for key in [k for k, (d, _, _) in self._seen.items() if k[0] == switch or d == switch]:
            del self._seen[key]
            self._dead.discard(key)
