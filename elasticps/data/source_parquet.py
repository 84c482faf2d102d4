"""Parquet inputs (someone else's Parquet files, not elasticps datasets), read a block of rows
at a time with their types: integers, floats, strings, booleans, lists and dictionaries (a
DataFrame's categoricals) are what the converter takes. Rows are reported by their 1-based row
number in the file."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from elasticps.data.sources import BLOCK_ROWS, SourceBlock
from elasticps.errors import DataError


class ParquetSource:
    """One Parquet file (any fsspec URL)."""

    def __init__(self, url: str) -> None:
        self.name = url
        self._bytes = 0
        try:
            with fsspec.open(url, "rb") as handle:
                schema = pq.read_schema(handle)
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"{url}: cannot read as Parquet: {exc}") from exc
        self._names = tuple(schema.names)

    def column_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def bytes_read(self) -> int:
        return self._bytes

    def blocks(self, columns: Sequence[str]) -> Iterator[SourceBlock]:
        first = 1
        with fsspec.open(self.name, "rb") as handle:
            try:
                parquet = pq.ParquetFile(handle)
                for batch in parquet.iter_batches(batch_size=BLOCK_ROWS, columns=list(columns)):
                    lines = np.arange(first, first + batch.num_rows, dtype=np.int64)
                    first += batch.num_rows
                    self._bytes = handle.tell() if hasattr(handle, "tell") else 0
                    yield SourceBlock({name: batch.column(name) for name in columns}, lines)
            except (OSError, pa.ArrowException) as exc:
                raise DataError(f"{self.name}: cannot read as Parquet: {exc}") from exc
