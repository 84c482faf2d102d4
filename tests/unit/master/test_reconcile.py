"""Pass-end reconciliation: the queue's reconcile phase and recovery dispatches, and the pure
comparison of shard holdings with the expected batches (no sockets, no clock)."""

from __future__ import annotations

import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.master.reconcile_policy import HeldSeqs, ShardReport, reconcile
from elasticps.master.snapshot import decode_meta, decode_task, encode_meta, encode_task
from elasticps.master.task_queue import (
    RECONCILING_RETRY_S,
    Outcome,
    QueuePolicy,
    TaskQueue,
    TaskState,
    TaskView,
)

LEASE = 10.0
BATCH = 50  # a chunk of 100 rows is 2 batches, a task of 2 chunks 4


def make_queue(num_passes: int = 2) -> TaskQueue:
    # 3 tasks of 2 chunks x 100 rows: 4 batches of 50 rows each
    return TaskQueue([100] * 6, 2, num_passes,
                     QueuePolicy(max_failures=2, task_lease=LEASE, reconcile=True),
                     batch_size=BATCH)


def take(queue: TaskQueue, trainer: str = "t1", now: float = 0.0) -> TaskView:
    result, _ = queue.get_task(trainer, queue.pass_id, now)
    assert result.outcome is Outcome.TASK, result
    assert result.task is not None
    return result.task


def run_pass(queue: TaskQueue, batches: int = 4) -> None:
    for _ in range(queue.num_tasks):
        task = take(queue)
        reply, _ = queue.task_finished("t1", task.task_id, task.epoch, task.num_records, 1.0,
                                       batches=batches)
        assert reply.accepted


def test_a_pass_waits_for_reconciliation_then_ends_on_a_clean_answer() -> None:
    queue = make_queue()
    run_pass(queue)
    assert queue.reconciling
    assert queue.pass_id == 0
    result, delta = queue.get_task("t2", 0, 2.0)
    assert result.outcome is Outcome.RETRY_LATER
    assert "reconciled" in result.reason
    assert result.retry_after_s == RECONCILING_RETRY_S  # the end is moments away: ask soon
    assert delta.empty
    assert queue.expected_batches() == {0: 4, 1: 4, 2: 4}
    delta = queue.reconciled(0, {}, 3.0)
    assert delta.meta
    assert not queue.reconciling
    assert queue.pass_id == 1
    assert queue.counts()["todo"] == 3
    assert queue.expected_batches() == {}  # a new pass starts with no batch counts
    run_pass(queue)
    assert queue.reconciling
    assert not queue.finished
    queue.reconciled(1, {}, 4.0)
    assert queue.finished
    assert queue.get_task("t1", 1, 5.0)[0].outcome is Outcome.ALL_DONE


def test_missing_batches_become_recovery_dispatches_of_just_those_seqs() -> None:
    queue = make_queue()
    run_pass(queue)
    records_before = queue.records_total
    finished_before = queue.tasks_finished_total
    delta = queue.reconciled(0, {1: [3, 2, 3], 2: [0]}, 3.0)
    assert delta.tasks == frozenset({1, 2})
    assert delta.meta
    assert not queue.reconciling
    assert queue.recoveries_total == 2
    assert queue.state_of(1) is TaskState.TODO
    assert queue.recovering() == [1, 2]
    first = take(queue, "t2")
    assert (first.task_id, first.only_batches, first.records_done) == (1, (2, 3), 0)
    second = take(queue, "t3")
    assert (second.task_id, second.only_batches) == (2, (0,))
    # A recovery finish keeps the task's batch count and adds no dataset progress.
    queue.task_finished("t2", 1, first.epoch, 200, 4.0, batches=2)
    assert queue.expected_batches()[1] == 4
    assert not queue.reconciling  # task 2's recovery is still pending
    queue.task_finished("t3", 2, second.epoch, 100, 4.0, batches=1)
    assert queue.reconciling
    assert queue.pass_id == 0
    assert (queue.records_total, queue.tasks_finished_total) == (records_before,
                                                                  finished_before)
    queue.reconciled(0, {}, 5.0)
    assert queue.pass_id == 1


