"""Checkpoints: bit-exact round trip, corruption detected with fallback, keep-last-K, store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from elasticps.errors import CheckpointError
from elasticps.proto import pserver_pb2
from elasticps.pserver.checkpoint import format as fmt
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.store import open_store

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec


def _trained_shard(pushes: int = 5, shard: int = 1, n: int = 2) -> ShardState:
    state = ShardState(shard, n)
    state.declare([
        SPEC(name="w", kind=SPEC.DENSE, shape=[7, 3], optimizer=OPT(kind=OPT.ADAM, lr=0.01)),
        SPEC(name="emb", kind=SPEC.SPARSE, dim=8, id_space=0,
             optimizer=OPT(kind=OPT.ADAM, lr=0.01)),
        SPEC(name="bias", kind=SPEC.SPARSE, dim=1, id_space=1000,
             optimizer=OPT(kind=OPT.ADAGRAD, lr=0.1)),
    ])
    length = state.tables["w"].rows
    state.init_dense({"w": np.linspace(-1, 1, length, dtype=np.float32)})
    rng = np.random.default_rng(0)
    for seq in range(pushes):
        ids = rng.integers(0, 500, 64) * n + shard
        state.push(BatchKey(0, 3, seq),
                   {"w": rng.normal(size=length).astype(np.float32)},
                   {"emb": (ids, rng.normal(size=(64, 8)).astype(np.float32)),
                    "bias": (ids[ids < 1000], np.ones((int((ids < 1000).sum()), 1), np.float32))})
    state.push(BatchKey(1, 9, 4), {}, {})  # out-of-order seq: kept in the "extra" set
    return state


def _assert_same(a: ShardState, b: ShardState) -> None:
    sa, _ = a.snapshot()
    sb, _ = b.snapshot()
    assert [s.SerializeToString() for s in sa.specs] == [s.SerializeToString() for s in sb.specs]
    assert sa.initialized == sb.initialized
    for name in sa.dense:
        np.testing.assert_array_equal(sa.dense[name].values, sb.dense[name].values)
        for slot in sa.dense[name].slots:
            np.testing.assert_array_equal(sa.dense[name].slots[slot], sb.dense[name].slots[slot])
        assert sa.dense[name].step == sb.dense[name].step
    for name in sa.sparse:
        for field in ("ids", "values", "steps"):
            np.testing.assert_array_equal(getattr(sa.sparse[name], field),
                                          getattr(sb.sparse[name], field))
        for slot in sa.sparse[name].slots:
            np.testing.assert_array_equal(sa.sparse[name].slots[slot], sb.sparse[name].slots[slot])
    assert sa.applied == sb.applied
    assert sa.counters == sb.counters


def test_round_trip_is_bit_exact_and_training_continues_identically(tmp_path: Path) -> None:
    original = _trained_shard()
    ckpts = ShardCheckpoints(f"file://{tmp_path}", 1, 2)
    snap, _ = original.snapshot()
    manifest = ckpts.save(snap)
    loaded = ckpts.load_newest()
    assert loaded is not None
    restored = ShardState(1, 2)
    restored.restore(loaded[0], manifest.id)
    _assert_same(original, restored)
    assert restored.applied.contains(1, 9, 4)
    assert not restored.applied.contains(1, 9, 3)
    # Both go on the same way: the optimizer state (incl. per-row Adam steps) came back too.
    ids = np.array([1, 3, 5, 999_999], dtype=np.int64)
    for state in (original, restored):
        state.push(BatchKey(2, 0, 0), {"w": np.ones(state.tables["w"].rows, np.float32)},
                   {"emb": (ids, np.ones((4, 8), np.float32))})
    _assert_same(original, restored)


def test_file_is_readable_by_the_safetensors_library(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    ckpts = ShardCheckpoints(str(tmp_path), 1, 2)
    snap, _ = _trained_shard().snapshot()
    manifest = ckpts.save(snap)
    tensors = load_file(str(tmp_path / "shard-1-of-2" / manifest.data))
    np.testing.assert_array_equal(tensors["sparse.emb.value"], snap.sparse["emb"].values)
    np.testing.assert_array_equal(tensors["applied.tasks"], snap.applied.to_arrays()[0])


def _corrupt(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:
        data[len(data) - 100] ^= 0x01  # one flipped bit deep in the tensor data
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncate", "bitflip"])
def test_corrupt_newest_falls_back_to_previous(tmp_path: Path, how: str) -> None:
    state = _trained_shard()
    ckpts = ShardCheckpoints(str(tmp_path), 1, 2, keep=3)
    first = ckpts.save(state.snapshot()[0])
    state.push(BatchKey(5, 0, 0), {"w": np.ones(state.tables["w"].rows, np.float32)}, {})
    second = ckpts.save(state.snapshot()[0])
    _corrupt(tmp_path / "shard-1-of-2" / second.data, how)
    with pytest.raises(CheckpointError, match="truncated" if how == "truncate" else "corrupt"):
        ckpts.read_verified(second)
    loaded = ckpts.load_newest()
    assert loaded is not None
    snap, manifest = loaded
    assert manifest.id == first.id
    assert not snap.applied.contains(5, 0, 0)


def test_keep_last_k_and_store_publication(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/job.db", "ckpt-test")
    try:
        state = _trained_shard(pushes=1)
        ckpts = ShardCheckpoints(str(tmp_path / "ck"), 1, 2, keep=2, store=store)
        ids = [ckpts.save(state.snapshot()[0]).id for _ in range(4)]
        assert ids == sorted(ids)
        keys = [kv.key for kv in store.get_prefix("pserver/checkpoint/1/")]
        assert keys == [f"pserver/checkpoint/1/{i}" for i in ids[-2:]]
        files = sorted(p.name for p in (tmp_path / "ck" / "shard-1-of-2").iterdir())
        kept = ids[-2:]
        assert files == sorted(f"ckpt-{i}.{ext}" for i in kept for ext in ("json", "safetensors"))
        assert [m.id for m in ckpts.manifests()] == ids[-2:][::-1]
    finally:
        store.close()


def test_not_a_checkpoint_is_a_clear_error() -> None:
    with pytest.raises(CheckpointError, match="not an elasticps checkpoint"):
        fmt.parse(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
