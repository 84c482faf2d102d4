"""Sync mode's step barrier at one shard: who it waits for and what has arrived.

In sync mode a shard applies no push on its own. Each push is a *contribution* to the open
round; the round closes when every *member* has contributed, and its contributions are then
averaged and applied as one optimizer step (:meth:`ShardState._close_round`). A trainer's push
is answered only once its round is applied, so its next pull sees the combined step, and it
cannot contribute twice to one round.

Membership adapts so no round waits forever:

- a trainer becomes a member with ``JoinRound`` when it begins a task (or with a push);
- it leaves with ``LeaveRound`` when it ends the task (it may wait for work next, or evaluate:
  the others' steps must not wait for it);
- the pserver drops a trainer whose ``trainer/<name>`` key vanished (it died: its store lease
  expired) or says ``leaving`` (pserver/sync_members.py).

A contribution already in the round stays in it whatever becomes of its trainer: it is applied
with the round, and recorded in the applied set like any batch, so the task's re-dispatch finds
it applied (exactly-once). A batch waits in the round at most once: the task's new holder that
pushes it again mid-round waits on the same contribution and counts as having contributed, so
the round closes when every live member has pushed (a round is never left waiting for a member
that already waits in it). Pending contributions live in memory only: a pserver that dies loses
them unapplied and unrecorded, and the trainers' retried pushes contribute to the restarted
shard's rounds.

Pure bookkeeping, not thread-safe: the shard's lock guards it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Contribution:
    """One batch's push waiting in the open round, and how it ended."""

    trainer: str  # who pushed it first
    batch: tuple[int, int, int]  # (pass_id, task_id, seq)
    dense: Mapping[str, np.ndarray]
    sparse: Mapping[str, tuple[np.ndarray, np.ndarray]]
    drop: bool  # NaN/Inf somewhere in the batch: recorded, not averaged in
    # SCORE tables: (shows, clicks) per id of the table's sparse ids (absent: shown once each)
    counts: Mapping[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # Every trainer whose push of this batch waits on it: its first pusher, and whoever holds
    # the batch's task after that pusher died (or was thought dead) and pushed it again.
    waiters: set[str] = field(default_factory=set)
    applied: bool = False
    skipped: bool = False
    error: Exception | None = None  # the round could not be applied (nothing changed)
    done: bool = False
    step: int = 0  # the batch's number in the job's data order (learning-rate schedules)
    event_time: float = 0.0  # a stream's batch: its partition's time (policy_clock.py)

    def __post_init__(self) -> None:
        self.waiters.add(self.trainer)


class SyncRounds:
    """Members and the open round's contributions (see the module docstring).

    A member counts as having contributed when it waits on some contribution of the round. A
    batch is in the round at most once, whoever pushes it: a trainer's push of a batch already
    waiting makes it one more waiter of that contribution, so a task re-dispatched mid-round
    neither adds its batch twice nor leaves its new holder uncounted. The round therefore
    closes as soon as every live member has pushed, and never waits on a trainer that has.
    """

    def __init__(self) -> None:
        self.members: set[str] = set()
        self.pending: dict[tuple[int, int, int], Contribution] = {}  # by batch
        self.rounds = 0  # rounds closed

    def offer(self, contribution: Contribution) -> Contribution:
        """Join the round with ``contribution``; the contribution to wait on (an equal batch's
        that already waits, or this one)."""
        self.members.add(contribution.trainer)
        waiting = self.pending.get(contribution.batch)
        if waiting is not None:
            waiting.waiters.add(contribution.trainer)
            return waiting
        self.pending[contribution.batch] = contribution
        return contribution

    def join(self, trainer: str) -> None:
        self.members.add(trainer)

    def leave(self, trainer: str) -> bool:
        """The trainer is no longer waited for; True if it was a member. A push of its that
        waits stays in the round: it is a batch's gradient like any other."""
        if trainer in self.members:
            self.members.discard(trainer)
            return True
        return False

    def contributed(self) -> set[str]:
        """The trainers waiting on some contribution of the open round."""
        return set().union(*(c.waiters for c in self.pending.values()))

    def ready(self) -> bool:
        """Every member has contributed (and someone has)."""
        return bool(self.pending) and self.members <= self.contributed()

    def take(self) -> list[Contribution]:
        """Close the round: its contributions, in batch order (a deterministic sum)."""
        closed = [self.pending[batch] for batch in sorted(self.pending)]
        self.pending.clear()
        self.rounds += 1
        return closed


def average(contributions: list[Contribution]
            ) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The mean of the contributions' gradients: a dense table a contribution lacks counts as
    zero, as does a sparse row it did not touch (so with a mean-reduced loss, k trainers with
    batch b average to the gradient of one batch of k*b)."""
    n = len(contributions)
    dense: dict[str, np.ndarray] = {}
    for c in contributions:
        for name, grad in c.dense.items():
            dense[name] = dense[name] + grad if name in dense else grad.astype(np.float32)
    ids: dict[str, list[np.ndarray]] = {}
    rows: dict[str, list[np.ndarray]] = {}
    for c in contributions:
        for name, (table_ids, table_rows) in c.sparse.items():
            ids.setdefault(name, []).append(table_ids)
            rows.setdefault(name, []).append(table_rows)
    sparse = {name: (np.concatenate(ids[name]), np.concatenate(rows[name]) / np.float32(n))
              for name in ids if sum(part.shape[0] for part in ids[name])}
    return {name: grad / np.float32(n) for name, grad in dense.items()}, sparse


def summed_counts(contributions: list[Contribution]
                  ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Shows and clicks per table, aligned with :func:`average`'s concatenated ids: counts add
    up over the round's batches (they are not averaged); a contribution without counts shows
    each of its ids once."""
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for c in contributions:
        for name, (table_ids, _) in c.sparse.items():
            n = table_ids.shape[0]
            parts.setdefault(name, []).append(c.counts.get(name, (
                np.ones(n, np.float32), np.zeros(n, np.float32))))
    return {name: (np.concatenate([p[0] for p in got]), np.concatenate([p[1] for p in got]))
            for name, got in parts.items() if sum(p[0].shape[0] for p in got)}
