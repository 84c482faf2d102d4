"""The trainer's one task loop: ask the master for work, train it, report, finish, repeat.

Each :meth:`TaskLoop.step` takes one answer to GetTask(pass) and carries out what
:func:`~elasticps.trainer.task_policy.decide` makes of it; :meth:`TaskLoop.run` steps until the
loop is no longer RUNNING. A task's finish asks for the next task in the same call
(``finish_and_get``: one round trip and one store transaction per task boundary), and the next
step acts on that answer instead of asking again; a step with no answer in hand calls
``get_task``::

    RUNNING --ALL_DONE--> DONE        every pass is over
    RUNNING --stop set--> STOPPED     the task in hand (or handed with the last finish) is
                                      dropped: the master re-dispatches it
    RUNNING --JOB_FAILED / nonsense--> FAILED (step raises FailedPreconditionError)

Training a task: its batches come from a :data:`~elasticps.trainer.task_batches.BatchSource`
(numbered so a recomputed batch has the same ``seq``); each goes to the :class:`TaskWorker`
with the batch after it, so the worker can prefetch. Every ``report_every`` batches the worker
flushes (every push so far applied) and only then is progress reported, so the resume point a
master hands to the next holder never skips an unapplied batch; the same holds for the finish.
Meanwhile a :class:`~elasticps.trainer.heartbeat.Heartbeat` renews the task's lease by time
(a third of the lease the master names), so one slow step does not lose the task. A task the
master took back (its lease ran out) is dropped.

A :class:`~elasticps.errors.DataError` while reading a task (an unreadable or truncated chunk)
is reported with ``task_failed``: the master counts the failure, hands the task out again and,
past ``max_failures``, marks it FAILED for the pass. A bad chunk costs a task, not the trainer
(and, through ``max_failed_fraction``, the job only when too much data is bad).

The loop does not retry an absent master: the :class:`~elasticps.trainer.api.TaskSource`
(``MasterClient``) retries with a deadline, and its final error ends the loop.
"""

from __future__ import annotations

import collections
import enum
import logging
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from elasticps.errors import ConfigError, DataError, FailedPreconditionError
from elasticps.proto import master_pb2
from elasticps.retry import RetryPolicy, Sleep
from elasticps.trainer.api import TaskSource
from elasticps.trainer.heartbeat import Heartbeat, heartbeat_interval
from elasticps.trainer.task_batches import BatchSource, TaskBatch
from elasticps.trainer.task_policy import Action, Decision, decide

log = logging.getLogger(__name__)

# RETRY_LATER: poll again after 50 ms, doubling to 1 s while the answer stays "later".
IDLE_POLL = RetryPolicy(deadline=math.inf, initial_backoff=0.05, max_backoff=1.0)


class LoopState(enum.Enum):
    RUNNING = "running"
    DONE = "done"
    STOPPED = "stopped"
    FAILED = "failed"


class TaskEnd(enum.Enum):
    """How a task left this trainer's hands."""

    FINISHED = "finished"  # TaskFinished was sent after its last push was applied
    LOST = "lost"  # the master had given it to another trainer; dropped
    FAILED = "failed"  # its data could not be read; TaskFailed was sent
    STOPPED = "stopped"  # the loop was stopped mid-task; dropped


class TaskWorker:
    """What the loop drives. Every hook but :meth:`train` does nothing by default."""

    def begin_pass(self, pass_id: int) -> None:
        """A pass starts for this trainer."""

    def train(self, item: TaskBatch, next_batch: Any | None) -> None:
        """Train one batch; ``next_batch`` is the one that follows in the task, if any."""
        raise NotImplementedError

    def flush(self) -> None:
        """Return once every batch trained so far is applied (before progress is reported)."""

    def abandon(self) -> None:
        """The task is dropped: discard work prepared for batches that will not be trained,
        then flush."""

    def end_task(self, task: master_pb2.Task, how: TaskEnd) -> None:
        """The task left this trainer's hands."""

    def end_pass(self, pass_id: int) -> None:
        """The pass is over for this trainer."""

    def idle(self) -> None:
        """No task for now (a stream waits for data): called before each wait, holding no
        task."""


