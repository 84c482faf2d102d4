"""Exactly-once across a resharding: which parts of a batch an earlier layout already applied.

When a job moves from N to M shards (:mod:`elasticps.pserver.reshard.split`), a batch may have been
applied on some old shards and not on others (its trainer died between two shards' pushes, or
the cut fell between them). A new shard holds rows and dense positions from every old shard, so
"has this shard applied batch B" no longer has one answer per shard: it has one per old shard.

Each new shard therefore starts with

- its own applied set: the batches every old shard had applied (their intersection), which is
  what it reports to the master's reconciliation, so a batch applied only in part is handed out
  again; and
- one :class:`LegacyLayout` per earlier layout: that layout's shard count and each of its shards'
  applied sets as they were at the cut.

When batch B is pushed and the shard's own set does not hold it, each sparse row and each dense
position is applied only if no earlier layout had applied B on the old shard that owned it (row
``id % N_k``, position by ``np.array_split`` over ``N_k``); B is then recorded as applied here.
So every (batch, row) and (batch, position) is applied exactly once across any chain of
reshardings. Layouts hold only batches of passes not yet pruned; one with nothing left is dropped.

A geo push carries one summed delta for a *window* of batches, which cannot be taken apart. For
each old shard owning a row or position it touches, the window is then applied *whole* there
(every batch of it: those rows are left alone), *not at all* (they are applied) or *in part*. In
part, neither choice is exact, so :class:`WindowMask` says so and the shard refuses the window
whole, recording none of its batches: they stay missing, and the pass-end reconciliation hands
them out again as a recovery dispatch, whose batches go out one window each (one batch is
never applied in part).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.routing import dense_owner, route_ids

Batch = tuple[int, int, int]  # (pass_id, task_id, seq)


@dataclass
class LegacyLayout:
    """An earlier layout of the job's shards and what each of them had applied at the cut."""

    num_shards: int
    applied: list[AppliedSet]  # one per shard of that layout, in shard order

    def __post_init__(self) -> None:
        if len(self.applied) != self.num_shards:
            raise ValueError(f"a layout of {self.num_shards} shards needs as many applied sets, "
                             f"got {len(self.applied)}")

    def applied_counts(self, batches: Sequence[Batch]) -> np.ndarray:
        """int [num_shards]: how many of ``batches`` old shard i had applied."""
        return np.array([sum(s.contains(*b) for b in batches) for s in self.applied],
                        dtype=np.int64)

    def copy(self) -> LegacyLayout:
        return LegacyLayout(self.num_shards, [s.copy() for s in self.applied])

    def prune(self, upto_pass: int) -> None:
        for applied in self.applied:
            applied.prune(upto_pass)

    @property
    def empty(self) -> bool:
        """Nothing but pruned passes left: every answer equals the shard's own set's."""
        return not any(len(s) for s in self.applied)


@dataclass(frozen=True)
class WindowMask:
    """What earlier layouts applied of a window, per row or position of one push."""

    done: np.ndarray  # bool: its old shard applied every batch of the window (leave it alone)
    partial: np.ndarray  # bool: its old shard applied some batches of the window, not all

    @property
    def exact(self) -> bool:
        """Whether masking ``done`` applies each (batch, row) once: no position is partial."""
        return not self.partial.any()


def _mask(layouts: Sequence[LegacyLayout], batches: Sequence[Batch], size: int,
          owners: Callable[[LegacyLayout], np.ndarray]) -> WindowMask:
    done = np.zeros(size, dtype=np.bool_)
    partial = np.zeros(size, dtype=np.bool_)
    for layout in layouts:
        counts = layout.applied_counts(batches)
        if not counts.any():
            continue
        owner = owners(layout)
        done |= (counts == len(batches))[owner]
        partial |= ((counts > 0) & (counts < len(batches)))[owner]
    return WindowMask(done, partial)


def sparse_done(layouts: Sequence[LegacyLayout], batches: Sequence[Batch],
                ids: np.ndarray) -> WindowMask:
    """Per id of ``ids``: whether some earlier layout applied ``batches`` to its row."""
    return _mask(layouts, batches, ids.shape[0], lambda layout: route_ids(ids, layout.num_shards))


def dense_done(layouts: Sequence[LegacyLayout], batches: Sequence[Batch], size: int,
               start: int, stop: int) -> WindowMask:
    """Per position ``[start, stop)`` of a dense parameter of ``size`` elements: whether some
    earlier layout applied ``batches`` to it."""
    positions = np.arange(start, stop, dtype=np.int64)
    return _mask(layouts, batches, stop - start,
                 lambda layout: dense_owner(positions, size, layout.num_shards))


def intersection(sets: Sequence[AppliedSet]) -> AppliedSet:
    """The batches every set holds (a pass below a set's floor counts as held by it)."""
    floor = min(s.floor for s in sets)
    by_task = [{(p, t): (below, set(seqs)) for p, t, below, seqs in s.tasks()} for s in sets]
    keys = sorted({key for tasks_of in by_task for key in tasks_of if key[0] >= floor})
    tasks: list[tuple[int, int, int]] = []
    extra: list[tuple[int, int, int]] = []
    for pass_id, task_id in keys:
        ranges = [tasks_of.get((pass_id, task_id))
                  for s, tasks_of in zip(sets, by_task, strict=True) if pass_id >= s.floor]
        if any(r is None for r in ranges):
            continue  # some shard applied none of the task's batches
        known = [r for r in ranges if r is not None]
        below = min(b for b, _ in known)
        candidates = set(range(below, max(b for b, _ in known))).union(*(e for _, e in known))
        common = sorted(q for q in candidates if all(q < b or q in e for b, e in known))
        tasks.append((pass_id, task_id, below))
        extra.extend((pass_id, task_id, q) for q in common)
    return AppliedSet.from_arrays(np.array(tasks, np.int64).reshape(-1, 3),
                                  np.array(extra, np.int64).reshape(-1, 3), None, floor)
