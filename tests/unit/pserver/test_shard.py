"""Tables, sharding, validation and exactly-once bookkeeping of one shard (no RPC)."""

from __future__ import annotations

import hashlib
import threading

import numpy as np
import pytest

from elasticps.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.dense_table import initial_values
from elasticps.pserver.index import HashIndex
from elasticps.pserver.routing import dense_bounds
from elasticps.pserver.shard import BatchKey, ShardState

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
INIT = pserver_pb2.Initializer


def _specs(id_space: int = 1000, opt: int = OPT.SGD) -> list[pserver_pb2.TableSpec]:
    return [
        SPEC(name="w", kind=SPEC.DENSE, shape=[3, 4], optimizer=OPT(kind=opt, lr=0.1)),
        SPEC(name="emb", kind=SPEC.SPARSE, dim=4, id_space=id_space,
             optimizer=OPT(kind=opt, lr=0.1),
             initializer=INIT(kind=INIT.UNIFORM, scale=0.1, seed=3)),
    ]


def _shard(shard: int = 0, n: int = 1, **kw: int) -> ShardState:
    state = ShardState(shard, n)
    state.declare(_specs(**kw))
    state.init_dense({"w": np.arange(12, dtype=np.float32)[slice(*dense_bounds(12, shard, n))]})
    return state


