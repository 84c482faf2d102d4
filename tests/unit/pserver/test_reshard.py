"""Resharding N -> M shards (pserver/reshard/split.py, lineage.py): what moves where, and
exactly-once for batches that a resharding cut (applied on some old shards only), against a
one-shard reference that received every batch exactly once. No RPC: the shards are ShardStates
and the "client" splits pushes by the same rules as PServerClient."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.checkpoint.snapshot import ShardSnapshot
from elasticps.pserver.reshard.lineage import intersection
from elasticps.pserver.reshard.split import reshard_snapshots
from elasticps.pserver.routing import dense_bounds
from elasticps.pserver.shard import BatchKey, ShardState

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
INIT = pserver_pb2.Initializer
DENSE_SIZE, DIM, IDS = 10, 2, 60


def _specs(opt: int = OPT.SGD, lr: float = 0.5) -> list[pserver_pb2.TableSpec]:
    return [
        SPEC(name="w", kind=SPEC.DENSE, shape=[DENSE_SIZE], optimizer=OPT(kind=opt, lr=lr)),
        SPEC(name="emb", kind=SPEC.SPARSE, dim=DIM, id_space=IDS,
             optimizer=OPT(kind=opt, lr=lr), initializer=INIT(kind=INIT.ZEROS)),
    ]


class Job:
    """``n`` shards, pushed to as PServerClient splits (dense by array_split, ids by id % n)."""

    def __init__(self, shards: list[ShardState]) -> None:
        self.shards = shards

    @classmethod
    def fresh(cls, n: int, opt: int = OPT.SGD) -> Job:
        shards = []
        for i in range(n):
            state = ShardState(i, n)
            state.declare(_specs(opt))
            start, stop = dense_bounds(DENSE_SIZE, i, n)
            state.init_dense({"w": np.arange(start, stop, dtype=np.float32)})
            shards.append(state)
        return cls(shards)

    @classmethod
    def resharded(cls, job: Job, m: int) -> Job:
        snaps = reshard_snapshots([s.snapshot()[0] for s in job.shards], m)
        shards = []
        for snap in snaps:
            state = ShardState(snap.shard, m)
            state.restore(snap, "test")
            shards.append(state)
        return cls(shards)

    def push(self, batch: tuple[int, int, int], grad: np.ndarray, ids: np.ndarray,
             rows: np.ndarray, only: Iterable[int] | None = None) -> list[bool]:
        n = len(self.shards)
        applied = []
        for i in (range(n) if only is None else only):
            mine = ids % n == i
            applied.append(self.shards[i].push(
                BatchKey(*batch), {"w": np.array_split(grad, n)[i]},
                {"emb": (ids[mine], rows[mine])}).applied)
        return applied

    def dense(self) -> np.ndarray:
        return np.concatenate([s.pull_dense()["w"] for s in self.shards])

    def rows(self) -> np.ndarray:
        ids = np.arange(IDS, dtype=np.int64)
        out = np.zeros((IDS, DIM), np.float32)
        n = len(self.shards)
        for i, shard in enumerate(self.shards):
            out[ids[ids % n == i]] = shard.pull_sparse("emb", ids[ids % n == i])
        return out


def _batch(k: int) -> tuple[tuple[int, int, int], np.ndarray, np.ndarray, np.ndarray]:
    """Batch k: small whole-number gradients (SGD with lr 0.5 then adds exactly, in any
    order), ids spread over every residue."""
    rng = np.random.default_rng(k)
    ids = rng.choice(IDS, size=12, replace=False).astype(np.int64)
    return ((0, k // 4, k % 4), rng.integers(-3, 4, DENSE_SIZE).astype(np.float32), ids,
            rng.integers(-3, 4, (12, DIM)).astype(np.float32))


def test_batches_a_resharding_cut_are_applied_once_per_row_and_position() -> None:
    reference = Job.fresh(1)
    for k in range(8):
        reference.push(*_batch(k))

    job = Job.fresh(2)
    job.push(*_batch(0))
    job.push(*_batch(1), only=[0])  # its trainer died after shard 0's push
    job.push(*_batch(2), only=[1])  # shard 0 lost it (restored an older checkpoint)
    job = Job.resharded(job, 3)
    # The reconciliation hands out 1 and 2 again (no new shard holds them whole); 0 is whole.
    assert [s.applied.contains(0, 0, 0) for s in job.shards] == [True] * 3
    assert not any(s.applied.contains(0, 0, 1) or s.applied.contains(0, 0, 2)
                   for s in job.shards)
    assert job.push(*_batch(0)) == [False] * 3  # a late duplicate changes nothing
    for k in (1, 2, 3):
        job.push(*_batch(k))
    job.push(*_batch(4), only=[2])  # cut again, by the next resharding
    job = Job.resharded(job, 2)
    for k in (1, 4, 5, 6, 7):
        job.push(*_batch(k))

    np.testing.assert_array_equal(job.dense(), reference.dense())
    np.testing.assert_array_equal(job.rows(), reference.rows())
    assert sum(s.partly_applied_before for s in job.shards) > 0


def test_without_the_earlier_layouts_the_cut_batches_would_count_twice() -> None:
    """The check above can fail: the same steps, minus what the new shards remember of the
    old layout, apply batch 1's shard-0 part twice."""
    job = Job.fresh(2)
    job.push(*_batch(1), only=[0])
    job = Job.resharded(job, 3)
    for shard in job.shards:
        shard.legacy = []
    job.push(*_batch(1))
    reference = Job.fresh(1)
    reference.push(*_batch(1))
    assert not np.array_equal(job.rows(), reference.rows())


