"""The master over real gRPC and HTTP with the embedded store, in one process."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticps.data.batch_plan import BatchPlan
from elasticps.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from elasticps.master.client import MasterClient
from elasticps.master.server import MasterOptions, MasterServer
from elasticps.master.snapshot import decode_task
from elasticps.master.task_queue import QueuePolicy, TaskRecord, TaskState
from elasticps.proto import master_pb2
from elasticps.store import Store, open_store
from elasticps.store.keys import master_task_key, read_master_address
from elasticps.trainer.task_batches import TaskBatch
from elasticps.trainer.task_loop import LoopState, TaskEnd
from tests.helpers import job_credentials, wait_for
from tests.integration.master.helpers import synthetic_chunks
from tests.task_workers import Collect, task_loop

ROWS = 10
PLAN = BatchPlan(4)  # fake_batches' batch size: a chunk of 10 rows is 3 batches


def fake_batches(chunk: master_pb2.Chunk, start: int, batch_size: int = 4) -> Iterator[list]:
    """Records named (path, row_group, row) so a test can check which rows were read."""
    rows = [(chunk.path, chunk.row_group, r) for r in range(start, chunk.num_rows)]
    for begin in range(0, len(rows), batch_size):
        yield rows[begin:begin + batch_size]


class RunningMaster:
    def __init__(self, store: Store, job: str, **options: object) -> None:
        self.credentials = job_credentials(job)
        opts = MasterOptions(job=job, credentials=job_credentials(job, "master"), lease_ttl=2,
                             **options)  # type: ignore[arg-type]
        self.server = MasterServer(store, opts, lambda url: synthetic_chunks(10, rows=ROWS))
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        wait_for(self.server.serving.is_set, 20, "the master to serve")

    def _run(self) -> None:
        self.code = self.server.run()

    def stop(self) -> None:
        self.server.stop()
        self.thread.join(timeout=10)


@pytest.fixture
def store(tmp_path: Path, job_name: str) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", job_name)
    yield handle
    handle.close()


@pytest.fixture
def master(store: Store, job_name: str) -> Iterator[RunningMaster]:
    running = RunningMaster(store, job_name,
                            policy=QueuePolicy(max_failures=2, task_lease=30.0))
    yield running
    running.stop()


def test_two_trainers_read_every_record_of_every_pass_once(
        store: Store, master: RunningMaster) -> None:
    clients = [MasterClient(store, master.credentials, f"trainer-{i}", lease_ttl=2)
               for i in range(2)]
    response = clients[0].set_dataset("mem://ctr", 2, 2, PLAN)
    assert (response.num_tasks, response.num_chunks) == (5, 10)
    assert clients[1].set_dataset("mem://ctr", 2, 2, PLAN).num_tasks == 5  # idempotent
    with pytest.raises(FailedPreconditionError, match="dataset_url='mem://ctr', not 'mem://other'"):
        clients[1].set_dataset("mem://other", 2, 2, PLAN)
    seen: list[list[TaskBatch]] = [[], []]
    ends: list[list[int]] = [[], []]

    def train(i: int) -> None:
        clients[i].register_trainer()
        worker = Collect()
        loop = task_loop(clients[i], fake_batches, 4, worker, trainer_name=f"trainer-{i}",
                         report_every=1)
        assert loop.run() is LoopState.DONE
        seen[i], ends[i] = worker.items, worker.ended

    threads = [threading.Thread(target=train, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    for pass_id in (0, 1):
        rows = sorted(r for items in seen for it in items if it.pass_id == pass_id
                      for r in it.batch)
        assert rows == sorted(set(rows))
        assert len(rows) == 10 * ROWS
    # Each trainer saw its passes end in order; a trainer that was waiting (RETRY_LATER) when
    # the other finished everything may jump straight to ALL_DONE.
    assert all(e == sorted(set(e)) for e in ends)
    assert max(e[-1] for e in ends) == 1
    status = clients[0].status()
    assert status["state"] == "succeeded"
    assert status["done"] is True
    assert status["tasks_finished_total"] == 10
    assert status["records_total"] == 2 * 10 * ROWS
    assert status["counts"] == {"todo": 0, "pending": 0, "done": 5, "failed": 0}
    for client in clients:
        client.close()


def test_a_trainer_that_would_number_batches_differently_is_refused(
        store: Store, master: RunningMaster) -> None:
    """Hole 2: the first SetDataset pins the batch plan; a trainer with another batch size,
    shuffle seed or feature config is refused with the difference named, before it trains."""
    first = MasterClient(store, master.credentials, "first")
    first.set_dataset("mem://ctr", 2, 2, BatchPlan(4, shuffle_seed=3, features='{"a":1}'))
    other = MasterClient(store, master.credentials, "other")
    for plan, named in ((BatchPlan(8, 3, '{"a":1}'), "batch_size=4, not 8"),
                        (BatchPlan(4, None, '{"a":1}'), "shuffle_seed=3, not None"),
                        (BatchPlan(4, 3, ""), "features='{\"a\":1}', not ''")):
        with pytest.raises(FailedPreconditionError, match=re.escape(named)):
            other.set_dataset("mem://ctr", 2, 2, plan)
    assert other.set_dataset("mem://ctr", 2, 2, BatchPlan(4, 3, '{"a":1}')).num_tasks == 5
    with pytest.raises(InvalidArgumentError, match="batch_size >= 1"):
        other._call(lambda s: s.SetDataset, master_pb2.SetDatasetRequest(
            dataset_url="mem://ctr", chunks_per_task=2, num_passes=2), "SetDataset")
    first.close()
    other.close()


class SlowFirstStep(Collect):
    """A worker whose first step takes ``seconds`` (a stalled pull, a busy machine)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def train(self, item: TaskBatch, next_batch: object) -> None:
        if not self.items:
            began = time.monotonic()
            wait_for(lambda: time.monotonic() - began >= self.seconds, 2 * self.seconds,
                     "the slow step to end")
        super().train(item, next_batch)


