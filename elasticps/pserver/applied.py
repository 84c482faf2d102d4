"""Which batches a shard has applied: the bookkeeping exactly-once is built on.

A batch is ``(pass_id, task_id, seq)``. Per ``(pass_id, task_id)`` we keep a watermark ``below``
(every seq < below is applied) and the set of applied seqs above it. Trainers push a task's
batches in order, so the set stays empty or tiny and a task costs a few dozen bytes however many
batches it has. The set is saved in checkpoints as two int64 arrays.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np


@dataclass
class _AppliedSeqs:
    below: int = 0
    extra: set[int] = field(default_factory=set)
    applications: int = 0

    def add(self, seq: int) -> bool:
        if seq < self.below or seq in self.extra:
            return False
        self.extra.add(seq)
        while self.below in self.extra:
            self.extra.remove(self.below)
            self.below += 1
        return True

    def __contains__(self, seq: int) -> bool:
        return seq < self.below or seq in self.extra

    def __len__(self) -> int:
        return self.below + len(self.extra)


class AppliedSet:
    """The set of applied batches of one shard. Not thread-safe: the shard's lock guards it."""

    def __init__(self) -> None:
        self._tasks: dict[tuple[int, int], _AppliedSeqs] = {}
        self.floor = 0  # passes below it were pruned: their batches count as applied

    def add(self, pass_id: int, task_id: int, seq: int) -> bool:
        """Record an application of a batch; False if it was already recorded (a duplicate:
        the caller was supposed to check :meth:`contains` first, and the extra application is
        still counted so that it shows in :meth:`tasks`)."""
        seqs = self._tasks.setdefault((pass_id, task_id), _AppliedSeqs())
        seqs.applications += 1
        return seqs.add(seq)

    def contains(self, pass_id: int, task_id: int, seq: int) -> bool:
        if pass_id < self.floor:
            return True
        seqs = self._tasks.get((pass_id, task_id))
        return seqs is not None and seq in seqs

    def __len__(self) -> int:
        """Number of applied batches recorded."""
        return sum(len(s) for s in self._tasks.values())

    def tasks(self) -> Iterator[tuple[int, int, int, list[int]]]:
        """``(pass_id, task_id, below, sorted extra seqs)`` per task, in key order."""
        for (pass_id, task_id), seqs in sorted(self._tasks.items()):
            yield pass_id, task_id, seqs.below, sorted(seqs.extra)

    def applications(self, pass_id: int, task_id: int) -> int:
        """How many times batches of the task were applied (== its batch count unless a batch
        was applied twice)."""
        seqs = self._tasks.get((pass_id, task_id))
        return 0 if seqs is None else seqs.applications

    def prune(self, upto_pass: int) -> int:
        """Forget every batch of passes < ``upto_pass`` (once every shard has checkpointed
        them, they can never be replayed) and refuse those passes from now on by raising the
        floor. Returns how many tasks were forgotten."""
        doomed = [key for key in self._tasks if key[0] < upto_pass]
        for key in doomed:
            del self._tasks[key]
        self.floor = max(self.floor, upto_pass)
        return len(doomed)

    def forget_task(self, pass_id: int, task_id: int) -> bool:
        """Forget one task's batches (finer-grained pruning)."""
        return self._tasks.pop((pass_id, task_id), None) is not None

    def counts_array(self) -> np.ndarray:
        """int64 [k, 3] of (pass, task, applications): the checkpoint form of the counts."""
        rows = [(p, t, s.applications) for (p, t), s in sorted(self._tasks.items())]
        return np.array(rows, dtype=np.int64).reshape(-1, 3)

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``tasks`` int64 [k, 3] of (pass, task, below) and ``extra`` int64 [m, 3] of
        (pass, task, seq): the checkpoint form."""
        tasks = [(p, t, s.below) for (p, t), s in sorted(self._tasks.items())]
        extra = [(p, t, q) for (p, t), s in sorted(self._tasks.items()) for q in sorted(s.extra)]
        return (np.array(tasks, dtype=np.int64).reshape(-1, 3),
                np.array(extra, dtype=np.int64).reshape(-1, 3))

    @classmethod
    def from_arrays(cls, tasks: np.ndarray, extra: np.ndarray, counts: np.ndarray | None = None,
                    floor: int = 0) -> AppliedSet:
        """Rebuild from :meth:`to_arrays` (and :meth:`counts_array`; without counts, as in
        checkpoints written before they existed, each batch counts as applied once)."""
        applied = cls()
        applied.floor = floor
        for pass_id, task_id, below in tasks.tolist():
            applied._tasks[(pass_id, task_id)] = _AppliedSeqs(below=below)
        for pass_id, task_id, seq in extra.tolist():
            applied._tasks.setdefault((pass_id, task_id), _AppliedSeqs()).extra.add(seq)
        for seqs in applied._tasks.values():
            seqs.applications = len(seqs)
        if counts is not None:
            for pass_id, task_id, count in counts.tolist():
                entry = applied._tasks.get((pass_id, task_id))
                if entry is not None:
                    entry.applications = count
        return applied

    def copy(self) -> AppliedSet:
        return AppliedSet.from_arrays(*self.to_arrays(), self.counts_array(), self.floor)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, AppliedSet) and self._tasks == other._tasks
                and self.floor == other.floor)

    __hash__ = None  # type: ignore[assignment]
