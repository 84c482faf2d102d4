"""Geo mode: a trainer's parameter deltas for a *window* of batches, added at most once.

A window's delta is one sum over its batches and cannot be taken apart, so each (batch, row)
is applied once only if the window is applied whole or not at all wherever it lands:

- every batch of the window is in the shard's applied set: a duplicate, nothing changes;
- some are and some are not, here or, for a row or position it touches, on an earlier layout's
  shard (:mod:`~elasticps.pserver.reshard.lineage`): refused whole, nothing changes and none is
  recorded, so the pass-end reconciliation hands the missing ones out again; a recovery
  dispatch pushes each batch as its own window, which is never applied in part;
- otherwise the delta is added, leaving alone what an earlier layout applied the whole window
  to, and every batch of the window is recorded (as skipped when it holds NaN or Inf).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from elasticps.errors import InvalidArgumentError
from elasticps.gradients import finite
from elasticps.pserver.push_mode import BatchKey, PushMode, PushResult, Rows
from elasticps.pserver.sparse_table import batch_seed

log = logging.getLogger(__name__)


class GeoDeltas(PushMode):
    name = "geo"
    takes_deltas = True

    def push_delta(self, batches: list[BatchKey], dense: Mapping[str, np.ndarray],
                   sparse: Rows) -> PushResult:
        if len(set(batches)) != len(batches):
            raise InvalidArgumentError("a delta push names one batch twice")
        shard = self.shard
        here = sum(shard.applied.contains(*b.ref) for b in batches)
        if here == len(batches):
            shard.duplicates += 1
            return PushResult(applied=False, skipped=False)
        masked = None if here else shard.mask_applied_before(batches, sparse, {}, dense)
        if masked is None:
            return self._refuse(batches, here)
        ok = finite(dense, sparse)
        if ok:
            shard.apply_step(batch_seed(*batches[0].ref), dense, masked.sparse,
                             max(b.pass_id for b in batches), delta=True, keep=masked.keep,
                             event_time=max(b.event_time for b in batches))
        for batch in batches:
            shard.record(batch, skipped=not ok)
        return PushResult(applied=True, skipped=not ok)

    def _refuse(self, batches: list[BatchKey], here: int) -> PushResult:
        self.shard.windows_refused_partly_applied += 1
        where = (f"{here} of them on this shard" if here else
                 "some of them on an earlier layout's shard owning rows it touches")
        first, last = batches[0], batches[-1]
        log.info("Shard %d refuses a geo window of %d batches (pass %d, task %d, seqs %d..%d): "
                 "%s were applied before, so none is recorded and the pass-end reconciliation "
                 "hands them out again, one batch per window.", self.shard.shard, len(batches),
                 first.pass_id, first.task_id, first.seq, last.seq, where)
        return PushResult(applied=False, skipped=False, partly_applied=True)
