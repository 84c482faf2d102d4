"""Reading datasets: the manifest, one chunk's raw rows, and model-ready batches.

``iter_batches(url, chunk, batch_size, start_record=k)`` reads one row group, turns it into
arrays once as the dataset's schema declares (:mod:`elasticps.data.chunk_decode`: hash +
normalise, vectorised), and yields slices. Deterministic: the same chunk,
offset, batch size, feature config and shuffle seed always give the same batches, in any
process. With ``shuffle_seed`` the chunk's rows are permuted by
``numpy.random.default_rng([shuffle_seed, crc32(chunk.path), chunk.row_group])`` first, and
``start_record`` counts rows of the permuted order, so a trainer that resumes a task at record
``k`` sees exactly the rows it had not seen.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from elasticps.data.batch import Batch
from elasticps.data.chunk_decode import decode_table
from elasticps.data.criteo_layout import DENSE_COLUMNS, LABEL, SPARSE_COLUMNS
from elasticps.data.criteo_preset import criteo_preset
from elasticps.data.features import FeatureConfig, declared_features
from elasticps.data.locations import resolve
from elasticps.data.manifest import ChunkRef, Manifest, read_manifest
from elasticps.data.schema import Schema
from elasticps.errors import DataError

DEFAULT_FEATURES = FeatureConfig()


@dataclass(frozen=True)
class RawColumns:
    """A chunk's rows before the feature transforms; ``*_missing`` mark nulls."""

    label: np.ndarray  # int8[n]
    dense: np.ndarray  # int32[n, 13]
    dense_missing: np.ndarray  # bool[n, 13]
    sparse: np.ndarray  # uint32[n, 26]
    sparse_missing: np.ndarray  # bool[n, 26]


_resolve = resolve  # a chunk's or split's URL: always inside the dataset (data/locations.py)


def _open_parquet(url: str, stack: ExitStack) -> pq.ParquetFile:
    """Open ``url``; files opened here are closed when ``stack`` closes."""
    fs, path = fsspec.core.url_to_fs(url)
    try:
        if isinstance(fs, LocalFileSystem):
            parquet = pq.ParquetFile(path)  # native reads, no Python file object in the way
        else:
            parquet = pq.ParquetFile(stack.enter_context(fs.open(path, "rb")), pre_buffer=True)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"cannot open Parquet file {url!r}: {exc}") from exc
    stack.callback(parquet.close)
    return parquet


def read_chunk_table(
    dataset_url: str, chunk: ChunkRef, columns: Sequence[str] | None = None
) -> pa.Table:
    """The rows of one chunk as an Arrow table (all columns unless ``columns`` is given)."""
    url = _resolve(dataset_url, chunk.path)
    with ExitStack() as stack:
        parquet = _open_parquet(url, stack)
        groups = parquet.metadata.num_row_groups
        if not 0 <= chunk.row_group < groups:
            raise DataError(
                f"chunk {chunk.key} names row group {chunk.row_group}; {url} has {groups}"
            )
        # From the file's metadata, before a byte of the row group is read: a small file may
        # decode to far more rows than its manifest says (50M rows of one repeated value).
        in_file = parquet.metadata.row_group(chunk.row_group).num_rows
        if in_file != chunk.num_rows:
            raise DataError(f"chunk {chunk.key} of {dataset_url} holds {in_file} rows but the "
                            f"manifest says {chunk.num_rows}; it was not read")
        if columns:
            present = set(parquet.schema_arrow.names)
            absent = [name for name in columns if name not in present]
            if absent:
                raise DataError(f"{url}: column(s) {', '.join(map(repr, absent))} of the "
                                f"manifest are not in the file (it has {sorted(present)})")
        try:
            table = parquet.read_row_group(
                chunk.row_group, columns=list(columns) if columns else None
            )
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"{url}: cannot read chunk {chunk.key} of {dataset_url}: "
                            f"{exc}") from exc
    return table


