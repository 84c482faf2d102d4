"""Geo windows through faults, with the real parts and no sockets: the trainer's task loop and
``GeoParams`` over geo-mode ``ShardState`` shards (routed as the client routes), the master's
``TaskQueue`` with pass-end reconciliation by ``reconcile``, checkpoints as shard snapshots,
restores, and resharding by ``reshard_snapshots``.

Every batch's gradient counts itself: batch ``b`` adds exactly 1 to column ``b`` of each row it
touches and of every dense position, so after the pass each (batch, row) and (batch, position)
cell must read 1: a 0 is a lost batch, a 2 a double one, however the deltas were windowed.
Liveness: once the faults are over, reconciliation must end the pass within a bounded number
of recovery rounds (one recovery suffices for any faults; the bound allows one more).

Directed schedules: a trainer that leaves mid-window flushes part of it, a pserver restores a
checkpoint taken before that flush, then the job is resharded (a window that an old shard
applied in part); a ``geo_steps`` that does not divide the task, with two restores, so that
different shards miss different parts of later windows. Hypothesis draws further schedules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticps.master.reconcile_policy import HeldSeqs, ShardReport, reconcile
from elasticps.master.task_queue import QueuePolicy
from elasticps.proto import common_pb2, master_pb2, pserver_pb2
from elasticps.pserver.checkpoint.snapshot import ShardSnapshot
from elasticps.pserver.reshard.split import reshard_snapshots
from elasticps.pserver.routing import dense_bounds, dense_parts, route_ids
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.trainer.geo import GeoParams
from elasticps.trainer.task_batches import TaskBatch, task_batches
from elasticps.trainer.task_loop import LoopState, TaskLoop, TaskWorker
from tests.unit.trainer.queue_master import QueueMaster, row_batches

BATCH_SIZE = 2
TASK_ROWS = [20, 20]  # two tasks of 10 batches
BATCHES = sum(-(-rows // BATCH_SIZE) for rows in TASK_ROWS)
IDS, ROWS_PER_BATCH, DENSE_ROWS = 24, 6, 3
LEASE = 10.0
RECOVERY_BOUND = 2

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
SPECS = [
    SPEC(name="w", kind=SPEC.DENSE, shape=[DENSE_ROWS, BATCHES],
         optimizer=OPT(kind=OPT.SGD, lr=1.0)),
    SPEC(name="emb", kind=SPEC.SPARSE, dim=BATCHES, id_space=IDS,
         optimizer=OPT(kind=OPT.SGD, lr=1.0),
         initializer=pserver_pb2.Initializer(kind=pserver_pb2.Initializer.ZEROS)),
]


def column(task_id: int, seq: int) -> int:
    return task_id * 10 + seq


def touched(task_id: int, seq: int) -> np.ndarray:
    rng = np.random.default_rng(column(task_id, seq))
    return np.sort(rng.choice(IDS, ROWS_PER_BATCH, replace=False)).astype(np.int64)


class TrainerKilledError(Exception):
    """The trainer process was SIGKILLed: nothing after this point of it runs."""


class Shards:
    """The job's pservers: geo shards, each with its newest checkpoint, routed as PServerClient
    routes (routing.py)."""

    def __init__(self, n: int) -> None:
        self.shards = [self._fresh(i, n) for i in range(n)]
        self.checkpoints: list[ShardSnapshot] = [s.snapshot()[0] for s in self.shards]

    @staticmethod
    def _fresh(i: int, n: int) -> ShardState:
        shard = ShardState(i, n, mode="geo")
        shard.declare(SPECS)
        start, stop = dense_bounds(DENSE_ROWS * BATCHES, i, n)
        shard.init_dense({"w": np.zeros(stop - start, np.float32)})
        return shard

    @property
    def n(self) -> int:
        return len(self.shards)

    def checkpoint(self, i: int) -> None:
        self.checkpoints[i] = self.shards[i].snapshot()[0]

    def restore(self, i: int) -> None:
        """Pserver i was SIGKILLed and came back from its newest checkpoint."""
        shard = ShardState(i, self.n, mode="geo")
        shard.restore(self.checkpoints[i], "checkpoint")  # takes the snapshot's arrays
        self.shards[i] = shard
        self.checkpoints[i] = shard.snapshot()[0]  # the same state, for the next restore

    def reshard(self, m: int) -> None:
        """Every pserver stops and checkpoints; the checkpoints are re-split onto m shards."""
        new = reshard_snapshots([s.snapshot()[0] for s in self.shards], m)
        self.shards = []
        for snap in new:
            shard = ShardState(snap.shard, m, mode="geo")
            shard.restore(snap, "reshard")
            self.shards.append(shard)
        self.checkpoints = [s.snapshot()[0] for s in self.shards]

    def reports(self, pass_id: int) -> list[ShardReport]:
        reports = []
        for shard in self.shards:
            held = {task: HeldSeqs(below, frozenset(extra), shard.applied.applications(p, task))
                    for p, task, below, extra in shard.applied.tasks() if p == pass_id}
            reports.append(ShardReport(shard.shard, held))
        return reports

    def cells(self) -> tuple[np.ndarray, np.ndarray]:
        """(dense [DENSE_ROWS, BATCHES], rows [IDS, BATCHES]): applications per cell."""
        dense = np.concatenate([s.pull_dense(["w"])["w"] for s in self.shards])
        ids = np.arange(IDS, dtype=np.int64)
        rows = np.zeros((IDS, BATCHES), np.float32)
        owner = route_ids(ids, self.n)
        for i, shard in enumerate(self.shards):
            rows[ids[owner == i]] = shard.pull_sparse("emb", ids[owner == i])
        return dense.reshape(DENSE_ROWS, BATCHES), rows


class Client:
    """What GeoParams needs of PServerClient, over :class:`Shards`; ``die_after`` shards of
    the next delta push, the trainer dies (its push reached only those shards)."""

    def __init__(self, job: Shards) -> None:
        self.job = job
        self.die_after: int | None = None

    def specs(self) -> dict[str, pserver_pb2.TableSpec]:
        return {spec.name: spec for spec in SPECS}

    def pull_dense(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        flat = np.concatenate([s.pull_dense(["w"])["w"] for s in self.job.shards])
        return {"w": flat.reshape(DENSE_ROWS, BATCHES)}

    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray:
        owner = route_ids(ids, self.job.n)
        out = np.zeros((ids.shape[0], BATCHES), np.float32)
        for i, shard in enumerate(self.job.shards):
            out[owner == i] = shard.pull_sparse(table, ids[owner == i])
        return out

    def push_delta(self, refs: list[common_pb2.BatchRef], dense: Mapping[str, np.ndarray],
                   sparse: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> None:
        keys = [BatchKey(r.pass_id, r.task_id, r.seq) for r in refs]
        parts = dense_parts(np.ascontiguousarray(dense["w"]).reshape(-1), self.job.n)
        for i, shard in enumerate(self.job.shards):
            if self.die_after is not None and i >= self.die_after:
                raise TrainerKilledError
            mine = {name: (ids[route_ids(ids, self.job.n) == i],
                           rows[route_ids(ids, self.job.n) == i])
                    for name, (ids, rows) in sparse.items()}
            shard.push_delta(keys, {"w": parts[i]}, mine)


@dataclass
class GeoWorker(TaskWorker):
    """The step worker's geo path: pull the window's copy, step it, push deltas on flush.
    ``plan`` maps the number of batches trained so far to a fault to raise right after."""

    geo: GeoParams
    client: Client
    shards: Shards
    plan: dict[int, str] = field(default_factory=dict)
    loop: TaskLoop | None = None
    trained: int = 0

    def train(self, item: TaskBatch, next_batch: Any | None) -> None:
        ids = touched(item.task_id, item.seq)
        col = column(item.task_id, item.seq)
        self.geo.pull_dense(["w"])
        self.geo.pull_sparse("emb", ids)
        dense = np.zeros((DENSE_ROWS, BATCHES), np.float32)
        dense[:, col] = -1.0  # SGD with lr 1 adds exactly 1 to the batch's column
        rows = np.zeros((ids.shape[0], BATCHES), np.float32)
        rows[:, col] = -1.0
        ref = common_pb2.BatchRef(pass_id=item.pass_id, task_id=item.task_id, seq=item.seq)
        self.geo.push(ref, {"w": dense}, {"emb": (ids, rows)})
        self.trained += 1
        fault = self.plan.pop(self.trained, None)
        if fault == "kill":  # SIGKILL: the open window is lost
            raise TrainerKilledError
        if fault == "leave" and self.loop is not None:  # scale-down: hands its task back
            self.loop.stop.set()
        if fault is not None and fault.startswith("kill-mid-push:"):
            self.client.die_after = int(fault.split(":")[1])
        if fault is not None and fault.startswith("checkpoint:"):  # a pserver checkpoints
            self.shards.checkpoint(int(fault.split(":")[1]))

    def flush(self) -> None:
        self.geo.flush()

    def abandon(self) -> None:
        self.geo.flush()  # a leaving trainer flushes what it trained (a partial window)


class Job:
    """One geo job: the queue, the shards, and trainers run one at a time."""

    def __init__(self, pservers: int, steps: int) -> None:
        self.master = QueueMaster(TASK_ROWS, policy=QueuePolicy(
            reconcile=True, task_lease=LEASE, max_failures=100, max_failed_fraction=1.0),
            batch_size=BATCH_SIZE)
        self.shards = Shards(pservers)
        self.steps = steps
        self.recoveries: list[dict[int, tuple[int, ...]]] = []
        self._names = (f"t{i}" for i in range(1000))

    def trainer(self, plan: dict[int, str] | None = None, report_every: int = 1000
                ) -> tuple[TaskLoop, GeoWorker]:
        client = Client(self.shards)
        worker = GeoWorker(GeoParams(client, self.steps), client, self.shards, dict(plan or {}))

        def batches(task: master_pb2.Task) -> Iterator[TaskBatch]:
            return task_batches(task, BATCH_SIZE,
                                lambda c, s: row_batches(c, s, batch_size=BATCH_SIZE))

        name = next(self._names)
        loop = TaskLoop(self.master.client(name), batches, worker, trainer_name=name,
                        report_every=report_every)
        worker.loop = loop
        return loop, worker

    def run(self, plan: dict[int, str] | None = None, report_every: int = 1000) -> str:
        """Run a trainer until it finishes, is told to wait, leaves or is killed."""
        loop, _ = self.trainer(plan, report_every)
        for _ in range(100):
            try:
                state = loop.step()
            except TrainerKilledError:
                self._expire_leases()
                return "killed"
            if state is not LoopState.RUNNING:
                self._expire_leases()
                return state.value
            if self.master.queue.reconciling or self.master.queue.finished:
                return "waits"
        raise AssertionError("a trainer ran too long")

    def _expire_leases(self) -> None:
        self.master.now += LEASE + 1
        self.master.queue.expire_leases(self.master.now)

    def finish_pass(self) -> None:
        """Train and reconcile, without faults, until the pass ends (bounded)."""
        for _ in range(RECOVERY_BOUND + 1):
            self.run()
            queue = self.master.queue
            if queue.finished:
                return
            assert queue.reconciling, "the pass should be reconciling"
            missing = reconcile(0, queue.expected_batches(), self.shards.reports(0)).missing
            queue.reconciled(0, missing, self.master.now)
            if queue.finished:
                return
            assert not queue.failed_reason, queue.failed_reason
            self.recoveries.append(dict(missing))
        raise AssertionError(f"the pass did not end within {RECOVERY_BOUND} recovery rounds "
                             f"after the faults: missing each round {self.recoveries}")

    def assert_exactly_once(self) -> None:
        dense, rows = self.shards.cells()
        want_rows = np.zeros((IDS, BATCHES), np.float32)
        for task_id, rows_of_task in enumerate(TASK_ROWS):
            for seq in range(-(-rows_of_task // BATCH_SIZE)):
                want_rows[touched(task_id, seq), column(task_id, seq)] = 1.0
        bad = np.argwhere(rows != want_rows)
        assert not bad.size, "(row, batch) cells applied other than once: " + ", ".join(
            f"row {r} batch {b}: {rows[r, b]:g}" for r, b in bad[:8].tolist())
        assert np.array_equal(dense, np.ones_like(dense)), (
            f"dense cells applied other than once: {np.argwhere(dense != 1)[:8].tolist()}")


def test_a_partial_window_cut_by_a_restore_and_a_reshard_is_applied_once() -> None:
    job = Job(pservers=2, steps=10)
    job.shards.checkpoint(1)  # pserver 1 publishes a checkpoint
    assert job.run({4: "leave"}) == "stopped"  # leaves after 4 batches: flushes them
    job.shards.restore(1)  # SIGKILLed: back to the checkpoint, without those 4
    job.shards.reshard(3)  # then the job goes to 3 pservers
    job.finish_pass()
    job.assert_exactly_once()
    assert sum(s.windows_refused_partly_applied for s in job.shards.shards) > 0


def test_windows_that_do_not_divide_the_task_survive_two_restores() -> None:
    job = Job(pservers=2, steps=3)
    assert job.run({5: "leave"}) == "stopped"  # windows [0 1 2] and the partial [3 4]
    job.shards.restore(0)  # shard 0 forgets all of them
    job.shards.checkpoint(1)
    assert job.run({7: "kill-mid-push:1"}) == "killed"  # its next window reaches shard 0 only
    job.shards.restore(1)
    job.finish_pass()
    job.assert_exactly_once()


def test_recovery_ends_when_the_shards_miss_interleaved_parts_of_windows() -> None:
    """Shard 0 misses seqs 0-4 and holds 5-9, shard 1 the reverse: recovered in windows of 3,
    [3, 4, 5] would be refused by both shards, round after round."""
    job = Job(pservers=2, steps=3)
    # Windows [0 1 2], then [3 4] flushed by the progress report at 5 batches, then [5 6 7];
    # shard 1 checkpoints between [3 4] and [5 6 7]; killed with [8] open.
    assert job.run({6: "checkpoint:1", 9: "kill"}, report_every=5) == "killed"
    job.shards.restore(0)  # back to its empty first checkpoint
    # The next trainer does task 1, then task 0 from seq 5: [5 6 7] and [8 9] on both shards.
    assert job.run() == "waits"
    job.shards.restore(1)  # back to its checkpoint: holds seqs 0-4 of task 0 only
    held = [[s.applied.contains(0, 0, q) for q in range(10)] for s in job.shards.shards]
    assert held == [[False] * 5 + [True] * 5, [True] * 5 + [False] * 5]
    job.finish_pass()
    job.assert_exactly_once()
    assert len(job.recoveries) == 1


def test_a_kill_mid_push_and_resharding_down_are_applied_once() -> None:
    job = Job(pservers=3, steps=4)
    job.shards.checkpoint(2)
    assert job.run({6: "kill-mid-push:2"}) == "killed"  # window [4..7] on shards 0, 1 only
    job.shards.restore(2)
    job.shards.reshard(2)
    job.finish_pass()
    job.assert_exactly_once()


FAULTS = st.sampled_from(["leave", "kill", "kill-mid-push:1", "kill-mid-push:2"])
SHARD_EVENTS = st.sampled_from(["checkpoint", "restore", "reshard"])


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.integers(1, 6), pservers=st.integers(1, 3),
       rounds=st.lists(st.tuples(st.integers(1, 12), FAULTS, SHARD_EVENTS,
                                 st.integers(0, 2), st.integers(1, 3)), max_size=4))
def test_any_schedule_of_faults_applies_every_batch_once(
        steps: int, pservers: int, rounds: list[tuple[int, str, str, int, int]]) -> None:
    job = Job(pservers=pservers, steps=steps)
    for after, fault, event, shard, target in rounds:
        job.run({after: fault})
        i = shard % job.shards.n
        if event == "checkpoint":
            job.shards.checkpoint(i)
        elif event == "restore":
            job.shards.restore(i)
        elif target != job.shards.n:
            job.shards.reshard(target)
    job.finish_pass()
    job.assert_exactly_once()


@pytest.mark.parametrize("steps", [1, 3, 10])
def test_without_faults_the_pass_ends_with_no_recovery(steps: int) -> None:
    job = Job(pservers=2, steps=steps)
    job.finish_pass()
    job.assert_exactly_once()
    assert job.recoveries == []
