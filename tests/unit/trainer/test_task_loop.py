"""The trainer's task loop, one step at a time, against the real task queue with no sockets.

Every GetTask outcome is driven here: TASK, RETRY_LATER, PASS_OVER, ALL_DONE, JOB_FAILED and one
the trainer does not know; plus unreadable data, a task taken back, a stop, a resume and a
recovery dispatch. Nothing sleeps: the loop's waits go to a recorder.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import pytest

from elasticps.errors import ConfigError, FailedPreconditionError
from elasticps.master.task_queue import RECONCILING_RETRY_S, QueuePolicy, TaskState
from elasticps.proto import master_pb2
from elasticps.trainer.task_batches import TaskBatch
from elasticps.trainer.task_loop import LoopState, TaskEnd, TaskLoop
from elasticps.trainer.task_policy import Action
from tests.helpers import wait_for
from tests.task_workers import Collect, task_loop
from tests.unit.trainer.queue_master import QueueClient, QueueMaster, row_batches

Outcome = master_pb2.GetTaskResponse.Outcome


def make_loop(client: QueueClient, worker: Collect, *, batch_size: int = 4,
              bad: frozenset[str] = frozenset(), waits: list[float] | None = None,
              **options: Any) -> TaskLoop:
    chunks = functools.partial(row_batches, batch_size=batch_size, bad=bad)
    return task_loop(client, chunks, batch_size, worker, trainer_name=client.trainer,
                     sleep=(waits if waits is not None else []).append, **options)


def test_task_trains_every_batch_with_the_next_one_then_finishes_after_a_flush() -> None:
    master = QueueMaster([10, 6], chunks_per_task=2)  # one task: batches 4+4+2 | 4+2
    worker = Collect()
    loop = make_loop(master.client("t0", worker.log), worker, report_every=100)
    assert loop.step() is LoopState.RUNNING
    assert loop.last is not None
    assert loop.last.action is Action.TRAIN
    assert [i.seq for i in worker.items] == [0, 1, 2, 3, 4]
    assert [i.records_done for i in worker.items] == [4, 8, 10, 14, 16]
    assert worker.next_batches == [i.batch for i in worker.items[1:]] + [None]
    assert worker.log == ["begin pass 0", "get_task 0 -> TASK",
                          *(f"train 0/{s}" for s in range(5)),
                          "flush", "finished 0 (5 batches) + get_task 0 -> ALL_DONE",
                          "finished 0"]
    assert master.queue.state_of(0) is TaskState.DONE
    assert master.queue.expected_batches() == {0: 5}


def test_all_done_closes_the_pass_and_the_loop_stays_done() -> None:
    master = QueueMaster([4])
    worker = Collect()
    loop = make_loop(master.client("t0", worker.log), worker)
    assert loop.step() is LoopState.RUNNING
    assert loop.step() is LoopState.DONE
    assert loop.last is not None
    assert loop.last.action is Action.FINISH
    # The finish brought the next answer: the second step acts on it without asking again.
    assert worker.log[-3:] == ["finished 0 (1 batches) + get_task 0 -> ALL_DONE",
                               "finished 0", "end pass 0"]
    calls = len(worker.log)
    assert loop.step() is LoopState.DONE
    assert len(worker.log) == calls  # a finished loop asks nothing more


def test_progress_is_reported_every_n_batches_only_after_a_flush() -> None:
    master = QueueMaster([20])  # 5 batches of 4
    worker = Collect()
    loop = make_loop(master.client("t0", worker.log), worker, report_every=2)
    loop.step()
    reports = [i for i, line in enumerate(worker.log) if line.startswith("report")]
    assert [worker.log[i] for i in reports] == ["report 8", "report 16"]
    assert all(worker.log[i - 1] == "flush" for i in reports)
    assert worker.log[-3:] == ["flush", "finished 0 (5 batches) + get_task 0 -> ALL_DONE",
                               "finished 0"]


def test_retry_later_waits_with_growing_backoff_then_pass_over_moves_on() -> None:
    master = QueueMaster([4], num_passes=2)
    result, _ = master.queue.get_task("other", 0, master.now)  # another trainer holds it
    assert result.task is not None
    waits: list[float] = []
    worker = Collect()
    loop = make_loop(master.client("t0", worker.log), worker, waits=waits)
    for _ in range(4):
        assert loop.step() is LoopState.RUNNING
        assert loop.last is not None
        assert loop.last.action is Action.WAIT
        assert "held by other trainers" in loop.last.reason
    for wait, ceiling in zip(waits, [0.05, 0.1, 0.2, 0.4], strict=True):
        assert ceiling / 2 <= wait <= ceiling
    master.queue.task_finished("other", 0, result.task.epoch, 4, master.now, batches=1)

    assert loop.step() is LoopState.RUNNING  # asks for pass 0: it is over
    assert loop.last is not None
    assert loop.last.action is Action.NEXT_PASS
    assert loop.pass_id == 1
    assert worker.log[-3:] == ["get_task 0 -> PASS_OVER", "end pass 0", "begin pass 1"]

    loop.step()  # trains pass 1's task
    assert worker.tasks == [(1, 0, TaskEnd.FINISHED)]
    assert loop.step() is LoopState.DONE
    assert worker.begun == [0, 1]
    assert worker.ended == [0, 1]


def test_the_backoff_starts_over_after_a_task() -> None:
    master = QueueMaster([4, 4, 4])
    for other in ("other", "another"):
        master.queue.get_task(other, 0, master.now)  # they hold tasks 0 and 1
    waits: list[float] = []
    worker = Collect()
    loop = make_loop(master.client("t0", worker.log), worker, waits=waits)
    loop.step()  # trains task 2
    for _ in range(3):
        loop.step()
    assert waits[2] > 0.1  # grown: 0.1-0.2
    master.queue.expire_leases(master.now + 1e6)  # both stalled: their tasks come back
    master.queue.get_task("other", 0, master.now)  # and it takes one of them again
    loop.step()  # trains the other one
    loop.step()
    assert [how for _, _, how in worker.tasks] == [TaskEnd.FINISHED, TaskEnd.FINISHED]
    assert len(waits) == 4
    assert waits[3] <= 0.05  # short again after a task


def test_job_failed_raises_and_the_loop_stays_failed() -> None:
    master = QueueMaster([4, 4], policy=QueuePolicy(max_failures=1, max_failed_fraction=0.0))
    task = master.queue.get_task("other", 0, master.now)[0].task
    assert task is not None
    master.queue.task_failed("other", task.task_id, task.epoch, "disk on fire", master.now)
    worker = Collect()
    loop = make_loop(master.client("t0", worker.log), worker)
    with pytest.raises(FailedPreconditionError,
                       match=r"trainer t0 stops: the master failed the job: 1 of 2 tasks failed.*"
                             r"disk on fire"):
        loop.step()
    assert loop.state is LoopState.FAILED
    assert loop.last is not None
    assert loop.last.action is Action.FAIL
    assert loop.step() is LoopState.FAILED  # no second GetTask, no second raise
    assert worker.log == ["begin pass 0", "get_task 0 -> JOB_FAILED"]


@pytest.mark.parametrize("outcome", [Outcome.OUTCOME_UNSPECIFIED, 42])
def test_an_outcome_the_trainer_does_not_know_fails_the_loop(outcome: int) -> None:
    master = QueueMaster([4])
    worker = Collect()
    client = master.client("t0", worker.log)
    client.scripted.append(master_pb2.GetTaskResponse(outcome=outcome))  # type: ignore[arg-type]
    loop = make_loop(client, worker)
    with pytest.raises(FailedPreconditionError, match=f"unknown outcome {outcome}"):
        loop.step()
    assert loop.state is LoopState.FAILED


def test_unreadable_data_fails_the_task_not_the_trainer() -> None:
    master = QueueMaster([12, 12, 12],
                         policy=QueuePolicy(max_failures=2, max_failed_fraction=0.5))
    worker = Collect()
    loop = make_loop(master.client("t0", worker.log), worker,
                     bad=frozenset({"part-1.parquet"}))
    assert loop.run() is LoopState.DONE
    assert master.queue.state_of(1) is TaskState.FAILED
    assert master.queue.state_of(0) is TaskState.DONE
    assert master.queue.state_of(2) is TaskState.DONE
    assert master.queue.failures_total == 2
    (entry,) = master.queue.failure_log
    assert entry.task_id == 1
    assert "trainer t0 reported: DataError: chunk part-1.parquet is garbled at row 8" in \
        entry.reason
    assert worker.tasks.count((0, 1, TaskEnd.FAILED)) == 2
    assert loop.ended == {TaskEnd.FINISHED: 2, TaskEnd.FAILED: 2}
    # Batch 0 was trained while batch 1 was read ahead; reading batch 2 fails, so batch 1 is
    # dropped with the task (the next holder resumes from the last reported progress).
    first_failure = worker.log.index("failed 1")
    assert worker.log[first_failure - 4:first_failure + 1] == [
        "finished 0 (3 batches) + get_task 0 -> TASK", "finished 0", "train 1/0", "abandon",
        "failed 1"]


def test_a_task_taken_back_by_the_master_is_dropped_and_the_loop_goes_on() -> None:
    master = QueueMaster([16])

    class ExpiresMidTask(Collect):
        def train(self, item: TaskBatch, next_batch: Any | None) -> None:
            super().train(item, next_batch)
            if item.seq == 0 and item.epoch == 1:
                master.queue.expire_leases(master.now + 1e6)  # as if we had stalled

    worker = ExpiresMidTask()
    loop = make_loop(master.client("t0", worker.log), worker, report_every=2)
    loop.step()
    assert worker.tasks == [(0, 0, TaskEnd.LOST)]
    assert worker.log[-4:] == ["flush", "report 8", "abandon", "lost 0"]
    assert loop.run() is LoopState.DONE  # the task came back (epoch 2) and was finished
    assert worker.tasks[-1] == (0, 0, TaskEnd.FINISHED)
    assert master.queue.state_of(0) is TaskState.DONE


def test_stop_drops_the_task_in_hand_and_ends_the_loop() -> None:
    master = QueueMaster([16, 16])
    stop = threading.Event()

    class StopsMidTask(Collect):
        def train(self, item: TaskBatch, next_batch: Any | None) -> None:
            super().train(item, next_batch)
            if item.seq == 1:
                stop.set()

    worker = StopsMidTask()
    loop = make_loop(master.client("t0", worker.log), worker, stop=stop)
    assert loop.step() is LoopState.STOPPED
    assert worker.log[-3:] == ["train 0/1", "abandon", "stopped 0"]
    assert loop.run() is LoopState.STOPPED
    assert master.queue.pending_of("t0") == [0]  # handed back when the trainer unregisters


def test_each_task_boundary_is_one_call_that_finishes_and_brings_the_next_answer() -> None:
    master = QueueMaster([4, 4, 4])
    worker = Collect()
    loop = make_loop(master.client("t0", worker.log), worker)
    assert loop.run() is LoopState.DONE
    calls = [line for line in worker.log if "get_task" in line]
    assert calls == ["get_task 0 -> TASK",  # only the first answer is asked for alone
                     "finished 0 (1 batches) + get_task 0 -> TASK",
                     "finished 1 (1 batches) + get_task 0 -> TASK",
                     "finished 2 (1 batches) + get_task 0 -> ALL_DONE"]
    assert worker.tasks == [(0, t, TaskEnd.FINISHED) for t in range(3)]
    assert master.queue.tasks_finished_total == 3


def test_a_stop_before_the_finish_asks_for_no_more_work() -> None:
    master = QueueMaster([4, 4])
    stop = threading.Event()

    class StopsAtTheFlush(Collect):
        def flush(self) -> None:
            super().flush()
            stop.set()  # after the last batch, before the finish is sent

    worker = StopsAtTheFlush()
    loop = make_loop(master.client("t0", worker.log), worker, stop=stop)
    assert loop.step() is LoopState.STOPPED
    assert worker.log[-2:] == ["finished 0 (1 batches)", "finished 0"]
    assert master.queue.state_of(0) is TaskState.DONE
    assert master.queue.pending_of("t0") == []  # no task leased to a trainer that stops


def test_a_resumed_task_restarts_at_a_batch_boundary_with_the_same_seqs() -> None:
    master = QueueMaster([10, 6], chunks_per_task=2)
    task = master.queue.get_task("other", 0, master.now)[0].task
    assert task is not None
    master.queue.report_progress("other", 0, task.epoch, 9, master.now)
    master.queue.trainer_lost("other", master.now, count_failure=False)
    worker = Collect()
    loop = make_loop(master.client("t0", worker.log), worker)
    loop.step()
    assert [i.seq for i in worker.items] == [2, 3, 4]  # record 9 -> resume at record 8
    assert worker.items[0].batch[0] == ("part-0.parquet", 8)
    # the task's count, not this dispatch's
    assert "finished 0 (5 batches) + get_task 0 -> ALL_DONE" in worker.log


def test_a_recovery_dispatch_trains_only_the_missing_batches() -> None:
    master = QueueMaster([10, 6], chunks_per_task=2, policy=QueuePolicy(reconcile=True))
    worker = Collect()
    loop = make_loop(master.client("t0", worker.log), worker)
    loop.step()
    assert master.queue.reconciling
    loop.step()
    assert loop.last is not None
    assert loop.last.action is Action.WAIT  # the pass waits for the pservers' accounting
    master.queue.reconciled(0, {0: [1, 4]}, master.now)
    worker.items.clear()
    loop.step()
    assert [i.seq for i in worker.items] == [1, 4]
    assert "finished 0 (2 batches) + get_task 0 -> RETRY_LATER" in worker.log
    assert master.queue.expected_batches() == {0: 5}  # the recovery keeps the task's count
    master.queue.reconciled(0, {}, master.now)
    assert loop.step() is LoopState.RUNNING  # the RETRY_LATER that came with the finish
    assert loop.last is not None
    assert loop.last.action is Action.WAIT
    assert loop.step() is LoopState.DONE


def test_while_a_pass_end_is_reconciled_the_trainer_asks_again_after_the_masters_hint() -> None:
    """The pass end is moments away: the master's short hint, every time, not the backoff
    that would double towards a second and see the end late."""
    master = QueueMaster([4], policy=QueuePolicy(reconcile=True))
    waits: list[float] = []
    worker = Collect()
    loop = make_loop(master.client("t0", worker.log), worker, waits=waits)
    loop.step()  # trains the one task; the finish leaves the pass to reconcile
    for _ in range(5):
        assert loop.step() is LoopState.RUNNING
    assert waits == [RECONCILING_RETRY_S] * 5
    master.queue.reconciled(0, {}, master.now)
    assert loop.step() is LoopState.DONE


def test_report_every_must_be_positive() -> None:
    master = QueueMaster([4])
    with pytest.raises(ConfigError, match="report_every=0"):
        make_loop(master.client("t0"), Collect(), report_every=0)


def test_a_stop_during_the_last_step_leaves_the_loop_done() -> None:
    master = QueueMaster([4])
    stop = threading.Event()

    class StopsAtTheEnd(Collect):
        def end_pass(self, pass_id: int) -> None:
            super().end_pass(pass_id)
            stop.set()  # e.g. SIGTERM arriving as the job ends

    loop = make_loop(master.client("t0"), StopsAtTheEnd(), stop=stop)
    assert loop.run() is LoopState.DONE


class TakenBackDuringAStep(Collect):
    """Its first step is slow: meanwhile the master takes the task back (its lease ran out
    before this trainer's heartbeat existed), and the step ends once a heartbeat was answered."""

    def __init__(self, master: QueueMaster) -> None:
        super().__init__()
        self.master = master

    def train(self, item: TaskBatch, next_batch: Any | None) -> None:
        if not self.items:
            self.master.queue.expire_leases(self.master.now + 1e6)
            wait_for(lambda: "report 0" in self.log, 10, "a heartbeat")
        super().train(item, next_batch)


def test_a_heartbeat_renews_by_time_and_its_refusal_drops_the_task() -> None:
    master = QueueMaster([16])  # one task of 4 batches
    worker = TakenBackDuringAStep(master)
    loop = make_loop(master.client("t0", worker.log), worker, heartbeat_s=0.02)
    loop.step()  # the heartbeat hears the task is no longer ours: dropped after that step
    loop.step()  # handed out again, trained to the end
    assert [how for _, _, how in worker.tasks] == [TaskEnd.LOST, TaskEnd.FINISHED]
    assert worker.log.index("report 0") < worker.log.index("train 0/0")
    assert worker.log[worker.log.index("train 0/0") + 1] == "abandon"
