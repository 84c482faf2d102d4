"""``checkpoint inspect`` shows per table the rows, admitted, evicted, bytes, and each
checkpoint's delta chain; the per-table counters survive a restore."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from elasticps.proto import pserver_pb2
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.checkpoint.inspection import format_report, inspect_url
from elasticps.pserver.shard import BatchKey, ShardState

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
POLICY = pserver_pb2.SparsePolicy
# id, value + Adam's two slots (dim 3, float32), int32 step, then the eviction bookkeeping:
# last pass (int32), last push (float64), push count (uint32)
ROW_BYTES = 8 + 3 * 4 * 3 + 4 + 4 + 8 + 4
SKETCH_BYTES = 4 * (1 << 20) * 2 + 8  # the admission sketch's uint16 counters and its aging


def _state() -> ShardState:
    state = ShardState(0, 1)
    state.declare([
        SPEC(name="w", kind=SPEC.DENSE, shape=[6], optimizer=OPT(kind=OPT.SGD, lr=0.1)),
        SPEC(name="emb", kind=SPEC.SPARSE, dim=3, optimizer=OPT(kind=OPT.ADAM, lr=0.1),
             policy=POLICY(admit_after=2, evict=POLICY.LRU, max_rows=300)),
    ])
    state.init_dense({"w": np.zeros(6, np.float32)})
    return state


def _train(state: ShardState, seq: int, rng: np.random.Generator) -> None:
    state.clock = lambda: float(seq)
    ids = np.unique(rng.integers(0, 1000, 200))
    state.push(BatchKey(0, 0, seq), {"w": np.ones(6, np.float32)},
               {"emb": (ids, rng.normal(size=(ids.size, 3)).astype(np.float32))})


def test_inspect_shows_counters_bytes_and_the_chain(tmp_path: Path) -> None:
    state, rng = _state(), np.random.default_rng(0)
    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1, deltas=2, keep=2)
    ids, rows = [], []
    for seq in range(3):  # full, delta, delta
        for k in range(4):
            _train(state, 4 * seq + k, rng)
        snap, _ = state.snapshot(delta=checkpoints.wants_delta())
        ids.append(checkpoints.save(snap).id)
        rows.append(state.tables["emb"].rows)
    counters = state.tables["emb"].counters()
    assert counters.admitted > 300
    assert counters.evicted > 0
    assert counters.dropped > 0

    reports = {r["id"]: r for r in inspect_url(str(tmp_path))}
    assert [reports[i]["chain"] for i in ids] == [ids[:1], ids[:2], ids]
    newest = {t["name"]: t for t in reports[ids[-1]]["tables"]}["emb"]
    assert (newest["admitted"], newest["evicted"], newest["dropped"]) == (
        counters.admitted, counters.evicted, counters.dropped)
    assert newest["bytes"] == (newest["rows"] * ROW_BYTES + 8 * newest["tombstones"]
                               + SKETCH_BYTES)
    base = {t["name"]: t for t in reports[ids[0]]["tables"]}
    assert base["emb"]["rows"] == rows[0]
    assert base["emb"]["bytes"] == rows[0] * ROW_BYTES + SKETCH_BYTES
    assert "tombstones" not in base["emb"]
    assert base["w"]["bytes"] == 6 * 4  # SGD: the values only
    text = format_report(reports[ids[-1]])
    assert f"chain    {ids[0]} <- {ids[1]} <- {ids[2]}" in text
    assert (f"{counters.admitted} admitted, {counters.evicted} evicted, "
            f"{counters.dropped} gradients dropped") in text

    # A broken link shows in the chain of every checkpoint on it.
    Path(reports[ids[1]]["manifest"]).unlink()
    reports = {r["id"]: r for r in inspect_url(str(tmp_path))}
    assert "not published" in reports[ids[2]]["chain"]
    assert "chain    broken" in format_report(reports[ids[2]])


def test_a_restore_keeps_the_tables_counters(tmp_path: Path) -> None:
    state, rng = _state(), np.random.default_rng(1)
    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1, deltas=1)
    for seq in range(2):  # full, then a delta: the delta's counters are the newest
        for k in range(4):
            _train(state, 4 * seq + k, rng)
        checkpoints.save(state.snapshot(delta=checkpoints.wants_delta())[0])
    loaded = checkpoints.load_newest()
    assert loaded is not None
    fresh = ShardState(0, 1)
    fresh.restore(loaded[0], loaded[1].id)
    assert fresh.tables["emb"].counters() == state.tables["emb"].counters()
    assert fresh.tables["emb"].counters().evicted > 0
