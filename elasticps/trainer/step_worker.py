"""The trainer's :class:`~elasticps.trainer.task_loop.TaskWorker`: each batch through the
:class:`~elasticps.trainer.step.StepRunner`, plus what a user and the status page see of it.

It emits ``BeginPass``, ``EndIteration`` per batch and ``EndPass`` with the pass's metrics (and
the test set's, with ``evaluate``), keeps :class:`LoopStats`, and hands them to ``on_progress``
after the first batch, every ``publish_every`` seconds and at the end. ``flush`` is the
runner's ``wait_pushed``, so the loop reports progress only for applied pushes. With
``on_scored``, a stream task's batches are scored before they are trained on (progressive
validation, progressive.py) and a finished task's scores handed on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from elasticps.proto import common_pb2, master_pb2
from elasticps.trainer.api import ParameterClient
from elasticps.trainer.events import BeginPass, EndIteration, EndPass, Event
from elasticps.trainer.progressive import OnScored, ProgressiveScores
from elasticps.trainer.step import StepRunner
from elasticps.trainer.task_batches import TaskBatch, batch_length
from elasticps.trainer.task_loop import TaskEnd, TaskWorker

log = logging.getLogger(__name__)


@dataclass
class LoopStats:
    samples: int = 0
    batches: int = 0
    tasks: int = 0
    train_s: float = 0.0  # in the training loop, pass-end test evaluations left out
    loss_ewma: float | None = None
    pass_id: int = 0
    pass_metrics: list[dict[str, float]] = field(default_factory=list)
    metrics_by_pass: dict[str, dict[str, float]] = field(default_factory=dict)  # pass -> EndPass's
    timers: dict[str, float] = field(default_factory=dict)  # where the step time went
    samples_per_s: float = 0.0  # over the last publishing interval
    headline: list[str] = field(default_factory=list)  # the metrics a job's final line shows


class StepWorker(TaskWorker):
    """Trains the loop's batches on the pservers through ``runner``."""

    def __init__(
        self,
        runner: StepRunner,
        *,
        trainer_name: str,
        event_handler: Callable[[Event], None] | None = None,
        on_progress: Callable[[LoopStats], None] | None = None,
        evaluate: Callable[[], dict[str, float]] | None = None,
        publish_every: float = 2.0,
        sync_rounds: ParameterClient | None = None,
        on_scored: OnScored | None = None,
    ) -> None:
        self.runner = runner
        self.trainer_name = trainer_name
        self.handler = event_handler or (lambda event: None)
        self.on_progress = on_progress or (lambda stats: None)
        self.evaluate = evaluate  # test-set metrics at each pass end (``test_*`` in EndPass)
        self.publish_every = publish_every
        # Sync mode: the pservers' step barriers wait for this trainer from its first batch of
        # a task to the task's end (then it may wait for work or evaluate: nobody waits).
        self.sync_rounds = sync_rounds
        self._in_round = False
        self.stats = LoopStats()
        self._metrics = runner.objective.metrics()
        self._batch_in_pass = 0
        self._started = self._last_publish = time.monotonic()
        self._published_samples = 0
        self._evaluating_s = 0.0  # pass-end test evaluations: not training time
        binary = runner.objective.kind == "binary"
        self.scores = ProgressiveScores(on_scored) if on_scored and binary else None

    def begin_pass(self, pass_id: int) -> None:
        self.stats.pass_id = pass_id
        self._metrics, self._batch_in_pass = self.runner.objective.metrics(), 0
        self.handler(BeginPass(pass_id))

    def train(self, item: TaskBatch, next_batch: Any | None) -> None:
        if self.sync_rounds is not None and not self._in_round:
            self.sync_rounds.join_round(self.trainer_name)
            self._in_round = True
        ref = common_pb2.BatchRef(pass_id=item.pass_id, task_id=item.task_id, seq=item.seq,
                                  trainer=self.trainer_name, step=item.step,
                                  event_time=item.event_time)
        result = self.runner.run(item.batch, ref, next_batch)
        size = batch_length(item.batch)
        self._metrics.add(result.output, result.label, result.loss)
        if self.scores is not None and item.partition:
            self.scores.add(item.task_id, result.output, result.label)
        self._count(size, result.loss)
        first = self.stats.batches == 1
        if first:  # how long a job takes to start shows in the role logs
            log.info("Trainer %s trained its first batch (pass %d, task %d).",
                     self.trainer_name, item.pass_id, item.task_id)
        self.handler(EndIteration(self.stats.pass_id, self._batch_in_pass, result.loss,
                                  {"samples": float(size)}, item.task_id, item.seq))
        self._batch_in_pass += 1
        # The first batch is published at once: the job is seen training from its first step
        # (the launcher starts its standby masters then).
        if first or time.monotonic() - self._last_publish >= self.publish_every:
            self._publish()

    def flush(self) -> None:
        self.runner.flush()

    def abandon(self) -> None:
        self.runner.drop_prefetch()
        self.runner.flush()

    def end_task(self, task: master_pb2.Task, how: TaskEnd) -> None:
        if how is TaskEnd.FINISHED:
            self.stats.tasks += 1
        if self.scores is not None:
            self.scores.end(task, how is TaskEnd.FINISHED)
        if self.sync_rounds is not None and self._in_round:
            self._in_round = False
            self.sync_rounds.leave_round(self.trainer_name)

    def end_pass(self, pass_id: int) -> None:
        result = self._metrics.result()
        self.stats.headline = self._metrics.headline(
            name for name in result if name not in ("cost", "samples"))
        if self.evaluate is not None:
            # Every push of this trainer was applied (tasks end with a flush), so this is the
            # model as of the pass end, give or take the other trainers' in-flight batches.
            started = time.monotonic()
            test = self.evaluate()
            result.update({f"test_{k}": v for k, v in test.items() if k != "cost"})
            result["test_eval_s"] = time.monotonic() - started
            self._evaluating_s += result["test_eval_s"]
        self.stats.pass_metrics.append(result)
        self.stats.metrics_by_pass[str(pass_id)] = result
        self._publish()  # the pass's metrics reach the status page now, not a batch later
        self.handler(EndPass(pass_id, result))

    def finish(self) -> LoopStats:
        """The final stats, published once more."""
        self.stats.timers = {k: round(v, 3) for k, v in self.runner.timers.items()}
        self._publish()
        return self.stats

    def _publish(self) -> None:
        now = time.monotonic()
        if now > self._last_publish:
            self.stats.samples_per_s = ((self.stats.samples - self._published_samples)
                                        / (now - self._last_publish))
        self._last_publish, self._published_samples = now, self.stats.samples
        self.stats.train_s = now - self._started - self._evaluating_s
        self.on_progress(self.stats)

    def _count(self, size: int, loss: float) -> None:
        self.stats.samples += size
        self.stats.batches += 1
        ewma = self.stats.loss_ewma
        self.stats.loss_ewma = loss if ewma is None else 0.95 * ewma + 0.05 * loss
