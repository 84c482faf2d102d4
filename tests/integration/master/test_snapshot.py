"""The master's snapshot in a real store (etcd and embedded): round trip, parts, fencing."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from elasticps.data.batch_plan import BatchPlan
from elasticps.errors import NotLeaderError
from elasticps.master.snapshot import DatasetRecord, QueueSnapshot
from elasticps.master.task_queue import Delta, Outcome, QueuePolicy, TaskQueue
from elasticps.store import Store, open_store
from elasticps.store.api import Op
from elasticps.store.election import Election
from elasticps.store.keys import MASTER_STATE_DATASET, MASTER_STATE_TASK_PREFIX
from tests.integration.master.helpers import store_url_for, synthetic_chunks

POLICY = QueuePolicy(max_failures=2, task_lease=5.0, max_failed_fraction=0.5)
PLAN = BatchPlan(64, shuffle_seed=7, features='{"id_space":1009}')


@pytest.fixture(params=["etcd", "embedded"])
def store(request: pytest.FixtureRequest, tmp_path: Path, job_name: str) -> Iterator[Store]:
    handle = open_store(store_url_for(request, tmp_path), job_name)
    yield handle
    handle.close()


def leader(store: Store) -> tuple[Election, QueueSnapshot]:
    election = Election(store, "master/election", b"test", ttl=5)
    assert election.campaign(timeout=10)

    def commit(ops: Sequence[Op]) -> None:
        election.leader_txn(ops)

    # Small parts and txns so the test crosses part and txn boundaries.
    return election, QueueSnapshot(store, commit, max_ops=3, part_bytes=2000)


def persist(snapshot: QueueSnapshot, queue: TaskQueue, delta: Delta,
            with_meta: Sequence[Op] = ()) -> int:
    """Store ``delta`` the way the master's service does (``MasterState.stage``, then one
    ``QueueSnapshot.write`` per transaction); the bytes written."""
    before = snapshot.bytes_written
    for ops in snapshot.delta_transactions(queue, delta, with_meta):
        snapshot.write(ops)
    return snapshot.bytes_written - before


def test_state_rebuilt_from_the_store_equals_the_state_before(store: Store) -> None:
    election, snapshot = leader(store)
    chunks = synthetic_chunks(403)
    dataset = DatasetRecord("file:///data/ctr", 3, 3, tuple(chunks), PLAN)
    queue = dataset.new_queue(POLICY)
    snapshot.write_dataset(dataset, queue)
    assert len(store.get_prefix("master/state/chunks/")) > 1  # written in several parts
    now = 0.0
    # Pass 0 entirely, then part of pass 1 with every kind of change.
    for _ in range(queue.num_tasks):
        result, delta = queue.get_task("a", 0, now)
        persist(snapshot, queue, delta)
        assert result.task is not None
        _, delta = queue.task_finished("a", result.task.task_id, result.task.epoch, 300, now)
        persist(snapshot, queue, delta)
    assert queue.pass_id == 1
    taken = []
    for trainer in ("a", "a2", "b", "gone", "c", "d"):
        result, delta = queue.get_task(trainer, 1, now)
        persist(snapshot, queue, delta)
        assert result.outcome is Outcome.TASK
        assert result.task is not None
        taken.append((trainer, result.task))
    _, delta = queue.task_finished("a", taken[0][1].task_id, taken[0][1].epoch, 300, now)
    persist(snapshot, queue, delta)
    _, delta = queue.report_progress("a2", taken[1][1].task_id, taken[1][1].epoch, 120, now)
    persist(snapshot, queue, delta)
    _, delta = queue.task_failed("b", taken[2][1].task_id, taken[2][1].epoch, "bad", now)
    persist(snapshot, queue, delta)
    for trainer, task in taken[4:]:  # twice failed: FAILED in pass 1
        _, delta = queue.task_failed(trainer, task.task_id, task.epoch, "corrupt", now)
        persist(snapshot, queue, delta)
        result, delta = queue.get_task(trainer, 1, now)
        persist(snapshot, queue, delta)
    _, delta = queue.request_save_model("a", 60.0, now)
    persist(snapshot, queue, delta)

    loaded = QueueSnapshot(store, lambda ops: None).load(POLICY, {"a", "a2", "b", "c", "d"},
                                                         now=50.0)
    assert loaded is not None
    assert loaded.dataset == dataset
    rebuilt = loaded.queue
    gone_task = taken[3][1].task_id
    assert loaded.delta.tasks == frozenset([gone_task])  # the vanished trainer's task
    before = queue.meta_record()
    assert rebuilt.meta_record() == replace(before, failures_total=before.failures_total + 1)
    assert rebuilt.failure_log == queue.failure_log
    for task_id in range(queue.num_tasks):
        if task_id != gone_task:
            assert rebuilt.task_record(task_id) == queue.task_record(task_id), task_id
            assert rebuilt.task_view(task_id) == queue.task_view(task_id)
    assert rebuilt.task_record(gone_task).failures == queue.task_record(gone_task).failures + 1
    assert rebuilt.counts()["pending"] == queue.counts()["pending"] - 1
    election.resign()


def test_a_deposed_master_cannot_write_the_snapshot(store: Store) -> None:
    election, snapshot = leader(store)
    chunks = synthetic_chunks(8)
    dataset = DatasetRecord("u", 2, 1, tuple(chunks), PLAN)
    queue = dataset.new_queue(POLICY)
    snapshot.write_dataset(dataset, queue)
    election.lease.revoke()  # the lock vanishes, as when the lease expires
    rival = Election(store, "master/election", b"rival", ttl=5)
    assert rival.campaign(timeout=10)
    _, delta = queue.get_task("a", 0, 0.0)
    with pytest.raises(NotLeaderError):
        persist(snapshot, queue, delta)
    assert store.get_prefix(MASTER_STATE_TASK_PREFIX) == []
    assert store.get(MASTER_STATE_DATASET) is not None
    rival.resign()


def test_a_dataset_write_cut_before_its_header_loads_as_no_dataset(store: Store) -> None:
    election, snapshot = leader(store)
    chunks = synthetic_chunks(50)
    dataset = DatasetRecord("u", 1, 1, tuple(chunks), PLAN)
    queue = dataset.new_queue(POLICY)
    snapshot.write_dataset(dataset, queue)
    store.delete(MASTER_STATE_DATASET)  # as if the master died after the parts, before the header
    assert QueueSnapshot(store, lambda ops: None).load(POLICY, set(), 0.0) is None
    election.resign()


class MasterKilledError(Exception):
    """The master dies between two transactions of one delta."""


def test_a_reconciliation_cut_between_transactions_leaves_its_recovery_to_do(
        store: Store) -> None:
    """Hole 4: a reconciliation's delta (recovery dispatches + the meta) is bigger than one
    transaction; the master dies after the dispatches are written, before the meta that ends
    the reconciling phase. The next master must hand the dispatches out, not end the pass."""
    election, snapshot = leader(store)  # 3 ops per transaction
    chunks = synthetic_chunks(6)
    dataset = DatasetRecord("u", 1, 1, tuple(chunks), PLAN)
    policy = replace(POLICY, reconcile=True)
    queue = dataset.new_queue(policy)
    snapshot.write_dataset(dataset, queue)
    for task_id in range(queue.num_tasks):
        result, delta = queue.get_task(f"t{task_id}", 0, 0.0)
        persist(snapshot, queue, delta)
        assert result.task is not None
        _, delta = queue.task_finished(f"t{task_id}", task_id, result.task.epoch, 100, 0.0)
        persist(snapshot, queue, delta)
    assert queue.reconciling
    missing = {0: (0, 1), 1: (1,), 2: (0,)}
    delta = queue.reconciled(0, missing, 1.0)  # 3 task records + the meta: 2 transactions
    commits: list[Sequence[Op]] = []

    def dies_after_one(ops: Sequence[Op]) -> None:
        if commits:
            raise MasterKilledError
        commits.append(ops)
        snapshot.commit(ops)

    with pytest.raises(MasterKilledError):
        persist(QueueSnapshot(store, dies_after_one, max_ops=3), queue, delta)
    written = sorted(int(op.key.rsplit("/", 1)[1]) for op in commits[0]
                     if op.key.startswith(MASTER_STATE_TASK_PREFIX))
    assert written  # some recovery dispatches made it, the meta did not
    loaded = QueueSnapshot(store, lambda ops: None).load(policy, set(), now=2.0)
    assert loaded is not None
    rebuilt = loaded.queue
    assert rebuilt.recovering() == written
    assert not rebuilt.reconciling  # its reconciliation is over; its recovery is not
    # Every DONE task is held now, so a reconciliation would find nothing missing; it must not
    # end the pass while recovery dispatches wait.
    rebuilt.reconciled(0, {}, 3.0)
    assert (rebuilt.pass_id, rebuilt.finished) == (0, False)
    handed = [rebuilt.get_task(f"n{i}", 0, 3.0)[0].task for i in range(len(written))]
    assert [(v.task_id, v.only_batches) for v in handed if v is not None] == [
        (t, missing[t]) for t in written]
    election.resign()


def test_a_pass_ends_in_one_transaction_with_its_accounting(store: Store) -> None:
    election, snapshot = leader(store)
    chunks = synthetic_chunks(2)
    dataset = DatasetRecord("u", 1, 1, tuple(chunks), PLAN)
    queue = dataset.new_queue(replace(POLICY, reconcile=True))
    snapshot.write_dataset(dataset, queue)
    for task_id in range(2):
        result, delta = queue.get_task("t", 0, 0.0)
        assert result.task is not None
        _, more = queue.task_finished("t", task_id, result.task.epoch, 100, 0.0)
        persist(snapshot, queue, delta | more)
    txns = snapshot.txns
    written = persist(snapshot, queue, queue.reconciled(0, {}, 1.0),
                      [QueueSnapshot.accounting_op(0, {"complete": True})])
    assert written > 0
    assert snapshot.txns == txns + 1
    assert queue.finished
    assert store.get("master/state/accounting/000000") is not None
    election.resign()
