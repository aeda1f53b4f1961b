"""What every job store is: the records, the errors and the interface (`Store`).

Two stores implement it: SQLite (`store.sqlite`, one controller instance) and
etcd (`store.etcd`, several instances sharing one store, docs/ha.md). The core
uses only this interface: jobs with their group addresses, and a small key-value
table of controller state that must survive a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import json
from collections.abc import Mapping
from typing import Any, Protocol

from controller.algorithm.model import Job


MAX_STATE_BYTES = 1 << 20  # a state value read back longer than this is not decoded (`state_items`)


def prefix_upper(prefix: str) -> str | None:
    """The smallest text above every key starting with `prefix` (its last character
    below the largest one incremented, the rest dropped); None: no such text."""
    while prefix:
        last = ord(prefix[-1])
        if last < 0x10FFFF:
            return prefix[:-1] + chr(last + 1 if last + 1 not in range(0xD800, 0xE000) else 0xE000)
        prefix = prefix[:-1]
    return None


def decode_state(text: str) -> Any:
    """A state value read back by `state_items`: its JSON, its text if it is no
    JSON, "" if it is longer than `MAX_STATE_BYTES` (never decoded)."""
    if len(text) > MAX_STATE_BYTES:
        return ""
    try:
        return json.loads(text)
    except ValueError:
        return text


class StoreError(RuntimeError):
    """The store file cannot be opened or has an unexpected format."""


class StoreUnavailable(StoreError):
    """The store cannot take the request now (no etcd endpoint answered, or the
    SQLite file is locked by another process): nothing was written; retry later."""


class StoreFull(StoreUnavailable):
    """The store's disk is full (SQLite's SQLITE_FULL, ENOSPC on the file, its
    journal or its WAL; etcd's space quota used up, its NOSPACE alarm): nothing
    was written; writes work again once space returns. The REST API answers 507
    `insufficient_storage`."""


class BadRecord(StoreError):
    """A stored job record read back does not hold a valid job (`store.records`):
    it is skipped (logged and counted), never planned."""


class DuplicateJobId(ValueError):
    """A job with this id is already stored."""


class DuplicateGroupAddress(ValueError):
    """Another stored job already holds this group address."""


@dataclass(frozen=True)
class StoredJob:
    """A job as stored: the job, its group address (None if it has none yet),
    its creation sequence number (increasing, never reused) and its broadcast key
    (`auth_key`, 32 random bytes: the HMAC key of its NORM objects, given only to
    its registrant; None for a job stored before keys existed). The key is never
    shown in a repr or log. `tenant`: the tenant that owns it (None: the admin's,
    or stored before tenants existed)."""

    job: Job
    group_address: str | None
    seq: int
    auth_key: bytes | None = field(default=None, repr=False)
    tenant: str | None = None


class Store(Protocol):
    """The interface of a job store (`store.sqlite.JobStore`, `store.etcd.EtcdJobStore`).

    Every write is atomic: it happens completely or not at all, except
    `put_states` on etcd, which writes in transactions of a bounded size (each
    of them atomic). `path` names the store in error messages.

    State: `get_state`/`put_state` read and write one JSON value under a key;
    `state_items(prefix)` reads every state key starting with `prefix` (a value
    that is not JSON, or longer than `MAX_STATE_BYTES`, is given as its text, or
    as "" when too long: the caller checks what it reads); `state_page(prefix,
    after, limit)` reads at most `limit` of them, in key order, after the key
    `after` (None: from the first), so that a caller can read a prefix that may
    hold any number of keys in bounded pages; `put_states` writes several keys (a
    value None deletes its key)."""

    path: str
    skipped_records: int  # records read back and refused (`store.records`), since the store was opened

    def add(self, job: Job, group_address: str | None = None, auth_key: bytes | None = None,
            tenant: str | None = None) -> StoredJob: ...

    def delete(self, job_id: str) -> bool: ...

    def get(self, job_id: str) -> StoredJob | None: ...

    def jobs(self) -> list[StoredJob]: ...

    def __len__(self) -> int: ...

    def set_group_addresses(self, addresses: dict[str, str | None]) -> None: ...

    def get_state(self, key: str) -> Any | None: ...

    def put_state(self, key: str, value: Any) -> None: ...

    def state_items(self, prefix: str) -> dict[str, Any]: ...

    def state_page(self, prefix: str, after: str | None, limit: int) -> list[tuple[str, Any]]: ...

    def put_states(self, values: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...
