"""Pieces both store backends share: key validation, prefix ranges, the watch queue."""

from __future__ import annotations

import abc
import logging
import queue
import threading
from collections.abc import Sequence

from elasticps.errors import ConfigError, LeaseExpiredError, StoreError
from elasticps.store.api import Compare, CompareTarget, Delete, Event, Lease, Op, Put, Watch

log = logging.getLogger(__name__)


def check_key(key: object, what: str = "key") -> str:
    """A store key must be a non-empty ``str``; anything else is a caller bug worth naming."""
    if not isinstance(key, str) or not key:
        raise ConfigError(f"store {what} must be a non-empty str, got {key!r}")
    return key


def check_prefix(prefix: object) -> str:
    """A prefix may be empty (everything under the job) but must be a ``str``."""
    if not isinstance(prefix, str):
        raise ConfigError(f"store prefix must be a str, got {prefix!r}")
    return prefix


# etcd refuses requests over 1.5 MiB by default; both backends hold values to 1 MiB so code that
# works on the embedded store also works on etcd. Bigger state belongs in files (checkpoints).
MAX_VALUE_BYTES = 1 << 20


def check_value(value: object, key: str = "") -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ConfigError(f"store value for {key!r} must be bytes, got {type(value).__name__}")
    data = bytes(value)
    if len(data) > MAX_VALUE_BYTES:
        raise ConfigError(f"store value for {key!r} is {len(data)} bytes; the limit is "
                          f"{MAX_VALUE_BYTES} (split it, or keep it in a file and store the path)")
    return data


def check_ttl(ttl: object) -> int:
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 1:
        raise ConfigError(f"lease ttl must be a positive whole number of seconds, got {ttl!r}")
    return ttl


def check_ops(ops: Sequence[Op], what: str) -> None:
    for op in ops:
        if isinstance(op, Put):
            check_key(op.key, f"{what} Put key")
            check_value(op.value, op.key)
        elif isinstance(op, Delete):
            if op.prefix:
                check_prefix(op.key)
            else:
                check_key(op.key, f"{what} Delete key")
        else:
            raise ConfigError(f"{what} ops must be Put or Delete, got {op!r}")


def check_compares(compares: Sequence[Compare]) -> None:
    for cmp in compares:
        if not isinstance(cmp, Compare):
            raise ConfigError(f"txn compares must be Compare, got {cmp!r}")
        check_key(cmp.key, "compare key")
        expected = cmp.expected
        if cmp.target is CompareTarget.VALUE:
            if not isinstance(expected, bytes):
                raise ConfigError(f"a VALUE compare on {cmp.key!r} needs bytes, got {expected!r}")
        elif not isinstance(expected, int) or isinstance(expected, bool) or expected < 0:
            raise ConfigError(
                f"a {cmp.target.name} compare on {cmp.key!r} needs an int >= 0, got {expected!r}"
            )


def prefix_range_end(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with ``prefix`` (etcd's rule).

    An all-0xff (or empty) prefix has no such bound; etcd then uses ``b"\\0"`` meaning "to the end".
    """
    s = bytearray(prefix)
    for i in reversed(range(len(s))):
        if s[i] < 0xFF:
            s[i] += 1
            return bytes(s[: i + 1])
    return b"\0"


class QueueWatch(Watch):
    """A watch fed by a backend thread through a queue; an error ends the stream by raising.

    The producer calls :meth:`deliver` for events, :meth:`fail` for a terminal error; ``get``
    raises that error once every event before it has been consumed.
    """

    _END = object()

    def __init__(self) -> None:
        self._queue: queue.Queue[object] = queue.Queue()
        self._cancelled = threading.Event()
        self._error: StoreError | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def deliver(self, event: Event) -> None:
        self._queue.put(event)

    def fail(self, error: StoreError) -> None:
        self._queue.put(error)

    def get(self, timeout: float | None = None) -> Event | None:
        if self._error is not None:
            raise self._error
        if self._cancelled.is_set() and self._queue.empty():
            return None
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is self._END:
            return None
        if isinstance(item, StoreError):
            self._error = item
            raise item
        assert isinstance(item, Event)
        return item

    def cancel(self) -> None:
        if not self._cancelled.is_set():
            self._cancelled.set()
            self._queue.put(self._END)
            self._on_cancel()

    def _on_cancel(self) -> None:
        """Backend hook: stop the producer."""


class ThreadedLease(Lease):
    """Lease bookkeeping shared by the backends: the keepalive thread and the expired flag.

    A backend supplies :meth:`_refresh_once` (False when the store says the lease is gone) and
    :meth:`_revoke_once`. The keepalive is ours, not the client library's, so that both backends
    behave alike and a late refresh is reported through :attr:`expired`.
    """

    def __init__(self, lease_id: int, ttl: int, describe: str) -> None:
        self.id = lease_id
        self.ttl = ttl
        self._describe = describe
        self._expired = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abc.abstractmethod
    def _refresh_once(self) -> bool: ...

    @abc.abstractmethod
    def _revoke_once(self) -> None: ...

    @property
    def expired(self) -> bool:
        return self._expired.is_set()

    def refresh(self) -> None:
        if self._expired.is_set() or not self._refresh_once():
            self._expired.set()
            raise LeaseExpiredError(f"lease {self.id:x} on {self._describe} has expired")

    def revoke(self) -> None:
        self.stop_keep_alive()
        self._revoke_once()
        self._expired.set()

    def keep_alive(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._keep_alive_loop, name=f"lease-{self.id:x}-keepalive", daemon=True
        )
        self._thread.start()

    def stop_keep_alive(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _keep_alive_loop(self) -> None:
        interval = self.ttl / 3
        wait = interval
        while not self._stop.wait(wait):
            try:
                self.refresh()
                wait = interval
            except LeaseExpiredError:
                log.warning("Lease %x on %s expired before its keepalive reached the store; "
                            "keys under it are gone.", self.id, self._describe)
                return
            except StoreError as exc:
                # The store may be restarting: try again soon, the lease may still be alive.
                log.warning("Keepalive of lease %x on %s failed (%s); retrying.",
                            self.id, self._describe, exc)
                wait = min(interval, 0.2)


__all__ = [
    "MAX_VALUE_BYTES",
    "QueueWatch",
    "ThreadedLease",
    "check_compares",
    "check_key",
    "check_ops",
    "check_prefix",
    "check_ttl",
    "check_value",
    "prefix_range_end",
]
