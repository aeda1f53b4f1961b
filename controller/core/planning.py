"""The planning loop: when to re-plan (the scheduler), and one re-plan in steps.

When (`due_in`, `start`, `poll`, `wait_for`)
    Changes (`core.changes`) are coalesced: a re-plan starts once no change has
    arrived for `planner.debounce_s`, or `planner.max_delay_s` after the first
    unplanned change, whichever is first; it covers every change made before it
    starts. With `planner.incremental`, a change of jobs only is planned at once.
    The end of a link's hold-down and a due re-optimisation are due times too.
    Two ways to drive it:
    - `start()` runs one plan at once and then a worker thread that waits on the
      core's condition variable and re-plans when due (the controller);
    - without `start()`, nothing happens by itself: `poll()` re-plans if the
      debounce (read from the injectable clock) says it is due, and `replan()`
      re-plans now. Tests drive the loop this way, deterministically.
    A change's caller can wait for "the plan that includes my change":
    `wait_for(target)` waits at most `planner.wait_s` (with the worker running),
    or re-plans inline (without it).

One re-plan (`replan`), in steps
    1. `_begin`: under the lock, what the plan is made from (the network, the jobs
       that can be planned, their group addresses, the served plan) and how it is
       made: a full plan; an admission of the changed jobs (`planner.incremental`,
       only jobs changed); the served plan translated again (only ports or MACs
       were learned); or a re-optimisation (after admissions, when due);
    2. `_make`: the planner runs outside the lock on the topology without the down
       links and within the effective budgets; a re-optimisation is kept within
       the churn budget and adopted only if it gains (`_reoptimise`);
    3. `_install`: the plan becomes the served one (renumbered to the full
       topology), its generation and counters; addresses of deleted and failed
       jobs go back to the pool;
    4. `_persist`: what the wire taught is stored for a restart (`core.remembered`);
    5. `_publish`: every backend gets the `PlanUpdate` (in the planning thread:
       before the requests waiting for the plan are answered) and reports what
       its translation writes;
    6. the changes are covered, and the waiting requests answered;
    7. `_save_structures`: the jobs' structures are
       stored for a restart or a takeover (`core.served_store`: only the records
       that changed; after the answers, as a store write costs a commit: a
       controller killed in between restores the structures of the plan before).
    A host join: when the planning topology is the served one plus hosts (each
    with its link to a known switch; nothing else changed), the served plan is
    carried over (`core.host_join`): no planner call, no job moves, and the
    backends' translation adds the new hosts' unicast routes. Jobs that became
    plannable with them (they waited for a host) are then admitted with
    `planner.incremental`, else planned in full as before. The carried plan keeps
    the due re-optimisation and counts no churn.
    The first plan after a start or a takeover (`restore_next`), with
    `planner.incremental`: the structures the store holds for the jobs are
    restored (`core.served_store`: read as untrusted data, checked against the
    current topology and budgets, invalid ones dropped) and the other jobs
    admitted into them as in step 2; nothing valid stored, or another topology:
    a full plan. So a restart or a new leader moves no job the served plan held.
    With `planner.incremental`, a change of the network that leaves the planning
    topology as it was (switches reporting limits that change no budget, say)
    is planned like a change of jobs: no job moves.
    A planner failure is contained (`_contain`, `core.culprits`): the round is
    planned again without the jobs the served plan does not hold; if that works,
    they are bisected (at most 2 + log2 of their number extra planner calls) for
    the job the planner fails with, which becomes failed (`JobRegistry.fail`:
    never planned again, kept in the store), and the plan without it is
    installed (its address released in step 3). Changed jobs after it that still
    fail are left out and a change is marked: the next round finds the next one.
    A failed plan that is not a changed job's (the planner fails without them
    too, or the down links cut hosts off) leaves the served plan in place; the
    failure is counted and kept in `last_error` (shown by /healthz) until a plan
    succeeds.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from controller import planner
from controller.addressing.hosts import HostAddress
from controller.addressing.ports import PortMap
from controller.algorithm import admission
from controller.algorithm.admission import NotIncremental, same_topology
from controller.algorithm.model import Instance, Job, Plan, Topology
from controller.algorithm.network import Network
from controller.config import Config
from controller.core.changes import Changes
from controller.core.culprits import isolate, suspects
from controller.core.devices import BudgetState, Devices
from controller.core.errors import HostsCutOff
from controller.core.host_join import carried_over, grown_by_hosts
from controller.core.hosts import Hosts
from controller.core.jobs import JobRegistry, planned_as
from controller.core.links import LinkKey, Links
from controller.core.moves import churn, edge_remap, on_full_topology
from controller.core.phases import Phases, PhaseState, rated
from controller.core.remembered import Remembered
from controller.core.served import Served, ServedPlan
from controller.core.served_store import ServedStore
from controller.core.stats import PlanCounters
from controller.core.updates import PlanListener, PlanUpdate, TranslationInputs
from controller.core.wiring import Wiring

log = logging.getLogger(__name__)
_ID = operator.attrgetter("id")

# An admission whose λ is below this share of the last full plan's brings the
# re-optimisation forward to the next pause in job changes (`planner.debounce_s`
# without one) instead of `planner.reoptimise_after_s` later: with tight tables
# admission alone can serve far less than a full plan would (docs/planning-time.md).
ADMISSION_GUARD = 0.9


@dataclass(frozen=True)
class Round:
    """What one re-plan reads under the lock (`Planning._begin`), and how it plans."""

    target: int  # the change count it covers
    topology: Topology  # the full topology
    addresses: Mapping[str, HostAddress]
    ports: PortMap
    seen: frozenset[tuple[int, int]]  # link ends of `ports` the wire confirmed
    host_macs: Mapping[str, str]
    down: frozenset[LinkKey]  # down or held down: out of the plan
    budgets: BudgetState
    discovered: object  # the discovered network as stored (None with a declared topology)
    jobs: tuple[Job, ...]  # the jobs to plan (not waiting for hosts, not failed)
    groups: Mapping[str, str | None]  # every job's group address
    previous: Served | None
    incremental: bool  # only jobs changed: admit them (planner.incremental)
    retranslate: bool  # only ports or MACs changed: the served plan, translated again
    reoptimising: bool  # nothing changed, but a re-optimisation is due
    restore: bool = False  # the first plan after a start or a takeover: restore the stored structures
    network_changed: bool = False  # a change of the network is among the changes it covers


class Planning:
    """The planning loop over the parts of the core (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        changes: Changes,
        served: ServedPlan,
        wiring: Wiring,
        devices: Devices,
        links: Links,
        hosts: Hosts,
        jobs: JobRegistry,
        remembered: Remembered,
        served_store: ServedStore | None = None,
    ) -> None:
        self.config = config
        self._settings = config.planner
        self._changes = changes
        self._lock = changes.lock
        self._cond = changes.cond
        self._clock = changes.clock
        self._served = served
        self._wiring = wiring
        self._devices = devices
        self._links = links
        self._hosts = hosts
        self._jobs = jobs
        self._remembered = remembered
        self._served_store = served_store
        self._restore = served_store is not None  # the next plan restores the stored structures
        self.on_plan: list[PlanListener] = []  # the backends: called with every new plan
        self.phases = Phases(config.planner.broadcast_ttl_s)  # the jobs' announced broadcasts
        self._phase_seq = 0  # announcements made
        self._phase_covered = 0  # announcements the served rates cover
        self.counters = PlanCounters()
        self._plan_lock = threading.Lock()  # one re-plan at a time
        self._reoptimise_at: float | None = None  # a full plan is due then (after incremental ones)
        self._full_lam = 0.0  # λ of the last full plan computed (adopted or not): the admissions' yardstick
        self._thread: threading.Thread | None = None
        self._stopping = False
        # the planning topology's edges in the full one (`edge_remap`), for the last pair of topologies
        self._remap: tuple[Topology, Topology, list[int] | None] | None = None
        # `effective_jobs`'s PS capacities and capped jobs, per topology
        self._ps_caps: tuple[Topology, dict[str, float | None], dict[str, tuple[Job, Job]]] | None = None

    def restore_next(self) -> None:
        """The next plan restores the structures the store holds (a takeover: another
        instance wrote them) instead of planning every job afresh."""
        if self._served_store is not None:
            with self._lock:
                self._served_store.forget()
                self._restore = True

    # -- when -----------------------------------------------------------------------------------
    def due_in(self, now: float) -> float | None:
        """Seconds until a re-plan is due (<= 0: due) or, sooner, until a hold-down
        ends (the caller should look again then); None if nothing is pending.
        Releases the links whose hold-down has ended (lock held)."""
        self._links.release_holds(now)
        hold_ends = self._links.hold_ends()
        ch = self._changes
        if not ch.pending:
            wake = [t for t in (hold_ends, self._reoptimise_at) if t is not None]
            return None if not wake else min(wake) - now
        if self._settings.incremental and not ch.network_changed and self._served.current is not None:
            return 0.0  # jobs only: admitted at once, no debounce
        deadline = ch.last + self._settings.debounce_s
        if ch.first is not None:
            deadline = min(deadline, ch.first + self._settings.max_delay_s)
        if hold_ends is not None:
            deadline = min(deadline, hold_ends)
        return deadline - now

    def replan_due(self) -> bool:
        with self._lock:
            delay = self.due_in(self._clock())
        return delay is not None and delay <= 0

    @property
    def pending(self) -> bool:
        """A change is not planned yet, or a link is held down (it rejoins in a
        re-plan of its own, due without any other event)."""
        with self._lock:
            return self._changes.pending or self._links.hold_ends() is not None

    def poll(self) -> PlanUpdate | None:
        """Re-plan if the debounce says it is due (for callers without `start()`)."""
        return self.replan() if self.replan_due() else None

    def wait_for(self, target: int, timeout: float | None = None) -> bool:
        """Wait until a plan covers change number `target`; True if one does.

        With the worker running this waits at most `timeout` (default
        `planner.wait_s`); without it, it re-plans now, in the caller's thread.
        """
        timeout = self._settings.wait_s if timeout is None else timeout
        if not self.running:
            with self._lock:
                covered = self._changes.covered >= target
            if not covered:
                self.replan()
        with self._cond:
            return self._cond.wait_for(lambda: self._changes.covered >= target or self._stopping, timeout) and (
                self._changes.covered >= target
            )

    def start(self) -> None:
        """Plan once now, then re-plan in a worker thread as changes arrive."""
        with self._lock:
            if self._thread is not None:
                return
            self._stopping = False
        self.replan()
        thread = threading.Thread(target=self._run, name="replan", daemon=True)
        with self._lock:
            self._thread = thread
        thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker thread (a plan in progress is finished first)."""
        with self._cond:
            thread, self._thread = self._thread, None
            self._stopping = True
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    delay = self.due_in(self._clock())
                    if delay is not None and delay <= 0:
                        break
                    self._cond.wait(delay)
                if self._stopping:
                    return
            try:
                self.replan()
            except Exception as e:  # noqa: BLE001 - keep the worker alive
                log.exception("re-plan failed")
                with self._cond:
                    self.counters.failures += 1
                    self.counters.last_error = f"{type(e).__name__}: {e}"
                self._changes.cover(self._changes.count)

    # -- one re-plan -----------------------------------------------------------------------------
    def replan(self) -> PlanUpdate | None:
        """Plan every job now and install the result; None if planning failed (the
        served plan stays; the error is logged and kept in `last_error`) or a
        re-optimisation gained too little to be adopted."""
        with self._plan_lock:
            r = self._begin()
            try:
                made = self._make(r)
            except Exception as e:  # noqa: BLE001 - a failed plan must not stop the controller
                contained = None if isinstance(e, HostsCutOff) else self._contain(r, e)
                if contained is None:
                    self._failed(r, e)
                    return None
                r, made = contained
            if made is None:
                return None
            self._install(r, *made)
            update = self._rate_served()  # at the rates of the jobs' phases now
            self._persist(r)
            self._publish(update)
            self._changes.cover(r.target)
            self._save_structures(r, made[0], made[1])  # after the answers: a store write costs a commit
        return update

    def _begin(self) -> Round:
        """Step 1, under the lock: what the plan is made from, and how it is made."""
        with self._lock:
            now = self._clock()
            self._links.release_holds(now)
            ch = self._changes
            target = ch.count
            pending = ch.covered < target
            previous = self._served.current
            s = self._settings
            network_changed = pending and ch.network_changed
            incremental = s.incremental and pending and not ch.network_changed and previous is not None
            reoptimising = (not pending and self._reoptimise_at is not None and now >= self._reoptimise_at
                            and previous is not None)
            retranslate = pending and not ch.network_changed and not ch.jobs_changed and previous is not None
            ch.network_changed = ch.jobs_changed = False
            ch.first = None
            restore, self._restore = self._restore and s.incremental, False
            ports, seen = self._wiring.ports_snapshot()
            return Round(
                target=target,
                topology=self._wiring.topology,
                addresses=self._wiring.addresses,
                ports=ports,
                seen=seen,
                host_macs=self._hosts.macs(),
                down=self._links.out_of_plan(),
                budgets=self._devices.budget_state(),
                discovered=self._wiring.discovered_json(),
                jobs=self._jobs.plannable(),  # a job waits (unplanned) while one of its hosts is not in the network
                groups=self._jobs.addresses(),
                previous=previous,
                incremental=incremental,
                retranslate=retranslate,
                reoptimising=reoptimising,
                restore=restore,
                network_changed=network_changed,
            )

    def _make(self, r: Round) -> tuple[Plan, Network, bool, bool] | None:
        """Step 2, outside the lock: (the plan on the planning network, that network,
        whether the churn budget held moves back, whether it is the served plan
        carried over to joined hosts); None when a re-optimisation is not adopted. Raises what the planner raises, or HostsCutOff."""
        s = self._settings
        topo, net = self._links.planning_topology(r.down, r.budgets, r.ports, r.topology)
        if self._ps_caps is None or self._ps_caps[0] is not topo:
            self._ps_caps = (topo, {}, {})
        # what the PS's link carries
        r = dataclasses.replace(r, jobs=effective_jobs(r.jobs, topo, self._ps_caps[1], self._ps_caps[2]))
        previous = r.previous.inputs if r.previous is not None else None
        plan = self._restored(r, topo, net) if r.restore else None
        if r.restore:
            previous = None  # not the plan this instance served before (a leader before a takeover)
        if plan is None and r.retranslate and previous is not None:  # only ports or MACs were learned
            if same_topology(topo, previous.network.topo) and [jp.job for jp in previous.plan.jobs] == list(r.jobs):
                plan = previous.plan
        joined = False
        if plan is None and previous is not None and not r.reoptimising:
            plan = self._host_join(r, topo, net, previous)
            joined = plan is not None and plan.algorithm != "incremental"
        unchanged = (s.incremental and r.network_changed and not r.reoptimising and previous is not None
                     and same_topology(topo, previous.network.topo))
        if unchanged:  # a network change that leaves the planning topology as it was (e.g. limits reported)
            log.info("the network changed, but not the topology planned on: the served structures are kept")
        if plan is None and (r.incremental or unchanged) and previous is not None:
            try:
                plan = planner.run_incremental(Instance(topo, r.jobs), previous.plan, previous.network.topo, s.objective,
                                               net=net)
            except NotIncremental as e:
                log.info("jobs changed, but a full plan is needed: %s", e)
        if plan is None:
            # a re-optimisation starts from the served plan's columns (same topology only)
            warm = ((previous.plan, previous.network.topo)
                    if r.reoptimising and s.reoptimise_warm_start and previous is not None else None)
            plan = planner.run(Instance(topo, r.jobs), s.algorithm, s.objective, s.seed, warm_from=warm)
            with self._lock:
                self._full_lam = plan.lam
        if not r.reoptimising:
            return plan, net, False, joined
        return self._reoptimise(r, topo, net, plan)

    def _restored(self, r: Round, topo: Topology, net: Network) -> Plan | None:
        """The first plan after a start or a takeover: the stored structures that are
        still valid (`core.served_store`), the other jobs admitted into them; None:
        plan in full (nothing valid stored, another network, or the admission fails)."""
        assert self._served_store is not None
        try:
            restored = self._served_store.restore(r.topology, net, r.jobs, self._settings.objective)
        except Exception:  # noqa: BLE001 - the store or a record: plan in full, as without records
            log.exception("cannot restore the served structures: a full plan")
            return None
        if restored is None:
            return None
        try:
            return planner.run_incremental(Instance(topo, r.jobs), restored, topo, self._settings.objective, net=net)
        except Exception as e:  # noqa: BLE001 - NotIncremental, or restored data the admission cannot take
            log.warning("the restored structures cannot be kept (%s: %s): a full plan", type(e).__name__, e)
            return None

    def _host_join(self, r: Round, topo: Topology, net: Network, previous: TranslationInputs) -> Plan | None:
        """The served plan carried onto `topo` if only hosts joined (see the module
        docstring), with the jobs that became plannable admitted (`planner.incremental`);
        None: plan as for any other change."""
        joined = grown_by_hosts(previous.network.topo, topo)
        if joined is None:
            return None
        kept = carried_over(previous.plan, previous.network.topo, net)
        if kept is None:
            log.info("hosts %s joined, but the unicast routes of planned jobs changed: a full plan", ", ".join(joined))
            return None
        if [jp.job for jp in kept.jobs] == list(r.jobs):
            log.info("hosts %s joined: the served plan kept, their routes added", ", ".join(joined))
        elif not self._settings.incremental:
            return None
        else:
            try:
                kept = planner.run_incremental(Instance(topo, r.jobs), kept, topo, self._settings.objective)
            except NotIncremental as e:
                log.info("hosts %s joined and jobs changed, but a full plan is needed: %s", ", ".join(joined), e)
                return None
        with self._lock:
            self.counters.host_joins += len(joined)
        return kept

    def _reoptimise(self, r: Round, topo: Topology, net: Network, plan: Plan) -> tuple[Plan, Network, bool, bool] | None:
        """A re-optimisation: the full `plan`, kept within the churn budget
        (`planner.reoptimise_max_churn` and `_share`: `admission.churn_budget`), is adopted only if it gains more than
        `planner.reoptimise_min_gain` over the served plan; else None (the served
        plan stays, and gets the full plan's LP bound, that of its job set)."""
        s = self._settings
        assert r.previous is not None
        served = r.previous.inputs.plan
        gain = s.reoptimise_min_gain
        budget = admission.churn_budget(len(r.jobs), s.reoptimise_max_churn, s.reoptimise_max_churn_share)
        decided = admission.reoptimisation(Instance(topo, r.jobs), served, r.previous.inputs.network.topo, plan,
                                           s.objective, budget, gain)
        plan, bounded, better = decided.plan, decided.bounded, decided.adopted
        with self._lock:
            self._reoptimise_at = None
            self.counters.reoptimisations["adopted" if better else "kept"] += 1
            if not better and plan.lp_bound is not None and self._served.current is not None:
                self._served.current = self._served.current.with_lp_bound(plan.lp_bound)
        if not better:
            log.info("re-optimisation: the full plan (λ %.4g, %.4g bit/s) gains less than %.0f%% over "
                     "the served one (λ %.4g, %.4g bit/s): kept the served plan",
                     plan.lam, plan.throughput, 100 * gain, served.lam, served.throughput)
            return None
        log.info("re-optimisation: λ %.4g -> %.4g, throughput %.4g -> %.4g bit/s: adopted",
                 served.lam, plan.lam, served.throughput, plan.throughput)
        return plan, net, bounded, False

    def _contain(self, r: Round, e: Exception) -> tuple[Round, tuple[Plan, Network, bool, bool] | None] | None:
        """The planner failed on round `r`: find the culprit job(s) among the jobs the
        served plan does not hold (`core.culprits`: at most 2 + log2(suspects) extra
        planner calls), fail them with the planner's error, and give the round
        without them and its plan; None if the failure is not theirs."""
        served = r.previous.inputs.plan if r.previous is not None else None
        planned = {jp.job.id: jp.job for jp in served.jobs} if served is not None else None
        suspected = suspects(r.jobs, planned, planned_as)
        found = isolate(r.jobs, suspected, lambda jobs: self._make(dataclasses.replace(r, jobs=jobs)), e)
        if found is None:
            return None
        for job_id, reason in found.culprits.items():
            log.warning("job %s failed: the planner fails with it (%s); planned without it", job_id, reason)
        with self._cond:
            self.counters.failed_jobs += len(found.culprits)
            self._jobs.fail(found.culprits)
            if found.left_out:  # another culprit among them: the next round looks for it
                log.warning("jobs %s left for the next round", ", ".join(j.id for j in found.left_out))
                self._changes.mark(kind="jobs")
        return dataclasses.replace(r, jobs=found.jobs), found.made

    def _failed(self, r: Round, e: Exception) -> None:
        if isinstance(e, HostsCutOff):  # an expected state of the network, not a bug
            log.warning("re-plan of %d jobs not possible: %s", len(r.jobs), e)
        else:
            log.exception("re-plan of %d jobs failed", len(r.jobs))
        with self._cond:
            self.counters.failures += 1
            self.counters.last_error = f"{type(e).__name__}: {e}"
            self._changes.network_changed = True  # the next plan is a full one
        self._changes.cover(r.target)

    def _install(self, r: Round, plan: Plan, net: Network, bounded: bool, joined: bool = False) -> None:
        """Step 3: `plan` (made on `net`) becomes the served plan (published at the
        phases' rates, `_rate_served`)."""
        s = self._settings
        planned_on_net = plan
        if net.topo is not r.topology:
            cached = self._remap
            if cached is None or cached[0] is not net.topo or cached[1] is not r.topology:
                cached = self._remap = (net.topo, r.topology, edge_remap(net.topo, r.topology))
            plan = on_full_topology(plan, cached[2])
        previous = r.previous.inputs if r.previous is not None else None
        churned = churn(previous, net, planned_on_net)
        inputs = TranslationInputs(net, planned_on_net, r.ports, r.addresses, r.groups, r.host_macs)
        c = self.counters
        with self._cond:
            last = self._served.current
            generation = (last.generation if last is not None else 0) + 1
            # wall clock: shown to people (GET /plan computed_at); until the backends
            # report (`_publish`), each switch shows what it held under the last plan
            self._served.current = Served(generation, plan, r.topology, inputs, time.time(), churned,
                                          switch_entries=last.switch_entries if last is not None else {})
            # addresses of jobs deleted or failed before this plan go back to the pool now
            self._jobs.release_addresses(map(_ID, r.jobs))
            c.replans += 1
            c.plan_seconds_total += plan.runtime_s
            c.last_error = None
            c.churn_jobs_total += churned
            if plan.algorithm == "incremental":
                c.incremental_plans += 1
                self._reoptimise_at = self._clock() + s.reoptimise_after_s
                if plan.lam < ADMISSION_GUARD * self._full_lam:
                    # a poor admission (tight tables): re-optimise once registrations pause for
                    # the debounce time (each admission pushes it back), not in the middle of a burst
                    self._reoptimise_at = self._clock() + s.debounce_s
            elif bounded:  # the churn budget held some moves back: try again later
                self._reoptimise_at = self._clock() + s.reoptimise_after_s
            elif joined:  # the served plan, carried over to new hosts: a due re-optimisation stays due
                pass
            else:
                self._reoptimise_at = None

    # -- phase-aware rates ---------------------------------------------------------------------
    def announce(self, job_id: str, broadcasting: bool) -> None:
        """A planned job's client starts, renews or ends a broadcast (`core.phases`); if
        that changes the rates, the served plan is published again at the new ones
        before this returns (`planner.phase_rates` off: nothing happens).
        Announcements coalesce: one publish covers every announcement made before
        it, so concurrent ones cost one publish, not one each."""
        if not self._settings.phase_rates:
            return
        with self._lock:
            self.phases.announce(job_id, broadcasting, self._clock())
            self._phase_seq += 1
            mine = self._phase_seq
        with self._plan_lock:
            with self._lock:
                before = self._served.current
                if before is None or self._phase_covered >= mine:
                    return  # no plan yet, or a publish since this announcement covered it
            update = self._rate_served()
            with self._lock:
                after = self._served.current
            if after is not before:
                self._publish(update, rates_only=True)

    def _rate_served(self) -> PlanUpdate:
        """The served plan at the rates of the jobs' phases now (`core.phases.rated`,
        outside the lock), made the served record if they changed; the update the
        backends translate. With the plan lock held."""
        with self._lock:
            served = self._served.current
            assert served is not None
            state = (self.phases.state(self._clock(), served.planned.keys())
                     if self._settings.phase_rates else PhaseState(frozenset(), frozenset()))
            covered = self._phase_seq
        new = rated(served, state, self._settings.broadcast_idle_share)
        with self._lock:
            self._phase_covered = max(self._phase_covered, covered)
            if new is not served:
                self._served.current = new
                self.counters.rate_updates += 1
        return new.update()

    def _persist(self, r: Round) -> None:
        """Step 4: keep what the wire taught for a restart (only what changed)."""
        try:
            if r.discovered is not None:
                self._remembered.save_discovered(r.discovered)
            else:
                self._remembered.save_wiring(r.ports, r.seen, r.host_macs, r.topology)
        except Exception:  # noqa: BLE001 - the plan stands; a restart would learn again
            log.exception("cannot store the learned ports and MACs")

    def _save_structures(self, r: Round, plan: Plan, net: Network) -> None:
        """Step 7: keep the jobs' structures (`plan`, made on `net`) for a restart or
        a takeover (`core.served_store`: only the records that changed), once the
        waiting requests were answered. Also without `planner.incremental`, which
        restores nothing, so that the records are current if it is turned on."""
        if self._served_store is None:
            return
        try:
            self._served_store.save(plan, net.topo, r.topology)
        except Exception:  # noqa: BLE001 - the plan stands; a restart would plan in full
            log.exception("cannot store the served structures")

    def _publish(self, update: PlanUpdate, rates_only: bool = False) -> None:
        """Step 5: every backend translates the plan (before the requests waiting for
        it are answered) and reports what it writes; a backend that fails is logged
        and keeps its previous desired state, the others go on. `rates_only`: the
        served plan at new phase rates (`announce`): its writes are counted in the
        total, not as the plan's own."""
        written: dict[str, int] = {}
        entries = {}
        for listener in list(self.on_plan):
            try:
                report = listener(update)
            except Exception as e:  # noqa: BLE001 - one bad backend must not stop the others
                log.exception("backend %r could not take plan %d", listener, update.generation)
                with self._cond:
                    self.counters.last_error = f"translation of plan {update.generation} failed: {type(e).__name__}: {e}"
                continue
            if report is not None:
                written[report.backend] = written.get(report.backend, 0) + report.entries_written
                entries.update(report.switches)
        with self._cond:
            served = self._served.current
            if served is not None and served.generation == update.generation:
                if rates_only:
                    self._served.current = dataclasses.replace(served, switch_entries=entries)
                else:
                    self._served.current = dataclasses.replace(served, written=written, switch_entries=entries)
            self.counters.entries_written_total += sum(written.values())


# -- helpers ------------------------------------------------------------------------------------


def effective_jobs(jobs: tuple[Job, ...], topo: Topology, caps: dict[str, float | None] | None = None,
                   capped: dict[str, tuple[Job, Job]] | None = None) -> tuple[Job, ...]:
    """`jobs` with each demand capped to what its PS's access link can carry (the
    largest capacity of a link of the PS in `topo`): a registration asking for more
    than its host can send gets no more of the fabric than one asking for exactly
    that, whatever its numbers (issue 23). A job whose PS has no link is left as it is.
    `caps`: each PS's capacity in `topo` found so far (filled in; the caller keeps
    it for the same `topo`, so that an admission does not look up every job's links).
    `capped`: job id -> (the job, its capped copy) from the last call (replaced by
    this call's): a job capped again gets the same copy, so that the admission
    finds the job it planned before by identity (`admission.incremental`)."""
    caps = {} if caps is None else caps
    last = dict(capped) if capped is not None else {}
    if capped is not None:
        capped.clear()
    out = []
    for job in jobs:
        if job.ps in caps:
            cap = caps[job.ps]
        else:
            v = topo.index.get(job.ps)
            found = [topo.edges[topo.edge_index[(v, u)]].capacity for u in topo.neighbors[v]] if v is not None else []
            cap = caps[job.ps] = max(found, default=None)
        if cap is not None and cap > 0 and job.demand > cap:
            was = last.get(job.id)
            copy = was[1] if was is not None and was[0] is job else dataclasses.replace(job, demand=cap)
            if capped is not None:
                capped[job.id] = (job, copy)
            job = copy
        out.append(job)
    return tuple(out)
