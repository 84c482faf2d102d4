"""The training loop: ask the master for tasks, train their batches, report, finish, repeat.

Pass protocol (master.proto): ``get_task(pass)`` answers TASK, RETRY_LATER (others hold the rest
of the pass), PASS_OVER (the pass ended; move on to ``pass_id``), ALL_DONE or JOB_FAILED. Each
batch is pushed with ``BatchRef(pass, task, seq)``; ``seq`` numbers the batches of a task from 0
in chunk order, so a recomputed batch (a task resumed from ``records_done`` or re-opened with
``only_batches``) carries the same reference as the first time.

Progress is reported only after the pushes it covers were applied, so the resume point a
master hands to the next holder of the task never skips an unapplied batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from elasticps.errors import FailedPreconditionError, UnavailableError
from elasticps.proto import common_pb2, master_pb2
from elasticps.trainer.api import TaskSource
from elasticps.trainer.events import BeginPass, EndIteration, EndPass, Event
from elasticps.trainer.metrics import MetricAccumulator
from elasticps.trainer.step import StepRunner

log = logging.getLogger(__name__)

# task -> iterator of (seq, records of the task done after this batch, batch), from the task's
# resume point on (elasticps.master.reader.task_batches numbers them).
BatchSource = Callable[[master_pb2.Task], Iterator[tuple[int, int, Any]]]


@dataclass
class LoopStats:
    samples: int = 0
    batches: int = 0
    tasks: int = 0
    train_s: float = 0.0
    loss_ewma: float | None = None
    pass_id: int = 0
    pass_metrics: list[dict[str, float]] = field(default_factory=list)
    timers: dict[str, float] = field(default_factory=dict)  # where the step time went


def _lookahead(items: Iterator[tuple[int, int, Any]]) -> Iterator[tuple[tuple[int, int, Any], Any]]:
    """Each item with the next item's batch (None at the end), for prefetching."""
    current = next(items, None)
    while current is not None:
        following = next(items, None)
        yield current, (following[2] if following is not None else None)
        current = following


