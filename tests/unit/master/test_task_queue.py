"""The task queue state machine, stepped one transition at a time (no sockets, no clock)."""

from __future__ import annotations

import dataclasses

import pytest

from elasticps.errors import InvalidArgumentError, NotFoundError
from elasticps.master.task_queue import (
    Delta,
    Outcome,
    QueuePolicy,
    TaskQueue,
    TaskState,
    TaskView,
)

LEASE = 10.0
BATCH = 32  # a chunk of 100 rows is 4 batches


def make_queue(num_chunks: int = 6, chunks_per_task: int = 2, num_passes: int = 1,
               max_failures: int = 2, fraction: float = 0.5) -> TaskQueue:
    return TaskQueue([100] * num_chunks, chunks_per_task, num_passes,
                     QueuePolicy(max_failures=max_failures, task_lease=LEASE,
                                 max_failed_fraction=fraction), batch_size=BATCH)


def take(queue: TaskQueue, trainer: str = "t1", pass_id: int = 0, now: float = 0.0) -> TaskView:
    result, delta = queue.get_task(trainer, pass_id, now)
    assert result.outcome is Outcome.TASK, result
    assert result.task is not None
    assert delta.tasks == frozenset([result.task.task_id])
    return result.task


def finish(queue: TaskQueue, task: TaskView, trainer: str | None = None,
           now: float = 1.0) -> Delta:
    trainer = trainer or queue.task_record(task.task_id).owner  # default: whoever holds it
    reply, delta = queue.task_finished(trainer, task.task_id, task.epoch, task.num_records, now)
    assert reply.accepted, reply.reason
    return delta


def test_chunks_are_grouped_into_tasks_with_a_short_last_task() -> None:
    queue = TaskQueue([10, 20, 30, 40, 50], 2, 1, batch_size=8)
    assert queue.num_tasks == 3
    # Batches are counted chunk by chunk: ceil(10/8) + ceil(20/8), ceil(30/8) + ceil(40/8), ...
    assert [queue.num_batches(t) for t in range(3)] == [2 + 3, 4 + 5, 7]
    views = [take(queue, f"w{i}") for i in range(3)]
    assert [(v.first_chunk, v.num_chunks, v.num_records) for v in views] == [
        (0, 2, 30), (2, 2, 70), (4, 1, 50)]
    assert queue.counts() == {"todo": 0, "pending": 3, "done": 0, "failed": 0}


def test_bad_construction_arguments_name_the_value() -> None:
    with pytest.raises(InvalidArgumentError, match="chunks_per_task=0"):
        TaskQueue([1], 0, 1, batch_size=1)
    with pytest.raises(InvalidArgumentError, match="num_passes=0"):
        TaskQueue([1], 1, 0, batch_size=1)
    with pytest.raises(InvalidArgumentError, match="no chunks"):
        TaskQueue([], 1, 1, batch_size=1)
    with pytest.raises(InvalidArgumentError, match="batch_size=0"):
        TaskQueue([1], 1, 1, batch_size=0)
    with pytest.raises(InvalidArgumentError, match="max_failures=0"):
        QueuePolicy(max_failures=0)
    with pytest.raises(InvalidArgumentError, match=r"max_failed_fraction=1\.5"):
        QueuePolicy(max_failed_fraction=1.5)


def test_todo_to_pending_to_done_ends_the_only_pass_with_all_done() -> None:
    queue = make_queue()
    tasks = [take(queue, f"w{i}", now=0.0) for i in range(3)]
    assert [t.epoch for t in tasks] == [1, 1, 1]
    result, delta = queue.get_task("t2", 0, 0.0)
    assert result.outcome is Outcome.RETRY_LATER
    assert result.retry_after_s == 0.0  # others hold the rest for a while: the own backoff
    assert delta.empty
    for task in tasks[:-1]:
        delta = finish(queue, task)
        assert delta.meta
        assert delta.tasks == frozenset([task.task_id])
    finish(queue, tasks[-1])
    assert queue.finished
    assert queue.records_total == 600
    assert queue.counts()["done"] == 3
    result, _ = queue.get_task("t1", 0, 2.0)
    assert result.outcome is Outcome.ALL_DONE
    assert result.pass_id == 1