def _everything(state: ShardState, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return state.pull_dense()["w"], state.pull_sparse("emb", ids)


def test_sharding_covers_every_id_exactly_once() -> None:
    n, id_space = 3, 1000
    shards = [_shard(i, n, id_space=id_space) for i in range(n)]
    ids = np.arange(id_space, dtype=np.int64)
    owners = np.zeros(id_space, dtype=np.int64)
    for i, shard in enumerate(shards):
        mine = ids[ids % n == i]
        shard.pull_sparse("emb", mine)
        owners[mine] += 1
        other = ids[ids % n != i][:1]
        with pytest.raises(InvalidArgumentError, match="belongs to shard"):
            shard.pull_sparse("emb", other)
    assert (owners == 1).all()
    for i, shard in enumerate(shards):
        mine = ids[ids % n == i]
        shard.push(BatchKey(0, 0, 0), {}, {"emb": (mine, np.zeros((mine.size, 4), np.float32))})
    assert sum(s.tables["emb"].rows for s in shards) == id_space
    # Dense slices tile the flat parameter with no gap or overlap, like np.array_split.
    flat = np.arange(12, dtype=np.float32)
    got = np.concatenate([s.pull_dense()["w"] for s in shards])
    np.testing.assert_array_equal(got, flat)
    assert [len(p) for p in np.array_split(flat, n)] == [s.tables["w"].rows for s in shards]


@pytest.mark.parametrize(("kind", "digest"), [
    (INIT.UNIFORM, "cecd0db76e9935301f20e4ac0a822af35d4002baeadb47c9f9f4a855bd3e3a4b"),
    (INIT.NORMAL, "8b74a054ffb298c80856d13cb40f5a1f45bbba76c1ba3c24ce91fb7550f39012"),
])
def test_initial_rows_keep_their_bits_across_versions(kind: int, digest: str) -> None:
    """Start values are part of what a job computes: a checkpoint resumed by a newer version,
    or a run compared with an older one, meets the same rows, bit for bit."""
    values = initial_values(INIT(kind=kind, scale=0.01, seed=7),
                            np.arange(0, 70_000, 7, dtype=np.int64), 10)
    assert hashlib.sha256(values.tobytes()).hexdigest() == digest


def test_initial_rows_are_a_pure_function_of_seed_and_id() -> None:
    ids = np.array([0, 5, 999_999, 2**40], dtype=np.int64)
    init = INIT(kind=INIT.NORMAL, scale=1.0, seed=9)
    a = initial_values(init, ids, 8)
    b = initial_values(init, ids[::-1].copy(), 8)[::-1]
    np.testing.assert_array_equal(a, b)
    assert abs(float(initial_values(init, np.arange(20000), 4).std()) - 1.0) < 0.02
    other_seed = initial_values(INIT(kind=INIT.NORMAL, scale=1.0, seed=10), ids, 8)
    assert not np.allclose(a, other_seed)
    # The same id starts with the same row whichever shard count holds it.
    one = _shard(0, 1, id_space=0).pull_sparse("emb", np.array([7], dtype=np.int64))
    three = _shard(1, 3, id_space=0).pull_sparse("emb", np.array([7], dtype=np.int64))
    np.testing.assert_array_equal(one, three)


def test_hash_index_grows_and_finds_every_key() -> None:
    index = HashIndex(16)
    rng = np.random.default_rng(1)
    keys = np.unique(rng.integers(0, 2**62, 50_000))
    for part in np.array_split(np.arange(keys.size), 7):
        index.insert(keys[part], part.astype(np.int64))
    np.testing.assert_array_equal(index.lookup(keys), np.arange(keys.size))
    absent = np.setdiff1d(rng.integers(0, 2**62, 1000), keys)
    assert (index.lookup(absent) == -1).all()


@pytest.mark.parametrize("id_space", [1000, 0], ids=["direct", "hash"])
def test_a_pull_never_grows_a_table(id_space: int) -> None:
    state = _shard(id_space=id_space)
    ids = np.array([7, 3, 7, 999, 0], dtype=np.int64)
    nbytes = state.tables["emb"].nbytes
    pulled = state.pull_sparse("emb", ids)
    assert (state.tables["emb"].rows, state.tables["emb"].nbytes) == (0, nbytes)
    np.testing.assert_array_equal(pulled[0], pulled[2])
    # The value a pull reads is the one a push starts from: SGD moves it by exactly -lr * g.
    grad = np.full((2, 4), 0.5, np.float32)
    state.push(BatchKey(0, 0, 0), {}, {"emb": (np.array([3, 999]), grad)})
    assert state.tables["emb"].rows == 2
    after = state.pull_sparse("emb", ids)
    np.testing.assert_allclose(after[[1, 3]], pulled[[1, 3]] - 0.1 * 0.5, rtol=1e-6)
    np.testing.assert_array_equal(after[[0, 2, 4]], pulled[[0, 2, 4]])
    expected = initial_values(INIT(kind=INIT.UNIFORM, scale=0.1, seed=3), np.array([0]), 4)
    np.testing.assert_array_equal(after[4], expected[0])
    # A pull of rows that exist and rows that do not, in one request, still creates none.
    state.pull_sparse("emb", np.arange(0, 1000, 7, dtype=np.int64))
    assert state.tables["emb"].rows == 2


def test_unbounded_table_accepts_huge_ids() -> None:
    state = _shard(0, 2, id_space=0)
    ids = np.array([2**62, 10, 2**62, 4], dtype=np.int64)
    rows = state.pull_sparse("emb", ids)
    np.testing.assert_array_equal(rows[0], rows[2])
    state.push(BatchKey(0, 0, 0), {}, {"emb": (ids, np.ones((4, 4), np.float32))})
    after = state.pull_sparse("emb", ids)
    # Duplicate ids were summed: id 2**62 got two unit gradients, id 10 one.
    np.testing.assert_allclose(rows[0] - after[0], 0.2, rtol=1e-5)
    np.testing.assert_allclose(rows[1] - after[1], 0.1, rtol=1e-5)
    assert state.tables["emb"].rows == 3


BAD_PUSHES = [
    ("unknown table", {"nope": np.zeros(12, np.float32)}, {}, NotFoundError, "nope"),
    ("wrong dense shape", {"w": np.zeros(11, np.float32)}, {}, InvalidArgumentError, r"\[12\]"),
    ("wrong dtype", {"w": np.zeros(12, np.float64)}, {}, InvalidArgumentError, "float64"),
    ("wrong dim", {}, {"emb": (np.array([1]), np.zeros((1, 5), np.float32))},
     InvalidArgumentError, r"\[1, 4\]"),
    ("id out of range", {}, {"emb": (np.array([1, 1000]), np.zeros((2, 4), np.float32))},
     InvalidArgumentError, "1000"),
    ("negative id", {}, {"emb": (np.array([-3]), np.zeros((1, 4), np.float32))},
     InvalidArgumentError, "-3"),
    ("sparse table as dense", {"emb": np.zeros(12, np.float32)}, {},
     InvalidArgumentError, "sparse"),
]


@pytest.mark.parametrize(("label", "dense", "sparse", "error", "match"), BAD_PUSHES,
                         ids=[b[0] for b in BAD_PUSHES])
def test_bad_push_changes_nothing(label, dense, sparse, error, match) -> None:
    state = _shard()
    ids = np.arange(10, dtype=np.int64)
    before = _everything(state, ids)
    rows_before = state.tables["emb"].rows
    # A valid part for the dense table rides along: it must not be applied either.
    good_dense = {"w": np.ones(12, np.float32), **dense}
    with pytest.raises(error, match=match):
        state.push(BatchKey(0, 0, 0), good_dense, sparse)
    after = _everything(state, ids)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])
    assert state.tables["emb"].rows == rows_before
    assert not state.applied.contains(0, 0, 0)
    assert state.push(BatchKey(0, 0, 0), {"w": np.ones(12, np.float32)}, {}).applied


