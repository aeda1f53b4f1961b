"""What a job's frames carry besides its payload: the one factor between a job's
planned rate (payload) and the rate of its frames on the wire (issue 24).

A job's planned `rate` is a payload rate: bits/s of the bytes the PS broadcasts
(the model's bytes, NORM segments). On the wire every segment travels in a
frame with headers: for the documented packetisation, NORM data messages of
`SEGMENT` bytes of data, one message per frame of `MTU` bytes (the client's
default, `controller.client.normwire.max_segment`), each frame carries
`HEADER` bytes more (NORM's data header 32, UDP 8, IPv4 20, Ethernet 14; a
meter counts from the Ethernet header on, no preamble, no FCS). So the frames
are `wire_factor()` = (SEGMENT + HEADER) / SEGMENT = 1514 / 1440 times the
payload. The controller, not the sender, pays for the headers:

- the job meters police `rate × wire_factor()` (OpenFlow `meter_for_rate`, P4
  `job_meter_config`), so a PS sending its payload at the planned rate passes;
- the planner plans every link at `capacity / wire_factor()`
  (`core.links.Links.planning_topology`), so the frames of every job together
  stay within each link's capacity;
- a job meter's burst is the southbound's (`southbound.layout.meter_burst_bits`).

A sender whose frames carry more headers per byte (smaller segments) has less
than `rate` of payload within its meter; larger segments (IP fragments) more.

Pure: imports nothing.
"""

from __future__ import annotations

MTU = 1500                    # bytes of an IPv4 packet, the documented path MTU
ETHERNET_HEADER = 14          # what a meter counts before the IP header
IPV4_HEADER = 20
UDP_HEADER = 8
NORM_DATA_HEADER = 32         # a NORM_DATA message's header as libnorm 1.5.9 sends it
SEGMENT = MTU - IPV4_HEADER - UDP_HEADER - NORM_DATA_HEADER       # 1440 bytes of payload per frame
HEADER = NORM_DATA_HEADER + UDP_HEADER + IPV4_HEADER + ETHERNET_HEADER  # 74 bytes per frame


def wire_factor() -> float:
    """Frame bytes on the wire per payload byte, for the documented packetisation
    (`SEGMENT` bytes of payload per frame of `MTU` bytes): 1514 / 1440."""
    return (SEGMENT + HEADER) / SEGMENT


def wire_rate(payload_bps: float) -> float:
    """The rate of a job's frames (what its meter polices) for its planned payload rate."""
    return payload_bps * wire_factor()


def payload_capacity(capacity_bps: float) -> float:
    """The payload a link of `capacity_bps` (bit/s of frames) carries: what the planner plans it at."""
    return capacity_bps / wire_factor()
