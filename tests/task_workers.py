"""Drive the real trainer task loop without pservers: a worker that keeps what it is handed.

Master tests use it as their trainer; the loop's unit tests use its event log to check the
order of training, flushes and reports.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from elasticps.proto import master_pb2
from elasticps.trainer.api import TaskSource
from elasticps.trainer.task_batches import ChunkBatches, TaskBatch, task_batches
from elasticps.trainer.task_loop import TaskEnd, TaskLoop, TaskWorker


class Collect(TaskWorker):
    """Keeps every batch (with the batch after it) and logs each hook the loop calls."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self.items: list[TaskBatch] = []
        self.next_batches: list[Any] = []
        self.begun: list[int] = []
        self.ended: list[int] = []
        self.tasks: list[tuple[int, int, TaskEnd]] = []  # (pass, task, how it ended)
        self.log: list[str] = []

    def begin_pass(self, pass_id: int) -> None:
        self.begun.append(pass_id)
        self.log.append(f"begin pass {pass_id}")

    def train(self, item: TaskBatch, next_batch: Any | None) -> None:
        if self.keep:
            self.items.append(item)
            self.next_batches.append(next_batch)
        self.log.append(f"train {item.task_id}/{item.seq}")

    def flush(self) -> None:
        self.log.append("flush")

    def abandon(self) -> None:
        self.log.append("abandon")

    def end_task(self, task: master_pb2.Task, how: TaskEnd) -> None:
        self.tasks.append((task.pass_id, task.task_id, how))
        self.log.append(f"{how.value} {task.task_id}")

    def end_pass(self, pass_id: int) -> None:
        self.ended.append(pass_id)
        self.log.append(f"end pass {pass_id}")


def task_loop(source: TaskSource, chunk_batches: ChunkBatches, batch_size: int,
              worker: TaskWorker, *, trainer_name: str = "t0", **options: Any) -> TaskLoop:
    """A :class:`TaskLoop` reading batches of ``batch_size`` through ``chunk_batches``."""

    def batches(task: master_pb2.Task) -> Iterator[TaskBatch]:
        return task_batches(task, batch_size, chunk_batches)

    return TaskLoop(source, batches, worker, trainer_name=trainer_name, **options)
