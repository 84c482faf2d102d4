"""The master counts a task's finished records once, whichever call finished it.

The real :class:`MasterServicer` over the real queue and group commit (an embedded store behind
an election), called in-process with a fake clock. The throughput on the status page is what
the calls counted: ``records / elapsed`` while less than its window has passed. A repeat of a
finish after a lost answer, or a finish from a stale holder, must count nothing, also when the
GetTask half of a FinishAndGetTask leases a task in the same step (so the step's delta is not
empty).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import grpc
import pytest

from elasticps.data.batch_plan import BatchPlan
from elasticps.data.manifest import ChunkRef
from elasticps.master.service import MasterServicer, MasterState
from elasticps.master.snapshot import QueueSnapshot
from elasticps.master.task_queue import QueuePolicy
from elasticps.proto import master_pb2
from elasticps.store import open_store
from elasticps.store.api import Op
from elasticps.store.election import Election

ROWS = 40  # per chunk; one chunk per task
NOW = 10.0  # seconds since the master started when the tests read the throughput
LEASE = 5.0
TASK = master_pb2.GetTaskResponse.Outcome.TASK


class NoAbort:
    """The servicer context: these calls must all be answered, never aborted."""

    def set_trailing_metadata(self, metadata: Any) -> None:
        pass  # the error marker goes with an abort, which fails the test

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise AssertionError(f"the master aborted the call with {code.name}: {details}")


class Master:
    """One job's master state and servicer; :attr:`now` is its clock."""

    def __init__(self, tmp_path: Path, job: str, num_tasks: int) -> None:
        self.store = open_store(f"file://{tmp_path}/job.db", job)
        self.election = Election(self.store, "master/election", b"test", ttl=5)
        assert self.election.campaign(timeout=10)

        def commit(ops: Sequence[Op]) -> None:
            self.election.leader_txn(ops)

        def chunks(url: str) -> list[ChunkRef]:
            return [ChunkRef(f"part-{i}.parquet", 0, ROWS) for i in range(num_tasks)]

        self.now = 0.0
        self.state = MasterState(job, "m0", QueueSnapshot(self.store, commit),
                                 QueuePolicy(task_lease=LEASE), chunks, clock=lambda: self.now)
        self.servicer = MasterServicer(self.state)
        self.state.set_dataset("mem://ctr", 1, 1, BatchPlan(4))

    def call(self, method: str, request: Any) -> Any:
        return getattr(self.servicer, method)(request, NoAbort())

    def get(self, trainer: str) -> master_pb2.GetTaskResponse:
        return self.call("GetTask", master_pb2.GetTaskRequest(trainer=trainer, pass_id=0))

    def finished(self, trainer: str, task: master_pb2.Task) -> master_pb2.TaskFinishedRequest:
        return master_pb2.TaskFinishedRequest(trainer=trainer, task_id=task.task_id,
                                              epoch=task.epoch, records=ROWS, batches=10)

    def finish(self, trainer: str, task: master_pb2.Task) -> master_pb2.TaskFinishedResponse:
        return self.call("TaskFinished", self.finished(trainer, task))

    def finish_and_get(self, trainer: str,
                       task: master_pb2.Task) -> master_pb2.FinishAndGetTaskResponse:
        return self.call("FinishAndGetTask", master_pb2.FinishAndGetTaskRequest(
            finished=self.finished(trainer, task), pass_id=0))

    def fail(self, trainer: str, task: master_pb2.Task) -> None:
        reply = self.call("TaskFailed", master_pb2.TaskFailedRequest(
            trainer=trainer, task_id=task.task_id, epoch=task.epoch, reason="bad disk"))
        assert reply.accepted

    def counted_records(self) -> float:
        """The finished records the calls counted, read back from the status page."""
        self.now = NOW
        return self.state.status()["throughput_records_per_s"] * NOW

    def close(self) -> None:
        self.election.resign()
        self.store.close()


@pytest.fixture
def master(tmp_path: Path, job_name: str, request: pytest.FixtureRequest) -> Iterator[Master]:
    running = Master(tmp_path, job_name, num_tasks=getattr(request, "param", 3))
    yield running
    running.close()


def test_a_repeated_task_finished_counts_its_records_once(master: Master) -> None:
    task = master.get("a").task
    assert master.finish("a", task).accepted
    repeat = master.finish("a", task)  # the first answer was lost; the trainer retries
    assert repeat.accepted
    assert "already finished" in repeat.reason
    assert master.counted_records() == ROWS


def test_a_repeated_finish_and_get_that_leases_a_task_counts_its_finish_once(
        master: Master) -> None:
    """The repeat's GetTask half leases a task that came back meanwhile, so the step's delta
    is not empty; its finish half changed nothing and counts nothing."""
    first, second, _ = (master.get(t).task for t in ("a", "b", "c"))  # none left in todo
    answer = master.finish_and_get("a", first)
    assert answer.finished.accepted
    assert answer.next.outcome == master_pb2.GetTaskResponse.Outcome.RETRY_LATER
    master.fail("b", second)  # its task goes back to todo
    repeat = master.finish_and_get("a", first)  # the first answer was lost
    assert repeat.finished.accepted
    assert "already finished" in repeat.finished.reason
    assert (repeat.next.outcome, repeat.next.task.task_id) == (TASK, second.task_id)
    assert master.counted_records() == ROWS


@pytest.mark.parametrize("master", [1], indirect=True)
def test_a_stale_finish_and_get_that_is_handed_the_same_task_again_counts_nothing(
        master: Master) -> None:
    """A holder whose lease expired and whose task was dispatched again (and given back) sends
    its finish: refused as stale, while its GetTask half leases it that very task again, so
    the step's delta names the task without finishing it."""
    stale = master.get("a").task
    master.now = LEASE + 1
    master.state.expire_leases()
    again = master.get("b").task
    assert (again.task_id, again.epoch) == (stale.task_id, stale.epoch + 1)
    master.fail("b", again)
    answer = master.finish_and_get("a", stale)
    assert not answer.finished.accepted
    assert "stale" in answer.finished.reason
    assert (answer.next.outcome, answer.next.task.task_id) == (TASK, stale.task_id)
    assert master.counted_records() == 0
    assert master.finish("a", answer.next.task).accepted
    assert master.counted_records() == ROWS


def test_a_finish_counts_once_whichever_call_sent_it_first(master: Master) -> None:
    first, second = master.get("a").task, master.get("b").task
    assert master.finish_and_get("a", first).finished.accepted
    assert master.finish("a", first).accepted  # a TaskFinished repeat of that finish
    assert master.finish("b", second).accepted
    assert master.finish_and_get("b", second).finished.accepted  # and the other way round
    assert master.counted_records() == 2 * ROWS
