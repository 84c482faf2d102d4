"""Carrying out an :class:`~elasticps.trainer.export_schedule.ExportSchedule` while training.

:class:`ScheduledExports` wraps the trainer's task worker. After each batch it asks
:func:`~elasticps.trainer.export_schedule.due`; when a version is due it

1. flushes: every push of the batches trained so far is applied on the pservers, which is the
   training position's commit (``committed_at``, wall-clock);
2. asks the master for the save-model grant (``hold_s``); refused, another trainer is the
   exporter, and this one asks again a whole interval later;
3. writes the version (:func:`~elasticps.trainer.model_dir.publish`): a delta of the version
   ``LATEST`` names, or a full export (the first, every ``full_every`` deltas, or when the
   directory's model does not fit this one), then retires old chains.

The export runs in the training thread between two batches (the pulls it makes must not
interleave with a step that loads values into the model), so training pauses for it; the
task's lease is renewed meanwhile by the loop's heartbeat. A version that cannot be written
(the disk, a corrupt previous version) is logged and tried again at the next due point;
training goes on.

The position a version records: the exporter's last batch (``pass``, ``task``, ``seq``, its
``step`` in the job's data order) and its count of batches; the export holds every update of
those batches, and whatever the other trainers had applied by then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from elasticps.errors import ConfigError
from elasticps.proto import master_pb2
from elasticps.trainer.export_chain import ExportChainError
from elasticps.trainer.export_schedule import ExportSchedule, due, version_kind
from elasticps.trainer.model_dir import (
    Draft,
    VersionRecord,
    publish,
    read_latest,
    retire,
)
from elasticps.trainer.task_batches import TaskBatch
from elasticps.trainer.task_loop import TaskEnd, TaskWorker

log = logging.getLogger(__name__)

# Writes one version into a directory: (directory, draft) -> None (the trainer's export).
VersionWriter = Callable[[Any, Draft], None]
Grant = Callable[[float], bool]


class ScheduledExports(TaskWorker):
    """``inner``, plus the versions ``schedule`` asks for, written by ``write``."""

    def __init__(self, inner: TaskWorker, schedule: ExportSchedule, write: VersionWriter,
                 grant: Grant, *, trainer_name: str,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.inner = inner
        self.schedule = schedule
        self.write = write
        self.grant = grant
        self.trainer_name = trainer_name
        self.clock = clock
        self.wall = wall
        self.published: list[VersionRecord] = []
        self.failures = 0
        self._batches = 0  # batches trained in all
        self._pending = 0  # batches since the last export (or refused grant)
        self._since = clock()
        self._last: TaskBatch | None = None

    # -- the worker's hooks, passed on ----------------------------------------------------------

    def begin_pass(self, pass_id: int) -> None:
        self.inner.begin_pass(pass_id)

    def train(self, item: TaskBatch, next_batch: Any | None) -> None:
        self.inner.train(item, next_batch)
        self._batches += 1
        self._pending += 1
        self._last = item
        if due(self.schedule, self._pending, self.clock() - self._since):
            self.export_now()

    def flush(self) -> None:
        self.inner.flush()

    def abandon(self) -> None:
        self.inner.abandon()

    def end_task(self, task: master_pb2.Task, how: TaskEnd) -> None:
        self.inner.end_task(task, how)

    def end_pass(self, pass_id: int) -> None:
        self.inner.end_pass(pass_id)

    # -- exporting ------------------------------------------------------------------------------

    def finish(self) -> VersionRecord | None:
        """Training ended: with ``final``, one more version if anything was trained since the
        last one."""
        if self.schedule.final and self._pending:
            return self.export_now()
        return None

    def export_now(self) -> VersionRecord | None:
        """Flush, take the grant, publish a version; None when refused or it failed."""
        self.inner.flush()
        committed_at = self.wall()
        self._pending, self._since = 0, self.clock()
        if not self.grant(self.schedule.hold_s):
            log.debug("Trainer %s: another trainer exports the model.", self.trainer_name)
            return None
        try:
            record = self._publish(committed_at)
        except (OSError, ExportChainError, ConfigError) as exc:
            self.failures += 1
            log.warning("Trainer %s could not export a version into %s: %s; it tries again "
                        "at the next due point.", self.trainer_name, self.schedule.path, exc)
            return None
        self.published.append(record)
        log.info("Trainer %s exported version %d (%s) of the model into %s at pass %s, task "
                 "%s, batch %s.", self.trainer_name, record.version, record.kind,
                 self.schedule.path, record.position.get("pass"), record.position.get("task"),
                 record.position.get("seq"))
        try:
            retire(self.schedule.path, self.schedule.keep)
        except OSError as exc:
            log.warning("Trainer %s could not remove old versions from %s: %s.",
                        self.trainer_name, self.schedule.path, exc)
        return record

    def position(self) -> dict[str, Any]:
        last = self._last
        where: dict[str, Any] = {"trainer": self.trainer_name, "batches": self._batches}
        if last is not None:
            where.update({"pass": last.pass_id, "task": last.task_id, "seq": last.seq,
                          "step": last.step, "records_done": last.records_done})
        return where

    def _publish(self, committed_at: float) -> VersionRecord:
        root = self.schedule.path
        kind = version_kind(read_latest(root), self.schedule.full_every)
        position = self.position()
        meta = dict(self.schedule.meta)
        try:
            return publish(root, kind, self.write, position=position,
                           committed_at=committed_at, meta=meta)
        except ConfigError as exc:
            if kind != "delta":
                raise
            # The version LATEST names is another model's (other shapes or tables).
            log.warning("Trainer %s cannot write a delta into %s (%s); it writes a full "
                        "version instead.", self.trainer_name, root, exc)
            return publish(root, "full", self.write, position=position,
                           committed_at=committed_at, meta=meta)
