"""A task's batches, numbered so that a recomputed batch carries the same ``seq`` every time.

A task's batches are numbered chunk by chunk; chunk ``c`` starts at
``sum(ceil(rows_j / batch_size) for j < c)`` (a chunk's last batch may be short;
:mod:`elasticps.data.batch_plan` holds that arithmetic, which the master counts with too). A
task that comes back with ``records_done = k`` resumes at the batch boundary at or before
record ``k``, with the same sequence numbers it would have had; with ``only_batches`` (a
recovery dispatch) only those seqs are produced. ``BatchRef(pass, task, seq)`` is the unit of
exactly-once on the pservers, so this numbering is a contract with them. A batch's ``step``,
its number in the job's data order, is ``pass * Task.pass_batches + Task.first_batch + seq``
(the master counts both), the same whoever trains it and however often.

Where the batches come from is a parameter (``chunk_batches(chunk, start_record)``), so the
numbering is tested without datasets; :func:`data_chunk_batches` is the data layer's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass
from typing import Any

from elasticps import data
from elasticps.data.batch_plan import batches_in_chunk
from elasticps.errors import DataError
from elasticps.proto import master_pb2

# (chunk, first record) -> that chunk's batches from the record on
ChunkBatches = Callable[[master_pb2.Chunk, int], Iterator[Any]]


@dataclass(frozen=True)
class TaskBatch:
    """One batch of one task, with its coordinates."""

    pass_id: int
    task_id: int
    epoch: int
    seq: int  # batch sequence number within the task, 0-based
    batch: Any
    records_done: int  # records of the task done once this batch is trained
    step: int = 0  # its number in the job's data order (BatchRef.step: lr schedules read it)
    event_time: float = 0.0  # a stream's batch: its partition's time (BatchRef.event_time)
    partition: str = ""  # a stream's batch: its partition's name (progressive validation)


# task -> its batches from its resume point on (what the task loop reads)
BatchSource = Callable[[master_pb2.Task], Iterator[TaskBatch]]


def task_batches(task: master_pb2.Task, batch_size: int,
                 chunk_batches: ChunkBatches) -> Iterator[TaskBatch]:
    """The batches of ``task`` from its resume point on (or just ``task.only_batches``)."""
    if batch_size < 1:
        raise DataError(f"batch_size={batch_size} must be >= 1")
    wanted = set(task.only_batches)
    base_seq = 0
    base_rows = 0

    def tagged(seq: int, done: int, batch: Any) -> TaskBatch:
        step = task.pass_id * task.pass_batches + task.first_batch + seq
        return TaskBatch(task.pass_id, task.task_id, task.epoch, seq, batch, done, step,
                         task.event_time, task.partition)

    for chunk in task.chunks:
        rows, batches = chunk.num_rows, batches_in_chunk(chunk.num_rows, batch_size)
        if wanted:
            for seq in sorted(s for s in wanted if base_seq <= s < base_seq + batches):
                start = (seq - base_seq) * batch_size
                batch = next(iter(chunk_batches(chunk, start)), None)
                if batch is None:
                    raise DataError(f"task {task.task_id} has no batch {seq} to recompute")
                yield tagged(seq, base_rows + start + batch_length(batch), batch)
        elif task.records_done < base_rows + rows:
            offset = max(0, task.records_done - base_rows)
            offset -= offset % batch_size  # resume at a batch boundary: same seqs as before
            seq, done = base_seq + offset // batch_size, base_rows + offset
            for batch in chunk_batches(chunk, offset):
                done += batch_length(batch)
                yield tagged(seq, done, batch)
                seq += 1
        base_seq += batches
        base_rows += rows


def batch_length(batch: Any) -> int:
    """Records in ``batch``; batches must have a ``len()`` to be counted."""
    if isinstance(batch, Sized):
        return len(batch)
    raise DataError(f"a batch of type {type(batch).__name__} has no len(); cannot count records")


def data_chunk_batches(dataset_url: str, batch_size: int, **options: Any) -> ChunkBatches:
    """Batches from the data layer's ``iter_batches`` (options: ``features``, ``shuffle_seed``)."""

    def read(chunk: master_pb2.Chunk, start_record: int) -> Iterator[Any]:
        # elasticps.data loads its readers (and pyarrow) on first use, i.e. here.
        ref = data.ChunkRef(chunk.path, chunk.row_group, chunk.num_rows)
        return data.iter_batches(dataset_url, ref, batch_size, start_record=start_record,
                                 **options)

    return read
