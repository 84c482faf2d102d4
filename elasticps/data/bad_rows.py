"""Malformed input rows: counted, the first few kept as ``file:line:column: reason``, and past
the limit (``--max-bad-rows``) a :class:`MalformedInputError`, after which the conversion
deletes what it wrote."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from elasticps.errors import MalformedInputError

log = logging.getLogger(__name__)

MAX_REPORTED = 20  # bad rows kept with their reasons; all are counted


@dataclass(frozen=True)
class BadRow:
    file: str
    line: int  # the physical line of a text file, the 1-based row of a table
    column: str | None  # None: the row as a whole (e.g. a wrong number of fields)
    reason: str

    def __str__(self) -> str:
        column = f"{self.column}:" if self.column is not None else ""
        return f"{self.file}:{self.line}:{column} {self.reason}"


@dataclass
class BadRows:
    """The malformed rows of one conversion (thread safe: readers report from their thread)."""

    max_bad_rows: int
    count: int = 0
    blank: int = 0  # empty lines: skipped and counted, not malformed
    first: list[BadRow] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, row: BadRow, *, also: int = 0) -> None:
        """Count ``row`` (and ``also`` more rows not described)."""
        with self._lock:
            self.count += 1 + also
            if len(self.first) < MAX_REPORTED:
                self.first.append(row)
                log.warning("Skipping malformed row %s.", row)

    def check(self) -> None:
        """Raise once more rows are bad than allowed."""
        with self._lock:
            if self.count <= self.max_bad_rows:
                return
            first = sorted(self.first, key=lambda r: (r.file, r.line))
        shown = "; ".join(str(row) for row in first)
        raise MalformedInputError(
            f"{self.count} malformed row(s), more than --max-bad-rows={self.max_bad_rows}; "
            f"nothing was written. First ones: {shown}",
            bad_lines=[(row.line, f"{row.column}: {row.reason}" if row.column else row.reason)
                       for row in first])

    def report(self) -> list[str]:
        return [str(row) for row in sorted(self.first, key=lambda r: (r.file, r.line))]
