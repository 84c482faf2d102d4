"""Pass metrics: AUC and log loss (the data layer's exact ones) over what a trainer saw."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from elasticps.data.auc import auc, log_loss
from elasticps.errors import DataError


def _safe(metric: Callable[[np.ndarray, np.ndarray], float], labels: np.ndarray,
          probs: np.ndarray) -> float:
    try:
        return float(metric(labels, probs))
    except DataError:  # NaN predictions (a diverged model): report NaN, do not crash training
        return math.nan


class MetricAccumulator:
    """Collects predictions of one pass (capped, keeping the most recent) for AUC/log loss."""

    def __init__(self, cap: int = 2_000_000) -> None:
        self.cap = cap
        self._labels: list[np.ndarray] = []
        self._probs: list[np.ndarray] = []
        self._count = 0
        self.samples = 0
        self.loss_sum = 0.0

    def add(self, labels: np.ndarray, probs: np.ndarray, loss: float) -> None:
        self._labels.append(np.asarray(labels, dtype=np.float32).reshape(-1))
        self._probs.append(np.asarray(probs, dtype=np.float32).reshape(-1))
        self._count += self._labels[-1].size
        self.samples += self._labels[-1].size
        self.loss_sum += loss * self._labels[-1].size
        while self._count - self._labels[0].size >= self.cap:
            self._count -= self._labels.pop(0).size
            self._probs.pop(0)

    def result(self) -> dict[str, float]:
        if not self._labels:
            return {"samples": 0.0}
        labels = np.concatenate(self._labels)
        probs = np.concatenate(self._probs)
        return {"auc": _safe(auc, labels, probs), "logloss": _safe(log_loss, labels, probs),
                "cost": self.loss_sum / max(self.samples, 1), "samples": float(self.samples)}