def test_adam_state_and_every_row_survive_2_to_3_to_2() -> None:
    job = Job.fresh(2, OPT.ADAM)
    for k in range(6):
        job.push(*_batch(k))
    before = [s.snapshot()[0] for s in job.shards]
    back = reshard_snapshots(reshard_snapshots(before, 3), 2)
    for old, new in zip(before, back, strict=True):
        assert (new.shard, new.num_shards) == (old.shard, old.num_shards)
        np.testing.assert_array_equal(new.dense["w"].values, old.dense["w"].values)
        assert new.dense["w"].slots.keys() == old.dense["w"].slots.keys()
        for slot, values in old.dense["w"].slots.items():
            np.testing.assert_array_equal(new.dense["w"].slots[slot], values)
        o, n = old.sparse["emb"], new.sparse["emb"]
        order_o, order_n = np.argsort(o.ids), np.argsort(n.ids)
        np.testing.assert_array_equal(n.ids[order_n], o.ids[order_o])
        np.testing.assert_array_equal(n.values[order_n], o.values[order_o])
        np.testing.assert_array_equal(n.steps[order_n], o.steps[order_o])
        for slot, values in o.slots.items():
            np.testing.assert_array_equal(n.slots[slot][order_n], values[order_o])
        assert new.applied == old.applied  # every batch was whole on every shard
        assert [layout.num_shards for layout in new.legacy] == [2, 3]


def test_rows_land_on_their_new_shard_and_counters_keep_their_sums() -> None:
    job = Job.fresh(2)
    for k in range(5):
        job.push(*_batch(k))
    old = [s.snapshot()[0] for s in job.shards]
    new = reshard_snapshots(old, 3)
    for snap in new:
        assert (snap.sparse["emb"].ids % 3 == snap.shard).all()
    assert sum(s.sparse["emb"].ids.size for s in new) == sum(s.sparse["emb"].ids.size
                                                              for s in old)
    admitted = "sparse.emb.admitted"
    assert sum(s.counters.get(admitted, 0) for s in new) == sum(s.counters[admitted]
                                                                for s in old)
    assert [s.counters["pushes"] for s in new] == [5, 5, 5]


