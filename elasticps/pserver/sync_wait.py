"""Sync mode, the trainer's side: leave the rounds of shards that answered while another waits.

A trainer's push goes to every shard, and it pushes its next batch only once every shard has
answered. Each shard's round waits for every member. Rounds at different shards need not hold
the same batches: a pserver restarted from a checkpoint has no members, and rebuilds them from
pushes in the order they arrive, so it may close a round of one trainer's batch that the other
shards close together with others. That can close a cycle of waits:

- trainer *a*'s batch is applied at shard Y and waits at shard X for trainer *c*'s next push;
- trainer *c*'s batch is applied at X and waits at Y for *a*'s next push.

Neither pushes again, and nothing times out (the pushes are answered ``pending`` and resent;
heartbeats keep the tasks' leases). The rule that breaks it: when a shard answers ``pending``,
the trainer leaves the round of every shard that has already answered this push, since it
has nothing more for them until the pending one closes. Its next push makes it a member of
those rounds again. A round then waits only for members that compute or that wait in it, and a
cycle of waits across shards is broken at its first ``pending`` answer (one shard's wait,
``SYNC_WAIT_S``). When no shard has answered (every round waits for one slow member), nobody
leaves: a slow step is not a dead one, and the barrier holds.
"""

from __future__ import annotations

import threading


class CrossShardWait:
    """One push of one batch to every shard: which shards answered, which rounds were left.

    Thread-safe: each shard's push runs in its own thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answered: set[int] = set()
        self._left: set[int] = set()

    def answered(self, slot: int) -> None:
        """Shard ``slot`` answered the push (applied it, or found it a duplicate)."""
        with self._lock:
            self._answered.add(slot)

    def to_leave(self) -> list[int]:
        """A shard answered ``pending``: the shards whose rounds to leave now (those that
        answered and were not left yet), in slot order."""
        with self._lock:
            leave = sorted(self._answered - self._left)
            self._left.update(leave)
            return leave
