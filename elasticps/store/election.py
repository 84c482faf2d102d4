"""Leader election on any :class:`~elasticps.store.api.Store`: a lock key under a lease.

The winner is whoever creates the lock key (``Compare.missing``) while it is absent; the key
lives under the winner's lease, so it vanishes when the winner dies and stops refreshing. The
lock's ``create_revision`` is the fencing token: every write the leader makes goes through
:meth:`Election.leader_txn`, which adds ``Compare.create_revision(lock, token)``. A deposed
leader (lease expired, lock re-taken by someone else) therefore cannot write, even if it still
believes it leads — its token no longer matches.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence

from elasticps.errors import LeaseExpiredError, NotLeaderError
from elasticps.store._common import check_key, check_ttl, check_value
from elasticps.store.api import Compare, Delete, Lease, Op, Put, Store, TxnResult

log = logging.getLogger(__name__)

# Longest wait on the lock's watch between re-checks, so a missed wake-up costs at most this.
_RECHECK_S = 1.0


class Election:
    """Campaign for the lock ``name`` (a key relative to the job, e.g. ``master/election``)."""

    def __init__(self, store: Store, name: str, value: bytes, ttl: int) -> None:
        self.store = store
        self.name = check_key(name, "election name")
        self.value = check_value(value)
        self.ttl = check_ttl(ttl)
        self._lease: Lease | None = None
        self._token: int | None = None  # the lock's create_revision while we hold it

    @property
    def lease(self) -> Lease:
        """The lease the lock lives under; put other leader-owned keys under it too."""
        if self._lease is None:
            raise NotLeaderError(f"election {self.name!r} has not been campaigned for")
        return self._lease

    @property
    def is_leader(self) -> bool:
        """Our local belief. The store decides: writes use :meth:`leader_txn` to be fenced."""
        return self._token is not None and self._lease is not None and not self._lease.expired

    def campaign(self, timeout: float | None = None) -> bool:
        """Block until we hold the lock (True) or ``timeout`` seconds pass (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.is_leader:
            return True
        while True:
            lease = self._live_lease()
            try:
                result = self.store.txn([Compare.missing(self.name)],
                                        [Put(self.name, self.value, lease.id)])
            except LeaseExpiredError:
                self._lease = None  # our lease lapsed while we waited: take a fresh one
                continue
            if result.succeeded:
                # The key did not exist, so our put created it at this transaction's revision.
                self._token = result.revision
                log.info("Won election %r with fencing token %d.", self.name, self._token)
                return True
            holder = self.store.get(self.name)
            if holder is None:
                continue  # released between our txn and our get: try again at once
            if holder.lease == lease.id:
                self._token = holder.create_revision  # we already held it (e.g. a retried txn)
                return True
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self._wait_for_release(holder.mod_revision + 1, remaining)

    def _live_lease(self) -> Lease:
        if self._lease is None or self._lease.expired:
            self._lease = self.store.grant_lease(self.ttl)
            self._lease.keep_alive()
        return self._lease

    def _wait_for_release(self, start_revision: int, timeout: float | None) -> None:
        """Return when the lock is deleted after ``start_revision``, or on timeout / recheck.
        The store decides how to wait (a watch on etcd; on the embedded store a sleep until
        the holder's lease would expire, with a slow poll for a resignation)."""
        self.store.wait_deleted(self.name, start_revision,
                                _RECHECK_S if timeout is None else min(timeout, _RECHECK_S))

    def fencing(self) -> Compare:
        """A compare that holds only while the lock is still ours; put it in every leader txn."""
        if self._token is None:
            raise NotLeaderError(f"not the leader of {self.name!r}: the lock was never won")
        return Compare.create_revision(self.name, self._token)

    def leader_txn(self, success_ops: Sequence[Op],
                   extra_compares: Sequence[Compare] = ()) -> TxnResult:
        """Apply ``success_ops`` only if we still hold the lock and ``extra_compares`` hold.

        Raises NotLeaderError when the lock is no longer ours (nothing is written). A failed
        ``extra_compares`` returns ``succeeded=False`` as a plain txn would.
        """
        fence = self.fencing()
        token = self._token
        result = self.store.txn([fence, *extra_compares], success_ops)
        if result.succeeded:
            return result
        current = self.store.get(self.name)
        if current is None or current.create_revision != token:
            self._token = None
            raise NotLeaderError(
                f"lost the election {self.name!r}: the lock now has create_revision "
                f"{current.create_revision if current else 'none'}, ours was {token}; "
                "the write was refused")
        return result

    def resign(self) -> None:
        """Give the lock up now (if still ours) and end our lease."""
        if self._token is not None:
            self.store.txn([self.fencing()], [Delete(self.name)])
            self._token = None
            log.info("Resigned from election %r.", self.name)
        if self._lease is not None:
            with contextlib.suppress(LeaseExpiredError):
                self._lease.revoke()
            self._lease = None


def leader_value(store: Store, name: str) -> bytes | None:
    """The current leader's value for election ``name``, or None when nobody leads."""
    kv = store.get(check_key(name, "election name"))
    return None if kv is None else kv.value


__all__ = ["Election", "leader_value"]