def test_nonfinite_push_is_skipped_counted_and_recorded() -> None:
    state = _shard()
    ids = np.arange(3, dtype=np.int64)
    before = _everything(state, ids)
    grad = np.ones((3, 4), np.float32)
    grad[1, 2] = np.nan
    result = state.push(BatchKey(0, 0, 0), {"w": np.ones(12, np.float32)}, {"emb": (ids, grad)})
    assert result.applied
    assert result.skipped
    assert state.skipped_nonfinite == 1
    after = _everything(state, ids)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])
    assert not state.push(BatchKey(0, 0, 0), {"w": np.ones(12, np.float32)}, {}).applied


def test_duplicate_batch_is_not_reapplied() -> None:
    state = _shard()
    grad = {"w": np.ones(12, np.float32)}
    assert state.push(BatchKey(1, 2, 0), grad, {}).applied
    once = state.pull_dense()["w"]
    result = state.push(BatchKey(1, 2, 0), grad, {})
    assert not result.applied
    np.testing.assert_array_equal(state.pull_dense()["w"], once)
    assert state.duplicates == 1
    assert state.push(BatchKey(1, 2, 1), grad, {}).applied
    assert state.push(BatchKey(2, 2, 0), grad, {}).applied


def test_a_sparse_entry_with_no_ids_trains_the_rest_and_creates_nothing() -> None:
    state = _shard()
    empty = (np.zeros(0, np.int64), np.zeros((0, 4), np.float32))
    assert state.push(BatchKey(0, 0, 0), {"w": np.ones(12, np.float32)}, {"emb": empty}).applied
    np.testing.assert_allclose(state.pull_dense()["w"], np.arange(12) - 0.1)
    assert state.tables["emb"].rows == 0


def test_uninitialised_shard_refuses_pushes_and_conflicting_declarations() -> None:
    state = ShardState(0, 1)
    state.declare(_specs())
    with pytest.raises(FailedPreconditionError, match="not initialised"):
        state.push(BatchKey(0, 0, 0), {"w": np.ones(12, np.float32)}, {})
    state.declare(_specs())  # identical: fine
    conflicting = _specs()
    conflicting[1].dim = 8
    with pytest.raises(InvalidArgumentError, match="different spec"):
        state.declare(conflicting)
    bad = [SPEC(name="x", kind=SPEC.DENSE, shape=[2], dtype=common_pb2.FLOAT64,
                optimizer=OPT(kind=OPT.SGD, lr=0.1))]
    with pytest.raises(InvalidArgumentError, match="FLOAT64"):
        state.declare(bad)
    with pytest.raises(InvalidArgumentError, match="lr"):
        state.declare([SPEC(name="x", kind=SPEC.DENSE, shape=[2], optimizer=OPT(kind=OPT.SGD))])
    assert set(state.tables) == {"w", "emb"}


