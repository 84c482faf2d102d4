"""Score histograms: their AUC is the exact AUC of the scores rounded to their buckets, they
add up, and a stored one that is not a histogram is refused."""

from __future__ import annotations

import numpy as np
import pytest

from elasticps.data.metrics import auc
from elasticps.data.score_histogram import BUCKETS, ScoreHistogram, buckets_of
from elasticps.errors import DataError


def test_the_auc_is_the_exact_auc_of_the_bucketed_scores_and_halves_add_up() -> None:
    rng = np.random.default_rng(3)
    probs = 1 / (1 + np.exp(-rng.normal(-3, 2, 5000)))  # a click model's small probabilities
    labels = (rng.random(5000) < probs).astype(np.float32)
    whole, first, second = ScoreHistogram(), ScoreHistogram(), ScoreHistogram()
    whole.add(labels, probs)
    first.add(labels[:1234], probs[:1234])
    second.add(labels[1234:], probs[1234:])
    first.merge(second)
    assert whole.rows == first.rows == 5000
    assert whole.auc() == pytest.approx(auc(labels, buckets_of(probs)), abs=1e-12)
    assert first.auc() == whole.auc()
    assert abs(whole.auc() - auc(labels, probs)) < 2e-3  # a logit step of 1/64 apart
    assert np.isnan(ScoreHistogram().auc())


def test_a_histogram_round_trips_and_a_foreign_one_is_refused() -> None:
    hist = ScoreHistogram()
    hist.add(np.array([1, 0, 0]), np.array([0.9, 0.1, 0.0]))
    again = ScoreHistogram.from_json(hist.to_json(), "it")
    np.testing.assert_array_equal(again.positives, hist.positives)
    np.testing.assert_array_equal(again.negatives, hist.negatives)
    for bad in ({"buckets": [BUCKETS], "positives": [1], "negatives": [0]},
                {"buckets": [1, 1], "positives": [1, 1], "negatives": [0, 0]},
                {"buckets": [1], "positives": [-1], "negatives": [0]},
                {"buckets": [1], "positives": [1]}, {"buckets": "x", "positives": [],
                                                     "negatives": []}):
        with pytest.raises(DataError, match="task 7's scores is not a score histogram"):
            ScoreHistogram.from_json(bad, "task 7's scores")
    with pytest.raises(DataError, match="labels must be 0 or 1"):
        hist.add(np.array([2]), np.array([0.5]))