def test_one_step_slower_than_the_task_lease_keeps_the_task(store: Store, job_name: str) -> None:
    """Hole 6: progress used to be reported every 20 batches only, so one step longer than the
    task lease lost the task and counted a failure. The loop now renews the lease by time."""
    running = RunningMaster(store, job_name, policy=QueuePolicy(task_lease=1.0))
    client = MasterClient(store, running.credentials, "slow")
    try:
        client.register_trainer()
        client.set_dataset("mem://ctr", 10, 1, PLAN)  # one task of 30 batches
        worker = SlowFirstStep(3.0)  # three task leases
        loop = task_loop(client, fake_batches, 4, worker, trainer_name="slow")
        assert loop.run() is LoopState.DONE
        assert [how for _, _, how in worker.tasks] == [TaskEnd.FINISHED]
        status = client.status()
        assert status["failures_total"] == 0, status["failure_log"]
        assert status["tasks_finished_total"] == 1
    finally:
        client.close()
        running.stop()


def test_stale_and_bad_requests_get_defined_answers(
        store: Store, master: RunningMaster) -> None:
    client = MasterClient(store, master.credentials, "a")
    with pytest.raises(FailedPreconditionError, match="no dataset yet"):
        client.get_task(0)
    client.set_dataset("mem://ctr", 5, 1, PLAN)
    task = client.get_task(0).task
    assert client.report_progress(task, 4)
    stale = master_pb2.Task()
    stale.CopyFrom(task)
    stale.epoch = task.epoch - 1
    assert not client.report_progress(stale, 8)
    assert not client.task_finished(stale, 50, 13)
    with pytest.raises(InvalidArgumentError, match="records_done=999"):
        client.report_progress(task, 999)
    ghost = master_pb2.Task(task_id=77, epoch=1)
    with pytest.raises(NotFoundError, match="task 77 does not exist"):
        client.task_finished(ghost, 1, 1)
    assert client.task_finished(task, 50, 13)
    assert client.task_finished(task, 50, 13)  # a retry after a lost answer
    other = MasterClient(store, master.credentials, "b")
    assert client.request_save_model(5.0)
    assert not other.request_save_model(5.0)
    assert client.status()["save_model_holder"] == "a"
    client.close()
    other.close()


def stored_task(store: Store, task_id: int) -> TaskRecord:
    kv = store.get(master_task_key(task_id))
    assert kv is not None, f"task {task_id} has no record in the store"
    return decode_task(kv.value)


