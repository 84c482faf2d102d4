"""What every input reader gives the converter: blocks of raw columns, each row with its line.

A reader (``source_text``, ``source_jsonl``, ``source_parquet``, or a table handed to
``write_dataset``) knows its column names up front and yields :class:`SourceBlock` s of the
columns asked for, as read (text, or typed Arrow values): the converter validates and types
them (:mod:`elasticps.data.rows`). Rows a reader cannot even split (a wrong number of fields, a
line that is not JSON) it reports itself to the :class:`~elasticps.data.bad_rows.BadRows` of
the run, with their line numbers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import fsspec
import numpy as np
import pyarrow as pa

BLOCK_SIZE = 4 << 20  # bytes of text per block
BLOCK_ROWS = 65_536  # rows per block of a table


@dataclass(frozen=True)
class SourceBlock:
    columns: dict[str, pa.Array]
    lines: np.ndarray  # int64 [rows]: the physical line (text files) or 1-based row (tables)
    blank: int = 0  # empty lines dropped from this block (counted, not malformed)

    @property
    def num_rows(self) -> int:
        return int(self.lines.size)


class Source(Protocol):
    """One input: a file or a table."""

    name: str  # how reports name it, e.g. the file's URL

    def column_names(self) -> tuple[str, ...]:
        """The columns the input has (its header, keys or Parquet columns)."""
        ...

    def blocks(self, columns: Sequence[str]) -> Iterator[SourceBlock]:
        """Blocks of ``columns`` (a column absent from a block comes as all nulls)."""
        ...

    @property
    def bytes_read(self) -> int:
        """Input bytes consumed so far (for the progress line; 0 if unknown)."""
        ...


class CountingFile:
    """A read-only file wrapper that counts the bytes handed out, for progress."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.bytes_read = 0
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        data: bytes = self.raw.read(size)
        self.bytes_read += len(data)
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self.bytes_read

    def close(self) -> None:
        self.closed = True


def read_first_line(url: str) -> str:
    """The first line of a (possibly compressed) text input, without its line break."""
    with fsspec.open(url, "rb", compression="infer") as raw:
        line = bytes(raw.readline(1 << 20)).decode("utf-8", "replace")
    return line.removeprefix("\ufeff").rstrip("\r\n")
