"""The embedded store: etcd's data model in one SQLite file that several processes share.

No server: every process opens ``file:///path/job.db`` and SQLite's locking serialises writers
(WAL mode, ``BEGIN IMMEDIATE``, a busy timeout). The tables mirror etcd v3:

- ``meta``: the global ``revision`` (one more per write transaction that changes something) and
  ``compact_revision`` (events at or below it were pruned).
- ``kv``: key -> value, create/mod revision, version, lease.
- ``events``: one row per PUT/DELETE, ``(rev, seq)`` ordered; watches poll it.
- ``leases``: id, ttl, expiry time.

Lease expiry times use ``CLOCK_MONOTONIC``, which on Linux counts from boot and is the same
clock in every process on the machine, so one process can decide that another's lease has
expired; wall-clock jumps (NTP) cannot expire or resurrect a lease. Expired leases are reaped
lazily by every operation and by a reaper thread in every open store, which sleeps until the
earliest expiry (at most 1 s), so their keys vanish and DELETE events appear even when nobody
writes.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from elasticps.errors import ConfigError, LeaseExpiredError, StoreError, StoreUnavailableError
from elasticps.private_files import FILE_MODE, check_owned, make_private_dir
from elasticps.retry import RetryPolicy
from elasticps.store._common import (
    QueueWatch,
    ThreadedLease,
    check_compares,
    check_key,
    check_ops,
    check_prefix,
    check_ttl,
    check_value,
    prefix_range_end,
)
from elasticps.store.api import (
    Compare,
    CompareTarget,
    Delete,
    Event,
    EventType,
    KeyValue,
    Lease,
    Op,
    Put,
    Store,
    TxnResult,
    Watch,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS kv (
    key BLOB PRIMARY KEY, value BLOB NOT NULL, create_rev INTEGER NOT NULL,
    mod_rev INTEGER NOT NULL, version INTEGER NOT NULL, lease INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS kv_by_lease ON kv(lease) WHERE lease != 0;
CREATE TABLE IF NOT EXISTS events (
    rev INTEGER NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, key BLOB NOT NULL,
    value BLOB NOT NULL, PRIMARY KEY (rev, seq));
CREATE TABLE IF NOT EXISTS leases (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ttl INTEGER NOT NULL, expires_at REAL NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('revision', 1), ('compact_revision', 0);
"""

_COLUMNS = "key, value, create_rev, mod_rev, version, lease"


def monotonic_now() -> float:
    """Seconds on the machine-wide monotonic clock (boot-based on Linux, same in every process)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class _Revision:
    """Allocates the next revision on the first change of a write transaction (etcd's rule:
    a transaction that changes nothing does not advance the revision)."""

    def __init__(self, cur: sqlite3.Cursor) -> None:
        self._cur = cur
        row = cur.execute("SELECT value FROM meta WHERE name='revision'").fetchone()
        self.current = int(row[0])
        self._next: int | None = None
        self._seq = 0

    def event(self, kind: EventType, key: bytes, value: bytes) -> int:
        if self._next is None:
            self._next = self.current + 1
        self._cur.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                          (self._next, self._seq, kind.value, key, value))
        self._seq += 1
        return self._next

    def finish(self) -> int:
        """Publish the revision; returns the store's revision after this transaction."""
        if self._next is not None:
            self._cur.execute("UPDATE meta SET value=? WHERE name='revision'", (self._next,))
            self.current, self._next, self._seq = self._next, None, 0
        return self.current


class _EmbeddedLease(ThreadedLease):
    def __init__(self, store: EmbeddedStore, lease_id: int, ttl: int) -> None:
        super().__init__(lease_id, ttl, store.describe)
        self._store = store

    def _refresh_once(self) -> bool:
        return self._store._refresh_lease(self.id, self.ttl)

    def _revoke_once(self) -> None:
        self._store._revoke_lease(self.id)


_WATCH_BATCH = 1000  # events one poll reads at most
# wait_deleted: how often a waiter looks for a delete (a resignation hands over within this),
# and how long after a lease's expiry time it looks (the expiry is "<=", so a hair after).
IDLE_POLL_S = 0.25
_EXPIRY_SLACK_S = 0.002