def test_pass_end_starts_the_next_pass_and_old_pass_requests_get_pass_over() -> None:
    queue = make_queue(num_passes=2)
    tasks = [take(queue, f"w{i}") for i in range(3)]
    for task in tasks:
        delta = finish(queue, task)
    assert delta.meta
    assert queue.pass_id == 1
    assert queue.counts() == {"todo": 3, "pending": 0, "done": 0, "failed": 0}
    result, _ = queue.get_task("t1", 0, 2.0)
    assert result.outcome is Outcome.PASS_OVER
    assert result.pass_id == 1
    second = take(queue, pass_id=1, now=2.0)
    assert second.pass_id == 1
    assert second.epoch == 2  # epochs keep growing across passes
    with pytest.raises(InvalidArgumentError, match="pass_id=2 has not started"):
        queue.get_task("t1", 2, 2.0)
    with pytest.raises(InvalidArgumentError, match="pass_id=-1"):
        queue.get_task("t1", -1, 2.0)


def test_progress_renews_the_lease_and_records_the_resume_point() -> None:
    queue = make_queue()
    task = take(queue, now=0.0)
    reply, delta = queue.report_progress("t1", task.task_id, task.epoch, 50, now=8.0)
    assert reply.accepted
    assert delta.tasks == frozenset([task.task_id])
    # Renewed at 8.0: still alive at 17.0 although the first lease ended at 10.0.
    assert queue.expire_leases(17.0).empty
    reply, delta = queue.report_progress("t1", task.task_id, task.epoch, 50, now=16.0)
    assert reply.accepted
    assert delta.empty
    assert queue.task_view(task.task_id).records_done == 50
    with pytest.raises(InvalidArgumentError, match="records_done=201"):
        queue.report_progress("t1", task.task_id, task.epoch, 201, now=16.0)


def test_lease_expiry_sends_the_task_back_to_todo_with_a_failure_and_resume_point() -> None:
    queue = make_queue(max_failures=3)
    first = take(queue, now=0.0)
    queue.report_progress("t1", first.task_id, first.epoch, 40, now=1.0)
    assert queue.next_deadline() == 1.0 + LEASE
    assert queue.expire_leases(10.9).empty
    delta = queue.expire_leases(11.0)
    assert delta.tasks == frozenset([first.task_id])
    assert delta.meta
    assert queue.state_of(first.task_id) is TaskState.TODO
    assert queue.task_record(first.task_id).failures == 1
    assert "lease expired" in queue.task_record(first.task_id).last_error
    # The returned task goes to the back of the queue; its progress is the resume point.
    views = [take(queue, f"u{i}", now=12.0) for i in range(3)]
    assert [v.task_id for v in views] == [1, 2, 0]
    assert views[-1].records_done == 40
    assert views[-1].epoch == 2


def test_late_reports_of_a_stale_holder_are_refused_without_changes() -> None:
    queue = make_queue(num_chunks=2, max_failures=3)
    old = take(queue, "t1", now=0.0)
    queue.expire_leases(LEASE)
    new = take(queue, "t2", now=11.0)
    assert new.task_id == old.task_id
    assert new.epoch == old.epoch + 1
    reply, delta = queue.report_progress("t1", old.task_id, old.epoch, 10, now=12.0)
    assert not reply.accepted
    assert "stale" in reply.reason
    assert delta.empty
    reply, delta = queue.task_finished("t1", old.task_id, old.epoch, 200, now=12.0)
    assert not reply.accepted
    assert delta.empty
    reply, delta = queue.task_failed("t1", old.task_id, old.epoch, "boom", now=12.0)
    assert not reply.accepted
    assert delta.empty
    # A holder impersonating the new epoch with the wrong name is refused too.
    reply, _ = queue.task_finished("t1", new.task_id, new.epoch, 200, now=12.0)
    assert not reply.accepted
    assert "held by t2" in reply.reason
    assert queue.state_of(new.task_id) is TaskState.PENDING
    finish(queue, new, "t2")
    assert queue.finished


