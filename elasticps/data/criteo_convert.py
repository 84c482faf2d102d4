"""Criteo display-ads text -> a chunked Parquet dataset, streaming in constant memory.

Input lines are ``label, I1..I13, C1..C26``, tab separated (the Kaggle / 1TB release), or comma
separated. The first line of each input decides: it holds a tab -> tab separated, else commas;
it names the columns (``label``, ``I1``.., ``C1``..; case does not matter, extra columns such as
``Id`` are ignored) -> it is a header. Inputs may be any fsspec URL and may be compressed
(``.gz``, ``.bz2``, ``.xz``, ``.zst`` by extension).

pyarrow's streaming CSV reader splits fields (no quoting, one thread so that line numbers are
known); :mod:`elasticps.data.criteo_columns` turns the string columns into typed columns. A line is
malformed when it has the wrong number of fields, an empty label or a label other than 0/1, an
integer that is not an int32 (surrounding spaces, a ``+`` sign and integral floats such as
``260.0`` are accepted, as in every converter), or a categorical that is not 8 hex digits.
Malformed lines are skipped, counted and reported as ``input:line:column: reason`` (``input:line:
reason`` for a wrong field count); past ``max_bad_rows`` the conversion fails and deletes what it
wrote. Empty lines are skipped and counted, not treated as malformed.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.csv as pacsv

from elasticps.data.bad_rows import MAX_REPORTED
from elasticps.data.criteo_columns import parse_block
from elasticps.data.criteo_layout import FEATURE_COLUMNS, arrow_schema
from elasticps.data.manifest import Manifest
from elasticps.data.prefetch import prefetch
from elasticps.data.progress import Progress
from elasticps.data.sources import BLOCK_SIZE, CountingFile, read_first_line
from elasticps.data.writer import (
    DEFAULT_CHUNKS_PER_FILE,
    DEFAULT_COMPRESSION,
    DEFAULT_ROWS_PER_CHUNK,
    DatasetWriter,
)
from elasticps.errors import DataError, MalformedInputError

log = logging.getLogger(__name__)



@dataclass
class ConvertReport:
    """What a conversion did. ``bad_lines`` holds the first few (location, reason) pairs."""

    rows: int = 0
    bad_rows: int = 0
    blank_lines: int = 0
    bad_lines: list[tuple[str, str]] = field(default_factory=list)
    manifest: Manifest | None = None


@dataclass(frozen=True)
class TextLayout:
    """How one input file is laid out: separator, header, and its column names."""

    delimiter: str
    header: bool
    column_names: tuple[str, ...]
    include: tuple[str, ...]  # the file's names of label, I1..I13, C1..C26, in that order


def sniff_layout(first_line: str, where: str) -> TextLayout:
    """Decide separator and header from the first line of an input."""
    line = first_line.rstrip("\r\n")
    if "\t" in line:
        delimiter = "\t"
    elif "," in line:
        delimiter = ","
    else:
        raise DataError(f"{where}: the first line has neither tabs nor commas: {line[:80]!r}")
    fields = [name.strip() for name in line.split(delimiter)]
    lowered = [name.lower() for name in fields]
    if "i1" not in lowered and "c1" not in lowered:
        return TextLayout(delimiter, False, FEATURE_COLUMNS, FEATURE_COLUMNS)
    missing = [name for name in FEATURE_COLUMNS if name.lower() not in lowered]
    if missing:
        raise DataError(
            f"{where}: the header line lacks column(s) {', '.join(missing)}; it has {fields}"
        )
    # Duplicate or empty header names would confuse the reader; rename everything positionally.
    names = tuple(f"f{i}" for i in range(len(fields)))
    include = tuple(names[lowered.index(name.lower())] for name in FEATURE_COLUMNS)
    return TextLayout(delimiter, True, names, include)


_WHERE = re.compile(r"^(?P<path>.*):(?P<line>-?[0-9]+)(?::(?P<column>[A-Za-z0-9_]+))?$")


def _line_key(where: str) -> tuple[str, int]:
    """``"path:12"`` or ``"path:12:I3"`` -> ``("path", 12)``, for sorting reports of several
    inputs."""
    match = _WHERE.match(where)
    return (match["path"], int(match["line"])) if match else (where, -1)


def _line_of(row: int, header_lines: int, skipped: list[int]) -> int:
    """Physical line number of the ``row``-th delivered row, given the lines the reader skipped."""
    line = header_lines + row + 1
    for skipped_line in skipped:  # ascending
        if skipped_line <= line:
            line += 1
        else:
            break
    return line


class _Conversion:
    """State of one conversion run across all inputs."""

    def __init__(self, writer: DatasetWriter, max_bad_rows: int, progress: Progress) -> None:
        self.writer = writer
        self.max_bad_rows = max_bad_rows
        self.progress = progress
        self.report = ConvertReport()
        self.bytes_done = 0
        # The CSV reader's invalid-row callback runs on the prefetch thread.
        self._lock = threading.Lock()

    def _bad(self, where: str, reason: str, extra: int = 0) -> None:
        with self._lock:
            self.report.bad_rows += 1 + extra
            if len(self.report.bad_lines) < MAX_REPORTED:
                self.report.bad_lines.append((where, reason))
                log.warning("Skipping malformed line %s: %s.", where, reason)

    def _check_threshold(self) -> None:
        with self._lock:
            over = self.report.bad_rows > self.max_bad_rows
            bad_lines = sorted(self.report.bad_lines, key=lambda item: _line_key(item[0]))
        if over:
            shown = "; ".join(f"{where}: {why}" for where, why in bad_lines)
            raise MalformedInputError(
                f"{self.report.bad_rows} malformed line(s), more than --max-bad-rows="
                f"{self.max_bad_rows}; nothing was written. First ones: {shown}",
                bad_lines=[(_line_key(where)[1], why) for where, why in bad_lines],
            )

    def _take_block(
        self, batch: pa.RecordBatch, url: str, first_row: int, header_lines: int,
        skipped: list[int],
    ) -> None:
        """Parse one block, report its bad rows by line number, write its good rows."""
        self._check_threshold()
        parsed = parse_block(
            pa.RecordBatch.from_arrays(batch.columns, names=list(FEATURE_COLUMNS)),
            max_reasons=MAX_REPORTED,
        )
        unreported = len(parsed.bad_rows) - len(parsed.reasons)
        for row, (column, reason) in zip(parsed.bad_rows, parsed.reasons, strict=False):
            line = _line_of(first_row + int(row), header_lines, list(skipped))
            self._bad(f"{url}:{line}:{column}", reason, extra=unreported)
            unreported = 0
        self.report.blank_lines += len(parsed.blank_rows)
        self._check_threshold()
        self.writer.write(parsed.table)
        self.report.rows += parsed.table.num_rows

    def convert_file(self, url: str) -> None:
        layout = sniff_layout(read_first_line(url), url)
        header_lines = 1 if layout.header else 0
        skipped: list[int] = []  # physical line numbers of rows with a wrong field count

        def on_invalid_row(row: Any) -> str:
            number = row.number if row.number is not None else -1
            skipped.append(number)
            self._bad(
                f"{url}:{number}",
                f"expected {row.expected_columns} fields, found {row.actual_columns}",
            )
            return "skip"

        read_options = pacsv.ReadOptions(
            use_threads=False,  # line numbers are only known when reading serially
            block_size=BLOCK_SIZE,
            column_names=list(layout.column_names),
            skip_rows=header_lines,
        )
        parse_options = pacsv.ParseOptions(
            delimiter=layout.delimiter,
            quote_char=False,
            ignore_empty_lines=False,
            invalid_row_handler=on_invalid_row,
        )
        convert_options = pacsv.ConvertOptions(
            column_types={name: pa.string() for name in layout.include},
            include_columns=list(layout.include),
            strings_can_be_null=True,
            null_values=[""],
            check_utf8=False,
        )
        delivered = 0
        with fsspec.open(url, "rb", compression="infer") as raw:
            counting = CountingFile(raw)
            try:
                reader = pacsv.open_csv(
                    counting,
                    read_options=read_options,
                    parse_options=parse_options,
                    convert_options=convert_options,
                )
                # The next block is parsed (GIL released) while this one is converted;
                # closing() stops the parsing thread before the file closes, even on error.
                with closing(prefetch(reader, depth=2, name="elasticps-csv-reader")) as batches:
                    for batch in batches:
                        self._take_block(batch, url, delivered, header_lines, skipped)
                        delivered += batch.num_rows
                        done = self.bytes_done + counting.bytes_read
                        self.progress.update(self.report.rows, done)
            except pa.ArrowInvalid as exc:
                raise DataError(f"{url}: cannot read as Criteo text: {exc}") from exc
            self._check_threshold()
            self.bytes_done += counting.bytes_read


def convert_criteo(
    inputs: Sequence[str],
    out_url: str,
    *,
    rows_per_chunk: int = DEFAULT_ROWS_PER_CHUNK,
    chunks_per_file: int = DEFAULT_CHUNKS_PER_FILE,
    max_bad_rows: int = 0,
    compression: str = DEFAULT_COMPRESSION,
    overwrite: bool = False,
    progress: bool | None = None,
) -> ConvertReport:
    """Convert Criteo text files (fsspec URLs) into a dataset at ``out_url``.

    Raises :class:`MalformedInputError` (with ``bad_lines``) when more than ``max_bad_rows``
    lines are malformed; then nothing is left behind in ``out_url``.
    """
    if not inputs:
        raise DataError("no input files given")
    if max_bad_rows < 0:
        raise DataError(f"max_bad_rows={max_bad_rows} must be >= 0")
    for url in inputs:
        fs, path = fsspec.core.url_to_fs(url)
        if not fs.isfile(path):
            raise DataError(f"input {url!r} does not exist or is not a file")
    total = _total_size(inputs)
    writer = DatasetWriter(
        out_url,
        arrow_schema(),
        rows_per_chunk=rows_per_chunk,
        chunks_per_file=chunks_per_file,
        compression=compression,
        overwrite=overwrite,
    )
    bar = Progress("converting", total_bytes=total, enabled=progress)
    with writer:
        run = _Conversion(writer, max_bad_rows, bar)
        for url in inputs:
            run.convert_file(url)
        report = run.report
        report.bad_lines.sort(key=lambda item: _line_key(item[0]))
        report.manifest = writer.close(
            source={
                "kind": "criteo",
                "inputs": list(inputs),
                "bad_rows": report.bad_rows,
                "blank_lines": report.blank_lines,
                "first_bad_lines": [f"{where}: {why}" for where, why in report.bad_lines],
            }
        )
    bar.finish(report.rows, run.bytes_done)
    log.info(
        "Converted %d rows from %d input(s) into %s (%d chunks, %d malformed lines skipped).",
        report.rows, len(inputs), out_url, len(report.manifest.chunks), report.bad_rows,
    )
    return report


def _total_size(inputs: Sequence[str]) -> int | None:
    """Total bytes when no input is compressed (so bytes read map to progress), else None."""
    total = 0
    for url in inputs:
        if fsspec.utils.infer_compression(url) is not None:
            return None
        fs, path = fsspec.core.url_to_fs(url)
        total += int(fs.size(path) or 0)
    return total
