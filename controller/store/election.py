"""Several controller instances, one leader (docs/ha.md).

`Election` campaigns for the key `<prefix>leader` in etcd: a transaction that
creates the key only if it is absent (its create revision is 0), attached to a
lease of `lease_ttl_s` seconds that the winner keeps alive (every third of the
TTL). The key's create revision is the leader's *term*: etcd raises its revision
with every write and never reuses one, so every new leader has a larger term than
every earlier one. The key's value announces the leader: its instance id and the
URL of its REST API.

Every candidate also announces itself: `<members>/<instance>` holds its instance
id and API URL, attached to its own lease (put with the lease, in the same
transaction as the campaign that first uses it), so the record disappears when the
instance stops or dies. A follower reads the members (at most `MAX_MEMBERS`) with
every poll, the leader with every keep-alive; `members` is the last set read. The
API redirects a write only to a leader URL that a member advertises, and the
client follows only such URLs (docs/ha.md, "Redirects").

The leader steps down when its lease is gone (a keep-alive answered TTL 0), the
key is no longer its own, or etcd has not renewed the lease for a whole TTL
(measured from the last renewal it sent: the lease may have expired on etcd's
side by then). It then revokes the lease, so the key is free at once, and
campaigns again as a follower. A follower polls the key every `poll_s`
(default 0.2 s): the key disappears when the leader's lease expires (at most
`lease_ttl_s`, plus etcd's lease checking, after a crash) or at once when a
leader revokes it (a clean stop).

`controller.app.cluster.Cluster` joins the election to the process (docs/ha.md).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from controller.store.etcd import EtcdClient, StoreUnavailable, cmp_created, get, prefix_end, put

log = logging.getLogger(__name__)

MAX_MEMBERS = 64  # members read at most (a cluster has a handful)
MAX_URL = 512  # characters of an advertised URL


@dataclass(frozen=True)
class Member:
    """A live instance: its id and the API URL it advertises."""

    instance: str
    url: str


def _members_range(members: str) -> dict:
    """A transaction's read of the members records (at most MAX_MEMBERS)."""
    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode("ascii")

    return {"request_range": {"key": b64(members.encode()), "range_end": b64(prefix_end(members)),
                              "limit": str(MAX_MEMBERS)}}


