"""Rates that follow which jobs are broadcasting now (phase-aware rates).

A training job broadcasts its model for part of each iteration only; the rest of
the time (compute, gradient upload) its planned share of the links is idle. A
job that announces its phases ("phased") is policed, while idle, at
`idle_share` of its planned rate, and while broadcasting at its planned rate or
more: `phase_rates` hands the links' capacity that the idle phased jobs leave to
the broadcasting ones, max-min fair in proportion to their demands (the plan's
own `rates.progressive_fill`, starting from their planned rates), never above a
job's demand.

Every link stays within its capacity whatever the jobs send: on each edge the
planned rates of the jobs that announce nothing, the idle share of the idle
phased jobs and the rates of the broadcasting ones add up to at most the
capacity (the planned rates alone did; this only moves the idle phased jobs'
shares to the broadcasting ones). So a job that never announces, or announces
"broadcasting" all the time, gets at least its planned rate and cannot take
what a planned job is guaranteed: every broadcasting job starts from its
planned rate, and only capacity left over is shared.

Pure: the plan (on its planning network) and the sets in, rates out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

import numpy as np

from controller.algorithm.model import Plan
from controller.algorithm.network import Network
from controller.algorithm.rates import scaled_within, copy_matrix, progressive_fill


def phase_rates(net: Network, plan: Plan, phased: Collection[str], broadcasting: Collection[str],
                idle_share: float) -> dict[str, float]:
    """The rate of every phased job of `plan` (`phased`: job ids; others and jobs
    at rate 0 are left out: they keep their planned rate): a job in
    `broadcasting` at its planned rate or more (the idle phased jobs' shares
    filled max-min fairly, at most its demand), any other at `idle_share` ×
    its planned rate. `plan` is on `net` (its structures index `net`'s edges)."""
    if not 0 <= idle_share <= 1:
        raise ValueError(f"idle_share must be within [0, 1], not {idle_share}")
    jobs = plan.jobs
    is_phased = np.array([jp.job.id in phased and jp.rate > 0 for jp in jobs], dtype=bool)
    if not is_phased.any():
        return {}
    on = np.array([jp.job.id in broadcasting for jp in jobs], dtype=bool) & is_phased
    planned = np.array([jp.rate for jp in jobs], dtype=float)
    A = copy_matrix(net, [jp.structure for jp in jobs])
    # what stays as it is: the jobs that announce nothing at their planned rates,
    # the idle phased ones at their idle share
    fixed = np.where(is_phased, np.where(on, 0.0, idle_share * planned), planned)
    rates = np.where(on, planned, fixed)
    if on.any():
        grow = np.flatnonzero(on)
        A_on = A[:, grow]
        left = np.maximum(net.capacity - A @ fixed, 0.0)
        demand = np.array([jobs[i].job.demand for i in grow], dtype=float)
        start = np.minimum(planned[grow], demand)
        filled = progressive_fill(A_on, np.maximum(demand, start), left, start)
        # float rounding may put the growth over what the starting rates leave: scaled within it
        rates[grow] = start + scaled_within(A_on, np.maximum(filled - start, 0.0), np.maximum(left - A_on @ start, 0.0))
    return {jobs[i].job.id: float(rates[i]) for i in np.flatnonzero(is_phased)}


def applied(plan: Plan, rates: Mapping[str, float]) -> Plan:
    """`plan` with the rates of the jobs in `rates` replaced (the others as planned)."""
    if not rates:
        return plan
    return dataclasses.replace(plan, jobs=tuple(
        dataclasses.replace(jp, rate=rates[jp.job.id]) if jp.job.id in rates else jp for jp in plan.jobs))
