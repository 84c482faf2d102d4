"""The coordination store interface: what membership, election, snapshots and checkpoint
metadata need, and nothing more.

The model is etcd v3's: a flat, ordered key space with a global revision that grows by one per
write transaction; every key carries ``create_revision`` and ``mod_revision``; leases with a TTL
own keys and delete them when they expire; a watch replays every event after a revision in order.

Keys are ``str`` and relative to the job: a store opened for job ``ctr`` stores ``pserver/0`` at
``/elasticps/ctr/pserver/0``. Values are ``bytes``. All methods are synchronous and thread-safe;
backends that speak asyncio (etcd) run their own event loop thread.

Backends (imported lazily by :func:`elasticps.store.open_store`):

- ``etcd://host:2379[,host2:2379]`` -> :mod:`elasticps.store.etcd_store`
- ``file:///path/to/job.db``       -> :mod:`elasticps.store.embedded_store` (SQLite in WAL mode,
  shared by several processes on one machine with no server)
"""

from __future__ import annotations

import abc
import enum
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from elasticps.errors import StoreError


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int  # 0 when the key has no lease


class EventType(enum.Enum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True)
class Event:
    type: EventType
    key: str
    value: bytes  # empty for DELETE
    revision: int  # the mod_revision of the change


class CompareTarget(enum.Enum):
    VALUE = "value"
    MOD_REVISION = "mod_revision"
    CREATE_REVISION = "create_revision"
    VERSION = "version"


@dataclass(frozen=True)
class Compare:
    """``key``'s ``target`` must equal ``expected``. A missing key has revisions and version 0."""

    key: str
    target: CompareTarget
    expected: bytes | int

    @classmethod
    def missing(cls, key: str) -> Compare:
        return cls(key, CompareTarget.CREATE_REVISION, 0)

    @classmethod
    def mod_revision(cls, key: str, revision: int) -> Compare:
        return cls(key, CompareTarget.MOD_REVISION, revision)

    @classmethod
    def create_revision(cls, key: str, revision: int) -> Compare:
        return cls(key, CompareTarget.CREATE_REVISION, revision)

    @classmethod
    def value(cls, key: str, value: bytes) -> Compare:
        return cls(key, CompareTarget.VALUE, value)


@dataclass(frozen=True)
class Put:
    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True)
class Delete:
    key: str
    prefix: bool = False


Op = Put | Delete


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int  # the store's revision after the transaction


class Lease(abc.ABC):
    """A TTL lease. Keys put with ``lease=lease.id`` vanish when it expires or is revoked."""

    id: int
    ttl: int

    @abc.abstractmethod
    def refresh(self) -> None:
        """Extend the lease by its TTL. Raises LeaseExpiredError if it is already gone."""

    @abc.abstractmethod
    def revoke(self) -> None:
        """End the lease now, deleting its keys. Idempotent."""

    @abc.abstractmethod
    def keep_alive(self) -> None:
        """Refresh in a background thread every ttl/3 until :meth:`revoke` or store close.

        If a refresh finds the lease expired, :attr:`expired` becomes True and refreshing stops.
        """

    @property
    @abc.abstractmethod
    def expired(self) -> bool:
        """True once a refresh found the lease gone (a keepalive that came too late)."""


class Watch(abc.ABC):
    """An ordered stream of events under a prefix. Iterate, or call :meth:`get` with a timeout."""

    @abc.abstractmethod
    def get(self, timeout: float | None = None) -> Event | None:
        """The next event, or None if none arrived within ``timeout`` seconds."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop the watch; idempotent."""

    def __iter__(self) -> Iterator[Event]:
        while True:
            event = self.get(timeout=None)
            if event is None:
                return
            yield event

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class Store(abc.ABC):
    """A key-value store with revisions, leases, transactions and watches."""

    @abc.abstractmethod
    def get(self, key: str) -> KeyValue | None: ...

    @abc.abstractmethod
    def get_prefix(self, prefix: str) -> list[KeyValue]:
        """All keys starting with ``prefix``, sorted by key."""

    @abc.abstractmethod
    def put(self, key: str, value: bytes, lease: int = 0) -> int:
        """Write unconditionally; returns the new revision."""

    @abc.abstractmethod
    def delete(self, key: str) -> bool:
        """Delete one key; True if it existed."""

    @abc.abstractmethod
    def delete_prefix(self, prefix: str) -> int:
        """Delete every key under ``prefix``; returns how many were deleted."""

    @abc.abstractmethod
    def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        """If every compare holds apply ``success``, else ``failure``, atomically."""

    def compare_and_set(
        self, key: str, value: bytes, expected_mod_revision: int, lease: int = 0
    ) -> tuple[bool, KeyValue | None]:
        """Write ``key`` only if its mod_revision is ``expected_mod_revision`` (0: must not exist).

        Returns (written, current): a stale writer gets the current state back, as in torch's
        rendezvous backend ``set_state``.
        """
        result = self.txn([Compare.mod_revision(key, expected_mod_revision)],
                          [Put(key, value, lease)])
        return result.succeeded, self.get(key)

    @abc.abstractmethod
    def grant_lease(self, ttl: int) -> Lease: ...

    @abc.abstractmethod
    def watch_prefix(self, prefix: str, start_revision: int | None = None) -> Watch:
        """Events under ``prefix`` with revision >= ``start_revision`` (default: from now on).

        The watch survives a store restart: it resumes after the last revision it delivered.
        """

    def wait_deleted(self, key: str, start_revision: int, timeout: float) -> bool:
        """Block until ``key`` is deleted at a revision >= ``start_revision`` (True) or
        ``timeout`` seconds pass (False). It may return True early, when the key changed in
        another way: callers re-read the key. A lease's expiry is a delete.

        What an election's standby waits on. By default a watch; a backend whose watches
        poll (the embedded store) waits without one."""
        deadline = time.monotonic() + timeout
        with self.watch_prefix(key, start_revision) as watch:
            while (left := deadline - time.monotonic()) > 0:
                event = watch.get(timeout=left)
                if event is not None and event.key == key and event.type is EventType.DELETE:
                    return True
        return False

    @abc.abstractmethod
    def revision(self) -> int:
        """The store's current revision."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "Compare",
    "CompareTarget",
    "Delete",
    "Event",
    "EventType",
    "KeyValue",
    "Lease",
    "Op",
    "Put",
    "Store",
    "StoreError",
    "TxnResult",
    "Watch",
]
