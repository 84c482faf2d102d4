"""The trainer's Prometheus metrics, all read at scrape time from counters the step runner and
the task worker keep anyway, so training pays nothing for them:

``elasticps_trainer_samples_total``, ``elasticps_trainer_batches_total``,
``elasticps_trainer_tasks_total``, ``elasticps_trainer_samples_per_second`` (over the last
publishing interval, 2 s), ``elasticps_trainer_loss`` (moving average),
``elasticps_trainer_pass`` (1-based, as the master's),
``elasticps_trainer_step_phase_seconds_total{phase}`` (forward,
backward, pull_wait, push_wait, load_params, collect_grads: divide by the batches for the mean
step time by phase), ``elasticps_trainer_staleness_batches`` (the trainer's own batches whose
updates the last step's parameters lacked: 1 with prefetch, plus the batches since the last
dense pull) with ``elasticps_trainer_staleness_batches_sum`` (over every step), and
``elasticps_trainer_pass_metric{metric}`` (the last finished pass's ``EndPass`` metrics).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from elasticps.telemetry.exporter import CallbackCollector
from elasticps.trainer.step import StepRunner
from elasticps.trainer.step_worker import LoopStats


class Training(Protocol):
    """What the collector reads: the worker's stats and its step runner."""

    stats: LoopStats
    runner: StepRunner


def register_trainer_metrics(registry: CollectorRegistry,
                             training: Callable[[], Training | None]) -> None:
    registry.register(CallbackCollector(lambda: _collect(training())))


def _collect(training: Training | None) -> Iterable[Metric]:
    if training is None:
        return
    stats, runner = training.stats, training.runner
    yield _counter("samples", "Samples trained", float(stats.samples))
    yield _counter("batches", "Batches trained (steps)", float(stats.batches))
    yield _counter("tasks", "Tasks finished", float(stats.tasks))
    yield _gauge("samples_per_second", "Samples trained per second over the last interval",
                 stats.samples_per_s)
    if stats.loss_ewma is not None and math.isfinite(stats.loss_ewma):
        yield _gauge("loss", "Training loss, moving average", stats.loss_ewma)
    yield _gauge("pass", "The pass being trained, 1-based (1 during the first pass)",
                 float(stats.pass_id + 1))
    phases = CounterMetricFamily("elasticps_trainer_step_phase_seconds", "Seconds spent per "
                                 "phase of the training step", labels=["phase"])
    for phase, seconds in dict(runner.timers).items():
        phases.add_metric([phase], seconds)
    yield phases
    yield _gauge("staleness_batches", "This trainer's own batches whose updates the last "
                 "step's parameters lacked", float(runner.staleness))
    yield _counter("staleness_batches_sum", "staleness_batches summed over every step",
                   float(runner.staleness_sum))
    if runner.dense_chain is not None:
        yield _counter("dense_pulls_skipped", "Dense pulls answered 'unchanged' (this trainer's "
                       "own updates were the only ones applied)", float(runner.dense_chain.skipped))
    if stats.pass_metrics:
        last = GaugeMetricFamily("elasticps_trainer_pass_metric", "Metrics of the last finished "
                                 "pass (EndPass)", labels=["metric"])
        for name, value in sorted(stats.pass_metrics[-1].items()):
            if isinstance(value, int | float) and math.isfinite(value):
                last.add_metric([name], float(value))
        yield last


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"elasticps_trainer_{name}", help_text, value=value)


def _counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(f"elasticps_trainer_{name}", help_text, value=value)
