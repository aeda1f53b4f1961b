"""What a NORM broadcast puts on the wire, packet by packet, and the NORM rate
that keeps it at the job's plan (`controller.client.broadcast` uses it); the checks
of a session's settings (segment, TOS byte, NORM's buffer memory, `BUFFER_BYTES`); the
local interface holding an address (`interface_for`) and its MTU (`interface_mtu`).

The plan's rate is a payload rate: bits/s of the object's bytes (NORM
segments). The controller pays for the headers: the meter at the PS's edge
switch polices the job's frames at the planned rate times `WIRE_FACTOR` (1514 /
1440: a 1440-byte segment in a 1514-byte frame, NORM 32 + UDP 8 + IPv4 20 +
Ethernet 14 bytes of headers; `controller.algorithm.wire`, which the planner and
both backends use, owns the factor; this standard-library copy is checked
against it by tests/test_broadcast.py), and the planner plans links at their
capacity divided by it. Meters count each packet from its Ethernet header on
(no preamble, no FCS), as the emulation's htb shapers do.

So a sender sends its segments at `share` of the planned rate. With segments
smaller than 1440 bytes its frames carry more headers per byte than the
controller reserved: it then sends less payload, so that its frames stay at
`share` of the meter's rate (`norm_rate` takes the smaller).

libnorm's `NormSetTxRate` counts only NORM messages (the UDP payload): it
spaces messages by their length over the rate (measured with Debian's libnorm1
1.5.9: 0.99999 of the rate in NORM message bytes). A NORM_DATA message is its
32-byte header (common header, FEC payload id and the FEC transport information
extension that libnorm puts on every data message; measured: a 1400-byte
segment is a 1432-byte message) plus one segment. NORM's rate for segments at `share` of the plan is then plan × share × message /
segment (at most the meter's frame rate × share × message / frame).

A segment larger than the path MTU allows (`max_segment(mtu)`) is sent as IP
fragments (`NormSetFragmentation`): each fragment carries its own Ethernet and
IPv4 header, the UDP and NORM headers come once per message. Fewer headers per
byte (4 fragments: 0.971 of the frame bytes are data, against 0.951 unfragmented
at MTU 1500), but a lost fragment loses the whole segment.

The UDP port of a job's sessions (`port_for`) is here too, so that the
controller's planned class (`controller.southbound.planned`) finds the job's
packets by the same function the client sends them with.

Standard library only.
"""

from __future__ import annotations

import fcntl
import ipaddress
import math
import socket
import struct

ETHERNET_HEADER = 14          # bytes a meter counts before the IP header (no preamble, no FCS)
IPV4_HEADER = 20
UDP_HEADER = 8
NORM_DATA_HEADER = 32         # a NORM_DATA message's header as libnorm sends it (measured, fec id 5)
DEFAULT_MTU = 1500
# frame bytes per payload byte that the controller reserves and meters (a copy of
# controller.algorithm.wire.wire_factor(): the client imports no other package)
WIRE_FACTOR = (DEFAULT_MTU + ETHERNET_HEADER) / (DEFAULT_MTU - IPV4_HEADER - UDP_HEADER - NORM_DATA_HEADER)
MAX_UDP_PAYLOAD = 65507       # 65535 - IPv4 20 - UDP 8
PORT_BASE = 32768
PORT_SPAN = 32768             # ports 32768..65535, from the group address


def port_for(group_address: str) -> int:
    """The UDP port of a job's NORM sessions, from its group address."""
    return PORT_BASE + int(ipaddress.IPv4Address(group_address)) % PORT_SPAN


def fragments(udp_payload: int, mtu: int = DEFAULT_MTU) -> int:
    """How many IPv4 packets a UDP datagram of `udp_payload` bytes leaves as
    (fragments carry multiples of 8 bytes but the last)."""
    per_fragment = (mtu - IPV4_HEADER) // 8 * 8
    return max(1, math.ceil((udp_payload + UDP_HEADER) / per_fragment))


