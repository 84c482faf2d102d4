"""Sync mode: each push joins the shard's step barrier; a round's batches are one mean step.

The barrier's bookkeeping is :class:`~elasticps.pserver.sync_round.SyncRounds` (who is waited
for, what has arrived); this strategy runs it under the shard's lock. A push waits in the open
round until it closes, or for ``wait_s``, when it is answered ``pending`` (nothing applied; the
client sends it again). A round closes once every member has contributed; its finite
contributions' mean is applied as one optimizer step and every contribution's batch recorded
(dropped ones as skipped).

Exactly-once: a batch already applied is a duplicate, answered at once; a batch waiting in the
round is in it once whoever pushes it; after a resharding, what an earlier layout's shard
applied of a batch is zeroed out of its contribution (one batch is never applied in part).

Liveness across shards: a trainer's push goes to every shard and returns when each has answered.
A trainer whose batch is a duplicate on a shard (a recovery dispatch pushes to every shard; some
hold the batch) leaves that shard's round: otherwise two trainers recovering batches missing on
different shards would each wait in one shard's round for the other, for ever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from elasticps.errors import InvalidArgumentError
from elasticps.gradients import finite
from elasticps.pserver.push_mode import (
    BatchKey,
    PushMode,
    PushResult,
    RoundStats,
    Rows,
)
from elasticps.pserver.sparse_table import batch_seed
from elasticps.pserver.sync_round import Contribution, SyncRounds, average, summed_counts

if TYPE_CHECKING:
    from elasticps.pserver.shard import ShardState


class SyncRoundPush(PushMode):
    name = "sync"

    def __init__(self, shard: ShardState) -> None:
        super().__init__(shard)
        self.rounds = SyncRounds()
        self._closed = threading.Condition(shard.lock)  # waiters wait on the shard's lock

    @property
    def has_rounds(self) -> bool:
        return True

    def push(self, batch: BatchKey, dense: Mapping[str, np.ndarray], sparse: Rows, drop: bool,
             counts: Rows, trainer: str, wait_s: float) -> PushResult:
        if not trainer:
            raise InvalidArgumentError(
                "in sync mode every push must name its trainer (BatchRef.trainer): the step "
                "barrier waits for trainers by name")
        shard = self.shard
        if shard.applied.contains(*batch.ref):
            # The trainer has nothing for this shard's round now (a recovery pushes to every
            # shard, and this one holds the batch): the round must not wait for it while it
            # waits on another shard's round, whose members may be waited for here. Its next
            # push that contributes makes it a member again.
            if self.rounds.leave(trainer):
                self._close_if_ready()
            shard.duplicates += 1
            tag = shard.dense_tag()
            return PushResult(applied=False, skipped=False, dense_before=tag, dense_after=tag)
        dropped = drop or not finite(dense, sparse)  # judged on the batch as it was sent
        masked = shard.mask_applied_before([batch], sparse, counts)
        assert masked is not None  # one batch is applied whole or not at all, per old shard
        dense = {n: np.where(masked.keep[n], np.float32(0), g) if n in masked.keep else g
                 for n, g in dense.items()}
        contribution = Contribution(trainer, batch.ref, dense, masked.sparse, dropped,
                                    masked.counts, step=batch.step,
                                    event_time=batch.event_time)
        mine = self.rounds.offer(contribution)
        self._close_if_ready()
        give_up = time.monotonic() + wait_s
        while not mine.done:
            left = give_up - time.monotonic()
            if left <= 0:
                return PushResult(applied=False, skipped=False, pending=True)
            self._closed.wait(left)
        if mine.error is not None:
            raise mine.error
        if mine is not contribution:  # the same batch was already in the round: a duplicate
            shard.duplicates += 1
            return PushResult(applied=False, skipped=False)
        return PushResult(applied=mine.applied, skipped=mine.skipped)

    def join_round(self, trainer: str) -> None:
        self.rounds.join(trainer)

    def leave_round(self, trainer: str) -> bool:
        if not self.rounds.leave(trainer):
            return False
        self._close_if_ready()  # it may have been the only member the round waited for
        return True

    def round_members(self) -> set[str]:
        return set(self.rounds.members)

    def round_stats(self) -> RoundStats:
        return RoundStats(self.rounds.rounds, len(self.rounds.pending),
                          len(self.rounds.members))

    def _close_if_ready(self) -> None:
        """Apply the open round if every member has contributed: the finite contributions'
        mean as one step, every contribution's batch recorded (the dropped ones as skipped)."""
        if not self.rounds.ready():
            return
        closed = self.rounds.take()
        kept = [c for c in closed if not c.drop]
        error: Exception | None = None
        if kept:
            try:
                dense, sparse = average(kept)
                # One step for the round, its learning rate at its smallest batch number.
                self.shard.apply_step(batch_seed(*kept[0].batch), dense, sparse,
                                      max(c.batch[0] for c in kept), counts=summed_counts(kept),
                                      batch_step=min(c.step for c in kept),
                                      event_time=max(c.event_time for c in kept))
            except Exception as exc:  # e.g. RESOURCE_EXHAUSTED: nothing changed, all hear it
                error = exc
        for c in closed:
            if c.drop or error is None:
                c.applied, c.skipped = True, c.drop
                self.shard.record(BatchKey(*c.batch), skipped=c.drop)
            else:
                c.error = error  # every waiter of the round hears it; their retries re-offer
            c.done = True
        self._closed.notify_all()