def _column_numpy(table: pa.Table, name: str, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """(values, missing) of a fixed-width column, straight from the Arrow buffers.

    Values in null slots are whatever the buffer holds; every user masks them with ``missing``.
    """
    column = table.column(name)
    array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    n = len(array)
    if array.type.bit_width != np.dtype(dtype).itemsize * 8:
        array = pc.cast(array, pa.from_numpy_dtype(np.dtype(dtype)))
    validity, data = array.buffers()
    itemsize = np.dtype(dtype).itemsize
    values = np.frombuffer(data, dtype=dtype, count=n, offset=array.offset * itemsize)
    if array.null_count == 0 or validity is None:
        return values, np.zeros(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return values, bits[array.offset : array.offset + n] == 0


def table_to_raw(table: pa.Table) -> RawColumns:
    """Arrow rows -> numpy arrays, one column at a time (no per-row Python).

    The 2-D arrays are column-major (Fortran order), so filling a column is one contiguous copy.
    """
    n = table.num_rows
    dense = np.empty((n, len(DENSE_COLUMNS)), dtype=np.int32, order="F")
    dense_missing = np.empty((n, len(DENSE_COLUMNS)), dtype=bool, order="F")
    sparse = np.empty((n, len(SPARSE_COLUMNS)), dtype=np.uint32, order="F")
    sparse_missing = np.empty((n, len(SPARSE_COLUMNS)), dtype=bool, order="F")
    for j, name in enumerate(DENSE_COLUMNS):
        dense[:, j], dense_missing[:, j] = _column_numpy(table, name, np.int32)
    for j, name in enumerate(SPARSE_COLUMNS):
        sparse[:, j], sparse_missing[:, j] = _column_numpy(table, name, np.uint32)
    label, _ = _column_numpy(table, LABEL, np.int8)
    return RawColumns(label, dense, dense_missing, sparse, sparse_missing)


def chunk_permutation(chunk: ChunkRef, shuffle_seed: int) -> np.ndarray:
    """The deterministic row order of a shuffled chunk (same in every process)."""
    rng = np.random.default_rng([shuffle_seed, zlib.crc32(chunk.path.encode()), chunk.row_group])
    return rng.permutation(chunk.num_rows)


def reading_schema(manifest: Manifest, features: FeatureConfig | None = None) -> Schema:
    """The schema a dataset's chunks are read with.

    Format 1 (the Criteo layout) reads as the Criteo preset with ``features``' id space and
    dense norm (default ``FeatureConfig()``). Format 2 reads as its manifest declares; a
    ``FeatureConfig`` there must be the default (taken to mean "as declared") or the one the
    schema declares (a converted Criteo dataset's, :func:`declared_features`): any other would
    ask for what the schema fixes otherwise.
    """
    if manifest.is_criteo_layout:
        chosen = features or DEFAULT_FEATURES
        return criteo_preset(chosen.id_space, chosen.dense_norm)
    if features is not None and features != DEFAULT_FEATURES:
        declared = declared_features(manifest.schema)
        if features != declared:
            says = (f"this one declares {declared}" if declared is not None
                    else "this one is not a Criteo dataset")
            raise DataError(f"{features} applies to Criteo-layout (format 1) datasets, or to a "
                            "converted Criteo dataset that declares it; a format-2 dataset "
                            f"declares its id spaces and norms in its schema, and {says}")
    return manifest.schema


def read_columns(schema: Schema) -> tuple[str, ...]:
    """The Parquet columns a reader needs: labels, weight, features."""
    return schema.source_columns()


def iter_batches(
    dataset_url: str,
    chunk: ChunkRef,
    batch_size: int,
    *,
    start_record: int = 0,
    features: FeatureConfig | None = None,
    shuffle_seed: int | None = None,
    schema: Schema | None = None,
) -> Iterator[Batch]:
    """Batches of one chunk from record ``start_record`` on; the last batch may be short.

    ``schema`` is the schema to read with (:func:`reading_schema`); without it the dataset's
    manifest is read (one small file) when the chunk is. ``features`` applies to
    Criteo-layout datasets (see :func:`reading_schema`). Arguments are checked at the call;
    the chunk is read when the first batch is asked for.
    """
    if batch_size < 1:
        raise DataError(f"batch_size={batch_size} must be >= 1")
    if not 0 <= start_record <= chunk.num_rows:
        raise DataError(
            f"start_record={start_record} is outside chunk {chunk.key} of {chunk.num_rows} rows"
        )
    if schema is not None and features is not None:
        raise DataError("pass either schema= or features=, not both")
    return _chunk_batches(dataset_url, chunk, batch_size, start_record, features, shuffle_seed,
                          schema)


def _chunk_batches(
    dataset_url: str,
    chunk: ChunkRef,
    batch_size: int,
    start_record: int,
    features: FeatureConfig | None,
    shuffle_seed: int | None,
    schema: Schema | None,
) -> Iterator[Batch]:
    if start_record == chunk.num_rows:
        return
    if schema is None:
        schema = reading_schema(read_manifest(dataset_url), features)
    table = read_chunk_table(dataset_url, chunk, read_columns(schema))
    if shuffle_seed is not None:
        table = table.take(chunk_permutation(chunk, shuffle_seed)[start_record:])
    elif start_record:
        table = table.slice(start_record)
    where = f"{_resolve(dataset_url, chunk.path)} (chunk {chunk.key})"
    whole = decode_table(table, schema, where)
    for begin in range(0, len(whole), batch_size):
        yield whole.slice(begin, min(begin + batch_size, len(whole)))


class Dataset:
    """An opened dataset directory: its manifest and readers over its chunks."""

    def __init__(self, url: str, manifest: Manifest) -> None:
        self.url = url
        self.manifest = manifest

    @property
    def chunks(self) -> tuple[ChunkRef, ...]:
        return self.manifest.chunks

    @property
    def num_rows(self) -> int:
        return self.manifest.num_rows

    @property
    def best_auc(self) -> float | None:
        return self.manifest.best_auc

    def split(self, name: str) -> Dataset:
        """A sibling split named in the manifest, e.g. ``split("test")`` of a synthetic set."""
        if name not in self.manifest.splits:
            known = ", ".join(sorted(self.manifest.splits)) or "none"
            raise DataError(f"dataset {self.url} has no split {name!r} (splits: {known})")
        return open_dataset(_resolve(self.url, self.manifest.splits[name]))

    def read_chunk(self, chunk: ChunkRef, columns: Sequence[str] | None = None) -> pa.Table:
        return read_chunk_table(self.url, chunk, columns)

    @property
    def schema(self) -> Schema:
        """The declared schema (format 1: the Criteo preset)."""
        return self.manifest.schema

    def iter_batches(
        self,
        batch_size: int,
        *,
        features: FeatureConfig | None = None,
        chunks: Iterable[ChunkRef] | None = None,
        shuffle_seed: int | None = None,
    ) -> Iterator[Batch]:
        """Batches over ``chunks`` (default: all, in manifest order); batches do not span chunks."""
        schema = reading_schema(self.manifest, features)
        for chunk in self.chunks if chunks is None else chunks:
            yield from iter_batches(
                self.url, chunk, batch_size, shuffle_seed=shuffle_seed, schema=schema
            )


def open_dataset(url: str) -> Dataset:
    """Open the dataset directory at ``url`` (a local path or any fsspec URL)."""
    return Dataset(url.rstrip("/") or url, read_manifest(url))
