"""A restore streams the checkpoint file into its tensors: the same arrays and digest as
parsing the whole file, refused when cut short, and no copy of the whole file held."""

from __future__ import annotations

import hashlib
import io
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from elasticps.errors import CheckpointError
from elasticps.proto import pserver_pb2
from elasticps.pserver.checkpoint import format as fmt
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.shard import BatchKey, ShardState

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
ROWS = 100_000


def _saved(tmp_path: Path) -> tuple[ShardCheckpoints, Path]:
    state = ShardState(0, 1)
    state.declare([SPEC(name="emb", kind=SPEC.SPARSE, dim=16,
                        optimizer=OPT(kind=OPT.ADAGRAD, lr=0.1)),
                   SPEC(name="w", kind=SPEC.DENSE, shape=[1000],
                        optimizer=OPT(kind=OPT.SGD, lr=0.1))])
    state.init_dense({"w": np.zeros(1000, np.float32)})
    ids = np.arange(ROWS, dtype=np.int64) * 3
    state.push(BatchKey(0, 0, 0), {"w": np.ones(1000, np.float32)},
               {"emb": (ids, np.ones((ROWS, 16), np.float32))})
    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1)
    manifest = checkpoints.save(state.snapshot()[0])
    return checkpoints, tmp_path / "shard-0-of-1" / manifest.data


def test_streaming_reads_what_parsing_the_whole_file_reads(tmp_path: Path) -> None:
    _, path = _saved(tmp_path)
    data = path.read_bytes()
    metadata, tensors, digest = fmt.read_stream(io.BytesIO(data), len(data))
    parsed_metadata, parsed = fmt.parse(data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert metadata == parsed_metadata
    assert sorted(tensors) == sorted(parsed)
    for name, array in parsed.items():
        np.testing.assert_array_equal(tensors[name], array)
        assert tensors[name].flags.writeable
        assert not np.shares_memory(tensors[name], parsed[name])  # its own array
    with pytest.raises(CheckpointError, match=r"ends .* early"):
        fmt.read_stream(io.BytesIO(data[:-100]), len(data))


def test_a_restore_holds_no_copy_of_the_whole_file(tmp_path: Path) -> None:
    checkpoints, path = _saved(tmp_path)
    size = path.stat().st_size
    assert size > ROWS * 16 * 4 * 2  # values and the Adagrad slot: ~13 MB
    tracemalloc.start()
    try:
        loaded = checkpoints.load_newest()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert loaded is not None
    np.testing.assert_array_equal(loaded[0].sparse["emb"].ids, np.arange(ROWS) * 3)
    # The snapshot's arrays are the file's contents once; reading the file whole and copying
    # the arrays out of it (as before) peaked at twice that.
    assert peak < 1.3 * size, (peak, size)


def test_the_restored_arrays_become_the_tables_storage(tmp_path: Path) -> None:
    """No second copy: the snapshot's sparse arrays are the table's after a restore, and a
    load + restore peaks under 2.3x the file (the table's hash index is the rest: ~0.7x);
    copying them into the table, as before, peaked at 2.85x."""
    checkpoints, path = _saved(tmp_path)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        loaded = checkpoints.load_newest()
        assert loaded is not None
        values = loaded[0].sparse["emb"].values
        state = ShardState(0, 1)
        state.restore(loaded[0], loaded[1].id)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    table = state.tables["emb"]
    assert table.values is values
    assert loaded[0].sparse["emb"].values.size == 0  # the snapshot let go of it
    np.testing.assert_array_equal(table.ids[:table.size], np.arange(ROWS) * 3)
    assert peak < 2.3 * size, (peak, size)
    # The adopted arrays train on: a push after the restore changes the row it names.
    before = state.pull_sparse("emb", np.array([3], np.int64)).copy()
    state.push(BatchKey(1, 0, 0), {}, {"emb": (np.array([3], np.int64),
                                               np.ones((1, 16), np.float32))})
    assert not np.array_equal(state.pull_sparse("emb", np.array([3], np.int64)), before)


def test_a_bounded_table_copies_each_array_into_its_capacity(tmp_path: Path) -> None:
    """A table with a row bound needs arrays of its capacity: each is copied, and the
    snapshot's is dropped as soon as it is, so the two are never held whole side by side."""
    state = ShardState(0, 1)
    spec = SPEC(name="emb", kind=SPEC.SPARSE, dim=4, optimizer=OPT(kind=OPT.SGD, lr=0.1),
                policy=pserver_pb2.SparsePolicy(evict=pserver_pb2.SparsePolicy.LRU,
                                                max_rows=5000))
    state.declare([spec])
    state.init_dense({})
    state.push(BatchKey(0, 0, 0), {}, {"emb": (np.arange(1000, dtype=np.int64),
                                               np.ones((1000, 4), np.float32))})
    snap, _ = state.snapshot()
    restored = ShardState(0, 1)
    restored.restore(snap, "test")
    table = restored.tables["emb"]
    assert table.values.shape == (5000, 4)  # the table's capacity, not the snapshot's rows
    assert snap.sparse["emb"].values.size == 0
    np.testing.assert_array_equal(table.values[:table.size], state.tables["emb"].values[:1000])
