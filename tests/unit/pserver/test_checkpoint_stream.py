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
from elasticps.pserver import checkpoint_format as fmt
from elasticps.pserver.checkpoint import ShardCheckpoints
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
