"""Exact ROC AUC and log loss in numpy, for metrics and for the planted model's best AUC.

``auc`` is the Mann-Whitney statistic: the probability that a random positive scores above a
random negative, counting ties as one half. It sorts once (O(n log n)) and gives tied scores
their average rank, so it equals the brute-force pairwise count exactly.
"""

from __future__ import annotations

import numpy as np

from elasticps.errors import DataError


def _check(labels: np.ndarray, scores: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if y.shape != s.shape:
        raise DataError(f"labels ({y.shape[0]}) and {what} ({s.shape[0]}) differ in length")
    positive = y == 1
    if not np.all(positive | (y == 0)):
        bad = y[~(positive | (y == 0))][0]
        raise DataError(f"labels must be 0 or 1, found {bad!r}")
    if np.isnan(s).any():
        raise DataError(f"{what} contain NaN")
    return positive, s


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Exact ROC AUC of ``scores`` for binary ``labels``; NaN when only one class is present."""
    positive, s = _check(labels, scores, "scores")
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="stable")
    sorted_scores = s[order]
    sorted_pos = positive[order]
    # Groups of equal scores; each member gets the group's average 1-based rank.
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], s.size]
    avg_rank = (starts + ends + 1) / 2.0
    pos_per_group = np.add.reduceat(sorted_pos.astype(np.int64), starts)
    rank_sum = float(np.dot(pos_per_group.astype(np.float64), avg_rank))
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def log_loss(labels: np.ndarray, probs: np.ndarray, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy of ``probs`` (clipped to [eps, 1-eps]) for binary ``labels``."""
    positive, p = _check(labels, probs, "probabilities")
    if p.size == 0:
        return float("nan")
    p = np.clip(p, eps, 1.0 - eps)
    return float(-np.mean(np.where(positive, np.log(p), np.log1p(-p))))