def test_a_lost_recovery_dispatch_goes_back_with_its_seqs() -> None:
    queue = make_queue()
    run_pass(queue)
    queue.reconciled(0, {0: [3]}, 3.0)
    task = take(queue, "t2")
    queue.trainer_lost("t2", 4.0)
    assert queue.state_of(0) is TaskState.TODO
    again = take(queue, "t3")
    assert again.only_batches == (3,)
    assert again.epoch == task.epoch + 1
    # The stale holder's finish is refused.
    reply, delta = queue.task_finished("t2", 0, task.epoch, 100, 5.0)
    assert not reply.accepted
    assert delta.empty


def test_stale_or_bad_reconciliation_answers() -> None:
    queue = make_queue()
    assert queue.reconciled(0, {}, 0.0).empty  # nothing to reconcile yet
    task = take(queue)
    queue.task_finished("t1", task.task_id, task.epoch, 200, 1.0, batches=4)
    assert queue.reconciled(0, {}, 1.0).empty  # still tasks todo: not reconciling
    for _ in range(2):
        t = take(queue)
        queue.task_finished("t1", t.task_id, t.epoch, 200, 1.0, batches=4)
    assert queue.reconciled(1, {}, 2.0).empty  # another pass's answer
    assert queue.reconciling
    with pytest.raises(InvalidArgumentError, match=r"\[-1\] must be within \[0, 4\)"):
        queue.reconciled(0, {0: [-1]}, 2.0)
    with pytest.raises(InvalidArgumentError, match=r"\[4\] must be within \[0, 4\)"):
        queue.reconciled(0, {0: [4]}, 2.0)
    with pytest.raises(InvalidArgumentError, match="batches=-1"):
        queue.task_finished("t1", 0, 1, 0, 2.0, batches=-1)
    with pytest.raises(InvalidArgumentError, match=r"batches=5 .* 4 batches of 50 rows"):
        queue.task_finished("t1", 0, 1, 0, 2.0, batches=5)
    assert queue.reconciling
    assert queue.pass_id == 0


def test_reconcile_state_survives_persistence() -> None:
    queue = make_queue()
    run_pass(queue)
    queue.reconciled(0, {1: [2]}, 3.0)
    records = {t: decode_task(encode_task(queue.task_record(t))) for t in range(3)}
    meta = decode_meta(encode_meta(queue.meta_record()))
    restored, _ = TaskQueue.restore([100] * 6, 2, 2, queue.policy, meta, records, [], set(),
                                    4.0, batch_size=BATCH)
    assert restored.recovering() == [1]
    assert restored.recoveries_total == 1
    assert restored.expected_batches() == {0: 4, 2: 4}
    view = take(restored)
    assert (view.task_id, view.only_batches) == (1, (2,))
    restored.task_finished("t1", 1, view.epoch, 200, 5.0)
    assert restored.reconciling
    meta2 = decode_meta(encode_meta(restored.meta_record()))
    assert meta2.reconciling
    assert meta2.recoveries_total == 1
    assert restored.expected_batches() == {0: 4, 1: 4, 2: 4}


def test_queue_without_reconcile_ends_passes_at_once() -> None:
    queue = TaskQueue([100] * 2, 1, 1, QueuePolicy(task_lease=LEASE), batch_size=BATCH)
    for _ in range(2):
        task = take(queue)
        queue.task_finished("t1", task.task_id, task.epoch, 100, 1.0)
    assert queue.finished
    assert not queue.reconciling


# -------------------------------------------------------------------------- reconcile()


def report(shard: int, tasks: dict[int, tuple[int, set[int], int]], floor: int = 0
           ) -> ShardReport:
    return ShardReport(shard, {t: HeldSeqs(b, frozenset(x), n) for t, (b, x, n) in tasks.items()},
                       checkpoint_id=f"c{shard}", floor=floor)


