"""Per-switch ids of jobs, kept across plans: OpenFlow group and meter ids, P4
multicast group and replica ids.

Both backends allocate their ids with `IdAllocation`, so a job keeps its ids on a
switch while it stays there, and an id one plan releases is not handed to
another job before the next plan (make-before-break). The groups of fast
failover's backups (`algorithm.backups`) are owned by `ff_owner` and
`detour_owner` in both backends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class IdAllocation:
    """Per-switch ids of jobs (group ids or meter ids), kept across plans.

    `by_switch[switch][job] = id`, ids in `first` .. `limit`. `update(wanted)`
    keeps the id of every job that stays on a switch (if it is in that range),
    drops the others, and gives each new job (in job id order) the lowest id from
    `first` that neither a kept job nor a job of the previous allocation holds on
    that switch: an id released now is reusable from the next update on, never in
    the same one.
    """

    limit: int
    by_switch: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    first: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.limit:
            raise ValueError(f"id range {self.first}..{self.limit} is empty or starts below 1")

    def owns(self, i: int) -> bool:
        """True if `i` is in this allocation's range (the controller's ids)."""
        return self.first <= i <= self.limit

    def get(self, switch: str, job: str) -> int:
        return self.by_switch[switch][job]

    def update(self, wanted: Mapping[str, Iterable[str]]) -> IdAllocation:
        out: dict[str, Mapping[str, int]] = {}
        for sw in sorted(wanted):
            want = set(wanted[sw])
            if not want:
                continue
            old = self.by_switch.get(sw, {})
            if old.keys() == want and self.first <= min(old.values()) and max(old.values()) <= self.limit:
                out[sw] = old  # the same jobs, each keeping its id: as below, without the work
                continue
            jobs = sorted(want)
            ids = {j: old[j] for j in jobs if j in old and self.owns(old[j])}
            taken = set(old.values())
            nxt = self.first
            for j in jobs:
                if j in ids:
                    continue
                while nxt in taken:
                    nxt += 1
                if nxt > self.limit:
                    raise ValueError(f"switch {sw}: no free id in {self.first}..{self.limit}")
                ids[j] = nxt
                taken.add(nxt)
            out[sw] = dict(sorted(ids.items()))
        return IdAllocation(self.limit, out, self.first)


def ff_owner(job_id: str, primary: str) -> str:
    """The id owner of the group that protects a job's tree edge toward `primary`
    (OpenFlow: the fast-failover group; P4: the backup multicast group)."""
    return f"{job_id}/ff/{primary}"


def detour_owner(job_id: str, upstream: str) -> str:
    """The id owner of the detour's replication group of a job's stream from `upstream`."""
    return f"{job_id}/detour/{upstream}"
