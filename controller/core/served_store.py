"""The served plan's structures, kept in the store across restarts and takeovers
(issue 25, docs/ha.md).

With `planner.incremental` the served plan depends on its history: admissions
keep the structures earlier plans chose. A restarted controller, or a new leader
of a cluster, that planned every job from scratch could serve another plan and
move jobs. So the planning loop saves every job's delivery after each plan
(`save`), and its first plan after a start or a takeover restores them
(`restore`) and admits only the jobs without a valid stored structure, with
the admission the service uses for registrations (`planner.run_incremental`).

Records (state keys of the store, `Store.state_page` / `put_states`):
- `served/<job id>`: {"ps", "workers", "mode", "tree": [[parent, child], ...],
  "branches": [[emitter, worker], ...]}, nodes by name; one key per job,
  written only when its structure (or the job) changed, deleted when the job
  left the plan. An admission writes one key; a full plan the keys of the jobs
  it moved. Rates are not kept: every plan allocates all rates again, so they
  would be written for every job on every admission; the restored plan's rates
  are allocated again in the same way (`rates.allocate`);
- `served_network`: a digest of the topology the structures were planned on
  (nodes with their budgets, links with their capacities). Another topology at
  restore: a full plan, as without records.

A record is untrusted data (the store is a file, or keys others can write):
`restore` checks its types and size, that every node exists and every tree
pair is a link of the current topology, that the tree is an arborescence from
the job's PS delivering every worker once, that the job still exists with the
same PS and workers; then all restored structures together are checked with the
plan checker (`algorithm.validate.violations`: reachability, link capacities,
table budgets). A record that fails is dropped (logged) and its job admitted
afresh; for a table over budget, the last jobs (in job order) using that
switch are dropped until it fits. Without records, with another topology, or
with nothing valid left: None (the caller plans in full).

The store is read in pages (`PAGE_RECORDS` records at once), and at most
`max_records` records in all (`api.limits.max_jobs`, the most jobs there can be
registered): a store holding far more `served/` keys (garbage, or written by
someone else) costs no more memory or time than one record per job could. What
is held of each record read is a digest (to write only what changed), whatever
its size. Records past the cap are not read: their jobs are admitted afresh
(they may move), and a WARNING says so. Records of jobs that are not registered
are dropped (one INFO line for all) and deleted from the store by the next save.

Only `planner.incremental` restores: full plans of the same jobs on the same
network are the same plan (the seeded planner). The records are written in
both cases, so that they are current when it is turned on.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from controller.algorithm.model import Instance, Job, Plan, Structure, Topology
from controller.algorithm.network import Network
from controller.algorithm.rates import allocate, assemble_plan
from controller.algorithm.structures import make_structure
from controller.algorithm.validate import violations
from controller.store.base import Store

log = logging.getLogger(__name__)

SERVED_PREFIX = "served/"
NETWORK_KEY = "served_network"
RESTORED = "restored"  # the algorithm name of the restored plan (never served: it is admitted into)
PAGE_RECORDS = 64  # records read from the store at once: a record is up to `store.base.MAX_STATE_BYTES`
DEFAULT_MAX_RECORDS = 10000  # records read at most without a config (`api.limits.max_jobs`'s default)


class BadServed(ValueError):
    """A stored structure that cannot be restored (the message says why)."""


def network_digest(topology: Topology) -> str:
    """A digest of `topology`'s nodes (kinds, budgets) and links (capacities)."""
    nodes = [[n.id, n.kind, n.group_capacity, n.entry_capacity] for n in topology.nodes]
    links = [[link.a, link.b, link.capacity] for link in topology.links]
    return hashlib.sha256(json.dumps([nodes, links], sort_keys=True).encode()).hexdigest()


def encode(job: Job, s: Structure, topology: Topology) -> dict[str, Any]:
    """The record of `job` served on `s` (indices of `topology`)."""
    name = topology.name
    return {
        "ps": job.ps,
        "workers": list(job.workers),
        "mode": s.mode,
        "tree": [[name(p), name(c)] for p, c in s.tree],
        "branches": [[name(e), name(w)] for e, w in s.branches],
    }


def _digest_of(value: Any) -> bytes:
    """A digest of a record's value as stored: kept instead of its text, so that what
    is held per record is small whatever the store holds."""
    text = "\0" + value if isinstance(value, str) else json.dumps(value, allow_nan=False, sort_keys=True)
    return hashlib.blake2b(text.encode(errors="surrogatepass"), digest_size=16).digest()


def _pairs(value: Any, what: str, topo: Topology, limit: int) -> list[tuple[int, int]]:
    if not isinstance(value, list):
        raise BadServed(f"{what}: expected a list, got {type(value).__name__}")
    if len(value) > limit:
        raise BadServed(f"{what}: {len(value)} pairs, more than {limit}")
    out = []
    for pair in value:
        if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(n, str) for n in pair):
            raise BadServed(f"{what}: expected pairs of node names, got {pair!r:.80}")
        ends = []
        for n in pair:
            v = topo.index.get(n)
            if v is None:
                raise BadServed(f"{what}: no node {n!r:.80} in the topology")
            ends.append(v)
        out.append((ends[0], ends[1]))
    return out