class TrainingLoop:
    def __init__(
        self,
        runner: StepRunner,
        master: TaskSource,
        batches: BatchSource,
        *,
        trainer_name: str,
        num_passes: int,
        event_handler: Callable[[Event], None] | None = None,
        progress_every: int = 20,
        on_progress: Callable[[LoopStats], None] | None = None,
        stop: threading.Event | None = None,
        evaluate: Callable[[], dict[str, float]] | None = None,
    ) -> None:
        self.runner = runner
        self.master = master
        self.batches = batches
        self.trainer_name = trainer_name
        self.num_passes = num_passes
        self.handler = event_handler or (lambda event: None)
        self.progress_every = progress_every
        self.on_progress = on_progress or (lambda stats: None)
        self.stop = stop or threading.Event()
        self.evaluate = evaluate  # test-set metrics at each pass end (``test_*`` in EndPass)
        self.stats = LoopStats()
        self._started = self._last_publish = time.monotonic()

    def run(self) -> LoopStats:
        pass_id = 0
        metrics = MetricAccumulator()
        self.handler(BeginPass(pass_id))
        batch_in_pass = 0
        wait = 0.05
        self._started = time.monotonic()
        while not self.stop.is_set():
            response = self._get_task(pass_id)
            outcome = response.outcome
            if outcome == master_pb2.GetTaskResponse.TASK:
                wait = 0.05
                batch_in_pass = self._train_task(response.task, pass_id, batch_in_pass, metrics)
            elif outcome == master_pb2.GetTaskResponse.RETRY_LATER:
                self.stop.wait(wait)
                wait = min(wait * 2, 1.0)
            elif outcome == master_pb2.GetTaskResponse.PASS_OVER:
                self._end_pass(pass_id, metrics)
                pass_id = max(response.pass_id, pass_id + 1)
                metrics, batch_in_pass = MetricAccumulator(), 0
                self.stats.pass_id = pass_id
                self.handler(BeginPass(pass_id))
            elif outcome == master_pb2.GetTaskResponse.ALL_DONE:
                self._end_pass(pass_id, metrics)
                break
            elif outcome == master_pb2.GetTaskResponse.JOB_FAILED:
                raise FailedPreconditionError(
                    f"the master failed the job: {response.reason}")
            else:
                raise FailedPreconditionError(
                    f"the master answered GetTask with unknown outcome {outcome}")
        self.stats.train_s = time.monotonic() - self._started
        self.stats.timers = {k: round(v, 3) for k, v in self.runner.timers.items()}
        self.on_progress(self.stats)
        return self.stats

    def _get_task(self, pass_id: int) -> master_pb2.GetTaskResponse:
        delay = 0.2
        while True:
            try:
                return self.master.get_task(pass_id)
            except UnavailableError as exc:
                log.warning("Trainer %s cannot reach the master (%s); retrying in %.1fs.",
                            self.trainer_name, exc, delay)
                if self.stop.wait(delay):
                    raise
                delay = min(delay * 2, 5.0)

    def _end_pass(self, pass_id: int, metrics: MetricAccumulator) -> None:
        result = metrics.result()
        if self.evaluate is not None:
            # Every push of this trainer was applied (tasks end with wait_pushed), so this is the
            # model as of the pass end, give or take the other trainers' in-flight batches.
            started = time.monotonic()
            test = self.evaluate()
            result.update({f"test_{k}": v for k, v in test.items() if k != "cost"})
            result["test_eval_s"] = time.monotonic() - started
        self.stats.pass_metrics.append(result)
        self.handler(EndPass(pass_id, result))

    def _train_task(self, task: master_pb2.Task, pass_id: int, batch_in_pass: int,
                    metrics: MetricAccumulator) -> int:
        records = task.records_done
        batches = 0
        top = 0  # last seq + 1: the task's batch count once it ran to its end
        last_report = 0
        for (seq, done, batch), next_batch in _lookahead(self.batches(task)):
            size = len(batch)
            ref = common_pb2.BatchRef(pass_id=task.pass_id, task_id=task.task_id, seq=seq,
                                      trainer=self.trainer_name)
            result = self.runner.run(batch, ref, next_batch)
            records = done
            batches += 1
            top = max(top, seq + 1)
            metrics.add(result.labels, result.probs, result.loss)
            self._count(size, result.loss)
            self.handler(EndIteration(pass_id, batch_in_pass, result.loss,
                                      {"samples": float(size)}, task.task_id, seq))
            batch_in_pass += 1
            if batches - last_report >= self.progress_every:
                self.runner.wait_pushed()
                last_report = batches
                if not self.master.report_progress(task, records):
                    log.warning("Trainer %s lost task %d (pass %d) to another trainer; "
                                "dropping it.", self.trainer_name, task.task_id, task.pass_id)
                    self.runner.drop_prefetch()
                    self.runner.wait_pushed()
                    return batch_in_pass
            if time.monotonic() - self._last_publish >= 2.0:
                self._last_publish = time.monotonic()
                self.stats.train_s = time.monotonic() - self._started
                self.on_progress(self.stats)
            if self.stop.is_set():
                self.runner.drop_prefetch()
                self.runner.wait_pushed()
                return batch_in_pass
        self.runner.wait_pushed()
        # The master expects seqs 0..n-1 of a finished task on every shard (pass-end
        # reconciliation): report the task's batch count, not just this dispatch's batches.
        if not self.master.task_finished(task, records, batches if task.only_batches else top):
            log.warning("Trainer %s finished task %d (pass %d) but the master had given it to "
                        "someone else.", self.trainer_name, task.task_id, task.pass_id)
        self.stats.tasks += 1
        return batch_in_pass

    def _count(self, size: int, loss: float) -> None:
        self.stats.samples += size
        self.stats.batches += 1
        ewma = self.stats.loss_ewma
        self.stats.loss_ewma = loss if ewma is None else 0.95 * ewma + 0.05 * loss
