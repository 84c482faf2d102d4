"""``cloud_reader``: the seed's reader that trains on whatever tasks the master hands out.

It asks the master for a task of the current pass, yields the task's batches (each tagged with
pass, task, epoch and batch sequence number, the unit of exactly-once application), renews the
task's lease with progress reports as the consumer takes batches, and finishes the task once
the consumer asks for the batch after its last one. PASS_OVER moves it to the next pass
(``on_pass_end`` is called), RETRY_LATER waits with backoff, ALL_DONE ends the iteration, and
JOB_FAILED raises.

Batch numbering: a task's batches are numbered chunk by chunk; chunk ``c`` starts at
``sum(ceil(rows_j / batch_size) for j < c)`` (a chunk's last batch may be short). A task that
comes back with ``records_done = k`` resumes at the batch boundary at or before record ``k``,
with the same sequence numbers it would have had, so duplicates can be recognised downstream.

Where the batches come from is a parameter (``chunk_batches(chunk, start_record)``), so the
reader is tested without datasets; :func:`data_chunk_batches` is the data layer's.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass
from typing import Any

from elasticps.errors import DataError, FailedPreconditionError
from elasticps.master.client import MasterClient
from elasticps.proto import master_pb2
from elasticps.retry import RetryPolicy

log = logging.getLogger(__name__)

ChunkBatches = Callable[[master_pb2.Chunk, int], Iterator[Any]]
Outcome = master_pb2.GetTaskResponse.Outcome


@dataclass(frozen=True)
class TaskBatch:
    """One batch of one task, with its coordinates."""

    pass_id: int
    task_id: int
    epoch: int
    seq: int  # batch sequence number within the task, 0-based
    batch: Any
    records_done: int  # records of the task done once this batch is trained


def _num_batches(rows: int, batch_size: int) -> int:
    return -(-rows // batch_size)


def task_batches(task: master_pb2.Task, batch_size: int,
                 chunk_batches: ChunkBatches) -> Iterator[tuple[int, int, Any]]:
    """(seq, records done after it, batch) for ``task`` from its resume point on.

    With ``task.only_batches`` set, only those sequence numbers are produced (recovery).
    """
    if batch_size < 1:
        raise DataError(f"batch_size={batch_size} must be >= 1")
    wanted = set(task.only_batches)
    base_seq = 0
    base_rows = 0
    for chunk in task.chunks:
        rows, batches = chunk.num_rows, _num_batches(chunk.num_rows, batch_size)
        if wanted:
            for seq in sorted(s for s in wanted if base_seq <= s < base_seq + batches):
                start = (seq - base_seq) * batch_size
                batch = next(iter(chunk_batches(chunk, start)), None)
                if batch is None:
                    raise DataError(f"task {task.task_id} has no batch {seq} to recompute")
                yield seq, base_rows + start + _length(batch), batch
        elif task.records_done < base_rows + rows:
            offset = max(0, task.records_done - base_rows)
            offset -= offset % batch_size  # resume at a batch boundary: same seqs as before
            seq, done = base_seq + offset // batch_size, base_rows + offset
            for batch in chunk_batches(chunk, offset):
                done += _length(batch)
                yield seq, done, batch
                seq += 1
        base_seq += batches
        base_rows += rows


def _length(batch: Any) -> int:
    if isinstance(batch, Sized):
        return len(batch)
    raise DataError(f"a batch of type {type(batch).__name__} has no len(); cannot count records")


def cloud_reader(client: MasterClient, chunk_batches: ChunkBatches, batch_size: int, *,
                 start_pass: int = 0, report_every: int = 10,
                 on_pass_end: Callable[[int], None] | None = None,
                 retry_later_max_s: float = 1.0) -> Iterator[TaskBatch]:
    """Yield the batches of every task the master hands this trainer, pass after pass."""
    pass_id = start_pass
    delays = RetryPolicy(math.inf, 0.05, retry_later_max_s).backoff()
    while True:
        response = client.get_task(pass_id)
        outcome = response.outcome
        if outcome == Outcome.TASK:
            delays.reset()
            yield from _run_task(client, response.task, batch_size, chunk_batches, report_every)
        elif outcome == Outcome.RETRY_LATER:
            time.sleep(delays.next_delay() or 0.0)  # others hold the last tasks: poll
        elif outcome == Outcome.PASS_OVER:
            if on_pass_end is not None:
                on_pass_end(pass_id)
            log.info("Trainer %s: pass %d is over; moving to pass %d.", client.trainer,
                     pass_id, response.pass_id)
            pass_id = response.pass_id
        elif outcome == Outcome.ALL_DONE:
            if on_pass_end is not None:
                on_pass_end(pass_id)
            log.info("Trainer %s: all passes are done.", client.trainer)
            return
        elif outcome == Outcome.JOB_FAILED:
            raise FailedPreconditionError(f"the job failed: {response.reason}")
        else:
            raise FailedPreconditionError(f"the master answered GetTask with outcome {outcome}")


def _run_task(client: MasterClient, task: master_pb2.Task, batch_size: int,
              chunk_batches: ChunkBatches, report_every: int) -> Iterator[TaskBatch]:
    records = batches = 0
    top = 0  # last seq + 1: the task's batch count once it ran to its end
    done = task.records_done
    try:
        for seq, done, batch in task_batches(task, batch_size, chunk_batches):
            yield TaskBatch(task.pass_id, task.task_id, task.epoch, seq, batch, done)
            batches += 1
            top = max(top, seq + 1)
            records += _length(batch)
            if batches % report_every == 0 and not client.report_progress(task, done):
                return  # the task was taken from us (lease expired): drop it
    except DataError as exc:
        log.warning("Trainer %s cannot read task %d: %s", client.trainer, task.task_id, exc)
        client.task_failed(task, str(exc))
        return
    # TaskFinished's `batches` is the task's batch count (the master expects seqs 0..n-1 on
    # every shard); a resumed task ran only its tail, so count by the last seq.
    client.task_finished(task, records, batches if task.only_batches else top)


def data_chunk_batches(dataset_url: str, batch_size: int, **options: Any) -> ChunkBatches:
    """Batches from the data layer's ``iter_batches`` (options: ``features``, ``shuffle_seed``)."""
    from elasticps.data import ChunkRef, iter_batches  # heavy (pyarrow): load when used

    def read(chunk: master_pb2.Chunk, start_record: int) -> Iterator[Any]:
        ref = ChunkRef(chunk.path, chunk.row_group, chunk.num_rows)
        return iter_batches(dataset_url, ref, batch_size, start_record=start_record, **options)

    return read