def test_duplicate_finish_is_accepted_once_and_changes_nothing() -> None:
    queue = make_queue(num_chunks=4)
    task = take(queue)
    finish(queue, task)
    total = queue.records_total
    reply, delta = queue.task_finished("t1", task.task_id, task.epoch, 200, now=2.0)
    assert reply.accepted
    assert "already finished" in reply.reason
    assert delta.empty
    assert queue.records_total == total
    assert queue.tasks_finished_total == 1


def test_finish_after_lease_expiry_but_before_redispatch_is_kept() -> None:
    queue = make_queue(num_chunks=2)
    task = take(queue, now=0.0)
    queue.expire_leases(LEASE)
    assert queue.state_of(task.task_id) is TaskState.TODO
    reply, delta = queue.task_finished("t1", task.task_id, task.epoch, 200, now=11.0)
    assert reply.accepted
    assert delta.meta
    assert queue.finished


def test_late_finish_from_a_previous_pass_is_refused() -> None:
    queue = make_queue(num_chunks=2, num_passes=2)
    task = take(queue)
    finish(queue, task)
    assert queue.pass_id == 1
    reply, delta = queue.task_finished("t1", task.task_id, task.epoch, 200, now=2.0)
    assert not reply.accepted
    assert "stale" in reply.reason
    assert delta.empty
    assert queue.state_of(task.task_id) is TaskState.TODO


def test_task_failed_counts_failures_up_to_max_then_failed_and_job_fails() -> None:
    queue = make_queue(num_chunks=4, max_failures=2, fraction=0.4)  # 2 tasks
    task = take(queue)
    reply, delta = queue.task_failed("t1", task.task_id, task.epoch, "corrupt row group", 1.0)
    assert reply.accepted
    assert delta.meta
    assert not delta.failures
    assert queue.state_of(task.task_id) is TaskState.TODO
    # A repeat of the same failure report counts nothing more.
    reply, delta = queue.task_failed("t1", task.task_id, task.epoch, "corrupt row group", 1.0)
    assert reply.accepted
    assert delta.empty
    other = take(queue)
    assert other.task_id == 1
    retry = take(queue, "t2")
    assert retry.task_id == task.task_id
    assert retry.epoch == 2
    reply, delta = queue.task_failed("t2", retry.task_id, retry.epoch, "corrupt row group", 2.0)
    assert reply.accepted
    assert queue.state_of(task.task_id) is TaskState.FAILED
    assert [e.task_id for e in delta.failures] == [task.task_id]
    # 1 of 2 failed > 0.4 of the tasks: the job fails with a reason naming the task.
    assert "1 of 2 tasks failed" in queue.failed_reason
    assert "task 0" in queue.failed_reason
    assert "corrupt row group" in queue.failed_reason
    result, _ = queue.get_task("t1", 0, 3.0)
    assert result.outcome is Outcome.JOB_FAILED
    assert result.reason == queue.failed_reason
    reply, _ = queue.task_finished("t1", other.task_id, other.epoch, 200, 3.0)
    assert not reply.accepted
    assert "job failed" in reply.reason


def test_failed_tasks_below_the_threshold_get_another_chance_next_pass() -> None:
    queue = make_queue(num_chunks=8, chunks_per_task=2, num_passes=2, max_failures=1,
                       fraction=0.5)  # 4 tasks, 2 may fail
    tasks = [take(queue, f"t{i}") for i in (1, 2, 3, 4)]
    reply, _delta = queue.task_failed("t1", tasks[0].task_id, tasks[0].epoch, "bad data", 1.0)
    assert reply.accepted
    assert queue.state_of(0) is TaskState.FAILED
    assert not queue.failed_reason
    assert [e.reason for e in queue.failed_tasks()] == ["trainer t1 reported: bad data"]
    for task in tasks[1:]:
        finish(queue, task)
    assert queue.pass_id == 1
    assert queue.counts()["todo"] == 4
    assert queue.counts()["failed"] == 0
    assert [e.task_id for e in queue.failure_log] == [0]
    again = take(queue, pass_id=1)
    assert again.task_id == 0
    assert queue.task_record(0).failures == 0


