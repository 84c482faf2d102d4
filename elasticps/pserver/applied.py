"""Which batches a shard has applied: the bookkeeping exactly-once is built on.

A batch is ``(pass_id, task_id, seq)``. Per ``(pass_id, task_id)`` we keep a watermark ``below``
(every seq < below is applied) and the set of applied seqs above it. Trainers push a task's
batches in order, so the set stays empty or tiny and a task costs a few dozen bytes however many
batches it has. The set is saved in checkpoints as two int64 arrays.

Stored as arrays, not Python objects: one row per task in int64 arrays (pass, task, below,
applications), found through a vectorised hash index on ``pass << 32 | task`` (tasks beyond
that range, which no real job reaches, in a small dict), and the seqs above a watermark in a
dict holding only the tasks that have some. A task costs ~100 bytes instead of ~450, and a
copy (a checkpoint's snapshot, under the shard lock) copies four arrays instead of walking a
dict of objects.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from elasticps.pserver.index import HashIndex

_PASS_LIMIT = 1 << 31  # passes and tasks below these pack into one non-negative int64 key
_TASK_LIMIT = 1 << 32
_COLUMNS = 4  # pass, task, below, applications


class AppliedSet:
    """The set of applied batches of one shard. Not thread-safe: the shard's lock guards it."""

    def __init__(self) -> None:
        self._rows = np.zeros((16, _COLUMNS), dtype=np.int64)  # one row per task
        self._n = 0
        self._index = HashIndex()
        self._wide: dict[tuple[int, int], int] = {}  # tasks whose key does not pack
        self._extra: dict[int, set[int]] = {}  # row -> applied seqs above its watermark
        self.floor = 0  # passes below it were pruned: their batches count as applied
        # The last task looked up: a push asks contains() then add() of one task, and a task's
        # batches come one after another, so most lookups end here.
        self._last: tuple[int, int, int] = (-1, -1, -1)

    # -- finding a task's row ---------------------------------------------------------------

    @staticmethod
    def _packs(pass_id: int, task_id: int) -> bool:
        return 0 <= pass_id < _PASS_LIMIT and 0 <= task_id < _TASK_LIMIT

    def _row(self, pass_id: int, task_id: int) -> int:
        """The task's row, -1 if it has none."""
        last_pass, last_task, last_row = self._last
        if pass_id == last_pass and task_id == last_task:
            return last_row
        if not self._packs(pass_id, task_id):
            row = self._wide.get((pass_id, task_id), -1)
        else:
            row = self._index.lookup_one((pass_id << 32) | task_id)
        if row >= 0:
            self._last = (pass_id, task_id, row)
        return row

    def _new_row(self, pass_id: int, task_id: int) -> int:
        if self._n == self._rows.shape[0]:
            grown = np.zeros((2 * self._n, _COLUMNS), dtype=np.int64)
            grown[:self._n] = self._rows
            self._rows = grown
        row = self._n
        self._rows[row] = (pass_id, task_id, 0, 0)
        self._n += 1
        if self._packs(pass_id, task_id):
            self._index.insert_one((pass_id << 32) | task_id, row)
        else:
            self._wide[(pass_id, task_id)] = row
        return row

    def _rebuild(self, rows: np.ndarray, extra: dict[int, set[int]]) -> None:
        """Hold exactly ``rows`` (int64 [k, 4]) with ``extra`` seqs by row, index rebuilt."""
        self._last = (-1, -1, -1)  # rows are renumbered
        self._n = rows.shape[0]
        self._rows = np.zeros((max(16, self._n), _COLUMNS), dtype=np.int64)
        self._rows[:self._n] = rows
        self._extra = extra
        passes, tasks = rows[:, 0], rows[:, 1]
        packs = (passes < _PASS_LIMIT) & (tasks < _TASK_LIMIT)
        self._index = HashIndex(2 * int(np.count_nonzero(packs)))
        self._index.insert((passes[packs] << 32) | tasks[packs], np.flatnonzero(packs))
        self._wide = {(int(rows[r, 0]), int(rows[r, 1])): int(r)
                      for r in np.flatnonzero(~packs)}

    def _order(self) -> np.ndarray:
        """Row numbers in (pass, task) order."""
        return np.lexsort((self._rows[:self._n, 1], self._rows[:self._n, 0]))

    # -- the public methods (unchanged in meaning) ------------------------------------------

    def add(self, pass_id: int, task_id: int, seq: int) -> bool:
        """Record an application of a batch; False if it was already recorded (a duplicate:
        the caller was supposed to check :meth:`contains` first, and the extra application is
        still counted so that it shows in :meth:`tasks`)."""
        row = self._row(pass_id, task_id)
        if row < 0:
            row = self._new_row(pass_id, task_id)
        rows = self._rows
        rows[row, 3] += 1
        below = int(rows[row, 2])
        extra = self._extra.get(row)
        if seq < below or (extra is not None and seq in extra):
            return False
        if seq == below:  # in order: the watermark moves, through any seqs waiting above it
            below += 1
            while extra and below in extra:
                extra.remove(below)
                below += 1
            rows[row, 2] = below
            if extra is not None and not extra:
                del self._extra[row]
        else:
            self._extra.setdefault(row, set()).add(seq)
        return True

    def contains(self, pass_id: int, task_id: int, seq: int) -> bool:
        if pass_id < self.floor:
            return True
        row = self._row(pass_id, task_id)
        if row < 0:
            return False
        return seq < int(self._rows[row, 2]) or seq in self._extra.get(row, ())

    def __len__(self) -> int:
        """Number of applied batches recorded."""
        return int(self._rows[:self._n, 2].sum()) + sum(len(s) for s in self._extra.values())

    def tasks(self) -> Iterator[tuple[int, int, int, list[int]]]:
        """``(pass_id, task_id, below, sorted extra seqs)`` per task, in key order."""
        for row in self._order().tolist():
            pass_id, task_id, below, _ = self._rows[row].tolist()
            yield pass_id, task_id, below, sorted(self._extra.get(row, ()))

    def applications(self, pass_id: int, task_id: int) -> int:
        """How many times batches of the task were applied (== its batch count unless a batch
        was applied twice)."""
        row = self._row(pass_id, task_id)
        return 0 if row < 0 else int(self._rows[row, 3])

    def prune(self, upto_pass: int) -> int:
        """Forget every batch of passes < ``upto_pass`` (once every shard has checkpointed
        them, they can never be replayed) and refuse those passes from now on by raising the
        floor. Returns how many tasks were forgotten."""
        keep = self._rows[:self._n, 0] >= upto_pass
        doomed = self._n - int(np.count_nonzero(keep))
        if doomed:
            self._keep_rows(keep)
        self.floor = max(self.floor, upto_pass)
        return doomed

    def forget_task(self, pass_id: int, task_id: int) -> bool:
        """Forget one task's batches (finer-grained pruning)."""
        row = self._row(pass_id, task_id)
        if row < 0:
            return False
        keep = np.ones(self._n, dtype=bool)
        keep[row] = False
        self._keep_rows(keep)
        return True

    def _keep_rows(self, keep: np.ndarray) -> None:
        kept = np.flatnonzero(keep)
        renumber = {int(old): new for new, old in enumerate(kept.tolist())
                    if int(old) in self._extra}
        self._rebuild(self._rows[:self._n][keep],
                      {renumber[old]: seqs for old, seqs in self._extra.items()
                       if old in renumber})

    def counts_array(self) -> np.ndarray:
        """int64 [k, 3] of (pass, task, applications): the checkpoint form of the counts."""
        return self._rows[:self._n][self._order()][:, [0, 1, 3]].copy()

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``tasks`` int64 [k, 3] of (pass, task, below) and ``extra`` int64 [m, 3] of
        (pass, task, seq): the checkpoint form."""
        order = self._order()
        tasks = self._rows[:self._n][order][:, :3].copy()
        extra = [(int(self._rows[row, 0]), int(self._rows[row, 1]), seq)
                 for row in order.tolist() if row in self._extra
                 for seq in sorted(self._extra[row])]
        return tasks, np.array(extra, dtype=np.int64).reshape(-1, 3)

    @classmethod
    def from_arrays(cls, tasks: np.ndarray, extra: np.ndarray, counts: np.ndarray | None = None,
                    floor: int = 0) -> AppliedSet:
        """Rebuild from :meth:`to_arrays` (and :meth:`counts_array`; without counts, as in
        checkpoints written before they existed, each batch counts as applied once)."""
        applied = cls()
        applied.floor = floor
        tasks = np.asarray(tasks, dtype=np.int64).reshape(-1, 3)
        extra = np.unique(np.asarray(extra, dtype=np.int64).reshape(-1, 3), axis=0)
        # One row per distinct task of either array (a task may appear only in ``extra``).
        keys = np.unique(np.concatenate([tasks[:, :2], extra[:, :2]]), axis=0)
        rows = np.zeros((keys.shape[0], _COLUMNS), dtype=np.int64)
        rows[:, :2] = keys
        if keys.shape[0]:
            rows[_positions(keys, tasks[:, :2]), 2] = tasks[:, 2]
        seqs: dict[int, set[int]] = {}
        extra_rows = _positions(keys, extra[:, :2])
        for row, seq in zip(extra_rows.tolist(), extra[:, 2].tolist(), strict=True):
            seqs.setdefault(row, set()).add(seq)
        rows[:, 3] = rows[:, 2] + np.bincount(extra_rows, minlength=keys.shape[0])
        if counts is not None and counts.size and keys.shape[0]:
            counts = np.asarray(counts, dtype=np.int64).reshape(-1, 3)
            at = _positions(keys, counts[:, :2], missing_ok=True)
            found = at >= 0
            rows[at[found], 3] = counts[found, 2]
        applied._rebuild(rows, seqs)
        return applied

    def copy(self) -> AppliedSet:
        out = AppliedSet()
        out.floor = self.floor
        out._rows = self._rows[:max(16, self._n)].copy()
        out._n = self._n
        out._index = self._index.copy()
        out._wide = dict(self._wide)
        out._extra = {row: set(seqs) for row, seqs in self._extra.items()}
        out._last = self._last
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AppliedSet) or self.floor != other.floor:
            return False
        mine, theirs = self.to_arrays(), other.to_arrays()
        return (all(np.array_equal(a, b) for a, b in zip(mine, theirs, strict=True))
                and np.array_equal(self.counts_array(), other.counts_array()))

    __hash__ = None  # type: ignore[assignment]


_PAIR = np.dtype([("pass", "<i8"), ("task", "<i8")])


def _positions(keys: np.ndarray, wanted: np.ndarray, missing_ok: bool = False) -> np.ndarray:
    """Row of each ``(pass, task)`` of ``wanted`` in ``keys`` (unique pairs sorted by pass,
    then task); -1 where absent (only with ``missing_ok``)."""
    if wanted.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    # Each (pass, task) row viewed as one record: records sort by pass, then task.
    sorted_keys = np.ascontiguousarray(keys).view(_PAIR).reshape(-1)
    probe = np.ascontiguousarray(wanted).view(_PAIR).reshape(-1)
    at = np.minimum(np.searchsorted(sorted_keys, probe), sorted_keys.shape[0] - 1)
    hit = sorted_keys[at] == probe
    if not missing_ok and not hit.all():
        raise ValueError("a task of the applied set's arrays is missing from its keys")
    return np.where(hit, at, -1).astype(np.int64)
