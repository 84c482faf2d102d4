"""The launcher's watch of a running job: the status URL and its progress.

Runs in a background thread so a slow store or master never delays the supervisor. It reads
the master's address from the store (``master/address``), prints ``status: http://HOST:PORT/``
once on stdout, then shows ``pass, tasks done, samples/s, loss`` from the master's
``/api/status`` and the trainers' ``job/progress/*`` keys, with the job's share done and ETA:
a live progress bar on a terminal, a plain line every 10 s otherwise
(:mod:`elasticps.launch.progress_view`). The launcher's own messages go through :meth:`say`,
so they print above the bar instead of through it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, TextIO

from elasticps.launch.progress_view import PlainLines, RichBar, Snapshot
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


def render(status: dict[str, Any] | None, progress: dict[str, TrainerProgress],
           samples_per_sec: float | None) -> str:
    """One progress line from what the master and the trainers report."""
    parts: list[str] = []
    status = status or {}
    pass_id = _num(status, "pass", "pass_id")
    num_passes = _num(status, "num_passes")
    if pass_id is None and progress:
        pass_id = max(float(p.pass_id) for p in progress.values())
    if pass_id is not None:
        parts.append(f"pass {int(pass_id) + 1}" + (f"/{int(num_passes)}" if num_passes else ""))
    done = _num(status, "counts.done")
    total = _num(status, "num_tasks")
    if done is not None:
        parts.append(f"tasks {int(done)}" + (f"/{int(total)}" if total else ""))
    live = status.get("live_trainers")
    if isinstance(live, list):
        # Progress keys outlive their trainers (killed or scaled away): count and average only
        # the trainers the master sees alive.
        progress = {name: p for name, p in progress.items() if name in live}
    parts.append(f"trainers {len(live) if isinstance(live, list) else len(progress)}")
    if samples_per_sec is not None:
        parts.append(f"{samples_per_sec:,.0f} samples/s")
    losses = [p.loss for p in progress.values() if p.loss is not None]
    if losses:
        parts.append(f"loss {sum(losses) / len(losses):.4f}")
    state = status.get("state") or status.get("status")
    if isinstance(state, str):
        parts.append(state)
    return " | ".join(parts)


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
        self.view.show(snapshot(status, progress, sps), now)


def snapshot(status: dict[str, Any] | None, progress: dict[str, TrainerProgress],
             samples_per_sec: float | None) -> Snapshot:
    """The line and the bar's share done and ETA (from the master's ``progress``)."""
    line = render(status, progress, samples_per_sec)
    shown = (status or {}).get("progress")
    fraction = _num(shown, "fraction") if isinstance(shown, dict) else None
    eta = _num(shown, "eta_s") if isinstance(shown, dict) else None
    return Snapshot(line, fraction, eta)


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