def test_all_tasks_failed_fails_the_job_even_with_fraction_one() -> None:
    queue = make_queue(num_chunks=2, max_failures=1, fraction=1.0)
    task = take(queue)
    queue.task_failed("t1", task.task_id, task.epoch, "bad", 1.0)
    assert "1 of 1 tasks failed" in queue.failed_reason
    assert not queue.finished


def test_a_retried_get_task_gets_the_task_whose_answer_was_lost() -> None:
    """Hole 5: a trainer works on one task at a time, so a GetTask from a trainer that holds a
    task means the answer that gave it was lost: it gets that task back (same epoch, lease
    renewed), not a second one while the first stays leased to it for the whole task lease."""
    queue = make_queue(num_chunks=8, max_failures=3)
    first = take(queue, "a", now=0.0)
    queue.report_progress("a", first.task_id, first.epoch, 40, now=1.0)
    again, delta = queue.get_task("a", 0, now=5.0)
    assert again.outcome is Outcome.TASK
    assert again.task == dataclasses.replace(first, records_done=40)
    assert delta.empty  # nothing to persist: same dispatch, a lease renewal
    assert queue.pending_of("a") == [first.task_id]
    assert queue.next_deadline() == 5.0 + LEASE
    assert take(queue, "b").task_id != first.task_id
    reply, _ = queue.task_finished("a", first.task_id, first.epoch, 200, now=6.0)
    assert reply.accepted
    assert take(queue, "a", now=7.0).task_id != first.task_id


def test_trainer_lost_returns_all_its_tasks_at_once() -> None:
    queue = make_queue(num_chunks=8, max_failures=3)
    a1 = take(queue, "a")
    b1 = take(queue, "b")
    assert queue.pending_of("a") == [a1.task_id]
    delta = queue.trainer_lost("a", now=1.0)
    assert delta.tasks == frozenset([a1.task_id])
    assert queue.pending_of("a") == []
    assert queue.state_of(b1.task_id) is TaskState.PENDING
    assert queue.task_record(a1.task_id).failures == 1
    assert "trainer a was lost" in queue.task_record(a1.task_id).last_error
    assert queue.trainer_lost("nobody", now=1.0).empty


def test_graceful_leave_returns_tasks_without_a_failure() -> None:
    queue = make_queue()
    task = take(queue, "a")
    delta = queue.trainer_lost("a", now=1.0, count_failure=False)
    assert delta.tasks == frozenset([task.task_id])
    assert queue.task_record(task.task_id).failures == 0
    assert queue.state_of(task.task_id) is TaskState.TODO


def test_lease_expiry_past_max_failures_can_end_the_pass() -> None:
    queue = make_queue(num_chunks=4, max_failures=1, fraction=0.5)  # 2 tasks
    first, second = take(queue, "w0"), take(queue, "w1")
    finish(queue, first)
    delta = queue.expire_leases(LEASE)
    assert queue.state_of(second.task_id) is TaskState.FAILED
    assert delta.failures
    assert delta.meta
    assert queue.finished
    assert not queue.failed_reason


def test_save_model_is_granted_to_one_trainer_at_a_time() -> None:
    queue = make_queue()
    reply, delta = queue.request_save_model("a", 5.0, now=0.0)
    assert reply.accepted
    assert delta.meta
    reply, delta = queue.request_save_model("b", 5.0, now=1.0)
    assert not reply.accepted
    assert "trainer a is saving" in reply.reason
    assert delta.empty
    reply, _ = queue.request_save_model("a", 5.0, now=2.0)  # the holder may renew
    assert reply.accepted
    reply, _ = queue.request_save_model("b", 5.0, now=6.9)
    assert not reply.accepted
    reply, _ = queue.request_save_model("b", 5.0, now=7.0)
    assert reply.accepted
    assert queue.save_holder(7.0) == "b"
    with pytest.raises(InvalidArgumentError, match="block_seconds=0"):
        queue.request_save_model("b", 0, now=8.0)


