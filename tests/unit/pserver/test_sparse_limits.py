"""Caps on one shard: a request over a cap is RESOURCE_EXHAUSTED naming the table and the cap,
and changes nothing; under a memory cap an evicting table makes room instead (no RPC)."""

from __future__ import annotations

import numpy as np
import pytest

from elasticps.errors import ResourceExhaustedError
from elasticps.proto import pserver_pb2
from elasticps.pserver.limits import ShardLimits
from elasticps.pserver.shard import BatchKey, ShardState

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
POLICY = pserver_pb2.SparsePolicy


def _state(limits: ShardLimits, policy: pserver_pb2.SparsePolicy | None = None,
           id_space: int = 0) -> ShardState:
    state = ShardState(0, 1, limits)
    state.declare([
        SPEC(name="w", kind=SPEC.DENSE, shape=[8], optimizer=OPT(kind=OPT.SGD, lr=0.1)),
        SPEC(name="emb", kind=SPEC.SPARSE, dim=8, id_space=id_space,
             optimizer=OPT(kind=OPT.ADAM, lr=0.1), policy=policy),
    ])
    state.init_dense({"w": np.zeros(8, np.float32)})
    return state


def _grads(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return ids, np.ones((ids.shape[0], 8), np.float32)


def _everything(state: ShardState, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    return (state.pull_dense()["w"], state.pull_sparse("emb", ids), state.tables["emb"].rows,
            len(state.applied))


def _assert_same(before: tuple, after: tuple) -> None:
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])
    assert before[2:] == after[2:]


def test_too_many_ids_in_one_request_is_refused_and_changes_nothing() -> None:
    state = _state(ShardLimits(max_ids_per_request=8))
    state.push(BatchKey(0, 0, 0), {}, {"emb": _grads(np.arange(8, dtype=np.int64))})
    probe = np.arange(20, dtype=np.int64)
    before = _everything(state, probe[:8])
    with pytest.raises(ResourceExhaustedError, match=r"'emb': 9 ids in one push; the cap is 8"):
        state.push(BatchKey(0, 0, 1), {"w": np.ones(8, np.float32)},
                   {"emb": _grads(np.arange(9, dtype=np.int64))})
    with pytest.raises(ResourceExhaustedError, match=r"'emb': 20 ids in one pull; the cap is 8"):
        state.pull_sparse("emb", probe)
    _assert_same(before, _everything(state, probe[:8]))
    assert not state.applied.contains(0, 0, 1)


def test_table_count_and_declared_size_caps() -> None:
    state = ShardState(0, 1, ShardLimits(max_tables=2, memory_bytes=1 << 20))
    state.declare([SPEC(name="a", kind=SPEC.DENSE, shape=[4], optimizer=OPT(kind=OPT.SGD, lr=1))])
    with pytest.raises(ResourceExhaustedError, match=r"3 tables .* the cap is 2 tables"):
        state.declare([SPEC(name=n, kind=SPEC.DENSE, shape=[4], optimizer=OPT(kind=OPT.SGD, lr=1))
                       for n in ("b", "c")])
    assert list(state.tables) == ["a"]
    # A dense slice of 1M floats with Adam's two slots needs 12 MiB: over a 1 MiB cap.
    with pytest.raises(ResourceExhaustedError, match=r"table 'big'.*the cap is 1048576 bytes"):
        state.declare([SPEC(name="big", kind=SPEC.DENSE, shape=[1 << 20],
                            optimizer=OPT(kind=OPT.ADAM, lr=1))])
    assert list(state.tables) == ["a"]


def test_over_the_memory_cap_without_eviction_is_refused_and_changes_nothing() -> None:
    cap = 64 << 10
    state = _state(ShardLimits(memory_bytes=cap))
    row_bytes = state.tables["emb"].row_bytes  # 8 + 4 * 8 * 3 + 4 = 108
    fits = np.arange(200, dtype=np.int64)
    state.push(BatchKey(0, 0, 0), {}, {"emb": _grads(fits)})
    before = _everything(state, np.arange(2000, dtype=np.int64))
    too_many = np.arange(200, 200 + cap // row_bytes, dtype=np.int64)
    with pytest.raises(ResourceExhaustedError,
                       match=r"table 'emb': a push of \d+ new rows .*the cap is 65536 bytes"):
        state.push(BatchKey(0, 0, 1), {"w": np.ones(8, np.float32)}, {"emb": _grads(too_many)})
    _assert_same(before, _everything(state, np.arange(2000, dtype=np.int64)))
    assert not state.applied.contains(0, 0, 1)
    assert state.tables["emb"].counters().evicted == 0
    # Pushes of rows that exist need no memory and still go through.
    state.push(BatchKey(0, 0, 2), {}, {"emb": _grads(fits)})


@pytest.mark.parametrize("id_space", [0, 1 << 14], ids=["hash", "direct"])
def test_an_evicting_table_makes_room_under_the_memory_cap(id_space: int) -> None:
    cap = 256 << 10
    state = _state(ShardLimits(memory_bytes=cap), POLICY(evict=POLICY.LRU), id_space)
    clock = 0.0
    state.clock = lambda: clock
    table = state.tables["emb"]
    for seq in range(40):
        clock += 1.0
        ids = np.arange(seq * 200, (seq + 1) * 200, dtype=np.int64)
        state.push(BatchKey(0, 0, seq), {}, {"emb": _grads(ids)})
        assert state._memory_bytes() <= cap
    counters = table.counters()
    assert counters.admitted == 40 * 200
    assert counters.evicted == counters.admitted - table.rows > 0
    # LRU: the newest batch is all there, the oldest is gone and reads as its initial value.
    newest = np.arange(39 * 200, 40 * 200, dtype=np.int64)
    assert (table.lookup(newest) >= 0).all()
    assert (table.lookup(np.arange(200, dtype=np.int64)) < 0).all()
    fresh = ShardState(0, 1)
    fresh.declare([state.tables["emb"].spec])
    np.testing.assert_array_equal(state.pull_sparse("emb", np.arange(5, dtype=np.int64)),
                                  fresh.pull_sparse("emb", np.arange(5, dtype=np.int64)))
    tombstones, overflowed = table.take_tombstones()
    assert not overflowed
    assert sorted(tombstones.tolist()) == sorted(
        set(range(40 * 200)) - set(table.ids[:table.rows].tolist()))


def test_one_push_bigger_than_max_rows_is_refused() -> None:
    state = _state(ShardLimits(), POLICY(evict=POLICY.LFU, max_rows=10))
    before = _everything(state, np.arange(11, dtype=np.int64))
    with pytest.raises(ResourceExhaustedError, match=r"'emb': one push trains 11 new .*"
                                                     r"max_rows=10"):
        state.push(BatchKey(0, 0, 0), {}, {"emb": _grads(np.arange(11, dtype=np.int64))})
    _assert_same(before, _everything(state, np.arange(11, dtype=np.int64)))
