"""Packets the P4Runtime backend sends and receives through the CPU port, and link liveness.

Pure: bytes in, bytes or values out, and a clock passed in.

- LLDP (IEEE 802.1AB) probes: `lldp_frame(switch, port)` is sent as a
  packet-out on every switch-facing port; a switch that receives one sends it
  to the controller as a packet-in with its ingress port, and `parse_lldp`
  recovers (sender switch, sender port). The chassis id carries
  `CHASSIS_PREFIX` + the switch name, so probes of other LLDP speakers (hosts,
  other controllers) are told apart and ignored.
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

ETH_LLDP = 0x88CC
ETH_ARP = 0x0806
ETH_IPV4 = 0x0800
LLDP_MULTICAST = "01:80:c2:00:00:0e"  # nearest bridge: never forwarded by a bridge
CHASSIS_PREFIX = b"mcast-controller:"
LLDP_TTL_S = 120
_TLV_END, _TLV_CHASSIS, _TLV_PORT, _TLV_TTL = 0, 1, 2, 3
_SUBTYPE_LOCAL = 7  # chassis id and port id subtype "locally assigned"


def _mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(normalise_mac(mac).replace(":", ""))


def _mac_str(data: bytes) -> str:
    return ":".join(f"{b:02x}" for b in data)


def _tlv(kind: int, value: bytes) -> bytes:
    if len(value) > 511:
        raise ValueError("LLDP TLV longer than 511 bytes")
    return ((kind << 9) | len(value)).to_bytes(2, "big") + value


def lldp_frame(switch: str, port: int, src_mac: str = "02:00:00:00:00:01") -> bytes:
    """An LLDP frame announcing `switch` port `port`."""
    body = (
        _tlv(_TLV_CHASSIS, bytes([_SUBTYPE_LOCAL]) + CHASSIS_PREFIX + switch.encode())
        + _tlv(_TLV_PORT, bytes([_SUBTYPE_LOCAL]) + str(port).encode())
        + _tlv(_TLV_TTL, LLDP_TTL_S.to_bytes(2, "big"))
        + _tlv(_TLV_END, b"")
    )
    return _mac_bytes(LLDP_MULTICAST) + _mac_bytes(src_mac) + ETH_LLDP.to_bytes(2, "big") + body


def parse_lldp(frame: bytes) -> tuple[str, int] | None:
    """(switch, port) of one of our LLDP probes; None for anything else."""
    if len(frame) < 14 or int.from_bytes(frame[12:14], "big") != ETH_LLDP:
        return None
    pos, chassis, port = 14, None, None
    while pos + 2 <= len(frame):
        head = int.from_bytes(frame[pos : pos + 2], "big")
        kind, length = head >> 9, head & 0x1FF
        value = frame[pos + 2 : pos + 2 + length]
        if len(value) != length or kind == _TLV_END:
            break
        if kind == _TLV_CHASSIS and value[:1] == bytes([_SUBTYPE_LOCAL]) and value[1:].startswith(CHASSIS_PREFIX):
            chassis = value[1 + len(CHASSIS_PREFIX) :].decode("utf-8", "replace")
        elif kind == _TLV_PORT and value[:1] == bytes([_SUBTYPE_LOCAL]):
            try:
                port = int(value[1:].decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                return None
        pos += 2 + length
    if not chassis or port is None:
        return None
    return chassis, port


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
