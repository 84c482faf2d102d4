"""Pass-end reconciliation, decided purely: which batches does some pserver shard miss?

Input: the expected batches of a pass (``{task_id: batches}`` of its DONE tasks, from
:meth:`~elasticps.master.task_queue.TaskQueue.expected_batches`: counted from the data) and one
:class:`ShardReport`
per shard (the applied batches of that pass held by the checkpoint the shard just wrote).
Output: a :class:`Reconciliation` with the missing seqs per task (the union over shards: a
recovery dispatch recomputes them once and pushes them to every shard; the shards that have a
batch answer "duplicate") and a per-shard account of expected, held, missing, duplicate and
unexpected batches. No I/O here; :mod:`elasticps.master.reconcile_loop` does the calls.

The expected counts are the data's (the chunks' row counts and the job's batch size), never
what a trainer or a shard reports: a tail that every shard lost (a trainer that reported its
last batch and died, a restore from an older checkpoint) is still missing. A shard holding a
seq at or past a task's count holds an *unexpected* batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HeldSeqs:
    """The batches of one task a shard holds: every seq < ``below`` plus ``extra``."""

    below: int = 0
    extra: frozenset[int] = frozenset()
    applications: int = 0  # times batches of this task were applied on the shard

    def __contains__(self, seq: int) -> bool:
        return seq < self.below or seq in self.extra

    @property
    def count(self) -> int:
        return self.below + len(self.extra)

    def held_below(self, batches: int) -> int:
        """How many seqs in ``[0, batches)`` are held."""
        return min(self.below, batches) + sum(1 for s in self.extra if s < batches)

    def missing(self, batches: int) -> list[int]:
        """Seqs in ``[0, batches)`` not held."""
        return [s for s in range(self.below, batches) if s not in self.extra]


@dataclass(frozen=True)
class ShardReport:
    """What one shard's checkpoint holds of a pass."""

    shard: int
    tasks: Mapping[int, HeldSeqs]
    checkpoint_id: str = ""
    floor: int = 0  # passes below it were pruned: everything of them counts as held
    incarnation: str = ""


@dataclass(frozen=True)
class ShardAccount:
    shard: int
    expected: int
    held: int  # expected batches the shard holds
    missing: int
    duplicates: int  # applications beyond one per held batch (must be 0)
    unexpected: int  # batches held that no DONE task accounts for (e.g. a FAILED task's)
    checkpoint_id: str

    def as_dict(self) -> dict[str, Any]:
        return {"shard": self.shard, "expected": self.expected, "held": self.held,
                "missing": self.missing, "duplicates": self.duplicates,
                "unexpected": self.unexpected, "checkpoint": self.checkpoint_id}


@dataclass(frozen=True)
class Reconciliation:
    pass_id: int
    missing: dict[int, tuple[int, ...]]  # task -> seqs some shard misses (union over shards)
    shards: list[ShardAccount] = field(default_factory=list)
    batches: dict[int, int] = field(default_factory=dict)  # task -> its batch count

    @property
    def complete(self) -> bool:
        return not self.missing

    def as_dict(self) -> dict[str, Any]:
        return {"pass": self.pass_id, "complete": self.complete,
                "expected_batches": sum(self.batches.values()),
                "missing_tasks": {str(t): list(s) for t, s in sorted(self.missing.items())},
                "batches": {str(t): n for t, n in sorted(self.batches.items())},
                "shards": [a.as_dict() for a in self.shards]}


def reconcile(pass_id: int, expected: Mapping[int, int],
              reports: Sequence[ShardReport]) -> Reconciliation:
    """Compare every shard's holdings of ``pass_id`` with the expected batches."""
    batches = dict(expected)
    missing: dict[int, set[int]] = {}
    accounts = []
    for report in reports:
        pruned = pass_id < report.floor
        held = lost = duplicates = unexpected = 0
        for task_id, count in batches.items():
            seqs = report.tasks.get(task_id, HeldSeqs())
            gone = [] if pruned else seqs.missing(count)
            if gone:
                missing.setdefault(task_id, set()).update(gone)
            lost += len(gone)
            held += count - len(gone)
        for task_id, seqs in report.tasks.items():
            duplicates += max(0, seqs.applications - seqs.count)
            known = batches.get(task_id)
            unexpected += seqs.count if known is None else seqs.count - seqs.held_below(known)
        accounts.append(ShardAccount(report.shard, sum(batches.values()), held, lost,
                                     duplicates, unexpected, report.checkpoint_id))
    return Reconciliation(pass_id, {t: tuple(sorted(s)) for t, s in sorted(missing.items())},
                          accounts, batches)


def report_from_tasks(shard: int, tasks: Iterable[Any], *, checkpoint_id: str = "",
                      floor: int = 0, incarnation: str = "") -> ShardReport:
    """A report from ``pserver_pb2.AppliedTask`` messages (of one pass)."""
    held = {int(t.task_id): HeldSeqs(int(t.below), frozenset(int(s) for s in t.extra),
                                     int(t.applications))
            for t in tasks}
    return ShardReport(shard, held, checkpoint_id, floor, incarnation)
