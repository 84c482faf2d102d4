"""A dataset of a few thousand rows becomes several chunks (tasks), so that every trainer of a
job gets work; larger datasets keep their fixed-size chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from elasticps.data import open_dataset, write_dataset
from elasticps.errors import DataError
from tests.helpers import run_cli

SCHEMA = {"label": "y", "columns": {"x": "dense"}}


def table(rows: int) -> dict[str, np.ndarray]:
    return {"y": np.arange(rows) % 2, "x": np.arange(rows, dtype=np.float64)}


def chunk_rows(out: Path) -> list[int]:
    return [chunk.num_rows for chunk in open_dataset(str(out)).chunks]


@pytest.mark.parametrize(("rows", "expected"), [
    (3000, [600] * 5),  # 3000 // 512 = 5 chunks
    (3001, [601] * 4 + [597]),
    (1023, [1023]),  # two chunks would hold fewer than 512 rows each
    (20_000, [2500] * 8),
])
def test_rows_that_fit_in_one_chunk_are_split_into_up_to_eight(tmp_path: Path, rows: int,
                                                               expected: list[int]) -> None:
    write_dataset(table(rows), str(tmp_path / "ds"), SCHEMA)
    assert chunk_rows(tmp_path / "ds") == expected
    xs = np.concatenate([b.dense[:, 0] for b in open_dataset(str(tmp_path / "ds"))
                         .iter_batches(1000)])
    assert xs.size == rows  # every row once, in order (x is standardised: increasing)
    assert np.all(np.diff(xs) > 0)


def test_a_dataset_larger_than_a_chunk_keeps_fixed_size_chunks(tmp_path: Path) -> None:
    write_dataset(table(3000), str(tmp_path / "ds"), SCHEMA, rows_per_chunk=1000)
    assert chunk_rows(tmp_path / "ds") == [1000, 1000, 1000]
    write_dataset(table(3000), str(tmp_path / "one"), SCHEMA, min_chunks=1)
    assert chunk_rows(tmp_path / "one") == [3000]
    with pytest.raises(DataError, match="min_chunks=0 must be >= 1"):
        write_dataset(table(10), str(tmp_path / "bad"), SCHEMA, min_chunks=0)


def test_the_command_line_splits_a_small_csv_and_min_chunks_1_keeps_one(tmp_path: Path) -> None:
    src = tmp_path / "small.csv"
    src.write_text("y,x\n" + "".join(f"{i % 2},{i}\n" for i in range(2000)))
    schema = tmp_path / "s.yaml"
    schema.write_text("label: y\ncolumns:\n  x: dense\n")
    done = run_cli("data", "convert", "csv", str(src), "--schema", str(schema), "--out",
                   str(tmp_path / "ds"), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "wrote 2,000 rows in 3 chunks" in done.stdout
    done = run_cli("data", "convert", "csv", str(src), "--schema", str(schema), "--out",
                   str(tmp_path / "one"), "--no-progress", "--min-chunks", "1")
    assert done.returncode == 0, done.stderr
    assert chunk_rows(tmp_path / "one") == [2000]
