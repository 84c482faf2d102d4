"""In-batch recall@k against a reference written from its definition (a Python loop)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elasticps.errors import ConfigError
from elasticps.trainer.recall import InBatchRecall


def reference(batches: list[np.ndarray], k: int) -> tuple[float, float]:
    """(recall@k, mean rank): a row's rank is how many other candidates score >= its own."""
    hits, ranks = 0, []
    for scores in batches:
        for i, row in enumerate(scores):
            rank = sum(1 for j, s in enumerate(row) if j != i and s >= row[i])
            ranks.append(rank)
            hits += rank < k
    return hits / len(ranks), float(np.mean(ranks))


def test_recall_at_k_and_mean_rank_match_the_definition_with_ties_and_sampled_columns() -> None:
    rng = np.random.default_rng(8)
    batches = [rng.integers(0, 6, size=(9, 14)).astype(np.float32),  # ties; 5 sampled columns
               rng.normal(size=(4, 4)).astype(np.float32)]
    metrics = InBatchRecall(ks=(1, 3, 10))
    for scores in batches:
        metrics.add(torch.from_numpy(scores), torch.ones(scores.shape[0]), 0.0)
    result = metrics.result()
    for k in (1, 3, 10):
        assert result[f"recall_at_{k}"] == pytest.approx(reference(batches, k)[0])
    assert result["mean_rank"] == pytest.approx(reference(batches, 1)[1])
    assert 0 < result["recall_at_1"] < result["recall_at_10"] <= 1


def test_scores_without_a_candidate_per_row_are_refused() -> None:
    metrics = InBatchRecall()
    with pytest.raises(ConfigError, match=r"\[B, C >= B\] scores .* gave \(4, 3\) for 4 rows"):
        metrics.add(torch.zeros(4, 3), torch.ones(4), 0.0)
    with pytest.raises(ConfigError, match="integers >= 1"):
        InBatchRecall(ks=(0,))
