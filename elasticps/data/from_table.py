"""``write_dataset``: a table in memory -> a format-2 dataset, validated as the converters do.

::

    from elasticps.data import write_dataset
    write_dataset(df, "/data/mine", "schema.yaml")            # a pandas DataFrame
    write_dataset(table, "/data/mine", schema)                 # a pyarrow Table
    write_dataset({"clicked": y, "age": ages, "genres": [["a", "b"], [], ...]},
                  "/data/mine", {"label": "clicked", "columns": {...}})   # numpy arrays / lists

The rows go through the same checks, dtype decisions and statistics as ``elasticps data
convert`` (:func:`elasticps.data.convert.convert`), in blocks of 65,536 rows; a bad row is
reported as ``<source>:<row>:<column>: reason`` with its 1-based row number.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa

from elasticps.data.convert import ConvertReport, WriteOptions, convert
from elasticps.data.schema import Schema
from elasticps.data.sources import BLOCK_ROWS, SourceBlock
from elasticps.data.write_defaults import DEFAULT_MIN_CHUNKS
from elasticps.data.writer import (
    DEFAULT_CHUNKS_PER_FILE,
    DEFAULT_COMPRESSION,
    DEFAULT_ROWS_PER_CHUNK,
)
from elasticps.errors import DataError

SchemaLike = Schema | Mapping[str, Any] | str | os.PathLike[str]


def load_schema(schema: SchemaLike) -> Schema:
    """A :class:`Schema`, its user's form as a mapping, or the path (any fsspec URL) of a YAML
    schema file."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, Mapping):
        return Schema.from_dict(schema)
    path = os.fspath(schema)
    try:
        with fsspec.open(path, "rb") as handle:
            text = handle.read()
    except OSError as exc:
        raise DataError(f"cannot read the schema file {path!r}: {exc}") from exc
    return Schema.from_yaml(text, where=path)


class TableSource:
    """An Arrow table in memory, read in blocks of rows."""

    def __init__(self, table: pa.Table, name: str) -> None:
        self.table = table
        self.name = name
        self.bytes_read = 0

    def column_names(self) -> tuple[str, ...]:
        return tuple(self.table.column_names)

    def blocks(self, columns: Sequence[str]) -> Iterator[SourceBlock]:
        for start in range(0, self.table.num_rows, BLOCK_ROWS):
            part = self.table.slice(start, BLOCK_ROWS)
            lines = np.arange(start + 1, start + 1 + part.num_rows, dtype=np.int64)
            yield SourceBlock({name: part.column(name).combine_chunks() for name in columns},
                              lines)


def as_table(source: Any) -> tuple[pa.Table, str]:
    """A pyarrow Table (or RecordBatch), a pandas DataFrame, or a mapping of column name ->
    1-D numpy array / list (a list per row for multi-valued columns) as an Arrow table."""
    if isinstance(source, pa.Table):
        return source, "Table"
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source]), "RecordBatch"
    if type(source).__module__.startswith("pandas") and hasattr(source, "columns"):
        return pa.Table.from_pandas(source, preserve_index=False), "DataFrame"
    if isinstance(source, Mapping):
        arrays = {}
        for name, values in source.items():
            if isinstance(values, np.ndarray) and values.ndim != 1:
                raise DataError(f"column {name!r} is a {values.ndim}-D array; give one 1-D "
                                "array per column")
            try:
                arrays[str(name)] = pa.array(values if not isinstance(values, np.ndarray) or
                                             values.dtype != object else list(values))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise DataError(f"column {name!r} cannot be read as one Arrow column: "
                                f"{exc}") from exc
        lengths = {name: len(array) for name, array in arrays.items()}
        if len(set(lengths.values())) > 1:
            raise DataError(f"columns have different lengths: {lengths}")
        return pa.table(arrays), "dict"
    raise DataError(f"write_dataset takes a pyarrow Table, a pandas DataFrame or a dict of "
                    f"arrays, not {type(source).__name__}")


def write_dataset(
    source: Any,
    out: str,
    schema: SchemaLike,
    *,
    rows_per_chunk: int = DEFAULT_ROWS_PER_CHUNK,
    chunks_per_file: int = DEFAULT_CHUNKS_PER_FILE,
    compression: str = DEFAULT_COMPRESSION,
    overwrite: bool = False,
    max_bad_rows: int = 0,
    ignore_extra: bool = False,
    like: str | None = None,
    min_chunks: int = DEFAULT_MIN_CHUNKS,
    source_info: Mapping[str, Any] | None = None,
) -> ConvertReport:
    """Write ``source`` (see :func:`as_table`) as a dataset at ``out`` with ``schema``.

    Raises :class:`~elasticps.errors.MalformedInputError` when more than ``max_bad_rows`` rows
    are bad (nothing is written then); ``like`` takes dtypes and dense statistics from another
    dataset (e.g. write a test split like its training set); rows that fit in one chunk are
    split into up to ``min_chunks`` (see :mod:`~elasticps.data.writer`); ``source_info`` is
    recorded in the manifest's ``source`` beside the conversion's own fields. Returns the report,
    whose ``manifest`` describes the dataset written.
    """
    table, kind = as_table(source)
    return convert(
        [TableSource(table, kind)], load_schema(schema), out,
        options=WriteOptions(rows_per_chunk, chunks_per_file, compression, overwrite, min_chunks),
        max_bad_rows=max_bad_rows, ignore_extra=ignore_extra, like=like,
        source_info={**(source_info or {}), "kind": "write_dataset", "from": kind})
