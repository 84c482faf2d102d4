from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elasticps.data import Batch, ChunkRef, FeatureConfig, iter_batches, open_dataset
from elasticps.data.criteo_layout import SPARSE_COLUMNS
from elasticps.data.dataset import read_chunk_table
from elasticps.data.synth import synth_ctr
from elasticps.errors import DataError
from tests.helpers import REPO


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("reader") / "ctr"
    synth_ctr(str(out), 2500, 3, rows_per_chunk=1000, progress=False)
    return str(out)


def stack(batches: list[Batch]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (
        np.concatenate([b.dense for b in batches]),
        np.concatenate([b.stack_ids(SPARSE_COLUMNS) for b in batches]),
        np.concatenate([b.label for b in batches]),
    )


def digest(batches: list[Batch]) -> str:
    h = hashlib.sha256()
    for b in batches:
        for a in (b.dense, b.stack_ids(SPARSE_COLUMNS), b.label):
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def test_batches_have_the_contract_shapes_and_types(dataset: str) -> None:
    ds = open_dataset(dataset)
    features = FeatureConfig(id_space=1000)
    batches = list(iter_batches(dataset, ds.chunks[2], 64, features=features))
    assert [len(b) for b in batches] == [64, 64, 64, 64, 64, 64, 64, 52]  # 500-row last chunk
    b = batches[0]
    assert (b.dense.dtype, b.dense.shape) == (np.float32, (64, 13))
    sparse = b.stack_ids(SPARSE_COLUMNS)
    assert b.dense_names == tuple(f"I{i}" for i in range(1, 14))
    assert (sparse.dtype, sparse.shape) == (np.int64, (64, 26))
    assert (b.label.dtype, b.label.shape) == (np.float32, (64,))
    assert sparse.min() >= 0
    assert sparse.max() < 1000
    assert set(np.unique(b.label)) <= {0.0, 1.0}
    assert all(a.flags.c_contiguous for a in (b.dense, b.label, *b.ids.values()))
    tensors = b.to_torch()
    assert tuple(tensors.dense.shape) == (64, 13)
    assert str(tensors.ids["C1"].dtype) == "torch.int64"
    assert float(tensors.label.sum()) == float(b.label.sum())


@pytest.mark.parametrize("shuffle_seed", [None, 7])
def test_offset_resumes_exactly_where_reading_stopped(
    dataset: str, shuffle_seed: int | None
) -> None:
    chunk = open_dataset(dataset).chunks[0]
    full = stack(list(iter_batches(dataset, chunk, 100, shuffle_seed=shuffle_seed)))
    for start in (0, 1, 333, 999):
        tail = stack(list(iter_batches(
            dataset, chunk, 100, start_record=start, shuffle_seed=shuffle_seed
        )))
        for whole, part in zip(full, tail, strict=True):
            np.testing.assert_array_equal(whole[start:], part)
    assert list(iter_batches(dataset, chunk, 100, start_record=1000)) == []


def test_shuffle_is_a_seeded_permutation_of_the_chunk(dataset: str) -> None:
    chunk = open_dataset(dataset).chunks[1]
    plain = stack(list(iter_batches(dataset, chunk, 256)))
    a = stack(list(iter_batches(dataset, chunk, 256, shuffle_seed=1)))
    b = stack(list(iter_batches(dataset, chunk, 256, shuffle_seed=1)))
    c = stack(list(iter_batches(dataset, chunk, 256, shuffle_seed=2)))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[1], c[1])
    assert not np.array_equal(a[1], plain[1])
    # Same rows, other order.
    def sorted_rows(rows: np.ndarray) -> np.ndarray:
        return rows[np.lexsort(rows.T[::-1])]

    np.testing.assert_array_equal(sorted_rows(a[1]), sorted_rows(plain[1]))


