"""Incremental checkpoints: a delta holds what changed since the checkpoint before it.

A delta checkpoint is a checkpoint file like any other (same format, same atomic write, fenced
publication and checksummed manifest) whose metadata names its ``parent``, the checkpoint it
applies on, and whose sparse tables hold only the rows pushed since the parent plus the ids
evicted since (``sparse.<table>.tombstones``); dense slices, the applied set and the counters are
whole in every checkpoint. A chain is a full checkpoint (its base) and the deltas on it, each
one's parent the one before; restoring the newest checkpoint applies its chain in order, and a
chain with a missing, truncated or corrupt link is skipped like a corrupt checkpoint, so a
restore falls back to the newest checkpoint whose whole chain holds.

Pure functions only: :mod:`.checkpoint` reads and writes the files.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from elasticps.errors import CheckpointError
from elasticps.pserver.checkpoint.manifest import Manifest
from elasticps.pserver.checkpoint.snapshot import (
    RowBookkeeping,
    RowScores,
    ShardSnapshot,
    SparseState,
)


def apply_delta(base: ShardSnapshot, delta: ShardSnapshot) -> ShardSnapshot:
    """The state ``delta`` describes when applied on ``base`` (its parent's state)."""
    sparse: dict[str, SparseState] = {}
    for spec in delta.specs:
        name = spec.name
        change = delta.sparse.get(name)
        if change is None:
            continue
        old = base.sparse.get(name)
        if old is None:
            sparse[name] = change
            continue
        gone = np.concatenate([delta.tombstones.get(name, np.zeros(0, np.int64)), change.ids])
        keep = ~np.isin(old.ids, gone)
        if set(old.slots) != set(change.slots):
            raise CheckpointError(f"delta of table {name!r} holds slots {sorted(change.slots)}, "
                                  f"its parent {sorted(old.slots)}")
        sparse[name] = SparseState(
            np.concatenate([old.ids[keep], change.ids]),
            np.concatenate([old.values[keep], change.values]),
            {slot: np.concatenate([arr[keep], change.slots[slot]])
             for slot, arr in old.slots.items()},
            np.concatenate([old.steps[keep], change.steps])
            if old.steps.shape[0] == old.ids.shape[0] else change.steps[:0],
            _bookkeeping(old.bookkeeping, keep, change.bookkeeping, change.ids.shape[0]),
        )
    return ShardSnapshot(
        shard=delta.shard, num_shards=delta.num_shards, specs=delta.specs,
        initialized=delta.initialized, dense=delta.dense, sparse=sparse, applied=delta.applied,
        counters=delta.counters, legacy=delta.legacy,
    )


def _bookkeeping(old: RowBookkeeping | None, keep: np.ndarray,
                 change: RowBookkeeping | None, changed: int) -> RowBookkeeping | None:
    """The kept rows' bookkeeping then the delta's rows', and the delta's sketch (whole in every
    checkpoint); without the rows' (a link that lacks it) rows restart their bookkeeping."""
    if change is None:
        return None
    scores = _scores(old.scores if old is not None else None, keep, change.scores, changed)
    if old is None or old.hits.shape[0] != keep.shape[0] or change.hits.shape[0] != changed:
        return RowBookkeeping(np.zeros(0, np.int32), np.zeros(0, np.float64),
                              np.zeros(0, np.uint32), change.sketch, change.sketch_aging, scores)
    return RowBookkeeping(
        np.concatenate([old.touched_pass[keep], change.touched_pass]),
        np.concatenate([old.pushed_unix[keep], change.pushed_unix]),
        np.concatenate([old.hits[keep], change.hits]), change.sketch, change.sketch_aging,
        scores)


def _scores(old: RowScores | None, keep: np.ndarray, change: RowScores | None,
            changed: int) -> RowScores | None:
    """The kept rows' show/click counts then the delta's (both stored as of each row's own
    pass, so a pass end between the links changed none of the kept rows); None if a link
    lacks them."""
    if (old is None or change is None or old.shows.shape[0] != keep.shape[0]
            or change.shows.shape[0] != changed):
        return None
    return RowScores(np.concatenate([old.shows[keep], change.shows]),
                     np.concatenate([old.clicks[keep], change.clicks]),
                     np.concatenate([old.score_pass[keep], change.score_pass]))


def chain(newest: Manifest, published: Sequence[Manifest]) -> list[Manifest]:
    """``newest``'s chain, base first; CheckpointError if a link is not published (or the
    parents loop)."""
    by_id = {m.id: m for m in published}
    links = [newest]
    while links[-1].parent:
        parent = by_id.get(links[-1].parent)
        if parent is None:
            raise CheckpointError(f"checkpoint {links[-1].id} is a delta of checkpoint "
                                  f"{links[-1].parent}, which is not published (pruned or lost)")
        if parent.id >= links[-1].id or len(links) > len(by_id):
            raise CheckpointError(f"checkpoint {links[-1].id} names parent {parent.id}, which "
                                  "is not older")
        links.append(parent)
    return links[::-1]


def to_keep(published: Sequence[Manifest], keep: int) -> set[str]:
    """Ids to keep: every checkpoint whose chain starts at one of the newest ``keep`` full
    checkpoints (without deltas: the newest ``keep``, as before)."""
    bases = sorted((m.id for m in published if not m.parent), reverse=True)[:keep]
    kept: set[str] = set()
    for manifest in published:
        try:
            links = chain(manifest, published)
        except CheckpointError:
            continue  # an orphaned delta: nothing can restore it
        if links[0].id in bases:
            kept.add(manifest.id)
    return kept
