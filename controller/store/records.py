"""A job record read back from a store, checked before it becomes a `StoredJob`.

Both stores (`store.sqlite`, `store.etcd`) call `job_from_record` on every job
record they read. A store is written by this controller, but it is also a file
on a disk and keys in a shared etcd that others can write: a record with a NaN,
infinite, zero or negative demand or weight, a PS or worker that is not a host
name, a job id the API would refuse, a field of the wrong type, a group address
that is not an IPv4 multicast address, a broadcast key of the wrong length, or
a list longer than any registration could make is refused with `BadRecord`
(naming the field). The stores log it, count it (`skipped_records`, shown by
GET /healthz as `store_records_skipped`) and skip the record: it is never
planned, and it never stops the controller from starting.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import logging
import math
import re
import threading
from collections.abc import Mapping
from typing import Any

from controller.algorithm.model import Job
from controller.config.tenants import TENANT_NAME_PATTERN
from controller.store.base import BadRecord

log = logging.getLogger(__name__)

JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"
_JOB_ID_RE = re.compile(JOB_ID_PATTERN)
_TENANT_RE = re.compile(TENANT_NAME_PATTERN)
MAX_HOST_NAME = 255  # as the REST API's ps and workers fields
MAX_WORKERS = 4096  # far beyond any registration: a larger list is not a record this controller wrote
AUTH_KEY_BYTES = 32


def job_from_record(job_id: Any, record: Mapping[str, Any], where: str
                    ) -> tuple[Job, str | None, bytes | None, str | None]:
    """The job, its group address, its broadcast key and its tenant of one stored record.

    `record` has the fields ps, workers (a list), demand, weight, group_address
    (optional), auth_key (optional: bytes, or base64 text as etcd keeps it) and
    tenant (optional: the owning tenant's name, `TENANT_NAME_PATTERN`); `where`
    names the record in the error. Raises `BadRecord` naming the field."""

    def bad(field: str, why: str) -> BadRecord:
        return BadRecord(f"{where}: {field}: {why}")

    if not isinstance(job_id, str) or not _JOB_ID_RE.fullmatch(job_id):
        raise bad("id", f"must match {JOB_ID_PATTERN}, got {job_id!r:.80}")
    if not isinstance(record, Mapping):
        raise bad("record", f"expected an object, got {type(record).__name__}")
    for name in ("ps", "workers", "demand", "weight"):
        if name not in record:
            raise bad(name, "missing")
    ps = _host(record["ps"], "ps", bad)
    workers = record["workers"]
    if not isinstance(workers, (list, tuple)):
        raise bad("workers", f"expected a list of host names, got {type(workers).__name__}")
    if not 1 <= len(workers) <= MAX_WORKERS:
        raise bad("workers", f"expected 1 to {MAX_WORKERS} hosts, got {len(workers)}")
    names = tuple(_host(w, f"workers[{i}]", bad) for i, w in enumerate(workers))
    if len(set(names)) != len(names):
        raise bad("workers", "a host appears twice")
    if ps in names:
        raise bad("workers", f"holds the PS {ps!r}")
    demand = _positive(record["demand"], "demand", bad)
    weight = _positive(record["weight"], "weight", bad)
    address = record.get("group_address")
    if address is not None:
        if not isinstance(address, str):
            raise bad("group_address", f"expected an IPv4 multicast address, got {type(address).__name__}")
        try:
            ip = ipaddress.IPv4Address(address)
        except ValueError:
            raise bad("group_address", f"not an IPv4 address: {address!r:.80}") from None
        if not ip.is_multicast:
            raise bad("group_address", f"{address} is not a multicast address")
    key = record.get("auth_key")
    if isinstance(key, str):
        try:
            key = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raise bad("auth_key", "not base64") from None
    if key is not None:
        if not isinstance(key, (bytes, bytearray, memoryview)):
            raise bad("auth_key", f"expected bytes, got {type(key).__name__}")
        key = bytes(key)
        if len(key) != AUTH_KEY_BYTES:
            raise bad("auth_key", f"expected {AUTH_KEY_BYTES} bytes, got {len(key)}")
    tenant = record.get("tenant")
    if tenant is not None and (not isinstance(tenant, str) or not _TENANT_RE.fullmatch(tenant)):
        raise bad("tenant", f"must match {TENANT_NAME_PATTERN}, got {tenant!r:.80}")
    return Job(job_id, ps, names, demand, weight), address, key, tenant


def _host(value: Any, field: str, bad) -> str:
    if not isinstance(value, str):
        raise bad(field, f"expected a host name, got {type(value).__name__}")
    if not 1 <= len(value) <= MAX_HOST_NAME or not value.isprintable() or value.strip() != value:
        raise bad(field, f"not a host name: {value!r:.80}")
    return value


def _positive(value: Any, field: str, bad) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(field, f"expected a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise bad(field, f"must be a finite number > 0, got {value!r:.40}") from None
    if not math.isfinite(number) or number <= 0:
        raise bad(field, f"must be a finite number > 0, got {value!r}")
    return number


class SkippedRecords:
    """The records a store refused, each counted and logged once (a store reads its
    records again and again: a follower on every change, GET /jobs on every call)."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}
        self._lock = threading.Lock()

    def note(self, record: str, error: BadRecord) -> None:
        """`record` (its key and version) was refused with `error`."""
        with self._lock:
            if record in self._seen:
                return
            self._seen[record] = str(error)
        log.error("skipping a stored job record that is not valid (it is not planned): %s", error)

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)