def test_concurrent_pushes_equal_serial_pushes() -> None:
    rng = np.random.default_rng(5)
    batches = [
        (rng.normal(size=12).astype(np.float32),
         rng.integers(0, 1000, 300).astype(np.int64),
         rng.normal(size=(300, 4)).astype(np.float32))
        for _ in range(64)
    ]
    serial = _shard()
    for seq, (dense, ids, rows) in enumerate(batches):
        serial.push(BatchKey(0, 0, seq), {"w": dense}, {"emb": (ids, rows)})
    concurrent = _shard()

    def worker(k: int) -> None:
        for seq in range(k, len(batches), 4):
            dense, ids, rows = batches[seq]
            concurrent.push(BatchKey(0, 0, seq), {"w": dense}, {"emb": (ids, rows)})

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ids = np.arange(1000, dtype=np.int64)
    # SGD is a sum of updates: any order gives the same result up to float rounding.
    np.testing.assert_allclose(concurrent.pull_dense()["w"], serial.pull_dense()["w"], atol=1e-4)
    np.testing.assert_allclose(concurrent.pull_sparse("emb", all_ids),
                               serial.pull_sparse("emb", all_ids), atol=1e-4)
    assert len(concurrent.applied) == len(batches) == concurrent.pushes


def test_applied_set_is_compact_and_round_trips() -> None:
    applied = AppliedSet()
    for seq in range(1000):
        assert applied.add(0, 7, seq)
    assert applied.add(0, 8, 5)
    assert not applied.add(0, 7, 999)
    tasks, extra = applied.to_arrays()
    assert tasks.tolist() == [[0, 7, 1000], [0, 8, 0]]
    assert extra.tolist() == [[0, 8, 5]]
    # The refused add still counts as an application: a double application is visible.
    assert applied.applications(0, 7) == 1001
    assert applied.applications(0, 8) == 1
    assert AppliedSet.from_arrays(tasks, extra) != applied  # counts differ
    assert AppliedSet.from_arrays(tasks, extra, applied.counts_array()) == applied
    assert applied.add(1, 7, 0)
    assert applied.prune(1) == 2
    assert len(applied) == 1
    assert applied.contains(1, 7, 0)
    # Pruned passes count as applied from now on (a very late push cannot re-apply them).
    assert applied.floor == 1
    assert applied.contains(0, 123, 4)
    assert applied.copy() == applied
    assert applied.copy().floor == 1


def test_sorted_unique_ids_and_any_other_order_give_the_same_rows_and_updates() -> None:
    """Trainers send their unique ids sorted, which the shard takes without a sort; any other
    order, and repeated ids (summed), must come out the same."""
    sorted_ids = np.array([3, 10, 11, 400, 999], dtype=np.int64)
    grads = np.arange(20, dtype=np.float32).reshape(5, 4)
    shuffled = np.array([2, 0, 4, 1, 3])
    repeated = np.array([0, 0, 1, 2, 3, 4, 4])
    fresh = _shard()
    pulled = fresh.pull_sparse("emb", sorted_ids)
    np.testing.assert_array_equal(fresh.pull_sparse("emb", sorted_ids[shuffled]),
                                  pulled[shuffled])
    np.testing.assert_array_equal(fresh.pull_sparse("emb", sorted_ids[repeated]),
                                  pulled[repeated])
    halves = np.ones(7, np.float32)[:, None] * grads[repeated] / np.float32(
        np.bincount(repeated)[repeated])[:, None]  # each id's gradient split over its repeats
    results = []
    for ids, rows in ((sorted_ids, grads), (sorted_ids[shuffled], grads[shuffled]),
                      (sorted_ids[repeated], halves)):
        state = _shard()  # SGD: a repeat's gradient left unsummed would move its row less
        state.push(BatchKey(0, 0, 0), {}, {"emb": (ids, rows)})
        results.append(state.pull_sparse("emb", sorted_ids))
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_allclose(results[0], results[2], rtol=1e-6)
    assert not np.array_equal(results[0], pulled)  # the push moved the rows
