"""A master with no sockets: the real pure ``TaskQueue`` behind the trainer's ``TaskSource``.

The answers are built by the master service's own ``get_task_response``, so a trainer stepping
against this sees what it would see over gRPC. Time is ``QueueMaster.now``, moved by the test.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from elasticps.data.batch_plan import BatchPlan
from elasticps.data.manifest import ChunkRef
from elasticps.errors import DataError
from elasticps.master.service import get_task_response
from elasticps.master.snapshot import DatasetRecord
from elasticps.master.task_queue import GetTaskResult, QueuePolicy
from elasticps.proto import master_pb2


class QueueMaster:
    """One job's queue; :meth:`client` is a trainer's handle on it."""

    def __init__(self, chunk_rows: Sequence[int], chunks_per_task: int = 1, num_passes: int = 1,
                 policy: QueuePolicy | None = None, batch_size: int = 4) -> None:
        chunks = tuple(ChunkRef(f"part-{i}.parquet", 0, rows) for i, rows in enumerate(chunk_rows))
        self.dataset = DatasetRecord("mem://ctr", chunks_per_task, num_passes, chunks,
                                     BatchPlan(batch_size))
        self.queue = self.dataset.new_queue(policy)
        self.now = 0.0

    def client(self, trainer: str, log: list[str] | None = None) -> QueueClient:
        return QueueClient(self, trainer, log if log is not None else [])


class QueueClient:
    """A :class:`~elasticps.trainer.api.TaskSource` on a :class:`QueueMaster`; each call is
    logged ("get_task 0 -> TASK", "report 8", "finished 0", "failed 1: ...")."""

    def __init__(self, master: QueueMaster, trainer: str, log: list[str]) -> None:
        self.master, self.trainer, self.log = master, trainer, log
        self.scripted: list[master_pb2.GetTaskResponse] = []  # answered before the queue's

    def set_dataset(self, url: str, chunks_per_task: int, num_passes: int,
                    plan: BatchPlan) -> Any:
        return None

    def get_task(self, pass_id: int) -> master_pb2.GetTaskResponse:
        if self.scripted:
            response = self.scripted.pop(0)
        else:
            result, _ = self.master.queue.get_task(self.trainer, pass_id, self.master.now)
            response = self._response(result)
        self.log.append(f"get_task {pass_id} -> {outcome_name(response)}")
        return response

    def finish_and_get(self, task: master_pb2.Task, records: int, batches: int,
                       pass_id: int) -> tuple[bool, master_pb2.GetTaskResponse]:
        """The queue's one combined transition (a scripted answer replaces its GetTask half);
        logged as one call: "finished 0 (5 batches) + get_task 0 -> TASK"."""
        reply, result, _ = self.master.queue.finish_and_get(
            self.trainer, task.task_id, task.epoch, records, pass_id, self.master.now,
            batches=batches)
        response = self.scripted.pop(0) if self.scripted else self._response(result)
        self.log.append(f"finished {task.task_id} ({batches} batches) + get_task {pass_id} "
                        f"-> {outcome_name(response)}")
        return reply.accepted, response

    def _response(self, result: GetTaskResult) -> master_pb2.GetTaskResponse:
        return get_task_response(result, self.master.dataset, 0.0)

    def report_progress(self, task: master_pb2.Task, records_done: int) -> bool:
        reply, _ = self.master.queue.report_progress(self.trainer, task.task_id, task.epoch,
                                                     records_done, self.master.now)
        self.log.append(f"report {records_done}")
        return reply.accepted

    def task_finished(self, task: master_pb2.Task, records: int, batches: int) -> bool:
        reply, _ = self.master.queue.task_finished(self.trainer, task.task_id, task.epoch,
                                                   records, self.master.now, batches=batches)
        self.log.append(f"finished {task.task_id} ({batches} batches)")
        return reply.accepted

    def task_failed(self, task: master_pb2.Task, reason: str) -> bool:
        reply, _ = self.master.queue.task_failed(self.trainer, task.task_id, task.epoch, reason,
                                                 self.master.now)
        self.log.append(f"failed {task.task_id}")
        return reply.accepted

    def request_save_model(self, block_seconds: float) -> bool:
        return False

    def close(self) -> None:
        pass


def outcome_name(response: master_pb2.GetTaskResponse) -> str:
    values = master_pb2.GetTaskResponse.Outcome.values()
    return master_pb2.GetTaskResponse.Outcome.Name(response.outcome) \
        if response.outcome in values else str(response.outcome)


def row_batches(chunk: master_pb2.Chunk, start: int, batch_size: int = 4,
                bad: frozenset[str] = frozenset()) -> Iterator[list[tuple[str, int]]]:
    """Records named (path, row); a chunk whose path is in ``bad`` breaks after two batches."""
    rows = [(chunk.path, r) for r in range(start, chunk.num_rows)]
    for begin in range(0, len(rows), batch_size):
        if chunk.path in bad and begin >= 2 * batch_size:
            raise DataError(f"chunk {chunk.path} is garbled at row {start + begin}")
        yield rows[begin:begin + batch_size]
