"""`Client`: register, watch and delete jobs on a running controller over its REST
API (docs/controller.md), with the standard library's urllib only.

Retries are safe by construction. Every registration carries an id (the
caller's, or a fresh `job-<uuid4>` one), and the controller answers a repeated
registration of the same id and spec with the existing job (200), so a retry
after a lost answer never creates a second job. A delete retried after a lost
answer may find the job gone (404): that counts as success, since the earlier
attempt deleted it. Connection errors, timeouts and 5xx answers are retried
with exponential back-off (a 503's `Retry-After` respected, up to
`max_backoff`); 4xx answers never are (they would fail again).

Transport security (docs/security.md, "TLS on the API"). An https:// controller's
certificate is verified, against the system's CAs or `ca_file`; a certificate
that does not verify is an `UntrustedCertificate`, never retried. The token goes
only over https:// or to a loopback host: a client with a token and an http://
URL to any other host is refused (`InsecureTransport`) before anything is sent.

Redirects. A 307 or 308 (a follower of a controller cluster sending a write to
its leader, docs/ha.md) is followed with the same method, body and token, at
most `MAX_REDIRECTS` times per attempt, and only to a URL whose scheme, host and
port are those of the given URL or of a member the cluster advertises: the
client asks `GET /cluster` of the controller it was given (whose certificate it
verified), keeps the member set for `MEMBERS_TTL_S`, and asks again once before
refusing a target it does not know. A redirect to another scheme or to a URL no
member advertises is a `RedirectRefused`: nothing is sent there. The instances
of one cluster share one token.

Every registration also carries a fresh random 32-byte key (`auth_key`,
base64url): the job's broadcast key, with which the PS authenticates the
objects it sends and the workers check them (`controller.client.broadcast`).
The controller keeps it and never shows it again; the `Job` that `register`
returns carries it, and a retry finds it since it sends the same key.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import http.client
import ipaddress
import json
import logging
import random
import secrets
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from controller.client.errors import (
    ApiError,
    ClientError,
    InsecureTransport,
    JobFailed,
    NotFound,
    RedirectRefused,
    Unreachable,
    UntrustedCertificate,
    WaitTimeout,
)

DEFAULT_URL = "http://127.0.0.1:8080"
log = logging.getLogger(__name__)

# what a lost answer looks like to urllib: refused, reset, timed out (URLError,
# ConnectionError, TimeoutError: all OSErrors), or cut mid-answer
_TRANSIENT = (OSError, http.client.HTTPException)


@dataclass(frozen=True)
class Job:
    """A registered job as the controller describes it (`JobOut` in the API).

    `rate` (bit/s), `mode` and `structure` are None while `state` is `pending`.
    The PS sends to `group_address` at `rate` when the structure has multicast
    entries, and a unicast copy to each worker of `ps_unicast`.

    `auth_key` is the job's broadcast key (32 bytes), on the `Job` that
    `Client.register` returns only (the controller gives it to the registrant
    and never again: a `Job` from `get` or `list` has None). The broadcast needs
    it on the PS and on every worker: hand it to the job's workers out of band,
    as the training launcher already hands them the job (e.g.
    `job.with_key(key)` on a worker's `Job` from `get`; `encode_key` /
    `decode_key` for text). Never log it."""

    id: str
    ps: str
    workers: tuple[str, ...]
    demand: float
    weight: float
    group_address: str | None  # None: the job failed, its address went back to the pool
    state: str
    effective_demand: float | None = None  # the demand planned: capped to the PS's link
    rate: float | None = None  # what the PS sends at now (its phase's rate, if it announces them)
    mode: str | None = None
    ps_unicast: tuple[str, ...] = ()
    planned_rate: float | None = None  # what it gets whenever it broadcasts
    broadcasting: bool | None = None  # None: it never announced a broadcast (`Client.broadcasting`)
    missing_hosts: tuple[str, ...] = ()
    error: str | None = None
    structure: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    auth_key: bytes | None = field(default=None, compare=False, repr=False)

    def with_key(self, key: bytes | str | None) -> Job:
        """This job with the broadcast key `key` (bytes, or base64url text)."""
        return dataclasses.replace(self, auth_key=decode_key(key) if isinstance(key, str) else key)

    @property
    def planned(self) -> bool:
        return self.state == "planned"

    @property
    def sends_multicast(self) -> bool:
        """Whether the PS sends to `group_address` (the plan has multicast entries)."""
        return bool(self.structure and self.structure.get("entries"))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        structure = data.get("structure")
        return cls(
            id=data["id"],
            ps=data["ps"],
            workers=tuple(data["workers"]),
            demand=float(data["demand"]),
            weight=float(data["weight"]),
            group_address=data["group_address"],
            state=data["state"],
            effective_demand=data.get("effective_demand"),
            rate=data.get("rate"),
            mode=data.get("mode"),
            ps_unicast=tuple(structure["ps_unicast"]) if structure else (),
            planned_rate=data.get("planned_rate"),
            broadcasting=data.get("broadcasting"),
            missing_hosts=tuple(data.get("missing_hosts") or ()),
            error=data.get("error"),
            structure=structure,
            raw={k: v for k, v in data.items() if k != "auth_key"},
            auth_key=decode_key(data["auth_key"]) if data.get("auth_key") else None,
        )


KEY_BYTES = 32


def new_key() -> bytes:
    """A fresh random job key (32 bytes)."""
    return secrets.token_bytes(KEY_BYTES)


def encode_key(key: bytes) -> str:
    """A job key as text (base64url, no padding), as the API carries it."""
    return base64.urlsafe_b64encode(key).rstrip(b"=").decode("ascii")


def decode_key(text: str) -> bytes:
    """A job key from its text (`encode_key`); ValueError unless it is 32 bytes."""
    try:
        key = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("a job key is base64url text") from None
    if len(key) != KEY_BYTES:
        raise ValueError(f"a job key is {KEY_BYTES} bytes, not {len(key)}")
    return key


def new_job_id() -> str:
    """A fresh client-chosen job id (within the API's 64 characters)."""
    return f"job-{uuid.uuid4().hex}"


class Client:
    """A controller at `url` (`http://host:port`). `token` is sent as
    `Authorization: Bearer` (required by a controller off loopback); `timeout`
    bounds each HTTP request, and must exceed the controller's `planner.wait_s`
    (a registration's answer waits for its plan). A request is tried `retries`
    more times on a transient failure, after `backoff`, 2×`backoff`, … seconds
    (with jitter, at most `max_backoff`). An https:// controller's certificate
    is verified against the system's CAs, or the CA certificates (PEM) in
    `ca_file`. `opener` replaces urllib's (tests); by default proxies from the
    environment are ignored: the controller is on a management network, and a
    proxy would see the token. `InsecureTransport` if `token` would go over
    http:// to a host that is not loopback (see the module docstring)."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        timeout: float = 30.0,
        *,
        retries: int = 4,
        backoff: float = 0.25,
        max_backoff: float = 5.0,
        opener: urllib.request.OpenerDirector | None = None,
        sleep: Callable[[float], None] = time.sleep,
        ca_file: str | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"not an http(s) URL: {url!r}")
        if retries < 0 or timeout <= 0 or backoff < 0:
            raise ValueError("retries must be >= 0, timeout > 0 and backoff >= 0")
        self.url = url.rstrip("/")
        self.token = token
        self._check_token_goes_safely(self.url)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._opener = opener or urllib.request.build_opener(
            urllib.request.ProxyHandler({}), _OwnRedirects(), urllib.request.HTTPSHandler(context=tls_context(ca_file)))
        self._sleep = sleep
        self._members: tuple[float, frozenset[tuple[str, str, int]]] | None = None  # (when read, origins)

    def __repr__(self) -> str:  # never the token
        return f"Client({self.url!r})"

    # -- the API --------------------------------------------------------------------------

    def register(
        self,
        ps: str,
        workers: Sequence[str],
        demand: float,
        weight: float = 1.0,
        job_id: str | None = None,
        *,
        wait: bool = True,
        timeout: float = 60.0,
        poll: float = 0.25,
        auth_key: bytes | None = None,
    ) -> Job:
        """Register a job (hosts by name or IPv4 address, `demand` in bit/s) and
        return it, with its broadcast key (`auth_key`: a fresh random one unless
        given, e.g. by a launcher that hands it to the workers too). With `wait`,
        return once it is `planned`, polling every `poll` seconds: `WaitTimeout`
        after `timeout` seconds, `JobFailed` if the controller gives up on it
        (both leave it registered). `Conflict` if `job_id` names a job with
        another spec; `ApiError` for an invalid job. If `job_id` names a job
        someone else registered with the same spec, the answer carries no key:
        the returned `Job`'s `auth_key` is None."""
        if isinstance(workers, str):
            raise TypeError("workers must be a sequence of hosts, not one string")
        key = auth_key if auth_key is not None else new_key()
        if len(key) != KEY_BYTES:
            raise ValueError(f"auth_key must be {KEY_BYTES} bytes")
        body = {"id": job_id or new_job_id(), "ps": ps, "workers": list(workers), "demand": demand, "weight": weight,
                "auth_key": encode_key(key)}
        deadline = time.monotonic() + timeout
        _, data = self._request("POST", "/jobs", body)
        job = Job.from_json(data)
        if job.auth_key is None:
            log.warning("job %s was registered already under another key: no broadcast key for it here", job.id)
        if wait:
            job = self.wait_planned(job.id, max(0.0, deadline - time.monotonic()), poll, job).with_key(job.auth_key)
        return job

    def wait_planned(self, job_id: str, timeout: float = 60.0, poll: float = 0.25, job: Job | None = None) -> Job:
        """The job once a plan includes it: `WaitTimeout` after `timeout` seconds,
        `JobFailed` if its state is `failed`. `job` is a copy already fetched."""
        deadline = time.monotonic() + timeout
        while True:
            job = job or self.get(job_id)
            if job.state == "planned":
                return job
            if job.state == "failed":
                raise JobFailed(job)
            if time.monotonic() >= deadline:
                raise WaitTimeout(job, timeout)
            self._sleep(min(poll, max(0.0, deadline - time.monotonic())))
            job = None

    def get(self, job_id: str) -> Job:
        """One job; `NotFound` if there is none."""
        return Job.from_json(self._request("GET", f"/jobs/{_segment(job_id)}")[1])

    def broadcasting(self, job_id: str, active: bool) -> Job:
        """Say that the job's PS starts (or goes on with: renew within the controller's
        `planner.broadcast_ttl_s`) a broadcast, `active`, or ended one; the job at
        the rate of its phase (`Job.rate`), which its switches police by the time
        this returns. `controller.client.phases.Announcement` does the renewals.
        `NotFound` for an unknown job, `Conflict` for one not planned."""
        return Job.from_json(self._request("PUT", f"/jobs/{_segment(job_id)}/broadcasting",
                                           {"active": bool(active)})[1])

    def list(self, page_size: int | None = None) -> list[Job]:
        """Every job, in creation order (GET /jobs a page at a time, following
        `next`; `page_size` jobs a page, default the controller's)."""
        jobs: list[Job] = []
        path: str | None = "/jobs" if page_size is None else f"/jobs?limit={int(page_size)}"
        seen: set[str] = set()
        while path is not None:
            if not (path == "/jobs" or path.startswith("/jobs?")) or path in seen:  # a page of /jobs, never twice
                raise ApiError(200, "bad_page", f"the controller named an unexpected next page {path!r}", "next")
            seen.add(path)
            page = self._request("GET", path)[1]
            jobs.extend(Job.from_json(j) for j in page["jobs"])
            path = page.get("next")
        return jobs

    def delete(self, job_id: str, *, missing_ok: bool = False) -> bool:
        """Delete a job; returns once a plan without it is in place (or after the
        controller's `planner.wait_s`). True if it was deleted, False if it was
        already gone and `missing_ok`; otherwise `NotFound` for an unknown id.
        A 404 that answers a retry is success: the lost first attempt deleted it."""
        try:
            self._request("DELETE", f"/jobs/{_segment(job_id)}", retried_404_ok=True)
        except NotFound:
            if missing_ok:
                return False
            raise
        return True

    def hosts(self) -> dict[str, str]:
        """name -> IPv4 address of every host the controller knows (`GET /hosts`);
        the broadcast (`controller.client.broadcast`) addresses workers with it."""
        return {h["id"]: h["ip"] for h in self._request("GET", "/hosts")[1]["hosts"]}

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/healthz")[1]

    @contextmanager
    def job(
        self,
        ps: str,
        workers: Sequence[str],
        demand: float,
        weight: float = 1.0,
        job_id: str | None = None,
        *,
        wait: bool = True,
        timeout: float = 60.0,
        auth_key: bytes | None = None,
    ) -> Iterator[Job]:
        """`with client.job(ps, workers, demand) as job:` registers the job (as
        `register`) and deletes it on leaving, also on an exception, and also if
        the wait for its plan fails (then the exception propagates)."""
        job_id = job_id or new_job_id()
        try:
            job = self.register(ps, workers, demand, weight, job_id, wait=wait, timeout=timeout, auth_key=auth_key)
        except (WaitTimeout, JobFailed):
            self.delete(job_id, missing_ok=True)
            raise
        except ClientError as e:
            # registered but the answer never came (Unreachable), or a 5xx after a success:
            # try to clean up; a 4xx refusal registered nothing (a Conflict is someone else's job)
            if not isinstance(e, ApiError) or e.status >= 500:
                try:
                    self.delete(job_id, missing_ok=True)
                except ClientError:
                    pass
            raise
        try:
            yield job
        except BaseException:
            try:
                self.delete(job_id, missing_ok=True)
            except ClientError as e:  # the body's exception matters more; say what is left behind
                log.warning("job %s may still be registered: deleting it failed: %s", job_id, e)
            raise
        self.delete(job_id, missing_ok=True)

    # -- HTTP -----------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, retried_404_ok: bool = False
    ) -> tuple[int, Any]:
        """(status, decoded JSON body or None), retrying transient failures; an
        `ApiError` for an error answer, `Unreachable` when the retries run out."""
        data = json.dumps(body, allow_nan=False).encode() if body is not None else None
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        attempt = 0
        target, hops = self.url + path, 0
        while True:
            self._check_token_goes_safely(target)
            request = urllib.request.Request(target, data=data, headers=headers, method=method)
            retry_after: float | None = None
            try:
                try:
                    with self._opener.open(request, timeout=self.timeout) as answer:
                        status, payload = answer.status, answer.read()
                except urllib.error.HTTPError as e:
                    with e:
                        status, payload = e.code, e.read()
                        retry_after = _seconds(e.headers.get("Retry-After") if e.headers else None)
                        location = e.headers.get("Location") if e.headers else None
                    if status in (307, 308) and location and hops < MAX_REDIRECTS:
                        # a follower names its leader: the same request there, at once, if the cluster says so
                        target, hops = self._follow(target, location), hops + 1
                        continue
                    if status == 404 and retried_404_ok and attempt > 0:
                        return status, None
                    if status < 500 or attempt >= self.retries:
                        raise ApiError.from_answer(status, payload) from None
                else:
                    return status, json.loads(payload) if payload else None
            except _TRANSIENT as e:
                _raise_if_untrusted(e, target)
                if attempt >= self.retries:
                    tries = f"{attempt + 1} attempts" if attempt else "1 attempt"
                    raise Unreachable(f"{method} {self.url}{path}: no answer after {tries}: {e}") from e
            delay = min(self.max_backoff, self.backoff * 2**attempt) * random.uniform(0.5, 1.0)
            self._sleep(max(delay, min(retry_after or 0.0, self.max_backoff)))
            attempt += 1
            # the leader may have changed: ask the instance we were given again
            target, hops = self.url + path, 0

    # -- transport security ---------------------------------------------------------------

    def _check_token_goes_safely(self, url: str) -> None:
        """`InsecureTransport` if the token would go over http:// to a host that is not loopback."""
        parts = urllib.parse.urlsplit(url)
        if self.token and parts.scheme != "https" and not is_loopback(parts.hostname or ""):
            raise InsecureTransport(
                f"refusing to send the token over {parts.scheme}:// to {parts.hostname}, which is not a loopback "
                "host: anyone on the path could read it; use the controller's https:// URL (api.tls)")

    def _follow(self, target: str, location: str) -> str:
        """The URL a redirect from `target` to `location` leads to, if the cluster
        advertises it and the scheme stays that of `self.url`; `RedirectRefused` otherwise."""
        new = urllib.parse.urljoin(target, location)
        scheme = urllib.parse.urlsplit(self.url).scheme
        if urllib.parse.urlsplit(new).scheme != scheme:
            raise RedirectRefused(f"{target} redirected to {new}: not followed, it leaves {scheme}://")
        wanted = origin(new)
        if wanted is not None and wanted == origin(self.url):
            return new  # the controller it was given: the token goes there anyway
        known, just_read = self._member_origins(fresh=False)
        if wanted not in known and not just_read:  # a member may have joined since: ask once more
            known, _ = self._member_origins(fresh=True)
        if wanted is None or wanted not in known:
            raise RedirectRefused(
                f"{target} redirected to {new}, which no member of the cluster advertises "
                f"({self.url}/cluster): not followed, nothing was sent there")
        return new

    def _member_origins(self, fresh: bool) -> tuple[frozenset[tuple[str, str, int]], bool]:
        """(scheme, host, port) of every member `GET /cluster` of `self.url` lists
        (cached for MEMBERS_TTL_S unless `fresh`; empty for a standalone controller),
        and whether they were read just now."""
        now = time.monotonic()
        if not fresh and self._members is not None and now - self._members[0] < MEMBERS_TTL_S:
            return self._members[1], False
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url + "/cluster", headers=headers, method="GET")
        try:
            with self._opener.open(request, timeout=self.timeout) as answer:
                data = json.loads(answer.read())
        except urllib.error.HTTPError as e:
            with e:
                raise RedirectRefused(f"cannot check a redirect: {self.url}/cluster answered {e.code}") from None
        except ValueError:
            raise RedirectRefused(f"cannot check a redirect: {self.url}/cluster is not JSON") from None
        members = data.get("members") if isinstance(data, dict) else None
        urls = [m.get("url") for m in members if isinstance(m, dict)] if isinstance(members, list) else []
        origins = frozenset(o for o in (origin(u) for u in urls if isinstance(u, str)) if o is not None)
        self._members = (now, origins)
        return origins, True


