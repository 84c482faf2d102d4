"""Admission and eviction of sparse rows, checked against plain models written here (no RPC)."""

from __future__ import annotations

import numpy as np
import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver.checkpoint.format import (
    parse,
    snapshot_metadata,
    snapshot_tensors,
    to_snapshot,
    write_stream,
)
from elasticps.pserver.dense_table import initial_values
from elasticps.pserver.index import HashIndex
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.pserver.sparse_policy import CountMinSketch

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
POLICY = pserver_pb2.SparsePolicy
INIT = pserver_pb2.Initializer(kind=pserver_pb2.Initializer.UNIFORM, scale=0.1, seed=5)
LR = 0.5


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _state(policy: pserver_pb2.SparsePolicy, id_space: int = 0, n: int = 1,
           shard: int = 0) -> tuple[ShardState, Clock]:
    clock = Clock()
    state = ShardState(shard, n, clock=clock)
    state.declare([SPEC(name="emb", kind=SPEC.SPARSE, dim=2, id_space=id_space,
                        optimizer=OPT(kind=OPT.SGD, lr=LR), initializer=INIT, policy=policy)])
    state.init_dense({})
    return state, clock


def _push(state: ShardState, key: tuple[int, int, int], ids: list[int] | np.ndarray,
          grad: float = 1.0) -> None:
    ids = np.asarray(ids, dtype=np.int64)
    state.push(BatchKey(*key), {}, {"emb": (ids, np.full((ids.size, 2), grad, np.float32))})


def _init(ids: list[int] | np.ndarray) -> np.ndarray:
    return initial_values(INIT, np.asarray(ids, dtype=np.int64), 2)


def _held(state: ShardState) -> set[int]:
    table = state.tables["emb"]
    return set(table.ids[:table.rows].tolist())


def test_admit_after_k_pushes_drops_earlier_gradients_and_counts_them() -> None:
    state, _ = _state(POLICY(admit_after=3))
    for seq in range(2):
        _push(state, (0, 0, seq), [1, 2])
        assert state.tables["emb"].rows == 0
        np.testing.assert_array_equal(state.pull_sparse("emb", np.array([1, 2])), _init([1, 2]))
    _push(state, (0, 0, 2), [1, 7], grad=2.0)  # id 1's third push: its row starts now
    assert _held(state) == {1}
    np.testing.assert_allclose(state.pull_sparse("emb", np.array([1])), _init([1]) - LR * 2.0)
    counters = state.tables["emb"].counters()
    assert (counters.admitted, counters.dropped) == (1, 2 + 2 + 1)
    # A duplicate batch counts nothing again.
    _push(state, (0, 0, 2), [2])
    assert state.tables["emb"].counters().dropped == 5


def test_the_admission_sketch_is_bounded_and_ages() -> None:
    sketch = CountMinSketch(width=1 << 12)
    nbytes = sketch.nbytes
    sketch.add(np.array([42], dtype=np.int64))
    sketch.add(np.array([42], dtype=np.int64))
    assert sketch.estimate(np.array([42]))[0] == 2
    # Far more distinct ids than counters: memory stays put, and aging keeps the tail of ids
    # seen once from looking like ids seen often (a count-min estimate never undercounts
    # before aging, so 42 was exactly 2 above).
    rng = np.random.default_rng(0)
    for _ in range(50):
        sketch.add(np.unique(rng.integers(0, 2**62, 1000)))
    assert sketch.nbytes == nbytes
    tail = np.unique(rng.integers(0, 2**62, 5000))
    assert (sketch.estimate(tail) >= 2).mean() < 0.05


def test_admit_with_probability_is_a_pure_function_of_id_and_batch() -> None:
    ids = np.arange(0, 20000, 2, dtype=np.int64)
    runs = []
    for _ in range(2):
        state, _ = _state(POLICY(admit_probability=0.25))
        _push(state, (3, 1, 0), ids)
        runs.append(_held(state))
    assert runs[0] == runs[1]
    assert 0.22 < len(runs[0]) / ids.size < 0.28
    assert state.tables["emb"].counters().dropped == ids.size - len(runs[0])


def test_ttl_in_passes_evicts_rows_unseen_for_n_passes() -> None:
    state, _ = _state(POLICY(ttl_passes=1))
    _push(state, (0, 0, 0), [1, 2])
    _push(state, (1, 0, 0), [2, 3])
    assert _held(state) == {1, 2, 3}  # pass 1 began: 1 was pushed one pass ago, it stays
    _push(state, (2, 0, 0), [4])
    assert _held(state) == {2, 3, 4}
    np.testing.assert_array_equal(state.pull_sparse("emb", np.array([1])), _init([1]))
    assert state.tables["emb"].take_tombstones()[0].tolist() == [1]
    _push(state, (3, 0, 0), [1])  # an evicted id comes back as a fresh row
    np.testing.assert_allclose(state.pull_sparse("emb", np.array([1])), _init([1]) - LR)


def test_ttl_in_seconds_follows_the_clock() -> None:
    state, clock = _state(POLICY(ttl_seconds=10))
    _push(state, (0, 0, 0), [1, 2])
    clock.now += 6
    _push(state, (0, 0, 1), [2, 3])
    clock.now += 6  # id 1 unseen for 12 s, id 2 for 6 s
    _push(state, (0, 0, 2), [5])
    assert _held(state) == {2, 3, 5}
    assert state.tables["emb"].counters().evicted == 1


