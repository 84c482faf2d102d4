"""A stream's task queue, stepped one transition at a time: partitions appended as tasks, a pass
that cannot end while the stream is open, reconciliation of what is done while it waits, the
end, and a restore that neither skips nor repeats."""

from __future__ import annotations

import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.master.task_queue import Outcome, QueuePolicy, TaskQueue, TaskState, TaskView

POLICY = QueuePolicy(max_failures=2, task_lease=10.0, reconcile=True)
BATCH = 10  # a chunk of 30 rows is 3 batches


def stream_queue(policy: QueuePolicy = POLICY) -> TaskQueue:
    return TaskQueue([], 2, 1, policy, batch_size=BATCH, stream=True)


def take(queue: TaskQueue, trainer: str = "t1") -> TaskView:
    result, _ = queue.get_task(trainer, 0, 0.0)
    assert result.outcome is Outcome.TASK, result
    assert result.task is not None
    return result.task


def finish(queue: TaskQueue, task: TaskView, trainer: str = "t1") -> None:
    reply, _ = queue.task_finished(trainer, task.task_id, task.epoch, task.num_records, 1.0)
    assert reply.accepted


def test_a_stream_starts_empty_and_waits_for_its_first_partition() -> None:
    queue = stream_queue()
    assert (queue.num_tasks, queue.open, queue.finished) == (0, True, False)
    result, delta = queue.get_task("t1", 0, 0.0)
    assert result.outcome is Outcome.RETRY_LATER
    assert result.reason == "waiting for the stream's next partition"
    assert delta.empty
    assert not queue.reconciling
    with pytest.raises(InvalidArgumentError, match="one pass"):
        TaskQueue([], 1, 2, batch_size=BATCH, stream=True)
    with pytest.raises(InvalidArgumentError, match="no chunks"):
        TaskQueue([], 1, 1, batch_size=BATCH)  # a dataset without chunks is still refused


def test_appended_partitions_become_tasks_in_order_that_never_span_two_partitions() -> None:
    queue = stream_queue()
    ids, delta = queue.append([30, 30, 30])  # partition 0: 3 chunks, 2 per task
    assert (ids, delta.empty) == ([0, 1], True)  # no record: never dispatched reads as TODO
    ids, _ = queue.append([25])  # partition 1
    assert ids == [2]
    assert queue.num_chunks == 4
    views = [take(queue, f"t{i}") for i in range(3)]
    assert [(v.task_id, v.first_chunk, v.num_chunks, v.num_records) for v in views] == [
        (0, 0, 2, 60), (1, 2, 1, 30), (2, 3, 1, 25)]
    assert [queue.num_batches(t) for t in range(3)] == [6, 3, 3]
    assert queue.records_per_pass == 115
    with pytest.raises(InvalidArgumentError, match="negative row count"):
        queue.append([5, -1])
    assert queue.num_tasks == 3  # the bad partition changed nothing


def test_the_pass_cannot_end_while_open_and_ends_after_the_close_and_a_reconciliation(
        ) -> None:
    queue = stream_queue()
    queue.append([30])
    finish(queue, take(queue))
    # Drained while open: the done work is reconciled, the pass goes on.
    assert queue.reconciling
    assert queue.get_task("t1", 0, 0.0)[0].outcome is Outcome.RETRY_LATER
    assert queue.expected_batches() == {0: 3}
    delta = queue.reconciled(0, {}, 2.0)
    assert delta.meta
    assert not queue.reconciling
    assert not queue.finished
    assert queue.pass_id == 0
    result, _ = queue.get_task("t1", 0, 0.0)
    assert result.reason == "waiting for the stream's next partition"
    assert not queue.reconciling  # nothing finished since: no second reconciliation
    queue.append([30])
    finish(queue, take(queue))
    assert queue.reconciling
    # A partition appended while the shards are asked: the answer still counts, and the new
    # task is handed out after it.
    queue.append([30])
    queue.reconciled(0, {}, 3.0)
    task = take(queue)
    assert task.task_id == 2
    finish(queue, task)
    queue.reconciled(0, {}, 3.0)
    close = queue.close()
    assert close.meta
    assert queue.reconciling
    assert queue.expected_batches() == {0: 3, 1: 3, 2: 3}
    queue.reconciled(0, {}, 4.0)
    assert queue.finished
    assert queue.get_task("t1", 0, 0.0)[0].outcome is Outcome.ALL_DONE
    assert queue.close().empty
    with pytest.raises(InvalidArgumentError, match="not an open stream"):
        queue.append([30])


def test_batches_a_shard_misses_mid_stream_are_recovered_before_the_stream_goes_on() -> None:
    queue = stream_queue()
    queue.append([30, 30])
    finish(queue, take(queue))
    assert queue.reconciling
    delta = queue.reconciled(0, {0: [4, 1]}, 2.0)
    assert delta.tasks == frozenset([0])
    recovery = take(queue)
    assert (recovery.task_id, recovery.only_batches) == (0, (1, 4))
    finish(queue, recovery)
    assert queue.reconciling  # recovered: checked again
    queue.reconciled(0, {}, 3.0)
    assert (queue.recoveries_total, queue.finished, queue.open) == (1, False, True)


def test_a_restored_stream_queue_goes_on_from_what_was_appended_and_done() -> None:
    queue = stream_queue()
    queue.append([30, 30, 30])  # tasks 0 and 1
    queue.append([30])  # task 2
    first = take(queue, "t1")
    finish(queue, first, "t1")
    held = take(queue, "t2")
    records = {first.task_id: queue.task_record(first.task_id),
               held.task_id: queue.task_record(held.task_id)}
    fresh = stream_queue()
    for rows in ([30, 30, 30], [30]):
        fresh.append(rows)
    restored, delta = TaskQueue.restore([], 2, 1, POLICY, queue.meta_record(), records, [],
                                        {"t2"}, 5.0, batch_size=BATCH, stream=fresh)
    assert restored.open
    assert delta.empty
    assert restored.state_of(first.task_id) is TaskState.DONE
    assert restored.pending_of("t2") == [held.task_id]
    assert take(restored, "t3").task_id == 2  # the never dispatched one, once
    # A closed stream stays closed after a restore.
    queue.close()
    again = stream_queue()
    again.append([30, 30, 30])
    again.append([30])
    closed, _ = TaskQueue.restore([], 2, 1, POLICY, queue.meta_record(), records, [], {"t2"},
                                  5.0, batch_size=BATCH, stream=again)
    assert not closed.open
