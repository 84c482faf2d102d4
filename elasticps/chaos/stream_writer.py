"""``elasticps chaos --oracle --stream``: partitions land while the job trains and the faults hit.

:class:`StreamWriter` lands the oracle's partitions under a prefix (``dt=2026-12-01/hour=HH``:
the data files, then the manifest, the commit), the first before the job starts and each next
one ``interval`` seconds after the one before, then writes the end marker: the job is over once
it trained them all. :class:`LandingWatch` times each partition from its landing to the
master appending it and to the job having trained it through (every task of it and of the ones
before it done): the liveness of a stream, bounded by ``--stream-bound``. A directed schedule
(``stream-commit-master-kill``) waits on the writer to kill the leading master right as a
partition commits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from elasticps.chaos.oracle import write_oracle_data
from elasticps.data.stream import write_end_marker

FIRST_DAY = "2026-12-01"  # the partitions' date: their times are only names to the oracle
POLL_S = 0.2  # how often the landing watch reads the master's status


def partition_name(index: int) -> str:
    """The ``index``-th partition's name: hourly, from :data:`FIRST_DAY` on."""
    day, hour = divmod(index, 24)
    year, month, first = (int(part) for part in FIRST_DAY.split("-"))
    return f"dt={year:04d}-{month:02d}-{first + day:02d}/hour={hour:02d}"


@dataclass
class Landing:
    """One partition: when it landed, and how long the job took to append and train it."""

    name: str
    rows: int
    landed_at: float  # unix time of its commit
    appended_s: float | None = None  # from its commit to the master appending it
    trained_s: float | None = None  # from its commit to the job having trained it through


class StreamWriter:
    """Lands ``partitions`` partitions of ``rows`` rows each under ``prefix`` (see the module
    docstring); a thread after :meth:`land_first`, stopped by :meth:`stop`."""

    def __init__(self, prefix: str, partitions: int, rows: int, rows_per_chunk: int,
                 interval: float) -> None:
        if partitions < 1 or rows < 1 or rows_per_chunk < 1 or not interval > 0:
            raise ValueError(f"a stream of {partitions} partitions of {rows} rows in chunks "
                             f"of {rows_per_chunk}, every {interval}s, cannot be written")
        if partitions > 24 * 28:
            raise ValueError(f"{partitions} hourly partitions do not fit in one month")
        self.prefix = prefix
        self.partitions = partitions
        self.rows = rows
        self.rows_per_chunk = rows_per_chunk
        self.interval = interval
        self.landings: list[Landing] = []
        self._monotonic: list[float] = []  # each landing's time.monotonic()
        self.ended_at: float | None = None  # unix time of the end marker
        self._landed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def total_rows(self) -> int:
        return self.partitions * self.rows

    def land_first(self) -> None:
        """The first partition, now (a job starts on it)."""
        self._land(0)

    def start(self) -> None:
        """The other partitions on the schedule (once training is under way), then the end
        marker; after :meth:`land_first`."""
        if not self.landings:
            raise ValueError("the stream's first partition has not landed")
        self._thread = threading.Thread(target=self._run, name="stream-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for index in range(1, self.partitions):
            if self._stop.wait(self.interval):
                return
            self._land(index)
        if not self._stop.is_set():
            write_end_marker(self.prefix)
            self.ended_at = time.time()

    def _land(self, index: int) -> None:
        name = partition_name(index)
        write_oracle_data(f"{self.prefix}/{name}", self.rows, self.rows_per_chunk,
                          first_row=index * self.rows, id_space=self.total_rows)
        with self._landed:
            self.landings.append(Landing(name, self.rows, time.time()))
            self._monotonic.append(time.monotonic())
            self._landed.notify_all()

    def landed(self) -> int:
        """Partitions committed so far."""
        with self._landed:
            return len(self.landings)

    def wait_for_landing(self, count: int, timeout: float) -> bool:
        """Wait until more than ``count`` partitions landed; False after ``timeout``."""
        with self._landed:
            return self._landed.wait_for(lambda: len(self.landings) > count, timeout)

    def landed_monotonic(self, index: int) -> float:
        with self._landed:
            return self._monotonic[index]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def report(self, bound: float) -> dict[str, Any]:
        """What the report says of the stream: every landing, and whether each was trained
        through within ``bound`` seconds of its commit (the first one's time includes the
        job's start: it landed before the job existed, so it is shown, not bounded)."""
        trained = [x.trained_s for x in self.landings[1:]]
        over = [x.name for x in self.landings
                if x.trained_s is None or (x is not self.landings[0] and x.trained_s > bound)]
        return {"partitions": self.partitions, "landed": len(self.landings),
                "rows_per_partition": self.rows, "interval_s": self.interval,
                "ended": self.ended_at is not None, "bound_s": bound,
                "worst_trained_s": max((t for t in trained if t is not None), default=None),
                "over_bound": over,
                "ok": len(self.landings) == self.partitions and not over,
                "landings": [asdict(x) for x in self.landings]}


class StatusReader(Protocol):
    def status(self) -> dict[str, Any] | None: ...


class LandingWatch:
    """Times every landing of ``writer`` against the master's status (its ``stream``
    section), on its own thread, until every partition is trained or :meth:`stop`."""

    def __init__(self, writer: StreamWriter, watch: StatusReader,
                 running: Callable[[], bool]) -> None:
        self.writer = writer
        self.watch = watch
        self.running = running
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="landing-watch", daemon=True)

    def __enter__(self) -> LandingWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S) and self.running():
            status = self.watch.status()
            stream = (status or {}).get("stream")
            if isinstance(stream, dict):
                self.step(stream, bool(status and status.get("done")))
            if all(x.trained_s is not None for x in self.writer.landings) and \
                    self.writer.landed() == self.writer.partitions:
                return

    def step(self, stream: dict[str, Any], done: bool) -> None:
        """Time every landing the status now shows appended or trained through."""
        now = time.monotonic()
        appended = int(stream.get("partitions") or 0)
        through = stream.get("trained_through") or ""
        for index, landing in enumerate(list(self.writer.landings)):
            since = now - self.writer.landed_monotonic(index)
            if landing.appended_s is None and (index < appended or done):
                landing.appended_s = round(since, 2)
            if landing.trained_s is None and (landing.name <= through or done):
                landing.trained_s = round(since, 2)