@dataclass
class _Tally:
    """Where a task stands in this dispatch."""

    records_done: int  # records of the task done (the resume point to report)
    reported: int = 0  # records done as of the last progress the master accepted
    batches: int = 0  # batches trained in this dispatch
    top: int = 0  # last seq + 1: the task's batch count once it ran to its end

    def add(self, item: TaskBatch) -> None:
        self.records_done = item.records_done
        self.batches += 1
        self.top = max(self.top, item.seq + 1)


class TaskLoop:
    """Trains whatever tasks the master hands trainer ``trainer_name``; step or run it."""

    def __init__(self, source: TaskSource, batches: BatchSource, worker: TaskWorker, *,
                 trainer_name: str, start_pass: int = 0, report_every: int = 20,
                 stop: threading.Event | None = None, idle: RetryPolicy = IDLE_POLL,
                 sleep: Sleep | None = None, heartbeat_s: float | None = None) -> None:
        if report_every < 1:
            raise ConfigError(f"report_every={report_every!r} must be >= 1")
        self.source = source
        self.batches = batches
        self.worker = worker
        self.trainer_name = trainer_name
        self.report_every = report_every
        self.heartbeat_s = heartbeat_s  # None: a third of the task lease the master names
        self.stop = stop or threading.Event()
        self.state = LoopState.RUNNING
        self.pass_id = start_pass
        self.last: Decision | None = None  # what the latest step decided
        self.ended: collections.Counter[TaskEnd] = collections.Counter()
        self._idle = idle.backoff()
        self._sleep: Sleep = sleep or self.stop.wait  # a stop cuts a RETRY_LATER wait short
        self._pass_open = False
        self._answer: master_pb2.GetTaskResponse | None = None  # came with the last finish

    def run(self) -> LoopState:
        """Step until DONE or STOPPED (FAILED raises)."""
        while self.step() is LoopState.RUNNING:
            pass
        return self.state

    def step(self) -> LoopState:
        """One GetTask answer (the one the last finish brought, or a fresh GetTask) and what
        it calls for; the state afterwards."""
        if self.state is not LoopState.RUNNING:
            return self.state
        if self.stop.is_set():
            self.state = LoopState.STOPPED
            return self.state
        if not self._pass_open:
            self.worker.begin_pass(self.pass_id)
            self._pass_open = True
        response, self._answer = self._answer, None
        if response is None:
            response = self.source.get_task(self.pass_id)
        decision = self.last = decide(response, self.pass_id)
        if decision.action is Action.TRAIN:
            self._idle.reset()
            self._run_task(response.task)
        elif decision.action is Action.WAIT:
            self.worker.idle()
            # The master's hint when it gives one (a pass end moments away), else the backoff.
            self._sleep(decision.retry_after_s or self._idle.next_delay() or 0.0)
        elif decision.action is Action.NEXT_PASS:
            log.info("Trainer %s: pass %d is over; moving to pass %d.", self.trainer_name,
                     self.pass_id, decision.pass_id)
            self.worker.end_pass(self.pass_id)
            self.pass_id = decision.pass_id
            self.worker.begin_pass(self.pass_id)
        elif decision.action is Action.FINISH:
            self.worker.end_pass(self.pass_id)
            self.state = LoopState.DONE
            log.info("Trainer %s: all passes are done (%s).", self.trainer_name,
                     decision.reason or "the master says so")
        else:
            self.state = LoopState.FAILED
            raise FailedPreconditionError(
                f"trainer {self.trainer_name} stops: {decision.reason}")
        if self.state is LoopState.RUNNING and self.stop.is_set():
            self.state = LoopState.STOPPED
        return self.state

    # -- one task ------------------------------------------------------------------------------

    def _run_task(self, task: master_pb2.Task) -> None:
        how = self._train(task)
        self.ended[how] += 1
        self.worker.end_task(task, how)

    def _train(self, task: master_pb2.Task) -> TaskEnd:
        tally = _Tally(task.records_done, task.records_done)
        every = self.heartbeat_s or heartbeat_interval(task.lease_seconds)
        with Heartbeat(self.source, task, every, lambda: tally.reported,
                       trainer_name=self.trainer_name) as beat:
            how = self._train_batches(task, tally, beat)
            if how is None:
                self.worker.flush()  # under the heartbeat: a flush may wait for a shard
        if how is not None:
            return how
        # What this trainer counted; the master checks it against the count it knows.
        batches = tally.batches if task.only_batches else tally.top
        if self.stop.is_set():  # stopping: ask for no more work
            accepted = self.source.task_finished(task, tally.records_done, batches)
        else:
            accepted, self._answer = self.source.finish_and_get(task, tally.records_done,
                                                                batches, self.pass_id)
        if not accepted:
            log.warning("Trainer %s finished task %d (pass %d) but the master had given it to "
                        "someone else.", self.trainer_name, task.task_id, task.pass_id)
        return TaskEnd.FINISHED

    def _train_batches(self, task: master_pb2.Task, tally: _Tally,
                       beat: Heartbeat) -> TaskEnd | None:
        """Train every batch of ``task``; how it ended early, or None once all are trained."""
        reading = self._read_ahead(task)
        while True:
            try:
                ahead = next(reading, None)  # all reading happens here, nowhere else
            except DataError as exc:
                return self._fail(task, exc)
            if ahead is None:
                return None
            item, next_batch = ahead
            self.worker.train(item, next_batch)
            tally.add(item)
            if task.only_batches:
                # A recovered batch may be applied on some shards (or an earlier layout's) and
                # not others, so each goes out alone: in geo mode a window of several could be
                # applied in part somewhere, and a shard refuses such a window whole.
                self.worker.flush()
            if beat.lost.is_set():
                log.warning("Trainer %s lost task %d (pass %d) to another trainer; dropping "
                            "it.", self.trainer_name, task.task_id, task.pass_id)
                self.worker.abandon()
                return TaskEnd.LOST
            if tally.batches % self.report_every == 0 and not self._report(task, tally):
                return TaskEnd.LOST
            if self.stop.is_set():
                self.worker.abandon()
                return TaskEnd.STOPPED

    def _read_ahead(self, task: master_pb2.Task) -> Iterator[tuple[TaskBatch, Any | None]]:
        """Each batch of ``task`` with the batch after it (None at the end)."""
        items = self.batches(task)
        current = next(items, None)
        while current is not None:
            following = next(items, None)
            yield current, (following.batch if following is not None else None)
            current = following

    def _report(self, task: master_pb2.Task, tally: _Tally) -> bool:
        """Report progress once the pushes it covers are applied; False if the task is lost."""
        self.worker.flush()
        if self.source.report_progress(task, tally.records_done):
            tally.reported = tally.records_done
            return True
        log.warning("Trainer %s lost task %d (pass %d) to another trainer; dropping it.",
                    self.trainer_name, task.task_id, task.pass_id)
        self.worker.abandon()
        return False

    def _fail(self, task: master_pb2.Task, exc: DataError) -> TaskEnd:
        log.warning("Trainer %s cannot read task %d (pass %d): %s; reporting the task failed, "
                    "so the master counts it and hands it out again.", self.trainer_name,
                    task.task_id, task.pass_id, exc)
        self.worker.abandon()
        if not self.source.task_failed(task, f"{type(exc).__name__}: {exc}"):
            log.info("Trainer %s: the master had already taken task %d back.",
                     self.trainer_name, task.task_id)
        return TaskEnd.FAILED