def test_the_applied_intersection_counts_a_pruned_pass_as_held() -> None:
    a, b = AppliedSet(), AppliedSet()
    for seq in range(5):
        a.add(1, 7, seq)
    for seq in (0, 1, 3):
        b.add(1, 7, seq)
    a.add(0, 2, 0)  # pass 0: pruned on b, so b holds every batch of it
    b.prune(1)
    both = intersection([a, b])
    assert [both.contains(1, 7, q) for q in range(6)] == [True, True, False, True, False, False]
    assert both.contains(0, 2, 0)
    assert not both.contains(0, 2, 1)
    assert both.floor == 0


def _snap(shard: int, n: int, job: Job | None = None) -> ShardSnapshot:
    return (job or Job.fresh(n)).shards[shard].snapshot()[0]


@pytest.mark.parametrize(("old", "message"), [
    ([], "got none"),
    ([_snap(0, 2)], "shards 0..1 of one layout of 2"),
    ([_snap(0, 2), _snap(0, 2)], "shards 0..1"),
    ([_snap(0, 2), _snap(1, 3)], "shards 0..1"),
])
def test_a_resharding_needs_every_shard_of_one_layout(old: list[ShardSnapshot],
                                                      message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        reshard_snapshots(old, 3)


def test_a_resharding_refuses_deltas_and_mismatched_tables() -> None:
    job = Job.fresh(2)
    delta = job.shards[1].snapshot(delta=True)[0]
    delta.delta = True
    with pytest.raises(InvalidArgumentError, match="not deltas"):
        reshard_snapshots([_snap(0, 2, job), delta], 3)
    other = ShardState(1, 2)
    other.declare(_specs()[:1])
    with pytest.raises(InvalidArgumentError, match="different tables"):
        reshard_snapshots([_snap(0, 2, job), other.snapshot()[0]], 3)
    with pytest.raises(InvalidArgumentError, match="at least 1"):
        reshard_snapshots([_snap(0, 2, job), _snap(1, 2, job)], 0)


@pytest.mark.parametrize("evict", [pserver_pb2.SparsePolicy.SCORE, pserver_pb2.SparsePolicy.LRU])
def test_eviction_bookkeeping_moves_with_its_rows(evict: int) -> None:
    """Per-row scores (SCORE) or last push and count (LRU) follow each row to its new shard."""
    shards = []
    for i in range(2):
        state = ShardState(i, 2)
        spec = _specs()[1]
        spec.policy.CopyFrom(pserver_pb2.SparsePolicy(evict=evict))  # type: ignore[arg-type]
        state.declare([spec])
        state.init_dense({})
        shards.append(state)
    for k in range(6):
        _, _, ids, rows = _batch(k)
        for i, state in enumerate(shards):
            mine = ids % 2 == i
            counts = {"emb": (np.full(mine.sum(), 2.0, np.float32),
                              (ids[mine] % 3 == 0).astype(np.float32))}
            state.push(BatchKey(0, k, 0), {}, {"emb": (ids[mine], rows[mine])},
                       counts=counts if evict == pserver_pb2.SparsePolicy.SCORE else None)
    old = [s.snapshot()[0] for s in shards]

    def by_id(snaps: list[ShardSnapshot]) -> dict[int, tuple[float, ...]]:
        out = {}
        for snap in snaps:
            state = snap.sparse["emb"]
            book = state.bookkeeping
            assert book is not None
            for r, row_id in enumerate(state.ids.tolist()):
                if book.scores is not None:
                    out[row_id] = (float(book.scores.shows[r]), float(book.scores.clicks[r]),
                                   int(book.scores.score_pass[r]))
                else:
                    out[row_id] = (int(book.touched_pass[r]), float(book.pushed_unix[r]),
                                   int(book.hits[r]))
        return out

    book = old[0].sparse["emb"].bookkeeping
    assert book is not None
    assert (book.scores is not None) == (evict == pserver_pb2.SparsePolicy.SCORE)
    new = reshard_snapshots(old, 3)
    assert by_id(new) == by_id(old)
    assert len(by_id(old)) > 0
