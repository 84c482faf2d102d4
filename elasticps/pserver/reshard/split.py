"""Re-split a job's shards from N to M: pure, over snapshots (no files, no store).

Given the newest state of every old shard, :func:`reshard_snapshots` builds the state of every
new shard, as the routing rules of :mod:`elasticps.pserver.client` place it:

- a dense parameter is joined from its N slices (values and optimizer state) and split again
  by ``np.array_split(flat, M)``; its step count is the largest of the old slices' (they differ
  only when a shard skipped a batch);
- a sparse row (value, optimizer state, Adam step, eviction bookkeeping, show/click scores)
  moves to shard ``id % M``; an admission sketch is the sum of the old shards' (their ids are
  disjoint, so the counts add), given whole to each new shard;
- applied batches: each new shard's own set is the batches *every* old shard had applied, and it
  remembers the old layout with each old shard's set (:mod:`.lineage`), so a batch applied on
  only some old shards is applied again exactly where it was not.

Counters: ``pushes``, ``duplicates`` and ``skipped_nonfinite`` count batches (each batch reaches
every shard), so each new shard takes the old shards' largest; per-table row counters
(admitted, evicted, dropped) are totals, kept on new shard 0 so the job's sums are unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from elasticps.errors import InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver.checkpoint.snapshot import (
    DenseState,
    RowBookkeeping,
    RowScores,
    ShardSnapshot,
    SparseState,
)
from elasticps.pserver.policy_clock import EVENT_TIME_COUNTER
from elasticps.pserver.reshard.lineage import LegacyLayout, intersection
from elasticps.pserver.routing import dense_bounds, route_ids

# Each new shard takes the old shards' largest of these: batch counts (each batch reaches every
# shard) and a stream's newest partition time (policy_clock.py), which every shard goes on from.
_PER_BATCH_COUNTERS = ("pushes", "duplicates", "skipped_nonfinite", EVENT_TIME_COUNTER)
_SKETCH_MAX = np.iinfo(np.uint16).max


def reshard_snapshots(old: Sequence[ShardSnapshot], new_count: int) -> list[ShardSnapshot]:
    """The ``new_count`` shards holding exactly what the ``old`` shards (one per old slot, in
    any order) hold. InvalidArgumentError if the old shards do not form one whole layout."""
    shards = _check_layout(old, new_count)
    specs = list(shards[0].specs)
    dense = {spec.name: _split_dense(spec, [s.dense[spec.name] for s in shards], new_count)
             for spec in specs if spec.kind == pserver_pb2.TableSpec.DENSE}
    sparse = {spec.name: _split_sparse([s.sparse[spec.name] for s in shards], new_count)
              for spec in specs if spec.kind == pserver_pb2.TableSpec.SPARSE}
    applied_everywhere = intersection([s.applied for s in shards])
    earlier = [*shards[0].legacy,
               LegacyLayout(len(shards), [s.applied.copy() for s in shards])]
    counters = _counters(shards)
    return [
        ShardSnapshot(
            shard=j, num_shards=new_count, specs=list(specs),
            initialized=all(s.initialized for s in shards),
            dense={name: parts[j] for name, parts in dense.items()},
            sparse={name: parts[j] for name, parts in sparse.items()},
            applied=applied_everywhere.copy(),
            counters=counters if j == 0 else {
                k: v for k, v in counters.items() if k in _PER_BATCH_COUNTERS},
            legacy=[layout.copy() for layout in earlier],
        )
        for j in range(new_count)
    ]


def _check_layout(old: Sequence[ShardSnapshot], new_count: int) -> list[ShardSnapshot]:
    if new_count < 1:
        raise InvalidArgumentError(f"cannot reshard into {new_count} shards: at least 1")
    if not old:
        raise InvalidArgumentError("resharding needs the state of every old shard, got none")
    count = old[0].num_shards
    shards = sorted(old, key=lambda s: s.shard)
    if [s.shard for s in shards] != list(range(count)) or any(
            s.num_shards != count for s in shards):
        have = sorted((s.shard, s.num_shards) for s in old)
        raise InvalidArgumentError(f"resharding needs shards 0..{count - 1} of one layout of "
                                   f"{count}, got (shard, of) {have}")
    if any(s.delta for s in shards):
        raise InvalidArgumentError("resharding takes whole shard states, not deltas")
    names = [sorted((t.name, t.kind) for t in s.specs) for s in shards]
    if any(n != names[0] for n in names):
        raise InvalidArgumentError("the old shards declare different tables: "
                                   f"{[[n for n, _ in d] for d in names]}")
    return shards


def _split_dense(spec: pserver_pb2.TableSpec, parts: list[DenseState],
                 new_count: int) -> list[DenseState]:
    size = math.prod(spec.shape)
    for i, part in enumerate(parts):
        start, stop = dense_bounds(size, i, len(parts))
        if part.values.shape != (stop - start,):
            raise InvalidArgumentError(f"dense table {spec.name!r}: old shard {i} holds "
                                       f"{part.values.shape[0]} values, its slice is "
                                       f"{stop - start}")
    values = np.concatenate([p.values for p in parts])
    slots = {name: np.concatenate([p.slots[name] for p in parts]) for name in parts[0].slots}
    step = max(p.step for p in parts)
    out = []
    for j in range(new_count):
        start, stop = dense_bounds(size, j, new_count)
        out.append(DenseState(values[start:stop].copy(),
                              {k: v[start:stop].copy() for k, v in slots.items()}, step))
    return out


def _split_sparse(parts: list[SparseState], new_count: int) -> list[SparseState]:
    ids = np.concatenate([p.ids for p in parts])
    values = np.concatenate([p.values for p in parts])
    slots = {name: np.concatenate([p.slots[name] for p in parts]) for name in parts[0].slots}
    with_steps = all(p.steps.shape[0] == p.ids.shape[0] for p in parts)
    steps = np.concatenate([p.steps for p in parts]) if with_steps else None
    books = [p.bookkeeping for p in parts]
    per_row = all(b is not None and b.hits.shape[0] == p.ids.shape[0]
                  for b, p in zip(books, parts, strict=True))
    sketch = _summed_sketch(books)
    aging = max((b.sketch_aging for b in books if b is not None), default=0)
    scores = _joined_scores(books, parts)
    if per_row:
        touched = np.concatenate([b.touched_pass for b in books if b is not None])
        unix = np.concatenate([b.pushed_unix for b in books if b is not None])
        hits = np.concatenate([b.hits for b in books if b is not None])
    else:
        touched, unix, hits = np.zeros(0, np.int32), np.zeros(0, np.float64), np.zeros(0, np.uint32)
    owner = route_ids(ids, new_count)
    out = []
    for j in range(new_count):
        rows = np.flatnonzero(owner == j)
        book: RowBookkeeping | None = None
        if per_row or sketch is not None or scores is not None:
            mine = slice(None) if not per_row else rows
            book = RowBookkeeping(
                touched[mine], unix[mine], hits[mine],
                None if sketch is None else sketch.copy(), aging,
                None if scores is None else RowScores(scores.shows[rows], scores.clicks[rows],
                                                      scores.score_pass[rows]))
        out.append(SparseState(
            ids[rows], values[rows], {k: v[rows] for k, v in slots.items()},
            steps[rows] if steps is not None else parts[0].steps[:0].copy(), book))
    return out


def _joined_scores(books: list[RowBookkeeping | None],
                   parts: list[SparseState]) -> RowScores | None:
    """Every old shard's per-row show/click scores in row order (None unless all have them)."""
    found = [b.scores for b in books if b is not None and b.scores is not None]
    if len(found) != len(parts) or any(
            s.shows.shape[0] != p.ids.shape[0] for s, p in zip(found, parts, strict=True)):
        return None
    return RowScores(np.concatenate([s.shows for s in found]),
                     np.concatenate([s.clicks for s in found]),
                     np.concatenate([s.score_pass for s in found]))


def _summed_sketch(books: list[RowBookkeeping | None]) -> np.ndarray | None:
    sketches = [b.sketch for b in books if b is not None and b.sketch is not None]
    if len(sketches) != len(books):
        return None
    total = np.sum([s.astype(np.uint32) for s in sketches], axis=0)
    return np.minimum(total, _SKETCH_MAX).astype(np.uint16)


def _counters(shards: list[ShardSnapshot]) -> dict[str, int]:
    keys = {k for s in shards for k in s.counters}
    return {k: (max if k in _PER_BATCH_COUNTERS else sum)(s.counters.get(k, 0) for s in shards)
            for k in sorted(keys)}