def frame_bytes(udp_payload: int, mtu: int = DEFAULT_MTU) -> int:
    """The bytes of every Ethernet frame (as a meter counts them) that carry one
    UDP datagram of `udp_payload` bytes."""
    return udp_payload + UDP_HEADER + fragments(udp_payload, mtu) * (IPV4_HEADER + ETHERNET_HEADER)


def max_segment(mtu: int = DEFAULT_MTU) -> int:
    """The largest NORM segment whose data message fits one packet of `mtu` bytes."""
    return mtu - IPV4_HEADER - UDP_HEADER - NORM_DATA_HEADER


def check_segment(segment: int, mtu: int) -> None:
    """`ValueError` naming the field if `segment` or `mtu` cannot be used."""
    if not 576 <= mtu <= 65535:
        raise ValueError(f"mtu must be 576..65535 bytes, not {mtu}")
    if not 64 <= segment <= MAX_UDP_PAYLOAD - NORM_DATA_HEADER:
        raise ValueError(f"segment must be 64..{MAX_UDP_PAYLOAD - NORM_DATA_HEADER} bytes, not {segment}")


def data_share(segment: int, mtu: int = DEFAULT_MTU) -> float:
    """The fraction of the frame bytes that is object data, for full segments."""
    return segment / frame_bytes(segment + NORM_DATA_HEADER, mtu)


def norm_rate(planned_bps: float, share: float, segment: int, mtu: int = DEFAULT_MTU) -> float:
    """The rate for `NormSetTxRate` (bit/s of NORM messages) that sends the
    segments at `share` of the planned payload rate `planned_bps`, or less if
    their frames would then exceed `share` of what the meter polices
    (`planned_bps × WIRE_FACTOR`)."""
    message = segment + NORM_DATA_HEADER
    payload = planned_bps * share * message / segment
    frames = planned_bps * WIRE_FACTOR * share * message / frame_bytes(message, mtu)
    return min(payload, frames)


def interface_mtu(name: str | None) -> int | None:
    """The MTU of the local interface `name` (None if unknown or not given)."""
    if not name:
        return None
    SIOCGIFMTU = 0x8921
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), SIOCGIFMTU, struct.pack("16si", name.encode()[:15], 0))
        except OSError:
            return None
    return struct.unpack("16si", raw)[1] or None


def interface_for(ip: str) -> str | None:
    """The name of the local interface holding IPv4 `ip` (None if none does)."""
    SIOCGIFADDR = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == ip:
                return name
    return None


# NORM's memory for repair state, per sender session and per receiver's remote sender
# (NormStartSender / NormStartReceiver `bufferSpace`): FEC parity and block state, allocated
# and touched in full when the session starts (a receiver's: when it first hears the PS). A
# block's state takes about a quarter of the block's data (16 parity segments per 64), and
# only blocks not yet complete hold it, so 8 MiB covers every block of a model up to about
# 32 MB and far more in flight. 64 MiB (the default before) cost 0.12 s of CPU and 217 MB
# of memory per 3-destination Sender; with every job's processes starting at once on a small
# host that stalled NORM's own thread for about a second (docs/emulation.md, "NORM's buffers").
BUFFER_BYTES = 8 << 20
BUFFER_RANGE = (256 << 10, 2 << 30)


def check_buffer(buffer_bytes: int) -> None:
    low, high = BUFFER_RANGE
    if isinstance(buffer_bytes, bool) or not isinstance(buffer_bytes, int) or not low <= buffer_bytes <= high:
        raise ValueError(f"buffer_bytes must be {low}..{high} (256 KiB..2 GiB), not {buffer_bytes!r}")


def check_tos(tos: int | None) -> None:
    if tos is not None and not (isinstance(tos, int) and 0 <= tos <= 255):
        raise ValueError(f"tos must be an IP TOS byte, 0..255, not {tos!r}")
