"""Progressive validation in the trainer: a stream task's rows are scored by the parameters
before the step that trains on them, and a task's scores are handed on only when it finished
here (not a recovery dispatch, not a task taken back)."""

from __future__ import annotations

import numpy as np
import torch

from elasticps.data.batch import Batch
from elasticps.data.score_histogram import ScoreHistogram
from elasticps.proto import master_pb2
from elasticps.trainer.progressive import ProgressiveScores
from elasticps.trainer.step_worker import StepWorker
from elasticps.trainer.task_batches import TaskBatch
from elasticps.trainer.task_loop import TaskEnd
from elasticps.trainer.trainer import Trainer
from tests.unit.trainer.sgd_tables import SgdTables


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.out = torch.nn.Linear(2, 1)

    def forward(self, batch) -> torch.Tensor:
        return self.out(batch.dense).squeeze(1)


def _batch(rng: np.random.Generator) -> Batch:
    dense = rng.normal(size=(64, 2)).astype(np.float32)
    label = (dense[:, 0] > 0).astype(np.float32)
    return Batch(label=label, dense=dense, dense_names=("x", "y"))


def _probs(tables: SgdTables, batch: Batch) -> np.ndarray:
    logits = batch.dense @ tables.dense["out.weight"].reshape(2) + tables.dense["out.bias"][0]
    return 1 / (1 + np.exp(-logits.astype(np.float64)))


def test_each_batch_is_scored_by_the_model_before_its_own_update() -> None:
    torch.manual_seed(0)
    trainer = Trainer(Linear(), prefetch=False)
    tables = SgdTables(lr=5.0)
    trainer.attach(tables, None, "trainer-0")
    runner = trainer.runner()
    handed: list[tuple[master_pb2.Task, ScoreHistogram]] = []
    worker = StepWorker(runner, trainer_name="trainer-0",
                        on_scored=lambda task, scores: handed.append((task, scores)))
    rng = np.random.default_rng(1)
    expected = ScoreHistogram()
    for seq in range(3):
        batch = _batch(rng)
        last_before = _probs(tables, batch)  # the pservers' values before the step
        expected.add(batch.label, last_before)
        worker.train(TaskBatch(0, 4, 1, seq, batch, 64 * (seq + 1), partition="dt=2026-12-01"),
                     None)
    moved = np.abs(_probs(tables, batch) - last_before).max()
    worker.end_task(master_pb2.Task(task_id=4, partition="dt=2026-12-01"), TaskEnd.FINISHED)
    runner.close()
    (task, scores), = handed
    assert (task.task_id, scores.rows) == (4, 192)
    np.testing.assert_array_equal(scores.positives, expected.positives)
    np.testing.assert_array_equal(scores.negatives, expected.negatives)
    assert moved > 0.05  # the update changed the last batch's scores: the order matters


def test_only_a_task_finished_here_hands_its_scores_on() -> None:
    handed: list[int] = []
    scores = ProgressiveScores(lambda task, hist: handed.append(task.task_id))
    logits, labels = torch.tensor([0.5, -1.0]), torch.tensor([1.0, 0.0])
    for task_id in (1, 2, 3, 4):
        scores.add(task_id, logits, labels)
    scores.add(5, torch.zeros(2, 3), torch.zeros(2, 3))  # several labels: not scored
    scores.end(master_pb2.Task(task_id=1, partition="p"), finished=True)
    scores.end(master_pb2.Task(task_id=2, partition="p"), finished=False)  # taken back
    scores.end(master_pb2.Task(task_id=3, partition="p", only_batches=[0]), finished=True)
    scores.end(master_pb2.Task(task_id=4, partition=""), finished=True)  # not a stream
    scores.end(master_pb2.Task(task_id=5, partition="p"), finished=True)
    assert handed == [1]
