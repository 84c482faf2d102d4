"""Scores of binary predictions as a histogram that adds up across trainers and tasks.

Progressive validation scores each partition of a stream with the model before it trains on it;
the partition's batches are trained by several trainers, task by task, so its AUC is computed
from counts that add: per score bucket, how many positives and negatives scored there. Buckets
are even steps of the logit (``BUCKETS`` over ``[-LOGIT_RANGE, LOGIT_RANGE]``, the ends open),
so the small probabilities of a click model are as finely told apart as the middling ones.

:meth:`ScoreHistogram.auc` is the Mann-Whitney statistic over the buckets, ties within a bucket
counting one half: it equals :func:`elasticps.data.metrics.auc` of the scores rounded to their
buckets, and differs from the exact AUC only by pairs that share a bucket (a logit step of
1/64).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from elasticps.errors import DataError

BUCKETS = 2048
LOGIT_RANGE = 16.0
_STEP = 2 * LOGIT_RANGE / BUCKETS
MAX_ROWS = 1 << 53  # counts stay exact as JSON numbers


def buckets_of(probs: np.ndarray) -> np.ndarray:
    """The bucket of each probability (by its logit; 0 and 1 fall in the end buckets)."""
    p = np.clip(np.asarray(probs, dtype=np.float64).ravel(), 1e-300, 1.0 - 1e-16)
    logits = np.log(p) - np.log1p(-p)
    return np.clip(np.floor((logits + LOGIT_RANGE) / _STEP), 0, BUCKETS - 1).astype(np.int64)


class ScoreHistogram:
    """Positives and negatives per score bucket (see the module docstring)."""

    def __init__(self) -> None:
        self.positives = np.zeros(BUCKETS, np.int64)
        self.negatives = np.zeros(BUCKETS, np.int64)

    @property
    def rows(self) -> int:
        return int(self.positives.sum() + self.negatives.sum())

    def add(self, labels: np.ndarray, probs: np.ndarray) -> None:
        """Count rows of 0/1 ``labels`` scored ``probs`` (rows with a NaN score are left out)."""
        y = np.asarray(labels).ravel()
        p = np.asarray(probs, dtype=np.float64).ravel()
        if y.shape != p.shape:
            raise DataError(f"labels ({y.size}) and scores ({p.size}) differ in length")
        keep = ~np.isnan(p)
        y, p = y[keep], p[keep]
        positive = y == 1
        if not np.all(positive | (y == 0)):
            raise DataError(f"labels must be 0 or 1, found {y[~(positive | (y == 0))][0]!r}")
        at = buckets_of(p)
        self.positives += np.bincount(at[positive], minlength=BUCKETS)
        self.negatives += np.bincount(at[~positive], minlength=BUCKETS)

    def merge(self, other: ScoreHistogram) -> None:
        self.positives += other.positives
        self.negatives += other.negatives

    def auc(self) -> float:
        """ROC AUC over the buckets (ties within one count one half); NaN without both
        classes."""
        pos, neg = self.positives.astype(np.float64), self.negatives.astype(np.float64)
        n_pos, n_neg = pos.sum(), neg.sum()
        if n_pos == 0 or n_neg == 0:
            return math.nan
        below = np.cumsum(neg) - neg  # negatives in lower buckets
        return float((pos * (below + 0.5 * neg)).sum() / (n_pos * n_neg))

    def to_json(self) -> dict[str, Any]:
        """``{"buckets": [...], "positives": [...], "negatives": [...]}`` of the buckets that
        hold a row."""
        used = np.flatnonzero(self.positives + self.negatives)
        return {"buckets": used.tolist(), "positives": self.positives[used].tolist(),
                "negatives": self.negatives[used].tolist()}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], what: str) -> ScoreHistogram:
        """The histogram :meth:`to_json` wrote; a DataError naming ``what`` when it is not
        one."""
        out = cls()
        try:
            buckets, pos, neg = (doc["buckets"], doc["positives"], doc["negatives"])
            if not (isinstance(buckets, list) and isinstance(pos, list)
                    and isinstance(neg, list) and len(buckets) == len(pos) == len(neg)):
                raise TypeError("three lists of one length")
            at = np.asarray(buckets, dtype=np.int64)
            p, n = np.asarray(pos, dtype=np.int64), np.asarray(neg, dtype=np.int64)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise DataError(f"{what} is not a score histogram: {exc!r:.200}") from exc
        bad_buckets = bool(at.size) and bool(
            at.min() < 0 or at.max() >= BUCKETS or np.unique(at).size != at.size)
        if bad_buckets or (p < 0).any() or (n < 0).any() or int(p.sum() + n.sum()) > MAX_ROWS:
            raise DataError(f"{what} is not a score histogram: buckets 0..{BUCKETS - 1} once "
                            "each, counts not negative")
        out.positives[at], out.negatives[at] = p, n
        return out
