"""A stream's progressive validation per partition: the AUC of its rows as the model scored
them before training on them, summed over the tasks every trainer finished.

The trainers write each finished stream task's score histogram at
``job/scores/<partition>//<task>`` (trainer/progressive.py); here they are summed per
partition (:func:`score_partition`). A partition's figure is *final* once every task of it is
trained (DONE) and each one's scores are in; until then it moves as tasks finish. The leading
master's status loop keeps final figures (:class:`ProgressiveBoard`: a partition is read from
the store until it is final, then never again); the launcher reads them all once at the job's
end for ``summary.json`` (:func:`stream_scores`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from elasticps.data.score_histogram import ScoreHistogram
from elasticps.errors import DataError, StoreValueError
from elasticps.master.stream_records import load_stream
from elasticps.store.api import Store
from elasticps.store.keys import read_task_scores

SHOWN = 500  # partitions the status document carries (the newest)


@dataclass(frozen=True)
class PartitionTasks:
    """An appended partition as the board needs it: its name, time and tasks."""

    name: str
    time: float | None
    num_tasks: int
    trained: bool  # every task of it is DONE


@dataclass(frozen=True)
class PartitionScore:
    partition: str
    time: float | None
    rows: int  # rows scored (fewer than the partition's under faults: progressive.py)
    auc: float | None  # None while no row, or only one class, was scored
    final: bool

    def as_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "time": self.time, "rows": self.rows,
                "auc": None if self.auc is None else round(self.auc, 6), "final": self.final}


def score_partition(store: Store, partition: PartitionTasks) -> PartitionScore:
    """The partition's figure from the scores its tasks' trainers wrote (a value that is not
    a score histogram is left out)."""
    total = ScoreHistogram()
    found = read_task_scores(store, partition.name)
    for task_id, doc in found.items():
        try:
            total.merge(ScoreHistogram.from_json(doc, f"the scores of task {task_id}"))
        except DataError:
            continue
    auc = total.auc()
    return PartitionScore(partition.name, partition.time, total.rows,
                          None if math.isnan(auc) else auc,
                          partition.trained and len(found) >= partition.num_tasks)


class ProgressiveBoard:
    """The figures of a stream's partitions, each read until it is final."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._final: dict[str, PartitionScore] = {}

    def look(self, partitions: Sequence[PartitionTasks]) -> list[dict[str, Any]]:
        """The newest :data:`SHOWN` partitions' figures, trained ones and the first untrained
        one (training is under way there), oldest first."""
        end = next((i + 1 for i, p in enumerate(partitions) if not p.trained), len(partitions))
        shown: list[dict[str, Any]] = []
        for partition in partitions[max(0, end - SHOWN):end]:
            score = self._final.get(partition.name)
            if score is None:
                score = score_partition(self.store, partition)
                if score.final:
                    self._final[partition.name] = score
            shown.append(score.as_dict())
        return shown


def stream_scores(store: Store) -> list[PartitionScore] | None:
    """Every appended partition's figure, in order (None: the job trained no stream)."""
    try:
        position, partitions = load_stream(store)
    except (DataError, StoreValueError, ValueError, KeyError):
        return None
    if not position.partitions:
        return None
    return [score_partition(store, PartitionTasks(p.name, p.time, 0, True)) for p in partitions]
