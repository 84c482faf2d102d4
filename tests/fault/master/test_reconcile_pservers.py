"""Pass-end reconciliation with real pserver processes: a partial push (a trainer dying between
shards) and a pserver SIGKILLed and restored from an older checkpoint both end with every
shard holding every batch exactly once — checked on the parameters themselves.

The "trainer" is this test, pushing with ``PServerClient`` (and, for the partial push, to one
shard only). Every batch's gradient is 1 on a dense SGD table with lr 1, so a shard's slice
equals ``-(batches applied)``: a lost batch or a double application shows in the values.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from elasticps.data.batch_plan import BatchPlan
from elasticps.master.client import MasterClient
from elasticps.master.server import MasterOptions, MasterServer
from elasticps.master.snapshot import load_accounting
from elasticps.master.task_queue import QueuePolicy
from elasticps.proto import common_pb2, master_pb2, pserver_pb2
from elasticps.pserver.client import PServerClient
from elasticps.rpc import encode_tensor
from elasticps.store import Store, open_store
from tests.helpers import job_credentials, wait_for
from tests.integration.master.helpers import synthetic_chunks
from tests.integration.pserver.harness import TOKEN, PServers

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
SPECS = [SPEC(name="w", kind=SPEC.DENSE, shape=[4], optimizer=OPT(kind=OPT.SGD, lr=1.0))]
BATCHES = 4  # per task; 3 tasks
BATCH_SIZE = 25  # synthetic chunks have 100 rows: 4 batches each
Outcome = master_pb2.GetTaskResponse.Outcome


class Job:
    def __init__(self, tmp: Path, job: str) -> None:
        self.store_url = f"file://{tmp}/job.db"
        self.store: Store = open_store(self.store_url, job)
        self.pservers = PServers(tmp, self.store_url, job, 2,
                                 PADDLE_CHECKPOINT_URL=f"file://{tmp}/ckpt",
                                 PADDLE_CHECKPOINT_INTERVAL="3600", PADDLE_CHECKPOINT_KEEP="3")
        self.procs = [self.pservers.start(), self.pservers.start()]
        self.pservers.wait_slots(self.store, {p.pid for p in self.procs})
        opts = MasterOptions(job=job, credentials=job_credentials(job, "master", TOKEN),
                             lease_ttl=2, num_pservers=2,
                             policy=QueuePolicy(task_lease=60.0), dataset="synthetic",
                             chunks_per_task=1, num_passes=1, reconcile_timeout=10.0,
                             batch_plan=BatchPlan(BATCH_SIZE))
        self.master = MasterServer(self.store, opts, lambda url: synthetic_chunks(3))
        self.thread = threading.Thread(target=self.master.run, daemon=True)
        self.thread.start()
        wait_for(self.master.serving.is_set, 30, "the master to serve")
        self.ps = PServerClient(self.store, job_credentials(job, token=TOKEN), 2, deadline=60)
        self.ps.declare_tables(SPECS)
        self.ps.initialize({"w": np.zeros(4, dtype=np.float32)})
        self.mc = MasterClient(self.store, job_credentials(job, token=TOKEN), "t1")
        self.mc.register_trainer()

    def push(self, task: master_pb2.Task, seq: int, only_shard: int | None = None) -> None:
        ref = common_pb2.BatchRef(pass_id=task.pass_id, task_id=task.task_id, seq=seq)
        if only_shard is None:
            self.ps.push(ref, {"w": np.ones(4, dtype=np.float32)}, {})
            return
        request = pserver_pb2.PushRequest(batch=ref, dense=[pserver_pb2.NamedTensor(
            name="w", tensor=encode_tensor(np.ones(2, dtype=np.float32)))])
        # a trainer that died after one shard
        self.ps._call(only_shard, "Push", request, self.ps.num_shards)

    def get_task(self) -> master_pb2.GetTaskResponse:
        def ask() -> master_pb2.GetTaskResponse | None:
            response = self.mc.get_task(0)
            return None if response.outcome == Outcome.RETRY_LATER else response
        return wait_for(ask, 60, "a GetTask answer other than RETRY_LATER")  # type: ignore

    def close(self) -> None:
        self.mc.close()
        self.ps.close()
        self.master.stop()
        self.thread.join(timeout=10)
        self.pservers.stop_all()
        self.store.close()


@pytest.fixture
def job(tmp_path: Path, job_name: str) -> Iterator[Job]:
    running = Job(tmp_path, job_name)
    try:
        yield running
    finally:
        running.close()


def _finish_remaining(job: Job) -> list[master_pb2.Task]:
    """Train whatever the master hands out until ALL_DONE; return the recovery dispatches."""
    recoveries = []
    while True:
        response = job.get_task()
        if response.outcome == Outcome.ALL_DONE:
            return recoveries
        assert response.outcome == Outcome.TASK, response
        task = response.task
        seqs = list(task.only_batches) or list(range(BATCHES))
        if task.only_batches:
            recoveries.append(task)
        for seq in seqs:
            job.push(task, seq)
        assert job.mc.task_finished(task, 10, BATCHES)


def _assert_exactly_once(job: Job) -> None:
    values = job.ps.pull_dense()["w"]
    np.testing.assert_array_equal(values, np.full(4, -3.0 * BATCHES, dtype=np.float32))
    accounting = load_accounting(job.store)[0]
    assert accounting["complete"]
    assert [(s["expected"], s["held"], s["missing"], s["duplicates"])
            for s in accounting["shards"]] == [(3 * BATCHES, 3 * BATCHES, 0, 0)] * 2


def test_partial_push_is_recovered_for_the_shard_that_missed_it(job: Job) -> None:
    response = job.get_task()
    task = response.task
    for seq in range(BATCHES - 1):
        job.push(task, seq)
    job.push(task, BATCHES - 1, only_shard=1)  # shard 0 never gets the last batch
    assert job.mc.task_finished(task, 10, BATCHES)
    recoveries = _finish_remaining(job)
    assert [(r.task_id, list(r.only_batches)) for r in recoveries] == [
        (task.task_id, [BATCHES - 1])]
    stats = job.ps.stats()
    assert [s.get("duplicates", 0) for s in stats["shards"]] == ["0", "1"]
    _assert_exactly_once(job)


def test_pserver_restored_from_an_older_checkpoint_gets_its_lost_batches_back(job: Job) -> None:
    response = job.get_task()
    task = response.task
    job.push(task, 0)
    job.push(task, 1)
    (old0, _old1) = job.ps.checkpoint(0)  # both shards now hold seqs 0 and 1 durably
    assert old0.checkpoint_id
    assert [t.below for t in old0.tasks] == [2]
    job.push(task, 2)
    job.push(task, 3)
    slot0 = json.loads(job.store.get("pserver/slot/0").value)["pid"]  # type: ignore[union-attr]
    victim = next(p for p in job.procs if p.pid == slot0)
    job.pservers.kill(victim)  # shard 0 loses seqs 2, 3: they were never checkpointed
    job.procs.append(job.pservers.start())
    assert job.mc.task_finished(task, 10, BATCHES)
    recoveries = _finish_remaining(job)
    assert [(r.task_id, list(r.only_batches)) for r in recoveries] == [(task.task_id, [2, 3])]
    restored = next(s for s in job.ps.stats()["shards"] if s["shard"] == 0)
    assert restored["restored_from"] == old0.checkpoint_id
    _assert_exactly_once(job)


def test_a_pserver_restarted_empty_refuses_a_late_push_of_a_sealed_pass(
        job: Job, tmp_path: Path) -> None:
    """Hole 7: a shard that restarts with no checkpoint (its disk lost) must not apply a very
    late push of a pass the master sealed: it takes the sealed passes from the store and counts
    their pushes as applied. (Its share of their training is lost; the log says so.)"""
    late = job.get_task().task
    for seq in range(BATCHES):
        job.push(late, seq)
    assert job.mc.task_finished(late, 10, BATCHES)
    _finish_remaining(job)  # pass 0 is sealed: the job (one pass) is done
    assert store_sealed(job) == 1
    slot0 = json.loads(job.store.get("pserver/slot/0").value)["pid"]  # type: ignore[union-attr]
    job.pservers.kill(next(p for p in job.procs if p.pid == slot0))
    shutil.rmtree(tmp_path / "ckpt" / "shard-0-of-2")  # no checkpoint of shard 0 survives
    job.procs.append(job.pservers.start())
    job.push(late, 0)  # a stale trainer's push of the sealed pass, very late
    stats = next(s for s in job.ps.stats()["shards"] if s["shard"] == 0)
    assert stats.get("duplicates", "0") == "1", stats
    np.testing.assert_array_equal(job.ps.pull_dense()["w"][:2], np.zeros(2, dtype=np.float32))
    assert "passes below 1 are sealed" in job.pservers.logs()


def store_sealed(job: Job) -> int:
    kv = job.store.get("job/sealed")
    return 0 if kv is None else int(json.loads(kv.value)["below"])
