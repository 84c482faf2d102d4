"""Group commit: the changes of concurrent master calls written in one store transaction.

Each call steps the task queue under the master's lock and *stages* the store writes its change
needs (encoded there, so they describe exactly that state), receiving a ticket; it then leaves
the lock and *waits* until every write staged up to its ticket is committed, and only then
answers. One store round trip thus carries the changes of every call that arrived while the
previous one was in flight, and nothing is acknowledged before it is persisted.

There is no writer thread: the first waiter that finds no write in flight writes everything
staged so far (up to one transaction's worth) on behalf of all (leader/follower). Writes go out
in ticket order, so a change is never stored before one staged ahead of it. A call that changed
nothing still waits for what was staged before it: its answer may depend on that state.

A failed write poisons the group commit: its waiters, and every later one, get the error. The
master then stops serving and a standby, or its restart, resumes from what the store holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from elasticps.store.api import Delete, Op


class GroupCommit:
    """Stage ops under your own lock, :meth:`wait` outside it; thread-safe."""

    def __init__(self, write: Callable[[list[Op]], None], max_ops: int) -> None:
        if max_ops < 1:
            raise ValueError(f"max_ops={max_ops} must be >= 1")
        self._write = write
        self.max_ops = max_ops
        self._cond = threading.Condition()
        self._staged: list[tuple[int, list[Op]]] = []  # (ticket, one transaction's ops)
        self._last_ticket = 0
        self._committed = 0  # every ticket up to this one is stored
        self._writing = False
        self._failure: BaseException | None = None
        self.transactions = 0  # transactions written so far

    def stage(self, ops: Sequence[Op]) -> int:
        """Queue ``ops`` (written atomically, in one transaction); the ticket to wait for."""
        if len(ops) > self.max_ops:
            raise ValueError(f"{len(ops)} ops do not fit one transaction of {self.max_ops}")
        with self._cond:
            if self._failure is not None:
                raise self._failure
            self._last_ticket += 1
            self._staged.append((self._last_ticket, list(ops)))
            return self._last_ticket

    def latest(self) -> int:
        """The ticket of the newest staged write: an answer that changed nothing waits for it."""
        with self._cond:
            return self._last_ticket

    def wait(self, ticket: int) -> None:
        """Return once every write staged up to ``ticket`` is stored; raise if one failed."""
        with self._cond:
            while self._committed < ticket:
                if self._failure is not None:
                    raise self._failure
                if self._writing:
                    self._cond.wait()
                    continue
                ops, upto = self._take()
                self._writing = True
                self._cond.release()
                failure: BaseException | None = None
                try:
                    self._write(ops)
                except BaseException as exc:  # handed to every waiter of this and later groups
                    failure = exc
                finally:
                    self._cond.acquire()
                    self._writing = False
                    if failure is None:
                        self._committed = upto
                        self.transactions += 1
                    else:
                        self._failure = failure
                    self._cond.notify_all()

    def _take(self) -> tuple[list[Op], int]:
        """The oldest staged writes that fit one transaction, merged; the last ticket taken."""
        merged: dict[str, Op] = {}
        taken = 0
        for ticket, ops in self._staged:
            has_delete = any(isinstance(op, Delete) for op in ops)
            if taken and (has_delete or len(merged) + len(ops) > self.max_ops):
                break
            for op in ops:
                # A later write of a key replaces an earlier one in the same group (etcd refuses
                # a key twice in one transaction); what is stored is what the last call saw.
                merged.pop(op.key, None)
                merged[op.key] = op
            taken = ticket
            if has_delete:
                break  # a prefix delete is written alone: merging could reorder it
        self._staged = [(t, ops) for t, ops in self._staged if t > taken]
        return list(merged.values()), taken