MAX_REDIRECTS = 3
MEMBERS_TTL_S = 5.0  # how long the cluster's member set is trusted before it is asked again


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """The client's TLS: verify the server's certificate and host name against the
    system's CAs, or those in `ca_file` (PEM); TLS 1.2 at least."""
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"ca_file {ca_file}: cannot load CA certificates from it: {e}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def is_loopback(host: str) -> bool:
    """'localhost' and the loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL, the port defaulted; None if it is not one."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)


def _raise_if_untrusted(error: BaseException, target: str) -> None:
    """`UntrustedCertificate` if `error` is a failed certificate check (retrying is futile)."""
    reason = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(reason, ssl.SSLCertVerificationError):
        detail = reason.verify_message or str(reason)
        raise UntrustedCertificate(
            f"{target}: the controller's TLS certificate did not verify ({detail}); give the CA that signed it "
            "(Client(ca_file=...), --ca-file or $MCAST_CA_FILE)") from error


class _OwnRedirects(urllib.request.HTTPRedirectHandler):
    """Leaves every redirect to `Client._request` (urllib would follow a GET's 307
    itself, and refuse a POST's), so that all methods are followed alike."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201
        return None


def _segment(job_id: str) -> str:
    """`job_id` as one path segment (an id never has '/', but a typo might)."""
    if not job_id:
        raise ValueError("a job id is not empty")
    return urllib.parse.quote(job_id, safe="")


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
