"""Incremental checkpoints: base + deltas restore what a full checkpoint of the same state
restores (also after evictions); a corrupt or missing link falls back; pruning keeps chains."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from elasticps.errors import CheckpointError
from elasticps.proto import pserver_pb2
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.shard import BatchKey, ShardState

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
POLICY = pserver_pb2.SparsePolicy


def _state() -> ShardState:
    state = ShardState(0, 1)
    state.declare([
        SPEC(name="w", kind=SPEC.DENSE, shape=[6], optimizer=OPT(kind=OPT.ADAM, lr=0.1)),
        SPEC(name="emb", kind=SPEC.SPARSE, dim=3, optimizer=OPT(kind=OPT.ADAM, lr=0.1),
             policy=POLICY(evict=POLICY.LRU, max_rows=400)),
        SPEC(name="plain", kind=SPEC.SPARSE, dim=2, id_space=5000,
             optimizer=OPT(kind=OPT.SGD, lr=0.5)),
    ])
    state.init_dense({"w": np.zeros(6, np.float32)})
    return state


def _train(state: ShardState, seq: int, rng: np.random.Generator, spread: int = 1000) -> None:
    state.clock = lambda: float(seq)  # LRU order follows the pushes
    ids = np.unique(rng.integers(0, spread, 60))
    plain = np.unique(rng.integers(0, 5000, 30))
    state.push(BatchKey(seq // 10, 0, seq), {"w": rng.normal(size=6).astype(np.float32)}, {
        "emb": (ids, rng.normal(size=(ids.size, 3)).astype(np.float32)),
        "plain": (plain, rng.normal(size=(plain.size, 2)).astype(np.float32))})


def _view(state: ShardState) -> dict[str, object]:
    """Everything a checkpoint holds, read without a snapshot (a snapshot starts a new delta)."""
    out: dict[str, object] = {"w": state.tables["w"].values.copy(),
                              "applied": sorted(state.applied.tasks()), "pushes": state.pushes}
    for name in ("emb", "plain"):
        table = state.tables[name]
        n = table.size
        order = np.argsort(table.ids[:n])
        out[name] = (table.ids[:n][order].copy(), table.values[:n][order].copy(),
                     {k: v[:n][order].copy() for k, v in table.slots.items()},
                     table.steps[:n][order].copy() if table.uses_step else None)
    return out


def _assert_same(a: dict[str, object], b: dict[str, object]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], tuple):
            ids_a, values_a, slots_a, steps_a = a[key]  # type: ignore[misc]
            ids_b, values_b, slots_b, steps_b = b[key]  # type: ignore[misc]
            np.testing.assert_array_equal(ids_a, ids_b)
            np.testing.assert_array_equal(values_a, values_b)
            for slot in slots_a:
                np.testing.assert_array_equal(slots_a[slot], slots_b[slot])
            if steps_a is not None:
                np.testing.assert_array_equal(steps_a, steps_b)
        elif isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key])
        else:
            assert a[key] == b[key], key


def _save(state: ShardState, checkpoints: ShardCheckpoints) -> str:
    snap, _ = state.snapshot(delta=checkpoints.wants_delta())
    return checkpoints.save(snap).id


def _restored(checkpoints: ShardCheckpoints) -> tuple[dict[str, object], str]:
    loaded = checkpoints.load_newest()
    assert loaded is not None
    fresh = ShardState(0, 1)
    fresh.restore(loaded[0], loaded[1].id)
    return _view(fresh), loaded[1].id


def test_base_and_deltas_restore_what_a_full_checkpoint_does(tmp_path: Path) -> None:
    state, rng = _state(), np.random.default_rng(0)
    incremental = ShardCheckpoints(str(tmp_path / "inc"), 0, 1, deltas=3, keep=2)
    views, ids = [], []
    seq = 0
    for _round in range(6):
        for _ in range(8):
            _train(state, seq, rng)
            seq += 1
        ids.append(_save(state, incremental))
        views.append(_view(state))
    assert state.tables["emb"].counters().evicted > 100  # the deltas carried tombstones
    parents = [m.parent for m in sorted(incremental.manifests(), key=lambda m: m.id)]
    # Full, then 3 deltas each on the one before, then full again (keep=2 kept both chains).
    assert parents == ["", ids[0], ids[1], ids[2], "", ids[4]]
    restored, newest = _restored(incremental)
    assert newest == ids[-1]
    _assert_same(restored, views[-1])
    # The same state through a plain full checkpoint restores the same.
    full = ShardCheckpoints(str(tmp_path / "full"), 0, 1)
    full.save(state.snapshot()[0])
    _assert_same(_restored(full)[0], views[-1])


def test_a_delta_holds_only_what_changed(tmp_path: Path) -> None:
    state = ShardState(0, 1)
    state.declare([SPEC(name="emb", kind=SPEC.SPARSE, dim=16,
                        optimizer=OPT(kind=OPT.ADAGRAD, lr=0.1))])
    state.init_dense({})
    ids = np.arange(20_000, dtype=np.int64)
    state.push(BatchKey(0, 0, 0), {}, {"emb": (ids, np.ones((ids.size, 16), np.float32))})
    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1, deltas=4)
    base = checkpoints.save(state.snapshot(delta=checkpoints.wants_delta())[0])
    changed = ids[::100]  # 1% of the rows
    state.push(BatchKey(0, 0, 1), {}, {"emb": (changed, np.ones((changed.size, 16),
                                                                  np.float32))})
    snap, _ = state.snapshot(delta=checkpoints.wants_delta())
    assert snap.delta
    assert snap.sparse["emb"].ids.tolist() == changed.tolist()
    delta = checkpoints.save(snap)
    assert delta.parent == base.id
    assert delta.size < base.size / 50


def test_a_corrupt_link_falls_back_to_the_newest_whole_chain(tmp_path: Path) -> None:
    state, rng = _state(), np.random.default_rng(1)
    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1, deltas=2, keep=3)
    views = {}
    for seq in range(5):  # full, delta, delta, full, delta
        _train(state, seq, rng)
        views[_save(state, checkpoints)] = _view(state)
    ids = sorted(views)
    shard_dir = Path(checkpoints.dir)

    def corrupt(checkpoint_id: str) -> None:
        manifest = next(m for m in checkpoints.manifests() if m.id == checkpoint_id)
        path = shard_dir / manifest.data
        data = bytearray(path.read_bytes())
        data[-5] ^= 0xFF
        path.write_bytes(bytes(data))

    corrupt(ids[3])  # the second chain's base: its delta (ids[4]) cannot restore either
    restored, newest = _restored(checkpoints)
    assert newest == ids[2]
    _assert_same(restored, views[ids[2]])
    corrupt(ids[1])  # a delta in the middle of the first chain
    restored, newest = _restored(checkpoints)
    assert newest == ids[0]
    _assert_same(restored, views[ids[0]])


def test_pruning_keeps_whole_chains(tmp_path: Path) -> None:
    state, rng = _state(), np.random.default_rng(2)
    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1, deltas=1, keep=1)
    saved = []
    for seq in range(4):  # full, delta, full, delta
        _train(state, seq, rng)
        saved.append(_save(state, checkpoints))
    assert sorted(m.id for m in checkpoints.manifests()) == saved[2:]
    assert sorted(p.name for p in Path(checkpoints.dir).iterdir()) == sorted(
        f"ckpt-{i}.{ext}" for i in saved[2:] for ext in ("json", "safetensors"))


def test_a_failed_save_makes_the_next_one_full(tmp_path: Path) -> None:
    state, rng = _state(), np.random.default_rng(3)
    fail = {"now": False}

    def before_publish(path: str) -> None:
        if fail["now"]:
            raise OSError("disk full (injected)")

    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1, deltas=5,
                                   before_publish=before_publish)
    _train(state, 0, rng)
    _save(state, checkpoints)
    _train(state, 1, rng)
    fail["now"] = True
    with pytest.raises(OSError, match="injected"):
        _save(state, checkpoints)  # its snapshot took the change marks of push 1
    fail["now"] = False
    assert not checkpoints.wants_delta()
    _train(state, 2, rng)
    newest = _save(state, checkpoints)
    assert next(m for m in checkpoints.manifests() if m.id == newest).parent == ""
    restored, _ = _restored(checkpoints)
    _assert_same(restored, _view(state))


def test_a_manifest_naming_a_newer_parent_is_refused() -> None:
    from elasticps.pserver.checkpoint.manifest import Manifest
    good = Manifest(id="000000000002", shard=0, num_shards=1,
                    data="ckpt-000000000002.safetensors", size=1, sha256="0" * 64,
                    created_unix=1.0, parent="000000000001")
    assert Manifest.from_json(good.to_json()).parent == "000000000001"
    for parent in ("000000000002", "../x", 7):
        body = good.to_json().replace(b'"parent": "000000000001"',
                                      f'"parent": {parent!r}'.replace("'", '"').encode())
        with pytest.raises(CheckpointError):
            Manifest.from_json(body)
