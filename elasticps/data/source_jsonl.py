"""JSON Lines inputs: one JSON object per line, read in blocks of lines.

Each block (about 4 MiB of whole lines) goes to pyarrow's JSON reader first. Where that fails
(a line that is not JSON, or a key whose values change type within the block, such as ``1``
and ``"1"``), the block is read again line by line with Python's ``json`` module: a line that is
not a JSON object is a malformed row, and a key of mixed types is read as text (numbers in
their JSON spelling), which the converter then parses like CSV fields. Blank lines are skipped
and counted. A key missing from a line is a missing value. Inputs may be compressed.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.json as pajson

from elasticps.data.bad_rows import BadRow, BadRows
from elasticps.data.sources import BLOCK_SIZE, CountingFile, SourceBlock
from elasticps.errors import DataError

FIRST_KEYS_BYTES = 4 << 20  # column names are the keys seen in the first 4 MiB of lines


class JsonLinesSource:
    """One JSON Lines file (any fsspec URL)."""

    def __init__(self, url: str, *, bad: BadRows) -> None:
        self.name = url
        self.bad = bad
        self._counting: CountingFile | None = None
        self._names: tuple[str, ...] | None = None

    def column_names(self) -> tuple[str, ...]:
        """The keys of the first block's lines, in order of first appearance."""
        if self._names is None:
            with fsspec.open(self.name, "rb", compression="infer") as raw:
                data = raw.read(FIRST_KEYS_BYTES)
                if len(data) == FIRST_KEYS_BYTES:
                    data = data[: data.rfind(b"\n") + 1] or data
            keys: dict[str, None] = {}
            for line in data.splitlines():
                try:
                    row = json.loads(line) if line.strip() else None
                except ValueError:
                    continue  # reported with its line number when the rows are read
                if isinstance(row, dict):
                    keys.update(dict.fromkeys(row))
            self._names = tuple(keys)
        return self._names

    @property
    def bytes_read(self) -> int:
        return self._counting.bytes_read if self._counting is not None else 0

    def blocks(self, columns: Sequence[str]) -> Iterator[SourceBlock]:
        first_line = 1
        with fsspec.open(self.name, "rb", compression="infer") as raw:
            self._counting = CountingFile(raw)
            rest = b""
            while True:
                data = self._counting.read(BLOCK_SIZE)
                chunk = rest + data
                if not data:
                    if chunk.strip():
                        yield self._block(chunk, first_line, columns)
                    return
                cut = chunk.rfind(b"\n") + 1
                if cut == 0:
                    rest = chunk
                    continue
                block, rest = chunk[:cut], chunk[cut:]
                yield self._block(block, first_line, columns)
                first_line += block.count(b"\n")

    def _block(self, data: bytes, first_line: int, columns: Sequence[str]) -> SourceBlock:
        blank = _blank_lines(data)
        numbers = np.arange(first_line, first_line + blank.size, dtype=np.int64)
        try:
            table = pajson.read_json(io.BytesIO(data), read_options=pajson.ReadOptions(
                use_threads=False, block_size=max(len(data), 1) + 1))
            if table.num_rows != int((~blank).sum()):
                raise ValueError("rows and lines differ")
        except (pa.ArrowInvalid, ValueError):
            return self._block_slowly(data.split(b"\n")[: blank.size], numbers, blank, columns)
        arrays = {name: (table.column(name).combine_chunks() if name in table.column_names
                         else pa.nulls(table.num_rows)) for name in columns}
        return SourceBlock(arrays, numbers[~blank], blank=int(blank.sum()))

    def _block_slowly(self, lines: list[bytes], numbers: np.ndarray, blank: np.ndarray,
                      columns: Sequence[str]) -> SourceBlock:
        """Line by line, only for a block pyarrow could not read."""
        values: dict[str, list[Any]] = {name: [] for name in columns}
        kept: list[int] = []
        for line, number, empty in zip(lines, numbers, blank, strict=True):
            if empty:
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                self.bad.add(BadRow(self.name, int(number), None, f"not JSON: {exc}"))
                continue
            if not isinstance(row, dict):
                self.bad.add(BadRow(self.name, int(number), None,
                                    f"a {type(row).__name__}, not a JSON object"))
                continue
            kept.append(int(number))
            for name in columns:
                values[name].append(row.get(name))
        arrays = {name: json_column(name, column) for name, column in values.items()}
        return SourceBlock(arrays, np.array(kept, dtype=np.int64), blank=int(blank.sum()))


def _blank_lines(data: bytes) -> np.ndarray:
    """Which lines of ``data`` (whole lines, the last one ending in a newline or not) hold
    nothing but white space, without a Python loop over lines."""
    raw = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(raw == 10)
    if raw.size and raw[-1] != 10:
        ends = np.append(ends, raw.size)
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    ink = ~np.isin(raw, np.frombuffer(b" \t\r\n", dtype=np.uint8))
    counts = np.add.reduceat(np.append(ink, False).astype(np.int64), starts) if starts.size \
        else np.zeros(0, np.int64)
    # reduceat over an empty range gives the element at its start, not 0: mend those.
    empty = (ends - starts) == 0
    counts[empty] = 0
    return counts == 0


def json_column(name: str, values: list[Any]) -> pa.Array:
    """Python values of one key as an Arrow array; mixed types become text."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    if any(isinstance(value, list) for value in values):
        return pa.array([None if v is None else [_text(e) for e in (v if isinstance(v, list)
                                                                   else [v])] for v in values],
                        pa.list_(pa.string()))
    try:
        return pa.array([None if v is None else _text(v) for v in values], pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DataError(f"key {name!r} holds values that cannot be read: {exc}") from exc


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)
