"""The master following a stream, stepped poll by poll: real partitions under a local prefix,
the real MasterState and servicer over an embedded store behind an election, the follower's
:meth:`StreamFollower.step` called by hand (no thread, no socket). What it appended is read back
from the store by a second master, as after a failover."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from elasticps.data.batch_plan import BatchPlan
from elasticps.data.from_table import write_dataset
from elasticps.data.stream import FsspecPartitionSource, partition_time, write_end_marker
from elasticps.errors import NotLeaderError
from elasticps.master.reconcile_loop import Reconciler
from elasticps.master.service import MasterServicer, MasterState
from elasticps.master.snapshot import QueueSnapshot, StreamSpec, load_accounting
from elasticps.master.stream_loop import StreamFollower
from elasticps.master.task_queue import RECONCILING_RETRY_S, QueuePolicy
from elasticps.master.telemetry import MasterMetrics
from elasticps.proto import master_pb2, pserver_pb2
from elasticps.store import Store, open_store
from elasticps.store.election import Election
from elasticps.store.keys import (
    MASTER_STATE_STREAM,
    SEALED_PASSES,
    SealedPasses,
    master_partition_key,
)
from elasticps.telemetry.exporter import exposition
from tests.helpers import wait_for
from tests.unit.telemetry.test_telemetry import parsed

PLAN = BatchPlan(10)
POLICY = QueuePolicy(task_lease=30.0)
TASK = master_pb2.GetTaskResponse.Outcome.TASK
RETRY = master_pb2.GetTaskResponse.Outcome.RETRY_LATER
SCHEMA = {"label": {"name": "y", "kind": "binary"},
          "columns": {"c": {"kind": "categorical", "table": "t", "id_space": 100}}}


class NoAbort:
    def set_trailing_metadata(self, metadata: Any) -> None:
        pass

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise AssertionError(f"the master aborted the call with {code.name}: {details}")


def land(prefix: Path, name: str, rows: int = 20, id_space: int = 100) -> None:
    """One partition: 10-row chunks, its manifest written last (the commit)."""
    schema = {**SCHEMA, "columns": {"c": {"kind": "categorical", "table": "t",
                                          "id_space": id_space}}}
    write_dataset({"y": np.zeros(rows, np.int8), "c": np.arange(rows) % 7},
                  str(prefix / name), schema, rows_per_chunk=10, overwrite=True)


class Master:
    """One master process's state over the job's store, and its follower."""

    def __init__(self, store: Store, name: str, policy: QueuePolicy = POLICY) -> None:
        self.election = Election(store, "master/election", name.encode(), ttl=5)
        assert self.election.campaign(timeout=10)
        self.state = MasterState("j", name, QueueSnapshot(store, self.election.leader_txn),
                                 policy, lambda url: [], source_for=FsspecPartitionSource,
                                 persist_retry_s=0.2)
        self.follower = StreamFollower(self.state, threading.Event())
        self.servicer = MasterServicer(self.state)

    def resume(self) -> None:
        loaded = self.state.snapshot.load(POLICY, set(), 0.0)
        assert loaded is not None
        self.state.install(loaded)

    def get(self, trainer: str) -> master_pb2.GetTaskResponse:
        return self.servicer.GetTask(master_pb2.GetTaskRequest(trainer=trainer, pass_id=0),
                                     NoAbort())

    def finish(self, trainer: str, task: master_pb2.Task) -> master_pb2.GetTaskResponse:
        request = master_pb2.FinishAndGetTaskRequest(
            finished=master_pb2.TaskFinishedRequest(trainer=trainer, task_id=task.task_id,
                                                    epoch=task.epoch, records=10, batches=1),
            pass_id=0)
        return self.servicer.FinishAndGetTask(request, NoAbort()).next

    def status(self) -> dict[str, Any]:
        return self.state.status()


@pytest.fixture
def store(tmp_path: Path, job_name: str) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", job_name)
    yield handle
    handle.close()


def start(store: Store, prefix: Path, name: str = "m1", **stream: Any) -> Master:
    master = Master(store, name)
    master.state.set_dataset(str(prefix), 1, 1, PLAN, StreamSpec(**stream))
    return master


def test_partitions_that_land_become_tasks_in_order_and_their_position_is_persisted(
        tmp_path: Path, store: Store) -> None:
    prefix = tmp_path / "clicks"
    master = start(store, prefix)
    assert not master.follower.step()  # nothing landed: the job waits, visibly
    waiting = master.get("t1")
    assert (waiting.outcome, waiting.reason) == (RETRY,
                                                 "waiting for the stream's next partition")
    assert master.status()["stream"]["waiting_for_data"]
    land(prefix, "dt=2026-12-01/hour=13")
    land(prefix, "dt=2026-12-01/hour=14", rows=15)
    assert master.follower.step()
    assert master.state.queue is not None
    assert master.state.queue.num_tasks == 4
    assert store.get(master_partition_key(1)) is not None
    assert store.get(master_partition_key(2)) is None
    task = master.get("t1").task
    assert [c.path for c in task.chunks] == ["dt=2026-12-01/hour=13/part-00000.parquet"]
    assert task.partition == "dt=2026-12-01/hour=13"
    assert task.event_time == partition_time("dt=2026-12-01/hour=13")
    assert task.schema_partition == "dt=2026-12-01/hour=13"
    assert (task.first_batch, task.pass_batches) == (0, 0)
    ids = [task.task_id]
    while True:
        task = master.finish("t1", task).task
        if not task.chunks:
            break
        ids.append(task.task_id)
        assert task.schema_partition == "dt=2026-12-01/hour=13"
    assert ids == [0, 1, 2, 3]  # in order, each once
    assert task.event_time == 0.0  # (the answer with no task)
    doc = master.status()["stream"]
    assert (doc["partitions"], doc["last"], doc["trained_through"], doc["waiting"]) == (
        2, "dt=2026-12-01/hour=14", "dt=2026-12-01/hour=14", 0)
    assert doc["lag_s"] is not None
    assert doc["lag_s"] >= 0
    assert master.state.queue.reconciling is False  # no pservers: nothing to reconcile with

    # A failover: a second master reads the position and the partitions from the store, and
    # appends only what landed since.
    master.election.resign()
    second = Master(store, "m2")
    second.resume()
    catalog = second.state.catalog
    assert catalog is not None
    assert [e.partition.name for e in catalog.entries] == [
        "dt=2026-12-01/hour=13", "dt=2026-12-01/hour=14"]
    assert second.get("t2").outcome is RETRY  # every appended task is done: none again
    land(prefix, "dt=2026-12-01/hour=15")
    assert second.follower.step()
    again = second.get("t2").task
    assert (again.task_id, again.partition, again.first_batch) == (4, "dt=2026-12-01/hour=15",
                                                                   4)
    assert second.state.queue is not None
    assert second.state.queue.num_tasks == 6


def test_a_master_deposed_while_it_appends_appends_nothing_and_its_successor_appends_once(
        tmp_path: Path, store: Store) -> None:
    """A master killed right as a partition commits: its append's fenced write is refused,
    so the store holds nothing of it, and the next leader appends the partition once."""
    prefix = tmp_path / "clicks"
    first = start(store, prefix)
    land(prefix, "dt=2026-12-01/hour=13")
    assert first.follower.step()
    land(prefix, "dt=2026-12-01/hour=14")
    first.election.lease.revoke()  # its lease is gone: another master may lead
    second = Master(store, "m2")
    with pytest.raises(NotLeaderError):
        first.follower.step()
    assert first.state.deposed.is_set()
    raw = store.get(MASTER_STATE_STREAM)
    assert raw is not None
    assert b'"partitions":1' in raw.value
    second.resume()
    assert second.follower.step()
    assert not second.follower.step()  # listed again: nothing new, nothing twice
    catalog = second.state.catalog
    assert catalog is not None
    assert [e.partition.name for e in catalog.entries] == [
        "dt=2026-12-01/hour=13", "dt=2026-12-01/hour=14"]
    assert [e.first_task for e in catalog.entries] == [0, 2]


def test_a_partition_of_another_schema_is_refused_visibly_until_it_is_rewritten(
        tmp_path: Path, store: Store) -> None:
    prefix = tmp_path / "clicks"
    master = start(store, prefix)
    registry = CollectorRegistry()
    MasterMetrics(registry, master.status)
    land(prefix, "dt=2026-12-01/hour=13")
    land(prefix, "dt=2026-12-01/hour=14", id_space=999)
    land(prefix, "dt=2026-12-01/hour=15")
    write_end_marker(str(prefix))
    assert master.follower.step()
    doc = master.status()["stream"]
    assert doc["partitions"] == 1  # the stream stops at hour=14, hour=15 waits behind it
    assert doc["refused"].startswith("partition dt=2026-12-01/hour=14 has another schema")
    assert doc["end_marker"]
    assert not doc["ended"]
    families = parsed(exposition(registry))
    assert families["elasticps_master_stream_refused"][0][2] == 1
    assert families["elasticps_master_stream_partitions"][0][2] == 1
    assert not master.follower.step()  # still refused: nothing appended, nothing lost
    land(prefix, "dt=2026-12-01/hour=14")  # rewritten with the stream's schema
    assert master.follower.step()
    doc = master.status()["stream"]
    assert (doc["partitions"], doc["refused"], doc["ended"]) == (3, None, True)
    assert parsed(exposition(registry))["elasticps_master_stream_refused"][0][2] == 0


def test_a_backfill_starts_at_its_first_partition_and_the_end_marker_ends_the_job(
        tmp_path: Path, store: Store) -> None:
    prefix = tmp_path / "clicks"
    for day in ("2026-10-31", "2026-11-01", "2026-11-02"):
        land(prefix, f"dt={day}", rows=10)
    master = start(store, prefix, start="dt=2026-11-01")
    registry = CollectorRegistry()
    MasterMetrics(registry, master.status)
    assert master.follower.step()
    task = master.get("t1").task
    assert task.partition == "dt=2026-11-01"
    families = parsed(exposition(registry))
    assert families["elasticps_master_stream_partitions_waiting"][0][2] == 2
    # The lag is the age of the newest partition trained through: none yet, so no series.
    assert "elasticps_master_stream_lag_seconds" not in families
    task = master.finish("t1", task).task
    families = parsed(exposition(registry))
    lag = families["elasticps_master_stream_lag_seconds"][0][2]
    assert lag > 20 * 86_400  # dt=2026-11-01 is weeks old by any clock running this test
    assert families["elasticps_master_stream_partitions_waiting"][0][2] == 1
    write_end_marker(str(prefix))
    assert not master.follower.step()  # nothing new, but the stream is complete now
    assert master.status()["stream"]["ended"]
    done = master.finish("t1", task)
    assert done.outcome == master_pb2.GetTaskResponse.Outcome.ALL_DONE
    assert master.status()["state"] == "succeeded"



class HoldsAll:
    """One pserver shard whose checkpoint holds every batch the master expects (and once)."""

    def __init__(self, state: MasterState) -> None:
        self.state = state
        self.asked = 0

    def checkpoint(self, pass_id: int) -> list[pserver_pb2.CheckpointResponse]:
        self.asked += 1
        job = self.state.reconcile_job()
        assert job is not None
        return [pserver_pb2.CheckpointResponse(checkpoint_id=f"c{self.asked}", tasks=[
            pserver_pb2.AppliedTask(pass_id=pass_id, task_id=t, below=n, applications=n)
            for t, n in job[1].items()])]

    def prune_applied(self, upto_pass: int) -> int:
        raise AssertionError("a stream's one pass is never pruned")


def test_what_is_done_is_reconciled_while_the_stream_waits_and_sealed_only_at_its_end(
        tmp_path: Path, store: Store) -> None:
    """Reconciling mid-stream ends no pass and seals nothing (a pserver restarting with no
    checkpoint would refuse the stream's later pushes): only the end does."""
    prefix = tmp_path / "clicks"
    master = Master(store, "m1", dataclasses.replace(POLICY, reconcile=True))
    master.state.set_dataset(str(prefix), 1, 1, PLAN, StreamSpec())
    shards = HoldsAll(master.state)
    reconciler = Reconciler(master.state, shards, threading.Event())
    land(prefix, "dt=2026-12-01/hour=13", rows=10)
    assert master.follower.step()
    task = master.get("t1").task
    assert master.finish("t1", task).outcome is RETRY  # drained: it reconciles
    assert reconciler.step()
    assert load_accounting(store)[0]["complete"]
    assert store.get(SEALED_PASSES) is None  # the stream goes on
    assert master.status()["state"] == "running"
    assert not reconciler.step()  # nothing finished since: nothing to ask
    land(prefix, "dt=2026-12-01/hour=14", rows=10)
    write_end_marker(str(prefix))
    assert master.follower.step()
    task = master.get("t1").task
    assert master.finish("t1", task).outcome is RETRY  # the last reconciliation runs first
    assert reconciler.step()
    assert shards.asked == 2
    sealed = store.get(SEALED_PASSES)
    assert sealed is not None
    assert SealedPasses.decode(sealed.value, SEALED_PASSES).below == 1
    assert master.status()["state"] == "succeeded"


def test_a_trainers_finish_that_leaves_a_pass_to_reconcile_wakes_the_reconciler_at_once(
        tmp_path: Path, store: Store) -> None:
    """The reconciler polls only as a fallback: the finish that drains the pass wakes it, so
    a pass end waits for the pservers' checkpoints, not for the poll (here a minute), and the
    waiting trainer is told to ask again soon, not after its own backoff."""
    prefix = tmp_path / "clicks"
    master = Master(store, "m1", dataclasses.replace(POLICY, reconcile=True))
    master.state.set_dataset(str(prefix), 1, 1, PLAN, StreamSpec())
    shards = HoldsAll(master.state)
    stop = threading.Event()
    reconciler = Reconciler(master.state, shards, stop, poll_s=60.0)
    thread = threading.Thread(target=reconciler.run, daemon=True)
    thread.start()
    try:
        land(prefix, "dt=2026-12-01/hour=13", rows=10)
        write_end_marker(str(prefix))
        assert master.follower.step()
        task = master.get("t1").task
        answer = master.finish("t1", task)
        assert answer.outcome is RETRY
        assert answer.retry_after_s == RECONCILING_RETRY_S
        wait_for(lambda: master.status()["state"] == "succeeded", 10,
                 "the pass end reconciled without waiting for the reconciler's poll")
        assert shards.asked == 1
    finally:
        stop.set()
        master.state.reconcile_wanted.set()
        thread.join(10)
