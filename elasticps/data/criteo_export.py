"""Writes dataset rows back out as Criteo text (for benchmarks, tests, and other tools).

The output is what :mod:`elasticps.data.criteo_convert` reads: ``label, I1..I13, C1..C26``
with missing values as empty fields and categoricals as 8 lowercase hex digits, tab separated
by default.
Hex formatting is vectorised, so writing runs at Arrow's CSV speed.
"""

from __future__ import annotations

from collections.abc import Iterable

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from elasticps.data.criteo_layout import DENSE_COLUMNS, FEATURE_COLUMNS, LABEL, SPARSE_COLUMNS
from elasticps.data.dataset import open_dataset

_HEX_CHARS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def format_hex_column(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """uint32 values -> 8-hex-digit strings; nulls -> empty strings."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    missing = (
        np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if column.null_count
        else np.zeros(n, dtype=bool)
    )
    values = pc.fill_null(column, 0).to_numpy().astype(">u4")
    octets = values.view(np.uint8).reshape(n, 4)
    chars = np.empty((n, 8), dtype=np.uint8)
    chars[:, 0::2] = _HEX_CHARS[octets >> 4]
    chars[:, 1::2] = _HEX_CHARS[octets & 15]
    lengths = np.where(missing, 0, 8).astype(np.int32)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = np.ascontiguousarray(chars[~missing]).ravel()
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def table_to_text_columns(table: pa.Table) -> pa.Table:
    """A dataset table -> a table of Criteo text fields (all strings)."""
    columns: list[pa.Array | pa.ChunkedArray] = [pc.cast(table.column(LABEL), pa.string())]
    columns += [pc.cast(table.column(name), pa.string()) for name in DENSE_COLUMNS]
    columns += [format_hex_column(table.column(name)) for name in SPARSE_COLUMNS]
    return pa.Table.from_arrays(columns, names=list(FEATURE_COLUMNS))


def write_criteo_text(
    tables: Iterable[pa.Table], out_url: str, *, delimiter: str = "\t", header: bool = False
) -> int:
    """Write tables (dataset schema) to ``out_url`` as Criteo text; returns the rows written."""
    rows = 0
    options = pacsv.WriteOptions(include_header=False, delimiter=delimiter, quoting_style="none")
    with fsspec.open(out_url, "wb", compression="infer") as out:
        if header:
            out.write((delimiter.join(FEATURE_COLUMNS) + "\n").encode())
        for table in tables:
            pacsv.write_csv(table_to_text_columns(table), out, write_options=options)
            rows += table.num_rows
    return rows


def dataset_to_criteo_text(
    dataset_url: str, out_url: str, *, delimiter: str = "\t", header: bool = False
) -> int:
    """Write a whole dataset as Criteo text, chunk by chunk (constant memory)."""
    dataset = open_dataset(dataset_url)
    tables = (dataset.read_chunk(chunk, FEATURE_COLUMNS) for chunk in dataset.chunks)
    return write_criteo_text(tables, out_url, delimiter=delimiter, header=header)