def decode(value: Any, job: Job, net: Network) -> Structure:
    """The structure of `job` a stored record describes, on `net`; raises BadServed."""
    topo = net.topo
    if not isinstance(value, dict):
        raise BadServed(f"expected an object, got {type(value).__name__}")
    if value.get("ps") != job.ps or value.get("workers") != list(job.workers):
        raise BadServed("the job's PS or workers are not those it was served with")
    workers = {topo.index[w] for w in job.workers}
    ps = topo.index[job.ps]
    tree = _pairs(value.get("tree"), "tree", topo, len(topo.nodes))
    branches = _pairs(value.get("branches"), "branches", topo, len(workers))
    children: dict[int, list[int]] = {}
    parent_of: dict[int, int] = {}
    for p, c in tree:
        if (p, c) not in topo.edge_index:
            raise BadServed(f"tree: no link {topo.name(p)} -> {topo.name(c)}")
        if c in parent_of or c == ps:
            raise BadServed(f"tree: {topo.name(c)} has two parents, or is the PS")
        if p != ps and not topo.is_switch(p):
            raise BadServed(f"tree: host {topo.name(p)} forwards")
        if not topo.is_switch(c) and c not in workers:
            raise BadServed(f"tree: host {topo.name(c)} is no worker of the job")
        parent_of[c] = p
        children.setdefault(p, []).append(c)
    reached, stack = {ps}, [ps]
    while stack:
        for c in children.get(stack.pop(), ()):
            if c not in reached:
                reached.add(c)
                stack.append(c)
    if len(reached) != len(parent_of) + 1:
        raise BadServed("tree: not an arborescence from the PS")
    for e, w in branches:
        if w not in workers or not (e == ps or (e in parent_of and topo.is_switch(e))):
            raise BadServed(f"branches: {topo.name(e)} -> {topo.name(w)} is no copy of the job")
    delivered = sorted([c for c in parent_of if c in workers] + [w for _, w in branches])
    if delivered != sorted(workers):
        raise BadServed("not every worker is delivered exactly once")
    s = make_structure(net, tree, branches)
    if value.get("mode") != s.mode:
        raise BadServed(f"mode {value.get('mode')!r:.40} is not the structure's ({s.mode})")
    return s


def _culprits(topo: Topology, jobs: Sequence[Job], structures: Sequence[Structure], found: list) -> set[str]:
    """The jobs to drop for the `found` violations (see the module docstring); a
    violation about nothing in particular drops every job."""
    out: set[str] = set()
    for v in found:
        if v.job is not None:
            out.add(v.job)
        elif v.edge is not None:
            out.update(j.id for j, s in zip(jobs, structures) if any(e == v.edge for e, _ in s.copies))
        elif v.switch is not None:
            node = topo.nodes[v.switch]
            for cap, used in ((node.group_capacity, "groups"), (node.entry_capacity, "entries")):
                users = [j.id for j, s in zip(jobs, structures) if v.switch in getattr(s, used)]
                if cap is not None and len(users) > cap:
                    out.update(users[cap:])
        else:
            out.update(j.id for j in jobs)
    return out


