"""Which jobs announce their broadcast phases, and which are broadcasting now.

A job's client announces "broadcasting" when its PS starts pushing a model and
"idle" when the push is over (`PUT /jobs/{id}/broadcasting`); from its first
announcement the job is *phased*: its switches police it at
`planner.broadcast_idle_share` of its planned rate while idle, and at its
planned rate or more while broadcasting (`algorithm.phases.phase_rates`; the
planning loop publishes the rates, `Planning.announce`). A job that never
announces keeps its planned rate all the time.

An announcement of "broadcasting" holds for `planner.broadcast_ttl_s`: the
client renews it while its push lasts (every answer carries the current rate,
which changes as other jobs start and stop). One that is not renewed expires,
and the job counts as idle at the next look (every announcement and every plan
looks). A phased job stays phased until it is deleted. Holds one entry per
registered job at most (`forget` drops the others at every look), so no client
can grow it. Knows nothing of plans or switches; the core's lock guards it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass

from controller.algorithm.phases import phase_rates
from controller.core.served import Served


@dataclass(frozen=True)
class PhaseState:
    """The phased jobs, and those of them broadcasting now."""

    phased: frozenset[str]
    broadcasting: frozenset[str]


class Phases:
    """The jobs' announced phases (see the module docstring); every call with the
    core's lock held."""

    def __init__(self, ttl_s: float) -> None:
        if not ttl_s > 0:
            raise ValueError(f"the broadcast announcement's lifetime must be positive, not {ttl_s}")
        self.ttl_s = ttl_s
        self._phased: set[str] = set()
        self._until: dict[str, float] = {}  # broadcasting job -> when its announcement expires

    def announce(self, job_id: str, broadcasting: bool, now: float) -> None:
        """`job_id` (a registered, planned job: the caller checks) starts or renews a
        broadcast, or ends one."""
        self._phased.add(job_id)
        if broadcasting:
            self._until[job_id] = now + self.ttl_s
        else:
            self._until.pop(job_id, None)

    def state(self, now: float, known: Collection[str]) -> PhaseState:
        """The phases at `now`: expired announcements are idle; jobs not in `known`
        (the registered jobs) are forgotten."""
        self.forget(known)
        for job_id in [j for j, until in self._until.items() if until <= now]:
            del self._until[job_id]
        return PhaseState(frozenset(self._phased), frozenset(self._until))

    def forget(self, known: Collection[str]) -> None:
        """Drop every job not in `known`."""
        gone = [j for j in self._phased if j not in known]
        for job_id in gone:
            self._phased.discard(job_id)
            self._until.pop(job_id, None)


def rated(served: Served, state: PhaseState, idle_share: float) -> Served:
    """`served` at the rates of the phases `state` (`algorithm.phases.phase_rates` on its
    planning network), or `served` itself if they are the rates it has."""
    rates = (phase_rates(served.inputs.network, served.inputs.plan, state.phased, state.broadcasting, idle_share)
             if state.phased else {})
    broadcasting = frozenset(state.broadcasting & rates.keys())
    if rates == served.rates and broadcasting == served.broadcasting:
        return served
    return dataclasses.replace(served, rates=rates, broadcasting=broadcasting)
