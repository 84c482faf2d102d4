"""A restore keeps what admission and eviction know: the sketch's counts and each row's last
pass, push time and push count. Checked by behaviour: a shard restored from base + delta and
the shard it was saved from, given the same pushes afterwards, admit and evict the same rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from elasticps.proto import pserver_pb2
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.shard import BatchKey, ShardState

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
POLICY = pserver_pb2.SparsePolicy
EPOCH = 1.7e9  # the tests' unix time at clock 0


def _state(policy: pserver_pb2.SparsePolicy, clock: float = 0.0) -> ShardState:
    state = ShardState(0, 1, clock=lambda: clock)  # TTL sweeps count from the start clock
    state.declare([SPEC(name="emb", kind=SPEC.SPARSE, dim=2, optimizer=OPT(kind=OPT.SGD, lr=0.1),
                        policy=policy)])
    state.init_dense({})
    return state


def _push(state: ShardState, seq: int, ids: np.ndarray, pass_id: int = 0) -> None:
    state.clock = lambda: float(seq)
    state.wall_clock = lambda: EPOCH + seq
    state.push(BatchKey(pass_id, 0, seq), {},
               {"emb": (ids, np.full((ids.size, 2), 0.5, np.float32))})


def _rows(state: ShardState) -> tuple[np.ndarray, np.ndarray]:
    table = state.tables["emb"]
    order = np.argsort(table.ids[:table.size])
    return table.ids[:table.size][order], table.values[:table.size][order]


@pytest.mark.parametrize("policy", [
    POLICY(admit_after=3, evict=POLICY.LRU, max_rows=150),
    POLICY(admit_after=2, evict=POLICY.LFU, max_rows=150),
    POLICY(ttl_seconds=6),
    POLICY(admit_after=3),  # a sketch without per-row bookkeeping
], ids=["lru", "lfu", "ttl", "admit-only"])
def test_a_restored_shard_admits_and_evicts_as_the_saved_one(
        tmp_path: Path, policy: pserver_pb2.SparsePolicy) -> None:
    rng = np.random.default_rng(0)
    saved = _state(policy)
    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1, deltas=1)
    for seq in range(10):
        _push(saved, seq, np.unique(rng.integers(0, 400, 120)))
        if seq in (4, 9):  # a full checkpoint, then a delta on it
            checkpoints.save(saved.snapshot(delta=checkpoints.wants_delta())[0])
    loaded = checkpoints.load_newest()
    assert loaded is not None
    assert loaded[1].parent  # restored through the chain
    restored = ShardState(0, 1, clock=lambda: 9.0)
    restored.wall_clock = lambda: EPOCH + 9
    restored.restore(loaded[0], loaded[1].id)
    np.testing.assert_array_equal(_rows(restored)[0], _rows(saved)[0])
    before = saved.tables["emb"].counters()
    for seq in range(10, 16):  # the same pushes to both
        ids = np.unique(rng.integers(0, 400, 120))
        _push(saved, seq, ids)
        _push(restored, seq, ids)
        for got, want in zip(_rows(restored), _rows(saved), strict=True):
            np.testing.assert_array_equal(got, want)
    after = saved.tables["emb"].counters()
    assert restored.tables["emb"].counters() == after
    # The pushes after the restore did admit and evict: the check could have failed.
    assert after.admitted > before.admitted
    evicts = policy.evict != POLICY.EVICT_UNSPECIFIED or policy.ttl_seconds
    assert after.evicted > before.evicted or not evicts


def test_a_checkpoint_without_bookkeeping_restores_rows_as_pushed_now(tmp_path: Path) -> None:
    """Files written before bookkeeping was kept still restore (rows count as pushed once)."""
    saved = _state(POLICY(evict=POLICY.LRU, max_rows=50))
    _push(saved, 0, np.arange(40))
    snap, _ = saved.snapshot()
    for state in snap.sparse.values():
        state.bookkeeping = None
    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1)
    checkpoints.save(snap)
    loaded = checkpoints.load_newest()
    assert loaded is not None
    restored = ShardState(0, 1)
    restored.clock = lambda: 100.0
    restored.restore(loaded[0], loaded[1].id)
    table = restored.tables["emb"]
    assert table.hits[:table.size].tolist() == [1] * 40
    assert table.touched_at[:table.size].tolist() == [100.0] * 40