def test_finish_and_get_is_one_transaction_and_a_retry_on_the_next_master_is_safe(
        store: Store, master: RunningMaster, job_name: str) -> None:
    client = MasterClient(store, master.credentials, "a", lease_ttl=5)
    client.register_trainer()  # a live trainer keeps its pending task across a takeover
    client.set_dataset("mem://ctr", 2, 1, PLAN)  # 5 tasks of 2 chunks: 6 batches each
    first = client.get_task(0).task
    state = master.server.master_state
    assert state is not None
    written = state.commits.transactions
    accepted, following = client.finish_and_get(first, 20, 6, 0)
    assert accepted
    assert following.outcome == master_pb2.GetTaskResponse.TASK
    assert state.commits.transactions == written + 1  # the finish and the lease, together
    assert stored_task(store, first.task_id).state is TaskState.DONE
    held = stored_task(store, following.task.task_id)
    assert (held.state, held.owner, held.epoch) == (TaskState.PENDING, "a",
                                                    following.task.epoch)

    # The answer is lost and the master goes away; its successor loads the store, and the
    # trainer's retry of the very same call neither finishes twice nor loses the task.
    master.stop()
    successor = RunningMaster(store, job_name, policy=QueuePolicy(task_lease=30.0))
    try:
        accepted, again = client.finish_and_get(first, 20, 6, 0)
        assert accepted
        assert again.task == following.task  # same task, same epoch
        status = client.status()
        assert status["tasks_finished_total"] == 1
        assert status["records_total"] == 20
        assert status["counts"] == {"todo": 3, "pending": 1, "done": 1, "failed": 0}
        with pytest.raises(InvalidArgumentError, match="pass_id=1 must be within"):
            client.finish_and_get(again.task, 20, 6, 1)
        assert client.status()["counts"]["pending"] == 1  # the bad call changed nothing
    finally:
        client.close()
        successor.stop()


def test_a_lost_trainer_gets_its_tasks_released_at_once(
        store: Store, master: RunningMaster) -> None:
    lost = MasterClient(store, master.credentials, "lost", lease_ttl=1)
    lost.register_trainer()
    lost.set_dataset("mem://ctr", 1, 1, PLAN)
    held = [lost.get_task(0).task.task_id]
    # A repeated GetTask (its answer lost) gets the same task back, not a second one.
    assert lost.get_task(0).task.task_id == held[0]
    wait_for(lambda: "lost" in lost.status()["live_trainers"], 10, "the trainer to be seen")
    assert lost._lease is not None
    lost._lease.revoke()  # as when the trainer dies: its key vanishes with the lease
    wait_for(lambda: lost.status()["counts"]["pending"] == 0, 10,
             "the lost trainer's tasks to go back to todo")
    status = lost.status()
    assert status["counts"]["todo"] == 10
    assert status["failures_total"] == 1
    other = MasterClient(store, master.credentials, "other")
    taken = []
    for _ in range(10):
        task = other.get_task(0).task
        taken.append(task.task_id)
        assert other.task_finished(task, 1, 1)
    assert taken[-1:] == held  # released tasks go to the back of the queue
    other.close()


def test_a_trainer_whose_lease_expired_registers_again_before_asking_for_work(
        store: Store, master: RunningMaster) -> None:
    client = MasterClient(store, master.credentials, "cut", lease_ttl=1)
    client.register_trainer()
    client.set_dataset("mem://ctr", 1, 1, PLAN)
    first = client.get_task(0).task.task_id
    wait_for(lambda: "cut" in client.status()["live_trainers"], 10, "the trainer to be seen")
    old = client._lease
    assert old is not None
    old.revoke()  # as when a network partition outlives the lease: the key is gone
    wait_for(lambda: client.status()["pending"] == {}, 10, "the master to release its task")
    assert "cut" not in client.status()["live_trainers"]
    task = client.get_task(0).task.task_id
    assert task != first
    assert store.get("trainer/cut") is not None
    assert client._lease is not old
    assert not client._lease.expired
    wait_for(lambda: "cut" in client.status()["live_trainers"], 10, "the trainer to be back")
    assert client.status()["pending"] == {"cut": [task]}
    client.close()


def test_status_page_and_address_are_published(store: Store, master: RunningMaster) -> None:
    address = read_master_address(store)
    assert address is not None
    assert address.status_url == f"http://127.0.0.1:{master.server.http_port}/"
    client = MasterClient(store, master.credentials, "a")
    client.set_dataset("mem://ctr", 2, 3, PLAN)
    client.get_task(0)
    with urllib.request.urlopen(address.status_url + "api/status", timeout=10) as reply:
        doc = json.loads(reply.read())
    assert doc["job"] == master.server.options.job
    assert doc["pass"] == 0
    assert doc["num_passes"] == 3
    assert doc["counts"] == {"todo": 4, "pending": 1, "done": 0, "failed": 0}
    assert doc["pending"] == {"a": [0]}
    assert doc["state"] == "running"
    with urllib.request.urlopen(address.status_url, timeout=10) as reply:
        page = reply.read().decode()
    assert '<script src="static/app.js">' in page  # the page draws itself from api/status
    with urllib.request.urlopen(address.status_url + "metrics", timeout=10) as reply:
        job = master.server.options.job
        assert (f'elasticps_master_tasks{{job="{job}",role="master",state="pending"}} 1.0'
                .encode() in reply.read())
    client.close()

