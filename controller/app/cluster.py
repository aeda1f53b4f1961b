"""One controller instance of several sharing an etcd store (docs/ha.md).

`Cluster` joins the election to the process: on winning it fences the store
(every later write compares the key's create revision with the term), reloads
the jobs and state from the store, makes every southbound take mastership of its
switches with the term (OpenFlow role MASTER with generation id = term,
P4Runtime election id = term) and starts planning; on losing it stops planning
and hands the switches back (role SLAVE). While a follower it reloads the jobs
from the store whenever etcd's revision moved, so that its REST reads are fresh.
A follower redirects a write only to a leader URL that a live member advertises
(`leader_url`; the members records of `store.election`).

Term and switch fencing are what make a deposed leader harmless: a leader that
was frozen past its lease (SIGSTOP) and resumes still believes it leads until
its next keep-alive; its writes to the store fail (`store.etcd.Fenced`) and its
writes to switches are refused by the switches, which have a newer master.
"""

from __future__ import annotations

import logging
import threading
import time

from controller.southbound.backend import Mastership
from controller.store.election import Election, instance_id
from controller.store.etcd import StoreUnavailable

log = logging.getLogger("controller.ha")


class Cluster:
    """An instance of the controller in a cluster sharing an etcd store (see the
    module docstring). `southbounds` are objects with `take_mastership(term)` and
    `release_mastership(term)` (the OpenFlow app, the P4Runtime starter)."""

    def __init__(self, service, store, config, url: str | None, *, instance: str | None = None) -> None:
        self.service = service
        self.store = store
        etcd = config.store.etcd
        self.instance = instance or instance_id()
        self.url = etcd.advertise_url or url
        self.key = etcd.prefix + "leader"
        self.southbounds: list[Mastership] = []
        self.election = Election(
            store.client, self.key, self.instance, self.url, etcd.lease_ttl_s,
            on_elected=self._elected, on_deposed=self._deposed, members=etcd.prefix + "members/",
        )
        self._follow_stop = threading.Event()
        self._follower: threading.Thread | None = None
        self._seen_revision: int | None = None
        self._role_lock = threading.Lock()  # a follower's reload never overlaps a takeover
        self.takeovers: list[dict] = []  # per term won: when, and how long each step took

    # -- what the API and the metrics read -------------------------------------------------

    @property
    def leading(self) -> bool:
        return self.election.leading

    def status(self) -> dict:
        out = self.election.status()
        out["backend"] = "etcd"
        out["lease_ttl_s"] = self.election.ttl
        out["last_takeover"] = self.takeovers[-1] if self.takeovers else None
        return out

    def may_write(self, term: int) -> bool:
        """Whether a southbound may write to switches now as the leader of `term`."""
        return self.election.lease_valid(term)

    def leader_term(self) -> int | None:
        """The term of the leader this instance knows of (None: none known)."""
        leader = self.election.leader
        return leader.term if leader is not None else None

    def leader_url(self) -> str | None:
        """Where a follower sends a write: the leader's URL, if a live member
        advertises it (None otherwise: no redirect anywhere the store merely names)."""
        leader = self.election.leader
        if leader is None or leader.instance == self.instance:
            return None
        if not self.election.is_member(leader.instance, leader.url):
            log.warning("the leader key names %s at %s, which no live member advertises: no redirect",
                        leader.instance, leader.url)
            return None
        return leader.url

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> Cluster:
        self._follower = threading.Thread(target=self._follow, name="store-follower", daemon=True)
        self._follower.start()
        self.election.start()
        return self

    def stop(self) -> None:
        self._follow_stop.set()
        self.election.stop(resign=True)
        if self._follower is not None:
            self._follower.join(5)

    # -- roles ------------------------------------------------------------------------------

    def _elected(self, term: int) -> None:
        elected_at = time.time()
        t0 = time.monotonic()
        with self._role_lock:
            self.store.fence(self.key, term)
            self.service.reload_from_store(leading=True)
        t1 = time.monotonic()
        mastered = []
        for sb in self.southbounds:
            try:
                got = sb.take_mastership(term)
            except Exception:  # noqa: BLE001 - the others, and planning, go on
                log.exception("taking mastership failed (term %d)", term)
                continue
            if got is not None:
                mastered.extend(got)
        t2 = time.monotonic()
        mastered_at = time.time()
        self.service.start()  # plans now; the plan goes to the switches we are master of
        t3 = time.monotonic()
        record = {"term": term, "elected_at": elected_at, "mastered_at": mastered_at,
                  "switches_mastered": len(mastered), "reload_s": round(t1 - t0, 4),
                  "mastership_s": round(t2 - t1, 4), "first_plan_s": round(t3 - t2, 4)}
        self.takeovers.append(record)
        log.info("leading, term %d: store reloaded in %.3f s, switches taken in %.3f s, planned in %.3f s",
                 term, t1 - t0, t2 - t1, t3 - t2)

    def _deposed(self, term: int) -> None:
        log.warning("no longer the leader (term %d): planning stops, switches are handed back", term)
        self.service.stop()
        for sb in self.southbounds:
            try:
                sb.release_mastership(term)
            except Exception:  # noqa: BLE001
                log.exception("releasing mastership failed")

    def _follow(self) -> None:
        """A follower reloads the jobs when etcd's revision moved (poll, 0.5 s)."""
        while not self._follow_stop.wait(0.5):
            try:
                with self._role_lock:
                    if self.leading:
                        self._seen_revision = None
                        continue
                    revision = self.store.revision()
                    if revision != self._seen_revision:
                        self.service.reload_from_store(leading=False)
                        self._seen_revision = revision
            except StoreUnavailable as e:
                log.warning("following the store: %s", e)
            except Exception:  # noqa: BLE001
                log.exception("following the store failed")
