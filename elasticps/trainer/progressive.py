"""Progressive validation ("test, then train") on a stream: every row is scored by the model
before the model trains on it, and the scores are counted per partition.

The training step's own forward pass is that score: its output comes from the parameters the
step pulled, before the step's update (so nothing is computed twice). Per stream task a
:class:`~elasticps.data.score_histogram.ScoreHistogram` of the binary predictions grows; when
the task finishes it is handed on (the trainer writes it to the store, keyed by partition and
task, so the master sums a partition's tasks from every trainer: master/progressive.py). A
task taken back from this trainer (lost, failed, stopped) hands on nothing: its next holder
scores it from its resume point, so under faults a partition's figure may count fewer rows than
it holds (the figure's ``rows`` says how many), never a row twice. A recovery dispatch
(``only_batches``) recomputes batches trained before and is not scored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from elasticps.data.score_histogram import ScoreHistogram
from elasticps.proto import master_pb2

# A finished stream task's scores, handed on (trainer.py writes them to the store).
OnScored = Callable[[master_pb2.Task, ScoreHistogram], None]


class ProgressiveScores:
    """Scores of the stream tasks in this trainer's hands (see the module docstring)."""

    def __init__(self, on_scored: OnScored) -> None:
        self.on_scored = on_scored
        self._by_task: dict[int, ScoreHistogram] = {}

    def add(self, task_id: int, output: Any, label: torch.Tensor) -> None:
        """One batch's outputs (logits, one per label entry) and 0/1 labels; outputs of any
        other shape (a user's own loss) are not scores and are left out."""
        if not isinstance(output, torch.Tensor) or output.numel() != label.numel():
            return
        if label.dim() > 1 and label.shape[-1] != 1:  # several labels: no one AUC per row
            return
        probs = torch.sigmoid(output.detach().reshape(-1).float()).numpy()
        labels = label.detach().reshape(-1).numpy()
        self._by_task.setdefault(task_id, ScoreHistogram()).add(labels, probs.astype(np.float64))

    def end(self, task: master_pb2.Task, finished: bool) -> None:
        """The task left this trainer: hand its scores on if it finished here."""
        scores = self._by_task.pop(task.task_id, None)
        if finished and scores is not None and scores.rows and task.partition \
                and not task.only_batches:
            self.on_scored(task, scores)