def test_max_rows_evicts_least_recently_or_least_often_pushed() -> None:
    lru, clock = _state(POLICY(evict=POLICY.LRU, max_rows=4))
    for seq, ids in enumerate([[1], [2], [3], [4], [1], [5]]):
        clock.now += 1
        _push(lru, (0, 0, seq), ids)
    assert _held(lru) == {1, 3, 4, 5}  # 2 was the least recently pushed
    lfu, clock = _state(POLICY(evict=POLICY.LFU, max_rows=4))
    for seq, ids in enumerate([[1], [2], [3], [4], [1], [2], [4], [5]]):
        clock.now += 1
        _push(lfu, (0, 0, seq), ids)
    assert _held(lfu) == {1, 2, 4, 5}  # 3 was pushed once, and earliest among the once-pushed


@pytest.mark.parametrize("evict", [POLICY.LRU, POLICY.LFU], ids=["lru", "lfu"])
@pytest.mark.parametrize("id_space", [0, 600], ids=["hash", "direct"])
def test_evicting_tables_match_a_plain_model(evict: int, id_space: int) -> None:
    """Every row the table holds has exactly the value a dict model gives it (initial value
    minus lr times the gradients since the row was last created); rows stay within max_rows;
    an evicted row was never one the push trained."""
    state, clock = _state(POLICY(evict=evict, max_rows=50, ttl_passes=2), id_space, n=3,
                          shard=1)
    model: dict[int, np.ndarray] = {}
    rng = np.random.default_rng(7)
    for seq in range(150):
        clock.now += 1
        pass_id = seq // 30
        ids = np.unique(rng.integers(0, 200, 12)) * 3 + 1
        grads = rng.normal(size=(ids.size, 2)).astype(np.float32)
        state.push(BatchKey(pass_id, 0, seq), {}, {"emb": (ids, grads)})
        held = _held(state)
        assert len(held) <= 50
        assert set(ids.tolist()) <= held
        for key in set(model) - held:
            del model[key]
        for key, grad in zip(ids.tolist(), grads, strict=True):
            start = model.get(key, _init([key])[0].astype(np.float64))
            model[key] = start - LR * grad.astype(np.float64)
        assert held == set(model)
    keys = np.array(sorted(model), dtype=np.int64)
    np.testing.assert_allclose(state.pull_sparse("emb", keys), np.array([model[k] for k in keys]),
                               rtol=1e-5, atol=1e-6)
    assert state.tables["emb"].counters().evicted > 100


def test_hash_index_deletes_and_reassigns_like_a_dict() -> None:
    index, model = HashIndex(16), {}
    rng = np.random.default_rng(1)
    for round_ in range(30):
        fresh = np.setdiff1d(np.unique(rng.integers(0, 1 << 40, 200)),
                             np.array(list(model), dtype=np.int64))
        index.insert(fresh, np.arange(fresh.size, dtype=np.int64) + round_ * 1000)
        model.update(zip(fresh.tolist(), (np.arange(fresh.size) + round_ * 1000).tolist(),
                         strict=True))
        keys = np.array(list(model), dtype=np.int64)
        gone = rng.choice(keys, keys.size // 3, replace=False)
        index.delete(gone)
        for key in gone.tolist():
            del model[key]
        moved = np.array(list(model)[:10], dtype=np.int64)
        targets = np.arange(10, dtype=np.int64) + 10**6 + round_  # what lookup must return now
        index.reassign(moved, targets)
        model.update(zip(moved.tolist(), targets.tolist(), strict=True))
        keys = np.array(list(model), dtype=np.int64)
        np.testing.assert_array_equal(index.lookup(keys), [model[k] for k in keys.tolist()])
        assert (index.lookup(gone) == -1).all()
        assert len(index) == len(model)


def test_a_checkpoint_after_evictions_restores_the_same_rows(tmp_path) -> None:
    state, clock = _state(POLICY(evict=POLICY.LRU, max_rows=30, admit_after=2))
    rng = np.random.default_rng(3)
    for seq in range(40):
        clock.now += 1
        _push(state, (0, 0, seq), np.unique(rng.integers(0, 60, 10)))
    assert state.tables["emb"].counters().evicted > 0
    snap, _ = state.snapshot()
    path = tmp_path / "ck.safetensors"
    with path.open("wb") as out:
        write_stream(out, snapshot_tensors(snap), snapshot_metadata(snap, "1"))
    restored, _ = _state(POLICY())
    restored.tables.clear()
    restored.restore(to_snapshot(*parse(path.read_bytes())), "test")
    ids = np.arange(60, dtype=np.int64)
    np.testing.assert_array_equal(restored.pull_sparse("emb", ids), state.pull_sparse("emb", ids))
    assert _held(restored) == _held(state)
    assert restored.tables["emb"].policy == state.tables["emb"].policy


BAD_POLICIES = [
    (POLICY(admit_after=-1), "admit_after=-1"),
    (POLICY(admit_probability=1.5), "admit_probability=1.5"),
    (POLICY(admit_probability=float("nan")), "admit_probability=nan"),
    (POLICY(admit_after=2, admit_probability=0.5), "not both"),
    (POLICY(ttl_passes=-2), "ttl_passes=-2"),
    (POLICY(ttl_seconds=float("inf")), "ttl_seconds=inf"),
    (POLICY(max_rows=10), "max_rows=10 needs an evict mode"),
    (POLICY(evict=9), "unknown evict mode 9"),
]


@pytest.mark.parametrize(("policy", "match"), BAD_POLICIES, ids=[m for _, m in BAD_POLICIES])
def test_bad_policies_are_refused_by_name(policy: pserver_pb2.SparsePolicy, match: str) -> None:
    state = ShardState(0, 1)
    with pytest.raises(InvalidArgumentError, match=match):
        state.declare([SPEC(name="emb", kind=SPEC.SPARSE, dim=2,
                            optimizer=OPT(kind=OPT.SGD, lr=1), policy=policy)])
    assert not state.tables
