"""Training time (and so samples per second) leaves out the pass-end test evaluation: scoring
the test set is not training, and the PyTorch loop the benchmark compares with does not time
it either."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from elasticps.trainer import step_worker
from elasticps.trainer.objective import Objective
from elasticps.trainer.step_worker import StepWorker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_pass_end_evaluation_is_not_training_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    # Only step_worker's clock: the process's time.monotonic stays real for every other thread.
    monkeypatch.setattr(step_worker, "time", SimpleNamespace(monotonic=clock))
    runner = SimpleNamespace(objective=Objective("binary"), timers={})

    def evaluate() -> dict[str, float]:
        clock.now += 30.0  # scoring the test set takes 30 s
        return {"auc": 0.75}

    worker = StepWorker(runner, trainer_name="t", evaluate=evaluate)  # type: ignore[arg-type]
    clock.now += 10.0  # 10 s of training
    worker.end_pass(0)
    assert worker.stats.metrics_by_pass["0"]["test_eval_s"] == 30.0
    clock.now += 5.0  # the next pass trains 5 s more
    assert worker.finish().train_s == 15.0


def test_the_first_batch_is_published_at_once_then_every_interval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A job is seen training from its first batch (the launcher starts its standby masters
    then), not a publishing interval later."""
    import numpy as np
    import torch

    from elasticps.trainer.task_batches import TaskBatch

    clock = Clock()
    monkeypatch.setattr(step_worker, "time", SimpleNamespace(monotonic=clock))
    result = SimpleNamespace(output=torch.zeros(4), label=torch.tensor([0.0, 1.0, 0.0, 1.0]),
                             loss=0.7)
    runner = SimpleNamespace(objective=Objective("binary"), timers={},
                             run=lambda batch, ref, following: result)
    published: list[int] = []
    worker = StepWorker(runner, trainer_name="t", publish_every=2.0,  # type: ignore[arg-type]
                        on_progress=lambda stats: published.append(stats.batches))
    worker.begin_pass(0)
    for seq in range(3):
        worker.train(TaskBatch(0, 0, 0, seq, np.zeros(4), 4 * (seq + 1)), None)
        clock.now += 0.5
    clock.now += 1.0  # 2 s after the first batch
    worker.train(TaskBatch(0, 0, 0, 3, np.zeros(4), 16), None)
    assert published == [1, 4]
