"""The job store in etcd: the same interface and semantics as `store.sqlite.JobStore`,
shared by several controller instances (docs/ha.md).

etcd is reached over its v3 gRPC gateway (JSON over HTTP, `POST /v3/kv/...`) with
the `etcd3gw` client; with `store.etcd.tls` over https with a client certificate,
and with `store.etcd.user` as an etcd user (a token from /v3/auth/authenticate,
renewed when etcd forgets it; refusals are `EtcdAuthError`; docs/ha.md). Every
key lives under the configured prefix P:

    P jobs/<id>        {"ps", "workers", "demand", "weight", "group_address", "auth_key"}
                       (auth_key: the job's broadcast key, base64; absent for older records;
                       "tenant": the owning tenant, absent for the admin's jobs)
    P addr/<address>   the id of the job holding that group address (the unique index)
    P state/<key>      a JSON value (group and meter ids, learned wiring, budgets;
                       served/<job id>: the structure the job was served with, `core.served_store`)
    P leader           the election key (store.election)
    P members/<id>     a live instance's id and API URL, on its lease (store.election)

Semantics, as in SQLite:

- every write is one etcd transaction (`/v3/kv/txn`): it happens completely or
  not at all;
- a job id and a group address are unique: `add` compares the create revision of
  `jobs/<id>` and `addr/<address>` with 0 (absent), so two instances adding the
  same id or address at the same time cannot both succeed;
- creation order: a job's `seq` is the create revision of its key, which etcd
  raises with every write and never reuses;
- `set_group_addresses` and `delete` compare the mod revisions of the jobs they
  read, and start over if another writer changed them in between.

Fencing: `fence(key, revision)` makes every later write also compare the create
revision of `key` (the leader key) with `revision`: once another instance has won
the election (the key was deleted and created again), a write of the deposed
leader fails with `Fenced` and changes nothing.

Every job record read back is checked (`store.records`): one that is no valid
job is logged, counted (`skipped_records`) and skipped.

A transaction holds at most etcd's `--max-txn-ops` operations (128 by default):
`set_group_addresses` of more than about 60 jobs needs a larger limit (the tests
and `make demo-ha` start etcd with `--max-txn-ops 10000`).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import urllib.parse
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from controller.algorithm.model import Job
from controller.store.base import (
    BadRecord,
    DuplicateGroupAddress,
    DuplicateJobId,
    StoredJob,
    StoreError,
    StoreFull,
    StoreUnavailable,
    decode_state,
)
from controller.store.records import SkippedRecords, job_from_record

log = logging.getLogger(__name__)

MAX_RECORD_BYTES = 1 << 20  # a job record longer than this is refused unread (store.records)
TXN_OPS = 64  # `put_states`: operations per transaction (etcd's --max-txn-ops is 128 by default)
TXN_BYTES = 512 * 1024  # `put_states`: bytes per transaction (etcd's --max-request-bytes is 1.5 MiB by default)
MAX_RETRIES = 20  # optimistic transactions that lost a race are tried again this often


class Fenced(StoreError):
    """This instance is no longer the leader: the write was refused."""


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def prefix_end(prefix: str) -> bytes:
    """The range end that selects every key starting with `prefix` (etcd's rule:
    the prefix with its last byte below 0xff incremented, the rest dropped)."""
    raw = bytearray(prefix.encode())
    while raw:
        if raw[-1] < 0xFF:
            raw[-1] += 1
            return bytes(raw)
        raw.pop()
    return b"\x00"


class EtcdAuthError(StoreError):
    """etcd refused this client: a wrong user or password, a user without the
    permission on the prefix, or no user where etcd requires one (docs/ha.md)."""


# gRPC status codes, as the v3 gateway returns them in {"error", "code", "message"}
_INVALID_ARGUMENT, _PERMISSION_DENIED, _RESOURCE_EXHAUSTED, _FAILED_PRECONDITION, _UNAUTHENTICATED = 3, 7, 8, 9, 16
# what /v3/auth/authenticate answers a wrong password (3), a refused user, or auth not enabled (9)
_AUTH_REFUSALS = (_INVALID_ARGUMENT, _PERMISSION_DENIED, _FAILED_PRECONDITION, _UNAUTHENTICATED)


def _etcd_error(e: Exception) -> tuple[int | None, str]:
    """The gRPC code and message of an etcd3gw exception (None: not an answer of etcd)."""
    text = getattr(e, "detail_text", None) or str(e)
    try:
        answer = json.loads(text)
        return int(answer.get("code")), str(answer.get("error") or answer.get("message") or text)
    except (ValueError, TypeError, AttributeError):
        return None, str(text)[:300]


def _session(tls: Any) -> Any:
    """The HTTP session of one endpoint; with `tls` it verifies etcd against
    `tls.ca` and sends the client certificate. It ignores the environment:
    requests would otherwise let REQUESTS_CA_BUNDLE replace the configured CA."""
    import requests

    session = requests.Session()
    if tls is not None:
        session.trust_env = False
        session.verify = str(tls.ca)
        session.cert = (str(tls.cert), str(tls.key))
    return session


class EtcdClient:
    """A thin layer over etcd3gw: the endpoints are tried in turn, answers are
    decoded, failures become `StoreUnavailable` (and `EtcdAuthError` when etcd
    refuses the client).

    `tls` (a `config.TlsFiles`: ca, cert, key) verifies https:// endpoints against
    `tls.ca` and sends the client certificate. With `user` and `password` the
    client authenticates (`/v3/auth/authenticate`) at each endpoint before its
    first request and sends the token etcd gave in the `Authorization` header; a
    token that expired (etcd answers "invalid auth token") is replaced once, and
    the request sent again."""

    def __init__(self, endpoints: Sequence[str], timeout: float = 2.0, *, tls: Any = None,
                 user: str | None = None, password: str | None = None) -> None:
        try:
            with warnings.catch_warnings():
                # etcd3gw -> futurist imports eventlet when it is installed (os-ken brings it),
                # which warns that eventlet is deprecated; nothing here uses eventlet
                warnings.simplefilter("ignore")
                import etcd3gw  # noqa: F401
                from etcd3gw.client import Etcd3Client
        except ImportError:
            raise StoreError("store.backend etcd needs the etcd3gw package (pip install etcd3gw)") from None
        if not endpoints:
            raise StoreError("no etcd endpoints")
        self.endpoints = tuple(endpoints)
        self._clients = []
        for url in self.endpoints:
            parts = urllib.parse.urlsplit(url)
            self._clients.append(Etcd3Client(
                host=parts.hostname, port=parts.port or 2379, protocol=parts.scheme,
                timeout=timeout, api_path="/v3/",  # etcd >= 3.4: no discovery round trip
                session=_session(tls),
            ))
        self.user = user
        self._password = password
        self._authenticated: set[int] = set()  # the endpoints (indexes) that hold a token
        self._current = 0
        self._lock = threading.Lock()

    def _authenticate(self, n: int) -> None:
        """Get a token from endpoint `n` for `user` and send it from now on."""
        client = self._clients[n]
        client.session.headers.pop("Authorization", None)
        try:
            answer = client.post(client.get_url("auth/authenticate"), json={"name": self.user, "password": self._password})
        except Exception as e:
            code, message = _etcd_error(e)
            if "CommonName of client" in message:
                raise self._common_name_refused(n) from None
            if code not in _AUTH_REFUSALS:  # not answered, or etcd is unavailable: try the next endpoint
                raise
            raise EtcdAuthError(f"etcd {self.endpoints[n]}: user {self.user!r} was refused: {message} "
                                "(check store.etcd.user and its password)") from None
        token = answer.get("token")
        if not token:
            raise EtcdAuthError(f"etcd {self.endpoints[n]}: authenticating user {self.user!r} gave no token "
                                "(is authentication enabled in etcd?)")
        client.session.headers["Authorization"] = token
        with self._lock:
            self._authenticated.add(n)

    def _common_name_refused(self, n: int) -> EtcdAuthError:
        """etcd 3.4's gateway refuses client certificates with a CN while its auth is on."""
        return EtcdAuthError(f"etcd {self.endpoints[n]}: refuses a client certificate with a Common Name on its HTTP "
                             "gateway while authentication is enabled: give store.etcd.tls.cert a certificate "
                             "without a CN (docs/ha.md)")

    def _post_at(self, n: int, path: str, body: dict) -> dict:
        """POST to endpoint `n`, authenticating first (and again once when the token expired)."""
        client = self._clients[n]
        for attempt in range(2):
            if self.user is not None and n not in self._authenticated:
                self._authenticate(n)
            try:
                return client.post(client.get_url(path), json=body)
            except Exception as e:
                code, message = _etcd_error(e)
                if code == _UNAUTHENTICATED and self.user is not None and attempt == 0:
                    with self._lock:  # the token expired (or etcd restarted): get a new one
                        self._authenticated.discard(n)
                    continue
                if "CommonName of client" in message:
                    raise self._common_name_refused(n) from None
                if code in (_PERMISSION_DENIED, _UNAUTHENTICATED) or (code == _INVALID_ARGUMENT and "user name" in message):
                    who = f"user {self.user!r}" if self.user is not None else "a client without a user (store.etcd.user)"
                    raise EtcdAuthError(f"etcd {self.endpoints[n]}: {path}: {who} was refused: {message}") from None
                raise
        raise AssertionError("unreachable")

    @classmethod
    def from_config(cls, etcd_config: Any) -> EtcdClient:
        """The client of `store.etcd` (a `config.EtcdConfig`): endpoints, timeout, TLS, user."""
        return cls(etcd_config.endpoints, etcd_config.timeout_s, tls=getattr(etcd_config, "tls", None),
                   user=getattr(etcd_config, "user", None), password=getattr(etcd_config, "password", None))

    def post(self, path: str, body: dict) -> dict:
        """POST `body` to /v3/`path` on the first endpoint that answers."""
        from etcd3gw import exceptions as etcd_errors

        with self._lock:
            start = self._current
        errors = []
        for i in range(len(self._clients)):
            n = (start + i) % len(self._clients)
            try:
                answer = self._post_at(n, path, body)
            except (etcd_errors.ConnectionFailedError, etcd_errors.ConnectionTimeoutError) as e:
                detail = str(getattr(e, "detail_text", "") or "")
                why = "TLS refused: " + detail[:200] if "SSL" in detail else type(e).__name__
                errors.append(f"{self.endpoints[n]}: {why}")
                continue
            except etcd_errors.Etcd3Exception as e:
                code, message = _etcd_error(e)
                if code == _RESOURCE_EXHAUSTED and "space exceeded" in message:  # etcd's NOSPACE alarm
                    raise StoreFull(f"etcd {self.endpoints[n]}: {path}: etcd's space quota is used up, nothing was "
                                    f"written ({message}); compact, defragment and disarm the alarm (docs/ha.md)") from None
                raise StoreUnavailable(f"etcd {self.endpoints[n]}: {path}: {e.detail_text if hasattr(e, 'detail_text') else e}") from None
            with self._lock:
                self._current = n
            return answer
        raise StoreUnavailable(f"no etcd endpoint answered ({'; '.join(errors)})")

    # -- kv --------------------------------------------------------------------------------

    def range(self, key: str, range_end: str | bytes | None = None, limit: int | None = None) -> tuple[list[dict], int]:
        """The key-values (decoded: key, value as str, create_revision, mod_revision,
        lease) of `key` (or [key, range_end), in key order, at most `limit` of
        them), and the store's revision."""
        body: dict[str, Any] = {"key": _b64(key)}
        if range_end is not None:
            body["range_end"] = _b64(range_end)
        if limit is not None:
            body["limit"] = str(limit)
        answer = self.post("kv/range", body)
        return [self._kv(kv) for kv in answer.get("kvs", [])], int(answer["header"]["revision"])

    @staticmethod
    def _kv(kv: dict) -> dict:
        return {
            "key": _unb64(kv["key"]).decode(),
            "value": _unb64(kv.get("value", "")).decode(),
            "create_revision": int(kv.get("create_revision", 0)),
            "mod_revision": int(kv.get("mod_revision", 0)),
            "lease": int(kv.get("lease", 0)),
        }

    def txn(self, compare: list[dict], success: list[dict], failure: list[dict] | None = None) -> tuple[bool, list[dict], int]:
        """One transaction: (succeeded, the responses, the revision after it)."""
        answer = self.post("kv/txn", {"compare": compare, "success": success, "failure": failure or []})
        responses = []
        for r in answer.get("responses", []):
            if "response_range" in r:
                responses.append({"kvs": [self._kv(kv) for kv in r["response_range"].get("kvs", [])]})
            else:
                responses.append(r)
        return bool(answer.get("succeeded", False)), responses, int(answer["header"]["revision"])

    # -- leases ----------------------------------------------------------------------------

    def grant(self, ttl: int) -> tuple[int, int]:
        """A new lease: (its id, its TTL in seconds as etcd granted it)."""
        answer = self.post("lease/grant", {"TTL": ttl})
        if answer.get("error"):
            raise StoreUnavailable(f"etcd refused a lease: {answer['error']}")
        return int(answer["ID"]), int(answer["TTL"])

    def keepalive(self, lease: int) -> int:
        """Renew `lease`; its remaining TTL, 0 if it has expired."""
        answer = self.post("lease/keepalive", {"ID": lease})
        return int(answer.get("result", {}).get("TTL", 0))

    def revoke(self, lease: int) -> None:
        self.post("kv/lease/revoke", {"ID": lease})