def _decode_members(kvs: list[dict]) -> tuple[Member, ...]:
    out = []
    for kv in kvs[:MAX_MEMBERS]:
        try:
            d = json.loads(kv["value"])
            instance, url = d["instance"], d["url"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(instance, str) and isinstance(url, str) and len(url) <= MAX_URL:
            out.append(Member(instance, url))
    return tuple(out)


@dataclass(frozen=True)
class LeaderInfo:
    instance: str
    url: str | None
    term: int


class Election:
    """Campaign for `key` with `value` (see the module docstring).

    `on_elected(term)` and `on_deposed(term)` are called from one role thread,
    in order, never at the same time; the keep-alive goes on in the election
    thread meanwhile."""

    def __init__(
        self,
        client: EtcdClient,
        key: str,
        instance: str,
        url: str | None,
        ttl: int,
        *,
        on_elected: Callable[[int], None] | None = None,
        on_deposed: Callable[[int], None] | None = None,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        members: str | None = None,
    ) -> None:
        self.client = client
        self.key = key
        self.instance = instance
        self.url = url
        self.ttl = ttl
        self.poll_s = poll_s
        self.clock = clock
        self._on_elected = on_elected or (lambda term: None)
        self._on_deposed = on_deposed or (lambda term: None)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._lease: int | None = None
        self._granted_ttl = ttl
        self._renewed_at = 0.0  # when the last successful keep-alive (or the grant) was sent
        self.term: int | None = None  # this instance's term while it leads
        self.leader: LeaderInfo | None = None  # the leader as last seen (self included)
        self.elected_at: float | None = None  # clock() when this instance last became leader
        self.terms_won = 0
        self._events: list[tuple[str, int]] = []
        self._events_cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._role_thread: threading.Thread | None = None
        self.members_prefix = members if members is not None else key.rpartition("/")[0] + "/members/"
        self.members: tuple[Member, ...] = ()  # the live instances as last read

    # -- state --------------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        with self._lock:
            return self.term is not None

    def lease_valid(self, term: int | None = None) -> bool:
        """True while this instance leads (in `term`, if given) and the lease cannot
        have expired yet by the local clock: the last renewal that etcd confirmed was
        sent less than its TTL ago. A leader resumed after a freeze finds this False
        before its next renewal tells it that it was deposed."""
        with self._lock:
            if self.term is None or (term is not None and term != self.term):
                return False
            return self.clock() - self._renewed_at < self._granted_ttl

    def status(self) -> dict:
        with self._lock:
            leader = self.leader
            return {
                "role": "leader" if self.term is not None else "follower",
                "instance": self.instance,
                "url": self.url,
                "term": self.term,
                "leader": None if leader is None else {"instance": leader.instance, "url": leader.url, "term": leader.term},
                "members": [{"instance": m.instance, "url": m.url} for m in self.members],
            }

    def is_member(self, instance: str, url: str | None) -> bool:
        """Whether a live instance `instance` advertises `url` (as last read)."""
        with self._lock:
            return url is not None and Member(instance, url) in self.members

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> Election:
        self._thread = threading.Thread(target=self._run, name="election", daemon=True)
        self._role_thread = threading.Thread(target=self._roles, name="election-roles", daemon=True)
        self._role_thread.start()
        self._thread.start()
        return self

    def stop(self, resign: bool = True, timeout: float = 5.0) -> None:
        """Stop campaigning; with `resign` revoke the lease, so that the key is free
        for another instance at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            lease, term = self._lease, self.term
            self.term = None
            self._lease = None
        if term is not None:
            self._event("deposed", term)
        with self._events_cond:
            self._events.append(("stop", 0))
            self._events_cond.notify_all()
        if self._role_thread is not None:
            self._role_thread.join(timeout)
        if resign and lease is not None:
            try:
                self.client.revoke(lease)
            except StoreUnavailable as e:
                log.warning("could not revoke the leader lease: %s", e)

    # -- the role thread: callbacks in order ---------------------------------------------------

    def _event(self, kind: str, term: int) -> None:
        with self._events_cond:
            self._events.append((kind, term))
            self._events_cond.notify_all()

    def _roles(self) -> None:
        while True:
            with self._events_cond:
                self._events_cond.wait_for(lambda: bool(self._events))
                kind, term = self._events.pop(0)
            if kind == "stop":
                return
            try:
                (self._on_elected if kind == "elected" else self._on_deposed)(term)
            except Exception:  # noqa: BLE001 - the role thread must survive
                log.exception("the %s handler failed (term %d)", kind, term)

    # -- the election thread -----------------------------------------------------------------

    def _value(self) -> str:
        return json.dumps({"instance": self.instance, "url": self.url}, sort_keys=True)

    def _announce(self, lease: int) -> list[dict]:
        """The put of this instance's members record on `lease` (none without a URL)."""
        if self.url is None:
            return []
        if len(self.url) > MAX_URL:
            raise ValueError(f"the advertised API URL is longer than {MAX_URL} characters")
        return [put(self.members_prefix + self.instance, self._value(), lease)]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.leading:
                    self._keep_leading()
                    wait = max(0.05, self._granted_ttl / 3)
                else:
                    self._campaign()
                    wait = self.poll_s
            except StoreUnavailable as e:
                log.warning("etcd: %s", e)
                wait = self.poll_s
                self._check_expired()
            except Exception:  # noqa: BLE001 - the election thread must survive
                log.exception("election step failed")
                wait = self.poll_s
                self._check_expired()
            self._stop.wait(wait)

    def _campaign(self) -> None:
        announce: list[dict] = []
        if self._lease is None:
            sent = self.clock()
            lease, granted = self.client.grant(self.ttl)
            with self._lock:
                self._lease, self._granted_ttl, self._renewed_at = lease, granted, sent
            announce = self._announce(lease)  # a new lease: the members record goes with it
        else:  # keep the lease of an earlier campaign alive (or take a new one if it is gone)
            sent = self.clock()
            if self.client.keepalive(self._lease) <= 0:
                with self._lock:
                    self._lease = None
                return self._campaign()
            with self._lock:
                self._renewed_at = sent
        ok, responses, revision = self.client.txn(
            [cmp_created(self.key, 0)], [put(self.key, self._value(), self._lease), *announce],
            [get(self.key), _members_range(self.members_prefix), *announce])
        if ok:
            with self._lock:
                self.term = revision
                self.leader = LeaderInfo(self.instance, self.url, revision)
                self.elected_at = self.clock()
                self.terms_won += 1
            log.info("elected leader: term %d (instance %s)", revision, self.instance)
            self._event("elected", revision)
            return
        kvs = responses[0]["kvs"] if responses else []
        if len(responses) > 1:
            members = _decode_members(responses[1].get("kvs", []))
            with self._lock:
                self.members = members
        if kvs:
            try:
                d = json.loads(kvs[0]["value"])
                info = LeaderInfo(str(d.get("instance")), d.get("url"), kvs[0]["create_revision"])
            except (ValueError, AttributeError):
                info = LeaderInfo("?", None, kvs[0]["create_revision"])
            with self._lock:
                if self.leader != info:
                    log.info("leader is %s (%s), term %d", info.instance, info.url, info.term)
                self.leader = info

    def _keep_leading(self) -> None:
        with self._lock:
            lease, term = self._lease, self.term
        sent = self.clock()
        left = self.client.keepalive(lease) if lease is not None else 0
        if left <= 0:
            return self._depose(f"the lease of term {term} has expired")
        with self._lock:
            self._renewed_at = sent
            self._granted_ttl = left
        _, responses, _ = self.client.txn([], [get(self.key), _members_range(self.members_prefix)])
        kvs = responses[0]["kvs"]
        with self._lock:
            self.members = _decode_members(responses[1]["kvs"])
        if not kvs or kvs[0]["create_revision"] != term:
            return self._depose(f"the leader key is no longer that of term {term}")

    def _check_expired(self) -> None:
        """etcd did not answer: once a whole TTL has passed since the last renewal,
        the lease may be gone and another instance may lead: step down."""
        with self._lock:
            expired = self.term is not None and self.clock() - self._renewed_at >= self._granted_ttl
        if expired:
            self._depose("etcd has not renewed the lease for a whole TTL")

    def _depose(self, why: str) -> None:
        with self._lock:
            term, lease = self.term, self._lease
            self.term = None
            self._lease = None
            if self.leader is not None and self.leader.term == term:
                self.leader = None
        log.warning("stepping down: %s", why)
        if lease is not None:
            try:
                self.client.revoke(lease)
            except StoreUnavailable:
                pass
        if term is not None:
            self._event("deposed", term)


def instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
