"""Async mode: each batch's gradients are one optimizer step, applied at once and at most once.

Exactly-once: the shard's applied set answers "duplicate" to a batch it holds; after a
resharding, the rows and dense positions an earlier layout's shard applied the batch to are
left alone (:mod:`~elasticps.pserver.reshard.lineage`: one batch is applied whole or not at
all on each shard, so that mask is exact). A batch with NaN or Inf (or one the client drops)
changes nothing and is recorded as applied, so its retry is not re-examined.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from elasticps.gradients import finite
from elasticps.pserver.push_mode import BatchKey, PushMode, PushResult, Rows
from elasticps.pserver.sparse_table import batch_seed


class AsyncGradients(PushMode):
    name = "async"

    def push(self, batch: BatchKey, dense: Mapping[str, np.ndarray], sparse: Rows, drop: bool,
             counts: Rows, trainer: str, wait_s: float) -> PushResult:
        shard = self.shard
        before = shard.dense_tag()
        if shard.applied.contains(*batch.ref):
            shard.duplicates += 1
            return PushResult(applied=False, skipped=False, dense_before=before,
                              dense_after=before)
        if drop or not finite(dense, sparse):
            shard.record(batch, skipped=True)
            return PushResult(applied=True, skipped=True, dense_before=before,
                              dense_after=before)
        masked = shard.mask_applied_before([batch], sparse, counts)
        assert masked is not None  # one batch is applied whole or not at all, per old shard
        shard.apply_step(batch_seed(*batch.ref), dense, masked.sparse, batch.pass_id,
                         counts=masked.counts, keep=masked.keep, batch_step=batch.step,
                         event_time=batch.event_time)
        shard.record(batch, skipped=False)
        return PushResult(applied=True, skipped=False, dense_before=before,
                          dense_after=shard.dense_tag())
