"""Multicast group addresses: one IPv4 group per job (docs/architecture.md).

`GroupAddressPool` gives every job a multicast group address from a configurable
pool. It is deterministic: the same sequence of calls gives the same addresses.
A job keeps its address for as long as it holds it; a released address goes back
to the pool and the lowest free address is always handed out first, so a
long-running controller reuses a compact range (`sync`, the call made per plan,
reuses an address from the next plan on, never in the same one).
"""

from __future__ import annotations

import heapq
import ipaddress
from collections.abc import Iterable

from controller.addressing.hosts import format_mac

MULTICAST_RANGE = ipaddress.IPv4Network("224.0.0.0/4")
# 224.0.0.0/24 is the Local Network Control Block (OSPF, IGMP, mDNS, ...): switches
# flood it and routers never forward it, so no job may be given such an address.
LOCAL_CONTROL_BLOCK = ipaddress.IPv4Network("224.0.0.0/24")


class AddressPoolExhausted(RuntimeError):
    """Every address of a `GroupAddressPool` is held by a job."""


def group_mac(address: str | ipaddress.IPv4Address) -> str:
    """The Ethernet multicast MAC of an IPv4 group: 01:00:5e + its low 23 bits (RFC 1112).

    32 IPv4 groups share one MAC; a pool no wider than a /9 never holds two of them.
    """
    ip = ipaddress.IPv4Address(address)
    if ip not in MULTICAST_RANGE:
        raise ValueError(f"{ip} is not an IPv4 multicast address")
    low = int(ip) & 0x7FFFFF
    return format_mac((0x01005E << 24) | low)


class GroupAddressPool:
    """Allocates one IPv4 multicast group address per job id.

    `network` is the pool, inside 224.0.0.0/4 and outside 224.0.0.0/24. For a pool
    wider than a /31 its first and last addresses (the all-zeros and all-ones host
    parts, e.g. 239.1.0.0 and 239.1.255.255) are not used, as is customary.
    Allocation is lowest-free-first; `AddressPoolExhausted` is raised when every
    usable address is held.
    """

    def __init__(self, network: str = "239.1.0.0/16") -> None:
        try:
            net = ipaddress.IPv4Network(network)
        except ValueError as exc:
            raise ValueError(f"group address pool {network!r}: {exc}") from None
        if not net.subnet_of(MULTICAST_RANGE):
            raise ValueError(f"group address pool {net} is not inside the IPv4 multicast range {MULTICAST_RANGE}")
        if net.overlaps(LOCAL_CONTROL_BLOCK):
            raise ValueError(
                f"group address pool {net} overlaps the local network control block {LOCAL_CONTROL_BLOCK}"
            )
        self.network = net
        n = net.num_addresses
        self._first = 1 if n > 2 else 0
        self._end = n - 1 if n > 2 else n  # exclusive offset bound
        self._by_job: dict[str, int] = {}  # job id -> offset in the network
        self._by_offset: dict[int, str] = {}
        self._free: list[int] = []  # released offsets below _next, a heap
        self._next = self._first  # every offset >= _next is free

    @property
    def size(self) -> int:
        """How many addresses the pool can hand out."""
        return self._end - self._first

    def __len__(self) -> int:
        return len(self._by_job)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._by_job

    def address(self, job_id: str) -> ipaddress.IPv4Address:
        """The job's address, allocated (lowest free first) if it has none yet."""
        off = self._by_job.get(job_id)
        if off is None:
            if self._free:
                off = heapq.heappop(self._free)
            elif self._next < self._end:
                off = self._next
                self._next += 1
            else:
                raise AddressPoolExhausted(
                    f"group address pool {self.network} is exhausted: all {self.size} addresses are held by jobs"
                )
            self._by_job[job_id] = off
            self._by_offset[off] = job_id
        return self.network.network_address + off

    def release(self, job_id: str) -> None:
        """Return the job's address to the pool (no-op if it holds none)."""
        off = self._by_job.pop(job_id, None)
        if off is None:
            return
        del self._by_offset[off]
        heapq.heappush(self._free, off)  # every freed offset is below _next

    def sync(self, job_ids: Iterable[str]) -> dict[str, ipaddress.IPv4Address]:
        """Make the pool hold exactly `job_ids`; returns job id -> address.

        New jobs are given addresses (in sorted id order) *before* the jobs that
        left release theirs, so an address freed by this call is not handed out by
        it: while the switches are reconciled, packets still addressed to a job
        that left never match the entries of a job that arrived.
        """
        wanted = set(job_ids)
        self.hold_exactly(wanted)
        return {j: self.address(j) for j in sorted(wanted)}

    def hold_exactly(self, job_ids: set[str]) -> None:
        """`sync` without its answer: only the jobs that arrive or leave cost a step
        (the planning loop calls it after every plan, with every job)."""
        for new in sorted(job_ids - self._by_job.keys()):
            self.address(new)
        for gone in sorted(self._by_job.keys() - job_ids):
            self.release(gone)

    def job_of(self, address: str | ipaddress.IPv4Address) -> str | None:
        """The job holding `address`, or None."""
        ip = ipaddress.IPv4Address(address)
        if ip not in self.network:
            return None
        return self._by_offset.get(int(ip) - int(self.network.network_address))

    def assignments(self) -> dict[str, ipaddress.IPv4Address]:
        """Job id -> address, for every job holding one."""
        base = self.network.network_address
        return {j: base + off for j, off in sorted(self._by_job.items())}
