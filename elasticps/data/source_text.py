"""CSV and TSV inputs, streamed by pyarrow's CSV reader with every field read as text.

Fields may be quoted (``"a, b"``; a doubled ``""`` is a quote inside one; spaces around the
quotes are allowed; ``quoting=False`` reads quotes as plain characters) but a quoted value may
not span lines, so that every row's line number is known; the reader runs serially (4 MiB
blocks) in a background thread one block ahead. The first line is the header unless
``header=False``, in which case the file's columns are, in order, the schema's
:meth:`~elasticps.data.schema.Schema.source_columns` (labels, weight, features); a caller that
names the columns itself passes ``names`` (the header line, if any, is then skipped unread). A
UTF-8 byte order mark is ignored. A column the header leaves unnamed is named ``Unnamed: N`` (N
its 0-based position), as pandas names it. A line with the wrong number of fields, or a field
that is not UTF-8, is a malformed row; a line whose every field is empty is a blank line,
skipped and counted. Inputs may be compressed (``.gz``, ``.bz2``, ``.xz``, ``.zst``).
"""

from __future__ import annotations

import csv
import threading
from collections.abc import Iterator, Sequence
from contextlib import closing
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from elasticps.data.bad_rows import BadRow, BadRows
from elasticps.data.prefetch import prefetch
from elasticps.data.sources import BLOCK_SIZE, CountingFile, SourceBlock, read_first_line
from elasticps.errors import DataError

EXTRA_PREFIX = "_extra_field_"
UNNAMED = "Unnamed: "  # + the 0-based position: a column the header leaves unnamed


class TextSource:
    """One CSV/TSV file (any fsspec URL)."""

    def __init__(self, url: str, *, delimiter: str, header: bool,
                 order: Sequence[str], bad: BadRows, names: Sequence[str] | None = None,
                 quoting: bool = True) -> None:
        self.name = url
        self.delimiter = delimiter
        self.header = header
        self.bad = bad
        self.quoting = quoting
        self._counting: CountingFile | None = None
        self._names = (tuple(names) if names is not None
                       else _column_names(url, delimiter, header, order))

    def column_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def bytes_read(self) -> int:
        return self._counting.bytes_read if self._counting is not None else 0

    def blocks(self, columns: Sequence[str]) -> Iterator[SourceBlock]:
        skipped: list[int] = []  # physical lines the CSV reader skipped (wrong field count)
        lock = threading.Lock()

        def on_invalid_row(row: Any) -> str:
            number = int(row.number) if row.number is not None else -1
            with lock:
                skipped.append(number)
            self.bad.add(BadRow(self.name, number, None,
                                f"expected {row.expected_columns} fields, found "
                                f"{row.actual_columns}"))
            return "skip"

        header_lines = 1 if self.header else 0
        read_options = pacsv.ReadOptions(
            use_threads=False,  # line numbers are only known when reading serially
            block_size=BLOCK_SIZE, column_names=list(self._names), skip_rows=header_lines)
        parse_options = pacsv.ParseOptions(
            delimiter=self.delimiter, quote_char='"' if self.quoting else False,
            double_quote=True, newlines_in_values=False, ignore_empty_lines=False,
            invalid_row_handler=on_invalid_row)
        # UTF-8 is checked per field (_text_rows), so that a bad byte costs one row, not the file.
        convert_options = pacsv.ConvertOptions(
            column_types={name: pa.string() for name in self._names},
            include_columns=list(columns), strings_can_be_null=False,
            quoted_strings_can_be_null=False, null_values=[], check_utf8=False)
        delivered = 0
        with fsspec.open(self.name, "rb", compression="infer") as raw:
            self._counting = CountingFile(raw)
            try:
                reader = pacsv.open_csv(self._counting, read_options=read_options,
                                        parse_options=parse_options,
                                        convert_options=convert_options)
                with closing(prefetch(reader, depth=2, name="elasticps-csv-reader")) as batches:
                    for batch in batches:
                        lines = np.arange(delivered, delivered + batch.num_rows,
                                          dtype=np.int64) + header_lines + 1
                        with lock:
                            for line in sorted(skipped):  # ascending: each shifts later lines
                                lines += lines >= line
                        delivered += batch.num_rows
                        yield self._text_rows(batch, columns, lines)
            except pa.ArrowInvalid as exc:
                raise DataError(f"{self.name}: cannot read as delimited text: {exc}") from exc

    def _text_rows(self, batch: pa.RecordBatch, columns: Sequence[str],
                   lines: np.ndarray) -> SourceBlock:
        """The block without its rows that hold bytes that are not UTF-8 (reported here) and
        its blank lines (counted)."""
        arrays = {name: batch.column(name) for name in columns}
        keep = np.ones(batch.num_rows, dtype=bool)
        for name, array in arrays.items():
            for row, text in _not_utf8(array):
                if keep[row]:  # a row is reported once, at its first bad column
                    keep[row] = False
                    self.bad.add(BadRow(self.name, int(lines[row]), name,
                                        f"{text!r} is not UTF-8 text"))
        if not keep.all():
            mask = pa.array(keep)
            arrays = {name: array.filter(mask) for name, array in arrays.items()}
            lines = lines[keep]
        if self.quoting:
            arrays = {name: _unquote_spaced(array) for name, array in arrays.items()}
        return _without_blank_lines(arrays, lines)


