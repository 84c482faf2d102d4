"""A tiny progress line for long conversions: printed to stderr only when stderr is a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Rewrites one status line (rows, rate, optional percent) at most every ``interval`` s."""

    def __init__(
        self,
        what: str,
        *,
        total_bytes: int | None = None,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        interval: float = 0.5,
    ) -> None:
        self.what = what
        self.total_bytes = total_bytes
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.interval = interval
        self.started = time.monotonic()
        self._last = 0.0
        self._shown = False

    def update(self, rows: int, bytes_done: int | None = None, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        elapsed = max(now - self.started, 1e-9)
        line = f"{self.what}: {rows:,} rows, {rows / elapsed:,.0f} rows/s"
        if self.total_bytes and bytes_done is not None:
            line += f", {min(100.0, 100.0 * bytes_done / self.total_bytes):.1f}%"
        self.stream.write("\r" + line + "   ")
        self.stream.flush()
        self._shown = True

    def finish(self, rows: int, bytes_done: int | None = None) -> None:
        self.update(rows, bytes_done, force=True)
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
