"""Pass metrics: AUC and log loss over (probability, label) pairs a trainer accumulated."""

from __future__ import annotations

import math

import numpy as np


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half); NaN when only one class is present."""
    labels = np.asarray(labels).reshape(-1) > 0.5
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    positives = int(labels.sum())
    negatives = labels.size - positives
    if positives == 0 or negatives == 0:
        return math.nan
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    ranks = np.empty(scores.size, dtype=np.float64)
    # Average ranks over runs of equal scores.
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [scores.size]])
    average = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(average, ends - starts)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def log_loss(labels: np.ndarray, probs: np.ndarray, eps: float = 1e-7) -> float:
    labels = np.asarray(labels, dtype=np.float64).reshape(-1)
    probs = np.clip(np.asarray(probs, dtype=np.float64).reshape(-1), eps, 1 - eps)
    if labels.size == 0:
        return math.nan
    return float(-np.mean(labels * np.log(probs) + (1 - labels) * np.log(1 - probs)))


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
        return {"auc": roc_auc(labels, probs), "logloss": log_loss(labels, probs),
                "cost": self.loss_sum / max(self.samples, 1), "samples": float(self.samples)}