class _PollingWatch(QueueWatch):
    """Polls the events table from its own connection and thread."""

    def __init__(self, store: EmbeddedStore, prefix: bytes, next_rev: int) -> None:
        super().__init__()
        self._store = store
        self._start = prefix
        self._end = prefix_range_end(prefix) if prefix else b"\xff" * 8
        self._next_rev = next_rev
        self._thread = threading.Thread(target=self._run, name="embedded-store-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            conn = self._store._connect()
        except StoreError as exc:
            self.fail(exc)
            return
        try:
            while not self.cancelled:
                if not self._poll(conn):
                    return
                self._store._closed.wait(self._store.poll_interval)
                if self._store._closed.is_set():
                    return
        finally:
            conn.close()

    def _poll(self, conn: sqlite3.Connection) -> bool:
        prefix_len = len(self._store.prefix_bytes)
        try:
            with conn:  # one read snapshot for the revision, the compaction and the events
                current, compacted = (int(row[0]) for row in conn.execute(
                    "SELECT value FROM meta WHERE name IN ('revision', 'compact_revision') "
                    "ORDER BY name DESC").fetchall())
                rows = conn.execute(
                    "SELECT rev, type, key, value FROM events WHERE rev >= ? AND key >= ? "
                    "AND key < ? ORDER BY rev, seq LIMIT ?",
                    (self._next_rev, self._start, self._end, _WATCH_BATCH)).fetchall()
        except sqlite3.Error as exc:
            log.warning("Watch on %s could not read events (%s); retrying.",
                        self._store.describe, exc)
            return True
        if self._next_rev <= compacted:
            self.fail(StoreError(
                f"watch on {self._store.describe} needs events from revision {self._next_rev}, "
                f"but events up to revision {compacted} were compacted; re-read the state and "
                "watch from its revision + 1"))
            return False
        if len(rows) == _WATCH_BATCH and rows[0][0] != rows[-1][0]:
            # The limit may have cut the last revision's events: read that revision next time.
            next_rev = int(rows[-1][0])
            rows = [row for row in rows if row[0] != rows[-1][0]]
        else:
            # Every revision up to `current` is in this snapshot, and a revision's events are
            # committed together: none at or below it can arrive later. Moving past revisions
            # with no event for this prefix keeps a quiet watch in a busy job from scanning
            # every later event on every poll (up to keep_revisions rows, 40 times a second).
            next_rev = current + 1
        for rev, kind, key, value in rows:
            if self.cancelled:
                return False
            self.deliver(Event(EventType(kind), bytes(key[prefix_len:]).decode(), bytes(value),
                               int(rev)))
        self._next_rev = max(self._next_rev, next_rev)
        return True


# Errors of an open that races another process's last close (a missing file is not one).
_TRANSIENT_OPEN = ("disk I/O error", "database is locked")


class _TransientOpenError(sqlite3.OperationalError):
    pass


def _store_files(path: Path) -> tuple[Path, Path, Path]:
    """The database file and the -wal and -shm files SQLite keeps beside it."""
    return path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def _check_place(path: Path) -> None:
    """Refuse a store that another user could read or change: its directory and files must be
    this user's (or root's) and writable by nobody else. A sticky directory (``/tmp``) is not
    enough here: SQLite creates its -wal and -shm files beside the database with plain opens,
    so another user could create them first."""
    check_owned(path.parent, "the embedded store's directory")
    for existing in _store_files(path):
        check_owned(existing, "embedded store file")


def _create_private(path: Path) -> None:
    """Create the database file readable by its owner only (0600) if it does not exist; SQLite
    gives its -wal and -shm files the database file's mode.

    A file of ours that exists with a wider mode (a rerun of the same command) is narrowed to
    0600, with its -wal and -shm; another user's file is refused (:func:`_check_place`)."""
    _check_place(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        for existing in _store_files(path):
            _narrow_to_owner(existing)
        return
    except OSError as exc:
        raise StoreUnavailableError(f"cannot create the embedded store {path}: {exc}") from exc
    os.close(fd)


def _narrow_to_owner(path: Path) -> None:
    try:
        info = path.stat()
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
            path.chmod(FILE_MODE)
    except FileNotFoundError:  # a -wal or -shm that is not there (or just went)
        pass
    except OSError as exc:  # e.g. a read-only file system: opening decides
        log.warning("Could not make the embedded store file %s private (0600): %s", path, exc)


class EmbeddedStore(Store):
    """SQLite in WAL mode, shared by the processes of one machine. See the module docstring."""

    def __init__(self, path: str | os.PathLike[str], prefix: str = "", *,
                 keep_revisions: int = 10_000, poll_interval: float = 0.025,
                 reap_interval: float = 1.0, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.prefix = check_prefix(prefix)
        self.prefix_bytes = prefix.encode()
        self.describe = f"embedded store {self.path} ({prefix or '/'})"
        self.keep_revisions = keep_revisions
        self.poll_interval = poll_interval
        self._busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._registry_lock = threading.Lock()
        self._leases: list[ThreadedLease] = []
        self._watches: list[QueueWatch] = []
        make_private_dir(self.path.parent, narrow=False)
        _create_private(self.path)
        self._conn = self._connect()
        with self._lock:
            self._enable_wal()
            self._write(self._create_schema, reap=False)
        self._reaper = threading.Thread(target=self._reap_loop, args=(reap_interval,),
                                        name="embedded-store-reaper", daemon=True)
        self._reaper.start()

    @classmethod
    def from_url(cls, url: str, prefix: str = "") -> EmbeddedStore:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost") or not parsed.path:
            raise ConfigError(f"embedded store URL {url!r} must look like file:///path/to/job.db")
        return cls(urllib.parse.unquote(parsed.path), prefix)

    # -- plumbing ------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        """A connection, retried on a transient error: when the last connection of another
        process closes, SQLite deletes the -wal and -shm files, and an open racing that answers
        "disk I/O error" (seen once in a CI run) or "database is locked" without a busy wait."""
        policy = RetryPolicy(deadline=self._busy_timeout, initial_backoff=0.01, max_backoff=0.2,
                             retryable=(_TransientOpenError,))

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None,
                                   check_same_thread=False)
            try:
                conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: safe against a crash
                conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout * 1000)}")
            except sqlite3.OperationalError as exc:
                conn.close()
                if any(text in str(exc) for text in _TRANSIENT_OPEN):
                    raise _TransientOpenError(str(exc)) from exc
                raise
            except sqlite3.Error:
                conn.close()
                raise
            return conn

        try:
            return policy.call(connect, what=f"opening {self.describe}")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot open {self.describe}: {exc}") from exc

    def _enable_wal(self) -> None:
        """Switch a new file to WAL. While another connection opening the same new file holds
        a lock, SQLite skips its busy handler here: it answers "database is locked", or leaves
        the mode as it was; both are retried."""
        policy = RetryPolicy(deadline=self._busy_timeout, initial_backoff=0.01, max_backoff=0.2,
                             retryable=(sqlite3.OperationalError,))

        def switch() -> None:
            mode = str(self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
            if mode.lower() != "wal":
                raise sqlite3.OperationalError(f"journal mode is still {mode!r}")

        try:
            policy.call(switch, what=f"switching {self.describe} to WAL")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot open {self.describe}: {exc}") from exc

    @staticmethod
    def _create_schema(cur: sqlite3.Cursor) -> None:
        # Not executescript: it would COMMIT our BEGIN IMMEDIATE and let two processes race.
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                cur.execute(statement)

    def _full(self, key: str) -> bytes:
        return self.prefix_bytes + key.encode()

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise StoreError(f"{self.describe} is closed")

    def _write(self, body: Callable[[sqlite3.Cursor], T], *, reap: bool = True) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction (writers across processes queue)."""
        self._check_open()
        with self._lock:
            cur = self._conn.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreUnavailableError(f"cannot lock {self.describe}: {exc}") from exc
            try:
                if reap:
                    self._reap(cur)
                result = body(cur)
                cur.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                cur.execute("ROLLBACK")
                raise StoreUnavailableError(f"write to {self.describe} failed: {exc}") from exc
            except BaseException:
                cur.execute("ROLLBACK")
                raise

    def _read(self, body: Callable[[sqlite3.Cursor], T]) -> T:
        self._check_open()
        self._reap_if_due()
        with self._lock:
            try:
                return body(self._conn.cursor())
            except sqlite3.Error as exc:
                raise StoreUnavailableError(f"cannot read {self.describe}: {exc}") from exc

    def _kv(self, row: tuple[bytes, bytes, int, int, int, int]) -> KeyValue:
        key, value, create_rev, mod_rev, version, lease = row
        return KeyValue(bytes(key[len(self.prefix_bytes):]).decode(), bytes(value),
                        int(create_rev), int(mod_rev), int(version), int(lease))

    # -- leases ----------------------------------------------------------------------------

    def _reap(self, cur: sqlite3.Cursor) -> None:
        """Delete the keys of every expired lease: one revision per lease, as etcd does."""
        expired = cur.execute("SELECT id FROM leases WHERE expires_at <= ? ORDER BY id",
                              (monotonic_now(),)).fetchall()
        for (lease_id,) in expired:
            self._drop_lease(cur, int(lease_id))
            log.info("Lease %x in %s expired; its keys were deleted.", lease_id, self.describe)

    def _drop_lease(self, cur: sqlite3.Cursor, lease_id: int) -> None:
        rev = _Revision(cur)
        keys = cur.execute("SELECT key FROM kv WHERE lease=? ORDER BY key", (lease_id,)).fetchall()
        for (key,) in keys:
            rev.event(EventType.DELETE, bytes(key), b"")
        cur.execute("DELETE FROM kv WHERE lease=?", (lease_id,))
        cur.execute("DELETE FROM leases WHERE id=?", (lease_id,))
        rev.finish()

    def _reap_if_due(self) -> None:
        with self._lock:
            due = self._conn.execute("SELECT 1 FROM leases WHERE expires_at <= ? LIMIT 1",
                                     (monotonic_now(),)).fetchone()
        if due:
            self._write(lambda cur: None)

    def _reap_loop(self, interval: float) -> None:
        """Reap each lease as it expires, waking only then: every expiry time is in the table
        and can only move later (a refresh), and a lease granted meanwhile expires at least a
        TTL (1 s) after its grant, so a sleep until the earliest expiry, at most ``interval``
        (1 s), misses none. A fixed 10 Hz look cost every idle process its wake-ups."""
        delay = 0.0
        while not self._closed.wait(delay):
            try:
                self._reap_if_due()
                delay = self._until_next_expiry(interval)
            except (StoreError, sqlite3.Error) as exc:
                log.warning("Lease reaper of %s failed (%s); will retry.", self.describe, exc)
                delay = interval

    def _until_next_expiry(self, longest: float) -> float:
        with self._lock:
            (earliest,) = self._conn.execute("SELECT MIN(expires_at) FROM leases").fetchone()
        if earliest is None:
            return longest
        return max(0.0, min(longest, float(earliest) - monotonic_now() + _EXPIRY_SLACK_S))

    def grant_lease(self, ttl: int) -> Lease:
        self._check_open()
        check_ttl(ttl)

        def body(cur: sqlite3.Cursor) -> int:
            cur.execute("INSERT INTO leases (ttl, expires_at) VALUES (?, ?)",
                        (ttl, monotonic_now() + ttl))
            return int(cur.lastrowid or 0)

        lease = _EmbeddedLease(self, self._write(body), ttl)
        # Forget finished leases and watches so a long-lived store does not accumulate them.
        with self._registry_lock:
            self._leases = [*(x for x in self._leases if not x.expired), lease]
        return lease

    def _refresh_lease(self, lease_id: int, ttl: int) -> bool:
        self._check_open()

        def body(cur: sqlite3.Cursor) -> bool:
            cur.execute("UPDATE leases SET expires_at=? WHERE id=?",
                        (monotonic_now() + ttl, lease_id))
            return cur.rowcount == 1

        return self._write(body)

    def _revoke_lease(self, lease_id: int) -> None:
        if self._closed.is_set():
            return

        def body(cur: sqlite3.Cursor) -> None:
            if cur.execute("SELECT 1 FROM leases WHERE id=?", (lease_id,)).fetchone():
                self._drop_lease(cur, lease_id)

        self._write(body)

    # -- reads -----------------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        full = self._full(check_key(key))
        row = self._read(lambda cur: cur.execute(
            f"SELECT {_COLUMNS} FROM kv WHERE key=?", (full,)).fetchone())
        return None if row is None else self._kv(row)

    def get_prefix(self, prefix: str) -> list[KeyValue]:
        start = self._full(check_prefix(prefix))
        end = prefix_range_end(start) if start else b"\xff" * 8
        rows = self._read(lambda cur: cur.execute(
            f"SELECT {_COLUMNS} FROM kv WHERE key >= ? AND key < ? ORDER BY key",
            (start, end)).fetchall())
        return [self._kv(row) for row in rows]

    def wait_deleted(self, key: str, start_revision: int, timeout: float) -> bool:
        """Wait without a watch (whose thread polls 40 times a second): a key can vanish by
        its lease's expiry, whose time is in the leases table, so sleep until just after it
        (this process then reaps the lease itself, see :meth:`_read`), or by a delete, which
        a slow poll (:data:`IDLE_POLL_S`) sees. A standby master waits here for hours."""
        full = self._full(check_key(key))
        deadline = monotonic_now() + timeout
        while True:
            row = self._read(lambda cur: cur.execute(
                "SELECT kv.mod_rev, leases.expires_at FROM kv LEFT JOIN leases "
                "ON kv.lease != 0 AND leases.id = kv.lease WHERE kv.key=?", (full,)).fetchone())
            if row is None or int(row[0]) >= start_revision:
                return True  # deleted (or changed: the caller re-reads it)
            now = monotonic_now()
            if now >= deadline:
                return False
            wake = min(deadline, now + IDLE_POLL_S)
            if row[1] is not None:
                wake = min(wake, float(row[1]) + _EXPIRY_SLACK_S)
            if self._closed.wait(max(0.0, wake - now)):
                raise StoreError(f"{self.describe} was closed while waiting for {key!r}")

    def revision(self) -> int:
        return int(self._read(lambda cur: cur.execute(
            "SELECT value FROM meta WHERE name='revision'").fetchone()[0]))

    # -- writes ----------------------------------------------------------------------------

    def put(self, key: str, value: bytes, lease: int = 0) -> int:
        return self.txn([], [Put(key, value, lease)]).revision

    def delete(self, key: str) -> bool:
        check_key(key)
        return self._mutate([Delete(key)]) > 0

    def delete_prefix(self, prefix: str) -> int:
        check_prefix(prefix)
        return self._mutate([Delete(prefix, prefix=True)])

    def _mutate(self, ops: Sequence[Op]) -> int:
        """Apply ops unconditionally; returns how many keys they deleted."""
        self._check_open()

        def body(cur: sqlite3.Cursor) -> int:
            rev = _Revision(cur)
            deleted = self._apply(cur, rev, ops)
            rev.finish()
            self._maybe_compact(cur, rev.current)
            return deleted

        return self._write(body)

    def txn(self, compares: Sequence[Compare], success: Sequence[Op],
            failure: Sequence[Op] = ()) -> TxnResult:
        self._check_open()
        check_compares(compares)
        check_ops(success, "txn success")
        check_ops(failure, "txn failure")

        def body(cur: sqlite3.Cursor) -> TxnResult:
            ok = all(self._holds(cur, cmp) for cmp in compares)
            rev = _Revision(cur)
            self._apply(cur, rev, success if ok else failure)
            revision = rev.finish()
            self._maybe_compact(cur, revision)
            return TxnResult(ok, revision)

        return self._write(body)

    def _holds(self, cur: sqlite3.Cursor, cmp: Compare) -> bool:
        row = cur.execute("SELECT value, create_rev, mod_rev, version FROM kv WHERE key=?",
                          (self._full(cmp.key),)).fetchone()
        if cmp.target is CompareTarget.VALUE:
            return row is not None and bytes(row[0]) == cmp.expected  # etcd: missing != any value
        create_rev, mod_rev, version = (0, 0, 0) if row is None else row[1:]
        actual = {CompareTarget.CREATE_REVISION: create_rev, CompareTarget.MOD_REVISION: mod_rev,
                  CompareTarget.VERSION: version}[cmp.target]
        return bool(actual == cmp.expected)

    def _apply(self, cur: sqlite3.Cursor, rev: _Revision, ops: Sequence[Op]) -> int:
        deleted = 0
        for op in ops:
            if isinstance(op, Put):
                self._put(cur, rev, op)
                continue
            full = self._full(op.key)
            if op.prefix:
                end = prefix_range_end(full) if full else b"\xff" * 8
                keys = cur.execute("SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key",
                                   (full, end)).fetchall()
            else:
                keys = cur.execute("SELECT key FROM kv WHERE key=?", (full,)).fetchall()
            for (key,) in keys:
                rev.event(EventType.DELETE, bytes(key), b"")
                cur.execute("DELETE FROM kv WHERE key=?", (key,))
            deleted += len(keys)
        return deleted

    def _put(self, cur: sqlite3.Cursor, rev: _Revision, op: Put) -> None:
        value = check_value(op.value, op.key)
        if op.lease and not cur.execute("SELECT 1 FROM leases WHERE id=?",
                                        (op.lease,)).fetchone():
            raise LeaseExpiredError(
                f"cannot put {op.key!r} in {self.describe}: lease {op.lease:x} does not exist "
                "(expired or revoked)")
        full = self._full(op.key)
        old = cur.execute("SELECT create_rev, version FROM kv WHERE key=?", (full,)).fetchone()
        mod_rev = rev.event(EventType.PUT, full, value)
        create_rev, version = (mod_rev, 1) if old is None else (int(old[0]), int(old[1]) + 1)
        cur.execute("INSERT OR REPLACE INTO kv VALUES (?, ?, ?, ?, ?, ?)",
                    (full, value, create_rev, mod_rev, version, op.lease))

    def _maybe_compact(self, cur: sqlite3.Cursor, revision: int) -> None:
        """Every 1/10 of ``keep_revisions`` revisions, drop events older than the window."""
        step = max(1, self.keep_revisions // 10)
        if revision % step != 0 or revision <= self.keep_revisions:
            return
        horizon = revision - self.keep_revisions
        cur.execute("DELETE FROM events WHERE rev <= ?", (horizon,))
        cur.execute("UPDATE meta SET value=? WHERE name='compact_revision' AND value < ?",
                    (horizon, horizon))

    # -- watches ---------------------------------------------------------------------------

    def watch_prefix(self, prefix: str, start_revision: int | None = None) -> Watch:
        self._check_open()
        check_prefix(prefix)
        if start_revision is None:
            start_revision = self.revision() + 1
        elif not isinstance(start_revision, int) or start_revision < 1:
            raise ConfigError(f"watch start_revision must be an int >= 1, got {start_revision!r}")
        watch = _PollingWatch(self, self._full(prefix), start_revision)
        with self._registry_lock:
            self._watches = [*(x for x in self._watches if not x.cancelled), watch]
        return watch

    def close(self) -> None:
        if self._closed.is_set():
            return
        for lease in self._leases:
            lease.stop_keep_alive()
        for watch in self._watches:
            watch.cancel()
        self._closed.set()
        self._reaper.join(timeout=5)
        with self._lock:
            self._conn.close()


__all__ = ["EmbeddedStore", "monotonic_now"]
