"""A task's batch numbering: resumes and recoveries get the same seqs as the first run."""

from __future__ import annotations

import pytest

from elasticps.errors import DataError
from elasticps.proto import master_pb2
from elasticps.trainer.task_batches import batch_length, task_batches
from tests.unit.trainer.queue_master import QueueMaster, row_batches


def two_chunk_task() -> master_pb2.Task:
    return master_pb2.Task(task_id=0, pass_id=1, epoch=3, chunks=[
        master_pb2.Chunk(path="p", row_group=0, num_rows=10),
        master_pb2.Chunk(path="p", row_group=1, num_rows=6)])


def test_batches_are_numbered_chunk_by_chunk_and_tagged_with_the_task() -> None:
    full = list(task_batches(two_chunk_task(), 4, row_batches))
    assert [b.seq for b in full] == [0, 1, 2, 3, 4]  # 4+4+2 | 4+2
    assert [b.records_done for b in full] == [4, 8, 10, 14, 16]
    assert {(b.pass_id, b.task_id, b.epoch) for b in full} == {(1, 0, 3)}


def test_a_resumed_task_starts_at_the_batch_boundary_with_the_same_seqs() -> None:
    task = two_chunk_task()
    full = list(task_batches(task, 4, row_batches))
    task.records_done = 9  # not a batch boundary: resume at record 8
    assert list(task_batches(task, 4, row_batches)) == full[2:]
    task.records_done = 16
    assert list(task_batches(task, 4, row_batches)) == []


def test_a_recovery_dispatch_yields_only_its_seqs() -> None:
    task = two_chunk_task()
    full = list(task_batches(task, 4, row_batches))
    task.only_batches.extend([1, 4])
    assert list(task_batches(task, 4, row_batches)) == [full[1], full[4]]
    with pytest.raises(DataError, match="task 0 has no batch 1 to recompute"):
        list(task_batches(task, 4, lambda chunk, start: iter([])))  # the chunk came up short


def test_bad_arguments_are_data_errors_naming_the_value() -> None:
    with pytest.raises(DataError, match="batch_size=0"):
        list(task_batches(two_chunk_task(), 0, row_batches))
    with pytest.raises(DataError, match="type object has no len"):
        batch_length(object())


def test_every_batch_of_the_job_gets_its_number_in_the_data_order() -> None:
    """``step`` (what learning-rate schedules read) counts batches through the job's data in
    task order, pass after pass, from the master's own task messages; a recovery dispatch gets
    the same numbers as the first run."""
    master = QueueMaster([10, 6, 9, 3], chunks_per_task=2, num_passes=2, batch_size=4)
    trainer = master.client("t0")
    steps: dict[tuple[int, int, int], int] = {}
    for pass_id in range(2):
        for _ in range(2):  # tasks of chunks [10, 6] (3 + 2 batches) and [9, 3] (3 + 1)
            task = trainer.get_task(pass_id).task
            batches = list(task_batches(task, 4, row_batches))
            steps.update({(b.pass_id, b.task_id, b.seq): b.step for b in batches})
            assert trainer.task_finished(task, sum(len(b.batch) for b in batches),
                                         len(batches))
    assert sorted(steps.values()) == list(range(18))
    assert (steps[(0, 1, 0)], steps[(1, 0, 0)], steps[(1, 1, 3)]) == (5, 9, 17)
    recovery = master_pb2.Task(task_id=1, pass_id=1, chunks=[
        master_pb2.Chunk(path="c2", num_rows=9), master_pb2.Chunk(path="c3", num_rows=3)],
        only_batches=[2, 3], first_batch=5, pass_batches=9)
    assert [b.step for b in task_batches(recovery, 4, row_batches)] == [16, 17]
