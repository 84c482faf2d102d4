"""A task's lease renewed by time, not by batches, while the task loop trains it.

The task loop reports progress every ``report_every`` batches, after a flush; a step that takes
longer than the task lease (a slow pull, a stalled shard, a big batch on a busy machine) would let
the lease run out, the master would hand the task to someone else and count a failure. While a
task is in a trainer's hands, :class:`Heartbeat` sends ``ReportProgress`` every ``every`` seconds
with the progress the loop last reported, which the master takes as a renewal only (it never moves
the resume point past a batch the loop has not flushed). An answer that the task is no longer
ours sets :attr:`Heartbeat.lost`; the loop drops the task at its next batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType

from elasticps.errors import ElasticPSError
from elasticps.proto import master_pb2
from elasticps.trainer.api import TaskSource

log = logging.getLogger(__name__)

DEFAULT_EVERY_S = 5.0  # when the master names no task lease
MIN_EVERY_S = 0.05


def heartbeat_interval(lease_seconds: float) -> float:
    """A third of the task lease (two renewals may be lost before it runs out)."""
    if lease_seconds <= 0:
        return DEFAULT_EVERY_S
    return max(MIN_EVERY_S, lease_seconds / 3)


class Heartbeat:
    """Renews ``task``'s lease every ``every`` seconds until the ``with`` block ends."""

    def __init__(self, source: TaskSource, task: master_pb2.Task, every: float,
                 reported: Callable[[], int], *, trainer_name: str = "") -> None:
        self.source = source
        self.task = task
        self.every = every
        self.reported = reported  # records done as of the loop's last report
        self.trainer_name = trainer_name
        self.lost = threading.Event()
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="task-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        # A beat stuck in a call (a master failover) is not waited for: a renewal that arrives
        # after the task ended is refused and changes nothing.
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                still_ours = self.source.report_progress(self.task, self.reported())
            except ElasticPSError as exc:  # the loop's own next call meets the same trouble
                log.warning("Trainer %s could not renew the lease of task %d: %s",
                            self.trainer_name, self.task.task_id, exc)
                continue
            self.beats += 1
            if not still_ours:
                self.lost.set()
                return
