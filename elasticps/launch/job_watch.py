"""The launcher's watch of a running job: the status URL and its progress.

Runs in a background thread so a slow store or master never delays the supervisor. It reads
the master's address from the store (``master/address``), prints ``status: http://HOST:PORT/``
once on stdout, then shows the pass, the share done, the ETA, the time since the launch, what
the job is doing (``running``, or the trainers' stages: ``writing data (trainer-0)``,
``exporting (trainer-1)``), tasks, trainers, samples/s and loss, from the master's
``/api/status`` and the trainers' ``job/progress/*`` keys: a live progress bar on a terminal,
a plain line every 10 s otherwise (:mod:`elasticps.launch.progress_view`). The launcher's own
messages go through :meth:`say`, so they print above the bar instead of through it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, TextIO

from elasticps.launch.progress_view import Field, PlainLines, RichBar, Snapshot, format_eta
from elasticps.master.status_document import activity, stages
from elasticps.master.status_read import fetch_status
from elasticps.store import open_store
from elasticps.store.api import Store
from elasticps.store.keys import TrainerProgress, read_master_address, read_progress

log = logging.getLogger(__name__)


def _num(doc: dict[str, Any], *paths: str) -> float | None:
    for path in paths:
        node: Any = doc
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, int | float) and not isinstance(node, bool):
            return float(node)
    return None


# Priorities of the line's fields (0: shown the longest; higher ones go first when it is narrow)
_PASS, _SHARE, _ETA, _DOING, _ELAPSED, _TASKS, _SPEED, _LOSS, _TRAINERS = \
    1, 0, 0, 0, 2, 3, 4, 5, 6


def fields(status: dict[str, Any] | None, progress: dict[str, TrainerProgress],
           samples_per_sec: float | None, elapsed_s: float | None = None) -> list[Field]:
    """The progress line's fields, in the order shown, from what the master and the trainers
    report (see the module docstring)."""
    out: list[Field] = []
    status = status or {}
    pass_id = _num(status, "pass", "pass_id")
    num_passes = _num(status, "num_passes")
    state = status.get("state") if isinstance(status.get("state"), str) else None
    if pass_id is not None:
        shown = int(pass_id) + 1 if num_passes is None else min(int(pass_id) + 1,
                                                                   int(num_passes))
        out.append(Field(f"pass {shown}" + (f"/{int(num_passes)}" if num_passes else ""),
                         _PASS))
    shown_progress: dict[str, Any] = status["progress"] \
        if isinstance(status.get("progress"), dict) else {}
    fraction = _num(shown_progress, "fraction")
    eta = _num(shown_progress, "eta_s")
    if fraction is not None and state != "waiting_for_dataset":
        out.append(Field(f"{100 * fraction:.0f}%", _SHARE))
    if state == "running" and eta is not None:
        out.append(Field(f"ETA {format_eta(eta)}", _ETA))
    if elapsed_s is not None:
        out.append(Field(f"elapsed {format_eta(elapsed_s)}", _ELAPSED))
    live = status.get("live_trainers")
    if isinstance(live, list):
        # Progress keys outlive their trainers (killed or scaled away): count and average only
        # the trainers the master sees alive.
        progress = {name: p for name, p in progress.items() if name in live}
    out.append(Field(doing(status, progress), _DOING))
    done = _num(status, "counts.done")
    total = _num(status, "num_tasks")
    if done is not None and state == "running":
        out.append(Field(f"tasks {int(done)}" + (f"/{int(total)}" if total else ""), _TASKS))
    out.append(Field(f"trainers {len(live) if isinstance(live, list) else len(progress)}",
                     _TRAINERS))
    if samples_per_sec is not None and state == "running":
        out.append(Field(f"{samples_per_sec:,.0f} samples/s", _SPEED))
    losses = [p.loss for p in progress.values() if p.loss is not None]
    if losses and state in ("running", "succeeded"):
        out.append(Field(f"loss {sum(losses) / len(losses):.4f}", _LOSS))
    return out


def doing(status: dict[str, Any], live_progress: dict[str, TrainerProgress]) -> str:
    """What the job is doing, in words: the trainers' stages when they say any, ``starting``
    before a trainer named the dataset, ``training done, N trainer(s) finishing`` while the
    trainers' scripts go on after the last pass, else the master's state."""
    said = activity(status, stages(live_progress, list(live_progress)))
    if said is not None:
        return said
    state = str(status.get("state") or "starting")
    if state == "succeeded" and live_progress:
        return f"training done, {len(live_progress)} trainer(s) finishing"
    return state


class LauncherWatch(threading.Thread):
    """Prints the status URL once, then keeps a single progress line up to date."""

    def __init__(self, store_url: str, job_name: str, *, out: TextIO | None = None,
                 err: TextIO | None = None, interval: float = 1.0) -> None:
        # The thread keeps its name (what py-spy and thread listings have always shown).
        super().__init__(name="elasticps-monitor", daemon=True)
        self.store_url = store_url
        self.job_name = job_name
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.interval = interval
        self.status_url: str | None = None
        self.url_ready = threading.Event()
        self._halt = threading.Event()
        tty = bool(getattr(self.err, "isatty", lambda: False)())
        self.view: PlainLines | RichBar = RichBar(self.err) if tty else PlainLines(self.err)
        self._samples: list[tuple[float, float]] = []
        self.started = time.monotonic()  # the line's elapsed time: since the launch
        self._last_status: dict[str, Any] | None = None
        # (master status, samples/s over the last 10 s), replaced whole on each tick so another
        # thread (the autoscaler) reads a consistent pair without a lock.
        self._latest: tuple[dict[str, Any] | None, float | None] = (None, None)

    def latest(self) -> tuple[dict[str, Any] | None, float | None]:
        """The master's last status document and the job's samples/s, as last seen."""
        return self._latest

    def say(self, text: str) -> None:
        """A message for the user (above the bar on a terminal)."""
        self.view.say(text)

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        store: Store | None = None
        try:
            while not self._halt.is_set():
                try:
                    if store is None:
                        store = open_store(self.store_url, self.job_name)
                    self._tick(store)
                except Exception as exc:  # a watch must never take the launcher down
                    log.debug("The launcher's watch of job %s could not refresh: %s",
                              self.job_name, exc)
                self._halt.wait(self.interval)
        finally:
            self.view.close()
            if store is not None:
                store.close()

    def _tick(self, store: Store) -> None:
        address = read_master_address(store)
        http = address.http if address is not None else None
        if address is not None and self.status_url is None:
            self.status_url = address.status_url
            print(f"status: {self.status_url}", file=self.out, flush=True)
            self.url_ready.set()
        status = fetch_status(http) if http else None
        if status is None:  # between masters, or the job is ending: keep the last known
            status = self._last_status
        self._last_status = status
        progress = read_progress(store)
        now = time.monotonic()
        total = sum(p.samples for p in progress.values())
        self._samples = [s for s in self._samples if now - s[0] <= 10.0] + [(now, total)]
        sps = None
        if len(self._samples) >= 2 and self._samples[-1][0] > self._samples[0][0]:
            sps = max(0.0, (self._samples[-1][1] - self._samples[0][1])
                      / (self._samples[-1][0] - self._samples[0][0]))
        self._latest = (status, sps)
        if status is None and not progress:
            return  # nothing to show yet
        self.view.show(snapshot(status, progress, sps, now - self.started), now)


def snapshot(status: dict[str, Any] | None, progress: dict[str, TrainerProgress],
             samples_per_sec: float | None, elapsed_s: float | None = None) -> Snapshot:
    """The line's fields and the bar's share done (from the master's ``progress``; None, a
    pulsing bar, before it has a dataset)."""
    shown = (status or {}).get("progress")
    fraction = _num(shown, "fraction") if isinstance(shown, dict) else None
    if (status or {}).get("state") == "waiting_for_dataset":
        fraction = None
    return Snapshot(tuple(fields(status, progress, samples_per_sec, elapsed_s)), fraction)


class ReportStream:
    """A text stream whose lines go to :meth:`LauncherWatch.say` (the supervisor's reports)."""

    def __init__(self, watch: LauncherWatch) -> None:
        self.watch = watch
        self._buffer = ""

    def write(self, text: str) -> int:
        self._buffer += text
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            self.watch.say(line)
        return len(text)

    def flush(self) -> None:
        pass