class ServedStore:
    """Saves and restores the served structures (see the module docstring)."""

    def __init__(self, store: Store, max_records: int = DEFAULT_MAX_RECORDS) -> None:
        self._store = store
        self.max_records = max_records  # records read at most (api.limits.max_jobs)
        self._saved: dict[str, bytes] | None = None  # job id -> its record's digest in the store; None: read it first
        self._network: str | None = None  # the digest in the store
        self._known: dict[str, tuple[Job, Structure]] = {}  # what each saved record was made from
        self._known_topology: Topology | None = None
        self._digests: tuple[Topology, str] | None = None

    def forget(self) -> None:
        """Read the store again before the next write (another instance may have written it)."""
        self._saved = None
        self._network = None
        self._known = {}
        self._known_topology = None

    def _records(self) -> Iterator[tuple[str, Any]]:
        """The stored records (job id, value), read in pages of `PAGE_RECORDS`, at
        most `max_records` of them (see the module docstring); fills `_saved`
        with a digest of each record read. The caller keeps no page."""
        self._saved = {}
        network = self._store.get_state(NETWORK_KEY)
        self._network = network if isinstance(network, str) else None
        self._known, self._known_topology = {}, None
        after: str | None = None
        while len(self._saved) < self.max_records:
            size = min(PAGE_RECORDS, self.max_records - len(self._saved))
            page = self._store.state_page(SERVED_PREFIX, after, size)
            for key, value in page:
                jid = key[len(SERVED_PREFIX):]
                self._saved[jid] = _digest_of(value)
                yield jid, value
            if len(page) < size:
                return
            after = page[-1][0]
        if self._store.state_page(SERVED_PREFIX, after, 1):
            log.warning("more than %d served structures are stored (api.limits.max_jobs): the others are not read, "
                        "their jobs are admitted afresh", self.max_records)

    def _read(self) -> None:
        for _ in self._records():
            pass

    def _digest(self, topology: Topology) -> str:
        if self._digests is None or self._digests[0] is not topology:
            self._digests = (topology, network_digest(topology))
        return self._digests[1]

    # -- after each plan --------------------------------------------------------------------------
    def save(self, plan: Plan, topology: Topology, full: Topology) -> int:
        """Keep the structures of `plan` (indices of `topology`, the planning
        topology; `full`: the topology the digest is of), writing only the
        records that changed; the number of keys written. A failed write raises
        (the store is read again before the next one)."""
        if self._saved is None:
            self._read()
        assert self._saved is not None
        if topology is not self._known_topology:
            self._known, self._known_topology = {}, topology
        writes: dict[str, Any] = {}
        known: dict[str, tuple[Job, Structure]] = {}
        last = self._known
        for jp in plan.jobs:
            jid, s, job = jp.job.id, jp.structure, jp.job
            was = last.get(jid)
            if was is not None and was[0] is job and was[1] is s:  # the same objects as last time: nothing to write
                known[jid] = was
                continue
            if was is None or not (was[1] is s or was[1] == s) or (was[0].ps, was[0].workers) != (job.ps, job.workers):
                value = encode(job, s, topology)
                if self._saved.get(jid) != _digest_of(value):
                    writes[SERVED_PREFIX + jid] = value
            known[jid] = (job, s)
        if len(self._saved) > len(known) or not self._saved.keys() <= known.keys():
            for jid in set(self._saved) - set(known):
                writes[SERVED_PREFIX + jid] = None
        digest = self._digest(full)
        if digest != self._network:
            writes[NETWORK_KEY] = digest
        if writes:
            try:
                self._store.put_states(writes)
            except BaseException:
                self.forget()
                raise
        for key, value in writes.items():
            if key == NETWORK_KEY:
                self._network = digest
            elif value is None:
                self._saved.pop(key[len(SERVED_PREFIX):], None)
            else:
                self._saved[key[len(SERVED_PREFIX):]] = _digest_of(value)
        self._known = known
        return len(writes)

    # -- the first plan after a start or a takeover -----------------------------------------------
    def restore(self, full: Topology, net: Network, jobs: Sequence[Job], objective: str) -> Plan | None:
        """The plan of the `jobs` whose stored structures are valid on `net` (the
        planning network of `full`), with rates allocated again; None when
        nothing is stored, the topology changed or nothing valid is left. If it
        raises, the store is read again before the next save."""
        try:
            return self._restore(full, net, jobs, objective)
        except BaseException:
            self.forget()  # the records were read in part: the next save reads them all (to delete the stale ones)
            raise

    def _restore(self, full: Topology, net: Network, jobs: Sequence[Job], objective: str) -> Plan | None:
        records = self._records()
        first = next(records, None)
        if first is None:
            log.info("no served structures stored: a full plan")
            return None
        if self._network != self._digest(full):
            log.info("the served structures were stored for another network: a full plan")
            self.forget()  # not all read: the next save reads them (to delete the stale ones)
            return None
        by_id = {j.id: j for j in jobs}
        structures: dict[str, Structure] = {}
        unknown: list[str] = []
        for jid, value in itertools.chain((first,), records):
            job = by_id.get(jid)
            if job is None:
                unknown.append(jid)
                continue
            try:
                structures[jid] = decode(value, job, net)
            except BadServed as e:
                log.warning("stored structure of job %s dropped, the job is admitted afresh: %s", jid, e)
        if unknown:
            log.info("%d stored structures dropped: no such job to plan (%s)", len(unknown),
                     ", ".join(repr(j[:80]) for j in unknown[:5]) + (" ..." if len(unknown) > 5 else ""))
        kept = [j for j in jobs if j.id in structures]
        for _ in range(2):
            if not kept:
                return None
            chosen = [structures[j.id] for j in kept]
            plan = assemble_plan(net, tuple(kept), chosen, allocate(net, tuple(kept), chosen, objective), RESTORED,
                                 objective, 0.0)
            found = violations(Instance(net.topo, tuple(kept)), plan)
            if not found:
                log.info("restored the served structures of %d of %d jobs", len(kept), len(jobs))
                return plan
            drop = _culprits(net.topo, kept, chosen, found)
            for v in found:
                log.warning("restored structures: %s", v.text)
            log.warning("stored structures of jobs %s dropped, the jobs are admitted afresh",
                        ", ".join(sorted(drop)[:20]) + (" ..." if len(drop) > 20 else ""))
            kept = [j for j in kept if j.id not in drop]
        log.warning("the restored structures still break the plan's rules: a full plan")
        return None
