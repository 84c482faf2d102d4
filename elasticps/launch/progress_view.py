"""How ``elasticps run`` shows progress: a live bar on a terminal (rich), plain lines every 10 s
when its output is a file or a pipe. Both take the same :class:`Snapshot`: the job's share done
and a list of fields, each with a priority.

On a terminal the line is fitted to its width by dropping whole fields, least important first
(:func:`fit`), so no figure is ever cut in the middle; it also stops short of the last
columns, where a terminal echoes ``^C``: an echo that wrapped onto a new line would leave the
bar behind when it is redrawn, and the bar would show twice.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Column

SEPARATOR = " | "
ECHO_RESERVE = 3  # columns left free at the line's end: room for the terminal's "^C"


@dataclass(frozen=True)
class Field:
    """One part of the line; ``priority`` 0 is shown the longest, higher ones go first."""

    text: str
    priority: int


@dataclass(frozen=True)
class Snapshot:
    """One look at the job: the line's fields (in the order shown) and the bar's share done."""

    fields: tuple[Field, ...]
    fraction: float | None  # of the whole job, 0..1 (None: not known yet)

    @property
    def line(self) -> str:
        return SEPARATOR.join(f.text for f in self.fields)


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "-:--"
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def fit(fields: Sequence[Field], width: int) -> str:
    """The fields that fit in ``width`` columns, joined, in their order: the least important
    are left out whole until the rest fit (possibly none)."""
    kept = list(fields)
    while kept and len(SEPARATOR.join(f.text for f in kept)) > width:
        least = max(kept, key=lambda f: f.priority)
        kept = [f for f in kept if f is not least]
    return SEPARATOR.join(f.text for f in kept)


class PlainLines:
    """A line when it changed, at most every ``every`` seconds (logs stay readable)."""

    def __init__(self, err: TextIO, every: float = 10.0) -> None:
        self.err = err
        self.every = every
        self._last_line = ""
        self._last_print: float | None = None

    def show(self, snap: Snapshot, now: float) -> None:
        line = snap.line
        if line != self._last_line and (self._last_print is None
                                        or now - self._last_print >= self.every):
            print(line, file=self.err, flush=True)
            self._last_print = now
            self._last_line = line

    def say(self, text: str) -> None:
        print(text, file=self.err, flush=True)

    def close(self) -> None:
        pass


def bar_width(columns: int) -> int:
    """The bar's own width on a terminal ``columns`` wide."""
    return 24 if columns >= 110 else 16 if columns >= 80 else 10


class RichBar:
    """A progress bar and the fitted line beside it, redrawn in place, with messages printed
    above it."""

    def __init__(self, err: TextIO, *, force_terminal: bool = True, width: int | None = None
                 ) -> None:
        self.console = Console(file=err, force_terminal=force_terminal, width=width,
                               highlight=False)
        self._bar = BarColumn(bar_width=bar_width(self.console.width))
        self.progress = Progress(
            self._bar, TextColumn("{task.fields[info]}", markup=False,
                                  table_column=Column(no_wrap=True, overflow="crop")),
            console=self.console, auto_refresh=False, redirect_stdout=False,
            redirect_stderr=False, expand=False)
        self._task: TaskID | None = None
        self._lock = threading.Lock()

    def show(self, snap: Snapshot, now: float) -> None:
        columns = self.console.width
        self._bar.bar_width = bar_width(columns)
        # the bar, one column between it and the text, and the columns kept free for "^C"
        info = fit(snap.fields, columns - self._bar.bar_width - 1 - ECHO_RESERVE)
        with self._lock:
            first = self._task is None
            if self._task is None:
                self._task = self.progress.add_task("", total=None, info="")
            if snap.fraction is None:
                self.progress.update(self._task, total=None, info=info)  # the bar pulses
            else:
                self.progress.update(self._task, total=1000,
                                     completed=round(1000 * snap.fraction), info=info)
            if first:
                self.progress.start()  # draws the first frame: the one just set
            self.progress.refresh()

    def say(self, text: str) -> None:
        with self._lock:
            self.console.print(text, markup=False, highlight=False)

    def close(self) -> None:
        with self._lock:
            if self._task is not None:
                self.progress.refresh()
                self.progress.stop()