@pytest.mark.slow
def test_same_chunk_offset_and_batch_size_give_the_same_batches_in_another_process(
    dataset: str,
) -> None:
    chunk = open_dataset(dataset).chunks[1]
    here = digest(list(iter_batches(dataset, chunk, 128, start_record=77, shuffle_seed=5)))
    script = (
        "import hashlib, json, sys, numpy as np\n"
        "from elasticps.data import ChunkRef, iter_batches\n"
        "c = ChunkRef(**json.loads(sys.argv[2]))\n"
        "h = hashlib.sha256()\n"
        "cols = [f'C{i}' for i in range(1, 27)]\n"
        "for b in iter_batches(sys.argv[1], c, 128, start_record=77, shuffle_seed=5):\n"
        "    [h.update(np.ascontiguousarray(a).tobytes())\n"
        "     for a in (b.dense, b.stack_ids(cols), b.label)]\n"
        "print(h.hexdigest())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, dataset, json.dumps(chunk.to_dict())],
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "123"},
        capture_output=True, text=True, check=True, timeout=120,
    )
    assert out.stdout.strip() == here


def test_dataset_iterates_all_chunks_in_order(dataset: str) -> None:
    ds = open_dataset(dataset)
    every = stack(list(ds.iter_batches(300)))
    assert every[2].shape == (2500,)
    one_by_one = [stack(list(iter_batches(dataset, c, 300))) for c in ds.chunks]
    np.testing.assert_array_equal(every[1], np.concatenate([p[1] for p in one_by_one]))


def test_fsspec_urls_work_for_writing_and_reading(dataset: str) -> None:
    url = "memory://elasticps-test/ctr"
    synth_ctr(url, 300, 3, rows_per_chunk=100, progress=False, overwrite=True)
    ds = open_dataset(url)
    remote = stack(list(ds.iter_batches(50)))
    local_chunk = ChunkRef("part-00000.parquet", 0, 1000)
    local = stack(list(iter_batches(dataset, local_chunk, 50)))
    np.testing.assert_array_equal(remote[1], local[1][:300])  # same seed, same first rows
    file_url = "file://" + dataset
    np.testing.assert_array_equal(
        stack(list(iter_batches(file_url, local_chunk, 50)))[0], local[0]
    )


def test_bad_requests_name_the_problem(dataset: str, tmp_path: Path) -> None:
    chunk = open_dataset(dataset).chunks[0]
    # Bad arguments fail at the call, before any batch is asked for.
    with pytest.raises(DataError, match="start_record=1001"):
        iter_batches(dataset, chunk, 10, start_record=1001)
    with pytest.raises(DataError, match="batch_size=0"):
        iter_batches(dataset, chunk, 0)
    with pytest.raises(DataError, match="row group 9"):
        list(iter_batches(dataset, ChunkRef(chunk.path, 9, 10), 10))
    with pytest.raises(DataError, match="manifest says 999"):
        list(iter_batches(dataset, ChunkRef(chunk.path, 0, 999), 10))
    with pytest.raises(DataError, match=r"no manifest\.json"):
        open_dataset(str(tmp_path))
    (tmp_path / "manifest.json").write_text('{"format": "elasticps-ctr", "format_version": 9}')
    with pytest.raises(DataError, match="format_version 9"):
        open_dataset(str(tmp_path))


def test_a_chunk_of_more_rows_than_its_manifest_says_is_refused_unread(tmp_path: Path) -> None:
    # A small file (under 100 KiB) of 50M rows in one row group, where the manifest says 10:
    # reading the row group to count its rows would decode hundreds of MiB.
    rows = 50_000_000
    pq.write_table(pa.table({"x": pa.nulls(rows, pa.int8())}), tmp_path / "part-0.parquet",
                   row_group_size=rows, compression="none")
    assert (tmp_path / "part-0.parquet").stat().st_size < 1 << 20
    default = pa.default_memory_pool()
    counted = pa.proxy_memory_pool(default)  # what Arrow allocates while the chunk is read
    pa.set_memory_pool(counted)
    try:
        with pytest.raises(DataError, match="holds 50000000 rows but the manifest says 10"):
            read_chunk_table(str(tmp_path), ChunkRef("part-0.parquet", 0, 10))
    finally:
        pa.set_memory_pool(default)
    assert counted.max_memory() < 1 << 20
