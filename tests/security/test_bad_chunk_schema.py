"""A dataset chunk whose Parquet schema is not the manifest's (a column of another type, a list
where a scalar belongs, a dropped column) is a DataError when read, never a KeyError that
crashes the trainer (the trainer reports a DataError as TaskFailed and goes on)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elasticps.data import open_dataset
from elasticps.data.synth import synth_ctr
from elasticps.errors import DataError

REPLACEMENTS = {
    "string": lambda n: pa.array(["x"] * n),
    "double": lambda n: pa.array([1.5] * n),
    "list": lambda n: pa.array([[1]] * n),
    "null": lambda n: pa.nulls(n, pa.int64()),
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    root = tmp_path_factory.mktemp("bad-chunk") / "ds"
    synth_ctr(str(root), 200, seed=1, rows_per_chunk=100, chunks_per_file=2)
    part = sorted(root.glob("part-*.parquet"))[0]
    return part, pq.read_table(part)


def _read_all(part: Path) -> None:
    for _ in open_dataset(str(part.parent)).iter_batches(50):
        pass


@pytest.mark.parametrize("column", ["label", "I1", "C1"])
@pytest.mark.parametrize("kind", sorted(REPLACEMENTS))
def test_a_column_of_another_type_is_a_data_error(dataset: tuple[Path, pa.Table], column: str,
                                                  kind: str) -> None:
    part, table = dataset
    index = table.schema.get_field_index(column)
    pq.write_table(table.set_column(index, column, REPLACEMENTS[kind](len(table))), part,
                   row_group_size=100)
    try:
        _read_all(part)
    except DataError:
        pass  # what may come out; anything else fails the test
    finally:
        pq.write_table(table, part, row_group_size=100)


def test_a_dropped_column_is_a_data_error(dataset: tuple[Path, pa.Table]) -> None:
    part, table = dataset
    pq.write_table(table.drop_columns(["C1"]), part, row_group_size=100)
    try:
        with pytest.raises(DataError, match="'C1'"):
            _read_all(part)
    finally:
        pq.write_table(table, part, row_group_size=100)
