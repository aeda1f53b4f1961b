"""Hosts' unicast addresses: IPv4 and MAC.

`host_addresses` gives every host an IPv4 and a MAC address: the configured one
where there is one, else a default derived from the host's position among the
topology's hosts (see its docstring), which matches what Mininet assigns to hosts
created in the same order. `normalise_mac` is the one spelling of a MAC address
everywhere in the controller (lower case, colons).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from controller.algorithm.model import Topology

DEFAULT_HOST_NETWORK = ipaddress.IPv4Network("10.0.0.0/8")


def format_mac(value: int) -> str:
    """The 48-bit `value` as a MAC address (lower case, colons)."""
    return ":".join(f"{(value >> s) & 0xFF:02x}" for s in range(40, -1, -8))


def normalise_mac(mac: str) -> str:
    """`mac` in lower-case colon form; raises ValueError if it is not a MAC address."""
    parts = mac.replace("-", ":").split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise ValueError(f"{mac!r} is not a MAC address (expected six hex octets)")
    try:
        octets = [int(p, 16) for p in parts]
    except ValueError:
        raise ValueError(f"{mac!r} is not a MAC address (expected six hex octets)") from None
    return ":".join(f"{o:02x}" for o in octets)


@dataclass(frozen=True)
class HostAddress:
    """A host's IPv4 address (dotted string) and MAC address (lower-case, colons)."""

    ip: str
    mac: str

    def __post_init__(self) -> None:
        ip = ipaddress.IPv4Address(self.ip)
        if ip.is_multicast or ip.is_unspecified or ip == ipaddress.IPv4Address("255.255.255.255"):
            raise ValueError(f"host address {ip} is not a unicast IPv4 address")
        mac = normalise_mac(self.mac)
        if int(mac[:2], 16) & 1:
            raise ValueError(f"host MAC {mac} is a multicast MAC")
        object.__setattr__(self, "ip", str(ip))
        object.__setattr__(self, "mac", mac)


def default_host_address(n: int) -> HostAddress:
    """The default address of the n-th host (n >= 1): 10.0.0.0 + n and MAC n.

    Host 1 is 10.0.0.1 / 00:00:00:00:00:01, host 300 is 10.0.1.44 / 00:00:00:00:01:2c:
    Mininet's defaults for hosts h1, h2, ... (with autoSetMacs).
    """
    if not 1 <= n < DEFAULT_HOST_NETWORK.num_addresses - 1:
        raise ValueError(f"no default address for host number {n}")
    return HostAddress(str(DEFAULT_HOST_NETWORK.network_address + n), format_mac(n))


def host_addresses(
    topology: Topology, configured: Mapping[str, HostAddress] | None = None
) -> dict[str, HostAddress]:
    """Host id -> address, for every host of `topology`.

    A host listed in `configured` gets that address; every other host gets
    `default_host_address(n)`, n being its 1-based position among the topology's
    hosts in node order (`topology.hosts`). Raises ValueError for a configured
    name that is not a host of the topology, or if two hosts would share an IP
    or a MAC address.
    """
    configured = dict(configured or {})
    names = [topology.name(h) for h in topology.hosts]
    unknown = sorted(set(configured) - set(names))
    if unknown:
        raise ValueError(f"addresses configured for unknown hosts: {', '.join(unknown)}")
    out: dict[str, HostAddress] = {}
    for n, name in enumerate(names, start=1):
        addr = configured.get(name)
        if addr is None:
            addr = default_host_address(n)
        elif not isinstance(addr, HostAddress):
            raise ValueError(f"address of host {name} must be a HostAddress, got {type(addr).__name__}")
        out[name] = addr
    for what in ("ip", "mac"):
        seen: dict[str, str] = {}
        for name, addr in out.items():
            value = getattr(addr, what)
            if value in seen:
                raise ValueError(f"hosts {seen[value]} and {name} have the same {what.upper()} {value}")
            seen[value] = name
    return out