def test_every_shard_holding_everything_is_complete() -> None:
    result = reconcile(0, {0: 3, 1: 2}, [report(0, {0: (3, set(), 3), 1: (2, set(), 2)}),
                                         report(1, {0: (3, set(), 3), 1: (2, set(), 2)})])
    assert result.complete
    assert result.missing == {}
    assert [(a.expected, a.held, a.missing, a.duplicates) for a in result.shards] == [
        (5, 5, 0, 0), (5, 5, 0, 0)]


def test_partial_push_and_restored_shard_give_the_union_of_missing_seqs() -> None:
    # Shard 0 was restored from an old checkpoint (lost seqs 2..4 of task 0); a trainer died
    # between pushes, so shard 1 misses seq 1 of task 1; nobody has task 2's seq 0 above 1.
    result = reconcile(0, {0: 5, 1: 2, 2: 1}, [
        report(0, {0: (2, set(), 2), 1: (2, set(), 2), 2: (1, set(), 1)}),
        report(1, {0: (5, set(), 5), 1: (1, set(), 1)}),
    ])
    assert result.missing == {0: (2, 3, 4), 1: (1,), 2: (0,)}
    assert [(a.held, a.missing) for a in result.shards] == [(5, 3), (6, 2)]
    assert not result.complete


def test_double_application_and_unexpected_batches_are_counted() -> None:
    result = reconcile(0, {0: 2}, [report(0, {0: (2, set(), 3), 7: (1, {3}, 2)})])
    (account,) = result.shards
    assert account.duplicates == 1  # 3 applications for 2 batches of task 0
    assert account.unexpected == 2  # task 7 is not DONE (e.g. FAILED) but has 2 batches
    assert result.missing == {}


def test_batches_past_a_tasks_count_are_unexpected_and_change_no_expectation() -> None:
    # The count comes from the data (2 batches); a shard holding seqs 2 and 3 of the task holds
    # batches nobody numbers that way (a trainer with another batch size): unexpected.
    result = reconcile(0, {0: 2}, [report(0, {0: (4, set(), 4)}), report(1, {0: (2, set(), 2)})])
    assert result.batches == {0: 2}
    assert result.missing == {}
    assert [a.unexpected for a in result.shards] == [2, 0]


def test_a_tail_every_shard_lost_is_missing_though_the_finish_reported_no_batches() -> None:
    """Hole 1: the holder reported progress at the last record and died before TaskFinished;
    the next holder resumed there, trained nothing and reported 0 batches; every shard was
    restored from a checkpoint that lacks the last two batches. The count comes from the data,
    so the tail is missing and is dispatched again."""
    queue = make_queue(num_passes=1)
    tail = take(queue, "t1")
    assert queue.report_progress("t1", tail.task_id, tail.epoch, tail.num_records, 1.0)[0] \
        .accepted
    queue.trainer_lost("t1", 2.0)
    for name in ("t2", "t3"):
        task = take(queue, name)
        queue.task_finished(name, task.task_id, task.epoch, 200, 3.0, batches=4)
    resumed = take(queue, "t4")
    assert (resumed.task_id, resumed.records_done) == (tail.task_id, tail.num_records)
    queue.task_finished("t4", resumed.task_id, resumed.epoch, 0, 4.0, batches=0)
    assert queue.reconciling
    held = {0: (2, set(), 2), 1: (4, set(), 4), 2: (4, set(), 4)}  # task 0 lost seqs 2, 3
    result = reconcile(0, queue.expected_batches(), [report(0, held)])
    assert result.missing == {tail.task_id: (2, 3)}
    assert not result.complete
    queue.reconciled(0, result.missing, 5.0)
    again = take(queue, "t5")
    assert (again.task_id, again.only_batches) == (tail.task_id, (2, 3))


def test_pruned_pass_counts_as_held() -> None:
    result = reconcile(0, {0: 3}, [report(0, {}, floor=1)])
    assert result.complete
    assert result.as_dict()["shards"][0]["missing"] == 0
