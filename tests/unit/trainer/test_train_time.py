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