# -- transaction parts (the gateway's JSON form of etcdserverpb) ----------------------------

def cmp_created(key: str, revision: int) -> dict:
    """The key's create revision equals `revision` (0: the key is absent)."""
    return {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": str(revision)}


def cmp_modified(key: str, revision: int) -> dict:
    return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def cmp_value(key: str, value: str) -> dict:
    return {"key": _b64(key), "target": "VALUE", "result": "EQUAL", "value": _b64(value)}


def put(key: str, value: str, lease: int = 0) -> dict:
    body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        body["lease"] = str(lease)
    return {"request_put": body}


def delete(key: str) -> dict:
    return {"request_delete_range": {"key": _b64(key)}}


def get(key: str) -> dict:
    return {"request_range": {"key": _b64(key)}}


# -- the store -------------------------------------------------------------------------------

class EtcdJobStore:
    """Jobs and controller state under `prefix` in etcd (see the module docstring).

    `client` is an `EtcdClient` (or anything with its `range` and `txn`)."""

    def __init__(self, client: EtcdClient, prefix: str = "/mcast-controller/") -> None:
        self.client = client
        self.prefix = prefix
        self.path = f"etcd {','.join(client.endpoints)} {prefix}"  # for messages, as JobStore.path
        self._fence: list[dict] = []
        self._fence_lock = threading.Lock()
        self._skipped = SkippedRecords()
        try:
            self.client.range(prefix + "jobs/", prefix_end(prefix + "jobs/"))
        except StoreUnavailable as e:
            raise StoreError(f"{self.path}: cannot open the job store: {e}") from None

    @classmethod
    def from_config(cls, etcd_config) -> EtcdJobStore:
        return cls(EtcdClient.from_config(etcd_config), etcd_config.prefix)

    # -- keys --------------------------------------------------------------------------------

    def _job_key(self, job_id: str) -> str:
        return f"{self.prefix}jobs/{job_id}"

    def _addr_key(self, address: str) -> str:
        return f"{self.prefix}addr/{address}"

    def _state_key(self, key: str) -> str:
        return f"{self.prefix}state/{key}"

    # -- fencing ---------------------------------------------------------------------------

    def fence(self, key: str | None, revision: int = 0) -> None:
        """Make every later write conditional on `key` having create revision
        `revision` (the leader key of this instance's term); None: no condition."""
        with self._fence_lock:
            self._fence = [] if key is None else [cmp_created(key, revision)]

    def _fenced_txn(self, compare: list[dict], success: list[dict], failure: list[dict] | None = None):
        with self._fence_lock:
            fence = list(self._fence)
        ok, responses, revision = self.client.txn(fence + compare, success, failure)
        if not ok and fence:
            # find out whether the fence or the caller's own comparison failed
            held, _, _ = self.client.txn(fence, [])
            if not held:
                raise Fenced(f"{self.path}: this instance is no longer the leader; the write was refused")
        return ok, responses, revision

    def close(self) -> None:
        pass

    def __enter__(self) -> EtcdJobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs --------------------------------------------------------------------------------

    @staticmethod
    def _encode(job: Job, address: str | None, auth_key: bytes | None = None, tenant: str | None = None) -> str:
        record = {"ps": job.ps, "workers": list(job.workers), "demand": job.demand,
                  "weight": job.weight, "group_address": address}
        if auth_key is not None:
            record["auth_key"] = _b64(auth_key)
        if tenant is not None:
            record["tenant"] = tenant
        return json.dumps(record, sort_keys=True)

    def _decode(self, kv: dict) -> StoredJob | None:
        """The stored job of a key-value; None (logged, counted) if it is no valid
        job (`store.records`)."""
        job_id = kv["key"][len(self.prefix) + len("jobs/"):]
        where = f"{self.path}: key {kv['key']!r:.120} (revision {kv['mod_revision']})"
        try:
            if len(kv["value"]) > MAX_RECORD_BYTES:
                raise BadRecord(f"{where}: record: {len(kv['value'])} bytes, more than {MAX_RECORD_BYTES}")
            try:
                d = json.loads(kv["value"])
            except ValueError:
                raise BadRecord(f"{where}: record: not JSON") from None
            job, address, key, tenant = job_from_record(job_id, d, where)
        except BadRecord as e:
            self._skipped.note(f"{kv['key']}@{kv['mod_revision']}", e)
            return None
        return StoredJob(job, address, kv["create_revision"], key, tenant)

    @property
    def skipped_records(self) -> int:
        """How many job records were read back and refused (`store.records`) since the store was opened."""
        return len(self._skipped)

    def add(self, job: Job, group_address: str | None = None, auth_key: bytes | None = None,
            tenant: str | None = None) -> StoredJob:
        """Store `job`; raises DuplicateJobId / DuplicateGroupAddress and then stores nothing."""
        # what SQLite's CHECK constraints refuse
        if not job.demand > 0:
            raise ValueError(f"job {job.id!r} cannot be stored: demand must be > 0")
        if not job.weight > 0:
            raise ValueError(f"job {job.id!r} cannot be stored: weight must be > 0")
        jkey = self._job_key(job.id)
        compare = [cmp_created(jkey, 0)]
        success = [put(jkey, self._encode(job, group_address, auth_key, tenant))]
        if group_address is not None:
            compare.append(cmp_created(self._addr_key(group_address), 0))
            success.append(put(self._addr_key(group_address), job.id))
        ok, _, revision = self._fenced_txn(compare, success, [get(jkey)])
        if not ok:
            existing, _ = self.client.range(jkey)
            if existing:
                raise DuplicateJobId(f"a job with id {job.id!r} exists")
            raise DuplicateGroupAddress(f"group address {group_address} is held by another job")
        # the job key was created by this transaction: its create revision is the revision
        return StoredJob(job, group_address, revision, auth_key, tenant)

    def delete(self, job_id: str) -> bool:
        """Remove the job; False if there was none with that id."""
        jkey = self._job_key(job_id)
        for _ in range(MAX_RETRIES):
            kvs, _ = self.client.range(jkey)
            if not kvs:
                return False
            kv = kvs[0]
            sj = self._decode(kv)
            address = sj.group_address if sj is not None else None
            success = [delete(jkey)]
            if address is not None:
                akey = self._addr_key(address)
                # the index entry goes only if it is still this job's
                ok, _, _ = self._fenced_txn(
                    [cmp_modified(jkey, kv["mod_revision"]), cmp_value(akey, job_id)], success + [delete(akey)])
                if ok:
                    return True
            ok, _, _ = self._fenced_txn([cmp_modified(jkey, kv["mod_revision"])], success)
            if ok:
                return True
        raise StoreUnavailable(f"{self.path}: job {job_id!r} kept changing while being deleted")

    def get(self, job_id: str) -> StoredJob | None:
        kvs, _ = self.client.range(self._job_key(job_id))
        return self._decode(kvs[0]) if kvs else None  # None also for a record that is no valid job

    def jobs(self) -> list[StoredJob]:
        """Every stored job, in creation order."""
        return self.jobs_at()[0]

    def jobs_at(self) -> tuple[list[StoredJob], int]:
        """Every stored job in creation order, and the etcd revision they were read at."""
        start = self.prefix + "jobs/"
        kvs, revision = self.client.range(start, prefix_end(start))
        decoded = [sj for sj in map(self._decode, kvs) if sj is not None]
        return sorted(decoded, key=lambda s: s.seq), revision

    def revision(self) -> int:
        """etcd's current revision (raised by every write anywhere in etcd)."""
        _, revision = self.client.range(self.prefix + "jobs/", prefix_end(self.prefix + "jobs/"))
        return revision

    def __len__(self) -> int:
        return len(self.jobs())

    def set_group_addresses(self, addresses: dict[str, str | None]) -> None:
        """Set the group address of several jobs in one transaction (unknown ids are ignored)."""
        for _ in range(MAX_RETRIES):
            current: dict[str, dict] = {}
            decoded: dict[str, StoredJob] = {}
            for job_id in addresses:
                kvs, _ = self.client.range(self._job_key(job_id))
                sj = self._decode(kvs[0]) if kvs else None
                if sj is not None:  # a record that is no valid job is left as it is
                    current[job_id], decoded[job_id] = kvs[0], sj
            if not current:
                return
            new = {j: addresses[j] for j in current}
            taken = [a for a in new.values() if a is not None]
            if len(taken) != len(set(taken)):
                raise DuplicateGroupAddress("group addresses not stored: two jobs were given the same address")
            old = {j: sj.group_address for j, sj in decoded.items()}
            freed = {a for a in old.values() if a is not None}
            compare = [cmp_modified(self._job_key(j), kv["mod_revision"]) for j, kv in current.items()]
            success = []
            for j in current:
                sj = decoded[j]
                success.append(put(self._job_key(j), self._encode(sj.job, new[j], sj.auth_key, sj.tenant)))
            for a in sorted(freed - set(taken)):
                success.append(delete(self._addr_key(a)))
            for j, a in new.items():
                if a is None:
                    continue
                if a not in freed:  # it must be free now
                    compare.append(cmp_created(self._addr_key(a), 0))
                success.append(put(self._addr_key(a), j))
            ok, _, _ = self._fenced_txn(compare, success)
            if ok:
                return
            for a in set(taken) - freed:
                held, _ = self.client.range(self._addr_key(a))
                if held:
                    raise DuplicateGroupAddress(f"group addresses not stored: {a} is held by job {held[0]['value']!r}")
        raise StoreUnavailable(f"{self.path}: the jobs kept changing while their addresses were set")

    # -- controller state -----------------------------------------------------------------

    def get_state(self, key: str) -> Any | None:
        """The JSON value stored under `key`, or None."""
        kvs, _ = self.client.range(self._state_key(key))
        return json.loads(kvs[0]["value"]) if kvs else None

    def put_state(self, key: str, value: Any) -> None:
        text = json.dumps(value, allow_nan=False, sort_keys=True)
        self._fenced_txn([], [put(self._state_key(key), text)])

    def state_items(self, prefix: str) -> dict[str, Any]:
        """Every state key starting with `prefix` and its value (`base.decode_state`)."""
        start = self._state_key(prefix)
        kvs, _ = self.client.range(start, prefix_end(start))
        cut = len(self._state_key(""))
        return {kv["key"][cut:]: decode_state(kv["value"]) for kv in kvs}

    def state_page(self, prefix: str, after: str | None, limit: int) -> list[tuple[str, Any]]:
        """At most `limit` state keys starting with `prefix`, in key order, after
        `after` (None: from the first), with their values (`base.decode_state`):
        one range request with etcd's `limit`."""
        if limit < 1:
            raise ValueError(f"limit {limit}: at least 1")
        start = self._state_key(prefix)
        first = start if after is None or after < prefix else self._state_key(after) + "\0"
        kvs, _ = self.client.range(first, prefix_end(start), limit)
        cut = len(self._state_key(""))
        return [(kv["key"][cut:], decode_state(kv["value"])) for kv in kvs]

    def put_states(self, values: Mapping[str, Any]) -> None:
        """Write several state keys (a value None deletes its key) in transactions of
        at most `TXN_OPS` operations and about `TXN_BYTES` bytes, below etcd's
        defaults (`--max-txn-ops` 128, `--max-request-bytes` 1.5 MiB): each is
        atomic, together they are not (a failure raises after the ones before it
        were written)."""
        ops: list[dict] = []
        size = 0
        for key, value in values.items():
            if value is None:
                op, n = delete(self._state_key(key)), len(key)
            else:
                text = json.dumps(value, allow_nan=False, sort_keys=True)
                op, n = put(self._state_key(key), text), len(key) + len(text)
            if ops and (len(ops) >= TXN_OPS or size + n > TXN_BYTES):
                self._fenced_txn([], ops)
                ops, size = [], 0
            ops.append(op)
            size += n
        if ops:
            self._fenced_txn([], ops)
