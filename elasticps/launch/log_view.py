"""Printing a local job's log files: one as it is, or several merged by time with a prefix
naming each line's process, and following them (``-f``) until the job's launcher exits.

A line's time is its own where it has one (a text log line starts with logging's
``YYYY-MM-DD HH:MM:SS,mmm`` in local time; a JSON line has ``time``), else that of the last
line before it in the same file: a traceback or a ``print()`` stays under the line it
followed. Merging is by that time, file by file in order otherwise.
"""

from __future__ import annotations

import codecs
import heapq
import json
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime

from elasticps.launch.local_job import LocalJob
from elasticps.launch.role_logs import LogSource

_TEXT_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")

# (time, source number, line number, label, text): sorts by time, then file, then order.
Line = tuple[float, int, int, str, str]


def line_time(line: str) -> float | None:
    """The time a log line carries (seconds since the epoch), or None."""
    match = _TEXT_TIME.match(line)
    if match is not None:
        try:
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")
        except ValueError:
            return None
        return stamp.timestamp() + int(match.group(2)) / 1000  # local time, as asctime writes
    if line.startswith("{"):
        try:
            doc = json.loads(line)
            return datetime.fromisoformat(str(doc["time"])).timestamp()
        except (ValueError, KeyError, TypeError):
            return None
    return None


class _Reader:
    """One file read on from where it was left: complete lines, each with its time."""

    def __init__(self, source: LogSource, number: int) -> None:
        self.source = source
        self.number = number
        self.offset = 0
        self.count = 0
        self.last_time = 0.0  # lines before the first stamped one sort first
        self.partial = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read_new(self) -> list[Line]:
        try:
            with self.source.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *complete, self.partial = (self.partial + self._decoder.decode(data)).split("\n")
        return [self._line(text) for text in complete]

    def rest(self) -> list[Line]:
        """The last line, if the file does not end with a newline."""
        text, self.partial = self.partial, ""
        return [self._line(text)] if text else []

    def _line(self, text: str) -> Line:
        stamp = line_time(text)
        if stamp is not None:
            self.last_time = stamp
        self.count += 1
        return (self.last_time, self.number, self.count, self.source.label, text)


def view(sources: list[LogSource], job: LocalJob, *, tail: int | None = None,
         follow: bool = False, prefix: bool = False,
         refresh: Callable[[], list[LogSource]] | None = None,
         poll_s: float = 0.25) -> Iterator[str]:
    """The lines of ``sources`` (merged by time, the last ``tail``), then with ``follow`` new
    ones as they come until the launcher has exited. ``prefix`` puts each line's label in
    front; ``refresh`` gives the sources again while following (a trainer added later)."""
    readers = {s.path: _Reader(s, n) for n, s in enumerate(sources)}

    def shown(lines: list[Line]) -> Iterator[str]:
        width = max(len(r.source.label) for r in readers.values())
        for _, _, _, label, text in lines:
            yield f"{label:<{width}} | {text}" if prefix else text

    # The first look takes a last line with no newline yet as a line (as `tail` does).
    first = list(heapq.merge(*(r.read_new() + r.rest() for r in readers.values())))
    yield from shown(first[-tail:] if tail else first)
    while follow:
        alive = job.launcher_alive()
        for source in refresh() if refresh is not None else []:
            if source.path not in readers:
                readers[source.path] = _Reader(source, len(readers))
        batch = sorted(line for r in readers.values() for line in r.read_new())
        if batch:
            yield from shown(batch)
        elif not alive:
            break
        else:
            time.sleep(poll_s)  # tail -f: nothing to wait on but the files growing
    yield from shown(sorted(line for r in readers.values() for line in r.rest()))