def _column_names(url: str, delimiter: str, header: bool,
                  order: Sequence[str]) -> tuple[str, ...]:
    """The file's columns: its header's names, else the schema's ``order``."""
    first = read_first_line(url)
    fields = next(csv.reader([first], delimiter=delimiter), [])
    if header:
        # An empty name (the index pandas' to_csv writes) is named as pandas reads it back.
        names = [name.strip() or f"{UNNAMED}{i}" for i, name in enumerate(fields)]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise DataError(f"{url}: the header names column(s) {duplicates} twice")
        return tuple(names)
    # Without a header the schema says the order; more fields than it names are extra
    # columns (an error unless the converter is told to ignore them).
    count = max(len(fields), 1)
    names = list(order[:count])
    names += [f"{EXTRA_PREFIX}{i + 1}" for i in range(len(names), count)]
    return tuple(names)


def _not_utf8(array: pa.Array) -> list[tuple[int, str]]:
    """(row, text with the bad bytes escaped) of the values of a string array (read unchecked)
    that are not UTF-8: a look at the bytes (ASCII is UTF-8), a validation pass if some are not
    ASCII, and a look at each value only when that fails."""
    data = array.buffers()[2]
    if data is None or np.frombuffer(data, dtype=np.uint8).max(initial=0) < 0x80:
        return []
    try:
        array.validate(full=True)
        return []
    except pa.ArrowInvalid:
        pass
    bad = []
    for row, value in enumerate(array.cast(pa.binary()).to_pylist()):
        try:
            if value is not None:
                value.decode("utf-8")
        except UnicodeDecodeError:
            bad.append((row, value.decode("utf-8", "backslashreplace")))
    return bad


_SPACED_QUOTES = r'^\s+"(.*)"\s*$|^\s*"(.*)"\s+$'


def _unquote_spaced(array: pa.Array) -> pa.Array:
    """``  "FR" ``: a quoted value with spaces outside the quotes, which the CSV reader only
    unquotes when the quote opens the field, loses its quotes too."""
    spaced = pc.match_substring_regex(array, _SPACED_QUOTES)
    if not pc.any(spaced).as_py():
        return array
    inner = pc.replace_substring_regex(pc.utf8_trim_whitespace(array), r'^"(.*)"$', r"\1")
    return pc.if_else(spaced, pc.replace_substring(inner, '""', '"'), array)


def _blank(array: pa.Array) -> np.ndarray:
    length = pc.utf8_length(pc.utf8_trim_whitespace(array))
    return np.asarray(pc.equal(length, 0).to_numpy(zero_copy_only=False), dtype=bool)


def _without_blank_lines(arrays: dict[str, pa.Array], lines: np.ndarray) -> SourceBlock:
    """A line is blank when every field is empty or spaces; columns are looked at only while
    some line may still be blank (most blocks: the first column settles it)."""
    blank = np.ones(lines.size, dtype=bool)
    for array in arrays.values():
        if not blank.any():
            break
        blank &= _blank(array)
    if not arrays or not blank.any():
        return SourceBlock(arrays, lines)
    keep = pa.array(~blank)
    return SourceBlock({name: array.filter(keep) for name, array in arrays.items()},
                       lines[~blank], blank=int(blank.sum()))
