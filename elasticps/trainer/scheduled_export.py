"""Carrying out an :class:`~elasticps.trainer.export_schedule.ExportSchedule` while training.

:class:`ScheduledExports` wraps the trainer's task worker and counts the schedule's units as
they happen (a batch trained, a task finished, a pass ended; :meth:`ScheduledExports.count` for
any other). After each it asks :func:`~elasticps.trainer.export_schedule.due`; when a version is
due it

1. flushes: every push of the batches trained so far is applied on the pservers, which is the
   training position's commit (``committed_at``, wall-clock);
2. asks the master for the save-model grant (``hold_s``); refused, another trainer is the
   exporter, and this one asks again a whole interval later;
3. writes the version (:func:`~elasticps.trainer.model_dir.publish`): a delta of the version
   ``LATEST`` names, or a full export (the first, every ``full_every`` deltas, or when the
   directory's model does not fit this one), then retires old chains.

The export runs in the training thread between two batches (the pulls it makes must not
interleave with a step that loads values into the model), so training pauses for it; the
task's lease is renewed meanwhile by the loop's heartbeat. A version due at a task's end waits
for the next batch, the pass's end or the next wait for a task (``idle``: no task is held
then): the finish may have brought the next task, and nothing renews its lease before its
first batch. A version that cannot be written
(the disk, a corrupt previous version) is logged and tried again at the next due point;
training goes on.

The position a version records: the exporter's last batch (``pass``, ``task``, ``seq``, its
``step`` in the job's data order) and its count of batches; the export holds every update of
those batches, and whatever the other trainers had applied by then. On a stream, ``notes``
(:class:`~elasticps.trainer.stream_exports.StreamVersions`) add the partitions the job had
trained through (``stream``) and record each version's freshness once it is published.

A stream's ``partitions`` unit counts the partitions whose tasks are all trained, as the
leading master counts them (``notes.trained()``), asked after each task this trainer finishes
and while it waits for data; a version due then is written before the next batch or, when no
task comes (the stream waits for its next partition), at once.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from elasticps.errors import ConfigError
from elasticps.proto import master_pb2
from elasticps.trainer.export_chain import ExportChainError
from elasticps.trainer.export_schedule import UNITS, ExportSchedule, due, version_kind
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


class VersionNotes(Protocol):
    """What a kind of training data adds to each version (a stream's: stream_exports.py)."""

    def position(self, latest: VersionRecord | None) -> dict[str, Any]:
        """Entries for the position of the version written after ``latest``."""
        ...

    def published(self, record: VersionRecord) -> None:
        """``record`` is published."""
        ...

    def trained(self) -> int | None:
        """How many leading partitions the job has trained through now (None: unknown)."""
        ...


class ScheduledExports(TaskWorker):
    """``inner``, plus the versions ``schedule`` asks for, written by ``write``."""

    def __init__(self, inner: TaskWorker, schedule: ExportSchedule, write: VersionWriter,
                 grant: Grant, *, trainer_name: str,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 notes: VersionNotes | None = None) -> None:
        self.inner = inner
        self.notes = notes
        self.schedule = schedule
        self.write = write
        self.grant = grant
        self.trainer_name = trainer_name
        self.clock = clock
        self.wall = wall
        self.published: list[VersionRecord] = []
        self.failures = 0
        self._batches = 0  # batches trained in all
        self._pending: collections.Counter[str] = collections.Counter()  # since the last export
        self._since = clock()
        self._last: TaskBatch | None = None
        self._deferred = False  # a version became due at a task's end: write it at the next batch
        self._trained = 0  # a stream's partitions trained through, as last counted

    # -- the worker's hooks, passed on ----------------------------------------------------------

    def begin_pass(self, pass_id: int) -> None:
        self.inner.begin_pass(pass_id)

    def train(self, item: TaskBatch, next_batch: Any | None) -> None:
        if self._deferred:  # due when the last task ended: export now, under this task's lease
            self._deferred = False
            self.export_now()
        self.inner.train(item, next_batch)
        self._batches += 1
        self._last = item
        self.count("batches")

    def flush(self) -> None:
        self.inner.flush()

    def abandon(self) -> None:
        self.inner.abandon()

    def end_task(self, task: master_pb2.Task, how: TaskEnd) -> None:
        self.inner.end_task(task, how)
        if how is TaskEnd.FINISHED:
            # The finish may have brought the next task, whose lease runs until its first
            # batch starts the heartbeat: a long export here could lose it. So a version due
            # now is written before that batch (or at the pass's end, if none comes).
            self.count("tasks", defer=True)
            self._count_partitions(defer=True)

    def idle(self) -> None:
        self.inner.idle()
        # No task is held: a version due (deferred, or for partitions trained meanwhile by
        # other trainers) is written now, not when the stream's next partition comes.
        self._count_partitions(defer=True)
        if self._deferred:
            self._deferred = False
            self.export_now()

    def _count_partitions(self, *, defer: bool) -> None:
        if self.notes is None or self.schedule.every("partitions") is None:
            return
        trained = self.notes.trained()
        if trained is not None and trained > self._trained:
            rise, self._trained = trained - self._trained, trained
            self.count("partitions", rise, defer=defer)

    def end_pass(self, pass_id: int) -> None:
        self.inner.end_pass(pass_id)
        if self._deferred:
            self._deferred = False
            self.export_now()
        self.count("passes")

    # -- exporting ------------------------------------------------------------------------------

    def count(self, unit: str, n: int = 1, *, defer: bool = False) -> VersionRecord | None:
        """``n`` more ``unit`` done (a batch, a task, a pass: the hooks above count those);
        exports a version when that makes one due, or (``defer``) before the next batch is
        trained or at the pass's end. The version written now, or None."""
        if unit not in UNITS:
            raise ValueError(f"unit {unit!r} is not one of {UNITS}")
        self._pending[unit] += n
        if not due(self.schedule, self._pending, self.clock() - self._since):
            return None
        if defer:
            self._deferred = True
            return None
        return self.export_now()

    def finish(self) -> VersionRecord | None:
        """Training ended (every pass is over, every trainer's pushes applied): with ``final``
        (or a version due), one more version, the model as training left it. Written even when
        this trainer trained nothing since its last version: the others may have, after it.
        Every trainer asks; the grant's holder writes it, the others are refused."""
        deferred, self._deferred = self._deferred, False
        if deferred or self.schedule.final:
            return self.export_now()
        return None

    def export_now(self) -> VersionRecord | None:
        """Flush, take the grant, publish a version; None when refused or it failed."""
        self.inner.flush()
        committed_at = self.wall()
        self._pending.clear()
        self._since = self.clock()
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
        stream = record.position.get("stream")
        log.info("Trainer %s exported version %d (%s) of the model into %s at pass %s, task "
                 "%s, batch %s%s.", self.trainer_name, record.version, record.kind,
                 self.schedule.path, record.position.get("pass"), record.position.get("task"),
                 record.position.get("seq"),
                 f", trained through partition {stream.get('newest')}"
                 if isinstance(stream, dict) else "")
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
        latest = read_latest(root)
        kind = version_kind(latest, self.schedule.full_every)
        position = self.position()
        if self.notes is not None:
            position.update(self.notes.position(latest))
        meta = dict(self.schedule.meta)
        try:
            record = publish(root, kind, self.write, position=position,
                             committed_at=committed_at, meta=meta)
        except ConfigError as exc:
            if kind != "delta":
                raise
            # The version LATEST names is another model's (other shapes or tables).
            log.warning("Trainer %s cannot write a delta into %s (%s); it writes a full "
                        "version instead.", self.trainer_name, root, exc)
            record = publish(root, "full", self.write, position=position,
                             committed_at=committed_at, meta=meta)
        if self.notes is not None:
            self.notes.published(record)
        return record
