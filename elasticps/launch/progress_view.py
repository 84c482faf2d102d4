"""How ``elasticps run`` shows progress: a live bar with ETA on a terminal (rich), plain lines
every 10 s when its output is a file or a pipe. Both take the same :class:`Snapshot`."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn
from rich.table import Column


@dataclass(frozen=True)
class Snapshot:
    """One look at the job: the line's words, and the bar's share done and ETA."""

    line: str  # "pass 2/2 | tasks 26/32 | trainers 2 | 8,468 samples/s | loss 0.5582 | running"
    fraction: float | None  # of the whole job, 0..1 (None: not known yet)
    eta_s: float | None


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "-:--"
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class PlainLines:
    """A line when it changed, at most every ``every`` seconds (logs stay readable)."""

    def __init__(self, err: TextIO, every: float = 10.0) -> None:
        self.err = err
        self.every = every
        self._last_line = ""
        self._last_print: float | None = None

    def show(self, snap: Snapshot, now: float) -> None:
        line = snap.line
        if snap.fraction is not None:
            line += f" | {100 * snap.fraction:.1f}% | ETA {format_eta(snap.eta_s)}"
        if line != self._last_line and (self._last_print is None
                                        or now - self._last_print >= self.every):
            print(line, file=self.err, flush=True)
            self._last_print = now
            self._last_line = line

    def say(self, text: str) -> None:
        print(text, file=self.err, flush=True)

    def close(self) -> None:
        pass


class RichBar:
    """A progress bar redrawn in place, with messages printed above it."""

    def __init__(self, err: TextIO, *, force_terminal: bool = True, width: int | None = None
                 ) -> None:
        self.console = Console(file=err, force_terminal=force_terminal, width=width,
                               highlight=False)
        # The pass, the bar, the share and the ETA always show; the rest is cut to the width.
        self.progress = Progress(
            TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)),
            BarColumn(bar_width=24), TaskProgressColumn(table_column=Column(no_wrap=True)),
            TextColumn("ETA {task.fields[eta]}", table_column=Column(no_wrap=True)),
            TextColumn("{task.fields[info]}",
                       table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1)),
            console=self.console, auto_refresh=False, redirect_stdout=False,
            redirect_stderr=False, expand=True)
        self._task: TaskID | None = None
        self._lock = threading.Lock()

    def show(self, snap: Snapshot, now: float) -> None:
        head, _, rest = snap.line.partition(" | ")
        with self._lock:
            if self._task is None:
                self.progress.start()
                self._task = self.progress.add_task(head, total=1000, eta="-:--", info="")
            completed = None if snap.fraction is None else round(1000 * snap.fraction)
            self.progress.update(self._task, description=head, completed=completed,
                                 eta=format_eta(snap.eta_s), info=rest)
            self.progress.refresh()

    def say(self, text: str) -> None:
        with self._lock:
            self.console.print(text, markup=False, highlight=False)

    def close(self) -> None:
        with self._lock:
            if self._task is not None:
                self.progress.refresh()
                self.progress.stop()
