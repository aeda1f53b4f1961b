"""The job store: registered jobs in an SQLite file, so that they survive a restart.

One table holds the jobs, in the order they were created (`seq`, never reused),
with the multicast group address each job holds: after a restart every job keeps
its address, so the switches can be reconciled rather than rebuilt. A second,
small key-value table keeps controller state that must also survive a restart
(the per-switch group and meter ids of the last translation, and the learned
port map and host MACs it used).

Every write is one transaction: it happens completely or not at all. A write
that cannot take the file's lock within `busy_timeout_s` (another process holds
it), or whose COMMIT fails, is rolled back and raises `StoreUnavailable` (the
REST API answers 503 with Retry-After); the next write starts afresh. A write
that fails because the disk is full (SQLITE_FULL, or an I/O error while the
file system has no space left for the journal) is rolled back and raises
`StoreFull` (507); writes work again once space returns. Every row read back is
checked (`store.records`): one that is no valid job is logged, counted
(`skipped_records`) and skipped. The store
is safe to use from several threads (one connection, serialised by a lock).
It validates nothing about the network; the service does that before it writes.

Schema versions (`PRAGMA user_version`): 1 had no job keys; 2 adds the column
`auth_key` (a job's 32-byte broadcast key, NULL for jobs stored before); 3 adds
`tenant` (the owning tenant, NULL for the admin's jobs and jobs stored before).
An older file is migrated when opened (the columns added, in one transaction).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
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
    MAX_STATE_BYTES,
    decode_state,
    prefix_upper,
)
from controller.store.records import SkippedRecords, job_from_record

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3
_SQLITE_FULL = 13  # the primary result code of "database or disk is full"
_SQLITE_IOERR = 10  # an I/O error: ENOSPC on the journal or the WAL is reported so by some VFS paths

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT    NOT NULL UNIQUE,
    ps            TEXT    NOT NULL,
    workers       TEXT    NOT NULL,
    demand        REAL    NOT NULL CHECK (demand > 0),
    weight        REAL    NOT NULL CHECK (weight > 0),
    group_address TEXT    UNIQUE,
    auth_key      BLOB,
    tenant        TEXT
);
CREATE TABLE IF NOT EXISTS state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


class JobStore:
    """Jobs in the SQLite file `path` (created if absent; ':memory:' for tests)."""

    def __init__(self, path: str | Path, busy_timeout_s: float = 5.0) -> None:
        self.path = str(path)
        self._skipped = SkippedRecords()
        self._lock = threading.Lock()
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None)
            self._conn.execute("PRAGMA foreign_keys = ON")
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, 1, 2, SCHEMA_VERSION):
                raise StoreError(f"{self.path}: job store schema version {version}, this controller knows {SCHEMA_VERSION}")
            # version 1 -> 2: the jobs table gains `auth_key`; 2 -> 3: `tenant` (NULL for the jobs it holds)
            migrate = "ALTER TABLE jobs ADD COLUMN auth_key BLOB;" if version == 1 else ""
            migrate += "ALTER TABLE jobs ADD COLUMN tenant TEXT;" if version in (1, 2) else ""
            with self._transaction():
                self._conn.executescript("BEGIN;" + migrate + _SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION};COMMIT;")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: cannot open the job store: {e}") from None
        except OSError as e:
            raise StoreError(f"{self.path}: cannot open the job store: {e.strerror or e}") from None

    # -- plumbing ----------------------------------------------------------------------

    @contextmanager
    def _transaction(self, begin: bool = False) -> Iterator[sqlite3.Connection]:
        """The lock, and with `begin` an explicit transaction: committed when the
        block succeeds, rolled back when it raises."""
        with self._lock:
            if not begin:
                yield self._conn
                return
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:  # another process holds the file
                raise StoreUnavailable(f"{self.path}: the job store is busy: {e}") from None
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                # a failed COMMIT (another process still reads the file) leaves the transaction
                # open: end it, or every later write fails with "cannot start a transaction
                # within a transaction"
                if self._conn.in_transaction:
                    try:
                        self._conn.execute("ROLLBACK")
                    except sqlite3.Error as e:  # SQLite rolls back itself after SQLITE_FULL
                        log.warning("%s: ROLLBACK failed: %s", self.path, e)
                if isinstance(exc, sqlite3.Error) and self._disk_full(exc):
                    raise StoreFull(f"{self.path}: the disk of the job store is full, nothing was written: {exc}") from None
                if isinstance(exc, sqlite3.OperationalError):
                    raise StoreUnavailable(f"{self.path}: the job store is busy, nothing was written: {exc}") from None
                raise

    def _disk_full(self, exc: sqlite3.Error) -> bool:
        """True when `exc` is SQLITE_FULL, or an I/O error while the file's
        filesystem has no space left (ENOSPC on the journal or the WAL)."""
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None and code & 0xFF == _SQLITE_FULL:
            return True
        if "database or disk is full" in str(exc):
            return True
        if (code is not None and code & 0xFF == _SQLITE_IOERR) and self.path != ":memory:":
            try:
                st = os.statvfs(Path(self.path).parent)
            except OSError as e:
                return e.errno == errno.ENOSPC
            return st.f_bavail == 0 or st.f_bfree == 0
        return False

    @property
    def skipped_records(self) -> int:
        """How many job rows were read back and refused (`store.records`) since the store was opened."""
        return len(self._skipped)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs ---------------------------------------------------------------------------

    def _row(self, row: tuple) -> StoredJob | None:
        """The stored job of a row; None (logged, counted) if the row is no valid
        job (`store.records`)."""
        seq, job_id, ps, workers, demand, weight, address, key, tenant = row
        where = f"{self.path}: job row {seq}"
        try:
            try:
                worker_list = json.loads(workers) if isinstance(workers, str) else workers
            except ValueError:
                raise BadRecord(f"{where}: workers: not a JSON list") from None
            record = {"ps": ps, "workers": worker_list, "demand": demand, "weight": weight,
                      "group_address": address, "auth_key": key, "tenant": tenant}
            job, address, key, tenant = job_from_record(job_id, record, where)
        except BadRecord as e:
            self._skipped.note(f"{seq}:{job_id!r}:{ps!r}:{workers!r}:{demand!r}:{weight!r}:{address!r}", e)
            return None
        return StoredJob(job, address, seq, key, tenant)

    def add(self, job: Job, group_address: str | None = None, auth_key: bytes | None = None,
            tenant: str | None = None) -> StoredJob:
        """Store `job`; raises DuplicateJobId / DuplicateGroupAddress and then stores nothing."""
        try:
            with self._transaction(begin=True) as conn:
                cur = conn.execute(
                    "INSERT INTO jobs (id, ps, workers, demand, weight, group_address, auth_key, tenant)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (job.id, job.ps, json.dumps(list(job.workers)), job.demand, job.weight, group_address, auth_key,
                     tenant),
                )
                seq = cur.lastrowid
        except sqlite3.IntegrityError as e:
            text = str(e)
            if "jobs.id" in text:
                raise DuplicateJobId(f"a job with id {job.id!r} exists") from None
            if "jobs.group_address" in text:
                raise DuplicateGroupAddress(f"group address {group_address} is held by another job") from None
            raise ValueError(f"job {job.id!r} cannot be stored: {text}") from None
        return StoredJob(job, group_address, seq, auth_key, tenant)

    def delete(self, job_id: str) -> bool:
        """Remove the job; False if there was none with that id."""
        with self._transaction(begin=True) as conn:
            cur = conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
            return cur.rowcount > 0

    def get(self, job_id: str) -> StoredJob | None:
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT seq, id, ps, workers, demand, weight, group_address, auth_key, tenant FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
        return None if row is None else self._row(row)  # None also for a row that is no valid job

    def jobs(self) -> list[StoredJob]:
        """Every stored job, in creation order."""
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT seq, id, ps, workers, demand, weight, group_address, auth_key, tenant FROM jobs ORDER BY seq"
            ).fetchall()
        return [sj for sj in map(self._row, rows) if sj is not None]

    def __len__(self) -> int:
        with self._transaction() as conn:
            return conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]

    def set_group_addresses(self, addresses: dict[str, str | None]) -> None:
        """Set the group address of several jobs in one transaction (unknown ids are ignored)."""
        try:
            with self._transaction(begin=True) as conn:
                # clear first, so that two jobs may swap addresses within one call
                conn.executemany("UPDATE jobs SET group_address = NULL WHERE id = ?", [(j,) for j in addresses])
                conn.executemany(
                    "UPDATE jobs SET group_address = ? WHERE id = ?", [(a, j) for j, a in addresses.items()]
                )
        except sqlite3.IntegrityError as e:
            raise DuplicateGroupAddress(f"group addresses not stored: {e}") from None

    # -- controller state -----------------------------------------------------------------

    def get_state(self, key: str) -> Any | None:
        """The JSON value stored under `key`, or None."""
        with self._transaction() as conn:
            row = conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put_state(self, key: str, value: Any) -> None:
        text = json.dumps(value, allow_nan=False, sort_keys=True)
        with self._transaction(begin=True) as conn:
            conn.execute(
                "INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, text),
            )

    def state_items(self, prefix: str) -> dict[str, Any]:
        """Every state key starting with `prefix` and its value (`base.decode_state`)."""
        with self._transaction() as conn:
            rows = conn.execute("SELECT key, value FROM state WHERE substr(key, 1, ?) = ?",
                                (len(prefix), prefix)).fetchall()
        return {key: decode_state(value) for key, value in rows}

    def state_page(self, prefix: str, after: str | None, limit: int) -> list[tuple[str, Any]]:
        """At most `limit` state keys starting with `prefix`, in key order, after
        `after` (None: from the first), with their values (`base.decode_state`; a
        value longer than `MAX_STATE_BYTES` is not even read out of SQLite)."""
        if limit < 1:
            raise ValueError(f"limit {limit}: at least 1")
        upper = prefix_upper(prefix)
        low, op = (prefix, ">=") if after is None or after < prefix else (after, ">")
        query = (f"SELECT key, CASE WHEN length(value) > ? THEN '' ELSE value END FROM state "
                 f"WHERE key {op} ? AND substr(key, 1, ?) = ?{' AND key < ?' if upper is not None else ''} "
                 "ORDER BY key LIMIT ?")
        params = (MAX_STATE_BYTES, low, len(prefix), prefix, *((upper,) if upper is not None else ()), limit)
        with self._transaction() as conn:
            rows = conn.execute(query, params).fetchall()
        return [(key, decode_state(value)) for key, value in rows]

    def put_states(self, values: Mapping[str, Any]) -> None:
        """Write several state keys in one transaction (a value None deletes its key)."""
        texts = {k: None if v is None else json.dumps(v, allow_nan=False, sort_keys=True) for k, v in values.items()}
        with self._transaction(begin=True) as conn:
            conn.executemany("DELETE FROM state WHERE key = ?", [(k,) for k, t in texts.items() if t is None])
            conn.executemany(
                "INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [(k, t) for k, t in texts.items() if t is not None],
            )