def test_bad_requests_raise_clear_errors_and_change_nothing() -> None:
    queue = make_queue()
    task = take(queue)
    before = queue.task_record(task.task_id)
    with pytest.raises(NotFoundError, match="task 99 does not exist"):
        queue.task_finished("t1", 99, 1, 1, 1.0)
    with pytest.raises(InvalidArgumentError, match="trainer name ''"):
        queue.get_task("", 0, 1.0)
    with pytest.raises(InvalidArgumentError, match="records=-1"):
        queue.task_finished("t1", task.task_id, task.epoch, -1, 1.0)
    assert queue.task_record(task.task_id) == before
    assert queue.counts()["pending"] == 1


def test_restore_rebuilds_the_same_state_and_releases_tasks_of_dead_trainers() -> None:
    queue = make_queue(num_chunks=12, num_passes=3, max_failures=3)  # 6 tasks
    for task in [take(queue, f"w{i}") for i in range(6)]:
        finish(queue, task)
    assert queue.pass_id == 1
    done = take(queue, "alive", pass_id=1)
    finish(queue, done, "alive")
    kept = take(queue, "alive", pass_id=1)
    queue.report_progress("alive", kept.task_id, kept.epoch, 70, 1.0)
    lost = take(queue, "dead", pass_id=1)
    failed_once = take(queue, "flaky", pass_id=1)
    queue.task_failed("flaky", failed_once.task_id, failed_once.epoch, "flaky", 1.0)
    queue.request_save_model("alive", 30.0, 1.0)
    records = {i: queue.task_record(i) for i in range(queue.num_tasks)}
    restored, delta = TaskQueue.restore(
        [100] * 12, 2, 3, queue.policy, queue.meta_record(), records, queue.failure_log,
        live_trainers={"alive", "flaky"}, now=100.0, batch_size=BATCH)
    assert restored.meta_record().pass_id == 1
    assert restored.records_total == queue.records_total
    assert restored.state_of(kept.task_id) is TaskState.PENDING
    assert restored.task_view(kept.task_id).records_done == 70
    assert restored.state_of(lost.task_id) is TaskState.TODO
    assert restored.task_record(lost.task_id).failures == 1
    assert delta.tasks == frozenset([lost.task_id])
    assert restored.save_holder(120.0) == "alive"
    # Everything but the released task equals the state before.
    for i in range(queue.num_tasks):
        if i != lost.task_id:
            assert restored.task_record(i) == queue.task_record(i), i
    assert restored.counts() == {"todo": 4, "pending": 1, "done": 1, "failed": 0}
    # The old holder of the released task is refused; the pending one carries on.
    reply, _ = restored.report_progress("dead", lost.task_id, lost.epoch, 10, 101.0)
    assert not reply.accepted
    reply, _ = restored.task_finished("alive", kept.task_id, kept.epoch, 200, 101.0)
    assert reply.accepted
    # The todo order survives: never-tried tasks first, then the ones sent back.
    order = [take(restored, f"x{i}", 1, 102.0).task_id for i in range(4)]
    assert order[-2:] == [failed_once.task_id, lost.task_id]


# ---------------------------------------------------------------- finish and get, one transition


def test_finish_and_get_finishes_and_leases_the_next_task_in_one_delta() -> None:
    queue = make_queue()  # 3 tasks
    first = take(queue)
    reply, result, delta = queue.finish_and_get("t1", first.task_id, first.epoch, 200, 0, 1.0,
                                                batches=8)
    assert reply.accepted
    assert result.outcome is Outcome.TASK
    assert result.task is not None
    second = result.task
    assert second.task_id != first.task_id
    # Both records and the meta in one delta: the service writes it in one transaction.
    assert delta == Delta(frozenset([first.task_id, second.task_id]), meta=True)
    assert queue.state_of(first.task_id) is TaskState.DONE
    assert queue.pending_of("t1") == [second.task_id]


def test_a_repeated_finish_and_get_finishes_nothing_twice_and_returns_the_same_task() -> None:
    queue = make_queue()
    first = take(queue)
    _, result, _ = queue.finish_and_get("t1", first.task_id, first.epoch, 200, 0, 1.0)
    assert result.task is not None
    # The answer was lost: the trainer sends the very same call again.
    reply, again, delta = queue.finish_and_get("t1", first.task_id, first.epoch, 200, 0, 2.0)
    assert reply.accepted
    assert again.outcome is Outcome.TASK
    assert again.task == result.task  # same task, same epoch: nothing leased twice
    assert delta.empty
    assert queue.tasks_finished_total == 1
    assert queue.records_total == 200
    assert queue.counts() == {"todo": 1, "pending": 1, "done": 1, "failed": 0}


def test_only_the_finish_that_moves_a_task_to_done_says_so() -> None:
    """``done_now``: the service counts a task's records on it, so a repeat, a stale finish
    and every other report leave it False."""
    queue = make_queue(max_failures=3)  # 3 tasks
    first, second = take(queue, "t1"), take(queue, "t2")
    reply, _ = queue.task_finished("t1", first.task_id, first.epoch, 200, 1.0)
    assert (reply.accepted, reply.done_now) == (True, True)
    repeat, _ = queue.task_finished("t1", first.task_id, first.epoch, 200, 2.0)
    assert (repeat.accepted, repeat.done_now) == (True, False)
    again, _, _ = queue.finish_and_get("t1", first.task_id, first.epoch, 200, 0, 2.0)
    assert (again.accepted, again.done_now) == (True, False)
    assert not queue.report_progress("t2", second.task_id, second.epoch, 50, 2.0)[0].done_now
    queue.task_failed("t2", second.task_id, second.epoch, "bad disk", 3.0)
    assert take(queue, "t3").task_id == second.task_id  # dispatched again
    stale, _, _ = queue.finish_and_get("t2", second.task_id, second.epoch, 200, 0, 3.0)
    assert (stale.accepted, stale.done_now) == (False, False)


def test_finish_and_get_of_the_last_task_answers_what_get_task_would() -> None:
    queue = make_queue(num_chunks=2, num_passes=2)  # one task, two passes
    task = take(queue)
    reply, result, delta = queue.finish_and_get("t1", task.task_id, task.epoch, 200, 0, 1.0)
    assert reply.accepted
    assert (result.outcome, result.pass_id) == (Outcome.PASS_OVER, 1)
    assert delta == Delta(frozenset([task.task_id]), meta=True)
    # A stale finish (the task was dispatched again) is refused, and the next task still comes.
    again = take(queue, "t2", pass_id=1)
    reply, result, _ = queue.finish_and_get("t1", again.task_id, task.epoch, 200, 1, 2.0)
    assert not reply.accepted
    assert "stale" in reply.reason
    assert result.outcome is Outcome.RETRY_LATER
    assert queue.pending_of("t2") == [again.task_id]


@pytest.mark.parametrize(("pass_id", "batches", "match"), [
    (1, 8, "pass_id=1 must be within"), (-1, 8, "pass_id=-1"), (0, 99, "batches=99")])
def test_bad_finish_and_get_arguments_change_nothing(pass_id: int, batches: int,
                                                     match: str) -> None:
    queue = make_queue()
    task = take(queue)
    before = (queue.counts(), queue.task_record(task.task_id), queue.meta_record())
    with pytest.raises(InvalidArgumentError, match=match):
        queue.finish_and_get("t1", task.task_id, task.epoch, 200, pass_id, 1.0,
                             batches=batches)
    assert (queue.counts(), queue.task_record(task.task_id), queue.meta_record()) == before
